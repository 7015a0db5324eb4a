//! What each route of the embedded node reads from its URL, for the check of unknown parameters
//! ([`crate::http::unrecognized::check_route`]): per OpenSearch API, the query parameters its
//! REST specification lists (the union of OpenSearch's `rest-api-spec` JSON over its versions,
//! `opensearch-api-specification` and the `opensearch-py` client's lists, so that nothing any
//! of them accepts is refused), plus what OpenSearch's handlers read beyond it: the names of
//! the API's path parts (a handler reads `index` whether it came in the path or the query),
//! the `_cat` response parameters on every `_cat` API, and the few that sluice's handlers read
//! and OpenSearch's read too (`ignore_unavailable` and `allow_no_indices` wherever indices are
//! resolved, `cancel_after_time_interval` on every search-class request (`_msearch`'s
//! included, which its specification omits), `if_seq_no`,
//! `if_primary_term` and `require_alias` on a create, a task cancel's fan-out `timeout`).
//! Deprecated parameters (`master_timeout`, `type`, …) stay known.
//!
//! A route that is not listed here (workload management, which checks in its handlers;
//! metrics; the dashboard) is not checked by the layer.

use axum::http::Method;

/// The parameters `route` (an axum route pattern) reads for `method`, if the route is listed.
pub fn known(method: &Method, route: &str) -> Option<&'static [&'static str]> {
    ROUTES
        .iter()
        .find(|(m, r, _)| m == method && *r == route)
        .map(|(_, _, params)| *params)
}

/// The methods OpenSearch answers on `route` (an axum route pattern), in the table's order;
/// empty when the route is not listed.
pub fn methods_of(route: &str) -> Vec<Method> {
    ROUTES
        .iter()
        .filter(|(_, r, _)| *r == route)
        .map(|(m, _, _)| m.clone())
        .collect()
}

/// Every listed route: its method and axum route pattern.
pub fn routes() -> impl Iterator<Item = (&'static Method, &'static str)> {
    ROUTES.iter().map(|(m, r, _)| (m, *r))
}

/// `bulk`.
const BULK: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "index",
    "pipeline",
    "refresh",
    "require_alias",
    "routing",
    "timeout",
    "type",
    "wait_for_active_shards",
];

/// `cat.aliases`.
const CAT_ALIASES: &[&str] = &[
    "bytes",
    "expand_wildcards",
    "format",
    "h",
    "help",
    "local",
    "name",
    "pri",
    "s",
    "size",
    "time",
    "timeout",
    "ts",
    "v",
];

/// `cat.count`.
const CAT_COUNT: &[&str] = &[
    "bytes", "format", "h", "help", "index", "pri", "s", "size", "time", "timeout", "ts", "v",
];

/// `cat.health`.
const CAT_HEALTH: &[&str] = &[
    "bytes", "format", "h", "help", "pri", "s", "size", "time", "timeout", "ts", "v",
];

/// `cat.indices`.
const CAT_INDICES: &[&str] = &[
    "allow_no_indices",
    "bytes",
    "cluster_manager_timeout",
    "expand_wildcards",
    "format",
    "h",
    "health",
    "help",
    "ignore_unavailable",
    "include_unloaded_segments",
    "index",
    "local",
    "master_timeout",
    "pri",
    "s",
    "size",
    "time",
    "timeout",
    "ts",
    "v",
];

/// `cat.shards`: its specification's parameters, `cancel_after_time_interval` (OpenSearch
/// 2.17 and later read it), the `_cat` response parameters, and `allow_no_indices` and
/// `ignore_unavailable`, read where indices are resolved.
const CAT_SHARDS: &[&str] = &[
    "allow_no_indices",
    "bytes",
    "cancel_after_time_interval",
    "cluster_manager_timeout",
    "format",
    "h",
    "help",
    "ignore_unavailable",
    "index",
    "local",
    "master_timeout",
    "pri",
    "s",
    "size",
    "time",
    "timeout",
    "ts",
    "v",
];

