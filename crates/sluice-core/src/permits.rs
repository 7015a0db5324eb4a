//! The node-tier permit table: how many requests of each throttle bucket run on this node, and
//! the admission decision against a group's `node_limit` (DESIGN section 3).
//!
//! [`PermitTable::try_acquire`] admits a request to a [`BucketKey`] under the limit passed with
//! the call and returns a [`Permit`], an RAII value whose `Drop` releases it; or it refuses with
//! [`Throttled`]. The table is striped: a key is hashed once, the hash picks one of a fixed set of
//! shards (each a mutex over a map of bucket key → [`BucketState`]), and the permit keeps the
//! hash and its shard, so a release neither rehashes the key nor touches any other shard.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::bags::ThrottleAttribute;
//! use sluice_core::bucket::BucketKey;
//! use sluice_core::permits::PermitTable;
//!
//! let table = PermitTable::new();
//! let key = BucketKey { group_id: Arc::from("gid"), attribute: ThrottleAttribute::Group, value: None };
//! let first = table.try_acquire(&key, 1).expect("an idle bucket admits");
//! let refused = table.try_acquire(&key, 1).expect_err("the bucket is full");
//! assert_eq!((refused.in_flight, refused.limit), (1, 1));
//! drop(first);
//! assert_eq!(table.num_buckets(), 0);
//! ```
//!
//! With queueing, [`PermitTable::acquire`] takes the group's live handle ([`GroupQueue`]) and a
//! [`QueuePolicy`] instead of a limit, and may also park the request: it returns an
//! [`Acquire`] — a [`Permit`] at once, a [`Waiter`] (a future resolving to a [`Grant`]), a
//! [`Refused`] naming the bound that refused it, or `Unthrottled` once the group's backlog was
//! released. [`try_acquire`](PermitTable::try_acquire) keeps its signature and behaves like an
//! `acquire` that never parks.
//!
//! # Invariants
//!
//! - **N1** — an admission or hand-off never takes a bucket's in-flight count above the limit
//!   it was checked against: both compare and increment under the shard lock, with no
//!   increment-then-rollback window in which another caller could see a transient over-count
//!   and be refused spuriously; a hand-off re-reads the group's live `node_limit` from its
//!   [`GroupQueue`] at that moment (a release carries no limit). A change applies from the next
//!   admission or hand-off; lowering it never revokes running permits, it admits nobody until
//!   the count has drained below the new limit; raising it admits that many waiters at the next
//!   [`drain_group`](PermitTable::drain_group) (or release, or arrival in the bucket). Checked
//!   by `debug_assert!` after each increment and hand-off; tested by
//!   `test_concurrent_admissions_never_exceed_the_limit`,
//!   `test_lowered_limit_admits_nobody_until_in_flight_falls_below_it`,
//!   `test_raised_limit_admits_that_many_waiters_on_drain`, the proptests
//!   (`tests/permits_model.rs`, `tests/queue_model.rs`) and loom models (a) of
//!   `tests/loom_permits.rs` and `tests/loom_queue.rs`.
//! - **N2** — every admission releases exactly once: [`Permit`] is neither `Clone` nor `Copy`
//!   and its only release path is `Drop`. A slot handed to a waiter stays counted (it moves);
//!   if the waiter is dropped before it takes the slot, its `Drop` passes the slot to the next
//!   waiter or releases it — once. A release that finds no entry, or an entry at 0, would mean
//!   a double release; it is counted ([`PermitTable::num_invariant_violations`]) and changes
//!   nothing. Tested by `test_handed_then_dropped_waiter_passes_the_slot_to_the_next`,
//!   `test_handed_then_dropped_last_waiter_releases_the_slot`, the proptests and loom models
//!   (b) and (c) of both loom files.
//! - **N3** — an entry exists only while its bucket has requests in flight or parked: a
//!   refusal never inserts one, and whatever empties a bucket (the last release, the last
//!   waiter's cancellation, a backlog release) removes it under the same lock; a waiter node is
//!   freed when its waiter completes or is dropped. Tested by
//!   `test_dropping_the_only_waiter_of_an_idle_bucket_removes_the_entry`,
//!   `test_group_ceiling_binds_across_buckets_before_the_per_bucket_cap` (refusals), the
//!   proptests (`num_buckets` and `num_waiter_nodes` after every step) and every loom model's
//!   final check.
//! - **N4** — a freed slot goes to the oldest waiter of its bucket before any new arrival: the
//!   release pops the head of the bucket's FIFO and marks it granted under the shard lock (the
//!   count does not drop), and both `acquire` and `try_acquire` refuse to admit while the
//!   bucket has waiters. Wakers are called after the lock is released. Tested by
//!   `test_hand_off_goes_to_oldest_waiter_in_fifo_order`,
//!   `test_new_arrival_never_barges_past_waiters`, the queue proptest (FIFO of tags after every
//!   step) and loom model (a) of `tests/loom_queue.rs`.
//! - **N5** — queues are bounded: at most `size_per_bucket` per bucket and
//!   [`MAX_PARKED_PER_GROUP`] per group on this node. The group count lives in the
//!   [`GroupQueue`], shared by the group's buckets across shards; a new waiter takes its place
//!   with one compare-exchange against the ceiling, so concurrent parks on different shards
//!   can never exceed it (see `GroupQueue`'s `# Ordering`). Tested by
//!   `test_bucket_queue_full_refuses_and_names_the_counts`,
//!   `test_group_ceiling_binds_across_buckets_before_the_per_bucket_cap` and the queue proptest.
//! - **N5a (fair share, D13)** — a bucket that already holds its share of the ceiling — the
//!   ceiling divided by the group's buckets with waiters, counting itself and, after the
//!   ceiling turned away a bucket below its share, that bucket too — parks no more. A bucket
//!   alone may fill the ceiling; once another bucket is turned away by the full ceiling, the
//!   first yields every freed place until the newcomer holds its share, so one principal's
//!   flood cannot lock the others out. The share is enforced as soon as two buckets wait, not
//!   only at the ceiling: with the ceiling full, an over-share bucket could only be brought
//!   down by evicting parked requests, which we never do. It binds below the ceiling only when
//!   `size_per_bucket` exceeds the share. The share reads counts other shards may be changing,
//!   so it is exact single-threaded and approximate under races (N5 is not). Tested by
//!   `test_flood_from_one_user_cannot_lock_out_another`,
//!   `test_fair_share_never_applies_to_a_bucket_alone` and the queue proptest.
//! - **N5b (parked counts)** — a waiter stops counting as parked when it is handed its slot
//!   (or a shared-tier grant, or released), under the shard lock, not when its task next
//!   runs; and each waiter carries the group's parked count its place was taken at
//!   ([`Waiter::group_parked`]), itself included. So the largest of those is the most the
//!   group ever had parked at once, never more: a count read by the parked request itself
//!   could still hold a waiter handed its slot whose task had not run (the server's
//!   `queue_peak` read `size_per_bucket + 1` so). Tested by
//!   `test_a_waiter_handed_its_slot_no_longer_counts_as_parked` and the queue proptest.
//! - **N6** — a backlog release strands nobody: [`release_group`](PermitTable::release_group)
//!   marks the handle before walking the shards and `acquire` reads the mark under the shard
//!   lock, so a racing arrival is either released with the backlog or answered `Unthrottled`.
//!   Tested by `test_release_group_resolves_every_waiter_unthrottled_and_empties_the_table`
//!   and loom model (d) of `tests/loom_queue.rs`.
//! - **N7 (external grants)** — a shared-tier lease handed to a bucket with
//!   [`grant_external`](PermitTable::grant_external) goes to its oldest waiter (the FIFO of
//!   N4) without touching the node count (N1 is about node slots; the lease is the shared
//!   tier's), and is never lost: a waiter dropped after the grant and before it took it passes
//!   the grant to the next waiter of the bucket, or — none left — to the orphan list that
//!   [`take_orphaned_grants`](PermitTable::take_orphaned_grants) empties; no waiter at all
//!   gives the token straight back. Tested by
//!   `test_external_grant_goes_to_the_oldest_waiter_and_leaves_the_count_alone`,
//!   `test_a_cancelled_external_grant_passes_on_then_becomes_an_orphan`.
//!
//! # Queueing
//!
//! Waiters live in the same shard as their bucket's count, under the same lock, so N4's
//! hand-off is one critical section. Each shard keeps a slab of waiter nodes; each bucket's
//! FIFO is a doubly linked list through it (head, tail and length in the bucket's state), so a
//! dropped [`Waiter`] unlinks itself in O(1) wherever it stands, and freed nodes are reused
//! (parking and hand-off do not allocate in steady state). A bucket with waiters holds its
//! group's [`GroupQueue`]; the hand-off reads the live limit there.
//!
//! Wiring (the server): one `Arc<GroupQueue>` per throttled group, updated with
//! [`GroupQueue::set_node_limit`] then [`PermitTable::drain_group`] when the group changes;
//! [`PermitTable::release_group`] when throttling is disabled, the group deleted or switched to
//! `monitor`, or the cluster mode leaves `enabled` (then a new handle if it is throttled
//! again); [`PermitTable::drain_all`] from the backstop sweep; dropping the [`Waiter`] to
//! cancel (task cancel, disconnect, `cancel_after_time_interval`); [`GroupQueue::num_parked`]
//! for `queued_current`, [`PermitTable::parked`] / [`PermitTable::parked_all`] to list the
//! parked tasks by their tag.
//!
//! # Allocation
//!
//! Steady-state admission does not allocate: cloning a [`BucketKey`] only bumps `Arc`
//! reference counts, and a shard's map keeps its capacity when an entry is removed, so
//! re-inserting a drained bucket reuses the slot. Parking reuses a freed slab node and a
//! hand-off collects its waker inline. `tests/permits_alloc.rs` counts both.

