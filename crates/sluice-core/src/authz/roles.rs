//! Roles as a roles file defines them ([`RoleDef`]), compiled into [`Roles`]; the permissions
//! of one principal's roles merged into a [`RoleSet`] that answers a check without allocating.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use serde::Deserialize;

use super::action::{Action, ActionKind, ActionSet};
use super::groups::{self, EntryError};
use super::pattern::{self, PatternSet};

/// One role of the roles file, shaped like the OpenSearch security plugin's `roles.yml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleDef {
    /// What the role is for (shown nowhere; for the file's readers).
    #[serde(default)]
    pub description: Option<String>,
    /// Action groups (`cluster_monitor`, `cluster_all`) or cluster action patterns.
    #[serde(default)]
    pub cluster_permissions: Vec<String>,
    /// Index permissions: which actions on which indices.
    #[serde(default)]
    pub index_permissions: Vec<IndexPermissionDef>,
}

/// One `index_permissions` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexPermissionDef {
    /// Index patterns (`tenant-a-*`, `orders`, `*`).
    #[serde(default)]
    pub index_patterns: Vec<String>,
    /// Action groups (`read`, `crud`, `manage`…) or index action patterns.
    #[serde(default)]
    pub allowed_actions: Vec<String>,
}

/// A roles file entry that cannot be used; the message names the role, the field and the
/// entry, and says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("role [{role}]: {reason}")]
pub struct RoleError {
    /// The role.
    pub role: String,
    /// What is wrong with which entry.
    pub reason: String,
}

/// One compiled role.
#[derive(Debug, Clone, Default)]
struct Role {
    cluster: ActionSet,
    /// `(actions, patterns)` per `index_permissions` entry.
    index: Vec<(ActionSet, Vec<Box<str>>)>,
}

/// Every role of a roles file, validated.
#[derive(Debug, Clone, Default)]
pub struct Roles {
    by_name: HashMap<Arc<str>, Role>,
    /// Action patterns that name no action sluice has, as `(role, pattern)`, for a warning:
    /// a role written for OpenSearch may name actions sluice does not serve.
    unmatched: Vec<(String, String)>,
}

impl Roles {
    /// Validates and compiles role definitions, in file order. Fails on the first bad entry:
    /// an unknown action group, a group of the wrong kind, an empty list entry or a bad index
    /// pattern. (Duplicate names are the file parser's to refuse: a map cannot hold them.)
    pub fn compile(defs: &BTreeMap<String, RoleDef>) -> Result<Roles, RoleError> {
        let mut roles = Roles::default();
        for (name, def) in defs {
            let err = |reason: String| RoleError {
                role: name.clone(),
                reason,
            };
            if name.trim().is_empty() || name.contains(',') {
                return Err(err("a role name must be non-empty, without ','".to_string()));
            }
            let mut role = Role::default();
            for entry in &def.cluster_permissions {
                let set =
                    expand_entry(entry, ActionKind::Cluster, "cluster_permissions").map_err(err)?;
                if set.is_empty() && entry.contains(':') {
                    roles.unmatched.push((name.clone(), entry.clone()));
                }
                role.cluster = role.cluster.union(set);
            }
            for (i, perm) in def.index_permissions.iter().enumerate() {
                let field = format!("index_permissions[{i}]");
                if perm.index_patterns.is_empty() {
                    return Err(err(format!(
                        "{field}.index_patterns is empty; list the indices it applies to, e.g. [\"tenant-a-*\"]"
                    )));
                }
                if perm.allowed_actions.is_empty() {
                    return Err(err(format!(
                        "{field}.allowed_actions is empty; list action groups such as read or crud"
                    )));
                }
                let mut actions = ActionSet::EMPTY;
                for entry in &perm.allowed_actions {
                    let set = expand_entry(
                        entry,
                        ActionKind::Index,
                        &format!("{field}.allowed_actions"),
                    )
                    .map_err(err)?;
                    if set.is_empty() && entry.contains(':') {
                        roles.unmatched.push((name.clone(), entry.clone()));
                    }
                    actions = actions.union(set);
                }
                for p in &perm.index_patterns {
                    pattern::validate(p).map_err(|e| {
                        err(format!(
                            "{field}.index_patterns has a bad pattern [{p}]: {}",
                            e.reason()
                        ))
                    })?;
                }
                let patterns = perm
                    .index_patterns
                    .iter()
                    .map(|p| p.as_str().into())
                    .collect();
                role.index.push((actions, patterns));
            }
            roles.by_name.insert(Arc::from(name.as_str()), role);
        }
        Ok(roles)
    }

