//! The `_tasks` API as OpenSearch clients and tests rely on it: a listing is a task itself and
//! finds at least this node's entry.

use crate::common::TestNode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_task_listing_lists_itself() {
    let node = TestNode::start().await;
    let (s, b) = node.req("GET", "/_tasks?detailed=true", None).await;
    assert_eq!(s, 200, "{b}");
    let entry = &b["nodes"][&node.state.identity.node_id];
    let tasks = entry["tasks"].as_object().expect("this node's tasks");
    assert!(
        tasks
            .values()
            .any(|t| t["action"] == "cluster:monitor/tasks/lists"),
        "{b}"
    );
    // Filtered out by an action filter that does not match it, as in OpenSearch.
    let (_, b) = node.req("GET", "/_tasks?actions=*search", None).await;
    assert!(b["nodes"].as_object().unwrap().is_empty(), "{b}");
    // The listing carries its request's X-Opaque-Id under `headers`, as any task does.
    let r = node
        .req_with(
            "GET",
            "/_tasks?detailed=true&actions=cluster:monitor/tasks/lists",
            None,
            &[("X-Opaque-Id", "me-1")],
        )
        .await;
    let b = r.body;
    assert_eq!(r.status, 200, "{b}");
    let tasks = b["nodes"][&node.state.identity.node_id]["tasks"]
        .as_object()
        .expect("this node's tasks");
    assert!(
        tasks
            .values()
            .any(|t| t["headers"]["X-Opaque-Id"] == "me-1"),
        "{b}"
    );
    // Gone once it answered.
    let (_, b) = node.req("GET", "/_tasks?group_by=none", None).await;
    assert_eq!(
        b["tasks"].as_array().unwrap().len(),
        1,
        "only the new listing: {b}"
    );
}

/// The name `_cat/tasks` shows for the node under test (the gateway's, through a gateway).
fn node_name(node: &TestNode) -> String {
    let members = node.state.cluster.members();
    let me = members
        .get(&node.state.identity.node_id)
        .expect("this node is a member");
    me.name.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cat_tasks_lists_the_tasks_as_a_table() {
    let node = TestNode::start().await;
    let id = &node.state.identity.node_id;
    // The text table, with OpenSearch's default columns; the listing lists itself, with no
    // parent ("-"), on this node.
    let (s, text) = node.req("GET", "/_cat/tasks?v", None).await;
    assert_eq!(s, 200, "{text}");
    let text = text.as_str().expect("a text table").to_string();
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .expect("a header line")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "action",
            "task_id",
            "parent_task_id",
            "type",
            "start_time",
            "timestamp",
            "running_time",
            "ip",
            "node"
        ],
        "{text}"
    );
    let row: Vec<&str> = lines
        .find(|l| l.starts_with("cluster:monitor/tasks/lists "))
        .expect("the listing's row")
        .split_whitespace()
        .collect();
    assert!(row[1].starts_with(&format!("{id}:")), "{text}");
    assert_eq!((row[2], row[3]), ("-", "transport"), "{text}");
    assert_eq!(row[8], node_name(&node), "{text}");

    // `format=json`, `h` by alias, `detailed` adding the description, the `X-Opaque-Id`.
    let r = node
        .req_with(
            "GET",
            "/_cat/tasks?format=json&detailed&h=ti,action,x_opaque_id,ni,description,running_time_ns",
            None,
            &[("X-Opaque-Id", "cat-1")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rows = r.body.as_array().expect("rows");
    let me = rows
        .iter()
        .find(|row| row["x_opaque_id"] == "cat-1")
        .unwrap_or_else(|| panic!("the listing's row: {}", r.body));
    assert_eq!(me["action"], "cluster:monitor/tasks/lists", "{me}");
    assert!(
        me["ti"].as_str().unwrap().starts_with(&format!("{id}:")),
        "{me}"
    );
    assert_eq!(me["ni"], id.chars().take(4).collect::<String>(), "{me}");
    assert!(me["description"].is_string(), "{me}");
    assert!(
        me["running_time_ns"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .is_ok(),
        "{me}"
    );
    assert_eq!(me.as_object().unwrap().len(), 6, "{me}");

    // `actions` filters as `_tasks` does; a malformed `parent_task_id` is refused.
    let (s, rows) = node
        .req("GET", "/_cat/tasks?format=json&actions=*search", None)
        .await;
    assert_eq!(s, 200, "{rows}");
    assert_eq!(rows, serde_json::json!([]));
    let r = node
        .req("GET", "/_cat/tasks?parent_task_id=nope", None)
        .await;
    crate::common::assert_error(&r, 400, "illegal_argument_exception");
    // `nodes` selects the members listed: `_local` is this node alone.
    let (s, rows) = node
        .req("GET", "/_cat/tasks?format=json&nodes=_local", None)
        .await;
    assert_eq!(s, 200, "{rows}");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");

    // `help` lists every column, `description` only with `detailed`.
    let (s, help) = node.req("GET", "/_cat/tasks?help", None).await;
    assert_eq!(s, 200, "{help}");
    let names: Vec<&str> = help
        .as_str()
        .unwrap()
        .lines()
        .map(|l| l.split('|').next().unwrap().trim())
        .collect();
    assert_eq!(names.len(), 15, "{help}");
    assert!(
        names.contains(&"x_opaque_id") && !names.contains(&"description"),
        "{help}"
    );
    // An unknown parameter is refused, as on every `_cat` API.
    let r = node.req("GET", "/_cat/tasks?group_by=none", None).await;
    crate::common::assert_error(&r, 400, "illegal_argument_exception");
}
