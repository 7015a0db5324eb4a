//! Hand-off latency of the permit table's queue against tokio's `Semaphore`, measured the same
//! way in the same run: a permit is held, one waiter is parked (polled once, so its waker is
//! registered), the permit is dropped, and the time runs until the waiter's future returns
//! `Ready`. Also the memory each parked request costs.
//!
//! Two settings, each with per-hand-off samples (median and p99 printed before criterion's
//! own report):
//! - `same_thread`: release and poll on one thread; the cost of the structures alone (release,
//!   hand-off under the lock, the wake call, the poll that takes the permit).
//! - `cross_thread`: the waiter is another thread parked in `std::thread::park`, woken by a
//!   waker that unparks it; includes the operating system's wake-up, as a parked request's
//!   task would see on a runtime.
//!
//! `cargo bench -p sluice-core --bench handoff`; the percentile lines come first, then criterion.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::hint::black_box;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use criterion::Criterion;
use sluice_core::bags::ThrottleAttribute;
use sluice_core::bucket::BucketKey;
use sluice_core::permits::{
    Acquire, Grant, GroupQueue, MAX_PARKED_PER_GROUP, PermitTable, QueuePolicy, Waiter,
};
use tokio::sync::Semaphore;

/// Tracks live heap bytes (relaxed: read on one thread between operations).
struct CountingAllocator;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Hand-offs sampled per setting for the percentiles, after as many for warm-up (same-thread)
/// or a tenth as many (cross-thread, each one a thread wake-up).
const SAMPLES: usize = 100_000;

/// Cross-thread samples: each costs two thread wake-ups, so fewer.
const CROSS_SAMPLES: usize = 20_000;

/// Parked requests for the memory figure: the production group ceiling.
const PARKED_FOR_MEMORY: usize = 10_000;

fn key() -> BucketKey {
    BucketKey {
        group_id: Arc::from("analytics-0123456789abcdef"),
        attribute: ThrottleAttribute::Group,
        value: None,
    }
}

/// Wakes a thread parked in `std::thread::park`.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker that does nothing but is not `Waker::noop` (so `will_wake` does not short-cut
/// differently for the two candidates).
struct Nothing;

impl Wake for Nothing {
    fn wake(self: Arc<Self>) {}
}

/// The permit table with one group bucket of limit 1 and a queue.
struct Table {
    table: PermitTable,
    group: Arc<GroupQueue>,
    key: BucketKey,
}

impl Table {
    fn new() -> Table {
        Table {
            table: PermitTable::new(),
            group: GroupQueue::new(1),
            key: key(),
        }
    }

    fn hold(&self) -> sluice_core::permits::Permit {
        match self.table.acquire(
            &self.key,
            &self.group,
            QueuePolicy::new(MAX_PARKED_PER_GROUP),
            0,
        ) {
            Acquire::Admitted(p) => p,
            other => panic!("expected admitted, got {other:?}"),
        }
    }

    fn park(&self) -> Waiter {
        match self.table.acquire(
            &self.key,
            &self.group,
            QueuePolicy::new(MAX_PARKED_PER_GROUP),
            1,
        ) {
            Acquire::Parked(w) => w,
            other => panic!("expected parked, got {other:?}"),
        }
    }
}

/// One same-thread hand-off on the table: the time from dropping the permit to the waiter's
/// `Ready`.
fn table_same_thread(t: &Table, waker: &Waker) -> Duration {
    let held = t.hold();
    let mut waiter = t.park();
    let mut cx = Context::from_waker(waker);
    assert!(Pin::new(&mut waiter).poll(&mut cx).is_pending());
    let start = Instant::now();
    drop(held);
    let Poll::Ready(Grant::Permit(p)) = Pin::new(&mut waiter).poll(&mut cx) else {
        panic!("the release hands the slot over");
    };
    let elapsed = start.elapsed();
    black_box(&p);
    elapsed
}

