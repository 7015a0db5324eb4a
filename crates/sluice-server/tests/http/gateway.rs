//! Gateway mode (`backend.type: upstream`) on its own: pass-through, failures of the upstream
//! (slow, hanging, resetting, 5xx, not HTTP), round-robin past a refused host, `_msearch` split
//! and merge, cancellation reaching the upstream, identity forwarding, resource limits and
//! streaming with bounded memory (a `_bulk` of a user allowed everywhere too).
//!
//! The suites of the data and search APIs and of workload management run a second time
//! through a gateway with `SLUICE_TEST_BACKEND=upstream` (see `common`); this module tests
//! what only a gateway does, against an embedded node or a fake upstream built here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, Reply, TestNode, read_response};

use crate::common::ADMIN;

mod elasticsearch;
mod goaway;
mod pause;
mod search_apis;

/// A request a fake upstream received.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    uri: String,
    headers: axum::http::HeaderMap,
    body: Bytes,
}

type Answer = Arc<dyn Fn(Received) -> futures::future::BoxFuture<'static, Response> + Send + Sync>;

/// An HTTP upstream made of one handler, recording what it receives.
struct Fake {
    base: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    /// The requests received on paths containing `part`.
    fn received_on(&self, part: &str) -> Vec<Received> {
        self.received
            .lock()
            .iter()
            .filter(|r| r.uri.contains(part))
            .cloned()
            .collect()
    }

    /// Waits until a request on a path containing `part` arrived (a held search reached the
    /// upstream).
    async fn wait_received(&self, part: &str) {
        common::wait_until(
            &format!("a request on [{part}] reaching the upstream"),
            || !self.received_on(part).is_empty(),
            || {
                format!(
                    "received {:?}",
                    self.received
                        .lock()
                        .iter()
                        .map(|r| r.uri.clone())
                        .collect::<Vec<_>>()
                )
            },
        )
        .await;
    }
}

/// What an OpenSearch-like upstream answers to `GET /`.
fn root_answer() -> Response {
    axum::Json(json!({"cluster_name": "fake", "version": {"number": "2.19.0", "distribution": "opensearch"}}))
        .into_response()
}

async fn fake(answer: Answer) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    fake_on(listener, answer)
}

/// [`fake`] on `listener`.
fn fake_on(listener: tokio::net::TcpListener, answer: Answer) -> Fake {
    serve_fake(listener, answer, true)
}

/// A fake upstream whose `answer` answers `GET /` too.
async fn fake_answering_root(answer: Answer) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_fake(listener, answer, false)
}

/// [`fake_on`], answering `GET /` as OpenSearch does when `root`, else by `answer`.
fn serve_fake(listener: tokio::net::TcpListener, answer: Answer, root: bool) -> Fake {
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let rec = received.clone();
    let app = axum::Router::new().fallback(move |req: Request| {
        let (rec, answer) = (rec.clone(), answer.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_default();
            let r = Received {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                headers: parts.headers,
                body,
            };
            rec.lock().push(r.clone());
            if root && r.uri == "/" {
                return root_answer();
            }
            answer(r).await
        }
    });
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Fake {
        base,
        received,
        task,
    }
}

/// How a raw TCP upstream misbehaves after reading a request's head.
#[derive(Clone, Copy)]
enum Raw {
    /// Answers bytes that are not HTTP.
    Garbage,
    /// Resets the connection.
    Reset,
    /// Closes its side of the connection (half-closed) without answering.
    HalfClose,
    /// Never answers.
    Hang,
    /// Answers 200 with the reason phrase `Fine`, keeping the connection.
    Reason,
    /// Answers 200 with a header of this many bytes, keeping the connection.
    LongHeader(usize),
    /// Answers 503 "OpenSearch Security not initialized." to everything, `GET /` included,
    /// keeping the connection (a cluster still starting).
    Unavailable,
    /// Answers 200 [`RAW_BODY`] with its head's lines ending in a bare LF (which httparse,
    /// and so hyper, accept), keeping the connection.
    BareLf,
    /// Answers 200 [`RAW_BODY`] in chunks with a wrong `Content-Length` beside its
    /// `Transfer-Encoding: chunked` (RFC 9112 §6.3: the encoding wins), keeping the
    /// connection.
    LengthAndChunks,
    /// Answers `HTTP/1.0 200` [`RAW_BODY`] with no length, the body ended by closing the
    /// connection (an HTTP/1.0 proxy or appliance in front of a cluster).
    CloseDelimited,
    /// Answers a connection's first request 200 after [`SLOW_FIRST`], keeping the connection,
    /// and never its next one.
    SlowOnceThenHang,
}

/// How long [`Raw::SlowOnceThenHang`] takes over its first answer.
const SLOW_FIRST: Duration = Duration::from_millis(300);

/// The body of [`Raw::BareLf`]'s and [`Raw::LengthAndChunks`]'s answers.
const RAW_BODY: &str = r#"{"took":1,"hits":{"total":{"value":0},"hits":[]}}"#;

async fn raw_upstream(how: Raw) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                match how {
                    Raw::Reason
                    | Raw::LongHeader(_)
                    | Raw::Unavailable
                    | Raw::BareLf
                    | Raw::LengthAndChunks => {
                        let answer = match how {
                            Raw::BareLf => format!(
                                "HTTP/1.1 200 OK\ncontent-type: application/json\n\
                                 content-length: {}\n\n{RAW_BODY}",
                                RAW_BODY.len()
                            ),
                            Raw::LengthAndChunks => format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                 content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n\
                                 {:x}\r\n{RAW_BODY}\r\n0\r\n\r\n",
                                RAW_BODY.len()
                            ),
                            Raw::LongHeader(n) => format!(
                                "HTTP/1.1 200 OK\r\nx-long: {}\r\ncontent-length: 2\r\n\r\n{{}}",
                                "a".repeat(n)
                            ),
                            Raw::Unavailable => {
                                let body = "OpenSearch Security not initialized.";
                                format!(
                                    "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n{body}",
                                    body.len()
                                )
                            }
                            _ => "HTTP/1.1 200 Fine\r\ncontent-length: 2\r\n\r\n{}".to_string(),
                        };
                        // Every request on the connection (bodiless ones: the gateway's
                        // `GET /` and the test's searches) gets the answer.
                        loop {
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                            seen.clear();
                            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                                match stream.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                                }
                            }
                        }
                    }
                    Raw::CloseDelimited => {
                        let answer = format!(
                            "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{RAW_BODY}"
                        );
                        let _ = stream.write_all(answer.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    }
                    Raw::Garbage => {
                        let _ = stream
                            .write_all(b"SSH-2.0-not-http\r\n\r\n\x00\x01\x02")
                            .await;
                    }
                    Raw::Reset => {
                        let _ = stream.set_zero_linger();
                        drop(stream);
                    }
                    Raw::HalfClose => {
                        let _ = stream.shutdown().await;
                        // Keeps reading until the gateway gives up on the connection.
                        while let Ok(n) = stream.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                        }
                    }
                    Raw::Hang => {
                        let _keep = stream;
                        std::future::pending::<()>().await;
                    }
                    Raw::SlowOnceThenHang => {
                        tokio::time::sleep(SLOW_FIRST).await;
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                        if stream.write_all(answer.as_bytes()).await.is_ok() {
                            std::future::pending::<()>().await;
                        }
                    }
                }
            });
        }
    });
    (base, task)
}

/// A gateway in front of `hosts`, with the in-flight measure (fakes report no usage), short
/// timeouts, and `extra`.
async fn gateway(hosts: &str, extra: &[&str]) -> TestNode {
    let hosts = format!("backend.upstream.hosts={hosts}");
    let mut settings = vec![
        "backend.type=upstream",
        hosts.as_str(),
        "backend.upstream.search_threads=4",
        "backend.upstream.request_timeout=500ms",
        "backend.upstream.connect_timeout=500ms",
    ];
    settings.extend_from_slice(extra);
    TestNode::start_plain(&settings).await
}

/// No permit and no task left on the gateway: every request settled its ticket.
fn assert_nothing_held(gw: &TestNode) {
    assert_eq!(gw.state.workload.permits.num_buckets(), 0);
    assert!(gw.state.tasks.list().is_empty());
}

/// `_wlm/stats` of DEFAULT on the only node.
async fn default_stats(node: &TestNode) -> Value {
    let (s, b) = node.req("GET", "/_wlm/stats", None).await;
    assert_eq!(s, 200, "{b}");
    b.as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")
        .map(|(_, n)| n["workload_groups"]["DEFAULT_WORKLOAD_GROUP"].clone())
        .expect("a node")
}

