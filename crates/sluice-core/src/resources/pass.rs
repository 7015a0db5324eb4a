//! One enforcement pass as a plain function of its inputs (facts §6.3): observe the node into
//! the duress trackers, build the usage views, select the tasks to cancel. The server gathers
//! the inputs (settings, running tasks, groups, process CPU and memory) and carries the outcome
//! out; tests drive [`run_pass`] with made-up inputs — it reads no clock, no setting and no
//! registry.

use std::collections::BTreeMap;

use super::{
    Cancellation, DEFAULT_WORKLOAD_GROUP_ID, GroupPolicy, NodeCapacity, NodeDuressTrackers,
    NodeThresholds, ResourceUsage, TaskSnapshot, UsageViews, select_cancellations,
};
use crate::{ResiliencyMode, ResourceLimits, WlmMode, WorkloadGroup};

/// What enforcement needs to know about a group, owned (a [`GroupPolicy`] borrows).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDef {
    /// The group's `_id`.
    pub id: String,
    /// How the group reacts to overrunning its share.
    pub resiliency_mode: ResiliencyMode,
    /// The group's shares.
    pub resource_limits: ResourceLimits,
}

impl GroupDef {
    /// Returns the definition of a stored group.
    pub fn of(group: &WorkloadGroup) -> GroupDef {
        GroupDef {
            id: group.id.clone(),
            resiliency_mode: group.resiliency_mode,
            resource_limits: group.resource_limits,
        }
    }

    fn policy(&self) -> GroupPolicy<'_> {
        GroupPolicy::new(&self.id, self.resiliency_mode, self.resource_limits)
    }
}

/// The node's own usage at the time of a pass, each a fraction of the node.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeObservation {
    /// Process CPU over the last interval / cores.
    pub cpu: f64,
    /// Memory in use / the memory budget.
    pub memory: f64,
}

/// Everything one pass decides on.
#[derive(Debug, Clone)]
pub struct PassInputs {
    /// `wlm.workload_group.mode`.
    pub mode: WlmMode,
    /// The node-level thresholds.
    pub thresholds: NodeThresholds,
    /// `wlm.workload_group.duress_streak`.
    pub duress_streak: u32,
    /// The node's own usage.
    pub node: NodeObservation,
    /// What usage is a fraction of.
    pub capacity: NodeCapacity,
    /// Now, on the clock of the tasks' `start_nanos`.
    pub now_nanos: u64,
    /// The running tasks that belong to a group.
    pub tasks: Vec<TaskSnapshot>,
    /// The current groups (DEFAULT excluded).
    pub active: Vec<GroupDef>,
    /// Groups of running tasks that are no longer current.
    pub deleted: Vec<GroupDef>,
}

/// What one pass decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassOutcome {
    /// Whether the pass ran (not in mode `disabled`).
    pub ran: bool,
    /// Whether the selected tasks are to be cancelled (mode `enabled`) or only logged.
    pub acts: bool,
    /// Whether the node is in duress after this pass's observation.
    pub in_duress: bool,
    /// Whether this pass changed the duress verdict.
    pub duress_changed: bool,
    /// The usage of every current group and of DEFAULT (zero when idle), by id.
    pub usage: BTreeMap<String, ResourceUsage>,
    /// Deleted groups that still have running tasks.
    pub deleted_with_tasks: Vec<String>,
    /// The tasks to cancel (or, when not acting, that would be cancelled), in order.
    pub cancellations: Vec<Cancellation>,
}

/// What enforcement keeps between passes.
///
/// # Invariants
/// `in_duress` is the verdict of the last observation of `duress`.
#[derive(Debug, Clone, Default)]
pub struct EnforcementState {
    duress: NodeDuressTrackers,
    in_duress: bool,
}

impl EnforcementState {
    /// Returns whether the last pass found the node in duress.
    pub fn is_node_in_duress(&self) -> bool {
        self.in_duress
    }

    /// Returns the duress trackers.
    pub fn duress(&self) -> &NodeDuressTrackers {
        &self.duress
    }
}

