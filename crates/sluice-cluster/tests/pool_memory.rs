//! P4 of `src/shared/pool.rs`: one owner flooded with 100,000 distinct username buckets, each
//! acquire one that would be granted (limit 1), under caps of 65,536 buckets and leases. The
//! counts stay within the caps, every acquire beyond them answers `Overloaded`, and the heap
//! the pool holds, measured by a global allocator that tallies live bytes, stays within
//! [`MAX_BYTES_PER_LEASE`] per granted lease (its bucket entry and id included); once every
//! lease is released and a sweep has run, it is back near the baseline (P3).
//!
//! One test in this binary: the tally counts every thread's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use sluice_cluster::shared::pool::{AcquireOutcome, LeaseId, PoolLimits, SharedPool};

/// Live heap bytes (requested sizes), over all threads.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Tallies live bytes; relaxed: read on the allocating thread, after the work.
struct CountingAllocator;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Distinct buckets in the flood: more than the caps, as many users as the seed review's
/// example domain.
const FLOOD: usize = 100_000;

/// The caps under test: 2^16 each.
const CAP: usize = 65_536;

/// The stated bound per granted lease with its own bucket: the lease-map entry (~65 bytes),
/// its expiry-index entry (~50), the bucket-map entry (~90) — each map up to half empty
/// just after growing — and the bucket id (~40 bytes): about 400 bytes measured; 512 leaves
/// room for another allocator's rounding of the table sizes. At the caps: 32 MiB.
const MAX_BYTES_PER_LEASE: usize = 512;

/// What may stay after the drain and a sweep: the maps' retained capacity
/// (`RETAINED_MIN` entries each) and the expiry index's empty root.
const MAX_BYTES_IDLE: usize = 512 * 1024;

#[test]
fn test_a_flood_of_distinct_buckets_stays_within_the_caps_and_the_memory_bound() {
    let ttl = Duration::from_secs(300);
    let now = Duration::ZERO;
    let holder: Arc<str> = Arc::from("coordinator-1");
    let baseline = live();
    let mut pool = SharedPool::new(PoolLimits {
        max_buckets: CAP,
        max_leases: CAP,
    });
    let mut granted: Vec<(Arc<str>, LeaseId)> = Vec::with_capacity(CAP);
    let mut overloaded = 0;
    let mut at_caps = 0;
    for i in 0..FLOOD {
        let bucket: Arc<str> = Arc::from(format!("search-group\0user{i:06}@example.com"));
        match pool.acquire(&bucket, 1, &holder, true, ttl, now) {
            AcquireOutcome::Granted { lease, .. } => granted.push((bucket, lease)),
            AcquireOutcome::Overloaded => overloaded += 1,
            other => panic!("bucket {i}: {other:?}"),
        }
        assert!(pool.num_buckets() <= CAP && pool.num_leases() <= CAP);
        if i + 1 == CAP {
            at_caps = live();
        }
    }
    assert_eq!(granted.len(), CAP);
    assert_eq!(overloaded, FLOOD - CAP);
    assert_eq!(
        (pool.num_buckets(), pool.num_leases(), pool.num_waiters()),
        (CAP, CAP, 0)
    );
    // The harness's own list of leases is not the pool's memory.
    let own = (granted.capacity() * std::mem::size_of::<(Arc<str>, LeaseId)>()) as isize;
    let held = (live() - baseline - own) as usize;
    println!(
        "pool holds {held} bytes for {CAP} leases: {} bytes per lease with its bucket",
        held / CAP
    );
    assert!(
        held <= CAP * MAX_BYTES_PER_LEASE,
        "{held} bytes > {MAX_BYTES_PER_LEASE} per lease"
    );
    // The 34,464 Overloaded acquires kept nothing.
    assert!(
        (live() - at_caps).unsigned_abs() < 64 * 1024,
        "an Overloaded acquire kept memory"
    );
    // Drain: every release is accepted, and the sweep gives the capacity back.
    for (_, lease) in granted.drain(..) {
        assert_eq!(pool.release(&holder, lease, now), None);
    }
    drop(granted);
    assert_eq!(
        (pool.num_buckets(), pool.num_leases(), pool.num_violations()),
        (0, 0, 0)
    );
    assert!(pool.sweep(now).is_empty());
    let idle = (live() - baseline) as usize;
    println!("after the drain and a sweep: {idle} bytes");
    assert!(idle <= MAX_BYTES_IDLE, "{idle} bytes kept by an idle pool");
}
