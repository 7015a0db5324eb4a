//! `POST /{index}/_delete_by_query` and `_update_by_query` through a gateway: admitted as on
//! an embedded node (a task in the caller's workload group, throttled and queued, holding its
//! slot while the work runs), then forwarded.
//!
//! - Waiting for completion (the default): the request is forwarded as it came and holds its
//!   slot until the upstream answers; cancelling the gateway's task cancels the upstream's
//!   (by `X-Opaque-Id`, as for a search), whose answer — a 200 saying `canceled`, with what it
//!   did — is still the client's ([`Upstream::execute_to_the_end`]).
//! - `wait_for_completion=false`: as on an embedded node, the answer is the **gateway's** task
//!   id, and the work follows in the background. Admitted at once (the usual case), the
//!   request is forwarded with `wait_for_completion=false` before the id is answered, so that
//!   the upstream's refusal of it (a bad parameter, a query it cannot parse) is the client's
//!   answer, as without the gateway; one that waits in the group's queue, or that admission
//!   refuses, is answered its id at once and forwarded once admitted (its refusal, and the
//!   upstream's, is then the task's result). The gateway follows the upstream's task (`GET
//!   _tasks/{id}?wait_for_completion=true`, one short wait after another, and its status after
//!   each) until it ends: the slot is held all along, the upstream task's status is shown as
//!   the gateway task's, cancelling the gateway task cancels the upstream's by id, and the
//!   upstream's final `response` or `error` is stored for `GET _tasks/{id}` on the gateway. A
//!   long background action is not cut by `backend.upstream.request_timeout`: only each short
//!   look at it is bounded by it.
//!
//! Before, both were forwarded unadmitted: a tenant could run any amount of by-query work on
//! the upstream past its group's `node_limit`.

use std::any::Any;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode};

