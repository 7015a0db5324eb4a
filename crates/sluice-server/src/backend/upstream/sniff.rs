//! Reads the `_scroll_id` of a search response as it streams through, without holding the
//! response: OpenSearch and Elasticsearch write `_scroll_id` first, so the first bytes tell.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// How far into a response the scroll id is looked for: it is the response's first key, and
/// scroll ids of a cluster with many shards run to a few kilobytes.
const SNIFF_LIMIT: usize = 64 * 1024;

/// Called once with the scroll id found.
pub type OnScrollId = Box<dyn FnOnce(String) + Send>;

/// A response body passed through unchanged, calling `on_id` with its `_scroll_id`.
pub struct ScrollIdSniffer<B> {
    inner: B,
    buf: Vec<u8>,
    on_id: Option<OnScrollId>,
}

impl<B> ScrollIdSniffer<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, on_id: OnScrollId) -> ScrollIdSniffer<B> {
        ScrollIdSniffer {
            inner,
            buf: Vec::new(),
            on_id: Some(on_id),
        }
    }

    fn look(&mut self, data: &[u8]) {
        let room = SNIFF_LIMIT.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
        match find_scroll_id(&self.buf) {
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

/// Looks for `"_scroll_id" : "<id>"` in a response's first bytes.
fn find_scroll_id(buf: &[u8]) -> Found {
    const KEY: &[u8] = b"\"_scroll_id\"";
    let Some(at) = buf.windows(KEY.len()).position(|w| w == KEY) else {
        // The key is the first one: once the response is well past its opening, it has none.
        return if buf.len() > 4096 {
            Found::Never
        } else {
            Found::NotYet
        };
    };
    let mut i = at + KEY.len();
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
        Some(len) => match std::str::from_utf8(&buf[start..start + len]) {
            Ok(s) if !s.contains('\\') => Found::Id(s.to_string()),
            _ => Found::Never,
        },
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
        match find_scroll_id(buf.as_bytes()) {
            Found::Id(s) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn test_scroll_id_found_in_the_first_bytes_only() {
        assert_eq!(
            id(r#"{"_scroll_id":"abc=","took":1}"#).as_deref(),
            Some("abc=")
        );
        assert_eq!(id("{\n  \"_scroll_id\" : \"x\"").as_deref(), Some("x"));
        assert!(matches!(
            find_scroll_id(br#"{"_scroll_id":"ab"#),
            Found::NotYet
        ));
        assert!(matches!(find_scroll_id(br#"{"took":1"#), Found::NotYet));
        assert!(matches!(
            find_scroll_id(br#"{"_scroll_id":null}"#),
            Found::Never
        ));
    }
}
