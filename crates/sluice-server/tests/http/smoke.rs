//! A first end-to-end pass: start, index, search, restart.

use crate::common::TestNode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_root_reports_opensearch_compatible_version() {
    let node = TestNode::start().await;
    let (status, body) = node.req("GET", "/", None).await;
    assert_eq!(status, 200);
    assert!(
        body["version"]["number"]
            .as_str()
            .unwrap()
            .starts_with("3.")
    );
    assert_eq!(body["cluster_name"], "sluice");
    assert!(body["tagline"].as_str().unwrap().contains("OpenSearch"));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_acknowledged_writes_survive_restart() {
    let node = TestNode::start().await;
    let (s, _) = node
        .req(
            "PUT",
            "/logs/_doc/1",
            Some(json!({"msg": "hello world", "n": 1})),
        )
        .await;
    assert_eq!(s, 201);
    let (s, b) = node.req("GET", "/logs/_doc/1", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["_source"]["msg"], "hello world");
    let data = node.data.clone();
    let tmp = node.stop().await;
    let node = TestNode::start_on(&data, &[]).await;
    let (s, b) = node.req("GET", "/logs/_doc/1", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["_version"], 1);
    let (s, b) = node
        .req(
            "POST",
            "/logs/_search",
            Some(json!({"query": {"match": {"msg": "hello"}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["hits"]["total"]["value"], 1);
    node.stop().await;
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_stopped_node_holds_nothing_of_its_state() {
    // Once `serve` returned, no task of the node still holds its state, and with it the
    // engine's index locks, so a node started again at once on the same data opens its
    // indices. (A refresh or enforcement pass on the blocking pool when the node stopped ran
    // on after its loop was aborted: a race this cannot time, which the loops now end by
    // waiting for; a background task left running would fail here every time.)
    let node = TestNode::start().await;
    let (s, b) = node
        .req("PUT", "/logs/_doc/1", Some(json!({"msg": "hello"})))
        .await;
    assert_eq!(s, 201, "{b}");
    let state = std::sync::Arc::downgrade(&node.state);
    let data = node.data.clone();
    let tmp = node.stop().await;
    assert!(
        state.upgrade().is_none(),
        "the node's state is still held after it stopped"
    );
    let node = TestNode::start_on(&data, &[]).await;
    let (s, b) = node.req("GET", "/logs/_doc/1", None).await;
    assert_eq!(s, 200, "{b}");
    node.stop().await;
    drop(tmp);
}
