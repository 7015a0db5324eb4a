//! The coordinator's side of the shared tier: asking a bucket's owner for a lease (no hop
//! when this node owns it), holding leases for running requests (renewed in the background,
//! released without blocking), taking the owner's offers (pushes) to parked requests, and
//! failing open — within a bound — when no owner answers.
//!
//! A lease of a remote owner whose request ended may be kept for the next request of its
//! bucket on this node rather than released: the idle-lease cache, with its batches, extended
//! windows and shared calls, is `coordinator/cache.rs` (invariants K6–K12).
//!
//! # Invariants
//! - **K1 (fail-open bound)** — per bucket, the leases this coordinator holds plus the requests
//!   it admitted failing open never exceed the bucket's `shared_limit` as last asked: a fail-open
//!   admission is allowed only below it, and a grant or an offer that would exceed it (the
//!   node already runs requests on slots the owner does not count: fail-open slots, leases
//!   lost or granted by an owner that has since changed) is given back to the owner — a grant
//!   by a release, answered `Denied` without a registration (the server's backstop sweep asks
//!   again), an offer by answering it unused. So while an owner is lost, each coordinator
//!   over-admits at most `shared_limit`, and a bucket's cluster-wide in-flight stays within
//!   `node_limit × N + shared_limit × N` (the ceiling plus `(N − 1) × shared_limit`). Tested by
//!   `test_fail_open_is_bounded_by_the_shared_limit` and the simulation.
//! - **K2** — a lease ends exactly once: its [`SharedLease`] is the only handle, not `Clone`;
//!   dropping it queues one release (fail-open slots release locally). A lease the owner
//!   reported lost on renewal is not released again.
//! - **K3** — dropping a [`SharedLease`] never blocks: the release of a remote owner's lease
//!   goes to a background task through an unbounded channel (a send never waits), which
//!   batches releases per owner; a lease this node owns is released in place, under the
//!   owner's pool lock (no I/O: an offer the release frees is sent by a task of its own).
//! - **K13 (releases reach a returning owner)** — a release the owner did not answer (it was
//!   out of the membership, unreachable or paused) is sent again every [`RELEASE_RETRY`] and
//!   at every membership change, until the owner answers or [`super::LEASE_TTL`] has passed
//!   since the release (the owner's sweep has reclaimed the lease by then). So an owner that
//!   comes back from a pause gets its slots back as soon as it answers, not a TTL later (an
//!   outside trial saw a group blocked for 30 s after its owner's 6 s pause, every slot held
//!   by a request that had ended). A release that arrives twice is counted by the owner and
//!   changes nothing (P2 of `pool.rs`). Tested by
//!   `test_a_release_the_owner_missed_reaches_it_when_it_answers_again`.
//! - **K14 (late grants go back)** — an acquire's call runs in a task of its own, for up to
//!   [`super::ACQUIRE_LISTEN`] (as long as its connection can deliver it); the request waits
//!   for it at most its deadline and then fails open. A grant that arrives after the request
//!   stopped waiting (or went away) is released as it arrives: an owner that resumes from a
//!   pause and answers its backlog of acquires keeps no slot for requests that never ran on it
//!   (an outside trial saw a group's every slot held that way for 30 s, the TTL, after a 0.6 s
//!   pause of its owner under load), nor does one that an acquire reaches after a long
//!   partition healed (the call listened only for [`super::LEASE_TTL`] before, and the owner
//!   counted grants delivered later for a TTL: an outside trial, partitions over 30 s). Tested
//!   by `test_a_grant_that_comes_after_the_deadline_is_released` and
//!   `test_a_grant_delivered_after_a_long_partition_is_released`.
//! - **K15 (one owner holds back no other's releases)** — the releaser has at most one call
//!   out per owner and never waits for one owner's answer before calling another: an owner
//!   that does not answer (paused, or its call lost) delays only the releases of its own
//!   leases, by at most its call's deadline ([`CALL_DEADLINE`]); releases queued for an owner
//!   while its call is out go in its next call. Before, the releaser called the owners one
//!   after another, so one call to a paused owner — still in the membership until
//!   `DEAD_AFTER` — held back every release to every other owner, this node's own pool
//!   included, for up to 5 s: the interim owner that took the paused owner's buckets kept
//!   the slots of requests that had ended, with nothing running on them, and refused every
//!   request until the paused owner resumed. Found by the simulation's pauses (`tests/sim.rs`,
//!   seed 116); most likely what an outside trial saw: an interim owner holding a group's 2
//!   slots (`shared_leases_owned` 2, `shared_limit` 2) with nothing executing, every request
//!   429, for the last 2.6 s of an owner's 5 s SIGSTOP, cleared at SIGCONT. Tested by
//!   `test_an_owner_that_does_not_answer_holds_back_no_release_to_another`.
//! - **K4** — an offer is answered only after the sink has either handed the lease to a parked
//!   request (which now holds it) or refused it (then it is forgotten here without a release:
//!   the owner frees it on the `used = false` answer).
//! - **K5 (duplicate offers)** — a second copy of an offer (a network that duplicates, a
//!   retry) gets the answer of the first and never a second request: an offer whose lease this
//!   node holds is answered `used`, one among the last [`ANSWERED_OFFERS`] answered gets the
//!   same answer. Found by the simulation (`tests/sim.rs`): a duplicate used by one parked
//!   request while the original was answered unused let the owner offer the lease again.
//!   Tested by `test_a_duplicate_offer_gets_the_first_answer_and_runs_nothing`.
//! - **K16 (an owner that fails is not waited for)** — once a call to an owner failed for want
//!   of it (unreachable: refused or reset; or no answer within its deadline) with nothing
//!   answered by it since the call was sent, its breaker is open (`breaker.rs`, B1–B3):
//!   requests of its buckets are not sent to it and wait for nothing, each fails open at once
//!   within K1 or is `Unavailable`, until the owner answers a call again — a probe every
//!   [`PROBE_EVERY`] (one out at a time), or any call still out — or the ring moves its
//!   buckets. A breaker opening or closing wakes the parked requests' backstop
//!   ([`Coordinator::owners_changed`]). Tested by
//!   `test_an_owner_that_failed_is_not_asked_until_it_answers_a_probe`.
//! - **K17 (freed room goes to parked requests)** — while a bucket's owner cannot be asked (its
//!   breaker is open, or the ring is empty), the room a slot of the bucket frees when its
//!   request ends goes to the bucket's oldest parked request as a fail-open slot
//!   ([`OfferSink::fail_open`]), as long as K1 allows and requests are parked. Before K16 and
//!   K17, those requests, registered with an owner that would never push to them, waited for
//!   the server's one-second backstop, which admitted one of them a bucket a second, while
//!   newcomers took the room: an outside trial saw a dead owner's buckets stall 1 to 2.5 s
//!   (once 4 s) after its kill -9 or SIGTERM, until the membership dropped it. Tested by
//!   `test_room_freed_while_the_owner_cannot_be_asked_goes_to_parked_requests`.
//! - **K18 (the owners parked requests wait on are watched)** — while requests of a bucket are
//!   parked here, its remote owner is probed every [`PROBE_EVERY`] even while its breaker is
//!   closed (B4 of `breaker.rs`), so a failed probe opens it (K16) and the requests fail open at
//!   once (the backstop runs as it opens, then K17). A parked request waits for the owner's
//!   push, which no call of this node's makes: a node whose every request of the bucket was
//!   parked had no call out to the owner, so its death showed in no failure, its breaker stayed
//!   closed, and the requests waited for the server's next one-second backstop sweep to ask (a
//!   measurement saw a request wait 620 ms after a kill -9; BENCHMARKS.md, "Shared tier: an
//!   owner dies"). A bucket is watched from its first parked request's ask
//!   ([`Coordinator::acquire`] with `wants_queue`: enqueue-first, it parked before) until no
//!   request of it is parked after its latest ask. Tested by
//!   `test_the_owner_parked_requests_wait_on_is_watched_and_its_death_fails_them_open`.
//! - **K19 (cut off from an owner, a share)** — once an owner's calls have been failing for
//!   [`CUT_OFF_AFTER`] — its breaker open since then, give or take closes shorter than that (a
//!   late answer on a flapping link closes it for a moment) — while it is still a member (so the
//!   ring keeps its buckets on it: this node hears its gossip but its calls do not reach it, a
//!   one-way partition, or a link too slow or lossy for the acquire deadline), this node fails
//!   open toward it only up to its share of each bucket's limit — the limit over the live
//!   members, rounded down, at least one — instead of up to the whole limit (K1 still bounds
//!   both), whether its breaker stops a request or a call to it fails. An outside trial held a
//!   bucket of `shared_limit` 4 at 12 over three nodes for 13 s, then 9 until the heal, in a
//!   one-way partition from its owner, and at 10–12 for 32 s over a slow, lossy link: every
//!   cut-off node failed open up to the whole limit, for as long as it lasted; the first K19,
//!   which restarted its clock at every close, never engaged on the flapping link (26 closes in
//!   40 s). The share is kept by the same allowance as K1, so leases this node still holds count
//!   in it. An owner that answers for [`CUT_OFF_AFTER`] gets the whole allowance back. Not
//!   covered: the reverse direction (the owner hears its peers but they do not hear it) — they
//!   drop it from their membership and keep a split's share, while it keeps the whole limit and
//!   sees nothing (ARCHITECTURE.md, failure table). Tested by
//!   `test_an_owner_cut_off_for_long_is_failed_open_toward_only_up_to_a_share` and
//!   `test_an_owner_on_a_flapping_link_is_cut_off_though_its_breaker_closes_now_and_then`.
//! - **K6–K12** — the idle-lease cache's: see `cache.rs`.

