//! A request's header lines looked up by name, wherever they are kept: in hyper's header map on
//! the general path, or where the gateway's fast lane read them ([`RawHeaders`]). The request
//! steps that read headers (the single-valued headers' check, authentication, the request's metadata:
//! [`crate::server::check_lines`]) read them through [`HeaderLines`], so the lane runs the same
//! steps without building a header map first (about 3,000 instructions a search, most of them
//! hashing and copying names the steps never ask for; BENCHMARKS.md "Header lines where they
//! were read").
//!
//! # Invariants
//! - H1 — a lookup answers the value of every line of that name, names compared without case,
//!   in the order the lines were sent: for a request's raw lines what its header map answers.
//!   Tested by `test_raw_lookups_answer_what_the_map_answers` (generated requests, parsed as
//!   the lane parses them and as hyper's map holds them).
//! - H2 — [`visible`] accepts a value exactly when `HeaderValue::to_str` does. Tested by
//!   `test_visible_is_header_values_to_str` (every byte, and generated values).
//! - H3 — [`is_named`] is `eq_ignore_ascii_case` for every name compared with a lowercase
//!   one. Tested by `test_is_named_is_eq_ignore_ascii_case_with_a_lowercase_name` (every byte
//!   pair).

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::backend::upstream::h1::RawHeaders;

/// A request's header lines (H1).
pub trait HeaderLines: Sync {
    /// The values of the lines named `name`, in the order sent.
    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> + 'a;

    /// The values named `name` as header values, to put on a response.
    fn header_values(&self, name: &HeaderName) -> Vec<HeaderValue>;

    /// The first value named `name`.
    fn first<'a>(&'a self, name: &'a HeaderName) -> Option<&'a [u8]> {
        self.values(name).next()
    }

    /// Whether a line is named `name`.
    fn contains(&self, name: &HeaderName) -> bool {
        self.first(name).is_some()
    }
}

impl HeaderLines for HeaderMap {
    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.get_all(name).iter().map(HeaderValue::as_bytes)
    }

    fn header_values(&self, name: &HeaderName) -> Vec<HeaderValue> {
        self.get_all(name).iter().cloned().collect()
    }
}

impl HeaderLines for RawHeaders {
    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> + 'a {
        let wanted = name.as_str().as_bytes();
        self.lines()
            .filter(move |(n, _)| is_named(n, wanted))
            .map(|(_, v)| v)
    }

    fn header_values(&self, name: &HeaderName) -> Vec<HeaderValue> {
        // A value the lane's parse accepted is a valid header value (hyper builds its own
        // from the same parse unchecked); one that were not would be left out.
        self.shared_values(name.as_str().as_bytes())
            .filter_map(|v| HeaderValue::from_maybe_shared(v).ok())
            .collect()
    }
}

/// Whether a name as a client sent it is `wanted`, a header name's text (lowercase), in any
/// case: `eq_ignore_ascii_case` when `wanted` has no uppercase letter (H3), folding only the
/// sent byte, and only when `wanted`'s is a letter. Every line of a request is looked at for
/// each header read by name, and lowering both bytes of each pair made reading a tagged
/// search's `workloadGroupId` cost about 200 instructions.
///
/// The gateway's request and answer parses compare every name and token they read with this
/// too, rather than with `eq_ignore_ascii_case`, which the compiler unrolls into 30–60
/// instructions at each of its call sites: over a proxied search those copies were ~900
/// distinct instructions, ~6 % of the code a search runs through, each line of it fetched
/// again into the instruction cache every search (BENCHMARKS.md "The code a search runs
/// through"). Only the length check is inlined; the bytes are compared in one shared copy.
#[inline]
pub(crate) fn is_named(sent: &[u8], wanted: &[u8]) -> bool {
    sent.len() == wanted.len() && same_letters(sent, wanted)
}

/// [`is_named`]'s comparison of two names of one length, kept out of line (one copy).
#[inline(never)]
fn same_letters(sent: &[u8], wanted: &[u8]) -> bool {
    sent.iter()
        .zip(wanted)
        .all(|(&s, &w)| s == w || (s | 0x20 == w && w.is_ascii_lowercase()))
}

