//! `_msearch` (and `_msearch/template`) through the gateway: the items are authorized and
//! admitted one by one as children of one msearch task, exactly as on an embedded node; only
//! the admitted items are forwarded, in `_msearch` batches to the upstream as admission lets
//! them through (usually one, see [`run`]); the answers are merged back in request order, an
//! item refused becoming its error item (a 403 or a 429 inside the 200).
//!
//! The upstream's answers are not parsed: each item's bytes are relayed as they arrive
//! ([`super::msearch_scan`] finds where items end, [`super::msearch_merge`] puts them in
//! request order with the gateway's own items), so a gateway's memory for an answer of any
//! size is a few buffers, as for a `_search`. What is still held: up to
//! [`HOLD`] of each batch's answer (checked whole when it ends
//! within it), items that arrive before an earlier item of the request (a later batch's), and
//! answers rendered whole (`filter_path`, `pretty`, YAML).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use hyper::body::{Body as HttpBody, Frame};
use serde_json::{Value, json};
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode};

use super::cancelled::Slot;
use super::msearch_merge::{BatchAnswer, Fatal, HOLD, Order, settle};
use super::routes::{Read, call_as, read, time_param};
use super::stream_back;
use super::streamed::{AnswerBody, AnswerError};
use crate::admission::{Admitted, TaskSpec, admit};
use crate::api::msearch::error_item;
use crate::error::{ApiError, ApiResult, render_error};
use crate::http::{Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::{CancelOnDrop, actions};

/// One item: its two lines as sent, and what admission needs of them.
struct Item {
    header: serde_json::Map<String, Value>,
    body: Value,
    index: String,
    params: Params,
}

/// Splits an NDJSON msearch body into items ([`crate::api::msearch::split_items`]); the
/// upstream validates their content. An item's `cancel_after_time_interval` is its header's,
/// else the URL's (`url`), as on an embedded node.
fn split(body: &[u8], default_index: Option<&str>, url: &Params) -> Result<Vec<Item>, EngineError> {
    let items = crate::api::msearch::split_items(body)?;
    Ok(items
        .into_iter()
        .map(|raw| {
            let header = raw.header;
            let index = match header.get("index").or_else(|| header.get("indices")) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
                _ => default_index.unwrap_or("_all").to_string(),
            };
            let mut params = Params::new();
            let cancel_after = match header.get(CANCEL_AFTER) {
                Some(Value::String(s)) => Some(s),
                _ => url.get(CANCEL_AFTER),
            };
            if let Some(s) = cancel_after {
                params.insert(CANCEL_AFTER.to_string(), s.clone());
            }
            Item {
                header,
                body: raw.body,
                index,
                params,
            }
        })
        .collect())
}

/// The parameter (and item header key) of an item's cancel-after.
const CANCEL_AFTER: &str = "cancel_after_time_interval";

/// An item once admission decided.
enum Decided {
    Admitted(Box<Admitted>, Item),
    Refused(ApiError),
}

/// Items admitted and started, forwarded together in one upstream `_msearch`.
struct Batch {
    /// Each item's place in the request, and its admission.
    items: Vec<(usize, Box<Admitted>)>,
    ndjson: String,
    keep: Vec<Box<dyn std::any::Any + Send>>,
    /// When the gateway gives up on the batch: once every item's cancel-after passed (the
    /// upstream enforces each item's own); an item without one keeps the batch open.
    deadline: Option<Instant>,
}

/// A batch's items and the upstream's answer to them (its head).
type Answered = (
    Vec<(usize, Box<Admitted>)>,
    ApiResult<http::Response<AnswerBody>>,
);

/// A batch's answer whose body is being read.
struct Reading {
    answer: BatchAnswer,
    body: AnswerBody,
}

/// The next frame of an answer's body: `None` at its end.
type NextFrame = Option<Result<Frame<Bytes>, AnswerError>>;

