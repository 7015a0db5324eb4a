//! Index health: each index's status and shard figures (one primary per configured shard on
//! this node, replicas never assigned), the `level=indices|shards` sections of
//! `_cluster/health`, and `_cat/health` (a table of `_cluster/health`'s own figures).

use std::sync::Arc;

use crate::http::Query;
use axum::extract::State;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_engine::EngineError;
use sluice_engine::index::IndexHandle;

use super::cat::{Cell, Column, Table};
use crate::error::ApiResult;
use crate::http::Params;
use crate::state::AppState;

/// One index's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexHealth {
    /// `green` (every copy assigned) or `yellow` (replicas unassigned: one node).
    pub status: &'static str,
    /// `index.number_of_shards`.
    pub shards: u64,
    /// `index.number_of_replicas`.
    pub replicas: u64,
    /// Copies assigned: the primaries.
    pub active: u64,
    /// Copies wanted but not assigned: the replicas.
    pub unassigned: u64,
}

impl IndexHealth {
    /// Every copy, assigned or not: what an operation's `_shards.total` counts.
    pub fn copies(&self) -> u64 {
        self.active + self.unassigned
    }
}

/// The health of `h`: its primaries are active on this node, its replicas cannot be assigned.
pub fn index_health(h: &IndexHandle) -> IndexHealth {
    let shards = h.number_of_shards();
    let replicas = h.setting_u64("index.number_of_replicas", 1);
    let unassigned = shards * replicas;
    IndexHealth {
        status: if unassigned > 0 { "yellow" } else { "green" },
        shards,
        replicas,
        active: shards,
        unassigned,
    }
}

/// The `level` parameter of `_cluster/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Cluster,
    Indices,
    Shards,
}

fn parse_level(params: &Params) -> Result<Level, EngineError> {
    match params
        .get("level")
        .map(|l| l.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("cluster") | Some("awareness_attributes") => Ok(Level::Cluster),
        Some("indices") => Ok(Level::Indices),
        Some("shards") => Ok(Level::Shards),
        Some(other) => Err(EngineError::illegal_argument(format!(
            "No enum constant org.opensearch.action.admin.cluster.health.ClusterHealthRequest.Level.{}",
            other.to_ascii_uppercase()
        ))),
    }
}

/// Checks the `level` parameter of `_cluster/health`, before the request waits.
pub(crate) fn check_level(params: &Params) -> Result<(), EngineError> {
    parse_level(params).map(|_| ())
}

fn index_json(health: &IndexHealth, level: Level) -> Value {
    let mut v = json!({
        "status": health.status,
        "number_of_shards": health.shards,
        "number_of_replicas": health.replicas,
        "active_primary_shards": health.active,
        "active_shards": health.active,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": health.unassigned,
    });
    if level == Level::Shards {
        let shards: Map<String, Value> = (0..health.shards)
            .map(|n| {
                (
                    n.to_string(),
                    json!({
                        "status": health.status,
                        "primary_active": true,
                        "active_shards": 1,
                        "relocating_shards": 0,
                        "initializing_shards": 0,
                        "unassigned_shards": health.replicas,
                    }),
                )
            })
            .collect();
        v["shards"] = Value::Object(shards);
    }
    v
}

/// Adds the `indices` section `level=indices|shards` asks for to a `_cluster/health` body,
/// over `indices` (those the request named that exist, or all); validates `level` either way.
pub fn add_indices_level(
    indices: &[Arc<IndexHandle>],
    params: &Params,
    body: &mut Value,
) -> ApiResult<()> {
    let level = parse_level(params)?;
    if level == Level::Cluster {
        return Ok(());
    }
    let section: Map<String, Value> = indices
        .iter()
        .map(|h| (h.name().to_string(), index_json(&index_health(h), level)))
        .collect();
    body["indices"] = Value::Object(section);
    Ok(())
}

/// The columns of `_cat/health`.
const CAT_HEALTH: &[Column] = &[
    Column::new("epoch", "t,time", "seconds since 1970-01-01 00:00:00"),
    Column::new("timestamp", "ts,hms,hhmmss", "time in HH:MM:SS"),
    Column::new("cluster", "cl", "cluster name"),
    Column::new("status", "st", "health status"),
    Column::new("node.total", "nt,nodeTotal", "total number of nodes"),
    Column::new(
        "node.data",
        "nd,nodeData",
        "number of nodes that can store data",
    ),
    Column::new(
        "discovered_cluster_manager",
        "dcm",
        "cluster manager is discovered or not",
    ),
    Column::new(
        "shards",
        "t,sh,shards.total,shardsTotal",
        "total number of shards",
    ),
    Column::new(
        "pri",
        "p,shards.primary,shardsPrimary",
        "number of primary shards",
    ),
    Column::new(
        "relo",
        "r,shards.relocating,shardsRelocating",
        "number of relocating nodes",
    ),
    Column::new(
        "init",
        "i,shards.initializing,shardsInitializing",
        "number of initializing nodes",
    ),
    Column::new(
        "unassign",
        "u,shards.unassigned,shardsUnassigned",
        "number of unassigned shards",
    ),
    Column::new(
        "pending_tasks",
        "pt,pendingTasks",
        "number of pending tasks",
    ),
    Column::new(
        "max_task_wait_time",
        "mtwt,maxTaskWaitTime",
        "wait time of longest task pending",
    ),
    Column::new(
        "active_shards_percent",
        "asp,activeShardsPercent",
        "active number of shards in percent",
    ),
];

/// `GET /_cat/health`: `_cluster/health`'s figures as a `_cat` table.
pub async fn cat_health(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let h = super::cluster::health_body(&st);
    let (epoch, timestamp) = super::indices::cat_now();
    let int = |k: &str| Cell::Int(h[k].as_i64().unwrap_or(0));
    let pct = h["active_shards_percent_as_number"].as_f64().unwrap_or(0.0);
    let mut table = Table::new(CAT_HEALTH);
    table.push(vec![
        Cell::Int(epoch),
        Cell::Text(timestamp),
        Cell::Text(h["cluster_name"].as_str().unwrap_or_default().to_string()),
        Cell::Text(h["status"].as_str().unwrap_or_default().to_string()),
        int("number_of_nodes"),
        int("number_of_data_nodes"),
        Cell::Text(
            h["discovered_cluster_manager"]
                .as_bool()
                .unwrap_or(true)
                .to_string(),
        ),
        int("active_shards"),
        int("active_primary_shards"),
        int("relocating_shards"),
        int("initializing_shards"),
        int("unassigned_shards"),
        int("number_of_pending_tasks"),
        Cell::Text("-".to_string()),
        Cell::Text(format!("{pct:.1}%")),
    ]);
    table.respond(&params)
}
