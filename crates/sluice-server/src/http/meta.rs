//! What the node knows of a request before any handler runs, gathered once by [`gather`]
//! into a [`RequestMeta`] that handlers take as an extractor and pass down as a parameter: the
//! principal, the `workloadGroupId` header and the sink of the response's `Warning` headers.
//!
//! Nothing here lives in a task-local: work that moves to another task (a parked waiter, a
//! proxied stream, a pool thread) carries what it needs with it.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use parking_lot::Mutex;
use sluice_engine::EngineError;

use crate::auth::Principal;
use crate::http::header_lines::{HeaderLines, visible};
use sluice_core::authz::RoleSet;
use sluice_wire::WORKLOAD_GROUP_ID_HEADER as GROUP_HEADER;

/// sluice's `workloadGroupId` header as a name. Looked up by the `&str`, a mixed-case name is
/// parsed and lowercased again on every request (about 350 instructions a lookup, three
/// lookups per request); `test_header_names_are_sluice_wire_s` checks it is the same header.
static GROUP_HEADER_NAME: HeaderName = HeaderName::from_static("workloadgroupid");

/// `X-Opaque-Id` as a name (see [`GROUP_HEADER_NAME`]).
pub static OPAQUE_ID_NAME: HeaderName = HeaderName::from_static("x-opaque-id");

/// The request's metadata (see the module docs). Cheap to clone: every part is shared.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    /// Who sends the request, from sluice's own authentication; `None` when `auth.type` is
    /// `none` (DESIGN D6).
    pub principal: Option<Arc<Principal>>,
    /// The principal's compiled permissions, for the per-item checks of `crate::auth::authz`;
    /// `None` when nothing is authorized (`auth.type: none`, work the node starts itself).
    pub permissions: Option<Arc<RoleSet>>,
    /// The `workloadGroupId` header: `Ok(None)` when absent, `Err` with the reason when it
    /// cannot be used (repeated, empty, not text).
    group_header: Result<Option<Arc<str>>, Arc<str>>,
    /// `Warning` header values for the response.
    pub warnings: Warnings,
    /// The request's `X-Opaque-Id` header (the last one, as OpenSearch keeps), recorded on
    /// its tasks.
    pub opaque_id: Option<Arc<str>>,
}

impl RequestMeta {
    /// Metadata of a request with this principal and no header, for work the node starts on
    /// its own behalf and for tests.
    pub fn internal(principal: Option<Arc<Principal>>) -> RequestMeta {
        RequestMeta {
            principal,
            permissions: None,
            group_header: Ok(None),
            warnings: Warnings::default(),
            opaque_id: None,
        }
    }

    /// The `workloadGroupId` header, or a 400 when it is repeated, empty or not text.
    pub fn group_header(&self) -> Result<Option<&str>, EngineError> {
        match &self.group_header {
            Ok(h) => Ok(h.as_deref()),
            Err(reason) => Err(EngineError::illegal_argument(reason.to_string())),
        }
    }
}

/// Where the handling of a request leaves `Warning` headers for its response.
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    /// Adds a warning to the response, once (as OpenSearch's thread context keeps each
    /// distinct warning once: an `_msearch` whose items raise the same one answers it once).
    pub fn add(&self, text: String) {
        let mut warnings = self.0.lock();
        if !warnings.contains(&text) {
            warnings.push(text);
        }
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestMeta {
    type Rejection = std::convert::Infallible;

    /// The metadata [`gather`] gathered; an empty one when it did not run (then the
    /// request has no principal, and admin authorization still fails closed).
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<RequestMeta>()
            .cloned()
            .unwrap_or_else(|| RequestMeta::internal(None)))
    }
}

/// Reads the `workloadGroupId` header: absent, one usable value, or why it cannot be used.
fn read_group_header(headers: &impl HeaderLines) -> Result<Option<Arc<str>>, Arc<str>> {
    let mut values = headers.values(&GROUP_HEADER_NAME);
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(one), None) => match visible(one) {
            Some(s) if !s.trim().is_empty() => Ok(Some(Arc::from(s.trim()))),
            Some(_) => Err(format!("the [{GROUP_HEADER}] header must not be empty").into()),
            None => Err(format!("the [{GROUP_HEADER}] header must be visible ASCII text").into()),
        },
        _ => Err(format!("multiple values for single-valued header [{GROUP_HEADER}]").into()),
    }
}

