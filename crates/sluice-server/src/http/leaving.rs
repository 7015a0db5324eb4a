//! A client's leaving, seen while its request runs, however many requests it pipelined behind
//! it.
//!
//! hyper's HTTP/1 server notices a client that closed its connection (and so drops the request
//! in flight: its task is cancelled, its permit or queue place freed) only when the bytes it
//! has read are all consumed: it does not read the socket while requests the client pipelined
//! wait in its buffer. A search with another request pipelined behind it then ran to its end
//! for nobody, and the requests behind it after it (each answer written to a closed
//! connection). OpenSearch's server reads its connections eagerly and cancels a closed
//! channel's requests at once.
//!
//! Here the connection's IO is [`Watched`]: while an HTTP/1 request is in flight,
//! [`StopOnLeave`] reads what the client sends next into a read-ahead buffer (at most
//! [`MAX_READ_AHEAD`] bytes; hyper gets them first, in order, before it reads the socket
//! again), and ends the request when the read finds the end of the stream or an error. The
//! request's future is dropped as if the connection had ended, and nothing more is written
//! to the connection: hyper's attempt to write the dropped request's answer fails, and it
//! ends the connection — as OpenSearch's server closes a channel whose client closed its side
//! (a client that only shut its sending side gets no answer, not a made-up one).
//!
//! # Invariants
//! - G1 — hyper reads the connection's bytes in the order the client sent them, each once:
//!   whatever the watch read ahead is handed to hyper before the socket is read again, and the
//!   end of the stream after it. Tested by `test_read_ahead_is_handed_over_first_and_in_order`,
//!   `test_the_read_ahead_stops_at_its_bound` and, end to end, by
//!   `test_requests_pipelined_behind_a_running_search_are_answered_in_order` (two requests,
//!   one with a body, sent while a search runs) and the suites: every request of an embedded
//!   node and of a gateway's general path goes through it.
//! - G2 — a client that closes or resets its connection while a request runs ends that request
//!   at once, no request it pipelined behind it starts, and nothing more is written to it.
//!   Tested by `test_client_leaving_ends_a_search_with_requests_pipelined_behind_it` and
//!   `test_a_client_that_shuts_its_sending_side_gets_no_made_up_answer`.
//! - G3 — HTTP/2 requests are not watched: hyper's HTTP/2 connection reads its socket all the
//!   time (and sees the end itself), and its requests run in tasks of their own, which must not
//!   read the connection's socket.
//! - G4 — an answer given before its request's body was read (a 401, a 403, a 413…) reaches a
//!   client that sends its whole body before it reads, as Python's `http.client` does. hyper
//!   then closes the connection, and a socket closed with unread bytes sends a reset, which
//!   can reach the client before it has read the answer (it saw a broken pipe instead). Once
//!   hyper is done with a connection, [`Leaving::linger`] closes its sending side and reads
//!   and drops what the client still sends until it closes too, as nginx's `lingering_close`
//!   does ([`LINGER_TIMEOUT`], [`LINGER_TIME`]). Tested by
//!   `test_linger_closes_the_sending_side_then_reads_until_the_client_closes` and, end to
//!   end, `test_a_large_body_refused_before_it_was_read_gets_its_answer` (the old code: a
//!   broken pipe every time).

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::response::Response;
use bytes::{Buf, BytesMut};
use http::{HeaderValue, StatusCode, header};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::read_timeout::{self, ReadClock};

/// The most bytes read ahead of hyper while a request runs: the client's next requests
/// (pipelined) or the rest of this one's body. Past it the watch stops reading until hyper has
/// taken them (the request then runs to its end, as before the watch): a client cannot make the
/// node buffer more than this. The lane reads ahead as far.
pub const MAX_READ_AHEAD: usize = 64 * 1024;

/// How much room a read ahead asks for at a time: a request head's usual size.
const READ_CHUNK: usize = 4096;

/// How long a closing connection waits for more of what its client still sends before it
/// closes (G4): nginx's `lingering_timeout` default. A client that sends nothing for this long
/// is not sending a body.
pub const LINGER_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a closing connection reads what its client still sends (G4): nginx's
/// `lingering_time` default. Bounds what a client can make the node read after its answer.
pub const LINGER_TIME: Duration = Duration::from_secs(30);

/// A connection's IO, shared between hyper and the watch of its requests.
pub struct Watched<I> {
    shared: Arc<Mutex<Inner<I>>>,
}

/// What the watch of a connection's requests reads from; see [`Watched::leaving`].
pub struct Leaving<I> {
    shared: Arc<Mutex<Inner<I>>>,
}

impl<I> Clone for Leaving<I> {
    fn clone(&self) -> Self {
        Leaving {
            shared: self.shared.clone(),
        }
    }
}

