//! Work the gateway admits as one task in the caller's workload group that holds its slot
//! while the upstream runs it: `_delete_by_query`, `_update_by_query` and `_reindex`, and the
//! other APIs that run searches upstream ([`super::search_apis`]). Admitted as on an embedded
//! node (tagged, throttled and queued), then forwarded in one of three [`Form`]s:
//!
//! - [`Form::Waiting`] (a by-query action or a reindex waiting for completion, the default; a
//!   rank evaluation, an SQL or PPL query, a `_knn_search`): the request is forwarded as it
//!   came and holds its slot until the upstream answers; cancelling the gateway's task cancels
//!   the upstream's (by `X-Opaque-Id`, as for a search), whose answer — for a by-query action
//!   a 200 saying `canceled`, with what it did — is still the client's
//!   ([`Upstream::execute_to_the_end`]).
//! - [`Form::Background`] (a by-query action or a reindex with `wait_for_completion=false`):
//!   as on an embedded node, the answer is the **gateway's** task id, and the work follows in
//!   the background. Admitted at once (the usual case), the request is forwarded with
//!   `wait_for_completion=false` before the id is answered, so that the upstream's refusal of
//!   it (a bad parameter, a query it cannot parse) is the client's answer, as without the
//!   gateway; one that waits in the group's queue, or that admission refuses, is answered its
//!   id at once and forwarded once admitted (its refusal, and the upstream's, is then the
//!   task's result). The gateway follows the upstream's task (`GET
//!   _tasks/{id}?wait_for_completion=true`, one short wait after another, and its status after
//!   each) until it ends: the slot is held all along, the upstream task's status is shown as
//!   the gateway task's, cancelling the gateway task (or its `cancel_after_time_interval`
//!   passing, the request's or the group's, as for the waiting form) cancels the upstream's by
//!   id, and the upstream's final `response` or `error` is stored for `GET _tasks/{id}` on the
//!   gateway. A long background action is not cut by `backend.upstream.request_timeout`: only
//!   each short look at it is bounded by it.
//! - [`Form::Submission`] (an asynchronous search's submission, OpenSearch's or
//!   Elasticsearch's; EQL and Elasticsearch's `_sql`, which may go on in the background too):
//!   forwarded as it came, its answer (the upstream's, naming the upstream's search id, which
//!   the client polls through the gateway unadmitted: polling reads a stored result) is the
//!   client's; the slot is held from the submission until the upstream lists no task carrying
//!   the submission's `X-Opaque-Id` any more ([`follow_opaque`]): while the search goes on
//!   after its `wait_for_completion_timeout`, it still counts in its group. Cancelling the
//!   gateway task, or its `cancel_after_time_interval` passing, cancels those upstream tasks
//!   (the search then ends as cancelled, and the client's next poll says so).
//!
//! Before, all of them were forwarded unadmitted: a tenant could run any amount of such work on
//! the upstream past its group's `node_limit`. The background work of the last two forms runs
//! as one of the gateway's followers ([`super::followers`]), stopped when the node stops.

use std::any::Any;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use axum::response::Response;
use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice_engine::{EngineError, ErrorCode};

use super::routes::{Read, call_as, settle};
use super::streamed::AnswerBody;
use super::{Call, Upstream, stream_back};
use crate::admission::{self, Admitted, TaskSpec};
use crate::api::cluster_settings::bool_param;
use crate::backend::ExecutionHooks;
use crate::error::{ApiError, ApiResult};
use crate::http::{RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::{OPAQUE_ID_HEADER, Task, TaskStatus};

/// The longest one wait for the upstream task's end (`wait_for_completion=true&timeout=`):
/// its end is seen at once, but a wait that runs out answers no status, so the status the
/// gateway task shows (read by a look without a wait after each) is at most this old. Two
/// small calls a second for an action that runs for minutes. A shorter `request_timeout`
/// shortens it ([`follow_wait`]).
const FOLLOW_WAIT: Duration = Duration::from_secs(1);

/// Failed looks at the upstream task in a row (the upstream unreachable, or refusing) after
/// which the gateway stops following it: its slot is given back and the task's result is the
/// last error. At one look a second, about 10 s of the upstream gone.
const MAX_FOLLOW_FAILURES: u32 = 10;

/// The pause after a failed look at the upstream task before the next one.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// How admitted work is forwarded and held (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Forwarded and held until the upstream answers.
    Waiting,
    /// `wait_for_completion=false`: answered the gateway's task id, the upstream's task
    /// followed by id.
    Background,
    /// Answered the upstream's answer; held while the upstream runs a task of it.
    Submission,
}

