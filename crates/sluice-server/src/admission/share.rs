//! The resource-share check of admission (DESIGN D17, facts §6.2): a request of a group whose
//! last measured usage — plus, with `wlm.workload_group.estimate_unmeasured_tasks`, its tasks
//! admitted and not measured yet at the group's per-task estimate
//! ([`sluice_core::resources::unmeasured`]) — is over its share is turned away with a 429. The
//! check runs at the door ([`admit_resources`]) and again when an execution thread takes the
//! task ([`recheck_resources`]); [`observe_finished`] teaches a group's per-task estimate what
//! a finished task used. The decisions are [`sluice_core::resources`]'.
//!
//! # Invariants
//! - R1 — a deleted group rejects nothing: a breach is judged against the group as it is when
//!   the check runs, not as it was when the request was tagged, and a group no longer in the
//!   view admits (facts §6.2 step 3: an unknown id is a no-op). A request its group's deletion
//!   released from a queue therefore runs (it once got the deleted group's 429 from the share
//!   check, counted nowhere). Tested by
//!   `test_deleting_a_group_over_its_share_runs_every_parked_request`.
//! - R2 — a would-be rejection counts once per request ([`Task::dry_refused`]), however
//!   many checks find it (it once counted at the door and again when a thread took the task:
//!   up to twice per request), and not at all for a request whose throttle counted a would-be
//!   429 (`enabled` would have refused that one before its search started). Tested by
//!   `test_would_reject_counts_each_request_once_while_over_the_share`.
//! - R3 — the dry run of a group `enabled` would queue ([`GroupEntry::would_queue`]) counts
//!   no would-be rejection at the door: `enabled` checks such a group's share only once a
//!   request holds its slot, and then makes it wait (below: a queued group waits for its
//!   share, a paced one for its CPU quota), counted as queued. The door's breach marks the
//!   task ([`Task::dry_share_wait`]); after its throttle it counts as one would-queue, unless
//!   the throttle counted it already (a would-be place in the queue, where `enabled` would
//!   have waited for the share too, or a would-be 429, which never reaches the share)
//!   ([`settle_dry_wait`]), and nothing of it counts later. The check when a thread takes the
//!   task leaves out the cpu of a group `enabled` would pace, as `enabled` does. (The dry run
//!   once counted such a group's over-share requests as would-reject, where `enabled` paced
//!   them without a 429.) Tested by
//!   `test_the_dry_run_of_a_paced_group_counts_its_waits_not_rejections`.
//!
//! A queued `enforced` group with a cpu limit is *paced* ([`GroupEntry::paced_cpu_limit`]):
//! its requests wait in [`wait_for_share`] for its CPU quota
//! ([`sluice_core::resources::quota`]: earned at its share, spent by its tasks), and its cpu
//! usage is left out of the comparisons, so it runs at its share on average without 429s and
//! without cancellations (which the enforcement pass keeps for duress).

use std::time::Instant;

use sluice_core::resources::{
    Admission, CpuQuota, GroupPolicy, Reservation, ResourceUsage, TaskSnapshot, TaskState,
    UnmeasuredTasks, WlmMode, quota,
};
use sluice_engine::{EngineError, ErrorCode};

use crate::error::ApiError;
use crate::logging::{Decision, DecisionKind, Tier};
use crate::settings::SettingsSnapshot;
use crate::state::AppState;
use crate::tasks::Task;
use crate::workload::GroupEntry;

/// The admission resource check at the door (facts §6.2): rejects a request of a group whose
/// usage is over its limit × the node rejection threshold, in mode `enabled` (soft groups only
/// while the node is in duress; DEFAULT and monitor groups never), with 429
/// `rejected_execution_exception`, OpenSearch's message and `Retry-After`, counting
/// `total_rejections` and the resource's `rejections`.
///
/// The usage compared is the last recorded one plus, with
/// `wlm.workload_group.estimate_unmeasured_tasks` (the default), every task of the group
/// admitted and not measured yet at the group's per-task estimate
/// ([`sluice_core::resources::unmeasured`]); an admitted request then holds a reservation,
/// which its task keeps until a refresh measures it or it ends.
pub fn admit_resources(
    st: &AppState,
    entry: &GroupEntry,
    task: &Task,
) -> Result<Option<Reservation>, ApiError> {
    check_resources(st, entry, Check::Door(task))
}

