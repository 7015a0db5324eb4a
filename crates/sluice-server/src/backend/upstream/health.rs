//! `GET _cluster/health[/{index}]` on a gateway: the upstream cluster's health — the data,
//! its shards and their status are the upstream's — with the gateway's own metastore in it,
//! as an embedded node shows its own ([`crate::api::cluster::health`]): the sluice-specific
//! `metastore` object (which store, `available` or `unavailable`, since when and why), and
//! `discovered_cluster_manager` (and the older `discovered_master`) `false` while the gateway
//! cannot reach it, since the metastore plays the part of the cluster manager for the
//! workload groups, rules and settings. Forwarded, a gateway that lost its PostgreSQL
//! metastore answered the upstream's health alone, and nothing showed the outage.
//!
//! Answers other than the health document (an error, a `wait_for_*` that answers 408 is still
//! one), other methods, and requests with `filter_path` or a `format` (whose answers the
//! upstream shaped) are passed through unchanged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::routes::{Read, call_as, read};
use super::stream_back;
use crate::error::ApiResult;
use crate::http::{RequestMeta, reply};
use crate::state::AppState;

/// `GET /_cluster/health[/{index}]` on a gateway.
pub async fn cluster_health(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    req: Request,
) -> Response {
    if *req.method() != Method::GET {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    with_own_metastore(st, meta, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn with_own_metastore(
    st: Arc<AppState>,
    meta: RequestMeta,
    req: Request,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    let shaped = params.contains_key("filter_path") || params.contains_key("format");
    let call = call_as(&up, &meta, &parts, &[], body).answer_uncompressed();
    let resp = up.send_call(call).await?;
    let status = resp.status();
    if shaped || !(status == StatusCode::OK || status == StatusCode::REQUEST_TIMEOUT) {
        return Ok(stream_back(resp));
    }
    let mut health = super::json_answer(resp, "_cluster/health").await?;
    add_own_metastore(&st, &mut health);
    crate::cluster::upstream_identity::add_to_health(&st, &mut health).await;
    Ok(reply(status, health, &params))
}

/// Puts the gateway's metastore into an upstream health document.
fn add_own_metastore(st: &AppState, health: &mut Value) {
    let Value::Object(fields) = health else {
        return;
    };
    if !st.metastore_status.is_reachable() {
        for key in ["discovered_cluster_manager", "discovered_master"] {
            fields.insert(key.into(), Value::Bool(false));
        }
    }
    fields.insert("metastore".into(), st.metastore_status.to_json());
    let unreachable = st.cluster.shared().coordinator.unreachable_owners();
    crate::cluster::presence::add_to_health(&st.cluster.split(), &unreachable, health);
}
