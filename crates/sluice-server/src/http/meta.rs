//! What the node knows of a request before any handler runs, gathered once by [`gather`]
//! into a [`RequestMeta`] that handlers take as an extractor and pass down as a parameter: the
//! principal, the `workloadGroupId` header and the sink of the response's `Warning` headers.
//!
//! Nothing here lives in a task-local: work that moves to another task (a parked waiter, a
//! proxied stream, a pool thread) carries what it needs with it.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use parking_lot::Mutex;
use sluice_engine::EngineError;

use crate::auth::Principal;
use crate::backend::upstream::product::Product;
use crate::http::header_lines::HeaderLines;
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
    /// cannot be used (empty, not visible ASCII text).
    group_header: Result<Option<Arc<str>>, Arc<str>>,
    /// `Warning` header values for the response.
    pub warnings: Warnings,
    /// The request's `X-Opaque-Id` header (its one value: different ones are refused), as
    /// OpenSearch reads it ([`opaque_id_text`]), recorded on its tasks.
    pub opaque_id: Option<Arc<str>>,
    /// The peer address of the request's connection, for the audit log's lines of its
    /// refusals (`crate::auth::audit`); `None` for work the node starts itself.
    pub remote_addr: Option<IpAddr>,
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
            remote_addr: None,
        }
    }

    /// The `workloadGroupId` header, or a 400 when it is empty or not visible ASCII text.
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

/// Reads the `workloadGroupId` header's value (its one value, [`read_single_valued`]): absent,
/// usable, or why it cannot be used. Only visible ASCII is usable: a tab, which
/// `HeaderValue::to_str` lets through, would name no group and then show inside the
/// unknown-group `Warning` and log line.
fn read_group_header(value: Option<&[u8]>) -> Result<Option<Arc<str>>, Arc<str>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let not_visible = || format!("the [{GROUP_HEADER}] header must be visible ASCII text").into();
    if !value.iter().all(|b| (b' '..=b'~').contains(b)) {
        return Err(not_visible());
    }
    // Visible ASCII: the only white space is the space, which `trim_ascii` takes off.
    let trimmed = value.trim_ascii();
    if trimmed.is_empty() {
        return Err(format!("the [{GROUP_HEADER}] header must not be empty").into());
    }
    // Only ASCII bytes are left, so the bytes are UTF-8.
    std::str::from_utf8(trimmed)
        .map(|s| Some(Arc::from(s)))
        .map_err(|_| not_visible())
}

/// An `X-Opaque-Id` value as OpenSearch reads it: Netty hands header values over as
/// ISO-8859-1 text, each byte one character, so a value with bytes of 0x80 and above is still
/// an id (`café` sent as Latin-1 bytes shows as `café`; sent as UTF-8, as `cafÃ©`, as
/// OpenSearch shows it). The gateway writes it back byte for byte
/// (`crate::backend::upstream::opaque_id_value`).
pub fn opaque_id_text(value: &HeaderValue) -> Arc<str> {
    match value.to_str() {
        Ok(ascii) => Arc::from(ascii),
        Err(_) => value
            .as_bytes()
            .iter()
            .map(|&b| char::from(b))
            .collect::<String>()
            .into(),
    }
}

/// Gathers a request's [`RequestMeta`] from its single-valued headers (`single`, as
/// [`read_single_valued`] read them) and what authentication and authorization found (after
/// them, last of the request steps before the handler: [`crate::server::check_lines`]), on
/// a request whose connection's peer is `remote`.
pub fn gather(
    single: SingleValued<'_>,
    principal: Option<Arc<Principal>>,
    permissions: Option<Arc<RoleSet>>,
    remote: Option<IpAddr>,
) -> RequestMeta {
    RequestMeta {
        principal,
        permissions,
        group_header: read_group_header(single.group),
        warnings: Warnings::default(),
        opaque_id: single.opaque_id.map(opaque_id_text),
        remote_addr: remote,
    }
}

