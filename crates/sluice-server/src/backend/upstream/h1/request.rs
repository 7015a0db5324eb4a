//! A lane request as the fast lane writes it to the upstream ([`super`]): its request line,
//! the client's header lines from their own bytes, the gateway's own headers, the body.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use sluice_engine::EngineError;

use crate::http::header_lines::is_named;
use crate::server::MAX_HEADER_SIZE;

/// A lane request's header lines as the client sent them, forwarded from its own bytes rather
/// than from a header map (the lane's [`crate::backend::upstream::Call::raw`]): where each
/// line's name and value are in `request`, the request's bytes as the lane read them. Those
/// the identity drops are removed before sending
/// ([`crate::backend::upstream::headers::Identity::outbound_raw`]). The request's steps read
/// them too, through [`crate::http::header_lines::HeaderLines`].
///
/// Only for a request the lane took: one whose `Connection` header names nothing but
/// `keep-alive` (a hop-by-hop header the identity drops anyway), so no other header is
/// hop-by-hop by being named there, and whose names and values are valid HTTP (httparse
/// parsed them, whose parse hyper trusts as valid names and values).
pub struct RawHeaders {
    request: Bytes,
    lines: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    /// The gateway's `X-Opaque-Id` ([`RawHeaders::set_opaque_id`]), written in place of the
    /// client's lines of that name. Kept here rather than in the call's header map: inserting
    /// it there (the map's first entry, so its allocations) and making a `HeaderValue` of it
    /// cost about 600 instructions a proxied search.
    opaque_id: Option<String>,
}

impl RawHeaders {
    /// The lines of `request` at `lines` (each a name's and its value's byte ranges).
    pub fn new(
        request: Bytes,
        lines: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    ) -> RawHeaders {
        RawHeaders {
            request,
            lines,
            opaque_id: None,
        }
    }

    /// Sets the `X-Opaque-Id` the request is forwarded with: `id`, written as
    /// [`crate::backend::upstream::opaque_id_bytes`] gives it (not at all when that has none),
    /// in place of any the client sent.
    pub fn set_opaque_id(&mut self, id: String) {
        self.opaque_id = Some(id);
    }

    /// Each line's name (as sent) and value, in order.
    pub fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.lines
            .iter()
            .map(|(name, value)| (&self.request[name.clone()], &self.request[value.clone()]))
    }

    /// The values of the lines named `name` (a header name's text, lowercase; compared without
    /// case), sharing the request's bytes.
    pub fn shared_values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = Bytes> + 'a {
        self.lines
            .iter()
            .filter(move |(n, _)| is_named(&self.request[n.clone()], name))
            .map(|(_, value)| self.request.slice(value.clone()))
    }

    /// Keeps the lines whose name (as sent) `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&[u8]) -> bool) {
        let request = &self.request;
        self.lines.retain(|(name, _)| keep(&request[name.clone()]));
    }

    /// Appends the lines to `out` as a header map would write them (names lowercase), but
    /// those whose name `replaced` holds (the gateway's own, written after) and `Host` and
    /// `Content-Length` (written by [`write_request`]); how many it wrote.
    fn write(&self, replaced: &HeaderMap, out: &mut Vec<u8>) -> usize {
        // The names replaced, as text once (a standard name's text is a table lookup).
        let replaced: smallvec::SmallVec<[&[u8]; 4]> =
            replaced.keys().map(|k| k.as_str().as_bytes()).collect();
        let mut written = 0;
        for (name, value) in &self.lines {
            let name = &self.request[name.clone()];
            let skip = is_named(name, b"host")
                || is_named(name, b"content-length")
                || (self.opaque_id.is_some() && is_named(name, b"x-opaque-id"))
                || replaced.iter().any(|k| is_named(name, k));
            if skip {
                continue;
            }
            let at = out.len();
            out.extend_from_slice(name);
            out[at..].make_ascii_lowercase();
            out.extend_from_slice(b": ");
            out.extend_from_slice(&self.request[value.clone()]);
            out.extend_from_slice(b"\r\n");
            written += 1;
        }
        if let Some(id) = self
            .opaque_id
            .as_deref()
            .and_then(crate::backend::upstream::opaque_id_bytes)
        {
            out.extend_from_slice(b"x-opaque-id: ");
            out.extend_from_slice(&id);
            out.extend_from_slice(b"\r\n");
            written += 1;
        }
        written
    }
}

