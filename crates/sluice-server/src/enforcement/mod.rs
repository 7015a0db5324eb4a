//! Resource enforcement at run time (issue #6, DESIGN §3 "Resource enforcement", facts §6):
//! the enforcement loop that measures each group's share of the node and cancels the worst
//! tasks of groups over their limit, and the admission check that rejects requests of groups
//! whose last measured share is over their limit.
//!
//! The decisions are [`sluice_core::resources`]'; this module feeds them and carries them out.
//!
//! - [`Enforcement`] (in [`AppState`]): the node's capacity (cores, memory budget), the state
//!   kept between passes (duress streaks, the process CPU clock's last reading) and the last
//!   duress verdict, which admission reads with one atomic load.
//! - [`run_pass`] ([`sluice_core::resources::pass`]): one pass as a plain function of its
//!   inputs — observe the node into the duress trackers, build the usage views, select the
//!   tasks to cancel; it reads no clock, no setting and no registry.
//! - [`run_once`]: gathers a pass's inputs from the node (settings snapshot, running tasks,
//!   groups, process CPU and memory), runs [`run_pass`], then records each group's usage as
//!   its `current_usage`, and in mode `enabled` cancels the selected tasks through their
//!   cancellation flag (their clients get `task_cancelled_exception` with OpenSearch's reason)
//!   counting `total_cancellations` and the resource's `cancellations`; in `monitor_only` it
//!   logs what it would cancel.
//! - [`refresh_once`]: measures and records each group's `current_usage` only (no duress
//!   observation, no cancellation) — what admission reads between two passes.
//! - [`run_loop`]: [`run_once`] every `wlm.workload_group.enforcement_interval` and
//!   [`refresh_once`] every `wlm.workload_group.usage_refresh_interval` in between (default
//!   100 ms), on the blocking pool, both re-read before each wait; in mode `disabled` they do
//!   nothing.
//! - The admission side of the share — the check at the door, again when a search thread
//!   takes the task, and a finished task teaching its group's estimate — is
//!   [`crate::admission::share`]'s; [`node`] holds what it reads (capacity, duress verdict,
//!   thresholds).
//!
//! # Decisions
//! - Deleted groups: a task carries its group's definition from tagging time, so the groups of
//!   running tasks that are no longer in the view are the deleted groups with leftovers, judged
//!   against the limits they had. Nothing needs remembering between passes, and a deleted group
//!   is forgotten exactly when its last task ends. Their cancellations count on the deleted
//!   group's own (now unlisted) stats, never on DEFAULT.
//! - Node duress inputs: process CPU over the last interval / cores, and the bytes held in live
//!   allocations / the memory budget ([`crate::node_usage`]).
//! - `DEFAULT_WORKLOAD_GROUP`'s usage is recorded too (informative; it is never policed).
//! - Usage is refreshed between passes (sluice's `usage_refresh_interval`; OpenSearch measures
//!   only once per pass): with a 1 s pass alone, a group whose tasks were cancelled measures 0
//!   at the next pass and is let back in for a whole interval, long enough for its clients to
//!   fill the search pool again (BENCHMARKS.md, noisy neighbour). Cancellation and duress stay
//!   once per pass, so `duress_streak` still counts enforcement runs and a task is judged on a
//!   second of history, not on the first milliseconds of a short query.
//! - The admission check runs again when a search thread takes the task ([`crate::api`]): a
//!   request that waited in the pool's queue while its group went over its share is turned
//!   away then, before it runs (Trino's resource groups check their limits when a query
//!   leaves the queue).
//! - Admission counts the tasks admitted and not measured yet, each at what one finished task
//!   of the group used (`wlm.workload_group.estimate_unmeasured_tasks`, sluice's own, on by
//!   default; [`sluice_core::resources::unmeasured`]): a task measures 0 until a refresh
//!   samples it, so without this a burst that arrives while the group is under its share is
//!   admitted whole (trinodb/trino#25093). A refresh that measures a task gives its
//!   reservation back, after recording the usage that now includes it.
//! - A would-be rejection (`monitor_only`, or a `monitor` group) is logged as a dry-run
//!   decision line ([`crate::logging::decisions`]) and counted in `total_would_reject` (issue
//!   #16's dry run) once per request (`admission/share.rs` R2), never in
//!   `total_would_throttle`, which is the
//!   throttle's figure. Would-be cancellations are [`dry_run`]'s.
//!
//! - A cancellation counts when the pass sets the task's flag, as OpenSearch counts it when it
//!   cancels (facts §6.3), not when the task ends: a task whose work has passed its last
//!   cancellation check (its result is being written out) still answers 200, so
//!   `total_cancellations` can exceed the cancellation errors clients saw (an outside trial on
//!   a loaded 2-core machine: 45 counted, 37 seen). Counting only the cancellations that took
//!   effect would move the count to the task's end, with the resource on the task; kept as
//!   OpenSearch's figure instead.
//!
//! # Invariants
//! - Passes are serialized (one lock over the pass state, held for the whole pass), so duress
//!   streaks advance once per pass and a task is never cancelled twice by two passes at once.
//! - A cancellation is counted only when this pass set the task's flag.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub mod dry_run;
pub mod node;

