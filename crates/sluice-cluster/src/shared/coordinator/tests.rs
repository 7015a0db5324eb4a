//! The coordinator's unit tests (K1-K18).

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;

use super::*;
use crate::Member;
use crate::clock::SystemClock;
use crate::rpc::{BoxFuture, LocalAnswer, LocalApi, RpcError, SharedHandler};
use crate::shared::{ACQUIRE_DEADLINE, LEASE_TTL, OWNER_LIMITS, SharedTier};

/// Carries node `from`'s shared calls to node b's tier while `up`; fails them as
/// unreachable otherwise (the owner is lost).
struct Switch {
    from: String,
    up: AtomicBool,
    b: OnceLock<Arc<SharedTier>>,
    /// Acquire calls carried.
    acquires: AtomicU64,
    /// Release calls tried, carried or not.
    releases: AtomicU64,
    /// Probes tried (empty renewals), carried or not.
    probes: AtomicU64,
    /// How long a call takes, in microseconds (0: answered at once): the network's latency,
    /// on the tests' paused clock, so that calls are out while other requests arrive. Tests
    /// never sleep to wait for a condition; they poll with [`eventually`].
    delay_us: AtomicU64,
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
        deadline: Duration,
    ) -> BoxFuture<'_, Result<SharedReply, RpcError>> {
        let node = to.node_id.clone();
        if matches!(call, SharedCall::Acquire { .. }) {
            self.acquires.fetch_add(1, Ordering::SeqCst);
        }
        let delay = Duration::from_micros(self.delay_us.load(Ordering::SeqCst));
        // A call that takes longer than its deadline (a partition that outlasts it): the
        // caller stops listening then, but the call is on the wire, and it reaches the owner
        // when the delay is over, its answer lost — as TCP delivers a stream's bytes, whose
        // caller reset it, after a partition heals.
        if delay > deadline {
            let (b, up, from) = (
                self.b.get().cloned(),
                self.up.load(Ordering::SeqCst),
                self.from.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let (Some(b), true) = (b, up) {
                    let _lost = b.shared(&from, call).await;
                }
            });
            return Box::pin(async move {
                tokio::time::sleep(deadline).await;
                Err(RpcError::DeadlineExceeded { node, deadline })
            });
        }
        if matches!(call, SharedCall::Release { .. }) {
            self.releases.fetch_add(1, Ordering::SeqCst);
        }
        if matches!(&call, SharedCall::Renew { leases } if leases.is_empty()) {
            self.probes.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            match self.b.get() {
                Some(b) if self.up.load(Ordering::SeqCst) => Ok(b.shared(&self.from, call).await),
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
    // c is a member too, so that it may wait at b's owner (W1 of `owner.rs`); it owns buckets
    // but runs nothing: the tests use b's.
    let (tx, rx) = watch::channel(Members {
        live: Arc::new(vec![member("a"), member("b"), member("c")]),
        strangers: Arc::default(),
        twins: Arc::default(),
    });
    let stop = CancellationToken::new();
    let clock: Arc<dyn crate::clock::Clock> = Arc::new(SystemClock::new());
    let switch = Arc::new(Switch {
        from: "a".into(),
        up: AtomicBool::new(false),
        b: OnceLock::new(),
        acquires: AtomicU64::new(0),
        releases: AtomicU64::new(0),
        probes: AtomicU64::new(0),
        delay_us: AtomicU64::new(0),
    });
    let to_a = Arc::new(Switch {
        from: "b".into(),
        up: AtomicBool::new(false),
        b: OnceLock::new(),
        acquires: AtomicU64::new(0),
        releases: AtomicU64::new(0),
        probes: AtomicU64::new(0),
        delay_us: AtomicU64::new(0),
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

/// Brings b back and waits until a's breaker for it has closed: a probe was answered (K16).
async fn owner_back(p: &Pair) {
    p.switch.up.store(true, Ordering::SeqCst);
    let g = p.buckets[0].clone();
    eventually(|| p.a.fails_fast(&g).is_none()).await;
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
    owner_back(&p).await;
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

#[tokio::test(start_paused = true)]
async fn test_an_owner_that_failed_is_not_asked_until_it_answers_a_probe() {
    let p = pair();
    let (g, h) = (&p.buckets[0], &p.buckets[1]);
    let acquires = || p.switch.acquires.load(Ordering::SeqCst);
    // The owner is up but answers late (paused): the first request waits out its deadline,
    // then fails open.
    p.switch.up.store(true, Ordering::SeqCst);
    let late = ACQUIRE_DEADLINE * 5;
    p.switch
        .delay_us
        .store(late.as_micros() as u64, Ordering::SeqCst);
    let asked = tokio::time::Instant::now();
    let first = p.a.acquire(g, 4, false, ACQUIRE_DEADLINE).await;
    assert!(matches!(first, Acquired::FailOpen { .. }), "{first:?}");
    assert_eq!(tokio::time::Instant::now() - asked, ACQUIRE_DEADLINE);
    assert_eq!(acquires(), 1);
    // K16: its breaker is open. The next requests of its buckets (either bucket) are not sent
    // to it and wait for nothing: they fail open at once, within K1, then are unavailable.
    let reason = p.a.fails_fast(h).expect("the breaker is open");
    assert!(reason.contains("node [b] failed a call"), "{reason}");
    let asked = tokio::time::Instant::now();
    let mut slots = vec![first];
    for _ in 0..3 {
        let a = p.a.acquire(g, 4, true, ACQUIRE_DEADLINE).await;
        assert!(matches!(a, Acquired::FailOpen { .. }), "{a:?}");
        slots.push(a);
    }
    let a = p.a.acquire(g, 4, true, ACQUIRE_DEADLINE).await;
    assert!(matches!(a, Acquired::Unavailable { .. }), "{a:?}");
    let a = p.a.acquire(h, 1, false, ACQUIRE_DEADLINE).await;
    assert!(matches!(a, Acquired::FailOpen { .. }), "{a:?}");
    slots.push(a);
    assert_eq!(tokio::time::Instant::now(), asked, "no request waited");
    assert_eq!(acquires(), 1, "no request was sent to the owner");
    assert_eq!(p.a.stats.fail_open.load(Ordering::Relaxed), 5);
    // The owner answers again: a probe (every PROBE_EVERY, one out at a time) closes the
    // breaker within a probe period plus the probe's own round trip, and requests ask it again.
    p.switch.delay_us.store(0, Ordering::SeqCst);
    let back = tokio::time::Instant::now();
    eventually(|| p.a.fails_fast(g).is_none()).await;
    assert!(tokio::time::Instant::now() <= back + PROBE_EVERY + late);
    drop(slots);
    let granted = p.a.acquire(g, 4, false, ACQUIRE_DEADLINE).await;
    assert!(matches!(granted, Acquired::Lease(_)), "{granted:?}");
    assert_eq!(acquires(), 2);
    // A refused call opens it at once too, and the ring moving the owner's buckets (the
    // owner leaving) forgets it.
    p.switch.up.store(false, Ordering::SeqCst);
    let a = p.a.acquire(h, 1, false, ACQUIRE_DEADLINE).await;
    assert!(matches!(a, Acquired::FailOpen { .. }), "{a:?}");
    assert!(p.a.fails_fast(h).is_some());
    p._members.send_replace(Members {
        live: Arc::new(vec![member("a")]),
        strangers: Arc::default(),
        twins: Arc::default(),
    });
    eventually(|| p.a.owner_of(h).is_some_and(|m| m.node_id == "a")).await;
    assert!(p.a.fails_fast(h).is_none());
    drop((granted, a));
}

#[tokio::test(start_paused = true)]
async fn test_room_freed_while_the_owner_cannot_be_asked_goes_to_parked_requests() {
    let p = pair();
    let g = &p.buckets[0];
    let sink = Arc::new(Parked {
        parked: Mutex::new(0),
        offered: AtomicU64::new(0),
        failed_open: AtomicU64::new(0),
        coordinator: OnceLock::new(),
        taken: Mutex::new(Vec::new()),
    });
    let _ = sink.coordinator.set(Arc::downgrade(&p.a));
    p.a.set_sink(sink.clone());
    let handed = || sink.failed_open.load(Ordering::SeqCst);
    // The owner is down: two requests fail open and take the allowance (shared_limit 2); three
    // more park.
    let mut running = Vec::new();
    for _ in 0..2 {
        match p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await {
            Acquired::FailOpen { lease, .. } => running.push(lease),
            other => panic!("expected a fail-open admission, got {other:?}"),
        }
    }
    *sink.parked.lock() = 3;
    // K17: each slot that ends hands its room to a parked request, at once (no backstop),
    // within K1.
    for n in 1..=2 {
        drop(running.pop());
        eventually(|| handed() == n).await;
        assert_eq!(p.a.held_for(g), 2);
    }
    assert_eq!(*sink.parked.lock(), 1);
    let first = sink.taken.lock().remove(0);
    drop(first);
    eventually(|| handed() == 3).await;
    assert_eq!(*sink.parked.lock(), 0);
    assert_eq!(p.a.stats.fail_open.load(Ordering::Relaxed), 5);
    // With nothing parked, room freed goes nowhere.
    let second = sink.taken.lock().remove(0);
    drop(second);
    assert_eq!(p.a.held_for(g), 1);
    // Once the owner answers again, freed room is its to push: nothing is handed.
    owner_back(&p).await;
    *sink.parked.lock() = 1;
    let last = sink.taken.lock().remove(0);
    drop(last);
    tokio::time::advance(PROBE_EVERY).await;
    assert_eq!(handed(), 3);
    assert_eq!(p.a.held_for(g), 0);
}

#[tokio::test(start_paused = true)]
async fn test_the_owner_parked_requests_wait_on_is_watched_and_its_death_fails_them_open() {
    use futures::FutureExt;
    let p = pair();
    let g = &p.buckets[0];
    let sink = Arc::new(Parked {
        parked: Mutex::new(0),
        offered: AtomicU64::new(0),
        failed_open: AtomicU64::new(0),
        coordinator: OnceLock::new(),
        taken: Mutex::new(Vec::new()),
    });
    let _ = sink.coordinator.set(Arc::downgrade(&p.a));
    p.a.set_sink(sink.clone());
    let probes = || p.switch.probes.load(Ordering::SeqCst);
    let acquires = || p.switch.acquires.load(Ordering::SeqCst);
    p.switch.up.store(true, Ordering::SeqCst);
    // Node c holds the bucket's only slot: a's request parks (enqueue-first), and its ask
    // registers a as the owner's waiter. Nothing of a's runs on the bucket: no call of a's
    // is out to the owner, and none is due.
    let SharedReply::Granted { .. } = p.b.owner.acquire("c", g, 1, false, 0) else {
        panic!("room for c");
    };
    *sink.parked.lock() = 1;
    let denied = p.a.acquire(g, 1, true, ACQUIRE_DEADLINE).await;
    assert!(
        matches!(
            denied,
            Acquired::Denied {
                registered: true,
                ..
            }
        ),
        "{denied:?}"
    );
    assert!(p.a.owners_changed().now_or_never().is_none());
    // K18: while the request is parked, its owner is probed every PROBE_EVERY: five probes
    // within five periods of the paused clock.
    let watched = tokio::time::Instant::now();
    eventually(|| probes() >= 5).await;
    assert!(
        tokio::time::Instant::now() <= watched + PROBE_EVERY * 5,
        "{} probes",
        probes()
    );
    assert_eq!(acquires(), 1);
    assert!(p.a.fails_fast(g).is_none());
    // The owner dies. No request asks it, yet within a probe period its breaker opens and the
    // backstop is woken (K16), without waiting for the backstop's own period.
    p.switch.up.store(false, Ordering::SeqCst);
    let died = tokio::time::Instant::now();
    eventually(|| p.a.fails_fast(g).is_some()).await;
    assert!(tokio::time::Instant::now() <= died + PROBE_EVERY);
    assert_eq!(acquires(), 1, "it was a probe that failed, not an ask");
    assert!(p.a.owners_changed().now_or_never().is_some());
    // The backstop's ask fails the parked request open at once, without a call.
    let slot = p.a.acquire(g, 1, true, ACQUIRE_DEADLINE).await;
    assert!(matches!(slot, Acquired::FailOpen { .. }), "{slot:?}");
    assert_eq!(acquires(), 1);
    *sink.parked.lock() = 0;
    // Once the owner answers a probe again and nothing is parked, it is not probed any more.
    owner_back(&p).await;
    let before = probes();
    // An absence, so a span of the paused clock rather than a condition to poll for: five
    // probe periods, which cost no wall time.
    tokio::time::sleep(PROBE_EVERY * 5).await;
    assert_eq!(probes(), before);
    drop(slot);
}

/// Takes offers for up to `parked` requests; counts what it was offered.
struct Parked {
    parked: Mutex<u64>,
    offered: AtomicU64,
    /// Fail-open slots handed to it (K17), also counted in `offered`.
    failed_open: AtomicU64,
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

    fn num_parked(&self, _bucket: &str) -> u64 {
        *self.parked.lock()
    }

    fn fail_open(&self, bucket: &str, token: u64) -> bool {
        self.failed_open.fetch_add(1, Ordering::SeqCst);
        self.offer(bucket, token).used
    }
}

#[tokio::test(start_paused = true)]
async fn test_a_duplicate_offer_gets_the_first_answer_and_runs_nothing() {
    let p = pair();
    let g = &p.buckets[0];
    let sink = Arc::new(Parked {
        parked: Mutex::new(1),
        offered: AtomicU64::new(0),
        failed_open: AtomicU64::new(0),
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

/// A lease of `bucket` under `limit`, granted or reused.
async fn lease(p: &Pair, bucket: &str, limit: u64) -> SharedLease {
    match p.a.acquire(bucket, limit, false, ACQUIRE_DEADLINE).await {
        Acquired::Lease(l) => l,
        other => panic!("expected a lease, got {other:?}"),
    }
}

/// K8: every lease that went idle (a request ended on it, or it came in a batch) is reused,
/// released, lost or still idle.
fn assert_idle_adds_up(c: &Coordinator) {
    let s = &c.stats;
    let cached = s.cached.load(Ordering::Relaxed) + s.prefetched.load(Ordering::Relaxed);
    let out = s.reused.load(Ordering::Relaxed)
        + s.idle_released.load(Ordering::Relaxed)
        + s.idle_lost.load(Ordering::Relaxed)
        + c.num_idle();
    assert_eq!(cached, out, "cached {cached}, accounted for {out}");
}

#[tokio::test(start_paused = true)]
async fn test_an_idle_lease_is_reused_by_one_request_at_a_time() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    let first = lease(&p, g, 64).await;
    assert!(!first.is_reused());
    let id = p.a.lease_of(first.token()).expect("a lease");
    drop(first);
    // Idle here, still counted by the owner and in this node's allowance (K1).
    assert_eq!(p.a.num_idle(), 1);
    assert_eq!(p.a.held_for(g), 1);
    assert_eq!(p.b.owner.in_use(g), 1);
    // The next request takes it without a call; the one after it gets a new lease.
    let second = lease(&p, g, 64).await;
    assert!(second.is_reused());
    assert_eq!(p.a.lease_of(second.token()), Some(id.clone()));
    assert_eq!(p.a.num_idle(), 0);
    let third = lease(&p, g, 64).await;
    assert!(!third.is_reused());
    assert_ne!(p.a.lease_of(third.token()), Some(id.clone()));
    // With one request running, the call asked for a batch of one more (K10), now idle.
    assert_eq!(p.b.owner.in_use(g), 3);
    assert_eq!(p.a.held_for(g), 3);
    assert_eq!(p.a.num_idle(), 1);
    // A duplicate of the offer of an idle lease is answered "used" (K5).
    drop(second);
    assert_eq!(
        p.a.handle_offer(&id.0, g, id.1, 64),
        SharedReply::OfferAnswer {
            used: true,
            more_waiting: false
        }
    );
    drop(third);
    assert_eq!(p.a.num_idle(), 3);
    let s = &p.a.stats;
    assert_eq!(s.acquired.load(Ordering::Relaxed), 3);
    assert_eq!(s.reused.load(Ordering::Relaxed), 1);
    assert_eq!(s.cached.load(Ordering::Relaxed), 3);
    assert_eq!(s.prefetched.load(Ordering::Relaxed), 1);
    assert_idle_adds_up(&p.a);
    // Both go back to the owner once their window ends.
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_eq!((p.a.num_idle(), p.a.held_for(g)), (0, 0));
    assert_idle_adds_up(&p.a);
}

#[tokio::test(start_paused = true)]
async fn test_an_idle_lease_is_released_when_its_window_ends_and_never_reused_after() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    let first = lease(&p, g, 64).await;
    let id = p.a.lease_of(first.token());
    drop(first);
    assert_eq!(p.a.num_idle(), 1);
    // At the end of its window it is not handed out, even before the expiry task ran.
    tokio::time::advance(REUSE_WINDOW).await;
    let next = lease(&p, g, 64).await;
    assert!(!next.is_reused());
    assert_ne!(p.a.lease_of(next.token()), id);
    eventually(|| p.a.num_idle() == 0 && p.b.owner.in_use(g) == 1).await;
    // A lease whose request outlived the window is released at its end, not cached.
    tokio::time::advance(REUSE_WINDOW).await;
    drop(next);
    assert_eq!(p.a.num_idle(), 0);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    // An idle lease nobody takes is released by the expiry task within its window.
    let idle = lease(&p, g, 64).await;
    drop(idle);
    assert_eq!(p.a.num_idle(), 1);
    let went_idle = tokio::time::Instant::now();
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert!(tokio::time::Instant::now() <= went_idle + REUSE_WINDOW + Duration::from_millis(2));
    assert_eq!(p.a.held_for(g), 0);
    assert_eq!(p.a.stats.idle_released.load(Ordering::Relaxed), 2);
    assert_idle_adds_up(&p.a);
    // The window counts from the grant, not from when the lease went idle: a lease whose
    // request ran 30 ms and then idled 30 ms is past it.
    let ran = lease(&p, g, 64).await;
    let id = p.a.lease_of(ran.token());
    tokio::time::advance(Duration::from_millis(30)).await;
    drop(ran);
    assert_eq!(p.a.num_idle(), 1);
    tokio::time::advance(Duration::from_millis(30)).await;
    let after = lease(&p, g, 64).await;
    assert!(!after.is_reused());
    assert_ne!(p.a.lease_of(after.token()), id);
    drop(after);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_idle_adds_up(&p.a);
}

#[tokio::test(start_paused = true)]
async fn test_a_lease_whose_bucket_has_parked_requests_is_released_not_cached() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    let sink = Arc::new(Parked {
        parked: Mutex::new(1),
        offered: AtomicU64::new(0),
        failed_open: AtomicU64::new(0),
        coordinator: OnceLock::new(),
        taken: Mutex::new(Vec::new()),
    });
    p.a.set_sink(sink.clone());
    // Contended (a request parked here): back to the owner, whose round robin decides.
    drop(lease(&p, g, 64).await);
    assert_eq!(p.a.num_idle(), 0);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    *sink.parked.lock() = 0;
    // A pool below IDLE_SHARE caches nothing; one of IDLE_SHARE keeps one idle lease.
    drop(lease(&p, g, IDLE_SHARE - 1).await);
    assert_eq!(p.a.num_idle(), 0);
    let (x, y) = (
        lease(&p, g, IDLE_SHARE).await,
        lease(&p, g, IDLE_SHARE).await,
    );
    drop(x);
    drop(y);
    assert_eq!(p.a.num_idle(), 1);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    // A lowered limit sheds idle leases before one is reused (K1).
    let held: Vec<SharedLease> = futures_held(&p, g, 3 * IDLE_SHARE, 3).await;
    drop(held);
    assert_eq!(p.a.num_idle(), 3);
    let again = lease(&p, g, 2).await;
    assert!(again.is_reused());
    assert_eq!(p.a.held_for(g), 2, "one running, one idle: the limit of 2");
    assert_eq!(p.a.num_idle(), 1);
    drop(again);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_idle_adds_up(&p.a);
}

/// `n` leases of `bucket` held at once.
async fn futures_held(p: &Pair, bucket: &str, limit: u64, n: usize) -> Vec<SharedLease> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(lease(p, bucket, limit).await);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn test_idle_leases_of_a_moved_bucket_are_released_and_shutdown_releases_the_rest() {
    let p = pair();
    let (g, h) = (&p.buckets[0], &p.buckets[1]);
    p.switch.up.store(true, Ordering::SeqCst);
    drop(lease(&p, g, 64).await);
    drop(lease(&p, h, 64).await);
    assert_eq!(p.a.num_idle(), 2);
    // The node stops: its idle leases go back to the owner before it answers, and a
    // request that ends afterwards releases its lease.
    let running = lease(&p, g, 64).await;
    assert!(running.is_reused());
    p.a.release_idle().await;
    assert_eq!(p.a.num_idle(), 0);
    assert_eq!((p.b.owner.in_use(g), p.b.owner.in_use(h)), (1, 0));
    drop(running);
    assert_eq!(p.a.num_idle(), 0);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_idle_adds_up(&p.a);

    // On another pair: b leaves the ring, its buckets move to a. The idle lease of b is
    // released (K7), and the next request asks the bucket's new owner.
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    drop(lease(&p, g, 64).await);
    assert_eq!(p.a.num_idle(), 1);
    p._members.send_replace(Members {
        live: Arc::new(vec![member("a")]),
        strangers: Arc::default(),
        twins: Arc::default(),
    });
    eventually(|| p.a.num_idle() == 0).await;
    assert_eq!(p.a.stats.idle_released.load(Ordering::Relaxed), 1);
    let moved = lease(&p, g, 64).await;
    assert!(!moved.is_reused());
    assert_eq!(
        p.a.lease_of(moved.token()).map(|(o, _)| o),
        Some(Arc::from("a"))
    );
    assert_idle_adds_up(&p.a);
}

#[tokio::test(start_paused = true)]
async fn test_a_batch_fills_the_idle_cache_and_runs_the_next_requests_without_a_call() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    // Eight requests arrive one after another and keep running: each call asks for as many
    // extra leases as requests run here (K10), so calls double the leases: 1, 1 + 1, 3 + 3,
    // 7 + 7: four calls for eight requests, the rest from the idle cache.
    let running = futures_held(&p, g, 1_000, 8).await;
    let s = &p.a.stats;
    assert_eq!(p.switch.acquires.load(Ordering::SeqCst), 4);
    assert_eq!(s.prefetched.load(Ordering::Relaxed), 1 + 3 + 7);
    assert_eq!(s.reused.load(Ordering::Relaxed), 4);
    assert_eq!(running.iter().filter(|l| l.is_reused()).count(), 4);
    assert_eq!(p.a.num_idle(), 7);
    // Every one is a lease the owner counts, within the node's allowance (K1).
    assert_eq!(p.b.owner.in_use(g), 15);
    assert_eq!(p.a.held_for(g), 15);
    // They end: fifteen idle leases serve the next fifteen requests without a call.
    drop(running);
    assert_eq!(p.a.num_idle(), 15);
    let again = futures_held(&p, g, 1_000, 15).await;
    assert_eq!(p.switch.acquires.load(Ordering::SeqCst), 4);
    assert!(again.iter().all(SharedLease::is_reused));
    drop(again);
    assert_idle_adds_up(&p.a);
    // A lone request asks for its own lease only.
    eventually(|| p.b.owner.in_use(g) == 0).await;
    drop(lease(&p, g, 1_000).await);
    assert_eq!(p.b.owner.in_use(g), 1);
    assert_eq!(s.prefetched.load(Ordering::Relaxed), 11);
    // Nothing is left with the owner once the windows end (K7, K8).
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_eq!((p.a.num_idle(), p.a.held_for(g)), (0, 0));
    assert_idle_adds_up(&p.a);
}

#[tokio::test(start_paused = true)]
async fn test_a_batch_beyond_the_caches_room_is_released() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    let limit = 2 * IDLE_SHARE;
    let running = lease(&p, g, limit).await;
    // Five leases for node a's cache, which keeps two of this bucket (K9): as when other
    // requests' leases went idle while the call was out.
    let SharedReply::Granted { lease, extra, .. } = p.b.owner.acquire("a", g, limit, false, 4)
    else {
        panic!("room for a grant");
    };
    assert_eq!(extra.len(), 4);
    assert_eq!(p.b.owner.in_use(g), 6);
    let mut batch = extra;
    batch.push(lease);
    p.a.stash(&Arc::from(g.as_str()), &Arc::from("b"), batch);
    assert_eq!(p.a.num_idle(), 2);
    assert_eq!(p.a.held_for(g), 3);
    assert_eq!(p.a.stats.prefetched.load(Ordering::Relaxed), 2);
    // The three it could not keep go back to the owner at once; the two kept, at the end of
    // their window.
    eventually(|| p.b.owner.in_use(g) == 3).await;
    drop(running);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_eq!((p.a.num_idle(), p.a.held_for(g)), (0, 0));
    assert_idle_adds_up(&p.a);
}

#[tokio::test(start_paused = true)]
async fn test_a_batch_restarts_the_window_of_the_buckets_other_leases() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    let long = lease(&p, g, 1_000).await;
    let long_id = p.a.lease_of(long.token());
    tokio::time::advance(Duration::from_millis(40)).await;
    // A second request: one running, so the call brings a batch of one, and with it the word
    // that no waiter was owed room: the running lease's window starts again (K10).
    let second = lease(&p, g, 1_000).await;
    assert_eq!(p.a.stats.prefetched.load(Ordering::Relaxed), 1);
    tokio::time::advance(Duration::from_millis(20)).await;
    // 60 ms after its grant, 20 ms after the batch: the long request's lease is kept.
    drop(long);
    assert_eq!(p.a.num_idle(), 2);
    let next = lease(&p, g, 1_000).await;
    assert!(next.is_reused());
    let ids = [p.a.lease_of(next.token())];
    drop(next);
    drop(second);
    // Without a batch nothing restarts: 50 ms after the batch every idle lease goes back.
    tokio::time::advance(Duration::from_millis(30)).await;
    let after = lease(&p, g, 1_000).await;
    assert!(!after.is_reused());
    assert_ne!([p.a.lease_of(after.token())], ids);
    assert_ne!(p.a.lease_of(after.token()), long_id);
    drop(after);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_idle_adds_up(&p.a);
}

/// Makes `bucket` hot on node a: a lease idle after its request, then reused (K11 asks the
/// owner about such buckets); returns that lease, idle again.
async fn hot_idle_lease(p: &Pair, bucket: &str, limit: u64) -> Option<(Arc<str>, u64)> {
    drop(lease(p, bucket, limit).await);
    let reused = lease(p, bucket, limit).await;
    assert!(reused.is_reused());
    let id = p.a.lease_of(reused.token());
    drop(reused);
    id
}

/// Another node takes the rest of `bucket`'s pool (node a holds one lease) and waits for
/// more: the owner now owes room.
fn another_node_waits(p: &Pair, bucket: &str, limit: u64) {
    for _ in 1..limit {
        let SharedReply::Granted { .. } = p.b.owner.acquire("c", bucket, limit, false, 0) else {
            panic!("room for c");
        };
    }
    let SharedReply::Denied {
        waiter_registered: true,
        ..
    } = p.b.owner.acquire("c", bucket, limit, true, 0)
    else {
        panic!("c waits");
    };
}

#[tokio::test(start_paused = true)]
async fn test_a_reused_buckets_windows_are_extended_while_its_owner_has_unowed_room() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    let limit = IDLE_SHARE;
    // One lease, idle after its request, then reused: the bucket is hot.
    let id = hot_idle_lease(&p, g, limit).await;
    // Past the end of its first window: the owner had room nobody was owed, so the window
    // started again shortly before it ended (K11), and the lease still serves.
    tokio::time::advance(REUSE_WINDOW - EXTEND_AHEAD / 2).await;
    eventually(|| p.a.stats.extended.load(Ordering::Relaxed) == 1).await;
    tokio::time::advance(EXTEND_AHEAD).await;
    let again = lease(&p, g, limit).await;
    assert!(again.is_reused());
    assert_eq!(p.a.lease_of(again.token()), id);
    drop(again);
    // Another node takes the rest of the pool and waits for more: the owner now owes room, so
    // the window ends and the lease goes back (to the waiter, by the owner's offer).
    another_node_waits(&p, g, limit);
    eventually(|| p.a.num_idle() == 0).await;
    assert_eq!(p.a.stats.extended.load(Ordering::Relaxed), 1);
    assert_eq!(p.a.held_for(g), 0);
    assert_idle_adds_up(&p.a);
    // Not reused: its lease goes at the end of the window, no question asked.
    let q = pair();
    let h = &q.buckets[0];
    q.switch.up.store(true, Ordering::SeqCst);
    drop(lease(&q, h, limit).await);
    eventually(|| q.b.owner.in_use(h) == 0).await;
    assert_eq!(q.a.stats.extended.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn test_a_running_lease_of_a_reused_bucket_has_its_window_extended_too() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    drop(lease(&p, g, IDLE_SHARE).await);
    // Taken from the cache and still running when its window ends: nothing is idle, but the
    // owner is asked for the running lease's bucket all the same (K11).
    let running = lease(&p, g, IDLE_SHARE).await;
    assert!(running.is_reused());
    tokio::time::advance(REUSE_WINDOW - EXTEND_AHEAD / 2).await;
    eventually(|| p.a.stats.extended.load(Ordering::Relaxed) == 1).await;
    tokio::time::advance(EXTEND_AHEAD).await;
    // Past its first window: it goes idle for the next request instead of back to the owner.
    drop(running);
    assert_eq!(p.a.num_idle(), 1);
    assert_eq!(p.b.owner.in_use(g), 1);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_idle_adds_up(&p.a);
}

/// The ids of `bucket`'s idle leases on `c`.
fn idle_of(c: &Coordinator, bucket: &str) -> Vec<u64> {
    c.idle_leases()
        .into_iter()
        .filter(|(b, _, _)| **b == *bucket)
        .map(|(_, _, l)| l)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn test_an_idle_lease_whose_window_ends_while_its_owner_is_asked_waits_for_the_answer() {
    // `free`: whether the owner has room nobody is owed when asked.
    for free in [true, false] {
        let p = pair();
        let g = &p.buckets[0];
        p.switch.up.store(true, Ordering::SeqCst);
        let limit = IDLE_SHARE;
        let (_, id) = hot_idle_lease(&p, g, limit).await.expect("a lease");
        if !free {
            another_node_waits(&p, g, limit);
        }
        // The owner answers the room call, sent EXTEND_AHEAD before the window ends, only a
        // REUSE_WINDOW later: after the end.
        p.switch
            .delay_us
            .store(REUSE_WINDOW.as_micros() as u64, Ordering::SeqCst);
        eventually(|| p.a.num_room_calls() == 1).await;
        p.switch.delay_us.store(0, Ordering::SeqCst);
        tokio::time::advance(EXTEND_AHEAD + REUSE_WINDOW / 5).await;
        // The expiry task has done what was due by now (the window's end among it).
        let now = tokio::time::Instant::now();
        eventually(|| p.a.next_expiry().is_none_or(|at| at > now)).await;
        // Past its window and the answer still out: kept, not released (K11) ...
        assert_eq!(p.a.num_room_calls(), 1);
        assert_eq!(idle_of(&p.a, g), vec![id]);
        // ... and not reused either (K7): a request asks the owner.
        if free {
            let acquires = p.switch.acquires.load(Ordering::SeqCst);
            let fresh = lease(&p, g, limit).await;
            assert!(!fresh.is_reused());
            assert_eq!(p.switch.acquires.load(Ordering::SeqCst), acquires + 1);
            assert!(idle_of(&p.a, g).contains(&id));
            drop(fresh);
        }
        eventually(|| p.a.num_room_calls() == 0).await;
        if free {
            // The answer restarted its window: it serves again.
            assert_eq!(p.a.stats.extended.load(Ordering::Relaxed), 1);
            assert!(idle_of(&p.a, g).contains(&id));
            let again = lease(&p, g, limit).await;
            assert!(again.is_reused());
        } else {
            // No room: it goes back once the answer says so.
            eventually(|| p.a.num_idle() == 0).await;
            assert_eq!(p.a.stats.extended.load(Ordering::Relaxed), 0);
            assert_eq!(p.a.held_for(g), 0);
        }
        assert_idle_adds_up(&p.a);
    }
}

#[tokio::test(start_paused = true)]
async fn test_requests_that_miss_together_share_calls_and_their_batches() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    p.switch.delay_us.store(1_000, Ordering::SeqCst);
    // Twenty requests of an idle bucket at once: the first asks for its own lease (it saw no
    // other); the rest wait for its call, then one asks for all of them (K12): two calls.
    let all = futures::future::join_all((0..20).map(|_| lease(&p, g, 1_000))).await;
    assert_eq!(p.switch.acquires.load(Ordering::SeqCst), 2);
    assert_eq!(all.iter().filter(|l| l.is_reused()).count(), 18);
    // The second call asked for the one running as well (a batch doubles what runs): one
    // lease is left idle.
    assert_eq!(p.b.owner.in_use(g), 21);
    assert_eq!(p.a.num_idle(), 1);
    drop(all);
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert_idle_adds_up(&p.a);
    let st = p.a.state.lock();
    assert!(st.asking.is_empty() && st.wanting.is_empty());
}

#[tokio::test(start_paused = true)]
async fn test_a_request_waiting_for_a_call_whose_request_is_gone_asks_itself() {
    let p = Arc::new(pair());
    let g = p.buckets[0].clone();
    p.switch.up.store(true, Ordering::SeqCst);
    p.switch.delay_us.store(1_000, Ordering::SeqCst);
    let (pa, ga) = (p.clone(), g.clone());
    let first = tokio::spawn(async move { drop(lease(&pa, &ga, 1_000).await) });
    tokio::time::advance(Duration::from_micros(100)).await;
    let (pb, gb) = (p.clone(), g.clone());
    let second = tokio::spawn(async move { lease(&pb, &gb, 1_000).await.is_reused() });
    tokio::time::advance(Duration::from_micros(100)).await;
    // The request whose call the second waits for goes away before the owner answers: the
    // second is woken and asks the owner itself (K12), well within its deadline.
    first.abort();
    assert!(!second.await.expect("the second request gets a lease"));
    assert_eq!(p.switch.acquires.load(Ordering::SeqCst), 2);
    // The first's call was out: the owner granted it too, and that grant, which nobody took,
    // goes back as its answer arrives (K14). The second's lease is the one left.
    eventually(|| p.b.owner.in_use(&g) == 1).await;
}

#[tokio::test(start_paused = true)]
async fn test_a_release_the_owner_missed_reaches_it_when_it_answers_again() {
    let p = pair();
    let g = &p.buckets[0];
    p.switch.up.store(true, Ordering::SeqCst);
    let held = lease(&p, g, 2).await;
    // Past its window: its end releases it rather than keeping it idle.
    tokio::time::advance(REUSE_WINDOW).await;
    assert_eq!(p.b.owner.in_use(g), 1);
    // The owner stops answering; the request ends; the release does not reach it.
    p.switch.up.store(false, Ordering::SeqCst);
    drop(held);
    eventually(|| p.switch.releases.load(Ordering::SeqCst) >= 1).await;
    assert_eq!(p.b.owner.in_use(g), 1);
    // The owner answers again: it gets its slot back within a retry, long before its sweep
    // would have reclaimed it (LEASE_TTL), and a second release of it is never sent.
    p.switch.up.store(true, Ordering::SeqCst);
    let back = tokio::time::Instant::now();
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert!(tokio::time::Instant::now() <= back + RELEASE_RETRY + Duration::from_millis(2));
    let tried = p.switch.releases.load(Ordering::SeqCst);
    tokio::time::advance(RELEASE_RETRY * 4).await;
    assert_eq!(p.switch.releases.load(Ordering::SeqCst), tried);
    assert_eq!(p.b.owner.inspect(|pool| pool.num_violations()), 0);
}

#[tokio::test(start_paused = true)]
async fn test_an_owner_cut_off_for_long_is_failed_open_toward_only_up_to_a_share() {
    let p = pair();
    let g = &p.buckets[0];
    // b stays in the membership (a, b, c) but a's calls do not reach it: its breaker opens at
    // the first request, and a fails open up to the whole limit (K1).
    let limit = 6;
    let mut slots = Vec::new();
    for _ in 0..limit {
        match p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await {
            Acquired::FailOpen { lease, .. } => slots.push(lease),
            other => panic!("expected to fail open, got {other:?}"),
        }
    }
    let refused = p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await;
    assert!(
        matches!(refused, Acquired::Unavailable { allowance: 6, .. }),
        "{refused:?}"
    );
    slots.clear();
    // Still cut off after CUT_OFF_AFTER: only its share, 6 over 3 live nodes.
    tokio::time::advance(CUT_OFF_AFTER).await;
    for _ in 0..2 {
        match p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await {
            Acquired::FailOpen { lease, .. } => slots.push(lease),
            other => panic!("expected to fail open, got {other:?}"),
        }
    }
    match p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await {
        Acquired::Unavailable { allowance, reason } => {
            assert_eq!(allowance, 2);
            assert!(
                reason.contains("its share of the limit, 2 of 6"),
                "{reason}"
            );
        }
        other => panic!("expected its share to be used up, got {other:?}"),
    }
    // A limit below the live nodes keeps one.
    let h = &p.buckets[1];
    let one = p.a.acquire(h, 2, false, ACQUIRE_DEADLINE).await;
    assert!(matches!(one, Acquired::FailOpen { .. }), "{one:?}");
    let none = p.a.acquire(h, 2, false, ACQUIRE_DEADLINE).await;
    assert!(
        matches!(none, Acquired::Unavailable { allowance: 1, .. }),
        "{none:?}"
    );
    drop((one, none));
    // b answers a probe again: the whole limit is back, through b.
    slots.clear();
    owner_back(&p).await;
    let lease = p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await;
    assert!(matches!(lease, Acquired::Lease(_)), "{lease:?}");
}

#[tokio::test(start_paused = true)]
async fn test_an_owner_on_a_flapping_link_is_cut_off_though_its_breaker_closes_now_and_then() {
    let p = pair();
    let g = &p.buckets[0];
    let limit = 6;
    let fails_open = |a: &Acquired| matches!(a, Acquired::FailOpen { .. });
    // b's calls fail: the first request fails open and opens its breaker.
    let first = p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await;
    assert!(fails_open(&first), "{first:?}");
    drop(first);
    // For longer than CUT_OFF_AFTER, b answers a probe now and then (its breaker closes), and
    // its next call fails again (it reopens): a link that drops most of what crosses it.
    for _ in 0..4 {
        tokio::time::advance(CUT_OFF_AFTER / 4).await;
        owner_back(&p).await;
        p.switch.up.store(false, Ordering::SeqCst);
        let again = p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await;
        assert!(fails_open(&again), "{again:?}");
    }
    // Cut off, its closes too short to count: its share, 6 over 3 live nodes, whether the
    // breaker stops the request or a call fails.
    let mut slots = Vec::new();
    for _ in 0..2 {
        match p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await {
            Acquired::FailOpen { lease, .. } => slots.push(lease),
            other => panic!("expected to fail open, got {other:?}"),
        }
    }
    let refused = p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await;
    assert!(
        matches!(refused, Acquired::Unavailable { allowance: 2, .. }),
        "{refused:?}"
    );
    owner_back(&p).await;
    p.switch.up.store(false, Ordering::SeqCst);
    match p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await {
        Acquired::Unavailable { allowance, reason } => {
            assert_eq!(allowance, 2);
            assert!(reason.contains("its share of the limit"), "{reason}");
        }
        other => panic!("expected its share to be used up, got {other:?}"),
    }
    slots.clear();
    // b answers steadily for CUT_OFF_AFTER: the trouble is over, the whole limit is back.
    owner_back(&p).await;
    tokio::time::advance(CUT_OFF_AFTER).await;
    p.switch.up.store(false, Ordering::SeqCst);
    let mut whole = Vec::new();
    for _ in 0..limit {
        let a = p.a.acquire(g, limit, false, ACQUIRE_DEADLINE).await;
        assert!(fails_open(&a), "{a:?}");
        whole.push(a);
    }
}

/// With the owner up but every call taking `late`, a request of b's first bucket (limit 2)
/// that fails open at its deadline: its slot.
async fn fail_open_with_calls_taking(p: &Pair, late: Duration) -> SharedLease {
    p.switch.up.store(true, Ordering::SeqCst);
    p.switch
        .delay_us
        .store(late.as_micros() as u64, Ordering::SeqCst);
    match p.a.acquire(&p.buckets[0], 2, false, ACQUIRE_DEADLINE).await {
        Acquired::FailOpen { lease, .. } => lease,
        other => panic!("expected to fail open, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn test_a_grant_that_comes_after_the_deadline_is_released() {
    let p = pair();
    let g = &p.buckets[0];
    // The owner answers late (paused, or working through a backlog): the request fails open
    // at its deadline.
    let late = ACQUIRE_DEADLINE * 5;
    let slot = fail_open_with_calls_taking(&p, late).await;
    // The owner grants when the call reaches it; nobody runs on that lease, and it goes back
    // as soon as its answer arrives, not at the owner's TTL sweep.
    eventually(|| p.b.owner.in_use(g) == 1).await;
    let granted = tokio::time::Instant::now();
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert!(tokio::time::Instant::now() <= granted + late * 2 + Duration::from_millis(5));
    assert_eq!(
        p.a.held_for(g),
        1,
        "the fail-open slot is still the request's"
    );
    drop(slot);
    assert_eq!(p.a.held_for(g), 0);
}

#[tokio::test(start_paused = true)]
async fn test_a_grant_delivered_after_a_long_partition_is_released() {
    let p = pair();
    let g = &p.buckets[0];
    // The acquire reaches the owner only when a partition longer than a lease's TTL heals,
    // from the connection's buffers: the request has long failed open.
    let late = LEASE_TTL + Duration::from_secs(10);
    let slot = fail_open_with_calls_taking(&p, late).await;
    tokio::time::sleep(late - Duration::from_secs(2)).await;
    // The network heals (calls take a second now); the acquire still reaches the owner when
    // its delay is over, and the owner grants it. The call still listens, takes the grant,
    // and gives it back at once (its release taking the network's second), not at the
    // owner's TTL sweep 30 s later.
    let healed = Duration::from_secs(1);
    p.switch
        .delay_us
        .store(healed.as_micros() as u64, Ordering::SeqCst);
    eventually(|| p.b.owner.in_use(g) == 1).await;
    let granted = tokio::time::Instant::now();
    eventually(|| p.b.owner.in_use(g) == 0).await;
    assert!(
        tokio::time::Instant::now() <= granted + healed + Duration::from_millis(5),
        "a grant nobody holds stayed counted"
    );
    assert_eq!(p.a.held_for(g), 1, "the fail-open slot is the request's");
    drop(slot);
    assert_eq!(p.a.held_for(g), 0);
}

/// Carries node a's shared calls to the tiers of b and c; a call to a paused node waits until
/// it resumes (SIGSTOP: the bytes wait in its socket), or fails at its deadline.
struct Net {
    tiers: OnceLock<BTreeMap<String, Arc<SharedTier>>>,
    paused: Mutex<BTreeSet<String>>,
    resumed: Notify,
    /// Release calls sent, per node.
    releases: Mutex<BTreeMap<String, u64>>,
}

impl Transport for Net {
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
        deadline: Duration,
    ) -> BoxFuture<'_, Result<SharedReply, RpcError>> {
        let node = to.node_id.clone();
        if matches!(call, SharedCall::Release { .. }) {
            *self.releases.lock().entry(node.clone()).or_default() += 1;
        }
        Box::pin(async move {
            let until = tokio::time::Instant::now() + deadline;
            loop {
                let resumed = self.resumed.notified();
                if !self.paused.lock().contains(&node) {
                    break;
                }
                if tokio::time::timeout_at(until, resumed).await.is_err() {
                    return Err(RpcError::DeadlineExceeded { node, deadline });
                }
            }
            match self.tiers.get().and_then(|t| t.get(&node)) {
                Some(tier) => Ok(tier.shared("a", call).await),
                None => Err(RpcError::Unreachable {
                    node,
                    addr: "test".into(),
                    reason: "not in this test".into(),
                }),
            }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn test_an_owner_that_does_not_answer_holds_back_no_release_to_another() {
    let (_members, rx) = watch::channel(Members {
        live: Arc::new(vec![member("a"), member("b"), member("c")]),
        strangers: Arc::default(),
        twins: Arc::default(),
    });
    let stop = CancellationToken::new();
    let clock: Arc<dyn crate::clock::Clock> = Arc::new(SystemClock::new());
    let net = Arc::new(Net {
        tiers: OnceLock::new(),
        paused: Mutex::new(BTreeSet::new()),
        resumed: Notify::new(),
        releases: Mutex::new(BTreeMap::new()),
    });
    let start = |me: &str| {
        let owner = Owner::start(
            Arc::from(me),
            OWNER_LIMITS,
            clock.clone(),
            net.clone(),
            rx.clone(),
            stop.clone(),
        );
        let c = Coordinator::start(
            Arc::from(me),
            net.clone(),
            owner.clone(),
            rx.clone(),
            stop.clone(),
        );
        owner.set_local(&c);
        Arc::new(SharedTier {
            owner,
            coordinator: c,
        })
    };
    let (a, b, c) = (start("a"), start("b"), start("c"));
    let tiers = BTreeMap::from([("b".to_string(), b.clone()), ("c".to_string(), c.clone())]);
    let _ = net.tiers.set(tiers);
    let owned_by = |node: &str| {
        (0..100)
            .map(|i| format!("g\0user-{i}"))
            .find(|k| a.coordinator.owner_of(k).is_some_and(|m| m.node_id == node))
            .expect("each node owns some of 100 buckets")
    };
    let (gb, gc) = (owned_by("b"), owned_by("c"));
    let mut leases = Vec::new();
    for g in [&gb, &gc] {
        // A pool of 2 keeps no idle lease (IDLE_SHARE): a request's end releases its lease.
        match a.coordinator.acquire(g, 2, false, ACQUIRE_DEADLINE).await {
            Acquired::Lease(l) => leases.push(l),
            other => panic!("expected a lease, got {other:?}"),
        }
    }
    let on_c = leases.pop().expect("c's lease");
    let on_b = leases.pop().expect("b's lease");
    // c stops answering but stays in the membership (SIGSTOP, until DEAD_AFTER): the release
    // of its lease waits in a call to it.
    net.paused.lock().insert("c".into());
    drop(on_c);
    eventually(|| net.releases.lock().get("c").is_some_and(|n| *n >= 1)).await;
    // b's lease is released at once, not after c's call gives up (CALL_DEADLINE).
    let ended = tokio::time::Instant::now();
    drop(on_b);
    eventually(|| b.owner.in_use(&gb) == 0).await;
    assert!(
        tokio::time::Instant::now() <= ended + Duration::from_millis(2),
        "b got its slot back {:?} after the request ended",
        tokio::time::Instant::now() - ended
    );
    assert_eq!(c.owner.in_use(&gc), 1);
    // c resumes and reads the release that waited for it.
    net.paused.lock().remove("c");
    net.resumed.notify_waiters();
    eventually(|| c.owner.in_use(&gc) == 0).await;
    assert_eq!(net.releases.lock().get("c"), Some(&1));
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn test_slots_by_bucket_tells_leases_idle_leases_and_fail_open_slots_apart() {
    let p = pair();
    let (g, h) = (&p.buckets[0], &p.buckets[1]);
    assert!(p.a.slots_by_bucket().is_empty());
    // The owner is lost: a fail-open slot of g.
    let open = match p.a.acquire(g, 2, false, ACQUIRE_DEADLINE).await {
        Acquired::FailOpen { lease, .. } => lease,
        other => panic!("expected a fail-open admission, got {other:?}"),
    };
    // The owner is back: two leases of h, one of them ended within its window (idle).
    owner_back(&p).await;
    let running = lease(&p, h, 64).await;
    let ended = lease(&p, h, 64).await;
    drop(ended);
    let idle = p.a.idle_for(h);
    assert!(idle >= 1, "the ended lease went idle");
    let slots: HashMap<String, BucketSlots> =
        p.a.slots_by_bucket()
            .into_iter()
            .map(|(b, s)| (b.to_string(), s))
            .collect();
    assert_eq!(
        slots[g.as_str()],
        BucketSlots {
            leases: 0,
            idle: 0,
            fail_open: 1
        }
    );
    assert_eq!(
        slots[h.as_str()],
        BucketSlots {
            leases: 1,
            idle,
            fail_open: 0
        }
    );
    // Together they are what K1 counts.
    for (b, s) in &slots {
        assert_eq!(p.a.held_for(b), s.leases + s.idle + s.fail_open, "{b}");
    }
    drop((open, running));
    assert!(!p.a.slots_by_bucket().iter().any(|(b, _)| **b == **g));
}
