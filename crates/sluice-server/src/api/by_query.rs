//! `POST /{index}/_delete_by_query` and `POST /{index}/_update_by_query` (no scripts): parsed
//! here, admitted like a search (a task in the caller's workload group, throttled and
//! cancellable), run by the backend (`sluice_engine::by_query`). With
//! `wait_for_completion=false` the answer is `{"task": "<node>:<id>"}` at once; admission and
//! the work go on in the background, the task shows its counts as its `status`, and its
//! response (or error) is stored for `GET _tasks/{id}` ([`crate::tasks`]).

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use sluice_engine::by_query::{ByQueryProgress, ByQueryRequest, DEFAULT_BATCH_SIZE};
use sluice_engine::resolve::IndicesOptions;
use sluice_engine::{EngineError, ErrorCode};

use super::cluster_settings::bool_param;
use crate::admission::{self, Admitted, TaskSpec};
use crate::error::ApiResult;
use crate::http::{Body, Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::{TaskGuard, TaskStatus, actions};

/// `POST /{index}/_delete_by_query`.
pub async fn delete_by_query(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run(st, meta, index, params, body, false).await
}

/// `POST /{index}/_update_by_query`: each matching document written again as it is (its
/// version goes up); scripts are not supported.
pub async fn update_by_query(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run(st, meta, index, params, body, true).await
}

fn long_param(params: &Params, key: &str) -> Result<Option<u64>, EngineError> {
    params
        .get(key)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                EngineError::illegal_argument(format!(
                    "Failed to parse long parameter [{key}] with value [{v}]"
                ))
            })
        })
        .transpose()
}

fn conflicts(v: &str) -> Result<bool, EngineError> {
    match v {
        "proceed" => Ok(true),
        "abort" => Ok(false),
        other => Err(EngineError::illegal_argument(format!(
            "conflicts may only be \"proceed\" or \"abort\" but was [{other}]"
        ))),
    }
}

/// Reads the parameters and body of a by-query request, with OpenSearch's checks.
fn parse(
    params: &Params,
    body: Option<Value>,
    update: bool,
) -> Result<ByQueryRequest, EngineError> {
    let mut req = ByQueryRequest {
        query: serde_json::json!({"match_all": {}}),
        max_docs: long_param(params, "max_docs")?,
        proceed_on_conflict: params
            .get("conflicts")
            .map(|c| conflicts(c))
            .transpose()?
            .unwrap_or(false),
        batch_size: long_param(params, "scroll_size")?.unwrap_or(DEFAULT_BATCH_SIZE),
        update,
        indices_options: IndicesOptions::from_params(params, IndicesOptions::default())?,
        progress: Arc::default(),
    };
    if let Some(rps) = params.get("requests_per_second")
        && rps != "-1"
    {
        return Err(EngineError::illegal_argument(format!(
            "[requests_per_second={rps}] is not supported by sluice: by-query actions run unthrottled (-1); workload groups bound them instead"
        )));
    }
    if let Some(slices) = params.get("slices")
        && slices != "1"
        && slices != "auto"
    {
        return Err(EngineError::illegal_argument(format!(
            "[slices={slices}] is not supported by sluice: an index is one shard, so it runs as one slice (1 or auto)"
        )));
    }
    let Some(body) = body else {
        return Ok(req);
    };
    let Value::Object(obj) = body else {
        return Err(EngineError::parsing("request body must be a JSON object"));
    };
    for (k, v) in obj {
        match k.as_str() {
            "query" => req.query = v,
            "max_docs" => {
                req.max_docs = Some(v.as_u64().ok_or_else(|| {
                    EngineError::illegal_argument(format!("[max_docs] should be >= 0, got [{v}]"))
                })?)
            }
            "conflicts" => req.proceed_on_conflict = conflicts(v.as_str().unwrap_or_default())?,
            "script" if update => {
                return Err(EngineError::illegal_argument(
                    "scripts are not supported by sluice: _update_by_query writes the matching documents again as they are",
                ));
            }
            other => {
                return Err(EngineError::new(
                    ErrorCode::Parsing,
                    format!(
                        "Unknown key for a {} in [{other}].",
                        sluice_wire::json::token_name(&v)
                    ),
                ));
            }
        }
    }
    Ok(req)
}

