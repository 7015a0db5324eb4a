//! Nodes that share a metastore but were not told of each other: a typo in
//! `discovery.seed_hosts` heals through the metastore (the nodes live there are seeds too), so
//! a `shared_limit` is enforced once, not once per side; and which backend, and which upstream
//! cluster, each node serves from is gossiped and checked.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{JOIN_WITHIN, TestCluster, heavy_query};
use crate::relay::{Cut, Relay, relayed_cluster};
use crate::shared_tier::{enable, end_searches, everywhere, figures, group, owner_of_leases};

/// An enforced group `name` whose only limit is `shared_limit`, with `memory` of the node.
fn shared_only(name: &str, memory: f64, shared_limit: u32) -> Value {
    json!({"name": name, "resiliency_mode": "enforced",
        "resource_limits": {"memory": memory},
        "throttling": {"attribute": "group", "shared_limit": shared_limit}})
}

/// Before the fix, each node formed a cluster of its own on the shared metastore: the start
/// (which waits until each node lists both) failed, and a second search of a group with
/// `shared_limit` 1 ran on the other node beside the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_two_nodes_whose_seeds_name_neither_join_through_the_metastore() {
    let c = TestCluster::start_heavy_unseeded(2, "split_seeds").await;
    enable(&c).await;
    let id = group(&c, shared_only("tenant", 0.5, 1)).await;
    everywhere(&c, 2, &id).await;
    let header = [("workloadGroupId", id.as_str())];
    // One search of the group runs on node 0 and holds the one shared slot...
    let held = c.start_search(0, "/heavy/_search", heavy_query(), &header);
    c.eventually(
        Duration::from_secs(30),
        "node 0 runs the search",
        || async {
            let (_, t) = c
                .get(0, "/_tasks?actions=*search*&nodes=_local&detailed")
                .await;
            // Neither queued nor still being admitted: holding its slot.
            let holding = t["nodes"].as_object()?.values().any(|e| {
                e["tasks"]
                    .as_object()
                    .is_some_and(|t| t.values().any(|x| x["status"]["state"].is_null()))
            });
            holding.then_some(())
        },
    )
    .await;
    // ...so node 1 refuses the next one: one cluster, one limit.
    let (s, b) = c
        .req_with(
            1,
            "POST",
            "/heavy/_search",
            Some(json!({"size": 0})),
            &header,
        )
        .await;
    assert_eq!(
        s, 429,
        "node 1 admitted a second search of a shared_limit 1 group: {b}"
    );
    assert!(b.to_string().contains("tier: shared"), "{b}");
    for i in 0..2 {
        let (_, h) = c.get(i, "/_cluster/health").await;
        assert_eq!(h["membership"]["status"], "joined", "node {i}: {h}");
    }
    end_searches(&c, 0, held).await;
}

