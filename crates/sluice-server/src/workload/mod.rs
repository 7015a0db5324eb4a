//! Workload management at run time: the node's view of the workload groups and tagging rules,
//! and the per-group stats counters.
//!
//! The groups and rules are stored in the metastore (`api::wlm`, `api::rules`); this module
//! keeps an in-memory [`View`] of them ([`view`]), swapped whole after every write on this node
//! and at start, so the request path reads them without touching storage. Stats ([`stats`])
//! live beside the view, keyed by group id: they survive view swaps, start at zero when a group
//! appears, and vanish when it is deleted (as OpenSearch resets a deleted group's counters);
//! the end of a task of a deleted group counts in DEFAULT ([`Workload::end_stats`]), as
//! OpenSearch counts the completion of a task whose group is no longer active.
//! Which group a request lands in is admission's step ([`crate::admission::tag`]).
//!
//! # Invariants
//! - The stats object a request counts into is the one of the group it was tagged with, fixed
//!   at tagging time: a rejection is never counted against DEFAULT because a group was being
//!   registered at that moment (seed 001's second review comment).
//! - DEFAULT always exists and always has stats.
//! - A throttle that cannot apply on this node (per username or role while `auth.type` is
//!   `none`, e.g. after a restart without authentication) is never silent: each view install
//!   logs a WARN naming the group, and `_wlm/stats` shows it on the group
//!   ([`GroupEntry::inactive_throttle`]).

pub mod probe;
pub mod stats;
pub mod view;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use sluice_core::permits::{GroupQueue, PermitTable};
use sluice_core::search_settings::GroupSearchSettings;
use sluice_core::{ResiliencyMode, Rule, WorkloadGroup};

pub use probe::{BucketProbe, ProbeGuard};
pub use stats::{Counter, GroupStats, ResourceStats};
pub use view::{GroupEntry, View};

use crate::error::ApiResult;

/// The id (and name) of the group every untagged request belongs to.
pub use sluice_wire::DEFAULT_GROUP_ID;

/// The request header that tags a request with a group id.
pub use sluice_wire::WORKLOAD_GROUP_ID_HEADER as GROUP_HEADER;

/// The generation the next view installed takes, in any node of the process: a thread's cached
/// view is found by its generation alone, so one node's can never be read for another's.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The view this thread read last, with its generation ([`Workload::with_view`]).
    static CACHED_VIEW: RefCell<Option<(u64, Arc<View>)>> = const { RefCell::new(None) };
}

/// The node's workload-management state: groups, rules, stats.
pub struct Workload {
    view: RwLock<Arc<View>>,
    /// The generation of the view installed last (`NEXT_GENERATION`), written with it under
    /// the view's write lock: a thread whose cached view has it reads that view without the
    /// lock ([`Workload::with_view`]).
    generation: AtomicU64,
    default: Arc<GroupEntry>,
    /// Stats by group id, kept across view swaps.
    stats: Mutex<HashMap<String, Arc<GroupStats>>>,
    /// Serializes reloads, so the last one installed read the store last.
    reload: tokio::sync::Mutex<()>,
    /// The node-tier throttle's permits per bucket.
    pub permits: PermitTable,
    /// Records per-bucket concurrency as the search threads see it, once enabled (a
    /// diagnostics hook the stress tests use to check the throttle from the outside).
    pub probe: std::sync::OnceLock<Arc<BucketProbe>>,
    /// Whether the node authenticates requests: without it, per-username and per-role
    /// throttles cannot apply.
    auth_enabled: bool,
    /// The queue handle of each throttled group (its live `node_limit` and parked counts), by
    /// group id: made when the group's throttle starts acting, kept across view swaps (each
    /// view's [`GroupEntry::queue`] shares it), and released — its backlog admitted — when the
    /// group stops acting or the mode leaves `enabled`.
    queues: Mutex<HashMap<String, Arc<GroupQueue>>>,
    /// Notified each time a view is installed (a group created, changed or deleted here or on
    /// another node, the mode leaving `enabled`): requests waiting for their group's share
    /// ([`crate::admission::share::wait_for_share`]) check again, against the group as it is
    /// now.
    pub changed: tokio::sync::Notify,
}

