//! The dry run over HTTP (issue #16): in `monitor_only`, and for `monitor` groups, `_wlm/stats`
//! and the metrics count what `enabled` would have done — would-throttle (a 429), would-queue
//! with the wait it would have caused, would-reject, would-cancel (each task once), each
//! request in one of them at most, as `enabled` does one thing with it — while every request
//! is admitted and nothing is cancelled.
//!
//! Enforcement passes are run by the test (as the loop's timer would), polling for the effect
//! with a deadline; no sleeps.

use std::time::{Duration, Instant};

use crate::common::TestNode;
use crate::metrics::scrape;
use crate::throttling::{
    cancel_all, cheap, create_group, node_in_mode, set_mode, start_heavy, stats_of, wait_running,
};
use serde_json::{Value, json};

/// How long a test waits for an effect before failing: many heavy searches and passes, even
/// on a slow, shared machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// Runs one enforcement pass on the node.
async fn pass(node: &TestNode) {
    let st = node.state.clone();
    tokio::task::spawn_blocking(move || sluice_server::enforcement::run_once(&st))
        .await
        .expect("pass");
}

/// Runs passes until the stats of `id` satisfy `done`; returns them.
async fn passes_until(
    node: &TestNode,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        pass(node).await;
        let s = stats_of(node, id).await;
        if done(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}: {s}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn test_monitor_only_counts_would_queue_with_the_wait_it_would_have_caused() {
    would_queue_with_its_wait("monitor_only", "enforced").await;
}

#[tokio::test]
async fn test_monitor_group_counts_would_queue_with_the_wait_it_would_have_caused() {
    would_queue_with_its_wait("enabled", "monitor").await;
}

/// In `mode`, a group of `resiliency` with a queue, over its node_limit: every request is
/// admitted, and each breach counts as would-queue with the wait estimated from the group's
/// drain rate.
async fn would_queue_with_its_wait(mode: &str, resiliency: &str) {
    let node = node_in_mode(mode, &[]).await;
    let id = create_group(
        &node,
        json!({"name": "q", "resiliency_mode": resiliency, "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 5}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_running(&node, &id, 1).await;
    // Each breach is admitted; the first has no drain rate to estimate from (nothing completed
    // yet), the ones after it do.
    let deadline = Instant::now() + PATIENCE;
    let s = loop {
        assert_eq!(cheap(&node, &tag).await.status, 200);
        let s = stats_of(&node, &id).await;
        if s["total_would_queue_wait_millis"].as_u64().unwrap() > 0 {
            break s;
        }
        assert!(Instant::now() < deadline, "no wait was ever estimated: {s}");
    };
    assert!(s["total_would_queue"].as_u64().unwrap() >= 2, "{s}");
    assert!(
        s["max_would_queue_wait_millis"].as_u64().unwrap() > 0,
        "{s}"
    );
    assert!(
        s["max_would_queue_wait_millis"].as_u64().unwrap()
            <= s["total_would_queue_wait_millis"].as_u64().unwrap(),
        "{s}"
    );
    assert_eq!(s["total_queued"], 0, "{s}");
    assert_eq!(s["total_throttled"], 0, "{s}");

    let m = scrape(&node).await;
    let group = [("group_id", id.as_str())];
    assert_eq!(
        m.value("sluice_wlm_group_would_queue_total", &group),
        s["total_would_queue"].as_f64()
    );
    assert_eq!(
        m.value("sluice_wlm_group_would_queue_wait_seconds_total", &group),
        Some(s["total_would_queue_wait_millis"].as_f64().unwrap() / 1000.0)
    );
    cancel_all(&node, vec![heavy]).await;
}

#[tokio::test]
async fn test_monitor_only_counts_would_cancel_once_per_task() {
    let node = node_in_mode("monitor_only", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "analytics", "resiliency_mode": "enforced",
               "resource_limits": {"cpu": 0.05}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    let s = passes_until(&node, &id, "a pass would cancel the heavy search", |s| {
        s["total_would_cancel"] != 0
    })
    .await;
    assert_eq!(s["total_would_cancel"], 1, "{s}");
    // Further passes pick the same task again: it is not counted again.
    for _ in 0..3 {
        pass(&node).await;
    }
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_would_cancel"], 1, "{s}");
    assert_eq!(s["total_cancellations"], 0, "{s}");
    // Nothing was cancelled: the heavy search completes.
    assert_eq!(heavy.await.expect("joined"), 200);

    let m = scrape(&node).await;
    let group = [("group_id", id.as_str())];
    let s = stats_of(&node, &id).await;
    assert_eq!(
        m.value("sluice_wlm_group_would_cancel_total", &group),
        Some(1.0)
    );
    assert_eq!(
        m.value("sluice_wlm_group_would_reject_total", &group),
        s["total_would_reject"].as_f64()
    );
}

#[tokio::test]
async fn test_would_reject_is_counted_while_a_group_is_over_its_share() {
    let node = node_in_mode("monitor_only", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "analytics", "resiliency_mode": "enforced",
               "resource_limits": {"cpu": 0.05}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    // Heavy searches one after another keep the group over its share; a cheap request between
    // two passes that saw it over would have been rejected.
    let deadline = Instant::now() + PATIENCE;
    let mut heavies = Vec::new();
    let s = loop {
        if heavies
            .iter()
            .all(|h: &tokio::task::JoinHandle<u16>| h.is_finished())
        {
            heavies.push(start_heavy(&node, &tag));
        }
        pass(&node).await;
        assert_eq!(cheap(&node, &tag).await.status, 200);
        let s = stats_of(&node, &id).await;
        if s["total_would_reject"] != 0 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "nothing would ever be rejected: {s}"
        );
    };
    assert_eq!(s["total_rejections"], 0, "{s}");
    cancel_all(&node, heavies).await;
}

#[tokio::test]
async fn test_would_reject_counts_each_request_once_while_over_the_share() {
    // The share is checked at the door and again when the search starts (on the search thread,
    // or when a gateway forwards it); a would-be rejection counts once per request
    // (`admission/share.rs` R2). It once counted at both: up to twice per request.
    const REQUESTS: u64 = 4;
    for (mode, resiliency) in [("monitor_only", "enforced"), ("enabled", "monitor")] {
        // No usage refresh during the test: the group's usage stays as set below.
        let node = node_in_mode(
            mode,
            &[
                "wlm.workload_group.enforcement_interval=3600000",
                "wlm.workload_group.usage_refresh_interval=3600000",
            ],
        )
        .await;
        let id = create_group(
            &node,
            json!({"name": "watched", "resiliency_mode": resiliency,
                   "resource_limits": {"cpu": 0.05}}),
        )
        .await;
        let entry = node.state.workload.entry(&id).expect("group");
        entry.stats.cpu.set_current_usage(0.9);
        let tag = [("workloadGroupId", id.as_str())];
        for _ in 0..REQUESTS {
            assert_eq!(cheap(&node, &tag).await.status, 200, "{mode}");
        }
        let s = stats_of(&node, &id).await;
        assert_eq!(s["total_would_reject"], REQUESTS, "{mode}: {s}");
        assert_eq!(s["total_rejections"], 0, "{mode}: {s}");
    }
}

#[tokio::test]
async fn test_monitor_group_in_enabled_mode_counts_what_enforced_would_cancel() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "watched", "resiliency_mode": "monitor",
               "resource_limits": {"cpu": 0.05}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    let s = passes_until(
        &node,
        &id,
        "a pass would cancel the monitored search",
        |s| s["total_would_cancel"] != 0,
    )
    .await;
    assert_eq!(s["total_cancellations"], 0, "{s}");
    assert_eq!(heavy.await.expect("joined"), 200);
}

#[tokio::test]
async fn test_a_breach_would_queue_only_while_the_queue_would_have_room() {
    let node = node_in_mode("monitor_only", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "q", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 2}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    let mut running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    // Four breaches, each decided before the next arrives, all still running: `enabled` would
    // have parked the first two (the queue holds two) and refused the other two — counted as
    // would-queue and would-throttle, each breach in one only.
    for n in 1..=4u64 {
        running.push(start_heavy(&node, &tag));
        wait_decided(&node, &id, n).await;
    }
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_would_queue"], 2, "{s}");
    assert_eq!(s["total_would_throttle"], 2, "{s}");
    assert_eq!(s["total_throttled"], 0, "{s}");
    cancel_all(&node, running).await;
    // The breaches that ended left the would-be queue: the next one would queue again.
    assert_eq!(cheap(&node, &tag).await.status, 200);
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_would_queue"], 2, "{s}");
    running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    assert_eq!(cheap(&node, &tag).await.status, 200);
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_would_queue"], 3, "{s}");
    cancel_all(&node, running).await;
}

/// The throttle's decisions counted for group `id`, real and dry: parked, refused, and what
/// `enabled` would have parked or refused.
fn decisions(s: &Value) -> u64 {
    [
        "total_queued",
        "total_throttled",
        "total_would_queue",
        "total_would_throttle",
    ]
    .iter()
    .map(|k| s[*k].as_u64().unwrap_or(0))
    .sum()
}

/// Waits until group `id` has `n` throttle decisions counted ([`decisions`]).
async fn wait_decided(node: &TestNode, id: &str, n: u64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let s = stats_of(node, id).await;
        if decisions(&s) == n {
            return;
        }
        assert!(Instant::now() < deadline, "decision {n} not counted: {s}");
        tokio::task::yield_now().await;
    }
}

/// Runs three requests over group `id`'s node_limit of 1, each decided before the next
/// arrives, the first two held in flight: a heavy search takes the slot, a second one finds it
/// taken, then a cheap one finds both. Answers the cheap one's status.
async fn three_over_one(node: &TestNode, id: &str) -> u16 {
    let tag = [("workloadGroupId", id)];
    let first = start_heavy(node, &tag);
    wait_running(node, id, 1).await;
    let before = decisions(&stats_of(node, id).await);
    let second = start_heavy(node, &tag);
    wait_decided(node, id, before + 1).await;
    let status = cheap(node, &tag).await.status;
    cancel_all(node, vec![first, second]).await;
    status
}

/// Runs [`three_over_one`] on group `id` of `node` (in `monitor_only`) and then in `enabled`:
/// the dry run must predict one queued and one refused request, and `enabled` must then queue
/// and refuse exactly those. Answers the dry run's figures.
async fn dry_run_predicts_enabled(node: &TestNode, id: &str) -> Value {
    assert_eq!(three_over_one(node, id).await, 200);
    let dry = stats_of(node, id).await;
    assert_eq!(
        (&dry["total_would_queue"], &dry["total_would_throttle"]),
        (&json!(1), &json!(1)),
        "{dry}"
    );
    set_mode(node, "enabled").await;
    assert_eq!(three_over_one(node, id).await, 429);
    let s = stats_of(node, id).await;
    assert_eq!(
        (&s["total_queued"], &s["total_throttled"]),
        (&dry["total_would_queue"], &dry["total_would_throttle"]),
        "enabled: {s}"
    );
    dry
}

#[tokio::test]
async fn test_the_dry_run_of_a_queued_group_counts_what_enabled_then_does() {
    // node_limit 1 and a queue of 1, three requests at once: `enabled` runs one, parks one and
    // refuses one (429). The dry run once counted both breaches as would-throttle (and the
    // first as would-queue too): 2 predicted 429s for 1.
    let node = node_in_mode("monitor_only", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "q", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 1}}),
    )
    .await;
    dry_run_predicts_enabled(&node, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_shared_tier_dry_run_counts_what_enabled_then_does() {
    // The same pattern on a shared-only group (one node is a cluster of one: it owns the
    // bucket's pool): `enabled` runs one on the one cluster-wide lease, parks one and refuses
    // one. The shared tier's dry run once counted both denials as would-throttle: 2 predicted
    // 429s for 1.
    let node = node_in_mode("monitor_only", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "sq", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "shared_limit": 1},
               "queue": {"size_per_bucket": 1}}),
    )
    .await;
    let dry = dry_run_predicts_enabled(&node, &id).await;
    assert_eq!(dry["total_shared_throttled"], 2, "{dry}");
}