/// Work to admit and forward: its task, how it is held, and what it is called in errors.
pub struct Work {
    /// The task it runs as (action, description, indices for the rules).
    pub spec: TaskSpec,
    /// How it is forwarded and held.
    pub form: Form,
    /// What it is, in errors and logs (`by-query`, `reindex`).
    pub what: &'static str,
}

/// Admits `work` (the request `read`) and forwards it in its form (see the module docs).
pub(super) async fn run(
    st: Arc<AppState>,
    meta: RequestMeta,
    read: Read,
    work: Work,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Work { spec, form, what } = work;
    let guard = admission::register(&st, &meta, &spec);
    match form {
        Form::Waiting => {
            let mut admitted = admission::admit_registered(&st, &meta, spec, guard).await?;
            let call = call_as(&up, &meta, &read.parts, &[], read.body);
            // Cancelled, the upstream's action stops and answers what it did (a 200 saying
            // `canceled`), which is the client's answer, as on an embedded node.
            let executed = up.execute_to_the_end(admitted.execution(), call).await;
            let resp = settle(&mut admitted, executed)?;
            return Ok(admitted.ride_with(stream_back(resp)));
        }
        Form::Submission => {
            let admitted = admission::admit_registered(&st, &meta, spec, guard).await?;
            return submission(&up, &meta, admitted, read, what).await;
        }
        Form::Background => {}
    }
    let id = guard.id().to_string();
    let task = guard.task().clone();
    let status = Arc::new(UpstreamStatus(Mutex::new(not_started())));
    task.set_status(status.clone());
    let params = read.params.clone();
    let mut admitting = Box::pin({
        let (st, meta) = (st.clone(), meta.clone());
        async move { admission::admit_registered(&st, &meta, spec, guard).await }
    });
    // Admitted at once (the usual case), the request is forwarded before the task id is
    // answered: a request the upstream refuses (a bad parameter, a query it cannot parse) gets
    // the upstream's refusal as its answer, as without the gateway. One waiting in the queue,
    // or refused by admission, is answered its task id now, as on an embedded node.
    let stage = match futures::poll!(admitting.as_mut()) {
        Poll::Ready(Ok(admitted)) => {
            Stage::Submitted(Box::new(submit(&up, &meta, admitted, read, what).await?))
        }
        Poll::Ready(Err(refused)) => Stage::Refused(refused),
        Poll::Pending => Stage::Admitting(admitting, read),
    };
    st.tasks.expect_result(&task);
    let bg = st.clone();
    // A follower: stopped, and its slot given back, when the node stops (`followers.rs`).
    let followers = up.clone();
    followers.followers.spawn(async move {
        let st = bg;
        let outcome = async {
            let submitted = match stage {
                Stage::Submitted(submitted) => *submitted,
                Stage::Admitting(admitting, read) => {
                    submit(&up, &meta, admitting.await?, read, what).await?
                }
                Stage::Refused(refused) => return Err(refused),
            };
            submitted.follow(&up, &status).await
        }
        .await;
        // The ticket is released after the result is stored.
        match outcome {
            Ok((response, admitted)) => {
                st.tasks.store_outcome(&task, Ok(response));
                drop(admitted);
            }
            Err(e) => st.tasks.store_outcome(&task, Err(&e)),
        }
    });
    Ok(reply(StatusCode::OK, json!({"task": id}), &params))
}

/// Whether a by-query action or a reindex waits for its end (OpenSearch's default), or runs
/// in the background (`wait_for_completion=false`).
pub fn waits(params: &crate::http::Params) -> ApiResult<Form> {
    let wait =
        !params.contains_key("wait_for_completion") || bool_param(params, "wait_for_completion")?;
    Ok(if wait {
        Form::Waiting
    } else {
        Form::Background
    })
}

/// A by-query or reindex task's status before it started (OpenSearch's
/// `BulkByScrollTask.Status` with nothing done), what the gateway task shows while it waits in the queue.
fn not_started() -> Value {
    json!({"total": 0, "updated": 0, "created": 0, "deleted": 0, "batches": 0,
           "version_conflicts": 0, "noops": 0, "retries": {"bulk": 0, "search": 0},
           "throttled_millis": 0, "requests_per_second": -1.0, "throttled_until_millis": 0})
}

/// The upstream task's `status` as its last look showed it, shown as the gateway task's.
#[derive(Debug)]
struct UpstreamStatus(Mutex<Value>);

