//! The owner's lease table for the shared tier: how many leases of each bucket's cluster-wide
//! pool are out, to whom, until when, and which coordinators wait for one (DESIGN section 3,
//! "Shared tier"; issue 14 points 3, 5 and 6).
//!
//! A coordinator whose node allowance is exhausted asks the bucket's owner (see
//! [`crate::ring`]) for a lease with [`SharedPool::acquire`], passing the bucket's
//! `shared_limit`; the owner grants one while fewer than that many are out, with an expiry
//! `ttl` ahead. The holder keeps it alive with [`SharedPool::renew`] while its request runs and
//! ends it with [`SharedPool::release`]; [`SharedPool::sweep`] reclaims leases whose holder
//! crashed or whose release was lost, and [`SharedPool::purge`] those of a holder that left
//! the membership. A coordinator that parked the request before asking (`wants_queue`) is
//! registered as a waiter when denied; each freed slot of a bucket with waiters is then
//! reserved as a new lease and returned as an [`Offer`] for the caller to push to the waiter,
//! which answers with [`SharedPool::offer_result`].
//!
//! The pool is a pure, deterministic value: no I/O, no locks, no clock — `now` is a
//! [`Duration`] since an origin the caller chooses, passed with every call — and no output
//! depends on hash-map iteration order, so the same calls give the same answers in every
//! process (a deterministic simulation replays it). The owner service wraps it in a mutex.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use sluice_cluster::shared::pool::{AcquireOutcome, PoolLimits, SharedPool};
//!
//! let mut pool = SharedPool::new(PoolLimits { max_buckets: 1_000, max_leases: 1_000 });
//! let (bucket, a, b): (Arc<str>, Arc<str>, Arc<str>) = ("g\0alice".into(), "node-a".into(), "node-b".into());
//! let ttl = Duration::from_secs(300);
//! let now = Duration::ZERO;
//! let AcquireOutcome::Granted { lease, .. } = pool.acquire(&bucket, 1, &a, false, ttl, now) else {
//!     panic!("an idle bucket grants");
//! };
//! // Full: node-b parked its request first, so it registers as a waiter in the same call.
//! let denied = pool.acquire(&bucket, 1, &b, true, ttl, now);
//! assert_eq!(denied, AcquireOutcome::Denied { in_use: 1, limit: 1, waiter_registered: true });
//! // node-a's release frees the slot, which is reserved for node-b at once.
//! let offer = pool.release(&a, lease, now).expect("a waiter gets the freed slot");
//! assert_eq!(&*offer.to, "node-b");
//! assert_eq!(pool.in_use("g\0alice"), 1);
//! ```
//!
//! # Invariants
//!
//! - **P1 (C1 at the owner)** — a bucket's leases, offered ones included, never exceed the
//!   limit they were checked against: a grant or an offer happens only while fewer than the
//!   bucket's limit are out. The limit is the one passed with the bucket's latest acquire
//!   (an `Overloaded` acquire changes nothing, its limit included); lowering it revokes
//!   nothing and grants nobody until the count is below it. Checked by `debug_assert!` at
//!   every grant and offer; tested by `test_grants_up_to_the_limit_then_denies`,
//!   `test_lowered_limit_revokes_nothing_and_grants_nobody_until_below_it`,
//!   `test_latest_acquire_sets_the_limit_of_offers` and the model test
//!   (`tests/pool_model.rs`, `p1` after every step).
//! - **P2 (exactly once)** — every lease ends exactly once: by its holder's release, by the
//!   sweep after its expiry, by a purge of its holder, or (an offered lease) by an unused
//!   offer result. A release by a non-holder or of an unknown lease, or an offer result that
//!   matches no outstanding offer (a duplicate or stale answer), is counted in
//!   [`num_violations`](SharedPool::num_violations) and changes nothing. Tested by
//!   `test_release_by_a_non_holder_or_of_an_unknown_lease_is_counted_and_changes_nothing`,
//!   `test_a_stale_or_duplicate_offer_result_is_counted_and_changes_nothing` and the model
//!   test (the pool's live leases equal the model's after every step).
//! - **P3 (memory follows live traffic)** — a bucket entry exists only while it has leases or
//!   registered waiters: a refusal without `wants_queue` inserts nothing and whatever ends a
//!   bucket's last lease and registration removes its entry; the sweep gives back map
//!   capacity the live entries no longer need (see [`RETAINED_SLACK`]). Tested by
//!   `test_a_refusal_without_queue_inserts_nothing`,
//!   `test_the_entry_goes_with_the_last_lease`, the model test (`num_buckets` after every
//!   step) and `tests/pool_memory.rs` (memory returns to the baseline after a drain).
//! - **P4 (bounded owner memory; the seed review's question)** — `num_buckets <= max_buckets`
//!   and `num_leases <= max_leases` always: an acquire that would exceed either answers
//!   [`AcquireOutcome::Overloaded`] and changes nothing (the caller fails open and counts
//!   it). Waiter registrations are at most one per (bucket, holder) and need a bucket entry,
//!   so at most holders × `max_buckets` (holders are coordinators: the cluster's members).
//!   Memory is about 300 bytes per live lease with its own bucket plus the bucket id's bytes
//!   (see "Memory"); `tests/pool_memory.rs` floods a pool with 100,000 username buckets under
//!   caps of 65,536 and measures it. Tested also by `test_overloaded_changes_nothing` and the
//!   model test (small caps, counts after every step).
//! - **P5 (no stranding at the owner)** — a denied acquire with `wants_queue` registers the
//!   holder inside the same call (the seed's enqueue-first fix: the coordinator parked its
//!   request before sending the acquire, so no grant can slip between the denial and the
//!   registration). A slot freed by a release, the sweep, a purge or an unused offer, in a
//!   bucket with waiters, is offered in that same call to the waiter registered first, which
//!   leaves the list (round-robin: it rejoins at the back by answering `more_waiting`, or by
//!   another denied acquire). So at the end of every call no bucket has both a free slot and
//!   a waiter — except after an acquire raised a bucket's limit while it had waiters: that
//!   extra room is offered by the next [`sweep`](SharedPool::sweep) (an acquire returns no
//!   offers). Tested by `test_denied_acquire_with_queue_registers_the_waiter_in_the_same_call`,
//!   `test_freed_slots_are_offered_round_robin_across_holders`,
//!   `test_an_unused_offer_goes_to_the_next_waiter`,
//!   `test_capacity_freed_while_the_holder_was_unregistered_is_offered_when_it_rejoins`,
//!   `test_a_raised_limit_is_offered_to_waiters_by_the_next_sweep` and the model test (`p5`
//!   after every step). A used answer with `more_waiting` that arrives after its lease ended
//!   (the holder's release overtook it) is stale, but the owner then calls
//!   [`rejoin`](SharedPool::rejoin) so the holder waits again; tested by
//!   `test_a_holder_whose_release_overtook_its_used_answer_rejoins_and_gets_the_room`.
//! - **P6 (expiry)** — a lease expires `ttl` after its last grant or renewal (an offered lease:
//!   after the offer, with the offer TTL); it is alive while `now < expires`. A renewal or a
//!   used-offer answer for a lease past its expiry does not revive it (the holder must treat
//!   it as lost), and `sweep(now)` reclaims exactly the leases with `expires <= now`. Tested by
//!   `test_sweep_reclaims_exactly_the_expired_leases_and_offers_their_slots`,
//!   `test_renew_extends_live_leases_and_reports_the_rest_lost` and the model test (`p6`
//!   after every step).
//!
//! - **P7 (batches take only free room)** — [`grant_more`](SharedPool::grant_more) grants
//!   extra leases only to a bucket with no registered waiter, only while fewer than its limit
//!   are out (P1) and within the lease cap (P4); its leases are ordinary leases (P2, P6). So a
//!   coordinator's batch never takes a slot a waiting coordinator is owed, and a bucket with
//!   waiters is served one lease per acquire, round-robin (P5).
//!   [`has_unowed_room`](SharedPool::has_unowed_room) answers the same condition (a coordinator
//!   keeps its idle leases of such a bucket for another window). Tested by
//!   `test_grant_more_takes_only_free_room_and_never_when_someone_waits` and the model test
//!   (`GrantMore` steps, P1 after each; `has_unowed_room` against the model after every step).
//! - **P8 (a moved bucket is not served here)** — once the ring places a bucket on another
//!   owner, [`forget_waiters`](SharedPool::forget_waiters) drops its registrations, so the
//!   slots its leases free here go to nobody: an interim owner (one that took a bucket while
//!   its owner was unreachable) stops handing out the bucket's slots when the owner is back,
//!   and the over-admission of the move lasts only as long as the leases it already gave.
//!   The owner ([`super::owner`]) also stops re-registering a moved bucket's holders from
//!   their offer answers. Tested by
//!   `test_forgotten_waiters_get_no_offers_and_an_idle_bucket_goes` and, end to end, by the
//!   simulation's convergence check (`tests/sim.rs`).
//!
//! # Memory
//!
//! Per lease: an entry of the lease map (id 8 bytes + bucket and holder `Arc<str>` 16 each +
//! expiry 16 + flag, about 64 bytes and a control byte, in a table at most half empty after
//! growth) and one entry of the expiry index (24 bytes in a B-tree node, about 40 with the
//! node's slack): about 170 bytes. Per bucket: an entry of the bucket map (id `Arc<str>` 16 +
//! limit, count, TTL, waiter deque, flag ≈ 80 bytes; ≤ 200 bytes with slack) plus the id's
//! own allocation (16 bytes + its length), shared with the leases' copies. Holder ids are
//! shared `Arc<str>`s (the caller's). `tests/pool_memory.rs` measures the total.
//!
//! # Cost
//!
//! `acquire`, `release`, `renew` (per lease) and `offer_result` are O(log L) for L live
//! leases (one hash lookup per map and one B-tree update of the expiry index); `sweep` is
//! O(log L) per reclaimed lease; `purge` walks every lease and bucket (rare: a member left).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// How much spare map capacity [`SharedPool::sweep`] tolerates before shrinking a map: more
/// than `RETAINED_SLACK` × live entries + [`RETAINED_MIN`]. Four times keeps a map that
/// breathes with traffic from reallocating at every sweep while bounding idle capacity to a
/// small multiple of the live entries.
pub const RETAINED_SLACK: usize = 4;

