//! Document APIs: `_bulk`, `_doc`, `_create`, `_update`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_core::authz::Action;
use sluice_engine::index::{DocOp, DocWriteResult, OpType};
use sluice_engine::{EngineError, ErrorCode, engine::validate_index_name};

use crate::backend::embedded::blocking;
use crate::error::{ApiResult, render_error, status_of};
use crate::http::{Body, Params, RequestMeta, reply};
use crate::state::AppState;

/// The `refresh` parameter of write requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refresh {
    No,
    /// `true` or `wait_for`: both make the write visible before answering. sluice refreshes
    /// at once for `wait_for` too (it answers later than OpenSearch would, never earlier).
    Yes,
}

fn parse_refresh(params: &Params) -> ApiResult<Refresh> {
    match params.get("refresh").map(String::as_str) {
        None | Some("false") => Ok(Refresh::No),
        Some("") | Some("true") | Some("wait_for") => Ok(Refresh::Yes),
        Some(other) => Err(EngineError::illegal_argument(format!(
            "Unknown value for refresh: [{other}]; accepted values are true, false and wait_for"
        ))
        .into()),
    }
}

/// One parsed bulk item: where it goes, and the operation or the reason it cannot run.
struct BulkItem {
    action: &'static str,
    index: String,
    id: Option<String>,
    op: Result<DocOp, EngineError>,
}

fn malformed(line: usize, why: &str) -> EngineError {
    EngineError::illegal_argument(format!("Malformed action/metadata line [{line}], {why}"))
}

/// Parses an NDJSON bulk body. Structural problems fail the whole request, as OpenSearch's;
/// a bad document fails only its item.
fn parse_bulk(body: &[u8], default_index: Option<&str>) -> Result<Vec<BulkItem>, EngineError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| EngineError::parsing("bulk body is not valid UTF-8"))?;
    let mut lines = text
        .split('\n')
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let mut items = Vec::new();
    while let Some((n, line)) = lines.next() {
        let line_no = n + 1;
        let action: Value = serde_json::from_str(line)
            .map_err(|e| malformed(line_no, &format!("expected a JSON object: {e}")))?;
        let obj = action
            .as_object()
            .ok_or_else(|| malformed(line_no, "expected START_OBJECT"))?;
        if obj.len() != 1 {
            return Err(malformed(
                line_no,
                "expected exactly one action (index, create, update or delete)",
            ));
        }
        let (name, meta) = obj
            .iter()
            .next()
            .ok_or_else(|| malformed(line_no, "expected an action"))?;
        let action_name: &'static str = match name.as_str() {
            "index" => "index",
            "create" => "create",
            "update" => "update",
            "delete" => "delete",
            other => {
                return Err(EngineError::illegal_argument(format!(
                    "Malformed action/metadata line [{line_no}], expected one of [create, delete, index, update] but found [{other}]"
                )));
            }
        };
        let meta = meta
            .as_object()
            .ok_or_else(|| malformed(line_no, "expected START_OBJECT after the action name"))?;
        let mut index = default_index.map(str::to_string);
        let mut id = None;
        for (k, v) in meta {
            match k.as_str() {
                "_index" => index = v.as_str().map(str::to_string),
                "_id" => {
                    id = match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => return Err(malformed(line_no, "[_id] must be a string")),
                    }
                }
                "routing" | "version" | "version_type" | "if_seq_no" | "if_primary_term"
                | "require_alias" | "pipeline" | "retry_on_conflict" => {}
                other => {
                    return Err(EngineError::illegal_argument(format!(
                        "Action/metadata line [{line_no}] contains an unknown parameter [{other}]"
                    )));
                }
            }
        }
        let index = index.ok_or_else(|| {
            EngineError::new(
                ErrorCode::ActionRequestValidation,
                "Validation Failed: 1: index is missing;",
            )
        })?;
        if id.is_none() && (action_name == "delete" || action_name == "update") {
            // OpenSearch validates the whole bulk request before running any item.
            return Err(EngineError::new(
                ErrorCode::ActionRequestValidation,
                "Validation Failed: 1: id is missing;",
            ));
        }
        let op = if action_name == "delete" {
            Ok(DocOp::Delete {
                id: id.clone().unwrap_or_default(),
            })
        } else {
            let (_, source_line) = lines.next().ok_or_else(|| {
                EngineError::illegal_argument(format!(
                    "The bulk request must be terminated by a newline [\\n]; the [{action_name}] action on line [{line_no}] has no document line"
                ))
            })?;
            let parsed: Result<Value, EngineError> = serde_json::from_str::<Value>(source_line)
                .map_err(|e| {
                    EngineError::mapper_parsing(format!("failed to parse: {e}")).with_index(&index)
                });
            match parsed {
                Err(e) => Err(e),
                Ok(source) => match action_name {
                    // Update bodies are parsed with the request: a bad one fails it whole.
                    "update" => Ok(parse_update(id.clone().unwrap_or_default(), &source)?),
                    _ if !source.is_object() => Err(EngineError::mapper_parsing(
                        "failed to parse, document is empty or not an object",
                    )),
                    _ => Ok(DocOp::Index {
                        id: id.clone(),
                        source,
                        op_type: if action_name == "create" {
                            OpType::Create
                        } else {
                            OpType::Index
                        },
                    }),
                },
            }
        };
        let op = op.and_then(|op| validate_index_name(&index).map(|_| op));
        items.push(BulkItem {
            action: action_name,
            index,
            id,
            op,
        });
    }
    Ok(items)
}