#[tokio::test]
async fn test_the_dry_run_of_a_paced_group_counts_its_waits_not_rejections() {
    // A queued `enforced` group with a cpu limit is paced under `enabled`: over its share, its
    // requests wait (for CPU quota) and none is rejected. The dry run once counted each of
    // them as would-reject: 429s `enabled` never sends.
    const REQUESTS: u64 = 3;
    let quiet = [
        "wlm.workload_group.enforcement_interval=3600000",
        "wlm.workload_group.usage_refresh_interval=3600000",
    ];
    let paced = json!({"name": "paced", "resiliency_mode": "enforced",
                       "resource_limits": {"cpu": 0.05},
                       "throttling": {"attribute": "group", "node_limit": 10},
                       "queue": {"size_per_bucket": 5}});
    for (mode, resiliency) in [("monitor_only", "enforced"), ("enabled", "monitor")] {
        // No usage refresh during the test: the group's usage stays as set below.
        let node = node_in_mode(mode, &quiet).await;
        let mut group = paced.clone();
        group["resiliency_mode"] = json!(resiliency);
        let id = create_group(&node, group).await;
        let entry = node.state.workload.entry(&id).expect("group");
        entry.stats.cpu.set_current_usage(0.9);
        let tag = [("workloadGroupId", id.as_str())];
        for _ in 0..REQUESTS {
            assert_eq!(cheap(&node, &tag).await.status, 200, "{mode}");
        }
        let s = stats_of(&node, &id).await;
        assert_eq!(s["total_would_reject"], 0, "{mode}: {s}");
        assert_eq!(s["total_would_queue"], REQUESTS, "{mode}: {s}");
        assert_eq!(s["total_would_throttle"], 0, "{mode}: {s}");
    }

    // `enabled` paces the same group over the same share: no 429.
    let node = node_in_mode("enabled", &quiet).await;
    let id = create_group(&node, paced).await;
    let entry = node.state.workload.entry(&id).expect("group");
    entry.stats.cpu.set_current_usage(0.9);
    let tag = [("workloadGroupId", id.as_str())];
    for _ in 0..REQUESTS {
        assert_eq!(cheap(&node, &tag).await.status, 200);
    }
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_rejections"], 0, "enabled: {s}");
}

