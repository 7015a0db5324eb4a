//! The node's view of the workload groups and tagging rules: one consistent snapshot, read by
//! the request path without touching storage.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::search_settings::GroupSearchSettings;
use sluice_core::{Rule, WorkloadGroup};

use super::{DEFAULT_GROUP_ID, GroupStats};

/// A group as the request path sees it: the stored group (none for DEFAULT), its id as a cheap
/// shared string, and its stats.
#[derive(Debug)]
pub struct GroupEntry {
    /// The group id (`DEFAULT_WORKLOAD_GROUP` for the default group).
    pub id: Arc<str>,
    /// The stored group; `None` for DEFAULT.
    pub group: Option<WorkloadGroup>,
    /// The group's counters on this node.
    pub stats: Arc<GroupStats>,
    /// Why the group's throttle cannot apply on this node, when it cannot (see
    /// [`super::Workload::install`]); shown by `_wlm/stats`.
    pub inactive_throttle: Option<String>,
    /// The group's queue handle (live `node_limit`, parked counts) while its throttle acts
    /// (throttling set, not `monitor`): shared across views, so admission reads it without a
    /// lookup.
    pub queue: Option<Arc<sluice_core::permits::GroupQueue>>,
    /// The group's search settings as its searches apply them, read once from the group's
    /// `search_settings` bag when the entry is built (every search of the group applies them:
    /// read per search, they cost a tagged search about 250 instructions).
    pub search: GroupSearchSettings,
}

impl GroupEntry {
    /// Whether requests of the group wait in a queue: mode `enabled`, a throttle that acts
    /// (throttling set, not `monitor`) and `queue.size_per_bucket` > 0.
    pub fn queues(&self, mode: sluice_core::WlmMode) -> bool {
        mode == sluice_core::WlmMode::Enabled
            && self.queue.is_some()
            && self
                .group
                .as_ref()
                .is_some_and(|g| g.queue.num_size_per_bucket() > 0)
    }

    /// The cpu limit of a group whose cpu share admission keeps by pacing — a queued
    /// `enforced` group with a cpu limit ([`sluice_core::resources::quota`]): its requests wait
    /// for CPU quota instead of being compared with its last usage, and the enforcement pass
    /// cancels its tasks only in duress, like a `soft` group's.
    pub fn paced_cpu_limit(&self, mode: sluice_core::WlmMode) -> Option<f64> {
        let g = self.group.as_ref()?;
        (self.queues(mode) && g.resiliency_mode == sluice_core::ResiliencyMode::Enforced)
            .then_some(g.resource_limits.cpu)
            .flatten()
    }

    /// Whether `enabled` would queue the group's requests, as the dry run judges it: a
    /// throttle set and `queue.size_per_bucket` > 0, a `monitor` group judged as the group
    /// it would be as `enforced` (as its would-cancel is). Its requests would then wait for
    /// the group's share rather than be rejected (`admission/share.rs` R3).
    pub fn would_queue(&self) -> bool {
        self.group
            .as_ref()
            .is_some_and(|g| g.throttling.is_enabled() && g.queue.num_size_per_bucket() > 0)
    }

    /// The cpu limit `enabled` would pace the group at, as the dry run judges it
    /// ([`Self::would_queue`], not `soft`): [`Self::paced_cpu_limit`] of the group it
    /// previews.
    pub fn would_pace_cpu_limit(&self) -> Option<f64> {
        let g = self.group.as_ref()?;
        (self.would_queue() && g.resiliency_mode != sluice_core::ResiliencyMode::Soft)
            .then_some(g.resource_limits.cpu)
            .flatten()
    }

    /// Charges what `usage` used since its last charge to the group's CPU quota while the group
    /// is paced (one that is queued but not paced drops its quota instead). Nothing for a group
    /// whose throttle does not act: no lock, no quota.
    pub fn charge_cpu(&self, usage: &crate::accounting::TaskUsage, mode: sluice_core::WlmMode) {
        if self.queue.is_none() {
            return;
        }
        let paced = self.paced_cpu_limit(mode).is_some();
        self.stats.charge_cpu(usage.take_uncharged_cpu(), paced);
    }

    /// Whether this is `DEFAULT_WORKLOAD_GROUP`.
    pub fn is_default(&self) -> bool {
        self.group.is_none()
    }

    /// The group name (`DEFAULT_WORKLOAD_GROUP` for the default group).
    pub fn name(&self) -> &str {
        self.group
            .as_ref()
            .map_or(DEFAULT_GROUP_ID, |g| g.name.as_str())
    }
}

/// The groups of a [`View`] by id.
pub type GroupMap = HashMap<String, Arc<GroupEntry>, foldhash::fast::RandomState>;

/// One consistent snapshot of the groups and rules.
#[derive(Debug)]
pub struct View {
    /// The groups by id, DEFAULT excluded. Looked up by every tagged request (its tagging
    /// and its admission): foldhash, not std's SipHash, which took some 400 instructions a
    /// tagged search. The keys are the ids of groups an operator created; a client's header
    /// only looks one up, so it cannot grow a chain.
    pub groups: GroupMap,
    /// The tagging rules.
    pub rules: Vec<Rule>,
}
