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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_strict_mapping_refuses_a_new_field_with_opensearchs_type() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/strict",
            Some(json!({"mappings": {"dynamic": "strict", "properties": {"a": {"type": "long"}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let resp = node
        .req("PUT", "/strict/_doc/1", Some(json!({"a": 1, "b": 2})))
        .await;
    assert_error(&resp, 400, "strict_dynamic_mapping_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "mapping set to strict, dynamic introduction of [b] within [_doc] is not allowed"
    );
    let b = node
        .bulk(
            "/_bulk",
            &[
                json!({"index": {"_index": "strict", "_id": "2"}}),
                json!({"c": 1}),
            ],
        )
        .await;
    assert_eq!(b["errors"], true);
    let item = &b["items"][0]["index"];
    assert_eq!(item["status"], 400, "{b}");
    assert_eq!(
        item["error"]["type"], "strict_dynamic_mapping_exception",
        "{b}"
    );
    // A document of known fields still goes in.
    let (s, b) = node
        .req("PUT", "/strict/_doc/3", Some(json!({"a": 3})))
        .await;
    assert_eq!(s, 201, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_field_meta_is_checked_kept_and_echoed() {
    let node = TestNode::start().await;
    let meta = json!({"unit": "ms", "owner": "team-a"});
    let (s, b) = node
        .req(
            "PUT",
            "/m",
            Some(json!({"mappings": {"properties": {"latency": {"type": "long", "meta": meta}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, mapping) = node.req("GET", "/m/_mapping", None).await;
    assert_eq!(
        mapping["m"]["mappings"]["properties"]["latency"]["meta"], meta,
        "{mapping}"
    );
    for (bad, why) in [
        (json!("ms"), "[meta] must be an object"),
        (json!({"unit": 5}), "[meta] values can only be strings"),
        (
            json!({"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}),
            "[meta] can't have more than 5 entries",
        ),
        (
            json!({"a-key-longer-than-twenty": "x"}),
            "[meta] keys can't be longer than 20 chars",
        ),
    ] {
        let resp = node
            .req(
                "PUT",
                "/m2",
                Some(json!({"mappings": {"properties": {"f": {"type": "keyword", "meta": bad}}}})),
            )
            .await;
        assert_error(&resp, 400, "mapper_parsing_exception");
        let reason = resp.1["error"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(why), "{reason}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_simple_query_string_reads_lucenes_simple_syntax_and_never_fails() {
    let node = TestNode::start().await;
    for (id, title, body) in [
        ("1", "quick brown fox", "jumps over"),
        ("2", "quick red fox", "sleeps"),
        ("3", "lazy brown dog", "jumps high"),
    ] {
        node.req(
            "PUT",
            &format!("/sq/_doc/{id}"),
            Some(json!({"title": title, "body": body, "n": id.parse::<i64>().unwrap()})),
        )
        .await;
    }
    node.refresh("sq").await;
    let ids = |q: serde_json::Value| {
        let node = &node;
        async move {
            let r = node
                .search(
                    "sq",
                    json!({"query": {"simple_query_string": q}, "size": 10}),
                )
                .await;
            crate::common::sorted_ids(hit_ids(&r))
        }
    };
    let all = vec!["1", "2", "3"];
    assert_eq!(
        ids(json!({"query": "fox + brown", "fields": ["title"]})).await,
        vec!["1"]
    );
    assert_eq!(
        ids(json!({"query": "fox | dog", "fields": ["title"]})).await,
        all
    );
    assert_eq!(
        ids(json!({"query": "quick -red", "fields": ["title"], "default_operator": "and"})).await,
        vec!["1"]
    );
    assert_eq!(
        ids(json!({"query": "\"brown fox\"", "fields": ["title"]})).await,
        vec!["1"]
    );
    assert_eq!(
        ids(json!({"query": "qui*", "fields": ["title"]})).await,
        vec!["1", "2"]
    );
    assert_eq!(
        ids(json!({"query": "jumpz~1", "fields": ["body"]})).await,
        vec!["1", "3"]
    );
    assert_eq!(
        ids(json!({"query": "(lazy | red) + fox", "fields": ["title"]})).await,
        vec!["2"]
    );
    // Every field by default (numbers are lenient), and `field^boost` lists.
    assert_eq!(ids(json!({"query": "sleeps"})).await, vec!["2"]);
    assert_eq!(
        ids(json!({"query": "high", "fields": ["title^2", "body"]})).await,
        vec!["3"]
    );
    // Malformed syntax is text, never an error.
    for q in [
        "\"unclosed",
        "(a b",
        "fox +",
        "| fox",
        "--",
        "\\",
        "((",
        "\"\"",
    ] {
        let (s, b) = node
            .req(
                "POST",
                "/sq/_search",
                Some(json!({"query": {"simple_query_string": {"query": q}}})),
            )
            .await;
        assert_eq!(s, 200, "{q}: {b}");
    }
    let bad = node
        .req(
            "POST",
            "/sq/_search",
            Some(json!({"query": {"simple_query_string": {"query": "a", "flags": "BOGUS"}}})),
        )
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
    let bad = node
        .req(
            "POST",
            "/sq/_search",
            Some(json!({"query": {"simple_query_string": {"query": "a", "nope": 1}}})),
        )
        .await;
    assert_error(&bad, 400, "parsing_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_multi_match_cross_fields_needs_each_term_in_some_field() {
    let node = TestNode::start().await;
    for (id, first, last) in [
        ("1", "John", "Smith"),
        ("2", "Will", "Smith"),
        ("3", "John", "Jones"),
    ] {
        node.req(
            "PUT",
            &format!("/people/_doc/{id}"),
            Some(json!({"first": first, "last": last, "tag": format!("{first} {last}")})),
        )
        .await;
    }
    node.refresh("people").await;
    let ids = |kind: &str, operator: &str| {
        let body = json!({"query": {"multi_match": {
            "query": "john smith", "type": kind, "operator": operator, "fields": ["first", "last"]
        }}});
        let node = &node;
        async move { crate::common::sorted_ids(hit_ids(&node.search("people", body).await)) }
    };
    // Every term, each in any field: only John Smith.
    assert_eq!(ids("cross_fields", "and").await, vec!["1"]);
    // best_fields with `and` wants every term in one field: nobody.
    assert!(ids("best_fields", "and").await.is_empty());
    assert_eq!(ids("cross_fields", "or").await, vec!["1", "2", "3"]);
    // A keyword field takes the whole text.
    let body = json!({"query": {"multi_match": {
        "query": "John Smith", "type": "cross_fields", "fields": ["tag.keyword"]
    }}});
    assert_eq!(hit_ids(&node.search("people", body).await), vec!["1"]);
    let bad = node
        .req(
            "POST",
            "/people/_search",
            Some(json!({"query": {"multi_match": {"query": "x", "type": "bool_prefix"}}})),
        )
        .await;
    assert_error(&bad, 400, "parsing_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_malformed_search_options_are_refused_as_opensearch_refuses_them() {
    // Read and not acted on here (one shard, no remote clusters, no request cache), but a
    // malformed value is a 400, not silently taken: in the URL, and in an `_msearch` header
    // (the whole request, as OpenSearch refuses it while reading the body).
    let node = TestNode::start().await;
    node.req("PUT", "/logs/_doc/1?refresh=true", Some(json!({"a": 1})))
        .await;
    for (path, reason) in [
        ("/logs/_search?search_type=foo", "No search type for [foo]"),
        (
            "/logs/_search?allow_partial_search_results=maybe",
            "Failed to parse value [maybe] as only [true] or [false] are allowed.",
        ),
        (
            "/logs/_search?request_cache=yes",
            "Failed to parse value [yes] as only [true] or [false] are allowed.",
        ),
    ] {
        let r = node.req("GET", path, None).await;
        assert_error(&r, 400, "illegal_argument_exception");
        assert_eq!(r.1["error"]["reason"], reason, "{path}: {}", r.1);
    }
    for path in [
        "/logs/_search?search_type=query_then_fetch",
        "/logs/_search?search_type=dfs_query_then_fetch&allow_partial_search_results=false",
        "/logs/_search?request_cache=true&ccs_minimize_roundtrips",
    ] {
        let (s, b) = node.req("GET", path, None).await;
        assert_eq!(s, 200, "{path}: {b}");
    }
    // Two malformed: always the same one named, as OpenSearch names it.
    for _ in 0..8 {
        let r = node
            .req(
                "GET",
                "/logs/_search?search_type=foo&allow_partial_search_results=maybe",
                None,
            )
            .await;
        assert_error(&r, 400, "illegal_argument_exception");
        assert_eq!(
            r.1["error"]["reason"],
            "Failed to parse value [maybe] as only [true] or [false] are allowed.",
            "{}",
            r.1
        );
    }
    let body = crate::common::ndjson(&[json!({}), json!({"query": {"match_all": {}}})]);
    let r = node
        .raw("POST", "/logs/_msearch?search_type=foo", body)
        .await;
    assert_error(&r, 400, "illegal_argument_exception");
    assert_eq!(
        r.1["error"]["reason"], "No search type for [foo]",
        "{}",
        r.1
    );
    for (header, reason) in [
        (
            json!({"index": "logs", "search_type": "nope"}),
            "No search type for [nope]",
        ),
        (
            json!({"index": "logs", "request_cache": "maybe"}),
            "Failed to parse value [maybe] as only [true] or [false] are allowed.",
        ),
    ] {
        let body = crate::common::ndjson(&[header, json!({"query": {"match_all": {}}})]);
        let r = node.raw("POST", "/_msearch", body).await;
        assert_error(&r, 400, "illegal_argument_exception");
        assert_eq!(r.1["error"]["reason"], reason, "{}", r.1);
    }
    let body = crate::common::ndjson(&[
        json!({"index": "logs", "search_type": "dfs_query_then_fetch", "request_cache": true}),
        json!({"query": {"match_all": {}}}),
    ]);
    let (s, v) = node.raw("POST", "/_msearch", body).await;
    assert_eq!((s, &v["responses"][0]["status"]), (200, &json!(200)), "{v}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terminate_after_stops_collecting_and_reports_terminated_early() {
    let node = TestNode::start().await;
    let mut lines = Vec::new();
    for n in 0..20 {
        lines.push(json!({"index": {"_index": "logs", "_id": format!("l{n}")}}));
        lines.push(json!({"n": n}));
    }
    let resp = node.bulk("/_bulk?refresh=true", &lines).await;
    assert_eq!(resp["errors"], false, "{resp}");
    let resp = node
        .search("logs", json!({"terminate_after": 10, "size": 20}))
        .await;
    assert_eq!(resp["terminated_early"], true, "{resp}");
    assert_eq!(resp["hits"]["total"]["value"], 10, "{resp}");
    assert_eq!(
        resp["hits"]["hits"].as_array().map(Vec::len),
        Some(10),
        "{resp}"
    );
    // The URL parameter works the same; a limit not reached says false.
    let (s, resp) = node
        .req("GET", "/logs/_search?terminate_after=50", None)
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(resp["terminated_early"], false, "{resp}");
    assert_eq!(resp["hits"]["total"]["value"], 20, "{resp}");
    node.stop().await;
}
