//! `GET _wlm/stats` (JSON, per node and group) and `GET _list/wlm_stats` (a paginated table),
//! shaped as OpenSearch's `wlm_stats_action` (facts §4).
//!
//! # Decisions
//! - The node selector accepts `_all`, `_local`, `*`, the node id and the node name; a
//!   selector matching nothing answers an empty nodes response (`_nodes.total: 0`).
//! - A group id this node does not know is a per-node failure (`_nodes.failed: 1` and a
//!   `failures` entry caused by `resource_not_found_exception` "WorkloadGroup with id <id> does
//!   not exist"), which is how OpenSearch's nodes framework surfaces it.
//! - `breach=true|false` works (OpenSearch's parser reads the wrong parameter): it keeps the
//!   groups whose last usage of some limited resource is (or is not) above limit × the node
//!   rejection threshold. DEFAULT has no limits, so it is never breached.
//! - Each group object carries OpenSearch's fields and then sluice's (DESIGN D10): `failures`,
//!   the throttle and queue figures; DEFAULT adds `total_unknown_group_tags`.
//! - `include=buckets` adds each group's in-flight buckets (attribute, value, `in_flight`,
//!   `node_limit`) — the operator's view of the node-tier throttle. It names usernames and
//!   roles, so it needs the cluster permission `cluster:admin/opensearch/wlm/stats/buckets`
//!   (roles in `auth.admin_roles` have it) when authentication is on.
//! - `_list/wlm_stats` tokens are base64 of the last (node, group) pair, the row count, the sort
//!   field and order — not encrypted: they carry nothing secret. The text output ends with a
//!   `next_token <token>` line when there is a next page, and with OpenSearch's "No more pages
//!   available" row when there is not; `format=json` answers `{"next_token", "wlm_stats"}`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use sluice_core::ResourceType;
use sluice_engine::EngineError;

use crate::error::ApiResult;
use crate::http::{Params, reply};
use crate::settings::keys;
use crate::state::AppState;
use crate::workload::{GroupEntry, GroupStats};

/// The routes of this module.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_wlm/stats", get(stats_all))
        .route("/_wlm/stats/{groups}", get(stats_groups))
        .route("/_wlm/{nodes}/stats", get(stats_nodes))
        .route("/_wlm/{nodes}/stats/{groups}", get(stats_nodes_groups))
        .route("/_list/wlm_stats", get(list_all))
        .route("/_list/wlm_stats/stats/{groups}", get(list_groups))
        .route("/_list/wlm_stats/{nodes}/stats", get(list_nodes))
        .route(
            "/_list/wlm_stats/{nodes}/stats/{groups}",
            get(list_nodes_groups),
        )
}

async fn stats_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, None, None, &params)
}

async fn stats_groups(
    State(st): State<Arc<AppState>>,
    Path(groups): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, None, Some(&groups), &params)
}

async fn stats_nodes(
    State(st): State<Arc<AppState>>,
    Path(nodes): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, Some(&nodes), None, &params)
}

async fn stats_nodes_groups(
    State(st): State<Arc<AppState>>,
    Path((nodes, groups)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, Some(&nodes), Some(&groups), &params)
}

/// Whether the request asks for the per-bucket listing (`include=buckets`).
fn include_buckets(params: &Params) -> Result<bool, EngineError> {
    match params.get("include").map(String::as_str) {
        None => Ok(false),
        Some("buckets") => Ok(true),
        Some(other) => Err(EngineError::illegal_argument(format!(
            "Invalid value for 'include': [{other}]. Allowed: 'buckets'"
        ))),
    }
}

/// The in-flight buckets of `entry`'s group on this node, with their live limit.
fn buckets_json(st: &AppState, entry: &GroupEntry) -> Value {
    let limit = entry.group.as_ref().and_then(|g| g.throttling.node_limit);
    let mut buckets: Vec<(sluice_core::BucketKey, u64)> = st
        .workload
        .permits
        .buckets()
        .into_iter()
        .filter(|(k, _)| *k.group_id == *entry.id)
        .collect();
    buckets.sort();
    Value::Array(
        buckets
            .into_iter()
            .map(|(k, n)| {
                json!({
                    "attribute": k.attribute.as_str(),
                    "value": k.value.as_deref(),
                    "in_flight": n,
                    "node_limit": limit,
                })
            })
            .collect(),
    )
}

