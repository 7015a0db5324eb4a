//! The tasks API across the cluster: `GET /_tasks` and `POST /_tasks/_cancel` fan out to the
//! selected members (`nodes=`); `GET /_tasks/{node}:{n}` and `POST /_tasks/{node}:{n}/_cancel`
//! are routed to the node in the id. Each node's part is `cluster/local/tasks.rs`. A member
//! that fails or does not answer within `timeout` is listed under `node_failures`, as
//! OpenSearch's list-tasks response does, never a hang.

use std::sync::Arc;
use std::time::Duration;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_cluster::rpc::LocalApi;
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode};

use super::cluster_settings::bool_param;
use crate::auth::may_touch_task;
use crate::cluster::local::{CancelTasks, OneTask, TaskFilter, task_entry_of, task_missing};
use crate::cluster::{DEFAULT_FANOUT_TIMEOUT, select};
use crate::error::ApiResult;
use crate::http::{Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::TaskId;

/// Whose tasks the caller may `action`: `None` for everyone's (no authorization, or the
/// cluster permission for it), else only the caller's own. Sent with the call, so the node
/// that runs the tasks applies it.
pub(super) fn only_user(meta: &RequestMeta, action: Action) -> Option<String> {
    if may_touch_task(meta, action, None) {
        return None;
    }
    meta.principal.as_ref().map(|p| p.username.to_string())
}

fn list_param(params: &Params, k: &str) -> Option<Vec<String>> {
    params.get(k).map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
    })
}

pub(super) fn parse_filter(params: &Params) -> ApiResult<TaskFilter> {
    if let Some(p) = params.get("parent_task_id") {
        TaskId::parse(p)
            .ok_or_else(|| EngineError::illegal_argument(format!("malformed task id {p}")))?;
    }
    Ok(TaskFilter {
        actions: list_param(params, "actions").unwrap_or_default(),
        parent_task_id: params.get("parent_task_id").cloned(),
        detailed: is_true(params, "detailed"),
        only_user: None,
    })
}

fn is_true(params: &Params, key: &str) -> bool {
    params.get(key).is_some_and(|v| v.is_empty() || v == "true")
}

/// The fan-out deadline: the request's `timeout`, else [`DEFAULT_FANOUT_TIMEOUT`].
fn fanout_timeout(params: &Params) -> ApiResult<Duration> {
    match params.get("timeout") {
        None => Ok(DEFAULT_FANOUT_TIMEOUT),
        Some(v) => Ok(sluice_wire::parse_time_value(v, "timeout")
            .map_err(sluice_wire::OpenSearchError::from)?
            .duration_opt()
            .unwrap_or(DEFAULT_FANOUT_TIMEOUT)),
    }
}

/// Calls `api` with `call` on the members `nodes=` selects; returns each answering member's
/// `tasks` object and the failures.
pub(super) async fn gather(
    st: &AppState,
    params: &Params,
    api: LocalApi,
    call: Value,
) -> ApiResult<(
    Vec<(sluice_cluster::Member, Map<String, Value>)>,
    Vec<Value>,
)> {
    let deadline = fanout_timeout(params)?;
    let nodes = params.get("nodes").map(String::as_str);
    let members = st.cluster.members();
    let targets = select::select(&members.live, &st.identity.node_id, nodes)?;
    let outcomes = st.cluster.fan_out(&targets, api, &call, deadline).await;
    let (answers, envelope) = select::envelope(outcomes);
    let failures = envelope["failures"].as_array().cloned().unwrap_or_default();
    let answers = answers
        .into_iter()
        .map(|(m, body)| {
            let tasks = body["tasks"].as_object().cloned().unwrap_or_default();
            (m, tasks)
        })
        .collect();
    Ok((answers, failures))
}

/// Registers a listing as the task it is, as OpenSearch does, so that it lists itself
/// (`GET _tasks`, `GET _cat/tasks`); it is unregistered when the guard drops.
pub(super) fn listing_task(st: &AppState, meta: &RequestMeta) -> crate::tasks::TaskGuard {
    let listing = st.tasks.register(
        crate::tasks::actions::LIST_TASKS,
        String::new(),
        None,
        meta.principal.clone(),
    );
    if let Some(id) = &meta.opaque_id {
        listing.task().set_opaque_id(id.clone());
    }
    listing
}

/// `GET /_tasks` with `actions`, `detailed`, `parent_task_id`, `nodes`, `group_by`, `timeout`.
pub async fn list(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let mut filter = parse_filter(&params)?;
    filter.only_user = only_user(&meta, Action::TasksList);
    let _listing = listing_task(&st, &meta);
    let group_by = params.get("group_by").map_or("nodes", String::as_str);
    if !matches!(group_by, "nodes" | "none" | "parents") {
        return Err(EngineError::illegal_argument(format!(
            "Unknown group_by value [{group_by}]; accepted values are nodes, parents and none"
        ))
        .into());
    }
    let (answers, failures) = gather(&st, &params, LocalApi::ListTasks, json!(filter)).await?;
    let mut body = match group_by {
        "nodes" => {
            let nodes: Map<String, Value> = answers
                .into_iter()
                .filter(|(_, tasks)| !tasks.is_empty())
                .map(|(m, tasks)| (m.node_id.clone(), task_entry_of(&m, Value::Object(tasks))))
                .collect();
            json!({ "nodes": nodes })
        }
        "none" => {
            let all: Vec<Value> = answers
                .into_iter()
                .flat_map(|(_, tasks)| tasks.into_iter().map(|(_, t)| t))
                .collect();
            json!({ "tasks": all })
        }
        _ => json!({ "tasks": by_parents(answers.into_iter().flat_map(|(_, t)| t).collect()) }),
    };
    if !failures.is_empty() {
        body["node_failures"] = Value::Array(failures);
    }
    Ok(reply(StatusCode::OK, body, &params))
}

