//! A forwarded request that ends without its answer, and the upstream's work for it.
//!
//! A request forwarded to the upstream ends without its answer when its task is cancelled
//! (`_tasks/_cancel`, its `cancel_after_time_interval`), when the upstream does not answer in
//! `request_timeout` (a 504), or when its client leaves. The gateway then drops the upstream
//! request and cancels the upstream's tasks carrying the request's `X-Opaque-Id` (OpenSearch's
//! `_tasks/_cancel` filters by action and node, not by header, so they are listed and
//! cancelled one by one). Cancellation is cooperative upstream, though: an aggregation
//! notices it late, and the search runs on for seconds. An embedded node keeps the request's
//! slot and task until its work has ended (ARCHITECTURE.md "Tasks and cancellation"); a
//! gateway that gave them back at once let clients that time out and retry run many times a
//! group's limit on the upstream (an outside trial saw 27 searches of a group limited to 3).
//!
//! So [`CancelUpstream`], armed while the request is forwarded, hands what admission granted
//! the request (its permit or lease, its task's registration, its `executing` mark) to a
//! follower of its own when it fires, and [`Upstream::end_tasks`] gives it back only once the
//! upstream's tasks of the request have ended:
//!
//! 1. list the upstream's search and by-query tasks (`GET
//!    _tasks?actions=…&detailed=false` of [`super::WORK_ACTIONS`]), keep those carrying the request's
//!    `X-Opaque-Id`;
//! 2. none listed: the request may still have been on its way, so list once more after
//!    [`SECOND_CANCEL_PASS`]; none again (it never started upstream, or ended): done;
//! 3. cancel each task listed (`POST _tasks/{id}/_cancel`, once a task), wait for the end of
//!    each root among them (`GET _tasks/{id}?wait_for_completion=true&timeout=`, one
//!    [`look_wait`]), and list again: done once none is listed.
//!
//! # Invariants
//! - F1 — the slot and the task are held until the upstream lists no task of the request
//!   (after the second pass when the first found none), or until `cancel_wait_timeout` passed
//!   since the request ended: the upstream unreachable, refusing `_tasks`, or a task that never
//!   ends never keep a slot for good; that end is logged at WARN naming the tasks still listed
//!   (or why none could be listed). Tested by
//!   `gateway::test_a_cancelled_lane_search_keeps_its_slot_until_the_upstream_ends_it`,
//!   `..._on_the_general_path_...`, `..._of_a_client_that_left_...` and
//!   `gateway::test_a_cancelled_search_the_upstream_never_ends_frees_its_slot_after_the_bound`.
//! - F2 — the client's answer never waits for the follower: it runs in a task of its own,
//!   spawned by the guard's `Drop`, and the request's error (or its connection's end) is
//!   given at once. The task's end counts once in its group's stats, when the request
//!   settles its ticket, as before (the follower counts nothing).
//! - F3 — a request that never reached the upstream gives its slot back at once, with no
//!   listing: the gateway refused it itself before writing a byte of it (a head its own lines
//!   take over the upstream's 16 KB, a target it cannot send: `too_long_http_header_exception`,
//!   `illegal_argument_exception`), or no host could be connected to
//!   (`ErrorCode::UpstreamUnreachable`) — [`never_sent`]. One that failed after some of it went
//!   out (a write or an exchange broken off: a 502; no answer in `request_timeout`: a 504) may
//!   run upstream, and is followed (F1). Before, the gateway's own refusals were followed
//!   (about 300 ms of slot for two empty listings), and every 502 was not, one broken off
//!   after the upstream read it too. Tested by
//!   `gateway::test_a_request_the_gateway_refuses_itself_gives_its_slot_back_at_once` and
//!   `gateway::test_a_search_whose_exchange_broke_off_keeps_its_slot_until_the_upstream_lists_none`.
//! - F4 — while a fired guard holds a slot, the tasks of that slot are listed
//!   `cancelled: true`, as a cancelled search still running is on an embedded node and as
//!   those cancelled by `_tasks/_cancel`, their cancel-after or their client leaving are:
//!   after a 504 or a 502 of a sent request too ([`show_cancelled`]; an `_msearch` batch's
//!   items, not their parent, which the batches share). Tested by
//!   `gateway::test_a_search_the_upstream_did_not_answer_in_time_is_listed_cancelled_while_held`.
//! - F5 — a forwarded request's work stops counting as executing before its slot is given
//!   back: a [`Slot`] ends its `executing` mark (the group's `executing` gauge, the bucket
//!   probe) before it drops what admission granted, so the request admitted next into the
//!   slot is never seen running beside the one that left it. With the two the other way
//!   round, a follower that ended a cancelled search's upstream work freed the permit first,
//!   and the suite's stress test saw a bucket of `node_limit` 2 run 3 at once (a window of
//!   two drops, seen once in a CI run through a gateway). Tested by
//!   `tests::test_a_slot_ends_its_execution_before_giving_back_its_grant`.

