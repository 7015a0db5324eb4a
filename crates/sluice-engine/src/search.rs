//! Search execution: request parsing, the collection loop with sorting, cancellation and
//! deadlines, the fetch phase with `_source` filtering, and OpenSearch-shaped responses.
//!
//! The collection loop drives each segment's scorer itself (instead of a tantivy `Collector`)
//! so that it can check the request's [`SearchContext`] every [`CHECK_EVERY_DOCS`] documents
//! and between segments: a cancelled search stops with `task_cancelled_exception`, a search past
//! its deadline stops and returns what it has with `timed_out: true`.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tantivy::collector::Collector;
use tantivy::query::{EnableScoring, Query};
use tantivy::{DocAddress, DocId, DocSet, Score, Searcher, SegmentReader, TERMINATED};

use crate::error::{EngineError, ErrorCode, Result};
use crate::index::IndexHandle;
use crate::lookup::TermsLookups;
use crate::mapping::{FieldType, wildcard_match};
use crate::query::{QueryContext, build_query};

/// How many documents the collection loop handles between two checks of the cancellation flag
/// and the deadline: a few thousand documents take well under a millisecond, so a cancelled
/// search stops within milliseconds while the check stays off the profile.
pub const CHECK_EVERY_DOCS: u32 = 4096;
/// How many hits the fetch phase loads between two checks of the cancellation flag: loading a
/// stored document costs microseconds, so a few hundred keep the check cheap and prompt.
const FETCH_CHECK_EVERY_HITS: usize = 256;
/// OpenSearch's default `track_total_hits` threshold.
pub const DEFAULT_TRACK_TOTAL_HITS: u64 = 10_000;
/// The primary term of every document: a single node never changes primaries, so the term
/// stays OpenSearch's first one.
pub const PRIMARY_TERM: u64 = 1;
/// OpenSearch's default page size.
pub const DEFAULT_SIZE: u64 = 10;

/// What a running search checks to know whether to stop, and how it issues nested searches.
#[derive(Clone, Default)]
pub struct SearchContext {
    /// Set by whoever cancels the search (task cancel, client disconnect, enforcement).
    pub cancelled: Option<Arc<AtomicBool>>,
    /// When the search must stop and return partial results (the body's `timeout`).
    pub deadline: Option<Instant>,
    /// When the search must be cancelled (`cancel_after_time_interval`): past it the search
    /// fails with `task_cancelled_exception` instead of returning partial results.
    pub cancel_at: Option<Instant>,
    /// How the engine registers the nested searches it runs on behalf of this request (a
    /// `terms` lookup with a `query`); `None` runs them directly under this context.
    pub nested: Option<Arc<dyn NestedSearchHook>>,
    /// The context of the request this one runs inside of: when it is cancelled (its flag or
    /// its `cancel_at`), this search is too. The engine sets it on a nested search's context.
    pub parent: Option<Arc<SearchContext>>,
    /// Called at every cancellation checkpoint (every few thousand documents, between
    /// segments, every 256 fetched hits), on the thread running the search: the server samples
    /// the task's CPU time and allocations there, so a long search's usage is visible while it
    /// runs. Must be cheap.
    pub on_checkpoint: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for SearchContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchContext")
            .field("cancelled", &self.cancelled)
            .field("deadline", &self.deadline)
            .field("cancel_at", &self.cancel_at)
            .field("nested", &self.nested.as_ref().map(|_| "NestedSearchHook"))
            .field("parent", &self.parent)
            .field("on_checkpoint", &self.on_checkpoint.as_ref().map(|_| "Fn"))
            .finish()
    }
}

impl SearchContext {
    /// Whether the search, or a request it runs inside of, has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        if let Some(checkpoint) = &self.on_checkpoint {
            checkpoint();
        }
        // Relaxed is enough: the flag carries no data, and a late observation only delays the
        // stop until the next check.
        self.cancelled
            .as_ref()
            .is_some_and(|c| c.load(AtomicOrdering::Relaxed))
            || self.cancel_at.is_some_and(|at| Instant::now() >= at)
            || self.parent.as_ref().is_some_and(|p| p.is_cancelled())
    }

    fn is_past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Called by the engine before it runs a nested search on behalf of the current request (the
/// sub-search of a `terms` lookup with a `query`), so that the caller can make it a child task
/// that passes admission, while the engine stays ignorant of how.
///
/// The engine calls [`enter`](NestedSearchHook::enter) on the thread that runs the outer
/// search, once per distinct lookup of a request, after it has resolved the lookup index and
/// before it builds the nested search; it runs the nested search synchronously on that same
/// thread (never through the search pool again) and drops [`NestedScope::guard`] as soon as the
/// nested search ends, whether it succeeded or failed.
pub trait NestedSearchHook: Send + Sync {
    /// Registers the nested search on `index` (e.g. as a child task and through admission) and
    /// returns the context it runs under plus a guard the engine holds until it ends.
    ///
    /// `description` describes the nested search the way a search task is described
    /// (`indices[..], search_type[QUERY_THEN_FETCH], source[..]`). An error aborts the outer
    /// request with that error as is (a 429 `rejected_execution_exception`, a
    /// `task_cancelled_exception` ...).
    fn enter(&self, index: &str, description: &str) -> Result<NestedScope>;
}

/// What a [`NestedSearchHook`] hands back for one nested search.
#[must_use = "the guard must live until the nested search ends"]
pub struct NestedScope {
    /// The context the nested search runs under: its own cancellation flag (the child task's),
    /// its `cancel_at` and `deadline`, and the hook for searches nested in it (`None` inherits
    /// the outer request's). The engine sets its `parent` to the outer context, so cancelling
    /// the outer request stops the nested search too.
    pub ctx: SearchContext,
    /// Dropped by the engine right after the nested search ends (a task registration, a
    /// permit ...).
    pub guard: Box<dyn std::any::Any + Send>,
}

impl std::fmt::Debug for NestedScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NestedScope")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

/// How `hits.total` is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackTotalHits {
    /// Count exactly.
    Exact,
    /// Count up to this many, then report `gte`.
    UpTo(u64),
    /// Leave `hits.total` out.
    Off,
}

/// The order of one sort key.
#[derive(Debug, Clone, PartialEq)]
pub enum SortField {
    /// By relevance score.
    Score,
    /// By index order.
    Doc,
    /// By a field's value.
    Field(String),
}

/// One sort key.
#[derive(Debug, Clone, PartialEq)]
pub struct SortSpec {
    /// What to sort on.
    pub field: SortField,
    /// Descending?
    pub desc: bool,
    /// Missing values first instead of last?
    pub missing_first: bool,
    /// Whether `unmapped_type` was given: an index without the field then sorts all its hits
    /// as missing instead of failing.
    pub unmapped_ok: bool,
}

/// `_source` filtering.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceFilter {
    /// `_source: false`.
    pub disabled: bool,
    /// Patterns to keep (all when empty).
    pub includes: Vec<String>,
    /// Patterns to drop.
    pub excludes: Vec<String>,
}

