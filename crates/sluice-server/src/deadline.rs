//! Deadlines that a stall of the node does not turn against I/O that was ready in time.
//!
//! A node that stops running for a while — a VM frozen or migrated, a container paused,
//! `SIGSTOP`, a debugger — finds on waking both its timers expired and its sockets full of what
//! arrived meanwhile. tokio collects the sockets' readiness only when its I/O driver polls
//! epoll, and a thread resumed from a stop often comes back from `epoll_wait` with `EINTR` and
//! no events (Linux does this without any signal handler, signal(7)): the driver then fires the
//! expired timers at once, and a future bounded by [`tokio::time::timeout_at`] is polled,
//! finds its read "not ready", and loses to its deadline. An outside trial paused a gateway for
//! 17 s right after it forwarded a search: the upstream answered in 25 ms, the answer sat in
//! the socket, and the client got a 504 "did not answer within request_timeout" while the
//! healthy host was put in back-off (2 of 3 tries). nginx, which handles ready events before
//! expired timers, answers such a request.
//!
//! So a deadline here is judged again after its timer fired: once the runtime has polled its I/O
//! driver since ([`tokio::task::yield_now`] defers the task's wake-up until the driver has run),
//! which is enough for I/O the waiting task does itself (the fast lane's); and, when the timer
//! fired [`STALLED_PAST`] or more after the deadline — the node was not running — once more
//! after [`CATCH_UP`], time for the tasks that the driver woke to run (hyper's connection task
//! reads the general path's answers, then hands them over). What arrived during the stall is
//! then seen and wins; a future still pending then has truly had its time.
//!
//! # Invariants
//! - D1 — a future whose I/O was ready when its deadline fired completes with its output, not
//!   [`Passed`]. Tested by `test_a_read_ready_when_the_deadline_fires_wins`, and end to end by
//!   `gateway::pause::test_a_paused_gateway_relays_what_its_upstream_answered_meanwhile`
//!   (the fast lane, the general path, and an answer's body after its head).
//! - D2 — a deadline is extended by no more than one scheduler turn after its timer fired, or,
//!   when the timer fired [`STALLED_PAST`] late or later, by [`CATCH_UP`] more: a future still
//!   pending then is [`Passed`]. Tested by `test_a_future_that_stays_pending_has_passed`.
//! - D3 — before its deadline a future runs exactly as under [`tokio::time::timeout_at`]: the
//!   second look costs nothing until a timer fired.

pub mod lane;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

/// How late a timer must fire for the node to count as having stalled: tokio fires a timer
/// within a millisecond or two of its deadline on a running node, and tens of milliseconds
/// late on one that is merely busy; a tenth of a second means the process was not running
/// (or so far behind that its sockets hold I/O it has not looked at).
pub const STALLED_PAST: Duration = Duration::from_millis(100);

/// What a node that stalled gets, after the turn of its scheduler, to take in what arrived
/// meanwhile: the woken tasks run in microseconds, a few milliseconds on a loaded machine; a
/// tenth of a second covers that many times over, and is small next to any `request_timeout`.
pub const CATCH_UP: Duration = Duration::from_millis(100);

/// A deadline that passed with the future still pending, after the second look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed;

/// `fut` bounded by `deadline`, as [`tokio::time::timeout_at`] bounds it, except that a future
/// pending when the timer fires is given the second look of the module docs (D1, D2).
///
/// `fut` is borrowed pinned where its caller keeps it, not taken by value: an `async fn`
/// keeps an argument in a slot of its own beside the pinned copy it polls, and the copy
/// moved it (the upstream exchange, about a kilobyte) once more a request
/// (`crate::http::closing` says the same of a connection's future).
pub async fn within<F: Future + ?Sized>(
    deadline: Instant,
    mut fut: Pin<&mut F>,
) -> Result<F::Output, Passed> {
    if let Ok(out) = tokio::time::timeout_at(deadline, fut.as_mut()).await {
        return Ok(out);
    }
    let stalled = Instant::now().saturating_duration_since(deadline) >= STALLED_PAST;
    tokio::task::yield_now().await;
    if let Some(out) = fut.as_mut().now_or_never() {
        return Ok(out);
    }
    if !stalled {
        return Err(Passed);
    }
    tokio::time::timeout(CATCH_UP, fut)
        .await
        .map_err(|_| Passed)
}

/// Ends once `deadline` has passed and the second look is over: the deadline of a `select!`
/// whose other branches it bounds, polled after them (`biased`), so that what came during a
/// stall is seen by those first (D1).
pub async fn passed(deadline: Instant) {
    tokio::time::sleep_until(deadline).await;
    look_again(deadline).await;
}

