//! The dashboard in a real browser (issue #16): headless Chromium (Debian's `chromium`), driven
//! over WebDriver by Debian's `chromedriver` with plain HTTP calls; `.ci/run` installs both.
//! The page loads, shows a hundred groups, a group created through the API after it loaded
//! appears, and its counters move under a noisy-neighbour load. Opened with credentials in its
//! URL, it loads its data; its controls apply at once; two groups of one name are told apart;
//! a poll left unanswered shows as an error with the figures' age, until answers come back.
//! With
//! `SLUICE_DASHBOARD_SCREENSHOT=<path.png>` the test saves a screenshot of the page under that
//! load (the README's `docs/dashboard.png`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::common::TestNode;
use crate::throttling::{create_group, node_in_mode};

/// How long the test waits for the browser or the page before failing: Chromium's start and a
/// few polls, on a slow, shared machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// The flags Chromium needs here: no sandbox (tests run as root), no GPU, and none of the
/// background connections a closed network refuses.
const CHROMIUM_ARGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1800,1000",
];

/// A chromedriver process and one browser session; both end when it is dropped.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Browser {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("free port");
            l.local_addr().expect("addr").port()
        };
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "chromedriver runs (Debian packages `chromium` and `chromium-driver`; .ci/run \
                 installs them)",
            );
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let ready = http.get(format!("{base}/status")).send().await;
            if let Ok(r) = ready
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            tokio::task::yield_now().await;
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
        }}});
        let r: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("session request")
            .json()
            .await
            .expect("session answer");
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {r}"))
            .to_string();
        Browser {
            driver,
            base,
            session,
            http,
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut rb = self.http.request(method, url);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let v: Value = rb.send().await.expect("sent").json().await.expect("json");
        v["value"].clone()
    }

    async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page; its result.
    async fn eval(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Evaluates `script` until `done` holds for its result; returns the result.
    async fn wait_for(
        &self,
        what: &str,
        script: &str,
        args: Value,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let v = self.eval(script, args.clone()).await;
            if done(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting until {what}: {v}"
            );
            tokio::task::yield_now().await;
        }
    }

    async fn screenshot(&self) -> Vec<u8> {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .expect("PNG")
    }
}

impl Browser {
    /// Ends the session, which closes its Chromium (killing the driver alone would leave the
    /// browser running), then the driver. Async, so that the node under test (on this test's
    /// runtime) keeps answering the page while the browser closes.
    async fn quit(self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send()
            .await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // After `quit`, or when a test fails (its Chromium may then outlive it).
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// The figure `data-total` of cell `column` in the row of group `id`, or null.
const CELL_TOTAL: &str = "const c = document.querySelector(`tr[data-group-id=\"${arguments[0]}\"] td.${arguments[1]}`); \
     return c ? Number(c.dataset.total) : null;";

/// Sends `body` to `path` tagged with `group` until `stop`.
fn load(
    node: &TestNode,
    path: &str,
    body: Value,
    group: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (client, url, group) = (node.client.clone(), node.url(path), group.to_string());
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let sent = client
                .post(&url)
                .header("content-type", "application/json")
                .header("workloadGroupId", &group)
                .body(body.to_string())
                .send()
                .await;
            if let Ok(r) = sent {
                let _ = r.bytes().await;
            }
        }
    })
}

