//! The OpenSearch-compatible HTTP API: one module per area, each parsing the request, calling
//! the engine (on the blocking pool for anything that touches an index) and shaping the
//! response as OpenSearch does.

pub mod cluster;
pub mod cluster_settings;
pub mod docs;
pub mod indices;
pub mod list_doc;
pub mod msearch;
pub mod rules;
pub mod scroll;
pub mod search;
pub mod tasks;
pub mod wlm;
pub mod wlm_stats;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use sluice_engine::{EngineError, ErrorCode, SearchContext};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::tasks::{CancelOnDrop, NewTask};
use crate::workload::{GroupSearchSettings, Tagged};
use sluice_core::RequestAttributes;

/// Query-string parameters of a request.
pub type Params = HashMap<String, String>;

/// Serializes `body` as the response, pretty when the client asked `?pretty`.
pub fn json_response(status: StatusCode, body: &Value, pretty: bool) -> Response {
    let bytes = if pretty {
        serde_json::to_vec_pretty(body)
    } else {
        serde_json::to_vec(body)
    }
    .unwrap_or_default();
    let mut resp = (status, bytes).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}

/// A JSON response honouring `?pretty`.
pub fn reply(status: StatusCode, body: Value, params: &Params) -> Response {
    let pretty = params
        .get("pretty")
        .is_some_and(|v| v.is_empty() || v == "true");
    json_response(status, &body, pretty)
}

/// A request body, read up to `http.max_content_length`.
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(u64::MAX, |l| l.0);
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(Body(b)),
            Err(rej) if rej.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::TooLarge { limit })
            }
            Err(rej) => Err(ApiError::Engine(EngineError::parsing(format!(
                "failed to read request body: {rej}"
            )))),
        }
    }
}

/// The configured body limit, put in request extensions so errors can name it.
#[derive(Clone, Copy)]
pub struct BodyLimit(pub u64);

impl Body {
    /// The body parsed as JSON; `None` when empty.
    pub fn json(&self) -> ApiResult<Option<Value>> {
        parse_json(&self.0)
    }
}

/// Parses a JSON request body; empty or whitespace is `None`; malformed JSON is a 400
/// `x_content_parse_exception` saying where.
pub fn parse_json(bytes: &[u8]) -> ApiResult<Option<Value>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(bytes).map(Some).map_err(|e| {
        ApiError::Engine(EngineError::new(
            ErrorCode::XContentParse,
            format!(
                "[{}:{}] failed to parse request body as JSON: {e}",
                e.line(),
                e.column()
            ),
        ))
    })
}

/// Runs blocking engine work off the async threads; a panic in it becomes a 500 for this
/// request only.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ApiError::Engine),
        Err(e) => Err(ApiError::Engine(EngineError::internal(format!(
            "request handler failed: {e}"
        )))),
    }
}

/// Runs search work on the node's bounded search pool; a full pool answers 429
/// `rejected_execution_exception`.
pub async fn on_search_pool<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> ApiResult<T> {
    let rx = st
        .search_pool
        .submit(f)
        .map_err(|r| ApiError::Engine(EngineError::new(ErrorCode::RejectedExecution, r.reason)))?;
    match rx.await {
        Ok(Ok(r)) => r.map_err(ApiError::Engine),
        Ok(Err(p)) => Err(ApiError::Engine(EngineError::internal(format!(
            "search failed: {}",
            p.0
        )))),
        Err(_) => Err(ApiError::Engine(EngineError::internal(
            "search pool stopped",
        ))),
    }
}

/// What a search-like task is: its action, its description for `_tasks`, its parent, and the
/// index expressions the tagging rules match.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// The action name ([`crate::tasks::actions`]).
    pub action: &'static str,
    /// What the task does, for `_tasks?detailed`.
    pub description: String,
    /// The parent task on this node.
    pub parent: Option<u64>,
    /// The request's index expressions (comma lists split), for the tagging rules.
    pub indices: Vec<String>,
    /// Keep the throttle permit until the response has been built (a top-level request), or
    /// release it when the task ends (an `_msearch` item, a nested search).
    pub hold_for_response: bool,
    /// Set for a nested search: the parent's group and the buckets the ancestors hold, instead
    /// of tagging the request anew.
    pub inherited: Option<Inherited>,
}

