//! `_bulk` and `_mget` through the gateway, authorized item by item as on an embedded node
//! (`crate::api::docs`): each `_bulk` operation needs its write action
//! ([`crate::api::docs::bulk_action`]) and each `_mget` document `Action::Mget` on its own
//! `_index` (the URL's index when it names none).
//!
//! A user whose permissions cover the request's actions on every index (`*`), or any request
//! when nothing is authorized, is forwarded untouched, its body streamed: a multi-gigabyte
//! `_bulk` is never buffered. Otherwise the body is read (bounded by `http.max_content_length`),
//! only the allowed items are forwarded, and the upstream's answer is merged with the 403 items
//! in request order, in OpenSearch's shapes; when every item is refused the upstream is not
//! called. A whole-request error of the upstream passes through unchanged.
//!
//! # Invariants
//! - D1 — the upstream receives only items that were authorized: the forwarded `_bulk` is
//!   rebuilt from the action lines as parsed (not the raw text), so the upstream pairs actions
//!   and documents exactly as they were checked, a body that does not split into items is
//!   refused here rather than forwarded, and an item that names no index is checked on the
//!   one the upstream gives it (the path's, else the URL's `index` parameter). Tested by
//!   `test_bulk_and_mget_forward_only_authorized_items`,
//!   `test_msearch_bulk_and_mget_are_authorized_per_item` (in gateway mode) and
//!   `test_bulk_split_pairs_actions_and_documents`.
//! - D2 — answers keep request order: item *i* of the answer is item *i* of the request.
//!   Tested by `test_merge_keeps_request_order` and
//!   `test_bulk_and_mget_forward_only_authorized_items`.
//! - D3 — a user allowed everywhere (or no authorization) is never buffered: the body streams
//!   to the upstream. Tested by `test_bodies_much_larger_than_a_memory_bound_stream_through`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode};

use super::routes::{Read, call_as, read};
use super::stream_back;
use crate::api::docs::{bulk_action, bulk_error_item, malformed, mget_error_item};
use crate::error::ApiResult;
use crate::http::{RequestMeta, reply};
use crate::state::AppState;

/// The write actions a `_bulk` may need.
const BULK_ACTIONS: [Action; 3] = [Action::WriteIndex, Action::WriteUpdate, Action::WriteDelete];

/// The index an item that names none goes to, as OpenSearch's handlers read it
/// (`request.param("index")`): the path's, else the URL's `index` parameter (which OpenSearch
/// reads the same way when the path names none), so that an item is authorized on the index
/// the upstream will use (D1).
fn default_index(path: Option<String>, params: &crate::http::Params) -> Option<String> {
    path.or_else(|| params.get("index").cloned())
}

/// Whether the request must be authorized item by item: its user lacks one of `actions` on
/// some index. Otherwise every item is allowed whatever it names, and the body streams through.
pub(super) fn needs_items(meta: &RequestMeta, actions: &[Action]) -> bool {
    meta.permissions
        .as_ref()
        .is_some_and(|p| !actions.iter().all(|a| p.allows_index_pattern(*a, "*")))
}

