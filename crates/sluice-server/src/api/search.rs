//! `_search` and `_count`.

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use sluice_engine::{EngineError, SearchRequest};

use crate::admission::{TaskSpec, admit};
use crate::error::{ApiError, ApiResult};
use crate::http::{Body, Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::actions;

/// `GET|POST /{index}/_search`.
pub async fn search(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_search(st, meta, index, params, body).await
}

/// `GET|POST /_search`.
pub async fn search_all(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    // A URL `index` parameter was made the path's before routing (`http/url_index.rs`).
    run_search(st, meta, "_all".to_string(), params, body).await
}

async fn run_search(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    params: Params,
    body: Body,
) -> ApiResult<Response> {
    let body = body.or_source_param(&params)?;
    let raw = body.0.clone();
    let located = |e: ApiError| match e {
        ApiError::Engine(e) => ApiError::Engine(e.with_location_in(&raw)),
        other => other,
    };
    let body = body.json()?;
    let mut req =
        SearchRequest::parse(body.as_ref(), &params).map_err(|e| located(ApiError::Engine(e)))?;
    req.max_buckets = Some(st.cluster_settings.max_buckets());
    // A profile names its shards by this node.
    req.node_id = Some(Arc::from(st.identity.node_id.as_str()));
    // `?scroll=` keeps the search open for `_search/scroll` to continue.
    let keep_alive = params
        .get("scroll")
        .map(|s| sluice_engine::scroll::parse_keep_alive(s))
        .transpose()?;
    if keep_alive.is_some() {
        super::scroll::sync_limits(&st);
    }
    let total_as_int = sluice_engine::search::rest_total_hits_as_int(&params)?;
    let description = search_description(&index, body.as_ref());
    let spec = TaskSpec::new(actions::SEARCH, description, &index, &params)?;
    let mut admitted = admit(&st, &meta, spec).await?;
    // The group's timeout and bucket limit, and its label: a scroll's continuations run in
    // the group it was opened in.
    admitted.apply_to_search(&mut req);
    let executed = st
        .backend
        .search(admitted.execution(), index, req, keep_alive)
        .await;
    let mut resp = admitted.finish(executed).map_err(located)?;
    if total_as_int {
        sluice_engine::search::render_total_hits_as_int(&mut resp);
    }
    Ok(admitted.ride_with(reply(StatusCode::OK, resp, &params)))
}

/// The task description OpenSearch gives a search: its indices, type and source.
pub fn search_description(index: &str, body: Option<&Value>) -> String {
    let source = body.map_or_else(|| "{}".to_string(), Value::to_string);
    crate::tasks::search_wording(index, &source)
}

/// `GET|POST /{index}/_count`.
pub async fn count(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_count(st, meta, index, params, body).await
}

/// `GET|POST /_count`.
pub async fn count_all(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_count(st, meta, "_all".to_string(), params, body).await
}

async fn run_count(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    params: Params,
    body: Body,
) -> ApiResult<Response> {
    let body = body.or_source_param(&params)?;
    let raw = body.0.clone();
    let mut query = json!({"match_all": {}});
    if let Some(b) = body.json()? {
        let obj = b
            .as_object()
            .ok_or_else(|| EngineError::parsing("request body must be a JSON object"))?;
        for (k, v) in obj {
            match k.as_str() {
                "query" => query = v.clone(),
                other => {
                    return Err(EngineError::parsing(format!(
                        "request does not support [{other}]"
                    ))
                    .into());
                }
            }
        }
    }
    if params.contains_key("q") {
        query = SearchRequest::parse(None, &params)?.query;
    }
    let options = sluice_engine::resolve::IndicesOptions::from_params(&params, Default::default())?;
    let description = format!("indices[{index}], source[{query}]");
    let spec = TaskSpec::new(actions::SEARCH, description, &index, &params)?;
    let mut admitted = admit(&st, &meta, spec).await?;
    let executed = st
        .backend
        .count(admitted.execution(), index, options, query)
        .await;
    let (n, shards) = admitted.finish(executed).map_err(|e| match e {
        ApiError::Engine(e) => ApiError::Engine(e.with_location_in(&raw)),
        other => other,
    })?;
    let body: Value = json!({"count": n, "_shards": {"total": shards, "successful": shards, "skipped": 0, "failed": 0}});
    Ok(admitted.ride_with(reply(StatusCode::OK, body, &params)))
}
