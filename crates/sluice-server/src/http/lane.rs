//! The gateway's fast lane (ARCHITECTURE.md "The fast lane"): a gateway's connections are read
//! here first, and a plain search or count — the request a gateway exists to manage, and the
//! bulk of its traffic — is parsed, authenticated, authorized, admitted and forwarded without
//! hyper's server, axum's router and layers, or hyper's client. Any other request is lent to
//! hyper and the node's whole HTTP service ([`crate::server::app`]), with the other requests
//! that follow it ([`lent_run`]), and the connection comes back to the lane once a request of
//! its own comes; a connection hyper must keep (HTTP/1.0 or 2, an upgrade, `100-continue`, a
//! chunked upload, its last request) is handed to hyper for good.
//!
//! A request takes the lane when all of this holds, and the general path otherwise:
//! - HTTP/1.1;
//! - a route of [`crate::backend::upstream::routes::lane_route`] (`GET`/`POST` on `_search` or
//!   `_count`, no `scroll`), its target with no byte [`crate::http::target`] encodes (such a
//!   target is served encoded by the general path), its head at most [`MAX_HEAD`] long;
//! - a body framed by `Content-Length` within `http.max_content_length`, or none;
//! - no `Transfer-Encoding`, `Expect`, `Content-Encoding` or `Upgrade` header and no
//!   `Accept-Encoding` but `identity` (chunked uploads, `100-continue`, gzip either way and
//!   upgrades are the general path's), and a `Connection` header naming at most `keep-alive`.
//!
//! # Invariants
//! - L1 — the lane answers a request as the general path would: the same steps in the same
//!   order ([`crate::server::app`]'s request layers: metrics, authentication, authorization,
//!   request metadata — these from the head alone, before the body is read, so a refusal is
//!   answered from the head and a body still coming ends the connection as on the general
//!   path — warnings, the ticket released once the answer's head is built, the `X-Opaque-Id`
//!   echo), the same handler steps ([`crate::backend::upstream::routes`]), the
//!   upstream's answer relayed as it came (hop-by-hop headers and the upstream's
//!   `X-Opaque-Id` aside), with what the general path's layers add to an answer, relayed or
//!   sluice's own: hyper's `Date` when there is none, the compression layer's
//!   `Vary: accept-encoding` by its rule ([`crate::backend::upstream::h1::Added`]). Tested by
//!   `test_lane_hands_other_requests_to_the_general_path` (the same answers with the lane
//!   off), `test_lane_answers_carry_the_headers_the_general_path_adds` (the same header names,
//!   from an upstream that sends no `Date`), `test_added_headers_are_the_general_paths` (the
//!   rule against the layer, over generated heads), the gateway suites, where every search
//!   and count takes the lane, and
//!   `test_a_lane_search_is_refused_from_its_head_before_its_body_is_read` (a 401 before a
//!   90 MB body comes: the lane once read the whole body first).
//! - L2 — the requests lent to hyper reach it with every byte of them, in order, and no byte
//!   past the last one lent: a request is lent only once the answer before it went out and
//!   hyper was given the whole request before it, and only when it is not one the lane takes;
//!   what the client sent after the run is the lane's again. A request hyper answered before
//!   reading it whole and then closed on, or whose answer said `Connection: close` (a
//!   refusal from the head), ends the connection, with a lingering close: the rest of its
//!   body is never read as a request. hyper reads the run through
//!   [`crate::http::heads::Heads`], the lent connection below it counting the bytes as the
//!   client sent them. Tested by
//!   `test_lane_hands_other_requests_to_the_general_path` (pipelined requests of both kinds
//!   in one write),
//!   `test_a_body_that_comes_after_its_early_answer_is_not_taken_for_a_request`,
//!   `test_lent_request_answered_before_its_body_was_read_ends_cleanly` (hyper answers
//!   before the body is read; the next pipelined request is still answered, but after a
//!   413 from the head, whose answer closes the connection) and
//!   `test_a_connection_back_from_other_requests_searches_on_the_lane` (a run of other
//!   requests, then searches on the lane).
//! - L3 — a client that closes its connection while its request waits (for admission, in a
//!   queue, for the upstream) drops the request: its task is cancelled, its permit or queue
//!   place freed, the upstream's search cancelled. Tested by
//!   `test_cancellation_reaches_the_upstream` and the queue tests through the gateway.
//! - L4 — shutdown is graceful, within `http.shutdown_grace`: a connection with no request in
//!   flight (idle, or holding part of a head) closes, a request in flight is answered first,
//!   on the lane and in a run lent to hyper, with `Connection: close`, and nothing the client
//!   pipelined behind it is served (RFC 9112 §9.6); past the grace the connection is closed
//!   whatever it does. [`crate::http::serve`] waits for every lane connection. Tested by
//!   `test_stalled_clients_do_not_keep_a_stopping_gateway_running`,
//!   `test_shutdown_answers_a_lane_search_in_flight_then_ends`,
//!   `test_a_lane_answer_at_shutdown_says_close_and_nothing_pipelined_behind_it_runs` and
//!   `test_a_connection_back_from_other_requests_searches_on_the_lane` (a connection idle in a
//!   run closes at shutdown).

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::FutureExt;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::io::poll_read_buf;
use tower::ServiceExt;

