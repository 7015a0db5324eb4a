//! The fast lane's HTTP/1.1 exchange with a plain-`http://` upstream (ARCHITECTURE.md
//! "Gateway", "The fast lane"): the request written by hand on a pooled TCP connection and
//! the answer's head parsed with `httparse`, both in the request's own task — no connection
//! task, no channel between the two, no `Request`/`Response` built on the way.
//!
//! Only the fast lane uses it (searches, counts: small bodies the gateway holds whole); every
//! other request goes through [`super::client`]'s hyper client.
//!
//! # Invariants
//! - R1 — a connection carries one exchange at a time: it is out of the pool from checkout
//!   until its answer's body has been read to its end, and goes back only then, and only when
//!   both sides keep it open (no `Connection: close`, the body framed by a length or chunks
//!   and nothing after it). Tested by
//!   `test_upstream_connections_are_reused_and_closed_ones_replaced` (its counts go through
//!   the lane) and `test_an_answer_ending_early_fails_that_request_only`.
//! - R2 — no request is sent on a connection the upstream closed while idle: checkout reads
//!   each pooled connection once without waiting, and one that answers end of stream, bytes
//!   or an error is dropped. A request is sent a second time (on a new connection) only when
//!   the upstream never read it: its reused connection refused the writing, or was reset
//!   before the answer's first byte within [`STALE_RESET_WITHIN`] of the sending (a socket
//!   closed before the data came answers with a reset at once); or, for a `GET` (a safe
//!   method, as the general path's client, `client.rs` C2), closed before the answer's first
//!   byte within that time (the upstream closed it as the request went out). One the upstream
//!   read and then closed the connection on without an answer (a `POST`'s clean end of
//!   stream, or a reset or end later) is not sent again: it is the 502 the general path's
//!   client gives, not a second search on an upstream already failing. Tested by
//!   `test_lane_replaces_connections_the_upstream_closed_without_saying` (it fails with both
//!   the checkout read and the second sending taken out),
//!   `test_a_search_the_upstream_read_is_not_sent_again` and
//!   `test_a_safe_request_whose_connection_closed_as_it_went_out_is_sent_again`.
//! - R3 — dropping an exchange, or failing it half way, closes its connection: the upstream
//!   sees the client leave (its search is cancelled as with hyper's client), and no
//!   connection with unread bytes goes back to the pool. Tested by
//!   `test_cancellation_reaches_the_upstream` through the lane.
//! - R4 — the body is relayed as the upstream framed it, byte for byte: a length, chunks
//!   (passed through, their end found by [`ChunkedEnd`]), or the connection's end (then the
//!   client's connection closes after it too); the client's head frames it that way alone (a
//!   `Content-Length` beside a `Transfer-Encoding` is not relayed, RFC 9112 §6.1). Tested by
//!   `test_chunked_end_*`, the streaming tests through the lane and
//!   `test_odd_but_valid_upstream_heads_are_relayed_whole_and_framed_once`.
//! - R5 — a pooled connection is reused only on the lane thread that opened it
//!   ([`crate::http::threads`] T1): it is registered with that thread's runtime, whose I/O
//!   driver alone sees its answers, so another thread using it would take two wake-ups across
//!   threads a read. Tested by `test_pooled_connections_stay_with_their_thread`.
//! - R6 — a lane thread keeps at most [`MAX_IDLE`] idle connections to a host, none idle much
//!   past [`POOL_IDLE_TIMEOUT`], traffic or not: a burst of many clients leaves the newest
//!   `MAX_IDLE`, as nginx's `keepalive` keeps the most recently used, and the older ones are
//!   closed rather than held (their file descriptors, their buffers, the upstream's end) until
//!   a later burst reaches them; a timer task of the thread's own runtime (R5), running while
//!   its list holds a connection ([`Pool::start_timer`]), closes those that expire with no
//!   exchange coming. Tested by `test_idle_connections_are_capped_and_expire` and
//!   `test_idle_connections_expire_without_traffic`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use parking_lot::Mutex;
use sluice_engine::EngineError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::client::{
    POOL_IDLE_TIMEOUT, failed_to_answer, host_at_fault, no_answer_within, no_host, unreachable,
};
use super::hosts::Hosts;

/// The most an answer's head may take: the hyper client's (its default read buffer's largest,
/// 8 KiB + 100 × 4 KiB), so the lane refuses with a 502 exactly the heads the general path
/// does. OpenSearch's own heads are far below.
const MAX_HEAD: usize = 8192 + 4096 * 100;

/// The most headers an answer's head may have: the hyper client's (OpenSearch sends under
/// ten).
const MAX_HEADERS: usize = 100;

/// The failures of an exchange, worded as the hyper client words them (the general path's
/// 502 says the same): its parse errors, an answer's head too large, a connection that closed
/// in the head or failed.
mod worded {
    pub const HEADER: &str = "invalid HTTP header parsed";
    pub const STATUS: &str = "invalid HTTP status-code parsed";
    pub const VERSION: &str = "invalid HTTP version parsed";
    pub const TOO_LARGE: &str = "message head is too large";
    pub const CONTENT_LENGTH: &str = "invalid content-length parsed";
    pub const INCOMPLETE: &str = "connection closed before message completed";

