//! The owner's side of the shared tier: the [`SharedPool`] of the buckets this node owns,
//! behind one mutex, with the I/O around it — answering acquires, renewals and releases,
//! pushing offers of freed leases to waiting coordinators, the TTL sweep and the purge of
//! coordinators that leave the membership.
//!
//! An offer whose answer never arrives leaves the lease reserved: if the coordinator did use
//! it, it renews it; if not, the TTL sweep reclaims it. The owner never frees a lease it cannot
//! prove unused, so an unknown outcome cannot over-admit (C1), and costs at most one TTL of
//! one slot. It waits for the answer as long as the lease lives ([`OFFER_DEADLINE`]), so a
//! late answer (a paused coordinator) still frees an unused slot when it comes.
//!
//! A denied acquire registers its coordinator as a waiter only if that coordinator is a
//! member and the ring this owner last saw places the bucket here (W1). An acquire can arrive
//! late — sent before its coordinator was paused, or before the ring moved the bucket — and
//! after the purge of the coordinator (it left the membership) or the bucket's waiters (P8 of
//! `pool.rs`): registered then, it was offered the next freed slot, which the owner kept
//! reserved for a coordinator it does not send offers to until the TTL (a slot lost for
//! 30 s), or handed out a slot of a bucket the ring had moved away (P8). The simulation's
//! backstop found both once it asked as often as the server's (`tests/sim.rs`, seeds 3324 and
//! 8185). The coordinator's request stays parked unregistered; its node's backstop asks the
//! bucket's owner again (every second, and at once when the ring moves).
//!
//! W2: a coordinator so denied (not a member, or the bucket placed elsewhere, as this owner
//! last saw) is registered as soon as this owner's view lets it wait: the owner keeps each
//! such denial ([`Owner::deferred`]) until its next membership view, and then registers the
//! coordinator as a waiter and offers it the bucket's room at once ([`SharedPool::rejoin`]);
//! a denial the new view does not let wait is dropped. That is the ring change the
//! coordinator cannot see: its own ring moved first (the owner died, and its node dropped it
//! before this one did), its backstop asked this owner at once and was refused unregistered,
//! and its parked requests then waited for a newcomer's acquire or its next backstop sweep,
//! up to a second. A registration made so is one an acquire arriving after the change would
//! have made (W1 holds: the coordinator is a member and the bucket is placed here); a
//! coordinator with nothing parked any more answers the offer unused, and the slot goes on.
//! Tested by `test_a_coordinator_refused_before_the_ring_moved_here_is_offered_once_it_has`
//! and the simulation.
//!
//! W3: an acquire from a coordinator that this node's split view leaves out of the shared
//! tier (S9 and S11 of `split.rs`, [`Owner::set_left_out`]) is denied, unregistered, and
//! grants nothing. Such a coordinator leaves this node out in turn — its ring does not hold
//! it, and it neither renews nor releases a lease of it (its calls go only to the members of
//! its side) — and this owner does not purge it, as it never was a member of its side: a
//! lease granted to it was counted here, held by nobody, for the whole TTL. Its acquire is one
//! sent before it counted this node off, delivered late, or one of the heartbeat or two in
//! which the two sides' rows do not yet say the same. An outside trial's cut-off owner, on a
//! two-way flapping link, counted 3 then 4 leases of its peers' so (`shared_limit` 4, its
//! share 1; most likely acquires delivered late, see `rpc/service.rs`) and admitted nothing
//! for 34 s. Tested by
//! `test_a_coordinator_the_split_leaves_out_is_granted_nothing`.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::coordinator::Coordinator;
use super::pool::{AcquireOutcome, LeaseId, Offer, PoolLimits, SharedPool};
use super::{LEASE_TTL, MIN_SHARED_PROTOCOL, OFFER_DEADLINE, SWEEP_EVERY};
use crate::clock::Clock;
use crate::membership::Members;
use crate::ring::Ring;
use crate::rpc::{SharedCall, SharedReply, Transport};

/// W2's denials kept until the next view: the limit asked under, by (bucket, coordinator).
/// A `BTreeMap`, so the registrations of one view change are made in the same order in every
/// run (the simulation replays them).
type Deferred = BTreeMap<(Arc<str>, Arc<str>), u64>;

