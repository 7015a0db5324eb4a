//! The node-tier throttle (`throttling.node_limit`) as admission runs it: the verdict is
//! [`sluice_core::throttle::decide`]'s; this module counts it, logs it and words the 429.
//!
//! # Decisions (DESIGN D3–D8)
//! - A rejection is 429 `rejected_execution_exception` naming the group, the bucket and the
//!   limit, with `Retry-After` ([`super::RETRY_AFTER_SECS`]), logged as a decision line
//!   ([`crate::logging::decisions`], the bucket's kind only), counted in `total_throttled` of
//!   the group the request was tagged with (fixed at tagging, never DEFAULT during a group's
//!   registration: seed 001's second review).
//! - A monitored breach (`monitor_only`, a `monitor` group) is admitted without a permit,
//!   logged at DEBUG (naming the bucket) and as a dry-run decision line (INFO), and counted as
//!   what `enabled` would have done with it, one thing only (issue #16's dry run,
//!   [`sluice_core::throttle`] T1, T2): parked while its would-be queue
//!   ([`super::dry_queue`]) has room — `total_would_queue`, with the wait it would have had
//!   (the would-be parked breaches ahead of it at the group's drain rate) in
//!   `total_would_queue_wait_millis` — else refused, `total_would_throttle`. The request
//!   still holds its bucket for its nested searches (D8). A monitored request the share check
//!   would have rejected is not reached (T3): nothing of it is counted here. A monitored
//!   request the shared tier's owner denied is counted by the same rule ([`dry_breach`]).
//! - The decision runs under `catch_unwind`: a failure while deciding admits (fail open, logged
//!   at ERROR), but once the verdict is a rejection nothing fallible runs before the 429, so no
//!   error can turn a rejection into an admit (seed 001's first review comment).

use sluice_core::BucketKey;
use sluice_core::permits::{Permit, QueuePolicy, RefusalReason, Refused, Waiter};
use sluice_core::throttle::{Request, Throttle, decide};
use sluice_engine::{EngineError, ErrorCode};

pub use sluice_core::throttle::describe_bucket;

use crate::error::ApiError;
use crate::logging::{Decision, DecisionKind, Tier};
use crate::state::AppState;
use crate::workload::GroupEntry;

/// What the throttle granted a request.
#[derive(Debug, Default)]
pub struct Granted {
    /// The permit of the request's bucket, when it took one.
    pub permit: Option<Permit>,
    /// The shared-tier slot it holds (a lease, or a fail-open slot), when the node allowance
    /// was exhausted ([`super::shared`]).
    pub lease: Option<sluice_cluster::shared::coordinator::SharedLease>,
    /// The bucket the request now holds for its nested searches (D8): its permit's, or a
    /// monitored breach's.
    pub bucket: Option<BucketKey>,
    /// A monitored breach's place in its bucket's would-be queue, held while it runs.
    pub dry_place: Option<super::dry_queue::DryPlace>,
    /// A monitored breach counted as `total_would_throttle`: `enabled` would have refused it
    /// before its search started, so the share re-check counts no would-be rejection of it
    /// ([`crate::tasks::Task::dry_refused`]).
    pub would_throttle: bool,
}

/// What the throttle decided for a request that was not refused.
#[derive(Debug)]
pub enum Decided {
    /// It may run now.
    Granted(Granted),
    /// It waits in its bucket's queue ([`super::queue::wait`]).
    Parked {
        /// The bucket.
        key: BucketKey,
        /// Resolves with a slot, or when the group's backlog is released.
        waiter: Waiter,
    },
    /// The node allowance is exhausted and the group has a cluster-wide pool: the request
    /// asks the bucket's owner ([`super::shared::ask`]).
    Shared(super::shared::Ask),
}

/// Decides a request's node-tier throttle: what it was granted, that it waits in a queue, or
/// a 429 when it is refused.
pub fn throttle(
    st: &AppState,
    entry: &GroupEntry,
    request: Request<'_>,
) -> Result<Decided, ApiError> {
    let mode = st.cluster_settings.wlm_mode();
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decide(
            &st.workload.permits,
            mode,
            &entry.id,
            entry.group.as_ref(),
            entry.queue.as_ref(),
            request,
        )
    }));
    let verdict = match decided {
        Ok(v) => v,
        Err(_) => {
            tracing::error!(
                group = %entry.id,
                "the throttle failed while deciding; admitting the request (fail open)"
            );
            return Ok(Decided::Granted(Granted::default()));
        }
    };
    match verdict {
        Throttle::Unthrottled => Ok(Decided::Granted(Granted::default())),
        Throttle::Admitted(permit) => Ok(Decided::Granted(Granted {
            bucket: Some(permit.key().clone()),
            permit: Some(permit),
            ..Granted::default()
        })),
        Throttle::Parked { key, waiter } => Ok(Decided::Parked { key, waiter }),
        Throttle::Shared {
            key,
            shared_limit,
            waiter,
            queue_refused,
            node,
            monitored,
            queue,
        } => Ok(Decided::Shared(super::shared::Ask {
            key,
            shared_limit,
            waiter,
            queue_refused,
            node,
            monitored,
            queue,
        })),
        Throttle::NotReached { key } => Ok(Decided::Granted(Granted {
            bucket: Some(key),
            ..Granted::default()
        })),
        Throttle::WouldThrottle {
            key,
            refused,
            queue,
        } => {
            let DryBreach { dry_place, more } = dry_breach(entry, &key, queue);
            tracing::debug!(
                group = %entry.name(),
                bucket = %describe_bucket(&key),
                in_flight = refused.in_flight,
                node_limit = refused.limit,
                mode = mode.as_str(),
                queued = dry_place.is_some(),
                "over the limit: admitted because workload management only monitors this request"
            );
            let reason = OverLimit {
                in_flight: refused.in_flight,
                limit: refused.limit,
                more,
            };
            log_decision(
                st,
                entry,
                &key,
                DecisionKind::Throttle,
                false,
                &reason,
                Tier::Node,
            );
            Ok(Decided::Granted(Granted {
                would_throttle: dry_place.is_none(),
                bucket: Some(key),
                dry_place,
                ..Granted::default()
            }))
        }
        Throttle::Rejected { key, refused } => {
            let buckets = entry.queue.as_ref().map_or(1, |q| q.num_waiting_buckets());
            let kind = if refused.reason == RefusalReason::NotQueued {
                DecisionKind::Throttle
            } else {
                DecisionKind::QueueFull
            };
            let more = why(&refused);
            let reason = OverLimit {
                in_flight: refused.in_flight,
                limit: refused.limit,
                more: &more,
            };
            log_decision(st, entry, &key, kind, true, &reason, Tier::Node);
            Err(rejected(entry, &key, &refused, buckets))
        }
    }
}