#[tokio::test]
async fn test_dashboard_shows_a_new_group_and_its_counters_moving_in_a_browser() {
    let node = node_in_mode("enabled", &[]).await;
    // A hundred groups, the most a node allows: 97 quiet tenants here, three busy ones below.
    // The page must stay usable with that many. The tenants' shares are small, so that the
    // groups' cpu limits still add up to at most the whole node.
    for i in 0..97 {
        create_group(
            &node,
            json!({"name": format!("tenant-{i:03}"), "resiliency_mode": "soft",
                   "resource_limits": {"cpu": 0.0004}}),
        )
        .await;
    }
    let browser = Browser::start().await;
    browser.goto(&node.url("/_sluice/dashboard")).await;
    browser
        .wait_for(
            "the page lists DEFAULT and the 97 tenants",
            "return document.querySelectorAll('#groups tbody tr').length;",
            json!([]),
            |v| v.as_u64() == Some(98),
        )
        .await;
    let title = browser.eval("return document.title;", json!([])).await;
    assert_eq!(title, "sluice dashboard");

    // Groups created through the API after the page loaded appear at its next polls.
    let analytics = create_group(
        &node,
        json!({"name": "analytics", "resiliency_mode": "enforced",
               "resource_limits": {"cpu": 0.3},
               "throttling": {"attribute": "group", "node_limit": 1}}),
    )
    .await;
    let product = create_group(
        &node,
        json!({"name": "product", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.6}}),
    )
    .await;
    let reporting = create_group(
        &node,
        json!({"name": "reporting", "resiliency_mode": "monitor",
               "resource_limits": {"cpu": 0.05},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 10}}),
    )
    .await;
    let first = browser
        .wait_for(
            "the new group appears",
            CELL_TOTAL,
            json!([product, "completions"]),
            |v| v.is_number(),
        )
        .await;
    browser
        .wait_for(
            "the page lists all 101 groups",
            "return document.querySelectorAll('#groups tbody tr').length;",
            json!([]),
            |v| v.as_u64() == Some(101),
        )
        .await;

    // The noisy neighbour (the groups of scripts/noisy_neighbour.sh, smaller): analytics
    // (enforced, cpu 0.3) runs heavy searches from more clients than its node_limit; product
    // (soft, cpu 0.6) runs cheap ones; reporting, a monitor group, runs both, over its
    // node_limit and its share, so its dry run moves.
    let stop = Arc::new(AtomicBool::new(false));
    let heavy = crate::common::heavy_query;
    let cheap = || json!({"query": {"match_all": {}}});
    let clients = vec![
        load(&node, "/heavy/_search", heavy(), &analytics, stop.clone()),
        load(&node, "/heavy/_search", heavy(), &analytics, stop.clone()),
        load(&node, "/heavy/_search", heavy(), &reporting, stop.clone()),
        load(&node, "/small/_search", cheap(), &reporting, stop.clone()),
        load(&node, "/small/_search", cheap(), &reporting, stop.clone()),
        load(&node, "/small/_search", cheap(), &product, stop.clone()),
        load(&node, "/small/_search", cheap(), &product, stop.clone()),
    ];

    let first = first.as_f64().unwrap_or(0.0);
    browser
        .wait_for(
            "product's completions move on the page",
            CELL_TOTAL,
            json!([product, "completions"]),
            |v| v.as_f64().is_some_and(|n| n > first),
        )
        .await;
    browser
        .wait_for(
            "analytics is throttled, rejected or cancelled on the page",
            "return ['throttled', 'rejections', 'cancellations'].map(c => \
                Number(document.querySelector(`tr[data-group-id=\"${arguments[0]}\"] td.${c}`)?.dataset.total ?? 0)) \
                .reduce((a, b) => a + b, 0);",
            json!([analytics]),
            |v| v.as_f64().is_some_and(|n| n > 0.0),
        )
        .await;
    // Each request counts in one dry-run figure at most: would-reject while the group is over
    // its share, else would-queue while its queue of 10 has room, else would-throttle.
    browser
        .wait_for(
            "the monitored group's dry run moves on the page",
            "return ['would_throttle', 'would_queue', 'would_reject'].map(c => \
                Number(document.querySelector(`tr[data-group-id=\"${arguments[0]}\"] td.${c}`)?.dataset.total ?? 0)) \
                .reduce((a, b) => a + b, 0);",
            json!([reporting]),
            |v| v.as_f64().is_some_and(|n| n > 0.0),
        )
        .await;
    // The node card and the longest-running tasks are there too.
    let tasks = browser
        .wait_for(
            "the longest-running tasks list a search",
            "return Array.from(document.querySelectorAll('#tasks tbody tr')).map(r => r.textContent).join('\\n');",
            json!([]),
            |v| v.as_str().is_some_and(|t| t.contains("indices:data/read/search")),
        )
        .await;
    // Listed with their group's name.
    let tasks = tasks.as_str().unwrap_or_default();
    assert!(
        ["analytics", "reporting", "product"]
            .iter()
            .any(|name| tasks.contains(name)),
        "{tasks}"
    );
    let node_card = browser
        .eval(
            "return document.getElementById('node').textContent;",
            json!([]),
        )
        .await;
    assert!(
        node_card.as_str().unwrap().contains("enabled"),
        "{node_card}"
    );

    if let Ok(path) = std::env::var("SLUICE_DASHBOARD_SCREENSHOT") {
        // The whole dry run of reporting on the page, and ten seconds of rates.
        for counter in ["would_cancel", "would_reject", "would_queue"] {
            browser
                .wait_for(
                    &format!("reporting's {counter} moves on the page"),
                    CELL_TOTAL,
                    json!([reporting, counter]),
                    |v| v.as_f64().is_some_and(|n| n > 0.0),
                )
                .await;
        }
        let polls = browser
            .eval("return Number(document.body.dataset.polls);", json!([]))
            .await
            .as_u64()
            .unwrap_or(0);
        browser
            .wait_for(
                "ten more polls",
                "return Number(document.body.dataset.polls);",
                json!([]),
                |v| v.as_u64().is_some_and(|n| n >= polls + 10),
            )
            .await;
        std::fs::write(&path, browser.screenshot().await).expect("screenshot written");
    }
    browser.quit().await;
    stop.store(true, Ordering::Relaxed);
    let r = node
        .req(
            "POST",
            "/_tasks/_cancel?actions=indices:data/read/search",
            None,
        )
        .await;
    assert_eq!(r.0, 200, "{}", r.1);
    for c in clients {
        c.await.expect("joined");
    }
}