    /// An `httparse` error as hyper words it.
    pub fn parse(e: httparse::Error) -> &'static str {
        match e {
            httparse::Error::HeaderName
            | httparse::Error::HeaderValue
            | httparse::Error::NewLine
            | httparse::Error::Token => HEADER,
            httparse::Error::Status => STATUS,
            httparse::Error::TooManyHeaders => TOO_LARGE,
            httparse::Error::Version => VERSION,
        }
    }

    /// A failed read or write on the connection.
    pub fn io(e: &std::io::Error) -> String {
        format!("connection error: {e}")
    }

    /// A connection that could not be opened (`None`: not within the connect timeout), as
    /// hyper-util's connector words it.
    pub fn connect(e: Option<&std::io::Error>) -> String {
        match e {
            Some(e) => format!("tcp connect error: {e}"),
            None => "tcp connect error: deadline has elapsed".to_string(),
        }
    }
}

/// What a relay reads from the upstream at a time: a search answer of a few kilobytes arrives
/// in one read, a large one streams through in pieces of this size (the gateway's memory per
/// request stays at this, whatever the answer's size).
const READ_CHUNK: usize = 16 * 1024;

/// The largest read buffer an idle connection keeps for its next answer ([`Pool::put`]): one
/// that grew past it (a large head) is let go rather than held while idle.
const KEPT_BUFFER: usize = 2 * READ_CHUNK;

/// The most idle connections to one host a lane thread keeps (R6): one for each of 64
/// concurrent searches on the thread, twice the 32 clients the gateway benchmark measures
/// and nginx's `keepalive` there; past it a new burst opens connections, about 0.1 ms each on
/// a local network, rather than every past burst's staying open.
const MAX_IDLE: usize = 64;

/// An idle list of one lane thread (R6): the newest at the back.
type Idle<T> = std::collections::VecDeque<(T, Instant)>;

/// Puts `item` back at `now` on `idle` (R6), taking off those idle past `timeout` from the
/// front, then the oldest while more than `cap` remain: answers what was taken off, for the
/// caller to close once it let go of the list's lock.
fn keep_idle<T>(
    idle: &mut Idle<T>,
    item: T,
    now: Instant,
    cap: usize,
    timeout: Duration,
) -> Vec<T> {
    let mut closed = expire(idle, now, timeout);
    idle.push_back((item, now));
    while idle.len() > cap {
        closed.extend(idle.pop_front().map(|(item, _)| item));
    }
    closed
}

/// Takes off `idle` those idle past `timeout` at `now` (the oldest, at the front), answering
/// them for the caller to close once it let go of the list's lock.
fn expire<T>(idle: &mut Idle<T>, now: Instant, timeout: Duration) -> Vec<T> {
    let mut closed = Vec::new();
    while idle
        .front()
        .is_some_and(|(_, at)| now.saturating_duration_since(*at) > timeout)
    {
        closed.extend(idle.pop_front().map(|(item, _)| item));
    }
    closed
}

/// One host's idle connections, by lane thread (R5), each with the buffer its answers were
/// read into: the next answer on it is read into the same memory (a new 16 KiB buffer per
/// search cost about 700 instructions in the allocator, BENCHMARKS.md "Leaner heads").
pub struct Pool {
    idle: Mutex<Vec<ThreadIdle>>,
    /// How long a connection is kept idle: [`POOL_IDLE_TIMEOUT`] (shorter in tests).
    timeout: Duration,
}

/// A lane thread's idle connections to a host, and whether its expiry timer runs (R6).
#[derive(Default)]
struct ThreadIdle {
    list: Idle<(TcpStream, BytesMut)>,
    timer: bool,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::with_timeout(POOL_IDLE_TIMEOUT)
    }
}

impl Pool {
    /// An empty pool whose connections go after `timeout` idle.
    fn with_timeout(timeout: Duration) -> Pool {
        Pool {
            idle: Mutex::default(),
            timeout,
        }
    }

    /// Starts the expiry timer of lane thread `thread`'s list on the current runtime, the
    /// thread's own (R5: its connections' I/O driver is there too), answering whether it runs:
    /// a task that sleeps until the list's oldest connection would expire, closes those
    /// expired then, and ends once the list is empty (a quiet gateway's lane threads wake for
    /// nothing; the next put starts it again). Holds the pool weakly.
    fn start_timer(self: &Arc<Self>, thread: usize) -> bool {
        let pool = Arc::downgrade(self);
        super::client::spawn_expiry(move || {
            let pool = pool.upgrade()?;
            let mut idle = pool.idle.lock();
            let mine = idle.get_mut(thread)?;
            let closed = expire(&mut mine.list, Instant::now(), pool.timeout);
            let next = mine.list.front().map(|(_, at)| *at + pool.timeout);
            if next.is_none() {
                mine.timer = false;
            }
            drop(idle);
            drop(closed);
            next
        })
    }

