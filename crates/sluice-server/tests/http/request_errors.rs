//! What a node answers a request it cannot take as sent, in OpenSearch's words and JSON: a path
//! parameter with a malformed escape, a body in a type OpenSearch does not read, a head too
//! long, a body announced over `http.max_content_length`, a body framing that cannot be read, a
//! target with no path; a target sent unencoded and a head of many lines, served as OpenSearch
//! serves them; and every error answer rendered pretty when the request asks `?pretty`. Through a gateway
//! (`SLUICE_TEST_BACKEND=upstream`) the same answers come back, from the gateway or relayed
//! from the node behind it.

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::{Raw, TestNode, read_response, read_until_closed, send_raw as send};

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

/// Writes `bytes` on a new connection to `node`.
async fn connect_and_send(node: &TestNode, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(node.addr).await.expect("connected");
    stream.write_all(bytes).await.expect("sent");
    stream
}

/// The next answer on `stream` (after what `buf` holds): its status, whether it says
/// `Connection: close`, and its body as JSON.
async fn next_answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> (u16, bool, Value) {
    let (status, headers, body) = read_response(stream, buf).await;
    let closes = headers
        .iter()
        .any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close"));
    let body = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "{status}: not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, closes, body)
}

/// Asserts the connection is closed, nothing more answered on it.
async fn assert_closed(mut stream: TcpStream, buf: Vec<u8>) {
    let _ = stream.shutdown().await;
    let rest = read_until_closed(&mut stream).await;
    assert!(
        buf.is_empty() && rest.is_empty(),
        "more after the last answer: {}{}",
        String::from_utf8_lossy(&buf),
        String::from_utf8_lossy(&rest)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unencoded_targets_are_served_as_opensearch_serves_them() {
    // curl sends `?q=t:"a+b"` and `?source={…}` as typed; Netty serves them, and so does the
    // node, with the target meaning what it says: hyper once answered a bare 400 and closed.
    let node = TestNode::start().await;
    for (id, t) in [("1", "a b"), ("2", "b a")] {
        let (s, b) = node
            .req("PUT", &format!("/logs/_doc/{id}"), Some(json!({"t": t})))
            .await;
        assert_eq!(s, 201, "{b}");
    }
    node.refresh("logs").await;
    let odd_id = r#"q"<>`{}|\^"#;
    let doc = r#"{"t":"c"}"#;
    let requests = [
        // `+` is a space in a query, as OpenSearch decodes one.
        "GET /logs/_search?q=t:\"a+b\" HTTP/1.1\r\nhost: x\r\n\r\n".to_string(),
        format!(
            "PUT /logs/_doc/{odd_id}?refresh=true HTTP/1.1\r\nhost: x\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{doc}",
            doc.len()
        ),
        format!("GET /logs/_doc/{odd_id} HTTP/1.1\r\nhost: x\r\n\r\n"),
        "GET /logs/_count?source={\"query\":{\"match_phrase\":{\"t\":\"a+b\"}}}\
         &source_content_type=application/json HTTP/1.1\r\nhost: x\r\n\r\n"
            .to_string(),
    ];
    // Pipelined on one connection: each target is read where a request starts.
    let mut sent = requests.concat().into_bytes();
    // Bytes that are not UTF-8 read as replacement characters, as their escape does.
    sent.extend_from_slice(b"GET /\xff/_search HTTP/1.1\r\nhost: x\r\n\r\n");
    let mut stream = connect_and_send(&node, &sent).await;
    let mut buf = Vec::new();
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["hits"]["total"]["value"], 1,
        "the phrase, not two terms: {b}"
    );
    assert_eq!(b["hits"]["hits"][0]["_id"], "1", "{b}");
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["_id"], odd_id, "{b}");
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        (&b["_id"], &b["found"]),
        (&json!(odd_id), &json!(true)),
        "{b}"
    );
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["count"], 1, "{b}");
    let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 404, "{b}");
    assert_eq!(b["error"]["reason"], "no such index [\u{FFFD}]", "{b}");
    assert!(!closes && buf.is_empty());
    // A `#` in the path is part of the id, as OpenSearch reads it (the path runs to the first
    // `?`); in the query it ends the query. It once cut the path: `PUT /logs/_doc/1#x`
    // overwrote document 1, and a stray empty line before a request turned the encoding off.
    let write = format!(
        "\r\nPUT /logs/_doc/1#x?refresh=true#y HTTP/1.1\r\nhost: x\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{doc}\r\n",
        doc.len()
    );
    let sent = format!("{write}GET /logs/_doc/1 HTTP/1.1\r\nhost: x\r\n\r\n");
    let mut stream = connect_and_send(&node, sent.as_bytes()).await;
    let mut buf = Vec::new();
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(
        (&b["_id"], &b["forced_refresh"]),
        (&json!("1#x"), &json!(true)),
        "{b}"
    );
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["_source"],
        json!({"t": "a b"}),
        "document 1 as it was: {b}"
    );
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_headers_over_16kb_get_opensearchs_400_on_every_request() {
    // OpenSearch refuses header lines over `http.max_header_size` with a 400 from its HTTP
    // layer, however long the head and whatever came before it on the connection; hyper
    // answered a head past its own buffer (about 400 KB) a bare 431. So is a request line
    // longer than the node reads (hyper: a bare 414 or 431).
    let node = TestNode::start().await;
    let head = |pad: usize| {
        format!(
            "GET / HTTP/1.1\r\nhost: x\r\nx-big: {}\r\ncontent-length: 2\r\n\r\n{{}}",
            "b".repeat(pad)
        )
    };
    for (earlier, pad) in [(0, 17_000), (0, 500_000), (2, 20_000), (2, 500_000)] {
        let mut sent = "GET / HTTP/1.1\r\nhost: x\r\n\r\n".repeat(earlier);
        sent.push_str(&head(pad));
        // Pipelined behind it: never answered.
        sent.push_str("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
        let mut stream = connect_and_send(&node, sent.as_bytes()).await;
        let mut buf = Vec::new();
        for _ in 0..earlier {
            let (s, _, b) = next_answer(&mut stream, &mut buf).await;
            assert_eq!(s, 200, "{b}");
        }
        let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, 400, "{earlier} before, {pad}: {b}");
        assert_eq!(b["error"]["type"], "too_long_http_header_exception", "{b}");
        assert_eq!(
            b["error"]["reason"], "HTTP header is larger than 16384 bytes.",
            "{b}"
        );
        assert_eq!(b["status"], 400, "{b}");
        assert!(closes, "{earlier} before, {pad}");
        assert_closed(stream, buf).await;
    }
    // A head padded with bare `CR`s counts them, as Netty does: it once was never refused,
    // and one connection made the node hold hundreds of megabytes.
    let flood = format!("GET / HTTP/1.1\r\nhost: x\r\nx-a: b{}", "\r".repeat(40_000));
    let mut stream = connect_and_send(&node, flood.as_bytes()).await;
    let mut buf = Vec::new();
    let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(b["error"]["type"], "too_long_http_header_exception", "{b}");
    assert!(closes);
    assert_closed(stream, buf).await;
    let line = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "l".repeat(70_000));
    let mut stream = connect_and_send(&node, line.as_bytes()).await;
    let mut buf = Vec::new();
    let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(b["error"]["type"], "too_long_http_line_exception", "{b}");
    assert_eq!(
        b["error"]["reason"], "An HTTP line is larger than 65534 bytes.",
        "{b}"
    );
    assert!(closes);
    assert_closed(stream, buf).await;
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_content_length_over_the_limit_is_refused_from_the_head() {
    // Netty's aggregator answers 413 from a head whose `Content-Length` is over
    // `http.max_content_length`; the node waited for the body's bytes (for ever, for a
    // 19-digit length). Now the answer comes from the head alone, the body is never read,
    // and the connection closes once the answer is out, whatever the client sent after. A
    // gateway refuses so the bodies it reads (a search's); one it streams to the upstream
    // (a document's) gets the upstream's answer, relayed, and its connection closes as well.
    let node = TestNode::start_with(&["http.max_content_length=1kb"]).await;
    for (earlier, method, path, length, streamed) in [
        (0, "POST", "/logs/_search", "1025", false),
        (1, "PUT", "/logs/_doc/1", "1025", true),
        (0, "GET", "/", "1000000000000000000", true),
        (1, "POST", "/logs/_count", "9999999999999999999", false),
        (0, "POST", "/_bulk", "2000", true),
    ] {
        let mut sent = "GET / HTTP/1.1\r\nhost: x\r\n\r\n".repeat(earlier);
        sent.push_str(&format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {length}\r\n\r\n{{"
        ));
        let mut stream = connect_and_send(&node, sent.as_bytes()).await;
        let mut buf = Vec::new();
        for _ in 0..earlier {
            let (s, _, b) = next_answer(&mut stream, &mut buf).await;
            assert_eq!(s, 200, "{b}");
        }
        let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, 413, "{method} {path} {length}: {b}");
        assert_eq!(b["error"]["type"], "content_too_long_http_exception", "{b}");
        assert_eq!(
            b["error"]["root_cause"][0]["type"], "content_too_long_http_exception",
            "{b}"
        );
        assert_eq!(b["status"], 413, "{b}");
        // A relayed answer says `close` too: its body was not all read (the gateway's own
        // `Connection: close`, not the upstream's).
        let _ = streamed;
        assert!(closes, "{method} {path} {length}");
        // The client goes on sending its body, and a request after it: no more answers.
        let _ = stream
            .write_all(b"\"a\":1}GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await;
        assert_closed(stream, buf).await;
    }
    // At the limit, the body is read and taken.
    let body = format!("{{\"t\":\"{}\"}}", "x".repeat(1024 - 8));
    assert_eq!(body.len(), 1024);
    let (s, b) = node
        .req(
            "PUT",
            "/logs/_doc/1?refresh=true",
            Some(serde_json::from_str(&body).unwrap()),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_refused_method_or_route_reads_the_body_and_keeps_the_connection() {
    // OpenSearch's aggregator reads a whole request before it dispatches it, so its 405 and
    // its 400 for no handler leave the connection usable. Answered before a body of more than
    // a few kilobytes was read, the node closed the connection after the answer without
    // saying so, and the request pipelined behind it was lost (an outside trial).
    let node = TestNode::start().await;
    let body = format!("{{\"pad\": \"{}\"}}", "p".repeat(100_000));
    for (path, status) in [
        ("/_cat/count", 405),
        ("/_list/wlm_stats", 405),
        ("/nope/_nope", 400),
    ] {
        let sent = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}GET / HTTP/1.1\r\nhost: x\r\n\r\n",
            body.len()
        );
        let mut stream = connect_and_send(&node, sent.as_bytes()).await;
        let mut buf = Vec::new();
        let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, status, "{path}: {b}");
        assert!(!closes, "{path}: the connection stays open");
        let (s, _, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, 200, "{path}: the request behind it is answered: {b}");
    }
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_target_is_read_at_the_path_the_client_named() {
    // OpenSearch's path is the target as sent, up to its `?`: the authority form (`GET
    // host:9200`) names no route, and is answered as a route with no handler. A gateway once
    // forwarded it as `GET /` (200) and a `PUT` as `PUT /` (405), paths the client never
    // named. The absolute form is served by its path on both (RFC 9112 §3.2.2).
    let node = TestNode::start().await;
    let (s, b) = node
        .req("PUT", "/logs/_doc/1?refresh=true", Some(json!({"t": "a"})))
        .await;
    assert_eq!(s, 201, "{b}");
    let sent = "GET 127.0.0.1:9200 HTTP/1.1\r\nhost: x\r\n\r\n\
                PUT 127.0.0.1:9200 HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n\
                GET http://elsewhere:1/logs/_doc/1 HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut stream = connect_and_send(&node, sent.as_bytes()).await;
    let mut buf = Vec::new();
    for method in ["GET", "PUT"] {
        let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, 400, "{method}: {b}");
        assert_eq!(
            b,
            json!({
                "error": format!("no handler found for uri [127.0.0.1:9200] and method [{method}]"),
                "status": 400
            })
        );
        assert!(!closes, "{method}");
    }
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!((&b["_id"], &b["found"]), (&json!("1"), &json!(true)), "{b}");
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_framing_that_cannot_be_read_gets_opensearchs_400_and_a_close() {
    // Netty refuses a `Content-Length` it cannot read with an `IllegalArgumentException`, which
    // OpenSearch answers as a 400 in its JSON; hyper answered a bare 400 with no body. The
    // body's end is unknown, so the connection closes, and the answer says so: the request
    // pipelined behind it is never read. On a route the gateway's lane takes too.
    let node = TestNode::start().await;
    let not_a_number = |v: &str| format!("Content-Length value is not a number: {v}");
    let cases = [
        ("content-length: 9x\r\n", not_a_number("9x")),
        ("content-length: +9\r\n", not_a_number("+9")),
        (
            "content-length: 99999999999999999999\r\n",
            not_a_number("99999999999999999999"),
        ),
        (
            "content-length: 9\r\ncontent-length: 8\r\n",
            "Multiple Content-Length values found: [9, 8]".to_string(),
        ),
        (
            "content-length: 2, 2\r\n",
            "Multiple Content-Length values found: [2, 2]".to_string(),
        ),
        // Netty refuses a length given twice even when the two agree (hyper took it).
        (
            "content-length: 2\r\ncontent-length: 2\r\n",
            "Multiple Content-Length values found: [2, 2]".to_string(),
        ),
        (
            "transfer-encoding: gzip\r\n",
            "Transfer-Encoding [gzip] is not supported: the last transfer coding of a request \
             must be chunked"
                .to_string(),
        ),
    ];
    for path in ["/logs/_search", "/logs/_doc/1"] {
        for (lines, reason) in &cases {
            let sent = format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{lines}\
                 \r\n{{}}GET / HTTP/1.1\r\nhost: x\r\n\r\n"
            );
            let mut stream = connect_and_send(&node, sent.as_bytes()).await;
            let mut buf = Vec::new();
            let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
            assert_eq!(s, 400, "{path} {lines}: {b}");
            assert_eq!(b["error"]["type"], "illegal_argument_exception", "{b}");
            assert_eq!(b["error"]["reason"], json!(reason), "{b}");
            assert_eq!(b["status"], 400, "{b}");
            assert!(closes, "{path} {lines}");
            assert_closed(stream, buf).await;
        }
    }
    // A chunk hyper cannot read is found once the body is read: the answer is the request's
    // (400, the body cannot be read), and says the connection closes, as it then does.
    for path in ["/logs/_search", "/logs/_doc/1"] {
        let sent = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             transfer-encoding: chunked\r\n\r\n1\r\n{{\r\nzz\r\n}}\r\n0\r\n\r\n\
             GET / HTTP/1.1\r\nhost: x\r\n\r\n"
        );
        let mut stream = connect_and_send(&node, sent.as_bytes()).await;
        let mut buf = Vec::new();
        let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, 400, "{path}: {b}");
        assert_eq!(b["error"]["type"], "parsing_exception", "{b}");
        assert!(closes, "{path}");
        assert_closed(stream, buf).await;
    }
    // HTTP/1.0 has no transfer codings (RFC 9112 §6.1).
    let sent = "POST /logs/_doc/1 HTTP/1.0\r\ncontent-type: application/json\r\n\
                transfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    let mut stream = connect_and_send(&node, sent.as_bytes()).await;
    let mut buf = Vec::new();
    let (s, closes, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(
        b["error"]["reason"], "Transfer-Encoding is not allowed on an HTTP/1.0 request",
        "{b}"
    );
    assert!(closes);
    assert_closed(stream, buf).await;
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_more_than_100_header_lines_within_16kb_are_served() {
    // OpenSearch has no limit on the number of header lines below its 16 KB; hyper refused a
    // head of more than 100 with a bare 431 (and so did a gateway's upstream, for a head the
    // gateway's `X-Opaque-Id` took to 101). Every line reaches the request: the id sent last
    // is echoed.
    let node = TestNode::start().await;
    let (s, b) = node
        .req("PUT", "/logs/_doc/1?refresh=true", Some(json!({"t": "a"})))
        .await;
    assert_eq!(s, 201, "{b}");
    for (lines, request) in [
        (101, "GET /logs/_count"),
        (150, "GET /"),
        // About 13 KB of lines, the most a usual client never sends.
        (1_500, "GET /logs/_search"),
        (150, "GET /logs/_doc/1"),
    ] {
        let pad: String = (0..lines).map(|i| format!("h{i}:v\r\n")).collect();
        let sent = format!(
            "{request} HTTP/1.1\r\nhost: x\r\n{pad}x-opaque-id: last-{lines}\r\n\r\n\
             GET /_cat/count/logs HTTP/1.1\r\nhost: x\r\naccept: application/json\r\n\r\n"
        );
        let mut stream = connect_and_send(&node, sent.as_bytes()).await;
        let mut buf = Vec::new();
        let (status, headers, body) = read_response(&mut stream, &mut buf).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "{request} with {lines} lines: {text}");
        let echoed = headers
            .iter()
            .find(|(k, _)| k == "x-opaque-id")
            .map(|(_, v)| v.as_str());
        assert_eq!(echoed, Some(format!("last-{lines}").as_str()), "{request}");
        // The connection goes on.
        let (s, _, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, 200, "{b}");
        assert_eq!(b[0]["count"], "1", "{b}");
    }
    node.assert_alive().await;
    node.stop().await;
}