async fn list_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, None, None, &params)
}

async fn list_groups(
    State(st): State<Arc<AppState>>,
    Path(groups): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, None, Some(&groups), &params)
}

async fn list_nodes(
    State(st): State<Arc<AppState>>,
    Path(nodes): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, Some(&nodes), None, &params)
}

async fn list_nodes_groups(
    State(st): State<Arc<AppState>>,
    Path((nodes, groups)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, Some(&nodes), Some(&groups), &params)
}

/// The table's sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortBy {
    NodeId,
    WorkloadGroup,
}

impl SortBy {
    fn as_str(self) -> &'static str {
        match self {
            SortBy::NodeId => "node_id",
            SortBy::WorkloadGroup => "workload_group",
        }
    }
}

/// The parameters every route parses (OpenSearch parses the table's for the JSON routes too).
#[derive(Debug)]
struct StatsParams {
    size: usize,
    sort: SortBy,
    desc: bool,
    next_token: Option<String>,
    breach: Option<bool>,
}

fn parse_params(params: &Params) -> Result<StatsParams, EngineError> {
    let size = match params.get("size") {
        None => 10,
        Some(v) => match v.parse::<usize>() {
            Ok(n @ 1..=100) => n,
            _ => {
                return Err(EngineError::illegal_argument(
                    "Invalid value for 'size'. Allowed range: 1 to 100",
                ));
            }
        },
    };
    let sort = match params.get("sort").map(String::as_str) {
        None | Some("node_id") => SortBy::NodeId,
        Some("workload_group") => SortBy::WorkloadGroup,
        Some(_) => {
            return Err(EngineError::illegal_argument(
                "Invalid value for 'sort'. Allowed: 'node_id', 'workload_group'",
            ));
        }
    };
    let desc = match params.get("order").map(String::as_str) {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(_) => {
            return Err(EngineError::illegal_argument(
                "Invalid value for 'order'. Allowed: 'asc', 'desc'",
            ));
        }
    };
    let breach = match params.get("breach").map(String::as_str) {
        None => None,
        Some("true") | Some("") => Some(true),
        Some("false") => Some(false),
        Some(v) => {
            return Err(EngineError::illegal_argument(format!(
                "Failed to parse value [{v}] as only [true] or [false] are allowed for parameter [breach]"
            )));
        }
    };
    Ok(StatsParams {
        size,
        sort,
        desc,
        next_token: params.get("next_token").cloned(),
        breach,
    })
}

/// Whether the node selector `nodes` (a comma list) selects this node.
fn node_selected(st: &AppState, nodes: Option<&str>) -> bool {
    let Some(nodes) = nodes else {
        return true;
    };
    nodes.split(',').map(str::trim).any(|n| {
        matches!(n, "_all" | "_local" | "*" | "")
            || n == st.identity.node_id
            || n == st.config.node_name
    })
}

/// This node's groups in id order, filtered by `groups` (a comma list of ids or `_all`) and
/// `breach`; `Err` names the first requested id that does not exist.
fn node_groups(
    st: &AppState,
    groups: Option<&str>,
    breach: Option<bool>,
) -> Result<Vec<Arc<GroupEntry>>, String> {
    let view = st.workload.view();
    let mut all: Vec<Arc<GroupEntry>> = view.groups.values().cloned().collect();
    all.push(st.workload.default_entry().clone());
    all.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(list) = groups {
        let wanted: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if !wanted.contains(&"_all") {
            if let Some(missing) = wanted.iter().find(|w| !all.iter().any(|e| &*e.id == **w)) {
                return Err((*missing).to_string());
            }
            all.retain(|e| wanted.contains(&&*e.id));
        }
    }
    if let Some(b) = breach {
        all.retain(|e| is_breached(st, e) == b);
    }
    Ok(all)
}