fn parse_update(id: String, body: &Value) -> Result<DocOp, EngineError> {
    let obj = body
        .as_object()
        .ok_or_else(|| EngineError::parsing("update request body must be an object"))?;
    let mut doc = None;
    let mut doc_as_upsert = false;
    let mut upsert = None;
    for (k, v) in obj {
        match k.as_str() {
            "doc" => doc = Some(v.clone()),
            "doc_as_upsert" => doc_as_upsert = v.as_bool().unwrap_or(false),
            "upsert" => upsert = Some(v.clone()),
            "script" => {
                return Err(EngineError::illegal_argument(
                    "scripted updates are not supported by sluice; send a partial document in [doc]",
                ));
            }
            "detect_noop" | "_source" => {}
            other => {
                return Err(EngineError::parsing(format!(
                    "[UpdateRequest] unknown field [{other}]"
                )));
            }
        }
    }
    let doc = doc.ok_or_else(|| {
        EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: script or doc is missing;",
        )
    })?;
    Ok(DocOp::Update {
        id,
        doc,
        doc_as_upsert,
        upsert,
    })
}

fn item_json(
    action: &str,
    index: &str,
    id: Option<&str>,
    r: &Result<DocWriteResult, EngineError>,
) -> (Value, bool) {
    match r {
        Ok(res) => {
            let mut v = res.to_json();
            v["status"] = json!(res.status);
            if res.result == "noop" {
                v["_shards"] = json!({"total": 0, "successful": 0, "failed": 0});
            }
            (json!({ action: v }), false)
        }
        Err(e) => {
            let status = status_of(e).as_u16();
            let mut err = render_error(e);
            if let Some(o) = err.as_object_mut() {
                o.remove("root_cause");
                o.entry("index").or_insert(json!(index));
            }
            let mut m = Map::new();
            m.insert("_index".into(), json!(index));
            m.insert("_id".into(), id.map_or(Value::Null, |i| json!(i)));
            m.insert("status".into(), json!(status));
            m.insert("error".into(), err);
            (json!({ action: Value::Object(m) }), true)
        }
    }
}