/// The `sluice.backend` attribute of `i`'s `_nodes/http` view, by node name.
async fn backends(c: &TestCluster) -> Vec<(String, Value)> {
    let (_, nodes) = c.get(0, "/_nodes/http").await;
    let mut out: Vec<(String, Value)> = nodes["nodes"]
        .as_object()
        .expect("nodes")
        .values()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or("?").to_string(),
                n["attributes"]["sluice.backend"].clone(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Before the fix every node said `embedded`, and a gateway in front of another upstream
/// cluster joined silently (no log line, nothing in its health).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_gateways_advertise_their_backend_and_one_in_front_of_another_upstream_is_reported() {
    let c = TestCluster::start(1, "other_upstream").await;
    let up1 = c.spawn_standalone("up-one").await;
    let up2 = c.spawn_standalone("up-two").await;
    let seeds = [c.node(0).transport.to_string()];
    let gw = |up: &crate::harness::Proc| {
        vec![
            "backend.type=upstream".to_string(),
            format!("backend.upstream.hosts=http://{}", up.http),
        ]
    };
    let g1 = c.spawn_other("gw-one", &seeds, &gw(&up1)).await;
    let g2 = c.spawn_other("gw-two", &seeds, &gw(&up2)).await;
    c.wait_members(0, 3, JOIN_WITHIN).await;
    assert_eq!(
        backends(&c).await,
        [
            ("gw-one".to_string(), json!("upstream")),
            ("gw-two".to_string(), json!("upstream")),
            ("node-0".to_string(), json!("embedded")),
        ]
    );
    // Each gateway names the other, and the other's upstream, in its health and its log.
    for (me, other, other_up) in [(&g1, "gw-two", "up-two"), (&g2, "gw-one", "up-one")] {
        let health = c
            .eventually(JOIN_WITHIN, "the other upstream in the health", || async {
                let (_, h) = c.get_at(me.http, "/_cluster/health").await;
                let peers = h["upstream"]["peers_with_another_upstream"]
                    .as_array()?
                    .clone();
                (!peers.is_empty()).then_some(h)
            })
            .await;
        let peers = &health["upstream"]["peers_with_another_upstream"];
        assert_eq!(peers[0]["node"], other, "{health}");
        assert_eq!(peers[0]["cluster_name"], other_up, "{health}");
        assert_ne!(health["status"], "green", "{health}");
        c.eventually(JOIN_WITHIN, "the error in the log", || async {
            let log = me.log();
            (log.contains("ERROR")
                && log.contains("check backend.upstream.hosts")
                && log.contains(other_up))
            .then_some(())
        })
        .await;
    }
    // Gateways in front of one upstream are not reported: a third one beside gw-one.
    let g3 = c.spawn_other("gw-three", &seeds, &gw(&up1)).await;
    c.wait_members(0, 4, JOIN_WITHIN).await;
    let h = c
        .eventually(JOIN_WITHIN, "gw-three's upstream in its health", || async {
            let (_, h) = c.get_at(g3.http, "/_cluster/health").await;
            let peers = h["upstream"]["peers_with_another_upstream"]
                .as_array()?
                .clone();
            (!peers.is_empty()).then_some((h, peers))
        })
        .await;
    let names: Vec<&str> = h.1.iter().filter_map(|p| p["node"].as_str()).collect();
    assert_eq!(names, ["gw-two"], "{}", h.0);
}

/// Writes, every half second until stopped, the metastore rows of live nodes named `names`
/// at an address where nothing answers gossip: a split that cannot heal, the named nodes on
/// the other side.
async fn phantoms(
    c: &TestCluster,
    names: &[&str],
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let store = sluice_meta::PostgresMetaStore::open(&c.metastore_uri)
        .await
        .expect("the metastore opens");
    let rows: Vec<sluice_meta::NodePresence> = names
        .iter()
        .map(|name| sluice_meta::NodePresence {
            node_id: format!("id-{name}"),
            name: (*name).to_string(),
            transport: "127.0.0.1:1".to_string(),
            cluster_name: c.cluster_name.clone(),
            generation: 1,
            hears: None,
            unjoined: None,
        })
        .collect();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let beating = tokio::spawn(async move {
        while !*stopped.borrow() {
            for p in &rows {
                let _ = sluice_meta::MetaStore::heartbeat(&store, p, Duration::from_secs(5)).await;
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), stopped.changed()).await;
        }
    });
    (stop, beating)
}

/// Node `i`'s health once its membership reads `status`.
async fn health_once(c: &TestCluster, i: usize, status: &str) -> Value {
    c.eventually(Duration::from_secs(60), status, || async {
        let (_, h) = c.get(i, "/_cluster/health").await;
        (h["membership"]["status"] == status).then_some(h)
    })
    .await
}

/// A cheap search of group `id` on node 0.
async fn small(c: &TestCluster, id: &str) -> (u16, Value) {
    small_on(c, 0, id).await
}

/// Node `i` refuses a cheap search of group `id` with a 429 whose reason says `words`.
async fn refused_saying(c: &TestCluster, i: usize, id: &str, words: &str) {
    let (s, b) = small_on(c, i, id).await;
    assert_eq!(s, 429, "node {i}: {b}");
    let reason = b["error"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(words), "node {i}: {reason}");
}

