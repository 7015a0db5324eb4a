//! Deterministic simulation of the shared tier (issue 14 point 8): N nodes' real [`Owner`],
//! [`Coordinator`] and [`SharedTier`] in one current-thread tokio runtime with paused time,
//! talking through a simulated [`Transport`], under a random workload and random faults drawn
//! from a seed.
//!
//! # What runs
//!
//! - **Nodes**: each node incarnation is the production wiring of `src/cluster.rs` — an
//!   [`Owner`] (sweep, purge), a [`Coordinator`] (renewer, releaser, ring follower) and the
//!   [`SharedTier`] that answers other nodes' calls — with the real constants (`LEASE_TTL`,
//!   `RENEW_EVERY`, `SWEEP_EVERY`, `ACQUIRE_DEADLINE`, `OFFER_DEADLINE`). The clock is
//!   [`SystemClock`], i.e. tokio's clock, which the paused runtime moves only when every task
//!   is idle: the whole run is virtual time.
//! - **Network** ([`SimTransport`]): every call is routed to the target node's
//!   [`SharedHandler`] after a random delay (1 ms to the scenario's maximum, at most 40 ms each
//!   way, so reordering is common), its answer comes back after another; with the scenario's
//!   probabilities a request or an answer is dropped (the caller sees its deadline pass) or a
//!   request is delivered twice. A call to a crashed node fails (`Unreachable`) after the
//!   delays; the messages of a crashed incarnation still in flight are lost.
//! - **Pauses** (SIGSTOP, a long GC or I/O stall): a paused node stays in the membership
//!   until its detection delay (1 to 10 s) passes, then leaves until it resumes. What reaches
//!   it waits until it resumes (its socket's buffer), and so do its own calls and the answers
//!   to them and the requests its clients send it; its timers and running requests go on (a
//!   simplification: their calls wait too). One seed in ten pauses nodes (50 ms to 8 s, ended
//!   by the heal) and has no other fault; one faulty scenario in three of the rest pauses
//!   one or two nodes besides. Pauses are drawn from a stream of their own: a seed without
//!   them runs as it did before they existed.
//! - **Membership**: one `watch` channel of [`Members`] that every node follows. A crashed
//!   node leaves it after a detection delay of 1 to 10 s (`DEAD_AFTER`), a restarted node
//!   rejoins with a higher generation, and a "flap" removes a live node for 1 to 8 s (a false
//!   suspicion: owners purge its leases while its requests still run).
//! - **Crash and restart**: a crash stops the incarnation's tasks and kills its parked and
//!   running requests; a restart starts a fresh `Owner` and `Coordinator` (empty pool, no
//!   leases) under the same node id.
//! - **Server side** ([`Sink`]): a shared-only group (no `node_limit`) per bucket with a queue
//!   of `queue_cap` places per node. Enqueue-first as the server does it
//!   (`sluice-server/src/admission/shared.rs`): a request parks, then acquires with
//!   `wants_queue`; a grant or a fail-open slot goes to the bucket's oldest parked request; an
//!   owner's offer goes to it through [`Coordinator::take_handed`], and so does a fail-open
//!   slot the coordinator hands out while the owner cannot be asked (K17); a request that
//!   finds the queue full acquires without `wants_queue` and runs when it fails open, or is
//!   refused when denied. Some
//!   clients cancel while parked. One scenario in five is *hot*: pools of 8 to 24 (so the
//!   coordinators keep idle leases, `REUSE_WINDOW`), arrivals 1 to 6 ms apart on average,
//!   requests of 1 to 25 ms (5 % up to 3 s), a load phase of 0.3 to 1.5 s.
//!   In scenarios with faults the server's backstop sweep runs
//!   every [`QUEUE_SWEEP`] and when the ring moves or a breaker opens or closes (it re-asks for
//!   every bucket with parked requests until the owner says no, as the server's does); in
//!   clean scenarios it is off, so the protocol alone must drain every queue.
//!
//! # What is checked (a failure names the check, the time and the state)
//!
//! - **C1 (clean scenarios: no drops, duplicates, crashes or membership changes)** — a bucket's
//!   requests running on shared slots, cluster-wide, never exceed its `shared_limit`, and no
//!   admission fails open. Checked at every admission. (Owners may count stale offer answers
//!   in `SharedPool::num_violations` even then: a release can overtake its offer's answer.)
//! - **K1 (always)** — per node and bucket, the requests running on shared slots (leases and
//!   fail-open) and the coordinator's `held_for` never exceed `shared_limit`; so while owners
//!   are lost or moving, a bucket's cluster-wide in-flight stays within
//!   `shared_limit × live nodes` (coordinator.rs, K1). Checked at every admission and
//!   observation.
//! - **P8 (after the heal)** — once the view is final and the answers of calls made before
//!   have arrived ([`OFFERS_SETTLED`] + 4 × the largest delay), a lease runs its first request
//!   only if it came from its bucket's owner on that view: an owner that lost a bucket to
//!   the ring hands out no more of its slots (`pool.rs`, P8). Checked at every admission.
//! - **K13/K14 (after the heal; always in lossless scenarios)** — no owner counts a lease that
//!   no request holds (a *phantom*: its request ended or gave up, and the bucket's room is
//!   short until the TTL). From [`CALLS_END`] after the heal (every release call made before
//!   has ended) — and from the start in scenarios that lose nothing (no drops, duplicates,
//!   crashes or flaps: clean ones and those that only pause nodes), for the leases whose owner
//!   and holder are in the view and not paused — every lease a live owner counts is held by
//!   a running request of a live incarnation of its holder, or idle in that holder's cache,
//!   or on its way for at most [`phantom_bound`]: [`RELEASE_RETRY`] + 4 × the largest one-way
//!   delay (a grant's answer or an offer and its answer, then the holder's releaser, one call
//!   out per owner, K15: a missed release is sent again within `RELEASE_RETRY`, K13, and a
//!   late grant is released as it arrives, K14). Not checked, the owner keeping them by
//!   design until their TTL: leases of dead holder incarnations (see *reclaim*), grants whose
//!   answer the network lost (or a duplicate's), offers whose answer their owner did not get
//!   (lost, or the holder gone), in scenarios that lose messages
//!   every offer made before the heal (one to a node out of the view is not even sent), and
//!   leases past their expiry (the sweep's, P6). Checked at every observation.
//! - **K6 (always)** — no lease runs two requests at once (a lease handed out of a
//!   coordinator's idle cache is held by one request only). Checked at every admission.
//! - **K7 (always)** — a lease runs a request only within `REUSE_WINDOW` of its first run or
//!   of the latest batch or room answer its coordinator got for the bucket from the lease's
//!   owner, whichever is later (the coordinator got it no later than its first run, reuses it
//!   only within the window of getting it, and a batch or a room answer restarts the window:
//!   K10, K11), and a lease handed out before comes back from `acquire` flagged `is_reused` (an
//!   extra lease of a batch, K10, is flagged too: it also comes from the idle cache).
//!   Checked at every admission.
//! - **Reclaim** — a lease whose holder incarnation died is gone from every live owner's pool
//!   within `LEASE_TTL + SWEEP_EVERY` (+ one observation period, [`OBSERVE_EVERY`]) after the
//!   holder died, or after the lease was created if later (an offer to a dead holder).
//! - **No stranding** — a node's parked requests of a bucket make progress (one of them is
//!   admitted) or the bucket's room goes (its owner counts `shared_limit` leases, or the node
//!   holds `shared_limit` slots, idle leases of any coordinator not counted: they are room)
//!   within [`strand_bound`] of the bucket having room: 4 × the maximum one-way delay + 2 ×
//!   [`OBSERVE_EVERY`] + `REUSE_WINDOW` in clean
//!   scenarios (no backstop: the owner's registration and offers alone), plus
//!   [`QUEUE_SWEEP`] + `ACQUIRE_DEADLINE` in scenarios with faults, from the moment the
//!   network heals (the end of the load phase) plus `RENEW_EVERY` (the longest call deadline,
//!   so every call of the faulty phase has ended). And at the end every request has been
//!   admitted, refused, cancelled or killed by a crash: none is left parked.
//! - **Stats** — at the end, per live node: `CoordinatorStats` equal what the sink saw
//!   (acquired, reused, denied, fail-open, offers used; offers received ≥ used), the
//!   coordinator holds nothing (no idle lease either), its idle-cache counters add up (K8:
//!   cached + prefetched = reused + released + lost), every owner's `sizes()` is `(0, 0)` and agrees with
//!   its lease list, in clean scenarios no owner reclaimed a lease by its TTL (every lease,
//!   idle ones included, went back by a release); and arrivals = admitted + refused +
//!   cancelled + killed.
//!
//! # Replay and scale
//!
//! `cargo test -p sluice-cluster --test sim` checks seeds `0..10_000` (over the available
//! cores, one runtime per seed). A failure prints its seed and the command replaying it:
//! `SLUICE_SIM_SEED=<seed> cargo test -p sluice-cluster --test sim -- --nocapture` (which also
//! prints the scenario). `SLUICE_SIM_SEEDS=<n>` checks `n` seeds, starting at
//! `SLUICE_SIM_FIRST_SEED` (default 0). A seed replays identically:
//! `test_a_seed_replays_identically` compares the trace digests of two runs.
//!
//! The mutation test (`test_the_simulation_catches_the_late_waiter_mutation`) runs only with
//! the test-only feature `sim-mutation-late-waiter`:
//! `cargo test -p sluice-cluster --features sim-mutation-late-waiter --test sim -- mutation`.
//!
//! The K13/K14 check fails, of seeds 0 to 9,999 (checked by hand, not in CI): a releaser that
//! never sends a release again (K13 off: 1,365 seeds, the first seed 3), late grants kept
//! (K14 off: 748, the first seed 10, a paused owner) and the releaser that waited for each
//! owner's answer before calling the next (K15 undone: 53, the first seed 116, where an
//! interim owner kept ended requests' slots while the releases waited for a paused owner).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use sluice_cluster::Member;
use sluice_cluster::clock::{Clock, SystemClock};
use sluice_cluster::membership::Members;
use sluice_cluster::ring::Ring;
use sluice_cluster::rpc::{
    BoxFuture, LocalAnswer, LocalApi, RpcError, SharedCall, SharedHandler, SharedReply, Transport,
};
use sluice_cluster::shared::coordinator::{
    Acquired, Coordinator, IDLE_SHARE, OfferAnswer, OfferSink, RELEASE_RETRY, REUSE_WINDOW,
    SharedLease,
};
use sluice_cluster::shared::owner::Owner;
use sluice_cluster::shared::{
    ACQUIRE_DEADLINE, CALL_DEADLINE, LEASE_TTL, MIN_SHARED_PROTOCOL, OWNER_LIMITS, RENEW_EVERY,
    SWEEP_EVERY, SharedTier,
};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The server's backstop sweep period (`QUEUE_SWEEP` in `sluice-server/src/server.rs`).
const QUEUE_SWEEP: Duration = Duration::from_secs(1);

