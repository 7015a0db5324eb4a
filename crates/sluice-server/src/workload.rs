//! Workload management at run time: the node's view of the workload groups and tagging rules,
//! the per-group stats counters, and tagging — which group a request lands in.
//!
//! The groups and rules are stored in the metastore (`api::wlm`, `api::rules`); this module
//! keeps an in-memory [`View`] of them, swapped whole after every write on this node and at
//! start, so the request path reads them without touching storage. Stats live beside the view,
//! keyed by group id: they survive view swaps, start at zero when a group appears, and vanish
//! when it is deleted (as OpenSearch resets a deleted group's counters).
//!
//! # Tagging (DESIGN D5, facts §6.1 and §7.3)
//! 1. A `workloadGroupId` header naming an existing group id selects it.
//! 2. A header naming no group fails open: the request runs in `DEFAULT_WORKLOAD_GROUP`, the
//!    response carries a `Warning` header naming the id, the event is logged (WARN) and counted
//!    (`total_unknown_group_tags` on the DEFAULT group's stats).
//! 3. Without a header, the tagging rules pick a group ([`sluice_core::match_rules`]: username
//!    beats role beats index pattern, longest prefix wins, a tie assigns nothing) unless the
//!    mode is `disabled` (OpenSearch skips its auto-tagging filter then).
//! 4. Otherwise, and when a rule names a group that no longer exists, `DEFAULT_WORKLOAD_GROUP`.
//!
//! A child task (an `_msearch` item, a nested search) inherits its parent's group.
//!
//! # Invariants
//! - The stats object a request counts into is the one of the group it was tagged with, fixed
//!   at tagging time: a rejection is never counted against DEFAULT because a group was being
//!   registered at that moment (seed 001's second review comment).
//! - DEFAULT always exists and always has stats.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use sluice_core::permits::{Permit, PermitTable};
use sluice_core::{BucketKey, RequestAttributes, ResourceType, Rule, WorkloadGroup, match_rules};
use sluice_engine::{EngineError, SearchRequest};
use sluice_meta::MetaStore;

use crate::error::ApiResult;

/// The id (and name) of the group every untagged request belongs to.
pub use sluice_wire::DEFAULT_GROUP_ID;

/// The request header that tags a request with a group id.
pub use sluice_wire::WORKLOAD_GROUP_ID_HEADER as GROUP_HEADER;

/// A cumulative counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Raises the value to `n` if it is lower.
    pub fn raise_to(&self, n: u64) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Per-resource figures of a group.
#[derive(Debug, Default)]
pub struct ResourceStats {
    /// The last usage the enforcement loop computed, as `f64` bits (a fraction of the node).
    current_usage: AtomicU64,
    /// Tasks cancelled because of this resource.
    pub cancellations: Counter,
    /// Requests rejected because of this resource.
    pub rejections: Counter,
}

impl ResourceStats {
    /// The last recorded usage.
    pub fn current_usage(&self) -> f64 {
        f64::from_bits(self.current_usage.load(Ordering::Relaxed))
    }

    /// Records a new usage.
    pub fn set_current_usage(&self, v: f64) {
        self.current_usage.store(v.to_bits(), Ordering::Relaxed);
    }
}

