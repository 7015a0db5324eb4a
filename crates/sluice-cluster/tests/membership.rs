//! Membership over real UDP gossip on loopback: join, another cluster name, another
//! metastore, a stopped node, a restarted node, a node that announces its leave (the
//! invariants M1–M4 and M7 of `membership.rs`), and RPC between members. Every wait is on the membership watch with a deadline.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_cluster::bind::{PortSpec, bind_transport};
use sluice_cluster::membership::{DEAD_AFTER, GOSSIP_INTERVAL, Members};
use sluice_cluster::rpc::{BoxFuture, LocalAnswer, LocalApi, LocalHandler, RpcError};
use sluice_cluster::{Cluster, ClusterConfig, Member, PROTOCOL_VERSION};

/// How long a join may take in these tests: a few gossip rounds, generously.
const JOIN_WITHIN: Duration = Duration::from_secs(10);

/// Answers every call with its own node id, the api and the params.
struct Echo(String);

impl LocalHandler for Echo {
    fn local(&self, api: LocalApi, params: Value) -> BoxFuture<'static, LocalAnswer> {
        let id = self.0.clone();
        Box::pin(async move {
            if params.get("slow").is_some() {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            LocalAnswer::ok(json!({"node": id, "api": api.as_str_name(), "params": params}))
        })
    }
}

async fn node(id: &str, generation: u64, cluster: &str, uuid: &str, seeds: Vec<String>) -> Cluster {
    node_at(id, generation, cluster, uuid, seeds, PortSpec::Exact(0)).await
}

async fn node_at(
    id: &str,
    generation: u64,
    cluster: &str,
    uuid: &str,
    seeds: Vec<String>,
    port: PortSpec,
) -> Cluster {
    let host: IpAddr = "127.0.0.1".parse().unwrap();
    let listener = bind_transport(host, port).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let me = Member {
        node_id: id.into(),
        generation,
        name: format!("name-{id}"),
        http_addr: "127.0.0.1:9200".parse().unwrap(),
        transport_addr: addr,
        protocol_version: PROTOCOL_VERSION,
        backend: "embedded".into(),
        version: "test".into(),
        cluster_uuid: uuid.into(),
    };
    let c = Cluster::start(
        ClusterConfig {
            cluster_name: cluster.into(),
            me,
            seeds,
            gossip_interval: GOSSIP_INTERVAL / 5,
        },
        listener,
    )
    .await
    .unwrap();
    c.serve(Arc::new(Echo(id.into())));
    c
}

fn seed(c: &Cluster) -> Vec<String> {
    vec![c.me().transport_addr.to_string()]
}

fn ids(m: &Members) -> Vec<String> {
    m.live.iter().map(|m| m.node_id.clone()).collect()
}

