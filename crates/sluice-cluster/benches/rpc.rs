//! Node-to-node RPC on loopback: the round trip of an empty call (`Ping`) and of a stats
//! fan-out over three nodes (this node answers in process, two over gRPC), each node's answer
//! a `_wlm/stats`-sized JSON document (ten groups' figures, about 4 KB).
//!
//! Run: `cargo bench -p sluice-cluster --bench rpc` (release build). Prints p50/p90/p99/max in
//! microseconds for each, measured one call at a time after a warm-up; both in one run, so
//! they share the machine's load and compare as a ratio.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_cluster::bind::{PortSpec, bind_transport};
use sluice_cluster::membership::GOSSIP_INTERVAL;
use sluice_cluster::rpc::{BoxFuture, LocalAnswer, LocalApi, LocalHandler};
use sluice_cluster::{Cluster, ClusterConfig, Member, PROTOCOL_VERSION};

/// Calls measured per figure: enough for a stable p99 (the 1 % tail is 100 calls).
const CALLS: usize = 10_000;
/// Calls made first and not measured: connections, allocator and caches warm up.
const WARMUP: usize = 1_000;

/// Answers every call with the same stats-shaped document.
struct Stats(Value);

impl LocalHandler for Stats {
    fn local(&self, _api: LocalApi, _params: Value) -> BoxFuture<'static, LocalAnswer> {
        let body = self.0.clone();
        Box::pin(async move { LocalAnswer::ok(body) })
    }
}

fn stats_document() -> Value {
    let group = json!({
        "total_completions": 123456, "total_rejections": 12, "total_cancellations": 3,
        "failures": 0, "total_throttled": 40, "total_would_throttle": 0, "total_queued": 9,
        "total_queue_rejections": 1, "queued_current": 0, "queue_peak": 4,
        "cpu": {"current_usage": 0.12, "cancellations": 0, "rejections": 0},
        "memory": {"current_usage": 0.03, "cancellations": 0, "rejections": 0}
    });
    let groups: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("group-{i:02}-aaaaaaaaaaaa"), group.clone()))
        .collect();
    json!({ "workload_groups": groups })
}

async fn node(id: &str, seeds: Vec<String>, doc: Value) -> Cluster {
    let host: IpAddr = "127.0.0.1".parse().unwrap();
    let listener = bind_transport(host, PortSpec::Exact(0)).await.unwrap();
    let me = Member {
        node_id: id.into(),
        generation: 1,
        name: id.into(),
        http_addr: "127.0.0.1:9200".parse().unwrap(),
        transport_addr: listener.local_addr().unwrap(),
        protocol_version: PROTOCOL_VERSION,
        backend: "embedded".into(),
        version: "bench".into(),
        cluster_uuid: "bench".into(),
    };
    let c = Cluster::start(
        ClusterConfig {
            cluster_name: "bench".into(),
            me,
            seeds,
            gossip_interval: GOSSIP_INTERVAL,
        },
        listener,
    )
    .await
    .unwrap();
    c.serve(Arc::new(Stats(doc)));
    c
}

fn report(name: &str, mut micros: Vec<f64>) {
    micros.sort_by(f64::total_cmp);
    let q = |p: f64| micros[((micros.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<34} n={:<6} p50={:>7.1}µs p90={:>7.1}µs p99={:>7.1}µs max={:>8.1}µs",
        micros.len(),
        q(0.50),
        q(0.90),
        q(0.99),
        q(1.0)
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let doc = stats_document();
        println!(
            "answer size: {} bytes of JSON per node",
            doc.to_string().len()
        );
        let a = node("a", vec![], doc.clone()).await;
        let seed = vec![a.me().transport_addr.to_string()];
        let b = node("b", seed.clone(), doc.clone()).await;
        let c = node("c", seed, doc).await;
        let start = Instant::now();
        while a.members().live.len() < 3 {
            assert!(start.elapsed() < Duration::from_secs(30), "no join");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let members = a.members().live.clone();
        let remote = members.iter().find(|m| m.node_id == "b").unwrap().clone();
        let deadline = Duration::from_secs(5);

        let mut ping = Vec::with_capacity(CALLS);
        for i in 0..WARMUP + CALLS {
            let t = Instant::now();
            a.ping(&remote, deadline).await.unwrap();
            if i >= WARMUP {
                ping.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        let mut one = Vec::with_capacity(CALLS);
        for i in 0..WARMUP + CALLS {
            let t = Instant::now();
            let r = a
                .call(&remote, LocalApi::WlmStats, json!({}), deadline)
                .await
                .unwrap();
            std::hint::black_box(r);
            if i >= WARMUP {
                one.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        let mut fan = Vec::with_capacity(CALLS);
        for i in 0..WARMUP + CALLS {
            let t = Instant::now();
            let outcomes = a
                .fan_out(&members, LocalApi::WlmStats, &json!({}), deadline)
                .await;
            assert!(outcomes.iter().all(|o| o.result.is_ok()));
            std::hint::black_box(outcomes);
            if i >= WARMUP {
                fan.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        report("ping (empty call)", ping);
        report("stats call, one remote node", one);
        report("stats fan-out over 3 nodes", fan);
        b.shutdown().await;
        c.shutdown().await;
        a.shutdown().await;
    });
}
