//! Document APIs: `_bulk`, `_doc`, `_create`, `_update`.

use std::sync::Arc;
use std::time::Instant;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_core::authz::Action;
use sluice_engine::index::{DocOp, DocWriteResult, OpType};
use sluice_engine::search::SourceFilter;
use sluice_engine::versioning::{VersionType, Versioning};
use sluice_engine::{EngineError, ErrorCode};

use super::cluster_settings::bool_param;
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

/// Reads a whole-number parameter as OpenSearch's `paramAsLong`.
fn param_long(params: &Params, key: &str) -> Result<Option<i64>, EngineError> {
    params
        .get(key)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                EngineError::illegal_argument(format!(
                    "Failed to parse long parameter [{key}] with value [{v}]"
                ))
            })
        })
        .transpose()
}

/// Builds the concurrency conditions from their raw values, with OpenSearch's range checks.
fn versioning_of(
    if_seq_no: Option<i64>,
    if_primary_term: Option<i64>,
    version: Option<i64>,
    version_type: Option<&str>,
) -> Result<Versioning, EngineError> {
    let if_seq_no = match if_seq_no {
        // -2 is OpenSearch's "unassigned".
        None | Some(-2) => None,
        Some(n) if n < 0 => {
            return Err(EngineError::illegal_argument(format!(
                "sequence numbers must be non negative. got [{n}]."
            )));
        }
        Some(n) => Some(n as u64),
    };
    let if_primary_term = match if_primary_term {
        None => None,
        Some(n) if n < 0 => {
            return Err(EngineError::illegal_argument(format!(
                "primary term must be non negative. got [{n}]"
            )));
        }
        Some(n) => Some(n as u64),
    };
    Ok(Versioning {
        if_seq_no,
        if_primary_term,
        // -3 is OpenSearch's MATCH_ANY, the unset version.
        version: version.filter(|v| *v != -3),
        version_type: version_type
            .map(VersionType::parse)
            .transpose()?
            .unwrap_or_default(),
    })
}

/// The `if_seq_no`, `if_primary_term`, `version` and `version_type` parameters.
fn versioning_params(params: &Params) -> Result<Versioning, EngineError> {
    versioning_of(
        param_long(params, "if_seq_no")?,
        param_long(params, "if_primary_term")?,
        param_long(params, "version")?,
        params.get("version_type").map(String::as_str),
    )
}

/// One parsed bulk item: where it goes, and the operation or the reason it cannot run.
struct BulkItem {
    action: &'static str,
    index: String,
    id: Option<String>,
    op: Result<DocOp, EngineError>,
    /// `_source` of an update: what its result's `get` shows.
    source_filter: Option<SourceFilter>,
    /// `require_alias`: the target must be an alias.
    require_alias: bool,
}

/// A whole number in a bulk action line: a JSON number or a numeric string.
fn meta_long(line_no: usize, key: &str, v: &Value) -> Result<i64, EngineError> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        malformed(
            line_no,
            &format!("[{key}] must be a whole number, got [{v}]"),
        )
    })
}

/// OpenSearch's error for a bad action line of a `_bulk` body.
pub(crate) fn malformed(line: usize, why: &str) -> EngineError {
    EngineError::illegal_argument(format!("Malformed action/metadata line [{line}], {why}"))
}

/// The action a `_bulk` operation needs on its index (`create` writes as `index` does).
pub(crate) fn bulk_action(op: &str) -> Action {
    match op {
        "delete" => Action::WriteDelete,
        "update" => Action::WriteUpdate,
        _ => Action::WriteIndex,
    }
}