/// A parsed search request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// The query DSL.
    pub query: Value,
    /// First hit to return.
    pub from: u64,
    /// Number of hits to return.
    pub size: u64,
    /// Sort keys; empty means by score.
    pub sort: Vec<SortSpec>,
    /// Source filtering.
    pub source: SourceFilter,
    /// Total hits counting.
    pub track_total_hits: TrackTotalHits,
    /// The body's `timeout`.
    pub timeout: Option<Duration>,
    /// The `aggs`/`aggregations` object.
    pub aggs: Option<Value>,
    /// Compute scores even when sorting on fields.
    pub track_scores: bool,
    /// Only hits with at least this score.
    pub min_score: Option<f32>,
    /// The most aggregation buckets the search may build (`search.max_buckets`); `None` is
    /// OpenSearch's default.
    pub max_buckets: Option<u32>,
    /// `search_after`: the sort values of the hit the page starts after (hits with exactly
    /// these values are skipped too, as in OpenSearch); `None` when absent or empty.
    pub search_after: Option<Vec<Value>>,
    /// `seq_no_primary_term`: each hit carries its `_seq_no` and `_primary_term`.
    pub seq_no_primary_term: bool,
    /// `version`: each hit carries its `_version`.
    pub version: bool,
    /// An opaque label the caller attaches; never parsed from the request. A scroll keeps it
    /// for its continuations ([`crate::ScrollStore::owner`]) — the server stores the workload
    /// group the scroll was opened in.
    pub owner: Option<Arc<str>>,
}

impl Default for SearchRequest {
    fn default() -> Self {
        SearchRequest {
            query: json!({"match_all": {}}),
            from: 0,
            size: DEFAULT_SIZE,
            sort: Vec::new(),
            source: SourceFilter::default(),
            track_total_hits: TrackTotalHits::UpTo(DEFAULT_TRACK_TOTAL_HITS),
            timeout: None,
            aggs: None,
            track_scores: false,
            min_score: None,
            max_buckets: None,
            search_after: None,
            seq_no_primary_term: false,
            version: false,
            owner: None,
        }
    }
}

/// Renders a score the way OpenSearch does: a 32-bit float in its shortest decimal form
/// (`1.6`, not the `1.600000023841858` its widening to f64 prints); a non-finite score is
/// `null`.
pub fn score_json(score: Score) -> Value {
    if !score.is_finite() {
        return Value::Null;
    }
    // The f32's Display is its shortest round-tripping decimal, which parses to the f64 that
    // serde_json prints the same way.
    score
        .to_string()
        .parse::<f64>()
        .map_or(Value::Null, Value::from)
}

/// The URL parameter that renders `hits.total` as a plain number.
pub const REST_TOTAL_HITS_AS_INT: &str = "rest_total_hits_as_int";

/// Reads the `rest_total_hits_as_int` URL parameter as OpenSearch reads a boolean parameter
/// (absent is false, empty is true).
pub fn rest_total_hits_as_int(params: &HashMap<String, String>) -> Result<bool> {
    crate::settings::bool_param(params, REST_TOTAL_HITS_AS_INT)
}

/// Renders a search response's `hits.total` as OpenSearch does under
/// `rest_total_hits_as_int=true`: the count alone, `-1` when totals were not tracked.
pub fn render_total_hits_as_int(resp: &mut Value) {
    let Some(Value::Object(hits)) = resp.get_mut("hits") else {
        return;
    };
    let total = match hits.get("total") {
        Some(Value::Object(t)) => t.get("value").cloned().unwrap_or(json!(-1)),
        Some(other) => other.clone(),
        None => json!(-1),
    };
    // Keep `total` first, where OpenSearch renders it.
    let mut out = Map::new();
    out.insert("total".into(), total);
    for (k, v) in std::mem::take(hits) {
        if k != "total" {
            out.insert(k, v);
        }
    }
    *hits = out;
}

fn parse_err(reason: impl Into<String>) -> EngineError {
    EngineError::parsing(reason)
}

fn as_u64_param(key: &str, v: &Value) -> Result<u64> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| {
            EngineError::illegal_argument(format!(
                "[{key}] parameter cannot be negative, found [{n}]"
            ))
        }),
        Value::String(s) => s
            .parse::<i64>()
            .map_err(|_| {
                EngineError::new(
                    ErrorCode::XContentParse,
                    format!("[{key}] failed to parse field [{key}]: For input string: \"{s}\""),
                )
            })
            .and_then(|n| {
                u64::try_from(n).map_err(|_| {
                    EngineError::illegal_argument(format!(
                        "[{key}] parameter cannot be negative, found [{n}]"
                    ))
                })
            }),
        _ => Err(EngineError::new(
            ErrorCode::XContentParse,
            format!("[{key}] failed to parse field [{key}]"),
        )),
    }
}

fn parse_sort_entry(v: &Value, out: &mut Vec<SortSpec>) -> Result<()> {
    let field = |name: &str| match name {
        "_score" => SortField::Score,
        "_doc" => SortField::Doc,
        other => SortField::Field(other.to_string()),
    };
    match v {
        Value::String(s) => {
            let (name, desc) = match s.split_once(':') {
                Some((n, "desc")) => (n, true),
                Some((n, "asc")) => (n, false),
                Some((_, o)) => {
                    return Err(EngineError::illegal_argument(format!(
                        "Unknown SortOrder [{o}]"
                    )));
                }
                None => (s.as_str(), s == "_score"),
            };
            out.push(SortSpec {
                field: field(name),
                desc,
                missing_first: false,
                unmapped_ok: false,
            });
        }
        Value::Object(m) => {
            for (name, spec) in m {
                let default_desc = name == "_score";
                let (desc, missing_first, unmapped_ok) = match spec {
                    Value::String(o) => (parse_order(o)?, false, false),
                    Value::Object(o) => {
                        let mut desc = default_desc;
                        let mut missing_first = false;
                        let mut unmapped_ok = false;
                        for (k, val) in o {
                            match k.as_str() {
                                "order" => desc = parse_order(val.as_str().unwrap_or_default())?,
                                "missing" => missing_first = val.as_str() == Some("_first"),
                                "unmapped_type" => unmapped_ok = true,
                                "mode" | "format" | "numeric_type" => {}
                                _ => {
                                    return Err(parse_err(format!(
                                        "[field_sort] unknown field [{k}]"
                                    )));
                                }
                            }
                        }
                        (desc, missing_first, unmapped_ok)
                    }
                    _ => {
                        return Err(parse_err(format!(
                            "[sort] malformed sort for field [{name}]"
                        )));
                    }
                };
                out.push(SortSpec {
                    field: field(name),
                    desc,
                    missing_first,
                    unmapped_ok,
                });
            }
        }
        Value::Array(items) => {
            for item in items {
                parse_sort_entry(item, out)?;
            }
        }
        _ => return Err(parse_err("[sort] must be a string, an object or an array")),
    }
    Ok(())
}