async fn run_bulk(
    st: Arc<AppState>,
    meta: RequestMeta,
    default_index: Option<String>,
    params: Params,
    body: Body,
) -> ApiResult<Response> {
    let started = Instant::now();
    let refresh = parse_refresh(&params)?;
    if body.0.is_empty() {
        return Err(EngineError::new(ErrorCode::Parse, "request body is required").into());
    }
    if body.0.iter().all(u8::is_ascii_whitespace) {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: no requests added;",
        )
        .into());
    }
    if body.0.last() != Some(&b'\n') {
        return Err(EngineError::illegal_argument(
            "The bulk request must be terminated by a newline [\\n]",
        )
        .into());
    }
    let mut items = parse_bulk(&body.0, default_index.as_deref())?;
    // Each operation is authorized on its own index: a forbidden one is a 403 item.
    for item in items.iter_mut().filter(|i| i.op.is_ok()) {
        let action = match item.action {
            "delete" => Action::WriteDelete,
            "update" => Action::WriteUpdate,
            _ => Action::WriteIndex,
        };
        if let Err(e) = crate::auth::authorize_item(&st, &meta, action, &item.index) {
            item.op = Err(e);
        }
    }
    let engine = st.engine.clone();
    let (items, results) = blocking(move || {
        let mut runnable = Vec::new();
        let mut slots = Vec::with_capacity(items.len());
        let mut meta = Vec::with_capacity(items.len());
        for item in items {
            match item.op {
                Ok(op) => {
                    slots.push(None);
                    runnable.push((item.index.clone(), op));
                }
                Err(e) => slots.push(Some(Err(e))),
            }
            meta.push((item.action, item.index, item.id));
        }
        let mut done = engine.bulk(runnable).into_iter();
        let results: Vec<Result<DocWriteResult, EngineError>> = slots
            .into_iter()
            .map(|s| {
                s.unwrap_or_else(|| {
                    done.next()
                        .unwrap_or_else(|| Err(EngineError::internal("lost bulk item")))
                })
            })
            .collect();
        if refresh == Refresh::Yes {
            let mut touched: Vec<&str> = results
                .iter()
                .filter_map(|r| r.as_ref().ok().map(|r| r.index.as_str()))
                .collect();
            touched.sort_unstable();
            touched.dedup();
            for name in touched {
                if let Some(h) = engine.index(name) {
                    h.refresh()?;
                }
            }
        }
        Ok((meta, results))
    })
    .await?;
    let mut errors = false;
    let mut out = Vec::with_capacity(results.len());
    for ((action, index, id), r) in items.iter().zip(&results) {
        let id = r.as_ref().ok().map(|r| r.id.as_str()).or(id.as_deref());
        let (v, failed) = item_json(action, index, id, r);
        errors |= failed;
        out.push(v);
    }
    let body =
        json!({"took": started.elapsed().as_millis() as u64, "errors": errors, "items": out});
    Ok(reply(StatusCode::OK, body, &params))
}

/// `POST /_bulk`.
pub async fn bulk(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_bulk(st, meta, None, params, body).await
}

/// `POST /{index}/_bulk`.
pub async fn bulk_index(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_bulk(st, meta, Some(index), params, body).await
}

async fn write_one(
    st: Arc<AppState>,
    index: String,
    op: DocOp,
    params: Params,
) -> ApiResult<Response> {
    let refresh = parse_refresh(&params)?;
    validate_index_name(&index)?;
    let engine = st.engine.clone();
    let res = blocking(move || {
        let r = engine
            .bulk(vec![(index.clone(), op)])
            .pop()
            .unwrap_or_else(|| Err(EngineError::internal("lost write")));
        let r = r?;
        if refresh == Refresh::Yes
            && let Some(h) = engine.index(&index)
        {
            h.refresh()?;
        }
        Ok(r)
    })
    .await?;
    let mut body = res.to_json();
    if refresh == Refresh::Yes {
        body["forced_refresh"] = json!(true);
    }
    let status = StatusCode::from_u16(res.status).unwrap_or(StatusCode::OK);
    Ok(reply(status, body, &params))
}

fn doc_body(body: &Body) -> ApiResult<Value> {
    match body.json()? {
        Some(v @ Value::Object(_)) => Ok(v),
        Some(_) => Err(EngineError::mapper_parsing(
            "failed to parse, document is empty or not an object",
        )
        .into()),
        None => Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: source is missing;",
        )
        .into()),
    }
}

/// `POST /{index}/_doc`: index with a generated id.
pub async fn index_auto_id(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let source = doc_body(&body)?;
    write_one(
        st,
        index,
        DocOp::Index {
            id: None,
            source,
            op_type: OpType::Index,
        },
        params,
    )
    .await
}

/// `PUT|POST /{index}/_doc/{id}` (`?op_type=create` refuses to replace).
pub async fn index_with_id(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let source = doc_body(&body)?;
    let op_type = match params.get("op_type").map(String::as_str) {
        None | Some("index") => OpType::Index,
        Some("create") => OpType::Create,
        Some(other) => {
            return Err(EngineError::illegal_argument(format!(
                "opType must be 'create' or 'index', found: [{other}]"
            ))
            .into());
        }
    };
    write_one(
        st,
        index,
        DocOp::Index {
            id: Some(id),
            source,
            op_type,
        },
        params,
    )
    .await
}