/// Capacity a map may always keep, whatever its live entries: 1,024 entries are about 200 KB,
/// and a busy owner re-inserts that many in well under a second.
pub const RETAINED_MIN: usize = 1_024;

/// A lease's id, assigned by the pool from a counter starting at 1, or where
/// [`SharedPool::set_first_lease`] says (0 is never a lease, so a message can use it for
/// "none"); never reused within a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub u64);

/// Hard caps on what one owner holds (P4); beyond them an acquire answers
/// [`AcquireOutcome::Overloaded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// Most bucket entries (buckets with leases or waiters).
    pub max_buckets: usize,
    /// Most leases out, offered ones included.
    pub max_leases: usize,
}

/// The answer to [`SharedPool::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// A lease was granted, alive until `expires`.
    Granted {
        /// The new lease.
        lease: LeaseId,
        /// `now + ttl`.
        expires: Duration,
    },
    /// The bucket already had `limit` or more leases out.
    Denied {
        /// The bucket's leases out, offered ones included (`>= limit`).
        in_use: u64,
        /// The limit the acquire was checked against.
        limit: u64,
        /// Whether the holder is registered as a waiter of the bucket after this call (it
        /// asked `wants_queue`; true also if it already was).
        waiter_registered: bool,
    },
    /// A hard cap ([`PoolLimits`]) would be exceeded: nothing changed; the caller fails open.
    Overloaded,
}

