//! The bodies the gateway streams through itself, both ways.
//!
//! A client's body as the gateway streams it to the upstream, watched for its end: an upstream
//! that answers before it read the whole body (an early 413, or an error before it reads) stops
//! the streaming, the rest of the client's body is never read, and hyper closes the client's
//! connection after the answer. The answer must say so (RFC 9112 §9.6): a client that pipelined
//! its next request, or reuses the connection, otherwise loses it (an outside trial's relayed
//! 413s came without `Connection: close` in up to 9 of 10 tries, though the gateway closed).
//!
//! An upstream's answer body as the general path streams it back ([`AnswerBody`]), each wait
//! for its next bytes bounded by `backend.upstream.request_timeout` ([`IdleBound`], which the
//! fast lane's relay uses too, `h1` R7), as nginx's `proxy_read_timeout` bounds the time
//! between two reads of an upstream's answer: `request_timeout` once bounded only the wait for
//! the answer's head, and an upstream that went silent after it kept the client waiting, and
//! the upstream connection open, for good (an outside trial's fake upstream sent a head and 10
//! bytes). The head is already relayed then, so no error status can be given: the body fails,
//! hyper closes the client's connection (as nginx closes it), and the upstream connection is
//! dropped, never pooled again.
//!
//! # Invariants
//! - E1 — [`EndWatched::ended`] is true once the body yielded its last byte: its end of stream,
//!   or, for a body of a length its request announced, the frame that completes that length
//!   (hyper's client, sending a body of known length, stops polling once the length is sent;
//!   and a body behind the node's layers may not tell its own end). Tested by
//!   `test_the_end_is_seen_with_the_last_byte`.
//! - E2 — an answer body fails only after a wait for its next bytes lasted the bound: the
//!   deadline is set by the first poll that finds nothing, and set again only by a wait that
//!   follows bytes (a poll that finds nothing again, woken early, keeps it); time the consumer
//!   does not poll (a client slow to read its answer) is no wait. The body then yields its
//!   error once, drops the upstream's body (hyper closes its connection) and ends; one that
//!   fails or goes silent after a successful head counts a failure in its group's stats once
//!   ([`AnswerBody::count_failure_in`]). No clock is read and no timer set while every poll
//!   finds bytes. Tested by `test_a_wait_fails_only_once_it_lasted_the_bound`,
//!   `test_a_failed_answer_counts_one_failure_and_ends` and, end to end,
//!   `test_an_upstream_silent_mid_answer_closes_the_clients_connection` (lane off).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::deadline::SecondLook;
use crate::workload::stats::GroupStats;

/// A body whose end is recorded in a flag the caller keeps ([`EndWatched::watch`]).
pub struct EndWatched {
    inner: Body,
    /// The bytes of the announced length still to come.
    left: Option<u64>,
    ended: Arc<AtomicBool>,
}

impl EndWatched {
    /// `body`, of the `length` its request announced if it did, watched; and the flag that
    /// tells whether it ended (E1).
    pub fn watch(body: Body, length: Option<u64>) -> (Body, Arc<AtomicBool>) {
        let ended = Arc::new(AtomicBool::new(length == Some(0)));
        let watched = EndWatched {
            inner: body,
            left: length,
            ended: ended.clone(),
        };
        (Body::new(watched), ended)
    }

    /// Whether the body behind `flag` ended.
    pub fn ended(flag: &AtomicBool) -> bool {
        flag.load(Ordering::Acquire)
    }
}

