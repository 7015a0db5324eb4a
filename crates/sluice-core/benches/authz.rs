//! Micro-benchmarks of authorization on the admission path: one check per iteration — the
//! principal's compiled role set looked up in the cache, then an index action on one index —
//! with 100 roles and 1,000 index patterns, and the heap allocations each check makes,
//! counted by a global allocator.
//!
//! `cargo bench -p sluice-core --bench authz`; results in BENCHMARKS.md.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::Criterion;
use sluice_core::authz::{Action, Authorizer, IndexPermissionDef, RoleDef, Roles};

#[path = "support/all_allocations.rs"]
mod all_allocations;

use all_allocations::{CountingAllocator, allocations};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Roles in the file: a node shared by 100 tenants.
const NUM_ROLES: usize = 100;
/// Index patterns per role: 1,000 in all.
const PATTERNS_PER_ROLE: usize = 10;
/// Checks per case when counting allocations, after as many for warm-up.
const COUNTED_OPS: u64 = 100_000;

/// 100 roles of 10 patterns each, as a multi-tenant node has them: mostly prefixes
/// (`tenant-042-logs-*`), some exact names, one wildcard in the middle per role
/// (`tenant-042-*-archive`), read on some and crud on others, with cluster_monitor.
fn roles() -> Roles {
    let mut defs = BTreeMap::new();
    for r in 0..NUM_ROLES {
        let patterns: Vec<String> = (0..PATTERNS_PER_ROLE)
            .map(|k| match k {
                0 => format!("tenant-{r:03}-*-archive"),
                1 | 2 => format!("tenant-{r:03}-exact-{k}"),
                _ => format!("tenant-{r:03}-kind{k}-*"),
            })
            .collect();
        let (read, crud) = patterns.split_at(PATTERNS_PER_ROLE / 2);
        let perm = |p: &[String], actions: &[&str]| IndexPermissionDef {
            index_patterns: p.to_vec(),
            allowed_actions: actions.iter().map(|s| s.to_string()).collect(),
        };
        defs.insert(
            format!("tenant_{r:03}"),
            RoleDef {
                description: None,
                cluster_permissions: vec!["cluster_monitor".into()],
                index_permissions: vec![
                    perm(read, &["read"]),
                    perm(crud, &["crud", "create_index"]),
                ],
            },
        );
    }
    Roles::compile(&defs).expect("valid roles")
}

struct Fixture {
    auth: Authorizer,
    /// A typical user: three tenants' roles.
    three: Vec<Arc<str>>,
    /// The worst case: every role (all 1,000 patterns in one role set).
    all: Vec<Arc<str>>,
}

impl Fixture {
    fn new() -> Fixture {
        let auth = Authorizer::new(roles(), &["admin".to_string()]);
        let name = |r: usize| Arc::from(format!("tenant_{r:03}"));
        Fixture {
            auth,
            three: vec![name(7), name(42), name(99)],
            all: (0..NUM_ROLES).map(name).collect(),
        }
    }

    /// One request's check: the role set, then the action on the index.
    #[inline]
    fn check(&self, roles: &[Arc<str>], action: Action, index: &str) -> bool {
        let set = self.auth.role_set(black_box(roles));
        set.allows_index(black_box(action), black_box(index))
    }
}

/// The cases: (name, roles, action, index, expected).
/// One measured check: (label, the caller's roles, action, index expression, expected verdict).
type Case<'a> = (&'static str, &'a [Arc<str>], Action, &'static str, bool);

fn cases(f: &Fixture) -> Vec<Case<'_>> {
    vec![
        (
            "3_roles_prefix_allowed",
            &f.three,
            Action::Search,
            "tenant-042-kind3-2026.12.01",
            true,
        ),
        (
            "3_roles_exact_allowed",
            &f.three,
            Action::Search,
            "tenant-042-exact-1",
            true,
        ),
        (
            "3_roles_wildcard_allowed",
            &f.three,
            Action::Search,
            "tenant-099-2026-archive",
            true,
        ),
        (
            "3_roles_denied_other_tenant",
            &f.three,
            Action::Search,
            "tenant-043-kind3-2026.12.01",
            false,
        ),
        (
            "3_roles_denied_action",
            &f.three,
            Action::WriteIndex,
            "tenant-042-kind3-x",
            false,
        ),
        (
            "100_roles_prefix_allowed",
            &f.all,
            Action::Search,
            "tenant-042-kind7-2026.12.01",
            true,
        ),
        (
            "100_roles_denied",
            &f.all,
            Action::Search,
            "other-tenant-logs-2026.12.01",
            false,
        ),
    ]
}

fn report_allocations(f: &Fixture) {
    println!("allocations per check ({COUNTED_OPS} counted after warm-up):");
    for (name, roles, action, index, expected) in cases(f) {
        assert_eq!(f.check(roles, action, index), expected, "{name}");
        for _ in 0..COUNTED_OPS {
            black_box(f.check(roles, action, index));
        }
        let before = allocations();
        for _ in 0..COUNTED_OPS {
            black_box(f.check(roles, action, index));
        }
        let per_op = (allocations() - before) as f64 / COUNTED_OPS as f64;
        println!("  {name:32} {per_op:.4}");
    }
}

fn benches(c: &mut Criterion, f: &Fixture) {
    let mut g = c.benchmark_group("authz");
    for (name, roles, action, index, _) in cases(f) {
        g.bench_function(name, |b| b.iter(|| f.check(roles, action, index)));
    }
    // The two halves of a check with every role: the cache lookup, then the trie walk.
    g.bench_function("100_roles_lookup_only", |b| {
        b.iter(|| f.auth.role_set(black_box(&f.all)))
    });
    let all = f.auth.role_set(&f.all);
    g.bench_function("100_roles_walk_only", |b| {
        b.iter(|| {
            all.allows_index(
                black_box(Action::Search),
                black_box("tenant-042-kind7-2026.12.01"),
            )
        })
    });
    g.bench_function("cluster_action_3_roles", |b| {
        b.iter(|| {
            f.auth
                .role_set(black_box(&f.three))
                .allows_cluster(black_box(Action::WlmStats))
        })
    });
    g.finish();
}

fn main() {
    let f = Fixture::new();
    report_allocations(&f);
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c, &f);
    c.final_summary();
}
