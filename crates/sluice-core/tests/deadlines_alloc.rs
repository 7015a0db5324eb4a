//! The deadline list does not allocate in steady state (E4): inserting, setting a waker,
//! looking and removing, once the list has held its peak, counted by a global allocator that
//! tallies this thread's allocations.
#![cfg(not(feature = "loom"))]

use sluice_core::deadlines::Deadlines;

#[path = "support/thread_allocations.rs"]
mod thread_allocations;

use thread_allocations::{CountingAllocator, allocations_during};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// `rounds` rounds of 32 deadlines in flight: each inserted, given a waker, the timer looking
/// (firing the oldest few), then all removed.
fn rounds(list: &mut Deadlines<u64, u64>, woken: &mut Vec<u64>, rounds: u64) {
    let mut keys = Vec::with_capacity(32);
    for r in 0..rounds {
        let base = r * 1_000;
        for i in 0..32 {
            let (key, _) = list.insert(base + 100 + i);
            if let Some(w) = list.waiting_waker(&key) {
                *w = Some(i);
            }
            keys.push(key);
        }
        woken.clear();
        list.fire_due(base + 104, base + 5_000, woken);
        for key in keys.drain(..) {
            let _ = list.remove(key);
        }
    }
}

#[test]
fn test_deadlines_do_not_allocate_in_steady_state() {
    let mut list = Deadlines::new();
    let mut woken = Vec::with_capacity(32);
    // Warm-up: the slots and the free list reach their peak and keep it.
    rounds(&mut list, &mut woken, 1);
    let n = allocations_during(|| rounds(&mut list, &mut woken, 1_000));
    // The rounds' own key vector is made once per call: one allocation.
    assert_eq!(n, 1, "allocations in 1,000 rounds of 32 deadlines");
}
