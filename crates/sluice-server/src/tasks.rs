//! The task registry: every search-like unit of work is a task with a node-unique id
//! `<node_id>:<n>`, an action name, a start time, an optional parent and a cancellation flag.
//!
//! A task is registered by [`TaskManager::register`], which returns a [`TaskGuard`]; dropping
//! the guard unregisters the task, so the registry lists exactly the work that is running, on
//! every path out of it. Cancelling a task sets its flag and its descendants' flags; the engine
//! checks the flag while it works.
//!
//! A task started in the background (`_delete_by_query?wait_for_completion=false`) stores its
//! result when it ends ([`TaskManager::store_result`]), and `GET _tasks/{id}` reads it there
//! once the task is no longer running, as OpenSearch reads its `.tasks` index. Stored results
//! are kept in memory, the newest [`MAX_STORED_RESULTS`].
//!
//! # Invariants
//! - A task id is never reused while the node runs: the registry is kept in [`SHARDS`]
//!   shards, each numbering its own tasks `n × SHARDS + shard + 1` with a counter that only
//!   grows under its lock (`test_ids_are_unique_across_threads`).
//! - A registered task is in its shard until its guard drops, and only then.
//! - A child registered under a cancelled parent starts cancelled, whichever shards the two
//!   are in: registering a child holds the parent's shard and its own, cancelling holds every
//!   shard, each taken in shard order (`test_cancel_reaches_children_on_other_threads`).
//!
//! A thread registers its tasks in a shard of its own while there are no more threads than
//! shards (its home, [`home_shard`]): the gateway's lane threads, each serving its own
//! connections, then register, list and remove their searches writing no cache line another
//! lane thread writes. One map under one lock had both threads pass its lock word, its
//! table and the id counter between them several times a search, at ~230 ns a pass on the
//! two-core benchmark machine (BENCHMARKS.md "Lines the lane threads shared").
//! - R1 — from [`TaskManager::expect_result`] on, a background task is always found by
//!   [`TaskManager::lookup`]: running (registered, or ended and its result being stored) or
//!   done (its result stored), never missing (`test_result_is_found_once_the_task_is_gone`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

/// How many results of background tasks the node keeps: OpenSearch keeps them in its
/// `.tasks` index until deleted; sluice keeps them in memory, so a client that never reads
/// them cannot grow the node without bound. A result is a few hundred bytes (a by-query
/// response), so this bounds them near a megabyte, and a client polls within minutes.
pub const MAX_STORED_RESULTS: usize = 1000;

/// What a task does, as `_tasks?detailed` shows it: text, or a forwarded search's index and
/// body, put into words only when a listing asks (a gateway forwards a search's body
/// unparsed; copying it into a description for every search, to be read by the rare listing,
/// cost a pass over the body, an allocation and a copy of it a search).
#[derive(Debug, Clone)]
pub enum Description {
    /// The description itself.
    Text(String),
    /// A search the gateway forwards with `body` as the client sent it, on `index`.
    Forwarded {
        /// The request's index expression.
        index: Box<str>,
        /// The body as sent (shared with the forwarded request, not copied).
        body: bytes::Bytes,
    },
}

impl Description {
    /// The description's text. A forwarded search is worded as OpenSearch words a search (its
    /// indices, type and source), with the body trimmed, `{}` for none, and bytes that are not
    /// UTF-8 replaced.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Description::Text(t) => std::borrow::Cow::Borrowed(t),
            Description::Forwarded { index, body } => {
                let source = String::from_utf8_lossy(body);
                let source = source.trim();
                let source = if source.is_empty() { "{}" } else { source };
                std::borrow::Cow::Owned(search_wording(index, source))
            }
        }
    }
}

/// A search's task description as OpenSearch words it: its indices, type and `source`.
pub fn search_wording(index: &str, source: &str) -> String {
    format!("indices[{index}], search_type[QUERY_THEN_FETCH], source[{source}]")
}

impl Default for Description {
    fn default() -> Description {
        Description::Text(String::new())
    }
}

impl From<String> for Description {
    fn from(text: String) -> Description {
        Description::Text(text)
    }
}

/// What a long-running task shows as its `status` while it runs (a by-query action's counts),
/// read by `_tasks` and `GET _tasks/{id}`.
pub trait TaskStatus: Send + Sync + std::fmt::Debug {
    /// The status object, as OpenSearch renders the task's `Task.Status`.
    fn status(&self) -> Value;
}

