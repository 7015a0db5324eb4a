//! Test harness: a real node on an ephemeral port with a temporary data folder, driven over
//! HTTP with reqwest. No sleeps: readiness is the bound listener itself.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sluice_server::config::{Config, gather};
use sluice_server::server::Node;
use tokio::sync::oneshot;

mod heavy;
pub mod signal;
pub mod stats;

/// A running node; dropping it without [`TestNode::stop`] aborts it.
pub struct TestNode {
    pub addr: SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    pub data: PathBuf,
    /// The node's state, for tests that look inside.
    #[allow(dead_code)]
    pub state: std::sync::Arc<sluice_server::state::AppState>,
    _tmp: Option<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// In gateway mode, the embedded node the gateway forwards to.
    pub upstream: Option<Box<TestNode>>,
}

/// The environment variable that runs the suites through a gateway: with
/// `SLUICE_TEST_BACKEND=upstream`, every node a test starts is a gateway (`backend.type:
/// upstream`) in front of an embedded node started with it, and the test talks to the gateway.
pub const BACKEND_ENV: &str = "SLUICE_TEST_BACKEND";

/// With `SLUICE_TEST_FAST_LANE=false` next to [`BACKEND_ENV`], the gateways the suites start
/// send every request through the general path (`backend.upstream.fast_lane=false`).
pub const FAST_LANE_ENV: &str = "SLUICE_TEST_FAST_LANE";

/// Whether the suites run through a gateway ([`BACKEND_ENV`]).
pub fn gateway_mode() -> bool {
    std::env::var(BACKEND_ENV).is_ok_and(|v| v == "upstream")
}