/// What woke the request up.
enum Wake {
    /// Items decided by admission.
    Decided((usize, Decided)),
    /// A batch's answer's head.
    Answered(Answered),
    /// The next frame of the body of `reads[i]`.
    Read(usize, NextFrame),
}

/// What a turn of [`Merge::turn`] came to.
enum Turn {
    /// Something moved.
    Progress,
    /// The request's only batch got an error status for the whole request: it passes through.
    Passthrough(http::Response<AnswerBody>),
    /// Nothing is left to wait for.
    Done,
}

/// One `_msearch` in flight: its items' admissions, its batches forwarded and their answers
/// read, and the answer put together in request order.
///
/// # Cancel safety
/// Dropping it (the client left, with the answer's body) cancels the msearch task and so its
/// items, as dropping the handler did; the upstream requests in flight are dropped.
struct Merge {
    // Dropped in this order (a field's place is its turn): the items' tickets, then the
    // cancellation of the msearch task and its children, then the task itself.
    forwards: FuturesUnordered<BoxFuture<'static, Answered>>,
    admissions: FuturesUnordered<BoxFuture<'static, (usize, Decided)>>,
    reads: Vec<Reading>,
    /// Armed until the answer is complete.
    on_drop: Option<CancelOnDrop>,
    parent: crate::tasks::TaskGuard,
    up: Arc<super::Upstream>,
    meta: RequestMeta,
    parts: Box<http::request::Parts>,
    template: bool,
    order: Order,
    batches: usize,
    /// How much of a batch's answer is held before it streams ([`HOLD`]).
    hold: usize,
    /// Once the answer's status is decided, no batch's error passes through.
    decided: bool,
    /// A failure after part of the answer went out: the answer is cut.
    fatal: Option<EngineError>,
    cut: bool,
    started: Instant,
}

/// Runs an `_msearch` (see the module docs).
///
/// Items are forwarded in batches as admission lets them through: those admitted at once go
/// out together, and an item that waits in its group's queue goes out with the next batch
/// once a slot frees up (its own batch's, another request's). Waiting for every item before
/// forwarding any would deadlock an msearch with more items than its group's `node_limit`:
/// the queued items would wait for slots the request's own admitted items hold until the
/// whole request is forwarded.
///
/// The answer's head goes out once its status is known: every item answered (the answer is
/// then sent whole), or a batch's answer passed [`HOLD`] (the answer then streams), or the
/// only batch's upstream answered an error status for the whole request (passed through).
pub async fn run(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    req: Request,
    template: bool,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    if body.is_empty() {
        return Err(EngineError::new(ErrorCode::Parse, "request body is required").into());
    }
    let items = split(&body, index.as_deref(), &params)?;
    let parent = st.tasks.register(
        if template {
            actions::MSEARCH_TEMPLATE
        } else {
            actions::MSEARCH
        },
        format!(
            "requests[{}], indices[{}]",
            items.len(),
            index.as_deref().unwrap_or("")
        ),
        None,
        meta.principal.clone(),
    );
    if let Some(id) = &meta.opaque_id {
        parent.task().set_opaque_id(id.clone());
    }
    let parent_seq = parent.task().seq;
    // Dropped with the request (its handler, or its answer's body) when the client
    // disconnects: cancels the children too.
    let on_drop = CancelOnDrop::new(st.tasks.clone(), parent_seq);
    let started = Instant::now();
    let count = items.len();
    let whole = whole_answer(&parts, &params);
    // Admitted one by one, concurrently: an item waiting in its group's queue does not hold
    // back the admission of the others.
    let admissions: FuturesUnordered<_> = items
        .into_iter()
        .enumerate()
        .map(|(place, item)| {
            let (st, meta) = (st.clone(), meta.clone());
            async move { (place, decide(&st, &meta, parent_seq, template, item).await) }.boxed()
        })
        .collect();
    let mut m = Merge {
        up,
        meta,
        parts,
        template,
        parent,
        on_drop: Some(on_drop),
        admissions,
        forwards: FuturesUnordered::new(),
        reads: Vec::new(),
        order: Order::new(count),
        batches: 0,
        hold: if whole { usize::MAX } else { HOLD },
        decided: false,
        fatal: None,
        cut: false,
        started,
    };
    loop {
        match m.turn().await {
            Turn::Passthrough(resp) => {
                m.complete();
                return Ok(stream_back(resp));
            }
            Turn::Done => break,
            Turn::Progress if m.reads.iter().any(|r| r.answer.is_streaming()) => break,
            Turn::Progress => {}
        }
    }
    m.decided = true;
    let took = m.started.elapsed().as_millis() as u64;
    if let Some(e) = m.fatal.take() {
        // Only a streaming batch fails so, and none streams yet: kept for safety.
        return Err(ApiError::Engine(e));
    }
    if m.is_done() {
        m.fill_missing();
        m.order.open(took);
        let bytes = m.order.take_all();
        m.complete();
        if !whole {
            return Ok(json_answer(Body::from(bytes)));
        }
        // Rendered whole as every answer sluice builds: `filter_path`, `pretty`, YAML.
        let mut v: Value = serde_json::from_slice(&bytes).map_err(|e| {
            EngineError::new(
                ErrorCode::UpstreamFailed,
                format!("the upstream's _msearch answer is not JSON: {e}"),
            )
        })?;
        v["took"] = json!(took);
        return Ok(reply(StatusCode::OK, v, &params));
    }
    m.order.open(took);
    let chunks = futures::stream::unfold(m, |mut m| async move {
        let chunk = m.next_chunk().await?;
        Some((chunk, m))
    });
    Ok(json_answer(Body::from_stream(chunks)))
}