/// `list.indices`: `cat.indices`' and the page's `next_token` and `sort` (`size` is both a
/// `_cat` response parameter and the page's size).
const LIST_INDICES: &[&str] = &[
    "allow_no_indices",
    "bytes",
    "cluster_manager_timeout",
    "expand_wildcards",
    "format",
    "h",
    "health",
    "help",
    "ignore_unavailable",
    "include_unloaded_segments",
    "index",
    "local",
    "master_timeout",
    "next_token",
    "pri",
    "s",
    "size",
    "sort",
    "time",
    "timeout",
    "ts",
    "v",
];

/// `list.shards`: `cat.shards`' and the page's `next_token` and `sort`.
const LIST_SHARDS: &[&str] = &[
    "allow_no_indices",
    "bytes",
    "cancel_after_time_interval",
    "cluster_manager_timeout",
    "format",
    "h",
    "help",
    "ignore_unavailable",
    "index",
    "local",
    "master_timeout",
    "next_token",
    "pri",
    "s",
    "size",
    "sort",
    "time",
    "timeout",
    "ts",
    "v",
];

/// `cat.nodes`.
const CAT_NODES: &[&str] = &[
    "bytes",
    "cluster_manager_timeout",
    "format",
    "full_id",
    "h",
    "help",
    "local",
    "master_timeout",
    "pri",
    "s",
    "size",
    "time",
    "timeout",
    "ts",
    "v",
];

/// `cat.tasks`: the `_cat` response parameters and what OpenSearch's handler reads into its
/// `_tasks` listing (`RestListTasksAction.generateListTasksRequest`).
const CAT_TASKS: &[&str] = &[
    "actions",
    "bytes",
    "detailed",
    "format",
    "h",
    "help",
    "nodes",
    "parent_task_id",
    "pri",
    "s",
    "size",
    "time",
    "timeout",
    "ts",
    "v",
    "wait_for_completion",
];

/// `clear_scroll`.
const CLEAR_SCROLL: &[&str] = &["scroll_id"];

/// `cluster.get_settings`.
const CLUSTER_GET_SETTINGS: &[&str] = &[
    "cluster_manager_timeout",
    "flat_settings",
    "include_defaults",
    "master_timeout",
    "timeout",
];

/// `cluster.health`.
const CLUSTER_HEALTH: &[&str] = &[
    "allow_no_indices",
    "awareness_attribute",
    "cluster_manager_timeout",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "level",
    "local",
    "master_timeout",
    "timeout",
    "wait_for_active_shards",
    "wait_for_events",
    "wait_for_no_initializing_shards",
    "wait_for_no_relocating_shards",
    "wait_for_nodes",
    "wait_for_status",
];

/// `cluster.put_settings`.
const CLUSTER_PUT_SETTINGS: &[&str] = &[
    "cluster_manager_timeout",
    "flat_settings",
    "master_timeout",
    "timeout",
];

/// `count`.
const COUNT: &[&str] = &[
    "allow_no_indices",
    "analyze_wildcard",
    "analyzer",
    "cancel_after_time_interval",
    "default_operator",
    "df",
    "expand_wildcards",
    "ignore_throttled",
    "ignore_unavailable",
    "index",
    "lenient",
    "min_score",
    "preference",
    "q",
    "routing",
    "terminate_after",
];

/// `create`.
const CREATE: &[&str] = &[
    "id",
    "if_primary_term",
    "if_seq_no",
    "index",
    "pipeline",
    "refresh",
    "require_alias",
    "routing",
    "timeout",
    "version",
    "version_type",
    "wait_for_active_shards",
];

/// `delete`.
const DELETE: &[&str] = &[
    "id",
    "if_primary_term",
    "if_seq_no",
    "index",
    "refresh",
    "routing",
    "timeout",
    "version",
    "version_type",
    "wait_for_active_shards",
];

