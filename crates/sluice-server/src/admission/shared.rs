//! The shared tier (`throttling.shared_limit`, seed 004) as admission runs it, with its
//! queueing (seed 002, cluster part). The protocol — ring, owners, leases, offers — is
//! `sluice-cluster`'s (`shared/`); this module turns its answers into admission outcomes.
//!
//! # Decisions
//! - Local first: only a request the node tier cannot admit (its bucket's `node_limit` is
//!   used up, or the group is shared-only) asks the bucket's owner.
//! - Enqueue-first: a request that may park is parked *before* the acquire is sent
//!   ([`sluice_core::throttle::Throttle::Shared`]), and the owner registers this node as a
//!   waiter inside the denial. A granted lease goes to the bucket's oldest parked request (FIFO
//!   within the bucket), which may be another one; this request keeps waiting, and is woken by
//!   a node slot, a later grant, or an owner's offer ([`OfferToQueue`]).
//! - Fail open (seed 004, DESIGN D12): owner unreachable, deadline passed, empty ring or owner
//!   at its hard cap → admitted without a lease, counted in `total_shared_fail_open`, logged
//!   at WARN at most once a minute per group — within the coordinator's allowance (K1 of
//!   `sluice-cluster`'s coordinator: leases plus fail-open slots ≤ `shared_limit` per bucket
//!   per node), so an owner's loss over-admits at most `shared_limit` per node. Beyond the
//!   allowance the request parks (if it may) or is refused naming the unavailable tier.
//! - A monitored request (`monitor_only`, a `monitor` group) asks without registering as a
//!   waiter; a denial is counted in `total_shared_throttled` and as what `enabled` would have
//!   done with it, by the node tier's rule ([`super::throttle::dry_breach`],
//!   `sluice_core::throttle` T1, T2): `total_would_queue` while its bucket's would-be queue has
//!   room (`enabled` would have parked it until a lease came), else `total_would_throttle`; and
//!   the request runs. (It once counted as would-throttle whatever its queue: a queued group's
//!   dry run predicted a 429 for each request `enabled` would only have parked.)

use std::sync::atomic::Ordering;

use futures::FutureExt;
use sluice_cluster::shared::coordinator::{Acquired, OfferAnswer, OfferSink};
use sluice_cluster::shared::owner::OwnerEvents;
use sluice_core::BucketKey;
use sluice_core::permits::{Grant, QueuePolicy, Refused, Throttled, Waiter};
use sluice_engine::{EngineError, ErrorCode};

use super::queue::Wait;
use super::throttle::{Granted, describe_bucket, log_decision, why as why_queue};
use crate::error::ApiError;
use crate::logging::{DecisionKind, Tier};
use crate::state::AppState;
use crate::workload::GroupEntry;

/// How often a group's fail-open admissions are logged at WARN: once a minute is enough to see
/// an outage in the logs without a line per request during one.
const FAIL_OPEN_LOG_EVERY_SECS: u64 = 60;

/// A request the shared tier must decide ([`sluice_core::throttle::Throttle::Shared`]).
#[derive(Debug)]
pub struct Ask {
    /// The bucket.
    pub key: BucketKey,
    /// Its cluster-wide pool.
    pub shared_limit: u32,
    /// The request, already parked, when it may park.
    pub waiter: Option<Waiter>,
    /// The bound of its group's queue that kept it from parking, if one did: a denial then
    /// refuses it for the queue too, counted and logged as a full queue.
    pub queue_refused: Option<Refused>,
    /// What the node tier saw.
    pub node: Throttled,
    /// Only monitored: a denial is counted, not enforced.
    pub monitored: bool,
    /// The queue `enabled` would have offered a monitored request (its would-be queue).
    pub queue: QueuePolicy,
}

