//! Scroll contexts: searches whose searcher snapshots, queries and cursor outlive the request,
//! so that later pages continue them over the same point-in-time view of every index.
//!
//! A [`ScrollStore`] holds the node's open scroll contexts by id. [`ScrollStore::open`] runs
//! the first page of a search and keeps what it resolved: one tantivy `Searcher` per index
//! (documents indexed, updated or deleted afterwards stay invisible to the scroll), the built
//! queries and sort columns, and the page request. [`ScrollStore::next_page`] collects only the
//! hits strictly after the previous page's last hit under the search's sort order ("search
//! after"), so each page is one pass over the matching documents — and in `_doc` order only as
//! much of it as the page needs. `hits.total` and `hits.max_score` are those of the first page
//! and aggregations come with the first page only, as in OpenSearch.
//!
//! Contexts are bounded in number ([`ScrollLimits::max_open`], OpenSearch's
//! `search.max_open_scroll_context`) and expire their keep-alive after their last use; the
//! engine's periodic refresher calls [`ScrollStore::reap_expired`], and a continuation that
//! finds its context expired treats it as gone even before the reaper ran.
//!
//! Errors are OpenSearch's, with its wording:
//! - an unknown, expired or cleared id: 404 `search_phase_execution_exception` ("all shards
//!   failed") caused by `search_context_missing_exception` `No search context found for id [N]`;
//! - an id that is not one of ours: 400 `illegal_argument_exception` `Cannot parse scroll id`;
//! - a keep-alive over [`ScrollLimits::max_keep_alive`]: 400, a search phase failure caused by
//!   `illegal_argument_exception` `Keep alive for request (2d) is too large. …`;
//! - one context more than the limit: 429, a search phase failure caused by
//!   `rejected_execution_exception` `Trying to create too many scroll contexts. …`. OpenSearch's
//!   `SearchService` throws `OpenSearchRejectedExecutionException` there, whose status is 429
//!   `TOO_MANY_REQUESTS`, and the search fails with all its shards, so the response is the
//!   search phase failure with that root cause and status;
//! - `from` or `size: 0` on a scroll search: 400 `action_request_validation_exception`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use parking_lot::{Mutex, RwLock};
use serde_json::{Map, Value};

use crate::error::{EngineError, ErrorCode, Result};
use crate::index::IndexHandle;
use crate::lookup::TermsLookups;
use crate::resolve::Target;
use crate::search::{self, Candidate, Prepared, SearchContext, SearchRequest, TrackTotalHits};

/// OpenSearch's default `search.max_open_scroll_context`: enough for many concurrent scrolls
/// while bounding the searchers (and their segment files) a node keeps open for them.
pub const DEFAULT_MAX_OPEN_SCROLL_CONTEXT: usize = 500;
/// OpenSearch's default `search.default_keep_alive`: what a continuation that names no
/// keep-alive renews its scroll for (`SearchService.getScrollKeepAlive`).
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(5 * 60);
/// OpenSearch's default `search.max_keep_alive`: one day, so a forgotten scroll does not pin
/// old segments for longer.
pub const DEFAULT_MAX_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);

/// The setting key of the open-context limit, named in its error.
const MAX_OPEN_SCROLL_CONTEXT_KEY: &str = "search.max_open_scroll_context";
/// The setting key of the keep-alive limit, named in its error.
const MAX_KEEP_ALIVE_KEY: &str = "search.max_keep_alive";
/// Prefix of every scroll id's payload, so that an id of some other system fails to parse
/// instead of naming a context by accident.
const SCROLL_ID_PREFIX: &str = "sluice";

