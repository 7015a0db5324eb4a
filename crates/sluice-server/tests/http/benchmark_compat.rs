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