mod cache;

pub use cache::{
    BATCH_WAITS, EXTEND_AHEAD, IDLE_SHARE, MAX_IDLE, MAX_IDLE_PER_BUCKET, REUSE_WINDOW,
};
use cache::{Idle, Wanting, expirer};

use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::breaker::{Breakers, Change, Ticket};
use super::owner::Owner;
use super::{ACQUIRE_DEADLINE, CALL_DEADLINE, MIN_SHARED_PROTOCOL, RENEW_EVERY};
use crate::membership::Members;
use crate::ring::Ring;
use crate::rpc::{BoxFuture, RpcError, SharedCall, SharedReply, Transport};

/// How long an owner's breaker stays open before this node counts itself cut off from it
/// (K19): the split's `GRACE` (10 s), the time after which a split's sides keep only their
/// shares of each limit — gossip's convergence on a join, and longer than the failure
/// detection that moves a dead owner's buckets (`DEAD_AFTER`, 10 s from its last heartbeat,
/// which began before its breaker opened), so a dead owner's buckets have moved by then and
/// only an owner that stays in the membership without answering is met.
pub const CUT_OFF_AFTER: Duration = crate::split::GRACE;

/// An owner whose calls have been failing (K19): since when its breaker has been open, give or
/// take closes that did not last.
#[derive(Debug, Clone, Copy)]
struct Trouble {
    /// The owner's incarnation.
    generation: u64,
    /// When its breaker opened, first since it last answered steadily.
    since: Instant,
    /// When its breaker last closed, while it is closed: a close that lasts
    /// [`CUT_OFF_AFTER`] ends the trouble, a shorter one (a late answer on a flapping link)
    /// does not.
    closed_at: Option<Instant>,
}

impl Trouble {
    /// Whether a node with this trouble counts itself cut off from the owner at `now`.
    fn cut_off(&self, generation: u64, now: Instant) -> bool {
        self.generation == generation
            && now.saturating_duration_since(self.since) >= CUT_OFF_AFTER
            && self
                .closed_at
                .is_none_or(|c| now.saturating_duration_since(c) < CUT_OFF_AFTER)
    }
}

/// How often releases an owner did not answer are sent again (K13): a returning owner gets
/// its slots back within this of answering again; half a second is two calls a second to an
/// owner that is down, only while releases of its leases are pending.
pub const RELEASE_RETRY: Duration = Duration::from_millis(500);

/// How often an owner whose breaker is open is probed (K16): its breaker closes within this
/// (plus a round trip) of the owner answering again, and meanwhile its buckets' requests fail
/// open rather than ask it. A fifth of a second is [`ACQUIRE_DEADLINE`], what every such
/// request waited for the owner before there were breakers, so no request is admitted without
/// asking an owner that has answered again for longer than it used to wait for one that had
/// not; and five calls a second to an owner that is down cost nothing.
pub const PROBE_EVERY: Duration = ACQUIRE_DEADLINE;

/// How long a probe waits for its answer: a call to a paused owner waits in its socket, and
/// the owner answers it as soon as it runs again, so the longer the probe waits the sooner
/// its breaker closes after a pause. [`CALL_DEADLINE`], as long as a release waits; one probe
/// is out per owner at a time. A probe of an owner parked requests wait on (K18) opens its
/// closed breaker when the owner refuses or drops the connection, at once, or has not answered
/// by then: a busy owner slower than an acquire's deadline is not taken for a lost one (a
/// paused owner's buckets' parked requests fail open anyway at the backstop's next ask).
pub const PROBE_DEADLINE: Duration = CALL_DEADLINE;

/// How many answered offers a coordinator remembers to answer duplicates alike (K5): a
/// duplicate arrives within a call's deadline ([`super::OFFER_DEADLINE`], 1 s) of the
/// original, and a node receives far fewer than 1,024 offers a second (one per shared slot
/// freed while it waits); 1,024 entries are about 40 KB.
pub const ANSWERED_OFFERS: usize = 1_024;

/// What the server does with an owner's offer: hand the lease (named by `token`, to be taken
/// with [`Coordinator::take_handed`]) to the oldest parked request of `bucket`.
pub trait OfferSink: Send + Sync + 'static {
    /// Returns whether a parked request took it, and whether more are parked.
    fn offer(&self, bucket: &str, token: u64) -> OfferAnswer;

    /// How many requests of `bucket` are parked on this node: a lease whose bucket has any is
    /// released when its request ends, not cached (K9).
    fn num_parked(&self, bucket: &str) -> u64;

    /// Hands a fail-open slot (named by `token`, to be taken with
    /// [`Coordinator::take_handed`]) to the oldest parked request of `bucket`, whose owner
    /// cannot be asked (K17); returns whether a parked request took it. The server counts it
    /// as a fail-open admission.
    fn fail_open(&self, bucket: &str, token: u64) -> bool;
}

/// The sink's answer to an offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferAnswer {
    /// A parked request took the lease.
    pub used: bool,
    /// Requests of the bucket are still parked here.
    pub more_waiting: bool,
}

/// The outcome of [`Coordinator::acquire`].
#[derive(Debug)]
pub enum Acquired {
    /// The owner granted a lease.
    Lease(SharedLease),
    /// The bucket's pool is full; with `wants_queue` the owner registered this node.
    Denied {
        /// Leases the owner counts for the bucket.
        in_use: u64,
        /// The limit it checked.
        limit: u64,
        /// Whether this node is now a waiter of the bucket.
        registered: bool,
    },
    /// No owner answered (unreachable, deadline, empty ring, owner at its hard cap): admitted
    /// without a lease, within this node's fail-open allowance (K1).
    FailOpen {
        /// The fail-open slot; dropping it frees the allowance.
        lease: SharedLease,
        /// Why no owner answered.
        reason: String,
    },
    /// No owner answered and this node's fail-open allowance for the bucket is used up.
    Unavailable {
        /// Why no owner answered.
        reason: String,
        /// The allowance: the limit asked under, or this node's share of it toward an owner
        /// it is cut off from (K19).
        allowance: u64,
    },
}

