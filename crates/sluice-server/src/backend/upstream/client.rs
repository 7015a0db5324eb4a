//! The pooled HTTP client to the upstream: hyper's client connections over rustls (HTTP/1.1,
//! and HTTP/2 where TLS negotiates it) in a small pool of its own per host, one attempt per
//! host in [`Hosts::order`], failures classified into OpenSearch-shaped 502s and 504s that
//! name the host and the cause.
//!
//! The pool is hyper-util's legacy client's minus what a gateway does not need per request:
//! no pool key hashed (a host is an index), no `Uri` re-parsed, no response extensions, no
//! task to return a connection. Each host keeps the HTTP/1.1 connections it opened; a
//! request takes one that is ready (its previous answer fully read: hyper says so without a
//! wake), opens one when none is, and puts it back once its answer's headers arrived (it
//! becomes ready again when that answer's body has been read to its end). An HTTP/2
//! connection is shared by every request while it stays open.
//!
//! # Invariants
//! - C1 — a connection carries one request at a time: an HTTP/1.1 connection is out of the
//!   pool from the moment a request takes it until that request's headers arrived, and is
//!   taken again only once hyper reports it ready (the previous body read to its end); one
//!   request after another reuses it rather than connecting anew. Tested by
//!   `test_upstream_connections_are_reused_and_closed_ones_replaced` and, for a body still
//!   streaming, `test_bodies_much_larger_than_a_memory_bound_stream_through`.
//! - C2 — no request is sent on a connection the upstream closed: a closed connection leaves
//!   the pool at the next checkout, and a request a pooled connection could not even start
//!   (closed as it was taken) is sent once more on a new connection, as hyper-util does. A
//!   request that started is sent a second time only when it is safe (`GET`, `HEAD`,
//!   `OPTIONS`, `TRACE`: not `PUT` or `DELETE`, see [`safe`]), its body held whole or absent
//!   (never a stream), it went out on a reused connection, and that connection ended (closed
//!   or reset) before the answer within the lane's [`super::h1::STALE_RESET_WITHIN`] of the
//!   sending: the upstream closed it as the request went out (after its previous answer, as
//!   OpenSearch does after a 413, or a load balancer's idle close). The lane's R2 sends a
//!   `GET` again on the same terms; it also sends a `POST` search again on a reset within
//!   that time, which this client does not (that would copy every `POST`'s headers before
//!   sending it, for a case the lane takes for its searches). Tested by
//!   `test_upstream_connections_are_reused_and_closed_ones_replaced` (an upstream closing
//!   each connection after its answer),
//!   `test_a_safe_request_whose_connection_closed_as_it_went_out_is_sent_again` and
//!   `test_a_search_the_upstream_read_is_not_sent_again` (a `POST` is not).
//! - C3 — dropping a request's future drops its connection (HTTP/1.1: closed) or stream
//!   (HTTP/2: reset): the upstream sees the client leave. Tested by
//!   `test_cancellation_reaches_the_upstream`.
//! - C4 — a host keeps at most [`MAX_IDLE`] idle HTTP/1.1 connections, none idle much past
//!   [`POOL_IDLE_TIMEOUT`], traffic or not: putting one back closes those closed or ready and
//!   idle past the timeout (checkout's rule, HTTP/2 ones included), then the oldest idle
//!   HTTP/1.1 connections beyond the newest `MAX_IDLE`, as nginx's `keepalive` keeps the most
//!   recently used (the fast lane's R6, [`super::h1`]); one whose answer is still being read,
//!   and an HTTP/2 connection (shared by the requests it carries), are never closed by the
//!   cap. A timer task per host, running while its pool holds a connection
//!   ([`Pool::start_timer`]), closes by the same rule those that expire with no request coming
//!   (an outside trial found 116 sockets held for good after a burst). Tested by
//!   `test_idle_connections_beyond_the_cap_or_the_timeout_are_closed` and
//!   `test_idle_connections_expire_without_traffic`.
//! - C5 — an answer's body is relayed only while its bytes keep coming: each wait for the
//!   next ones is bounded by `request_timeout` ([`AnswerBody`], `streamed.rs` E2), as the
//!   fast lane's relay bounds its reads (R7); past it the body fails, its connection is
//!   dropped (hyper closes it: never ready, so never taken from the pool again) and the
//!   client's connection closes. Tested by
//!   `test_an_upstream_silent_mid_answer_closes_the_clients_connection` (lane off).
//! - C6 — a request an HTTP/2 upstream refused unprocessed is sent again on a new connection,
//!   whatever its method: a graceful GOAWAY whose last stream id is below its stream (nginx
//!   after `keepalive_requests`, a load balancer's connection turnover), or a
//!   `REFUSED_STREAM` reset (RFC 9113 §8.7: nothing of it was processed). hyper gives no
//!   HTTP/2 request back (hyper-util's `retry_canceled_requests` covers only a request never
//!   handed to a connection), so every request over HTTP/2 whose body the gateway holds
//!   carries a copy; a streamed body may have been partly sent, and is not sent again. A new
//!   connection refusing it too ([`MAX_REFUSED`]) leaves it to the next host, without a
//!   back-off. An outside trial's nginx (`keepalive_requests 1000`) failed 0.18 % of requests
//!   with 502 "not a result of an error". Tested by
//!   `test_requests_an_h2_upstream_refused_unprocessed_are_sent_again`.
//! - C7 — the answer's head is relayed as HTTP/1.1 whatever the upstream's version: hyper's
//!   server, given an upstream's `HTTP/1.0` answer of no length, wrote it unframed and never
//!   closed the connection that should have ended it; as HTTP/1.1 it is chunked. Tested by
//!   `test_an_answer_ended_by_the_upstreams_close_ends_on_both_paths`.
//! - C8 — a request is sent to the next host when a host's connection could not be opened
//!   (refused, not within `connect_timeout`, TLS refused), whatever its method and its body:
//!   nothing of it was sent, and a streamed body is not polled before a connection is open,
//!   so it is given back whole. Once a byte of a streamed body was taken from the client, the
//!   request is sent nowhere else. Tested by
//!   `test_a_write_whose_host_refuses_the_connection_goes_to_the_next_host`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use sluice_engine::{EngineError, ErrorCode};