/// URL-safe base64 without padding for the ids we make; decoding accepts padding too, as
/// OpenSearch's own ids carry it.
const SCROLL_ID_CODEC: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The limits of a [`ScrollStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScrollLimits {
    /// The most contexts open at once (`search.max_open_scroll_context`).
    pub max_open: usize,
    /// The longest keep-alive a scroll may ask for (`search.max_keep_alive`).
    pub max_keep_alive: Duration,
    /// What a continuation without a keep-alive renews its scroll for
    /// (`search.default_keep_alive`), as OpenSearch renews it.
    pub default_keep_alive: Duration,
}

impl Default for ScrollLimits {
    fn default() -> Self {
        ScrollLimits {
            max_open: DEFAULT_MAX_OPEN_SCROLL_CONTEXT,
            max_keep_alive: DEFAULT_MAX_KEEP_ALIVE,
            default_keep_alive: DEFAULT_KEEP_ALIVE,
        }
    }
}

/// The open scroll contexts of a node.
///
/// # Invariants
/// - A reservation for a new context is granted only while `contexts.len() + reserved <
///   max_open`, so opening never takes the count past the limit (lowering the limit at run
///   time leaves the contexts already open alone).
/// - `reserved` counts the live [`Reservation`]s, and each context's `in_use` counts its live
///   [`Lease`]s; a context in use is never reaped.
pub struct ScrollStore {
    /// Tells this store's ids from those of an earlier run of the node, whose counters restart.
    tag: String,
    inner: Mutex<Inner>,
    limits: RwLock<ScrollLimits>,
}

struct Inner {
    contexts: HashMap<u64, Arc<ScrollContext>>,
    /// Openings under way: counted against the limit before their first page runs.
    reserved: usize,
    next_id: u64,
}

/// One open scroll: the searches of its first page, and where the next page starts.
struct ScrollContext {
    /// Searcher snapshots, queries and sort columns of every index, aggregations cleared.
    prepared: Vec<Prepared>,
    /// The request of later pages: no `from`, no aggregations, no total counting.
    page_req: SearchRequest,
    /// The first page's `hits.total` (absent with `track_total_hits: false`).
    total: Option<Value>,
    /// The first page's `hits.max_score`.
    max_score: Value,
    /// The last hit returned so far; held for the whole of a page, so pages of one scroll run
    /// one after the other.
    cursor: Mutex<Option<Candidate>>,
    lease: Mutex<LeaseState>,
}

struct LeaseState {
    keep_alive: Duration,
    expires_at: Instant,
    /// Live [`Lease`]s on this context.
    in_use: u32,
}

impl std::fmt::Debug for ScrollStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrollStore")
            .field("num_open", &self.num_open())
            .field("limits", &*self.limits.read())
            .finish()
    }
}

/// A slot counted against the open-context limit while a first page runs.
struct Reservation<'s> {
    store: &'s ScrollStore,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut inner = self.store.inner.lock();
        debug_assert!(inner.reserved > 0, "reservation released twice");
        inner.reserved = inner.reserved.saturating_sub(1);
    }
}

/// A context taken out for one page; the reaper leaves it alone until the lease ends.
struct Lease {
    ctx: Arc<ScrollContext>,
    released: bool,
}

impl Lease {
    /// Ends the lease, renewing the keep-alive to `keep_alive` from `now`.
    fn release(mut self, keep_alive: Duration, now: Instant) {
        let mut l = self.ctx.lease.lock();
        l.keep_alive = keep_alive;
        l.expires_at = now + keep_alive;
        debug_assert!(l.in_use > 0, "lease released twice");
        l.in_use = l.in_use.saturating_sub(1);
        self.released = true;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            let mut l = self.ctx.lease.lock();
            debug_assert!(l.in_use > 0, "lease released twice");
            l.in_use = l.in_use.saturating_sub(1);
        }
    }
}

impl Default for ScrollStore {
    fn default() -> Self {
        ScrollStore::new(ScrollLimits::default())
    }
}