/// A shared slot a request holds: a lease of an owner, or a fail-open slot. Dropping it
/// releases it in the background (K2, K3).
#[derive(Debug)]
pub struct SharedLease {
    token: u64,
    /// Taken from the idle cache rather than granted by a call to the owner.
    reused: bool,
    coordinator: Weak<Coordinator>,
}

impl SharedLease {
    /// The coordinator-local token naming this slot (what the node tier's external grant
    /// carries).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Whether this lease came from the idle cache (see the module docs) rather than from a
    /// call to the owner.
    pub fn is_reused(&self) -> bool {
        self.reused
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        if let Some(c) = self.coordinator.upgrade() {
            c.end(self.token);
        }
    }
}

/// A bucket's slots on this node, by kind ([`Coordinator::slots_by_bucket`]); together they
/// are the slots K1 counts for the bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketSlots {
    /// Leases of owners held for requests (running, or handed to a parked request that has
    /// not taken it yet).
    pub leases: u64,
    /// Idle leases in the cache (K6–K9).
    pub idle: u64,
    /// Requests admitted without a lease (fail open) and still running.
    pub fail_open: u64,
}

/// A slot this node holds.
#[derive(Debug, Clone)]
struct Held {
    bucket: Arc<str>,
    /// The owner and the lease id, `None` for a fail-open slot.
    lease: Option<(Arc<str>, u64)>,
    /// When this coordinator got the lease (a grant's answer, an offer): its reuse window
    /// starts there (K7).
    got_at: Instant,
}

/// A bucket's slots on this node (K1).
#[derive(Debug, Clone, Copy)]
struct Allowance {
    /// Slots held: leases (idle ones included) and fail-open slots.
    held: u64,
    /// Of which idle leases in the cache.
    idle: u64,
    /// The bucket's `shared_limit` as last asked (an offer carries none).
    limit: u64,
    /// Leases taken from the idle cache since the windows last started (K11).
    reused: u64,
}

impl Allowance {
    /// How many idle leases the bucket may keep (K9).
    fn max_idle(&self) -> u64 {
        MAX_IDLE_PER_BUCKET.min(self.limit / IDLE_SHARE)
    }
}

/// The coordinator's maps and sets. Several lookups by bucket name or token run on every
/// shared-tier request's path, so they hash with foldhash (seeded per map, as std's are)
/// instead of std's SipHash, which cost about a fifth of the tier's per-request instructions.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = HashSet<K, foldhash::fast::RandomState>;

#[derive(Default)]
struct State {
    /// Every live slot by token.
    held: Map<u64, Held>,
    /// Per bucket: slots held (leases and fail-open) and the limit last asked, for K1.
    per_bucket: Map<Arc<str>, Allowance>,
    /// Leases handed to a parked request through the node tier, not yet taken by it.
    handed: Map<u64, SharedLease>,
    /// The last [`ANSWERED_OFFERS`] offers answered, `(owner, lease, used)`, oldest first
    /// (K5).
    answered: VecDeque<(Arc<str>, u64, bool)>,
    /// Idle leases per bucket, in the order they went idle (K6–K9).
    idle: Map<Arc<str>, Vec<Idle>>,
    /// Idle leases in all.
    num_idle: u64,
    /// Set by [`Coordinator::release_idle`]: the node is stopping, nothing is cached any more.
    closing: bool,
    /// Buckets with a call to their owner out that others wait for (K12).
    asking: Set<Arc<str>>,
    /// `(bucket, owner)` pairs with a `Room` call out (K11): their idle leases whose window
    /// ended stay (not reused) until its answer.
    rooming: Set<(Arc<str>, Arc<str>)>,
    /// Per bucket, the requests inside [`Coordinator::acquire`] on the way to a remote owner
    /// (K12): a call asks for a batch that runs them too.
    wanting: Map<Arc<str>, u64>,
    /// When the expiry task wakes next (`None`: when a lease goes idle); a lease going idle
    /// with an earlier end of window wakes it (K7).
    wake_at: Option<Instant>,
    /// Buckets whose parked requests asked a remote owner, each with the number of its latest
    /// such ask (K18): their owners are watched while requests of them are parked.
    parked: BTreeMap<Arc<str>, u64>,
    /// Asks of parked requests to remote owners so far (numbers the entries of `parked`).
    parked_asks: u64,
}

/// Counters of this node's shared-tier traffic (shown per group by the server).
#[derive(Debug, Default)]
pub struct CoordinatorStats {
    /// Leases [`Coordinator::acquire`] returned: granted by an owner, or reused from the idle
    /// cache (`reused`).
    pub acquired: AtomicU64,
    /// Acquires denied by an owner.
    pub denied: AtomicU64,
    /// Admissions without a lease because no owner answered.
    pub fail_open: AtomicU64,
    /// Offers received from owners.
    pub offers_received: AtomicU64,
    /// Offers a parked request took.
    pub offers_used: AtomicU64,
    /// Leases an owner reported lost on renewal (expired or purged while held or idle).
    pub leases_lost: AtomicU64,
    /// Leases that went idle in the cache when their request ended (K8).
    pub cached: AtomicU64,
    /// Acquires answered with an idle lease, without a call (also counted in `acquired`).
    pub reused: AtomicU64,
    /// Extra leases of batches put in the idle cache (K10), unused yet: a request that takes
    /// one counts in `reused` (K8).
    pub prefetched: AtomicU64,
    /// Buckets whose windows an owner's room answer restarted before they ended (K11).
    pub extended: AtomicU64,
    /// Idle leases released to their owner: window ended, owner or bucket moved, limit
    /// lowered, shutdown (K8).
    pub idle_released: AtomicU64,
    /// Idle leases dropped because their owner reported them lost on renewal (K8).
    pub idle_lost: AtomicU64,
}

/// One node's coordinator (see the module docs).
pub struct Coordinator {
    me: Arc<str>,
    transport: Arc<dyn Transport>,
    owner: Arc<Owner>,
    ring: RwLock<Arc<Ring>>,
    members: watch::Receiver<Members>,
    state: Mutex<State>,
    next_token: AtomicU64,
    releases: mpsc::UnboundedSender<(Arc<str>, u64)>,
    sink: OnceLock<Arc<dyn OfferSink>>,
    /// Wakes the expiry task when a lease goes idle.
    went_idle: Arc<Notify>,
    /// Wakes the requests waiting for a call to an owner to bring a batch (K12).
    batch_done: Notify,
    /// Signalled (one stored permit) each time the ring changes or a breaker opens or closes
    /// ([`Coordinator::owners_changed`]).
    owners_changed: Notify,
    /// Per owner, whether this node's requests stop asking it (K16).
    breakers: Mutex<Breakers>,
    /// How many breakers are open: read first on the request path, which looks up no breaker
    /// while none is.
    num_open: AtomicUsize,
    /// The owners whose calls have been failing, by node id (K19).
    open_since: Mutex<BTreeMap<String, Trouble>>,
    /// Wakes the prober when a breaker opens (K16).
    probe_wake: Arc<Notify>,
    /// Buckets whose fail-open room freed while requests of them are parked here and their
    /// owner cannot be asked, with their limit (K17).
    handoffs: mpsc::UnboundedSender<(Arc<str>, u64)>,
    /// The counters.
    pub stats: CoordinatorStats,
}