/// What the server learns of an owner's work, to show it per group.
pub trait OwnerEvents: Send + Sync + 'static {
    /// An offer of a freed lease of `bucket` was sent to a waiting coordinator (a push).
    fn offer_sent(&self, bucket: &str);
}

/// The owner of this node's share of the buckets.
pub struct Owner {
    me: Arc<str>,
    pool: Mutex<SharedPool>,
    clock: Arc<dyn Clock>,
    transport: Arc<dyn Transport>,
    members: watch::Receiver<Members>,
    /// The ring of the members this owner last saw: the buckets it owns (P8 of `pool.rs`).
    ring: parking_lot::RwLock<Arc<Ring>>,
    /// W2 (module docs): the coordinators denied since the last view change without a
    /// registration for want of one (not a member, or the bucket placed elsewhere), by
    /// (bucket, coordinator), with the limit they asked under. Taken only with `pool` held
    /// (lock order: `pool`, then this), so a denial and the purger's pass over them are
    /// ordered. At most the pool's `max_buckets` entries; emptied at every view change.
    deferred: Mutex<Deferred>,
    /// W3 (module docs): the nodes this node's split view leaves out of the shared tier, by
    /// id, as last set ([`Owner::set_left_out`]); their acquires grant nothing.
    left_out: parking_lot::RwLock<Vec<Arc<str>>>,
    local: OnceLock<Weak<Coordinator>>,
    events: OnceLock<Arc<dyn OwnerEvents>>,
    /// This owner, for the test-only mutation's late registration.
    #[cfg(feature = "sim-mutation-late-waiter")]
    this: Weak<Owner>,
}

/// How late the test-only mutation `sim-mutation-late-waiter` registers a denied waiter: about
/// the time the denial takes to reach the coordinator and be acted upon there.
#[cfg(feature = "sim-mutation-late-waiter")]
const MUTATION_LATE_BY: std::time::Duration = std::time::Duration::from_millis(10);

impl Owner {
    /// An owner for node `me` with hard caps `limits`; starts its sweep and its purge of
    /// departed coordinators (stopped by `stop`).
    pub fn start(
        me: Arc<str>,
        limits: PoolLimits,
        clock: Arc<dyn Clock>,
        transport: Arc<dyn Transport>,
        members: watch::Receiver<Members>,
        stop: CancellationToken,
    ) -> Arc<Owner> {
        let mut pool = SharedPool::new(limits);
        pool.set_first_lease(first_lease_id());
        let ring = Ring::new(&members.borrow().live, MIN_SHARED_PROTOCOL);
        let o = Arc::new_cyclic(|_this| Owner {
            me,
            pool: Mutex::new(pool),
            clock,
            transport,
            members,
            ring: parking_lot::RwLock::new(Arc::new(ring)),
            deferred: Mutex::new(BTreeMap::new()),
            left_out: parking_lot::RwLock::new(Vec::new()),
            local: OnceLock::new(),
            events: OnceLock::new(),
            #[cfg(feature = "sim-mutation-late-waiter")]
            this: _this.clone(),
        });
        tokio::spawn(sweeper(Arc::downgrade(&o), stop.clone()));
        tokio::spawn(purger(Arc::downgrade(&o), o.members.clone(), stop));
        o
    }

    /// Whether the ring of the members this owner last saw places `bucket` on it.
    fn owns(&self, bucket: &str) -> bool {
        self.ring
            .read()
            .owner(bucket.as_bytes())
            .is_some_and(|m| *m.node_id == *self.me)
    }

    /// Whether `from` may be registered as a waiter of `bucket` (W1): it is this node or a
    /// member, and the ring this owner last saw places the bucket here.
    fn may_wait(&self, from: &str, bucket: &str) -> bool {
        (*from == *self.me || self.members.borrow().get(from).is_some()) && self.owns(bucket)
    }

    /// Sets the nodes this node's split view leaves out of the shared tier (`SplitView`'s
    /// `left_out`, S9 and S11 of `split.rs`), by id: their acquires are denied and grant
    /// nothing (W3) until a later call no longer names them. [`crate::Cluster`] calls it at
    /// every observation of the split.
    pub fn set_left_out(&self, ids: &[String]) {
        let mut left_out = self.left_out.write();
        if left_out.len() != ids.len() || left_out.iter().zip(ids).any(|(a, b)| **a != **b) {
            *left_out = ids.iter().map(|id| Arc::from(id.as_str())).collect();
        }
    }

