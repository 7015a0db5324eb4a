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
//!   place freed, the upstream's search cancelled. One that closes it while its answer's body
//!   is relayed ends the relay at once, closing the upstream connection (R3), as the general
//!   path drops the body when its client leaves: a client that left an upstream silent
//!   mid-answer once kept its socket and the upstream's for good. Tested by
//!   `test_cancellation_reaches_the_upstream`, the queue tests through the gateway and
//!   `test_a_client_leaving_a_silent_answer_frees_the_upstream_connection`.
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
//! - L5 — a connection's future keeps no room for a request's search or a lingering close:
//!   both are boxed while they run ([`serve_reads`]), so an idle connection holds the loop's
//!   own state only. Tested by `test_an_idle_connections_future_keeps_no_room_for_a_search`
//!   (it fails with either inline).

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes, BytesMut};
use futures::FutureExt;
use http::{HeaderValue, header};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::backend::upstream::h1::{Answer, RawHeaders, RelayError, Relayed};
use crate::backend::upstream::routes::{Lane, LaneRoute, lane_search};
use crate::http::leaving::Watched;
use crate::http::meta;
use crate::http::read_timeout::{self, ReadClock};
use crate::metrics::LaneEvent;
use crate::metrics::route::{PinnedSeries, PinnedTimer};
use crate::server::Checked;
use crate::server::HttpService;
use crate::state::AppState;
use crate::workload::stats::GroupStats;

/// How much of the client's next requests (pipelined) the lane reads while one is in flight,
/// watching for the client to leave (L3); past it the lane stops reading until the answer. The
/// general path's watch has the same bound.
use crate::http::leaving::MAX_READ_AHEAD;

mod answer;
mod lent;
mod parse;
mod series;

pub use series::LaneSeries;

use answer::{push_date, push_header, status_line, write_own};
use lent::{hand_off, lent_run};
use parse::{MAX_HEAD, Parsed, parse};

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
    /// The node's lane metrics series, shared by its connections.
    pub series: Arc<LaneSeries>,
}

/// The most the lane reserves at a time for a request body it reads: the buffer grows as the
/// body's bytes come (doubling as a `Vec` does), not to the length a head announces, which an
/// idle client could otherwise make it reserve for nothing (an outside trial's 200 heads took
/// 23 GB of address space).
const BODY_STEP: usize = 64 * 1024;

/// The room a connection's buffer is made with: nginx's `client_header_buffer_size` (1 KB). A
/// search's head and a small body fit, and a connection that waits idle keeps no more (it
/// kept 8 KB; BENCHMARKS.md "Idle connections"). A larger request grows the buffer as its
/// bytes come.
const READ_ROOM: usize = 1024;

/// The largest request whose room a connection keeps between requests. Before each request
/// whose buffer has less left, it is given room for twice the largest request the connection
/// has carried: the buffer's own allocation, taken back once the last request's bytes are
/// gone, so without allocating (and, with room for two left, only every other request or
/// less). A request read into a tail too short for it took a second read and a second
/// parse of its head (3,000 instructions a search with 2 KB of headers), and one that filled
/// the buffer exactly left no room for what the client sends while it is in flight, which
/// then took a new buffer (400 instructions a search). A request past this leaves its buffer
/// behind: an idle connection does not keep a large body's room. One step of a body's read.
const KEPT_ROOM: usize = BODY_STEP;

/// Serves one connection (see the module documentation) on lane thread `thread`
/// ([`crate::http::threads`]): the thread this runs on. A connection that reads nothing for
/// `http.read_timeout` is closed, whatever it is doing ([`crate::http::read_timeout`]).
pub async fn serve_connection(thread: usize, stream: TcpStream, peer: SocketAddr, conn: Conn) {
    let clock = conn.clock.clone();
    let closing = conn.closing.clone();
    let shutdown = conn.shutdown.clone();
    // Each layer pinned here, borrowed by the next (`crate::http::closing`: a layer taking
    // it by value would double its size).
    let reads = std::pin::pin!(serve_reads(thread, stream, peer, conn));
    let serving = std::pin::pin!(read_timeout::run(clock.as_deref(), peer, reads));
    // Until the shutdown's grace is over (L4), woken when the shutdown begins: a connection
    // waiting for its next request then closes (`closing::begun`, S3).
    let _ = crate::http::closing::until_closed_waking(serving, &closing, shutdown).await;
}

