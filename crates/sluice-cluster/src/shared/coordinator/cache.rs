//! The coordinator's idle-lease cache: leases of remote owners kept between one request of
//! their bucket and the next (the reuse window), filled by batches, kept while the owner
//! has room nobody is owed, and one call out for requests that miss together — invariants
//! K6–K12. The protocol itself (acquire, hold, release, offers, fail open: K1–K5) is
//! [`super`]'s; this file is the part of [`Coordinator`] that saves calls to owners.
//!
//! # The reuse window (issue 14 point 10)
//!
//! A request of a shared-only bucket would otherwise cost an acquire and a release round trip
//! to the bucket's owner. When a request that ran on a lease of a remote owner ends, the lease
//! is not released at once if it is younger than [`REUSE_WINDOW`] (counted from when this
//! coordinator got it from the owner: a grant's answer or an offer) and no request of the
//! bucket is parked here: it becomes *idle* in a small per-bucket cache, and the next request
//! of the bucket on this node takes it before asking the owner (no call; counted as acquired,
//! and in `reused`). An idle lease whose window ends is released by a background task through
//! the releaser (batched, as any release). The owner is unchanged: an idle lease is a lease it
//! counts, so C1 (the owner's P1) and K1 hold as before. Since every lease goes back to its
//! owner within [`REUSE_WINDOW`] + the longest request that ran on it, a coordinator denied and
//! registered as a waiter gets the owner's round-robin offer within that plus the network:
//! no coordinator keeps a bucket's slots. A bucket with requests parked here (its owner denied
//! us: contended) releases at once, so the owner's round robin decides who runs next. Leases
//! of buckets this node owns are never cached (an in-process acquire and release cost about a
//! microsecond: nothing to save), nor are leases of buckets whose `shared_limit` is below
//! [`IDLE_SHARE`] (a small pool, where an idle slot here would refuse a request elsewhere).
//!
//! # Batches (issue 14 point 10)
//!
//! The window saves calls only once a node holds as many leases as it runs requests: a node
//! whose load ramps up, or whose leases' windows just ended, would still pay one acquire per
//! request it adds. So an acquire sent to a remote owner asks for `extra` leases besides its
//! own — as many as the bucket's requests running here, within the idle cache's caps
//! (K9) and the allowance (K1), none while requests of the bucket are parked here — and the
//! owner grants them from room no waiter is owed (the pool's P7). They go into the idle cache
//! at once, their window starting at the grant (K10): one call brings a node's leases up to
//! twice what it runs, and a window's worth of requests then runs without calling the owner.
//! A batch also restarts the windows of the node's other leases of the bucket (the owner had
//! room and no waiter as it answered), so under a steady load the requests that outlive a
//! window keep their lease for the next request rather than releasing it.
//!
//! # Extending hot windows (issue 14 point 10)
//!
//! Windows still end every [`REUSE_WINDOW`], and with them a node's idle leases (and the
//! leases of requests running past it, released when they end), after which the next requests
//! of a busy bucket ask the owner again, on their way. So shortly before the leases of a bucket,
//! idle or running, reach the end of their window ([`EXTEND_AHEAD`]), if requests took leases
//! of it from the cache during it, the expiry task asks the owner — one call for all such
//! buckets of that owner, off every request's path — whether it has room no waiter is owed
//! ([`SharedCall::Room`]); for the buckets that have, the windows of the node's leases start
//! again (K11), exactly as a batch restarts them (K10). A bucket whose owner has a waiter, or
//! is full, or does not answer, lets its windows end as before, and one that nobody reused
//! gives its idle leases back: under a steady load a node calls each owner about once per
//! window, whatever the number of requests.
//!
//! # One call for requests that miss together (issue 14 point 10)
//!
//! Requests of a bucket that find no idle lease at the same moment (a burst's start, a node
//! whose concurrency jumps) would each call the owner. A request that will not park instead
//! waits for a call already out for its bucket and then looks in the idle cache, where that
//! call's batch went; the call asks for a batch as large as the requests running plus those
//! on their way to the owner (K12). A burst from nothing takes two calls: the first asks for
//! what it saw, the second for everything that arrived meanwhile.
//!
//! # Invariants
//!
//! K1–K5 are the coordinator's (see [`super`]).
//!
//! - **K6 (an idle lease runs one request at a time)** — an idle lease is in the cache or
//!   held by exactly one request, never both: taking it removes it from the cache under the
//!   state lock and gives it a fresh token; caching it removes its holder's entry in the same
//!   critical section. Tested by `test_an_idle_lease_is_reused_by_one_request_at_a_time` and
//!   the simulation (no lease runs two requests at once).
//! - **K7 (reuse window)** — a lease is taken from the cache only while it is younger than
//!   [`REUSE_WINDOW`] and only for the bucket's current owner (a lease of an owner that left or
//!   of a bucket the ring moved is released, never reused); a request that ends on a lease
//!   older than the window releases it. So every lease goes back to its owner at most
//!   [`REUSE_WINDOW`] + the longest request that ran on it after this coordinator got it.
//!   Tested by `test_an_idle_lease_is_released_when_its_window_ends_and_never_reused_after`
//!   and the simulation (every reuse within [`REUSE_WINDOW`] of the lease's first admission).
//! - **K8 (no idle lease leaks)** — an idle lease leaves the cache exactly once: reused, released
//!   (its window ended, its owner or bucket moved, its bucket's limit was lowered, shutdown:
//!   [`Coordinator::release_idle`]) or dropped when its owner reported it lost on renewal, so
//!   `cached + prefetched = reused + idle_released + idle_lost + num_idle()` always. Tested by
//!   the unit
//!   tests of the cache and the simulation (the counters at the end of every seed, nothing
//!   idle once settled, and in clean scenarios no lease reclaimed by an owner's TTL sweep).
//! - **K9 (contended buckets go back to the owner)** — a lease whose bucket has a request
//!   parked here when it ends is released, not cached ([`super::OfferSink::num_parked`]); the idle
//!   leases of a bucket are at most `min(`[`MAX_IDLE_PER_BUCKET`]`, limit / `[`IDLE_SHARE`]`)`
//!   and [`MAX_IDLE`] in all. Tested by
//!   `test_a_lease_whose_bucket_has_parked_requests_is_released_not_cached`.
//! - **K10 (batches)** — the extra leases of a batch are idle leases from their grant: they
//!   count in the bucket's allowance (K1) and caps (K9) — those that do not fit are released at
//!   once — and are reusable only within [`REUSE_WINDOW`] of the grant (K7); a batch is asked
//!   only of a remote owner, and only while no request of the bucket is parked here. A batch
//!   of at least one lease also restarts the window of this node's other leases of the bucket
//!   from that owner: the owner granted it only because no waiter was owed room (P7), which is
//!   what a fresh grant of each would have shown. So K7 reads "within [`REUSE_WINDOW`] of the
//!   latest grant of the lease or of a batch of its bucket and owner", and a lease still goes
//!   back within [`REUSE_WINDOW`] + the longest request once its owner has a waiter (no batch
//!   is granted then). Tested by
//!   `test_a_batch_fills_the_idle_cache_and_runs_the_next_requests_without_a_call`,
//!   `test_a_batch_beyond_the_caches_room_is_released`,
//!   `test_a_batch_restarts_the_window_of_the_buckets_other_leases` and the simulation (K1,
//!   K6–K8, and K7 counted from the latest batch).
//! - **K11 (extended windows)** — a window restarts only on the owner's word that the bucket
//!   has room no waiter is owed: a batch (K10) or a `Room` answer, asked for a bucket only if
//!   one of its leases was taken from the cache since the windows last started, once per
//!   window. So K7's "latest grant" includes these answers. An idle lease whose window ends
//!   while its owner's answer is out is neither reused nor released until the answer (or its
//!   [`ACQUIRE_DEADLINE`]): so once the owner has a waiter (it answers no, and grants no
//!   batch) every lease of the bucket goes back within [`REUSE_WINDOW`] + the longer of the
//!   longest request and [`ACQUIRE_DEADLINE`]; a bucket nobody reused lets its idle leases go
//!   at the end of their window. Tested by
//!   `test_a_reused_buckets_windows_are_extended_while_its_owner_has_unowed_room`,
//!   `test_a_running_lease_of_a_reused_bucket_has_its_window_extended_too`,
//!   `test_an_idle_lease_whose_window_ends_while_its_owner_is_asked_waits_for_the_answer` and
//!   the simulation (K7 counted from the latest batch or room answer).
//! - **K12 (one call out per bucket for requests that do not park)** — at most one request
//!   per bucket is the caller others wait for ([`State::asking`]); its guard is dropped when
//!   its call ends or its request goes away, which wakes the waiters. A waiter waits at most
//!   [`BATCH_WAITS`] times, all within the first half of its acquire deadline, then calls
//!   itself with the half left at least: a denial or a lost call delays it by at most two
//!   round trips and never past the deadline, a call of its own is not cut short by the waits
//!   (found by the simulation: two waits for calls answered late left a third call too little
//!   time, and the request failed open), and nobody waits for a call that is not out. Requests that park (`wants_queue`) always call: their
//!   call registers the node as a waiter. Tested by
//!   `test_requests_that_miss_together_share_calls_and_their_batches`,
//!   `test_a_request_waiting_for_a_call_whose_request_is_gone_asks_itself` and the simulation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::ACQUIRE_DEADLINE;
use super::{Coordinator, Held, SharedLease, State};
use crate::rpc::{SharedCall, SharedReply};

