//! `GET /` and `GET /_cluster/health`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::ApiResult;

use crate::http::{Params, reply};
use crate::state::AppState;

/// The OpenSearch version sluice reports, so clients that check it accept the node.
pub use sluice_wire::OPENSEARCH_COMPAT_VERSION;
/// The Lucene version of that OpenSearch release, for clients that print it.
const LUCENE_VERSION: &str = "10.3.1";

/// `GET /`: node name, cluster name and uuid, version and tagline.
pub async fn root(State(st): State<Arc<AppState>>, Query(params): Query<Params>) -> Response {
    let body = json!({
        "name": st.config.node_name,
        "cluster_name": st.config.cluster_name,
        "cluster_uuid": st.identity.cluster_uuid,
        "version": {
            "distribution": "opensearch",
            "number": OPENSEARCH_COMPAT_VERSION,
            "build_type": "sluice",
            "build_hash": env!("CARGO_PKG_VERSION"),
            "build_date": "2026-11-30T00:00:00.000000Z",
            "build_snapshot": false,
            "lucene_version": LUCENE_VERSION,
            "minimum_wire_compatibility_version": "2.19.0",
            "minimum_index_compatibility_version": "2.0.0"
        },
        "tagline": "The OpenSearch Project: https://opensearch.org/"
    });
    reply(StatusCode::OK, body, &params)
}

/// `GET /_cluster/health[/{index}]`: the live members; yellow when an index of this node wants
/// replicas it cannot have; `level=indices|shards` adds each index's health (`api/health.rs`).
///
/// The metastore plays the part of OpenSearch's elected cluster manager (it holds the
/// metadata: groups, rules, persistent settings), so while the node cannot reach it
/// `discovered_cluster_manager` (and the older `discovered_master`) is `false`, and the
/// sluice-specific `metastore` object says which store it is, `unavailable`, since when and
/// why. `status` keeps describing the data, which the node still serves.
pub async fn health(
    State(st): State<Arc<AppState>>,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let mut body = health_body(&st);
    let index = index.map(|Path(i)| i);
    super::health::add_indices_level(&st, index.as_deref(), &params, &mut body)?;
    Ok(reply(StatusCode::OK, body, &params))
}

/// The cluster-level figures of `_cluster/health` (also `_cat/health`'s).
pub(crate) fn health_body(st: &AppState) -> Value {
    let indices = st.engine.all_indices();
    let primaries: u64 = indices.iter().map(|h| h.number_of_shards()).sum();
    let unassigned: u64 = indices
        .iter()
        .map(|h| h.number_of_shards() * h.setting_u64("index.number_of_replicas", 1))
        .sum();
    let status = if unassigned > 0 { "yellow" } else { "green" };
    // The live members of the cluster (each holds its own embedded indices, counted above
    // for this node only: a cluster of embedded nodes has one data set per node).
    let nodes = st.cluster.members().live.len();
    let total = primaries + unassigned;
    let metastore_reachable = st.metastore_status.is_reachable();
    let pct = if total == 0 {
        100.0
    } else {
        primaries as f64 * 100.0 / total as f64
    };
    json!({
        "cluster_name": st.config.cluster_name,
        "status": status,
        "timed_out": false,
        "number_of_nodes": nodes,
        "number_of_data_nodes": nodes,
        "discovered_master": metastore_reachable,
        "discovered_cluster_manager": metastore_reachable,
        "active_primary_shards": primaries,
        "active_shards": primaries,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": unassigned,
        "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0,
        "number_of_in_flight_fetch": 0,
        "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": pct,
        "metastore": st.metastore_status.to_json()
    })
}
