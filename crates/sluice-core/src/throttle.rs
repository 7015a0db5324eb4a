//! The node-tier throttle decision (DESIGN D3–D8): whether a request of a workload group is
//! counted against a bucket's `node_limit`, and what happens when the bucket is full.
//!
//! [`decide`] is the whole decision as one function of its inputs — the cluster mode, the
//! group (none for `DEFAULT_WORKLOAD_GROUP`) and its queue handle, the caller, the buckets the
//! request's ancestors already hold, whether the request may park — and of the node's
//! [`PermitTable`]. It returns a [`Throttle`] verdict; the server counts it, logs it, awaits a
//! parked request's waiter and turns a refusal into a 429. Nothing here reads a clock or a
//! setting.
//!
//! # Decisions
//! - Only mode `enabled` refuses. In `monitor_only`, and for a group in `monitor` resiliency
//!   mode, a breach is admitted without a permit ([`Throttle::WouldThrottle`]); in `disabled`
//!   nothing is evaluated (D3, D4).
//! - `DEFAULT_WORKLOAD_GROUP` is never throttled; a username/role group with no principal (or
//!   no role) to key on admits (fail open, [`bucket_for`]).
//! - A request whose ancestor holds the same bucket is not charged again (D8). A request
//!   *holds* its bucket whether it took a permit or its breach was only monitored
//!   ([`Throttle::held_bucket`]): otherwise a nested search of a monitored request would be
//!   checked (and counted) a second time, and in `monitor_only` could take a slot freed
//!   meanwhile.
//! - Only a request of a `soft` or `enforced` group in mode `enabled` parks, and only when the
//!   caller says it may (a nested search, on its parent's execution thread, never does).
//!
//! # The dry run (issue #16)
//! A monitored request counts as what `enabled` would have done with it, one thing only:
//! - T1 — parked, while its bucket's would-be queue has room: `total_would_queue` alone, never
//!   also `total_would_throttle`; the would-be queue is the group's breaches that would have
//!   parked and still run ([`DryQueueSeen`]), bounded by [`would_park`] with the permit table's
//!   own bounds ([`QueuePolicy::refusal`]: `size_per_bucket`, the group's ceiling, the fair
//!   share). A breach counted both once, so a queued group's would-throttle read 10–40× its
//!   real 429s (`test_a_breach_would_queue_only_while_the_queue_would_have_room`).
//! - T2 — refused (429), when the group has no queue, the request may not park, or the
//!   would-be queue is full: `total_would_throttle` (`test_would_park_applies_the_queue_bounds`).
//!
//!   T1 and T2 hold for a breach of the shared tier too: a monitored request its bucket's
//!   owner denied ([`Throttle::Shared`] carries the queue it would have had) is counted by the
//!   same rule and the same would-be queue, by the server's shared tier; it once counted as
//!   would-throttle whatever its queue (`test_a_shared_tier_dry_run_counts_what_enabled_then_does`
//!   in the server's HTTP tests).
//! - T3 — not reached: `enabled` checks the group's resource share before its throttle, so a
//!   request the share check would have rejected ([`Request::share_would_reject`]) counts there
//!   only, and takes no permit here ([`Throttle::NotReached`]): a permit it took would make the
//!   next request a breach `enabled` never saw
//!   (`test_a_request_the_share_would_reject_is_not_reached`).

use std::sync::Arc;

use crate::bags::ThrottleAttribute;
use crate::bucket::{BucketKey, Principal, bucket_for};
use crate::group::{ResiliencyMode, WorkloadGroup};
use crate::mode::WlmMode;
use crate::permits::{
    Acquire, GroupQueue, Permit, PermitTable, QueuePolicy, RefusalReason, Refused, Throttled,
    Waiter, fair_share_of,
};

