//! Cancellation selection: which running tasks the enforcement loop cancels (facts §6.3).
//!
//! # Which groups
//! In this order, each list in group id order (facts §6.3 `cancelTasks`):
//! 1. active `enforced` groups — always;
//! 2. only when the node is in duress: deleted groups that still have running tasks, judged
//!    against the limits they had when deleted, whatever their former mode (OpenSearch does
//!    not filter deleted groups by mode: once deleted, a group's promise is gone);
//! 3. only when the node is in duress: active `soft` groups.
//!
//! Active `monitor` groups and DEFAULT_WORKLOAD_GROUP are never selected; neither are tasks
//! whose group is neither active nor deleted (unknown ids fail open, DESIGN D5). OpenSearch
//! re-checks duress between steps 2 and 3 by sampling again; here duress is one input per pass
//! (see [`super::duress`]).
//!
//! # Which tasks, per group
//! For cpu then memory, each resource the group limits:
//! - `threshold = limit × node cancellation threshold`;
//! - `excess = group usage − threshold − shed`, where `shed` is the usage of this resource by
//!   the group's tasks already selected in this pass **and** its tasks already cancelled
//!   (still running, but on their way out; OpenSearch re-selects those and counts them, we
//!   count them without selecting them again);
//! - if `excess > EXCESS_TOLERANCE` (1e-9): walk the group's cancellable tasks not yet selected
//!   by this resource's usage, highest first, ties by lower task id first, and select them
//!   until the selected usage covers the excess (`selected + 1e-9 >= excess`).
//!
//! De-duplication is the correct one (facts §6.3 lists OpenSearch's inverted filter as a bug):
//! a task is selected at most once per pass, for the first resource that picked it, and a task
//! picked for cpu already counts towards the memory excess.
//!
//! # What is guaranteed
//! - Coverage: after the pass, for every policed group and limited resource, either the
//!   remaining excess is `<= 1e-9` or every cancellable task of the group is selected (an
//!   excess no set of tasks covers takes them all, as OpenSearch does).
//! - Minimal per step: within one resource's step, dropping any one task selected in that step
//!   would leave that step's excess uncovered (the greedy stops at the first covering prefix,
//!   and the last task added is the smallest). Across steps a cpu pick may turn out redundant
//!   once memory picks are added; no global minimum is sought.
//! - Exact excess: tasks whose usage sums exactly to the excess are enough. OpenSearch stops
//!   only when the sum exceeds the excess by more than 1e-9 and so takes one task too many.
//! - No task twice, no already-cancelled or non-cancellable task, nothing from a monitor,
//!   DEFAULT or unknown group.
//!
//! # Cluster mode
//! Selection does not depend on `wlm.workload_group.mode`: the caller runs it only when
//! [`WlmMode::runs_enforcement_loop`](super::WlmMode::runs_enforcement_loop), then cancels
//! and logs each selected task in `enabled` and only logs them (OpenSearch: `Task <id> is
//! eligible for cancellation for reason <reason>`) in `monitor_only` (facts §6.3, §6.6).

use std::collections::HashSet;

use super::{EXCESS_TOLERANCE, GroupPolicy, NodeThresholds, UsageViews, java_double};
use crate::group::{ResiliencyMode, ResourceType};
use crate::resources::{TaskState, TaskUsage};

/// Why a group was policed in this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancellationCause {
    /// An active `enforced` group over its limit (any node state).
    EnforcedOverLimit,
    /// A deleted group whose tasks still run, over its former limit, on a node in duress.
    DeletedGroupInDuress,
    /// An active `soft` group over its limit on a node in duress.
    SoftOverLimitInDuress,
}

/// One task selected for cancellation.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancellation {
    /// The node-local task id.
    pub task_id: u64,
    /// The group the task runs in.
    pub group_id: String,
    /// The resource whose excess selected the task.
    pub resource: ResourceType,
    /// OpenSearch's cancellation reason for that resource (see [`breach_reason`]).
    pub reason: String,
    /// Why the group was policed.
    pub cause: CancellationCause,
}