/// What a nested search takes over from the task it runs for.
#[derive(Debug, Clone)]
pub struct Inherited {
    /// The parent's group.
    pub group: Arc<crate::workload::GroupEntry>,
    /// The buckets the parent and its ancestors hold permits of.
    pub held: Vec<sluice_core::BucketKey>,
}

impl TaskSpec {
    /// A top-level task over the index expression `index` (a comma-separated list).
    pub fn new(action: &'static str, description: String, index: &str) -> TaskSpec {
        TaskSpec {
            action,
            description,
            parent: None,
            indices: split_indices(index),
            hold_for_response: true,
            inherited: None,
        }
    }
}

/// Splits a comma-separated index expression into its parts.
pub fn split_indices(index: &str) -> Vec<String> {
    index
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Runs one search-like unit of work as a registered task on the search pool.
///
/// The request is first tagged with its workload group ([`crate::workload`]); the group's
/// search settings are handed to `work` (which applies them to its request) and its
/// `cancel_after_time_interval` bounds the task. The task is listed in `_tasks` from now until
/// the work ends, whatever ends it, and counted in its group's `total_completions` (and
/// `failures` when it fails). Its flag is set by `_tasks/_cancel`, by a parent's cancellation,
/// and when this future is dropped before it completes (hyper drops it when the client
/// disconnects), and the engine checks it while it works. A cancelled task answers OpenSearch's
/// `task_cancelled_exception`.
///
/// # Cancel safety
/// Dropping the future cancels the task; the pool thread stops at its next check.
pub async fn run_task<T: Send + 'static>(
    st: &Arc<AppState>,
    spec: TaskSpec,
    params: &Params,
    work: impl FnOnce(SearchContext, &GroupSearchSettings) -> Result<T, EngineError> + Send + 'static,
) -> ApiResult<T> {
    let requested_cancel_after = match params.get("cancel_after_time_interval") {
        None => None,
        Some(v) if v == "-1" => Some(None),
        Some(v) => Some(Some(sluice_engine::parse_time_value(v).map_err(|e| {
            EngineError::illegal_argument(format!(
                "failed to parse setting [cancel_after_time_interval] with value [{v}] as a time value: {e}"
            ))
        })?)),
    };
    let top_level = spec.inherited.is_none();
    let (entry, mut held) = match spec.inherited {
        Some(i) => (i.group, i.held),
        None => (tag_request(st, &spec.indices)?.entry, Vec::new()),
    };
    let principal = crate::auth::current_principal();
    // Admission, before any work starts: the group's resource share, then the node-tier
    // throttle.
    let reservation = crate::enforcement::admit_resources(st, &entry)?;
    let permit = crate::admission::throttle(st, &entry, principal.as_deref(), &held)?;
    // Nested searches (a terms lookup's sub-search) become child tasks through this hook.
    let nested_group = entry.clone();
    let own_bucket = permit.as_ref().map(|p| p.key().clone());
    if let Some(k) = &own_bucket {
        held.push(k.clone());
    }
    // The permit must cover all of the work *and* the response: the pool job holds one
    // reference until the work ends (a client that disconnects drops this future at once, but
    // the search runs on until its next checkpoint), and a top-level request's scope holds
    // another until the response is built (D9). The slot frees when the last one goes.
    let permit = permit.map(Arc::new);
    if spec.hold_for_response
        && let Some(p) = &permit
    {
        crate::workload::hold_until_response(p.clone());
    }
    let job_permit = permit;
    let settings = GroupSearchSettings::of(&entry);
    let cancel_after = settings.cancel_after(
        requested_cancel_after,
        st.cluster_settings.cancel_after_time_interval(),
    );
    let guard = st.tasks.register_task(NewTask {
        action: spec.action,
        description: spec.description,
        parent: spec.parent,
        start_time_millis: sluice_engine::now_millis(),
        group: Some(entry.clone()),
        held_buckets: held,
        principal,
    });
    let task = guard.task().clone();
    if let Some(r) = reservation {
        // Set once, on a task registered just above.
        let _ = task.reservation.set(r);
    }
    let task_entry = entry.clone();
    let task_usage = task.clone();
    let ctx = SearchContext {
        cancelled: Some(task.cancelled.clone()),
        deadline: None,
        cancel_at: cancel_after.map(|d| task.started + d),
        nested: Some(Arc::new(NestedSearches {
            st: st.clone(),
            parent: task.clone(),
            group: nested_group,
        })),
        ..Default::default()
    };
    let on_drop = CancelOnDrop::new(st.tasks.clone(), task.seq);
    // Counts the task's end on every path, a dropped future (client disconnect) included.
    let mut completion = Completion {
        entry: &entry,
        ok: false,
        counted: true,
    };
    let workload = st.workload.clone();
    let (job_st, rejected_at_start) = (st.clone(), Arc::new(AtomicBool::new(false)));
    let rejected = rejected_at_start.clone();
    let result = on_search_pool(st, move || {
        let _registered = guard;
        let _permit = job_permit;
        // Checked again when a search thread takes the task: usage is refreshed while requests
        // wait for a thread, and a group that went over its share meanwhile does not start
        // more work (as Trino's resource groups check their limits when a query leaves the
        // queue). Nested searches run on their parent's thread and are not checked again.
        if top_level
            && let Err(e) = crate::enforcement::recheck_resources(
                &job_st,
                &task_entry,
                task_usage.reservation.get(),
            )
        {
            rejected.store(true, Ordering::Relaxed);
            return Err(match e {
                ApiError::Rejected { error, .. } => error,
                other => EngineError::internal(format!("admission failed: {other:?}")),
            });
        }
        let _executing = Executing::start(&task_entry);
        let _probe = workload
            .probe
            .get()
            .zip(own_bucket.as_ref())
            .map(|(p, k)| p.enter(k));
        task_usage.usage.mark_executing();
        let usage = Arc::new(crate::accounting::ThreadUsage::start());
        let mut ctx = ctx;
        let (sampler, sampled) = (usage.clone(), task_usage.clone());
        ctx.on_checkpoint = Some(Arc::new(move || sampler.record_into(&sampled.usage)));
        let out = work(ctx, &settings);
        usage.record_into(&task_usage.usage);
        if top_level && let Some(since) = task_usage.usage.executing_since() {
            crate::enforcement::observe_finished(
                &job_st,
                &task_entry,
                since,
                task_usage.usage.cpu_nanos(),
                task_usage.usage.memory_bytes(),
            );
        }
        out
    })
    .await;
    on_drop.disarm();
    if rejected_at_start.load(Ordering::Relaxed) {
        // Counted as a rejection (by the check), not as a completion: like a request turned
        // away at the door.
        completion.counted = false;
        return Err(match result {
            Err(ApiError::Engine(error)) => ApiError::Rejected {
                error,
                retry_after_secs: crate::admission::RETRY_AFTER_SECS,
            },
            Err(other) => other,
            Ok(_) => ApiError::Engine(EngineError::internal("rejected task returned a result")),
        });
    }
    completion.ok = result.is_ok();
    drop(completion);
    result.map_err(|e| match e {
        ApiError::Engine(e) if e.code == ErrorCode::TaskCancelled => {
            let reason = task
                .cancel_reason
                .lock()
                .clone()
                .unwrap_or_else(|| match cancel_after {
                    Some(d) => format!(
                        "Cancellation timeout of {} is expired",
                        format_time_value(d)
                    ),
                    None => "task cancelled".to_string(),
                });
            ApiError::Engine(cancelled_error(&reason))
        }
        other => other,
    })
}