impl ScrollStore {
    /// Makes an empty store with `limits`.
    pub fn new(limits: ScrollLimits) -> ScrollStore {
        ScrollStore {
            tag: uuid::Uuid::new_v4().simple().to_string()[..16].to_string(),
            inner: Mutex::new(Inner {
                contexts: HashMap::new(),
                reserved: 0,
                next_id: 1,
            }),
            limits: RwLock::new(limits),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> ScrollLimits {
        *self.limits.read()
    }

    /// Replaces the limits; contexts already open stay open.
    pub fn set_limits(&self, limits: ScrollLimits) {
        *self.limits.write() = limits;
    }

    /// The number of open contexts.
    pub fn num_open(&self) -> usize {
        self.inner.lock().contexts.len()
    }

    /// Runs the first page of a scroll search over `indices` and keeps its context for
    /// `keep_alive`; the response carries `_scroll_id` first. `terms` lookups resolve through
    /// `lookups` when the scroll opens; its later pages reuse the built queries.
    pub fn open(
        &self,
        targets: &[Target],
        req: &SearchRequest,
        keep_alive: Duration,
        ctx: &SearchContext,
        now_millis: i64,
        lookups: Option<&TermsLookups<'_>>,
    ) -> Result<Value> {
        let started = Instant::now();
        validate_scroll_request(req)?;
        self.check_keep_alive(keep_alive)?;
        // A scroll counts its hits exactly, as OpenSearch's does.
        let exact = SearchRequest {
            track_total_hits: TrackTotalHits::Exact,
            ..req.clone()
        };
        let req = &exact;
        let indices: Vec<&Arc<IndexHandle>> = targets.iter().map(|t| &t.handle).collect();
        let window = indices
            .iter()
            .map(|h| h.max_result_window())
            .min()
            .unwrap_or(crate::index::DEFAULT_MAX_RESULT_WINDOW);
        if req.size > window {
            return Err(all_shards_failed(
                EngineError::illegal_argument(format!(
                    "Batch size is too large, size must be less than or equal to: [{window}] but was [{}]. Scroll batch sizes cost as much memory as result windows so they are controlled by the [index.max_result_window] index level setting.",
                    req.size
                ))
                .with_index(indices.first().map(|h| h.name().to_string()).unwrap_or_default()),
            ));
        }
        if req.search_after.is_some() {
            return Err(all_shards_failed(
                EngineError::illegal_argument("`search_after` cannot be used in a scroll context.")
                    .with_index(
                        indices
                            .first()
                            .map(|h| h.name().to_string())
                            .unwrap_or_default(),
                    ),
            ));
        }
        let reservation = self.reserve()?;
        let mut prepared = search::prepare(targets, req, now_millis, None, lookups)?;
        let (first, last) = search::run_prepared(&prepared, req, ctx, started, None)?;
        for p in &mut prepared {
            p.aggs = None;
        }
        let hits = &first["hits"];
        let context = ScrollContext {
            prepared,
            page_req: SearchRequest {
                from: 0,
                aggs: None,
                track_total_hits: TrackTotalHits::Off,
                ..req.clone()
            },
            total: hits.get("total").cloned(),
            max_score: hits.get("max_score").cloned().unwrap_or(Value::Null),
            cursor: Mutex::new(last),
            lease: Mutex::new(LeaseState {
                keep_alive,
                expires_at: Instant::now() + keep_alive,
                in_use: 0,
            }),
        };
        let id = self.insert(reservation, context);
        Ok(with_scroll_id(&self.encode_id(id), first))
    }

    /// Returns the next page of the scroll `scroll_id`, renewing its keep-alive from the end of
    /// the page: to `keep_alive` when given, else to [`ScrollLimits::default_keep_alive`], as
    /// OpenSearch renews a context a continuation names no keep-alive for.
    ///
    /// `is_current` tells whether an index the scroll searches still exists (is the same
    /// index): a scroll over a deleted index is gone, as in OpenSearch, where deleting an index
    /// frees its search contexts.
    pub fn next_page(
        &self,
        scroll_id: &str,
        keep_alive: Option<Duration>,
        ctx: &SearchContext,
        is_current: impl Fn(&Arc<IndexHandle>) -> bool,
    ) -> Result<Value> {
        let started = Instant::now();
        let id = self.parse_id(scroll_id)?;
        if let Some(k) = keep_alive {
            self.check_keep_alive(k)?;
        }
        let lease = self.checkout(id, started)?;
        for p in &lease.ctx.prepared {
            p.handle().stats().record_scroll();
        }
        if !lease.ctx.prepared.iter().all(|p| is_current(p.handle())) {
            drop(lease);
            let removed = self.inner.lock().contexts.remove(&id);
            drop(removed);
            return Err(context_missing(id));
        }
        let result = {
            let mut cursor = lease.ctx.cursor.lock();
            search::run_prepared(
                &lease.ctx.prepared,
                &lease.ctx.page_req,
                ctx,
                started,
                cursor.as_ref(),
            )
            .map(|(resp, last)| {
                // An empty page leaves the cursor where it was; a failed one does not move it.
                if last.is_some() {
                    *cursor = last;
                }
                resp
            })
        };
        let page = result.map(|resp| lease.ctx.render_page(resp));
        let renewed = keep_alive.unwrap_or_else(|| self.limits.read().default_keep_alive);
        lease.release(renewed, Instant::now());
        Ok(with_scroll_id(scroll_id, page?))
    }

    /// Frees the contexts of `scroll_ids`; returns how many existed. A malformed id frees
    /// nothing and fails with `Cannot parse scroll id`.
    pub fn clear(&self, scroll_ids: &[String]) -> Result<usize> {
        let ids = scroll_ids
            .iter()
            .map(|s| decode_scroll_id(s))
            .collect::<Result<Vec<_>>>()?;
        let freed: Vec<Arc<ScrollContext>> = {
            let mut inner = self.inner.lock();
            ids.iter()
                .filter(|(tag, _)| *tag == self.tag)
                .filter_map(|(_, id)| inner.contexts.remove(id))
                .collect()
        };
        Ok(freed.len())
    }

    /// Frees every context; returns how many there were.
    pub fn clear_all(&self) -> usize {
        let freed = std::mem::take(&mut self.inner.lock().contexts);
        freed.len()
    }

    /// Frees the contexts whose keep-alive has passed at `now` and that no page is using;
    /// returns how many.
    pub fn reap_expired(&self, now: Instant) -> usize {
        let mut freed = Vec::new();
        {
            let mut inner = self.inner.lock();
            inner.contexts.retain(|_, c| {
                let l = c.lease.lock();
                let keep = l.in_use > 0 || l.expires_at > now;
                if !keep {
                    freed.push(c.clone());
                }
                keep
            });
        }
        // The searchers are dropped here, outside the lock.
        if !freed.is_empty() {
            tracing::debug!(freed = freed.len(), "reaped expired scroll contexts");
        }
        freed.len()
    }

    fn check_keep_alive(&self, keep_alive: Duration) -> Result<()> {
        let max = self.limits.read().max_keep_alive;
        if keep_alive > max {
            return Err(all_shards_failed(EngineError::illegal_argument(format!(
                "Keep alive for request ({}) is too large. It must be less than ({}). This limit can be set by changing the [{MAX_KEEP_ALIVE_KEY}] cluster level setting.",
                format_time_value(keep_alive),
                format_time_value(max)
            ))));
        }
        Ok(())
    }

    fn reserve(&self) -> Result<Reservation<'_>> {
        let max = self.limits.read().max_open;
        let mut inner = self.inner.lock();
        if inner.contexts.len() + inner.reserved >= max {
            return Err(all_shards_failed(EngineError::new(
                ErrorCode::RejectedExecution,
                format!(
                    "Trying to create too many scroll contexts. Must be less than or equal to: [{max}]. This limit can be set by changing the [{MAX_OPEN_SCROLL_CONTEXT_KEY}] setting."
                ),
            )));
        }
        inner.reserved += 1;
        Ok(Reservation { store: self })
    }

    /// Turns a reservation into an open context; returns its id.
    fn insert(&self, reservation: Reservation<'_>, context: ScrollContext) -> u64 {
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.contexts.insert(id, Arc::new(context));
        debug_assert!(inner.reserved > 0, "insert without a reservation");
        inner.reserved = inner.reserved.saturating_sub(1);
        // The slot now belongs to the context: the reservation must not give it back too.
        std::mem::forget(reservation);
        id
    }

    /// Takes context `id` out for a page, unless it is unknown or expired at `now`.
    /// The owner label of the request that opened `scroll_id` (see
    /// [`SearchRequest::owner`]); `search_context_missing_exception` when no such scroll is open.
    pub fn owner(&self, scroll_id: &str) -> Result<Option<Arc<str>>> {
        let id = self.parse_id(scroll_id)?;
        let inner = self.inner.lock();
        inner
            .contexts
            .get(&id)
            .map(|c| c.page_req.owner.clone())
            .ok_or_else(|| context_missing(id))
    }

    /// The user label of the request that opened `scroll_id` (see
    /// [`SearchRequest::opened_by`]); `search_context_missing_exception` when no such scroll
    /// is open.
    pub fn opened_by(&self, scroll_id: &str) -> Result<Option<Arc<str>>> {
        let id = self.parse_id(scroll_id)?;
        let inner = self.inner.lock();
        inner
            .contexts
            .get(&id)
            .map(|c| c.page_req.opened_by.clone())
            .ok_or_else(|| context_missing(id))
    }

    fn checkout(&self, id: u64, now: Instant) -> Result<Lease> {
        let mut inner = self.inner.lock();
        let Some(ctx) = inner.contexts.get(&id).cloned() else {
            return Err(context_missing(id));
        };
        let mut l = ctx.lease.lock();
        if l.in_use == 0 && l.expires_at <= now {
            drop(l);
            let expired = inner.contexts.remove(&id);
            drop(inner);
            drop(expired);
            return Err(context_missing(id));
        }
        l.in_use += 1;
        drop(l);
        Ok(Lease {
            ctx,
            released: false,
        })
    }

    fn encode_id(&self, id: u64) -> String {
        SCROLL_ID_CODEC.encode(format!("{SCROLL_ID_PREFIX};{};{id}", self.tag))
    }

    /// The context id a scroll id names. An id of an earlier run of the node parses, and
    /// names a context that is gone.
    fn parse_id(&self, scroll_id: &str) -> Result<u64> {
        let (tag, id) = decode_scroll_id(scroll_id)?;
        if tag == self.tag {
            Ok(id)
        } else {
            Err(context_missing(id))
        }
    }
}

/// Decodes a scroll id into the tag of the store that made it and the context id.
fn decode_scroll_id(scroll_id: &str) -> Result<(String, u64)> {
    let bad = || EngineError::illegal_argument("Cannot parse scroll id");
    let bytes = SCROLL_ID_CODEC
        .decode(scroll_id.trim())
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let mut parts = text.split(';');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(SCROLL_ID_PREFIX), Some(tag), Some(id), None) => {
            let id = id.parse::<u64>().map_err(|_| bad())?;
            Ok((tag.to_string(), id))
        }
        _ => Err(bad()),
    }
}

