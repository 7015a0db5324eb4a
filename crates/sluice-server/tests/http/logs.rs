//! The node's logs over a real `sluice serve` process (issue #16): with `logger.format: json`
//! every stderr line is a JSON object, and each throttle decision writes one structured INFO
//! line (group, bucket kind, tier, reason; never the principal's name), rate-limited per group
//! so that a flood of 429s writes a burst and then one line a second carrying how many it
//! stands for, hides no other group's lines, and has its remainder written once it stops.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_server::logging::decisions::LEFT_OUT;

use crate::common;
use crate::throttling::ADMIN;

/// How long the test waits for the process or an effect before failing: a debug build's start
/// and the heavy index on a slow, shared machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// Requests sent while the group's only permit is held: five times the burst of lines
/// (`logging::decisions` `BURST`, 10), so lines are left out and counted. No more: the heavy
/// search holding the permit must outlast the flood, and once a flood of 200 in a debug build
/// on a quiet machine did not (CI got a 200 in the middle of it).
const FLOOD: usize = 50;

/// Requests of a quiet group sent after the flood: fewer than the burst of lines, so each has
/// its own line.
const QUIET: usize = 5;

/// A user whose name must never appear in an INFO line.
const TENANT: &str = "zelda-the-tenant";

/// A `sluice serve` process and every line it wrote to stderr; killed when dropped.
struct LoggedNode {
    child: Child,
    base: String,
    lines: Arc<Mutex<Vec<String>>>,
    _data: tempfile::TempDir,
}

impl LoggedNode {
    /// Starts `sluice serve` with `-E` `flags` and the default log filter, and waits for its
    /// HTTP address in its log.
    async fn spawn(flags: &[&str]) -> LoggedNode {
        let data = tempfile::tempdir().expect("data dir");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("serve");
        let path_data = format!("path.data={}", data.path().display());
        for f in ["http.port=0", "transport.port=0", path_data.as_str()]
            .iter()
            .chain(flags)
        {
            cmd.arg("-E").arg(f);
        }
        // Every SLUICE_* variable is a setting, and RUST_LOG would change the filter.
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_")) {
            cmd.env_remove(k);
        }
        cmd.env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("sluice starts");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().expect("lines").push(line);
            }
        });
        let mut node = LoggedNode {
            child,
            base: String::new(),
            lines,
            _data: data,
        };
        let deadline = Instant::now() + PATIENCE;
        node.base = loop {
            let found = node.lines().iter().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                let msg = v["message"].as_str()?;
                msg.strip_prefix("listening on ").map(str::to_string)
            });
            if let Some(base) = found {
                break base;
            }
            if let Ok(Some(status)) = node.child.try_wait() {
                panic!("sluice exited with {status}:\n{}", node.lines().join("\n"));
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not start:\n{}",
                node.lines().join("\n")
            );
            tokio::task::yield_now().await;
        };
        node
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    async fn req(
        &self,
        client: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut rb = client.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = rb.send().await.expect("sent");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

impl Drop for LoggedNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The decision lines of group `id`, parsed.
fn decisions_of(lines: &[String], id: &str) -> Vec<Value> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "sluice::decision" && v["group"] == id)
        .collect()
}