/// Whether the answer is built whole before it goes out: `filter_path`, `pretty` and YAML
/// apply to the whole answer, as to every answer sluice builds (the upstream answers YAML to
/// a request that asks it, and the gateway reads it whole).
fn whole_answer(parts: &http::request::Parts, params: &Params) -> bool {
    let query = parts.uri.query();
    params.contains_key("filter_path")
        || crate::http::pretty::wants_pretty(query)
        || crate::http::format::wants_yaml(query, crate::http::format::accept(&parts.headers))
}

/// A 200 JSON answer of `body`.
fn json_answer(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}

/// Polls the bodies being read, in order: the first frame (or end, or failure) of any.
fn poll_reads(reads: &mut [Reading], cx: &mut Context<'_>) -> Poll<(usize, NextFrame)> {
    for (i, r) in reads.iter_mut().enumerate() {
        if let Poll::Ready(frame) = Pin::new(&mut r.body).poll_frame(cx) {
            return Poll::Ready((i, frame));
        }
    }
    Poll::Pending
}

impl Merge {
    /// Waits for the next thing to happen (an admission, a batch's answer, bytes of one) and
    /// acts on it.
    async fn turn(&mut self) -> Turn {
        let wake = tokio::select! {
            Some(first) = self.admissions.next(), if !self.admissions.is_empty() => {
                Wake::Decided(first)
            }
            Some(answered) = self.forwards.next(), if !self.forwards.is_empty() => {
                Wake::Answered(answered)
            }
            (i, frame) = std::future::poll_fn(|cx| poll_reads(&mut self.reads, cx)),
                if !self.reads.is_empty() => Wake::Read(i, frame),
            else => return Turn::Done,
        };
        match wake {
            Wake::Decided(first) => {
                // With it, every item whose admission is decided by now (those admitted or
                // refused at once): one batch, not one upstream call an item.
                let mut decided = vec![first];
                while let Some(Some(next)) = self.admissions.next().now_or_never() {
                    decided.push(next);
                }
                self.forward(decided);
            }
            Wake::Answered((items, result)) => {
                // The upstream's whole-request error passes through unchanged when this batch
                // was the request's only one; otherwise each of its items carries it.
                let only = self.batches == 1 && self.admissions.is_empty() && !self.decided;
                match result {
                    Ok(resp) if resp.status().is_success() => self.read_answer(items, resp).await,
                    Ok(resp) if only => {
                        for (_, mut t) in items {
                            settle(&self.up, &mut t, false);
                        }
                        return Turn::Passthrough(resp);
                    }
                    Ok(resp) => {
                        let item = upstream_error_item(resp).await;
                        for (place, mut t) in items {
                            settle(&self.up, &mut t, false);
                            self.order.own(place, &item);
                        }
                    }
                    Err(e) => self.failed(items, e),
                }
            }
            Wake::Read(i, frame) => self.read(i, frame),
        }
        Turn::Progress
    }