/// Makes each nested search the engine issues for a task (the sub-search of a `terms` lookup
/// with a `query`) a child task: registered under the task, in its group, run by its
/// principal, and admitted by the throttle without being charged again for a bucket an
/// ancestor holds (DESIGN D8). Runs on the search thread of the parent; never blocks.
struct NestedSearches {
    st: Arc<AppState>,
    /// The task the nested searches run for.
    parent: Arc<crate::tasks::Task>,
    group: Arc<crate::workload::GroupEntry>,
}

impl sluice_engine::NestedSearchHook for NestedSearches {
    fn enter(
        &self,
        _index: &str,
        description: &str,
    ) -> Result<sluice_engine::NestedScope, EngineError> {
        let held = self.parent.held_buckets.clone();
        let principal = self.parent.principal.clone();
        let permit = crate::admission::throttle(&self.st, &self.group, principal.as_deref(), &held)
            .map_err(|e| match e {
                ApiError::Engine(e) | ApiError::Rejected { error: e, .. } => e,
                other => EngineError::internal(format!("admission failed: {other:?}")),
            })?;
        let mut held = held;
        if let Some(p) = &permit {
            held.push(p.key().clone());
        }
        let guard = self.st.tasks.register_task(NewTask {
            action: crate::tasks::actions::SEARCH,
            description: description.to_string(),
            parent: Some(self.parent.seq),
            start_time_millis: sluice_engine::now_millis(),
            group: Some(self.group.clone()),
            held_buckets: held,
            principal,
        });
        let child = guard.task().clone();
        let ctx = SearchContext {
            cancelled: Some(child.cancelled.clone()),
            nested: Some(Arc::new(NestedSearches {
                st: self.st.clone(),
                parent: child,
                group: self.group.clone(),
            })),
            ..Default::default()
        };
        Ok(sluice_engine::NestedScope {
            ctx,
            guard: Box::new((guard, permit)),
        })
    }
}