#[tokio::test]
async fn test_a_request_the_share_would_reject_counts_as_would_reject_only() {
    // A group over its cpu share with node_limit 1, two requests at once: `enabled` rejects
    // both for the share before their throttle, and throttles neither. The dry run once let
    // the first take the slot and counted the second as would-throttle too.
    let node = node_in_mode(
        "monitor_only",
        &[
            "wlm.workload_group.enforcement_interval=3600000",
            "wlm.workload_group.usage_refresh_interval=3600000",
        ],
    )
    .await;
    let id = create_group(
        &node,
        json!({"name": "over", "resiliency_mode": "enforced", "resource_limits": {"cpu": 0.05},
               "throttling": {"attribute": "group", "node_limit": 1}}),
    )
    .await;
    // No usage refresh during the test: the group's usage stays as set here.
    let entry = node.state.workload.entry(&id).expect("group");
    entry.stats.cpu.set_current_usage(0.9);
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_running(&node, &id, 1).await;
    assert_eq!(cheap(&node, &tag).await.status, 200);
    let dry = stats_of(&node, &id).await;
    cancel_all(&node, vec![heavy]).await;
    assert_eq!(dry["total_would_reject"], 2, "{dry}");
    assert_eq!(dry["total_would_throttle"], 0, "{dry}");
    assert_eq!(dry["total_would_queue"], 0, "{dry}");

    set_mode(&node, "enabled").await;
    assert_eq!(start_heavy(&node, &tag).await.expect("joined"), 429);
    assert_eq!(cheap(&node, &tag).await.status, 429);
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (&s["total_rejections"], &s["total_throttled"]),
        (&dry["total_would_reject"], &dry["total_would_throttle"]),
        "enabled: {s}"
    );
}
