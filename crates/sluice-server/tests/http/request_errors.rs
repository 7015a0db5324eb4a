//! What a node answers a request it cannot take as sent, in OpenSearch's words and JSON: a path
//! parameter with a malformed escape, a body in a type OpenSearch does not read; and every
//! error answer rendered pretty when the request asks `?pretty`. Through a gateway
//! (`SLUICE_TEST_BACKEND=upstream`) the same answers come back, from the gateway or relayed
//! from the node behind it.

use serde_json::{Value, json};

use crate::common::{Raw, TestNode, send_raw as send};

async fn get(node: &TestNode, path: &str) -> Raw {
    send(node, "GET", path, &[], None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_path_with_a_malformed_escape_is_a_400_illegal_argument_exception() {
    let node = TestNode::start().await;
    let (s, b) = node.req("PUT", "/logs", Some(json!({}))).await;
    assert_eq!(s, 200, "{b}");
    for (path, reason) in [
        (
            "/logs/_doc/x%G1",
            "invalid escape sequence `%G1' at index 1 of: x%G1",
        ),
        (
            "/logs/_doc/ab%",
            "unterminated escape sequence at end of string: ab%",
        ),
        (
            "/logs/_doc/ab%F",
            "partial escape sequence at end of string: ab%F",
        ),
        (
            "/lo%zzgs/_search",
            "invalid escape sequence `%zz' at index 2 of: lo%zzgs",
        ),
        (
            "/_wlm/workload_group/%XY",
            "invalid escape sequence `%XY' at index 0 of: %XY",
        ),
    ] {
        let r = get(&node, path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        assert!(
            r.content_type.starts_with("application/json"),
            "{path}: {}",
            r.content_type
        );
        let v = r.json();
        assert_eq!(v["status"], 400, "{path}: {v}");
        assert_eq!(
            v["error"]["type"], "illegal_argument_exception",
            "{path}: {v}"
        );
        assert_eq!(v["error"]["reason"], reason, "{path}: {v}");
        assert_eq!(
            v["error"]["root_cause"][0]["type"], "illegal_argument_exception",
            "{path}: {v}"
        );
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_escapes_of_bytes_that_are_not_utf8_read_as_replacement_characters() {
    let node = TestNode::start().await;
    let (s, b) = node.req("PUT", "/logs", Some(json!({}))).await;
    assert_eq!(s, 200, "{b}");
    // OpenSearch reads `%FF` as U+FFFD and goes on: no such index, no such document.
    let r = get(&node, "/%FF/_search").await;
    assert_eq!(r.status, 404, "{}", r.text);
    let v = r.json();
    assert_eq!(v["error"]["type"], "index_not_found_exception", "{v}");
    assert_eq!(v["error"]["reason"], "no such index [\u{FFFD}]", "{v}");
    let r = get(&node, "/logs/_doc/%FF").await;
    assert_eq!(r.status, 404, "{}", r.text);
    let v = r.json();
    assert_eq!(
        (&v["_id"], &v["found"]),
        (&json!("\u{FFFD}"), &json!(false)),
        "{v}"
    );
    // `%%` is a `%`, as OpenSearch decodes it.
    let (s, b) = node
        .req("PUT", "/logs/_doc/a%%b?refresh=true", Some(json!({"a": 1})))
        .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["_id"], "a%b", "{b}");
    node.stop().await;
}

/// Asserts `r` is `expected` rendered pretty, as the node renders a pretty answer.
fn assert_pretty(r: &Raw, what: &str) -> Value {
    let v = r.json();
    assert_eq!(
        r.text,
        serde_json::to_string_pretty(&v).unwrap(),
        "{what}: not pretty"
    );
    assert!(r.text.contains("\n  \""), "{what}: {}", r.text);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_error_answers_are_pretty_when_the_request_asks() {
    let node = TestNode::start().await;
    let (s, b) = node.req("PUT", "/logs", Some(json!({}))).await;
    assert_eq!(s, 200, "{b}");
    // A handler's error, a malformed path, an unknown route, a method the route does not take.
    for (method, path, status) in [
        ("GET", "/nope/_search?pretty", 404),
        ("GET", "/nope/_search?size=1&pretty=true", 404),
        ("GET", "/logs/_doc/x%G1?pretty", 400),
        ("GET", "/_no/_such/_route/_here?pretty", 400),
        ("DELETE", "/_cat/indices?pretty", 405),
    ] {
        let r = send(&node, method, path, &[], None).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.text);
        let v = assert_pretty(&r, path);
        assert_eq!(v["status"], status, "{path}: {v}");
    }
    // A refusal before any handler: headers over the limit, and a repeated group header.
    let long = "x".repeat(17 * 1024);
    let r = send(
        &node,
        "GET",
        "/logs/_search?pretty",
        &[("x-long", &long)],
        None,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_pretty(&r, "long header");
    let r = send(
        &node,
        "GET",
        "/logs/_search?pretty",
        &[("workloadGroupId", "a"), ("workloadGroupId", "b")],
        None,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_pretty(&r, "repeated group header");
    // A body in a type OpenSearch does not read.
    let r = send(
        &node,
        "PUT",
        "/other?pretty",
        &[("content-type", "text/plain")],
        Some("{}"),
    )
    .await;
    assert_eq!(r.status, 406, "{}", r.text);
    assert_pretty(&r, "406");
    // Not asked, or `pretty=false`: compact.
    for path in ["/nope/_search", "/nope/_search?pretty=false"] {
        let r = get(&node, path).await;
        assert_eq!(r.status, 404);
        assert!(!r.text.contains('\n'), "{path}: {}", r.text);
    }
    node.stop().await;
}

/// OpenSearch's 406 body for a body in an unsupported type, exactly.
fn unsupported(named: &str) -> String {
    format!(r#"{{"error":"Content-Type header [{named}] is not supported","status":406}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_body_in_a_type_opensearch_does_not_read_is_a_406() {
    let node = TestNode::start().await;
    let group = r#"{"name": "g", "resource_limits": {"cpu": 0.1}}"#;
    for (method, path, body) in [
        ("PUT", "/logs", "{}"),
        ("POST", "/_bulk", "{\"index\":{\"_index\":\"logs\"}}\n{}\n"),
        ("PUT", "/_wlm/workload_group", group),
        ("POST", "/_search", "{}"),
    ] {
        let r = send(
            &node,
            method,
            path,
            &[("content-type", "text/plain")],
            Some(body),
        )
        .await;
        assert_eq!(r.status, 406, "{method} {path}: {}", r.text);
        assert_eq!(r.text, unsupported("text/plain"), "{method} {path}");
        assert!(
            r.content_type.starts_with("application/json"),
            "{}",
            r.content_type
        );
        let r = send(&node, method, path, &[], Some(body)).await;
        assert_eq!(r.status, 406, "{method} {path}: {}", r.text);
        assert_eq!(
            r.text, r#"{"error":"Content-Type header is missing","status":406}"#,
            "{method} {path}"
        );
        let r = send(
            &node,
            method,
            path,
            &[("content-type", "application/x-www-form-urlencoded")],
            Some(body),
        )
        .await;
        assert_eq!(r.text, unsupported("application/x-www-form-urlencoded"));
    }
    // Nothing was done: the index is not there.
    assert_eq!(get(&node, "/logs").await.status, 404);
    // The types OpenSearch reads, with parameters and in any case; no body needs no type.
    for (path, ct, body) in [
        ("/logs", "application/json; charset=UTF-8", "{}"),
        (
            "/logs/_bulk",
            "application/x-ndjson",
            "{\"index\":{}}\n{\"a\":1}\n",
        ),
        ("/logs/_search", "Application/JSON", "{}"),
    ] {
        let method = if path == "/logs" { "PUT" } else { "POST" };
        let r = send(&node, method, path, &[("content-type", ct)], Some(body)).await;
        assert_eq!(r.status, 200, "{path} {ct}: {}", r.text);
    }
    assert_eq!(get(&node, "/logs/_search").await.status, 200);
    assert_eq!(
        send(&node, "POST", "/logs/_refresh", &[], None)
            .await
            .status,
        200
    );
    // A route with no handler answers as without a body.
    let r = send(
        &node,
        "POST",
        "/_no/_such/_route",
        &[("content-type", "text/plain")],
        Some("x"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    node.stop().await;
}

/// A URL parameter the route does not read is refused as OpenSearch refuses it, naming the
/// known ones it looks like; every parameter OpenSearch's specification lists for the API is
/// known, whether or not sluice acts on it. Through a gateway the upstream refuses what it
/// forwards (the same words).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_unknown_url_parameter_is_refused_with_what_it_looks_like() {
    let node = TestNode::start().await;
    let created = send(&node, "PUT", "/logs", &[], None).await;
    assert_eq!(created.status, 200, "{}", created.text);
    for (method, path, reason) in [
        (
            "GET",
            "/logs/_search?sise=10",
            "request [/logs/_search] contains unrecognized parameter: [sise] -> did you mean [size]?",
        ),
        (
            "GET",
            "/_cat/indices?hlp&bogus=1",
            "request [/_cat/indices] contains unrecognized parameters: [bogus], [hlp] -> did you mean [help]?",
        ),
        (
            "GET",
            "/_cluster/health?wait_for_statu=green",
            "request [/_cluster/health] contains unrecognized parameter: [wait_for_statu] -> did you mean any of [wait_for_status, wait_for_events, wait_for_nodes]?",
        ),
    ] {
        let answer = send(&node, method, path, &[], None).await;
        assert_eq!(answer.status, 400, "{path}: {}", answer.text);
        let body = answer.json();
        assert_eq!(
            body["error"]["type"], "illegal_argument_exception",
            "{body}"
        );
        assert_eq!(body["error"]["reason"], reason, "{path}");
    }
    // What the specification lists passes, acted on or not.
    for path in [
        "/logs/_search?preference=_local&request_cache=true&typed_keys=true&size=0&pretty",
        "/_cat/indices?v&s=index&bytes=kb&format=json",
        "/_cluster/health?wait_for_status=yellow&timeout=1s&local=true",
        "/logs/_doc/1?routing=a&realtime=false&_source_includes=x",
        "/?human",
    ] {
        let answer = get(&node, path).await;
        assert!(
            matches!(answer.status, 200 | 404),
            "{path}: {} {}",
            answer.status,
            answer.text
        );
        assert!(
            !answer.text.contains("unrecognized"),
            "{path}: {}",
            answer.text
        );
    }
    node.stop().await;
}
