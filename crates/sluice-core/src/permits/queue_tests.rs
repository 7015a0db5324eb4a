//! Unit tests of the queueing half of the permit table: FIFO hand-off, bounds, fair share,
//! cancellation, live limits and backlog release.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use super::*;
use crate::bags::ThrottleAttribute;

fn group_key(id: &str) -> BucketKey {
    BucketKey {
        group_id: Arc::from(id),
        attribute: ThrottleAttribute::Group,
        value: None,
    }
}

fn user(id: &str, name: &str) -> BucketKey {
    BucketKey {
        group_id: Arc::from(id),
        attribute: ThrottleAttribute::Username,
        value: Some(Arc::from(name)),
    }
}

/// A waker that counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (std::sync::Arc<CountingWaker>, Waker) {
    let c = std::sync::Arc::new(CountingWaker::default());
    let w = Waker::from(std::sync::Arc::clone(&c));
    (c, w)
}

fn poll(w: &mut Waiter, waker: &Waker) -> Poll<Grant> {
    Pin::new(w).poll(&mut Context::from_waker(waker))
}

fn poll_noop(w: &mut Waiter) -> Poll<Grant> {
    poll(w, Waker::noop())
}

use std::future::Future;
use std::pin::Pin;

fn policy(size: u64) -> QueuePolicy {
    QueuePolicy::new(size)
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

fn refused(a: Acquire) -> Refused {
    match a {
        Acquire::Refused(r) => r,
        other => panic!("expected refused, got {other:?}"),
    }
}

fn ready_permit(w: &mut Waiter) -> Permit {
    match poll_noop(w) {
        Poll::Ready(Grant::Permit(p)) => p,
        other => panic!("expected a permit, got {other:?}"),
    }
}

fn assert_empty(table: &PermitTable) {
    assert_eq!(table.num_buckets(), 0, "a bucket was left behind");
    assert_eq!(table.num_waiter_nodes(), 0, "a waiter node leaked");
    assert_eq!(table.num_invariant_violations(), 0);
}

#[test]
fn test_hand_off_goes_to_oldest_waiter_in_fifo_order() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let first = admitted(table.acquire(&k, &g, policy(10), 0));
    let mut waiters: Vec<Waiter> = (1..=3)
        .map(|t| parked(table.acquire(&k, &g, policy(10), t)))
        .collect();
    assert_eq!(table.parked(&k), vec![1, 2, 3]);
    assert_eq!(g.num_parked(), 3);
    for w in &mut waiters {
        assert!(poll_noop(w).is_pending());
    }
    drop(first);
    // The slot moved: still one in flight, and only the oldest is ready.
    assert_eq!(table.in_flight(&k), 1);
    assert!(poll_noop(&mut waiters[2]).is_pending());
    assert!(poll_noop(&mut waiters[1]).is_pending());
    let p1 = ready_permit(&mut waiters[0]);
    assert_eq!(table.parked(&k), vec![2, 3]);
    drop(p1);
    let p2 = ready_permit(&mut waiters[1]);
    drop(p2);
    let p3 = ready_permit(&mut waiters[2]);
    assert_eq!(table.num_parked(&k), 0);
    drop(p3);
    drop(waiters);
    assert_empty(&table);
    assert_eq!(g.num_parked(), 0);
    assert_eq!(g.num_waiting_buckets(), 0);
}

#[test]
fn test_a_waiter_handed_its_slot_no_longer_counts_as_parked() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let running = admitted(table.acquire(&k, &g, policy(1), 0));
    let first = parked(table.acquire(&k, &g, policy(1), 1));
    assert_eq!(first.group_parked(), 1);
    // The slot goes to the parked request; its task has not run yet, and a new arrival parks
    // in the place it left: one parked at a time, never two (N5b).
    drop(running);
    assert_eq!(g.num_parked(), 0);
    let second = parked(table.acquire(&k, &g, policy(1), 2));
    assert_eq!(second.group_parked(), 1);
    assert_eq!(g.num_parked(), 1);
    drop((first, second));
    assert_empty(&table);
}

#[test]
fn test_release_wakes_the_waiter_once() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let p = admitted(table.acquire(&k, &g, policy(1), 0));
    let mut w = parked(table.acquire(&k, &g, policy(1), 1));
    let (count, waker) = counting();
    assert!(poll(&mut w, &waker).is_pending());
    assert!(
        poll(&mut w, &waker).is_pending(),
        "re-polling keeps it parked"
    );
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    drop(p);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert!(matches!(
        poll(&mut w, &waker),
        Poll::Ready(Grant::Permit(_))
    ));
    drop(w);
    assert_empty(&table);
}