/// How often the observer checks reclaim and stranding: a fifth of a second keeps the
/// stranding bound of clean scenarios under 0.6 s (well under the backstop's period, so the
/// owner's offers alone must do it) at five checks per simulated second.
const OBSERVE_EVERY: Duration = Duration::from_millis(200);

/// How long after the heal the phantom check (K13/K14) starts: a coordinator's release and
/// renewal calls wait at most `CALL_DEADLINE` for their answer, so by then every such call made before the heal — to an owner that was
/// down, or with its request or answer dropped — has ended, and the releaser sends what it
/// holds to owners that answer. (An acquire's call runs up to `LEASE_TTL`, K14, but its grant
/// arrives within two one-way delays of the call or is lost on the way: neither waits for
/// its deadline.)
const CALLS_END: Duration = CALL_DEADLINE;

/// The seeds CI checks.
const DEFAULT_SEEDS: u64 = 10_000;

/// How long after the heal P8 waits, beyond four delays, before it holds: the answers to
/// offers sent before the heal have come back by then (the owners' chains of offers end
/// there). An owner waits longer than this for an answer (`OFFER_DEADLINE`, the lease's TTL),
/// but a late answer of a bucket the ring moved starts no new offer: its owner forgot the
/// bucket's waiters at the membership change (P8 of `pool.rs`).
const OFFERS_SETTLED: Duration = Duration::from_secs(1);

/// A run stops if it has not settled this long after its load phase: far beyond any bound
/// (a backlog of 4 × 4 × 3 parked requests of up to 45 s each drains in well under it), so
/// reaching it means something is stuck.
const SETTLE_LIMIT: Duration = Duration::from_secs(900);

// ---------------------------------------------------------------------------------------------
// Seeded randomness.

/// SplitMix64: small, fast, and the same sequence on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

#[derive(Debug, Clone, PartialEq)]
enum FaultKind {
    /// Crash the node; restart it after the delay (or at the heal).
    Crash { restart_after: Option<Duration> },
    /// Remove the node from the membership for a while, though it keeps running.
    Flap { for_: Duration },
    /// Stop the node answering for a while (SIGSTOP, a long GC or I/O stall): calls to it
    /// and from it wait until it resumes, and so do requests arriving at it. It stays in the
    /// membership unless the pause outlasts the detection delay `detect` (`DEAD_AFTER`):
    /// then it leaves until it resumes.
    Pause { for_: Duration, detect: Duration },
}

#[derive(Debug, Clone)]
struct Fault {
    at: Duration,
    node: usize,
    kind: FaultKind,
}

/// One run's parameters, drawn from its seed.
#[derive(Debug, Clone)]
struct Scenario {
    nodes: usize,
    /// `shared_limit` per bucket.
    limits: Vec<u64>,
    /// Parked places per bucket per node.
    queue_cap: usize,
    max_delay: Duration,
    drop_p: f64,
    dup_p: f64,
    /// Faults of any kind: drops, duplicates, crashes, flaps or pauses (then the backstop
    /// runs).
    faulty: bool,
    faults: Vec<Fault>,
    /// Arrivals stop, faults end and the network heals at this time.
    load_until: Duration,
    /// Mean time between arrivals.
    mean_gap_ms: u64,
    /// A hot bucket: pools of at least [`IDLE_SHARE`], arrivals milliseconds apart and short
    /// requests, so the coordinators' idle caches (the reuse window) are on the path.
    hot: bool,
}

impl Scenario {
    fn draw(rng: &mut Rng) -> Scenario {
        let nodes = rng.range(2, 4) as usize;
        let limits = (0..rng.range(1, 3)).map(|_| rng.range(1, 4)).collect();
        let queue_cap = rng.range(0, 4) as usize;
        let max_delay = rng.millis(1, 40);
        let faulty = rng.chance(0.7);
        let load_until = rng.millis(3_000, 15_000);
        let mean_gap_ms = rng.range(50, 500);
        let (mut drop_p, mut dup_p, mut faults) = (0.0, 0.0, Vec::new());
        if faulty {
            if rng.chance(0.7) {
                drop_p = rng.range(1, 10) as f64 / 100.0;
            }
            if rng.chance(0.5) {
                dup_p = rng.range(1, 5) as f64 / 100.0;
            }
            for _ in 0..rng.range(0, 4) {
                let at = rng.millis(500, load_until.as_millis() as u64);
                let node = rng.below(nodes as u64) as usize;
                let kind = if rng.chance(0.6) {
                    FaultKind::Crash {
                        restart_after: rng.chance(0.7).then(|| rng.millis(200, 40_000)),
                    }
                } else {
                    FaultKind::Flap {
                        for_: rng.millis(500, 8_000),
                    }
                };
                faults.push(Fault { at, node, kind });
            }
            faults.sort_by_key(|f| f.at);
        }
        let mut sc = Scenario {
            nodes,
            limits,
            queue_cap,
            max_delay,
            drop_p,
            dup_p,
            faulty,
            faults,
            load_until,
            mean_gap_ms,
            hot: false,
        };
        if rng.chance(0.2) {
            // Shorter, with a few hundred requests at most: as cheap to check as the others.
            sc.hot = true;
            sc.limits = (0..rng.range(1, 2))
                .map(|_| rng.range(IDLE_SHARE, 3 * IDLE_SHARE))
                .collect();
            sc.queue_cap = rng.range(0, 8) as usize;
            sc.mean_gap_ms = rng.range(1, 6);
            sc.load_until = rng.millis(300, 1_500);
            sc.faults.retain(|f| f.at < sc.load_until);
        }
        sc
    }

    /// A request's running time: short in hot scenarios (a few long ones), up to 2 s
    /// otherwise (5 % up to 45 s, across lease renewals).
    fn duration(&self, rng: &mut Rng) -> Duration {
        match (self.hot, rng.chance(0.05)) {
            (true, false) => rng.millis(1, 25),
            (true, true) => rng.millis(100, 3_000),
            (false, false) => rng.millis(10, 2_000),
            (false, true) => rng.millis(2_000, 45_000),
        }
    }

    /// Adds pauses, drawn from a stream of their own so that the scenarios of seeds without
    /// pauses are those drawn before pauses existed: one seed in ten pauses nodes and has no
    /// other fault (its network loses nothing); one faulty scenario in three of the others
    /// pauses one or two nodes besides its other faults. A pause lasts 50 ms to 8 s (the
    /// trials paused owners for 0.6 s and 5–6 s) and ends by the heal.
    fn add_pauses(&mut self, seed: u64) {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x9a05e);
        let count = if rng.chance(0.1) {
            self.faulty = true;
            (self.drop_p, self.dup_p) = (0.0, 0.0);
            self.faults.clear();
            rng.range(1, 3)
        } else if self.faulty && rng.chance(0.3) {
            rng.range(1, 2)
        } else {
            return;
        };
        let until = self.load_until.as_millis() as u64;
        for _ in 0..count {
            let at = rng.range(0, until - 1);
            let for_ = if rng.chance(0.5) {
                rng.millis(50, 1_000)
            } else {
                rng.millis(1_000, 8_000)
            };
            let for_ = for_.min(Duration::from_millis(until - at));
            let detect = rng.millis(1_000, 10_000);
            self.faults.push(Fault {
                at: Duration::from_millis(at),
                node: rng.below(self.nodes as u64) as usize,
                kind: FaultKind::Pause { for_, detect },
            });
        }
        self.faults.sort_by_key(|f| f.at);
    }

    /// C1 applies: nothing but delays and reordering.
    fn is_clean(&self) -> bool {
        !self.faulty
    }

    /// Nothing is lost: no drops, duplicates, crashes or flaps (pauses only delay), so the
    /// phantom check (K13/K14) applies from the start, not only after the heal.
    fn is_lossless(&self) -> bool {
        self.drop_p == 0.0
            && self.dup_p == 0.0
            && self
                .faults
                .iter()
                .all(|f| matches!(f.kind, FaultKind::Pause { .. }))
    }
}

/// How long a request may stay parked while its bucket has room (see the module docs).
fn strand_bound(sc: &Scenario) -> Duration {
    // Room held by another node's idle lease comes back within the reuse window.
    let base = sc.max_delay * 4 + OBSERVE_EVERY * 2 + REUSE_WINDOW;
    if sc.faulty {
        base + QUEUE_SWEEP + ACQUIRE_DEADLINE
    } else {
        base
    }
}