/// The throttle's verdict on one request.
#[derive(Debug)]
pub enum Throttle {
    /// Not counted against any bucket: mode `disabled`, DEFAULT, a group without throttling, no
    /// principal to key a username/role bucket on, or an ancestor holds the bucket.
    Unthrottled,
    /// Counted: the request holds this permit of its bucket until it ends.
    Admitted(Permit),
    /// The bucket is full and its queue has room: the request waits for a slot.
    Parked {
        /// The bucket.
        key: BucketKey,
        /// Resolves when a slot is handed over or the group's backlog is released; dropping
        /// it leaves the queue.
        waiter: Waiter,
    },
    /// The bucket is full, but the request is only monitored (`monitor_only`, or a `monitor`
    /// group): it runs without a permit, and the breach is counted as what `enabled` would
    /// have done with it, parked or refused ([`would_park`] with `queue`; T1, T2).
    WouldThrottle {
        /// The bucket, which the request still holds for its descendants (D8).
        key: BucketKey,
        /// What the table saw.
        refused: Throttled,
        /// The queue `enabled` would have offered it: the group's `size_per_bucket`, or none
        /// (`size_per_bucket` 0) when the request may not park.
        queue: QueuePolicy,
    },
    /// A monitored request the resource-share check would have rejected: `enabled` would have
    /// turned it away before its throttle, so it takes no permit and counts nothing here (T3).
    /// It holds its bucket for its descendants (D8), as a monitored breach does.
    NotReached {
        /// The bucket.
        key: BucketKey,
    },
    /// The node allowance is exhausted (always, on a shared-only group) and the group has a
    /// cluster-wide pool: the request must ask the bucket's owner for a shared lease. When it
    /// may park, it is already parked (`waiter`): enqueue-first (seed 002), so a grant or an
    /// owner push racing with the owner's answer always finds it queued; the lease then goes
    /// to the bucket's oldest waiter ([`PermitTable::grant_external`]), and this request keeps
    /// waiting on its waiter (which a node slot may also end). Without a waiter, a granted
    /// lease is the request's own, and a denial refuses it (or, monitored, is only counted).
    Shared {
        /// The bucket.
        key: BucketKey,
        /// The bucket's cluster-wide pool (`shared_limit`).
        shared_limit: u32,
        /// The parked request, when it may park (never when monitored).
        waiter: Option<Waiter>,
        /// Why it could not park, when its group has a queue it may use: full (the bucket's
        /// or the group's), or the bucket over its fair share. A denial by the owner then
        /// refuses it for that bound too, as the node tier does (`queue_full`).
        queue_refused: Option<Refused>,
        /// What the node tier saw.
        node: Throttled,
        /// `monitor_only` or a `monitor` group: a denial is counted, not enforced, and the owner
        /// never registers a waiter for it.
        monitored: bool,
        /// The queue `enabled` would have offered the request: the group's `size_per_bucket`,
        /// or none (`size_per_bucket` 0) when it may not park. A monitored request the owner
        /// denied counts as what `enabled` would have done with it, parked or refused, by
        /// [`would_park`] with this policy, as a node-tier breach does (T1, T2).
        queue: QueuePolicy,
    },
    /// The bucket is full and the group is throttled: the request is refused (429).
    Rejected {
        /// The bucket.
        key: BucketKey,
        /// What the table saw, and which bound refused it.
        refused: Refused,
    },
}

impl Throttle {
    /// The bucket the request now holds for its descendants, if it holds one it did not
    /// inherit: its permit's, or the monitored breach's (D8). `None` when unthrottled or
    /// rejected.
    pub fn held_bucket(&self) -> Option<&BucketKey> {
        match self {
            Throttle::Admitted(p) => Some(p.key()),
            Throttle::WouldThrottle { key, .. }
            | Throttle::NotReached { key }
            | Throttle::Parked { key, .. }
            | Throttle::Shared { key, .. } => Some(key),
            Throttle::Unthrottled | Throttle::Rejected { .. } => None,
        }
    }
}