/// `delete_by_query`.
const DELETE_BY_QUERY: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "allow_no_indices",
    "analyze_wildcard",
    "analyzer",
    "cancel_after_time_interval",
    "conflicts",
    "default_operator",
    "df",
    "expand_wildcards",
    "from",
    "ignore_unavailable",
    "index",
    "lenient",
    "max_docs",
    "preference",
    "q",
    "refresh",
    "request_cache",
    "requests_per_second",
    "routing",
    "scroll",
    "scroll_size",
    "search_timeout",
    "search_type",
    "size",
    "slices",
    "sort",
    "stats",
    "terminate_after",
    "timeout",
    "version",
    "wait_for_active_shards",
    "wait_for_completion",
];

/// `exists`.
const EXISTS: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "id",
    "index",
    "preference",
    "realtime",
    "refresh",
    "routing",
    "stored_fields",
    "version",
    "version_type",
];

/// `exists_source`.
const EXISTS_SOURCE: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "id",
    "index",
    "preference",
    "realtime",
    "refresh",
    "routing",
    "version",
    "version_type",
];

/// `get`.
const GET: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "id",
    "index",
    "preference",
    "realtime",
    "refresh",
    "routing",
    "stored_fields",
    "version",
    "version_type",
];

/// `get_source`.
const GET_SOURCE: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "id",
    "index",
    "preference",
    "realtime",
    "refresh",
    "routing",
    "version",
    "version_type",
];

/// `index`.
const INDEX: &[&str] = &[
    "id",
    "if_primary_term",
    "if_seq_no",
    "index",
    "op_type",
    "pipeline",
    "refresh",
    "require_alias",
    "routing",
    "timeout",
    "version",
    "version_type",
    "wait_for_active_shards",
];

/// `indices.add_block`.
const INDICES_ADD_BLOCK: &[&str] = &[
    "allow_no_indices",
    "block",
    "cluster_manager_timeout",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "master_timeout",
    "timeout",
];

/// `indices.close`.
const INDICES_CLOSE: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "master_timeout",
    "timeout",
    "wait_for_active_shards",
];

/// `indices.create`.
const INDICES_CREATE: &[&str] = &[
    "cluster_manager_timeout",
    "index",
    "master_timeout",
    "timeout",
    "wait_for_active_shards",
];

/// `indices.delete`.
const INDICES_DELETE: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "master_timeout",
    "timeout",
];

/// `indices.delete_alias`.
const INDICES_DELETE_ALIAS: &[&str] = &[
    "cluster_manager_timeout",
    "index",
    "master_timeout",
    "name",
    "timeout",
];

/// `indices.exists`.
const INDICES_EXISTS: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "flat_settings",
    "ignore_unavailable",
    "include_defaults",
    "index",
    "local",
];

/// `indices.exists_alias`.
const INDICES_EXISTS_ALIAS: &[&str] = &[
    "allow_no_indices",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "local",
    "name",
];

/// `indices.flush`.
const INDICES_FLUSH: &[&str] = &[
    "allow_no_indices",
    "expand_wildcards",
    "force",
    "ignore_unavailable",
    "index",
    "wait_if_ongoing",
];

/// `indices.forcemerge`.
const INDICES_FORCEMERGE: &[&str] = &[
    "allow_no_indices",
    "expand_wildcards",
    "flush",
    "ignore_unavailable",
    "index",
    "max_num_segments",
    "only_expunge_deletes",
    "primary_only",
    "wait_for_completion",
];

/// `indices.get`.
const INDICES_GET: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "flat_settings",
    "ignore_unavailable",
    "include_defaults",
    "index",
    "local",
    "master_timeout",
];

/// `indices.get_alias`.
const INDICES_GET_ALIAS: &[&str] = &[
    "allow_no_indices",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "local",
    "name",
];

/// `indices.get_mapping`.
const INDICES_GET_MAPPING: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "ignore_unavailable",
    "include_type_name",
    "index",
    "local",
    "master_timeout",
];