use crate::backend::upstream::h1::{Answer, RawHeaders, RelayError, Relayed, content_length};
use crate::backend::upstream::headers::connection_tokens;
use crate::backend::upstream::routes::{Lane, LaneRoute, lane_route, lane_search};
use crate::http::heads::{Heads, Refusals};
use crate::http::leaving::{StopOnLeave, Watched};
use crate::http::meta;
use crate::http::read_timeout::{self, ReadClock};
use crate::metrics::LaneEvent;
use crate::metrics::route::HttpTimer;
use crate::server::Checked;
use crate::server::HttpService;
use crate::state::AppState;

/// The most a request head may take on the lane; a longer one hands off (hyper's limit is
/// larger and its error the general path's).
const MAX_HEAD: usize = 16 * 1024;

/// The most request headers the lane parses; a request with more hands off.
const MAX_HEADERS: usize = 64;

/// How much of the client's next requests (pipelined) the lane reads while one is in flight,
/// watching for the client to leave (L3); past it the lane stops reading until the answer. The
/// general path's watch has the same bound.
use crate::http::leaving::MAX_READ_AHEAD;

/// What the accept loop gives each lane connection.
pub struct Conn {
    /// The node.
    pub st: Arc<AppState>,
    /// The node's HTTP service, for a connection the lane hands off.
    pub app: HttpService,
    /// Watches a handed-off connection for graceful shutdown.
    pub watcher: Watcher,
    /// Changes once when the node shuts down (L4); held until the connection ends.
    pub shutdown: watch::Receiver<()>,
    /// Cancelled once the shutdown's grace is over: the connection ends, whatever it is doing.
    pub closing: tokio_util::sync::CancellationToken,
    /// The connection's `http.read_timeout` clock, if it has one; every read tells it.
    pub clock: Option<Arc<ReadClock>>,
}

/// A request head the lane takes: where its parts are in the connection's buffer, so they are
/// built from the request's own bytes once it has been read whole (no copy of each value).
struct Taken {
    route: LaneRoute,
    method: Method,
    /// The request target (path and query).
    target: std::ops::Range<usize>,
    /// Each header's name and value.
    headers: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    head_len: usize,
    body_len: usize,
}

impl Taken {
    /// The request's method and target, its target sharing `request`'s bytes (the head and
    /// body [`parse`] measured); no header map: the request's steps read its header lines
    /// where they are ([`crate::http::header_lines`]). `None` when the target is not a valid
    /// URI, which [`parse`] does not let through. The names and
    /// values httparse accepted are valid HTTP: hyper builds its own header map from the same
    /// parse without checking them again.
    fn parts(&self, request: &Bytes) -> Option<http::request::Parts> {
        let uri = http::Uri::from_maybe_shared(request.slice(self.target.clone())).ok()?;
        let mut parts = Request::new(()).into_parts().0;
        parts.method = self.method.clone();
        parts.uri = uri;
        Some(parts)
    }
}

/// The most the lane reserves at a time for a request body it reads: the buffer grows as the
/// body's bytes come (doubling as a `Vec` does), not to the length a head announces, which an
/// idle client could otherwise make it reserve for nothing (an outside trial's 200 heads took
/// 23 GB of address space).
const BODY_STEP: usize = 64 * 1024;

