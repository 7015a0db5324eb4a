//! The embedded backend: searches run by the tantivy engine on the node's bounded search pool,
//! with CPU time and allocations measured on the thread that runs each task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use sluice_engine::by_query::{ByQueryOutcome, ByQueryRequest};
use sluice_engine::{Engine, EngineError, ErrorCode, ScrollLimits, SearchContext, SearchRequest};

use super::{Backend, BackendKind, Execution};
use crate::accounting::ThreadUsage;
use crate::error::{ApiError, ApiResult};
use crate::pool::SearchPool;

/// The embedded engine as a [`Backend`].
pub struct EmbeddedBackend {
    engine: Arc<Engine>,
    pool: Arc<SearchPool>,
}

impl EmbeddedBackend {
    /// A backend running searches of `engine` on `pool`.
    pub fn new(engine: Arc<Engine>, pool: Arc<SearchPool>) -> EmbeddedBackend {
        EmbeddedBackend { engine, pool }
    }

    /// Runs `work` for the admitted request `exec` on the search pool: a full pool answers 429
    /// `rejected_execution_exception` at once. On the pool thread, admission's start hook runs
    /// first (it may still turn the request away), then the work under a [`SearchContext`]
    /// carrying the task's flag, its `cancel_at` and a checkpoint sampler of the thread's CPU
    /// time and allocations; the usage is recorded on the task and reported when it ends.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the answer; the job keeps `exec.hold` until it ends.
    fn run<T: Send + 'static>(
        &self,
        exec: Execution,
        work: impl FnOnce(SearchContext) -> Result<T, EngineError> + Send + 'static,
    ) -> BoxFuture<'static, ApiResult<T>> {
        let Execution {
            task,
            cancel_at,
            hold,
            hooks,
        } = exec;
        let ctx = SearchContext {
            cancelled: Some(task.cancelled.clone()),
            cancel_at,
            nested: Some(hooks.nested()),
            ..Default::default()
        };
        let submitted = self.pool.submit(move || {
            // Dropped in reverse: the executing mark ends before the hold gives the slot back
            // (as a gateway's `upstream::cancelled::Slot`, F5).
            let _hold = hold;
            let _executing = hooks.start()?;
            task.usage.mark_executing();
            let usage = Arc::new(ThreadUsage::start());
            let mut ctx = ctx;
            let (sampler, sampled) = (usage.clone(), task.clone());
            ctx.on_checkpoint = Some(Arc::new(move || sampler.record_into(&sampled.usage)));
            let out = work(ctx);
            usage.record_into(&task.usage);
            if let Some(since) = task.usage.executing_since() {
                let (cpu, memory) = (task.usage.cpu_nanos(), task.usage.memory_bytes());
                hooks.finished(since, Instant::now(), cpu, memory);
            }
            out
        });
        async move {
            let rx = submitted.map_err(|r| {
                ApiError::Engine(EngineError::new(ErrorCode::RejectedExecution, r.reason))
            })?;
            match rx.await {
                Ok(Ok(r)) => r.map_err(ApiError::Engine),
                Ok(Err(p)) => Err(ApiError::Engine(EngineError::internal(format!(
                    "search failed: {}",
                    p.0
                )))),
                Err(_) => Err(ApiError::Engine(EngineError::internal(
                    "search pool stopped",
                ))),
            }
        }
        .boxed()
    }
}

impl Backend for EmbeddedBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Embedded
    }

    fn measures_usage(&self) -> bool {
        true
    }

    fn search(
        &self,
        exec: Execution,
        index: String,
        req: SearchRequest,
        scroll: Option<Duration>,
    ) -> BoxFuture<'static, ApiResult<Value>> {
        let engine = self.engine.clone();
        self.run(exec, move |ctx| match scroll {
            Some(keep_alive) => engine.open_scroll(&index, &req, keep_alive, &ctx),
            None => engine.search_request(&index, &req, &ctx),
        })
    }

    fn count(
        &self,
        exec: Execution,
        index: String,
        options: sluice_engine::resolve::IndicesOptions,
        query: Value,
    ) -> BoxFuture<'static, ApiResult<(u64, u64)>> {
        let engine = self.engine.clone();
        self.run(exec, move |ctx| {
            let n = engine.count(&index, &options, &query, &ctx)?;
            let shards: u64 = engine
                .resolve_targets(&index, &options)?
                .iter()
                .map(|t| t.handle.number_of_shards())
                .sum();
            Ok((n, shards))
        })
    }

    fn by_query(
        &self,
        exec: Execution,
        index: String,
        req: ByQueryRequest,
    ) -> BoxFuture<'static, ApiResult<ByQueryOutcome>> {
        let engine = self.engine.clone();
        self.run(exec, move |ctx| engine.by_query(&index, &req, &ctx))
    }

    fn continue_scroll(
        &self,
        exec: Execution,
        scroll_id: String,
        keep_alive: Option<Duration>,
    ) -> BoxFuture<'static, ApiResult<Value>> {
        let engine = self.engine.clone();
        self.run(exec, move |ctx| {
            engine.continue_scroll(&scroll_id, keep_alive, &ctx)
        })
    }

    fn scroll_owner(&self, scroll_id: &str) -> Result<Option<Arc<str>>, EngineError> {
        self.engine.scroll_owner(scroll_id)
    }

    fn scroll_opened_by(&self, scroll_id: &str) -> Result<Option<Arc<str>>, EngineError> {
        self.engine.scroll_opened_by(scroll_id)
    }

    fn clear_scrolls(&self, ids: Vec<String>) -> BoxFuture<'static, ApiResult<u64>> {
        let engine = self.engine.clone();
        // Freeing contexts drops their searchers: keep that off the async threads.
        blocking(move || {
            if ids.len() == 1 && ids[0] == "_all" {
                engine.clear_all_scrolls();
                // OpenSearch counts each node that cleared its scrolls as one freed context
                // (`ClearScrollController.cleanAllScrolls`), whatever it held: on one node, 1.
                Ok(1)
            } else {
                engine.clear_scrolls(&ids).map(|n| n as u64)
            }
        })
        .boxed()
    }

    fn sync_scroll_limits(&self, limits: ScrollLimits) {
        let scrolls = self.engine.scrolls();
        if scrolls.limits() != limits {
            scrolls.set_limits(limits);
        }
    }
}

/// Runs blocking engine work of the data APIs (documents, bulk, index admin) off the async
/// threads, on tokio's blocking pool; a panic in it becomes a 500 for this request only.
///
/// # Cancel safety
/// Dropping the future does not stop the work: it runs to its end (a write is never left
/// half-applied because its client went away).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ApiError::Engine),
        Err(e) => Err(ApiError::Engine(EngineError::internal(format!(
            "request handler failed: {e}"
        )))),
    }
}