/// `indices.get_settings`.
const INDICES_GET_SETTINGS: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "flat_settings",
    "ignore_unavailable",
    "include_defaults",
    "index",
    "local",
    "master_timeout",
    "name",
];

/// `indices.open`.
const INDICES_OPEN: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "master_timeout",
    "task_execution_timeout",
    "timeout",
    "wait_for_active_shards",
    "wait_for_completion",
];

/// `indices.put_alias`.
const INDICES_PUT_ALIAS: &[&str] = &[
    "cluster_manager_timeout",
    "index",
    "master_timeout",
    "name",
    "timeout",
];

/// `indices.put_mapping`.
const INDICES_PUT_MAPPING: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "master_timeout",
    "timeout",
    "write_index_only",
];

/// `indices.put_settings`.
const INDICES_PUT_SETTINGS: &[&str] = &[
    "allow_no_indices",
    "cluster_manager_timeout",
    "expand_wildcards",
    "flat_settings",
    "ignore_unavailable",
    "index",
    "master_timeout",
    "preserve_existing",
    "timeout",
];

/// `indices.refresh`.
const INDICES_REFRESH: &[&str] = &[
    "allow_no_indices",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
];

/// `indices.stats`.
const INDICES_STATS: &[&str] = &[
    "allow_no_indices",
    "completion_fields",
    "expand_wildcards",
    "fielddata_fields",
    "fields",
    "forbid_closed_indices",
    "groups",
    "ignore_unavailable",
    "include_field_level_segment_file_sizes",
    "include_segment_file_sizes",
    "include_unloaded_segments",
    "index",
    "level",
    "metric",
];

/// `indices.update_aliases`.
const INDICES_UPDATE_ALIASES: &[&str] = &["cluster_manager_timeout", "master_timeout", "timeout"];

/// `info`.
const INFO: &[&str] = &[];

/// `mget`.
const MGET: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "index",
    "preference",
    "realtime",
    "refresh",
    "routing",
    "stored_fields",
];

/// `msearch`.
const MSEARCH: &[&str] = &[
    "allow_no_indices",
    "allow_partial_results",
    "cancel_after_time_interval",
    "ccs_minimize_roundtrips",
    "expand_wildcards",
    "ignore_unavailable",
    "index",
    "max_concurrent_searches",
    "max_concurrent_shard_requests",
    "pre_filter_shard_size",
    "rest_total_hits_as_int",
    "search_type",
    "typed_keys",
];

/// `nodes.info`.
const NODES_INFO: &[&str] = &["flat_settings", "metric", "node_id", "timeout"];

/// `nodes.stats`.
const NODES_STATS: &[&str] = &[
    "completion_fields",
    "fielddata_fields",
    "fields",
    "groups",
    "include_field_level_segment_file_sizes",
    "include_segment_file_sizes",
    "level",
    "metric",
    "node_id",
    "timeout",
    "types",
];

/// `ping`.
const PING: &[&str] = &[];

/// `scroll`.
const SCROLL: &[&str] = &[
    "cancel_after_time_interval",
    "rest_total_hits_as_int",
    "scroll",
    "scroll_id",
];

/// `search`.
const SEARCH: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "allow_no_indices",
    "allow_partial_search_results",
    "analyze_wildcard",
    "analyzer",
    "batched_reduce_size",
    "cancel_after_time_interval",
    "ccs_minimize_roundtrips",
    "default_operator",
    "df",
    "docvalue_fields",
    "expand_wildcards",
    "explain",
    "from",
    "ignore_throttled",
    "ignore_unavailable",
    "include_named_queries_score",
    "index",
    "lenient",
    "max_concurrent_shard_requests",
    "phase_took",
    "pre_filter_shard_size",
    "preference",
    "q",
    "request_cache",
    "rest_total_hits_as_int",
    "routing",
    "scroll",
    "search_pipeline",
    "search_type",
    "seq_no_primary_term",
    "shard_info",
    "size",
    "sort",
    "stats",
    "stored_fields",
    "suggest_field",
    "suggest_mode",
    "suggest_size",
    "suggest_text",
    "terminate_after",
    "timeout",
    "track_scores",
    "track_total_hits",
    "typed_keys",
    "verbose_pipeline",
    "version",
];