use std::any::Any;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::Value;
use tokio::time::Instant;

use sluice_engine::{EngineError, ErrorCode};

use super::Upstream;
use crate::tasks::{OPAQUE_ID_HEADER, Task};

/// How long after a listing that found no upstream task of a cancelled request the gateway
/// looks once more: the request may have been on its way when the first listing was taken. A
/// search registers its task within a few milliseconds of arriving.
pub(super) const SECOND_CANCEL_PASS: Duration = Duration::from_millis(300);

/// The longest one wait for an upstream task's end (`wait_for_completion=true&timeout=`): its
/// end is seen at once, so a long wait costs nothing but one request held open on the
/// upstream's generic pool; 5 s checks the gateway's own bound a few times within its
/// default. A shorter `request_timeout` shortens it ([`look_wait`]).
const LOOK_WAIT: Duration = Duration::from_secs(5);

/// The pause after a listing that failed (the upstream unreachable or refusing) before the
/// next: one call a second while a request's slot waits for its bound.
const LIST_RETRY: Duration = Duration::from_secs(1);

/// What [`Upstream::end_tasks`] does once it cancelled the upstream's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// Returns: the request itself waits for the upstream's answer (a by-query action,
    /// [`Upstream::execute_to_the_end`]), or follows the work on its own (background work
    /// followed by `held.rs`).
    Cancelled,
    /// Follows them until they have ended (F1).
    Ended,
}

/// One upstream task carrying a request's `X-Opaque-Id`, as the upstream's `_tasks` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Listed {
    /// Its id, `node:id`.
    pub(super) id: String,
    /// Its parent's id, when it has one.
    parent: Option<String>,
}

/// What the gateway saw of a request's upstream tasks, for the WARN of a follower that ran
/// out of time.
#[derive(Debug, Default)]
struct Seen {
    /// The tasks the last listing showed.
    tasks: Vec<String>,
    /// Why the last listing failed, when it did.
    failure: Option<String>,
}

/// What one wait for an upstream task's end answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// It has ended (`completed: true`), or the upstream no longer knows it (404).
    Ended,
    /// Not known to have ended: the wait ran out (a 408, or a 500 in some versions), the
    /// upstream answered something else, or did not answer.
    NotYet,
}

/// What a forwarded request keeps while its work runs: its `executing` mark and what
/// admission granted it (its permit or lease and its task's registration, shared with its
/// ticket). Dropped, the mark ends first (F5).
pub(super) struct Slot {
    // Held only to be dropped, in the order the fields are declared: `_executing` before
    // `_hold` (F5).
    /// The mark [`crate::backend::ExecutionHooks::start`] returned.
    _executing: Box<dyn Any + Send>,
    /// [`crate::backend::Execution::hold`].
    _hold: Arc<dyn Any + Send + Sync>,
}

impl Slot {
    /// The slot of a request whose work started with the mark `executing`.
    pub(super) fn new(executing: Box<dyn Any + Send>, hold: Arc<dyn Any + Send + Sync>) -> Slot {
        Slot {
            _executing: executing,
            _hold: hold,
        }
    }
}