/// The counters of one group on this node (DESIGN D10). All relaxed atomics: each is an
/// independent tally, read only for reporting.
#[derive(Debug, Default)]
pub struct GroupStats {
    /// Tasks of the group that ended, successfully or not.
    pub total_completions: Counter,
    /// Requests rejected by the resource check.
    pub total_rejections: Counter,
    /// Tasks cancelled by the enforcement loop.
    pub total_cancellations: Counter,
    /// Tasks that ended with an error.
    pub failures: Counter,
    /// Requests rejected by a throttle.
    pub total_throttled: Counter,
    /// Throttle breaches admitted because of `monitor_only` or a `monitor` group.
    pub total_would_throttle: Counter,
    /// Requests parked in a queue.
    pub total_queued: Counter,
    /// Requests rejected because the queue was full.
    pub total_queue_rejections: Counter,
    /// Requests parked right now.
    pub queued_current: Counter,
    /// The most requests ever parked at once.
    pub queue_peak: Counter,
    /// Parked requests that left the queue (admitted or gone).
    pub queue_wait_count: Counter,
    /// Their total wait.
    pub total_queue_wait_millis: Counter,
    /// The longest wait.
    pub max_queue_wait_millis: Counter,
    /// Requests whose `workloadGroupId` header named no group (counted on DEFAULT only).
    pub total_unknown_group_tags: Counter,
    /// Tasks of the group executing on a search thread right now.
    executing: AtomicU64,
    /// The most tasks of the group ever seen executing at once.
    pub peak_executing: Counter,
    /// CPU figures.
    pub cpu: ResourceStats,
    /// Memory figures.
    pub memory: ResourceStats,
    /// Tasks admitted and not measured yet, and what one task of the group uses: what the
    /// admission check adds to `current_usage` (sluice's own, see
    /// [`sluice_core::resources::unmeasured`]).
    pub unmeasured: Arc<sluice_core::resources::UnmeasuredTasks>,
}

impl GroupStats {
    /// The figures of `resource`.
    pub fn resource(&self, resource: ResourceType) -> &ResourceStats {
        match resource {
            ResourceType::Cpu => &self.cpu,
            ResourceType::Memory => &self.memory,
        }
    }

    /// A task of the group started executing.
    pub fn executing_started(&self) {
        let now = self.executing.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak_executing.raise_to(now);
    }

    /// A task of the group stopped executing.
    pub fn executing_ended(&self) {
        self.executing.fetch_sub(1, Ordering::AcqRel);
    }

    /// Tasks of the group executing right now.
    pub fn executing(&self) -> u64 {
        self.executing.load(Ordering::Acquire)
    }

    /// The `_wlm/stats` object of this group: OpenSearch's fields first, then sluice's
    /// throttle and queue figures.
    pub fn to_json(&self, is_default: bool) -> Value {
        let resource = |r: &ResourceStats| {
            json!({
                "current_usage": r.current_usage(),
                "cancellations": r.cancellations.get(),
                "rejections": r.rejections.get(),
            })
        };
        let mut v = json!({
            "total_completions": self.total_completions.get(),
            "total_rejections": self.total_rejections.get(),
            "total_cancellations": self.total_cancellations.get(),
            "failures": self.failures.get(),
            "total_throttled": self.total_throttled.get(),
            "total_would_throttle": self.total_would_throttle.get(),
            "total_queued": self.total_queued.get(),
            "total_queue_rejections": self.total_queue_rejections.get(),
            "queued_current": self.queued_current.get(),
            "queue_peak": self.queue_peak.get(),
            "queue_wait_count": self.queue_wait_count.get(),
            "total_queue_wait_millis": self.total_queue_wait_millis.get(),
            "max_queue_wait_millis": self.max_queue_wait_millis.get(),
            "executing": self.executing(),
            "peak_executing": self.peak_executing.get(),
            "cpu": resource(&self.cpu),
            "memory": resource(&self.memory),
        });
        if is_default {
            v["total_unknown_group_tags"] = json!(self.total_unknown_group_tags.get());
        }
        v
    }
}

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

/// Where a request landed.
#[derive(Debug, Clone)]
pub struct Tagged {
    /// The group.
    pub entry: Arc<GroupEntry>,
    /// How it was chosen, for logs and task details.
    pub source: TagSource,
}

/// How a request's group was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagSource {
    /// The `workloadGroupId` header.
    Header,
    /// A tagging rule.
    Rule,
    /// Inherited from the parent task.
    Parent,
    /// Nothing selected a group.
    Default,
    /// The header named no existing group.
    UnknownHeader,
}

