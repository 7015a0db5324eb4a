//! Tasks: every search runs as a task listed in `_tasks`, cancellable through the API, by
//! `cancel_after_time_interval`, and by the client disconnecting.

use std::time::{Duration, Instant};

use crate::common;
use crate::common::TestNode;
use serde_json::{Value, json};

/// Starts the heavy search in the background with `params`; returns its join handle.
fn spawn_heavy(node: &TestNode, params: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let client = node.client.clone();
    let url = node.url(&format!("/heavy/_search{params}"));
    tokio::spawn(async move {
        let resp = client
            .post(url)
            .header("content-type", "application/json")
            .body(common::heavy_query().to_string())
            .send()
            .await
            .expect("sent");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    })
}

/// Polls `_tasks` until a search task shows up; returns its id and rendering.
async fn wait_for_search_task(node: &TestNode) -> (String, Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let (s, b) = node
            .req("GET", "/_tasks?actions=*search&detailed=true", None)
            .await;
        assert_eq!(s, 200, "{b}");
        if let Some((_, node_entry)) = b["nodes"].as_object().and_then(|n| n.iter().next())
            && let Some((id, task)) = node_entry["tasks"]
                .as_object()
                .and_then(|t| t.iter().next())
        {
            return (id.clone(), task.clone());
        }
        tokio::task::yield_now().await;
    }
    panic!("no search task appeared in _tasks");
}

async fn search_tasks(node: &TestNode) -> usize {
    let (_, b) = node
        .req(
            "GET",
            "/_tasks?actions=indices:data/read/search&group_by=none",
            None,
        )
        .await;
    b["tasks"].as_array().map_or(0, Vec::len)
}

/// The node's search pool now: its jobs running and waiting (`_nodes/stats/thread_pool`).
async fn search_pool(node: &TestNode) -> (u64, u64) {
    let (s, b) = node.req("GET", "/_nodes/stats/thread_pool", None).await;
    assert_eq!(s, 200, "{b}");
    let (_, stats) = b["nodes"]
        .as_object()
        .and_then(|n| n.iter().next())
        .expect("the node's stats");
    let search = &stats["thread_pool"]["search"];
    let figure = |k: &str| search[k].as_u64().unwrap_or_else(|| panic!("{k} in {b}"));
    (figure("active"), figure("queue"))
}

/// Waits until the node lists no search task: cancelled work ended (a gateway keeps the task
/// of a cancelled search until its upstream has ended it).
async fn wait_no_search_task(node: &TestNode) {
    let deadline = Instant::now() + common::SETTLE_WITHIN;
    while search_tasks(node).await > 0 {
        assert!(Instant::now() < deadline, "a search task is still listed");
        tokio::task::yield_now().await;
    }
}

/// Asserts that a cancelled search's failed shard names the node that stopped it by its id in
/// `_nodes` and, on an embedded node, the index the search ran in. Through a gateway either the
/// gateway stops the search (its own node, `_nodes/http`; it cannot tell an index from an
/// alias, so it names none) or the upstream does first (its node, `_nodes`), as the gateway
/// passes the deadline on: either id is right, a made-up one is not.
async fn assert_failed_shard_on_this_node(node: &TestNode, resp: &(u16, Value), index: &str) {
    let failed = &resp.1["error"]["failed_shards"];
    assert_eq!(failed.as_array().map(Vec::len), Some(1), "{}", resp.1);
    let mut ids = Vec::new();
    for path in ["/_nodes", "/_nodes/http"] {
        let (_, nodes) = node.req("GET", path, None).await;
        ids.extend(nodes["nodes"].as_object().unwrap().keys().cloned());
    }
    let named = failed[0]["node"].as_str().unwrap_or_default();
    assert!(ids.iter().any(|id| id == named), "{ids:?}: {}", resp.1);
    if !common::gateway_mode() {
        assert_eq!(ids[0], ids[1], "one node");
        assert_eq!(failed[0]["index"], index, "{}", resp.1);
    }
}