#[tokio::test]
async fn test_dashboard_is_served_from_the_binary_and_needs_an_admin_role() {
    let node = TestNode::start_with(&[
        "auth.type=proxy",
        "auth.proxy.trusted_addresses=127.0.0.0/8",
    ])
    .await;
    let analyst = [("x-proxy-user", "carol"), ("x-proxy-roles", "analyst")];
    let admin = crate::throttling::ADMIN;
    // The page as its data: a user refused one is refused the other, in the same words.
    for path in [
        "/_sluice/dashboard",
        "/_sluice/dashboard/app.js",
        "/_sluice/dashboard/style.css",
        "/_sluice/dashboard/data",
    ] {
        let r = node.req_with("GET", path, None, &analyst).await;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert_eq!(r.body["error"]["type"], "security_exception", "{}", r.body);
        let reason = r.body["error"]["reason"].as_str().expect("reason");
        assert!(
            reason.contains("[cluster:monitor/sluice/dashboard]")
                && reason.contains("needs a role listed in auth.admin_roles"),
            "{path}: {reason}"
        );
    }
    for (path, content_type, needle) in [
        (
            "/_sluice/dashboard",
            "text/html",
            "/_sluice/dashboard/app.js",
        ),
        (
            "/_sluice/dashboard/app.js",
            "text/javascript",
            "/_sluice/dashboard/data",
        ),
        ("/_sluice/dashboard/style.css", "text/css", "table"),
    ] {
        let resp = node
            .client
            .get(node.url(path))
            .header(admin[0].0, admin[0].1)
            .header(admin[1].0, admin[1].1)
            .send()
            .await
            .expect("sent");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with(content_type), "{path}: {ct}");
        // Nothing but its own files runs or loads, and no other page frames it.
        let csp = resp.headers()["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self';") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert_eq!(resp.headers()["x-frame-options"], "DENY", "{path}");
        assert_eq!(
            resp.headers()["x-content-type-options"],
            "nosniff",
            "{path}"
        );
        assert!(resp.text().await.unwrap().contains(needle), "{path}");
    }

    let id = create_group(
        &node,
        json!({"name": "analytics", "resiliency_mode": "enforced",
               "resource_limits": {"cpu": 0.3},
               "throttling": {"attribute": "group", "node_limit": 2}}),
    )
    .await;
    create_group(
        &node,
        json!({"name": "shared", "resiliency_mode": "soft",
               "resource_limits": {"cpu": 0.1},
               "throttling": {"attribute": "group", "shared_limit": 4}}),
    )
    .await;
    let r = node
        .req_with(
            "GET",
            "/_sluice/dashboard/data",
            None,
            &crate::throttling::ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let groups = r.body["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 3, "DEFAULT, analytics, shared: {}", r.body);
    let g = groups
        .iter()
        .find(|g| g["id"] == json!(id))
        .expect("analytics");
    assert_eq!(g["name"], "analytics");
    assert_eq!(g["node_limit"], 2);
    assert_eq!(g["shared_limit"], Value::Null);
    let shared = groups
        .iter()
        .find(|g| g["name"] == "shared")
        .expect("the shared-only group");
    assert_eq!(shared["node_limit"], Value::Null);
    assert_eq!(shared["shared_limit"], 4);
    assert_eq!(g["limits"]["cpu"], 0.3);
    assert_eq!(g["in_flight"], 0);
    assert_eq!(g["counters"]["completions"], 0);
    assert_eq!(g["counters"]["would_cancel"], 0);
    assert_eq!(r.body["node"]["mode"], "monitor_only", "{}", r.body);
    assert!(r.body["longest_tasks"].is_array());
}

/// A roles file's permissions do not open the metrics or the dashboard, which need a role of
/// `auth.admin_roles`: the refusal says so, whether the user holds `cluster_monitor`, every
/// cluster action, or exactly the actions the refusals name (an outside trial's operators,
/// told "no permissions for [cluster:monitor/prometheus/metrics]", granted it and were refused
/// again, and the dashboard's data named `cluster:admin/sluice/unclassified`).
#[tokio::test]
async fn test_metrics_and_dashboard_refusals_say_an_admin_role_is_needed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let roles = tmp.path().join("roles.yml");
    std::fs::write(
        &roles,
        r#"
_meta:
  type: roles
  config_version: 2
monitor:
  cluster_permissions: [cluster_monitor]
everything:
  cluster_permissions: [cluster_all]
promonly:
  cluster_permissions:
    - cluster:monitor/prometheus/metrics
    - cluster:monitor/sluice/dashboard
"#,
    )
    .expect("roles written");
    let node = TestNode::start_on(
        &tmp.path().join("data"),
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.1",
            &format!("auth.roles_file={}", roles.display()),
        ],
    )
    .await;
    for role in ["monitor", "everything", "promonly"] {
        let user = [("x-proxy-user", "ops"), ("x-proxy-roles", role)];
        for (path, action) in [
            ("/_prometheus/metrics", "cluster:monitor/prometheus/metrics"),
            ("/_sluice/dashboard", "cluster:monitor/sluice/dashboard"),
            (
                "/_sluice/dashboard/data",
                "cluster:monitor/sluice/dashboard",
            ),
        ] {
            let r = node.req_with("GET", path, None, &user).await;
            assert_eq!(r.status, 403, "{role} {path}: {}", r.body);
            let reason = r.body["error"]["reason"].as_str().expect("reason");
            assert!(
                reason.starts_with(&format!("no permissions for [{action}] and User [name=ops"))
                    && reason.ends_with(
                        "; this needs a role listed in auth.admin_roles, which no permission replaces"
                    ),
                "{role} {path}: {reason}"
            );
        }
    }
    for path in ["/_prometheus/metrics", "/_sluice/dashboard/data"] {
        let r = node
            .req_with("GET", path, None, &crate::throttling::ADMIN)
            .await;
        assert_eq!(r.status, 200, "{path}");
    }
}