impl TaskStatus for UpstreamStatus {
    fn status(&self) -> Value {
        self.0.lock().clone()
    }
}

/// Where a background action is when its task id is answered.
enum Stage {
    /// Waiting for admission (in the group's queue, say), its request not yet forwarded.
    Admitting(
        Pin<Box<dyn Future<Output = ApiResult<Admitted>> + Send>>,
        Read,
    ),
    /// Refused by admission: the task's result.
    Refused(ApiError),
    /// Forwarded, and started on the upstream (boxed: the other stages are a third its size).
    Submitted(Box<Submitted>),
}

/// Admitted work forwarded and started on the upstream: what holding its slot to its end
/// needs.
struct Running {
    admitted: Admitted,
    /// Marks the task as executing in its group until the upstream's work ends.
    executing: Box<dyn Any + Send>,
    hooks: Arc<dyn ExecutionHooks>,
    task: Arc<Task>,
    /// The `X-Opaque-Id` the request carried: how the upstream's tasks of it are found, and
    /// told apart from another that has their id after an upstream restart.
    ours: String,
    /// What the looks at the upstream task (and its cancellation) send: the gateway's own
    /// credentials, as its other calls of its own ([`super::headers::Identity::own_call`]).
    /// They once carried the request's identity: in `run_as` and `passthrough` a user allowed
    /// to delete but not to read tasks (Elasticsearch's `monitor`) had every look refused, and
    /// work that succeeded upstream was stored as a `security_exception` (an outside trial).
    headers: HeaderMap,
    /// When the task's `cancel_after_time_interval` passes (queue time counted).
    cancel_at: Option<Instant>,
}

impl Running {
    /// Ends the work with `outcome`: its usage reported, no longer executing in its group,
    /// its ticket settled (and answered, to be dropped when the caller is done with it).
    fn end(self, up: &Upstream, outcome: ApiResult<()>) -> ApiResult<Admitted> {
        let Self {
            mut admitted,
            executing,
            hooks,
            task,
            ..
        } = self;
        up.finished(&task, hooks.as_ref());
        drop(executing);
        match outcome {
            Ok(()) => {
                admitted.finish(Ok(()))?;
                Ok(admitted)
            }
            Err(e) => Err(settle_err(&mut admitted, e)),
        }
    }

    /// [`Self::end`] with the failure `e`, as the ticket words it.
    fn fail(self, up: &Upstream, e: ApiError) -> ApiError {
        match self.end(up, Err(e)) {
            Err(e) => e,
            Ok(_) => ApiError::Engine(EngineError::internal("the upstream's action failed")),
        }
    }
}

/// Forwards admitted work's `call`: its [`Running`] and the upstream's answer once its head
/// arrived, or why it was not answered. The task counts as executing in its group from here
/// to the end of the upstream's work, not only while the request is in flight (as
/// `Upstream::execute` would count it): the group's `executing` shows the slot held.
async fn forward(
    up: &Arc<Upstream>,
    mut admitted: Admitted,
    call: Call,
) -> ApiResult<(Running, http::Response<AnswerBody>)> {
    let headers = up.identity().own_call();
    let exec = admitted.execution();
    let (task, hooks) = (exec.task.clone(), exec.hooks.clone());
    let executing = match hooks.start() {
        Ok(executing) => executing,
        Err(e) => return Err(settle_err(&mut admitted, ApiError::Engine(e))),
    };
    task.usage.mark_executing();
    // The `X-Opaque-Id` the request carries ([`Upstream::run_started`]).
    let ours = up.opaque_id(&task);
    let cancel_at = exec.cancel_at;
    let answered = up
        .run_started(
            task.clone(),
            exec.cancel_at,
            vec![Box::new(exec.hold)],
            None,
            call,
        )
        .await;
    let running = Running {
        admitted,
        executing,
        hooks,
        task,
        ours,
        headers,
        cancel_at,
    };
    match answered {
        Ok(resp) => Ok((running, resp)),
        Err(e) => Err(running.fail(up, e)),
    }
}

/// A background action the upstream started: what following it to its end needs.
struct Submitted {
    running: Running,
    /// The upstream's task id.
    upstream_task: String,
}

