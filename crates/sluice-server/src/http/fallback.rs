//! OpenSearch's answers for a route with no handler (400) and a method the route does not
//! allow (405); on a gateway, the forwarding of every route sluice does not answer.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::http::RequestMeta;
use crate::state::AppState;

pub async fn no_handler(method: Method, uri: Uri) -> ApiError {
    ApiError::Simple {
        status: StatusCode::BAD_REQUEST,
        message: format!("no handler found for uri [{uri}] and method [{method}]"),
        allow: None,
    }
}

/// A gateway's answer to every route sluice does not answer itself: the request forwarded to
/// the upstream with its body streamed, the upstream's answer streamed back unchanged
/// ([`crate::backend::upstream::Upstream::forward`]); 502/504 when the upstream fails.
pub async fn forward(State(st): State<Arc<AppState>>, meta: RequestMeta, req: Request) -> Response {
    let Some(up) = st.upstream.as_ref() else {
        return no_handler(req.method().clone(), req.uri().clone())
            .await
            .into_response();
    };
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    match up.forward(req, meta.principal.as_deref(), client).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
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