/// Returns OpenSearch's cancellation reason text (facts §6.3): `WorkloadGroup ID : <id>
/// breached the resource limit: (<usage> > <limit>) for resource type : <cpu|memory>`, with the
/// group's total usage and its configured (not normalised) limit.
pub fn breach_reason(group_id: &str, usage: f64, limit: f64, resource: ResourceType) -> String {
    format!(
        "WorkloadGroup ID : {group_id} breached the resource limit: ({} > {}) for resource type \
         : {}",
        java_double(usage),
        java_double(limit),
        resource.as_str()
    )
}

/// Selects the tasks to cancel in this enforcement pass; see the module docs for the rules.
///
/// `active` are the current groups, `deleted` the groups deleted while they had running tasks
/// (the caller keeps them until [`UsageViews::has_tasks`] is false). Group order in the slices
/// does not matter. The result lists tasks in the order they were selected.
pub fn select_cancellations(
    views: &UsageViews,
    active: &[GroupPolicy<'_>],
    deleted: &[GroupPolicy<'_>],
    thresholds: &NodeThresholds,
    node_in_duress: bool,
) -> Vec<Cancellation> {
    let by_mode = |mode: ResiliencyMode| {
        let mut groups: Vec<&GroupPolicy<'_>> = active
            .iter()
            .filter(|g| g.resiliency_mode == mode)
            .collect();
        groups.sort_by(|a, b| a.id.cmp(b.id));
        groups
    };
    let mut plan: Vec<(&GroupPolicy<'_>, CancellationCause)> = by_mode(ResiliencyMode::Enforced)
        .into_iter()
        .map(|g| (g, CancellationCause::EnforcedOverLimit))
        .collect();
    if node_in_duress {
        let active_ids: HashSet<&str> = active.iter().map(|g| g.id).collect();
        let mut gone: Vec<&GroupPolicy<'_>> = deleted
            .iter()
            .filter(|g| !active_ids.contains(g.id))
            .collect();
        gone.sort_by(|a, b| a.id.cmp(b.id));
        plan.extend(
            gone.into_iter()
                .map(|g| (g, CancellationCause::DeletedGroupInDuress)),
        );
        plan.extend(
            by_mode(ResiliencyMode::Soft)
                .into_iter()
                .map(|g| (g, CancellationCause::SoftOverLimitInDuress)),
        );
    }

    let mut out = Vec::new();
    let mut policed: HashSet<&str> = HashSet::new();
    for (group, cause) in plan {
        if group.is_default() || !policed.insert(group.id) {
            continue;
        }
        select_in_group(views, group, thresholds, cause, &mut out);
    }
    debug_check_selection(views, active, &out);
    out
}

fn select_in_group(
    views: &UsageViews,
    group: &GroupPolicy<'_>,
    thresholds: &NodeThresholds,
    cause: CancellationCause,
    out: &mut Vec<Cancellation>,
) {
    let tasks: Vec<&TaskUsage> = views.tasks_of(group.id).collect();
    if tasks.is_empty() {
        return;
    }
    let group_usage = views.group(group.id);
    let mut selected = vec![false; tasks.len()];
    for resource in ResourceType::ALL {
        let Some(limit) = group.resource_limits.get(resource) else {
            continue;
        };
        let use_of = |i: usize| tasks[i].usage.get(resource);
        let threshold = limit * thresholds.cancellation(resource);
        let shed: f64 = (0..tasks.len())
            .filter(|&i| selected[i] || tasks[i].state == TaskState::Cancelled)
            .map(use_of)
            .sum();
        let usage = group_usage.get(resource);
        let excess = usage - threshold - shed;
        // A NaN threshold or limit makes a NaN excess, which never selects.
        if excess.is_nan() || excess <= EXCESS_TOLERANCE {
            continue;
        }
        let reason = breach_reason(group.id, usage, limit, resource);
        let mut order: Vec<usize> = (0..tasks.len())
            .filter(|&i| !selected[i] && tasks[i].state == TaskState::Cancellable)
            .collect();
        order.sort_by(|&a, &b| {
            use_of(b)
                .total_cmp(&use_of(a))
                .then(tasks[a].task_id.cmp(&tasks[b].task_id))
        });
        let mut covered = 0.0;
        for i in order {
            if covered + EXCESS_TOLERANCE >= excess {
                break;
            }
            selected[i] = true;
            covered += use_of(i);
            out.push(Cancellation {
                task_id: tasks[i].task_id,
                group_id: group.id.to_owned(),
                resource,
                reason: reason.clone(),
                cause,
            });
        }
    }
}

/// Checks the selection invariants in debug builds: no task twice, only cancellable tasks,
/// nothing from DEFAULT or an active monitor group.
fn debug_check_selection(views: &UsageViews, active: &[GroupPolicy<'_>], out: &[Cancellation]) {
    if !cfg!(debug_assertions) {
        return;
    }
    let mut ids = HashSet::new();
    for c in out {
        debug_assert!(ids.insert(c.task_id), "task {} selected twice", c.task_id);
        let task = views.tasks().iter().find(|t| t.task_id == c.task_id);
        debug_assert!(task.is_some_and(|t| t.state == TaskState::Cancellable));
        debug_assert!(c.group_id != super::DEFAULT_WORKLOAD_GROUP_ID);
        debug_assert!(
            !active
                .iter()
                .any(|g| g.id == c.group_id && g.resiliency_mode == ResiliencyMode::Monitor)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::ResourceLimits;
    use crate::resources::{DEFAULT_WORKLOAD_GROUP_ID, ResourceUsage};

    /// Thresholds of 1.0 so that a group's cancellation line is its limit.
    const TH: NodeThresholds = NodeThresholds {
        cpu_rejection: 1.0,
        cpu_cancellation: 1.0,
        memory_rejection: 1.0,
        memory_cancellation: 1.0,
    };

    fn task(id: u64, group: &str, cpu: f64, memory: f64) -> TaskUsage {
        TaskUsage {
            task_id: id,
            group_id: group.into(),
            usage: ResourceUsage { cpu, memory },
            state: TaskState::Cancellable,
        }
    }

    fn with_state(mut t: TaskUsage, state: TaskState) -> TaskUsage {
        t.state = state;
        t
    }

    fn views(tasks: Vec<TaskUsage>) -> UsageViews {
        UsageViews::from_task_usages(tasks)
    }

    fn policy(
        id: &str,
        mode: ResiliencyMode,
        cpu: Option<f64>,
        memory: Option<f64>,
    ) -> GroupPolicy<'_> {
        GroupPolicy::new(id, mode, ResourceLimits { cpu, memory })
    }

    fn ids(out: &[Cancellation]) -> Vec<u64> {
        out.iter().map(|c| c.task_id).collect()
    }

    const E: ResiliencyMode = ResiliencyMode::Enforced;
    const S: ResiliencyMode = ResiliencyMode::Soft;
    const M: ResiliencyMode = ResiliencyMode::Monitor;

    #[test]
    fn test_highest_usage_task_selected_first() {
        // Usage 0.5, limit 0.25: excess 0.25; the 0.25 task alone covers it exactly.
        let v = views(vec![
            task(1, "g", 0.125, 0.0),
            task(2, "g", 0.25, 0.0),
            task(3, "g", 0.125, 0.0),
        ]);
        let out = select_cancellations(&v, &[policy("g", E, Some(0.25), None)], &[], &TH, false);
        assert_eq!(ids(&out), [2]);
        assert_eq!(out[0].resource, ResourceType::Cpu);
        assert_eq!(out[0].cause, CancellationCause::EnforcedOverLimit);
    }

    #[test]
    fn test_exact_excess_is_covered_by_exactly_the_needed_tasks() {
        // Excess 0.375 = 0.25 + 0.125: two tasks, not three (OpenSearch would take three).
        let v = views(vec![
            task(1, "g", 0.25, 0.0),
            task(2, "g", 0.125, 0.0),
            task(3, "g", 0.125, 0.0),
            task(4, "g", 0.0625, 0.0),
        ]);
        let out = select_cancellations(&v, &[policy("g", E, Some(0.1875), None)], &[], &TH, false);
        assert_eq!(ids(&out), [1, 2]);
    }

    #[test]
    fn test_ties_broken_by_lower_task_id() {
        let v = views(vec![
            task(9, "g", 0.25, 0.0),
            task(4, "g", 0.25, 0.0),
            task(7, "g", 0.25, 0.0),
        ]);
        let out = select_cancellations(&v, &[policy("g", E, Some(0.5), None)], &[], &TH, false);
        assert_eq!(ids(&out), [4]);
        let out = select_cancellations(&v, &[policy("g", E, Some(0.25), None)], &[], &TH, false);
        assert_eq!(ids(&out), [4, 7]);
    }

    #[test]
    fn test_uncoverable_excess_selects_every_task() {
        // Usage 0.75, limit 0.125: excess 0.625. Task 2 is not cancellable, so the other two
        // (0.25 together) cannot cover it: every cancellable task goes.
        let v = views(vec![
            task(1, "g", 0.125, 0.0),
            with_state(task(2, "g", 0.5, 0.0), TaskState::NotCancellable),
            task(3, "g", 0.125, 0.0),
        ]);
        let out = select_cancellations(&v, &[policy("g", E, Some(0.125), None)], &[], &TH, false);
        assert_eq!(ids(&out), [1, 3]);
    }

    #[test]
    fn test_under_or_at_limit_selects_nothing() {
        let v = views(vec![task(1, "g", 0.25, 0.25), task(2, "g", 0.25, 0.25)]);
        let at = [policy("g", E, Some(0.5), Some(0.5))];
        assert!(select_cancellations(&v, &at, &[], &TH, true).is_empty());
        // Within the 1e-9 tolerance is not a breach either.
        let near = [policy("g", E, Some(0.5 - 1e-10), None)];
        assert!(select_cancellations(&v, &near, &[], &TH, true).is_empty());
    }

    #[test]
    fn test_cancellation_threshold_scales_the_limit() {
        let v = views(vec![task(1, "g", 0.25, 0.0), task(2, "g", 0.25, 0.0)]);
        let th = NodeThresholds {
            cpu_cancellation: 0.5,
            ..TH
        };
        // Limit 1.0 × 0.5 = 0.5 line: at it, nothing; limit 0.75 × 0.5 = 0.375: one task.
        let g = |l| [policy("g", E, Some(l), None)];
        assert!(select_cancellations(&v, &g(1.0), &[], &th, false).is_empty());
        assert_eq!(select_cancellations(&v, &g(0.75), &[], &th, false).len(), 1);
    }

    #[test]
    fn test_already_cancelled_tasks_skipped_and_counted_as_shed() {
        // Usage 0.75, limit 0.25: excess 0.5. Task 1 (0.375) is already cancelled, so only
        // 0.125 remains to shed: one more task, the largest cancellable one.
        let v = views(vec![
            with_state(task(1, "g", 0.375, 0.0), TaskState::Cancelled),
            task(2, "g", 0.25, 0.0),
            task(3, "g", 0.125, 0.0),
        ]);
        let out = select_cancellations(&v, &[policy("g", E, Some(0.25), None)], &[], &TH, false);
        assert_eq!(ids(&out), [2]);
        // If the cancelled task alone covers the excess, nothing more is selected.
        let out = select_cancellations(&v, &[policy("g", E, Some(0.375), None)], &[], &TH, false);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn test_task_selected_for_cpu_is_not_selected_again_for_memory_and_counts_there() {
        // cpu excess 0.25 → task 1; memory excess 0.5, of which task 1 already sheds 0.25,
        // so one more task (task 3, the largest memory user left) is enough.
        let v = views(vec![
            task(1, "g", 0.25, 0.25),
            task(2, "g", 0.125, 0.125),
            task(3, "g", 0.0, 0.25),
            task(4, "g", 0.0, 0.125),
        ]);
        let g = [policy("g", E, Some(0.125), Some(0.25))];
        let out = select_cancellations(&v, &g, &[], &TH, false);
        assert_eq!(ids(&out), [1, 3]);
        assert_eq!(out[0].resource, ResourceType::Cpu);
        assert_eq!(out[1].resource, ResourceType::Memory);
        assert!(out[1].reason.ends_with("for resource type : memory"));
    }

    #[test]
    fn test_memory_excess_fully_shed_by_cpu_picks_adds_nothing() {
        let v = views(vec![task(1, "g", 0.5, 0.5), task(2, "g", 0.0, 0.125)]);
        let g = [policy("g", E, Some(0.25), Some(0.25))];
        let out = select_cancellations(&v, &g, &[], &TH, false);
        assert_eq!(ids(&out), [1]);
    }

    #[test]
    fn test_soft_groups_policed_only_in_duress() {
        let v = views(vec![task(1, "s", 0.5, 0.0)]);
        let g = [policy("s", S, Some(0.25), None)];
        assert!(select_cancellations(&v, &g, &[], &TH, false).is_empty());
        let out = select_cancellations(&v, &g, &[], &TH, true);
        assert_eq!(ids(&out), [1]);
        assert_eq!(out[0].cause, CancellationCause::SoftOverLimitInDuress);
    }

    #[test]
    fn test_monitor_default_and_unknown_groups_never_policed() {
        let v = views(vec![
            task(1, "m", 1.0, 1.0),
            task(2, DEFAULT_WORKLOAD_GROUP_ID, 1.0, 1.0),
            task(3, "unknown", 1.0, 1.0),
        ]);
        let mut default = GroupPolicy::default_group();
        default.resiliency_mode = E;
        default.resource_limits.cpu = Some(0.1);
        let g = [policy("m", M, Some(0.1), Some(0.1)), default];
        assert!(select_cancellations(&v, &g, &[], &TH, true).is_empty());
    }

    #[test]
    fn test_deleted_group_tasks_policed_only_in_duress() {
        let v = views(vec![task(1, "gone", 0.5, 0.0), task(2, "gone", 0.25, 0.0)]);
        // Former mode does not matter once deleted.
        let deleted = [policy("gone", M, Some(0.25), None)];
        assert!(select_cancellations(&v, &[], &deleted, &TH, false).is_empty());
        let out = select_cancellations(&v, &[], &deleted, &TH, true);
        assert_eq!(ids(&out), [1]);
        assert_eq!(out[0].cause, CancellationCause::DeletedGroupInDuress);
    }

    #[test]
    fn test_group_both_active_and_deleted_is_judged_as_active() {
        let v = views(vec![task(1, "g", 0.5, 0.0)]);
        let active = [policy("g", M, Some(0.25), None)];
        let deleted = [policy("g", E, Some(0.25), None)];
        assert!(select_cancellations(&v, &active, &deleted, &TH, true).is_empty());
    }

    #[test]
    fn test_order_is_enforced_then_deleted_then_soft_each_by_group_id() {
        let v = views(vec![
            task(1, "s", 0.5, 0.0),
            task(2, "gone", 0.5, 0.0),
            task(3, "eb", 0.5, 0.0),
            task(4, "ea", 0.5, 0.0),
        ]);
        let active = [
            policy("s", S, Some(0.25), None),
            policy("eb", E, Some(0.25), None),
            policy("ea", E, Some(0.25), None),
        ];
        let deleted = [policy("gone", S, Some(0.25), None)];
        let out = select_cancellations(&v, &active, &deleted, &TH, true);
        assert_eq!(ids(&out), [4, 3, 2, 1]);
    }

    #[test]
    fn test_reason_matches_opensearch_text() {
        let v = views(vec![task(1, "abc", 0.5, 0.0)]);
        let out = select_cancellations(&v, &[policy("abc", E, Some(0.2), None)], &[], &TH, false);
        assert_eq!(
            out[0].reason,
            "WorkloadGroup ID : abc breached the resource limit: (0.5 > 0.2) for resource type : cpu"
        );
    }

    #[test]
    fn test_nan_threshold_selects_nothing() {
        let v = views(vec![task(1, "g", 0.5, 0.5)]);
        let th = NodeThresholds {
            cpu_cancellation: f64::NAN,
            memory_cancellation: f64::NAN,
            ..TH
        };
        let g = [policy("g", E, Some(0.1), Some(0.1))];
        assert!(select_cancellations(&v, &g, &[], &th, true).is_empty());
    }
}