fn parse_order(o: &str) -> Result<bool> {
    match o {
        "asc" => Ok(false),
        "desc" => Ok(true),
        _ => Err(EngineError::illegal_argument(format!(
            "Unknown SortOrder [{o}]"
        ))),
    }
}

/// Parses a `_source` value of a request body: `true`/`false`, a pattern or list of patterns,
/// or `{"includes": …, "excludes": …}`.
pub fn parse_source(v: &Value) -> Result<SourceFilter> {
    let list = |v: &Value| -> Result<Vec<String>> {
        match v {
            Value::String(s) => Ok(vec![s.clone()]),
            Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| parse_err("[_source] patterns must be strings"))
                })
                .collect(),
            _ => Err(parse_err("[_source] patterns must be strings")),
        }
    };
    Ok(match v {
        Value::Bool(b) => SourceFilter {
            disabled: !b,
            ..Default::default()
        },
        Value::String(_) | Value::Array(_) => SourceFilter {
            includes: list(v)?,
            ..Default::default()
        },
        Value::Object(m) => {
            let mut f = SourceFilter::default();
            for (k, val) in m {
                match k.as_str() {
                    "includes" | "include" => f.includes = list(val)?,
                    "excludes" | "exclude" => f.excludes = list(val)?,
                    _ => {
                        return Err(parse_err(format!(
                            "Unknown key for a START_OBJECT in [{k}]."
                        )));
                    }
                }
            }
            f
        }
        _ => {
            return Err(parse_err(
                "[_source] must be a boolean, a string, an array or an object",
            ));
        }
    })
}

fn parse_track_total_hits(v: &Value) -> Result<TrackTotalHits> {
    match v {
        Value::Bool(true) => Ok(TrackTotalHits::Exact),
        Value::Bool(false) => Ok(TrackTotalHits::Off),
        Value::String(s) if s == "true" => Ok(TrackTotalHits::Exact),
        Value::String(s) if s == "false" => Ok(TrackTotalHits::Off),
        other => match other
            .as_i64()
            .or_else(|| other.as_str().and_then(|s| s.parse().ok()))
        {
            Some(-1) => Ok(TrackTotalHits::Exact),
            Some(n) if n >= 0 => Ok(TrackTotalHits::UpTo(n as u64)),
            _ => Err(EngineError::illegal_argument(format!(
                "[track_total_hits] parameter must be positive or equals to -1, got {other}"
            ))),
        },
    }
}

impl SearchRequest {
    /// Parses a `_search` body and applies URL parameters over it (`q`, `from`, `size`,
    /// `sort`, `_source*`, `track_total_hits`, `timeout`), as OpenSearch does.
    ///
    /// With `rest_total_hits_as_int=true` totals are counted exactly unless the request says
    /// otherwise, and a `track_total_hits` threshold is refused, as OpenSearch does: a number
    /// cannot say "at least".
    pub fn parse(body: Option<&Value>, params: &HashMap<String, String>) -> Result<SearchRequest> {
        let mut req = SearchRequest::default();
        let mut track_total_hits_set = false;
        if let Some(body) = body {
            let obj = body
                .as_object()
                .ok_or_else(|| parse_err("request body must be a JSON object"))?;
            for (key, v) in obj {
                match key.as_str() {
                    "query" => {
                        if !v.is_object() {
                            return Err(parse_err("[query] must be an object"));
                        }
                        req.query = v.clone();
                    }
                    "from" => req.from = as_u64_param("from", v)?,
                    "size" => req.size = as_u64_param("size", v)?,
                    "sort" => parse_sort_entry(v, &mut req.sort)?,
                    "_source" => req.source = parse_source(v)?,
                    "track_total_hits" => {
                        req.track_total_hits = parse_track_total_hits(v)?;
                        track_total_hits_set = true;
                    }
                    "timeout" => {
                        let s = v.as_str().ok_or_else(|| {
                            parse_err("[timeout] must be a time value string like \"500ms\"")
                        })?;
                        req.timeout = Some(crate::parse_time_value(s).map_err(|e| {
                            EngineError::new(ErrorCode::Parsing, format!("failed to parse setting [timeout] with value [{s}] as a time value: {e}"))
                        })?);
                    }
                    "aggs" | "aggregations" => {
                        if !v.is_object() {
                            return Err(parse_err(format!("[{key}] must be an object")));
                        }
                        req.aggs = Some(v.clone());
                    }
                    "track_scores" => req.track_scores = expect_bool(key, v)?,
                    "min_score" => {
                        req.min_score = Some(
                            v.as_f64()
                                .ok_or_else(|| parse_err("[min_score] must be a number"))?
                                as f32,
                        )
                    }
                    "search_after" if v.is_array() => req.search_after = parse_search_after(v)?,
                    "seq_no_primary_term" => req.seq_no_primary_term = expect_bool(key, v)?,
                    "version" => req.version = expect_bool(key, v)?,
                    "explain" | "profile" => {
                        expect_bool(key, v)?;
                    }
                    "terminate_after" => {
                        as_u64_param(key, v)?;
                    }
                    "stored_fields" => {
                        let ok = v.is_string()
                            || v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
                        if !ok {
                            return Err(parse_err(
                                "[stored_fields] must be a string or an array of strings",
                            ));
                        }
                    }
                    "highlight" => {
                        if !v.is_object() {
                            return Err(parse_err(format!(
                                "[highlight] expects an object, got a {}",
                                start_token(v)
                            )));
                        }
                    }
                    _ => {
                        return Err(parse_err(format!(
                            "Unknown key for a {} in [{key}].",
                            start_token(v)
                        )));
                    }
                }
            }
        }
        for (key, v) in params {
            match key.as_str() {
                "q" => {
                    let mut qs = Map::new();
                    qs.insert("query".into(), Value::from(v.as_str()));
                    if let Some(df) = params.get("df") {
                        qs.insert("default_field".into(), Value::from(df.as_str()));
                    }
                    if let Some(op) = params.get("default_operator") {
                        qs.insert("default_operator".into(), Value::from(op.as_str()));
                    }
                    req.query = json!({"query_string": qs});
                }
                "from" => req.from = as_u64_param("from", &Value::from(v.as_str()))?,
                "size" => req.size = as_u64_param("size", &Value::from(v.as_str()))?,
                "sort" => {
                    req.sort.clear();
                    for part in v.split(',') {
                        parse_sort_entry(&Value::from(part), &mut req.sort)?;
                    }
                }
                "_source" => {
                    req.source = match v.as_str() {
                        "true" => SourceFilter::default(),
                        "false" => SourceFilter {
                            disabled: true,
                            ..Default::default()
                        },
                        list => SourceFilter {
                            includes: list.split(',').map(str::to_string).collect(),
                            ..Default::default()
                        },
                    }
                }
                "_source_includes" => {
                    req.source.includes = v.split(',').map(str::to_string).collect()
                }
                "_source_excludes" => {
                    req.source.excludes = v.split(',').map(str::to_string).collect()
                }
                "track_total_hits" => {
                    req.track_total_hits = parse_track_total_hits(&Value::from(v.as_str()))?;
                    track_total_hits_set = true;
                }
                "seq_no_primary_term" => {
                    req.seq_no_primary_term = expect_bool(key, &Value::from(v.as_str()))?
                }
                "version" => req.version = expect_bool(key, &Value::from(v.as_str()))?,
                "timeout" => req.timeout = Some(crate::parse_time_value(v).map_err(|e| {
                    EngineError::illegal_argument(format!(
                        "failed to parse setting [timeout] with value [{v}] as a time value: {e}"
                    ))
                })?),
                _ => {}
            }
        }
        if rest_total_hits_as_int(params)? {
            match req.track_total_hits {
                TrackTotalHits::UpTo(n) if track_total_hits_set => {
                    return Err(EngineError::illegal_argument(format!(
                        "[{REST_TOTAL_HITS_AS_INT}] cannot be used if the tracking of total hits is not accurate, got {n}"
                    )));
                }
                TrackTotalHits::UpTo(_) => req.track_total_hits = TrackTotalHits::Exact,
                TrackTotalHits::Exact | TrackTotalHits::Off => {}
            }
        }
        Ok(req)
    }
}

