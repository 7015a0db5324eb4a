//! The node's side of resource enforcement that admission and the loop share: its capacity
//! (cores, memory budget), the state kept between passes, the last duress verdict (one atomic
//! load for admission), and the intervals read from a settings snapshot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_core::resources::{EnforcementState, NodeCapacity};

use crate::node_usage::ProcessCpu;
use crate::settings::{SettingsSnapshot, keys};

/// The node's enforcement: its capacity, the state kept between passes and the last duress
/// verdict.
#[derive(Debug)]
pub struct Enforcement {
    /// The zero of the `start_nanos` / `now_nanos` clock handed to the core.
    epoch: Instant,
    pub(super) capacity: NodeCapacity,
    /// What a pass keeps, locked for the whole pass (passes are serialized).
    pub(super) inner: Mutex<Inner>,
    /// The last pass's duress verdict, for admission. Relaxed: a standalone flag, stale by up to
    /// one interval by design (facts §6.2).
    pub(super) in_duress: AtomicBool,
    /// What the last pass read of the node, for the metrics endpoint and the dashboard.
    pub last_reading: Mutex<NodeReading>,
    /// Woken whenever the groups' usage has been recorded (every refresh and pass): requests
    /// of queued groups waiting for their share re-check then.
    pub usage_recorded: tokio::sync::Notify,
}

/// What the last enforcement pass read of the node: its usage, each a fraction of the node, and
/// which resources were in duress.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeReading {
    /// Process CPU over the last interval / cores.
    pub cpu: f64,
    /// Memory in use / the memory budget.
    pub memory: f64,
    /// Whether CPU was in duress (breached its threshold `duress_streak` passes in a row).
    pub cpu_in_duress: bool,
    /// Whether memory was in duress.
    pub memory_in_duress: bool,
}

/// What enforcement keeps between passes.
#[derive(Debug)]
pub(super) struct Inner {
    /// The duress trackers and the last verdict.
    pub(super) state: EnforcementState,
    /// The process CPU clock's last reading.
    pub(super) cpu: ProcessCpu,
    /// The running tasks already counted as would-be cancellations ([`super::dry_run`]).
    pub(super) would_cancel_seen: std::collections::HashSet<u64>,
}

impl Enforcement {
    /// Enforcement for a node with `memory_budget_bytes` and the cores this process may use.
    pub fn new(memory_budget_bytes: u64) -> Enforcement {
        let cores = std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX));
        Enforcement::with_capacity(NodeCapacity {
            cores,
            memory_budget_bytes,
        })
    }

    /// Enforcement for a node of the given capacity.
    pub fn with_capacity(capacity: NodeCapacity) -> Enforcement {
        Enforcement {
            epoch: Instant::now(),
            capacity,
            inner: Mutex::new(Inner {
                state: EnforcementState::default(),
                cpu: ProcessCpu::start(),
                would_cancel_seen: std::collections::HashSet::new(),
            }),
            in_duress: AtomicBool::new(false),
            last_reading: Mutex::new(NodeReading::default()),
            usage_recorded: tokio::sync::Notify::new(),
        }
    }

    /// What usage is a fraction of.
    pub fn capacity(&self) -> NodeCapacity {
        self.capacity
    }

    /// Whether the last pass found the node in duress.
    pub fn is_node_in_duress(&self) -> bool {
        self.in_duress.load(Ordering::Relaxed)
    }

    pub fn nanos_since_epoch(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// `wlm.workload_group.enforcement_interval` of a settings snapshot.
pub fn enforcement_interval(s: &SettingsSnapshot) -> Duration {
    Duration::from_millis(u64::try_from(s.integer(keys::WLM_ENFORCEMENT_INTERVAL)).unwrap_or(1))
}

/// `wlm.workload_group.usage_refresh_interval` of a settings snapshot, at most the
/// enforcement interval.
pub fn usage_refresh_interval(s: &SettingsSnapshot) -> Duration {
    let refresh = u64::try_from(s.integer(keys::WLM_USAGE_REFRESH_INTERVAL)).unwrap_or(1);
    Duration::from_millis(refresh).min(enforcement_interval(s))
}