use crate::logging::{Decision, DecisionKind, Tier};

use crate::settings::keys;
use crate::state::AppState;
use crate::tasks::Task;
use crate::workload::View;
pub use node::{Enforcement, enforcement_interval, usage_refresh_interval};
use sluice_core::resources::{
    DEFAULT_WORKLOAD_GROUP_ID, GroupDef, NodeObservation, PassInputs, PassOutcome, ResourceType,
    ResourceUsage, TaskSnapshot, TaskState, run_pass, run_refresh,
};

/// Reads the running tasks of workload groups as the core sees them, and the definitions of
/// their groups that are not in `view` (deleted since the task was tagged).
fn snapshot_tasks(
    tasks: &[Arc<Task>],
    view: &View,
    enforcement: &Enforcement,
) -> (Vec<TaskSnapshot>, Vec<GroupDef>) {
    let mut snapshots: Vec<TaskSnapshot> = Vec::with_capacity(tasks.len());
    let mut deleted: BTreeMap<&str, GroupDef> = BTreeMap::new();
    for task in tasks {
        let Some(entry) = task.group() else {
            continue;
        };
        if let Some(g) = &entry.group
            && !view.groups.contains_key(&*entry.id)
        {
            deleted.entry(&entry.id).or_insert_with(|| GroupDef::of(g));
        }
        snapshots.push(TaskSnapshot {
            task_id: task.seq,
            group_id: entry.id.to_string(),
            cpu_nanos: task.usage.cpu_nanos(),
            memory_bytes: task.usage.memory_bytes(),
            // From when the task started executing, not when it was registered: time queued
            // for a search thread is not time the task could use CPU, and counting it would
            // dilute the share of a group whose requests queue (BENCHMARKS.md, noisy neighbour).
            start_nanos: enforcement
                .nanos_since_epoch(task.usage.executing_since().unwrap_or(task.started)),
            state: if task.is_cancelled() {
                TaskState::Cancelled
            } else {
                TaskState::Cancellable
            },
        });
    }
    (snapshots, deleted.into_values().collect())
}

/// Runs one enforcement pass on the node now and carries it out; returns what it decided.
///
/// Blocking (it takes the pass lock and reads process figures): call it from the blocking
/// pool, as [`run_loop`] does, or from a test.
pub fn run_once(st: &AppState) -> PassOutcome {
    let enforcement = &st.enforcement;
    let settings = st.cluster_settings.snapshot();
    let mode = settings.wlm_mode();
    let mut inner = enforcement.inner.lock();
    // Sampled even when disabled, so the first pass after re-enabling measures one interval.
    let node_cpu = inner.cpu.sample(enforcement.capacity.cores);
    if !mode.runs_enforcement_loop() {
        return PassOutcome::default();
    }
    let budget = enforcement.capacity.memory_budget_bytes;
    let node_memory = match crate::node_usage::memory_in_use_bytes() {
        Some(used) if budget > 0 => used as f64 / budget as f64,
        _ => 0.0,
    };
    // Tasks before the view: a task's group is then either in the view or really deleted.
    let tasks = st.tasks.list();
    if let Some(up) = &st.upstream {
        // A gateway's forwarded searches are measured by their time in flight.
        up.record_in_flight(&tasks);
    }
    let view = st.workload.view();
    charge_quotas(&tasks, mode);
    let (snapshots, deleted) = snapshot_tasks(&tasks, &view, enforcement);
    let inputs = PassInputs {
        mode,
        thresholds: settings.wlm_thresholds(),
        duress_streak: u32::try_from(settings.integer(keys::WLM_DURESS_STREAK)).unwrap_or(u32::MAX),
        node: NodeObservation {
            cpu: node_cpu,
            memory: node_memory,
        },
        capacity: enforcement.capacity,
        now_nanos: enforcement.nanos_since_epoch(Instant::now()),
        tasks: snapshots,
        active: active_groups(&view, mode),
        deleted,
    };
    let outcome = run_pass(&mut inner.state, &inputs);
    let duress = inner.state.duress();
    *enforcement.last_reading.lock() = node::NodeReading {
        cpu: node_cpu,
        memory: node_memory,
        cpu_in_duress: duress.cpu.is_in_duress(inputs.duress_streak),
        memory_in_duress: duress.memory.is_in_duress(inputs.duress_streak),
    };
    enforcement
        .in_duress
        .store(outcome.in_duress, Ordering::Relaxed);
    carry_out(st, &view, &tasks, &inputs, &outcome);
    dry_run::count_would_cancel(st, &mut inner.would_cancel_seen, &tasks, &inputs, &outcome);
    outcome
}

