//! OpenSearch's answers for a route with no handler (400) and a method the route does not
//! allow (405), `HEAD` included where OpenSearch registers none ([`refuse_head`]); on a
//! gateway, the forwarding of every route sluice does not answer.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::http::RequestMeta;
use crate::state::AppState;

/// No route takes the request: 400, its body read first and dropped ([`method_not_allowed`]);
/// a `HEAD` on an API sluice does not have ([`names_an_api`]) is a bare 404, what
/// OpenSearch's exists-APIs (`HEAD _index_template/x`, `HEAD _template/x` …) answer for
/// something missing, so a client's "create it unless it exists" check reads `false`.
pub async fn no_handler(req: Request) -> Response {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    crate::http::content_type::discard_body(req).await;
    if method == Method::HEAD && names_an_api(uri.path()) {
        return StatusCode::NOT_FOUND.into_response();
    }
    ApiError::Simple {
        status: StatusCode::BAD_REQUEST,
        message: format!("no handler found for uri [{uri}] and method [{method}]"),
        allow: None,
    }
    .into_response()
}

/// Whether a path's first segment names an API rather than an index expression
/// ([`crate::auth::route::is_index_expression`], the rule authorization reads them by).
pub fn names_an_api(path: &str) -> bool {
    let first = path.split('/').find(|s| !s.is_empty()).unwrap_or_default();
    !crate::auth::route::is_index_expression(first)
}

/// Whether the request reached the route `/{index}` with an API's name for the index
/// (`POST /_reindex`, `GET /_data_stream`, `DELETE /_snapshot` …): an API sluice does not have,
/// which an index API must not take. A `PUT` stays create-index, which refuses the name with
/// OpenSearch's `invalid_index_name_exception`; the index APIs below an index (`/_x/_search`)
/// keep resolving it as OpenSearch does.
fn api_read_as_index(req: &Request) -> bool {
    req.method() != Method::PUT
        && req
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .is_some_and(|route| route.as_str() == "/{index}")
        && names_an_api(req.uri().path())
}

/// Answers a request that reached `/{index}` with an API's name in place of the index
/// ([`api_read_as_index`]) as one no route takes ([`no_handler`]): `GET /_snapshot` is no
/// search for an index named `_snapshot`.
///
/// # Cancel safety
/// Dropping the future drops the request, as for any handler.
pub async fn refuse_api_as_index(req: Request, next: axum::middleware::Next) -> Response {
    if api_read_as_index(&req) {
        return no_handler(req).await;
    }
    next.run(req).await
}

/// A gateway's answer to every route sluice does not answer itself: the request forwarded to
/// the upstream with its body streamed, the upstream's answer streamed back unchanged
/// ([`crate::backend::upstream::Upstream::forward`]); 502/504 when the upstream fails. A target
/// with no path (the authority form, `GET host:9200`) is answered as an embedded node answers
/// it, and as OpenSearch, whose path is the target as sent, does: no handler (it was once
/// forwarded as `GET /`, a request the client never named).
pub async fn forward(State(st): State<Arc<AppState>>, meta: RequestMeta, req: Request) -> Response {
    let Some(up) = st.upstream.as_ref() else {
        return no_handler(req).await;
    };
    if req.uri().path_and_query().is_none() {
        return no_handler(req).await;
    }
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    match up.forward(req, meta.principal.as_deref(), client).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// The route does not take the request's method: 405 (the router adds the `Allow` header, and
/// [`name_allowed_methods`] words it), its body read first and dropped, as OpenSearch's
/// aggregator has read a whole request before it dispatches it. Answered before its body was
/// read, a request of more than a few kilobytes left hyper closing the connection after the
/// answer without saying so, and a request the client had pipelined behind it was lost (an
/// outside trial's 70 KB `POST` to a `_cat` route).
///
/// `/{index}` reached by an API's name ([`api_read_as_index`]: `POST /_reindex`) is no route
/// of that API, so it answers [`no_handler`] instead.
pub async fn method_not_allowed(req: Request) -> Response {
    if api_read_as_index(&req) {
        return no_handler(req).await;
    }
    crate::http::content_type::discard_body(req).await;
    StatusCode::METHOD_NOT_ALLOWED.into_response()
}

/// Refuses a `HEAD` on a route OpenSearch answers only other methods of (a search, a count, a
/// stats or settings read …): 405, the `Allow` header naming the route's methods in
/// OpenSearch ([`crate::api::known_params::methods_of`]), worded by [`name_allowed_methods`].
/// axum serves a `HEAD` with the route's `GET` handler, which would run the work of a
/// `GET` — a whole search — for an answer without a body, and on a gateway's upstream outside
/// the gateway's admission (OpenSearch has no such fallback: its `MethodHandlers` answer the
/// methods registered). `HEAD` stays where OpenSearch registers it (`/`, an index, a
/// document, its source, an alias) and on routes the table does not list.
///
/// # Cancel safety
/// Dropping the future drops the request, as for any handler.
pub async fn refuse_head(req: Request, next: axum::middleware::Next) -> Response {
    if req.method() != Method::HEAD {
        return next.run(req).await;
    }
    let allowed = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|route| crate::api::known_params::methods_of(route.as_str()))
        .unwrap_or_default();
    if allowed.is_empty() || allowed.contains(&Method::HEAD) {
        return next.run(req).await;
    }
    crate::http::content_type::discard_body(req).await;
    let allow: Vec<&str> = allowed.iter().map(Method::as_str).collect();
    let mut resp = StatusCode::METHOD_NOT_ALLOWED.into_response();
    if let Ok(v) = header::HeaderValue::from_str(&allow.join(",")) {
        resp.headers_mut().insert(header::ALLOW, v);
    }
    resp
}

/// Completes a 405 the way OpenSearch words it, naming the allowed methods from the `Allow`
/// header the router sets (HEAD, which axum adds beside GET, is not listed).
pub fn name_allowed_methods(method: &Method, uri: &Uri, resp: Response) -> Response {
    if resp.status() != StatusCode::METHOD_NOT_ALLOWED {
        return resp;
    }
    let allowed: Vec<String> = resp
        .headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty() && m != "HEAD")
                .collect()
        })
        .unwrap_or_default();
    ApiError::Simple {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!(
            "Incorrect HTTP method for uri [{uri}] and method [{method}], allowed: [{}]",
            allowed.join(", ")
        ),
        allow: Some(allowed.join(",")),
    }
    .into_response()
}
