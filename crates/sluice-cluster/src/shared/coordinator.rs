//! The coordinator's side of the shared tier: asking a bucket's owner for a lease (no hop
//! when this node owns it), holding leases for running requests (renewed in the background,
//! released without blocking), taking the owner's offers (pushes) to parked requests, and
//! failing open — within a bound — when no owner answers.
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
//! - **K3** — dropping a [`SharedLease`] never blocks: the release goes to a background task
//!   through an unbounded channel (a send never waits), which batches releases per owner.
//! - **K4** — an offer is answered only after the sink has either handed the lease to a parked
//!   request (which now holds it) or refused it (then it is forgotten here without a release:
//!   the owner frees it on the `used = false` answer).
//! - **K5 (duplicate offers)** — a second copy of an offer (a network that duplicates, a
//!   retry) gets the answer of the first and never a second request: an offer whose lease this
//!   node holds is answered `used`, one among the last [`ANSWERED_OFFERS`] answered gets the
//!   same answer. Found by the simulation (`tests/sim.rs`): a duplicate used by one parked
//!   request while the original was answered unused let the owner offer the lease again.
//!   Tested by `test_a_duplicate_offer_gets_the_first_answer_and_runs_nothing`.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::owner::Owner;
use super::{MIN_SHARED_PROTOCOL, RENEW_EVERY};
use crate::membership::Members;
use crate::ring::Ring;
use crate::rpc::{SharedCall, SharedReply, Transport};

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

/// A bucket's slots on this node (K1).
#[derive(Debug, Clone, Copy)]
struct Allowance {
    /// Slots held: leases and fail-open slots.
    held: u64,
    /// The bucket's `shared_limit` as last asked (an offer carries none).
    limit: u64,
}

