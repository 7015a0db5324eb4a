//! Unit tests of the shared pool, one behaviour each; the model test in `tests/pool_model.rs`
//! checks P1–P7 over random sequences.

use super::*;

const TTL: Duration = Duration::from_secs(300);
const T0: Duration = Duration::ZERO;

fn caps(max_buckets: usize, max_leases: usize) -> PoolLimits {
    PoolLimits {
        max_buckets,
        max_leases,
    }
}

fn pool() -> SharedPool {
    SharedPool::new(caps(100, 100))
}

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

fn granted(outcome: AcquireOutcome) -> LeaseId {
    match outcome {
        AcquireOutcome::Granted { lease, .. } => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Counts that must not move when a call changes nothing.
fn snapshot(pool: &SharedPool) -> (usize, usize, usize) {
    (pool.num_buckets(), pool.num_leases(), pool.num_waiters())
}

#[test]
fn test_grants_up_to_the_limit_then_denies() {
    let (mut pool, b, a) = (pool(), id("b"), id("a"));
    let first = pool.acquire(&b, 2, &a, false, TTL, T0);
    assert_eq!(
        first,
        AcquireOutcome::Granted {
            lease: LeaseId(1),
            expires: TTL
        }
    );
    granted(pool.acquire(&b, 2, &a, false, TTL, T0));
    assert_eq!(
        pool.acquire(&b, 2, &a, false, TTL, T0),
        AcquireOutcome::Denied {
            in_use: 2,
            limit: 2,
            waiter_registered: false
        }
    );
    assert_eq!(pool.in_use("b"), 2);
    assert_eq!(pool.num_leases(), 2);
}

#[test]
fn test_lowered_limit_revokes_nothing_and_grants_nobody_until_below_it() {
    let (mut pool, b, a) = (pool(), id("b"), id("a"));
    let leases: Vec<LeaseId> = (0..3)
        .map(|_| granted(pool.acquire(&b, 3, &a, false, TTL, T0)))
        .collect();
    // Limit lowered to 1 with 3 out: nothing revoked, nobody granted.
    let denied = pool.acquire(&b, 1, &a, true, TTL, T0);
    assert_eq!(
        denied,
        AcquireOutcome::Denied {
            in_use: 3,
            limit: 1,
            waiter_registered: true
        }
    );
    assert_eq!(pool.in_use("b"), 3);
    // Two releases bring the count to 1 = the new limit: no offer yet.
    assert_eq!(pool.release(&a, leases[0], T0), None);
    assert_eq!(pool.release(&a, leases[1], T0), None);
    assert_eq!(pool.in_use("b"), 1);
    // The third brings it below: the waiter gets the slot.
    let offer = pool
        .release(&a, leases[2], T0)
        .expect("below the limit now");
    assert_eq!(&*offer.to, "a");
    assert_eq!(pool.in_use("b"), 1);
}

#[test]
fn test_latest_acquire_sets_the_limit_of_offers() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    let first = granted(pool.acquire(&b, 2, &x, false, TTL, T0));
    granted(pool.acquire(&b, 2, &x, false, TTL, T0));
    // y is denied against a limit of 1 and waits; the bucket's limit is now 1.
    pool.acquire(&b, 1, &y, true, TTL, T0);
    assert_eq!(pool.limit("b"), Some(1));
    // A release brings the count to 1: not below the latest limit, so y is not offered.
    assert_eq!(pool.release(&x, first, T0), None);
    assert_eq!(pool.waiters("b").count(), 1);
}

#[test]
fn test_release_by_a_non_holder_or_of_an_unknown_lease_is_counted_and_changes_nothing() {
    let (mut pool, b, a, other) = (pool(), id("b"), id("a"), id("other"));
    let lease = granted(pool.acquire(&b, 1, &a, false, TTL, T0));
    let before = snapshot(&pool);
    assert_eq!(pool.release(&other, lease, T0), None);
    assert_eq!(pool.release(&a, LeaseId(999), T0), None);
    assert_eq!(pool.num_violations(), 2);
    assert_eq!(snapshot(&pool), before);
    assert_eq!(pool.lease(lease).map(|l| &**l.holder), Some("a"));
    // The holder's release works, once; a second is a violation.
    assert_eq!(pool.release(&a, lease, T0), None);
    assert_eq!(pool.num_leases(), 0);
    assert_eq!(pool.release(&a, lease, T0), None);
    assert_eq!(pool.num_violations(), 3);
}

#[test]
fn test_a_stale_or_duplicate_offer_result_is_counted_and_changes_nothing() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    let lease = granted(pool.acquire(&b, 1, &x, false, TTL, T0));
    pool.acquire(&b, 1, &y, true, TTL, T0);
    let offer = pool.release(&x, lease, T0).expect("offered to y");
    assert_eq!(pool.offer_result(&offer, true, false, TTL, T0), None);
    let before = snapshot(&pool);
    // The same answer again (a duplicated message), and one naming the wrong waiter.
    assert_eq!(pool.offer_result(&offer, false, false, TTL, T0), None);
    let forged = Offer {
        to: id("x"),
        ..offer.clone()
    };
    assert_eq!(pool.offer_result(&forged, false, false, TTL, T0), None);
    assert_eq!(pool.num_violations(), 2);
    assert_eq!(snapshot(&pool), before);
    assert!(!pool.lease(offer.lease).unwrap().offered);
}