#[tokio::test]
async fn test_json_logs_carry_one_rate_limited_line_per_decision_without_the_principal() {
    use reqwest::Method;
    let node = LoggedNode::spawn(&[
        "logger.format=json",
        "auth.type=proxy",
        "auth.proxy.trusted_addresses=127.0.0.0/8",
        "node.memory_budget=1tb",
    ])
    .await;
    let client = reqwest::Client::new();
    common::heavy_index_at(&client, &node.base, &ADMIN).await;
    let (s, b) = node
        .req(
            &client,
            Method::PUT,
            "/small/_doc/1?refresh=true",
            Some(json!({"k": "a"})),
            &ADMIN,
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = node
        .req(
            &client,
            Method::PUT,
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "enabled"}})),
            &ADMIN,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req(
            &client,
            Method::PUT,
            "/_wlm/workload_group",
            Some(json!({"name": "per-user", "resiliency_mode": "enforced",
                        "resource_limits": {"memory": 0.1},
                        "throttling": {"attribute": "username", "node_limit": 1}})),
            &ADMIN,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let id = b["_id"].as_str().expect("_id").to_string();
    let (s, b) = node
        .req(
            &client,
            Method::PUT,
            "/_wlm/workload_group",
            Some(json!({"name": "quiet", "resiliency_mode": "enforced",
                        "resource_limits": {"memory": 0.1},
                        "throttling": {"attribute": "group", "node_limit": 1}})),
            &ADMIN,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let quiet_id = b["_id"].as_str().expect("_id").to_string();
    let tenant = [
        ("x-proxy-user", TENANT),
        ("x-proxy-roles", "analyst"),
        ("workloadGroupId", id.as_str()),
    ];
    let quiet = [
        ("x-proxy-user", "someone-else"),
        ("x-proxy-roles", "analyst"),
        ("workloadGroupId", quiet_id.as_str()),
    ];

    // A heavy search in each group holds its bucket's only permit.
    let hold = |headers: [(&'static str, &str); 3]| {
        let mut rb = client
            .post(format!("{}/heavy/_search", node.base))
            .header("content-type", "application/json")
            .body(common::heavy_query().to_string());
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        tokio::spawn(async move { rb.send().await.map(|r| r.status().as_u16()).unwrap_or(0) })
    };
    let heavy = [hold(tenant), hold(quiet)];
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_, tasks) = node
            .req(
                &client,
                Method::GET,
                "/_tasks?actions=indices:data/read/search",
                None,
                &ADMIN,
            )
            .await;
        let running: usize = tasks["nodes"]
            .as_object()
            .into_iter()
            .flat_map(|n| n.values())
            .map(|n| n["tasks"].as_object().map_or(0, |t| t.len()))
            .sum();
        if running >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the heavy searches never ran");
        tokio::task::yield_now().await;
    }

    // A flood of the tenant's requests: each one a 429; then a few of the quiet group's.
    let cheap = json!({"query": {"match_all": {}}});
    let sent = FLOOD as u64;
    for (n, who) in [(FLOOD, &tenant), (QUIET, &quiet)] {
        for _ in 0..n {
            let (s, b) = node
                .req(
                    &client,
                    Method::POST,
                    "/small/_search",
                    Some(cheap.clone()),
                    who,
                )
                .await;
            assert_eq!(s, 429, "{b}");
        }
    }
    // The lines of the flood reach stderr, and once it has stopped, with no other request,
    // a line says how many its last lines left out: every decision is written or counted.
    let deadline = Instant::now() + PATIENCE;
    let lines = loop {
        let lines = node.lines();
        let decisions = decisions_of(&lines, &id);
        // A decision's line stands for itself and those it says were left out; a line of
        // what was left out, for those only.
        let counted: u64 = decisions
            .iter()
            .map(|d| {
                let own = u64::from(d["message"] != LEFT_OUT);
                own + d["suppressed"].as_u64().expect("suppressed")
            })
            .sum();
        if counted == sent {
            break lines;
        }
        assert!(
            counted < sent && Instant::now() < deadline,
            "{counted} of {sent} decisions written or counted: {decisions:?}"
        );
        tokio::task::yield_now().await;
    };
    let (s, b) = node
        .req(
            &client,
            Method::POST,
            "/_tasks/_cancel?actions=*search*",
            None,
            &ADMIN,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    for h in heavy {
        h.await.expect("joined");
    }

    // Every line is a JSON object with the usual fields.
    for l in &lines {
        let v: Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
        assert!(
            v["timestamp"].is_string() && v["level"].is_string() && v["target"].is_string(),
            "{l}"
        );
        if v["level"] == "INFO" {
            assert!(
                !l.contains(TENANT),
                "the principal's name in an INFO line: {l}"
            );
        }
    }
    let decisions = decisions_of(&lines, &id);
    let (left_out, decided): (Vec<&Value>, Vec<&Value>) =
        decisions.iter().partition(|d| d["message"] == LEFT_OUT);
    for d in &decided {
        assert_eq!(d["level"], "INFO", "{d}");
        assert_eq!(d["decision"], "throttle", "{d}");
        assert_eq!(d["enforced"], true, "{d}");
        assert_eq!(d["group_name"], "per-user", "{d}");
        assert_eq!(d["bucket_kind"], "username", "{d}");
        assert_eq!(d["tier"], "node", "{d}");
        let reason = d["reason"].as_str().expect("reason");
        assert!(reason.contains("node_limit is 1"), "{d}");
    }
    // Rate-limited: fewer lines than decisions; the flood's remainder in one line once it
    // stopped.
    assert!(
        decided.len() < FLOOD,
        "{} lines for {sent} decisions",
        decided.len()
    );
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    let last = left_out[0];
    assert_eq!(last["decision"], "throttle", "{last}");
    assert_eq!(last["enforced"], true, "{last}");
    assert_eq!(last["group_name"], "per-user", "{last}");
    assert!(last["suppressed"].as_u64() > Some(0), "{last}");
    // The flood hid none of the quiet group's decisions, nor counted them as its own.
    let quiet_lines = decisions_of(&lines, &quiet_id);
    assert_eq!(quiet_lines.len(), QUIET, "{quiet_lines:?}");
    for d in &quiet_lines {
        assert_eq!(d["suppressed"], 0, "{d}");
        assert_eq!(d["group_name"], "quiet", "{d}");
    }
}

/// The audit lines of the node's log, parsed.
fn audit_lines(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "sluice::audit")
        .collect()
}