/// Whether some limited resource of the group was last seen above limit × the node
/// rejection threshold.
fn is_breached(st: &AppState, e: &GroupEntry) -> bool {
    let Some(g) = &e.group else {
        return false;
    };
    let settings = st.cluster_settings.snapshot();
    [
        (ResourceType::Cpu, keys::WLM_CPU_REJECTION_THRESHOLD),
        (ResourceType::Memory, keys::WLM_MEMORY_REJECTION_THRESHOLD),
    ]
    .into_iter()
    .any(|(r, key)| {
        g.resource_limits
            .get(r)
            .is_some_and(|limit| e.stats.resource(r).current_usage() > limit * settings.double(key))
    })
}

fn stats(
    st: &AppState,
    nodes: Option<&str>,
    groups: Option<&str>,
    params: &Params,
) -> ApiResult<Response> {
    let p = parse_params(params)?;
    let with_buckets = include_buckets(params)?;
    let node_id = st.identity.node_id.clone();
    let mut body = Map::new();
    if !node_selected(st, nodes) {
        body.insert(
            "_nodes".into(),
            json!({"total": 0, "successful": 0, "failed": 0}),
        );
        body.insert("cluster_name".into(), json!(st.config.cluster_name));
        return Ok(reply(StatusCode::OK, Value::Object(body), params));
    }
    match node_groups(st, groups, p.breach) {
        Ok(entries) => {
            body.insert(
                "_nodes".into(),
                json!({"total": 1, "successful": 1, "failed": 0}),
            );
            body.insert("cluster_name".into(), json!(st.config.cluster_name));
            let groups: Map<String, Value> = entries
                .iter()
                .map(|e| {
                    let mut v = e.stats.to_json(e.is_default());
                    if let Some(reason) = &e.inactive_throttle {
                        // A throttle that cannot apply on this node is never silent.
                        v["warnings"] = json!([reason]);
                    }
                    if with_buckets {
                        v["buckets"] = buckets_json(st, e);
                    }
                    (e.id.to_string(), v)
                })
                .collect();
            body.insert(node_id, json!({"workload_groups": groups}));
        }
        Err(missing) => {
            let reason = format!("WorkloadGroup with id {missing} does not exist");
            body.insert(
                "_nodes".into(),
                json!({
                    "total": 1, "successful": 0, "failed": 1,
                    "failures": [{
                        "type": "failed_node_exception",
                        "reason": format!("Failed node [{node_id}]"),
                        "node_id": node_id,
                        "caused_by": {"type": "resource_not_found_exception", "reason": reason}
                    }]
                }),
            );
            body.insert("cluster_name".into(), json!(st.config.cluster_name));
        }
    }
    Ok(reply(StatusCode::OK, Value::Object(body), params))
}

/// The table's columns, `|` cells included, as OpenSearch prints them.
const COLUMNS: [&str; 13] = [
    "NODE_ID",
    "|",
    "WORKLOAD_GROUP_ID",
    "|",
    "TOTAL_COMPLETIONS",
    "|",
    "TOTAL_REJECTIONS",
    "|",
    "TOTAL_CANCELLATIONS",
    "|",
    "CPU_USAGE",
    "|",
    "MEMORY_USAGE",
];

/// Reads one figure of a group's stats.
type Figure = fn(&GroupStats) -> u64;

/// sluice's extra columns, after OpenSearch's: the throttle's and the queue's figures.
const SLUICE_COLUMNS: [(&str, Figure); 9] = [
    ("TOTAL_THROTTLED", |s| s.total_throttled.get()),
    ("TOTAL_QUEUED", |s| s.total_queued.get()),
    ("TOTAL_QUEUE_REJECTIONS", |s| s.total_queue_rejections.get()),
    ("QUEUED_CURRENT", |s| s.queued_current.get()),
    ("QUEUE_PEAK", |s| s.queue_peak.get()),
    ("QUEUE_WAIT_COUNT", |s| s.queue_wait_count.get()),
    ("TOTAL_QUEUE_WAIT_MILLIS", |s| {
        s.total_queue_wait_millis.get()
    }),
    ("MAX_QUEUE_WAIT_MILLIS", |s| s.max_queue_wait_millis.get()),
    ("TOTAL_WOULD_QUEUE", |s| s.total_would_queue.get()),
];

