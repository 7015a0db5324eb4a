//! `?pretty` for the error answers sluice builds itself. Successful answers are rendered pretty
//! by their handlers ([`crate::http::reply()`]); an error is built where the request is out of
//! reach ([`crate::error::ApiError`]), so it is made pretty afterwards, in one place: the
//! node's outermost layer ([`crate::server::app`]) for the general path, and the fast lane's
//! writer for the lane's own answers ([`crate::http::lane`]). Answers relayed from an upstream
//! (a gateway's, marked [`Relayed`]) are left as the upstream wrote them.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

/// Marks a response relayed from a gateway's upstream (status, headers and body as it sent
/// them): [`pretty_error`] leaves it alone.
#[derive(Debug, Clone, Copy)]
pub struct Relayed;

/// Whether the raw query string asks for pretty JSON as OpenSearch reads `pretty`: present
/// with no value or `true` (the last one when repeated; `pretty=false` is not). A scan of the
/// query's bytes, with no allocation: every request of the fast lane may be asked.
pub fn wants_pretty(query: Option<&str>) -> bool {
    let Some(query) = query else {
        return false;
    };
    // Most queries do not mention it: one substring search and done.
    if !query.contains("pretty") {
        return false;
    }
    query
        .split('&')
        .filter_map(|pair| match pair.split_once('=') {
            None => (pair == "pretty").then_some(""),
            Some((key, value)) => (key == "pretty").then_some(value),
        })
        .next_back()
        .is_some_and(|value| value.is_empty() || value == "true")
}

/// `body` (JSON) re-rendered pretty, as [`crate::http::json_response`] renders a pretty
/// answer; `None` when it is not JSON.
pub fn pretty_json(body: &[u8]) -> Option<Vec<u8>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    serde_json::to_vec_pretty(&value).ok()
}

/// Whether `resp` is an answer sluice built as JSON: not [`Relayed`], `Content-Type` JSON.
pub(crate) fn is_own_json(resp: &Response) -> bool {
    resp.extensions().get::<Relayed>().is_none()
        && resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/json"))
}

/// `resp` with its body (built whole in memory) replaced by `render`'s rendering of it, its
/// length dropped and its `Content-Type` set to `content_type` when given; as it is when
/// `render` renders nothing (a body that is not JSON).
pub(crate) async fn rerender(
    resp: Response,
    content_type: Option<HeaderValue>,
    render: impl FnOnce(&[u8]) -> Option<Vec<u8>>,
) -> Response {
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        // A body built in memory does not fail to read; if one did, it is gone.
        return Response::from_parts(parts, Body::empty());
    };
    let body = match render(&bytes) {
        Some(rendered) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            if let Some(t) = content_type {
                parts.headers.insert(header::CONTENT_TYPE, t);
            }
            Body::from(rendered)
        }
        None => Body::from(bytes),
    };
    Response::from_parts(parts, body)
}

/// `resp` with its body rendered pretty when it is an error sluice built as JSON (a 4xx or
/// 5xx, [`is_own_json`]); any other answer as it is. The body of such an error is small.
pub async fn pretty_error(resp: Response) -> Response {
    if resp.status() < StatusCode::BAD_REQUEST || !is_own_json(&resp) {
        return resp;
    }
    rerender(resp, None, pretty_json).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_wants_pretty_reads_the_parameter_as_opensearch() {
        for (query, pretty) in [
            (None, false),
            (Some(""), false),
            (Some("pretty"), true),
            (Some("pretty="), true),
            (Some("pretty=true"), true),
            (Some("size=1&pretty"), true),
            (Some("pretty=false"), false),
            (Some("pretty=1"), false),
            (Some("prettyish=true"), false),
            (Some("q=pretty"), false),
            (Some("pretty=false&pretty"), true),
            (Some("pretty&pretty=false"), false),
        ] {
            assert_eq!(wants_pretty(query), pretty, "{query:?}");
        }
    }

    #[tokio::test]
    async fn test_pretty_error_renders_own_errors_only() {
        let error = serde_json::json!({"error": {"type": "x", "reason": "y"}, "status": 400});
        let own = crate::http::json_response(StatusCode::BAD_REQUEST, &error, false);
        let body = axum::body::to_bytes(pretty_error(own).await.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(body, serde_json::to_vec_pretty(&error).unwrap());
        // Relayed, or a success: as it came.
        let mut relayed = crate::http::json_response(StatusCode::BAD_REQUEST, &error, false);
        relayed.extensions_mut().insert(Relayed);
        let ok = crate::http::json_response(StatusCode::OK, &error, false);
        for resp in [relayed, ok] {
            let body = axum::body::to_bytes(pretty_error(resp).await.into_body(), usize::MAX)
                .await
                .unwrap();
            assert_eq!(body, serde_json::to_vec(&error).unwrap());
        }
    }
}
