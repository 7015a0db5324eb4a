//! A connection's future run until the shutdown's grace is over (`http.shutdown_grace`,
//! [`crate::http::serve`]), at no cost a poll.
//!
//! `tokio::select!` over the connection and `CancellationToken::cancelled()` polls the token's
//! `Notified` every time the connection is polled, and a `Notified` already waiting takes its
//! list's lock to look at its waker: about 90 instructions a poll, twice a search on the fast
//! lane (2 % of a proxied search, counted with `scripts/gateway_instructions.sh`), for a
//! signal that comes once in a node's life. [`until_closed`] polls the `Notified` only when the
//! waker it registered would no longer wake the task, or once that waker was woken: a pointer
//! comparison and an atomic load of the connection's own flag a poll otherwise. (It asked the token
//! `is_cancelled` at each poll before, which takes the token's mutex: one token for every
//! connection, its lock word written by each lane thread twice a search and passed between
//! them; BENCHMARKS.md "Lines the lane threads shared".)
//!
//! With the same registration, made once, it wakes the task when the shutdown begins
//! ([`until_closed_waking`]), so that a connection waiting for its next request learns it with
//! [`begun`], a load of the watch's version, instead of joining the watch's list each time it
//! waits: joining and leaving took that list's lock four times a search, a lock every
//! connection of both lane threads writes (BENCHMARKS.md "Atomics a search").
//!
//! # Invariants
//! - S1 — the connection's future is polled as it would be alone, and its output is returned
//!   as soon as it is ready, even when the token is cancelled at the same time. Tested by
//!   `test_the_future_runs_to_its_end_before_any_close`.
//! - S2 — once the token is cancelled, the task that last polled is woken and `None` comes
//!   back at its next poll, the future dropped unfinished: the `Notified` always holds the
//!   latest waker that would not wake the same task (`Waker::will_wake`). Tested by
//!   `test_a_cancel_wakes_the_latest_waker` (it fails when the first waker is kept).
//! - S3 — a future awaiting [`begun`] inside [`until_closed_waking`] is polled again once the
//!   shutdown begins, however late or early: the watch's change wakes the task's latest
//!   waker, as S2's cancel does, and a change found at the registration itself (one before
//!   the connection's first poll, or between the future's read and the registration) has the
//!   future polled again in the same poll. Tested by
//!   `test_the_shutdown_wakes_a_connection_waiting_for_it` (it fails with the watch not
//!   registered) and `test_a_shutdown_before_the_first_poll_is_seen_at_once`.
//!
//! The connection's future is borrowed pinned where its caller keeps it, not taken by value:
//! an `async fn` keeps a future it is given by value in its own state beside the pinned copy
//! it polls (rustc gives every argument a slot of its own for the whole of the body), so a
//! connection's future wrapped by value here and by [`crate::http::read_timeout::run`] took
//! four times the size of the connection's own (34 KB a fast-lane connection in a debug
//! build, where its own is 8 KB).

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Runs `fut` until it ends (`Some` of its output) or `closing` is cancelled (`None`, `fut`
/// left unfinished, for its owner to drop).
///
/// # Cancel safety
/// Dropping this leaves `fut` where it was, unfinished.
pub async fn until_closed<F: Future + ?Sized>(
    fut: Pin<&mut F>,
    closing: &CancellationToken,
) -> Option<F::Output> {
    run(fut, closing, None).await
}

/// [`until_closed`], with the task woken once when `shutdown` changes or its sender is gone
/// (the shutdown begins): `fut` learns it with [`begun`] (S3).
///
/// # Cancel safety
/// As [`until_closed`].
pub async fn until_closed_waking<F: Future + ?Sized>(
    fut: Pin<&mut F>,
    closing: &CancellationToken,
    shutdown: watch::Receiver<()>,
) -> Option<F::Output> {
    run(fut, closing, Some(shutdown)).await
}

/// Ready once `shutdown` has changed or its sender is gone; it registers no waker: inside
/// [`until_closed_waking`] with a receiver of the same watch, the task is woken then (S3).
pub fn begun(shutdown: &watch::Receiver<()>) -> impl Future<Output = ()> + '_ {
    poll_fn(|_| {
        if shutdown.has_changed().unwrap_or(true) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
}

async fn run<F: Future + ?Sized>(
    mut fut: Pin<&mut F>,
    closing: &CancellationToken,
    shutdown: Option<watch::Receiver<()>>,
) -> Option<F::Output> {
    let mut cancelled = pin!(closing.cancelled());
    let mut changed = pin!(async move {
        match shutdown {
            // Changed, or the sender gone: the shutdown has begun either way.
            Some(mut shutdown) => {
                let _ = shutdown.changed().await;
            }
            None => std::future::pending().await,
        }
    });
    // What the signals were last polled with (S2, S3): the task's waker, and whether either
    // woke it. One registration for both: a wake-up of either has both looked at.
    let mut registered: Option<Arc<Noting>> = None;
    let mut shutdown_seen = false;
    poll_fn(|cx| {
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            let current = registered.as_ref().filter(|r| r.task.will_wake(cx.waker()));
            let noting = match current {
                // Not woken by a signal: nothing to look at (a load, no write, the usual poll).
                Some(r) if !r.woken.load(Ordering::Acquire) => return Poll::Pending,
                // Woken: the signals themselves say whether they are ready (a wake-up after
                // this reset sets the flag again).
                Some(r) => {
                    r.woken.store(false, Ordering::Relaxed);
                    r.clone()
                }
                None => {
                    let r = Arc::new(Noting {
                        woken: AtomicBool::new(false),
                        task: cx.waker().clone(),
                    });
                    registered = Some(r.clone());
                    r
                }
            };
            let waker = Waker::from(noting);
            let mut signals = Context::from_waker(&waker);
            if cancelled.as_mut().poll(&mut signals).is_ready() {
                return Poll::Ready(None);
            }
            if shutdown_seen || changed.as_mut().poll(&mut signals).is_pending() {
                return Poll::Pending;
            }
            // The shutdown began: `fut` is polled again, whatever it read before (S3).
            shutdown_seen = true;
        }
    })
    .await
}

/// The waker the signals are polled with: notes that it was woken, then wakes the task.
struct Noting {
    woken: AtomicBool,
    task: Waker,
}

impl Wake for Noting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake};

    use super::*;

    /// A waker counting its wakes.
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn test_the_future_runs_to_its_end_before_any_close() {
        let closing = CancellationToken::new();
        closing.cancel();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        // Ready at once: its output, though the token is cancelled.
        let fut = pin!(async { 7 });
        let mut run = pin!(until_closed(fut, &closing));
        assert_eq!(run.as_mut().poll(&mut cx), Poll::Ready(Some(7)));
    }

    #[test]
    fn test_a_cancel_wakes_the_latest_waker() {
        let closing = CancellationToken::new();
        let fut = pin!(std::future::pending::<()>());
        let mut run = pin!(until_closed(fut, &closing));
        let first = Arc::new(Counting(AtomicUsize::new(0)));
        let second = Arc::new(Counting(AtomicUsize::new(0)));
        let (w1, w2) = (Waker::from(first.clone()), Waker::from(second.clone()));
        assert!(
            run.as_mut()
                .poll(&mut Context::from_waker(&w1))
                .is_pending()
        );
        assert!(
            run.as_mut()
                .poll(&mut Context::from_waker(&w1))
                .is_pending()
        );
        // The task moved to another waker: the cancel must wake that one.
        assert!(
            run.as_mut()
                .poll(&mut Context::from_waker(&w2))
                .is_pending()
        );
        closing.cancel();
        assert_eq!(second.0.load(Ordering::SeqCst), 1, "the latest waker woken");
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(
            run.as_mut().poll(&mut Context::from_waker(&w2)),
            Poll::Ready(None)
        );
    }

    /// A connection waiting in `begun`, as a lane connection between requests.
    async fn waiting(shutdown: &watch::Receiver<()>) -> &'static str {
        begun(shutdown).await;
        "closed"
    }

    #[test]
    fn test_the_shutdown_wakes_a_connection_waiting_for_it() {
        let closing = CancellationToken::new();
        let (tx, rx) = watch::channel(());
        let fut = pin!(waiting(&rx));
        let mut run = pin!(until_closed_waking(fut, &closing, rx.clone()));
        let woken = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(run.as_mut().poll(&mut cx).is_pending());
        assert!(run.as_mut().poll(&mut cx).is_pending());
        tx.send(()).unwrap();
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "the shutdown wakes the task"
        );
        assert_eq!(run.as_mut().poll(&mut cx), Poll::Ready(Some("closed")));
    }

    #[test]
    fn test_a_shutdown_before_the_first_poll_is_seen_at_once() {
        let closing = CancellationToken::new();
        let (tx, rx) = watch::channel(());
        // The future reads the watch unchanged; the change comes before the registration.
        let read_first = Arc::new(AtomicUsize::new(0));
        let fut = pin!(async {
            std::future::poll_fn(|_| {
                if read_first.fetch_add(1, Ordering::SeqCst) == 0 {
                    assert!(!rx.has_changed().unwrap());
                    tx.send(()).unwrap();
                    return Poll::Pending;
                }
                Poll::Ready(())
            })
            .await;
            begun(&rx).await;
        });
        let mut run = pin!(until_closed_waking(fut, &closing, rx.clone()));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(run.as_mut().poll(&mut cx), Poll::Ready(Some(())));
    }
}
