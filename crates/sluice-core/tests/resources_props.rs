//! Property tests of the resource-enforcement core: cancellation selection against its stated
//! guarantees, usage math against a direct computation, duress against a run-length model, and
//! the admission decision against its rules.
//!
//! Usages, limits and thresholds are multiples of powers of two, so every sum and product in
//! the properties is exact and the assertions need no slack beyond the module's own 1e-9.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use sluice_core::resources::{
    Admission, Cancellation, DEFAULT_WORKLOAD_GROUP_ID, EXCESS_TOLERANCE, GroupPolicy,
    NodeCapacity, NodeDuressTracker, NodeThresholds, ResiliencyMode, ResourceLimits, ResourceType,
    ResourceUsage, TaskSnapshot, TaskState, TaskUsage, UnmeasuredTasks, UsageViews, WlmMode,
    check_rejection, select_cancellations,
};

const ACTIVE_IDS: [&str; 4] = ["g0", "g1", "g2", "g3"];
const DELETED_IDS: [&str; 3] = ["d0", "d1", "g0"];
const TASK_GROUPS: [&str; 9] = [
    "g0",
    "g1",
    "g2",
    "g3",
    "d0",
    "d1",
    "d1",
    DEFAULT_WORKLOAD_GROUP_ID,
    "unknown",
];

fn mode() -> impl Strategy<Value = ResiliencyMode> {
    prop_oneof![
        Just(ResiliencyMode::Soft),
        Just(ResiliencyMode::Enforced),
        Just(ResiliencyMode::Monitor),
    ]
}

fn limit() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![1 => Just(None), 4 => (1u32..=16).prop_map(|k| Some(f64::from(k) / 16.0))]
}

fn limits() -> impl Strategy<Value = ResourceLimits> {
    (limit(), limit()).prop_map(|(cpu, memory)| ResourceLimits { cpu, memory })
}

fn state() -> impl Strategy<Value = TaskState> {
    prop_oneof![
        6 => Just(TaskState::Cancellable),
        1 => Just(TaskState::Cancelled),
        1 => Just(TaskState::NotCancellable),
    ]
}

/// A task's share: coarse steps make exact-excess cases common, fine ones make ties rare.
fn share() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => Just(0.0),
        3 => (1u32..8).prop_map(|k| f64::from(k) / 16.0),
        3 => (0u32..256).prop_map(|k| f64::from(k) / 1024.0),
    ]
}

fn tasks() -> impl Strategy<Value = Vec<TaskUsage>> {
    prop::collection::vec((0..TASK_GROUPS.len(), share(), share(), state()), 0..24).prop_map(
        |specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (g, cpu, memory, state))| TaskUsage {
                    // Unique, and not in input order, so the tie-break by id is exercised.
                    task_id: (i as u64 * 7919) % 1009,
                    group_id: TASK_GROUPS[g].to_owned(),
                    usage: ResourceUsage { cpu, memory },
                    state,
                })
                .collect()
        },
    )
}

fn threshold() -> impl Strategy<Value = f64> {
    prop_oneof![
        2 => Just(1.0),
        1 => Just(0.5),
        2 => (8u32..=16).prop_map(|k| f64::from(k) / 16.0),
    ]
}

fn thresholds() -> impl Strategy<Value = NodeThresholds> {
    (threshold(), threshold()).prop_map(|(cpu, memory)| NodeThresholds {
        cpu_rejection: cpu / 2.0,
        cpu_cancellation: cpu,
        memory_rejection: memory / 2.0,
        memory_cancellation: memory,
    })
}

#[derive(Debug, Clone)]
struct Scenario {
    tasks: Vec<TaskUsage>,
    active: Vec<(usize, ResiliencyMode, ResourceLimits)>,
    deleted: Vec<(usize, ResiliencyMode, ResourceLimits)>,
    thresholds: NodeThresholds,
    in_duress: bool,
}

