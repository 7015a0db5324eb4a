//! An upstream answer's head, as the fast lane reads it ([`super`]): parsed with `httparse`,
//! its framing decided (RFC 9112 §6.3), the header lines it relays to the client found where
//! they came (R4), and what the node's general path would add to it.

use bytes::Bytes;
use http::StatusCode;

use super::worded;
use crate::http::header_lines::is_named;

/// The most an answer's head may take: the hyper client's (its default read buffer's largest,
/// 8 KiB + 100 × 4 KiB), so the lane refuses with a 502 exactly the heads the general path
/// does. OpenSearch's own heads are far below.
pub(super) const MAX_HEAD: usize = 8192 + 4096 * 100;

/// The most headers an answer's head may have: the hyper client's (OpenSearch sends under
/// ten).
const MAX_HEADERS: usize = 100;

/// How an answer's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// No body (`204`, `304`, a `1xx`).
    Empty,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Read to the connection's end.
    Close,
}

/// What the node's general path adds to the head of an answer it relays, which the lane adds
/// too (L1): hyper's `Date` when the upstream sent none (a proxy must, RFC 9110 §6.6.1), and
/// the `Vary: accept-encoding` of tower-http's compression layer, which it appends when the
/// answer is one it would compress (not encoded, not a range, its default predicate: 32 bytes
/// or more or of unknown length, not gRPC, an image or an event stream) and no `Vary` names
/// `accept-encoding` yet. `test_added_headers_are_the_general_paths` checks the rule against
/// the layer itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Added {
    /// `Date`.
    pub date: bool,
    /// `Vary: accept-encoding`.
    pub vary: bool,
}

/// Whether a `Vary` value names `accept-encoding` (anywhere, any case: tower-http's test
/// before it appends its own).
pub fn varies_on_encoding(vary: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"accept-encoding";
    vary.windows(NEEDLE.len()).any(|w| is_named(w, NEEDLE))
}

/// Whether tower-http's default predicate compresses an answer of `content_type` (read as
/// `HeaderValue::to_str` reads it: a value that is not visible ASCII is "", which it
/// compresses): not gRPC (but gRPC-web), not an image (but SVG), not an event stream.
fn type_compressed(content_type: &[u8]) -> bool {
    let excluded = |prefix: &[u8], except: Option<&[u8]>| {
        content_type.starts_with(prefix) && !except.is_some_and(|e| content_type.starts_with(e))
    };
    let matched = excluded(b"application/grpc", Some(b"application/grpc-web"))
        || excluded(b"image/", Some(b"image/svg+xml"))
        || excluded(b"text/event-stream", None);
    // Checked only when a prefix matched: most answers are JSON.
    !(matched
        && content_type
            .iter()
            .all(|&b| b == b'\t' || (32..127).contains(&b)))
}

/// What an answer's headers say of its [`Added`], gathered one header at a time.
#[derive(Debug, Default)]
struct Seen {
    dated: bool,
    encoded: bool,
    ranged: bool,
    varied: bool,
    /// Whether the (first) `Content-Type` is one the layer compresses.
    content_type: Option<bool>,
}

impl Seen {
    /// A header `name` (its length `len`, which the caller dispatched on) with `value`.
    fn see(&mut self, len: usize, name: &str, value: &[u8]) {
        match len {
            4 if is_named(name.as_bytes(), b"date") => self.dated = true,
            4 if is_named(name.as_bytes(), b"vary") => self.varied |= varies_on_encoding(value),
            12 if is_named(name.as_bytes(), b"content-type") && self.content_type.is_none() => {
                self.content_type = Some(type_compressed(value));
            }
            13 if is_named(name.as_bytes(), b"content-range") => self.ranged = true,
            16 if is_named(name.as_bytes(), b"content-encoding") => self.encoded = true,
            _ => {}
        }
    }

    /// Done with the headers.
    fn finish(self) -> AddedBut {
        AddedBut {
            dated: self.dated,
            varies_if_long: !self.encoded
                && !self.ranged
                && self.content_type.unwrap_or(true)
                && !self.varied,
        }
    }
}

