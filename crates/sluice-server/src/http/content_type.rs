//! The check OpenSearch's `RestController` makes of a request's body before its handler runs:
//! a body needs a `Content-Type` OpenSearch reads (its `XContentType`s and their aliases),
//! else the request is refused with 406 and OpenSearch's simple error,
//! `{"error":"Content-Type header [text/plain] is not supported","status":406}` (or
//! `"Content-Type header is missing"`). A request without a body is not checked.
//!
//! It is a route layer ([`require_supported`]): it runs only for a route that has a handler, as
//! OpenSearch checks only once it found one (no handler is a 400 whatever the body). axum runs
//! a route layer for a method the route does not take too, so such a request with a body in a
//! type OpenSearch does not read gets the 406 where OpenSearch answers the 405
//! (docs/compatibility.md). A gateway applies it to the routes it answers itself
//! ([`crate::api::owned_routes`]); what it forwards, the upstream judges. A gateway in front
//! of Elasticsearch (its `GET /` named the product, [`crate::backend::upstream::product`])
//! also reads Elasticsearch's versioned types, `application/vnd.elasticsearch+json;
//! compatible-with=8` and its kin, as Elasticsearch does: its 8.x clients send them on every
//! request, and before, every call of theirs to sluice's own routes (`_wlm`, `_rules`) with a
//! body got a 406 from the gateway.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::http::BodyLimit;
use crate::state::AppState;

/// The media types OpenSearch reads a body in, by their `type/subtype` (lowercase): its
/// `XContentType`s (JSON, SMILE, YAML, CBOR) and the aliases its `XContentProvider` adds
/// (`application/x-ndjson` and `application/*`, both read as JSON).
const SUPPORTED: [&str; 6] = [
    "application/json",
    "application/smile",
    "application/yaml",
    "application/cbor",
    "application/x-ndjson",
    "application/*",
];

/// Elasticsearch's versioned media types (its REST API compatibility), which it reads as the
/// unversioned ones: the types of [`SUPPORTED`] under its vendor tree.
const ELASTICSEARCH: [&str; 5] = [
    "application/vnd.elasticsearch+json",
    "application/vnd.elasticsearch+smile",
    "application/vnd.elasticsearch+yaml",
    "application/vnd.elasticsearch+cbor",
    "application/vnd.elasticsearch+x-ndjson",
];

/// Which media types a node reads a body in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// OpenSearch's ([`SUPPORTED`]).
    OpenSearch,
    /// Elasticsearch's: OpenSearch's and the versioned ones ([`ELASTICSEARCH`]), on a gateway
    /// in front of Elasticsearch.
    Elasticsearch,
}

impl Reads {
    /// What the node `st` reads.
    pub fn of(st: &AppState) -> Reads {
        match &st.upstream {
            Some(up) if up.product.is_elasticsearch() => Reads::Elasticsearch,
            _ => Reads::OpenSearch,
        }
    }
}

/// Refuses a request whose body has no `Content-Type` the node reads ([`Reads`]); lets any
/// other through.
///
/// # Cancel safety
/// Dropping the future drops the request, as for any handler.
pub async fn require_supported(
    State(st): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    if has_body(&req)
        && let Err(refused) = check(req.headers(), Reads::of(&st))
    {
        discard_body(req).await;
        return refused.into_response();
    }
    next.run(req).await
}

/// Reads a refused request's body to its end (up to `http.max_content_length`), keeping none
/// of it, as OpenSearch has read a request whole before it checks it. Answered before its body
/// was read, a request leaves hyper unable to keep the connection for the next one (it closes
/// it), and a gateway's fast lane, which lent the request to hyper, would read the unread body
/// as the next request.
pub(crate) async fn discard_body(req: Request) {
    use http_body_util::BodyExt;
    let mut left = req
        .extensions()
        .get::<BodyLimit>()
        .map_or(u64::MAX, |l| l.0);
    let mut body = req.into_body();
    while let Some(Ok(frame)) = body.frame().await {
        let read = frame.data_ref().map_or(0, |d| d.len() as u64);
        match left.checked_sub(read) {
            Some(rest) => left = rest,
            None => return,
        }
    }
}

/// Whether the request has a body: one of a known length above zero, or of a length not known
/// before it is read (chunked, compressed).
fn has_body(req: &Request) -> bool {
    axum::body::HttpBody::size_hint(req.body()).exact() != Some(0)
}