/// A cheap search of group `id` on node `i`.
async fn small_on(c: &TestCluster, i: usize, id: &str) -> (u16, Value) {
    c.req_with(
        i,
        "POST",
        "/heavy/_search",
        Some(json!({"size": 0})),
        &[("workloadGroupId", id)],
    )
    .await
}

/// The searches node `i` runs now, holding their slots (neither queued nor being admitted).
async fn running(c: &TestCluster, i: usize) -> usize {
    let (_, t) = c
        .get(i, "/_tasks?actions=*search*&nodes=_local&detailed")
        .await;
    t["nodes"].as_object().map_or(0, |n| {
        n.values()
            .filter_map(|e| e["tasks"].as_object())
            .flat_map(|t| t.values())
            .filter(|x| x["status"]["state"].is_null())
            .count()
    })
}

/// A split that cannot heal: two nodes that the metastore records live (their heartbeats
/// written by the test) at an address where nothing answers gossip. Node 0 is the smaller
/// side, one of three live nodes: after the grace it is cut off and shows it in its health and
/// logs, and of every `shared_limit` it keeps a third, rounded down (S5 of `split.rs`): a
/// limit of 1 leaves it none (503), a limit of 3 one request. Once their rows stop, it is
/// whole again. (On the old code the cut-off node refused every request of the limit of 3
/// with 503; before that, it admitted all three on a ring of its own.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_the_smaller_side_of_a_split_keeps_its_share_of_a_shared_limit() {
    let c = TestCluster::start_heavy(1, "split_cut_off").await;
    enable(&c).await;
    let one = group(&c, shared_only("one", 0.3, 1)).await;
    let three = group(&c, shared_only("three", 0.3, 3)).await;
    everywhere(&c, 1, &one).await;
    everywhere(&c, 1, &three).await;
    let (stop, beating) = phantoms(&c, &["phantom-a", "phantom-b"]).await;
    let health = health_once(&c, 0, "cut_off").await;
    assert_eq!(health["status"], "red", "{health}");
    assert_eq!(health["discovered_cluster_manager"], false, "{health}");
    assert_eq!(health["membership"]["shared_tier"], "divided", "{health}");
    assert_eq!(health["membership"]["side_nodes"], 1, "{health}");
    assert_eq!(health["membership"]["live_nodes"], 3, "{health}");
    let unjoined: Vec<&str> = health["membership"]["unjoined_nodes"]
        .as_array()
        .expect("unjoined_nodes")
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(unjoined, ["phantom-a", "phantom-b"], "{health}");
    // A third of 1 is none.
    let (s, b) = small(&c, &one).await;
    assert_eq!(s, 503, "{b}");
    assert_eq!(
        b["error"]["type"], "cluster_manager_not_discovered_exception",
        "{b}"
    );
    let reason = b["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("phantom-a") && reason.contains("discovery.seed_hosts"),
        "{reason}"
    );
    // Counted as the shared tier's other refusals are, in the group's figures, and logged as
    // a decision of its own kind.
    let stats = c.local_group_stats(0, &one).await;
    assert_eq!(stats["total_shared_throttled"], 1, "{stats}");
    assert_eq!(stats["total_throttled"], 1, "{stats}");
    c.eventually(
        Duration::from_secs(10),
        "a no_share decision line",
        || async {
            c.node(0)
                .log()
                .lines()
                .any(|l| {
                    l.contains("decision=\"no_share\"")
                        && l.contains("tier=\"shared\"")
                        && l.contains("enforced=true")
                })
                .then_some(())
        },
    )
    .await;
    // A third of 3 is one: one search holds it, the next is refused naming the share.
    let held = c.start_search(
        0,
        "/heavy/_search",
        heavy_query(),
        &[("workloadGroupId", three.as_str())],
    );
    c.eventually(Duration::from_secs(30), "the heavy search runs", || async {
        (running(&c, 0).await == 1).then_some(())
    })
    .await;
    let (s, b) = small(&c, &three).await;
    assert_eq!(s, 429, "{b}");
    let reason = b["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("share, 1, of its cluster-wide limit of 3")
            && reason.contains("1 of the 3 nodes"),
        "{reason}"
    );
    end_searches(&c, 0, held).await;
    let (s, b) = small(&c, &three).await;
    assert_eq!(s, 200, "{b}");
    // What needs no cluster-wide limit still runs.
    let (s, b) = c
        .req(0, "POST", "/heavy/_search", Some(json!({"size": 0})))
        .await;
    assert_eq!(s, 200, "{b}");
    let log = c.node(0).log();
    assert!(
        log.contains("ERROR") && log.contains("phantom-b") && log.contains("discovery.seed_hosts"),
        "{log}"
    );
    // Their heartbeats stop: their rows age out and node 0 is whole again.
    let _ = stop.send(true);
    let _ = beating.await;
    health_once(&c, 0, "joined").await;
    let (s, b) = small(&c, &one).await;
    assert_eq!(s, 200, "{b}");
}