/// A freed slot reserved as a lease for a waiting coordinator: the caller pushes it to `to`,
/// which answers with [`SharedPool::offer_result`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The waiter it is reserved for.
    pub to: Arc<str>,
    /// The bucket.
    pub bucket: Arc<str>,
    /// The reserved lease, held by `to`.
    pub lease: LeaseId,
    /// When the reservation expires if `to` never answers.
    pub expires: Duration,
}

/// A lease as the pool holds it, for stats and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseInfo<'a> {
    /// Its bucket.
    pub bucket: &'a Arc<str>,
    /// Its holder (for an offered lease, the waiter it was offered to).
    pub holder: &'a Arc<str>,
    /// When it expires (P6).
    pub expires: Duration,
    /// Whether it is an offer not yet answered.
    pub offered: bool,
}

/// The owner's table of shared-tier leases and waiters.
///
/// # Invariants
/// P1–P7 of the [module documentation](self).
#[derive(Debug)]
pub struct SharedPool {
    /// The hard caps (P4).
    limits: PoolLimits,
    /// Live buckets: those with leases or waiters (P3).
    buckets: HashMap<Arc<str>, Bucket>,
    /// Live leases, offered ones included.
    leases: HashMap<LeaseId, Lease>,
    /// `(expires, lease)` of every live lease: the sweep's index (P6), ordered so that the
    /// sweep reclaims in a deterministic order.
    expiries: BTreeSet<(Duration, LeaseId)>,
    /// Buckets whose limit an acquire raised while they had waiters, in the order raised:
    /// the next sweep offers them the room (P5). Each has `raised` set.
    raised: Vec<Arc<str>>,
    /// The next lease id.
    next_lease: u64,
    /// Waiter registrations, over all buckets.
    num_waiters: usize,
    /// Calls that named a lease or offer the pool does not know as such (P2).
    num_violations: u64,
    /// Leases the sweep reclaimed after their expiry (P6).
    num_expired: u64,
    /// The expiry of offers, if set; otherwise the TTL of the bucket's latest acquire.
    offer_ttl: Option<Duration>,
}

