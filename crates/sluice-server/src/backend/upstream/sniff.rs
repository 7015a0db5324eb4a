//! Reads the `_scroll_id` of a search response as it streams through, without holding the
//! response: OpenSearch and Elasticsearch write `_scroll_id` first, so the first bytes tell.
//! Read in the formats a client may ask the answer in and the gateway can read: JSON, YAML
//! (`format=yaml`) and CBOR (`format=cbor`). A SMILE answer's keys may be back-references to
//! earlier ones, which its first bytes cannot resolve: its scroll is not remembered
//! (docs/compatibility.md).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use hyper::body::{Body, Frame, SizeHint};

/// How far into a response the scroll id is looked for: it is the response's first key, and
/// scroll ids of a cluster with many shards run to a few kilobytes.
const SNIFF_LIMIT: usize = 64 * 1024;

/// How far into a response the scroll id's key must have come: it is the first key, after at
/// most an opening (`{`, YAML's `---`, a CBOR map's head) and whitespace.
const KEY_WITHIN: usize = 4096;

/// How a response is written, read from its `Content-Type` as OpenSearch writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON (also what an answer without a `Content-Type` is taken as).
    Json,
    /// `application/yaml`.
    Yaml,
    /// `application/cbor`.
    Cbor,
    /// A format whose first bytes do not tell the id (`application/smile`).
    Unread,
}

impl Format {
    /// The format of an answer with `headers`.
    pub fn of(headers: &HeaderMap) -> Format {
        let Some(ct) = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
        else {
            return Format::Json;
        };
        let mime = ct.split(';').next().unwrap_or("").trim();
        if mime.eq_ignore_ascii_case("application/yaml") {
            Format::Yaml
        } else if mime.eq_ignore_ascii_case("application/cbor") {
            Format::Cbor
        } else if mime.eq_ignore_ascii_case("application/smile") {
            Format::Unread
        } else {
            Format::Json
        }
    }
}

/// Called once with the scroll id found.
pub type OnScrollId = Box<dyn FnOnce(String) + Send>;

/// A response body passed through unchanged, calling `on_id` with its `_scroll_id`.
pub struct ScrollIdSniffer<B> {
    inner: B,
    format: Format,
    buf: Vec<u8>,
    on_id: Option<OnScrollId>,
}

impl<B> ScrollIdSniffer<B> {
    /// Wraps `inner`, a body written in `format` ([`Format::of`] its answer's headers).
    pub fn new(inner: B, format: Format, on_id: OnScrollId) -> ScrollIdSniffer<B> {
        ScrollIdSniffer {
            inner,
            format,
            buf: Vec::new(),
            on_id: (format != Format::Unread).then_some(on_id),
        }
    }

    fn look(&mut self, data: &[u8]) {
        let room = SNIFF_LIMIT.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
        let found = match self.format {
            Format::Json => find_in_json(&self.buf),
            Format::Yaml => find_in_yaml(&self.buf),
            Format::Cbor => find_in_cbor(&self.buf),
            Format::Unread => Found::Never,
        };
        match found {
            Found::Id(id) => {
                if let Some(f) = self.on_id.take() {
                    f(id);
                }
                self.buf = Vec::new();
            }
            Found::NotYet if self.buf.len() < SNIFF_LIMIT => {}
            _ => {
                self.on_id = None;
                self.buf = Vec::new();
            }
        }
    }
}

enum Found {
    Id(String),
    NotYet,
    Never,
}

/// Where `key` first stands in `buf`: `Err` is [`Found::NotYet`] or, once `buf` is well past
/// where the first key would be, [`Found::Never`].
fn key_at(buf: &[u8], key: &[u8]) -> Result<usize, Found> {
    match buf.windows(key.len()).position(|w| w == key) {
        Some(at) => Ok(at),
        None if buf.len() > KEY_WITHIN => Err(Found::Never),
        None => Err(Found::NotYet),
    }
}