#[tokio::test]
async fn test_audit_lines_name_the_clients_address_not_one_it_claims() {
    use reqwest::Method;
    // Behind a trusted proxy (`auth.type: proxy`) the address is still the connection's peer:
    // an `X-Forwarded-For` the client sends names an address of its choosing.
    let node = LoggedNode::spawn(&[
        "logger.format=json",
        "auth.type=proxy",
        "auth.proxy.trusted_addresses=127.0.0.0/8",
    ])
    .await;
    let client = reqwest::Client::new();
    let claimed = ("x-forwarded-for", "203.0.113.9");
    let group = json!({"name": "audited", "resiliency_mode": "monitor",
                       "resource_limits": {"memory": 0.1}});
    let (s, b) = node
        .req(
            &client,
            Method::PUT,
            "/_wlm/workload_group",
            Some(group.clone()),
            &[
                ("x-proxy-user", TENANT),
                ("x-proxy-roles", "analyst"),
                claimed,
            ],
        )
        .await;
    assert_eq!(s, 403, "{b}");
    let (s, b) = node
        .req(
            &client,
            Method::PUT,
            "/_wlm/workload_group",
            Some(group),
            &[ADMIN[0], ADMIN[1], claimed],
        )
        .await;
    assert_eq!(s, 200, "{b}");
    // Both lines reach stderr (the admin action's once it is answered).
    let deadline = Instant::now() + PATIENCE;
    let (refused, done) = loop {
        let lines = audit_lines(&node.lines());
        let find = |outcome: &str| {
            lines
                .iter()
                .find(|v| {
                    v["outcome"] == outcome
                        && v["action"] == "cluster:admin/opensearch/wlm/workload_group/_create"
                })
                .cloned()
        };
        if let (Some(r), Some(d)) = (find("refused"), find("done")) {
            break (r, d);
        }
        assert!(Instant::now() < deadline, "no audit lines: {lines:#?}");
        tokio::task::yield_now().await;
    };
    assert_eq!(refused["user"], TENANT, "{refused}");
    assert_eq!(refused["remote_address"], "127.0.0.1", "{refused}");
    assert_eq!(done["user"], "root", "{done}");
    assert_eq!(done["remote_address"], "127.0.0.1", "{done}");
    for v in audit_lines(&node.lines()) {
        assert_ne!(v["remote_address"], "203.0.113.9", "{v}");
    }
}

