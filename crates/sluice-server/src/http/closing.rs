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
//! # Invariants
//! - S1 — the connection's future is polled as it would be alone, and its output is returned
//!   as soon as it is ready, even when the token is cancelled at the same time. Tested by
//!   `test_the_future_runs_to_its_end_before_any_close`.
//! - S2 — once the token is cancelled, the task that last polled is woken and `None` comes
//!   back at its next poll, the future dropped unfinished: the `Notified` always holds the
//!   latest waker that would not wake the same task (`Waker::will_wake`). Tested by
//!   `test_a_cancel_wakes_the_latest_waker` (it fails when the first waker is kept).
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

use tokio_util::sync::CancellationToken;

/// Runs `fut` until it ends (`Some` of its output) or `closing` is cancelled (`None`, `fut`
/// left unfinished, for its owner to drop).
///
/// # Cancel safety
/// Dropping this leaves `fut` where it was, unfinished.
pub async fn until_closed<F: Future + ?Sized>(
    mut fut: Pin<&mut F>,
    closing: &CancellationToken,
) -> Option<F::Output> {
    let mut cancelled = pin!(closing.cancelled());
    // What `cancelled` was last polled with (S2): the task's waker, and whether it was woken.
    let mut registered: Option<Arc<Noting>> = None;
    poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        let current = registered.as_ref().filter(|r| r.task.will_wake(cx.waker()));
        let noting = match current {
            // Not woken by the token: nothing to look at (a load, no write, the usual poll).
            Some(r) if !r.woken.load(Ordering::Acquire) => return Poll::Pending,
            // Woken: `cancelled` itself says whether the token is cancelled (a wake-up after
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
        if cancelled
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready()
        {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// The waker `cancelled` is polled with: notes that it was woken, then wakes the task.
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
}
