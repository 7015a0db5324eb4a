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