    /// The number of roles.
    pub fn num_roles(&self) -> usize {
        self.by_name.len()
    }

    /// Whether a role of this name is defined.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Action patterns that name no action sluice has, as `(role, pattern)`.
    pub fn unmatched_actions(&self) -> &[(String, String)] {
        &self.unmatched
    }

    /// The role that grants every action on every index, other clusters' too (`*:*`: `*` names
    /// local indices only): what `auth.admin_roles` are.
    fn all_access() -> Role {
        Role {
            cluster: ActionSet::matching("*", ActionKind::Cluster),
            index: vec![(
                ActionSet::matching("*", ActionKind::Index),
                vec!["*".into(), "*:*".into()],
            )],
        }
    }
}

fn expand_entry(entry: &str, kind: ActionKind, field: &str) -> Result<ActionSet, String> {
    groups::expand(entry, kind).map_err(|e| match e {
        EntryError::Empty => format!("{field} has an empty entry; remove it"),
        EntryError::UnknownGroup => format!(
            "{field} names an unknown action group [{entry}]; use one of [{}] or an action name such as indices:data/read/search",
            groups::group_names().collect::<Vec<_>>().join(", ")
        ),
        EntryError::WrongKind(ActionKind::Index) => format!(
            "{field} names the index action group [{entry}]; list it under index_permissions.allowed_actions"
        ),
        EntryError::WrongKind(ActionKind::Cluster) => format!(
            "{field} names the cluster action group [{entry}]; list it under cluster_permissions"
        ),
    })
}

/// The permissions of one combination of roles, merged for checking.
///
/// # Invariants
/// - A check is allowed only if one of the roles it was built from grants it
///   (`tests/authz_props.rs`: `prop_role_set_never_allows_what_no_role_grants`).
#[derive(Debug, Clone, Default)]
pub struct RoleSet {
    cluster: ActionSet,
    /// Index permissions merged by identical action sets: few entries, each one trie.
    index: Vec<(ActionSet, PatternSet)>,
    /// The union of `index`'s action sets.
    index_any: ActionSet,
}

impl RoleSet {
    fn build<'a>(roles: impl Iterator<Item = &'a Role>) -> RoleSet {
        let mut set = RoleSet::default();
        for role in roles {
            set.cluster = set.cluster.union(role.cluster);
            for (actions, patterns) in &role.index {
                if actions.is_empty() {
                    continue;
                }
                set.index_any = set.index_any.union(*actions);
                let at = match set.index.iter().position(|(a, _)| a == actions) {
                    Some(i) => i,
                    None => {
                        set.index.push((*actions, PatternSet::default()));
                        set.index.len() - 1
                    }
                };
                for p in patterns {
                    set.index[at].1.insert(p);
                }
            }
        }
        set
    }

    /// Whether the cluster `action` is granted.
    pub fn allows_cluster(&self, action: Action) -> bool {
        self.cluster.contains(action)
    }

    /// Whether the index `action` is granted on `index` (a concrete index or alias name).
    /// Allocates nothing.
    pub fn allows_index(&self, action: Action, index: &str) -> bool {
        self.index
            .iter()
            .any(|(actions, patterns)| actions.contains(action) && patterns.matches(index))
    }

    /// Whether `action` is granted on every index the pattern `requested` can name (one
    /// role's patterns must cover it: [`super::pattern::pattern_covers`]).
    pub fn allows_index_pattern(&self, action: Action, requested: &str) -> bool {
        self.index
            .iter()
            .any(|(actions, patterns)| actions.contains(action) && patterns.covers(requested))
    }

    /// Whether the index `action` is granted on some index pattern.
    pub fn allows_index_somewhere(&self, action: Action) -> bool {
        self.index_any.contains(action)
    }
}

