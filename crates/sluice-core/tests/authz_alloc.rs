//! An authorization check does not allocate in steady state (issue 15): the principal's role
//! set from the cache, then a cluster or index action, counted by a global allocator that
//! tallies this thread's allocations.
#![cfg(not(feature = "loom"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::authz::{Action, Authorizer, IndexPermissionDef, RoleDef, Roles};

/// Counts allocations per thread, so other tests' threads do not disturb the count.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // try_with: the slot may be gone while the thread shuts down; const-initialized, so
    // touching it never allocates.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn test_authorization_check_does_not_allocate_in_steady_state() {
    let mut defs = BTreeMap::new();
    for r in 0..20 {
        defs.insert(
            format!("tenant_{r}"),
            RoleDef {
                description: None,
                cluster_permissions: vec!["cluster_monitor".into()],
                index_permissions: vec![IndexPermissionDef {
                    index_patterns: vec![
                        format!("tenant-{r}-*"),
                        format!("tenant-{r}-exact"),
                        format!("tenant-{r}-*-archive"),
                        format!("*-shared-{r}"),
                    ],
                    allowed_actions: vec!["crud".into()],
                }],
            },
        );
    }
    let auth = Authorizer::new(Roles::compile(&defs).unwrap(), &["admin".into()]);
    // Fresh Arcs, as a proxy's headers give them: the cache compares by content.
    let roles = || -> Vec<Arc<str>> { vec![Arc::from("tenant_3"), Arc::from("tenant_11")] };
    assert!(
        auth.role_set(&roles())
            .allows_index(Action::Search, "tenant-3-logs")
    );
    let fresh = roles();
    let n = allocations_during(|| {
        for _ in 0..1_000 {
            let set = auth.role_set(&fresh);
            assert!(set.allows_index(Action::Search, "tenant-3-logs"));
            assert!(set.allows_index(Action::WriteIndex, "tenant-11-x-archive"));
            assert!(set.allows_index(Action::Get, "a-shared-11"));
            assert!(!set.allows_index(Action::Search, "tenant-4-logs"));
            assert!(!set.allows_index(Action::IndexDelete, "tenant-3-logs"));
            assert!(set.allows_cluster(Action::WlmStats));
            assert!(!set.allows_cluster(Action::WlmGroupCreate));
        }
    });
    assert_eq!(n, 0, "allocations in 1,000 checks");
}
