//! This node's part of `_wlm/stats` (its groups' figures, optionally their buckets) and of
//! `_list/wlm_stats` (its table rows), answered to the coordinator of the request.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sluice_core::ResourceType;
use sluice_engine::{EngineError, ErrorCode};

use crate::settings::keys;
use crate::state::AppState;
use crate::workload::{GroupEntry, GroupStats};

/// Parameters of a node's `_wlm/stats` part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatsParams {
    /// The `{groups}` selector (comma list of ids or `_all`).
    pub groups: Option<String>,
    /// `breach=true|false`.
    pub breach: Option<bool>,
    /// `include=buckets` (the coordinator checked the caller may see them).
    pub buckets: bool,
}

/// Parameters of a node's `_list/wlm_stats` rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RowsParams {
    /// The `{groups}` selector.
    pub groups: Option<String>,
    /// `breach=true|false`.
    pub breach: Option<bool>,
}

/// `{"workload_groups": {id: figures}}`; a requested group this node does not know is a
/// `resource_not_found_exception` (a per-node failure in the coordinator's answer).
pub(super) fn stats(st: &AppState, p: &StatsParams) -> Result<Value, EngineError> {
    crate::admission::shared::refresh_owned(st);
    let entries = node_groups(st, p.groups.as_deref(), p.breach)?;
    let groups: Map<String, Value> = entries
        .iter()
        .map(|e| {
            let mut v = e.stats.to_json(e.is_default());
            if let Some(reason) = &e.inactive_throttle {
                // A throttle that cannot apply on this node is never silent.
                v["warnings"] = json!([reason]);
            }
            if p.buckets {
                v["buckets"] = buckets_json(st, e);
            }
            (e.id.to_string(), v)
        })
        .collect();
    Ok(json!({ "workload_groups": groups }))
}

/// `{"rows": [{"group": id, "cells": [...]}]}`: one row per group, its cells in
/// [`ROW_COLUMNS`] order, rendered as the table prints them.
pub(super) fn rows(st: &AppState, p: &RowsParams) -> Result<Value, EngineError> {
    crate::admission::shared::refresh_owned(st);
    let entries = node_groups(st, p.groups.as_deref(), p.breach)?;
    let usage = |e: &GroupEntry, r: ResourceType| match &e.group {
        Some(g) if g.resource_limits.get(r).is_none() => "NA".to_string(),
        _ => format!("{}", e.stats.resource(r).current_usage()),
    };
    let rows: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut cells = vec![
                e.stats.total_completions.get().to_string(),
                e.stats.total_rejections.get().to_string(),
                e.stats.total_cancellations.get().to_string(),
                usage(e, ResourceType::Cpu),
                usage(e, ResourceType::Memory),
            ];
            cells.extend(SLUICE_COLUMNS.iter().map(|(_, f)| f(&e.stats).to_string()));
            json!({"group": e.id.to_string(), "cells": cells})
        })
        .collect();
    Ok(json!({ "rows": rows }))
}

/// Reads one figure of a group's stats.
type Figure = fn(&GroupStats) -> u64;

/// The figure columns of a `_list/wlm_stats` row after NODE_ID and WORKLOAD_GROUP_ID:
/// OpenSearch's, then sluice's ([`SLUICE_COLUMNS`]).
pub const ROW_COLUMNS: [&str; 5] = [
    "TOTAL_COMPLETIONS",
    "TOTAL_REJECTIONS",
    "TOTAL_CANCELLATIONS",
    "CPU_USAGE",
    "MEMORY_USAGE",
];