/// The same with tokio's semaphore.
fn tokio_same_thread(sem: &Semaphore, waker: &Waker) -> Duration {
    let held = sem.try_acquire().expect("free");
    let mut cx = Context::from_waker(waker);
    let mut fut = pin!(sem.acquire());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    let start = Instant::now();
    drop(held);
    let Poll::Ready(Ok(p)) = fut.as_mut().poll(&mut cx) else {
        panic!("the release hands the permit over");
    };
    let elapsed = start.elapsed();
    black_box(&p);
    elapsed
}

/// What the cross-thread harness needs from a candidate: hold a permit (releaser thread), and
/// park a waiter, poll it once, call `parked`, then wait in `thread::park` until it is ready
/// and return the instant it was (waiter thread).
trait Candidate: Sync {
    type Held;
    fn hold(&self) -> Self::Held;
    fn wait(&self, waker: &Waker, parked: &dyn Fn()) -> Instant;
}

impl Candidate for Table {
    type Held = sluice_core::permits::Permit;

    fn hold(&self) -> Self::Held {
        Table::hold(self)
    }

    fn wait(&self, waker: &Waker, parked: &dyn Fn()) -> Instant {
        let mut waiter = self.park();
        let mut cx = Context::from_waker(waker);
        assert!(Pin::new(&mut waiter).poll(&mut cx).is_pending());
        parked();
        loop {
            std::thread::park();
            if let Poll::Ready(g) = Pin::new(&mut waiter).poll(&mut cx) {
                let at = Instant::now();
                drop(g);
                return at;
            }
        }
    }
}

/// tokio's semaphore with one permit, leaked for the run so its permits can be `'static`.
struct Tokio(&'static Semaphore);

impl Candidate for Tokio {
    type Held = tokio::sync::SemaphorePermit<'static>;

    fn hold(&self) -> Self::Held {
        self.0.try_acquire().expect("free")
    }

    fn wait(&self, waker: &Waker, parked: &dyn Fn()) -> Instant {
        let mut cx = Context::from_waker(waker);
        let mut fut = pin!(self.0.acquire());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        parked();
        loop {
            std::thread::park();
            if let Poll::Ready(p) = fut.as_mut().poll(&mut cx) {
                let at = Instant::now();
                drop(p);
                return at;
            }
        }
    }
}

/// Runs `n` cross-thread hand-offs: the releaser holds a permit, the waiter thread parks
/// behind it, the releaser notes the time and drops the permit, the waiter notes when its
/// future became ready. Returns the samples.
fn cross_thread<C: Candidate>(c: &C, n: usize) -> Vec<Duration> {
    // 0: releaser holds a permit; 1: waiter parked; 2: waiter done.
    let stage = AtomicU32::new(2);
    let released_at = AtomicU64::new(0);
    let base = Instant::now();
    let wait_for = |s: u32| {
        while stage.load(Ordering::Acquire) != s {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    };
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
            let mut samples = Vec::with_capacity(n);
            for _ in 0..n {
                wait_for(0);
                let ready = c.wait(&waker, &|| stage.store(1, Ordering::Release));
                let t0 = base + Duration::from_nanos(released_at.load(Ordering::Acquire));
                samples.push(ready.saturating_duration_since(t0));
                stage.store(2, Ordering::Release);
            }
            samples
        });
        for _ in 0..n {
            wait_for(2);
            let held = c.hold();
            stage.store(0, Ordering::Release);
            wait_for(1);
            let now = base.elapsed().as_nanos() as u64;
            released_at.store(now, Ordering::Release);
            drop(held);
        }
        waiter.join().expect("waiter thread")
    })
}

/// Median and p99 of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn report(name: &str, samples: Vec<Duration>) -> Duration {
    let n = samples.len();
    let (p50, p99) = percentiles(samples);
    println!(
        "  {name:<32} median {:>8.2} µs   p99 {:>8.2} µs   ({n} samples)",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    p50
}