impl ScrollContext {
    /// Puts the first page's `hits.total` and `hits.max_score` into a later page.
    fn render_page(&self, mut resp: Value) -> Value {
        if let Some(Value::Object(hits)) = resp.get_mut("hits") {
            let mut out = Map::new();
            if let Some(total) = &self.total {
                out.insert("total".into(), total.clone());
            }
            out.insert("max_score".into(), self.max_score.clone());
            for (k, v) in std::mem::take(hits) {
                if k != "total" && k != "max_score" {
                    out.insert(k, v);
                }
            }
            *hits = out;
        }
        resp
    }
}

/// Puts `_scroll_id` first in a search response.
fn with_scroll_id(scroll_id: &str, resp: Value) -> Value {
    let mut out = Map::new();
    out.insert("_scroll_id".into(), Value::from(scroll_id));
    if let Value::Object(m) = resp {
        out.extend(m);
    }
    Value::Object(out)
}

/// Rejects what OpenSearch's `SearchRequest#validate` rejects on a scroll search.
fn validate_scroll_request(req: &SearchRequest) -> Result<()> {
    let mut problems = Vec::new();
    if req.size == 0 {
        problems.push("[size] cannot be [0] in a scroll context");
    }
    if req.from > 0 {
        problems.push("using [from] is not allowed in a scroll context");
    }
    if req.track_total_hits_set && req.track_total_hits != TrackTotalHits::Exact {
        problems.push("disabling [track_total_hits] is not allowed in a scroll context");
    }
    if problems.is_empty() {
        return Ok(());
    }
    let mut reason = String::from("Validation Failed: ");
    for (i, p) in problems.iter().enumerate() {
        reason.push_str(&format!("{}: {p};", i + 1));
    }
    Err(EngineError::new(ErrorCode::ActionRequestValidation, reason))
}

