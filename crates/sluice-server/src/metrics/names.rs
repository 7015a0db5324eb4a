//! The metric names and labels `GET /_prometheus/metrics` exposes, in one place, with their help
//! texts. Names follow Prometheus conventions: a `sluice_` namespace, counters ending in
//! `_total`, units in the name (`_seconds`, `_bytes`), ratios (a fraction of the node, 0..1)
//! ending in `_ratio`.

/// The label naming a workload group's id.
pub const GROUP_ID: &str = "group_id";
/// The label naming a workload group's name.
pub const GROUP_NAME: &str = "group_name";
/// The label naming a resource (`cpu`, `memory`).
pub const RESOURCE: &str = "resource";
/// The label naming an HTTP method.
pub const METHOD: &str = "method";
/// The label naming the route a request matched (its pattern, e.g. `/{index}/_search`): the
/// request's action, with a bounded number of values.
pub const ROUTE: &str = "route";
/// The label naming an HTTP status code.
pub const STATUS: &str = "status";

/// The label naming how a gateway's connection carried a request (`fast_lane`, `lent`).
pub const LANE_PATH: &str = "path";

/// A per-group counter: its name and help text.
pub type Described = (&'static str, &'static str);

/// Tasks of the group that ended.
pub const GROUP_COMPLETIONS: Described = (
    "sluice_wlm_group_completions_total",
    "Tasks of the workload group that ended, successfully or not.",
);
/// Tasks of the group that ended with an error.
pub const GROUP_FAILURES: Described = (
    "sluice_wlm_group_failures_total",
    "Tasks of the workload group that ended with an error.",
);
/// Requests rejected by the resource check.
pub const GROUP_REJECTIONS: Described = (
    "sluice_wlm_group_rejections_total",
    "Requests of the workload group rejected because it was over its resource limit.",
);
/// Tasks cancelled by enforcement.
pub const GROUP_CANCELLATIONS: Described = (
    "sluice_wlm_group_cancellations_total",
    "Tasks of the workload group cancelled by the enforcement pass.",
);
/// Requests rejected by the throttle.
pub const GROUP_THROTTLED: Described = (
    "sluice_wlm_group_throttled_total",
    "Requests of the workload group rejected by its throttle (429).",
);
/// Requests the shared tier refused (429: the bucket's cluster-wide limit was used up).
pub const GROUP_SHARED_THROTTLED: Described = (
    "sluice_wlm_group_shared_throttled_total",
    "Requests of the workload group refused by the shared tier (429: its bucket's cluster-wide shared_limit was in use, or could not be checked with this node's fail-open allowance used up); monitored, those it would have refused.",
);
/// Requests admitted without a shared lease because no owner answered (fail open).
pub const GROUP_SHARED_FAIL_OPEN: Described = (
    "sluice_wlm_group_shared_fail_open_total",
    "Requests of the workload group admitted without a cluster-wide lease because the bucket's owner could not be reached in time (fail open).",
);
/// Requests admitted with a shared lease granted on acquire (or reused from the idle cache).
pub const GROUP_SHARED_ACQUIRED: Described = (
    "sluice_wlm_group_shared_acquired_total",
    "Requests of the workload group admitted with a cluster-wide lease its bucket's owner granted when asked (or reused from this node's idle cache: sluice_wlm_group_shared_reused_total).",
);
/// Shared leases reused from this node's idle cache for the group's requests.
pub const GROUP_SHARED_REUSED: Described = (
    "sluice_wlm_group_shared_reused_total",
    "Cluster-wide leases this node took from its idle cache for requests of the workload group instead of asking the owner (each also counts as acquired or pushed).",
);
/// Parked requests admitted with a shared lease handed to their bucket.
pub const GROUP_SHARED_PUSHED: Described = (
    "sluice_wlm_group_shared_pushed_total",
    "Parked requests of the workload group admitted, after they waited, with a shared slot handed to their bucket's oldest waiter: an owner's offer, a lease another request of the bucket acquired, or a fail-open slot while the owner could not be asked (that one counts in sluice_wlm_group_shared_fail_open_total too).",
);
/// Shared leases this node counts as their buckets' owner.
pub const GROUP_SHARED_LEASES_OWNED: Described = (
    "sluice_wlm_group_shared_leases_owned",
    "Shared-tier leases of the workload group's buckets this node counts as their owner, for every node's requests.",
);
/// Requests parked in a queue.
pub const GROUP_QUEUED: Described = (
    "sluice_wlm_group_queued_total",
    "Requests of the workload group parked in its throttle queue.",
);
/// Requests refused because the queue was full.
pub const GROUP_QUEUE_REJECTIONS: Described = (
    "sluice_wlm_group_queue_rejections_total",
    "Requests of the workload group refused because its throttle queue was full.",
);
/// Requests parked now.
pub const GROUP_QUEUE_DEPTH: Described = (
    "sluice_wlm_group_queue_depth",
    "Requests of the workload group parked in its throttle queue now.",
);
/// How long parked requests waited.
pub const GROUP_QUEUE_WAIT: Described = (
    "sluice_wlm_group_queue_wait_seconds",
    "How long requests of the workload group waited in its throttle queue.",
);
/// Tasks executing now.
pub const GROUP_IN_FLIGHT: Described = (
    "sluice_wlm_group_in_flight",
    "Tasks of the workload group executing on a search thread now.",
);
/// The throttle's `node_limit`.
pub const GROUP_NODE_LIMIT: Described = (
    "sluice_wlm_group_node_limit",
    "The workload group's throttling.node_limit (requests in flight per bucket on this node).",
);
/// Last measured usage.
pub const GROUP_USAGE: Described = (
    "sluice_wlm_group_usage_ratio",
    "The workload group's last measured usage of a resource, a fraction of the node.",
);
/// Resource limit.
pub const GROUP_LIMIT: Described = (
    "sluice_wlm_group_limit_ratio",
    "The workload group's resource limit, a fraction of the node.",
);
/// Requests naming an unknown group (DEFAULT only).
pub const GROUP_UNKNOWN_TAGS: Described = (
    "sluice_wlm_group_unknown_group_tags_total",
    "Requests whose workloadGroupId header named no group (counted on DEFAULT).",
);
/// Dry run: throttle breaches `enabled` would have refused.
pub const GROUP_WOULD_THROTTLE: Described = (
    "sluice_wlm_group_would_throttle_total",
    "Monitored throttle breaches that mode enabled would have refused (429).",
);
/// Dry run: breaches `enabled` would have parked.
pub const GROUP_WOULD_QUEUE: Described = (
    "sluice_wlm_group_would_queue_total",
    "Monitored throttle breaches that mode enabled would have parked in the queue.",
);
/// Dry run: the wait they would have had, a running total: a counter in the text, recorded as
/// a gauge (the `metrics` crate's counters are integers, and whole seconds would hide the
/// short waits; `metrics::snapshot` writes its type).
pub const GROUP_WOULD_QUEUE_WAIT: Described = (
    "sluice_wlm_group_would_queue_wait_seconds_total",
    "The total queue wait the would-queue requests would have had, estimated from the group's drain rate.",
);
/// Dry run: requests the resource check would have rejected.
pub const GROUP_WOULD_REJECT: Described = (
    "sluice_wlm_group_would_reject_total",
    "Requests the resource check would have rejected in mode enabled.",
);
/// Dry run: tasks enforcement would have cancelled.
pub const GROUP_WOULD_CANCEL: Described = (
    "sluice_wlm_group_would_cancel_total",
    "Tasks the enforcement pass would have cancelled in mode enabled (each task once).",
);

