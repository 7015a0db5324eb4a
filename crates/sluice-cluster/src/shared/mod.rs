//! The cluster-wide shared tier (seed 004) with owner-push queueing (seed 002, cluster part).
//!
//! A bucket's shared pool (`shared_limit`) lives on one owner node, picked by the consistent
//! hash ring ([`crate::ring`]) over the live members that speak [`MIN_SHARED_PROTOCOL`]. A
//! coordinator whose node allowance is exhausted asks the owner for a lease
//! ([`coordinator::Coordinator::acquire`], in process when it owns the bucket). The owner's
//! table is [`pool::SharedPool`]; [`owner::Owner`] wraps it with the I/O: acquires, renewals,
//! releases, offers of freed leases to waiting coordinators, the TTL sweep and the purge of
//! departed coordinators. A coordinator stops asking an owner that failed a call until it
//! answers again ([`breaker::Breakers`]): its buckets fail open at once, parked requests first.
//! It also probes the owners its parked requests wait on, whose death no call of theirs shows.
//!
//! ```text
//! coordinator C                          owner O (ring: bucket → O)
//!   park request (enqueue-first)
//!   idle lease of O < REUSE_WINDOW old? take it, no call (coordinator.rs, K6–K9)
//!   Acquire(bucket, limit, wants_queue) ─▶ pool.acquire: grant, or deny + register C
//!   ◀──────────────── Granted(lease) / Denied
//!   grant → oldest parked request runs
//!   every RENEW_EVERY: Renew(leases) ────▶ pool.renew (expiry = now + TTL)
//!   request ends: lease < REUSE_WINDOW old, nothing of the bucket parked here? keep it idle
//!   else, or at the window's end: Release(leases) ─▶ pool.release → slot free, waiters? offer
//!   ◀──────────────── Offer(bucket, lease)  (round-robin over waiting coordinators)
//!   parked request takes it: used
//!   OfferAnswer(used, more_waiting) ─────▶ pool.offer_result (unused → next waiter)
//!                                          every SWEEP_EVERY: pool.sweep → offers
//!                                          member left: pool.purge(C) → offers
//! ```

//!
//! # Deterministic simulation
//!
//! `tests/sim.rs` runs this protocol — the real [`owner::Owner`], [`coordinator::Coordinator`]
//! and [`SharedTier`], wired as in `cluster.rs` — for N (2 to 4) nodes in one current-thread
//! tokio runtime with paused time, so every run is virtual time and a seed replays exactly.
//! The clock is tokio's ([`crate::clock::SystemClock`]); the network is a simulated
//! [`crate::rpc::Transport`] that delays (1 to 40 ms each way, so messages reorder), drops
//! and duplicates calls, fails calls to crashed nodes and holds calls to and from paused
//! nodes until they resume; membership is a `watch` channel the harness changes (a crashed
//! or paused node leaves after 1 to 10 s, a restarted or resumed one rejoins, a live one is
//! briefly removed); a crash kills a node's requests and a restart brings a fresh
//! owner and coordinator. A small sink stands in for the server: enqueue-first parking per
//! bucket, grants and offers to the oldest parked request, client cancellations, and (in
//! scenarios with faults) the server's one-second backstop sweep. Each seed draws its
//! scenario (nodes, buckets and limits, queue sizes, delays, fault rates, crashes and flaps,
//! load) and is checked for:
//!
//! - **C1** — with nothing but delays (no loss, duplicates, crashes or membership changes)
//!   a bucket's requests on shared slots, cluster-wide, never exceed `shared_limit` and
//!   nothing fails open;
//! - **K1** — always, per node and bucket, requests on shared slots ≤ `shared_limit`: while
//!   an owner is lost or moving a bucket's in-flight stays within `shared_limit × N`;
//! - **reclaim** — a dead holder's leases leave every live owner within
//!   [`LEASE_TTL`] + [`SWEEP_EVERY`] of its death (or of the lease's creation, for an offer
//!   made to it after);
//! - **K6–K8 (reuse window)** — no lease runs two requests at once, a lease runs requests only
//!   within [`coordinator::REUSE_WINDOW`] of its first run, the idle caches' counters add up
//!   and, without faults, no owner reclaims a lease by its TTL;
//! - **no stranding** — a node's parked requests of a bucket with room (idle leases count as
//!   room) make progress within
//!   4 × the largest one-way delay + 0.4 s + [`coordinator::REUSE_WINDOW`] without faults (the owner's registration and
//!   offers alone, no backstop), plus the backstop's 1 s and [`ACQUIRE_DEADLINE`] once a
//!   faulty network has healed; at the end nothing is left parked;
//! - **K13–K15 (no phantom lease)** — from 5 s after the heal, and throughout in scenarios
//!   that lose no message (for owners and holders that answer), every lease an owner counts
//!   is held by a running request, idle in its holder's cache, or on its way within
//!   [`coordinator::RELEASE_RETRY`] + 4 × the largest one-way delay;
//! - **stats** — `CoordinatorStats` equal what the sink saw, owners and coordinators end
//!   empty, and every request is admitted, refused, cancelled or killed by a crash.
//!
//! CI checks seeds 0 to 9,999 (`cargo test -p sluice-cluster --test sim`); a failure prints
//! `SLUICE_SIM_SEED=<seed> cargo test -p sluice-cluster --test sim -- --nocapture
//! test_simulated_seeds`, which replays it (add `SLUICE_SIM_LOG=1` for every event), and
//! `SLUICE_SIM_SEEDS=<n>` (from `SLUICE_SIM_FIRST_SEED`) checks more. The test-only feature
//! `sim-mutation-late-waiter` re-introduces seed 002's stranding race (the owner registers a
//! denied waiter after answering, not inside the acquire), and
//! `test_the_simulation_catches_the_late_waiter_mutation` shows the simulation failing it.
//! The simulation found K1's gap (a grant or offer taken on top of fail-open or lost slots),
//! duplicate offers running two requests on one lease (K5), both fixed in [`coordinator`],
//! and stale offer answers in runs without faults — a release overtaking its offer's answer,
//! which dropped the holder's re-registration — fixed by [`pool::SharedPool::rejoin`].

