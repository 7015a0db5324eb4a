//! `_msearch`: NDJSON header/body pairs run as child searches of one msearch task, at most
//! `max_concurrent_searches` at a time; each item answers on its own, so one failing item never
//! fails the others.

use std::sync::Arc;
use std::time::Instant;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};
use sluice_core::authz::Action;
use sluice_engine::{EngineError, ErrorCode, SearchRequest};

use super::search::search_description;
use crate::admission::{TaskSpec, admit};
use crate::error::{ApiError, ApiResult, status_of};
use crate::http::{Body, Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::{CancelOnDrop, actions};
use sluice_engine::resolve::IndicesOptions;
use sluice_wire::render_error_in;

/// Header keys OpenSearch accepts in an msearch metadata line.
const HEADER_KEYS: &[&str] = &[
    "index",
    "indices",
    "search_type",
    "preference",
    "routing",
    "request_cache",
    "allow_no_indices",
    "ignore_unavailable",
    "ignore_throttled",
    "expand_wildcards",
    "allow_partial_search_results",
    "ccs_minimize_roundtrips",
    "cancel_after_time_interval",
    "phase_took",
];

/// One parsed msearch item.
struct Item {
    index: String,
    req: SearchRequest,
    description: String,
    params: Params,
}

/// One `_msearch` item as sent: its header object and its search body.
pub(crate) struct RawItem {
    /// The header line, a JSON object.
    pub header: serde_json::Map<String, Value>,
    /// The body line.
    pub body: Value,
}

/// Splits an `_msearch` NDJSON body into header and body pairs, with OpenSearch's errors for a
/// line that is not JSON, a header that is not an object, a header without a body, and no
/// item at all, and sluice's for a header naming both `index` and `indices`. Shared by the embedded handler and a gateway's, which read the pairs
/// differently.
pub(crate) fn split_items(body: &[u8]) -> Result<Vec<RawItem>, EngineError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| EngineError::parsing("msearch body is not valid UTF-8"))?;
    let mut lines = text
        .split('\n')
        .map(str::trim)
        .enumerate()
        .filter(|(_, l)| !l.is_empty());
    let mut items = Vec::new();
    while let Some((n, header_line)) = lines.next() {
        let header: Value = sluice_wire::json::from_str_strict(header_line).map_err(|e| {
            EngineError::new(
                ErrorCode::XContentParse,
                format!("[{}:1] msearch header line is not JSON: {e}", n + 1),
            )
        })?;
        let Value::Object(header) = header else {
            return Err(EngineError::parsing("msearch header must be a JSON object"));
        };
        // OpenSearch reads both keys into the item's indices, the one its hash map iterates
        // last winning (which depends on how many keys the header has): an item naming both
        // is ambiguous, and a gateway that authorized one key would forward an upstream that
        // reads the other. Refused whole, as an unknown header key is.
        if header.contains_key("index") && header.contains_key("indices") {
            return Err(EngineError::illegal_argument(format!(
                "msearch header on line [{}] names both [index] and [indices]; name the item's indices with one of them",
                n + 1
            )));
        }
        let (_, body_line) = lines.next().ok_or_else(|| {
            EngineError::parsing(format!(
                "msearch header on line [{}] has no search body line after it",
                n + 1
            ))
        })?;
        let body: Value = sluice_wire::json::from_str_strict(body_line).map_err(|e| {
            EngineError::new(
                ErrorCode::XContentParse,
                format!("[{}:1] msearch body line is not JSON: {e}", n + 2),
            )
        })?;
        items.push(RawItem { header, body });
    }
    if items.is_empty() {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: no requests added;",
        ));
    }
    Ok(items)
}

/// Refuses a malformed value of a header key sluice reads and does not act on (one shard, no
/// remote clusters, no request cache), as OpenSearch's `MultiSearchRequest` refuses it while it
/// reads the body: the whole request is a 400.
fn check_header_value(key: &str, v: &Value) -> Result<(), EngineError> {
    let text = || v.as_str().map_or_else(|| v.to_string(), str::to_string);
    match key {
        "search_type"
            if !matches!(
                v.as_str(),
                Some("query_then_fetch" | "dfs_query_then_fetch")
            ) =>
        {
            Err(EngineError::illegal_argument(format!(
                "No search type for [{}]",
                text()
            )))
        }
        "request_cache"
        | "allow_partial_search_results"
        | "ccs_minimize_roundtrips"
        | "ignore_throttled"
        | "phase_took"
            if !matches!(v, Value::Bool(_)) && !matches!(v.as_str(), Some("true" | "false")) =>
        {
            Err(EngineError::illegal_argument(format!(
                "Failed to parse value [{}] as only [true] or [false] are allowed.",
                text()
            )))
        }
        _ => Ok(()),
    }
}

