//! `_msearch`: items run as child tasks, each answering on its own.

use std::time::{Duration, Instant};

use crate::common;
use crate::common::TestNode;
use serde_json::{Value, json};

fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

async fn small_index(node: &TestNode) {
    let body = ndjson(&[
        json!({"index": {"_index": "a", "_id": "1"}}),
        json!({"t": "red apple", "n": 1}),
        json!({"index": {"_index": "a", "_id": "2"}}),
        json!({"t": "green apple", "n": 2}),
        json!({"index": {"_index": "b", "_id": "3"}}),
        json!({"t": "red car", "n": 3}),
    ]);
    let (s, b) = node.raw("POST", "/_bulk?refresh=true", body).await;
    assert_eq!((s, &b["errors"]), (200, &json!(false)), "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_items_answer_independently_in_order() {
    let node = TestNode::start().await;
    small_index(&node).await;
    let body = ndjson(&[
        json!({"index": "a"}),
        json!({"query": {"match": {"t": "apple"}}}),
        json!({"index": "missing"}),
        json!({"query": {"match_all": {}}}),
        json!({"index": "a,b"}),
        json!({"query": {"nope": {}}}),
        json!({"index": ["a", "b"]}),
        json!({"query": {"term": {"t": "red"}}, "size": 0}),
        json!({"index": "a"}),
        json!({"query": {"term": {"n": "not a number"}}}),
    ]);
    let (s, b) = node.raw("POST", "/_msearch", body).await;
    assert_eq!(s, 200, "{b}");
    let r = b["responses"].as_array().expect("responses");
    assert_eq!(r.len(), 5);
    assert_eq!(r[0]["status"], 200);
    assert_eq!(r[0]["hits"]["total"]["value"], 2);
    assert_eq!(r[1]["status"], 404);
    assert_eq!(r[1]["error"]["type"], "index_not_found_exception");
    assert_eq!(r[2]["status"], 400);
    assert!(
        r[2]["error"]["reason"].as_str().unwrap().contains("nope"),
        "{}",
        r[2]
    );
    assert_eq!(r[3]["status"], 200);
    assert_eq!(r[3]["hits"]["total"]["value"], 2);
    assert_eq!(r[4]["status"], 400);
    assert_eq!(
        r[4]["error"]["root_cause"][0]["type"],
        "query_shard_exception"
    );
    assert!(b["took"].is_u64());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_path_index_is_the_default_and_get_works() {
    let node = TestNode::start().await;
    small_index(&node).await;
    let body = ndjson(&[
        json!({}),
        json!({"query": {"match_all": {}}}),
        json!({"index": "b"}),
        json!({}),
    ]);
    let (s, b) = node
        .raw(
            "POST",
            "/a/_msearch?max_concurrent_searches=1",
            body.clone(),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["responses"][0]["hits"]["total"]["value"], 2);
    assert_eq!(b["responses"][1]["hits"]["total"]["value"], 1);
    let (s, b) = node.raw("GET", "/a/_msearch", body).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["responses"].as_array().unwrap().len(), 2);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_malformed_requests_fail_whole() {
    let node = TestNode::start().await;
    small_index(&node).await;
    let resp = node.raw("POST", "/_msearch", "{not json}\n{}\n").await;
    common::assert_error(&resp, 400, "x_content_parse_exception");
    let resp = node.raw("POST", "/_msearch", "{\"bogus\": 1}\n{}\n").await;
    common::assert_error(&resp, 400, "illegal_argument_exception");
    let resp = node.raw("POST", "/_msearch", "{\"index\": \"a\"}\n").await;
    common::assert_error(&resp, 400, "parsing_exception");
    let resp = node.raw("POST", "/_msearch", "").await;
    common::assert_error(&resp, 400, "parse_exception");
    let resp = node.raw("POST", "/_msearch", "\n\n").await;
    common::assert_error(&resp, 400, "action_request_validation_exception");
    let resp = node
        .raw("POST", "/_msearch?max_concurrent_searches=0", "{}\n{}\n")
        .await;
    common::assert_error(&resp, 400, "illegal_argument_exception");
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_items_are_children_and_cancelling_the_parent_cancels_them() {
    let node = TestNode::start_heavy(&[]).await;
    let body = ndjson(&[
        json!({"index": "heavy"}),
        common::heavy_query(),
        json!({"index": "heavy"}),
        common::heavy_query(),
    ]);
    let client = node.client.clone();
    let url = node.url("/_msearch?max_concurrent_searches=2");
    let call = tokio::spawn(async move {
        let resp = client
            .post(url)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .expect("sent");
        (
            resp.status().as_u16(),
            resp.json::<Value>().await.expect("json"),
        )
    });
    // Wait until the parent and a child are visible.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (parent_id, child) = loop {
        assert!(Instant::now() < deadline, "msearch tasks never appeared");
        let (_, b) = node
            .req("GET", "/_tasks?group_by=parents&detailed=true", None)
            .await;
        let tasks = b["tasks"].as_object().cloned().unwrap_or_default();
        let parent = tasks
            .iter()
            .find(|(_, t)| t["action"] == "indices:data/read/msearch" && t["children"].is_array());
        if let Some((id, t)) = parent {
            break (id.clone(), t["children"][0].clone());
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(child["action"], "indices:data/read/search");
    assert_eq!(child["parent_task_id"], parent_id.as_str());
    let (s, b) = node
        .req("GET", &format!("/_tasks?parent_task_id={parent_id}"), None)
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, _) = node
        .req("POST", &format!("/_tasks/{parent_id}/_cancel"), None)
        .await;
    assert_eq!(s, 200);
    let (s, b) = call.await.unwrap();
    assert_eq!(s, 200, "{b}");
    // Worded as OpenSearch words a cancelled search, through a gateway too.
    for item in b["responses"].as_array().unwrap() {
        assert_eq!(item["status"], 500, "{item}");
        assert_eq!(
            item["error"]["type"], "search_phase_execution_exception",
            "{item}"
        );
        assert_eq!(
            item["error"]["root_cause"][0]["type"], "task_cancelled_exception",
            "{item}"
        );
        let reason = item["error"]["caused_by"]["reason"].as_str().unwrap_or("");
        assert!(reason.starts_with("cancelled task with reason"), "{item}");
    }
    node.stop().await;
}