/// Forwards an admitted background action with `wait_for_completion=false`: the upstream's
/// task, to [`Submitted::follow`], or the upstream's refusal (its error answer, passed
/// through).
async fn submit(
    up: &Arc<Upstream>,
    meta: &RequestMeta,
    admitted: Admitted,
    read: Read,
    what: &'static str,
) -> ApiResult<Submitted> {
    let call = call_as(up, meta, &read.parts, &[], read.body).answer_uncompressed();
    let (running, resp) = forward(up, admitted, call).await?;
    match started_task(resp, what).await {
        Ok(upstream_task) => Ok(Submitted {
            running,
            upstream_task,
        }),
        Err(e) => Err(running.fail(up, e)),
    }
}

/// The upstream task a submission's answer `resp` names, or the upstream's refusal.
async fn started_task(resp: http::Response<AnswerBody>, what: &str) -> ApiResult<String> {
    if !resp.status().is_success() {
        return Err(forwarded_error(resp, what).await);
    }
    let submitted = super::json_answer(resp, what)
        .await
        .map_err(ApiError::Engine)?;
    submitted["task"].as_str().map(str::to_string).ok_or_else(|| {
        upstream_failed(format!(
            "the upstream's answer to a {what} action with wait_for_completion=false names no task"
        ))
    })
}

impl Submitted {
    /// Follows the upstream task until it ends (see the module docs): answers its `response`
    /// and the ticket, or its `error` (or why it could not be followed).
    async fn follow(self, up: &Upstream, status: &UpstreamStatus) -> ApiResult<(Value, Admitted)> {
        let Self {
            running,
            upstream_task,
        } = self;
        let r = &running;
        let outcome = follow_task(
            up,
            &r.task,
            &upstream_task,
            (&r.ours, &r.headers),
            r.cancel_at,
            status,
        )
        .await;
        match outcome {
            Ok(response) => Ok((response, running.end(up, Ok(()))?)),
            Err(e) => Err(running.fail(up, e)),
        }
    }
}

/// Forwards an admitted [`Form::Submission`]: the upstream's answer is the client's at once;
/// the slot stays held in the background while the upstream runs a task of it
/// ([`follow_opaque`]). An upstream refusal passes through unchanged and counts as a failure.
async fn submission(
    up: &Arc<Upstream>,
    meta: &RequestMeta,
    admitted: Admitted,
    read: Read,
    what: &'static str,
) -> ApiResult<Response> {
    let call = call_as(up, meta, &read.parts, &[], read.body);
    let (running, resp) = forward(up, admitted, call).await?;
    if !resp.status().is_success() {
        let refused = EngineError::internal("the upstream answered an error");
        let _ = running.fail(up, ApiError::Engine(refused));
        return Ok(stream_back(resp));
    }
    let follower = up.clone();
    up.followers.spawn(async move {
        let (up, r) = (follower, &running);
        let outcome = follow_opaque(&up, &r.task, &r.ours, r.cancel_at, what).await;
        // Settled and released here: the client has its answer already.
        let _ = running.end(&up, outcome);
    });
    Ok(stream_back(resp))
}