/// Action names, as OpenSearch reports them.
pub mod actions {
    /// A `_search` request; also `_count`, which OpenSearch runs as a search.
    pub const SEARCH: &str = "indices:data/read/search";
    /// An `_msearch` request (its items are `SEARCH` children).
    pub const MSEARCH: &str = "indices:data/read/msearch";
    /// `_msearch/template` (a gateway forwards it; the embedded engine has no templates).
    pub const MSEARCH_TEMPLATE: &str = "indices:data/read/msearch/template";
    /// A scroll continuation.
    pub const SCROLL: &str = "indices:data/read/scroll";
    /// A `_delete_by_query` request.
    pub const DELETE_BY_QUERY: &str = "indices:data/write/delete/byquery";
    /// An `_update_by_query` request.
    pub const UPDATE_BY_QUERY: &str = "indices:data/write/update/byquery";
    /// A `_reindex` request.
    pub const REINDEX: &str = "indices:data/write/reindex";
    /// A `_rank_eval` request (a gateway forwards it).
    pub const RANK_EVAL: &str = "indices:data/read/rank_eval";
    /// OpenSearch's `_plugins/_sql` query (the SQL plugin's `SqlQueryAction`).
    pub const SQL: &str = "cluster:admin/opensearch/sql";
    /// OpenSearch's `_plugins/_ppl` query (the SQL plugin's `PPLQueryAction`).
    pub const PPL: &str = "cluster:admin/opensearch/ppl";
    /// OpenSearch's `_plugins/_asynchronous_search` submission.
    pub const ASYNCHRONOUS_SEARCH_SUBMIT: &str =
        "cluster:admin/opendistro/asynchronous_search/submit";
    /// Elasticsearch's `_async_search` submission.
    pub const ASYNC_SEARCH_SUBMIT: &str = "indices:data/read/async_search/submit";
    /// Elasticsearch's `_eql/search`.
    pub const EQL: &str = "indices:data/read/eql";
    /// Elasticsearch's `_sql`.
    pub const ES_SQL: &str = "indices:data/read/sql";
    /// A `_forcemerge` request run in the background (`wait_for_completion=false`).
    pub const FORCEMERGE: &str = "indices:admin/forcemerge";
    /// A `_tasks` listing, itself a task while it runs (clients expect to find it).
    pub const LIST_TASKS: &str = "cluster:monitor/tasks/lists";
}

/// A task id: the node id and a sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskId {
    /// The node that runs the task.
    pub node: String,
    /// The node-local sequence number.
    pub seq: u64,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.node, self.seq)
    }
}

impl TaskId {
    /// Parses `node:seq`.
    pub fn parse(s: &str) -> Option<TaskId> {
        let (node, seq) = s.rsplit_once(':')?;
        Some(TaskId {
            node: node.to_string(),
            seq: seq.parse().ok()?,
        })
    }
}

/// The header a client names its request with, kept on the request's tasks (OpenSearch's
/// `Task.X_OPAQUE_ID`, spelled as OpenSearch lists it in `_tasks`).
pub use sluice_wire::OPAQUE_ID_HEADER;

/// One running task.
#[derive(Debug)]
pub struct Task {
    /// Node-local sequence number.
    pub seq: u64,
    /// The action name.
    pub action: &'static str,
    /// What the task does, for `_tasks?detailed`.
    pub description: Description,
    /// The parent task's sequence number on this node.
    pub parent: Option<u64>,
    /// Wall-clock start, epoch millis.
    pub start_time_millis: i64,
    /// Monotonic start.
    pub started: Instant,
    /// The cancellation flag the engine checks.
    pub cancelled: Arc<AtomicBool>,
    /// Why it was cancelled, once it was.
    pub cancel_reason: Mutex<Option<String>>,
    /// Woken when the task is cancelled: a request parked in a throttle queue waits on it, so
    /// a cancellation evicts it at once ([`Task::cancelled`]).
    cancel_notify: tokio::sync::Notify,
    /// The waker of the one future that runs the task's execution, woken when the task is
    /// cancelled ([`Task::execution_cancelled`]).
    execution_waker: futures::task::AtomicWaker,
    /// Whether the task is parked in a throttle queue (shown as `status.state: queued`).
    pub queued: AtomicBool,
    /// Whether admission has yet to decide the task (shown as `status.state: admitting`, e.g.
    /// while a shared-tier owner is asked): set from registration for a task registered by
    /// admission, cleared once it is admitted. A listing that shows a task without it shows
    /// one that holds its throttle slots.
    pub admitting: AtomicBool,
    /// What the task reports as its `status` while it runs, set once by the work it runs.
    status: std::sync::OnceLock<Arc<dyn TaskStatus>>,
    /// Woken when the task is unregistered (a `GET _tasks/{id}?wait_for_completion` waits on
    /// it).
    ended: tokio::sync::Notify,
    /// Who runs it: the principal of the request that registered it; `None` when `auth.type`
    /// is `none`.
    pub principal: Option<Arc<crate::auth::Principal>>,
    /// The peer address of the request that registered it, for the audit lines of what is
    /// refused on its behalf while it runs (a nested search's lookup); `None` for work the
    /// node starts itself.
    pub remote_addr: Option<std::net::IpAddr>,
    /// The workload group the task runs in, set once when admission has tagged it; unset for
    /// tasks outside workload management (an `_msearch` parent, whose items are tagged one by
    /// one) and for a task not tagged yet.
    group: std::sync::OnceLock<Arc<crate::workload::GroupEntry>>,
    /// The throttle buckets this task and its ancestors hold, set once by admission; a nested
    /// search is not charged again for them (DESIGN D8).
    held_buckets: std::sync::OnceLock<Vec<sluice_core::BucketKey>>,
    /// CPU and memory used so far, sampled by the thread that runs the task.
    pub usage: crate::accounting::TaskUsage,
    /// The task's place among its group's tasks admitted and not yet measured (set once after
    /// registration by a request admitted with a reservation; see
    /// [`sluice_core::resources::unmeasured`]). Given back when a usage refresh first measures
    /// the task, or when it is unregistered.
    pub reservation: std::sync::OnceLock<sluice_core::resources::Reservation>,
    /// Whether the dry run has counted a would-be refusal of the task: a would-be rejection
    /// (`total_would_reject`) by a resource-share check, or a would-be 429 of its throttle
    /// (`total_would_throttle`). The share is checked at the door and again when a thread
    /// takes the task, and `enabled` refuses a request once, in its pipeline's order: the
    /// figures count requests, each in one of them at most.
    pub dry_refused: AtomicBool,
    /// Whether the dry run found the task's group over its share at the door while `enabled`
    /// would queue the group: `enabled` would have made it wait for the share, not rejected it
    /// (`admission/share.rs` R3). Counted after its throttle, once
    /// (`crate::admission::share::settle_dry_wait`).
    pub dry_share_wait: AtomicBool,
    /// The request's `X-Opaque-Id` header, as OpenSearch reads it (each byte one ISO-8859-1
    /// character: `crate::http::meta::opaque_id_text`), shown under `headers` in `_tasks` as
    /// OpenSearch shows it; set once, after registration.
    opaque_id: std::sync::OnceLock<Arc<str>>,
}

