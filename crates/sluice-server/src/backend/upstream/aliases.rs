//! `POST /_aliases` and the aliases of a create-index body (`PUT /{index}`) through the gateway.
//!
//! `POST /_aliases` is authorized action by action as on an embedded node
//! ([`crate::api::aliases::authorize_actions`]): adding or removing an alias needs
//! `indices:admin/aliases` on the indices it names, `remove_index` needs `indices:admin/delete`.
//! The request is atomic upstream, so one refused action refuses all of it here (403) and
//! nothing is forwarded.
//!
//! A user allowed both actions everywhere (`*`), or any request when nothing is authorized, is
//! forwarded untouched. Otherwise the body is read (bounded by `http.max_content_length`) and
//! parsed as the embedded engine parses it, strictly (a duplicate key is refused as OpenSearch
//! refuses it, so no upstream can read another value than the one checked); one that cannot be
//! read is refused (400) rather than forwarded, since its indices could not be checked. An
//! allowed request is forwarded with its body as received, and the upstream's answer passes
//! through unchanged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use sluice_core::authz::Action;
use sluice_engine::EngineError;

use super::doc_items::needs_items;
use super::routes::{Read, call_as, read};
use super::stream_back;
use crate::error::ApiResult;
use crate::http::RequestMeta;
use crate::state::AppState;

/// The actions a `POST /_aliases` may need.
const ALIAS_ACTIONS: [Action; 2] = [Action::Aliases, Action::IndexDelete];

/// `/_aliases`, any method (`GET` reads aliases and is authorized as a whole before this).
pub async fn aliases(State(st): State<Arc<AppState>>, meta: RequestMeta, req: Request) -> Response {
    if *req.method() != Method::POST || !needs_items(&meta, &ALIAS_ACTIONS) {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    run(st, meta, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `/{index}`, any method: a create (`PUT`) whose body may name aliases has them authorized
/// as names before it is forwarded ([`crate::api::aliases::authorize_create_aliases`]);
/// every other request — another method, an API's name (`/_refresh`), a user allowed
/// aliases everywhere — is forwarded untouched.
pub async fn index_root(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    req: Request,
) -> Response {
    let is_create = *req.method() == Method::PUT && !req.uri().path()[1..].starts_with('_');
    if !is_create || !needs_items(&meta, &[Action::Aliases]) {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    run_create(st, meta, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run_create(st: Arc<AppState>, meta: RequestMeta, req: Request) -> ApiResult<Response> {
    let Read { parts, body, .. } = read(req).await?;
    // Read strictly (a duplicate key refused, as OpenSearch refuses it): the body goes on as
    // received, so the upstream must read the same aliases as were checked.
    if let Some(value) = crate::http::parse_json(&body)? {
        crate::api::aliases::authorize_create_aliases(&st, &meta, &value)?;
    }
    let up = super::routes_upstream(&st)?;
    let resp = up.send_call(call_as(&up, &meta, &parts, &[], body)).await?;
    Ok(stream_back(resp))
}

async fn run(st: Arc<AppState>, meta: RequestMeta, req: Request) -> ApiResult<Response> {
    let Read { parts, body, .. } = read(req).await?;
    // Read strictly, as on an embedded node: with a duplicate key (`"index"` twice in one
    // action) a lenient parse would check one value while an upstream reading the other ran
    // it, so it is refused (400), as OpenSearch refuses it.
    let value = crate::http::parse_json(&body)?.ok_or_else(|| {
        EngineError::parsing("the [_aliases] body must be JSON to be authorized: it is empty")
    })?;
    let actions = sluice_engine::aliases::parse_actions(&value)?;
    crate::api::aliases::authorize_actions(&st, &meta, &actions)?;
    let up = super::routes_upstream(&st)?;
    let resp = up.send_call(call_as(&up, &meta, &parts, &[], body)).await?;
    Ok(stream_back(resp))
}