impl Coordinator {
    /// A coordinator for node `me`, with its local `owner`, following `members` for the ring;
    /// starts its renewer, releaser and ring follower (stopped by `stop`).
    pub fn start(
        me: Arc<str>,
        transport: Arc<dyn Transport>,
        owner: Arc<Owner>,
        members: watch::Receiver<Members>,
        stop: CancellationToken,
    ) -> Arc<Coordinator> {
        let ring = Ring::new(&members.borrow().live, MIN_SHARED_PROTOCOL);
        let breakers = Breakers::new(&members.borrow().live);
        let (tx, rx) = mpsc::unbounded_channel();
        let (handoffs, handoffs_rx) = mpsc::unbounded_channel();
        let c = Arc::new(Coordinator {
            me,
            transport,
            owner,
            ring: RwLock::new(Arc::new(ring)),
            members,
            state: Mutex::new(State::default()),
            next_token: AtomicU64::new(1),
            releases: tx,
            sink: OnceLock::new(),
            went_idle: Arc::new(Notify::new()),
            batch_done: Notify::new(),
            owners_changed: Notify::new(),
            breakers: Mutex::new(breakers),
            num_open: AtomicUsize::new(0),
            open_since: Mutex::new(BTreeMap::new()),
            probe_wake: Arc::new(Notify::new()),
            handoffs,
            stats: CoordinatorStats::default(),
        });
        tokio::spawn(releaser(
            Arc::downgrade(&c),
            rx,
            c.members.clone(),
            stop.clone(),
        ));
        tokio::spawn(expirer(
            Arc::downgrade(&c),
            c.went_idle.clone(),
            stop.clone(),
        ));
        tokio::spawn(renewer(Arc::downgrade(&c), stop.clone()));
        tokio::spawn(prober(
            Arc::downgrade(&c),
            c.probe_wake.clone(),
            stop.clone(),
        ));
        tokio::spawn(hand_off(Arc::downgrade(&c), handoffs_rx, stop.clone()));
        tokio::spawn(follow_ring(Arc::downgrade(&c), c.members.clone(), stop));
        c
    }

    /// Resolves once the ring has changed, or an owner's breaker opened or closed (K16), since
    /// the last call resolved (or since the start): for the one task that re-asks the owners
    /// for the requests parked here. Those had registered as waiters with owners the ring may
    /// have moved their buckets from (a dead owner pushes nothing; the new one knows no
    /// waiter), or with an owner that has stopped answering (its buckets' parked requests now
    /// fail open, within K1), or could not register with one that answers again. One stored
    /// signal, so a change while that task is busy is not lost.
    pub async fn owners_changed(&self) {
        self.owners_changed.notified().await;
    }

    /// Why an ask for `bucket` would not call its owner, if it would not: the ring is empty, or
    /// the owner's breaker is open (K16). Such an ask fails open at once, within K1, or is
    /// `Unavailable`; it never waits.
    pub fn fails_fast(&self, bucket: &str) -> Option<String> {
        match self.owner_of(bucket) {
            None => Some(EMPTY_RING.to_string()),
            Some(m) if *m.node_id == *self.me => None,
            Some(m) => self.open_breaker(&m),
        }
    }

    /// Why calls to `owner` stop, if its breaker is open (K16).
    fn open_breaker(&self, owner: &crate::Member) -> Option<String> {
        if self.num_open.load(Ordering::Acquire) == 0 {
            return None;
        }
        let breakers = self.breakers.lock();
        breakers.open_reason(owner).map(|why| {
            format!(
                "node [{}] failed a call ({why}); its buckets are not asked until it answers again",
                owner.node_id
            )
        })
    }

    /// Notes that a parked request of `bucket` asks its remote owner (K18); wakes the prober
    /// when the bucket is new to the watch.
    fn note_parked(&self, bucket: &str) {
        let new = {
            let mut st = self.state.lock();
            st.parked_asks += 1;
            let ask = st.parked_asks;
            match st.parked.get_mut(bucket) {
                Some(latest) => {
                    *latest = ask;
                    false
                }
                None => {
                    st.parked.insert(Arc::from(bucket), ask);
                    true
                }
            }
        };
        if new {
            self.probe_wake.notify_one();
        }
    }

    /// The remote owners of the buckets with requests parked here (K18), each once; forgets
    /// the buckets none of whose requests is parked after its latest ask. The sink is asked
    /// outside the lock (it has locks of its own); a bucket asked again meanwhile is kept
    /// (enqueue-first: a request parks before it asks, so one the sink did not count has
    /// asked since).
    fn awaited_owners(&self) -> Vec<crate::Member> {
        let asked: Vec<(Arc<str>, u64)> = {
            let st = self.state.lock();
            st.parked.iter().map(|(b, n)| (b.clone(), *n)).collect()
        };
        if asked.is_empty() {
            return Vec::new();
        }
        let sink = self.sink.get();
        let ring = self.ring.read().clone();
        let mut owners: BTreeMap<String, crate::Member> = BTreeMap::new();
        let mut drained = Vec::new();
        for (bucket, ask) in asked {
            if sink.is_none_or(|s| s.num_parked(&bucket) == 0) {
                drained.push((bucket, ask));
                continue;
            }
            if let Some(m) = ring.owner(bucket.as_bytes())
                && *m.node_id != *self.me
            {
                owners.entry(m.node_id.clone()).or_insert_with(|| m.clone());
            }
        }
        if !drained.is_empty() {
            let mut st = self.state.lock();
            for (bucket, ask) in drained {
                if st.parked.get(&bucket) == Some(&ask) {
                    st.parked.remove(&bucket);
                }
            }
        }
        owners.into_values().collect()
    }

    /// The owners to probe (K16, K18): those whose breakers are open, and those requests
    /// parked here wait on (B4 of `breaker.rs`).
    fn to_probe(&self) -> Vec<crate::Member> {
        let awaited = self.awaited_owners();
        self.breakers.lock().to_probe(&awaited)
    }

    /// What a call sent now carries to report its outcome (K16).
    fn ticket(&self) -> Ticket {
        self.breakers.lock().ticket()
    }

    /// Reports the outcome of a call to `owner` sent with `ticket` to its breaker (K16): an
    /// answer closes it; a failure for want of the owner — unreachable, its connection broken
    /// mid-call, or no answer within the call's deadline — opens it. Other errors (a protocol version the owner refuses, an
    /// error it answered) say the owner runs, and change nothing.
    fn record<T>(&self, owner: &crate::Member, ticket: Ticket, outcome: &Result<T, RpcError>) {
        let failure = match outcome {
            Err(
                e @ (RpcError::Unreachable { .. }
                | RpcError::Disconnected { .. }
                | RpcError::DeadlineExceeded { .. }),
            ) => Some(e.to_string()),
            _ => None,
        };
        let change = {
            let mut breakers = self.breakers.lock();
            let change = match (outcome, &failure) {
                (Ok(_), _) => breakers.answered(owner),
                (Err(_), Some(why)) => breakers.failed(owner, ticket, why),
                (Err(_), None) => Change::None,
            };
            self.num_open.store(breakers.num_open(), Ordering::Release);
            change
        };
        self.breaker_changed(owner, change, failure.as_deref());
    }

    /// Tells the parked requests' backstop and the prober about a breaker that opened (for
    /// `why`) or closed.
    fn breaker_changed(&self, owner: &crate::Member, change: Change, why: Option<&str>) {
        match change {
            Change::None => return,
            Change::Opened => {
                // K19: a breaker that reopens before its close lasted keeps its trouble's start.
                let now = Instant::now();
                let mut troubles = self.open_since.lock();
                match troubles.get_mut(owner.node_id.as_str()) {
                    Some(t)
                        if t.generation == owner.generation
                            && t.closed_at.is_none_or(|c| {
                                now.saturating_duration_since(c) < CUT_OFF_AFTER
                            }) =>
                    {
                        t.closed_at = None;
                    }
                    _ => {
                        troubles.insert(
                            owner.node_id.clone(),
                            Trouble {
                                generation: owner.generation,
                                since: now,
                                closed_at: None,
                            },
                        );
                    }
                }
                drop(troubles);
                tracing::info!(
                    node = %owner.node_id,
                    reason = why.unwrap_or_default(),
                    "a shared-tier owner failed a call: its buckets' requests fail open without asking it until it answers a probe or leaves"
                );
                self.probe_wake.notify_one();
            }
            Change::Closed => {
                if let Some(t) = self.open_since.lock().get_mut(owner.node_id.as_str()) {
                    t.closed_at = Some(Instant::now());
                }
                tracing::info!(node = %owner.node_id, "a shared-tier owner answers again");
            }
        }
        self.owners_changed.notify_one();
    }