#[test]
fn test_new_arrival_never_barges_past_waiters() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let p = admitted(table.acquire(&k, &g, policy(5), 0));
    let mut w = parked(table.acquire(&k, &g, policy(5), 1));
    drop(p);
    // The slot was handed to the waiter, which has not polled yet: the count did not drop.
    assert_eq!(table.in_flight(&k), 1);
    let late = parked(table.acquire(&k, &g, policy(5), 2));
    assert!(
        table.try_acquire(&k, 10).is_err(),
        "try_acquire must not barge"
    );
    assert_eq!(
        refused(table.acquire(&k, &g, policy(0), 3)).reason,
        RefusalReason::NotQueued
    );
    let got = ready_permit(&mut w);
    drop(got);
    drop(w);
    let mut late = late;
    let p = ready_permit(&mut late);
    drop(p);
    drop(late);
    assert_empty(&table);
}

#[test]
fn test_try_acquire_refuses_while_waiters_are_parked_even_under_a_higher_limit() {
    let table = PermitTable::new();
    let g = GroupQueue::new(0);
    let k = group_key("g");
    let w = parked(table.acquire(&k, &g, policy(1), 1));
    assert_eq!(
        table.try_acquire(&k, 5).unwrap_err(),
        Throttled {
            in_flight: 0,
            limit: 5
        }
    );
    drop(w);
    assert_empty(&table);
}

#[test]
fn test_size_zero_behaves_like_try_acquire() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let p = admitted(table.acquire(&k, &g, policy(0), 0));
    let r = refused(table.acquire(&k, &g, policy(0), 1));
    assert_eq!(
        (r.reason, r.in_flight, r.limit, r.queued),
        (RefusalReason::NotQueued, 1, 1, 0)
    );
    drop(p);
    assert_empty(&table);
    let g0 = GroupQueue::new(0);
    refused(table.acquire(&k, &g0, policy(0), 0));
    assert_empty(&table);
}

#[test]
fn test_bucket_queue_full_refuses_and_names_the_counts() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let _p = admitted(table.acquire(&k, &g, policy(2), 0));
    let _w: Vec<Waiter> = (1..=2)
        .map(|t| parked(table.acquire(&k, &g, policy(2), t)))
        .collect();
    let r = refused(table.acquire(&k, &g, policy(2), 3));
    assert_eq!(
        r,
        Refused {
            reason: RefusalReason::BucketQueueFull,
            in_flight: 1,
            limit: 1,
            queued: 2,
            group_queued: 2
        }
    );
}

#[test]
fn test_group_ceiling_binds_across_buckets_before_the_per_bucket_cap() {
    let table = PermitTable::new();
    let g = GroupQueue::new(0);
    let pol = QueuePolicy {
        size_per_bucket: 10,
        group_ceiling: 4,
    };
    let (a, b) = (user("g", "a"), user("g", "b"));
    let mut held = vec![];
    for t in 0..2 {
        held.push(parked(table.acquire(&a, &g, pol, t)));
        held.push(parked(table.acquire(&b, &g, pol, 10 + t)));
    }
    assert_eq!(g.num_parked(), 4);
    let r = refused(table.acquire(&user("g", "c"), &g, pol, 20));
    assert_eq!(r.reason, RefusalReason::GroupQueueFull);
    assert_eq!(r.group_queued, 4);
    assert_eq!(table.num_buckets(), 2, "a refusal must not leave an entry");
    drop(held);
    assert_empty(&table);
    assert_eq!(g.num_parked(), 0);
}