    /// An idle connection of lane thread `thread` the upstream has not closed (R2, R5),
    /// dropping closed ones and those idle longer than the hyper client's pool keeps them
    /// ([`POOL_IDLE_TIMEOUT`]).
    fn checkout(&self, thread: usize, now: Instant) -> Option<(TcpStream, BytesMut)> {
        loop {
            let ((conn, buf), used) = self.idle.lock().get_mut(thread)?.list.pop_back()?;
            if now.duration_since(used) > self.timeout {
                continue;
            }
            let mut probe = [0u8; 1];
            match conn.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some((conn, buf)),
                // End of stream, bytes nobody asked for, or an error: not reusable.
                _ => continue,
            }
        }
    }

    /// Keeps `conn`, opened on lane thread `thread`, for that thread's next exchange, with
    /// `buf` (emptied) to read its next answer into, unless it grew past [`KEPT_BUFFER`]; the
    /// thread's oldest idle connections beyond [`MAX_IDLE`] or [`POOL_IDLE_TIMEOUT`] are closed
    /// (R6).
    fn put(self: &Arc<Self>, thread: usize, conn: TcpStream, mut buf: BytesMut) {
        buf.clear();
        if buf.capacity() > KEPT_BUFFER {
            buf = BytesMut::new();
        }
        let now = Instant::now();
        let mut idle = self.idle.lock();
        if idle.len() <= thread {
            idle.resize_with(thread + 1, ThreadIdle::default);
        }
        let mine = &mut idle[thread];
        let closed = keep_idle(&mut mine.list, (conn, buf), now, MAX_IDLE, self.timeout);
        if !mine.timer {
            mine.timer = self.start_timer(thread);
        }
        drop(idle);
        drop(closed);
    }
}

/// How an answer's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (`204`, `304`, a `1xx`).
    Empty,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Read to the connection's end.
    Close,
}

/// An answer whose head has arrived; its body is still to be relayed ([`Answer::relay`]).
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The header lines as the upstream sent them (hop-by-hop ones included).
    lines: Bytes,
    /// The status line's reason phrase as the upstream sent it.
    reason: Bytes,
    /// The parts of `lines` relayed to the client ([`relayed_runs`]).
    relayed: Runs,
    /// What the general path would add to the head.
    added: Added,
    conn: TcpStream,
    /// Bytes read past the head: the body's start.
    buf: BytesMut,
    framing: Framing,
    /// Whether the upstream keeps the connection open after this answer.
    keep_alive: bool,
    pool: Arc<Pool>,
    /// The lane thread the connection is pooled for (R5).
    thread: usize,
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
    vary.windows(NEEDLE.len())
        .any(|w| w.eq_ignore_ascii_case(NEEDLE))
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
            4 if name.eq_ignore_ascii_case("date") => self.dated = true,
            4 if name.eq_ignore_ascii_case("vary") => self.varied |= varies_on_encoding(value),
            12 if name.eq_ignore_ascii_case("content-type") && self.content_type.is_none() => {
                self.content_type = Some(type_compressed(value));
            }
            13 if name.eq_ignore_ascii_case("content-range") => self.ranged = true,
            16 if name.eq_ignore_ascii_case("content-encoding") => self.encoded = true,
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
struct AddedBut {
    /// It has a `Date`.
    dated: bool,
    /// The compression layer would vary it if its length allows.
    varies_if_long: bool,
}

/// The fewest body bytes tower-http's default predicate compresses (`SizeAbove`'s default).
const COMPRESS_MIN_SIZE: u64 = 32;

