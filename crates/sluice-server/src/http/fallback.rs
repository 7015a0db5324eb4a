//! OpenSearch's answers for a route with no handler (400) and a method the route does not
//! allow (405).

use axum::extract::Request;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

pub async fn no_handler(method: Method, uri: Uri) -> ApiError {
    ApiError::NoHandler {
        status: StatusCode::BAD_REQUEST,
        message: format!("no handler found for uri [{uri}] and method [{method}]"),
        allow: None,
    }
}

/// Completes a 405 the way OpenSearch words it, naming the allowed methods from the `Allow`
/// header the router sets (HEAD, which axum adds beside GET, is not listed).
pub async fn name_allowed_methods(req: Request, next: axum::middleware::Next) -> Response {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let resp = next.run(req).await;
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
    ApiError::NoHandler {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!(
            "Incorrect HTTP method for uri [{uri}] and method [{method}], allowed: [{}]",
            allowed.join(", ")
        ),
        allow: Some(allowed.join(",")),
    }
    .into_response()
}