mod queue;
#[cfg(all(test, not(feature = "loom")))]
mod queue_tests;
#[cfg(all(test, not(feature = "loom")))]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};

pub use queue::{
    Acquire, Grant, GroupQueue, MAX_PARKED_PER_GROUP, QueuePolicy, RefusalReason, Refused, Waiter,
    fair_share_of,
};
use queue::{Slab, WaitList, WakeList};

use crate::bucket::BucketKey;
use crate::sync::{Arc, Mutex};

/// Shards per available core for [`PermitTable::new`]: two requests on different buckets then
/// meet on one lock with a chance of about 1/(4 × cores), while the shards (one cache line
/// each) stay a few KiB.
const SHARDS_PER_CORE: usize = 4;

/// The core count [`PermitTable::new`] assumes when the machine's cannot be read; the
/// resulting 16 shards are plenty for the small machines where that happens.
const FALLBACK_CORES: usize = 4;

/// The most shards a table has: beyond this, more stripes no longer reduce contention
/// measurably and only cost memory.
const MAX_SHARDS: usize = 1024;

/// Hashes bucket keys: foldhash with its fixed seed (`FixedState::default()`), so a key lands
/// in the same shard in every process and a deterministic simulation replays the same
/// placement (DESIGN section 7 avoids per-process random keys). Hash flooding is no concern
/// here: names come from sluice's own authentication, and the table holds only buckets with
/// requests in flight. (SipHash-1-3 with std's fixed keys, as before, was no defence either,
/// and hashing a group id with it cost a tagged search about 330 instructions of its throttle,
/// foldhash about 110: BENCHMARKS.md "The tagged path, cut again".)
type KeyHasher = foldhash::fast::FixedState;