/// What of an answer's head decides its [`Added`], but for its length.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AddedBut {
    /// It has a `Date`.
    dated: bool,
    /// The compression layer would vary it if its length allows.
    varies_if_long: bool,
}

/// The fewest body bytes tower-http's default predicate compresses (`SizeAbove`'s default).
const COMPRESS_MIN_SIZE: u64 = 32;

impl AddedBut {
    /// The [`Added`] of an answer framed by `framing`.
    pub(super) fn added(self, framing: Framing) -> Added {
        let long = match framing {
            Framing::Length(n) => n >= COMPRESS_MIN_SIZE,
            Framing::Empty => false,
            Framing::Chunked | Framing::Close => true,
        };
        Added {
            date: !self.dated,
            vary: self.varies_if_long && long,
        }
    }
}

/// A parsed answer head: what the gateway needs of it, and its header lines as they came.
pub(super) struct Head {
    pub(super) status: StatusCode,
    /// The header lines as the upstream sent them, or as [`Head::rebuilt`] holds them.
    pub(super) lines: Bytes,
    /// Where the header lines are in the head: after the status line, before the empty line
    /// that ends the head.
    pub(super) lines_at: std::ops::Range<usize>,
    /// The relayed header lines written anew, each ending with CRLF, when one of the
    /// upstream's ends with a bare LF (which httparse, and so hyper, accept): relayed as they
    /// came, they would end the client's head there. `relayed` then covers them whole.
    pub(super) rebuilt: Option<Bytes>,
    /// The status line's reason phrase, as the upstream sent it.
    pub(super) reason: Bytes,
    /// Where the reason phrase is in the head.
    pub(super) reason_at: std::ops::Range<usize>,
    /// How the body is delimited (for an answer to anything but `HEAD`).
    pub(super) framing: Framing,
    /// Whether the upstream keeps the connection open after this answer.
    pub(super) keep_alive: bool,
    /// The parts of `lines` relayed to the client ([`relayed_runs`]).
    pub(super) relayed: Runs,
    /// What decides the general path's additions.
    pub(super) added: AddedBut,
}