/// Live heap bytes per parked request on the table and for tokio's semaphore, plus the size of
/// each waiter future.
fn report_memory() {
    println!("memory per parked request ({PARKED_FOR_MEMORY} parked in one bucket):");
    let t = Table::new();
    let held = t.hold();
    let mut waiters: Vec<Waiter> = Vec::with_capacity(PARKED_FOR_MEMORY);
    let waker = Waker::from(Arc::new(Nothing));
    let mut cx = Context::from_waker(&waker);
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    for _ in 0..PARKED_FOR_MEMORY {
        let mut w = t.park();
        assert!(Pin::new(&mut w).poll(&mut cx).is_pending());
        waiters.push(w);
    }
    let heap = (LIVE_BYTES.load(Ordering::Relaxed) - before) as f64 / PARKED_FOR_MEMORY as f64;
    let size = std::mem::size_of::<Waiter>();
    println!(
        "  permit table: Waiter future {size} B + {heap:.1} B heap (slab node, amortized growth) = {:.1} B",
        size as f64 + heap
    );
    drop(waiters);
    drop(held);

    let sem = Semaphore::new(1);
    let held = sem.try_acquire().expect("free");
    let mut futs = Vec::with_capacity(PARKED_FOR_MEMORY);
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    for _ in 0..PARKED_FOR_MEMORY {
        let mut f = Box::pin(sem.acquire());
        assert!(f.as_mut().poll(&mut cx).is_pending());
        futs.push(f);
    }
    let heap = (LIVE_BYTES.load(Ordering::Relaxed) - before) as f64 / PARKED_FOR_MEMORY as f64;
    let size = std::mem::size_of_val(&*futs[0]);
    println!(
        "  tokio Semaphore: Acquire future {size} B (boxed here: {heap:.1} B heap incl. the box; intrusive, no node)"
    );
    drop(futs);
    drop(held);
}

fn report_latency(sem: &'static Semaphore) {
    let t = Table::new();
    let waker = Waker::from(Arc::new(Nothing));
    println!("hand-off latency, release -> waiter future ready:");
    for _ in 0..SAMPLES {
        table_same_thread(&t, &waker);
        tokio_same_thread(sem, &waker);
    }
    let table: Vec<Duration> = (0..SAMPLES)
        .map(|_| table_same_thread(&t, &waker))
        .collect();
    let tokio: Vec<Duration> = (0..SAMPLES)
        .map(|_| tokio_same_thread(sem, &waker))
        .collect();
    let a = report("same_thread permit table", table);
    let b = report("same_thread tokio Semaphore", tokio);
    println!(
        "  same_thread ratio (median)       {:.2}x",
        a.as_secs_f64() / b.as_secs_f64()
    );
    cross_thread(&t, CROSS_SAMPLES / 10);
    cross_thread(&Tokio(sem), CROSS_SAMPLES / 10);
    let a = report("cross_thread permit table", cross_thread(&t, CROSS_SAMPLES));
    let b = report(
        "cross_thread tokio Semaphore",
        cross_thread(&Tokio(sem), CROSS_SAMPLES),
    );
    println!(
        "  cross_thread ratio (median)      {:.2}x",
        a.as_secs_f64() / b.as_secs_f64()
    );
}

fn benches(c: &mut Criterion, sem: &'static Semaphore) {
    let t = Table::new();
    let waker = Waker::from(Arc::new(Nothing));
    let mut g = c.benchmark_group("handoff");
    g.bench_function("same_thread_permit_table", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| table_same_thread(&t, &waker)).sum())
    });
    g.bench_function("same_thread_tokio_semaphore", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| tokio_same_thread(sem, &waker)).sum())
    });
    g.finish();
}

fn main() {
    let sem: &'static Semaphore = Box::leak(Box::new(Semaphore::new(1)));
    report_memory();
    report_latency(sem);
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c, sem);
    c.final_summary();
}