/// The table of in-flight permits per bucket for one node; shared by all request handlers.
///
/// # Invariants
/// N1–N6 of the [module documentation](self): admissions and hand-offs never exceed the limit,
/// every permit releases exactly once, an entry exists only while its bucket has requests in
/// flight or parked, freed slots go to the oldest waiter, queues are bounded and fairly shared,
/// and a backlog release strands nobody.
pub struct PermitTable {
    /// The stripes; a key's shard is picked by bits 32.. of its hash (the map inside uses the
    /// low bits and the top 7, so the two choices are independent).
    shards: Box<[Arc<Shard>]>,
    /// `shards.len() - 1`; the length is a power of two.
    shard_mask: usize,
    /// Hashes keys, once per admission.
    hasher: KeyHasher,
}

/// A refused admission: the bucket already had `limit` or more requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "too many requests in flight for this bucket: {in_flight} running, limit {limit}; retry when one completes"
)]
pub struct Throttled {
    /// The bucket's in-flight count when the request was refused (`>= limit`).
    pub in_flight: u64,
    /// The limit the request was checked against.
    pub limit: u64,
}

/// One admitted request's slot in its bucket; dropping it releases the slot.
///
/// `Send` and `Sync`: it may be dropped on any thread, and the release happens there. It keeps
/// its shard alive, so it may even outlive the [`PermitTable`].
#[must_use = "a permit is released as soon as it is dropped; keep it until the request ends"]
pub struct Permit {
    /// The shard holding the bucket's entry.
    shard: Arc<Shard>,
    /// The bucket, with its hash for the release.
    key: HashedKey,
}