/// What parsing the buffer's start gave.
enum Parsed {
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

/// Serves one connection (see the module documentation) on lane thread `thread`
/// ([`crate::http::threads`]): the thread this runs on. A connection that reads nothing for
/// `http.read_timeout` is closed, whatever it is doing ([`crate::http::read_timeout`]).
pub async fn serve_connection(thread: usize, stream: TcpStream, peer: SocketAddr, conn: Conn) {
    let clock = conn.clock.clone();
    let closing = conn.closing.clone();
    // Until the shutdown's grace is over (L4).
    let serving = read_timeout::run(
        clock.as_deref(),
        peer,
        serve_reads(thread, stream, peer, conn),
    );
    let _ = crate::http::closing::until_closed(serving, &closing).await;
}

/// [`serve_connection`] but for the read timeout.
async fn serve_reads(thread: usize, mut stream: TcpStream, peer: SocketAddr, mut conn: Conn) {
    let limit = conn.st.config.max_content_length;
    let clock = conn.clock.clone();
    let mut buf = BytesMut::with_capacity(8 * 1024);
    loop {
        // At shutdown a connection with no request in flight closes (L4): idle, holding part
        // of a head, or requests pipelined behind an answer that said `Connection: close`,
        // which are not served (RFC 9112 §9.6).
        if conn.shutdown.has_changed().unwrap_or(true) {
            let _ = stream.shutdown().await;
            return;
        }
        // An empty buffer (the usual state after an answer) needs no parse to be partial.
        let parsed = if buf.is_empty() {
            Parsed::Partial
        } else {
            parse(&buf, limit)
        };
        let taken = match parsed {
            Parsed::Take(t) => t,
            // Boxed: a hand-off's future is large (hyper's connection), and once a connection
            // at most; inline, it would weigh in every connection's future.
            Parsed::Hyper => return Box::pin(hand_off(stream, buf, peer, conn)).await,
            // Boxed as a hand-off is: hyper's connection, in the future of a connection that
            // may never carry anything but searches.
            Parsed::Once(len) => match Box::pin(lent_run(stream, buf, len, peer, &conn)).await {
                Some((s, b)) => {
                    (stream, buf) = (s, b);
                    continue;
                }
                None => return,
            },
            Parsed::Partial if buf.len() > MAX_HEAD => {
                return Box::pin(hand_off(stream, buf, peer, conn)).await;
            }
            Parsed::Partial => {
                tokio::select! {
                    biased;
                    read = stream.read_buf(&mut buf) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            read_timeout::read(clock.as_deref());
                            continue;
                        }
                    },
                    _ = conn.shutdown.changed() => {
                        let _ = stream.shutdown().await;
                        return;
                    }
                }
            }
        };
        // The head's steps run before the body is read (L1): the general path answers a
        // refusal (a 400, 401 or 403) from the head, and an anonymous client must not make the
        // lane hold a body of up to `http.max_content_length` before it is refused.
        let body_len = taken.body_len;
        let head = buf.split_to(taken.head_len).freeze();
        let Some(parts) = taken.parts(&head) else {
            // Not met: `parse` leaves a target `http::Uri` refuses to the general path, which
            // serves it encoded. Were it met, the answer is still OpenSearch's JSON.
            let reason = format!(
                "invalid request target [{}]",
                String::from_utf8_lossy(&head[taken.target.clone()])
            );
            let mut refused = crate::error::ApiError::Engine(
                sluice_engine::EngineError::illegal_argument(reason),
            )
            .into_response();
            refused
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            let _ = write_own(&mut stream, refused, &head, taken.target.clone()).await;
            return;
        };
        let route = taken.route;
        let target = taken.target.clone();
        // The header lines are forwarded from the request's own bytes.
        let raw = RawHeaders::new(head.clone(), taken.headers);
        conn.st.metrics.count_lane(LaneEvent::FastLane);
        let checked = tokio::select! {
            biased;
            c = AssertUnwindSafe(check(&conn.st, peer, route, &parts, &raw)).catch_unwind() => {
                match c {
                    Ok(checked) => checked,
                    Err(panic) => Err(crate::server::panic_response(panic)),
                }
            }
            // L3: the client left.
            () = client_gone(&mut stream, &mut buf, clock.as_deref()) => return,
        };
        let passed = match checked {
            Ok(passed) => passed,
            Err(mut refused) => {
                // As hyper does with a body its handler never read: dropped when it is all
                // there, and otherwise the connection ends once the answer is out, with the
                // general path's lingering close (G4) — what follows is no request's start.
                let whole = buf.len() >= body_len;
                if stopping(&conn) {
                    refused
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                if whole {
                    buf.advance(body_len);
                } else {
                    refused
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                let written = write_own(&mut stream, refused, &head, target).await.is_ok();
                if !whole && written {
                    Watched::new(stream, clock).leaving().linger().await;
                    return;
                }
                if !written {
                    return;
                }
                continue;
            }
        };
        // The body, the buffer grown as its bytes come rather than by the length announced:
        // a head alone does not make the lane reserve `http.max_content_length`.
        while buf.len() < body_len {
            buf.reserve((body_len - buf.len()).min(BODY_STEP));
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => read_timeout::read(clock.as_deref()),
            }
        }
        let body = if body_len == 0 {
            Bytes::new()
        } else {
            buf.split_to(body_len).freeze()
        };
        let handled = tokio::select! {
            // In order: no random pick a request.
            biased;
            h = AssertUnwindSafe(forward(&conn.st, passed, peer, route, parts, raw, body, thread)).catch_unwind() => {
                h.unwrap_or_else(|panic| Handled::Sluice(crate::server::panic_response(panic)))
            }
            // L3: the client left; dropping the request cancels what it started.
            () = client_gone(&mut stream, &mut buf, clock.as_deref()) => return,
        };
        // An answer written once the node is stopping is the connection's last, and says so
        // (F3 of an outside trial: the socket closed after an answer that did not).
        let last = stopping(&conn);
        let kept = match handled {
            Handled::Sluice(mut resp) => {
                if last {
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                write_own(&mut stream, resp, &head, target).await.is_ok()
            }
            Handled::Upstream(mut head, answer) => {
                if last && !answer.closes() {
                    // Before the head's end.
                    head.truncate(head.len() - 2);
                    head.extend_from_slice(b"connection: close\r\n\r\n");
                }
                relayed(answer.relay(head, &mut stream).await, peer)
            }
        };
        if !kept {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// Whether the node is stopping: the connection's next answer is its last (L4).
fn stopping(conn: &Conn) -> bool {
    conn.shutdown.has_changed().unwrap_or(true)
}

/// Whether the connection goes on after a relayed answer.
fn relayed(relay: Result<Relayed, RelayError>, peer: SocketAddr) -> bool {
    match relay {
        Ok(Relayed::Whole) => true,
        Ok(Relayed::CloseAfter) => false,
        Err(RelayError::Client(_)) => false,
        Err(RelayError::Upstream(cause)) => {
            tracing::debug!(%peer, %cause, "the upstream's answer broke off");
            false
        }
    }
}

/// Reads (and keeps) what the client sends while its request is in flight, returning when it
/// closes the connection or the connection fails.
async fn client_gone(stream: &mut TcpStream, buf: &mut BytesMut, clock: Option<&ReadClock>) {
    loop {
        if buf.len() >= MAX_READ_AHEAD {
            return std::future::pending().await;
        }
        buf.reserve(4096);
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => read_timeout::read(clock),
        }
    }
}

/// Parses the request head at the start of `buf`: whether the lane takes it (see the module
/// documentation), with `limit` the body's largest length.
fn parse(buf: &[u8], limit: u64) -> Parsed {
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
        let name = h.name;
        // Names compared only with the names of their length.
        match name.len() {
            6 if name.eq_ignore_ascii_case("expect") => return Parsed::Hyper,
            7 if name.eq_ignore_ascii_case("upgrade") => return Parsed::Hyper,
            10 if name.eq_ignore_ascii_case("connection") => {
                for token in connection_tokens(h.value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        return Parsed::Hyper;
                    } else if !token.eq_ignore_ascii_case(b"keep-alive") {
                        // A header it names is the general path's to drop, for this request
                        // only (`Connection: TE`, which curl sends, once kept the connection
                        // off the lane for good).
                        lane_headers = false;
                    }
                }
            }
            // A chunked body's end is not known before it is read: hyper keeps the
            // connection.
            17 if name.eq_ignore_ascii_case("transfer-encoding") => return Parsed::Hyper,
            16 if name.eq_ignore_ascii_case("content-encoding") => lane_headers = false,
            // The general path gzips answers for clients that accept it (`identity` alone,
            // which Python's `http.client` sends, asks for none).
            15 if name.eq_ignore_ascii_case("accept-encoding") && !identity_only(h.value) => {
                lane_headers = false;
            }
            14 if name.eq_ignore_ascii_case("content-length") => {
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
    let (path, query) = match target.split_once('?') {
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
    value.eq_ignore_ascii_case(b"identity")
        || std::str::from_utf8(value).is_ok_and(|v| {
            v.split(',').all(|t| {
                let coding = t.split(';').next().unwrap_or("").trim();
                coding.is_empty() || coding.eq_ignore_ascii_case("identity")
            })
        })
}

/// A lane request's answer.
enum Handled {
    /// Answered by sluice (an error, a rejection): written whole.
    Sluice(Response),
    /// The upstream's answer: the head to send and the body to relay.
    Upstream(Vec<u8>, Answer),
}

/// Writes an answer of sluice's own (an error, a rejection) to the lane request whose head is
/// `head`, its target at `target`, rendered as the general path's outer layer renders it.
async fn write_own(
    stream: &mut TcpStream,
    resp: Response,
    head: &[u8],
    target: std::ops::Range<usize>,
) -> std::io::Result<()> {
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

/// What a lane request's head let through: its timer, its `X-Opaque-Id` values and what
/// [`crate::server::check_lines`] found.
struct Passed {
    timer: HttpTimer,
    opaque: Vec<HeaderValue>,
    checked: Checked,
}

/// The steps of [`crate::server::app`]'s request layers that need only a lane request's head
/// (L1): its timer started, then [`crate::server::check_lines`] (single-valued headers,
/// authentication, authorization, the request's metadata), before its body is read, as the
/// general path runs them before its handler reads the body. A refusal comes back timed, with
/// the `X-Opaque-Id` echoed.
async fn check(
    st: &Arc<AppState>,
    peer: SocketAddr,
    route: LaneRoute,
    parts: &http::request::Parts,
    raw: &RawHeaders,
) -> Result<Passed, Response> {
    let timer = HttpTimer::with_route(&parts.method, route.pattern);
    let opaque = meta::opaque_ids(raw);
    let (method, uri) = (&parts.method, &parts.uri);
    let action = route.action(method, uri.path(), uri.query());
    let checked = crate::server::check_lines(
        st,
        raw,
        &opaque,
        Some(peer.ip()),
        method,
        uri.path(),
        action,
    )
    .await;
    match checked {
        Ok(checked) => Ok(Passed {
            timer,
            opaque,
            checked,
        }),
        Err(mut refused) => {
            timer.record(st, refused.status());
            meta::echo_opaque_id(opaque, &mut refused);
            Err(refused)
        }
    }
}

/// Runs a lane request that [`check`] let through, its body read, through the gateway's
/// search handler and the rest of the request layers' steps (L1), on lane thread `thread`.
#[allow(clippy::too_many_arguments)]
async fn forward(
    st: &Arc<AppState>,
    passed: Passed,
    peer: SocketAddr,
    route: LaneRoute,
    parts: http::request::Parts,
    raw: RawHeaders,
    body: Bytes,
    thread: usize,
) -> Handled {
    let Passed {
        timer,
        opaque,
        checked: Checked {
            meta: request_meta,
            audited,
        },
    } = passed;
    let warnings = request_meta.warnings.clone();
    let lane = Lane {
        raw,
        client: peer.ip(),
    };
    match lane_search(st, request_meta, route, parts, lane, body, thread).await {
        Err(e) => {
            let mut resp = e.into_response();
            meta::add_warnings(&warnings, &mut resp);
            if let Some(audited) = audited {
                audited.record(st, resp.status());
            }
            timer.record(st, resp.status());
            meta::echo_opaque_id(opaque, &mut resp);
            Handled::Sluice(resp)
        }
        Ok((admitted, answer)) => {
            // The ticket is released once the answer's head is built, as on the general path.
            drop(admitted);
            let status = answer.status;
            if let Some(audited) = audited {
                audited.record(st, status);
            }
            timer.record(st, status);
            // The upstream's header lines as they came, but hop-by-hop ones and its
            // `X-Opaque-Id` (the gateway's id for it: the client gets its own back, below).
            // Room for the body's first bytes too: the relay sends them with the head.
            let mut head = status_line(status, answer.reason(), answer.buffered());
            answer.write_headers(&mut head);
            for v in meta::warning_values(&warnings) {
                push_header(&mut head, "warning", &v);
            }
            for v in &opaque {
                push_header(&mut head, "x-opaque-id", v);
            }
            // What the general path's layers add (L1).
            let added = answer.added();
            if added.vary {
                head.extend_from_slice(b"vary: accept-encoding\r\n");
            }
            if added.date {
                push_date(&mut head);
            }
            if answer.is_chunked() {
                head.extend_from_slice(b"transfer-encoding: chunked\r\n");
            }
            if answer.closes() {
                head.extend_from_slice(b"connection: close\r\n");
            }
            head.extend_from_slice(b"\r\n");
            Handled::Upstream(head, answer)
        }
    }
}

/// A response's status line with `reason`, in a buffer with room for the head and `more`
/// bytes.
fn status_line(status: StatusCode, reason: &[u8], more: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 + more);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
    out
}

/// Appends a header line.
fn push_header(out: &mut Vec<u8>, name: &str, value: &HeaderValue) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The head of a response sluice built: status line, `headers`, the end of the head.
fn head_bytes(status: StatusCode, headers: &HeaderMap) -> Vec<u8> {
    // hyper's words for a status without a usual reason.
    let reason = status.canonical_reason().unwrap_or("<none>");
    let mut out = status_line(status, reason.as_bytes(), 0);
    for (name, value) in headers {
        push_header(&mut out, name.as_str(), value);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Appends a `Date` header of now, as hyper's server adds one to an answer without (the HTTP
/// date formatted once a second per lane thread, as hyper caches its own).
fn push_date(out: &mut Vec<u8>) {
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

/// Hands the connection to hyper and the node's HTTP service with the bytes read so far (L2),
/// watched for graceful shutdown as the accept loop watches its own.
async fn hand_off(stream: TcpStream, read: BytesMut, peer: SocketAddr, conn: Conn) {
    conn.st.metrics.count_lane(LaneEvent::HandedOff);
    let Conn {
        app,
        watcher,
        shutdown,
        clock,
        ..
    } = conn;
    // Watched as the accept loop's connections are ([`crate::http::leaving`]); the watch
    // records every read on the clock, so the lent IO under it does not again.
    let lent = Lent::new(stream, read, None, Arc::default(), None, None);
    let io = Watched::new(lent, clock);
    let leaving = io.leaving();
    // hyper reads the heads as the accept loop's connections have them read.
    let refusals = Arc::new(Refusals::default());
    let io = Heads::new(io, refusals.clone());
    let service = StopOnLeave::new(
        crate::http::serve::for_peer(app, peer, refusals),
        leaving.clone(),
    );
    let builder = auto::Builder::new(TokioExecutor::new());
    let served = builder
        .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service))
        .into_owned();
    // The hyper watcher takes over: the lane's own shutdown receiver is no longer needed.
    drop(shutdown);
    if let Err(e) = watcher.watch(served).await {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
    // As the accept loop's connections close ([`crate::http::leaving`], G4).
    leaving.linger().await;
}

/// Serves a run of requests with hyper and the node's HTTP service over `stream`, whose first
/// bytes (`read`) the lane already read: the first request, `len` bytes long (head and body),
/// then each next one the client sends that is neither the lane's nor one that leaves the
/// connection with hyper for good (L2). Gives the connection back at the first such request:
/// the connection and every byte read past the run's last request, in order. `None` when the
/// connection ended within the run (the client left, a protocol error, hyper closing it after
/// an answer given before it read its request's body).
///
/// hyper serves a connection until it ends, so the lane lends it one that holds exactly the
/// run's requests ([`Lent`]) and reads as end of stream once the last one's answer has been
/// dropped by hyper (written whole, [`DoneOnDrop`]), hyper has flushed it and has been given
/// that request's last byte (it reads the rest of a body it answered early); hyper then ends
/// the connection without shutting it down ([`http1::Connection::poll_without_shutdown`]).
/// A run costs hyper one connection's set-up, however many requests it holds: a connection
/// that loads data is served as on a connection hyper keeps, and one that searches after it
/// comes back to the lane (before, lent one request at a time, a connection was hyper's for
/// good after four, and a client's pooled connection that had created an index and a group
/// sent every later search down the general path). At shutdown, an idle run ends at once
/// and a request in flight is answered first (L4).
async fn lent_run(
    stream: TcpStream,
    read: BytesMut,
    len: usize,
    peer: SocketAddr,
    conn: &Conn,
) -> Option<(TcpStream, BytesMut)> {
    conn.st.metrics.count_lane(LaneEvent::Lent);
    let done = Arc::new(AtomicBool::new(false));
    let signal = done.clone();
    // Set when an answer says `Connection: close` (a refusal from the head: a body over the
    // limit, a head too long): hyper closes the connection once it is out.
    let closes = Arc::new(AtomicBool::new(false));
    let closing = closes.clone();
    let refusals = Arc::new(Refusals::default());
    let service = crate::http::serve::for_peer(conn.app.clone(), peer, refusals.clone())
        .map_response(move |resp: Response| {
            if says_close(resp.headers()) {
                closing.store(true, Ordering::Release);
            }
            let done = signal.clone();
            resp.map(|body| Body::new(DoneOnDrop { body, done }))
        });
    let io = Lent::new(
        stream,
        read,
        Some(len),
        done,
        conn.clock.clone(),
        Some(conn.st.clone()),
    );
    // hyper reads the heads as the accept loop's connections have them read; the lent
    // connection counts the bytes as the client sent them.
    let io = Heads::new(io, refusals);
    let mut served =
        http1::Builder::new().serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    let mut shutdown = conn.shutdown.clone();
    let mut stopping = false;
    let ended = loop {
        tokio::select! {
            biased;
            ended = std::future::poll_fn(|cx| served.poll_without_shutdown(cx)) => break ended,
            // hyper ends an idle connection at once, a busy one after its answer.
            _ = shutdown.changed(), if !stopping => {
                stopping = true;
                Pin::new(&mut served).graceful_shutdown();
            }
        }
    };
    ended.ok()?;
    let parts = served.into_parts();
    // What the heads' reading held and hyper never read (nothing, when the run ended at the
    // end of stream its connection gave) comes before what hyper left unparsed.
    let (lent, unread) = parts.io.into_inner().into_inner();
    if !lent.done.load(Ordering::Acquire) {
        return None;
    }
    if lent.left != Some(0) || closes.load(Ordering::Acquire) {
        // hyper answered a request before reading it whole and closed rather than read the
        // rest of its body, or its answer said `Connection: close` (whatever hyper read of
        // the request): what follows on the connection is no request's start, or no
        // request's to serve. It closes as the general path closes such a connection (G4):
        // the client gets the answer while it still sends, not a reset.
        Watched::new(lent.io, conn.clock.clone())
            .leaving()
            .linger()
            .await;
        return None;
    }
    if stopping {
        // hyper's answer said `Connection: close`: nothing the client sent after it is served
        // (RFC 9112 §9.6).
        let mut io = lent.io;
        let _ = io.shutdown().await;
        return None;
    }
    // hyper's unparsed bytes came first, then what it was never given, then what came after.
    let mut buf = BytesMut::with_capacity(
        parts.read_buf.len() + unread.len() + lent.read.len() + lent.after.len(),
    );
    buf.extend_from_slice(&parts.read_buf);
    buf.extend_from_slice(&unread);
    buf.extend_from_slice(&lent.read);
    buf.extend_from_slice(&lent.after);
    Some((lent.io, buf))
}

/// Whether an answer's `Connection` header says `close`.
fn says_close(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| connection_tokens(v.as_bytes()).any(|t| t.eq_ignore_ascii_case(b"close")))
}

/// A response body that marks its answer done when hyper drops it (written whole, or
/// abandoned with the connection).
struct DoneOnDrop {
    body: Body,
    done: Arc<AtomicBool>,
}

impl Drop for DoneOnDrop {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

impl hyper::body::Body for DoneOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection the lane gives hyper, whose first bytes the lane already read: they are read
/// again first. Lent for a run ([`lent_run`]), it holds a request's bytes (the lane's first,
/// then the socket's) and no more; what the client sends past the request is kept in `after`,
/// not given to hyper, and the client closing its connection reads as end of stream at once.
/// Once the answer is done and flushed, the next request in `after` is lent the same way
/// when it is one for hyper ([`Lent::lend_next`]), and otherwise the connection reads as end
/// of stream.
/// Handed off for good ([`hand_off`]), it is the socket after the lane's bytes.
struct Lent {
    read: Bytes,
    io: TcpStream,
    /// What is left of the request for hyper to read; `None` when the connection is hyper's
    /// for good.
    left: Option<usize>,
    done: Arc<AtomicBool>,
    /// Whether hyper flushed after the answer was done (its write buffer is then empty).
    flushed: bool,
    after: BytesMut,
    /// Where the socket's bytes of the request are read before hyper gets them.
    stage: BytesMut,
    /// The connection's `http.read_timeout` clock, told of every byte read from the socket.
    clock: Option<Arc<ReadClock>>,
    /// Lent for a run, the node, so the next requests may be lent too: its
    /// `http.max_content_length` (a request's framing, as the lane reads it) and the count of
    /// requests lent.
    run: Option<Arc<AppState>>,
}

impl Lent {
    fn new(
        io: TcpStream,
        read: BytesMut,
        left: Option<usize>,
        done: Arc<AtomicBool>,
        clock: Option<Arc<ReadClock>>,
        run: Option<Arc<AppState>>,
    ) -> Lent {
        Lent {
            read: read.freeze(),
            io,
            left,
            done,
            flushed: false,
            after: BytesMut::new(),
            stage: BytesMut::new(),
            clock,
            run,
        }
    }

    /// Once a lent request's answer went out and hyper was given the whole request (the
    /// caller's check): whether hyper reads on, the next request lent (or more of its head
    /// awaited), rather than the end of the run. A request the lane takes, or one that leaves
    /// the connection with hyper for good, ends the run: the lane decides what comes of it.
    fn lend_next(&mut self) -> bool {
        let Some(st) = &self.run else {
            return false;
        };
        if !self.read.is_empty() {
            // Read before the run began and not yet given to hyper: it comes first.
            let mut pending = BytesMut::with_capacity(self.read.len() + self.after.len());
            pending.extend_from_slice(&self.read);
            pending.extend_from_slice(&self.after);
            self.read = Bytes::new();
            self.after = pending;
        }
        if self.after.is_empty() {
            return true;
        }
        match parse(&self.after, st.config.max_content_length) {
            Parsed::Once(len) => {
                st.metrics.count_lane(LaneEvent::Lent);
                self.read = self.after.split().freeze();
                self.left = Some(len);
                self.done.store(false, Ordering::Release);
                self.flushed = false;
                true
            }
            Parsed::Partial => self.after.len() <= MAX_HEAD,
            Parsed::Take(_) | Parsed::Hyper => false,
        }
    }
}

impl AsyncRead for Lent {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        // Once the answer went out and hyper was given its whole request (it reads the rest
        // of a body it answered before reading, and then goes on or closes): the next
        // request, or the end of the run.
        if this.flushed
            && this.done.load(Ordering::Acquire)
            && this.left == Some(0)
            && !this.lend_next()
        {
            return Poll::Ready(Ok(()));
        }
        if this.left == Some(0) {
            // The request is hyper's: watch for the client leaving, keep what it sends next.
            if this.after.len() >= MAX_READ_AHEAD {
                return Poll::Pending;
            }
            this.after.reserve(4096);
            return match poll_read_buf(Pin::new(&mut this.io), cx, &mut this.after) {
                Poll::Ready(Ok(0)) => Poll::Ready(Ok(())),
                Poll::Ready(Ok(_)) => {
                    read_timeout::read(this.clock.as_deref());
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            };
        }
        let left = this.left.unwrap_or(usize::MAX);
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining()).min(left);
            buf.put_slice(&this.read[..n]);
            this.read.advance(n);
            this.left = this.left.map(|l| l - n);
            return Poll::Ready(Ok(()));
        }
        let Some(left) = this.left else {
            let before = buf.filled().len();
            let polled = Pin::new(&mut this.io).poll_read(cx, buf);
            if buf.filled().len() > before {
                read_timeout::read(this.clock.as_deref());
            }
            return polled;
        };
        // Read through a buffer of its own, bounded by what is left of the request: the
        // socket may hold the next one. (A `BytesMut`, not an array: an array is zeroed on
        // every read.)
        let n = buf.remaining().min(left);
        this.stage.clear();
        this.stage.reserve(n);
        let polled = poll_read_buf(Pin::new(&mut this.io), cx, &mut (&mut this.stage).limit(n));
        match polled {
            Poll::Ready(Ok(read)) => {
                if read > 0 {
                    read_timeout::read(this.clock.as_deref());
                }
                buf.put_slice(&this.stage[..read]);
                this.left = Some(left - read);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Lent {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.flushed = false;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.flushed = false;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        if matches!(flushed, Poll::Ready(Ok(())))
            && this.done.load(Ordering::Acquire)
            && !this.flushed
        {
            this.flushed = true;
            // hyper may have polled the read side before this flush: it reads again and sees
            // the end now, rather than when the client next sends (or never, for an idle one).
            cx.waker().wake_by_ref();
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn test_the_accept_header_is_found_in_the_head_as_read() {
        let head = b"GET /logs/_search HTTP/1.1\r\nHost: x\r\nACCEPT:  application/yaml \r\n\r\n";
        assert_eq!(accept_of(head), Some("application/yaml"));
        let head = b"GET /accept:x HTTP/1.1\r\nx-accept: a\r\nacceptance: b\r\n\r\n";
        assert_eq!(accept_of(head), None);
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
        assert_eq!(t.route.pattern, "/{index}/_search");
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