#[test]
fn test_a_refusal_without_queue_inserts_nothing() {
    let (mut pool, b, a) = (pool(), id("b"), id("a"));
    assert_eq!(
        pool.acquire(&b, 0, &a, false, TTL, T0),
        AcquireOutcome::Denied {
            in_use: 0,
            limit: 0,
            waiter_registered: false
        }
    );
    assert_eq!(snapshot(&pool), (0, 0, 0));
}

#[test]
fn test_the_entry_goes_with_the_last_lease() {
    let (mut pool, b, a) = (pool(), id("b"), id("a"));
    let one = granted(pool.acquire(&b, 2, &a, false, TTL, T0));
    let two = granted(pool.acquire(&b, 2, &a, false, TTL, T0));
    pool.release(&a, one, T0);
    assert_eq!(pool.num_buckets(), 1);
    pool.release(&a, two, T0);
    assert_eq!(snapshot(&pool), (0, 0, 0));
    assert_eq!(pool.limit("b"), None);
}

#[test]
fn test_overloaded_changes_nothing() {
    let mut pool = SharedPool::new(caps(2, 3));
    let a = id("a");
    granted(pool.acquire(&id("b1"), 5, &a, false, TTL, T0));
    granted(pool.acquire(&id("b2"), 5, &a, false, TTL, T0));
    // A third bucket would exceed max_buckets, even to wait in (limit 0).
    let before = snapshot(&pool);
    assert_eq!(
        pool.acquire(&id("b3"), 5, &a, false, TTL, T0),
        AcquireOutcome::Overloaded
    );
    assert_eq!(
        pool.acquire(&id("b3"), 0, &a, true, TTL, T0),
        AcquireOutcome::Overloaded
    );
    assert_eq!(snapshot(&pool), before);
    // A third lease in an existing bucket fits; a fourth would exceed max_leases.
    granted(pool.acquire(&id("b1"), 5, &a, false, TTL, T0));
    let before = snapshot(&pool);
    assert_eq!(
        pool.acquire(&id("b2"), 7, &a, true, TTL, T0),
        AcquireOutcome::Overloaded
    );
    assert_eq!(snapshot(&pool), before);
    // Nothing changed includes the limit.
    assert_eq!(pool.limit("b2"), Some(5));
}

#[test]
fn test_denied_acquire_with_queue_registers_the_waiter_in_the_same_call() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    let lease = granted(pool.acquire(&b, 1, &x, false, TTL, T0));
    let denied = pool.acquire(&b, 1, &y, true, TTL, T0);
    assert_eq!(
        denied,
        AcquireOutcome::Denied {
            in_use: 1,
            limit: 1,
            waiter_registered: true
        }
    );
    // A second denial does not register y twice.
    pool.acquire(&b, 1, &y, true, TTL, T0);
    assert_eq!(pool.num_waiters(), 1);
    // The very next release, whatever the timing, finds y registered.
    let offer = pool.release(&x, lease, T0).unwrap();
    assert_eq!((&*offer.to, &*offer.bucket, offer.expires), ("y", "b", TTL));
    assert!(pool.lease(offer.lease).unwrap().offered);
    assert_eq!(pool.num_waiters(), 0);
}