/// Builds a config for a node on 127.0.0.1:0 over `data`, with extra `-E` style settings.
pub fn config(data: &Path, extra: &[&str]) -> Config {
    let mut flags = vec![
        "http.port=0".to_string(),
        "transport.port=0".to_string(),
        format!("path.data={}", data.display()),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    let raw = gather(None, std::iter::empty(), &flags).expect("valid test settings");
    Config::from_raw(&raw).expect("valid test config")
}

impl TestNode {
    /// Starts a node on a fresh temporary data folder.
    pub async fn start() -> TestNode {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().to_path_buf();
        let mut node = TestNode::start_on(&data, &[]).await;
        node._tmp = Some(tmp);
        node
    }

    /// Starts a node on a fresh temporary data folder with extra settings.
    #[allow(dead_code)]
    pub async fn start_with(extra: &[&str]) -> TestNode {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().to_path_buf();
        let mut node = TestNode::start_on(&data, extra).await;
        node._tmp = Some(tmp);
        node
    }

    /// Starts a node on a fresh temporary data folder holding the heavy index
    /// ([`seed_heavy`]), with extra settings.
    pub async fn start_heavy(extra: &[&str]) -> TestNode {
        let tmp = tempfile::tempdir().expect("tempdir");
        seed_heavy(tmp.path()).await;
        let mut node = TestNode::start_on(tmp.path(), extra).await;
        node._tmp = Some(tmp);
        node
    }

    /// Starts a node on a fresh temporary data folder whose metastore is `metastore_uri` (a
    /// PostgreSQL URL, e.g. from `sluice_meta::test_suite::fresh_postgres_url`), with extra
    /// settings: several such nodes on one URL form a cluster's shared metastore.
    pub async fn start_on_metastore(metastore_uri: &str, extra: &[&str]) -> TestNode {
        let setting = format!("metastore.uri={metastore_uri}");
        let mut settings: Vec<&str> = vec![&setting];
        settings.extend_from_slice(extra);
        TestNode::start_with(&settings).await
    }

    /// Starts a node with exactly the settings `extra` on a fresh temporary data folder, in
    /// either mode (tests of a gateway itself start theirs with this).
    pub async fn start_plain(extra: &[&str]) -> TestNode {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().to_path_buf();
        let mut node = TestNode::start_embedded_on(&data, extra).await;
        node._tmp = Some(tmp);
        node
    }

    /// Starts a node on an existing data folder (for restart tests); in gateway mode
    /// ([`gateway_mode`]) a gateway in front of an embedded node on that folder.
    pub async fn start_on(data: &Path, extra: &[&str]) -> TestNode {
        if gateway_mode() {
            TestNode::start_gateway_on(data, extra).await
        } else {
            TestNode::start_embedded_on(data, extra).await
        }
    }

    /// Starts a gateway in front of a new embedded node on `data` (the gateway keeps its own
    /// state in `data/gateway`). The upstream gets `extra` but the `auth.*` and
    /// `backend.upstream.*` settings, which are the gateway's; the gateway gets all of `extra`.
    pub async fn start_gateway_on(data: &Path, extra: &[&str]) -> TestNode {
        let upstream_extra: Vec<&str> = extra
            .iter()
            .copied()
            // Authentication and the clients' read timeout are the gateway's: the upstream's
            // clients are the gateway's pooled connections. So is how it reaches and measures
            // its upstream (an embedded node refuses `backend.upstream.*`).
            .filter(|s| {
                !s.starts_with("auth.")
                    && !s.starts_with("http.read_timeout")
                    && !s.starts_with("backend.upstream.")
            })
            .collect();
        let upstream = TestNode::start_embedded_on(data, &upstream_extra).await;
        let hosts = format!("backend.upstream.hosts={}", upstream.base);
        let mut gw_extra = vec!["backend.type=upstream", hosts.as_str()];
        if std::env::var(FAST_LANE_ENV).is_ok_and(|v| v == "false") {
            gw_extra.push("backend.upstream.fast_lane=false");
        }
        gw_extra.extend_from_slice(extra);
        let mut gw = TestNode::start_embedded_on(&data.join("gateway"), &gw_extra).await;
        gw.data = data.to_path_buf();
        gw.upstream = Some(Box::new(upstream));
        gw
    }

    /// Starts a node of the settings `extra` on `data`, whatever the mode.
    pub async fn start_embedded_on(data: &Path, extra: &[&str]) -> TestNode {
        let node = Node::start(config(data, extra)).await.expect("node starts");
        let addr = node.local_addr().expect("bound");
        let state = node.state().clone();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(node.serve(async move {
            let _ = rx.await;
        }));
        TestNode {
            addr,
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            data: data.to_path_buf(),
            state,
            _tmp: None,
            stop: Some(tx),
            task: Some(task),
            upstream: None,
        }
    }

    /// Stops the node gracefully and waits for it; returns the temp dir so data outlives it.
    pub async fn stop(mut self) -> Option<tempfile::TempDir> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("node task")
                .expect("node stopped cleanly");
        }
        if let Some(upstream) = self.upstream.take() {
            Box::pin(upstream.stop()).await;
        }
        self._tmp.take()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Waits for background task `id` (`GET _tasks/{id}?wait_for_completion=true`) and
    /// answers its completed record, after checking the 200 and `completed: true`.
    pub async fn task_result(&self, id: &str) -> Value {
        let (s, done) = self
            .req(
                "GET",
                &format!("/_tasks/{id}?wait_for_completion=true"),
                None,
            )
            .await;
        assert_eq!(s, 200, "{done}");
        assert_eq!(done["completed"], true, "{done}");
        done
    }

    /// The running tasks of `actions` (a pattern `_tasks` takes) by id, as `_tasks?detailed`
    /// lists them.
    pub async fn task_entries(&self, actions: &str) -> Vec<(String, Value)> {
        let (s, b) = self
            .req("GET", &format!("/_tasks?detailed&actions={actions}"), None)
            .await;
        assert_eq!(s, 200, "{b}");
        b["nodes"]
            .as_object()
            .into_iter()
            .flat_map(|n| n.values())
            .flat_map(|n| n["tasks"].as_object().into_iter().flatten())
            .map(|(id, t)| (id.clone(), t.clone()))
            .collect()
    }

    /// Sends a request with an optional JSON body; returns status and parsed JSON (or Null).
    pub async fn req(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self.client.request(m, self.url(path));
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = rb.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Sends a raw body (NDJSON, malformed JSON …).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let resp = self
            .client
            .request(m, self.url(path))
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .expect("request sent");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// How many times a dropped node's data folder is removed again while files appear in it: each
/// try removes what the last one met, and the writers of a dropped node stop within a few.
const REMOVE_TRIES: usize = 100;

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // The temporary data folder is removed until it is gone: a refresh still committing,
        // or an index's merges (they run on after its writer), can add files while the
        // removal walks the folder, which stopped it half-way and left the rest behind, a
        // handful each run. Once removed, a late write finds no folder and creates none.
        if let Some(tmp) = self._tmp.take() {
            let path = tmp.path().to_path_buf();
            let mut removed = tmp.close();
            for _ in 0..REMOVE_TRIES {
                match removed {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {}
                    _ => break,
                }
                removed = std::fs::remove_dir_all(&path);
            }
        }
    }
}