use super::routes::{Read, authorize_request_references, call_as, read, settle};
use super::{Upstream, stream_back};
use crate::admission::{self, Admitted, TaskSpec};
use crate::api::cluster_settings::bool_param;
use crate::backend::ExecutionHooks;
use crate::error::{ApiError, ApiResult};
use crate::http::{RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::{OPAQUE_ID_HEADER, Task, TaskStatus, actions};

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

/// Runs a by-query action through the gateway (see the module docs).
pub async fn run(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    req: Request,
    update: bool,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let read = read(req).await?;
    let route_action = if update {
        Action::UpdateByQuery
    } else {
        Action::DeleteByQuery
    };
    authorize_request_references(
        &st,
        &meta,
        &read.body,
        &read.params,
        route_action,
        &index,
        false,
    )?;
    // OpenSearch's default: the request answers when the work is done.
    let wait = !read.params.contains_key("wait_for_completion")
        || bool_param(&read.params, "wait_for_completion")?;
    let (action, verb) = if update {
        (actions::UPDATE_BY_QUERY, "update-by-query")
    } else {
        (actions::DELETE_BY_QUERY, "delete-by-query")
    };
    let spec = TaskSpec::new(action, format!("{verb} [{index}]"), &index, &read.params)?;
    let guard = admission::register(&st, &meta, &spec);
    if wait {
        let mut admitted = admission::admit_registered(&st, &meta, spec, guard).await?;
        let call = call_as(&up, &meta, &read.parts, &[], read.body);
        // Cancelled, the upstream's action stops and answers what it did (a 200 saying
        // `canceled`), which is the client's answer, as on an embedded node.
        let executed = up.execute_to_the_end(admitted.execution(), call).await;
        let resp = settle(&mut admitted, executed)?;
        return Ok(admitted.ride_with(stream_back(resp)));
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
        Poll::Ready(Ok(admitted)) => Stage::Submitted(submit(&up, &meta, admitted, read).await?),
        Poll::Ready(Err(refused)) => Stage::Refused(refused),
        Poll::Pending => Stage::Admitting(admitting, read),
    };
    st.tasks.expect_result(&task);
    let bg = st.clone();
    tokio::spawn(async move {
        let st = bg;
        let outcome = async {
            let submitted = match stage {
                Stage::Submitted(submitted) => submitted,
                Stage::Admitting(admitting, read) => {
                    submit(&up, &meta, admitting.await?, read).await?
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

/// A by-query task's status before it started (OpenSearch's `BulkByScrollTask.Status` with
/// nothing done), what the gateway task shows while it waits in the queue.
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
    /// Forwarded, and started on the upstream.
    Submitted(Submitted),
}

/// A background action the upstream started: what following it to its end needs.
struct Submitted {
    admitted: Admitted,
    /// Marks the task as executing in its group until the upstream task ends.
    executing: Box<dyn Any + Send>,
    hooks: Arc<dyn ExecutionHooks>,
    task: Arc<Task>,
    /// The `X-Opaque-Id` the submission carried.
    ours: String,
    /// What the looks at the upstream task send.
    headers: HeaderMap,
    /// The upstream's task id.
    upstream_task: String,
}

/// Forwards an admitted background action with `wait_for_completion=false`: the upstream's
/// task, to [`Submitted::follow`], or the upstream's refusal (its error answer, passed
/// through). The task counts as executing in its group from the forwarding to its end.
async fn submit(
    up: &Arc<Upstream>,
    meta: &RequestMeta,
    mut admitted: Admitted,
    read: Read,
) -> ApiResult<Submitted> {
    let call = call_as(up, meta, &read.parts, &[], read.body).answer_uncompressed();
    // What the looks at the upstream task send: the request's own headers as forwarded (its
    // identity), without its body's, nor the type it accepts (the gateway reads the looks'
    // answers as JSON, whatever the client asked: `Accept: application/yaml`).
    let mut headers: HeaderMap = call.headers.clone();
    headers.remove(header::CONTENT_TYPE);
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::ACCEPT);
    let exec = admitted.execution();
    let (task, hooks) = (exec.task.clone(), exec.hooks.clone());
    // Executing from here to the upstream task's end, not only while the submission is in
    // flight (as `Upstream::execute` would count it): the group's `executing` shows the slot
    // held.
    let executing = match hooks.start() {
        Ok(executing) => executing,
        Err(e) => return Err(settle_err(&mut admitted, ApiError::Engine(e))),
    };
    task.usage.mark_executing();
    // The `X-Opaque-Id` the submission carries ([`Upstream::run_started`]): how the upstream
    // task is told apart from another that has its id after an upstream restart.
    let ours = up.opaque_id(&task);
    let submitted = up
        .run_started(
            task.clone(),
            exec.cancel_at,
            vec![Box::new(exec.hold)],
            call,
        )
        .await;
    let started = match submitted {
        Ok(resp) => started_task(resp).await,
        Err(e) => Err(e),
    };
    match started {
        Ok(upstream_task) => Ok(Submitted {
            admitted,
            executing,
            hooks,
            task,
            ours,
            headers,
            upstream_task,
        }),
        Err(e) => {
            up.finished(&task, hooks.as_ref());
            drop(executing);
            Err(settle_err(&mut admitted, e))
        }
    }
}

/// The upstream task a submission's answer `resp` names, or the upstream's refusal.
async fn started_task(resp: http::Response<super::streamed::AnswerBody>) -> ApiResult<String> {
    if !resp.status().is_success() {
        return Err(forwarded_error(resp).await);
    }
    let submitted = super::json_answer(resp, "by-query")
        .await
        .map_err(ApiError::Engine)?;
    submitted["task"].as_str().map(str::to_string).ok_or_else(|| {
        upstream_failed(
            "the upstream's answer to a by-query action with wait_for_completion=false names no task"
                .to_string(),
        )
    })
}

impl Submitted {
    /// Follows the upstream task until it ends (see the module docs): answers its `response`
    /// and the ticket, or its `error` (or why it could not be followed).
    async fn follow(self, up: &Upstream, status: &UpstreamStatus) -> ApiResult<(Value, Admitted)> {
        let Self {
            mut admitted,
            executing,
            hooks,
            task,
            ours,
            headers,
            upstream_task,
        } = self;
        let outcome = follow_task(up, &task, &upstream_task, &ours, &headers, status).await;
        up.finished(&task, hooks.as_ref());
        drop(executing);
        match outcome {
            Ok(response) => {
                admitted.finish(Ok(()))?;
                Ok((response, admitted))
            }
            Err(e) => Err(settle_err(&mut admitted, e)),
        }
    }
}

/// Follows the upstream task `upstream_task` until it ends: its `response`, or its `error`
/// (or why it could not be followed).
async fn follow_task(
    up: &Upstream,
    task: &Task,
    upstream_task: &str,
    ours: &str,
    headers: &HeaderMap,
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
    let mut cancel_sent = false;
    loop {
        let answer = tokio::select! {
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
                    tracing::warn!(task = %upstream_task, "stopped following the upstream's by-query task: {e:?}");
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
            tracing::debug!(task = %id, "cancelled the upstream's by-query task")
        }
        Ok((s, _)) => {
            tracing::debug!(task = %id, status = %s, "upstream by-query task not cancelled (ended?)")
        }
        Err(e) => {
            tracing::warn!(task = %id, error = %e.reason, "cannot cancel the upstream's by-query task")
        }
    }
}

/// Settles the ticket with a failure and answers the error (as the ticket words it when the
/// task was cancelled).
fn settle_err(admitted: &mut Admitted, e: ApiError) -> ApiError {
    match admitted.finish::<()>(Err(e)) {
        Err(e) => e,
        Ok(()) => ApiError::Engine(EngineError::internal("by-query action failed")),
    }
}

/// An upstream error answer as the error it is.
async fn forwarded_error(resp: http::Response<super::streamed::AnswerBody>) -> ApiError {
    let status = resp.status().as_u16();
    match super::json_answer(resp, "by-query").await {
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