/// One live bucket.
#[derive(Debug)]
struct Bucket {
    /// The limit of the latest acquire (P1).
    limit: u64,
    /// The TTL of the latest acquire: the expiry of offers unless the pool sets its own.
    ttl: Duration,
    /// Leases out, offered ones included.
    in_use: u64,
    /// Registered waiters, distinct, the next to be offered first.
    waiters: VecDeque<Arc<str>>,
    /// Whether the bucket is in [`SharedPool::raised`].
    raised: bool,
}

/// One live lease.
#[derive(Debug)]
struct Lease {
    /// Its bucket.
    bucket: Arc<str>,
    /// Its holder.
    holder: Arc<str>,
    /// When it expires; its entry in the expiry index is `(expires, id)`.
    expires: Duration,
    /// An offer not yet answered.
    offered: bool,
}

impl SharedPool {
    /// Creates an empty pool with the given hard caps.
    pub fn new(limits: PoolLimits) -> SharedPool {
        SharedPool {
            limits,
            buckets: HashMap::new(),
            leases: HashMap::new(),
            expiries: BTreeSet::new(),
            raised: Vec::new(),
            next_lease: 1,
            num_waiters: 0,
            num_violations: 0,
            num_expired: 0,
            offer_ttl: None,
        }
    }

    /// Makes offers expire `ttl` after they are made (by default, after the TTL of the
    /// bucket's latest acquire): a short one returns the slot of a lost push or a crashed
    /// waiter sooner.
    pub fn set_offer_ttl(&mut self, ttl: Duration) {
        self.offer_ttl = Some(ttl);
    }

    /// Makes the next lease id `first` (at least 1). The owner starts each incarnation's ids
    /// apart from every earlier one's, so a coordinator still holding a lease of an owner that
    /// restarted can never release or renew a new lease by its id.
    pub fn set_first_lease(&mut self, first: u64) {
        self.next_lease = first.max(1);
    }

    /// The hard caps.
    pub fn limits(&self) -> PoolLimits {
        self.limits
    }

    /// Grants `holder` a lease of `bucket` if fewer than `limit` are out; otherwise denies,
    /// registering `holder` as a waiter if `wants_queue` (it parked the request before
    /// asking). `Overloaded` if a new lease or bucket entry would exceed a hard cap.
    pub fn acquire(
        &mut self,
        bucket: &Arc<str>,
        limit: u64,
        holder: &Arc<str>,
        wants_queue: bool,
        ttl: Duration,
        now: Duration,
    ) -> AcquireOutcome {
        let num_buckets = self.buckets.len();
        let entry = self.buckets.get_mut(bucket);
        let in_use = entry.as_ref().map_or(0, |b| b.in_use);
        if in_use >= limit {
            let waiter_registered = match entry {
                Some(entry) => {
                    entry.limit = limit;
                    entry.ttl = ttl;
                    wants_queue && register(entry, holder, &mut self.num_waiters)
                }
                None if !wants_queue => false,
                None if num_buckets >= self.limits.max_buckets => {
                    return AcquireOutcome::Overloaded;
                }
                None => {
                    // Only with a limit of 0: a waiter needs an entry to wait in.
                    let mut entry = Bucket::new(limit, ttl);
                    register(&mut entry, holder, &mut self.num_waiters);
                    self.buckets.insert(bucket.clone(), entry);
                    true
                }
            };
            return AcquireOutcome::Denied {
                in_use,
                limit,
                waiter_registered,
            };
        }
        if self.leases.len() >= self.limits.max_leases
            || (entry.is_none() && num_buckets >= self.limits.max_buckets)
        {
            return AcquireOutcome::Overloaded;
        }
        let entry = match entry {
            Some(entry) => entry,
            None => self
                .buckets
                .entry(bucket.clone())
                .or_insert_with(|| Bucket::new(limit, ttl)),
        };
        entry.limit = limit;
        entry.ttl = ttl;
        entry.in_use += 1;
        debug_assert!(entry.in_use <= entry.limit, "P1: a grant above the limit");
        if entry.in_use < entry.limit && !entry.waiters.is_empty() && !entry.raised {
            // Room left and waiters: a raised limit (P5); the next sweep offers it.
            entry.raised = true;
            self.raised.push(bucket.clone());
        }
        let expires = now.saturating_add(ttl);
        let lease = self.insert_lease(bucket.clone(), holder.clone(), expires, false);
        AcquireOutcome::Granted { lease, expires }
    }

