//! Usage views: each running task's share of the node and each group's sum (facts §6.4).
//!
//! CPU follows OpenSearch's `CpuUsageCalculator`: a task's rate is its CPU nanos divided by
//! **its own** elapsed wall time (`now − task start`), not by the enforcement interval, so a
//! task's share is its average CPU rate over its whole life; the group's usage is the sum of
//! its tasks' rates divided by the node's cores. Memory follows `MemoryUsageCalculator`: a
//! task's bytes divided by the node memory budget (OpenSearch: the JVM max heap), summed.
//!
//! Unlike OpenSearch, a task's CPU share is divided by the cores too (OpenSearch sorts and
//! accumulates tasks by the undivided rate while comparing against a per-node excess, which
//! mixes units and cancels too few tasks on a multi-core node). Here a group's usage is exactly
//! the sum of its tasks' shares, so "cancel tasks worth the excess" means what it says.
//!
//! # Invariants
//! - Every task share and group sum is finite and `>= 0`, whatever the input (zero elapsed
//!   time, zero cores, zero budget, `u64::MAX` counters, a start after `now`).
//! - A group's usage is the sum of its tasks' shares, added in input order.

use std::collections::{BTreeMap, HashSet};

use crate::group::ResourceType;

/// Whether a running task may still be cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Running and cancellable: a candidate for selection.
    Cancellable,
    /// Already cancelled but still running (cancellation is cooperative): never selected
    /// again, but its usage counts as already being shed (see [`super::cancellation`]).
    Cancelled,
    /// Running and not cancellable: counted in its group's usage, never selected.
    NotCancellable,
}

/// What the server reads off one running task for an enforcement pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSnapshot {
    /// The node-local task id (unique among the snapshots of one pass).
    pub task_id: u64,
    /// The workload group the task runs in.
    pub group_id: String,
    /// CPU time the task has used so far, in nanoseconds.
    pub cpu_nanos: u64,
    /// Memory the task has allocated so far, in bytes.
    pub memory_bytes: u64,
    /// When the task started, on the same monotonic nanosecond clock as `now_nanos`.
    pub start_nanos: u64,
    /// Whether it can still be cancelled.
    pub state: TaskState,
}

/// The node's capacity, which usage is expressed as a fraction of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCapacity {
    /// Available processors (OpenSearch: `availableProcessors()`); 0 disables CPU usage.
    pub cores: u32,
    /// The memory budget tasks are measured against (OpenSearch: JVM max heap); 0 disables
    /// memory usage.
    pub memory_budget_bytes: u64,
}

/// Usage of cpu and memory, each a fraction of the node.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResourceUsage {
    /// CPU share (1.0 = every core busy).
    pub cpu: f64,
    /// Memory share (1.0 = the whole budget).
    pub memory: f64,
}

impl ResourceUsage {
    /// Returns the usage of one resource.
    pub fn get(&self, resource: ResourceType) -> f64 {
        match resource {
            ResourceType::Cpu => self.cpu,
            ResourceType::Memory => self.memory,
        }
    }

    fn add(&mut self, other: &ResourceUsage) {
        self.cpu += other.cpu;
        self.memory += other.memory;
    }

    fn sanitized(self) -> ResourceUsage {
        let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        ResourceUsage {
            cpu: clean(self.cpu),
            memory: clean(self.memory),
        }
    }
}

/// One task's share of the node.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskUsage {
    /// The node-local task id.
    pub task_id: u64,
    /// The workload group the task runs in.
    pub group_id: String,
    /// The task's share of the node.
    pub usage: ResourceUsage,
    /// Whether it can still be cancelled.
    pub state: TaskState,
}