/// Where the node's searches run, on the dashboard and in the metrics: an embedded node's own
/// search pool; a gateway's upstream, its own pool (which runs none of them) left out — an
/// outside trial's gateway showed "search pool 0/4 active" with five searches in flight.
#[tokio::test]
async fn test_dashboard_and_metrics_show_where_searches_run() {
    use crate::throttling::{ADMIN, cancel_all, start_heavy};
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "g", "resiliency_mode": "soft", "resource_limits": {"memory": 0.1}}),
    )
    .await;
    let heavy = start_heavy(&node, &[("workloadGroupId", id.as_str())]);
    let figures = crate::common::eventually("the heavy search in flight", || async {
        let r = node
            .req_with("GET", "/_sluice/dashboard/data", None, &ADMIN)
            .await;
        let n = r.body["node"].clone();
        let in_flight = if crate::common::gateway_mode() {
            n["upstream"]["searches_in_flight"].as_u64()
        } else {
            n["search_pool"]["active"].as_u64()
        };
        if in_flight >= Some(1) {
            Ok(n)
        } else {
            Err(n.to_string())
        }
    })
    .await;
    let m = crate::metrics::scrape(&node).await;
    if crate::common::gateway_mode() {
        assert_eq!(figures["search_pool"], Value::Null, "{figures}");
        assert!(figures["upstream"].is_object(), "{figures}");
        for family in [
            "sluice_search_pool_threads",
            "sluice_search_pool_active",
            "sluice_search_pool_queued",
            "sluice_search_pool_rejected_total",
        ] {
            assert!(!m.types.contains_key(family), "{family} on a gateway");
        }
    } else {
        assert_eq!(figures["upstream"], Value::Null, "{figures}");
        assert!(figures["search_pool"]["threads"].as_u64() >= Some(1));
        assert!(m.value("sluice_search_pool_active", &[]) >= Some(1.0));
    }
    cancel_all(&node, vec![heavy]).await;
}