/// Waits until `pred` holds for the cluster's members, or panics after `within`.
async fn wait_members(c: &Cluster, within: Duration, what: &str, pred: impl Fn(&Members) -> bool) {
    let mut rx = c.watch();
    let found = tokio::time::timeout(within, async {
        loop {
            if pred(&rx.borrow_and_update()) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "{what}: not within {within:?}; members now {:?}",
        ids(&c.members())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_nodes_join_strangers_are_refused_and_a_stopped_node_is_dead_within_the_bound() {
    let a = node("a", 1, "c1", "u1", vec![]).await;
    let b = node("b", 1, "c1", "u1", seed(&a)).await;
    let c = node("c", 1, "c1", "u1", seed(&a)).await;
    // M1, M2: another cluster name and another metastore gossip at `a` too.
    let other_name = node("x", 1, "c2", "u1", seed(&a)).await;
    let other_store = node("y", 1, "c1", "u2", seed(&a)).await;
    for n in [&a, &b, &c] {
        wait_members(n, JOIN_WITHIN, "three members", |m| {
            ids(m) == ["a", "b", "c"]
        })
        .await;
    }
    wait_members(&a, JOIN_WITHIN, "the other metastore is a stranger", |m| {
        m.strangers.iter().any(|s| s.node_id == "y")
    })
    .await;
    assert!(!ids(&a.members()).contains(&"x".to_string()));
    assert!(!ids(&other_name.members()).contains(&"a".to_string()));
    assert_eq!(ids(&other_store.members()), ["y"]);
    // The gossiped record reads back whole.
    let seen_b = a.members().get("b").cloned().unwrap();
    assert_eq!(seen_b.name, "name-b");
    assert_eq!(seen_b.transport_addr, b.me().transport_addr);

    // RPC between members, and a fan-out over all three.
    let answer = a
        .call(
            &seen_b,
            LocalApi::ListTasks,
            json!({"k": 1}),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(answer.body["node"], "b");
    assert_eq!(answer.body["params"]["k"], 1);
    assert_eq!(a.ping(&seen_b, Duration::from_secs(5)).await.unwrap(), "b");
    let live = a.members().live.clone();
    let outcomes = a
        .fan_out(
            &live,
            LocalApi::WlmStats,
            &json!({}),
            Duration::from_secs(5),
        )
        .await;
    let answered: Vec<String> = outcomes
        .iter()
        .map(|o| {
            o.result.as_ref().unwrap().body["node"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(answered, ["a", "b", "c"]);

    // A call that outlives its deadline ends at the deadline with the reason.
    let slow = a
        .call(
            &seen_b,
            LocalApi::WlmStats,
            json!({"slow": true}),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(slow, RpcError::DeadlineExceeded { .. }),
        "{slow:?}"
    );

    // M4: `c` stops; the others drop it within the stated bound; calls to it fail fast. (It
    // announces its leave as it stops, M7; a node that dies without a word is dropped by the
    // failure detector alone: the server's cluster tests kill -9 one.)
    let seen_c = a.members().get("c").cloned().unwrap();
    c.shutdown().await;
    let err = a
        .call(
            &seen_c,
            LocalApi::WlmStats,
            json!({}),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable { .. }), "{err:?}");
    wait_members(&a, DEAD_AFTER, "c marked dead", |m| ids(m) == ["a", "b"]).await;
    wait_members(&b, DEAD_AFTER, "c marked dead", |m| ids(m) == ["a", "b"]).await;

    // M3: `b` restarts (same id, higher generation) on the same port and is one member again.
    let b_port = b.me().transport_addr.port();
    b.shutdown().await;
    let b2 = node_at("b", 2, "c1", "u1", seed(&a), PortSpec::Exact(b_port)).await;
    wait_members(&a, JOIN_WITHIN, "b rejoined with its new generation", |m| {
        ids(m) == ["a", "b"] && m.get("b").is_some_and(|b| b.generation == 2)
    })
    .await;
    wait_members(&b2, JOIN_WITHIN, "b2 sees a", |m| ids(m) == ["a", "b"]).await;
    other_name.shutdown().await;
    other_store.shutdown().await;
}

/// M8: a stopping node goes on until its peers have dropped it — when its shutdown returns,
/// every peer's view is already without it (read at once, not waited for). A node that
/// stopped before its peers knew fails this: they would still list it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_stopping_node_stops_once_its_peers_dropped_it() {
    let a = node("a", 1, "c1", "u1", vec![]).await;
    let b = node("b", 1, "c1", "u1", seed(&a)).await;
    let c = node("c", 1, "c1", "u1", seed(&a)).await;
    for n in [&a, &b, &c] {
        wait_members(n, JOIN_WITHIN, "three members", |m| {
            ids(m) == ["a", "b", "c"]
        })
        .await;
    }
    c.shutdown().await;
    assert_eq!(ids(&a.members()), ["a", "b"], "a still counts c");
    assert_eq!(ids(&b.members()), ["a", "b"], "b still counts c");
    // The same id leaving again in a later incarnation waits for its own acknowledgement,
    // not the earlier one's.
    let c2 = node("c", 2, "c1", "u1", seed(&a)).await;
    for n in [&a, &b, &c2] {
        wait_members(n, JOIN_WITHIN, "c's new incarnation", |m| {
            ids(m) == ["a", "b", "c"]
        })
        .await;
    }
    c2.shutdown().await;
    assert_eq!(
        ids(&a.members()),
        ["a", "b"],
        "a still counts c's new incarnation"
    );
    assert_eq!(
        ids(&b.members()),
        ["a", "b"],
        "b still counts c's new incarnation"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_that_announces_its_leave_is_dropped_while_it_still_gossips() {
    let a = node("a", 1, "c1", "u1", vec![]).await;
    let b = node("b", 1, "c1", "u1", seed(&a)).await;
    for n in [&a, &b] {
        wait_members(n, JOIN_WITHIN, "two members", |m| ids(m) == ["a", "b"]).await;
    }
    let seen_b = a.members().get("b").cloned().unwrap();
    // M7: b announces its leave and goes on running: it still gossips (the failure detector
    // has no reason to drop it) and still answers calls, yet a drops it.
    assert!(b.announce_leave().await);
    wait_members(&a, JOIN_WITHIN, "b dropped on its announcement", |m| {
        ids(m) == ["a"]
    })
    .await;
    assert_eq!(a.ping(&seen_b, Duration::from_secs(5)).await.unwrap(), "b");
    // A node alone has nobody to tell.
    a.shutdown().await;
    b.shutdown().await;
    let alone = node("z", 1, "c3", "u1", vec![]).await;
    assert!(!alone.announce_leave().await);
    alone.shutdown().await;
}
