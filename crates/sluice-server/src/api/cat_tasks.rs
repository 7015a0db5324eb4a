//! `GET /_cat/tasks`: the tasks `GET _tasks` lists, as a `_cat` table, as OpenSearch's
//! `RestTasksAction` lays it out — its columns (`description` only with `detailed`), and its
//! rows in task-tree order: the tasks without a listed parent by start time, each followed by
//! its children the same way. It reads the same listing as `GET _tasks` (the same filter,
//! fan-out and registry, [`super::tasks`]): `actions`, `detailed`, `parent_task_id`, `nodes`,
//! `timeout`, a user without the cluster permission seeing only their own tasks. A member that
//! does not answer is left out of the rows, as OpenSearch's table leaves out its node failures.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};
use sluice_cluster::Member;
use sluice_cluster::rpc::LocalApi;
use sluice_core::authz::Action;

use super::cat::{Cell, Column, Table};
use super::tasks::{gather, listing_task, only_user, parse_filter};
use crate::error::ApiResult;
use crate::http::{Params, Query, RequestMeta};
use crate::state::AppState;
use crate::tasks::OPAQUE_ID_HEADER;

/// The columns every listing has, in OpenSearch's order.
const fn base_columns<const N: usize>(description: Option<Column>) -> [Column; N] {
    let base = [
        Column::hidden("id", "", "id of the task with the node"),
        Column::new("action", "ac", "task action"),
        Column::new("task_id", "ti", "unique task id"),
        Column::new("parent_task_id", "pti", "parent task id"),
        Column::new("type", "ty", "task type"),
        Column::new("start_time", "start", "start time in ms"),
        Column::new("timestamp", "ts,hms,hhmmss", "start time in HH:MM:SS"),
        Column::hidden("running_time_ns", "time", "running time ns"),
        Column::new("running_time", "time", "running time"),
        Column::hidden("node_id", "ni", "unique node id"),
        Column::new("ip", "i", "ip address"),
        Column::hidden("port", "po", "bound transport port"),
        Column::new("node", "n", "node name"),
        Column::hidden("version", "v", "es version"),
        Column::hidden("x_opaque_id", "x", "X-Opaque-ID header"),
    ];
    let mut out = [base[0]; N];
    let mut i = 0;
    while i < base.len() {
        out[i] = base[i];
        i += 1;
    }
    if let Some(d) = description {
        out[base.len()] = d;
    }
    out
}

/// The columns without `detailed`.
const COLUMNS: &[Column] = &base_columns::<15>(None);

/// The columns with `detailed`: OpenSearch adds the description, shown by default.
const DETAILED_COLUMNS: &[Column] =
    &base_columns::<16>(Some(Column::new("description", "desc", "task action")));

/// How many characters of a node id the `node_id` column shows: OpenSearch's `_cat/tasks`
/// shows the first four (its `full_id` is not a parameter this API accepts).
const SHORT_NODE_ID: usize = 4;

/// `GET /_cat/tasks` with `actions`, `detailed`, `parent_task_id`, `nodes`, `timeout` and the
/// `_cat` parameters.
pub async fn cat_tasks(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let mut filter = parse_filter(&params)?;
    filter.only_user = only_user(&meta, Action::TasksList);
    let detailed = filter.detailed;
    let _listing = listing_task(&st, &meta);
    let (answers, _failures) = gather(&st, &params, LocalApi::ListTasks, json!(filter)).await?;
    let mut rows: Vec<(&Member, Value)> = Vec::new();
    for (m, tasks) in &answers {
        rows.extend(tasks.values().map(|t| (m, t.clone())));
    }
    let columns = if detailed { DETAILED_COLUMNS } else { COLUMNS };
    let mut table = Table::new(columns);
    for (m, t) in tree_order(rows) {
        table.push(row(m, &t, detailed));
    }
    table.respond(&params)
}

