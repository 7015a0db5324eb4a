//! Queueing of throttled requests over HTTP (issue #11 part B, seed 002, node tier): a request
//! refused by its bucket's `node_limit` parks in the bucket's queue (`queue.size_per_bucket`)
//! and runs when a slot frees; a full queue answers 429 with a computed `Retry-After`; a parked
//! request is listed by `_tasks` as queued and leaves the queue when cancelled; disabling
//! throttling releases the backlog; monitor groups and scroll continuations never park.
//!
//! Requests are held in flight by the heavy query and released by cancelling them. No sleeps.

use serde_json::{Value, json};

use crate::common::TestNode;
use crate::throttling::{
    ADMIN, cancel_all, cheap, create_group, node_in_mode, start_heavy, stats_of, wait_drained,
};

fn queued_group(name: &str, limit: u64, size: u64, mode: &str) -> Value {
    json!({"name": name, "resiliency_mode": mode, "resource_limits": {"memory": 0.1},
           "throttling": {"attribute": "group", "node_limit": limit},
           "queue": {"size_per_bucket": size}})
}

/// The search tasks of group `id`: (task id, queued?).
async fn tasks_of(node: &TestNode, id: &str) -> Vec<(String, bool)> {
    let r = node
        .req_with(
            "GET",
            "/_tasks?detailed&actions=indices:data/read/search",
            None,
            &ADMIN,
        )
        .await;
    let mut out = Vec::new();
    for (node_id, n) in r.body["nodes"].as_object().into_iter().flatten() {
        for (tid, t) in n["tasks"].as_object().into_iter().flatten() {
            if t["workload_group"]["id"] == json!(id) && t["cancelled"] == false {
                let queued = t["status"]["state"] == "queued";
                let _ = node_id;
                out.push((tid.clone(), queued));
            }
        }
    }
    out
}