/// Reads the `search_after` array: scalars only, as OpenSearch's `SearchAfterBuilder` reads it.
/// An empty array is no cursor.
fn parse_search_after(v: &Value) -> Result<Option<Vec<Value>>> {
    let values = v.as_array().map(Vec::as_slice).unwrap_or_default();
    if let Some(bad) = values.iter().find(|x| x.is_array() || x.is_object()) {
        return Err(parse_err(format!(
            "Expected [VALUE_STRING] or [VALUE_NUMBER] or [VALUE_BOOLEAN] or [VALUE_NULL] but found [{}] inside search_after.",
            start_token(bad)
        )));
    }
    Ok((!values.is_empty()).then(|| values.to_vec()))
}

/// Turns a request's `search_after` values into a cursor that every hit with the same sort
/// values sorts before (OpenSearch's `FieldDoc` with doc `Integer.MAX_VALUE`), checked as
/// OpenSearch checks it on a shard; `None` without `search_after`.
pub(crate) fn search_after_cursor(
    prepared: &[Prepared],
    req: &SearchRequest,
) -> Result<Option<Candidate>> {
    let Some(values) = &req.search_after else {
        return Ok(None);
    };
    let fail = |reason: String| {
        let e = EngineError::illegal_argument(reason);
        match prepared.first() {
            Some(p) => shard_failure(e, &p.handle),
            None => e.into_search_phase_failure(),
        }
    };
    if req.from > 0 {
        return Err(fail(
            "`from` parameter must be set to 0 when `search_after` is used.".into(),
        ));
    }
    // OpenSearch has no sort to page on when the sort is the default, by score descending.
    let by_score_only = match req.sort.as_slice() {
        [] => true,
        [only] => only.field == SortField::Score && only.desc,
        _ => false,
    };
    if by_score_only {
        return Err(fail("Sort must contain at least one field.".into()));
    }
    if values.len() != req.sort.len() {
        return Err(fail(format!(
            "search_after has {} value(s) but sort has {}.",
            values.len(),
            req.sort.len()
        )));
    }
    let mut keys = Vec::with_capacity(values.len());
    for (i, (spec, v)) in req.sort.iter().zip(values).enumerate() {
        let ty = prepared.iter().find_map(|p| {
            p.sort_columns
                .get(i)
                .and_then(|c| c.as_ref().map(|(_, t)| *t))
        });
        let key = after_value(spec, ty, v).ok_or_else(|| {
            let name = match &spec.field {
                SortField::Score => "_score",
                SortField::Doc => "_doc",
                SortField::Field(f) => f.as_str(),
            };
            fail(format!(
                "Failed to parse search_after value for field [{name}]."
            ))
        })?;
        keys.push(key);
    }
    Ok(Some(Candidate {
        keys,
        score: 0.0,
        at: (usize::MAX, u64::MAX, u32::MAX, DocId::MAX),
    }))
}

/// One `search_after` value as the sort key it stands for; `None` when it cannot be one.
fn after_value(spec: &SortSpec, ty: Option<FieldType>, v: &Value) -> Option<SortValue> {
    let number = |v: &Value| crate::mapping::coerce_float(v).map(SortValue::Num);
    if v.is_null() {
        return Some(SortValue::Missing);
    }
    match (&spec.field, ty) {
        (SortField::Score | SortField::Doc, _) => number(v),
        (SortField::Field(_), Some(FieldType::Date)) => {
            crate::date::parse_date_value(v).map(|ms| SortValue::Num(ms as f64))
        }
        (SortField::Field(_), Some(FieldType::Boolean)) => match v {
            Value::Bool(b) => Some(SortValue::Num(f64::from(u8::from(*b)))),
            Value::String(s) if s == "true" || s == "false" => {
                Some(SortValue::Num(f64::from(u8::from(s == "true"))))
            }
            _ => number(v),
        },
        (SortField::Field(_), Some(t)) if t.is_numeric() => number(v),
        // Addresses sort by their encoded form; the cursor holds an address as rendered.
        (SortField::Field(_), Some(FieldType::Ip)) => match v {
            Value::String(s) => crate::ip::encode_text(s).ok().map(SortValue::Str),
            _ => None,
        },
        (SortField::Field(_), Some(_)) => match v {
            Value::String(s) => Some(SortValue::Str(s.clone())),
            Value::Number(n) => Some(SortValue::Str(n.to_string())),
            Value::Bool(b) => Some(SortValue::Str(b.to_string())),
            _ => None,
        },
        // Unmapped in every index: every hit sorts as missing whatever the value.
        (SortField::Field(_), None) => match v {
            Value::String(s) => Some(SortValue::Str(s.clone())),
            other => number(other).or(Some(SortValue::Missing)),
        },
    }
}

fn start_token(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "START_OBJECT",
        Value::Array(_) => "START_ARRAY",
        Value::String(_) => "VALUE_STRING",
        Value::Number(_) => "VALUE_NUMBER",
        Value::Bool(_) => "VALUE_BOOLEAN",
        Value::Null => "VALUE_NULL",
    }
}

fn expect_bool(key: &str, v: &Value) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
        other => Err(parse_err(format!(
            "[{key}] expects a boolean, got a {}",
            start_token(other)
        ))),
    }
}

/// A value a hit is sorted by.
#[derive(Debug, Clone, PartialEq)]
enum SortValue {
    Missing,
    Num(f64),
    Str(String),
}

