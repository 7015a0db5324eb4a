//! The path and query extractors every handler takes, in place of axum's: their refusals are
//! OpenSearch's error JSON, never axum's `text/plain` rejections, and a path parameter is
//! decoded as OpenSearch decodes it ([`decode_component`]). `clippy.toml` disallows axum's
//! `Path` and `Query` so a new handler cannot take them by mistake.

use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, OptionalFromRequestParts};
use axum::http::request::Parts;
use sluice_engine::EngineError;

use crate::error::ApiError;

/// A route's path parameters, each decoded by [`decode_component`], as `T`: one parameter as
/// a `String`, two as a pair, or every parameter as a `Vec` of values or of (name, value)
/// pairs ([`FromPathParams`]).
///
/// A parameter with a malformed escape (`%` not followed by two hex digits) is a 400
/// `illegal_argument_exception` with OpenSearch's words for it; escapes of bytes that are not
/// UTF-8 (`%FF`) become U+FFFD, as OpenSearch reads them, so the request goes on as it would
/// there (`GET /%FF/_search` is a 404 `index_not_found_exception` naming the index).
#[derive(Debug)]
pub struct Path<T>(pub T);

/// What a [`Path`] can be made of: the route's decoded parameters, in the order of the route
/// pattern, with their names.
pub trait FromPathParams: Sized {
    /// `None` when the route's parameters do not fit (a handler on the wrong route).
    fn from_params(params: Vec<(Arc<str>, String)>) -> Option<Self>;
}

impl FromPathParams for String {
    fn from_params(params: Vec<(Arc<str>, String)>) -> Option<Self> {
        let [(_, value)]: [_; 1] = params.try_into().ok()?;
        Some(value)
    }
}

impl FromPathParams for (String, String) {
    fn from_params(params: Vec<(Arc<str>, String)>) -> Option<Self> {
        let [(_, a), (_, b)]: [_; 2] = params.try_into().ok()?;
        Some((a, b))
    }
}

impl FromPathParams for Vec<String> {
    fn from_params(params: Vec<(Arc<str>, String)>) -> Option<Self> {
        Some(params.into_iter().map(|(_, v)| v).collect())
    }
}

impl FromPathParams for Vec<(String, String)> {
    fn from_params(params: Vec<(Arc<str>, String)>) -> Option<Self> {
        Some(
            params
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }
}

/// The route's parameters from the raw (still percent-encoded) path: each `{name}` segment of
/// the matched pattern names the raw segment at its place (sluice's routes have whole-segment
/// parameters and no wildcard, and axum matches the raw path, so the two align). Empty when
/// the request matched no route.
fn raw_params(parts: &Parts) -> Vec<(&str, &str)> {
    let Some(pattern) = parts.extensions.get::<MatchedPath>() else {
        return Vec::new();
    };
    pattern
        .as_str()
        .split('/')
        .zip(parts.uri.path().split('/'))
        .filter_map(|(p, raw)| {
            let name = p.strip_prefix('{')?.strip_suffix('}')?;
            Some((name, raw))
        })
        .collect()
}

fn decoded_params(parts: &Parts) -> Result<Vec<(Arc<str>, String)>, ApiError> {
    raw_params(parts)
        .into_iter()
        .map(|(name, raw)| {
            decode_component(raw)
                .map(|v| (Arc::from(name), v))
                .map_err(|reason| ApiError::Engine(EngineError::illegal_argument(reason)))
        })
        .collect()
}

/// The answer to a handler whose route does not have the parameters it takes: a bug of
/// sluice's, not of the request (axum answers it 500 too).
fn wrong_route(parts: &Parts) -> ApiError {
    ApiError::Engine(EngineError::internal(format!(
        "the handler of [{}] does not take the route's path parameters",
        parts.uri.path()
    )))
}

impl<T: FromPathParams + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let params = decoded_params(parts)?;
        T::from_params(params)
            .map(Path)
            .ok_or_else(|| wrong_route(parts))
    }
}

/// `Option<Path<T>>`: `None` on a route without parameters (one handler serving `/_search`
/// and `/{index}/_search`), as axum's.
impl<T: FromPathParams + Send, S: Send + Sync> OptionalFromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        let params = decoded_params(parts)?;
        if params.is_empty() {
            return Ok(None);
        }
        T::from_params(params)
            .map(|t| Some(Path(t)))
            .ok_or_else(|| wrong_route(parts))
    }
}