/// Asks the bucket's owner for a lease (see the module docs): the request runs now with it,
/// keeps waiting in its queue, or is refused.
pub async fn ask(st: &AppState, entry: &GroupEntry, ask: Ask) -> Result<Wait, ApiError> {
    let Ask {
        key,
        shared_limit,
        waiter,
        queue_refused,
        node,
        monitored,
        queue,
    } = ask;
    // While gossip is split from live nodes of the same metastore, each side enforces its
    // share of the limit on a ring of its own (S5 of `sluice-cluster`'s `split.rs`): the
    // whole limit on each would allow it once per side.
    let split = st.cluster.split();
    let limit = split.share_of(u64::from(shared_limit));
    // Worded only for a refusal: a granted ask formats nothing.
    let of_limit = || match split.unjoined.is_empty() {
        true => format!("its cluster-wide limit of {limit} (shared_limit)"),
        false => format!(
            "this side's share, {limit}, of its cluster-wide limit of {shared_limit} (shared_limit; the cluster is split: {})",
            split.describe_side()
        ),
    };
    let stats = &entry.stats;
    let granted = |lease| {
        Wait::Granted(Granted {
            permit: None,
            lease,
            bucket: Some(key.clone()),
            ..Granted::default()
        })
    };
    if limit == 0 {
        if !monitored {
            return Err(no_share(st, entry, &key, shared_limit, &split));
        }
        // Only monitored: what a share of nothing would refuse is counted, and it runs.
        // `enabled` refuses it whatever its queue (503 above), so it would have had none: a
        // would-throttle.
        let refusal = Refusal {
            node: &node,
            queue: queue_refused.as_ref(),
            monitored: Some(QueuePolicy::new(0)),
        };
        let why = format!("and {} allows none here", of_limit());
        return denied(st, entry, &key, &refusal, &why).map(Wait::Granted);
    }
    let coordinator = &st.cluster.shared().coordinator;
    let bucket = key.to_wire();
    let acquired = coordinator
        .acquire(&bucket, limit, waiter.is_some(), acquire_timeout(st))
        .await;
    if let Acquired::Lease(lease) = &acquired
        && lease.is_reused()
    {
        stats.total_shared_reused.inc();
    }
    // FIFO: a slot a parked request asked for goes to the bucket's oldest parked request, and
    // this one keeps waiting; unless the oldest is this one (the only one parked, as on an idle
    // cluster): it runs on its own slot now, and did not wait (neither queued nor pushed).
    let to_oldest = |lease, mut waiter: Waiter| {
        let token = coordinator.hand(lease);
        match st.workload.permits.grant_external(&key, token) {
            Ok(tag) if tag == waiter.tag() => match (&mut waiter).now_or_never() {
                Some(Grant::External(token)) => Ok(granted(coordinator.take_handed(token))),
                Some(Grant::Permit(permit)) => Ok(Wait::Granted(Granted {
                    permit: Some(permit),
                    lease: None,
                    bucket: Some(key.clone()),
                    ..Granted::default()
                })),
                Some(Grant::Unthrottled) => Ok(granted(None)),
                None => Ok(Wait::Slot {
                    key: key.clone(),
                    waiter,
                }),
            },
            Ok(_) => Ok(Wait::Slot {
                key: key.clone(),
                waiter,
            }),
            Err(token) => {
                drop(coordinator.take_handed(token));
                Ok(Wait::Slot {
                    key: key.clone(),
                    waiter,
                })
            }
        }
    };
    match (acquired, waiter) {
        (Acquired::Lease(lease), None) => {
            stats.total_shared_acquired.inc();
            Ok(granted(Some(lease)))
        }
        (Acquired::Lease(lease), Some(waiter)) => {
            stats.total_shared_acquired.inc();
            to_oldest(lease, waiter)
        }
        (Acquired::Denied { .. } | Acquired::Unavailable { .. }, Some(waiter)) => {
            // Parked and registered (or to be retried by the backstop sweep).
            Ok(Wait::Slot { key, waiter })
        }
        (Acquired::FailOpen { lease, reason }, waiter) => {
            stats.total_shared_fail_open.inc();
            let now = super::now_secs();
            let last = stats.fail_open_logged_at.load(Ordering::Relaxed);
            if log_due(last, now)
                && stats
                    .fail_open_logged_at
                    .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    group = %entry.name(),
                    bucket = %describe_bucket(&key),
                    "shared tier unavailable ({reason}): admitting without a cluster-wide lease (fail open; at most {limit} such requests of the bucket on this node); logged at most once a minute, counted in total_shared_fail_open"
                );
            }
            match waiter {
                // Room the owner could not be asked about goes to the oldest parked request
                // too: newcomers do not overtake those parked before the owner was lost (K17 of
                // the coordinator).
                Some(waiter) => to_oldest(lease, waiter),
                None => Ok(granted(Some(lease))),
            }
        }
        (Acquired::Denied { in_use, .. }, None) => {
            let why = format!("and {in_use} of {} are in use", of_limit());
            let refusal = Refusal {
                node: &node,
                queue: queue_refused.as_ref(),
                monitored: monitored.then_some(queue),
            };
            denied(st, entry, &key, &refusal, &why).map(Wait::Granted)
        }
        (Acquired::Unavailable { reason, allowance }, None) => {
            let why = format!(
                "and {} could not be checked (cluster-wide throttle unavailable: {reason}) while this node already runs {allowance} of the bucket's requests without it",
                of_limit()
            );
            let refusal = Refusal {
                node: &node,
                queue: queue_refused.as_ref(),
                monitored: monitored.then_some(queue),
            };
            denied(st, entry, &key, &refusal, &why).map(Wait::Granted)
        }
    }
}