/// The tasks in OpenSearch's order: those without a listed parent by start time, each
/// followed by its listed children, recursively, by start time.
fn tree_order(tasks: Vec<(&Member, Value)>) -> Vec<(&Member, Value)> {
    let id_of = |t: &Value| {
        format!(
            "{}:{}",
            t["node"].as_str().unwrap_or_default(),
            t["id"].as_u64().unwrap_or_default()
        )
    };
    let listed: std::collections::HashSet<String> = tasks.iter().map(|(_, t)| id_of(t)).collect();
    let mut children: HashMap<Option<String>, Vec<usize>> = HashMap::new();
    for (i, (_, t)) in tasks.iter().enumerate() {
        let parent = t["parent_task_id"]
            .as_str()
            .filter(|p| listed.contains(*p))
            .map(str::to_string);
        children.entry(parent).or_default().push(i);
    }
    let start = |i: &usize| tasks[*i].1["start_time_in_millis"].as_i64().unwrap_or(0);
    for list in children.values_mut() {
        list.sort_by_key(start);
    }
    let mut order = Vec::with_capacity(tasks.len());
    let mut stack: Vec<usize> = children.get(&None).cloned().unwrap_or_default();
    stack.reverse();
    while let Some(i) = stack.pop() {
        order.push(i);
        if let Some(kids) = children.get(&Some(id_of(&tasks[i].1))) {
            stack.extend(kids.iter().rev());
        }
    }
    let mut slots: Vec<Option<(&Member, Value)>> = tasks.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// One task's row, from its `_tasks` rendering and its node.
fn row(m: &Member, t: &Value, detailed: bool) -> Vec<Cell> {
    let text = |v: &Value| Cell::Text(v.as_str().unwrap_or("-").to_string());
    let start = t["start_time_in_millis"].as_i64().unwrap_or(0);
    let running = t["running_time_in_nanos"].as_u64().unwrap_or(0);
    let mut cells = vec![
        Cell::Int(t["id"].as_i64().unwrap_or(0)),
        text(&t["action"]),
        Cell::Text(format!(
            "{}:{}",
            t["node"].as_str().unwrap_or_default(),
            t["id"].as_u64().unwrap_or(0)
        )),
        text(&t["parent_task_id"]),
        text(&t["type"]),
        Cell::Int(start),
        Cell::Text(hh_mm_ss(start)),
        Cell::Int(i64::try_from(running).unwrap_or(i64::MAX)),
        Cell::Time(Duration::from_nanos(running)),
        Cell::Text(m.node_id.chars().take(SHORT_NODE_ID).collect()),
        Cell::Text(m.transport_addr.ip().to_string()),
        Cell::Int(i64::from(m.transport_addr.port())),
        Cell::Text(m.name.clone()),
        Cell::Text(sluice_wire::OPENSEARCH_COMPAT_VERSION.to_string()),
        text(&t["headers"][OPAQUE_ID_HEADER]),
    ];
    if detailed {
        cells.push(text(&t["description"]));
    }
    cells
}

/// An epoch-millisecond instant's time of day, `HH:MM:SS` in UTC, as OpenSearch's
/// `_cat/tasks` prints a start time.
fn hh_mm_ss(millis: i64) -> String {
    let day_secs = millis.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_start_times_print_as_utc_time_of_day() {
        assert_eq!(hh_mm_ss(0), "00:00:00");
        // 2021-02-17T22:09:12.458Z
        assert_eq!(hh_mm_ss(1_613_599_752_458), "22:09:12");
    }

    #[test]
    fn test_rows_are_in_task_tree_order() {
        let m = Member {
            node_id: "n1".into(),
            generation: 1,
            name: "one".into(),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version: 1,
            backend: "embedded".into(),
            version: "0".into(),
            cluster_uuid: "c".into(),
        };
        let task = |id: u64, start: i64, parent: Option<&str>| {
            let mut t = json!({"node": "n1", "id": id, "start_time_in_millis": start});
            if let Some(p) = parent {
                t["parent_task_id"] = json!(p);
            }
            (&m, t)
        };
        // Two trees started at 10 and 20, a child of the first started after the second's
        // root, and a task whose parent is not listed (a root by its start time).
        let tasks = vec![
            task(4, 30, Some("n1:1")),
            task(2, 20, None),
            task(1, 10, None),
            task(5, 15, Some("n1:9")),
            task(3, 25, Some("n1:1")),
        ];
        let ids: Vec<u64> = tree_order(tasks)
            .iter()
            .map(|(_, t)| t["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [1, 3, 4, 5, 2]);
    }

    #[test]
    fn test_detailed_listing_adds_the_description_last() {
        assert_eq!(COLUMNS.len() + 1, DETAILED_COLUMNS.len());
        assert_eq!(DETAILED_COLUMNS.last().map(|c| c.name), Some("description"));
        assert!(COLUMNS.iter().all(|c| c.name != "description"));
    }
}
