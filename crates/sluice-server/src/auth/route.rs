//! Which action a request is, from its method and path alone: the one table authorization
//! reads, so every request — a routed API, a route sluice does not know, or (in gateway mode)
//! a request forwarded upstream — is authorized the same way, before any handler runs.
//!
//! A request that names no known route is [`Action::Unclassified`], which only a grant of
//! every cluster action allows: a route added later is closed until it is classified here.

use std::borrow::Cow;

use axum::http::Method;
use sluice_core::authz::Action;

/// What authorizing a request needs to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction<'a> {
    /// A cluster action.
    Cluster(Action),
    /// An index action on an index expression (`_all` when the path names none).
    Index(Action, Cow<'a, str>),
    /// A request of items (`_bulk`, `_msearch`, `_mget`), its owner-bound parts (scroll,
    /// `_tasks`): the handler authorizes each item or owner through
    /// [`super::authz`]; `name` is the request's action name, for messages and the audit log.
    PerItem(&'static str),
}

/// `_bulk`'s action name.
pub const BULK: &str = "indices:data/write/bulk";
/// `_mget`'s action name.
pub const MGET: &str = "indices:data/read/mget";
/// `_msearch`'s action name.
pub const MSEARCH: &str = "indices:data/read/msearch";
/// A scroll continuation's action name.
pub const SCROLL: &str = "indices:data/read/scroll";
/// Clearing scrolls.
pub const SCROLL_CLEAR: &str = "indices:data/read/scroll/clear";
/// `_tasks` (each task is shown or cancelled by its owner or a cluster permission).
pub const TASKS: &str = "cluster:monitor/tasks/lists";
/// `POST _aliases` (each action is authorized on its indices; the request is atomic, so one
/// refused action refuses it).
pub const ALIASES: &str = "indices:admin/aliases";

/// Segments of the longest path classified (`/_list/wlm_stats/{nodes}/stats/{groups}` has 5).
const MAX_SEGMENTS: usize = 8;

/// Percent-decodes a path segment (`logs%2Corders` → `logs,orders`); borrowed when it holds
/// no escape.
fn decode(segment: &str) -> Cow<'_, str> {
    if !segment.contains('%') {
        return Cow::Borrowed(segment);
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// Whether the query asks `_wlm/stats` for the bucket detail (`include=buckets`).
fn wants_buckets(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&').any(|kv| {
            kv.split_once('=')
                .is_some_and(|(k, v)| k == "include" && v.split(',').any(|x| x == "buckets"))
        })
    })
}

/// The URL's `index` parameter as the handlers read it
/// ([`crate::http::url_index::query_index`]): the indices of a search, count or search
/// template whose path names none, as OpenSearch's handlers read them
/// (`request.param("index")`). An empty one names all (`None`).
fn url_index<'a>(query: Option<&str>) -> Option<Cow<'a, str>> {
    crate::http::url_index::query_index(query)
        .filter(|v| !v.is_empty())
        .map(|v| Cow::Owned(v.into_owned()))
}

/// The alias names a request adding or removing aliases through its path names
/// (`PUT|POST|DELETE /{index}/_alias/{name}`, also `_aliases`), decoded: authorized as names
/// on top of the indices [`classify`] gives, so a tenant cannot plant an alias in another's
/// namespace (see [`super::authz::authorize`]).
pub fn alias_names<'a>(method: &Method, path: &'a str) -> Option<Cow<'a, str>> {
    let writes = *method == Method::PUT || *method == Method::POST || *method == Method::DELETE;
    let mut segs = path.split('/').filter(|s| !s.is_empty());
    let (Some(idx), Some(api), Some(name), None) =
        (segs.next(), segs.next(), segs.next(), segs.next())
    else {
        return None;
    };
    (writes && is_index_expression(idx) && (api == "_alias" || api == "_aliases"))
        .then(|| decode(name))
}