/// sluice's extra columns, after OpenSearch's: the throttle's and the queue's figures.
pub const SLUICE_COLUMNS: [(&str, Figure); 17] = [
    ("TOTAL_THROTTLED", |s| s.total_throttled.get()),
    ("TOTAL_QUEUED", |s| s.total_queued.get()),
    ("TOTAL_QUEUE_REJECTIONS", |s| s.total_queue_rejections.get()),
    ("QUEUED_CURRENT", |s| s.queued_current.get()),
    ("QUEUE_PEAK", |s| s.queue_peak.get()),
    ("QUEUE_WAIT_COUNT", |s| s.queue_wait_count.get()),
    ("TOTAL_QUEUE_WAIT_MILLIS", |s| {
        s.total_queue_wait_millis.get()
    }),
    ("MAX_QUEUE_WAIT_MILLIS", |s| s.max_queue_wait_millis.get()),
    ("TOTAL_WOULD_QUEUE", |s| s.total_would_queue.get()),
    ("TOTAL_SHARED_ACQUIRED", |s| s.total_shared_acquired.get()),
    ("TOTAL_SHARED_REUSED", |s| s.total_shared_reused.get()),
    ("TOTAL_SHARED_PUSHED", |s| s.total_shared_pushed.get()),
    ("TOTAL_SHARED_THROTTLED", |s| s.total_shared_throttled.get()),
    ("TOTAL_SHARED_FAIL_OPEN", |s| s.total_shared_fail_open.get()),
    ("TOTAL_SHARED_PUSHES_RECEIVED", |s| {
        s.total_shared_pushes_received.get()
    }),
    ("TOTAL_SHARED_PUSHES_SENT", |s| {
        s.total_shared_pushes_sent.get()
    }),
    ("SHARED_LEASES_OWNED", |s| s.shared_leases_owned.get()),
];

/// This node's groups in id order, filtered by `groups` (a comma list of ids or `_all`) and
/// `breach`; a requested id that does not exist is an error naming it.
fn node_groups(
    st: &AppState,
    groups: Option<&str>,
    breach: Option<bool>,
) -> Result<Vec<Arc<GroupEntry>>, EngineError> {
    let view = st.workload.view();
    let mut all: Vec<Arc<GroupEntry>> = view.groups.values().cloned().collect();
    all.push(st.workload.default_entry().clone());
    all.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(list) = groups {
        let wanted: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if !wanted.contains(&"_all") {
            if let Some(missing) = wanted.iter().find(|w| !all.iter().any(|e| &*e.id == **w)) {
                return Err(EngineError::new(
                    ErrorCode::ResourceNotFound,
                    format!("WorkloadGroup with id {missing} does not exist"),
                ));
            }
            all.retain(|e| wanted.contains(&&*e.id));
        }
    }
    if let Some(b) = breach {
        all.retain(|e| is_breached(st, e) == b);
    }
    Ok(all)
}

/// Whether some limited resource of the group was last seen above limit × the node
/// rejection threshold.
fn is_breached(st: &AppState, e: &GroupEntry) -> bool {
    let Some(g) = &e.group else {
        return false;
    };
    let settings = st.cluster_settings.snapshot();
    [
        (ResourceType::Cpu, keys::WLM_CPU_REJECTION_THRESHOLD),
        (ResourceType::Memory, keys::WLM_MEMORY_REJECTION_THRESHOLD),
    ]
    .into_iter()
    .any(|(r, key)| {
        g.resource_limits
            .get(r)
            .is_some_and(|limit| e.stats.resource(r).current_usage() > limit * settings.double(key))
    })
}

/// The in-flight buckets of `entry`'s group on this node, with their live limit.
fn buckets_json(st: &AppState, entry: &GroupEntry) -> Value {
    let limit = entry.group.as_ref().and_then(|g| g.throttling.node_limit);
    let mut buckets: Vec<(sluice_core::BucketKey, u64)> = st
        .workload
        .permits
        .buckets()
        .into_iter()
        .filter(|(k, _)| *k.group_id == *entry.id)
        .collect();
    buckets.sort();
    Value::Array(
        buckets
            .into_iter()
            .map(|(k, n)| {
                json!({
                    "attribute": k.attribute.as_str(),
                    "value": k.value.as_deref(),
                    "in_flight": n,
                    "node_limit": limit,
                })
            })
            .collect(),
    )
}