impl AddedBut {
    /// The [`Added`] of an answer framed by `framing`.
    fn added(self, framing: Framing) -> Added {
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

/// How a relay ended for the client's connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Relayed {
    /// The body went out whole and framed: the client's connection may carry its next request.
    Whole,
    /// The body ended with the upstream's connection: the client's connection must close too.
    CloseAfter,
}

/// Why a relay stopped before the end (R3: the upstream connection is closed either way).
#[derive(Debug)]
pub enum RelayError {
    /// The client's connection failed (the client left).
    Client(std::io::Error),
    /// The upstream's answer broke off or was not HTTP.
    Upstream(String),
}

/// The fast lane's side of the upstream client: one pool per host.
pub struct H1 {
    pools: Vec<Arc<Pool>>,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl H1 {
    /// Pools for `hosts` (all `http://`: the lane is off for TLS upstreams).
    pub fn new(hosts: usize, connect_timeout: Duration, request_timeout: Duration) -> H1 {
        H1 {
            pools: (0..hosts).map(|_| Arc::new(Pool::default())).collect(),
            connect_timeout,
            request_timeout,
        }
    }

    /// Sends `call` (its headers as forwarded: `Host` and the length are written here) and
    /// answers once the answer's head arrived; hosts tried as
    /// [`super::client::UpstreamClient::send`] tries them, failures worded as it words them
    /// (502 naming the host and the cause, 504 past `request_timeout`), on connections of lane
    /// thread `thread` (R5): the thread this runs on.
    ///
    /// # Cancel safety
    /// Dropping the future closes the connection it holds (R3).
    pub async fn send(
        &self,
        thread: usize,
        hosts: &Hosts,
        call: &super::Call,
    ) -> Result<Answer, EngineError> {
        let method = &call.method;
        let order = hosts.order(Instant::now());
        let mut last_error = None;
        for (attempt, &i) in order.iter().enumerate() {
            let host = hosts.get(i);
            let request = write_request(
                method,
                &call.path_and_query,
                host.host_header.as_ref(),
                call.raw.as_ref(),
                &call.headers,
                &call.body,
            );
            // The attempt's start, read once: its deadline, and what a reset is timed from (R2).
            let started = tokio::time::Instant::now();
            let exchange = self.exchange(thread, hosts, i, &request, method, started);
            match tokio::time::timeout_at(started + self.request_timeout, exchange).await {
                Ok(Ok(answer)) => {
                    hosts.succeeded(i);
                    return Ok(answer);
                }
                Ok(Err(Failed::Connect(e))) => {
                    let timed_out = e.is_none();
                    last_error = Some(unreachable(
                        hosts,
                        i,
                        attempt,
                        worded::connect(e.as_ref()),
                        timed_out.then_some(self.connect_timeout),
                    ));
                }
                Ok(Err(Failed::Exchange(cause))) => return Err(failed_to_answer(host, &cause)),
                Ok(Err(Failed::NotHttp(cause))) => {
                    let e = failed_to_answer(host, &cause);
                    host_at_fault(hosts, i, &e);
                    return Err(e);
                }
                Err(_) => {
                    let e = no_answer_within(host, self.request_timeout);
                    host_at_fault(hosts, i, &e);
                    return Err(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(no_host))
    }

    /// One attempt on host `i`: a pooled connection or a new one (R2), the request written,
    /// the answer's head read.
    async fn exchange(
        &self,
        thread: usize,
        hosts: &Hosts,
        i: usize,
        request: &[u8],
        method: &Method,
        started: tokio::time::Instant,
    ) -> Result<Answer, Failed> {
        let head_only = *method == Method::HEAD;
        let pool = &self.pools[i];
        let mut reused = true;
        let (mut conn, mut buf) = match pool.checkout(thread, Instant::now()) {
            Some(c) => c,
            None => {
                reused = false;
                (self.connect(hosts, i).await?, BytesMut::new())
            }
        };
        loop {
            match round_trip(&mut conn, &mut buf, request, started).await {
                Ok(head) => {
                    return finish_head(head, conn, buf, head_only, pool.clone(), thread);
                }
                // The reused connection was gone before the upstream read the request: once
                // more on a new one (R2).
                Err(RoundTrip::Unread(_)) if reused => {
                    reused = false;
                    conn = self.connect(hosts, i).await?;
                }
                // A `GET` whose reused connection the upstream closed before any answer, at
                // once: closed as the request went out, as the general path's client takes it
                // (R2, `client.rs` C2).
                Err(RoundTrip::BeforeAnswer(e))
                    if reused
                        && *method == Method::GET
                        && e.kind() == std::io::ErrorKind::UnexpectedEof
                        && started.elapsed() < STALE_RESET_WITHIN =>
                {
                    reused = false;
                    conn = self.connect(hosts, i).await?;
                }
                Err(RoundTrip::Unread(e) | RoundTrip::BeforeAnswer(e))
                    if e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    return Err(Failed::Exchange(worded::INCOMPLETE.to_string()));
                }
                Err(RoundTrip::Unread(e) | RoundTrip::BeforeAnswer(e)) => {
                    return Err(Failed::Exchange(worded::io(&e)));
                }
                Err(RoundTrip::Answer(cause)) => return Err(Failed::Exchange(cause)),
                Err(RoundTrip::NotHttp(cause)) => return Err(Failed::NotHttp(cause)),
            }
        }
    }

    /// Opens a connection to host `i` within `connect_timeout`.
    async fn connect(&self, hosts: &Hosts, i: usize) -> Result<TcpStream, Failed> {
        let base = &hosts.get(i).base;
        let host = base.host().unwrap_or("localhost");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = base.port_u16().unwrap_or(80);
        let conn = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| Failed::Connect(None))?
            .map_err(|e| Failed::Connect(Some(e)))?;
        // Requests and answers go out at once, as `tcp_nodelay` (see `crate::http::serve`).
        let _ = conn.set_nodelay(true);
        Ok(conn)
    }
}

/// Why an attempt failed.
enum Failed {
    /// No connection could be opened (`None`: not within the connect timeout): the host
    /// rests.
    Connect(Option<std::io::Error>),
    /// The exchange failed on an open connection.
    Exchange(String),
    /// The host answered something that is not an HTTP answer head (or one too large): the
    /// host rests, as one that cannot be reached.
    NotHttp(String),
}

/// Why a round trip failed.
enum RoundTrip {
    /// The upstream never read the request: the connection refused the writing, or was reset
    /// before the answer's first byte (R2).
    Unread(std::io::Error),
    /// Before the answer's first byte, otherwise (the upstream ended the connection): it may
    /// have read the request.
    BeforeAnswer(std::io::Error),
    /// The answer broke off.
    Answer(String),
    /// The answer is not HTTP, or its head is too large.
    NotHttp(String),
}

/// A parsed answer head: what the gateway needs of it, and its header lines as they came.
struct Head {
    status: StatusCode,
    /// The header lines as the upstream sent them, or as [`Head::rebuilt`] holds them.
    lines: Bytes,
    /// Where the header lines are in the head: after the status line, before the empty line
    /// that ends the head.
    lines_at: std::ops::Range<usize>,
    /// The relayed header lines written anew, each ending with CRLF, when one of the
    /// upstream's ends with a bare LF (which httparse, and so hyper, accept): relayed as they
    /// came, they would end the client's head there. `relayed` then covers them whole.
    rebuilt: Option<Bytes>,
    /// The status line's reason phrase, as the upstream sent it.
    reason: Bytes,
    /// Where the reason phrase is in the head.
    reason_at: std::ops::Range<usize>,
    /// How the body is delimited (for an answer to anything but `HEAD`).
    framing: Framing,
    /// Whether the upstream keeps the connection open after this answer.
    keep_alive: bool,
    /// The parts of `lines` relayed to the client ([`relayed_runs`]).
    relayed: Runs,
    /// What decides the general path's additions.
    added: AddedBut,
}

/// How soon after the request was sent a reset still means the upstream never read it, and a
/// close that it closed the connection as the request went out (R2; the general path's
/// client's window too, `client.rs` C2):
/// a connection that was gone before the request came is reset within one round trip, far
/// below this on any network a gateway sits on; an upstream that read the request and reset
/// the connection later (closing it with `SO_LINGER` 0, or a proxy before it aborting) had the
/// search, and gets no second one.
pub(super) const STALE_RESET_WITHIN: Duration = Duration::from_millis(250);

/// Writes `request` and reads until an answer's head (a final one: `1xx` heads are skipped)
/// into `buf` (the connection's, empty), which holds what was read past the head after.
/// `started` is the attempt's start (its checkout and writing take microseconds): a reset is
/// timed from it, so that the common path reads no clock of its own.
async fn round_trip(
    conn: &mut TcpStream,
    buf: &mut BytesMut,
    request: &[u8],
    started: tokio::time::Instant,
) -> Result<Head, RoundTrip> {
    conn.write_all(request).await.map_err(RoundTrip::Unread)?;
    buf.clear();
    buf.reserve(READ_CHUNK);
    let mut answered = false;
    loop {
        let n = conn.read_buf(buf).await.map_err(|e| {
            if answered {
                RoundTrip::Answer(worded::io(&e))
            } else if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ) && started.elapsed() < STALE_RESET_WITHIN
            {
                RoundTrip::Unread(e)
            } else {
                RoundTrip::BeforeAnswer(e)
            }
        })?;
        if n == 0 {
            return Err(if answered {
                RoundTrip::Answer(worded::INCOMPLETE.to_string())
            } else {
                RoundTrip::BeforeAnswer(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed before message completed",
                ))
            });
        }
        answered = true;
        while let Some((mut head, len)) = parse_head(buf).map_err(RoundTrip::NotHttp)? {
            let raw = buf.split_to(len).freeze();
            head.lines = match head.rebuilt.take() {
                Some(lines) => lines,
                None => raw.slice(head.lines_at.clone()),
            };
            head.reason = raw.slice(head.reason_at.clone());
            if head.status.is_informational() {
                continue;
            }
            return Ok(head);
        }
        if buf.len() >= MAX_HEAD {
            return Err(RoundTrip::NotHttp(worded::TOO_LARGE.to_string()));
        }
    }
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
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, String> {
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
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // The last coding decides; anything but chunked last runs to the connection's end.
            chunked = Some(
                value()
                    .rsplit(',')
                    .next()
                    .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked")),
            );
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = content_length(h.value).ok_or_else(|| worded::CONTENT_LENGTH.to_string())?;
            if length.is_some_and(|l| l != n) {
                return Err(worded::CONTENT_LENGTH.to_string());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in super::headers::connection_tokens(h.value) {
                if token.eq_ignore_ascii_case(b"close") {
                    closes = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
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
        NOT_RELAYED.iter().any(|n| n.eq_ignore_ascii_case(name))
            || (drop_length && name.eq_ignore_ascii_case("content-length"))
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

/// The answer of `head` on `conn` (pooled for lane thread `thread`), `buf` holding what was
/// read past the head.
fn finish_head(
    head: Head,
    conn: TcpStream,
    buf: BytesMut,
    head_only: bool,
    pool: Arc<Pool>,
    thread: usize,
) -> Result<Answer, Failed> {
    let framing = if head_only {
        Framing::Empty
    } else {
        head.framing
    };
    Ok(Answer {
        status: head.status,
        lines: head.lines,
        reason: head.reason,
        relayed: head.relayed,
        added: head.added.added(framing),
        conn,
        buf,
        framing,
        keep_alive: head.keep_alive,
        pool,
        thread,
    })
}

/// Where an answer's relayed header lines are, as runs of adjacent lines: `(start, end)` byte
/// offsets in its header lines. Most answers are one run (all their lines) or two (all but the
/// upstream's `X-Opaque-Id`), kept inline.
type Runs = smallvec::SmallVec<[(u32, u32); 4]>;

/// The header names the lane never relays, lowercase: [`super::headers::HOP_BY_HOP`]'s
/// (compared as text, since a standard `HeaderName`'s text is a table lookup;
/// `test_hop_by_hop_names_agree` checks the two lists agree), and the upstream's `X-Opaque-Id`, which is the gateway's id for
/// its call (the client gets its own back from the lane).
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
fn relayed_runs(
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

/// A lane request's header lines as the client sent them, forwarded from its own bytes rather
/// than from a header map (the lane's [`super::Call::raw`]): where each line's name and value
/// are in `request`, the request's bytes as the lane read them. Those the identity drops are
/// removed before sending ([`super::headers::Identity::outbound_raw`]). The request's steps
/// read them too, through [`crate::http::header_lines::HeaderLines`].
///
/// Only for a request the lane took: one whose `Connection` header names nothing but
/// `keep-alive` (a hop-by-hop header the identity drops anyway), so no other header is
/// hop-by-hop by being named there, and whose names and values are valid HTTP (httparse
/// parsed them, whose parse hyper trusts as valid names and values).
pub struct RawHeaders {
    request: Bytes,
    lines: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl RawHeaders {
    /// The lines of `request` at `lines` (each a name's and its value's byte ranges).
    pub fn new(
        request: Bytes,
        lines: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    ) -> RawHeaders {
        RawHeaders { request, lines }
    }

    /// Each line's name (as sent) and value, in order.
    pub fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.lines
            .iter()
            .map(|(name, value)| (&self.request[name.clone()], &self.request[value.clone()]))
    }

    /// The values of the lines named `name` (compared without case), sharing the request's
    /// bytes.
    pub fn shared_values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = Bytes> + 'a {
        self.lines
            .iter()
            .filter(move |(n, _)| self.request[n.clone()].eq_ignore_ascii_case(name))
            .map(|(_, value)| self.request.slice(value.clone()))
    }

    /// Keeps the lines whose name (as sent) `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&[u8]) -> bool) {
        let request = &self.request;
        self.lines.retain(|(name, _)| keep(&request[name.clone()]));
    }

    /// Appends the lines to `out` as a header map would write them (names lowercase), but
    /// those whose name `replaced` holds (the gateway's own, written after) and `Host` and
    /// `Content-Length` (written by [`write_request`]).
    fn write(&self, replaced: &HeaderMap, out: &mut Vec<u8>) {
        // The names replaced, as text once (a standard name's text is a table lookup).
        let replaced: smallvec::SmallVec<[&[u8]; 4]> =
            replaced.keys().map(|k| k.as_str().as_bytes()).collect();
        for (name, value) in &self.lines {
            let name = &self.request[name.clone()];
            let skip = name.eq_ignore_ascii_case(b"host")
                || name.eq_ignore_ascii_case(b"content-length")
                || replaced.iter().any(|k| k.eq_ignore_ascii_case(name));
            if skip {
                continue;
            }
            let at = out.len();
            out.extend_from_slice(name);
            out[at..].make_ascii_lowercase();
            out.extend_from_slice(b": ");
            out.extend_from_slice(&self.request[value.clone()]);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// The request's bytes: request line, `Host`, the forwarded headers, the length, the body.
pub(super) fn write_request(
    method: &Method,
    path_and_query: &str,
    host: Option<&HeaderValue>,
    raw: Option<&RawHeaders>,
    headers: &HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let lines = raw.map_or(0, |r| r.lines.len()) + headers.len();
    let mut out = Vec::with_capacity(256 + path_and_query.len() + lines * 48 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(raw) = raw {
        raw.write(headers, &mut out);
    }
    for (name, value) in headers {
        if name == http::header::HOST || name == http::header::CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // None for an empty body, whatever the method: hyper's client, which sends the general
    // path's searches, writes none for a body that ends at once (an outside trial found the
    // lane's empty `POST`s framed with `content-length: 0` where the general path's were not).
    if !body.is_empty() {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

impl Answer {
    /// Appends the answer's header lines to `out` but hop-by-hop ones (RFC 9110 §7.6.1, and
    /// those the `Connection` header names) and the upstream's `X-Opaque-Id` (the gateway's
    /// id for its call), each as the upstream wrote it.
    pub fn write_headers(&self, out: &mut Vec<u8>) {
        for &(start, end) in &self.relayed {
            out.extend_from_slice(&self.lines[start as usize..end as usize]);
        }
    }

    /// Relays the body to `client` after `head` (the gateway's response head, written with the
    /// body's first bytes in one write), as the upstream framed it (R4); the connection goes
    /// back to the pool when the body ended cleanly and both sides keep it (R1).
    ///
    /// # Cancel safety
    /// Dropping the future closes the upstream connection (R3); the client's connection may
    /// then hold part of the answer and must be closed by the caller.
    pub async fn relay(self, head: Vec<u8>, client: &mut TcpStream) -> Result<Relayed, RelayError> {
        let Answer {
            mut conn,
            mut buf,
            framing,
            keep_alive,
            pool,
            thread,
            lines,
            reason,
            ..
        } = self;
        // They share `buf`'s memory, which the connection keeps once they are gone (no copy).
        drop((lines, reason));
        let mut out = head;
        let clean = match framing {
            Framing::Empty => {
                client.write_all(&out).await.map_err(RelayError::Client)?;
                buf.is_empty()
            }
            Framing::Length(total) => {
                let mut left = total;
                loop {
                    let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&buf[..take]);
                    buf.advance(take);
                    left -= take as u64;
                    client.write_all(&out).await.map_err(RelayError::Client)?;
                    out.clear();
                    if left == 0 {
                        break buf.is_empty();
                    }
                    read_more(&mut conn, &mut buf).await?;
                }
            }
            Framing::Chunked => {
                let mut end = ChunkedEnd::default();
                loop {
                    let done = end.feed(&buf).map_err(RelayError::Upstream)?;
                    let take = done.unwrap_or(buf.len());
                    out.extend_from_slice(&buf[..take]);
                    buf.advance(take);
                    client.write_all(&out).await.map_err(RelayError::Client)?;
                    out.clear();
                    if done.is_some() {
                        break buf.is_empty();
                    }
                    read_more(&mut conn, &mut buf).await?;
                }
            }
            Framing::Close => {
                loop {
                    out.extend_from_slice(&buf);
                    buf.clear();
                    client.write_all(&out).await.map_err(RelayError::Client)?;
                    out.clear();
                    buf.reserve(READ_CHUNK);
                    let n = conn
                        .read_buf(&mut buf)
                        .await
                        .map_err(|e| RelayError::Upstream(e.to_string()))?;
                    if n == 0 {
                        break;
                    }
                }
                return Ok(Relayed::CloseAfter);
            }
        };
        if clean && keep_alive {
            pool.put(thread, conn, buf);
        }
        Ok(Relayed::Whole)
    }

    /// The status line's reason phrase as the upstream sent it, which the general path relays
    /// too (hyper keeps one other than the status's usual one, and writes it back).
    pub fn reason(&self) -> &[u8] {
        &self.reason
    }

    /// What the general path would add to the answer's head.
    pub fn added(&self) -> Added {
        self.added
    }

    /// How many bytes of the body were read with the head.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the body is framed by chunks (the client's head must then say so too).
    pub fn is_chunked(&self) -> bool {
        self.framing == Framing::Chunked
    }

    /// Whether the body runs to the connection's end (the client's connection closes after it).
    pub fn closes(&self) -> bool {
        self.framing == Framing::Close
    }
}

/// Reads more of a body that is not complete yet; the connection ending is the answer
/// breaking off.
async fn read_more(conn: &mut TcpStream, buf: &mut BytesMut) -> Result<(), RelayError> {
    buf.reserve(READ_CHUNK);
    match conn.read_buf(buf).await {
        Ok(0) => Err(RelayError::Upstream(
            "the connection closed before the answer's end".to_string(),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(RelayError::Upstream(e.to_string())),
    }
}

/// Finds where a chunked body ends (RFC 9112 §7.1), fed the body's bytes as they arrive; the
/// bytes themselves are relayed unchanged.
#[derive(Debug, Default)]
pub struct ChunkedEnd {
    state: Chunk,
    /// The size of the chunk whose size line is being read.
    size: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In the size's hex digits.
    #[default]
    Size,
    /// After the size: extensions or whitespace up to the line's end.
    SizeRest,
    /// After the size line's `\r`.
    SizeLf,
    /// In the data, this many bytes left.
    Data(u64),
    /// After the data: `\r` expected.
    DataCr,
    /// After the data's `\r`: `\n` expected.
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// In a trailer line.
    Trailer,
    /// After the final line's `\r`.
    EndLf,
    /// The body ended.
    Done,
}

impl ChunkedEnd {
    /// Feeds the next bytes: `Some(n)` when the body ends after the first `n` of them.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, String> {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            self.state = match self.state {
                Chunk::Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        self.size = self
                            .size
                            .checked_mul(16)
                            .and_then(|s| s.checked_add(u64::from(d)))
                            .ok_or("a chunk's size is too large")?;
                        Chunk::Size
                    }
                    None if b == b'\r' => Chunk::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => Chunk::SizeRest,
                    None => return Err("a chunk's size is not hexadecimal".to_string()),
                },
                Chunk::SizeRest => match b {
                    b'\r' => Chunk::SizeLf,
                    b'\n' => return Err("a chunk's size line ends without CR".to_string()),
                    _ => Chunk::SizeRest,
                },
                Chunk::SizeLf if b == b'\n' => {
                    let size = std::mem::take(&mut self.size);
                    if size == 0 {
                        Chunk::TrailerStart
                    } else {
                        Chunk::Data(size)
                    }
                }
                Chunk::Data(left) => {
                    let avail = (bytes.len() - i) as u64;
                    let take = avail.min(left);
                    // `take` is at most what is left of `bytes`, so it fits in a usize.
                    i += take as usize;
                    self.state = if take == left {
                        Chunk::DataCr
                    } else {
                        Chunk::Data(left - take)
                    };
                    continue;
                }
                Chunk::DataCr if b == b'\r' => Chunk::DataLf,
                Chunk::DataLf if b == b'\n' => Chunk::Size,
                Chunk::TrailerStart if b == b'\r' => Chunk::EndLf,
                Chunk::TrailerStart | Chunk::Trailer => {
                    if b == b'\n' {
                        Chunk::TrailerStart
                    } else {
                        Chunk::Trailer
                    }
                }
                Chunk::EndLf if b == b'\n' => {
                    self.state = Chunk::Done;
                    return Ok(Some(i + 1));
                }
                Chunk::Done => return Ok(Some(i)),
                _ => return Err("the chunked body is malformed".to_string()),
            };
            i += 1;
        }
        Ok((self.state == Chunk::Done).then_some(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_idle_connections_are_capped_and_expire() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let timeout = Duration::from_millis(1000);
        let mut idle = Idle::new();
        // A burst of five put back at once on a list of three: the newest three stay, the
        // two oldest are closed.
        let mut closed = Vec::new();
        for i in 0..5 {
            closed.extend(keep_idle(&mut idle, i, at(i), 3, timeout));
        }
        assert_eq!(closed, vec![0, 1]);
        assert_eq!(
            idle.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        // The newest is taken first (the checkout pops the back).
        assert_eq!(idle.pop_back().map(|(i, _)| i), Some(4));
        // Put back after the others' timeout: they are closed, it alone stays.
        let closed = keep_idle(&mut idle, 4, at(1004), 3, timeout);
        assert_eq!(closed, vec![2, 3]);
        assert_eq!(idle.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![4]);
        // At the timeout itself, still kept.
        let closed = keep_idle(&mut idle, 5, at(2004), 3, timeout);
        assert!(closed.is_empty());
        assert_eq!(idle.len(), 2);
    }

    #[tokio::test]
    async fn test_idle_connections_expire_without_traffic() {
        // Connections put back on two threads' lists of a pool whose timeout is short, and no
        // exchange after: each thread's timer closes its own once idle past it, then stops.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::with_timeout(Duration::from_millis(100)));
        let mut accepted = Vec::new();
        for thread in [0, 1, 1] {
            let conn = TcpStream::connect(addr).await.unwrap();
            accepted.push(listener.accept().await.unwrap().0);
            pool.put(thread, conn, BytesMut::new());
        }
        assert!(pool.idle.lock().iter().all(|t| t.timer));
        for server in &mut accepted {
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(10), server.read(&mut buf)).await;
            assert!(matches!(read, Ok(Ok(0) | Err(_))), "still open: {read:?}");
        }
        // Each timer let go of its last connection (and stopped) before it closed it.
        let idle = pool.idle.lock();
        assert!(idle.iter().all(|t| t.list.is_empty() && !t.timer));
    }

    #[tokio::test]
    async fn test_pooled_connections_stay_with_their_thread() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::default());
        let mut accepted = Vec::new();
        for thread in [1, 0, 1] {
            let conn = TcpStream::connect(addr).await.unwrap();
            accepted.push(listener.accept().await.unwrap().0);
            pool.put(thread, conn, BytesMut::new());
        }
        let now = Instant::now();
        // Thread 2 never pooled one: it opens its own rather than take another thread's.
        assert!(pool.checkout(2, now).is_none());
        assert!(pool.checkout(0, now).is_some());
        assert!(pool.checkout(0, now).is_none());
        assert!(pool.checkout(1, now).is_some());
        assert!(pool.checkout(1, now).is_some());
        assert!(pool.checkout(1, now).is_none());
        drop(accepted);
    }

    #[tokio::test]
    async fn test_an_idle_connection_keeps_its_buffer_unless_it_grew() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::default());
        let mut accepted = Vec::new();
        for capacity in [READ_CHUNK, KEPT_BUFFER + 1] {
            let conn = TcpStream::connect(addr).await.unwrap();
            accepted.push(listener.accept().await.unwrap().0);
            let mut buf = BytesMut::with_capacity(capacity);
            buf.extend_from_slice(b"left over");
            pool.put(0, conn, buf);
        }
        let now = Instant::now();
        // The last one put is taken first: the one that grew comes back without its buffer.
        let (_, grown) = pool.checkout(0, now).unwrap();
        assert_eq!(grown.capacity(), 0);
        let (_, kept) = pool.checkout(0, now).unwrap();
        assert!(kept.is_empty());
        assert!(kept.capacity() >= READ_CHUNK);
        drop(accepted);
    }

    const BODY: &[u8] = b"4\r\nWiki\r\n7;ext=1\r\npedia i\r\n0\r\nx-t: 1\r\n\r\nNEXT";

    #[test]
    fn test_chunked_end_is_found_whatever_the_pieces() {
        let end = BODY.len() - 4;
        // Every split into two pieces finds the same end.
        for cut in 0..=BODY.len() {
            let mut c = ChunkedEnd::default();
            let first = c.feed(&BODY[..cut]).unwrap();
            let found = match first {
                Some(n) => n,
                None => cut + c.feed(&BODY[cut..]).unwrap().expect("ends"),
            };
            assert_eq!(found, end, "cut at {cut}");
        }
        // Byte by byte.
        let mut c = ChunkedEnd::default();
        let mut at = None;
        for (i, b) in BODY.iter().enumerate() {
            if let Some(n) = c.feed(std::slice::from_ref(b)).unwrap() {
                at = Some(i + n);
                break;
            }
        }
        assert_eq!(at, Some(end));
    }

    #[test]
    fn test_chunked_end_refuses_malformed_bodies() {
        for bad in [
            &b"zz\r\n"[..],
            b"3\r\nabcX",
            b"3\n",
            b"fffffffffffffffff\r\n",
        ] {
            assert!(ChunkedEnd::default().feed(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ChunkedEnd::default().feed(b"0\r\n\r\n").unwrap(), Some(5));
    }

    /// The head at the start of `raw`, its lines and reason cut as [`round_trip`] cuts them.
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
        use super::super::headers::HOP_BY_HOP;
        let hop: Vec<&str> = HOP_BY_HOP.iter().map(|h| h.as_str()).collect();
        assert_eq!(hop, NOT_RELAYED[..HOP_BY_HOP.len()]);
        assert_eq!(NOT_RELAYED[HOP_BY_HOP.len()..], ["x-opaque-id"]);
    }

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
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /i/_search?x=1 HTTP/1.1\r\nhost: up:9200\r\nx-opaque-id: a\r\ncontent-length: 2\r\n\r\n{}"
        );
        for method in [Method::GET, Method::POST] {
            let out = write_request(&method, "/_count", None, None, &HeaderMap::new(), b"");
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{method} /_count HTTP/1.1\r\n\r\n")
            );
        }
    }
}