/// Cancels the upstream's tasks of a forwarded request when dropped armed: the request ended
/// without its answer (cancelled, timed out, or its client left). Holds the task, not its
/// `X-Opaque-Id`, which it rebuilds in the rare case it fires (the id itself went out with the
/// request), and `keep`, what admission granted the request: fired, it hands `keep` to the
/// follower, which drops it once the upstream's tasks of the request have ended (F1); disarmed,
/// `keep` goes with it.
///
/// It borrows the upstream rather than holding a reference of its own: every proxied search
/// makes one, and the upstream's reference count is a line both lane threads wrote.
pub(super) struct CancelUpstream<'a, K: Send + 'static> {
    upstream: &'a Arc<Upstream>,
    task: Option<Arc<Task>>,
    keep: Option<K>,
}

impl<'a, K: Send + 'static> CancelUpstream<'a, K> {
    /// Armed for `task`, holding `keep`.
    pub(super) fn new(upstream: &'a Arc<Upstream>, task: Arc<Task>, keep: K) -> Self {
        CancelUpstream {
            upstream,
            task: Some(task),
            keep: Some(keep),
        }
    }

    /// The request got its answer, or never reached the upstream: nothing to cancel.
    pub(super) fn disarm(&mut self) {
        self.task = None;
    }
}

impl<K: Send + 'static> Drop for CancelUpstream<'_, K> {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let keep = self.keep.take();
        let upstream = self.upstream.clone();
        let opaque = upstream.opaque_id(&task);
        // Outside a runtime (a test dropping it) there is nothing to cancel with, and `keep`
        // goes now; so it does when the node stops (`followers.rs` W1).
        self.upstream.followers.spawn(async move {
            upstream.end_tasks(&opaque, Until::Ended).await;
            drop(keep);
        });
    }
}

/// Whether a forwarded request whose sending failed with `e` never reached the upstream, so
/// that nothing of it can run there (F3): the gateway refused it before writing a byte of it
/// (its head over the upstream's limit with the gateway's lines, a target that is not one),
/// or no host could be connected to. Any other failure came after some of it went out.
pub(super) fn never_sent(e: &EngineError) -> bool {
    matches!(
        e.code,
        ErrorCode::UpstreamUnreachable | ErrorCode::TooLongHttpHeader | ErrorCode::IllegalArgument
    )
}

/// Marks `tasks` cancelled, as a request whose upstream work is being cancelled (F4): they
/// hold their slots until that work has ended, and are listed so meanwhile. No reason is
/// set: the request's answer is its own error (a 504, a 502), and a ticket settled with a
/// cancellation words it from its deadline.
pub(super) fn show_cancelled(tasks: &[Arc<Task>]) {
    for t in tasks {
        t.cancel(None);
    }
}

impl Upstream {
    /// Cancels the upstream's search and by-query tasks whose `X-Opaque-Id` is `opaque` and,
    /// with [`Until::Ended`], follows them until they have ended, for at most
    /// `backend.upstream.cancel_wait_timeout` (see the module docs).
    ///
    /// # Cancel safety
    /// Dropping the future stops cancelling and following; tasks already cancelled stay so.
    pub(super) async fn end_tasks(&self, opaque: &str, until: Until) {
        let mut seen = Seen::default();
        let bound = self.cancel_wait_timeout;
        let deadline = Instant::now() + bound;
        if tokio::time::timeout_at(deadline, self.until_gone(opaque, until, &mut seen))
            .await
            .is_ok()
        {
            return;
        }
        match seen.failure {
            Some(why) => tracing::warn!(
                %opaque, error = %why, ?bound,
                "cannot tell whether the upstream still runs a cancelled request (its _tasks cannot be listed): its slot is given back after backend.upstream.cancel_wait_timeout"
            ),
            None => tracing::warn!(
                %opaque, tasks = ?seen.tasks, ?bound,
                "the upstream still runs tasks of a cancelled request after backend.upstream.cancel_wait_timeout: its slot is given back, the tasks run on outside their group's limit"
            ),
        }
    }

