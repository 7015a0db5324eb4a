//! A future polled again at once when it wakes itself during its own poll, instead of being
//! handed back to the scheduler.
//!
//! hyper's HTTP/1 server runs a connection's dispatcher and its request handler in one task:
//! the handler asking for the request body wakes the dispatcher, the dispatcher handing the
//! body over wakes the handler, both during the same poll. tokio takes a task woken while it
//! runs as a task that yields: it puts it at the back of the run queue and unparks another
//! worker to steal it. Every request with a body then costs a futex wake, a context switch on
//! the other core and a poll there that finds nothing to do (measured on a gateway at one
//! client: 2.09 futex calls and 4.75 context switches per request, 0.00 and 2.89 for nginx
//! doing the same proxying; 0.13 and 3.12 with this wrapper; BENCHMARKS.md, "Gateway
//! overhead"). [`Repoll`] keeps such wakes inside
//! the poll: the inner future is polled with a waker of its own, and a wake that arrives while
//! it is being polled makes [`Repoll`] poll it again before returning, up to [`REPOLLS`] times.
//! A wake that arrives after the poll reaches the task's waker as usual.
//!
//! # Invariants
//!
//! 1. **No wake is lost.** A wake of the inner future's waker either reaches the task's waker
//!    or happens during a poll of the inner future that [`Repoll`] then follows with another
//!    poll (or, past [`REPOLLS`], with a wake of the task's waker).
//!    Tests: `test_a_wake_after_the_poll_reaches_the_task`, `loom_repoll::
//!    test_a_wake_from_another_thread_is_never_lost`.
//! 2. **A self-wake costs no trip through the scheduler.** A future that wakes itself while it
//!    is polled is polled again within the same poll, and the task's waker is not woken.
//!    Test: `test_a_self_wake_is_polled_again_without_waking_the_task`.
//! 3. **Bounded.** A future that wakes itself on every poll is polled at most [`REPOLLS`] times
//!    per poll of [`Repoll`], which then wakes the task and returns `Pending`, as a yield does.
//!    Test: `test_a_future_that_always_wakes_itself_yields_after_the_bound`.
//!
//! # Memory ordering
//!
//! The state is one atomic: [`IDLE`], [`POLLING`] or [`WOKEN`]. A wake moves `POLLING` to
//! `WOKEN` (acquire-release compare-exchange) or, finding `IDLE`, wakes the task; the poll
//! loop ends a round by moving `POLLING` back to `IDLE` with a compare-exchange, and a
//! failure (the state is `WOKEN`) means a wake came during the round, so it polls again. The
//! compare-exchanges order the wake's writes (what it woke the future for) before the next
//! poll's reads.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Wake, Waker};

use crate::sync::{AtomicU8, Mutex};

/// How many times one poll of [`Repoll`] polls its future while the future keeps waking
/// itself. hyper's dispatcher loops 16 times over a connection that stays ready before it
/// yields; the same bound keeps one connection from holding a worker longer than hyper itself
/// would, while a request's two or three self-wakes (body wanted, body handed over, answer
/// written) fit many times over.
pub const REPOLLS: u32 = 16;

/// Not being polled: a wake goes to the task's waker.
const IDLE: u8 = 0;
/// Being polled and not woken since the round began.
const POLLING: u8 = 1;
/// Woken while being polled: the loop polls again.
const WOKEN: u8 = 2;

/// What the inner future's waker shares with [`Repoll`].
struct Shared {
    state: AtomicU8,
    /// The task's waker, as of the last poll of [`Repoll`].
    task: Mutex<Option<Waker>>,
}

impl Shared {
    fn wake_task(&self) {
        let waker = self.task.lock().clone();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Wake for Shared {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // The poll loop sees it and polls again (invariant 2), or it was already woken.
            Ok(_) | Err(WOKEN) => {}
            // Not being polled: the task must run again (invariant 1).
            Err(_) => self.wake_task(),
        }
    }
}

/// `inner`, polled again at once when it wakes itself during its poll (see the module
/// documentation).
pub struct Repoll<F> {
    inner: Pin<Box<F>>,
    shared: std::sync::Arc<Shared>,
    waker: Waker,
}

impl<F: Future> Repoll<F> {
    /// Wraps `inner`.
    pub fn new(inner: F) -> Repoll<F> {
        let shared = std::sync::Arc::new(Shared {
            state: AtomicU8::new(IDLE),
            task: Mutex::new(None),
        });
        let waker = Waker::from(shared.clone());
        Repoll {
            inner: Box::pin(inner),
            shared,
            waker,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        {
            let mut task = this.shared.task.lock();
            match task.as_ref() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *task = Some(cx.waker().clone()),
            }
        }
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..REPOLLS {
            this.shared.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(out) = this.inner.as_mut().poll(&mut inner_cx) {
                this.shared.state.store(IDLE, Ordering::Release);
                return Poll::Ready(out);
            }
            if this
                .shared
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
            // Woken during the round: poll again.
        }
        // Still waking itself: yield to the scheduler as any self-wake does (invariant 3).
        this.shared.state.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A waker counting its wakes.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (std::sync::Arc<Counter>, Waker) {
        let c = std::sync::Arc::new(Counter(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    /// Wakes itself during its first `self_wakes` polls, then is ready.
    struct SelfWaking {
        self_wakes: u32,
        polls: u32,
    }

    impl Future for SelfWaking {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls += 1;
            if self.polls > self.self_wakes {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn test_a_self_wake_is_polled_again_without_waking_the_task() {
        let (count, waker) = counting();
        let mut f = Repoll::new(SelfWaking {
            self_wakes: 3,
            polls: 0,
        });
        let out = Pin::new(&mut f).poll(&mut Context::from_waker(&waker));
        assert_eq!(out, Poll::Ready(4));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn test_a_future_that_always_wakes_itself_yields_after_the_bound() {
        let (count, waker) = counting();
        let mut f = Repoll::new(SelfWaking {
            self_wakes: u32::MAX,
            polls: 0,
        });
        let out = Pin::new(&mut f).poll(&mut Context::from_waker(&waker));
        assert!(out.is_pending());
        assert_eq!(f.inner.polls, REPOLLS);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "one wake, as a yield");
    }

    /// Pending until its flag is set; keeps the last waker it was polled with.
    struct Flagged {
        flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
        waker: std::sync::Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Flagged {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.flag.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    #[test]
    fn test_a_wake_after_the_poll_reaches_the_task() {
        let (count, waker) = counting();
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let kept = std::sync::Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut f = Repoll::new(Flagged {
            flag: flag.clone(),
            waker: kept.clone(),
        });
        assert!(
            Pin::new(&mut f)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        flag.store(true, Ordering::SeqCst);
        let inner_waker = kept.lock().unwrap().take().expect("polled");
        inner_waker.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(
            Pin::new(&mut f)
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
        );
    }
}