/// One stripe of the table, alone on its cache lines so neighbouring shards' locks do not
/// share one.
#[repr(align(128))]
struct Shard {
    /// The buckets of this stripe.
    state: Mutex<ShardState>,
}

/// What a shard's lock protects.
#[derive(Default)]
struct ShardState {
    /// The live buckets (N3: only those with requests in flight or parked waiters).
    buckets: HashMap<HashedKey, BucketState, BuildHasherDefault<PrehashedHasher>>,
    /// The nodes of this shard's parked waiters; each bucket's FIFO links through them.
    waiters: Slab,
    /// Releases that found nothing to release, waiters whose bucket or node had vanished, a
    /// bucket asked to queue under two group handles (N2/N4 violations); 0 unless there is a bug.
    num_invariant_violations: u64,
    /// External grants whose waiter was dropped (cancelled) after the grant and before it took
    /// it, with no other waiter of the bucket to pass them to (N7): the server takes them back
    /// with [`PermitTable::take_orphaned_grants`] and releases them.
    orphaned: Vec<(BucketKey, u64)>,
}

/// The state of one live bucket.
#[derive(Debug, Default)]
struct BucketState {
    /// Admitted requests not yet released, including slots handed to waiters that have not yet
    /// polled (the slot moved to them; it is counted once).
    in_flight: u64,
    /// Parked waiters, oldest first.
    queue: WaitList,
    /// The group handle of the parked waiters (its live limit drives hand-offs); `Some` exactly
    /// while `queue` is non-empty.
    group: Option<Arc<GroupQueue>>,
}

/// A bucket key with its hash, computed once at admission; the shard maps hash it by handing
/// over the stored hash.
#[derive(Clone)]
struct HashedKey {
    /// `KeyHasher` hash of `key`.
    hash: u64,
    /// The bucket.
    key: BucketKey,
}

/// A `Hasher` that returns the `u64` written to it: the maps' keys are [`HashedKey`]s, which
/// write their precomputed hash.
#[derive(Default)]
struct PrehashedHasher(u64);

impl PermitTable {
    /// Creates an empty table with [`SHARDS_PER_CORE`] shards per available core.
    ///
    /// Reads the machine's core count once (`std::thread::available_parallelism`), the only
    /// look at the environment in this module; [`with_shards`](Self::with_shards) does not.
    pub fn new() -> PermitTable {
        let cores = std::thread::available_parallelism().map_or(FALLBACK_CORES, |n| n.get());
        PermitTable::with_shards(cores.saturating_mul(SHARDS_PER_CORE))
    }

    /// Creates an empty table with `num_shards` shards, rounded up to a power of two and
    /// clamped to 1..=[`MAX_SHARDS`].
    pub fn with_shards(num_shards: usize) -> PermitTable {
        let n = num_shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let shards = (0..n)
            .map(|_| {
                Arc::new(Shard {
                    state: Mutex::new(ShardState::default()),
                })
            })
            .collect();
        PermitTable {
            shards,
            shard_mask: n - 1,
            hasher: KeyHasher::default(),
        }
    }

    /// Admits one request to `key` if fewer than `limit` are in flight there, or refuses it.
    ///
    /// `limit` is the group's live `node_limit`; the server does not call this when throttling
    /// is off. A `limit` of 0 admits nothing (and creates no entry).
    ///
    /// # Errors
    /// [`Throttled`] with the bucket's count when it already has `limit` or more in flight.
    pub fn try_acquire(&self, key: &BucketKey, limit: u64) -> Result<Permit, Throttled> {
        let key = self.hashed(key);
        let shard = self.shard(key.hash);
        {
            let mut state = shard.state.lock();
            match state.buckets.get_mut(&key) {
                // N4: while requests are parked, a new arrival never overtakes them.
                Some(bucket) if !bucket.queue.is_empty() => {
                    return Err(Throttled {
                        in_flight: bucket.in_flight,
                        limit,
                    });
                }
                Some(bucket) => bucket.try_admit(limit)?,
                None => {
                    let mut bucket = BucketState::default();
                    bucket.try_admit(limit)?;
                    state.buckets.insert(key.clone(), bucket);
                }
            }
        }
        Ok(Permit {
            shard: Arc::clone(shard),
            key,
        })
    }