/// The id in `bytes`, a complete string: text without escapes (ids are base64), else none.
fn id_of(bytes: &[u8]) -> Found {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.is_empty() && !s.contains('\\') => Found::Id(s.to_string()),
        _ => Found::Never,
    }
}

/// Looks for `"_scroll_id" : "<id>"` in a JSON response's first bytes.
fn find_in_json(buf: &[u8]) -> Found {
    const QUOTED: &[u8] = b"\"_scroll_id\"";
    let at = match key_at(buf, QUOTED) {
        Ok(at) => at,
        Err(f) => return f,
    };
    let mut i = at + QUOTED.len();
    let skip_ws = |i: &mut usize| {
        while *i < buf.len() && buf[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if i >= buf.len() {
        return Found::NotYet;
    }
    if buf[i] != b':' {
        return Found::Never;
    }
    i += 1;
    skip_ws(&mut i);
    if i >= buf.len() {
        return Found::NotYet;
    }
    if buf[i] != b'"' {
        return Found::Never;
    }
    let start = i + 1;
    match buf[start..].iter().position(|b| *b == b'"') {
        Some(len) => id_of(&buf[start..start + len]),
        None => Found::NotYet,
    }
}

/// Looks for `_scroll_id: <id>` at the start of a line of a YAML response's first bytes, the
/// value double-quoted (as OpenSearch's YAML writes strings), single-quoted or plain.
fn find_in_yaml(buf: &[u8]) -> Found {
    const LINE_KEY: &[u8] = b"\n_scroll_id:";
    let after = if buf.starts_with(&LINE_KEY[1..]) {
        LINE_KEY.len() - 1
    } else {
        match key_at(buf, LINE_KEY) {
            Ok(at) => at + LINE_KEY.len(),
            Err(f) => return f,
        }
    };
    let Some(eol) = buf[after..].iter().position(|b| *b == b'\n') else {
        return Found::NotYet;
    };
    let value = buf[after..after + eol].trim_ascii();
    match value {
        [b'"', inner @ .., b'"'] | [b'\'', inner @ .., b'\''] => id_of(inner),
        [b'"' | b'\'', ..] => Found::Never,
        plain => id_of(plain),
    }
}

/// Looks for the text key `_scroll_id` and its text value in a CBOR response's first bytes.
fn find_in_cbor(buf: &[u8]) -> Found {
    // A text string (major type 3) of 10 bytes: its head is 0x60 + 10.
    const TEXT_KEY: &[u8] = b"\x6a_scroll_id";
    let at = match key_at(buf, TEXT_KEY) {
        Ok(at) => at,
        Err(f) => return f,
    };
    let i = at + TEXT_KEY.len();
    let Some(&head) = buf.get(i) else {
        return Found::NotYet;
    };
    if head >> 5 != 3 {
        return Found::Never;
    }
    // The length: in the head below 24, else in the 1, 2 or 4 bytes after it (an indefinite
    // length, 31, is not how an id is written).
    let (len, from) = match head & 0x1f {
        n @ 0..=23 => (usize::from(n), i + 1),
        extra @ 24..=26 => {
            let width = 1usize << (extra - 24);
            let Some(bytes) = buf.get(i + 1..i + 1 + width) else {
                return Found::NotYet;
            };
            let len = bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b));
            (len, i + 1 + width)
        }
        _ => return Found::Never,
    };
    if len > SNIFF_LIMIT {
        return Found::Never;
    }
    match buf.get(from..from + len) {
        Some(bytes) => id_of(bytes),
        None => Found::NotYet,
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for ScrollIdSniffer<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if this.on_id.is_some()
            && let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            let data = data.clone();
            this.look(&data);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(buf: &str) -> Option<String> {
        match find_in_json(buf.as_bytes()) {
            Found::Id(s) => Some(s),
            _ => None,
        }
    }

    fn found(format: Format, buf: &[u8]) -> Option<String> {
        let f = match format {
            Format::Json => find_in_json(buf),
            Format::Yaml => find_in_yaml(buf),
            Format::Cbor => find_in_cbor(buf),
            Format::Unread => Found::Never,
        };
        match f {
            Found::Id(s) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn test_scroll_id_is_read_from_yaml_as_opensearch_writes_it() {
        let yaml = b"---\n_scroll_id: \"FGluY2x1ZGU=\"\ntook: 1\n";
        assert_eq!(found(Format::Yaml, yaml).as_deref(), Some("FGluY2x1ZGU="));
        assert_eq!(
            found(Format::Yaml, b"_scroll_id: 'abc'\n").as_deref(),
            Some("abc")
        );
        assert_eq!(
            found(Format::Yaml, b"---\n_scroll_id: plain_id\n").as_deref(),
            Some("plain_id")
        );
        // Until the line ends the value may go on.
        assert!(matches!(
            find_in_yaml(b"---\n_scroll_id: \"FGlu"),
            Found::NotYet
        ));
        assert!(matches!(find_in_yaml(b"---\ntook: 1\n"), Found::NotYet));
        assert!(matches!(
            find_in_yaml(b"---\n_scroll_id: \"a\\\"b\"\n"),
            Found::Never
        ));
        let long = [b"---\ntook: 1\n".as_slice(), &[b' '; KEY_WITHIN]].concat();
        assert!(matches!(find_in_yaml(&long), Found::Never));
    }

    #[test]
    fn test_scroll_id_is_read_from_cbor_at_every_length_width() {
        for len in [5usize, 23, 24, 200, 300, 70_000] {
            let id: String = "A".repeat(len);
            let mut cbor = vec![0xbf, 0x6a];
            cbor.extend_from_slice(b"_scroll_id");
            match len {
                0..=23 => cbor.push(0x60 + len as u8),
                24..=255 => cbor.extend([0x78, len as u8]),
                256..=65_535 => {
                    cbor.push(0x79);
                    cbor.extend((len as u16).to_be_bytes());
                }
                _ => {
                    cbor.push(0x7a);
                    cbor.extend((len as u32).to_be_bytes());
                }
            }
            cbor.extend_from_slice(id.as_bytes());
            cbor.extend([0x64, b't', b'o', b'o', b'k', 0x01, 0xff]);
            let got = found(Format::Cbor, &cbor);
            if len <= SNIFF_LIMIT {
                assert_eq!(got.as_deref(), Some(id.as_str()), "{len}");
                // Cut anywhere before the id's end: not yet.
                assert!(
                    matches!(find_in_cbor(&cbor[..cbor.len() - 8]), Found::NotYet),
                    "{len}"
                );
            } else {
                assert_eq!(got, None, "{len}: longer than is looked at");
            }
        }
        // A value that is not text.
        let mut number = vec![0xbf, 0x6a];
        number.extend_from_slice(b"_scroll_id");
        number.push(0x01);
        assert!(matches!(find_in_cbor(&number), Found::Never));
    }

    #[test]
    fn test_the_format_is_the_answers_content_type() {
        let of = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, ct.parse().unwrap());
            Format::of(&h)
        };
        assert_eq!(of("application/json; charset=UTF-8"), Format::Json);
        assert_eq!(of("application/yaml"), Format::Yaml);
        assert_eq!(of("Application/CBOR"), Format::Cbor);
        assert_eq!(of("application/smile"), Format::Unread);
        assert_eq!(Format::of(&HeaderMap::new()), Format::Json);
    }

    #[test]
    fn test_scroll_id_found_in_the_first_bytes_only() {
        assert_eq!(
            id(r#"{"_scroll_id":"abc=","took":1}"#).as_deref(),
            Some("abc=")
        );
        assert_eq!(id("{\n  \"_scroll_id\" : \"x\"").as_deref(), Some("x"));
        assert!(matches!(
            find_in_json(br#"{"_scroll_id":"ab"#),
            Found::NotYet
        ));
        assert!(matches!(find_in_json(br#"{"took":1"#), Found::NotYet));
        assert!(matches!(
            find_in_json(br#"{"_scroll_id":null}"#),
            Found::Never
        ));
    }
}