/// Waits until group `id` has `running` tasks running and `queued` parked.
async fn wait_tasks(node: &TestNode, id: &str, running: usize, queued: usize) {
    for _ in 0..20_000 {
        let t = tasks_of(node, id).await;
        let q = t.iter().filter(|(_, q)| *q).count();
        if q == queued && t.len() - q == running {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "group {id} never had {running} running and {queued} queued: {:?}",
        tasks_of(node, id).await
    );
}

/// Starts a cheap search in the background; answers its status.
fn start_cheap(node: &TestNode, headers: &[(&str, &str)]) -> tokio::task::JoinHandle<u16> {
    let mut rb = node
        .client
        .post(node.url("/small/_search"))
        .header("content-type", "application/json")
        .body(json!({"query": {"match_all": {}}}).to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    tokio::spawn(async move { rb.send().await.map(|r| r.status().as_u16()).unwrap_or(0) })
}

#[tokio::test]
async fn test_queue_config_is_validated_with_clear_errors() {
    let node = node_in_mode("enabled", &[]).await;
    let no_throttle = json!({"name": "q", "resiliency_mode": "soft",
        "resource_limits": {"memory": 0.1}, "queue": {"size_per_bucket": 3}});
    let r = node
        .req_with("PUT", "/_wlm/workload_group", Some(no_throttle), &ADMIN)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let reason = r.body["error"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("queue.size_per_bucket"), "{reason}");
    for (bad, needle) in [
        (json!({"timeout": "1s"}), "unknown queue setting [timeout]"),
        (json!({"size": 3}), "unknown queue setting [size]"),
        (json!({"size_per_bucket": 10_001}), "must not exceed 10000"),
        (json!({"size_per_bucket": -1}), "must be an integer >= 0"),
    ] {
        let mut body = queued_group("q", 1, 1, "soft");
        body["queue"] = bad;
        let r = node
            .req_with("PUT", "/_wlm/workload_group", Some(body), &ADMIN)
            .await;
        assert_eq!(r.status, 400, "{}", r.body);
        let reason = r.body["error"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(needle), "{reason}");
    }
}

#[tokio::test]
async fn test_throttled_request_parks_and_runs_when_a_slot_frees_then_full_queue_is_429() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("q", 1, 1, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    // The bucket is full: the next request parks (listed as queued), the one after is refused.
    let parked = start_cheap(&node, &tag);
    wait_tasks(&node, &id, 1, 1).await;
    let r = cheap(&node, &tag).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let reason = r.body["error"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("its queue is full"), "{reason}");
    let retry: u64 = r.header_values("retry-after")[0].parse().expect("seconds");
    assert!((1..=60).contains(&retry), "{retry}");
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (s["total_queued"].clone(), s["queued_current"].clone()),
        (json!(1), json!(1)),
        "{s}"
    );
    assert_eq!(s["total_queue_rejections"], 1, "{s}");
    // Freeing the slot hands it to the parked request, which completes.
    let (running, _) = tasks_of(&node, &id)
        .await
        .into_iter()
        .find(|(_, q)| !*q)
        .expect("running task");
    let r = node
        .req_with("POST", &format!("/_tasks/{running}/_cancel"), None, &ADMIN)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(heavy.await.expect("joined"), 500);
    assert_eq!(parked.await.expect("joined"), 200);
    wait_drained(&node, &id).await;
    let s = stats_of(&node, &id).await;
    assert_eq!(s["queued_current"], 0, "{s}");
    assert_eq!(s["queue_peak"], 1, "{s}");
    assert_eq!(s["queue_wait_count"], 1, "{s}");
}

#[tokio::test]
async fn test_parked_request_cancelled_by_tasks_cancel_or_its_deadline_leaves_the_queue() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("c", 1, 5, "soft")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    let parked = start_cheap(&node, &tag);
    wait_tasks(&node, &id, 1, 1).await;
    let (task_id, _) = tasks_of(&node, &id)
        .await
        .into_iter()
        .find(|(_, q)| *q)
        .expect("queued task");
    let r = node
        .req_with("POST", &format!("/_tasks/{task_id}/_cancel"), None, &ADMIN)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(parked.await.expect("joined"), 500);
    wait_tasks(&node, &id, 1, 0).await;
    // `cancel_after_time_interval` counts queue time: the request is evicted when it passes.
    let r = node
        .req_with(
            "POST",
            "/small/_search?cancel_after_time_interval=50ms",
            Some(json!({"query": {"match_all": {}}})),
            &tag,
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
    let caused = &r.body["error"]["caused_by"];
    assert_eq!(caused["type"], "task_cancelled_exception", "{}", r.body);
    assert!(
        caused["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("Cancellation timeout of 50ms is expired"),
        "{}",
        r.body
    );
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (s["queued_current"].clone(), s["queue_wait_count"].clone()),
        (json!(0), json!(2)),
        "{s}"
    );
    cancel_all(&node, vec![heavy]).await;
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_disabling_throttling_releases_the_backlog_and_monitor_never_parks() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("r", 1, 5, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    let parked = vec![start_cheap(&node, &tag), start_cheap(&node, &tag)];
    wait_tasks(&node, &id, 1, 2).await;
    let r = node
        .req_with(
            "PUT",
            "/_wlm/workload_group/r",
            Some(json!({"throttling": null, "queue": null})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for p in parked {
        assert_eq!(p.await.expect("joined"), 200);
    }
    cancel_all(&node, vec![heavy]).await;

    // A monitor group counts what it would have queued, and admits.
    let mon = create_group(&node, queued_group("m", 1, 5, "monitor")).await;
    let mtag = [("workloadGroupId", mon.as_str())];
    let heavy = start_heavy(&node, &mtag);
    wait_tasks(&node, &mon, 1, 0).await;
    assert_eq!(cheap(&node, &mtag).await.status, 200);
    let s = stats_of(&node, &mon).await;
    assert_eq!(
        (
            s["total_queued"].clone(),
            s["total_would_queue"].clone(),
            s["total_would_throttle"].clone()
        ),
        (json!(0), json!(1), json!(1)),
        "{s}"
    );
    cancel_all(&node, vec![heavy]).await;
    wait_drained(&node, &mon).await;
}

#[tokio::test]
async fn test_leaving_enabled_mode_releases_every_backlog() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("m", 1, 5, "soft")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    let parked = start_cheap(&node, &tag);
    wait_tasks(&node, &id, 1, 1).await;
    crate::throttling::set_mode(&node, "monitor_only").await;
    assert_eq!(parked.await.expect("joined"), 200);
    cancel_all(&node, vec![heavy]).await;
    wait_drained(&node, &id).await;
}