impl HttpBody for EndWatched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                self.left = self.left.map(|left| left.saturating_sub(n));
                self.left == Some(0)
            }
            _ => false,
        };
        if ended {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The bound on each wait for an upstream answer's next bytes (E2), as nginx's
/// `proxy_read_timeout`: the time between two reads, not the whole answer's, so an answer of
/// any size streams through as long as its bytes keep coming.
///
/// One deadline per answer, made by the first wait and moved by the later ones: an answer
/// that never waits (a search's, which mostly arrives with its head) reads no clock and sets
/// no timer.
pub struct IdleBound {
    bound: Duration,
    /// Boxed: a tokio `Sleep` must stay pinned, and the bodies and relays holding this move.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether the last poll found nothing (the wait the deadline times is on).
    waiting: bool,
    /// Once the deadline's timer fired, the turn that lets bytes that came while the gateway
    /// stalled be seen before the wait counts as too long (`crate::deadline`).
    second_look: SecondLook,
}

/// How far off a deadline too far to be represented is set instead (a `request_timeout` of
/// centuries): nothing waits that long, and `Instant + Duration` would panic past the clock's
/// range.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl IdleBound {
    /// A bound of `bound` a wait, no wait begun.
    pub fn new(bound: Duration) -> IdleBound {
        IdleBound {
            bound,
            sleep: None,
            waiting: false,
            second_look: SecondLook::default(),
        }
    }

    /// The bound.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// Records that a read found bytes (or the end): the next wait is timed anew.
    pub fn read(&mut self) {
        self.waiting = false;
        self.second_look.reset();
    }

    /// Called when a read finds nothing: ready once the wait has lasted the bound and a read
    /// after the runtime's next look at its sockets found nothing either (`crate::deadline`
    /// D1), else pending with `cx` woken at the deadline. The first call of a wait sets the
    /// deadline.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.waiting {
            self.waiting = true;
            let now = Instant::now();
            let at = now
                .checked_add(self.bound)
                .or_else(|| now.checked_add(FAR))
                .unwrap_or(now);
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(at),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
            }
        }
        match &mut self.sleep {
            Some(sleep) => {
                std::task::ready!(sleep.as_mut().poll(cx));
                let deadline = sleep.deadline();
                self.second_look.poll_taken(cx, deadline)
            }
            None => Poll::Pending,
        }
    }
}

/// Why an upstream answer's body stopped before its end: as the answer's consumer sees it
/// (hyper ends the client's connection; a body read whole names it in its 502).
#[derive(Debug)]
pub enum AnswerError<E = hyper::Error> {
    /// The upstream's body failed (the connection reset, closed early, bad framing): shown as
    /// that error, its causes its own.
    Broke(E),
    /// The upstream sent nothing more of it within the bound.
    Silent(Duration),
}

impl<E: std::fmt::Display> std::fmt::Display for AnswerError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerError::Broke(e) => e.fmt(f),
            AnswerError::Silent(bound) => f.write_str(&silent(*bound)),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for AnswerError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AnswerError::Broke(e) => e.source(),
            AnswerError::Silent(_) => None,
        }
    }
}

/// What an answer that went silent for `bound` is said to have done, on both paths.
pub fn silent(bound: Duration) -> String {
    format!(
        "the upstream sent nothing more of its answer within backend.upstream.request_timeout [{}]",
        sluice_wire::format_time_value(bound)
    )
}

/// An upstream answer's body, each wait for its next bytes bounded (E2): what the general
/// path's client answers with ([`super::client::UpstreamClient::send`]).
pub struct AnswerBody<B = Incoming> {
    /// The upstream's body; `None` once it failed (dropping it closes its connection).
    inner: Option<B>,
    idle: IdleBound,
    /// The group whose task's answer this is, when its head counted a success: a failure
    /// mid-body counts in it.
    failures: Option<Arc<GroupStats>>,
}

impl<B> AnswerBody<B> {
    /// `inner`, each wait for its next bytes bounded by `bound`.
    pub fn new(inner: B, bound: Duration) -> AnswerBody<B> {
        AnswerBody {
            inner: Some(inner),
            idle: IdleBound::new(bound),
            failures: None,
        }
    }

