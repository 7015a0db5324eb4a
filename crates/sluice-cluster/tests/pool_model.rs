//! The shared pool against a reference model: random sequences of acquire, renew, release,
//! offer results (stale and duplicated ones included), sweeps, purges and clock advances over
//! a few buckets and holders, and batches of extra leases. After every step the pool's answers
//! must equal the model's, P1–P7
//! of `src/shared/pool.rs` are checked on the pool itself, and a twin pool fed the same calls
//! must answer the same (determinism: its hash maps have other random keys).
//!
//! The model keeps everything in ordered maps and recomputes counts by scanning; idle buckets
//! are dropped by one pass after each call.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluice_cluster::shared::pool::{AcquireOutcome, LeaseId, Offer, PoolLimits, SharedPool};

const BUCKETS: [&str; 3] = ["b0", "b1", "b2"];
const HOLDERS: [&str; 3] = ["h0", "h1", "h2"];

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        bucket: usize,
        limit: u64,
        holder: usize,
        wants_queue: bool,
        ttl: u64,
    },
    Renew {
        holder: usize,
        picks: Vec<usize>,
        ttl: u64,
    },
    /// Releases the picked issued lease, by its holder unless `as_holder` names another.
    Release {
        pick: usize,
        as_holder: Option<usize>,
    },
    /// Answers the picked offer (possibly one already answered or reclaimed).
    OfferResult {
        pick: usize,
        used: bool,
        more_waiting: bool,
        ttl: u64,
    },
    /// A batch of up to `n` more leases right after an acquire (P7).
    GrantMore {
        bucket: usize,
        holder: usize,
        n: u64,
        ttl: u64,
    },
    Sweep,
    Purge {
        holder: usize,
    },
    Advance {
        secs: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..BUCKETS.len(), 0u64..4, 0..HOLDERS.len(), any::<bool>(), 1u64..8).prop_map(
            |(bucket, limit, holder, wants_queue, ttl)| Op::Acquire { bucket, limit, holder, wants_queue, ttl }
        ),
        1 => (0..HOLDERS.len(), prop::collection::vec(0usize..40, 0..4), 1u64..8)
            .prop_map(|(holder, picks, ttl)| Op::Renew { holder, picks, ttl }),
        3 => (0usize..40, prop::option::weighted(0.15, 0..HOLDERS.len()))
            .prop_map(|(pick, as_holder)| Op::Release { pick, as_holder }),
        3 => (0usize..40, any::<bool>(), any::<bool>(), 1u64..8).prop_map(
            |(pick, used, more_waiting, ttl)| Op::OfferResult { pick, used, more_waiting, ttl }
        ),
        2 => (0..BUCKETS.len(), 0..HOLDERS.len(), 0u64..4, 1u64..8).prop_map(
            |(bucket, holder, n, ttl)| Op::GrantMore { bucket, holder, n, ttl }
        ),
        1 => Just(Op::Sweep),
        1 => (0..HOLDERS.len()).prop_map(|holder| Op::Purge { holder }),
        2 => (0u64..4).prop_map(|secs| Op::Advance { secs }),
    ]
}

#[derive(Debug, Clone)]
struct MBucket {
    limit: u64,
    ttl: Duration,
    waiters: VecDeque<String>,
    raised: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct MLease {
    bucket: String,
    holder: String,
    expires: Duration,
    offered: bool,
}

/// The reference model of the pool.
#[derive(Debug, Clone)]
struct Model {
    limits: PoolLimits,
    buckets: BTreeMap<String, MBucket>,
    leases: BTreeMap<u64, MLease>,
    raised: Vec<String>,
    next: u64,
    violations: u64,
}

impl Model {
    fn new(limits: PoolLimits) -> Model {
        Model {
            limits,
            buckets: BTreeMap::new(),
            leases: BTreeMap::new(),
            raised: Vec::new(),
            next: 1,
            violations: 0,
        }
    }

    fn in_use(&self, bucket: &str) -> u64 {
        self.leases.values().filter(|l| l.bucket == bucket).count() as u64
    }