/// Reads an interim answer's head off `stream` (after what `buf` holds): its status line.
async fn interim_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> String {
    use tokio::io::AsyncReadExt;
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 1024];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an interim answer within 10 s")
            .expect("the connection stays up");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(buf));
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    buf.drain(..end + 4);
    head
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_expectations_are_answered_as_netty_answers_them() {
    let node = TestNode::start().await;
    // `Expect: 100-continue`: a `100 Continue`, and once the body came, the request's answer
    // (through a gateway, forwarded and answered without a stall).
    for (method, path, body, status) in [
        ("PUT", "/logs/_doc/1?refresh=true", r#"{"t":"a"}"#, 201),
        (
            "POST",
            "/logs/_search",
            r#"{"query":{"match_all":{}}}"#,
            200,
        ),
        ("POST", "/logs/_count", r#"{"query":{"match_all":{}}}"#, 200),
    ] {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nexpect: 100-continue\r\n\r\n",
            body.len()
        );
        let mut stream = connect_and_send(&node, head.as_bytes()).await;
        let mut buf = Vec::new();
        let interim = interim_head(&mut stream, &mut buf).await;
        assert!(interim.starts_with("HTTP/1.1 100 "), "{path}: {interim}");
        stream.write_all(body.as_bytes()).await.expect("sent");
        let (s, _, b) = next_answer(&mut stream, &mut buf).await;
        assert_eq!(s, status, "{path}: {b}");
    }
    // An expectation Netty does not know: 417 with no body, the request not run; the
    // connection serves the next request.
    let sent = "PUT /logs/_doc/2?refresh=true HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 2\r\nexpect: foo\r\n\r\n{}\
                GET /logs/_doc/2 HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut stream = connect_and_send(&node, sent.as_bytes()).await;
    let mut buf = Vec::new();
    let (s, _, body) = read_response(&mut stream, &mut buf).await;
    assert_eq!(s, 417, "{}", String::from_utf8_lossy(&body));
    assert!(body.is_empty(), "{}", String::from_utf8_lossy(&body));
    let (s, _, b) = next_answer(&mut stream, &mut buf).await;
    assert_eq!(s, 404, "the document was not written: {b}");
    // So is a search (a gateway's lane hands a request with an `Expect` to the general path).
    let sent = "POST /logs/_search HTTP/1.1\r\nhost: x\r\nexpect: 100-Continue, foo\r\n\r\n";
    let mut stream = connect_and_send(&node, sent.as_bytes()).await;
    let (s, _, body) = read_response(&mut stream, &mut Vec::new()).await;
    assert_eq!(s, 417, "{}", String::from_utf8_lossy(&body));
    // HTTP/1.0 has no expectations (Netty ignores the header there).
    let sent = "PUT /logs/_doc/3?refresh=true HTTP/1.0\r\ncontent-type: application/json\r\n\
                content-length: 2\r\nexpect: foo\r\n\r\n{}";
    let mut stream = connect_and_send(&node, sent.as_bytes()).await;
    let (s, _, b) = next_answer(&mut stream, &mut Vec::new()).await;
    assert_eq!(s, 201, "{b}");
}