/// How long after this coordinator got a lease (a grant's answer, an offer) another request of
/// its bucket on this node may reuse it without asking the owner (K7). 50 ms bounds what the
/// cache adds to the wait of a waiter on another coordinator far below the 200 ms acquire
/// deadline ([`ACQUIRE_DEADLINE`]), while at 100 requests a second per slot or more it
/// turns several requests into one acquire and release pair.
pub const REUSE_WINDOW: Duration = Duration::from_millis(50);

/// How long before a bucket's idle leases reach the end of their window the expiry task asks
/// their owner whether it has room no waiter is owed, for buckets whose idle leases were reused
/// since their window last started (K11). Half of [`REUSE_WINDOW`]: a call between idle nodes
/// takes well under a millisecond, but an owner whose cores are busy with its own searches
/// answers in tens of milliseconds. With 10 ms, three nodes under bursts on two cores lost
/// windows to late answers: their idle leases went back, and the next burst's requests on
/// that node waited for a call to the owner (a non-owner called it for 0.66 % of its
/// requests; with 25 ms and the wait below, 0.19 %). Leases whose window ends while the
/// answer is out wait for it, unused (K11).
pub const EXTEND_AHEAD: Duration = Duration::from_millis(25);

/// How many times a request waits for another request's call to an owner before sending its
/// own (K12): the first call of a burst asks only for the requests it saw, the second for all
/// that arrived while the first was out; a third would only delay a request whose bucket the
/// owner refuses (each wait is a round trip).
pub const BATCH_WAITS: usize = 2;