    /// Grants `holder` up to `n` more leases of `bucket`, each alive until `now + ttl`, as a
    /// batch right after one of its acquires was granted (P7): only while the bucket has no
    /// waiter and fewer than its limit are out, and within the lease cap. Returns the leases
    /// granted, oldest first: none for a bucket without an entry or with waiters.
    pub fn grant_more(
        &mut self,
        bucket: &Arc<str>,
        holder: &Arc<str>,
        n: u64,
        ttl: Duration,
        now: Duration,
    ) -> Vec<LeaseId> {
        let cap_room = self.limits.max_leases.saturating_sub(self.leases.len()) as u64;
        let Some(entry) = self.buckets.get_mut(bucket) else {
            return Vec::new();
        };
        if !entry.waiters.is_empty() {
            return Vec::new();
        }
        let count = entry
            .limit
            .saturating_sub(entry.in_use)
            .min(n)
            .min(cap_room);
        if count == 0 {
            // Also a limit lowered below the leases out: nothing (P1).
            return Vec::new();
        }
        entry.in_use += count;
        debug_assert!(entry.in_use <= entry.limit, "P1: a batch above the limit");
        let expires = now.saturating_add(ttl);
        (0..count)
            .map(|_| self.insert_lease(bucket.clone(), holder.clone(), expires, false))
            .collect()
    }

    /// Whether `bucket` has room no waiter is owed: fewer leases out than its limit and no
    /// registered waiter (P7's condition). A bucket without an entry has none to say: `false`.
    pub fn has_unowed_room(&self, bucket: &str) -> bool {
        self.buckets
            .get(bucket)
            .is_some_and(|b| b.waiters.is_empty() && b.in_use < b.limit)
    }

    /// Extends the holder's leases; returns the ids it does not hold (expired/unknown: the
    /// holder must treat them as lost).
    ///
    /// A live lease held by `holder` then expires at `now + ttl`; a lease past its expiry is
    /// not revived (P6), and stays counted until the sweep reclaims it.
    pub fn renew(
        &mut self,
        holder: &Arc<str>,
        leases: &[LeaseId],
        ttl: Duration,
        now: Duration,
    ) -> Vec<LeaseId> {
        let mut lost = Vec::new();
        for &id in leases {
            match self.leases.get_mut(&id) {
                Some(lease) if lease.holder == *holder && now < lease.expires => {
                    let expires = now.saturating_add(ttl);
                    self.expiries.remove(&(lease.expires, id));
                    self.expiries.insert((expires, id));
                    lease.expires = expires;
                }
                _ => lost.push(id),
            }
        }
        lost
    }

    /// Ends a lease (only its holder may); a freed slot of a bucket with waiters is offered
    /// at once.
    ///
    /// A lease past its expiry but not yet swept ends here too (once). A release by another
    /// holder or of an unknown lease is counted ([`num_violations`](Self::num_violations))
    /// and changes nothing.
    pub fn release(&mut self, holder: &Arc<str>, lease: LeaseId, now: Duration) -> Option<Offer> {
        match self.leases.get(&lease) {
            Some(held) if held.holder == *holder => {}
            _ => {
                self.num_violations += 1;
                return None;
            }
        }
        let bucket = self.end_lease(lease);
        let offer = self.offer_one(&bucket, now);
        self.remove_if_idle(&bucket);
        offer
    }