    /// Sets what offers go to (once; later calls do nothing).
    pub fn set_sink(&self, sink: Arc<dyn OfferSink>) {
        let _ = self.sink.set(sink);
    }

    /// The owner of `bucket` on the current ring, if any.
    pub fn owner_of(&self, bucket: &str) -> Option<crate::Member> {
        self.ring.read().owner(bucket.as_bytes()).cloned()
    }

    /// Asks `bucket`'s owner for a lease under `limit` (in process when this node owns it),
    /// waiting at most `deadline` for its answer ([`super::ACQUIRE_DEADLINE`] unless
    /// configured); fails open within the allowance (K1). An idle lease of the bucket's owner
    /// younger than [`REUSE_WINDOW`] is taken first, without a call (K7).
    ///
    /// # Cancel safety
    /// Dropping the future before the owner answers loses nothing: a grant whose answer
    /// nobody reads is released as it arrives (K14); one lost on the way is reclaimed by the
    /// owner's TTL sweep.
    pub async fn acquire(
        self: &Arc<Self>,
        bucket: &str,
        limit: u64,
        wants_queue: bool,
        deadline: Duration,
    ) -> Acquired {
        let owner = self.owner_of(bucket);
        // K18: a parked request's owner is watched while it waits.
        if wants_queue
            && let Some(m) = &owner
            && *m.node_id != *self.me
        {
            self.note_parked(bucket);
        }
        if let Some(m) = &owner
            && let Some(slot) = self.reuse(bucket, &m.node_id, limit)
        {
            return Acquired::Lease(slot);
        }
        // K16: an owner whose breaker is open is not asked; nothing waits for it.
        if let Some(m) = &owner
            && *m.node_id != *self.me
            && let Some(reason) = self.open_breaker(m)
        {
            // K19: an owner cut off for long is failed open toward only up to this node's share.
            let (allowance, cut_off) = self.allowance_toward(m, limit);
            let reason = reason + cut_off.as_deref().unwrap_or_default();
            return self.fail_open(Arc::from(bucket), allowance, reason);
        }
        // K12: a request that will not park waits for a call already out for the bucket, whose
        // batch may run it, rather than sending its own — twice at most, all within the first
        // half of `deadline`, so that a call of its own still has the other half.
        let until = Instant::now() + deadline;
        let waits_until = Instant::now() + deadline / 2;
        let mut _wanting = None;
        let mut _asking = None;
        if let Some(m) = &owner
            && *m.node_id != *self.me
            && !wants_queue
        {
            _wanting = Some(Wanting::new(self, bucket));
            for _ in 0..BATCH_WAITS {
                match self.wait_for_batch(bucket, waits_until).await {
                    Ok(asking) => {
                        _asking = Some(asking);
                        break;
                    }
                    Err(()) => {
                        if let Some(slot) = self.reuse(bucket, &m.node_id, limit) {
                            return Acquired::Lease(slot);
                        }
                    }
                }
            }
        }
        let deadline = until.saturating_duration_since(Instant::now());
        let reply = match &owner {
            None => Err(EMPTY_RING.to_string()),
            Some(m) if *m.node_id == *self.me => {
                Ok(self.owner.acquire(&self.me, bucket, limit, wants_queue, 0))
            }
            Some(m) => {
                let extra = self.extra_wanted(bucket, limit, wants_queue);
                let call = SharedCall::Acquire {
                    bucket: bucket.to_string(),
                    limit,
                    wants_queue,
                    extra,
                };
                self.call_acquire(m.clone(), call, deadline).await
            }
        };
        let bucket: Arc<str> = Arc::from(bucket);
        // K19: a call that failed to an owner whose calls keep failing (a flapping link) fails
        // open only up to this node's share, as one its breaker stopped does.
        let fail_open = |bucket: Arc<str>, reason: String| {
            let (allowance, cut_off) = match &owner {
                Some(m) if *m.node_id != *self.me => self.allowance_toward(m, limit),
                _ => (limit, None),
            };
            let reason = reason + cut_off.as_deref().unwrap_or_default();
            self.fail_open(bucket, allowance, reason)
        };
        match reply {
            Ok(SharedReply::Granted { lease, extra, .. }) => {
                let owner_id: Arc<str> =
                    Arc::from(owner.as_ref().map_or("", |m| m.node_id.as_str()));
                match self.hold(bucket.clone(), Some((owner_id.clone(), lease)), Some(limit)) {
                    Ok(slot) => {
                        self.stats.acquired.fetch_add(1, Ordering::Relaxed);
                        self.stash(&bucket, &owner_id, extra);
                        Acquired::Lease(slot)
                    }
                    Err(held) => {
                        // K1: this node already runs `limit` requests of the bucket on slots
                        // this owner does not count (fail-open slots, leases lost or of an
                        // earlier owner): give the lease back rather than exceed it.
                        for l in extra {
                            let _ = self.releases.send((owner_id.clone(), l));
                        }
                        let _ = self.releases.send((owner_id, lease));
                        self.stats.denied.fetch_add(1, Ordering::Relaxed);
                        Acquired::Denied {
                            in_use: held,
                            limit,
                            registered: false,
                        }
                    }
                }
            }
            Ok(SharedReply::Denied {
                in_use,
                limit,
                waiter_registered,
            }) => {
                // A lease of the bucket may have gone idle here while the owner answered (the
                // owner counted it): take it rather than refuse or park the request.
                if let Some(m) = &owner
                    && let Some(slot) = self.reuse(&bucket, &m.node_id, limit)
                {
                    return Acquired::Lease(slot);
                }
                self.stats.denied.fetch_add(1, Ordering::Relaxed);
                Acquired::Denied {
                    in_use,
                    limit,
                    registered: waiter_registered,
                }
            }
            Ok(SharedReply::Overloaded) => {
                fail_open(bucket, "the owner's tables are full".to_string())
            }
            Ok(other) => fail_open(bucket, format!("unexpected answer {other:?}")),
            Err(reason) => fail_open(bucket, reason),
        }
    }

    /// Sends the acquire `call` to `owner` from a task of its own and waits at most `deadline`
    /// for the answer (K14). The call itself may take up to [`super::ACQUIRE_LISTEN`]: a grant
    /// that comes after the caller stopped waiting (the deadline passed, or the request went
    /// away) is released at once, so an owner that answers late keeps no slot for a request
    /// that never ran on it.
    async fn call_acquire(
        self: &Arc<Self>,
        owner: crate::Member,
        call: SharedCall,
        deadline: Duration,
    ) -> Result<SharedReply, String> {
        let (tx, mut rx) = oneshot::channel();
        let transport = self.transport.clone();
        let releases = self.releases.clone();
        let node = owner.node_id.clone();
        let ticket = self.ticket();
        let me = Arc::downgrade(self);
        let to = owner.clone();
        tokio::spawn(async move {
            let reply = transport.shared(&owner, call, super::ACQUIRE_LISTEN).await;
            // K16: an answer, even one nobody waits for any more, says the owner runs.
            if let Some(c) = me.upgrade() {
                c.record(&owner, ticket, &reply);
            }
            if let Err(Ok(SharedReply::Granted { lease, extra, .. })) = tx.send(reply) {
                let owner_id: Arc<str> = Arc::from(owner.node_id.as_str());
                for l in std::iter::once(lease).chain(extra) {
                    let _ = releases.send((owner_id.clone(), l));
                }
            }
        });
        let answer = match tokio::time::timeout(deadline, &mut rx).await {
            Ok(answer) => answer.ok(),
            Err(_) => {
                // From here on a grant goes back (above); one sent just before is taken.
                rx.close();
                rx.try_recv().ok()
            }
        };
        match answer {
            Some(reply) => reply.map_err(|e| e.to_string()),
            None => {
                // K16: the owner did not answer within the request's deadline.
                let e = RpcError::DeadlineExceeded { node, deadline };
                self.record::<()>(&to, ticket, &Err(e.clone()));
                Err(e.to_string())
            }
        }
    }