/// The most idle leases one bucket keeps on a coordinator (K9). Idle leases are those between
/// one request's end and the next one's start: in a closed loop that is a small fraction of
/// a node's in-flight requests of the bucket, so 32 covers dozens of concurrent clients per
/// node, while capping what one node keeps idle of a large pool for at most [`REUSE_WINDOW`].
pub const MAX_IDLE_PER_BUCKET: u64 = 32;

/// A bucket keeps at most `shared_limit / IDLE_SHARE` idle leases per coordinator (K9): at
/// most an eighth of its pool idles on one node, and a pool smaller than 8 caches nothing —
/// there, every slot counts and requests meet the limit, where a slot idling here would make
/// another node refuse or park a request.
pub const IDLE_SHARE: u64 = 8;

/// The most idle leases a coordinator keeps in all buckets (K9): bounds the cache's memory
/// (about 100 bytes a lease) and the expiry task's scan, whatever the number of user buckets.
pub const MAX_IDLE: u64 = 4_096;

/// The one call out for a bucket that others wait for (K12): dropping it (the call answered,
/// failed, or its request gone) lets the next miss call and wakes the waiters, which look in
/// the idle cache, where the call's batch is.
pub(super) struct Asking<'a> {
    c: &'a Coordinator,
    bucket: Arc<str>,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.c.state.lock().asking.remove(&self.bucket);
        self.c.batch_done.notify_waiters();
    }
}

