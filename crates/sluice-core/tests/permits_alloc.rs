//! Admission does not allocate in steady state (STYLE.md, hot paths): building the bucket key
//! with `bucket_for` from a cached group id and principal, admitting, and releasing, counted by
//! a global allocator that tallies this thread's allocations.
#![cfg(not(feature = "loom"))]

use std::sync::Arc;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use sluice_core::bags::{ThrottleAttribute, ThrottleConfig};
use sluice_core::bucket::{Principal, bucket_for};
use sluice_core::permits::{Acquire, Grant, GroupQueue, PermitTable, QueuePolicy};

#[path = "support/thread_allocations.rs"]
mod thread_allocations;

use thread_allocations::{CountingAllocator, allocations_during};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn throttling(attribute: ThrottleAttribute) -> ThrottleConfig {
    ThrottleConfig {
        attribute: Some(attribute),
        node_limit: Some(4),
        shared_limit: None,
    }
}

/// Runs `n` admissions of `principal` into `group_id` under `config`, each released at once.
fn admit_and_release(
    table: &PermitTable,
    group_id: &Arc<str>,
    config: &ThrottleConfig,
    principal: &Principal,
    n: usize,
) {
    let limit = u64::from(config.node_limit.unwrap_or(0));
    for _ in 0..n {
        let key = bucket_for(group_id, config, Some(principal)).expect("throttled group");
        let permit = table.try_acquire(&key, limit).expect("admitted");
        drop(permit);
    }
}

#[test]
fn test_group_admission_does_not_allocate_in_steady_state() {
    let table = PermitTable::new();
    let group_id: Arc<str> = Arc::from("analytics-group-id");
    let principal = Principal {
        username: Arc::from("alice"),
        roles: vec![Arc::from("reader")],
    };
    let config = throttling(ThrottleAttribute::Group);
    // Warm-up: the shard's map allocates its table on the first insert and keeps it.
    admit_and_release(&table, &group_id, &config, &principal, 1);
    let n = allocations_during(|| admit_and_release(&table, &group_id, &config, &principal, 1000));
    assert_eq!(n, 0, "allocations in 1000 group admissions");
}

#[test]
fn test_username_and_role_admission_with_cached_principal_does_not_allocate() {
    let table = PermitTable::new();
    let group_id: Arc<str> = Arc::from("g");
    let principals: Vec<Principal> = (0..50)
        .map(|i| Principal {
            username: Arc::from(format!("user-{i}")),
            roles: vec![Arc::from(format!("role-{i}")), Arc::from("zz")],
        })
        .collect();
    for attribute in [ThrottleAttribute::Username, ThrottleAttribute::Role] {
        let config = throttling(attribute);
        for p in &principals {
            admit_and_release(&table, &group_id, &config, p, 1);
        }
        let n = allocations_during(|| {
            for p in &principals {
                admit_and_release(&table, &group_id, &config, p, 20);
            }
        });
        assert_eq!(n, 0, "allocations in 1000 {attribute:?} admissions");
    }
}

#[test]
fn test_queued_acquire_admitting_at_once_does_not_allocate() {
    // The fast path of `acquire` (a group that queues, a bucket with room and no waiter) costs
    // what `try_acquire` costs.
    let table = PermitTable::new();
    let group = GroupQueue::new(4);
    let group_id: Arc<str> = Arc::from("g");
    let config = throttling(ThrottleAttribute::Group);
    let key = bucket_for(&group_id, &config, None).expect("throttled group");
    let once = || match table.acquire(&key, &group, QueuePolicy::new(100), 7) {
        Acquire::Admitted(p) => drop(p),
        other => panic!("expected admitted, got {other:?}"),
    };
    once();
    let n = allocations_during(|| (0..1000).for_each(|_| once()));
    assert_eq!(n, 0, "allocations in 1000 queued-group admissions");
}

#[test]
fn test_park_and_hand_off_do_not_allocate_in_steady_state() {
    // Parking reuses a freed slab node; the hand-off wakes through the inline wake list.
    let table = PermitTable::new();
    let group = GroupQueue::new(1);
    let key = bucket_for(&Arc::from("g"), &throttling(ThrottleAttribute::Group), None)
        .expect("throttled group");
    let mut cx = Context::from_waker(Waker::noop());
    let mut once = || {
        let Acquire::Admitted(running) = table.acquire(&key, &group, QueuePolicy::new(10), 0)
        else {
            panic!("expected admitted");
        };
        let Acquire::Parked(mut waiter) = table.acquire(&key, &group, QueuePolicy::new(10), 1)
        else {
            panic!("expected parked");
        };
        assert!(Pin::new(&mut waiter).poll(&mut cx).is_pending());
        drop(running);
        let Poll::Ready(Grant::Permit(p)) = Pin::new(&mut waiter).poll(&mut cx) else {
            panic!("handed over");
        };
        drop(p);
    };
    once();
    let n = allocations_during(|| (0..1000).for_each(|_| once()));
    assert_eq!(n, 0, "allocations in 1000 park + hand-off cycles");
}

#[test]
fn test_allocation_counter_sees_allocations() {
    // The guard above must be able to fail: a fresh table's first admission allocates its map.
    let table = PermitTable::with_shards(1);
    let group_id: Arc<str> = Arc::from("g");
    let n = allocations_during(|| {
        admit_and_release(
            &table,
            &group_id,
            &throttling(ThrottleAttribute::Group),
            &Principal::default(),
            1,
        )
    });
    assert!(n > 0);
}
