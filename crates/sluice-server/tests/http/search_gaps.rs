//! Search details OpenSearch clients rely on (issue 17 point 5): longs kept exact in sort
//! values and `search_after` cursors, and features tantivy cannot do answered with a 400 that
//! names them.

use crate::common::{TestNode, assert_error, hit_ids};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_long_sort_values_above_2_pow_53_stay_exact() {
    let node = TestNode::start().await;
    node.req(
        "PUT",
        "/l",
        Some(json!({"mappings": {"properties": {"n": {"type": "long"}}}})),
    )
    .await;
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "l", "_id": "a"}}),
            json!({"n": 9_007_199_254_740_993i64}),
            json!({"index": {"_index": "l", "_id": "b"}}),
            json!({"n": 9_007_199_254_740_992i64}),
            json!({"index": {"_index": "l", "_id": "c"}}),
            json!({"n": i64::MAX}),
        ],
    )
    .await;
    let resp = node
        .search("l", json!({"sort": [{"n": "asc"}], "size": 1}))
        .await;
    assert_eq!(hit_ids(&resp), vec!["b"], "2^53 sorts before 2^53 + 1");
    assert_eq!(
        resp["hits"]["hits"][0]["sort"],
        json!([9_007_199_254_740_992i64])
    );
    let next = node
        .search(
            "l",
            json!({"sort": [{"n": "asc"}], "search_after": [9_007_199_254_740_992i64]}),
        )
        .await;
    assert_eq!(hit_ids(&next), vec!["a", "c"]);
    assert_eq!(
        next["hits"]["hits"][0]["sort"],
        json!([9_007_199_254_740_993i64])
    );
    assert_eq!(next["hits"]["hits"][1]["sort"], json!([i64::MAX]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_nested_is_refused_naming_the_feature() {
    let node = TestNode::start().await;
    node.req("PUT", "/n", None).await;
    let resp = node
        .req(
            "POST",
            "/n/_search",
            Some(json!({"query": {"nested": {"path": "p", "query": {"match_all": {}}}}})),
        )
        .await;
    assert_eq!(resp.0, 400, "{}", resp.1);
    let text = resp.1.to_string();
    assert!(text.contains("nested"), "{text}");
    let mapping = node
        .req(
            "PUT",
            "/m",
            Some(json!({"mappings": {"properties": {"p": {"type": "nested"}}}})),
        )
        .await;
    assert_error(&mapping, 400, "mapper_parsing_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_fields_docvalue_fields_and_stored_fields() {
    let node = TestNode::start().await;
    node.req(
        "PUT",
        "/f",
        Some(json!({"mappings": {"properties": {
            "ts": {"type": "date"}, "n": {"type": "long"},
            "msg": {"type": "text", "fields": {"keyword": {"type": "keyword"}}}
        }}})),
    )
    .await;
    node.req(
        "PUT",
        "/f/_doc/1?refresh=true",
        Some(json!({"ts": "2015-01-01T12:10:30Z", "n": 5, "msg": "hello"})),
    )
    .await;
    let resp = node
        .search(
            "f",
            json!({
                "fields": ["msg*", {"field": "ts", "format": "epoch_millis"}],
                "docvalue_fields": ["n"],
                "_source": false
            }),
        )
        .await;
    let hit = &resp["hits"]["hits"][0];
    assert_eq!(hit["fields"]["msg"], json!(["hello"]));
    assert_eq!(hit["fields"]["msg.keyword"], json!(["hello"]));
    assert_eq!(hit["fields"]["ts"], json!(["1420114230000"]));
    assert_eq!(hit["fields"]["n"], json!([5]));
    assert!(hit.get("_source").is_none(), "{hit}");
    // The URL form, and the default date format.
    let (s, b) = node
        .req("GET", "/f/_search?docvalue_fields=ts,n", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["hits"]["hits"][0]["fields"]["ts"],
        json!(["2015-01-01T12:10:30.000Z"])
    );
    // stored_fields: a list leaves _source out; _none_ leaves _id out too.
    let resp = node.search("f", json!({"stored_fields": ["msg"]})).await;
    assert!(resp["hits"]["hits"][0].get("_source").is_none());
    assert_eq!(resp["hits"]["hits"][0]["_id"], "1");
    let resp = node.search("f", json!({"stored_fields": "_none_"})).await;
    assert!(resp["hits"]["hits"][0].get("_id").is_none());
    // A text field has no doc values.
    let bad = node
        .req(
            "POST",
            "/f/_search",
            Some(json!({"docvalue_fields": ["msg"]})),
        )
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_date_range_aggregation_buckets_by_dates() {
    let node = TestNode::start().await;
    node.req(
        "PUT",
        "/dr",
        Some(json!({"mappings": {"properties": {"ts": {"type": "date"}, "n": {"type": "long"}}}})),
    )
    .await;
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "dr"}}),
            json!({"ts": "2015-06-01T00:00:00Z", "n": 1}),
            json!({"index": {"_index": "dr"}}),
            json!({"ts": "2016-06-01T00:00:00Z", "n": 2}),
            json!({"index": {"_index": "dr"}}),
            json!({"ts": "2017-06-01T00:00:00Z", "n": 3}),
        ],
    )
    .await;
    let resp = node
        .search(
            "dr",
            json!({"size": 0, "aggs": {"r": {"date_range": {"field": "ts", "ranges": [
                {"to": "2016-01-01"},
                {"from": "2016-01-01", "to": "2017-01-01"},
                {"from": "2017-01-01"}
            ]}}}}),
        )
        .await;
    let buckets = &resp["aggregations"]["r"]["buckets"];
    let counts: Vec<u64> = buckets
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["doc_count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, vec![1, 1, 1], "{resp}");
    assert_eq!(buckets[1]["from"], json!(1451606400000.0));
    assert_eq!(buckets[1]["from_as_string"], "2016-01-01T00:00:00.000Z");
    assert_eq!(
        buckets[1]["key"],
        "2016-01-01T00:00:00.000Z-2017-01-01T00:00:00.000Z"
    );
    let bad = node
        .req(
            "POST",
            "/dr/_search",
            Some(json!({"aggs": {"r": {"date_range": {"field": "n", "ranges": [{"to": 1}]}}}})),
        )
        .await;
    assert_eq!(bad.0, 400, "{}", bad.1);
    assert!(
        bad.1
            .to_string()
            .contains("Field [n] of type [long] is not supported for aggregation [date_range]"),
        "{}",
        bad.1
    );
}