/// Adds the warnings raised while handling a request to its response, as OpenSearch formats
/// them (`299 OpenSearch-<version> "<text>"`), or, on a gateway in front of Elasticsearch
/// (`product`), as Elasticsearch does (`299 Elasticsearch-<version>-<build hash> "<text>"`:
/// [`crate::backend::upstream::product`] P4).
pub fn add_warnings(warnings: &Warnings, product: Option<&Product>, resp: &mut Response) {
    for v in warning_values(warnings, product) {
        resp.headers_mut()
            .append(HeaderName::from_static("warning"), v);
    }
}

/// The `Warning` header values of the warnings raised while handling a request (taken: a
/// second call gives none), as [`add_warnings`] adds them.
pub fn warning_values(warnings: &Warnings, product: Option<&Product>) -> Vec<HeaderValue> {
    let warnings = warnings.take();
    if warnings.is_empty() {
        return Vec::new();
    }
    let agent = product
        .and_then(Product::warning_agent)
        .unwrap_or_else(|| format!("OpenSearch-{}", sluice_wire::OPENSEARCH_COMPAT_VERSION));
    warnings
        .into_iter()
        .filter_map(|w| {
            let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
            HeaderValue::from_str(&format!("299 {agent} \"{escaped}\"")).ok()
        })
        .collect()
}

/// The one value of each single-valued header OpenSearch registers that sluice reads, as
/// [`read_single_valued`] found them.
#[derive(Debug, Clone, Copy)]
pub struct SingleValued<'a> {
    /// The `X-Opaque-Id` value, if sent.
    pub opaque_id: Option<&'a HeaderValue>,
    /// The `workloadGroupId` value, if sent (not yet checked as a group id).
    pub group: Option<&'a [u8]>,
}

/// Reads the single-valued headers OpenSearch registers that sluice reads, `X-Opaque-Id`
/// (`opaque`, as [`opaque_ids`] read them) and `workloadGroupId` (from `headers`), refusing a
/// request that sends either with different values, as OpenSearch's REST layer copies its
/// registered headers (`RestController`, before any handler and its security, so whatever the
/// request is: a search, an `_msearch` as a whole, an index creation): 400 with its simple
/// error naming the first such header (`X-Opaque-Id` first). The same value repeated is one
/// value. Values are compared as the bytes sent, as OpenSearch compares them (Netty's
/// ISO-8859-1 text, one character a byte).
pub fn read_single_valued<'a>(
    headers: &'a impl HeaderLines,
    opaque: &'a [HeaderValue],
) -> Result<SingleValued<'a>, crate::error::ApiError> {
    let opaque_id =
        one_value(opaque.iter()).ok_or_else(|| multiple_values(sluice_wire::OPAQUE_ID_HEADER))?;
    let group = one_value(headers.values(&GROUP_HEADER_NAME))
        .ok_or_else(|| multiple_values(GROUP_HEADER))?;
    Ok(SingleValued { opaque_id, group })
}

/// The one distinct value among `values`: `Some(None)` when there is none, `None` when they
/// differ.
fn one_value<T: PartialEq>(mut values: impl Iterator<Item = T>) -> Option<Option<T>> {
    let Some(first) = values.next() else {
        return Some(None);
    };
    values.all(|v| v == first).then_some(Some(first))
}

/// OpenSearch's refusal of header `name` sent with different values (its simple error).
fn multiple_values(name: &str) -> crate::error::ApiError {
    crate::error::ApiError::Simple {
        status: axum::http::StatusCode::BAD_REQUEST,
        message: format!("multiple values for single-valued header [{name}]."),
        allow: None,
    }
}