impl Task {
    /// The `X-Opaque-Id` of the request that made the task, if it sent one.
    pub fn opaque_id(&self) -> Option<&Arc<str>> {
        self.opaque_id.get()
    }

    /// Records the request's `X-Opaque-Id`; only the first call counts.
    pub fn set_opaque_id(&self, id: Arc<str>) {
        let _ = self.opaque_id.set(id);
    }

    /// The workload group the task runs in, once admission has tagged it.
    pub fn group(&self) -> Option<&Arc<crate::workload::GroupEntry>> {
        self.group.get()
    }

    /// Sets the task's group; only the first call counts (a task is tagged once).
    pub fn set_group(&self, group: Arc<crate::workload::GroupEntry>) {
        let _ = self.group.set(group);
    }

    /// Sets what the task reports as its `status`; only the first call counts.
    pub fn set_status(&self, status: Arc<dyn TaskStatus>) {
        let _ = self.status.set(status);
    }

    /// The throttle buckets the task and its ancestors hold.
    pub fn held_buckets(&self) -> &[sluice_core::BucketKey] {
        self.held_buckets.get().map_or(&[], Vec::as_slice)
    }

    /// Sets the buckets the task and its ancestors hold; only the first call counts.
    pub fn set_held_buckets(&self, held: Vec<sluice_core::BucketKey>) {
        let _ = self.held_buckets.set(held);
    }

    /// Whether the task has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Cancels the task: sets its flag, with `reason` when it is the first cancellation (none:
    /// the ticket words it from its deadline), then wakes what waits for it
    /// ([`Task::cancelled`], [`Task::execution_cancelled`]), which re-reads the flag when woken.
    /// Every cancellation goes through here, so neither wait is ever left unwoken.
    pub fn cancel(&self, reason: Option<&str>) {
        if !self.cancelled.swap(true, Ordering::AcqRel)
            && let Some(reason) = reason
        {
            *self.cancel_reason.lock() = Some(reason.to_string());
        }
        self.cancel_notify.notify_waiters();
        self.execution_waker.wake();
    }

    /// Resolves once the task is cancelled (at once if it already is), for the one future
    /// that runs the task's execution (a backend's `execute`: a task has one execution at a
    /// time); any other waiter uses [`Task::cancelled`]. Its waker is kept in the task, not in
    /// a list each wait joins and leaves: two waits of one task at once would have the
    /// second take the first's place. On the gateway's fast lane the list's joining and
    /// leaving took its lock four times a search (BENCHMARKS.md "Atomics a search"). Tested by
    /// `test_a_cancellation_wakes_the_tasks_execution` and
    /// `test_a_cancellation_racing_the_executions_wait_always_wakes_it` (it fails when the flag
    /// is not read again after the registration).
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting.
    pub fn execution_cancelled(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.is_cancelled() {
                return std::task::Poll::Ready(());
            }
            self.execution_waker.register(cx.waker());
            // Registered before the flag is read again: a cancellation between the two reads
            // sets the flag before it wakes the waker registered here.
            if self.is_cancelled() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
    }

