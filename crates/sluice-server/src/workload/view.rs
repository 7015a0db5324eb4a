//! The node's view of the workload groups and tagging rules: one consistent snapshot, read by
//! the request path without touching storage.

use std::collections::HashMap;
use std::sync::Arc;

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
}

impl GroupEntry {
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

/// One consistent snapshot of the groups and rules.
#[derive(Debug)]
pub struct View {
    /// The groups by id, DEFAULT excluded.
    pub groups: HashMap<String, Arc<GroupEntry>>,
    /// The tagging rules.
    pub rules: Vec<Rule>,
}
