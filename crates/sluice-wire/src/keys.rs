//! Names on the wire: the request header that picks a workload group, the DEFAULT group's id,
//! and the setting keys shared by the cluster settings, the per-group settings bags and the
//! node configuration. Each is written here once; use sites name the constant.

/// The OpenSearch version sluice reports (`GET /`, `Warning` headers), so clients that check
/// it accept the node.
pub const OPENSEARCH_COMPAT_VERSION: &str = "3.3.0";

/// The request header that tags a request with a workload group id (OpenSearch's).
pub const WORKLOAD_GROUP_ID_HEADER: &str = "workloadGroupId";

/// The request header a client labels its requests with; OpenSearch echoes it on the
/// response and shows it on the request's tasks (`Task.X_OPAQUE_ID`, spelled as `_tasks`
/// lists it).
pub const OPAQUE_ID_HEADER: &str = "X-Opaque-Id";

/// The id (and name) of the group every untagged request runs in; OpenSearch's
/// `DEFAULT_WORKLOAD_GROUP_ID_SUPPLIER` value (facts §6.1), kept so stats and task listings
/// name it the same way. It is never rejected or cancelled (DESIGN D5).
pub const DEFAULT_GROUP_ID: &str = "DEFAULT_WORKLOAD_GROUP";

/// Cancels a search running longer than this; `-1` disables. A dynamic cluster setting, a
/// group setting and (without the `search.` prefix) a request parameter.
pub const SEARCH_CANCEL_AFTER_TIME_INTERVAL: &str = "search.cancel_after_time_interval";
/// The shard query timeout applied to a search that names none (a group setting).
pub const SEARCH_DEFAULT_SEARCH_TIMEOUT: &str = "search.default_search_timeout";
/// Most concurrent shard requests of one search (a group setting).
pub const SEARCH_MAX_CONCURRENT_SHARD_REQUESTS: &str = "search.max_concurrent_shard_requests";
/// Batched reduce size of one search (a group setting).
pub const SEARCH_BATCHED_REDUCE_SIZE: &str = "search.batched_reduce_size";
/// Most aggregation buckets one search may build (a cluster and a group setting).
pub const SEARCH_MAX_BUCKETS: &str = "search.max_buckets";
/// Most scroll contexts open at once on the node.
pub const SEARCH_MAX_OPEN_SCROLL_CONTEXT: &str = "search.max_open_scroll_context";
/// Keep-alive of a scroll context when the request names none.
pub const SEARCH_DEFAULT_KEEP_ALIVE: &str = "search.default_keep_alive";
/// Longest keep-alive a request may ask for.
pub const SEARCH_MAX_KEEP_ALIVE: &str = "search.max_keep_alive";

/// Workload management mode: `enabled`, `monitor_only` or `disabled`.
pub const WLM_MODE: &str = "wlm.workload_group.mode";
/// Node CPU usage (0..=0.9) above which new requests of over-limit groups are rejected.
pub const WLM_CPU_REJECTION_THRESHOLD: &str = "wlm.workload_group.node.cpu_rejection_threshold";
/// Node CPU usage (0..=0.95) above which tasks of over-limit groups are cancelled.
pub const WLM_CPU_CANCELLATION_THRESHOLD: &str =
    "wlm.workload_group.node.cpu_cancellation_threshold";
/// Node memory usage (0..=0.9) above which new requests of over-limit groups are rejected.
pub const WLM_MEMORY_REJECTION_THRESHOLD: &str =
    "wlm.workload_group.node.memory_rejection_threshold";
/// Node memory usage (0..=0.95) above which tasks of over-limit groups are cancelled.
pub const WLM_MEMORY_CANCELLATION_THRESHOLD: &str =
    "wlm.workload_group.node.memory_cancellation_threshold";
/// Milliseconds between two runs of the enforcement loop.
pub const WLM_ENFORCEMENT_INTERVAL: &str = "wlm.workload_group.enforcement_interval";
/// Milliseconds between two refreshes of the groups' usage that admission reads (sluice's
/// own; OpenSearch refreshes it only once per enforcement run).
pub const WLM_USAGE_REFRESH_INTERVAL: &str = "wlm.workload_group.usage_refresh_interval";
/// Whether admission counts the tasks admitted and not yet measured at their group's
/// per-task estimate (sluice's own).
pub const WLM_ESTIMATE_UNMEASURED_TASKS: &str = "wlm.workload_group.estimate_unmeasured_tasks";
/// Consecutive over-threshold observations before the node counts as in duress.
pub const WLM_DURESS_STREAK: &str = "wlm.workload_group.duress_streak";
/// How long a node waits for a shared-tier owner's answer before it fails open (sluice's own).
pub const WLM_SHARED_ACQUIRE_TIMEOUT: &str = "wlm.workload_group.shared_acquire_timeout";
/// Most workload groups the node holds.
pub const WLM_MAX_GROUP_COUNT: &str = "node.workload_group.max_count";
/// Most auto-tagging rules the cluster holds.
pub const WLM_AUTOTAGGING_MAX_RULES: &str = "wlm.autotagging.max_rules";

/// Group settings bag: whether group values overwrite explicit request values.
pub const OVERRIDE_REQUEST_VALUES: &str = "override_request_values";
/// Throttling bag: the bucket dimension.
pub const THROTTLE_ATTRIBUTE: &str = "attribute";
/// Throttling bag: the per-node in-flight allowance per bucket.
pub const THROTTLE_NODE_LIMIT: &str = "node_limit";
/// Throttling bag: the cluster-wide pool; not accepted until the shared tier exists (D1).
pub const THROTTLE_SHARED_LIMIT: &str = "shared_limit";
/// Queue bag: parked requests per bucket.
pub const QUEUE_SIZE_PER_BUCKET: &str = "size_per_bucket";