#[test]
fn test_freed_slots_are_offered_round_robin_across_holders() {
    let (mut pool, b) = (pool(), id("b"));
    let (x, y, z) = (id("x"), id("y"), id("z"));
    let lease = granted(pool.acquire(&b, 1, &x, false, TTL, T0));
    pool.acquire(&b, 1, &y, true, TTL, T0);
    pool.acquire(&b, 1, &z, true, TTL, T0);
    // x releases: y (registered first) is offered; y runs and still has more parked.
    let to_y = pool.release(&x, lease, T0).unwrap();
    assert_eq!(&*to_y.to, "y");
    assert_eq!(pool.offer_result(&to_y, true, true, TTL, T0), None);
    let order: Vec<&str> = pool.waiters("b").map(|w| &**w).collect();
    assert_eq!(order, ["z", "y"]);
    // y's release goes to z, not back to y.
    let to_z = pool.release(&y, to_y.lease, T0).unwrap();
    assert_eq!(&*to_z.to, "z");
    pool.offer_result(&to_z, true, false, TTL, T0);
    let to_y_again = pool.release(&z, to_z.lease, T0).unwrap();
    assert_eq!(&*to_y_again.to, "y");
}

#[test]
fn test_an_unused_offer_goes_to_the_next_waiter() {
    let (mut pool, b) = (pool(), id("b"));
    let (x, y, z) = (id("x"), id("y"), id("z"));
    let lease = granted(pool.acquire(&b, 1, &x, false, TTL, T0));
    pool.acquire(&b, 1, &y, true, TTL, T0);
    pool.acquire(&b, 1, &z, true, TTL, T0);
    let to_y = pool.release(&x, lease, T0).unwrap();
    // y had nothing parked any more (its request was cancelled): z gets it.
    let to_z = pool.offer_result(&to_y, false, false, TTL, T0).unwrap();
    assert_eq!(&*to_z.to, "z");
    assert_ne!(to_z.lease, to_y.lease);
    assert!(pool.lease(to_y.lease).is_none());
    assert_eq!(pool.in_use("b"), 1);
    // z unused too, nobody left: the slot is free and the entry gone.
    assert_eq!(pool.offer_result(&to_z, false, false, TTL, T0), None);
    assert_eq!(snapshot(&pool), (0, 0, 0));
}

#[test]
fn test_capacity_freed_while_the_holder_was_unregistered_is_offered_when_it_rejoins() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    let l1 = granted(pool.acquire(&b, 2, &x, false, TTL, T0));
    let l2 = granted(pool.acquire(&b, 2, &x, false, TTL, T0));
    pool.acquire(&b, 2, &y, true, TTL, T0);
    let to_y = pool.release(&x, l1, T0).unwrap();
    // While the offer is in flight y is not registered: x's second release frees a slot
    // that nobody waits for.
    assert_eq!(pool.release(&x, l2, T0), None);
    assert_eq!(pool.in_use("b"), 1);
    // y used the offer and has more parked: it rejoins, and the free slot goes to it at once.
    let again = pool.offer_result(&to_y, true, true, TTL, T0).unwrap();
    assert_eq!(&*again.to, "y");
    assert_eq!(pool.in_use("b"), 2);
}