/// A by-query action's counts as its task's `status`.
#[derive(Debug)]
struct ProgressStatus {
    progress: Arc<ByQueryProgress>,
    update: bool,
}

impl TaskStatus for ProgressStatus {
    fn status(&self) -> Value {
        self.progress.status(self.update)
    }
}

/// What one by-query action answers: its status code and body, and the admission ticket that
/// rides with the answer.
type Answer = (StatusCode, Value, Admitted);

async fn run(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    params: Params,
    body: Body,
    update: bool,
) -> ApiResult<Response> {
    let req = parse(&params, body.json()?, update)?;
    let refresh = bool_param(&params, "refresh")?;
    // OpenSearch's default: the request answers when the work is done.
    let wait =
        !params.contains_key("wait_for_completion") || bool_param(&params, "wait_for_completion")?;
    let (action, verb) = if update {
        (actions::UPDATE_BY_QUERY, "update-by-query")
    } else {
        (actions::DELETE_BY_QUERY, "delete-by-query")
    };
    let spec = TaskSpec::new(action, format!("{verb} [{index}]"), &index, &params)?;
    let guard = admission::register(&st, &meta, &spec);
    guard.task().set_status(Arc::new(ProgressStatus {
        progress: req.progress.clone(),
        update,
    }));
    if wait {
        let (status, resp, admitted) =
            execute(&st, &meta, spec, guard, index, req, refresh).await?;
        return Ok(admitted.ride_with(reply(status, resp, &params)));
    }
    // In the background, as OpenSearch's `wait_for_completion=false`: the answer names the
    // task; admission (it may wait in the group's queue, or refuse) and the work follow, and
    // the outcome is stored for `GET _tasks/{id}`. A query that cannot be read is refused
    // first, as OpenSearch parses the body when the request arrives.
    st.engine.check_by_query(&index, &req)?;
    let id = guard.id().to_string();
    let task = guard.task().clone();
    st.tasks.expect_result(&task);
    let bg = st.clone();
    tokio::spawn(async move {
        let st = bg;
        let answer = execute(&st, &meta, spec, guard, index, req, refresh).await;
        // The ticket is released after the result is stored.
        match answer {
            Ok((_, resp, admitted)) => {
                st.tasks.store_outcome(&task, Ok(resp));
                drop(admitted);
            }
            Err(e) => st.tasks.store_outcome(&task, Err(&e)),
        }
    });
    Ok(reply(StatusCode::OK, json!({"task": id}), &params))
}

/// Admits the registered task `guard` (a task in the caller's workload group, throttled like
/// a search), runs the action and renders its answer.
///
/// # Cancel safety
/// Dropping the future cancels the task (the ticket's `Drop`) and gives back its slot.
async fn execute(
    st: &Arc<AppState>,
    meta: &RequestMeta,
    spec: TaskSpec,
    guard: TaskGuard,
    index: String,
    req: ByQueryRequest,
    refresh: bool,
) -> ApiResult<Answer> {
    let update = req.update;
    let options = req.indices_options;
    let task = guard.task().clone();
    let mut admitted = admission::admit_registered(st, meta, spec, guard).await?;
    let executed = st
        .backend
        .by_query(admitted.execution(), index.clone(), req)
        .await;
    let outcome = admitted.finish(executed)?;
    if refresh {
        let engine = st.engine.clone();
        // The indices the action resolved, with its options (a hidden one it reached through
        // `expand_wildcards` included).
        crate::backend::embedded::blocking(move || {
            engine.refresh_with(&index, &options).map(|_| ())
        })
        .await?;
    }
    let reason = outcome
        .cancelled
        .then(|| task.cancel_reason.lock().clone())
        .flatten();
    let resp = outcome.to_json(update, reason.as_deref());
    // A failure that stopped the work gives the answer its status, as OpenSearch's does.
    let status = outcome
        .failures
        .first()
        .and_then(|f| f["status"].as_u64())
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::OK);
    Ok((status, resp, admitted))
}