impl Scenario {
    fn active(&self) -> Vec<GroupPolicy<'static>> {
        self.active
            .iter()
            .map(|&(i, m, l)| GroupPolicy::new(ACTIVE_IDS[i], m, l))
            .collect()
    }

    fn deleted(&self) -> Vec<GroupPolicy<'static>> {
        self.deleted
            .iter()
            .map(|&(i, m, l)| GroupPolicy::new(DELETED_IDS[i], m, l))
            .collect()
    }

    /// The groups the rules police in this pass, by id (active wins over deleted).
    fn policed(&self) -> HashMap<&'static str, GroupPolicy<'static>> {
        let active = self.active();
        let active_ids: HashSet<&str> = active.iter().map(|g| g.id).collect();
        let mut out = HashMap::new();
        for g in &active {
            let policed = match g.resiliency_mode {
                ResiliencyMode::Enforced => true,
                ResiliencyMode::Soft => self.in_duress,
                ResiliencyMode::Monitor => false,
            };
            if policed {
                out.entry(g.id).or_insert(*g);
            }
        }
        if self.in_duress {
            for g in self.deleted() {
                if !active_ids.contains(g.id) {
                    out.entry(g.id).or_insert(g);
                }
            }
        }
        out
    }
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let group = |n: usize| (0..n, mode(), limits());
    (
        tasks(),
        prop::collection::vec(group(ACTIVE_IDS.len()), 0..5),
        prop::collection::vec(group(DELETED_IDS.len()), 0..3),
        thresholds(),
        any::<bool>(),
    )
        .prop_map(|(tasks, mut active, deleted, thresholds, in_duress)| {
            // One definition per active id, as the metastore guarantees.
            let mut seen = HashSet::new();
            active.retain(|(i, _, _)| seen.insert(*i));
            Scenario {
                tasks,
                active,
                deleted,
                thresholds,
                in_duress,
            }
        })
}