    /// Admits one request to `key` under its group's live limit, parks it behind the bucket's
    /// waiters, or refuses it.
    ///
    /// In order: a `group` already released answers [`Acquire::Unthrottled`]; room left by a
    /// raised limit goes to the bucket's oldest waiters first; the request is then admitted if
    /// nobody waits and fewer than `group.node_limit()` run (N1, N4), else parked as the
    /// bucket's newest waiter if `policy` leaves room (N5, D13), else refused with the bound that
    /// refused it. A `policy.size_per_bucket` of 0 admits or refuses exactly like
    /// [`try_acquire`](Self::try_acquire). `tag` is the caller's value (a task id), shown by
    /// [`parked`](Self::parked).
    ///
    /// All of a bucket's waiters must share one `group` handle (the server keeps one per group);
    /// a second handle is counted as a violation and the bucket keeps using the first.
    pub fn acquire(
        &self,
        key: &BucketKey,
        group: &Arc<GroupQueue>,
        policy: QueuePolicy,
        tag: u64,
    ) -> Acquire {
        let key = self.hashed(key);
        let shard = self.shard(key.hash);
        let mut wakes = WakeList::default();
        let outcome = {
            let mut guard = shard.state.lock();
            let state = &mut *guard;
            // Read under the lock: see GroupQueue's `# Ordering` (no waiter is stranded).
            if group.is_released() {
                None
            } else {
                let limit = group.node_limit();
                Some(match state.buckets.get_mut(&key) {
                    Some(bucket) => {
                        if bucket.group.as_ref().is_some_and(|g| !same_group(g, group)) {
                            state.num_invariant_violations =
                                state.num_invariant_violations.saturating_add(1);
                        }
                        queue::settle(bucket, &mut state.waiters, &mut wakes);
                        bucket.admit_or_park(&mut state.waiters, group, policy, limit, tag)
                    }
                    None => {
                        let mut bucket = BucketState::default();
                        let outcome =
                            bucket.admit_or_park(&mut state.waiters, group, policy, limit, tag);
                        if outcome.is_ok() {
                            state.buckets.insert(key.clone(), bucket);
                        }
                        outcome
                    }
                })
            }
        };
        wakes.wake_all();
        match outcome {
            None => Acquire::Unthrottled,
            Some(Ok(None)) => Acquire::Admitted(Permit {
                shard: Arc::clone(shard),
                key,
            }),
            Some(Ok(Some((slot, group_parked)))) => {
                Acquire::Parked(Waiter::new(Arc::clone(shard), key, slot, tag, group_parked))
            }
            Some(Err(refused)) => Acquire::Refused(refused),
        }
    }

    /// Hands an external grant — a shared-tier lease named by `token` — to the oldest waiter of
    /// `key`'s bucket (N4's FIFO; the node count does not change: the waiter holds no node
    /// slot). Returns the woken waiter's tag, or gives `token` back when the bucket has no
    /// waiter (the caller then returns the lease). See N7.
    pub fn grant_external(&self, key: &BucketKey, token: u64) -> Result<u64, u64> {
        let key = self.hashed(key);
        let shard = self.shard(key.hash);
        let mut wakes = WakeList::default();
        let tag = shard.state.lock().grant_external(&key, token, &mut wakes);
        wakes.wake_all();
        tag.ok_or(token)
    }

