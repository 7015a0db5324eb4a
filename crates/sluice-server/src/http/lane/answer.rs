//! Answers the lane writes itself ([`super`] L1): sluice's own responses (a refusal, an error)
//! rendered as the general path renders them, and the head of a relayed upstream answer.

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::backend::upstream::product::Product;

/// Writes an answer of sluice's own (an error, a rejection) to the lane request whose head is
/// `head`, its target at `target`, rendered as the general path's outer layer renders it,
/// with the upstream's product header and names as it adds them (`product`,
/// [`crate::backend::upstream::product`] P2, P4).
pub(super) async fn write_own(
    stream: &mut TcpStream,
    mut resp: Response,
    head: &[u8],
    target: std::ops::Range<usize>,
    product: Option<&Product>,
) -> std::io::Result<()> {
    if let Some(product) = product {
        product.restyle(&mut resp);
        product.stamp(&mut resp);
    }
    // Asked only of sluice's own answers (errors, rejections): a relayed answer is the
    // upstream's, and the common path pays nothing for `?pretty` or `?format=yaml`.
    let query = std::str::from_utf8(&head[target])
        .ok()
        .and_then(|t| t.split_once('?'))
        .map(|(_, q)| q);
    let rendering = if crate::http::format::wants_yaml(query, accept_of(head)) {
        Rendering::Yaml
    } else if crate::http::pretty::wants_pretty(query) {
        Rendering::PrettyError
    } else {
        Rendering::AsBuilt
    };
    write_response(stream, resp, rendering).await
}

/// A response's status line with `reason`, in a buffer with room for the head.
pub(super) fn status_line(status: StatusCode, reason: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
    out
}

/// Appends a header line.
pub(super) fn push_header(out: &mut Vec<u8>, name: &str, value: &HeaderValue) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The head of a response sluice built: status line, `headers`, the end of the head.
pub(super) fn head_bytes(status: StatusCode, headers: &HeaderMap) -> Vec<u8> {
    // hyper's words for a status without a usual reason.
    let reason = status.canonical_reason().unwrap_or("<none>");
    let mut out = status_line(status, reason.as_bytes());
    for (name, value) in headers {
        push_header(&mut out, name.as_str(), value);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Appends a `Date` header of now, as hyper's server adds one to an answer without (the HTTP
/// date formatted once a second per lane thread, as hyper caches its own).
pub(super) fn push_date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, String)> = const {
            std::cell::RefCell::new((u64::MAX, String::new()))
        };
    }
    let now = std::time::SystemTime::now();
    let second = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\r\n");
    });
}

/// How the lane renders an answer of its own, as the general path's outer layer does.
enum Rendering {
    /// As the handler built it.
    AsBuilt,
    /// An error's JSON made pretty (`?pretty`, [`crate::http::pretty`]).
    PrettyError,
    /// Its JSON rendered as YAML (`?format=yaml`, [`crate::http::format`]).
    Yaml,
}

/// The value of the `Accept` header in a request's head (`head`, as read: request line and
/// header lines), found only when an answer of the lane's own needs it.
fn accept_of(head: &[u8]) -> Option<&str> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
        name.eq_ignore_ascii_case(b"accept")
            .then(|| std::str::from_utf8(&value[1..]).ok())
            .flatten()
            .map(str::trim)
    })
}

/// Writes a response sluice built (small and whole: errors, rejections) with its length, and
/// what the general path's layers add to it (L1): the body rendered as the request asked
/// (`rendering`), tower-http's compression layer a `Vary: accept-encoding` by its own rule,
/// hyper a `Date`.
async fn write_response(
    stream: &mut TcpStream,
    resp: Response,
    rendering: Rendering,
) -> std::io::Result<()> {
    use tower_http::compression::predicate::{DefaultPredicate, Predicate};
    let (mut parts, body) = resp.into_parts();
    let mut body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    match rendering {
        Rendering::Yaml if json => {
            if let Some(yaml) = crate::http::format::yaml_body(&body) {
                body = Bytes::from(yaml);
                parts.headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(crate::http::format::YAML),
                );
            }
        }
        Rendering::PrettyError if json && parts.status.as_u16() >= 400 => {
            if let Some(rendered) = crate::http::pretty::pretty_json(&body) {
                body = Bytes::from(rendered);
            }
        }
        _ => {}
    }
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let whole = http::Response::from_parts(parts, http_body_util::Full::new(body.clone()));
    let varies = !whole.headers().contains_key(header::CONTENT_ENCODING)
        && !whole.headers().contains_key(header::CONTENT_RANGE)
        && DefaultPredicate::new().should_compress(&whole)
        && !whole
            .headers()
            .get_all(header::VARY)
            .iter()
            .any(|v| crate::backend::upstream::h1::varies_on_encoding(v.as_bytes()));
    let parts = whole.into_parts().0;
    let mut out = head_bytes(parts.status, &parts.headers);
    // Before the head's end, which `head_bytes` wrote.
    out.truncate(out.len() - 2);
    if varies {
        out.extend_from_slice(b"vary: accept-encoding\r\n");
    }
    if !parts.headers.contains_key(header::DATE) {
        push_date(&mut out);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    stream.write_all(&out).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_the_accept_header_is_found_in_the_head_as_read() {
        let head = b"GET /logs/_search HTTP/1.1\r\nHost: x\r\nACCEPT:  application/yaml \r\n\r\n";
        assert_eq!(accept_of(head), Some("application/yaml"));
        let head = b"GET /accept:x HTTP/1.1\r\nx-accept: a\r\nacceptance: b\r\n\r\n";
        assert_eq!(accept_of(head), None);
    }
}
