//! Node duress: a resource is in duress after `duress_streak` consecutive breaching
//! observations of the node's own usage (facts §6.5).
//!
//! The breaching comparison follows OpenSearch's two trackers exactly, including their
//! asymmetry: CPU breaches when `cpu_cancellation_threshold < process cpu` (strict), memory
//! when `memory_cancellation_threshold <= memory used` (inclusive). The threshold is the
//! node-level **cancellation** threshold; there is no separate duress setting.
//!
//! Unlike OpenSearch, where every soft-group rejection check also advances the streak, only
//! [`NodeDuressTracker::observe`] advances it and [`NodeDuressTracker::is_in_duress`] reads it,
//! so the streak counts the enforcement loop's observations (one per interval) and admission
//! traffic cannot push a node into duress faster. The loop observes once per pass, before
//! selecting, and admission reads the last verdict.

use super::NodeThresholds;
use crate::group::ResourceType;

/// Tracks one resource's streak of consecutive breaching node observations.
///
/// # Invariants
/// `streak` is the number of consecutive breaching observations since the last calm one
/// (saturating); the resource is in duress iff `streak >= max(duress_streak, 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeDuressTracker {
    resource: ResourceType,
    streak: u32,
}

impl NodeDuressTracker {
    /// Returns a calm tracker for `resource`.
    pub fn new(resource: ResourceType) -> Self {
        NodeDuressTracker {
            resource,
            streak: 0,
        }
    }

    /// Returns the tracked resource.
    pub fn resource(&self) -> ResourceType {
        self.resource
    }

    /// Returns whether one observation of the node's usage of this resource breaches the
    /// node-level cancellation `threshold`: strictly above for CPU, at or above for memory.
    /// A NaN on either side never breaches.
    pub fn breaches(&self, usage: f64, threshold: f64) -> bool {
        match self.resource {
            ResourceType::Cpu => threshold < usage,
            ResourceType::Memory => threshold <= usage,
        }
    }

    /// Records one observation of the node's usage (a fraction of the node: process CPU over
    /// all cores, or memory in use over the budget) and returns whether the resource is now in
    /// duress. A breaching observation extends the streak, a calm one resets it to zero.
    pub fn observe(&mut self, usage: f64, threshold: f64, duress_streak: u32) -> bool {
        self.streak = if self.breaches(usage, threshold) {
            self.streak.saturating_add(1)
        } else {
            0
        };
        self.is_in_duress(duress_streak)
    }

    /// Returns whether the last `duress_streak` observations all breached. A `duress_streak`
    /// of 0 (settings forbid it; the minimum is 3) is treated as 1, so a node is never in
    /// duress before any breaching observation.
    pub fn is_in_duress(&self, duress_streak: u32) -> bool {
        self.streak >= duress_streak.max(1)
    }

    /// Returns the current number of consecutive breaching observations.
    pub fn num_consecutive_breaches(&self) -> u32 {
        self.streak
    }
}

/// The node's duress trackers for CPU and memory; the node is in duress when either is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeDuressTrackers {
    /// The CPU tracker.
    pub cpu: NodeDuressTracker,
    /// The memory tracker.
    pub memory: NodeDuressTracker,
}

impl Default for NodeDuressTrackers {
    fn default() -> Self {
        NodeDuressTrackers {
            cpu: NodeDuressTracker::new(ResourceType::Cpu),
            memory: NodeDuressTracker::new(ResourceType::Memory),
        }
    }
}

impl NodeDuressTrackers {
    /// Records one observation of the node's CPU and memory usage against the node-level
    /// cancellation thresholds and returns whether the node is now in duress.
    pub fn observe(
        &mut self,
        cpu_usage: f64,
        memory_usage: f64,
        thresholds: &NodeThresholds,
        duress_streak: u32,
    ) -> bool {
        self.cpu
            .observe(cpu_usage, thresholds.cpu_cancellation, duress_streak);
        self.memory
            .observe(memory_usage, thresholds.memory_cancellation, duress_streak);
        self.is_node_in_duress(duress_streak)
    }

    /// Returns whether any resource is in duress.
    pub fn is_node_in_duress(&self, duress_streak: u32) -> bool {
        self.cpu.is_in_duress(duress_streak) || self.memory.is_in_duress(duress_streak)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_duress_starts_exactly_at_the_nth_consecutive_breach() {
        let mut t = NodeDuressTracker::new(ResourceType::Cpu);
        assert!(!t.observe(0.95, 0.9, 3));
        assert!(!t.observe(0.95, 0.9, 3));
        assert!(t.observe(0.95, 0.9, 3));
        assert!(t.observe(0.95, 0.9, 3));
        assert_eq!(t.num_consecutive_breaches(), 4);
    }

    #[test]
    fn test_calm_observation_resets_the_streak() {
        let mut t = NodeDuressTracker::new(ResourceType::Memory);
        t.observe(0.95, 0.9, 3);
        t.observe(0.95, 0.9, 3);
        assert!(!t.observe(0.5, 0.9, 3));
        assert_eq!(t.num_consecutive_breaches(), 0);
        assert!(!t.observe(0.95, 0.9, 3));
        assert!(!t.observe(0.95, 0.9, 3));
        assert!(t.observe(0.95, 0.9, 3));
        assert!(
            !t.observe(0.1, 0.9, 3),
            "duress ends on the first calm observation"
        );
    }

    #[test]
    fn test_cpu_breach_is_strict_and_memory_breach_inclusive() {
        let cpu = NodeDuressTracker::new(ResourceType::Cpu);
        let mem = NodeDuressTracker::new(ResourceType::Memory);
        assert!(!cpu.breaches(0.9, 0.9));
        assert!(cpu.breaches(0.900001, 0.9));
        assert!(mem.breaches(0.9, 0.9));
        assert!(!mem.breaches(0.899999, 0.9));
        assert!(!cpu.breaches(f64::NAN, 0.9) && !mem.breaches(f64::NAN, 0.9));
    }

    #[test]
    fn test_zero_streak_setting_still_needs_one_breach() {
        let mut t = NodeDuressTracker::new(ResourceType::Cpu);
        assert!(!t.is_in_duress(0));
        assert!(t.observe(1.0, 0.9, 0));
    }

    #[test]
    fn test_node_in_duress_when_either_resource_is() {
        let th = NodeThresholds::default();
        let mut n = NodeDuressTrackers::default();
        assert!(!n.observe(0.1, 0.95, &th, 2));
        assert!(n.observe(0.1, 0.95, &th, 2), "memory streak of 2");
        assert!(
            !n.observe(0.95, 0.1, &th, 2),
            "memory calm resets, cpu at 1"
        );
        assert!(n.observe(0.95, 0.1, &th, 2), "cpu streak of 2");
        assert!(n.is_node_in_duress(2) && !n.is_node_in_duress(3));
    }
}