/// Waits until the upstream lists no task carrying `ours` (the `X-Opaque-Id` of the request
/// that started them): at once when the work ended within the request, else one look per
/// [`follow_wait`]. Cancelling `task` (or its `cancel_at` passing, which cancels it) cancels
/// those upstream tasks, and the wait goes on until they are gone. Answers why it stopped following when the upstream's tasks could not be
/// listed [`MAX_FOLLOW_FAILURES`] times in a row (the slot is then given back: the gateway
/// cannot tell whether the work runs).
async fn follow_opaque(
    up: &Arc<Upstream>,
    task: &Task,
    ours: &str,
    cancel_at: Option<Instant>,
    what: &str,
) -> ApiResult<()> {
    let wait = follow_wait(up.request_timeout());
    let (mut failures, mut cancel_sent) = (0u32, false);
    loop {
        match up.tasks_of(ours).await {
            Ok(ids) if ids.is_empty() => break,
            Ok(_) => failures = 0,
            Err(why) => {
                failures += 1;
                if failures >= MAX_FOLLOW_FAILURES {
                    tracing::warn!(%ours, "stopped following the upstream's {what}: {why}");
                    return Err(upstream_failed(format!(
                        "cannot follow the upstream's {what}: its tasks cannot be listed ({why})"
                    )));
                }
            }
        }
        let deadline = async {
            match cancel_at {
                Some(at) if !cancel_sent => tokio::time::sleep_until(at.into()).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = task.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                up.end_tasks(ours, super::cancelled::Until::Cancelled).await;
            }
            // The ticket words the reason (the cancel-after that passed).
            () = deadline => {
                task.cancel(None);
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
    if cancel_sent {
        return Err(super::cancelled());
    }
    Ok(())
}

/// Follows the upstream task `upstream_task` of the gateway task `task` (whose request
/// carried the `X-Opaque-Id` `ours`; looked at with `headers`, the gateway's) until it ends: its
/// `response`, or its `error` (or why it could not be followed). Cancelling `task`, or its
/// `cancel_after_time_interval` passing (the request's or the group's, queue time counted:
/// a by-query action or a reindex is bound by it as a waiting one is, and as a by-query
/// action on an embedded node is), cancels the upstream task.
async fn follow_task(
    up: &Upstream,
    task: &Task,
    upstream_task: &str,
    (ours, headers): (&str, &HeaderMap),
    cancel_at: Option<Instant>,
    status: &UpstreamStatus,
) -> ApiResult<Value> {
    let wait = follow_wait(up.request_timeout());
    let look = format!(
        "/_tasks/{upstream_task}?wait_for_completion=true&timeout={}ms",
        wait.as_millis()
    );
    let peek = format!("/_tasks/{upstream_task}");
    let gone = || {
        upstream_failed(format!(
            "the upstream's task [{upstream_task}] is no longer the one this gateway started (the \
             upstream restarted, and the id is gone or another task's): what it did is unknown"
        ))
    };
    let mut failures = 0u32;
    let (mut cancel_sent, mut deadline_passed) = (false, false);
    loop {
        let deadline = async {
            match cancel_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let answer = tokio::select! {
            // The cancel-after passed: the gateway task is cancelled (the ticket words the
            // reason), which cancels the upstream's below.
            () = deadline, if !deadline_passed && !cancel_sent => {
                deadline_passed = true;
                task.cancel(None);
                continue;
            }
            // The gateway task cancelled: the upstream's is cancelled by id once it is seen
            // to be still ours, then followed to its end (it answers what it did before it
            // stopped).
            () = task.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                match up.call_upstream(Method::GET, &peek, headers).await {
                    Ok((s, body)) if s.is_success() => {
                        if !is_ours(&body, ours) {
                            return Err(gone());
                        }
                        cancel_upstream(up, upstream_task, headers).await;
                    }
                    Ok((s, _)) if s == StatusCode::NOT_FOUND => return Err(gone()),
                    // Unreachable now: cancelled by the looks' end (or the upstream's own).
                    _ => {}
                }
                continue;
            }
            answer = up.call_upstream(Method::GET, &look, headers) => answer,
        };
        match answer {
            Ok((s, body)) if s.is_success() => {
                failures = 0;
                if !is_ours(&body, ours) {
                    return Err(gone());
                }
                let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if !doc["task"]["status"].is_null() {
                    *status.0.lock() = doc["task"]["status"].clone();
                }
                if doc["completed"] != true {
                    // A wait answered before its end with the task still running: not what
                    // OpenSearch does (a wait that runs out is an error), so looked at again
                    // after a wait's length rather than at once, over and over.
                    tokio::time::sleep(wait).await;
                    continue;
                }
                if let Some(error) = doc.get("error") {
                    return Err(ApiError::Forwarded {
                        status: StatusCode::INTERNAL_SERVER_ERROR.as_u16(),
                        body: json!({"error": error}),
                    });
                }
                return Ok(doc.get("response").cloned().unwrap_or(Value::Null));
            }
            // A wait that ran out while the task still runs: its status, then look again.
            Ok((s, body)) if s == StatusCode::REQUEST_TIMEOUT || timed_out(&body) => {
                failures = 0;
                if let Ok((s, body)) = up.call_upstream(Method::GET, &peek, headers).await
                    && s.is_success()
                {
                    if !is_ours(&body, ours) {
                        return Err(gone());
                    }
                    let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    if !doc["task"]["status"].is_null() {
                        *status.0.lock() = doc["task"]["status"].clone();
                    }
                }
            }
            // No such task any more: the upstream restarted before storing its result.
            Ok((s, _)) if s == StatusCode::NOT_FOUND => return Err(gone()),
            other => {
                failures += 1;
                let e = match other {
                    Ok((s, body)) => ApiError::Forwarded {
                        status: s.as_u16(),
                        body: serde_json::from_slice(&body)
                            .unwrap_or_else(|_| json!({"error": String::from_utf8_lossy(&body)})),
                    },
                    Err(e) => ApiError::Engine(e),
                };
                if failures >= MAX_FOLLOW_FAILURES {
                    tracing::warn!(task = %upstream_task, "stopped following the upstream's task: {e:?}");
                    return Err(e);
                }
                tokio::time::sleep(FOLLOW_RETRY).await;
            }
        }
    }
}

/// Whether a `GET _tasks/{id}` answer is of the task this gateway started: its `X-Opaque-Id`
/// is `ours`. An upstream's task ids start again at 1 when it restarts (its node id does not
/// change), so after a restart the id may name another caller's task.
fn is_ours(body: &[u8], ours: &str) -> bool {
    let doc: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    doc["task"]["headers"].as_object().is_some_and(|h| {
        h.iter()
            .any(|(k, v)| k.eq_ignore_ascii_case(OPAQUE_ID_HEADER) && v.as_str() == Some(ours))
    })
}

/// A 502 `upstream_exception` saying `why`.
fn upstream_failed(why: String) -> ApiError {
    ApiError::Engine(EngineError::new(ErrorCode::UpstreamFailed, why))
}

/// One wait for the upstream task's end: [`FOLLOW_WAIT`], or half the gateway's
/// `request_timeout` when that is shorter (the wait must end before the request's timeout).
fn follow_wait(request_timeout: Duration) -> Duration {
    FOLLOW_WAIT
        .min(request_timeout / 2)
        .max(Duration::from_millis(1))
}

/// Whether an upstream error body is OpenSearch's "timed out waiting for completion" of a
/// task (a 500 in some versions, a 408 in others).
fn timed_out(body: &[u8]) -> bool {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let reason = v["error"]["reason"].as_str().unwrap_or("");
    reason.contains("Timed out waiting for completion")
}

/// Cancels the upstream task `id` (it may have ended: then nothing is left to cancel).
async fn cancel_upstream(up: &Upstream, id: &str, headers: &HeaderMap) {
    let path = format!("/_tasks/{id}/_cancel");
    match up.call_upstream(Method::POST, &path, headers).await {
        Ok((s, _)) if s.is_success() => {
            tracing::debug!(task = %id, "cancelled the upstream's task")
        }
        Ok((s, _)) => {
            tracing::debug!(task = %id, status = %s, "upstream task not cancelled (ended?)")
        }
        Err(e) => {
            tracing::warn!(task = %id, error = %e.reason, "cannot cancel the upstream's task")
        }
    }
}

/// Settles the ticket with a failure and answers the error (as the ticket words it when the
/// task was cancelled).
fn settle_err(admitted: &mut Admitted, e: ApiError) -> ApiError {
    match admitted.finish::<()>(Err(e)) {
        Err(e) => e,
        Ok(()) => ApiError::Engine(EngineError::internal("the upstream's action failed")),
    }
}

/// An upstream error answer as the error it is.
async fn forwarded_error(resp: http::Response<AnswerBody>, what: &str) -> ApiError {
    let status = resp.status().as_u16();
    match super::json_answer(resp, what).await {
        Ok(body) => ApiError::Forwarded { status, body },
        Err(e) => ApiError::Engine(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_one_wait_ends_before_the_requests_timeout() {
        assert_eq!(follow_wait(Duration::from_secs(60)), FOLLOW_WAIT);
        assert_eq!(
            follow_wait(Duration::from_secs(1)),
            Duration::from_millis(500)
        );
        assert_eq!(follow_wait(Duration::ZERO), Duration::from_millis(1));
    }

    #[test]
    fn test_a_followed_task_is_known_by_its_opaque_id() {
        let doc = |id: &str| {
            json!({"completed": false, "task": {"headers": {"X-Opaque-Id": id}}})
                .to_string()
                .into_bytes()
        };
        assert!(is_ours(&doc("sluice:n:7"), "sluice:n:7"));
        assert!(is_ours(&doc("app;sluice:n:7"), "app;sluice:n:7"));
        // Another caller's task with the same id, after an upstream restart.
        assert!(!is_ours(&doc("sluice:n:8"), "sluice:n:7"));
        assert!(!is_ours(
            br#"{"completed":false,"task":{"headers":{}}}"#,
            "sluice:n:7"
        ));
        assert!(!is_ours(b"not json", "sluice:n:7"));
    }

    #[test]
    fn test_a_wait_that_ran_out_is_told_from_a_failure() {
        assert!(timed_out(
            br#"{"error":{"type":"timeout_exception","reason":"Timed out waiting for completion of [n:1]"}}"#
        ));
        assert!(!timed_out(
            br#"{"error":{"type":"resource_not_found_exception"}}"#
        ));
        assert!(!timed_out(b"not json"));
    }
}