/// The node's workload-management state: groups, rules, stats.
pub struct Workload {
    view: RwLock<Arc<View>>,
    default: Arc<GroupEntry>,
    /// Stats by group id, kept across view swaps.
    stats: Mutex<HashMap<String, Arc<GroupStats>>>,
    /// Serializes reloads, so the last one installed read the store last.
    reload: tokio::sync::Mutex<()>,
    /// The node-tier throttle's permits per bucket.
    pub permits: PermitTable,
    /// Records per-bucket concurrency as the search threads see it, once enabled (a
    /// diagnostics hook the stress tests use to check the throttle from the outside).
    pub probe: std::sync::OnceLock<BucketProbe>,
}

/// Counts, per throttle bucket, the admitted requests executing on search threads at once,
/// and the peak: what actually ran, independent of the permit table's own bookkeeping.
#[derive(Debug, Default)]
pub struct BucketProbe {
    buckets: Mutex<HashMap<BucketKey, (u64, u64)>>,
}

impl BucketProbe {
    /// A request of `key` starts executing; returns a guard that ends it.
    pub fn enter(&self, key: &BucketKey) -> ProbeGuard<'_> {
        let mut b = self.buckets.lock();
        let e = b.entry(key.clone()).or_default();
        e.0 += 1;
        e.1 = e.1.max(e.0);
        ProbeGuard {
            probe: self,
            key: key.clone(),
        }
    }

    /// The peak per bucket.
    pub fn peaks(&self) -> Vec<(BucketKey, u64)> {
        self.buckets
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.1))
            .collect()
    }

    /// Requests executing now, over all buckets.
    pub fn executing(&self) -> u64 {
        self.buckets.lock().values().map(|v| v.0).sum()
    }
}

/// Ends one execution recorded by [`BucketProbe::enter`].
#[derive(Debug)]
pub struct ProbeGuard<'a> {
    probe: &'a BucketProbe,
    key: BucketKey,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(e) = self.probe.buckets.lock().get_mut(&self.key) {
            e.0 = e.0.saturating_sub(1);
        }
    }
}

impl Default for Workload {
    fn default() -> Self {
        Workload::new()
    }
}

impl Workload {
    /// An empty view: no groups, no rules, DEFAULT only.
    pub fn new() -> Workload {
        Workload {
            view: RwLock::new(Arc::new(View {
                groups: HashMap::new(),
                rules: Vec::new(),
            })),
            default: Arc::new(GroupEntry {
                id: Arc::from(DEFAULT_GROUP_ID),
                group: None,
                stats: Arc::new(GroupStats::default()),
            }),
            stats: Mutex::new(HashMap::new()),
            reload: tokio::sync::Mutex::new(()),
            permits: PermitTable::new(),
            probe: std::sync::OnceLock::new(),
        }
    }

    /// The current view.
    pub fn view(&self) -> Arc<View> {
        self.view.read().clone()
    }

    /// The DEFAULT group.
    pub fn default_entry(&self) -> &Arc<GroupEntry> {
        &self.default
    }

    /// The group with id `id`, DEFAULT included.
    pub fn entry(&self, id: &str) -> Option<Arc<GroupEntry>> {
        if id == DEFAULT_GROUP_ID {
            return Some(self.default.clone());
        }
        self.view.read().groups.get(id).cloned()
    }

    /// Re-reads groups and rules from `store` and installs them as the new view.
    ///
    /// # Cancel safety
    /// Dropping the future before it installs leaves the old view in place.
    pub async fn reload(&self, store: &dyn MetaStore) -> ApiResult<()> {
        let _serial = self.reload.lock().await;
        let groups = crate::api::wlm::load_groups(store).await?.items;
        let rules = crate::api::rules::load_rules(store).await?.items;
        self.install(groups, rules);
        Ok(())
    }

