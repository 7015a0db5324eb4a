//! `GET /_prometheus/metrics` over HTTP (issue #16): the values move with traffic, the text
//! passes `promtool check metrics` (Debian's `prometheus` package, which `.ci/run` installs),
//! two nodes of one process keep their own values, the queue wait histogram counts parked
//! requests, and the endpoint needs an admin role when authentication is on.

use std::collections::BTreeMap;

use crate::common::TestNode;
use crate::throttling::{
    ADMIN, create_group, node_in_mode, start_heavy, stats_of, wait_drained, wait_running,
};
use serde_json::json;

/// A scrape, parsed: every sample `name{labels}` (labels as printed) → value, and every
/// family's `# TYPE`.
pub(crate) struct Scrape {
    pub text: String,
    pub samples: BTreeMap<String, f64>,
    pub types: BTreeMap<String, String>,
}

impl Scrape {
    /// The value of the sample of family `name` whose labels include every `label="value"` of
    /// `labels` (the first in label order when several do); `None` when none does.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples.iter().find_map(|(k, v)| {
            let (n, rest) = k.split_once('{').unwrap_or((k.as_str(), ""));
            (n == name
                && labels
                    .iter()
                    .all(|(l, val)| rest.contains(&format!("{l}=\"{val}\""))))
            .then_some(*v)
        })
    }
}

/// Scrapes `node` with `headers`, checking the answer's status and content type, and parses
/// every line: a comment (`# HELP`, `# TYPE`) or a sample with a number.
pub(crate) async fn scrape_as(node: &TestNode, headers: &[(&str, &str)]) -> Scrape {
    let mut rb = node.client.get(node.url("/_prometheus/metrics"));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb.send().await.expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = resp.text().await.expect("body");
    let mut samples = BTreeMap::new();
    let mut types = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').expect("TYPE name kind");
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "{name} typed twice"
            );
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {line}"));
        assert!(
            samples.insert(series.to_string(), value).is_none(),
            "{series} twice"
        );
    }
    Scrape {
        text,
        samples,
        types,
    }
}

pub(crate) async fn scrape(node: &TestNode) -> Scrape {
    scrape_as(node, &ADMIN).await
}