    /// Takes the external grants whose waiter was cancelled after the grant with nobody left
    /// in its bucket to pass it to (N7); the caller releases them. The server's backstop sweep
    /// calls it, so such a lease is returned within a sweep period.
    pub fn take_orphaned_grants(&self) -> Vec<(BucketKey, u64)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            out.append(&mut shard.state.lock().orphaned);
        }
        out
    }

    /// Hands free slots of `key`'s bucket to its oldest waiters under its group's live limit;
    /// returns how many were admitted. The server calls it from its backstop sweep; a release
    /// already does this for its own bucket.
    pub fn drain(&self, key: &BucketKey) -> u64 {
        let key = self.hashed(key);
        let shard = self.shard(key.hash);
        let mut wakes = WakeList::default();
        let granted = {
            let mut guard = shard.state.lock();
            let state = &mut *guard;
            match state.buckets.get_mut(&key) {
                Some(bucket) => queue::settle(bucket, &mut state.waiters, &mut wakes),
                None => 0,
            }
        };
        wakes.wake_all();
        granted
    }

    /// Drains every bucket whose waiters belong to `group` (after its limit was raised); returns
    /// how many were admitted. Walks every shard, one lock at a time.
    pub fn drain_group(&self, group: &GroupQueue) -> u64 {
        self.drain_where(|g| std::ptr::eq(g, group))
    }

    /// Drains every bucket with waiters (the server's backstop sweep); returns how many were
    /// admitted.
    pub fn drain_all(&self) -> u64 {
        self.drain_where(|_| true)
    }

    /// Drains the buckets whose group handle matches.
    fn drain_where(&self, mut matches: impl FnMut(&GroupQueue) -> bool) -> u64 {
        let mut granted = 0;
        for shard in self.shards.iter() {
            let mut wakes = WakeList::default();
            {
                let mut guard = shard.state.lock();
                let state = &mut *guard;
                for bucket in state.buckets.values_mut() {
                    if bucket.group.as_deref().is_some_and(&mut matches) {
                        granted += queue::settle(bucket, &mut state.waiters, &mut wakes);
                    }
                }
            }
            wakes.wake_all();
        }
        granted
    }

    /// Releases `group`'s backlog: marks the handle released (every later
    /// [`acquire`](Self::acquire) with it answers [`Acquire::Unthrottled`]) and resolves each of its
    /// parked waiters as [`Grant::Unthrottled`]; returns how many. For a group whose throttling
    /// was disabled, that was deleted or switched to `monitor`, or when the cluster mode leaves
    /// `enabled`. Walks every shard, one lock at a time; running permits are untouched.
    pub fn release_group(&self, group: &GroupQueue) -> u64 {
        group.mark_released();
        let mut released = 0;
        for shard in self.shards.iter() {
            let mut wakes = WakeList::default();
            {
                let mut guard = shard.state.lock();
                let state = &mut *guard;
                let mut emptied = false;
                for bucket in state.buckets.values_mut() {
                    if bucket
                        .group
                        .as_deref()
                        .is_some_and(|g| std::ptr::eq(g, group))
                    {
                        released += queue::release_all(bucket, &mut state.waiters, &mut wakes);
                        emptied |= bucket.is_idle();
                    }
                }
                if emptied {
                    state.buckets.retain(|_, b| !b.is_idle());
                }
            }
            wakes.wake_all();
        }
        released
    }

    /// Returns the number of requests parked in `key`'s bucket.
    pub fn num_parked(&self, key: &BucketKey) -> u64 {
        let key = self.hashed(key);
        let state = self.shard(key.hash).state.lock();
        state.buckets.get(&key).map_or(0, |b| b.queue.len())
    }

    /// Returns the tags of the requests parked in `key`'s bucket, oldest first.
    pub fn parked(&self, key: &BucketKey) -> Vec<u64> {
        let key = self.hashed(key);
        let state = self.shard(key.hash).state.lock();
        state
            .buckets
            .get(&key)
            .map(|b| b.queue.tags(&state.waiters).collect())
            .unwrap_or_default()
    }

    /// Returns every parked request as (bucket, tag), each bucket's oldest first, buckets in
    /// no particular order; exact per shard, not one instant across shards.
    pub fn parked_all(&self) -> Vec<(BucketKey, u64)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let state = shard.state.lock();
            for (k, b) in &state.buckets {
                out.extend(b.queue.tags(&state.waiters).map(|t| (k.key.clone(), t)));
            }
        }
        out
    }

    /// Returns the number of waiter nodes in use: parked, or resolved but not yet taken by their
    /// waiter. 0 once every waiter has completed or been dropped (no node leaks).
    pub fn num_waiter_nodes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.state.lock().waiters.num_used())
            .sum()
    }

    /// Returns the number of waiter nodes allocated, free or not: the high-water mark of
    /// parked requests, whose memory the shards keep for reuse.
    pub fn waiter_capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.state.lock().waiters.capacity())
            .sum()
    }

    /// Returns the number of requests in flight in `key`'s bucket (0 when it has no entry).
    pub fn in_flight(&self, key: &BucketKey) -> u64 {
        let key = self.hashed(key);
        let state = self.shard(key.hash).state.lock();
        state.buckets.get(&key).map_or(0, |b| b.in_flight)
    }

    /// Returns every live bucket with its in-flight count, in no particular order (a bucket
    /// whose only entries are parked waiters shows 0).
    ///
    /// Each shard is read under its own lock, one after the other, so the snapshot is exact per
    /// bucket but not one instant across buckets.
    pub fn buckets(&self) -> Vec<(BucketKey, u64)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let state = shard.state.lock();
            out.extend(
                state
                    .buckets
                    .iter()
                    .map(|(k, b)| (k.key.clone(), b.in_flight)),
            );
        }
        out
    }

    /// Returns the number of live buckets (those with requests in flight or parked).
    pub fn num_buckets(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.state.lock().buckets.len())
            .sum()
    }

    /// Returns how many releases found nothing to release; always 0 unless there is a bug (an
    /// N2 violation), which the table survives without underflow or resurrection.
    pub fn num_invariant_violations(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.state.lock().num_invariant_violations)
            .fold(0, u64::saturating_add)
    }

    /// Returns the number of shards.
    pub fn num_shards(&self) -> usize {
        self.shards.len()
    }

    /// Pairs `key` with its hash.
    fn hashed(&self, key: &BucketKey) -> HashedKey {
        HashedKey {
            hash: self.hasher.hash_one(key),
            key: key.clone(),
        }
    }

    /// The shard of a key hash.
    fn shard(&self, hash: u64) -> &Arc<Shard> {
        // Bits 32.. of the hash: hashbrown indexes with the low bits and tags with the top 7.
        let index = (hash >> 32) as usize & self.shard_mask;
        &self.shards[index]
    }
}