    /// Counts the body failing (broken off or silent) as a failure in `stats` (E2), for the
    /// answer of a task whose end was counted a success with the answer's head: a task
    /// whose client got half an answer did not end well. An error status already counted a
    /// failure, and is not counted twice.
    pub fn count_failure_in(&mut self, status: http::StatusCode, stats: &Arc<GroupStats>) {
        if status.is_success() {
            self.failures = Some(stats.clone());
        }
    }

    /// The body failed: the upstream's is dropped, the failure counted once.
    fn fail(&mut self) {
        self.inner = None;
        if let Some(stats) = self.failures.take() {
            stats.failures.inc();
        }
    }
}

impl<B> HttpBody for AnswerBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = AnswerError<B::Error>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                this.fail();
                Poll::Ready(Some(Err(AnswerError::Broke(e))))
            }
            Poll::Ready(frame) => {
                this.idle.read();
                Poll::Ready(frame.map(|f| f.map_err(AnswerError::Broke)))
            }
            Poll::Pending => match this.idle.poll_expired(cx) {
                Poll::Ready(()) => {
                    let bound = this.idle.bound();
                    tracing::warn!(cause = %silent(bound),
                        "an upstream answer stopped mid-body; its client's connection is closed");
                    this.fail();
                    Poll::Ready(Some(Err(AnswerError::Silent(bound))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn test_the_end_is_seen_with_the_last_byte() {
        // A body of an announced length: ended with its last frame, before any end of stream.
        let (mut body, ended) = EndWatched::watch(Body::from("abc"), Some(3));
        assert!(!EndWatched::ended(&ended));
        let frame = body.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().ok(), Some(Bytes::from("abc")));
        assert!(EndWatched::ended(&ended));
        // A stream of unknown length: ended at its end of stream, not before.
        let chunks = futures::stream::iter([
            Ok::<_, std::io::Error>(Bytes::from("a")),
            Ok(Bytes::from("b")),
        ]);
        let (mut body, ended) = EndWatched::watch(Body::from_stream(chunks), None);
        let _ = body.frame().await;
        let _ = body.frame().await;
        assert!(!EndWatched::ended(&ended));
        assert!(body.frame().await.is_none());
        assert!(EndWatched::ended(&ended));
        // An announced empty body has ended before it is polled.
        let (_, ended) = EndWatched::watch(Body::empty(), Some(0));
        assert!(EndWatched::ended(&ended));
    }

    /// A body fed by the test through a channel.
    struct Fed(tokio::sync::mpsc::UnboundedReceiver<Result<Bytes, std::io::Error>>);

    impl HttpBody for Fed {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
        }
    }

    type Feed = tokio::sync::mpsc::UnboundedSender<Result<Bytes, std::io::Error>>;

    /// A fed body bounded by `bound` a wait, and what feeds it.
    fn fed(bound: Duration) -> (AnswerBody<Fed>, Feed) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (AnswerBody::new(Fed(rx), bound), tx)
    }

    const BOUND: Duration = Duration::from_millis(100);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    type Polled = Poll<Option<Result<Frame<Bytes>, AnswerError<std::io::Error>>>>;

    /// Polls `body` as its task is polled once its deadline's timer fired: once, and once
    /// more after the turn of the runtime the second look waits for (`crate::deadline`).
    async fn poll_past_deadline(body: &mut AnswerBody<Fed>) -> Polled {
        let first = futures::poll!(body.frame());
        if first.is_ready() {
            return first;
        }
        tokio::task::yield_now().await;
        futures::poll!(body.frame())
    }

    #[tokio::test(start_paused = true)]
    async fn test_bytes_that_came_by_the_second_look_come_through() {
        let (mut body, feed) = fed(BOUND);
        assert!(futures::poll!(body.frame()).is_pending());
        tokio::time::advance(BOUND).await;
        // The timer fired; bytes the gateway had not seen yet (it stalled) are there by the
        // second look: they win, and the next wait is timed anew.
        assert!(futures::poll!(body.frame()).is_pending());
        feed.send(Ok(Bytes::from("a"))).unwrap();
        let frame = futures::poll!(body.frame());
        assert!(matches!(frame, Poll::Ready(Some(Ok(_)))), "{frame:?}");
        assert!(futures::poll!(body.frame()).is_pending());
        tokio::time::advance(ms(60)).await;
        assert!(futures::poll!(body.frame()).is_pending());
    }

    #[tokio::test(start_paused = true)]
    async fn test_a_wait_fails_only_once_it_lasted_the_bound() {
        let (mut body, feed) = fed(BOUND);
        // Bytes after most of the bound: they come through.
        assert!(futures::poll!(body.frame()).is_pending());
        tokio::time::advance(ms(60)).await;
        feed.send(Ok(Bytes::from("a"))).unwrap();
        let frame = futures::poll!(body.frame());
        assert!(matches!(frame, Poll::Ready(Some(Ok(_)))), "{frame:?}");
        // Time the consumer does not poll is no wait: a slow client is not the upstream.
        tokio::time::advance(ms(500)).await;
        assert!(futures::poll!(body.frame()).is_pending());
        // A poll that finds nothing again keeps the wait's deadline: polled at 60 ms and
        // 110 ms into a wait, the body fails at the second (a deadline set again at 60 ms
        // would still wait).
        tokio::time::advance(ms(60)).await;
        assert!(futures::poll!(body.frame()).is_pending());
        tokio::time::advance(ms(50)).await;
        let frame = poll_past_deadline(&mut body).await;
        assert!(
            matches!(frame, Poll::Ready(Some(Err(AnswerError::Silent(b)))) if b == BOUND),
            "{frame:?}"
        );
        // Failed: the upstream's body is dropped, and the body ends.
        assert!(feed.is_closed());
        assert!(matches!(futures::poll!(body.frame()), Poll::Ready(None)));
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn test_a_failed_answer_counts_one_failure_and_ends() {
        let stats = Arc::new(GroupStats::default());
        // A successful head's answer that breaks off: one failure, however often polled.
        let (mut body, feed) = fed(BOUND);
        body.count_failure_in(http::StatusCode::OK, &stats);
        feed.send(Err(std::io::Error::other("reset"))).unwrap();
        let frame = futures::poll!(body.frame());
        assert!(
            matches!(&frame, Poll::Ready(Some(Err(AnswerError::Broke(e)))) if e.to_string() == "reset"),
            "{frame:?}"
        );
        assert!(matches!(futures::poll!(body.frame()), Poll::Ready(None)));
        assert_eq!(stats.failures.get(), 1);
        // One that goes silent: one more.
        let (mut body, _feed) = fed(BOUND);
        body.count_failure_in(http::StatusCode::OK, &stats);
        assert!(futures::poll!(body.frame()).is_pending());
        tokio::time::advance(BOUND).await;
        assert!(matches!(
            poll_past_deadline(&mut body).await,
            Poll::Ready(Some(Err(_)))
        ));
        assert_eq!(stats.failures.get(), 2);
        // An error status counted its failure with its head: its body failing adds none.
        let (mut body, _feed) = fed(BOUND);
        body.count_failure_in(http::StatusCode::SERVICE_UNAVAILABLE, &stats);
        assert!(futures::poll!(body.frame()).is_pending());
        tokio::time::advance(BOUND).await;
        assert!(matches!(
            poll_past_deadline(&mut body).await,
            Poll::Ready(Some(Err(_)))
        ));
        assert_eq!(stats.failures.get(), 2);
        // An answer that ends well counts nothing.
        let (mut body, feed) = fed(BOUND);
        body.count_failure_in(http::StatusCode::OK, &stats);
        feed.send(Ok(Bytes::from("{}"))).unwrap();
        drop(feed);
        assert!(matches!(
            futures::poll!(body.frame()),
            Poll::Ready(Some(Ok(_)))
        ));
        assert!(matches!(futures::poll!(body.frame()), Poll::Ready(None)));
        assert_eq!(stats.failures.get(), 2);
    }
}
