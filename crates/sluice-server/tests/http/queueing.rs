//! Queueing of throttled requests over HTTP (issue #11 part B, seed 002, node tier): a request
//! refused by its bucket's `node_limit` parks in the bucket's queue (`queue.size_per_bucket`)
//! and runs when a slot frees; a full queue answers 429 with a computed `Retry-After`; a parked
//! request is listed by `_tasks` as queued and leaves the queue when cancelled; disabling
//! throttling releases the backlog; monitor groups never park, scroll continuations do.
//!
//! Requests are held in flight by the heavy query and released by cancelling them. No sleeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    let body = json!({"query": {"match_all": {}}});
    crate::throttling::start_search(node, "/small/_search", body, headers)
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

    // A monitor group counts what it would have queued — as would-queue only: `enabled` would
    // have parked it, not refused it — and admits.
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
        (json!(0), json!(1), json!(0)),
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

/// Cancels group `id`'s running (not queued) search tasks, one by one.
pub(crate) async fn cancel_running(node: &TestNode, id: &str) {
    for (task, queued) in tasks_of(node, id).await {
        if !queued {
            let r = node
                .req_with("POST", &format!("/_tasks/{task}/_cancel"), None, &ADMIN)
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    }
}

#[tokio::test]
async fn test_client_disconnect_evicts_a_parked_request_at_once() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("d", 1, 5, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    let parked = start_cheap(&node, &tag);
    wait_tasks(&node, &id, 1, 1).await;
    // The client goes away: its connection closes and the server drops the request.
    parked.abort();
    let _ = parked.await;
    wait_tasks(&node, &id, 1, 0).await;
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (s["queued_current"].clone(), s["queue_wait_count"].clone()),
        (json!(0), json!(1)),
        "{s}"
    );
    // Its end counts, as any task's does, whatever ends it: one completion, a failure (the
    // heavy search still runs).
    assert_eq!(
        (s["total_completions"].clone(), s["failures"].clone()),
        (json!(1), json!(1)),
        "{s}"
    );
    assert_eq!(node.state.workload.permits.num_waiter_nodes(), 0);
    cancel_all(&node, vec![heavy]).await;
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_msearch_items_park_one_by_one_and_the_parents_cancellation_evicts_them() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("ms", 1, 5, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    let rb = crate::throttling::two_item_msearch(&node, "/_msearch?max_concurrent_searches=2", &id);
    let msearch = tokio::spawn(async move {
        let resp = rb.send().await.expect("sent");
        (
            resp.status().as_u16(),
            resp.json::<Value>().await.expect("json"),
        )
    });
    // Each item parks on its own.
    wait_tasks(&node, &id, 1, 2).await;
    // Cancelling the msearch task cancels its parked items: they leave the queue.
    let r = node
        .req_with(
            "POST",
            "/_tasks/_cancel?actions=indices:data/read/msearch",
            None,
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (status, body) = msearch.await.expect("joined");
    assert_eq!(status, 200, "{body}");
    for item in body["responses"].as_array().expect("responses") {
        assert_eq!(item["status"], 500, "{item}");
        assert_eq!(
            item["error"]["caused_by"]["type"], "task_cancelled_exception",
            "{item}"
        );
    }
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (s["total_queued"].clone(), s["queued_current"].clone()),
        (json!(2), json!(0)),
        "{s}"
    );
    cancel_all(&node, vec![heavy]).await;
    wait_drained(&node, &id).await;
}

/// How long a test waits for an answer that must come: a guard against a hang, not a measure.
const ANSWER_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

#[tokio::test]
async fn test_msearch_with_more_items_than_the_node_limit_runs_them_one_after_another() {
    // The items past the group's node_limit park, and run as the request's own earlier items
    // finish: a gateway once held the admitted items' slots until every item was admitted,
    // and the msearch never answered. A heavy search holds the group's one slot first, so
    // every item parks (whatever the machine's speed), then its end lets them run in turn.
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("ms_more", 1, 5, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    for path in ["/_msearch", "/_msearch?max_concurrent_searches=3"] {
        let heavy = start_heavy(&node, &tag);
        wait_tasks(&node, &id, 1, 0).await;
        let body = crate::common::ndjson(&[
            json!({"index": "small"}),
            json!({"size": 0}),
            json!({"index": "small"}),
            json!({}),
            json!({"index": "small"}),
            json!({"size": 1}),
        ]);
        let request = node
            .client
            .post(node.url(path))
            .header("content-type", "application/x-ndjson")
            .header("workloadGroupId", id.as_str())
            .body(body)
            .timeout(ANSWER_GUARD)
            .send();
        let msearch = tokio::spawn(request);
        wait_tasks(&node, &id, 1, 3).await;
        let (heavy_id, _) = tasks_of(&node, &id)
            .await
            .into_iter()
            .find(|(_, queued)| !queued)
            .expect("the heavy search");
        let r = node
            .req_with("POST", &format!("/_tasks/{heavy_id}/_cancel"), None, &ADMIN)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(heavy.await.expect("joined"), 500);
        let resp = msearch
            .await
            .expect("joined")
            .unwrap_or_else(|e| panic!("{path}: the msearch never answered: {e}"));
        assert_eq!(resp.status(), 200, "{path}");
        let body: Value = resp.json().await.expect("json");
        let items = body["responses"].as_array().expect("responses");
        assert_eq!(items.len(), 3, "{body}");
        for item in items {
            assert_eq!(item["status"], 200, "{path}: {item}");
        }
        assert_eq!(items[0]["hits"]["hits"].as_array().map(Vec::len), Some(0));
        assert_eq!(items[2]["hits"]["hits"].as_array().map(Vec::len), Some(1));
    }
    // Six items and two heavy searches ended; every item waited in the queue.
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (
            s["total_completions"].clone(),
            s["total_queued"].clone(),
            s["queued_current"].clone()
        ),
        (json!(8), json!(6), json!(0)),
        "{s}"
    );
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_msearch_url_cancel_after_ends_an_item_waiting_in_the_queue() {
    // `?cancel_after_time_interval` of the msearch is each item's, its time in the queue
    // included, as for a search.
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("ms_late", 1, 5, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    let body = crate::common::ndjson(&[json!({"index": "small"}), json!({})]);
    let resp = node
        .client
        .post(node.url("/_msearch?cancel_after_time_interval=300ms"))
        .header("content-type", "application/x-ndjson")
        .header("workloadGroupId", id.as_str())
        .body(body)
        .timeout(ANSWER_GUARD)
        .send()
        .await
        .expect("the msearch answered while its item waited in the queue");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("json");
    let item = &body["responses"][0];
    assert_eq!(item["status"], 500, "{body}");
    assert_eq!(
        item["error"]["caused_by"]["type"], "task_cancelled_exception",
        "{item}"
    );
    assert!(
        item["error"]["caused_by"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("300ms")),
        "{item}"
    );
    cancel_all(&node, vec![heavy]).await;
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_deleting_the_group_or_switching_it_to_monitor_releases_its_backlog() {
    let node = node_in_mode("enabled", &[]).await;
    for change in ["monitor", "delete"] {
        let id = create_group(&node, queued_group("b", 1, 5, "soft")).await;
        let tag = [("workloadGroupId", id.as_str())];
        let heavy = start_heavy(&node, &tag);
        wait_tasks(&node, &id, 1, 0).await;
        let parked = vec![start_cheap(&node, &tag), start_cheap(&node, &tag)];
        wait_tasks(&node, &id, 1, 2).await;
        let r = match change {
            "monitor" => {
                node.req_with(
                    "PUT",
                    "/_wlm/workload_group/b",
                    Some(json!({"resiliency_mode": "monitor"})),
                    &ADMIN,
                )
                .await
            }
            _ => {
                node.req_with("DELETE", "/_wlm/workload_group/b", None, &ADMIN)
                    .await
            }
        };
        assert_eq!(r.status, 200, "{change}: {}", r.body);
        for p in parked {
            assert_eq!(p.await.expect("joined"), 200, "{change}");
        }
        cancel_all(&node, vec![heavy]).await;
        if change == "monitor" {
            wait_drained(&node, &id).await;
            let r = node
                .req_with("DELETE", "/_wlm/workload_group/b", None, &ADMIN)
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    }
    assert_eq!(node.state.workload.permits.num_buckets(), 0);
}

#[tokio::test]
async fn test_deleting_a_group_over_its_share_runs_every_parked_request() {
    // An enforced group over its memory share: one request runs, three are parked behind it.
    // Deleting the group releases them, and a deleted group rejects nothing (facts §6.2 step
    // 3), so each runs (`admission/share.rs` R1); switching it to `monitor` releases them too,
    // and a monitor group rejects nothing either. They once got the group's 429 from the
    // share check, judged against the group as it was when they were tagged. The ends of a
    // deleted group's tasks count in DEFAULT, as OpenSearch counts a task of a group no longer
    // active (facts §6.1).
    let node = node_in_mode("enabled", &NO_REFRESH).await;
    let default = node.state.workload.default_entry().stats.clone();
    for change in ["delete", "monitor"] {
        let name = format!("over_{change}");
        let id = create_group(&node, queued_group(&name, 1, 5, "enforced")).await;
        let tag = [("workloadGroupId", id.as_str())];
        let heavy = start_heavy(&node, &tag);
        over_its_share_once_started(&node, &id).await;
        let parked: Vec<_> = (0..3).map(|_| start_cheap(&node, &tag)).collect();
        wait_tasks(&node, &id, 1, 3).await;
        let completed_in_default = default.total_completions.get();
        let path = format!("/_wlm/workload_group/{name}");
        let r = match change {
            "delete" => node.req_with("DELETE", &path, None, &ADMIN).await,
            _ => {
                let body = json!({"resiliency_mode": "monitor"});
                node.req_with("PUT", &path, Some(body), &ADMIN).await
            }
        };
        assert_eq!(r.status, 200, "{change}: {}", r.body);
        for p in parked {
            let status = tokio::time::timeout(ANSWER_GUARD, p)
                .await
                .unwrap_or_else(|_| panic!("{change}: a released request was never answered"))
                .expect("joined");
            assert_eq!(status, 200, "{change}");
        }
        cancel_all(&node, vec![heavy]).await;
        // The released three and the running one, whichever way it ended.
        let into_default = if change == "delete" { 4 } else { 0 };
        assert_eq!(
            default.total_completions.get(),
            completed_in_default + into_default,
            "{change}"
        );
    }
    assert_eq!(node.state.workload.permits.num_buckets(), 0);
}

/// Waits until group `id`'s one search has started (past the check when a search starts: the
/// usage set next cannot turn it away), then sets the group over its share (0.5 of the node's
/// memory against 0.1 × 0.8), as a refresh would record it. The test's node runs no refresh
/// to change it ([`NO_REFRESH`]).
async fn over_its_share_once_started(node: &TestNode, id: &str) {
    let entry = node.state.workload.entry(id).expect("group");
    let deadline = std::time::Instant::now() + ANSWER_GUARD;
    while entry.stats.executing() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the search never started"
        );
        tokio::task::yield_now().await;
    }
    entry.stats.memory.set_current_usage(0.5);
}

#[tokio::test]
async fn test_deleting_a_group_over_its_share_runs_its_parked_msearch_items() {
    // `_msearch` items park one by one and are admitted by the same pipeline: released by the
    // deletion of their group over its share, every item runs (`admission/share.rs` R1). An
    // outside trial saw two of six items get the deleted group's 429 through a gateway.
    let node = node_in_mode("enabled", &NO_REFRESH).await;
    let id = create_group(&node, queued_group("ms_gone", 1, 5, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let heavy = start_heavy(&node, &tag);
    over_its_share_once_started(&node, &id).await;
    let body = crate::common::ndjson(&[
        json!({"index": "small"}),
        json!({}),
        json!({"index": "small"}),
        json!({}),
        json!({"index": "small"}),
        json!({}),
    ]);
    let request = node
        .client
        .post(node.url("/_msearch?max_concurrent_searches=3"))
        .header("content-type", "application/x-ndjson")
        .header("workloadGroupId", id.as_str())
        .body(body)
        .timeout(ANSWER_GUARD)
        .send();
    let msearch = tokio::spawn(request);
    wait_tasks(&node, &id, 1, 3).await;
    let r = node
        .req_with("DELETE", "/_wlm/workload_group/ms_gone", None, &ADMIN)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let resp = msearch
        .await
        .expect("joined")
        .unwrap_or_else(|e| panic!("the msearch never answered: {e}"));
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("json");
    let items = body["responses"].as_array().expect("responses");
    assert_eq!(items.len(), 3, "{body}");
    for item in items {
        assert_eq!(item["status"], 200, "{item}");
    }
    cancel_all(&node, vec![heavy]).await;
}

/// A continuation of a scroll opened in a queued group parks like any search of the group,
/// and gets its page once the slot frees: a client's scan survives the throttle (before, it
/// was refused 429 and opensearch-py's `helpers.scan` ended after its first page).
#[tokio::test]
async fn test_a_scroll_continuation_parks_in_its_group_and_gets_its_page() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("sc", 1, 5, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let opened = node
        .req_with(
            "POST",
            "/small/_search?scroll=1m",
            Some(json!({"size": 1})),
            &tag,
        )
        .await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let first = opened.body["hits"]["hits"][0]["_id"].clone();
    let scroll_id = opened.body["_scroll_id"].as_str().expect("id").to_string();
    let heavy = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    // No header: the continuation belongs to the scroll's group, and waits there.
    let page = {
        let rb = node
            .client
            .post(node.url("/_search/scroll"))
            .header("content-type", "application/json")
            .body(json!({"scroll": "1m", "scroll_id": scroll_id}).to_string());
        tokio::spawn(async move {
            let r = rb.send().await.expect("the continuation is answered");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        })
    };
    crate::common::eventually("the continuation is parked", || async {
        let s = stats_of(&node, &id).await;
        match (s["total_queued"].as_u64(), s["queued_current"].as_u64()) {
            (Some(1), Some(1)) => Ok(()),
            _ => Err(s.to_string()),
        }
    })
    .await;
    assert!(
        !page.is_finished(),
        "answered while its group's slot was taken"
    );
    cancel_all(&node, vec![heavy]).await;
    let (status, body) = page.await.expect("the continuation's task");
    assert_eq!(status, 200, "{body}");
    // The next page of the scroll (`small` holds one document: the first page had it).
    assert_eq!(
        body["hits"]["total"], opened.body["hits"]["total"],
        "{body}"
    );
    assert_eq!(body["hits"]["hits"], json!([]), "{body}");
    assert!(first.is_string(), "{}", opened.body);
    wait_drained(&node, &id).await;
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_throttled"], 0, "{s}");
}

#[tokio::test]
async fn test_raising_the_limit_admits_waiters_at_once_and_lowering_admits_none() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("l", 1, 10, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let first = start_heavy(&node, &tag);
    wait_tasks(&node, &id, 1, 0).await;
    let waiting = vec![start_heavy(&node, &tag), start_heavy(&node, &tag)];
    wait_tasks(&node, &id, 1, 2).await;
    // Raising node_limit to 3 admits both parked requests at once.
    let r = node
        .req_with(
            "PUT",
            "/_wlm/workload_group/l",
            Some(json!({"throttling": {"node_limit": 3}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_tasks(&node, &id, 3, 0).await;
    // Lowering it to 1: a new request parks, and stays parked while in-flight is above 1.
    let r = node
        .req_with(
            "PUT",
            "/_wlm/workload_group/l",
            Some(json!({"throttling": {"node_limit": 1}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let late = start_cheap(&node, &tag);
    wait_tasks(&node, &id, 3, 1).await;
    // One running search ends: two still run, above the limit of 1, so nobody is admitted.
    let (one, _) = tasks_of(&node, &id)
        .await
        .into_iter()
        .find(|(_, q)| !*q)
        .expect("running");
    let r = node
        .req_with("POST", &format!("/_tasks/{one}/_cancel"), None, &ADMIN)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_tasks(&node, &id, 2, 1).await;
    // The other two end: the slot goes to the parked request.
    cancel_running(&node, &id).await;
    assert_eq!(late.await.expect("joined"), 200);
    for h in std::iter::once(first).chain(waiting) {
        assert_eq!(h.await.expect("joined"), 500);
    }
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_a_queued_group_over_its_share_waits_for_it_instead_of_being_rejected() {
    let node = node_in_mode("enabled", &[]).await;
    // The loop's own refreshes are pushed out of the test's way: after this, the next refresh
    // re-reads the hour-long intervals and waits, so the usage set below stays as set.
    let refreshed = node.state.enforcement.usage_recorded.notified();
    tokio::pin!(refreshed);
    refreshed.as_mut().enable();
    let r = node
        .req_with(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {
                "wlm.workload_group.enforcement_interval": 3_600_000,
                "wlm.workload_group.usage_refresh_interval": 3_600_000}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    refreshed.await;
    // Its limit is memory: a cpu limit would make the group paced (the next test).
    let body = json!({"name": "w", "resiliency_mode": "enforced",
        "resource_limits": {"memory": 0.1},
        "throttling": {"attribute": "group", "node_limit": 2},
        "queue": {"size_per_bucket": 5}});
    let id = create_group(&node, body).await;
    let tag = [("workloadGroupId", id.as_str())];
    let entry = node.state.workload.entry(&id).expect("group");
    // The group is over its share (0.5 of the node's memory against 0.1 × 0.8): a slot is free, but the
    // request waits — listed as queued — instead of being turned away.
    entry.stats.memory.set_current_usage(0.5);
    let waiting = start_cheap(&node, &tag);
    wait_tasks(&node, &id, 0, 1).await;
    // Its share comes back with the next recorded usage: it runs.
    entry.stats.memory.set_current_usage(0.0);
    node.state.enforcement.usage_recorded.notify_waiters();
    assert_eq!(waiting.await.expect("joined"), 200);
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (
            s["total_rejections"].clone(),
            s["total_queued"].clone(),
            s["queued_current"].clone(),
            s["total_completions"].clone()
        ),
        (json!(0), json!(1), json!(0), json!(1)),
        "{s}"
    );
    // A group without a queue is turned away at the door in the same state.
    let body = json!({"name": "n", "resiliency_mode": "enforced",
        "resource_limits": {"memory": 0.1},
        "throttling": {"attribute": "group", "node_limit": 2}});
    let plain = create_group(&node, body).await;
    let plain_entry = node.state.workload.entry(&plain).expect("group");
    plain_entry.stats.memory.set_current_usage(0.5);
    let r = cheap(&node, &[("workloadGroupId", plain.as_str())]).await;
    assert_eq!(r.status, 429, "{}", r.body);
}

/// Start settings that keep the enforcement loop's passes and refreshes out of a test: only
/// the test's own actions wake a request waiting for its share.
const NO_REFRESH: [&str; 2] = [
    "wlm.workload_group.enforcement_interval=3600000",
    "wlm.workload_group.usage_refresh_interval=3600000",
];

/// Creates a paced group `name` (enforced, cpu 0.1, node_limit 1, a queue of 5) that owes an
/// hour of CPU, so its requests wait for their share until something changes; returns its id.
async fn paced_group_in_debt(node: &TestNode, name: &str) -> String {
    let body = json!({"name": name, "resiliency_mode": "enforced",
        "resource_limits": {"cpu": 0.1},
        "throttling": {"attribute": "group", "node_limit": 1},
        "queue": {"size_per_bucket": 5}});
    let id = create_group(node, body).await;
    let entry = node.state.workload.entry(&id).expect("group");
    let mut debt = sluice_core::resources::CpuQuota::new(0, 1e9);
    debt.charge(3_600 * 1_000_000_000);
    *entry.stats.quota.lock() = Some(debt);
    id
}

#[tokio::test]
async fn test_requests_waiting_for_a_paced_share_follow_their_group_and_the_mode_at_once() {
    // Usage is never refreshed on its own here: what wakes a waiting request is the change
    // itself. Each request owes an hour of CPU, so only the change can let it through.
    let node = node_in_mode("enabled", &NO_REFRESH).await;
    for action in ["soft", "delete", "disabled"] {
        let name = format!("paced_{action}");
        let id = paced_group_in_debt(&node, &name).await;
        let tag = [("workloadGroupId", id.as_str())];
        let waiting = start_cheap(&node, &tag);
        wait_tasks(&node, &id, 0, 1).await;
        let path = format!("/_wlm/workload_group/{name}");
        let r = match action {
            // No longer paced: a soft group's share is not kept by a quota.
            "soft" => {
                let body = json!({"resiliency_mode": "soft"});
                node.req_with("PUT", &path, Some(body), &ADMIN).await
            }
            // A deleted group's waiting requests run, as its parked ones do.
            "delete" => node.req_with("DELETE", &path, None, &ADMIN).await,
            // Out of `enabled`, nothing waits (and usage is no longer refreshed).
            _ => {
                let body = json!({"persistent": {"wlm.workload_group.mode": "disabled"}});
                node.req_with("PUT", "/_cluster/settings", Some(body), &ADMIN)
                    .await
            }
        };
        assert_eq!(r.status, 200, "{action}: {}", r.body);
        let status = tokio::time::timeout(ANSWER_GUARD, waiting)
            .await
            .unwrap_or_else(|_| panic!("{action}: the waiting request was never answered"))
            .expect("joined");
        assert_eq!(status, 200, "{action}");
    }
}

#[tokio::test]
async fn test_a_stopping_node_refuses_what_waits_for_admission_and_stops() {
    // One request holds the group's only slot while it waits for its share (an hour of CPU
    // owed), another is parked behind it for the slot: asked to stop, the node answers both
    // 503 `node_closed_exception` at once — neither runs past its limits — and stops, rather
    // than wait for a queue that only time would drain (`admission/queue.rs` S1). It once ran
    // both without a permit: an outside trial saw a stopping node's backlog run at once, past
    // the cluster-wide limit.
    let node = node_in_mode("enabled", &NO_REFRESH).await;
    let id = paced_group_in_debt(&node, "paced_stop").await;
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let rb = node
                .client
                .post(node.url("/small/_search"))
                .header("content-type", "application/json")
                .header("workloadGroupId", &id)
                .body(json!({"query": {"match_all": {}}}).to_string());
            tokio::spawn(async move {
                let r = rb.send().await.expect("answered");
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.expect("json"))
            })
        })
        .collect();
    wait_tasks(&node, &id, 0, 2).await;
    let entry = node.state.workload.entry(&id).expect("group");
    tokio::time::timeout(ANSWER_GUARD, node.stop())
        .await
        .expect("the node stops while requests wait for admission");
    for w in waiting {
        let (status, body) = w.await.expect("joined");
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["type"], "node_closed_exception", "{body}");
        let reason = body["error"]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("paced_stop") && reason.contains("retry it on another node"),
            "{reason}"
        );
    }
    // Both ended, as failures; neither completed a search.
    let stats = &entry.stats;
    assert_eq!(
        (stats.total_completions.get(), stats.failures.get()),
        (2, 2)
    );
}

#[tokio::test]
async fn test_a_paced_group_waits_for_its_cpu_quota_without_429_or_cancellation() {
    // A queued `enforced` group with a cpu limit is paced: its requests wait while its CPU
    // quota (earned at its share, spent by its tasks) is in debt.
    let node = node_in_mode("enabled", &[]).await;
    let body = json!({"name": "p", "resiliency_mode": "enforced",
        "resource_limits": {"cpu": 0.1},
        "throttling": {"attribute": "group", "node_limit": 1},
        "queue": {"size_per_bucket": 5}});
    let id = create_group(&node, body).await;
    let tag = [("workloadGroupId", id.as_str())];
    let entry = node.state.workload.entry(&id).expect("group");
    // Its last usage far over its share does not matter: its cpu share is its quota's.
    entry.stats.cpu.set_current_usage(0.9);
    assert_eq!(cheap(&node, &tag).await.status, 200);
    // An hour of CPU owed: the next request waits, listed as queued.
    {
        let mut debt = sluice_core::resources::CpuQuota::new(0, 1e9);
        debt.charge(3_600 * 1_000_000_000);
        *entry.stats.quota.lock() = Some(debt);
    }
    let waiting = start_cheap(&node, &tag);
    wait_tasks(&node, &id, 0, 1).await;
    // The debt is paid (a fresh quota is made at the next check): it runs.
    *entry.stats.quota.lock() = None;
    node.state.enforcement.usage_recorded.notify_waiters();
    assert_eq!(waiting.await.expect("joined"), 200);
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (
            s["total_rejections"].clone(),
            s["total_queued"].clone(),
            s["total_completions"].clone()
        ),
        (json!(0), json!(1), json!(2)),
        "{s}"
    );
    assert!(
        entry.stats.quota.lock().is_some(),
        "the quota was made again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_queue_peak_never_exceeds_the_queue_under_a_stream_of_hand_offs() {
    // One slot and one queue place, sixteen clients in closed loops: each freed slot goes to
    // the parked request while new ones keep arriving, so a request often parks in the place
    // the one handed the slot just left, before that one's task has run. The peak counts
    // requests parked at once, which the queue bounds: never two.
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, queued_group("p", 1, 1, "soft")).await;
    // `queued_current`, read all along, never shows more either.
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (client, url, done) = (
            node.client.clone(),
            node.url(&format!("/_wlm/stats/{id}")),
            done.clone(),
        );
        let id = id.clone();
        tokio::spawn(async move {
            let mut most = 0;
            while !done.load(Ordering::Acquire) {
                let mut rb = client.get(&url);
                for (k, v) in ADMIN {
                    rb = rb.header(k, v);
                }
                let stats: Value = rb.send().await.expect("sent").json().await.expect("json");
                for n in stats.as_object().into_iter().flat_map(|o| o.values()) {
                    if let Some(q) = n["workload_groups"][&id]["queued_current"].as_u64() {
                        most = most.max(q);
                    }
                }
            }
            most
        })
    };
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (client, url, id) = (node.client.clone(), node.url("/small/_search"), id.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..60 {
                    let r = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("workloadGroupId", &id)
                        .body(r#"{"query": {"match_all": {}}}"#)
                        .send()
                        .await
                        .expect("sent");
                    statuses.push(r.status().as_u16());
                }
                statuses
            })
        })
        .collect();
    let mut parked_and_ran = 0;
    for c in clients {
        for status in c.await.expect("joined") {
            assert!(status == 200 || status == 429, "{status}");
            parked_and_ran += usize::from(status == 200);
        }
    }
    done.store(true, Ordering::Release);
    let most = sampler.await.expect("joined");
    assert!(most <= 1, "queued_current read {most} with one queue place");
    wait_drained(&node, &id).await;
    let s = stats_of(&node, &id).await;
    assert!(
        s["total_queued"].as_u64() > Some(0),
        "nothing ever parked: {s}"
    );
    assert!(parked_and_ran > 0);
    assert_eq!(s["queued_current"], 0, "{s}");
    assert_eq!(s["queue_peak"], 1, "{s}");
}