/// A gateway logs at start what answered the upstream's `GET /` (cluster name, distribution,
/// version), and warns when every user would reach the upstream under its one service
/// identity.
#[tokio::test]
async fn test_a_gateway_logs_the_upstream_it_found_and_warns_of_a_single_identity() {
    let upstream = LoggedNode::spawn(&["logger.format=json", "cluster.name=the-upstream"]).await;
    let hosts = format!("backend.upstream.hosts={}", upstream.base);
    let gateway = LoggedNode::spawn(&[
        "logger.format=json",
        "backend.type=upstream",
        hosts.as_str(),
        "backend.upstream.username=svc",
        "backend.upstream.password=secret",
    ])
    .await;
    let lines: Vec<Value> = gateway
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let found = lines
        .iter()
        .find(|v| v["message"] == "gateway mode: forwarding to the upstream cluster")
        .unwrap_or_else(|| panic!("no line naming the upstream: {lines:#?}"));
    assert_eq!(found["level"], "INFO", "{found}");
    assert_eq!(found["cluster"], "the-upstream", "{found}");
    assert_eq!(found["distribution"], "opensearch", "{found}");
    let (_, root) = upstream
        .req(
            &reqwest::Client::new(),
            reqwest::Method::GET,
            "/",
            None,
            &[],
        )
        .await;
    assert_eq!(found["version"], root["version"]["number"], "{found}");
    let warned = lines
        .iter()
        .find(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("backend.upstream.identity is service"))
        })
        .unwrap_or_else(|| panic!("no single-identity warning: {lines:#?}"));
    assert_eq!(warned["level"], "WARN", "{warned}");
    assert_eq!(warned["user"], "svc", "{warned}");
    // The password is never logged.
    assert!(
        !gateway.lines().iter().any(|l| l.contains("secret")),
        "the upstream password was logged"
    );
}

#[tokio::test]
async fn test_unknown_group_ids_are_logged_rate_limited_and_cut_short() {
    // Any client can tag every request with a group id that does not exist: the WARN line is
    // rate-limited as decision lines are, and neither it nor the response's warning carries a
    // long id whole.
    let node = LoggedNode::spawn(&["logger.format=json"]).await;
    let client = reqwest::Client::new();
    let long = "x".repeat(8_000);
    let (s, _) = node
        .req(
            &client,
            reqwest::Method::PUT,
            "/t/_doc/1?refresh=true",
            Some(json!({"a": 1})),
            &[],
        )
        .await;
    assert_eq!(s, 201);
    const SENT: usize = 60;
    let mut warnings = Vec::new();
    for i in 0..SENT {
        let id = format!("{long}{i}");
        let resp = client
            .post(format!("{}/t/_search", node.base))
            .header("workloadGroupId", id.as_str())
            .send()
            .await
            .expect("sent");
        assert_eq!(resp.status().as_u16(), 200);
        warnings.extend(
            resp.headers()
                .get_all("warning")
                .iter()
                .map(|v| v.to_str().expect("ascii").to_string()),
        );
    }
    assert_eq!(warnings.len(), SENT, "{warnings:?}");
    for w in &warnings {
        assert!(w.contains("does not exist"), "{w}");
        assert!(
            w.contains("(8001 bytes)") || w.contains("(8002 bytes)"),
            "{w}"
        );
        assert!(w.len() < 400, "{w}");
    }
    // The WARN lines: a burst, then one a second, each short, saying how many it stands for.
    let lines: Vec<Value> = node
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.contains("unknown workload group id"))
        })
        .collect();
    assert!(
        !lines.is_empty() && lines.len() < SENT,
        "{} lines",
        lines.len()
    );
    for line in &lines {
        let text = line.to_string();
        assert!(text.len() < 1_000, "{text}");
    }
}

#[tokio::test]
async fn test_headers_over_16kb_are_refused_as_opensearch_refuses_them() {
    let node = LoggedNode::spawn(&["logger.format=json"]).await;
    let client = reqwest::Client::new();
    // Under the limit, whatever their number.
    let mut rb = client.get(format!("{}/", node.base));
    for i in 0..15 {
        rb = rb.header(format!("x-pad-{i}"), "p".repeat(1_000));
    }
    assert_eq!(rb.send().await.expect("sent").status().as_u16(), 200);
    // Over it: 400 with OpenSearch's error.
    let resp = client
        .get(format!("{}/", node.base))
        .header("x-big", "b".repeat(17_000))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(
        body["error"]["type"], "too_long_http_header_exception",
        "{body}"
    );
    assert_eq!(
        body["error"]["reason"], "HTTP header is larger than 16384 bytes.",
        "{body}"
    );
    assert_eq!(body["status"], 400);
}