/// Which check of a request's share runs: what a (would-be) breach of it counts.
#[derive(Debug, Clone, Copy)]
enum Check<'a> {
    /// At the door, of this task: a breach counts (R2), but in the dry run one of a group
    /// `enabled` would queue is a would-be wait (R3).
    Door(&'a Task),
    /// When a thread takes this task: a breach counts (R2).
    Start(&'a Task),
    /// A request waiting for its group's share: it is not rejected, it waits
    /// ([`wait_for_share`]), and nothing counts.
    Wait,
}

/// [`admit_resources`], counting a (would-be) rejection as `check` says.
fn check_resources(
    st: &AppState,
    entry: &GroupEntry,
    check: Check<'_>,
) -> Result<Option<Reservation>, ApiError> {
    let Some(group) = &entry.group else {
        return Ok(None);
    };
    let settings = st.cluster_settings.snapshot();
    let mode = settings.wlm_mode();
    if mode == WlmMode::Disabled {
        return Ok(None);
    }
    // A paced group's cpu share is kept by its quota (`wait_for_share`), not by its last usage.
    let paced = entry.paced_cpu_limit(mode).is_some();
    let last = unpaced(last_usage(entry), paced);
    if !settings.estimate_unmeasured_tasks() {
        return decide(st, &settings, entry, group, last, check).map(|()| None);
    }
    UnmeasuredTasks::try_admit(&entry.stats.unmeasured, last, |projected| {
        decide(
            st,
            &settings,
            entry,
            group,
            unpaced(projected, paced),
            check,
        )
    })
    .map(Some)
}

/// The resource-share check of a request of a queued group that holds its throttle slot: it
/// runs once its group's share allows, re-checking after every usage refresh (every
/// `usage_refresh_interval`), instead of being rejected — a queued group's requests wait
/// while the group is over its share, as Trino's resource groups keep queries queued while a
/// group is over its soft limits. `waiting` is called once, when the first check fails (the
/// request counts as queued from then on).
///
/// Each check is against the group as it is then, and every change of the groups or the mode
/// wakes the waiters ([`crate::workload::Workload::changed`]): a group relaxed (made `soft`,
/// its limit raised) or the mode leaving `enabled` lets its waiters through at once, as it
/// releases the requests parked at its throttle, and a deleted group's waiters run unchecked,
/// as its parked requests do (usage is not refreshed outside `enabled`, so waiting for a
/// refresh alone left them waiting for ever). On a stopping node they are refused, woken by the
/// release of every queue (`queue` S1).
///
/// # Cancel safety
/// Dropping the future stops waiting; a reservation taken is given back by its own `Drop`.
pub async fn wait_for_share(
    st: &AppState,
    entry: &GroupEntry,
    mut waiting: impl FnMut(),
    stop: impl std::future::Future<Output = ApiError>,
) -> Result<Option<Reservation>, ApiError> {
    tokio::pin!(stop);
    let mut first = true;
    loop {
        let refreshed = st.enforcement.usage_recorded.notified();
        let changed = st.workload.changed.notified();
        tokio::pin!(refreshed, changed);
        // Registered before the check: a refresh or a change between the check and the wait
        // still wakes.
        refreshed.as_mut().enable();
        changed.as_mut().enable();
        // A stopping node runs nothing that waits (`queue` S1); a deleted group's waiters run
        // as its parked requests do.
        if st.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return Err(super::queue::node_closed(st, entry));
        }
        let Some(current) = st.workload.entry(&entry.id) else {
            return Ok(None);
        };
        if quota_allows(st, &current)
            && let Ok(r) = check_resources(st, &current, Check::Wait)
        {
            return Ok(r);
        }
        if first {
            waiting();
            first = false;
        }
        tokio::select! {
            () = &mut refreshed => {}
            () = &mut changed => {}
            e = &mut stop => return Err(e),
        }
    }
}

