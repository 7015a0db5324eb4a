//! Index and node operations tools call first, over HTTP: `_stats` (per index, `_all`,
//! metrics, levels), `_nodes/stats`, `_cluster/health?level=`, `_cat/health`, the `_cat`
//! parameters (`h`, `help`, `s`, `bytes`, `health`), `_close` / `_open` and `_forcemerge`.

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

/// `a` with 3 documents over 3 refreshes (3 segments), `b` with 1 and no replicas.
async fn setup(node: &TestNode) {
    node.req(
        "PUT",
        "/b",
        Some(json!({"settings": {"number_of_replicas": 0}})),
    )
    .await;
    for i in 0..3 {
        let (s, b) = node
            .req(
                "PUT",
                &format!("/a/_doc/{i}?refresh=true"),
                Some(json!({"n": i})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    node.req("PUT", "/b/_doc/x?refresh=true", Some(json!({"n": 9})))
        .await;
}

async fn text(node: &TestNode, path: &str) -> (u16, String) {
    let resp = node.client.get(node.url(path)).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_index_stats_report_the_counters_kept() {
    let node = TestNode::start().await;
    setup(&node).await;
    node.search("a", json!({})).await;
    node.req("GET", "/a/_doc/0", None).await;
    node.req("GET", "/a/_doc/nope", None).await;
    let (s, b) = node.req("GET", "/a/_stats", None).await;
    assert_eq!(s, 200, "{b}");
    let p = &b["indices"]["a"]["primaries"];
    assert_eq!(p["docs"]["count"], 3);
    assert_eq!(p["indexing"]["index_total"], 3);
    assert_eq!(p["search"]["query_total"], 1);
    assert_eq!(p["get"]["total"], 2);
    assert_eq!(p["get"]["missing_total"], 1);
    assert_eq!(p["refresh"]["total"], 3);
    assert_eq!(p["merges"]["current"], 0);
    assert!(p["store"]["size_in_bytes"].as_u64().unwrap() > 0);
    assert_eq!(b["_all"]["total"]["docs"]["count"], 3);
    assert_eq!(
        b["_shards"],
        json!({"total": 2, "successful": 1, "failed": 0})
    );
    // _all sums every index; the one opensearch-benchmark waits on is there.
    let (_, b) = node.req("GET", "/_all/_stats/_all", None).await;
    assert_eq!(b["_all"]["total"]["docs"]["count"], 4);
    assert_eq!(b["_all"]["total"]["merges"]["current"], 0);
    let (_, b) = node.req("GET", "/_stats/docs", None).await;
    assert!(b["_all"]["total"]["indexing"].is_null(), "{b}");
    assert_eq!(b["indices"]["b"]["total"]["docs"]["count"], 1);
    let (_, b) = node.req("GET", "/a/_stats/_all?level=shards", None).await;
    let shard = &b["indices"]["a"]["shards"]["0"][0];
    assert_eq!(shard["routing"]["primary"], true);
    assert_eq!(shard["docs"]["count"], 3);
    let (_, b) = node.req("GET", "/_stats?level=cluster", None).await;
    assert!(b["indices"].is_null(), "{b}");
    let bad = node.req("GET", "/_stats/bogus", None).await;
    assert_error(&bad, 400, "illegal_argument_exception");
    assert_eq!(
        bad.1["error"]["reason"],
        "request [/_stats/bogus] contains unrecognized metric: [bogus]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_nodes_info_shows_the_search_pool() {
    // What a gateway reads to size its limits when its upstream reports no per-task usage:
    // the sum of `thread_pool.search.size` (through a gateway, the upstream's own node answers).
    let node = TestNode::start().await;
    let (s, b) = node.req("GET", "/_nodes/thread_pool", None).await;
    assert_eq!(s, 200, "{b}");
    let nodes = b["nodes"].as_object().unwrap();
    assert_eq!(nodes.len(), 1, "{b}");
    let search = &nodes.values().next().unwrap()["thread_pool"]["search"];
    assert!(search["size"].as_u64().is_some_and(|n| n > 0), "{b}");
    assert!(search["queue_size"].as_u64().is_some_and(|n| n > 0), "{b}");
    let (_, b) = node.req("GET", "/_nodes/http", None).await;
    assert!(
        b["nodes"]
            .as_object()
            .unwrap()
            .values()
            .all(|n| n.get("thread_pool").is_none()),
        "only asked for: {b}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_nodes_stats_show_this_nodes_figures() {
    let node = TestNode::start().await;
    setup(&node).await;
    let (s, b) = node.req("GET", "/_nodes/stats", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["_nodes"],
        json!({"total": 1, "successful": 1, "failed": 0})
    );
    let (id, n) = b["nodes"].as_object().unwrap().iter().next().unwrap();
    // Through a gateway, `_nodes/stats` is the upstream's: its node answers.
    let answering = node.upstream.as_deref().unwrap_or(&node);
    assert_eq!(id, &answering.state.identity.node_id);
    assert_eq!(n["indices"]["docs"]["count"], 4);
    assert!(n["thread_pool"]["search"]["threads"].as_u64().unwrap() >= 1);
    assert!(n["process"]["open_file_descriptors"].as_u64().unwrap() > 0);
    // No JVM: zero collections, no memory pools, no heap figure.
    assert_eq!(n["jvm"]["gc"]["collectors"]["old"]["collection_count"], 0);
    assert_eq!(n["jvm"]["mem"], json!({"pools": {}}), "{n}");
    // The `_nodes` APIs sluice does not implement are routes with no handler, not the info
    // of nodes named `usage` (an empty node list).
    for path in [
        "/_nodes/usage",
        "/_nodes/usage/http",
        "/_nodes/hot_threads",
        "/_nodes/_local/hot_threads",
    ] {
        let (s, b) = node.req("GET", path, None).await;
        assert_eq!(s, 400, "{path}: {b}");
        // OpenSearch's words for it: the error is a string.
        assert!(
            b["error"]
                .as_str()
                .unwrap_or_default()
                .starts_with("no handler found for uri"),
            "{path}: {b}"
        );
    }
    let (_, b) = node.req("GET", "/_nodes/stats/indices", None).await;
    let n = b["nodes"].as_object().unwrap().values().next().unwrap();
    assert!(n["process"].is_null() && n["indices"].is_object(), "{n}");
    let (_, b) = node.req("GET", "/_nodes/_local/stats/_all", None).await;
    assert_eq!(b["_nodes"]["total"], 1);
    let (_, b) = node.req("GET", "/_nodes/nobody/stats", None).await;
    assert_eq!(b["_nodes"]["total"], 0);
    let bad = node.req("GET", "/_nodes/stats/bogus", None).await;
    assert_error(&bad, 400, "illegal_argument_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_health_levels_and_cat_health() {
    let node = TestNode::start().await;
    setup(&node).await;
    let (s, b) = node
        .req("GET", "/_cluster/health?level=indices", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["indices"]["a"]["status"], "yellow");
    assert_eq!(b["indices"]["a"]["unassigned_shards"], 1);
    assert_eq!(b["indices"]["b"]["status"], "green");
    assert!(b["indices"]["a"]["shards"].is_null());
    let (_, b) = node
        .req("GET", "/_cluster/health/b?level=shards", None)
        .await;
    assert_eq!(b["indices"].as_object().unwrap().len(), 1);
    assert_eq!(b["indices"]["b"]["shards"]["0"]["primary_active"], true);
    let (_, b) = node.req("GET", "/_cluster/health", None).await;
    assert!(b["indices"].is_null());
    let bad = node.req("GET", "/_cluster/health?level=bogus", None).await;
    assert_error(&bad, 400, "illegal_argument_exception");

    let (s, b) = node.req("GET", "/_cat/health?format=json", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b[0]["status"], "yellow");
    assert_eq!(b[0]["node.total"], "1");
    assert_eq!(b[0]["pri"], "2");
    assert_eq!(b[0]["unassign"], "1");
    let (s, t) = text(&node, "/_cat/health?h=status,nt&v").await;
    assert_eq!(s, 200);
    let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines, vec![vec!["status", "nt"], vec!["yellow", "1"]]);
    let (_, t) = text(&node, "/_cat/health?help").await;
    assert!(
        t.lines()
            .any(|l| l.starts_with("status") && l.contains("| st ") && l.contains("health status")),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cat_parameters_select_sort_and_scale() {
    let node = TestNode::start().await;
    setup(&node).await;
    let (s, b) = node
        .req(
            "GET",
            "/_cat/indices?format=json&h=index,dc,bogus&s=docs.count:desc",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!([{"index": "a", "dc": "3"}, {"index": "b", "dc": "1"}]),
        "unknown columns are skipped, aliases keep their name"
    );
    let (_, b) = node
        .req("GET", "/_cat/indices?format=json&h=i&s=i", None)
        .await;
    assert_eq!(b, json!([{"i": "a"}, {"i": "b"}]));
    let (_, b) = node
        .req(
            "GET",
            "/_cat/indices?format=json&h=index,ss&bytes=b&s=index",
            None,
        )
        .await;
    let size: u64 = b[0]["ss"].as_str().unwrap().parse().unwrap();
    assert!(size > 0, "{b}");
    let (_, b) = node
        .req(
            "GET",
            "/_cat/indices?format=json&h=index&health=green",
            None,
        )
        .await;
    assert_eq!(b, json!([{"index": "b"}]));
    let bad = node.req("GET", "/_cat/indices?health=blue", None).await;
    assert_error(&bad, 400, "illegal_argument_exception");
    assert_eq!(
        bad.1["error"]["reason"],
        "unknown cluster health status [blue]"
    );
    let bad = node.req("GET", "/_cat/indices?s=nope", None).await;
    assert_error(&bad, 400, "unsupported_operation_exception");
    assert_eq!(
        bad.1["error"]["reason"],
        "Unable to sort by unknown sort key `nope`"
    );
    let (_, b) = node
        .req("GET", "/_cat/indices?format=json&h=docs.*&s=index", None)
        .await;
    assert_eq!(
        b,
        json!([{"docs.count": "3", "docs.deleted": "0"}, {"docs.count": "1", "docs.deleted": "0"}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_closed_index_refuses_reads_and_writes_until_opened() {
    let node = TestNode::start().await;
    setup(&node).await;
    let (s, b) = node.req("POST", "/a/_close", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!({"acknowledged": true, "shards_acknowledged": true, "indices": {"a": {"closed": true}}})
    );
    let search = node.req("GET", "/a/_search", None).await;
    assert_error(&search, 400, "index_closed_exception");
    assert_eq!(search.1["error"]["reason"], "closed");
    assert_eq!(search.1["error"]["index"], "a");
    let write = node.req("PUT", "/a/_doc/9", Some(json!({"n": 9}))).await;
    assert_error(&write, 400, "index_closed_exception");
    let get = node.req("GET", "/a/_doc/0", None).await;
    assert_error(&get, 400, "index_closed_exception");
    // Wildcards skip it; ignore_unavailable skips it by name.
    let (_, b) = node.req("GET", "/*/_search", None).await;
    assert_eq!(b["hits"]["total"]["value"], 1);
    let (s, b) = node
        .req("GET", "/a,b/_search?ignore_unavailable=true", None)
        .await;
    assert_eq!((s, &b["hits"]["total"]["value"]), (200, &json!(1)));
    let (_, b) = node
        .req(
            "GET",
            "/_cat/indices?format=json&h=index,status&s=index",
            None,
        )
        .await;
    assert_eq!(b[0], json!({"index": "a", "status": "close"}));
    // Closed across a restart, then opened.
    let data = node.data.clone();
    let tmp = node.stop().await;
    let node = TestNode::start_on(&data, &[]).await;
    let still = node.req("GET", "/a/_search", None).await;
    assert_error(&still, 400, "index_closed_exception");
    let (s, b) = node.req("POST", "/a/_open", None).await;
    assert_eq!(
        (s, b),
        (
            200,
            json!({"acknowledged": true, "shards_acknowledged": true})
        )
    );
    assert_eq!(node.count("a", None).await, 3);
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_forcemerge_merges_segments_and_keeps_documents() {
    let node = TestNode::start().await;
    setup(&node).await;
    node.req("DELETE", "/a/_doc/1?refresh=true", None).await;
    let segments = |b: &Value| b["indices"]["a"]["primaries"]["segments"]["count"].as_u64();
    let (_, before) = node.req("GET", "/a/_stats", None).await;
    assert!(segments(&before).unwrap() >= 2, "{before}");
    let (s, b) = node
        .req("POST", "/a/_forcemerge?max_num_segments=1", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["_shards"],
        json!({"total": 2, "successful": 1, "failed": 0})
    );
    let (_, after) = node.req("GET", "/a/_stats", None).await;
    assert_eq!(segments(&after), Some(1), "{after}");
    let merges = &after["indices"]["a"]["primaries"]["merges"];
    assert_eq!(merges["total"], 1);
    assert_eq!(merges["current"], 0);
    assert_eq!(
        after["indices"]["a"]["primaries"]["docs"],
        json!({"count": 2, "deleted": 0})
    );
    assert_eq!(node.count("a", None).await, 2);
    let bad = node
        .req(
            "POST",
            "/a/_forcemerge?max_num_segments=2&only_expunge_deletes=true",
            None,
        )
        .await;
    assert_error(&bad, 400, "action_request_validation_exception");
    // The merged index is what a restart finds.
    let data = node.data.clone();
    let tmp = node.stop().await;
    let node = TestNode::start_on(&data, &[]).await;
    assert_eq!(node.count("a", None).await, 2);
    let (_, again) = node.req("GET", "/a/_stats", None).await;
    assert_eq!(segments(&again), Some(1), "{again}");
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_forcemerge_in_the_background_answers_a_task_with_its_result() {
    let node = TestNode::start().await;
    setup(&node).await;
    let (s, b) = node
        .req(
            "POST",
            "/a/_forcemerge?max_num_segments=1&wait_for_completion=false",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let id = b["task"].as_str().expect("task id").to_string();
    let done = node.task_result(&id).await;
    assert_eq!(done["task"]["action"], "indices:admin/forcemerge", "{done}");
    assert_eq!(
        done["response"]["_shards"],
        json!({"total": 2, "successful": 1, "failed": 0}),
        "{done}"
    );
    let (_, after) = node.req("GET", "/a/_stats", None).await;
    assert_eq!(
        after["indices"]["a"]["primaries"]["segments"]["count"], 1,
        "{after}"
    );
    let bad = node
        .req("POST", "/a/_forcemerge?wait_for_completion=later", None)
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
}

/// `_cluster/health` waits for its `wait_for_*` conditions up to `timeout`, as OpenSearch's
/// does: at once when they hold, until they do (here: an index turned green by dropping its
/// replicas while the request waits), and 408 with `timed_out: true` when the timeout runs
/// out first. Bad values are refused before any wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_health_waits_for_its_conditions() {
    let node = TestNode::start().await;
    let (s, b) = node.req("PUT", "/w", None).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/health?wait_for_status=yellow&wait_for_nodes=>=1&wait_for_active_shards=1",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        (b["status"].as_str(), b["timed_out"].as_bool()),
        (Some("yellow"), Some(false))
    );

    // The replica can never be assigned on one node: the wait runs out.
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/health?wait_for_status=green&timeout=200ms",
            None,
        )
        .await;
    assert_eq!(s, 408, "{b}");
    assert_eq!(
        (b["status"].as_str(), b["timed_out"].as_bool()),
        (Some("yellow"), Some(true))
    );
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/health?wait_for_nodes=>=2&timeout=100ms",
            None,
        )
        .await;
    assert_eq!((s, b["timed_out"].as_bool()), (408, Some(true)), "{b}");

    // A wait that the cluster comes to meet: answered when it does.
    let waiting = spawn_get(&node, "/_cluster/health?wait_for_status=green&timeout=60s");
    // Two round trips on other connections give the spawned request time to arrive (the
    // node has no gauge of requests in flight to wait on). Had it arrived late, it would
    // still be answered green: the test cannot fail falsely, and catches a handler that does
    // not wait whenever the request is first (as good as always).
    for _ in 0..2 {
        let (s, b) = node.req("GET", "/_cluster/health", None).await;
        assert_eq!((s, b["status"].as_str()), (200, Some("yellow")), "{b}");
    }
    assert!(
        !waiting.is_finished(),
        "answered before the index turned green"
    );
    let (s, b) = node
        .req(
            "PUT",
            "/w/_settings",
            Some(json!({"index": {"number_of_replicas": 0}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = waiting.await.expect("joined");
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        (b["status"].as_str(), b["timed_out"].as_bool()),
        (Some("green"), Some(false))
    );

    // The health of named indices is theirs: green `w` beside a yellow `y`; a missing index
    // is red, and a wait for it to be created ends when it is.
    let (s, b) = node.req("PUT", "/y", None).await;
    assert_eq!(s, 200, "{b}");
    let (_, b) = node
        .req("GET", "/_cluster/health/w?wait_for_status=green", None)
        .await;
    assert_eq!(
        (b["status"].as_str(), b["active_primary_shards"].as_u64()),
        (Some("green"), Some(1)),
        "{b}"
    );
    let (_, b) = node.req("GET", "/_cluster/health", None).await;
    assert_eq!(b["status"], "yellow", "{b}");
    // Naming an index is a condition, as in OpenSearch: one missing is red, and the request
    // waits for it until its timeout; the figures are those of the named indices that exist.
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/health/nope?level=indices&timeout=100ms",
            None,
        )
        .await;
    assert_eq!(
        (s, b["status"].as_str(), b["timed_out"].as_bool()),
        (408, Some("red"), Some(true)),
        "{b}"
    );
    assert_eq!(
        (b["active_shards"].as_u64(), &b["indices"]),
        (Some(0), &json!({})),
        "{b}"
    );
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/health/nope,w?level=indices&timeout=0s",
            None,
        )
        .await;
    assert_eq!((s, b["status"].as_str()), (408, Some("red")), "{b}");
    let listed: Vec<&str> = b["indices"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        (b["active_shards"].as_u64(), listed),
        (Some(1), vec!["w"]),
        "{b}"
    );
    // A timeout too large to add to the clock waits with no deadline (here: met at once).
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/health?wait_for_status=yellow&timeout=9223372036854775807d",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    // `-1` times out at once.
    let (s, _) = node
        .req(
            "GET",
            "/_cluster/health?wait_for_status=green&timeout=-1",
            None,
        )
        .await;
    assert_eq!(s, 408);
    let waiting = spawn_get(
        &node,
        "/_cluster/health/later?wait_for_status=yellow&timeout=60s",
    );
    for _ in 0..2 {
        let (s, _) = node.req("GET", "/_cluster/health", None).await;
        assert_eq!(s, 200);
    }
    assert!(
        !waiting.is_finished(),
        "answered before the index was created"
    );
    let (s, b) = node.req("PUT", "/later", None).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = waiting.await.expect("joined");
    assert_eq!((s, b["status"].as_str()), (200, Some("yellow")), "{b}");

    for (query, reason) in [
        (
            "wait_for_status=blue",
            "unknown cluster health status [blue]",
        ),
        ("wait_for_nodes=>=x", "cannot parse wait_for_nodes [>=x]"),
        (
            "wait_for_active_shards=most",
            "cannot parse ActiveShardCount[most]",
        ),
        (
            "wait_for_events=soon",
            "No enum constant org.opensearch.common.Priority.SOON",
        ),
    ] {
        let resp = node
            .req("GET", &format!("/_cluster/health?{query}"), None)
            .await;
        assert_error(&resp, 400, "illegal_argument_exception");
        let got = resp.1["error"]["reason"].as_str().unwrap_or_default();
        assert!(got.contains(reason), "{query}: {}", resp.1);
    }
}

/// `GET path` on `node` in a task of its own, for a request that waits while the test goes on:
/// its status and JSON body.
fn spawn_get(node: &TestNode, path: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let client = node.client.clone();
    let url = node.url(path);
    tokio::spawn(async move {
        let resp = client.get(url).send().await.expect("sent");
        (
            resp.status().as_u16(),
            resp.json::<Value>().await.expect("json"),
        )
    })
}

/// Node selectors resolve as OpenSearch's `DiscoveryNodes.resolveNodes` (`cluster/select.rs`):
/// the cluster manager, role filters, addresses — on `_nodes` and on `_nodes/{sel}/stats`
/// (an outside trial found them selecting nothing).
#[tokio::test]
async fn test_node_selectors_resolve_as_opensearch_resolves_them() {
    let node = TestNode::start().await;
    for (selector, total) in [
        ("_cluster_manager", 1),
        ("_master", 1),
        ("cluster_manager:true", 1),
        ("data:true", 1),
        ("ingest:true", 1),
        ("127.0.0.1", 1),
        ("_all,data:false", 0),
        ("ml:true", 0),
        ("nope", 0),
    ] {
        for path in [
            format!("/_nodes/{selector}"),
            format!("/_nodes/{selector}/stats"),
        ] {
            let (s, b) = node.req("GET", &path, None).await;
            assert_eq!(s, 200, "{path}: {b}");
            assert_eq!(b["_nodes"]["total"], total, "{path}: {b}");
        }
    }
    // A role's value is a boolean, as OpenSearch parses it.
    for path in ["/_nodes/data:*", "/_nodes/cluster_manager:TRUE/stats"] {
        let r = node.req("GET", path, None).await;
        assert_error(&r, 400, "illegal_argument_exception");
    }
    node.stop().await;
}
