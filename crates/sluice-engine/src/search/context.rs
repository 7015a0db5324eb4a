//! The search context: what a running search checks to know whether to stop (its cancellation
//! flag, its parent's, `cancel_after_time_interval` and the body's `timeout` deadline), and the
//! hook through which the engine announces the nested searches it runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::time::Instant;

use crate::error::{EngineError, ErrorCode, Result};

/// What a running search checks to know whether to stop, and how it issues nested searches.
#[derive(Clone, Default)]
pub struct SearchContext {
    /// Set by whoever cancels the search (task cancel, client disconnect, enforcement).
    pub cancelled: Option<Arc<AtomicBool>>,
    /// When the search must stop and return partial results (the body's `timeout`).
    pub deadline: Option<Instant>,
    /// When the search must be cancelled (`cancel_after_time_interval`): past it the search
    /// fails with `task_cancelled_exception` instead of returning partial results.
    pub cancel_at: Option<Instant>,
    /// How the engine registers the nested searches it runs on behalf of this request (a
    /// `terms` lookup with a `query`); `None` runs them directly under this context.
    pub nested: Option<Arc<dyn NestedSearchHook>>,
    /// The context of the request this one runs inside of: when it is cancelled (its flag or
    /// its `cancel_at`), this search is too. The engine sets it on a nested search's context.
    pub parent: Option<Arc<SearchContext>>,
    /// Called at every cancellation checkpoint (every few thousand documents, between
    /// segments, every 256 fetched hits), on the thread running the search: the server samples
    /// the task's CPU time and allocations there, so a long search's usage is visible while it
    /// runs. Must be cheap.
    pub on_checkpoint: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for SearchContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchContext")
            .field("cancelled", &self.cancelled)
            .field("deadline", &self.deadline)
            .field("cancel_at", &self.cancel_at)
            .field("nested", &self.nested.as_ref().map(|_| "NestedSearchHook"))
            .field("parent", &self.parent)
            .field("on_checkpoint", &self.on_checkpoint.as_ref().map(|_| "Fn"))
            .finish()
    }
}

impl SearchContext {
    /// Whether the search, or a request it runs inside of, has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        if let Some(checkpoint) = &self.on_checkpoint {
            checkpoint();
        }
        // Relaxed is enough: the flag carries no data, and a late observation only delays the
        // stop until the next check.
        self.cancelled
            .as_ref()
            .is_some_and(|c| c.load(AtomicOrdering::Relaxed))
            || self.cancel_at.is_some_and(|at| Instant::now() >= at)
            || self.parent.as_ref().is_some_and(|p| p.is_cancelled())
    }

    pub(super) fn is_past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Called by the engine before it runs a nested search on behalf of the current request (the
/// sub-search of a `terms` lookup with a `query`), so that the caller can make it a child task
/// that passes admission, while the engine stays ignorant of how.
///
/// The engine calls [`enter`](NestedSearchHook::enter) on the thread that runs the outer
/// search, once per distinct lookup of a request, after it has resolved the lookup index and
/// before it builds the nested search; it runs the nested search synchronously on that same
/// thread (never through the search pool again) and drops [`NestedScope::guard`] as soon as the
/// nested search ends, whether it succeeded or failed.
pub trait NestedSearchHook: Send + Sync {
    /// Registers the nested search on `index` (e.g. as a child task and through admission) and
    /// returns the context it runs under plus a guard the engine holds until it ends.
    ///
    /// `description` describes the nested search the way a search task is described
    /// (`indices[..], search_type[QUERY_THEN_FETCH], source[..]`). An error aborts the outer
    /// request with that error as is (a 429 `rejected_execution_exception`, a
    /// `task_cancelled_exception` ...).
    fn enter(&self, index: &str, description: &str) -> Result<NestedScope>;

    /// Checks that the request may read what a `terms` lookup reads from `index`: a document
    /// by id (`by_query: false`) or the hits of a query. An error aborts the outer request
    /// with that error as is (a 403 `security_exception`). The default allows everything.
    fn authorize_lookup(&self, index: &str, by_query: bool) -> Result<()> {
        let _ = (index, by_query);
        Ok(())
    }
}

/// What a [`NestedSearchHook`] hands back for one nested search.
#[must_use = "the guard must live until the nested search ends"]
pub struct NestedScope {
    /// The context the nested search runs under: its own cancellation flag (the child task's),
    /// its `cancel_at` and `deadline`, and the hook for searches nested in it (`None` inherits
    /// the outer request's). The engine sets its `parent` to the outer context, so cancelling
    /// the outer request stops the nested search too.
    pub ctx: SearchContext,
    /// Dropped by the engine right after the nested search ends (a task registration, a
    /// permit ...).
    pub guard: Box<dyn std::any::Any + Send>,
}

impl std::fmt::Debug for NestedScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NestedScope")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

/// The error of a search stopped by its context's cancellation.
pub(crate) fn cancelled() -> EngineError {
    EngineError::new(
        ErrorCode::TaskCancelled,
        "The parent task was cancelled, shouldn't start any child tasks, cancelled",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_context_is_cancelled_with_its_parent() {
        let parent_flag = Arc::new(AtomicBool::new(false));
        let parent = Arc::new(SearchContext {
            cancelled: Some(parent_flag.clone()),
            ..Default::default()
        });
        let child = SearchContext {
            cancelled: Some(Arc::new(AtomicBool::new(false))),
            parent: Some(parent),
            ..Default::default()
        };
        assert!(!child.is_cancelled());
        parent_flag.store(true, AtomicOrdering::Relaxed);
        assert!(child.is_cancelled());
        let past = SearchContext {
            parent: Some(Arc::new(SearchContext {
                cancel_at: Some(Instant::now()),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert!(
            past.is_cancelled(),
            "a parent past its cancel_at cancels the child"
        );
        assert!(format!("{past:?}").contains("SearchContext"));
    }
}