#[test]
fn test_flood_from_one_user_cannot_lock_out_another() {
    // D13: alice fills the ceiling alone; bob is turned away once, after which alice yields
    // every freed place until bob holds his share.
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let pol = QueuePolicy {
        size_per_bucket: 100,
        group_ceiling: 8,
    };
    let (alice, bob) = (user("g", "alice"), user("g", "bob"));
    let mut alice_running = Some(admitted(table.acquire(&alice, &g, pol, 0)));
    let _bob_running = admitted(table.acquire(&bob, &g, pol, 0));
    let mut alice_waiting: std::collections::VecDeque<Waiter> = (1..=8)
        .map(|t| parked(table.acquire(&alice, &g, pol, t)))
        .collect();
    assert_eq!(
        refused(table.acquire(&alice, &g, pol, 9)).reason,
        RefusalReason::GroupQueueFull
    );
    assert!(
        !g.is_contended(),
        "alice alone at the ceiling is no contention"
    );
    assert_eq!(
        refused(table.acquire(&bob, &g, pol, 100)).reason,
        RefusalReason::GroupQueueFull
    );
    assert!(g.is_contended());
    let mut bob_waiting = vec![];
    // Alice's flood goes on: each completion frees one place; alice retries first every time.
    for round in 0..8 {
        drop(alice_running.take());
        let mut head = alice_waiting.pop_front().expect("alice has waiters");
        alice_running = Some(ready_permit(&mut head));
        let r = table.acquire(&alice, &g, pol, 10 + round);
        let alice_share = 8 / 2;
        if alice_waiting.len() as u64 >= alice_share {
            assert_eq!(
                refused(r).reason,
                RefusalReason::OverFairShare { share: 4 },
                "round {round}"
            );
            bob_waiting.push(parked(table.acquire(&bob, &g, pol, 100 + round)));
        } else {
            // At her share alice parks again only when there is room left.
            match r {
                Acquire::Parked(w) => alice_waiting.push_back(w),
                Acquire::Refused(_) => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
    }
    assert_eq!(
        bob_waiting.len(),
        4,
        "bob kept getting queued up to his share"
    );
    assert_eq!(table.num_parked(&bob), 4);
    assert!(table.num_parked(&alice) <= 4);
    assert!(g.num_parked() <= 8);
}

#[test]
fn test_fair_share_never_applies_to_a_bucket_alone() {
    let table = PermitTable::new();
    let g = GroupQueue::new(0);
    let pol = QueuePolicy {
        size_per_bucket: 10,
        group_ceiling: 10,
    };
    let k = user("g", "a");
    let held: Vec<Waiter> = (0..10)
        .map(|t| parked(table.acquire(&k, &g, pol, t)))
        .collect();
    assert_eq!(g.num_parked(), 10);
    drop(held);
    assert_empty(&table);
}

#[test]
fn test_dropping_a_parked_waiter_removes_it_at_once_anywhere_in_the_queue() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let p = admitted(table.acquire(&k, &g, policy(10), 0));
    let mut ws: Vec<Option<Waiter>> = (1..=5)
        .map(|t| Some(parked(table.acquire(&k, &g, policy(10), t))))
        .collect();
    ws[2] = None; // middle
    assert_eq!(table.parked(&k), vec![1, 2, 4, 5]);
    ws[0] = None; // head
    assert_eq!(table.parked(&k), vec![2, 4, 5]);
    ws[4] = None; // tail
    assert_eq!(table.parked(&k), vec![2, 4]);
    assert_eq!(g.num_parked(), 2);
    drop(p);
    let got = ready_permit(ws[1].as_mut().unwrap());
    drop(got);
    let got = ready_permit(ws[3].as_mut().unwrap());
    drop(got);
    drop(ws);
    assert_empty(&table);
}

#[test]
fn test_dropping_the_only_waiter_of_an_idle_bucket_removes_the_entry() {
    let table = PermitTable::new();
    let g = GroupQueue::new(0);
    let w = parked(table.acquire(&user("g", "a"), &g, policy(1), 1));
    assert_eq!(table.num_buckets(), 1);
    drop(w);
    assert_empty(&table);
    assert_eq!(g.num_waiting_buckets(), 0);
}

#[test]
fn test_cancellation_is_o1_at_the_structure_level() {
    // The unlink touches only the node and its two neighbours: with 10,000 parked, removing one
    // from the middle leaves the others' links intact and reuses its node.
    let table = PermitTable::with_shards(1);
    let g = GroupQueue::new(0);
    let k = group_key("g");
    let mut ws: Vec<Option<Waiter>> = (0..10_000)
        .map(|t| Some(parked(table.acquire(&k, &g, policy(10_000), t))))
        .collect();
    let capacity = table.waiter_capacity();
    ws[5_000] = None;
    let new = parked(table.acquire(&k, &g, QueuePolicy::new(10_000), 99_999));
    assert_eq!(
        table.waiter_capacity(),
        capacity,
        "the freed node was reused"
    );
    let tags = table.parked(&k);
    assert_eq!(tags.len(), 10_000);
    assert_eq!(tags[4_999], 4_999);
    assert_eq!(tags[5_000], 5_001);
    assert_eq!(*tags.last().unwrap(), 99_999);
    drop(new);
    drop(ws);
    assert_empty(&table);
}

#[test]
fn test_handed_then_dropped_waiter_passes_the_slot_to_the_next() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let p = admitted(table.acquire(&k, &g, policy(5), 0));
    let mut first = parked(table.acquire(&k, &g, policy(5), 1));
    let mut second = parked(table.acquire(&k, &g, policy(5), 2));
    assert!(poll_noop(&mut first).is_pending());
    let (count, waker) = counting();
    assert!(poll(&mut second, &waker).is_pending());
    drop(p); // handed to `first`
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    drop(first); // handed, never polled: the slot moves on
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "the next waiter was woken"
    );
    assert_eq!(table.in_flight(&k), 1, "counted once");
    let got = ready_permit(&mut second);
    drop(got);
    drop(second);
    assert_empty(&table);
}