    /// Whether this node's split view leaves `from` out of the shared tier (W3).
    fn is_left_out(&self, from: &str) -> bool {
        self.left_out.read().iter().any(|id| **id == *from)
    }

    /// Wires the node's own coordinator, which offers to this node go to in process.
    pub fn set_local(&self, c: &Arc<Coordinator>) {
        let _ = self.local.set(Arc::downgrade(c));
    }

    /// Sets what the owner reports its pushes to (once; later calls do nothing).
    pub fn set_events(&self, events: Arc<dyn OwnerEvents>) {
        let _ = self.events.set(events);
    }

    /// Every bucket this owner holds leases of, with how many (offered ones included).
    pub fn leases_by_bucket(&self) -> Vec<(Arc<str>, u64)> {
        let pool = self.pool.lock();
        pool.in_use_by_bucket()
            .filter(|(_, n)| *n > 0)
            .map(|(b, n)| (b.clone(), n))
            .collect()
    }

    /// Answers an acquire from `from`; a grant comes with up to `extra` more leases of the
    /// bucket's free room when no waiter is owed it (the pool's P7), granted under the same
    /// lock.
    pub fn acquire(
        &self,
        from: &str,
        bucket: &str,
        limit: u64,
        wants_queue: bool,
        extra: u64,
    ) -> SharedReply {
        let now = self.clock.now();
        #[cfg(feature = "sim-mutation-late-waiter")]
        let (wants_queue, late) = (false, wants_queue);
        let (bucket_id, holder): (Arc<str>, Arc<str>) = (Arc::from(bucket), Arc::from(from));
        let (outcome, more) = {
            let mut pool = self.pool.lock();
            if self.is_left_out(from) {
                // W3 (module docs): nothing it could give back; its backstop asks its own
                // side's owner.
                return SharedReply::Denied {
                    in_use: pool.in_use(bucket),
                    limit,
                    waiter_registered: false,
                };
            }
            // W1 (module docs): only a member may wait, and only for a bucket placed here.
            // The purger updates the ring, then takes the pool's lock to purge and forget, so
            // a registration that gets past this is purged (or its waiters forgotten) after
            // it; read under the lock, so that a denial W2 defers is one the purger's pass
            // over the deferred denials, under the lock after the ring's update, finds.
            let may_wait = self.may_wait(from, bucket);
            let outcome = pool.acquire(
                &bucket_id,
                limit,
                &holder,
                wants_queue && may_wait,
                LEASE_TTL,
                now,
            );
            let more = match outcome {
                AcquireOutcome::Granted { .. } if extra > 0 => {
                    pool.grant_more(&bucket_id, &holder, extra, LEASE_TTL, now)
                }
                _ => Vec::new(),
            };
            if wants_queue && !may_wait && matches!(outcome, AcquireOutcome::Denied { .. }) {
                // W2: registered at the next view change if it may wait then.
                let mut deferred = self.deferred.lock();
                if deferred.len() < pool.limits().max_buckets {
                    deferred.insert((bucket_id.clone(), holder.clone()), limit);
                }
            }
            (outcome, more)
        };
        #[cfg(feature = "sim-mutation-late-waiter")]
        let outcome = match outcome {
            AcquireOutcome::Denied { in_use, limit, .. } if late => {
                self.mutation_register_late(bucket, limit, from);
                AcquireOutcome::Denied {
                    in_use,
                    limit,
                    waiter_registered: true,
                }
            }
            other => other,
        };
        match outcome {
            AcquireOutcome::Granted { lease, .. } => SharedReply::Granted {
                lease: lease.0,
                ttl: LEASE_TTL,
                extra: more.into_iter().map(|l| l.0).collect(),
            },
            AcquireOutcome::Denied {
                in_use,
                limit,
                waiter_registered,
            } => SharedReply::Denied {
                in_use,
                limit,
                waiter_registered,
            },
            AcquireOutcome::Overloaded => SharedReply::Overloaded,
        }
    }

    /// The mutation `sim-mutation-late-waiter` (test only, see Cargo.toml): registers the
    /// waiter [`MUTATION_LATE_BY`] after the denial, the seed's stranding race.
    #[cfg(feature = "sim-mutation-late-waiter")]
    fn mutation_register_late(&self, bucket: &str, limit: u64, from: &str) {
        let pool = self.this.clone();
        let (bucket, from): (Arc<str>, Arc<str>) = (Arc::from(bucket), Arc::from(from));
        tokio::spawn(async move {
            tokio::time::sleep(MUTATION_LATE_BY).await;
            if let Some(pool) = pool.upgrade() {
                pool.pool
                    .lock()
                    .mutation_register_waiter(&bucket, limit, &from, LEASE_TTL);
            }
        });
    }

