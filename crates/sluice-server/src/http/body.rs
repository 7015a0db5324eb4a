//! Request bodies: read up to `http.max_content_length`, parsed as JSON with OpenSearch's
//! errors.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::Value;
use sluice_engine::{EngineError, ErrorCode};

use crate::error::{ApiError, ApiResult};

/// A request body, read up to `http.max_content_length`.
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(u64::MAX, |l| l.0);
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(Body(b)),
            Err(rej) if rej.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::TooLarge { limit })
            }
            Err(rej) => Err(ApiError::Engine(EngineError::parsing(format!(
                "failed to read request body: {rej}"
            )))),
        }
    }
}

/// The configured body limit, put in request extensions so errors can name it.
#[derive(Clone, Copy)]
pub struct BodyLimit(pub u64);

impl Body {
    /// The body parsed as JSON; `None` when empty.
    pub fn json(&self) -> ApiResult<Option<Value>> {
        parse_json(&self.0)
    }
}

/// Parses a JSON request body; empty or whitespace is `None`; malformed JSON is a 400
/// `x_content_parse_exception` saying where.
pub fn parse_json(bytes: &[u8]) -> ApiResult<Option<Value>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(bytes).map(Some).map_err(|e| {
        ApiError::Engine(EngineError::new(
            ErrorCode::XContentParse,
            format!(
                "[{}:{}] failed to parse request body as JSON: {e}",
                e.line(),
                e.column()
            ),
        ))
    })
}
