//! This node's part of `_wlm/stats` (its groups' figures, optionally their buckets) and of
//! `_list/wlm_stats` (its table rows), answered to the coordinator of the request.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sluice_cluster::shared::coordinator::BucketSlots;
use sluice_core::{BucketKey, ResourceType};
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
            // A throttle that cannot apply on this node is never silent, nor a resource
            // limit a gateway has no measure for.
            let warnings: Vec<String> = e
                .inactive_throttle
                .iter()
                .cloned()
                .chain(unmeasured_limits(st, e))
                .collect();
            if !warnings.is_empty() {
                v["warnings"] = json!(warnings);
            }
            if p.buckets {
                v["buckets"] = buckets_json(st, e);
            }
            (e.id.to_string(), v)
        })
        .collect();
    Ok(json!({ "workload_groups": groups }))
}

/// On a gateway with no measure of its upstream's searches now, why a group's
/// `resource_limits` neither reject nor cancel (`backend/upstream/limits.rs`, "Gaps"): its
/// usage reads 0, which must not pass for a group under its limits.
fn unmeasured_limits(st: &AppState, e: &GroupEntry) -> Option<String> {
    if e.group.as_ref()?.resource_limits.is_empty() {
        return None;
    }
    let why = st.upstream.as_ref()?.unmeasured()?;
    Some(format!(
        "resource_limits have no measure on this gateway, and neither reject nor cancel: {why}"
    ))
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
pub const SLUICE_COLUMNS: [(&str, Figure); 18] = [
    ("TOTAL_THROTTLED", |s| s.total_throttled.get()),
    ("TOTAL_WOULD_THROTTLE", |s| s.total_would_throttle.get()),
    ("TOTAL_QUEUED", |s| s.total_queued.get()),
    ("TOTAL_QUEUE_REJECTIONS", |s| s.total_queue_rejections.get()),
    ("QUEUED_CURRENT", |s| s.queued_current()),
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

/// The buckets of `entry`'s group this node knows of, in key order: those with requests in
/// flight or parked in its node tier and, for a group with a `shared_limit`, those it holds
/// shared slots of or counts leases of as their owner. Each with its node-tier figures and,
/// for a group with a `shared_limit`, this node's view of the shared tier (the module docs of
/// `api/wlm_stats.rs` name the fields).
fn buckets_json(st: &AppState, entry: &GroupEntry) -> Value {
    let throttling = entry.group.as_ref().map(|g| g.throttling);
    let limit = throttling.and_then(|t| t.node_limit);
    let mut buckets: BTreeMap<BucketKey, u64> = st
        .workload
        .permits
        .buckets()
        .into_iter()
        .filter(|(k, _)| *k.group_id == *entry.id)
        .collect();
    let Some(shared_limit) = throttling.and_then(|t| t.shared_pool()) else {
        return Value::Array(
            buckets
                .into_iter()
                .map(|(k, n)| node_bucket_json(&k, n, limit))
                .collect(),
        );
    };
    let shared = st.cluster.shared();
    let of_group = |wire: &str| BucketKey::from_wire(wire).filter(|k| *k.group_id == *entry.id);
    let slots: HashMap<BucketKey, BucketSlots> = shared
        .coordinator
        .slots_by_bucket()
        .into_iter()
        .filter_map(|(b, s)| Some((of_group(&b)?, s)))
        .collect();
    let owned: HashMap<BucketKey, u64> = shared
        .owner
        .leases_by_bucket()
        .into_iter()
        .filter_map(|(b, n)| Some((of_group(&b)?, n)))
        .collect();
    for k in slots.keys().chain(owned.keys()) {
        buckets.entry(k.clone()).or_default();
    }
    Value::Array(
        buckets
            .into_iter()
            .map(|(k, n)| {
                let mut v = node_bucket_json(&k, n, limit);
                let wire = k.to_wire();
                let s = slots.get(&k).copied().unwrap_or_default();
                let is_owner = shared
                    .coordinator
                    .owner_of(&wire)
                    .is_some_and(|m| m.node_id == st.cluster.me().node_id);
                v["shared_limit"] = json!(shared_limit);
                v["shared_leases_held"] = json!(s.leases);
                v["shared_leases_idle"] = json!(s.idle);
                v["shared_fail_open_in_flight"] = json!(s.fail_open);
                v["shared_parked"] = json!(st.workload.permits.num_parked(&k));
                v["shared_owner"] = json!(is_owner);
                v["shared_leases_owned"] = json!(owned.get(&k).copied().unwrap_or(0));
                v
            })
            .collect(),
    )
}

/// A bucket's node-tier figures: its key, requests in flight and `node_limit`.
fn node_bucket_json(k: &BucketKey, in_flight: u64, node_limit: Option<u32>) -> Value {
    json!({
        "attribute": k.attribute.as_str(),
        "value": k.value.as_deref(),
        "in_flight": in_flight,
        "node_limit": node_limit,
    })
}