/// Counts a task's end in its group's stats when dropped: `total_completions` always,
/// `failures` unless it ended well; nothing when `counted` was cleared (a task rejected before
/// it started, counted as a rejection instead).
struct Completion<'a> {
    entry: &'a crate::workload::GroupEntry,
    ok: bool,
    counted: bool,
}

impl Drop for Completion<'_> {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        self.entry.stats.total_completions.inc();
        if !self.ok {
            self.entry.stats.failures.inc();
        }
    }
}

/// Marks a group's task as executing on a search thread while alive (the `executing` gauge
/// and its peak in the group's stats: what actually ran at once, as the engine saw it).
struct Executing<'a>(&'a crate::workload::GroupEntry);

impl<'a> Executing<'a> {
    fn start(entry: &'a crate::workload::GroupEntry) -> Executing<'a> {
        entry.stats.executing_started();
        Executing(entry)
    }
}

impl Drop for Executing<'_> {
    fn drop(&mut self) {
        self.0.stats.executing_ended();
    }
}

/// Tags a request with its workload group: the `workloadGroupId` header, else the tagging
/// rules over its indices and principal, else DEFAULT (see [`crate::workload`]).
fn tag_request(st: &AppState, indices: &[String]) -> ApiResult<Tagged> {
    let header = crate::workload::group_header()?;
    let principal = crate::auth::current_principal();
    let attrs = RequestAttributes {
        indices,
        username: principal.as_ref().map(|p| &*p.username),
        roles: principal.as_ref().map_or(&[], |p| p.roles.as_slice()),
    };
    Ok(st
        .workload
        .tag(header.as_deref(), &attrs, st.cluster_settings.wlm_mode()))
}

/// OpenSearch's error for a cancelled search: a search phase failure caused by
/// `task_cancelled_exception`.
fn cancelled_error(reason: &str) -> EngineError {
    let mut outer = EngineError::new(ErrorCode::SearchPhaseExecution, "SearchTask was cancelled")
        .with_extra("phase", Value::from("query"))
        .with_extra("grouped", Value::from(true));
    outer.cause = Some(Box::new(EngineError::new(
        ErrorCode::TaskCancelled,
        format!("cancelled task with reason: {reason}"),
    )));
    outer
}

/// Renders a duration the way OpenSearch prints time values (`1.5m`, `500ms`, `2s`).
pub use sluice_wire::format_time_value;

/// Renders rows as a `_cat`-style text table: columns left-aligned to their widest cell,
/// separated by one space, trailing spaces trimmed, one line per row.
pub fn render_table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{v:<w$}", w = widths[i]))
            .collect();
        text.push_str(line.join(" ").trim_end());
        text.push('\n');
    }
    text
}

