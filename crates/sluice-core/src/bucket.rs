//! Throttle buckets: where a request is counted for a group's `node_limit`.
//!
//! A [`BucketKey`] is built on every admission and cloned into the permit that holds it, so it
//! is made of `Arc<str>` parts: building one from a cached group id and a cached [`Principal`]
//! (see [`bucket_for`]) and cloning it only bump reference counts, never allocate.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::bags::{ThrottleAttribute, ThrottleConfig};

/// The authenticated caller of a request, from sluice's own authentication (DESIGN D6).
///
/// The names are `Arc<str>` so that a principal built once per authenticated user and reused
/// keys its buckets without allocating.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Principal {
    /// The username.
    pub username: Arc<str>,
    /// The roles, in any order.
    pub roles: Vec<Arc<str>>,
}

impl Principal {
    /// Whether the principal has any of `roles`.
    pub fn has_any_role(&self, roles: &[String]) -> bool {
        self.roles
            .iter()
            .any(|r| roles.iter().any(|x| x.as_str() == &**r))
    }
}

/// Where a throttle counts a request: a structured key, never a joined string, so no username
/// or role can collide with another bucket.
///
/// Cloning never allocates (every part is an `Arc<str>` or `Copy`); equality compares the
/// parts, and is a pointer comparison when both sides share the same `Arc`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BucketKey {
    /// The group id.
    pub group_id: Arc<str>,
    /// The dimension.
    pub attribute: ThrottleAttribute,
    /// The username or role; `None` for the whole-group bucket.
    pub value: Option<Arc<str>>,
}

impl BucketKey {
    /// The key as the shared tier names it between nodes (ring placement, owner tables,
    /// offers): a JSON array `[group_id, attribute, value or null]`. Structured, so no user or
    /// role name can make two keys collide, and it reads back with [`BucketKey::from_wire`].
    pub fn to_wire(&self) -> String {
        // Written straight from the tuple: every shared-tier request names its bucket, and a
        // `serde_json::Value` built first cost several times as much.
        serde_json::to_string(&(
            &*self.group_id,
            self.attribute.as_str(),
            self.value.as_deref(),
        ))
        .expect("a tuple of strings and null always serialises")
    }

    /// Reads a key written by [`BucketKey::to_wire`]; `None` when `s` is not one.
    pub fn from_wire(s: &str) -> Option<BucketKey> {
        // Read straight into the tuple (no `serde_json::Value` tree): the shared tier reads a
        // bucket's name back as each of its requests ends.
        let (group, attribute, value): (String, String, Option<String>) =
            serde_json::from_str(s).ok()?;
        let attribute = ThrottleAttribute::parse(&attribute)?;
        if value.is_some() != attribute.needs_principal() {
            return None;
        }
        Some(BucketKey {
            group_id: Arc::from(group),
            attribute,
            value: value.map(Arc::from),
        })
    }
}

/// Hashes the parts in as few bytes as the derived impl would, less the two 8-byte enum
/// discriminants: the attribute and the presence of a value fit in one byte. Equal keys write
/// the same bytes, as `Hash` requires; the `0xff` after each `str` keeps the parts apart.
impl Hash for BucketKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let attribute = match self.attribute {
            ThrottleAttribute::Group => 0u8,
            ThrottleAttribute::Username => 1,
            ThrottleAttribute::Role => 2,
        };
        self.group_id.hash(state);
        match &self.value {
            None => state.write_u8(attribute),
            Some(value) => {
                state.write_u8(attribute | 0x10);
                value.hash(state);
            }
        }
    }
}

