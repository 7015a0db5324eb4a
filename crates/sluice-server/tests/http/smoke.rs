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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_dropped_node_ends_its_background_tasks() {
    // `serve` dropped before it returns (as every test that does not stop its node drops it)
    // ends what it started: its state is let go once the tasks are gone. A dropped node's
    // refresher, enforcement loop and sweeps once ran on for the rest of the process, the
    // refresher committing into the data folder its test had deleted (half-removed folders
    // were left behind in the temporary directory, a handful each run of the suites).
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/logs/_doc/1?refresh=true",
            Some(json!({"msg": "hello"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let state = std::sync::Arc::downgrade(&node.state);
    drop(node);
    crate::common::wait_until(
        "the dropped node's tasks end",
        || state.strong_count() == 0,
        || format!("its state still has {} holders", state.strong_count()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_client_stalled_mid_body_does_not_keep_a_stopping_node_running() {
    // `http.shutdown_grace`: a request whose body stops coming is closed once the grace after
    // the stop has passed; without the bound the stop waited for it for ever.
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = TestNode::start_with(&["http.shutdown_grace=1s"]).await;
    let mut conn = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    conn.write_all(
        b"PUT /logs/_doc/1 HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\nexpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    // `100 Continue` comes once the handler reads the body: the request is in flight.
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        let mut chunk = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk))
            .await
            .expect("100 Continue")
            .unwrap();
        assert!(n > 0, "closed before 100 Continue");
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    conn.write_all(b"{\"msg\":").await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), node.stop())
        .await
        .expect("the node stops within its grace, not when its client finishes");
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest))
        .await
        .expect("the connection is closed")
        .ok();
}