pub mod breaker;
pub mod coordinator;
pub mod owner;
pub mod pool;

use std::sync::Arc;
use std::time::Duration;

use crate::rpc::{BoxFuture, SharedCall, SharedHandler, SharedReply};

/// How long a coordinator waits for an owner's answer to an acquire before failing open, by
/// default (the seed's value; a node's `wlm.workload_group.shared_acquire_timeout` changes
/// it). An acquire is one loopback or LAN round trip, well under a millisecond at the median
/// and a few at p99 on a loaded machine (BENCHMARKS.md, node-to-node RPC); 200 ms is the most
/// a request waits for a lost owner before it is admitted anyway.
pub const ACQUIRE_DEADLINE: Duration = Duration::from_millis(200);

/// A lease's time to live without renewal. The seed used 5 minutes; sluice renews leases of
/// running requests, so the TTL only bounds how long a lost release (or a crashed
/// coordinator the membership has not yet dropped) keeps a slot: 30 s.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// How often a coordinator renews the leases it holds: a third of the TTL, so two renewals in
/// a row may be lost before a running request's lease expires.
pub const RENEW_EVERY: Duration = Duration::from_secs(10);

/// How long an acquire's call listens for the owner's answer after its request stopped waiting
/// (K14 of `coordinator.rs`): as long as its connection can still deliver it. An acquire sent
/// into a partition waits in the connection's TCP buffers and reaches the owner when the
/// network heals, however late, and the owner grants it; the answer comes back on the same
/// connection, and a call still listening releases the grant. One that listened only for
/// [`LEASE_TTL`] had let the stream go, and the owner counted the grant for a TTL with nothing
/// running on it (an outside trial: after partitions over 30 s, a group with `shared_limit` 2
/// answered 429s for 29 s with nothing running anywhere). Linux gives a connection up after
/// `tcp_retries2` (15) unanswered retransmissions, about 924 s: a connection silent longer is
/// dead, its bytes never delivered. So 16 minutes; a task per acquire out meanwhile, which K16
/// keeps to a few (an owner that failed is not asked).
pub const ACQUIRE_LISTEN: Duration = Duration::from_secs(16 * 60);

/// How long a coordinator waits for an owner's answer to a release or a renewal: half the
/// renewal period, so a call to an owner that does not answer has ended before the next
/// renewal is due, and the calls of one renewal round never pile onto the next.
pub const CALL_DEADLINE: Duration = Duration::from_secs(RENEW_EVERY.as_secs() / 2);

/// How often an owner reclaims expired leases (and offers what they free): a lease outlives
/// its expiry by at most this.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How long an owner waits for a coordinator's answer to an offer: as long as the offered lease
/// lives. An unanswered offer keeps its lease reserved until renewed or expired anyway, so
/// waiting costs nothing, and an answer that comes late — a coordinator paused while the offer
/// was on its way answers when it runs again — still gives an unused slot back at once. With
/// a 1 s deadline such slots stayed reserved, held by nothing, until their TTL (the
/// simulation's pauses found it: `tests/sim.rs`, K13/K14 after the heal).
pub const OFFER_DEADLINE: Duration = LEASE_TTL;

/// The oldest protocol version that serves the shared tier; the ring never places a bucket on
/// an older node.
pub const MIN_SHARED_PROTOCOL: u32 = 1;

/// The owner's hard caps (P4 of `pool.rs`): buckets and leases it holds at once. A cluster's
/// in-flight searches are bounded by its search pools (about a thousand per node), so a cap
/// of 65,536 is never reached by legitimate traffic of a cluster of dozens of nodes, and it
/// bounds an owner's tables to a few tens of megabytes whatever the number of users. Beyond
/// it, acquires answer `Overloaded` and coordinators fail open (counted, bounded by K1).
pub const OWNER_LIMITS: pool::PoolLimits = pool::PoolLimits {
    max_buckets: 65_536,
    max_leases: 65_536,
};

/// A node's shared tier: its owner and its coordinator; answers other nodes' shared calls.
pub struct SharedTier {
    /// The buckets this node owns.
    pub owner: Arc<owner::Owner>,
    /// This node's requests' leases.
    pub coordinator: Arc<coordinator::Coordinator>,
}

impl SharedHandler for SharedTier {
    fn shared(&self, from: &str, call: SharedCall) -> BoxFuture<'static, SharedReply> {
        let reply = match call {
            SharedCall::Offer {
                bucket,
                lease,
                limit,
                ..
            } => self.coordinator.handle_offer(from, &bucket, lease, limit),
            other => self.owner.handle(from, other),
        };
        Box::pin(async move { reply })
    }
}