/// How long [`wait_until`] waits for work that ends on its own (a disconnected request's
/// search finishing): generous, since a loaded CI machine runs the search threads slowly.
pub const SETTLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Yields until `done` holds, or panics after [`SETTLE_WITHIN`] with `what` and `state()`.
/// The bound is wall-clock time, not a number of yields: how many yields a search takes
/// depends on how busy the machine is.
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool, state: impl Fn() -> String) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < SETTLE_WITHIN,
            "{what}: not within {SETTLE_WITHIN:?}; {}",
            state()
        );
        tokio::task::yield_now().await;
    }
}

/// [`wait_until`] for a condition read by a request: polls `check` until it answers `Some`,
/// yielding between polls, or panics after [`SETTLE_WITHIN`] with `what` and the last answer
/// `state` gives.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = std::time::Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(state) => assert!(
                start.elapsed() < SETTLE_WITHIN,
                "{what}: not within {SETTLE_WITHIN:?}; {state}"
            ),
        }
        tokio::task::yield_now().await;
    }
}

/// Asserts an OpenSearch error body: status, `error.type` and root cause type.
pub fn assert_error(resp: &(u16, Value), status: u16, ty: &str) {
    assert_eq!(resp.0, status, "status of {}", resp.1);
    assert_eq!(resp.1["status"], status, "body status of {}", resp.1);
    let root = &resp.1["error"]["root_cause"][0]["type"];
    assert!(
        resp.1["error"]["type"] == ty || root == ty,
        "expected type {ty} in {}",
        resp.1
    );
    assert!(
        resp.1["error"]["reason"].is_string(),
        "reason missing in {}",
        resp.1
    );
}