impl SortValue {
    fn cmp_present(&self, other: &SortValue) -> Ordering {
        match (self, other) {
            (SortValue::Num(a), SortValue::Num(b)) => a.total_cmp(b),
            (SortValue::Str(a), SortValue::Str(b)) => a.cmp(b),
            (SortValue::Num(_), SortValue::Str(_)) => Ordering::Less,
            (SortValue::Str(_), SortValue::Num(_)) => Ordering::Greater,
            _ => Ordering::Equal,
        }
    }
}

/// One candidate hit: its sort key and where it lives. The last hit of a scroll page is kept as
/// the cursor the next page starts after.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    keys: Vec<SortValue>,
    score: Score,
    /// (index position, sequence number, segment, doc): the final tie-break, ascending.
    ///
    /// Lucene breaks ties by doc id, which is indexing order; tantivy's segments come in no
    /// particular order (and several indexing threads share one refresh's documents between
    /// segments), so the document's sequence number stands for indexing order. It is
    /// `u64::MAX` in indices whose `_seq_no` is not a fast field (created before it was), which
    /// then fall back to segment and doc order.
    at: (usize, u64, u32, DocId),
}

/// Compares candidates in output order (best first) under a sort spec.
fn cmp_candidates(specs: &[SortSpec], a: &Candidate, b: &Candidate) -> Ordering {
    for (i, spec) in specs.iter().enumerate() {
        let (x, y) = (&a.keys[i], &b.keys[i]);
        let ord = match (x, y) {
            (SortValue::Missing, SortValue::Missing) => Ordering::Equal,
            (SortValue::Missing, _) => {
                if spec.missing_first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (_, SortValue::Missing) => {
                if spec.missing_first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            _ => {
                let o = x.cmp_present(y);
                if spec.desc { o.reverse() } else { o }
            }
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.at.cmp(&b.at)
}

/// A heap entry ordered so that the heap's top is the worst kept candidate.
struct HeapEntry<'s> {
    c: Candidate,
    specs: &'s [SortSpec],
}

impl PartialEq for HeapEntry<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for HeapEntry<'_> {}
impl PartialOrd for HeapEntry<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapEntry<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_candidates(self.specs, &self.c, &other.c)
    }
}

/// Reads one sort field's value for documents of one segment.
enum FieldReader {
    Missing,
    Num(Vec<tantivy::columnar::Column<f64>>),
    I64(tantivy::columnar::Column<i64>),
    Date(tantivy::columnar::Column<tantivy::DateTime>),
    Bool(tantivy::columnar::Column<bool>),
    Str(tantivy::columnar::StrColumn),
}

impl FieldReader {
    fn open(reader: &SegmentReader, column: Option<&str>) -> Result<FieldReader> {
        let Some(column) = column else {
            return Ok(FieldReader::Missing);
        };
        let handles = reader
            .fast_fields()
            .dynamic_column_handles(column)
            .map_err(crate::error::tantivy_error)?;
        let mut nums = Vec::new();
        for h in handles {
            match h.open()? {
                tantivy::columnar::DynamicColumn::I64(c) if nums.is_empty() => {
                    return Ok(FieldReader::I64(c));
                }
                tantivy::columnar::DynamicColumn::F64(c) => nums.push(c),
                tantivy::columnar::DynamicColumn::U64(c) => {
                    let _ = c;
                }
                tantivy::columnar::DynamicColumn::DateTime(c) => return Ok(FieldReader::Date(c)),
                tantivy::columnar::DynamicColumn::Bool(c) => return Ok(FieldReader::Bool(c)),
                tantivy::columnar::DynamicColumn::Str(c) => return Ok(FieldReader::Str(c)),
                _ => {}
            }
        }
        Ok(if nums.is_empty() {
            FieldReader::Missing
        } else {
            FieldReader::Num(nums)
        })
    }

    /// The value to sort `doc` by: the smallest for ascending, the largest for descending.
    fn value(&self, doc: DocId, desc: bool, buf: &mut String) -> SortValue {
        fn pick<T: PartialOrd + Copy>(mut it: impl Iterator<Item = T>, desc: bool) -> Option<T> {
            let first = it.next()?;
            Some(it.fold(first, |acc, v| if (v > acc) == desc { v } else { acc }))
        }
        match self {
            FieldReader::Missing => SortValue::Missing,
            FieldReader::I64(c) => pick(c.values_for_doc(doc), desc)
                .map_or(SortValue::Missing, |v| SortValue::Num(v as f64)),
            FieldReader::Num(cols) => cols
                .iter()
                .find_map(|c| pick(c.values_for_doc(doc), desc))
                .map_or(SortValue::Missing, SortValue::Num),
            FieldReader::Date(c) => pick(
                c.values_for_doc(doc).map(|d| d.into_timestamp_millis()),
                desc,
            )
            .map_or(SortValue::Missing, |v| SortValue::Num(v as f64)),
            FieldReader::Bool(c) => pick(c.values_for_doc(doc).map(u8::from), desc)
                .map_or(SortValue::Missing, |v| SortValue::Num(f64::from(v))),
            FieldReader::Str(c) => match pick(c.term_ords(doc), desc) {
                Some(ord) => {
                    buf.clear();
                    match c.ord_to_str(ord, buf) {
                        Ok(true) => SortValue::Str(buf.clone()),
                        _ => SortValue::Missing,
                    }
                }
                None => SortValue::Missing,
            },
        }
    }
}

/// What the collection of one search produced.
struct Collected {
    hits: Vec<Candidate>,
    total: u64,
    max_score: Option<Score>,
    timed_out: bool,
}

/// Per-index state prepared before collection; a scroll keeps it (searcher snapshot included)
/// for its later pages.
pub(crate) struct Prepared {
    handle: Arc<IndexHandle>,
    searcher: Searcher,
    query: Box<dyn Query>,
    /// Column name and field type for each sort field (`None` for unmapped).
    sort_columns: Vec<Option<(String, FieldType)>>,
    /// The aggregations to compute; a scroll clears them after its first page.
    pub(crate) aggs: Option<crate::aggs::PreparedAggs>,
}

impl Prepared {
    /// The index this state searches.
    pub(crate) fn handle(&self) -> &Arc<IndexHandle> {
        &self.handle
    }
}

/// Runs a search over `indices` and returns the response body.
///
/// `lookups` resolves the `terms` lookups of the query (see [`crate::lookup`]); without it a
/// lookup is an error.
pub fn execute(
    indices: &[Arc<IndexHandle>],
    req: &SearchRequest,
    ctx: &SearchContext,
    now_millis: i64,
    started: Instant,
    max_buckets: Option<u32>,
    lookups: Option<&TermsLookups<'_>>,
) -> Result<Value> {
    let prepared = prepare(indices, req, now_millis, max_buckets, lookups)?;
    let after = search_after_cursor(&prepared, req)?;
    Ok(run_prepared(&prepared, req, ctx, started, after.as_ref())?.0)
}

/// Checks the result window, takes a searcher snapshot of each index and builds its query,
/// sort columns and aggregations. `terms` lookups resolve through `lookups`, once per request;
/// a failed lookup fails the request with its own error rather than as a shard failure.
pub(crate) fn prepare(
    indices: &[Arc<IndexHandle>],
    req: &SearchRequest,
    now_millis: i64,
    max_buckets: Option<u32>,
    lookups: Option<&TermsLookups<'_>>,
) -> Result<Vec<Prepared>> {
    // The request's own limit (the cluster's `search.max_buckets`, set by the server) wins.
    let max_buckets = req.max_buckets.or(max_buckets);
    let window = indices
        .iter()
        .map(|h| h.max_result_window())
        .min()
        .unwrap_or(crate::index::DEFAULT_MAX_RESULT_WINDOW);
    if req.from.saturating_add(req.size) > window {
        return Err(EngineError::illegal_argument(format!(
            "Result window is too large, from + size must be less than or equal to: [{window}] but was [{}]. See the scroll api for a more efficient way to request large data sets. This limit can be set by changing the [index.max_result_window] index level setting.",
            req.from.saturating_add(req.size)
        ))
        .with_index(indices.first().map(|h| h.name().to_string()).unwrap_or_default())
        .into_search_phase_failure());
    }
    let mut prepared = Vec::with_capacity(indices.len());
    for h in indices {
        let mapping = h.mapping();
        let qctx = QueryContext {
            mapping: &mapping,
            fields: h.fields(),
            index: h.tantivy(),
            now_millis,
            index_name: h.name(),
            max_terms_count: h.max_terms_count(),
            lookups,
        };
        let failed = |e: EngineError| {
            lookups
                .and_then(TermsLookups::take_failure)
                .unwrap_or_else(|| shard_failure(e, h))
        };
        let query = build_query(&req.query, &qctx).map_err(failed)?;
        let mut sort_columns = Vec::new();
        for spec in &req.sort {
            if let SortField::Field(name) = &spec.field {
                let col = match mapping.resolve(name) {
                    Some(f) => match f.fast_field_name() {
                        Some(c) => Some((c, f.ty)),
                        None => {
                            return Err(shard_failure(
                                EngineError::illegal_argument(format!(
                                    "Text fields are not optimised for operations that require per-document field data like aggregations and sorting, so these operations are disabled by default. Please use a keyword field instead. Alternatively, set fielddata=true on [{name}] in order to load field data by uninverting the inverted index. Note that this can use significant memory."
                                )),
                                h,
                            ));
                        }
                    },
                    None => {
                        if spec.unmapped_ok {
                            None
                        } else {
                            return Err(shard_failure(
                                EngineError::new(
                                    ErrorCode::QueryShard,
                                    format!("No mapping found for [{name}] in order to sort on"),
                                ),
                                h,
                            ));
                        }
                    }
                };
                sort_columns.push(col);
            } else {
                sort_columns.push(None);
            }
        }
        let aggs = match &req.aggs {
            Some(a) => Some(crate::aggs::prepare(a, &qctx, max_buckets).map_err(failed)?),
            None => None,
        };
        prepared.push(Prepared {
            handle: h.clone(),
            searcher: h.searcher(),
            query,
            sort_columns,
            aggs,
        });
    }
    Ok(prepared)
}

/// Collects, aggregates and renders one page over prepared indices; with `after`, only hits
/// strictly after that hit in sort order (search after, for scroll pages). Returns the
/// response and the page's last hit.
pub(crate) fn run_prepared(
    prepared: &[Prepared],
    req: &SearchRequest,
    ctx: &SearchContext,
    started: Instant,
    after: Option<&Candidate>,
) -> Result<(Value, Option<Candidate>)> {
    let mut ctx = ctx.clone();
    if let Some(t) = req.timeout {
        let d = started + t;
        ctx.deadline = Some(ctx.deadline.map_or(d, |x| x.min(d)));
    }
    let collected = collect(prepared, req, &ctx, after)?;
    let aggregations = match (&req.aggs, prepared.first()) {
        (Some(_), Some(_)) => Some(finish_aggs(prepared, &collected, &ctx)?),
        (Some(_), None) => Some(json!({})),
        _ => None,
    };
    if ctx.is_cancelled() {
        return Err(cancelled());
    }
    let last = collected.1.hits.last().cloned();
    let resp = render_response(prepared, req, collected.1, aggregations, started, &ctx)?;
    Ok((resp, last))
}

fn shard_failure(e: EngineError, h: &IndexHandle) -> EngineError {
    let e = if e.index.is_none()
        && matches!(e.code, ErrorCode::QueryShard | ErrorCode::IllegalArgument)
    {
        e.with_index(h.name())
    } else {
        e
    };
    e.into_search_phase_failure()
}

type AggFruits = Vec<Option<crate::aggs::AggFruit>>;

/// Collects the top hits (after `after`, when given), the total and the aggregations.
///
/// In `_doc` order with nothing else to compute (no total, no aggregations, no scores to
/// report) an index's documents arrive in sort order, so collection skips the documents before
/// `after` and stops an index at its first document that does not make the page: a scroll
/// page sorted on `_doc` costs its page, not a pass over every match.
fn collect(
    prepared: &[Prepared],
    req: &SearchRequest,
    ctx: &SearchContext,
    after: Option<&Candidate>,
) -> Result<(AggFruits, Collected)> {
    let k = req.from.saturating_add(req.size) as usize;
    let by_score_only = req.sort.is_empty();
    let specs: Vec<SortSpec> = if by_score_only {
        vec![SortSpec {
            field: SortField::Score,
            desc: true,
            missing_first: false,
            unmapped_ok: false,
        }]
    } else {
        req.sort.clone()
    };
    let needs_scores = specs.iter().any(|s| s.field == SortField::Score)
        || req.track_scores
        || req.min_score.is_some();
    let mut heap: BinaryHeap<HeapEntry<'_>> = BinaryHeap::with_capacity(k.min(100_000) + 1);
    let mut total = 0u64;
    let mut max_score: Option<Score> = None;
    let mut timed_out = false;
    let mut fruits = Vec::with_capacity(prepared.len());
    let mut since_check = 0u32;
    let mut buf = String::new();
    let doc_order = specs[0].field == SortField::Doc
        && !specs[0].desc
        && req.track_total_hits == TrackTotalHits::Off
        && !req.track_scores;
    'indices: for (ipos, p) in prepared.iter().enumerate() {
        let may_stop = doc_order && p.aggs.is_none();
        // The first index-wide doc id that can sort after `after`.
        let first_doc = match after.map(|a| &a.keys[0]) {
            Some(SortValue::Num(n)) if may_stop => *n as u32,
            _ => 0,
        };
        let mut index_done = false;
        let enable = if needs_scores {
            EnableScoring::enabled_from_searcher(&p.searcher)
        } else {
            EnableScoring::disabled_from_searcher(&p.searcher)
        };
        let weight = p.query.weight(enable).map_err(|e| {
            shard_failure(
                EngineError::query_shard(format!("failed to create query: {e}")),
                &p.handle,
            )
        })?;
        let agg_collector = p.aggs.as_ref().map(|a| a.collector());
        let mut seg_fruits = Vec::new();
        // The index-wide doc id of a segment's first document, as OpenSearch's `_doc` sort
        // values are index-wide.
        let mut seg_base = 0u32;
        for (seg_ord, seg) in p.searcher.segment_readers().iter().enumerate() {
            let base = seg_base;
            seg_base += seg.max_doc();
            if seg_base <= first_doc {
                continue;
            }
            if ctx.is_cancelled() {
                return Err(cancelled());
            }
            if ctx.is_past_deadline() {
                timed_out = true;
                break 'indices;
            }
            let readers = specs
                .iter()
                .zip(p.sort_columns.iter().chain(std::iter::repeat(&None)))
                .map(|(s, col)| match s.field {
                    SortField::Field(_) => {
                        FieldReader::open(seg, col.as_ref().map(|(c, _)| c.as_str()))
                    }
                    _ => Ok(FieldReader::Missing),
                })
                .collect::<Result<Vec<_>>>()?;
            let mut seg_agg = match &agg_collector {
                Some(c) => Some(
                    c.for_segment(seg_ord as u32, seg)
                        .map_err(crate::aggs::classify_error)?,
                ),
                None => None,
            };
            let seq_nos = seg.fast_fields().u64(crate::schema::SEQ_NO_FIELD).ok();
            let mut scorer = weight
                .scorer(seg, 1.0)
                .map_err(crate::error::tantivy_error)?;
            let alive = seg.alive_bitset();
            let mut doc = scorer.doc();
            let target = first_doc.saturating_sub(base);
            if doc != TERMINATED && target > doc {
                doc = scorer.seek(target);
            }
            while doc != TERMINATED {
                since_check += 1;
                if since_check >= CHECK_EVERY_DOCS {
                    since_check = 0;
                    if ctx.is_cancelled() {
                        return Err(cancelled());
                    }
                    if ctx.is_past_deadline() {
                        timed_out = true;
                        if let Some(a) = seg_agg.take() {
                            seg_fruits.push(tantivy::collector::SegmentCollector::harvest(a));
                        }
                        break;
                    }
                }
                if alive.is_none_or(|b| b.is_alive(doc)) {
                    let score = if needs_scores { scorer.score() } else { 0.0 };
                    if req.min_score.is_none_or(|m| score >= m) {
                        total += 1;
                        if needs_scores {
                            max_score = Some(max_score.map_or(score, |m: Score| m.max(score)));
                        }
                        if let Some(a) = seg_agg.as_mut() {
                            tantivy::collector::SegmentCollector::collect(a, doc, score);
                        }
                        if k > 0 || may_stop {
                            let keys = specs
                                .iter()
                                .zip(&readers)
                                .map(|(s, r)| match s.field {
                                    SortField::Score => SortValue::Num(f64::from(score)),
                                    SortField::Doc => SortValue::Num(f64::from(base + doc)),
                                    SortField::Field(_) => r.value(doc, s.desc, &mut buf),
                                })
                                .collect();
                            let c = Candidate {
                                keys,
                                score,
                                at: (
                                    ipos,
                                    seq_nos
                                        .as_ref()
                                        .and_then(|c| c.first(doc))
                                        .unwrap_or(u64::MAX),
                                    seg_ord as u32,
                                    doc,
                                ),
                            };
                            if after
                                .is_some_and(|a| cmp_candidates(&specs, &c, a) != Ordering::Greater)
                            {
                                // At or before the cursor: an earlier page returned it.
                            } else if heap.len() < k {
                                heap.push(HeapEntry { c, specs: &specs });
                            } else if heap
                                .peek()
                                .is_some_and(|w| cmp_candidates(&specs, &c, &w.c) == Ordering::Less)
                            {
                                heap.pop();
                                heap.push(HeapEntry { c, specs: &specs });
                            } else if may_stop {
                                // Every later document of this index sorts after this one.
                                index_done = true;
                                break;
                            }
                        }
                    }
                }
                doc = scorer.advance();
            }
            if let Some(a) = seg_agg.take() {
                seg_fruits.push(tantivy::collector::SegmentCollector::harvest(a));
            }
            if timed_out || index_done {
                break;
            }
        }
        // Harvesting and merging a heavy aggregation's segments can take as long as collecting
        // them; a task cancelled meanwhile stops here instead of merging.
        if ctx.is_cancelled() {
            return Err(cancelled());
        }
        let fruit = match &agg_collector {
            Some(c) => Some(
                c.merge_fruits(seg_fruits)
                    .map_err(crate::aggs::classify_error)?,
            ),
            None => None,
        };
        fruits.push(fruit);
        if timed_out {
            break;
        }
    }
    let mut hits: Vec<Candidate> = heap.into_iter().map(|e| e.c).collect();
    hits.sort_by(|a, b| cmp_candidates(&specs, a, b));
    Ok((
        fruits,
        Collected {
            hits,
            total,
            max_score,
            timed_out,
        },
    ))
}

