//! Admission of a tagged request: the node-tier throttle (`throttling.node_limit`, issue #5).
//!
//! [`throttle`] runs before a request starts any work. It finds the request's bucket
//! ([`sluice_core::bucket_for`]: the group, or one per username or per role), and asks the
//! node's [`PermitTable`](sluice_core::permits::PermitTable) for a permit under the group's
//! live `node_limit`. The permit is an RAII value released exactly once when it drops: the
//! caller keeps it until the task ends, or — for a top-level request — hands it to the request
//! scope ([`crate::workload::hold_until_response`]) so it is released after the response has
//! been handed to the HTTP layer (DESIGN D9).
//!
//! # Decisions (DESIGN D3–D8)
//! - Only `wlm.workload_group.mode: enabled` rejects. In `monitor_only`, and for a group in
//!   `monitor` resiliency mode, a breach is admitted without a permit, logged at DEBUG and
//!   counted in `total_would_throttle`. In `disabled` nothing is evaluated.
//! - `DEFAULT_WORKLOAD_GROUP` is never throttled. A username/role group with no principal to
//!   key on admits (fail open).
//! - A request whose ancestor task already holds the same bucket is not charged again (D8: a
//!   nested search issued on behalf of a request).
//! - A rejection is 429 `rejected_execution_exception` naming the group, the bucket and the
//!   limit, with `Retry-After: 1` (a constant, as Kubernetes APF started with; a drain-rate
//!   estimate belongs with the queue).
//! - The rejection is counted on the stats of the group the request was tagged with (fixed
//!   at tagging), never on DEFAULT during a group's registration (seed 001's second review).
//!   The decision runs under `catch_unwind`: a failure while deciding admits (fail open, logged
//!   at ERROR), but once the verdict is a rejection nothing fallible runs before the 429, so no
//!   error can turn a rejection into an admit (seed 001's first review comment).

use sluice_core::permits::Permit;
use sluice_core::{BucketKey, ResiliencyMode, ThrottleAttribute, WlmMode, bucket_for};
use sluice_engine::{EngineError, ErrorCode};

use crate::error::ApiError;
use crate::state::AppState;
use crate::workload::GroupEntry;

/// Seconds a throttled client is told to wait.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Decides a request's node-tier throttle: `Ok(Some(permit))` when it holds a slot of its
/// bucket, `Ok(None)` when it is not throttled (or a breach is only monitored), `Err` with a
/// 429 when it is rejected. `held` lists the buckets the request's ancestors hold.
///
/// An internal failure while deciding (a panic: there is no other error path) admits the
/// request and is logged at ERROR. Once the decision is a rejection, nothing that can fail runs
/// before the 429 is returned, so a failure can never turn a rejection into an admit.
pub fn throttle(
    st: &AppState,
    entry: &GroupEntry,
    principal: Option<&crate::auth::Principal>,
    held: &[BucketKey],
) -> Result<Option<Permit>, ApiError> {
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decide(st, entry, principal, held)
    }));
    let refused = match decided {
        Ok(Decision::Admit(permit)) => return Ok(permit),
        Ok(Decision::Reject(r)) => r,
        Err(_) => {
            tracing::error!(
                group = %entry.id,
                "the throttle failed while deciding; admitting the request (fail open)"
            );
            return Ok(None);
        }
    };
    entry.stats.total_throttled.inc();
    Err(ApiError::Rejected {
        error: EngineError::new(
            ErrorCode::RejectedExecution,
            format!(
                "rejected by workload group [{}] ({}): bucket [{}] already has {} requests in flight on this node, node_limit is {} (tier: node); retry when one completes",
                entry.name(),
                entry.id,
                describe_bucket(&refused.key),
                refused.in_flight,
                refused.limit
            ),
        ),
        retry_after_secs: RETRY_AFTER_SECS,
    })
}

/// The throttle's verdict.
enum Decision {
    /// Run, holding this permit (or none: not throttled, or only monitored).
    Admit(Option<Permit>),
    /// Refuse: the bucket is full.
    Reject(Refusal),
}

/// Why a request was refused.
struct Refusal {
    key: BucketKey,
    in_flight: u64,
    limit: u64,
}

fn decide(
    st: &AppState,
    entry: &GroupEntry,
    principal: Option<&crate::auth::Principal>,
    held: &[BucketKey],
) -> Decision {
    let mode = st.cluster_settings.wlm_mode();
    if mode == WlmMode::Disabled {
        return Decision::Admit(None);
    }
    let Some(group) = &entry.group else {
        return Decision::Admit(None);
    };
    let (Some(attribute), Some(limit)) = (group.throttling.attribute, group.throttling.node_limit)
    else {
        return Decision::Admit(None);
    };
    let principal = match attribute {
        ThrottleAttribute::Group => None,
        ThrottleAttribute::Username | ThrottleAttribute::Role => principal,
    };
    let Some(key) = bucket_for(&entry.id, &group.throttling, principal) else {
        return Decision::Admit(None);
    };
    if held.contains(&key) {
        return Decision::Admit(None);
    }
    let refused = match st.workload.permits.try_acquire(&key, u64::from(limit)) {
        Ok(permit) => return Decision::Admit(Some(permit)),
        Err(t) => t,
    };
    if mode == WlmMode::MonitorOnly || group.resiliency_mode == ResiliencyMode::Monitor {
        entry.stats.total_would_throttle.inc();
        tracing::debug!(
            group = %group.name,
            bucket = %describe_bucket(&key),
            in_flight = refused.in_flight,
            node_limit = limit,
            mode = mode.as_str(),
            resiliency_mode = group.resiliency_mode.as_str(),
            "would throttle: admitted because workload management only monitors this request"
        );
        return Decision::Admit(None);
    }
    Decision::Reject(Refusal {
        key,
        in_flight: refused.in_flight,
        limit: refused.limit,
    })
}

/// `attribute=value` (or `group`), for messages.
pub fn describe_bucket(key: &BucketKey) -> String {
    match &key.value {
        None => key.attribute.as_str().to_string(),
        Some(v) => format!("{}={v}", key.attribute.as_str()),
    }
}
