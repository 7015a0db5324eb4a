//! How `resource_limits` apply on a gateway (DESIGN D15; ARCHITECTURE.md "Gateway").
//!
//! A gateway cannot read the CPU time or the allocations of a search that runs on the upstream
//! cluster's threads. It can see what it holds: each forwarded search occupies one of the
//! upstream's search threads from the moment it is sent until its answer's headers arrive.
//! So on a gateway:
//!
//! - **cpu**: a group's CPU usage is its forwarded searches in flight as a fraction of the
//!   upstream's search threads (`backend.upstream.search_threads`, or the sum of
//!   `thread_pool.search.size` that the upstream's `_nodes/thread_pool` reports at start). A
//!   task in flight for `t` is recorded as `t × cores / search_threads` of CPU time, so the
//!   enforcement pass, the admission share check and the per-task estimate — all of which
//!   divide CPU time by wall time and the node's cores — see `1 / search_threads` per search
//!   in flight, unchanged;
//! - **memory**: nothing the gateway sees measures it, so a `memory` limit is refused on
//!   create and update (400 naming `resource_limits.memory`), and a stored group with one
//!   stops a gateway's start-up: a limit that would silently have no effect is never accepted.

use std::sync::Arc;
use std::time::Instant;

use sluice_core::{CoreError, WorkloadGroup};

use crate::tasks::Task;

/// The in-flight measure of a gateway (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    /// The gateway's cores, the unit the enforcement divides CPU time by.
    pub cores: u32,
    /// The upstream's search threads, the capacity a search in flight takes one of.
    pub search_threads: u32,
}

impl InFlight {
    /// The CPU time a search in flight since `since` counts as at `now`.
    pub fn cpu_nanos(&self, since: Instant, now: Instant) -> u64 {
        let wall = now.saturating_duration_since(since).as_nanos();
        let scaled = wall * u128::from(self.cores) / u128::from(self.search_threads.max(1));
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    /// Records the measure on every forwarded task in flight (those a gateway marked
    /// executing), before the enforcement reads the tasks' usage.
    pub fn record(&self, tasks: &[Arc<Task>], now: Instant) {
        for task in tasks {
            if let Some(since) = task.usage.executing_since() {
                task.usage.record(self.cpu_nanos(since, now), 0);
            }
        }
    }
}

/// Refuses a group limit a gateway cannot enforce (`memory`; see the module docs).
pub fn check_group(group: &WorkloadGroup) -> Result<(), CoreError> {
    match group.resource_limits.memory {
        Some(_) => Err(CoreError::Validation {
            field: "resource_limits.memory".to_string(),
            message: format!(
                "workload group [{}]: resource_limits.memory cannot be enforced by a gateway (backend.type: upstream): the memory a search uses is spent on the upstream cluster, which the gateway cannot measure; use a cpu limit (measured as searches in flight over the upstream's search threads) or throttling.node_limit",
                group.name
            ),
        }),
        None => Ok(()),
    }
}

/// The stored groups a gateway cannot start with (a `memory` limit), as a start-up error.
pub fn check_stored(groups: &[WorkloadGroup]) -> anyhow::Result<()> {
    let refused: Vec<&str> = groups
        .iter()
        .filter(|g| check_group(g).is_err())
        .map(|g| g.name.as_str())
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "workload groups [{}] have a resource_limits.memory, which a gateway (backend.type: upstream) cannot enforce: the memory a search uses is spent on the upstream cluster; remove the memory limits (PUT _wlm/workload_group/<name> with a cpu limit on an embedded node) or run this node with backend.type: embedded",
        refused.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn test_a_search_in_flight_counts_as_one_upstream_search_thread() {
        let m = InFlight {
            cores: 2,
            search_threads: 8,
        };
        let t0 = Instant::now();
        let cpu = m.cpu_nanos(t0, t0 + Duration::from_secs(4));
        // Share = cpu / (wall × cores) = 1 / search_threads.
        let share = cpu as f64 / (4e9 * 2.0);
        assert!((share - 1.0 / 8.0).abs() < 1e-9, "{share}");
        assert_eq!(m.cpu_nanos(t0 + Duration::from_secs(1), t0), 0);
    }
}