impl Workload {
    /// An empty view: no groups, no rules, DEFAULT only. `auth_enabled`: whether the node
    /// authenticates requests (`auth.type` other than `none`).
    pub fn new(auth_enabled: bool) -> Workload {
        Workload {
            auth_enabled,
            queues: Mutex::new(HashMap::new()),
            view: RwLock::new(Arc::new(View {
                groups: view::GroupMap::default(),
                rules: Vec::new(),
            })),
            generation: AtomicU64::new(NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)),
            default: Arc::new(GroupEntry {
                id: Arc::from(DEFAULT_GROUP_ID),
                group: None,
                stats: Arc::new(GroupStats::default()),
                inactive_throttle: None,
                queue: None,
                search: GroupSearchSettings::default(),
            }),
            stats: Mutex::new(HashMap::new()),
            reload: tokio::sync::Mutex::new(()),
            permits: PermitTable::new(),
            probe: std::sync::OnceLock::new(),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// The current view.
    pub fn view(&self) -> Arc<View> {
        self.view.read().clone()
    }

    /// `f` of the current view, read from the view this thread cached while no other was
    /// installed since: a search's tagging then writes no line the other threads write (the
    /// view's lock word and reference count, four writes a search; BENCHMARKS.md "Atomics a
    /// search"). A view installed on another thread just before is read as `view` reads it
    /// before the install's write lock: the one before.
    pub fn with_view<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        let current = self.generation.load(Ordering::Acquire);
        CACHED_VIEW.with(|cached| {
            if let Ok(c) = cached.try_borrow()
                && let Some((generation, view)) = c.as_ref()
                && *generation == current
            {
                return f(view);
            }
            let (generation, view) = {
                let v = self.view.read();
                (self.generation.load(Ordering::Acquire), v.clone())
            };
            let out = f(&view);
            // Not while an outer call on this thread reads it (`f` reading the view again).
            if let Ok(mut c) = cached.try_borrow_mut() {
                *c = Some((generation, view));
            }
            out
        })
    }

    /// The DEFAULT group.
    pub fn default_entry(&self) -> &Arc<GroupEntry> {
        &self.default
    }

    /// The stats a task of `entry` counts its end in (`total_completions`, `failures`): its
    /// group's, or DEFAULT's once the group is deleted — OpenSearch's `onTaskCompleted` counts
    /// a task of a group no longer active in DEFAULT (facts §6.1), so the groups' completions
    /// still add up to what the clients were answered.
    pub fn end_stats<'a>(&'a self, entry: &'a GroupEntry) -> &'a GroupStats {
        if entry.stats.is_retired() {
            &self.default.stats
        } else {
            &entry.stats
        }
    }

    /// The group with id `id`, DEFAULT included.
    pub fn entry(&self, id: &str) -> Option<Arc<GroupEntry>> {
        if id == DEFAULT_GROUP_ID {
            return Some(self.default.clone());
        }
        self.view.read().groups.get(id).cloned()
    }

    /// Installs the groups and rules `load` reads, serialized with other reloads so the last
    /// one installed read the store last (see [`crate::catalog::reload`]).
    ///
    /// # Cancel safety
    /// Dropping the future before it installs leaves the old view in place.
    pub async fn reload_with(
        &self,
        load: impl std::future::Future<Output = ApiResult<(Vec<WorkloadGroup>, Vec<Rule>)>>,
    ) -> ApiResult<()> {
        let _serial = self.reload.lock().await;
        let (groups, rules) = load.await?;
        self.install(groups, rules);
        Ok(())
    }

    /// Installs `groups` and `rules` as the view; stats of groups that are gone are dropped. A
    /// per-username or per-role throttle that cannot apply because the node does not
    /// authenticate is logged at WARN, once per install, naming the group.
    ///
    /// Queue handles follow the view: a group whose throttle still acts keeps its handle, gets
    /// its live `node_limit` and has its waiters drained up to it (a raised limit admits that
    /// many at once); a group deleted, unthrottled or switched to `monitor` has its handle
    /// released — every parked request runs without a permit (issue #11 B.5).
    pub fn install(&self, groups: Vec<WorkloadGroup>, rules: Vec<Rule>) {
        let mut stats = self.stats.lock();
        let mut queues = self.queues.lock();
        stats.retain(|id, s| {
            let kept = groups.iter().any(|g| &g.id == id);
            if !kept {
                s.retire();
            }
            kept
        });
        let (mut kept, mut drained) = (HashMap::new(), Vec::new());
        let groups = groups
            .into_iter()
            .map(|g| {
                let s = stats.entry(g.id.clone()).or_default().clone();
                let inactive_throttle = self.inactive_throttle(&g);
                if let Some(reason) = &inactive_throttle {
                    tracing::warn!(group = %g.name, id = %g.id, "{reason}");
                }
                let queue = acting_limit(&g).map(|limit| {
                    let q = match queues.remove(&g.id) {
                        Some(q) if !q.is_released() => {
                            q.set_node_limit(limit);
                            drained.push(q.clone());
                            q
                        }
                        _ => GroupQueue::new(limit),
                    };
                    kept.insert(g.id.clone(), q.clone());
                    q
                });
                s.set_queue(queue.clone());
                if queue.is_none() {
                    // Not throttled now: paced again later, it starts from a fresh quota.
                    *s.quota.lock() = None;
                }
                let entry = GroupEntry {
                    id: Arc::from(g.id.as_str()),
                    search: GroupSearchSettings::of(Some(&g.settings)),
                    group: Some(g),
                    stats: s,
                    inactive_throttle,
                    queue,
                };
                (entry.id.to_string(), Arc::new(entry))
            })
            .collect();
        let released = std::mem::replace(&mut *queues, kept);
        {
            let mut view = self.view.write();
            *view = Arc::new(View { groups, rules });
            // With the view, under its lock: a generation read under the read lock is its
            // view's (`with_view`).
            self.generation.store(
                NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
                Ordering::Release,
            );
        }
        drop(queues);
        drop(stats);
        self.changed.notify_waiters();
        for q in released.into_values() {
            self.permits.release_group(&q);
        }
        for q in drained {
            self.permits.drain_group(&q);
        }
    }