    /// Resolves once the task is cancelled (at once if it already is).
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.cancel_notify.notified();
            tokio::pin!(notified);
            // Registered before the flag is read: a cancellation between the read and the
            // wait still wakes it.
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// What a new task is (see [`TaskManager::register_task`]).
#[derive(Debug)]
pub struct NewTask {
    /// The action name.
    pub action: &'static str,
    /// What the task does, for `_tasks?detailed`.
    pub description: Description,
    /// The parent task's sequence number on this node.
    pub parent: Option<u64>,
    /// Wall-clock start, epoch millis.
    pub start_time_millis: i64,
    /// Who runs it.
    pub principal: Option<Arc<crate::auth::Principal>>,
    /// The peer address of the request it runs for ([`Task::remote_addr`]).
    pub remote_addr: Option<std::net::IpAddr>,
    /// Whether admission has yet to decide it (a task registered by admission).
    pub admitting: bool,
    /// The request's `X-Opaque-Id`, shown from the task's first listing on.
    pub opaque_id: Option<Arc<str>>,
}

/// Running tasks by sequence number.
type TaskMap = HashMap<u64, Arc<Task>, foldhash::fast::RandomState>;

/// How many shards the registry is kept in: one for each thread of a gateway of up to eight
/// cores (its lane threads are one a core), the busiest threads there are. Threads beyond
/// that share shards, which costs what one shard for all cost, no more. Lookups by id go
/// straight to the id's shard; only a listing and a cancellation read all eight.
const SHARDS: usize = 8;

/// One shard: its running tasks and the count of ids it gave. Aligned to two cache lines, so
/// that two shards never share one (x86 fetches lines in adjacent pairs).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    inner: Mutex<ShardInner>,
}

#[derive(Debug, Default)]
struct ShardInner {
    /// How many ids the shard gave.
    given: u64,
    tasks: TaskMap,
}

/// The shard the task `seq` is in.
fn shard_of(seq: u64) -> usize {
    // A u64 residue of SHARDS fits usize.
    (seq.wrapping_sub(1) % SHARDS as u64) as usize
}

/// The calling thread's home shard: the threads take the shards in turn as they first
/// register a task.
fn home_shard() -> usize {
    static NEXT_HOME: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static HOME: usize = NEXT_HOME.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    HOME.with(|h| *h)
}

/// The node's registry of running tasks.
#[derive(Debug)]
pub struct TaskManager {
    node_id: String,
    /// Every request registers and removes itself here: foldhash, not std's SipHash (a few
    /// hundred instructions a search on the gateway's fast lane, BENCHMARKS.md).
    shards: [Shard; SHARDS],
    /// Results of background tasks that ended, oldest first, at most [`MAX_STORED_RESULTS`].
    results: Mutex<std::collections::VecDeque<(u64, StoredResult)>>,
    /// Background tasks whose result is not stored yet (R1).
    pending: Mutex<HashMap<u64, Arc<Task>>>,
}

/// The stored result of a background task that ended, with who ran it: a result is read
/// only by whom the task was visible to (its owner, or anyone when `auth.type` is `none`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResult {
    /// Who ran the task ([`Task::principal`]).
    pub owner: Option<Arc<crate::auth::Principal>>,
    /// `{"completed": true, "task": …, "response"|"error": …}`.
    pub doc: Value,
}

/// Where a task is, for `GET _tasks/{id}`.
#[derive(Debug)]
pub enum Lookup {
    /// Running (or a background task whose result is being stored).
    Running(Arc<Task>),
    /// A background task that ended: its stored result.
    Done(StoredResult),
    /// Not running, and no result stored.
    Missing,
}

/// Keeps a task registered; dropping it unregisters the task.
#[must_use = "dropping the guard unregisters the task at once"]
#[derive(Debug)]
pub struct TaskGuard {
    manager: Arc<TaskManager>,
    task: Arc<Task>,
}

impl TaskGuard {
    /// The task.
    pub fn task(&self) -> &Arc<Task> {
        &self.task
    }

    /// The task's full id.
    pub fn id(&self) -> TaskId {
        TaskId {
            node: self.manager.node_id.clone(),
            seq: self.task.seq,
        }
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let seq = self.task.seq;
        self.manager.shards[shard_of(seq)]
            .inner
            .lock()
            .tasks
            .remove(&seq);
        // After the removal: a waiter re-reads the registry when woken.
        self.task.ended.notify_waiters();
        // Its place among the unmeasured tasks is free once it no longer runs, even while
        // someone still holds the task (a `_tasks` listing, a refresh).
        if let Some(r) = self.task.reservation.get() {
            r.release();
        }
    }
}

/// Cancels its task when dropped, unless disarmed: the handler of a request holds one, so a
/// client that disconnects (hyper drops the handler's future) cancels the work it started.
#[derive(Debug)]
pub struct CancelOnDrop {
    manager: Arc<TaskManager>,
    seq: u64,
    armed: bool,
}

impl CancelOnDrop {
    /// Arms a cancel-on-drop for the task `seq`.
    pub fn new(manager: Arc<TaskManager>, seq: u64) -> CancelOnDrop {
        CancelOnDrop {
            manager,
            seq,
            armed: true,
        }
    }

    /// The request completed: dropping no longer cancels.
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.manager
                .cancel_seq(self.seq, "the client closed the connection");
        }
    }
}