#[test]
fn test_a_raised_limit_is_offered_to_waiters_by_the_next_sweep() {
    let (mut pool, b) = (pool(), id("b"));
    let (x, y, z) = (id("x"), id("y"), id("z"));
    granted(pool.acquire(&b, 1, &x, false, TTL, T0));
    pool.acquire(&b, 1, &y, true, TTL, T0);
    pool.acquire(&b, 1, &z, true, TTL, T0);
    // The limit goes to 4: x's new acquire is granted (2 out), leaving room for two more.
    granted(pool.acquire(&b, 4, &x, false, TTL, T0));
    assert_eq!(pool.num_waiters(), 2);
    let offers = pool.sweep(T0);
    let to: Vec<&str> = offers.iter().map(|o| &*o.to).collect();
    assert_eq!(to, ["y", "z"]);
    assert_eq!(pool.in_use("b"), 4);
    assert!(pool.sweep(T0).is_empty());
}

#[test]
fn test_sweep_reclaims_exactly_the_expired_leases_and_offers_their_slots() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    let short = granted(pool.acquire(&b, 2, &x, false, Duration::from_secs(10), T0));
    let long = granted(pool.acquire(&b, 2, &x, false, Duration::from_secs(20), T0));
    pool.acquire(&b, 2, &y, true, TTL, T0);
    assert!(pool.sweep(Duration::from_secs(9)).is_empty());
    // At exactly its expiry the short lease is reclaimed and its slot offered to y.
    let offers = pool.sweep(Duration::from_secs(10));
    assert_eq!(offers.len(), 1);
    assert_eq!(&*offers[0].to, "y");
    assert!(pool.lease(short).is_none());
    assert!(pool.lease(long).is_some());
    assert_eq!(pool.in_use("b"), 2);
    assert_eq!(pool.num_expired(), 1);
    // The holder's late release of the reclaimed lease is counted, with no effect.
    assert_eq!(pool.release(&x, short, Duration::from_secs(11)), None);
    assert_eq!(pool.num_violations(), 1);
    assert_eq!(pool.in_use("b"), 2);
    // An unanswered offer expires too (offer TTL = the bucket's TTL here).
    let offers = pool.sweep(Duration::from_secs(10) + TTL);
    assert!(offers.is_empty());
    assert_eq!(snapshot(&pool), (0, 0, 0));
    assert_eq!(pool.num_expired(), 3);
}

#[test]
fn test_offer_ttl_overrides_the_bucket_ttl() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    pool.set_offer_ttl(Duration::from_secs(1));
    let lease = granted(pool.acquire(&b, 1, &x, false, TTL, T0));
    pool.acquire(&b, 1, &y, true, TTL, T0);
    let offer = pool.release(&x, lease, T0).unwrap();
    assert_eq!(offer.expires, Duration::from_secs(1));
    // Unanswered (a lost push): reclaimed after a second.
    pool.sweep(Duration::from_secs(1));
    assert_eq!(snapshot(&pool), (0, 0, 0));
    // The late answer changes nothing.
    assert_eq!(
        pool.offer_result(&offer, true, false, TTL, Duration::from_secs(2)),
        None
    );
    assert_eq!(pool.num_violations(), 1);
}

#[test]
fn test_renew_extends_live_leases_and_reports_the_rest_lost() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    let ttl = Duration::from_secs(10);
    let mine = granted(pool.acquire(&b, 3, &x, false, ttl, T0));
    let dying = granted(pool.acquire(&b, 3, &x, false, Duration::from_secs(5), T0));
    let theirs = granted(pool.acquire(&b, 3, &y, false, ttl, T0));
    let lost = pool.renew(
        &x,
        &[mine, dying, theirs, LeaseId(77)],
        ttl,
        Duration::from_secs(5),
    );
    // `dying` expired at 5 s: not revived even though the sweep has not run yet.
    assert_eq!(lost, [dying, theirs, LeaseId(77)]);
    assert_eq!(pool.lease(mine).unwrap().expires, Duration::from_secs(15));
    assert_eq!(pool.lease(theirs).unwrap().expires, ttl);
    // The sweep at 10 s reclaims `dying` (5 s) and `theirs` (10 s) but not the renewed one.
    pool.sweep(Duration::from_secs(10));
    assert!(pool.lease(mine).is_some());
    assert_eq!(pool.num_leases(), 1);
}