/// A request on its way to a remote owner, counted in [`State::wanting`] until dropped (K12).
pub(super) struct Wanting<'a> {
    c: &'a Coordinator,
    bucket: Arc<str>,
}

impl<'a> Wanting<'a> {
    pub(super) fn new(c: &'a Coordinator, bucket: &str) -> Wanting<'a> {
        let bucket: Arc<str> = Arc::from(bucket);
        *c.state.lock().wanting.entry(bucket.clone()).or_insert(0) += 1;
        Wanting { c, bucket }
    }
}

impl Drop for Wanting<'_> {
    fn drop(&mut self) {
        let mut st = self.c.state.lock();
        if let Some(n) = st.wanting.get_mut(&self.bucket) {
            *n -= 1;
            if *n == 0 {
                st.wanting.remove(&self.bucket);
            }
        }
    }
}

/// A lease no request holds, kept for the next request of its bucket (K6–K9).
#[derive(Debug, Clone)]
pub(super) struct Idle {
    pub(super) owner: Arc<str>,
    pub(super) lease: u64,
    /// When this coordinator got it: reusable until `got_at + REUSE_WINDOW`.
    pub(super) got_at: Instant,
}

impl State {
    /// Puts `lease` of `bucket` from `owner`, got at `got_at`, in the idle cache (its slot is
    /// already counted in `held`); returns whether its window ends before the expiry task
    /// wakes, which must then be woken (K7, K8).
    pub(super) fn put_idle(
        &mut self,
        bucket: &Arc<str>,
        owner: Arc<str>,
        lease: u64,
        got_at: Instant,
    ) -> bool {
        if let Some(a) = self.per_bucket.get_mut(bucket) {
            a.idle += 1;
        }
        self.num_idle += 1;
        self.idle.entry(bucket.clone()).or_default().push(Idle {
            owner,
            lease,
            got_at,
        });
        let ends = got_at + REUSE_WINDOW;
        let wake = self.wake_at.is_none_or(|at| ends < at);
        if wake {
            self.wake_at = Some(ends);
        }
        wake
    }

    /// Starts the reuse window of this node's leases of `bucket` from `owner`, running or
    /// idle, again at `now`: the owner has just shown room no waiter is owed (K10, K11).
    fn restart_windows(&mut self, bucket: &Arc<str>, owner: &Arc<str>, now: Instant) {
        for h in self.held.values_mut() {
            if h.bucket == *bucket && h.lease.as_ref().is_some_and(|(o, _)| o == owner) {
                h.got_at = now;
            }
        }
        if let Some(list) = self.idle.get_mut(bucket) {
            for i in list.iter_mut().filter(|i| i.owner == *owner) {
                i.got_at = now;
            }
        }
        if let Some(a) = self.per_bucket.get_mut(bucket) {
            a.reused = 0;
        }
    }

    /// Removes the idle leases of `bucket` that `drop_it` selects, fixing the counts; returns
    /// them as `(owner, lease)` in the cache's order.
    pub(super) fn take_idle_where(
        &mut self,
        bucket: &str,
        mut drop_it: impl FnMut(&Idle) -> bool,
    ) -> Vec<(Arc<str>, u64)> {
        let mut out = Vec::new();
        let Some(list) = self.idle.get_mut(bucket) else {
            return out;
        };
        list.retain(|i| {
            if drop_it(i) {
                out.push((i.owner.clone(), i.lease));
                false
            } else {
                true
            }
        });
        if list.is_empty() {
            self.idle.remove(bucket);
        }
        let n = out.len() as u64;
        self.num_idle -= n;
        if let Some(a) = self.per_bucket.get_mut(bucket) {
            a.idle -= n;
            a.held -= n;
            if a.held == 0 {
                self.per_bucket.remove(bucket);
            }
        }
        out
    }
}

