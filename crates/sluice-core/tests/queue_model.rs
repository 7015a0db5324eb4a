//! The permit table's queue against a reference model: a `VecDeque` of waiter ids per bucket,
//! an in-flight counter per bucket and the group's counters.
//!
//! A random sequence of acquires (three buckets of one group, varying `size_per_bucket`, a
//! small group ceiling so it and the fair share bind), polls, drops of waiters (cancellation,
//! including waiters already handed a slot), drops of permits, live limit changes, drains and
//! backlog releases runs against both. After every step the outcome, each bucket's in-flight
//! count and FIFO of tags, the group's parked and waiting-bucket counts, the number of live
//! entries and of waiter nodes must agree.
#![cfg(not(feature = "loom"))]

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use proptest::prelude::*;
use sluice_core::bags::ThrottleAttribute;
use sluice_core::bucket::BucketKey;
use sluice_core::permits::{
    Acquire, Grant, GroupQueue, Permit, PermitTable, QueuePolicy, RefusalReason, Waiter,
};

/// Parked requests per group in the model: small, so the ceiling and the fair share bind.
const CEILING: u64 = 5;

/// Buckets of the group.
const NUM_KEYS: usize = 3;

fn keys() -> Vec<BucketKey> {
    ["a", "b", "a,b"]
        .iter()
        .map(|v| BucketKey {
            group_id: Arc::from("g"),
            attribute: ThrottleAttribute::Username,
            value: Some(Arc::from(*v)),
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    /// Acquire in bucket `key` with this `size_per_bucket`.
    Acquire { key: usize, size: u64 },
    /// Poll live waiter `index % waiters`.
    Poll { index: usize },
    /// Drop live waiter `index % waiters` (cancellation).
    DropWaiter { index: usize },
    /// Drop held permit `index % held`.
    DropPermit { index: usize },
    /// Set the live limit, then drain the group or not.
    SetLimit { limit: u64, drain: bool },
    /// The server's backstop sweep.
    DrainAll,
    /// Release the group's backlog, then continue with a new handle.
    ReleaseGroup,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..NUM_KEYS, 0..=CEILING + 1).prop_map(|(key, size)| Op::Acquire { key, size }),
        3 => any::<usize>().prop_map(|index| Op::Poll { index }),
        2 => any::<usize>().prop_map(|index| Op::DropWaiter { index }),
        3 => any::<usize>().prop_map(|index| Op::DropPermit { index }),
        1 => (0..4u64, any::<bool>()).prop_map(|(limit, drain)| Op::SetLimit { limit, drain }),
        1 => Just(Op::DrainAll),
        1 => Just(Op::ReleaseGroup),
    ]
}

/// Where a model waiter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Parked,
    Granted,
    Released,
}

/// What the model expects from an acquire.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Admitted,
    Parked,
    Refused(RefusalReason),
}

#[derive(Default)]
struct Model {
    limit: u64,
    in_flight: [u64; NUM_KEYS],
    queue: [VecDeque<u64>; NUM_KEYS],
    /// Live waiters (not completed, not dropped) by tag.
    waiters: HashMap<u64, (usize, State)>,
    parked: u64,
    contended: bool,
}

impl Model {
    fn waiting_buckets(&self) -> u64 {
        self.queue.iter().filter(|q| !q.is_empty()).count() as u64
    }

    fn leave(&mut self, n: u64) {
        if n > 0 {
            self.parked -= n;
            if self.parked == 0 {
                self.contended = false;
            }
        }
    }

    fn settle(&mut self, k: usize) {
        let mut n = 0;
        while self.in_flight[k] < self.limit {
            let Some(tag) = self.queue[k].pop_front() else {
                break;
            };
            self.in_flight[k] += 1;
            self.waiters.get_mut(&tag).unwrap().1 = State::Granted;
            n += 1;
        }
        self.leave(n);
    }

    fn acquire(&mut self, k: usize, size: u64, tag: u64) -> Expect {
        self.settle(k);
        let queued = self.queue[k].len() as u64;
        if queued == 0 && self.in_flight[k] < self.limit {
            self.in_flight[k] += 1;
            return Expect::Admitted;
        }
        if size == 0 {
            return Expect::Refused(RefusalReason::NotQueued);
        }
        if queued >= size {
            return Expect::Refused(RefusalReason::BucketQueueFull);
        }
        let extra = u64::from(queued == 0 || self.contended);
        let share = CEILING / (self.waiting_buckets() + extra).max(1);
        if self.parked >= CEILING {
            if queued < share {
                self.contended = true;
            }
            return Expect::Refused(RefusalReason::GroupQueueFull);
        }
        if queued >= share {
            return Expect::Refused(RefusalReason::OverFairShare { share });
        }
        self.queue[k].push_back(tag);
        self.parked += 1;
        if queued == 0 {
            self.contended = false;
        }
        self.waiters.insert(tag, (k, State::Parked));
        Expect::Parked
    }

    fn release(&mut self, k: usize) {
        self.in_flight[k] -= 1;
        self.settle(k);
    }

    fn drop_waiter(&mut self, tag: u64) {
        let (k, state) = self.waiters.remove(&tag).unwrap();
        match state {
            State::Parked => {
                self.queue[k].retain(|&t| t != tag);
                self.leave(1);
                self.settle(k);
            }
            State::Granted => self.release(k),
            State::Released => {}
        }
    }