#[test]
fn test_purge_removes_leases_and_waiters_and_offers_the_slots() {
    let mut pool = pool();
    let (b1, b2) = (id("b1"), id("b2"));
    let (gone, y, z) = (id("gone"), id("y"), id("z"));
    granted(pool.acquire(&b1, 1, &gone, false, TTL, T0));
    granted(pool.acquire(&b2, 1, &y, false, TTL, T0));
    // `gone` waits on b2, y waits on b1.
    pool.acquire(&b2, 1, &gone, true, TTL, T0);
    pool.acquire(&b1, 1, &y, true, TTL, T0);
    pool.acquire(&b1, 1, &z, true, TTL, T0);
    let offers = pool.purge(&gone, T0);
    assert_eq!(offers.len(), 1);
    assert_eq!((&*offers[0].to, &*offers[0].bucket), ("y", "b1"));
    assert_eq!(pool.waiters("b2").count(), 0);
    assert_eq!(pool.waiters("b1").map(|w| &**w).collect::<Vec<_>>(), ["z"]);
    assert_eq!(pool.num_waiters(), 1);
    assert_eq!(pool.num_leases(), 2);
    assert_eq!(pool.num_violations(), 0);
}

#[test]
fn test_waiting_on_a_zero_limit_keeps_an_entry_until_a_higher_limit_arrives() {
    let (mut pool, b, x, y) = (pool(), id("b"), id("x"), id("y"));
    let denied = pool.acquire(&b, 0, &y, true, TTL, T0);
    assert!(matches!(
        denied,
        AcquireOutcome::Denied {
            waiter_registered: true,
            ..
        }
    ));
    assert_eq!(snapshot(&pool), (1, 0, 1));
    granted(pool.acquire(&b, 2, &x, false, TTL, T0));
    let offers = pool.sweep(T0);
    assert_eq!(offers.len(), 1);
    assert_eq!(&*offers[0].to, "y");
}

#[test]
fn test_sweep_gives_back_unneeded_map_capacity() {
    let (mut pool, a) = (SharedPool::new(caps(100_000, 100_000)), id("a"));
    let leases: Vec<LeaseId> = (0..20_000)
        .map(|i| granted(pool.acquire(&id(&format!("u{i}")), 1, &a, false, TTL, T0)))
        .collect();
    for lease in leases {
        pool.release(&a, lease, T0);
    }
    assert!(pool.buckets.capacity() >= 20_000);
    pool.sweep(T0);
    assert!(pool.buckets.capacity() <= RETAINED_MIN * 2);
    assert!(pool.leases.capacity() <= RETAINED_MIN * 2);
}

#[test]
fn test_a_holder_whose_release_overtook_its_used_answer_rejoins_and_gets_the_room() {
    // x and y wait; y is offered a lease, runs a request with it and releases it before its
    // answer (used, more waiting) reaches the owner.
    let (mut pool, b, h, y) = (pool(), id("b"), id("h"), id("y"));
    let lease = granted(pool.acquire(&b, 1, &h, false, TTL, T0));
    pool.acquire(&b, 1, &y, true, TTL, T0);
    let offer = pool.release(&h, lease, T0).expect("offered to y");
    assert_eq!(pool.release(&y, offer.lease, T0), None);
    assert_eq!(pool.offer_result(&offer, true, true, TTL, T0), None);
    assert_eq!(pool.num_violations(), 1);
    assert_eq!(pool.num_buckets(), 0, "the idle bucket went");
    // y still has parked requests: it waits again and gets the free slot at once.
    let again = pool
        .rejoin(&b, 1, &y, TTL, T0)
        .expect("the room is offered");
    assert_eq!(&*again.to, "y");
    assert_eq!(pool.in_use("b"), 1);
    // A full bucket only registers it.
    assert_eq!(pool.rejoin(&b, 1, &h, TTL, T0), None);
    assert_eq!(pool.waiters("b").map(|w| &**w).collect::<Vec<_>>(), ["h"]);
    // A limit of 0 or the bucket cap registers nothing in an idle bucket.
    let mut tiny = SharedPool::new(caps(0, 10));
    assert_eq!(tiny.rejoin(&b, 1, &y, TTL, T0), None);
    assert_eq!(tiny.num_waiters(), 0);
    assert_eq!(pool.rejoin(&id("c"), 0, &y, TTL, T0), None);
    assert_eq!(pool.waiters("c").count(), 0);
}