/// The error of a search stopped by its context's cancellation.
pub(crate) fn cancelled() -> EngineError {
    EngineError::new(
        ErrorCode::TaskCancelled,
        "The parent task was cancelled, shouldn't start any child tasks, cancelled",
    )
}

/// Merges the indices' aggregation results and renders them; checks for cancellation before
/// each merge and before the final stage (bucket finishing), the parts of a heavy aggregation
/// that run after the last document.
fn finish_aggs(
    prepared: &[Prepared],
    collected: &(AggFruits, Collected),
    ctx: &SearchContext,
) -> Result<Value> {
    let mut merged: Option<crate::aggs::AggFruit> = None;
    for f in collected.0.iter().flatten() {
        if ctx.is_cancelled() {
            return Err(cancelled());
        }
        merged = Some(match merged {
            None => f.clone(),
            Some(m) => crate::aggs::merge(m, f.clone())?,
        });
    }
    let all: Vec<&crate::aggs::PreparedAggs> =
        prepared.iter().filter_map(|p| p.aggs.as_ref()).collect();
    let first = all
        .first()
        .ok_or_else(|| EngineError::internal("aggregations not prepared"))?;
    if ctx.is_cancelled() {
        return Err(cancelled());
    }
    match merged {
        Some(m) => crate::aggs::finish_all(m, &all),
        None => crate::aggs::finish_empty(first),
    }
}

