//! API errors and their OpenSearch JSON: `{"error":{"root_cause":[…],"type":…,"reason":…},
//! "status":N}`. Each engine [`ErrorCode`] maps to its status and type once, in
//! [`ErrorCode::status`] and [`ErrorCode::type_name`]; handlers never pick a status by hand.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sluice_engine::{EngineError, ErrorCode};

/// An error answered to an API client.
#[derive(Debug)]
pub enum ApiError {
    /// An engine or request error with an OpenSearch type.
    Engine(EngineError),
    /// OpenSearch's answer to a route it has no handler for: `{"error": "...", "status": N}`.
    NoHandler {
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
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        ApiError::Engine(e)
    }
}

fn error_object(e: &EngineError) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), json!(e.code.type_name()));
    m.insert("reason".into(), json!(e.reason));
    if let Some(index) = &e.index {
        m.insert("index".into(), json!(index));
    }
    for (k, v) in &e.extra {
        m.insert((*k).to_string(), v.clone());
    }
    m
}

/// Renders an engine error as OpenSearch's `error` object (without `status`).
pub fn render_error(e: &EngineError) -> Value {
    let mut top = error_object(e);
    let root = e.root_cause();
    top.insert(
        "root_cause".into(),
        json!([Value::Object(error_object(root))]),
    );
    // OpenSearch puts root_cause first.
    let mut ordered = Map::new();
    if let Some(rc) = top.remove("root_cause") {
        ordered.insert("root_cause".into(), rc);
    }
    ordered.extend(top);
    if let Some(cause) = &e.cause {
        if e.code == ErrorCode::SearchPhaseExecution {
            ordered.insert(
                "failed_shards".into(),
                json!([{"shard": 0, "index": cause.index, "node": "local", "reason": Value::Object(error_object(cause))}]),
            );
        }
        ordered.insert("caused_by".into(), Value::Object(error_object(cause)));
    }
    Value::Object(ordered)
}

/// The HTTP status of an engine error. A search phase failure takes its cause's status, as
/// OpenSearch's does.
pub fn status_of(e: &EngineError) -> StatusCode {
    let code = if e.code == ErrorCode::SearchPhaseExecution {
        e.root_cause().code
    } else {
        e.code
    };
    StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Engine(e) => {
                let status = status_of(&e);
                // A cancelled task is an expected outcome, not a node failure.
                if status.is_server_error() && e.root_cause().code != ErrorCode::TaskCancelled {
                    tracing::error!(error = %e, "request failed");
                }
                let body = json!({"error": render_error(&e), "status": status.as_u16()});
                crate::http::json_response(status, &body, false)
            }
            ApiError::NoHandler {
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
                crate::http::json_response(StatusCode::PAYLOAD_TOO_LARGE, &body, false)
            }
        }
    }
}

/// Maps a workload-management domain error to its OpenSearch status and type, once for
/// every handler (groups, rules).
pub fn core_error(e: sluice_core::CoreError) -> ApiError {
    let code = match e.code() {
        sluice_core::ErrorCode::Validation
        | sluice_core::ErrorCode::AlreadyExists
        | sluice_core::ErrorCode::Conflict => ErrorCode::IllegalArgument,
        sluice_core::ErrorCode::NotFound => ErrorCode::ResourceNotFound,
        sluice_core::ErrorCode::TooMany => ErrorCode::RejectedExecution,
    };
    ApiError::Engine(EngineError::new(code, e.to_string()))
}

/// The handlers' result type.
pub type ApiResult<T> = Result<T, ApiError>;
