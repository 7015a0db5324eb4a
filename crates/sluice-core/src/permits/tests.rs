use std::collections::HashSet;

use super::*;
use crate::bags::ThrottleAttribute;

fn key(group: &str, attribute: ThrottleAttribute, value: Option<&str>) -> BucketKey {
    BucketKey {
        group_id: Arc::from(group),
        attribute,
        value: value.map(Arc::from),
    }
}

fn group(id: &str) -> BucketKey {
    key(id, ThrottleAttribute::Group, None)
}

fn user(id: &str, name: &str) -> BucketKey {
    key(id, ThrottleAttribute::Username, Some(name))
}

fn role(id: &str, name: &str) -> BucketKey {
    key(id, ThrottleAttribute::Role, Some(name))
}

#[test]
fn test_limit_admits_exactly_limit_requests() {
    let table = PermitTable::new();
    let k = group("g");
    let held: Vec<Permit> = (0..3).map(|_| table.try_acquire(&k, 3).unwrap()).collect();
    assert_eq!(
        table.try_acquire(&k, 3).unwrap_err(),
        Throttled {
            in_flight: 3,
            limit: 3
        }
    );
    assert_eq!(table.in_flight(&k), 3);
    assert_eq!(held.len(), 3);
}

#[test]
fn test_refusal_leaves_count_unchanged() {
    let table = PermitTable::new();
    let k = group("g");
    let _p = table.try_acquire(&k, 1).unwrap();
    for _ in 0..5 {
        assert!(table.try_acquire(&k, 1).is_err());
    }
    assert_eq!(table.in_flight(&k), 1);
}

#[test]
fn test_permit_released_when_dropped() {
    let table = PermitTable::new();
    let k = group("g");
    let p = table.try_acquire(&k, 1).unwrap();
    assert!(table.try_acquire(&k, 1).is_err());
    drop(p);
    assert_eq!(table.in_flight(&k), 0);
    let _again = table.try_acquire(&k, 1).expect("the freed slot admits");
    assert_eq!(table.in_flight(&k), 1);
}

#[test]
fn test_entry_removed_when_bucket_drains_to_zero() {
    let table = PermitTable::new();
    let k = user("g", "alice");
    let a = table.try_acquire(&k, 2).unwrap();
    let b = table.try_acquire(&k, 2).unwrap();
    assert_eq!(table.num_buckets(), 1);
    drop(a);
    assert_eq!(table.num_buckets(), 1, "one request still runs");
    drop(b);
    assert_eq!(table.num_buckets(), 0);
    assert!(table.buckets().is_empty());
}

#[test]
fn test_refusal_on_idle_bucket_creates_no_entry() {
    let table = PermitTable::new();
    assert!(table.try_acquire(&group("g"), 0).is_err());
    assert_eq!(table.num_buckets(), 0);
}

#[test]
fn test_limit_zero_admits_nothing() {
    let table = PermitTable::new();
    let k = group("g");
    assert_eq!(
        table.try_acquire(&k, 0).unwrap_err(),
        Throttled {
            in_flight: 0,
            limit: 0
        }
    );
    let _p = table.try_acquire(&k, 1).unwrap();
    assert_eq!(
        table.try_acquire(&k, 0).unwrap_err(),
        Throttled {
            in_flight: 1,
            limit: 0
        }
    );
}

#[test]
fn test_raised_limit_applies_at_next_admission() {
    let table = PermitTable::new();
    let k = group("g");
    let _a = table.try_acquire(&k, 1).unwrap();
    assert!(table.try_acquire(&k, 1).is_err());
    let _b = table
        .try_acquire(&k, 2)
        .expect("the raised limit admits one more");
    assert_eq!(table.in_flight(&k), 2);
}

#[test]
fn test_lowered_limit_keeps_running_permits_and_refuses_until_drained_below() {
    let table = PermitTable::new();
    let k = group("g");
    let mut held: Vec<Permit> = (0..3).map(|_| table.try_acquire(&k, 3).unwrap()).collect();
    // node_limit lowered from 3 to 1: nothing running is revoked.
    assert_eq!(
        table.try_acquire(&k, 1).unwrap_err(),
        Throttled {
            in_flight: 3,
            limit: 1
        }
    );
    assert_eq!(table.in_flight(&k), 3);
    held.pop();
    assert_eq!(table.try_acquire(&k, 1).unwrap_err().in_flight, 2);
    held.pop();
    assert_eq!(table.try_acquire(&k, 1).unwrap_err().in_flight, 1);
    held.pop();
    assert_eq!(table.num_buckets(), 0);
    let _p = table
        .try_acquire(&k, 1)
        .expect("drained below the new limit");
    assert!(table.try_acquire(&k, 1).is_err());
}