/// What the dry run made of a monitored breach ([`dry_breach`]).
pub(super) struct DryBreach {
    /// Its place in its bucket's would-be queue, held while it runs, when `enabled` would
    /// have parked it; `None` when `enabled` would have refused it.
    pub dry_place: Option<super::dry_queue::DryPlace>,
    /// The end of its decision line: what `enabled` would have done, when it had a queue.
    pub more: &'static str,
}

/// Counts a monitored breach of `key` (of the node tier, or one the shared tier's owner
/// denied) as what `enabled` would have done with it, offered `queue`, one thing only (T1,
/// T2): the would-be parked breaches in flight before it are the requests `enabled` would have
/// parked ahead of it, so while its would-be queue has room it counts as would-queue, with the
/// wait those ahead would have caused at the group's drain rate; with the queue full (or none)
/// `enabled` would have refused it: would-throttle. One rule for both tiers, so their dry runs
/// agree with `enabled` alike.
pub(super) fn dry_breach(entry: &GroupEntry, key: &BucketKey, queue: QueuePolicy) -> DryBreach {
    let stats = &entry.stats;
    let parked = stats
        .dry_queues
        .enter(key, |seen| sluice_core::throttle::would_park(queue, seen));
    match parked {
        Ok((ahead, place)) => {
            stats.total_would_queue.inc();
            if let Some(ms) = stats
                .drain
                .estimated_wait_millis(super::now_secs(), ahead, 1)
            {
                stats.total_would_queue_wait_millis.add(ms);
                stats.max_would_queue_wait_millis.raise_to(ms);
            }
            DryBreach {
                dry_place: Some(place),
                more: "; enabled would have queued it",
            }
        }
        Err(reason) => {
            stats.total_would_throttle.inc();
            DryBreach {
                dry_place: None,
                more: if reason == RefusalReason::NotQueued {
                    ""
                } else {
                    "; enabled would have refused it, its queue full"
                },
            }
        }
    }
}

/// Writes the decision's structured line: the bucket's kind, never its value (a username or
/// role stays out of INFO lines).
pub(super) fn log_decision(
    st: &AppState,
    entry: &GroupEntry,
    key: &BucketKey,
    kind: DecisionKind,
    enforced: bool,
    reason: &dyn std::fmt::Display,
    tier: Tier,
) {
    st.decisions.log(Decision {
        kind,
        enforced,
        group_id: &entry.id,
        group_name: entry.name(),
        bucket_kind: Some(key.attribute),
        tier,
        reason,
    });
}

/// A decision line's reason: the bucket's requests in flight against its limit, then `more`.
struct OverLimit<'a> {
    in_flight: u64,
    limit: u64,
    more: &'a str,
}

impl std::fmt::Display for OverLimit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests in flight, node_limit is {}{}",
            self.in_flight, self.limit, self.more
        )
    }
}

/// Which queue bound refused, worded for the 429 and the decision line (empty when the group
/// does not queue).
pub(super) fn why(refused: &Refused) -> String {
    match refused.reason {
        RefusalReason::NotQueued => String::new(),
        RefusalReason::BucketQueueFull => format!(
            " and its queue is full (queue.size_per_bucket is {})",
            refused.queued
        ),
        RefusalReason::GroupQueueFull => format!(
            " and the group's queue on this node is full ({} waiting)",
            refused.group_queued
        ),
        RefusalReason::OverFairShare { share } => format!(
            " and its queue already holds its fair share of the group's queue ({} of {share} waiting)",
            refused.queued
        ),
    }
}

/// Counts a refusal and words its 429: which bound refused, and a `Retry-After` from the
/// measured drain rate and the requests queued ahead (DESIGN D14). The rate is the group's,
/// shared by its `buckets` with waiters: exact for a whole-group bucket, an even split for
/// per-user and per-role buckets.
fn rejected(entry: &GroupEntry, key: &BucketKey, refused: &Refused, buckets: u64) -> ApiError {
    let stats = &entry.stats;
    stats.total_throttled.inc();
    let why = why(refused);
    if refused.reason != RefusalReason::NotQueued {
        stats.total_queue_rejections.inc();
    }
    let retry_after_secs = stats
        .drain
        .retry_after_secs(super::now_secs(), refused.queued, buckets);
    ApiError::Rejected {
        error: EngineError::new(
            ErrorCode::RejectedExecution,
            format!(
                "rejected by workload group [{}] ({}): bucket [{}] already has {} requests in flight on this node, node_limit is {}{why} (tier: node); retry after {retry_after_secs}s",
                entry.name(),
                entry.id,
                describe_bucket(key),
                refused.in_flight,
                refused.limit
            ),
        ),
        retry_after_secs,
    }
}
