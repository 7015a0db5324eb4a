//! Resource enforcement, pure: per-group CPU/memory usage views, node duress tracking, the
//! admission rejection decision and the selection of tasks to cancel.
//!
//! The server's enforcement loop calls this module once per `enforcement_interval`, and the
//! admission path once per request; nothing here reads a clock, the task registry or a
//! setting. Facts references (`facts §x`) are to `reference/opensearch-wlm-facts.md`.
//!
//! - [`usage`]: [`TaskSnapshot`] (what the server reads off a running task) →
//!   [`UsageViews`]: each task's share of the node and each group's sum (facts §6.4).
//! - [`duress`]: [`NodeDuressTracker`] per resource and [`NodeDuressTrackers`] for the node,
//!   a streak of consecutive breaching observations (facts §6.5).
//! - [`admission`]: [`check_rejection`], the `rejectIfNeeded` decision with OpenSearch's
//!   rejection message (facts §6.2), plus a would-reject signal for `monitor_only` and
//!   `monitor` groups.
//! - [`cancellation`]: [`select_cancellations`], which groups are policed and which of their
//!   tasks die, highest usage first, just enough to cover the excess (facts §6.3).
//! - [`pass`]: [`run_pass`], one enforcement pass as a function of its inputs (node
//!   observation, tasks, groups) → duress verdict, usage per group, tasks to cancel.
//! - [`quota`]: [`CpuQuota`], sluice's own: a queued enforced group's CPU-time balance, earned
//!   at its share and spent by its tasks, so admission paces the group instead of cancelling.
//! - [`unmeasured`]: [`UnmeasuredTasks`], sluice's own: the tasks admitted whose usage no
//!   refresh has measured yet, and a per-task estimate, so admission sees a burst.
//!
//! One enforcement pass, as the server runs it:
//!
//! ```
//! use sluice_core::resources::*;
//!
//! let tasks = vec![TaskSnapshot {
//!     task_id: 7,
//!     group_id: "g1".into(),
//!     cpu_nanos: 2_000_000_000,
//!     memory_bytes: 0,
//!     start_nanos: 0,
//!     state: TaskState::Cancellable,
//! }];
//! let capacity = NodeCapacity { cores: 4, memory_budget_bytes: 1 << 30 };
//! // One task that used two cores' worth of CPU for one second: half of a 4-core node.
//! let views = UsageViews::build(&tasks, 1_000_000_000, capacity);
//! assert_eq!(views.group("g1").cpu, 0.5);
//!
//! let mut duress = NodeDuressTrackers::default();
//! let thresholds = NodeThresholds::default();
//! let in_duress = duress.observe(0.3, 0.3, &thresholds, DEFAULT_DURESS_STREAK);
//!
//! let limits = ResourceLimits { cpu: Some(0.2), memory: None };
//! let active = [GroupPolicy::new("g1", ResiliencyMode::Enforced, limits)];
//! let picked = select_cancellations(&views, &active, &[], &thresholds, in_duress);
//! assert_eq!(picked[0].task_id, 7);
//! // WlmMode::Enabled: cancel and log; MonitorOnly: log only; Disabled: the loop does not run.
//! ```
//!
//! # Units
//! Every usage is a fraction of the node (1.0 = all cores, or the whole memory budget), so a
//! task's share, a group's sum, a limit and a threshold compare directly.

pub mod admission;
pub mod cancellation;
pub mod duress;
pub mod pass;
pub mod quota;
pub mod unmeasured;
pub mod usage;

pub use crate::group::{ResiliencyMode, ResourceLimits, ResourceType};
pub use admission::{Admission, Rejection, check_rejection};
pub use cancellation::{Cancellation, CancellationCause, breach_reason, select_cancellations};
pub use duress::{NodeDuressTracker, NodeDuressTrackers};
pub use pass::{
    EnforcementState, GroupDef, NodeObservation, PassInputs, PassOutcome, run_pass, run_refresh,
    select_would_cancel,
};
pub use quota::CpuQuota;
pub use unmeasured::{Reservation, UnmeasuredTasks};
pub use usage::{
    NodeCapacity, ResourceUsage, TaskSnapshot, TaskState, TaskUsage, UsageViews, group_usage,
};

use crate::group::WorkloadGroup;

/// The id of the group that untagged requests run in (defined in the wire crate); it is never
/// rejected or cancelled (DESIGN D5).
pub use sluice_wire::DEFAULT_GROUP_ID as DEFAULT_WORKLOAD_GROUP_ID;

/// Default node-level rejection threshold for cpu and memory: OpenSearch's default for
/// `wlm.workload_group.node.{cpu,memory}_rejection_threshold` (facts §5).
pub const DEFAULT_REJECTION_THRESHOLD: f64 = 0.8;

/// Default node-level cancellation threshold for cpu and memory: OpenSearch's default for
/// `wlm.workload_group.node.{cpu,memory}_cancellation_threshold` (facts §5); also the line
/// above which a node observation counts towards duress (facts §6.5).
pub const DEFAULT_CANCELLATION_THRESHOLD: f64 = 0.9;

/// Default `wlm.workload_group.duress_streak`: OpenSearch's default (facts §5).
pub const DEFAULT_DURESS_STREAK: u32 = 3;

/// Usage differences at or below this are treated as zero: OpenSearch's `MIN_VALUE` in the
/// cancellation service (facts §6.3), small enough that no real excess hides below it and
/// large enough to absorb the rounding of a few additions of fractions.
pub const EXCESS_TOLERANCE: f64 = 1e-9;