/// What [`decide`] knows of the request besides its group.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The caller, for username and role buckets.
    pub principal: Option<&'a Principal>,
    /// The buckets the request's ancestors hold.
    pub held: &'a [BucketKey],
    /// Whether the request may park (not a nested search, which runs on its parent's thread).
    pub may_park: bool,
    /// The caller's value shown for a parked request (its task's sequence number).
    pub tag: u64,
    /// Whether the resource-share check would have rejected the request, had it not been only
    /// monitored (a would-be rejection counted for it): a monitored request is then not
    /// reached (T3).
    pub share_would_reject: bool,
}

/// The would-be queue of a monitored group on this node as the dry run keeps it: the breaches
/// that `enabled` would have parked and that still run (each one's place is given back when its
/// request ends, as a parked request's would be when it got its slot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DryQueueSeen {
    /// Those of the request's bucket: the would-be position of a new breach.
    pub bucket: u64,
    /// Those of the whole group.
    pub group: u64,
    /// The group's buckets holding any.
    pub waiting_buckets: u64,
}

/// What `enabled` would have done with a monitored breach that found `seen` in its group's
/// would-be queue, offered `queue`: parked it behind `Ok(ahead)` requests, or refused it for
/// the bound `Err` names (T1, T2). The bounds are the permit table's
/// ([`QueuePolicy::refusal`]); the fair share counts the buckets holding would-be places,
/// plus this one when it holds none, and not the table's `contended` mark (a bucket turned
/// away at the full ceiling), which a would-be queue of 10,000 running breaches never reaches
/// in practice.
pub fn would_park(queue: QueuePolicy, seen: DryQueueSeen) -> Result<u64, RefusalReason> {
    let sharing = seen.waiting_buckets + u64::from(seen.bucket == 0);
    let share = fair_share_of(queue.group_ceiling, sharing);
    match queue.refusal(seen.bucket, seen.group, share) {
        None => Ok(seen.bucket),
        Some(reason) => Err(reason),
    }
}