#[derive(Default)]
struct State {
    /// Every live slot by token.
    held: HashMap<u64, Held>,
    /// Per bucket: slots held (leases and fail-open) and the limit last asked, for K1.
    per_bucket: HashMap<Arc<str>, Allowance>,
    /// Leases handed to a parked request through the node tier, not yet taken by it.
    handed: HashMap<u64, SharedLease>,
    /// The last [`ANSWERED_OFFERS`] offers answered, `(owner, lease, used)`, oldest first
    /// (K5).
    answered: VecDeque<(Arc<str>, u64, bool)>,
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
    /// waiting at most `deadline` for its answer ([`super::ACQUIRE_DEADLINE`] unless
    /// configured); fails open within the allowance (K1).
    pub async fn acquire(
        self: &Arc<Self>,
        bucket: &str,
        limit: u64,
        wants_queue: bool,
        deadline: Duration,
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
                    deadline,
                )
                .await
                .map_err(|e| e.to_string()),
        };
        let bucket: Arc<str> = Arc::from(bucket);
        match reply {
            Ok(SharedReply::Granted { lease, .. }) => {
                let owner_id: Arc<str> = Arc::from(owner.map_or_else(String::new, |m| m.node_id));
                match self.hold(bucket, Some((owner_id.clone(), lease)), Some(limit)) {
                    Ok(slot) => {
                        self.stats.acquired.fetch_add(1, Ordering::Relaxed);
                        Acquired::Lease(slot)
                    }
                    Err(held) => {
                        // K1: this node already runs `limit` requests of the bucket on slots
                        // this owner does not count (fail-open slots, leases lost or of an
                        // earlier owner): give the lease back rather than exceed it.
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
        match self.hold(bucket, None, Some(limit)) {
            Ok(lease) => {
                self.stats.fail_open.fetch_add(1, Ordering::Relaxed);
                Acquired::FailOpen { lease, reason }
            }
            Err(_) => Acquired::Unavailable { reason },
        }
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
            limit: limit.unwrap_or(u64::MAX),
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
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        st.held.insert(token, Held { bucket, lease });
        Ok(SharedLease {
            token,
            coordinator: Arc::downgrade(self),
        })
    }

    /// Ends a slot: forgets it and, for a lease, queues its release (K2, K3).
    fn end(&self, token: u64) {
        let held = {
            let mut st = self.state.lock();
            let Some(h) = st.held.remove(&token) else {
                return;
            };
            if let Some(a) = st.per_bucket.get_mut(&h.bucket) {
                a.held = a.held.saturating_sub(1);
                if a.held == 0 {
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
        if held {
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

    /// Slots held in all.
    pub fn num_held(&self) -> usize {
        self.state.lock().held.len()
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
        // Owners in id order: the same calls in the same order in every run (tests/sim.rs).
        let mut batch: BTreeMap<Arc<str>, Vec<u64>> = BTreeMap::new();
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
        let ring = Ring::new(&rx.borrow_and_update().live, MIN_SHARED_PROTOCOL);
        let Some(c) = c.upgrade() else { return };
        *c.ring.write() = Arc::new(ring);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::Member;
    use crate::clock::SystemClock;
    use crate::rpc::{BoxFuture, LocalAnswer, LocalApi, RpcError, SharedHandler};
    use crate::shared::{ACQUIRE_DEADLINE, OWNER_LIMITS, SharedTier};

    /// Carries node `from`'s shared calls to node b's tier while `up`; fails them as
    /// unreachable otherwise (the owner is lost).
    struct Switch {
        from: String,
        up: AtomicBool,
        b: OnceLock<Arc<SharedTier>>,
    }

    impl Transport for Switch {
        fn ping(&self, to: &Member, _: Duration) -> BoxFuture<'_, Result<String, RpcError>> {
            let node = to.node_id.clone();
            Box::pin(async move {
                Err(RpcError::Remote {
                    node,
                    reason: "not in this test".into(),
                })
            })
        }

        fn local(
            &self,
            to: &Member,
            _: LocalApi,
            _: serde_json::Value,
            _: Duration,
        ) -> BoxFuture<'_, Result<LocalAnswer, RpcError>> {
            let node = to.node_id.clone();
            Box::pin(async move {
                Err(RpcError::Remote {
                    node,
                    reason: "not in this test".into(),
                })
            })
        }

        fn shared(
            &self,
            to: &Member,
            call: SharedCall,
            _: Duration,
        ) -> BoxFuture<'_, Result<SharedReply, RpcError>> {
            let node = to.node_id.clone();
            Box::pin(async move {
                match self.b.get() {
                    Some(b) if self.up.load(Ordering::SeqCst) => {
                        Ok(b.shared(&self.from, call).await)
                    }
                    _ => Err(RpcError::Unreachable {
                        node,
                        addr: "test".into(),
                        reason: "the owner is down".into(),
                    }),
                }
            })
        }
    }

    fn member(id: &str) -> Member {
        Member {
            node_id: id.into(),
            generation: 1,
            name: id.into(),
            http_addr: "127.0.0.1:9200".parse().expect("an address"),
            transport_addr: "127.0.0.1:9300".parse().expect("an address"),
            protocol_version: crate::PROTOCOL_VERSION,
            backend: "embedded".into(),
            version: "0.1.0".into(),
            cluster_uuid: "u".into(),
        }
    }

    /// Node a's coordinator, node b's tier, the switch between them and buckets b owns.
    struct Pair {
        a: Arc<Coordinator>,
        b: Arc<SharedTier>,
        switch: Arc<Switch>,
        buckets: Vec<String>,
        _stop: CancellationToken,
        _members: watch::Sender<Members>,
    }

    fn pair() -> Pair {
        let (tx, rx) = watch::channel(Members {
            live: Arc::new(vec![member("a"), member("b")]),
            strangers: Arc::default(),
        });
        let stop = CancellationToken::new();
        let clock: Arc<dyn crate::clock::Clock> = Arc::new(SystemClock::new());
        let switch = Arc::new(Switch {
            from: "a".into(),
            up: AtomicBool::new(false),
            b: OnceLock::new(),
        });
        let to_a = Arc::new(Switch {
            from: "b".into(),
            up: AtomicBool::new(false),
            b: OnceLock::new(),
        });
        let start = |me: &str, t: Arc<Switch>| {
            let owner = Owner::start(
                Arc::from(me),
                OWNER_LIMITS,
                clock.clone(),
                t.clone(),
                rx.clone(),
                stop.clone(),
            );
            let c = Coordinator::start(Arc::from(me), t, owner.clone(), rx.clone(), stop.clone());
            owner.set_local(&c);
            Arc::new(SharedTier {
                owner,
                coordinator: c,
            })
        };
        let a = start("a", switch.clone());
        let b = start("b", to_a);
        let _ = switch.b.set(b.clone());
        let buckets: Vec<String> = (0..100)
            .map(|i| format!("g\0user-{i}"))
            .filter(|k| a.coordinator.owner_of(k).is_some_and(|m| m.node_id == "b"))
            .take(2)
            .collect();
        assert_eq!(buckets.len(), 2, "b owns some of 100 buckets");
        Pair {
            a: a.coordinator.clone(),
            b,
            switch,
            buckets,
            _stop: stop,
            _members: tx,
        }
    }

    /// Polls `f` until it holds, for at most 10 s of (paused) time.
    async fn eventually(mut f: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition not met in 10 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn test_fail_open_is_bounded_by_the_shared_limit() {
        let p = pair();
        let (g, h) = (&p.buckets[0], &p.buckets[1]);
        // The owner is lost: fail-open admissions up to shared_limit per bucket, then
        // Unavailable.
        let mut slots = Vec::new();
        for _ in 0..2 {
            match p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await {
                Acquired::FailOpen { lease, reason } => {
                    assert!(reason.contains("the owner is down"), "{reason}");
                    slots.push(lease);
                }
                other => panic!("expected a fail-open admission, got {other:?}"),
            }
        }
        assert!(matches!(
            p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await,
            Acquired::Unavailable { .. }
        ));
        assert!(matches!(
            p.a.acquire(g, 2, true, ACQUIRE_DEADLINE).await,
            Acquired::Unavailable { .. }
        ));
        assert_eq!(p.a.held_for(g), 2);
        // Another bucket has its own allowance.
        let other = p.a.acquire(h, 1, false, ACQUIRE_DEADLINE).await;
        assert!(matches!(other, Acquired::FailOpen { .. }), "{other:?}");
        assert!(matches!(
            p.a.acquire(h, 1, false, ACQUIRE_DEADLINE).await,
            Acquired::Unavailable { .. }
        ));
        // Freeing a slot allows another.
        drop(slots.pop());
        assert_eq!(p.a.held_for(g), 1);
        match p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await {
            Acquired::FailOpen { lease, .. } => slots.push(lease),
            other => panic!("expected a fail-open admission, got {other:?}"),
        }
        assert!(matches!(
            p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await,
            Acquired::Unavailable { .. }
        ));
        assert_eq!(p.a.stats.fail_open.load(Ordering::Relaxed), 4);
        // The owner is back with an empty pool: it would grant, but this node already runs
        // shared_limit requests of the bucket without leases (K1), so the lease goes back.
        p.switch.up.store(true, Ordering::SeqCst);
        let denied = p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await;
        assert!(
            matches!(
                denied,
                Acquired::Denied {
                    in_use: 2,
                    limit: 2,
                    registered: false
                }
            ),
            "{denied:?}"
        );
        eventually(|| p.b.owner.in_use(g) == 0).await;
        assert_eq!(p.a.held_for(g), 2);
        // Once a fail-open request ends, the owner's lease is taken.
        drop(slots.pop());
        let granted = p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await;
        assert!(matches!(granted, Acquired::Lease(_)), "{granted:?}");
        assert_eq!(p.a.held_for(g), 2);
        assert_eq!(p.b.owner.in_use(g), 1);
        drop(granted);
        drop(slots);
        eventually(|| p.b.owner.in_use(g) == 0).await;
        assert_eq!(p.a.held_for(g), 0);
    }

    /// Takes offers for up to `parked` requests; counts what it was offered.
    struct Parked {
        parked: Mutex<u64>,
        offered: AtomicU64,
        coordinator: OnceLock<Weak<Coordinator>>,
        taken: Mutex<Vec<SharedLease>>,
    }

    impl OfferSink for Parked {
        fn offer(&self, _bucket: &str, token: u64) -> OfferAnswer {
            self.offered.fetch_add(1, Ordering::SeqCst);
            let mut parked = self.parked.lock();
            if *parked == 0 {
                return OfferAnswer {
                    used: false,
                    more_waiting: false,
                };
            }
            *parked -= 1;
            let c = self
                .coordinator
                .get()
                .and_then(Weak::upgrade)
                .expect("alive");
            self.taken
                .lock()
                .push(c.take_handed(token).expect("handed"));
            OfferAnswer {
                used: true,
                more_waiting: *parked > 0,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn test_a_duplicate_offer_gets_the_first_answer_and_runs_nothing() {
        let p = pair();
        let g = &p.buckets[0];
        let sink = Arc::new(Parked {
            parked: Mutex::new(1),
            offered: AtomicU64::new(0),
            coordinator: OnceLock::new(),
            taken: Mutex::new(Vec::new()),
        });
        let _ = sink.coordinator.set(Arc::downgrade(&p.a));
        p.a.set_sink(sink.clone());
        let used = SharedReply::OfferAnswer {
            used: true,
            more_waiting: false,
        };
        let unused = SharedReply::OfferAnswer {
            used: false,
            more_waiting: false,
        };
        // Lease 7 runs the parked request; its duplicate runs nothing and says "used", so
        // the owner never frees a lease in use.
        assert_eq!(p.a.handle_offer("b", g, 7, 2), used);
        assert_eq!(p.a.handle_offer("b", g, 7, 2), used);
        assert_eq!(sink.offered.load(Ordering::SeqCst), 1);
        assert_eq!(p.a.held_for(g), 1);
        // Lease 8 finds nothing parked; a request parked since does not take its duplicate,
        // whose lease the owner has freed on the first answer.
        assert_eq!(p.a.handle_offer("b", g, 8, 2), unused);
        *sink.parked.lock() = 1;
        assert_eq!(p.a.handle_offer("b", g, 8, 2), unused);
        assert_eq!(sink.offered.load(Ordering::SeqCst), 2);
        assert_eq!(p.a.held_for(g), 1);
        // Still true once lease 7's request ended.
        sink.taken.lock().clear();
        assert_eq!(p.a.held_for(g), 0);
        assert_eq!(p.a.handle_offer("b", g, 7, 2), used);
        assert_eq!(sink.offered.load(Ordering::SeqCst), 2);
        // K1 on offers: with the limit held, an offer is refused without reaching the sink.
        assert_eq!(p.a.handle_offer("b", g, 9, 1), used);
        assert_eq!(p.a.handle_offer("b", g, 10, 1), unused);
        assert_eq!(sink.offered.load(Ordering::SeqCst), 3);
    }
}