#[test]
fn test_handed_then_dropped_last_waiter_releases_the_slot() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let p = admitted(table.acquire(&k, &g, policy(5), 0));
    let w = parked(table.acquire(&k, &g, policy(5), 1));
    drop(p);
    drop(w);
    assert_empty(&table);
    let _again = admitted(table.acquire(&k, &g, policy(5), 2));
}

#[test]
fn test_raised_limit_admits_that_many_waiters_on_drain() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let _p = admitted(table.acquire(&k, &g, policy(10), 0));
    let mut ws: Vec<Waiter> = (1..=5)
        .map(|t| parked(table.acquire(&k, &g, policy(10), t)))
        .collect();
    g.set_node_limit(4);
    assert_eq!(table.drain_group(&g), 3);
    assert_eq!(table.in_flight(&k), 4);
    let polled: Vec<Poll<Grant>> = ws.iter_mut().map(poll_noop).collect();
    let ready: Vec<bool> = polled.iter().map(Poll::is_ready).collect();
    assert_eq!(ready, vec![true, true, true, false, false]);
    assert_eq!(table.drain(&k), 0, "nothing more fits");
}

#[test]
fn test_raised_limit_is_used_by_the_next_release_and_arrival() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let k = group_key("g");
    let p = admitted(table.acquire(&k, &g, policy(10), 0));
    let mut ws: Vec<Waiter> = (1..=3)
        .map(|t| parked(table.acquire(&k, &g, policy(10), t)))
        .collect();
    g.set_node_limit(2);
    // No drain yet: an arrival first gives the room to the oldest waiter, then queues.
    let mut late = parked(table.acquire(&k, &g, policy(10), 4));
    let _p0 = ready_permit(&mut ws[0]);
    drop(p); // re-reads the limit: hands to ws[1]
    let _p1 = ready_permit(&mut ws[1]);
    assert!(poll_noop(&mut ws[2]).is_pending());
    assert!(poll_noop(&mut late).is_pending());
}

#[test]
fn test_lowered_limit_admits_nobody_until_in_flight_falls_below_it() {
    let table = PermitTable::new();
    let g = GroupQueue::new(3);
    let k = group_key("g");
    let mut running: Vec<Permit> = (0..3)
        .map(|t| admitted(table.acquire(&k, &g, policy(10), t)))
        .collect();
    let mut w = parked(table.acquire(&k, &g, policy(10), 9));
    g.set_node_limit(1);
    assert_eq!(table.drain_group(&g), 0);
    running.pop();
    assert!(poll_noop(&mut w).is_pending(), "2 running, limit 1");
    running.pop();
    assert!(poll_noop(&mut w).is_pending(), "1 running, limit 1");
    running.pop();
    let p = ready_permit(&mut w);
    assert_eq!(table.in_flight(&k), 1);
    drop(p);
    drop(w);
    assert_empty(&table);
}

#[test]
fn test_release_group_resolves_every_waiter_unthrottled_and_empties_the_table() {
    let table = PermitTable::new();
    let g = GroupQueue::new(1);
    let other = GroupQueue::new(0);
    let (a, b, c) = (user("g", "a"), user("g", "b"), group_key("other"));
    let pa = admitted(table.acquire(&a, &g, policy(5), 0));
    let mut ws = vec![
        parked(table.acquire(&a, &g, policy(5), 1)),
        parked(table.acquire(&a, &g, policy(5), 2)),
    ];
    g.set_node_limit(0);
    ws.push(parked(table.acquire(&b, &g, policy(5), 3)));
    ws.push(parked(table.acquire(&b, &g, policy(5), 4)));
    let mut kept = parked(table.acquire(&c, &other, policy(5), 5));
    let (count, waker) = counting();
    assert!(poll(&mut ws[0], &waker).is_pending());
    assert_eq!(table.release_group(&g), 4);
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "a polled waiter is woken"
    );
    for w in &mut ws {
        assert!(matches!(poll_noop(w), Poll::Ready(Grant::Unthrottled)));
    }
    assert_eq!(g.num_parked(), 0);
    assert!(matches!(
        table.acquire(&a, &g, policy(5), 6),
        Acquire::Unthrottled
    ));
    assert!(
        poll_noop(&mut kept).is_pending(),
        "another group is untouched"
    );
    assert_eq!(table.num_parked(&c), 1);
    drop(pa);
    drop(ws);
    drop(kept);
    assert_empty(&table);
}

