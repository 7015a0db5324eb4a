//! Nodes sharing one PostgreSQL metastore (issue #12, point 3), in process: a change made on
//! one node takes effect on the other without a restart; concurrent writes on both nodes are
//! serialized by the metastore's compare-and-set alone; a node that loses the metastore keeps
//! serving, says so in `_cluster/health`, refuses metadata writes with a clear 503, and catches
//! up when the metastore returns.
//!
//! Needs the throwaway server of `scripts/postgres.sh` (`SLUICE_TEST_POSTGRES_URL`, set by
//! `scripts/test.sh`); each test has a database of its own. An outage is simulated with a
//! [`CutProxy`] between one node and the server, so other tests keep their connections.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_meta::test_suite::{CutProxy, fresh_postgres_url};

use crate::common::{TestNode, assert_error};
use crate::throttling::{cancel_all, cheap, node_in_mode, start_heavy, wait_running};

/// How long a test waits for a change to reach the other node (or for the node to notice the
/// metastore's loss) before failing. The mechanism's bound is the watcher's 1 s poll (a
/// notification usually arrives within milliseconds); the rest is room for a loaded machine.
/// Reaching it is a failure; it is never waited out.
const DEADLINE: Duration = Duration::from_secs(15);

/// Pause between two probes of a condition that another node or a background task makes
/// true: a poll, not a wait for time to pass.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);

/// Probes `check` until it answers `Some`, failing after [`DEADLINE`] with `what`.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    loop {
        tick.tick().await;
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "never happened: {what}");
    }
}

fn throttled_group(name: &str) -> Value {
    json!({"name": name, "resiliency_mode": "soft", "resource_limits": {"memory": 0.1},
           "throttling": {"attribute": "group", "node_limit": 1}})
}

async fn create_group(node: &TestNode, body: Value) -> String {
    node.create_group(body).await
}

