//! Waiting in a throttle queue (seed 002, node tier): a request refused by its bucket's
//! `node_limit` and parked by [`sluice_core::permits::PermitTable::acquire`] holds no thread,
//! only its waiter, until:
//!
//! - a release hands it the freed slot (FIFO within the bucket, no barging: N4), or the
//!   backstop sweep or a raised limit drains it — it then waits, holding the slot, until its
//!   group's resource share lets it run (a group over its share does not start more work
//!   because it waited, and its queued requests wait rather than being turned away; a request
//!   of a queued group that finds a free slot but its group over its share waits the same
//!   way, and counts as queued);
//! - the group's backlog is released (throttling off, group deleted or switched to
//!   `monitor`, mode left `enabled`) — it runs without a permit, unless already cancelled;
//! - its task is cancelled (`_tasks/_cancel`, its parent), its `cancel_after_time_interval`
//!   passes (queue time counts), or its client disconnects (the future is dropped) — the
//!   waiter leaves the queue at once, and the client gets OpenSearch's cancellation error;
//! - its node begins to stop — it never runs: it is answered 503 `node_closed_exception` at
//!   once, for its client to retry on another node (S1 below).
//!
//! There is no queue timeout of its own (seed 002).
//!
//! # Invariants
//! - S1 — a stop never admits what waits: a request still waiting for admission when its node
//!   begins to stop (`AppState::stopping`), or that would start waiting after, is answered
//!   [`node_closed`] and never runs, so a stopping node keeps every limit — its node tier's,
//!   the cluster-wide `shared_limit` whose lease it never got, its group's share. The stop
//!   sets the flag, then releases every queue (`Node::serve`): a parked request wakes released
//!   and reads the flag; one parked in a queue made after the release read the flag's store
//!   before it (the release installs the new queues after it) and is refused before it waits;
//!   one waiting for its group's share reads it at its next wake. (It once ran them all
//!   without a permit, so that the drain never waited for a queue: an outside trial saw a
//!   stopping node's backlog run at once, 13 searches against a cluster-wide limit of 3.)
//!   Tested by `test_a_stopping_node_refuses_what_waits_for_admission_and_stops` and the
//!   cluster test `test_a_stopping_node_runs_nothing_of_its_shared_backlog`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_core::BucketKey;
use sluice_core::permits::{Grant, Waiter};
use sluice_core::resources::Reservation;

use super::throttle::Granted;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::tasks::Task;
use crate::workload::GroupEntry;

/// What a request of a queued group waits for before it runs.
pub enum Wait {
    /// A slot of its bucket: the request is parked.
    Slot {
        /// The bucket.
        key: BucketKey,
        /// Resolves with the slot, or when the group's backlog is released.
        waiter: Waiter,
    },
    /// Nothing more from the throttle: it holds its slot (or is not throttled).
    Granted(Granted),
}

/// Waits until a request of a queued group may run (see the module docs): for a slot of its
/// bucket when it is parked, then for its group's resource share — it keeps the slot while it
/// waits for the share, so the requests behind it stay in order. Answers the slot and the
/// reservation among the group's unmeasured tasks.
///
/// # Cancel safety
/// Dropping the future drops the waiter, which leaves the queue in O(1) (a slot already handed
/// to it passes on to the next waiter), and ends the wait's accounting.
pub async fn wait(
    st: &AppState,
    entry: &Arc<GroupEntry>,
    task: &Arc<Task>,
    wait: Wait,
    cancel_after: Option<Duration>,
) -> ApiResult<(Granted, Option<Reservation>)> {
    let deadline = cancel_after.map(|d| task.started + d);
    // S1: nothing starts waiting on a stopping node (what it holds, a slot or a lease, goes
    // back as `wait` is dropped).
    if stopping(st) {
        return Err(node_closed(st, entry));
    }
    let mut parked: Option<Parked> = None;
    let granted = match wait {
        Wait::Granted(g) => g,
        Wait::Slot { key, mut waiter } => {
            // Read now: the waiter is consumed below.
            let group_parked = waiter.group_parked();
            // A shared-tier lease already handed to it when it comes to wait is no wait: a
            // request of a shared group parks before it asks the owner, and a lease that a
            // request of the bucket asking at the same time acquired went to it (the oldest
            // parked) while it was still asking. Anything else, a node slot freed since it
            // parked included, waited in the queue and counts as queued.
            let (grant, waited) = match futures::poll!(&mut waiter) {
                std::task::Poll::Ready(grant @ Grant::External(_)) => (grant, false),
                ready_or_not => {
                    // It counts itself even when a slot reached it before this first poll.
                    let depth = group_parked.max(1) + entry.stats.share_waiting.get();
                    parked = Some(Parked::enter(entry.clone(), task.clone(), depth));
                    let grant = match ready_or_not {
                        std::task::Poll::Ready(grant) => grant,
                        std::task::Poll::Pending => tokio::select! {
                            grant = &mut waiter => grant,
                            e = stopped(st, task, deadline, cancel_after) => return Err(e),
                        },
                    };
                    (grant, true)
                }
            };
            match grant {
                Grant::Permit(permit) => Granted {
                    bucket: Some(key),
                    permit: Some(permit),
                    ..Granted::default()
                },
                // A shared-tier lease an owner granted or pushed for this bucket.
                Grant::External(token) => {
                    let lease = st.cluster.shared().coordinator.take_handed(token);
                    if lease.is_some() && waited {
                        entry.stats.total_shared_pushed.inc();
                    }
                    Granted {
                        bucket: Some(key),
                        permit: None,
                        lease,
                        ..Granted::default()
                    }
                }
                Grant::Unthrottled if task.is_cancelled() => {
                    return Err(cancelled(st, task, None));
                }
                // Released by the node's stop (S1).
                Grant::Unthrottled if stopping(st) => return Err(node_closed(st, entry)),
                // The group's backlog was released (throttling off, group deleted or switched to
                // monitor, mode left enabled): it runs without a permit, checked by the share
                // once, as any request of an unqueued group, against the group as it is now —
                // a deleted group's requests run unchecked (`share` R1).
                Grant::Unthrottled => {
                    let reservation = match st.workload.entry(&entry.id) {
                        Some(current) => super::share::admit_resources(st, &current, task)?,
                        None => None,
                    };
                    let granted = Granted {
                        bucket: Some(key),
                        ..Granted::default()
                    };
                    return Ok((granted, reservation));
                }
            }
        }
    };
    let mut share_wait: Option<ShareWaiting> = None;
    let reservation = super::share::wait_for_share(
        st,
        entry,
        || {
            let (waiting, depth) = ShareWaiting::enter(entry.clone());
            share_wait = Some(waiting);
            match &parked {
                None => parked = Some(Parked::enter(entry.clone(), task.clone(), depth)),
                Some(_) => entry.stats.queue_peak.raise_to(depth),
            }
        },
        stopped(st, task, deadline, cancel_after),
    )
    .await?;
    drop(share_wait);
    drop(parked);
    Ok((granted, reservation))
}

