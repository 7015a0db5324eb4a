//! Request bodies: read up to `http.max_content_length`, parsed as JSON with OpenSearch's
//! errors.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
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
        if announced_over(req.headers(), limit) {
            return Err(ApiError::TooLarge { limit });
        }
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

/// Whether a request's head announces a body over `limit` (`http.max_content_length`): a
/// `Content-Length` past it, as Netty's aggregator refuses one before the body comes (a
/// reader that waited for the bytes waited for ever on a 19-digit length). A body with a
/// `Content-Encoding` is counted once inflated, as it is read.
pub fn announced_over(headers: &HeaderMap, limit: u64) -> bool {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > limit)
        && !headers.contains_key(header::CONTENT_ENCODING)
}

/// The configured body limit, put in request extensions so errors can name it.
#[derive(Clone, Copy)]
pub struct BodyLimit(pub u64);

impl Body {
    /// The body parsed as JSON; `None` when empty.
    pub fn json(&self) -> ApiResult<Option<Value>> {
        parse_json(&self.0)
    }

    /// The body, or when it is empty the `source` query parameter, as OpenSearch reads the
    /// requests that take either (`RestRequest.contentOrSourceParam`: `_search`, `_count`):
    /// the parameter needs `source_content_type` beside it (a 500 `illegal_state_exception`
    /// without, as OpenSearch answers), and sluice reads JSON only.
    pub fn or_source_param(self, params: &crate::http::Params) -> ApiResult<Body> {
        let Some(source) = params.get("source") else {
            return Ok(self);
        };
        if !self.0.iter().all(u8::is_ascii_whitespace) {
            return Ok(self);
        }
        let Some(kind) = params.get("source_content_type") else {
            return Err(ApiError::Engine(EngineError::new(
                ErrorCode::IllegalState,
                "source and source_content_type parameters are required",
            )));
        };
        let essence = kind.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(ApiError::Engine(EngineError::illegal_argument(format!(
                "source_content_type [{kind}] is not supported: sluice reads the source \
                 parameter as application/json only"
            ))));
        }
        Ok(Body(Bytes::from(source.clone())))
    }
}

/// Parses a JSON request body; empty or whitespace is `None`; malformed JSON is a 400
/// `x_content_parse_exception` saying where.
pub fn parse_json(bytes: &[u8]) -> ApiResult<Option<Value>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    sluice_wire::json::from_slice_strict(bytes)
        .map(Some)
        .map_err(|e| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::params_of as params;

    #[test]
    fn test_the_source_parameter_stands_for_an_empty_body_only() {
        let q = r#"{"query":{"term":{"a":1}}}"#;
        let with_type = params(&[("source", q), ("source_content_type", "application/json")]);
        let read = Body(Bytes::new()).or_source_param(&with_type).unwrap();
        assert_eq!(read.0, q.as_bytes());
        // A body wins over the parameter; no parameter leaves the body as it is.
        let read = Body(Bytes::from_static(b"{}"))
            .or_source_param(&with_type)
            .unwrap();
        assert_eq!(read.0, &b"{}"[..]);
        let read = Body(Bytes::new()).or_source_param(&params(&[])).unwrap();
        assert!(read.0.is_empty());
        // OpenSearch's refusals.
        let Err(ApiError::Engine(e)) =
            Body(Bytes::new()).or_source_param(&params(&[("source", q)]))
        else {
            panic!("a source without its content type was read");
        };
        assert_eq!(e.code, ErrorCode::IllegalState);
        let yaml = params(&[("source", q), ("source_content_type", "application/yaml")]);
        assert!(Body(Bytes::new()).or_source_param(&yaml).is_err());
        let charset = params(&[
            ("source", q),
            ("source_content_type", "application/json; charset=UTF-8"),
        ]);
        assert!(Body(Bytes::new()).or_source_param(&charset).is_ok());
    }
}