use super::config::UpstreamConfig;
use super::hosts::{Host, Hosts};
use super::streamed::AnswerBody;

/// How long an idle pooled connection is kept (dropped by the pool's timer, or at the next
/// checkout or put after that, C4): under the 60 s+ idle timeouts of common load balancers in front of clusters, so the
/// pool does not hand out connections they closed.
pub(super) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// A request body to forward: bytes the gateway holds (a request that can be tried on the
/// next host when a host refuses) or the client's stream (sent once, never buffered).
pub enum OutBody {
    /// A body read whole (search-class requests, bounded by `http.max_content_length`).
    Bytes(Bytes),
    /// The client's body, streamed.
    Stream(Body),
}

/// A connection to an upstream host, as the connector opens it.
type Io = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;

/// A connection's request side.
enum Sender {
    H1(http1::SendRequest<Body>),
    H2(http2::SendRequest<Body>),
}

impl Sender {
    fn is_ready(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }
}

/// The most idle HTTP/1.1 connections to one host the pool keeps (C4). A lane thread keeps 64
/// ([`super::h1`] R6); this pool is one per host shared by every thread, and carries what the
/// lane does not take — on an `https://` host every request, searches included. 128, twice a
/// lane thread's and four times the 32 clients the gateway benchmark measures, keeps one for
/// each request of a burst that large; past it a new burst opens connections (on `https://`, a
/// TLS handshake: a round trip more and the key exchange, hence more than a lane thread keeps)
/// rather than every past burst's staying open. Not `64 ×` the lane's threads: one pool serves
/// them all, and a cap growing with the cores would hold hundreds of idle sockets to a host on
/// a large machine.
const MAX_IDLE: usize = 128;

/// A pooled connection and when it was last handed a request.
struct Pooled {
    sender: Sender,
    used: Instant,
}

impl Pooled {
    /// Whether the pool lets it go at `now`: closed, or ready (an HTTP/1.1 connection with no
    /// request on it, any open HTTP/2 one) and last used more than `timeout` ago.
    fn expired(&self, now: Instant, timeout: Duration) -> bool {
        let idle_too_long =
            self.sender.is_ready() && now.saturating_duration_since(self.used) > timeout;
        self.sender.is_closed() || idle_too_long
    }

    /// When it was last used, if it is an idle HTTP/1.1 connection: one [`MAX_IDLE`] counts
    /// (C4).
    fn idle_h1_since(&self) -> Option<Instant> {
        match &self.sender {
            Sender::H1(s) if s.is_ready() => Some(self.used),
            _ => None,
        }
    }
}

/// Which of a host's connections the cap keeps (C4): given for each when it was last used if
/// it is an idle HTTP/1.1 connection (`None` for the others, which the cap never closes),
/// answers for each whether it stays — all but the idle ones older than the newest `cap`.
fn within_cap(idle_since: &[Option<Instant>], cap: usize) -> Vec<bool> {
    let mut keep = vec![true; idle_since.len()];
    let mut idle: Vec<(Instant, usize)> = idle_since
        .iter()
        .enumerate()
        .filter_map(|(i, since)| since.map(|since| (since, i)))
        .collect();
    if idle.len() > cap {
        // Newest first; of two used at the same instant, the one put back later.
        idle.sort_unstable_by(|a, b| b.cmp(a));
        for &(_, i) in &idle[cap..] {
            keep[i] = false;
        }
    }
    keep
}

/// A host's connections (see the module documentation).
struct Pool {
    conns: Mutex<Conns>,
    /// How long a ready connection is kept unused: [`POOL_IDLE_TIMEOUT`] (shorter in tests).
    timeout: Duration,
}

/// A pool's connections, and whether its expiry timer runs (C4).
#[derive(Default)]
struct Conns {
    list: Vec<Pooled>,
    timer: bool,
}

impl std::ops::Deref for Conns {
    type Target = Vec<Pooled>;
    fn deref(&self) -> &Vec<Pooled> {
        &self.list
    }
}

impl std::ops::DerefMut for Conns {
    fn deref_mut(&mut self) -> &mut Vec<Pooled> {
        &mut self.list
    }
}

/// How much later than a connection's expiry the timer wakes: tokio's timer counts whole
/// milliseconds, and a wake at the expiry itself would find it not yet past.
const EXPIRY_SLACK: Duration = Duration::from_millis(1);

/// Spawns a pool's expiry timer on the current runtime, answering whether it runs (no
/// runtime: it does not): a task that calls `sweep` — which closes the connections expired
/// now and answers when the next one expires, or `None` once there is none (the sweep then
/// marks its timer stopped) — and sleeps until then. Both pools use it: this one (C4) and
/// each lane thread's ([`super::h1`] R6), whose timer must run on that thread's runtime.
pub(super) fn spawn_expiry(mut sweep: impl FnMut() -> Option<Instant> + Send + 'static) -> bool {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    rt.spawn(async move {
        while let Some(next) = sweep() {
            tokio::time::sleep_until((next + EXPIRY_SLACK).into()).await;
        }
    });
    true
}

impl Pool {
    /// An empty pool whose ready connections go after `timeout` unused.
    fn new(timeout: Duration) -> Arc<Pool> {
        Arc::new(Pool {
            conns: Mutex::default(),
            timeout,
        })
    }

    /// A ready connection, if the pool has one: an HTTP/1.1 connection that is ready (taken
    /// out, C1), or an HTTP/2 connection (shared). Drops connections that closed and ready
    /// ones idle longer than the pool's timeout.
    fn checkout(&self, now: Instant) -> Option<Sender> {
        let mut conns = self.conns.lock();
        let timeout = self.timeout;
        conns.retain(|c| !c.expired(now, timeout));
        let i = conns.iter().rposition(|c| c.sender.is_ready())?;
        match &mut conns[i] {
            Pooled {
                sender: Sender::H2(s),
                used,
            } => {
                *used = now;
                Some(Sender::H2(s.clone()))
            }
            Pooled {
                sender: Sender::H1(_),
                ..
            } => Some(conns.swap_remove(i).sender),
        }
    }