    /// The owners this node's calls cannot reach now (their breakers are open, K16), with the
    /// failure that opened each: their buckets' requests fail open, within K1, until they
    /// answer a probe or the ring moves their buckets. What `_cluster/health` shows.
    pub fn unreachable_owners(&self) -> Vec<(crate::Member, String)> {
        if self.num_open.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.breakers.lock().open_owners()
    }

    fn fail_open(self: &Arc<Self>, bucket: Arc<str>, limit: u64, reason: String) -> Acquired {
        match self.hold(bucket, None, Some(limit)) {
            Ok(lease) => {
                self.stats.fail_open.fetch_add(1, Ordering::Relaxed);
                Acquired::FailOpen { lease, reason }
            }
            Err(_) => Acquired::Unavailable {
                reason,
                allowance: limit,
            },
        }
    }

    /// This node's fail-open allowance toward `owner` for a bucket of `limit` (K19): the limit,
    /// or, once the owner's breaker has stayed open for [`CUT_OFF_AFTER`], this node's share of
    /// it — the limit over the live members, at least one — with the words that say so.
    fn allowance_toward(&self, owner: &crate::Member, limit: u64) -> (u64, Option<String>) {
        let now = Instant::now();
        let since = self
            .open_since
            .lock()
            .get(owner.node_id.as_str())
            .filter(|t| t.cut_off(owner.generation, now))
            .map(|t| t.since);
        let Some(since) = since else {
            return (limit, None);
        };
        let live = self.members.borrow().live.len().max(1) as u64;
        let share = (limit / live).max(1).min(limit);
        let words = format!(
            "; cut off from it for {}s, this node keeps its share of the limit, {share} of {limit} ({live} live nodes), rather than failing open up to all of it",
            since.elapsed().as_secs()
        );
        (share, Some(words))
    }

    /// Takes a slot of `bucket` (a lease, or a fail-open slot when `lease` is `None`) if this
    /// node holds fewer than its limit (K1): `limit`, which becomes the bucket's limit here,
    /// or for an offer (`None`) the limit last asked. Otherwise returns the slots held.
    fn hold(
        self: &Arc<Self>,
        bucket: Arc<str>,
        lease: Option<(Arc<str>, u64)>,
        limit: Option<u64>,
    ) -> Result<SharedLease, u64> {
        let mut st = self.state.lock();
        let allowance = st.per_bucket.entry(bucket.clone()).or_insert(Allowance {
            held: 0,
            idle: 0,
            limit: limit.unwrap_or(u64::MAX),
            reused: 0,
        });
        if let Some(limit) = limit {
            allowance.limit = limit;
        }
        if allowance.held >= allowance.limit {
            let held = allowance.held;
            if held == 0 {
                st.per_bucket.remove(&bucket);
            }
            return Err(held);
        }
        allowance.held += 1;
        let held = Held {
            bucket,
            lease,
            got_at: Instant::now(),
        };
        Ok(self.slot(&mut st, held, false))
    }

    /// Enters `held` under a fresh token (the caller has counted it in its bucket's
    /// allowance) and returns its handle; `reused`: taken from the idle cache.
    fn slot(self: &Arc<Self>, st: &mut State, held: Held, reused: bool) -> SharedLease {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        st.held.insert(token, held);
        SharedLease {
            token,
            reused,
            coordinator: Arc::downgrade(self),
        }
    }

    /// Ends a slot: forgets it and, for a lease, keeps it idle for the next request of its
    /// bucket (see the module docs) or queues its release (K2, K3, K7, K9).
    fn end(&self, token: u64) {
        let now = Instant::now();
        // A lease of a remote owner still in its window may go idle, unless requests of its
        // bucket are parked here (asked outside the lock: the sink has locks of its own).
        let candidate: Option<Arc<str>> = {
            let st = self.state.lock();
            let Some(h) = st.held.get(&token) else {
                return;
            };
            let remote = h.lease.as_ref().is_some_and(|(o, _)| **o != *self.me);
            let cacheable = st
                .per_bucket
                .get(&h.bucket)
                .is_some_and(|a| a.idle < a.max_idle() && a.held <= a.limit);
            (remote
                && cacheable
                && !st.closing
                && st.num_idle < MAX_IDLE
                && now < h.got_at + REUSE_WINDOW)
                .then(|| h.bucket.clone())
        };
        let parked = candidate
            .as_ref()
            .is_some_and(|b| self.sink.get().is_some_and(|s| s.num_parked(b) > 0));
        let (held, limit) = {
            let mut st = self.state.lock();
            let Some(h) = st.held.remove(&token) else {
                return;
            };
            let cache = candidate.is_some() && !parked && !st.closing && h.lease.is_some();
            if cache && let Some((owner, lease)) = &h.lease {
                // K6: the holder's entry is gone in this same critical section.
                let wake = st.put_idle(&h.bucket, owner.clone(), *lease, h.got_at);
                drop(st);
                self.stats.cached.fetch_add(1, Ordering::Relaxed);
                if wake {
                    self.went_idle.notify_one();
                }
                return;
            }
            let mut limit = None;
            if let Some(a) = st.per_bucket.get_mut(&h.bucket) {
                a.held = a.held.saturating_sub(1);
                limit = Some(a.limit);
                if a.held == 0 {
                    st.per_bucket.remove(&h.bucket);
                }
            }
            (h, limit)
        };
        // K17: room freed for a bucket whose owner cannot be asked goes to its parked
        // requests, if any (looked up only while a breaker is open or the ring is empty).
        if let Some(limit) = limit
            && (self.num_open.load(Ordering::Acquire) > 0 || self.ring.read().is_empty())
            && self.fails_fast(&held.bucket).is_some()
            && self
                .sink
                .get()
                .is_some_and(|s| s.num_parked(&held.bucket) > 0)
        {
            // Unbounded: a send never waits (K3); it fails only once the node stops.
            let _ = self.handoffs.send((held.bucket.clone(), limit));
        }
        if let Some((owner, lease)) = held.lease {
            self.release(owner, lease);
        }
    }

    /// Gives `lease` back to `owner` without waiting (K3): in process when this node owns it
    /// (the owner's pool lock, no I/O: the offers it frees are sent by tasks of their own), else
    /// through the releaser. Releasing a local lease in place saves a wake of the releaser task
    /// for each request of a bucket this node owns, which the idle cache does not serve.
    fn release(&self, owner: Arc<str>, lease: u64) {
        // Outside a runtime (a lease dropped as the node stops) no offer task could start.
        if *owner == *self.me && tokio::runtime::Handle::try_current().is_ok() {
            self.owner.handle_local(
                &self.me,
                SharedCall::Release {
                    leases: vec![lease],
                },
            );
            return;
        }
        // Unbounded: a send never waits; it fails only once the releaser stopped (the node is
        // shutting down, and the owner's TTL reclaims the lease).
        let _ = self.releases.send((owner, lease));
    }

    /// Keeps `lease` until the parked request it was handed to takes it
    /// ([`Coordinator::take_handed`]); returns its token.
    pub fn hand(&self, lease: SharedLease) -> u64 {
        let token = lease.token;
        self.state.lock().handed.insert(token, lease);
        token
    }

    /// Takes the lease handed under `token` (by a grant or an offer).
    pub fn take_handed(&self, token: u64) -> Option<SharedLease> {
        self.state.lock().handed.remove(&token)
    }

