//! The scroll API: `_search/scroll` continues a scroll opened by `_search?scroll=…`, and
//! `DELETE _search/scroll` frees scroll contexts.
//!
//! Each continuation is a task with action `indices:data/read/scroll`, run on the search pool
//! through admission and the node's backend, and so cancellable like a search. The contexts
//! live in the backend; this module parses the requests and shapes the answers.

use std::sync::Arc;
use std::time::Duration;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use sluice_engine::scroll::parse_keep_alive;
use sluice_engine::{EngineError, ErrorCode, ScrollLimits};

use crate::admission::{Inherited, TaskSpec, admit, requested_cancel_after};
use crate::auth::{authorize_scroll, route};
use crate::error::ApiResult;
use crate::http::{Body, Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::actions;

/// A parsed scroll continuation.
pub(crate) struct ScrollRequest {
    pub(crate) scroll_id: String,
    /// The new keep-alive, as given and parsed.
    pub(crate) keep_alive: Option<(String, Duration)>,
}

/// `GET|POST /_search/scroll`.
pub async fn next_page(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_scroll(st, meta, params, body).await
}

/// `GET|POST /_search/scroll/{scroll_id}`.
pub async fn next_page_of(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(scroll_id): Path<String>,
    Query(mut params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    params.insert("scroll_id".to_string(), scroll_id);
    run_scroll(st, meta, params, body).await
}

/// `DELETE /_search/scroll`.
pub async fn clear(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    // The ids may come as a parameter too (`?scroll_id=a,b`), as OpenSearch reads them.
    let from_query = params.get("scroll_id").cloned();
    run_clear(st, meta, params, from_query, body).await
}

/// `DELETE /_search/scroll/{scroll_id}` (ids comma-separated, or `_all`).
pub async fn clear_ids(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(scroll_ids): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    run_clear(st, meta, params, Some(scroll_ids), body).await
}

/// Brings the engine's scroll limits in line with the cluster settings in force
/// (`search.max_open_scroll_context`, `search.max_keep_alive`, `search.default_keep_alive`);
/// called before a scroll is
/// opened or continued, so a settings update applies from the next scroll request on.
pub fn sync_limits(st: &AppState) {
    let s = st.cluster_settings.snapshot();
    let limits = ScrollLimits {
        max_open: usize::try_from(s.max_open_scroll_context()).unwrap_or(usize::MAX),
        max_keep_alive: s.max_keep_alive(),
        default_keep_alive: s.default_keep_alive(),
    };
    st.backend.sync_scroll_limits(limits);
}

async fn run_scroll(
    st: Arc<AppState>,
    meta: RequestMeta,
    params: Params,
    body: Body,
) -> ApiResult<Response> {
    let req = parse_scroll_request(&params, body.json()?.as_ref())?;
    let total_as_int = sluice_engine::search::rest_total_hits_as_int(&params)?;
    sync_limits(&st);
    let description = format!(
        "scrollId[{}], scroll[{}]",
        req.scroll_id,
        req.keep_alive.as_ref().map_or("null", |(s, _)| s.as_str())
    );
    // A continuation runs in the group its scroll was opened in (DEFAULT when that group is
    // gone), whatever header it carries: a scroll cannot be moved out of its group's limits.
    // An unknown scroll id fails in the backend with OpenSearch's error.
    let inherited = st
        .backend
        .scroll_owner(&req.scroll_id)
        .ok()
        .map(|owner| Inherited {
            group: owner
                .and_then(|id| st.workload.entry(&id))
                .unwrap_or_else(|| st.workload.default_entry().clone()),
            held: Vec::new(),
        });
    let opened_by = st.backend.scroll_opened_by(&req.scroll_id).ok().flatten();
    authorize_scroll(&st, &meta, route::SCROLL, opened_by.as_deref())?;
    let spec = TaskSpec {
        action: actions::SCROLL,
        description: description.into(),
        parent: None,
        indices: Vec::new(),
        cancel_after: requested_cancel_after(&params)?,
        inherited,
    };
    let mut admitted = admit(&st, &meta, spec).await?;
    let executed = st
        .backend
        .continue_scroll(
            admitted.execution(),
            req.scroll_id,
            req.keep_alive.map(|(_, d)| d),
        )
        .await;
    let mut resp = admitted.finish(executed)?;
    if total_as_int {
        sluice_engine::search::render_total_hits_as_int(&mut resp);
    }
    Ok(admitted.ride_with(reply(StatusCode::OK, resp, &params)))
}

async fn run_clear(
    st: Arc<AppState>,
    meta: RequestMeta,
    params: Params,
    path_ids: Option<String>,
    body: Body,
) -> ApiResult<Response> {
    let ids = parse_clear_request(path_ids.as_deref(), body.json()?.as_ref())?;
    // Only the user who opened a scroll clears it; `_all` needs the permission for others'.
    for id in &ids {
        let opened_by = if id == "_all" {
            Some(Arc::from(crate::auth::authz::ALL_SCROLLS))
        } else {
            st.backend.scroll_opened_by(id).ok().flatten()
        };
        authorize_scroll(&st, &meta, route::SCROLL_CLEAR, opened_by.as_deref())?;
    }
    let num_freed = st.backend.clear_scrolls(ids).await?;
    // OpenSearch's `ClearScrollResponse` answers 404 when nothing was freed.
    let status = if num_freed == 0 {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    Ok(reply(
        status,
        json!({"succeeded": true, "num_freed": num_freed}),
        &params,
    ))
}

/// Reads `scroll_id` and `scroll` from the parameters, then from the body over them, as
/// OpenSearch's `RestSearchScrollAction` does.
pub(crate) fn parse_scroll_request(
    params: &Params,
    body: Option<&Value>,
) -> Result<ScrollRequest, EngineError> {
    let mut scroll_id = params.get("scroll_id").cloned();
    let mut scroll = params.get("scroll").cloned();
    if let Some(body) = body {
        let obj = body.as_object().ok_or_else(|| {
            EngineError::illegal_argument("Malformed content, must start with an object")
        })?;
        for (key, v) in obj {
            match (key.as_str(), v) {
                ("scroll_id", Value::String(s)) => scroll_id = Some(s.clone()),
                ("scroll", Value::String(s)) => scroll = Some(s.clone()),
                _ => return Err(unknown_parameter(key, v)),
            }
        }
    }
    let scroll_id = scroll_id.filter(|s| !s.is_empty()).ok_or_else(|| {
        EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: scrollId is missing;",
        )
    })?;
    let keep_alive = match scroll {
        Some(s) => {
            let d = parse_keep_alive(&s)?;
            Some((s, d))
        }
        None => None,
    };
    Ok(ScrollRequest {
        scroll_id,
        keep_alive,
    })
}

/// The scroll ids of a clear request: the path's (or the `scroll_id` parameter's), then the
/// body's `scroll_id` (a string or an array of strings), as OpenSearch's
/// `RestClearScrollAction` reads them.
pub(crate) fn parse_clear_request(
    path_ids: Option<&str>,
    body: Option<&Value>,
) -> Result<Vec<String>, EngineError> {
    let mut ids: Vec<String> = path_ids
        .into_iter()
        .flat_map(|p| p.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(body) = body {
        let obj = body.as_object().ok_or_else(|| {
            EngineError::illegal_argument("Malformed content, must start with an object")
        })?;
        for (key, v) in obj {
            match (key.as_str(), v) {
                ("scroll_id", Value::Array(items)) => {
                    for item in items {
                        match item {
                            Value::String(s) => ids.push(s.clone()),
                            _ => {
                                return Err(EngineError::illegal_argument(
                                    "scroll_id array element should only contain scroll_id",
                                ));
                            }
                        }
                    }
                }
                ("scroll_id", Value::String(s)) => ids.push(s.clone()),
                ("scroll_id", _) => {
                    return Err(EngineError::illegal_argument(
                        "scroll_id element should only contain scroll_id",
                    ));
                }
                _ => return Err(unknown_parameter(key, v)),
            }
        }
    }
    if ids.is_empty() {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: no scroll ids specified;",
        ));
    }
    Ok(ids)
}

/// OpenSearch's error for a body field the scroll APIs do not know.
fn unknown_parameter(key: &str, v: &Value) -> EngineError {
    let token = sluice_wire::json::token_name(v);
    EngineError::illegal_argument(format!(
        "Unknown parameter [{key}] in request body or parameter is of the wrong type[{token}] "
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_body_overrides_parameters() {
        let mut params = Params::new();
        params.insert("scroll_id".into(), "from-param".into());
        params.insert("scroll".into(), "1m".into());
        let req = parse_scroll_request(
            &params,
            Some(&json!({"scroll_id": "from-body", "scroll": "30s"})),
        )
        .expect("valid");
        assert_eq!(req.scroll_id, "from-body");
        assert_eq!(
            req.keep_alive.map(|(_, d)| d),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn test_missing_scroll_id_is_a_validation_failure() {
        let err = parse_scroll_request(&Params::new(), Some(&json!({"scroll": "1m"})))
            .err()
            .expect("invalid");
        assert_eq!(err.code, ErrorCode::ActionRequestValidation);
        assert_eq!(err.reason, "Validation Failed: 1: scrollId is missing;");
    }

    #[test]
    fn test_unknown_body_field_is_named() {
        let err = parse_scroll_request(&Params::new(), Some(&json!({"scroll_id": "x", "size": 3})))
            .err()
            .expect("invalid");
        assert_eq!(
            err.reason,
            "Unknown parameter [size] in request body or parameter is of the wrong type[VALUE_NUMBER] "
        );
    }

    #[test]
    fn test_clear_ids_come_from_path_and_body() {
        let ids = parse_clear_request(Some("a,b"), Some(&json!({"scroll_id": ["c", "d"]})))
            .expect("valid");
        assert_eq!(ids, ["a", "b", "c", "d"]);
        let ids = parse_clear_request(None, Some(&json!({"scroll_id": "e"}))).expect("valid");
        assert_eq!(ids, ["e"]);
        let err = parse_clear_request(None, None).expect_err("no ids");
        assert_eq!(err.reason, "Validation Failed: 1: no scroll ids specified;");
        let err =
            parse_clear_request(None, Some(&json!({"scroll_id": [1]}))).expect_err("not a string");
        assert_eq!(err.code, ErrorCode::IllegalArgument);
    }
}