    /// Installs `groups` and `rules` as the view; stats of groups that are gone are dropped.
    pub fn install(&self, groups: Vec<WorkloadGroup>, rules: Vec<Rule>) {
        let mut stats = self.stats.lock();
        stats.retain(|id, _| groups.iter().any(|g| &g.id == id));
        let groups = groups
            .into_iter()
            .map(|g| {
                let s = stats.entry(g.id.clone()).or_default().clone();
                let entry = GroupEntry {
                    id: Arc::from(g.id.as_str()),
                    group: Some(g),
                    stats: s,
                };
                (entry.id.to_string(), Arc::new(entry))
            })
            .collect();
        *self.view.write() = Arc::new(View { groups, rules });
    }

    /// Tags a request (see the module docs). `header` is the `workloadGroupId` header value;
    /// `attrs` the request's indices and principal for the rules.
    pub fn tag(
        &self,
        header: Option<&str>,
        attrs: &RequestAttributes<'_>,
        mode: sluice_core::WlmMode,
    ) -> Tagged {
        let view = self.view();
        if let Some(id) = header {
            if id == DEFAULT_GROUP_ID {
                return Tagged {
                    entry: self.default.clone(),
                    source: TagSource::Header,
                };
            }
            return match view.groups.get(id) {
                Some(e) => Tagged {
                    entry: e.clone(),
                    source: TagSource::Header,
                },
                None => {
                    self.default.stats.total_unknown_group_tags.inc();
                    tracing::warn!(
                        workload_group_id = %id,
                        "request tagged with an unknown workload group id; running it in DEFAULT_WORKLOAD_GROUP"
                    );
                    add_warning(format!(
                        "workload group [{id}] does not exist; the request ran in [{DEFAULT_GROUP_ID}]"
                    ));
                    Tagged {
                        entry: self.default.clone(),
                        source: TagSource::UnknownHeader,
                    }
                }
            };
        }
        if mode != sluice_core::WlmMode::Disabled
            && let Some(id) = match_rules(&view.rules, attrs)
            && let Some(e) = view.groups.get(id)
        {
            return Tagged {
                entry: e.clone(),
                source: TagSource::Rule,
            };
        }
        Tagged {
            entry: self.default.clone(),
            source: TagSource::Default,
        }
    }
}

/// The effective search settings of a request after its group's `settings` bag is applied
/// (facts §3): a group value beats the cluster setting; an explicit request value beats the
/// group value unless the group sets `override_request_values: true`.
#[derive(Debug, Clone, Default)]
pub struct GroupSearchSettings {
    /// The id of the group the request runs in (`DEFAULT_WORKLOAD_GROUP` included).
    pub group_id: Option<Arc<str>>,
    /// `search.default_search_timeout`: `Some(None)` means the group sets `-1` (no timeout).
    pub timeout: Option<Option<std::time::Duration>>,
    /// `search.cancel_after_time_interval`, as `timeout`.
    pub cancel_after: Option<Option<std::time::Duration>>,
    /// `search.max_buckets`.
    pub max_buckets: Option<u32>,
    /// `override_request_values`.
    pub override_request: bool,
}

impl GroupSearchSettings {
    /// The settings of `entry`'s group (none for DEFAULT).
    pub fn of(entry: &GroupEntry) -> GroupSearchSettings {
        let Some(g) = &entry.group else {
            return GroupSearchSettings {
                group_id: Some(entry.id.clone()),
                ..GroupSearchSettings::default()
            };
        };
        let s = &g.settings;
        GroupSearchSettings {
            group_id: Some(entry.id.clone()),
            timeout: s.default_search_timeout().map(time_setting),
            cancel_after: s.cancel_after_time_interval().map(time_setting),
            max_buckets: s.max_buckets(),
            override_request: s.override_request_values(),
        }
    }

    /// Applies the group's timeout and bucket limit to a parsed search; `req.timeout` set means
    /// the request set it explicitly. `req.max_buckets` must already hold the cluster setting.
    pub fn apply_to_search(&self, req: &mut SearchRequest) {
        if let Some(t) = self.timeout
            && (req.timeout.is_none() || self.override_request)
        {
            req.timeout = t;
        }
        if let Some(b) = self.max_buckets {
            req.max_buckets = Some(b);
        }
    }

