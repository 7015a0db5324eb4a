//! Settings as OpenSearch reads them: a dynamic cluster setting given in the node's
//! configuration (file, `SLUICE_*`, `-E`) is the node's default under `_cluster/settings`, and
//! the harmless index settings clients send are accepted and echoed.

use sluice_server::config::{Config, gather};

use crate::common::{TestNode, assert_error};
use serde_json::json;

fn terms_over(n: usize) -> serde_json::Value {
    json!({"size": 0, "aggs": {"k": {"terms": {"field": "k.keyword", "size": n}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_config_gives_the_node_default_of_a_dynamic_setting() {
    let node = TestNode::start_with(&[
        "search.max_buckets=3",
        "wlm.workload_group.mode=monitor_only",
    ])
    .await;
    let lines: Vec<serde_json::Value> = (0..5)
        .flat_map(|i| {
            [
                json!({"index": {"_index": "t"}}),
                json!({"k": format!("v{i}")}),
            ]
        })
        .collect();
    node.bulk("/_bulk?refresh=true", &lines).await;
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/settings?include_defaults=true&flat_settings=true",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["defaults"]["search.max_buckets"], "3");
    assert_eq!(b["defaults"]["wlm.workload_group.mode"], "monitor_only");
    assert_eq!(b["persistent"], json!({}));
    // The node default applies ...
    let over = node.req("POST", "/t/_search", Some(terms_over(5))).await;
    assert_eq!(over.0, 503, "{}", over.1);
    assert_eq!(
        over.1["error"]["root_cause"][0]["type"],
        "too_many_buckets_exception"
    );
    // ... until the cluster setting says otherwise, and again once it is reset.
    let (s, _) = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"search.max_buckets": 100}})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, b) = node.req("POST", "/t/_search", Some(terms_over(5))).await;
    assert_eq!(s, 200, "{b}");
    node.req(
        "PUT",
        "/_cluster/settings",
        Some(json!({"persistent": {"search.max_buckets": null}})),
    )
    .await;
    let again = node.req("POST", "/t/_search", Some(terms_over(5))).await;
    assert_eq!(again.0, 503, "{}", again.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_histogram_with_a_tiny_interval_is_too_many_buckets() {
    // Two values 100 apart at an interval of 1e-7 fill in a billion empty buckets: OpenSearch's
    // 503 `too_many_buckets_exception`, not a memory error.
    let node = TestNode::start().await;
    for (id, n) in [(1, 0), (2, 100)] {
        let (s, b) = node
            .req(
                "PUT",
                &format!("/h/_doc/{id}?refresh=true"),
                Some(json!({"n": n})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    let tiny =
        json!({"size": 0, "aggs": {"a": {"histogram": {"field": "n", "interval": 0.0000001}}}});
    let resp = node.req("POST", "/h/_search", Some(tiny)).await;
    assert_error(&resp, 503, "too_many_buckets_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "Trying to create too many buckets. Must be less than or equal to: [65535] but was \
         [1000000001]. This limit can be set by changing the [search.max_buckets] cluster level setting.",
        "{}",
        resp.1
    );
}

#[test]
fn test_config_refuses_a_bad_value_of_a_dynamic_setting_and_reads_the_environment() {
    let raw = gather(
        None,
        std::iter::empty(),
        &["search.cancel_after_time_interval=abc".to_string()],
    )
    .expect("gathered");
    let err = Config::from_raw(&raw).expect_err("a bad time value");
    assert!(
        err.to_string()
            .contains("[search.cancel_after_time_interval]"),
        "{err}"
    );
    let raw = gather(
        None,
        [("SLUICE_SEARCH_MAX_BUCKETS".to_string(), "42".to_string())],
        &[],
    )
    .expect("gathered");
    let config = Config::from_raw(&raw).expect("valid");
    assert_eq!(
        config
            .cluster_defaults
            .get("search.max_buckets")
            .map(String::as_str),
        Some("42")
    );
    let raw = gather(
        None,
        std::iter::empty(),
        &["search.max_bukets=3".to_string()],
    );
    assert!(raw.is_err(), "a misspelt key is still refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_harmless_index_settings_are_accepted_and_echoed() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/logs",
            Some(json!({
                "settings": {
                    "number_of_shards": 1,
                    "number_of_routing_shards": 30,
                    "soft_deletes": {"enabled": true, "retention_lease": {"period": "12h"}},
                    "queries.cache.enabled": false,
                    "requests.cache.enable": false,
                    "translog.durability": "async",
                    "merge.policy.max_merged_segment": "5gb",
                    "sort.field": ["@timestamp"],
                    "sort.order": ["desc"]
                },
                "mappings": {"properties": {"@timestamp": {"type": "date"}}}
            })),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, b) = node
        .req("GET", "/logs/_settings?flat_settings=true", None)
        .await;
    let settings = &b["logs"]["settings"];
    assert_eq!(settings["index.number_of_routing_shards"], "30");
    assert_eq!(settings["index.soft_deletes.enabled"], "true");
    assert_eq!(settings["index.queries.cache.enabled"], "false");
    assert_eq!(settings["index.translog.durability"], "async");
    assert_eq!(settings["index.sort.field"], "@timestamp");
    assert_eq!(settings["index.sort.order"], "desc");
    // Dynamic ones change; static ones are refused as OpenSearch refuses them.
    let (s, b) = node
        .req(
            "PUT",
            "/logs/_settings",
            Some(json!({"index.requests.cache.enable": true})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let fixed = node
        .req(
            "PUT",
            "/logs/_settings",
            Some(json!({"index.soft_deletes.enabled": false})),
        )
        .await;
    assert_error(&fixed, 400, "illegal_argument_exception");
    assert!(
        fixed.1["error"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("Can't update non dynamic settings")
    );
    // Values with a shape are checked.
    let bad = node
        .req(
            "PUT",
            "/other",
            Some(json!({"settings": {"translog.durability": "sometimes"}})),
        )
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
    let bad = node
        .req(
            "PUT",
            "/other",
            Some(json!({"settings": {"sort.field": "missing"}})),
        )
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
    assert_eq!(
        bad.1["error"]["reason"],
        "unknown index sort field:[missing]"
    );
    // Still refused: a setting nobody knows.
    let bad = node
        .req(
            "PUT",
            "/other",
            Some(json!({"settings": {"bogus.thing": 1}})),
        )
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
}