/// A page token: where the previous page ended and how the rows were sorted.
#[derive(Debug, PartialEq)]
struct PageToken {
    node: String,
    group: String,
    total: usize,
    sort: SortBy,
    desc: bool,
}

impl PageToken {
    fn encode(&self) -> String {
        let raw = format!(
            "{}|{}|{}|{}|{}",
            self.node,
            self.group,
            self.total,
            self.sort.as_str(),
            if self.desc { "desc" } else { "asc" }
        );
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    fn decode(token: &str) -> Option<PageToken> {
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()?;
        let raw = String::from_utf8(raw).ok()?;
        let parts: Vec<&str> = raw.split('|').collect();
        let [node, group, total, sort, order] = parts.as_slice() else {
            return None;
        };
        Some(PageToken {
            node: (*node).to_string(),
            group: (*group).to_string(),
            total: total.parse().ok()?,
            sort: match *sort {
                "node_id" => SortBy::NodeId,
                "workload_group" => SortBy::WorkloadGroup,
                _ => return None,
            },
            desc: match *order {
                "asc" => false,
                "desc" => true,
                _ => return None,
            },
        })
    }
}

/// OpenSearch's answer to a page token whose page no longer exists.
fn pagination_error(details: &str) -> Response {
    let body = json!({
        "error": "Pagination state has changed (e.g., new workload groups added or removed). Please restart pagination from the beginning by omitting the 'next_token' parameter.",
        "details": details,
    });
    crate::http::json_response(StatusCode::BAD_REQUEST, &body, false)
}

fn list(
    st: &AppState,
    nodes: Option<&str>,
    groups: Option<&str>,
    params: &Params,
) -> ApiResult<Response> {
    let p = parse_params(params)?;
    let node_id = st.identity.node_id.as_str();
    let entries = if node_selected(st, nodes) {
        node_groups(st, groups, p.breach).map_err(|missing| {
            EngineError::new(
                sluice_engine::ErrorCode::ResourceNotFound,
                format!("WorkloadGroup with id {missing} does not exist"),
            )
        })?
    } else {
        Vec::new()
    };
    // Rows are (node, group) pairs; with one node both sort keys order by group id, but the
    // tie-break rule is kept so a cluster's table sorts the same way.
    let mut rows: Vec<(String, Arc<GroupEntry>)> = entries
        .into_iter()
        .map(|e| (node_id.to_string(), e))
        .collect();
    rows.sort_by(|a, b| {
        let by_node = a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id));
        let by_group = a.1.id.cmp(&b.1.id).then_with(|| a.0.cmp(&b.0));
        let o = match p.sort {
            SortBy::NodeId => by_node,
            SortBy::WorkloadGroup => by_group,
        };
        if p.desc { o.reverse() } else { o }
    });
    let start = match &p.next_token {
        None => 0,
        Some(t) => {
            let Some(token) = PageToken::decode(t) else {
                return Err(
                    EngineError::illegal_argument("Invalid pagination token format").into(),
                );
            };
            if token.sort != p.sort || token.desc != p.desc {
                return Ok(pagination_error(
                    "the sort or order differs from the one the token was made with",
                ));
            }
            match rows
                .iter()
                .position(|(n, e)| *n == token.node && *e.id == token.group)
            {
                Some(i) => i + 1,
                None => {
                    return Ok(pagination_error(&format!(
                        "the last row of the previous page (node [{}], workload group [{}]) no longer exists",
                        token.node, token.group
                    )));
                }
            }
        }
    };
    let end = (start + p.size).min(rows.len());
    let page = &rows[start.min(rows.len())..end];
    let next_token = (end < rows.len()).then(|| {
        let (node, e) = &rows[end - 1];
        PageToken {
            node: node.clone(),
            group: e.id.to_string(),
            total: rows.len(),
            sort: p.sort,
            desc: p.desc,
        }
        .encode()
    });
    let usage = |e: &GroupEntry, r: ResourceType| match &e.group {
        Some(g) if g.resource_limits.get(r).is_none() => "NA".to_string(),
        _ => format!("{}", e.stats.resource(r).current_usage()),
    };
    let cells: Vec<Vec<String>> = page
        .iter()
        .map(|(node, e)| {
            let mut row = vec![
                node.clone(),
                "|".into(),
                e.id.to_string(),
                "|".into(),
                e.stats.total_completions.get().to_string(),
                "|".into(),
                e.stats.total_rejections.get().to_string(),
                "|".into(),
                e.stats.total_cancellations.get().to_string(),
                "|".into(),
                usage(e, ResourceType::Cpu),
                "|".into(),
                usage(e, ResourceType::Memory),
            ];
            for (_, figure) in SLUICE_COLUMNS {
                row.push("|".into());
                row.push(figure(&e.stats).to_string());
            }
            row
        })
        .collect();
    let mut columns: Vec<&str> = COLUMNS.to_vec();
    for (name, _) in SLUICE_COLUMNS {
        columns.push("|");
        columns.push(name);
    }
    if params.get("format").map(String::as_str) == Some("json") {
        let items: Vec<Value> = cells
            .iter()
            .map(|row| {
                Value::Object(
                    columns
                        .iter()
                        .zip(row)
                        .filter(|(c, _)| **c != "|")
                        .map(|(c, v)| (c.to_ascii_lowercase(), json!(v)))
                        .collect(),
                )
            })
            .collect();
        let body = json!({"next_token": next_token, "wlm_stats": items});
        return Ok(reply(StatusCode::OK, body, params));
    }
    let mut table: Vec<Vec<String>> = Vec::new();
    let verbose = params.get("v").is_some_and(|v| v.is_empty() || v == "true");
    if verbose {
        table.push(columns.iter().map(|c| (*c).to_string()).collect());
    }
    table.extend(cells);
    if next_token.is_none() {
        let mut footer = vec!["No more pages available".to_string()];
        footer.extend(std::iter::repeat_n("-".to_string(), columns.len() - 1));
        table.push(footer);
    }
    let mut text = crate::http::render_table(&table);
    if let Some(t) = next_token {
        text.push_str(&format!("next_token {t}\n"));
    }
    Ok((
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=UTF-8",
        )],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::DEFAULT_GROUP_ID;

    #[test]
    fn test_page_tokens_round_trip_and_reject_garbage() {
        let t = PageToken {
            node: "n1".into(),
            group: DEFAULT_GROUP_ID.into(),
            total: 7,
            sort: SortBy::WorkloadGroup,
            desc: true,
        };
        assert_eq!(PageToken::decode(&t.encode()), Some(t));
        assert_eq!(PageToken::decode("!!"), None);
        let short = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("a|b|1");
        assert_eq!(PageToken::decode(&short), None);
    }

    #[test]
    fn test_params_are_checked_with_opensearch_messages() {
        let p = |k: &str, v: &str| {
            let mut m = Params::new();
            m.insert(k.into(), v.into());
            parse_params(&m).map_err(|e| e.reason)
        };
        assert!(
            p("size", "0")
                .unwrap_err()
                .contains("Allowed range: 1 to 100")
        );
        assert!(p("size", "101").is_err());
        assert!(p("size", "100").is_ok());
        assert!(
            p("sort", "x")
                .unwrap_err()
                .contains("'node_id', 'workload_group'")
        );
        assert!(p("order", "up").unwrap_err().contains("'asc', 'desc'"));
        assert!(p("breach", "maybe").is_err());
    }
}