/// `PUT|POST /{index}/_create/{id}`.
pub async fn create_with_id(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let source = doc_body(&body)?;
    write_one(
        st,
        index,
        DocOp::Index {
            id: Some(id),
            source,
            op_type: OpType::Create,
        },
        params,
    )
    .await
}

/// `POST /{index}/_update/{id}`.
pub async fn update_doc(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let b = body.json()?.ok_or_else(|| {
        EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: script or doc is missing;",
        )
    })?;
    let op = parse_update(id, &b)?;
    write_one(st, index, op, params).await
}

/// `DELETE /{index}/_doc/{id}`.
pub async fn delete_doc(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    st.engine.index_or_404(&index)?;
    write_one(st, index, DocOp::Delete { id }, params).await
}

/// `GET /{index}/_doc/{id}`: real-time get.
pub async fn get_doc(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    Ok(match fetch_doc(&st, &index, &id).await? {
        Some(doc) => {
            let filter = sluice_engine::SearchRequest::parse(None, &params)?.source;
            reply(
                StatusCode::OK,
                found_json(&index, &id, &doc, &filter),
                &params,
            )
        }
        None => reply(
            StatusCode::NOT_FOUND,
            json!({"_index": index, "_id": id, "found": false}),
            &params,
        ),
    })
}

/// Reads one document (real time) on the blocking pool.
async fn fetch_doc(
    st: &AppState,
    index: &str,
    id: &str,
) -> ApiResult<Option<sluice_engine::index::StoredDoc>> {
    let engine = st.engine.clone();
    let (index, id) = (index.to_string(), id.to_string());
    blocking(move || engine.get_doc(&index, &id)).await
}

/// A found document as `GET _doc` (and each `_mget` item) renders it, `_source` filtered.
fn found_json(
    index: &str,
    id: &str,
    doc: &sluice_engine::index::StoredDoc,
    filter: &sluice_engine::search::SourceFilter,
) -> Value {
    let mut body = json!({
        "_index": index, "_id": id, "_version": doc.version, "_seq_no": doc.seq_no,
        "_primary_term": sluice_engine::search::PRIMARY_TERM, "found": true,
    });
    if !filter.disabled {
        body["_source"] = sluice_engine::search::filter_source(&doc.source, filter);
    }
    body
}

/// `GET|POST /_mget` and `/{index}/_mget`: several documents by id in one request, each
/// answered as `GET /{index}/_doc/{id}` would be (`found: false` for a missing document), or
/// with an `error` of its own (an index that does not exist); one bad item never fails the
/// others. The body is `{"docs": [{"_index", "_id", "_source"}…]}`, or `{"ids": […]}` with
/// the index in the path; `_source`, `_source_includes` and `_source_excludes` parameters are
/// the default filter of every item.
pub async fn mget(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let default_index = index.map(|Path(i)| i);
    let default_filter = sluice_engine::SearchRequest::parse(None, &params)?.source;
    let items = parse_mget(body.json()?, default_index.as_deref(), &default_filter)?;
    // Each document is authorized on its own index: a forbidden one answers an error item.
    let denied: Vec<Option<EngineError>> = items
        .iter()
        .map(|i| crate::auth::authorize_item(&st, &meta, Action::Mget, &i.index).err())
        .collect();
    let engine = st.engine.clone();
    let docs = blocking(move || {
        Ok(items
            .into_iter()
            .zip(denied)
            .map(|(item, denied)| {
                let MgetItem { index, id, filter } = item;
                if let Some(e) = denied {
                    return json!({"_index": index, "_id": id, "error": render_error(&e)});
                }
                match engine.get_doc(&index, &id) {
                    Ok(Some(doc)) => found_json(&index, &id, &doc, &filter),
                    Ok(None) => json!({"_index": index, "_id": id, "found": false}),
                    Err(e) => json!({"_index": index, "_id": id, "error": render_error(&e)}),
                }
            })
            .collect::<Vec<Value>>())
    })
    .await?;
    Ok(reply(StatusCode::OK, json!({ "docs": docs }), &params))
}