/// [`serve_connection`] but for the read timeout.
///
/// A request's search (boxed in [`forward`]) and a lingering close are boxed, an allocation
/// each: this loop's future is what every idle connection keeps, and it is as large as the
/// largest state it awaits in place: inline, the search (4.2 KB before it was made smaller)
/// and the lingering close (4.3 KB) made it 6.6 KB; boxed, the loop's own states set its size,
/// 2.7 KB (`-Zprint-type-sizes`, release), and an idle connection takes half the memory it
/// took (BENCHMARKS.md "Idle connections"). The search's future is also no longer copied whole
/// each time a future holding it moves (into the `select!` below, for one).
async fn serve_reads(thread: usize, mut stream: TcpStream, peer: SocketAddr, conn: Conn) {
    let limit = conn.st.config.max_content_length;
    let clock = conn.clock.clone();
    let mut buf = BytesMut::with_capacity(READ_ROOM);
    // The largest request the connection has carried (`KEPT_ROOM`).
    let mut largest = 0;
    loop {
        // At shutdown a connection with no request in flight closes (L4): idle, holding part
        // of a head, or requests pipelined behind an answer that said `Connection: close`,
        // which are not served (RFC 9112 §9.6).
        if conn.shutdown.has_changed().unwrap_or(true) {
            let _ = stream.shutdown().await;
            return;
        }
        // An empty buffer (the usual state after an answer) needs no parse to be partial. With
        // less left, it is given room for twice the connection's largest request so far
        // (`KEPT_ROOM`); after a request larger than that, it is a new one.
        let parsed = if buf.is_empty() {
            if largest > KEPT_ROOM {
                buf = BytesMut::with_capacity(READ_ROOM);
                largest = 0;
            } else if buf.capacity() < 2 * largest {
                buf.reserve(2 * largest);
            }
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
                    // Read when the shutdown's wake-up polls the connection
                    // (`serve_connection`): no registration with the watch a request.
                    () = crate::http::closing::begun(&conn.shutdown) => {
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
        largest = largest.max(taken.head_len.saturating_add(body_len));
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
            let _ = write_own(
                &mut stream,
                refused,
                &head,
                taken.target.clone(),
                product(&conn),
            )
            .await;
            return;
        };
        let route = taken.route;
        let target = taken.target.clone();
        // The header lines are forwarded from the request's own bytes.
        let raw = RawHeaders::new(head.clone(), taken.headers);
        conn.st.metrics.count_lane(LaneEvent::FastLane);
        // Pinned where it is made, as the forwarding below, in a scope of its own: it borrows
        // the request's parts, which the forwarding then takes.
        let checked = {
            let checking = std::pin::pin!(
                AssertUnwindSafe(check(
                    &conn.st,
                    peer,
                    route,
                    conn.series.get(route, &parts.method),
                    &parts,
                    &raw
                ))
                .catch_unwind()
            );
            tokio::select! {
                biased;
                c = checking => {
                    match c {
                        Ok(checked) => checked,
                        Err(panic) => Err(crate::server::panic_response(panic)),
                    }
                }
                // L3: the client left.
                () = client_gone(&mut stream, &mut buf, clock.as_deref()) => return,
            }
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
                let written = write_own(&mut stream, refused, &head, target, product(&conn))
                    .await
                    .is_ok();
                if !whole && written {
                    // Boxed (see the function's documentation).
                    Box::pin(Watched::new(stream, clock).leaving().linger()).await;
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
        // Pinned where it is made, the `select!` borrowing it: taken by value, it was moved
        // into the `select!`'s tuple (BENCHMARKS.md "Fewer moves").
        let forwarded = std::pin::pin!(
            AssertUnwindSafe(forward(
                &conn.st, passed, peer, route, parts, raw, body, thread
            ))
            .catch_unwind()
        );
        let handled = tokio::select! {
            // In order: no random pick a request.
            biased;
            h = forwarded => {
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
                write_own(&mut stream, resp, &head, target, product(&conn))
                    .await
                    .is_ok()
            }
            Handled::Upstream(mut head, answer, group) => {
                if last && !answer.closes() {
                    // Before the head's end.
                    head.truncate(head.len() - 2);
                    head.extend_from_slice(b"connection: close\r\n\r\n");
                }
                let (mut from, mut to) = stream.split();
                // Pinned as the forwarding above is.
                let relaying = std::pin::pin!(answer.relay(head, &mut to));
                let relay = tokio::select! {
                    // The relay first: an answer that goes out at once never looks at the
                    // client's side.
                    biased;
                    r = relaying => r,
                    // L3: the client left mid-answer; dropping the relay closes the upstream
                    // connection.
                    () = client_gone(&mut from, &mut buf, clock.as_deref()) => return,
                };
                relayed(relay, peer, group.as_deref())
            }
        };
        if !kept {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// The upstream's product, which the lane's own answers carry as the general path's do.
fn product(conn: &Conn) -> Option<&crate::backend::upstream::product::Product> {
    product_of(&conn.st)
}

/// The upstream's product, on a gateway ([`crate::backend::upstream::product`]).
fn product_of(st: &AppState) -> Option<&crate::backend::upstream::product::Product> {
    st.upstream.as_deref().map(|up| &up.product)
}

/// Whether the node is stopping: the connection's next answer is its last (L4).
fn stopping(conn: &Conn) -> bool {
    conn.shutdown.has_changed().unwrap_or(true)
}

/// Whether the connection goes on after a relayed answer. An answer the upstream broke off or
/// went silent in (R7) counts a failure in `group`, the stats of the task's group when its
/// head counted a success, as the general path counts it (`streamed.rs` E2).
fn relayed(
    relay: Result<Relayed, RelayError>,
    peer: SocketAddr,
    group: Option<&GroupStats>,
) -> bool {
    match relay {
        Ok(Relayed::Whole) => return true,
        Ok(Relayed::CloseAfter) | Err(RelayError::Client(_)) => return false,
        Err(RelayError::Upstream(cause)) => {
            tracing::debug!(%peer, %cause, "the upstream's answer broke off");
        }
        Err(RelayError::Silent(bound)) => {
            let cause = crate::backend::upstream::streamed::silent(bound);
            tracing::warn!(%peer, %cause,
                "an upstream answer stopped mid-body; its client's connection is closed");
        }
    }
    if let Some(group) = group {
        group.failures.inc();
    }
    false
}

/// Reads (and keeps) what the client sends while its request is in flight, returning when it
/// closes the connection or the connection fails.
async fn client_gone(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    clock: Option<&ReadClock>,
) {
    loop {
        if buf.len() >= MAX_READ_AHEAD {
            return std::future::pending().await;
        }
        // What the client sends while its request is in flight goes after the request's own
        // bytes, which the request still holds: room is made only once the buffer is full,
        // so a request does not cost a new buffer while it is in flight.
        if buf.len() == buf.capacity() {
            buf.reserve(READ_ROOM);
        }
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => read_timeout::read(clock),
        }
    }
}

/// A lane request's answer.
enum Handled {
    /// Answered by sluice (an error, a rejection): written whole.
    Sluice(Response),
    /// The upstream's answer: the head to send, the body to relay, and the stats of the
    /// task's group when its head counted a success (the body failing makes it a failure).
    Upstream(Vec<u8>, Box<Answer>, Option<Arc<GroupStats>>),
}

/// What a lane request's head let through: its timer, its `X-Opaque-Id` values and what
/// [`crate::server::check_lines`] found.
struct Passed<'a> {
    timer: PinnedTimer<'a>,
    opaque: Vec<HeaderValue>,
    checked: Checked,
}

/// The steps of [`crate::server::app`]'s request layers that need only a lane request's head
/// (L1): its timer started, then [`crate::server::check_lines`] (single-valued headers,
/// authentication, authorization, the request's metadata), before its body is read, as the
/// general path runs them before its handler reads the body. A refusal comes back timed, with
/// the `X-Opaque-Id` echoed.
async fn check<'a>(
    st: &Arc<AppState>,
    peer: SocketAddr,
    route: LaneRoute,
    series: &'a PinnedSeries,
    parts: &http::request::Parts,
    raw: &RawHeaders,
) -> Result<Passed<'a>, Response> {
    let timer = series.start();
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
            timer.record(&st.metrics, refused.status());
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
    passed: Passed<'_>,
    peer: SocketAddr,
    route: LaneRoute,
    parts: Box<http::request::Parts>,
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
    // Boxed (see [`serve_reads`]): the search's state is most of a request's.
    match boxed_in_place(|| lane_search(st, request_meta, route, parts, lane, body, thread)).await {
        Err(e) => {
            let mut resp = e.into_response();
            meta::add_warnings(&warnings, product_of(st), &mut resp);
            if let Some(audited) = audited {
                audited.record(st, resp.status());
            }
            timer.record(&st.metrics, resp.status());
            meta::echo_opaque_id(opaque, &mut resp);
            Handled::Sluice(resp)
        }
        Ok((admitted, answer)) => {
            let status = answer.status;
            let group = status.is_success().then(|| admitted.group().stats.clone());
            // The ticket is released once the answer's head is built, as on the general path.
            drop(admitted);
            if let Some(audited) = audited {
                audited.record(st, status);
            }
            timer.record(&st.metrics, status);
            // The upstream's header lines as they came, but hop-by-hop ones and its
            // `X-Opaque-Id` (the gateway's id for it: the client gets its own back, below).
            let mut head = status_line(status, answer.reason());
            answer.write_headers(&mut head);
            for v in meta::warning_values(&warnings, product_of(st)) {
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
            Handled::Upstream(head, answer, group)
        }
    }
}

/// `make()`'s future on the heap, its box allocated before the future is made, so that the
/// compiler can build it there rather than on the stack and copy it whole into the box, as
/// `Box::pin(make())` did (the release build does: 3.1 KB a search not copied, BENCHMARKS.md
/// "What a search costs beyond its instructions, and fewer copies"). Nothing depends on it:
/// built elsewhere and copied, the future is the same.
fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns, read from its type: nothing is called.
    fn future_size<A, B, C, D, F: Future>(_: impl Fn(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// L5. The bound sits between the loop's own states (2.7 KB in a release build, a little
    /// more in a debug one) and what either boxed future inline makes it (5.7–5.9 KB in a
    /// debug build).
    #[test]
    fn test_an_idle_connections_future_keeps_no_room_for_a_search() {
        let size = future_size(serve_reads);
        assert!(
            size <= 4096,
            "a lane connection's future is {size} bytes: a large future awaited in place?"
        );
    }
}
