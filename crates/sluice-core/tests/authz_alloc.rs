//! An authorization check does not allocate in steady state (issue 15): the principal's role
//! set from the cache, then a cluster or index action, counted by a global allocator that
//! tallies this thread's allocations.
#![cfg(not(feature = "loom"))]

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::authz::{Action, Authorizer, IndexPermissionDef, RoleDef, Roles};

#[path = "support/thread_allocations.rs"]
mod thread_allocations;

use thread_allocations::{CountingAllocator, allocations_during};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

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
