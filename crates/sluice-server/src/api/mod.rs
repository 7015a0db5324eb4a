//! The OpenSearch-compatible REST API: the router, and one module per area, each parsing its
//! requests, calling admission and a backend (search-class work) or the embedded engine (the
//! data APIs), and shaping the response as OpenSearch does. The HTTP plumbing — body
//! extraction, replies, request metadata — is in [`crate::http`].

pub mod aliases;
pub mod by_query;
pub mod cat;
pub mod cat_tasks;
pub mod cluster;
pub mod cluster_settings;
pub mod docs;
pub mod health;
pub mod health_wait;
pub mod index_ops;
pub mod index_stats;
pub mod indices;
pub mod known_params;
pub mod list;
pub mod msearch;
pub mod node_stats;
pub mod nodes;
pub mod paging;
pub mod rules;
pub mod scroll;
pub mod search;
pub mod shards;
pub mod tasks;
pub mod wlm;
pub mod wlm_stats;

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use axum::routing::{get, post, put};

use crate::http::fallback::{self, no_handler};
use crate::http::{content_type, unrecognized};
use crate::state::AppState;

/// Renders a duration the way OpenSearch prints time values (`1.5m`, `500ms`, `2s`).
pub use sluice_wire::format_time_value;

/// Builds the router of every API route.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        // HEAD of a GET route OpenSearch answers HEAD on (`/`, an index, a document, its
        // source, an alias) answers the GET's status and headers without its body, as
        // OpenSearch does (`content-type` and `content-length` included); elsewhere a 405
        // ([`fallback::refuse_head`]).
        .route("/", get(cluster::root))
        .route("/_cluster/health", get(cluster::health))
        .route("/_cluster/health/{index}", get(cluster::health))
        .route("/_cat/indices", get(indices::cat_indices))
        .route("/_cat/indices/{index}", get(indices::cat_indices))
        .route("/_cat/shards", get(shards::cat_shards))
        .route("/_cat/shards/{index}", get(shards::cat_shards))
        // The paginated tables are the embedded engine's; a gateway forwards them (they are
        // not [`owned_routes`]).
        .route("/_list/indices", get(list::list_indices))
        .route("/_list/indices/{index}", get(list::list_indices))
        .route("/_list/shards", get(list::list_shards))
        .route("/_list/shards/{index}", get(list::list_shards))
        .route("/_cat/nodes", get(nodes::cat_nodes))
        .route("/_nodes", get(nodes::info_all))
        .route("/_nodes/{nodes}", get(nodes::info_one))
        .route("/_nodes/{nodes}/{metrics}", get(nodes::info_nodes_metrics))
        .route("/_cat/count", get(indices::cat_count))
        .route("/_cat/health", get(health::cat_health))
        .route("/_nodes/stats", get(node_stats::nodes_stats))
        .route("/_nodes/stats/{metric}", get(node_stats::nodes_stats))
        .route("/_nodes/{node_id}/stats", get(node_stats::nodes_stats))
        .route(
            "/_nodes/{node_id}/stats/{metric}",
            get(node_stats::nodes_stats),
        )
        .route("/_stats", get(index_stats::stats_all))
        .route("/_stats/{metric}", get(index_stats::stats_all))
        .route("/{index}/_stats", get(index_stats::stats_index))
        .route("/{index}/_stats/{metric}", get(index_stats::stats_index))
        .route("/{index}/_delete_by_query", post(by_query::delete_by_query))
        .route("/{index}/_update_by_query", post(by_query::update_by_query))
        .route("/{index}/_close", post(index_ops::close))
        .route("/{index}/_open", post(index_ops::open))
        .route("/_forcemerge", post(index_ops::forcemerge))
        .route("/{index}/_forcemerge", post(index_ops::forcemerge))
        .route("/_cat/count/{index}", get(indices::cat_count))
        .route("/_settings", get(indices::get_settings_all))
        .route("/_settings/{name}", get(indices::get_settings_all_named))
        .route("/_bulk", post(docs::bulk).put(docs::bulk))
        .route(
            "/_refresh",
            post(indices::refresh_all).get(indices::refresh_all),
        )
        .route("/_search", get(search::search_all).post(search::search_all))
        .route("/_count", get(search::count_all).post(search::count_all))
        .route("/_mapping", get(indices::get_mapping_all))
        .route(
            "/{index}",
            get(indices::get_index)
                .put(indices::create_index)
                .delete(indices::delete_index)
                .head(indices::head_index),
        )
        .route(
            "/{index}/_mapping",
            get(indices::get_mapping)
                .put(indices::put_mapping)
                .post(indices::put_mapping),
        )
        .route(
            "/{index}/_settings",
            get(indices::get_settings).put(indices::put_settings),
        )
        .route(
            "/{index}/_settings/{name}",
            get(indices::get_settings_named),
        )
        .route("/_flush", post(indices::flush).get(indices::flush))
        .route("/{index}/_flush", post(indices::flush).get(indices::flush))
        .route("/{index}/_block/{block}", put(indices::add_block))
        .route(
            "/{index}/_refresh",
            post(indices::refresh).get(indices::refresh),
        )
        .route(
            "/{index}/_bulk",
            post(docs::bulk_index).put(docs::bulk_index),
        )
        .route("/{index}/_doc", post(docs::index_auto_id))
        .route(
            "/{index}/_doc/{id}",
            get(docs::get_doc)
                .put(docs::index_with_id)
                .post(docs::index_with_id)
                .delete(docs::delete_doc),
        )
        .route("/{index}/_source/{id}", get(docs::get_source))
        .route("/_mget", get(docs::mget).post(docs::mget))
        .route("/{index}/_mget", get(docs::mget).post(docs::mget))
        .route(
            "/{index}/_create/{id}",
            put(docs::create_with_id).post(docs::create_with_id),
        )
        .route("/{index}/_update/{id}", post(docs::update_doc))
        .route("/{index}/_search", get(search::search).post(search::search))
        .route("/{index}/_count", get(search::count).post(search::count))
        .route("/_msearch", get(msearch::msearch).post(msearch::msearch))
        .route(
            "/{index}/_msearch",
            get(msearch::msearch_index).post(msearch::msearch_index),
        )
        .route(
            "/_search/scroll",
            get(scroll::next_page)
                .post(scroll::next_page)
                .delete(scroll::clear),
        )
        .route(
            "/_search/scroll/{scroll_id}",
            get(scroll::next_page_of)
                .post(scroll::next_page_of)
                .delete(scroll::clear_ids),
        )
        .route("/_tasks/{task_id}", get(tasks::get_task))
        .route("/_tasks/{task_id}/_cancel", post(tasks::cancel_one))
        .merge(cluster_settings::routes())
        .merge(aliases::routes())
        // A URL parameter the route does not know is refused, after the body's type (the
        // owned routes carry both checks).
        .route_layer(middleware::from_fn(unrecognized::check_route))
        // A body must be in a type OpenSearch reads, once a route has a handler for it.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            content_type::require_supported,
        ))
        // A table's `Accept` stands for its missing `format`.
        .route_layer(middleware::from_fn(cat::accept_as_format))
        // A HEAD only where OpenSearch answers one, before anything else is checked.
        .route_layer(middleware::from_fn(fallback::refuse_head))
        // An API's name (`_reindex`, `_snapshot` …) is no index: such a request has no
        // handler, whichever index route its path fits.
        .route_layer(middleware::from_fn(fallback::refuse_api_as_index))
        .merge(owned_routes(&state))
        .method_not_allowed_fallback(fallback::method_not_allowed)
        .fallback(no_handler)
        .with_state(state)
}

/// The routes sluice answers itself whatever its backend: workload groups, rules, stats, its
/// metrics and dashboard, and its `_tasks` listing (`_cat/tasks` too) and cancelling (a gateway answers the
/// `wlm.*` cluster settings itself too, a task by id its own way, and forwards every other
/// route, DESIGN D15).
///
/// A body of theirs must be in a type OpenSearch reads ([`content_type`]), on a gateway too:
/// sluice answers them, no upstream judges them.
pub fn owned_routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/_tasks", get(tasks::list))
        .route("/_cat/tasks", get(cat_tasks::cat_tasks))
        .route("/_tasks/_cancel", post(tasks::cancel_matching))
        .merge(wlm::routes())
        .merge(wlm_stats::routes())
        .merge(rules::routes())
        .merge(crate::metrics::route::routes())
        .merge(crate::dashboard::routes())
        .route_layer(middleware::from_fn(unrecognized::check_route))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            content_type::require_supported,
        ))
        .route_layer(middleware::from_fn(cat::accept_as_format))
        .route_layer(middleware::from_fn(fallback::refuse_head))
}