/// The request's bytes: request line, `Host`, the forwarded headers, the length, the body.
/// Refused (400 `too_long_http_header_exception`) when its header lines are over
/// [`MAX_HEADER_SIZE`] as the upstream counts them (every byte of a line but its `CRLF`):
/// a client's head within the limit that the gateway's own lines would push over it gets the
/// gateway's answer, naming the limit, rather than the upstream's (an outside trial's heads of
/// 16,324 bytes and more were refused by the upstream, through the gateway only).
pub fn write_request(
    method: &Method,
    path_and_query: &str,
    host: Option<&HeaderValue>,
    raw: Option<&RawHeaders>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<u8>, EngineError> {
    let lines = raw.map_or(0, |r| r.lines.len()) + headers.len();
    let mut out = Vec::with_capacity(256 + path_and_query.len() + lines * 48 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let lines_start = out.len();
    let mut written = 0;
    if let Some(host) = host {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(b"\r\n");
        written += 1;
    }
    if let Some(raw) = raw {
        written += raw.write(headers, &mut out);
    }
    for (name, value) in headers {
        if name == http::header::HOST || name == http::header::CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
        written += 1;
    }
    // None for an empty body, whatever the method: hyper's client, which sends the general
    // path's searches, writes none for a body that ends at once (an outside trial found the
    // lane's empty `POST`s framed with `content-length: 0` where the general path's were not).
    if !body.is_empty() {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        written += 1;
    }
    // Each line written ends in `CRLF`, and holds no other (httparse and `HeaderValue` take
    // none): its bytes less two a line are the upstream's count.
    if out.len() - lines_start - 2 * written > MAX_HEADER_SIZE {
        return Err(crate::server::headers_too_long());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_request_bytes() {
        let mut h = HeaderMap::new();
        h.insert("x-opaque-id", HeaderValue::from_static("a"));
        h.insert("host", HeaderValue::from_static("client"));
        h.insert("content-length", HeaderValue::from_static("99"));
        let host = HeaderValue::from_static("up:9200");
        let out = write_request(
            &Method::POST,
            "/i/_search?x=1",
            Some(&host),
            None,
            &h,
            b"{}",
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /i/_search?x=1 HTTP/1.1\r\nhost: up:9200\r\nx-opaque-id: a\r\ncontent-length: 2\r\n\r\n{}"
        );
        // The gateway's `X-Opaque-Id` in place of the client's, after the client's lines.
        let sent = b"x-opaque-id: mine\r\nAccept: */*\r\nX-Opaque-Id: again\r\n";
        let lines = vec![(0..11, 13..17), (19..25, 27..30), (32..43, 45..50)];
        let mut raw = RawHeaders::new(Bytes::from_static(sent), lines);
        assert_eq!(
            raw.lines().map(|(_, v)| v).collect::<Vec<_>>(),
            [&b"mine"[..], b"*/*", b"again"]
        );
        raw.set_opaque_id("mine;sluice:gw:7".into());
        let out = write_request(
            &Method::GET,
            "/_search",
            None,
            Some(&raw),
            &HeaderMap::new(),
            b"",
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /_search HTTP/1.1\r\naccept: */*\r\nx-opaque-id: mine;sluice:gw:7\r\n\r\n"
        );
        // An id a header cannot hold is not written, and the client's are not either.
        raw.set_opaque_id("a\nb".into());
        let out = write_request(
            &Method::GET,
            "/_search",
            None,
            Some(&raw),
            &HeaderMap::new(),
            b"",
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /_search HTTP/1.1\r\naccept: */*\r\n\r\n"
        );
        for method in [Method::GET, Method::POST] {
            let out =
                write_request(&method, "/_count", None, None, &HeaderMap::new(), b"").unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{method} /_count HTTP/1.1\r\n\r\n")
            );
        }
    }
}