    /// The answer to an offer pushed to `offer.to`: `used` = it now runs a request with the
    /// lease (the lease stays, held by it); `!used` = it had nothing parked: the reserved
    /// lease is released and offered to the next waiter. `more_waiting` = it still has
    /// parked requests for the bucket: it goes back to the end of the round-robin.
    ///
    /// A used lease then expires at `now + ttl`, unless the offer had already expired (P6:
    /// not revived; the holder learns it at its next renewal). `more_waiting` is ignored with
    /// `!used` (a coordinator with nothing to run has nothing waiting). If `offer.to` rejoins
    /// the waiters and the bucket has room (a slot freed while it was not registered), the
    /// room is offered at once and returned. An answer that matches no outstanding offer (a
    /// duplicate, or one the sweep or a purge ended) is counted and changes nothing.
    pub fn offer_result(
        &mut self,
        offer: &Offer,
        used: bool,
        more_waiting: bool,
        ttl: Duration,
        now: Duration,
    ) -> Option<Offer> {
        let lease = match self.leases.get_mut(&offer.lease) {
            Some(lease)
                if lease.offered && lease.holder == offer.to && lease.bucket == offer.bucket =>
            {
                lease
            }
            _ => {
                self.num_violations += 1;
                return None;
            }
        };
        if !used {
            let bucket = self.end_lease(offer.lease);
            let next = self.offer_one(&bucket, now);
            self.remove_if_idle(&bucket);
            return next;
        }
        if now < lease.expires {
            let expires = now.saturating_add(ttl);
            self.expiries.remove(&(lease.expires, offer.lease));
            self.expiries.insert((expires, offer.lease));
            lease.expires = expires;
            lease.offered = false;
        }
        if !more_waiting {
            return None;
        }
        let entry = self
            .buckets
            .get_mut(&offer.bucket)
            .expect("a live lease's bucket is live");
        register(entry, &offer.to, &mut self.num_waiters);
        self.offer_one(&offer.bucket, now)
    }

    /// Registers `holder` again as a waiter of `bucket` and offers the bucket's room at once
    /// (P5), for a used answer with `more_waiting` that [`offer_result`](Self::offer_result)
    /// found stale because the offered lease had already ended — the holder's release of it
    /// overtook its answer on the network, or the sweep reclaimed it. Without this the holder's
    /// other parked requests would have no registration left (`tests/sim.rs` surfaced the
    /// stale answers in runs without faults: reordering alone produces them).
    ///
    /// An idle bucket gets an entry with `limit`; nothing changes if that would exceed
    /// `max_buckets` (P4) or if `limit` is 0.
    pub fn rejoin(
        &mut self,
        bucket: &Arc<str>,
        limit: u64,
        holder: &Arc<str>,
        ttl: Duration,
        now: Duration,
    ) -> Option<Offer> {
        if !self.buckets.contains_key(bucket) {
            if limit == 0 || self.buckets.len() >= self.limits.max_buckets {
                return None;
            }
            self.buckets.insert(bucket.clone(), Bucket::new(limit, ttl));
        }
        let entry = self.buckets.get_mut(bucket).expect("inserted above");
        register(entry, holder, &mut self.num_waiters);
        self.offer_one(bucket, now)
    }

    /// Reclaims leases past their expiry (crashed holders, lost releases); offers each freed
    /// slot to a waiter. Also offers the room of limits raised since the last sweep (P5), and
    /// gives back map capacity the live entries no longer need (P3).
    ///
    /// Offers are returned in the order made: expired leases by `(expires, id)`, then raised
    /// buckets in the order they were raised.
    pub fn sweep(&mut self, now: Duration) -> Vec<Offer> {
        let mut offers = Vec::new();
        while let Some(&(expires, id)) = self.expiries.first() {
            if expires > now {
                break;
            }
            let bucket = self.end_lease(id);
            self.num_expired += 1;
            offers.extend(self.offer_one(&bucket, now));
            self.remove_if_idle(&bucket);
        }
        for bucket in std::mem::take(&mut self.raised) {
            let Some(entry) = self.buckets.get_mut(&bucket) else {
                continue;
            };
            entry.raised = false;
            while self.leases.len() < self.limits.max_leases {
                match self.offer_one(&bucket, now) {
                    Some(offer) => offers.push(offer),
                    None => break,
                }
            }
            let entry = self.buckets.get_mut(&bucket).expect("still live");
            if entry.in_use < entry.limit && !entry.waiters.is_empty() {
                // The lease cap stopped us: try again at the next sweep.
                entry.raised = true;
                self.raised.push(bucket);
            }
        }
        shrink(&mut self.buckets);
        shrink(&mut self.leases);
        offers
    }