/// `tasks.cancel`.
const TASKS_CANCEL: &[&str] = &[
    "actions",
    "nodes",
    "parent_task_id",
    "task_id",
    "timeout",
    "wait_for_completion",
];

/// `tasks.get`.
const TASKS_GET: &[&str] = &["task_id", "timeout", "wait_for_completion"];

/// `tasks.list`.
const TASKS_LIST: &[&str] = &[
    "actions",
    "detailed",
    "group_by",
    "nodes",
    "parent_task_id",
    "timeout",
    "wait_for_completion",
];

/// `update`.
const UPDATE: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "id",
    "if_primary_term",
    "if_seq_no",
    "index",
    "lang",
    "refresh",
    "require_alias",
    "retry_on_conflict",
    "routing",
    "timeout",
    "version",
    "version_type",
    "wait_for_active_shards",
];

/// `update_by_query`.
const UPDATE_BY_QUERY: &[&str] = &[
    "_source",
    "_source_excludes",
    "_source_includes",
    "allow_no_indices",
    "analyze_wildcard",
    "analyzer",
    "cancel_after_time_interval",
    "conflicts",
    "default_operator",
    "df",
    "expand_wildcards",
    "from",
    "ignore_unavailable",
    "index",
    "lenient",
    "max_docs",
    "pipeline",
    "preference",
    "q",
    "refresh",
    "request_cache",
    "requests_per_second",
    "routing",
    "scroll",
    "scroll_size",
    "search_timeout",
    "search_type",
    "size",
    "slices",
    "sort",
    "stats",
    "terminate_after",
    "timeout",
    "version",
    "version_type",
    "wait_for_active_shards",
    "wait_for_completion",
];