/// The same check when a search thread takes `task`, admitted at the door (usage is refreshed
/// while requests wait for a thread): the task's own reservation is not counted against it,
/// nor a would-be rejection the door already counted (R2).
pub fn recheck_resources(st: &AppState, entry: &GroupEntry, task: &Task) -> Result<(), ApiError> {
    let Some(group) = &entry.group else {
        return Ok(());
    };
    let settings = st.cluster_settings.snapshot();
    let last = last_usage(entry);
    let usage = match task.reservation.get() {
        Some(own) if settings.estimate_unmeasured_tasks() => {
            entry.stats.unmeasured.projected_for(last, own)
        }
        _ => last,
    };
    // R3: the dry run leaves out the cpu of a group `enabled` would pace, as `enabled` does.
    let mode = settings.wlm_mode();
    let paced = entry.paced_cpu_limit(mode).is_some()
        || (monitored(mode, group) && entry.would_pace_cpu_limit().is_some());
    decide(
        st,
        &settings,
        entry,
        group,
        unpaced(usage, paced),
        Check::Start(task),
    )
}

/// Whether a group's breaches are only monitored in `mode` (the dry run): `monitor_only`, or
/// a `monitor` group.
fn monitored(mode: WlmMode, group: &sluice_core::WorkloadGroup) -> bool {
    mode == WlmMode::MonitorOnly || group.resiliency_mode == sluice_core::ResiliencyMode::Monitor
}

/// After its throttle (`granted`), counts the share wait the door found for a request of a
/// group `enabled` would queue (R3): one would-queue, unless the throttle counted it already
/// (a would-be place in the queue, `granted.dry_place`, or a would-be 429,
/// `granted.would_throttle`); either way nothing of it counts later (R2).
pub fn settle_dry_wait(
    st: &AppState,
    entry: &GroupEntry,
    task: &Task,
    granted: &super::throttle::Granted,
) {
    if !task
        .dry_share_wait
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return;
    }
    if !granted.would_throttle && granted.dry_place.is_none() {
        entry.stats.total_would_queue.inc();
        log_decision(
            st,
            entry,
            false,
            "the group is over its resource share; enabled would have queued the request until its share allows (its group queues)",
        );
    }
    task.dry_refused
        .store(true, std::sync::atomic::Ordering::Release);
}

/// `usage` without its cpu part when the group is paced (its cpu share is its quota's).
fn unpaced(usage: ResourceUsage, paced: bool) -> ResourceUsage {
    if paced {
        ResourceUsage { cpu: 0.0, ..usage }
    } else {
        usage
    }
}

/// Whether a paced group's CPU quota lets it start work now (refilled to now first; created
/// with a full burst at the group's first paced admission). Always true for a group that is
/// not paced.
fn quota_allows(st: &AppState, entry: &GroupEntry) -> bool {
    let Some(limit) = entry.paced_cpu_limit(st.cluster_settings.wlm_mode()) else {
        return true;
    };
    let enforcement = &st.enforcement;
    let rate = quota::rate_of(limit, enforcement.capacity().cores);
    let now = enforcement.nanos_since_epoch(Instant::now());
    let mut q = entry.stats.quota.lock();
    let q = q.get_or_insert_with(|| CpuQuota::new(now, rate));
    q.refill(now, rate);
    q.allows()
}

/// The group's last recorded usage.
fn last_usage(entry: &GroupEntry) -> ResourceUsage {
    ResourceUsage {
        cpu: entry.stats.cpu.current_usage(),
        memory: entry.stats.memory.current_usage(),
    }
}