/// `group_by=parents`: top-level tasks (no parent, or a parent not listed) keyed by id, each
/// with its listed children.
fn by_parents(all: Map<String, Value>) -> Map<String, Value> {
    let parent_of = |t: &Value| t["parent_task_id"].as_str().map(str::to_string);
    let mut top = Map::new();
    for (id, t) in all
        .iter()
        .filter(|(_, t)| parent_of(t).is_none_or(|p| !all.contains_key(&p)))
    {
        let mut v = t.clone();
        let children: Vec<Value> = all
            .values()
            .filter(|c| parent_of(c).as_deref() == Some(id.as_str()))
            .cloned()
            .collect();
        if !children.is_empty() {
            v["children"] = Value::Array(children);
        }
        top.insert(id.clone(), v);
    }
    top
}

/// The live member that runs task `raw` (`node:seq`), or the error OpenSearch gives when
/// `api`'s node is not a member (stopped, or never one): for `GET _tasks/{id}`, "belongs to the
/// node … which isn't part of the cluster" (its `TransportGetTaskAction`, once the node is gone
/// and no result is stored), which tells the caller the node left rather than that the task
/// ended; for a cancel, the task not found.
fn owner_of(st: &AppState, raw: &str, api: LocalApi) -> ApiResult<sluice_cluster::Member> {
    let id = TaskId::parse(raw)
        .ok_or_else(|| EngineError::illegal_argument(format!("malformed task id {raw}")))?;
    let missing = || match api {
        LocalApi::GetTask => EngineError::new(
            ErrorCode::ResourceNotFound,
            format!(
                "task [{raw}] belongs to the node [{}] which isn't part of the cluster and there \
                 is no record of the task",
                id.node
            ),
        ),
        _ => task_missing(raw),
    };
    st.cluster
        .members()
        .get(&id.node)
        .cloned()
        .ok_or_else(|| missing().into())
}

/// Routes a one-task call to the task's node and answers what it answered.
async fn routed(
    st: &AppState,
    raw: &str,
    deadline: Duration,
    api: LocalApi,
    call: Value,
) -> ApiResult<(sluice_cluster::Member, Value)> {
    let owner = owner_of(st, raw, api)?;
    let answer = st
        .cluster
        .call(&owner, api, call, deadline)
        .await
        .map_err(|e| {
            EngineError::new(
                sluice_engine::ErrorCode::NodeNotConnected,
                format!("the call for task [{raw}] to the node running it failed: {e}"),
            )
        })?;
    if !(200..300).contains(&answer.status) {
        return Err(crate::error::ApiError::Forwarded {
            status: answer.status,
            body: answer.body,
        });
    }
    Ok((owner, answer.body))
}

/// How long `GET _tasks/{id}?wait_for_completion=true` waits without a `timeout`:
/// OpenSearch's default for it.
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// `GET /_tasks/{task_id}`: a running task (`completed: false`), or the stored result of a
/// background task that ended (`completed: true` with its `response` or `error`);
/// `wait_for_completion=true` waits for the end, up to `timeout`.
pub async fn get_task(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(raw): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    // The wait happens on the node that runs the task, whichever node is asked.
    let wait = if bool_param(&params, "wait_for_completion")? {
        Some(match params.get("timeout") {
            None => DEFAULT_WAIT_TIMEOUT,
            Some(v) => sluice_wire::parse_time_value(v, "timeout")
                .map_err(sluice_wire::OpenSearchError::from)?
                .duration_opt()
                .unwrap_or(Duration::MAX),
        })
    } else {
        None
    };
    let call = json!(OneTask {
        id: raw.clone(),
        only_user: only_user(&meta, Action::TaskGet),
        wait_millis: wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
    });
    // A waiting call is given its wait and the usual deadline on top to answer.
    let deadline = match wait {
        Some(w) => w.saturating_add(DEFAULT_FANOUT_TIMEOUT),
        None => fanout_timeout(&params)?,
    };
    let (_, body) = routed(&st, &raw, deadline, LocalApi::GetTask, call).await?;
    Ok(reply(StatusCode::OK, body, &params))
}

/// `POST /_tasks/{task_id}/_cancel`: cancels the task and its descendants, on its node.
pub async fn cancel_one(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(raw): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let call = CancelTasks {
        id: Some(raw.clone()),
        filter: TaskFilter {
            only_user: only_user(&meta, Action::TasksCancel),
            ..TaskFilter::default()
        },
    };
    let deadline = fanout_timeout(&params)?;
    let (owner, body) = routed(&st, &raw, deadline, LocalApi::CancelTasks, json!(call)).await?;
    let entry = task_entry_of(&owner, body["tasks"].clone());
    Ok(reply(
        StatusCode::OK,
        json!({"nodes": {owner.node_id: entry}}),
        &params,
    ))
}

/// `POST /_tasks/_cancel?actions=…&nodes=…`: cancels every matching task on the selected
/// members.
pub async fn cancel_matching(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let mut filter = parse_filter(&params)?;
    filter.only_user = only_user(&meta, Action::TasksCancel);
    let call = CancelTasks { id: None, filter };
    let (answers, failures) = gather(&st, &params, LocalApi::CancelTasks, json!(call)).await?;
    let nodes: Map<String, Value> = answers
        .into_iter()
        .filter(|(_, tasks)| !tasks.is_empty())
        .map(|(m, tasks)| (m.node_id.clone(), task_entry_of(&m, Value::Object(tasks))))
        .collect();
    let mut body = json!({ "nodes": nodes });
    if !failures.is_empty() {
        body["node_failures"] = Value::Array(failures);
    }
    Ok(reply(StatusCode::OK, body, &params))
}
