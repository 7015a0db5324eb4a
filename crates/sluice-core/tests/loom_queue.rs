//! loom models of the permit table's queue: hand-off, cancellation and backlog release racing
//! each other, every interleaving of their lock operations explored.
//!
//! Run with `cargo test -p sluice-core --features loom --test loom_queue` (the `loom` feature
//! swaps the table's mutex, atomics and `Arc` for loom's; see `src/sync.rs`). The preemption
//! bound is [`loom_support::model`]'s unless `LOOM_MAX_PREEMPTIONS` sets one.
#![cfg(feature = "loom")]

mod loom_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use loom_support::model;
use sluice_core::bags::ThrottleAttribute;
use sluice_core::bucket::BucketKey;
use sluice_core::permits::{Acquire, Grant, GroupQueue, Permit, PermitTable, QueuePolicy, Waiter};

fn key() -> BucketKey {
    BucketKey {
        group_id: StdArc::from("g"),
        attribute: ThrottleAttribute::Group,
        value: None,
    }
}

/// A waker that records that it was called (a loom atomic, so the model sees the race).
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: StdArc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn flag() -> (StdArc<Flag>, Waker) {
    let f = StdArc::new(Flag(AtomicBool::new(false)));
    (StdArc::clone(&f), Waker::from(f))
}

fn poll(w: &mut Waiter, waker: &Waker) -> Poll<Grant> {
    Pin::new(w).poll(&mut Context::from_waker(waker))
}

fn admitted(a: Acquire) -> Permit {
    match a {
        Acquire::Admitted(p) => p,
        other => panic!("expected admitted, got {other:?}"),
    }
}

fn parked(a: Acquire) -> Waiter {
    match a {
        Acquire::Parked(w) => w,
        other => panic!("expected parked, got {other:?}"),
    }
}

fn policy() -> QueuePolicy {
    QueuePolicy {
        size_per_bucket: 4,
        group_ceiling: 4,
    }
}

/// Nothing is left: no entry, no node, no parked count, no violation.
fn assert_empty(table: &PermitTable, group: &GroupQueue) {
    assert_eq!(table.in_flight(&key()), 0, "a slot leaked");
    assert_eq!(table.num_buckets(), 0, "a bucket was left behind");
    assert_eq!(table.num_waiter_nodes(), 0, "a waiter node leaked");
    assert_eq!(group.num_parked(), 0);
    assert_eq!(group.num_waiting_buckets(), 0);
    assert_eq!(table.num_invariant_violations(), 0);
}

/// (a) A release races a new arrival (which cancels if it parks) and the cancellation of the
/// waiter the release may hand its slot to: the limit of 1 is never exceeded, the arrival is
/// never admitted while an older waiter is parked and unserved, and nothing is left behind.
#[test]
fn test_loom_release_races_park_and_cancel() {
    model(|| {
        let table = Arc::new(PermitTable::with_shards(1));
        let group = GroupQueue::new(1);
        let running = admitted(table.acquire(&key(), &group, policy(), 0));
        let mut older = parked(table.acquire(&key(), &group, policy(), 1));
        let (_, waker) = flag();
        assert!(poll(&mut older, &waker).is_pending());

        let releaser = thread::spawn(move || drop(running));
        let (t, g) = (Arc::clone(&table), Arc::clone(&group));
        let arrival = thread::spawn(move || match t.acquire(&key(), &g, policy(), 2) {
            // Admitted only once `older` is gone: no barging.
            Acquire::Admitted(p) => {
                assert_eq!(t.in_flight(&key()), 1);
                drop(p);
            }
            Acquire::Parked(w) => drop(w),
            other => panic!("{other:?}"),
        });
        // `older` is cancelled while the release may be handing it the slot.
        match poll(&mut older, &waker) {
            Poll::Ready(Grant::Permit(p)) => drop(p),
            Poll::Ready(Grant::Unthrottled) => panic!("not released"),
            Poll::Ready(Grant::External(_)) => panic!("this model hands out no external grant"),
            Poll::Pending => {}
        }
        drop(older);
        releaser.join().expect("no panic");
        arrival.join().expect("no panic");
        assert_empty(&table, &group);
    });
}

