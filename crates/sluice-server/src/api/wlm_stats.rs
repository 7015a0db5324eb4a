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
//! - `include=buckets` adds each group's buckets this node knows of (`buckets`, in key order)
//!   — the operator's view of the throttle. Every bucket has `attribute`, `value`, `in_flight`
//!   (requests holding a node-tier slot) and `node_limit`. A group with a `shared_limit` also
//!   lists the buckets this node holds shared slots of or owns leases of, each with this
//!   node's view of the shared tier:
//!   - `shared_limit`: the group's cluster-wide pool per bucket;
//!   - `shared_leases_held`: owners' leases this node holds for the bucket's requests (running,
//!     or handed to a parked request about to run);
//!   - `shared_leases_idle`: leases of the bucket idle in this node's cache, kept for its next
//!     requests (only for pools of 8 or more; the owner counts them);
//!   - `shared_fail_open_in_flight`: requests of the bucket running without a lease because no
//!     owner answered (fail open; with the leases, at most `shared_limit` per node);
//!   - `shared_parked`: requests of the bucket parked on this node, waiting for a slot (a freed
//!     node slot or a shared lease, whichever comes first);
//!   - `shared_owner`: whether this node owns the bucket's pool on its current ring;
//!   - `shared_leases_owned`: leases of the bucket this node's owner table counts, for every
//!     node's requests (0 on a node that is not, and was not, its owner).
//!
//!   It names usernames and roles, so it needs the cluster permission
//!   `cluster:admin/opensearch/wlm/stats/buckets` (roles in `auth.admin_roles` have it) when
//!   authentication is on.
//! - `_list/wlm_stats` tokens are base64 of the last (node, group) pair, the row count, the sort
//!   field and order (the `_list` APIs' token codec, `api/paging.rs`) — not encrypted: they
//!   carry nothing secret. The text output ends with a
//!   `next_token <token>` line when there is a next page, and with OpenSearch's "No more pages
//!   available" row when there is not.
//! - `_list/wlm_stats` reads the `_cat` parameters with the `_cat` tables' own readers
//!   (`api/cat.rs`): `h=` picks columns by name (`TOTAL_THROTTLED`) or lower-case alias
//!   (`total_throttled`), wildcards allowed, unknown names skipped, as the `_cat` APIs and
//!   OpenSearch's `RestTable` do; `help` lists the columns; `v` adds the header line. The text
//!   table keeps a `|` cell between two shown columns and the footer row as wide as the rows.
//!   `format=json` answers OpenSearch's paginated `_list` shape, `{"next_token", "wlm_stats":
//!   [rows]}`, each row an object keyed by the shown columns' lower-case names; any other
//!   `format` is answered as text, as the `_cat` APIs answer it. `s=` is not read: the table
//!   sorts with `sort` and `order`, which its pages depend on.

use std::sync::Arc;
use std::time::Duration;

use crate::http::{Path, Query};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};
use sluice_cluster::rpc::LocalApi;
use sluice_engine::EngineError;

use crate::api::cat::{self, Column, wants_header, wants_help, wants_json};
use crate::api::paging;
use crate::cluster::DEFAULT_FANOUT_TIMEOUT;
use crate::cluster::local::{RowsParams, StatsParams};
use crate::cluster::select;
use crate::error::ApiResult;
use crate::http::unrecognized::refuse_unrecognized;
use crate::http::{Params, reply};
use crate::state::AppState;

/// The URL parameters of the JSON routes besides those of every route: the table's, which
/// OpenSearch parses for them too, `breach`, sluice's `include` and the fan-out's `timeout`.
const STATS_PARAMS: [&str; 8] = [
    "breach",
    "include",
    "next_token",
    "order",
    "size",
    "sort",
    "timeout",
    "v",
];

/// The URL parameters of the `_list` table besides those of every route: the JSON routes'
/// but `include`, and the `_cat` response parameters OpenSearch accepts on every table.
const LIST_PARAMS: [&str; 14] = [
    "breach",
    "bytes",
    "h",
    "help",
    "next_token",
    "order",
    "pri",
    "s",
    "size",
    "sort",
    "time",
    "timeout",
    "ts",
    "v",
];

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
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, None, None, &params, uri.path()).await
}

async fn stats_groups(
    State(st): State<Arc<AppState>>,
    Path(groups): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, None, Some(&groups), &params, uri.path()).await
}

async fn stats_nodes(
    State(st): State<Arc<AppState>>,
    Path(nodes): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, Some(&nodes), None, &params, uri.path()).await
}

async fn stats_nodes_groups(
    State(st): State<Arc<AppState>>,
    Path((nodes, groups)): Path<(String, String)>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    stats(&st, Some(&nodes), Some(&groups), &params, uri.path()).await
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
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, None, None, &params, uri.path()).await
}

