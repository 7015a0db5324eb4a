//! `GET _wlm/stats` (JSON, per node and group) and `GET _list/wlm_stats` (a paginated table),
//! shaped as OpenSearch's `wlm_stats_action` (facts §4).
//!
//! # Decisions
//! - Every live member answers its part (`cluster/local/wlm_stats.rs`) over node-to-node RPC;
//!   a member that fails or does not answer within `timeout` (default 10 s) is a `_nodes`
//!   failure, never a hang.
//! - The node selector accepts `_all`, `_local`, `*`, node ids and names and wildcards over
//!   them; a selector matching nothing answers an empty nodes response (`_nodes.total: 0`).
//! - A group id this node does not know is a per-node failure (`_nodes.failed: 1` and a
//!   `failures` entry caused by `resource_not_found_exception` `"WorkloadGroup with id <id> does
//!   not exist"`), which is how OpenSearch's nodes framework surfaces it.
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
use std::time::Duration;

use crate::http::{Path, Query};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use sluice_cluster::rpc::LocalApi;
use sluice_engine::EngineError;

use crate::cluster::DEFAULT_FANOUT_TIMEOUT;
use crate::cluster::local::{ROW_COLUMNS, RowsParams, SLUICE_COLUMNS, StatsParams};
use crate::cluster::select;
use crate::error::ApiResult;
use crate::http::{Params, reply};
use crate::state::AppState;

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
    stats(&st, None, None, &params).await
}

async fn stats_groups(
    State(st): State<Arc<AppState>>,
    Path(groups): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, None, Some(&groups), &params).await
}

async fn stats_nodes(
    State(st): State<Arc<AppState>>,
    Path(nodes): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, Some(&nodes), None, &params).await
}

async fn stats_nodes_groups(
    State(st): State<Arc<AppState>>,
    Path((nodes, groups)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, Some(&nodes), Some(&groups), &params).await
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

async fn list_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, None, None, &params).await
}

async fn list_groups(
    State(st): State<Arc<AppState>>,
    Path(groups): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, None, Some(&groups), &params).await
}

async fn list_nodes(
    State(st): State<Arc<AppState>>,
    Path(nodes): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, Some(&nodes), None, &params).await
}

async fn list_nodes_groups(
    State(st): State<Arc<AppState>>,
    Path((nodes, groups)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, Some(&nodes), Some(&groups), &params).await
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
struct TableParams {
    size: usize,
    sort: SortBy,
    desc: bool,
    next_token: Option<String>,
    breach: Option<bool>,
}

fn parse_params(params: &Params) -> Result<TableParams, EngineError> {
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
    Ok(TableParams {
        size,
        sort,
        desc,
        next_token: params.get("next_token").cloned(),
        breach,
    })
}

/// The members a request's node selector names.
fn targets(st: &AppState, nodes: Option<&str>) -> Vec<sluice_cluster::Member> {
    let members = st.cluster.members();
    select::select(&members.live, &st.identity.node_id, nodes)
}

/// The fan-out deadline: the request's `timeout`, else [`DEFAULT_FANOUT_TIMEOUT`].
fn fanout_timeout(params: &Params) -> Result<Duration, EngineError> {
    match params.get("timeout") {
        None => Ok(DEFAULT_FANOUT_TIMEOUT),
        Some(v) => Ok(sluice_wire::parse_time_value(v, "timeout")
            .map_err(sluice_wire::OpenSearchError::from)?
            .duration_opt()
            .unwrap_or(DEFAULT_FANOUT_TIMEOUT)),
    }
}

async fn stats(
    st: &AppState,
    nodes: Option<&str>,
    groups: Option<&str>,
    params: &Params,
) -> ApiResult<Response> {
    let p = parse_params(params)?;
    let with_buckets = include_buckets(params)?;
    let deadline = fanout_timeout(params)?;
    let call = StatsParams {
        groups: groups.map(str::to_string),
        breach: p.breach,
        buckets: with_buckets,
    };
    let outcomes = st
        .cluster
        .fan_out(
            &targets(st, nodes),
            LocalApi::WlmStats,
            &json!(call),
            deadline,
        )
        .await;
    let (answers, envelope) = select::envelope(outcomes);
    let mut body = Map::new();
    body.insert("_nodes".into(), envelope);
    body.insert("cluster_name".into(), json!(st.config.cluster_name));
    for (member, answer) in answers {
        body.insert(member.node_id, answer);
    }
    Ok(reply(StatusCode::OK, Value::Object(body), params))
}

/// The table's first columns, `|` cells included, as OpenSearch prints them; the figure
/// columns follow ([`ROW_COLUMNS`], then sluice's [`SLUICE_COLUMNS`]).
const KEY_COLUMNS: [&str; 3] = ["NODE_ID", "|", "WORKLOAD_GROUP_ID"];

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

async fn list(
    st: &AppState,
    nodes: Option<&str>,
    groups: Option<&str>,
    params: &Params,
) -> ApiResult<Response> {
    let p = parse_params(params)?;
    let deadline = fanout_timeout(params)?;
    let call = RowsParams {
        groups: groups.map(str::to_string),
        breach: p.breach,
    };
    let outcomes = st
        .cluster
        .fan_out(
            &targets(st, nodes),
            LocalApi::WlmStatsRows,
            &json!(call),
            deadline,
        )
        .await;
    // A group unknown to a node is the request's error, as on one node; a node that did not
    // answer is left out of the table and named in the JSON form's `_nodes.failures`.
    if let Some(not_found) = outcomes.iter().find_map(|o| match &o.result {
        Ok(a) if a.status == 404 => Some(a.body.clone()),
        _ => None,
    }) {
        let reason = not_found["error"]["reason"]
            .as_str()
            .unwrap_or("WorkloadGroup does not exist")
            .to_string();
        return Err(EngineError::new(sluice_engine::ErrorCode::ResourceNotFound, reason).into());
    }
    let (answers, envelope) = select::envelope(outcomes);
    let mut rows: Vec<(String, String, Vec<String>)> = Vec::new();
    for (member, answer) in answers {
        for row in answer["rows"].as_array().into_iter().flatten() {
            let group = row["group"].as_str().unwrap_or_default().to_string();
            let cells = row["cells"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c.as_str().unwrap_or_default().to_string())
                .collect();
            rows.push((member.node_id.clone(), group, cells));
        }
    }
    rows.sort_by(|a, b| {
        let by_node = a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1));
        let by_group = a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0));
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
                .position(|(n, g, _)| *n == token.node && *g == token.group)
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
        let (node, group, _) = &rows[end - 1];
        PageToken {
            node: node.clone(),
            group: group.clone(),
            total: rows.len(),
            sort: p.sort,
            desc: p.desc,
        }
        .encode()
    });
    let cells: Vec<Vec<String>> = page
        .iter()
        .map(|(node, group, figures)| {
            let mut row = vec![node.clone(), "|".into(), group.clone()];
            for f in figures {
                row.push("|".into());
                row.push(f.clone());
            }
            row
        })
        .collect();
    let mut columns: Vec<&str> = KEY_COLUMNS.to_vec();
    for name in ROW_COLUMNS
        .iter()
        .copied()
        .chain(SLUICE_COLUMNS.iter().map(|(n, _)| *n))
    {
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
        let mut body = json!({"next_token": next_token, "wlm_stats": items});
        if envelope["failed"].as_u64().unwrap_or(0) > 0 {
            body["_nodes"] = envelope;
        }
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