/// Runs one enforcement pass over `inputs`: observes the node into the duress trackers, builds
/// the usage views and selects the tasks to cancel (facts §6.3). In mode `disabled` it does
/// nothing, not even observe (facts §6.6: the loop does not run).
pub fn run_pass(state: &mut EnforcementState, inputs: &PassInputs) -> PassOutcome {
    if !inputs.mode.runs_enforcement_loop() {
        return PassOutcome::default();
    }
    let in_duress = state.duress.observe(
        inputs.node.cpu,
        inputs.node.memory,
        &inputs.thresholds,
        inputs.duress_streak,
    );
    let duress_changed = in_duress != state.in_duress;
    state.in_duress = in_duress;
    debug_assert_eq!(
        state.in_duress,
        state.duress.is_node_in_duress(inputs.duress_streak)
    );

    let views = UsageViews::build(&inputs.tasks, inputs.now_nanos, inputs.capacity);
    let active: Vec<GroupPolicy<'_>> = inputs.active.iter().map(GroupDef::policy).collect();
    let deleted: Vec<GroupPolicy<'_>> = inputs.deleted.iter().map(GroupDef::policy).collect();
    let cancellations =
        select_cancellations(&views, &active, &deleted, &inputs.thresholds, in_duress);

    let usage = usage_by_group(&views, &inputs.active);
    let deleted_with_tasks = inputs
        .deleted
        .iter()
        .filter(|g| views.has_tasks(&g.id))
        .map(|g| g.id.clone())
        .collect();
    PassOutcome {
        ran: true,
        acts: inputs.mode.acts(),
        in_duress,
        duress_changed,
        usage,
        deleted_with_tasks,
        cancellations,
    }
}

/// The usage of every group of `active` and of DEFAULT (zero when idle), by id.
fn usage_by_group(views: &UsageViews, active: &[GroupDef]) -> BTreeMap<String, ResourceUsage> {
    let mut usage = BTreeMap::new();
    usage.insert(
        DEFAULT_WORKLOAD_GROUP_ID.to_string(),
        views.group(DEFAULT_WORKLOAD_GROUP_ID),
    );
    for g in active {
        usage.insert(g.id.clone(), views.group(&g.id));
    }
    usage
}

/// The tasks mode `enabled` would have cancelled in the pass `inputs` → `outcome` (issue #16's
/// dry run), in the pass's order, then the monitored groups' in theirs; each task once.
///
/// - When the pass did not act (`monitor_only`), its own selection.
/// - A `monitor` group, in any mode that runs the pass, judged as if it were `enforced` (the
///   consequence of switching it to the strictest mode), on the same usage views and duress
///   verdict as the pass.
///
/// Empty when the pass did not run (mode `disabled`).
pub fn select_would_cancel(inputs: &PassInputs, outcome: &PassOutcome) -> Vec<Cancellation> {
    if !outcome.ran {
        return Vec::new();
    }
    let mut would: Vec<Cancellation> = if outcome.acts {
        Vec::new()
    } else {
        outcome.cancellations.clone()
    };
    let monitored: Vec<GroupPolicy<'_>> = inputs
        .active
        .iter()
        .filter(|g| g.resiliency_mode == ResiliencyMode::Monitor)
        .map(|g| GroupPolicy::new(&g.id, ResiliencyMode::Enforced, g.resource_limits))
        .collect();
    if !monitored.is_empty() {
        let views = UsageViews::build(&inputs.tasks, inputs.now_nanos, inputs.capacity);
        for c in select_cancellations(
            &views,
            &monitored,
            &[],
            &inputs.thresholds,
            outcome.in_duress,
        ) {
            if !would.iter().any(|w| w.task_id == c.task_id) {
                would.push(c);
            }
        }
    }
    would
}