#[test]
fn test_waiter_dropped_after_backlog_release_leaves_nothing() {
    let table = PermitTable::new();
    let g = GroupQueue::new(0);
    let w = parked(table.acquire(&group_key("g"), &g, policy(1), 1));
    table.release_group(&g);
    drop(w);
    assert_empty(&table);
}

#[test]
fn test_drain_all_serves_every_group() {
    let table = PermitTable::new();
    let (g1, g2) = (GroupQueue::new(0), GroupQueue::new(0));
    let (k1, k2) = (group_key("1"), group_key("2"));
    let mut w1 = parked(table.acquire(&k1, &g1, policy(1), 1));
    let mut w2 = parked(table.acquire(&k2, &g2, policy(1), 2));
    g1.set_node_limit(1);
    g2.set_node_limit(1);
    assert_eq!(table.drain_all(), 2);
    let (p1, p2) = (ready_permit(&mut w1), ready_permit(&mut w2));
    drop((p1, p2, w1, w2));
    assert_empty(&table);
}

#[test]
fn test_parked_all_lists_tags_per_bucket_oldest_first() {
    let table = PermitTable::with_shards(2);
    let g = GroupQueue::new(0);
    let (a, b) = (user("g", "a"), user("g", "b"));
    let _ws = [
        parked(table.acquire(&a, &g, policy(3), 1)),
        parked(table.acquire(&b, &g, policy(3), 2)),
        parked(table.acquire(&a, &g, policy(3), 3)),
    ];
    let mut all = table.parked_all();
    all.sort();
    assert_eq!(all, vec![(a.clone(), 1), (a, 3), (b, 2)]);
    assert_eq!(g.num_waiting_buckets(), 2);
}

#[test]
fn test_a_second_handle_for_a_queued_bucket_is_counted() {
    let table = PermitTable::new();
    let (g, stray) = (GroupQueue::new(0), GroupQueue::new(0));
    let k = group_key("g");
    let w1 = parked(table.acquire(&k, &g, policy(3), 1));
    let w2 = parked(table.acquire(&k, &stray, policy(3), 2));
    assert_eq!(table.num_invariant_violations(), 1);
    assert_eq!(g.num_parked(), 2, "counted in the bucket's own handle");
    assert_eq!(stray.num_parked(), 0);
    drop((w1, w2));
    assert_eq!(table.num_buckets(), 0);
    assert_eq!(g.num_parked(), 0);
}

#[test]
#[should_panic(expected = "polled after completion")]
fn test_polling_a_completed_waiter_panics() {
    let table = PermitTable::new();
    let g = GroupQueue::new(0);
    let mut w = parked(table.acquire(&group_key("g"), &g, policy(1), 1));
    table.release_group(&g);
    let _ = poll_noop(&mut w);
    let _ = poll_noop(&mut w);
}

#[test]
fn test_waiter_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Waiter>();
    assert_send_sync::<Acquire>();
    assert_send_sync::<GroupQueue>();
}