/// The hasher of the role-set cache: per name it mixes the length and the first and last
/// eight bytes, so a lookup costs a few multiplications per role, however long the names
/// (a general hasher reads every byte: with 100 roles, most of a check's time). Names that
/// differ only in their middle bytes share a hash and are told apart by the key comparison;
/// the names come from the users file or a trusted proxy, never from a client, so no one can
/// choose colliding keys. Deterministic (no per-process keys).
#[derive(Debug, Default, Clone, Copy)]
pub struct RoleNamesHasher(u64);

impl RoleNamesHasher {
    /// The multiplier of FxHash (rustc's hasher): odd, with well-spread bits.
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for RoleNamesHasher {
    fn write(&mut self, bytes: &[u8]) {
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        let n = bytes.len();
        self.mix(n as u64);
        self.mix(word(&bytes[..n.min(8)]));
        if n > 8 {
            self.mix(word(&bytes[n - 8.min(n)..]));
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// One cached role set and the role list it was compiled for.
#[derive(Debug)]
struct CachedSet {
    roles: Box<[Arc<str>]>,
    set: Arc<RoleSet>,
}

/// The fingerprint of a role list: every name through [`RoleNamesHasher`], in order.
fn fingerprint(roles: &[Arc<str>]) -> u64 {
    let mut h = RoleNamesHasher::default();
    h.mix(roles.len() as u64);
    for r in roles {
        h.write(r.as_bytes());
    }
    h.finish()
}

/// Whether two role lists are the same, names compared by pointer first: a principal from the
/// users file hands the same `Arc`s every request, so a cache hit compares no bytes.
fn same_roles(a: &[Arc<str>], b: &[Arc<str>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| Arc::ptr_eq(x, y) || **x == **y)
}

/// Most distinct role combinations kept compiled: with proxy authentication the combinations
/// come from headers, so the cache is bounded; a deployment has far fewer (one per kind of
/// user), and beyond the bound the cache starts over rather than grow.
const MAX_CACHED_ROLE_SETS: usize = 4096;

/// The node's authorization: the roles, the roles that have every permission
/// (`auth.admin_roles`), and a cache of compiled [`RoleSet`]s per combination of roles.
#[derive(Debug)]
pub struct Authorizer {
    roles: HashMap<Arc<str>, Role>,
    /// Role sets by the fingerprint of their role list ([`fingerprint`]), each with the
    /// list it was built for (fingerprints may collide; the list decides).
    cache: parking_lot::RwLock<HashMap<u64, Vec<CachedSet>, BuildHasherDefault<RoleNamesHasher>>>,
}

impl Authorizer {
    /// Authorization from a roles file: `roles`, plus every permission for `admin_roles`.
    pub fn new(roles: Roles, admin_roles: &[String]) -> Authorizer {
        let mut by_name = roles.by_name;
        for admin in admin_roles {
            by_name.insert(Arc::from(admin.as_str()), Roles::all_access());
        }
        Authorizer {
            roles: by_name,
            cache: Default::default(),
        }
    }

    /// Authorization without a roles file, as sluice behaved before roles existed: every
    /// authenticated user may do everything except the admin actions (cluster settings, group
    /// and rule changes, bucket detail), which need a role in `admin_roles`. Every index is
    /// local and remote ones (`*` and `*:*`), so a gateway without roles forwards
    /// cross-cluster searches as it always did.
    pub fn without_roles_file(admin_roles: &[String]) -> Authorizer {
        let admin_only = [
            Action::ClusterSettingsUpdate,
            Action::WlmGroupCreate,
            Action::WlmGroupUpdate,
            Action::WlmGroupDelete,
            Action::WlmStatsBuckets,
            Action::RuleCreate,
            Action::RuleUpdate,
            Action::RuleDelete,
        ];
        let cluster = ActionSet::matching("*", ActionKind::Cluster)
            .iter()
            .filter(|a| !admin_only.contains(a))
            .fold(ActionSet::EMPTY, |s, a| s.union(ActionSet::of(a)));
        let everyone = Role {
            cluster,
            index: vec![(
                ActionSet::matching("*", ActionKind::Index),
                vec!["*".into(), "*:*".into()],
            )],
        };
        let mut roles = HashMap::new();
        roles.insert(Arc::from(EVERYONE), everyone);
        let mut auth = Authorizer::new(
            Roles {
                by_name: roles,
                unmatched: Vec::new(),
            },
            admin_roles,
        );
        auth.roles.shrink_to_fit();
        auth
    }

    /// Whether `name` is a role this node knows (defined, or an admin role).
    pub fn knows_role(&self, name: &str) -> bool {
        self.roles.contains_key(name)
    }

    /// The compiled permissions of a principal with `roles` (in any order; unknown roles
    /// grant nothing). Cached: after the first call for a combination, a lookup that
    /// allocates nothing.
    pub fn role_set(&self, roles: &[Arc<str>]) -> Arc<RoleSet> {
        let key = fingerprint(roles);
        if let Some(hit) = self
            .cache
            .read()
            .get(&key)
            .and_then(|sets| sets.iter().find(|c| same_roles(&c.roles, roles)))
        {
            return hit.set.clone();
        }
        let everyone = self.roles.get(EVERYONE);
        let set = Arc::new(RoleSet::build(
            roles
                .iter()
                .filter_map(|r| self.roles.get(r))
                .chain(everyone),
        ));
        let mut cache = self.cache.write();
        if cache.len() >= MAX_CACHED_ROLE_SETS {
            cache.clear();
        }
        let sets = cache.entry(key).or_default();
        // Another thread may have compiled the same list meanwhile: keep one.
        if let Some(c) = sets.iter().find(|c| same_roles(&c.roles, roles)) {
            return c.set.clone();
        }
        sets.push(CachedSet {
            roles: roles.into(),
            set: set.clone(),
        });
        set
    }
}

/// The built-in role every principal has when no roles file is configured; a name no roles
/// file can define (it holds `,`, which role names may not).
const EVERYONE: &str = ",everyone";

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(yaml_like: &[(&str, RoleDef)]) -> Result<Roles, RoleError> {
        let defs: BTreeMap<String, RoleDef> = yaml_like
            .iter()
            .map(|(n, d)| (n.to_string(), d.clone()))
            .collect();
        Roles::compile(&defs)
    }

    fn index_role(patterns: &[&str], actions: &[&str]) -> RoleDef {
        RoleDef {
            index_permissions: vec![IndexPermissionDef {
                index_patterns: patterns.iter().map(|s| s.to_string()).collect(),
                allowed_actions: actions.iter().map(|s| s.to_string()).collect(),
            }],
            ..RoleDef::default()
        }
    }

    fn arcs(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    #[test]
    fn test_compile_names_the_role_and_entry() {
        let e = roles(&[("a", index_role(&["x"], &["reed"]))]).unwrap_err();
        assert_eq!(e.role, "a");
        assert!(e.to_string().contains("unknown action group [reed]"), "{e}");
        assert!(
            e.to_string()
                .contains("index_permissions[0].allowed_actions"),
            "{e}"
        );
        let e = roles(&[("b", index_role(&["X"], &["read"]))]).unwrap_err();
        assert!(e.to_string().contains("bad pattern [X]"), "{e}");
        let e = roles(&[(
            "c",
            RoleDef {
                cluster_permissions: vec!["read".into()],
                ..RoleDef::default()
            },
        )])
        .unwrap_err();
        assert!(
            e.to_string().contains("list it under index_permissions"),
            "{e}"
        );
        let e = roles(&[("d", index_role(&[], &["read"]))]).unwrap_err();
        assert!(e.to_string().contains("index_patterns is empty"), "{e}");
    }

    #[test]
    fn test_role_set_grants_only_what_its_roles_grant() {
        let r = roles(&[
            ("a_read", index_role(&["tenant-a-*"], &["read"])),
            ("b_crud", index_role(&["tenant-b-*"], &["crud"])),
            (
                "mon",
                RoleDef {
                    cluster_permissions: vec!["cluster_monitor".into()],
                    ..RoleDef::default()
                },
            ),
        ])
        .unwrap();
        let auth = Authorizer::new(r, &["admin".to_string()]);
        let a = auth.role_set(&arcs(&["a_read"]));
        assert!(a.allows_index(Action::Search, "tenant-a-logs"));
        assert!(!a.allows_index(Action::WriteIndex, "tenant-a-logs"));
        assert!(!a.allows_index(Action::Search, "tenant-b-logs"));
        assert!(!a.allows_cluster(Action::WlmStats));
        let ab = auth.role_set(&arcs(&["a_read", "b_crud", "mon", "nope"]));
        assert!(ab.allows_index(Action::WriteDelete, "tenant-b-x"));
        assert!(!ab.allows_index(Action::WriteDelete, "tenant-a-x"));
        assert!(!ab.allows_index(Action::IndexDelete, "tenant-b-x"));
        assert!(ab.allows_cluster(Action::WlmStats));
        assert!(!ab.allows_cluster(Action::WlmGroupCreate));
        let admin = auth.role_set(&arcs(&["admin"]));
        assert!(admin.allows_cluster(Action::Unclassified));
        assert!(admin.allows_index(Action::IndexDelete, "anything"));
        let nobody = auth.role_set(&[]);
        assert!(!nobody.allows_index(Action::Search, "tenant-a-1"));
        assert!(!nobody.allows_index_somewhere(Action::Search));
    }

    #[test]
    fn test_without_roles_file_only_admin_actions_need_the_admin_role() {
        let auth = Authorizer::without_roles_file(&["admin".to_string()]);
        let user = auth.role_set(&arcs(&["analyst"]));
        assert!(user.allows_index(Action::IndexDelete, "any"));
        assert!(user.allows_cluster(Action::TasksCancel));
        assert!(!user.allows_cluster(Action::WlmGroupCreate));
        assert!(!user.allows_cluster(Action::ClusterSettingsUpdate));
        let admin = auth.role_set(&arcs(&["analyst", "admin"]));
        assert!(admin.allows_cluster(Action::WlmGroupCreate));
    }

    #[test]
    fn test_role_names_hasher_separates_names_by_their_ends() {
        use std::hash::BuildHasher;
        let hash = |names: &[&str]| {
            let names: Vec<Arc<str>> = names.iter().map(|n| Arc::from(*n)).collect();
            BuildHasherDefault::<RoleNamesHasher>::default().hash_one(&names[..])
        };
        assert_eq!(hash(&["tenant_001", "ops"]), hash(&["tenant_001", "ops"]));
        assert_ne!(hash(&["tenant_001"]), hash(&["tenant_002"]));
        assert_ne!(hash(&["a", "b"]), hash(&["ab"]));
        assert_ne!(hash(&["x"]), hash(&["x", "x"]));
    }

    #[test]
    fn test_role_set_cache_returns_the_same_compiled_set() {
        let auth = Authorizer::without_roles_file(&["admin".to_string()]);
        let a = auth.role_set(&arcs(&["x", "y"]));
        let b = auth.role_set(&arcs(&["x", "y"]));
        assert!(Arc::ptr_eq(&a, &b));
    }
}