#[test]
fn test_grant_more_takes_only_free_room_and_never_when_someone_waits() {
    let (mut pool, b, a, c) = (pool(), id("b"), id("a"), id("c"));
    // No entry (no grant before): nothing.
    assert!(pool.grant_more(&b, &a, 3, TTL, T0).is_empty());
    granted(pool.acquire(&b, 4, &a, false, TTL, T0));
    // Asks for 5 more, gets the 3 left under the limit of 4 (P1), ordinary live leases.
    let more = pool.grant_more(&b, &a, 5, TTL, T0);
    assert_eq!(more.len(), 3);
    assert_eq!(pool.in_use("b"), 4);
    for l in &more {
        let info = pool.lease(*l).expect("a live lease");
        assert_eq!(
            (&**info.holder, info.expires, info.offered),
            ("a", TTL, false)
        );
    }
    assert!(pool.grant_more(&b, &a, 1, TTL, T0).is_empty(), "full");
    assert!(!pool.has_unowed_room("b"), "full: no room");
    assert!(!pool.has_unowed_room("nothing"), "no entry: nothing to say");
    // c waits; then an acquire raises the limit to 8: room, but c is owed it (P5 offers it at
    // the next sweep), so a batch takes none of it.
    assert!(matches!(
        pool.acquire(&b, 4, &c, true, TTL, T0),
        AcquireOutcome::Denied {
            waiter_registered: true,
            ..
        }
    ));
    granted(pool.acquire(&b, 8, &a, false, TTL, T0));
    assert!(pool.waiters("b").any(|w| &**w == "c"));
    assert!(
        pool.grant_more(&b, &a, 3, TTL, T0).is_empty(),
        "P7: a waiter is owed the room"
    );
    assert_eq!(pool.in_use("b"), 5);
    assert!(!pool.has_unowed_room("b"), "room, but owed to c");
    let other = id("other");
    granted(pool.acquire(&other, 2, &a, false, TTL, T0));
    assert!(pool.has_unowed_room("other"));
}

#[test]
fn test_grant_more_stays_within_the_lease_cap() {
    let (mut pool, b, a) = (SharedPool::new(caps(10, 3)), id("b"), id("a"));
    granted(pool.acquire(&b, 100, &a, false, TTL, T0));
    assert_eq!(pool.grant_more(&b, &a, 10, TTL, T0).len(), 2, "P4");
    assert_eq!(pool.num_leases(), 3);
}

#[test]
fn test_forgotten_waiters_get_no_offers_and_an_idle_bucket_goes() {
    let mut pool = pool();
    let (moved, kept) = (id("moved"), id("kept"));
    let (a, w) = (id("a"), id("w"));
    let held = granted(pool.acquire(&moved, 1, &a, false, TTL, T0));
    let other = granted(pool.acquire(&kept, 1, &a, false, TTL, T0));
    for bucket in [&moved, &kept] {
        assert!(matches!(
            pool.acquire(bucket, 1, &w, true, TTL, T0),
            AcquireOutcome::Denied {
                waiter_registered: true,
                ..
            }
        ));
    }
    assert_eq!(pool.num_waiters(), 2);

    pool.forget_waiters(|b| b != "kept");
    assert_eq!(pool.num_waiters(), 1);
    assert_eq!(pool.waiters("moved").count(), 0);
    // The moved bucket's lease is still out; its end is offered to nobody here.
    assert_eq!(pool.in_use("moved"), 1);
    assert_eq!(pool.release(&a, held, T0), None);
    assert_eq!(pool.limit("moved"), None, "an idle moved bucket goes");
    // The bucket this owner keeps is served as before.
    let offer = pool
        .release(&a, other, T0)
        .expect("the kept bucket's waiter is offered");
    assert_eq!(&*offer.to, "w");
    assert_eq!(pool.num_violations(), 0);
}