    /// Answers a call of this node's own coordinator (releases and renewals of leases it owns).
    pub fn handle_local(self: &Arc<Self>, from: &str, call: SharedCall) -> SharedReply {
        self.handle(from, call)
    }

    /// Answers an owner-side call (acquire, renew, release) from `from`.
    pub fn handle(self: &Arc<Self>, from: &str, call: SharedCall) -> SharedReply {
        let now = self.clock.now();
        let holder: Arc<str> = Arc::from(from);
        match call {
            SharedCall::Acquire {
                bucket,
                limit,
                wants_queue,
                extra,
            } => self.acquire(from, &bucket, limit, wants_queue, extra),
            SharedCall::Renew { leases } => {
                let ids: Vec<LeaseId> = leases.into_iter().map(LeaseId).collect();
                let lost = self.pool.lock().renew(&holder, &ids, LEASE_TTL, now);
                SharedReply::Renewed {
                    lost: lost.into_iter().map(|l| l.0).collect(),
                }
            }
            SharedCall::Release { leases } => {
                let offers: Vec<Offer> = {
                    let mut pool = self.pool.lock();
                    leases
                        .into_iter()
                        .filter_map(|l| pool.release(&holder, LeaseId(l), now))
                        .collect()
                };
                self.dispatch(offers);
                SharedReply::Released
            }
            SharedCall::Room { buckets } => {
                let pool = self.pool.lock();
                SharedReply::Room {
                    free: buckets.iter().map(|b| pool.has_unowed_room(b)).collect(),
                }
            }
            // Offers go to coordinators, not owners.
            SharedCall::Offer { .. } => SharedReply::OfferAnswer {
                used: false,
                more_waiting: false,
            },
        }
    }

    /// Leases and buckets this owner holds, for stats and tests.
    pub fn sizes(&self) -> (usize, usize) {
        let pool = self.pool.lock();
        (pool.num_buckets(), pool.num_leases())
    }

    /// Runs `f` on the pool (read only), for stats and tests: the deterministic simulation
    /// (`tests/sim.rs`) reads every lease to check that a dead holder's leases are reclaimed.
    pub fn inspect<R>(&self, f: impl FnOnce(&SharedPool) -> R) -> R {
        f(&self.pool.lock())
    }

    /// Leases of `bucket` in use.
    pub fn in_use(&self, bucket: &str) -> u64 {
        self.pool.lock().in_use(bucket)
    }

    /// W2 (module docs): registers the coordinators refused for want of the view just taken
    /// if it lets them wait, offering each bucket's room at once; forgets the others (their
    /// backstops ask again). Called by the purger after each ring update and purge.
    fn register_deferred(self: &Arc<Self>) {
        let offers = {
            let now = self.clock.now();
            let mut pool = self.pool.lock();
            let deferred = std::mem::take(&mut *self.deferred.lock());
            let mut offers = Vec::new();
            for ((bucket, holder), limit) in deferred {
                if self.may_wait(&holder, &bucket) {
                    offers.extend(pool.rejoin(&bucket, limit, &holder, LEASE_TTL, now));
                }
            }
            offers
        };
        self.dispatch(offers);
    }

    /// Sends each offer (in the background, one task per offer chain).
    fn dispatch(self: &Arc<Self>, offers: Vec<Offer>) {
        for offer in offers {
            tokio::spawn(self.clone().send_offer(offer));
        }
    }

