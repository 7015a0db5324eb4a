//! `_msearch` (and `_msearch/template`) through the gateway: the items are authorized and
//! admitted one by one as children of one msearch task, exactly as on an embedded node; only
//! the admitted items are forwarded, in one `_msearch` to the upstream; the answers are merged
//! back in request order, an item refused becoming its error item (a 403 or a 429 inside the
//! 200).
//!
//! The upstream's answer is read whole to merge it (bounded by what the admitted items
//! return), unlike `_search`, whose answer streams through.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode};

use super::routes::{Read, call_as, read, time_param};
use super::stream_back;
use crate::admission::{Admitted, TaskSpec, admit};
use crate::error::{ApiError, ApiResult, render_error, status_of};
use crate::http::{Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::{CancelOnDrop, actions};

/// One item: its two lines as sent, and what admission needs of them.
struct Item {
    header: serde_json::Map<String, Value>,
    body: Value,
    index: String,
    params: Params,
}

/// Splits an NDJSON msearch body into items ([`crate::api::msearch::split_items`]); the
/// upstream validates their content.
fn split(body: &[u8], default_index: Option<&str>) -> Result<Vec<Item>, EngineError> {
    let items = crate::api::msearch::split_items(body)?;
    Ok(items
        .into_iter()
        .map(|raw| {
            let header = raw.header;
            let index = match header.get("index").or_else(|| header.get("indices")) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
                _ => default_index.unwrap_or("_all").to_string(),
            };
            let mut params = Params::new();
            if let Some(Value::String(s)) = header.get("cancel_after_time_interval") {
                params.insert("cancel_after_time_interval".to_string(), s.clone());
            }
            Item {
                header,
                body: raw.body,
                index,
                params,
            }
        })
        .collect())
}

/// An item once admission decided.
enum Decided {
    Admitted(Box<Admitted>, Item),
    Refused(ApiError),
}