/// Decides on `usage` and carries the decision out: a debug line for a would-be rejection, the
/// counters (as `check` says: [`Check`]) and the 429 for a rejection.
///
/// `group` is the group as the request was tagged with it; a breach is judged against the
/// group as it is now (R1), looked up only then, so an admitted request costs no lookup.
fn decide(
    st: &AppState,
    settings: &SettingsSnapshot,
    entry: &GroupEntry,
    group: &sluice_core::WorkloadGroup,
    usage: ResourceUsage,
    check: Check<'_>,
) -> Result<(), ApiError> {
    // No usage breaches no threshold (thresholds are >= 0 and the comparison is strict).
    if !(usage.cpu > 0.0 || usage.memory > 0.0) {
        return Ok(());
    }
    let decision = judge(st, settings, group, usage);
    if matches!(decision, Admission::Admit) {
        return Ok(());
    }
    // R1: the request may have waited (in a queue, for a thread) since it was tagged. A group
    // deleted meanwhile rejects nothing; one changed meanwhile is judged as it is now.
    let Some(current) = st.workload.entry(&entry.id) else {
        return Ok(());
    };
    let decision = match current.group.as_ref() {
        Some(now) if now != group => judge(st, settings, now, usage),
        _ => decision,
    };
    match decision {
        Admission::Admit => Ok(()),
        Admission::WouldReject(r) => {
            match check {
                // R3: `enabled` would have made it wait for the share after its throttle.
                Check::Door(task) if current.would_queue() => task
                    .dry_share_wait
                    .store(true, std::sync::atomic::Ordering::Release),
                // R2: once per request, whichever check found it first.
                Check::Door(task) | Check::Start(task)
                    if !task
                        .dry_refused
                        .swap(true, std::sync::atomic::Ordering::AcqRel) =>
                {
                    entry.stats.total_would_reject.inc();
                    log_decision(st, entry, false, &r.message());
                }
                Check::Door(_) | Check::Start(_) | Check::Wait => {}
            }
            tracing::debug!(
                group = %group.name,
                "would reject (workload management only monitors this request): {}",
                r.message()
            );
            Ok(())
        }
        Admission::Reject(r) => {
            if !matches!(check, Check::Wait) {
                entry.stats.total_rejections.inc();
                entry.stats.resource(r.resource).rejections.inc();
                log_decision(st, entry, true, &r.message());
            }
            Err(ApiError::Rejected {
                error: EngineError::new(ErrorCode::RejectedExecution, r.message()),
                retry_after_secs: crate::admission::RETRY_AFTER_SECS,
            })
        }
    }
}

/// [`sluice_core::resources::check_rejection`] of `group` at `usage`, in the node's mode,
/// thresholds and duress.
fn judge<'g>(
    st: &AppState,
    settings: &SettingsSnapshot,
    group: &'g sluice_core::WorkloadGroup,
    usage: ResourceUsage,
) -> Admission<'g> {
    sluice_core::resources::check_rejection(
        settings.wlm_mode(),
        &GroupPolicy::of(group),
        usage,
        &settings.wlm_thresholds(),
        st.enforcement.is_node_in_duress(),
    )
}

/// Writes a share rejection's decision line (the share is the group's: no bucket).
fn log_decision(st: &AppState, entry: &GroupEntry, enforced: bool, reason: &str) {
    st.decisions.log(Decision {
        kind: DecisionKind::Reject,
        enforced,
        group_id: &entry.id,
        group_name: entry.name(),
        bucket_kind: None,
        tier: Tier::Share,
        reason: &reason.trim_end(),
    });
}

/// Learns from a task of `entry` that ran on a search thread from `executing_since` and had
/// used `cpu_nanos` and allocated `memory_bytes` at `measured_at`: its share of the node (the
/// figures over the time they took) becomes part of the group's per-task estimate.
pub fn observe_finished(
    st: &AppState,
    entry: &GroupEntry,
    executing_since: Instant,
    measured_at: Instant,
    cpu_nanos: u64,
    memory_bytes: u64,
) {
    if entry.is_default() {
        return;
    }
    let enforcement = &st.enforcement;
    let snapshot = TaskSnapshot {
        task_id: 0,
        group_id: String::new(),
        cpu_nanos,
        memory_bytes,
        start_nanos: enforcement.nanos_since_epoch(executing_since),
        state: TaskState::Cancellable,
    };
    let share = sluice_core::resources::TaskUsage::of(
        &snapshot,
        enforcement.nanos_since_epoch(measured_at),
        enforcement.capacity(),
    );
    entry.stats.unmeasured.observe_finished(share.usage);
}
