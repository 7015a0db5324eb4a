//! The node-tier throttle (`throttling.node_limit`) as admission runs it: the verdict is
//! [`sluice_core::throttle::decide`]'s; this module counts it, logs it and words the 429.
//!
//! # Decisions (DESIGN D3–D8)
//! - A rejection is 429 `rejected_execution_exception` naming the group, the bucket and the
//!   limit, with `Retry-After` ([`super::RETRY_AFTER_SECS`]), counted in `total_throttled` of
//!   the group the request was tagged with (fixed at tagging, never DEFAULT during a group's
//!   registration: seed 001's second review).
//! - A monitored breach (`monitor_only`, a `monitor` group) is admitted without a permit,
//!   logged at DEBUG and counted in `total_would_throttle`; the request still holds its bucket
//!   for its nested searches (D8).
//! - The decision runs under `catch_unwind`: a failure while deciding admits (fail open, logged
//!   at ERROR), but once the verdict is a rejection nothing fallible runs before the 429, so no
//!   error can turn a rejection into an admit (seed 001's first review comment).

use sluice_core::permits::Permit;
use sluice_core::throttle::{Throttle, decide};
use sluice_core::{BucketKey, Principal};
use sluice_engine::{EngineError, ErrorCode};

pub use sluice_core::throttle::describe_bucket;

use crate::error::ApiError;
use crate::state::AppState;
use crate::workload::GroupEntry;

/// What the throttle granted a request.
#[derive(Debug, Default)]
pub struct Granted {
    /// The permit of the request's bucket, when it took one.
    pub permit: Option<Permit>,
    /// The bucket the request now holds for its nested searches (D8): its permit's, or a
    /// monitored breach's.
    pub bucket: Option<BucketKey>,
}

/// Decides a request's node-tier throttle: what it was granted, or a 429 when it is refused.
/// `held` lists the buckets the request's ancestors hold.
pub fn throttle(
    st: &AppState,
    entry: &GroupEntry,
    principal: Option<&Principal>,
    held: &[BucketKey],
) -> Result<Granted, ApiError> {
    let mode = st.cluster_settings.wlm_mode();
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decide(
            &st.workload.permits,
            mode,
            &entry.id,
            entry.group.as_ref(),
            principal,
            held,
        )
    }));
    let verdict = match decided {
        Ok(v) => v,
        Err(_) => {
            tracing::error!(
                group = %entry.id,
                "the throttle failed while deciding; admitting the request (fail open)"
            );
            return Ok(Granted::default());
        }
    };
    match verdict {
        Throttle::Unthrottled => Ok(Granted::default()),
        Throttle::Admitted(permit) => Ok(Granted {
            bucket: Some(permit.key().clone()),
            permit: Some(permit),
        }),
        Throttle::WouldThrottle { key, refused } => {
            entry.stats.total_would_throttle.inc();
            tracing::debug!(
                group = %entry.name(),
                bucket = %describe_bucket(&key),
                in_flight = refused.in_flight,
                node_limit = refused.limit,
                mode = mode.as_str(),
                "would throttle: admitted because workload management only monitors this request"
            );
            Ok(Granted {
                permit: None,
                bucket: Some(key),
            })
        }
        Throttle::Rejected { key, refused } => {
            entry.stats.total_throttled.inc();
            Err(ApiError::Rejected {
                error: EngineError::new(
                    ErrorCode::RejectedExecution,
                    format!(
                        "rejected by workload group [{}] ({}): bucket [{}] already has {} requests in flight on this node, node_limit is {} (tier: node); retry when one completes",
                        entry.name(),
                        entry.id,
                        describe_bucket(&key),
                        refused.in_flight,
                        refused.limit
                    ),
                ),
                retry_after_secs: super::RETRY_AFTER_SECS,
            })
        }
    }
}