/// OpenSearch's failure of a search whose every shard failed with `cause`.
fn all_shards_failed(cause: EngineError) -> EngineError {
    let mut outer = EngineError::new(ErrorCode::SearchPhaseExecution, "all shards failed")
        .with_extra("phase", Value::from("query"))
        .with_extra("grouped", Value::from(true));
    outer.cause = Some(Box::new(cause));
    outer
}

fn context_missing(id: u64) -> EngineError {
    all_shards_failed(EngineError::new(
        ErrorCode::SearchContextMissing,
        format!("No search context found for id [{id}]"),
    ))
}

/// Parses a scroll keep-alive (`1m`, `30s` …) given as the `scroll` parameter or body field,
/// with the one time-value parser: a failure is OpenSearch's 400 `illegal_argument_exception`.
/// `-1` is refused too: a scroll needs a keep-alive.
pub fn parse_keep_alive(value: &str) -> Result<Duration> {
    match sluice_wire::parse_time_value(value, "scroll")? {
        sluice_wire::TimeValue::After(d) => Ok(d),
        sluice_wire::TimeValue::Disabled => Err(EngineError::illegal_argument(format!(
            "failed to parse setting [scroll] with value [{value}] as a time value: negative durations are not supported"
        ))),
    }
}

/// Renders a duration as OpenSearch's `TimeValue#toString` does (the wire crate's one
/// formatter, re-exported for existing callers).
pub use sluice_wire::format_time_value;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::index::{DocOp, OpType};
    use serde_json::json;
    use std::collections::HashSet;

    fn index_docs(engine: &Engine, index: &str, docs: impl IntoIterator<Item = (String, Value)>) {
        let ops = docs
            .into_iter()
            .map(|(id, source)| {
                (
                    index.to_string(),
                    DocOp::index(Some(id), source, OpType::Index),
                )
            })
            .collect();
        for r in engine.bulk(ops) {
            r.expect("indexed");
        }
        engine.refresh(index).expect("refreshed");
    }

    /// An engine with index `idx` of `segments` segments of `per_segment` docs each, every
    /// doc's `k` in 0..3 so sort keys tie across segments.
    fn engine_with_segments(segments: usize, per_segment: usize) -> (tempfile::TempDir, Engine) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let engine = Engine::open(tmp.path()).expect("engine");
        add_index(&engine, "idx", "d", segments, per_segment);
        (tmp, engine)
    }

    /// Adds index `index` of `segments` segments of `per_segment` docs `{prefix}{n}`.
    fn add_index(engine: &Engine, index: &str, prefix: &str, segments: usize, per_segment: usize) {
        engine
            .create_index(
                index,
                &json!({"mappings": {"properties": {"k": {"type": "long"}, "s": {"type": "keyword"}}}}),
            )
            .expect("created");
        for seg in 0..segments {
            index_docs(
                engine,
                index,
                (0..per_segment).map(|i| {
                    let n = seg * per_segment + i;
                    (
                        format!("{prefix}{n}"),
                        json!({"k": n % 3, "s": format!("v{}", n % 2)}),
                    )
                }),
            );
        }
    }

    fn ids(resp: &Value) -> Vec<String> {
        resp["hits"]["hits"]
            .as_array()
            .unwrap_or_else(|| panic!("no hits in {resp}"))
            .iter()
            .map(|h| h["_id"].as_str().expect("id").to_string())
            .collect()
    }

    fn request(body: Value) -> SearchRequest {
        SearchRequest::parse(Some(&body), &Default::default()).expect("valid request")
    }

    /// Scrolls to the end; returns every id in order and the number of pages (the empty last
    /// one included).
    fn scroll_all(engine: &Engine, body: Value) -> (Vec<String>, usize) {
        scroll_all_of(engine, "idx", body)
    }

    fn scroll_all_of(engine: &Engine, index: &str, body: Value) -> (Vec<String>, usize) {
        let ctx = SearchContext::default();
        let first = engine
            .open_scroll(index, &request(body), Duration::from_secs(60), &ctx)
            .expect("first page");
        let id = first["_scroll_id"].as_str().expect("scroll id").to_string();
        let mut all = ids(&first);
        let mut pages = 1;
        loop {
            let page = engine.continue_scroll(&id, None, &ctx).expect("next page");
            assert_eq!(page["hits"]["total"], first["hits"]["total"], "{page}");
            assert!(page.get("aggregations").is_none(), "{page}");
            pages += 1;
            let got = ids(&page);
            if got.is_empty() {
                break;
            }
            all.extend(got);
            assert!(pages < 10_000, "scroll never ended");
        }
        (all, pages)
    }

    fn assert_each_once(all: &[String], n: usize) {
        assert_eq!(all.len(), n, "every doc once: {all:?}");
        let set: HashSet<&String> = all.iter().collect();
        assert_eq!(set.len(), n, "duplicates in {all:?}");
    }

    #[test]
    fn test_scroll_with_tied_keys_across_segments_returns_each_doc_once_in_order() {
        let (_tmp, engine) = engine_with_segments(4, 25);
        let segments = engine
            .index("idx")
            .expect("idx")
            .searcher()
            .segment_readers()
            .len();
        assert!(
            segments > 1,
            "ties must span segments, got {segments} segment(s)"
        );
        for sort in [
            json!([{"k": "asc"}]),
            json!([{"k": "desc"}, {"s": "asc"}]),
            json!(["_doc"]),
            json!([{"_doc": "desc"}]),
            json!([{"s": "desc"}]),
        ] {
            let body = json!({"size": 7, "sort": sort});
            let (all, pages) = scroll_all(&engine, body.clone());
            assert_each_once(&all, 100);
            assert_eq!(pages, 100usize.div_ceil(7) + 1, "pages for {sort}");
            // The scroll's order is the order one big search returns.
            let one = engine
                .search(
                    "idx",
                    &json!({"size": 100, "sort": sort}),
                    &SearchContext::default(),
                )
                .expect("search");
            assert_eq!(all, ids(&one), "order under {sort}");
        }
    }

    #[test]
    fn test_equal_hits_come_in_indexing_order_across_pages() {
        let (_tmp, engine) = engine_with_segments(5, 6);
        let indexing_order: Vec<String> = (0..30).map(|n| format!("d{n}")).collect();
        // By score (all equal), and by a sort key that ties within each value.
        let (all, _) = scroll_all(&engine, json!({"size": 4}));
        assert_eq!(all, indexing_order);
        let (all, _) = scroll_all(&engine, json!({"size": 4, "sort": [{"k": "asc"}]}));
        let by_k: Vec<String> = (0..3)
            .flat_map(|k| (0..30).filter(move |n| n % 3 == k))
            .map(|n| format!("d{n}"))
            .collect();
        assert_eq!(all, by_k);
    }

    #[test]
    fn test_scroll_by_equal_scores_returns_each_doc_once() {
        let (_tmp, engine) = engine_with_segments(3, 20);
        let (all, _) = scroll_all(&engine, json!({"size": 8}));
        assert_each_once(&all, 60);
        let (all, _) = scroll_all(
            &engine,
            json!({"size": 5, "query": {"term": {"s": "v1"}}, "aggs": {"ks": {"terms": {"field": "k"}}}}),
        );
        assert_each_once(&all, 30);
    }

    #[test]
    fn test_scroll_sees_its_snapshot_while_docs_change() {
        let (_tmp, engine) = engine_with_segments(2, 10);
        let ctx = SearchContext::default();
        let req = request(json!({"size": 5, "sort": ["_doc"]}));
        let first = engine
            .open_scroll("idx", &req, Duration::from_secs(60), &ctx)
            .expect("open");
        let id = first["_scroll_id"].as_str().expect("id").to_string();
        index_docs(
            &engine,
            "idx",
            (100..150).map(|n| (format!("new{n}"), json!({"k": 1}))),
        );
        let deleted = engine.bulk(vec![(
            "idx".to_string(),
            DocOp::Delete {
                id: "d19".into(),
                versioning: Default::default(),
                routing: None,
            },
        )]);
        deleted[0].as_ref().expect("deleted");
        engine.refresh("idx").expect("refresh");
        let mut all = ids(&first);
        loop {
            let page = engine.continue_scroll(&id, None, &ctx).expect("page");
            assert_eq!(page["hits"]["total"]["value"], 20);
            let got = ids(&page);
            if got.is_empty() {
                break;
            }
            all.extend(got);
        }
        assert_each_once(&all, 20);
        assert!(all.contains(&"d19".to_string()));
        assert!(!all.iter().any(|i| i.starts_with("new")));
    }

    #[test]
    fn test_doc_order_page_skips_documents_before_the_cursor() {
        let (_tmp, engine) = engine_with_segments(5, 40);
        add_index(&engine, "other", "o", 3, 30);
        for (index, n) in [("idx", 200), ("idx,other", 290)] {
            for size in [1, 33, 500] {
                // Continuation pages count no total: in `_doc` order they stop early and skip
                // ahead (the first page counts exactly, as OpenSearch's scroll does).
                let (all, pages) =
                    scroll_all_of(&engine, index, json!({"size": size, "sort": ["_doc"]}));
                assert_each_once(&all, n);
                assert_eq!(pages, n.div_ceil(size) + 1, "{index} by {size}");
                let one = engine
                    .search(
                        index,
                        &json!({"size": 1000, "sort": ["_doc"]}),
                        &SearchContext::default(),
                    )
                    .expect("search");
                assert_eq!(all, ids(&one), "{index} by {size}");
            }
        }
    }

    #[test]
    fn test_expired_context_is_reaped_and_then_missing() {
        let (_tmp, engine) = engine_with_segments(1, 5);
        let ctx = SearchContext::default();
        let opened = Instant::now();
        let first = engine
            .open_scroll(
                "idx",
                &request(json!({"size": 2})),
                Duration::from_secs(60),
                &ctx,
            )
            .expect("open");
        let id = first["_scroll_id"].as_str().expect("id").to_string();
        assert_eq!(
            engine.reap_expired_scrolls(opened + Duration::from_secs(30)),
            0
        );
        assert_eq!(engine.scrolls().num_open(), 1);
        assert_eq!(
            engine.reap_expired_scrolls(Instant::now() + Duration::from_secs(61)),
            1
        );
        assert_eq!(engine.scrolls().num_open(), 0);
        let err = engine.continue_scroll(&id, None, &ctx).expect_err("gone");
        assert_eq!(err.code, ErrorCode::SearchPhaseExecution);
        assert_eq!(err.root_cause().code, ErrorCode::SearchContextMissing);
        assert_eq!(
            err.root_cause().reason,
            "No search context found for id [1]"
        );
    }

    #[test]
    fn test_continuation_renews_keep_alive() {
        let (_tmp, engine) = engine_with_segments(1, 5);
        let ctx = SearchContext::default();
        let first = engine
            .open_scroll(
                "idx",
                &request(json!({"size": 1})),
                Duration::from_secs(10),
                &ctx,
            )
            .expect("open");
        let id = first["_scroll_id"].as_str().expect("id").to_string();
        engine
            .continue_scroll(&id, Some(Duration::from_secs(600)), &ctx)
            .expect("page");
        let later = Instant::now() + Duration::from_secs(300);
        assert_eq!(
            engine.reap_expired_scrolls(later),
            0,
            "keep-alive renewed to 10m"
        );
        assert_eq!(
            engine.reap_expired_scrolls(later + Duration::from_secs(301)),
            1
        );
    }

    #[test]
    fn test_a_continuation_without_keep_alive_renews_to_the_default() {
        let (_tmp, engine) = engine_with_segments(1, 5);
        engine.scrolls().set_limits(ScrollLimits {
            default_keep_alive: Duration::from_secs(120),
            ..ScrollLimits::default()
        });
        let ctx = SearchContext::default();
        let first = engine
            .open_scroll(
                "idx",
                &request(json!({"size": 1})),
                Duration::from_secs(2),
                &ctx,
            )
            .expect("open");
        let id = first["_scroll_id"].as_str().expect("id").to_string();
        engine.continue_scroll(&id, None, &ctx).expect("page");
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(
            engine.reap_expired_scrolls(later),
            0,
            "renewed to search.default_keep_alive, not the opening 2s"
        );
        assert_eq!(
            engine.reap_expired_scrolls(later + Duration::from_secs(61)),
            1
        );
    }

    #[test]
    fn test_open_context_limit_rejects_one_more() {
        let (_tmp, engine) = engine_with_segments(1, 5);
        engine.scrolls().set_limits(ScrollLimits {
            max_open: 2,
            ..ScrollLimits::default()
        });
        let ctx = SearchContext::default();
        let req = request(json!({"size": 1}));
        let keep = Duration::from_secs(60);
        let a = engine.open_scroll("idx", &req, keep, &ctx).expect("first");
        engine.open_scroll("idx", &req, keep, &ctx).expect("second");
        let err = engine
            .open_scroll("idx", &req, keep, &ctx)
            .expect_err("third");
        assert_eq!(err.root_cause().code, ErrorCode::RejectedExecution);
        assert_eq!(
            err.root_cause().reason,
            "Trying to create too many scroll contexts. Must be less than or equal to: [2]. This limit can be set by changing the [search.max_open_scroll_context] setting."
        );
        // A failed first page gives its slot back, and a cleared context frees one.
        assert_eq!(engine.scrolls().num_open(), 2);
        let freed = engine
            .clear_scrolls(&[a["_scroll_id"].as_str().expect("id").to_string()])
            .expect("cleared");
        assert_eq!(freed, 1);
        engine
            .open_scroll("idx", &req, keep, &ctx)
            .expect("room again");
    }

    #[test]
    fn test_failed_first_page_releases_its_slot() {
        let (_tmp, engine) = engine_with_segments(1, 5);
        engine.scrolls().set_limits(ScrollLimits {
            max_open: 1,
            ..ScrollLimits::default()
        });
        let ctx = SearchContext::default();
        let bad = request(json!({"sort": [{"nope": "asc"}]}));
        let err = engine
            .open_scroll("idx", &bad, Duration::from_secs(60), &ctx)
            .expect_err("unmapped sort");
        assert_eq!(err.root_cause().code, ErrorCode::QueryShard);
        engine
            .open_scroll("idx", &request(json!({})), Duration::from_secs(60), &ctx)
            .expect("slot was released");
    }

    #[test]
    fn test_keep_alive_over_the_limit_is_rejected() {
        let (_tmp, engine) = engine_with_segments(1, 1);
        let ctx = SearchContext::default();
        let err = engine
            .open_scroll(
                "idx",
                &request(json!({})),
                Duration::from_secs(2 * 86_400),
                &ctx,
            )
            .expect_err("too long");
        assert_eq!(err.root_cause().code, ErrorCode::IllegalArgument);
        assert_eq!(
            err.root_cause().reason,
            "Keep alive for request (2d) is too large. It must be less than (1d). This limit can be set by changing the [search.max_keep_alive] cluster level setting."
        );
        assert_eq!(engine.scrolls().num_open(), 0);
    }

    #[test]
    fn test_from_and_size_zero_are_rejected() {
        let (_tmp, engine) = engine_with_segments(1, 1);
        let ctx = SearchContext::default();
        let keep = Duration::from_secs(60);
        let err = engine
            .open_scroll("idx", &request(json!({"from": 3})), keep, &ctx)
            .expect_err("from");
        assert_eq!(err.code, ErrorCode::ActionRequestValidation);
        assert_eq!(
            err.reason,
            "Validation Failed: 1: using [from] is not allowed in a scroll context;"
        );
        let err = engine
            .open_scroll("idx", &request(json!({"size": 0})), keep, &ctx)
            .expect_err("size 0");
        assert_eq!(
            err.reason,
            "Validation Failed: 1: [size] cannot be [0] in a scroll context;"
        );
    }

    #[test]
    fn test_malformed_and_foreign_ids() {
        let store = ScrollStore::default();
        for bad in [
            "",
            "not base64 !",
            "aGVsbG8",
            &SCROLL_ID_CODEC.encode("sluice;x;y"),
        ] {
            let err = store.clear(&[bad.to_string()]).expect_err(bad);
            assert_eq!(err.code, ErrorCode::IllegalArgument, "{bad}");
            assert_eq!(err.reason, "Cannot parse scroll id");
        }
        let other = ScrollStore::default().encode_id(7);
        assert_eq!(
            store.clear(std::slice::from_ref(&other)).expect("parses"),
            0
        );
        let err = store
            .next_page(&other, None, &SearchContext::default(), |_| true)
            .expect_err("missing");
        assert_eq!(
            err.root_cause().reason,
            "No search context found for id [7]"
        );
        // Padded ids decode too.
        let padded =
            base64::engine::general_purpose::URL_SAFE.encode(format!("sluice;{};1", store.tag));
        assert!(padded.ends_with('='), "{padded}");
        assert_eq!(store.parse_id(&padded).expect("padded id parses"), 1);
    }

    #[test]
    fn test_clear_all_counts_what_it_frees() {
        let (_tmp, engine) = engine_with_segments(1, 3);
        let ctx = SearchContext::default();
        for _ in 0..3 {
            engine
                .open_scroll("idx", &request(json!({})), Duration::from_secs(60), &ctx)
                .expect("open");
        }
        assert_eq!(engine.clear_all_scrolls(), 3);
        assert_eq!(engine.clear_all_scrolls(), 0);
    }

    #[test]
    fn test_deleted_index_ends_its_scrolls() {
        let (_tmp, engine) = engine_with_segments(1, 3);
        let ctx = SearchContext::default();
        let first = engine
            .open_scroll(
                "idx",
                &request(json!({"size": 1})),
                Duration::from_secs(60),
                &ctx,
            )
            .expect("open");
        engine
            .delete_indices("idx", &crate::resolve::IndicesOptions::for_index_apis(true))
            .expect("deleted");
        let err = engine
            .continue_scroll(first["_scroll_id"].as_str().expect("id"), None, &ctx)
            .expect_err("gone");
        assert_eq!(err.root_cause().code, ErrorCode::SearchContextMissing);
        assert_eq!(engine.scrolls().num_open(), 0);
    }
}