fn run(s: &Scenario) -> (UsageViews, Vec<Cancellation>) {
    let views = UsageViews::from_task_usages(s.tasks.clone());
    let out = select_cancellations(
        &views,
        &s.active(),
        &s.deleted(),
        &s.thresholds,
        s.in_duress,
    );
    (views, out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn test_selection_never_repeats_a_task_and_only_takes_cancellable_tasks_of_policed_groups(
        s in scenario()
    ) {
        let (views, out) = run(&s);
        let policed = s.policed();
        let mut seen = HashSet::new();
        for c in &out {
            prop_assert!(seen.insert(c.task_id), "task {} selected twice", c.task_id);
            let t = views.tasks().iter().find(|t| t.task_id == c.task_id).unwrap();
            prop_assert_eq!(t.state, TaskState::Cancellable);
            prop_assert_eq!(&t.group_id, &c.group_id);
            prop_assert!(policed.contains_key(c.group_id.as_str()), "{} not policed", c.group_id);
            let monitor = s.active().iter().any(|g| g.id == c.group_id
                && g.resiliency_mode == ResiliencyMode::Monitor);
            prop_assert!(!monitor, "selected from monitor group {}", c.group_id);
            prop_assert!(c.group_id != DEFAULT_WORKLOAD_GROUP_ID);
        }
    }

    #[test]
    fn test_selection_covers_every_excess_or_takes_every_cancellable_task(s in scenario()) {
        let (views, out) = run(&s);
        let selected: HashSet<u64> = out.iter().map(|c| c.task_id).collect();
        for (id, g) in s.policed() {
            let tasks: Vec<&TaskUsage> = views.tasks_of(id).collect();
            let all_taken = tasks.iter()
                .filter(|t| t.state == TaskState::Cancellable)
                .all(|t| selected.contains(&t.task_id));
            for r in ResourceType::ALL {
                let Some(limit) = g.resource_limits.get(r) else { continue };
                let excess = views.group(id).get(r) - limit * s.thresholds.cancellation(r);
                let shed: f64 = tasks.iter()
                    .filter(|t| selected.contains(&t.task_id) || t.state == TaskState::Cancelled)
                    .map(|t| t.usage.get(r))
                    .sum();
                prop_assert!(
                    excess - shed <= EXCESS_TOLERANCE || all_taken,
                    "group {} {:?}: excess {} shed {} and cancellable tasks left", id, r, excess, shed
                );
            }
        }
    }

    #[test]
    fn test_each_resource_step_is_a_minimal_highest_first_prefix(s in scenario()) {
        let (views, out) = run(&s);
        let selected: HashSet<u64> = out.iter().map(|c| c.task_id).collect();
        for (id, g) in s.policed() {
            let tasks: Vec<&TaskUsage> = views.tasks_of(id).collect();
            let usage_of = |task_id: u64, r: ResourceType| {
                tasks.iter().find(|t| t.task_id == task_id).unwrap().usage.get(r)
            };
            let mut earlier: Vec<u64> = Vec::new();
            for r in ResourceType::ALL {
                let step: Vec<u64> = out.iter()
                    .filter(|c| c.group_id == id && c.resource == r)
                    .map(|c| c.task_id)
                    .collect();
                if step.is_empty() {
                    continue;
                }
                let limit = g.resource_limits.get(r).unwrap();
                let shed_before: f64 = tasks.iter()
                    .filter(|t| earlier.contains(&t.task_id) || t.state == TaskState::Cancelled)
                    .map(|t| t.usage.get(r))
                    .sum();
                let excess = views.group(id).get(r) - limit * s.thresholds.cancellation(r)
                    - shed_before;
                prop_assert!(excess > EXCESS_TOLERANCE, "selected with no excess");
                let usages: Vec<f64> = step.iter().map(|&t| usage_of(t, r)).collect();
                // Highest first, ties by lower id.
                for w in step.windows(2) {
                    let (a, b) = (usage_of(w[0], r), usage_of(w[1], r));
                    prop_assert!(a > b || (a == b && w[0] < w[1]), "order {:?}", step);
                }
                // Dropping the smallest (hence any) pick leaves the excess uncovered.
                let sum: f64 = usages.iter().sum();
                let min = usages.iter().cloned().fold(f64::INFINITY, f64::min);
                prop_assert!(sum - min + EXCESS_TOLERANCE < excess,
                    "group {} {:?}: {:?} not minimal for excess {}", id, r, usages, excess);
                // Every cancellable task left unselected uses no more than the smallest pick.
                for t in &tasks {
                    if t.state == TaskState::Cancellable && !selected.contains(&t.task_id) {
                        prop_assert!(t.usage.get(r) <= min);
                    }
                }
                earlier.extend(step);
            }
        }
    }

    #[test]
    fn test_group_usage_is_the_sum_of_task_shares_and_always_finite(
        specs in prop::collection::vec((0usize..3, any::<u64>(), any::<u64>(), any::<u64>()), 0..12),
        now in any::<u64>(),
        cores in any::<u32>(),
        budget in any::<u64>(),
    ) {
        let capacity = NodeCapacity { cores, memory_budget_bytes: budget };
        let snaps: Vec<TaskSnapshot> = specs.iter().enumerate().map(|(i, &(g, cpu, mem, start))| {
            TaskSnapshot {
                task_id: i as u64,
                group_id: format!("g{g}"),
                cpu_nanos: cpu,
                memory_bytes: mem,
                start_nanos: start,
                state: TaskState::Cancellable,
            }
        }).collect();
        let views = UsageViews::build(&snaps, now, capacity);
        for (id, u) in views.groups() {
            let mut expect = ResourceUsage::default();
            for t in snaps.iter().filter(|t| t.group_id == id) {
                let elapsed = now.saturating_sub(t.start_nanos);
                if elapsed > 0 && cores > 0 {
                    expect.cpu += t.cpu_nanos as f64 / elapsed as f64 / f64::from(cores);
                }
                if budget > 0 {
                    expect.memory += t.memory_bytes as f64 / budget as f64;
                }
            }
            prop_assert_eq!(u, expect);
            prop_assert!(u.cpu.is_finite() && u.cpu >= 0.0);
            prop_assert!(u.memory.is_finite() && u.memory >= 0.0);
        }
    }

    #[test]
    fn test_duress_matches_trailing_run_of_breaches(
        observations in prop::collection::vec(0u32..=20, 0..40),
        streak in 0u32..6,
        cpu in any::<bool>(),
    ) {
        let resource = if cpu { ResourceType::Cpu } else { ResourceType::Memory };
        let mut tracker = NodeDuressTracker::new(resource);
        let threshold = 0.5;
        let mut run = 0u32;
        for &k in &observations {
            let usage = f64::from(k) / 20.0;
            let breach = if cpu { usage > threshold } else { usage >= threshold };
            run = if breach { run + 1 } else { 0 };
            let in_duress = tracker.observe(usage, threshold, streak);
            prop_assert_eq!(in_duress, run >= streak.max(1));
            prop_assert_eq!(tracker.num_consecutive_breaches(), run);
        }
    }

    #[test]
    fn test_admission_rejects_exactly_when_the_rules_say(
        wlm in prop_oneof![Just(WlmMode::Enabled), Just(WlmMode::MonitorOnly), Just(WlmMode::Disabled)],
        group_mode in mode(),
        limits in limits(),
        cpu in share(), memory in share(),
        th in thresholds(),
        in_duress in any::<bool>(),
        default in prop::bool::weighted(0.1),
    ) {
        let id = if default { DEFAULT_WORKLOAD_GROUP_ID } else { "g" };
        let g = GroupPolicy::new(id, group_mode, limits);
        let usage = ResourceUsage { cpu: cpu * 4.0, memory: memory * 4.0 };
        let a = check_rejection(wlm, &g, usage, &th, in_duress);
        let breached = ResourceType::ALL.iter().any(|&r| {
            limits.get(r).is_some_and(|l| l * th.rejection(r) < usage.get(r))
        });
        let evaluated = wlm != WlmMode::Disabled && !default
            && (group_mode != ResiliencyMode::Soft || in_duress);
        let should_reject = evaluated && breached && wlm == WlmMode::Enabled
            && group_mode != ResiliencyMode::Monitor;
        prop_assert_eq!(a.is_rejected(), should_reject, "{:?}", a);
        prop_assert_eq!(a.breach().is_some(), evaluated && breached, "{:?}", a);
        if let Admission::Reject(r) | Admission::WouldReject(r) = a {
            prop_assert!(r.threshold < r.usage);
            prop_assert_eq!(r.threshold, r.limit * th.rejection(r.resource));
        }
    }

    /// Sequential admissions under a fixed recorded usage stop exactly at the module's bound,
    /// whatever the estimate learnt from finished tasks; giving places back reopens the door.
    #[test]
    fn test_unmeasured_admissions_stop_at_the_bound(
        shares in prop::collection::vec(1u32..=64, 1..6),
        recorded in 0u32..=16,
        threshold in 1u32..=64,
    ) {
        let group = std::sync::Arc::new(UnmeasuredTasks::default());
        for s in &shares {
            group.observe_finished(ResourceUsage { cpu: f64::from(*s) / 64.0, memory: 0.0 });
        }
        let estimate = group.per_task().cpu;
        let lo = shares.iter().min().map_or(0.0, |s| f64::from(*s) / 64.0);
        let hi = shares.iter().max().map_or(0.0, |s| f64::from(*s) / 64.0);
        prop_assert!(estimate >= lo - 1e-12 && estimate <= hi + 1e-12, "{estimate} not in {lo}..{hi}");
        let last = ResourceUsage { cpu: f64::from(recorded) / 64.0, memory: 0.0 };
        let threshold = f64::from(threshold) / 64.0;
        let mut held = Vec::new();
        while let Ok(r) = UnmeasuredTasks::try_admit(&group, last, |p| {
            if p.cpu > threshold { Err(()) } else { Ok(()) }
        }) {
            held.push(r);
            prop_assert!(held.len() < 10_000, "no bound");
        }
        // Admitted while `last + (n − 1) × estimate <= threshold`.
        let expected = if last.cpu > threshold {
            0
        } else {
            ((threshold - last.cpu) / estimate + 1e-9).floor() as usize + 1
        };
        prop_assert_eq!(held.len(), expected);
        prop_assert_eq!(group.count(), expected as u64);
        held.clear();
        prop_assert_eq!(group.count(), 0);
    }
}
