//! The cluster-wide shared tier (`throttling.shared_limit`) across real nodes: a shared-only
//! group's ceiling holds across coordinators, a 429 names the tier, a freed lease admits the
//! next request, and a parked request is drained by the owner's push (seed 002's strand
//! scenario).

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{TestCluster, heavy_query};

async fn enable(c: &TestCluster) {
    let (s, b) = c
        .req(
            0,
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "enabled"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
}

async fn group(c: &TestCluster, body: Value) -> String {
    let (s, b) = c.req(0, "PUT", "/_wlm/workload_group", Some(body)).await;
    assert_eq!(s, 200, "{b}");
    b["_id"].as_str().unwrap().to_string()
}

/// Waits until every node's view has the group and the mode (what admission reads).
async fn everywhere(c: &TestCluster, n: usize, id: &str) {
    for i in 0..n {
        c.eventually(
            Duration::from_secs(5),
            "group in every node's view",
            || async {
                let (_, s) = c.get(i, "/_wlm/_local/stats").await;
                let node = s
                    .as_object()?
                    .iter()
                    .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")?
                    .1;
                node["workload_groups"].get(id).map(|_| ())
            },
        )
        .await;
    }
}

/// How many searches of the group run on node `i` now.
async fn running(c: &TestCluster, i: usize) -> usize {
    let (_, t) = c
        .get(i, "/_tasks?actions=*search*&nodes=_local&detailed")
        .await;
    t["nodes"].as_object().map_or(0, |n| {
        n.values()
            .map(|e| {
                e["tasks"].as_object().map_or(0, |t| {
                    t.values()
                        .filter(|x| x["status"]["state"] != "queued")
                        .count()
                })
            })
            .sum()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_shared_only_ceiling_holds_across_coordinators_and_frees_on_release() {
    let c = TestCluster::start(3, "shared_ceiling").await;
    for i in 0..3 {
        c.heavy_index(i).await;
    }
    enable(&c).await;
    let id = group(
        &c,
        json!({"name": "tenant", "resiliency_mode": "enforced",
        "resource_limits": {"memory": 0.5},
        "throttling": {"attribute": "group", "shared_limit": 2}}),
    )
    .await;
    everywhere(&c, 3, &id).await;
    let header = [("workloadGroupId", id.as_str())];
    // Two heavy searches on two coordinators take the two cluster-wide slots.
    let a = c.start_search(0, "/heavy/_search", heavy_query(), &header);
    let b = c.start_search(1, "/heavy/_search", heavy_query(), &header);
    for i in [0, 1] {
        c.eventually(Duration::from_secs(30), "the heavy search runs", || async {
            (running(&c, i).await == 1).then_some(())
        })
        .await;
    }
    // A third coordinator is refused by the shared tier, which the 429 names.
    let (status, refused) = c
        .req_with(
            2,
            "POST",
            "/heavy/_search",
            Some(json!({"size": 0})),
            &header,
        )
        .await;
    assert_eq!(status, 429, "{refused}");
    let reason = refused["error"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("cluster-wide limit of 2") && reason.contains("tier: shared"),
        "{reason}"
    );
    // One ends: its lease goes back, and the third coordinator is admitted.
    let (s, _) = c
        .req(
            0,
            "POST",
            "/_tasks/_cancel?actions=*search*&nodes=_local",
            None,
        )
        .await;
    assert_eq!(s, 200);
    let _ = tokio::time::timeout(Duration::from_secs(60), a).await;
    let (status, body) = c
        .eventually(
            Duration::from_secs(10),
            "a freed lease admits node 2",
            || async {
                let r = c
                    .req_with(
                        2,
                        "POST",
                        "/heavy/_search",
                        Some(json!({"size": 0})),
                        &header,
                    )
                    .await;
                (r.0 != 429).then_some(r)
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, stats) = c.get(2, &format!("/_wlm/_local/stats/{id}")).await;
    let node = stats
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")
        .unwrap()
        .1
        .clone();
    let g = &node["workload_groups"][&id];
    assert!(g["total_shared_throttled"].as_u64().unwrap() >= 1, "{g}");
    assert!(g["total_shared_acquired"].as_u64().unwrap() >= 1, "{g}");
    assert_eq!(g["total_shared_fail_open"], 0, "{g}");
    let _ = c
        .req(1, "POST", "/_tasks/_cancel?actions=*search*", None)
        .await;
    let _ = tokio::time::timeout(Duration::from_secs(60), b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_parked_request_of_a_shared_only_group_is_drained_by_the_owner_push() {
    let c = TestCluster::start(3, "shared_push").await;
    for i in 0..3 {
        c.heavy_index(i).await;
    }
    enable(&c).await;
    let id = group(
        &c,
        json!({"name": "queued", "resiliency_mode": "enforced",
        "resource_limits": {"memory": 0.5},
        "throttling": {"attribute": "group", "shared_limit": 1},
        "queue": {"size_per_bucket": 10}}),
    )
    .await;
    everywhere(&c, 3, &id).await;
    let header = [("workloadGroupId", id.as_str())];
    let heavy = c.start_search(0, "/heavy/_search", heavy_query(), &header);
    c.eventually(
        Duration::from_secs(30),
        "the heavy search runs on node 0",
        || async { (running(&c, 0).await == 1).then_some(()) },
    )
    .await;
    // Node 2's request parks (shared-only: no node slot can ever free for it).
    let parked = c.start_search(2, "/heavy/_search", json!({"size": 0}), &header);
    c.eventually(
        Duration::from_secs(10),
        "the request is queued on node 2",
        || async {
            let (_, t) = c.get(2, "/_tasks?actions=*search*&nodes=_local").await;
            let queued = t["nodes"]
                .as_object()?
                .values()
                .flat_map(|e| e["tasks"].as_object().cloned().unwrap_or_default())
                .any(|(_, t)| t["status"]["state"] == "queued");
            queued.then_some(())
        },
    )
    .await;
    // The heavy search ends on node 0: the owner pushes the freed lease to node 2.
    let (s, _) = c
        .req(
            0,
            "POST",
            "/_tasks/_cancel?actions=*search*&nodes=_local",
            None,
        )
        .await;
    assert_eq!(s, 200);
    let _ = tokio::time::timeout(Duration::from_secs(60), heavy).await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(15), parked)
        .await
        .expect("the parked request is drained, not stranded")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let (_, stats) = c.get(2, &format!("/_wlm/_local/stats/{id}")).await;
    let node = stats
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")
        .unwrap()
        .1
        .clone();
    let g = &node["workload_groups"][&id];
    assert_eq!(g["total_shared_pushed"], 1, "{g}");
    assert_eq!(g["total_queued"], 1, "{g}");
}
