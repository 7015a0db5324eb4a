//! `GET /_nodes/stats[/{metric}]` and `/_nodes/{node_id}/stats[/{metric}]`, every member the
//! selector names asked for its entry over RPC ([`local_entry`]), as `_wlm/stats` gathers its
//! own; each node reports the
//! figures sluice really has — the indices' counters summed (`indices`), the process's CPU
//! time, file descriptors and virtual memory (`process`, read from the OS) and the search
//! pool (`thread_pool.search`). There is no JVM, so no heap or pool figure is reported; the
//! `jvm` section holds only what is true of a process without a garbage collector (zero
//! collections, no memory pools), in the shape opensearch-benchmark's always-on
//! `JvmStatsSummary` reads (`jvm.gc.collectors.{young,old}`, `jvm.mem.pools`) — without it, every
//! OSB run aborts at its start.
//!
//! [`NodeFigures`] is what one node reports about itself and [`render_node`] its entry.

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_cluster::rpc::LocalApi;
use sluice_engine::EngineError;

use crate::error::ApiResult;
use crate::http::{Params, reply};
use crate::state::AppState;

/// The metrics OpenSearch's node stats accept; sluice answers `indices`, `process`,
/// `thread_pool` and `jvm` (the others name things sluice does not have and answer nothing).
const KNOWN_METRICS: &[&str] = &[
    "_all",
    "indices",
    "os",
    "process",
    "jvm",
    "thread_pool",
    "fs",
    "transport",
    "http",
    "breaker",
    "script",
    "discovery",
    "ingest",
    "adaptive_selection",
    "script_cache",
    "indexing_pressure",
    "shard_indexing_pressure",
    "search_backpressure",
    "cluster_manager_throttling",
    "weighted_routing",
    "file_cache",
    "task_cancellation",
    "search_pipeline",
    "resource_usage_stats",
    "segment_replication_backpressure",
    "repositories",
    "admission_control",
    "caches",
];

/// The process figures a node reads from its OS.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessFigures {
    /// CPU time used by the process since it started, in milliseconds.
    pub cpu_total_millis: Option<u64>,
    /// File descriptors open now.
    pub open_file_descriptors: Option<u64>,
    /// The soft limit on open file descriptors.
    pub max_file_descriptors: Option<u64>,
    /// Virtual memory size, in bytes.
    pub total_virtual_bytes: Option<u64>,
}

/// The search pool's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolFigures {
    /// Worker threads.
    pub threads: u64,
    /// Jobs waiting.
    pub queue: u64,
    /// Jobs running.
    pub active: u64,
}

/// What one node reports in `_nodes/stats`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFigures {
    /// The node id.
    pub node_id: String,
    /// The node name.
    pub name: String,
    /// Its published transport address (`ip:port`), as OpenSearch reports `transport_address`
    /// and `ip`.
    pub address: String,
    /// Its host (IP) alone.
    pub host: String,
    /// Its roles.
    pub roles: Vec<String>,
    /// When the figures were taken, epoch millis.
    pub timestamp: i64,
    /// The `indices` section: every index's figures summed.
    pub indices: Map<String, Value>,
    /// The `process` section's figures.
    pub process: ProcessFigures,
    /// The search pool.
    pub search_pool: PoolFigures,
}

/// The local node's figures now.
pub fn local_figures(st: &AppState) -> NodeFigures {
    let mut indices = Map::new();
    let all = |_: &str| true;
    for h in st.engine.all_indices().iter().filter(|h| !h.is_closed()) {
        super::index_stats::sum_into(&mut indices, &super::index_stats::index_figures(h, &all));
    }
    let (queue, active) = st.search_pool.num_queued_and_active();
    // The published transport address, as `_nodes` shows it (the configured port may be 0,
    // the bound host a wildcard).
    let transport = st.cluster.me().transport_addr;
    NodeFigures {
        node_id: st.identity.node_id.clone(),
        name: st.config.node_name.clone(),
        address: transport.to_string(),
        host: transport.ip().to_string(),
        roles: vec!["data".into(), "ingest".into(), "cluster_manager".into()],
        timestamp: sluice_engine::now_millis(),
        indices,
        process: read_process(),
        search_pool: PoolFigures {
            threads: st.search_pool.num_threads() as u64,
            queue: queue as u64,
            active: active as u64,
        },
    }
}