    fn new_lease(&mut self, bucket: &str, holder: &str, expires: Duration, offered: bool) -> u64 {
        let id = self.next;
        self.next += 1;
        let lease = MLease {
            bucket: bucket.into(),
            holder: holder.into(),
            expires,
            offered,
        };
        assert!(self.leases.insert(id, lease).is_none());
        id
    }

    fn register(&mut self, bucket: &str, holder: &str) {
        let waiters = &mut self.buckets.get_mut(bucket).unwrap().waiters;
        if !waiters.iter().any(|w| w == holder) {
            waiters.push_back(holder.into());
        }
    }

    /// Ends a lease; P2: it must be live (panics on a second end).
    fn end(&mut self, id: u64) -> String {
        self.leases
            .remove(&id)
            .expect("P2: a lease ended twice")
            .bucket
    }

    fn offer_one(&mut self, bucket: &str, now: Duration) -> Option<Offer> {
        let in_use = self.in_use(bucket);
        let entry = self.buckets.get_mut(bucket)?;
        if in_use >= entry.limit || entry.waiters.is_empty() {
            return None;
        }
        if self.leases.len() >= self.limits.max_leases {
            // At the lease cap: the next sweep offers the room.
            if !entry.raised {
                entry.raised = true;
                self.raised.push(bucket.into());
            }
            return None;
        }
        let to = entry.waiters.pop_front().unwrap();
        let expires = now + entry.ttl;
        let id = self.new_lease(bucket, &to, expires, true);
        Some(Offer {
            to: to.as_str().into(),
            bucket: bucket.into(),
            lease: LeaseId(id),
            expires,
        })
    }

    fn drop_idle(&mut self) {
        let live: BTreeSet<String> = self.leases.values().map(|l| l.bucket.clone()).collect();
        self.buckets
            .retain(|b, e| live.contains(b) || !e.waiters.is_empty());
    }

    /// P7: extra leases only from room no waiter is owed, within the limit and the lease cap.
    fn grant_more(
        &mut self,
        bucket: &str,
        holder: &str,
        n: u64,
        ttl: Duration,
        now: Duration,
    ) -> Vec<LeaseId> {
        let in_use = self.in_use(bucket);
        let Some(entry) = self.buckets.get(bucket) else {
            return Vec::new();
        };
        if !entry.waiters.is_empty() {
            return Vec::new();
        }
        let room = entry.limit.saturating_sub(in_use);
        let caps = (self.limits.max_leases - self.leases.len()) as u64;
        (0..n.min(room).min(caps))
            .map(|_| LeaseId(self.new_lease(bucket, holder, now + ttl, false)))
            .collect()
    }

    fn acquire(
        &mut self,
        bucket: &str,
        limit: u64,
        holder: &str,
        wants_queue: bool,
        ttl: Duration,
        now: Duration,
    ) -> AcquireOutcome {
        let in_use = self.in_use(bucket);
        let exists = self.buckets.contains_key(bucket);
        if in_use >= limit {
            let waiter_registered = if exists {
                let e = self.buckets.get_mut(bucket).unwrap();
                e.limit = limit;
                e.ttl = ttl;
                if wants_queue {
                    self.register(bucket, holder);
                }
                wants_queue
            } else if !wants_queue {
                false
            } else if self.buckets.len() >= self.limits.max_buckets {
                return AcquireOutcome::Overloaded;
            } else {
                self.buckets.insert(
                    bucket.into(),
                    MBucket {
                        limit,
                        ttl,
                        waiters: VecDeque::new(),
                        raised: false,
                    },
                );
                self.register(bucket, holder);
                true
            };
            return AcquireOutcome::Denied {
                in_use,
                limit,
                waiter_registered,
            };
        }
        if self.leases.len() >= self.limits.max_leases
            || (!exists && self.buckets.len() >= self.limits.max_buckets)
        {
            return AcquireOutcome::Overloaded;
        }
        let e = self.buckets.entry(bucket.into()).or_insert(MBucket {
            limit,
            ttl,
            waiters: VecDeque::new(),
            raised: false,
        });
        e.limit = limit;
        e.ttl = ttl;
        if in_use + 1 < limit && !e.waiters.is_empty() && !e.raised {
            e.raised = true;
            self.raised.push(bucket.into());
        }
        let expires = now + ttl;
        let id = self.new_lease(bucket, holder, expires, false);
        AcquireOutcome::Granted {
            lease: LeaseId(id),
            expires,
        }
    }