    /// Offers a reserved lease to its coordinator, then to the next waiter while it comes back
    /// unused.
    async fn send_offer(self: Arc<Self>, mut offer: Offer) {
        loop {
            if let Some(events) = self.events.get() {
                events.offer_sent(&offer.bucket);
            }
            let limit = self.pool.lock().limit(&offer.bucket).unwrap_or(0);
            let answer = if *offer.to == *self.me {
                match self.local.get().and_then(Weak::upgrade) {
                    Some(c) => Some(c.handle_offer(&self.me, &offer.bucket, offer.lease.0, limit)),
                    None => None,
                }
            } else {
                let member = self.members.borrow().get(&offer.to).cloned();
                match member {
                    Some(m) => self
                        .transport
                        .shared(
                            &m,
                            SharedCall::Offer {
                                bucket: offer.bucket.to_string(),
                                lease: offer.lease.0,
                                ttl: LEASE_TTL,
                                limit,
                            },
                            OFFER_DEADLINE,
                        )
                        .await
                        .ok(),
                    // Gone: the purge of its leases frees the slot again.
                    None => None,
                }
            };
            let Some(SharedReply::OfferAnswer { used, more_waiting }) = answer else {
                // Unknown outcome: keep the lease reserved (see the module docs).
                return;
            };
            let now = self.clock.now();
            let alive = *offer.to == *self.me || self.members.borrow().get(&offer.to).is_some();
            // A bucket the ring moved away is not served here (P8): its holder is not
            // registered again; its other parked requests ask the bucket's owner.
            let more_waiting = more_waiting && self.owns(&offer.bucket);
            let next = {
                let mut pool = self.pool.lock();
                let stale = pool.num_violations();
                let next = pool.offer_result(&offer, used, more_waiting, LEASE_TTL, now);
                if used && more_waiting && alive && pool.num_violations() > stale {
                    // The lease ended before its answer arrived (the holder's release
                    // overtook it): the holder still has parked requests, so it waits again.
                    pool.rejoin(&offer.bucket, limit, &offer.to, LEASE_TTL, now)
                } else {
                    next
                }
            };
            match next {
                Some(o) => offer = o,
                None => return,
            }
        }
    }
}

/// Lease ids an owner incarnation has to itself per millisecond since its start, as a power
/// of two: an incarnation's ids start at its start time in milliseconds times 2^20, so it
/// could only reach the next incarnation's ids by handing out a million leases per
/// millisecond; `ms << 20` stays below 2^64 until the year 2500.
const LEASE_EPOCH_SHIFT: u32 = 20;

/// The first lease id of a new owner incarnation: apart from every id an earlier incarnation
/// of this node handed out (a restarted node's owner starts later), and within one process
/// (tests, the simulation) apart from every earlier owner's.
fn first_lease_id() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX >> LEASE_EPOCH_SHIFT)
    });
    let wall = ms.saturating_mul(1 << LEASE_EPOCH_SHIFT).max(1);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let first = wall.max(last.saturating_add(1 << LEASE_EPOCH_SHIFT));
        match LAST.compare_exchange_weak(last, first, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return first,
            Err(seen) => last = seen,
        }
    }
}

/// Reclaims expired leases every [`SWEEP_EVERY`] and offers what they free.
async fn sweeper(o: Weak<Owner>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(o) = o.upgrade() else { return };
        let now = o.clock.now();
        let offers = o.pool.lock().sweep(now);
        o.dispatch(offers);
    }
}

/// The ids of `members`' live nodes, and the ring they make.
fn live_and_ring(members: &Members) -> (Vec<Arc<str>>, Ring) {
    let ids = members
        .live
        .iter()
        .map(|m| Arc::from(m.node_id.as_str()))
        .collect();
    (ids, Ring::new(&members.live, MIN_SHARED_PROTOCOL))
}