    /// Starts the admitted items of `decided` as a batch and forwards it.
    fn forward(&mut self, decided: Vec<(usize, Decided)>) {
        let dialect = self.up.product.dialect();
        let batch = start_batch(decided, self.template, dialect, &mut self.order);
        if batch.items.is_empty() {
            return;
        }
        self.batches += 1;
        let call = call_as(&self.up, &self.meta, &self.parts, &[], batch.ndjson.into())
            .answer_uncompressed();
        let (up, task) = (self.up.clone(), self.parent.task().clone());
        self.forwards.push(
            async move {
                // The items hold the slots; the parent names the batch upstream.
                let items: Vec<_> = batch.items.iter().map(|(_, a)| a.task().clone()).collect();
                let result = up
                    .run_started(task, batch.deadline, batch.keep, Some(&items), call)
                    .await;
                (batch.items, result)
            }
            .boxed(),
        );
    }

    /// A batch's successful head: its body is read as it comes (JSON), or whole (YAML, which
    /// the upstream answers a request that asks for it).
    async fn read_answer(
        &mut self,
        items: Vec<(usize, Box<Admitted>)>,
        resp: http::Response<AnswerBody>,
    ) {
        let mut answer = BatchAnswer::new(items, self.hold);
        if let Err(e) = super::uncompressed(&resp, "_msearch") {
            let outcome = answer.broke(&self.up, &mut self.order, e);
            self.settled(outcome);
            return;
        }
        if super::sniff::Format::of(resp.headers()) != super::sniff::Format::Yaml {
            self.reads.push(Reading {
                answer,
                body: resp.into_body(),
            });
            return;
        }
        let outcome = match super::json_answer(resp, "_msearch").await {
            Ok(v) => match answer.feed(&self.up, &Bytes::from(v.to_string()), &mut self.order) {
                Ok(true) => answer.end(&self.up, &mut self.order),
                Ok(false) => Ok(()),
                Err(fatal) => Err(fatal),
            },
            Err(e) => answer.broke(&self.up, &mut self.order, e),
        };
        self.settled(outcome);
    }

