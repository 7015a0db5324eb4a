//! `GET _tasks/{id}` and `POST _tasks/{id}/_cancel` on a gateway. A task of a sluice node is
//! the gateway's own ([`crate::api::tasks`]); a task id of any other node is the upstream's —
//! forwarded APIs answer them (`_forcemerge` or `_snapshot` with
//! `wait_for_completion=false`, and any task id a client read off the upstream) — and is
//! forwarded, so that a client can follow or cancel it through the gateway as it could
//! directly. Before, those ids answered 404 "isn't running and hasn't stored its results".
//!
//! With authorization on, the gateway cannot tell whose an upstream task is (it did not
//! start it under a task of its own), so following or cancelling one takes the cluster
//! permission for it (`cluster:monitor/task/get`, `cluster:admin/tasks/cancel`), as another
//! user's task does on a sluice node. The gateway's own tasks go on being shown to and
//! cancelled by their owners.

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use sluice_core::authz::Action;

use crate::auth::authz::{forbidden, may_touch_task};
use crate::error::ApiError;
use crate::http::RequestMeta;
use crate::state::AppState;
use crate::tasks::TaskId;

/// `GET /_tasks/{task_id}` on a gateway.
pub async fn get_task(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(raw): Path<String>,
    req: Request,
) -> Response {
    by_id(st, meta, raw, req, false).await
}

/// `POST /_tasks/{task_id}/_cancel` on a gateway.
pub async fn cancel_one(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(raw): Path<String>,
    req: Request,
) -> Response {
    by_id(st, meta, raw, req, true).await
}

/// Whether the task id `raw` (as the path gives it, percent-decoded) names a node that is not
/// one of sluice's. A malformed id is the gateway's to refuse, as a sluice node refuses it.
fn is_upstreams(st: &AppState, raw: &str) -> bool {
    TaskId::parse(raw).is_some_and(|id| st.cluster.members().get(&id.node).is_none())
}

/// Task `raw` got (or, `cancel`, cancelled): the upstream's forwarded when the user may touch
/// any task (see the module docs), the gateway's own answered as a sluice node answers it.
async fn by_id(
    st: Arc<AppState>,
    meta: RequestMeta,
    raw: String,
    req: Request,
    cancel: bool,
) -> Response {
    if is_upstreams(&st, &raw) {
        let action = if cancel {
            Action::TasksCancel
        } else {
            Action::TaskGet
        };
        if !may_touch_task(&meta, action, None)
            && let Some(who) = &meta.principal
        {
            return ApiError::Engine(forbidden(action.name(), who)).into_response();
        }
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    let params = match super::routes::params_of_uri(req.uri()) {
        Ok(p) => Query(p),
        Err(e) => return e.into_response(),
    };
    let answer = if cancel {
        crate::api::tasks::cancel_one(State(st), meta, Path(raw), params).await
    } else {
        crate::api::tasks::get_task(State(st), meta, Path(raw), params).await
    };
    answer.unwrap_or_else(IntoResponse::into_response)
}
