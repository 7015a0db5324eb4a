//! `_msearch` (and `_msearch/template`) through the gateway: the items are authorized and
//! admitted one by one as children of one msearch task, exactly as on an embedded node; only
//! the admitted items are forwarded, in `_msearch` batches to the upstream as admission lets
//! them through (usually one, see [`run`]); the answers are merged back in request order, an
//! item refused becoming its error item (a 403 or a 429 inside the 200).
//!
//! The upstream's answer is read whole to merge it (bounded by what the admitted items
//! return), unlike `_search`, whose answer streams through.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{Value, json};
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode};

use super::routes::{Read, call_as, read, time_param};
use super::stream_back;
use crate::admission::{Admitted, TaskSpec, admit};
use crate::api::msearch::error_item;
use crate::error::{ApiError, ApiResult, render_error};
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
/// upstream validates their content. An item's `cancel_after_time_interval` is its header's,
/// else the URL's (`url`), as on an embedded node.
fn split(body: &[u8], default_index: Option<&str>, url: &Params) -> Result<Vec<Item>, EngineError> {
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
            let cancel_after = match header.get(CANCEL_AFTER) {
                Some(Value::String(s)) => Some(s),
                _ => url.get(CANCEL_AFTER),
            };
            if let Some(s) = cancel_after {
                params.insert(CANCEL_AFTER.to_string(), s.clone());
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

/// The parameter (and item header key) of an item's cancel-after.
const CANCEL_AFTER: &str = "cancel_after_time_interval";

/// An item once admission decided.
enum Decided {
    Admitted(Box<Admitted>, Item),
    Refused(ApiError),
}

/// Items admitted and started, forwarded together in one upstream `_msearch`.
struct Batch {
    /// Each item's place in the request, and its admission.
    items: Vec<(usize, Box<Admitted>)>,
    ndjson: String,
    keep: Vec<Box<dyn std::any::Any + Send>>,
    /// When the gateway gives up on the batch: once every item's cancel-after passed (the
    /// upstream enforces each item's own); an item without one keeps the batch open.
    deadline: Option<Instant>,
}

/// Runs an `_msearch` (see the module docs).
///
/// Items are forwarded in batches as admission lets them through: those admitted at once go
/// out together, and an item that waits in its group's queue goes out with the next batch
/// once a slot frees up (its own batch's, another request's). Waiting for every item before
/// forwarding any would deadlock an msearch with more items than its group's `node_limit`:
/// the queued items would wait for slots the request's own admitted items hold until the
/// whole request is forwarded.
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
    let items = split(&body, index.as_deref(), &params)?;
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
    let started = Instant::now();
    let count = items.len();
    // Admitted one by one, concurrently: an item waiting in its group's queue does not hold
    // back the admission of the others.
    let mut admissions: FuturesUnordered<_> = items
        .into_iter()
        .enumerate()
        .map(|(place, item)| {
            let (st, meta) = (st.clone(), meta.clone());
            async move { (place, decide(&st, &meta, parent_seq, template, item).await) }
        })
        .collect();
    let mut forwards = FuturesUnordered::new();
    let mut responses: Vec<Option<Value>> = vec![None; count];
    let mut batches = 0usize;
    let mut passthrough = None;
    loop {
        tokio::select! {
            Some(first) = admissions.next(), if !admissions.is_empty() => {
                // With it, every item whose admission is decided by now (those admitted or
                // refused at once): one batch, not one upstream call an item.
                let mut decided = vec![first];
                while let Some(Some(next)) = admissions.next().now_or_never() {
                    decided.push(next);
                }
                let batch = start_batch(decided, template, &mut responses);
                if !batch.items.is_empty() {
                    batches += 1;
                    let call = call_as(&up, &meta, &parts, &[], batch.ndjson.into())
                        .answer_uncompressed();
                    let (task, up) = (parent.task().clone(), &up);
                    forwards.push(async move {
                        let result = up.run_started(task, batch.deadline, batch.keep, call).await;
                        (batch.items, result)
                    });
                }
            }
            Some((items, result)) = forwards.next(), if !forwards.is_empty() => {
                let sent = items.len();
                // The upstream's whole-request error passes through unchanged when this batch
                // was the request's only one; otherwise each of its items carries it.
                let only = batches == 1 && admissions.is_empty();
                let answers = match result {
                    Ok(resp) if resp.status().is_success() => {
                        match super::json_answer(resp, "_msearch").await {
                            Ok(v) => answered_items(&v, sent),
                            Err(e) => vec![error_item(&ApiError::Engine(e))],
                        }
                    }
                    Ok(resp) if only => {
                        passthrough = Some(resp);
                        Vec::new()
                    }
                    Ok(resp) => vec![upstream_error_item(resp).await],
                    Err(e) => vec![error_item(&e)],
                };
                settle_batch(&up, items, answers, passthrough.is_some(), &mut responses);
            }
            else => break,
        }
    }
    on_drop.disarm();
    drop(parent);
    if let Some(resp) = passthrough {
        return Ok(stream_back(resp));
    }
    let responses: Vec<Value> = responses
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                error_item(&ApiError::Engine(EngineError::internal(
                    "msearch item was never answered",
                )))
            })
        })
        .collect();
    let body = json!({"took": started.elapsed().as_millis() as u64, "responses": responses});
    Ok(reply(StatusCode::OK, body, &params))
}