impl TaskUsage {
    /// Returns a task's share of the node at `now_nanos`.
    ///
    /// CPU: `cpu_nanos / (now − start) / cores`, 0 when no time has elapsed (a rate over no
    /// time is unknown; the next pass sees it) or the node has no cores. Memory:
    /// `memory_bytes / budget`, 0 when the budget is 0.
    pub fn of(task: &TaskSnapshot, now_nanos: u64, capacity: NodeCapacity) -> TaskUsage {
        let elapsed = now_nanos.saturating_sub(task.start_nanos);
        let cpu = if elapsed == 0 || capacity.cores == 0 {
            0.0
        } else {
            task.cpu_nanos as f64 / elapsed as f64 / f64::from(capacity.cores)
        };
        let memory = if capacity.memory_budget_bytes == 0 {
            0.0
        } else {
            task.memory_bytes as f64 / capacity.memory_budget_bytes as f64
        };
        TaskUsage {
            task_id: task.task_id,
            group_id: task.group_id.clone(),
            usage: ResourceUsage { cpu, memory }.sanitized(),
            state: task.state,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
struct GroupView {
    usage: ResourceUsage,
    tasks: Vec<usize>,
}

/// Per-task shares and per-group sums of one enforcement pass.
///
/// # Invariants
/// See the module docs: shares finite and `>= 0`, a group's usage is the sum of its tasks'
/// shares, task ids unique (a repeated id keeps its first snapshot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageViews {
    tasks: Vec<TaskUsage>,
    groups: BTreeMap<String, GroupView>,
}

impl UsageViews {
    /// Builds the views from task snapshots taken at `now_nanos`.
    pub fn build(tasks: &[TaskSnapshot], now_nanos: u64, capacity: NodeCapacity) -> UsageViews {
        UsageViews::from_task_usages(
            tasks
                .iter()
                .map(|t| TaskUsage::of(t, now_nanos, capacity))
                .collect(),
        )
    }

    /// Builds the views from per-task shares computed elsewhere; non-finite or negative shares
    /// count as 0 and a repeated task id keeps its first entry.
    pub fn from_task_usages(tasks: Vec<TaskUsage>) -> UsageViews {
        let mut seen = HashSet::with_capacity(tasks.len());
        let mut kept = Vec::with_capacity(tasks.len());
        let mut groups: BTreeMap<String, GroupView> = BTreeMap::new();
        for mut task in tasks {
            if !seen.insert(task.task_id) {
                continue;
            }
            task.usage = task.usage.sanitized();
            let view = groups.entry(task.group_id.clone()).or_default();
            view.usage.add(&task.usage);
            view.tasks.push(kept.len());
            kept.push(task);
        }
        let views = UsageViews {
            tasks: kept,
            groups,
        };
        views.debug_check_invariants();
        views
    }

    fn debug_check_invariants(&self) {
        if cfg!(debug_assertions) {
            for (id, view) in &self.groups {
                for r in ResourceType::ALL {
                    let v = view.usage.get(r);
                    debug_assert!(v.is_finite() && v >= 0.0, "group {id} {r:?} usage {v}");
                }
                debug_assert!(view.tasks.iter().all(|&i| self.tasks[i].group_id == *id));
            }
        }
    }

    /// Returns a group's usage; zero for a group with no running task (what OpenSearch records
    /// as `lastRecordedUsage` for an idle active group, facts §6.3 step 4).
    pub fn group(&self, group_id: &str) -> ResourceUsage {
        self.groups
            .get(group_id)
            .map(|v| v.usage)
            .unwrap_or_default()
    }

    /// Returns every group with at least one running task and its usage, in id order.
    pub fn groups(&self) -> impl Iterator<Item = (&str, ResourceUsage)> {
        self.groups.iter().map(|(id, v)| (id.as_str(), v.usage))
    }

    /// Returns whether a group has a running task; a deleted group can be forgotten once this
    /// is false (facts §6.3: deleted groups are kept until their tasks are gone).
    pub fn has_tasks(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    /// Returns every task's share, in input order.
    pub fn tasks(&self) -> &[TaskUsage] {
        &self.tasks
    }

    /// Returns a group's tasks, in input order.
    pub fn tasks_of<'s>(&'s self, group_id: &str) -> impl Iterator<Item = &'s TaskUsage> + 's {
        let indices = self
            .groups
            .get(group_id)
            .map(|v| v.tasks.as_slice())
            .unwrap_or_default();
        indices.iter().map(|&i| &self.tasks[i])
    }
}

/// Returns each group's usage (groups with running tasks only), as fractions of the node.
pub fn group_usage(
    tasks: &[TaskSnapshot],
    now_nanos: u64,
    capacity: NodeCapacity,
) -> BTreeMap<String, ResourceUsage> {
    UsageViews::build(tasks, now_nanos, capacity)
        .groups()
        .map(|(id, u)| (id.to_owned(), u))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn snap(id: u64, group: &str, cpu: u64, mem: u64, start: u64) -> TaskSnapshot {
        TaskSnapshot {
            task_id: id,
            group_id: group.into(),
            cpu_nanos: cpu,
            memory_bytes: mem,
            start_nanos: start,
            state: TaskState::Cancellable,
        }
    }

    const CAP: NodeCapacity = NodeCapacity {
        cores: 4,
        memory_budget_bytes: 1000,
    };

    #[test]
    fn test_cpu_share_divides_by_each_tasks_own_elapsed_time_and_cores() {
        // Task 1: 1 s of CPU over 2 s alive = 0.5 core; task 2: 1 s of CPU over 1 s = 1 core.
        let tasks = [snap(1, "g", SEC, 0, 8 * SEC), snap(2, "g", SEC, 0, 9 * SEC)];
        let views = UsageViews::build(&tasks, 10 * SEC, CAP);
        assert_eq!(views.tasks()[0].usage.cpu, 0.5 / 4.0);
        assert_eq!(views.tasks()[1].usage.cpu, 1.0 / 4.0);
        assert_eq!(views.group("g").cpu, 1.5 / 4.0);
    }

    #[test]
    fn test_memory_share_is_bytes_over_budget_summed_per_group() {
        let tasks = [
            snap(1, "a", 0, 100, 0),
            snap(2, "a", 0, 250, 0),
            snap(3, "b", 0, 500, 0),
        ];
        let usage = group_usage(&tasks, SEC, CAP);
        assert_eq!(usage.len(), 2);
        assert_eq!(usage["a"].memory, 0.35);
        assert_eq!(usage["b"].memory, 0.5);
    }

    #[test]
    fn test_zero_elapsed_counts_no_cpu_but_keeps_memory() {
        let views = UsageViews::build(&[snap(1, "g", 5 * SEC, 100, 7)], 7, CAP);
        assert_eq!(
            views.group("g"),
            ResourceUsage {
                cpu: 0.0,
                memory: 0.1
            }
        );
        // A start after `now` (another clock) is zero elapsed too, not an underflow.
        let views = UsageViews::build(&[snap(1, "g", 5 * SEC, 0, 9)], 7, CAP);
        assert_eq!(views.group("g").cpu, 0.0);
    }

    #[test]
    fn test_zero_cores_or_budget_disables_that_resource() {
        let cap = NodeCapacity {
            cores: 0,
            memory_budget_bytes: 0,
        };
        let views = UsageViews::build(&[snap(1, "g", SEC, 100, 0)], SEC, cap);
        assert_eq!(views.group("g"), ResourceUsage::default());
    }

    #[test]
    fn test_extreme_counters_stay_finite() {
        let cap = NodeCapacity {
            cores: 1,
            memory_budget_bytes: 1,
        };
        let tasks = [
            snap(1, "g", u64::MAX, u64::MAX, u64::MAX - 1),
            snap(2, "g", u64::MAX, u64::MAX, u64::MAX - 1),
        ];
        let views = UsageViews::build(&tasks, u64::MAX, cap);
        let u = views.group("g");
        assert!(u.cpu.is_finite() && u.cpu > 1e19, "{u:?}");
        assert!(u.memory.is_finite() && u.memory > 1e19, "{u:?}");
    }

    #[test]
    fn test_non_finite_or_negative_external_shares_count_as_zero() {
        let t = |id, cpu| TaskUsage {
            task_id: id,
            group_id: "g".into(),
            usage: ResourceUsage { cpu, memory: 0.1 },
            state: TaskState::Cancellable,
        };
        let views = UsageViews::from_task_usages(vec![
            t(1, f64::NAN),
            t(2, f64::INFINITY),
            t(3, -1.0),
            t(4, 0.25),
        ]);
        assert_eq!(views.group("g").cpu, 0.25);
        assert_eq!(views.tasks()[0].usage.cpu, 0.0);
    }

    #[test]
    fn test_repeated_task_id_keeps_first_snapshot() {
        let tasks = [snap(1, "a", 0, 100, 0), snap(1, "b", 0, 900, 0)];
        let views = UsageViews::build(&tasks, SEC, CAP);
        assert_eq!(views.tasks().len(), 1);
        assert!(!views.has_tasks("b"));
        assert_eq!(views.group("a").memory, 0.1);
    }

    #[test]
    fn test_idle_group_reads_zero_and_has_no_tasks() {
        let views = UsageViews::build(&[snap(1, "a", SEC, 1, 0)], SEC, CAP);
        assert_eq!(views.group("idle"), ResourceUsage::default());
        assert!(!views.has_tasks("idle"));
        assert_eq!(views.tasks_of("idle").count(), 0);
        assert_eq!(
            views.tasks_of("a").map(|t| t.task_id).collect::<Vec<_>>(),
            [1]
        );
    }
}