    fn release_group(&mut self) -> u64 {
        let mut n = 0;
        for q in &mut self.queue {
            for tag in q.drain(..) {
                self.waiters.get_mut(&tag).unwrap().1 = State::Released;
                n += 1;
            }
        }
        self.parked = 0;
        self.contended = false;
        n
    }
}

fn poll(w: &mut Waiter) -> Poll<Grant> {
    Pin::new(w).poll(&mut Context::from_waker(Waker::noop()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn test_queue_matches_reference_model(
        ops in proptest::collection::vec(op(), 1..120),
        shards in 1usize..4,
        limit in 0..3u64,
    ) {
        let keys = keys();
        let table = PermitTable::with_shards(shards);
        let mut group = GroupQueue::new(limit);
        let mut model = Model { limit, ..Model::default() };
        let mut waiters: Vec<Waiter> = Vec::new();
        let mut held: Vec<(usize, Permit)> = Vec::new();
        let mut next_tag = 0u64;
        for op in ops {
            match op {
                Op::Acquire { key, size } => {
                    let tag = next_tag;
                    next_tag += 1;
                    let policy = QueuePolicy { size_per_bucket: size, group_ceiling: CEILING };
                    let got = table.acquire(&keys[key], &group, policy, tag);
                    let want = model.acquire(key, size, tag);
                    match (got, want) {
                        (Acquire::Admitted(p), Expect::Admitted) => held.push((key, p)),
                        (Acquire::Parked(w), Expect::Parked) => {
                            prop_assert_eq!(w.tag(), tag);
                            // N5b: the count its place was taken at, handed waiters left out.
                            prop_assert_eq!(w.group_parked(), model.parked);
                            waiters.push(w);
                        }
                        (Acquire::Refused(r), Expect::Refused(reason)) => {
                            prop_assert_eq!(r.reason, reason);
                            prop_assert_eq!(r.in_flight, model.in_flight[key]);
                            prop_assert_eq!(r.queued, model.queue[key].len() as u64);
                            prop_assert_eq!(r.limit, model.limit);
                        }
                        (got, want) => prop_assert!(false, "table {:?}, model {:?}", got, want),
                    }
                }
                Op::Poll { index } => {
                    if !waiters.is_empty() {
                        let i = index % waiters.len();
                        let tag = waiters[i].tag();
                        let (key, state) = model.waiters[&tag];
                        match (poll(&mut waiters[i]), state) {
                            (Poll::Pending, State::Parked) => {}
                            (Poll::Ready(Grant::Permit(p)), State::Granted) => {
                                prop_assert_eq!(p.key(), &keys[key]);
                                held.push((key, p));
                                drop(waiters.swap_remove(i));
                                model.waiters.remove(&tag);
                            }
                            (Poll::Ready(Grant::Unthrottled), State::Released) => {
                                drop(waiters.swap_remove(i));
                                model.waiters.remove(&tag);
                            }
                            (got, want) => prop_assert!(false, "waiter {} polled {:?}, model {:?}", tag, got, want),
                        }
                    }
                }
                Op::DropWaiter { index } => {
                    if !waiters.is_empty() {
                        let w = waiters.swap_remove(index % waiters.len());
                        let tag = w.tag();
                        drop(w);
                        model.drop_waiter(tag);
                    }
                }
                Op::DropPermit { index } => {
                    if !held.is_empty() {
                        let (key, p) = held.swap_remove(index % held.len());
                        drop(p);
                        model.release(key);
                    }
                }
                Op::SetLimit { limit, drain } => {
                    group.set_node_limit(limit);
                    model.limit = limit;
                    if drain {
                        let before = model.parked;
                        for k in 0..NUM_KEYS {
                            model.settle(k);
                        }
                        prop_assert_eq!(table.drain_group(&group), before - model.parked);
                    }
                }
                Op::DrainAll => {
                    let before = model.parked;
                    for k in 0..NUM_KEYS {
                        model.settle(k);
                    }
                    prop_assert_eq!(table.drain_all(), before - model.parked);
                }
                Op::ReleaseGroup => {
                    prop_assert_eq!(table.release_group(&group), model.release_group());
                    let late = table.acquire(&keys[0], &group, QueuePolicy::new(3), u64::MAX);
                    prop_assert!(matches!(late, Acquire::Unthrottled));
                    group = GroupQueue::new(model.limit);
                }
            }
            for (k, key) in keys.iter().enumerate() {
                prop_assert_eq!(table.in_flight(key), model.in_flight[k], "in flight of {}", k);
                let want: Vec<u64> = model.queue[k].iter().copied().collect();
                prop_assert_eq!(table.parked(key), want, "queue of {}", k);
            }
            prop_assert_eq!(group.num_parked(), model.parked);
            prop_assert_eq!(group.num_waiting_buckets(), model.waiting_buckets());
            prop_assert_eq!(group.is_contended(), model.contended);
            prop_assert!(model.parked <= CEILING);
            let live = (0..NUM_KEYS)
                .filter(|&k| model.in_flight[k] > 0 || !model.queue[k].is_empty())
                .count();
            prop_assert_eq!(table.num_buckets(), live, "N3: entries");
            prop_assert_eq!(table.num_waiter_nodes(), model.waiters.len());
        }
        drop(held);
        drop(waiters);
        prop_assert_eq!(table.num_buckets(), 0);
        prop_assert_eq!(table.num_waiter_nodes(), 0);
        prop_assert_eq!(group.num_parked(), 0);
        prop_assert_eq!(table.num_invariant_violations(), 0);
    }
}