#[test]
fn test_threads_parking_and_releasing_keep_the_limit_and_leave_nothing() {
    use std::sync::atomic::AtomicU64;
    const LIMIT: u64 = 2;
    let table = PermitTable::with_shards(2);
    let g = GroupQueue::new(LIMIT);
    let k = group_key("g");
    let running = AtomicU64::new(0);
    let max_seen = AtomicU64::new(0);
    let completed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (table, g, k) = (&table, &g, &k);
            let (running, max_seen, completed) = (&running, &max_seen, &completed);
            s.spawn(move || {
                for i in 0..2_000u64 {
                    let permit = match table.acquire(k, g, policy(8), t * 10_000 + i) {
                        Acquire::Admitted(p) => Some(p),
                        Acquire::Parked(mut w) => {
                            if i % 7 == 0 {
                                drop(w); // cancelled
                                None
                            } else {
                                loop {
                                    match poll(
                                        &mut w,
                                        &Waker::from(std::sync::Arc::new(CountingWaker::default())),
                                    ) {
                                        Poll::Ready(Grant::Permit(p)) => break Some(p),
                                        Poll::Ready(Grant::Unthrottled | Grant::External(_)) => {
                                            unreachable!()
                                        }
                                        Poll::Pending => std::thread::yield_now(),
                                    }
                                }
                            }
                        }
                        Acquire::Refused(_) => None,
                        Acquire::Unthrottled => unreachable!(),
                    };
                    if let Some(p) = permit {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        max_seen.fetch_max(now, Ordering::SeqCst);
                        running.fetch_sub(1, Ordering::SeqCst);
                        completed.fetch_add(1, Ordering::SeqCst);
                        drop(p);
                    }
                }
            });
        }
    });
    assert!(max_seen.load(Ordering::SeqCst) <= LIMIT);
    assert!(completed.load(Ordering::SeqCst) > 0);
    assert_empty(&table);
    assert_eq!(g.num_parked(), 0);
}

#[test]
fn test_external_grant_goes_to_the_oldest_waiter_and_leaves_the_count_alone() {
    let table = PermitTable::new();
    // A shared-only bucket: no node slots at all, so every request parks.
    let g = GroupQueue::new(0);
    let k = group_key("g");
    let mut w1 = parked(table.acquire(&k, &g, policy(10), 1));
    let mut w2 = parked(table.acquire(&k, &g, policy(10), 2));
    assert_eq!(table.grant_external(&k, 77), Ok(1), "the oldest waiter");
    assert!(matches!(
        poll_noop(&mut w1),
        Poll::Ready(Grant::External(77))
    ));
    assert_eq!(table.in_flight(&k), 0, "no node slot was taken");
    assert_eq!(g.num_parked(), 1);
    assert_eq!(table.grant_external(&k, 78), Ok(2));
    assert!(matches!(
        poll_noop(&mut w2),
        Poll::Ready(Grant::External(78))
    ));
    // Nobody left: the token comes straight back, and nothing is left behind.
    assert_eq!(table.grant_external(&k, 79), Err(79));
    drop((w1, w2));
    assert_empty(&table);
    assert!(table.take_orphaned_grants().is_empty());
}

#[test]
fn test_a_cancelled_external_grant_passes_on_then_becomes_an_orphan() {
    let table = PermitTable::new();
    let g = GroupQueue::new(0);
    let k = group_key("g");
    let w1 = parked(table.acquire(&k, &g, policy(10), 1));
    let mut w2 = parked(table.acquire(&k, &g, policy(10), 2));
    assert_eq!(table.grant_external(&k, 5), Ok(1));
    // Cancelled after the grant, before taking it: the grant passes to the next waiter.
    drop(w1);
    assert!(matches!(
        poll_noop(&mut w2),
        Poll::Ready(Grant::External(5))
    ));
    // Granted again and cancelled with nobody left: the grant is an orphan, never lost.
    let w3 = parked(table.acquire(&k, &g, policy(10), 3));
    assert_eq!(table.grant_external(&k, 6), Ok(3));
    drop(w3);
    assert_eq!(table.take_orphaned_grants(), vec![(k.clone(), 6)]);
    assert!(table.take_orphaned_grants().is_empty(), "taken once");
    drop(w2);
    assert_empty(&table);
}

#[test]
fn test_a_wake_list_wakes_each_waker_once_inline_or_spilled_and_on_drop() {
    for n in [0, 1, queue::INLINE_WAKERS, queue::INLINE_WAKERS + 2] {
        let mut wakes = WakeList::default();
        let counters: Vec<_> = (0..n)
            .map(|_| {
                let (c, w) = counting();
                wakes.push(w);
                c
            })
            .collect();
        wakes.wake_all();
        assert!(
            counters.iter().all(|c| c.0.load(Ordering::SeqCst) == 1),
            "{n} wakers"
        );
        // Emptied: a second call, and the drop, wake nobody again.
        wakes.wake_all();
        let (late, w) = counting();
        wakes.push(w);
        drop(wakes);
        assert!(
            counters.iter().all(|c| c.0.load(Ordering::SeqCst) == 1),
            "{n} wakers"
        );
        // A waker pushed after a wake is woken by the drop.
        assert_eq!(late.0.load(Ordering::SeqCst), 1, "{n} wakers");
    }
}