    /// The cancel-after interval of a task: `request` is the request's own
    /// `cancel_after_time_interval` (`Some(None)` for an explicit `-1`), `cluster` the cluster
    /// setting.
    pub fn cancel_after(
        &self,
        request: Option<Option<std::time::Duration>>,
        cluster: Option<std::time::Duration>,
    ) -> Option<std::time::Duration> {
        match (request, self.cancel_after) {
            (Some(r), None) => r,
            (Some(r), Some(g)) => {
                if self.override_request {
                    g
                } else {
                    r
                }
            }
            (None, Some(g)) => g,
            (None, None) => cluster,
        }
    }
}

fn time_setting(t: sluice_core::TimeSetting) -> Option<std::time::Duration> {
    match t {
        sluice_core::TimeSetting::Disabled => None,
        sluice_core::TimeSetting::After(d) => Some(d),
    }
}

/// What the request-scope middleware knows of the request being handled.
#[derive(Debug)]
pub struct RequestScope {
    /// The `workloadGroupId` header: `Ok(None)` when absent, `Err` when it cannot be used.
    header: Result<Option<String>, String>,
    /// `Warning` header values to add to the response.
    warnings: Mutex<Vec<String>>,
    /// Permit references dropped when the response has been built (DESIGN D9).
    permits: Mutex<Vec<Arc<Permit>>>,
}

tokio::task_local! {
    static SCOPE: Arc<RequestScope>;
}

/// The `workloadGroupId` header of the request being handled on this task: `Ok(None)` when it
/// has none (or outside a request), a 400 when it is repeated or not text.
pub fn group_header() -> Result<Option<String>, EngineError> {
    SCOPE
        .try_with(|s| s.header.clone())
        .unwrap_or(Ok(None))
        .map_err(EngineError::illegal_argument)
}

/// Adds a `Warning` header to the response of the request being handled on this task.
pub fn add_warning(text: String) {
    let _ = SCOPE.try_with(|s| s.warnings.lock().push(text));
}

/// Keeps a reference to `permit` until the response of the request being handled on this
/// task has been handed to the HTTP layer (or the request is dropped). Outside a request scope
/// it does nothing; the caller's own references decide.
pub fn hold_until_response(permit: Arc<Permit>) {
    let _ = SCOPE.try_with(|s| s.permits.lock().push(permit));
}

/// Middleware: reads the `workloadGroupId` header into the request scope and adds the
/// warnings raised while handling the request to the response, as OpenSearch formats them
/// (`299 OpenSearch-<version> "<text>"`).
pub async fn scope_request(req: Request, next: Next) -> Response {
    let values: Vec<&HeaderValue> = req.headers().get_all(GROUP_HEADER).iter().collect();
    let header = match values.as_slice() {
        [] => Ok(None),
        [one] => match one.to_str() {
            Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Ok(_) => Err(format!("the [{GROUP_HEADER}] header must not be empty")),
            Err(_) => Err(format!(
                "the [{GROUP_HEADER}] header must be visible ASCII text"
            )),
        },
        _ => Err(format!(
            "multiple values for single-valued header [{GROUP_HEADER}]"
        )),
    };
    let scope = Arc::new(RequestScope {
        header,
        warnings: Mutex::new(Vec::new()),
        permits: Mutex::new(Vec::new()),
    });
    let mut resp = SCOPE.scope(scope.clone(), next.run(req)).await;
    let warnings = std::mem::take(&mut *scope.warnings.lock());
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        let value = format!(
            "299 OpenSearch-{} \"{escaped}\"",
            crate::api::cluster::OPENSEARCH_COMPAT_VERSION
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut()
                .append(HeaderName::from_static("warning"), v);
        }
    }
    // The response is built: the request's permits go now, before the body is written out,
    // so the slot covers all of the request's work (D9).
    scope.permits.lock().clear();
    resp
}
