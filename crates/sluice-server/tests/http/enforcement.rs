//! Resource enforcement over HTTP (issue #6): per-task usage in `_tasks`, per-group
//! `current_usage` in `_wlm/stats`, cancellation of an enforced group's heaviest tasks by the
//! enforcement loop for cpu and for memory (and of nothing else), `monitor_only` selecting
//! without cancelling, admission rejecting a group over its share with OpenSearch's message,
//! usage refreshed between enforcement runs, and the admission check repeated when a queued
//! request gets a search thread.
//!
//! The background loop runs at its shortest interval (1 s, the setting's minimum), but tests
//! do not wait for its timer: they run enforcement passes (or usage refreshes) themselves
//! ([`after_passes`]) and poll for the effect with a deadline.
//!
//! Through a gateway (`SLUICE_TEST_BACKEND=upstream`) the node a test talks to measures its
//! searches by polling the upstream's `_tasks` every usage refresh interval (ARCHITECTURE.md,
//! "Gateway", resource limits), so tests that turn the loop's refreshes off keep them on
//! there; and where a test's point is a search thread of the node's own, which a gateway does
//! not have, it checks what the gateway does instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{Reply, TestNode};
use serde_json::{Value, json};

/// How long a test waits for an effect of the loop before failing: many enforcement
/// intervals and heavy searches, even on a slow, shared machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// Start settings that keep the enforcement loop's passes and usage refreshes out of a test
/// that drives them itself. They are given at start: a change through `_cluster/settings`
/// applies from the loop's next wait, after the one already under way (default 1 s).
const HOUR_ENFORCEMENT: &str = "wlm.workload_group.enforcement_interval=3600000";
const HOUR_REFRESH: &str = "wlm.workload_group.usage_refresh_interval=3600000";

async fn node_in_mode(mode: &str) -> TestNode {
    let node = TestNode::start_heavy(&[]).await;
    let (s, b) = node
        .req("PUT", "/small/_doc/1?refresh=true", Some(json!({"k": "a"})))
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": mode}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node
}

async fn create_group(node: &TestNode, name: &str, mode: &str, cpu: f64) -> String {
    node.create_group(
        json!({"name": name, "resiliency_mode": mode, "resource_limits": {"cpu": cpu}}),
    )
    .await
}

async fn stats_of(node: &TestNode, id: &str) -> Value {
    let (s, b) = node.req("GET", &format!("/_wlm/stats/{id}"), None).await;
    assert_eq!(s, 200, "{b}");
    let (_, n) = b
        .as_object()
        .expect("object")
        .iter()
        .find(|(k, _)| *k != "_nodes" && *k != "cluster_name")
        .expect("node");
    n["workload_groups"][id].clone()
}

/// The running search tasks by id, as `_tasks?detailed` lists them.
async fn search_task_entries(node: &TestNode) -> Vec<(String, Value)> {
    node.task_entries("indices:data/read/search").await
}

/// The running search tasks, as `_tasks?detailed` lists them.
async fn search_tasks(node: &TestNode) -> Vec<Value> {
    search_task_entries(node)
        .await
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

/// Polls `check` until it returns `Some`, failing with `what` after [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::task::yield_now().await;
    }
}

/// Like [`eventually`], but runs one enforcement pass (as the loop's timer would) before each
/// check, so the test drives the loop instead of waiting for it.
async fn after_passes<T, F, Fut>(node: &TestNode, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually(what, || {
        let state = node.state.clone();
        let check = check();
        async move {
            tokio::task::spawn_blocking(move || sluice_server::enforcement::run_once(&state))
                .await
                .expect("pass");
            check.await
        }
    })
    .await
}

/// Sends `body` to `path` tagged with `group`, over and over until `stop`; returns every reply.
fn client_loop(
    node: &TestNode,
    path: &str,
    body: Value,
    group: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(u16, Value)>> {
    let (client, url, group) = (node.client.clone(), node.url(path), group.to_string());
    tokio::spawn(async move {
        let mut replies = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let resp = client
                .post(&url)
                .header("content-type", "application/json")
                .header("workloadGroupId", &group)
                .body(body.to_string())
                .send()
                .await
                .expect("request sent");
            let status = resp.status().as_u16();
            let text = resp.text().await.expect("body");
            replies.push((status, serde_json::from_str(&text).unwrap_or(Value::Null)));
        }
        replies
    })
}

fn cheap_query() -> Value {
    json!({"query": {"term": {"k": "a"}}})
}

/// Whether a reply is the task-cancelled error the enforcement loop causes.
fn is_cancelled_by_enforcement(reply: &(u16, Value), group: &str) -> bool {
    let cause = &reply.1["error"]["caused_by"];
    reply.0 == 500
        && cause["type"] == "task_cancelled_exception"
        && cause["reason"].as_str().is_some_and(|r| {
            r.starts_with(&format!(
                "cancelled task with reason: WorkloadGroup ID : {group} breached the resource limit: ("
            )) && r.ends_with(") for resource type : cpu")
        })
}