    /// Answers an owner's offer of `lease` of `bucket` checked against `limit` (0: unknown)
    /// (K4, K5).
    pub fn handle_offer(
        self: &Arc<Self>,
        from: &str,
        bucket: &str,
        lease: u64,
        limit: u64,
    ) -> SharedReply {
        self.stats.offers_received.fetch_add(1, Ordering::Relaxed);
        if let Some(used) = self.answered_before(from, lease) {
            // K5: a duplicate of an offer answered already gets the same answer.
            return SharedReply::OfferAnswer {
                used,
                more_waiting: false,
            };
        }
        let answer = self.take_offer(from, bucket, lease, limit);
        let mut st = self.state.lock();
        if st.answered.len() >= ANSWERED_OFFERS {
            st.answered.pop_front();
        }
        st.answered.push_back((Arc::from(from), lease, answer.used));
        drop(st);
        SharedReply::OfferAnswer {
            used: answer.used,
            more_waiting: answer.more_waiting,
        }
    }

    /// The answer given to an earlier copy of the offer of `lease` by `from`, if remembered
    /// or still held.
    fn answered_before(&self, from: &str, lease: u64) -> Option<bool> {
        let st = self.state.lock();
        let held = st.held.values().any(|h| {
            h.lease
                .as_ref()
                .is_some_and(|(o, l)| **o == *from && *l == lease)
        });
        let idle = st
            .idle
            .values()
            .flatten()
            .any(|i| *i.owner == *from && i.lease == lease);
        if held || idle {
            return Some(true);
        }
        st.answered
            .iter()
            .find(|(o, l, _)| **o == *from && *l == lease)
            .map(|(_, _, used)| *used)
    }

    /// Hands an offered lease to the sink (K1, K4).
    fn take_offer(
        self: &Arc<Self>,
        from: &str,
        bucket: &str,
        lease: u64,
        limit: u64,
    ) -> OfferAnswer {
        let refuse = OfferAnswer {
            used: false,
            more_waiting: false,
        };
        let Some(sink) = self.sink.get() else {
            return refuse;
        };
        let limit = (limit > 0).then_some(limit);
        let Ok(slot) = self.hold(Arc::from(bucket), Some((Arc::from(from), lease)), limit) else {
            // K1: this node already holds the bucket's limit (slots the owner does not
            // count); the owner frees the lease on this answer and offers it to the next.
            return refuse;
        };
        let token = self.hand(slot);
        let answer = sink.offer(bucket, token);
        if answer.used {
            self.stats.offers_used.fetch_add(1, Ordering::Relaxed);
        } else if let Some(slot) = self.take_handed(token) {
            // Forget it without a release (the owner frees it on this answer); the drop then
            // finds nothing to release.
            self.forget(&slot);
            drop(slot);
        }
        answer
    }

    /// Removes a slot's bookkeeping without releasing it.
    fn forget(&self, slot: &SharedLease) {
        let mut st = self.state.lock();
        if let Some(h) = st.held.remove(&slot.token)
            && let Some(a) = st.per_bucket.get_mut(&h.bucket)
        {
            a.held = a.held.saturating_sub(1);
            if a.held == 0 {
                st.per_bucket.remove(&h.bucket);
            }
        }
    }

    /// Slots held for `bucket` (leases and fail-open), for stats and tests.
    pub fn held_for(&self, bucket: &str) -> u64 {
        self.state
            .lock()
            .per_bucket
            .get(bucket)
            .map_or(0, |a| a.held)
    }

    /// Every bucket this node holds slots of, by bucket, with what kind of slots (for stats:
    /// `_wlm/stats?include=buckets`). Read only; one lock, one pass over the slots held.
    pub fn slots_by_bucket(&self) -> Vec<(Arc<str>, BucketSlots)> {
        let st = self.state.lock();
        let mut out: BTreeMap<Arc<str>, BucketSlots> = BTreeMap::new();
        for h in st.held.values() {
            let slots = out.entry(h.bucket.clone()).or_default();
            if h.lease.is_some() {
                slots.leases += 1;
            } else {
                slots.fail_open += 1;
            }
        }
        for (bucket, a) in &st.per_bucket {
            if a.idle > 0 {
                out.entry(bucket.clone()).or_default().idle = a.idle;
            }
        }
        out.into_iter().collect()
    }

    /// Slots held in all, idle leases included.
    pub fn num_held(&self) -> usize {
        let st = self.state.lock();
        st.held.len() + st.num_idle as usize
    }

    /// The owner and id of the lease held under `token`, `None` for a fail-open slot, a lease
    /// reported lost, or an unknown token (for tests and the simulation).
    pub fn lease_of(&self, token: u64) -> Option<(Arc<str>, u64)> {
        self.state
            .lock()
            .held
            .get(&token)
            .and_then(|h| h.lease.clone())
    }

    /// The leases held per owner (for renewal), owners in id order and each owner's leases in
    /// id order: the renewals go out in the same order in every run, so a deterministic
    /// simulation (`tests/sim.rs`) replays them.
    fn leases_by_owner(&self) -> BTreeMap<Arc<str>, Vec<u64>> {
        let st = self.state.lock();
        let mut out: BTreeMap<Arc<str>, Vec<u64>> = BTreeMap::new();
        for h in st.held.values() {
            if let Some((owner, lease)) = &h.lease {
                out.entry(owner.clone()).or_default().push(*lease);
            }
        }
        for i in st.idle.values().flatten() {
            out.entry(i.owner.clone()).or_default().push(i.lease);
        }
        for leases in out.values_mut() {
            leases.sort_unstable();
        }
        out
    }

