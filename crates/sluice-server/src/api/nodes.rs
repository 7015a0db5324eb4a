//! The cluster's members as OpenSearch lists nodes: `GET /_nodes[/{nodes}][/{metrics}]`,
//! `GET /_cat/nodes`. Everything here comes from the gossiped member records, so it needs no
//! call to the other nodes and always answers.
//!
//! # Decisions
//! - sluice has no elected cluster manager: any node answers cluster-level requests. Tools
//!   expect one `*` in `_cat/nodes`' `cluster_manager` column, so the member with the lowest
//!   node id wears it — a stable, documented choice, not an election.
//! - No JVM, OS or heap figures exist to report; `_nodes` gives OpenSearch's identity fields
//!   (name, host, ip, transport_address, version, build, roles, attributes) and the `http` and
//!   `transport` sections (what client sniffing reads: `http.publish_address`).
//! - `_cat/nodes` columns: `id` (4 characters, or whole with `full_id=true`), `name`, `ip`,
//!   `port` (transport), `http_address`, `version`, `build`, `node.role` (`dim`),
//!   `node.roles`, `cluster_manager`, `master` (its old name), and sluice's `backend`. An
//!   unknown column in `h=` is a 400 naming it and the accepted ones.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_cluster::Member;
use sluice_engine::EngineError;

use crate::cluster::{ROLES, select};
use crate::error::ApiResult;
use crate::http::{Params, reply};
use crate::state::AppState;

/// The `_nodes` info metrics OpenSearch knows; sluice fills `http` and `transport` and
/// answers the others with nothing (it has no JVM, plugins or ingest pipelines).
const METRICS: [&str; 12] = [
    "settings",
    "os",
    "process",
    "jvm",
    "thread_pool",
    "transport",
    "http",
    "plugins",
    "ingest",
    "aggregations",
    "indices",
    "search_pipelines",
];

/// `GET /_nodes`.
pub async fn info_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    info(&st, None, None, &params)
}

/// `GET /_nodes/{nodes_or_metrics}`: metrics when every part is a metric name, else nodes.
pub async fn info_one(
    State(st): State<Arc<AppState>>,
    Path(arg): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let is_metrics = arg.split(',').all(|p| METRICS.contains(&p.trim()));
    if is_metrics {
        info(&st, None, Some(&arg), &params)
    } else {
        info(&st, Some(&arg), None, &params)
    }
}