    /// Puts a connection (back) in the pool, used at `now`; closes those expired at `now` and
    /// the oldest idle HTTP/1.1 connections beyond [`MAX_IDLE`] (C4), once the pool's lock is
    /// let go.
    fn put(self: &Arc<Self>, sender: Sender, now: Instant) {
        let mut conns = self.conns.lock();
        conns.push(Pooled { sender, used: now });
        if !conns.timer {
            conns.timer = self.start_timer();
        }
        let timeout = self.timeout;
        let mut closed: Vec<Pooled> = conns.extract_if(.., |c| c.expired(now, timeout)).collect();
        if conns.iter().filter(|c| c.idle_h1_since().is_some()).count() > MAX_IDLE {
            let idle_since: Vec<_> = conns.iter().map(Pooled::idle_h1_since).collect();
            let mut keep = within_cap(&idle_since, MAX_IDLE).into_iter();
            closed.extend(conns.extract_if(.., |_| !keep.next().unwrap_or(true)));
        }
        drop(conns);
        drop(closed);
    }
}

/// The size of the header lines hyper writes for `headers` to a host whose `Host` is
/// `host_header` (replacing the client's), as the upstream counts them against its
/// `http.max_header_size`: each line's bytes but its `CRLF` (`name: value`), with the
/// `transfer-encoding: chunked` hyper adds to a `streamed` body of no length. Counted as
/// HTTP/1 writes them, whichever protocol the host speaks.
fn head_size(headers: &HeaderMap, host_header: Option<&HeaderValue>, streamed: bool) -> usize {
    let line = |name: &str, value: &HeaderValue| name.len() + ": ".len() + value.len();
    let mut size: usize = headers
        .iter()
        .filter(|(name, _)| host_header.is_none() || *name != http::header::HOST)
        .map(|(name, value)| line(name.as_str(), value))
        .sum();
    if let Some(host) = host_header {
        size += line("host", host);
    }
    if streamed && !headers.contains_key(http::header::CONTENT_LENGTH) {
        size += "transfer-encoding: chunked".len();
    }
    size
}

/// Whether a request of `method` may be sent once more after its connection ended without an
/// answer (C2): the safe methods (RFC 9110 §9.2.1), whose second sending changes nothing on
/// the upstream. Not `PUT` or `DELETE` (idempotent, and nginx's `proxy_next_upstream` sends them
/// again): a document written or deleted by the first sending would make the second answer
/// a version conflict or a 404 the client never caused; nor `POST` (a search's or a write's).
fn safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// A copy of `req` (method, URI, headers) with `body`, for a second sending (C2).
fn copy_of(req: &Request<Body>, body: Bytes) -> Request<Body> {
    let mut copy = Request::new(Body::from(body));
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// Whether an exchange failed with its connection ending before the answer: closed (hyper's
/// "connection closed before message completed", which it also says of a head cut short: it
/// does not tell the two apart) or reset.
fn ended_unanswered(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            );
        }
        source = s.source();
    }
    false
}

impl Pool {
    /// Starts the pool's expiry timer on the current runtime (C4), answering whether it runs:
    /// a task that sleeps until the pool's next connection would expire, closes those expired
    /// then, and ends once the pool is empty (an idle gateway's pool that emptied wakes nothing;
    /// the next put starts it again). Holds the pool weakly: a dropped client ends it.
    fn start_timer(self: &Arc<Self>) -> bool {
        let pool = Arc::downgrade(self);
        spawn_expiry(move || {
            let pool = pool.upgrade()?;
            let now = Instant::now();
            let mut conns = pool.conns.lock();
            let timeout = pool.timeout;
            let closed: Vec<Pooled> = conns.extract_if(.., |c| c.expired(now, timeout)).collect();
            // A connection past its time but busy (its answer being read) is looked at again
            // a timeout later, or at the next put or checkout.
            let next = conns
                .iter()
                .map(|c| c.used + timeout)
                .map(|at| if at > now { at } else { now + timeout })
                .min();
            if next.is_none() {
                conns.timer = false;
            }
            drop(conns);
            drop(closed);
            next
        })
    }
}

/// How many times in a row one host may refuse a request unprocessed (C6) before it goes to
/// the next host: one new connection after a graceful GOAWAY is what a connection's turnover
/// (nginx's `keepalive_requests`) needs; a new connection refusing it too is a host shutting
/// down, and another connection to it would only be refused again.
const MAX_REFUSED: u32 = 1;

/// Whether an HTTP/2 exchange failed because the upstream refused the stream before it
/// processed anything of it, so sending it again cannot do anything twice (RFC 9113 §8.7):
/// a GOAWAY whose last stream id is below it (h2 fails exactly those streams, and those
/// opened after it, with the GOAWAY's error; the streams below it that a close then cuts off
/// get a broken pipe instead), or a `REFUSED_STREAM` reset.
fn unprocessed(e: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return h2.is_remote()
                && (h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM));
        }
        source = s.source();
    }
    false
}

/// Why an attempt on a host failed.
enum Failure {
    /// No connection could be opened (refused, unreachable, TLS): the host rests. With the
    /// request given back when nothing of it was sent, its body never polled (C8).
    Connect(
        Box<dyn std::error::Error + Send + Sync>,
        Option<Box<Request<Body>>>,
    ),
    /// The upstream refused the request before processing it (C6), again on a new
    /// connection: the request may go to the next host.
    Unprocessed(hyper::Error),
    /// A connection was open but the exchange failed (reset, closed, not HTTP).
    Exchange(hyper::Error),
}