    /// Marks leases the owner no longer holds as lost: their request keeps running, but the
    /// slot is not released again (K2).
    fn lost(&self, owner: &str, lost: &[u64]) {
        let mut st = self.state.lock();
        for h in st.held.values_mut() {
            if let Some((o, l)) = &h.lease
                && **o == *owner
                && lost.contains(l)
            {
                h.lease = None;
                self.stats.leases_lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        let buckets: Vec<Arc<str>> = st
            .idle
            .iter()
            .filter(|(_, list)| {
                list.iter()
                    .any(|i| *i.owner == *owner && lost.contains(&i.lease))
            })
            .map(|(b, _)| b.clone())
            .collect();
        for b in buckets {
            // K8: dropped without a release, the owner no longer holds them.
            let n = st
                .take_idle_where(&b, |i| *i.owner == *owner && lost.contains(&i.lease))
                .len() as u64;
            self.stats.leases_lost.fetch_add(n, Ordering::Relaxed);
            self.stats.idle_lost.fetch_add(n, Ordering::Relaxed);
        }
    }

    async fn call_owner(&self, owner: &str, call: SharedCall) -> Option<SharedReply> {
        self.call_owner_within(owner, call, CALL_DEADLINE).await
    }

    /// `call` to `owner` (in process when it is this node), answered within `deadline`.
    async fn call_owner_within(
        &self,
        owner: &str,
        call: SharedCall,
        deadline: Duration,
    ) -> Option<SharedReply> {
        if *owner == *self.me {
            return Some(self.owner.handle_local(&self.me, call));
        }
        let member = self.members.borrow().get(owner).cloned()?;
        let ticket = self.ticket();
        let reply = self.transport.shared(&member, call, deadline).await;
        self.record(&member, ticket, &reply);
        reply.ok()
    }

    /// Hands fail-open slots of `bucket` (whose `shared_limit` was last asked as `limit`) to
    /// its oldest parked requests while its owner cannot be asked, as long as K1 allows and
    /// requests are parked (K17).
    fn fail_open_to_parked(self: &Arc<Self>, bucket: &Arc<str>, limit: u64) {
        let Some(sink) = self.sink.get() else {
            return;
        };
        // K19: toward an owner cut off for long, only up to this node's share.
        let limit = match self.owner_of(bucket) {
            Some(m) if *m.node_id != *self.me => self.allowance_toward(&m, limit).0,
            _ => limit,
        };
        while self.fails_fast(bucket).is_some() && sink.num_parked(bucket) > 0 {
            let Ok(slot) = self.hold(bucket.clone(), None, Some(limit)) else {
                return;
            };
            let token = self.hand(slot);
            if sink.fail_open(bucket, token) {
                self.stats.fail_open.fetch_add(1, Ordering::Relaxed);
            } else {
                if let Some(slot) = self.take_handed(token) {
                    // Forgotten first: its drop frees no room to hand off again.
                    self.forget(&slot);
                    drop(slot);
                }
                return;
            }
        }
    }
}

/// Why a request of a bucket is admitted without asking when no live member serves the tier.
const EMPTY_RING: &str = "no live node serves the shared tier (empty ring)";

/// A release call's end: its owner, its releases with when each was first queued, and
/// whether the owner answered.
type ReleaseCall = (Arc<str>, Vec<(u64, Instant)>, bool);

/// Sends queued releases, batched per owner, at most one call out per owner and each owner's
/// calls independent of the others' (K15). A release the owner does not answer is sent again
/// every [`RELEASE_RETRY`] and at every membership change, for at most [`super::LEASE_TTL`]
/// (K13): after that the owner's sweep has reclaimed the lease.
async fn releaser(
    c: Weak<Coordinator>,
    mut rx: mpsc::UnboundedReceiver<(Arc<str>, u64)>,
    mut members: watch::Receiver<Members>,
    stop: CancellationToken,
) {
    // Per owner, the releases it has not answered, and those to send, with when each was first
    // queued. Owners in id order: the same calls in the same order in every run (tests/sim.rs).
    let mut unanswered: BTreeMap<Arc<str>, Vec<(u64, Instant)>> = BTreeMap::new();
    let mut to_send: BTreeMap<Arc<str>, Vec<(u64, Instant)>> = BTreeMap::new();
    // The owners with a call out, and the calls, each ending with its owner, its releases and
    // whether the owner answered (K15).
    let mut out: BTreeSet<Arc<str>> = BTreeSet::new();
    let mut calls: FuturesUnordered<BoxFuture<'static, ReleaseCall>> = FuturesUnordered::new();
    loop {
        let retry_due = !unanswered.is_empty();
        let retry = async move {
            if retry_due {
                tokio::time::sleep(RELEASE_RETRY).await;
            } else {
                std::future::pending().await
            }
        };
        // Whether to send the unanswered releases again: not when a call just ended, or a call
        // an owner fails at once (one out of the membership) would be sent again at once.
        let mut again = true;
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            Some((owner, pending, answered)) = calls.next(), if !calls.is_empty() => {
                out.remove(&owner);
                if !answered {
                    unanswered.entry(owner).or_default().extend(pending);
                }
                again = false;
            }
            m = rx.recv() => match m {
                Some((owner, lease)) => to_send.entry(owner).or_default().push((lease, Instant::now())),
                None => return,
            },
            () = retry => {}
            changed = members.changed() => if changed.is_err() { return },
        }
        while let Ok((owner, lease)) = rx.try_recv() {
            to_send
                .entry(owner)
                .or_default()
                .push((lease, Instant::now()));
        }
        if again {
            let now = Instant::now();
            for (owner, pending) in std::mem::take(&mut unanswered) {
                let live = pending
                    .into_iter()
                    .filter(|(_, since)| now.duration_since(*since) < super::LEASE_TTL);
                to_send.entry(owner).or_default().extend(live);
            }
        }
        let Some(c) = c.upgrade() else { return };
        // K15: an owner with a call out gets the releases queued meanwhile once it ends.
        let ready: Vec<Arc<str>> = to_send
            .keys()
            .filter(|owner| !out.contains(*owner))
            .cloned()
            .collect();
        for owner in ready {
            let pending = to_send.remove(&owner).unwrap_or_default();
            if pending.is_empty() {
                continue;
            }
            let leases = pending.iter().map(|(lease, _)| *lease).collect();
            out.insert(owner.clone());
            let c = c.clone();
            calls.push(Box::pin(async move {
                let answered = c
                    .call_owner(&owner, SharedCall::Release { leases })
                    .await
                    .is_some();
                (owner, pending, answered)
            }));
        }
    }
}

/// Renews every held lease every [`RENEW_EVERY`], batched per owner.
async fn renewer(c: Weak<Coordinator>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(c) = c.upgrade() else { return };
        for (owner, ids) in c.leases_by_owner() {
            if let Some(SharedReply::Renewed { lost }) = c
                .call_owner(&owner, SharedCall::Renew { leases: ids })
                .await
                && !lost.is_empty()
            {
                c.lost(&owner, &lost);
            }
        }
    }
}

/// Rebuilds the ring on every membership change.
async fn follow_ring(
    c: Weak<Coordinator>,
    mut rx: watch::Receiver<Members>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
        let live = rx.borrow_and_update().live.clone();
        let ring = Ring::new(&live, MIN_SHARED_PROTOCOL);
        let Some(c) = c.upgrade() else { return };
        *c.ring.write() = Arc::new(ring);
        {
            let mut breakers = c.breakers.lock();
            breakers.retain(&live);
            c.num_open.store(breakers.num_open(), Ordering::Release);
            // K19: an owner that left, or came back as a new incarnation, starts afresh.
            c.open_since.lock().retain(|id, t| {
                live.iter()
                    .any(|m| m.node_id == *id && m.generation == t.generation)
            });
        }
        c.release_moved();
        c.owners_changed.notify_one();
        // K18: a moved bucket's parked requests wait on its new owner.
        c.probe_wake.notify_one();
    }
}

/// Probes every owner whose breaker is open (K16) or that requests parked here wait on (K18),
/// one probe out per owner at a time and at most one every [`PROBE_EVERY`]: an empty renewal,
/// which every owner answers (`Renewed`, nothing lost) through the service its acquires go to.
/// An answer closes the breaker; a failure opens it (B1).
async fn prober(c: Weak<Coordinator>, wake: Arc<Notify>, stop: CancellationToken) {
    // The owners with a probe out, and the probes, each ending with its owner's id.
    let mut out: BTreeSet<String> = BTreeSet::new();
    let mut probes: FuturesUnordered<BoxFuture<'static, String>> = FuturesUnordered::new();
    loop {
        let Some(coordinator) = c.upgrade() else {
            return;
        };
        let targets = coordinator.to_probe();
        drop(coordinator);
        for owner in targets {
            if out.insert(owner.node_id.clone()) {
                probes.push(Box::pin(probe(c.clone(), owner)));
            }
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            Some(node) = probes.next(), if !probes.is_empty() => {
                out.remove(&node);
            }
            () = wake.notified() => {}
        }
    }
}

/// One probe of `owner` (see [`prober`]); ends no sooner than [`PROBE_EVERY`] after it was
/// sent, with the owner's id.
async fn probe(c: Weak<Coordinator>, owner: crate::Member) -> String {
    let sent = Instant::now();
    let call = c.upgrade().map(|c| (c.transport.clone(), c.ticket()));
    if let Some((transport, ticket)) = call {
        let reply = transport
            .shared(
                &owner,
                SharedCall::Renew { leases: Vec::new() },
                PROBE_DEADLINE,
            )
            .await;
        if let Some(c) = c.upgrade() {
            c.record(&owner, ticket, &reply);
        }
    }
    tokio::time::sleep_until(sent + PROBE_EVERY).await;
    owner.node_id
}

/// Hands the fail-open room freed by requests that ended to the requests parked for the same
/// buckets, while their owners cannot be asked (K17).
async fn hand_off(
    c: Weak<Coordinator>,
    mut rx: mpsc::UnboundedReceiver<(Arc<str>, u64)>,
    stop: CancellationToken,
) {
    loop {
        let (bucket, limit) = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            m = rx.recv() => match m {
                Some(m) => m,
                None => return,
            },
        };
        let Some(c) = c.upgrade() else { return };
        c.fail_open_to_parked(&bucket, limit);
    }
}

#[cfg(test)]
mod tests;
