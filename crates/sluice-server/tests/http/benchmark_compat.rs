//! What opensearch-benchmark's `http_logs`-shaped workload asks of a node, over HTTP: its index
//! settings and mapping, bulk indexing, `_forcemerge`, the wait for merges through
//! `GET _all/_stats/_all`, its telemetry calls, and a scroll that counts `hits.total` exactly.

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

/// The index body of the `http_logs` workload, trimmed to a few fields.
fn http_logs_index() -> Value {
    json!({
        "settings": {
            "index.number_of_shards": 1,
            "index.number_of_replicas": 0,
            "index.queries.cache.enabled": false,
            "index.requests.cache.enable": false,
            "index.sort.field": "@timestamp",
            "index.sort.order": "desc"
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "@timestamp": {"type": "date", "format": "strict_date_optional_time||epoch_second"},
                "clientip": {"type": "ip"},
                "request": {"type": "text", "fields": {"raw": {"type": "keyword", "ignore_above": 256}}},
                "status": {"type": "integer"},
                "size": {"type": "integer"}
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_http_logs_shaped_workload_runs_without_error() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req("PUT", "/logs-181998", Some(http_logs_index()))
        .await;
    assert_eq!(s, 200, "{b}");
    let mut lines = Vec::new();
    for i in 0..10_001i64 {
        lines.push(json!({"index": {"_index": "logs-181998"}}));
        lines.push(json!({
            "@timestamp": 893_964_617 + i, "clientip": format!("40.135.0.{}", i % 250),
            "request": "GET /images/hm_bg.jpg HTTP/1.0", "status": 200, "size": 24736
        }));
    }
    let b = node.bulk("/_bulk", &lines).await;
    assert_eq!(b["errors"], false);
    node.refresh("logs-181998").await;
    let (s, b) = node
        .req("POST", "/logs-181998/_forcemerge?max_num_segments=1", None)
        .await;
    assert_eq!(s, 200, "{b}");
    // The benchmark waits until no merge runs.
    let (s, b) = node.req("GET", "/_all/_stats/_all", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["_all"]["total"]["merges"]["current"], 0);
    // Its always-on telemetry (`GET _nodes/_all` comes with the cluster's node listing).
    for path in [
        "/_nodes/stats/_all",
        "/logs-181998/_stats/_all?level=shards",
    ] {
        let (s, b) = node.req("GET", path, None).await;
        assert_eq!(s, 200, "{path}: {b}");
    }
    // A scroll counts every hit, past the 10,000 a plain search stops counting at.
    let (_, plain) = node
        .req("POST", "/logs-181998/_search", Some(json!({"size": 0})))
        .await;
    assert_eq!(
        plain["hits"]["total"],
        json!({"value": 10000, "relation": "gte"})
    );
    let (s, scroll) = node
        .req(
            "POST",
            "/logs-181998/_search?scroll=1m",
            Some(json!({"size": 100, "query": {"range": {"@timestamp": {"gte": 893964617}}}})),
        )
        .await;
    assert_eq!(s, 200, "{scroll}");
    assert_eq!(
        scroll["hits"]["total"],
        json!({"value": 10001, "relation": "eq"})
    );
    let refused = node
        .req(
            "POST",
            "/logs-181998/_search?scroll=1m",
            Some(json!({"size": 10, "track_total_hits": false})),
        )
        .await;
    assert_error(&refused, 400, "action_request_validation_exception");
    assert_eq!(
        refused.1["error"]["reason"],
        "Validation Failed: 1: disabling [track_total_hits] is not allowed in a scroll context;"
    );
}

/// Indexes `batches` bulk batches of 100 documents into `index`, refreshing after each, so the
/// index has that many segments and tantivy's background merges (which start once 8 segments
/// of a size are committed) run while the caller goes on.
async fn index_in_segments(node: &TestNode, index: &str, batches: i64) {
    for batch in 0..batches {
        let mut lines = Vec::new();
        for i in 0..100i64 {
            lines.push(json!({"index": {"_index": index}}));
            lines.push(json!({
                "@timestamp": 893_964_617 + batch * 100 + i, "clientip": "40.135.0.1",
                "request": "GET /english/index.html HTTP/1.0", "status": 200, "size": 3191
            }));
        }
        let b = node.bulk("/_bulk", &lines).await;
        assert_eq!(b["errors"], false, "{b}");
        node.refresh(index).await;
    }
}

/// opensearch-benchmark's force merge in `polling` mode: `POST /{index}/_forcemerge` with
/// `wait_for_completion=false` and no `max_num_segments`, then `GET _tasks/{id}` until
/// `completed`. Before sluice planned each merge round again, a background merge that took a
/// segment first made the task end in an error OSB never reads (it checks only `completed`),
/// and the index stayed unmerged: the first OSB run ended with 11 segments and no merge counted.
/// Whether a background merge races a round here depends on timing; the engine's
/// `test_merge_of_segments_merged_meanwhile_is_a_changed_round_not_an_error` forces the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_polling_force_merge_finishes_while_background_merges_run() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req("PUT", "/logs-181998", Some(http_logs_index()))
        .await;
    assert_eq!(s, 200, "{b}");
    let mut docs = 0;
    // Several rounds: each commits enough segments to start background merges, then merges.
    for round in 1..=3u64 {
        index_in_segments(&node, "logs-181998", 12).await;
        docs += 1200;
        let (s, b) = node
            .req(
                "POST",
                "/logs-181998/_forcemerge?wait_for_completion=false",
                None,
            )
            .await;
        assert_eq!(s, 200, "{b}");
        let id = b["task"].as_str().expect("task id").to_string();
        let done = node.task_result(&id).await;
        assert!(done["error"].is_null(), "round {round}: {done}");
        assert_eq!(
            done["response"]["_shards"],
            json!({"total": 1, "successful": 1, "failed": 0}),
            "{done}"
        );
        let (_, stats) = node.req("GET", "/_all/_stats/_all", None).await;
        let p = &stats["_all"]["primaries"];
        assert_eq!(p["segments"]["count"], 1, "round {round}: {stats}");
        assert_eq!(p["merges"]["current"], 0, "{stats}");
        // Background merges may have left one segment already, when the force merge has
        // nothing to do; it never counts more merges than it was asked for.
        assert!(p["merges"]["total"].as_u64().unwrap() <= round, "{stats}");
        assert_eq!(p["docs"]["count"], docs, "{stats}");
    }
}

/// Looks up a dotted path (`a.b.c`) in a JSON value.
fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| &v[k])
}