/// The client and the hosts it spreads requests over.
pub struct UpstreamClient {
    connector: HttpsConnector<HttpConnector>,
    /// One pool per host, by the host's index in `hosts`.
    pools: Vec<Arc<Pool>>,
    hosts: Hosts,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl UpstreamClient {
    /// Builds the client of `config`: TLS verified against `ca_file` or the system's roots.
    pub fn new(config: &UpstreamConfig) -> anyhow::Result<UpstreamClient> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| anyhow::anyhow!("cannot set up TLS for backend.upstream.hosts: {e}"))?;
        let tls = match &config.ca_file {
            // Read and checked with the settings (`config.rs` `CaFile`).
            Some(ca) => builder
                .with_root_certificates(ca.roots.clone())
                .with_no_client_auth(),
            None => {
                use hyper_rustls::ConfigBuilderExt;
                builder
                    .with_native_roots()
                    .map_err(|e| anyhow::anyhow!("cannot load the system's CA certificates: {e}"))?
                    .with_no_client_auth()
            }
        };
        if config.ca_file.is_some() && config.hosts.iter().all(|h| h.scheme_str() == Some("http")) {
            tracing::warn!(
                "backend.upstream.ca_file is set but every host in backend.upstream.hosts is http://: it applies to https:// hosts only"
            );
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        Ok(UpstreamClient {
            connector,
            pools: config
                .hosts
                .iter()
                .map(|_| Pool::new(POOL_IDLE_TIMEOUT))
                .collect(),
            hosts: Hosts::new(
                &config.hosts,
                config
                    .connect_timeout
                    .saturating_add(config.request_timeout),
                config
                    .ca_file
                    .as_ref()
                    .map(|ca| ca.path.display().to_string()),
            ),
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
        })
    }

    /// The hosts.
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// Sends `method path_and_query` with `headers` and `body` to the upstream and answers its
    /// response as soon as its headers arrived (the body streams, each wait for its next bytes
    /// bounded by `request_timeout`, C5). A host that cannot be connected to is put in
    /// back-off, and the request goes to the next host (C8); so does one the body of which the
    /// gateway holds when a host refused it unprocessed (C6).
    ///
    /// Errors: 502 `upstream_exception` naming the host and the cause (refused, unreachable
    /// within `connect_timeout` — `ErrorCode::UpstreamUnreachable`: nothing was sent —, reset,
    /// not HTTP), 504 `upstream_timeout_exception` when the response headers did not arrive
    /// within `request_timeout`; 400 `too_long_http_header_exception` for a head the
    /// gateway's lines take over the upstream's limit, refused unsent.
    ///
    /// # Cancel safety
    /// Dropping the future drops the upstream request: its connection is closed (HTTP/1.1) or
    /// its stream reset (HTTP/2), which OpenSearch takes as the client going away.
    pub async fn send(
        &self,
        method: &Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: OutBody,
    ) -> Result<Response<AnswerBody>, EngineError> {
        let pq: PathAndQuery = path_and_query.parse().map_err(|e| {
            EngineError::illegal_argument(format!("invalid request path [{path_and_query}]: {e}"))
        })?;
        let order = self.hosts.order(Instant::now());
        self.send_in(&order, method, pq, headers, body).await
    }

