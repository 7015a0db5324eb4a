//! Admission: one asynchronous, cancel-safe step between a parsed request and its execution
//! (DESIGN section 2, "The request path").
//!
//! [`admit`] takes the request's [`RequestMeta`] and a [`TaskSpec`] and either refuses (an
//! [`ApiError`](crate::error::ApiError), a 429 for a workload-management limit) or returns
//! an [`Admitted`] ticket:
//!
//! 1. **register** the task ([`crate::tasks`]), so work that waits is listed by `_tasks` and
//!    can be cancelled;
//! 2. **tag** it with its workload group ([`tag`]: header, rules, DEFAULT — the decision is
//!    [`sluice_core::tagging`]'s), or take its parent's group;
//! 3. **check the group's resource share** ([`share`], decisions in
//!    [`sluice_core::resources`]);
//! 4. **acquire throttle capacity**: the node tier ([`throttle`], verdict in
//!    [`sluice_core::throttle`]), waiting in the bucket's queue when the group has one
//!    ([`queue`]); the shared tier plugs in at the same place.
//!
//! The ticket ([`ticket`]) owns everything admission granted — the task's registration, the
//! permit, the resource reservation, the stats of the task's end — and releases each exactly
//! once on every path. Handlers run the work through a [`crate::backend::Backend`] with
//! [`Admitted::execution`], settle the outcome with [`Admitted::finish`], and attach the ticket
//! to the response ([`Admitted::ride_with`]) so the slot covers the response too (DESIGN D9).
//! Nested searches the engine issues while it runs a request are admitted by [`nested`].

pub mod dry_queue;
pub mod nested;
pub mod queue;
pub mod share;
pub mod shared;
pub mod tag;
pub mod throttle;
pub mod ticket;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sluice_core::BucketKey;
use sluice_core::throttle::Request;

pub use ticket::{Admitted, ResponseTicket};

use crate::error::ApiResult;
use crate::http::{Params, RequestMeta};
use crate::state::AppState;
use crate::tasks::{Description, NewTask, TaskGuard};
use crate::workload::GroupEntry;

/// Seconds a client turned away by its group's resource share is told to wait: usage is
/// re-measured every 100 ms, so a second covers several refreshes.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Seconds on the node's monotonic clock (since the first call), for drain rates.
pub fn now_secs() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs()
}

/// What a search-like task is: its action, its description for `_tasks`, its parent, the index
/// expressions the tagging rules match, and its own `cancel_after_time_interval`.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// The action name ([`crate::tasks::actions`]).
    pub action: &'static str,
    /// What the task does, for `_tasks?detailed`.
    pub description: Description,
    /// The parent task on this node.
    pub parent: Option<u64>,
    /// The request's index expressions (comma lists split), for the tagging rules.
    pub indices: Vec<String>,
    /// The request's `cancel_after_time_interval`: `Some(None)` for an explicit `-1`.
    pub cancel_after: Option<Option<Duration>>,
    /// Set when the request runs in a group fixed beforehand (a scroll continuation runs in
    /// its scroll's group) instead of being tagged anew.
    pub inherited: Option<Inherited>,
}

/// A group fixed beforehand, and the buckets already held for the request.
#[derive(Debug, Clone)]
pub struct Inherited {
    /// The group.
    pub group: Arc<GroupEntry>,
    /// The buckets held by the request's ancestors.
    pub held: Vec<BucketKey>,
}

impl TaskSpec {
    /// A top-level task over the index expression `index` (a comma-separated list), with the
    /// `cancel_after_time_interval` of `params` (a 400 when it is not a time value).
    pub fn new(
        action: &'static str,
        description: impl Into<Description>,
        index: &str,
        params: &Params,
    ) -> ApiResult<TaskSpec> {
        Ok(TaskSpec {
            action,
            description: description.into(),
            parent: None,
            indices: split_indices(index),
            cancel_after: requested_cancel_after(params)?,
            inherited: None,
        })
    }
}

