//! What the official clients do on their own, over HTTP: gzip request bodies (`compression`),
//! gzip responses on `Accept-Encoding`, `ignore_unavailable` / `allow_no_indices` /
//! `expand_wildcards` on search, count and msearch, `line`/`col` on a `parsing_exception`, and
//! the echo of `X-Opaque-Id`.

use std::io::{Read, Write};

use crate::common::{TestNode, assert_error, ndjson};
use serde_json::{Value, json};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

async fn send_gzip(node: &TestNode, path: &str, ctype: &str, body: &[u8]) -> (u16, Value) {
    let resp = node
        .client
        .post(node.url(path))
        .header("content-type", ctype)
        .header("content-encoding", "gzip")
        .body(gzip(body))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_gzip_request_bodies_are_inflated() {
    let node = TestNode::start().await;
    let bulk = ndjson(&[
        json!({"index": {"_index": "z", "_id": "1"}}),
        json!({"msg": "compressed hello"}),
    ]);
    let (s, b) = send_gzip(
        &node,
        "/_bulk?refresh=true",
        "application/x-ndjson",
        bulk.as_bytes(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["errors"], false);
    let query = json!({"query": {"match": {"msg": "hello"}}}).to_string();
    let (s, b) = send_gzip(&node, "/z/_search", "application/json", query.as_bytes()).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["hits"]["total"]["value"], 1);
    // A body that is not gzip, though it says so, is a 400 with OpenSearch's error JSON.
    let resp = node
        .client
        .post(node.url("/z/_search"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body("{\"not\": \"gzip\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], 400, "{body}");
    assert!(body["error"]["type"].is_string(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_responses_are_gzipped_when_the_client_accepts_it() {
    let node = TestNode::start().await;
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "z", "_id": "1"}}),
            json!({"msg": "x".repeat(200)}),
        ],
    )
    .await;
    let resp = node
        .client
        .get(node.url("/z/_search"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get("content-encoding")
            .and_then(|v| v.to_str().ok()),
        Some("gzip")
    );
    let bytes = resp.bytes().await.unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut text)
        .unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["hits"]["total"]["value"], 1);
    let plain = node
        .client
        .get(node.url("/z/_search"))
        .send()
        .await
        .unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    // A HEAD answer has no body to compress: it is the GET's head, gzip asked for or not
    // (compressed, it lost the GET's length, and a gateway's said `content-length: 0`).
    for path in ["/", "/z/_doc/1"] {
        let head = |gzip: bool| {
            let mut rb = node.client.head(node.url(path));
            if gzip {
                rb = rb.header("accept-encoding", "gzip");
            }
            rb.send()
        };
        let (plain, gzip) = (head(false).await.unwrap(), head(true).await.unwrap());
        assert_eq!(
            (plain.status().as_u16(), gzip.status().as_u16()),
            (200, 200),
            "{path}"
        );
        let length = |r: &reqwest::Response| r.headers().get("content-length").cloned();
        assert!(gzip.headers().get("content-encoding").is_none(), "{path}");
        assert_eq!(length(&gzip), length(&plain), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_indices_options_are_honoured_on_search_count_and_msearch() {
    let node = TestNode::start().await;
    node.bulk(
        "/_bulk?refresh=true",
        &[json!({"index": {"_index": "here"}}), json!({"n": 1})],
    )
    .await;
    let strict = node.req("GET", "/here,missing/_search", None).await;
    assert_error(&strict, 404, "index_not_found_exception");
    assert_eq!(strict.1["error"]["reason"], "no such index [missing]");
    let (s, b) = node
        .req("GET", "/here,missing/_search?ignore_unavailable=true", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["hits"]["total"]["value"], 1);
    let (s, b) = node
        .req("GET", "/here,missing/_count?ignore_unavailable=true", None)
        .await;
    assert_eq!((s, &b["count"]), (200, &json!(1)), "{b}");
    // allow_no_indices=false: a wildcard matching nothing is a 404.
    let (s, b) = node.req("GET", "/nomatch-*/_search", None).await;
    assert_eq!((s, &b["hits"]["total"]["value"]), (200, &json!(0)));
    let none = node
        .req("GET", "/nomatch-*/_search?allow_no_indices=false", None)
        .await;
    assert_error(&none, 404, "index_not_found_exception");
    assert_eq!(none.1["error"]["reason"], "no such index [nomatch-*]");
    // expand_wildcards=none: wildcards reach nothing.
    let (s, b) = node
        .req("GET", "/her*/_search?expand_wildcards=none", None)
        .await;
    assert_eq!((s, &b["hits"]["total"]["value"]), (200, &json!(0)), "{b}");
    let bad = node
        .req("GET", "/her*/_search?expand_wildcards=bogus", None)
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
    assert_eq!(
        bad.1["error"]["reason"],
        "No valid expand wildcard value [bogus]"
    );
    // msearch: per-header options, and the URL's as defaults.
    let (s, b) = node
        .raw(
            "POST",
            "/_msearch",
            ndjson(&[
                json!({"index": "here,missing", "ignore_unavailable": true}),
                json!({}),
                json!({"index": "here,missing"}),
                json!({}),
            ]),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["responses"][0]["hits"]["total"]["value"], 1);
    assert_eq!(b["responses"][1]["status"], 404);
    let (s, b) = node
        .raw(
            "POST",
            "/_msearch?ignore_unavailable=true",
            ndjson(&[json!({"index": "here,missing"}), json!({})]),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["responses"][0]["hits"]["total"]["value"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_parsing_exception_carries_line_and_col() {
    let node = TestNode::start().await;
    node.req("PUT", "/p", None).await;
    let resp = node
        .raw_json("POST", "/p/_search", r#"{"query":{"foo":{}}}"#)
        .await;
    assert_error(&resp, 400, "parsing_exception");
    assert_eq!(resp.1["error"]["reason"], "unknown query [foo]");
    assert_eq!(resp.1["error"]["line"], 1, "{}", resp.1);
    assert_eq!(resp.1["error"]["col"], 17, "{}", resp.1);
    assert_eq!(resp.1["error"]["root_cause"][0]["line"], 1);
    let resp = node
        .raw_json(
            "POST",
            "/p/_count",
            "{\n  \"query\": {\n    \"bar\": {}\n  }\n}",
        )
        .await;
    assert_error(&resp, 400, "parsing_exception");
    assert_eq!(
        (&resp.1["error"]["line"], &resp.1["error"]["col"]),
        (&json!(3), &json!(12)),
        "{}",
        resp.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_x_opaque_id_is_echoed_on_every_answer() {
    let node = TestNode::start().await;
    node.req("PUT", "/o/_doc/1?refresh=true", Some(json!({"a": 1})))
        .await;
    for (method, path, body, status) in [
        ("GET", "/o/_search", None, 200),
        ("GET", "/missing/_search", None, 404),
        (
            "POST",
            "/o/_search",
            Some(json!({"query": {"nope": {}}})),
            400,
        ),
        ("GET", "/_no_such_api", None, 400),
        ("DELETE", "/", None, 405),
    ] {
        let r = node
            .req_with(method, path, body, &[("X-Opaque-Id", "job-42")])
            .await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(r.header_values("x-opaque-id"), vec!["job-42"], "{path}");
    }
    // Without the header, none comes back.
    let r = node.req_with("GET", "/o/_search", None, &[]).await;
    assert!(r.header_values("x-opaque-id").is_empty());
}

/// `filter_path` shapes sluice's own answers as OpenSearch's REST layer does: named paths kept
/// (wildcards, `**`, arrays passed through), `-` paths dropped, `{}` when nothing matches,
/// errors whole. Through a gateway the search is filtered by the upstream, the rest by sluice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_filter_path_shapes_answers() {
    let node = TestNode::start().await;
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "fp", "_id": "1"}}),
            json!({"title": "one", "n": 1}),
            json!({"index": {"_index": "fp", "_id": "2"}}),
            json!({"n": 2}),
        ],
    )
    .await;
    let query = json!({"query": {"match_all": {}}, "sort": [{"n": "asc"}]});
    let (s, b) = node
        .req(
            "POST",
            "/fp/_search?filter_path=took,hits.hits._id",
            Some(query.clone()),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["took", "hits"], "{b}");
    assert_eq!(b["hits"], json!({"hits": [{"_id": "1"}, {"_id": "2"}]}));
    // An element with nothing named under it leaves the array.
    let (_, b) = node
        .req(
            "POST",
            "/fp/_search?filter_path=hits.hits._source.title",
            Some(query.clone()),
        )
        .await;
    assert_eq!(
        b,
        json!({"hits": {"hits": [{"_source": {"title": "one"}}]}})
    );
    // Exclusions, and both kinds at once.
    let (_, b) = node
        .req(
            "POST",
            "/fp/_search?filter_path=-took,-timed_out,-_shards,-hits.total,-hits.max_score,-hits.hits._source,-hits.hits._index,-hits.hits._score,-hits.hits.sort",
            Some(query.clone()),
        )
        .await;
    assert_eq!(b, json!({"hits": {"hits": [{"_id": "1"}, {"_id": "2"}]}}));
    let (_, b) = node
        .req(
            "POST",
            "/fp/_search?filter_path=hits.hits,-hits.hits._source,-hits.hits.sort,-hits.hits._score",
            Some(query),
        )
        .await;
    assert_eq!(
        b,
        json!({"hits": {"hits": [{"_index": "fp", "_id": "1"}, {"_index": "fp", "_id": "2"}]}})
    );
    // A filter that matches nothing gives an empty object.
    let (s, b) = node
        .req("GET", "/_cluster/health?filter_path=nothing", None)
        .await;
    assert_eq!((s, b), (200, json!({})));
    // Wildcards within a name and across levels, on sluice's own APIs.
    let (_, b) = node
        .req(
            "GET",
            "/_cluster/health?filter_path=status,*_shards,-unassigned_shards",
            None,
        )
        .await;
    let mut keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "active_primary_shards",
            "active_shards",
            "delayed_unassigned_shards",
            "initializing_shards",
            "relocating_shards",
            "status"
        ],
        "{b}"
    );
    let (_, b) = node
        .req("GET", "/_wlm/stats?filter_path=**.total_completions", None)
        .await;
    let nodes = b.as_object().unwrap();
    assert!(!nodes.is_empty(), "{b}");
    for (_, node_stats) in nodes {
        for (_, group) in node_stats["workload_groups"].as_object().unwrap() {
            assert_eq!(group.as_object().unwrap().len(), 1, "{b}");
            assert!(group["total_completions"].is_u64(), "{b}");
        }
    }
    // `_cat`'s JSON rows, a top-level array.
    let (_, b) = node
        .req(
            "GET",
            "/_cat/indices/fp?format=json&filter_path=index",
            None,
        )
        .await;
    assert_eq!(b, json!([{"index": "fp"}]));
    // Errors are never filtered.
    let resp = node
        .req("GET", "/missing/_search?filter_path=took", None)
        .await;
    assert_error(&resp, 404, "index_not_found_exception");
}