/// The second look, from the moment the timer of `deadline` fired.
async fn look_again(deadline: Instant) {
    let stalled = Instant::now().saturating_duration_since(deadline) >= STALLED_PAST;
    tokio::task::yield_now().await;
    if stalled {
        tokio::time::sleep(CATCH_UP).await;
    }
}

/// The second look for a future that is polled by hand, whose own poll of its I/O comes first
/// at every wake-up.
#[derive(Default)]
pub struct SecondLook {
    /// The look, once the timer fired; `None` before. Boxed twice so that what holds it
    /// (every answer body of the general path) grows by one thin pointer, not two words: the
    /// second allocation is made only after a timer fired.
    taken: Option<Box<Look>>,
}

/// A second look under way.
type Look = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

impl SecondLook {
    /// Called once the timer of `deadline` fired, with the I/O still pending: ready once the
    /// look is over (the deadline has then passed), else pending with `cx` woken when it is.
    /// Boxed only after a timer fired, never on the way there.
    pub fn poll_taken(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let look: &mut Look = self
            .taken
            .get_or_insert_with(|| Box::new(Box::pin(look_again(deadline))));
        look.as_mut().poll(cx)
    }

    /// Forgets a look taken: the I/O made progress, the next deadline is judged anew.
    pub fn reset(&mut self) {
        if self.taken.is_some() {
            self.taken = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::io::AsyncReadExt;

    /// A deadline its timer takes as passed when it is first polled, with no turn of the
    /// runtime's driver: one a stall left behind.
    fn long_ago() -> Instant {
        Instant::now() - std::time::Duration::from_secs(1)
    }

    /// A connected pair: the std end writes without the runtime, the tokio end reads.
    async fn pair() -> (std::net::TcpStream, tokio::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, tokio::net::TcpStream::from_std(server).unwrap())
    }

    #[tokio::test]
    async fn test_a_read_ready_when_the_deadline_fires_wins() {
        let (mut peer, mut conn) = pair().await;
        // The bytes are in the socket, but the runtime's driver has not run since the
        // stream was registered, so tokio does not know it is readable, and the deadline
        // passed long ago, so its timer fires without a turn of the driver: the state a
        // stalled node wakes in.
        peer.write_all(b"answer").unwrap();
        let mut buf = [0u8; 6];
        let read = within(long_ago(), std::pin::pin!(conn.read_exact(&mut buf))).await;
        assert_eq!(read.map(|r| r.is_ok()), Ok(true));
        assert_eq!(&buf, b"answer");
    }

    #[tokio::test]
    async fn test_the_same_read_loses_to_a_plain_timeout() {
        // What D1 guards against, shown with tokio's own timeout: it keeps the test above
        // honest (if tokio ever saw the bytes first, that test would prove nothing).
        let (mut peer, mut conn) = pair().await;
        peer.write_all(b"answer").unwrap();
        let mut buf = [0u8; 6];
        let read = tokio::time::timeout_at(long_ago(), conn.read_exact(&mut buf)).await;
        assert!(read.is_err());
    }

    #[tokio::test]
    async fn test_a_future_that_stays_pending_has_passed() {
        let (_peer, mut conn) = pair().await;
        let mut buf = [0u8; 1];
        let read = within(long_ago(), std::pin::pin!(conn.read_exact(&mut buf))).await;
        assert_eq!(read.map(|_| ()), Err(Passed));
    }

    #[tokio::test]
    async fn test_a_second_look_is_pending_once_then_ready() {
        let mut look = SecondLook::default();
        let now = Instant::now();
        let first = std::future::poll_fn(|cx| Poll::Ready(look.poll_taken(cx, now))).await;
        assert!(first.is_pending());
        std::future::poll_fn(|cx| look.poll_taken(cx, now)).await;
        look.reset();
        let again = std::future::poll_fn(|cx| Poll::Ready(look.poll_taken(cx, now))).await;
        assert!(again.is_pending(), "a reset look is taken anew");
    }

    #[tokio::test]
    async fn test_a_stalled_deadline_waits_for_what_other_tasks_hand_over() {
        // As hyper's connection task hands the general path its answer: another task, which
        // the driver woke, has to run first. Here it takes several turns.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            let _ = tx.send("answer");
        });
        assert_eq!(
            within(long_ago(), std::pin::pin!(rx)).await,
            Ok(Ok("answer"))
        );
    }
}