/// Parses an NDJSON bulk body. Structural problems fail the whole request, as OpenSearch's;
/// a bad document fails only its item.
fn parse_bulk(
    body: &[u8],
    default_index: Option<&str>,
    default_routing: Option<&str>,
    default_require_alias: bool,
) -> Result<Vec<BulkItem>, EngineError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| EngineError::parsing("bulk body is not valid UTF-8"))?;
    let mut lines = text
        .split('\n')
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let mut items = Vec::new();
    while let Some((n, line)) = lines.next() {
        let line_no = n + 1;
        let action: Value = sluice_wire::json::from_str_strict(line)
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
        let (mut if_seq_no, mut if_primary_term, mut version) = (None, None, None);
        let mut version_type = None;
        let mut op_type = None;
        let mut source_filter = None;
        let mut require_alias = default_require_alias;
        let mut routing = default_routing.map(str::to_string);
        for (k, v) in meta {
            match k.as_str() {
                "_index" => index = v.as_str().map(str::to_string),
                "if_seq_no" => if_seq_no = Some(meta_long(line_no, k, v)?),
                "if_primary_term" => if_primary_term = Some(meta_long(line_no, k, v)?),
                "version" => version = Some(meta_long(line_no, k, v)?),
                "version_type" => {
                    version_type = Some(
                        v.as_str()
                            .ok_or_else(|| malformed(line_no, "[version_type] must be a string"))?
                            .to_string(),
                    )
                }
                "op_type" => match v.as_str() {
                    Some("create") => op_type = Some(OpType::Create),
                    Some("index") => op_type = Some(OpType::Index),
                    _ => {
                        return Err(EngineError::illegal_argument(format!(
                            "opType must be 'create' or 'index', found: [{}]",
                            v.as_str().map_or(v.to_string(), str::to_string)
                        )));
                    }
                },
                "_source" => source_filter = Some(sluice_engine::search::parse_source(v)?),
                "_id" => {
                    id = match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => return Err(malformed(line_no, "[_id] must be a string")),
                    }
                }
                "require_alias" => {
                    require_alias = v
                        .as_bool()
                        .ok_or_else(|| malformed(line_no, "[require_alias] must be a boolean"))?
                }
                // OpenSearch reads the routing as text and skips a null.
                "routing" => match v {
                    Value::String(s) => routing = Some(s.clone()),
                    Value::Number(n) => routing = Some(n.to_string()),
                    Value::Null => {}
                    _ => {
                        return Err(malformed(
                            line_no,
                            &format!("expected a simple value for field [{k}] but found [{v}]"),
                        ));
                    }
                },
                "pipeline" | "retry_on_conflict" => {}
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
        let keyed = action_name == "delete" || action_name == "update";
        if keyed && id.as_deref().is_none_or(str::is_empty) {
            // OpenSearch validates the whole bulk request before running any item.
            return Err(EngineError::new(
                ErrorCode::ActionRequestValidation,
                "Validation Failed: 1: id is missing;",
            ));
        }
        let versioning =
            versioning_of(if_seq_no, if_primary_term, version, version_type.as_deref())?;
        let op_type = match (action_name, op_type) {
            ("create", _) => OpType::Create,
            (_, Some(t)) => t,
            _ => OpType::Index,
        };
        match action_name {
            "update" => versioning.validate_update()?,
            "delete" => versioning.validate_write(false, true)?,
            _ => versioning.validate_write(op_type == OpType::Create, id.is_some())?,
        }
        let op = if action_name == "delete" {
            Ok(DocOp::Delete {
                id: id.clone().unwrap_or_default(),
                versioning,
                routing,
            })
        } else {
            let (_, source_line) = lines.next().ok_or_else(|| {
                EngineError::illegal_argument(format!(
                    "The bulk request must be terminated by a newline [\\n]; the [{action_name}] action on line [{line_no}] has no document line"
                ))
            })?;
            let parsed: Result<Value, EngineError> =
                sluice_wire::json::from_str_strict(source_line).map_err(|e| {
                    EngineError::mapper_parsing(format!("failed to parse: {e}")).with_index(&index)
                });
            match parsed {
                Err(e) => Err(e),
                Ok(source) => match action_name {
                    // Update bodies are parsed with the request: a bad one fails it whole.
                    "update" => {
                        let (op, body_filter) = parse_update(
                            id.clone().unwrap_or_default(),
                            routing,
                            &source,
                            versioning,
                        )?;
                        source_filter = source_filter.or(body_filter);
                        Ok(with_return_source(op, source_filter.is_some()))
                    }
                    _ if !source.is_object() => Err(EngineError::mapper_parsing(
                        "failed to parse, document is empty or not an object",
                    )),
                    _ if id.as_deref() == Some("") => Err(EngineError::illegal_argument(
                        "if _id is specified it must not be empty",
                    )),
                    _ => Ok(DocOp::Index {
                        id: id.clone(),
                        source,
                        op_type,
                        versioning,
                        routing,
                    }),
                },
            }
        };
        items.push(BulkItem {
            action: action_name,
            index,
            id,
            op,
            source_filter,
            require_alias,
        });
    }
    Ok(items)
}