/// The larger side of the same split: two nodes of three live ones keep two thirds of a
/// `shared_limit` of 3, rounded up (S5): two searches of the group run across them, a third
/// is refused. (On the old code the larger side kept the whole limit: the third ran, and with
/// the smaller side's own ring the limit was allowed more than once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_the_larger_side_of_a_split_keeps_only_its_share_of_a_shared_limit() {
    let c = TestCluster::start_heavy(2, "split_larger").await;
    enable(&c).await;
    let id = group(&c, shared_only("tenant", 0.5, 3)).await;
    everywhere(&c, 2, &id).await;
    let (stop, beating) = phantoms(&c, &["phantom-c"]).await;
    for i in 0..2 {
        let h = health_once(&c, i, "split").await;
        assert_eq!(h["membership"]["side_nodes"], 2, "{h}");
        assert_eq!(h["membership"]["live_nodes"], 3, "{h}");
        assert_eq!(h["status"], "yellow", "{h}");
    }
    let header = [("workloadGroupId", id.as_str())];
    let held: Vec<_> = (0..2)
        .map(|i| c.start_search(i, "/heavy/_search", heavy_query(), &header))
        .collect();
    c.eventually(
        Duration::from_secs(30),
        "both heavy searches run",
        || async { (running(&c, 0).await + running(&c, 1).await == 2).then_some(()) },
    )
    .await;
    for i in 0..2 {
        refused_saying(&c, i, &id, "share, 2, of its cluster-wide limit of 3").await;
    }
    for (i, search) in held.into_iter().enumerate() {
        end_searches(&c, i, search).await;
    }
    let _ = stop.send(true);
    let _ = beating.await;
}

/// Node `i`'s `membership` once it is no longer `joined`.
async fn divided(c: &TestCluster, i: usize) -> Value {
    c.eventually(Duration::from_secs(60), "a split", || async {
        let (_, h) = c.get(i, "/_cluster/health").await;
        (h["membership"]["status"] != "joined").then_some(h["membership"].clone())
    })
    .await
}