    /// [`Self::end_tasks`] without its bound: returns once the upstream lists no task of the
    /// request (with [`Until::Cancelled`], once those listed were cancelled), writing what it
    /// saw into `seen`.
    async fn until_gone(&self, opaque: &str, until: Until, seen: &mut Seen) {
        let headers = self.identity.own_call();
        let wait = look_wait(self.request_timeout());
        let mut cancelled: HashSet<String> = HashSet::new();
        // Roots a look said ended: one listed again is looked at no more than once a wait.
        let mut said_ended: HashSet<String> = HashSet::new();
        let mut empty_listings = 0;
        loop {
            let listed = self
                .client
                .call(
                    Method::GET,
                    &format!("/_tasks?actions={}&detailed=false", super::WORK_ACTIONS),
                    &headers,
                )
                .await;
            let body = match listed {
                Ok((s, body)) if s.is_success() => Some(body),
                Ok((s, body)) => {
                    seen.failure = Some(format!("answered {s}: {}", super::limits::excerpt(&body)));
                    None
                }
                Err(e) => {
                    seen.failure = Some(e.reason);
                    None
                }
            };
            let Some(body) = body else {
                if until == Until::Cancelled {
                    tracing::warn!(%opaque, error = ?seen.failure, "cannot list the upstream's tasks to cancel them");
                    return;
                }
                tracing::debug!(%opaque, error = ?seen.failure, "cannot list the upstream's tasks to follow them; trying again");
                tokio::time::sleep(LIST_RETRY).await;
                continue;
            };
            seen.failure = None;
            let ours = matching_tasks(&body, opaque);
            seen.tasks = ours.iter().map(|t| t.id.clone()).collect();
            if ours.is_empty() {
                // Found and gone, or not found twice: never started upstream, or ended.
                if !cancelled.is_empty() || empty_listings > 0 {
                    return;
                }
                empty_listings += 1;
                tokio::time::sleep(SECOND_CANCEL_PASS).await;
                continue;
            }
            for t in &ours {
                if cancelled.insert(t.id.clone()) {
                    self.cancel_one(&t.id, opaque, &headers).await;
                }
            }
            if until == Until::Cancelled {
                return;
            }
            // The roots' ends: their children end with them (or are listed by the next pass).
            for root in roots(&ours) {
                let begun = Instant::now();
                let path = format!(
                    "/_tasks/{}?wait_for_completion=true&timeout={}ms",
                    root.id,
                    wait.as_millis()
                );
                let answer = self.client.call(Method::GET, &path, &headers).await;
                let look = match &answer {
                    Ok((s, body)) => look(*s, body),
                    Err(_) => Look::NotYet,
                };
                // At most one look a wait, whatever the upstream answered how fast, but for
                // the first that says the task ended (the listing then shows it gone).
                if look == Look::NotYet || !said_ended.insert(root.id.clone()) {
                    tokio::time::sleep_until(begun + wait).await;
                }
            }
        }
    }

    /// Cancels the upstream task `id` (it may have ended: nothing is left to cancel then).
    async fn cancel_one(&self, id: &str, opaque: &str, headers: &http::HeaderMap) {
        let path = format!("/_tasks/{id}/_cancel");
        match self.client.call(Method::POST, &path, headers).await {
            Ok((s, _)) if s.is_success() => {
                tracing::debug!(task = %id, %opaque, "cancelled the upstream task");
            }
            Ok((s, _)) => {
                tracing::debug!(task = %id, status = %s, "upstream task not cancelled (ended?)")
            }
            Err(e) => {
                tracing::warn!(task = %id, error = %e.reason, "cannot cancel the upstream task")
            }
        }
    }
}

/// One wait for an upstream task's end: [`LOOK_WAIT`], or half the gateway's
/// `request_timeout` when that is shorter (the wait must end before the call's timeout).
fn look_wait(request_timeout: Duration) -> Duration {
    LOOK_WAIT
        .min(request_timeout / 2)
        .max(Duration::from_millis(1))
}

/// What an answer to `GET _tasks/{id}?wait_for_completion=true` says of the task's end.
fn look(status: StatusCode, body: &[u8]) -> Look {
    if status == StatusCode::NOT_FOUND {
        return Look::Ended;
    }
    if status.is_success() {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        if v["completed"] == true {
            return Look::Ended;
        }
    }
    Look::NotYet
}

/// The tasks of `ours` whose parent is not among them: cancelling and waiting for them covers
/// their children.
fn roots(ours: &[Listed]) -> impl Iterator<Item = &Listed> {
    ours.iter().filter(|t| {
        t.parent
            .as_ref()
            .is_none_or(|p| !ours.iter().any(|o| &o.id == p))
    })
}

