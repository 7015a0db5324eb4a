//! What this node answers when another node (or this one, in a fan-out) calls one of its
//! local APIs: its part of `_wlm/stats`, `_list/wlm_stats`, `_tasks` and `_nodes/stats`, and
//! what it knows of scrolls opened through it. Parameters and answers are JSON documents; an
//! error answer is OpenSearch's error body with its status.

mod scrolls;
mod tasks;
mod wlm_stats;

use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use sluice_cluster::rpc::{BoxFuture, LocalAnswer, LocalApi, LocalHandler};
use sluice_engine::EngineError;

use crate::state::AppState;

pub use scrolls::{KnownScroll, KnownScrolls, ScrollIds};
pub use tasks::{CancelTasks, OneTask, TaskFilter, task_entry_of, task_missing};
pub use wlm_stats::{ROW_COLUMNS, RowsParams, SLUICE_COLUMNS, StatsParams};

/// The server's [`LocalHandler`]. It holds the state weakly: the state owns the cluster,
/// whose RPC server owns this handler.
pub struct NodeRpc {
    state: Weak<AppState>,
}

impl NodeRpc {
    /// A handler answering from `state`.
    pub fn new(state: &Arc<AppState>) -> NodeRpc {
        NodeRpc {
            state: Arc::downgrade(state),
        }
    }
}

impl LocalHandler for NodeRpc {
    fn local(&self, api: LocalApi, params: Value) -> BoxFuture<'static, LocalAnswer> {
        let state = self.state.upgrade();
        Box::pin(async move {
            let Some(st) = state else {
                return LocalAnswer {
                    status: 503,
                    body: json!({"error": "the node is shutting down", "status": 503}),
                };
            };
            let answer = match api {
                LocalApi::WlmStats => decode(params).and_then(|p| wlm_stats::stats(&st, &p)),
                LocalApi::WlmStatsRows => decode(params).and_then(|p| wlm_stats::rows(&st, &p)),
                LocalApi::ListTasks => decode(params).and_then(|p| tasks::list(&st, &p)),
                LocalApi::GetTask => match decode(params) {
                    Ok(p) => tasks::get(&st, &p).await,
                    Err(e) => Err(e),
                },
                LocalApi::CancelTasks => decode(params).and_then(|p| tasks::cancel(&st, &p)),
                LocalApi::NodeStats => {
                    decode(params).map(|p| crate::api::node_stats::local_entry(&st, &p))
                }
                LocalApi::ScrollsOf => decode(params).map(|q| scrolls::scrolls_of(&st, &q)),
                LocalApi::ForgetScrolls => decode(params).map(|q| scrolls::forget(&st, &q)),
                LocalApi::Unspecified => Err(EngineError::illegal_argument("no local api named")),
            };
            match answer {
                Ok(body) => LocalAnswer::ok(body),
                Err(e) => LocalAnswer {
                    status: e.status(),
                    body: e.to_body(),
                },
            }
        })
    }
}

/// Reads a call's parameters; a coordinator of another build may send a shape this one does
/// not read, which is a clear 400, never a panic.
fn decode<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, EngineError> {
    serde_json::from_value(params)
        .map_err(|e| EngineError::illegal_argument(format!("malformed node call parameters: {e}")))
}