/// Returns the bucket a request of the group `group_id`, throttled by `throttling`, by
/// `principal` counts against, or `None` when the request is not throttled: the group has no
/// throttling, or it throttles per username/role and the request has no principal (or no role)
/// to key on (fail open).
///
/// A caller with several roles is charged to the lexicographically smallest, so one caller
/// always lands in the same bucket.
///
/// Allocation-free: the key shares `group_id` and the principal's name. The server keeps one
/// `Arc<str>` per group id next to the group (its `WorkloadGroup::id` is a `String`) and passes
/// that, not a fresh copy.
pub fn bucket_for(
    group_id: &Arc<str>,
    throttling: &ThrottleConfig,
    principal: Option<&Principal>,
) -> Option<BucketKey> {
    if !throttling.is_enabled() {
        return None;
    }
    let attribute = throttling.attribute?;
    let value = match attribute {
        ThrottleAttribute::Group => None,
        ThrottleAttribute::Username => {
            let user = &principal?.username;
            if user.is_empty() {
                return None;
            }
            Some(Arc::clone(user))
        }
        ThrottleAttribute::Role => Some(Arc::clone(principal?.roles.iter().min()?)),
    };
    Some(BucketKey {
        group_id: Arc::clone(group_id),
        attribute,
        value,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::group::{GroupLimits, WorkloadGroup, validate_create};

    #[test]
    fn test_has_any_role_matches_whole_names_only() {
        let p = Principal {
            username: "alice".into(),
            roles: vec!["analyst".into(), "ops".into()],
        };
        assert!(p.has_any_role(&["admin".to_string(), "ops".to_string()]));
        assert!(!p.has_any_role(&["admin".to_string(), "analy".to_string()]));
        assert!(!p.has_any_role(&[]));
        assert!(!Principal::default().has_any_role(&["ops".to_string()]));
    }

    fn group(throttling: serde_json::Value) -> WorkloadGroup {
        let body = json!({"name": "g", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.5}, "throttling": throttling});
        validate_create(
            &[],
            &body,
            "gid",
            1,
            &GroupLimits {
                max_count: 100,
                auth_enabled: true,
            },
        )
        .unwrap()
    }

    /// The bucket of a request by `principal` in `g`, keyed by the group's cached id.
    fn bucket(g: &WorkloadGroup, principal: Option<&Principal>) -> Option<BucketKey> {
        let id: Arc<str> = Arc::from(g.id.as_str());
        bucket_for(&id, &g.throttling, principal)
    }

    fn user(name: &str, roles: &[&str]) -> Principal {
        Principal {
            username: name.into(),
            roles: roles.iter().map(|r| Arc::from(*r)).collect(),
        }
    }

    fn alice(roles: &[&str]) -> Principal {
        user("alice", roles)
    }

    #[test]
    fn test_group_attribute_uses_one_bucket_whoever_calls() {
        let g = group(json!({"attribute": "group", "node_limit": 3}));
        let expected = Some(BucketKey {
            group_id: "gid".into(),
            attribute: ThrottleAttribute::Group,
            value: None,
        });
        assert_eq!(bucket(&g, None), expected);
        assert_eq!(bucket(&g, Some(&alice(&["r"]))), expected);
    }

    #[test]
    fn test_username_attribute_buckets_per_user_and_skips_anonymous() {
        let g = group(json!({"attribute": "username", "node_limit": 3}));
        let b = bucket(&g, Some(&alice(&[]))).unwrap();
        assert_eq!(
            (b.attribute, b.value.as_deref()),
            (ThrottleAttribute::Username, Some("alice"))
        );
        assert_eq!(bucket(&g, None), None);
        assert_eq!(bucket(&g, Some(&Principal::default())), None);
    }

    #[test]
    fn test_role_attribute_charges_smallest_role_and_skips_roleless() {
        let g = group(json!({"attribute": "role", "node_limit": 3}));
        let b = bucket(&g, Some(&alice(&["writer", "admin", "reader"]))).unwrap();
        assert_eq!(
            (b.attribute, b.value.as_deref()),
            (ThrottleAttribute::Role, Some("admin"))
        );
        assert_eq!(bucket(&g, Some(&alice(&[]))), None);
        assert_eq!(bucket(&g, None), None);
    }

    #[test]
    fn test_unthrottled_group_has_no_bucket() {
        assert_eq!(bucket(&group(json!({})), Some(&alice(&["r"]))), None);
    }

    #[test]
    fn test_key_shares_the_cached_id_and_principal_names() {
        let id: Arc<str> = Arc::from("gid");
        let p = alice(&["reader"]);
        let g = group(json!({"attribute": "group", "node_limit": 3}));
        let k = bucket_for(&id, &g.throttling, Some(&p)).unwrap();
        assert!(Arc::ptr_eq(&k.group_id, &id));
        let g = group(json!({"attribute": "username", "node_limit": 3}));
        let k = bucket_for(&id, &g.throttling, Some(&p)).unwrap();
        assert!(Arc::ptr_eq(k.value.as_ref().unwrap(), &p.username));
        let g = group(json!({"attribute": "role", "node_limit": 3}));
        let k = bucket_for(&id, &g.throttling, Some(&p)).unwrap();
        assert!(Arc::ptr_eq(k.value.as_ref().unwrap(), &p.roles[0]));
    }

    #[test]
    fn test_equal_keys_from_distinct_allocations_hash_equal() {
        use std::hash::BuildHasher;
        let h = std::hash::RandomState::new();
        let k = |g: &str, a, v: Option<&str>| BucketKey {
            group_id: Arc::from(g),
            attribute: a,
            value: v.map(Arc::from),
        };
        for (a, v) in [
            (ThrottleAttribute::Group, None),
            (ThrottleAttribute::Username, Some("alice")),
            (ThrottleAttribute::Role, Some("")),
        ] {
            let (x, y) = (k("gid", a, v), k("gid", a, v));
            assert!(!Arc::ptr_eq(&x.group_id, &y.group_id));
            assert_eq!(h.hash_one(&x), h.hash_one(&y));
        }
        // Different parts hash differently here (not required by Hash, but a cheap sanity check
        // that every part is written).
        assert_ne!(
            h.hash_one(k("g", ThrottleAttribute::Username, Some("a"))),
            h.hash_one(k("g", ThrottleAttribute::Role, Some("a")))
        );
        assert_ne!(
            h.hash_one(k("g", ThrottleAttribute::Username, Some(""))),
            h.hash_one(k("g", ThrottleAttribute::Username, None))
        );
    }

    #[test]
    fn test_separator_characters_in_names_cannot_collide_buckets() {
        let g = group(json!({"attribute": "username", "node_limit": 3}));
        // A joined "<group>:<attr>:<value>" key would make these equal.
        let a = bucket(&g, Some(&user("a:b", &[]))).unwrap();
        let b = BucketKey {
            group_id: "gid:username:a".into(),
            attribute: ThrottleAttribute::Username,
            value: Some("b".into()),
        };
        assert_ne!(a, b);
        assert_ne!(
            bucket(&g, Some(&user("a,b", &[]))),
            bucket(&g, Some(&user("a", &[])))
        );
        // The same name as a username and as a role are different buckets.
        let r = group(json!({"attribute": "role", "node_limit": 3}));
        assert_ne!(
            bucket(&g, Some(&user("x|y", &["x|y"]))),
            bucket(&r, Some(&user("x|y", &["x|y"])))
        );
    }

    #[test]
    fn test_wire_form_round_trips_and_never_collides() {
        let tricky = BucketKey {
            group_id: Arc::from("g\",\"username"),
            attribute: ThrottleAttribute::Username,
            value: Some(Arc::from("a\"]b")),
        };
        let whole = BucketKey {
            group_id: Arc::from("g"),
            attribute: ThrottleAttribute::Group,
            value: None,
        };
        for k in [&tricky, &whole] {
            assert_eq!(BucketKey::from_wire(&k.to_wire()).as_ref(), Some(k));
        }
        assert_ne!(tricky.to_wire(), whole.to_wire());
        // The wire form crosses nodes, which may run other builds: it must not change.
        assert_eq!(whole.to_wire(), r#"["g","group",null]"#);
        assert_eq!(tricky.to_wire(), r#"["g\",\"username","username","a\"]b"]"#);
        for bad in [
            "",
            "[]",
            "[\"g\",\"group\"]",
            "[\"g\",\"group\",null,null]",
            "{\"g\":\"group\"}",
            "[\"g\",\"group\",\"x\"]",
            "[\"g\",\"username\",null]",
            "[1,\"group\",null]",
        ] {
            assert_eq!(BucketKey::from_wire(bad), None, "{bad}");
        }
    }
}
