//! What the lane takes of a connection's next request ([`super`]): its head parsed in place,
//! the request judged the lane's, hyper's for once, or hyper's for good (the conditions of the
//! module documentation), and a taken head's parts built from the request's own bytes.

use std::mem::MaybeUninit;

use axum::extract::Request;
use bytes::Bytes;
use http::Method;

use crate::backend::upstream::h1::content_length;
use crate::backend::upstream::headers::connection_tokens;
use crate::backend::upstream::routes::{LaneRoute, lane_route};
use crate::http::header_lines::is_named;

/// The most a request head may take on the lane; a longer one hands off (hyper's limit is
/// larger and its error the general path's).
pub(super) const MAX_HEAD: usize = 16 * 1024;

/// The most request headers the lane parses; a request with more hands off.
const MAX_HEADERS: usize = 64;

/// A request head the lane takes: where its parts are in the connection's buffer, so they are
/// built from the request's own bytes once it has been read whole (no copy of each value).
pub(super) struct Taken {
    pub(super) route: LaneRoute,
    pub(super) method: Method,
    /// The request target (path and query).
    pub(super) target: std::ops::Range<usize>,
    /// Each header's name and value.
    pub(super) headers: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    pub(super) head_len: usize,
    pub(super) body_len: usize,
}

impl Taken {
    /// The request's method and target, its target sharing `request`'s bytes (the head and
    /// body [`parse`] measured); no header map: the request's steps read its header lines
    /// where they are ([`crate::http::header_lines`]). `None` when the target is not a valid
    /// URI, which [`parse`] does not let through. The names and
    /// values httparse accepted are valid HTTP: hyper builds its own header map from the same
    /// parse without checking them again. Boxed, as a read request's parts are
    /// (`backend::upstream::routes::Read`): 224 bytes the search's steps pass on as a pointer.
    pub(super) fn parts(&self, request: &Bytes) -> Option<Box<http::request::Parts>> {
        let uri = http::Uri::from_maybe_shared(request.slice(self.target.clone())).ok()?;
        let mut parts = Box::new(Request::new(()).into_parts().0);
        parts.method = self.method.clone();
        parts.uri = uri;
        Some(parts)
    }
}

/// What parsing the buffer's start gave.
pub(super) enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A request hyper serves, after which the lane reads the connection again (L2): its
    /// length in bytes (head and body).
    Once(usize),
    /// A request after which the connection stays hyper's (HTTP/1.0 or 2, an upgrade,
    /// `100-continue`, `Connection: close`, a head that is not HTTP).
    Hyper,
    /// A request for the lane.
    Take(Box<Taken>),
}