/// The definitions of the current groups of `view` (DEFAULT excluded).
///
/// A paced group (a queued `enforced` group with a cpu limit, see `GroupEntry::paced_cpu_limit`)
/// is judged as `soft`: admission already holds it to its share on average, so its tasks are
/// cancelled only when the node is in duress — waiting, not cancelling, is what its queue asks
/// for.
fn active_groups(view: &View, mode: sluice_core::WlmMode) -> Vec<GroupDef> {
    view.groups
        .values()
        .filter_map(|e| {
            let g = e.group.as_ref()?;
            let mut def = GroupDef::of(g);
            if e.paced_cpu_limit(mode).is_some() {
                def.resiliency_mode = sluice_core::ResiliencyMode::Soft;
            }
            Some(def)
        })
        .collect()
}

/// Charges each running task's CPU since the last charge to its group's CPU quota (paced
/// groups only; the rest of a task's CPU is charged when it ends).
fn charge_quotas(tasks: &[Arc<Task>], mode: sluice_core::WlmMode) {
    for task in tasks {
        if let Some(entry) = task.group() {
            entry.charge_cpu(&task.usage, mode);
        }
    }
}

/// Refreshes every group's `current_usage` from the running tasks now, without observing the
/// node or cancelling anything: what the admission check reads between two passes. Returns
/// the usage it recorded (empty in mode `disabled`).
pub fn refresh_once(st: &AppState) -> BTreeMap<String, ResourceUsage> {
    let enforcement = &st.enforcement;
    let mode = st.cluster_settings.snapshot().wlm_mode();
    if !mode.runs_enforcement_loop() {
        return BTreeMap::new();
    }
    let tasks = st.tasks.list();
    if let Some(up) = &st.upstream {
        // A gateway's forwarded searches are measured by their time in flight.
        up.record_in_flight(&tasks);
    }
    let view = st.workload.view();
    charge_quotas(&tasks, mode);
    let (snapshots, _) = snapshot_tasks(&tasks, &view, enforcement);
    let active = active_groups(&view, mode);
    let usage = run_refresh(
        mode,
        &snapshots,
        enforcement.nanos_since_epoch(Instant::now()),
        enforcement.capacity,
        &active,
    );
    record_usage(st, &view, &usage);
    release_measured(&tasks, &snapshots);
    usage
}

/// Gives back the reservations of the tasks that `snapshots` measured (a sample of CPU or
/// memory): their usage is now part of the recorded `current_usage`, so admission no longer
/// adds them at the estimate. Called after the usage is recorded, so a task is never counted
/// by neither.
fn release_measured(tasks: &[Arc<Task>], snapshots: &[TaskSnapshot]) {
    let measured: HashSet<u64> = snapshots
        .iter()
        .filter(|s| s.cpu_nanos > 0 || s.memory_bytes > 0)
        .map(|s| s.task_id)
        .collect();
    for task in tasks {
        if measured.contains(&task.seq)
            && let Some(r) = task.reservation.get()
        {
            r.release();
        }
    }
}

