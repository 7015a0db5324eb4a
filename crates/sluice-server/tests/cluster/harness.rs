//! A cluster of real `sluice` processes on loopback: each node a child process with its own
//! data folder, all sharing one fresh PostgreSQL database (from the throwaway server that
//! `scripts/test.sh` starts), joined through `discovery.seed_hosts`. Ports are picked by the
//! nodes (`http.port=0`, `transport.port=0`) and read from their start-up log. Every wait
//! polls with a deadline; nothing sleeps a fixed time. A cluster of gateways
//! ([`TestCluster::start_gateways`]) has every node forward to one more process, an embedded
//! node of its own (SQLite) metastore holding the heavy index: the upstream.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a node may take to start (open its stores, bind, log its addresses).
const START_WITHIN: Duration = Duration::from_secs(60);
/// How long joining may take once every node runs: a few gossip rounds, generously.
pub const JOIN_WITHIN: Duration = Duration::from_secs(20);
/// The pause between two polls of a condition.
const POLL: Duration = Duration::from_millis(50);

/// One running node process.
pub struct Proc {
    child: Child,
    /// `node.name`.
    pub name: String,
    /// Where it serves HTTP.
    pub http: SocketAddr,
    /// Where its peers reach its RPC and gossip: the published transport address, which is
    /// the bound one unless that is a wildcard (`transport.host=0.0.0.0`).
    pub transport: SocketAddr,
    /// Where its transport's sockets are bound.
    pub bound_transport: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Proc {
    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// What the node logged so far (printed when a test fails).
    pub fn log(&self) -> String {
        self.log.lock().clone()
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`, `TERM`) to the process, waiting for a stop or
    /// a continue to be taken (`signal.rs`).
    pub fn signal(&self, signal: &str) {
        crate::signal::send(self.pid(), signal, &self.name);
    }

    /// Waits until the process exits, within `within`; its exit status.
    pub async fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.expect("wait for the node"),
            Err(_) => panic!(
                "{} did not exit within {within:?}; its log:\n{}",
                self.name,
                self.log()
            ),
        }
    }
}

/// Several nodes and their shared metastore.
pub struct TestCluster {
    nodes: Vec<Option<Proc>>,
    /// The metastore every node uses.
    pub metastore_uri: String,
    /// `cluster.name`.
    pub cluster_name: String,
    tmp: tempfile::TempDir,
    pub client: reqwest::Client,
    /// Every node's `discovery.seed_hosts` names only an address where nothing listens:
    /// the nodes find each other through the metastore or not at all.
    unseeded: bool,
    /// The upstream every node forwards to, in a cluster of gateways.
    upstream: Option<Proc>,
    /// Settings every node starts with besides the harness's own.
    flags: Vec<String>,
    /// The credentials of the harness's own requests (`user`, `password`), when the nodes
    /// authenticate.
    auth: Option<(String, String)>,
}

/// What a cluster of gateways starts with: settings for every gateway, and the credentials
/// the harness's own requests send (an admin's, when the gateways authenticate).
#[derive(Default)]
pub struct GatewayOptions {
    /// `-E` settings of every gateway.
    pub flags: Vec<String>,
    /// `(user, password)` of the harness's requests.
    pub auth: Option<(String, String)>,
}

impl TestCluster {
    /// Starts `n` nodes on one fresh PostgreSQL database and waits until each sees all `n`.
    pub async fn start(n: usize, test: &str) -> TestCluster {
        let url = sluice_meta::test_suite::fresh_postgres_url(test).await;
        TestCluster::start_on(n, test, url).await
    }

    /// Starts `n` nodes on the metastore at `metastore_uri`.
    pub async fn start_on(n: usize, test: &str, metastore_uri: String) -> TestCluster {
        TestCluster::launch(n, test, metastore_uri, false).await
    }

    /// Starts `n` nodes on one fresh PostgreSQL database, each with the settings `flags`
    /// besides the harness's own, and waits until each sees all `n`.
    pub async fn start_with_flags(n: usize, test: &str, flags: &[&str]) -> TestCluster {
        let url = sluice_meta::test_suite::fresh_postgres_url(test).await;
        let mut c = TestCluster::empty(test, url);
        c.flags = flags.iter().map(|f| f.to_string()).collect();
        c.spawn_all(n).await;
        c
    }

    /// Starts `n` nodes on one fresh PostgreSQL database, each holding its own copy of the
    /// heavy index (`crate::heavy::seed_heavy`), and waits until each sees all `n`.
    pub async fn start_heavy(n: usize, test: &str) -> TestCluster {
        let url = sluice_meta::test_suite::fresh_postgres_url(test).await;
        TestCluster::start_heavy_on(n, test, url).await
    }

    /// [`TestCluster::start_heavy`] on the metastore at `metastore_uri`.
    pub async fn start_heavy_on(n: usize, test: &str, metastore_uri: String) -> TestCluster {
        TestCluster::launch(n, test, metastore_uri, true).await
    }

    /// [`TestCluster::start_heavy`] with seeds that name no node (a typo in every node's
    /// `discovery.seed_hosts`): the nodes must find each other through the metastore.
    pub async fn start_heavy_unseeded(n: usize, test: &str) -> TestCluster {
        let url = sluice_meta::test_suite::fresh_postgres_url(test).await;
        TestCluster::launch_with(n, test, url, true, true).await
    }

    /// [`TestCluster::start_heavy`] with `each[i]` added to node `i`'s settings, calling
    /// `started` with each node once it runs, before the next starts (to point a relay at it).
    pub async fn start_heavy_each(
        test: &str,
        each: &[Vec<String>],
        mut started: impl FnMut(usize, &Proc),
    ) -> TestCluster {
        let url = sluice_meta::test_suite::fresh_postgres_url(test).await;
        let mut c = TestCluster::empty(test, url);
        for (i, extra) in each.iter().enumerate() {
            crate::heavy::seed_heavy(&c.data(i)).await;
            let node = c.spawn_with(i, extra).await;
            started(i, &node);
            c.nodes.push(Some(node));
        }
        for i in 0..each.len() {
            c.wait_members(i, each.len(), JOIN_WITHIN).await;
        }
        c
    }

    /// Starts `n` gateways (`backend.type: upstream`) on one fresh PostgreSQL database, in front
    /// of one embedded node holding the heavy index, and waits until each sees all `n`.
    pub async fn start_gateways(n: usize, test: &str, options: GatewayOptions) -> TestCluster {
        let url = sluice_meta::test_suite::fresh_postgres_url(test).await;
        let mut c = TestCluster::empty(test, url);
        let data = c.tmp.path().join("upstream");
        crate::heavy::seed_heavy(&data).await;
        let upstream = spawn_node(
            "upstream",
            &data,
            &[
                "http.port=0".to_string(),
                "transport.port=0".to_string(),
                format!("path.data={}", data.display()),
                "node.name=upstream".to_string(),
                format!("cluster.name=u-{test}"),
            ],
        )
        .await;
        c.flags = vec![
            "backend.type=upstream".to_string(),
            format!("backend.upstream.hosts=http://{}", upstream.http),
        ];
        c.flags.extend(options.flags);
        c.auth = options.auth;
        c.upstream = Some(upstream);
        c.spawn_all(n).await;
        c
    }

    fn empty(test: &str, metastore_uri: String) -> TestCluster {
        TestCluster {
            nodes: Vec::new(),
            metastore_uri,
            cluster_name: format!("c-{test}"),
            tmp: tempfile::tempdir().expect("tempdir"),
            client: reqwest::Client::new(),
            unseeded: false,
            upstream: None,
            flags: Vec::new(),
            auth: None,
        }
    }

    async fn launch(n: usize, test: &str, metastore_uri: String, heavy: bool) -> TestCluster {
        TestCluster::launch_with(n, test, metastore_uri, heavy, false).await
    }

    async fn launch_with(
        n: usize,
        test: &str,
        metastore_uri: String,
        heavy: bool,
        unseeded: bool,
    ) -> TestCluster {
        let mut c = TestCluster::empty(test, metastore_uri);
        c.unseeded = unseeded;
        if heavy {
            for i in 0..n {
                crate::heavy::seed_heavy(&c.data(i)).await;
            }
        }
        c.spawn_all(n).await;
        c
    }

    /// Starts nodes `0..n` and waits until each sees all `n`.
    async fn spawn_all(&mut self, n: usize) {
        for i in 0..n {
            let node = self.spawn(i).await;
            self.nodes.push(Some(node));
        }
        for i in 0..n {
            self.wait_members(i, n, JOIN_WITHIN).await;
        }
    }

    fn data(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("node-{i}"))
    }

    /// Starts node `i` on its data folder, seeded with node 0 (unless it is node 0).
    async fn spawn(&self, i: usize) -> Proc {
        self.spawn_with(i, &[]).await
    }

    /// [`TestCluster::spawn`] with `extra` settings.
    async fn spawn_with(&self, i: usize, extra: &[String]) -> Proc {
        let seeds: Vec<String> = if self.unseeded {
            // Port 1 on loopback: nothing of the test listens there.
            vec!["127.0.0.1:1".to_string()]
        } else {
            self.nodes
                .iter()
                .flatten()
                .map(|p| p.transport.to_string())
                .collect()
        };
        let mut flags = vec![
            "http.port=0".to_string(),
            "transport.port=0".to_string(),
            format!("path.data={}", self.data(i).display()),
            format!("node.name=node-{i}"),
            format!("cluster.name={}", self.cluster_name),
            format!("metastore.uri={}", self.metastore_uri),
        ];
        if !seeds.is_empty() {
            flags.push(format!("discovery.seed_hosts={}", seeds.join(",")));
        }
        flags.extend(self.flags.iter().cloned());
        flags.extend(extra.iter().cloned());
        spawn_node(&format!("node-{i}"), &self.data(i), &flags).await
    }

    /// Starts another node on a new data folder holding a copy of node `i`'s `node.json`
    /// (its node id), joined to the cluster as any node: the cloned-data-folder mistake.
    pub async fn spawn_copy_of(&self, i: usize) -> Proc {
        let data = self.tmp.path().join(format!("copy-of-node-{i}"));
        std::fs::create_dir_all(&data).expect("data folder");
        std::fs::copy(self.data(i).join("node.json"), data.join("node.json")).expect("node.json");
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .flatten()
            .map(|p| p.transport.to_string())
            .collect();
        let flags = vec![
            "http.port=0".to_string(),
            "transport.port=0".to_string(),
            format!("path.data={}", data.display()),
            format!("node.name=copy-of-node-{i}"),
            format!("cluster.name={}", self.cluster_name),
            format!("metastore.uri={}", self.metastore_uri),
            format!("discovery.seed_hosts={}", seeds.join(",")),
        ];
        spawn_node(&format!("copy-of-node-{i}"), &data, &flags).await
    }

    /// Starts a node that is not one of the cluster's numbered nodes: `name` on a data folder
    /// of its own, on this cluster's metastore and `cluster.name`, with `seeds` as its
    /// `discovery.seed_hosts` (none when empty) and `extra` flags. The caller owns it.
    pub async fn spawn_other(&self, name: &str, seeds: &[String], extra: &[String]) -> Proc {
        let data = self.tmp.path().join(name);
        let mut flags = vec![
            "http.port=0".to_string(),
            "transport.port=0".to_string(),
            format!("path.data={}", data.display()),
            format!("node.name={name}"),
            format!("cluster.name={}", self.cluster_name),
            format!("metastore.uri={}", self.metastore_uri),
        ];
        if !seeds.is_empty() {
            flags.push(format!("discovery.seed_hosts={}", seeds.join(",")));
        }
        flags.extend(extra.iter().cloned());
        spawn_node(name, &data, &flags).await
    }

    /// Starts a one-node embedded cluster `name` of its own (its own SQLite metastore and
    /// `cluster.name`): an upstream for gateway nodes. The caller owns it.
    pub async fn spawn_standalone(&self, name: &str) -> Proc {
        let data = self.tmp.path().join(name);
        let flags = vec![
            "http.port=0".to_string(),
            "transport.port=0".to_string(),
            format!("path.data={}", data.display()),
            format!("node.name={name}"),
            format!("cluster.name={name}"),
        ];
        spawn_node(name, &data, &flags).await
    }

    /// `GET path` on the node at `http`, wherever it runs; (status, JSON or text body).
    pub async fn get_at(&self, http: SocketAddr, path: &str) -> (u16, Value) {
        let resp = self
            .client
            .get(format!("http://{http}{path}"))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path} on {http}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Node `i` (panics if it is stopped).
    pub fn node(&self, i: usize) -> &Proc {
        self.nodes[i].as_ref().expect("node is running")
    }

    /// Kills node `i` with SIGKILL and reaps it.
    pub async fn kill9(&mut self, i: usize) {
        let mut p = self.nodes[i].take().expect("node is running");
        p.signal("KILL");
        let _ = p.child.wait().await;
    }

    /// Asks node `i` to stop (SIGTERM) and waits until it has exited.
    pub async fn terminate(&mut self, i: usize) {
        let mut p = self.nodes[i].take().expect("node is running");
        p.signal("TERM");
        p.wait_exit(Duration::from_secs(60)).await;
    }

    /// Starts node `i` again on the same data folder (same node id).
    pub async fn restart(&mut self, i: usize) {
        self.restart_with(i, &[]).await;
    }

    /// [`TestCluster::restart`] with `extra` settings.
    pub async fn restart_with(&mut self, i: usize, extra: &[String]) {
        assert!(self.nodes[i].is_none(), "node {i} is still running");
        let p = self.spawn_with(i, extra).await;
        self.nodes[i] = Some(p);
    }

    /// Node `i`'s own entry of a `_wlm/stats` answer for group `id`.
    pub async fn local_group_stats(&self, i: usize, id: &str) -> Value {
        let (s, b) = self.get(i, "/_wlm/_local/stats").await;
        assert_eq!(s, 200, "{b}");
        crate::stats::group_of(&b, id)
    }

    /// `method path` on node `i` with an optional JSON body; (status, JSON or text body).
    pub async fn req(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let auth = self.auth.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
        self.req_as(i, auth, method, path, body).await
    }

    /// [`TestCluster::req`] as user `auth` (`(user, password)`; `None`: no credentials).
    pub async fn req_as(
        &self,
        i: usize,
        auth: Option<(&str, &str)>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("http://{}{path}", self.node(i).http);
        let mut rb = self
            .client
            .request(method.parse().expect("method"), url)
            .timeout(Duration::from_secs(60));
        if let Some((user, password)) = auth {
            rb = rb.basic_auth(user, Some(password));
        }
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path} on node {i}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// `GET path` on node `i`.
    pub async fn get(&self, i: usize, path: &str) -> (u16, Value) {
        self.req(i, "GET", path, None).await
    }

    /// The node names node `i` lists in `_cat/nodes` (a gateway's, which are the upstream's,
    /// in `_nodes/http`).
    pub async fn member_names(&self, i: usize) -> Vec<String> {
        if self.upstream.is_some() {
            let (status, body) = self.get(i, "/_nodes/http").await;
            assert_eq!(status, 200, "{body}");
            let mut names: Vec<String> = body["nodes"]
                .as_object()
                .expect("nodes")
                .values()
                .map(|n| n["name"].as_str().expect("name").to_string())
                .collect();
            names.sort();
            return names;
        }
        let (status, body) = self.get(i, "/_cat/nodes?format=json&h=name").await;
        assert_eq!(status, 200, "{body}");
        let mut names: Vec<String> = body
            .as_array()
            .expect("array")
            .iter()
            .map(|r| r["name"].as_str().expect("name").to_string())
            .collect();
        names.sort();
        names
    }

    /// Waits until node `i` lists `n` members; panics with its log after `within`.
    pub async fn wait_members(&self, i: usize, n: usize, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let names = self.member_names(i).await;
            if names.len() == n {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "node {i} lists {names:?}, not {n} members, after {within:?}; its log:\n{}",
                self.node(i).log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls `check` until it returns `Some`, or panics naming `what` after `within`.
    pub async fn eventually<T, F, Fut>(&self, within: Duration, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let start = Instant::now();
        loop {
            if let Some(v) = check().await {
                return v;
            }
            assert!(start.elapsed() < within, "{what}: not within {within:?}");
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Starts a `sluice serve` process with `-E` flags and waits for its HTTP and transport
/// addresses in its log.
pub async fn spawn_node(name: &str, data: &Path, flags: &[String]) -> Proc {
    std::fs::create_dir_all(data).expect("data folder");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("serve");
    for f in flags {
        cmd.arg("-E").arg(f);
    }
    // The node reads every SLUICE_* variable as a setting; the test's own (the PostgreSQL
    // URL) are not settings.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_")) {
        cmd.env_remove(k);
    }
    cmd.env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("sluice starts");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let sink = log.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().push_str(&line);
            sink.lock().push('\n');
            let _ = tx.send(line);
        }
    });
    let mut http = None;
    let mut transport = None;
    let mut bound_transport = None;
    let deadline = tokio::time::Instant::now() + START_WITHIN;
    while http.is_none() || transport.is_none() {
        let line = tokio::time::timeout_at(deadline, rx.recv()).await;
        let Ok(Some(line)) = line else {
            panic!(
                "{name} did not start within {START_WITHIN:?}; its log:\n{}",
                log.lock()
            );
        };
        if let Some(a) = addr_after(&line, "listening on http://") {
            http = Some(a);
        }
        if let Some(a) = addr_after(&line, "transport on ") {
            transport = addr_after(&line, "publish_address=").or(Some(a));
            bound_transport = Some(a);
        }
    }
    Proc {
        child,
        name: name.to_string(),
        http: http.expect("http"),
        transport: transport.expect("transport"),
        bound_transport: bound_transport.expect("transport"),
        log,
    }
}

fn addr_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.split(|c: char| c.is_whitespace()).next()?.parse().ok()
}

pub use crate::heavy::heavy_query;

impl TestCluster {
    /// Starts `POST path` with `body` and `headers` on node `i` in the background; the task
    /// answers (status, body).
    pub fn start_search(
        &self,
        i: usize,
        path: &str,
        body: Value,
        headers: &[(&str, &str)],
    ) -> tokio::task::JoinHandle<(u16, Value)> {
        let mut rb = self
            .client
            .post(format!("http://{}{path}", self.node(i).http))
            .header("content-type", "application/json")
            .timeout(Duration::from_secs(120))
            .body(body.to_string());
        rb = self.with_auth(rb);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        tokio::spawn(async move {
            match rb.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let v = resp.json().await.unwrap_or(Value::Null);
                    (status, v)
                }
                Err(_) => (0, Value::Null),
            }
        })
    }

    /// `method path` on node `i` with extra headers.
    pub async fn req_with(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut rb = self
            .client
            .request(
                method.parse().expect("method"),
                format!("http://{}{path}", self.node(i).http),
            )
            .timeout(Duration::from_secs(60));
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        rb = self.with_auth(rb);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        let resp = rb.send().await.expect("sent");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

impl TestCluster {
    /// `rb` with the harness's credentials, when the nodes authenticate.
    fn with_auth(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Some((user, password)) => rb.basic_auth(user, Some(password)),
            None => rb,
        }
    }
}
