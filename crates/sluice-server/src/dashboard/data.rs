//! `GET /_sluice/dashboard/data`: what the dashboard shows, as JSON — the node, every group of
//! this node with its limits and figures, and the longest-running tasks.
//!
//! On a gateway the node's `search_pool` is `null` and `upstream` says how many of its
//! searches are in flight upstream (and over how many search threads, when its measure counts
//! them): its own pool runs no search, and its figures (0 active while searches ran upstream)
//! read as an idle node. On an embedded node `upstream` is `null`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sluice_core::ResourceType;

use crate::backend::upstream::limits::Measure;
use crate::error::ApiResult;
use crate::http::RequestMeta;
use crate::state::AppState;
use crate::workload::GroupEntry;

/// The action the dashboard (page and data) needs an admin role for when authentication is
/// on.
pub const DASHBOARD_ACTION: &str = sluice_core::authz::Action::Dashboard.name();

/// How many of the longest-running tasks the dashboard lists: a screenful.
const LONGEST_TASKS: usize = 10;

pub(super) async fn data(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
) -> ApiResult<Response> {
    st.auth
        .authorize_admin(meta.principal.as_deref(), DASHBOARD_ACTION)?;
    Ok(axum::Json(snapshot(&st)).into_response())
}

/// The dashboard's figures now.
pub fn snapshot(st: &AppState) -> Value {
    let view = st.workload.view();
    let mut entries: Vec<&Arc<GroupEntry>> = view.groups.values().collect();
    entries.push(st.workload.default_entry());
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    let groups: Vec<Value> = entries.iter().map(|e| group(e)).collect();
    let in_flight: u64 = entries.iter().map(|e| e.stats.executing()).sum();
    json!({
        "node": node(st, in_flight),
        "groups": groups,
        "longest_tasks": longest_tasks(st),
    })
}

/// The node's figures; `in_flight`, its groups' tasks executing (on a gateway, forwarded and
/// not yet answered).
fn node(st: &AppState, in_flight: u64) -> Value {
    let reading = *st.enforcement.last_reading.lock();
    let (queued, active) = st.search_pool.num_queued_and_active();
    let (search_pool, upstream) = match &st.upstream {
        None => (
            json!({
                "threads": st.search_pool.num_threads(),
                "active": active,
                "queued": queued,
                "rejected": st.search_pool.num_rejected(),
            }),
            Value::Null,
        ),
        Some(up) => {
            let threads = match up.effective_measure() {
                Ok(Measure::InFlight(m)) => Some(m.search_threads),
                _ => None,
            };
            (
                Value::Null,
                json!({"searches_in_flight": in_flight, "search_threads": threads}),
            )
        }
    };
    json!({
        "id": st.identity.node_id,
        "name": st.config.node_name,
        "cluster_name": st.config.cluster_name,
        "mode": st.cluster_settings.wlm_mode().as_str(),
        "in_duress": st.enforcement.is_node_in_duress(),
        "duress": {"cpu": reading.cpu_in_duress, "memory": reading.memory_in_duress},
        "usage": {"cpu": reading.cpu, "memory": reading.memory},
        "search_pool": search_pool,
        "upstream": upstream,
        "tasks_running": st.tasks.list().len(),
    })
}

fn group(e: &GroupEntry) -> Value {
    let s = &e.stats;
    let g = e.group.as_ref();
    let limit = |r: ResourceType| g.and_then(|g| g.resource_limits.get(r));
    json!({
        "id": &*e.id,
        "name": e.name(),
        "resiliency_mode": g.map(|g| g.resiliency_mode.as_str()),
        "node_limit": g.and_then(|g| g.throttling.node_limit),
        "shared_limit": g.and_then(|g| g.throttling.shared_limit),
        "in_flight": s.executing(),
        "queue_depth": s.queued_current(),
        "usage": {"cpu": s.cpu.current_usage(), "memory": s.memory.current_usage()},
        "limits": {"cpu": limit(ResourceType::Cpu), "memory": limit(ResourceType::Memory)},
        "counters": {
            "completions": s.total_completions.get(),
            "failures": s.failures.get(),
            "throttled": s.total_throttled.get(),
            "rejections": s.total_rejections.get(),
            "cancellations": s.total_cancellations.get(),
            "queued": s.total_queued.get(),
            "queue_rejections": s.total_queue_rejections.get(),
            "would_throttle": s.total_would_throttle.get(),
            "would_queue": s.total_would_queue.get(),
            "would_reject": s.total_would_reject.get(),
            "would_cancel": s.total_would_cancel.get(),
        },
        "would_queue_wait_millis": s.total_would_queue_wait_millis.get(),
        "warning": e.inactive_throttle,
    })
}

fn longest_tasks(st: &AppState) -> Vec<Value> {
    let mut tasks = st.tasks.list();
    tasks.sort_by_key(|t| t.started);
    tasks
        .iter()
        .take(LONGEST_TASKS)
        .map(|t| {
            json!({
                "id": format!("{}:{}", st.tasks.node_id(), t.seq),
                "action": t.action,
                "description": t.description.text(),
                "group": t.group().map(|g| g.id.to_string()),
                "running_millis": u64::try_from(t.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                // A task parked in its bucket's queue has started, not run: told apart, as
                // `_tasks` tells it (`status.state: queued`).
                "state": if t.queued.load(Ordering::Acquire) { "queued" } else { "running" },
                "cancelled": t.is_cancelled(),
            })
        })
        .collect()
}
