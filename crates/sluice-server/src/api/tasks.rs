//! The tasks API: `GET /_tasks`, `GET /_tasks/{id}`, `POST /_tasks/{id}/_cancel`,
//! `POST /_tasks/_cancel`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode};

use crate::auth::may_touch_task;
use crate::error::ApiResult;
use crate::http::{Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::{Task, TaskId};

/// The reason a task cancelled through the API carries, as OpenSearch words it.
const BY_USER_REQUEST: &str = "by user request";

/// Filters of `_tasks` and `_tasks/_cancel`.
struct Filter {
    actions: Vec<String>,
    parent: Option<TaskId>,
    nodes: Option<Vec<String>>,
}

fn parse_filter(params: &Params) -> ApiResult<Filter> {
    let list = |k: &str| {
        params.get(k).map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        })
    };
    let parent = match params.get("parent_task_id") {
        None => None,
        Some(p) => Some(TaskId::parse(p).ok_or_else(|| malformed_id(p))?),
    };
    Ok(Filter {
        actions: list("actions").unwrap_or_default(),
        parent,
        nodes: list("nodes"),
    })
}

fn malformed_id(id: &str) -> EngineError {
    EngineError::illegal_argument(format!("malformed task id {id}"))
}

impl Filter {
    fn matches(&self, st: &AppState, t: &Task) -> bool {
        let action_ok = self.actions.is_empty()
            || self
                .actions
                .iter()
                .any(|p| sluice_engine::mapping::wildcard_match(p, t.action));
        let parent_ok = match &self.parent {
            None => true,
            Some(p) => p.node == st.tasks.node_id() && t.parent == Some(p.seq),
        };
        action_ok && parent_ok && self.node_ok(st)
    }

    fn node_ok(&self, st: &AppState) -> bool {
        self.nodes.as_ref().is_none_or(|nodes| {
            nodes.iter().any(|n| {
                n == "_local"
                    || n == "_all"
                    || n == "*"
                    || n == st.tasks.node_id()
                    || *n == st.config.node_name
            })
        })
    }
}

fn node_entry(st: &AppState, tasks: Map<String, Value>) -> Value {
    json!({
        "name": st.config.node_name,
        "transport_address": format!("{}:{}", st.config.http_host, st.config.http_port),
        "host": st.config.http_host.to_string(),
        "ip": format!("{}:{}", st.config.http_host, st.config.http_port),
        "roles": ["data", "ingest", "cluster_manager"],
        "tasks": tasks,
    })
}

fn is_true(params: &Params, key: &str) -> bool {
    params.get(key).is_some_and(|v| v.is_empty() || v == "true")
}

/// `GET /_tasks` with `actions`, `detailed`, `parent_task_id`, `nodes`, `group_by`.
pub async fn list(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let filter = parse_filter(&params)?;
    let detailed = is_true(&params, "detailed");
    let tasks: Vec<Arc<Task>> = st
        .tasks
        .list()
        .into_iter()
        .filter(|t| filter.matches(&st, t))
        .filter(|t| may_touch_task(&meta, Action::TasksList, t.principal.as_deref()))
        .collect();
    let group_by = params.get("group_by").map_or("nodes", String::as_str);
    let render = |t: &Task| st.tasks.render(t, detailed);
    let id_of = |t: &Task| format!("{}:{}", st.tasks.node_id(), t.seq);
    let body = match group_by {
        "nodes" => {
            let mut nodes = Map::new();
            if !tasks.is_empty() {
                let m: Map<String, Value> = tasks.iter().map(|t| (id_of(t), render(t))).collect();
                nodes.insert(st.tasks.node_id().to_string(), node_entry(&st, m));
            }
            json!({ "nodes": nodes })
        }
        "none" => json!({ "tasks": tasks.iter().map(|t| render(t)).collect::<Vec<_>>() }),
        "parents" => {
            let mut top = Map::new();
            for t in tasks
                .iter()
                .filter(|t| t.parent.is_none_or(|p| !tasks.iter().any(|x| x.seq == p)))
            {
                let mut v = render(t);
                let children: Vec<Value> = tasks
                    .iter()
                    .filter(|c| c.parent == Some(t.seq))
                    .map(|c| render(c))
                    .collect();
                if !children.is_empty() {
                    v["children"] = Value::Array(children);
                }
                top.insert(id_of(t), v);
            }
            json!({ "tasks": top })
        }
        other => {
            return Err(EngineError::illegal_argument(format!(
                "Unknown group_by value [{other}]; accepted values are nodes, parents and none"
            ))
            .into());
        }
    };
    Ok(reply(StatusCode::OK, body, &params))
}

fn local_seq(st: &AppState, raw: &str) -> ApiResult<u64> {
    let id = TaskId::parse(raw).ok_or_else(|| malformed_id(raw))?;
    if id.node != st.tasks.node_id() {
        return Err(task_missing(raw).into());
    }
    Ok(id.seq)
}

fn task_missing(raw: &str) -> EngineError {
    EngineError::new(
        ErrorCode::ResourceNotFound,
        format!("task [{raw}] isn't running and hasn't stored its results"),
    )
}

/// `GET /_tasks/{task_id}`.
pub async fn get_task(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(raw): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let seq = local_seq(&st, &raw)?;
    // Another user's task is answered as missing: its existence is not the caller's to learn.
    let t = st
        .tasks
        .get(seq)
        .filter(|t| may_touch_task(&meta, Action::TaskGet, t.principal.as_deref()))
        .ok_or_else(|| task_missing(&raw))?;
    Ok(reply(
        StatusCode::OK,
        json!({"completed": false, "task": st.tasks.render(&t, true)}),
        &params,
    ))
}

/// `POST /_tasks/{task_id}/_cancel`: cancels the task and its descendants.
pub async fn cancel_one(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(raw): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let seq = local_seq(&st, &raw)?;
    let mine = |t: &Arc<Task>| may_touch_task(&meta, Action::TasksCancel, t.principal.as_deref());
    if st.tasks.get(seq).filter(mine).is_none() {
        return Err(task_missing(&raw).into());
    }
    let cancelled = st.tasks.cancel_seq(seq, BY_USER_REQUEST);
    let m: Map<String, Value> = cancelled
        .iter()
        .filter(|t| t.seq == seq)
        .map(|t| {
            (
                format!("{}:{}", st.tasks.node_id(), t.seq),
                st.tasks.render(t, false),
            )
        })
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({"nodes": {st.tasks.node_id(): node_entry(&st, m)}}),
        &params,
    ))
}

/// `POST /_tasks/_cancel?actions=…`: cancels every matching task.
pub async fn cancel_matching(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let filter = parse_filter(&params)?;
    let mut m = Map::new();
    for t in st
        .tasks
        .list()
        .into_iter()
        .filter(|t| filter.matches(&st, t))
        .filter(|t| may_touch_task(&meta, Action::TasksCancel, t.principal.as_deref()))
    {
        st.tasks.cancel_seq(t.seq, BY_USER_REQUEST);
        m.insert(
            format!("{}:{}", st.tasks.node_id(), t.seq),
            st.tasks.render(&t, false),
        );
    }
    let nodes = if m.is_empty() {
        json!({})
    } else {
        json!({st.tasks.node_id(): node_entry(&st, m)})
    };
    Ok(reply(StatusCode::OK, json!({"nodes": nodes}), &params))
}