/// How long a lease an owner counts may be held by no running request and no idle cache
/// once [`CALLS_END`] has passed after the heal, or in a lossless scenario while its owner
/// and its holder answer (see the module docs, K13/K14).
///
/// Then nothing is dropped and both nodes answer within a one-way delay each way. A lease is
/// on its way while a grant's answer or an offer travels (one delay; an unused offer's answer
/// one more), and then, if no request takes it (it ended, the grant came late, K14, or
/// exceeded K1), while the holder's releaser sends it: it has one call out per owner (K15),
/// so a release waits at most for the round trip of its owner's call in course (two delays)
/// and reaches it a delay later. That is 4 delays with the grant's leg. A release the owner
/// missed (K13) is sent again within [`RELEASE_RETRY`].
fn phantom_bound(sc: &Scenario) -> Duration {
    RELEASE_RETRY + sc.max_delay * 4
}

fn bucket_name(b: usize) -> String {
    format!("g{b}")
}

fn node_id(n: usize) -> String {
    format!("n{n}")
}

fn member(n: usize, generation: u64) -> Member {
    Member {
        node_id: node_id(n),
        generation,
        name: node_id(n),
        http_addr: "127.0.0.1:9200".parse().expect("an address"),
        transport_addr: "127.0.0.1:9300".parse().expect("an address"),
        protocol_version: sluice_cluster::PROTOCOL_VERSION,
        backend: "embedded".into(),
        version: "0.1.0".into(),
        cluster_uuid: "sim".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// The world.

/// One running incarnation of a node.
struct Inc {
    generation: u64,
    tier: Arc<SharedTier>,
    sink: Arc<Sink>,
    stop: CancellationToken,
}

#[derive(Default)]
struct Slot {
    inc: Option<Arc<Inc>>,
    generation: u64,
    in_view: bool,
    /// When the current death began (crashed, not restarted).
    died_at: Option<Duration>,
    /// When the current pause ends, while paused.
    paused_until: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lease,
    FailOpen,
}

#[derive(Debug, Clone)]
struct Running {
    node: usize,
    bucket: usize,
    /// The owner's lease it runs on (`None`: fail-open, or reported lost).
    lease: Option<(Arc<str>, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct Req {
    id: u64,
    bucket: usize,
    duration: Duration,
    cancel_after: Option<Duration>,
}

/// `(coordinator node, owner id, bucket)`.
type BatchKey = (usize, Arc<str>, String);

#[derive(Default)]
struct Tally {
    arrived: u64,
    admitted: u64,
    refused: u64,
    cancelled: u64,
    /// Parked or asking when their node crashed.
    killed: u64,
    /// Running when their node crashed (already counted as admitted).
    killed_running: u64,
    fail_open: u64,
    /// Acquires answered from a coordinator's idle cache.
    reused: u64,
    /// Of which with an extra lease of a batch, running its first request (K10).
    batched: u64,
    /// Windows restarted by an owner's room answer, over the nodes live at the end (K11).
    extended: u64,
    max_in_flight: Vec<u64>,
}

struct World {
    sc: Scenario,
    /// The buckets' wire names, by index.
    buckets: Vec<String>,
    rng: Mutex<Rng>,
    clock: Arc<dyn Clock>,
    start: Instant,
    members: watch::Sender<Members>,
    slots: Mutex<Vec<Slot>>,
    running: Mutex<BTreeMap<u64, Running>>,
    healed: Mutex<bool>,
    /// When the run healed: the view is final from then on (P8).
    healed_at: Mutex<Option<Duration>>,
    failure: Mutex<Option<String>>,
    tally: Mutex<Tally>,
    /// Leases of dead holders: (owner node, owner generation, lease id) → deadline.
    orphans: Mutex<BTreeMap<(usize, u64, u64), Duration>>,
    /// The holder incarnation (its generation) of each lease an owner gave a remote node,
    /// `(owner node, lease id) → generation`: recorded as the grant or the offer reaches its
    /// node (K13/K14). Lease ids are unique in the process (`owner.rs`, `first_lease_id`).
    lease_holders: Mutex<BTreeMap<(usize, u64), u64>>,
    /// Grants whose answer the network lost (dropped, or the answer to a duplicate) and
    /// offers whose answer the owner did not get (dropped, unreachable, or late), `(owner
    /// node, lease id)`: their owner keeps them until their TTL by design (the failure table
    /// of ARCHITECTURE.md).
    lost_leases: Mutex<BTreeSet<(usize, u64)>>,
    /// (owner node, owner generation, lease id) → since when the owner has counted a lease
    /// that no running request and no idle cache holds (K13/K14).
    phantom_since: Mutex<BTreeMap<(usize, u64, u64), Duration>>,
    /// (node, bucket) → since when its parked requests have had room.
    strand_since: Mutex<BTreeMap<(usize, usize), Duration>>,
    /// When each lease first ran a request, for K7 (a reuse within [`REUSE_WINDOW`]).
    first_run: Mutex<BTreeMap<(Arc<str>, u64), Duration>>,
    /// When each coordinator last got a batch of extra leases (K10) or a room answer (K11)
    /// from an owner for a bucket, `(node, owner, bucket) → time`: it restarts the windows of
    /// the node's leases of the bucket from that owner, for K7.
    batch_at: Mutex<BTreeMap<BatchKey, Duration>>,
    /// Every lease a coordinator handed out (acquire or offer), to tell reuses apart.
    leases_seen: Mutex<BTreeSet<(Arc<str>, u64)>>,
    /// A digest of what happened, to show replays are identical.
    trace: Mutex<u64>,
    next_req: Mutex<u64>,
}

/// Whether a replayed seed prints its events (`SLUICE_SIM_LOG=1`).
static LOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl World {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn log(&self, what: impl FnOnce() -> String) {
        if LOG.load(Ordering::Relaxed) {
            println!("{:>10.3?} {}", self.now(), what());
        }
    }

    fn fail(&self, msg: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(format!("at {:?}: {msg}", self.now()));
        }
    }

    fn failed(&self) -> bool {
        self.failure.lock().is_some()
    }

    fn note(&self, event: u64) {
        let mut t = self.trace.lock();
        let now = self.now().as_micros() as u64;
        *t = (*t ^ event ^ now.rotate_left(17)).wrapping_mul(0x100_0000_01b3);
    }

    fn inc(&self, node: usize) -> Option<Arc<Inc>> {
        self.slots.lock()[node].inc.clone()
    }

    /// When `node`'s pause ends, while it is paused.
    fn paused_until(&self, node: usize) -> Option<Duration> {
        let now = self.now();
        self.slots.lock()[node]
            .paused_until
            .filter(|until| *until > now)
    }

    fn alive(&self, node: usize, generation: u64) -> bool {
        self.slots.lock()[node]
            .inc
            .as_ref()
            .is_some_and(|i| i.generation == generation)
    }

    fn publish_view(&self) {
        let slots = self.slots.lock();
        let live: Vec<Member> = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.in_view)
            .map(|(n, s)| member(n, s.generation))
            .collect();
        drop(slots);
        self.log(|| {
            format!(
                "view: {:?}",
                live.iter()
                    .map(|m| (&m.node_id, m.generation))
                    .collect::<Vec<_>>()
            )
        });
        self.members.send_replace(Members {
            live: Arc::new(live),
            strangers: Arc::default(),
            twins: Arc::default(),
        });
    }

    /// Starts a fresh incarnation of `node` (the production wiring of `cluster.rs`).
    fn start_node(self: &Arc<Self>, node: usize) {
        let generation = {
            let mut slots = self.slots.lock();
            slots[node].generation += 1;
            slots[node].died_at = None;
            slots[node].generation
        };
        let stop = CancellationToken::new();
        let transport: Arc<dyn Transport> = Arc::new(SimTransport {
            world: Arc::downgrade(self),
            from: node,
            generation,
        });
        let me: Arc<str> = Arc::from(node_id(node));
        let owner = Owner::start(
            me.clone(),
            OWNER_LIMITS,
            self.clock.clone(),
            transport.clone(),
            self.members.subscribe(),
            stop.clone(),
        );
        let coordinator = Coordinator::start(
            me,
            transport,
            owner.clone(),
            self.members.subscribe(),
            stop.clone(),
        );
        owner.set_local(&coordinator);
        let sink = Arc::new(Sink {
            world: Arc::downgrade(self),
            node,
            generation,
            coordinator: Arc::downgrade(&coordinator),
            parked: Mutex::new(BTreeMap::new()),
            seen: Mutex::new(Seen::default()),
        });
        coordinator.set_sink(sink.clone());
        let inc = Arc::new(Inc {
            generation,
            tier: Arc::new(SharedTier { owner, coordinator }),
            sink,
            stop,
        });
        self.slots.lock()[node].inc = Some(inc.clone());
        if self.sc.faulty {
            tokio::spawn(backstop(Arc::downgrade(self), inc));
        }
        self.note(0x5157 + node as u64);
        self.log(|| format!("n{node} starts, generation {generation}"));
    }

    /// Kills `node`'s incarnation: its tasks stop, its parked and running requests die.
    fn crash(&self, node: usize) {
        let now = self.now();
        let Some(inc) = self.slots.lock()[node].inc.take() else {
            return;
        };
        self.slots.lock()[node].died_at = Some(now);
        self.slots.lock()[node].paused_until = None;
        inc.stop.cancel();
        let parked: u64 = inc
            .sink
            .parked
            .lock()
            .values()
            .map(|q| q.len() as u64)
            .sum();
        inc.sink.parked.lock().clear();
        let mut running = self.running.lock();
        let before = running.len();
        running.retain(|_, r| r.node != node);
        let died = (before - running.len()) as u64;
        drop(running);
        let mut t = self.tally.lock();
        t.killed += parked;
        t.killed_running += died;
        drop(t);
        // Every lease a live owner holds for it is now an orphan.
        let deadline = now + LEASE_TTL + SWEEP_EVERY + OBSERVE_EVERY;
        self.adopt_orphans(node, deadline);
        self.note(0xc4a5 + node as u64);
        self.log(|| format!("n{node} crashes"));
    }

    /// Records the leases live owners hold for the dead `holder` not yet recorded.
    fn adopt_orphans(&self, holder: usize, deadline: Duration) {
        let id = node_id(holder);
        let owners: Vec<(usize, Arc<Inc>)> = {
            let slots = self.slots.lock();
            slots
                .iter()
                .enumerate()
                .filter_map(|(n, s)| s.inc.clone().map(|i| (n, i)))
                .collect()
        };
        let mut orphans = self.orphans.lock();
        for (n, inc) in owners {
            inc.tier.owner.inspect(|pool| {
                for (lease, info) in pool.leases() {
                    if **info.holder == *id {
                        orphans
                            .entry((n, inc.generation, lease.0))
                            .or_insert(deadline);
                    }
                }
            });
        }
    }

    /// Starts a request on a shared slot and checks C1 and K1.
    fn run(
        self: &Arc<Self>,
        node: usize,
        generation: u64,
        req: Req,
        lease: SharedLease,
        kind: Kind,
    ) {
        if !self.alive(node, generation) {
            return;
        }
        let limit = self.sc.limits[req.bucket];
        let lease_id = self
            .inc(node)
            .and_then(|inc| inc.tier.coordinator.lease_of(lease.token()));
        if let Some(id) = &lease_id {
            let now = self.now();
            let first = *self.first_run.lock().entry(id.clone()).or_insert(now);
            // A batch of the bucket from the lease's owner restarted its window (K10).
            let batch = self
                .batch_at
                .lock()
                .get(&(node, id.0.clone(), bucket_name(req.bucket)))
                .copied()
                .unwrap_or_default();
            let since = first.max(batch);
            if first == now {
                self.check_owner_of_new_lease(node, &req, &id.0);
            }
            if now - since >= REUSE_WINDOW {
                self.fail(format!(
                    "K7: node n{node} runs request {} on lease {id:?}, first run at {first:?}, last batch at {batch:?}: reused after its window of {REUSE_WINDOW:?}",
                    req.id
                ));
            }
        }
        let (total, here) = {
            let mut running = self.running.lock();
            if let Some(id) = &lease_id
                && let Some((other, _)) = running.iter().find(|(_, r)| r.lease.as_ref() == Some(id))
            {
                let other = *other;
                drop(running);
                self.fail(format!(
                    "K6: lease {id:?} runs requests {other} and {} at once",
                    req.id
                ));
                running = self.running.lock();
            }
            running.insert(
                req.id,
                Running {
                    node,
                    bucket: req.bucket,
                    lease: lease_id,
                },
            );
            let of_bucket = running.values().filter(|r| r.bucket == req.bucket);
            let total = of_bucket.clone().count() as u64;
            let here = of_bucket.filter(|r| r.node == node).count() as u64;
            (total, here)
        };
        {
            let mut t = self.tally.lock();
            t.admitted += 1;
            if kind == Kind::FailOpen {
                t.fail_open += 1;
            }
            let m = &mut t.max_in_flight[req.bucket];
            *m = (*m).max(total);
        }
        self.note(req.id << 8 | (kind as u64) << 4 | node as u64);
        self.log(|| format!("n{node} runs request {} of bucket {} on {kind:?} (lease token {}): {total} in flight, {here} here", req.id, req.bucket, lease.token()));
        // Progress: the node's parked requests of the bucket are not stranded.
        self.strand_since.lock().remove(&(node, req.bucket));
        if self.sc.is_clean() && total > limit {
            self.fail(format!(
                "C1: bucket {} runs {total} requests on shared slots, above its shared_limit {limit} (clean scenario)",
                req.bucket
            ));
        }
        if self.sc.is_clean() && kind == Kind::FailOpen {
            self.fail(format!(
                "C1: request {} failed open in a clean scenario",
                req.id
            ));
        }
        if here > limit {
            self.fail(format!(
                "K1: node {node} runs {here} requests of bucket {} on shared slots, above its shared_limit {limit}",
                req.bucket
            ));
        }
        let Some(inc) = self.inc(node) else { return };
        let stop = inc.stop.clone();
        let world = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::select! {
                biased;
                () = stop.cancelled() => {}
                () = tokio::time::sleep(req.duration) => {}
            }
            if let Some(w) = world.upgrade() {
                w.running.lock().remove(&req.id);
                w.log(|| format!("n{node} ends request {}", req.id));
                w.note(req.id << 8 | 0xf);
            }
            drop(lease);
        });
    }

    /// P8: once the view is final (the run healed) and the answers of calls made before have
    /// arrived, a lease runs its first request only if it came from the bucket's owner on
    /// that view: an interim owner stops handing out a bucket's slots once the ring moves it
    /// back (an outside trial saw one keep offering them to its waiters, at twice the
    /// `shared_limit`, for as long as load lasted).
    fn check_owner_of_new_lease(&self, node: usize, req: &Req, owner: &str) {
        let Some(healed_at) = *self.healed_at.lock() else {
            return;
        };
        let now = self.now();
        if now < healed_at + OFFERS_SETTLED + self.sc.max_delay * 4 {
            return;
        }
        let bucket = bucket_name(req.bucket);
        let ring = Ring::new(&self.members.borrow().live, MIN_SHARED_PROTOCOL);
        let expected = ring.owner(bucket.as_bytes()).map(|m| m.node_id.clone());
        if expected.as_deref() != Some(owner) {
            self.fail(format!(
                "P8: n{node} runs request {} on a new lease of bucket {bucket} from {owner}, {:?} after the heal, but the ring places the bucket on {expected:?}",
                req.id,
                now - healed_at
            ));
        }
    }

    /// Reclaim, K1 on the coordinators and stranding, every [`OBSERVE_EVERY`].
    fn observe(&self) {
        let now = self.now();
        let incs: Vec<(usize, Arc<Inc>, bool)> = {
            let slots = self.slots.lock();
            slots
                .iter()
                .enumerate()
                .filter_map(|(n, s)| s.inc.clone().map(|i| (n, i, s.in_view)))
                .collect()
        };
        // Reclaim: leases created for dead holders since the last look, then deadlines.
        let dead: Vec<usize> = {
            let slots = self.slots.lock();
            (0..slots.len())
                .filter(|&n| slots[n].inc.is_none())
                .collect()
        };
        let dead_or_orphans = !dead.is_empty() || !self.orphans.lock().is_empty();
        for holder in dead {
            self.adopt_orphans(holder, now + LEASE_TTL + SWEEP_EVERY + OBSERVE_EVERY);
        }
        if dead_or_orphans {
            let mut orphans = self.orphans.lock();
            let mut late = None;
            orphans.retain(|&(n, generation, lease), deadline| {
                let Some((_, inc, _)) = incs.iter().find(|(m, i, _)| *m == n && i.generation == generation) else {
                    return false;
                };
                let present = inc.tier.owner.inspect(|pool| {
                    pool.lease(sluice_cluster::shared::pool::LeaseId(lease))
                        .map(|l| (l.holder.to_string(), l.expires))
                });
                match present {
                    None => false,
                    Some((holder, expires)) => {
                        if now > *deadline && late.is_none() {
                            late = Some(format!(
                                "reclaim: owner n{n} still holds lease {lease} of dead holder {holder} (expires {expires:?}), past its deadline {deadline:?}"
                            ));
                        }
                        true
                    }
                }
            });
            if let Some(msg) = late {
                drop(orphans);
                self.fail(msg);
            }
        }
        self.check_phantoms(now, &incs);
        // K1 on the coordinators, and stranding.
        let healed = *self.healed.lock();
        let check_strand = !self.sc.faulty || (healed && now >= self.sc.load_until + RENEW_EVERY);
        let bound = strand_bound(&self.sc);
        for (n, inc, _) in &incs {
            let c = &inc.tier.coordinator;
            for (b, &limit) in self.sc.limits.iter().enumerate() {
                let bucket = &self.buckets[b];
                let held = c.held_for(bucket);
                let idle_here = c.idle_for(bucket);
                if held > limit {
                    self.fail(format!(
                        "K1: coordinator n{n} holds {held} slots of bucket {b}, above its shared_limit {limit}"
                    ));
                }
                let parked = inc
                    .sink
                    .parked
                    .lock()
                    .get(&b)
                    .is_some_and(|q| !q.is_empty());
                // Idle leases (of any node) are room: they go back within REUSE_WINDOW.
                let room = parked
                    && held - idle_here < limit
                    && c.owner_of(bucket).is_some_and(|m| {
                        let owner_node: usize = m.node_id[1..].parse().expect("n<i>");
                        incs.iter()
                            .find(|(o, i, in_view)| {
                                *o == owner_node && *in_view && i.generation == m.generation
                            })
                            .is_some_and(|(_, o, _)| {
                                let idle = idle_at(&incs, &o.tier.owner, &m.node_id, bucket);
                                o.tier.owner.in_use(bucket) - idle < limit
                            })
                    });
                let mut since = self.strand_since.lock();
                if room && check_strand {
                    let from = *since.entry((*n, b)).or_insert(now);
                    if now - from > bound {
                        drop(since);
                        self.fail(format!(
                            "stranded: node n{n} has requests of bucket {b} parked while the bucket has had room since {from:?} (bound {bound:?})"
                        ));
                    }
                } else {
                    since.remove(&(*n, b));
                }
            }
        }
    }

    /// K13/K14 (after the heal): from [`CALLS_END`] after the heal, no live owner counts a
    /// lease for longer than [`phantom_bound`] that neither a running request of a live
    /// incarnation of its holder nor that holder's idle cache holds (see the module docs for
    /// the leases not checked, and why).
    fn check_phantoms(&self, now: Duration, incs: &[(usize, Arc<Inc>, bool)]) {
        let healed_at = *self.healed_at.lock();
        let lossless = self.sc.is_lossless();
        if !lossless && healed_at.is_none_or(|h| now < h + CALLS_END) {
            return;
        }
        // Offers made before the heal may have been lost on the way (an offer to a node out
        // of the view is not even sent): their owner keeps them until the TTL. Not in a
        // lossless scenario, where those whose answer the owner did not get are `lost_leases`.
        let offers_lost_before = if lossless {
            Duration::ZERO
        } else {
            healed_at.unwrap_or_default()
        };
        // Nodes that answer: live, in the view, not paused (a lossless scenario checks leases
        // while the faults last, those of two such nodes).
        let answering = |node: usize| {
            self.paused_until(node).is_none()
                && incs.iter().any(|(n, _, in_view)| *n == node && *in_view)
        };
        // (holder node, owner, lease) of every lease a request runs on or a cache keeps.
        let mut held: BTreeSet<(usize, String, u64)> = self
            .running
            .lock()
            .values()
            .filter_map(|r| r.lease.as_ref().map(|(o, l)| (r.node, o.to_string(), *l)))
            .collect();
        for (n, inc, _) in incs {
            for (_, o, l) in inc.tier.coordinator.idle_leases() {
                held.insert((*n, o.to_string(), l));
            }
        }
        let live = |node: usize, generation: u64| {
            incs.iter()
                .any(|(n, i, _)| *n == node && i.generation == generation)
        };
        let holders = self.lease_holders.lock();
        let lost = self.lost_leases.lock();
        // The owners' clock and the world's share their origin (both taken as the world was
        // made, in paused time).
        let clock_now = self.clock.now();
        let mut phantoms: BTreeMap<(usize, u64, u64), String> = BTreeMap::new();
        for (o, inc, _) in incs {
            let owner = node_id(*o);
            inc.tier.owner.inspect(|pool| {
                for (id, info) in pool.leases() {
                    let made = info.expires.saturating_sub(LEASE_TTL);
                    let h: usize = info.holder[1..].parse().expect("n<i>");
                    if info.expires <= clock_now
                        || (info.offered && made < offers_lost_before)
                        || lost.contains(&(*o, id.0))
                        || !answering(*o)
                        || !answering(h)
                    {
                        continue;
                    }
                    // None: an offer on its way to its holder.
                    let generation = if h == *o {
                        Some(inc.generation)
                    } else {
                        holders.get(&(*o, id.0)).copied()
                    };
                    if generation.is_some_and(|g| !live(h, g))
                        || held.contains(&(h, owner.clone(), id.0))
                    {
                        continue;
                    }
                    phantoms.insert(
                        (*o, inc.generation, id.0),
                        format!(
                            "owner n{o} counts lease {} of bucket {} for n{h} (offered {}, expires {:?}), which no running request nor idle cache holds",
                            id.0, info.bucket, info.offered, info.expires
                        ),
                    );
                }
            });
        }
        drop((holders, lost));
        let bound = phantom_bound(&self.sc);
        let mut since = self.phantom_since.lock();
        since.retain(|k, _| phantoms.contains_key(k));
        let mut late = None;
        for (k, what) in phantoms {
            let from = *since.entry(k).or_insert(now);
            if now - from > bound && late.is_none() {
                late = Some(format!(
                    "K13/K14 (after the heal, or always without loss): {what}, since {from:?} (healed at {healed_at:?}, bound {bound:?})"
                ));
            }
        }
        drop(since);
        if let Some(msg) = late {
            self.fail(msg);
        }
    }

    /// Records who a lease an owner gave reached, and whether its grant's answer was lost
    /// (K13/K14): `call` went from `from` (generation `generation`) to `to` (generation
    /// `to_generation`), was answered `reply`, and the answer reaches its caller if
    /// `answered`.
    fn note_leases(
        &self,
        (from, generation): (usize, u64),
        (to, to_generation): (usize, u64),
        call: &SharedCall,
        reply: &SharedReply,
        answered: bool,
    ) {
        match (call, reply) {
            (SharedCall::Acquire { .. }, SharedReply::Granted { lease, extra, .. }) => {
                let mut holders = self.lease_holders.lock();
                let mut lost = self.lost_leases.lock();
                for &l in std::iter::once(lease).chain(extra) {
                    holders.insert((to, l), generation);
                    if !answered {
                        lost.insert((to, l));
                    }
                }
            }
            (SharedCall::Offer { lease, .. }, _) => {
                self.lease_holders
                    .lock()
                    .insert((from, *lease), to_generation);
            }
            _ => {}
        }
    }

    /// Whether everything has settled: nothing parked or running, every pool empty, every
    /// coordinator empty.
    fn settled(&self) -> bool {
        if !self.running.lock().is_empty() {
            return false;
        }
        let slots = self.slots.lock();
        slots.iter().filter_map(|s| s.inc.as_ref()).all(|inc| {
            inc.sink.parked.lock().values().all(VecDeque::is_empty)
                && inc.tier.coordinator.num_held() == 0
                && inc.tier.owner.sizes() == (0, 0)
        })
    }

    /// The end-of-run checks: nothing left over, stats agree with what happened.
    fn final_checks(&self) {
        let t = self.tally.lock();
        if t.arrived != t.admitted + t.refused + t.cancelled + t.killed {
            self.fail(format!(
                "stats: {} arrivals but {} admitted + {} refused + {} cancelled + {} killed",
                t.arrived, t.admitted, t.refused, t.cancelled, t.killed
            ));
        }
        drop(t);
        let slots = self.slots.lock();
        for (n, s) in slots.iter().enumerate() {
            let Some(inc) = &s.inc else { continue };
            let parked: usize = inc.sink.parked.lock().values().map(VecDeque::len).sum();
            if parked > 0 {
                self.fail(format!(
                    "stranded: node n{n} still has {parked} parked requests at the end"
                ));
            }
            let c = &inc.tier.coordinator;
            self.tally.lock().extended += c.stats.extended.load(Ordering::Relaxed);
            if c.num_held() != 0 {
                self.fail(format!(
                    "stats: coordinator n{n} still holds {} slots at the end",
                    c.num_held()
                ));
            }
            let (buckets, leases) = inc.tier.owner.sizes();
            let listed = inc.tier.owner.inspect(|p| p.leases().len());
            if (buckets, leases) != (0, 0) || listed != leases {
                self.fail(format!(
                    "stats: owner n{n} still holds {leases} leases ({listed} listed) in {buckets} buckets at the end"
                ));
            }
            let seen = inc.sink.seen.lock();
            let st = &c.stats;
            let pairs = [
                (
                    "acquired",
                    st.acquired.load(Ordering::Relaxed),
                    seen.acquired,
                ),
                ("denied", st.denied.load(Ordering::Relaxed), seen.denied),
                (
                    "fail_open",
                    st.fail_open.load(Ordering::Relaxed),
                    seen.fail_open,
                ),
                (
                    "offers_used",
                    st.offers_used.load(Ordering::Relaxed),
                    seen.offers_used,
                ),
            ];
            for (name, stat, saw) in pairs {
                if stat != saw {
                    self.fail(format!(
                        "stats: coordinator n{n} counts {name} = {stat}, the sink saw {saw}"
                    ));
                }
            }
            // K8: every lease that went idle was reused, released or lost; none is left.
            let cached = st.cached.load(Ordering::Relaxed) + st.prefetched.load(Ordering::Relaxed);
            let out = st.reused.load(Ordering::Relaxed)
                + st.idle_released.load(Ordering::Relaxed)
                + st.idle_lost.load(Ordering::Relaxed);
            if cached != out || c.num_idle() != 0 {
                self.fail(format!(
                    "stats: coordinator n{n} cached {cached} idle leases, reused, released or lost {out}, {} still idle",
                    c.num_idle()
                ));
            }
            let reused = st.reused.load(Ordering::Relaxed);
            if reused != seen.reused {
                self.fail(format!(
                    "stats: coordinator n{n} counts {reused} reused leases, the sink saw {}",
                    seen.reused
                ));
            }
            // Without faults every lease goes back by a release: none expires at an owner
            // (an idle lease dropped without its release would).
            let expired = inc.tier.owner.inspect(|p| p.num_expired());
            if self.sc.is_clean() && expired > 0 {
                self.fail(format!(
                    "stats: owner n{n} reclaimed {expired} expired leases in a run without faults"
                ));
            }
            let received = st.offers_received.load(Ordering::Relaxed);
            if received < seen.offers_used || received < seen.offers_offered {
                self.fail(format!(
                    "stats: coordinator n{n} counts {received} offers received, the sink used {} of {} offered",
                    seen.offers_used, seen.offers_offered
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The server side.

#[derive(Default)]
struct Seen {
    acquired: u64,
    /// Acquires answered with a lease handed out before (the idle cache).
    reused: u64,
    denied: u64,
    fail_open: u64,
    offers_offered: u64,
    offers_used: u64,
}

/// One node's parked requests and what its coordinator's answers were (see the module docs).
struct Sink {
    world: Weak<World>,
    node: usize,
    generation: u64,
    coordinator: Weak<Coordinator>,
    /// bucket → parked requests, oldest first.
    parked: Mutex<BTreeMap<usize, VecDeque<Req>>>,
    seen: Mutex<Seen>,
}

impl Sink {
    /// Gives the lease (or fail-open slot, `kind`) handed under `token` to the oldest parked
    /// request of `bucket`; false if none is parked.
    fn grant_oldest(&self, w: &Arc<World>, bucket: usize, token: u64, kind: Kind) -> bool {
        let Some(c) = self.coordinator.upgrade() else {
            return false;
        };
        let req = self
            .parked
            .lock()
            .get_mut(&bucket)
            .and_then(VecDeque::pop_front);
        let Some(req) = req else { return false };
        match c.take_handed(token) {
            Some(lease) => w.run(self.node, self.generation, req, lease, kind),
            None => w.fail(format!(
                "handed lease {token} of node n{} is gone",
                self.node
            )),
        }
        true
    }

    /// `coordinator.acquire`, with its outcome counted as the sink saw it.
    async fn acquire(
        &self,
        c: &Arc<Coordinator>,
        bucket: usize,
        limit: u64,
        wants_queue: bool,
    ) -> Acquired {
        let a = c
            .acquire(&bucket_name(bucket), limit, wants_queue, ACQUIRE_DEADLINE)
            .await;
        if let Acquired::Lease(l) = &a
            && let Some(w) = self.world.upgrade()
        {
            let again = c
                .lease_of(l.token())
                .is_some_and(|id| !w.leases_seen.lock().insert(id));
            // A lease handed out before comes from the idle cache; so may a new one (the extra
            // lease of a batch, K10).
            if again && !l.is_reused() {
                w.fail(format!(
                    "n{}: a lease handed out before came back with is_reused() = false",
                    self.node
                ));
            }
            if l.is_reused() && !again {
                w.tally.lock().batched += 1;
            }
            if l.is_reused() {
                self.seen.lock().reused += 1;
                w.tally.lock().reused += 1;
            }
        }
        let mut seen = self.seen.lock();
        match &a {
            Acquired::Lease(_) => seen.acquired += 1,
            Acquired::Denied { .. } => seen.denied += 1,
            Acquired::FailOpen { .. } => seen.fail_open += 1,
            Acquired::Unavailable { .. } => {}
        }
        a
    }
}

impl OfferSink for Sink {
    fn offer(&self, bucket: &str, token: u64) -> OfferAnswer {
        let none = OfferAnswer {
            used: false,
            more_waiting: false,
        };
        let Some(w) = self.world.upgrade() else {
            return none;
        };
        if !w.alive(self.node, self.generation) {
            return none;
        }
        self.seen.lock().offers_offered += 1;
        if let Some(id) = self.coordinator.upgrade().and_then(|c| c.lease_of(token)) {
            w.leases_seen.lock().insert(id);
        }
        w.log(|| format!("n{} offered token {token} of {bucket}", self.node));
        let b: usize = bucket[1..].parse().expect("g<i>");
        if !self.grant_oldest(&w, b, token, Kind::Lease) {
            return none;
        }
        self.seen.lock().offers_used += 1;
        OfferAnswer {
            used: true,
            more_waiting: self.parked.lock().get(&b).is_some_and(|q| !q.is_empty()),
        }
    }

    fn num_parked(&self, bucket: &str) -> u64 {
        let b: usize = bucket[1..].parse().expect("g<i>");
        self.parked.lock().get(&b).map_or(0, |q| q.len() as u64)
    }

    fn fail_open(&self, bucket: &str, token: u64) -> bool {
        let Some(w) = self.world.upgrade() else {
            return false;
        };
        if !w.alive(self.node, self.generation) {
            return false;
        }
        w.log(|| format!("n{} handed fail-open token {token} of {bucket}", self.node));
        let b: usize = bucket[1..].parse().expect("g<i>");
        if !self.grant_oldest(&w, b, token, Kind::FailOpen) {
            return false;
        }
        self.seen.lock().fail_open += 1;
        true
    }
}

/// The idle leases of `bucket` that live coordinators keep and `owner` (node `owner_id`)
/// still counts.
fn idle_at(incs: &[(usize, Arc<Inc>, bool)], owner: &Owner, owner_id: &str, bucket: &str) -> u64 {
    let mut n = 0;
    for (_, inc, _) in incs {
        for (b, o, lease) in inc.tier.coordinator.idle_leases() {
            if *b == *bucket
                && *o == *owner_id
                && owner.inspect(|p| {
                    p.lease(sluice_cluster::shared::pool::LeaseId(lease))
                        .is_some()
                })
            {
                n += 1;
            }
        }
    }
    n
}

/// One request arriving at `node` (the server's admission, enqueue-first).
async fn arrive(w: Arc<World>, node: usize, req: Req) {
    // A paused node reads its clients' requests when it resumes.
    wait_resumed(&Arc::downgrade(&w), node).await;
    let Some(inc) = w.inc(node) else { return };
    w.tally.lock().arrived += 1;
    let generation = inc.generation;
    let c = inc.tier.coordinator.clone();
    let sink = inc.sink.clone();
    let limit = w.sc.limits[req.bucket];
    let parked = {
        let mut p = sink.parked.lock();
        let q = p.entry(req.bucket).or_default();
        if q.len() < w.sc.queue_cap {
            q.push_back(req);
            true
        } else {
            false
        }
    };
    if parked && let Some(after) = req.cancel_after {
        let (weak, sink) = (Arc::downgrade(&w), Arc::downgrade(&sink));
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let (Some(w), Some(sink)) = (weak.upgrade(), sink.upgrade()) else {
                return;
            };
            if !w.alive(node, generation) {
                return;
            }
            let removed = {
                let mut p = sink.parked.lock();
                let q = p.entry(req.bucket).or_default();
                let before = q.len();
                q.retain(|r| r.id != req.id);
                before != q.len()
            };
            if removed {
                w.tally.lock().cancelled += 1;
                w.note(req.id << 8 | 0xc);
            }
        });
    }
    let outcome = sink.acquire(&c, req.bucket, limit, parked).await;
    w.log(|| {
        format!(
            "n{node} request {} of bucket {} (parked {parked}): {outcome:?}",
            req.id, req.bucket
        )
    });
    if !w.alive(node, generation) {
        if !parked {
            // A parked one was counted by the crash.
            w.tally.lock().killed += 1;
        }
        return;
    }
    match (outcome, parked) {
        (Acquired::Lease(lease), true) => {
            let token = c.hand(lease);
            if !sink.grant_oldest(&w, req.bucket, token, Kind::Lease) {
                drop(c.take_handed(token));
            }
        }
        (Acquired::Lease(lease), false) => w.run(node, generation, req, lease, Kind::Lease),
        (Acquired::Denied { .. } | Acquired::Unavailable { .. }, true) => {}
        (Acquired::Denied { .. } | Acquired::Unavailable { .. }, false) => {
            w.tally.lock().refused += 1;
            w.note(req.id << 8 | 0xe);
        }
        (Acquired::FailOpen { lease, .. }, false) => {
            w.run(node, generation, req, lease, Kind::FailOpen)
        }
        (Acquired::FailOpen { lease, .. }, true) => {
            // As a grant: the bucket's oldest parked request runs on it (the server's FIFO).
            let token = c.hand(lease);
            if !sink.grant_oldest(&w, req.bucket, token, Kind::FailOpen) {
                drop(c.take_handed(token));
            }
        }
    }
}

/// The server's backstop sweep (`sluice-server/src/admission/shared.rs`, `sweep`): every
/// [`QUEUE_SWEEP`], and at once when the ring moves or a breaker opens or closes
/// (`Coordinator::owners_changed`), asks again for each bucket with parked requests: at most
/// once for each request parked when it began, until the owner says no, and fail-open slots
/// only while the next ask would not wait (K16) — each slot to the bucket's oldest parked
/// request.
async fn backstop(w: Weak<World>, inc: Arc<Inc>) {
    let stop = inc.stop.clone();
    let mut tick = tokio::time::interval(QUEUE_SWEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let c = inc.tier.coordinator.clone();
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
            () = c.owners_changed() => {
                // A ring change reaches every node's coordinator at one instant, through a
                // watch whose receivers tokio wakes in a random order: each node asks a
                // millisecond apart, in node order, so that a seed replays identically.
                tokio::time::sleep(Duration::from_millis(1 + inc.sink.node as u64)).await;
            }
        }
        let Some(world) = w.upgrade() else { return };
        let buckets: Vec<(usize, usize)> = inc
            .sink
            .parked
            .lock()
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&b, q)| (b, q.len()))
            .collect();
        for (b, n) in buckets {
            let limit = world.sc.limits[b];
            for _ in 0..n {
                let (lease, kind, again) = match inc.sink.acquire(&c, b, limit, true).await {
                    Acquired::Lease(lease) => (lease, Kind::Lease, true),
                    Acquired::FailOpen { lease, .. } => {
                        let again = c.fails_fast(&bucket_name(b)).is_some();
                        (lease, Kind::FailOpen, again)
                    }
                    Acquired::Denied { .. } | Acquired::Unavailable { .. } => break,
                };
                if !world.alive(inc.sink.node, inc.generation) {
                    return;
                }
                let token = c.hand(lease);
                if !inc.sink.grant_oldest(&world, b, token, kind) {
                    drop(c.take_handed(token));
                    break;
                }
                if !again {
                    break;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The network.

/// Routes calls to the target node's [`SharedHandler`] with the scenario's delays, drops and
/// duplicates (see the module docs).
struct SimTransport {
    world: Weak<World>,
    from: usize,
    generation: u64,
}

struct Plan {
    there: Duration,
    back: Duration,
    drop_request: bool,
    drop_answer: bool,
    duplicate: Option<Duration>,
}

impl World {
    fn plan(&self) -> Plan {
        let healed = *self.healed.lock();
        let (drop_p, dup_p) = if healed {
            (0.0, 0.0)
        } else {
            (self.sc.drop_p, self.sc.dup_p)
        };
        let max = self.sc.max_delay.as_millis() as u64;
        let mut rng = self.rng.lock();
        let there = rng.millis(1, max);
        let back = rng.millis(1, max);
        let drop_request = drop_p > 0.0 && rng.chance(drop_p);
        let drop_answer = drop_p > 0.0 && rng.chance(drop_p);
        let duplicate = (dup_p > 0.0 && rng.chance(dup_p)).then(|| rng.millis(1, max));
        Plan {
            there,
            back,
            drop_request,
            drop_answer,
            duplicate,
        }
    }
}

/// Delivers `call` from `from` to `to` after `delay`; sends the answer on `answer` after `back`.
async fn deliver(
    w: Weak<World>,
    from: usize,
    generation: u64,
    to: usize,
    call: SharedCall,
    delay: Duration,
    answer: Option<(oneshot::Sender<Result<SharedReply, RpcError>>, Duration)>,
) {
    tokio::time::sleep(delay).await;
    // A paused node reads what reached it when it resumes.
    wait_resumed(&w, to).await;
    let Some(world) = w.upgrade() else { return };
    if !world.alive(from, generation) {
        return; // a dead incarnation's messages are lost
    }
    let reply = match world.inc(to) {
        Some(inc) => {
            world.note(0xdead_0000 + ((from as u64) << 4 | to as u64));
            world.log(|| format!("n{from} -> n{to}: {call:?}"));
            let tier: Arc<dyn SharedHandler> = inc.tier.clone();
            let reply = tier.shared(&node_id(from), call.clone()).await;
            world.note_leases(
                (from, generation),
                (to, inc.generation),
                &call,
                &reply,
                answer.is_some(),
            );
            Ok(reply)
        }
        None => Err(RpcError::Unreachable {
            node: node_id(to),
            addr: "sim".into(),
            reason: "connection refused".into(),
        }),
    };
    drop(world);
    if let Some((tx, back)) = answer {
        tokio::time::sleep(back).await;
        wait_resumed(&w, from).await;
        let _ = tx.send(reply);
    }
}

/// Returns once `node` is not paused (at once if it is not).
async fn wait_resumed(w: &Weak<World>, node: usize) {
    loop {
        let until = {
            let Some(world) = w.upgrade() else { return };
            world.paused_until(node).map(|u| world.start + u)
        };
        match until {
            Some(at) => tokio::time::sleep_until(at).await,
            None => return,
        }
    }
}

impl Transport for SimTransport {
    fn ping(&self, to: &Member, _deadline: Duration) -> BoxFuture<'_, Result<String, RpcError>> {
        let node = to.node_id.clone();
        Box::pin(async move {
            Err(RpcError::Remote {
                node,
                reason: "the simulation carries only shared-tier calls".into(),
            })
        })
    }

    fn local(
        &self,
        to: &Member,
        _api: LocalApi,
        _params: Value,
        _deadline: Duration,
    ) -> BoxFuture<'_, Result<LocalAnswer, RpcError>> {
        let node = to.node_id.clone();
        Box::pin(async move {
            Err(RpcError::Remote {
                node,
                reason: "the simulation carries only shared-tier calls".into(),
            })
        })
    }

    fn shared(
        &self,
        to: &Member,
        call: SharedCall,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<SharedReply, RpcError>> {
        let to_id = to.node_id.clone();
        Box::pin(async move {
            let unreachable = |reason: &str| RpcError::Unreachable {
                node: to_id.clone(),
                addr: "sim".into(),
                reason: reason.into(),
            };
            // A paused node sends nothing until it resumes.
            wait_resumed(&self.world, self.from).await;
            let Some(w) = self.world.upgrade() else {
                return Err(unreachable("the simulation ended"));
            };
            if !w.alive(self.from, self.generation) {
                return Err(unreachable("this node is down"));
            }
            let start = Instant::now();
            let offered = match &call {
                SharedCall::Offer { lease, .. } => Some(*lease),
                _ => None,
            };
            let to: usize = to_id[1..].parse().expect("n<i>");
            let asked: Vec<String> = match &call {
                SharedCall::Acquire { bucket, .. } => vec![bucket.clone()],
                SharedCall::Room { buckets } => buckets.clone(),
                _ => Vec::new(),
            };
            let plan = w.plan();
            let (tx, rx) = oneshot::channel();
            let weak = Arc::downgrade(&w);
            drop(w);
            if let Some(delay) = plan.duplicate {
                tokio::spawn(deliver(
                    weak.clone(),
                    self.from,
                    self.generation,
                    to,
                    call.clone(),
                    delay,
                    None,
                ));
            }
            if !plan.drop_request {
                let answer = (!plan.drop_answer).then_some((tx, plan.back));
                tokio::spawn(deliver(
                    weak,
                    self.from,
                    self.generation,
                    to,
                    call,
                    plan.there,
                    answer,
                ));
            }
            let dropped = plan.drop_request || plan.drop_answer;
            let answer = tokio::time::timeout(deadline, rx).await;
            // An offer whose answer the owner does not get keeps its lease until the TTL (the
            // owner never frees a lease it cannot prove unused): K13/K14 leaves it alone. A
            // late answer is no reason: the owner waits for it as long as the lease lives
            // (`OFFER_DEADLINE`), so an unused slot offered to a paused holder comes back
            // when the holder resumes.
            let lost = match &answer {
                Ok(Ok(Ok(_))) => false,
                Err(_) => dropped,
                _ => true,
            };
            if let Some(lease) = offered
                && lost
                && let Some(w) = self.world.upgrade()
            {
                w.lost_leases.lock().insert((self.from, lease));
            }
            match answer {
                Ok(Ok(reply)) => {
                    // The coordinator acts on the answer in this same poll: the restart of
                    // the windows of a batch's bucket (K10) or of a bucket with room (K11)
                    // happens now.
                    let restarted: Vec<bool> = match &reply {
                        Ok(SharedReply::Granted { extra, .. }) => vec![!extra.is_empty()],
                        Ok(SharedReply::Room { free }) => free.clone(),
                        _ => Vec::new(),
                    };
                    if let Some(w) = self.world.upgrade() {
                        let now = w.now();
                        let mut at = w.batch_at.lock();
                        for (bucket, yes) in asked.into_iter().zip(restarted) {
                            if yes {
                                at.insert((self.from, Arc::from(to_id.as_str()), bucket), now);
                            }
                        }
                    }
                    reply
                }
                _ => {
                    tokio::time::sleep_until(start + deadline).await;
                    Err(RpcError::DeadlineExceeded {
                        node: to_id.clone(),
                        deadline,
                    })
                }
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Running a seed.

/// What a run produced.
struct Outcome {
    failure: Option<String>,
    trace: u64,
    scenario: Scenario,
    summary: String,
}

fn run_seed(seed: u64) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(simulate(seed))
}

async fn simulate(seed: u64) -> Outcome {
    let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5eed);
    let mut sc = Scenario::draw(&mut rng);
    sc.add_pauses(seed);
    let (members, _) = watch::channel(Members::default());
    let w = Arc::new(World {
        sc: sc.clone(),
        buckets: (0..sc.limits.len()).map(bucket_name).collect(),
        rng: Mutex::new(rng),
        clock: Arc::new(SystemClock::new()),
        start: Instant::now(),
        members,
        slots: Mutex::new((0..sc.nodes).map(|_| Slot::default()).collect()),
        running: Mutex::new(BTreeMap::new()),
        healed: Mutex::new(false),
        healed_at: Mutex::new(None),
        failure: Mutex::new(None),
        tally: Mutex::new(Tally {
            max_in_flight: vec![0; sc.limits.len()],
            ..Tally::default()
        }),
        orphans: Mutex::new(BTreeMap::new()),
        lease_holders: Mutex::new(BTreeMap::new()),
        lost_leases: Mutex::new(BTreeSet::new()),
        phantom_since: Mutex::new(BTreeMap::new()),
        strand_since: Mutex::new(BTreeMap::new()),
        first_run: Mutex::new(BTreeMap::new()),
        batch_at: Mutex::new(BTreeMap::new()),
        leases_seen: Mutex::new(BTreeSet::new()),
        trace: Mutex::new(seed),
        next_req: Mutex::new(1),
    });
    // The phantom check (K13/K14) reads the owners' lease expiries on the world's time.
    assert_eq!(
        w.clock.now(),
        w.now(),
        "the owners' clock starts with the world"
    );
    for n in 0..sc.nodes {
        w.slots.lock()[n].in_view = true;
    }
    w.publish_view();
    for n in 0..sc.nodes {
        w.start_node(n);
    }
    let stop = CancellationToken::new();
    tokio::spawn(observer(Arc::downgrade(&w), stop.clone()));
    tokio::spawn(faults(w.clone()));
    // The load phase.
    loop {
        let gap = {
            let mut rng = w.rng.lock();
            rng.millis(1, 2 * w.sc.mean_gap_ms)
        };
        tokio::time::sleep(gap).await;
        if w.now() >= sc.load_until || w.failed() {
            break;
        }
        let (node, req) = {
            let mut rng = w.rng.lock();
            let node = rng.below(sc.nodes as u64) as usize;
            let bucket = rng.below(sc.limits.len() as u64) as usize;
            let duration = sc.duration(&mut rng);
            let cancel_after = rng.chance(0.3).then(|| rng.millis(100, 10_000));
            let mut next = w.next_req.lock();
            let id = *next;
            *next += 1;
            (
                node,
                Req {
                    id,
                    bucket,
                    duration,
                    cancel_after,
                },
            )
        };
        tokio::spawn(arrive(w.clone(), node, req));
    }
    // Heal: every node up and in the view, the network clean.
    *w.healed.lock() = true;
    *w.healed_at.lock() = Some(w.now());
    for n in 0..sc.nodes {
        if w.inc(n).is_none() {
            w.start_node(n);
        }
        w.slots.lock()[n].in_view = true;
        w.slots.lock()[n].paused_until = None;
    }
    w.publish_view();
    // Settle: backlogs drain, leaked leases expire (the run ends once nothing is left).
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if w.failed() || w.settled() {
            break;
        }
        if w.now() >= sc.load_until + SETTLE_LIMIT {
            w.fail("stranded: the run did not settle".into());
            break;
        }
    }
    if !w.failed() {
        w.final_checks();
    }
    stop.cancel();
    for n in 0..sc.nodes {
        if let Some(inc) = w.slots.lock()[n].inc.take() {
            inc.stop.cancel();
        }
    }
    let t = w.tally.lock();
    let summary = format!(
        "arrived {} admitted {} (fail-open {}, reused {}, batched {}, extended {}) refused {} cancelled {} killed {}; max in flight per bucket {:?}; ended at {:?}",
        t.arrived,
        t.admitted,
        t.fail_open,
        t.reused,
        t.batched,
        t.extended,
        t.refused,
        t.cancelled,
        t.killed,
        t.max_in_flight,
        w.now()
    );
    drop(t);
    let failure = w.failure.lock().clone();
    let trace = *w.trace.lock();
    Outcome {
        failure,
        trace,
        scenario: sc,
        summary,
    }
}

async fn observer(w: Weak<World>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(OBSERVE_EVERY);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(w) = w.upgrade() else { return };
        if w.failed() {
            return;
        }
        w.observe();
    }
}

/// Plays the scenario's crashes, restarts, detections and flaps.
async fn faults(w: Arc<World>) {
    for f in w.sc.faults.clone() {
        let now = w.now();
        if f.at > now {
            tokio::time::sleep(f.at - now).await;
        }
        if *w.healed.lock() {
            return;
        }
        match f.kind {
            FaultKind::Crash { restart_after } => {
                if w.inc(f.node).is_none() {
                    continue;
                }
                w.crash(f.node);
                let detect = w.rng.lock().millis(1_000, 10_000);
                let weak = Arc::downgrade(&w);
                let node = f.node;
                tokio::spawn(async move {
                    let died = weak.upgrade().and_then(|w| w.slots.lock()[node].died_at);
                    tokio::time::sleep(detect).await;
                    let Some(w) = weak.upgrade() else { return };
                    if *w.healed.lock() {
                        return;
                    }
                    let still = {
                        let slots = w.slots.lock();
                        slots[node].inc.is_none() && slots[node].died_at == died
                    };
                    if still {
                        w.slots.lock()[node].in_view = false;
                        w.publish_view();
                    }
                });
                if let Some(after) = restart_after {
                    let weak = Arc::downgrade(&w);
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let Some(w) = weak.upgrade() else { return };
                        if *w.healed.lock() || w.inc(node).is_some() {
                            return;
                        }
                        w.start_node(node);
                        w.slots.lock()[node].in_view = true;
                        w.publish_view();
                    });
                }
            }
            FaultKind::Pause { for_, detect } => {
                let until = w.now() + for_;
                {
                    let mut slots = w.slots.lock();
                    let slot = &mut slots[f.node];
                    if slot.inc.is_none() || slot.paused_until.is_some_and(|u| u > now) {
                        continue;
                    }
                    slot.paused_until = Some(until);
                }
                w.note(0x9a05 + f.node as u64);
                w.log(|| format!("n{} pauses for {for_:?}", f.node));
                let weak = Arc::downgrade(&w);
                let node = f.node;
                tokio::spawn(async move {
                    let paused = |w: &World| w.slots.lock()[node].paused_until == Some(until);
                    let mut removed = false;
                    if detect < for_ {
                        tokio::time::sleep(detect).await;
                        let Some(w) = weak.upgrade() else { return };
                        if *w.healed.lock() {
                            return;
                        }
                        if paused(&w) && w.slots.lock()[node].in_view {
                            w.slots.lock()[node].in_view = false;
                            w.publish_view();
                            removed = true;
                        }
                        drop(w);
                        tokio::time::sleep(for_ - detect).await;
                    } else {
                        tokio::time::sleep(for_).await;
                    }
                    let Some(w) = weak.upgrade() else { return };
                    if *w.healed.lock() || !paused(&w) {
                        return;
                    }
                    w.slots.lock()[node].paused_until = None;
                    w.log(|| format!("n{node} resumes"));
                    if removed && w.inc(node).is_some() {
                        w.slots.lock()[node].in_view = true;
                        w.publish_view();
                    }
                });
            }
            FaultKind::Flap { for_ } => {
                if !w.slots.lock()[f.node].in_view {
                    continue;
                }
                w.slots.lock()[f.node].in_view = false;
                w.publish_view();
                let weak = Arc::downgrade(&w);
                let node = f.node;
                tokio::spawn(async move {
                    tokio::time::sleep(for_).await;
                    let Some(w) = weak.upgrade() else { return };
                    if *w.healed.lock() {
                        return;
                    }
                    if w.inc(node).is_some() {
                        w.slots.lock()[node].in_view = true;
                        w.publish_view();
                    }
                });
            }
        }
    }
}

/// Runs `count` seeds from `first` over the available cores; returns the failing seeds with
/// their messages, in seed order.
fn run_seeds(first: u64, count: u64) -> Vec<(u64, String)> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut failed = Vec::new();
                let mut seed = first + t;
                while seed < first + count {
                    let out = run_seed(seed);
                    if let Some(f) = out.failure {
                        failed.push((seed, f));
                    }
                    seed += threads;
                }
                failed
            })
        })
        .collect();
    let mut failed: Vec<(u64, String)> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a simulation thread"))
        .collect();
    failed.sort_by_key(|(s, _)| *s);
    failed
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be an integer, got {v:?}"))
    })
}

