//! Node-tier request throttling over HTTP (issue #5): `throttling.node_limit` per group,
//! username and role bucket; 429 with `Retry-After`; what draws a permit (`_search`, `_count`,
//! `_msearch` items, scroll continuations); modes and resiliency modes; live limit changes; the
//! per-bucket listing; and releases on every path.
//!
//! Requests are held in flight by running the heavy query (seconds of work in a test build)
//! and waiting until `_tasks` lists them; they are released by cancelling them. No sleeps.

use crate::common;
use crate::common::{Reply, TestNode};
use serde_json::{Value, json};

pub(crate) use crate::common::ADMIN;

/// A node with the heavy index (and a small one), in `mode`, with `extra` settings.
pub(crate) async fn node_in_mode(mode: &str, extra: &[&str]) -> TestNode {
    // Throttling is under test, not resource enforcement: the groups' only limit is memory,
    // against a budget no search comes near, so the enforcement loop never acts on them.
    let mut settings = vec!["node.memory_budget=1tb"];
    settings.extend_from_slice(extra);
    let node = TestNode::start_heavy(&settings).await;
    load(&node).await;
    set_mode(&node, mode).await;
    node
}

async fn load(node: &TestNode) {
    let r = node
        .req_with(
            "PUT",
            "/small/_doc/1?refresh=true",
            Some(json!({"k": "a", "n": 1})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

pub(crate) async fn set_mode(node: &TestNode, mode: &str) {
    let r = node
        .req_with(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": mode}})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

pub(crate) async fn create_group(node: &TestNode, body: Value) -> String {
    node.create_group(body).await
}

fn throttled_group(name: &str, attribute: &str, limit: u64, mode: &str) -> Value {
    json!({"name": name, "resiliency_mode": mode, "resource_limits": {"memory": 0.1},
           "throttling": {"attribute": attribute, "node_limit": limit}})
}

/// Starts a heavy search with `headers` in the background; it runs until cancelled.
pub(crate) fn start_heavy(
    node: &TestNode,
    headers: &[(&str, &str)],
) -> tokio::task::JoinHandle<u16> {
    start_search(node, "/heavy/_search", common::heavy_query(), headers)
}

/// Starts a search of `body` on `path` with `headers` in the background; answers its status
/// (0 when the request failed).
pub(crate) fn start_search(
    node: &TestNode,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> tokio::task::JoinHandle<u16> {
    let mut rb = node
        .client
        .post(node.url(path))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    tokio::spawn(async move { rb.send().await.map(|r| r.status().as_u16()).unwrap_or(0) })
}

/// Waits until `n` search tasks of group `id` are running: admitted, holding what their
/// throttle gave them. A task is listed (and tagged) from before its admission, so a task
/// still `admitting` or `queued` does not count: a test that went on once the task was listed
/// raced its own next request for the slot (a shared-tier test got 200 for its third search
/// in CI when the cheap second search took the lease the heavy first was still asking for).
pub(crate) async fn wait_running(node: &TestNode, id: &str, n: usize) {
    for _ in 0..20_000 {
        let r = node
            .req_with(
                "GET",
                "/_tasks?detailed&actions=indices:data/read/search",
                None,
                &ADMIN,
            )
            .await;
        let count = r.body["nodes"]
            .as_object()
            .into_iter()
            .flat_map(|n| n.values())
            .flat_map(|n| n["tasks"].as_object().into_iter().flat_map(|t| t.values()))
            .filter(|t| {
                t["workload_group"]["id"] == json!(id)
                    && t["cancelled"] == false
                    && t["status"]["state"].is_null()
            })
            .count();
        if count >= n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{n} searches of {id} never ran at once");
}

/// Cancels every running search and waits for the background requests.
pub(crate) async fn cancel_all(node: &TestNode, running: Vec<tokio::task::JoinHandle<u16>>) {
    let r = node
        .req_with("POST", "/_tasks/_cancel?actions=*search*", None, &ADMIN)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for h in running {
        let status = h.await.expect("joined");
        assert!(
            status == 500 || status == 200,
            "cancelled search answered {status}"
        );
    }
    // Their slots and tasks go once the cancelled work has ended: before the answers on an
    // embedded node, after them through a gateway, whose upstream notices a cancellation late.
    common::wait_until(
        "the cancelled searches ending",
        || node.state.tasks.list().iter().all(|t| !t.is_cancelled()),
        || format!("{} tasks listed", node.state.tasks.list().len()),
    )
    .await;
}

/// An `_msearch` of two match-all items on the small index, tagged with group `id`.
pub(crate) fn two_item_msearch(node: &TestNode, path: &str, id: &str) -> reqwest::RequestBuilder {
    let body = common::ndjson(&[
        json!({"index": "small"}),
        json!({}),
        json!({"index": "small"}),
        json!({}),
    ]);
    node.client
        .post(node.url(path))
        .header("content-type", "application/x-ndjson")
        .header("workloadGroupId", id)
        .body(body)
}

pub(crate) async fn cheap(node: &TestNode, headers: &[(&str, &str)]) -> Reply {
    node.req_with(
        "POST",
        "/small/_search",
        Some(json!({"query": {"match_all": {}}})),
        headers,
    )
    .await
}

pub(crate) async fn stats_of(node: &TestNode, id: &str) -> Value {
    let r = node
        .req_with(
            "GET",
            &format!("/_wlm/stats/{id}?include=buckets"),
            None,
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let obj = r.body.as_object().expect("object");
    let (_, n) = obj
        .iter()
        .find(|(k, _)| *k != "_nodes" && *k != "cluster_name")
        .expect("node");
    n["workload_groups"][id].clone()
}

/// Waits until the group's buckets are all drained (permits released after the responses).
pub(crate) async fn wait_drained(node: &TestNode, id: &str) {
    for _ in 0..20_000 {
        let s = stats_of(node, id).await;
        if s["buckets"].as_array().is_some_and(Vec::is_empty) && s["executing"] == 0 {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "buckets of {id} never drained: {}",
        stats_of(node, id).await
    );
}

/// Waits until one request of group `id`'s first bucket is parked for a shared lease;
/// answers the group's stats then.
async fn wait_parked(node: &TestNode, id: &str) -> Value {
    for _ in 0..20_000 {
        let s = stats_of(node, id).await;
        if s["buckets"][0]["shared_parked"] == 1 {
            return s;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "no request of {id} parked for a shared lease: {}",
        stats_of(node, id).await
    );
}

fn assert_throttled(r: &Reply, group: &str, bucket: &str, limit: u64) {
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(
        r.body["error"]["type"], "rejected_execution_exception",
        "{}",
        r.body
    );
    let reason = r.body["error"]["reason"].as_str().expect("reason");
    assert!(reason.contains(&format!("[{group}]")), "{reason}");
    assert!(reason.contains(&format!("[{bucket}]")), "{reason}");
    assert!(
        reason.contains(&format!("node_limit is {limit}")),
        "{reason}"
    );
    // Computed from the group's drain rate (D14), bounded 1..=60 s.
    let retry: Vec<u64> = r
        .header_values("retry-after")
        .iter()
        .map(|v| v.parse().expect("seconds"))
        .collect();
    assert!(
        retry.len() == 1 && (1..=60).contains(&retry[0]),
        "{retry:?}"
    );
}

#[tokio::test]
async fn test_group_bucket_rejects_over_the_limit_and_admits_after_release() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, throttled_group("analytics", "group", 2, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let running = vec![start_heavy(&node, &tag), start_heavy(&node, &tag)];
    wait_running(&node, &id, 2).await;

    assert_throttled(&cheap(&node, &tag).await, "analytics", "group", 2);
    let count = node.req_with("POST", "/small/_count", None, &tag).await;
    assert_throttled(&count, "analytics", "group", 2);
    // Other groups and DEFAULT are not affected.
    assert_eq!(cheap(&node, &[]).await.status, 200);

    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_throttled"], 2, "{s}");
    assert_eq!(s["buckets"][0]["in_flight"], 2, "{s}");
    assert_eq!(s["buckets"][0]["attribute"], "group", "{s}");

    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
    assert_eq!(cheap(&node, &tag).await.status, 200);
    let s = stats_of(&node, &id).await;
    assert_eq!(s["peak_executing"], 2, "{s}");
}

#[tokio::test]
async fn test_monitor_only_mode_and_monitor_groups_admit_and_count_would_throttle() {
    let node = node_in_mode("monitor_only", &[]).await;
    let id = create_group(&node, throttled_group("g", "group", 1, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    assert_eq!(cheap(&node, &tag).await.status, 200);
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (
            s["total_throttled"].clone(),
            s["total_would_throttle"].clone()
        ),
        (json!(0), json!(1)),
        "{s}"
    );

    // In enabled mode a monitor group still only counts.
    set_mode(&node, "enabled").await;
    let mon = create_group(&node, throttled_group("m", "group", 1, "monitor")).await;
    let mtag = [("workloadGroupId", mon.as_str())];
    let mut running = running;
    running.push(start_heavy(&node, &mtag));
    wait_running(&node, &mon, 1).await;
    assert_eq!(cheap(&node, &mtag).await.status, 200);
    let s = stats_of(&node, &mon).await;
    assert_eq!(
        (
            s["total_throttled"].clone(),
            s["total_would_throttle"].clone()
        ),
        (json!(0), json!(1)),
        "{s}"
    );

    // Disabled evaluates nothing.
    set_mode(&node, "disabled").await;
    assert_eq!(cheap(&node, &mtag).await.status, 200);
    assert_eq!(stats_of(&node, &mon).await["total_would_throttle"], 1);
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
    wait_drained(&node, &mon).await;
}

#[tokio::test]
async fn test_live_limit_changes_apply_to_the_next_admission_and_never_revoke() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, throttled_group("live", "group", 2, "soft")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let running = vec![start_heavy(&node, &tag), start_heavy(&node, &tag)];
    wait_running(&node, &id, 2).await;
    assert_eq!(cheap(&node, &tag).await.status, 429);

    let update = |limit: u64| {
        let node = &node;
        async move {
            let r = node
                .req_with(
                    "PUT",
                    "/_wlm/workload_group/live",
                    Some(json!({"throttling": {"node_limit": limit}})),
                    &ADMIN,
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };
    update(3).await;
    assert_eq!(cheap(&node, &tag).await.status, 200);
    // Lowering below the running count keeps both running and refuses new ones.
    update(1).await;
    assert_throttled(&cheap(&node, &tag).await, "live", "group", 1);
    assert_eq!(stats_of(&node, &id).await["buckets"][0]["in_flight"], 2);
    // Disabling throttling admits at once.
    let r = node
        .req_with(
            "PUT",
            "/_wlm/workload_group/live",
            Some(json!({"throttling": null})),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(cheap(&node, &tag).await.status, 200);
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_deleting_a_group_with_requests_in_flight_leaks_no_permit() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, throttled_group("gone", "group", 1, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    let r = node
        .req_with("DELETE", "/_wlm/workload_group/gone", None, &ADMIN)
        .await;
    assert_eq!(r.status, 200);
    cancel_all(&node, running).await;
    // The permit table is empty once the request is gone; a group with the same name starts
    // with a fresh bucket.
    let again = create_group(&node, throttled_group("gone", "group", 1, "enforced")).await;
    let r = node
        .req_with("GET", "/_wlm/stats?include=buckets", None, &ADMIN)
        .await;
    assert!(!r.body.to_string().contains("in_flight"), "{}", r.body);
    assert_eq!(
        cheap(&node, &[("workloadGroupId", again.as_str())])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn test_msearch_items_are_throttled_one_by_one_inside_a_200() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, throttled_group("ms", "group", 1, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    let resp = two_item_msearch(&node, "/_msearch", &id)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.expect("json");
    for item in body["responses"].as_array().expect("responses") {
        assert_eq!(item["status"], 429, "{item}");
        assert_eq!(item["error"]["type"], "rejected_execution_exception");
    }
    assert_eq!(stats_of(&node, &id).await["total_throttled"], 2);
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_scroll_continuations_draw_on_the_bucket_and_without_a_queue_are_rejected() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, throttled_group("sc", "group", 1, "enforced")).await;
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
    let scroll_id = opened.body["_scroll_id"]
        .as_str()
        .expect("scroll id")
        .to_string();
    let running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    // The continuation belongs to the group the scroll was opened in, header or not.
    let r = node
        .req_with(
            "POST",
            "/_search/scroll",
            Some(json!({"scroll": "1m", "scroll_id": scroll_id})),
            &[],
        )
        .await;
    assert_throttled(&r, "sc", "group", 1);
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
    let r = node
        .req_with(
            "POST",
            "/_search/scroll",
            Some(json!({"scroll": "1m", "scroll_id": scroll_id})),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn test_username_and_role_buckets_are_independent() {
    let node = node_in_mode(
        "enabled",
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.0/8",
        ],
    )
    .await;
    let users = create_group(
        &node,
        throttled_group("per-user", "username", 1, "enforced"),
    )
    .await;
    let roles = create_group(&node, throttled_group("per-role", "role", 1, "enforced")).await;
    let as_user = |u: &'static str, roles: &'static str, group: &str| {
        vec![
            ("x-proxy-user", u.to_string()),
            ("x-proxy-roles", roles.to_string()),
            ("workloadGroupId", group.to_string()),
        ]
    };
    fn refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        v.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    let alice = as_user("alice", "x", &users);
    let bob = as_user("bob", "x", &users);
    let running = vec![start_heavy(&node, &refs(&alice))];
    wait_running(&node, &users, 1).await;
    assert_throttled(
        &cheap(&node, &refs(&alice)).await,
        "per-user",
        "username=alice",
        1,
    );
    assert_eq!(cheap(&node, &refs(&bob)).await.status, 200);

    // Roles: charged to the smallest role; a caller whose smallest role differs is free.
    let carol = as_user("carol", "writer, analyst", &roles);
    let dave = as_user("dave", "analyst", &roles);
    let erin = as_user("erin", "viewer", &roles);
    let mut running = running;
    running.push(start_heavy(&node, &refs(&carol)));
    wait_running(&node, &roles, 1).await;
    assert_throttled(
        &cheap(&node, &refs(&dave)).await,
        "per-role",
        "role=analyst",
        1,
    );
    assert_eq!(cheap(&node, &refs(&erin)).await.status, 200);
    cancel_all(&node, running).await;
    wait_drained(&node, &users).await;
    wait_drained(&node, &roles).await;
}

#[tokio::test]
async fn test_nested_lookup_search_is_not_charged_for_the_bucket_its_parent_holds() {
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(&node, throttled_group("nest", "group", 1, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    // The parent holds the bucket's only slot; its lookup's sub-search must still run.
    let lookup = json!({"query": {"terms": {"k": {"index": "small", "path": "k",
                         "query": {"match_all": {}}}}}});
    let r = node
        .req_with("POST", "/small/_search", Some(lookup.clone()), &tag)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["hits"]["total"]["value"], 1, "{}", r.body);
    let r = node
        .req_with("POST", "/small/_count", Some(lookup.clone()), &tag)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["count"], 1);
    // The nested searches are part of their requests: two completions, no throttles.
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_completions"], 2, "{s}");
    assert_eq!(s["total_throttled"], 0, "{s}");

    // While another request holds the slot, the lookup request itself is throttled.
    let running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    let r = node
        .req_with("POST", "/small/_search", Some(lookup), &tag)
        .await;
    assert_throttled(&r, "nest", "group", 1);
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
}

#[tokio::test]
async fn test_monitored_breach_holds_its_bucket_so_a_lookup_counts_would_throttle_once() {
    // A monitored request runs without a permit, but it holds its bucket: its lookup's
    // sub-search is not checked (and counted) a second time (seed 000, D8).
    let node = node_in_mode("monitor_only", &[]).await;
    let id = create_group(&node, throttled_group("mon", "group", 1, "enforced")).await;
    let tag = [("workloadGroupId", id.as_str())];
    let running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    let lookup = json!({"query": {"terms": {"k": {"index": "small", "path": "k",
                         "query": {"match_all": {}}}}}});
    let r = node
        .req_with("POST", "/small/_search", Some(lookup), &tag)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let s = stats_of(&node, &id).await;
    assert_eq!(s["total_would_throttle"], 1, "{s}");
    assert_eq!(s["total_throttled"], 0, "{s}");
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_shared_refusal_with_the_queue_full_says_so_and_counts_as_one() {
    // A shared-only group with one queue place: the first search holds the one cluster-wide
    // lease, the second parks, the third finds the queue full and the pool in use. Its 429
    // names the queue as the node tier's does, and counts as a queue rejection (an outside
    // trial found it worded and counted as a plain limit refusal, so an operator would raise
    // `shared_limit` where the queue was the bound).
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "shared_q", "resiliency_mode": "enforced",
               "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "shared_limit": 1},
               "queue": {"size_per_bucket": 1}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    let mut running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    running.push(start_search(
        &node,
        "/small/_search",
        json!({"query": {"match_all": {}}}),
        &tag,
    ));
    wait_parked(&node, &id).await;
    let r = node
        .req_with(
            "POST",
            "/small/_search",
            Some(json!({"query": {"match_all": {}}})),
            &tag,
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    let reason = r.body["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("its queue is full (queue.size_per_bucket is 1)")
            && reason.contains("(tier: shared)"),
        "{reason}"
    );
    let s = stats_of(&node, &id).await;
    assert_eq!(
        (
            &s["total_throttled"],
            &s["total_shared_throttled"],
            &s["total_queue_rejections"]
        ),
        (&json!(1), &json!(1), &json!(1)),
        "{s}"
    );
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bucket_listing_shows_the_shared_tier_of_a_group_with_a_shared_limit() {
    // One node is a cluster of one: it owns every bucket's shared pool.
    let node = node_in_mode("enabled", &[]).await;
    let id = create_group(
        &node,
        json!({"name": "spill", "resiliency_mode": "enforced", "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "node_limit": 1, "shared_limit": 1},
               "queue": {"size_per_bucket": 10}}),
    )
    .await;
    let tag = [("workloadGroupId", id.as_str())];
    // The first runs on the node slot, the second on the one shared lease, the third parks.
    let mut running = vec![start_heavy(&node, &tag)];
    wait_running(&node, &id, 1).await;
    running.push(start_heavy(&node, &tag));
    wait_running(&node, &id, 2).await;
    running.push(start_search(
        &node,
        "/small/_search",
        json!({"query": {"match_all": {}}}),
        &tag,
    ));
    let seen = wait_parked(&node, &id).await;
    assert_eq!(
        seen["buckets"],
        json!([{
            "attribute": "group",
            "value": null,
            "in_flight": 1,
            "node_limit": 1,
            "shared_limit": 1,
            "shared_leases_held": 1,
            "shared_leases_idle": 0,
            "shared_fail_open_in_flight": 0,
            "shared_parked": 1,
            "shared_owner": true,
            "shared_leases_owned": 1
        }]),
        "{seen}"
    );
    cancel_all(&node, running).await;
    wait_drained(&node, &id).await;
}