/// Sets whether an update's result carries the document.
fn with_return_source(op: DocOp, wanted: bool) -> DocOp {
    match op {
        DocOp::Update {
            id,
            doc,
            doc_as_upsert,
            upsert,
            versioning,
            detect_noop,
            routing,
            ..
        } => DocOp::Update {
            id,
            doc,
            doc_as_upsert,
            upsert,
            versioning,
            detect_noop,
            return_source: wanted,
            routing,
        },
        other => other,
    }
}

/// Reads an update body; returns the operation and the body's `_source` filter, if any.
fn parse_update(
    id: String,
    routing: Option<String>,
    body: &Value,
    versioning: Versioning,
) -> Result<(DocOp, Option<SourceFilter>), EngineError> {
    let obj = body
        .as_object()
        .ok_or_else(|| EngineError::parsing("update request body must be an object"))?;
    let mut doc = None;
    let mut doc_as_upsert = false;
    let mut upsert = None;
    let mut detect_noop = true;
    let mut source_filter = None;
    let bool_of = |k: &str, v: &Value| {
        v.as_bool().ok_or_else(|| {
            EngineError::parsing(format!(
                "[UpdateRequest] failed to parse field [{k}]: expected a boolean, got [{v}]"
            ))
        })
    };
    for (k, v) in obj {
        match k.as_str() {
            "doc" => doc = Some(v.clone()),
            "doc_as_upsert" => doc_as_upsert = bool_of(k, v)?,
            "detect_noop" => detect_noop = bool_of(k, v)?,
            "_source" => source_filter = Some(sluice_engine::search::parse_source(v)?),
            "upsert" => upsert = Some(v.clone()),
            "script" => {
                return Err(EngineError::illegal_argument(
                    "scripted updates are not supported by sluice; send a partial document in [doc]",
                ));
            }
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
    let return_source = source_filter.is_some();
    Ok((
        DocOp::Update {
            id,
            doc,
            doc_as_upsert,
            upsert,
            versioning,
            detect_noop,
            return_source,
            routing,
        },
        source_filter,
    ))
}

/// An update's `get` section: the document as written, filtered by the request's `_source`.
fn update_get_json(res: &DocWriteResult, filter: &SourceFilter) -> Option<Value> {
    let source = res.source.as_ref()?;
    let mut get = json!({
        "_seq_no": res.seq_no,
        "_primary_term": sluice_engine::search::PRIMARY_TERM,
        "found": true,
    });
    if !filter.disabled {
        get["_source"] = sluice_engine::search::filter_source(source, filter);
    }
    Some(get)
}

fn item_json(
    action: &str,
    index: &str,
    id: Option<&str>,
    r: &Result<DocWriteResult, EngineError>,
    source_filter: Option<&SourceFilter>,
) -> (Value, bool) {
    match r {
        Ok(res) => {
            let mut v = res.to_json();
            v["status"] = json!(res.status);
            if let Some(get) = source_filter.and_then(|f| update_get_json(res, f)) {
                v["get"] = get;
            }
            if res.result == "noop" {
                v["_shards"] = json!({"total": 0, "successful": 0, "failed": 0});
            }
            (json!({ action: v }), false)
        }
        Err(e) => (bulk_error_item(action, index, id, e), true),
    }
}

/// A failed `_bulk` item as OpenSearch answers it: `{action: {_index, _id, status, error}}`
/// (the error without its `root_cause`, naming the index).
pub(crate) fn bulk_error_item(
    action: &str,
    index: &str,
    id: Option<&str>,
    e: &EngineError,
) -> Value {
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
    json!({ action: Value::Object(m) })
}

/// A failed `_mget` document as OpenSearch answers it: `{_index, _id, error}`.
pub(crate) fn mget_error_item(index: &str, id: &str, e: &EngineError) -> Value {
    json!({"_index": index, "_id": id, "error": render_error(e)})
}

async fn run_bulk(
    st: Arc<AppState>,
    meta: RequestMeta,
    default_index: Option<String>,
    params: Params,
    body: Body,
) -> ApiResult<Response> {
    let started = Instant::now();
    check_write_params(&params)?;
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
    let require_alias = bool_param(&params, "require_alias")?;
    let mut items = parse_bulk(
        &body.0,
        default_index.as_deref(),
        routing_param(&params),
        require_alias,
    )?;
    // Each operation is authorized on its own index: a forbidden one is a 403 item.
    for item in items.iter_mut().filter(|i| i.op.is_ok()) {
        let action = bulk_action(item.action);
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
                    runnable.push((item.index.clone(), item.require_alias, op));
                }
                Err(e) => slots.push(Some(Err(e))),
            }
            meta.push((item.action, item.index, item.id, item.source_filter));
        }
        let mut done = engine.bulk_to(runnable).into_iter();
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
    for ((action, index, id, filter), r) in items.iter().zip(&results) {
        let id = r.as_ref().ok().map(|r| r.id.as_str()).or(id.as_deref());
        let (v, failed) = item_json(action, index, id, r, filter.as_ref());
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
    // A URL `index` parameter was made the path's before routing (`http/url_index.rs`).
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

/// Refuses, before anything is written, the values of a write's parameters that OpenSearch
/// refuses and sluice reads no further: `timeout` must be a time value, `wait_for_active_shards`
/// `all` or a count (one node holds every copy there is, so any count is met), and `pipeline`
/// may only be `_none` — sluice has no ingest pipelines, and a document written without the
/// pipeline its client named would be silently untransformed.
fn check_write_params(params: &Params) -> Result<(), EngineError> {
    if let Some(v) = params.get("timeout") {
        sluice_wire::parse_time_value(v, "timeout")?;
    }
    if let Some(v) = params.get("wait_for_active_shards")
        && v != "all"
    {
        match v.parse::<i32>() {
            Ok(n) if n < 0 => {
                return Err(EngineError::illegal_argument(
                    "shard count cannot be a negative value",
                ));
            }
            Ok(_) => {}
            Err(_) => {
                return Err(EngineError::illegal_argument(format!(
                    "cannot parse ActiveShardCount[{v}]"
                )));
            }
        }
    }
    if let Some(v) = params.get("pipeline")
        && v != "_none"
    {
        return Err(EngineError::illegal_argument(format!(
            "pipeline with id [{v}] does not exist"
        )));
    }
    Ok(())
}

async fn write_one(
    st: Arc<AppState>,
    index: String,
    op: DocOp,
    params: Params,
    source_filter: Option<SourceFilter>,
) -> ApiResult<Response> {
    check_write_params(&params)?;
    let refresh = parse_refresh(&params)?;
    let require_alias = bool_param(&params, "require_alias")?;
    let engine = st.engine.clone();
    let res = blocking(move || {
        let r = engine
            .bulk_to(vec![(index, require_alias, op)])
            .pop()
            .unwrap_or_else(|| Err(EngineError::internal("lost write")));
        let r = r?;
        if refresh == Refresh::Yes
            && let Some(h) = engine.index(&r.index)
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
    if let Some(get) = source_filter.and_then(|f| update_get_json(&res, &f)) {
        body["get"] = get;
    }
    if res.result == "noop" {
        body["_shards"] = json!({"total": 0, "successful": 0, "failed": 0});
    }
    let status = StatusCode::from_u16(res.status).unwrap_or(StatusCode::OK);
    Ok(reply(status, body, &params))
}

/// The `routing` parameter of a document request: stored with a written document and echoed
/// as `_routing`; required by an index whose mapping says `"_routing": {"required": true}`.
fn routing_param(params: &Params) -> Option<&str> {
    params.get("routing").map(String::as_str)
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
    let op_type = parse_op_type(&params)?;
    let versioning = versioning_params(&params)?;
    versioning.validate_write(op_type == OpType::Create, false)?;
    let op = DocOp::Index {
        id: None,
        source,
        op_type,
        versioning,
        routing: routing_param(&params).map(str::to_string),
    };
    write_one(st, index, op, params, None).await
}

/// The `op_type` parameter: `index` (the default) or `create`.
fn parse_op_type(params: &Params) -> Result<OpType, EngineError> {
    match params.get("op_type").map(String::as_str) {
        None | Some("index") => Ok(OpType::Index),
        Some("create") => Ok(OpType::Create),
        Some(other) => Err(EngineError::illegal_argument(format!(
            "opType must be 'create' or 'index', found: [{other}]"
        ))),
    }
}

/// `PUT|POST /{index}/_doc/{id}` (`?op_type=create` refuses to replace).
pub async fn index_with_id(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let source = doc_body(&body)?;
    let op_type = parse_op_type(&params)?;
    let versioning = versioning_params(&params)?;
    versioning.validate_write(op_type == OpType::Create, true)?;
    let op = DocOp::Index {
        id: Some(id),
        source,
        op_type,
        versioning,
        routing: routing_param(&params).map(str::to_string),
    };
    write_one(st, index, op, params, None).await
}

/// `PUT|POST /{index}/_create/{id}`.
pub async fn create_with_id(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let source = doc_body(&body)?;
    let versioning = versioning_params(&params)?;
    versioning.validate_write(true, true)?;
    let op = DocOp::Index {
        id: Some(id),
        source,
        op_type: OpType::Create,
        versioning,
        routing: routing_param(&params).map(str::to_string),
    };
    write_one(st, index, op, params, None).await
}

/// `POST /{index}/_update/{id}`: merges `doc` into the document (`if_seq_no` +
/// `if_primary_term` make it a compare-and-set; `detect_noop: false` writes even an unchanged
/// document; `_source` in the body or the parameters returns the result under `get`).
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
    let versioning = versioning_params(&params)?;
    versioning.validate_update()?;
    param_long(&params, "retry_on_conflict")?;
    let routing = routing_param(&params).map(str::to_string);
    let (op, body_filter) = parse_update(id, routing, &b, versioning)?;
    let param_filter = SOURCE_PARAMS
        .iter()
        .any(|k| params.contains_key(*k))
        .then(|| source_param_filter(&params))
        .transpose()?;
    let filter = param_filter.or(body_filter);
    let op = with_return_source(op, filter.is_some());
    write_one(st, index, op, params, filter).await
}

/// `DELETE /{index}/_doc/{id}`.
pub async fn delete_doc(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let versioning = versioning_params(&params)?;
    versioning.validate_write(false, true)?;
    let routing = routing_param(&params).map(str::to_string);
    let op = DocOp::Delete {
        id,
        versioning,
        routing,
    };
    write_one(st, index, op, params, None).await
}

/// `GET /{index}/_doc/{id}`: real-time get; `?version` (with `version_type`) answers 409
/// when the document's version differs.
pub async fn get_doc(
    State(st): State<Arc<AppState>>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let versioning = versioning_params(&params)?;
    let (index, doc) = fetch_doc(&st, &index, &id, routing_param(&params)).await?;
    Ok(match doc {
        Some(doc) => {
            versioning.check_read(&index, &id, doc.version)?;
            let filter = source_param_filter(&params)?;
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

/// The parameters that filter a returned `_source`.
const SOURCE_PARAMS: [&str; 3] = ["_source", "_source_includes", "_source_excludes"];

/// The `_source`, `_source_includes` and `_source_excludes` parameters as one filter (other
/// parameters, such as a get's `version`, are not the search parser's to read).
fn source_param_filter(params: &Params) -> Result<SourceFilter, EngineError> {
    let only: Params = params
        .iter()
        .filter(|(k, _)| SOURCE_PARAMS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(sluice_engine::SearchRequest::parse(None, &only)?.source)
}

/// Reads one document (real time) on the blocking pool; answers the concrete index (`index`
/// may be an alias of one index) and the document.
async fn fetch_doc(
    st: &AppState,
    index: &str,
    id: &str,
    routing: Option<&str>,
) -> ApiResult<(String, Option<sluice_engine::index::StoredDoc>)> {
    let engine = st.engine.clone();
    let (index, id) = (index.to_string(), id.to_string());
    let routing = routing.map(str::to_string);
    blocking(move || engine.get_doc(&index, &id, routing.as_deref())).await
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
        "_primary_term": sluice_engine::search::PRIMARY_TERM,
    });
    // OpenSearch shows the routing a document was written with before `found`.
    if let Some(routing) = &doc.routing {
        body["_routing"] = json!(routing.as_ref());
    }
    body["found"] = json!(true);
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
    // A URL `index` parameter was made the path's before routing (`http/url_index.rs`).
    let default_index = index.map(|Path(i)| i);
    let default_filter = source_param_filter(&params)?;
    let items = parse_mget(
        body.json()?,
        default_index.as_deref(),
        routing_param(&params),
        &default_filter,
    )?;
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
                let MgetItem {
                    index,
                    id,
                    routing,
                    filter,
                } = item;
                if let Some(e) = denied {
                    return mget_error_item(&index, &id, &e);
                }
                match engine.get_doc(&index, &id, routing.as_deref()) {
                    Ok((index, Some(doc))) => found_json(&index, &id, &doc, &filter),
                    Ok((index, None)) => json!({"_index": index, "_id": id, "found": false}),
                    Err(e) => mget_error_item(&index, &id, &e),
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
    /// The item's `routing`, or the request's `routing` parameter.
    routing: Option<String>,
    filter: sluice_engine::search::SourceFilter,
}

/// Reads an `_mget` body into its items, with OpenSearch's validation texts.
fn parse_mget(
    body: Option<Value>,
    default_index: Option<&str>,
    default_routing: Option<&str>,
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
                    let mut routing = default_routing.map(str::to_string);
                    let mut filter = default_filter.clone();
                    for (k, v) in doc {
                        match (k.as_str(), v) {
                            ("_index", Value::String(s)) => index = Some(s.clone()),
                            ("_id", Value::String(s)) => id = Some(s.clone()),
                            ("_id", Value::Number(n)) => id = Some(n.to_string()),
                            ("_source", v) => filter = sluice_engine::search::parse_source(v)?,
                            ("routing" | "_routing", Value::String(s)) => routing = Some(s.clone()),
                            ("routing" | "_routing", Value::Number(n)) => {
                                routing = Some(n.to_string())
                            }
                            ("routing" | "_routing", Value::Null) => {}
                            ("routing" | "_routing", v) => {
                                return Err(EngineError::parsing(format!(
                                    "[{k}] in docs[{n}] must be a string, got [{v}]"
                                )));
                            }
                            (k, _) => {
                                return Err(EngineError::parsing(format!(
                                    "Unknown key [{k}] in docs[{n}]: an _mget item takes [_index], [_id], [_source] and [routing]"
                                )));
                            }
                        }
                    }
                    match (index, id) {
                        (Some(index), Some(id)) => items.push(MgetItem {
                            index,
                            id,
                            routing,
                            filter,
                        }),
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
                            routing: default_routing.map(str::to_string),
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
    let (index, doc) = fetch_doc(&st, &index, &id, routing_param(&params)).await?;
    let Some(doc) = doc else {
        return Err(EngineError::new(
            ErrorCode::ResourceNotFound,
            format!("Document not found [{index}]/[{id}]"),
        )
        .into());
    };
    let filter = source_param_filter(&params)?;
    let source = if filter.disabled {
        Value::Object(Map::new())
    } else {
        sluice_engine::search::filter_source(&doc.source, &filter)
    };
    Ok(reply(StatusCode::OK, source, &params))
}
