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
//!   `Content-Length` beside a `Transfer-Encoding` is not relayed, RFC 9112 §6.1). The head
//!   and the body's first bytes go out in one `writev` ([`write_after`]), whole however the
//!   socket takes them. Tested by `test_chunked_end_*`, the streaming tests through the lane,
//!   `test_odd_but_valid_upstream_heads_are_relayed_whole_and_framed_once` and
//!   `test_a_head_and_body_taken_in_pieces_arrive_whole`.
//! - R5 — a pooled connection is reused only on the lane thread that opened it
//!   ([`crate::http::threads`] T1): it is registered with that thread's runtime, whose I/O
//!   driver alone sees its answers, so another thread using it would take two wake-ups across
//!   threads a read. Each thread's idle list is an allocation of its own, which only that
//!   thread writes ([`ThreadPool`]). Tested by `test_pooled_connections_stay_with_their_thread`.
//! - R6 — a lane thread keeps at most [`MAX_IDLE`](pool::MAX_IDLE) idle connections to a
//!   host, none idle much past [`POOL_IDLE_TIMEOUT`](super::client::POOL_IDLE_TIMEOUT),
//!   traffic or not: a burst of many clients leaves the newest `MAX_IDLE`, as nginx's
//!   `keepalive` keeps the most recently used, and the older ones are closed rather than held
//!   (their file descriptors, their buffers, the upstream's end) until a later burst reaches
//!   them; a timer task of the thread's own runtime (R5), running while its list holds a
//!   connection ([`ThreadPool::start_timer`]), closes those that expire with no exchange coming.
//!   Tested by `test_idle_connections_are_capped_and_expire` and
//!   `test_idle_connections_expire_without_traffic`.
//! - R7 — a body is relayed only while its bytes keep coming: each wait for the upstream's
//!   next bytes is bounded by `request_timeout` ([`IdleBound`], nginx's `proxy_read_timeout`;
//!   `streamed.rs` E2 for the general path), one deadline per answer set by a read that
//!   waits (an answer that came with its head sets none). Past it the relay fails
//!   ([`RelayError::Silent`]): the connection is closed (R3), never pooled, and the lane closes
//!   the client's (its head is out: no error status can be given). Tested by
//!   `test_an_upstream_silent_mid_answer_closes_the_clients_connection`.

mod chunked;
mod head;
mod pool;
mod request;

pub use chunked::ChunkedEnd;
pub use head::{Added, content_length, varies_on_encoding};
pub use pool::{Pool, ThreadPool};
pub use request::RawHeaders;
pub(super) use request::write_request;

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, StatusCode};
use sluice_engine::EngineError;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::client::{failed_to_answer, host_at_fault, no_answer_within, no_host, unreachable};
use super::hosts::Hosts;
use super::streamed::IdleBound;
use head::{Framing, Head, MAX_HEAD, Runs, parse_head};

/// The failures of an exchange, worded as the hyper client words them (the general path's
/// 502 says the same): its parse errors, an answer's head too large, a connection that closed
/// in the head or failed.
pub(super) mod worded {
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

/// An answer whose head has arrived; its body is still to be relayed ([`Answer::relay`]).
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The header lines as the upstream sent them (hop-by-hop ones included).
    lines: Bytes,
    /// The status line's reason phrase as the upstream sent it.
    reason: Bytes,
    /// The parts of `lines` relayed to the client ([`relayed_runs`](head::relayed_runs)).
    relayed: Runs,
    /// What the general path would add to the head.
    added: Added,
    conn: TcpStream,
    /// Bytes read past the head: the body's start.
    buf: BytesMut,
    framing: Framing,
    /// Whether the upstream keeps the connection open after this answer.
    keep_alive: bool,
    /// The bound on each wait for the body's next bytes (R7): `request_timeout`.
    idle: Duration,
    /// The idle list of the lane thread the connection is pooled for (R5); `None`: a thread
    /// the pool keeps none for.
    pool: Option<Arc<ThreadPool>>,
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
    /// The upstream sent nothing more of the answer within this bound (R7).
    Silent(Duration),
}