/// Resolves with OpenSearch's cancellation error once the task is cancelled or its
/// `cancel_after_time_interval` passes (the task is then cancelled with that reason).
async fn stopped(
    st: &AppState,
    task: &Arc<Task>,
    deadline: Option<Instant>,
    cancel_after: Option<Duration>,
) -> ApiError {
    let expired = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = task.cancelled() => cancelled(st, task, None),
        () = expired => {
            let reason = super::ticket::timeout_reason(cancel_after.unwrap_or_default());
            st.tasks.cancel_seq(task.seq, &reason);
            cancelled(st, task, Some(reason))
        }
    }
}

/// Whether the node has begun to stop (S1).
fn stopping(st: &AppState) -> bool {
    st.stopping.load(Ordering::Acquire)
}

/// The error of a request of `entry` still waiting for admission when its node began to stop
/// (S1): 503 `node_closed_exception`, OpenSearch's "node closed" with why; its end counts as a
/// failure, as a cancelled wait's does.
pub(super) fn node_closed(st: &AppState, entry: &GroupEntry) -> ApiError {
    let ended = st.workload.end_stats(entry);
    ended.total_completions.inc();
    ended.failures.inc();
    ApiError::Engine(sluice_engine::EngineError::new(
        sluice_engine::ErrorCode::NodeClosed,
        format!(
            "node closed [{}]: the request was still waiting for admission in workload group [{}] when the node began to stop, and never ran; retry it on another node",
            st.config.node_name,
            entry.name()
        ),
    ))
}

/// OpenSearch's error for a task cancelled while it waited; its end counts as a failure.
fn cancelled(st: &AppState, task: &Task, reason: Option<String>) -> ApiError {
    let reason = reason
        .or_else(|| task.cancel_reason.lock().clone())
        .unwrap_or_else(|| "task cancelled".to_string());
    if let Some(entry) = task.group() {
        let ended = st.workload.end_stats(entry);
        ended.total_completions.inc();
        ended.failures.inc();
    }
    // Cancelled before it reached any index.
    ApiError::Engine(super::ticket::cancelled_error(
        &reason,
        &st.identity.node_id,
        None,
    ))
}

/// The accounting of one wait, on every path out of it: `queue_peak`, `total_queued`, the
/// wait figures and the task's queued state (`queued_current` is the permit table's parked
/// count plus [`ShareWaiting`]'s, [`crate::workload::GroupStats::queued_current`]).
///
/// `queue_peak` is raised to a depth the waiting request reads when it starts waiting (it was
/// once raised to a counter that dropped only when a request handed its slot next ran, so a
/// request parking in the place it left counted it too: `size_per_bucket + 1`). The depth is
/// the permit table's parked count its place was taken at (exact, N5b) plus the requests
/// waiting for the group's share; a request waiting for its share reads `queued_current`. Exact without share waits (no share is paced or over its limit);
/// with them, a reading can be off by the requests that passed from a slot to their share
/// wait between its two reads.
struct Parked {
    entry: Arc<GroupEntry>,
    task: Arc<Task>,
    since: Instant,
}

impl Parked {
    fn enter(entry: Arc<GroupEntry>, task: Arc<Task>, depth: u64) -> Parked {
        let stats = &entry.stats;
        stats.total_queued.inc();
        stats.queue_peak.raise_to(depth);
        task.queued.store(true, Ordering::Release);
        Parked {
            entry,
            task,
            since: Instant::now(),
        }
    }
}

/// A request waiting for its group's share, counted in `share_waiting` while it waits.
struct ShareWaiting(Arc<GroupEntry>);

impl ShareWaiting {
    /// Counts the request in; answers the group's queue depth it makes (see [`Parked`]).
    fn enter(entry: Arc<GroupEntry>) -> (ShareWaiting, u64) {
        entry.stats.share_waiting.inc();
        let depth = entry.stats.queued_current();
        (ShareWaiting(entry), depth)
    }
}

impl Drop for ShareWaiting {
    fn drop(&mut self) {
        self.0.stats.share_waiting.dec();
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.task.queued.store(false, Ordering::Release);
        let stats = &self.entry.stats;
        let waited = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        stats.queue_wait_count.inc();
        stats.total_queue_wait_millis.add(waited);
        stats.max_queue_wait_millis.raise_to(waited);
        stats.queue_wait.record_millis(waited);
    }
}
