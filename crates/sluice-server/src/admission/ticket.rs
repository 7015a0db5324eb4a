//! The admission ticket: everything admission granted one request, released exactly once.
//!
//! [`Admitted`] owns the task's registration, the throttle permit, the resource reservation (on
//! the task) and the count of the task's end in its group's stats:
//!
//! - the registration and the permit sit in one shared [`Held`]: the ticket keeps one
//!   reference, and work that may outlive the request (a search that runs on to its next
//!   checkpoint after its client left) keeps another through [`Admitted::execution`]; the
//!   task is unregistered and the slot freed when the last one goes (DESIGN D9);
//! - the end is counted once, in `total_completions` (and `failures` unless it ended well) by
//!   [`Admitted::finish`], or by `Drop` when the request was dropped before it finished (the
//!   client disconnected: the task is cancelled then, and counted as failed); a request turned
//!   away when its execution thread took it is counted as a rejection instead;
//! - a top-level request's ticket rides with its response ([`Admitted::ride_with`]) until the
//!   response has been handed to the HTTP layer, the way tower's `ResponseFuture` carries its
//!   permit; an `_msearch` item's ticket ends with the item.
//!
//! # Invariants
//! - T1 — a task's end is counted at most once: `outcome` leaves `Pending` once, in
//!   [`Admitted::finish`] or in `Drop`, and only `Pending` counts in `Drop`. Tested by the HTTP
//!   tests of `total_completions` and `failures` (success, error, disconnect).
//! - T2 — the permit is released exactly once, when the last reference to [`Held`] drops (the
//!   permit's own `Drop`, N2). Tested by the throttling stress test (no bucket left behind).
//! - T3 — a task leaves the task list only after its slot was given back: [`Held`] drops the
//!   permit, the shared-tier lease and the would-be queue place before the task's
//!   registration, so whoever sees the task gone (`_tasks`, a test waiting for it) finds its
//!   slot free. The other way round, a gateway's cancelled search left `_tasks` a few
//!   microseconds before its permit went, and
//!   `queueing::test_deleting_the_group_or_switching_it_to_monitor_releases_its_backlog`, run
//!   through a gateway, found the bucket still there in 5 of 25 runs; it tests this.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::response::Response;
use parking_lot::Mutex;
use serde_json::Value;
use sluice_core::BucketKey;
use sluice_core::permits::Permit;
use sluice_core::search_settings::GroupSearchSettings;
use sluice_engine::{EngineError, ErrorCode, NestedSearchHook, SearchRequest};

use super::throttle::Granted;
use crate::backend::{Execution, ExecutionHooks};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::tasks::{Task, TaskGuard};
use crate::workload::GroupEntry;

/// A deadline a task is cancelled at.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    /// Its `cancel_after_time_interval`, counted from its start.
    CancelAfter(Duration),
    /// A search timeout enforced here, counted from when it was set.
    Timeout(Duration),
}

/// What admission granted, shared with work that may outlive the request.
#[derive(Debug)]
pub struct Held {
    // Held only to be dropped, in the order the fields are declared: the slot before the
    // task's registration (T3).
    _permit: Option<Permit>,
    /// The shared-tier slot; its drop hands the release to a background task (never blocks).
    _lease: Option<sluice_cluster::shared::coordinator::SharedLease>,
    /// A monitored breach's place in the would-be queue (`super::dry_queue`).
    _dry_place: Option<super::dry_queue::DryPlace>,
    _task: TaskGuard,
}

/// How a ticket's task ended, for its group's stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Not settled yet: a drop now means the request was abandoned.
    Pending,
    /// Settled and counted.
    Settled,
}

