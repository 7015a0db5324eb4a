//! `GET /` and `GET /_cluster/health`.

use std::sync::Arc;
use std::time::Instant;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use sluice_engine::index::IndexHandle;
use sluice_engine::resolve::{ExpandWildcards, IndicesOptions};
use sluice_wire::ErrorCode;

use super::health_wait::HealthWait;
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
    let index = index.map(|Path(i)| i);
    let wait = HealthWait::from_params(&params, index.is_some())?;
    super::health::check_level(&params)?;
    // The figures are those of the named indices that exist (OpenSearch's lenient default,
    // which the request's `ignore_unavailable`… may change); whether every one named exists
    // is checked strictly, as OpenSearch does, and makes the status red when one does not.
    let lenient = IndicesOptions {
        ignore_unavailable: true,
        expand_wildcards: ExpandWildcards {
            open: true,
            closed: true,
            hidden: true,
        },
        forbid_closed: false,
        ..IndicesOptions::default()
    };
    let figures_opts = IndicesOptions::from_params(&params, lenient)?;
    let strict = IndicesOptions {
        ignore_unavailable: false,
        ..lenient
    };
    let scoped = |st: &AppState| -> ApiResult<(Value, Vec<Arc<IndexHandle>>, bool)> {
        let Some(expr) = index.as_deref() else {
            let all = st.engine.all_indices();
            return Ok((health_of(st, &all, false), all, true));
        };
        let handles: Vec<_> = st
            .engine
            .resolve_targets(expr, &figures_opts)?
            .into_iter()
            .map(|t| t.handle)
            .collect();
        let exist = match st.engine.resolve_targets(expr, &strict) {
            Ok(_) => true,
            Err(e) if e.code == ErrorCode::IndexNotFound => false,
            Err(e) => return Err(e.into()),
        };
        Ok((health_of(st, &handles, !exist), handles, exist))
    };
    let (mut body, mut handles, mut exist) = scoped(&st)?;
    if let Some(wait) = wait {
        // A timeout too large to add to now waits with no deadline.
        let deadline = Instant::now().checked_add(wait.timeout);
        while !wait.met(&body, exist) {
            let left = deadline.map_or(HEALTH_RECHECK, |d| {
                d.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                body["timed_out"] = Value::Bool(true);
                break;
            }
            tokio::time::sleep(left.min(HEALTH_RECHECK)).await;
            (body, handles, exist) = scoped(&st)?;
        }
    }
    let status = if body["timed_out"] == true {
        StatusCode::REQUEST_TIMEOUT
    } else {
        StatusCode::OK
    };
    super::health::add_indices_level(&handles, &params, &mut body)?;
    Ok(reply(status, body, &params))
}

/// How often a `_cluster/health` that waits (`wait_for_*`) looks at the health again: the
/// figures (members, indices) have no one change feed to watch, and a waiting health request
/// is an operator's or a start-up script's, rare and cheap to re-evaluate; 50 ms answers within
/// a blink of the condition becoming true.
const HEALTH_RECHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// The cluster-level figures of `_cluster/health` (also `_cat/health`'s).
pub(crate) fn health_body(st: &AppState) -> Value {
    health_of(st, &st.engine.all_indices(), false)
}

/// `_cluster/health`'s figures over `indices`; `red` when `missing` (a named index does not
/// exist), else `yellow` while a replica is unassigned, else `green`.
fn health_of(st: &AppState, indices: &[Arc<IndexHandle>], missing: bool) -> Value {
    let primaries: u64 = indices.iter().map(|h| h.number_of_shards()).sum();
    let unassigned: u64 = indices
        .iter()
        .map(|h| h.number_of_shards() * h.setting_u64("index.number_of_replicas", 1))
        .sum();
    let status = if missing {
        "red"
    } else if unassigned > 0 {
        "yellow"
    } else {
        "green"
    };
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
    let mut body = json!({
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
    });
    let unreachable = st.cluster.shared().coordinator.unreachable_owners();
    crate::cluster::presence::add_to_health(&st.cluster.split(), &unreachable, &mut body);
    body
}