impl Coordinator {
    /// Takes an idle lease of `bucket` granted by `owner` (its current owner) for a new
    /// request under `limit`, if one is younger than [`REUSE_WINDOW`] (K6, K7). Idle leases of
    /// the bucket that are too old, of another owner, or beyond `limit` are released.
    pub(super) fn reuse(
        self: &Arc<Self>,
        bucket: &str,
        owner: &str,
        limit: u64,
    ) -> Option<SharedLease> {
        let now = Instant::now();
        let mut st = self.state.lock();
        if !st.idle.contains_key(bucket) {
            return None;
        }
        // Leases past their window go back, but for those whose owner is being asked for room
        // (K11): they wait for its answer, unused.
        let asked = st
            .rooming
            .iter()
            .any(|(b, o)| **b == *bucket && **o == *owner);
        let mut release = st.take_idle_where(bucket, |i| {
            *i.owner != *owner || (now >= i.got_at + REUSE_WINDOW && !asked)
        });
        // The limit as asked now: a lowered one sheds idle leases first (K1).
        let excess = st.per_bucket.get_mut(bucket).map_or(0, |a| {
            a.limit = limit;
            a.held.saturating_sub(limit)
        });
        let mut shed = excess;
        release.extend(st.take_idle_where(bucket, |_| {
            let go = shed > 0;
            shed = shed.saturating_sub(1);
            go
        }));
        // The youngest in its window: the oldest ones expire first, so the cache shrinks to
        // what the load needs.
        let taken = st.idle.get_mut(bucket).and_then(|list| {
            let at = list.iter().rposition(|i| now < i.got_at + REUSE_WINDOW)?;
            Some(list.remove(at))
        });
        let slot = taken.map(|i| {
            if st.idle.get(bucket).is_some_and(Vec::is_empty) {
                st.idle.remove(bucket);
            }
            st.num_idle -= 1;
            let bucket: Arc<str> = st
                .per_bucket
                .get_key_value(bucket)
                .map_or_else(|| Arc::from(bucket), |(k, _)| k.clone());
            if let Some(a) = st.per_bucket.get_mut(&bucket) {
                a.idle -= 1;
                a.reused += 1;
            }
            let held = Held {
                bucket,
                lease: Some((i.owner, i.lease)),
                got_at: i.got_at,
            };
            self.slot(&mut st, held, true)
        });
        drop(st);
        self.release_many(release);
        if slot.is_some() {
            self.stats.acquired.fetch_add(1, Ordering::Relaxed);
            self.stats.reused.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }

    /// Becomes the request that asks `bucket`'s owner (`Ok`: the returned guard ends that
    /// when dropped, waking the waiters), or, if another request's call is out, waits for it
    /// to end, at most until `until` (`Err`: try the idle cache) (K12).
    pub(super) async fn wait_for_batch(
        &self,
        bucket: &str,
        until: Instant,
    ) -> Result<Asking<'_>, ()> {
        let done = self.batch_done.notified();
        tokio::pin!(done);
        done.as_mut().enable();
        {
            let mut st = self.state.lock();
            if !st.asking.contains(bucket) {
                let bucket: Arc<str> = Arc::from(bucket);
                st.asking.insert(bucket.clone());
                return Ok(Asking { c: self, bucket });
            }
        }
        let _ = tokio::time::timeout_at(until, done).await;
        Err(())
    }

