//! The cluster-wide shared tier (seed 004) with owner-push queueing (seed 002, cluster part).
//!
//! A bucket's shared pool (`shared_limit`) lives on one owner node, picked by the consistent
//! hash ring ([`crate::ring`]) over the live members that speak [`MIN_SHARED_PROTOCOL`]. A
//! coordinator whose node allowance is exhausted asks the owner for a lease
//! ([`coordinator::Coordinator::acquire`], in process when it owns the bucket). The owner's
//! table is [`pool::SharedPool`]; [`owner::Owner`] wraps it with the I/O: acquires, renewals,
//! releases, offers of freed leases to waiting coordinators, the TTL sweep and the purge of
//! departed coordinators.
//!
//! ```text
//! coordinator C                          owner O (ring: bucket → O)
//!   park request (enqueue-first)
//!   Acquire(bucket, limit, wants_queue) ─▶ pool.acquire: grant, or deny + register C
//!   ◀──────────────── Granted(lease) / Denied
//!   grant → oldest parked request runs
//!   every RENEW_EVERY: Renew(leases) ────▶ pool.renew (expiry = now + TTL)
//!   request ends: Release(leases) ───────▶ pool.release → slot free, waiters? offer
//!   ◀──────────────── Offer(bucket, lease)  (round-robin over waiting coordinators)
//!   parked request takes it: used
//!   OfferAnswer(used, more_waiting) ─────▶ pool.offer_result (unused → next waiter)
//!                                          every SWEEP_EVERY: pool.sweep → offers
//!                                          member left: pool.purge(C) → offers
//! ```

pub mod coordinator;
pub mod owner;
pub mod pool;

use std::sync::Arc;
use std::time::Duration;

use crate::rpc::{BoxFuture, SharedCall, SharedHandler, SharedReply};

/// How long a coordinator waits for an owner's answer to an acquire before failing open (the
/// seed's value). An acquire is one loopback or LAN round trip, well under a millisecond at
/// the median and a few at p99 on a loaded machine (BENCHMARKS.md, node-to-node RPC); 200 ms is
/// the most a request waits for a lost owner before it is admitted anyway.
pub const ACQUIRE_DEADLINE: Duration = Duration::from_millis(200);

/// A lease's time to live without renewal. The seed used 5 minutes; sluice renews leases of
/// running requests, so the TTL only bounds how long a lost release (or a crashed
/// coordinator the membership has not yet dropped) keeps a slot: 30 s.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// How often a coordinator renews the leases it holds: a third of the TTL, so two renewals in
/// a row may be lost before a running request's lease expires.
pub const RENEW_EVERY: Duration = Duration::from_secs(10);

/// How often an owner reclaims expired leases (and offers what they free): a lease outlives
/// its expiry by at most this.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How long an owner waits for a coordinator's answer to an offer. An unanswered offer keeps
/// its lease reserved until renewed or expired, so a generous deadline costs nothing.
pub const OFFER_DEADLINE: Duration = Duration::from_secs(1);

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
            SharedCall::Offer { bucket, lease, .. } => {
                self.coordinator.handle_offer(from, &bucket, lease)
            }
            other => self.owner.handle(from, other),
        };
        Box::pin(async move { reply })
    }
}