pub use crate::mode::WlmMode;

/// The node-level thresholds a group's limit is multiplied by, per resource (facts §5).
///
/// # Invariants
/// Settings validation (in the server) keeps `0 <= rejection <= cancellation <= 0.95`; this
/// module does not rely on it: any value, even NaN, yields a decision without panicking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeThresholds {
    /// `wlm.workload_group.node.cpu_rejection_threshold`.
    pub cpu_rejection: f64,
    /// `wlm.workload_group.node.cpu_cancellation_threshold`.
    pub cpu_cancellation: f64,
    /// `wlm.workload_group.node.memory_rejection_threshold`.
    pub memory_rejection: f64,
    /// `wlm.workload_group.node.memory_cancellation_threshold`.
    pub memory_cancellation: f64,
}

impl Default for NodeThresholds {
    fn default() -> Self {
        NodeThresholds {
            cpu_rejection: DEFAULT_REJECTION_THRESHOLD,
            cpu_cancellation: DEFAULT_CANCELLATION_THRESHOLD,
            memory_rejection: DEFAULT_REJECTION_THRESHOLD,
            memory_cancellation: DEFAULT_CANCELLATION_THRESHOLD,
        }
    }
}

impl NodeThresholds {
    /// Returns the node-level rejection threshold of `resource`.
    pub fn rejection(&self, resource: ResourceType) -> f64 {
        match resource {
            ResourceType::Cpu => self.cpu_rejection,
            ResourceType::Memory => self.memory_rejection,
        }
    }

    /// Returns the node-level cancellation threshold of `resource`.
    pub fn cancellation(&self, resource: ResourceType) -> f64 {
        match resource {
            ResourceType::Cpu => self.cpu_cancellation,
            ResourceType::Memory => self.memory_cancellation,
        }
    }
}

/// What enforcement needs to know about one group: its id, resiliency mode and limits.
///
/// Borrowed from a [`WorkloadGroup`] with [`GroupPolicy::of`], or built for the DEFAULT group
/// with [`GroupPolicy::default_group`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupPolicy<'a> {
    /// The group's `_id`.
    pub id: &'a str,
    /// How the group reacts to overrunning its share.
    pub resiliency_mode: ResiliencyMode,
    /// The group's shares; a resource without a limit is never enforced.
    pub resource_limits: ResourceLimits,
}

impl<'a> GroupPolicy<'a> {
    /// Returns a policy from its parts.
    pub fn new(id: &'a str, resiliency_mode: ResiliencyMode, limits: ResourceLimits) -> Self {
        GroupPolicy {
            id,
            resiliency_mode,
            resource_limits: limits,
        }
    }

    /// Returns the policy of a stored group.
    pub fn of(group: &'a WorkloadGroup) -> Self {
        GroupPolicy::new(&group.id, group.resiliency_mode, group.resource_limits)
    }

    /// Returns the policy of `DEFAULT_WORKLOAD_GROUP`: no limits, never enforced.
    pub fn default_group() -> GroupPolicy<'static> {
        GroupPolicy::new(
            DEFAULT_WORKLOAD_GROUP_ID,
            ResiliencyMode::Soft,
            ResourceLimits::default(),
        )
    }

    /// Returns whether this is `DEFAULT_WORKLOAD_GROUP`, which is never rejected or cancelled.
    pub fn is_default(&self) -> bool {
        self.id == DEFAULT_WORKLOAD_GROUP_ID
    }
}

/// Returns a resource's Java enum name (`CPU`, `MEMORY`), as OpenSearch prints it in the
/// rejection message (facts §6.2).
pub(crate) fn resource_enum_name(resource: ResourceType) -> &'static str {
    match resource {
        ResourceType::Cpu => "CPU",
        ResourceType::Memory => "MEMORY",
    }
}

/// Returns a resiliency mode's Java enum name (`SOFT`, `ENFORCED`, `MONITOR`), as OpenSearch
/// prints it in the rejection message (facts §6.2).
pub(crate) fn mode_enum_name(mode: ResiliencyMode) -> &'static str {
    match mode {
        ResiliencyMode::Soft => "SOFT",
        ResiliencyMode::Enforced => "ENFORCED",
        ResiliencyMode::Monitor => "MONITOR",
    }
}

/// Formats a double as Java's `Double.toString` does (the wire crate's one formatter), so
/// messages that embed usages and limits read as OpenSearch's.
pub use sluice_wire::java_double;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_wlm_mode_parses_exact_wire_names_only() {
        for m in [WlmMode::Enabled, WlmMode::MonitorOnly, WlmMode::Disabled] {
            assert_eq!(WlmMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(WlmMode::parse("ENABLED"), None);
        assert_eq!(WlmMode::default(), WlmMode::MonitorOnly);
        assert!(WlmMode::Enabled.acts() && !WlmMode::MonitorOnly.acts());
        assert!(WlmMode::MonitorOnly.runs_enforcement_loop());
        assert!(!WlmMode::Disabled.runs_enforcement_loop());
    }

    #[test]
    fn test_default_group_policy_is_default_and_unlimited() {
        let d = GroupPolicy::default_group();
        assert!(d.is_default());
        assert!(d.resource_limits.is_empty());
        assert!(!GroupPolicy::new("g", ResiliencyMode::Soft, d.resource_limits).is_default());
    }
}