/// The throttle's answer `decided` for a request that may have to wait (see
/// [`admit_registered`]): the slot or lease it runs on and its reservation, once it may run.
async fn wait_for_decision(
    st: &Arc<AppState>,
    entry: &Arc<GroupEntry>,
    task: &Arc<crate::tasks::Task>,
    decided: throttle::Decided,
    queued: bool,
    door: Option<sluice_core::resources::Reservation>,
    cancel_after: Option<Duration>,
) -> ApiResult<(
    throttle::Granted,
    Option<sluice_core::resources::Reservation>,
)> {
    Ok(match decided {
        throttle::Decided::Granted(g) if !queued => (g, door),
        throttle::Decided::Granted(g) => {
            queue::wait(st, entry, task, queue::Wait::Granted(g), cancel_after).await?
        }
        throttle::Decided::Parked { key, waiter } => {
            let wait = queue::Wait::Slot { key, waiter };
            queue::wait(st, entry, task, wait, cancel_after).await?
        }
        throttle::Decided::Shared(ask) => match shared::ask(st, entry, ask).await? {
            queue::Wait::Granted(g) if !queued => (g, door),
            wait => queue::wait(st, entry, task, wait, cancel_after).await?,
        },
    })
}

/// Counts the end of a request dropped while admission waited for it (its client left while it
/// was in a queue, or waited for an owner's answer or its group's share): one completion and
/// one failure in its group, as a request dropped after admission counts in its ticket's
/// `Drop`, and one cancelled while it waits counts in [`queue`]. Disarmed by
/// [`Abandoned::decided`] once admission has an outcome, which counts (or not) on its own.
struct Abandoned<'a>(Option<(&'a AppState, &'a GroupEntry)>);

impl Abandoned<'_> {
    fn decided(mut self) {
        self.0 = None;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if let Some((st, entry)) = self.0 {
            let ended = st.workload.end_stats(entry);
            ended.total_completions.inc();
            ended.failures.inc();
        }
    }
}