/// Whether a resource of the node is in duress.
pub const NODE_DURESS: Described = (
    "sluice_node_duress",
    "1 when the node is in duress for the resource, else 0.",
);
/// The node's usage.
pub const NODE_USAGE: Described = (
    "sluice_node_usage_ratio",
    "The node's usage of a resource at the last enforcement pass, a fraction of the node.",
);
/// Search pool threads.
pub const POOL_THREADS: Described = ("sluice_search_pool_threads", "Threads of the search pool.");
/// Search pool active jobs.
pub const POOL_ACTIVE: Described = (
    "sluice_search_pool_active",
    "Search pool threads running a job now.",
);
/// Search pool queued jobs.
pub const POOL_QUEUED: Described = (
    "sluice_search_pool_queued",
    "Jobs waiting in the search pool's queue now.",
);
/// Search pool rejections.
pub const POOL_REJECTED: Described = (
    "sluice_search_pool_rejected_total",
    "Jobs refused because the search pool and its queue were full.",
);
/// Shared-tier leases this node's requests got, from an owner or from the idle cache.
pub const SHARED_ACQUIRED: Described = (
    "sluice_shared_leases_acquired_total",
    "Shared-tier leases this node's requests got, from a bucket's owner or from the idle cache.",
);
/// Of which taken from the idle cache without a call to the owner.
pub const SHARED_REUSED: Described = (
    "sluice_shared_leases_reused_total",
    "Shared-tier leases taken from this node's idle cache without a call to the owner.",
);
/// Extra leases that calls to owners brought for the idle cache.
pub const SHARED_BATCHED: Described = (
    "sluice_shared_leases_batched_total",
    "Extra shared-tier leases that calls to owners brought for this node's idle cache.",
);
/// Idle leases given back to their owner.
pub const SHARED_IDLE_RELEASED: Described = (
    "sluice_shared_idle_leases_released_total",
    "Idle shared-tier leases given back to their owner: window ended, ring moved, limit lowered, shutdown.",
);
/// Buckets whose reuse windows an owner's room answer restarted.
pub const SHARED_EXTENDED: Described = (
    "sluice_shared_windows_extended_total",
    "Times an owner's answer that a bucket had room nobody waited for let this node keep its leases of the bucket for another window.",
);
/// Idle leases in the cache now.
pub const SHARED_IDLE: Described = (
    "sluice_shared_idle_leases",
    "Shared-tier leases idle in this node's cache now.",
);
/// Owners this node cannot reach now.
pub const SHARED_UNREACHABLE: Described = (
    "sluice_shared_unreachable_owners",
    "Shared-tier owners this node's calls cannot reach now (their circuit breakers are open): requests of their buckets fail open on this node.",
);
/// Running tasks.
pub const TASKS_RUNNING: Described = ("sluice_tasks_running", "Tasks running on the node now.");
/// HTTP requests.
pub const HTTP_REQUESTS: Described = (
    "sluice_http_requests_total",
    "HTTP requests answered, by method, route and status.",
);
/// HTTP latency.
pub const HTTP_REQUEST_DURATION: Described = (
    "sluice_http_request_duration_seconds",
    "Time from receiving an HTTP request to its response headers, by method and route.",
);
/// Requests a gateway's connections carried, by path.
pub const GATEWAY_LANE_REQUESTS: Described = (
    "sluice_gateway_lane_requests_total",
    "Requests on a gateway's connections, by path: fast_lane (served by the gateway's fast lane) or lent (lent to the general path, in runs of other requests that end when a search comes).",
);
/// Connections a gateway's fast lane left to the general path.
pub const GATEWAY_HANDED_OFF: Described = (
    "sluice_gateway_handed_off_connections_total",
    "Connections a gateway's fast lane left to the general path for good (HTTP/1.0 or HTTP/2, an upgrade, 100-continue, a chunked upload, or Connection: close).",
);