/// An admitted request (see the module docs).
#[must_use = "dropping the ticket before the work ran cancels the task"]
pub struct Admitted {
    held: Arc<Held>,
    run: Arc<Run>,
    settings: GroupSearchSettings,
    cancel_after: Option<Duration>,
    /// The group's search timeout enforced as a deadline ([`Admitted::bound_by_timeout`]):
    /// when it passes, and the timeout itself.
    timeout_at: Option<(Instant, Duration)>,
    outcome: Outcome,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("task", &self.run.task.seq)
            .field("group", &self.run.entry.id)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

/// What the execution hooks share with the ticket.
struct Run {
    st: Arc<AppState>,
    task: Arc<Task>,
    entry: Arc<GroupEntry>,
    /// The bucket the request holds a permit of, for the diagnostics probe.
    bucket: Option<BucketKey>,
    /// A top-level request (not a scroll continuation): re-checked when it starts, and what it
    /// used teaches its group's per-task estimate.
    top_level: bool,
    /// Set when the start hook turned the request away.
    rejected_at_start: AtomicBool,
}

impl Admitted {
    /// The ticket of a request admitted with `granted`, whose task is `guard`'s.
    pub(super) fn new(
        st: Arc<AppState>,
        guard: TaskGuard,
        entry: Arc<GroupEntry>,
        granted: Granted,
        settings: GroupSearchSettings,
        cancel_after: Option<Duration>,
        top_level: bool,
    ) -> Admitted {
        let task = guard.task().clone();
        let bucket = granted.permit.as_ref().map(|p| p.key().clone());
        Admitted {
            held: Arc::new(Held {
                _task: guard,
                _permit: granted.permit,
                _lease: granted.lease,
                _dry_place: granted.dry_place,
            }),
            run: Arc::new(Run {
                st,
                task,
                entry,
                bucket,
                top_level,
                rejected_at_start: AtomicBool::new(false),
            }),
            settings,
            cancel_after,
            timeout_at: None,
            outcome: Outcome::Pending,
        }
    }

    /// The task.
    pub fn task(&self) -> &Arc<Task> {
        &self.run.task
    }

    /// The group the request runs in.
    pub fn group(&self) -> &Arc<GroupEntry> {
        &self.run.entry
    }

    /// Applies the group's search settings to a parsed search (facts §3: timeout, bucket
    /// limit), and labels it with the group so a scroll it opens keeps running there.
    /// `req.max_buckets` must already hold the cluster setting.
    pub fn apply_to_search(&self, req: &mut SearchRequest) {
        req.timeout = self.settings.timeout(req.timeout);
        req.max_buckets = self.settings.max_buckets(req.max_buckets);
        req.owner = Some(self.run.entry.id.clone());
        req.opened_by = self.run.task.principal.as_ref().map(|p| p.username.clone());
    }

    /// The `timeout` a search of this request runs with when it asked for `requested`: the
    /// group's `default_search_timeout` with OpenSearch's precedence (facts §3). For a
    /// backend that forwards the request rather than parsing it.
    pub fn search_timeout(&self, requested: Option<Duration>) -> Option<Duration> {
        self.settings.timeout(requested)
    }

    /// Bounds the work by a search `timeout` from now, enforced by cancelling the task, for
    /// a backend that cannot pass the timeout on with the request: a gateway's `_count`
    /// (OpenSearch's count API takes no `timeout`) or a search template whose rendered source
    /// it cannot reach (OpenSearch drops a template request's `timeout` parameter when the
    /// rendered source replaces the search's). A timeout gives partial results where the
    /// search runs; here the task is cancelled, the nearest a forwarder can do.
    pub fn bound_by_timeout(&mut self, timeout: Duration) {
        self.timeout_at = Instant::now().checked_add(timeout).map(|at| (at, timeout));
    }

    /// The group's search settings, resolved ([`GroupSearchSettings`]).
    pub fn search_settings(&self) -> &GroupSearchSettings {
        &self.settings
    }

    /// What a backend needs to run the request.
    pub fn execution(&self) -> Execution {
        let hold: Arc<dyn std::any::Any + Send + Sync> = self.held.clone();
        Execution {
            task: self.run.task.clone(),
            cancel_at: self.deadline().map(|(at, _)| at),
            hold,
            hooks: self.run.clone(),
        }
    }