/// Decides a request's node-tier throttle (see the module docs). `group_id` is the id the
/// request was tagged with, `group` its stored definition (`None` for DEFAULT), `queue` the
/// group's queue handle (its live `node_limit` and parked counts; `None` falls back to the
/// stored limit and never parks).
///
/// Admission at once allocates nothing: the bucket key shares `group_id` and the principal's
/// names.
pub fn decide(
    table: &PermitTable,
    mode: WlmMode,
    group_id: &Arc<str>,
    group: Option<&WorkloadGroup>,
    queue: Option<&crate::sync::Arc<GroupQueue>>,
    request: Request<'_>,
) -> Throttle {
    let Request {
        principal,
        held,
        may_park,
        tag,
        share_would_reject,
    } = request;
    if mode == WlmMode::Disabled {
        return Throttle::Unthrottled;
    }
    let Some(group) = group else {
        return Throttle::Unthrottled;
    };
    if !group.throttling.is_enabled() {
        return Throttle::Unthrottled;
    }
    let Some(attribute) = group.throttling.attribute else {
        return Throttle::Unthrottled;
    };
    let limit = group.throttling.node_allowance();
    let shared = group.throttling.shared_pool();
    let principal = match attribute {
        ThrottleAttribute::Group => None,
        ThrottleAttribute::Username | ThrottleAttribute::Role => principal,
    };
    let Some(key) = bucket_for(group_id, &group.throttling, principal) else {
        return Throttle::Unthrottled;
    };
    if held.contains(&key) {
        return Throttle::Unthrottled;
    }
    let size_per_bucket = u64::from(group.queue.num_size_per_bucket());
    let monitored =
        mode == WlmMode::MonitorOnly || group.resiliency_mode == ResiliencyMode::Monitor;
    if monitored && share_would_reject {
        return Throttle::NotReached { key };
    }
    let policy = QueuePolicy::new(if may_park { size_per_bucket } else { 0 });
    let queue = queue.filter(|_| !monitored);
    let Some(queue) = queue else {
        return match table.try_acquire(&key, u64::from(limit)) {
            Ok(permit) => Throttle::Admitted(permit),
            Err(node) if shared.is_some() => Throttle::Shared {
                key,
                shared_limit: shared.unwrap_or(0),
                waiter: None,
                queue_refused: None,
                node,
                monitored,
                queue: policy,
            },
            Err(refused) if monitored => Throttle::WouldThrottle {
                key,
                refused,
                queue: policy,
            },
            Err(t) => Throttle::Rejected {
                key,
                refused: Refused {
                    reason: RefusalReason::NotQueued,
                    in_flight: t.in_flight,
                    limit: t.limit,
                    queued: 0,
                    group_queued: 0,
                },
            },
        };
    };
    let node_seen = |in_flight: u64| Throttled {
        in_flight,
        limit: queue.node_limit(),
    };
    match (table.acquire(&key, queue, policy, tag), shared) {
        (Acquire::Admitted(permit), _) => Throttle::Admitted(permit),
        (Acquire::Parked(waiter), None) => Throttle::Parked { key, waiter },
        (Acquire::Parked(waiter), Some(shared_limit)) => Throttle::Shared {
            node: node_seen(table.in_flight(&key)),
            key,
            shared_limit,
            waiter: Some(waiter),
            queue_refused: None,
            monitored: false,
            queue: policy,
        },
        // A full queue (or one the request may not use) does not rule out the shared pool: it
        // is asked without parking.
        (Acquire::Refused(refused), Some(shared_limit)) => Throttle::Shared {
            node: node_seen(refused.in_flight),
            key,
            shared_limit,
            waiter: None,
            // A request that may not park (`NotQueued`) was refused by no bound of the queue.
            queue_refused: (refused.reason != RefusalReason::NotQueued).then_some(refused),
            monitored: false,
            queue: policy,
        },
        (Acquire::Refused(refused), None) => Throttle::Rejected { key, refused },
        (Acquire::Unthrottled, _) => Throttle::Unthrottled,
    }
}