/// The request's `X-Opaque-Id` values, in the order sent: read once, for [`read_single_valued`]
/// (then [`gather`]) and [`echo_opaque_id`], which puts them on its response.
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

    /// A header map of `lines`, values as bytes.
    fn lines(lines: &[(&str, &[u8])]) -> axum::http::HeaderMap {
        let mut map = axum::http::HeaderMap::new();
        for (name, value) in lines {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    /// The `X-Opaque-Id` and `workloadGroupId` values [`read_single_valued`] found.
    type Found = (Option<Vec<u8>>, Option<Vec<u8>>);

    /// What [`read_single_valued`] answers for `lines`: the two values, or the refusal's text.
    fn single(lines_sent: &[(&str, &[u8])]) -> Result<Found, String> {
        let map = lines(lines_sent);
        let opaque = opaque_ids(&map);
        match read_single_valued(&map, &opaque) {
            Ok(s) => Ok((
                s.opaque_id.map(|v| v.as_bytes().to_vec()),
                s.group.map(<[u8]>::to_vec),
            )),
            Err(crate::error::ApiError::Simple {
                status, message, ..
            }) => {
                assert_eq!(status, axum::http::StatusCode::BAD_REQUEST);
                Err(message)
            }
            Err(other) => panic!("not the simple error: {other:?}"),
        }
    }

    #[test]
    fn test_single_valued_headers_refuse_different_values_only() {
        assert_eq!(single(&[]), Ok((None, None)));
        assert_eq!(
            single(&[("X-Opaque-Id", b"a"), ("workloadGroupId", b"g")]),
            Ok((Some(b"a".to_vec()), Some(b"g".to_vec())))
        );
        // The same value repeated, names in any case, is one value.
        assert_eq!(
            single(&[
                ("workloadGroupId", b"g"),
                ("x-opaque-id", b"a"),
                ("WORKLOADGROUPID", b"g"),
                ("X-Opaque-Id", b"a"),
            ]),
            Ok((Some(b"a".to_vec()), Some(b"g".to_vec())))
        );
        assert_eq!(
            single(&[("workloadGroupId", b"a"), ("workloadgroupid", b"b")]),
            Err("multiple values for single-valued header [workloadGroupId].".to_string())
        );
        assert_eq!(
            single(&[("x-opaque-id", b"a"), ("X-Opaque-Id", b"b")]),
            Err("multiple values for single-valued header [X-Opaque-Id].".to_string())
        );
        // Both repeated: `X-Opaque-Id` is named.
        assert_eq!(
            single(&[
                ("workloadGroupId", b"a"),
                ("workloadGroupId", b"b"),
                ("X-Opaque-Id", b"a"),
                ("X-Opaque-Id", b"b"),
            ]),
            Err("multiple values for single-valued header [X-Opaque-Id].".to_string())
        );
        // Bytes are compared as sent: Latin-1 `é` and UTF-8 `é` differ, and a case change too.
        assert!(
            single(&[
                ("X-Opaque-Id", b"caf\xe9"),
                ("X-Opaque-Id", "café".as_bytes())
            ])
            .is_err()
        );
        assert!(single(&[("workloadGroupId", b"g"), ("workloadGroupId", b"G")]).is_err());
        assert_eq!(
            single(&[("X-Opaque-Id", b"caf\xe9"), ("X-Opaque-Id", b"caf\xe9")]),
            Ok((Some(b"caf\xe9".to_vec()), None))
        );
    }

    #[test]
    fn test_group_header_is_visible_ascii_without_tabs() {
        let visible = "must be visible ASCII text";
        let read = |v: &[u8]| read_group_header(Some(v)).map_err(|e| e.to_string());
        assert_eq!(read_group_header(None), Ok(None));
        assert_eq!(read(b"g-1").unwrap().as_deref(), Some("g-1"));
        assert_eq!(read(b" g 1 ").unwrap().as_deref(), Some("g 1"));
        assert!(read(b"a\tb").unwrap_err().contains(visible));
        assert!(read(b"\tab").unwrap_err().contains(visible));
        assert!(read(b"caf\xe9").unwrap_err().contains(visible));
        assert!(read(b"   ").unwrap_err().contains("must not be empty"));
        assert!(read(b"").unwrap_err().contains("must not be empty"));
    }

    #[test]
    fn test_opaque_id_text_is_each_byte_one_latin_1_character() {
        let text = |v: &[u8]| opaque_id_text(&HeaderValue::from_bytes(v).unwrap());
        assert_eq!(&*text(b"job-1"), "job-1");
        assert_eq!(&*text(b"a\tb"), "a\tb");
        assert_eq!(&*text(b"caf\xe9"), "caf\u{e9}");
        // UTF-8 bytes are two characters, as OpenSearch shows them.
        assert_eq!(&*text("é".as_bytes()), "\u{c3}\u{a9}");
        assert_eq!(&*text(b"\x80\xff"), "\u{80}\u{ff}");
    }
}