/// S6 of `split.rs`, on a link that loses one direction (relays in front of both nodes'
/// transports, `relay.rs`): node 0's datagrams to node 1 are lost, its answers to node 1's
/// too, while node 1's reach node 0, whose gossip therefore goes on hearing node 1. Node 1
/// drops node 0 from its membership and keeps its share; node 0 learns from node 1's row that
/// it is not heard, and is a side of its own too: each keeps half of a `shared_limit` of 2,
/// one search each. (Before, node 0 stayed `joined` and kept the whole limit beside node 1's
/// share: an outside trial's 7 of 4 until the link healed.) Once the link heals both are
/// joined again and node 0 has the whole limit back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_heard_by_none_of_its_peers_keeps_only_its_share() {
    let (c, relays, _) = relayed_cluster("split_one_way", 2).await;
    enable(&c).await;
    let id = group(&c, shared_only("tenant", 0.5, 2)).await;
    everywhere(&c, 2, &id).await;
    lose_datagrams_of(&c, &relays, 0, 1);
    let zero = divided(&c, 0).await;
    let one = divided(&c, 1).await;
    // Node 0 still hears node 1, but node 1 does not hear it.
    assert_eq!(zero["unjoined_nodes"][0]["name"], "node-1", "{zero}");
    assert_eq!(
        zero["unjoined_nodes"][0]["hears_this_node"], false,
        "{zero}"
    );
    assert_eq!(one["unjoined_nodes"][0]["name"], "node-0", "{one}");
    assert!(
        one["unjoined_nodes"][0].get("hears_this_node").is_none(),
        "{one}"
    );
    for m in [&zero, &one] {
        assert_eq!(
            (&m["side_nodes"], &m["live_nodes"]),
            (&json!(1), &json!(2)),
            "{m}"
        );
    }
    // One side of two equal ones is cut off (the one without the lowest id), the other not.
    let statuses = [&zero["status"], &one["status"]];
    assert!(
        statuses.contains(&&json!("cut_off")) && statuses.contains(&&json!("split")),
        "{zero} {one}"
    );
    // Each side's share of 2 is 1: one search runs on each node, the next is refused.
    let header = [("workloadGroupId", id.as_str())];
    for i in 0..2 {
        let held = c.start_search(i, "/heavy/_search", heavy_query(), &header);
        c.eventually(Duration::from_secs(30), "the heavy search runs", || async {
            (running(&c, i).await == 1).then_some(())
        })
        .await;
        refused_saying(&c, i, &id, "share, 1, of its cluster-wide limit of 2").await;
        end_searches(&c, i, held).await;
    }
    // The link heals: joined again, the whole limit back.
    for r in &relays {
        r.cut(Cut::default());
    }
    for i in 0..2 {
        health_once(&c, i, "joined").await;
    }
    let (s, b) = small(&c, &id).await;
    assert_eq!(s, 200, "{b}");
}

/// S9 of `split.rs`: the owner of a bucket whose datagrams to its peer are lost (the peer's
/// reach it, its answers do not) still hears the peer, whose two searches held both slots of a
/// `shared_limit` of 2 when the link failed. The peer drops the owner from its ring and its
/// leases with it, unreleased; the owner, once it reports the split, drops the peer (whose
/// row says it does not hear the owner) from its own ring and purges the leases it held, and
/// admits its share (1) at once. Before, its pool counted them until their TTL (30 s from
/// their grant), refusing every request of the group for some 15 s after the split (an
/// outside trial: up to 28 s while the other side ran 3 of 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_cut_off_owner_purges_the_leases_of_a_peer_that_does_not_hear_it() {
    let (c, relays, id, owner) = relayed_pair_and_owner("split_owner_purges").await;
    let header = [("workloadGroupId", id.as_str())];
    let holder = 1 - owner;
    // Granted just before the fault: their TTL runs out 30 s after it.
    let held: Vec<_> = (0..2)
        .map(|_| c.start_search(holder, "/heavy/_search", heavy_query(), &header))
        .collect();
    c.eventually(
        Duration::from_secs(30),
        "both heavy searches run",
        || async { (running(&c, holder).await == 2).then_some(()) },
    )
    .await;
    assert_eq!(figures(&c, owner, &id).await["shared_leases_owned"], 2);
    lose_datagrams_of(&c, &relays, owner, holder);
    // The peer's searches end; their releases cannot reach the owner.
    let mut held = held.into_iter();
    end_searches(&c, holder, held.next().unwrap()).await;
    drop(held);
    let view = divided(&c, owner).await;
    assert_eq!(
        view["unjoined_nodes"][0]["hears_this_node"], false,
        "{view}"
    );
    // Within a moment of the split, not at the leases' TTL some 15 s later.
    c.eventually(
        Duration::from_secs(3),
        "the owner admits its share",
        || async {
            let (s, _) = small_on(&c, owner, &id).await;
            (s == 200).then_some(())
        },
    )
    .await;
    assert_eq!(figures(&c, owner, &id).await["shared_leases_owned"], 0);
    let one = c.start_search(owner, "/heavy/_search", heavy_query(), &header);
    c.eventually(Duration::from_secs(30), "the heavy search runs", || async {
        (running(&c, owner).await == 1).then_some(())
    })
    .await;
    refused_saying(&c, owner, &id, "share, 1, of its cluster-wide limit of 2").await;
    end_searches(&c, owner, one).await;
}

