//! API errors as axum responses. The taxonomy and the OpenSearch JSON
//! (`{"error":{"root_cause":[…],"type":…,"reason":…},"status":N}`) are `sluice-wire`'s: each
//! [`ErrorCode`] maps to its status and type once, in [`ErrorCode::status`] and
//! [`ErrorCode::type_name`], and [`render_error`] writes the body; this module adds only the
//! HTTP glue (status codes, `Retry-After`, `Allow`, logging). Handlers never pick a status by
//! hand.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sluice_engine::{EngineError, ErrorCode};

/// An error answered to an API client.
#[derive(Debug)]
pub enum ApiError {
    /// An engine or request error with an OpenSearch type.
    Engine(EngineError),
    /// OpenSearch's simple error answer (`BytesRestResponse.createSimpleErrorResponse`):
    /// `{"error": "...", "status": N}`, for a route it has no handler for, a method the route
    /// does not allow, a body whose `Content-Type` it does not read.
    Simple {
        status: StatusCode,
        message: String,
        allow: Option<String>,
    },
    /// A body over `http.max_content_length`.
    TooLarge { limit: u64 },
    /// A request a workload-management limit turned away (429 `rejected_execution_exception`):
    /// answered like [`ApiError::Engine`] plus a `Retry-After` header (DESIGN D7).
    Rejected {
        /// The error, naming the group, the bucket, the limit and the tier.
        error: EngineError,
        /// Seconds the client should wait before retrying.
        retry_after_secs: u64,
    },
    /// Another node's error answer to a call routed to it (a task's node), passed on with
    /// its status and body unchanged.
    Forwarded {
        /// The other node's status.
        status: u16,
        /// Its OpenSearch error body.
        body: serde_json::Value,
    },
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        ApiError::Engine(e)
    }
}

/// Renders an error as OpenSearch's `error` object (without `status`); the wire crate's.
pub use sluice_wire::render_error;

/// The HTTP status of an error. A search phase failure takes its cause's status, as
/// OpenSearch's does ([`sluice_wire::OpenSearchError::status`]).
pub fn status_of(e: &EngineError) -> StatusCode {
    StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Engine(e) => {
                let status = status_of(&e);
                // A cancelled task is an expected outcome, not a node failure; an unreachable
                // metastore is logged once per outage by its watcher, not per request; an
                // aggregation over `search.max_buckets` is the request's own doing (OpenSearch
                // answers it 503 too, and it is no failure of the node).
                let logged_elsewhere = matches!(
                    e.root_cause().code,
                    ErrorCode::TaskCancelled
                        | ErrorCode::ClusterManagerNotDiscovered
                        | ErrorCode::TooManyBuckets
                );
                // Rate-limited per error type: an upstream outage failed every forwarded request.
                if status.is_server_error() && !logged_elsewhere {
                    crate::logging::failures::request_failed(e.root_cause().code.type_name(), &e);
                }
                let body = json!({"error": render_error(&e), "status": status.as_u16()});
                let mut resp = crate::http::json_response(status, &body, false);
                // A gateway in front of Elasticsearch renders it again in its names.
                resp.extensions_mut()
                    .insert(crate::backend::upstream::product::OwnError(e));
                resp
            }
            ApiError::Simple {
                status,
                message,
                allow,
            } => {
                let body = json!({"error": message, "status": status.as_u16()});
                let mut resp = crate::http::json_response(status, &body, false);
                if let Some(allow) = allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
                    resp.headers_mut().insert(header::ALLOW, allow);
                }
                resp
            }
            ApiError::Forwarded { status, body } => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                crate::http::json_response(status, &body, false)
            }
            ApiError::Rejected {
                error,
                retry_after_secs,
            } => {
                let mut resp = ApiError::Engine(error).into_response();
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
                resp
            }
            ApiError::TooLarge { limit } => {
                let e = EngineError::new(
                    ErrorCode::IllegalArgument,
                    format!(
                        "request body is larger than http.max_content_length [{limit}] bytes; send smaller requests or raise http.max_content_length"
                    ),
                );
                let mut err = render_error(&e);
                err["type"] = json!("content_too_long_http_exception");
                err["root_cause"][0]["type"] = json!("content_too_long_http_exception");
                let body = json!({"error": err, "status": 413});
                let mut resp =
                    crate::http::json_response(StatusCode::PAYLOAD_TOO_LARGE, &body, false);
                // The rest of the body is not read: hyper closes the connection once the
                // answer is out (on HTTP/2, which ends the stream alone, it drops the header).
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                resp
            }
        }
    }
}

/// An error as a stored task result carries it (`GET _tasks/{id}` of a background task that
/// failed): OpenSearch's error object without `root_cause`.
pub fn error_object(e: &ApiError) -> serde_json::Value {
    let engine = match e {
        // Another node's error body, as it rendered it.
        ApiError::Forwarded { body, .. } => {
            let mut v = body.get("error").cloned().unwrap_or_else(|| body.clone());
            if let Some(o) = v.as_object_mut() {
                o.remove("root_cause");
            }
            return v;
        }
        ApiError::Engine(e) | ApiError::Rejected { error: e, .. } => e.clone(),
        ApiError::Simple { message, .. } => EngineError::illegal_argument(message.clone()),
        ApiError::TooLarge { limit } => EngineError::illegal_argument(format!(
            "request body is larger than http.max_content_length [{limit}] bytes"
        )),
    };
    let mut v = render_error(&engine);
    if let Some(o) = v.as_object_mut() {
        o.remove("root_cause");
    }
    v
}

/// Maps a workload-management domain error to its OpenSearch status and type (the core's
/// `From<CoreError>` mapping, once for every handler: groups, rules).
pub fn core_error(e: sluice_core::CoreError) -> ApiError {
    ApiError::Engine(e.into())
}

/// The handlers' result type.
pub type ApiResult<T> = Result<T, ApiError>;