/// (b) A waiter polled once and then dropped while a release hands it the slot (tokio's
/// concurrent_cancel): the slot passes to the next waiter, who was woken; never leaked, never
/// counted twice.
#[test]
fn test_loom_waiter_polled_once_then_dropped_passes_the_slot_on() {
    model(|| {
        let table = Arc::new(PermitTable::with_shards(1));
        let group = GroupQueue::new(1);
        let running = admitted(table.acquire(&key(), &group, policy(), 0));
        let mut first = parked(table.acquire(&key(), &group, policy(), 1));
        let mut second = parked(table.acquire(&key(), &group, policy(), 2));
        let (second_woken, second_waker) = flag();
        assert!(poll(&mut second, &second_waker).is_pending());

        let releaser = thread::spawn(move || drop(running));
        let (_, first_waker) = flag();
        let first_got = poll(&mut first, &first_waker);
        drop(first_got);
        drop(first);
        releaser.join().expect("no panic");

        // Whatever the order, the one slot is now `second`'s, and `second` was woken.
        assert_eq!(table.in_flight(&key()), 1, "the slot was leaked or lost");
        assert!(
            second_woken.0.load(Ordering::SeqCst),
            "lost wake-up: second was handed the slot but not woken"
        );
        match poll(&mut second, &second_waker) {
            Poll::Ready(Grant::Permit(p)) => drop(p),
            other => panic!("second must hold the slot, got {other:?}"),
        }
        drop(second);
        assert_empty(&table, &group);
    });
}

/// (c) Two releases race for one waiter while it polls: it gets exactly one slot, the other
/// release frees its own, and the bucket empties once the waiter's permit is dropped.
#[test]
fn test_loom_two_releases_race_for_one_waiter() {
    model(|| {
        let table = Arc::new(PermitTable::with_shards(1));
        let group = GroupQueue::new(2);
        let a = admitted(table.acquire(&key(), &group, policy(), 0));
        let b = admitted(table.acquire(&key(), &group, policy(), 1));
        let mut waiter = parked(table.acquire(&key(), &group, policy(), 2));
        let (woken, waker) = flag();
        assert!(poll(&mut waiter, &waker).is_pending());

        let ra = thread::spawn(move || drop(a));
        let rb = thread::spawn(move || drop(b));
        let early = poll(&mut waiter, &waker);
        ra.join().expect("no panic");
        rb.join().expect("no panic");
        let permit = match early {
            Poll::Ready(Grant::Permit(p)) => p,
            Poll::Pending => {
                assert!(woken.0.load(Ordering::SeqCst), "lost wake-up");
                match poll(&mut waiter, &waker) {
                    Poll::Ready(Grant::Permit(p)) => p,
                    other => panic!("the waiter must hold a slot, got {other:?}"),
                }
            }
            Poll::Ready(Grant::Unthrottled) => panic!("not released"),
            Poll::Ready(Grant::External(_)) => panic!("this model hands out no external grant"),
        };
        assert_eq!(
            table.in_flight(&key()),
            1,
            "one slot for the waiter, one freed"
        );
        drop(permit);
        drop(waiter);
        assert_empty(&table, &group);
    });
}

/// (d) A backlog release races an arrival: the arrival is either released with the backlog
/// or told the group is unthrottled, never parked behind the release (seed 002's stranding).
#[test]
fn test_loom_backlog_release_never_strands_a_racing_arrival() {
    model(|| {
        let table = Arc::new(PermitTable::with_shards(1));
        let group = GroupQueue::new(0);
        let (t, g) = (Arc::clone(&table), Arc::clone(&group));
        let releaser = thread::spawn(move || t.release_group(&g));
        let outcome = table.acquire(&key(), &group, policy(), 1);
        releaser.join().expect("no panic");
        match outcome {
            Acquire::Unthrottled => {}
            Acquire::Parked(mut w) => {
                let (_, waker) = flag();
                assert!(
                    matches!(poll(&mut w, &waker), Poll::Ready(Grant::Unthrottled)),
                    "stranded: parked after the backlog release"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_empty(&table, &group);
    });
}