    /// How many leases beyond the one asked for to ask `bucket`'s remote owner for (K10): as
    /// many as the bucket's requests running here — so a node's leases double with each call
    /// as a load ramps up, and a lone request asks for its own only — within what its idle cache may keep (K9) and its allowance (K1). None
    /// while other requests of the bucket are parked here (contended: K9), or when stopping.
    pub(super) fn extra_wanted(&self, bucket: &str, limit: u64, wants_queue: bool) -> u64 {
        let room = {
            let st = self.state.lock();
            if st.closing {
                return 0;
            }
            let (held, idle) = st
                .per_bucket
                .get(bucket)
                .map_or((0, 0), |a| (a.held, a.idle));
            let max_idle = MAX_IDLE_PER_BUCKET.min(limit / IDLE_SHARE);
            // The other requests on their way to the owner, beside this one.
            let others = st.wanting.get(bucket).map_or(0, |n| n.saturating_sub(1));
            (held - idle + others)
                .min(max_idle.saturating_sub(idle))
                .min(limit.saturating_sub(held + 1))
                .min(MAX_IDLE.saturating_sub(st.num_idle))
        };
        if room == 0 {
            return 0;
        }
        // The request asking may itself be parked (enqueue-first): others make it contended.
        let parked = self.sink.get().map_or(0, |s| s.num_parked(bucket));
        if parked > u64::from(wants_queue) {
            0
        } else {
            room
        }
    }

    /// Puts the extra leases of a batch `owner` granted with a lease of `bucket` in the idle
    /// cache, their window starting now (K10); those the cache or the allowance cannot take
    /// (K1, K9: the limit, other requests' leases went idle meanwhile, shutdown) are released.
    ///
    /// A batch with at least one lease is the owner's word that, as it answered, no waiter was
    /// owed room in the bucket (P7): the windows of this node's other leases of the bucket from
    /// that owner, running or idle, start again now (K10), as if granted with it.
    pub(super) fn stash(&self, bucket: &Arc<str>, owner: &Arc<str>, leases: Vec<u64>) {
        if leases.is_empty() {
            return;
        }
        let now = Instant::now();
        let (mut release, mut kept, mut wake) = (Vec::new(), 0, false);
        let mut st = self.state.lock();
        st.restart_windows(bucket, owner, now);
        for lease in leases {
            let fits = !st.closing
                && st.num_idle < MAX_IDLE
                && st
                    .per_bucket
                    .get(bucket)
                    .is_some_and(|a| a.held < a.limit && a.idle < a.max_idle());
            if !fits {
                release.push(lease);
                continue;
            }
            if let Some(a) = st.per_bucket.get_mut(bucket) {
                a.held += 1;
            }
            wake |= st.put_idle(bucket, owner.clone(), lease, now);
            kept += 1;
        }
        drop(st);
        self.stats.prefetched.fetch_add(kept, Ordering::Relaxed);
        if wake {
            self.went_idle.notify_one();
        }
        for lease in release {
            let _ = self.releases.send((owner.clone(), lease));
        }
    }

    /// Queues the release of idle leases taken out of the cache (K8).
    fn release_many(&self, leases: Vec<(Arc<str>, u64)>) {
        for (owner, lease) in leases {
            self.stats.idle_released.fetch_add(1, Ordering::Relaxed);
            let _ = self.releases.send((owner, lease));
        }
    }

    /// Idle leases in the cache, in all.
    pub fn num_idle(&self) -> u64 {
        self.state.lock().num_idle
    }

    /// Idle leases of `bucket` in the cache.
    pub fn idle_for(&self, bucket: &str) -> u64 {
        self.state
            .lock()
            .per_bucket
            .get(bucket)
            .map_or(0, |a| a.idle)
    }

    /// Every idle lease as `(bucket, owner, lease)`, sorted (for tests and the simulation).
    pub fn idle_leases(&self) -> Vec<(Arc<str>, Arc<str>, u64)> {
        let st = self.state.lock();
        let mut out: Vec<(Arc<str>, Arc<str>, u64)> = st
            .idle
            .iter()
            .flat_map(|(b, list)| list.iter().map(|i| (b.clone(), i.owner.clone(), i.lease)))
            .collect();
        out.sort();
        out
    }