fn parse_items(
    body: &[u8],
    default_index: Option<&str>,
    params: &Params,
    max_buckets: u32,
) -> Result<Vec<Item>, EngineError> {
    let mut items = Vec::new();
    for RawItem { header, body } in split_items(body)? {
        let mut index = default_index.map(str::to_string);
        let mut item_params = params.clone();
        for (k, v) in &header {
            if !HEADER_KEYS.contains(&k.as_str()) {
                return Err(EngineError::illegal_argument(format!(
                    "key [{k}] is not supported in the metadata section"
                )));
            }
            check_header_value(k, v)?;
            match k.as_str() {
                "index" | "indices" => {
                    index = Some(match v {
                        Value::String(s) => s.clone(),
                        Value::Array(a) => a
                            .iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(","),
                        _ => {
                            return Err(EngineError::parsing(
                                "[index] in an msearch header must be a string or an array",
                            ));
                        }
                    })
                }
                "cancel_after_time_interval" => {
                    if let Some(s) = v.as_str() {
                        item_params.insert(k.clone(), s.to_string());
                    }
                }
                _ => {}
            }
        }
        // The item's body alone, but `rest_total_hits_as_int` and `typed_keys` hold for every
        // item.
        let mut item_url = Params::new();
        for key in [
            sluice_engine::search::REST_TOTAL_HITS_AS_INT,
            sluice_engine::search::TYPED_KEYS,
        ] {
            if let Some(v) = params.get(key) {
                item_url.insert(key.into(), v.clone());
            }
        }
        let mut req = SearchRequest::parse(Some(&body), &item_url)?;
        req.max_buckets = Some(max_buckets);
        // The URL's options are every item's defaults; a header's own override them.
        let url_options = IndicesOptions::from_params(params, IndicesOptions::default())?;
        req.indices_options = IndicesOptions::from_json(&header, url_options)?;
        let index = index.unwrap_or_else(|| "_all".to_string());
        let description = search_description(&index, Some(&body));
        items.push(Item {
            index,
            req,
            description,
            params: item_params,
        });
    }
    Ok(items)
}

/// `POST /_msearch`.
pub async fn msearch(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    // A URL `index` parameter was made the path's before routing (`http/url_index.rs`).
    run_msearch(st, meta, None, params, body).await
}

/// `POST /{index}/_msearch`: the path index is the default of items whose header names none.
pub async fn msearch_index(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_msearch(st, meta, Some(index), params, body).await
}

async fn run_msearch(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    params: Params,
    body: Body,
) -> ApiResult<Response> {
    let started = Instant::now();
    if body.0.is_empty() {
        return Err(EngineError::new(ErrorCode::Parse, "request body is required").into());
    }
    // The URL's options are every item's defaults: a malformed one refuses the request.
    sluice_engine::search::check_unused_options(&params)?;
    let max_concurrent = match params.get("max_concurrent_searches") {
        None => st.search_pool.num_threads().max(1),
        Some(v) => v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
            EngineError::illegal_argument(format!(
                "maxConcurrentSearches must be positive, got [{v}]"
            ))
        })?,
    };
    let total_as_int = sluice_engine::search::rest_total_hits_as_int(&params)?;
    // Read by each item; a bad value fails the whole request, as OpenSearch's does.
    sluice_engine::search::typed_keys(&params)?;
    let items = parse_items(
        &body.0,
        index.as_deref(),
        &params,
        st.cluster_settings.max_buckets(),
    )?;
    let parent = st.tasks.register(
        actions::MSEARCH,
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
    let responses: Vec<Value> = futures::stream::iter(items)
        .map(|item| {
            let (st, meta) = (st.clone(), meta.clone());
            async move {
                let r = run_item(&st, &meta, parent_seq, item)
                    .await
                    .map(|mut resp| {
                        if total_as_int {
                            sluice_engine::search::render_total_hits_as_int(&mut resp);
                        }
                        resp
                    });
                item_response(r)
            }
        })
        .buffered(max_concurrent)
        .collect()
        .await;
    on_drop.disarm();
    drop(parent);
    let body = json!({"took": started.elapsed().as_millis() as u64, "responses": responses});
    Ok(reply(StatusCode::OK, body, &params))
}

/// Admits and runs one item as a child of the msearch task `parent`: tagged on its own (the
/// header for all, the rules per item), throttled on its own, holding its slot only while it
/// runs.
async fn run_item(
    st: &Arc<AppState>,
    meta: &RequestMeta,
    parent: u64,
    item: Item,
) -> ApiResult<Value> {
    let Item {
        index,
        mut req,
        description,
        params,
    } = item;
    crate::auth::authorize_item(st, meta, Action::Search, &index)?;
    let mut spec = TaskSpec::new(actions::SEARCH, description, &index, &params)?;
    spec.parent = Some(parent);
    let mut admitted = admit(st, meta, spec).await?;
    admitted.apply_to_search(&mut req);
    // A profile names its shards by this node.
    req.node_id = Some(Arc::from(st.identity.node_id.as_str()));
    let executed = st
        .backend
        .search(admitted.execution(), index, req, None)
        .await;
    admitted.finish(executed)
}

fn item_response(r: ApiResult<Value>) -> Value {
    match r {
        Ok(mut v) => {
            v["status"] = json!(200);
            v
        }
        Err(e) => error_item(&e, sluice_wire::Dialect::OpenSearch),
    }
}

/// An error as an msearch item: its error, in `dialect`'s names (Elasticsearch's on a gateway
/// in front of it: `crate::backend::upstream::product` P4), and its status (also a gateway's
/// items).
pub(crate) fn error_item(e: &ApiError, dialect: sluice_wire::Dialect) -> Value {
    match e {
        ApiError::Engine(e) | ApiError::Rejected { error: e, .. } => {
            json!({"error": render_error_in(e, dialect), "status": status_of(e).as_u16()})
        }
        other => {
            let e = EngineError::internal(format!("msearch item failed: {other:?}"));
            json!({"error": render_error_in(&e, dialect), "status": 500})
        }
    }
}
