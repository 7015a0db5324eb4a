//! Admission of the nested searches the engine issues while it runs a request (the sub-search
//! of a `terms` lookup with a `query`): each becomes a child task — registered under the
//! request's task, in its group, run by its principal — and passes the throttle without being
//! charged again for a bucket an ancestor holds (DESIGN D8). It runs on the execution thread of
//! its parent and never parks or blocks.

use std::sync::Arc;

use sluice_engine::{EngineError, NestedScope, NestedSearchHook, SearchContext};

use crate::error::ApiError;
use crate::state::AppState;
use crate::tasks::{NewTask, Task, actions};
use crate::workload::GroupEntry;

/// The engine's hook for the nested searches of one task.
pub struct NestedSearches {
    st: Arc<AppState>,
    /// The task the nested searches run for.
    parent: Arc<Task>,
    group: Arc<GroupEntry>,
}

impl NestedSearches {
    /// The hook of the nested searches of `parent`, which runs in `group`.
    pub fn new(st: Arc<AppState>, parent: Arc<Task>, group: Arc<GroupEntry>) -> NestedSearches {
        NestedSearches { st, parent, group }
    }
}

impl NestedSearchHook for NestedSearches {
    fn authorize_lookup(&self, index: &str, by_query: bool) -> Result<(), EngineError> {
        crate::auth::authz::authorize_principal(
            &self.st,
            self.parent.principal.as_deref(),
            self.parent.remote_addr,
            crate::auth::authz::lookup_action(by_query),
            index,
        )
    }

    fn enter(&self, _index: &str, description: &str) -> Result<NestedScope, EngineError> {
        let principal = self.parent.principal.clone();
        let mut held = self.parent.held_buckets().to_vec();
        let request = sluice_core::throttle::Request {
            principal: principal.as_deref(),
            held: &held,
            // On its parent's execution thread: it never parks.
            may_park: false,
            tag: self.parent.seq,
            // Nested searches are not checked against the share.
            share_would_reject: false,
        };
        let decided =
            super::throttle::throttle(&self.st, &self.group, request).map_err(|e| match e {
                ApiError::Engine(e) | ApiError::Rejected { error: e, .. } => e,
                other => EngineError::internal(format!("admission failed: {other:?}")),
            })?;
        let granted = match decided {
            super::throttle::Decided::Granted(g) => g,
            // A request that may not park is never parked; refuse rather than block.
            super::throttle::Decided::Parked { .. } => {
                return Err(EngineError::new(
                    sluice_engine::ErrorCode::RejectedExecution,
                    "a nested search cannot wait in a throttle queue",
                ));
            }
            // Its parent holds the bucket (D8), so this cannot happen for its own group; a
            // call to another node cannot be made from the execution thread: refuse.
            super::throttle::Decided::Shared(_) => {
                return Err(EngineError::new(
                    sluice_engine::ErrorCode::RejectedExecution,
                    "a nested search cannot ask the cluster-wide shared tier for a lease",
                ));
            }
        };
        if let Some(k) = &granted.bucket {
            held.push(k.clone());
        }
        let guard = self.st.tasks.register_task(NewTask {
            action: actions::SEARCH,
            description: description.to_string().into(),
            parent: Some(self.parent.seq),
            start_time_millis: sluice_engine::now_millis(),
            principal,
            remote_addr: self.parent.remote_addr,
            admitting: false,
            opaque_id: None,
        });
        let child = guard.task().clone();
        child.set_group(self.group.clone());
        child.set_held_buckets(held);
        let ctx = SearchContext {
            cancelled: Some(child.cancelled.clone()),
            nested: Some(Arc::new(NestedSearches {
                st: self.st.clone(),
                parent: child,
                group: self.group.clone(),
            })),
            ..Default::default()
        };
        Ok(NestedScope {
            ctx,
            guard: Box::new((guard, granted.permit, granted.dry_place)),
        })
    }
}