/// S8 of `split.rs`: node 0, restarted while its datagrams to node 1 are lost (node 1's reach
/// it, its answers to them do not), hears nothing of node 1, recorded live in the metastore,
/// within its start's wait: it serves as a split's side from its first request, with its share
/// of a `shared_limit` of 2 (one search). Before, it served `joined` with the whole limit for
/// the grace (an outside trial's 7 of 4 for ~10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_restarted_unheard_serves_as_a_split_from_its_start() {
    let (mut c, relays, each) = relayed_cluster("split_restart_unheard", 2).await;
    enable(&c).await;
    let id = group(&c, shared_only("tenant", 0.5, 2)).await;
    everywhere(&c, 2, &id).await;
    relays[1].cut(Cut {
        datagrams: true,
        tcp: true,
        ..Cut::default()
    });
    relays[0].cut(Cut {
        replies: true,
        tcp: true,
        ..Cut::default()
    });
    c.kill9(0).await;
    c.restart_with(0, &each[0]).await;
    relays[0].to(c.node(0).bound_transport);
    let (_, h) = c.get(0, "/_cluster/health").await;
    assert_ne!(h["membership"]["status"], "joined", "{h}");
    assert_eq!(
        h["membership"]["unjoined_nodes"][0]["name"], "node-1",
        "{h}"
    );
    let header = [("workloadGroupId", id.as_str())];
    let held = c.start_search(0, "/heavy/_search", heavy_query(), &header);
    c.eventually(Duration::from_secs(30), "the heavy search runs", || async {
        (running(&c, 0).await == 1).then_some(())
    })
    .await;
    refused_saying(&c, 0, &id, "share, 1, of its cluster-wide limit of 2").await;
    end_searches(&c, 0, held).await;
}

/// S11 of `split.rs`: a link that lost the owner's datagrams, reported by both nodes, heals.
/// For the grace after the heal both keep the split (a share of 1 of a `shared_limit` of 2
/// each) and each its own ring: the peer's search takes its lease on its own side, so the
/// owner still admits its share beside it. Before, the two were one ring again at the heal,
/// and the owner's pool counted the peer's lease against the owner's share of 1, refusing
/// every request of the group until the split ended (trial 104: 10–14 s after every heal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_two_sides_of_a_healed_split_keep_their_own_rings_for_the_grace() {
    let (c, relays, id, owner) = relayed_pair_and_owner("split_healed_apart").await;
    let header = [("workloadGroupId", id.as_str())];
    let peer = 1 - owner;
    lose_datagrams_of(&c, &relays, owner, peer);
    let owner_id = divided(&c, peer).await["unjoined_nodes"][0]["node_id"].clone();
    let peer_id = divided(&c, owner).await["unjoined_nodes"][0]["node_id"].clone();
    // Both rows count the other off, and both nodes have read them, before the heal (a heal
    // within a heartbeat or two of the report finds a row that does not say it yet: S11).
    let ids = [owner_id, peer_id].map(|v| v.as_str().unwrap_or_default().to_string());
    rows_count_each_other_off(&c, &ids[0], &ids[1]).await;
    for r in &relays {
        r.cut(Cut::default());
    }
    c.eventually(
        Duration::from_secs(30),
        "the peer's gossip holds the owner again",
        || async {
            let (_, h) = c.get(peer, "/_cluster/health").await;
            (h["number_of_nodes"] == 2).then_some(())
        },
    )
    .await;
    let held = c.start_search(peer, "/heavy/_search", heavy_query(), &header);
    c.eventually(Duration::from_secs(30), "the heavy search runs", || async {
        (running(&c, peer).await == 1).then_some(())
    })
    .await;
    let (s, b) = small_on(&c, owner, &id).await;
    let owned = figures(&c, owner, &id).await["shared_leases_owned"].clone();
    // All of it within the grace after the heal: the split still stands on both.
    for i in [owner, peer] {
        let (_, h) = c.get(i, "/_cluster/health").await;
        assert_ne!(h["membership"]["status"], "joined", "node {i}: {h}");
    }
    assert_eq!(
        s, 200,
        "the owner admits its share beside the peer's search: {b}"
    );
    assert_eq!(owned, 0, "the peer's lease is on its own side");
    end_searches(&c, peer, held).await;
    // Once the link has held for the grace: joined, one ring, the whole limit.
    for i in 0..2 {
        health_once(&c, i, "joined").await;
    }
    let (s, b) = small(&c, &id).await;
    assert_eq!(s, 200, "{b}");
}

