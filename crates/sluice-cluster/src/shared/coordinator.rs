//! The coordinator's side of the shared tier: asking a bucket's owner for a lease (no hop
//! when this node owns it), holding leases for running requests (renewed in the background,
//! released without blocking), taking the owner's offers (pushes) to parked requests, and
//! failing open — within a bound — when no owner answers.
//!
//! # Invariants
//! - **K1 (fail-open bound)** — per bucket, the leases this coordinator holds plus the requests
//!   it admitted failing open never exceed the bucket's `shared_limit` as last asked: a fail-open
//!   admission is allowed only below it. So while an owner is lost, each coordinator
//!   over-admits at most `shared_limit`, and a bucket's cluster-wide in-flight stays within
//!   `node_limit × N + shared_limit × N` (the ceiling plus `(N − 1) × shared_limit`). Tested by
//!   `test_fail_open_is_bounded_by_the_shared_limit` and the simulation.
//! - **K2** — a lease ends exactly once: its [`SharedLease`] is the only handle, not `Clone`;
//!   dropping it queues one release (fail-open slots release locally). A lease the owner
//!   reported lost on renewal is not released again.
//! - **K3** — dropping a [`SharedLease`] never blocks: the release goes to a background task
//!   through an unbounded channel (a send never waits), which batches releases per owner.
//! - **K4** — an offer is answered only after the sink has either handed the lease to a parked
//!   request (which now holds it) or refused it (then it is forgotten here without a release:
//!   the owner frees it on the `used = false` answer).

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::owner::Owner;
use super::{ACQUIRE_DEADLINE, MIN_SHARED_PROTOCOL, RENEW_EVERY};
use crate::membership::Members;
use crate::ring::Ring;
use crate::rpc::{SharedCall, SharedReply, Transport};

/// What the server does with an owner's offer: hand the lease (named by `token`, to be taken
/// with [`Coordinator::take_handed`]) to the oldest parked request of `bucket`.
pub trait OfferSink: Send + Sync + 'static {
    /// Returns whether a parked request took it, and whether more are parked.
    fn offer(&self, bucket: &str, token: u64) -> OfferAnswer;
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
    },
}

/// A shared slot a request holds: a lease of an owner, or a fail-open slot. Dropping it
/// releases it in the background (K2, K3).
#[derive(Debug)]
pub struct SharedLease {
    token: u64,
    coordinator: Weak<Coordinator>,
}

impl SharedLease {
    /// The coordinator-local token naming this slot (what the node tier's external grant
    /// carries).
    pub fn token(&self) -> u64 {
        self.token
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        if let Some(c) = self.coordinator.upgrade() {
            c.end(self.token);
        }
    }
}

/// A slot this node holds.
#[derive(Debug, Clone)]
struct Held {
    bucket: Arc<str>,
    /// The owner and the lease id, `None` for a fail-open slot.
    lease: Option<(Arc<str>, u64)>,
}

#[derive(Default)]
struct State {
    /// Every live slot by token.
    held: HashMap<u64, Held>,
    /// Per bucket: slots held (leases and fail-open), for K1.
    per_bucket: HashMap<Arc<str>, u64>,
    /// Leases handed to a parked request through the node tier, not yet taken by it.
    handed: HashMap<u64, SharedLease>,
}