/// Gathers a request's [`RequestMeta`] from its header lines, its `X-Opaque-Id` values
/// (`opaque`, as [`opaque_ids`] read them) and what authentication and authorization found
/// (after them, last of the request steps before the handler: [`crate::server::check_lines`]).
pub fn gather(
    headers: &impl HeaderLines,
    opaque: &[HeaderValue],
    principal: Option<Arc<Principal>>,
    permissions: Option<Arc<RoleSet>>,
) -> RequestMeta {
    RequestMeta {
        principal,
        permissions,
        group_header: read_group_header(headers),
        warnings: Warnings::default(),
        opaque_id: opaque.last().and_then(|v| v.to_str().ok()).map(Arc::from),
    }
}

/// Adds the warnings raised while handling a request to its response, as OpenSearch formats
/// them (`299 OpenSearch-<version> "<text>"`).
pub fn add_warnings(warnings: &Warnings, resp: &mut Response) {
    for v in warning_values(warnings) {
        resp.headers_mut()
            .append(HeaderName::from_static("warning"), v);
    }
}

/// The `Warning` header values of the warnings raised while handling a request (taken: a
/// second call gives none), as [`add_warnings`] adds them.
pub fn warning_values(warnings: &Warnings) -> Vec<HeaderValue> {
    warnings
        .take()
        .into_iter()
        .filter_map(|w| {
            let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
            let value = format!(
                "299 OpenSearch-{} \"{escaped}\"",
                sluice_wire::OPENSEARCH_COMPAT_VERSION
            );
            HeaderValue::from_str(&value).ok()
        })
        .collect()
}

/// Refuses a request that sends different `X-Opaque-Id` values (`opaque`, as [`opaque_ids`]
/// read them), as OpenSearch's REST layer refuses a single-valued header repeated with
/// different values, before any handler and its security: 400 with its simple error (the same
/// value repeated is one value).
pub fn check_single_valued(opaque: &[HeaderValue]) -> Result<(), crate::error::ApiError> {
    let Some((first, rest)) = opaque.split_first() else {
        return Ok(());
    };
    if rest.iter().all(|v| v == first) {
        return Ok(());
    }
    Err(crate::error::ApiError::Simple {
        status: axum::http::StatusCode::BAD_REQUEST,
        message: "multiple values for single-valued header [X-Opaque-Id].".to_string(),
        allow: None,
    })
}

/// The request's `X-Opaque-Id` values, in the order sent: read once, for [`check_single_valued`],
/// [`gather`] and [`echo_opaque_id`], which puts them on its response.
pub fn opaque_ids(headers: &impl HeaderLines) -> Vec<HeaderValue> {
    headers.header_values(&OPAQUE_ID_NAME)
}

/// Echoes the request's `X-Opaque-Id` on its response, as OpenSearch's REST channel does, so a
/// client can match answers to the requests it labelled: every value the client sent, in
/// order, replacing any the handler set — none when the client sent none (a gateway's upstream
/// echoes the id the gateway gave its request, which is not the client's). Applied outermost,
/// so errors, rejections and caught panics carry it too.
pub fn echo_opaque_id(opaque: Vec<HeaderValue>, resp: &mut Response) {
    let headers = resp.headers_mut();
    headers.remove(&OPAQUE_ID_NAME);
    for v in opaque {
        headers.append(OPAQUE_ID_NAME.clone(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_header_names_are_sluice_wire_s() {
        assert_eq!(
            GROUP_HEADER_NAME,
            HeaderName::from_bytes(GROUP_HEADER.as_bytes()).unwrap()
        );
        assert_eq!(
            OPAQUE_ID_NAME,
            HeaderName::from_bytes(sluice_wire::OPAQUE_ID_HEADER.as_bytes()).unwrap()
        );
    }
}