/// The 503 of a request that needs the shared tier on the smaller side of a split whose
/// share of the limit rounds down to nothing (S5): the side cannot allow any of it without
/// allowing the limit more than once, and failing open would do just that, so it refuses, as
/// OpenSearch's nodes refuse what needs a cluster manager they have not discovered. Counted and
/// logged as the shared tier's other refusals are (`total_throttled`,
/// `total_shared_throttled`, a `throttle` decision line of tier `shared`): an outside trial
/// found hundreds of these 503s in no per-group figure, only in the node's HTTP status counts.
fn no_share(
    st: &AppState,
    entry: &GroupEntry,
    key: &BucketKey,
    shared_limit: u32,
    split: &sluice_cluster::split::SplitView,
) -> ApiError {
    let reason = format!(
        "workload group [{}] ({}): bucket [{}] needs its cluster-wide limit of {shared_limit} (shared_limit), of which this node's side of a split cluster has no share: {}; the other side is the larger and keeps the limit; check discovery.seed_hosts and that transport ports are reachable (this node keeps trying to join them)",
        entry.name(),
        entry.id,
        describe_bucket(key),
        split.describe_side(),
    );
    entry.stats.total_throttled.inc();
    entry.stats.total_shared_throttled.inc();
    log_decision(
        st,
        entry,
        key,
        DecisionKind::NoShare,
        true,
        &reason,
        Tier::Shared,
    );
    ApiError::Engine(EngineError::new(
        ErrorCode::ClusterManagerNotDiscovered,
        reason,
    ))
}

/// Whether a fail-open admission at `now` is logged, the group's last one logged at `last`
/// (seconds of [`super::now_secs`], 0: none yet): the first always, then one a minute.
/// Comparing `now` with `last + 60` alone skipped every fail-open of a node's first minute,
/// whose clock starts at 0.
fn log_due(last: u64, now: u64) -> bool {
    last == 0 || now >= last + FAIL_OPEN_LOG_EVERY_SECS
}

/// How long to wait for an owner's answer: `wlm.workload_group.shared_acquire_timeout`.
fn acquire_timeout(st: &AppState) -> std::time::Duration {
    st.cluster_settings
        .snapshot()
        .time(crate::settings::keys::WLM_SHARED_ACQUIRE_TIMEOUT)
}

/// What a shared-tier denial refuses a request for, besides the owner's answer.
struct Refusal<'a> {
    /// What the node tier saw.
    node: &'a Throttled,
    /// The bound of the group's queue that kept the request from parking, if one did.
    queue: Option<&'a Refused>,
    /// Only monitored, with the queue `enabled` would have offered: counted, not enforced.
    monitored: Option<QueuePolicy>,
}