    /// Releases the backlog of every group (the mode left `enabled`): every parked request runs
    /// without a permit. The view is installed again with fresh handles, for when the mode comes
    /// back.
    ///
    /// # Cancel safety
    /// Dropping the future before it takes the reload lock changes nothing; after, it runs to
    /// its end without waiting.
    pub async fn release_all_queues(&self) {
        let _serial = self.reload.lock().await;
        let released: Vec<Arc<GroupQueue>> = self.queues.lock().drain().map(|(_, q)| q).collect();
        for q in &released {
            self.permits.release_group(q);
        }
        let view = self.view();
        let groups = view
            .groups
            .values()
            .filter_map(|e| e.group.clone())
            .collect();
        self.install(groups, view.rules.clone());
    }

    /// Why `group`'s throttle cannot apply on this node, if it cannot: it counts per username
    /// or role, and the node does not authenticate, so no request has a principal to key on
    /// (the throttle was validated while authentication was on, and the node restarted with
    /// `auth.type: none`).
    fn inactive_throttle(&self, group: &WorkloadGroup) -> Option<String> {
        let attribute = group.throttling.attribute?;
        if self.auth_enabled || !attribute.needs_principal() || !group.throttling.is_enabled() {
            return None;
        }
        Some(format!(
            "workload group [{}] throttles per [{}], but auth.type is none: no request has a principal, so its limits do not apply; configure authentication or change throttling.attribute",
            group.name,
            attribute.as_str()
        ))
    }
}

/// The node allowance of a group whose throttle acts (throttling set, not `monitor`): its
/// `node_limit`, 0 on a shared-only group (every request then goes to the shared tier).
fn acting_limit(group: &WorkloadGroup) -> Option<u64> {
    if group.resiliency_mode == ResiliencyMode::Monitor || !group.throttling.is_enabled() {
        return None;
    }
    Some(u64::from(group.throttling.node_allowance()))
}

/// An enforced group `id` with a quarter of the CPU, for tests.
#[cfg(test)]
pub(crate) fn test_group(id: &str) -> WorkloadGroup {
    use sluice_core::{ResiliencyMode, ResourceLimits};
    WorkloadGroup {
        id: id.into(),
        name: id.into(),
        resiliency_mode: ResiliencyMode::Enforced,
        resource_limits: ResourceLimits {
            cpu: Some(0.25),
            memory: None,
        },
        settings: Default::default(),
        throttling: Default::default(),
        queue: Default::default(),
        updated_at: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(id: &str) -> WorkloadGroup {
        test_group(id)
    }

    fn ids(w: &Workload) -> Vec<String> {
        let mut ids = w.with_view(|v| v.groups.keys().cloned().collect::<Vec<_>>());
        ids.sort();
        ids
    }

    #[test]
    fn test_a_threads_cached_view_follows_each_install() {
        let w = Workload::new(false);
        assert!(ids(&w).is_empty());
        w.install(vec![group("a")], Vec::new());
        assert_eq!(ids(&w), ["a"]);
        // Read again from the cache, then replaced by the next install.
        assert_eq!(ids(&w), ["a"]);
        w.install(vec![group("a"), group("b")], Vec::new());
        assert_eq!(ids(&w), ["a", "b"]);
        // Installed on another thread: this thread's cache does not hide it.
        std::thread::scope(|s| {
            s.spawn(|| w.install(vec![group("c")], Vec::new()));
        });
        assert_eq!(ids(&w), ["c"]);
    }

    #[test]
    fn test_two_nodes_on_one_thread_never_read_each_others_view() {
        let (one, two) = (Workload::new(false), Workload::new(false));
        one.install(vec![group("one")], Vec::new());
        two.install(vec![group("two")], Vec::new());
        for _ in 0..2 {
            assert_eq!(ids(&one), ["one"]);
            assert_eq!(ids(&two), ["two"]);
        }
        // A node dropped and another made in its place starts with its own view.
        drop(one);
        let three = Workload::new(false);
        assert!(ids(&three).is_empty());
    }

    #[test]
    fn test_a_view_read_within_a_view_read_is_the_same() {
        let w = Workload::new(false);
        w.install(vec![group("a")], Vec::new());
        let inner = w.with_view(|outer| {
            let n = outer.groups.len();
            (n, w.with_view(|v| v.groups.len()))
        });
        assert_eq!(inner, (1, 1));
    }
}