impl Default for PermitTable {
    fn default() -> Self {
        PermitTable::new()
    }
}

impl fmt::Debug for PermitTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitTable")
            .field("num_shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl Permit {
    /// Returns the bucket this permit counts in.
    pub fn key(&self) -> &BucketKey {
        &self.key.key
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.shard.release(&self.key);
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("key", &self.key.key)
            .finish()
    }
}

impl Shard {
    /// Releases one slot of `key`'s bucket: hands it to the oldest waiter when one is parked and
    /// the live limit allows (N4), and removes the entry when that drains it (N3). The woken
    /// waiter is woken after the lock is released.
    fn release(&self, key: &HashedKey) {
        let mut wakes = WakeList::default();
        self.state.lock().release_slot(key, &mut wakes);
        wakes.wake_all();
    }
}

impl ShardState {
    /// Pops the oldest waiter of `key`'s bucket and hands it the external grant `token`; the
    /// entry goes if that leaves the bucket idle (N3). `None` when there is no waiter.
    fn grant_external(&mut self, key: &HashedKey, token: u64, wakes: &mut WakeList) -> Option<u64> {
        let bucket = self.buckets.get_mut(key)?;
        let i = bucket.queue.pop_front(&mut self.waiters)?;
        let node = self.waiters.get_mut(i);
        node.state = queue::NodeState::External;
        node.token = token;
        let tag = node.tag;
        if let Some(w) = node.take_waker() {
            wakes.push(w);
        }
        if let Some(group) = &bucket.group {
            group.leave_places(1);
        }
        bucket.after_leaving_queue();
        if bucket.is_idle() {
            self.buckets.remove(key);
        }
        Some(tag)
    }

    /// A waiter holding the external grant `token` was dropped before it took it: the grant
    /// goes to the next waiter of the bucket, else to the orphan list (N7).
    pub(super) fn pass_external(&mut self, key: &HashedKey, token: u64, wakes: &mut WakeList) {
        if self.grant_external(key, token, wakes).is_none() {
            self.orphaned.push((key.key.clone(), token));
        }
    }