impl TaskManager {
    /// A registry for the node `node_id`.
    pub fn new(node_id: &str) -> TaskManager {
        TaskManager {
            node_id: node_id.to_string(),
            shards: Default::default(),
            results: Mutex::new(std::collections::VecDeque::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The node id task ids carry.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Registers a task outside any workload group, run by `principal`; a child of a cancelled
    /// parent starts cancelled.
    pub fn register(
        self: &Arc<Self>,
        action: &'static str,
        description: String,
        parent: Option<u64>,
        principal: Option<Arc<crate::auth::Principal>>,
    ) -> TaskGuard {
        self.register_task(NewTask {
            action,
            description: Description::Text(description),
            parent,
            start_time_millis: sluice_engine::now_millis(),
            principal,
            remote_addr: None,
            admitting: false,
            opaque_id: None,
        })
    }

    /// Registers a task; a child of a cancelled parent starts cancelled.
    pub fn register_task(self: &Arc<Self>, new: NewTask) -> TaskGuard {
        self.register_in(home_shard(), new)
    }

    /// [`TaskManager::register_task`] in the shard `home`.
    fn register_in(self: &Arc<Self>, home: usize, new: NewTask) -> TaskGuard {
        let NewTask {
            action,
            description,
            parent,
            start_time_millis,
            principal,
            remote_addr,
            admitting,
            opaque_id,
        } = new;
        // Shards are taken in shard order, as `cancel_seq` takes them all.
        let (mut own, parent_cancelled) = match parent.map(shard_of) {
            Some(ps) if ps != home => {
                let low = self.shards[ps.min(home)].inner.lock();
                let high = self.shards[ps.max(home)].inner.lock();
                let (own, of_parent) = if ps < home { (high, low) } else { (low, high) };
                let cancelled = parent
                    .and_then(|p| of_parent.tasks.get(&p))
                    .is_some_and(|p| p.is_cancelled());
                // The parent's shard may go while this child's own is held: a cancellation
                // takes every shard, so it acts only after this child is in and finds it.
                drop(of_parent);
                (own, cancelled)
            }
            _ => {
                let own = self.shards[home].inner.lock();
                let cancelled = parent
                    .and_then(|p| own.tasks.get(&p))
                    .is_some_and(|p| p.is_cancelled());
                (own, cancelled)
            }
        };
        let seq = own.given * SHARDS as u64 + home as u64 + 1;
        own.given += 1;
        let task = Arc::new(Task {
            seq,
            action,
            description,
            parent,
            start_time_millis,
            started: Instant::now(),
            cancelled: Arc::new(AtomicBool::new(parent_cancelled)),
            cancel_reason: Mutex::new(
                parent_cancelled.then(|| "the parent task was cancelled".to_string()),
            ),
            cancel_notify: tokio::sync::Notify::new(),
            execution_waker: futures::task::AtomicWaker::new(),
            queued: AtomicBool::new(false),
            admitting: AtomicBool::new(admitting),
            status: std::sync::OnceLock::new(),
            ended: tokio::sync::Notify::new(),
            principal,
            remote_addr,
            group: std::sync::OnceLock::new(),
            held_buckets: std::sync::OnceLock::new(),
            usage: crate::accounting::TaskUsage::default(),
            reservation: std::sync::OnceLock::new(),
            dry_refused: AtomicBool::new(false),
            dry_share_wait: AtomicBool::new(false),
            opaque_id: opaque_id.map_or_else(std::sync::OnceLock::new, std::sync::OnceLock::from),
        });
        own.tasks.insert(seq, task.clone());
        drop(own);
        TaskGuard {
            manager: self.clone(),
            task,
        }
    }

    /// A snapshot of the running tasks, by sequence number.
    pub fn list(&self) -> Vec<Arc<Task>> {
        let mut v: Vec<Arc<Task>> = Vec::new();
        for shard in &self.shards {
            v.extend(shard.inner.lock().tasks.values().cloned());
        }
        v.sort_by_key(|t| t.seq);
        v
    }

    /// The running task `seq`, if any.
    pub fn get(&self, seq: u64) -> Option<Arc<Task>> {
        self.shards[shard_of(seq)]
            .inner
            .lock()
            .tasks
            .get(&seq)
            .cloned()
    }

    /// Marks `task` (registered) as running in the background: it will store its result
    /// ([`TaskManager::store_result`]), and is found by [`TaskManager::lookup`] until then
    /// even once unregistered (R1).
    pub fn expect_result(&self, task: &Arc<Task>) {
        self.pending.lock().insert(task.seq, task.clone());
    }

    /// Stores the result of the background task `seq`, dropping the oldest beyond
    /// [`MAX_STORED_RESULTS`].
    pub fn store_result(&self, seq: u64, result: StoredResult) {
        {
            let mut results = self.results.lock();
            results.push_back((seq, result));
            while results.len() > MAX_STORED_RESULTS {
                results.pop_front();
            }
        }
        // After the result is in (R1): a reader that misses it here finds it there.
        let task = self.pending.lock().remove(&seq);
        if let Some(task) = task {
            task.ended.notify_waiters();
        }
    }

    /// Stores the end of the background task `task`: its final state with its response, or
    /// with its error, as `GET _tasks/{id}` shows a task result.
    pub fn store_outcome(&self, task: &Task, outcome: Result<Value, &crate::error::ApiError>) {
        let mut doc = json!({"completed": true, "task": self.render(task, true)});
        match outcome {
            Ok(response) => doc["response"] = response,
            Err(e) => doc["error"] = crate::error::error_object(e),
        }
        let owner = task.principal.clone();
        self.store_result(task.seq, StoredResult { owner, doc });
    }

    /// The stored result of the task `seq`, if it ran in the background and ended.
    pub fn result(&self, seq: u64) -> Option<StoredResult> {
        self.results
            .lock()
            .iter()
            .rev()
            .find(|(s, _)| *s == seq)
            .map(|(_, r)| r.clone())
    }

    /// The running task `seq`, including a background task whose result is being stored.
    fn running(&self, seq: u64) -> Option<Arc<Task>> {
        self.get(seq)
            .or_else(|| self.pending.lock().get(&seq).cloned())
    }

    /// Where the task `seq` is: running, done with a stored result, or missing. Reads the
    /// results, then the running tasks, then the results again, so a task that ends meanwhile
    /// is seen in one place or the other (R1).
    pub fn lookup(&self, seq: u64) -> Lookup {
        if let Some(r) = self.result(seq) {
            return Lookup::Done(r);
        }
        if let Some(t) = self.running(seq) {
            return Lookup::Running(t);
        }
        match self.result(seq) {
            Some(r) => Lookup::Done(r),
            None => Lookup::Missing,
        }
    }

    /// Waits until the task `seq` has ended (and stored its result, if it runs in the
    /// background), or until `deadline`; answers whether it ended.
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting.
    pub async fn wait_until_ended(&self, seq: u64, deadline: tokio::time::Instant) -> bool {
        let Some(task) = self.running(seq) else {
            return true;
        };
        loop {
            let ended = task.ended.notified();
            tokio::pin!(ended);
            // Registered before the registry is read: an end between the read and the wait
            // still wakes it.
            ended.as_mut().enable();
            if self.running(seq).is_none() {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.running(seq).is_none();
            }
        }
    }

    /// Cancels the task `seq` and its descendants; returns the tasks newly cancelled.
    pub fn cancel_seq(&self, seq: u64, reason: &str) -> Vec<Arc<Task>> {
        // Every shard, in shard order (see `register_task`).
        let shards: Vec<_> = self.shards.iter().map(|s| s.inner.lock()).collect();
        let mut out = Vec::new();
        let mut stack = vec![seq];
        while let Some(s) = stack.pop() {
            if let Some(t) = shards[shard_of(s)].tasks.get(&s) {
                t.cancel(Some(reason));
                out.push(t.clone());
            }
            stack.extend(
                shards
                    .iter()
                    .flat_map(|shard| shard.tasks.values())
                    .filter(|t| t.parent == Some(s))
                    .map(|t| t.seq),
            );
        }
        out
    }

    /// Renders a task as OpenSearch's `_tasks` does.
    pub fn render(&self, t: &Task, detailed: bool) -> Value {
        let mut m = Map::new();
        m.insert("node".into(), json!(self.node_id));
        m.insert("id".into(), json!(t.seq));
        m.insert("type".into(), json!("transport"));
        m.insert("action".into(), json!(t.action));
        if detailed {
            m.insert("description".into(), json!(t.description.text()));
        }
        // Admission's state is read before the running time, so a listing that shows a task
        // admitted shows a moment after its admission.
        let waiting = if t.queued.load(Ordering::Acquire) {
            Some("queued")
        } else if t.admitting.load(Ordering::Acquire) {
            Some("admitting")
        } else {
            None
        };
        m.insert("start_time_in_millis".into(), json!(t.start_time_millis));
        m.insert(
            "running_time_in_nanos".into(),
            json!(t.started.elapsed().as_nanos() as u64),
        );
        m.insert("cancellable".into(), json!(true));
        m.insert("cancelled".into(), json!(t.is_cancelled()));
        // A by-query action shows its counts; a request parked in a throttle queue or still
        // being admitted says so (OpenSearch clients read a task's `status` as an object of
        // the action's own).
        let mut status = t.status.get().map(|s| s.status());
        if let Some(state) = waiting {
            let s = status.get_or_insert_with(|| json!({}));
            s["state"] = json!(state);
        }
        if let Some(status) = status {
            m.insert("status".into(), status);
        }
        if let Some(p) = t.parent {
            m.insert(
                "parent_task_id".into(),
                json!(format!("{}:{p}", self.node_id)),
            );
        }
        // OpenSearch lists the request headers it keeps on a task (`X-Opaque-Id`) under
        // `headers`, an empty object when there are none.
        let headers = match t.opaque_id() {
            Some(id) => json!({ OPAQUE_ID_HEADER: &**id }),
            None => json!({}),
        };
        m.insert("headers".into(), headers);
        if detailed {
            // OpenSearch's shape; a sluice search runs on one thread, so total, min, max and
            // average are the same figures.
            let one = json!({
                "cpu_time_in_nanos": t.usage.cpu_nanos(),
                "memory_in_bytes": t.usage.memory_bytes(),
            });
            m.insert(
                "resource_stats".into(),
                json!({
                    "average": one, "total": one, "min": one, "max": one,
                    "thread_info": {"thread_executions": 1, "active_threads": 1}
                }),
            );
        }
        if detailed && let Some(g) = t.group() {
            m.insert(
                "workload_group".into(),
                json!({"id": &*g.id, "name": g.name()}),
            );
        }
        Value::Object(m)
    }
}

/// An instant no wait reaches (tokio's own "far future": about 30 years on), for a wait
/// without a bound.
pub fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(86400 * 365 * 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_a_forwarded_search_is_worded_as_opensearch_words_a_search() {
        let worded = |index: &str, body: &'static [u8]| {
            Description::Forwarded {
                index: index.into(),
                body: bytes::Bytes::from_static(body),
            }
            .text()
            .into_owned()
        };
        assert_eq!(
            worded("i", b"  "),
            "indices[i], search_type[QUERY_THEN_FETCH], source[{}]"
        );
        assert_eq!(
            worded("i", b"{\"q\":\"\xff\"}"),
            "indices[i], search_type[QUERY_THEN_FETCH], source[{\"q\":\"\u{fffd}\"}]"
        );
        assert_eq!(
            worded("a,b", b" {\"size\":1}\n"),
            "indices[a,b], search_type[QUERY_THEN_FETCH], source[{\"size\":1}]"
        );
        assert_eq!(Description::from("d".to_string()).text(), "d");
    }

    #[test]
    fn test_guard_drop_unregisters() {
        let m = Arc::new(TaskManager::new("n"));
        let g = m.register(actions::SEARCH, "d".into(), None, None);
        assert_eq!(m.list().len(), 1);
        assert_eq!(g.id().to_string(), format!("n:{}", g.task().seq));
        drop(g);
        assert!(m.list().is_empty());
    }

    #[test]
    fn test_cancel_reaches_children_and_new_children_start_cancelled() {
        let m = Arc::new(TaskManager::new("n"));
        let parent = m.register(actions::MSEARCH, "p".into(), None, None);
        let child = m.register(actions::SEARCH, "c".into(), Some(parent.task().seq), None);
        let other = m.register(actions::SEARCH, "o".into(), None, None);
        let cancelled = m.cancel_seq(parent.task().seq, "by test");
        assert_eq!(cancelled.len(), 2);
        assert!(child.task().is_cancelled());
        assert!(!other.task().is_cancelled());
        let late = m.register(
            actions::SEARCH,
            "late".into(),
            Some(parent.task().seq),
            None,
        );
        assert!(late.task().is_cancelled());
    }

    /// A task of `parent` registered in the shard `home`.
    fn task_in(m: &Arc<TaskManager>, home: usize, parent: Option<u64>) -> TaskGuard {
        m.register_in(
            home,
            NewTask {
                action: actions::SEARCH,
                description: Description::Text("t".into()),
                parent,
                start_time_millis: 0,
                principal: None,
                remote_addr: None,
                admitting: false,
                opaque_id: None,
            },
        )
    }

    #[test]
    fn test_ids_are_unique_across_threads() {
        let m = Arc::new(TaskManager::new("n"));
        let guards: Vec<TaskGuard> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2 * SHARDS)
                .map(|_| {
                    let m = &m;
                    scope.spawn(move || {
                        (0..100)
                            .map(|_| m.register(actions::SEARCH, "d".into(), None, None))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("registering thread"))
                .collect()
        });
        let seqs: std::collections::HashSet<u64> = guards.iter().map(|g| g.task().seq).collect();
        assert_eq!(seqs.len(), guards.len(), "an id was given twice");
        assert!(seqs.iter().all(|&s| s >= 1));
        for g in &guards {
            assert_eq!(m.get(g.task().seq).map(|t| t.seq), Some(g.task().seq));
        }
        assert_eq!(m.list().len(), guards.len());
        drop(guards);
        assert!(m.list().is_empty());
    }

    #[test]
    fn test_cancel_reaches_children_on_other_threads() {
        let m = Arc::new(TaskManager::new("n"));
        // Children in shards below, at and above the parent's, each way the locks are taken.
        let parent = task_in(&m, 3, None);
        let p = parent.task().seq;
        let children: Vec<_> = (0..SHARDS).map(|home| task_in(&m, home, Some(p))).collect();
        let cancelled = m.cancel_seq(p, "by test");
        assert_eq!(cancelled.len(), 1 + SHARDS);
        assert!(children.iter().all(|c| c.task().is_cancelled()));
        for home in 0..SHARDS {
            assert!(task_in(&m, home, Some(p)).task().is_cancelled());
        }
        // Registrations racing a cancellation: every child ends cancelled, whether the
        // cancellation found it or it found the parent cancelled.
        for round in 0..200 {
            let parent = task_in(&m, round % SHARDS, None);
            let p = parent.task().seq;
            let kids: Vec<TaskGuard> = std::thread::scope(|scope| {
                let registering: Vec<_> = (0..4)
                    .map(|k| {
                        let m = &m;
                        scope.spawn(move || {
                            (0..8)
                                .map(|i| task_in(m, (round + k + i) % SHARDS, Some(p)))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                m.cancel_seq(p, "by test");
                registering
                    .into_iter()
                    .flat_map(|h| h.join().expect("registering thread"))
                    .collect()
            });
            assert!(
                kids.iter().all(|k| k.task().is_cancelled()),
                "round {round}: a child escaped the cancellation"
            );
        }
    }

    #[test]
    fn test_cancel_on_drop_cancels_unless_disarmed() {
        let m = Arc::new(TaskManager::new("n"));
        let a = m.register(actions::SEARCH, "a".into(), None, None);
        let b = m.register(actions::SEARCH, "b".into(), None, None);
        drop(CancelOnDrop::new(m.clone(), a.task().seq));
        CancelOnDrop::new(m.clone(), b.task().seq).disarm();
        assert!(a.task().is_cancelled());
        assert!(!b.task().is_cancelled());
    }

    #[test]
    fn test_task_id_parses() {
        assert_eq!(
            TaskId::parse("abc:12"),
            Some(TaskId {
                node: "abc".into(),
                seq: 12
            })
        );
        assert_eq!(TaskId::parse("abc"), None);
    }

    #[tokio::test]
    async fn test_result_is_found_once_the_task_is_gone() {
        let m = Arc::new(TaskManager::new("n"));
        let g = m.register(actions::DELETE_BY_QUERY, "d".into(), None, None);
        let seq = g.task().seq;
        m.expect_result(g.task());
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        let waiter = {
            let m = m.clone();
            tokio::spawn(async move { m.wait_until_ended(seq, far).await })
        };
        assert!(matches!(m.lookup(seq), Lookup::Running(_)));
        // Unregistered before its result is stored (an admission refusal): still found (R1).
        drop(g);
        assert!(m.get(seq).is_none());
        assert!(matches!(m.lookup(seq), Lookup::Running(_)));
        m.store_result(seq, stored(json!({"completed": true})));
        assert!(waiter.await.unwrap());
        assert!(matches!(m.lookup(seq), Lookup::Done(r) if r.doc == json!({"completed": true})));
        assert!(matches!(m.lookup(seq + 1), Lookup::Missing));
    }

    #[tokio::test]
    async fn test_wait_until_ended_gives_up_at_its_deadline() {
        let m = Arc::new(TaskManager::new("n"));
        let g = m.register(actions::DELETE_BY_QUERY, "d".into(), None, None);
        let now = tokio::time::Instant::now();
        assert!(!m.wait_until_ended(g.task().seq, now).await);
        assert!(m.wait_until_ended(g.task().seq + 1, now).await);
    }

    /// A result of nobody's task.
    fn stored(doc: Value) -> StoredResult {
        StoredResult { owner: None, doc }
    }

    #[test]
    fn test_stored_results_are_bounded_oldest_first() {
        let m = TaskManager::new("n");
        for seq in 0..(MAX_STORED_RESULTS as u64 + 2) {
            m.store_result(seq, stored(json!(seq)));
        }
        assert_eq!(m.result(0), None);
        assert_eq!(m.result(1), None);
        assert_eq!(m.result(2), Some(stored(json!(2))));
        assert_eq!(
            m.result(MAX_STORED_RESULTS as u64 + 1),
            Some(stored(json!(MAX_STORED_RESULTS + 1)))
        );
    }

    /// A waker counting its wakes.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn test_a_cancellation_wakes_the_tasks_execution() {
        use std::task::{Context, Poll, Waker};
        let m = Arc::new(TaskManager::new("n"));
        let guard = task_in(&m, 0, None);
        let task = guard.task().clone();
        let woken = Arc::new(Counting(std::sync::atomic::AtomicUsize::new(0)));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut waiting = std::pin::pin!(task.execution_cancelled());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        m.cancel_seq(task.seq, "by test");
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "the cancellation wakes it"
        );
        assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Ready(()));
        // A wait that starts after the cancellation ends at once.
        let late = std::pin::pin!(task.execution_cancelled());
        assert_eq!(late.poll(&mut cx), Poll::Ready(()));
    }

    #[test]
    fn test_a_cancellation_racing_the_executions_wait_always_wakes_it() {
        let m = Arc::new(TaskManager::new("n"));
        for round in 0..400 {
            let guard = task_in(&m, 0, None);
            let task = guard.task().clone();
            let (seq, (done_tx, done_rx)) = (task.seq, std::sync::mpsc::channel());
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            // Parked until woken: a lost wake-up leaves the waiting thread parked for good (not
            // joined), and the test fails rather than hangs.
            std::thread::spawn(move || {
                let _ = started_tx.send(());
                futures::executor::block_on(task.execution_cancelled());
                let _ = done_tx.send(());
            });
            // The cancellation lands at a different point of the wait's first poll each round.
            started_rx.recv().expect("the waiting thread starts");
            for _ in 0..(round % 40) * 25 {
                std::hint::spin_loop();
            }
            m.cancel_seq(seq, "by test");
            assert!(
                done_rx
                    .recv_timeout(std::time::Duration::from_secs(30))
                    .is_ok(),
                "a cancellation's wake-up was lost"
            );
        }
    }
}
