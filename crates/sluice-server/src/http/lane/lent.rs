//! Requests the lane lends to hyper ([`super`] L2): a run of other requests served by the
//! node's whole HTTP service, after which the connection comes back to the lane, or a
//! connection handed to hyper for good.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, header};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::io::poll_read_buf;
use tower::ServiceExt;

use super::parse::{MAX_HEAD, Parsed, parse};
use super::{Conn, MAX_READ_AHEAD};
use crate::backend::upstream::headers::connection_tokens;
use crate::http::heads::{Heads, Refusals};
use crate::http::leaving::{StopOnLeave, Watched};
use crate::http::read_timeout::{self, ReadClock};
use crate::metrics::LaneEvent;
use crate::state::AppState;

/// Hands the connection to hyper and the node's HTTP service with the bytes read so far (L2),
/// watched for graceful shutdown as the accept loop watches its own.
pub(super) async fn hand_off(stream: TcpStream, read: BytesMut, peer: SocketAddr, conn: Conn) {
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
pub(super) async fn lent_run(
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