/// Each route by method and pattern, with its API's parameters.
static ROUTES: &[(Method, &str, &[&str])] = &[
    (Method::GET, "/", INFO),
    (Method::HEAD, "/", PING),
    (Method::GET, "/_cluster/health", CLUSTER_HEALTH),
    (Method::GET, "/_cluster/health/{index}", CLUSTER_HEALTH),
    (Method::GET, "/_cat/indices", CAT_INDICES),
    (Method::GET, "/_cat/indices/{index}", CAT_INDICES),
    (Method::GET, "/_cat/shards", CAT_SHARDS),
    (Method::GET, "/_cat/shards/{index}", CAT_SHARDS),
    (Method::GET, "/_list/indices", LIST_INDICES),
    (Method::GET, "/_list/indices/{index}", LIST_INDICES),
    (Method::GET, "/_list/shards", LIST_SHARDS),
    (Method::GET, "/_list/shards/{index}", LIST_SHARDS),
    (Method::GET, "/_cat/nodes", CAT_NODES),
    (Method::GET, "/_nodes", NODES_INFO),
    (Method::GET, "/_nodes/{nodes}", NODES_INFO),
    (Method::GET, "/_nodes/{nodes}/{metrics}", NODES_INFO),
    (Method::GET, "/_cat/count", CAT_COUNT),
    (Method::GET, "/_cat/count/{index}", CAT_COUNT),
    (Method::GET, "/_cat/health", CAT_HEALTH),
    (Method::GET, "/_nodes/stats", NODES_STATS),
    (Method::GET, "/_nodes/stats/{metric}", NODES_STATS),
    (Method::GET, "/_nodes/{node_id}/stats", NODES_STATS),
    (Method::GET, "/_nodes/{node_id}/stats/{metric}", NODES_STATS),
    (Method::GET, "/_stats", INDICES_STATS),
    (Method::GET, "/_stats/{metric}", INDICES_STATS),
    (Method::GET, "/{index}/_stats", INDICES_STATS),
    (Method::GET, "/{index}/_stats/{metric}", INDICES_STATS),
    (Method::POST, "/{index}/_delete_by_query", DELETE_BY_QUERY),
    (Method::POST, "/{index}/_update_by_query", UPDATE_BY_QUERY),
    (Method::POST, "/{index}/_close", INDICES_CLOSE),
    (Method::POST, "/{index}/_open", INDICES_OPEN),
    (Method::POST, "/_forcemerge", INDICES_FORCEMERGE),
    (Method::POST, "/{index}/_forcemerge", INDICES_FORCEMERGE),
    (Method::GET, "/_settings", INDICES_GET_SETTINGS),
    (Method::GET, "/_settings/{name}", INDICES_GET_SETTINGS),
    (Method::POST, "/_bulk", BULK),
    (Method::PUT, "/_bulk", BULK),
    (Method::POST, "/_refresh", INDICES_REFRESH),
    (Method::GET, "/_refresh", INDICES_REFRESH),
    (Method::GET, "/_search", SEARCH),
    (Method::POST, "/_search", SEARCH),
    (Method::GET, "/_count", COUNT),
    (Method::POST, "/_count", COUNT),
    (Method::GET, "/_mapping", INDICES_GET_MAPPING),
    (Method::GET, "/{index}", INDICES_GET),
    (Method::PUT, "/{index}", INDICES_CREATE),
    (Method::DELETE, "/{index}", INDICES_DELETE),
    (Method::HEAD, "/{index}", INDICES_EXISTS),
    (Method::GET, "/{index}/_mapping", INDICES_GET_MAPPING),
    (Method::PUT, "/{index}/_mapping", INDICES_PUT_MAPPING),
    (Method::POST, "/{index}/_mapping", INDICES_PUT_MAPPING),
    (Method::GET, "/{index}/_settings", INDICES_GET_SETTINGS),
    (Method::PUT, "/{index}/_settings", INDICES_PUT_SETTINGS),
    (
        Method::GET,
        "/{index}/_settings/{name}",
        INDICES_GET_SETTINGS,
    ),
    (Method::POST, "/_flush", INDICES_FLUSH),
    (Method::GET, "/_flush", INDICES_FLUSH),
    (Method::POST, "/{index}/_flush", INDICES_FLUSH),
    (Method::GET, "/{index}/_flush", INDICES_FLUSH),
    (Method::PUT, "/{index}/_block/{block}", INDICES_ADD_BLOCK),
    (Method::POST, "/{index}/_refresh", INDICES_REFRESH),
    (Method::GET, "/{index}/_refresh", INDICES_REFRESH),
    (Method::POST, "/{index}/_bulk", BULK),
    (Method::PUT, "/{index}/_bulk", BULK),
    (Method::POST, "/{index}/_doc", INDEX),
    (Method::GET, "/{index}/_doc/{id}", GET),
    (Method::HEAD, "/{index}/_doc/{id}", EXISTS),
    (Method::PUT, "/{index}/_doc/{id}", INDEX),
    (Method::POST, "/{index}/_doc/{id}", INDEX),
    (Method::DELETE, "/{index}/_doc/{id}", DELETE),
    (Method::GET, "/{index}/_source/{id}", GET_SOURCE),
    (Method::HEAD, "/{index}/_source/{id}", EXISTS_SOURCE),
    (Method::GET, "/_mget", MGET),
    (Method::POST, "/_mget", MGET),
    (Method::GET, "/{index}/_mget", MGET),
    (Method::POST, "/{index}/_mget", MGET),
    (Method::PUT, "/{index}/_create/{id}", CREATE),
    (Method::POST, "/{index}/_create/{id}", CREATE),
    (Method::POST, "/{index}/_update/{id}", UPDATE),
    (Method::GET, "/{index}/_search", SEARCH),
    (Method::POST, "/{index}/_search", SEARCH),
    (Method::GET, "/{index}/_count", COUNT),
    (Method::POST, "/{index}/_count", COUNT),
    (Method::GET, "/_msearch", MSEARCH),
    (Method::POST, "/_msearch", MSEARCH),
    (Method::GET, "/{index}/_msearch", MSEARCH),
    (Method::POST, "/{index}/_msearch", MSEARCH),
    (Method::GET, "/_search/scroll", SCROLL),
    (Method::POST, "/_search/scroll", SCROLL),
    (Method::DELETE, "/_search/scroll", CLEAR_SCROLL),
    (Method::GET, "/_search/scroll/{scroll_id}", SCROLL),
    (Method::POST, "/_search/scroll/{scroll_id}", SCROLL),
    (Method::DELETE, "/_search/scroll/{scroll_id}", CLEAR_SCROLL),
    (Method::GET, "/_tasks/{task_id}", TASKS_GET),
    (Method::POST, "/_tasks/{task_id}/_cancel", TASKS_CANCEL),
    (Method::GET, "/_tasks", TASKS_LIST),
    (Method::GET, "/_cat/tasks", CAT_TASKS),
    (Method::POST, "/_tasks/_cancel", TASKS_CANCEL),
    (Method::GET, "/_cluster/settings", CLUSTER_GET_SETTINGS),
    (Method::PUT, "/_cluster/settings", CLUSTER_PUT_SETTINGS),
    (Method::GET, "/_aliases", INDICES_GET_ALIAS),
    (Method::POST, "/_aliases", INDICES_UPDATE_ALIASES),
    (Method::GET, "/_alias", INDICES_GET_ALIAS),
    (Method::GET, "/_alias/{name}", INDICES_GET_ALIAS),
    (Method::HEAD, "/_alias/{name}", INDICES_EXISTS_ALIAS),
    (Method::GET, "/_cat/aliases", CAT_ALIASES),
    (Method::GET, "/_cat/aliases/{name}", CAT_ALIASES),
    (Method::GET, "/{index}/_alias", INDICES_GET_ALIAS),
    (Method::HEAD, "/{index}/_alias", INDICES_EXISTS_ALIAS),
    (Method::GET, "/{index}/_aliases", INDICES_GET_ALIAS),
    (Method::GET, "/{index}/_alias/{name}", INDICES_GET_ALIAS),
    (Method::HEAD, "/{index}/_alias/{name}", INDICES_EXISTS_ALIAS),
    (Method::PUT, "/{index}/_alias/{name}", INDICES_PUT_ALIAS),
    (Method::POST, "/{index}/_alias/{name}", INDICES_PUT_ALIAS),
    (
        Method::DELETE,
        "/{index}/_alias/{name}",
        INDICES_DELETE_ALIAS,
    ),
    (Method::GET, "/{index}/_aliases/{name}", INDICES_GET_ALIAS),
    (
        Method::HEAD,
        "/{index}/_aliases/{name}",
        INDICES_EXISTS_ALIAS,
    ),
    (Method::PUT, "/{index}/_aliases/{name}", INDICES_PUT_ALIAS),
    (Method::POST, "/{index}/_aliases/{name}", INDICES_PUT_ALIAS),
    (
        Method::DELETE,
        "/{index}/_aliases/{name}",
        INDICES_DELETE_ALIAS,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_every_route_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for (method, route, _) in ROUTES {
            assert!(
                seen.insert((method.clone(), *route)),
                "{method} {route} twice"
            );
        }
    }

    #[test]
    fn test_lists_are_sorted_and_without_duplicates() {
        for (method, route, params) in ROUTES {
            assert!(
                params.windows(2).all(|w| w[0] < w[1]),
                "{method} {route}: {params:?}"
            );
        }
    }
}