/// Whether one `Content-Type` value names a type the node reads (`reads`): its
/// `type/subtype`, before any parameter (`; charset=UTF-8`, `; compatible-with=8`), compared
/// without case, as OpenSearch's `RestRequest.parseContentType` reads it.
pub fn is_supported(value: &[u8], reads: Reads) -> bool {
    let essence = value.split(|b| *b == b';').next().unwrap_or_default();
    let essence = essence.trim_ascii();
    let named = |types: &[&str]| {
        types
            .iter()
            .any(|t| essence.eq_ignore_ascii_case(t.as_bytes()))
    };
    named(&SUPPORTED) || (reads == Reads::Elasticsearch && named(&ELASTICSEARCH))
}

/// The 406 for a body of `headers`' `Content-Type`, or `Ok` when the node reads it (`reads`).
/// Several `Content-Type` headers are named together, comma-separated.
pub fn check(headers: &HeaderMap, reads: Reads) -> Result<(), ApiError> {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let message = match (values.next(), values.next()) {
        (Some(one), None) if is_supported(one.as_bytes(), reads) => return Ok(()),
        (None, _) => "Content-Type header is missing".to_string(),
        _ => {
            let named: Vec<String> = headers
                .get_all(header::CONTENT_TYPE)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect();
            format!("Content-Type header [{}] is not supported", named.join(","))
        }
    };
    Err(ApiError::Simple {
        status: StatusCode::NOT_ACCEPTABLE,
        message,
        allow: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn test_supported_types_are_opensearchs() {
        for ok in [
            "application/json",
            "application/json; charset=UTF-8",
            "Application/JSON;charset=utf-8",
            "application/x-ndjson",
            "application/yaml",
            "application/cbor",
            "application/smile",
            "application/*",
            " application/json ",
        ] {
            assert!(is_supported(ok.as_bytes(), Reads::OpenSearch), "{ok}");
            assert!(is_supported(ok.as_bytes(), Reads::Elasticsearch), "{ok}");
        }
        for refused in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
            "json",
            "",
            "*/*",
            "application/vnd.opensearch+json",
        ] {
            assert!(
                !is_supported(refused.as_bytes(), Reads::OpenSearch),
                "{refused}"
            );
            assert!(
                !is_supported(refused.as_bytes(), Reads::Elasticsearch),
                "{refused}"
            );
        }
    }

    #[test]
    fn test_elasticsearchs_versioned_types_are_read_in_front_of_it_only() {
        for versioned in [
            "application/vnd.elasticsearch+json; compatible-with=8",
            "application/vnd.elasticsearch+json;compatible-with=7",
            "Application/VND.Elasticsearch+JSON",
            "application/vnd.elasticsearch+x-ndjson; compatible-with=8",
            "application/vnd.elasticsearch+yaml; compatible-with=8",
            "application/vnd.elasticsearch+cbor; compatible-with=8",
            "application/vnd.elasticsearch+smile; compatible-with=8",
        ] {
            assert!(
                is_supported(versioned.as_bytes(), Reads::Elasticsearch),
                "{versioned}"
            );
            assert!(
                !is_supported(versioned.as_bytes(), Reads::OpenSearch),
                "{versioned}"
            );
        }
        assert!(!is_supported(
            b"application/vnd.elasticsearch+xml",
            Reads::Elasticsearch
        ));
    }

    fn refusal(values: &[&str]) -> Option<String> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(header::CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
        }
        match check(&headers, Reads::OpenSearch) {
            Ok(()) => None,
            Err(ApiError::Simple {
                status, message, ..
            }) => {
                assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
                Some(message)
            }
            Err(other) => panic!("not a simple error: {other:?}"),
        }
    }

    #[test]
    fn test_refusals_name_the_header_as_opensearch() {
        assert_eq!(refusal(&["application/json"]), None);
        assert_eq!(
            refusal(&[]).as_deref(),
            Some("Content-Type header is missing")
        );
        assert_eq!(
            refusal(&["text/plain"]).as_deref(),
            Some("Content-Type header [text/plain] is not supported")
        );
        assert_eq!(
            refusal(&["application/json", "text/plain"]).as_deref(),
            Some("Content-Type header [application/json,text/plain] is not supported")
        );
    }
}
