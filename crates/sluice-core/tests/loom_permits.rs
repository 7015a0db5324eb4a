//! loom models of the permit table: every interleaving of its lock operations is explored.
//!
//! Run with `cargo test -p sluice-core --features loom --test loom_permits` (the `loom`
//! feature swaps the table's mutex and `Arc` for loom's; see `src/sync.rs`).
#![cfg(feature = "loom")]

mod loom_support;

use std::sync::Arc as StdArc;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_support::model;
use sluice_core::bags::ThrottleAttribute;
use sluice_core::bucket::BucketKey;
use sluice_core::permits::PermitTable;

fn key() -> BucketKey {
    BucketKey {
        group_id: StdArc::from("g"),
        attribute: ThrottleAttribute::Group,
        value: None,
    }
}

/// (a) Three threads admit to one bucket with limit 2: while a thread holds a permit, the
/// number of holders (counted outside the table) never exceeds 2, and a refusal only ever sees a
/// full bucket, never a transient over-count.
#[test]
fn test_loom_three_threads_never_exceed_limit_two() {
    model(|| {
        const LIMIT: u64 = 2;
        let table = Arc::new(PermitTable::with_shards(1));
        let holders = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let table = Arc::clone(&table);
                let holders = Arc::clone(&holders);
                thread::spawn(move || match table.try_acquire(&key(), LIMIT) {
                    Ok(permit) => {
                        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= LIMIT, "{now} holders with limit {LIMIT}");
                        holders.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                        true
                    }
                    Err(refused) => {
                        assert_eq!(refused.in_flight, LIMIT, "refused without a full bucket");
                        false
                    }
                })
            })
            .collect();
        let admitted = threads
            .into_iter()
            .map(|t| t.join().expect("no panic"))
            .filter(|&ok| ok)
            .count();
        assert!(admitted >= 2, "only {admitted} admitted with limit {LIMIT}");
        assert_eq!(table.in_flight(&key()), 0);
        assert_eq!(table.num_buckets(), 0);
    });
}

/// (b) The last release (which removes the entry) races an admission to the same bucket and a
/// second admit-and-release: no entry is lost while a permit holds it, none survives once all
/// are released.
#[test]
fn test_loom_last_release_races_admission_without_losing_or_resurrecting_entry() {
    model(|| {
        let table = Arc::new(PermitTable::with_shards(1));
        // Limit 3: the holder is admitted whatever the other two are doing.
        let first = table.try_acquire(&key(), 3).expect("idle bucket admits");

        let releaser = thread::spawn(move || drop(first));
        let t = Arc::clone(&table);
        let holder = thread::spawn(move || t.try_acquire(&key(), 3).expect("at most 3 in flight"));
        let t = Arc::clone(&table);
        let churner = thread::spawn(move || {
            let permit = t.try_acquire(&key(), 3).expect("at most 3 in flight");
            drop(permit);
        });

        releaser.join().expect("no panic");
        churner.join().expect("no panic");
        let held = holder.join().expect("no panic");
        assert_eq!(
            table.in_flight(&key()),
            1,
            "the held permit's entry was lost"
        );
        assert_eq!(table.num_buckets(), 1);
        drop(held);
        assert_eq!(table.in_flight(&key()), 0);
        assert_eq!(table.num_buckets(), 0, "an entry survived its last release");
        assert_eq!(table.num_invariant_violations(), 0);
    });
}

/// (c) A permit acquired on one thread and dropped on another releases its slot there, while
/// the first thread competes for the same slot.
#[test]
fn test_loom_permit_dropped_on_another_thread_releases() {
    model(|| {
        let table = Arc::new(PermitTable::with_shards(1));
        let permit = table.try_acquire(&key(), 1).expect("idle bucket admits");
        let other = thread::spawn(move || drop(permit));
        // Refused before the other thread's release, admitted after it.
        let second = table.try_acquire(&key(), 1);
        other.join().expect("no panic");
        let expected = u64::from(second.is_ok());
        assert_eq!(table.in_flight(&key()), expected);
        drop(second);
        assert_eq!(table.in_flight(&key()), 0);
        assert_eq!(table.num_buckets(), 0);
        let _third = table
            .try_acquire(&key(), 1)
            .expect("the slot was released on the other thread");
    });
}
