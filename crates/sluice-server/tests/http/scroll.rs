//! Scroll: `_search?scroll=` opens a context over a point-in-time view, `_search/scroll`
//! pages through it, `DELETE _search/scroll` frees it, and contexts expire.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::{TestNode, assert_error, hit_ids};
use serde_json::{Value, json};

/// Documents in the big index: enough for ten full pages of the largest default batch.
const BIG_DOCS: usize = 10_000;

/// Creates `index` and loads `n` docs with ids `0..n` in one bulk, refreshed.
async fn load(node: &TestNode, index: &str, n: usize) {
    let (s, b) = node
        .req(
            "PUT",
            &format!("/{index}"),
            Some(json!({"mappings": {"properties": {"n": {"type": "long"}, "tag": {"type": "keyword"}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let mut body = String::new();
    for i in 0..n {
        body.push_str(&format!("{{\"index\":{{\"_id\":\"{i}\"}}}}\n"));
        body.push_str(&format!(
            "{{\"n\":{i},\"tag\":\"t{}\",\"v\":\"original\"}}\n",
            i % 5
        ));
    }
    let (s, b) = node
        .raw("POST", &format!("/{index}/_bulk?refresh=true"), body)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["errors"], false, "{b}");
}

/// Opens a scroll with `POST /{index}/_search?scroll=1m` and `body`; returns the first page.
async fn open(node: &TestNode, index: &str, body: Value) -> Value {
    let (s, resp) = node
        .req("POST", &format!("/{index}/_search?scroll=1m"), Some(body))
        .await;
    assert_eq!(s, 200, "{resp}");
    assert!(resp["_scroll_id"].is_string(), "no _scroll_id in {resp}");
    resp
}

fn scroll_id(resp: &Value) -> String {
    resp["_scroll_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no _scroll_id in {resp}"))
        .to_string()
}

/// Continues a scroll with the body form.
async fn next(node: &TestNode, id: &str) -> (u16, Value) {
    node.req(
        "POST",
        "/_search/scroll",
        Some(json!({"scroll": "1m", "scroll_id": id})),
    )
    .await
}

/// Pages to the end of a scroll, alternating the body, path and parameter forms; returns every
/// id in order and the number of continuation pages (the final empty one included).
async fn drain(node: &TestNode, first: &Value) -> (Vec<String>, usize) {
    let id = scroll_id(first);
    let mut all = hit_ids(first);
    let mut pages = 0;
    loop {
        let (s, page) = match pages % 3 {
            0 => next(node, &id).await,
            1 => {
                node.req("GET", &format!("/_search/scroll/{id}?scroll=1m"), None)
                    .await
            }
            _ => {
                node.req(
                    "GET",
                    &format!("/_search/scroll?scroll=30s&scroll_id={id}"),
                    None,
                )
                .await
            }
        };
        assert_eq!(s, 200, "page {pages}: {page}");
        assert_eq!(page["_scroll_id"], first["_scroll_id"], "{page}");
        assert_eq!(page["hits"]["total"], first["hits"]["total"], "{page}");
        assert!(
            page.get("aggregations").is_none(),
            "aggs after the first page: {page}"
        );
        pages += 1;
        let ids = hit_ids(&page);
        if ids.is_empty() {
            return (all, pages);
        }
        all.extend(ids);
        assert!(pages <= 100_000, "scroll never ended");
    }
}

fn assert_each_once(all: &[String], n: usize) {
    let set: HashSet<&String> = all.iter().collect();
    assert_eq!(set.len(), all.len(), "a doc came twice");
    let expected: HashSet<String> = (0..n).map(|i| i.to_string()).collect();
    let got: HashSet<String> = all.iter().cloned().collect();
    assert_eq!(got, expected, "missing or extra docs");
}

#[tokio::test]
async fn test_scroll_returns_every_doc_once_in_doc_and_score_order() {
    let node = TestNode::start().await;
    load(&node, "big", BIG_DOCS).await;
    for body in [
        json!({"size": 1000, "sort": ["_doc"]}),
        json!({"size": 1000}),
        json!({"size": 1000, "sort": [{"tag": "desc"}], "track_total_hits": true}),
    ] {
        let first = open(&node, "big", body.clone()).await;
        assert_eq!(first["hits"]["total"]["value"], BIG_DOCS, "{first}");
        assert_eq!(hit_ids(&first).len(), 1000);
        let (all, pages) = drain(&node, &first).await;
        assert_each_once(&all, BIG_DOCS);
        assert_eq!(
            pages, 10,
            "9 full pages after the first, then an empty one, for {body}"
        );
    }
}

#[tokio::test]
async fn test_scroll_keeps_its_view_while_docs_change() {
    let node = TestNode::start().await;
    load(&node, "live", 100).await;
    let first = open(&node, "live", json!({"size": 10, "sort": ["_doc"]})).await;
    // Mid-scroll: new docs, a delete and an update, all refreshed.
    let mut lines = Vec::new();
    for i in 100..150 {
        lines.push(json!({"index": {"_id": i.to_string()}}));
        lines.push(json!({"n": i, "v": "new"}));
    }
    lines.push(json!({"delete": {"_id": "5"}}));
    lines.push(json!({"index": {"_id": "7"}}));
    lines.push(json!({"n": 7, "v": "updated"}));
    node.bulk("/live/_bulk?refresh=true", &lines).await;
    assert_eq!(node.count("live", None).await, 149);

    let id = scroll_id(&first);
    let mut all = hit_ids(&first);
    let mut seven = None;
    loop {
        let (s, page) = next(&node, &id).await;
        assert_eq!(s, 200, "{page}");
        assert_eq!(page["hits"]["total"]["value"], 100, "{page}");
        let hits = page["hits"]["hits"].as_array().expect("hits").clone();
        if hits.is_empty() {
            break;
        }
        for h in &hits {
            if h["_id"] == "7" {
                seven = Some(h["_source"]["v"].clone());
            }
        }
        all.extend(hit_ids(&page));
    }
    if hit_ids(&first).contains(&"7".to_string()) {
        let h = first["hits"]["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .find(|h| h["_id"] == "7")
            .expect("7");
        seven = Some(h["_source"]["v"].clone());
    }
    assert_each_once(&all, 100);
    assert_eq!(seven, Some(json!("original")), "the scroll saw the update");
}

#[tokio::test]
async fn test_aggregations_come_with_the_first_page_only() {
    let node = TestNode::start().await;
    load(&node, "aggs", 30).await;
    let first = open(
        &node,
        "aggs",
        json!({"size": 10, "aggs": {"tags": {"terms": {"field": "tag"}}}}),
    )
    .await;
    assert_eq!(
        first["aggregations"]["tags"]["buckets"]
            .as_array()
            .expect("buckets")
            .len(),
        5,
        "{first}"
    );
    let (all, pages) = drain(&node, &first).await;
    assert_each_once(&all, 30);
    assert_eq!(pages, 3);
}

#[tokio::test]
async fn test_clear_by_id_list_and_all_counts_freed_contexts() {
    let node = TestNode::start().await;
    load(&node, "c", 20).await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(scroll_id(&open(&node, "c", json!({"size": 2})).await));
    }
    let (a, b, c, d, e, f) = (&ids[0], &ids[1], &ids[2], &ids[3], &ids[4], &ids[5]);

    let resp = node
        .req("DELETE", "/_search/scroll", Some(json!({"scroll_id": a})))
        .await;
    assert_eq!(resp, (200, json!({"succeeded": true, "num_freed": 1})));
    let resp = node
        .req(
            "DELETE",
            "/_search/scroll",
            Some(json!({"scroll_id": [a, b]})),
        )
        .await;
    assert_eq!(resp, (200, json!({"succeeded": true, "num_freed": 1})));
    let resp = node
        .req("DELETE", &format!("/_search/scroll/{c},{d}"), None)
        .await;
    assert_eq!(resp, (200, json!({"succeeded": true, "num_freed": 2})));
    let resp = node
        .req("DELETE", &format!("/_search/scroll/{c}"), None)
        .await;
    assert_eq!(resp, (404, json!({"succeeded": true, "num_freed": 0})));
    // The ids as a parameter, as OpenSearch reads them too (URL-safe base64: no escaping).
    let resp = node
        .req("DELETE", &format!("/_search/scroll?scroll_id={f}"), None)
        .await;
    assert_eq!(resp, (200, json!({"succeeded": true, "num_freed": 1})));

    // The cleared ones are gone; the last one still pages.
    let (s, page) = next(&node, a).await;
    assert_error(&(s, page.clone()), 404, "search_context_missing_exception");
    let (s, page) = next(&node, e).await;
    assert_eq!(s, 200, "{page}");
    assert_eq!(hit_ids(&page).len(), 2);

    // `_all` counts the node that cleared, as OpenSearch counts nodes: 1 whatever was open,
    // so a repeated `_all` is still a 200.
    let resp = node.req("DELETE", "/_search/scroll/_all", None).await;
    assert_eq!(resp, (200, json!({"succeeded": true, "num_freed": 1})));
    let resp = node.req("DELETE", "/_search/scroll/_all", None).await;
    assert_eq!(resp, (200, json!({"succeeded": true, "num_freed": 1})));
    let (s, page) = next(&node, e).await;
    assert_error(&(s, page), 404, "search_context_missing_exception");
}

#[tokio::test]
async fn test_unknown_id_is_search_context_missing() {
    let node = TestNode::start().await;
    load(&node, "u", 5).await;
    let id = scroll_id(&open(&node, "u", json!({"size": 1})).await);
    let resp = node.req("DELETE", "/_search/scroll/_all", None).await;
    assert_eq!(resp.0, 200, "{}", resp.1);
    let (s, body) = next(&node, &id).await;
    assert_error(&(s, body.clone()), 404, "search_context_missing_exception");
    assert_eq!(body["error"]["type"], "search_phase_execution_exception");
    assert_eq!(body["error"]["reason"], "all shards failed");
    let reason = body["error"]["root_cause"][0]["reason"]
        .as_str()
        .expect("reason");
    assert!(
        reason.starts_with("No search context found for id ["),
        "{reason}"
    );
}

#[tokio::test]
async fn test_malformed_id_is_a_bad_request() {
    let node = TestNode::start().await;
    for path in [
        "/_search/scroll/bm90LWEtc2Nyb2xsLWlk?scroll=1m",
        "/_search/scroll?scroll_id=%25%25%25",
    ] {
        let resp = node.req("GET", path, None).await;
        assert_error(&resp, 400, "illegal_argument_exception");
        assert_eq!(
            resp.1["error"]["reason"], "Cannot parse scroll id",
            "{}",
            resp.1
        );
    }
    let resp = node
        .req(
            "DELETE",
            "/_search/scroll",
            Some(json!({"scroll_id": ["bm90LWEtc2Nyb2xsLWlk"]})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    let resp = node
        .req("POST", "/_search/scroll", Some(json!({"scroll": "1m"})))
        .await;
    assert_error(&resp, 400, "action_request_validation_exception");
    let resp = node.req("DELETE", "/_search/scroll", None).await;
    assert_error(&resp, 400, "action_request_validation_exception");
}

#[tokio::test]
async fn test_expired_scroll_answers_search_context_missing() {
    let node = TestNode::start().await;
    load(&node, "exp", 10).await;
    let (s, first) = node
        .req("POST", "/exp/_search?scroll=1ms", Some(json!({"size": 2})))
        .await;
    assert_eq!(s, 200, "{first}");
    let id = scroll_id(&first);
    // Continue, renewing for 1ms only (a continuation without `scroll` would renew it for
    // `search.default_keep_alive`), until the keep-alive has passed between two: bounded, no
    // fixed sleep.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, body) = node
            .req(
                "POST",
                "/_search/scroll",
                Some(json!({"scroll_id": id, "scroll": "1ms"})),
            )
            .await;
        if s == 404 {
            assert_error(&(s, body), 404, "search_context_missing_exception");
            break;
        }
        assert_eq!(s, 200, "{body}");
        assert!(Instant::now() < deadline, "scroll never expired");
        tokio::task::yield_now().await;
    }
    let resp = node
        .req("DELETE", &format!("/_search/scroll/{id}"), None)
        .await;
    assert_eq!(resp, (404, json!({"succeeded": true, "num_freed": 0})));
}

#[tokio::test]
async fn test_scroll_request_validation_matches_opensearch() {
    let node = TestNode::start().await;
    load(&node, "v", 10).await;
    let resp = node
        .req("POST", "/v/_search?scroll=1m", Some(json!({"from": 2})))
        .await;
    assert_error(&resp, 400, "action_request_validation_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "Validation Failed: 1: using [from] is not allowed in a scroll context;"
    );
    let resp = node
        .req("POST", "/v/_search?scroll=2d", Some(json!({})))
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "Keep alive for request (2d) is too large. It must be less than (1d). This limit can be set by changing the [search.max_keep_alive] cluster level setting."
    );
    let resp = node
        .req("POST", "/v/_search?scroll=soon", Some(json!({})))
        .await;
    // OpenSearch 3.x's `TimeValue` throws `IllegalArgumentException` for a bad time value.
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "failed to parse setting [scroll] with value [soon] as a time value: unit is missing or unrecognized"
    );
    let resp = node
        .req("POST", "/v/_search?scroll=1m", Some(json!({"size": 10001})))
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(
        resp.1["error"]["root_cause"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("Batch size is too large")),
        "{}",
        resp.1
    );
    // A continuation asking for too long a keep-alive fails and leaves the scroll usable.
    let first = open(&node, "v", json!({"size": 4})).await;
    let id = scroll_id(&first);
    let resp = node
        .req(
            "POST",
            "/_search/scroll",
            Some(json!({"scroll": "2d", "scroll_id": id})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    let (s, page) = next(&node, &id).await;
    assert_eq!(s, 200, "{page}");
    assert_eq!(hit_ids(&page).len(), 4);
}

#[tokio::test]
async fn test_cancelled_continuation_runs_as_task_and_does_not_advance() {
    let node = TestNode::start().await;
    load(&node, "t", 9).await;
    let first = open(&node, "t", json!({"size": 3, "sort": ["_doc"]})).await;
    let id = scroll_id(&first);
    // `cancel_after_time_interval` is honoured by the task wrapper: the page is cancelled.
    let resp = node
        .req(
            "POST",
            "/_search/scroll?cancel_after_time_interval=0s",
            Some(json!({"scroll": "1m", "scroll_id": id})),
        )
        .await;
    assert_error(&resp, 500, "task_cancelled_exception");
    let (_, page2) = next(&node, &id).await;
    let (_, page3) = next(&node, &id).await;
    let mut all = hit_ids(&first);
    all.extend(hit_ids(&page2));
    all.extend(hit_ids(&page3));
    assert_each_once(&all, 9);
}

#[tokio::test]
async fn test_scroll_limits_follow_cluster_settings() {
    let node = TestNode::start().await;
    load(&node, "lim", 10).await;
    let (s, b) = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"search.max_open_scroll_context": 2, "search.max_keep_alive": "1h"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    open(&node, "lim", json!({"size": 1})).await;
    open(&node, "lim", json!({"size": 1})).await;
    let resp = node
        .req("POST", "/lim/_search?scroll=1m", Some(json!({"size": 1})))
        .await;
    assert_error(&resp, 429, "rejected_execution_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "Trying to create too many scroll contexts. Must be less than or equal to: [2]. This limit can be set by changing the [search.max_open_scroll_context] setting."
    );
    let resp = node.req("DELETE", "/_search/scroll/_all", None).await;
    assert_eq!(resp, (200, json!({"succeeded": true, "num_freed": 1})));
    let resp = node
        .req("POST", "/lim/_search?scroll=2h", Some(json!({"size": 1})))
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "Keep alive for request (2h) is too large. It must be less than (1h). This limit can be set by changing the [search.max_keep_alive] cluster level setting."
    );
    // Back to the defaults: room again.
    let (s, b) = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"search.max_open_scroll_context": null, "search.max_keep_alive": null}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    for _ in 0..3 {
        open(&node, "lim", json!({"size": 1})).await;
    }
    let resp = node
        .req("POST", "/lim/_search?scroll=2h", Some(json!({"size": 1})))
        .await;
    assert_eq!(resp.0, 200, "{}", resp.1);
}