/// Counters of this node's shared-tier traffic (shown per group by the server).
#[derive(Debug, Default)]
pub struct CoordinatorStats {
    /// Leases granted by an owner on acquire.
    pub acquired: AtomicU64,
    /// Acquires denied by an owner.
    pub denied: AtomicU64,
    /// Admissions without a lease because no owner answered.
    pub fail_open: AtomicU64,
    /// Offers received from owners.
    pub offers_received: AtomicU64,
    /// Offers a parked request took.
    pub offers_used: AtomicU64,
    /// Leases an owner reported lost on renewal (expired or purged while held).
    pub leases_lost: AtomicU64,
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
        let (tx, rx) = mpsc::unbounded_channel();
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
            stats: CoordinatorStats::default(),
        });
        tokio::spawn(releaser(Arc::downgrade(&c), rx, stop.clone()));
        tokio::spawn(renewer(Arc::downgrade(&c), stop.clone()));
        tokio::spawn(follow_ring(Arc::downgrade(&c), c.members.clone(), stop));
        c
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
    /// within [`ACQUIRE_DEADLINE`]; fails open within the allowance (K1).
    pub async fn acquire(
        self: &Arc<Self>,
        bucket: &str,
        limit: u64,
        wants_queue: bool,
    ) -> Acquired {
        let owner = self.owner_of(bucket);
        let reply = match &owner {
            None => Err("no live node serves the shared tier (empty ring)".to_string()),
            Some(m) if *m.node_id == *self.me => {
                Ok(self.owner.acquire(&self.me, bucket, limit, wants_queue))
            }
            Some(m) => self
                .transport
                .shared(
                    m,
                    SharedCall::Acquire {
                        bucket: bucket.to_string(),
                        limit,
                        wants_queue,
                    },
                    ACQUIRE_DEADLINE,
                )
                .await
                .map_err(|e| e.to_string()),
        };
        let bucket: Arc<str> = Arc::from(bucket);
        match reply {
            Ok(SharedReply::Granted { lease, .. }) => {
                self.stats.acquired.fetch_add(1, Ordering::Relaxed);
                let owner_id: Arc<str> = Arc::from(owner.map_or_else(String::new, |m| m.node_id));
                Acquired::Lease(self.hold(bucket, Some((owner_id, lease))))
            }
            Ok(SharedReply::Denied {
                in_use,
                limit,
                waiter_registered,
            }) => {
                self.stats.denied.fetch_add(1, Ordering::Relaxed);
                Acquired::Denied {
                    in_use,
                    limit,
                    registered: waiter_registered,
                }
            }
            Ok(SharedReply::Overloaded) => {
                self.fail_open(bucket, limit, "the owner's tables are full".to_string())
            }
            Ok(other) => self.fail_open(bucket, limit, format!("unexpected answer {other:?}")),
            Err(reason) => self.fail_open(bucket, limit, reason),
        }
    }

    fn fail_open(self: &Arc<Self>, bucket: Arc<str>, limit: u64, reason: String) -> Acquired {
        let mut st = self.state.lock();
        let used = st.per_bucket.get(&bucket).copied().unwrap_or(0);
        if used >= limit {
            return Acquired::Unavailable { reason };
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        *st.per_bucket.entry(bucket.clone()).or_insert(0) += 1;
        st.held.insert(
            token,
            Held {
                bucket,
                lease: None,
            },
        );
        drop(st);
        self.stats.fail_open.fetch_add(1, Ordering::Relaxed);
        Acquired::FailOpen {
            lease: SharedLease {
                token,
                coordinator: Arc::downgrade(self),
            },
            reason,
        }
    }

    fn hold(self: &Arc<Self>, bucket: Arc<str>, lease: Option<(Arc<str>, u64)>) -> SharedLease {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        *st.per_bucket.entry(bucket.clone()).or_insert(0) += 1;
        st.held.insert(token, Held { bucket, lease });
        SharedLease {
            token,
            coordinator: Arc::downgrade(self),
        }
    }

    /// Ends a slot: forgets it and, for a lease, queues its release (K2, K3).
    fn end(&self, token: u64) {
        let held = {
            let mut st = self.state.lock();
            let Some(h) = st.held.remove(&token) else {
                return;
            };
            if let Some(n) = st.per_bucket.get_mut(&h.bucket) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    st.per_bucket.remove(&h.bucket);
                }
            }
            h
        };
        if let Some((owner, lease)) = held.lease {
            // Unbounded: a send never waits; it fails only once the releaser stopped (the node
            // is shutting down, and the owner's TTL reclaims the lease).
            let _ = self.releases.send((owner, lease));
        }
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

    /// Answers an owner's offer of `lease` of `bucket` (K4).
    pub fn handle_offer(self: &Arc<Self>, from: &str, bucket: &str, lease: u64) -> SharedReply {
        self.stats.offers_received.fetch_add(1, Ordering::Relaxed);
        let Some(sink) = self.sink.get() else {
            return SharedReply::OfferAnswer {
                used: false,
                more_waiting: false,
            };
        };
        let slot = self.hold(Arc::from(bucket), Some((Arc::from(from), lease)));
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
        SharedReply::OfferAnswer {
            used: answer.used,
            more_waiting: answer.more_waiting,
        }
    }

    /// Removes a slot's bookkeeping without releasing it.
    fn forget(&self, slot: &SharedLease) {
        let mut st = self.state.lock();
        if let Some(h) = st.held.remove(&slot.token)
            && let Some(n) = st.per_bucket.get_mut(&h.bucket)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
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
            .copied()
            .unwrap_or(0)
    }

    /// Slots held in all.
    pub fn num_held(&self) -> usize {
        self.state.lock().held.len()
    }

    /// The leases held per owner (for renewal).
    fn leases_by_owner(&self) -> HashMap<Arc<str>, Vec<(u64, u64)>> {
        let st = self.state.lock();
        let mut out: HashMap<Arc<str>, Vec<(u64, u64)>> = HashMap::new();
        for (token, h) in &st.held {
            if let Some((owner, lease)) = &h.lease {
                out.entry(owner.clone()).or_default().push((*token, *lease));
            }
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
    }

    async fn call_owner(&self, owner: &str, call: SharedCall) -> Option<SharedReply> {
        if *owner == *self.me {
            return Some(self.owner.handle_local(&self.me, call));
        }
        let member = self.members.borrow().get(owner).cloned()?;
        self.transport
            .shared(&member, call, RENEW_EVERY / 2)
            .await
            .ok()
    }
}

/// Sends queued releases, batched per owner. A release that cannot be delivered is dropped:
/// the owner's TTL sweep reclaims the lease.
async fn releaser(
    c: Weak<Coordinator>,
    mut rx: mpsc::UnboundedReceiver<(Arc<str>, u64)>,
    stop: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            () = stop.cancelled() => return,
            m = rx.recv() => match m { Some(m) => m, None => return },
        };
        let mut batch: HashMap<Arc<str>, Vec<u64>> = HashMap::new();
        batch.entry(first.0).or_default().push(first.1);
        while let Ok((owner, lease)) = rx.try_recv() {
            batch.entry(owner).or_default().push(lease);
        }
        let Some(c) = c.upgrade() else { return };
        for (owner, leases) in batch {
            let _ = c.call_owner(&owner, SharedCall::Release { leases }).await;
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
        for (owner, leases) in c.leases_by_owner() {
            let ids: Vec<u64> = leases.iter().map(|(_, l)| *l).collect();
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
        let ring = Ring::new(&rx.borrow_and_update().live, MIN_SHARED_PROTOCOL);
        let Some(c) = c.upgrade() else { return };
        *c.ring.write() = Arc::new(ring);
    }
}