fn answer_with(f: impl Fn(Received) -> Response + Send + Sync + 'static) -> Answer {
    let f = Arc::new(f);
    Arc::new(move |r| {
        let f = f.clone();
        Box::pin(async move { f(r) })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_pass_through_keeps_method_path_query_headers_and_body() {
    let up = fake(answer_with(|r| {
        let mut resp = (
            axum::http::StatusCode::IM_A_TEAPOT,
            [("x-upstream", "yes")],
            format!(
                "{} {} {}",
                r.method,
                r.uri,
                String::from_utf8_lossy(&r.body)
            ),
        )
            .into_response();
        resp.headers_mut()
            .insert("content-type", "text/plain".parse().unwrap());
        resp
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    let resp = gw
        .client
        .patch(gw.url("/some/_unknown_api?x=1&y=%20z"))
        .header("x-custom", "kept")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "dropped")
        .header("workloadGroupId", "not-for-upstream")
        .body("hello")
        .send()
        .await
        .unwrap();
    let reply = Reply::of(resp).await;
    assert_eq!(reply.status, 418);
    assert_eq!(reply.header_values("x-upstream"), vec!["yes"]);
    assert_eq!(
        reply.body,
        Value::String("PATCH /some/_unknown_api?x=1&y=%20z hello".into())
    );
    let got = up.received_on("_unknown_api");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["x-custom"], "kept");
    assert!(got[0].headers.get("x-hop").is_none());
    assert!(got[0].headers.get("workloadgroupid").is_none());
    // sluice's own routes are answered by sluice.
    let (s, b) = gw.req("GET", "/_wlm/workload_group", None).await;
    assert_eq!(s, 200, "{b}");
    assert!(up.received_on("_wlm").is_empty());
    // The metrics name what passed through as forwarded, sluice's own routes by pattern.
    let text = gw.req("GET", "/_prometheus/metrics", None).await.1;
    let text = text.as_str().unwrap_or_default();
    let series = |method: &str, route: &str| {
        text.lines().any(|l| {
            l.starts_with("sluice_http_requests_total{")
                && l.contains(&format!("method=\"{method}\""))
                && l.contains(&format!("route=\"{route}\""))
        })
    };
    assert!(series("PATCH", "forwarded"), "{text}");
    assert!(series("GET", "/_wlm/workload_group"), "{text}");
    assert!(!text.contains("route=\"unmatched\""), "{text}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_upstream_errors_pass_through_unchanged_and_count_as_failures() {
    let up = fake(answer_with(|_| {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            [("x-upstream", "yes"), ("content-type", "application/json")],
            r#"{"error":{"type":"cluster_block_exception","reason":"upstream's own"},"status":503}"#,
        )
            .into_response()
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    for path in ["/logs/_search", "/logs/_doc/1"] {
        let r = gw.req_with("GET", path, None, &[]).await;
        assert_eq!(r.status, 503, "{path}: {}", r.body);
        assert_eq!(r.body["error"]["reason"], "upstream's own");
        assert_eq!(r.header_values("x-upstream"), vec!["yes"]);
    }
    let stats = default_stats(&gw).await;
    assert_eq!(stats["total_completions"], 1, "{stats}");
    assert_eq!(stats["failures"], 1, "{stats}");
    gw.stop().await;
}

/// An upstream's answers pass through as it wrote them, whatever `?pretty` asks (the gateway
/// renders only its own errors pretty), and a body the gateway forwards reaches the upstream
/// whatever its `Content-Type` (the upstream judges it): on the lane, on the general path, and
/// for routes the gateway only forwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_relayed_answers_and_forwarded_bodies_pass_through_whatever_pretty_and_type() {
    const COMPACT: &str = r#"{"error":{"type":"upstream_own","reason":"x"},"status":400}"#;
    let up = fake(answer_with(|_| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            [("content-type", "application/json; charset=UTF-8")],
            COMPACT,
        )
            .into_response()
    }))
    .await;
    for lane in ["true", "false"] {
        let fast_lane = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&up.base, &[&fast_lane]).await;
        for (method, path) in [
            ("GET", "/logs/_search?pretty"),
            ("POST", "/logs/_count?pretty=true"),
            ("GET", "/some/_thing?pretty"),
            ("PUT", "/logs?pretty"),
        ] {
            let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let resp = gw
                .client
                .request(m, gw.url(path))
                .header("content-type", "text/plain")
                .body("not json at all")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 400, "lane {lane}: {method} {path}");
            let text = resp.text().await.unwrap();
            assert_eq!(text, COMPACT, "lane {lane}: {method} {path}");
            let received = up.received_on(path.split('?').next().unwrap());
            let last = received.last().expect("forwarded");
            assert_eq!(
                last.headers["content-type"], "text/plain",
                "lane {lane}: {path}"
            );
            assert_eq!(&last.body[..], b"not json at all", "lane {lane}: {path}");
        }
        // The gateway's own error, on the same request path, is pretty.
        let r = gw
            .client
            .get(gw.url("/logs/_search?pretty"))
            .header("workloadGroupId", "a")
            .header("workloadGroupId", "b")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "lane {lane}");
        let text = r.text().await.unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            text,
            serde_json::to_string_pretty(&v).unwrap(),
            "lane {lane}"
        );
        assert_eq!(
            v,
            json!({"error": "multiple values for single-valued header [workloadGroupId].", "status": 400}),
            "lane {lane}"
        );
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_garbage_reset_half_close_and_hang_fail_that_request_only_with_502_or_504() {
    for (how, status, ty) in [
        (Raw::Garbage, 502, "upstream_exception"),
        (Raw::Reset, 502, "upstream_exception"),
        (Raw::HalfClose, 502, "upstream_exception"),
        (Raw::Hang, 504, "upstream_timeout_exception"),
    ] {
        let (base, task) = raw_upstream(how).await;
        // A search that timed out, or whose exchange broke off, is cancelled upstream, and
        // its slot held while the upstream may run it: an upstream that hangs or answers
        // garbage cannot say, so until the bound.
        let gw = gateway(&base, &["backend.upstream.cancel_wait_timeout=1s"]).await;
        let host = base.trim_start_matches("http://");
        for path in ["/logs/_search", "/logs/_doc/1"] {
            let resp = gw.req("GET", path, None).await;
            common::assert_error(&resp, status, ty);
            let reason = resp.1["error"]["reason"].as_str().unwrap();
            assert!(reason.contains(host), "{reason}");
        }
        // Exact stats, no permit or task left behind, and the gateway still serves.
        wait_nothing_held(&gw).await;
        let stats = default_stats(&gw).await;
        assert_eq!(stats["total_completions"], 1, "{stats}");
        assert_eq!(stats["failures"], 1, "{stats}");
        assert_eq!(stats["executing"], 0, "{stats}");
        let (s, _) = gw.req("GET", "/_wlm/workload_group", None).await;
        assert_eq!(s, 200);
        gw.stop().await;
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_many_lane_searches_past_their_request_timeout_each_get_their_504() {
    // Each lane thread holds its exchanges' deadlines in one list, fired by one timer task
    // (`deadline::lane`). Many searches at once, on connections spread over the lane threads,
    // to an upstream that never answers: each gets its 504, none before its deadline, under a
    // `request_timeout` nearer than the timer's 1 s look (the timer re-armed for it, LD2) and
    // one past it; the lane took every one, and nothing is held after.
    const SEARCHES: usize = 48;
    for timeout in ["300ms", "1500ms"] {
        let (base, task) = raw_upstream(Raw::Hang).await;
        let timeout_setting = format!("backend.upstream.request_timeout={timeout}");
        let gw = gateway(
            &base,
            &[
                timeout_setting.as_str(),
                "backend.upstream.cancel_wait_timeout=200ms",
            ],
        )
        .await;
        let bound = match timeout {
            "300ms" => Duration::from_millis(300),
            _ => Duration::from_millis(1500),
        };
        let addr = gw.base.trim_start_matches("http://").to_string();
        let (lane_before, _, _) = lane_counts(&gw).await;
        let searches = (0..SEARCHES).map(|_| {
            let addr = addr.clone();
            async move {
                let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
                let mut buf = Vec::new();
                let started = Instant::now();
                stream
                    .write_all(b"GET /logs/_search HTTP/1.1\r\nhost: x\r\n\r\n")
                    .await
                    .unwrap();
                let (status, _, body) = read_response(&mut stream, &mut buf).await;
                (status, body, started.elapsed())
            }
        });
        // A liveness bound, not a timing: a deadline never fired would hang the test.
        let answers =
            tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(searches))
                .await
                .expect("every search answered");
        for (status, body, took) in answers {
            let body: Value = serde_json::from_slice(&body).unwrap();
            common::assert_error(&(status, body), 504, "upstream_timeout_exception");
            assert!(
                took >= bound,
                "a 504 {took:?} in, before its {timeout} deadline"
            );
        }
        let (lane_after, _, _) = lane_counts(&gw).await;
        assert_eq!(
            lane_after - lane_before,
            SEARCHES as u64,
            "every search on the lane"
        );
        wait_nothing_held(&gw).await;
        gw.stop().await;
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_search_on_a_reused_connection_gets_its_own_request_timeout() {
    // Each exchange has a deadline of its own, `request_timeout` after it started, whatever
    // connection it goes out on. The first search's answer comes SLOW_FIRST after it went
    // out; the second goes out on that connection, from the pool (the client's connection, and
    // so its lane thread, is the same, R5), and the upstream never answers it: its 504 comes
    // `request_timeout` (1 s) after it started — not at the first's deadline, 0.7 s in, and
    // not never. (A timer kept with the connection and not moved to each exchange's deadline
    // fails it so: BENCHMARKS.md "One timer a connection (tried, not kept)".)
    let (base, task) = raw_upstream(Raw::SlowOnceThenHang).await;
    let hosts = format!("backend.upstream.hosts={base}");
    let settings = [
        "backend.type=upstream",
        hosts.as_str(),
        "backend.upstream.search_threads=4",
        "backend.upstream.request_timeout=1s",
        "backend.upstream.cancel_wait_timeout=1s",
    ];
    let gw = TestNode::start_plain(&settings).await;
    // One client connection for all the searches: its lane thread's pool is where the
    // upstream connection goes back (R5); a client's pool of several could send the second
    // search from another thread, to a new upstream connection.
    let addr = gw.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut buf = Vec::new();
    let search = b"GET /logs/_search HTTP/1.1\r\nhost: x\r\n\r\n";
    stream.write_all(search).await.unwrap();
    let (status, _, body) = read_response(&mut stream, &mut buf).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let started = Instant::now();
    stream.write_all(search).await.unwrap();
    let (status, _, body) = read_response(&mut stream, &mut buf).await;
    let took = started.elapsed();
    let body: Value = serde_json::from_slice(&body).unwrap();
    common::assert_error(&(status, body), 504, "upstream_timeout_exception");
    assert!(
        took >= Duration::from_secs(1),
        "a 504 {took:?} after the search started, before its request_timeout"
    );
    // The connection that timed out was closed (R3): the next search opens a new one.
    stream.write_all(search).await.unwrap();
    let (status, _, body) = read_response(&mut stream, &mut buf).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    gw.stop().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_refused_host_answers_502_naming_it_and_is_skipped_for_the_others() {
    let gw = gateway("http://127.0.0.1:1", &[]).await;
    let resp = gw.req("GET", "/logs/_search", None).await;
    common::assert_error(&resp, 502, "upstream_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("[http://127.0.0.1:1]") && reason.contains("refused"),
        "{reason}"
    );
    gw.stop().await;

    let up = fake(answer_with(|_| {
        axum::Json(json!({"count": 1})).into_response()
    }))
    .await;
    let gw = gateway(&format!("http://127.0.0.1:1,{}", up.base), &[]).await;
    for _ in 0..6 {
        let (s, b) = gw.req("GET", "/logs/_count", None).await;
        assert_eq!(s, 200, "{b}");
        let (s, b) = gw.req("GET", "/logs/_doc/1", None).await;
        assert_eq!(s, 200, "{b}");
    }
    assert_eq!(up.received_on("_count").len(), 6);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_write_whose_host_refuses_the_connection_goes_to_the_next_host() {
    // Two hosts answering; then the first stops listening and closes its connections, so
    // the next request the round-robin gives it is refused a connection. Nothing of a write
    // was sent there, its streamed body not yet read from the client: every write reaches the
    // other host, body and all (`client.rs` C8), where one once got a 502.
    let (closing, close) = closable_upstream().await;
    let up = fake(answer_with(|_| {
        axum::Json(json!({"result": "created"})).into_response()
    }))
    .await;
    let gw = gateway(&format!("{closing},{}", up.base), &[]).await;
    close().await;
    for i in 0..4 {
        let (s, b) = gw
            .req("PUT", &format!("/logs/_doc/{i}"), Some(json!({"n": i})))
            .await;
        assert_eq!(s, 200, "PUT {i}: {b}");
    }
    let writes = up.received_on("/logs/_doc/");
    assert_eq!(writes.len(), 4, "{writes:?}");
    for (i, w) in writes.iter().enumerate() {
        assert_eq!(w.method, "PUT");
        let body: Value = serde_json::from_slice(&w.body).unwrap();
        assert_eq!(body, json!({"n": i}));
    }
    gw.stop().await;
}

/// An upstream answering every request 200 `{}` until the future of the function it comes
/// with is awaited, which stops its listening and closes its connections (a node going down:
/// connections to it are refused from then on).
async fn closable_upstream() -> (
    String,
    impl FnOnce() -> futures::future::BoxFuture<'static, ()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
    let conns = tasks.clone();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let conn = tokio::spawn(async move {
                let mut buf = Vec::new();
                while read_request(&mut stream, &mut buf).await.is_some() {
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                  content-length: 2\r\n\r\n{}";
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
            conns.lock().push(conn);
        }
    });
    tasks.lock().push(accept);
    (base, move || {
        Box::pin(async move {
            let tasks: Vec<_> = tasks.lock().drain(..).collect();
            for task in tasks {
                task.abort();
                // Done once the task was dropped, its socket with it.
                let _ = task.await;
            }
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_gateway_starts_while_its_upstream_is_down_and_serves_it_once_back() {
    // A port nothing listens on, for now.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // No backend.upstream.search_threads: how limits measure searches depends on what the
    // upstream is, which it cannot say while down.
    let gw = TestNode::start_plain(&[
        "backend.type=upstream",
        &format!("backend.upstream.hosts=http://{addr}"),
        "backend.upstream.connect_timeout=500ms",
    ])
    .await;
    let upstream = gw.state.upstream.clone().unwrap();
    assert!(upstream.measure().is_none());
    let resp = gw.req("GET", "/logs/_search", None).await;
    common::assert_error(&resp, 502, "upstream_exception");
    // The upstream (OpenSearch, which reports its tasks' usage) comes back on that port.
    let up = fake_on(
        tokio::net::TcpListener::bind(addr).await.unwrap(),
        answer_with(|_| axum::Json(json!({"count": 1})).into_response()),
    );
    common::wait_until(
        "the gateway deciding how it measures searches",
        || {
            matches!(
                upstream.measure(),
                Some(sluice_server::backend::upstream::limits::Measure::Reported)
            )
        },
        || format!("measure {:?}", upstream.measure()),
    )
    .await;
    // Served once the host's back-off from the failure has passed.
    let started = Instant::now();
    loop {
        let (s, b) = gw.req("GET", "/logs/_count", None).await;
        if s == 200 {
            assert_eq!(b["count"], 1, "{b}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{s} {b}");
        tokio::task::yield_now().await;
    }
    assert!(!up.received_on("_count").is_empty());
    gw.stop().await;
    // With the search threads set, the measure does not wait for the upstream.
    let gw = gateway("http://127.0.0.1:1", &[]).await;
    assert!(
        matches!(
            gw.state.upstream.as_ref().unwrap().measure(),
            Some(sluice_server::backend::upstream::limits::Measure::InFlight(m))
                if m.search_threads == 4
        ),
        "{:?}",
        gw.state.upstream.as_ref().unwrap().measure()
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_host_that_answers_late_or_not_in_http_rests_while_the_others_serve() {
    // A host that accepts connections but never answers (or answers something that is not
    // HTTP) once kept its turn, and with the gateway's own calls moving the cursor it got
    // most requests, each failing only after the whole request_timeout.
    let up = fake(answer_with(|_| {
        axum::Json(json!({"count": 1, "status": "green"})).into_response()
    }))
    .await;
    for (how, name) in [(Raw::Hang, "hang"), (Raw::Garbage, "garbage")] {
        let (bad, _task) = raw_upstream(how).await;
        let gw = gateway(&format!("{},{bad}", up.base), &[]).await;
        // The lane's search, then the general path's forwarding.
        for path in ["/logs/_count", "/_cluster/health"] {
            let mut failed = Vec::new();
            let started = std::time::Instant::now();
            for _ in 0..10 {
                let (s, b) = gw.req("GET", path, None).await;
                if s != 200 {
                    failed.push((s, b));
                }
            }
            // The first time the bad host's turn comes, it fails and rests for longer than
            // ten quick requests take; on a loaded machine they may take longer, and the host
            // may have its turn again once each rest (250 ms, doubling) has passed.
            let elapsed = started.elapsed();
            let rests_over = (1..8u32)
                .filter(|k| Duration::from_millis(250) * (2u32.pow(*k) - 1) <= elapsed)
                .count();
            assert!(
                failed.len() <= 2.max(1 + rests_over),
                "{name} {path}: {failed:?} in {elapsed:?}"
            );
        }
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_first_host_that_never_answers_does_not_hold_start_up() {
    // The first host accepts and never answers; the second answers. Start-up's GET / gives
    // each host connect_timeout (500 ms) and asks the next: the gateway serves within
    // seconds, not after the whole request_timeout (60 s here), and from the host that
    // answers. It once waited out request_timeout on the first host and never asked the
    // second.
    let (hung, _task) = raw_upstream(Raw::Hang).await;
    let up = fake(answer_with(|_| {
        axum::Json(json!({"count": 1})).into_response()
    }))
    .await;
    let hosts = format!("backend.upstream.hosts={hung},{}", up.base);
    let settings = [
        "backend.type=upstream",
        hosts.as_str(),
        "backend.upstream.request_timeout=60s",
        "backend.upstream.connect_timeout=500ms",
    ];
    let gw = tokio::time::timeout(Duration::from_secs(30), TestNode::start_plain(&settings))
        .await
        .expect("start-up held by a host that never answers");
    // The second host answered GET /: the upstream's measure is decided (OpenSearch: the
    // usage it reports), not left for later.
    assert!(up.received_on("/").iter().any(|r| r.uri == "/"));
    assert!(gw.state.upstream.as_ref().unwrap().measure().is_some());
    // The hung host rests: a request goes to the other.
    let (s, b) = gw.req("GET", "/logs/_count", None).await;
    assert_eq!(s, 200, "{b}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_host_answering_an_error_at_start_does_not_stop_the_gateway() {
    // A cluster still starting answers 503 to GET /: once that stopped start-up (the gateway
    // took it for an upstream that says nothing), a restart loop under a supervisor.
    let (sick, _task) = raw_upstream(Raw::Unavailable).await;
    let up = fake(answer_with(|_| {
        axum::Json(json!({"count": 1})).into_response()
    }))
    .await;
    for hosts in [format!("{sick},{}", up.base), sick.clone()] {
        let gw = TestNode::start_plain(&[
            "backend.type=upstream",
            &format!("backend.upstream.hosts={hosts}"),
            "backend.upstream.connect_timeout=500ms",
        ])
        .await;
        let upstream = gw.state.upstream.clone().unwrap();
        if hosts == sick {
            // Started: requests get the upstream's answer, the measure waits for a GET / that
            // succeeds.
            let (s, b) = gw.req("GET", "/logs/_count", None).await;
            assert_eq!(s, 503, "{b}");
            assert!(upstream.measure().is_none());
        } else {
            common::wait_until(
                "the gateway deciding how it measures searches from the healthy host",
                || {
                    matches!(
                        upstream.measure(),
                        Some(sluice_server::backend::upstream::limits::Measure::Reported)
                    )
                },
                || format!("measure {:?}", upstream.measure()),
            )
            .await;
        }
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_malformed_chunked_body_is_the_clients_error_on_every_route() {
    let up = fake(answer_with(|_| {
        axum::Json(json!({"count": 1})).into_response()
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    let addr = gw.base.trim_start_matches("http://").to_string();
    // A search the gateway admits and reads whole, and a request it streams to the upstream.
    for path in ["/logs/_count", "/_bulk"] {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             transfer-encoding: chunked\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let (status, _, body) = read_response(&mut stream, &mut buf).await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["type"], "parsing_exception", "{path}: {body}");
        let reason = body["error"]["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("failed to read request body"),
            "{path}: {body}"
        );
    }
    assert_nothing_held(&gw);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_head_the_gateways_lines_take_over_16kb_is_refused_by_the_gateway() {
    // The gateway's `Host` for the upstream and its `X-Opaque-Id` lengthen a head; one the
    // client kept within OpenSearch's 16 KB could reach the upstream over it, and the
    // upstream's refusal was relayed. The gateway counts its own lines in the limit: what it
    // forwards is within 16 KB, and what it would push over is its own 400, naming the
    // limit, on a connection that goes on, or, for a streamed body it did not read, that says
    // it closes. On the lane, on the general path, and streamed.
    let up = fake(answer_with(|_| {
        axum::Json(json!({"count": 1})).into_response()
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    // As the upstream counts a head's lines: every byte but each line's `CRLF`.
    let size = |h: &axum::http::HeaderMap| -> usize {
        h.iter().map(|(k, v)| k.as_str().len() + 2 + v.len()).sum()
    };
    for (i, (method, path, body)) in [
        ("GET", "/logs/_count", ""),
        ("POST", "/_snapshot/r", "{}"),
        ("PUT", "/logs/_doc/1", "{}"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut refused = 0;
        // `host: x` and `x-pad: …`, 7 + 7 bytes besides the pad: the client's lines are
        // `total` bytes, within the limit.
        for total in (16_384 - 300..=16_384).step_by(20).chain([16_384]) {
            let id = format!("p{i}-{total}");
            let sent = format!(
                "{method} {path}?id={id} HTTP/1.1\r\nhost: x\r\nx-pad: {}\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}\
                 GET / HTTP/1.1\r\nhost: x\r\n\r\n",
                "p".repeat(
                    total
                        - 14
                        - "content-type: application/json".len()
                        - "content-length: ".len()
                        - body.len().to_string().len()
                ),
                body.len()
            );
            let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
            stream.write_all(sent.as_bytes()).await.unwrap();
            let mut buf = Vec::new();
            let (status, headers, answer) = read_response(&mut stream, &mut buf).await;
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            let got = up.received_on(&format!("id={id}"));
            let closes = headers
                .iter()
                .any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close"));
            match status {
                200 | 201 => {
                    let got = got.first().unwrap_or_else(|| panic!("{id}: not forwarded"));
                    assert!(size(&got.headers) <= 16_384, "{id}: {}", size(&got.headers));
                }
                400 => {
                    refused += 1;
                    assert!(got.is_empty(), "{id}: forwarded though refused");
                    assert_eq!(
                        answer["error"]["type"], "too_long_http_header_exception",
                        "{id}: {answer}"
                    );
                    assert_eq!(
                        answer["error"]["reason"], "HTTP header is larger than 16384 bytes.",
                        "{answer}"
                    );
                }
                other => panic!("{id}: {other} {answer}"),
            }
            // A streamed body refused before it was read: the answer says the connection
            // ends, and it does (it once did not say so, as an early answer once did not).
            assert_eq!(closes, status == 400 && !body.is_empty(), "{id}: {status}");
            if closes {
                let _ = stream.shutdown().await;
                let rest = common::read_until_closed(&mut stream).await;
                assert!(buf.is_empty() && rest.is_empty(), "{id}: more after close");
            } else {
                // The connection goes on.
                let (status, _, _) = read_response(&mut stream, &mut buf).await;
                assert_eq!(status, 200, "{id}: the request behind it");
            }
        }
        // At the limit, the gateway's own `Host` is longer than the client's.
        assert!(refused > 0, "{path}: none refused");
        assert!(refused < 16, "{path}: {refused} refused");
    }
    gw.stop().await;
}

/// An upstream that answers every request, on keep-alive connections, with a JSON body and
/// nothing else: no `Date`, no `Vary` (as OpenSearch's own HTTP server answers).
async fn bare_upstream() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let (_, _, _) = match read_request(&mut stream, &mut buf).await {
                        Some(r) => r,
                        None => return,
                    };
                    let body = br#"{"took":1,"hits":{"total":{"value":1},"hits":[]}}"#;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=UTF-8\r\n\
                         content-length: {}\r\n\r\n",
                        body.len()
                    );
                    let mut out = head.into_bytes();
                    out.extend_from_slice(body);
                    if stream.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (base, task)
}

/// Reads one request (head and a body framed by its length) from `stream` after what `buf`
/// holds: its head's first line, lowercase header names, body; `None` once the peer closed.
async fn read_request(
    stream: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(String, Vec<String>, Vec<u8>)> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default().to_string();
    let mut names = Vec::new();
    let mut len = 0;
    for line in lines {
        let (k, v) = line.split_once(':').unwrap_or((line, ""));
        let k = k.trim().to_ascii_lowercase();
        if k == "content-length" {
            len = v.trim().parse().unwrap_or(0);
        }
        names.push(k);
    }
    while buf.len() < len {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buf.drain(..len).collect();
    Some((first, names, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lane_answers_carry_the_headers_the_general_path_adds() {
    // The general path adds `Date` (hyper) and `Vary: accept-encoding` (the compression
    // layer) to what it relays and to sluice's own answers; the lane adds the same.
    let (base, _upstream) = bare_upstream().await;
    let requests = [
        // Relayed from the upstream, which sent neither.
        "POST /logs/_search HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
         content-length: 2\r\n\r\n{}",
        // sluice's own answer: a bad parameter.
        "GET /logs/_search?cancel_after_time_interval=xyz HTTP/1.1\r\nhost: gw\r\n\r\n",
    ];
    let mut seen: Vec<Vec<Vec<String>>> = Vec::new();
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&base, &[&setting]).await;
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let mut buf = Vec::new();
        let mut names_of_each = Vec::new();
        for request in requests {
            stream.write_all(request.as_bytes()).await.unwrap();
            let (status, headers, body) = read_response(&mut stream, &mut buf).await;
            let text = String::from_utf8_lossy(&body);
            assert!(
                status == 200 || status == 400,
                "lane {lane}: {status} {text}"
            );
            let get = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            let date = get("date").unwrap_or_else(|| panic!("lane {lane}: no date {headers:?}"));
            assert!(httpdate::parse_http_date(&date).is_ok(), "{date}");
            assert_eq!(
                get("vary").as_deref(),
                Some("accept-encoding"),
                "lane {lane}: {headers:?}"
            );
            let mut names: Vec<String> = headers.into_iter().map(|(k, _)| k).collect();
            names.sort();
            names_of_each.push(names);
        }
        seen.push(names_of_each);
        gw.stop().await;
    }
    assert_eq!(
        seen[0], seen[1],
        "the lane's headers, then the general path's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lane_renders_its_own_answers_as_yaml_when_asked() {
    // sluice's own answer to a search (a bad parameter) as the request names it: YAML by
    // `format` or `Accept`, JSON when `format` says so, on the lane as on the general path.
    let (base, _upstream) = bare_upstream().await;
    let bad = "/logs/_search?cancel_after_time_interval=xyz";
    let requests = [
        (format!("{bad}&format=yaml"), ""),
        (bad.to_string(), "accept: application/yaml\r\n"),
        (format!("{bad}&format=json"), "accept: application/yaml\r\n"),
        (format!("{bad}&pretty"), ""),
    ];
    let mut seen = Vec::new();
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&base, &[&setting]).await;
        let before = lane_counts(&gw).await.0;
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let mut buf = Vec::new();
        let mut bodies = Vec::new();
        for (target, header) in &requests {
            let request = format!("GET {target} HTTP/1.1\r\nhost: gw\r\n{header}\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let (status, headers, body) = read_response(&mut stream, &mut buf).await;
            let text = String::from_utf8(body).unwrap();
            assert_eq!(status, 400, "lane {lane}: {target}: {text}");
            let ty = headers
                .iter()
                .find(|(k, _)| k == "content-type")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let yaml = target.contains("format=yaml") || !target.contains("format");
            let pretty = target.ends_with("&pretty");
            let v: Value = if yaml && !pretty {
                assert_eq!(ty, "application/yaml", "lane {lane}: {target}: {text}");
                assert!(text.starts_with("---\n"), "lane {lane}: {target}: {text}");
                serde_yaml_ng::from_str(&text).unwrap()
            } else {
                assert!(
                    ty.starts_with("application/json"),
                    "lane {lane}: {target}: {ty}"
                );
                assert_eq!(
                    text.contains("\n  \""),
                    pretty,
                    "lane {lane}: {target}: {text}"
                );
                serde_json::from_str(&text).unwrap()
            };
            assert_eq!(v["error"]["type"], "illegal_argument_exception", "{v}");
            bodies.push(text);
        }
        let served = lane_counts(&gw).await.0 - before;
        assert_eq!(served, if lane == "true" { 4 } else { 0 }, "lane {lane}");
        seen.push(bodies);
        gw.stop().await;
    }
    assert_eq!(
        seen[0], seen[1],
        "the lane's answers, then the general path's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lane_and_general_path_word_upstream_failures_alike() {
    // A search on the lane and the same search on the general path (the lane off) get the same
    // status line, and the same 502 with the same reason, from each kind of upstream.
    let mut upstreams = vec![(
        "refused".to_string(),
        "http://127.0.0.1:1".to_string(),
        None,
    )];
    for (name, how) in [
        ("garbage", Raw::Garbage),
        ("reason", Raw::Reason),
        ("long header", Raw::LongHeader(200 * 1024)),
        ("too long header", Raw::LongHeader(500 * 1024)),
    ] {
        let (base, task) = raw_upstream(how).await;
        upstreams.push((name.to_string(), base, Some(task)));
    }
    for (name, base, _task) in &upstreams {
        let mut seen = Vec::new();
        for lane in ["true", "false"] {
            let setting = format!("backend.upstream.fast_lane={lane}");
            let gw = gateway(base, &[&setting]).await;
            let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
            stream
                .write_all(b"GET /logs/_search HTTP/1.1\r\nhost: gw\r\n\r\n")
                .await
                .unwrap();
            let mut buf = Vec::new();
            // The status line, before `read_response` takes the head apart.
            while !buf.windows(2).any(|w| w == b"\r\n") {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "{name}, lane {lane}: closed");
                buf.extend_from_slice(&chunk[..n]);
            }
            let line_end = buf.windows(2).position(|w| w == b"\r\n").unwrap();
            let status_line = String::from_utf8_lossy(&buf[..line_end]).to_string();
            let (status, _, body) = read_response(&mut stream, &mut buf).await;
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            seen.push((status_line, status, body["error"]["reason"].clone()));
            gw.stop().await;
        }
        assert_eq!(
            seen[0], seen[1],
            "{name}: the lane's, then the general path's"
        );
        let (line, status, _) = &seen[0];
        match name.as_str() {
            "reason" => assert_eq!(line, "HTTP/1.1 200 Fine"),
            "long header" => assert_eq!(*status, 200, "{line}"),
            _ => assert_eq!(*status, 502, "{name}: {line}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_odd_but_valid_upstream_heads_are_relayed_whole_and_framed_once() {
    // An answer whose head's lines end with a bare LF, and one with a `Content-Length` beside
    // its chunks: searches on the lane, and requests of the general path (a document read;
    // every request with the lane off), get the whole body, framed one way only, and the
    // client's connection carries the next request.
    for (name, how) in [
        ("bare LF", Raw::BareLf),
        ("length and chunks", Raw::LengthAndChunks),
    ] {
        let (base, _task) = raw_upstream(how).await;
        for lane in ["true", "false"] {
            let setting = format!("backend.upstream.fast_lane={lane}");
            let gw = gateway(&base, &[&setting]).await;
            let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
            let mut buf = Vec::new();
            for path in ["/logs/_search", "/logs/_doc/1", "/logs/_search"] {
                let request = format!("GET {path} HTTP/1.1\r\nhost: gw\r\n\r\n");
                stream.write_all(request.as_bytes()).await.unwrap();
                let (status, headers, body) = read_response(&mut stream, &mut buf).await;
                let what = format!("{name}, lane {lane}, {path}");
                assert_eq!(status, 200, "{what}: {}", String::from_utf8_lossy(&body));
                assert_eq!(String::from_utf8_lossy(&body), RAW_BODY, "{what}");
                let framings = headers
                    .iter()
                    .filter(|(k, _)| k == "content-length" || k == "transfer-encoding")
                    .count();
                assert_eq!(framings, 1, "{what}: {headers:?}");
                assert!(
                    headers
                        .iter()
                        .any(|(k, v)| k == "content-type" && v == "application/json"),
                    "{what}: {headers:?}"
                );
            }
            gw.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_answer_ended_by_the_upstreams_close_ends_on_both_paths() {
    // An HTTP/1.0 upstream answering with no length, its body ended by closing the
    // connection: a search on the lane, a document read and a search with the lane off (the
    // general path) each get the whole body, and the answer ends: framed for the client, or
    // its connection closed after it. The general path once relayed the body and then
    // neither ended it nor closed (an outside trial's curl still waited after 10 minutes).
    let (base, _task) = raw_upstream(Raw::CloseDelimited).await;
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&base, &[&setting]).await;
        for path in ["/logs/_search", "/logs/_doc/1"] {
            let what = format!("lane {lane}, {path}");
            let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nhost: gw\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
                    .await
                    .unwrap_or_else(|_| panic!("{what}: no head within 10 s"))
                    .unwrap();
                assert!(n > 0, "{what}: closed before the head");
                buf.extend_from_slice(&chunk[..n]);
            }
            let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
            let framed =
                head.contains("content-length:") || head.contains("transfer-encoding: chunked");
            let body = if framed {
                let (status, _, body) = read_response(&mut stream, &mut buf).await;
                assert_eq!(status, 200, "{what}");
                body
            } else {
                // Not framed: the body runs to the close, which must come.
                let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                buf.drain(..head_end + 4);
                loop {
                    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
                        .await
                        .unwrap_or_else(|_| {
                            panic!(
                                "{what}: the answer never ended: {:?}",
                                String::from_utf8_lossy(&buf)
                            )
                        })
                        .unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                std::mem::take(&mut buf)
            };
            assert_eq!(String::from_utf8_lossy(&body), RAW_BODY, "{what}");
        }
        gw.stop().await;
    }
}

/// A fake upstream whose searches on `*hang*` wait for `release`, and whose `_msearch` answers
/// one item per item received, naming its index.
async fn msearch_upstream(release: Arc<tokio::sync::Notify>) -> Fake {
    fake(Arc::new(move |r: Received| {
        let release = release.clone();
        Box::pin(async move {
            if r.uri.contains("_msearch") {
                let text = String::from_utf8_lossy(&r.body).to_string();
                let items: Vec<Value> = text
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .step_by(2)
                    .map(|h| {
                        let h: Value = serde_json::from_str(h).unwrap();
                        json!({"status": 200, "hits": {"hits": []}, "from_index": h["index"]})
                    })
                    .collect();
                return axum::Json(json!({"took": 1, "responses": items})).into_response();
            }
            if r.uri.contains("hang") {
                release.notified().await;
            }
            axum::Json(json!({"hits": {"hits": []}})).into_response()
        })
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_msearch_forwards_only_admitted_items_and_merges_in_order() {
    let release = Arc::new(tokio::sync::Notify::new());
    let up = msearch_upstream(release.clone()).await;
    let gw = gateway(&up.base, &["node.memory_budget=1tb"]).await;
    let r = gw
        .req_with(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "enabled"}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let group = gw
        .create_group(json!({"name": "one", "resiliency_mode": "enforced",
                "resource_limits": {"memory": 0.5},
                "throttling": {"attribute": "group", "node_limit": 1}}))
        .await;
    let r = gw
        .req_with(
            "PUT",
            "/_rules/workload_group",
            Some(
                json!({"description": "b", "index_pattern": ["blocked*"], "workload_group": group}),
            ),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The group's one slot is taken by a search the upstream holds.
    let client = gw.client.clone();
    let url = gw.url("/blocked-hang/_search");
    let held =
        tokio::spawn(async move { client.post(url).send().await.map(|r| r.status().as_u16()) });
    up.wait_received("blocked-hang").await;
    let body = common::ndjson(&[
        json!({"index": "a"}),
        json!({"query": {"match_all": {}}}),
        json!({"index": "blocked-2"}),
        json!({}),
        json!({"index": "b"}),
        json!({"timeout": "1s"}),
    ]);
    let (s, b) = gw.raw("POST", "/_msearch", body).await;
    assert_eq!(s, 200, "{b}");
    let responses = b["responses"].as_array().unwrap();
    assert_eq!(responses.len(), 3, "{b}");
    assert_eq!(responses[0]["from_index"], "a", "{b}");
    assert_eq!(responses[1]["status"], 429, "{b}");
    assert_eq!(
        responses[1]["error"]["type"], "rejected_execution_exception",
        "{b}"
    );
    assert_eq!(responses[2]["from_index"], "b", "{b}");
    // Only the admitted items reached the upstream, in order.
    let sent = up.received_on("_msearch");
    assert_eq!(sent.len(), 1);
    let lines: Vec<Value> = String::from_utf8_lossy(&sent[0].body)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0]["index"], "a");
    assert_eq!(lines[2]["index"], "b");
    assert!(
        sent[0].headers["x-opaque-id"]
            .to_str()
            .unwrap()
            .starts_with("sluice:")
    );
    release.notify_waiters();
    assert_eq!(held.await.unwrap().unwrap(), 200);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_streamed_msearch_items_keep_request_order_across_batches() {
    // Every item is answered with about 1 MiB naming its index: past what the gateway holds of
    // an answer, so the first batch's items stream, and the item after the parked one must
    // wait for the second batch.
    let pad = "x".repeat(1 << 20);
    let up = fake(answer_with(move |r| {
        let text = String::from_utf8_lossy(&r.body).to_string();
        let items: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .step_by(2)
            .map(|h| {
                let h: Value = serde_json::from_str(h).unwrap();
                json!({"from_index": h["index"], "pad": pad, "status": 200})
            })
            .collect();
        axum::Json(json!({"took": 1, "responses": items})).into_response()
    }))
    .await;
    let gw = gateway(&up.base, &["node.memory_budget=1tb"]).await;
    let r = gw
        .req_with(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "enabled"}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let group = gw
        .create_group(json!({"name": "one", "resiliency_mode": "enforced",
                "resource_limits": {"memory": 0.5},
                "throttling": {"attribute": "group", "node_limit": 1},
                "queue": {"size_per_bucket": 5}}))
        .await;
    let r = gw
        .req_with(
            "PUT",
            "/_rules/workload_group",
            Some(
                json!({"description": "b", "index_pattern": ["blocked*"], "workload_group": group}),
            ),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // `blocked-c` parks behind `blocked-a` (the group's one slot) and goes out in a second
    // batch once `blocked-a`'s answer streamed by; `free-d`, answered before it, waits.
    let body = common::ndjson(&[
        json!({"index": "blocked-a"}),
        json!({}),
        json!({"index": "free-b"}),
        json!({}),
        json!({"index": "blocked-c"}),
        json!({}),
        json!({"index": "free-d"}),
        json!({}),
    ]);
    let (s, b) = gw.raw("POST", "/_msearch", body).await;
    assert_eq!(s, 200);
    let order: Vec<&Value> = b["responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["from_index"])
        .collect();
    assert_eq!(
        order,
        [
            &json!("blocked-a"),
            &json!("free-b"),
            &json!("blocked-c"),
            &json!("free-d")
        ]
    );
    let sent: Vec<usize> = up
        .received_on("_msearch")
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).lines().count() / 2)
        .collect();
    assert_eq!(sent, [3, 1], "two batches");
    assert_nothing_held(&gw);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_msearch_answer_with_other_than_one_item_per_item_sent_fails_every_item() {
    // The upstream answers one item fewer, then one more, than it was sent.
    let extra = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let more = extra.clone();
    let up = fake(answer_with(move |r| {
        let sent = String::from_utf8_lossy(&r.body)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
            / 2;
        let n = if more.load(std::sync::atomic::Ordering::SeqCst) {
            sent + 1
        } else {
            sent.saturating_sub(1)
        };
        let items: Vec<Value> = (0..n).map(|i| json!({"status": 200, "id": i})).collect();
        axum::Json(json!({"took": 1, "responses": items})).into_response()
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    let body = || {
        common::ndjson(&[
            json!({"index": "a"}),
            json!({}),
            json!({"index": "b"}),
            json!({}),
            json!({"index": "c"}),
            json!({}),
        ])
    };
    for (more, answered) in [(false, 2), (true, 4)] {
        extra.store(more, std::sync::atomic::Ordering::SeqCst);
        let (s, b) = gw.raw("POST", "/_msearch", body()).await;
        assert_eq!(s, 200, "{b}");
        let responses = b["responses"].as_array().unwrap();
        assert_eq!(responses.len(), 3, "{b}");
        // No answer is passed on as another item's.
        for item in responses {
            assert_eq!(item["status"], 502, "{b}");
            assert_eq!(item["error"]["type"], "upstream_exception", "{b}");
            let reason = item["error"]["reason"].as_str().unwrap();
            assert!(
                reason.contains(&format!("has {answered} items for the 3 sent")),
                "{b}"
            );
        }
    }
    assert_nothing_held(&gw);
    gw.stop().await;
}

/// Sends a request as a client that accepts gzip (opensearch-py with `http_compress`, browsers)
/// and reads its answer, decompressed when it came compressed: status, whether it did, body.
async fn gzip_client_req(
    node: &TestNode,
    method: &str,
    path: &str,
    body: Option<(&str, String)>,
    headers: &[(&str, &str)],
) -> (u16, bool, Value) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut rb = node
        .client
        .request(m, node.url(path))
        .header("accept-encoding", "gzip");
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    if let Some((ctype, b)) = body {
        rb = rb.header("content-type", ctype).body(b);
    }
    let resp = rb.send().await.unwrap();
    let status = resp.status().as_u16();
    let gzipped = resp
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v == "gzip");
    let bytes = resp.bytes().await.unwrap();
    let text = if gzipped {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)
            .unwrap();
        out
    } else {
        String::from_utf8_lossy(&bytes).to_string()
    };
    (
        status,
        gzipped,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_answers_the_gateway_reads_are_right_for_clients_that_accept_gzip() {
    // The upstream (an embedded node) gzips its answers for clients that accept it; the
    // gateway must still read the answers it merges, filters or finds a scroll id in.
    let tmp = tempfile::tempdir().unwrap();
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    gw.bulk(
        "/z/_bulk?refresh=true",
        &[
            json!({"index": {"_id": "1"}}),
            json!({"n": 1}),
            json!({"index": {"_id": "2"}}),
            json!({"n": 2}),
        ],
    )
    .await;
    let ndjson = common::ndjson(&[
        json!({"index": "z"}),
        json!({"query": {"match_all": {}}}),
        json!({"index": "z"}),
        json!({"query": {"term": {"n": 2}}}),
    ]);
    let (s, gzipped, b) = gzip_client_req(
        &gw,
        "POST",
        "/_msearch",
        Some(("application/x-ndjson", ndjson)),
        &[],
    )
    .await;
    assert_eq!(s, 200, "{b}");
    // The client still gets its answer compressed.
    assert!(gzipped, "{b}");
    assert_eq!(b["responses"][0]["status"], 200, "{b}");
    assert_eq!(b["responses"][0]["hits"]["total"]["value"], 2, "{b}");
    assert_eq!(b["responses"][1]["hits"]["total"]["value"], 1, "{b}");
    let (s, _, b) = gzip_client_req(&gw, "GET", "/_cluster/settings", None, &[]).await;
    assert_eq!(s, 200, "{b}");
    assert!(b["persistent"].is_object(), "{b}");
    // A scroll opened and continued by such a client stays in its group.
    let default_before = default_stats(&gw).await["total_completions"].clone();
    let group = gw
        .create_group(json!({"name": "zipped", "resiliency_mode": "soft",
                "resource_limits": {"memory": 0.5}}))
        .await;
    let (s, _, b) = gzip_client_req(
        &gw,
        "POST",
        "/z/_search?scroll=1m&size=1",
        Some(("application/json", json!({"sort": ["_doc"]}).to_string())),
        &[("workloadGroupId", &group)],
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let id = b["_scroll_id"].as_str().unwrap().to_string();
    let (s, _, b) = gzip_client_req(
        &gw,
        "POST",
        "/_search/scroll",
        Some((
            "application/json",
            json!({"scroll": "1m", "scroll_id": id}).to_string(),
        )),
        &[],
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["hits"]["hits"].as_array().unwrap().len(), 1, "{b}");
    assert_eq!(
        group_stats(&gw, &group).await["total_completions"],
        2,
        "the continuation was charged elsewhere"
    );
    assert_eq!(
        default_stats(&gw).await["total_completions"],
        default_before
    );
    gw.stop().await;
}

/// The upstream's search tasks whose `X-Opaque-Id` contains `part`.
async fn upstream_searches(upstream: &TestNode, part: &str) -> Vec<Value> {
    let (s, b) = upstream
        .req("GET", "/_tasks?actions=*search*&detailed=true", None)
        .await;
    assert_eq!(s, 200, "{b}");
    b["nodes"]
        .as_object()
        .into_iter()
        .flat_map(|n| n.values())
        .flat_map(|n| n["tasks"].as_object().into_iter().flat_map(|t| t.values()))
        .filter(|t| {
            t["headers"]["X-Opaque-Id"]
                .as_str()
                .is_some_and(|h| h.contains(part))
        })
        .cloned()
        .collect()
}

async fn wait_upstream_search(upstream: &TestNode, part: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = upstream_searches(upstream, part).await.into_iter().next() {
            return t;
        }
        assert!(Instant::now() < deadline, "no upstream search named {part}");
        tokio::task::yield_now().await;
    }
}

/// Waits until the upstream holds no search named `part`; answers how long it took.
async fn wait_upstream_gone(upstream: &TestNode, part: &str) -> Duration {
    let from = Instant::now();
    let deadline = from + Duration::from_secs(5);
    while !upstream_searches(upstream, part).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the upstream still runs the search named {part}"
        );
        tokio::task::yield_now().await;
    }
    from.elapsed()
}

fn spawn_heavy(gw: &TestNode, path: &str, opaque: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let rb = gw
        .client
        .post(gw.url(path))
        .header("content-type", "application/json")
        .header("X-Opaque-Id", opaque)
        .body(common::heavy_query().to_string());
    tokio::spawn(async move {
        let resp = rb.send().await.expect("sent");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    })
}

/// The id and record of the search task the gateway lists (`_tasks?detailed`), the first if
/// several.
async fn gateway_search_task(gw: &TestNode) -> (String, Value) {
    let (s, b) = gw
        .req("GET", "/_tasks?actions=*search&detailed=true", None)
        .await;
    assert_eq!(s, 200, "{b}");
    b["nodes"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|n| n["tasks"].as_object().unwrap().iter())
        .next()
        .map(|(id, t)| (id.clone(), t.clone()))
        .expect("the gateway lists its task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cancellation_reaches_the_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    common::seed_heavy(tmp.path()).await;
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    let upstream = gw.upstream.as_ref().unwrap();

    // 1. `_tasks/{id}/_cancel` on the gateway; the client's X-Opaque-Id is kept and recorded.
    let search = spawn_heavy(&gw, "/heavy/_search", "client-1");
    let up_task = wait_upstream_search(upstream, "client-1;sluice:").await;
    assert!(
        up_task["headers"]["X-Opaque-Id"]
            .as_str()
            .unwrap()
            .starts_with("client-1;sluice:")
    );
    let (id, task) = gateway_search_task(&gw).await;
    assert_eq!(
        task["headers"],
        json!({"X-Opaque-Id": "client-1"}),
        "{task}"
    );
    let (s, b) = gw.req("POST", &format!("/_tasks/{id}/_cancel"), None).await;
    assert_eq!(s, 200, "{b}");
    let (status, body) = search.await.unwrap();
    assert_eq!(status, 500, "{body}");
    assert_eq!(
        body["error"]["root_cause"][0]["type"], "task_cancelled_exception",
        "{body}"
    );
    let took = wait_upstream_gone(upstream, "client-1;sluice:").await;
    eprintln!("cancel API: upstream search gone {took:?} after the gateway's answer");

    // 2. The client disconnects.
    let search = spawn_heavy(&gw, "/heavy/_search", "client-2");
    wait_upstream_search(upstream, "client-2;sluice:").await;
    search.abort();
    let took = wait_upstream_gone(upstream, "client-2;sluice:").await;
    eprintln!("disconnect: upstream search gone after {took:?}");

    // 3. cancel_after_time_interval: forwarded, and enforced by the gateway.
    let search = spawn_heavy(
        &gw,
        "/heavy/_search?cancel_after_time_interval=300ms",
        "client-3",
    );
    let (status, body) = search.await.unwrap();
    assert_eq!(status, 500, "{body}");
    assert_eq!(
        body["error"]["root_cause"][0]["type"], "task_cancelled_exception",
        "{body}"
    );
    wait_upstream_gone(upstream, "client-3;sluice:").await;

    // Each slot and task is given back once the gateway saw the upstream's search end.
    wait_nothing_held(&gw).await;
    let stats = default_stats(&gw).await;
    assert_eq!(stats["total_completions"], 3, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    gw.stop().await;
}

/// A client's `X-Opaque-Id` that is not ASCII is forwarded as the client sent it, before the
/// gateway's own id, as an ASCII one is; the gateway's task shows it as OpenSearch reads it,
/// and cancelling the task still finds the upstream's: on the lane and on the general path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_opaque_id_that_is_not_ascii_reaches_the_upstream_as_sent() {
    // `café` in ISO-8859-1, read as `caf\u{e9}` (each byte one character, as Netty hands
    // header values over).
    let sent = reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap();
    for lane in ["true", "false"] {
        let tmp = tempfile::tempdir().unwrap();
        common::seed_heavy(tmp.path()).await;
        let fast_lane = format!("backend.upstream.fast_lane={lane}");
        let gw = TestNode::start_gateway_on(tmp.path(), &[&fast_lane]).await;
        let upstream = gw.upstream.as_ref().unwrap();
        let rb = gw
            .client
            .post(gw.url("/heavy/_search"))
            .header("content-type", "application/json")
            .header("X-Opaque-Id", sent.clone())
            .body(common::heavy_query().to_string());
        let search = tokio::spawn(async move { rb.send().await.expect("sent") });
        let up_task = wait_upstream_search(upstream, "caf\u{e9};sluice:").await;
        let (id, task) = gateway_search_task(&gw).await;
        assert_eq!(
            task["headers"],
            json!({"X-Opaque-Id": "caf\u{e9}"}),
            "lane {lane}: {task}"
        );
        assert_eq!(
            up_task["headers"]["X-Opaque-Id"],
            format!("caf\u{e9};sluice:{id}"),
            "lane {lane}: {up_task}"
        );
        let (s, b) = gw.req("POST", &format!("/_tasks/{id}/_cancel"), None).await;
        assert_eq!(s, 200, "{b}");
        let resp = search.await.unwrap();
        assert_eq!(resp.status(), 500, "lane {lane}");
        let echoed: Vec<_> = resp.headers().get_all("x-opaque-id").iter().collect();
        assert_eq!(echoed, [&sent], "lane {lane}");
        wait_upstream_gone(upstream, "caf\u{e9};sluice:").await;
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_reported_upstream_usage_is_recorded_on_the_gateways_task() {
    let tmp = tempfile::tempdir().unwrap();
    common::seed_heavy(tmp.path()).await;
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    let upstream = gw.upstream.as_ref().unwrap();
    let search = spawn_heavy(&gw, "/heavy/_search", "usage");
    wait_upstream_search(upstream, "usage;sluice:").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, b) = gw
            .req("GET", "/_tasks?actions=*search&detailed=true", None)
            .await;
        let cpu = b["nodes"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|n| n["tasks"].as_object().unwrap().values())
            .filter_map(|t| t["resource_stats"]["total"]["cpu_time_in_nanos"].as_u64())
            .max()
            .unwrap_or(0);
        if cpu > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway's task never got the upstream's usage: {b}"
        );
        tokio::task::yield_now().await;
    }
    let (s, _) = gw
        .req("POST", "/_tasks/_cancel?actions=*search*", None)
        .await;
    assert_eq!(s, 200);
    search.await.unwrap();
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_in_flight_measure_bounds_a_groups_share_of_upstream_search_threads() {
    let release = Arc::new(tokio::sync::Notify::new());
    let up = msearch_upstream(release.clone()).await;
    // Two search threads upstream: one search in flight is half of the capacity. The held
    // search waits upstream as long as the loop below takes on a loaded machine.
    let gw = gateway(
        &up.base,
        &[
            "backend.upstream.search_threads=2",
            "node.memory_budget=1tb",
            "backend.upstream.request_timeout=60s",
        ],
    )
    .await;
    let r = gw
        .req_with(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "enabled"}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let group = gw
        .create_group(json!({"name": "small", "resiliency_mode": "enforced",
                "resource_limits": {"cpu": 0.2}}))
        .await;
    let client = gw.client.clone();
    let url = gw.url("/hang/_search");
    let g = group.clone();
    let held = tokio::spawn(async move {
        client
            .post(url)
            .header("workloadGroupId", g)
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    // The held search is admitted first: a search of the loop below in flight at the same
    // moment would count against the group and turn the held one away instead.
    up.wait_received("hang").await;
    searches_until_one_is_turned_away_for_cpu(&gw, &group, "").await;
    release.notify_one();
    assert_eq!(held.await.unwrap().unwrap(), 200);
    gw.stop().await;
}

/// How a fake OpenSearch upstream keeps the gateway from measuring its searches.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unmeasured {
    /// It lists the searches with `resource_stats` of zeros, as OpenSearch does with
    /// `task_resource_tracking.enabled: false`.
    NoStats,
    /// It refuses the `_tasks` listing with a 403, as OpenSearch security does a user
    /// without `cluster:monitor/tasks/lists`.
    TasksRefused,
    /// Its `GET /` answers 401 while searches succeed.
    RootRefused,
}

/// A fake OpenSearch upstream that fails the gateway's measure as `how` says, whose
/// `_nodes/thread_pool` says it has two search threads when `threads` (else 403), and whose
/// searches on `*hang*` wait for `release`.
async fn unmeasured_upstream(
    how: Unmeasured,
    threads: bool,
    release: Arc<tokio::sync::Notify>,
) -> Fake {
    let forbidden = |what: &str| {
        let reason = format!("no permissions for [{what}] and User [name=gw]");
        (
            axum::http::StatusCode::FORBIDDEN,
            axum::Json(
                json!({"error": {"type": "security_exception", "reason": reason}, "status": 403}),
            ),
        )
            .into_response()
    };
    // The gateway's searches seen, by their X-Opaque-Id: what `_tasks` lists.
    let searches: Arc<Mutex<Vec<String>>> = Arc::default();
    fake_answering_root(Arc::new(move |r: Received| {
        let (release, searches) = (release.clone(), searches.clone());
        Box::pin(async move {
            if r.uri == "/" {
                if how == Unmeasured::RootRefused {
                    return (
                        axum::http::StatusCode::UNAUTHORIZED,
                        axum::Json(json!({"error": {"type": "security_exception",
                            "reason": "missing authentication credentials for REST request [/]"}, "status": 401})),
                    )
                        .into_response();
                }
                return root_answer();
            }
            if r.uri.starts_with("/_nodes/thread_pool") {
                if !threads {
                    return forbidden("cluster:monitor/nodes/info");
                }
                return axum::Json(json!({"nodes": {"n1": {"thread_pool": {"search": {"size": 2}}}}}))
                    .into_response();
            }
            if r.uri.starts_with("/_tasks") {
                if how == Unmeasured::TasksRefused {
                    return forbidden("cluster:monitor/tasks/lists");
                }
                let zero = json!({"cpu_time_in_nanos": 0, "memory_in_bytes": 0});
                let tasks: serde_json::Map<String, Value> = searches
                    .lock()
                    .iter()
                    .enumerate()
                    .map(|(i, opaque)| {
                        (format!("n1:{i}"), json!({"node": "n1", "id": i,
                            "action": "indices:data/read/search",
                            "running_time_in_nanos": 5_000_000_000u64,
                            "headers": {"X-Opaque-Id": opaque},
                            "resource_stats": {"total": zero, "average": zero, "min": zero, "max": zero,
                                "thread_info": {"thread_executions": 0, "active_threads": 0}}}))
                    })
                    .collect();
                return axum::Json(json!({"nodes": {"n1": {"tasks": tasks}}})).into_response();
            }
            if let Some(opaque) = r.headers.get("x-opaque-id") {
                searches.lock().push(opaque.to_str().unwrap().to_string());
            }
            if r.uri.contains("hang") {
                release.notified().await;
            }
            axum::Json(json!({"hits": {"hits": []}})).into_response()
        })
    }))
    .await
}

/// The `warnings` of group `id` in `_wlm/stats`, joined.
/// Searches in `group` on `gw`, each answered 200, until one is turned away (429) for its cpu:
/// a search held in flight over half the upstream's search threads counts as over the group's
/// share. Panics, naming `what` and the group's stats, if none is turned away within 30 s.
async fn searches_until_one_is_turned_away_for_cpu(gw: &TestNode, group: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = gw
            .req_with("GET", "/other/_search", None, &[("workloadGroupId", group)])
            .await;
        if r.status == 429 {
            let reason = r.body["error"]["reason"].as_str().unwrap_or_default();
            assert!(reason.to_lowercase().contains("cpu"), "{}", r.body);
            return;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            Instant::now() < deadline,
            "{what}: a search in flight over half the upstream's search threads never turned the next away; group stats {}",
            group_stats(gw, group).await
        );
        tokio::task::yield_now().await;
    }
}

async fn group_warnings(node: &TestNode, id: &str) -> String {
    let stats = group_stats(node, id).await;
    stats["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// A gateway whose upstream gives no measure of its searches as `how` says: with the
/// upstream's search threads readable, they stand in (a search in flight is one of two, and
/// turns the next search of a group limited to cpu 0.2 away); without, `_wlm/stats` and the
/// `Warning` of a group written with limits say why the limits have no measure, naming
/// `why`. Before, such limits read 0 forever and said nothing.
async fn limits_act_or_say_why(how: Unmeasured, why: &[&str]) {
    for threads in [true, false] {
        let release = Arc::new(tokio::sync::Notify::new());
        let up = unmeasured_upstream(how, threads, release.clone()).await;
        // No `search_threads`: the gateway measures what the upstream reports.
        let gw = TestNode::start_plain(&[
            "backend.type=upstream",
            &format!("backend.upstream.hosts={}", up.base),
            "backend.upstream.request_timeout=60s",
            "backend.upstream.connect_timeout=500ms",
            "node.memory_budget=1tb",
        ])
        .await;
        let group = enabled_group(
            &gw,
            json!({"name": "small", "resiliency_mode": "enforced", "resource_limits": {"cpu": 0.2}}),
        )
        .await;
        let client = gw.client.clone();
        let url = gw.url("/hang/_search");
        let g = group.clone();
        let held = tokio::spawn(async move {
            client
                .post(url)
                .header("workloadGroupId", g)
                .send()
                .await
                .map(|r| r.status().as_u16())
        });
        up.wait_received("hang").await;
        if threads {
            searches_until_one_is_turned_away_for_cpu(&gw, &group, &format!("{how:?}")).await;
            assert_eq!(
                group_warnings(&gw, &group).await,
                "",
                "{how:?}: measured, by a stand-in"
            );
            let r = gw
                .req_with(
                    "PUT",
                    "/_wlm/workload_group/small",
                    Some(json!({"resource_limits": {"cpu": 0.3}})),
                    &ADMIN,
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            assert!(
                r.header_values("warning").is_empty(),
                "{how:?}: {:?}",
                r.headers
            );
        } else {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let warnings = group_warnings(&gw, &group).await;
                if !warnings.is_empty() {
                    for w in why {
                        assert!(warnings.contains(w), "{how:?}: [{w}] not in {warnings}");
                    }
                    assert!(warnings.contains("neither reject nor cancel"), "{warnings}");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{how:?}: limits without a measure never said so in _wlm/stats"
                );
                tokio::task::yield_now().await;
            }
            let r = gw
                .req_with(
                    "PUT",
                    "/_wlm/workload_group/small",
                    Some(json!({"resource_limits": {"cpu": 0.3}})),
                    &ADMIN,
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            let warnings = r.header_values("warning").join(" | ");
            assert!(
                warnings.contains("[resource_limits] of workload group [small] have no measure"),
                "{how:?}: {warnings}"
            );
            for w in why {
                assert!(warnings.contains(w), "{how:?}: [{w}] not in {warnings}");
            }
        }
        release.notify_one();
        assert_eq!(held.await.unwrap().unwrap(), 200);
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_limits_act_or_say_why_when_the_upstream_lists_searches_without_figures() {
    limits_act_or_say_why(Unmeasured::NoStats, &["task_resource_tracking.enabled"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_limits_act_or_say_why_when_the_upstream_refuses_its_task_listing() {
    limits_act_or_say_why(
        Unmeasured::TasksRefused,
        &["403", "cluster:monitor/tasks/lists"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_limits_act_or_say_why_when_the_upstreams_get_root_keeps_failing() {
    limits_act_or_say_why(Unmeasured::RootRefused, &["GET /", "401"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_refused_task_listing_is_logged_as_an_error_naming_the_permission() {
    // Before, a refused usage poll was logged at DEBUG only: nothing in the default log said
    // the limits read 0.
    let release = Arc::new(tokio::sync::Notify::new());
    let up = unmeasured_upstream(Unmeasured::TasksRefused, false, release.clone()).await;
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("serve");
    for setting in [
        format!("path.data={}", tmp.path().display()),
        "http.port=0".to_string(),
        "transport.port=0".to_string(),
        "logger.format=json".to_string(),
        "backend.type=upstream".to_string(),
        format!("backend.upstream.hosts={}", up.base),
        "backend.upstream.request_timeout=60s".to_string(),
    ] {
        cmd.arg("-E").arg(setting);
    }
    // The node reads SLUICE_* variables as settings, and RUST_LOG would change the filter.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SLUICE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = Child(cmd.spawn().expect("sluice starts"));
    let lines: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = lines.clone();
    let stderr = child.0.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                sink.lock().push(v);
            }
        }
    });
    let message = |v: &Value| v["message"].as_str().unwrap_or_default().to_string();
    let seen = |pred: &dyn Fn(&Value) -> bool| lines.lock().iter().find(|v| pred(v)).cloned();
    let listening = |v: &Value| message(v).starts_with("listening on http://");
    common::wait_until(
        "the gateway serving",
        || seen(&listening).is_some(),
        || format!("{:?}", lines.lock()),
    )
    .await;
    let base = message(&seen(&listening).unwrap())
        .trim_start_matches("listening on ")
        .to_string();
    let client = reqwest::Client::new();
    let r = client
        .put(format!("{base}/_cluster/settings"))
        .json(&json!({"persistent": {"wlm.workload_group.mode": "enabled"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A search in flight: the gateway polls the upstream's tasks for its usage.
    let held = tokio::spawn(client.post(format!("{base}/hang/_search")).send());
    up.wait_received("hang").await;
    let error = |v: &Value| {
        v["level"] == "ERROR"
            && message(v).contains("403")
            && message(v).contains("cluster:monitor/tasks/lists")
            && message(v).contains("neither reject nor cancel")
    };
    common::wait_until(
        "an ERROR naming the refused listing and the permission it needs",
        || seen(&error).is_some(),
        || format!("{:#?}", lines.lock()),
    )
    .await;
    release.notify_one();
    assert_eq!(held.await.unwrap().unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_identity_is_forwarded_as_configured_and_client_trust_headers_are_stripped() {
    let up = fake(answer_with(|_| {
        axum::Json(json!({"ok": true})).into_response()
    }))
    .await;
    // sluice authenticates by its trusted proxy's headers; the upstream learns the user through
    // its own proxy headers, with the gateway as its trusted proxy.
    let gw = gateway(
        &up.base,
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.1",
            "backend.upstream.identity=proxy",
            "backend.upstream.proxy.user_header=x-os-user",
            "backend.upstream.proxy.roles_header=x-os-roles",
        ],
    )
    .await;
    let r = gw
        .req_with(
            "GET",
            "/logs/_search",
            None,
            &[
                ("x-proxy-user", "alice"),
                ("x-proxy-roles", "analyst,ops"),
                ("x-os-user", "root"),
                ("x-os-roles", "all_access"),
                ("es-security-runas-user", "root"),
                ("authorization", "Basic YWxpY2U6cHc="),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = &up.received_on("_search")[0];
    assert_eq!(got.headers["x-os-user"], "alice");
    assert_eq!(got.headers["x-os-roles"], "analyst,ops");
    assert_eq!(got.headers["x-forwarded-for"], "127.0.0.1");
    for gone in [
        "x-proxy-user",
        "x-proxy-roles",
        "es-security-runas-user",
        "authorization",
    ] {
        assert!(
            got.headers.get(gone).is_none(),
            "{gone} reached the upstream"
        );
    }
    gw.stop().await;

    // One service identity: the gateway's credentials replace the client's.
    let gw = gateway(
        &up.base,
        &[
            "backend.upstream.username=gw",
            "backend.upstream.password=secret",
        ],
    )
    .await;
    let r = gw
        .req_with(
            "GET",
            "/logs/_doc/1",
            None,
            &[("authorization", "Basic YWxpY2U6cHc=")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = up.received_on("_doc/1");
    assert_eq!(
        got.last().unwrap().headers["authorization"],
        "Basic Z3c6c2VjcmV0"
    );
    // Neither the client's forwarding chain nor its other credentials, on the lane (a search)
    // or the general path (a document).
    let forged = [
        ("x-forwarded-for", "10.9.9.9"),
        ("forwarded", "for=10.9.9.9"),
        ("x-real-ip", "10.9.9.9"),
        ("x-proxy-ext-department", "tenant-b"),
        ("cookie", "security_authentication=x"),
        ("es-secondary-authorization", "Basic YWxpY2U6cHc="),
    ];
    for path in ["/logs/_search", "/logs/_doc/2"] {
        let r = gw.req_with("GET", path, None, &forged).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let got = up.received.lock().last().unwrap().clone();
        assert!(got.uri.starts_with(path), "{}", got.uri);
        for (name, _) in forged {
            assert!(
                got.headers.get(name).is_none(),
                "{path}: {name} reached the upstream"
            );
        }
    }
    gw.stop().await;

    // Passthrough: a client's request carries the client's credentials, the gateway's own
    // calls (its probe of `GET /` at start, its cancellations) the gateway's, without which a
    // secured upstream refuses them.
    let before = up.received.lock().len();
    let gw = gateway(
        &up.base,
        &[
            "backend.upstream.identity=passthrough",
            "backend.upstream.username=gw",
            "backend.upstream.password=secret",
        ],
    )
    .await;
    let r = gw
        .req_with(
            "GET",
            "/logs/_search",
            None,
            &[("authorization", "Basic YWxpY2U6cHc=")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let received: Vec<Received> = up.received.lock()[before..].to_vec();
    let probe = received.iter().find(|r| r.uri == "/").expect("the probe");
    assert_eq!(probe.headers["authorization"], "Basic Z3c6c2VjcmV0");
    let search = received.iter().find(|r| r.uri.starts_with("/logs/_search"));
    assert_eq!(
        search.expect("the search").headers["authorization"],
        "Basic YWxpY2U6cHc="
    );
    gw.stop().await;
}

/// A header's name and value.
type Header<'a> = (&'a str, &'a str);

/// The requests of [`chains_received`]: a search on the fast lane, a count on the general
/// path (the lane leaves a client that accepts gzip to it) and a document read forwarded
/// unchanged, each with its own headers.
const CHAIN_PATHS: [(&str, &str, Option<Header>); 3] = [
    ("POST", "/logs/_search", None),
    ("POST", "/logs/_count", Some(("accept-encoding", "gzip"))),
    ("GET", "/logs/_doc/1", None),
];

/// Sends [`CHAIN_PATHS`] to `gw` with `who` and one `X-Forwarded-For` line per entry of
/// `lines` (and a `Forwarded` and an `X-Real-IP` that never pass); answers the forwarded
/// chain `up` received with each, the same on every path.
async fn chains_received(gw: &TestNode, up: &Fake, who: &[(&str, &str)], lines: &[&str]) -> String {
    let mut got = Vec::new();
    for (method, path, extra) in CHAIN_PATHS {
        let mut headers = who.to_vec();
        headers.extend(lines.iter().map(|l| ("x-forwarded-for", *l)));
        headers.extend([("forwarded", "for=192.0.2.66"), ("x-real-ip", "192.0.2.66")]);
        headers.extend(extra);
        let body = (method == "POST").then(|| json!({}));
        let r = gw.req_with(method, path, body, &headers).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let received = up.received.lock().last().unwrap().clone();
        assert!(received.uri.starts_with(path), "{}", received.uri);
        for gone in ["forwarded", "x-real-ip"] {
            assert!(
                received.headers.get(gone).is_none(),
                "{path}: {gone} passed"
            );
        }
        let values: Vec<&str> = received
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        got.push((path, values.join(" | ")));
    }
    assert!(
        got.iter().all(|(_, chain)| *chain == got[0].1),
        "every path forwards the same chain: {got:?}"
    );
    got[0].1.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_trusted_proxys_forwarded_chain_reaches_the_upstream_on_every_path() {
    let up = fake(answer_with(|_| {
        axum::Json(json!({"ok": true})).into_response()
    }))
    .await;
    // sluice behind a trusted proxy (the test, at 127.0.0.1), telling the upstream the user
    // through its proxy headers.
    let gw = gateway(
        &up.base,
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.1",
            "backend.upstream.identity=proxy",
        ],
    )
    .await;
    let chain = |lines: &'static [&'static str]| chains_received(&gw, &up, &ADMIN, lines);
    // The proxy's chain, its lines one list, then the proxy itself.
    assert_eq!(
        chain(&["203.0.113.7, 10.0.0.5", "198.51.100.2"]).await,
        "203.0.113.7, 10.0.0.5, 198.51.100.2, 127.0.0.1"
    );
    assert_eq!(chain(&[]).await, "127.0.0.1");
    // An entry that is not an address ends what is believed, from the right: what is left of
    // it goes with it, and a port is not forwarded.
    assert_eq!(
        chain(&["198.51.100.9, unknown, 203.0.113.7:8080"]).await,
        "203.0.113.7, 127.0.0.1"
    );
    assert_eq!(
        chain(&["203.0.113.7", "proxy.example, [2001:db8::1]:443"]).await,
        "2001:db8::1, 127.0.0.1"
    );
    assert_eq!(chain(&["203.0.113.7, not-an-ip"]).await, "127.0.0.1");
    // A chain longer than 32 entries: its nearest 32.
    let long: String = (0..40).map(|i| format!("10.0.1.{i}, ")).collect::<String>() + "10.0.2.1";
    let nearest: Vec<String> = (9..40).map(|i| format!("10.0.1.{i}")).collect();
    assert_eq!(
        chains_received(&gw, &up, &ADMIN, &[&long]).await,
        format!("{}, 10.0.2.1, 127.0.0.1", nearest.join(", "))
    );
    // Each case's search took the lane once; the others went the general path.
    assert_eq!(lane_counts_as(&gw, &ADMIN).await.0, 6, "lane searches");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_forwarded_chain_is_not_believed_where_sluice_trusts_no_proxy() {
    let up = fake(answer_with(|_| {
        axum::Json(json!({"ok": true})).into_response()
    }))
    .await;
    // Basic authentication: `auth.proxy.trusted_addresses` is set but means nothing, so the
    // peer (the test, at 127.0.0.1) is not a proxy whose chain is believed.
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users.yml");
    sluice_server::auth::add_user(&users, "alice", "alice-pw", &["admin".into()], false)
        .expect("add alice");
    let users = format!("auth.users_file={}", users.display());
    let gw = gateway(
        &up.base,
        &[
            "auth.type=basic",
            &users,
            "auth.proxy.trusted_addresses=127.0.0.1",
            "backend.upstream.identity=proxy",
        ],
    )
    .await;
    // alice:alice-pw
    let alice = [("authorization", "Basic YWxpY2U6YWxpY2UtcHc=")];
    for forged in [
        &["203.0.113.7"][..],
        &["203.0.113.7, 10.0.0.5", "198.51.100.2"],
    ] {
        assert_eq!(chains_received(&gw, &up, &alice, forged).await, "127.0.0.1");
    }
    assert_eq!(lane_counts_as(&gw, &alice).await.0, 2, "lane searches");
    gw.stop().await;
}

/// The peak resident memory of process `pid` (`VmHWM`), bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kb * 1024
}

/// A `sluice serve` child process; killed when dropped.
struct Child(std::process::Child);

/// Resolves once a line containing `marker` has been read from `output` (a child's piped
/// stdout or stderr), which a thread keeps draining afterwards so the child never blocks on a
/// full pipe. How a test waits for a process to be ready without polling it.
fn line_seen(
    output: impl std::io::Read + Send + 'static,
    marker: &'static str,
) -> tokio::sync::oneshot::Receiver<()> {
    use std::io::BufRead;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(output)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains(marker)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    rx
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A gateway in its own process (so its memory is its own), in front of `hosts`, with its
/// data in `data` and `extra` settings; killed when dropped.
struct GatewayProcess {
    url: String,
    pid: u32,
    _child: Child,
    _data: tempfile::TempDir,
}

async fn gateway_process(hosts: &str, data: tempfile::TempDir, extra: &[&str]) -> GatewayProcess {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("serve");
    let settings = [
        format!("path.data={}", data.path().display()),
        format!("http.port={port}"),
        "backend.type=upstream".to_string(),
        format!("backend.upstream.hosts={hosts}"),
        "backend.upstream.search_threads=4".to_string(),
        "transport.port=0".to_string(),
    ];
    for setting in settings
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
    {
        cmd.arg("-E").arg(setting);
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // The node reads SLUICE_* variables as settings and refuses unknown ones: the test
    // runner's own (SLUICE_TEST_POSTGRES_URL, …) are not the child's.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SLUICE_") {
            cmd.env_remove(k);
        }
    }
    let mut child = Child(cmd.spawn().expect("sluice starts"));
    let pid = child.0.id();
    let listening = line_seen(
        child.0.stderr.take().expect("stderr"),
        "listening on http://",
    );
    tokio::time::timeout(Duration::from_secs(30), listening)
        .await
        .expect("the gateway never served")
        .expect("the gateway exited before it served");
    GatewayProcess {
        url: format!("http://127.0.0.1:{port}"),
        pid,
        _child: child,
        _data: data,
    }
}

/// The proxy-authentication headers of `user` with `roles`.
fn as_user(user: &str, roles: &str) -> reqwest::header::HeaderMap {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert("x-proxy-user", user.parse().unwrap());
    h.insert("x-proxy-roles", roles.parse().unwrap());
    h
}

/// Bytes streamed each way in the streaming test: far more than the bound below.
const STREAMED: u64 = 512 << 20;
/// The most the gateway's peak resident memory may grow by while [`STREAMED`] bytes pass.
const MEMORY_BOUND: u64 = 64 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bodies_much_larger_than_a_memory_bound_stream_through() {
    use futures::StreamExt;
    // The upstream answers STREAMED bytes from one shared chunk, and counts what it is sent
    // (to `/upload` and to `/_bulk`).
    let chunk = Bytes::from(vec![b'x'; 1 << 20]);
    let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = received.clone();
    let bulk_received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let bulk_counted = bulk_received.clone();
    let big = move || {
        let chunk = chunk.clone();
        async move {
            let n = (STREAMED >> 20) as usize;
            let s = futures::stream::iter(std::iter::repeat_n(chunk, n))
                .map(Ok::<_, std::convert::Infallible>);
            axum::body::Body::from_stream(s)
        }
    };
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { root_answer() }))
        .route("/big", axum::routing::get(big.clone()))
        // A search: the gateway's fast lane relays the upstream's chunks as they come.
        .route("/big/_search", axum::routing::get(big))
        .route(
            "/upload",
            axum::routing::post(move |body: axum::body::Body| {
                let counted = counted.clone();
                async move {
                    let mut s = body.into_data_stream();
                    while let Some(Ok(b)) = s.next().await {
                        counted.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                    "done"
                }
            }),
        )
        .route(
            "/_bulk",
            axum::routing::post(move |body: axum::body::Body| {
                let counted = bulk_counted.clone();
                async move {
                    let mut s = body.into_data_stream();
                    while let Some(Ok(b)) = s.next().await {
                        counted.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                    axum::Json(json!({"took": 1, "errors": false, "items": []}))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    // The gateway in its own process, so its memory is its own.
    let tmp = tempfile::tempdir().unwrap();
    // Authorization on: a `_bulk` of a user allowed to write everywhere is not authorized item
    // by item, so it streams through like any other body.
    let roles = tmp.path().join("roles.yml");
    std::fs::write(
        &roles,
        "writer:\n  index_permissions:\n    - index_patterns: [\"*\"]\n      allowed_actions: [crud]\n",
    )
    .unwrap();
    let roles = format!("auth.roles_file={}", roles.display());
    let process = gateway_process(
        &base,
        tmp,
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.1",
            &roles,
        ],
    )
    .await;
    let (pid, gw) = (process.pid, process.url.clone());
    let client = reqwest::Client::new();
    let before = peak_rss(pid);
    // Down: a response of STREAMED bytes, read and dropped chunk by chunk, on the general
    // path and on the fast lane (a search).
    for path in ["/big", "/big/_search"] {
        let mut resp = client
            .get(format!("{gw}{path}"))
            .headers(as_user("root", "admin"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let mut got = 0u64;
        while let Some(c) = resp.chunk().await.unwrap() {
            got += c.len() as u64;
        }
        assert_eq!(got, STREAMED, "{path}");
    }
    // Up: a request body of STREAMED bytes.
    let up_chunk = Bytes::from(vec![b'y'; 1 << 20]);
    let body = futures::stream::iter(std::iter::repeat_n(up_chunk, (STREAMED >> 20) as usize))
        .map(Ok::<_, std::io::Error>);
    let resp = client
        .post(format!("{gw}/upload"))
        .headers(as_user("root", "admin"))
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        received.load(std::sync::atomic::Ordering::Relaxed),
        STREAMED
    );
    // Up again: a `_bulk` of STREAMED bytes (far past http.max_content_length, so a buffered
    // one would be refused) by a user allowed everywhere.
    let up_chunk = Bytes::from(vec![b'z'; 1 << 20]);
    let body = futures::stream::iter(std::iter::repeat_n(up_chunk, (STREAMED >> 20) as usize))
        .map(Ok::<_, std::io::Error>);
    let resp = client
        .post(format!("{gw}/_bulk"))
        .headers(as_user("wanda", "writer"))
        .header("content-type", "application/x-ndjson")
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        bulk_received.load(std::sync::atomic::Ordering::Relaxed),
        STREAMED
    );
    let after = peak_rss(pid);
    eprintln!(
        "gateway peak RSS {} MiB before, {} MiB after {} MiB down twice, {} MiB up twice",
        before >> 20,
        after >> 20,
        STREAMED >> 20,
        STREAMED >> 20
    );
    assert!(
        after.saturating_sub(before) < MEMORY_BOUND,
        "the gateway's peak RSS grew by {} MiB while {} MiB passed",
        (after - before) >> 20,
        STREAMED >> 20
    );
    drop(process);
    server.abort();
}

/// Bytes of each of the two items of the `_msearch` answer in the msearch streaming test: with
/// both, far more than [`MEMORY_BOUND`].
const MSEARCH_ITEM: usize = 64 << 20;

/// One hit of about 1 MiB: a string of `x` with, every 4 KiB, an escaped quote and brackets
/// that a scan must see as the string's, not the answer's.
fn big_hit() -> Bytes {
    let mut s = String::from(r#"{"_source":{"s":""#);
    while s.len() < (1 << 20) - 64 {
        s.push_str(&"x".repeat(4096));
        s.push_str(r#"\"]}[{,"#);
    }
    s.push_str(r#""}},"#);
    Bytes::from(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_msearch_answer_much_larger_than_a_memory_bound_streams_through() {
    use futures::StreamExt;
    // The upstream answers an `_msearch` of two items with two items of MSEARCH_ITEM bytes,
    // made as it sends them from one shared hit.
    let hit = big_hit();
    let hits = MSEARCH_ITEM / hit.len();
    let item_head = Bytes::from_static(br#"{"took":1,"hits":{"hits":["#);
    let item_tail = Bytes::from_static(br#"{"_source":{}}]},"status":200}"#);
    let item_len = item_head.len() + hits * hit.len() + item_tail.len();
    let answer = {
        let (hit, item_head, item_tail) = (hit.clone(), item_head.clone(), item_tail.clone());
        move || {
            let item = {
                let (hit, item_head, item_tail) =
                    (hit.clone(), item_head.clone(), item_tail.clone());
                move || {
                    futures::stream::iter(
                        std::iter::once(item_head.clone())
                            .chain(std::iter::repeat_n(hit.clone(), hits))
                            .chain(std::iter::once(item_tail.clone())),
                    )
                }
            };
            let s = futures::stream::iter([Bytes::from_static(br#"{"took":1,"responses":["#)])
                .chain(item())
                .chain(futures::stream::iter([Bytes::from_static(b",")]))
                .chain(item())
                .chain(futures::stream::iter([Bytes::from_static(b"]}")]))
                .map(Ok::<_, std::convert::Infallible>);
            async move {
                let mut resp = Response::new(axum::body::Body::from_stream(s));
                resp.headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                resp
            }
        }
    };
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { root_answer() }))
        .route("/_msearch", axum::routing::post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let process = gateway_process(&base, tempfile::tempdir().unwrap(), &[]).await;
    let before = peak_rss(process.pid);
    let body = common::ndjson(&[
        json!({"index": "a"}),
        json!({}),
        json!({"index": "b"}),
        json!({}),
    ]);
    let mut resp = reqwest::Client::new()
        .post(format!("{}/_msearch", process.url))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Read and dropped chunk by chunk; its first and last bytes kept to check its shape.
    let (mut got, mut first, mut last) = (0usize, Vec::new(), Vec::new());
    while let Some(c) = resp.chunk().await.unwrap() {
        got += c.len();
        if first.len() < 256 {
            first.extend_from_slice(&c[..c.len().min(256)]);
        }
        last.extend_from_slice(&c[c.len().saturating_sub(256)..]);
        last.drain(..last.len().saturating_sub(256));
    }
    let first = String::from_utf8_lossy(&first).to_string();
    let last = String::from_utf8_lossy(&last).to_string();
    let head = first.find('[').expect("the gateway's opening") + 1;
    assert!(first.starts_with(r#"{"took":"#), "{first}");
    assert!(
        first[head..].starts_with(r#"{"took":1,"hits":{"hits":[{"_source":{"s":"xxx"#),
        "{first}"
    );
    assert!(
        last.ends_with(r#"{"_source":{}}]},"status":200}]}"#),
        "{last}"
    );
    // Both items whole, with one comma between them and the closing after.
    assert_eq!(got, head + 2 * item_len + 1 + 2);
    let after = peak_rss(process.pid);
    eprintln!(
        "gateway peak RSS {} MiB before, {} MiB after an _msearch answer of {} MiB",
        before >> 20,
        after >> 20,
        got >> 20
    );
    assert!(
        after.saturating_sub(before) < MEMORY_BOUND,
        "the gateway's peak RSS grew by {} MiB while an _msearch answer of {} MiB passed",
        (after - before) >> 20,
        got >> 20
    );
    drop(process);
    server.abort();
}

/// How the fake upstream of the malformed-answer test answers an `_msearch` of two items.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Malformed {
    /// A short answer that ends mid-item.
    ShortTruncated,
    /// A short answer that is not JSON.
    ShortNotJson,
    /// An answer past what the gateway holds that ends mid-item (well framed).
    LongTruncated,
    /// An answer past what the gateway holds whose connection breaks mid-item.
    LongBroken,
    /// An answer past what the gateway holds with one item for the two sent.
    LongOneItem,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_malformed_msearch_answer_is_an_error_never_a_truncated_answer() {
    let mode = Arc::new(Mutex::new(Malformed::ShortTruncated));
    let current = mode.clone();
    // About 1 MiB of hits, past what the gateway holds of an answer before it streams.
    let filler = || {
        let hit = r#"{"_source":{"s":"\"]}"}},"#;
        hit.repeat((1 << 20) / hit.len())
    };
    let up = fake(answer_with(move |_| {
        let json = |text: String| {
            let mut resp = Response::new(axum::body::Body::from(text));
            resp.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            resp
        };
        let item = r#"{"hits":{"hits":[]},"status":200}"#;
        match *current.lock() {
            Malformed::ShortTruncated => {
                json(r#"{"took":1,"responses":[{"status":200,"hits":{"#.into())
            }
            Malformed::ShortNotJson => json("<html>busy</html>".into()),
            Malformed::LongTruncated => json(format!(
                r#"{{"took":1,"responses":[{item},{{"hits":{{"hits":[{}"#,
                filler()
            )),
            Malformed::LongBroken => {
                let parts: Vec<Result<Bytes, std::io::Error>> = vec![
                    Ok(Bytes::from(format!(
                        r#"{{"took":1,"responses":[{item},{{"hits":{{"hits":[{}"#,
                        filler()
                    ))),
                    Err(std::io::Error::other("the upstream went away")),
                ];
                let mut resp =
                    Response::new(axum::body::Body::from_stream(futures::stream::iter(parts)));
                resp.headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                resp
            }
            Malformed::LongOneItem => json(format!(
                r#"{{"took":1,"responses":[{{"hits":{{"hits":[{}{{}}]}},"status":200}}]}}"#,
                filler()
            )),
        }
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    let body = common::ndjson(&[
        json!({"index": "a"}),
        json!({}),
        json!({"index": "b"}),
        json!({}),
    ]);
    // Short: held whole and checked, so each item is its error, in a well-formed answer.
    for (short, reason) in [
        (
            Malformed::ShortTruncated,
            "ends before its root object closes",
        ),
        (Malformed::ShortNotJson, "the answer is not a JSON object"),
    ] {
        *mode.lock() = short;
        let (s, b) = gw.raw("POST", "/_msearch", body.clone()).await;
        assert_eq!(s, 200, "{short:?}: {b}");
        let responses = b["responses"].as_array().unwrap();
        assert_eq!(responses.len(), 2, "{short:?}: {b}");
        for item in responses {
            assert_eq!(item["status"], 502, "{short:?}: {b}");
            assert_eq!(
                item["error"]["type"], "upstream_exception",
                "{short:?}: {b}"
            );
            let text = item["error"]["reason"].as_str().unwrap();
            assert!(
                text.contains("the upstream's _msearch answer is not JSON"),
                "{text}"
            );
            assert!(text.contains(reason), "{short:?}: {text}");
        }
    }
    // Long: streaming when the failure shows, so the answer is cut, never complete-looking.
    for long in [
        Malformed::LongTruncated,
        Malformed::LongBroken,
        Malformed::LongOneItem,
    ] {
        *mode.lock() = long;
        let resp = gw
            .client
            .post(gw.url("/_msearch"))
            .header("content-type", "application/x-ndjson")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{long:?}");
        let read = resp.bytes().await;
        assert!(
            read.is_err(),
            "{long:?}: a cut answer was read whole: {:?}",
            read.map(|b| String::from_utf8_lossy(&b[b.len().saturating_sub(200)..]).to_string())
        );
    }
    // Every item's ticket settled, the cut ones too.
    common::wait_until(
        "every msearch ticket settled",
        || gw.state.workload.permits.num_buckets() == 0 && gw.state.tasks.list().is_empty(),
        || format!("tasks {:?}", gw.state.tasks.list().len()),
    )
    .await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_group_search_settings_are_forwarded_as_parameters() {
    let release = Arc::new(tokio::sync::Notify::new());
    let up = msearch_upstream(release).await;
    let gw = gateway(&up.base, &[]).await;
    let group = gw
        .create_group(json!({"name": "timed", "resiliency_mode": "soft",
                "resource_limits": {"memory": 0.5},
                "settings": {"search.default_search_timeout": "2s",
                             "search.cancel_after_time_interval": "30s",
                             "search.max_concurrent_shard_requests": 3,
                             "search.batched_reduce_size": 100}}))
        .await;
    let header = [("workloadGroupId", group.as_str())];
    let r = gw.req_with("GET", "/logs/_search?q=a", None, &header).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let uri = up.received_on("/logs/_search").pop().unwrap().uri;
    assert!(uri.contains("q=a"), "{uri}");
    assert!(uri.contains("timeout=2000ms"), "{uri}");
    assert!(uri.contains("max_concurrent_shard_requests=3"), "{uri}");
    assert!(uri.contains("batched_reduce_size=100"), "{uri}");
    let left: u64 = uri
        .split("cancel_after_time_interval=")
        .nth(1)
        .and_then(|v| v.split("ms").next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no cancel_after_time_interval in {uri}"));
    assert!(left > 0 && left <= 30_000, "{uri}");
    // A request's own timeout beats the group's default (no override_request_values).
    // So does its own max_concurrent_shard_requests; its batched_reduce_size of 512 is
    // OpenSearch's default, which counts as none set.
    let r = gw
        .req_with(
            "POST",
            "/logs/_search?max_concurrent_shard_requests=7&batched_reduce_size=512",
            Some(json!({"timeout": "5s"})),
            &header,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let uri = up.received_on("/logs/_search").pop().unwrap().uri;
    assert!(!uri.contains("timeout=2000ms"), "{uri}");
    assert!(uri.contains("max_concurrent_shard_requests=7"), "{uri}");
    assert!(!uri.contains("max_concurrent_shard_requests=3"), "{uri}");
    assert!(uri.contains("batched_reduce_size=100"), "{uri}");
    assert!(!uri.contains("batched_reduce_size=512"), "{uri}");
    // A group's max_buckets has no request parameter: stored, and the gateway says it does
    // not apply it; a group without one gets no such warning.
    for (settings, warned) in [
        (json!({"search.max_buckets": 10}), true),
        (json!({"search.max_buckets": null}), false),
    ] {
        let r = gw
            .req_with(
                "PUT",
                "/_wlm/workload_group/timed",
                Some(json!({"settings": settings})),
                &[],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let warning = r
            .headers
            .get_all("warning")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(" | ");
        assert_eq!(
            warning.contains(
                "[search.max_buckets] of workload group [timed] has no effect on a gateway"
            ),
            warned,
            "{warning}"
        );
    }
    // _count takes neither parameter.
    let r = gw.req_with("GET", "/logs/_count", None, &header).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let uri = up.received_on("/logs/_count").pop().unwrap().uri;
    assert_eq!(uri, "/logs/_count");
    // msearch items carry them in their lines.
    let body = common::ndjson(&[json!({"index": "a"}), json!({})]);
    let r = gw
        .client
        .post(gw.url("/_msearch"))
        .header("workloadGroupId", &group)
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let sent = up.received_on("_msearch").pop().unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&sent.body)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines[0]["cancel_after_time_interval"].is_string(),
        "{lines:?}"
    );
    assert_eq!(lines[1]["timeout"], "2000ms", "{lines:?}");
    gw.stop().await;
}

/// How long a request the upstream holds may wait for the gateway to end it before the
/// test calls it hung: far beyond the group timeouts below, so only a gateway that never
/// ends it fails.
const HUNG_AFTER: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_group_timeout_reaches_counts_and_templates() {
    let release = Arc::new(tokio::sync::Notify::new());
    let up = msearch_upstream(release.clone()).await;
    let gw = gateway(&up.base, &[]).await;
    let group = gw
        .create_group(json!({"name": "timed", "resiliency_mode": "soft",
                "resource_limits": {"memory": 0.5},
                "settings": {"search.default_search_timeout": "300ms"}}))
        .await;
    let header = [("workloadGroupId", group.as_str())];
    // An inline template: the timeout goes into its source, where OpenSearch reads it (it
    // drops a template request's `timeout` parameter); the source's own timeout stands.
    for (source, expected) in [
        (json!({"query": {"match_all": {}}}), "300ms"),
        (json!({"query": {"match_all": {}}, "timeout": "5s"}), "5s"),
    ] {
        let body = json!({"source": source, "params": {}});
        let r = gw
            .req_with("POST", "/logs/_search/template", Some(body), &header)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let sent = up.received_on("/logs/_search/template").pop().unwrap();
        let forwarded: Value = serde_json::from_slice(&sent.body).unwrap();
        assert_eq!(forwarded["source"]["timeout"], expected, "{forwarded}");
        assert_eq!(forwarded["params"], json!({}), "{forwarded}");
        assert!(!sent.uri.contains("timeout="), "{}", sent.uri);
    }
    // A count (OpenSearch's takes no timeout) and a stored template (no source to carry it)
    // that the upstream holds past the group's timeout: the gateway cancels them.
    for (method, path, body) in [
        ("GET", "/hang/_count", None),
        (
            "POST",
            "/hang/_search/template",
            Some(json!({"id": "stored", "params": {}})),
        ),
    ] {
        let r = tokio::time::timeout(HUNG_AFTER, gw.req_with(method, path, body, &header))
            .await
            .unwrap_or_else(|_| panic!("{path} was never ended by the group's timeout"));
        assert_eq!(r.status, 500, "{}", r.body);
        assert_eq!(
            r.body["error"]["root_cause"][0]["type"], "task_cancelled_exception",
            "{}",
            r.body
        );
        assert!(
            r.body.to_string().contains("search.default_search_timeout"),
            "{}",
            r.body
        );
    }
    release.notify_waiters();
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_scroll_continuations_are_charged_to_the_group_the_scroll_opened_in() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    gw.bulk(
        "/s/_bulk?refresh=true",
        &[
            json!({"index": {"_id": "1"}}),
            json!({"n": 1}),
            json!({"index": {"_id": "2"}}),
            json!({"n": 2}),
        ],
    )
    .await;
    let group = gw
        .create_group(json!({"name": "scrolls", "resiliency_mode": "soft",
                "resource_limits": {"memory": 0.5}}))
        .await;
    let r = gw
        .req_with(
            "POST",
            "/s/_search?scroll=1m&size=1",
            Some(json!({"sort": ["_doc"]})),
            &[("workloadGroupId", &group)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["_scroll_id"].as_str().unwrap().to_string();
    // No header: the continuation still runs in the scroll's group.
    let (s, b) = gw
        .req(
            "POST",
            "/_search/scroll",
            Some(json!({"scroll": "1m", "scroll_id": id})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["hits"]["hits"].as_array().unwrap().len(), 1, "{b}");
    let (s, stats) = gw.req("GET", &format!("/_wlm/stats/{group}"), None).await;
    assert_eq!(s, 200, "{stats}");
    let node = stats
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")
        .unwrap()
        .1;
    assert_eq!(
        node["workload_groups"][&group]["total_completions"], 2,
        "{stats}"
    );
    assert_eq!(default_stats(&gw).await["total_completions"], 0);
    // Cleared: forgotten by the gateway, freed upstream.
    let (s, b) = gw
        .req("DELETE", "/_search/scroll", Some(json!({"scroll_id": id})))
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["num_freed"], 1, "{b}");
    gw.stop().await;
}

/// A scroll opened with a YAML answer is remembered as one opened with JSON is (the id read
/// from the YAML), and continuations that name no keep-alive are charged to the scroll's
/// group. (That they renew it for `search.default_keep_alive`, past the opening's keep-alive,
/// is `scrolls.rs`'s `test_a_continuation_without_keep_alive_outlives_the_opening_one`, on a
/// clock passed in.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_yaml_scroll_and_a_continuation_without_keep_alive_stay_in_their_group() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    let docs: Vec<Value> = (0..4)
        .flat_map(|i| [json!({"index": {"_id": i.to_string()}}), json!({"n": i})])
        .collect();
    gw.bulk("/s/_bulk?refresh=true", &docs).await;
    let group = gw
        .create_group(json!({"name": "scrolls", "resiliency_mode": "soft",
                "resource_limits": {"memory": 0.5}}))
        .await;
    let r = gw
        .req_with(
            "POST",
            "/s/_search?scroll=1m&size=1&format=yaml",
            Some(json!({"sort": ["_doc"]})),
            &[("workloadGroupId", &group)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let yaml = r.body.as_str().expect("a YAML answer");
    let id = yaml
        .lines()
        .find_map(|l| l.strip_prefix("_scroll_id: "))
        .unwrap_or_else(|| panic!("no id in {yaml}"))
        .trim_matches(|c| c == '"' || c == '\'')
        .to_string();
    let completions = |stats: &Value| {
        stats
            .as_object()
            .unwrap()
            .iter()
            .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")
            .unwrap()
            .1["workload_groups"][&group]["total_completions"]
            .clone()
    };
    // No header, no keep-alive: the scroll's group, and renewed for the default 5m.
    let (s, b) = gw
        .req("POST", "/_search/scroll", Some(json!({"scroll_id": id})))
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, stats) = gw.req("GET", &format!("/_wlm/stats/{group}"), None).await;
    assert_eq!(completions(&stats), 2, "{stats}");
    let (s, b) = gw
        .req("POST", "/_search/scroll", Some(json!({"scroll_id": id})))
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["hits"]["hits"].as_array().unwrap().len(), 1, "{b}");
    let (_, stats) = gw.req("GET", &format!("/_wlm/stats/{group}"), None).await;
    assert_eq!(completions(&stats), 3, "{stats}");
    assert_eq!(default_stats(&gw).await["total_completions"], 0);
    gw.stop().await;
}

/// Runs `openssl` with `args` in `dir`, asserting success.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (.ci/run installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes to `d` a private CA (`ca.pem`) and a certificate it signed for `localhost` and
/// 127.0.0.1 (`srv.pem`, its key `srv.key`).
fn private_ca(d: &std::path::Path) {
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=sluice-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=keyCertSign",
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.pem",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_tls_upstream_is_verified_against_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A private CA and a certificate it signed for localhost.
    private_ca(d);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // `s_server -www` answers any GET with a 200 status page, and prints ACCEPT (flushed at
    // once) when it listens.
    let mut server = Child(
        std::process::Command::new("openssl")
            .args(["s_server", "-www", "-cert", "srv.pem", "-key", "srv.key"])
            .arg("-accept")
            .arg(port.to_string())
            .current_dir(d)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl s_server starts"),
    );
    let accepting = line_seen(server.0.stdout.take().expect("stdout"), "ACCEPT");
    tokio::time::timeout(Duration::from_secs(10), accepting)
        .await
        .expect("s_server never listened")
        .expect("s_server exited before it listened");
    let hosts = format!("https://localhost:{port}");
    let ca = format!("backend.upstream.ca_file={}", d.join("ca.pem").display());
    let gw = gateway(&hosts, &[ca.as_str()]).await;
    let (s, body) = gw.req("GET", "/anything", None).await;
    assert_eq!(s, 200, "{body}");
    gw.stop().await;
    // Without the CA, the system's roots do not vouch for it: refused, and said why.
    let gw = gateway(&hosts, &[]).await;
    let resp = gw.req("GET", "/anything", None).await;
    common::assert_error(&resp, 502, "upstream_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert!(reason.contains("certificate"), "{reason}");
    // And what fixes it.
    assert!(reason.contains("backend.upstream.ca_file"), "{reason}");
    gw.stop().await;
    // With a ca_file of another CA, the hint names that file as not the signer, rather than
    // asking to set the setting that is set.
    let other = tempfile::tempdir().unwrap();
    openssl(
        other.path(),
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=another-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=keyCertSign",
        ],
    );
    let other_ca = other.path().join("ca.pem");
    let gw = gateway(
        &hosts,
        &[format!("backend.upstream.ca_file={}", other_ca.display()).as_str()],
    )
    .await;
    let resp = gw.req("GET", "/anything", None).await;
    common::assert_error(&resp, 502, "upstream_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("[{}] signed", other_ca.display()))
            && !reason.contains("set backend.upstream.ca_file"),
        "{reason}"
    );
    gw.stop().await;
    drop(server);
}

/// A `backend.upstream.ca_file` holding no usable certificate stops the gateway before it
/// starts, as every bad setting does: exit code 2 and "invalid value … for setting …" naming
/// the key and why (it once exited 1 after logging began, in a message of its own).
#[test]
fn test_a_ca_file_without_a_certificate_stops_start_like_any_bad_setting() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let run = |setting: String| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("serve");
        for s in [
            format!("path.data={}", dir.path().join("data").display()),
            "http.port=0".to_string(),
            "transport.port=0".to_string(),
            "backend.type=upstream".to_string(),
            "backend.upstream.hosts=https://127.0.0.1:9".to_string(),
            setting,
        ] {
            cmd.arg("-E").arg(s);
        }
        // The node reads SLUICE_* variables as settings: the test runner's are not its own.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLUICE_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd.output().expect("sluice runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(format!("backend.upstream.ca_file={}", garbage.display()));
    assert_eq!(code, Some(2), "{stderr}");
    let shape = format!(
        "sluice: invalid value [{}] for setting [backend.upstream.ca_file]",
        garbage.display()
    );
    assert!(
        stderr.starts_with(&shape) && stderr.contains("holds no PEM certificate"),
        "{stderr}"
    );
    // The same exit and shape as another bad backend.upstream.* value.
    let (code, other) = run("backend.upstream.connect_timeout=soon".to_string());
    assert_eq!(code, Some(2), "{other}");
    assert!(
        other.starts_with("sluice: invalid value [soon] for setting ["),
        "{other}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_own_settings_are_readable_while_the_upstream_is_down_when_filtered_to_them() {
    // Nothing listens on port 1: every read of the upstream's settings fails.
    let gw = gateway("http://127.0.0.1:1", &[]).await;
    let (s, b) = gw
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "monitor_only"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    // A read that needs the upstream's settings cannot be whole: 502, never a part of it.
    let resp = gw.req("GET", "/_cluster/settings", None).await;
    common::assert_error(&resp, 502, "upstream_exception");
    let resp = gw
        .req("GET", "/_cluster/settings?filter_path=persistent", None)
        .await;
    common::assert_error(&resp, 502, "upstream_exception");
    // One whose filter can only select the gateway's own keys is answered without it.
    let (s, b) = gw
        .req("GET", "/_cluster/settings?filter_path=persistent.wlm", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!({"persistent": {"wlm": {"workload_group": {"mode": "monitor_only"}}}})
    );
    let (s, b) = gw
        .req(
            "GET",
            "/_cluster/settings?flat_settings=true&include_defaults=true&filter_path=*.wlm\\.workload_group\\.mode",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!({"persistent": {"wlm.workload_group.mode": "monitor_only"}})
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_settings_are_split_between_sluice_and_the_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    let upstream = gw.upstream.as_ref().unwrap();
    // wlm.* is the gateway's own.
    let (s, b) = gw
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "monitor_only"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    // Any other key is the upstream's.
    let (s, b) = gw
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"search": {"max_buckets": 1234}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, up) = upstream
        .req("GET", "/_cluster/settings?flat_settings=true", None)
        .await;
    assert_eq!(up["persistent"]["search.max_buckets"], "1234", "{up}");
    assert!(
        up["persistent"].get("wlm.workload_group.mode").is_none(),
        "{up}"
    );
    // Both in one update: refused, so neither half lands alone.
    let resp = gw
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"wlm.workload_group.mode": "enabled", "search.max_buckets": 99}})),
        )
        .await;
    common::assert_error(&resp, 400, "illegal_argument_exception");
    // The upstream's own values of sluice's keys (an OpenSearch 3 cluster has the mode too)
    // are not the gateway's: a read never shows them.
    let (s, b) = upstream
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"wlm.workload_group.mode": "enabled"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    // A read merges the two.
    let (s, b) = gw
        .req("GET", "/_cluster/settings?flat_settings=true", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["persistent"]["search.max_buckets"], "1234", "{b}");
    assert_eq!(
        b["persistent"]["wlm.workload_group.mode"], "monitor_only",
        "{b}"
    );
    assert_eq!(b["transient"], json!({}), "{b}");
    let (s, b) = gw.req("GET", "/_cluster/settings", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["persistent"]["search"]["max_buckets"], "1234", "{b}");
    assert_eq!(
        b["persistent"]["wlm"]["workload_group"]["mode"], "monitor_only",
        "{b}"
    );
    assert_eq!(b["transient"], json!({}), "{b}");
    let (s, b) = gw
        .req(
            "GET",
            "/_cluster/settings?include_defaults=true&flat_settings=true",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["transient"], json!({}), "{b}");
    // Set on the gateway, so not among its defaults.
    assert!(
        b["defaults"].get("wlm.workload_group.mode").is_none(),
        "{b}"
    );
    assert_eq!(b["defaults"]["node.workload_group.max_count"], "100", "{b}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_upstream_task_ids_are_followed_and_cancelled_through_the_gateway() {
    // A forwarded API with wait_for_completion=false answers the upstream's task id: the
    // client follows it through the gateway as it would directly.
    let tmp = tempfile::tempdir().unwrap();
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    let upstream = gw.upstream.as_ref().unwrap();
    let (s, b) = gw.req("PUT", "/fm", None).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = gw
        .req("POST", "/fm/_forcemerge?wait_for_completion=false", None)
        .await;
    assert_eq!(s, 200, "{b}");
    let id = b["task"].as_str().expect("a task id").to_string();
    let (up_node, _) = id.rsplit_once(':').unwrap();
    let (s, done) = gw
        .req(
            "GET",
            &format!("/_tasks/{id}?wait_for_completion=true&timeout=30s"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["completed"], true, "{done}");
    let (_, direct) = upstream.req("GET", &format!("/_tasks/{id}"), None).await;
    assert_eq!(done, direct);
    // Cancelling and a task that never was: the upstream's answers, unchanged.
    let encoded = id.replace(':', "%3A");
    for (method, path) in [
        ("POST", format!("/_tasks/{id}/_cancel")),
        ("GET", format!("/_tasks/{up_node}:999999")),
        ("POST", format!("/_tasks/{up_node}:999999/_cancel")),
        // The colon percent-encoded, as some clients write a path's parts.
        ("GET", format!("/_tasks/{encoded}")),
    ] {
        let via = gw.req(method, &path, None).await;
        let direct = upstream.req(method, &path, None).await;
        assert_eq!(via, direct, "{method} {path}");
    }
    // The gateway's own task ids are still its own, malformed ones refused as before.
    let gw_node = gw.state.identity.node_id.clone();
    assert_ne!(gw_node, up_node);
    for path in [
        format!("/_tasks/{gw_node}:999999"),
        format!("/_tasks/{gw_node}%3A999999"),
    ] {
        let resp = gw.req("GET", &path, None).await;
        common::assert_error(&resp, 404, "resource_not_found_exception");
        // Answered by the gateway, not forwarded.
        assert!(
            resp.1["error"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&gw_node)),
            "{path}: {}",
            resp.1
        );
    }
    let resp = gw.req("GET", "/_tasks/not-a-task-id", None).await;
    common::assert_error(&resp, 400, "illegal_argument_exception");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_upstream_tasks_need_the_cluster_permission_with_authorization_on() {
    // The gateway cannot tell whose an upstream task is: with a roles file, following or
    // cancelling one takes the permission others' tasks take.
    let up = fake(answer_with(|_| {
        axum::Json(json!({"completed": true, "task": {}})).into_response()
    }))
    .await;
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "read").await;
    let as_user = |user: &'static str, roles: &'static str, method: &str, path: &str| {
        gw.client
            .request(method.parse().unwrap(), gw.url(path))
            .header("x-proxy-user", user)
            .header("x-proxy-roles", roles)
            .send()
    };
    for (method, path, action) in [
        ("GET", "/_tasks/upstreamnode:7", "cluster:monitor/task/get"),
        (
            "POST",
            "/_tasks/upstreamnode:7/_cancel",
            "cluster:admin/tasks/cancel",
        ),
    ] {
        let r = as_user("alice", "tenant_a", method, path).await.unwrap();
        assert_eq!(r.status().as_u16(), 403, "{method} {path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "security_exception", "{body}");
        assert!(
            body["error"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(action)),
            "{body}"
        );
        assert!(up.received_on("upstreamnode").is_empty(), "{method} {path}");
    }
    let r = as_user("root", "admin", "GET", "/_tasks/upstreamnode:7")
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(up.received_on("/_tasks/upstreamnode:7").len(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_followed_upstream_task_is_checked_as_ours_before_it_is_shown_or_cancelled() {
    // An upstream's task ids start again at 1 when it restarts: the id a background by-query
    // follows may then be another caller's task, whose status, result and cancellation are
    // not the gateway task's.
    use std::sync::atomic::{AtomicBool, Ordering};
    let release = Arc::new(tokio::sync::Notify::new());
    let restarted = Arc::new(AtomicBool::new(false));
    let opaque: Arc<Mutex<String>> = Arc::default();
    let (gate, after, seen) = (release.clone(), restarted.clone(), opaque.clone());
    let up = fake(Arc::new(move |r: Received| {
        let (gate, after, seen) = (gate.clone(), after.clone(), seen.clone());
        Box::pin(async move {
            if r.uri.contains("_update_by_query") {
                let id = r.headers.get("x-opaque-id").unwrap().to_str().unwrap();
                *seen.lock() = id.to_string();
                return axum::Json(json!({"task": "upnode:5"})).into_response();
            }
            if r.uri.starts_with("/_tasks/upnode:5") {
                if r.uri.contains("wait_for_completion=true") && !after.load(Ordering::SeqCst) {
                    gate.notified().await;
                }
                let id = if after.load(Ordering::SeqCst) {
                    "another-caller".to_string()
                } else {
                    seen.lock().clone()
                };
                return axum::Json(json!({"completed": false, "task": {
                    "headers": {"X-Opaque-Id": id}, "status": {"total": 10, "updated": 3}}}))
                .into_response();
            }
            axum::Json(json!({})).into_response()
        })
    }))
    .await;
    let gw = gateway(&up.base, &["node.memory_budget=1tb"]).await;
    let group = enabled_group(
        &gw,
        json!({"name": "bq", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.5},
               "throttling": {"attribute": "group", "node_limit": 1}}),
    )
    .await;
    let r = gw
        .req_with(
            "POST",
            "/logs/_update_by_query?wait_for_completion=false",
            Some(json!({"query": {"match_all": {}}})),
            &[("workloadGroupId", group.as_str())],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["task"].as_str().unwrap().to_string();
    up.wait_received("wait_for_completion=true").await;
    // Followed: its slot held and counted as executing.
    assert_eq!(group_stats(&gw, &group).await["executing"], 1);
    // The upstream restarts; the id is now another caller's task.
    restarted.store(true, Ordering::SeqCst);
    release.notify_waiters();
    let done = gw.task_result(&id).await;
    let reason = done["error"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("no longer the one this gateway started"),
        "{done}"
    );
    assert!(
        up.received_on("_cancel").is_empty(),
        "a stranger's task was cancelled"
    );
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["executing"], 0, "{stats}");
    // Cancelled after the restart: the stranger's task is left alone.
    restarted.store(false, Ordering::SeqCst);
    let looks = up.received_on("wait_for_completion=true").len();
    let r = gw
        .req_with(
            "POST",
            "/logs/_update_by_query?wait_for_completion=false",
            Some(json!({"query": {"match_all": {}}})),
            &[("workloadGroupId", group.as_str())],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["task"].as_str().unwrap().to_string();
    common::wait_until(
        "the second action followed",
        || up.received_on("wait_for_completion=true").len() > looks,
        String::new,
    )
    .await;
    restarted.store(true, Ordering::SeqCst);
    let (s, b) = gw.req("POST", &format!("/_tasks/{id}/_cancel"), None).await;
    // The gateway's own next look may see the restart first and end the task (its looks run
    // once a second): then the cancel finds it ended (404). Either way the stranger's task
    // must not be cancelled, and the result must say why it ended.
    assert!(
        s == 200 || (s == 404 && b["error"]["type"] == "resource_not_found_exception"),
        "{s} {b}"
    );
    let done = gw.task_result(&id).await;
    assert!(
        done["error"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no longer the one")),
        "{done}"
    );
    assert!(
        up.received_on("_cancel").is_empty(),
        "a stranger's task was cancelled"
    );
    release.notify_waiters();
    gw.stop().await;
}

/// The by-query tasks `node` lists as running.
async fn byquery_tasks(node: &TestNode) -> usize {
    let (_, b) = node.req("GET", "/_tasks?actions=*byquery", None).await;
    b["nodes"]
        .as_object()
        .into_iter()
        .flat_map(|n| n.values())
        .map(|n| n["tasks"].as_object().map_or(0, |t| t.len()))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cancelling_a_waiting_by_query_on_the_gateway_answers_what_the_upstream_did() {
    let tmp = tempfile::tempdir().unwrap();
    common::seed_heavy(tmp.path()).await;
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    let upstream = gw.upstream.as_ref().unwrap();
    // Small batches: thousands of bulk writes, long enough to be cancelled while it runs.
    let rb = gw
        .client
        .post(gw.url("/heavy/_delete_by_query?scroll_size=10"))
        .header("content-type", "application/json")
        .body(json!({"query": {"match_all": {}}}).to_string());
    let running = tokio::spawn(async move {
        let r = rb.send().await.expect("answered");
        (r.status().as_u16(), r.json::<Value>().await.expect("json"))
    });
    for _ in 0..20_000 {
        if byquery_tasks(upstream).await == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(byquery_tasks(&gw).await, 1, "the gateway's task");
    assert_eq!(byquery_tasks(upstream).await, 1, "the upstream's task");
    let (s, b) = gw
        .req("POST", "/_tasks/_cancel?actions=*byquery", None)
        .await;
    assert_eq!(s, 200, "{b}");
    // Answered as OpenSearch answers it: a 200 saying it was cancelled, with what it did.
    let (status, body) = running.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["canceled"], "by user request", "{body}");
    let deleted = body["deleted"].as_u64().unwrap();
    assert!(deleted < common::HEAVY_DOCS as u64, "{body}");
    // The upstream's task is cancelled too, not left to delete everything.
    for _ in 0..20_000 {
        if byquery_tasks(upstream).await == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(byquery_tasks(upstream).await, 0);
    upstream.refresh("heavy").await;
    assert_eq!(
        upstream.count("heavy", None).await,
        common::HEAVY_DOCS as u64 - deleted,
        "the work stopped midway"
    );
    // Its cancel-after passing ends it the same way.
    let (s, b) = gw
        .req(
            "POST",
            "/heavy/_delete_by_query?scroll_size=10&cancel_after_time_interval=200ms",
            Some(json!({"query": {"match_all": {}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert!(b["canceled"].is_string(), "{b}");
    assert_eq!(byquery_tasks(&gw).await, 0);
    gw.stop().await;
}

/// The `http.publish_address` of every node a `_nodes` answer lists.
fn publish_addresses(b: &Value) -> Vec<String> {
    b["nodes"]
        .as_object()
        .into_iter()
        .flat_map(|n| n.values())
        .filter_map(|n| n["http"]["publish_address"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sniffing_through_a_gateway_finds_the_gateway_not_the_upstream() {
    // A sniffing client replaces its hosts with the nodes `_nodes/…/http` lists: forwarded,
    // that was the upstream, and every later request went around the gateway.
    let tmp = tempfile::tempdir().unwrap();
    let gw = TestNode::start_gateway_on(tmp.path(), &[]).await;
    let upstream = gw.upstream.as_ref().unwrap();
    let gw_addr = gw.addr.to_string();
    let up_addr = upstream.addr.to_string();
    // opensearch-py's, the Java and Go clients', and any info naming the metric (the comma
    // percent-encoded too).
    for path in [
        "/_nodes/_all/http",
        "/_nodes/http",
        "/_nodes/_all/jvm,http",
        "/_nodes/http%2Cos",
    ] {
        let (s, b) = gw.req("GET", path, None).await;
        assert_eq!(s, 200, "{path}: {b}");
        assert_eq!(publish_addresses(&b), vec![gw_addr.clone()], "{path}: {b}");
    }
    // Every other `_nodes` request is the upstream's: info not naming the metric too (what a
    // search profile's node ids refer to).
    for path in ["/_nodes", "/_nodes/_local"] {
        let (s, b) = gw.req("GET", path, None).await;
        assert_eq!(s, 200, "{path}: {b}");
        assert_eq!(publish_addresses(&b), vec![up_addr.clone()], "{path}: {b}");
    }
    let (_, up) = upstream.req("GET", "/", None).await;
    let up_name = up["name"].as_str().expect("name").to_string();
    // Node stats, the `http` metric's too (`_nodes/stats/http` is stats, not info of a node
    // named `stats`).
    for path in ["/_nodes/stats", "/_nodes/stats/http"] {
        let (s, b) = gw.req("GET", path, None).await;
        assert_eq!(s, 200, "{path}: {b}");
        let names: Vec<&str> = b["nodes"]
            .as_object()
            .into_iter()
            .flat_map(|n| n.values())
            .filter_map(|n| n["name"].as_str())
            .collect();
        assert_eq!(names, vec![up_name.as_str()], "{path}: {b}");
    }
    let (s, b) = gw.req("GET", "/_nodes/_all/jvm", None).await;
    assert_eq!(s, 200, "{b}");
    assert!(!publish_addresses(&b).contains(&gw_addr), "{b}");
    assert_ne!(gw_addr, up_addr);
    gw.stop().await;
}

/// `_wlm/stats` of group `id` on the only node.
async fn group_stats(node: &TestNode, id: &str) -> Value {
    let (s, b) = node.req("GET", &format!("/_wlm/stats/{id}"), None).await;
    assert_eq!(s, 200, "{b}");
    common::stats::group_of(&b, id)
}

/// Enables workload management and creates a group that lets one request run at a time
/// (`node_limit` 1, no queue) and refuses the next (429); answers its id.
async fn one_slot_group(gw: &TestNode) -> String {
    enabled_group(
        gw,
        json!({"name": "one", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.5},
               "throttling": {"attribute": "group", "node_limit": 1}}),
    )
    .await
}

/// Enables workload management and creates a group of `body`; answers its id.
async fn enabled_group(gw: &TestNode, body: Value) -> String {
    let r = gw
        .req_with(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "enabled"}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = gw
        .req_with("PUT", "/_wlm/workload_group", Some(body), &ADMIN)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_every_search_class_route_is_admitted_and_other_requests_pass_through() {
    let release = Arc::new(tokio::sync::Notify::new());
    let up = msearch_upstream(release.clone()).await;
    let gw = gateway(&up.base, &["node.memory_budget=1tb"]).await;
    let group = one_slot_group(&gw).await;
    let tag = [("workloadGroupId", group.as_str())];
    // The group's one slot is taken by a search the upstream holds.
    let client = gw.client.clone();
    let url = gw.url("/held-hang/_search");
    let g = group.clone();
    let held = tokio::spawn(async move {
        client
            .post(url)
            .header("workloadGroupId", g)
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    up.wait_received("held-hang").await;
    let forwarded_before = up.received.lock().len();
    // Every search-class route is throttled in the group: 429, nothing forwarded.
    let search = json!({"query": {"match_all": {}}});
    let template = json!({"source": {"query": {"match_all": {}}}, "params": {}});
    let routes: [(&str, &str, Option<Value>); 9] = [
        ("GET", "/_search", None),
        ("POST", "/t/_search", Some(search.clone())),
        ("POST", "/t/_search?scroll=1m", Some(search.clone())),
        ("GET", "/_count", None),
        ("POST", "/t/_count", Some(search.clone())),
        ("POST", "/_search/template", Some(template.clone())),
        ("POST", "/t/_search/template", Some(template.clone())),
        (
            "POST",
            "/_search/scroll",
            Some(json!({"scroll": "1m", "scroll_id": "unknown-to-the-gateway"})),
        ),
        (
            "GET",
            "/_search/scroll/unknown-to-the-gateway?scroll=1m",
            None,
        ),
    ];
    for (method, path, body) in &routes {
        let r = gw.req_with(method, path, body.clone(), &tag).await;
        assert_eq!(r.status, 429, "{method} {path}: {}", r.body);
        assert_eq!(
            r.body["error"]["type"], "rejected_execution_exception",
            "{path}: {}",
            r.body
        );
    }
    for path in ["/_msearch", "/t/_msearch/template"] {
        let item = if path.ends_with("template") {
            &template
        } else {
            &search
        };
        let body = common::ndjson(&[json!({}), item.clone(), json!({"index": "u"}), item.clone()]);
        let r = gw
            .client
            .post(gw.url(path))
            .header("workloadGroupId", &group)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        let reply = Reply::of(r).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let items = reply.body["responses"].as_array().unwrap();
        assert_eq!(items.len(), 2, "{path}: {}", reply.body);
        for item in items {
            assert_eq!(item["status"], 429, "{path}: {}", reply.body);
        }
    }
    assert_eq!(
        up.received.lock().len(),
        forwarded_before,
        "a throttled request reached the upstream: {:?}",
        up.received.lock().last()
    );
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["total_throttled"], routes.len() + 4, "{stats}");
    // What is not search-class passes through, tagged or not, whatever the group's state.
    for (method, path) in [
        ("GET", "/t/_doc/1"),
        ("PUT", "/t/_mapping"),
        ("DELETE", "/t"),
    ] {
        let r = gw.req_with(method, path, None, &tag).await;
        assert_eq!(r.status, 200, "{method} {path}: {}", r.body);
    }
    assert_eq!(up.received.lock().len(), forwarded_before + 3);
    // The held search ends; the group drains.
    release.notify_waiters();
    assert_eq!(held.await.unwrap().unwrap(), 200);
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["total_completions"], 1, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    assert_eq!(gw.state.workload.permits.num_buckets(), 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_failing_upstream_loses_no_permit_and_no_queued_request() {
    // The upstream never answers: each request holds the group's one slot until the gateway's
    // request timeout, and then until `cancel_wait_timeout` (a hung upstream cannot say
    // whether it still runs the search), the others wait in the queue, and every one ends in
    // a 504.
    let (base, task) = raw_upstream(Raw::Hang).await;
    let gw = gateway(
        &base,
        &[
            "node.memory_budget=1tb",
            "backend.upstream.cancel_wait_timeout=500ms",
        ],
    )
    .await;
    let group = enabled_group(
        &gw,
        json!({"name": "queued", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.5},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 4}}),
    )
    .await;
    let searches: Vec<_> = (0..3)
        .map(|i| {
            let rb = gw
                .client
                .post(gw.url(&format!("/q{i}/_search")))
                .header("workloadGroupId", &group);
            tokio::spawn(async move { Reply::of(rb.send().await.unwrap()).await })
        })
        .collect();
    for s in searches {
        let reply = s.await.unwrap();
        assert_eq!(reply.status, 504, "{}", reply.body);
        assert_eq!(
            reply.body["error"]["type"], "upstream_timeout_exception",
            "{}",
            reply.body
        );
    }
    wait_nothing_held(&gw).await;
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["total_completions"], 3, "{stats}");
    assert_eq!(stats["failures"], 3, "{stats}");
    assert_eq!(stats["total_queued"], 2, "{stats}");
    assert_eq!(stats["queued_current"], 0, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    assert_eq!(stats["total_throttled"], 0, "{stats}");
    gw.stop().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_host_that_does_not_accept_connections_fails_within_the_connect_timeout() {
    // A listener with a backlog of one that never accepts: once its queue is full the kernel
    // drops further connection attempts, so a connect hangs as to a host that is down.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut filling = Vec::new();
    for _ in 0..16 {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(s)) => filling.push(s),
            Ok(Err(e)) => panic!("connect failed instead of hanging: {e}"),
            Err(_) => break,
        }
    }
    assert!(filling.len() < 16, "the backlog never filled");
    let base = format!("http://{addr}");
    // Connect timeout 200 ms, under the helper's request timeout (500 ms): the reason tells
    // which one ended the request.
    let gw = gateway(&base, &["backend.upstream.connect_timeout=200ms"]).await;
    for path in ["/logs/_search", "/logs/_doc/1"] {
        let resp = gw.req("GET", path, None).await;
        common::assert_error(&resp, 502, "upstream_exception");
        let reason = resp.1["error"]["reason"].as_str().unwrap();
        assert!(reason.contains(&base), "{reason}");
        assert!(
            reason.contains("not connected within backend.upstream.connect_timeout [200ms]"),
            "{reason}"
        );
    }
    let stats = default_stats(&gw).await;
    assert_eq!(stats["failures"], 1, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    gw.stop().await;
    drop(listener);
}

/// A raw HTTP/1.1 upstream answering every request `{"count":1}` on connections it keeps open
/// (`close` false) or closes after each answer, saying so (`Connection: close`); it counts the
/// connections that carried a request and the requests it answered.
///
/// A connection is counted when its first request arrives, not when it is accepted: under a
/// loaded CI machine the gateway's 500 ms connect timeout can expire after the TCP connection
/// was made but before the request was written, and the attempt is retried on a new one. That
/// connection carried nothing, so it says nothing of how the pool reuses connections.
async fn counting_upstream(
    close: bool,
) -> (
    String,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (conns, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (c, a) = (conns.clone(), answered.clone());
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (c, a) = (c.clone(), a.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                let mut first = true;
                loop {
                    // Requests without a body: a head ends each.
                    let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                        continue;
                    };
                    seen.drain(..end + 4);
                    if std::mem::take(&mut first) {
                        c.fetch_add(1, Ordering::SeqCst);
                    }
                    let connection = if close { "close" } else { "keep-alive" };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         connection: {connection}\r\ncontent-length: 11\r\n\r\n{{\"count\":1}}"
                    );
                    // Counted before it is sent: the gateway may act on an answer (finish
                    // starting, say) before this task runs again.
                    a.fetch_add(1, Ordering::SeqCst);
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if close {
                        return;
                    }
                }
            });
        }
    });
    (base, conns, answered, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_upstream_connections_are_reused_and_closed_ones_replaced() {
    use std::sync::atomic::Ordering;
    // Kept open: one request after another reuses a pooled connection (C1 of the client: it is
    // taken again once its answer was read), instead of connecting per request.
    let (base, conns, answered, task) = counting_upstream(false).await;
    let gw = gateway(&base, &[]).await;
    // What start-up sent (the probe's `GET /`) is not counted.
    let (answered_before, conns_before) = (
        answered.load(Ordering::SeqCst),
        conns.load(Ordering::SeqCst),
    );
    for path in ["/logs/_count", "/logs/_doc/1"].repeat(10) {
        let (s, b) = gw.req("GET", path, None).await;
        assert_eq!(s, 200, "{b}");
        assert_eq!(b["count"], 1, "{b}");
    }
    assert_eq!(answered.load(Ordering::SeqCst) - answered_before, 20);
    // Not one per request. Each path that forwards keeps its own pool: the fast lane one per
    // lane thread (a count may be served on either of the node's two), the general path one
    // (`_doc`); and a connection may open while another's readiness is on its way.
    let opened = conns.load(Ordering::SeqCst) - conns_before;
    assert!(opened <= 4, "{opened} connections for 20 requests");
    gw.stop().await;
    task.abort();

    // Closed after each answer: no request is sent on a closed connection, every one gets
    // its answer on a new one.
    let (base, conns, answered, task) = counting_upstream(true).await;
    let gw = gateway(&base, &[]).await;
    let (answered_before, conns_before) = (
        answered.load(Ordering::SeqCst),
        conns.load(Ordering::SeqCst),
    );
    for path in ["/logs/_count", "/logs/_doc/1"].repeat(5) {
        let (s, b) = gw.req("GET", path, None).await;
        assert_eq!(s, 200, "{b}");
    }
    assert_eq!(answered.load(Ordering::SeqCst) - answered_before, 10);
    assert_eq!(conns.load(Ordering::SeqCst) - conns_before, 10);
    gw.stop().await;
    task.abort();
}

/// The proxy headers of `alice`, who holds the role `tenant_a`.
const ALICE: [(&str, &str); 2] = [("x-proxy-user", "alice"), ("x-proxy-roles", "tenant_a")];

/// A request to the gateway `gw` as `alice`, with `content_type`.
fn as_alice(
    gw: &TestNode,
    method: &str,
    path: &str,
    content_type: &str,
) -> reqwest::RequestBuilder {
    let mut rb = gw
        .client
        .request(method.parse().unwrap(), gw.url(path))
        .header("content-type", content_type);
    for (k, v) in ALICE {
        rb = rb.header(k, v);
    }
    rb
}

/// A gateway in front of `upstream` with proxy authentication and a roles file of one role,
/// `tenant_a`, granting `actions` (an action group) on `a-*`; the folder holding the file
/// must outlive the gateway.
async fn gateway_for_tenant_a(upstream: &str, actions: &str) -> (TestNode, tempfile::TempDir) {
    gateway_for_tenant_a_with(upstream, actions, &[]).await
}

/// [`gateway_for_tenant_a`] with `extra` settings.
async fn gateway_for_tenant_a_with(
    upstream: &str,
    actions: &str,
    extra: &[&str],
) -> (TestNode, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let roles = tmp.path().join("roles.yml");
    std::fs::write(
        &roles,
        format!(
            "tenant_a:\n  index_permissions:\n    - index_patterns: [\"a-*\"]\n      allowed_actions: [{actions}]\n"
        ),
    )
    .unwrap();
    let roles_setting = format!("auth.roles_file={}", roles.display());
    let mut settings = vec![
        "auth.type=proxy",
        "auth.proxy.trusted_addresses=127.0.0.1",
        &roles_setting,
    ];
    settings.extend_from_slice(extra);
    let gw = gateway(upstream, &settings).await;
    (gw, tmp)
}

/// Answers a `_bulk` or `_mget` as OpenSearch would, one item per item received.
fn echo_items(r: Received) -> Response {
    let text = String::from_utf8_lossy(&r.body).to_string();
    if r.uri.contains("_mget") {
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let docs: Vec<Value> = body["docs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| json!({"_index": d["_index"], "_id": d["_id"], "found": true}))
            .collect();
        return axum::Json(json!({ "docs": docs })).into_response();
    }
    let mut items = Vec::new();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    while let Some(line) = lines.next() {
        let v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let Some((action, meta)) = v.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        if action != "delete" {
            lines.next();
        }
        items
            .push(json!({ action: {"_index": meta["_index"], "_id": meta["_id"], "status": 200} }));
    }
    axum::Json(json!({"took": 3, "errors": false, "items": items})).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_and_mget_forward_only_authorized_items() {
    let up = fake(answer_with(echo_items)).await;
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "crud").await;
    let ndjson = |lines: &[Value]| common::ndjson(lines);
    let post =
        |path: &str, body: String, ct: &str| as_alice(&gw, "POST", path, ct).body(body).send();

    // A mixed _bulk: only the allowed operations reach the upstream, answers in request order.
    let body = ndjson(&[
        json!({"index": {"_index": "a-1", "_id": "1"}}),
        json!({"x": 1}),
        json!({"index": {"_index": "b-1", "_id": "2"}}),
        json!({"x": 2}),
        json!({"delete": {"_index": "b-1", "_id": "3"}}),
        json!({"update": {"_id": "4"}}),
        json!({"doc": {"x": 4}}),
    ]);
    let resp = post("/a-2/_bulk?refresh=true", body, "application/x-ndjson")
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    let sent = up.received_on("_bulk");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].uri, "/a-2/_bulk?refresh=true");
    assert_eq!(
        String::from_utf8_lossy(&sent[0].body),
        ndjson(&[
            json!({"index": {"_index": "a-1", "_id": "1"}}),
            json!({"x": 1}),
            json!({"update": {"_id": "4"}}),
            json!({"doc": {"x": 4}}),
        ])
    );
    assert_eq!(answer["errors"], true, "{answer}");
    assert_eq!(answer["took"], 3, "{answer}");
    let items = answer["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "{answer}");
    assert_eq!(items[0]["index"]["status"], 200, "{answer}");
    assert_eq!(items[1]["index"]["status"], 403, "{answer}");
    assert_eq!(items[1]["index"]["_index"], "b-1", "{answer}");
    assert_eq!(items[1]["index"]["_id"], "2", "{answer}");
    assert_eq!(
        items[1]["index"]["error"]["type"], "security_exception",
        "{answer}"
    );
    assert_eq!(items[2]["delete"]["status"], 403, "{answer}");
    assert_eq!(items[3]["update"]["status"], 200, "{answer}");

    // Every operation refused: answered here, the upstream is not called.
    let body = ndjson(&[json!({"delete": {"_index": "b-1", "_id": "3"}})]);
    let resp = post("/_bulk", body, "application/x-ndjson").await.unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["items"][0]["delete"]["status"], 403, "{answer}");
    assert_eq!(answer["errors"], true, "{answer}");
    assert_eq!(up.received_on("_bulk").len(), 1);

    // Every operation allowed and done: no errors.
    let body = ndjson(&[
        json!({"index": {"_index": "a-1", "_id": "5"}}),
        json!({"x": 5}),
    ]);
    let resp = post("/_bulk", body, "application/x-ndjson").await.unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["items"][0]["index"]["status"], 200, "{answer}");
    assert_eq!(answer["errors"], false, "{answer}");
    assert_eq!(up.received_on("_bulk").len(), 2);

    // A body that does not split into operations is refused, not forwarded.
    let resp = post(
        "/_bulk",
        "{\"index\":{\"_index\":\"a-1\"}}\n".into(),
        "application/x-ndjson",
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(up.received_on("_bulk").len(), 2);

    // _mget: the same, one document each.
    let body = json!({"docs": [{"_index": "b-1", "_id": "1"}, {"_index": "a-1", "_id": "2"}]});
    let resp = post("/_mget", body.to_string(), "application/json")
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    let sent = up.received_on("_mget");
    assert_eq!(sent.len(), 1);
    let forwarded: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(forwarded, json!({"docs": [{"_index": "a-1", "_id": "2"}]}));
    assert_eq!(
        answer["docs"][0]["error"]["type"], "security_exception",
        "{answer}"
    );
    assert_eq!(answer["docs"][0]["_id"], "1", "{answer}");
    assert_eq!(answer["docs"][1]["found"], true, "{answer}");
    let resp = post(
        "/b-1/_mget",
        json!({"ids": ["1", "2"]}).to_string(),
        "application/json",
    )
    .await
    .unwrap();
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["docs"].as_array().map(Vec::len), Some(2), "{answer}");
    assert_eq!(answer["docs"][1]["error"]["type"], "security_exception");
    assert_eq!(up.received_on("_mget").len(), 1);

    // The URL's `index` parameter is the default index OpenSearch gives items that name none
    // when the path names none: checked as that index, not forwarded unchecked.
    let resp = post(
        "/_mget?index=b-1",
        json!({"ids": ["1"]}).to_string(),
        "application/json",
    )
    .await
    .unwrap();
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(
        answer["docs"][0]["error"]["type"], "security_exception",
        "{answer}"
    );
    assert_eq!(up.received_on("_mget").len(), 1, "{answer}");
    let body = ndjson(&[json!({"index": {"_id": "9"}}), json!({"x": 9})]);
    let resp = post("/_bulk?index=b-1", body, "application/x-ndjson")
        .await
        .unwrap();
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["items"][0]["index"]["status"], 403, "{answer}");
    assert_eq!(answer["items"][0]["index"]["_index"], "b-1", "{answer}");
    assert_eq!(up.received_on("_bulk").len(), 2, "{answer}");
    // Allowed there: forwarded.
    let body = ndjson(&[json!({"index": {"_id": "9"}}), json!({"x": 9})]);
    let resp = post("/_bulk?index=a-9", body, "application/x-ndjson")
        .await
        .unwrap();
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["items"][0]["index"]["status"], 200, "{answer}");
    assert_eq!(up.received_on("_bulk").len(), 3, "{answer}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lookups_and_unreadable_bodies_of_a_restricted_user_are_not_forwarded() {
    let up = fake(answer_with(|_| {
        axum::Json(json!({"took": 1, "hits": {"hits": []}})).into_response()
    }))
    .await;
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "read").await;
    let lookup =
        |index: &str| json!({"query": {"terms": {"f": {"index": index, "id": "1", "path": "x"}}}});
    let send = |method: &str, path: String, body: Option<String>| {
        let rb = as_alice(&gw, method, &path, "application/json");
        match body {
            Some(b) => rb.body(b).send(),
            None => rb.send(),
        }
    };
    // A forbidden lookup in the body or in the `source` parameter: 403, nothing forwarded.
    let r = send(
        "POST",
        "/a-1/_search".into(),
        Some(lookup("b-1").to_string()),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 403);
    let path = format!(
        "/a-1/_search?source={}&source_content_type=application/json",
        common::enc(&lookup("b-1").to_string())
    );
    let r = send("GET", path, None).await.unwrap();
    assert_eq!(r.status(), 403);
    // A body whose lookups cannot be read is refused, not forwarded.
    let r = send("POST", "/a-1/_count".into(), Some("query: {}".into()))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(up.received_on("_search").is_empty() && up.received_on("_count").is_empty());
    // An allowed lookup is forwarded.
    let r = send(
        "POST",
        "/a-1/_search".into(),
        Some(lookup("a-2").to_string()),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.received_on("_search").len(), 1);
    // A scroll clear whose ids cannot be read is refused, not forwarded.
    let r = send(
        "DELETE",
        "/_search/scroll".into(),
        Some("{\"scroll_id\": 1".into()),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    assert!(up.received_on("scroll").is_empty());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_search_templates_are_authorized_on_their_indices() {
    let up = msearch_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "search").await;
    let template = json!({"source": {"query": {"match_all": {}}}, "params": {}});
    let send = |path: &str, body: String, content_type: &str| {
        as_alice(&gw, "POST", path, content_type).body(body).send()
    };
    // A template search on an index of the role's pattern is forwarded.
    let r = send(
        "/a-1/_search/template",
        template.to_string(),
        "application/json",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.received_on("_search/template").len(), 1);
    // On another index, or on all of them: 403 in OpenSearch's words, nothing forwarded.
    for path in ["/b-1/_search/template", "/_search/template"] {
        let r = send(path, template.to_string(), "application/json")
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "security_exception", "{body}");
        assert!(
            body["error"]["reason"]
                .as_str()
                .unwrap()
                .contains("indices:data/read/search/template"),
            "{body}"
        );
    }
    assert_eq!(up.received_on("_search/template").len(), 1);
    // _msearch/template: each item on its own index; only the allowed one is forwarded and
    // the refused one is a 403 item in its place.
    let body = common::ndjson(&[
        json!({"index": "b-1"}),
        template.clone(),
        json!({"index": "a-2"}),
        template.clone(),
    ]);
    let r = send("/_msearch/template", body, "application/x-ndjson")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let items = answer["responses"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{answer}");
    assert_eq!(items[0]["status"], 403, "{answer}");
    assert_eq!(items[0]["error"]["type"], "security_exception", "{answer}");
    assert_eq!(items[1]["from_index"], "a-2", "{answer}");
    let sent = up.received_on("_msearch/template");
    assert_eq!(sent.len(), 1);
    assert!(!String::from_utf8_lossy(&sent[0].body).contains("b-1"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_documents_a_query_reads_elsewhere_are_authorized_before_it_is_forwarded() {
    use base64::Engine as _;
    let up = msearch_upstream(Arc::new(tokio::sync::Notify::new())).await;
    // The default identity, `service`: the upstream would read these as the gateway's account.
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "crud").await;
    let send = |path: &str, body: String, content_type: &str| {
        as_alice(&gw, "POST", path, content_type).body(body).send()
    };
    let mlt = |index: &str| json!({"more_like_this": {"fields": ["t"], "like": [{"_index": index, "_id": "0"}]}});
    let lookup = json!({"terms": {"f": {"index": "b-1", "id": "0", "path": "p"}}});
    let wrapped = base64::engine::general_purpose::STANDARD.encode(lookup.to_string());
    // Each names another tenant's documents (or, with a template, cannot be checked): 403 in
    // OpenSearch's words, nothing forwarded.
    for (path, body, why) in [
        ("/a-1/_search", json!({"query": mlt("b-1")}), ""),
        (
            "/a-1/_search",
            json!({"query": {"percolate": {"field": "q", "index": "b-1", "id": "0"}}}),
            "",
        ),
        (
            "/a-1/_search",
            json!({"query": {"geo_shape": {"l": {"indexed_shape": {"index": "b-1", "id": "0"}}}}}),
            "",
        ),
        (
            "/a-1/_search",
            json!({"query": {"geo_shape": {"l": {"indexed_shape": {"id": "0"}}}}}),
            "",
        ),
        (
            "/a-1/_count",
            json!({"query": {"wrapper": {"query": wrapped}}}),
            "",
        ),
        ("/a-1/_delete_by_query", json!({"query": mlt("b-1")}), ""),
        (
            "/a-1/_search/template",
            json!({"source": {"query": mlt("b-1")}}),
            "",
        ),
        (
            "/a-1/_search/template",
            json!({"source": "{\"query\": {}}", "params": {}}),
            "as a string",
        ),
        (
            "/a-1/_search/template",
            json!({"source": {"query": {"{{q}}": {}}}, "params": {"q": "terms"}}),
            "key [{{q}}]",
        ),
        (
            "/a-1/_search/template",
            json!({"source": {"query": {"terms": {"f": {"index": "a-{{i}}", "id": "0", "path": "p"}}}}}),
            "placeholder names the index",
        ),
        (
            "/a-1/_search/template",
            json!({"id": "stored", "params": {"i": "b-1"}}),
            "stored template",
        ),
        (
            "/a-1/_search",
            json!({"query": {"wrapper": {"query": "not base64"}}}),
            "wrapper",
        ),
    ] {
        let r = send(path, body.to_string(), "application/json")
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path} {body}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["error"]["type"], "security_exception", "{answer}");
        let reason = answer["error"]["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("no permissions for [indices:"),
            "{answer}"
        );
        assert!(reason.contains(why), "{body}: {answer}");
        if !why.is_empty() {
            assert!(reason.contains("identity"), "says what to change: {answer}");
        }
    }
    assert!(up.received_on("/a-1/").is_empty(), "nothing was forwarded");
    // In _msearch and _msearch/template, the item is refused in place; the other goes.
    for (path, refused) in [
        ("/_msearch", json!({"query": mlt("b-1")})),
        ("/_msearch/template", json!({"source": "{}"})),
    ] {
        let fine = if path.ends_with("template") {
            json!({"source": {"query": {"match": {"t": "{{text}}"}}}, "params": {"text": "x"}})
        } else {
            json!({"query": mlt("a-2")})
        };
        let body = common::ndjson(&[
            json!({"index": "a-1"}),
            refused,
            json!({"index": "a-2"}),
            fine,
        ]);
        let r = send(path, body, "application/x-ndjson").await.unwrap();
        assert_eq!(r.status(), 200);
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["responses"][0]["status"], 403, "{answer}");
        assert_eq!(answer["responses"][1]["from_index"], "a-2", "{answer}");
        let sent = up.received_on(path);
        assert_eq!(sent.len(), 1, "{path}");
        assert!(
            !String::from_utf8_lossy(&sent[0].body).contains("a-1"),
            "{path}"
        );
    }
    // What names only her own indices, or a template with plain placeholders, is forwarded.
    for (path, body) in [
        ("/a-1/_search", json!({"query": mlt("a-2")})),
        (
            "/a-1/_search/template",
            json!({"source": {"query": {"match": {"t": "{{text}}"}}}, "params": {"text": "x"}}),
        ),
    ] {
        let r = send(path, body.to_string(), "application/json")
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path} {body}");
    }
    assert_eq!(up.received_on("/a-1/_search").len(), 2);
    gw.stop().await;

    // With identity `proxy` the upstream checks a template's reads as the user: forwarded; the
    // references the gateway can see are still its own to check, as `terms` lookups are.
    let up = msearch_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let (gw, _roles_dir) =
        gateway_for_tenant_a_with(&up.base, "crud", &["backend.upstream.identity=proxy"]).await;
    let send = |path: &str, body: String| {
        as_alice(&gw, "POST", path, "application/json")
            .body(body)
            .send()
    };
    let r = send("/a-1/_search/template", json!({"id": "stored"}).to_string())
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = send("/a-1/_search", json!({"query": mlt("b-1")}).to_string())
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(up.received_on("_search").len(), 1);
    gw.stop().await;

    // Without a roles file every user may read every index: nothing is left to check.
    let up = msearch_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let gw = gateway(
        &up.base,
        &["auth.type=proxy", "auth.proxy.trusted_addresses=127.0.0.1"],
    )
    .await;
    let r = as_alice(&gw, "POST", "/a-1/_search/template", "application/json")
        .body(json!({"id": "stored"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.received_on("_search/template").len(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_alias_bodies_with_a_duplicate_key_are_refused_not_forwarded() {
    let up = fake(answer_with(|_| {
        axum::Json(json!({"acknowledged": true})).into_response()
    }))
    .await;
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "manage_aliases, create_index").await;
    // A lenient parse checks the last `index` (hers); an upstream reading the first would
    // alias another tenant's index. Refused as OpenSearch refuses a duplicate key.
    for (path, method, body) in [
        (
            "/_aliases",
            "POST",
            r#"{"actions": [{"add": {"index": "b-1", "index": "a-1", "alias": "a-steal"}}]}"#,
        ),
        (
            "/a-new",
            "PUT",
            r#"{"aliases": {"b-view": {}}, "aliases": {"a-view": {}}}"#,
        ),
    ] {
        let r = as_alice(&gw, method, path, "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(
            answer["error"]["type"], "x_content_parse_exception",
            "{answer}"
        );
    }
    assert!(up.received_on("_aliases").is_empty() && up.received_on("a-new").is_empty());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_alias_changes_are_authorized_before_they_are_forwarded() {
    let up = fake(answer_with(|_| {
        axum::Json(json!({"acknowledged": true})).into_response()
    }))
    .await;
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "manage_aliases").await;
    let send = |body: String| {
        as_alice(&gw, "POST", "/_aliases", "application/json")
            .body(body)
            .send()
    };
    let add = |index: &str| json!({"add": {"index": index, "alias": "a-view"}});
    // On the role's indices, under a name of the role's: forwarded with its body as sent.
    let body = json!({"actions": [add("a-1"), add("a-2")]}).to_string();
    let r = send(body.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    let sent = up.received_on("_aliases");
    assert_eq!(sent.len(), 1);
    assert_eq!(String::from_utf8_lossy(&sent[0].body), body);
    // One action elsewhere, or a remove_index without the delete permission: 403 for the whole
    // (atomic) request, nothing forwarded.
    for actions in [
        json!([add("a-1"), add("b-1")]),
        json!([{"remove_index": {"index": "a-1"}}]),
        // An alias name the role does not hold: another tenant's name is not theirs to take.
        json!([{"add": {"index": "a-1", "alias": "b-view"}}]),
    ] {
        let r = send(json!({ "actions": actions }).to_string())
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{actions}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "security_exception", "{body}");
    }
    // A body whose actions cannot be read is refused, not forwarded.
    let r = send("{\"actions\": [".into()).await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(up.received_on("_aliases").len(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_requests_of_every_size_around_the_lanes_read_room_are_answered_whole() {
    // The lane reads a connection's requests into a buffer that starts small (1 KB), grows for
    // a larger request and is taken back whole between requests, and is let go after a
    // request past 64 KB. On one keep-alive connection, searches whose sizes fall on each
    // side of that room, of the grown buffer's end and of 64 KB, alone, pipelined two at a
    // time, and with the body sent after the head: every one reaches the upstream whole and
    // is answered in order.
    let upstream = fake(answer_with(|r| {
        axum::Json(json!({"uri": r.uri, "len": r.body.len()})).into_response()
    }))
    .await;
    let gw = gateway(&upstream.base, &[]).await;
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let search = |n: usize, body_len: usize| {
        let body = format!("{{\"q\":\"{}\"}}", "x".repeat(body_len - 8));
        assert_eq!(body.len(), body_len);
        let head = format!(
            "POST /s{n}/_search HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
             content-length: {body_len}\r\n\r\n"
        );
        (head, body)
    };
    let sizes = [
        8, 900, 1000, 1023, 1024, 1025, 1100, 2000, 9, 2047, 2048, 2049, 4000, 300, 8, 5000, 700,
        16_000, 70_000, 10, 1000,
    ];
    let mut buf = Vec::new();
    let mut n: u64 = 0;
    let mut rest = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let (head, body) = search(i, len);
        match i % 3 {
            // Alone, in one write.
            0 => stream
                .write_all(format!("{head}{body}").as_bytes())
                .await
                .unwrap(),
            // The head, then the body in a second write.
            1 => {
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.flush().await.unwrap();
                tokio::task::yield_now().await;
                stream.write_all(body.as_bytes()).await.unwrap();
            }
            // Pipelined behind the next size's request, in one write.
            _ => {
                let next = sizes[(i + 1) % sizes.len()];
                let (head2, body2) = search(1000 + i, next);
                stream
                    .write_all(format!("{head}{body}{head2}{body2}").as_bytes())
                    .await
                    .unwrap();
                rest.push((1000 + i, next));
            }
        }
        let mut expect = vec![(i, len)];
        expect.append(&mut rest);
        for (at, want) in expect {
            let (status, _, answer) = read_response(&mut stream, &mut buf).await;
            let text = String::from_utf8_lossy(&answer).to_string();
            assert_eq!(status, 200, "request {at} of {want} bytes: {text}");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["uri"], format!("/s{at}/_search"), "{text}");
            assert_eq!(v["len"], want, "request {at}: {text}");
            n += 1;
        }
    }
    assert!(buf.is_empty());
    // Every one took the lane, and every one completed.
    assert_eq!(lane_counts(&gw).await.0, n, "lane counts");
    let stats = default_stats(&gw).await;
    assert_eq!(stats["total_completions"], n, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lane_hands_other_requests_to_the_general_path() {
    // On one keep-alive connection, searches (the fast lane) and other requests (hyper, one at
    // a time, then back to the lane) alternate and are pipelined; every answer comes back in
    // order and whole, the same with the lane off.
    let upstream = fake(answer_with(|r| {
        let mut resp = axum::Json(json!({"method": r.method, "uri": r.uri, "len": r.body.len()}))
            .into_response();
        if r.uri.contains("chunky") {
            // No length: a chunked answer.
            let body = format!("{{\"uri\":\"{}\"}}", r.uri);
            let s = futures::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from(body))]);
            resp = Response::new(axum::body::Body::from_stream(s));
        }
        resp
    }))
    .await;
    let mut series_seen = Vec::new();
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&upstream.base, &[&setting]).await;
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let search = |path: &str, body: &str| {
            format!(
                "POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        let steps: Vec<(String, Vec<&str>)> = vec![
            (
                search("/logs/_search", "{\"size\":1}"),
                vec!["/logs/_search"],
            ),
            (
                "GET /logs/_doc/1 HTTP/1.1\r\nhost: gw\r\n\r\n".into(),
                vec!["/logs/_doc/1"],
            ),
            (search("/logs/_count", "{}"), vec!["/logs/_count"]),
            (search("/chunky/_search", ""), vec!["/chunky/_search"]),
            // Pipelined in one write: lane, hyper, lane, sluice's own route.
            (
                format!(
                    "{}GET /logs/_doc/2 HTTP/1.1\r\nhost: gw\r\n\r\n{}\
                     GET /_wlm/workload_group HTTP/1.1\r\nhost: gw\r\n\r\n",
                    search("/a/_search", "{}"),
                    search("/b/_search?q=x", "{\"query\":{}}")
                ),
                vec![
                    "/a/_search",
                    "/logs/_doc/2",
                    "/b/_search?q=x",
                    "workload_groups",
                ],
            ),
        ];
        let mut buf = Vec::new();
        for (request, expect) in steps {
            stream.write_all(request.as_bytes()).await.unwrap();
            for want in expect {
                let (status, headers, body) = read_response(&mut stream, &mut buf).await;
                let text = String::from_utf8_lossy(&body).to_string();
                assert_eq!(status, 200, "lane {lane}, {want}: {text}");
                assert!(
                    text.contains(want),
                    "lane {lane}: expected {want} in {text}"
                );
                assert!(
                    !headers
                        .iter()
                        .any(|(k, v)| k == "connection" && v == "close"),
                    "lane {lane}, {want}: {headers:?}"
                );
            }
        }
        // HTTP/1.0 hands the connection to hyper for good: still answered.
        stream
            .write_all(b"GET /logs/_search HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
            .await
            .unwrap();
        let (status, _, body) = read_response(&mut stream, &mut buf).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert!(buf.is_empty());
        // Every search was admitted and completed: stats are exact.
        let stats = default_stats(&gw).await;
        assert_eq!(stats["total_completions"], 6, "lane {lane}: {stats}");
        // The lane counted what it did: five searches and counts, five requests lent (two
        // documents, the groups, `_wlm/stats` just above, and the scrape itself), the
        // HTTP/1.0 connection left to hyper.
        if lane == "true" {
            assert_eq!(lane_counts(&gw).await, (5, 5, 1), "lane counts");
        }
        assert_eq!(stats["failures"], 0, "{stats}");
        assert!(gw.state.tasks.list().is_empty());
        // The lane's requests are counted in the series the general path counts them in
        // (the lane keeps its series resolved, `crate::http::lane::series`): the same lines
        // with the lane on and off, the HTTP/1.0 search among them on either.
        let text = gw.req("GET", "/_prometheus/metrics", None).await.1;
        let mut searches: Vec<String> = text
            .as_str()
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                (l.starts_with("sluice_http_requests_total{")
                    || l.starts_with("sluice_http_request_duration_seconds_count{"))
                    && (l.contains("/_search\"") || l.contains("/_count\""))
            })
            .map(str::to_string)
            .collect();
        searches.sort();
        assert!(
            searches.contains(
                &"sluice_http_requests_total{method=\"POST\",route=\"/{index}/_search\",status=\"200\"} 4"
                    .to_string()
            ),
            "lane {lane}: {searches:?}"
        );
        series_seen.push(searches);
        gw.stop().await;
    }
    assert_eq!(series_seen[0].len(), 6, "{series_seen:?}");
    assert_eq!(series_seen[0], series_seen[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_answer_ending_early_fails_that_request_only() {
    // An upstream that announces more bytes than it sends, then closes: the client's
    // connection closes (its answer cannot be completed), nothing is left behind, and the
    // next search gets a new upstream connection and its whole answer.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                loop {
                    let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&seen[..end]).to_string();
                    seen.drain(..end + 4);
                    let answer = if !head.contains("/_search") {
                        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_string()
                    } else if count
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                        .is_multiple_of(2)
                    {
                        "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"short\"".to_string()
                    } else {
                        "HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{\"count\":1}".to_string()
                    };
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if answer.contains("short") {
                        return;
                    }
                }
            });
        }
    });
    let gw = gateway(&base, &[]).await;
    for round in 0..3 {
        // The upstream's searches are answered short and whole, alternately.
        let short = gw
            .client
            .get(format!("{}/logs/_search", gw.base))
            .send()
            .await;
        // The headers came whole: the body breaks off (or reqwest saw the close first).
        if let Ok(resp) = short {
            assert!(resp.bytes().await.is_err(), "round {round}: a short body");
        }
        let (s, b) = gw.req("GET", "/logs/_search", None).await;
        assert_eq!(s, 200, "round {round}: {b}");
        assert_eq!(b["count"], 1, "{b}");
    }
    let stats = default_stats(&gw).await;
    assert_eq!(stats["total_completions"], 6, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    assert_nothing_held(&gw);
    gw.stop().await;
    task.abort();
}

/// The first bytes of the answers [`silent_upstream`] leaves unfinished.
const SILENT_START: &str = "{\"took\":1,";

/// An upstream that answers a search on `silent-length` or `silent-chunked` with a 200 head
/// and the first bytes of a body ([`SILENT_START`]), framed by a length of 1000 or in chunks,
/// then sends nothing more, keeping the connection open (an outside trial's fake upstream
/// did this); every other request gets a whole `{}`. Counts those connections the gateway
/// closed.
async fn silent_upstream() -> (
    String,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let closes = closed.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let closes = closes.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some((first, _, _)) = read_request(&mut stream, &mut buf).await {
                    let answer = if first.contains("/silent-length/") {
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             content-length: 1000\r\n\r\n{SILENT_START}"
                        )
                    } else if first.contains("/silent-chunked/") {
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             transfer-encoding: chunked\r\n\r\n{:x}\r\n{SILENT_START}\r\n",
                            SILENT_START.len()
                        )
                    } else {
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: 2\r\n\r\n{}"
                            .to_string()
                    };
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if answer.contains(SILENT_START) {
                        // Nothing more, until the gateway closes the connection.
                        let mut chunk = [0u8; 1024];
                        while let Ok(n) = stream.read(&mut chunk).await {
                            if n == 0 {
                                break;
                            }
                        }
                        closes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                }
            });
        }
    });
    (base, closed, task)
}

/// Sends `GET {path}` on a new connection to `gw` and reads until the answer's first body
/// bytes ([`SILENT_START`]) came: the connection and what was read.
async fn silent_search(gw: &TestNode, path: &str) -> (tokio::net::TcpStream, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(gw.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got
        .windows(SILENT_START.len())
        .any(|w| w == SILENT_START.as_bytes())
    {
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut chunk)).await;
        match read {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&chunk[..n]),
            other => panic!(
                "{path}: the answer's first bytes did not come ({other:?}): {}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    (stream, got)
}

/// The count of an upstream's closed connections.
fn count(c: &std::sync::atomic::AtomicUsize) -> usize {
    c.load(std::sync::atomic::Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_upstream_silent_mid_answer_closes_the_clients_connection() {
    // An upstream that sends a search answer's head and first bytes, then nothing, keeping
    // its connection open: once nothing more came for `request_timeout` (500 ms here; nginx's
    // `proxy_read_timeout`), the client's connection ends (its head is out: no error status
    // can be given), the upstream's is closed, and the search counts as a failure. Its
    // client once waited for good. On the lane and with the lane off, the body framed by a
    // length or in chunks.
    let (base, closed, task) = silent_upstream().await;
    for lane in ["true", "false"] {
        let fast_lane = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&base, &[&fast_lane]).await;
        let before = count(&closed);
        for (i, index) in ["silent-length", "silent-chunked"].into_iter().enumerate() {
            let (mut stream, mut got) = silent_search(&gw, &format!("/{index}/_search")).await;
            // The rest: none, then the end, well before this generous deadline.
            let end =
                tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut got)).await;
            let got = String::from_utf8_lossy(&got);
            assert!(
                end.is_ok(),
                "lane {lane}, {index}: still open after 20 s: {got}"
            );
            assert!(
                got.starts_with("HTTP/1.1 200"),
                "lane {lane}, {index}: {got}"
            );
            assert!(
                got.ends_with(SILENT_START) || got.ends_with(&format!("{SILENT_START}\r\n")),
                "lane {lane}, {index}: nothing but what the upstream sent: {got}"
            );
            common::wait_until(
                "the gateway closing the silent upstream connection",
                || count(&closed) == before + i + 1,
                || format!("lane {lane}, {index}: {} closed", count(&closed) - before),
            )
            .await;
        }
        let stats = default_stats(&gw).await;
        assert_eq!(stats["total_completions"], 2, "lane {lane}: {stats}");
        assert_eq!(stats["failures"], 2, "lane {lane}: {stats}");
        // The gateway goes on: the next search is answered, on a new upstream connection.
        let (s, b) = gw.req("GET", "/logs/_search", None).await;
        assert_eq!(s, 200, "lane {lane}: {b}");
        assert_nothing_held(&gw);
        gw.stop().await;
    }
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_client_leaving_a_silent_answer_frees_the_upstream_connection() {
    // A client that leaves while the upstream is silent mid-answer: its upstream connection
    // is closed at once, as it leaving a search still waiting closes it, not when
    // `request_timeout` (120 s here) passes. On the lane, a leaving client was once not
    // noticed while its answer was relayed, and its socket and the upstream's stayed open.
    // A client leaving is not the upstream failing: the search counted a success with its
    // head, and stays one. The same with the lane off.
    let (base, closed, task) = silent_upstream().await;
    for lane in ["true", "false"] {
        let fast_lane = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(
            &base,
            &[&fast_lane, "backend.upstream.request_timeout=120s"],
        )
        .await;
        let before = count(&closed);
        for (i, index) in ["silent-length", "silent-chunked"].into_iter().enumerate() {
            let (stream, _) = silent_search(&gw, &format!("/{index}/_search")).await;
            drop(stream);
            common::wait_until(
                "the gateway closing the upstream connection of a client that left",
                || count(&closed) == before + i + 1,
                || format!("lane {lane}, {index}: {} closed", count(&closed) - before),
            )
            .await;
        }
        let stats = default_stats(&gw).await;
        assert_eq!(stats["total_completions"], 2, "lane {lane}: {stats}");
        assert_eq!(stats["failures"], 0, "lane {lane}: {stats}");
        assert_nothing_held(&gw);
        gw.stop().await;
    }
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lent_request_answered_before_its_body_was_read_ends_cleanly() {
    // A request lent to hyper whose handler answers without reading its body (here a listing
    // of groups, its body all sent): the client gets that answer, then the answer to what it
    // sent next (hyper read the rest of the body and dropped it), never an answer to bytes of
    // that body. A search whose length is over `http.max_content_length` is answered 413 from
    // its head, and the connection closes once the answer is out, whatever the client sent
    // behind it (OpenSearch does not read such a body). The same with the lane off.
    let upstream = fake(answer_with(|r| {
        axum::Json(json!({"uri": r.uri})).into_response()
    }))
    .await;
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&upstream.base, &["http.max_content_length=1kb", &setting]).await;
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let unread = format!("{{\"pad\":\"{}\"}}", "x".repeat(900));
        let request = format!(
            "GET /_wlm/workload_group HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{unread}GET /logs/_search HTTP/1.1\r\nhost: gw\r\n\r\n",
            unread.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let (status, _, answer) = read_response(&mut stream, &mut buf).await;
        let answer = String::from_utf8_lossy(&answer).to_string();
        assert_eq!(status, 200, "lane {lane}: {answer}");
        assert!(answer.contains("workload_groups"), "lane {lane}: {answer}");
        let (status, _, answer) = read_response(&mut stream, &mut buf).await;
        let answer = String::from_utf8_lossy(&answer).to_string();
        assert_eq!(status, 200, "lane {lane}: {answer}");
        assert!(answer.contains("/logs/_search"), "lane {lane}: {answer}");
        assert!(buf.is_empty(), "lane {lane}");
        // Over the limit, its whole body sent and a search behind it.
        let body = format!(
            "{{\"query\":{{\"match_all\":{{}}}},\"pad\":\"{}\"}}",
            "x".repeat(4096)
        );
        let request = format!(
            "POST /logs/_search HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}GET /logs/_search HTTP/1.1\r\nhost: gw\r\n\r\n",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let (status, headers, answer) = read_response(&mut stream, &mut buf).await;
        assert_eq!(status, 413, "{}", String::from_utf8_lossy(&answer));
        assert!(
            headers.contains(&("connection".to_string(), "close".to_string())),
            "lane {lane}: {headers:?}"
        );
        let _ = stream.shutdown().await;
        let rest = common::read_until_closed(&mut stream).await;
        assert!(
            buf.is_empty() && rest.is_empty(),
            "lane {lane}: {}{}",
            String::from_utf8_lossy(&buf),
            String::from_utf8_lossy(&rest)
        );
        let (s, b) = gw.req("GET", "/logs/_search", None).await;
        assert_eq!(s, 200, "{b}");
        let stats = default_stats(&gw).await;
        assert_eq!(stats["executing"], 0, "{stats}");
        assert!(gw.state.tasks.list().is_empty());
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_unencoded_target_is_forwarded_percent_encoded() {
    // A target sent unencoded (`?q=t:"x"` as curl sends it) reaches the upstream with its odd
    // bytes percent-encoded and the rest as sent, whichever path takes it: a search, a
    // count, a pass-through; and with the lane off. hyper (and the lane) once answered a bare
    // 400; forwarded raw, the upstream's hyper would have.
    let upstream = fake(answer_with(|r| {
        axum::Json(json!({"uri": r.uri})).into_response()
    }))
    .await;
    let cases = [
        (
            "GET /logs/_search?q=t:\"x\"&size=1",
            "/logs/_search?q=t:%22x%22&size=1",
        ),
        (
            "POST /_count?q=<a>|`b`&q2=%22",
            "/_count?q=%3Ca%3E%7C%60b%60&q2=%22",
        ),
        ("GET /logs/_doc/a{b}^c", "/logs/_doc/a%7Bb%7D%5Ec"),
    ];
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&upstream.base, &[&setting]).await;
        let sent: String = cases
            .iter()
            .map(|(line, _)| format!("{line} HTTP/1.1\r\nhost: gw\r\ncontent-length: 0\r\n\r\n"))
            .collect();
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        stream.write_all(sent.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        for (line, forwarded) in cases {
            let (status, _, answer) = read_response(&mut stream, &mut buf).await;
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(status, 200, "lane {lane}, {line}: {answer}");
            assert_eq!(answer["uri"], forwarded, "lane {lane}, {line}");
        }
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_body_that_comes_after_its_early_answer_is_not_taken_for_a_request() {
    // L2: hyper answers a request over `http.max_content_length` (413) before its whole body
    // has come, and then the connection closes rather than wait for the rest, with the
    // general path's lingering close (G4). The rest of the body, sent after the answer, is
    // never answered as a
    // request of its own: a run that ended at the early answer left it to the lane, which
    // answered it 400, and a client took that for its next request's answer.
    let upstream = fake(answer_with(|r| {
        axum::Json(json!({"uri": r.uri})).into_response()
    }))
    .await;
    let gw = gateway(&upstream.base, &["http.max_content_length=1kb"]).await;
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let mut buf = Vec::new();
    let body = format!("{{\"pad\":\"{}\"}}", "y".repeat(4096));
    let head = format!(
        "POST /logs/_search HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Past the limit, so the search's handler stops reading and answers.
    stream.write_all(&body.as_bytes()[..2000]).await.unwrap();
    let (status, _, answer) = read_response(&mut stream, &mut buf).await;
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&answer));
    // The rest, and a request after it; the gateway may have closed already.
    let rest = format!(
        "{}GET /logs/_doc/1 HTTP/1.1\r\nhost: gw\r\n\r\n",
        &body[2000..]
    );
    let _ = stream.write_all(rest.as_bytes()).await;
    // Done sending: the gateway's lingering close ends at once.
    let _ = stream.shutdown().await;
    let mut after = buf;
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut after))
        .await
        .expect("the connection closed");
    let after = String::from_utf8_lossy(&after).to_string();
    assert!(
        !after.contains("HTTP/1.1"),
        "bytes of a body were answered as a request: {after} ({read:?})"
    );
    // The gateway serves on.
    let (s, b) = gw.req("GET", "/logs/_search", None).await;
    assert_eq!(s, 200, "{b}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_http2_clients_are_served_by_the_general_path() {
    // HTTP/2 with prior knowledge: the lane sees the preface and leaves the connection to
    // hyper, which serves searches and sluice's own routes on it.
    let upstream = fake(answer_with(|r| {
        axum::Json(json!({"uri": r.uri})).into_response()
    }))
    .await;
    let gw = gateway(&upstream.base, &[]).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for path in ["/logs/_search", "/_wlm/workload_group", "/logs/_count"] {
        let resp = h2.get(format!("{}{path}", gw.base)).send().await.unwrap();
        assert_eq!(resp.version(), reqwest::Version::HTTP_2, "{path}");
        assert_eq!(resp.status(), 200, "{path}");
    }
    let stats = default_stats(&gw).await;
    assert_eq!(stats["total_completions"], 2, "{stats}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lane_replaces_connections_the_upstream_closed_without_saying() {
    // The upstream closes each connection right after its answer without a `Connection:
    // close`: the lane's pool must notice (at checkout, or when the request finds the
    // connection gone before any answer) and send every search on a new connection.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (opened, closed) = (
        Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    );
    let (opens, closes) = (opened.clone(), closed.clone());
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            opens.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let closes = closes.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{\"count\":1}")
                    .await;
                // Closed without a word: the gateway may have pooled this connection.
                drop(stream);
                closes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    let gw = gateway(&base, &[]).await;
    for round in 0..10 {
        let (s, b) = gw.req("GET", "/logs/_count", None).await;
        assert_eq!(s, 200, "round {round}: {b}");
        assert_eq!(b["count"], 1, "round {round}: {b}");
        if round % 2 == 0 {
            // Half of the time the close has happened before the next checkout (the probe
            // finds it); otherwise the next search may find the connection gone on its way.
            let count =
                |c: &std::sync::atomic::AtomicUsize| c.load(std::sync::atomic::Ordering::SeqCst);
            common::wait_until(
                "the upstream closing every connection it answered on",
                || count(&closed) >= count(&opened),
                || format!("{} opened, {} closed", count(&opened), count(&closed)),
            )
            .await;
        }
    }
    let stats = default_stats(&gw).await;
    assert_eq!(stats["failures"], 0, "{stats}");
    gw.stop().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_head_search_is_refused_by_the_gateway_not_forwarded() {
    // An upstream that would answer it (this fake answers everything): a HEAD search with a
    // body never reaches it past admission; a HEAD OpenSearch answers is still forwarded.
    let up = fake(answer_with(|_| {
        axum::Json(json!({"ok": true})).into_response()
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    for path in ["/logs/_search", "/_search", "/logs/_count", "/_msearch"] {
        let resp = reqwest::Client::new()
            .request(reqwest::Method::HEAD, format!("{}{path}", gw.base))
            .header("content-type", "application/json")
            .body(json!({"query": {"match_all": {}}}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 405, "{path}");
        assert_eq!(resp.headers()["allow"], "GET,POST", "{path}");
    }
    assert!(up.received_on("_search").is_empty() && up.received_on("_count").is_empty());
    assert!(up.received_on("_msearch").is_empty());
    let resp = reqwest::Client::new()
        .head(format!("{}/logs/_doc/1", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(up.received_on("/logs/_doc/1").len(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_search_the_upstream_read_is_not_sent_again() {
    // The upstream reads the second count in full, then ends the connection without an
    // answer: closing it (as an upstream whose read timeout cut a long search), or resetting
    // it once past `STALE_RESET_WITHIN` (as an upstream, or a proxy before it, aborting). That
    // count is a 502, on the lane as on the general path, and is not sent a second time on a
    // new connection (R2: only a request the upstream never read is). The third is answered.
    for ending in ["close", "reset"] {
        for lane in ["true", "false"] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let seen = received.clone();
            // The gateway's address, for the reset to wait on its task.
            let gateway_base = Arc::new(std::sync::OnceLock::<String>::new());
            let gw_base = gateway_base.clone();
            let task = tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    let seen = seen.clone();
                    let gw_base = gw_base.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 8192];
                        let mut pending = Vec::new();
                        loop {
                            let head_end = loop {
                                if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                                    break i + 4;
                                }
                                match stream.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                                }
                            };
                            let head = String::from_utf8_lossy(&pending[..head_end]).to_lowercase();
                            let length: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            while pending.len() < head_end + length {
                                match stream.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                                }
                            }
                            // The gateway's own calls (its probe of `GET /`) are answered, not
                            // counted.
                            let count = head.starts_with("post /logs/_count ");
                            pending.clear();
                            let n = if count {
                                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
                            } else {
                                0
                            };
                            if n == 2 {
                                // Read whole; then closed cleanly, or reset later.
                                if ending == "reset" {
                                    let base = gw_base.get().expect("the gateway started");
                                    running_past(base, STALE_RESET_WITHIN).await;
                                    // A zero linger resets at the drop, at once: it never
                                    // blocks, which is what the deprecation warns of.
                                    #[allow(deprecated)]
                                    let _ = stream.set_linger(Some(Duration::ZERO));
                                }
                                return;
                            }
                            let answer =
                                b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{\"count\":1}";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            });
            let setting = format!("backend.upstream.fast_lane={lane}");
            let gw = gateway(&base, &[&setting]).await;
            gateway_base.set(gw.base.clone()).unwrap();
            let count = || gw.req("POST", "/logs/_count", Some(json!({})));
            let (s, b) = count().await;
            assert_eq!(s, 200, "{ending}, lane {lane}: {b}");
            let (s, b) = count().await;
            assert_eq!(s, 502, "{ending}, lane {lane}: {b}");
            if ending == "close" {
                assert_eq!(
                    b["error"]["reason"],
                    format!(
                        "upstream [{base}] failed to answer: connection closed before message completed"
                    ),
                    "lane {lane}: {b}"
                );
            }
            assert_eq!(
                received.load(std::sync::atomic::Ordering::SeqCst),
                2,
                "{ending}, lane {lane}: the count the upstream read was sent again"
            );
            let (s, b) = count().await;
            assert_eq!(s, 200, "{ending}, lane {lane}: {b}");
            assert_eq!(
                received.load(std::sync::atomic::Ordering::SeqCst),
                3,
                "{ending}, lane {lane}"
            );
            gw.stop().await;
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_safe_request_whose_connection_closed_as_it_went_out_is_sent_again() {
    // The upstream answers a path's first request on a connection, then reads the next one
    // whole and closes the connection without an answer: from the gateway, what an upstream
    // closing a connection right after an answer (OpenSearch after a 413, a load balancer's
    // idle close) looks like when the next request went out on it meanwhile. A `GET` on a
    // reused connection is sent once more on a new one (R2, C2): every client request gets its
    // 200, on the lane (a search) and on the general path (a document read with no body; a
    // search with the lane off).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = received.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut answered = Vec::new();
                while let Some((first, _, _)) = read_request(&mut stream, &mut buf).await {
                    let path = first.split(' ').nth(1).unwrap_or_default().to_string();
                    if path.starts_with("/logs/") {
                        seen.lock().push(path.clone());
                        if answered.contains(&path) {
                            // Read whole, then closed cleanly without an answer.
                            return;
                        }
                        answered.push(path);
                    }
                    let body = r#"{"took":1,"hits":{"total":{"value":0},"hits":[]}}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    for lane in ["true", "false"] {
        for path in ["/logs/_search", "/logs/_doc/1"] {
            received.lock().clear();
            let setting = format!("backend.upstream.fast_lane={lane}");
            let gw = gateway(&base, &[&setting]).await;
            let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
            let mut buf = Vec::new();
            const ROUNDS: usize = 4;
            for round in 0..ROUNDS {
                let request = format!("GET {path} HTTP/1.1\r\nhost: gw\r\n\r\n");
                stream.write_all(request.as_bytes()).await.unwrap();
                let (status, _, body) = read_response(&mut stream, &mut buf).await;
                assert_eq!(
                    status,
                    200,
                    "lane {lane}, {path}, round {round}: {}",
                    String::from_utf8_lossy(&body)
                );
            }
            // At least one went out on a connection that then closed, and again on a new one.
            // Not an exact count: hyper's client puts a connection back in its pool from a task
            // of its own once the answer's body is read, which may run after the answer reached
            // the client and its next request came, and that request then takes a new
            // connection (CI saw 4 of 5 resends so).
            let received = received.lock().len();
            assert!(
                received > ROUNDS,
                "lane {lane}, {path}: no request was sent again ({received} received)"
            );
            gw.stop().await;
        }
    }
    task.abort();
}

/// The lane's window for a reset that means "never read" (`h1/mod.rs`, `STALE_RESET_WITHIN`).
const STALE_RESET_WITHIN: Duration = Duration::from_millis(250);

/// Waits until the gateway at `base` shows a search-class task running for longer than `past`
/// (its `_tasks`, polled): the moment a reset of that task's upstream connection comes late.
async fn running_past(base: &str, past: Duration) {
    let client = reqwest::Client::new();
    let url = format!("{base}/_tasks?actions=*search*&detailed=true");
    let longest = |v: &Value| {
        v["nodes"]
            .as_object()
            .into_iter()
            .flat_map(|nodes| nodes.values())
            .filter_map(|n| n["tasks"].as_object())
            .flat_map(|tasks| tasks.values())
            .filter_map(|t| t["running_time_in_nanos"].as_u64())
            .max()
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + common::SETTLE_WITHIN;
    loop {
        let v: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
        if u128::from(longest(&v)) > past.as_nanos() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no task ran past {past:?}: {v}"
        );
        tokio::task::yield_now().await;
    }
}

/// The gateway's fast-lane counters (`sluice_gateway_*` in `_prometheus/metrics`): requests
/// served by the lane, requests lent (this scrape, on a connection of its own, is one) and
/// connections handed off.
async fn lane_counts(gw: &TestNode) -> (u64, u64, u64) {
    lane_counts_as(gw, &[]).await
}

/// [`lane_counts`] scraped with `who`'s headers, for a gateway that authenticates.
async fn lane_counts_as(gw: &TestNode, who: &[(&str, &str)]) -> (u64, u64, u64) {
    let mut scrape = reqwest::Client::new().get(format!("{}/_prometheus/metrics", gw.base));
    for (name, value) in who {
        scrape = scrape.header(*name, *value);
    }
    let text = scrape.send().await.unwrap().text().await.unwrap();
    let value = |series: &str| {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0, |v| v.parse::<u64>().unwrap())
    };
    (
        value("sluice_gateway_lane_requests_total{path=\"fast_lane\"}"),
        value("sluice_gateway_lane_requests_total{path=\"lent\"}"),
        value("sluice_gateway_handed_off_connections_total "),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_connection_back_from_other_requests_searches_on_the_lane() {
    // L2: other requests in a row are lent to hyper in one run, however many; the first
    // search after them (as a client's pooled connection sends, once it has created its
    // index) ends the run and takes the lane, with its answer, and so do the searches after
    // it. L4: a connection idle in a run closes at shutdown.
    let upstream = fake(answer_with(|r| {
        axum::Json(json!({"uri": r.uri})).into_response()
    }))
    .await;
    let gw = gateway(&upstream.base, &[]).await;
    let before = lane_counts(&gw).await;
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let mut buf = Vec::new();
    for i in 1..=6 {
        let request = format!("GET /logs/_doc/{i} HTTP/1.1\r\nhost: gw\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let (status, _, body) = read_response(&mut stream, &mut buf).await;
        let body = String::from_utf8_lossy(&body).to_string();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(&format!("/logs/_doc/{i}")), "{body}");
    }
    for _ in 0..2 {
        stream
            .write_all(b"GET /logs/_search HTTP/1.1\r\nhost: gw\r\n\r\n")
            .await
            .unwrap();
        let (status, _, body) = read_response(&mut stream, &mut buf).await;
        let body = String::from_utf8_lossy(&body).to_string();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("/logs/_search"), "{body}");
    }
    let after = lane_counts(&gw).await;
    // Six lent (and the second scrape), both searches on the lane, no connection hyper's for
    // good.
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (2, 7, 0),
        "before {before:?}, after {after:?}"
    );
    let stats = default_stats(&gw).await;
    assert_eq!(stats["total_completions"], 2, "{stats}");
    // A new run, answered, then idle: shutdown ends it and the gateway stops.
    stream
        .write_all(b"GET /logs/_doc/7 HTTP/1.1\r\nhost: gw\r\n\r\n")
        .await
        .unwrap();
    let (status, _, _) = read_response(&mut stream, &mut buf).await;
    assert_eq!(status, 200);
    tokio::time::timeout(Duration::from_secs(20), gw.stop())
        .await
        .expect("the gateway stopped with a connection idle in a lent run");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the idle connection was closed");
    assert!(read.is_ok_and(|n| n == 0), "{rest:?}");
}

/// A test upstream that holds every search until the returned `Notify` is notified once a
/// search (and answers everything else at once).
async fn holding_searches() -> (Fake, Arc<tokio::sync::Notify>) {
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let upstream = fake(Arc::new(move |r: Received| {
        let gate = gate.clone();
        Box::pin(async move {
            if r.uri.contains("_search") {
                gate.notified().await;
            }
            axum::Json(json!({"hits": {"hits": []}})).into_response()
        })
    }))
    .await;
    (upstream, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_shutdown_answers_a_lane_search_in_flight_then_ends() {
    // L4, T3: a search held by the upstream when the gateway is told to stop is still
    // answered on its lane thread; the gateway stops accepting at once and finishes once the
    // answer went out.
    let (upstream, release) = holding_searches().await;
    let gw = gateway(&upstream.base, &[]).await;
    let (addr, url) = (gw.addr, gw.url("/logs/_search"));
    let search = tokio::spawn(async move {
        let resp = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .expect("answered");
        (
            resp.status().as_u16(),
            resp.text().await.expect("whole body"),
        )
    });
    upstream.wait_received("_search").await;
    assert_eq!(lane_counts(&gw).await.0, 1, "the search took the lane");
    let stopping = tokio::spawn(gw.stop());
    // The listener closes first: new connections are refused while the search is held.
    common::wait_until(
        "the gateway refusing new connections",
        || std::net::TcpStream::connect(addr).is_err(),
        String::new,
    )
    .await;
    assert!(
        !stopping.is_finished(),
        "stopped before its search was answered"
    );
    release.notify_one();
    let (status, body) = search.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("hits"), "{body}");
    stopping.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_lane_answer_at_shutdown_says_close_and_nothing_pipelined_behind_it_runs() {
    // L4 (RFC 9112 §9.6): a lane search in flight when the gateway is told to stop is answered
    // with `Connection: close`, and a request the client pipelined behind it is not served:
    // the client, told the connection closes, sends it again elsewhere, so serving it too
    // could run it twice.
    let (upstream, release) = holding_searches().await;
    let gw = gateway(&upstream.base, &[]).await;
    let mut conn = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let search = "POST /logs/_search HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    let pipelined = "PUT /logs/_doc/1 HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    conn.write_all(format!("{search}{pipelined}").as_bytes())
        .await
        .unwrap();
    upstream.wait_received("_search").await;
    assert_eq!(lane_counts(&gw).await.0, 1, "the search took the lane");
    let addr = gw.addr;
    let stopping = tokio::spawn(gw.stop());
    common::wait_until(
        "the gateway refusing new connections",
        || std::net::TcpStream::connect(addr).is_err(),
        String::new,
    )
    .await;
    release.notify_one();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .expect("the connection ends")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("connection: close\r\n"), "{answer}");
    assert_eq!(
        answer.matches("http/1.1 ").count(),
        1,
        "only the search is answered: {answer}"
    );
    stopping.await.unwrap();
    assert!(
        upstream.received_on("_doc").is_empty(),
        "the pipelined request reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_scroll_the_gateway_did_not_open_is_refused_to_a_user_not_allowed_others() {
    // An upstream whose every scroll answer carries the same id.
    let up = fake(answer_with(|_| {
        axum::Json(json!({"_scroll_id": "c2Nyb2xsLTE", "hits": {"hits": []}})).into_response()
    }))
    .await;
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "read").await;
    let send = |who: &'static str, method: &str, path: &str, body: Value| {
        gw.client
            .request(method.parse().unwrap(), gw.url(path))
            .header("content-type", "application/json")
            .header("x-proxy-user", who)
            .header("x-proxy-roles", "tenant_a")
            .body(body.to_string())
            .send()
    };
    let status = |r: reqwest::Response| r.status().as_u16();
    let r = send("alice", "POST", "/a-1/_search?scroll=1m", json!({}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Read whole: the gateway learns the scroll's id from its answer as it passes, so an
    // answer dropped unread (before its body went by) leaves the scroll unknown.
    let opened: Value = r.json().await.unwrap();
    assert_eq!(opened["_scroll_id"], "c2Nyb2xsLTE", "{opened}");
    let continuing = |id: &str| json!({"scroll": "1m", "scroll_id": id});
    let forwarded = || up.received_on("_search/scroll").len();
    // Another user: refused for the id as issued, and for it spelled otherwise (which an
    // upstream may read as the same scroll), continuing or clearing.
    for id in ["c2Nyb2xsLTE", "c2Nyb2xsLTE=", " c2Nyb2xsLTE"] {
        let r = send("bob", "POST", "/_search/scroll", continuing(id))
            .await
            .unwrap();
        assert_eq!(status(r), 403, "{id:?}");
        let r = send("bob", "DELETE", "/_search/scroll", json!({"scroll_id": id}))
            .await
            .unwrap();
        assert_eq!(status(r), 403, "{id:?}");
    }
    assert_eq!(forwarded(), 0, "nothing reached the upstream");
    // Its owner continues it.
    let r = send(
        "alice",
        "POST",
        "/_search/scroll",
        continuing("c2Nyb2xsLTE"),
    )
    .await
    .unwrap();
    assert_eq!(status(r), 200);
    assert_eq!(forwarded(), 1);
    gw.stop().await;
    // A gateway that did not open it (another one, or this one restarted) cannot tell whose
    // it is: refused even to its owner.
    let (gw, _roles_dir) = gateway_for_tenant_a(&up.base, "read").await;
    let r = gw
        .client
        .post(gw.url("/_search/scroll"))
        .header("content-type", "application/json")
        .header("x-proxy-user", "alice")
        .header("x-proxy-roles", "tenant_a")
        .body(continuing("c2Nyb2xsLTE").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "security_exception", "{body}");
    assert_eq!(forwarded(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_body_refused_for_its_type_leaves_the_connection_serving() {
    // The gateway refuses a body of its own routes for its `Content-Type` (406) after reading
    // it: the connection serves the next request, on the lane or with the lane off (an answer
    // given before the body was read made hyper close the connection, and the lane read the
    // body as the next request).
    let upstream = fake(answer_with(|r| {
        axum::Json(json!({"uri": r.uri})).into_response()
    }))
    .await;
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&upstream.base, &[&setting]).await;
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let mut buf = Vec::new();
        let body = r#"{"name": "g", "resource_limits": {"cpu": 0.1}}"#;
        for round in 0..4 {
            // The head, then the body in a write of its own.
            let head = format!(
                "PUT /_wlm/workload_group HTTP/1.1\r\nhost: gw\r\ncontent-type: text/plain\r\n\
                 content-length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(body.as_bytes()).await.unwrap();
            let (status, _, answer) = read_response(&mut stream, &mut buf).await;
            let answer = String::from_utf8_lossy(&answer).to_string();
            assert_eq!(status, 406, "lane {lane}, round {round}: {answer}");
            stream
                .write_all(b"GET /logs/_search HTTP/1.1\r\nhost: gw\r\n\r\n")
                .await
                .unwrap();
            let (status, _, answer) = read_response(&mut stream, &mut buf).await;
            let answer = String::from_utf8_lossy(&answer).to_string();
            assert_eq!(status, 200, "lane {lane}, round {round}: {answer}");
            assert!(answer.contains("/logs/_search"), "lane {lane}: {answer}");
        }
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_read_timeout_closes_quiet_gateway_connections() {
    use tokio::net::TcpStream;
    let tmp = tempfile::tempdir().unwrap();
    common::seed_heavy(tmp.path()).await;
    // The upstream keeps its connections: what closes is the gateway's clients'.
    let up = TestNode::start_embedded_on(tmp.path(), &[]).await;
    let gw = gateway(
        &up.base,
        &[
            "http.read_timeout=300ms",
            "backend.upstream.request_timeout=30s",
        ],
    )
    .await;
    // Quiet from the start (the lane reads it first).
    let mut quiet = TcpStream::connect(gw.addr).await.unwrap();
    assert!(common::read_until_closed(&mut quiet).await.is_empty());
    // After a search the lane took, one it lent hyper, and on a connection hyper keeps for
    // good (HTTP/1.0 keep-alive): the answer, then the end.
    for (request, answer) in [
        (
            "POST /heavy/_count HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
             content-length: 2\r\n\r\n{}",
            "HTTP/1.1 200 OK",
        ),
        ("GET / HTTP/1.1\r\nhost: gw\r\n\r\n", "HTTP/1.1 200 OK"),
        (
            "GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
            "HTTP/1.0 200 OK",
        ),
    ] {
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let got = String::from_utf8(common::read_until_closed(&mut conn).await).unwrap();
        assert!(got.starts_with(answer), "{request}: {got}");
    }
    // Waiting for the answer of a search in flight: the connection closes, and the search
    // is cancelled on the gateway and upstream.
    let mut waiting = TcpStream::connect(gw.addr).await.unwrap();
    let search = crate::tasks::raw_heavy_search().replace(
        "host: sluice\r\n",
        "host: gw\r\nx-opaque-id: quiet-client\r\n",
    );
    waiting.write_all(search.as_bytes()).await.unwrap();
    wait_upstream_search(&up, "quiet-client;sluice:").await;
    assert!(common::read_until_closed(&mut waiting).await.is_empty());
    wait_upstream_gone(&up, "quiet-client;sluice:").await;
    let gone_by = Instant::now() + Duration::from_secs(5);
    while !gw.state.tasks.list().is_empty() {
        assert!(
            Instant::now() < gone_by,
            "the gateway still holds a task 5 s later"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_lane_search_is_refused_from_its_head_before_its_body_is_read() {
    // L1: authentication runs before the body is read, as on the general path. The lane once
    // read a whole body (up to `http.max_content_length`) before it answered 401, so each
    // anonymous connection could make the gateway hold 100 MB.
    let up = fake(answer_with(|_| {
        axum::Json(json!({"hits": {"hits": []}})).into_response()
    }))
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users.yml");
    sluice_server::auth::add_user(&users, "alice", "alice-pw", &["admin".into()], false)
        .expect("add alice");
    let users = format!("auth.users_file={}", users.display());
    let gw = gateway(&up.base, &["auth.type=basic", &users]).await;
    let alice = [("authorization", "Basic YWxpY2U6YWxpY2UtcHc=")];
    for credentials in ["authorization: Basic YWxpY2U6d3Jvbmc=\r\n", ""] {
        // 90 MB announced, 1 KB sent: the rest never comes.
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let head = format!(
            "POST /logs/_search HTTP/1.1\r\nhost: x\r\n{credentials}\
             content-type: application/json\r\ncontent-length: 94371840\r\n\r\n{}",
            " ".repeat(1024)
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let (status, headers, body) = read_response(&mut stream, &mut buf).await;
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("security_exception"), "{body}");
        assert!(
            headers
                .iter()
                .any(|(k, v)| k == "connection" && v == "close"),
            "{headers:?}"
        );
        // Then the connection ends: the rest of the body is no request.
        let mut rest = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut rest))
            .await
            .expect("the connection ends");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
    // A refused search whose body came whole keeps its connection, as on the general path,
    // and one with credentials is served.
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let search = |who: &str| {
        format!(
            "POST /logs/_search HTTP/1.1\r\nhost: x\r\n{who}content-type: application/json\r\n\
             content-length: 2\r\n\r\n{{}}"
        )
    };
    let mut buf = Vec::new();
    stream.write_all(search("").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut stream, &mut buf).await.0, 401);
    stream
        .write_all(search("authorization: Basic YWxpY2U6YWxpY2UtcHc=\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut stream, &mut buf).await.0, 200);
    assert!(
        lane_counts_as(&gw, &alice).await.0 >= 4,
        "the searches took the lane"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_stalled_clients_do_not_keep_a_stopping_gateway_running() {
    // L4: a connection with no request in flight (part of a head, on a fresh connection or
    // after a lane search) closes at shutdown, and a request whose body stalls (on the lane,
    // or lent to hyper) is closed once `http.shutdown_grace` has passed. Each once kept a
    // stopping gateway running until it was killed.
    let up = fake(answer_with(|_| {
        axum::Json(json!({"hits": {"hits": []}})).into_response()
    }))
    .await;
    let gw = gateway(&up.base, &["http.shutdown_grace=1s"]).await;
    let connect = || tokio::net::TcpStream::connect(gw.addr);
    let mut after_search = connect().await.unwrap();
    after_search
        .write_all(b"POST /logs/_search HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_response(&mut after_search, &mut buf).await.0, 200);
    after_search.write_all(b"GET /logs/_co").await.unwrap();
    let mut fresh = connect().await.unwrap();
    fresh.write_all(b"GET /logs/_co").await.unwrap();
    let mut lane_body = connect().await.unwrap();
    lane_body
        .write_all(b"POST /logs/_search HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"q")
        .await
        .unwrap();
    let mut lent_body = connect().await.unwrap();
    lent_body
        .write_all(b"PUT /logs/_doc/1 HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"q")
        .await
        .unwrap();
    // Every connection read by the gateway before it is told to stop.
    common::wait_until(
        "the gateway reading the stalled requests",
        || lane_body_seen(&gw),
        String::new,
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), gw.stop())
        .await
        .expect("the gateway stops within its grace, not when its clients finish");
    // Each connection is closed (the lent request's forwarding may have timed out first: the
    // upstream never got its whole body).
    for (i, mut stream) in [after_search, fresh, lane_body, lent_body]
        .into_iter()
        .enumerate()
    {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
            .await
            .unwrap_or_else(|_| panic!("connection {i} still open"));
        let rest = String::from_utf8_lossy(&rest);
        assert!(i == 3 || rest.is_empty(), "{i}: {read:?} {rest}");
    }
}

/// Whether the gateway has counted the stalled lane search of
/// `test_stalled_clients_do_not_keep_a_stopping_gateway_running` (two lane searches, one
/// lent request).
fn lane_body_seen(gw: &TestNode) -> bool {
    let text = gw.state.metrics.render(&gw.state);
    text.contains("sluice_gateway_lane_requests_total{path=\"fast_lane\"} 2")
        && text.contains("sluice_gateway_lane_requests_total{path=\"lent\"} 1")
}

/// A fake upstream whose search on an index named `slow` (a `_search` or an `_msearch`) runs
/// as its task `up:1` until [`Lingering::end`]: listed by `_tasks` with the search's
/// `X-Opaque-Id`, still listed after its `_cancel` (as OpenSearch's cooperative cancellation
/// leaves a search running), waited for by `GET _tasks/up:1?wait_for_completion=true` (a 408
/// when the wait runs out, as OpenSearch answers). Its HTTP answer never comes: the gateway
/// drops the request when it cancels it. Every other search is answered at once. A search on an
/// index named `broken` runs the same way, but its connection ends at once without an answer
/// (an upstream, or a proxy before it, that cut the exchange after reading the request).
struct Lingering {
    fake: Fake,
    ended: tokio::sync::watch::Sender<bool>,
}

impl Lingering {
    /// The running search's task ends.
    fn end(&self) {
        self.ended.send_replace(true);
    }

    /// Whether the gateway cancelled the upstream's task.
    fn cancelled(&self) -> bool {
        !self.fake.received_on("/_tasks/up:1/_cancel").is_empty()
    }

    /// Waits until the gateway cancelled the upstream's task.
    async fn wait_cancelled(&self) {
        common::wait_until(
            "the gateway cancelling the upstream's task",
            || self.cancelled(),
            String::new,
        )
        .await;
    }
}

async fn lingering_upstream() -> Lingering {
    let (ended, watch) = tokio::sync::watch::channel(false);
    let running: Arc<Mutex<Option<String>>> = Arc::default();
    let fake = fake(Arc::new(move |r: Received| {
        let (running, mut watch) = (running.clone(), watch.clone());
        Box::pin(async move {
            let gone = *watch.borrow();
            if r.uri.starts_with("/_tasks?") {
                let tasks = match running.lock().clone() {
                    Some(opaque) if !gone => json!({"up:1": {
                        "node": "up", "id": 1, "action": "indices:data/read/search",
                        "cancellable": true, "headers": {"X-Opaque-Id": opaque}}}),
                    _ => json!({}),
                };
                return axum::Json(json!({"nodes": {"up": {"tasks": tasks}}})).into_response();
            }
            if r.uri.starts_with("/_tasks/up:1/_cancel") {
                return axum::Json(json!({"nodes": {}})).into_response();
            }
            if let Some(query) = r.uri.strip_prefix("/_tasks/up:1?") {
                let ms: u64 = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("timeout="))
                    .and_then(|t| t.strip_suffix("ms"))
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(30_000);
                let waited =
                    tokio::time::timeout(Duration::from_millis(ms), watch.wait_for(|ended| *ended))
                        .await;
                return if waited.is_ok() {
                    axum::Json(json!({"completed": true, "task": {"node": "up", "id": 1}}))
                        .into_response()
                } else {
                    let error = json!({"error": {"type": "timeout_exception",
                        "reason": "Timed out waiting for completion of [up:1]"}, "status": 408});
                    (axum::http::StatusCode::REQUEST_TIMEOUT, axum::Json(error)).into_response()
                };
            }
            if r.uri.contains("slow") || r.uri.contains("broken") {
                let opaque = r.headers["x-opaque-id"].to_str().unwrap().to_string();
                *running.lock() = Some(opaque);
                if r.uri.contains("broken") {
                    // The connection ends without an answer, the search read and running.
                    panic!("the fake upstream drops the connection of a search it runs");
                }
                std::future::pending::<()>().await;
            }
            if r.uri.contains("_msearch") {
                let items = String::from_utf8_lossy(&r.body).lines().count() / 2;
                let responses = vec![json!({"status": 200, "hits": {"hits": []}}); items];
                return axum::Json(json!({"took": 1, "responses": responses})).into_response();
            }
            axum::Json(json!({"hits": {"hits": []}})).into_response()
        })
    }))
    .await;
    Lingering { fake, ended }
}

/// A search's slot held after the gateway cancelled its upstream task, as `label` names the
/// case: the task is listed cancelled and the group's next search (`node_limit` 1) refused
/// while the upstream still runs it; once it ends, every slot comes back, the next search
/// runs, and the stats count the failed search once.
async fn held_until_the_upstream_ends(gw: &TestNode, up: &Lingering, group: &str, label: &str) {
    up.wait_cancelled().await;
    let (_, task) = gateway_task(gw, "indices:data/read/search").await;
    assert_eq!(task["cancelled"], true, "{label}: {task}");
    let second = spawn_search(gw, group, "/fast/_search").await.unwrap();
    assert_eq!(second.status, 429, "{label}: {}", second.body);
    up.end();
    wait_nothing_held(gw).await;
    let third = spawn_search(gw, group, "/fast/_search").await.unwrap();
    assert_eq!(third.status, 200, "{label}: {}", third.body);
    let stats = group_stats(gw, group).await;
    assert_eq!(stats["total_completions"], 2, "{label}: {stats}");
    assert_eq!(stats["failures"], 1, "{label}: {stats}");
    assert_eq!(stats["total_throttled"], 1, "{label}: {stats}");
    assert_eq!(stats["executing"], 0, "{label}: {stats}");
}

/// Waits until the gateway holds no permit, lease or task: every slot given back.
async fn wait_nothing_held(gw: &TestNode) {
    common::wait_until(
        "the gateway giving back every slot and task",
        || {
            gw.state.workload.permits.num_buckets() == 0
                && gw.state.tasks.list().is_empty()
                && gw
                    .state
                    .cluster
                    .shared()
                    .coordinator
                    .slots_by_bucket()
                    .is_empty()
                && gw
                    .state
                    .cluster
                    .shared()
                    .owner
                    .leases_by_bucket()
                    .is_empty()
        },
        || format!("tasks {:?}", gw.state.tasks.list().len()),
    )
    .await;
}

/// A search of `group` on `path`, spawned.
fn spawn_search(gw: &TestNode, group: &str, path: &str) -> tokio::task::JoinHandle<Reply> {
    let rb = gw
        .client
        .post(gw.url(path))
        .header("workloadGroupId", group)
        .header("content-type", "application/json")
        .body("{}");
    tokio::spawn(async move { Reply::of(rb.send().await.expect("sent")).await })
}

/// The gateway's task of action `action` (`_tasks?detailed`), with its id.
async fn gateway_task(gw: &TestNode, action: &str) -> (String, Value) {
    let (s, b) = gw
        .req(
            "GET",
            &format!("/_tasks?actions={action}&detailed=true"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    b["nodes"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|n| n["tasks"].as_object().unwrap().iter())
        .find(|(_, t)| t["action"] == action)
        .map(|(id, t)| (id.clone(), t.clone()))
        .unwrap_or_else(|| panic!("the gateway lists no {action} task: {b}"))
}

/// A cancelled search of a group allowed one at a time (`throttling`) on the lane: the client
/// is answered at once, but the slot and the task are held (the task shown cancelled, as an
/// embedded node shows a cancelled search still running) until the upstream lists its task no
/// more; the next search is refused until then, and admitted after. The old code gave the
/// slot back at once: the second search got 200 while the upstream still ran the first.
async fn cancelled_lane_search_keeps_its_slot(throttling: Value) {
    let up = lingering_upstream().await;
    let gw = gateway(&up.fake.base, &["node.memory_budget=1tb"]).await;
    let group = enabled_group(
        &gw,
        json!({"name": "one", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.5},
               "throttling": throttling}),
    )
    .await;
    let first = spawn_search(&gw, &group, "/slow/_search");
    up.fake.wait_received("/slow/_search").await;
    let (id, _) = gateway_task(&gw, "indices:data/read/search").await;
    let (s, b) = gw.req("POST", &format!("/_tasks/{id}/_cancel"), None).await;
    assert_eq!(s, 200, "{b}");
    // The client's answer does not wait for the upstream (which still runs the search).
    let first = first.await.unwrap();
    assert_eq!(first.status, 500, "{}", first.body);
    assert_eq!(
        first.body["error"]["root_cause"][0]["type"], "task_cancelled_exception",
        "{}",
        first.body
    );
    up.wait_cancelled().await;
    // The task is still listed, cancelled, and holds the group's one slot.
    let (_, task) = gateway_task(&gw, "indices:data/read/search").await;
    assert_eq!(task["cancelled"], true, "{task}");
    let second = spawn_search(&gw, &group, "/fast/_search").await.unwrap();
    assert_eq!(second.status, 429, "{}", second.body);
    assert_eq!(
        second.body["error"]["type"], "rejected_execution_exception",
        "{}",
        second.body
    );
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["executing"], 1, "{stats}");
    // The upstream's search ends: the slot comes back, and the next search runs.
    up.end();
    wait_nothing_held(&gw).await;
    let third = spawn_search(&gw, &group, "/fast/_search").await.unwrap();
    assert_eq!(third.status, 200, "{}", third.body);
    assert_eq!(lane_counts(&gw).await.0, 3, "the searches took the lane");
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["total_completions"], 2, "{stats}");
    assert_eq!(stats["failures"], 1, "{stats}");
    assert_eq!(stats["total_throttled"], 1, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    // The upstream's task was cancelled once, and followed to its end.
    assert_eq!(up.fake.received_on("/_tasks/up:1/_cancel").len(), 1);
    assert!(!up.fake.received_on("wait_for_completion=true").is_empty());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_cancelled_lane_search_keeps_its_slot_until_the_upstream_ends_it() {
    cancelled_lane_search_keeps_its_slot(json!({"attribute": "group", "node_limit": 1})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_cancelled_lane_search_keeps_its_shared_lease_until_the_upstream_ends_it() {
    cancelled_lane_search_keeps_its_slot(json!({"attribute": "group", "shared_limit": 1})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_cancelled_msearch_on_the_general_path_keeps_its_slot_until_the_upstream_ends_it() {
    // An `_msearch` whose item the upstream runs is cancelled; the group queues, so the next
    // request (a scroll, on the general path too) waits in the queue, not for a 429, until the
    // upstream's task has ended. The old code admitted it at once.
    let up = lingering_upstream().await;
    let gw = gateway(&up.fake.base, &["node.memory_budget=1tb"]).await;
    let group = enabled_group(
        &gw,
        json!({"name": "queued", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.5},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 4}}),
    )
    .await;
    let body = common::ndjson(&[json!({}), json!({"query": {"match_all": {}}})]);
    let rb = gw
        .client
        .post(gw.url("/slow/_msearch"))
        .header("workloadGroupId", &group)
        .header("content-type", "application/x-ndjson")
        .body(body);
    let first = tokio::spawn(async move { Reply::of(rb.send().await.unwrap()).await });
    up.fake.wait_received("/slow/_msearch").await;
    let (s, b) = gw
        .req(
            "POST",
            "/_tasks/_cancel?actions=indices:data/read/msearch",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let first = first.await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.body["responses"][0]["error"]["root_cause"][0]["type"], "task_cancelled_exception",
        "{}",
        first.body
    );
    up.wait_cancelled().await;
    let (_, item) = gateway_task(&gw, "indices:data/read/search").await;
    assert_eq!(item["cancelled"], true, "{item}");
    let second = spawn_search(&gw, &group, "/fast/_search?scroll=1m");
    // Queued behind the held slot (the old code answered it at once).
    let mut queued = false;
    let start = Instant::now();
    while !queued && !second.is_finished() {
        assert!(start.elapsed() < common::SETTLE_WITHIN, "never queued");
        queued = group_stats(&gw, &group).await["queued_current"] == 1;
    }
    assert!(
        queued,
        "admitted while the upstream still ran the cancelled item"
    );
    up.end();
    let second = second.await.unwrap();
    assert_eq!(second.status, 200, "{}", second.body);
    wait_nothing_held(&gw).await;
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["total_completions"], 2, "{stats}");
    assert_eq!(stats["failures"], 1, "{stats}");
    assert_eq!(stats["total_queued"], 1, "{stats}");
    assert_eq!(stats["total_throttled"], 0, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_the_slot_of_a_client_that_left_is_held_until_the_upstream_ends_its_search() {
    // The client disconnects while the upstream runs its search: the gateway cancels the
    // upstream's task and keeps the slot (and the task, cancelled) until it has ended. The old
    // code gave it back as the client left.
    let up = lingering_upstream().await;
    let gw = gateway(&up.fake.base, &["node.memory_budget=1tb"]).await;
    let group = one_slot_group(&gw).await;
    let first = spawn_search(&gw, &group, "/slow/_search");
    up.fake.wait_received("/slow/_search").await;
    first.abort();
    held_until_the_upstream_ends(&gw, &up, &group, "one search").await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_cancelled_search_the_upstream_never_ends_frees_its_slot_after_the_bound() {
    // F1's bound: the upstream lists the cancelled search for good; the slot is held, then
    // given back once `backend.upstream.cancel_wait_timeout` passed. The old code gave it back
    // at once (the second search got 200).
    let up = lingering_upstream().await;
    let gw = gateway(
        &up.fake.base,
        &[
            "node.memory_budget=1tb",
            "backend.upstream.cancel_wait_timeout=3s",
        ],
    )
    .await;
    let group = one_slot_group(&gw).await;
    let first = spawn_search(
        &gw,
        &group,
        "/slow/_search?cancel_after_time_interval=100ms",
    );
    let first = first.await.unwrap();
    assert_eq!(first.status, 500, "{}", first.body);
    let cancelled_at = Instant::now();
    up.wait_cancelled().await;
    let second = spawn_search(&gw, &group, "/fast/_search").await.unwrap();
    // Decided well within the bound (the old code admitted it at once): refused.
    if cancelled_at.elapsed() < Duration::from_secs(2) {
        assert_eq!(second.status, 429, "{}", second.body);
    }
    wait_nothing_held(&gw).await;
    // The follower started before the client's answer went out: the bound is counted from
    // then, so the slot comes back a little less than 3 s after that answer at the earliest.
    assert!(
        cancelled_at.elapsed() >= Duration::from_millis(2500),
        "given back after {:?}, before the bound",
        cancelled_at.elapsed()
    );
    let third = spawn_search(&gw, &group, "/fast/_search").await.unwrap();
    assert_eq!(third.status, 200, "{}", third.body);
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["total_completions"], 2, "{stats}");
    assert_eq!(stats["failures"], 1, "{stats}");
    assert_eq!(stats["executing"], 0, "{stats}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_request_the_gateway_refuses_itself_gives_its_slot_back_at_once() {
    // A search whose head the gateway's own lines (its `Host`, the `X-Opaque-Id`) take over
    // the upstream's 16 KB is the gateway's 400: nothing of it was sent, so nothing can run
    // upstream, and its slot is given back at once (`cancelled.rs` F3). The old code followed
    // it as a cancelled search: two `_tasks` listings 300 ms apart, the slot held meanwhile.
    let up = fake(answer_with(|r| {
        if r.uri.starts_with("/_tasks?") {
            return axum::Json(json!({"nodes": {}})).into_response();
        }
        axum::Json(json!({"hits": {"hits": []}})).into_response()
    }))
    .await;
    for lane in ["true", "false"] {
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&up.base, &[&setting]).await;
        // The client's lines are 16,374 bytes as the upstream counts them (`host: x`,
        // `x-pad: …`, the type and the length): within the limit the gateway reads, and
        // over it with the gateway's `Host` and `X-Opaque-Id` lines.
        let fixed = "host: x".len()
            + "x-pad: ".len()
            + "content-type: application/json".len()
            + "content-length: 2".len();
        let sent = format!(
            "POST /logs/_search HTTP/1.1\r\nhost: x\r\nx-pad: {}\r\n\
             content-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}",
            "p".repeat(16_374 - fixed)
        );
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        stream.write_all(sent.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let (status, _, answer) = read_response(&mut stream, &mut buf).await;
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(status, 400, "lane {lane}: {answer}");
        assert_eq!(
            answer["error"]["type"], "too_long_http_header_exception",
            "lane {lane}: {answer}"
        );
        wait_nothing_held(&gw).await;
        // Given back without asking the upstream about it (the old code's follower listed
        // twice before it gave the slot back).
        assert!(
            up.received_on("/_tasks").is_empty(),
            "lane {lane}: the upstream was asked about a request never sent"
        );
        assert!(up.received_on("/logs/_search").is_empty(), "lane {lane}");
        let stats = default_stats(&gw).await;
        assert_eq!(stats["total_completions"], 1, "lane {lane}: {stats}");
        assert_eq!(stats["failures"], 1, "lane {lane}: {stats}");
        assert_eq!(stats["executing"], 0, "lane {lane}: {stats}");
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_search_whose_exchange_broke_off_keeps_its_slot_until_the_upstream_lists_none() {
    // The upstream reads the search, starts it, and its connection ends without an answer: a
    // 502, but the search was sent and runs upstream. Its slot is held, and its task listed
    // cancelled, until the upstream lists it no more, as a cancelled search's (`cancelled.rs`
    // F3, F4). The old code gave the slot back with the 502 (every 502 was taken for a request
    // that never reached the upstream), and the second search ran beside the first.
    for lane in ["true", "false"] {
        let up = lingering_upstream().await;
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&up.fake.base, &["node.memory_budget=1tb", &setting]).await;
        let group = one_slot_group(&gw).await;
        let first = spawn_search(&gw, &group, "/broken/_search").await.unwrap();
        assert_eq!(first.status, 502, "lane {lane}: {}", first.body);
        held_until_the_upstream_ends(&gw, &up, &group, &format!("lane {lane}")).await;
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_search_the_upstream_did_not_answer_in_time_is_listed_cancelled_while_held() {
    // A 504 (no answer within `request_timeout`) cancels the upstream's search and holds the
    // slot until it has ended; meanwhile the gateway lists the task `cancelled: true`, as it
    // lists one cancelled by `_tasks/_cancel` or its client leaving (`cancelled.rs` F4): on
    // the lane, on the general path, and an `_msearch` batch's item (not the msearch parent,
    // which its batches share). The old code listed it `cancelled: false`.
    for (lane, path) in [
        ("true", "/slow/_search"),
        ("false", "/slow/_search"),
        ("true", "/slow/_msearch"),
    ] {
        let up = lingering_upstream().await;
        let setting = format!("backend.upstream.fast_lane={lane}");
        let gw = gateway(&up.fake.base, &["node.memory_budget=1tb", &setting]).await;
        let group = one_slot_group(&gw).await;
        let (content_type, body) = if path.ends_with("_msearch") {
            let items = common::ndjson(&[json!({}), json!({"query": {"match_all": {}}})]);
            ("application/x-ndjson", items)
        } else {
            ("application/json", "{}".to_string())
        };
        let rb = gw
            .client
            .post(gw.url(path))
            .header("workloadGroupId", &group)
            .header("content-type", content_type)
            .body(body);
        let first = Reply::of(rb.send().await.unwrap()).await;
        let text = first.body.to_string();
        assert!(
            text.contains("upstream_timeout_exception"),
            "{path}, lane {lane}: {} {text}",
            first.status
        );
        up.wait_cancelled().await;
        let (_, task) = gateway_task(&gw, "indices:data/read/search").await;
        assert_eq!(task["cancelled"], true, "{path}, lane {lane}: {task}");
        let second = spawn_search(&gw, &group, "/fast/_search").await.unwrap();
        assert_eq!(second.status, 429, "{path}, lane {lane}: {}", second.body);
        up.end();
        wait_nothing_held(&gw).await;
        let stats = group_stats(&gw, &group).await;
        assert_eq!(
            stats["total_completions"], 1,
            "{path}, lane {lane}: {stats}"
        );
        assert_eq!(stats["failures"], 1, "{path}, lane {lane}: {stats}");
        assert_eq!(stats["executing"], 0, "{path}, lane {lane}: {stats}");
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_stopping_gateway_stops_following_a_cancelled_search() {
    // A cancelled `_msearch` whose search the upstream still runs: its follower holds the
    // slot and the task. Stopping the gateway stops the follower and gives them back
    // (`followers.rs` W1). The old code's follower outlived the stopped node, still listing
    // the upstream's tasks, its slot and task held — when it ran on the node's runtime, as
    // without the fast lane (off, or for an `https://` upstream); one spawned on a lane
    // thread ended with that thread's runtime.
    let up = lingering_upstream().await;
    let gw = gateway(
        &up.fake.base,
        &["node.memory_budget=1tb", "backend.upstream.fast_lane=false"],
    )
    .await;
    let body = common::ndjson(&[json!({}), json!({"query": {"match_all": {}}})]);
    let rb = gw
        .client
        .post(gw.url("/slow/_msearch"))
        .header("content-type", "application/x-ndjson")
        .body(body);
    let first = tokio::spawn(async move { Reply::of(rb.send().await.unwrap()).await });
    up.fake.wait_received("/slow/_msearch").await;
    let (s, b) = gw
        .req(
            "POST",
            "/_tasks/_cancel?actions=indices:data/read/msearch",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(first.await.unwrap().status, 200);
    up.wait_cancelled().await;
    let stats = default_stats(&gw).await;
    assert_eq!(stats["executing"], 1, "the item's slot, held: {stats}");
    assert_eq!(
        stats["total_completions"], 1,
        "counted once, when it settled: {stats}"
    );
    assert_eq!(stats["failures"], 1, "{stats}");
    let state = gw.state.clone();
    assert_eq!(state.tasks.list().len(), 1, "the item's task, held");
    gw.stop().await;
    assert!(
        state.tasks.list().is_empty(),
        "a follower outlived the stopped gateway"
    );
}