/// Decodes a path component as OpenSearch's `RestUtils.decodeComponent` does: `%XX` escapes
/// to bytes, `%%` to `%`, `+` left as it is, the bytes read as UTF-8 with U+FFFD for what is
/// not. A malformed escape is refused with OpenSearch's message for it.
pub fn decode_component(s: &str) -> Result<String, String> {
    if !s.contains('%') {
        return Ok(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        if i + 1 == bytes.len() {
            return Err(format!(
                "unterminated escape sequence at end of string: {s}"
            ));
        }
        if bytes[i + 1] == b'%' {
            out.push(b'%');
            i += 2;
            continue;
        }
        if i + 2 == bytes.len() {
            return Err(format!("partial escape sequence at end of string: {s}"));
        }
        let hex = |b: u8| (b as char).to_digit(16);
        match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
            (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
            _ => {
                // OpenSearch names the two characters after `%` and the escape's index
                // (characters, as Java counts them).
                let index = s[..i].chars().count();
                let escape: String = s[i + 1..].chars().take(2).collect();
                return Err(format!(
                    "invalid escape sequence `%{escape}' at index {index} of: {s}"
                ));
            }
        }
        i += 3;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The query string's parameters, as axum's `Query` reads them (`+` as a space, escapes of
/// bytes that are not UTF-8 as U+FFFD, as OpenSearch reads a query string), with a refusal
/// that is OpenSearch's error JSON (400 `illegal_argument_exception`) rather than axum's
/// `text/plain`. Into sluice's [`crate::http::Params`] nothing is refused: every query string
/// reads as a map.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        #[allow(clippy::disallowed_types)]
        let read = axum::extract::Query::<T>::from_request_parts(parts, state).await;
        read.map(|q| Query(q.0)).map_err(|rejection| {
            ApiError::Engine(EngineError::illegal_argument(format!(
                "cannot read the query string: {}",
                rejection.body_text()
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tower::ServiceExt;

    #[test]
    fn test_decode_component_is_opensearchs() {
        assert_eq!(decode_component("logs").unwrap(), "logs");
        assert_eq!(decode_component("a%2Fb+c").unwrap(), "a/b+c");
        assert_eq!(decode_component("%C3%A9t%C3%A9").unwrap(), "été");
        assert_eq!(decode_component("100%%").unwrap(), "100%");
        // Bytes that are not UTF-8 are read as U+FFFD, not refused.
        assert_eq!(decode_component("%FF").unwrap(), "\u{FFFD}");
        assert_eq!(
            decode_component("a%").unwrap_err(),
            "unterminated escape sequence at end of string: a%"
        );
        assert_eq!(
            decode_component("a%F").unwrap_err(),
            "partial escape sequence at end of string: a%F"
        );
        assert_eq!(
            decode_component("ab%GGc").unwrap_err(),
            "invalid escape sequence `%GG' at index 2 of: ab%GGc"
        );
        assert_eq!(
            decode_component("é%zé").unwrap_err(),
            "invalid escape sequence `%zé' at index 1 of: é%zé"
        );
    }

    /// What each extractor reads from `uri` on a route of `pattern`.
    async fn extracted(pattern: &str, uri: &str) -> (u16, String) {
        let app = axum::Router::new()
            .route(
                "/_search",
                get(|p: Option<Path<String>>| async move { format!("{:?}", p.map(|p| p.0)) }),
            )
            .route(
                pattern,
                get(|p: Path<Vec<(String, String)>>| async move { format!("{:?}", p.0) }),
            );
        let resp = app
            .oneshot(
                axum::http::Request::get(uri)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn test_path_params_are_decoded_by_name_and_refused_as_json() {
        let (status, body) = extracted("/{index}/_doc/{id}", "/l%6Fgs/_doc/a%2Fb").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, r#"[("index", "logs"), ("id", "a/b")]"#);
        let (status, body) = extracted("/{index}/_doc/{id}", "/logs/_doc/%FF").await;
        assert_eq!(
            (status, body.as_str()),
            (200, "[(\"index\", \"logs\"), (\"id\", \"\u{FFFD}\")]")
        );
        let (status, body) = extracted("/{index}/_doc/{id}", "/logs/_doc/x%G1").await;
        assert_eq!(status, 400, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("an error as JSON");
        assert_eq!(v["error"]["type"], "illegal_argument_exception", "{v}");
        assert_eq!(
            v["error"]["reason"],
            "invalid escape sequence `%G1' at index 1 of: x%G1"
        );
        assert_eq!(extracted("/{a}/{b}", "/_search").await.1, "None");
    }

    #[tokio::test]
    async fn test_query_reads_any_query_string_into_params() {
        let app = axum::Router::new().route(
            "/",
            get(|q: Query<crate::http::Params>| async move {
                let mut pairs: Vec<_> = q.0.into_iter().collect();
                pairs.sort();
                format!("{pairs:?}")
            }),
        );
        for (query, read) in [
            ("a=%FF&b", "[(\"a\", \"\u{FFFD}\"), (\"b\", \"\")]"),
            ("a=1&a=2&c=x+y", r#"[("a", "2"), ("c", "x y")]"#),
            ("%=%G&=&&", r#"[("", ""), ("%", "%G")]"#),
        ] {
            let resp = app
                .clone()
                .oneshot(
                    axum::http::Request::get(format!("/?{query}"))
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{query}");
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&body), read, "{query}");
        }
    }
}