/// Authorizes and admits one item as a child of the msearch task `parent`.
async fn decide(
    st: &Arc<AppState>,
    meta: &RequestMeta,
    parent: u64,
    template: bool,
    item: Item,
) -> Decided {
    let description = if template {
        format!("indices[{}], template[{}]", item.index, item.body)
    } else {
        crate::api::search::search_description(&item.index, Some(&item.body))
    };
    // Authorized before admission, as on an embedded node: the item's indices, and what else
    // the upstream would read for it (its `terms` lookups and other references).
    let action = if template {
        Action::SearchTemplate
    } else {
        Action::Search
    };
    let allowed = crate::auth::authorize_item(st, meta, action, &item.index).and_then(|()| {
        super::routes::authorize_references(st, meta, &item.body, action, &item.index, template)
    });
    if let Err(e) = allowed {
        return Decided::Refused(ApiError::Engine(e));
    }
    let spec =
        TaskSpec::new(actions::SEARCH, description, &item.index, &item.params).map(|mut s| {
            s.parent = Some(parent);
            s
        });
    match spec {
        Ok(spec) => match admit(st, meta, spec).await {
            Ok(a) => Decided::Admitted(Box::new(a), item),
            Err(e) => Decided::Refused(e),
        },
        Err(e) => Decided::Refused(e),
    }
}

/// Starts the admitted items of `decided` (admission's start hook may still turn one away,
/// as a search thread's would) into a batch: each with its group's timeout and what is left of
/// its cancel-after. Refused items get their error item in `responses` at once.
fn start_batch(
    decided: Vec<(usize, Decided)>,
    template: bool,
    responses: &mut [Option<Value>],
) -> Batch {
    let mut batch = Batch {
        items: Vec::new(),
        ndjson: String::new(),
        keep: Vec::new(),
        deadline: None,
    };
    let mut deadlines: Vec<Option<Instant>> = Vec::new();
    for (place, d) in decided {
        let (mut admitted, item) = match d {
            Decided::Refused(e) => {
                responses[place] = Some(error_item(&e));
                continue;
            }
            Decided::Admitted(admitted, item) => (admitted, item),
        };
        let exec = admitted.execution();
        match exec.hooks.start() {
            Ok(executing) => {
                exec.task.usage.mark_executing();
                batch.keep.push(executing);
                batch.keep.push(Box::new(exec.hold));
            }
            Err(e) => {
                let refused = admitted
                    .finish::<()>(Err(ApiError::Engine(e)))
                    .err()
                    .unwrap_or_else(|| ApiError::Engine(EngineError::internal("item not started")));
                responses[place] = Some(error_item(&refused));
                continue;
            }
        }
        deadlines.push(exec.cancel_at);
        let Item {
            mut header,
            mut body,
            ..
        } = item;
        if let Some(at) = exec.cancel_at {
            let left = at
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            header.insert(CANCEL_AFTER.into(), json!(time_param(Some(left))));
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
        batch.ndjson.push_str(&Value::Object(header).to_string());
        batch.ndjson.push('\n');
        batch.ndjson.push_str(&body.to_string());
        batch.ndjson.push('\n');
        batch.items.push((place, admitted));
    }
    batch.deadline = deadlines
        .into_iter()
        .collect::<Option<Vec<Instant>>>()
        .and_then(|d| d.into_iter().max());
    batch
}

/// Settles a batch's items with the upstream's `answers` (one an item in order; a single one
/// repeats for every item: the upstream failed, or answered a number of items other than
/// those sent), writing each item's answer into `responses`.
fn settle_batch(
    up: &super::Upstream,
    items: Vec<(usize, Box<Admitted>)>,
    answers: Vec<Value>,
    passthrough: bool,
    responses: &mut [Option<Value>],
) {
    let mut answers = answers.into_iter();
    let mut last: Option<Value> = None;
    for (place, mut admitted) in items {
        up.finished(admitted.task(), admitted.execution().hooks.as_ref());
        let answer = answers.next().or_else(|| last.clone()).unwrap_or_else(|| {
            error_item(&ApiError::Engine(EngineError::new(
                ErrorCode::UpstreamFailed,
                "the upstream's _msearch answer has fewer items than were sent",
            )))
        });
        last = Some(answer.clone());
        let ok = !passthrough
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
        responses[place] = Some(match settled {
            Err(e) if answer.get("error").is_none() && !passthrough => error_item(&e),
            _ => answer,
        });
    }
}

/// The upstream's error answer to one of several batches, as the error item of each of its
/// items: its `error` and its status, as OpenSearch words an item that failed.
async fn upstream_error_item(resp: http::Response<super::streamed::AnswerBody>) -> Value {
    let status = resp.status().as_u16();
    match super::json_answer(resp, "_msearch").await {
        Ok(v) if v.get("error").is_some() => json!({"error": v["error"], "status": status}),
        Ok(_) | Err(_) => {
            let e = EngineError::new(
                ErrorCode::UpstreamFailed,
                format!("the upstream answered an _msearch batch with status {status}"),
            );
            json!({"error": render_error(&e), "status": status})
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_split_keeps_items_and_their_indices() {
        let body = b"{\"index\":\"a\"}\n{\"query\":{\"match_all\":{}}}\n{}\n{\"size\":0}\n";
        let items = split(body, Some("d"), &Params::new()).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].index, "a");
        assert_eq!(items[1].index, "d");
        assert_eq!(items[1].body, json!({"size": 0}));
        assert!(split(b"{}\n", None, &Params::new()).is_err());
        assert!(split(b"\n", None, &Params::new()).is_err());
        // A header naming both keys is refused, not authorized on one and forwarded with both.
        let both = b"{\"index\":\"a\",\"indices\":\"b\"}\n{}\n";
        assert!(split(both, None, &Params::new()).is_err());
    }
}