    /// The next frame of `reads[i]`'s body.
    fn read(&mut self, i: usize, frame: NextFrame) {
        let outcome = match frame {
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    return;
                };
                match self.reads[i].answer.feed(&self.up, &data, &mut self.order) {
                    Ok(true) => return,
                    Ok(false) => {
                        self.reads.swap_remove(i);
                        return;
                    }
                    Err(fatal) => Err(fatal),
                }
            }
            None => self
                .reads
                .swap_remove(i)
                .answer
                .end(&self.up, &mut self.order),
            Some(Err(e)) => {
                let e = EngineError::new(
                    ErrorCode::UpstreamFailed,
                    format!(
                        "the upstream's _msearch answer broke off: {}",
                        super::client::causes(&e)
                    ),
                );
                self.reads
                    .swap_remove(i)
                    .answer
                    .broke(&self.up, &mut self.order, e)
            }
        };
        self.settled(outcome);
    }

    /// A batch failed after part of the answer went out: every item still unsettled is
    /// settled as a failure, the batches in flight are dropped, and the answer is cut.
    fn settled(&mut self, outcome: Result<(), Fatal>) {
        let Err(Fatal(e)) = outcome else {
            return;
        };
        tracing::warn!(cause = %e, "gateway: an _msearch answer failed mid-answer; its client's connection is closed");
        for r in &mut self.reads {
            r.answer.settle_rest(&self.up);
        }
        self.reads.clear();
        self.forwards = FuturesUnordered::new();
        self.admissions = FuturesUnordered::new();
        self.fatal = Some(e);
    }

    /// The batch of `items` failed before its answer (`e`): each item is its error, worded as
    /// its ticket words it (a cancelled item as OpenSearch words a cancelled search).
    fn failed(&mut self, items: Vec<(usize, Box<Admitted>)>, e: ApiError) {
        let engine = match &e {
            ApiError::Engine(e) | ApiError::Rejected { error: e, .. } => e.clone(),
            other => EngineError::internal(format!("msearch batch failed: {other:?}")),
        };
        for (place, mut t) in items {
            self.up.finished(t.task(), t.execution().hooks.as_ref());
            let settled = t
                .finish::<()>(Err(ApiError::Engine(engine.clone())))
                .err()
                .unwrap_or_else(|| ApiError::Engine(engine.clone()));
            self.order
                .own(place, &error_item(&settled, self.up.product.dialect()));
        }
    }

    /// Whether nothing is left to wait for.
    fn is_done(&self) -> bool {
        self.admissions.is_empty() && self.forwards.is_empty() && self.reads.is_empty()
    }

    /// An error item for every place left without an answer (none, unless a batch was lost).
    fn fill_missing(&mut self) {
        for place in self.order.missing() {
            let e = EngineError::internal("msearch item was never answered");
            let item = error_item(&ApiError::Engine(e), self.up.product.dialect());
            self.order.own(place, &item);
        }
    }

    /// The request ended well: its task ends without cancelling its items.
    fn complete(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            on_drop.disarm();
        }
    }

    /// The next bytes of a streamed answer; an error cuts it (after a [`Fatal`] failure).
    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            if let Some(bytes) = self.order.pop() {
                return Some(Ok(bytes));
            }
            if let Some(e) = self.fatal.take() {
                self.cut = true;
                return Some(Err(std::io::Error::other(e.reason)));
            }
            if self.cut {
                return None;
            }
            if self.order.is_closed() {
                self.complete();
                return None;
            }
            if let Turn::Done = self.turn().await {
                self.fill_missing();
            }
        }
    }
}

/// Authorizes and admits one item as a child of the msearch task `parent`.
async fn decide(
    st: &Arc<AppState>,
    meta: &RequestMeta,
    parent: u64,
    template: bool,
    item: Item,
) -> Decided {
    let description = if template {
        format!("indices[{}], template[{}]", item.index, item.body)
    } else {
        crate::api::search::search_description(&item.index, Some(&item.body))
    };
    // Authorized before admission, as on an embedded node: the item's indices, and what else
    // the upstream would read for it (its `terms` lookups and other references).
    let action = if template {
        Action::SearchTemplate
    } else {
        Action::Search
    };
    let allowed = crate::auth::authorize_item(st, meta, action, &item.index).and_then(|()| {
        super::routes::authorize_references(st, meta, &item.body, action, &item.index, template)
    });
    if let Err(e) = allowed {
        return Decided::Refused(ApiError::Engine(e));
    }
    let spec =
        TaskSpec::new(actions::SEARCH, description, &item.index, &item.params).map(|mut s| {
            s.parent = Some(parent);
            s
        });
    match spec {
        Ok(spec) => match admit(st, meta, spec).await {
            Ok(a) => Decided::Admitted(Box::new(a), item),
            Err(e) => Decided::Refused(e),
        },
        Err(e) => Decided::Refused(e),
    }
}