    /// When the expiry task is next due (the end of a window it waits for), if at all (for
    /// tests: a due time not after now means it has work it has not done yet).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.state.lock().wake_at
    }

    /// `Room` calls out, one per bucket and owner (for tests).
    pub fn num_room_calls(&self) -> usize {
        self.state.lock().rooming.len()
    }

    /// Releases every idle lease now and caches no more (the node is stopping), waiting for
    /// the owners' answers (K8). Leases of requests still running are released as they end.
    ///
    /// # Cancel safety
    /// Dropping the future stops the waiting; releases not yet delivered are reclaimed by the
    /// owners (TTL, or the purge once this node leaves the membership).
    pub async fn release_idle(&self) {
        let leases = {
            let mut st = self.state.lock();
            st.closing = true;
            let buckets: Vec<Arc<str>> = st.idle.keys().cloned().collect();
            let mut all = Vec::new();
            for b in buckets {
                all.extend(st.take_idle_where(&b, |_| true));
            }
            all
        };
        let mut batch: BTreeMap<Arc<str>, Vec<u64>> = BTreeMap::new();
        for (owner, lease) in leases {
            self.stats.idle_released.fetch_add(1, Ordering::Relaxed);
            batch.entry(owner).or_default().push(lease);
        }
        for (owner, mut leases) in batch {
            leases.sort_unstable();
            let _ = self
                .call_owner(&owner, SharedCall::Release { leases })
                .await;
        }
    }

    /// Asks the owners of buckets whose idle leases' windows end within [`EXTEND_AHEAD`] of
    /// `now` and were reused since the windows started whether they have room no waiter is
    /// owed, one call per owner, each in a task of its own (a slow owner delays no release);
    /// restarts the windows of the buckets that have (K11).
    fn extend_hot(self: &Arc<Self>, now: Instant) {
        let asks: BTreeMap<Arc<str>, Vec<Arc<str>>> = {
            let mut st = self.state.lock();
            if st.closing {
                return;
            }
            let ending = now + EXTEND_AHEAD;
            // (bucket, owner) of leases, running or idle, whose window ends soon.
            let mut hot: BTreeSet<(Arc<str>, Arc<str>)> = BTreeSet::new();
            for (b, list) in &st.idle {
                for i in list.iter().filter(|i| i.got_at + REUSE_WINDOW <= ending) {
                    hot.insert((b.clone(), i.owner.clone()));
                }
            }
            for h in st.held.values() {
                if let Some((o, _)) = &h.lease
                    && h.got_at + REUSE_WINDOW <= ending
                {
                    hot.insert((h.bucket.clone(), o.clone()));
                }
            }
            hot.retain(|(b, o)| {
                **o != *self.me
                    && st.per_bucket.get(b).is_some_and(|a| a.reused > 0)
                    && !st.rooming.contains(&(b.clone(), o.clone()))
            });
            let mut asks: BTreeMap<Arc<str>, Vec<Arc<str>>> = BTreeMap::new();
            for (b, o) in hot {
                if let Some(a) = st.per_bucket.get_mut(&b) {
                    // Asked once per window: reuses from now on count toward the next one.
                    a.reused = 0;
                }
                st.rooming.insert((b.clone(), o.clone()));
                asks.entry(o).or_default().push(b);
            }
            for buckets in asks.values_mut() {
                buckets.sort();
            }
            asks
        };
        for (owner, buckets) in asks {
            let c = Arc::downgrade(self);
            tokio::spawn(async move {
                let names = buckets.iter().map(|b| b.to_string()).collect();
                let Some(this) = c.upgrade() else { return };
                let call = SharedCall::Room { buckets: names };
                let reply = this.call_owner_within(&owner, call, ACQUIRE_DEADLINE).await;
                let free = match reply {
                    Some(SharedReply::Room { free }) => free,
                    _ => Vec::new(),
                };
                let now = Instant::now();
                let mut st = this.state.lock();
                for (i, b) in buckets.iter().enumerate() {
                    st.rooming.remove(&(b.clone(), owner.clone()));
                    if free.get(i) == Some(&true) && !st.closing {
                        st.restart_windows(b, &owner, now);
                        this.stats.extended.fetch_add(1, Ordering::Relaxed);
                    }
                }
                drop(st);
                // Leases kept past their window for this answer go now, unless it restarted
                // them.
                this.went_idle.notify_one();
            });
        }
    }

    /// Releases the idle leases whose window has ended at `now`, but for those whose owner is
    /// being asked for room (their `Room` task wakes this one when answered); returns when the
    /// next window ends: of an idle lease, or of a running lease of a reused bucket (K7, K8,
    /// K11).
    fn release_expired(&self, now: Instant) -> Option<Instant> {
        let rooming: Vec<(Arc<str>, Arc<str>)> =
            self.state.lock().rooming.iter().cloned().collect();
        let asked = |b: &str, i: &Idle| rooming.iter().any(|(rb, ro)| **rb == *b && *ro == i.owner);
        self.release_idle_where(|b, i| now >= i.got_at + REUSE_WINDOW && !asked(b, i));
        let mut st = self.state.lock();
        let idle = st
            .idle
            .iter()
            .flat_map(|(b, list)| list.iter().map(move |i| (b, i)))
            .filter(|(b, i)| !asked(b, i))
            .map(|(_, i)| i.got_at + REUSE_WINDOW)
            .min();
        // The windows of running leases of reused buckets end too: their owners are asked
        // ahead (K11). Only ends still to come: one already past was asked about.
        let running = st
            .held
            .values()
            .filter(|h| {
                h.lease.as_ref().is_some_and(|(o, _)| **o != *self.me)
                    && st.per_bucket.get(&h.bucket).is_some_and(|a| a.reused > 0)
            })
            .map(|h| h.got_at + REUSE_WINDOW)
            .filter(|end| *end > now)
            .min();
        let next = match (idle, running) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        st.wake_at = next;
        next
    }

    /// Releases the idle leases `select` picks, in a stable order (the simulation replays).
    fn release_idle_where(&self, mut select: impl FnMut(&str, &Idle) -> bool) {
        let mut release = {
            let mut st = self.state.lock();
            let mut buckets: Vec<Arc<str>> = st
                .idle
                .iter()
                .filter(|(b, list)| list.iter().any(|i| select(b, i)))
                .map(|(b, _)| b.clone())
                .collect();
            buckets.sort();
            let mut out = Vec::new();
            for b in buckets {
                out.extend(st.take_idle_where(&b, |i| select(&b, i)));
            }
            out
        };
        release.sort();
        self.release_many(release);
    }

    /// Releases idle leases whose bucket no longer belongs to their owner on the current ring
    /// (a member joined or left, K7).
    pub(super) fn release_moved(&self) {
        let ring = self.ring.read().clone();
        self.release_idle_where(|b, i| {
            ring.owner(b.as_bytes())
                .is_none_or(|m| *m.node_id != *i.owner)
        });
    }
}

/// Releases idle leases as their reuse window ends (K7, K8), after asking the owners of the
/// buckets whose leases were reused whether their windows may start again (K11): sleeps until
/// [`EXTEND_AHEAD`] before the next one ends (then until it ends), or until a lease goes idle
/// while the cache was empty.
pub(super) async fn expirer(c: Weak<Coordinator>, went_idle: Arc<Notify>, stop: CancellationToken) {
    loop {
        let next = {
            let Some(c) = c.upgrade() else { return };
            c.extend_hot(Instant::now());
            c.release_expired(Instant::now())
        };
        // Ask ahead of the end, unless that time has passed (asked already: then the end).
        let next = next.map(|at| {
            at.checked_sub(EXTEND_AHEAD)
                .filter(|ask| *ask > Instant::now())
                .unwrap_or(at)
        });
        match next {
            Some(at) => tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(at) => {}
                () = went_idle.notified() => {}
            },
            None => tokio::select! {
                () = stop.cancelled() => return,
                () = went_idle.notified() => {}
            },
        }
    }
}
