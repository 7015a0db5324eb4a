//! Error responses over HTTP: OpenSearch's status codes, error types and JSON shape for unknown
//! indices, malformed bodies, bad queries, oversized bodies, unknown routes and methods; and a
//! seeded fuzz loop proving that garbage never yields a 5xx or a hang and never stops the node.

use std::time::Duration;

use crate::common;
use crate::common::{TestNode, assert_error, ndjson};
use serde_json::{Value, json};

/// Creates `name` with a strict mapping: `n` integer, `s` keyword, `t` text.
async fn strict_index(node: &TestNode, name: &str) {
    let (s, b) = node
        .req(
            "PUT",
            &format!("/{name}"),
            Some(json!({"mappings": {"dynamic": "strict", "properties": {
                "n": {"type": "integer"}, "s": {"type": "keyword"}, "t": {"type": "text"}
            }}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req(
            "PUT",
            &format!("/{name}/_doc/1?refresh=true"),
            Some(json!({"n": 1, "s": "a", "t": "hello"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unknown_index_is_404_index_not_found_with_root_cause() {
    let node = TestNode::start().await;
    let cases: [(&str, &str, Option<Value>); 6] = [
        ("POST", "/nope/_search", Some(json!({}))),
        ("GET", "/nope/_search", None),
        ("GET", "/nope/_doc/1", None),
        ("GET", "/nope/_mapping", None),
        ("GET", "/nope/_count", None),
        ("GET", "/nope", None),
    ];
    let mut uuids = Vec::new();
    for (method, path, body) in cases {
        let resp = node.req(method, path, body).await;
        assert_error(&resp, 404, "index_not_found_exception");
        let err = &resp.1["error"];
        assert_eq!(
            err["type"], "index_not_found_exception",
            "{method} {path}: {}",
            resp.1
        );
        assert_eq!(err["reason"], "no such index [nope]", "{method} {path}");
        assert_eq!(err["index"], "nope", "{method} {path}");
        assert_eq!(err["resource.type"], "index_or_alias", "{method} {path}");
        assert_eq!(err["resource.id"], "nope", "{method} {path}");
        uuids.push((format!("{method} {path}"), err["index_uuid"].clone()));
        let root = &err["root_cause"];
        assert_eq!(
            root.as_array().map(Vec::len),
            Some(1),
            "{method} {path}: {}",
            resp.1
        );
        assert_eq!(root[0]["type"], "index_not_found_exception");
        assert_eq!(root[0]["reason"], "no such index [nope]");
        assert_eq!(root[0]["index"], "nope");
    }
    // OpenSearch names the (unknown) index uuid `_na_`; checked last so it hides nothing.
    for (request, uuid) in uuids {
        assert_eq!(uuid, "_na_", "index_uuid of {request}");
    }
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_malformed_json_body_is_400_parse_error() {
    let node = TestNode::start().await;
    strict_index(&node, "e").await;
    // What OpenSearch names a JSON syntax error depends on where the parser trips; all are 400s.
    const PARSE_TYPES: [&str; 4] = [
        "x_content_parse_exception",
        "parsing_exception",
        "json_parse_exception",
        "json_e_o_f_exception",
    ];
    for body in [
        "{\"query\": {\"match_all\": {}}",
        "{query: 1}",
        "{\"size\": 1,}",
        "{\"query\": [}",
    ] {
        let (s, resp) = node.raw_json("POST", "/e/_search", body).await;
        assert_eq!(s, 400, "{body}: {resp}");
        assert_eq!(resp["status"], 400, "{body}: {resp}");
        let ty = resp["error"]["type"].as_str().unwrap_or_default();
        assert!(PARSE_TYPES.contains(&ty), "{body}: type {ty} in {resp}");
        assert!(resp["error"]["reason"].is_string(), "{resp}");
        assert!(resp["error"]["root_cause"][0]["type"].is_string(), "{resp}");
    }
    // A member named twice is refused as OpenSearch's strict duplicate detection refuses it,
    // not read as its last value: in a search, a workload group, a document, a bulk item and
    // an msearch line.
    for (method, path, body) in [
        ("POST", "/e/_search", r#"{"size": 1, "size": 2}"#),
        (
            "PUT",
            "/_wlm/workload_group",
            r#"{"name": "n1", "name": "n2", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}}"#,
        ),
        ("PUT", "/e/_doc/3", r#"{"n": 1, "n": 2}"#),
    ] {
        let (s, resp) = node.raw_json(method, path, body).await;
        assert_eq!(s, 400, "{path}: {resp}");
        let reason = resp["error"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("Duplicate field"), "{path}: {resp}");
    }
    let (_, groups) = node.req("GET", "/_wlm/workload_group", None).await;
    assert_eq!(
        groups["workload_groups"],
        json!([]),
        "nothing created: {groups}"
    );
    let bulk = node
        .raw(
            "POST",
            "/_bulk",
            "{\"index\": {\"_index\": \"e\", \"_id\": \"4\"}}\n{\"n\": 1, \"n\": 2}\n",
        )
        .await;
    assert_eq!(bulk.0, 200, "{}", bulk.1);
    let item = &bulk.1["items"][0]["index"];
    assert_eq!(item["status"], 400, "{}", bulk.1);
    assert!(
        item["error"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("Duplicate field"),
        "{}",
        bulk.1
    );
    // The same for a document and for index creation.
    let (s, resp) = node.raw_json("PUT", "/e/_doc/2", "{\"n\": ").await;
    assert_eq!(s, 400, "{resp}");
    let (s, resp) = node.raw_json("PUT", "/fresh", "{\"settings\": ").await;
    assert_eq!(s, 400, "{resp}");
    assert_eq!(node.req("HEAD", "/fresh", None).await.0, 404);
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unknown_query_type_is_parsing_exception_naming_it() {
    let node = TestNode::start().await;
    strict_index(&node, "e").await;
    let resp = node
        .req(
            "POST",
            "/e/_search",
            Some(json!({"query": {"no_such_query": {"s": "a"}}})),
        )
        .await;
    assert_error(&resp, 400, "parsing_exception");
    assert_eq!(resp.1["error"]["type"], "parsing_exception", "{}", resp.1);
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert!(reason.contains("unknown query [no_such_query]"), "{reason}");
    // Nested inside a bool, too.
    let resp = node
        .req(
            "POST",
            "/e/_search",
            Some(json!({"query": {"bool": {"must": [{"nope_inner": {}}]}}})),
        )
        .await;
    assert_error(&resp, 400, "parsing_exception");
    assert!(
        resp.1["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("[nope_inner]"),
        "{}",
        resp.1
    );
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_term_of_wrong_type_is_search_phase_failure_with_query_shard_cause() {
    let node = TestNode::start().await;
    strict_index(&node, "e").await;
    let (s, resp) = node
        .req(
            "POST",
            "/e/_search",
            Some(json!({"query": {"term": {"n": "abc"}}})),
        )
        .await;
    assert_eq!(s, 400, "{resp}");
    assert_eq!(resp["status"], 400);
    assert_eq!(
        resp["error"]["type"], "search_phase_execution_exception",
        "{resp}"
    );
    assert_eq!(resp["error"]["reason"], "all shards failed");
    assert_eq!(resp["error"]["phase"], "query");
    let root = &resp["error"]["root_cause"][0];
    assert_eq!(root["type"], "query_shard_exception", "{resp}");
    assert!(
        root["reason"]
            .as_str()
            .unwrap()
            .contains("failed to create query"),
        "{resp}"
    );
    assert_eq!(root["index"], "e");
    // The failed shard names its index and the node it failed on, by the id `_nodes` gives
    // (through a gateway, the upstream's node, which ran the query).
    let failed = &resp["error"]["failed_shards"];
    assert_eq!(failed.as_array().map(Vec::len), Some(1), "{resp}");
    assert_eq!(failed[0]["index"], "e", "{resp}");
    let (_, nodes) = node.req("GET", "/_nodes", None).await;
    let ids: Vec<&String> = nodes["nodes"].as_object().unwrap().keys().collect();
    assert_eq!(ids.len(), 1, "{nodes}");
    assert_eq!(failed[0]["node"], json!(ids[0]), "{resp}");
    // A range with a bad bound fails the same way.
    let (s, resp) = node
        .req(
            "POST",
            "/e/_search",
            Some(json!({"query": {"range": {"n": {"gte": "many"}}}})),
        )
        .await;
    assert_eq!(s, 400, "{resp}");
    assert_eq!(
        resp["error"]["root_cause"][0]["type"], "query_shard_exception",
        "{resp}"
    );
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unknown_top_level_search_key_is_400() {
    let node = TestNode::start().await;
    strict_index(&node, "e").await;
    let resp = node
        .req(
            "POST",
            "/e/_search",
            Some(json!({"query": {"match_all": {}}, "qeury": {}})),
        )
        .await;
    assert_error(&resp, 400, "parsing_exception");
    assert!(
        resp.1["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("[qeury]"),
        "{}",
        resp.1
    );
    let resp = node
        .req("POST", "/e/_search", Some(json!({"sizes": 10})))
        .await;
    assert_error(&resp, 400, "parsing_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "Unknown key for a VALUE_NUMBER in [sizes]."
    );
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_body_over_max_content_length_is_413() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = TestNode::start_on(tmp.path(), &["http.max_content_length=1kb"]).await;
    let small = json!({"query": {"match_all": {}}, "size": 1});
    let (s, resp) = node.req("POST", "/_search", Some(small)).await;
    assert_eq!(s, 200, "a small body passes: {resp}");
    let big = json!({"query": {"match": {"t": "x".repeat(2048)}}});
    let (s, resp) = node.req("POST", "/_search", Some(big)).await;
    assert_eq!(s, 413, "{resp}");
    let big_doc = json!({"t": "y".repeat(4096)});
    let (s, _) = node.req("PUT", "/big/_doc/1", Some(big_doc)).await;
    assert_eq!(s, 413);
    assert_eq!(
        node.req("HEAD", "/big", None).await.0,
        404,
        "nothing was indexed"
    );
    let (s, _) = node
        .raw(
            "POST",
            "/_bulk",
            "{\"index\":{\"_index\":\"big\"}}\n{\"t\":\"z\"}\n".repeat(40),
        )
        .await;
    assert_eq!(s, 413);
    node.assert_alive().await;
    node.stop().await;
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unknown_route_is_400_no_handler() {
    let node = TestNode::start().await;
    for (method, path) in [
        ("GET", "/_nope/x/y"),
        ("POST", "/_nope/x/y"),
        ("GET", "/a/b/c/d"),
    ] {
        let (s, body) = node.req(method, path, None).await;
        assert_eq!(s, 400, "{method} {path}: {body}");
        assert_eq!(
            body["error"],
            format!("no handler found for uri [{path}] and method [{method}]"),
            "{body}"
        );
        // OpenSearch's own body is {"error": "..."}; a status field, if any, must agree.
        if let Some(status) = body.get("status") {
            assert_eq!(status, 400, "{body}");
        }
    }
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_api_names_sluice_lacks_are_no_handler_not_index_names() {
    let node = TestNode::start().await;
    // opensearch-py's reindex, analyze, field_caps, mtermvectors and rank_eval, and the reads
    // of templates, data streams and snapshots: APIs sluice does not have, not indices.
    for (method, path) in [
        ("POST", "/_reindex?refresh=true"),
        ("POST", "/_analyze"),
        ("POST", "/_field_caps"),
        ("POST", "/_mtermvectors"),
        ("POST", "/_rank_eval"),
        ("GET", "/_index_template"),
        ("GET", "/_data_stream"),
        ("GET", "/_snapshot"),
        ("DELETE", "/_data_stream"),
    ] {
        let (s, body) = node.req(method, path, Some(json!({}))).await;
        assert_eq!(s, 400, "{method} {path}: {body}");
        assert_eq!(
            body["error"],
            format!("no handler found for uri [{path}] and method [{method}]"),
            "{body}"
        );
    }
    // An exists-API sluice lacks says "not found", so `exists_index_template` reads false.
    for path in ["/_index_template/x", "/_template/x", "/_data_stream"] {
        let (s, body) = node.req("HEAD", path, None).await;
        assert_eq!(
            (s, body),
            (404, Value::String(String::new())),
            "HEAD {path}"
        );
    }
    // Index names are still index names, `_all` included; creating `_x` names the bad name.
    assert_eq!(node.req("PUT", "/real", None).await.0, 200);
    let (s, body) = node.req("GET", "/_all", None).await;
    assert_eq!(s, 200, "{body}");
    assert!(body.get("real").is_some(), "{body}");
    let resp = node.req("POST", "/real", None).await;
    assert_eq!(resp.0, 405, "{}", resp.1);
    let resp = node.req("PUT", "/_x", None).await;
    assert_error(&resp, 400, "invalid_index_name_exception");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_wrong_method_is_405_naming_allowed_methods() {
    let node = TestNode::start().await;
    let resp = node
        .client
        .put(node.url("/_search"))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 405);
    let allow = resp
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = resp.json().await.expect("JSON body");
    assert_eq!(body["status"], 405, "{body}");
    let msg = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("error is a string: {body}"));
    assert!(
        msg.starts_with("Incorrect HTTP method for uri [/_search] and method [PUT], allowed: ["),
        "{msg}"
    );
    assert!(msg.contains("GET") && msg.contains("POST"), "{msg}");
    let allow = allow.expect("an Allow header");
    assert!(
        allow.contains("GET") && allow.contains("POST") && !allow.contains("PUT"),
        "{allow}"
    );

    let (s, body) = node.req("DELETE", "/_bulk", None).await;
    assert_eq!(s, 405, "{body}");
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_node_keeps_serving_after_every_kind_of_error() {
    let node = TestNode::start().await;
    strict_index(&node, "e").await;
    let _ = node.req("GET", "/missing/_search", None).await;
    let _ = node.raw_json("POST", "/e/_search", "{oops").await;
    let _ = node
        .req("POST", "/e/_search", Some(json!({"query": {"bogus": {}}})))
        .await;
    let _ = node
        .req(
            "POST",
            "/e/_search",
            Some(json!({"query": {"term": {"n": "abc"}}})),
        )
        .await;
    let _ = node.req("GET", "/_nope/x/y", None).await;
    let _ = node.req("PUT", "/_search", None).await;
    let _ = node.raw("POST", "/_bulk", "garbage\n").await;
    let _ = node
        .req("PUT", "/e/_doc/9", Some(json!({"unmapped": 1})))
        .await;
    node.assert_alive().await;
    // And the index still works.
    let resp = node
        .search("e", json!({"query": {"term": {"s": "a"}}}))
        .await;
    assert_eq!(common::hit_ids(&resp), vec!["1"]);
    node.stop().await;
}

/// A small seeded xorshift64* generator: deterministic garbage without a new crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Search keys with values of a wrong type or out of range for each.
fn wrong_typed_search_bodies() -> Vec<Value> {
    let bad: Vec<(&str, Vec<Value>)> = vec![
        (
            "query",
            vec![
                json!(5),
                json!("abc"),
                json!([1]),
                json!(true),
                json!({"match_all": 5}),
                json!({"term": 5}),
                json!({"bool": {"must": 5}}),
                json!({"range": {"n": 5}}),
            ],
        ),
        (
            "from",
            vec![
                json!({"a": 1}),
                json!([1]),
                json!("abc"),
                json!(true),
                json!(-5),
            ],
        ),
        (
            "size",
            vec![
                json!({"a": 1}),
                json!([1]),
                json!("abc"),
                json!(true),
                json!(-5),
            ],
        ),
        (
            "sort",
            vec![
                json!(5),
                json!(true),
                json!({"n": {"order": "sideways"}}),
                json!({"n": {"nope": 1}}),
            ],
        ),
        (
            "_source",
            vec![json!(5), json!({"includes": 5}), json!({"nope": []})],
        ),
        (
            "track_total_hits",
            vec![json!("abc"), json!({}), json!([1]), json!(-5)],
        ),
        ("timeout", vec![json!(5), json!({"a": 1}), json!("forever")]),
        (
            "aggs",
            vec![
                json!(5),
                json!({"a": 5}),
                json!({"a": {"terms": 5}}),
                json!({"a": {}}),
            ],
        ),
        ("min_score", vec![json!("abc"), json!({}), json!([1])]),
        ("track_scores", vec![json!({}), json!([1]), json!("abc")]),
        ("explain", vec![json!({}), json!("abc")]),
        ("version", vec![json!({}), json!([1])]),
        ("seq_no_primary_term", vec![json!({})]),
        ("terminate_after", vec![json!("abc"), json!({})]),
        ("profile", vec![json!({})]),
        ("stored_fields", vec![json!({})]),
        ("highlight", vec![json!(5)]),
        ("post_filter", vec![json!(5)]),
        ("search_after", vec![json!(5)]),
        ("collapse", vec![json!(5)]),
        ("suggest", vec![json!(5)]),
        ("docvalue_fields", vec![json!(5)]),
        ("script_fields", vec![json!(5)]),
        ("indices_boost", vec![json!(5)]),
        ("stats", vec![json!(5)]),
    ];
    let mut out = Vec::new();
    for (key, values) in bad {
        for v in values {
            let mut body = serde_json::Map::new();
            body.insert(key.to_string(), v);
            out.push(Value::Object(body));
        }
    }
    out
}

/// Bodies that are not valid for any of the fuzzed endpoints: random bytes, truncated JSON,
/// very deep nesting, numbers out of every range, wrong-typed search keys. None is empty.
fn garbage_bodies(rng: &mut XorShift) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    // Random bytes, starting with a byte no JSON text starts with.
    const BAD_START: &[u8] = b"!#$%&()*+,./:;<=>?@^`|~\\}]'";
    for i in 0..80 {
        let len = 1 + rng.below(300);
        let mut bytes = vec![*rng.pick(BAD_START)];
        bytes.extend((1..len).map(|_| rng.next() as u8));
        out.push((format!("random bytes #{i}"), bytes));
    }
    // Truncated JSON objects: a proper prefix of an object is never valid JSON.
    let templates = [
        json!({"query": {"bool": {"must": [{"match": {"t": "hello world"}}], "filter": [{"range": {"n": {"gte": 1}}}]}}, "size": 5}),
        json!({"aggs": {"x": {"terms": {"field": "s"}}}, "sort": [{"n": "asc"}]}),
        json!({"n": 5, "s": "abc", "t": "some text"}),
        json!({"settings": {"number_of_shards": 1}, "mappings": {"properties": {"a": {"type": "keyword"}}}}),
        json!({"index": {"_index": "fz", "_id": "1"}}),
    ];
    for i in 0..40 {
        let text = rng.pick(&templates).to_string();
        let cut = 1 + rng.below(text.len() - 1);
        out.push((
            format!("truncated #{i}: {}", &text[..cut]),
            text.as_bytes()[..cut].to_vec(),
        ));
    }
    // Very deep nesting.
    let depth = 10_000;
    out.push((
        "deep arrays".into(),
        format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes(),
    ));
    out.push((
        "deep unclosed arrays".into(),
        "[".repeat(depth).into_bytes(),
    ));
    out.push((
        "deep objects".into(),
        format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)).into_bytes(),
    ));
    let mut deep_bool = String::from("{\"query\":");
    deep_bool.push_str(&"{\"bool\":{\"must\":[".repeat(depth / 2));
    deep_bool.push_str("{\"match_all\":{}}");
    deep_bool.push_str(&"]}}".repeat(depth / 2));
    deep_bool.push('}');
    out.push(("deep bool query".into(), deep_bool.into_bytes()));
    // Numbers out of range everywhere.
    for body in [
        "{\"size\": 1e400}",
        "{\"from\": 123456789012345678901234567890}",
        "{\"size\": 100000000000}",
        "{\"n\": 1e400}",
        "{\"n\": 99999999999999999999}",
        "{\"settings\": {\"number_of_shards\": 1e400}}",
        "{\"query\": {\"term\": {\"n\": 1e400}}}",
        "{\"query\": {\"range\": {\"n\": {\"gte\": -1e999}}}}",
        "[1e400]",
        "-1e400",
    ] {
        out.push((format!("huge number: {body}"), body.as_bytes().to_vec()));
    }
    // Wrong types for every search key.
    for body in wrong_typed_search_bodies() {
        out.push((format!("wrong type: {body}"), body.to_string().into_bytes()));
    }
    // Bulk-shaped garbage: structural errors fail the whole bulk in OpenSearch.
    for body in [
        ndjson(&[json!({"index": 5})]),
        ndjson(&[json!({"index": {"_id": {}}}), json!({})]),
        ndjson(&[json!({"index": {"_index": "fz", "nope": 1}}), json!({})]),
        ndjson(&[json!({"delete": {"_index": "fz"}})]),
        ndjson(&[json!({"update": {"_index": "fz", "_id": "1"}}), json!({})]),
        ndjson(&[json!({"index": {"_index": "fz"}})]),
        "\n\n{\"index\":\n".to_string(),
    ] {
        out.push((format!("bulk garbage: {body:?}"), body.into_bytes()));
    }
    out
}

/// Whether `body` is an OpenSearch error document for `status`.
fn is_error_json(status: u16, body: &Value) -> bool {
    body["status"] == status
        && (body["error"].is_string()
            || (body["error"]["type"].is_string() && body["error"]["reason"].is_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_garbage_bodies_get_4xx_errors_never_5xx_or_hangs() {
    let node = TestNode::start().await;
    strict_index(&node, "fz").await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let seed = 0x5EED_1234_ABCD_0001_u64;
    let mut rng = XorShift(seed);
    let bodies = garbage_bodies(&mut rng);
    assert!(bodies.len() >= 200, "{} bodies", bodies.len());
    let mut failures = Vec::new();
    for (i, (label, bytes)) in bodies.iter().enumerate() {
        assert!(
            !bytes.iter().all(u8::is_ascii_whitespace),
            "{label} is empty"
        );
        let targets = [
            ("POST", "/fz/_search".to_string(), "application/json"),
            ("POST", "/_bulk".to_string(), "application/x-ndjson"),
            ("PUT", format!("/fz-new-{i}"), "application/json"),
            ("PUT", "/fz/_doc/fuzzed".to_string(), "application/json"),
        ];
        for (method, path, content_type) in targets {
            let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let sent = client
                .request(m, node.url(&path))
                .header("content-type", content_type)
                .body(bytes.clone())
                .send()
                .await;
            let resp = match sent {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{method} {path} with {label}: no response ({e})"));
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let text = match resp.text().await {
                Ok(t) => t,
                Err(e) => {
                    failures.push(format!("{method} {path} with {label}: body not read ({e})"));
                    continue;
                }
            };
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            if !(400..500).contains(&status) || !is_error_json(status, &body) {
                let shown: String = text.chars().take(300).collect();
                failures.push(format!("{method} {path} with {label}: {status} {shown}"));
            }
        }
    }
    // The node still answers, and nothing the fuzzer sent was stored.
    node.assert_alive().await;
    assert_eq!(
        node.req("GET", "/fz/_doc/fuzzed", None).await.0,
        404,
        "no fuzzed document was indexed"
    );
    let (_, cat) = node.req("GET", "/_cat/indices?format=json", None).await;
    let names: Vec<&str> = cat
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["index"].as_str())
        .collect();
    assert_eq!(names, vec!["fz"], "no fuzzed index was created");
    node.refresh("fz").await;
    assert_eq!(node.count("fz", None).await, 1);
    assert!(
        failures.is_empty(),
        "seed {seed:#x}: {} responses were not OpenSearch 4xx errors:\n{}",
        failures.len(),
        failures.join("\n")
    );
    node.stop().await;
}
