//! Throttle buckets: where a request is counted for a group's `node_limit`.

use crate::bags::ThrottleAttribute;
use crate::group::WorkloadGroup;

/// The authenticated caller of a request, from sluice's own authentication (DESIGN D6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Principal {
    /// The username.
    pub username: String,
    /// The roles, in any order.
    pub roles: Vec<String>,
}

/// Where a throttle counts a request: a structured key, never a joined string, so no username
/// or role can collide with another bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    /// The group id.
    pub group_id: String,
    /// The dimension.
    pub attribute: ThrottleAttribute,
    /// The username or role; `None` for the whole-group bucket.
    pub value: Option<String>,
}

/// Returns the bucket a request of `group` by `principal` counts against, or `None` when the
/// request is not throttled: the group has no throttling, or it throttles per username/role and
/// the request has no principal (or no role) to key on (fail open).
///
/// A caller with several roles is charged to the lexicographically smallest, so one caller
/// always lands in the same bucket.
pub fn bucket_for(group: &WorkloadGroup, principal: Option<&Principal>) -> Option<BucketKey> {
    if !group.throttling.is_enabled() {
        return None;
    }
    let attribute = group.throttling.attribute?;
    let value = match attribute {
        ThrottleAttribute::Group => None,
        ThrottleAttribute::Username => {
            let user = &principal?.username;
            if user.is_empty() {
                return None;
            }
            Some(user.clone())
        }
        ThrottleAttribute::Role => Some(principal?.roles.iter().min()?.clone()),
    };
    Some(BucketKey {
        group_id: group.id.clone(),
        attribute,
        value,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::group::{GroupLimits, validate_create};

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

    fn alice(roles: &[&str]) -> Principal {
        Principal {
            username: "alice".into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn test_group_attribute_uses_one_bucket_whoever_calls() {
        let g = group(json!({"attribute": "group", "node_limit": 3}));
        let expected = Some(BucketKey {
            group_id: "gid".into(),
            attribute: ThrottleAttribute::Group,
            value: None,
        });
        assert_eq!(bucket_for(&g, None), expected);
        assert_eq!(bucket_for(&g, Some(&alice(&["r"]))), expected);
    }

    #[test]
    fn test_username_attribute_buckets_per_user_and_skips_anonymous() {
        let g = group(json!({"attribute": "username", "node_limit": 3}));
        let b = bucket_for(&g, Some(&alice(&[]))).unwrap();
        assert_eq!(
            (b.attribute, b.value.as_deref()),
            (ThrottleAttribute::Username, Some("alice"))
        );
        assert_eq!(bucket_for(&g, None), None);
        assert_eq!(bucket_for(&g, Some(&Principal::default())), None);
    }

    #[test]
    fn test_role_attribute_charges_smallest_role_and_skips_roleless() {
        let g = group(json!({"attribute": "role", "node_limit": 3}));
        let b = bucket_for(&g, Some(&alice(&["writer", "admin", "reader"]))).unwrap();
        assert_eq!(
            (b.attribute, b.value.as_deref()),
            (ThrottleAttribute::Role, Some("admin"))
        );
        assert_eq!(bucket_for(&g, Some(&alice(&[]))), None);
        assert_eq!(bucket_for(&g, None), None);
    }

    #[test]
    fn test_unthrottled_group_has_no_bucket() {
        assert_eq!(bucket_for(&group(json!({})), Some(&alice(&["r"]))), None);
    }

    #[test]
    fn test_separator_characters_in_names_cannot_collide_buckets() {
        let g = group(json!({"attribute": "username", "node_limit": 3}));
        let user = |u: &str| Principal {
            username: u.into(),
            roles: vec![],
        };
        // A joined "<group>:<attr>:<value>" key would make these equal.
        let a = bucket_for(&g, Some(&user("a:b"))).unwrap();
        let b = BucketKey {
            group_id: "gid:username:a".into(),
            attribute: ThrottleAttribute::Username,
            value: Some("b".into()),
        };
        assert_ne!(a, b);
        assert_ne!(
            bucket_for(&g, Some(&user("a,b"))),
            bucket_for(&g, Some(&user("a")))
        );
    }
}
