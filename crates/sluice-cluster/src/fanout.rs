//! One call to many members at once: every answer or failure, by a deadline.

use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;

use crate::member::Member;
use crate::rpc::{LocalAnswer, LocalApi, LocalHandler, RpcError, Transport};

/// One member's part of a fan-out.
#[derive(Debug)]
pub struct Outcome {
    /// Who was asked.
    pub member: Member,
    /// Its answer, or why there is none.
    pub result: Result<LocalAnswer, RpcError>,
}

/// Calls `api` on every member of `targets` concurrently — this node (`self_id`) in process,
/// the others through `transport` — and returns one [`Outcome`] per target, in target order.
/// Ends by `deadline` (plus the local answer's own time): a member that does not answer by
/// then is a [`RpcError::DeadlineExceeded`] outcome, never a hang.
pub async fn fan_out(
    transport: &dyn Transport,
    local: &dyn LocalHandler,
    self_id: &str,
    targets: &[Member],
    api: LocalApi,
    params: &Value,
    deadline: Duration,
) -> Vec<Outcome> {
    let calls = targets.iter().map(|m| async move {
        let result = if m.node_id == self_id {
            Ok(local.local(api, params.clone()).await)
        } else {
            transport.local(m, api, params.clone(), deadline).await
        };
        Outcome {
            member: m.clone(),
            result,
        }
    });
    join_all(calls).await
}