/// Starts the admitted items of `decided` (admission's start hook may still turn one away,
/// as a search thread's would) into a batch: each with its group's timeout and what is left of
/// its cancel-after. Refused items get their error item in `order` at once.
fn start_batch(
    decided: Vec<(usize, Decided)>,
    template: bool,
    dialect: sluice_wire::Dialect,
    order: &mut Order,
) -> Batch {
    let mut batch = Batch {
        items: Vec::new(),
        ndjson: String::new(),
        keep: Vec::new(),
        deadline: None,
    };
    let mut deadlines: Vec<Option<Instant>> = Vec::new();
    for (place, d) in decided {
        let (mut admitted, item) = match d {
            Decided::Refused(e) => {
                order.own(place, &error_item(&e, dialect));
                continue;
            }
            Decided::Admitted(admitted, item) => (admitted, item),
        };
        let exec = admitted.execution();
        match exec.hooks.start() {
            Ok(executing) => {
                exec.task.usage.mark_executing();
                batch.keep.push(Box::new(Slot::new(executing, exec.hold)));
            }
            Err(e) => {
                let refused = admitted
                    .finish::<()>(Err(ApiError::Engine(e)))
                    .err()
                    .unwrap_or_else(|| ApiError::Engine(EngineError::internal("item not started")));
                order.own(place, &error_item(&refused, dialect));
                continue;
            }
        }
        deadlines.push(exec.cancel_at);
        let Item {
            mut header,
            mut body,
            ..
        } = item;
        if let Some(at) = exec.cancel_at {
            let left = at
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            header.insert(CANCEL_AFTER.into(), json!(time_param(Some(left))));
        }
        if !template {
            let requested = body["timeout"]
                .as_str()
                .and_then(|t| sluice_wire::parse_time_value(t, "timeout").ok())
                .and_then(|t| t.duration_opt());
            let effective = admitted.search_timeout(requested);
            if effective != requested
                && let Value::Object(b) = &mut body
            {
                b.insert("timeout".into(), json!(time_param(effective)));
            }
        }
        batch.ndjson.push_str(&Value::Object(header).to_string());
        batch.ndjson.push('\n');
        batch.ndjson.push_str(&body.to_string());
        batch.ndjson.push('\n');
        batch.items.push((place, admitted));
    }
    batch.deadline = deadlines
        .into_iter()
        .collect::<Option<Vec<Instant>>>()
        .and_then(|d| d.into_iter().max());
    batch
}

/// The upstream's error answer to one of several batches, as the error item of each of its
/// items: its `error` and its status, as OpenSearch words an item that failed.
async fn upstream_error_item(resp: http::Response<AnswerBody>) -> Value {
    let status = resp.status().as_u16();
    match super::json_answer(resp, "_msearch").await {
        Ok(v) if v.get("error").is_some() => json!({"error": v["error"], "status": status}),
        Ok(_) | Err(_) => {
            let e = EngineError::new(
                ErrorCode::UpstreamFailed,
                format!("the upstream answered an _msearch batch with status {status}"),
            );
            json!({"error": render_error(&e), "status": status})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_split_keeps_items_and_their_indices() {
        let body = b"{\"index\":\"a\"}\n{\"query\":{\"match_all\":{}}}\n{}\n{\"size\":0}\n";
        let items = split(body, Some("d"), &Params::new()).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].index, "a");
        assert_eq!(items[1].index, "d");
        assert_eq!(items[1].body, json!({"size": 0}));
        assert!(split(b"{}\n", None, &Params::new()).is_err());
        assert!(split(b"\n", None, &Params::new()).is_err());
        // A header naming both keys is refused, not authorized on one and forwarded with both.
        let both = b"{\"index\":\"a\",\"indices\":\"b\"}\n{}\n";
        assert!(split(both, None, &Params::new()).is_err());
    }
}