fn assert_cancelled(resp: &(u16, Value), reason_part: &str) {
    assert_eq!(resp.0, 500, "{}", resp.1);
    assert_eq!(
        resp.1["error"]["root_cause"][0]["type"], "task_cancelled_exception",
        "{}",
        resp.1
    );
    let reason = resp.1["error"]["root_cause"][0]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains(reason_part), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_search_is_a_task_and_cancel_api_stops_it() {
    let node = TestNode::start_heavy(&[]).await;
    let search = spawn_heavy(&node, "");
    let (id, task) = wait_for_search_task(&node).await;
    assert_eq!(task["action"], "indices:data/read/search");
    assert_eq!(task["cancellable"], true);
    assert_eq!(task["cancelled"], false);
    assert!(
        task["description"]
            .as_str()
            .unwrap()
            .starts_with("indices[heavy], search_type[QUERY_THEN_FETCH], source[")
    );
    assert!(task["running_time_in_nanos"].as_u64().is_some());
    assert_eq!(
        format!("{}:{}", task["node"].as_str().unwrap(), task["id"]),
        id
    );
    let (s, b) = node.req("GET", &format!("/_tasks/{id}"), None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["task"]["action"], "indices:data/read/search");

    let (s, b) = node
        .req("POST", &format!("/_tasks/{id}/_cancel"), None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert!(
        b["nodes"].as_object().unwrap().values().next().unwrap()["tasks"][&id]["cancelled"] == true,
        "{b}"
    );
    // The uncancelled query runs for seconds and answers with hits: a cancellation error says
    // the cancel stopped it (no timed check: the machine's load decides the seconds).
    let resp = search.await.unwrap();
    assert_cancelled(&resp, "by user request");
    assert_failed_shard_on_this_node(&node, &resp, "heavy").await;
    // The task leaves the registry once the work has ended: before the answer on an embedded
    // node, after it through a gateway (the upstream notices the cancellation late).
    wait_no_search_task(&node).await;
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cancel_matching_actions_cancels_all_of_them() {
    let node = TestNode::start_heavy(&[]).await;
    let a = spawn_heavy(&node, "");
    wait_for_search_task(&node).await;
    let (s, b) = node
        .req("POST", "/_tasks/_cancel?actions=*search", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert!(!b["nodes"].as_object().unwrap().is_empty(), "{b}");
    assert_cancelled(&a.await.unwrap(), "by user request");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cancel_after_time_interval_cancels_the_search() {
    let node = TestNode::start_heavy(&[]).await;
    let resp = spawn_heavy(&node, "?cancel_after_time_interval=50ms")
        .await
        .unwrap();
    assert_cancelled(&resp, "Cancellation timeout of 50ms is expired");
    assert_failed_shard_on_this_node(&node, &resp, "heavy").await;
    let (s, b) = node
        .req(
            "POST",
            "/heavy/_search?cancel_after_time_interval=soon",
            Some(json!({})),
        )
        .await;
    assert_eq!(s, 400, "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_client_disconnect_cancels_the_search() {
    let node = TestNode::start_heavy(&[]).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let sent = client
        .post(node.url("/heavy/_search"))
        .header("content-type", "application/json")
        .body(common::heavy_query().to_string())
        .send()
        .await;
    assert!(
        sent.is_err(),
        "the heavy search must outlast the client's patience"
    );
    let gone_by = Instant::now() + Duration::from_secs(1);
    loop {
        if search_tasks(&node).await == 0 {
            break;
        }
        assert!(
            Instant::now() < gone_by,
            "the abandoned search is still running after 1 s"
        );
        tokio::task::yield_now().await;
    }
    node.assert_alive().await;
    node.stop().await;
}

/// The heavy search as the bytes of an HTTP/1.1 request.
pub(crate) fn raw_heavy_search() -> String {
    let body = common::heavy_query().to_string();
    format!(
        "POST /heavy/_search HTTP/1.1\r\nhost: sluice\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Sends two heavy searches pipelined in one write on a connection of its own and waits for
/// the first to run; answers the connection.
async fn two_pipelined_searches(node: &TestNode) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    stream
        .write_all(raw_heavy_search().repeat(2).as_bytes())
        .await
        .unwrap();
    wait_for_search_task(node).await;
    stream
}

/// Runs [`two_pipelined_searches`], then leaves: with a reset (`reset`) or a plain close.
async fn leave_with_a_search_pipelined(node: &TestNode, reset: bool) {
    let stream = two_pipelined_searches(node).await;
    if reset {
        stream.set_zero_linger().unwrap();
    }
    drop(stream);
    let gone_by = Instant::now() + Duration::from_secs(1);
    while search_tasks(node).await > 0 {
        assert!(
            Instant::now() < gone_by,
            "the abandoned search is still running after 1 s (reset: {reset})"
        );
        tokio::task::yield_now().await;
    }
    // The search pipelined behind it never starts.
    let watched_until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < watched_until {
        assert_eq!(
            search_tasks(node).await,
            0,
            "a pipelined search started (reset: {reset})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_client_leaving_ends_a_search_with_requests_pipelined_behind_it() {
    let node = TestNode::start_heavy(&[]).await;
    leave_with_a_search_pipelined(&node, true).await;
    leave_with_a_search_pipelined(&node, false).await;
    node.assert_alive().await;
    node.stop().await;
}

/// A client that shuts its sending side after two pipelined searches (`nc -N`, `shutdown(SHUT_WR)`)
/// has left, as OpenSearch's server takes it: the running search ends, the next never starts,
/// and the client reads the end of the stream, not an answer made up for the dropped request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_client_that_shuts_its_sending_side_gets_no_made_up_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = TestNode::start_heavy(&[]).await;
    let mut stream = two_pipelined_searches(&node).await;
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the connection ends")
        .expect("read");
    assert_eq!(String::from_utf8_lossy(&answer), "", "nothing is answered");
    let gone_by = Instant::now() + Duration::from_secs(1);
    while search_tasks(&node).await > 0 {
        assert!(Instant::now() < gone_by, "the search still runs after 1 s");
        tokio::task::yield_now().await;
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_requests_pipelined_behind_a_running_search_are_answered_in_order() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = TestNode::start_heavy(&[]).await;
    let count = r#"{"query":{"term":{"k":"key-00000007"}}}"#;
    let search = raw_heavy_search();
    // Sent while the heavy search runs: the node reads them ahead (one has a body); each must
    // reach its handler whole and in order.
    let behind = format!(
        "POST /heavy/_count HTTP/1.1\r\nhost: sluice\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{count}\
         GET /heavy/_count HTTP/1.1\r\nhost: sluice\r\nconnection: close\r\n\r\n",
        count.len()
    );
    let mut stream = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    stream.write_all(search.as_bytes()).await.unwrap();
    wait_for_search_task(&node).await;
    stream.write_all(behind.as_bytes()).await.unwrap();
    let mut answers = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answers))
        .await
        .expect("the three answers within 60 s")
        .unwrap();
    let answers = String::from_utf8_lossy(&answers);
    let heads: Vec<usize> = answers.match_indices("HTTP/1.1 ").map(|(i, _)| i).collect();
    assert_eq!(heads.len(), 3, "{:.2000}", answers);
    let third = &answers[heads[2]..];
    let second = &answers[heads[1]..heads[2]];
    let first = &answers[heads[0]..heads[1]];
    assert!(first.starts_with("HTTP/1.1 200") && first.contains("\"aggregations\""));
    // One document has that key.
    let expected = "\"count\":1,";
    assert!(
        second.starts_with("HTTP/1.1 200") && second.contains(expected),
        "{second}"
    );
    let all = format!("\"count\":{}", common::HEAVY_DOCS);
    assert!(
        third.starts_with("HTTP/1.1 200") && third.contains(&all),
        "{third}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unknown_and_malformed_task_ids() {
    let node = TestNode::start().await;
    let (s, b) = node.req("GET", "/_tasks/nope:12345", None).await;
    // OpenSearch's words for a node that is not in the cluster (a node that left, say).
    assert_eq!(
        b["error"]["reason"],
        "task [nope:12345] belongs to the node [nope] which isn't part of the cluster and \
         there is no record of the task",
        "{b}"
    );
    common::assert_error(&(s, b), 404, "resource_not_found_exception");
    let (s, b) = node.req("GET", "/_tasks/garbage", None).await;
    common::assert_error(&(s, b), 400, "illegal_argument_exception");
    let (s, b) = node.req("POST", "/_tasks/nope:1/_cancel", None).await;
    common::assert_error(&(s, b), 404, "resource_not_found_exception");
    let (s, b) = node.req("GET", "/_tasks?group_by=shards", None).await;
    common::assert_error(&(s, b), 400, "illegal_argument_exception");
    // Nothing runs but the listing itself (issue 17: a listing is a task, as in OpenSearch).
    let (s, b) = node.req("GET", "/_tasks?group_by=none", None).await;
    assert_eq!(s, 200);
    let actions: Vec<&str> = b["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["action"].as_str())
        .collect();
    assert_eq!(actions, vec!["cluster:monitor/tasks/lists"], "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_full_search_pool_rejects_with_429() {
    let tmp = tempfile::tempdir().unwrap();
    common::seed_heavy(tmp.path()).await;
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "thread_pool.search.size=1",
            "thread_pool.search.queue_size=1",
        ],
    )
    .await;
    let running = spawn_heavy(&node, "");
    wait_for_search_task(&node).await;
    let queued = spawn_heavy(&node, "");
    // Until the pool says it runs one job and holds one: the node's, or through a gateway the
    // upstream's. Not until the second search is listed: a search is registered before its
    // job goes into the pool, and a third request that got there between the two took the
    // queue's place (once in 35 CI runs, on a busy machine).
    let pool_node = node.upstream.as_deref().unwrap_or(&node);
    let deadline = Instant::now() + Duration::from_secs(10);
    while search_pool(pool_node).await != (1, 1) {
        assert!(Instant::now() < deadline, "second search never queued");
        tokio::task::yield_now().await;
    }
    let (s, b) = node
        .req("POST", "/heavy/_search", Some(json!({"size": 0})))
        .await;
    common::assert_error(&(s, b.clone()), 429, "rejected_execution_exception");
    assert!(
        b["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("queue capacity = 1"),
        "{b}"
    );
    let (s, _) = node
        .req("POST", "/_tasks/_cancel?actions=*search", None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(running.await.unwrap().0, 500);
    let q = queued.await.unwrap();
    assert_cancelled(&q, "by user request");
    // Through a gateway the pool is the upstream's: the gateway answers its cancelled tasks at
    // once and cancels theirs upstream, which end within a second (issue 13 point 4).
    if let Some(upstream) = &node.upstream {
        let gone_by = Instant::now() + Duration::from_secs(5);
        while search_tasks(upstream).await > 0 {
            assert!(Instant::now() < gone_by, "the upstream still runs a search");
            tokio::task::yield_now().await;
        }
    }
    let (s, b) = node
        .req("POST", "/heavy/_search", Some(json!({"size": 0})))
        .await;
    assert_eq!(s, 200, "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_body_timeout_returns_partial_results_marked_timed_out() {
    let node = TestNode::start_heavy(&[]).await;
    let mut q = common::heavy_query();
    q["timeout"] = json!("1ms");
    let (s, b) = node.req("POST", "/heavy/_search", Some(q)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["timed_out"], true, "{}", b["hits"]["total"]);
    let seen = b["hits"]["total"]["value"].as_u64().unwrap();
    assert!(
        seen < common::HEAVY_DOCS as u64,
        "a timed-out search stops early, saw {seen}"
    );
    let (s, b) = node
        .req(
            "POST",
            "/heavy/_search",
            Some(json!({"size": 0, "track_total_hits": true, "timeout": "1m"})),
        )
        .await;
    assert_eq!(
        (s, &b["timed_out"], &b["hits"]["total"]["value"]),
        (200, &json!(false), &json!(common::HEAVY_DOCS))
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_settings_bound_searches() {
    let node = TestNode::start_heavy(&[]).await;
    let (s, b) = node
        .req("PUT", "/_cluster/settings", Some(json!({"transient": {"search.cancel_after_time_interval": "50ms", "search.max_buckets": 5}})))
        .await;
    assert_eq!(s, 200, "{b}");
    let resp = spawn_heavy(&node, "").await.unwrap();
    assert_cancelled(&resp, "Cancellation timeout of 50ms is expired");
    // The request parameter wins over the cluster setting.
    let (s, b) = node
        .req(
            "POST",
            "/heavy/_search?cancel_after_time_interval=-1",
            Some(json!({"size": 0})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let aggs = json!({"size": 0, "aggs": {"k": {"terms": {"field": "k", "size": 10}}}});
    let (s, b) = node
        .req(
            "POST",
            "/heavy/_search?cancel_after_time_interval=-1",
            Some(aggs.clone()),
        )
        .await;
    assert_eq!(
        b["error"]["root_cause"][0]["type"], "too_many_buckets_exception",
        "{s} {b}"
    );
    let (s, b) = node.req("PUT", "/_cluster/settings", Some(json!({"transient": {"search.max_buckets": null, "search.cancel_after_time_interval": null}}))).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node.req("POST", "/heavy/_search", Some(aggs)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["aggregations"]["k"]["buckets"].as_array().unwrap().len(),
        10
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_tasks_show_the_requests_x_opaque_id_under_headers() {
    let node = TestNode::start_heavy(&[]).await;
    let client = node.client.clone();
    let url = node.url("/heavy/_search");
    let search = tokio::spawn(async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .header("X-Opaque-Id", "nightly-report")
            .body(common::heavy_query().to_string())
            .send()
            .await
            .expect("sent")
            .status()
            .as_u16()
    });
    let (id, task) = wait_for_search_task(&node).await;
    // OpenSearch's shape: the header under `headers`, with and without `detailed`.
    assert_eq!(
        task["headers"],
        json!({"X-Opaque-Id": "nightly-report"}),
        "{task}"
    );
    let (s, b) = node.req("GET", &format!("/_tasks/{id}"), None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["task"]["headers"]["X-Opaque-Id"], "nightly-report", "{b}");
    let (s, _) = node
        .req("POST", &format!("/_tasks/{id}/_cancel"), None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(search.await.unwrap(), 500);
    wait_no_search_task(&node).await;
    // A request without the header: an empty object.
    let search = spawn_heavy(&node, "");
    let (id, task) = wait_for_search_task(&node).await;
    assert_eq!(task["headers"], json!({}), "{task}");
    node.req("POST", &format!("/_tasks/{id}/_cancel"), None)
        .await;
    search.await.unwrap();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_tasks_show_an_opaque_id_that_is_not_ascii_as_opensearch_reads_it() {
    use reqwest::header::HeaderValue;
    let node = TestNode::start_heavy(&[]).await;
    // `café` in ISO-8859-1: one byte past ASCII, the text OpenSearch reads (Netty hands
    // header values over as ISO-8859-1, each byte one character).
    let sent = HeaderValue::from_bytes(b"caf\xe9").unwrap();
    let client = node.client.clone();
    let url = node.url("/heavy/_search");
    let header = sent.clone();
    let search = tokio::spawn(async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .header("X-Opaque-Id", header)
            .body(common::heavy_query().to_string())
            .send()
            .await
            .expect("sent")
    });
    let (id, task) = wait_for_search_task(&node).await;
    assert_eq!(
        task["headers"],
        json!({"X-Opaque-Id": "caf\u{e9}"}),
        "{task}"
    );
    let (s, b) = node.req("GET", &format!("/_tasks/{id}"), None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["task"]["headers"]["X-Opaque-Id"], "caf\u{e9}", "{b}");
    let (s, _) = node
        .req("POST", &format!("/_tasks/{id}/_cancel"), None)
        .await;
    assert_eq!(s, 200);
    let resp = search.await.unwrap();
    assert_eq!(resp.status(), 500);
    // The client's bytes come back as sent.
    let echoed: Vec<_> = resp.headers().get_all("x-opaque-id").iter().collect();
    assert_eq!(echoed, [&sent]);
    // UTF-8 bytes are a character each too: `é` sent as UTF-8 reads `Ã©`, as in OpenSearch
    // (the listing carries its own request's id).
    let utf8 = HeaderValue::from_bytes("ID-é".as_bytes()).unwrap();
    let resp = node
        .client
        .get(node.url("/_tasks?actions=cluster:monitor/tasks/lists"))
        .header("X-Opaque-Id", utf8.clone())
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.headers().get("x-opaque-id"), Some(&utf8));
    let b: Value = resp.json().await.unwrap();
    let listed: Vec<&Value> = b["nodes"]
        .as_object()
        .into_iter()
        .flat_map(|n| n.values())
        .flat_map(|n| n["tasks"].as_object().into_iter().flat_map(|t| t.values()))
        .map(|t| &t["headers"]["X-Opaque-Id"])
        .collect();
    assert_eq!(listed, [&json!("ID-\u{c3}\u{a9}")], "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_read_timeout_closes_quiet_connections() {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;
    let timeout = Duration::from_millis(300);
    let mut node = TestNode::start_heavy(&["http.read_timeout=300ms"]).await;
    // The test's own requests open a connection each: a pooled one left quiet past the timeout
    // is closed under the next request that reuses it (why a client's pool must drop idle
    // connections sooner than the server's read timeout; README).
    node.client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    // Quiet from the start: closed, and not before the timeout.
    let started = Instant::now();
    let mut quiet = TcpStream::connect(node.addr).await.unwrap();
    assert!(common::read_until_closed(&mut quiet).await.is_empty());
    assert!(started.elapsed() >= timeout);
    // Quiet after an answer (keep-alive): the answer, then the end.
    let mut kept = TcpStream::connect(node.addr).await.unwrap();
    kept.write_all(b"GET / HTTP/1.1\r\nhost: sluice\r\n\r\n")
        .await
        .unwrap();
    let answer = String::from_utf8(common::read_until_closed(&mut kept).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    // A head begun and never finished: no answer, the end.
    let mut slow = TcpStream::connect(node.addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nhost:").await.unwrap();
    assert!(common::read_until_closed(&mut slow).await.is_empty());
    // Waiting for a search's answer reads nothing either (OpenSearch's read timeout): the
    // connection closes and the search is cancelled, as when its client leaves.
    let mut waiting = TcpStream::connect(node.addr).await.unwrap();
    waiting
        .write_all(raw_heavy_search().as_bytes())
        .await
        .unwrap();
    wait_for_search_task(&node).await;
    assert!(common::read_until_closed(&mut waiting).await.is_empty());
    let gone_by = Instant::now() + Duration::from_secs(5);
    while search_tasks(&node).await > 0 {
        assert!(Instant::now() < gone_by, "the search still runs 5 s later");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_different_opaque_ids_are_refused_as_opensearch_refuses_them() {
    let node = TestNode::start().await;
    node.req("PUT", "/ids", Some(json!({}))).await;
    // A search (a gateway's fast lane) and another request (its general path).
    for (method, path) in [("POST", "/ids/_search"), ("GET", "/_cluster/health")] {
        let r = node
            .req_with(
                method,
                path,
                None,
                &[("X-Opaque-Id", "a"), ("x-opaque-id", "b")],
            )
            .await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert_eq!(
            r.body,
            json!({"error": "multiple values for single-valued header [X-Opaque-Id].", "status": 400}),
            "{path}"
        );
        // The same value twice is one value.
        let r = node
            .req_with(
                method,
                path,
                None,
                &[("X-Opaque-Id", "a"), ("x-opaque-id", "a")],
            )
            .await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    node.stop().await;
}