/// Applies `_source` include/exclude patterns.
pub fn filter_source(source: &Value, filter: &SourceFilter) -> Value {
    if filter.includes.is_empty() && filter.excludes.is_empty() {
        return source.clone();
    }
    fn walk(v: &Value, prefix: &str, f: &SourceFilter) -> Option<Value> {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, child) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if f.excludes.iter().any(|p| wildcard_match(p, &path)) {
                        continue;
                    }
                    let included = f.includes.is_empty()
                        || f.includes.iter().any(|p| {
                            wildcard_match(p, &path)
                                || wildcard_match(&format!("{p}.*"), &path)
                                || p == &path
                        });
                    if included && !child.is_object() {
                        out.insert(k.clone(), child.clone());
                        continue;
                    }
                    let is_prefix = f
                        .includes
                        .iter()
                        .any(|p| p.starts_with(&format!("{path}.")) || p.starts_with('*'));
                    if child.is_object() && (included || is_prefix) {
                        let sub = if included && f.excludes.is_empty() {
                            Some(child.clone())
                        } else {
                            walk(child, &path, f)
                        };
                        if let Some(sub) = sub
                            && (included || sub.as_object().is_some_and(|o| !o.is_empty()))
                        {
                            out.insert(k.clone(), sub);
                        }
                    }
                }
                Some(Value::Object(out))
            }
            other => Some(other.clone()),
        }
    }
    walk(source, "", filter).unwrap_or(Value::Null)
}