/// Records `usage` as the groups' `current_usage`.
fn record_usage(st: &AppState, view: &View, usage: &BTreeMap<String, ResourceUsage>) {
    for (id, usage) in usage {
        let entry = if id == DEFAULT_WORKLOAD_GROUP_ID {
            Some(st.workload.default_entry())
        } else {
            view.groups.get(id)
        };
        if let Some(entry) = entry {
            for r in ResourceType::ALL {
                entry.stats.resource(r).set_current_usage(usage.get(r));
            }
        }
    }
    st.enforcement.usage_recorded.notify_waiters();
}

/// Records the pass's usage in the groups' stats, and cancels (or logs) the selected tasks.
fn carry_out(
    st: &AppState,
    view: &View,
    tasks: &[Arc<Task>],
    inputs: &PassInputs,
    outcome: &PassOutcome,
) {
    if outcome.duress_changed {
        if outcome.in_duress {
            tracing::warn!(
                node_cpu = inputs.node.cpu,
                node_memory = inputs.node.memory,
                "node in duress: soft groups and deleted groups' tasks over their limits are now \
                 policed"
            );
        } else {
            tracing::info!(
                node_cpu = inputs.node.cpu,
                node_memory = inputs.node.memory,
                "node no longer in duress"
            );
        }
    }
    record_usage(st, view, &outcome.usage);
    release_measured(tasks, &inputs.tasks);
    if outcome.cancellations.is_empty() {
        return;
    }
    let by_seq: HashMap<u64, &Arc<Task>> = tasks.iter().map(|t| (t.seq, t)).collect();
    let node = st.tasks.node_id();
    for c in &outcome.cancellations {
        let Some(task) = by_seq.get(&c.task_id) else {
            continue;
        };
        if !outcome.acts {
            log_cancel(
                st,
                task,
                false,
                &format_args!(
                    "Task {node}:{} is eligible for cancellation for reason {}",
                    c.task_id, c.reason
                ),
            );
            continue;
        }
        // Counted only when this pass sets the flag; a task that ended meanwhile, or that
        // someone else cancelled, is not.
        if task.is_cancelled() {
            continue;
        }
        let hit = st.tasks.cancel_seq(c.task_id, &c.reason);
        if !hit.iter().any(|t| t.seq == c.task_id) {
            continue;
        }
        if let Some(entry) = task.group() {
            entry.stats.total_cancellations.inc();
            entry.stats.resource(c.resource).cancellations.inc();
        }
        log_cancel(
            st,
            task,
            true,
            &format_args!(
                "cancelled task {node}:{} for reason {}",
                c.task_id, c.reason
            ),
        );
    }
}

/// Writes a cancellation's decision line (carried out, or the dry run's), in the task's group.
pub(crate) fn log_cancel(
    st: &AppState,
    task: &Task,
    enforced: bool,
    reason: &dyn std::fmt::Display,
) {
    let Some(entry) = task.group() else {
        return;
    };
    st.decisions.log(Decision {
        kind: DecisionKind::Cancel,
        enforced,
        group_id: &entry.id,
        group_name: entry.name(),
        bucket_kind: None,
        tier: Tier::Enforcement,
        reason,
    });
}