/// A `Content-Length` value's number: ASCII digits alone, as hyper reads one (around
/// optional whitespace), at most 19 of them so that it fits; `None` for anything else. (The
/// standard library's parse also takes a `+`, and cost about 300 instructions a search.)
pub fn content_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// Parses the answer head at the start of `buf`: `None` while it is incomplete, else what the
/// gateway needs of it — status, framing (RFC 9112 §6.3: chunked wins over a length; two
/// different lengths are refused), whether the connection stays open, where the header lines
/// start — and the head's length. `lines` is left empty for the caller to cut from the buffer.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, String> {
    // Slots left uninitialized, as the lane's request parse leaves its own.
    let mut slots = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots)
    {
        // hyper's buffer never holds a head this long, whole or not.
        Ok(httparse::Status::Complete(len)) if len >= MAX_HEAD => {
            return Err(worded::TOO_LARGE.to_string());
        }
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(worded::parse(e).to_string()),
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| worded::STATUS.to_string())?;
    let mut chunked = None;
    let mut length: Option<u64> = None;
    let (mut closes, mut keeps) = (false, false);
    let mut connection_named = Vec::new();
    let mut seen = Seen::default();
    for h in resp.headers.iter() {
        // Only the three framing headers' values are read (as text; checked only for them).
        let value = || std::str::from_utf8(h.value).unwrap_or("");
        // Names compared only with the names of their length.
        let len = h.name.len();
        if !matches!(len, 10 | 14 | 17) {
            seen.see(len, h.name, h.value);
        } else if is_named(h.name.as_bytes(), b"transfer-encoding") {
            // The last coding decides; anything but chunked last runs to the connection's end.
            chunked = Some(
                value()
                    .rsplit(',')
                    .next()
                    .is_some_and(|c| is_named(c.trim().as_bytes(), b"chunked")),
            );
        } else if is_named(h.name.as_bytes(), b"content-length") {
            let n = content_length(h.value).ok_or_else(|| worded::CONTENT_LENGTH.to_string())?;
            if length.is_some_and(|l| l != n) {
                return Err(worded::CONTENT_LENGTH.to_string());
            }
            length = Some(n);
        } else if is_named(h.name.as_bytes(), b"connection") {
            for token in crate::backend::upstream::headers::connection_tokens(h.value) {
                if is_named(token, b"close") {
                    closes = true;
                } else if is_named(token, b"keep-alive") {
                    keeps = true;
                } else {
                    connection_named.push(token);
                }
            }
        }
    }
    let framing = if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Empty
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) | (None, None) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
        }
    };
    let added = seen.finish();
    let version_1_0 = resp.version == Some(0);
    let keep_alive = framing != Framing::Close && !closes && (!version_1_0 || keeps);
    // The header lines: after the status line (which ends at the head's first LF, with or
    // without a CR before it), before the empty line that ends the head (a CRLF or a bare LF).
    let lines_start = memchr::memchr(b'\n', &buf[..len]).map_or(len, |i| i + 1);
    let lines_end = if buf[len - 2] == b'\r' {
        len - 2
    } else {
        len - 1
    };
    let lines_at = lines_start..lines_end.max(lines_start);
    // RFC 9112 §6.3: with a `Transfer-Encoding`, a `Content-Length` means nothing, and an
    // intermediary must not pass it on (§6.1): a client framing by it would read the body
    // wrong and its next answer from the middle of this one.
    let drop_length = chunked.is_some();
    let dropped = |name: &str| {
        NOT_RELAYED
            .iter()
            .any(|n| is_named(name.as_bytes(), n.as_bytes()))
            || (drop_length && is_named(name.as_bytes(), b"content-length"))
            || connection_named
                .iter()
                .any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
    };
    let (relayed, rebuilt) = match relayed_runs(resp.headers, &buf[lines_at.clone()], dropped) {
        Some(runs) => (runs, None),
        None => {
            let lines = rebuilt_lines(resp.headers, dropped);
            let mut runs = Runs::new();
            if !lines.is_empty() {
                runs.push((0, lines.len() as u32));
            }
            (runs, Some(Bytes::from(lines)))
        }
    };
    let reason_at = resp.reason.map_or(0..0, |r| {
        let start = r.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + r.len()
    });
    Ok(Some((
        Head {
            status,
            lines: Bytes::new(),
            lines_at,
            rebuilt,
            reason: Bytes::new(),
            reason_at,
            framing,
            keep_alive,
            relayed,
            added,
        },
        len,
    )))
}

/// Where an answer's relayed header lines are, as runs of adjacent lines: `(start, end)` byte
/// offsets in its header lines. Most answers are one run (all their lines) or two (all but the
/// upstream's `X-Opaque-Id`), kept inline.
pub(super) type Runs = smallvec::SmallVec<[(u32, u32); 4]>;

/// The header names the lane never relays, lowercase:
/// [`crate::backend::upstream::headers::HOP_BY_HOP`]'s (compared as text, since a standard
/// `HeaderName`'s text is a table lookup; `test_hop_by_hop_names_agree` checks the two lists
/// agree), and the upstream's `X-Opaque-Id`, which is the gateway's id for its call (the
/// client gets its own back from the lane).
const NOT_RELAYED: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "x-opaque-id",
];