    /// A holder left the membership: its leases and waiter registrations go; freed slots are
    /// offered.
    ///
    /// Its registrations go first, so no freed slot is offered back to it; its leases end in
    /// id order. O(leases + buckets).
    pub fn purge(&mut self, holder: &Arc<str>, now: Duration) -> Vec<Offer> {
        for entry in self.buckets.values_mut() {
            let before = entry.waiters.len();
            entry.waiters.retain(|w| w != holder);
            self.num_waiters -= before - entry.waiters.len();
        }
        let mut held: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, lease)| lease.holder == *holder)
            .map(|(&id, _)| id)
            .collect();
        held.sort_unstable();
        let mut offers = Vec::new();
        for id in held {
            let bucket = self.end_lease(id);
            offers.extend(self.offer_one(&bucket, now));
        }
        self.buckets
            .retain(|_, entry| entry.in_use > 0 || !entry.waiters.is_empty());
        offers
    }

    /// Forgets every waiter registration of the buckets `moved` names: the ring placed them
    /// on another owner, whose registrations serve their coordinators now (they ask it), so
    /// no slot of theirs freed here is offered again (P8). Their leases stay until released,
    /// swept or purged; a bucket left with neither goes (P3).
    pub fn forget_waiters(&mut self, moved: impl Fn(&str) -> bool) {
        for (bucket, entry) in &mut self.buckets {
            if moved(bucket) {
                self.num_waiters -= entry.waiters.len();
                entry.waiters.clear();
            }
        }
        self.buckets
            .retain(|_, entry| entry.in_use > 0 || !entry.waiters.is_empty());
    }

    /// The leases out for `bucket`, offered ones included.
    pub fn in_use(&self, bucket: &str) -> u64 {
        self.buckets.get(bucket).map_or(0, |b| b.in_use)
    }

    /// Every live bucket with its leases out (offered ones included), in no set order.
    pub fn in_use_by_bucket(&self) -> impl Iterator<Item = (&Arc<str>, u64)> {
        self.buckets.iter().map(|(b, e)| (b, e.in_use))
    }

    /// The limit of `bucket`'s latest acquire, while it has an entry.
    pub fn limit(&self, bucket: &str) -> Option<u64> {
        self.buckets.get(bucket).map(|b| b.limit)
    }

    /// The waiters of `bucket`, the next to be offered first.
    pub fn waiters(&self, bucket: &str) -> impl Iterator<Item = &Arc<str>> {
        self.buckets
            .get(bucket)
            .into_iter()
            .flat_map(|b| &b.waiters)
    }

    /// A live lease, offered or not.
    pub fn lease(&self, lease: LeaseId) -> Option<LeaseInfo<'_>> {
        self.leases.get(&lease).map(|l| LeaseInfo {
            bucket: &l.bucket,
            holder: &l.holder,
            expires: l.expires,
            offered: l.offered,
        })
    }

    /// Every live lease, offered or not, in id order (for stats and tests).
    pub fn leases(&self) -> Vec<(LeaseId, LeaseInfo<'_>)> {
        let mut out: Vec<(LeaseId, LeaseInfo<'_>)> = self
            .leases
            .iter()
            .map(|(&id, l)| {
                (
                    id,
                    LeaseInfo {
                        bucket: &l.bucket,
                        holder: &l.holder,
                        expires: l.expires,
                        offered: l.offered,
                    },
                )
            })
            .collect();
        out.sort_unstable_by_key(|(id, _)| *id);
        out
    }

    /// The bucket entries (buckets with leases or waiters).
    pub fn num_buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The leases out, offered ones included.
    pub fn num_leases(&self) -> usize {
        self.leases.len()
    }

    /// The waiter registrations, over all buckets.
    pub fn num_waiters(&self) -> usize {
        self.num_waiters
    }

    /// Releases of unknown leases or by non-holders, and offer results matching no
    /// outstanding offer (counted, no effect; P2).
    pub fn num_violations(&self) -> u64 {
        self.num_violations
    }

    /// Leases the sweep reclaimed after their expiry (a lost release, a dead holder, an
    /// unanswered offer): the simulation checks that none is, in runs without faults.
    pub fn num_expired(&self) -> u64 {
        self.num_expired
    }

    /// The mutation `sim-mutation-late-waiter` (test only, see Cargo.toml): registers `holder`
    /// as a waiter of `bucket` outside any acquire, creating the entry if needed, and offers
    /// nothing — the seed's late registration.
    #[cfg(feature = "sim-mutation-late-waiter")]
    pub fn mutation_register_waiter(
        &mut self,
        bucket: &Arc<str>,
        limit: u64,
        holder: &Arc<str>,
        ttl: Duration,
    ) {
        let entry = self
            .buckets
            .entry(bucket.clone())
            .or_insert_with(|| Bucket::new(limit, ttl));
        register(entry, holder, &mut self.num_waiters);
    }

    /// Records a new lease of `bucket` (whose count the caller already raised).
    fn insert_lease(
        &mut self,
        bucket: Arc<str>,
        holder: Arc<str>,
        expires: Duration,
        offered: bool,
    ) -> LeaseId {
        let id = LeaseId(self.next_lease);
        self.next_lease += 1;
        self.expiries.insert((expires, id));
        self.leases.insert(
            id,
            Lease {
                bucket,
                holder,
                expires,
                offered,
            },
        );
        id
    }

    /// Ends a live lease: removes it and lowers its bucket's count; returns the bucket, which
    /// the caller offers and removes if idle.
    fn end_lease(&mut self, id: LeaseId) -> Arc<str> {
        let lease = self.leases.remove(&id).expect("ending a live lease");
        self.expiries.remove(&(lease.expires, id));
        let entry = self
            .buckets
            .get_mut(&lease.bucket)
            .expect("a live lease's bucket is live");
        entry.in_use -= 1;
        lease.bucket
    }

    /// If `bucket` has room and a waiter, reserves a lease for the first waiter, which leaves
    /// the list (P5), and returns the offer.
    fn offer_one(&mut self, bucket: &Arc<str>, now: Duration) -> Option<Offer> {
        let entry = self.buckets.get_mut(bucket)?;
        if entry.in_use >= entry.limit || entry.waiters.is_empty() {
            return None;
        }
        if self.leases.len() >= self.limits.max_leases {
            // P4: at the lease cap (only reachable when a used offer's holder rejoins the
            // waiters while the bucket has room); the sweep offers it once leases end (P5).
            if !entry.raised {
                entry.raised = true;
                self.raised.push(bucket.clone());
            }
            return None;
        }
        let to = entry.waiters.pop_front()?;
        self.num_waiters -= 1;
        entry.in_use += 1;
        debug_assert!(entry.in_use <= entry.limit, "P1: an offer above the limit");
        let expires = now.saturating_add(self.offer_ttl.unwrap_or(entry.ttl));
        let lease = self.insert_lease(bucket.clone(), to.clone(), expires, true);
        Some(Offer {
            to,
            bucket: bucket.clone(),
            lease,
            expires,
        })
    }

    /// Removes `bucket`'s entry if it has neither leases nor waiters (P3).
    fn remove_if_idle(&mut self, bucket: &str) {
        if self
            .buckets
            .get(bucket)
            .is_some_and(|b| b.in_use == 0 && b.waiters.is_empty())
        {
            self.buckets.remove(bucket);
        }
    }
}

impl Bucket {
    /// An entry with no leases and no waiters yet.
    fn new(limit: u64, ttl: Duration) -> Bucket {
        Bucket {
            limit,
            ttl,
            in_use: 0,
            waiters: VecDeque::new(),
            raised: false,
        }
    }
}

/// Registers `holder` as a waiter of `entry` unless it already is (P4: one per bucket and
/// holder); true either way.
fn register(entry: &mut Bucket, holder: &Arc<str>, num_waiters: &mut usize) -> bool {
    if !entry.waiters.contains(holder) {
        entry.waiters.push_back(holder.clone());
        *num_waiters += 1;
    }
    true
}

/// Shrinks `map` when its capacity exceeds what [`RETAINED_SLACK`] and [`RETAINED_MIN`]
/// allow for its live entries.
fn shrink<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    let allowed = map.len().saturating_mul(RETAINED_SLACK) + RETAINED_MIN;
    if map.capacity() > allowed {
        map.shrink_to(map.len().saturating_mul(2).max(RETAINED_MIN / 2));
    }
}

#[cfg(test)]
mod tests;