    fn renew(
        &mut self,
        holder: &str,
        ids: &[LeaseId],
        ttl: Duration,
        now: Duration,
    ) -> Vec<LeaseId> {
        let mut lost = Vec::new();
        for &LeaseId(id) in ids {
            match self.leases.get_mut(&id) {
                Some(l) if l.holder == holder && now < l.expires => l.expires = now + ttl,
                _ => lost.push(LeaseId(id)),
            }
        }
        lost
    }

    fn release(&mut self, holder: &str, LeaseId(id): LeaseId, now: Duration) -> Option<Offer> {
        if self.leases.get(&id).is_none_or(|l| l.holder != holder) {
            self.violations += 1;
            return None;
        }
        let bucket = self.end(id);
        let offer = self.offer_one(&bucket, now);
        self.drop_idle();
        offer
    }

    fn offer_result(
        &mut self,
        offer: &Offer,
        used: bool,
        more_waiting: bool,
        ttl: Duration,
        now: Duration,
    ) -> Option<Offer> {
        let id = offer.lease.0;
        let matches = self
            .leases
            .get(&id)
            .is_some_and(|l| l.offered && *l.holder == *offer.to && *l.bucket == *offer.bucket);
        if !matches {
            self.violations += 1;
            return None;
        }
        if !used {
            let bucket = self.end(id);
            let next = self.offer_one(&bucket, now);
            self.drop_idle();
            return next;
        }
        let lease = self.leases.get_mut(&id).unwrap();
        if now < lease.expires {
            lease.expires = now + ttl;
            lease.offered = false;
        }
        if !more_waiting {
            return None;
        }
        self.register(&offer.bucket, &offer.to);
        self.offer_one(&offer.bucket, now)
    }

    fn sweep(&mut self, now: Duration) -> Vec<Offer> {
        let mut offers = Vec::new();
        loop {
            let next = self
                .leases
                .iter()
                .map(|(&id, l)| (l.expires, id))
                .min()
                .filter(|&(expires, _)| expires <= now);
            let Some((_, id)) = next else { break };
            let bucket = self.end(id);
            offers.extend(self.offer_one(&bucket, now));
            self.drop_idle();
        }
        for bucket in std::mem::take(&mut self.raised) {
            let Some(e) = self.buckets.get_mut(&bucket) else {
                continue;
            };
            e.raised = false;
            while self.leases.len() < self.limits.max_leases {
                match self.offer_one(&bucket, now) {
                    Some(offer) => offers.push(offer),
                    None => break,
                }
            }
            let in_use = self.in_use(&bucket);
            let e = self.buckets.get_mut(&bucket).unwrap();
            if in_use < e.limit && !e.waiters.is_empty() {
                e.raised = true;
                self.raised.push(bucket);
            }
        }
        offers
    }

    fn purge(&mut self, holder: &str, now: Duration) -> Vec<Offer> {
        for e in self.buckets.values_mut() {
            e.waiters.retain(|w| w != holder);
        }
        let held: Vec<u64> = self
            .leases
            .iter()
            .filter(|(_, l)| l.holder == holder)
            .map(|(&id, _)| id)
            .collect();
        let mut offers = Vec::new();
        for id in held {
            let bucket = self.end(id);
            offers.extend(self.offer_one(&bucket, now));
        }
        self.drop_idle();
        offers
    }
}

/// What one call returned, for comparing pool, twin and model.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Acquire(AcquireOutcome),
    More(Vec<LeaseId>),
    Lost(Vec<LeaseId>),
    Offer(Option<Offer>),
    Offers(Vec<Offer>),
    Nothing,
}

impl Answer {
    fn offers(&self) -> Vec<Offer> {
        match self {
            Answer::Offer(o) => o.iter().cloned().collect(),
            Answer::Offers(v) => v.clone(),
            _ => Vec::new(),
        }
    }
}