async fn list_groups(
    State(st): State<Arc<AppState>>,
    Path(groups): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, None, Some(&groups), &params, uri.path()).await
}

async fn list_nodes(
    State(st): State<Arc<AppState>>,
    Path(nodes): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, Some(&nodes), None, &params, uri.path()).await
}

async fn list_nodes_groups(
    State(st): State<Arc<AppState>>,
    Path((nodes, groups)): Path<(String, String)>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    list(&st, Some(&nodes), Some(&groups), &params, uri.path()).await
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
fn targets(st: &AppState, nodes: Option<&str>) -> ApiResult<Vec<sluice_cluster::Member>> {
    let members = st.cluster.members();
    Ok(select::select(&members.live, &st.identity.node_id, nodes)?)
}

/// The fan-out deadline: the request's `timeout`, else [`DEFAULT_FANOUT_TIMEOUT`].
pub(crate) fn fanout_timeout(params: &Params) -> Result<Duration, EngineError> {
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
    path: &str,
) -> ApiResult<Response> {
    let p = parse_params(params)?;
    let with_buckets = include_buckets(params)?;
    let deadline = fanout_timeout(params)?;
    refuse_unrecognized(path, params, &STATS_PARAMS)?;
    let call = StatsParams {
        groups: groups.map(str::to_string),
        breach: p.breach,
        buckets: with_buckets,
    };
    let outcomes = st
        .cluster
        .fan_out(
            &targets(st, nodes)?,
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

/// The table's columns in order: the node and the group, OpenSearch's figures
/// ([`crate::cluster::local::ROW_COLUMNS`]) and sluice's
/// ([`crate::cluster::local::SLUICE_COLUMNS`]). `h=` picks among them by name or by
/// the lower-case alias (the JSON rows' keys), `help` lists them; the text table puts a `|`
/// cell between two columns, as OpenSearch prints it.
const COLUMNS: [Column; 25] = [
    Column::new("NODE_ID", "node_id", "the node's id"),
    Column::new(
        "WORKLOAD_GROUP_ID",
        "workload_group_id",
        "the workload group's id",
    ),
    Column::new(
        "TOTAL_COMPLETIONS",
        "total_completions",
        "tasks of the group that ended, successfully or not",
    ),
    Column::new(
        "TOTAL_REJECTIONS",
        "total_rejections",
        "requests rejected for the group's resource share",
    ),
    Column::new(
        "TOTAL_CANCELLATIONS",
        "total_cancellations",
        "tasks cancelled by the enforcement pass",
    ),
    Column::new(
        "CPU_USAGE",
        "cpu_usage",
        "last measured cpu usage, a fraction of the node (NA without a cpu limit)",
    ),
    Column::new(
        "MEMORY_USAGE",
        "memory_usage",
        "last measured memory usage, a fraction of the node (NA without a memory limit)",
    ),
    Column::new(
        "TOTAL_THROTTLED",
        "total_throttled",
        "requests refused by a throttle (429), node or shared tier",
    ),
    Column::new(
        "TOTAL_WOULD_THROTTLE",
        "total_would_throttle",
        "requests a throttle would have refused or parked, counted in monitor_only or a monitor group",
    ),
    Column::new(
        "TOTAL_QUEUED",
        "total_queued",
        "requests parked in the throttle queue",
    ),
    Column::new(
        "TOTAL_QUEUE_REJECTIONS",
        "total_queue_rejections",
        "requests refused because the queue was full",
    ),
    Column::new("QUEUED_CURRENT", "queued_current", "requests parked now"),
    Column::new(
        "QUEUE_PEAK",
        "queue_peak",
        "the most requests parked at once",
    ),
    Column::new(
        "QUEUE_WAIT_COUNT",
        "queue_wait_count",
        "parked requests that left the queue",
    ),
    Column::new(
        "TOTAL_QUEUE_WAIT_MILLIS",
        "total_queue_wait_millis",
        "their total wait",
    ),
    Column::new(
        "MAX_QUEUE_WAIT_MILLIS",
        "max_queue_wait_millis",
        "the longest wait",
    ),
    Column::new(
        "TOTAL_WOULD_QUEUE",
        "total_would_queue",
        "monitored breaches mode enabled would have parked",
    ),
    Column::new(
        "TOTAL_SHARED_ACQUIRED",
        "total_shared_acquired",
        "shared leases the node's requests got, from an owner or the idle cache",
    ),
    Column::new(
        "TOTAL_SHARED_REUSED",
        "total_shared_reused",
        "shared leases taken from the idle cache",
    ),
    Column::new(
        "TOTAL_SHARED_PUSHED",
        "total_shared_pushed",
        "parked requests admitted by a shared lease handed to them",
    ),
    Column::new(
        "TOTAL_SHARED_THROTTLED",
        "total_shared_throttled",
        "requests the shared tier refused (monitored: would have refused)",
    ),
    Column::new(
        "TOTAL_SHARED_FAIL_OPEN",
        "total_shared_fail_open",
        "requests admitted without a shared lease: no owner answered",
    ),
    Column::new(
        "TOTAL_SHARED_PUSHES_RECEIVED",
        "total_shared_pushes_received",
        "owners' offers of freed shared leases received",
    ),
    Column::new(
        "TOTAL_SHARED_PUSHES_SENT",
        "total_shared_pushes_sent",
        "offers of freed shared leases sent as owner",
    ),
    Column::new(
        "SHARED_LEASES_OWNED",
        "shared_leases_owned",
        "shared leases this node counts as their buckets' owner",
    ),
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
        paging::encode_token(&[
            &self.node,
            &self.group,
            &self.total.to_string(),
            self.sort.as_str(),
            if self.desc { "desc" } else { "asc" },
        ])
    }

    fn decode(token: &str) -> Option<PageToken> {
        let [node, group, total, sort, order]: [String; 5] =
            paging::decode_token(token, 5)?.try_into().ok()?;
        Some(PageToken {
            node,
            group,
            total: total.parse().ok()?,
            sort: match sort.as_str() {
                "node_id" => SortBy::NodeId,
                "workload_group" => SortBy::WorkloadGroup,
                _ => return None,
            },
            desc: match order.as_str() {
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
    path: &str,
) -> ApiResult<Response> {
    refuse_unrecognized(path, params, &LIST_PARAMS)?;
    if wants_help(params) {
        return Ok(cat::text(cat::help(&COLUMNS)));
    }
    let p = parse_params(params)?;
    let deadline = fanout_timeout(params)?;
    let call = RowsParams {
        groups: groups.map(str::to_string),
        breach: p.breach,
    };
    let outcomes = st
        .cluster
        .fan_out(
            &targets(st, nodes)?,
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
    let shown: Vec<usize> = cat::displayed(&COLUMNS, params)
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    // Every column's cell of a row, in [`COLUMNS`] order.
    let full = |(node, group, figures): &(String, String, Vec<String>)| -> Vec<String> {
        [node.clone(), group.clone()]
            .into_iter()
            .chain(figures.iter().cloned())
            .collect()
    };
    if wants_json(params) {
        let items: Vec<Value> = page
            .iter()
            .map(|row| {
                let cells = full(row);
                Value::Object(
                    shown
                        .iter()
                        .map(|&i| {
                            let v = cells.get(i).cloned().unwrap_or_default();
                            (COLUMNS[i].aliases.to_string(), json!(v))
                        })
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
    // The shown cells with a `|` cell between two of them.
    let separated = |cells: Vec<String>| -> Vec<String> {
        let mut out = Vec::with_capacity(cells.len() * 2);
        for (n, c) in cells.into_iter().enumerate() {
            if n > 0 {
                out.push("|".to_string());
            }
            out.push(c);
        }
        out
    };
    let mut table: Vec<Vec<String>> = Vec::new();
    if wants_header(params) {
        table.push(separated(
            shown.iter().map(|&i| COLUMNS[i].name.to_string()).collect(),
        ));
    }
    for row in page {
        let cells = full(row);
        table.push(separated(
            shown
                .iter()
                .map(|&i| cells.get(i).cloned().unwrap_or_default())
                .collect(),
        ));
    }
    if next_token.is_none() {
        let width = (shown.len() * 2).saturating_sub(1).max(1);
        let mut footer = vec!["No more pages available".to_string()];
        footer.extend(std::iter::repeat_n("-".to_string(), width - 1));
        table.push(footer);
    }
    let mut text = crate::http::render_table(&table);
    if let Some(t) = next_token {
        text.push_str(&format!("next_token {t}\n"));
    }
    Ok(cat::text(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::local::{ROW_COLUMNS, SLUICE_COLUMNS};
    use crate::workload::DEFAULT_GROUP_ID;

    #[test]
    fn test_the_columns_are_the_rows_cells_with_lower_case_aliases() {
        let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
        let cells: Vec<&str> = ["NODE_ID", "WORKLOAD_GROUP_ID"]
            .into_iter()
            .chain(ROW_COLUMNS)
            .chain(SLUICE_COLUMNS.iter().map(|(n, _)| *n))
            .collect();
        assert_eq!(names, cells);
        for c in COLUMNS {
            assert_eq!(c.aliases, c.name.to_ascii_lowercase());
            assert!(c.default, "{} is shown without h=", c.name);
        }
    }

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
        let short = paging::encode_token(&["a", "b", "1"]);
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