/// Builds the router of every API route.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        // HEAD of a GET route answers the GET's status and headers without its body, as OpenSearch
        // does (`content-type` and `content-length` included).
        .route("/", get(cluster::root))
        .route("/_cluster/health", get(cluster::health))
        .route("/_cluster/health/{index}", get(cluster::health))
        .route("/_cat/indices", get(indices::cat_indices))
        .route("/_cat/indices/{index}", get(indices::cat_indices))
        .route("/_cat/count", get(indices::cat_count))
        .route("/_cat/count/{index}", get(indices::cat_count))
        .route("/_settings", get(indices::get_settings_all))
        .route("/_settings/{name}", get(indices::get_settings_all_named))
        .route("/_bulk", post(docs::bulk).put(docs::bulk))
        .route(
            "/_refresh",
            post(indices::refresh_all).get(indices::refresh_all),
        )
        .route("/_search", get(search::search_all).post(search::search_all))
        .route("/_count", get(search::count_all).post(search::count_all))
        .route("/_mapping", get(indices::get_mapping_all))
        .route(
            "/{index}",
            get(indices::get_index)
                .put(indices::create_index)
                .delete(indices::delete_index)
                .head(indices::head_index),
        )
        .route(
            "/{index}/_mapping",
            get(indices::get_mapping)
                .put(indices::put_mapping)
                .post(indices::put_mapping),
        )
        .route(
            "/{index}/_settings",
            get(indices::get_settings).put(indices::put_settings),
        )
        .route(
            "/{index}/_settings/{name}",
            get(indices::get_settings_named),
        )
        .route("/_flush", post(indices::flush).get(indices::flush))
        .route("/{index}/_flush", post(indices::flush).get(indices::flush))
        .route("/{index}/_block/{block}", put(indices::add_block))
        .route(
            "/{index}/_refresh",
            post(indices::refresh).get(indices::refresh),
        )
        .route(
            "/{index}/_bulk",
            post(docs::bulk_index).put(docs::bulk_index),
        )
        .route("/{index}/_doc", post(docs::index_auto_id))
        .route(
            "/{index}/_doc/{id}",
            get(docs::get_doc)
                .put(docs::index_with_id)
                .post(docs::index_with_id)
                .delete(docs::delete_doc),
        )
        .route("/{index}/_source/{id}", get(docs::get_source))
        .route("/_mget", get(docs::mget).post(docs::mget))
        .route("/{index}/_mget", get(docs::mget).post(docs::mget))
        .route(
            "/{index}/_create/{id}",
            put(docs::create_with_id).post(docs::create_with_id),
        )
        .route("/{index}/_update/{id}", post(docs::update_doc))
        .route("/{index}/_search", get(search::search).post(search::search))
        .route("/{index}/_count", get(search::count).post(search::count))
        .route("/_msearch", get(msearch::msearch).post(msearch::msearch))
        .route(
            "/{index}/_msearch",
            get(msearch::msearch_index).post(msearch::msearch_index),
        )
        .route("/_tasks", get(tasks::list))
        .route("/_tasks/_cancel", post(tasks::cancel_matching))
        .route("/_tasks/{task_id}", get(tasks::get_task))
        .route("/_tasks/{task_id}/_cancel", post(tasks::cancel_one))
        .route(
            "/_search/scroll",
            get(scroll::next_page)
                .post(scroll::next_page)
                .delete(scroll::clear),
        )
        .route(
            "/_search/scroll/{scroll_id}",
            get(scroll::next_page_of)
                .post(scroll::next_page_of)
                .delete(scroll::clear_ids),
        )
        .merge(cluster_settings::routes())
        .merge(wlm::routes())
        .merge(wlm_stats::routes())
        .merge(rules::routes())
        .fallback(no_handler)
        .with_state(state)
}

use axum::routing::put;

async fn no_handler(method: Method, uri: Uri) -> ApiError {
    ApiError::NoHandler {
        status: StatusCode::BAD_REQUEST,
        message: format!("no handler found for uri [{uri}] and method [{method}]"),
        allow: None,
    }
}

/// Completes a 405 the way OpenSearch words it, naming the allowed methods from the `Allow`
/// header the router sets (HEAD, which axum adds beside GET, is not listed).
pub async fn name_allowed_methods(req: Request, next: axum::middleware::Next) -> Response {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let resp = next.run(req).await;
    if resp.status() != StatusCode::METHOD_NOT_ALLOWED {
        return resp;
    }
    let allowed: Vec<String> = resp
        .headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty() && m != "HEAD")
                .collect()
        })
        .unwrap_or_default();
    ApiError::NoHandler {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!(
            "Incorrect HTTP method for uri [{uri}] and method [{method}], allowed: [{}]",
            allowed.join(", ")
        ),
        allow: Some(allowed.join(",")),
    }
    .into_response()
}