/// The upstream's tasks (`node:id`, with their parents) in a `_tasks` answer whose
/// `X-Opaque-Id` is `opaque`.
pub(super) fn matching_tasks(body: &[u8], opaque: &str) -> Vec<Listed> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut out = Vec::new();
    if let Some(nodes) = v["nodes"].as_object() {
        for (node, n) in nodes {
            if let Some(tasks) = n["tasks"].as_object() {
                for (id, t) in tasks {
                    let header = t["headers"]
                        .as_object()
                        .and_then(|h| {
                            h.iter()
                                .find(|(k, _)| k.eq_ignore_ascii_case(OPAQUE_ID_HEADER))
                        })
                        .and_then(|(_, v)| v.as_str());
                    if header == Some(opaque) {
                        out.push(Listed {
                            id: if id.contains(':') {
                                id.clone()
                            } else {
                                format!("{node}:{id}")
                            },
                            parent: t["parent_task_id"].as_str().map(str::to_string),
                        });
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_a_slot_ends_its_execution_before_giving_back_its_grant() {
        /// Writes its name to the log when dropped.
        struct Logged(&'static str, Arc<parking_lot::Mutex<Vec<&'static str>>>);
        impl Drop for Logged {
            fn drop(&mut self) {
                self.1.lock().push(self.0);
            }
        }
        let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let slot = Slot::new(
            Box::new(Logged("executing", log.clone())),
            Arc::new(Logged("hold", log.clone())),
        );
        drop(slot);
        assert_eq!(*log.lock(), ["executing", "hold"]);
    }

    #[test]
    fn test_matching_tasks_by_opaque_id() {
        let body = serde_json::json!({"nodes": {"n1": {"tasks": {
            "n1:5": {"headers": {"X-Opaque-Id": "sluice:g:1"}},
            "n1:6": {"headers": {"X-Opaque-Id": "other"}},
            "n1:7": {"headers": {}},
            "n1:8": {"headers": {"x-opaque-id": "sluice:g:1"}, "parent_task_id": "n1:5"}
        }}}});
        let ids = matching_tasks(body.to_string().as_bytes(), "sluice:g:1");
        assert_eq!(
            ids,
            vec![
                Listed {
                    id: "n1:5".into(),
                    parent: None
                },
                Listed {
                    id: "n1:8".into(),
                    parent: Some("n1:5".into())
                }
            ]
        );
        let top: Vec<&str> = roots(&ids).map(|t| t.id.as_str()).collect();
        assert_eq!(top, ["n1:5"]);
        // A child whose parent ended (or is not ours) is a root of its own.
        let top: Vec<&str> = roots(&ids[1..]).map(|t| t.id.as_str()).collect();
        assert_eq!(top, ["n1:8"]);
    }

    #[test]
    fn test_a_look_tells_an_ended_task_from_one_still_running() {
        let ok = StatusCode::OK;
        assert_eq!(look(ok, br#"{"completed":true,"task":{}}"#), Look::Ended);
        assert_eq!(look(StatusCode::NOT_FOUND, br#"{"error":{}}"#), Look::Ended);
        assert_eq!(look(ok, br#"{"completed":false,"task":{}}"#), Look::NotYet);
        // The wait ran out: a 408, or a 500 in some versions.
        let timed_out = br#"{"error":{"type":"timeout_exception","reason":"Timed out waiting for completion of [n:1]"}}"#;
        assert_eq!(look(StatusCode::REQUEST_TIMEOUT, timed_out), Look::NotYet);
        assert_eq!(
            look(StatusCode::INTERNAL_SERVER_ERROR, timed_out),
            Look::NotYet
        );
        assert_eq!(look(StatusCode::FORBIDDEN, b"{}"), Look::NotYet);
        assert_eq!(look(ok, b"not json"), Look::NotYet);
    }

    #[test]
    fn test_one_look_ends_before_the_calls_timeout() {
        assert_eq!(look_wait(Duration::from_secs(60)), LOOK_WAIT);
        assert_eq!(
            look_wait(Duration::from_millis(500)),
            Duration::from_millis(250)
        );
        assert_eq!(look_wait(Duration::ZERO), Duration::from_millis(1));
    }
}