/// Every figure opensearch-benchmark's always-on telemetry reads is there, so it logs no
/// failure: `JvmStatsSummary` (`GET _nodes/stats/_all`: the GC collectors and memory pools,
/// which for a process without a JVM are zero collections and no pools, and no heap figure),
/// and `IndexStats` (`GET {index}/_stats/_all?level=shards`, read at the start and the end of
/// a run), with the translog and flush figures measured, not made up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_osb_telemetry_finds_every_figure_it_reads() {
    let node = TestNode::start().await;
    // No periodic refresh: the translog keeps a write until the test's flush commits it.
    let mut body = http_logs_index();
    body["settings"]["index.refresh_interval"] = json!("-1");
    let (s, b) = node.req("PUT", "/logs-181998", Some(body)).await;
    assert_eq!(s, 200, "{b}");

    let (s, b) = node.req("GET", "/_nodes/stats/_all", None).await;
    assert_eq!(s, 200, "{b}");
    let n = b["nodes"].as_object().unwrap().values().next().unwrap();
    let none = json!({"collection_count": 0, "collection_time_in_millis": 0});
    assert_eq!(at(n, "jvm.gc.collectors.young"), &none, "{n}");
    assert_eq!(at(n, "jvm.gc.collectors.old"), &none, "{n}");
    assert_eq!(
        at(n, "jvm.mem"),
        &json!({"pools": {}}),
        "no heap figures: {n}"
    );
    let (_, b) = node.req("GET", "/_nodes/stats/indices", None).await;
    let n = b["nodes"].as_object().unwrap().values().next().unwrap();
    assert!(n["jvm"].is_null(), "only when asked for: {n}");

    // A write not yet committed is in the translog; the index-stats figures OSB reads.
    let (s, b) = node
        .req(
            "POST",
            "/logs-181998/_doc",
            Some(json!({"@timestamp": 893964617, "status": 200, "size": 1})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let stats_path = "/logs-181998/_stats/_all?level=shards";
    let (s, b) = node.req("GET", stats_path, None).await;
    assert_eq!(s, 200, "{b}");
    let translog = at(&b, "_all.total.translog.size_in_bytes").as_u64();
    assert!(translog.unwrap() > 0, "{b}");
    let p = at(&b, "_all.primaries");
    for path in [
        "segments.count",
        "segments.memory_in_bytes",
        "segments.doc_values_memory_in_bytes",
        "segments.stored_fields_memory_in_bytes",
        "segments.terms_memory_in_bytes",
        "segments.norms_memory_in_bytes",
        "segments.points_memory_in_bytes",
        "merges.total",
        "merges.total_time_in_millis",
        "merges.total_throttled_time_in_millis",
        "indexing.index_time_in_millis",
        "indexing.throttle_time_in_millis",
        "refresh.total",
        "refresh.total_time_in_millis",
        "flush.total",
        "flush.total_time_in_millis",
    ] {
        assert!(at(p, path).is_u64(), "{path}: {p}");
    }
    assert!(at(&b, "_all.total.store.size_in_bytes").is_u64(), "{b}");
    let shard = &b["indices"]["logs-181998"]["shards"]["0"][0];
    assert_eq!(shard["routing"]["primary"], true, "{b}");
    assert!(at(shard, "merges.total_time_in_millis").is_u64(), "{shard}");

    // A flush commits: the translog is empty after it, and the flush is counted.
    let (s, b) = node.req("POST", "/logs-181998/_flush", None).await;
    assert_eq!(s, 200, "{b}");
    let (_, b) = node.req("GET", stats_path, None).await;
    assert_eq!(at(&b, "_all.total.translog.size_in_bytes"), 0, "{b}");
    assert_eq!(at(&b, "_all.primaries.flush.total"), 1, "{b}");
}