/// `value` as text when it is visible ASCII (tabs allowed), as `HeaderValue::to_str` reads a
/// value (H2).
pub fn visible(value: &[u8]) -> Option<&str> {
    let ok = value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
    // Only ASCII bytes pass, so the bytes are UTF-8.
    ok.then(|| std::str::from_utf8(value).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    #[test]
    fn test_is_named_is_eq_ignore_ascii_case_with_a_lowercase_name() {
        for s in 0..=u8::MAX {
            for w in (0..=u8::MAX).filter(|w| !w.is_ascii_uppercase()) {
                assert_eq!(
                    is_named(&[b'x', s], &[b'x', w]),
                    [s].eq_ignore_ascii_case(&[w]),
                    "sent {s:#04x}, wanted {w:#04x}"
                );
            }
        }
        assert!(is_named(b"WorkloadGroupID", b"workloadgroupid"));
        assert!(
            !is_named(b"workloadgroupi", b"workloadgroupid"),
            "lengths differ"
        );
        assert!(!is_named(b"X-OPAQUE_ID", b"x-opaque-id"));
    }

    #[test]
    fn test_visible_is_header_values_to_str() {
        for b in 0..=u8::MAX {
            let Ok(v) = HeaderValue::from_bytes(&[b'a', b, b'z']) else {
                continue;
            };
            assert_eq!(visible(v.as_bytes()), v.to_str().ok(), "byte {b:#04x}");
        }
    }

    /// Header names as a client may case them, some repeated.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("X-Opaque-Id"),
            Just("x-opaque-id"),
            Just("X-OPAQUE-ID"),
            Just("workloadGroupId"),
            Just("WORKLOADGROUPID"),
            Just("Authorization"),
            Just("x-proxy-user"),
            Just("X-Proxy-Roles"),
            Just("content-type"),
            Just("X-Other"),
        ]
        .prop_map(str::to_string)
    }

    /// Values with padding, tabs, text that is not ASCII, empty ones.
    fn value() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![
                Just(b' '),
                Just(b'\t'),
                Just(b','),
                b'a'..=b'z',
                0x80u8..=0xff,
            ],
            0..12,
        )
    }

    proptest! {
        #[test]
        fn test_raw_lookups_answer_what_the_map_answers(
            lines in prop::collection::vec((name(), value()), 0..10),
        ) {
            // The request as a client writes it; the lines as the lane's parse finds them.
            let mut request = b"GET /logs/_search HTTP/1.1\r\nhost: h\r\n".to_vec();
            for (n, v) in &lines {
                request.extend_from_slice(n.as_bytes());
                request.extend_from_slice(b": ");
                request.extend_from_slice(v);
                request.extend_from_slice(b"\r\n");
            }
            request.extend_from_slice(b"\r\n");
            let request = Bytes::from(request);
            let mut parsed = [httparse::EMPTY_HEADER; 16];
            let mut req = httparse::Request::new(&mut parsed);
            prop_assert!(req.parse(&request).unwrap().is_complete());
            let base = request.as_ptr() as usize;
            let at = |s: &[u8]| {
                let start = s.as_ptr() as usize - base;
                start..start + s.len()
            };
            let ranges: Vec<_> = req
                .headers
                .iter()
                .map(|h| (at(h.name.as_bytes()), at(h.value)))
                .collect();
            let mut map = HeaderMap::new();
            for h in req.headers.iter() {
                map.append(
                    HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
                    HeaderValue::from_bytes(h.value).unwrap(),
                );
            }
            let raw = RawHeaders::new(request.clone(), ranges);
            for (n, _) in &lines {
                let name = HeaderName::from_bytes(n.as_bytes()).unwrap();
                let from_raw: Vec<&[u8]> = raw.values(&name).collect();
                let from_map: Vec<&[u8]> = HeaderLines::values(&map, &name).collect();
                prop_assert_eq!(&from_raw, &from_map);
                prop_assert_eq!(raw.first(&name), map.first(&name));
                prop_assert_eq!(raw.contains(&name), HeaderLines::contains(&map, &name));
                prop_assert_eq!(raw.header_values(&name), map.header_values(&name));
            }
        }
    }
}