/// Parses the request head at the start of `buf`: whether the lane takes it (see the module
/// documentation), with `limit` the body's largest length.
pub(super) fn parse(buf: &[u8], limit: u64) -> Parsed {
    // Slots left uninitialized: zeroing 64 of them took a 2 KiB memset a parse.
    let mut slots = [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Hyper,
    };
    if req.version != Some(1) {
        return Parsed::Hyper;
    }
    // What only hyper does, for the rest of the connection: upgrades, `100-continue`, and
    // the connection's last request.
    let mut close = false;
    let mut lane_headers = true;
    let mut length: Option<u64> = None;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        // Names compared only with the names of their length.
        match name.len() {
            6 if is_named(name, b"expect") => return Parsed::Hyper,
            7 if is_named(name, b"upgrade") => return Parsed::Hyper,
            10 if is_named(name, b"connection") => {
                for token in connection_tokens(h.value) {
                    if is_named(token, b"close") {
                        close = true;
                    } else if is_named(token, b"upgrade") {
                        return Parsed::Hyper;
                    } else if !is_named(token, b"keep-alive") {
                        // A header it names is the general path's to drop, for this request
                        // only (`Connection: TE`, which curl sends, once kept the connection
                        // off the lane for good).
                        lane_headers = false;
                    }
                }
            }
            // A chunked body's end is not known before it is read: hyper keeps the
            // connection.
            17 if is_named(name, b"transfer-encoding") => return Parsed::Hyper,
            16 if is_named(name, b"content-encoding") => lane_headers = false,
            // The general path gzips answers for clients that accept it (`identity` alone,
            // which Python's `http.client` sends, asks for none).
            15 if is_named(name, b"accept-encoding") && !identity_only(h.value) => {
                lane_headers = false;
            }
            14 if is_named(name, b"content-length") => {
                match (content_length(h.value), length) {
                    (Some(n), None) => length = Some(n),
                    // hyper answers a length it cannot read, and closes.
                    _ => return Parsed::Hyper,
                }
            }
            _ => {}
        }
    }
    if close {
        return Parsed::Hyper;
    }
    let Some(once) = usize::try_from(length.unwrap_or(0))
        .ok()
        .and_then(|n| n.checked_add(head_len))
    else {
        return Parsed::Hyper;
    };
    let once = Parsed::Once(once);
    // A body over `http.max_content_length` is refused from the head by the general path's
    // steps, and the connection closed; so is a head over `http.max_header_size`, which
    // only a head this long can be (hyper's reading of heads, `crate::http::heads`).
    if length.is_some_and(|n| n > limit) || head_len > MAX_HEAD {
        return once;
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Parsed::Hyper;
    };
    let method = match method {
        "GET" => Method::GET,
        "POST" => Method::POST,
        _ => return once,
    };
    let (path, query) = match crate::http::target::split_once_ascii(target, b'?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let route = match lane_route(&method, path, query) {
        Some(route) if lane_headers => route,
        _ => return once,
    };
    // A target with bytes `http::Uri` refuses, as curl sends `?q=t:"x"`: the general path
    // serves it encoded (`crate::http::target`). One table look-up a byte of the target.
    if crate::http::target::has_odd(target.as_bytes()) {
        return once;
    }
    // Offsets in `buf` of what httparse found there.
    let at = |part: &[u8]| {
        let start = part.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + part.len()
    };
    let headers = req
        .headers
        .iter()
        .map(|h| (at(h.name.as_bytes()), at(h.value)))
        .collect();
    let Ok(body_len) = usize::try_from(length.unwrap_or(0)) else {
        return once;
    };
    Parsed::Take(Box::new(Taken {
        route,
        method,
        target: at(target.as_bytes()),
        headers,
        head_len,
        body_len,
    }))
}