/// `attribute=value` (or `group`): a bucket as messages and stats name it.
pub fn describe_bucket(key: &BucketKey) -> String {
    match &key.value {
        None => key.attribute.as_str().to_string(),
        Some(v) => format!("{}={v}", key.attribute.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::group::{GroupLimits, validate_create};

    fn group(mode: &str, throttling: serde_json::Value) -> WorkloadGroup {
        let body = json!({"name": "g", "resiliency_mode": mode, "resource_limits": {"cpu": 0.5}, "throttling": throttling});
        let limits = GroupLimits {
            max_count: 100,
            auth_enabled: true,
        };
        validate_create(&[], &body, "gid", 1, &limits).expect("valid group")
    }

    /// An enforced group with only a `shared_limit` and a queue of `size` places per bucket.
    fn shared_group_with_queue(shared_limit: u32, size: u32) -> WorkloadGroup {
        let g = group(
            "enforced",
            json!({"attribute": "group", "shared_limit": shared_limit}),
        );
        WorkloadGroup {
            queue: crate::bags::QueueConfig::default()
                .merge(&crate::bags::parse_queue_patch(&json!({"size_per_bucket": size})).unwrap()),
            ..g
        }
    }

    fn alice() -> Principal {
        Principal {
            username: "alice".into(),
            roles: vec!["ops".into(), "analyst".into()],
        }
    }

    fn id() -> Arc<str> {
        Arc::from("gid")
    }

    /// Decides an anonymous request with no held bucket of `g`, with its queue handle `q`.
    fn queued(t: &PermitTable, mode: WlmMode, g: &WorkloadGroup, q: &Arc<GroupQueue>) -> Throttle {
        decide(t, mode, &id(), Some(g), Some(q), req(None, &[]))
    }

    fn req<'a>(principal: Option<&'a Principal>, held: &'a [BucketKey]) -> Request<'a> {
        Request {
            principal,
            held,
            may_park: true,
            tag: 0,
            share_would_reject: false,
        }
    }

    #[test]
    fn test_group_bucket_admits_up_to_the_limit_then_rejects_in_enabled() {
        let t = PermitTable::new();
        let g = group("enforced", json!({"attribute": "group", "node_limit": 1}));
        let first = decide(&t, WlmMode::Enabled, &id(), Some(&g), None, req(None, &[]));
        assert!(matches!(first, Throttle::Admitted(_)));
        let second = decide(&t, WlmMode::Enabled, &id(), Some(&g), None, req(None, &[]));
        let Throttle::Rejected { key, refused } = second else {
            panic!("expected a rejection, got {second:?}");
        };
        assert_eq!((refused.in_flight, refused.limit), (1, 1));
        assert_eq!(describe_bucket(&key), "group");
    }

    #[test]
    fn test_monitor_only_and_monitor_groups_admit_a_breach_and_hold_the_bucket() {
        let t = PermitTable::new();
        let enforced = group("enforced", json!({"attribute": "group", "node_limit": 1}));
        let monitor = group("monitor", json!({"attribute": "group", "node_limit": 1}));
        let _p = decide(
            &t,
            WlmMode::Enabled,
            &id(),
            Some(&enforced),
            None,
            req(None, &[]),
        );
        for (mode, g) in [
            (WlmMode::MonitorOnly, &enforced),
            (WlmMode::Enabled, &monitor),
        ] {
            let v = decide(&t, mode, &id(), Some(g), None, req(None, &[]));
            assert!(
                matches!(v, Throttle::WouldThrottle { .. }),
                "{mode:?}: {v:?}"
            );
            // The monitored request holds its bucket: a nested search is not checked again.
            let held = [v.held_bucket().expect("held").clone()];
            let nested = decide(&t, mode, &id(), Some(g), None, req(None, &held));
            assert!(matches!(nested, Throttle::Unthrottled));
        }
        assert_eq!(t.num_buckets(), 1);
    }

    #[test]
    fn test_disabled_default_and_unthrottled_groups_are_never_counted() {
        let t = PermitTable::new();
        let g = group("enforced", json!({"attribute": "group", "node_limit": 1}));
        let plain = group("enforced", json!({}));
        assert!(matches!(
            decide(&t, WlmMode::Disabled, &id(), Some(&g), None, req(None, &[])),
            Throttle::Unthrottled
        ));
        assert!(matches!(
            decide(&t, WlmMode::Enabled, &id(), None, None, req(None, &[])),
            Throttle::Unthrottled
        ));
        assert!(matches!(
            decide(
                &t,
                WlmMode::Enabled,
                &id(),
                Some(&plain),
                None,
                req(None, &[])
            ),
            Throttle::Unthrottled
        ));
        assert_eq!(t.num_buckets(), 0);
    }

    #[test]
    fn test_username_and_role_buckets_key_on_the_principal_and_fail_open_without_one() {
        let t = PermitTable::new();
        let by_user = group(
            "enforced",
            json!({"attribute": "username", "node_limit": 1}),
        );
        let by_role = group("enforced", json!({"attribute": "role", "node_limit": 1}));
        assert!(matches!(
            decide(
                &t,
                WlmMode::Enabled,
                &id(),
                Some(&by_user),
                None,
                req(None, &[])
            ),
            Throttle::Unthrottled
        ));
        let a = decide(
            &t,
            WlmMode::Enabled,
            &id(),
            Some(&by_user),
            None,
            req(Some(&alice()), &[]),
        );
        assert_eq!(
            describe_bucket(a.held_bucket().expect("held")),
            "username=alice"
        );
        let r = decide(
            &t,
            WlmMode::Enabled,
            &id(),
            Some(&by_role),
            None,
            req(Some(&alice()), &[]),
        );
        // The smallest role.
        assert_eq!(
            describe_bucket(r.held_bucket().expect("held")),
            "role=analyst"
        );
    }

    #[test]
    fn test_a_bucket_held_by_an_ancestor_is_not_charged_again() {
        let t = PermitTable::new();
        let g = group("enforced", json!({"attribute": "group", "node_limit": 1}));
        let parent = decide(&t, WlmMode::Enabled, &id(), Some(&g), None, req(None, &[]));
        let held = [parent.held_bucket().expect("held").clone()];
        let child = decide(
            &t,
            WlmMode::Enabled,
            &id(),
            Some(&g),
            None,
            req(None, &held),
        );
        assert!(matches!(child, Throttle::Unthrottled));
        assert!(child.held_bucket().is_none());
    }

    #[test]
    fn test_a_full_bucket_of_a_queued_group_parks_then_refuses_when_the_queue_is_full() {
        let t = PermitTable::new();
        let g = group("soft", json!({"attribute": "group", "node_limit": 1}));
        let mut g = g;
        g.queue.size_per_bucket = Some(1);
        let q = GroupQueue::new(1);
        let first = queued(&t, WlmMode::Enabled, &g, &q);
        assert!(matches!(first, Throttle::Admitted(_)));
        let second = queued(&t, WlmMode::Enabled, &g, &q);
        assert!(matches!(second, Throttle::Parked { .. }), "{second:?}");
        let third = queued(&t, WlmMode::Enabled, &g, &q);
        let Throttle::Rejected { refused, .. } = third else {
            panic!("expected a refusal, got {third:?}");
        };
        assert_eq!(refused.reason, RefusalReason::BucketQueueFull);
        assert_eq!((refused.in_flight, refused.queued), (1, 1));
        // A request that may not park (a nested search) is refused, never parked.
        let nested = Request {
            may_park: false,
            ..req(None, &[])
        };
        let fourth = decide(&t, WlmMode::Enabled, &id(), Some(&g), Some(&q), nested);
        assert!(matches!(fourth, Throttle::Rejected { .. }), "{fourth:?}");
        drop(second);
        drop(first);
        assert_eq!(t.num_buckets(), 0);
    }

    #[test]
    fn test_monitored_breach_of_a_queued_group_would_queue_and_never_parks() {
        let t = PermitTable::new();
        let mut g = group("monitor", json!({"attribute": "group", "node_limit": 1}));
        g.queue.size_per_bucket = Some(5);
        let q = GroupQueue::new(1);
        let _first = queued(&t, WlmMode::Enabled, &g, &q);
        let v = queued(&t, WlmMode::Enabled, &g, &q);
        let Throttle::WouldThrottle { queue, .. } = v else {
            panic!("expected a monitored breach, got {v:?}");
        };
        assert_eq!(queue, QueuePolicy::new(5));
        assert_eq!(q.num_parked(), 0);
        // A nested search may not park: `enabled` would have refused it.
        let nested = Request {
            may_park: false,
            ..req(None, &[])
        };
        let v = decide(&t, WlmMode::Enabled, &id(), Some(&g), Some(&q), nested);
        let Throttle::WouldThrottle { queue, .. } = v else {
            panic!("expected a monitored breach, got {v:?}");
        };
        assert_eq!(queue.size_per_bucket, 0);
    }

    #[test]
    fn test_would_park_applies_the_queue_bounds() {
        let seen = |bucket, group, waiting_buckets| DryQueueSeen {
            bucket,
            group,
            waiting_buckets,
        };
        // No queue: refused.
        assert_eq!(
            would_park(QueuePolicy::new(0), DryQueueSeen::default()),
            Err(RefusalReason::NotQueued)
        );
        // The bucket's queue: parked behind those ahead while they are fewer than its size.
        let q = QueuePolicy::new(2);
        assert_eq!(would_park(q, seen(0, 0, 0)), Ok(0));
        assert_eq!(would_park(q, seen(1, 1, 1)), Ok(1));
        assert_eq!(
            would_park(q, seen(2, 2, 1)),
            Err(RefusalReason::BucketQueueFull)
        );
        // The group's ceiling binds across buckets, before the bucket's size.
        let small = QueuePolicy {
            size_per_bucket: 5,
            group_ceiling: 4,
        };
        assert_eq!(
            would_park(small, seen(0, 4, 2)),
            Err(RefusalReason::GroupQueueFull)
        );
        // The fair share: a bucket holding half of a ceiling shared by two parks no more; a
        // bucket alone may fill it; a newcomer counts itself among the sharers.
        assert_eq!(
            would_park(small, seen(2, 3, 2)),
            Err(RefusalReason::OverFairShare { share: 2 })
        );
        assert_eq!(would_park(small, seen(3, 3, 1)), Ok(3));
        assert_eq!(would_park(small, seen(0, 3, 1)), Ok(0));
    }

    #[test]
    fn test_a_request_the_share_would_reject_is_not_reached() {
        let t = PermitTable::new();
        let enforced = group("enforced", json!({"attribute": "group", "node_limit": 1}));
        let monitor = group("monitor", json!({"attribute": "group", "node_limit": 1}));
        let rejected = Request {
            share_would_reject: true,
            ..req(None, &[])
        };
        for (mode, g) in [
            (WlmMode::MonitorOnly, &enforced),
            (WlmMode::Enabled, &monitor),
        ] {
            // Under the limit it takes no permit, over it it is no breach: `enabled` would have
            // rejected it for the share before its throttle.
            let v = decide(&t, mode, &id(), Some(g), None, rejected);
            assert!(matches!(v, Throttle::NotReached { .. }), "{mode:?}: {v:?}");
            assert_eq!(t.num_buckets(), 0, "{mode:?}");
            let held = [v.held_bucket().expect("held").clone()];
            let nested = decide(&t, mode, &id(), Some(g), None, req(None, &held));
            assert!(matches!(nested, Throttle::Unthrottled), "{mode:?}");
            let _p = decide(&t, mode, &id(), Some(g), None, req(None, &[]));
            let v = decide(&t, mode, &id(), Some(g), None, rejected);
            assert!(matches!(v, Throttle::NotReached { .. }), "{mode:?}: {v:?}");
        }
    }

    #[test]
    fn test_a_released_group_queue_admits_without_a_permit() {
        let t = PermitTable::new();
        let mut g = group("enforced", json!({"attribute": "group", "node_limit": 1}));
        g.queue.size_per_bucket = Some(5);
        let q = GroupQueue::new(1);
        t.release_group(&q);
        let v = queued(&t, WlmMode::Enabled, &g, &q);
        assert!(matches!(v, Throttle::Unthrottled), "{v:?}");
    }

    #[test]
    fn test_an_exhausted_node_allowance_goes_to_the_shared_tier() {
        let t = PermitTable::new();
        // node_limit 1 + shared_limit 2, no queue: the first is a node permit, the second asks
        // the shared tier without parking.
        let g = group(
            "enforced",
            json!({"attribute": "group", "node_limit": 1, "shared_limit": 2}),
        );
        let first = decide(&t, WlmMode::Enabled, &id(), Some(&g), None, req(None, &[]));
        assert!(matches!(first, Throttle::Admitted(_)), "{first:?}");
        let second = decide(&t, WlmMode::Enabled, &id(), Some(&g), None, req(None, &[]));
        let Throttle::Shared {
            shared_limit,
            waiter,
            node,
            monitored,
            ..
        } = &second
        else {
            panic!("expected the shared tier, got {second:?}");
        };
        assert_eq!(
            (*shared_limit, waiter.is_none(), *monitored),
            (2, true, false)
        );
        assert_eq!((node.in_flight, node.limit), (1, 1));
        // Monitored requests ask too, flagged so a denial is only counted.
        let m = decide(
            &t,
            WlmMode::MonitorOnly,
            &id(),
            Some(&g),
            None,
            req(None, &[]),
        );
        assert!(
            matches!(
                m,
                Throttle::Shared {
                    monitored: true,
                    queue: QueuePolicy {
                        size_per_bucket: 0,
                        ..
                    },
                    ..
                }
            ),
            "{m:?}"
        );
        drop(first);
        assert_eq!(
            t.num_buckets(),
            0,
            "asking the shared tier leaves nothing in the node table"
        );
    }

    #[test]
    fn test_a_shared_only_group_parks_before_it_asks_the_owner() {
        let t = PermitTable::new();
        let g = shared_group_with_queue(3, 5);
        let q = GroupQueue::new(u64::from(g.throttling.node_allowance()));
        let v = queued(&t, WlmMode::Enabled, &g, &q);
        let Throttle::Shared {
            waiter: Some(w),
            key,
            ..
        } = v
        else {
            panic!("expected a parked shared ask, got {v:?}");
        };
        // Enqueue-first: the request is in its bucket's queue before the acquire is sent.
        assert_eq!(t.num_parked(&key), 1);
        assert_eq!(t.grant_external(&key, 9), Ok(w.tag()));
        drop(w);
        assert_eq!(t.take_orphaned_grants(), vec![(key, 9)]);
        assert_eq!(t.num_buckets(), 0);
    }

    #[test]
    fn test_a_monitored_shared_ask_carries_the_queue_enabled_would_have_offered() {
        let t = PermitTable::new();
        let g = shared_group_with_queue(1, 2);
        let q = GroupQueue::new(u64::from(g.throttling.node_allowance()));
        let size_of = |v: &Throttle| match v {
            Throttle::Shared {
                monitored: true,
                waiter: None,
                queue,
                ..
            } => queue.size_per_bucket,
            other => panic!("expected a monitored shared ask, got {other:?}"),
        };
        assert_eq!(size_of(&queued(&t, WlmMode::MonitorOnly, &g, &q)), 2);
        // A request that may not park would have had no queue.
        let unparked = decide(
            &t,
            WlmMode::MonitorOnly,
            &id(),
            Some(&g),
            Some(&q),
            Request {
                may_park: false,
                ..req(None, &[])
            },
        );
        assert_eq!(size_of(&unparked), 0);
        assert_eq!(q.num_parked(), 0, "a monitored ask never parks");
    }

    #[test]
    fn test_a_shared_ask_that_found_its_queue_full_says_so() {
        // A shared-only group with one queue place: the first request parks, the second asks
        // the owner without parking and carries the bound that kept it out of the queue; a
        // request that may not park carries none.
        let t = PermitTable::new();
        let g = shared_group_with_queue(1, 1);
        let q = GroupQueue::new(u64::from(g.throttling.node_allowance()));
        let first = queued(&t, WlmMode::Enabled, &g, &q);
        assert!(
            matches!(
                first,
                Throttle::Shared {
                    waiter: Some(_),
                    queue_refused: None,
                    ..
                }
            ),
            "{first:?}"
        );
        let second = queued(&t, WlmMode::Enabled, &g, &q);
        let Throttle::Shared {
            waiter: None,
            queue_refused: Some(refused),
            ..
        } = &second
        else {
            panic!("expected a shared ask refused a queue place, got {second:?}");
        };
        assert_eq!(
            (refused.reason, refused.queued),
            (RefusalReason::BucketQueueFull, 1)
        );
        let unparked = decide(
            &t,
            WlmMode::Enabled,
            &id(),
            Some(&g),
            Some(&q),
            Request {
                may_park: false,
                ..req(None, &[])
            },
        );
        assert!(
            matches!(
                unparked,
                Throttle::Shared {
                    waiter: None,
                    queue_refused: None,
                    ..
                }
            ),
            "{unparked:?}"
        );
    }
}
