//! One metadata view across the cluster: a group made on one node is enforced on another
//! within a second; concurrent creations on two nodes never both pass the cross-group checks;
//! the metastore stopped and started again while the nodes serve.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{TestCluster, heavy_query};

/// The bound for a change to reach every node (LISTEN/NOTIFY; a 1 s poll backstops).
const PROPAGATION: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_group_made_on_one_node_is_enforced_on_another_within_a_second() {
    let c = TestCluster::start_heavy(3, "propagate").await;
    let (status, body) = c
        .req(
            0,
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "enabled"}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, created) = c
        .req(
            0,
            "PUT",
            "/_wlm/workload_group",
            Some(json!({"name": "tenant", "resiliency_mode": "enforced",
                "resource_limits": {"memory": 0.5},
                "throttling": {"attribute": "group", "node_limit": 1}})),
        )
        .await;
    let made = Instant::now();
    assert_eq!(status, 200, "{created}");
    let id = created["_id"].as_str().unwrap().to_string();
    // In node 2's workload view (what admission reads), not only in the metastore.
    c.eventually(
        PROPAGATION.saturating_sub(made.elapsed()),
        "group in node 2's view",
        || async {
            let (_, s) = c.get(2, "/_wlm/_local/stats").await;
            let node = s
                .as_object()?
                .iter()
                .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")?
                .1;
            node["workload_groups"].get(&id).map(|_| ())
        },
    )
    .await;
    c.eventually(Duration::from_secs(1), "mode enabled on node 2", || async {
        let (_, s) = c.get(2, "/_cluster/settings").await;
        (s["persistent"]["wlm"]["workload_group"]["mode"] == "enabled").then_some(())
    })
    .await;
    // Enforced on node 2: one heavy search holds the group's only slot there; the next is
    // turned away with 429.
    let header = [("workloadGroupId", id.as_str())];
    let heavy = c.start_search(2, "/heavy/_search", heavy_query(), &header);
    c.eventually(
        Duration::from_secs(30),
        "the heavy search runs on node 2",
        || async {
            let (_, t) = c.get(2, "/_tasks?actions=*search*&nodes=_local").await;
            (!t["nodes"].as_object()?.is_empty()).then_some(())
        },
    )
    .await;
    let (status, rejected) = c
        .req_with(
            2,
            "POST",
            "/heavy/_search",
            Some(json!({"size": 0})),
            &header,
        )
        .await;
    assert_eq!(status, 429, "{rejected}");
    assert_eq!(
        rejected["error"]["type"], "rejected_execution_exception",
        "{rejected}"
    );
    let (s, _) = c
        .req(2, "POST", "/_tasks/_cancel?actions=*search*", None)
        .await;
    assert_eq!(s, 200);
    let _ = tokio::time::timeout(Duration::from_secs(60), heavy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_concurrent_creations_on_two_nodes_never_both_pass_the_sum_check() {
    let c = TestCluster::start(2, "concurrent").await;
    for round in 0..5 {
        let body = |n: &str| {
            json!({"name": format!("{n}-{round}"), "resiliency_mode": "soft",
            "resource_limits": {"cpu": 0.3}})
        };
        // Every round adds 0.6 if both pass; five rounds would reach 3.0 of cpu.
        let (a, b) = tokio::join!(
            c.req(0, "PUT", "/_wlm/workload_group", Some(body("a"))),
            c.req(1, "PUT", "/_wlm/workload_group", Some(body("b"))),
        );
        let passed = [a.0, b.0].iter().filter(|s| **s == 200).count();
        assert!(passed <= 2, "round {round}: {a:?} {b:?}");
    }
    let (_, groups) = c.get(0, "/_wlm/workload_group").await;
    let total: f64 = groups["workload_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["resource_limits"]["cpu"].as_f64().unwrap_or(0.0))
        .sum();
    assert!(
        total <= 1.0 + 1e-9,
        "the cpu limits sum to {total}: {groups}"
    );
    let count = groups["workload_groups"].as_array().unwrap().len();
    assert_eq!(
        count, 3,
        "exactly three groups of 0.3 fit under 1.0: {groups}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_nodes_serve_through_a_metastore_outage_and_catch_up() {
    // A PostgreSQL server of this test's own, really stopped and started again.
    let pg = sluice_meta::test_suite::ScratchPostgres::start().await;
    let c = TestCluster::start_heavy_on(2, "outage", pg.url().to_string()).await;
    pg.down().await;
    c.eventually(
        Duration::from_secs(10),
        "health reports the metastore lost",
        || async {
            let (_, h) = c.get(1, "/_cluster/health").await;
            (h["discovered_cluster_manager"] == false).then_some(())
        },
    )
    .await;
    // Searches and stats still work; metadata writes answer a clear 503.
    let (status, found) = c
        .req(1, "POST", "/heavy/_search", Some(json!({"size": 1})))
        .await;
    assert_eq!(status, 200, "{found}");
    let (_, stats) = c.get(0, "/_wlm/stats").await;
    assert_eq!(stats["_nodes"]["successful"], 2, "{stats}");
    let (status, refused) = c
        .req(0, "PUT", "/_wlm/workload_group",
            Some(json!({"name": "later", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}})))
        .await;
    assert_eq!(status, 503, "{refused}");
    // Back: writes work again, and every node sees them.
    pg.up().await;
    let (status, made) = c
        .eventually(Duration::from_secs(15), "a write lands after the metastore returns", || async {
            let r = c.req(0, "PUT", "/_wlm/workload_group",
                Some(json!({"name": "later", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}})))
                .await;
            (r.0 != 503).then_some(r)
        })
        .await;
    assert_eq!(status, 200, "{made}");
    c.eventually(
        Duration::from_secs(5),
        "node 1 sees the new group",
        || async {
            let (s, _) = c.get(1, "/_wlm/workload_group/later").await;
            (s == 200).then_some(())
        },
    )
    .await;
    c.eventually(
        Duration::from_secs(5),
        "node 1's health sees the metastore back",
        || async {
            let (_, h) = c.get(1, "/_cluster/health").await;
            (h["discovered_cluster_manager"] == true
                && h.get("metastore")
                    .is_none_or(|m| m["status"] != "unavailable"))
            .then_some(())
        },
    )
    .await;
}

/// Transient cluster settings are the running cluster's, as in OpenSearch: they survive a
/// node's restart while another node runs, and end with a full cluster restart (the first
/// node to open the metastore with no other node on it forgets them); persistent ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_transient_settings_end_with_a_full_cluster_restart() {
    let mut c = TestCluster::start(2, "transient_restart").await;
    let (status, body) = c
        .req(
            0,
            "PUT",
            "/_cluster/settings",
            Some(json!({
                "persistent": {"search.max_buckets": 1234},
                "transient": {"search.max_open_scroll_context": 77}
            })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Node 1 restarts while node 0 runs: the cluster did not stop, its transient value stays.
    c.kill9(1).await;
    c.restart(1).await;
    let s = settings(&c, 1).await;
    assert_eq!(
        s["transient"]["search.max_open_scroll_context"], "77",
        "{s}"
    );
    assert_eq!(s["persistent"]["search.max_buckets"], "1234", "{s}");

    // Every node stops; the first to start again finds no other and forgets the transient
    // value.
    c.kill9(0).await;
    c.kill9(1).await;
    c.restart(0).await;
    let s = settings(&c, 0).await;
    assert_eq!(s["transient"], json!({}), "{s}");
    assert_eq!(s["persistent"]["search.max_buckets"], "1234", "{s}");
    let log = c.node(0).log();
    assert!(
        log.contains("transient cluster settings of the last run end here"),
        "{log}"
    );
}

/// Node `i`'s `GET _cluster/settings?flat_settings=true`, checked to be a 200.
async fn settings(c: &TestCluster, i: usize) -> serde_json::Value {
    let (status, body) = c.get(i, "/_cluster/settings?flat_settings=true").await;
    assert_eq!(status, 200, "{body}");
    body
}