/// `GET /_nodes/{nodes}/{metrics}`.
pub async fn info_nodes_metrics(
    State(st): State<Arc<AppState>>,
    Path((nodes, metrics)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    info(&st, Some(&nodes), Some(&metrics), &params)
}

fn info(
    st: &AppState,
    nodes: Option<&str>,
    metrics: Option<&str>,
    params: &Params,
) -> ApiResult<Response> {
    let wanted: Vec<&str> = match metrics {
        None | Some("_all") => METRICS.to_vec(),
        Some(m) => {
            let parts: Vec<&str> = m.split(',').map(str::trim).collect();
            if let Some(bad) = parts.iter().find(|p| !METRICS.contains(p) && **p != "_all") {
                return Err(EngineError::illegal_argument(format!(
                    "request [/_nodes] contains unrecognized metric: [{bad}]; accepted metrics are: {}",
                    METRICS.join(", ")
                ))
                .into());
            }
            if parts.contains(&"_all") {
                METRICS.to_vec()
            } else {
                parts
            }
        }
    };
    let members = st.cluster.members();
    let selected = select::select(&members.live, &st.identity.node_id, nodes);
    let entries: Map<String, Value> = selected
        .iter()
        .map(|m| (m.node_id.clone(), node_info(st, m, &wanted)))
        .collect();
    let body = json!({
        "_nodes": {"total": selected.len(), "successful": selected.len(), "failed": 0},
        "cluster_name": st.config.cluster_name,
        "nodes": entries,
    });
    Ok(reply(StatusCode::OK, body, params))
}

fn node_info(st: &AppState, m: &Member, metrics: &[&str]) -> Value {
    let mut v = json!({
        "name": m.name,
        "transport_address": m.transport_addr.to_string(),
        "host": m.transport_addr.ip().to_string(),
        "ip": m.transport_addr.ip().to_string(),
        "version": sluice_wire::OPENSEARCH_COMPAT_VERSION,
        "distribution": "opensearch",
        "build_type": "sluice",
        "build_hash": m.version,
        "roles": ROLES,
        "attributes": {"sluice.backend": m.backend, "sluice.protocol": m.protocol_version.to_string()},
    });
    if metrics.contains(&"http") {
        v["http"] = json!({
            "bound_address": [m.http_addr.to_string()],
            "publish_address": m.http_addr.to_string(),
            "max_content_length_in_bytes": if m.node_id == st.identity.node_id {
                json!(st.config.max_content_length)
            } else {
                Value::Null
            },
        });
        if v["http"]["max_content_length_in_bytes"].is_null()
            && let Some(o) = v["http"].as_object_mut()
        {
            o.remove("max_content_length_in_bytes");
        }
    }
    if metrics.contains(&"transport") {
        v["transport"] = json!({
            "bound_address": [m.transport_addr.to_string()],
            "publish_address": m.transport_addr.to_string(),
            "profiles": {},
        });
    }
    v
}

/// The `_cat/nodes` columns, in the order `h=*` lists them, and the default ones.
const CAT_COLUMNS: [&str; 12] = [
    "id",
    "name",
    "ip",
    "port",
    "http_address",
    "version",
    "build",
    "node.role",
    "node.roles",
    "cluster_manager",
    "master",
    "backend",
];
const CAT_DEFAULT: [&str; 6] = [
    "ip",
    "http_address",
    "node.role",
    "node.roles",
    "cluster_manager",
    "name",
];

/// `GET /_cat/nodes` with `v`, `h=`, `help`, `full_id`, `format=json`.
pub async fn cat_nodes(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    if params.contains_key("help") {
        let rows = CAT_COLUMNS
            .iter()
            .map(|c| vec![(*c).to_string(), "|".into(), cat_help(c).into()])
            .collect();
        return crate::api::indices::cat_reply(&["column", "|", "description"], rows, &params);
    }
    let cols: Vec<&str> = match params.get("h") {
        None => CAT_DEFAULT.to_vec(),
        Some(h) if h.trim() == "*" => CAT_COLUMNS.to_vec(),
        Some(h) => {
            let parts: Vec<&str> = h
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            if let Some(bad) = parts.iter().find(|p| !CAT_COLUMNS.contains(p)) {
                return Err(EngineError::illegal_argument(format!(
                    "unknown column [{bad}] in h=; _cat/nodes has: {}",
                    CAT_COLUMNS.join(", ")
                ))
                .into());
            }
            parts
        }
    };
    let full_id = params
        .get("full_id")
        .is_some_and(|v| v.is_empty() || v == "true");
    let members = st.cluster.members();
    let manager = members.live.first().map(|m| m.node_id.clone());
    let rows = members
        .live
        .iter()
        .map(|m| {
            let is_manager = manager.as_deref() == Some(m.node_id.as_str());
            cols.iter()
                .map(|c| match *c {
                    "id" if full_id => m.node_id.clone(),
                    "id" => m.node_id.chars().take(4).collect(),
                    "name" => m.name.clone(),
                    "ip" => m.transport_addr.ip().to_string(),
                    "port" => m.transport_addr.port().to_string(),
                    "http_address" => m.http_addr.to_string(),
                    "version" => sluice_wire::OPENSEARCH_COMPAT_VERSION.to_string(),
                    "build" => m.version.clone(),
                    "node.role" => "dim".to_string(),
                    "node.roles" => ROLES.join(","),
                    "cluster_manager" | "master" => if is_manager { "*" } else { "-" }.to_string(),
                    "backend" => m.backend.clone(),
                    _ => String::new(),
                })
                .collect()
        })
        .collect();
    crate::api::indices::cat_reply(&cols, rows, &params)
}

fn cat_help(column: &str) -> &'static str {
    match column {
        "id" => "unique node id",
        "name" => "node name",
        "ip" => "ip address",
        "port" => "bound transport port",
        "http_address" => "bound http address",
        "version" => "opensearch version",
        "build" => "sluice build",
        "node.role" => "m:cluster manager eligible node, d:data node, i:ingest node",
        "node.roles" => "node roles",
        "cluster_manager" => "*:current cluster manager",
        "master" => "*:current cluster manager (deprecated name)",
        "backend" => "sluice backend: embedded or upstream",
        _ => "",
    }
}