    /// Settles the outcome of the work: counts the task's end and words its error as
    /// OpenSearch does (a cancelled task, a request turned away when it started).
    pub fn finish<T>(&mut self, result: ApiResult<T>) -> ApiResult<T> {
        if self.outcome != Outcome::Pending {
            return result;
        }
        self.outcome = Outcome::Settled;
        if self.run.rejected_at_start.load(Ordering::Acquire) {
            // Counted as a rejection (by the check), not as a completion: like a request
            // turned away at the door.
            return Err(match result {
                Err(ApiError::Engine(error)) => ApiError::Rejected {
                    error,
                    retry_after_secs: super::RETRY_AFTER_SECS,
                },
                Err(other) => other,
                Ok(_) => ApiError::Engine(EngineError::internal("rejected task returned a result")),
            });
        }
        count_end(&self.run.st, &self.run.entry, result.is_ok());
        // The shards of a search that failed here failed on this node.
        let node_id = &self.run.st.identity.node_id;
        result.map_err(|e| match e {
            ApiError::Engine(e) if e.code == ErrorCode::TaskCancelled => {
                let reason = self.cancel_reason();
                ApiError::Engine(cancelled_error(&reason, node_id, e.index.as_deref()))
            }
            ApiError::Engine(e) => ApiError::Engine(e.on_node(node_id)),
            other => other,
        })
    }

    /// Why the task was cancelled, as OpenSearch words it.
    fn cancel_reason(&self) -> String {
        let task = &self.run.task;
        task.cancel_reason
            .lock()
            .clone()
            .unwrap_or_else(|| match self.deadline() {
                Some((_, Deadline::CancelAfter(d))) => timeout_reason(d),
                Some((_, Deadline::Timeout(d))) => search_timeout_reason(d),
                None => "task cancelled".to_string(),
            })
    }

    /// The first of the deadlines the task is cancelled at, and which it is.
    fn deadline(&self) -> Option<(Instant, Deadline)> {
        let after = self
            .cancel_after
            .map(|d| (self.run.task.started + d, Deadline::CancelAfter(d)));
        let bound = self.timeout_at.map(|(at, d)| (at, Deadline::Timeout(d)));
        match (after, bound) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Attaches the ticket to `resp`: it is released when the response has been handed to
    /// the HTTP layer ([`ResponseTicket`]), so the slot covers building the response too.
    pub fn ride_with(self, mut resp: Response) -> Response {
        resp.extensions_mut()
            .insert(ResponseTicket(Arc::new(Mutex::new(Some(self)))));
        resp
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if self.outcome != Outcome::Pending {
            return;
        }
        // Dropped before the work was settled: the request was abandoned (its client
        // disconnected). The work stops at its next check; its end counts as a failure.
        self.run
            .st
            .tasks
            .cancel_seq(self.run.task.seq, "the client closed the connection");
        count_end(&self.run.st, &self.run.entry, false);
    }
}

/// Counts a task's end in its group's stats (DEFAULT's once the group is deleted:
/// [`crate::workload::Workload::end_stats`]): `total_completions`, `failures` unless it ended
/// well, and — for a group with a queue, acting (a `Retry-After` is computed from it) or only
/// monitored (the dry run estimates its would-queue wait from it) — its drain rate.
fn count_end(st: &AppState, entry: &GroupEntry, ok: bool) {
    let ended = st.workload.end_stats(entry);
    ended.total_completions.inc();
    if !ok {
        ended.failures.inc();
    }
    let stats = &entry.stats;
    let queue_configured = entry
        .group
        .as_ref()
        .is_some_and(|g| g.queue.size_per_bucket.unwrap_or(0) > 0);
    if entry.queue.is_some() || queue_configured {
        stats.drain.record(super::now_secs());
    }
}

/// An [`Admitted`] riding with its response, taken off and dropped by
/// [`release_with_response`] once the response is built (a response extension must be
/// `Clone`; only the first taker gets the ticket).
#[derive(Clone)]
pub struct ResponseTicket(Arc<Mutex<Option<Admitted>>>);

impl ResponseTicket {
    /// Releases the ticket now.
    pub fn release(&self) {
        drop(self.0.lock().take());
    }
}

/// Once the response is built and about to be handed to the HTTP layer (in the node's request
/// layers, [`crate::server::app`]), the admission ticket that rode with it is released (DESIGN
/// D9): its permit frees, its task is unregistered.
pub fn release_with_response(resp: &mut Response) {
    if let Some(ticket) = resp.extensions_mut().remove::<ResponseTicket>() {
        ticket.release();
    }
}

impl ExecutionHooks for Run {
    fn start(&self) -> Result<Box<dyn std::any::Any + Send>, EngineError> {
        // Checked again when an execution thread takes the task: usage is refreshed while
        // requests wait for a thread, and a group that went over its share meanwhile does not
        // start more work (as Trino's resource groups check their limits when a query leaves
        // the queue). Scroll continuations are not checked again.
        if self.top_level
            && let Err(e) = super::share::recheck_resources(&self.st, &self.entry, &self.task)
        {
            self.rejected_at_start.store(true, Ordering::Release);
            return Err(match e {
                ApiError::Rejected { error, .. } => error,
                other => EngineError::internal(format!("admission failed: {other:?}")),
            });
        }
        let executing = Executing::start(self.entry.clone());
        let probe = self
            .st
            .workload
            .probe
            .get()
            .zip(self.bucket.as_ref())
            .map(|(p, k)| p.enter(k, self.task.seq));
        Ok(Box::new((executing, probe)))
    }