/// Whether a path's first segment is an index expression: no API's name (those start with
/// `_`, which OpenSearch refuses in index names), or `_all` (alone or first of a list). The
/// one rule for authorization and for the routes that must not read an API's name as an
/// index ([`crate::http::fallback::names_an_api`]).
pub fn is_index_expression(segment: &str) -> bool {
    !segment.starts_with('_') || segment == "_all" || segment.starts_with("_all,")
}

/// The action of a request to `path` (without the query) with `method`.
pub fn classify<'a>(method: &Method, path: &'a str, query: Option<&str>) -> RouteAction<'a> {
    use RouteAction::{Cluster, Index, PerItem};
    // The segments on the stack: classifying allocates nothing (a longer path is no route).
    let mut buf = [""; MAX_SEGMENTS];
    let mut n = 0;
    for s in path.split('/').filter(|s| !s.is_empty()) {
        if n == MAX_SEGMENTS {
            return Cluster(Action::Unclassified);
        }
        buf[n] = s;
        n += 1;
    }
    let segs = &buf[..n];
    let m = method.clone();
    let read = m == Method::GET || m == Method::HEAD;
    let all = || Cow::Borrowed("_all");
    match segs {
        [] if read => Cluster(Action::ClusterMain),
        ["_cluster", "health"] | ["_cluster", "health", _] if read => {
            Cluster(Action::ClusterHealth)
        }
        ["_cluster", "settings"] if read => Cluster(Action::ClusterSettingsGet),
        ["_cluster", "settings"] if m == Method::PUT => Cluster(Action::ClusterSettingsUpdate),
        ["_nodes", "stats", ..] | ["_nodes", _, "stats", ..] if read => Cluster(Action::NodesStats),
        ["_nodes"] | ["_nodes", _] | ["_nodes", _, _] | ["_cat", "nodes"] if read => {
            Cluster(Action::NodesInfo)
        }
        ["_cat", "health"] if read => Cluster(Action::ClusterHealth),
        ["_prometheus", "metrics"] if read => Cluster(Action::Metrics),
        ["_sluice", "dashboard"] | ["_sluice", "dashboard", _] if read => {
            Cluster(Action::Dashboard)
        }
        ["_cat", "indices" | "shards"] | ["_list", "indices" | "shards"] if read => {
            Index(Action::IndicesStats, all())
        }
        ["_cat", "indices" | "shards", idx] | ["_list", "indices" | "shards", idx] if read => {
            Index(Action::IndicesStats, decode(idx))
        }
        ["_cat", "aliases"] | ["_cat", "aliases", _] if read => Index(Action::AliasesGet, all()),
        ["_cat", "count"] if read => Index(Action::Search, all()),
        ["_cat", "count", idx] if read => Index(Action::Search, decode(idx)),
        ["_stats"] | ["_stats", _] if read => Index(Action::IndicesStats, all()),
        ["_forcemerge"] if m == Method::POST => Index(Action::ForceMerge, all()),
        ["_settings"] | ["_settings", _] if read => Index(Action::SettingsGet, all()),
        ["_mapping"] if read => Index(Action::MappingGet, all()),
        ["_alias"] | ["_alias", _] | ["_aliases"] if read => Index(Action::AliasesGet, all()),
        ["_aliases"] if m == Method::POST => PerItem(ALIASES),
        ["_refresh"] => Index(Action::Refresh, all()),
        ["_flush"] => Index(Action::Flush, all()),
        ["_search"] | ["_count"] => Index(Action::Search, url_index(query).unwrap_or_else(all)),
        ["_search", "template"] => {
            Index(Action::SearchTemplate, url_index(query).unwrap_or_else(all))
        }
        ["_msearch", "template"] => PerItem(MSEARCH),
        ["_search", "scroll"] | ["_search", "scroll", _] if m == Method::DELETE => {
            PerItem(SCROLL_CLEAR)
        }
        ["_search", "scroll"] | ["_search", "scroll", _] => PerItem(SCROLL),
        ["_bulk"] => PerItem(BULK),
        ["_mget"] => PerItem(MGET),
        ["_msearch"] => PerItem(MSEARCH),
        ["_tasks", ..] => PerItem(TASKS),
        // The listing `GET _tasks` is, as a table: each task shown to its owner or a holder
        // of `cluster:monitor/tasks/lists`.
        ["_cat", "tasks"] if read => PerItem(TASKS),
        ["_wlm", "workload_group"] | ["_wlm", "workload_group", _] if read => {
            Cluster(Action::WlmGroupGet)
        }
        ["_wlm", "workload_group"] if m == Method::PUT || m == Method::POST => {
            Cluster(Action::WlmGroupCreate)
        }
        ["_wlm", "workload_group", _] if m == Method::PUT || m == Method::POST => {
            Cluster(Action::WlmGroupUpdate)
        }
        ["_wlm", "workload_group", _] if m == Method::DELETE => Cluster(Action::WlmGroupDelete),
        ["_wlm", "stats", ..] | ["_wlm", _, "stats", ..] | ["_list", "wlm_stats", ..] if read => {
            if wants_buckets(query) {
                Cluster(Action::WlmStatsBuckets)
            } else {
                Cluster(Action::WlmStats)
            }
        }
        ["_rules", "workload_group"] | ["_rules", "workload_group", _] if read => {
            Cluster(Action::RuleGet)
        }
        ["_rules", "workload_group"] if m == Method::PUT || m == Method::POST => {
            Cluster(Action::RuleCreate)
        }
        ["_rules", "workload_group", _] if m == Method::PUT || m == Method::POST => {
            Cluster(Action::RuleUpdate)
        }
        ["_rules", "workload_group", _] if m == Method::DELETE => Cluster(Action::RuleDelete),
        [idx, rest @ ..] if is_index_expression(idx) => {
            let idx = decode(idx);
            let action = match (rest, &m) {
                ([], _) if read => Action::IndexGet,
                ([], &Method::PUT) => Action::IndexCreate,
                ([], &Method::DELETE) => Action::IndexDelete,
                (["_mapping"], _) if read => Action::MappingGet,
                (["_mapping"], &Method::PUT | &Method::POST) => Action::MappingPut,
                (["_settings"] | ["_settings", _], _) if read => Action::SettingsGet,
                (["_settings"], &Method::PUT) => Action::SettingsUpdate,
                (["_alias"] | ["_alias", _] | ["_aliases"], _) if read => Action::AliasesGet,
                (
                    ["_alias", _] | ["_aliases", _],
                    &Method::PUT | &Method::POST | &Method::DELETE,
                ) => Action::Aliases,
                (["_flush"], _) => Action::Flush,
                (["_refresh"], _) => Action::Refresh,
                (["_block", _], &Method::PUT) => Action::BlockAdd,
                (["_stats"] | ["_stats", _], _) if read => Action::IndicesStats,
                (["_close"], &Method::POST) => Action::IndexClose,
                (["_open"], &Method::POST) => Action::IndexOpen,
                (["_forcemerge"], &Method::POST) => Action::ForceMerge,
                (["_delete_by_query"], &Method::POST) => Action::DeleteByQuery,
                (["_update_by_query"], &Method::POST) => Action::UpdateByQuery,
                (["_search"] | ["_count"], _) => Action::Search,
                (["_search", "template"], _) => Action::SearchTemplate,
                (["_msearch", "template"], _) => return PerItem(MSEARCH),
                (["_doc"], &Method::POST) => Action::WriteIndex,
                (["_doc", _], _) if read => Action::Get,
                (["_doc", _] | ["_create", _], &Method::PUT | &Method::POST) => Action::WriteIndex,
                (["_doc", _], &Method::DELETE) => Action::WriteDelete,
                (["_update", _], &Method::POST) => Action::WriteUpdate,
                (["_source", _], _) if read => Action::Get,
                (["_bulk"], _) => return PerItem(BULK),
                (["_mget"], _) => return PerItem(MGET),
                (["_msearch"], _) => return PerItem(MSEARCH),
                _ => return Cluster(Action::Unclassified),
            };
            Index(action, idx)
        }
        _ => Cluster(Action::Unclassified),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c<'a>(m: Method, path: &'a str) -> RouteAction<'a> {
        classify(&m, path, None)
    }

    #[test]
    fn test_classify_names_the_action_and_index_expression() {
        use RouteAction::*;
        assert_eq!(c(Method::GET, "/"), Cluster(Action::ClusterMain));
        assert_eq!(
            c(Method::GET, "/_sluice/dashboard/data"),
            Cluster(Action::Dashboard)
        );
        assert_eq!(
            c(Method::GET, "/_sluice/dashboard"),
            Cluster(Action::Dashboard)
        );
        assert_eq!(
            c(Method::POST, "/logs-*,orders/_search"),
            Index(Action::Search, "logs-*,orders".into())
        );
        assert_eq!(
            c(Method::GET, "/logs%2Corders/_count"),
            Index(Action::Search, "logs,orders".into())
        );
        assert_eq!(
            c(Method::GET, "/_search"),
            Index(Action::Search, "_all".into())
        );
        // The URL's `index` when the path names none (the last; empty: all).
        let q = |path, query| classify(&Method::GET, path, Some(query));
        assert_eq!(
            q("/_search", "size=1&index=a%2Cb"),
            Index(Action::Search, "a,b".into())
        );
        assert_eq!(
            q("/_count", "index=x&index=y"),
            Index(Action::Search, "y".into())
        );
        assert_eq!(
            q("/_search", "index="),
            Index(Action::Search, "_all".into())
        );
        assert_eq!(
            q("/_search/template", "index=t"),
            Index(Action::SearchTemplate, "t".into())
        );
        assert_eq!(
            q("/p/_search", "index=x"),
            Index(Action::Search, "p".into())
        );
        assert_eq!(c(Method::PUT, "/a"), Index(Action::IndexCreate, "a".into()));
        assert_eq!(
            c(Method::DELETE, "/a"),
            Index(Action::IndexDelete, "a".into())
        );
        assert_eq!(c(Method::HEAD, "/a"), Index(Action::IndexGet, "a".into()));
        assert_eq!(
            c(Method::DELETE, "/a/_doc/1"),
            Index(Action::WriteDelete, "a".into())
        );
        assert_eq!(
            c(Method::PUT, "/a/_create/1"),
            Index(Action::WriteIndex, "a".into())
        );
        assert_eq!(c(Method::POST, "/a/_bulk"), PerItem(BULK));
        assert_eq!(c(Method::POST, "/_msearch"), PerItem(MSEARCH));
        assert_eq!(
            c(Method::POST, "/_search/template"),
            Index(Action::SearchTemplate, "_all".into())
        );
        assert_eq!(
            c(Method::GET, "/a,b/_search/template"),
            Index(Action::SearchTemplate, "a,b".into())
        );
        assert_eq!(c(Method::POST, "/_msearch/template"), PerItem(MSEARCH));
        assert_eq!(c(Method::POST, "/_aliases"), PerItem(ALIASES));
        assert_eq!(
            alias_names(&Method::PUT, "/logs/_alias/a%2Cb").as_deref(),
            Some("a,b")
        );
        assert_eq!(
            alias_names(&Method::DELETE, "/logs/_aliases/x").as_deref(),
            Some("x")
        );
        assert_eq!(alias_names(&Method::GET, "/logs/_alias/x"), None);
        assert_eq!(alias_names(&Method::PUT, "/_alias/x"), None);
        assert_eq!(alias_names(&Method::PUT, "/logs/_alias"), None);
        assert_eq!(
            c(Method::GET, "/_all/_search"),
            Index(Action::Search, "_all".into())
        );
        assert_eq!(
            c(Method::POST, "/_all,-x/_count"),
            Index(Action::Search, "_all,-x".into())
        );
        assert_eq!(
            c(Method::GET, "/_aliases"),
            Index(Action::AliasesGet, "_all".into())
        );
        assert_eq!(c(Method::POST, "/a/_msearch/template"), PerItem(MSEARCH));
        assert_eq!(
            c(Method::DELETE, "/_search/scroll/_all"),
            PerItem(SCROLL_CLEAR)
        );
        assert_eq!(c(Method::POST, "/_tasks/x:1/_cancel"), PerItem(TASKS));
        assert_eq!(c(Method::GET, "/_cat/tasks"), PerItem(TASKS));
        assert_eq!(
            c(Method::PUT, "/_wlm/workload_group"),
            Cluster(Action::WlmGroupCreate)
        );
        assert_eq!(
            c(Method::PUT, "/_wlm/workload_group/g"),
            Cluster(Action::WlmGroupUpdate)
        );
        assert_eq!(
            c(Method::DELETE, "/_rules/workload_group/r"),
            Cluster(Action::RuleDelete)
        );
        assert_eq!(c(Method::GET, "/_wlm/stats"), Cluster(Action::WlmStats));
        assert_eq!(
            classify(&Method::GET, "/_wlm/stats", Some("pretty&include=buckets")),
            Cluster(Action::WlmStatsBuckets)
        );
        assert_eq!(c(Method::GET, "/_nodes"), Cluster(Action::NodesInfo));
        assert_eq!(c(Method::GET, "/_nodes/_local"), Cluster(Action::NodesInfo));
        assert_eq!(
            c(Method::GET, "/_nodes/_local/stats"),
            Cluster(Action::NodesStats)
        );
        assert_eq!(c(Method::GET, "/_cat/nodes"), Cluster(Action::NodesInfo));
        assert_eq!(
            c(Method::GET, "/_cat/health"),
            Cluster(Action::ClusterHealth)
        );
        assert_eq!(
            c(Method::GET, "/_stats/docs"),
            Index(Action::IndicesStats, "_all".into())
        );
        // The shard and paginated tables read what `_cat/indices` reads.
        for path in ["/_cat/shards", "/_list/indices", "/_list/shards"] {
            assert_eq!(
                c(Method::GET, path),
                Index(Action::IndicesStats, "_all".into())
            );
            assert_eq!(
                c(Method::GET, &format!("{path}/a%2Cb")),
                Index(Action::IndicesStats, "a,b".into())
            );
        }
        assert_eq!(
            c(Method::GET, "/a/_stats"),
            Index(Action::IndicesStats, "a".into())
        );
        assert_eq!(
            c(Method::POST, "/a/_delete_by_query"),
            Index(Action::DeleteByQuery, "a".into())
        );
        assert_eq!(
            c(Method::POST, "/a/_update_by_query"),
            Index(Action::UpdateByQuery, "a".into())
        );
        assert_eq!(
            c(Method::POST, "/a/_close"),
            Index(Action::IndexClose, "a".into())
        );
        assert_eq!(
            c(Method::POST, "/a/_open"),
            Index(Action::IndexOpen, "a".into())
        );
        assert_eq!(
            c(Method::POST, "/_forcemerge"),
            Index(Action::ForceMerge, "_all".into())
        );
        assert_eq!(
            c(Method::POST, "/a/_forcemerge"),
            Index(Action::ForceMerge, "a".into())
        );
        assert_eq!(c(Method::GET, "/_nope"), Cluster(Action::Unclassified));
        assert_eq!(c(Method::POST, "/a/_nope"), Cluster(Action::Unclassified));
        assert_eq!(
            c(Method::PUT, "/_cluster/settings"),
            Cluster(Action::ClusterSettingsUpdate)
        );
    }
}