/// Follows the membership: purges the leases and waiter registrations of coordinators that
/// leave it, and forgets the waiters of the buckets the new ring places on another owner (P8
/// of `pool.rs`).
async fn purger(o: Weak<Owner>, mut rx: watch::Receiver<Members>, stop: CancellationToken) {
    let (mut known, ring) = live_and_ring(&rx.borrow_and_update());
    // The ring of the view just marked seen: the one `start` built may be older (a change
    // between the start and this task's first run would otherwise leave it stale until the
    // next change, and the owner would take buckets it owns for moved ones, P8 and W1).
    match o.upgrade() {
        Some(o) => {
            *o.ring.write() = Arc::new(ring);
            o.register_deferred();
        }
        None => return,
    }
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
        let (now_live, ring) = live_and_ring(&rx.borrow_and_update());
        let Some(o) = o.upgrade() else { return };
        *o.ring.write() = Arc::new(ring);
        o.pool.lock().forget_waiters(|bucket| !o.owns(bucket));
        for gone in known.iter().filter(|k| !now_live.contains(k)) {
            let now = o.clock.now();
            let offers = o.pool.lock().purge(gone, now);
            o.dispatch(offers);
        }
        known = now_live;
        o.register_deferred();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::rpc::{BoxFuture, LocalAnswer, LocalApi, RpcError};
    use crate::shared::OWNER_LIMITS;
    use std::time::Duration;

    /// A transport that reaches nobody (the owners here only answer calls).
    struct Nowhere;

    impl Transport for Nowhere {
        fn ping(&self, to: &crate::Member, _: Duration) -> BoxFuture<'_, Result<String, RpcError>> {
            let node = to.node_id.clone();
            Box::pin(async move {
                Err(RpcError::Remote {
                    node,
                    reason: "nowhere".into(),
                })
            })
        }

        fn local(
            &self,
            to: &crate::Member,
            _: LocalApi,
            _: serde_json::Value,
            _: Duration,
        ) -> BoxFuture<'_, Result<LocalAnswer, RpcError>> {
            let node = to.node_id.clone();
            Box::pin(async move {
                Err(RpcError::Remote {
                    node,
                    reason: "nowhere".into(),
                })
            })
        }

        fn shared(
            &self,
            to: &crate::Member,
            _: SharedCall,
            _: Duration,
        ) -> BoxFuture<'_, Result<SharedReply, RpcError>> {
            let node = to.node_id.clone();
            Box::pin(async move {
                Err(RpcError::Remote {
                    node,
                    reason: "nowhere".into(),
                })
            })
        }
    }

    fn owner(stop: &CancellationToken) -> Arc<Owner> {
        let (_tx, rx) = watch::channel(Members::default());
        Owner::start(
            Arc::from("o"),
            OWNER_LIMITS,
            Arc::new(SystemClock::new()),
            Arc::new(Nowhere),
            rx,
            stop.clone(),
        )
    }

    fn grant(o: &Arc<Owner>) -> u64 {
        let call = SharedCall::Acquire {
            bucket: "b".into(),
            limit: 2,
            wants_queue: false,
            extra: 0,
        };
        match o.handle("x", call) {
            SharedReply::Granted { lease, .. } => lease,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    /// A transport that records the offers sent and answers each used, nothing more waiting.
    struct Offers(tokio::sync::mpsc::UnboundedSender<(String, String)>);

    impl Transport for Offers {
        fn ping(&self, to: &crate::Member, d: Duration) -> BoxFuture<'_, Result<String, RpcError>> {
            Nowhere.ping(to, d)
        }

        fn local(
            &self,
            to: &crate::Member,
            api: LocalApi,
            params: serde_json::Value,
            d: Duration,
        ) -> BoxFuture<'_, Result<LocalAnswer, RpcError>> {
            Nowhere.local(to, api, params, d)
        }

        fn shared(
            &self,
            to: &crate::Member,
            call: SharedCall,
            _: Duration,
        ) -> BoxFuture<'_, Result<SharedReply, RpcError>> {
            if let SharedCall::Offer { bucket, .. } = call {
                let _ = self.0.send((to.node_id.clone(), bucket));
            }
            Box::pin(async {
                Ok(SharedReply::OfferAnswer {
                    used: true,
                    more_waiting: false,
                })
            })
        }
    }

    fn member(id: &str, port: u16) -> crate::Member {
        crate::Member {
            node_id: id.into(),
            generation: 1,
            name: id.into(),
            http_addr: ([127, 0, 0, 1], port).into(),
            transport_addr: ([127, 0, 0, 1], port).into(),
            protocol_version: MIN_SHARED_PROTOCOL,
            backend: "embedded".into(),
            version: "test".into(),
            cluster_uuid: "u".into(),
        }
    }

    fn view(members: &[&crate::Member]) -> Members {
        Members {
            live: Arc::new(members.iter().map(|m| (*m).clone()).collect()),
            ..Members::default()
        }
    }

    #[tokio::test]
    async fn test_a_coordinator_refused_before_the_ring_moved_here_is_offered_once_it_has() {
        let (o, p, x) = (member("o", 1), member("p", 2), member("x", 3));
        // A bucket on p while p lives, on o once it has gone.
        let bucket = (0..)
            .map(|i| format!("b{i}"))
            .find(|b| {
                let owner = |ms: &[crate::Member]| {
                    let ring = Ring::new(ms, MIN_SHARED_PROTOCOL);
                    ring.owner(b.as_bytes()).map(|m| m.node_id.clone())
                };
                owner(&[o.clone(), p.clone(), x.clone()]).as_deref() == Some("p")
                    && owner(&[o.clone(), x.clone()]).as_deref() == Some("o")
            })
            .unwrap();
        let (tx, mut offers) = tokio::sync::mpsc::unbounded_channel();
        let (members, rx) = watch::channel(view(&[&o, &p, &x]));
        let stop = CancellationToken::new();
        let owner = Owner::start(
            Arc::from("o"),
            OWNER_LIMITS,
            Arc::new(SystemClock::new()),
            Arc::new(Offers(tx)),
            rx,
            stop.clone(),
        );
        // The purger's first pass (it runs at the runtime's next turn: one thread) sees the
        // view with p, as the owner did when it was refused.
        tokio::task::yield_now().await;
        let acquire = |wants_queue| SharedCall::Acquire {
            bucket: bucket.clone(),
            limit: 1,
            wants_queue,
            extra: 0,
        };
        // x's ring dropped p before o's did: o is asked, full, and does not own the bucket.
        let SharedReply::Granted { lease, .. } = owner.handle("y", acquire(false)) else {
            panic!("an idle bucket grants");
        };
        assert_eq!(
            owner.handle("x", acquire(true)),
            SharedReply::Denied {
                in_use: 1,
                limit: 1,
                waiter_registered: false
            }
        );
        // The slot frees while x is registered nowhere: offered to nobody.
        owner.handle(
            "y",
            SharedCall::Release {
                leases: vec![lease],
            },
        );
        assert_eq!(owner.in_use(&bucket), 0);
        // o's ring drops p too: x is registered and offered the room at once.
        members.send_replace(view(&[&o, &x]));
        let offered = tokio::time::timeout(Duration::from_secs(10), offers.recv())
            .await
            .expect("an offer once the ring placed the bucket here")
            .unwrap();
        assert_eq!(offered, ("x".to_string(), bucket.clone()));
        assert_eq!(owner.in_use(&bucket), 1);
        stop.cancel();
    }

    #[tokio::test]
    async fn test_a_coordinator_the_split_leaves_out_is_granted_nothing() {
        // Trial 105: o, cut off alone with its share of a limit of 4 (1), leaves p out of its
        // side, and p, on the other side, leaves o out of its own (S11).
        let stop = CancellationToken::new();
        let owner = owner(&stop);
        owner.set_left_out(&["p".to_string()]);
        let acquire = |limit, wants_queue| SharedCall::Acquire {
            bucket: "b".into(),
            limit,
            wants_queue,
            extra: 0,
        };
        // Acquires p sent with the whole limit before it counted o off arrive late: p would
        // neither renew nor release what they got, and o never purges p (never a member here).
        for wants_queue in [false, true, false, true] {
            assert_eq!(
                owner.handle("p", acquire(4, wants_queue)),
                SharedReply::Denied {
                    in_use: 0,
                    limit: 4,
                    waiter_registered: false
                }
            );
        }
        assert_eq!(owner.in_use("b"), 0);
        assert_eq!(owner.inspect(|pool| pool.num_waiters()), 0);
        // o's own requests have its share.
        assert!(matches!(
            owner.handle("o", acquire(1, false)),
            SharedReply::Granted { .. }
        ));
        // The sides merged: p is served again.
        owner.set_left_out(&[]);
        assert!(matches!(
            owner.handle("p", acquire(4, false)),
            SharedReply::Granted { .. }
        ));
        assert_eq!(owner.in_use("b"), 2);
        stop.cancel();
    }

    #[tokio::test]
    async fn test_a_restarted_owner_never_reuses_a_lease_id_of_its_previous_incarnation() {
        let stop = CancellationToken::new();
        let before = owner(&stop);
        let stale = grant(&before);
        drop(before);
        // The node restarts: x still holds `stale` and its new request gets a new lease.
        let after = owner(&stop);
        let fresh = grant(&after);
        assert_ne!(stale, fresh);
        // x's stale release must not end the new lease.
        let released = after.handle(
            "x",
            SharedCall::Release {
                leases: vec![stale],
            },
        );
        assert_eq!(released, SharedReply::Released);
        assert_eq!(after.in_use("b"), 1);
        assert_eq!(after.inspect(|p| p.num_violations()), 1);
        stop.cancel();
    }
}