/// Which of an answer's header lines (`headers`, as httparse found them in `lines`, the
/// head's header lines) are relayed: all but those `dropped` names, as [`Runs`]; `None` when a
/// line does not end with CRLF (a bare LF, which httparse accepts: the caller writes the lines
/// anew, [`rebuilt_lines`]).
///
/// Found where httparse left the names rather than by scanning the lines again: a header's
/// line runs from its name to the next header's name (httparse refuses folded lines in an
/// answer), the last one to the end of `lines`. Comparing names with the names of their length
/// only, this cost about 1,300 instructions less a proxied search than finding each line and
/// comparing its name with every hop-by-hop header's (BENCHMARKS.md "Leaner heads").
pub(super) fn relayed_runs(
    headers: &[httparse::Header<'_>],
    lines: &[u8],
    dropped: impl Fn(&str) -> bool,
) -> Option<Runs> {
    let base = lines.as_ptr() as usize;
    // Whether the line ending just before `at` ends with CRLF.
    let crlf = |at: usize| at >= 2 && lines[at - 2..at] == *b"\r\n";
    let mut runs = Runs::new();
    let mut open: Option<u32> = None;
    for (k, h) in headers.iter().enumerate() {
        // Within `lines` (httparse's names point into them), shorter than `MAX_HEAD`.
        let at = (h.name.as_ptr() as usize).checked_sub(base)?;
        if k > 0 && !crlf(at) {
            return None;
        }
        match (dropped(h.name), open) {
            (true, Some(start)) => {
                runs.push((start, at as u32));
                open = None;
            }
            (false, None) => open = Some(at as u32),
            _ => {}
        }
    }
    if !headers.is_empty() && !crlf(lines.len()) {
        return None;
    }
    if let Some(start) = open {
        runs.push((start, lines.len() as u32));
    }
    Some(runs)
}

/// The relayed header lines of `headers` (all but those `dropped` names) written as
/// `name: value` and CRLF, the name as sent: for a head whose lines do not all end with CRLF
/// (hyper writes them so too, its names lowercase).
fn rebuilt_lines(headers: &[httparse::Header<'_>], dropped: impl Fn(&str) -> bool) -> Vec<u8> {
    let mut out = Vec::new();
    for h in headers.iter().filter(|h| !dropped(h.name)) {
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// The head at the start of `raw`, its lines and reason cut as [`super::round_trip`] cuts them.
    fn head_of(raw: &[u8]) -> Result<Head, String> {
        let (mut head, _) = parse_head(raw)?.expect("a whole head");
        head.lines = match head.rebuilt.take() {
            Some(lines) => lines,
            None => Bytes::copy_from_slice(&raw[head.lines_at.clone()]),
        };
        head.reason = Bytes::copy_from_slice(&raw[head.reason_at.clone()]);
        Ok(head)
    }

    fn head(raw: &str) -> Result<Head, String> {
        head_of(raw.as_bytes())
    }

    /// What tower-http's compression layer, in front of a service answering `headers` with a
    /// body of `framing`'s length, does to the `Vary` header: whether it appends one.
    fn layer_appends_vary(status: u16, headers: &[(&str, Vec<u8>)], framing: Framing) -> bool {
        use http_body_util::{BodyExt, Full, StreamBody};
        use tower::ServiceExt;
        type Out = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;
        let mut resp = http::Response::new(match framing {
            Framing::Length(n) => Full::new(Bytes::from(vec![b'x'; n as usize])).boxed_unsync(),
            Framing::Empty => Full::new(Bytes::new()).boxed_unsync(),
            // A length the layer cannot know.
            Framing::Chunked | Framing::Close => StreamBody::new(futures::stream::empty::<
                Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
            >())
            .boxed_unsync(),
        });
        *resp.status_mut() = StatusCode::from_u16(status).unwrap();
        for (name, value) in headers {
            resp.headers_mut().append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        let before = resp.headers().get_all(http::header::VARY).iter().count();
        let resp = std::sync::Mutex::new(Some(resp));
        let service = tower::service_fn(move |_: http::Request<Out>| {
            let resp: http::Response<Out> = resp.lock().unwrap().take().unwrap();
            async move { Ok::<_, std::convert::Infallible>(resp) }
        });
        let layered = tower_http::compression::Compression::new(service);
        // A lane client: it accepts no encoding but identity.
        let req = http::Request::new(Full::new(Bytes::new()).boxed_unsync());
        let out = futures::executor::block_on(layered.oneshot(req)).unwrap();
        out.headers().get_all(http::header::VARY).iter().count() > before
    }

    proptest::proptest! {
        #[test]
        fn test_added_headers_are_the_general_paths(
            status in proptest::sample::select(vec![200u16, 204, 404]),
            content_type in proptest::sample::select(vec![
                None, Some(&b"application/json"[..]), Some(b"Application/JSON"),
                Some(b"application/grpc"), Some(b"application/grpc-web+proto"),
                Some(b"image/png"), Some(b"image/svg+xml"),
                Some(b"text/event-stream; charset=utf-8"), Some(b"text/\x80plain"),
            ]),
            encoding in proptest::sample::select(vec![None, Some("gzip"), Some("identity")]),
            ranged in proptest::bool::ANY,
            vary in proptest::sample::select(vec![
                vec![], vec!["accept-encoding"], vec!["Origin"],
                vec!["origin, Accept-Encoding"], vec!["origin", "ACCEPT-ENCODING"],
            ]),
            dated in proptest::bool::ANY,
            length in proptest::sample::select(vec![Some(0u64), Some(31), Some(32), Some(500), None]),
        ) {
            let mut headers: Vec<(&str, Vec<u8>)> = Vec::new();
            if let Some(t) = content_type {
                headers.push(("content-type", t.to_vec()));
            }
            if let Some(e) = encoding {
                headers.push(("content-encoding", e.as_bytes().to_vec()));
            }
            if ranged {
                headers.push(("content-range", b"bytes 0-1/2".to_vec()));
            }
            for v in &vary {
                headers.push(("vary", v.as_bytes().to_vec()));
            }
            if dated {
                headers.push(("date", b"Thu, 03 Dec 2026 07:40:00 GMT".to_vec()));
            }
            let mut raw = format!("HTTP/1.1 {status} X\r\n").into_bytes();
            for (name, value) in &headers {
                raw.extend_from_slice(name.as_bytes());
                raw.extend_from_slice(b": ");
                raw.extend_from_slice(value);
                raw.extend_from_slice(b"\r\n");
            }
            match length {
                Some(n) => raw.extend_from_slice(format!("content-length: {n}\r\n").as_bytes()),
                None => raw.extend_from_slice(b"transfer-encoding: chunked\r\n"),
            }
            raw.extend_from_slice(b"\r\n");
            let (parsed, _) = parse_head(&raw).unwrap().unwrap();
            let added = parsed.added.added(parsed.framing);
            proptest::prop_assert_eq!(added.date, !dated);
            proptest::prop_assert_eq!(
                added.vary,
                layer_appends_vary(status, &headers, parsed.framing)
            );
        }
    }

    #[test]
    fn test_content_lengths_are_digits_alone() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b" 42 "), Some(42));
        assert_eq!(
            content_length(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"+5",
            b"-1",
            b"1 2",
            b"0x10",
            b"12a",
            b"99999999999999999999",
        ] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn test_framing_follows_rfc_9112() {
        let f = |raw: &str| head(raw).map(|h| h.framing);
        assert_eq!(
            f("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            f("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"),
            Ok(Framing::Chunked)
        );
        assert_eq!(
            f("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n"),
            Ok(Framing::Close)
        );
        assert_eq!(f("HTTP/1.1 200 OK\r\n\r\n"), Ok(Framing::Close));
        assert_eq!(f("HTTP/1.1 204 No Content\r\n\r\n"), Ok(Framing::Empty));
        assert!(f("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n").is_err());
        assert!(f("HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n").is_err());
        assert!(f("HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n").is_err());
        assert_eq!(
            f("HTTP/1.1 200 OK\r\ncontent-length:  007 \r\n\r\n"),
            Ok(Framing::Length(7))
        );
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-le")
                .unwrap()
                .is_none()
        );
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        let keep = |raw: &str| head(raw).unwrap().keep_alive;
        assert!(keep("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
        assert!(!keep(
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        ));
        assert!(!keep("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"));
        assert!(keep(
            "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n"
        ));
    }

    /// The lines of `raw`'s head the lane relays.
    fn relayed(raw: &str) -> String {
        let head = head(raw).unwrap();
        let mut out = Vec::new();
        for &(start, end) in &head.relayed {
            out.extend_from_slice(&head.lines[start as usize..end as usize]);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn test_relayed_headers_keep_their_lines_but_hop_by_hop_ones() {
        assert_eq!(
            relayed(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: x-secret\r\n\
                 X-Secret: 1\r\nKeep-Alive: timeout=5\r\nX-Opaque-Id: sluice:n:1\r\n\
                 content-length: 2\r\n\r\n",
            ),
            "Content-Type: application/json\r\ncontent-length: 2\r\n"
        );
        // Every line kept, values with colons and odd spacing as they came.
        let kept = "date: Thu, 03 Dec 2026 07:40:00 GMT\r\nx-a:b:c\r\nX-B:   v  \r\n";
        assert_eq!(relayed(&format!("HTTP/1.1 200 OK\r\n{kept}\r\n")), kept);
        // None kept; the first and last dropped; a name that only starts like a dropped one.
        assert_eq!(
            relayed("HTTP/1.1 200 OK\r\nTE: x\r\nUpgrade: y\r\n\r\n"),
            ""
        );
        assert_eq!(
            relayed(
                "HTTP/1.1 200 OK\r\ntrailer: x\r\nte-x: 1\r\nx-opaque-idx: 2\r\n\
                 Proxy-Authorization: z\r\n\r\n"
            ),
            "te-x: 1\r\nx-opaque-idx: 2\r\n"
        );
        assert_eq!(relayed("HTTP/1.1 204 No Content\r\n\r\n"), "");
        // A name the `Connection` header lists beside a token that is not ASCII.
        assert_eq!(
            relayed(
                "HTTP/1.1 200 OK\r\nConnection: x-secret, café\r\nX-Secret: 1\r\nX-Kept: 2\r\n\r\n"
            ),
            "X-Kept: 2\r\n"
        );
    }

    proptest::proptest! {
        /// Any head httparse accepts, its lines ending with CRLF or a bare LF in any mix, is
        /// parsed without a panic and relayed as its headers but the dropped ones, each line
        /// ending with CRLF; a `Content-Length` beside a `Transfer-Encoding` is not relayed.
        #[test]
        fn test_heads_with_any_line_ends_relay_their_headers(
            headers in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "Content-Type", "x-a", "X-Opaque-Id", "content-length",
                        "Transfer-Encoding", "keep-alive", "Date", "x-b",
                    ]),
                    "[a-z0-9]([a-z0-9=;/ ]{0,12}[a-z0-9])?",
                ),
                0..8,
            ),
            ends in proptest::collection::vec(proptest::bool::ANY, 10),
            reason in proptest::sample::select(vec!["OK", "", "Fine Thanks"]),
            body in proptest::sample::select(vec![&b""[..], b"5\r\nhello\r\n0\r\n\r\n", b"\n\r\nx"]),
        ) {
            let end = |i: usize| if ends[i % ends.len()] { "\r\n" } else { "\n" };
            let mut raw = format!("HTTP/1.1 200 {reason}{}", end(0)).into_bytes();
            let mut te = false;
            for (i, (name, value)) in headers.iter().enumerate() {
                let value = match *name {
                    "content-length" => "5",
                    "Transfer-Encoding" => {
                        te = true;
                        "chunked"
                    }
                    _ => value,
                };
                raw.extend_from_slice(format!("{name}: {value}{}", end(i + 1)).as_bytes());
            }
            raw.extend_from_slice(end(headers.len() + 1).as_bytes());
            let head_len = raw.len();
            raw.extend_from_slice(body);
            let (_, len) = parse_head(&raw).unwrap().expect("a whole head");
            proptest::prop_assert_eq!(len, head_len);
            let parsed = head_of(&raw).unwrap();
            let mut out = Vec::new();
            for &(start, end) in &parsed.relayed {
                out.extend_from_slice(&parsed.lines[start as usize..end as usize]);
            }
            let mut expected = String::new();
            for (name, value) in &headers {
                let value = match *name {
                    "content-length" if te => continue,
                    "content-length" => "5",
                    "X-Opaque-Id" | "Transfer-Encoding" | "keep-alive" => continue,
                    _ => value,
                };
                expected.push_str(&format!("{name}: {value}\r\n"));
            }
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), expected);
            proptest::prop_assert_eq!(&parsed.reason[..], reason.as_bytes());
        }
    }

    #[test]
    fn test_hop_by_hop_names_agree() {
        use crate::backend::upstream::headers::HOP_BY_HOP;
        let hop: Vec<&str> = HOP_BY_HOP.iter().map(|h| h.as_str()).collect();
        assert_eq!(hop, NOT_RELAYED[..HOP_BY_HOP.len()]);
        assert_eq!(NOT_RELAYED[HOP_BY_HOP.len()..], ["x-opaque-id"]);
    }
}