/// Runs [`run_once`] every `wlm.workload_group.enforcement_interval`, and [`refresh_once`] every
/// `wlm.workload_group.usage_refresh_interval` in between (both re-read before each wait, so a
/// change applies from the next wait on), until `stop` is cancelled: it then returns once a
/// pass already on the blocking pool has ended, so the node's state is let go when it returns.
///
/// # Cancel safety
/// Dropping the future stops the loop too, but a pass already on the blocking pool then runs
/// to its end with the node's state (and its engine's index locks) after the loop is gone.
pub async fn run_loop(st: Arc<AppState>, stop: tokio_util::sync::CancellationToken) {
    let mut last_pass = tokio::time::Instant::now();
    loop {
        let settings = st.cluster_settings.snapshot();
        let next_pass = last_pass + enforcement_interval(&settings);
        let wake = (tokio::time::Instant::now() + usage_refresh_interval(&settings)).min(next_pass);
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = stop.cancelled() => return,
        }
        let st = st.clone();
        let done = if tokio::time::Instant::now() >= next_pass {
            last_pass = tokio::time::Instant::now();
            tokio::task::spawn_blocking(move || {
                run_once(&st);
            })
            .await
        } else {
            tokio::task::spawn_blocking(move || {
                refresh_once(&st);
            })
            .await
        };
        if let Err(e) = done {
            tracing::error!("enforcement pass failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice_core::resources::NodeCapacity;

    use super::*;
    use crate::settings::SettingsSnapshot;

    const CAP: NodeCapacity = NodeCapacity {
        cores: 2,
        memory_budget_bytes: 1000,
    };

    #[test]
    fn test_usage_refreshes_ten_times_per_default_enforcement_interval() {
        let s = SettingsSnapshot::default();
        assert_eq!(usage_refresh_interval(&s), Duration::from_millis(100));
        assert_eq!(enforcement_interval(&s), Duration::from_secs(1));
    }

    #[test]
    fn test_a_paced_group_is_judged_as_soft_by_the_pass() {
        use crate::workload::Workload;
        use sluice_core::{ResiliencyMode, ResourceLimits, WlmMode, WorkloadGroup};
        let group = |id: &str, size: Option<u32>| {
            let mut g = WorkloadGroup {
                id: id.into(),
                name: id.into(),
                resiliency_mode: ResiliencyMode::Enforced,
                resource_limits: ResourceLimits {
                    cpu: Some(0.3),
                    memory: None,
                },
                settings: Default::default(),
                throttling: Default::default(),
                queue: Default::default(),
                updated_at: 1,
            };
            g.throttling.attribute = Some(sluice_core::ThrottleAttribute::Group);
            g.throttling.node_limit = Some(1);
            g.queue.size_per_bucket = size;
            g
        };
        let workload = Workload::new(false);
        workload.install(
            vec![group("paced", Some(5)), group("plain", None)],
            Vec::new(),
        );
        let mode_of = |defs: &[GroupDef], id: &str| {
            defs.iter()
                .find(|d| d.id == id)
                .expect("group")
                .resiliency_mode
        };
        let enabled = active_groups(&workload.view(), WlmMode::Enabled);
        assert_eq!(mode_of(&enabled, "paced"), ResiliencyMode::Soft);
        assert_eq!(mode_of(&enabled, "plain"), ResiliencyMode::Enforced);
        // Only `enabled` paces.
        let monitor = active_groups(&workload.view(), WlmMode::MonitorOnly);
        assert_eq!(mode_of(&monitor, "paced"), ResiliencyMode::Enforced);
    }

    #[test]
    fn test_snapshot_reads_groups_states_and_deleted_definitions() {
        use crate::tasks::{NewTask, TaskManager, actions};
        use crate::workload::{GroupEntry, GroupStats, Workload, test_group as group};
        let workload = Workload::new(false);
        workload.install(vec![group("live")], Vec::new());
        let live = workload.entry("live").expect("live");
        let gone = Arc::new(GroupEntry {
            id: Arc::from("gone"),
            group: Some(group("gone")),
            stats: Arc::new(GroupStats::default()),
            inactive_throttle: None,
            queue: None,
            search: Default::default(),
        });
        let manager = Arc::new(TaskManager::new("n"));
        let register = |g: Option<Arc<GroupEntry>>| {
            let guard = manager.register_task(NewTask {
                action: actions::SEARCH,
                description: Default::default(),
                parent: None,
                start_time_millis: 0,
                principal: None,
                remote_addr: None,
                admitting: false,
                opaque_id: None,
            });
            if let Some(g) = g {
                guard.task().set_group(g);
            }
            guard
        };
        let enforcement = Enforcement::with_capacity(CAP);
        let a = register(Some(live));
        let b = register(Some(gone.clone()));
        let _c = register(Some(gone));
        let _none = register(None);
        let _d = register(Some(workload.default_entry().clone()));
        a.task().usage.record(5, 7);
        manager.cancel_seq(b.task().seq, "test");
        let (snaps, deleted) = snapshot_tasks(&manager.list(), &workload.view(), &enforcement);
        let groups: Vec<&str> = snaps.iter().map(|s| s.group_id.as_str()).collect();
        assert_eq!(groups, ["live", "gone", "gone", DEFAULT_WORKLOAD_GROUP_ID]);
        assert_eq!((snaps[0].cpu_nanos, snaps[0].memory_bytes), (5, 7));
        assert_eq!(snaps[0].state, TaskState::Cancellable);
        assert_eq!(snaps[1].state, TaskState::Cancelled);
        assert_eq!(deleted.len(), 1);
        assert_eq!(deleted[0].id, "gone");
        assert_eq!(deleted[0].resource_limits.cpu, Some(0.25));
    }
}