/// Runs an `_msearch` (see the module docs).
pub async fn run(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    req: Request,
    template: bool,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    if body.is_empty() {
        return Err(EngineError::new(ErrorCode::Parse, "request body is required").into());
    }
    let items = split(&body, index.as_deref())?;
    let parent = st.tasks.register(
        if template {
            actions::MSEARCH_TEMPLATE
        } else {
            actions::MSEARCH
        },
        format!(
            "requests[{}], indices[{}]",
            items.len(),
            index.as_deref().unwrap_or("")
        ),
        None,
        meta.principal.clone(),
    );
    if let Some(id) = &meta.opaque_id {
        parent.task().set_opaque_id(id.clone());
    }
    let parent_seq = parent.task().seq;
    // Dropped with this future when the client disconnects: cancels the children too.
    let on_drop = CancelOnDrop::new(st.tasks.clone(), parent_seq);
    // Admitted one by one, concurrently: an item waiting in its group's queue does not hold
    // back the admission of the others.
    let decided: Vec<Decided> = futures::future::join_all(items.into_iter().map(|item| {
        let (st, meta) = (st.clone(), meta.clone());
        async move {
            let description = if template {
                format!("indices[{}], template[{}]", item.index, item.body)
            } else {
                crate::api::search::search_description(&item.index, Some(&item.body))
            };
            // Authorized before admission, as on an embedded node: the item's indices, and
            // the `terms` lookups the upstream would read for it.
            let action = if template {
                Action::SearchTemplate
            } else {
                Action::Search
            };
            let allowed = crate::auth::authorize_item(&st, &meta, action, &item.index)
                .and_then(|()| crate::auth::authz::authorize_lookups(&st, &meta, &item.body));
            if let Err(e) = allowed {
                return Decided::Refused(ApiError::Engine(e));
            }
            let spec = TaskSpec::new(actions::SEARCH, description, &item.index, &item.params).map(
                |mut s| {
                    s.parent = Some(parent_seq);
                    s
                },
            );
            match spec {
                Ok(spec) => match admit(&st, &meta, spec).await {
                    Ok(a) => Decided::Admitted(Box::new(a), item),
                    Err(e) => Decided::Refused(e),
                },
                Err(e) => Decided::Refused(e),
            }
        }
    }))
    .await;
    // Each admitted item starts (admission's start hook may still turn it away, as a search
    // thread's would); the forwarded body holds the started items, each with its group's
    // timeout and what is left of its cancel-after.
    let mut decided = decided;
    let mut ndjson = String::new();
    let mut keep: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    let mut deadlines: Vec<Option<Instant>> = Vec::new();
    for d in &mut decided {
        let Decided::Admitted(admitted, item) = d else {
            continue;
        };
        let exec = admitted.execution();
        match exec.hooks.start() {
            Ok(executing) => {
                exec.task.usage.mark_executing();
                keep.push(executing);
                keep.push(Box::new(exec.hold));
            }
            Err(e) => {
                let refused = admitted
                    .finish::<()>(Err(ApiError::Engine(e)))
                    .err()
                    .unwrap_or_else(|| ApiError::Engine(EngineError::internal("item not started")));
                *d = Decided::Refused(refused);
                continue;
            }
        }
        deadlines.push(exec.cancel_at);
        let mut header = item.header.clone();
        let mut body = item.body.clone();
        if let Some(at) = exec.cancel_at {
            let left = at
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            header.insert(
                "cancel_after_time_interval".into(),
                json!(time_param(Some(left))),
            );
        }
        if !template {
            let requested = body["timeout"]
                .as_str()
                .and_then(|t| sluice_wire::parse_time_value(t, "timeout").ok())
                .and_then(|t| t.duration_opt());
            let effective = admitted.search_timeout(requested);
            if effective != requested
                && let Value::Object(b) = &mut body
            {
                b.insert("timeout".into(), json!(time_param(effective)));
            }
        }
        ndjson.push_str(&Value::Object(header).to_string());
        ndjson.push('\n');
        ndjson.push_str(&body.to_string());
        ndjson.push('\n');
    }
    // The gateway gives up on the batch once every item's cancel-after passed (the upstream
    // enforces each item's own); an item without one keeps the batch open.
    let batch_deadline = deadlines
        .iter()
        .copied()
        .collect::<Option<Vec<Instant>>>()
        .and_then(|d| d.into_iter().max());
    let started = Instant::now();
    let mut upstream_items: Vec<Value> = Vec::new();
    let mut passthrough = None;
    if !deadlines.is_empty() {
        let call = call_as(&up, &meta, &parts, &[], ndjson.into()).answer_uncompressed();
        let result = up
            .run_started(parent.task().clone(), batch_deadline, keep, call)
            .await;
        match result {
            Ok(resp) if resp.status().is_success() => {
                upstream_items = match super::json_answer(resp, "_msearch").await {
                    Ok(v) => answered_items(&v, deadlines.len()),
                    Err(e) => vec![error_item(&ApiError::Engine(e))],
                };
            }
            // A whole-request error of the upstream passes through unchanged.
            Ok(resp) => passthrough = Some(resp),
            Err(e) => upstream_items = vec![error_item(&e)],
        }
    }
    // Merge back in request order; a single error for the whole batch (the upstream failed,
    // or answered a number of items other than those sent) repeats for every item.
    let mut answers = upstream_items.into_iter();
    let mut last: Option<Value> = None;
    let mut responses = Vec::with_capacity(decided.len());
    let any_passthrough = passthrough.is_some();
    for d in decided {
        match d {
            Decided::Refused(e) => responses.push(error_item(&e)),
            Decided::Admitted(mut admitted, _) => {
                up.finished(admitted.task(), admitted.execution().hooks.as_ref());
                let answer = answers.next().or_else(|| last.clone()).unwrap_or_else(|| {
                    error_item(&ApiError::Engine(EngineError::new(
                        ErrorCode::UpstreamFailed,
                        "the upstream's _msearch answer has fewer items than were sent",
                    )))
                });
                last = Some(answer.clone());
                let ok = !any_passthrough
                    && answer["status"]
                        .as_u64()
                        .is_none_or(|s| (200..300).contains(&s))
                    && answer.get("error").is_none();
                let settled = if ok {
                    admitted.finish(Ok(()))
                } else {
                    admitted.finish::<()>(Err(ApiError::Engine(EngineError::internal(
                        "msearch item failed upstream",
                    ))))
                };
                // A task cancelled while the batch ran is worded as OpenSearch does.
                match settled {
                    Err(e) if answer.get("error").is_none() && !any_passthrough => {
                        responses.push(error_item(&e))
                    }
                    _ => responses.push(answer),
                }
            }
        }
    }
    on_drop.disarm();
    drop(parent);
    if let Some(resp) = passthrough {
        return Ok(stream_back(resp));
    }
    let body = json!({"took": started.elapsed().as_millis() as u64, "responses": responses});
    Ok(reply(StatusCode::OK, body, &params))
}

/// The items of the upstream's `_msearch` answer `v` to `sent` items, one per item in order;
/// a single error item for all when the answer does not have exactly one per item sent (which
/// item an answer belongs to is then unknown: none is passed on as another's).
fn answered_items(v: &Value, sent: usize) -> Vec<Value> {
    match v["responses"].as_array() {
        Some(items) if items.len() == sent => items.clone(),
        items => {
            let e = EngineError::new(
                ErrorCode::UpstreamFailed,
                format!(
                    "the upstream's _msearch answer has {} items for the {sent} sent",
                    items.map_or(0, Vec::len)
                ),
            );
            vec![error_item(&ApiError::Engine(e))]
        }
    }
}

/// An error as an msearch item: its OpenSearch error and status.
fn error_item(e: &ApiError) -> Value {
    match e {
        ApiError::Engine(e) | ApiError::Rejected { error: e, .. } => {
            json!({"error": render_error(e), "status": status_of(e).as_u16()})
        }
        other => {
            let e = EngineError::internal(format!("msearch item failed: {other:?}"));
            json!({"error": render_error(&e), "status": 500})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_split_keeps_items_and_their_indices() {
        let body = b"{\"index\":\"a\"}\n{\"query\":{\"match_all\":{}}}\n{}\n{\"size\":0}\n";
        let items = split(body, Some("d")).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].index, "a");
        assert_eq!(items[1].index, "d");
        assert_eq!(items[1].body, json!({"size": 0}));
        assert!(split(b"{}\n", None).is_err());
        assert!(split(b"\n", None).is_err());
    }
}