/// Waits until the metastore's rows say node `a` counts node `b` off its side and `b` counts
/// `a` off (S11 of `split.rs`), and each node has written its row again since: a node reads the
/// rows in the heartbeat that writes its own, so each has then read the other's.
async fn rows_count_each_other_off(c: &TestCluster, a: &str, b: &str) {
    let store = sluice_meta::PostgresMetaStore::open(&c.metastore_uri)
        .await
        .expect("the metastore opens");
    // A row of another cluster name, which the nodes pass over: written only to read theirs.
    let probe = sluice_meta::NodePresence {
        node_id: "probe".to_string(),
        name: "probe".to_string(),
        transport: "127.0.0.1:1".to_string(),
        cluster_name: format!("{}-probe", c.cluster_name),
        generation: 1,
        hears: None,
        unjoined: None,
    };
    let rows = |within: Duration| {
        let (store, probe) = (&store, &probe);
        async move {
            sluice_meta::MetaStore::heartbeat(store, probe, within)
                .await
                .ok()
        }
    };
    let counts = |rows: &[sluice_meta::NodePresence], who: &str, whom: &str| {
        rows.iter().any(|r| {
            r.node_id == who
                && r.unjoined
                    .as_ref()
                    .is_some_and(|u| u.iter().any(|x| x == whom))
        })
    };
    c.eventually(
        Duration::from_secs(30),
        "each row counts the other node off",
        || async {
            let rows = rows(Duration::from_secs(5)).await?;
            (counts(&rows, a, b) && counts(&rows, b, a)).then_some(())
        },
    )
    .await;
    // A row written within the last 200 ms, looked for once 200 ms have passed, was written
    // after the rows above were read.
    let seen = std::time::Instant::now();
    let fresh = Duration::from_millis(200);
    for id in [a, b] {
        c.eventually(
            Duration::from_secs(30),
            "the node writes its row again",
            || async {
                if seen.elapsed() < fresh {
                    return None;
                }
                let rows = rows(fresh).await?;
                rows.iter().any(|r| r.node_id == id).then_some(())
            },
        )
        .await;
    }
}

/// Two nodes behind relays (`relay.rs`), a group with a `shared_limit` of 2 only, and which
/// node owns its bucket (found from where node 1's search takes its lease), that lease
/// released again.
async fn relayed_pair_and_owner(test: &str) -> (TestCluster, Vec<Relay>, String, usize) {
    let (c, relays, _) = relayed_cluster(test, 2).await;
    enable(&c).await;
    let id = group(&c, shared_only("tenant", 0.5, 2)).await;
    everywhere(&c, 2, &id).await;
    let header = [("workloadGroupId", id.as_str())];
    let probe = c.start_search(1, "/heavy/_search", heavy_query(), &header);
    c.eventually(Duration::from_secs(30), "the heavy search runs", || async {
        (running(&c, 1).await == 1).then_some(())
    })
    .await;
    let owner = owner_of_leases(&c, &[0, 1], &id).await;
    end_searches(&c, 1, probe).await;
    c.eventually(Duration::from_secs(10), "the lease is released", || async {
        (figures(&c, owner, &id).await["shared_leases_owned"] == 0).then_some(())
    })
    .await;
    (c, relays, id, owner)
}

/// Node `lost`'s datagrams to node `peer`, and its answers to `peer`'s, are lost from now on;
/// `peer`'s reach it (a link that loses one direction).
fn lose_datagrams_of(c: &TestCluster, relays: &[Relay], lost: usize, peer: usize) {
    relays[peer].cut(Cut {
        from: Some(c.node(lost).bound_transport),
        replies: false,
        tcp: true,
        ..Cut::default()
    });
    relays[lost].cut(Cut {
        from: None,
        replies: true,
        tcp: true,
        ..Cut::default()
    });
}
