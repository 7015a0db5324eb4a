//! Throughput of the shared pool on one core: acquire + release pairs per second over 1, 100
//! and 10,000 buckets taken round-robin, with the bucket idle between pairs (each acquire
//! creates its entry and each release removes it: the common case of a lightly used shared
//! tier) and busy (each bucket already holds a lease, so its entry stays). Also the ring's
//! owner lookup for a bucket key over three members.
//!
//! Run: `cargo bench -p sluice-cluster --bench pool` (release build). Prints the median of
//! [`ROUNDS`] rounds of [`PAIRS`] pairs each, after a warm-up round.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_cluster::Member;
use sluice_cluster::ring::Ring;
use sluice_cluster::shared::pool::{AcquireOutcome, PoolLimits, SharedPool};

/// Pairs per round: a few tenths of a second per round at the expected rate.
const PAIRS: usize = 2_000_000;
/// Rounds per figure; the median is printed, so one disturbed round does not move it.
const ROUNDS: usize = 5;
/// High enough that no acquire is ever denied: the benchmark measures grants.
const LIMIT: u64 = 1_000;
/// The seed's lease TTL.
const TTL: Duration = Duration::from_secs(300);

fn round(pool: &mut SharedPool, buckets: &[Arc<str>], holder: &Arc<str>) -> Duration {
    let start = Instant::now();
    for i in 0..PAIRS {
        let bucket = &buckets[i % buckets.len()];
        let now = Duration::from_nanos(i as u64);
        let AcquireOutcome::Granted { lease, .. } =
            pool.acquire(black_box(bucket), LIMIT, holder, false, TTL, now)
        else {
            panic!("the limit is never reached");
        };
        black_box(pool.release(holder, lease, now));
    }
    start.elapsed()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn report(what: &str, per_round: Duration, ops: usize) {
    let ns = per_round.as_nanos() as f64 / ops as f64;
    println!("{what:<44} {:>7.2} M/s {ns:>8.1} ns each", 1e3 / ns);
}

fn main() {
    let holder: Arc<str> = Arc::from("coordinator-1");
    let limits = PoolLimits {
        max_buckets: 65_536,
        max_leases: 65_536,
    };
    for num_buckets in [1, 100, 10_000] {
        let buckets: Vec<Arc<str>> = (0..num_buckets)
            .map(|i| Arc::from(format!("search-group\0user{i:06}")))
            .collect();
        for busy in [false, true] {
            let mut pool = SharedPool::new(limits);
            if busy {
                for bucket in &buckets {
                    pool.acquire(bucket, LIMIT, &holder, false, TTL * 1_000, Duration::ZERO);
                }
            }
            round(&mut pool, &buckets, &holder);
            let samples = (0..ROUNDS)
                .map(|_| round(&mut pool, &buckets, &holder))
                .collect();
            let state = if busy { "busy" } else { "idle" };
            report(
                &format!("acquire+release, {num_buckets} buckets ({state})"),
                median(samples),
                PAIRS,
            );
        }
    }
    let members: Vec<Member> = (0..3)
        .map(|i| Member {
            node_id: format!("node-{i}"),
            generation: 1,
            name: format!("node-{i}"),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version: 1,
            backend: "embedded".into(),
            version: "0.1.0".into(),
            cluster_uuid: "bench".into(),
        })
        .collect();
    let ring = Ring::new(&members, 1);
    let keys: Vec<Vec<u8>> = (0..10_000)
        .map(|i| format!("search-group\0user{i:06}").into_bytes())
        .collect();
    let lookups = |n: usize| {
        let start = Instant::now();
        for i in 0..n {
            black_box(ring.owner(black_box(&keys[i % keys.len()])));
        }
        start.elapsed()
    };
    lookups(PAIRS);
    let samples = (0..ROUNDS).map(|_| lookups(PAIRS)).collect();
    report("ring owner lookup, 3 members", median(samples), PAIRS);
}
