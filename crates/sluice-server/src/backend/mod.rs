//! The backend seam: what executes a request once admission has let it in.
//!
//! Admission ([`crate::admission`]) decides *whether and when* a search-class request runs;
//! a [`Backend`] decides *how*: the embedded tantivy engine ([`embedded`]) runs it on the
//! node's search pool, and the upstream backend ([`upstream`]) forwards it to an existing
//! cluster, taking the same [`Execution`] with the client's raw request.
//! Handlers call a backend with the [`Execution`] their admission ticket hands out and never
//! reach an engine themselves, so a new backend plugs in without touching admission.
//!
//! The data APIs (documents, `_bulk`, index admin) are the embedded engine's own and are not
//! behind this seam: in gateway mode they are forwarded to the upstream unchanged (DESIGN D15).

pub mod embedded;
pub mod upstream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::Value;
use sluice_engine::{EngineError, NestedSearchHook, ScrollLimits, SearchRequest};

use crate::error::ApiResult;
use crate::tasks::Task;

/// What kind of backend a node runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The embedded tantivy engine.
    Embedded,
}

impl BackendKind {
    /// The name `backend.type` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Embedded => "embedded",
        }
    }
}

/// Executes admitted search-class work.
///
/// Every method takes the [`Execution`] of an admitted request and returns a future that
/// answers the request. Dropping the future abandons the answer; the work itself stops at its
/// next cancellation check once the task's flag is set (the admission ticket sets it when the
/// request is dropped before it finished).
pub trait Backend: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Whether this backend measures each task's CPU time and allocations (the embedded engine
    /// does, on the thread that runs the task; a proxy cannot see the upstream's threads).
    /// Resource limits act on measured usage only.
    fn measures_usage(&self) -> bool;

    /// Runs a search on `index`; with `scroll`, opens a scroll kept alive that long and
    /// answers its first page.
    fn search(
        &self,
        exec: Execution,
        index: String,
        req: SearchRequest,
        scroll: Option<Duration>,
    ) -> BoxFuture<'static, ApiResult<Value>>;

    /// Counts the documents of `index` (resolved with `options`) matching `query`; answers the
    /// count and the number of shards searched.
    fn count(
        &self,
        exec: Execution,
        index: String,
        options: sluice_engine::resolve::IndicesOptions,
        query: Value,
    ) -> BoxFuture<'static, ApiResult<(u64, u64)>>;

    /// Answers the next page of the scroll `scroll_id`, extending its keep-alive when given.
    fn continue_scroll(
        &self,
        exec: Execution,
        scroll_id: String,
        keep_alive: Option<Duration>,
    ) -> BoxFuture<'static, ApiResult<Value>>;

    /// The group label a scroll was opened with (`Ok(None)`: opened without one), so its
    /// continuations run in the same group; an error when the scroll is unknown.
    fn scroll_owner(&self, scroll_id: &str) -> Result<Option<Arc<str>>, EngineError>;

    /// The user who opened a scroll (`Ok(None)`: unknown to this backend, or opened without
    /// authentication), so only that user continues or clears it; an error when the scroll is
    /// unknown. A backend that cannot tell (an upstream cluster, whose own security checks
    /// scroll owners) keeps the default.
    fn scroll_opened_by(&self, _scroll_id: &str) -> Result<Option<Arc<str>>, EngineError> {
        Ok(None)
    }

    /// Frees the scrolls `ids` (`["_all"]`: every scroll); answers how many were freed, as
    /// OpenSearch counts them.
    fn clear_scrolls(&self, ids: Vec<String>) -> BoxFuture<'static, ApiResult<u64>>;

    /// Applies the scroll limits in force (`search.max_open_scroll_context`,
    /// `search.max_keep_alive`) from the next scroll request on.
    fn sync_scroll_limits(&self, limits: ScrollLimits);

    /// Runs `_delete_by_query` / `_update_by_query` over `index`, checking the task's
    /// cancellation between batches; answers what it did. A backend that cannot run them
    /// answers a 400 saying so.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the answer; the work stops at its next check only once
    /// the task is cancelled.
    fn by_query(
        &self,
        exec: Execution,
        index: String,
        req: sluice_engine::by_query::ByQueryRequest,
    ) -> BoxFuture<'static, ApiResult<sluice_engine::by_query::ByQueryOutcome>> {
        let _ = (exec, index, req);
        let kind = self.kind().as_str();
        Box::pin(async move {
            Err(EngineError::illegal_argument(format!(
                "by-query actions are not supported by the [{kind}] backend"
            ))
            .into())
        })
    }
}

/// What a backend needs to run one admitted request: the task (its cancellation flag and
/// deadline), and the hooks through which admission follows the execution. Handed out by
/// [`crate::admission::Admitted::execution`].
pub struct Execution {
    /// The request's task.
    pub task: Arc<Task>,
    /// When the task is to be cancelled (`cancel_after_time_interval`; queue time counts).
    pub cancel_at: Option<Instant>,
    /// What admission granted (the task's registration, its permit): work that may outlive
    /// the request — a search that runs on to its next checkpoint after the client left —
    /// keeps this until it ends, so the slot covers all of the work (DESIGN D9).
    pub hold: Arc<dyn std::any::Any + Send + Sync>,
    /// Admission's hooks into the execution.
    pub hooks: Arc<dyn ExecutionHooks>,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("task", &self.task.seq)
            .field("cancel_at", &self.cancel_at)
            .finish_non_exhaustive()
    }
}

/// How admission follows an execution, called by the backend.
pub trait ExecutionHooks: Send + Sync {
    /// The work is about to start on an execution thread. An error turns the request away
    /// (the group went over its share while the request waited for a thread); otherwise the
    /// returned guard marks the task as executing until dropped.
    fn start(&self) -> Result<Box<dyn std::any::Any + Send>, EngineError>;

    /// The work ended, having used `cpu_nanos` of CPU and allocated `memory_bytes` between
    /// `executing_since` and `measured_at`, when the figures were taken (its end on an
    /// embedded node; a gateway's last poll of its upstream) (a measuring backend only).
    fn finished(
        &self,
        executing_since: Instant,
        measured_at: Instant,
        cpu_nanos: u64,
        memory_bytes: u64,
    );

    /// How the engine registers the nested searches it runs for this request.
    fn nested(&self) -> Arc<dyn NestedSearchHook>;
}