/// A request the shared tier denied (`why`, after what the node tier saw, and the queue's
/// bound when a full queue kept it from waiting): counted and logged as a decision of the
/// `shared` tier — a full queue's as the node tier counts and logs one (`queue_full`,
/// `total_queue_rejections`); refused with its 429, or, when only monitored, counted as what
/// `enabled` would have done with it ([`super::throttle::dry_breach`]: would-queue or
/// would-throttle, said at the end of its decision line) and let run, holding its bucket (and
/// its would-be queue place, if it took one).
fn denied(
    st: &AppState,
    entry: &GroupEntry,
    key: &BucketKey,
    refusal: &Refusal<'_>,
    why: &str,
) -> Result<Granted, ApiError> {
    entry.stats.total_shared_throttled.inc();
    let why = format!("{why}{}", refusal.queue.map_or_else(String::new, why_queue));
    let kind = match refusal.queue {
        Some(_) => DecisionKind::QueueFull,
        None => DecisionKind::Throttle,
    };
    if let Some(queue) = refusal.monitored {
        let dry = super::throttle::dry_breach(entry, key, queue);
        let reason = format!("{} {why}{}", node_part(refusal.node), dry.more);
        log_decision(st, entry, key, kind, false, &reason, Tier::Shared);
        return Ok(Granted {
            would_throttle: dry.dry_place.is_none(),
            bucket: Some(key.clone()),
            dry_place: dry.dry_place,
            ..Granted::default()
        });
    }
    let reason = format!("{} {why}", node_part(refusal.node));
    log_decision(st, entry, key, kind, true, &reason, Tier::Shared);
    if refusal.queue.is_some() {
        entry.stats.total_queue_rejections.inc();
    }
    Err(refused(entry, key, refusal.node, &why))
}

/// What the node tier saw, in a refusal's words: its requests in flight against the bucket's
/// `node_limit`, or, for a group with a `shared_limit` only, that it has none.
fn node_part(node: &Throttled) -> String {
    if node.limit == 0 {
        "has no node_limit (its group has a shared_limit only),".to_string()
    } else {
        format!(
            "already has {} requests in flight on this node (node_limit is {})",
            node.in_flight, node.limit
        )
    }
}

/// Counts a shared-tier refusal and words its 429, naming the tier.
fn refused(entry: &GroupEntry, key: &BucketKey, node: &Throttled, why: &str) -> ApiError {
    let stats = &entry.stats;
    stats.total_throttled.inc();
    let retry_after_secs = stats.drain.retry_after_secs(super::now_secs(), 0, 1);
    ApiError::Rejected {
        error: EngineError::new(
            ErrorCode::RejectedExecution,
            format!(
                "rejected by workload group [{}] ({}): bucket [{}] {} {why}; it reached its cluster-wide limit (tier: shared); retry after {retry_after_secs}s",
                entry.name(),
                entry.id,
                describe_bucket(key),
                node_part(node),
            ),
        ),
        retry_after_secs,
    }
}

/// Where an owner's offer goes: the oldest parked request of the bucket on this node.
pub struct OfferToQueue {
    /// The node's state, weakly (the state owns the cluster, which owns this sink).
    pub state: std::sync::Weak<AppState>,
}

impl OfferSink for OfferToQueue {
    fn offer(&self, bucket: &str, token: u64) -> OfferAnswer {
        let none = OfferAnswer {
            used: false,
            more_waiting: false,
        };
        let (Some(st), Some(key)) = (self.state.upgrade(), BucketKey::from_wire(bucket)) else {
            return none;
        };
        if let Some(e) = st.workload.view().groups.get(&*key.group_id) {
            e.stats.total_shared_pushes_received.inc();
        }
        let permits = &st.workload.permits;
        match permits.grant_external(&key, token) {
            Ok(_) => OfferAnswer {
                used: true,
                more_waiting: permits.num_parked(&key) > 0,
            },
            Err(_) => none,
        }
    }

    fn num_parked(&self, bucket: &str) -> u64 {
        let (Some(st), Some(key)) = (self.state.upgrade(), BucketKey::from_wire(bucket)) else {
            return 0;
        };
        st.workload.permits.num_parked(&key)
    }

    fn fail_open(&self, bucket: &str, token: u64) -> bool {
        let (Some(st), Some(key)) = (self.state.upgrade(), BucketKey::from_wire(bucket)) else {
            return false;
        };
        if st.workload.permits.grant_external(&key, token).is_err() {
            return false;
        }
        if let Some(e) = st.workload.view().groups.get(&*key.group_id) {
            e.stats.total_shared_fail_open.inc();
        }
        true
    }
}

impl OwnerEvents for OfferToQueue {
    fn offer_sent(&self, bucket: &str) {
        let (Some(st), Some(key)) = (self.state.upgrade(), BucketKey::from_wire(bucket)) else {
            return;
        };
        if let Some(e) = st.workload.view().groups.get(&*key.group_id) {
            e.stats.total_shared_pushes_sent.inc();
        }
    }
}