/// Runs `promtool check metrics` on `text` and fails with its complaints.
pub(crate) fn promtool_check(text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect(
            "promtool runs (Debian package `prometheus`; .ci/run installs it: \
             apt-get install --no-install-recommends prometheus)",
        );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("written");
    let out = child.wait_with_output().expect("promtool ends");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- the scrape:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn test_metrics_move_with_traffic_and_pass_promtool() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req("PUT", "/small/_doc/1?refresh=true", Some(json!({"k": "a"})))
        .await;
    assert_eq!(s, 201, "{b}");
    let id = create_group(
        &node,
        json!({"name": "analytics", "resiliency_mode": "enforced",
               "resource_limits": {"cpu": 0.5, "memory": 0.25},
               "throttling": {"attribute": "group", "node_limit": 4}}),
    )
    .await;
    let group = [("group_id", id.as_str()), ("group_name", "analytics")];

    let before = scrape(&node).await;
    promtool_check(&before.text);
    assert_eq!(
        before.value("sluice_wlm_group_completions_total", &group),
        Some(0.0)
    );
    assert_eq!(
        before.types["sluice_wlm_group_completions_total"],
        "counter"
    );
    assert_eq!(
        before.types["sluice_http_request_duration_seconds"],
        "histogram"
    );
    assert_eq!(before.types["sluice_wlm_group_queue_depth"], "gauge");
    // Prometheus conventions: a counter's name ends in `_total`, and only a counter's does;
    // the dry run's running total of queue wait is a counter (it was once a gauge, which
    // `rate()` and `increase()` do not reset).
    for (name, kind) in &before.types {
        assert_eq!(
            kind == "counter",
            name.ends_with("_total"),
            "{name} is a {kind}"
        );
    }
    assert_eq!(
        before.types["sluice_wlm_group_would_queue_wait_seconds_total"],
        "counter"
    );
    assert_eq!(
        before.value(
            "sluice_wlm_group_limit_ratio",
            &[group[0], ("resource", "cpu")]
        ),
        Some(0.5)
    );
    assert_eq!(
        before.value(
            "sluice_wlm_group_limit_ratio",
            &[group[0], ("resource", "memory")]
        ),
        Some(0.25)
    );
    assert_eq!(
        before.value("sluice_wlm_group_node_limit", &group),
        Some(4.0)
    );
    // A gateway's searches run upstream, not in its pool, whose figures it leaves out
    // (`dashboard::test_dashboard_and_metrics_show_where_searches_run`).
    if !crate::common::gateway_mode() {
        assert!(before.value("sluice_search_pool_threads", &[]).unwrap() >= 1.0);
    }
    assert_eq!(
        before.value("sluice_node_duress", &[("resource", "cpu")]),
        Some(0.0)
    );

    let tag = [("workloadGroupId", id.as_str())];
    for _ in 0..3 {
        let r = node
            .req_with(
                "POST",
                "/small/_search",
                Some(json!({"query": {"match_all": {}}})),
                &tag,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let (s, _) = node.req("GET", "/no-such-index/_search", None).await;
    assert_eq!(s, 404);

    let after = scrape(&node).await;
    promtool_check(&after.text);
    assert_eq!(
        after.value("sluice_wlm_group_completions_total", &group),
        Some(3.0)
    );
    let search = [
        ("method", "POST"),
        ("route", "/{index}/_search"),
        ("status", "200"),
    ];
    assert_eq!(
        after.value("sluice_http_requests_total", &search),
        Some(3.0)
    );
    assert_eq!(
        after.value(
            "sluice_http_requests_total",
            &[
                ("method", "GET"),
                ("route", "/{index}/_search"),
                ("status", "404")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        after.value(
            "sluice_http_request_duration_seconds_count",
            &[("method", "POST"), ("route", "/{index}/_search")]
        ),
        Some(3.0)
    );
    assert_eq!(
        after.value(
            "sluice_http_request_duration_seconds_bucket",
            &[
                ("method", "POST"),
                ("route", "/{index}/_search"),
                ("le", "+Inf")
            ]
        ),
        Some(3.0)
    );
    // The figures are the ones `_wlm/stats` shows.
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_completions"], 3, "{s}");
    // DEFAULT carries its unknown-tag counter; other groups do not.
    assert!(
        after
            .value(
                "sluice_wlm_group_unknown_group_tags_total",
                &[("group_id", "DEFAULT_WORKLOAD_GROUP")]
            )
            .is_some()
    );
    assert_eq!(
        after.value("sluice_wlm_group_unknown_group_tags_total", &group),
        None
    );

    // A deleted group's series go with it.
    let r = node
        .req_with("DELETE", "/_wlm/workload_group/analytics", None, &ADMIN)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let gone = scrape(&node).await;
    assert_eq!(
        gone.value("sluice_wlm_group_completions_total", &group),
        None
    );
}

#[tokio::test]
async fn test_two_nodes_of_one_process_keep_their_own_metrics() {
    let a = TestNode::start().await;
    let b = TestNode::start().await;
    // A route of sluice's own, answered by the node itself in either mode (a gateway forwards
    // `_cluster/health`).
    for _ in 0..2 {
        let (s, _) = a.req("GET", "/_wlm/workload_group", None).await;
        assert_eq!(s, 200);
    }
    let health = [("route", "/_wlm/workload_group"), ("status", "200")];
    assert_eq!(
        scrape(&a)
            .await
            .value("sluice_http_requests_total", &health),
        Some(2.0)
    );
    assert_eq!(
        scrape(&b)
            .await
            .value("sluice_http_requests_total", &health),
        None
    );
}

/// A method HTTP does not define is counted under one label, `_OTHER`: any token is a method
/// on the wire, and a series each would let any client grow the scrape without end.
#[tokio::test]
async fn test_made_up_methods_share_one_label() {
    let node = TestNode::start().await;
    for i in 0..20 {
        let method = reqwest::Method::from_bytes(format!("MADEUP{i}").as_bytes()).unwrap();
        let resp = node
            .client
            .request(method, node.url("/_search"))
            .send()
            .await
            .expect("sent");
        assert!(resp.status().is_client_error(), "{}", resp.status());
    }
    let scrape = scrape(&node).await;
    assert!(!scrape.text.contains("MADEUP"), "{}", scrape.text);
    let other: f64 = scrape
        .samples
        .iter()
        .filter(|(k, _)| {
            k.starts_with("sluice_http_requests_total{") && k.contains("method=\"_OTHER\"")
        })
        .map(|(_, v)| v)
        .sum();
    assert_eq!(other, 20.0, "{}", scrape.text);
}

#[tokio::test]
async fn test_queue_wait_histogram_counts_parked_requests() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "q", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 5}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_running(&node, &id, 1).await;
    let parked = crate::throttling::start_search(
        &node,
        "/small/_search",
        json!({"query": {"match_all": {}}}),
        &tag,
    );
    let group = [("group_id", id.as_str())];
    let mut depth = 0.0;
    for _ in 0..20_000 {
        depth = scrape(&node)
            .await
            .value("sluice_wlm_group_queue_depth", &group)
            .unwrap_or(0.0);
        if depth >= 1.0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(depth, 1.0, "the request never parked");
    // Cancelling the running search hands its slot to the parked one.
    crate::queueing::cancel_running(&node, &id).await;
    assert_eq!(heavy.await.expect("joined"), 500);
    assert_eq!(parked.await.expect("joined"), 200);
    wait_drained(&node, &id).await;

    let m = scrape(&node).await;
    promtool_check(&m.text);
    assert_eq!(m.value("sluice_wlm_group_queued_total", &group), Some(1.0));
    assert_eq!(m.value("sluice_wlm_group_queue_depth", &group), Some(0.0));
    assert_eq!(
        m.value("sluice_wlm_group_queue_wait_seconds_count", &group),
        Some(1.0)
    );
    let s = stats_of(&node, &id).await;
    let waited = s["total_queue_wait_millis"].as_f64().unwrap() / 1000.0;
    let sum = m
        .value("sluice_wlm_group_queue_wait_seconds_sum", &group)
        .unwrap();
    assert!((sum - waited).abs() < 1e-9, "sum {sum} vs {waited} ({s})");
    assert_eq!(
        m.value(
            "sluice_wlm_group_queue_wait_seconds_bucket",
            &[group[0], ("le", "+Inf")]
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn test_metrics_need_an_admin_role_when_authentication_is_on() {
    let node = TestNode::start_with(&[
        "auth.type=proxy",
        "auth.proxy.trusted_addresses=127.0.0.0/8",
    ])
    .await;
    let (status, body) = node.req("GET", "/_prometheus/metrics", None).await;
    assert_eq!(status, 401, "{body}");
    let r = node
        .req_with(
            "GET",
            "/_prometheus/metrics",
            None,
            &[("x-proxy-user", "carol"), ("x-proxy-roles", "analyst")],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["error"]["type"], "security_exception", "{}", r.body);
    let reason = r.body["error"]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("needs a role listed in auth.admin_roles"),
        "{reason}"
    );
    let m = scrape(&node).await;
    assert!(m.value("sluice_tasks_running", &[]).is_some());
}