/// Splits a comma-separated index expression into its parts.
pub fn split_indices(index: &str) -> Vec<String> {
    index
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The request's `cancel_after_time_interval` parameter: `None` when absent, `Some(None)` for
/// `-1`; parsed by the one time-value parser, as group and cluster settings are.
pub fn requested_cancel_after(params: &Params) -> ApiResult<Option<Option<Duration>>> {
    match params.get("cancel_after_time_interval") {
        None => Ok(None),
        Some(v) => {
            let value = sluice_wire::parse_time_value(v, "cancel_after_time_interval")
                .map_err(sluice_wire::OpenSearchError::from)?;
            Ok(Some(value.duration_opt()))
        }
    }
}

/// Admits a search-class request (see the module docs): registers its task, tags it, checks
/// its group's resource share and takes throttle capacity.
///
/// # Cancel safety
/// Dropping the future at any await point leaves nothing behind: the task is unregistered,
/// and the reservation and the permit are given back, by their own `Drop`.
pub async fn admit(
    st: &Arc<AppState>,
    meta: &RequestMeta,
    mut spec: TaskSpec,
) -> ApiResult<Admitted> {
    // Moved to the task, not copied: a search's description holds its whole body.
    let description = std::mem::take(&mut spec.description);
    let guard = register_described(st, meta, &spec, description);
    admit_registered(st, meta, spec, guard).await
}

/// Registers the task of `spec` ahead of its admission, for a request that answers with its
/// task id at once and is admitted in the background (a by-query action with
/// `wait_for_completion=false`): the task is listed, and can be cancelled, from now on.
pub fn register(st: &AppState, meta: &RequestMeta, spec: &TaskSpec) -> TaskGuard {
    register_described(st, meta, spec, spec.description.clone())
}

/// [`register`] with the task's `description` given (the spec's, moved or copied).
fn register_described(
    st: &AppState,
    meta: &RequestMeta,
    spec: &TaskSpec,
    description: Description,
) -> TaskGuard {
    st.tasks.register_task(NewTask {
        action: spec.action,
        description,
        parent: spec.parent,
        start_time_millis: sluice_engine::now_millis(),
        principal: meta.principal.clone(),
        remote_addr: meta.remote_addr,
        admitting: true,
        // Set at registration: a listing never shows the task without it.
        opaque_id: meta.opaque_id.clone(),
    })
}

/// [`admit`] for a task [`register`]ed beforehand (`guard`, registered from `spec`).
///
/// # Cancel safety
/// As [`admit`]'s: dropping the future unregisters the task and gives back what was taken.
pub async fn admit_registered(
    st: &Arc<AppState>,
    meta: &RequestMeta,
    spec: TaskSpec,
    guard: TaskGuard,
) -> ApiResult<Admitted> {
    let TaskSpec {
        indices,
        cancel_after,
        inherited,
        ..
    } = spec;
    let task = guard.task().clone();
    let top_level = inherited.is_none();
    let (entry, mut held) = match inherited {
        Some(i) => (i.group, i.held),
        None => (tag::tag(st, meta, &indices)?, Vec::new()),
    };
    task.set_group(entry.clone());
    let settings = entry.search;
    let cancel_after = settings.cancel_after(
        cancel_after,
        st.cluster_settings.cancel_after_time_interval(),
    );
    // A scroll continuation parks like the search that opened it (seed 002 queues every
    // search its throttle denies; refusing a continuation ended a client's scan of a queued
    // group after its first page); nothing of a group without a queue parks.
    let queued = entry.queues(st.cluster_settings.wlm_mode());
    // A request of a queued group is checked against its group's share once it holds its slot,
    // and waits for the share rather than being turned away ([`queue::wait`]); any other is
    // checked at the door.
    let door = if queued {
        None
    } else {
        share::admit_resources(st, &entry, &task)?
    };
    let request = Request {
        principal: meta.principal.as_deref(),
        held: &held,
        may_park: true,
        tag: task.seq,
        // The door's check counted a would-be rejection: `enabled` would have turned the
        // request away here, before its throttle (`sluice_core::throttle` T3).
        share_would_reject: task.dry_refused.load(std::sync::atomic::Ordering::Acquire),
    };
    let decided = throttle::throttle(st, &entry, request)?;
    let (granted, reservation) = match decided {
        throttle::Decided::Granted(g) if !queued => (g, door),
        // From here admission may wait (an owner's answer, a queue, the group's share): a
        // request dropped meanwhile (its client left) ends there, and its end is counted then.
        undecided => {
            let abandoned = Abandoned(Some((st, &entry)));
            // Boxed: waiting (a queue, an owner's answer) is the rare path, and its future
            // inline would make every admission's future, and every future holding one,
            // 2.6 KB larger, moved on each search.
            let decision = Box::pin(wait_for_decision(
                st,
                &entry,
                &task,
                undecided,
                queued,
                door,
                cancel_after,
            ))
            .await;
            abandoned.decided();
            decision?
        }
    };
    if let Some(r) = reservation {
        // Set once, on the task registered above.
        let _ = task.reservation.set(r);
    }
    if let Some(k) = &granted.bucket {
        held.push(k.clone());
    }
    share::settle_dry_wait(st, &entry, &task, &granted);
    if granted.would_throttle {
        // Counted as a would-be 429: the share re-check counts no would-be rejection (R2).
        task.dry_refused
            .store(true, std::sync::atomic::Ordering::Release);
    }
    task.set_held_buckets(held);
    task.admitting
        .store(false, std::sync::atomic::Ordering::Release);
    Ok(Admitted::new(
        st.clone(),
        guard,
        entry,
        granted,
        settings,
        cancel_after,
        top_level,
    ))
}