fn render_sort_value(v: &SortValue, spec: &SortSpec, ty: Option<FieldType>) -> Value {
    match v {
        SortValue::Missing => {
            // OpenSearch renders the missing sentinel of the sort direction.
            if spec.desc {
                json!(i64::MIN)
            } else {
                json!(i64::MAX)
            }
        }
        // An address sorts by its encoded form and is shown as an address.
        SortValue::Str(s) if ty == Some(FieldType::Ip) => {
            json!(crate::ip::decode(s).unwrap_or_else(|| s.clone()))
        }
        SortValue::Str(s) => json!(s),
        SortValue::Num(n) => match (ty, &spec.field) {
            (_, SortField::Doc) => json!(*n as i64),
            // The key holds the f32 score widened: render the float OpenSearch would.
            (_, SortField::Score) => score_json(*n as f32),
            (Some(t), _) if t.is_integer() || t == FieldType::Date => json!(*n as i64),
            (Some(FieldType::Boolean), _) => json!(*n != 0.0),
            _ => json!(n),
        },
    }
}

fn render_response(
    prepared: &[Prepared],
    req: &SearchRequest,
    collected: Collected,
    aggregations: Option<Value>,
    started: Instant,
    ctx: &SearchContext,
) -> Result<Value> {
    let scores_shown = req.sort.is_empty()
        || req.track_scores
        || req.sort.iter().any(|s| s.field == SortField::Score);
    let mut hits_json = Vec::new();
    for (i, c) in collected.hits.iter().skip(req.from as usize).enumerate() {
        // Loading documents is work too: stop it as promptly as collection.
        if i % FETCH_CHECK_EVERY_HITS == FETCH_CHECK_EVERY_HITS - 1 && ctx.is_cancelled() {
            return Err(cancelled());
        }
        let p = &prepared[c.at.0];
        let stored = p
            .handle
            .load_doc(&p.searcher, DocAddress::new(c.at.2, c.at.3))?;
        let mut hit = Map::new();
        hit.insert("_index".into(), json!(p.handle.name()));
        hit.insert("_id".into(), json!(stored.id));
        if req.version {
            hit.insert("_version".into(), json!(stored.version));
        }
        if req.seq_no_primary_term {
            hit.insert("_seq_no".into(), json!(stored.seq_no));
            hit.insert("_primary_term".into(), json!(PRIMARY_TERM));
        }
        hit.insert(
            "_score".into(),
            if scores_shown {
                score_json(c.score)
            } else {
                Value::Null
            },
        );
        if !req.source.disabled {
            hit.insert("_source".into(), filter_source(&stored.source, &req.source));
        }
        if !req.sort.is_empty() {
            let sort_vals: Vec<Value> = req
                .sort
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    render_sort_value(
                        &c.keys[i],
                        spec,
                        p.sort_columns
                            .get(i)
                            .and_then(|c| c.as_ref().map(|(_, t)| *t)),
                    )
                })
                .collect();
            hit.insert("sort".into(), Value::Array(sort_vals));
        }
        hits_json.push(Value::Object(hit));
    }
    let mut hits = Map::new();
    match req.track_total_hits {
        TrackTotalHits::Off => {}
        TrackTotalHits::Exact => {
            hits.insert(
                "total".into(),
                json!({"value": collected.total, "relation": "eq"}),
            );
        }
        TrackTotalHits::UpTo(n) => {
            if collected.total > n {
                hits.insert("total".into(), json!({"value": n, "relation": "gte"}));
            } else {
                hits.insert(
                    "total".into(),
                    json!({"value": collected.total, "relation": "eq"}),
                );
            }
        }
    }
    // With `size: 0` OpenSearch collects no top documents and so has no maximum score.
    hits.insert(
        "max_score".into(),
        if scores_shown && req.size > 0 {
            collected.max_score.map_or(Value::Null, score_json)
        } else {
            Value::Null
        },
    );
    hits.insert("hits".into(), Value::Array(hits_json));
    let shards: u64 = prepared.iter().map(|p| p.handle.number_of_shards()).sum();
    let mut out = Map::new();
    out.insert("took".into(), json!(started.elapsed().as_millis() as u64));
    out.insert("timed_out".into(), json!(collected.timed_out));
    out.insert(
        "_shards".into(),
        json!({"total": shards, "successful": shards, "skipped": 0, "failed": 0}),
    );
    out.insert("hits".into(), Value::Object(hits));
    if let Some(a) = aggregations {
        out.insert("aggregations".into(), a);
    }
    Ok(Value::Object(out))
}

/// Counts the documents matching a query (`_count`); `lookups` as for [`execute`].
pub fn count(
    indices: &[Arc<IndexHandle>],
    query: &Value,
    ctx: &SearchContext,
    now_millis: i64,
    lookups: Option<&TermsLookups<'_>>,
) -> Result<u64> {
    let req = SearchRequest {
        query: query.clone(),
        size: 0,
        track_total_hits: TrackTotalHits::Exact,
        ..SearchRequest::default()
    };
    let v = execute(
        indices,
        &req,
        ctx,
        now_millis,
        Instant::now(),
        None,
        lookups,
    )?;
    Ok(v["hits"]["total"]["value"].as_u64().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_context_is_cancelled_with_its_parent() {
        let parent_flag = Arc::new(AtomicBool::new(false));
        let parent = Arc::new(SearchContext {
            cancelled: Some(parent_flag.clone()),
            ..Default::default()
        });
        let child = SearchContext {
            cancelled: Some(Arc::new(AtomicBool::new(false))),
            parent: Some(parent),
            ..Default::default()
        };
        assert!(!child.is_cancelled());
        parent_flag.store(true, AtomicOrdering::Relaxed);
        assert!(child.is_cancelled());
        let past = SearchContext {
            parent: Some(Arc::new(SearchContext {
                cancel_at: Some(Instant::now()),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert!(
            past.is_cancelled(),
            "a parent past its cancel_at cancels the child"
        );
        assert!(format!("{past:?}").contains("SearchContext"));
    }
}