/// The fast lane's side of the upstream client: one pool per host.
pub struct H1 {
    pools: Vec<Pool>,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl H1 {
    /// Pools for `hosts` (all `http://`: the lane is off for TLS upstreams).
    pub fn new(hosts: usize, connect_timeout: Duration, request_timeout: Duration) -> H1 {
        H1 {
            pools: (0..hosts).map(|_| Pool::default()).collect(),
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
        first: tokio::time::Instant,
    ) -> Result<Box<Answer>, EngineError> {
        let method = &call.method;
        // `first`, the moment the execution started, is the hosts' order's time and the first
        // attempt's start, give or take the microseconds of writing the request: one clock
        // reading for the three.
        let order = hosts.order(first.into_std());
        let mut last_error = None;
        for (attempt, &i) in order.iter().enumerate() {
            let host = hosts.get(i);
            // The attempt's start, read once: its deadline, the age its pooled connection is
            // checked against, and what a reset is timed from (R2).
            let started = if attempt == 0 {
                first
            } else {
                tokio::time::Instant::now()
            };
            let request = write_request(
                method,
                &call.path_and_query,
                host.host_header.as_ref(),
                call.raw.as_ref(),
                &call.headers,
                &call.body,
            )?;
            // Pinned here, borrowed by the deadline (`deadline::lane::within`).
            let exchange =
                std::pin::pin!(self.exchange(thread, hosts, i, &request, method, started));
            // A stall of the gateway does not turn an answer that came meanwhile into a 504
            // that puts a healthy host in back-off (`deadline` D1). The deadline is held in the
            // lane thread's own list, not tokio's timer wheel (`deadline::lane`).
            match crate::deadline::lane::within(started + self.request_timeout, exchange).await {
                Ok(Ok(answer)) => {
                    hosts.succeeded(i);
                    return Ok(answer);
                }
                Ok(Err(Failed::Connect(e))) => {
                    let timed_out = e.is_none();
                    last_error = Some(unreachable(
                        hosts,
                        i,
                        started.into_std(),
                        attempt,
                        worded::connect(e.as_ref()),
                        timed_out.then_some(self.connect_timeout),
                    ));
                }
                Ok(Err(Failed::Exchange(cause))) => return Err(failed_to_answer(host, &cause)),
                Ok(Err(Failed::NotHttp(cause))) => {
                    let e = failed_to_answer(host, &cause);
                    host_at_fault(hosts, i, started.into_std(), &e);
                    return Err(e);
                }
                Err(_) => {
                    let e = no_answer_within(host, self.request_timeout);
                    host_at_fault(hosts, i, started.into_std(), &e);
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
    ) -> Result<Box<Answer>, Failed> {
        let head_only = *method == Method::HEAD;
        let pool = &self.pools[i];
        let mut reused = true;
        let (mut conn, mut buf) = match pool.checkout(thread, started.into_std()) {
            Some(c) => c,
            None => {
                reused = false;
                (self.connect_boxed(hosts, i).await?, BytesMut::new())
            }
        };
        loop {
            match round_trip(&mut conn, &mut buf, request, started).await {
                Ok(head) => {
                    let pooled = pool.thread(thread).cloned();
                    return finish_head(head, conn, buf, head_only, self.request_timeout, pooled);
                }
                // The reused connection was gone before the upstream read the request: once
                // more on a new one (R2).
                Err(RoundTrip::Unread(_)) if reused => {
                    reused = false;
                    conn = self.connect_boxed(hosts, i).await?;
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
                    conn = self.connect_boxed(hosts, i).await?;
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

    /// [`Self::connect`] with its future on the heap: a connection is opened once for many
    /// requests, and inline its state (the resolver's and the deadline's, hundreds of bytes)
    /// would be room in every request's future, copied whenever that future moves and kept by
    /// every idle client connection (BENCHMARKS.md "Idle connections").
    fn connect_boxed<'a>(
        &'a self,
        hosts: &'a Hosts,
        i: usize,
    ) -> Pin<Box<dyn Future<Output = Result<TcpStream, Failed>> + Send + 'a>> {
        Box::pin(self.connect(hosts, i))
    }

    /// Opens a connection to host `i` within `connect_timeout`.
    async fn connect(&self, hosts: &Hosts, i: usize) -> Result<TcpStream, Failed> {
        let base = &hosts.get(i).base;
        let host = base.host().unwrap_or("localhost");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = base.port_u16().unwrap_or(80);
        let by = tokio::time::Instant::now() + self.connect_timeout;
        let conn = crate::deadline::within(by, std::pin::pin!(TcpStream::connect((host, port))))
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

/// The answer of `head` on `conn` (pooled in `pool`, its lane thread's list), `buf` holding
/// what was read past the head, each wait for its body's next bytes bounded by `idle` (R7).
///
/// Boxed where it is made: its 232 bytes were otherwise moved from future to future up to the
/// relay, about a dozen `memcpy`s a search (BENCHMARKS.md "The allocator's cache trims, and
/// the answer boxed").
fn finish_head(
    head: Head,
    conn: TcpStream,
    buf: BytesMut,
    head_only: bool,
    idle: Duration,
    pool: Option<Arc<ThreadPool>>,
) -> Result<Box<Answer>, Failed> {
    let framing = if head_only {
        Framing::Empty
    } else {
        head.framing
    };
    Ok(Box::new(Answer {
        status: head.status,
        lines: head.lines,
        reason: head.reason,
        relayed: head.relayed,
        added: head.added.added(framing),
        conn,
        buf,
        framing,
        keep_alive: head.keep_alive,
        idle,
        pool,
    }))
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
    /// body's first bytes in one `writev`), as the upstream framed it (R4), each wait for the
    /// upstream's next bytes bounded (R7); the connection goes back to the pool when the body
    /// ended cleanly and both sides keep it (R1). The body's bytes go out from the buffer they
    /// were read into, never copied behind the head.
    ///
    /// # Cancel safety
    /// Dropping the future closes the upstream connection (R3); the client's connection may
    /// then hold part of the answer and must be closed by the caller.
    pub async fn relay(
        self: Box<Self>,
        head: Vec<u8>,
        client: &mut (impl AsyncWrite + Unpin),
    ) -> Result<Relayed, RelayError> {
        let Answer {
            mut conn,
            mut buf,
            framing,
            keep_alive,
            idle,
            pool,
            lines,
            reason,
            ..
        } = *self;
        // They share `buf`'s memory, which the connection keeps once they are gone (no copy).
        drop((lines, reason));
        let mut idle = IdleBound::new(idle);
        // Written before the body's first bytes, then empty.
        let mut head = &head[..];
        let clean = match framing {
            Framing::Empty => {
                client.write_all(head).await.map_err(RelayError::Client)?;
                buf.is_empty()
            }
            Framing::Length(total) => {
                let mut left = total;
                loop {
                    let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    write_after(client, head, &buf[..take])
                        .await
                        .map_err(RelayError::Client)?;
                    head = &[];
                    buf.advance(take);
                    left -= take as u64;
                    if left == 0 {
                        break buf.is_empty();
                    }
                    read_more(&mut conn, &mut buf, &mut idle).await?;
                }
            }
            Framing::Chunked => {
                let mut end = ChunkedEnd::default();
                loop {
                    let done = end.feed(&buf).map_err(RelayError::Upstream)?;
                    let take = done.unwrap_or(buf.len());
                    write_after(client, head, &buf[..take])
                        .await
                        .map_err(RelayError::Client)?;
                    head = &[];
                    buf.advance(take);
                    if done.is_some() {
                        break buf.is_empty();
                    }
                    read_more(&mut conn, &mut buf, &mut idle).await?;
                }
            }
            Framing::Close => {
                loop {
                    write_after(client, head, &buf)
                        .await
                        .map_err(RelayError::Client)?;
                    head = &[];
                    buf.clear();
                    if read_bounded(&mut conn, &mut buf, &mut idle).await? == 0 {
                        break;
                    }
                }
                return Ok(Relayed::CloseAfter);
            }
        };
        if clean
            && keep_alive
            && let Some(pool) = pool
        {
            pool.put(conn, buf);
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

    /// Whether the body is framed by chunks (the client's head must then say so too).
    pub fn is_chunked(&self) -> bool {
        self.framing == Framing::Chunked
    }

    /// Whether the body runs to the connection's end (the client's connection closes after it).
    pub fn closes(&self) -> bool {
        self.framing == Framing::Close
    }
}

/// Writes `head` and then `body` to `client`: one `writev` when `client` writes vectors (a
/// TCP stream does), so that the two go out in one write without the body copied behind the
/// head (1.3 KB of a small search's answer, into a buffer grown to hold it); otherwise, or
/// when the socket takes part of them, write by write until both are out.
async fn write_after(
    client: &mut (impl AsyncWrite + Unpin),
    mut head: &[u8],
    mut body: &[u8],
) -> std::io::Result<()> {
    while !head.is_empty() {
        let n = client
            .write_vectored(&[std::io::IoSlice::new(head), std::io::IoSlice::new(body)])
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let of_head = n.min(head.len());
        head = &head[of_head..];
        body = &body[n - of_head..];
    }
    client.write_all(body).await
}

/// Reads more of a body that is not complete yet; the connection ending is the answer
/// breaking off.
async fn read_more(
    conn: &mut TcpStream,
    buf: &mut BytesMut,
    idle: &mut IdleBound,
) -> Result<(), RelayError> {
    match read_bounded(conn, buf, idle).await? {
        0 => Err(RelayError::Upstream(
            "the connection closed before the answer's end".to_string(),
        )),
        _ => Ok(()),
    }
}

/// Reads what the upstream sent next of a body into `buf` (0 at the connection's end), failing
/// once it sent nothing for `idle`'s bound (R7). A read that finds bytes at once, as most do,
/// costs what `read_buf` costs: the bound reads the clock only when a read waits.
async fn read_bounded(
    conn: &mut TcpStream,
    buf: &mut BytesMut,
    idle: &mut IdleBound,
) -> Result<usize, RelayError> {
    buf.reserve(READ_CHUNK);
    std::future::poll_fn(
        |cx| match tokio_util::io::poll_read_buf(Pin::new(&mut *conn), cx, buf) {
            Poll::Ready(read) => {
                idle.read();
                Poll::Ready(read.map_err(|e| RelayError::Upstream(e.to_string())))
            }
            Poll::Pending => idle
                .poll_expired(cx)
                .map(|()| Err(RelayError::Silent(idle.bound()))),
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `step` bytes a write, across the slices of a vectored one
    /// when `vectored` (as a socket with little room does), else from the first alone (as a
    /// writer without vectored writes does).
    struct Narrow {
        out: Vec<u8>,
        step: usize,
        vectored: bool,
    }

    impl AsyncWrite for Narrow {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.out.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            if !self.vectored {
                let first = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &b[..]);
                return self.poll_write(cx, first);
            }
            let mut taken = 0;
            for b in bufs {
                let n = b.len().min(self.step - taken);
                self.out.extend_from_slice(&b[..n]);
                taken += n;
                if taken == self.step {
                    break;
                }
            }
            Poll::Ready(Ok(taken))
        }

        fn is_write_vectored(&self) -> bool {
            self.vectored
        }

        fn poll_flush(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// R4: the head and then the body arrive whole and in order whatever a write takes: a
    /// step shorter than the head, one ending on the head's end or inside the body, with and
    /// without vectored writes, and with no body or no head. (It fails with the body's offset
    /// taken from the whole write rather than what passed the head.)
    #[tokio::test]
    async fn test_a_head_and_body_taken_in_pieces_arrive_whole() {
        let (head, body) = (
            b"HTTP/1.1 200 OK\r\n\r\n".as_slice(),
            b"{\"took\":1}".as_slice(),
        );
        for (head, body) in [(head, body), (head, &[][..]), (&[][..], body)] {
            for step in 1..=head.len() + body.len() + 1 {
                for vectored in [true, false] {
                    let mut w = Narrow {
                        out: Vec::new(),
                        step,
                        vectored,
                    };
                    write_after(&mut w, head, body).await.unwrap();
                    assert_eq!(
                        w.out,
                        [head, body].concat(),
                        "step {step}, vectored {vectored}"
                    );
                }
            }
        }
    }
}