/// One document an `_mget` asks for.
struct MgetItem {
    index: String,
    id: String,
    filter: sluice_engine::search::SourceFilter,
}

/// Reads an `_mget` body into its items, with OpenSearch's validation texts.
fn parse_mget(
    body: Option<Value>,
    default_index: Option<&str>,
    default_filter: &sluice_engine::search::SourceFilter,
) -> Result<Vec<MgetItem>, EngineError> {
    let no_docs = || {
        EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: no documents to get;",
        )
    };
    let Some(Value::Object(top)) = body else {
        return Err(match body {
            None => no_docs(),
            Some(_) => EngineError::parsing("request body must be an object with [docs] or [ids]"),
        });
    };
    let mut items = Vec::new();
    let mut missing = Vec::new();
    for (key, value) in &top {
        match (key.as_str(), value) {
            ("docs", Value::Array(docs)) => {
                for (n, doc) in docs.iter().enumerate() {
                    let Value::Object(doc) = doc else {
                        return Err(EngineError::parsing(format!(
                            "docs[{n}] must be an object with [_index] and [_id]"
                        )));
                    };
                    let mut index = default_index.map(str::to_string);
                    let mut id = None;
                    let mut filter = default_filter.clone();
                    for (k, v) in doc {
                        match (k.as_str(), v) {
                            ("_index", Value::String(s)) => index = Some(s.clone()),
                            ("_id", Value::String(s)) => id = Some(s.clone()),
                            ("_id", Value::Number(n)) => id = Some(n.to_string()),
                            ("_source", v) => filter = sluice_engine::search::parse_source(v)?,
                            ("routing" | "_routing", _) => {}
                            (k, _) => {
                                return Err(EngineError::parsing(format!(
                                    "Unknown key [{k}] in docs[{n}]: an _mget item takes [_index], [_id], [_source] and [routing]"
                                )));
                            }
                        }
                    }
                    match (index, id) {
                        (Some(index), Some(id)) => items.push(MgetItem { index, id, filter }),
                        (None, _) => missing.push(format!("index is missing for doc {n}")),
                        (_, None) => missing.push(format!("id is missing for doc {n}")),
                    }
                }
            }
            ("ids", Value::Array(ids)) => {
                for (n, id) in ids.iter().enumerate() {
                    let id = match id {
                        Value::String(s) => s.clone(),
                        Value::Number(x) => x.to_string(),
                        _ => {
                            return Err(EngineError::parsing(format!("ids[{n}] must be a string")));
                        }
                    };
                    match default_index {
                        Some(index) => items.push(MgetItem {
                            index: index.to_string(),
                            id,
                            filter: default_filter.clone(),
                        }),
                        None => missing.push(format!("index is missing for doc {n}")),
                    }
                }
            }
            ("docs" | "ids", _) => {
                return Err(EngineError::parsing(format!("[{key}] must be an array")));
            }
            _ => {
                return Err(EngineError::parsing(format!(
                    "unknown key [{key}] in the _mget body: it takes [docs] or [ids]"
                )));
            }
        }
    }
    if !missing.is_empty() {
        let list: String = missing
            .iter()
            .enumerate()
            .map(|(i, m)| format!("{}: {m};", i + 1))
            .collect::<Vec<_>>()
            .join("");
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            format!("Validation Failed: {list}"),
        ));
    }
    if items.is_empty() {
        return Err(no_docs());
    }
    Ok(items)
}

/// `GET|HEAD /{index}/_source/{id}`: the document's `_source` alone (filtered by `_source`,
/// `_source_includes`, `_source_excludes`); 404 `resource_not_found_exception` when the
/// document does not exist (HEAD answers the same status and headers without the body).
pub async fn get_source(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let Some(doc) = fetch_doc(&st, &index, &id).await? else {
        return Err(EngineError::new(
            ErrorCode::ResourceNotFound,
            format!("Document not found [{index}]/[{id}]"),
        )
        .into());
    };
    let filter = sluice_engine::SearchRequest::parse(None, &params)?.source;
    let source = if filter.disabled {
        Value::Object(Map::new())
    } else {
        sluice_engine::search::filter_source(&doc.source, &filter)
    };
    Ok(reply(StatusCode::OK, source, &params))
}