#[test]
fn test_buckets_are_independent() {
    let table = PermitTable::new();
    let (a, b) = (group("a"), group("b"));
    let _pa = table.try_acquire(&a, 1).unwrap();
    let _pb = table
        .try_acquire(&b, 1)
        .expect("a full bucket does not block another");
    assert!(table.try_acquire(&a, 1).is_err());
    assert_eq!((table.in_flight(&a), table.in_flight(&b)), (1, 1));
    let mut snapshot = table.buckets();
    snapshot.sort();
    assert_eq!(snapshot, vec![(a, 1), (b, 1)]);
}

#[test]
fn test_username_role_and_group_keys_never_collide() {
    let table = PermitTable::with_shards(1); // one map, so only key equality separates them
    let keys = [
        group("g"),
        group("g:username:alice"),
        group("g|username|alice"),
        user("g", "alice"),
        role("g", "alice"),
        user("g", "alice,bob"),
        user("g", "bob"),
        user("g", "alice|bob"),
        role("g", "alice|bob"),
        role("g", "alice,bob"),
        user("g", ""),
        role("g", ""),
        user("g,alice", "bob"),
        user("g", "alice\0"),
        user("g:", "alice"),
        user("g", ":alice"),
    ];
    let distinct: HashSet<&BucketKey> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "the test keys are distinct");
    let held: Vec<Permit> = keys
        .iter()
        .map(|k| table.try_acquire(k, 1).expect("each key is its own bucket"))
        .collect();
    assert_eq!(table.num_buckets(), keys.len());
    for k in &keys {
        assert_eq!(table.in_flight(k), 1, "{k:?}");
    }
    for (p, k) in held.iter().zip(&keys) {
        assert_eq!(p.key(), k);
    }
}

#[test]
fn test_permit_dropped_on_another_thread_releases() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Permit>();
    assert_send_sync::<PermitTable>();

    let table = PermitTable::new();
    let k = group("g");
    let p = table.try_acquire(&k, 1).unwrap();
    std::thread::spawn(move || drop(p)).join().unwrap();
    assert_eq!(table.in_flight(&k), 0);
    assert_eq!(table.num_buckets(), 0);
}

#[test]
fn test_permit_outliving_its_table_releases_without_panic() {
    let table = PermitTable::new();
    let p = table.try_acquire(&group("g"), 1).unwrap();
    drop(table);
    drop(p);
}

#[test]
fn test_release_without_entry_is_counted_and_never_resurrects_it() {
    let table = PermitTable::with_shards(1);
    let hashed = table.hashed(&group("g"));
    table.shard(hashed.hash).release(&hashed);
    assert_eq!(
        table.num_buckets(),
        0,
        "a stray release must not create an entry"
    );
    assert_eq!(table.num_invariant_violations(), 1);
}

#[test]
fn test_release_of_empty_bucket_does_not_underflow() {
    let mut bucket = BucketState::default();
    assert!(!bucket.release());
    assert_eq!(bucket.in_flight, 0);
    bucket.try_admit(1).unwrap();
    assert!(bucket.release());
    assert!(bucket.is_idle());
}

#[test]
fn test_normal_use_records_no_invariant_violation() {
    let table = PermitTable::new();
    let permits: Vec<Permit> = (0..100)
        .map(|i| table.try_acquire(&user("g", &i.to_string()), 1).unwrap())
        .collect();
    drop(permits);
    assert_eq!(table.num_buckets(), 0);
    assert_eq!(table.num_invariant_violations(), 0);
}

#[test]
fn test_shard_count_is_a_power_of_two_within_bounds() {
    assert_eq!(PermitTable::with_shards(0).num_shards(), 1);
    assert_eq!(PermitTable::with_shards(5).num_shards(), 8);
    assert_eq!(
        PermitTable::with_shards(usize::MAX).num_shards(),
        MAX_SHARDS
    );
    assert!(PermitTable::new().num_shards().is_power_of_two());
}

#[test]
fn test_concurrent_admissions_never_exceed_the_limit() {
    use std::sync::atomic::{AtomicU64, Ordering};

    const LIMIT: u64 = 3;
    let table = PermitTable::with_shards(4);
    let k = group("g");
    let running = AtomicU64::new(0);
    let max_seen = AtomicU64::new(0);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20_000 {
                    match table.try_acquire(&k, LIMIT) {
                        Ok(p) => {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            max_seen.fetch_max(now, Ordering::SeqCst);
                            admitted.fetch_add(1, Ordering::Relaxed);
                            running.fetch_sub(1, Ordering::SeqCst);
                            drop(p);
                        }
                        Err(t) => {
                            // A refusal only ever sees a full bucket, never a transient over-count.
                            assert_eq!(t.in_flight, LIMIT);
                        }
                    }
                }
            });
        }
    });
    assert!(max_seen.load(Ordering::SeqCst) <= LIMIT);
    assert!(admitted.load(Ordering::Relaxed) > 0);
    assert_eq!(table.num_buckets(), 0);
    assert_eq!(table.num_invariant_violations(), 0);
}
