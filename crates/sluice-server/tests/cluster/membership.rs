//! Joining, leaving and rejoining, as `_cat/nodes`, `_nodes`, `_cluster/health` and `GET /`
//! show it.

use std::collections::BTreeSet;

use sluice_cluster::membership::DEAD_AFTER;

use crate::harness::{JOIN_WITHIN, TestCluster};
use crate::relay::{Cut, relayed_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_three_nodes_join_and_report_one_cluster() {
    let c = TestCluster::start(3, "join").await;
    let mut uuids = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for i in 0..3 {
        assert_eq!(c.member_names(i).await, ["node-0", "node-1", "node-2"]);
        let (_, health) = c.get(i, "/_cluster/health").await;
        assert_eq!(health["number_of_nodes"], 3, "{health}");
        assert_eq!(health["cluster_name"], c.cluster_name.as_str());
        let (_, root) = c.get(i, "/").await;
        uuids.insert(root["cluster_uuid"].as_str().unwrap().to_string());
        let (status, nodes) = c.get(i, "/_nodes").await;
        assert_eq!(status, 200, "{nodes}");
        assert_eq!(nodes["_nodes"]["total"], 3);
        for (id, n) in nodes["nodes"].as_object().unwrap() {
            ids.insert(id.clone());
            for field in [
                "name",
                "host",
                "ip",
                "transport_address",
                "version",
                "build_hash",
            ] {
                assert!(n[field].is_string(), "{field} missing in {n}");
            }
            assert!(n["roles"].as_array().is_some_and(|r| !r.is_empty()));
            // What client sniffing reads.
            assert!(n["http"]["publish_address"].is_string(), "{n}");
        }
    }
    assert_eq!(
        uuids.len(),
        1,
        "one cluster uuid, from the metastore: {uuids:?}"
    );
    assert_eq!(ids.len(), 3);

    // `_cat/nodes`: a header with `v`, chosen columns, one manager, and a clear 400.
    let (status, text) = c.get(0, "/_cat/nodes?v&h=name,cluster_manager").await;
    assert_eq!(status, 200);
    let text = text.as_str().unwrap().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("name"), "{text}");
    assert_eq!(text.matches(" *").count(), 1, "one manager: {text}");
    let (status, err) = c.get(0, "/_cat/nodes?h=name,heap.percent").await;
    assert_eq!(status, 400, "{err}");
    assert!(
        err["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("heap.percent")
    );
    // Node selectors on `_nodes`: by name, and a metric.
    let (_, one) = c.get(1, "/_nodes/node-2").await;
    assert_eq!(one["_nodes"]["total"], 1, "{one}");
    let (_, local) = c.get(1, "/_nodes/_local/http").await;
    let entry = local["nodes"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(entry["name"], "node-1");
    assert_eq!(entry["http"]["publish_address"], c.node(1).http.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_killed_node_is_dead_within_the_bound_and_its_restart_rejoins() {
    let mut c = TestCluster::start(3, "kill").await;
    let (_, before) = c.get(2, "/_nodes/_local").await;
    let id_before = before["nodes"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    c.kill9(2).await;
    // The stated bound (sluice-cluster membership.rs, DEAD_AFTER), counted from the kill.
    c.wait_members(0, 2, DEAD_AFTER).await;
    c.wait_members(1, 2, DEAD_AFTER).await;
    let (_, health) = c.get(0, "/_cluster/health").await;
    assert_eq!(health["number_of_nodes"], 2);

    c.restart(2).await;
    for i in 0..3 {
        c.wait_members(i, 3, JOIN_WITHIN).await;
    }
    let (_, after) = c.get(2, "/_nodes/_local").await;
    let id_after = after["nodes"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    assert_eq!(id_before, id_after, "same path.data, same node id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_restarted_node_serves_once_its_peers_have_joined() {
    let mut c = TestCluster::start(2, "serve-joined").await;
    c.terminate(1).await;
    c.wait_members(0, 1, JOIN_WITHIN).await;
    // Node 0's row in the metastore is live: the restarted node waits for node 0 to be its
    // member before it serves, rather than serve on a ring of itself alone for its first
    // gossip rounds (taking itself for every shared bucket's owner meanwhile).
    c.restart(1).await;
    let log = c.node(1).log();
    let joined = log.find("node joined").unwrap_or(usize::MAX);
    let listening = log.find("listening on http://").expect("it serves");
    assert!(
        joined < listening,
        "the restarted node served before node 0 joined; its log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_resuming_from_a_pause_keeps_its_peers() {
    let c = TestCluster::start(3, "pause").await;
    // Node 2 is paused (SIGSTOP, as a long GC pause, a frozen VM or a debugger would) until
    // both other nodes have dropped it: it was silent for longer than their failure detectors
    // allow, and so were they, seen from it.
    c.node(2).signal("STOP");
    c.wait_members(0, 2, DEAD_AFTER).await;
    c.wait_members(1, 2, DEAD_AFTER).await;
    c.node(2).signal("CONT");
    for i in 0..3 {
        c.wait_members(i, 3, JOIN_WITHIN).await;
    }
    // Its own silence is not theirs: the resumed node never dropped them (M5), so it never
    // took their buckets of the shared tier as its own.
    let log = c.node(2).log();
    assert!(
        !log.contains("node left or stopped answering gossip"),
        "the resumed node dropped its peers; its log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_copy_of_a_nodes_data_folder_stops_and_the_original_stays() {
    let c = TestCluster::start(2, "twin").await;
    let (_, local) = c.get(1, "/_nodes/_local").await;
    let id = local["nodes"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    // A node started on a copy of node 1's node.json: the later of the two stops, with an
    // error naming the id, the node it collides with and the fix (M6). While it runs, node 0
    // keeps counting the original, never the copy in its place (its RPCs and shared-tier calls
    // would go to the copy).
    let mut copy = c.spawn_copy_of(1).await;
    let status = {
        let exited = copy.wait_exit(JOIN_WITHIN);
        tokio::pin!(exited);
        loop {
            tokio::select! {
                status = &mut exited => break status,
                names = c.member_names(0) => {
                    assert_eq!(names, ["node-0", "node-1"], "node 0's view while the copy runs");
                }
            }
        }
    };
    assert!(!status.success(), "the copy exited with {status}");
    let log = copy.log();
    assert!(
        log.contains(&format!("node id [{id}] is already used by node [node-1]"))
            && log.contains("Remove node.json"),
        "{log}"
    );
    // Nor while the copy's last gossip still counts as live (its failure detection, about
    // 4 s on loopback: before the fix, the copy stood in the original's place until then).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(6);
    while std::time::Instant::now() < until {
        for i in 0..2 {
            assert_eq!(
                c.member_names(i).await,
                ["node-0", "node-1"],
                "node {i}'s view after the copy stopped"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_nodes_bound_on_a_wildcard_transport_publish_reachable_addresses_and_join() {
    // Peers dial what a node publishes: a wildcard would be each peer itself.
    let c =
        TestCluster::start_with_flags(2, "wildcard_transport", &["transport.host=0.0.0.0"]).await;
    for i in 0..2 {
        assert_eq!(c.member_names(i).await, ["node-0", "node-1"]);
        let (status, nodes) = c.get(i, "/_nodes/transport").await;
        assert_eq!(status, 200, "{nodes}");
        let mut published = BTreeSet::new();
        for n in nodes["nodes"].as_object().unwrap().values() {
            let addr: std::net::SocketAddr = n["transport_address"]
                .as_str()
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no transport_address in {n}"));
            assert!(!addr.ip().is_unspecified(), "node {i} lists {n}");
            assert_eq!(n["transport"]["publish_address"], addr.to_string(), "{n}");
            assert_eq!(n["ip"], addr.ip().to_string(), "{n}");
            // The address answers: the transport listens there (TCP).
            tokio::net::TcpStream::connect(addr)
                .await
                .unwrap_or_else(|e| panic!("{addr} published by {} refuses: {e}", n["name"]));
            published.insert(addr);
        }
        assert_eq!(published.len(), 2, "{nodes}");
        let (status, rows) = c.get(i, "/_cat/nodes?format=json&h=name,ip").await;
        assert_eq!(status, 200, "{rows}");
        for row in rows.as_array().unwrap() {
            let ip: std::net::IpAddr = row["ip"].as_str().unwrap().parse().unwrap();
            assert!(!ip.is_unspecified(), "node {i} lists {row}");
        }
    }
    // The node answering shows the wildcard it bound.
    let (_, local) = c.get(0, "/_nodes/_local/transport").await;
    let me = local["nodes"].as_object().unwrap().values().next().unwrap();
    assert!(
        me["transport"]["bound_address"][0]
            .as_str()
            .is_some_and(|a| a.starts_with("0.0.0.0:")),
        "{me}"
    );
}

/// A node asked to stop while every link to its peers has gone silent (a partition that loses
/// every packet: `relay.rs` holds the connections open, passing nothing) stops anyway. An
/// outside trial's node took 34 to 93 s, exiting only once the link healed, and meanwhile
/// kept recording itself live in the metastore, so its peers counted it on their side of the
/// split.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_stops_while_its_links_to_its_peers_are_silent() {
    let (mut c, relays, _) = relayed_cluster("stop_silent", 2).await;
    // Each node has called the other (a fan-out of `_tasks`): their connections are open.
    for i in 0..2 {
        let (s, b) = c.get(i, "/_tasks").await;
        assert_eq!(s, 200, "{b}");
    }
    for r in &relays {
        r.cut(Cut {
            stall: true,
            ..Cut::default()
        });
    }
    // Within the harness's 60 s for a node to exit after SIGTERM.
    c.terminate(1).await;
}