/// Whether an `Accept-Encoding` value asks for no encoding but `identity` (or none).
fn identity_only(value: &[u8]) -> bool {
    is_named(value, b"identity")
        || std::str::from_utf8(value).is_ok_and(|v| {
            v.split(',').all(|t| {
                let coding = t.split(';').next().unwrap_or("").trim();
                coding.is_empty() || is_named(coding.as_bytes(), b"identity")
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::upstream::routes::LANE_PATTERNS;

    fn parsed(raw: &str) -> Option<Taken> {
        match parse(raw.as_bytes(), 1000) {
            Parsed::Take(t) => Some(*t),
            _ => None,
        }
    }

    #[test]
    fn test_accept_encodings_of_identity_alone() {
        assert!(identity_only(b"Identity"));
        assert!(identity_only(b"identity;q=1, "));
        assert!(!identity_only(b"identity, gzip"));
    }

    proptest::proptest! {
        /// What authorization reads of a lane request is what it reads of the same request on
        /// the general path, which classifies its path.
        #[test]
        fn test_a_lane_routes_action_is_classifys(
            get in proptest::bool::ANY,
            index in proptest::option::of("[a-z_*,.%+-]{0,6}"),
            action in proptest::prop_oneof![
                proptest::strategy::Just("_search"),
                proptest::strategy::Just("_count"),
            ],
            query in proptest::option::of("(index=[a-z*,%_]{0,5}&?)?(size=1)?"),
        ) {
            let method = if get { Method::GET } else { Method::POST };
            let path = match &index {
                Some(i) => format!("/{i}/{action}"),
                None => format!("/{action}"),
            };
            let query = query.as_deref();
            if let Some(route) = lane_route(&method, &path, query) {
                proptest::prop_assert_eq!(
                    route.action(&method, &path, query),
                    crate::auth::route::classify(&method, &path, query)
                );
            }
        }
    }

    #[test]
    fn test_lane_takes_plain_searches_only() {
        let t =
            parsed("POST /logs/_search?size=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
                .expect("taken");
        assert_eq!((t.head_len, t.body_len), (66, 2));
        assert_eq!(LANE_PATTERNS[t.route.slot], "/{index}/_search");
        let raw = Bytes::from_static(
            b"POST /logs/_search?size=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
        );
        let parts = parsed(std::str::from_utf8(&raw).unwrap())
            .unwrap()
            .parts(&raw)
            .unwrap();
        assert_eq!(parts.method, Method::POST);
        assert_eq!(parts.uri, "/logs/_search?size=1");
        // No header map: the steps read the lines where they were read.
        assert!(parts.headers.is_empty());
        assert!(parsed("GET /_count HTTP/1.1\r\naccept-encoding: identity\r\n\r\n").is_some());
        let hyper = |raw: &str| matches!(parse(raw.as_bytes(), 1000), Parsed::Hyper);
        for forever in [
            "GET /logs/_search HTTP/1.0\r\n\r\n",
            "GET /_count HTTP/1.1\r\nconnection: close\r\n\r\n",
            "POST /_search HTTP/1.1\r\nexpect: 100-continue\r\n\r\n",
            "POST /_search HTTP/1.1\r\nconnection: upgrade\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "NOT HTTP\r\n\r\n",
            "POST /_search HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            "POST /_search HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n",
        ] {
            assert!(hyper(forever), "{forever}");
        }
        let once = |raw: &str| matches!(parse(raw.as_bytes(), 1000), Parsed::Once(_));
        for other in [
            "PUT /logs/_search HTTP/1.1\r\n\r\n",
            "GET /logs/_doc/1 HTTP/1.1\r\n\r\n",
            "GET /_wlm/workload_group HTTP/1.1\r\n\r\n",
            "GET /_tasks/_search HTTP/1.1\r\n\r\n",
            "GET /logs/_search?scroll=1m HTTP/1.1\r\n\r\n",
            "GET /lo%67s/_search HTTP/1.1\r\n\r\n",
            "POST /_search HTTP/1.1\r\naccept-encoding: gzip\r\n\r\n",
            "POST /_search HTTP/1.1\r\naccept-encoding: identity, gzip;q=0.5\r\n\r\n",
            "POST /_search HTTP/1.1\r\naccept-encoding: *\r\n\r\n",
            "POST /_search HTTP/1.1\r\ncontent-encoding: gzip\r\n\r\n",
            "POST /_search HTTP/1.1\r\ncontent-length: 2000\r\n\r\n",
            "GET /_search HTTP/1.1\r\nconnection: TE\r\nte: trailers\r\n\r\n",
            "GET /_search HTTP/1.1\r\nconnection: keep-alive, x-foo, café\r\n\r\n",
            // A target `http::Uri` refuses: the general path serves it encoded.
            "GET /logs/_search?q=t:\"x\" HTTP/1.1\r\n\r\n",
            "GET /_count?q=`x` HTTP/1.1\r\n\r\n",
        ] {
            assert!(once(other), "{other}");
        }
        // A head longer than the lane takes, whole in the buffer: the general path refuses
        // its headers if they are over the limit.
        let long = format!(
            "GET /_search HTTP/1.1\r\nx: {}\r\n\r\n",
            "y".repeat(MAX_HEAD)
        );
        assert!(once(&long));
        assert!(matches!(
            parse(b"GET /_search HTTP/1.1\r\nhost", 10),
            Parsed::Partial
        ));
    }
}
