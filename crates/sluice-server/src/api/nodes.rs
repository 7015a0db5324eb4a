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
//! - Every address shown (`publish_address`, `transport_address`, `ip`, `http_address`) is
//!   the member's published one, never a wildcard a client would dial as itself
//!   ([`crate::cluster::publish`]); `bound_address` is the listener's own for the node
//!   answering only (see [`bound`]).
//! - `_cat/nodes` columns: `id` (4 characters, or whole with `full_id=true`), `name`, `ip`,
//!   `port` (transport), `http_address`, `version`, `build`, `node.role` (`dim`),
//!   `node.roles`, `cluster_manager`, `master` (its old name), and sluice's `backend`. An
//!   unknown column in `h=` is a 400 naming it and the accepted ones.

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_cluster::Member;
use sluice_engine::EngineError;

use crate::api::cat::{Cell, Column, Table};
use crate::cluster::{ROLES, select};
use crate::error::ApiResult;
use crate::http::{Params, reply};
use crate::state::AppState;

/// The `_nodes` info metrics OpenSearch knows; sluice fills `http`, `transport` and, for an
/// embedded node answering of itself, `thread_pool` (its search pool), and answers the others
/// with nothing (it has no JVM, plugins or ingest pipelines).
pub(crate) const METRICS: [&str; 12] = [
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

/// The `_nodes` APIs other than info whose routes OpenSearch matches before
/// `_nodes/{node_id}/{metric}`: `_nodes/stats/http` is the HTTP stats of every node, not info
/// of a node named `stats`. sluice answers stats (routes of their own); the others it does not
/// implement, so they get the answer of a route with no handler rather than an empty info.
pub const OTHER_APIS: [&str; 5] = [
    "stats",
    "usage",
    "hot_threads",
    "hotthreads",
    "reload_secure_settings",
];

/// The answer to an API of [`OTHER_APIS`] sluice does not implement: a route with no handler.
fn not_info(uri: &axum::http::Uri) -> crate::error::ApiError {
    crate::error::ApiError::Simple {
        status: axum::http::StatusCode::BAD_REQUEST,
        message: format!("no handler found for uri [{uri}] and method [GET]"),
        allow: None,
    }
}

/// `GET /_nodes/{nodes_or_metrics}`: metrics when every part is a metric name, else nodes.
pub async fn info_one(
    State(st): State<Arc<AppState>>,
    Path(arg): Path<String>,
    Query(params): Query<Params>,
    uri: axum::http::Uri,
) -> ApiResult<Response> {
    if OTHER_APIS.contains(&arg.as_str()) {
        return Err(not_info(&uri));
    }
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
    uri: axum::http::Uri,
) -> ApiResult<Response> {
    if OTHER_APIS.contains(&nodes.as_str()) || OTHER_APIS[1..].contains(&metrics.as_str()) {
        return Err(not_info(&uri));
    }
    info(&st, Some(&nodes), Some(&metrics), &params)
}

/// The info of the nodes `nodes` selects (every node when `None`), with the sections of
/// `metrics` (every one when `None`).
pub(crate) fn info(
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
    let selected = select::select(&members.live, &st.identity.node_id, nodes)?;
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
    // A gateway in front of Elasticsearch describes its nodes as Elasticsearch does (its
    // clients' sniffers read them): the upstream's version, and no `distribution`, which
    // Elasticsearch's nodes info has not (`crate::backend::upstream::product` P4).
    if let Some(product) = st.upstream.as_deref().map(|up| &up.product)
        && product.dialect() == sluice_wire::Dialect::Elasticsearch
        && let Some(o) = v.as_object_mut()
    {
        o.remove("distribution");
        if let Some(version) = product.elasticsearch_version() {
            o.insert("version".into(), json!(version));
        }
    }
    let me = m.node_id == st.identity.node_id;
    if metrics.contains(&"http") {
        v["http"] = json!({
            "bound_address": [bound(me.then_some(st.http_bound_addr), m.http_addr)],
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
    // What a gateway in front of this node reads to size its limits when the upstream reports
    // no per-task usage (`thread_pool.search.size`): a node knows only its own pool, and a
    // gateway's pool runs no searches.
    if metrics.contains(&"thread_pool") && m.node_id == st.identity.node_id && st.upstream.is_none()
    {
        let pool = &st.search_pool;
        v["thread_pool"] = json!({"search": {
            "type": "fixed",
            "size": pool.num_threads(),
            "queue_size": pool.max_queue(),
        }});
    }
    if metrics.contains(&"transport") {
        v["transport"] = json!({
            "bound_address": [bound(me.then(|| st.cluster.bound_addr()), m.transport_addr)],
            "publish_address": m.transport_addr.to_string(),
            "profiles": {},
        });
    }
    v
}

/// A `bound_address` entry: the node answering shows the address its listener bound (a
/// wildcard such as `0.0.0.0:9200` when it bound one); its peers' bound addresses are not
/// gossiped, so another member shows what is known of it, its published address.
fn bound(own: Option<std::net::SocketAddr>, published: std::net::SocketAddr) -> String {
    own.unwrap_or(published).to_string()
}

/// The `_cat/nodes` columns, in the order `h=*` lists them; the default ones are shown
/// without `h=`.
const CAT_NODES: &[Column] = &[
    Column::hidden("id", "nodeId", "unique node id"),
    Column::new("ip", "i", "ip address"),
    Column::hidden("port", "po", "bound transport port"),
    Column::new("http_address", "http", "bound http address"),
    Column::hidden("version", "v", "opensearch version"),
    Column::hidden("build", "b", "sluice build"),
    Column::new(
        "node.role",
        "r,role,nodeRole",
        "m:cluster manager eligible node, d:data node, i:ingest node",
    ),
    Column::new("node.roles", "rs,all roles", "node roles"),
    Column::new("cluster_manager", "cm,m", "*:current cluster manager"),
    Column::hidden("master", "", "*:current cluster manager (deprecated name)"),
    Column::new("name", "n", "node name"),
    Column::hidden("backend", "", "sluice backend: embedded or upstream"),
];

/// `GET /_cat/nodes` with `v`, `h=`, `help`, `s=`, `full_id`, `format=json`.
pub async fn cat_nodes(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    if let Some(h) = params.get("h") {
        let known = |w: &str| {
            w.contains('*')
                || CAT_NODES
                    .iter()
                    .any(|c| c.name == w || c.aliases.split(',').any(|a| !a.is_empty() && a == w))
        };
        if let Some(bad) = h
            .split(',')
            .map(str::trim)
            .find(|w| !w.is_empty() && !known(w))
        {
            let names: Vec<&str> = CAT_NODES.iter().map(|c| c.name).collect();
            return Err(EngineError::illegal_argument(format!(
                "unknown column [{bad}] in h=; _cat/nodes has: {}",
                names.join(", ")
            ))
            .into());
        }
    }
    let full_id = params
        .get("full_id")
        .is_some_and(|v| v.is_empty() || v == "true");
    let members = st.cluster.members();
    let manager = crate::cluster::shown_manager(&members.live).map(|m| m.node_id.clone());
    let mut table = Table::new(CAT_NODES);
    for m in members.live.iter() {
        let is_manager = manager.as_deref() == Some(m.node_id.as_str());
        let star = if is_manager { "*" } else { "-" };
        let id = if full_id {
            m.node_id.clone()
        } else {
            m.node_id.chars().take(4).collect()
        };
        table.push(vec![
            Cell::Text(id),
            Cell::Text(m.transport_addr.ip().to_string()),
            Cell::Int(i64::from(m.transport_addr.port())),
            Cell::Text(m.http_addr.to_string()),
            Cell::Text(sluice_wire::OPENSEARCH_COMPAT_VERSION.to_string()),
            Cell::Text(m.version.clone()),
            Cell::Text("dim".to_string()),
            Cell::Text(ROLES.join(",")),
            Cell::Text(star.to_string()),
            Cell::Text(star.to_string()),
            Cell::Text(m.name.clone()),
            Cell::Text(m.backend.clone()),
        ]);
    }
    table.respond(&params)
}
