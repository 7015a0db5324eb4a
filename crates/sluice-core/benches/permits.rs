//! Micro-benchmarks of the node-tier permit table: one admission (`bucket_for` from a cached
//! group id and principal, `try_acquire`, drop of the permit) per iteration, and the heap
//! allocations each admission makes, counted by a global allocator.
//!
//! `cargo bench -p sluice-core --bench permits`; results and caveats in BENCHMARKS.md.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::Criterion;
use sluice_core::bags::{ThrottleAttribute, ThrottleConfig};
use sluice_core::bucket::{Principal, bucket_for};
use sluice_core::permits::PermitTable;

#[path = "support/all_allocations.rs"]
mod all_allocations;

use all_allocations::{CountingAllocator, allocations};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Distinct username buckets in the many-buckets cases: a large node's worth of live callers.
const NUM_USERS: usize = 10_000;

/// High enough that no case is ever refused: the benchmarks measure admission, not refusal.
const LIMIT: u64 = 1_000_000;

/// Admissions per case when counting allocations, after as many for warm-up.
const COUNTED_OPS: u64 = 100_000;

/// The shared inputs: a table, a group id cached as the server caches it, and principals
/// built once per user.
struct Fixture {
    table: PermitTable,
    group_id: Arc<str>,
    group: ThrottleConfig,
    username: ThrottleConfig,
    users: Vec<Principal>,
}

impl Fixture {
    fn new() -> Fixture {
        let throttling = |attribute| ThrottleConfig {
            attribute: Some(attribute),
            node_limit: Some(10),
            shared_limit: None,
        };
        Fixture {
            table: PermitTable::new(),
            group_id: Arc::from("analytics-0123456789abcdef"),
            group: throttling(ThrottleAttribute::Group),
            username: throttling(ThrottleAttribute::Username),
            users: (0..NUM_USERS)
                .map(|i| Principal {
                    username: Arc::from(format!("user-{i:05}")),
                    roles: vec![Arc::from("reader")],
                })
                .collect(),
        }
    }

    /// One admission of `principal` under `config`, released at once.
    #[inline]
    fn admit(&self, config: &ThrottleConfig, principal: &Principal) {
        let key = bucket_for(&self.group_id, config, Some(principal));
        let key = black_box(key).expect("throttled");
        let permit = self.table.try_acquire(&key, LIMIT).expect("admitted");
        black_box(&permit);
    }
}

/// The cases, each a function running `n` admissions; `i` rotates through the users.
fn group_uncontended(f: &Fixture, n: u64) {
    for _ in 0..n {
        f.admit(&f.group, &f.users[0]);
    }
}

fn username_rotating(f: &Fixture, n: u64, start: &mut usize) {
    for _ in 0..n {
        *start = (*start + 1) % NUM_USERS;
        f.admit(&f.username, &f.users[*start]);
    }
}

/// Runs `n` group admissions on each of two threads at once and returns the slower thread's
/// time, after warm-up, excluding thread start-up.
fn group_two_threads(f: &Fixture, n: u64, count_allocations: bool) -> (Duration, u64) {
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    group_uncontended(f, 1_000);
                    barrier.wait(); // warmed up
                    barrier.wait(); // start
                    let started = Instant::now();
                    group_uncontended(f, n);
                    let elapsed = started.elapsed();
                    barrier.wait(); // done
                    elapsed
                })
            })
            .collect();
        barrier.wait();
        let before = allocations();
        barrier.wait();
        barrier.wait();
        let after = allocations();
        let elapsed = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .max()
            .unwrap_or_default();
        (elapsed, if count_allocations { after - before } else { 0 })
    })
}

/// Runs `ops` after as many for warm-up and returns the allocations per admission.
fn allocations_per_op(mut ops: impl FnMut(u64)) -> f64 {
    ops(COUNTED_OPS);
    let before = allocations();
    ops(COUNTED_OPS);
    (allocations() - before) as f64 / COUNTED_OPS as f64
}

fn report_allocations() {
    let f = Fixture::new();
    let mut i = 0;
    println!("allocations per admission (acquire + release, {COUNTED_OPS} counted after warm-up):");
    let group = allocations_per_op(|n| group_uncontended(&f, n));
    println!("  group_uncontended            {group:.4}");
    let (_, total) = group_two_threads(&f, COUNTED_OPS, true);
    let two = total as f64 / (2 * COUNTED_OPS) as f64;
    println!("  group_two_threads_one_bucket {two:.4}");
    let held: Vec<_> = hold_one_per_user(&f);
    let live = allocations_per_op(|n| username_rotating(&f, n, &mut i));
    println!("  username_10k_live_buckets    {live:.4}");
    drop(held);
    let idle = allocations_per_op(|n| username_rotating(&f, n, &mut i));
    println!("  username_10k_idle_buckets    {idle:.4}");
}

/// Holds one permit in each user's bucket, so that all 10,000 entries are live.
fn hold_one_per_user(f: &Fixture) -> Vec<sluice_core::permits::Permit> {
    f.users
        .iter()
        .map(|p| {
            let key = bucket_for(&f.group_id, &f.username, Some(p)).expect("throttled");
            f.table.try_acquire(&key, LIMIT).expect("admitted")
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let f = Fixture::new();
    let mut g = c.benchmark_group("permits");
    g.bench_function("group_uncontended", |b| {
        b.iter(|| f.admit(&f.group, &f.users[0]))
    });
    let key = bucket_for(&f.group_id, &f.group, None).expect("throttled");
    g.bench_function("group_uncontended_prebuilt_key", |b| {
        b.iter(|| {
            let permit = f
                .table
                .try_acquire(black_box(&key), LIMIT)
                .expect("admitted");
            black_box(&permit);
        })
    });
    g.bench_function("group_two_threads_one_bucket", |b| {
        b.iter_custom(|iters| group_two_threads(&f, iters, false).0)
    });
    let held = hold_one_per_user(&f);
    let mut i = 0;
    g.bench_function("username_10k_live_buckets", |b| {
        b.iter(|| username_rotating(&f, 1, &mut i))
    });
    drop(held);
    g.bench_function("username_10k_idle_buckets", |b| {
        b.iter(|| username_rotating(&f, 1, &mut i))
    });
    g.finish();
}

fn main() {
    report_allocations();
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