/// The harness: the pool, its twin, the model and what the checks need to remember.
struct Harness {
    pool: SharedPool,
    twin: SharedPool,
    model: Model,
    now: Duration,
    /// Every lease id ever issued (grants and offers), for picking.
    issued: Vec<LeaseId>,
    /// Every offer ever made, for picking answers (stale ones included).
    offers: Vec<Offer>,
    /// The limit of each bucket's latest non-Overloaded acquire (P1).
    latest_limit: HashMap<String, u64>,
    /// Buckets whose limit an acquire raised while they had waiters, since the last sweep (P5).
    raised: BTreeSet<String>,
}

fn arc(s: &str) -> Arc<str> {
    Arc::from(s)
}

impl Harness {
    fn new(limits: PoolLimits) -> Harness {
        Harness {
            pool: SharedPool::new(limits),
            twin: SharedPool::new(limits),
            model: Model::new(limits),
            now: Duration::ZERO,
            issued: Vec::new(),
            offers: Vec::new(),
            latest_limit: HashMap::new(),
            raised: BTreeSet::new(),
        }
    }

    fn counts(&self) -> (usize, usize, usize) {
        (
            self.pool.num_buckets(),
            self.pool.num_leases(),
            self.pool.num_waiters(),
        )
    }

    fn step(&mut self, op: &Op) {
        let now = self.now;
        let before = self.counts();
        let secs = Duration::from_secs;
        // P6: the leases the sweep must reclaim, seen before it runs.
        let live_before: Vec<(LeaseId, Duration)> = self
            .issued
            .iter()
            .filter_map(|&id| self.pool.lease(id).map(|l| (id, l.expires)))
            .collect();
        let answer = match op {
            Op::Acquire {
                bucket,
                limit,
                holder,
                wants_queue,
                ttl,
            } => {
                let (b, h) = (BUCKETS[*bucket], HOLDERS[*holder]);
                let had_waiters = self.pool.waiters(b).count() > 0;
                let call = |p: &mut SharedPool| {
                    p.acquire(&arc(b), *limit, &arc(h), *wants_queue, secs(*ttl), now)
                };
                let (got, twin) = (call(&mut self.pool), call(&mut self.twin));
                assert_eq!(got, twin, "determinism");
                let want = self
                    .model
                    .acquire(b, *limit, h, *wants_queue, secs(*ttl), now);
                assert_eq!(got, want);
                match &got {
                    AcquireOutcome::Overloaded => {
                        assert_eq!(self.counts(), before, "P4: Overloaded changed nothing");
                    }
                    AcquireOutcome::Granted { lease, expires } => {
                        assert_eq!(*expires, now + secs(*ttl), "P6");
                        self.issued.push(*lease);
                        self.latest_limit.insert(b.into(), *limit);
                        if had_waiters {
                            self.raised.insert(b.into());
                        }
                        self.check_p1(b);
                    }
                    AcquireOutcome::Denied {
                        in_use,
                        limit: l,
                        waiter_registered,
                    } => {
                        assert!(in_use >= l);
                        if *wants_queue {
                            assert!(*waiter_registered, "P5: registered in the same call");
                            assert!(self.pool.waiters(b).any(|w| &**w == h));
                        } else {
                            assert!(!*waiter_registered);
                        }
                        if self.pool.limit(b).is_some() {
                            self.latest_limit.insert(b.into(), *limit);
                        }
                    }
                }
                Answer::Acquire(got)
            }
            Op::Renew { holder, picks, ttl } => {
                let h = HOLDERS[*holder];
                let ids: Vec<LeaseId> = picks.iter().map(|&p| self.pick_lease(p)).collect();
                let got = self.pool.renew(&arc(h), &ids, secs(*ttl), now);
                assert_eq!(got, self.twin.renew(&arc(h), &ids, secs(*ttl), now));
                assert_eq!(got, self.model.renew(h, &ids, secs(*ttl), now));
                for id in ids.iter().filter(|id| !got.contains(id)) {
                    assert_eq!(
                        self.pool.lease(*id).unwrap().expires,
                        now + secs(*ttl),
                        "P6"
                    );
                }
                Answer::Lost(got)
            }
            Op::Release { pick, as_holder } => {
                let id = self.pick_lease(*pick);
                let holder: Arc<str> = match (as_holder, self.pool.lease(id)) {
                    (Some(h), _) => arc(HOLDERS[*h]),
                    (None, Some(lease)) => lease.holder.clone(),
                    (None, None) => arc(HOLDERS[*pick % HOLDERS.len()]),
                };
                let got = self.pool.release(&holder, id, now);
                assert_eq!(got, self.twin.release(&holder, id, now));
                assert_eq!(got, self.model.release(&holder, id, now));
                Answer::Offer(got)
            }
            Op::OfferResult {
                pick,
                used,
                more_waiting,
                ttl,
            } => {
                if self.offers.is_empty() {
                    Answer::Nothing
                } else {
                    let offer = self.offers[*pick % self.offers.len()].clone();
                    let call = |p: &mut SharedPool| {
                        p.offer_result(&offer, *used, *more_waiting, secs(*ttl), now)
                    };
                    let got = call(&mut self.pool);
                    assert_eq!(got, call(&mut self.twin));
                    let want =
                        self.model
                            .offer_result(&offer, *used, *more_waiting, secs(*ttl), now);
                    assert_eq!(got, want);
                    if got.is_none() && self.pool.num_leases() >= self.pool.limits().max_leases {
                        // Room left for the sweep to offer once leases end (P5).
                        self.raised.insert(offer.bucket.to_string());
                    }
                    Answer::Offer(got)
                }
            }
            Op::GrantMore {
                bucket,
                holder,
                n,
                ttl,
            } => {
                let (b, h) = (BUCKETS[*bucket], HOLDERS[*holder]);
                let had_waiters = self.pool.waiters(b).count() > 0;
                let call = |p: &mut SharedPool| p.grant_more(&arc(b), &arc(h), *n, secs(*ttl), now);
                let (got, twin) = (call(&mut self.pool), call(&mut self.twin));
                assert_eq!(got, twin, "determinism");
                assert_eq!(got, self.model.grant_more(b, h, *n, secs(*ttl), now));
                assert!(got.len() as u64 <= *n);
                if had_waiters {
                    assert!(got.is_empty(), "P7: a batch while {b} has waiters");
                }
                for lease in &got {
                    assert_eq!(
                        self.pool.lease(*lease).map(|l| l.expires),
                        Some(now + secs(*ttl)),
                        "P6"
                    );
                    self.issued.push(*lease);
                }
                if !got.is_empty() {
                    self.check_p1(b);
                }
                Answer::More(got)
            }
            Op::Sweep => {
                let got = self.pool.sweep(now);
                assert_eq!(got, self.twin.sweep(now));
                assert_eq!(got, self.model.sweep(now));
                // P6: exactly the leases with expires <= now are gone; the others stay.
                for (id, expires) in &live_before {
                    assert_eq!(self.pool.lease(*id).is_none(), *expires <= now, "P6 {id:?}");
                }
                // The room of a raised limit stays only where the lease cap stopped the offers.
                let pool = &self.pool;
                self.raised.retain(|b| {
                    pool.limit(b)
                        .is_some_and(|limit| pool.in_use(b) < limit && pool.waiters(b).count() > 0)
                });
                if !self.raised.is_empty() {
                    assert!(
                        pool.num_leases() >= pool.limits().max_leases,
                        "P5: sweep left room"
                    );
                }
                Answer::Offers(got)
            }
            Op::Purge { holder } => {
                let h = arc(HOLDERS[*holder]);
                let got = self.pool.purge(&h, now);
                assert_eq!(got, self.twin.purge(&h, now));
                assert_eq!(got, self.model.purge(&h, now));
                assert!(
                    self.issued
                        .iter()
                        .all(|&id| self.pool.lease(id).is_none_or(|l| *l.holder != h)),
                    "a purged holder keeps no lease"
                );
                assert!(
                    BUCKETS
                        .iter()
                        .all(|b| self.pool.waiters(b).all(|w| *w != h))
                );
                Answer::Offers(got)
            }
            Op::Advance { secs: s } => {
                self.now += secs(*s);
                Answer::Nothing
            }
        };
        for offer in answer.offers() {
            assert_eq!(self.pool.lease(offer.lease).map(|l| l.offered), Some(true));
            self.issued.push(offer.lease);
            self.check_p1(&offer.bucket);
            self.offers.push(offer);
        }
        self.check_state();
    }