/// Reads the process figures from `/proc` (absent where the OS does not provide them).
fn read_process() -> ProcessFigures {
    let open = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    let limits = std::fs::read_to_string("/proc/self/limits").ok();
    let max = limits.as_deref().and_then(|l| {
        l.lines()
            .find(|line| line.starts_with("Max open files"))
            .and_then(|line| line.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
    });
    let status = std::fs::read_to_string("/proc/self/status").ok();
    let vm = status.as_deref().and_then(|s| {
        s.lines()
            .find(|line| line.starts_with("VmSize:"))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let cpu = cpu_time::ProcessTime::try_now()
        .ok()
        .map(|t| u64::try_from(t.as_duration().as_millis()).unwrap_or(u64::MAX));
    ProcessFigures {
        cpu_total_millis: cpu,
        open_file_descriptors: open,
        max_file_descriptors: max,
        total_virtual_bytes: vm,
    }
}

/// One node's entry of `_nodes/stats`, with the sections `wants` selects.
pub fn render_node(node: &NodeFigures, wants: &dyn Fn(&str) -> bool) -> Value {
    let mut v = json!({
        "timestamp": node.timestamp,
        "name": node.name,
        "transport_address": node.address,
        "host": node.host,
        "ip": node.address,
        "roles": node.roles,
        "attributes": {},
    });
    if wants("indices") {
        v["indices"] = Value::Object(node.indices.clone());
    }
    if wants("process") {
        let p = &node.process;
        let mut process = json!({"timestamp": node.timestamp});
        if let Some(n) = p.open_file_descriptors {
            process["open_file_descriptors"] = json!(n);
        }
        if let Some(n) = p.max_file_descriptors {
            process["max_file_descriptors"] = json!(n);
        }
        if let Some(n) = p.cpu_total_millis {
            process["cpu"] = json!({"total_in_millis": n});
        }
        if let Some(n) = p.total_virtual_bytes {
            process["mem"] = json!({"total_virtual_in_bytes": n});
        }
        v["process"] = process;
    }
    if wants("jvm") {
        v["jvm"] = no_jvm(node.timestamp);
    }
    if wants("thread_pool") {
        let s = node.search_pool;
        v["thread_pool"] =
            json!({"search": {"threads": s.threads, "queue": s.queue, "active": s.active}});
    }
    v
}

/// The `jvm` section of a process that has no JVM: the two collectors OpenSearch's G1 reports
/// (`young`, `old`) with the collections that really happened — none, as Rust has no garbage
/// collector — and no memory pools. No heap figure is made up.
fn no_jvm(timestamp: i64) -> Value {
    let none = json!({"collection_count": 0, "collection_time_in_millis": 0});
    json!({
        "timestamp": timestamp,
        "gc": {"collectors": {"young": none, "old": none}},
        "mem": {"pools": {}},
    })
}

/// What a `_nodes/stats` fan-out asks each member for: the metrics to render.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct NodeStatsParams {
    /// The metrics asked for (`_all` among them: every one).
    pub metrics: Vec<String>,
}

/// This node's entry of `_nodes/stats`, as a member answers a coordinator's fan-out.
pub fn local_entry(st: &AppState, p: &NodeStatsParams) -> Value {
    let all = p.metrics.iter().any(|m| m == "_all");
    let wants = |m: &str| all || p.metrics.iter().any(|x| x == m);
    render_node(&local_figures(st), &wants)
}

/// `GET /_nodes/stats`, `/_nodes/stats/{metric}`, `/_nodes/{node_id}/stats[/{metric}]`: the
/// entries of the members the selector names (`crate::cluster::select`), each asked over RPC
/// as `_wlm/stats` asks them; a member that does not answer within `timeout` is a failure
/// in `_nodes`, as in OpenSearch.
pub async fn nodes_stats(
    State(st): State<Arc<AppState>>,
    Path(parts): Path<Vec<(String, String)>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let get = |k: &str| parts.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let selector = get("node_id").unwrap_or_else(|| "_all".to_string());
    let metric = get("metric").unwrap_or_else(|| "_all".to_string());
    let metrics: Vec<&str> = metric.split(',').map(str::trim).collect();
    let unknown: Vec<&str> = metrics
        .iter()
        .copied()
        .filter(|m| !KNOWN_METRICS.contains(m))
        .collect();
    if !unknown.is_empty() {
        return Err(EngineError::illegal_argument(format!(
            "request [/_nodes/stats/{metric}] contains unrecognized metric{}: [{}]",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", ")
        ))
        .into());
    }
    let deadline = crate::api::wlm_stats::fanout_timeout(&params)?;
    let members = st.cluster.members();
    let targets =
        crate::cluster::select::select(&members.live, &st.identity.node_id, Some(&selector))?;
    let call = NodeStatsParams {
        metrics: metrics.iter().map(|m| m.to_string()).collect(),
    };
    let outcomes = st
        .cluster
        .fan_out(&targets, LocalApi::NodeStats, &json!(call), deadline)
        .await;
    let (answers, envelope) = crate::cluster::select::envelope(outcomes);
    let nodes: Map<String, Value> = answers
        .into_iter()
        .map(|(member, entry)| (member.node_id, entry))
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({
            "_nodes": envelope,
            "cluster_name": st.config.cluster_name,
            "nodes": nodes,
        }),
        &params,
    ))
}
