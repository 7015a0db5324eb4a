//! A request target as OpenSearch takes it: Netty reads any byte of the request line but the
//! separators into the target, so `GET /logs/_search?q=t:"x"` or `?source={"query":…}` as
//! curl sends them, unencoded, are served. `http::Uri`, which hyper builds from the target,
//! refuses some of those bytes, and hyper then answers a bare `400` and closes. Such a target
//! is served here with its odd bytes percent-encoded ([`encode`]): sluice decodes the path and
//! query before it reads them ([`crate::http::extract`]), so the request means what it meant.
//!
//! A byte is odd ([`is_odd`]) when RFC 3986 has no place for it in a request target and it is
//! no separator of the request line: the C0 controls but `HT`, `LF`, `VT`, `FF` and `CR` (the
//! whitespace Netty splits a request line on), `"`, `<`, `>`, `\`, `^`, `` ` ``, `{`, `|`, `}`,
//! `DEL` and every byte from `0x80` (raw UTF-8, or bytes that are not UTF-8: encoded, the
//! former decode to the same text and the latter read as replacement characters, as an escape
//! of them does, where they were a bare `400` before). So is a `#` in the path: OpenSearch's
//! path runs to the first `?`, so `PUT /t/_doc/a#b` writes the document `a#b`, where
//! `http::Uri` took `#b` for a fragment and the request wrote `a` (an outside trial's `DELETE
//! /t/_doc/x#keep` deleted `x`). `%`, `[`, `]` and a `#` in the query are left as sent: they
//! mean what they mean to both (OpenSearch's query, as `http::Uri`'s, ends at a `#`). `http::Uri` takes some odd bytes today (`{`, `}`, `|`,
//! `\` and `^`); they are encoded all the same, so the answer does not hang on its version.

/// `s.split_once(c)` for an ASCII `c`, by a plain loop over the bytes: on a request's short
/// path or target it costs a third of `str::split_once`'s pattern searcher (about 110
/// instructions a call, four calls on a fast-lane search). `c` being ASCII, the split is on
/// character boundaries.
pub fn split_once_ascii(s: &str, c: u8) -> Option<(&str, &str)> {
    debug_assert!(c.is_ascii());
    let at = s.bytes().position(|b| b == c)?;
    Some((&s[..at], &s[at + 1..]))
}

/// Which bytes [`is_odd`] calls odd, one entry a byte.
const ODD: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            b'\t' | b'\n' | 0x0B | 0x0C | b'\r' => false,
            0x00..=0x1F => true,
            b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' => true,
            0x7F..=0xFF => true,
            _ => false,
        };
        b += 1;
    }
    t
};

/// Whether `b` is encoded in a request target (see the module documentation).
pub fn is_odd(b: u8) -> bool {
    ODD[usize::from(b)]
}

/// Where `target`'s path ends: at its first `?`, or its end.
fn path_end(target: &[u8]) -> usize {
    memchr::memchr(b'?', target).unwrap_or(target.len())
}

/// Whether `target` holds an odd byte, or a `#` in its path: one table look-up a byte and a
/// search for two bytes, all a target that needs nothing costs.
pub fn has_odd(target: &[u8]) -> bool {
    target.iter().any(|&b| is_odd(b)) || memchr::memchr(b'#', &target[..path_end(target)]).is_some()
}

/// `target` with each odd byte and each `#` of its path percent-encoded (`%XX`, upper-case
/// hex, as RFC 3986 prefers), every other byte as it came.
pub fn encode(target: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let path_end = path_end(target);
    let encoded = |i: usize, b: u8| is_odd(b) || (b == b'#' && i < path_end);
    let odd = target
        .iter()
        .enumerate()
        .filter(|&(i, &b)| encoded(i, b))
        .count();
    let mut out = Vec::with_capacity(target.len() + 2 * odd);
    for (i, &b) in target.iter().enumerate() {
        if encoded(i, b) {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]]);
        } else {
            out.push(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_split_once_ascii_is_str_split_once() {
        for s in ["", "/", "a/b", "/i/_search", "é/ü/x", "?q", "a?b?c", "no"] {
            for c in [b'/', b'?'] {
                assert_eq!(
                    split_once_ascii(s, c),
                    s.split_once(char::from(c)),
                    "{s:?} {c}"
                );
            }
        }
    }
    use percent_encoding::percent_decode;
    use proptest::prelude::*;

    #[test]
    fn test_curls_unencoded_targets_are_encoded_to_what_they_mean() {
        let target = br#"/logs/_search?q=t:"x"&source={"a":[1]}"#;
        assert!(has_odd(target));
        let encoded = encode(target);
        assert_eq!(
            encoded,
            b"/logs/_search?q=t:%22x%22&source=%7B%22a%22:[1]%7D".to_vec()
        );
        http::Uri::try_from(encoded.as_slice()).expect("a URI");
        for b in *br#""<>\^`{|}"# {
            assert!(is_odd(b), "{}", b as char);
        }
        // Nothing to do for a target as clients usually send it, nor for what means the same
        // encoded or not.
        for plain in [
            &b"/logs/_search?q=t%3A%22x%22&size=1"[..],
            b"/a%zz/b?x=1#frag",
            b"/[x]/_doc/1?op=a+b",
        ] {
            assert!(!has_odd(plain), "{}", String::from_utf8_lossy(plain));
            assert_eq!(encode(plain), plain.to_vec());
        }
        // The separators of a request line are no part of a target.
        for sep in [b' ', b'\t', b'\n', 0x0B, 0x0C, b'\r'] {
            assert!(!is_odd(sep), "{sep:#x}");
        }
        assert_eq!(encode("/é\u{7f}\0".as_bytes()), b"/%C3%A9%7F%00".to_vec());
        // A `#` in the path is part of it, as OpenSearch reads it; in the query it ends it.
        let target = b"/t/_doc/a#b?refresh=true#x";
        assert!(has_odd(target));
        assert_eq!(encode(target), b"/t/_doc/a%23b?refresh=true#x".to_vec());
        assert!(has_odd(b"/t/_doc/a#b"));
    }

    proptest! {
        /// Whatever a client puts between the separators of its request line, the target
        /// encoded is a URI, has nothing left to encode, and decodes to the bytes the client's
        /// target decodes to.
        #[test]
        fn test_an_encoded_target_is_a_uri_that_decodes_to_the_same_bytes(
            rest in proptest::collection::vec(
                any::<u8>().prop_filter("no separator", |b| !b" \t\n\x0b\x0c\r".contains(b)),
                0..64,
            ),
        ) {
            let mut target = vec![b'/'];
            target.extend_from_slice(&rest);
            let encoded = encode(&target);
            prop_assert!(http::Uri::try_from(encoded.as_slice()).is_ok(), "{:?}", encoded);
            prop_assert!(!has_odd(&encoded));
            prop_assert_eq!(encode(&encoded), encoded.clone());
            let decoded: Vec<u8> = percent_decode(&encoded).collect();
            let sent: Vec<u8> = percent_decode(&target).collect();
            prop_assert_eq!(decoded, sent);
        }
    }
}