    fn pick_lease(&self, pick: usize) -> LeaseId {
        if pick < self.issued.len() {
            self.issued[self.issued.len() - 1 - pick]
        } else {
            LeaseId(1_000 + pick as u64)
        }
    }

    /// P1: after a grant or offer in `bucket`, its leases are within its latest limit.
    fn check_p1(&self, bucket: &str) {
        let limit = self.latest_limit[bucket];
        assert!(
            self.pool.in_use(bucket) <= limit,
            "P1: {bucket} has {} leases out, limit {limit}",
            self.pool.in_use(bucket)
        );
    }

    /// The state checks after every step: the pool equals the model (P2, P3), the caps hold
    /// (P4), no bucket has both room and a waiter (P5), no lease expires later than it may
    /// (P6).
    fn check_state(&self) {
        let (pool, model) = (&self.pool, &self.model);
        // P2: the same live leases, with the same holders, buckets, expiries and states.
        for &id in &self.issued {
            let got = pool.lease(id).map(|l| MLease {
                bucket: l.bucket.to_string(),
                holder: l.holder.to_string(),
                expires: l.expires,
                offered: l.offered,
            });
            assert_eq!(got.as_ref(), model.leases.get(&id.0), "P2: lease {id:?}");
        }
        assert_eq!(pool.num_leases(), model.leases.len());
        assert_eq!(pool.num_violations(), model.violations);
        // P3: an entry exactly for buckets with leases or waiters.
        assert_eq!(pool.num_buckets(), model.buckets.len(), "P3");
        let mut waiters = 0;
        for b in BUCKETS {
            let in_use = pool.in_use(b);
            let list: Vec<&str> = pool.waiters(b).map(|w| &**w).collect();
            assert_eq!(in_use, model.in_use(b));
            assert_eq!(
                pool.limit(b).is_some(),
                in_use > 0 || !list.is_empty(),
                "P3 {b}"
            );
            let want: Vec<&str> = model
                .buckets
                .get(b)
                .map(|e| e.waiters.iter().map(String::as_str).collect())
                .unwrap_or_default();
            assert_eq!(list, want);
            // P7: room no waiter is owed, as the model sees it.
            let unowed = model
                .buckets
                .get(b)
                .is_some_and(|e| e.waiters.is_empty() && model.in_use(b) < e.limit);
            assert_eq!(pool.has_unowed_room(b), unowed, "P7 {b}");
            // P4: one registration per (bucket, holder).
            let distinct: BTreeSet<&str> = list.iter().copied().collect();
            assert_eq!(distinct.len(), list.len(), "P4: a holder registered twice");
            waiters += list.len();
            // P5: no room and a waiter at once, but for a limit raised since the last sweep.
            if let Some(limit) = pool.limit(b)
                && in_use < limit
                && !list.is_empty()
            {
                assert!(
                    self.raised.contains(b),
                    "P5: {b} has room and waiters {list:?}"
                );
            }
        }
        assert_eq!(pool.num_waiters(), waiters);
        // P4: the caps.
        let limits = pool.limits();
        assert!(pool.num_buckets() <= limits.max_buckets, "P4");
        assert!(pool.num_leases() <= limits.max_leases, "P4");
        // P6: every live lease expires within the longest TTL (8 s) of now.
        for &id in &self.issued {
            if let Some(lease) = pool.lease(id) {
                assert!(lease.expires <= self.now + Duration::from_secs(8), "P6");
            }
        }
    }
}

fn limits() -> impl Strategy<Value = PoolLimits> {
    prop_oneof![
        Just(PoolLimits {
            max_buckets: 100,
            max_leases: 100
        }),
        Just(PoolLimits {
            max_buckets: 2,
            max_leases: 4
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn pool_matches_model_and_keeps_p1_to_p7(
        limits in limits(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let mut harness = Harness::new(limits);
        for op in &ops {
            harness.step(op);
        }
        // Every holder leaves: every lease ends, every entry goes.
        for holder in 0..HOLDERS.len() {
            harness.step(&Op::Purge { holder });
        }
        prop_assert_eq!(
            (harness.pool.num_buckets(), harness.pool.num_leases(), harness.pool.num_waiters()),
            (0, 0, 0)
        );
    }
}