/// Whether `node` tags a request naming group `id` with it (an unknown id runs in DEFAULT with
/// a `Warning` naming it, DESIGN D5): its view holds the group.
async fn knows_group(node: &TestNode, id: &str) -> bool {
    let r = cheap(node, &[("workloadGroupId", id)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.header_values("warning").is_empty()
}

async fn health(node: &TestNode) -> Value {
    let (status, body) = node.req("GET", "/_cluster/health", None).await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_changes_made_on_one_node_take_effect_on_the_other() {
    let url = fresh_postgres_url("pg_propagation").await;
    let n1 = TestNode::start_on_metastore(&url, &["node.memory_budget=1tb"]).await;
    let metastore = format!("metastore.uri={url}");
    // Node 2 has the heavy index and sets `wlm.workload_group.mode: enabled` (persistent).
    let n2 = node_in_mode("enabled", &[&metastore]).await;
    assert_eq!(health(&n2).await["metastore"]["type"], "postgres");
    assert_eq!(
        n2.state.metastore_status.kind(),
        sluice_meta::MetaKind::Postgres
    );

    // A persistent setting made on node 2 reaches node 1.
    eventually("node 1 sees the mode node 2 set", async || {
        let (_, s) = n1
            .req("GET", "/_cluster/settings?flat_settings=true", None)
            .await;
        (s["persistent"]["wlm.workload_group.mode"] == "enabled").then_some(())
    })
    .await;
    assert_eq!(
        n1.state.cluster_settings.wlm_mode(),
        sluice_core::WlmMode::Enabled
    );

    // A group created on node 1 is tagged, then enforced, on node 2.
    let created = Instant::now();
    let id = create_group(&n1, throttled_group("shared")).await;
    eventually("node 2 knows the group node 1 created", async || {
        knows_group(&n2, &id).await.then_some(())
    })
    .await;
    eprintln!(
        "a group created on node 1 was in node 2's view {:?} after the create was sent",
        created.elapsed()
    );
    let tag = [("workloadGroupId", id.as_str())];
    let running = vec![start_heavy(&n2, &tag)];
    wait_running(&n2, &id, 1).await;
    let r = cheap(&n2, &tag).await;
    assert_eq!(
        r.status, 429,
        "node 2 enforces node 1's throttle: {}",
        r.body
    );
    cancel_all(&n2, running).await;

    // A transient setting is the cluster's too, as in OpenSearch's cluster state: switched
    // off on node 1, node 2 stops throttling.
    let (status, body) = n1
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"wlm.workload_group.mode": "disabled"}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    eventually("node 2 applies node 1's transient mode", async || {
        (n2.state.cluster_settings.wlm_mode() == sluice_core::WlmMode::Disabled).then_some(())
    })
    .await;
    let (_, s) = n2
        .req("GET", "/_cluster/settings?flat_settings=true", None)
        .await;
    assert_eq!(s["transient"]["wlm.workload_group.mode"], "disabled", "{s}");
    let running = vec![start_heavy(&n2, &tag)];
    wait_running(&n2, &id, 1).await;
    let r = cheap(&n2, &tag).await;
    assert_eq!(r.status, 200, "throttling is off cluster-wide: {}", r.body);
    cancel_all(&n2, running).await;
    let (status, body) = n2
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"wlm.workload_group.mode": null}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    eventually("node 1 applies node 2's reset", async || {
        (n1.state.cluster_settings.wlm_mode() == sluice_core::WlmMode::Enabled).then_some(())
    })
    .await;

    // A delete on node 2 reaches node 1.
    let (status, body) = n2.req("DELETE", "/_wlm/workload_group/shared", None).await;
    assert_eq!(status, 200, "{body}");
    eventually("node 1 forgets the deleted group", async || {
        (!knows_group_or_small(&n1, &id).await).then_some(())
    })
    .await;
}

/// Like [`knows_group`] on a node without the `small` index: searches `_all`.
async fn knows_group_or_small(node: &TestNode, id: &str) -> bool {
    let r = node
        .req_with(
            "POST",
            "/_search",
            Some(json!({"query": {"match_all": {}}})),
            &[("workloadGroupId", id)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.header_values("warning").is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_concurrent_creates_on_two_nodes_never_both_pass_the_checks() {
    let url = fresh_postgres_url("pg_concurrent").await;
    let n1 = TestNode::start_on_metastore(&url, &[]).await;
    let n2 = TestNode::start_on_metastore(&url, &[]).await;
    let group = |name: String, cpu: f64| json!({"name": name, "resiliency_mode": "soft", "resource_limits": {"cpu": cpu}});
    for round in 0..4 {
        // Two groups of cpu 0.6 cannot both fit in 1.0.
        let (a, b) = tokio::join!(
            n1.req(
                "PUT",
                "/_wlm/workload_group",
                Some(group(format!("a{round}"), 0.6))
            ),
            n2.req(
                "PUT",
                "/_wlm/workload_group",
                Some(group(format!("b{round}"), 0.6))
            ),
        );
        let winners: Vec<&Value> = [&a, &b]
            .into_iter()
            .filter(|r| r.0 == 200)
            .map(|r| &r.1)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {a:?} / {b:?}");
        let loser = if a.0 == 200 { &b } else { &a };
        assert_error(loser, 400, "illegal_argument_exception");
        let (_, all) = n1.req("GET", "/_wlm/workload_group", None).await;
        let total: f64 = all["workload_groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g["resource_limits"]["cpu"].as_f64().unwrap_or(0.0))
            .sum();
        assert!(total <= 1.0 + 1e-9, "round {round}: cpu sums to {total}");
        let name = winners[0]["name"].as_str().expect("name").to_string();
        let (status, body) = n2
            .req("DELETE", &format!("/_wlm/workload_group/{name}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // One name created on both nodes at once: one group.
    let (a, b) = tokio::join!(
        n1.req(
            "PUT",
            "/_wlm/workload_group",
            Some(group("same".into(), 0.1))
        ),
        n2.req(
            "PUT",
            "/_wlm/workload_group",
            Some(group("same".into(), 0.1))
        ),
    );
    assert_eq!(
        [a.0, b.0].iter().filter(|s| **s == 200).count(),
        1,
        "{a:?} / {b:?}"
    );
    let (_, all) = n2.req("GET", "/_wlm/workload_group", None).await;
    let named_same = all["workload_groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter(|g| g["name"] == "same")
        .count();
    assert_eq!(named_same, 1, "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_that_loses_the_metastore_keeps_serving_and_catches_up() {
    let url = fresh_postgres_url("pg_outage").await;
    let proxy = CutProxy::start(&url).await;
    let n1 = TestNode::start_on_metastore(&url, &[]).await;
    let n2 = TestNode::start_on_metastore(proxy.url(), &[]).await;
    let (status, body) = n2
        .req("PUT", "/docs/_doc/1?refresh=true", Some(json!({"k": "a"})))
        .await;
    assert_eq!(status, 201, "{body}");
    let before = health(&n2).await;
    assert_eq!(
        before["metastore"],
        json!({"type": "postgres", "status": "available"})
    );
    assert_eq!(before["discovered_cluster_manager"], true);

    proxy.cut();
    let during = eventually("node 2 notices the metastore is gone", async || {
        let h = health(&n2).await;
        (h["metastore"]["status"] == "unavailable").then_some(h)
    })
    .await;
    assert_eq!(during["discovered_cluster_manager"], false, "{during}");
    assert_eq!(during["discovered_master"], false, "{during}");
    assert_eq!(during["status"], before["status"], "the data is as healthy");
    assert!(
        during["metastore"]["unavailable_since_millis"].is_i64(),
        "{during}"
    );
    let reason = during["metastore"]["reason"].as_str().expect("reason");
    assert!(!reason.contains("sluice-"), "the password leaked: {reason}");

    // Serving goes on: searches, stats.
    let hits = n2.search("docs", json!({"query": {"match_all": {}}})).await;
    assert_eq!(hits["hits"]["total"]["value"], 1, "{hits}");
    let (status, stats) = n2.req("GET", "/_wlm/stats", None).await;
    assert_eq!(status, 200, "{stats}");

    // Metadata writes are refused, clearly: transient settings too, which are the cluster's
    // (OpenSearch refuses any cluster-state update without a cluster manager).
    let refused = [
        n2.req(
            "PUT",
            "/_wlm/workload_group",
            Some(throttled_group("during")),
        )
        .await,
        n2.req(
            "PUT",
            "/_rules/workload_group",
            Some(json!({"description": "d", "index_pattern": ["docs*"], "workload_group": "x"})),
        )
        .await,
        n2.req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"search.max_buckets": 100}})),
        )
        .await,
        n2.req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"search.max_buckets": 100}})),
        )
        .await,
    ];
    for r in &refused {
        assert_error(r, 503, "cluster_manager_not_discovered_exception");
        let reason = r.1["error"]["reason"].as_str().expect("reason");
        assert!(reason.contains("metastore is unreachable"), "{reason}");
        assert!(reason.contains("last view"), "{reason}");
    }

    // Reading the stored definitions needs the metastore too (they show the stored truth).
    let read = n2.req("GET", "/_wlm/workload_group", None).await;
    assert_error(&read, 503, "cluster_manager_not_discovered_exception");

    // Meanwhile node 1 still reaches the metastore and changes it.
    let meanwhile = create_group(&n1, throttled_group("meanwhile")).await;

    proxy.restore();
    eventually("node 2 sees the metastore again", async || {
        (health(&n2).await["metastore"]["status"] == "available").then_some(())
    })
    .await;
    assert_eq!(health(&n2).await["discovered_cluster_manager"], true);
    eventually(
        "node 2 picks up the group made during the outage",
        async || knows_group_or_small(&n2, &meanwhile).await.then_some(()),
    )
    .await;
    create_group(&n2, throttled_group("after")).await;
    let (_, all) = n1.req("GET", "/_wlm/workload_group", None).await;
    let names: Vec<&str> = all["workload_groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["meanwhile", "after"],
        "the refused write left nothing"
    );
}