#[tokio::test]
async fn test_an_aggregation_over_max_buckets_is_no_error_of_the_node() {
    // The request's own doing: answered 503 `too_many_buckets_exception`, as OpenSearch
    // answers it, but not logged at ERROR as a failure of the node.
    let node = LoggedNode::spawn(&["logger.format=json", "search.max_buckets=2"]).await;
    let client = reqwest::Client::new();
    for i in 0..3 {
        let (s, _) = node
            .req(
                &client,
                reqwest::Method::PUT,
                &format!("/b/_doc/{i}?refresh=true"),
                Some(json!({"k": format!("v{i}")})),
                &[],
            )
            .await;
        assert_eq!(s, 201);
    }
    let body = json!({"size": 0, "aggs": {"k": {"terms": {"field": "k.keyword"}}}});
    let (s, b) = node
        .req(
            &client,
            reqwest::Method::POST,
            "/b/_search",
            Some(body),
            &[],
        )
        .await;
    assert_eq!(s, 503, "{b}");
    assert_eq!(b["error"]["type"], "too_many_buckets_exception", "{b}");
    // The node is asked something else afterwards, so every line of the search was written.
    let (s, _) = node
        .req(&client, reqwest::Method::GET, "/_cluster/health", None, &[])
        .await;
    assert_eq!(s, 200);
    let errors: Vec<String> = node
        .lines()
        .into_iter()
        .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["level"] == "ERROR"))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// An identity mode the upstream cannot honour is a single identity by mistake: `run_as` in
/// front of OpenSearch (which ignores Elasticsearch's run-as header) and `proxy` in front of
/// Elasticsearch (which has no proxy-header authentication) run every user's requests as the
/// gateway's own user. Start-up warns of it as it warns of `service`; a mode that fits its
/// upstream gets no such warning.
#[tokio::test]
async fn test_a_gateway_warns_when_its_upstream_cannot_honour_the_identity_mode() {
    let opensearch = LoggedNode::spawn(&["logger.format=json"]).await;
    // An Elasticsearch `GET /`: no `version.distribution`.
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(|| async {
            axum::Json(json!({"cluster_name": "es", "version": {"number": "8.12.0"}}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elasticsearch = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    for (upstream, mode, warned) in [
        (
            &opensearch.base,
            "run_as",
            Some("ignores es-security-runas-user"),
        ),
        (
            &elasticsearch,
            "proxy",
            Some("no proxy-header authentication"),
        ),
        (&opensearch.base, "proxy", None),
        (&elasticsearch, "run_as", None),
    ] {
        let hosts = format!("backend.upstream.hosts={upstream}");
        let identity = format!("backend.upstream.identity={mode}");
        let gateway = LoggedNode::spawn(&[
            "logger.format=json",
            "backend.type=upstream",
            hosts.as_str(),
            identity.as_str(),
            "backend.upstream.username=svc",
            "backend.upstream.password=pw",
            "backend.upstream.search_threads=4",
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.1",
        ])
        .await;
        let lines: Vec<Value> = gateway
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert!(
            lines
                .iter()
                .any(|v| v["message"] == "gateway mode: forwarding to the upstream cluster"),
            "the upstream answered its GET /: {lines:#?}"
        );
        let warning = lines.iter().find(|v| {
            v["message"].as_str().is_some_and(|m| {
                m.starts_with(&format!("backend.upstream.identity is {mode}, but"))
            })
        });
        match warned {
            Some(why) => {
                let w = warning.unwrap_or_else(|| panic!("{mode}: no warning: {lines:#?}"));
                assert_eq!(w["level"], "WARN", "{w}");
                let message = w["message"].as_str().unwrap();
                assert!(message.contains(why), "{message}");
                assert!(
                    message.contains("every user's requests run as the gateway's own user"),
                    "{message}"
                );
            }
            None => assert!(
                warning.is_none(),
                "{mode} in front of {upstream}: {warning:?}"
            ),
        }
    }
    server.abort();
}