/// Sets every group's `shared_leases_owned` from this node's owner table (read when stats
/// are shown; a bucket whose group is gone counts for nobody).
pub fn refresh_owned(st: &AppState) {
    let mut per_group: std::collections::HashMap<std::sync::Arc<str>, u64> =
        std::collections::HashMap::new();
    for (bucket, n) in st.cluster.shared().owner.leases_by_bucket() {
        if let Some(key) = BucketKey::from_wire(&bucket) {
            *per_group.entry(key.group_id).or_default() += n;
        }
    }
    for (id, e) in &st.workload.view().groups {
        e.stats
            .shared_leases_owned
            .set(per_group.get(&**id).copied().unwrap_or(0));
    }
}

/// The backstop for the shared tier, run by the queue sweep (each second, and at once when
/// the ring changes): gives back leases whose parked request was cancelled with nobody to pass
/// them to, and asks again for every bucket with parked requests of a group with a shared pool
/// (a lost offer, an owner that was unreachable or at its cap when the request parked, an
/// owner the ring moved the bucket from), so no parked request is stranded.
///
/// A bucket is asked until its owner says no or none of its requests is parked: each lease
/// granted goes to its oldest parked request, and the denial registers this node as the
/// owner's waiter, so what frees later is pushed (asking once a sweep admitted one parked
/// request a second while the owner had room for all). An owner that cannot be reached
/// admits as [`ask`] does (fail open, within the coordinator's allowance): while its breaker
/// is open an ask does not wait, and the sweep admits as many as the allowance takes (K16 of
/// the coordinator); otherwise one request of the bucket a sweep, since an ask may wait out
/// the acquire timeout and the sweep must get to the other buckets.
pub async fn sweep(st: &AppState) {
    let coordinator = &st.cluster.shared().coordinator;
    for (_, token) in st.workload.permits.take_orphaned_grants() {
        drop(coordinator.take_handed(token));
    }
    // Split (see `ask`): each side asks for leases of its share only; a side with no share
    // leaves its parked requests to the node tier's permits as they free (its hand-off is
    // local) or to the split's healing; a client bounds its wait as ever
    // (`cancel_after_time_interval`, or leaving).
    let split = st.cluster.split();
    let view = st.workload.view();
    let mut parked: Vec<(BucketKey, usize)> = Vec::new();
    for (key, _) in st.workload.permits.parked_all() {
        match parked.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => parked.push((key, 1)),
        }
    }
    for (key, n) in parked {
        let Some(entry) = view.groups.get(&*key.group_id) else {
            continue;
        };
        let Some(shared_limit) = entry
            .group
            .as_ref()
            .and_then(|g| g.throttling.shared_pool())
        else {
            continue;
        };
        let limit = split.share_of(u64::from(shared_limit));
        if limit == 0 {
            continue;
        }
        let bucket = key.to_wire();
        // At most one lease for each request parked when the sweep began: requests parked
        // since asked with their own acquire.
        for _ in 0..n {
            let (lease, again) = match coordinator
                .acquire(&bucket, limit, true, acquire_timeout(st))
                .await
            {
                Acquired::Lease(lease) => (lease, true),
                // Again only if the next ask does not wait (see above).
                Acquired::FailOpen { lease, .. } => {
                    entry.stats.total_shared_fail_open.inc();
                    (lease, coordinator.fails_fast(&bucket).is_some())
                }
                Acquired::Denied { .. } | Acquired::Unavailable { .. } => break,
            };
            let token = coordinator.hand(lease);
            if let Err(token) = st.workload.permits.grant_external(&key, token) {
                // Nobody parked any more: the lease goes back, and so does the loop.
                drop(coordinator.take_handed(token));
                break;
            }
            if !again {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_the_first_fail_open_is_logged_then_one_a_minute() {
        // In the node's first seconds too (its clock starts at 0).
        assert!(log_due(0, 0));
        assert!(log_due(0, 5));
        // Logged at 5 (stored as 5): not again before 65.
        assert!(!log_due(5, 6));
        assert!(!log_due(5, 64));
        assert!(log_due(5, 65));
    }
}