/// A write refused because the metastore is unreachable shows in `_cluster/health` as soon as
/// it is answered, and a read or write that reaches the store again shows its return as soon:
/// nothing here waits for the watcher's probe (every second). Several outages, each checked
/// at once, so that a watcher's probe landing by chance between a request and the health
/// read cannot make the test pass without the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_health_follows_a_write_that_finds_the_metastore_gone() {
    let url = fresh_postgres_url("pg_write_health").await;
    let proxy = CutProxy::start(&url).await;
    let node = TestNode::start_on_metastore(proxy.url(), &[]).await;
    assert_eq!(health(&node).await["metastore"]["status"], "available");
    for round in 0..4 {
        proxy.cut_and_close().await;
        let refused = node
            .req(
                "PUT",
                "/_wlm/workload_group",
                Some(throttled_group(&format!("during{round}"))),
            )
            .await;
        assert_error(&refused, 503, "cluster_manager_not_discovered_exception");
        let during = health(&node).await;
        assert_eq!(
            during["metastore"]["status"], "unavailable",
            "round {round}: health says available right after a write was refused for the metastore: {during}"
        );
        assert_eq!(during["discovered_cluster_manager"], false, "{during}");

        proxy.restore();
        // A read that reaches the store again in the first rounds, a write in the last.
        if round < 3 {
            let (s, b) = node.req("GET", "/_wlm/workload_group", None).await;
            assert_eq!(s, 200, "{b}");
        } else {
            create_group(&node, throttled_group("after")).await;
        }
        let after = health(&node).await;
        assert_eq!(
            after["metastore"],
            json!({"type": "postgres", "status": "available"}),
            "round {round}: health says unavailable right after the metastore answered: {after}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_gateways_health_is_the_upstreams_with_its_own_metastore() {
    let url = fresh_postgres_url("pg_gateway_health").await;
    let proxy = CutProxy::start(&url).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let upstream = TestNode::start_embedded_on(&tmp.path().join("upstream"), &[]).await;
    let hosts = format!("backend.upstream.hosts={}", upstream.base);
    let metastore = format!("metastore.uri={}", proxy.url());
    let gw = TestNode::start_embedded_on(
        &tmp.path().join("gateway"),
        &[
            "backend.type=upstream",
            &hosts,
            &metastore,
            "cluster.name=gateways",
        ],
    )
    .await;
    // The data's health is the upstream's (its cluster name, its shards); the metastore is
    // the gateway's.
    let before = health(&gw).await;
    let upstream_health = health(&upstream).await;
    assert_eq!(
        before["cluster_name"], upstream_health["cluster_name"],
        "{before}"
    );
    assert_eq!(
        before["metastore"],
        json!({"type": "postgres", "status": "available"}),
        "{before}"
    );
    assert_eq!(before["discovered_cluster_manager"], true, "{before}");

    // The gateway loses its metastore: its health says so, as an embedded node's does.
    proxy.cut();
    let during = eventually("the gateway notices its metastore is gone", async || {
        let h = health(&gw).await;
        (h["metastore"]["status"] == "unavailable").then_some(h)
    })
    .await;
    assert_eq!(during["discovered_cluster_manager"], false, "{during}");
    assert_eq!(during["discovered_master"], false, "{during}");
    assert_eq!(during["status"], before["status"], "the data is as healthy");
    proxy.restore();
    eventually("the gateway sees its metastore again", async || {
        let h = health(&gw).await;
        (h["metastore"]["status"] == "available" && h["discovered_cluster_manager"] == true)
            .then_some(())
    })
    .await;
}

/// A shared metastore serves one `cluster.name` (`cluster/uuid.rs` U2): a node of another
/// name refuses to start, saying which name the metastore has and how to fix it, and leaves
/// the cluster's identity as it was; a node of the cluster's name still joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_of_another_cluster_name_refuses_a_shared_metastore() {
    let url = fresh_postgres_url("pg_cluster_name").await;
    let n1 = TestNode::start_on_metastore(&url, &["cluster.name=alpha"]).await;
    let (_, root) = n1.req("GET", "/", None).await;
    let uuid = root["cluster_uuid"].as_str().expect("a uuid").to_string();

    let tmp = tempfile::tempdir().expect("tempdir");
    let metastore = format!("metastore.uri={url}");
    let refused = sluice_server::server::Node::start(crate::common::config(
        tmp.path(),
        &[&metastore, "cluster.name=beta"],
    ))
    .await;
    let message = match refused {
        Ok(_) => panic!("a node named beta started on alpha's metastore"),
        Err(e) => e.to_string(),
    };
    for part in [
        "belongs to cluster [alpha]",
        &format!("uuid [{uuid}]"),
        "cluster.name is [beta]",
        "Set cluster.name to [alpha]",
        "metastore.uri",
    ] {
        assert!(message.contains(part), "[{part}] missing from: {message}");
    }

    let n2 = TestNode::start_on_metastore(&url, &["cluster.name=alpha"]).await;
    let (_, root2) = n2.req("GET", "/", None).await;
    assert_eq!(root2["cluster_uuid"], uuid.as_str());
    assert_eq!(root2["cluster_name"], "alpha");
}