/// Joins JSON lines into an NDJSON body with the trailing newline the bulk API requires.
pub fn ndjson(lines: &[Value]) -> String {
    let mut out = String::new();
    for line in lines {
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// Percent-encodes a query-string or path component (everything but unreserved characters).
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `_id`s of a search response's hits, in response order.
pub fn hit_ids(resp: &Value) -> Vec<String> {
    resp["hits"]["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits array in {resp}"))
        .iter()
        .map(|h| {
            h["_id"]
                .as_str()
                .unwrap_or_else(|| panic!("hit without _id in {resp}"))
                .to_string()
        })
        .collect()
}

/// Sorts ids numerically when they are numbers, else lexically, for order-free comparisons.
pub fn sorted_ids(mut ids: Vec<String>) -> Vec<String> {
    ids.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    ids
}

impl TestNode {
    /// Sends a raw body as `application/json` (for malformed JSON).
    pub async fn raw_json(
        &self,
        method: &str,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let resp = self
            .client
            .request(m, self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request sent");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Sends NDJSON `lines` to a bulk endpoint (`/_bulk`, `/{index}/_bulk?refresh=true` …),
    /// asserts a 200 and returns the response body.
    pub async fn bulk(&self, path: &str, lines: &[Value]) -> Value {
        let (status, body) = self.raw("POST", path, ndjson(lines)).await;
        assert_eq!(status, 200, "bulk to {path} failed: {body}");
        body
    }

    /// Refreshes `index` (`POST /{index}/_refresh`), asserting a 200.
    pub async fn refresh(&self, index: &str) {
        let (status, body) = self.req("POST", &format!("/{index}/_refresh"), None).await;
        assert_eq!(status, 200, "refresh of {index} failed: {body}");
    }

    /// Runs `POST /{index}/_search` with `body`, asserting a 200; returns the response.
    pub async fn search(&self, index: &str, body: Value) -> Value {
        let (status, resp) = self
            .req("POST", &format!("/{index}/_search"), Some(body.clone()))
            .await;
        assert_eq!(status, 200, "search {body} on {index} failed: {resp}");
        resp
    }

    /// `_count` of `index` with an optional query, asserting a 200.
    pub async fn count(&self, index: &str, query: Option<Value>) -> u64 {
        let body = query.map(|q| serde_json::json!({ "query": q }));
        let (status, resp) = self.req("POST", &format!("/{index}/_count"), body).await;
        assert_eq!(status, 200, "count on {index} failed: {resp}");
        resp["count"]
            .as_u64()
            .unwrap_or_else(|| panic!("no count in {resp}"))
    }

    /// Asserts the node still serves: `GET /` answers 200 with its cluster name.
    pub async fn assert_alive(&self) {
        let (status, body) = self.req("GET", "/", None).await;
        assert_eq!(status, 200, "node stopped serving: {body}");
        assert!(
            body["cluster_name"].is_string(),
            "GET / lost its shape: {body}"
        );
    }
}

pub use heavy::{HEAVY_DOCS, heavy_index_at, heavy_query, seed_heavy};

pub async fn heavy_index(node: &TestNode) {
    heavy_index_as(node, &[]).await;
}

/// Builds the heavy index sending `headers` (credentials on nodes that authenticate).
pub async fn heavy_index_as(node: &TestNode, headers: &[(&str, &str)]) {
    heavy_index_at(&node.client, &node.base, headers).await;
}

/// A response with its headers.
#[allow(dead_code)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

#[allow(dead_code)]
impl Reply {
    /// Reads a response whole: status, headers and body (JSON, else text).
    pub async fn of(resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        Reply {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }

    /// Every value of header `name`.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// The proxy headers of `root`, who holds the admin role, on nodes with `auth.type=proxy`
/// (ignored by nodes without authentication).
#[allow(dead_code)]
pub const ADMIN: [(&str, &str); 2] = [("x-proxy-user", "root"), ("x-proxy-roles", "admin")];

#[allow(dead_code)]
impl TestNode {
    /// Creates a workload group from `body` as [`ADMIN`], asserts it was created, and returns
    /// its `_id`.
    pub async fn create_group(&self, body: Value) -> String {
        let r = self
            .req_with("PUT", "/_wlm/workload_group", Some(body), &ADMIN)
            .await;
        assert_eq!(r.status, 200, "creating a workload group: {}", r.body);
        r.body["_id"]
            .as_str()
            .expect("a created group has an _id")
            .to_string()
    }

    /// Sends a request with extra headers; returns status, headers and body (JSON or text).
    pub async fn req_with(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self.client.request(m, self.url(path));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        Reply::of(rb.send().await.expect("request sent")).await
    }
}

/// Reads `stream` until the server closes it (end of stream or an error); answers what was
/// read. Panics when it is still open after 10 s.
pub async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the connection is still open after 10 s; read: {}",
        String::from_utf8_lossy(&got)
    );
    got
}

/// Reads one HTTP/1.1 response from `stream` (after what `buf` holds): status, headers with
/// lowercase names, and the body (framed by a length or chunks); what was read past it stays in
/// `buf`.
pub async fn read_response(
    stream: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    async fn fill(stream: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) {
        use tokio::io::AsyncReadExt;
        let mut chunk = [0u8; 8192];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an answer within 10 s")
            .expect("the connection stays up");
        assert!(
            n > 0,
            "the connection closed mid-answer: {:?}",
            String::from_utf8_lossy(buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        fill(stream, buf).await;
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if let Some(len) = get("content-length") {
        let len: usize = len.parse().unwrap();
        while buf.len() < len {
            fill(stream, buf).await;
        }
        body = buf.drain(..len).collect();
    } else if get("transfer-encoding").as_deref() == Some("chunked") {
        loop {
            let line_end = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                fill(stream, buf).await;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16).unwrap();
            while buf.len() < line_end + 2 + size + 2 {
                fill(stream, buf).await;
            }
            body.extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            buf.drain(..line_end + 2 + size + 2);
            if size == 0 {
                break;
            }
        }
    }
    (status, headers, body)
}

/// A raw answer: status, `Content-Type` and body text.
#[allow(dead_code)]
pub struct Raw {
    pub status: u16,
    pub content_type: String,
    pub text: String,
}

#[allow(dead_code)]
impl Raw {
    /// The body as JSON, or a panic naming what came.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.content_type, self.text))
    }
}

/// Sends `method path` to `node` with `headers` and a text `body`; answers it raw.
#[allow(dead_code)]
pub async fn send_raw(
    node: &TestNode,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Raw {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut rb = node.client.request(m, node.url(path));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    if let Some(b) = body {
        rb = rb.body(b.to_string());
    }
    let resp = rb.send().await.expect("request sent");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = resp.text().await.expect("body");
    Raw {
        status,
        content_type,
        text,
    }
}