    fn finished(
        &self,
        executing_since: Instant,
        measured_at: Instant,
        cpu_nanos: u64,
        memory_bytes: u64,
    ) {
        // What the task used since the last refresh charged it, for a paced group's quota.
        self.entry
            .charge_cpu(&self.task.usage, self.st.cluster_settings.wlm_mode());
        if self.top_level {
            super::share::observe_finished(
                &self.st,
                &self.entry,
                executing_since,
                measured_at,
                cpu_nanos,
                memory_bytes,
            );
        }
    }

    fn nested(&self) -> Arc<dyn NestedSearchHook> {
        Arc::new(super::nested::NestedSearches::new(
            self.st.clone(),
            self.task.clone(),
            self.entry.clone(),
        ))
    }
}

/// Marks a group's task as executing while alive (the `executing` gauge and its peak in the
/// group's stats: what actually ran at once, as the backend saw it).
struct Executing(Arc<GroupEntry>);

impl Executing {
    fn start(entry: Arc<GroupEntry>) -> Executing {
        entry.stats.executing_started();
        Executing(entry)
    }
}

impl Drop for Executing {
    fn drop(&mut self) {
        self.0.stats.executing_ended();
    }
}

/// The reason of a task cancelled by a search timeout enforced here
/// ([`Admitted::bound_by_timeout`]): worded as OpenSearch words the cancellation timeout, and
/// naming the setting, which is the group's.
fn search_timeout_reason(timeout: Duration) -> String {
    format!(
        "Search timeout of {} is expired (the workload group's search.default_search_timeout, which the upstream does not apply to this request)",
        sluice_wire::format_time_value(timeout)
    )
}

/// OpenSearch's reason for a task cancelled by its `cancel_after_time_interval`.
pub(super) fn timeout_reason(cancel_after: Duration) -> String {
    format!(
        "Cancellation timeout of {} is expired",
        sluice_wire::format_time_value(cancel_after)
    )
}

/// OpenSearch's error for a cancelled search: a search phase failure caused by
/// `task_cancelled_exception`, whose shard failed on node `node_id`, in `index` when the search
/// was stopped in one index (`None` when it was stopped before it reached one, or in several).
pub(super) fn cancelled_error(reason: &str, node_id: &str, index: Option<&str>) -> EngineError {
    let cause = EngineError::new(
        ErrorCode::TaskCancelled,
        format!("cancelled task with reason: {reason}"),
    );
    let mut outer = EngineError::new(ErrorCode::SearchPhaseExecution, "SearchTask was cancelled")
        .with_extra("phase", Value::from("query"))
        .with_extra("grouped", Value::from(true))
        .on_node(node_id);
    if let Some(index) = index {
        outer = outer.on_index(index);
    }
    outer.cause = Some(Box::new(cause));
    outer
}