    /// [`Self::send`] over the hosts of `order`, in that order.
    async fn send_in(
        &self,
        order: &[usize],
        method: &Method,
        pq: PathAndQuery,
        headers: HeaderMap,
        body: OutBody,
    ) -> Result<Response<AnswerBody>, EngineError> {
        let mut body = Some(body);
        let mut headers = Some(headers);
        let mut last_error = None;
        for (attempt, &i) in order.iter().enumerate() {
            let host = self.hosts.get(i);
            let Some(this_body) = body.take() else { break };
            let (out, replay) = match this_body {
                OutBody::Bytes(b) => (Body::from(b.clone()), Some(OutBody::Bytes(b))),
                OutBody::Stream(s) => (s, None),
            };
            // The body a second sending on this host would carry (C2): one the gateway holds
            // (or none at all), never a stream.
            let held = match &replay {
                Some(OutBody::Bytes(b)) => Some(b.clone()),
                _ => None,
            };
            // The headers are copied only for a request another host may still be sent.
            let last_try = replay.is_none() || attempt + 1 == order.len();
            let mut h = match (last_try, headers.take()) {
                (true, Some(h)) => h,
                (false, Some(h)) => {
                    let copy = h.clone();
                    headers = Some(h);
                    copy
                }
                (_, None) => break,
            };
            let streamed = replay.is_none();
            body = replay;
            // A body the gateway holds may differ from the client's (an msearch of the
            // admitted items only): its length is the gateway's to say.
            if let Some(OutBody::Bytes(b)) = &body {
                if b.is_empty() {
                    h.remove(http::header::CONTENT_LENGTH);
                } else {
                    h.insert(
                        http::header::CONTENT_LENGTH,
                        http::HeaderValue::from(b.len()),
                    );
                }
            }
            // Over the upstream's header limit only by the gateway's own lines (the host's
            // `Host`, an `X-Opaque-Id`): the gateway's to refuse, naming the limit, as the lane
            // refuses it (`h1/request.rs`), rather than relay the upstream's refusal.
            if head_size(&h, host.host_header.as_ref(), streamed) > crate::server::MAX_HEADER_SIZE {
                return Err(crate::server::headers_too_long());
            }
            let mut req = Request::new(out);
            *req.method_mut() = method.clone();
            *req.headers_mut() = h;
            let started = Instant::now();
            // Pinned here, borrowed by the deadline (`deadline::within`).
            let exchange = std::pin::pin!(self.exchange(i, &pq, req, held));
            // As the lane's: an answer that came while the gateway stalled wins (`deadline`).
            let by = tokio::time::Instant::now() + self.request_timeout;
            match crate::deadline::within(by, exchange).await {
                Ok(Ok(mut resp)) => {
                    self.hosts.succeeded(i);
                    // The answer to the client is the gateway's, in HTTP/1.1 (or what the
                    // client speaks): relayed with an upstream's `HTTP/1.0`, hyper's server
                    // wrote it unframed, to be ended by a close it never made, and the client
                    // waited for good (an outside trial's HTTP/1.0 upstream, C7).
                    *resp.version_mut() = http::Version::HTTP_11;
                    let bound = self.request_timeout;
                    return Ok(resp.map(|body| AnswerBody::new(body, bound)));
                }
                Ok(Err(Failure::Connect(e, unsent))) => {
                    // Nothing of it sent, its body not taken from the client: a streamed
                    // request goes to the next host too (C8).
                    if let (None, Some(unsent)) = (&body, unsent) {
                        let (parts, unsent_body) = unsent.into_parts();
                        body = Some(OutBody::Stream(unsent_body));
                        headers = Some(parts.headers);
                    }
                    let (cause, timed_out) = (causes(&*e), timed_out(&*e));
                    last_error = Some(unreachable(
                        &self.hosts,
                        i,
                        started,
                        attempt,
                        cause,
                        timed_out.then_some(self.connect_timeout),
                    ));
                }
                // Refused unprocessed on this host's connections (C6): nothing was done, so a
                // request the gateway holds whole goes to the next host; the host does not
                // rest (a graceful close is not a failure).
                Ok(Err(Failure::Unprocessed(e))) => {
                    last_error = Some(failed_to_answer(host, &refusal(&e)));
                }
                // The client's body broke off or was malformed (a bad chunk) while it was
                // streamed up: the client's fault, answered as reading a body fails elsewhere.
                Ok(Err(Failure::Exchange(e))) if e.is_user() => {
                    return Err(EngineError::parsing(format!(
                        "failed to read request body: {}",
                        causes(&e)
                    )));
                }
                Ok(Err(Failure::Exchange(e))) => {
                    let failed = failed_to_answer(host, &causes(&e));
                    // An answer that is not HTTP: the host rests (a reset or a close does
                    // not: that may be the upstream ending one request, or an idle
                    // connection's race).
                    if e.is_parse() || e.is_parse_too_large() {
                        host_at_fault(&self.hosts, i, started, &failed);
                    }
                    return Err(failed);
                }
                Err(_) => {
                    let e = no_answer_within(host, self.request_timeout);
                    host_at_fault(&self.hosts, i, started, &e);
                    return Err(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(no_host))
    }

    /// One attempt on host `i`: a pooled connection that is ready, or a new one; `req` sent
    /// on it (C1, C2), `held` its body if the gateway holds it whole (or it has none). The
    /// response once its headers arrived.
    ///
    /// # Cancel safety
    /// Dropping the future drops the connection it holds (C3).
    async fn exchange(
        &self,
        i: usize,
        pq: &PathAndQuery,
        mut req: Request<Body>,
        held: Option<Bytes>,
    ) -> Result<Response<Incoming>, Failure> {
        let pool = &self.pools[i];
        let (mut sender, mut reused) = match pool.checkout(Instant::now()) {
            Some(s) => (s, true),
            None => match self.connect_boxed(i).await {
                Ok(s) => (s, false),
                Err(Failure::Connect(e, _)) => {
                    return Err(Failure::Connect(e, Some(Box::new(req))));
                }
                Err(e) => return Err(e),
            },
        };
        // Sendings of this request the upstream refused unprocessed (C6).
        let mut refused = 0;
        loop {
            self.shape(i, pq, &sender, &mut req);
            // Whether a reused connection ending at once may have it sent again (C2).
            let stale_retry = reused && safe(req.method());
            // What sending it once more takes: a safe request on a reused connection (C2),
            // or any request on an HTTP/2 one, which the upstream may refuse unprocessed
            // (C6); so a request on a new HTTP/1.1 connection copies nothing.
            let again = match &held {
                Some(body) if stale_retry || matches!(sender, Sender::H2(_)) => {
                    Some(copy_of(&req, body.clone()))
                }
                _ => None,
            };
            let started = Instant::now();
            let sent = match &mut sender {
                Sender::H1(s) => s.try_send_request(req).await,
                Sender::H2(s) => s.try_send_request(req).await,
            };
            match sent {
                Ok(resp) => {
                    // HTTP/1.1: back in the pool, ready again once this body is read (C1);
                    // an HTTP/2 connection never left it.
                    if let Sender::H1(_) = sender {
                        pool.put(sender, Instant::now());
                    }
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    // Not started on a connection the upstream closed while idle: once more
                    // on a new one (C2).
                    Some(unsent) if reused => {
                        req = unsent;
                        reused = false;
                        sender = match self.connect_boxed(i).await {
                            Ok(s) => s,
                            Err(Failure::Connect(e, _)) => {
                                return Err(Failure::Connect(e, Some(Box::new(req))));
                            }
                            Err(e) => return Err(e),
                        };
                    }
                    _ => {
                        let e = e.into_error();
                        match again {
                            // An HTTP/2 stream the upstream did not process (a graceful
                            // GOAWAY below it, a REFUSED_STREAM): once more on a new
                            // connection (C6), any method; a second refusal in a row leaves
                            // the request to the next host.
                            Some(copy) if unprocessed(&e) => {
                                refused += 1;
                                if refused > MAX_REFUSED {
                                    return Err(Failure::Unprocessed(e));
                                }
                                req = copy;
                                reused = false;
                                sender = self.connect_boxed(i).await?;
                            }
                            // A safe request whose reused connection ended (closed or reset)
                            // before any answer, at once: the upstream closed it as the
                            // request went out (C2), once more on a new one.
                            Some(copy)
                                if stale_retry
                                    && ended_unanswered(&e)
                                    && started.elapsed() < super::h1::STALE_RESET_WITHIN =>
                            {
                                req = copy;
                                reused = false;
                                sender = self.connect_boxed(i).await?;
                            }
                            _ if unprocessed(&e) => return Err(Failure::Unprocessed(e)),
                            _ => return Err(Failure::Exchange(e)),
                        }
                    }
                },
            }
        }
    }

    /// [`Self::connect`] in a box of its own: the connector's and the handshakes' futures are
    /// kilobytes, and unboxed they would make every request's future (moved and copied on
    /// its way through the handler, the select and axum's boxes) that large, connecting or not.
    async fn connect_boxed(&self, i: usize) -> Result<Sender, Failure> {
        Box::pin(self.connect(i)).await
    }

    /// Opens a connection to host `i` (TCP within `connect_timeout`, TLS, HTTP/2 when ALPN
    /// chose it), its I/O driven by a task of its own. An HTTP/2 connection joins the pool at
    /// once (it is shared); an HTTP/1.1 one when its first answer's headers arrived.
    async fn connect(&self, i: usize) -> Result<Sender, Failure> {
        let host = self.hosts.get(i);
        let io: Io = tower::ServiceExt::oneshot(self.connector.clone(), host.base.clone())
            .await
            .map_err(|e| Failure::Connect(e, None))?;
        let name = host.name.clone();
        if io.connected().is_negotiated_h2() {
            let (mut sender, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(Failure::Exchange)?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(host = %name, error = %e, "upstream connection ended with an error");
                }
            });
            sender.ready().await.map_err(Failure::Exchange)?;
            self.pools[i].put(Sender::H2(sender.clone()), Instant::now());
            Ok(Sender::H2(sender))
        } else {
            let (mut sender, conn) = http1::handshake(io).await.map_err(Failure::Exchange)?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(host = %name, error = %e, "upstream connection ended with an error");
                }
            });
            sender.ready().await.map_err(Failure::Exchange)?;
            Ok(Sender::H1(sender))
        }
    }

    /// Gives `req` the form `sender`'s protocol wants, as hyper-util does: HTTP/1.1 the path
    /// and query (origin form) and host `i`'s `Host`; HTTP/2 the absolute URI, from which
    /// hyper writes `:scheme` and `:authority`, and no `Host`.
    fn shape(&self, i: usize, pq: &PathAndQuery, sender: &Sender, req: &mut Request<Body>) {
        let host = self.hosts.get(i);
        match sender {
            Sender::H1(_) => {
                *req.uri_mut() = Uri::from(pq.clone());
                if let Some(v) = &host.host_header {
                    req.headers_mut().insert(http::header::HOST, v.clone());
                }
            }
            Sender::H2(_) => {
                let mut parts = host.base.clone().into_parts();
                parts.path_and_query = Some(pq.clone());
                // A base URI with scheme and authority and a path and query always make one.
                if let Ok(uri) = Uri::from_parts(parts) {
                    *req.uri_mut() = uri;
                }
                req.headers_mut().remove(http::header::HOST);
            }
        }
    }

    /// `backend.upstream.request_timeout`.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Sends a bodiless request and reads the whole (small) answer: for the gateway's own calls
    /// (listing and cancelling upstream tasks, and, once started, `GET /`).
    pub async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
    ) -> Result<(http::StatusCode, Bytes), EngineError> {
        let whole = self.call_whole(method, path_and_query, headers).await?;
        Ok((whole.status, whole.body))
    }

    /// [`Self::call`], with the answer's headers.
    pub async fn call_whole(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
    ) -> Result<Whole, EngineError> {
        let resp = self
            .send(
                &method,
                path_and_query,
                headers.clone(),
                OutBody::Bytes(Bytes::new()),
            )
            .await?;
        Self::read_whole(resp, &method, path_and_query).await
    }

    /// A `GET` of the gateway's own at start-up (`GET /`, `_nodes/thread_pool`), read whole:
    /// each host in turn has [`Self::start_bound`] to answer it, and one that does not rests
    /// (as after any timeout) while the next is asked. The node's port is bound but not yet
    /// served while it runs, so a host that accepts and never answers held start-up, and each
    /// client that connected meanwhile, for the whole `request_timeout` (60 s by default), and
    /// the other hosts were never asked (an outside trial). Bounded by the number of hosts ×
    /// the bound; the same error as [`Self::call`] when no host answered.
    pub async fn call_at_start(
        &self,
        path_and_query: &str,
        headers: &HeaderMap,
    ) -> Result<Whole, EngineError> {
        let method = Method::GET;
        let pq: PathAndQuery = path_and_query.parse().map_err(|e| {
            EngineError::illegal_argument(format!("invalid request path [{path_and_query}]: {e}"))
        })?;
        let bound = self.start_bound();
        let mut last_error = None;
        for i in self.hosts.order(Instant::now()) {
            let started = Instant::now();
            let answer = async {
                let body = OutBody::Bytes(Bytes::new());
                let resp = self
                    .send_in(&[i], &method, pq.clone(), headers.clone(), body)
                    .await?;
                Self::read_whole(resp, &method, path_and_query).await
            };
            match tokio::time::timeout(bound, answer).await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(e)) => last_error = Some(e),
                Err(_) => {
                    let e = EngineError::new(
                        ErrorCode::UpstreamTimeout,
                        format!(
                            "upstream [{}] did not answer the gateway's start-up [{method} \
                             {path_and_query}] within backend.upstream.connect_timeout [{}]",
                            self.hosts.get(i).name,
                            sluice_wire::format_time_value(bound)
                        ),
                    );
                    host_at_fault(&self.hosts, i, started, &e);
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(no_host))
    }

    /// How long each host has to answer a start-up call ([`Self::call_at_start`]):
    /// `connect_timeout` (at most `request_timeout`), the time the operator gives a live host
    /// to show it is there. OpenSearch answers `GET /` and `_nodes/thread_pool` from what the
    /// node holds, in milliseconds; a host that takes seconds is not one to wait for while
    /// the gateway does not serve.
    fn start_bound(&self) -> Duration {
        self.connect_timeout.min(self.request_timeout)
    }

    /// The whole answer of one of the gateway's own calls.
    async fn read_whole(
        resp: Response<AnswerBody>,
        method: &Method,
        path_and_query: &str,
    ) -> Result<Whole, EngineError> {
        let (parts, body) = resp.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .map_err(|e| {
                EngineError::new(
                    ErrorCode::UpstreamFailed,
                    format!(
                        "upstream answer to [{method} {path_and_query}] broke off: {}",
                        causes(&e)
                    ),
                )
            })?
            .to_bytes();
        Ok(Whole {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// The whole answer of one of the gateway's own calls ([`UpstreamClient::call_whole`]).
#[derive(Debug)]
pub struct Whole {
    /// Its status.
    pub status: http::StatusCode,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, read whole.
    pub body: Bytes,
}

/// A host a request could not connect to in an attempt begun at `started` (`cause`;
/// `connect_timeout` when that is what ran out): put in back-off (`hosts.rs` H4) and logged;
/// answers the 502 the request gets if no other host answers. Both of the gateway's clients (this one and the fast lane's, [`super::h1`]) word
/// their failures with these functions.
pub(super) fn unreachable(
    hosts: &Hosts,
    i: usize,
    started: Instant,
    attempt: usize,
    cause: String,
    connect_timeout: Option<Duration>,
) -> EngineError {
    let host = hosts.get(i);
    let rest = hosts.failed(i, started, Instant::now());
    let (backoff, failures) = (rest.backoff, rest.failures);
    let cause = match connect_timeout {
        Some(t) => format!(
            "not connected within backend.upstream.connect_timeout [{}] ({cause})",
            sluice_wire::format_time_value(t),
        ),
        None => match tls_hint(&cause, hosts.ca_file()) {
            Some(hint) => format!("{cause}; {hint}"),
            None => cause,
        },
    };
    if rest.counted && loud(failures) {
        tracing::warn!(host = %host.name, %cause, backoff_ms = backoff.as_millis() as u64,
            failures, attempt, "upstream host unreachable; others tried first until its back-off ends");
    } else {
        tracing::debug!(host = %host.name, %cause, backoff_ms = backoff.as_millis() as u64,
            failures, attempt, "upstream host unreachable; others tried first until its back-off ends");
    }
    // Nothing of the request was sent (`cancelled.rs` F3).
    EngineError::new(
        ErrorCode::UpstreamUnreachable,
        format!("cannot connect to upstream [{}]: {cause}", host.name),
    )
}

/// Host `i` did not answer within `request_timeout` in an attempt begun at `started`, or
/// answered something that is not HTTP (`e` says which): it rests (`hosts.rs` H4) for a back-off as one that cannot be reached, as nginx marks a
/// server failed on a timeout or an invalid answer (`max_fails=1` by default) and Envoy ejects
/// a host for gateway failures. Otherwise, a host that accepts connections but never answers
/// kept its turn and failed each request given it only after the whole `request_timeout`.
pub(super) fn host_at_fault(hosts: &Hosts, i: usize, started: Instant, e: &EngineError) {
    let rest = hosts.failed(i, started, Instant::now());
    let (backoff, failures) = (rest.backoff, rest.failures);
    if rest.counted && loud(failures) {
        tracing::warn!(host = %hosts.get(i).name, cause = %e.reason,
            backoff_ms = backoff.as_millis() as u64, failures,
            "upstream host failed; others tried first until its back-off ends");
    } else {
        tracing::debug!(host = %hosts.get(i).name, cause = %e.reason,
            backoff_ms = backoff.as_millis() as u64, failures,
            "upstream host failed; others tried first until its back-off ends");
    }
}

/// What to do about a TLS handshake the gateway refused, named by rustls's cause: a
/// certificate of a private CA (set `ca_file`, or, when the file `ca_file` names is set, put
/// the CA that signed it there), a CA certificate served as the host's own (which no `ca_file`
/// fixes), or a plain HTTP port named `https://` (rustls reads its answer as a corrupt TLS
/// record).
fn tls_hint(cause: &str, ca_file: Option<&str>) -> Option<String> {
    if cause.contains("InvalidContentType") {
        Some(
            "the upstream did not answer in TLS: if the host serves plain HTTP, name it \
             http:// in backend.upstream.hosts"
                .to_string(),
        )
    } else if cause.contains("CaUsedAsEndEntity") {
        Some(
            "the upstream presents a CA certificate as its own: give it a certificate signed by \
             that CA, and name the CA in backend.upstream.ca_file"
                .to_string(),
        )
    } else if let Some(file) = ca_file.filter(|_| cause.contains("BadSignature")) {
        Some(format!(
            "a CA in backend.upstream.ca_file [{file}] has the name of the upstream \
             certificate's issuer but did not sign it: put the CA that signed it in that file"
        ))
    } else if cause.contains("UnknownIssuer") {
        Some(match ca_file {
            Some(file) => format!(
                "no CA in backend.upstream.ca_file [{file}] signed the upstream's certificate: \
                 put the CA that signed it in that file"
            ),
            None => "the upstream's certificate is not signed by a CA this gateway trusts: if a \
                     private CA signed it, set backend.upstream.ca_file to that CA's PEM file"
                .to_string(),
        })
    } else {
        None
    }
}

/// Whether a host's `failures` in a row are logged at WARN: the first, then the 2nd, 4th,
/// 8th… (the others at DEBUG). A host down for long is still tried at least once a second by
/// the gateway's own calls (the measure's probe, usage polls), and a WARN line for each
/// buried the log (15 lines in 10 s with no client traffic).
fn loud(failures: u32) -> bool {
    failures.is_power_of_two()
}

/// What an HTTP/2 refusal of a request (C6) was, in an operator's words: h2's own text for a
/// graceful GOAWAY is "connection error received: not a result of an error".
fn refusal(e: &hyper::Error) -> String {
    format!(
        "the upstream closed its HTTP/2 connection (GOAWAY) or refused the stream before \
         processing the request, on a new connection too, or while its body streamed ({})",
        causes(e)
    )
}

/// The 502 of an exchange that failed on an open connection (reset, closed, not HTTP), with
/// what to check when the answer was not HTTP/1.x at all (hyper's and the lane's "invalid
/// HTTP version parsed" said nothing of a port of another service, or of an upstream that
/// speaks HTTP/2 only without TLS).
pub(super) fn failed_to_answer(host: &Host, cause: &str) -> EngineError {
    let hint = if cause.contains(super::h1::worded::VERSION) {
        "; the upstream's answer is not HTTP/1.x: check that the host's port is the cluster's \
         HTTP port; the gateway speaks HTTP/2 only over TLS (https://), not to an upstream that \
         speaks HTTP/2 alone without TLS (h2c)"
    } else {
        ""
    };
    EngineError::new(
        ErrorCode::UpstreamFailed,
        format!("upstream [{}] failed to answer: {cause}{hint}", host.name),
    )
}

/// The 504 of an upstream that did not start answering within `request_timeout`.
pub(super) fn no_answer_within(host: &Host, request_timeout: Duration) -> EngineError {
    EngineError::new(
        ErrorCode::UpstreamTimeout,
        format!(
            "upstream [{}] did not answer within backend.upstream.request_timeout [{}]",
            host.name,
            sluice_wire::format_time_value(request_timeout)
        ),
    )
}

/// The 502 of a request no host was tried for (nothing of it was sent).
pub(super) fn no_host() -> EngineError {
    EngineError::new(
        ErrorCode::UpstreamUnreachable,
        "no upstream host to send the request to",
    )
}

/// Whether an error was caused by a timeout (the connector's `connect_timeout` gives an I/O
/// error of kind `TimedOut`).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// An error and its causes, outermost first: hyper's errors say little on their own
/// ("client error (Connect)"), their sources say what happened ("Connection refused").
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    /// A connection to `listener` (HTTP/2 when `h2`, to a hyper server answering an empty
    /// 200), ready for a request, its I/O in a task of its own as [`UpstreamClient`] runs it;
    /// and, for HTTP/1.1, the upstream's end of it.
    async fn connection(listener: &TcpListener, h2: bool) -> (Sender, Option<TcpStream>) {
        let (client, accepted) = tokio::join!(
            TcpStream::connect(listener.local_addr().unwrap()),
            listener.accept()
        );
        let (client, server) = (TokioIo::new(client.unwrap()), accepted.unwrap().0);
        if h2 {
            let service = hyper::service::service_fn(|_| async {
                Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(server), service),
            );
            let (mut sender, conn) = http2::handshake(TokioExecutor::new(), client)
                .await
                .unwrap();
            tokio::spawn(conn);
            sender.ready().await.unwrap();
            (Sender::H2(sender), None)
        } else {
            let (mut sender, conn) = http1::handshake(client).await.unwrap();
            tokio::spawn(conn);
            sender.ready().await.unwrap();
            (Sender::H1(sender), Some(server))
        }
    }

    /// Whether the upstream's end of a connection sees it closed within a second.
    async fn closed(server: &mut TcpStream) -> bool {
        let mut buf = [0u8; 1024];
        matches!(
            tokio::time::timeout(Duration::from_secs(1), server.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn test_idle_connections_beyond_the_cap_or_the_timeout_are_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = Pool::new(POOL_IDLE_TIMEOUT);
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // The oldest in the pool: an HTTP/2 connection (shared) and an HTTP/1.1 one whose
        // request is still waiting for its answer.
        let (h2, _) = connection(&listener, true).await;
        pool.put(h2, at(0));
        let (mut busy, busy_server) = connection(&listener, false).await;
        let Sender::H1(s) = &mut busy else {
            unreachable!()
        };
        let _answer = tokio::spawn(s.send_request(Request::new(Body::empty())));
        let mut busy_server = busy_server.unwrap();
        let mut buf = [0u8; 1024];
        assert!(busy_server.read(&mut buf).await.unwrap() > 0);
        assert!(!busy.is_ready());
        pool.put(busy, at(0));
        // A burst of MAX_IDLE + 2 put back: the newest MAX_IDLE stay, the two oldest are
        // closed, the HTTP/2 and the busy connections stay.
        let mut servers = Vec::new();
        for i in 0..MAX_IDLE as u64 + 2 {
            let (idle, server) = connection(&listener, false).await;
            pool.put(idle, at(1 + i));
            servers.push(server.unwrap());
        }
        {
            let conns = pool.conns.lock();
            assert_eq!(conns.len(), MAX_IDLE + 2);
            let idle: Vec<Instant> = conns.iter().filter_map(Pooled::idle_h1_since).collect();
            assert_eq!(idle.len(), MAX_IDLE);
            assert!(idle.iter().all(|used| *used >= at(3)));
            assert!(conns.iter().any(|c| matches!(c.sender, Sender::H2(_))));
        }
        assert!(closed(&mut servers[0]).await);
        assert!(closed(&mut servers[1]).await);
        assert!(!closed(&mut servers[2]).await);
        // One put back past the others' idle timeout: they are closed, the HTTP/2 connection
        // idle as long too (as a checkout would); the busy one stays.
        let (last, _) = connection(&listener, false).await;
        pool.put(last, at(1 + MAX_IDLE as u64 + 2) + POOL_IDLE_TIMEOUT);
        {
            let conns = pool.conns.lock();
            assert_eq!(conns.len(), 2);
            assert!(conns.iter().all(|c| matches!(c.sender, Sender::H1(_))));
        }
        assert!(closed(&mut servers[MAX_IDLE + 1]).await);
        assert!(!closed(&mut busy_server).await);
    }

    #[tokio::test]
    async fn test_idle_connections_expire_without_traffic() {
        // Two idle connections put back in a pool whose timeout is short, and no request
        // after: the timer closes both once idle past it, then stops (C4).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = Pool::new(Duration::from_millis(100));
        let mut servers = Vec::new();
        for _ in 0..2 {
            let (idle, server) = connection(&listener, false).await;
            pool.put(idle, Instant::now());
            servers.push(server.unwrap());
        }
        assert!(pool.conns.lock().timer);
        for server in &mut servers {
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(10), server.read(&mut buf)).await;
            assert!(matches!(read, Ok(Ok(0) | Err(_))), "still open: {read:?}");
        }
        // The timer let go of the last one (and stopped) before it closed it.
        let conns = pool.conns.lock();
        assert!(conns.is_empty());
        assert!(!conns.timer);
    }

    #[test]
    fn test_refused_certificates_say_what_fixes_them() {
        let unknown = "invalid peer certificate: UnknownIssuer";
        assert!(
            tls_hint(unknown, None).is_some_and(|h| h.contains("set backend.upstream.ca_file"))
        );
        let ca = "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))";
        assert!(tls_hint(ca, None).is_some_and(|h| h.contains("signed by that CA")));
        assert_eq!(tls_hint("Connection refused (os error 111)", None), None);
        // With a ca_file set, the hint names the file and does not ask to set it.
        let hint = tls_hint(unknown, Some("/etc/ca.pem")).unwrap();
        assert!(
            hint.contains("[/etc/ca.pem] signed") && !hint.contains("set backend"),
            "{hint}"
        );
        // A CA of the issuer's name that did not sign it.
        let bad = "invalid peer certificate: BadSignature";
        assert!(tls_hint(bad, Some("/etc/ca.pem")).is_some_and(|h| h.contains("[/etc/ca.pem]")));
        assert_eq!(tls_hint(bad, None), None);
        // A plain HTTP port named https://.
        let plain = "received corrupt message of type InvalidContentType";
        assert!(tls_hint(plain, None).is_some_and(|h| h.contains("http://")));
    }

    #[test]
    fn test_a_hosts_failures_in_a_row_are_loud_ever_more_rarely() {
        let loud: Vec<u32> = (1..=40).filter(|f| loud(*f)).collect();
        assert_eq!(loud, vec![1, 2, 4, 8, 16, 32]);
    }
}