/// `POST|PUT /_bulk` and `/{index}/_bulk`.
pub async fn bulk(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    req: Request,
) -> Response {
    let is_write = *req.method() == Method::POST || *req.method() == Method::PUT;
    if !is_write || !needs_items(&meta, &BULK_ACTIONS) {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    run_bulk(st, meta, index, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `GET|POST /_mget` and `/{index}/_mget`.
pub async fn mget(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    req: Request,
) -> Response {
    let is_read = *req.method() == Method::GET || *req.method() == Method::POST;
    if !is_read || !needs_items(&meta, &[Action::Mget]) {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    run_mget(st, meta, index, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// One `_bulk` operation as forwarded: its action line (re-serialized) and document line.
#[derive(Debug)]
struct BulkOp {
    action: String,
    index: Option<String>,
    id: Option<String>,
    /// The action line and, but for a delete, the document line, each ending in `\n`.
    lines: String,
}

/// Splits an NDJSON `_bulk` body into its operations (the upstream validates their content).
fn split_bulk(body: &[u8], default_index: Option<&str>) -> Result<Vec<BulkOp>, EngineError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| EngineError::parsing("bulk body is not valid UTF-8"))?;
    let mut lines = text
        .split('\n')
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let mut ops = Vec::new();
    while let Some((n, line)) = lines.next() {
        let line_no = n + 1;
        let parsed: Value = serde_json::from_str(line)
            .map_err(|e| malformed(line_no, &format!("expected a JSON object: {e}")))?;
        let Some((action, meta)) = parsed
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
        else {
            return Err(malformed(
                line_no,
                "expected exactly one action (index, create, update or delete)",
            ));
        };
        if !matches!(action.as_str(), "index" | "create" | "update" | "delete") {
            return Err(EngineError::illegal_argument(format!(
                "Malformed action/metadata line [{line_no}], expected one of [create, delete, index, update] but found [{action}]"
            )));
        }
        let meta = meta
            .as_object()
            .ok_or_else(|| malformed(line_no, "expected START_OBJECT after the action name"))?;
        let index = match meta.get("_index") {
            None => default_index.map(str::to_string),
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(malformed(line_no, "[_index] must be a string")),
        };
        let id = match meta.get("_id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let mut lines_out = parsed.to_string();
        lines_out.push('\n');
        if action != "delete" {
            let (_, doc) = lines.next().ok_or_else(|| {
                EngineError::illegal_argument(format!(
                    "The bulk request must be terminated by a newline [\\n]; the [{action}] action on line [{line_no}] has no document line"
                ))
            })?;
            lines_out.push_str(doc.trim_end_matches('\r'));
            lines_out.push('\n');
        }
        ops.push(BulkOp {
            action: action.clone(),
            index,
            id,
            lines: lines_out,
        });
    }
    if ops.is_empty() {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: no requests added;",
        ));
    }
    Ok(ops)
}

/// Authorizes `action` on an item's index; an item naming no index is the upstream's to
/// refuse (it fails the whole request there).
fn check(
    st: &AppState,
    meta: &RequestMeta,
    action: Action,
    index: Option<&str>,
) -> Result<(), EngineError> {
    match index {
        Some(index) => crate::auth::authorize_item(st, meta, action, index),
        None => Ok(()),
    }
}

/// Merges the upstream's answers (`forwarded`, in order) with the refused items' (`refused`:
/// `Some` at the refused positions): the refused positions take their own, the others the
/// upstream's next; a short upstream answer leaves `missing(position)` in the gaps.
fn merge(
    refused: Vec<Option<Value>>,
    forwarded: Vec<Value>,
    missing: impl Fn(usize) -> Value,
) -> Vec<Value> {
    let mut answers = forwarded.into_iter();
    refused
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| answers.next().unwrap_or_else(|| missing(i))))
        .collect()
}

/// Sends `body` upstream on the request's path; answers the upstream's JSON when it succeeded,
/// or its response to pass through unchanged.
async fn send(
    st: &AppState,
    meta: &RequestMeta,
    parts: &http::request::Parts,
    body: Bytes,
) -> ApiResult<Result<Value, Response>> {
    let up = super::routes_upstream(st)?;
    let call = call_as(&up, meta, parts, &[], body).answer_uncompressed();
    let resp = up.send_call(call).await?;
    if !resp.status().is_success() {
        return Ok(Err(stream_back(resp)));
    }
    let what = parts.uri.path().rsplit('/').next().unwrap_or_default();
    Ok(Ok(super::json_answer(resp, what).await?))
}

/// An answer item for one the upstream did not answer.
fn lost(what: &str) -> EngineError {
    EngineError::new(
        ErrorCode::UpstreamFailed,
        format!("the upstream's {what} answer has fewer items than were sent"),
    )
}

async fn run_bulk(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    req: Request,
) -> ApiResult<Response> {
    let started = Instant::now();
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    if body.is_empty() {
        return Err(EngineError::new(ErrorCode::Parse, "request body is required").into());
    }
    if body.last() != Some(&b'\n') && !body.iter().all(u8::is_ascii_whitespace) {
        return Err(EngineError::illegal_argument(
            "The bulk request must be terminated by a newline [\\n]",
        )
        .into());
    }
    let index = default_index(index, &params);
    let ops = split_bulk(&body, index.as_deref())?;
    let mut forwarded = String::new();
    let refused: Vec<Option<Value>> = ops
        .iter()
        .map(
            |op| match check(&st, &meta, bulk_action(&op.action), op.index.as_deref()) {
                Ok(()) => {
                    forwarded.push_str(&op.lines);
                    None
                }
                Err(e) => Some(bulk_error_item(
                    &op.action,
                    op.index.as_deref().unwrap_or_default(),
                    op.id.as_deref(),
                    &e,
                )),
            },
        )
        .collect();
    let mut answer = if forwarded.is_empty() {
        Map::new()
    } else {
        match send(&st, &meta, &parts, forwarded.into()).await? {
            Ok(Value::Object(m)) => m,
            Ok(_) => Map::new(),
            Err(passthrough) => return Ok(passthrough),
        }
    };
    let upstream_items = match answer.remove("items") {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    let items = merge(refused, upstream_items, |i| {
        let op = &ops[i];
        bulk_error_item(
            &op.action,
            op.index.as_deref().unwrap_or_default(),
            op.id.as_deref(),
            &lost("_bulk"),
        )
    });
    answer
        .entry("took")
        .or_insert_with(|| json!(started.elapsed().as_millis() as u64));
    // As OpenSearch sets it: whether any item failed (refused here, failed upstream or lost).
    let errors = items.iter().any(|item| {
        item.as_object()
            .and_then(|op| op.values().next())
            .is_some_and(|result| result.get("error").is_some())
    });
    answer.insert("errors".into(), json!(errors));
    answer.insert("items".into(), Value::Array(items));
    Ok(reply(StatusCode::OK, Value::Object(answer), &params))
}

/// One `_mget` entry: where it sits in the body (`docs` or `ids`), its value, and what it
/// reads.
struct MgetEntry {
    key: String,
    value: Value,
    index: Option<String>,
    id: String,
}

/// Splits an `_mget` body into its entries, in body order; keys other than `docs` and `ids`
/// are kept for the upstream to judge.
fn split_mget(
    body: Map<String, Value>,
    default_index: Option<&str>,
) -> Result<(Vec<MgetEntry>, Map<String, Value>), EngineError> {
    let mut entries = Vec::new();
    let mut rest = Map::new();
    for (key, value) in body {
        let items = match (key.as_str(), value) {
            ("docs" | "ids", Value::Array(items)) => items,
            (_, value) => {
                rest.insert(key, value);
                continue;
            }
        };
        for (n, item) in items.into_iter().enumerate() {
            let (index, id) = match &item {
                Value::Object(doc) => {
                    let index = match doc.get("_index") {
                        None => default_index.map(str::to_string),
                        Some(Value::String(s)) => Some(s.clone()),
                        Some(_) => {
                            return Err(EngineError::parsing(format!(
                                "docs[{n}]: [_index] must be a string"
                            )));
                        }
                    };
                    let id = match doc.get("_id") {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Number(x)) => x.to_string(),
                        _ => String::new(),
                    };
                    (index, id)
                }
                Value::String(s) => (default_index.map(str::to_string), s.clone()),
                other => (default_index.map(str::to_string), other.to_string()),
            };
            entries.push(MgetEntry {
                key: key.clone(),
                value: item,
                index,
                id,
            });
        }
    }
    Ok((entries, rest))
}

async fn run_mget(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    req: Request,
) -> ApiResult<Response> {
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    let Some(Value::Object(top)) = crate::http::parse_json(&body)? else {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: no documents to get;",
        )
        .into());
    };
    let index = default_index(index, &params);
    let (entries, mut forwarded) = split_mget(top, index.as_deref())?;
    let mut any = false;
    let mut refused = Vec::with_capacity(entries.len());
    for e in entries {
        match check(&st, &meta, Action::Mget, e.index.as_deref()) {
            Ok(()) => {
                any = true;
                refused.push(None);
                match forwarded.entry(e.key).or_insert_with(|| json!([])) {
                    Value::Array(a) => a.push(e.value),
                    _ => return Err(EngineError::internal("mget entries lost").into()),
                }
            }
            Err(err) => refused.push(Some(mget_error_item(
                e.index.as_deref().unwrap_or_default(),
                &e.id,
                &err,
            ))),
        }
    }
    let mut answer = if any {
        let body = Value::Object(forwarded).to_string();
        match send(&st, &meta, &parts, body.into()).await? {
            Ok(Value::Object(m)) => m,
            Ok(_) => Map::new(),
            Err(passthrough) => return Ok(passthrough),
        }
    } else {
        Map::new()
    };
    let upstream_docs = match answer.remove("docs") {
        Some(Value::Array(docs)) => docs,
        _ => Vec::new(),
    };
    let docs = merge(refused, upstream_docs, |_| {
        mget_error_item("", "", &lost("_mget"))
    });
    answer.insert("docs".into(), Value::Array(docs));
    Ok(reply(StatusCode::OK, Value::Object(answer), &params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_bulk_split_pairs_actions_and_documents() {
        let body = b"{\"delete\":{\"_index\":\"b\",\"_id\":\"1\"}}\n\
            {\"index\":{\"_id\":2}}\n{\"delete\":{\"_index\":\"x\"}}\n\
            {\"update\":{\"_index\":\"a\",\"_id\":\"3\"}}\n{\"doc\":{}}\n";
        let ops = split_bulk(body, Some("d")).unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            ops[0].lines,
            "{\"delete\":{\"_index\":\"b\",\"_id\":\"1\"}}\n"
        );
        // The line after an index action is its document, whatever it looks like.
        assert_eq!(ops[1].index.as_deref(), Some("d"));
        assert_eq!(ops[1].id.as_deref(), Some("2"));
        assert_eq!(
            ops[1].lines,
            "{\"index\":{\"_id\":2}}\n{\"delete\":{\"_index\":\"x\"}}\n"
        );
        assert_eq!(ops[2].action, "update");
        assert!(split_bulk(b"{\"index\":{}}\n", None).is_err());
        assert!(split_bulk(b"{\"drop\":{}}\n", None).is_err());
        assert!(split_bulk(b"{\"index\":{\"_index\":1}}\n{}\n", None).is_err());
        assert!(split_bulk(b"\n\n", None).is_err());
    }

    #[test]
    fn test_merge_keeps_request_order() {
        let merged = merge(
            vec![None, Some(json!("r1")), None, Some(json!("r3")), None],
            vec![json!("u0"), json!("u2")],
            |i| json!(format!("lost{i}")),
        );
        assert_eq!(
            merged,
            [
                json!("u0"),
                json!("r1"),
                json!("u2"),
                json!("r3"),
                json!("lost4")
            ]
        );
    }

    #[test]
    fn test_mget_split_keeps_body_order_and_default_index() {
        let body = json!({"docs": [{"_index": "a", "_id": "1"}, {"_id": 2}], "ids": ["3"]});
        let Value::Object(body) = body else {
            unreachable!()
        };
        let (entries, rest) = split_mget(body, Some("d")).unwrap();
        let got: Vec<(&str, Option<&str>, &str)> = entries
            .iter()
            .map(|e| (e.key.as_str(), e.index.as_deref(), e.id.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("docs", Some("a"), "1"),
                ("docs", Some("d"), "2"),
                ("ids", Some("d"), "3")
            ]
        );
        assert!(rest.is_empty());
    }
}
