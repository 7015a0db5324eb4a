//! Property tests of authorization against a reference model: for random roles, principals,
//! actions and index names, a compiled role set allows exactly what one of the principal's
//! roles grants — in particular, never an action that no role grants.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::authz::groups::expand;
use sluice_core::authz::{
    Action, ActionKind, Authorizer, IndexPermissionDef, PatternSet, RoleDef, Roles,
};

/// The reference wildcard matcher: plain recursion, `*` any run, `?` one character.
fn reference_match(p: &[u8], t: &[u8]) -> bool {
    match (p.first(), t.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            reference_match(&p[1..], t) || (!t.is_empty() && reference_match(p, &t[1..]))
        }
        (Some(b'?'), Some(_)) => reference_match(&p[1..], &t[1..]),
        (Some(a), Some(b)) if a == b => reference_match(&p[1..], &t[1..]),
        _ => false,
    }
}

/// The reference of a role pattern matching a name: [`reference_match`], but a remote name
/// (`cluster:index`) only against a remote pattern.
fn reference_name_match(p: &[u8], t: &[u8]) -> bool {
    (!t.contains(&b':') || p.contains(&b':')) && reference_match(p, t)
}

const CLUSTER_ENTRIES: &[&str] = &[
    "cluster_monitor",
    "cluster_all",
    "cluster:monitor/health",
    "cluster:admin/*",
    "cluster:admin/opensearch/wlm/*",
];
const INDEX_ENTRIES: &[&str] = &[
    "read",
    "write",
    "delete",
    "crud",
    "manage",
    "create_index",
    "indices_all",
    "search",
    "get",
    "index",
    "indices:data/read/search",
    "indices:admin/*",
    "indices:monitor/*",
];
const ADMIN: &str = "admin";

fn pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ab-]{1,4}",
        "[ab-]{0,3}\\*",
        "[ab*?-]{1,5}",
        "[ab*]{1,2}:[ab*-]{1,3}",
        Just("*".to_string()),
    ]
}

fn role() -> impl Strategy<Value = RoleDef> {
    let perm = (
        prop::collection::vec(pattern(), 1..4),
        prop::collection::vec(prop::sample::select(INDEX_ENTRIES), 1..3),
    )
        .prop_map(|(patterns, actions)| IndexPermissionDef {
            index_patterns: patterns,
            allowed_actions: actions.into_iter().map(str::to_string).collect(),
        });
    (
        prop::collection::vec(prop::sample::select(CLUSTER_ENTRIES), 0..2),
        prop::collection::vec(perm, 0..3),
    )
        .prop_map(|(cluster, index)| RoleDef {
            description: None,
            cluster_permissions: cluster.into_iter().map(str::to_string).collect(),
            index_permissions: index,
        })
}

/// What the definitions grant a principal with `roles`, computed entry by entry.
fn reference_allows(
    defs: &BTreeMap<String, RoleDef>,
    roles: &[String],
    action: Action,
    index: &str,
) -> bool {
    if roles.iter().any(|r| r == ADMIN) {
        return true;
    }
    roles
        .iter()
        .filter_map(|r| defs.get(r))
        .any(|def| match action.kind() {
            ActionKind::Cluster => def
                .cluster_permissions
                .iter()
                .any(|e| expand(e, ActionKind::Cluster).is_ok_and(|s| s.contains(action))),
            ActionKind::Index => def.index_permissions.iter().any(|p| {
                p.allowed_actions
                    .iter()
                    .any(|e| expand(e, ActionKind::Index).is_ok_and(|s| s.contains(action)))
                    && p.index_patterns
                        .iter()
                        .any(|pat| reference_name_match(pat.as_bytes(), index.as_bytes()))
            }),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_role_set_never_allows_what_no_role_grants(
        defs in prop::collection::btree_map("r[0-5]", role(), 0..6),
        principal in prop::collection::vec(prop_oneof![
            "r[0-7]".prop_map(|s| s),
            Just(ADMIN.to_string()),
        ], 0..4),
        checks in prop::collection::vec(
            (prop::sample::select(Action::ALL), "[ab-]{0,5}(:[ab-]{0,2})?"), 1..20),
    ) {
        let roles = Roles::compile(&defs).expect("generated roles are valid");
        let auth = Authorizer::new(roles, &[ADMIN.to_string()]);
        let arcs: Vec<Arc<str>> = principal.iter().map(|r| Arc::from(r.as_str())).collect();
        let set = auth.role_set(&arcs);
        for (action, index) in checks {
            let expected = reference_allows(&defs, &principal, action, &index);
            let actual = match action.kind() {
                ActionKind::Cluster => set.allows_cluster(action),
                ActionKind::Index => set.allows_index(action, &index),
            };
            prop_assert_eq!(actual, expected, "{} on [{}] for {:?}", action.name(), index, principal);
        }
    }

    #[test]
    fn prop_pattern_set_matches_as_its_patterns_do(
        patterns in prop::collection::vec(pattern(), 0..12),
        names in prop::collection::vec("[ab-]{0,6}(:[ab-]{0,2})?", 1..20),
    ) {
        let mut set = PatternSet::default();
        for p in &patterns {
            set.insert(p);
        }
        for n in names {
            let expected = patterns.iter().any(|p| reference_name_match(p.as_bytes(), n.as_bytes()));
            prop_assert_eq!(set.matches(&n), expected, "[{}] against {:?}", n, patterns);
        }
    }
}