fn replay_command(seed: u64) -> String {
    format!(
        "SLUICE_SIM_SEED={seed} cargo test -p sluice-cluster --test sim -- --nocapture test_simulated_seeds"
    )
}

#[test]
fn test_simulated_seeds() {
    if let Some(seed) = env_u64("SLUICE_SIM_SEED") {
        LOG.store(std::env::var("SLUICE_SIM_LOG").is_ok(), Ordering::Relaxed);
        let out = run_seed(seed);
        println!("seed {seed}: {:#?}\n{}", out.scenario, out.summary);
        if let Some(f) = out.failure {
            panic!("seed {seed} failed: {f}");
        }
        return;
    }
    let first = env_u64("SLUICE_SIM_FIRST_SEED").unwrap_or(0);
    let count = env_u64("SLUICE_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
    let began = std::time::Instant::now();
    let failed = run_seeds(first, count);
    println!(
        "checked {count} seeds from {first} in {:.1}s",
        began.elapsed().as_secs_f64()
    );
    if let Some((seed, msg)) = failed.first() {
        let more = failed.len() - 1;
        panic!(
            "seed {seed} failed: {msg}\n({more} more failing seeds: {:?})\nreplay: {}",
            failed
                .iter()
                .skip(1)
                .take(20)
                .map(|(s, _)| *s)
                .collect::<Vec<_>>(),
            replay_command(*seed)
        );
    }
}

#[test]
fn test_a_seed_replays_identically() {
    for seed in [1, 7, 42] {
        let a = run_seed(seed);
        let b = run_seed(seed);
        assert_eq!(a.trace, b.trace, "seed {seed} did not replay identically");
        assert_eq!(
            a.summary, b.summary,
            "seed {seed} did not replay identically"
        );
    }
}

#[test]
fn test_the_workload_exercises_every_path() {
    // The seeds CI checks must reach the paths the checks are about: grants, denials,
    // offers, fail-open, crashes with leases out, refusals, leases reused from the idle
    // cache, extra leases of batches running requests, windows extended, and pauses.
    let (mut fail_open, mut offers, mut killed, mut refused, mut cancelled) = (0, 0, 0, 0, 0);
    let (mut reused, mut batched, mut extended, mut paused) = (0, 0, 0, 0);
    for seed in 0..200 {
        let out = run_seed(seed);
        assert!(out.failure.is_none(), "seed {seed}: {:?}", out.failure);
        let s = &out.summary;
        let field = |name: &str| -> u64 {
            s.split(name)
                .nth(1)
                .and_then(|r| r.trim_start().split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|d| d.parse().ok())
                .unwrap_or(0)
        };
        fail_open += field("fail-open ");
        reused += field("reused ");
        batched += field("batched ");
        extended += field("extended ");
        killed += field("killed ");
        refused += field("refused ");
        cancelled += field("cancelled ");
        offers += u64::from(out.scenario.queue_cap > 0);
        paused += out
            .scenario
            .faults
            .iter()
            .filter(|f| matches!(f.kind, FaultKind::Pause { .. }))
            .count();
    }
    assert!(fail_open > 0, "no fail-open admission in 200 seeds");
    assert!(
        reused > 0,
        "no lease reused from an idle cache in 200 seeds"
    );
    assert!(
        batched > 0,
        "no extra lease of a batch ran a request in 200 seeds"
    );
    assert!(
        extended > 0,
        "no window extended by a room answer in 200 seeds"
    );
    assert!(killed > 0, "no request killed by a crash in 200 seeds");
    assert!(refused > 0, "no refusal in 200 seeds");
    assert!(cancelled > 0, "no cancellation in 200 seeds");
    assert!(offers > 0, "no scenario with queues in 200 seeds");
    assert!(paused > 0, "no node paused in 200 seeds");
}

#[cfg(feature = "sim-mutation-late-waiter")]
#[test]
fn test_the_simulation_catches_the_late_waiter_mutation() {
    // Seed by seed until one strands (seed 1609 does, at the time of writing: the forgetting
    // of a moved bucket's waiters at the heal, P8, ended the stranding of seed 2039), over the
    // seeds the suite checks.
    let caught = (0..DEFAULT_SEEDS).find_map(|seed| {
        let out = run_seed(seed);
        out.failure
            .filter(|m| m.contains("stranded"))
            .map(|m| (seed, m))
    });
    let Some((seed, msg)) = caught else {
        panic!("the simulation did not catch the late-waiter mutation in {DEFAULT_SEEDS} seeds");
    };
    println!("the mutation fails seed {seed}: {msg}");
}