#[tokio::test]
async fn test_task_resource_stats_show_cpu_and_memory_while_a_search_runs() {
    let node = node_in_mode("monitor_only").await;
    let (client, url) = (node.client.clone(), node.url("/heavy/_search"));
    let running = tokio::spawn(async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .body(common::heavy_query().to_string())
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    let stats = eventually("a running search reports CPU time and memory", || async {
        search_tasks(&node).await.into_iter().find_map(|t| {
            let total = &t["resource_stats"]["total"];
            let cpu = total["cpu_time_in_nanos"].as_u64()?;
            let mem = total["memory_in_bytes"].as_u64()?;
            (cpu > 0 && mem > 0).then_some(total.clone())
        })
    })
    .await;
    assert!(stats["cpu_time_in_nanos"].as_u64().unwrap() > 0, "{stats}");
    let (s, b) = node
        .req("POST", "/_tasks/_cancel?actions=*search*", None)
        .await;
    assert_eq!(s, 200, "{b}");
    let status = running.await.expect("joined").expect("answered");
    assert!(status == 500 || status == 200, "{status}");
}

#[tokio::test]
async fn test_enforced_group_loses_heavy_tasks_while_light_group_keeps_all() {
    let node = node_in_mode("enabled").await;
    // analytics may use 5% of the node; one heavy search uses a whole core. product may use
    // 90%; its one client runs one cheap search at a time, at most one core of two.
    let analytics = create_group(&node, "analytics", "enforced", 0.05).await;
    let product = create_group(&node, "product", "enforced", 0.9).await;
    let stop = Arc::new(AtomicBool::new(false));
    let heavy: Vec<_> = (0..2)
        .map(|_| {
            client_loop(
                &node,
                "/heavy/_search",
                common::heavy_query(),
                &analytics,
                stop.clone(),
            )
        })
        .collect();
    let light = client_loop(
        &node,
        "/small/_search",
        cheap_query(),
        &product,
        stop.clone(),
    );

    after_passes(&node, "analytics shows CPU usage in _wlm/stats", || async {
        let u = stats_of(&node, &analytics).await["cpu"]["current_usage"].as_f64()?;
        (u > 0.0).then_some(u)
    })
    .await;
    let s = after_passes(&node, "a pass cancels an analytics task", || async {
        let s = stats_of(&node, &analytics).await;
        (s["total_cancellations"].as_u64()? > 0).then_some(s)
    })
    .await;
    assert!(s["cpu"]["cancellations"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["memory"]["cancellations"], 0, "{s}");

    stop.store(true, Ordering::Relaxed);
    let mut heavy_replies = Vec::new();
    for h in heavy {
        heavy_replies.extend(h.await.expect("joined"));
    }
    let light_replies = light.await.expect("joined");

    // The cancelled clients saw OpenSearch's task-cancelled error with the breach reason.
    assert!(
        heavy_replies
            .iter()
            .any(|r| is_cancelled_by_enforcement(r, &analytics)),
        "no analytics reply was a cancellation: {heavy_replies:?}"
    );
    for (status, body) in &heavy_replies {
        assert!([200, 429, 500].contains(status), "{status} {body}");
    }
    // product ran throughout, and nothing of it was cancelled or rejected.
    assert!(!light_replies.is_empty());
    for (status, body) in &light_replies {
        assert_eq!(*status, 200, "product request failed: {body}");
    }
    let p = stats_of(&node, &product).await;
    assert_eq!(p["total_cancellations"], 0, "{p}");
    assert_eq!(p["total_rejections"], 0, "{p}");
    assert!(p["total_completions"].as_u64().unwrap() >= light_replies.len() as u64);
}

#[tokio::test]
async fn test_monitor_only_selects_over_limit_tasks_but_cancels_none() {
    let node = node_in_mode("monitor_only").await;
    let analytics = create_group(&node, "analytics", "enforced", 0.05).await;
    let (client, url, tag) = (
        node.client.clone(),
        node.url("/heavy/_search"),
        analytics.clone(),
    );
    let running = tokio::spawn(async move {
        let resp = client
            .post(url)
            .header("content-type", "application/json")
            .header("workloadGroupId", tag)
            .body(common::heavy_query().to_string())
            .send()
            .await
            .expect("sent");
        (
            resp.status().as_u16(),
            resp.text().await.unwrap_or_default(),
        )
    });
    // Passes by hand until one sees the search over the share (its CPU rate climbs towards a
    // whole core as it runs): it selects the task, as mode enabled would, but does not act.
    let outcome = eventually("a pass selects the running analytics task", || {
        let state = node.state.clone();
        let analytics = analytics.clone();
        async move {
            let outcome =
                tokio::task::spawn_blocking(move || sluice_server::enforcement::run_once(&state))
                    .await
                    .expect("pass");
            outcome
                .cancellations
                .iter()
                .any(|c| c.group_id == analytics)
                .then_some(outcome)
        }
    })
    .await;
    assert!(outcome.ran && !outcome.acts, "{outcome:?}");
    assert!(outcome.usage[&analytics].cpu > 0.05 * 0.9, "{outcome:?}");
    let selected = &outcome.cancellations[0];
    assert!(
        selected.reason.ends_with("for resource type : cpu"),
        "{selected:?}"
    );
    if let Some(task) = node.state.tasks.get(selected.task_id) {
        assert!(!task.is_cancelled(), "monitor_only cancelled {selected:?}");
    }
    // The loop's own passes record the usage and cancel nothing; the search completes.
    let (status, body) = running.await.expect("joined");
    assert_eq!(status, 200, "the search was cancelled: {body}");
    let s = stats_of(&node, &analytics).await;
    assert_eq!(s["total_cancellations"], 0, "{s}");
    assert_eq!(s["cpu"]["cancellations"], 0, "{s}");
    assert_eq!(s["total_rejections"], 0, "{s}");
    assert!(s["cpu"]["current_usage"].as_f64().unwrap() >= 0.0, "{s}");
}

#[tokio::test]
async fn test_group_over_its_share_is_rejected_with_opensearch_message() {
    let node = node_in_mode("enabled").await;
    let analytics = create_group(&node, "analytics", "enforced", 0.05).await;
    let product = create_group(&node, "product", "enforced", 0.5).await;
    let stop = Arc::new(AtomicBool::new(false));
    let heavy = client_loop(
        &node,
        "/heavy/_search",
        common::heavy_query(),
        &analytics,
        stop.clone(),
    );
    // Between a pass that saw analytics over 0.05 × 0.8 and the next one that sees it idle,
    // its requests are turned away at the door.
    let tag = [("workloadGroupId", analytics.as_str())];
    let rejected: Reply = after_passes(&node, "an analytics request is rejected", || async {
        let r = node
            .req_with("POST", "/small/_search", Some(cheap_query()), &tag)
            .await;
        (r.status == 429).then_some(r)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    heavy.await.expect("joined");

    assert_cpu_share_rejection(&rejected, &analytics, "0.04000000000000001");
    let s = stats_of(&node, &analytics).await;
    assert!(s["total_rejections"].as_u64().unwrap() >= 1, "{s}");
    assert!(s["cpu"]["rejections"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(s["memory"]["rejections"], 0, "{s}");
    // Another group is not affected.
    let r = node
        .req_with(
            "POST",
            "/small/_search",
            Some(cheap_query()),
            &[("workloadGroupId", product.as_str())],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Asserts `reply` is OpenSearch's 429 for `group` breaching its CPU share at `threshold`
/// (as Java prints it): `rejected_execution_exception`, the contention message and
/// `Retry-After: 1`.
fn assert_cpu_share_rejection(reply: &Reply, group: &str, threshold: &str) {
    assert_eq!(reply.status, 429, "{:.500}", reply.body.to_string());
    assert_eq!(
        reply.body["error"]["type"], "rejected_execution_exception",
        "{}",
        reply.body
    );
    let reason = reply.body["error"]["reason"].as_str().expect("reason");
    let prefix = format!(
        "WorkloadGroup {group} is already contended. CPU limit is breaching for workload group \
         {group}, {threshold} < "
    );
    assert!(reason.starts_with(&prefix), "{reason}");
    assert!(reason.ends_with(", wlm mode is ENFORCED. "), "{reason}");
    assert_eq!(reply.header_values("retry-after"), ["1"]);
}

/// Sets cluster settings, failing the test when refused.
async fn put_settings(node: &TestNode, settings: Value) {
    let (s, b) = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": settings})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
}

/// Starts `query` on `/heavy/_search` tagged with `group` (none: DEFAULT) in the background.
fn spawn_search(node: &TestNode, group: Option<&str>) -> tokio::task::JoinHandle<Reply> {
    let node_client = node.client.clone();
    let url = node.url("/heavy/_search");
    let group = group.map(str::to_string);
    tokio::spawn(async move {
        let mut rb = node_client
            .post(url)
            .header("content-type", "application/json")
            .body(common::heavy_query().to_string());
        if let Some(g) = group {
            rb = rb.header("workloadGroupId", g);
        }
        Reply::of(rb.send().await.expect("sent")).await
    })
}

/// The ids of the running search tasks tagged with `group`, and whether each has used CPU (so
/// has started executing on a search thread).
async fn tasks_of(node: &TestNode, group: &str) -> Vec<(String, bool)> {
    search_task_entries(node)
        .await
        .into_iter()
        .filter(|(_, t)| t["workload_group"]["id"] == group)
        .map(|(id, t)| {
            let cpu = &t["resource_stats"]["total"]["cpu_time_in_nanos"];
            (id, cpu.as_u64().unwrap_or(0) > 0)
        })
        .collect()
}

#[tokio::test]
async fn test_usage_is_refreshed_between_enforcement_runs() {
    let node = node_in_mode("enabled").await;
    // No enforcement run during the test: what moves current_usage is the refresh alone.
    put_settings(
        &node,
        json!({"wlm.workload_group.enforcement_interval": 3_600_000}),
    )
    .await;
    let reports = create_group(&node, "reports", "monitor", 0.05).await;
    let running = spawn_search(&node, Some(&reports));
    let usage = eventually(
        "reports' current_usage shows its running search",
        || async {
            let s = stats_of(&node, &reports).await;
            let cpu = s["cpu"]["current_usage"].as_f64()?;
            (cpu > 0.0).then_some(cpu)
        },
    )
    .await;
    assert!(usage <= 1.0, "{usage}");
    let (s, b) = node
        .req("POST", "/_tasks/_cancel?actions=*search*", None)
        .await;
    assert_eq!(s, 200, "{b}");
    // Cancelled, or finished on its own on a fast machine: either way it is gone.
    let status = running.await.expect("joined").status;
    assert!(status == 500 || status == 200, "{status}");
    eventually(
        "reports' current_usage drops to 0 once it has no task",
        || async {
            let s = stats_of(&node, &reports).await;
            (s["cpu"]["current_usage"].as_f64() == Some(0.0)).then_some(())
        },
    )
    .await;
    let s = stats_of(&node, &reports).await;
    assert_eq!(s["total_cancellations"], 0, "{s}");
}

#[tokio::test]
async fn test_request_waiting_for_a_thread_is_rejected_when_its_group_went_over() {
    if common::gateway_mode() {
        // A gateway has no search thread for a request to wait for: it makes its second check
        // when it forwards the search, right after the door, and the search then waits for a
        // thread in the upstream's pool, which the gateway does not hold. There is no later
        // moment to turn it away; through a gateway, a group's share is kept at the door.
        return through_a_gateway_a_search_waiting_upstream_runs_and_the_next_is_rejected().await;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    common::seed_heavy(tmp.path()).await;
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "thread_pool.search.size=2",
            "node.memory_budget=1tb",
            HOUR_ENFORCEMENT,
            HOUR_REFRESH,
        ],
    )
    .await;
    // Neither enforcement runs nor usage refreshes on their own during the test: the test
    // refreshes usage itself, at the moment it chooses.
    put_settings(
        &node,
        json!({
            "wlm.workload_group.mode": "enabled",
            // Any measured CPU is over the rejection threshold, however busy the machine.
            "wlm.workload_group.node.cpu_rejection_threshold": 0.0,
        }),
    )
    .await;
    let analytics = create_group(&node, "analytics", "enforced", 0.01).await;

    // The two search threads: one runs an analytics search, the other a DEFAULT one.
    let first = spawn_search(&node, Some(&analytics));
    let blocker = spawn_search(&node, None);
    let first_id = eventually("the first analytics search runs", || async {
        let t = tasks_of(&node, &analytics).await;
        t.into_iter().find(|(_, ran)| *ran).map(|(id, _)| id)
    })
    .await;
    let blocker_id = eventually("the DEFAULT search runs", || async {
        let t = tasks_of(&node, "DEFAULT_WORKLOAD_GROUP").await;
        t.into_iter().find(|(_, ran)| *ran).map(|(id, _)| id)
    })
    .await;
    // No usage recorded yet, so the door admits a second analytics search; it waits for a
    // thread.
    let s = stats_of(&node, &analytics).await;
    assert_eq!(
        s["cpu"]["current_usage"], 0.0,
        "premise: nothing refreshed usage yet {s}"
    );
    let second = spawn_search(&node, Some(&analytics));
    eventually("the second analytics search waits for a thread", || async {
        (tasks_of(&node, &analytics).await.len() == 2).then_some(())
    })
    .await;
    // Now usage is measured: analytics is over its share while its second request waits.
    let state = node.state.clone();
    let usage =
        tokio::task::spawn_blocking(move || sluice_server::enforcement::refresh_once(&state))
            .await
            .expect("refresh");
    assert!(usage[&analytics].cpu > 0.0, "{usage:?}");

    // Free both threads (a search that ended meanwhile has freed its own); the second search
    // gets one and is turned away before it runs.
    for id in [&first_id, &blocker_id] {
        let (s, b) = node
            .req("POST", &format!("/_tasks/{id}/_cancel"), None)
            .await;
        assert!(s == 200 || s == 404, "{s} {b}");
    }
    for search in [first, blocker] {
        let status = search.await.expect("joined").status;
        assert!(status == 500 || status == 200, "{status}");
    }
    let rejected = second.await.expect("joined");
    // Threshold 0.01 × 0 (the test's node rejection threshold).
    assert_cpu_share_rejection(&rejected, &analytics, "0.0");
    // Counted as a rejection, not as a completion: only the first search completed (cancelled).
    let s = stats_of(&node, &analytics).await;
    assert_eq!(s["total_rejections"], 1, "{s}");
    assert_eq!(s["cpu"]["rejections"], 1, "{s}");
    assert_eq!(s["total_completions"], 1, "{s}");
}

/// [`test_request_waiting_for_a_thread_is_rejected_when_its_group_went_over`] through a
/// gateway: two searches admitted while their group was within its share wait for a thread
/// upstream; once one runs and the gateway's polls measure it, the group's next request is
/// rejected at the door, and the other search, already forwarded, runs to its end.
async fn through_a_gateway_a_search_waiting_upstream_runs_and_the_next_is_rejected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    common::seed_heavy(tmp.path()).await;
    // The usage refresh keeps its default: it is also how often the gateway polls the
    // upstream for its searches' usage, without which it measures nothing.
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "thread_pool.search.size=2",
            "node.memory_budget=1tb",
            HOUR_ENFORCEMENT,
        ],
    )
    .await;
    put_settings(
        &node,
        json!({
            "wlm.workload_group.mode": "enabled",
            // Any measured CPU is over the rejection threshold, however busy the machine.
            "wlm.workload_group.node.cpu_rejection_threshold": 0.0,
        }),
    )
    .await;
    let analytics = create_group(&node, "analytics", "enforced", 0.01).await;

    // The upstream's two search threads run DEFAULT searches.
    let blockers = [spawn_search(&node, None), spawn_search(&node, None)];
    let blocker_ids = eventually("two DEFAULT searches run upstream", || async {
        let ran: Vec<String> = tasks_of(&node, "DEFAULT_WORKLOAD_GROUP")
            .await
            .into_iter()
            .filter_map(|(id, ran)| ran.then_some(id))
            .collect();
        (ran.len() == 2).then_some(ran)
    })
    .await;
    // Nothing of analytics runs, so nothing of it is measured: both of its searches pass the
    // door and the gateway's start, and are forwarded to wait for a thread upstream.
    let waiting = [
        spawn_search(&node, Some(&analytics)),
        spawn_search(&node, Some(&analytics)),
    ];
    eventually("both analytics searches are forwarded", || async {
        let s = stats_of(&node, &analytics).await;
        (s["executing"] == 2).then_some(())
    })
    .await;
    let s = stats_of(&node, &analytics).await;
    assert_eq!(
        s["cpu"]["current_usage"], 0.0,
        "premise: nothing of analytics ran yet {s}"
    );

    // One thread frees: an analytics search runs, the polls measure it, and the group is over
    // its share while its other search still waits upstream.
    let (s, b) = node
        .req("POST", &format!("/_tasks/{}/_cancel", blocker_ids[0]), None)
        .await;
    assert!(s == 200 || s == 404, "{s} {b}");
    eventually("the gateway records analytics' running search", || async {
        let s = stats_of(&node, &analytics).await;
        (s["cpu"]["current_usage"].as_f64()? > 0.0).then_some(())
    })
    .await;
    let tag = [("workloadGroupId", analytics.as_str())];
    let rejected = node
        .req_with("POST", "/heavy/_search", Some(json!({"size": 0})), &tag)
        .await;
    // Threshold 0.01 × 0 (the test's node rejection threshold).
    assert_cpu_share_rejection(&rejected, &analytics, "0.0");

    // The other thread frees: the search that waited upstream gets it and is not turned away;
    // both analytics searches run to their end.
    let (s, b) = node
        .req("POST", &format!("/_tasks/{}/_cancel", blocker_ids[1]), None)
        .await;
    assert!(s == 200 || s == 404, "{s} {b}");
    for search in blockers {
        let status = search.await.expect("joined").status;
        assert!(status == 500 || status == 200, "{status}");
    }
    for search in waiting {
        let r = search.await.expect("joined");
        assert_eq!(r.status, 200, "{:.300}", r.body.to_string());
    }
    // One rejection, the door's; both forwarded searches completed.
    let s = stats_of(&node, &analytics).await;
    assert_eq!(s["total_rejections"], 1, "{s}");
    assert_eq!(s["cpu"]["rejections"], 1, "{s}");
    assert_eq!(s["total_completions"], 2, "{s}");
}

#[tokio::test]
async fn test_enforced_group_over_its_memory_share_loses_its_tasks_for_memory() {
    // A 64 MB budget: a heavy search (60,000 hits and buckets) allocates far more than the
    // group's 5% of it.
    let tmp = tempfile::tempdir().expect("tempdir");
    common::seed_heavy(tmp.path()).await;
    let node = TestNode::start_on(tmp.path(), &["node.memory_budget=64mb"]).await;
    put_settings(&node, json!({"wlm.workload_group.mode": "enabled"})).await;
    let body = json!({"name": "hog", "resiliency_mode": "enforced",
                      "resource_limits": {"memory": 0.05}});
    let (s, b) = node.req("PUT", "/_wlm/workload_group", Some(body)).await;
    assert_eq!(s, 200, "{b}");
    let hog = b["_id"].as_str().expect("_id").to_string();

    let stop = Arc::new(AtomicBool::new(false));
    let heavy = client_loop(
        &node,
        "/heavy/_search",
        common::heavy_query(),
        &hog,
        stop.clone(),
    );
    let s = after_passes(&node, "a pass cancels a task of hog", || async {
        let s = stats_of(&node, &hog).await;
        (s["total_cancellations"].as_u64()? > 0).then_some(s)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let replies = heavy.await.expect("joined");

    assert!(s["memory"]["cancellations"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["cpu"]["cancellations"], 0, "{s}");
    let cancelled = replies.iter().find(|(status, _)| *status == 500);
    let Some((_, body)) = cancelled else {
        panic!("no hog reply was a cancellation: {replies:?}");
    };
    let cause = &body["error"]["caused_by"];
    assert_eq!(cause["type"], "task_cancelled_exception", "{body}");
    let reason = cause["reason"].as_str().expect("reason");
    assert!(
        reason.starts_with(&format!(
            "cancelled task with reason: WorkloadGroup ID : {hog} breached the resource limit: ("
        )) && reason.ends_with(") for resource type : memory"),
        "{reason}"
    );
}

/// Waits until `group`'s recorded CPU usage is 0: on a gateway, whose refreshes run on their
/// own, the first refresh after the group's last search ended.
async fn usage_back_to_zero(node: &TestNode, group: &str) {
    eventually("the group's recorded usage is back to 0", || async {
        let s = stats_of(node, group).await;
        (s["cpu"]["current_usage"] == 0.0).then_some(())
    })
    .await;
}

/// How many quick searches [`queued_behind_a_blocker`] runs after the heavy one: through a
/// gateway, enough that each teaching the estimate 0 would wipe it (× 0.75 each).
const QUICK_SEARCHES: u64 = 20;

/// The quick searches [`queued_behind_a_blocker`] runs: none on a node, [`QUICK_SEARCHES`]
/// through a gateway.
fn quick_searches() -> u64 {
    if common::gateway_mode() {
        QUICK_SEARCHES
    } else {
        0
    }
}

/// Starts a node with one search thread whose enforcement never runs on its own, and an
/// `analytics` group (enforced, cpu 0.01) that has finished one heavy search, so its per-task
/// estimate is that search's share; then holds the search thread with a DEFAULT search and
/// queues a first analytics search behind it. Returns the node, the group id, the blocker's
/// task id and the two searches.
///
/// Through a gateway the thread is the upstream's, and the usage refresh keeps its default:
/// it is also how often the gateway polls the upstream for its searches' usage, without
/// which the heavy search would teach nothing. The group then also runs
/// [`QUICK_SEARCHES`] quick searches, most of which end between two polls: they have no
/// figure, and must leave the estimate as the heavy search left it.
async fn queued_behind_a_blocker(
    tmp: &std::path::Path,
    estimate: bool,
) -> (
    TestNode,
    String,
    String,
    tokio::task::JoinHandle<Reply>,
    tokio::task::JoinHandle<Reply>,
) {
    common::seed_heavy(tmp).await;
    let mut settings = vec![
        "thread_pool.search.size=1",
        "node.memory_budget=1tb",
        HOUR_ENFORCEMENT,
    ];
    if !common::gateway_mode() {
        settings.push(HOUR_REFRESH);
    }
    let node = TestNode::start_on(tmp, &settings).await;
    put_settings(
        &node,
        json!({
            "wlm.workload_group.mode": "enabled",
            "wlm.workload_group.estimate_unmeasured_tasks": estimate,
        }),
    )
    .await;
    let analytics = create_group(&node, "analytics", "enforced", 0.01).await;
    let learnt = spawn_search(&node, Some(&analytics)).await.expect("joined");
    assert_eq!(learnt.status, 200, "{:.300}", learnt.body.to_string());
    if common::gateway_mode() {
        let unmeasured = &node
            .state
            .workload
            .entry(&analytics)
            .expect("entry")
            .stats
            .unmeasured;
        let taught = unmeasured.per_task().cpu;
        let tag = [("workloadGroupId", analytics.as_str())];
        let quick = json!({"size": 1, "query": {"term": {"k": "key-00000001"}}});
        for _ in 0..QUICK_SEARCHES {
            // Until a refresh after the group's last search ended, the search is still part
            // of its recorded usage, which would turn the next away.
            usage_back_to_zero(&node, &analytics).await;
            let r = node
                .req_with("POST", "/heavy/_search", Some(quick.clone()), &tag)
                .await;
            assert_eq!(r.status, 200, "{:.300}", r.body.to_string());
        }
        let after = unmeasured.per_task().cpu;
        assert!(
            after > 0.01 * 0.8,
            "quick searches wiped the estimate the heavy one taught: {taught} before, {after} after"
        );
    }

    let blocker = spawn_search(&node, None);
    let blocker_id = eventually("the DEFAULT search holds the search thread", || async {
        let t = tasks_of(&node, "DEFAULT_WORKLOAD_GROUP").await;
        t.into_iter().find(|(_, ran)| *ran).map(|(id, _)| id)
    })
    .await;
    let first = spawn_search(&node, Some(&analytics));
    eventually(
        "the first analytics search waits for the thread",
        || async { (tasks_of(&node, &analytics).await.len() == 1).then_some(()) },
    )
    .await;
    if common::gateway_mode() {
        // The gateway's own refreshes run: the next one after the group's last search ended
        // records 0 (the queued search has not run).
        usage_back_to_zero(&node, &analytics).await;
    }
    let s = stats_of(&node, &analytics).await;
    assert_eq!(
        s["cpu"]["current_usage"], 0.0,
        "premise: no refresh recorded any usage {s}"
    );
    (node, analytics, blocker_id, blocker, first)
}

#[tokio::test]
async fn test_a_burst_is_admitted_one_heavy_task_at_a_time_once_the_group_has_an_estimate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (node, analytics, blocker_id, blocker, first) =
        queued_behind_a_blocker(tmp.path(), true).await;
    // Nothing is recorded (no refresh ran), but the queued search counts at what the finished
    // one used, which alone is over the group's share: the second search of the burst is
    // turned away at the door.
    let second = spawn_search(&node, Some(&analytics)).await.expect("joined");
    assert_cpu_share_rejection(&second, &analytics, "0.008");

    // The queued search is not a newcomer to itself: it runs when the thread frees. (Through
    // a gateway it was forwarded at once and waits upstream: nothing checks it again.)
    let (s, b) = node
        .req("POST", &format!("/_tasks/{blocker_id}/_cancel"), None)
        .await;
    assert!(s == 200 || s == 404, "{s} {b}");
    blocker.await.expect("joined");
    let first = first.await.expect("joined");
    assert_eq!(first.status, 200, "{:.300}", first.body.to_string());
    if common::gateway_mode() {
        // The gateway's refreshes measured the first search while it ran; the next refresh
        // after its end records 0.
        usage_back_to_zero(&node, &analytics).await;
    }
    // Its place is free once it ended: the next search is admitted.
    let third = spawn_search(&node, Some(&analytics)).await.expect("joined");
    assert_eq!(third.status, 200, "{:.300}", third.body.to_string());
    let s = stats_of(&node, &analytics).await;
    assert_eq!(s["total_rejections"], 1, "{s}");
    assert_eq!(s["cpu"]["rejections"], 1, "{s}");
    assert_eq!(s["total_completions"], 3 + quick_searches(), "{s}");
}

#[tokio::test]
async fn test_without_the_estimate_a_burst_is_admitted_whole_as_in_opensearch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (node, analytics, blocker_id, blocker, first) =
        queued_behind_a_blocker(tmp.path(), false).await;
    // Only the last recorded usage counts, and it is 0: the second search is admitted too.
    let second = spawn_search(&node, Some(&analytics));
    eventually(
        "the second analytics search is admitted and waits",
        || async { (tasks_of(&node, &analytics).await.len() == 2).then_some(()) },
    )
    .await;
    let (s, b) = node
        .req("POST", &format!("/_tasks/{blocker_id}/_cancel"), None)
        .await;
    assert!(s == 200 || s == 404, "{s} {b}");
    blocker.await.expect("joined");
    for search in [first, second] {
        let r = search.await.expect("joined");
        assert_eq!(r.status, 200, "{:.300}", r.body.to_string());
    }
    let s = stats_of(&node, &analytics).await;
    assert_eq!(s["total_rejections"], 0, "{s}");
}

#[tokio::test]
async fn test_a_refresh_that_measures_a_task_gives_its_reservation_back() {
    if common::gateway_mode() {
        return through_a_gateway_a_refresh_that_measures_a_search_gives_its_reservation_back()
            .await;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    common::seed_heavy(tmp.path()).await;
    let node = TestNode::start_on(
        tmp.path(),
        &["node.memory_budget=1tb", HOUR_ENFORCEMENT, HOUR_REFRESH],
    )
    .await;
    put_settings(
        &node,
        json!({
            "wlm.workload_group.mode": "enabled",
        }),
    )
    .await;
    let reports = create_group(&node, "reports", "monitor", 0.05).await;
    let entry = node.state.workload.entry(&reports).expect("entry");
    let unmeasured = entry.stats.unmeasured.clone();
    // A search that ends before the check proves nothing (its end gives the place back too):
    // try again with a new one.
    for attempt in 0.. {
        assert!(attempt < 20, "no search outlived a refresh in 20 attempts");
        let running = spawn_search(&node, Some(&reports));
        let id = eventually("the search has been sampled", || async {
            let t = tasks_of(&node, &reports).await;
            t.into_iter().find(|(_, ran)| *ran).map(|(id, _)| id)
        })
        .await;
        assert_eq!(
            unmeasured.count(),
            1,
            "admitted, not measured by any refresh"
        );
        let state = node.state.clone();
        let usage =
            tokio::task::spawn_blocking(move || sluice_server::enforcement::refresh_once(&state))
                .await
                .expect("refresh");
        let count = unmeasured.count();
        if measured_and_gave_back(&node, &reports, &id, &usage, count, running).await {
            break;
        }
    }
    assert_eq!(unmeasured.count(), 0);
}

/// The end of one attempt of the tests that a refresh measuring a task gives its reservation
/// back: cancels the `group` search `id` (`running` its request), and, when it was still
/// running after the refresh that answered `usage` and left `count` tasks counted at the
/// estimate, checks that refresh measured it and gave its reservation back. Answers whether it
/// was (the search may have ended first: the caller then tries again with a new one).
async fn measured_and_gave_back(
    node: &TestNode,
    group: &str,
    id: &str,
    usage: &std::collections::BTreeMap<String, sluice_core::resources::ResourceUsage>,
    count: u64,
    running: tokio::task::JoinHandle<Reply>,
) -> bool {
    let still_running = tasks_of(node, group).await.iter().any(|(t, _)| t == id);
    let (s, b) = node
        .req("POST", &format!("/_tasks/{id}/_cancel"), None)
        .await;
    assert!(s == 200 || s == 404, "{s} {b}");
    running.await.expect("joined");
    if still_running {
        assert!(usage[group].cpu > 0.0, "{usage:?}");
        assert_eq!(
            count, 0,
            "the refresh measured the search: no longer counted twice"
        );
    }
    still_running
}

/// [`test_a_refresh_that_measures_a_task_gives_its_reservation_back`] through a gateway, whose
/// refreshes run on their own: the usage refresh interval is also how often it polls the
/// upstream for its searches' usage, without which it measures nothing. So that the search is
/// seen unmeasured first, it waits upstream behind a DEFAULT search on the upstream's only
/// search thread, where no poll has a figure for it.
async fn through_a_gateway_a_refresh_that_measures_a_search_gives_its_reservation_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    common::seed_heavy(tmp.path()).await;
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "thread_pool.search.size=1",
            "node.memory_budget=1tb",
            HOUR_ENFORCEMENT,
        ],
    )
    .await;
    put_settings(&node, json!({"wlm.workload_group.mode": "enabled"})).await;
    let reports = create_group(&node, "reports", "monitor", 0.05).await;
    let entry = node.state.workload.entry(&reports).expect("entry");
    let unmeasured = entry.stats.unmeasured.clone();
    let refresh = || {
        let state = node.state.clone();
        async move {
            tokio::task::spawn_blocking(move || sluice_server::enforcement::refresh_once(&state))
                .await
                .expect("refresh")
        }
    };
    // A search that ends before the check proves nothing (its end gives the place back too):
    // try again with a new one.
    for attempt in 0.. {
        assert!(attempt < 20, "no search outlived a refresh in 20 attempts");
        let blocker = spawn_search(&node, None);
        let blocker_id = eventually("the DEFAULT search holds the upstream's thread", || async {
            let t = tasks_of(&node, "DEFAULT_WORKLOAD_GROUP").await;
            t.into_iter().find(|(_, ran)| *ran).map(|(id, _)| id)
        })
        .await;
        let running = spawn_search(&node, Some(&reports));
        eventually("the reports search is admitted", || async {
            (unmeasured.count() == 1).then_some(())
        })
        .await;
        // While it waits upstream, a refresh has no figure for it and keeps its place.
        let usage = refresh().await;
        assert_eq!(usage.get(&reports).map_or(0.0, |u| u.cpu), 0.0, "{usage:?}");
        assert_eq!(
            unmeasured.count(),
            1,
            "not measured by any refresh: still counted at the estimate"
        );
        // It runs once the thread frees, and the gateway's polls record the upstream's figures.
        let (s, b) = node
            .req("POST", &format!("/_tasks/{blocker_id}/_cancel"), None)
            .await;
        assert!(s == 200 || s == 404, "{s} {b}");
        blocker.await.expect("joined");
        let id = eventually("the search has been measured", || async {
            let t = tasks_of(&node, &reports).await;
            t.into_iter().find(|(_, ran)| *ran).map(|(id, _)| id)
        })
        .await;
        let usage = refresh().await;
        let count = unmeasured.count();
        if measured_and_gave_back(&node, &reports, &id, &usage, count, running).await {
            break;
        }
    }
    assert_eq!(unmeasured.count(), 0);
}