    /// Gives back one slot of `key`'s bucket under the lock, passing it on to waiters as the
    /// live limit allows, and removes the entry when the bucket is idle (N3).
    ///
    /// A release with nothing to release is counted and otherwise ignored: the count never
    /// underflows and a missing entry is never re-created (N2).
    fn release_slot(&mut self, key: &HashedKey, wakes: &mut WakeList) {
        let drained = match self.buckets.get_mut(key) {
            Some(bucket) => {
                if !bucket.release() {
                    self.num_invariant_violations = self.num_invariant_violations.saturating_add(1);
                }
                queue::settle(bucket, &mut self.waiters, wakes);
                bucket.is_idle()
            }
            None => {
                self.num_invariant_violations = self.num_invariant_violations.saturating_add(1);
                false
            }
        };
        if drained {
            self.buckets.remove(key);
        }
    }
}

/// Whether two handles are the same group's.
fn same_group(a: &GroupQueue, b: &GroupQueue) -> bool {
    std::ptr::eq(a, b)
}

impl BucketState {
    /// Takes one slot if fewer than `limit` are in flight (N1).
    fn try_admit(&mut self, limit: u64) -> Result<(), Throttled> {
        if self.in_flight >= limit {
            return Err(Throttled {
                in_flight: self.in_flight,
                limit,
            });
        }
        // No overflow: in_flight < limit <= u64::MAX.
        self.in_flight += 1;
        debug_assert!(self.in_flight <= limit, "N1: admission above the limit");
        Ok(())
    }

    /// Gives back one slot; returns false, changing nothing, when none was taken.
    fn release(&mut self) -> bool {
        match self.in_flight.checked_sub(1) {
            Some(n) => {
                self.in_flight = n;
                true
            }
            None => false,
        }
    }

    /// Whether the bucket has nothing in flight and nobody parked, so its entry must go (N3).
    fn is_idle(&self) -> bool {
        self.in_flight == 0 && self.queue.is_empty()
    }

    /// Admits a request if nobody waits and the limit allows, else parks it if `policy` leaves
    /// room (N5, D13); `Ok(None)` is admitted, `Ok(Some((node, group_parked)))` parked, with
    /// the group's parked count its place was taken at.
    fn admit_or_park(
        &mut self,
        slab: &mut Slab,
        group: &Arc<GroupQueue>,
        policy: QueuePolicy,
        limit: u64,
        tag: u64,
    ) -> Result<Option<(u32, u64)>, Refused> {
        if self.queue.is_empty() && self.try_admit(limit).is_ok() {
            return Ok(None);
        }
        let queued = self.queue.len();
        // The bucket's waiters all count in one handle: the first one's.
        let owner = self.group.as_ref().unwrap_or(group);
        let ceiling = policy.group_ceiling;
        let refuse = |reason| Refused {
            reason,
            in_flight: self.in_flight,
            limit,
            queued,
            group_queued: owner.num_parked(),
        };
        let share = owner.fair_share(ceiling, queued > 0);
        let group_full = |owner: &GroupQueue| {
            if queued < share {
                // Turned away under its share: the buckets holding more must yield (D13).
                owner.mark_contended();
            }
            refuse(RefusalReason::GroupQueueFull)
        };
        match policy.refusal(queued, owner.num_parked(), share) {
            None => {}
            Some(RefusalReason::GroupQueueFull) => return Err(group_full(owner)),
            Some(reason) => return Err(refuse(reason)),
        }
        // The exact bound: one compare-exchange against the ceiling (N5).
        let Ok(group_parked) = owner.try_take_place(ceiling) else {
            return Err(group_full(owner));
        };
        let node = self.queue.push_back(slab, tag);
        if queued == 0 {
            debug_assert!(
                self.group.is_none(),
                "a bucket without waiters kept a group"
            );
            group.bucket_started_waiting();
            self.group = Some(Arc::clone(group));
        }
        Ok(Some((node, group_parked)))
    }

    /// Drops the group handle once the last waiter has left.
    fn after_leaving_queue(&mut self) {
        if self.queue.is_empty()
            && let Some(group) = self.group.take()
        {
            group.bucket_stopped_waiting();
        }
    }
}

impl PartialEq for HashedKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl Eq for HashedKey {}

impl Hash for HashedKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    /// Not reached ([`HashedKey`] writes one `u64`); folds the bytes in (FNV-1a) so that any
    /// other use would still hash correctly.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}