/// The page opened as `http://user:password@host/_sluice/dashboard`: it loads its data (it
/// once built the data's URL from the page's, credentials included, which Chromium refuses to
/// fetch). Its filter applies at once, not at the next poll; two groups of one name (a group
/// may be named DEFAULT_WORKLOAD_GROUP, as in OpenSearch) show their ids; and a poll left
/// unanswered — `fetch` replaced in the page by one that never answers, as a node stopped with
/// SIGSTOP does not — shows as an error with the figures' age, the page greyed, until answers
/// come back.
#[tokio::test]
async fn test_dashboard_with_credentials_in_its_url_reacts_at_once_and_shows_stale_data() {
    let tmp = tempfile::tempdir().expect("tmp");
    let users = tmp.path().join("users.yml");
    sluice_server::auth::add_user(&users, "alice", "alice-pw", &["admin".into()], false)
        .expect("alice added");
    let node = TestNode::start_on(
        &tmp.path().join("data"),
        &[
            "auth.type=basic",
            &format!("auth.users_file={}", users.display()),
        ],
    )
    .await;
    let resp = node
        .client
        .put(node.url("/_wlm/workload_group"))
        .basic_auth("alice", Some("alice-pw"))
        .json(
            &json!({"name": "DEFAULT_WORKLOAD_GROUP", "resiliency_mode": "soft",
                      "resource_limits": {"cpu": 0.1}}),
        )
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    let twin: Value = resp.json().await.expect("json");
    let twin = twin["_id"].as_str().expect("_id").to_string();

    let browser = Browser::start().await;
    let page = node
        .url("/_sluice/dashboard")
        .replacen("http://", "http://alice:alice-pw@", 1);
    browser.goto(&page).await;
    const NAMES: &str = "return Array.from(document.querySelectorAll('#groups tbody tr td.name')).map(td => td.textContent);";
    let names = browser
        .wait_for("both groups are listed", NAMES, json!([]), |v| {
            v.as_array().is_some_and(|a| a.len() == 2)
        })
        .await;
    let names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap_or_default())
        .collect();
    assert_ne!(names[0], names[1], "two identical rows: {names:?}");
    assert!(names.iter().any(|n| n.contains(&twin)), "{names:?}");

    // The filter applies in the same turn of the page's event loop as its input event.
    let shown = browser
        .eval(
            "const f = document.getElementById('filter'); f.value = arguments[0];              f.dispatchEvent(new Event('input'));              return document.querySelectorAll('#groups tbody tr').length;",
            json!([twin]),
        )
        .await;
    assert_eq!(shown, 1, "the filter waited for a poll");
    let shown = browser
        .eval(
            "const f = document.getElementById('filter'); f.value = '';              f.dispatchEvent(new Event('input'));              return document.querySelectorAll('#groups tbody tr').length;",
            json!([]),
        )
        .await;
    assert_eq!(shown, 2);

    // A node that stops answering: every poll hangs until the page gives it up.
    browser
        .eval(
            "window.realFetch = window.fetch;              window.fetch = (url, options) => new Promise((_, reject) =>                options?.signal?.addEventListener('abort', () =>                  reject(new DOMException('aborted', 'AbortError'))));",
            json!([]),
        )
        .await;
    const STATUS: &str = "return [document.getElementById('status').textContent,         document.body.classList.contains('stale')];";
    let stale = browser
        .wait_for(
            "the page says the node does not answer",
            STATUS,
            json!([]),
            |v| {
                v[0].as_str()
                    .is_some_and(|s| s.contains("no answer within"))
                    && v[1] == true
            },
        )
        .await;
    let said = stale[0].as_str().unwrap_or_default();
    assert!(
        said.contains("the figures shown are from") && said.contains("s old"),
        "{said}"
    );
    browser
        .eval("window.fetch = window.realFetch;", json!([]))
        .await;
    browser
        .wait_for("the page recovers", STATUS, json!([]), |v| {
            v[0].as_str().is_some_and(|s| s.starts_with("updated")) && v[1] == false
        })
        .await;
    browser.quit().await;
}

/// A request parked in its bucket's queue is listed among the longest tasks as queued, not as
/// running: the oldest tasks of a throttled group are its waiting ones.
#[tokio::test]
async fn test_dashboard_tells_queued_tasks_from_running_ones() {
    use crate::throttling::{cancel_all, create_group, node_in_mode, start_heavy, start_search};
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "q", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 2}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    let states = || async {
        let r = node
            .req_with(
                "GET",
                "/_sluice/dashboard/data",
                None,
                &crate::throttling::ADMIN,
            )
            .await;
        let mut states: Vec<String> = r.body["longest_tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .filter(|t| t["group"] == json!(id))
            .map(|t| t["state"].as_str().expect("a state").to_string())
            .collect();
        states.sort();
        states
    };
    let mut parked = None;
    let mut seen = Vec::new();
    for _ in 0..20_000 {
        seen = states().await;
        if parked.is_none() && seen == ["running"] {
            let body = json!({"query": {"match_all": {}}});
            parked = Some(start_search(&node, "/small/_search", body, &tag));
        }
        if seen == ["queued", "running"] {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(seen, ["queued", "running"]);
    cancel_all(&node, vec![heavy, parked.expect("started")]).await;
}