struct Inner<I> {
    io: I,
    /// The connection's `http.read_timeout` clock, told of every byte read.
    clock: Option<Arc<ReadClock>>,
    /// Set once a request was dropped because its client left: nothing more is written.
    left: bool,
    /// Read by the watch, not yet by hyper.
    ahead: BytesMut,
    /// How the stream ended, as the watch read it: handed to hyper after `ahead`.
    end: Option<End>,
}

#[derive(Clone, Copy)]
enum End {
    Closed,
    Failed(io::ErrorKind),
}

impl<I> Watched<I> {
    /// Wraps a connection's IO; `clock` (the connection's `http.read_timeout`) is told of
    /// every read that gets bytes.
    pub fn new(io: I, clock: Option<Arc<ReadClock>>) -> Self {
        Watched {
            shared: Arc::new(Mutex::new(Inner {
                io,
                clock,
                left: false,
                ahead: BytesMut::new(),
                end: None,
            })),
        }
    }

    /// The handle [`StopOnLeave`] watches the connection with.
    pub fn leaving(&self) -> Leaving<I> {
        Leaving {
            shared: self.shared.clone(),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut inner = self.shared.lock();
        // G1: what was read ahead comes first.
        if !inner.ahead.is_empty() {
            let n = inner.ahead.len().min(buf.remaining());
            buf.put_slice(&inner.ahead[..n]);
            inner.ahead.advance(n);
            return Poll::Ready(Ok(()));
        }
        match inner.end {
            Some(End::Closed) => Poll::Ready(Ok(())),
            Some(End::Failed(kind)) => Poll::Ready(Err(kind.into())),
            None => {
                let before = buf.filled().len();
                let polled = Pin::new(&mut inner.io).poll_read(cx, buf);
                if buf.filled().len() > before {
                    read_timeout::read(inner.clock.as_deref());
                }
                polled
            }
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut inner = self.shared.lock();
        if inner.left {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Pin::new(&mut inner.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut inner = self.shared.lock();
        if inner.left {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Pin::new(&mut inner.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.shared.lock().io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.shared.lock().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.shared.lock().io).poll_shutdown(cx)
    }
}

impl<I: AsyncRead + Unpin> Leaving<I> {
    /// Reads ahead what the client sent; ready once the stream has ended (closed or failed),
    /// pending while it is open or the read-ahead buffer is full.
    fn poll_left(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.shared.lock();
        let inner = &mut *inner;
        loop {
            if inner.end.is_some() {
                return Poll::Ready(());
            }
            if inner.ahead.len() >= MAX_READ_AHEAD {
                return Poll::Pending;
            }
            inner.ahead.reserve(READ_CHUNK);
            match tokio_util::io::poll_read_buf(Pin::new(&mut inner.io), cx, &mut inner.ahead) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => inner.end = Some(End::Closed),
                Poll::Ready(Ok(_)) => read_timeout::read(inner.clock.as_deref()),
                Poll::Ready(Err(e)) => inner.end = Some(End::Failed(e.kind())),
            }
        }
    }
}

impl<I> Leaving<I> {
    /// Marks the connection's client as gone for good: its request is dropped, and nothing
    /// more is written to it.
    fn refuse_writes(&self) {
        self.shared.lock().left = true;
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> Leaving<I> {
    /// Closes a connection hyper is done with (G4): its sending side first, so the client
    /// sees the answer end, then reads and drops what the client still sends, until it closes
    /// its side, fails, sends nothing for [`LINGER_TIMEOUT`] or [`LINGER_TIME`] has passed.
    /// The socket closes when the last handle is dropped.
    pub async fn linger(&self) {
        let until = Instant::now() + LINGER_TIME;
        // hyper has shut the sending side when it ended the connection itself; again is
        // harmless, and an error means the client is gone.
        if poll_fn(|cx| Pin::new(&mut self.shared.lock().io).poll_shutdown(cx))
            .await
            .is_err()
        {
            return;
        }
        let mut scratch = [0u8; READ_CHUNK];
        loop {
            let read = poll_fn(|cx| {
                let mut inner = self.shared.lock();
                if inner.end.is_some() {
                    return Poll::Ready(Ok(0));
                }
                inner.ahead.clear();
                let mut buf = ReadBuf::new(&mut scratch);
                match Pin::new(&mut inner.io).poll_read(cx, &mut buf) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            });
            let by = until.min(Instant::now() + LINGER_TIMEOUT);
            match tokio::time::timeout_at(by.into(), read).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        }
    }
}

/// A connection's service: each HTTP/1 request runs until it answers or its client leaves
/// (see the module documentation).
pub struct StopOnLeave<S, I> {
    inner: S,
    leaving: Leaving<I>,
}

impl<S: Clone, I> Clone for StopOnLeave<S, I> {
    fn clone(&self) -> Self {
        StopOnLeave {
            inner: self.inner.clone(),
            leaving: self.leaving.clone(),
        }
    }
}

impl<S, I> StopOnLeave<S, I> {
    /// `inner` for the requests of the connection `leaving` watches.
    pub fn new(inner: S, leaving: Leaving<I>) -> Self {
        StopOnLeave { inner, leaving }
    }
}

impl<S, I, B> tower::Service<http::Request<B>> for StopOnLeave<S, I>
where
    S: tower::Service<http::Request<B>, Response = Response, Error = Infallible>,
    S::Future: Unpin,
    I: AsyncRead + Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Stoppable<S::Future, I>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // G3: an HTTP/2 request runs in a task of its own; its connection reads for itself.
        let watch = (req.version() < http::Version::HTTP_2).then(|| self.leaving.clone());
        Stoppable {
            request: Some(self.inner.call(req)),
            watch,
        }
    }
}

/// A request's future that ends when its client leaves.
pub struct Stoppable<F, I> {
    /// `None` once the client has left (the request dropped).
    request: Option<F>,
    watch: Option<Leaving<I>>,
}

impl<F, I> Future for Stoppable<F, I>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
    I: AsyncRead + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some(request) = &mut this.request
            && let Poll::Ready(answer) = Pin::new(request).poll(cx)
        {
            return Poll::Ready(answer);
        }
        if let Some(watch) = &this.watch
            && watch.poll_left(cx).is_ready()
        {
            // G2: dropping the request cancels what it started, as when hyper drops it. The
            // answer is never written (the connection refuses writes from now on).
            watch.refuse_writes();
            this.request = None;
            return Poll::Ready(Ok(closing()));
        }
        Poll::Pending
    }
}

/// What hyper is given for a request whose client left: never written (the connection
/// refuses writes once its client left), and it would close the connection.
fn closing() -> Response {
    let mut resp = Response::new(axum::body::Body::empty());
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn test_read_ahead_is_handed_over_first_and_in_order() {
        let (client, server) = tokio::io::duplex(1024);
        let mut watched = Watched::new(server, None);
        let leaving = watched.leaving();
        let (mut client_read, mut client_write) = tokio::io::split(client);
        client_write.write_all(b"first second ").await.unwrap();
        // hyper reads a part, then the watch reads the rest ahead.
        let mut part = [0u8; 6];
        watched.read_exact(&mut part).await.unwrap();
        assert_eq!(&part, b"first ");
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(leaving.poll_left(&mut cx).is_pending());
        client_write.write_all(b"third").await.unwrap();
        client_write.shutdown().await.unwrap();
        // The watch reads "third" and the end; hyper still gets every byte, in order, then
        // the end.
        futures::future::poll_fn(|cx| leaving.poll_left(cx)).await;
        let mut rest = Vec::new();
        watched.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"second third");
        // Seeing the end alone does not stop answers already due (pipelined ones)...
        watched.write_all(b"answer").await.unwrap();
        let mut answer = [0u8; 6];
        client_read.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"answer");
        // ...dropping a request for it does.
        leaving.refuse_writes();
        let refused = watched.write_all(b"late").await.unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::BrokenPipe);
    }

    #[tokio::test]
    async fn test_linger_closes_the_sending_side_then_reads_until_the_client_closes() {
        let (mut client, server) = tokio::io::duplex(8 * 1024);
        let watched = Watched::new(server, None);
        let leaving = watched.leaving();
        drop(watched);
        let lingering = tokio::spawn(async move { leaving.linger().await });
        // The client sees the end of the answers, while it still sends far more than the
        // pipe holds: all of it is read.
        let mut end = [0u8; 1];
        assert_eq!(client.read(&mut end).await.unwrap(), 0);
        client.write_all(&vec![b'x'; 256 * 1024]).await.unwrap();
        client.shutdown().await.unwrap();
        lingering.await.unwrap();
    }

    #[tokio::test]
    async fn test_the_read_ahead_stops_at_its_bound() {
        let (mut client, server) = tokio::io::duplex(4 * MAX_READ_AHEAD);
        let watched = Watched::new(server, None);
        let leaving = watched.leaving();
        client
            .write_all(&vec![b'x'; 2 * MAX_READ_AHEAD])
            .await
            .unwrap();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(leaving.poll_left(&mut cx).is_pending());
        let held = watched.shared.lock().ahead.len();
        assert!(
            (MAX_READ_AHEAD..MAX_READ_AHEAD + READ_CHUNK).contains(&held),
            "{held} bytes read ahead"
        );
    }
}