/// Measures the usage of every current group and of DEFAULT from `tasks` at `now_nanos`, as a
/// pass would but without observing the node or selecting anything; nothing in mode
/// `disabled`.
pub fn run_refresh(
    mode: WlmMode,
    tasks: &[TaskSnapshot],
    now_nanos: u64,
    capacity: NodeCapacity,
    active: &[GroupDef],
) -> BTreeMap<String, ResourceUsage> {
    if !mode.runs_enforcement_loop() {
        return BTreeMap::new();
    }
    usage_by_group(&UsageViews::build(tasks, now_nanos, capacity), active)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CancellationCause, TaskState};

    const SEC: u64 = 1_000_000_000;
    const CAP: NodeCapacity = NodeCapacity {
        cores: 2,
        memory_budget_bytes: 1000,
    };

    fn def(id: &str, mode: ResiliencyMode, cpu: f64) -> GroupDef {
        GroupDef {
            id: id.into(),
            resiliency_mode: mode,
            resource_limits: ResourceLimits {
                cpu: Some(cpu),
                memory: None,
            },
        }
    }

    /// A task that has used `cores` cores since it started a second before `now` (10 s).
    fn task(id: u64, group: &str, cores: f64) -> TaskSnapshot {
        TaskSnapshot {
            task_id: id,
            group_id: group.into(),
            cpu_nanos: (cores * SEC as f64) as u64,
            memory_bytes: 0,
            start_nanos: 9 * SEC,
            state: TaskState::Cancellable,
        }
    }

    fn inputs(mode: WlmMode, tasks: Vec<TaskSnapshot>, active: Vec<GroupDef>) -> PassInputs {
        PassInputs {
            mode,
            thresholds: NodeThresholds::default(),
            duress_streak: 3,
            node: NodeObservation::default(),
            capacity: CAP,
            now_nanos: 10 * SEC,
            tasks,
            active,
            deleted: Vec::new(),
        }
    }

    fn ids(out: &PassOutcome) -> Vec<u64> {
        out.cancellations.iter().map(|c| c.task_id).collect()
    }

    fn would_ids(inputs: &PassInputs) -> Vec<u64> {
        let out = run_pass(&mut EnforcementState::default(), inputs);
        select_would_cancel(inputs, &out)
            .iter()
            .map(|c| c.task_id)
            .collect()
    }

    #[test]
    fn test_would_cancel_is_the_pass_selection_when_it_does_not_act() {
        // An enforced group at a whole node against a 10% limit: its task is selected.
        let tasks = vec![task(1, "a", 2.0)];
        let active = vec![def("a", ResiliencyMode::Enforced, 0.1)];
        let monitoring = inputs(WlmMode::MonitorOnly, tasks.clone(), active.clone());
        assert_eq!(would_ids(&monitoring), vec![1]);
        // In `enabled` the pass cancels it for real: nothing is a dry run.
        assert_eq!(
            would_ids(&inputs(WlmMode::Enabled, tasks.clone(), active.clone())),
            Vec::<u64>::new()
        );
        // In `disabled` no pass runs.
        assert_eq!(
            would_ids(&inputs(WlmMode::Disabled, tasks, active)),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn test_would_cancel_judges_a_monitor_group_as_enforced_in_every_running_mode() {
        let tasks = vec![task(1, "m", 2.0), task(2, "calm", 0.01)];
        let active = vec![
            def("m", ResiliencyMode::Monitor, 0.1),
            def("calm", ResiliencyMode::Monitor, 0.9),
        ];
        for mode in [WlmMode::Enabled, WlmMode::MonitorOnly] {
            let i = inputs(mode, tasks.clone(), active.clone());
            let out = run_pass(&mut EnforcementState::default(), &i);
            assert!(
                out.cancellations.is_empty(),
                "{mode:?}: a monitor group is never policed"
            );
            assert_eq!(would_ids(&i), vec![1], "{mode:?}");
        }
    }

    #[test]
    fn test_pass_records_usage_of_every_active_group_and_default() {
        let tasks = vec![
            task(1, "a", 0.5),
            task(2, "a", 0.5),
            task(3, DEFAULT_WORKLOAD_GROUP_ID, 1.0),
        ];
        let active = vec![
            def("a", ResiliencyMode::Soft, 0.9),
            def("idle", ResiliencyMode::Soft, 0.1),
        ];
        let out = run_pass(
            &mut EnforcementState::default(),
            &inputs(WlmMode::MonitorOnly, tasks, active),
        );
        assert!(out.ran && !out.acts);
        // Two tasks at half a core each on two cores: half the node.
        assert_eq!(out.usage["a"].cpu, 0.5);
        assert_eq!(out.usage["idle"], ResourceUsage::default());
        assert_eq!(out.usage[DEFAULT_WORKLOAD_GROUP_ID].cpu, 0.5);
        assert_eq!(out.usage.len(), 3);
        assert!(out.cancellations.is_empty());
    }

    #[test]
    fn test_refresh_measures_what_a_pass_records_and_nothing_when_disabled() {
        let tasks = vec![
            task(1, "analytics", 1.0),
            task(2, "product", 0.25),
            task(3, DEFAULT_WORKLOAD_GROUP_ID, 0.5),
        ];
        let active = vec![
            def("analytics", ResiliencyMode::Enforced, 0.1),
            def("product", ResiliencyMode::Soft, 0.5),
            def("idle", ResiliencyMode::Soft, 0.1),
        ];
        let pass = run_pass(
            &mut EnforcementState::default(),
            &inputs(WlmMode::Enabled, tasks.clone(), active.clone()),
        );
        let refreshed = run_refresh(WlmMode::Enabled, &tasks, 10 * SEC, CAP, &active);
        assert_eq!(refreshed, pass.usage);
        assert_eq!(refreshed["analytics"].cpu, 0.5);
        assert_eq!(refreshed["product"].cpu, 0.125);
        assert_eq!(refreshed["idle"], ResourceUsage::default());
        assert!(run_refresh(WlmMode::Disabled, &tasks, 10 * SEC, CAP, &active).is_empty());
        // monitor_only measures too: the stats show usage in every mode the loop runs in.
        assert_eq!(
            run_refresh(WlmMode::MonitorOnly, &tasks, 10 * SEC, CAP, &active),
            pass.usage
        );
    }

    #[test]
    fn test_enforced_group_over_limit_loses_its_heaviest_tasks_and_light_group_none() {
        // analytics: 0.5 + 0.25 + 0.05 of the node against 0.3 × 0.9 = 0.27: the excess 0.53
        // takes the two heaviest tasks. product at 0.2 is under 0.9 × 0.9.
        let tasks = vec![
            task(1, "analytics", 0.5),
            task(2, "analytics", 1.0),
            task(3, "analytics", 0.1),
            task(4, "product", 0.4),
        ];
        let active = vec![
            def("analytics", ResiliencyMode::Enforced, 0.3),
            def("product", ResiliencyMode::Enforced, 0.6),
        ];
        let out = run_pass(
            &mut EnforcementState::default(),
            &inputs(WlmMode::Enabled, tasks, active),
        );
        assert!(out.acts);
        assert_eq!(ids(&out), [2, 1]);
        assert!(out.cancellations.iter().all(|c| {
            c.group_id == "analytics"
                && c.cause == CancellationCause::EnforcedOverLimit
                && c.reason
                    .starts_with("WorkloadGroup ID : analytics breached the resource limit")
        }));
    }

    #[test]
    fn test_monitor_only_selects_the_same_tasks_without_acting() {
        let tasks = vec![task(1, "analytics", 1.0)];
        let active = vec![def("analytics", ResiliencyMode::Enforced, 0.1)];
        let enabled = run_pass(
            &mut EnforcementState::default(),
            &inputs(WlmMode::Enabled, tasks.clone(), active.clone()),
        );
        let monitor = run_pass(
            &mut EnforcementState::default(),
            &inputs(WlmMode::MonitorOnly, tasks, active),
        );
        assert!(enabled.acts && !monitor.acts);
        assert_eq!(ids(&monitor), [1]);
        assert_eq!(monitor.cancellations, enabled.cancellations);
    }

    #[test]
    fn test_disabled_pass_neither_observes_nor_selects() {
        let mut state = EnforcementState::default();
        let mut hot = inputs(
            WlmMode::Disabled,
            vec![task(1, "analytics", 1.0)],
            vec![def("analytics", ResiliencyMode::Enforced, 0.1)],
        );
        hot.node.cpu = 1.0;
        for _ in 0..5 {
            assert_eq!(run_pass(&mut state, &hot), PassOutcome::default());
        }
        assert_eq!(state.duress().cpu.num_consecutive_breaches(), 0);
    }

    #[test]
    fn test_soft_and_deleted_groups_policed_only_after_the_duress_streak() {
        let mut state = EnforcementState::default();
        let mut i = inputs(
            WlmMode::Enabled,
            vec![
                task(1, "soft", 1.0),
                task(2, "gone", 1.0),
                task(3, "mon", 1.0),
            ],
            vec![
                def("soft", ResiliencyMode::Soft, 0.1),
                def("mon", ResiliencyMode::Monitor, 0.1),
            ],
        );
        i.deleted = vec![def("gone", ResiliencyMode::Enforced, 0.1)];
        i.node.cpu = 0.95;
        let first = run_pass(&mut state, &i);
        assert!(!first.in_duress && first.cancellations.is_empty());
        assert_eq!(first.deleted_with_tasks, ["gone"]);
        assert!(run_pass(&mut state, &i).cancellations.is_empty());
        let third = run_pass(&mut state, &i);
        assert!(third.in_duress && third.duress_changed && state.is_node_in_duress());
        // Deleted before soft; the monitor group never.
        assert_eq!(ids(&third), [2, 1]);
        assert_eq!(
            third.cancellations[0].cause,
            CancellationCause::DeletedGroupInDuress
        );
        // One calm observation ends duress.
        i.node.cpu = 0.5;
        let calm = run_pass(&mut state, &i);
        assert!(!calm.in_duress && calm.duress_changed && calm.cancellations.is_empty());
    }

    #[test]
    fn test_memory_duress_counts_at_the_threshold() {
        let mut state = EnforcementState::default();
        let mut i = inputs(WlmMode::MonitorOnly, Vec::new(), Vec::new());
        i.node.memory = 0.9;
        for _ in 0..2 {
            assert!(!run_pass(&mut state, &i).in_duress);
        }
        assert!(run_pass(&mut state, &i).in_duress);
    }
}
