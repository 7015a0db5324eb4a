//! The lane threads' deadlines (ARCHITECTURE.md "The lane's deadlines"): an upstream exchange
//! on a gateway lane thread is bounded by a deadline in its thread's own list
//! ([`sluice_core::deadlines::Deadlines`]) rather than by a timer of tokio's.
//!
//! A tokio timer is registered with the runtime's time driver and removed from it again: the
//! driver's lock both times, the timer's state and waker, some 500 instructions, 12 atomic
//! read-modify-writes and 45 instruction-cache misses a proxied search (BENCHMARKS.md "The
//! lane's deadlines"), for a deadline that a search ending in milliseconds never reaches. Here
//! a deadline is a slot in a list that only its thread touches, and the thread's one timer
//! task ([`run_timer`]) looks at the list when its earliest deadline comes, or at the horizon
//! it is given, whichever is first (the lane threads' timer floor, which it replaces).
//!
//! # Invariants
//! - LD1 — a future bounded by [`within`] is bounded as [`super::within`] bounds it: polled
//!   first at each wake-up (D3), `Ok` with its output if it completes before its deadline
//!   fired, and once the deadline fired, handed to [`super::within`] with the same deadline,
//!   which gives it the second look (D1, D2). Off a lane thread (no [`run_timer`] running on
//!   it) it is handed to [`super::within`] at its first wait. Tested by
//!   `test_a_pending_future_passes_its_deadline_on_time`,
//!   `test_a_future_that_completes_in_time_wins_and_leaves_no_deadline`,
//!   `test_a_read_ready_when_the_lane_deadline_fires_wins` and
//!   `test_off_a_lane_thread_the_runtimes_timer_bounds`; end to end by the gateway suites'
//!   `request_timeout` tests and `gateway::pause`.
//! - LD2 — a deadline fires when it comes, not at the timer's next horizon: a deadline
//!   before the timer's next look wakes the timer, which re-arms for it (E1 of the list).
//!   Tested by `test_a_pending_future_passes_its_deadline_on_time` (300 ms, under a 10 s
//!   horizon) and `test_a_deadline_past_the_horizon_fires_on_time`.
//! - LD3 — a deadline leaves its list when its wait ends, however it ends (completed, fired,
//!   or the future dropped): [`Entry`]'s `Drop` removes it. Tested by
//!   `test_a_dropped_wait_leaves_no_deadline` and the checks of the others.
//!
//! The list is this thread's and every access is a short borrow of a thread-local
//! `RefCell`: no waker is dropped or woken while it is borrowed, so nothing a wake-up runs can
//! reach the list again during a borrow.

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Poll, Waker};
use std::time::Duration;

use sluice_core::deadlines::{Deadlines, Key};
use tokio::time::Instant;

use super::Passed;

/// One lane thread's deadlines.
struct List {
    deadlines: Deadlines<Instant, Waker>,
    /// The timer task's waker: woken when a deadline comes before its next look.
    timer: Option<Waker>,
    /// Unique in the process: an [`Entry`] removes itself only from the list it is in.
    id: u64,
}

thread_local! {
    /// The thread's list, while its [`run_timer`] runs.
    static LIST: RefCell<Option<List>> = const { RefCell::new(None) };
}

/// The next list's id.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The thread's timer, which fires its deadlines (LD2): spawned once on each lane thread's
/// runtime, for the runtime's life. It looks at the list when the earliest deadline comes, and
/// at least every `horizon`, so that the thread's time driver always has a timer pending that
/// far away or nearer (the lane threads' timer floor).
pub async fn run_timer(horizon: Duration) {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let _cleared = Cleared(id);
    let now = Instant::now();
    let mut deadlines = Deadlines::new();
    let first = deadlines.fire_due(now, now + horizon, &mut Vec::new());
    LIST.with(|l| {
        *l.borrow_mut() = Some(List {
            deadlines,
            timer: None,
            id,
        })
    });
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(first));
    let mut woken = Vec::new();
    poll_fn(move |cx| {
        loop {
            if sleep.as_mut().poll(cx).is_ready() {
                let now = Instant::now();
                let next = with_list(|l| l.deadlines.fire_due(now, now + horizon, &mut woken))
                    .unwrap_or(now + horizon);
                sleep.as_mut().reset(next);
                // Woken with the list no longer borrowed.
                for waker in woken.drain(..) {
                    waker.wake();
                }
                continue;
            }
            let looks_at = with_list(|l| {
                if !l.timer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    l.timer = Some(cx.waker().clone());
                }
                l.deadlines.looks_at()
            })
            .flatten();
            match looks_at {
                // A deadline came before the timer's look (LD2).
                Some(at) if at < sleep.deadline() => sleep.as_mut().reset(at),
                _ => return Poll::<()>::Pending,
            }
        }
    })
    .await
}

/// Clears the thread's list when its timer ends (the runtime shutting down): the waits after
/// it are the runtime timer's.
struct Cleared(u64);

impl Drop for Cleared {
    fn drop(&mut self) {
        let _ = LIST.try_with(|l| {
            if let Ok(mut l) = l.try_borrow_mut()
                && l.as_ref().is_some_and(|l| l.id == self.0)
            {
                // Taken out, dropped after the borrow.
                let old = l.take();
                drop(l);
                drop(old);
            }
        });
    }
}

/// `f` on this thread's list, if it has one and it is not borrowed.
fn with_list<R>(f: impl FnOnce(&mut List) -> R) -> Option<R> {
    LIST.try_with(|l| l.try_borrow_mut().ok().and_then(|mut l| l.as_mut().map(f)))
        .ok()
        .flatten()
}

/// `fut` bounded by `deadline` as [`super::within`] bounds it (LD1), the deadline held in this
/// thread's list when it is a lane thread. The deadline enters the list when `fut` first
/// waits, in the same access that gives it the waker: a future ready at once never touches it.
pub async fn within<F: Future + ?Sized>(
    deadline: Instant,
    mut fut: Pin<&mut F>,
) -> Result<F::Output, Passed> {
    let mut entry = Entry { key: None, list: 0 };
    let first = poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        if entry.wait(deadline, cx.waker()) {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    })
    .await;
    drop(entry);
    match first {
        Some(out) => Ok(out),
        // Fired, or no list on this thread: the wait, the second look and the deadline judged
        // again are `super::within`'s.
        None => super::within(deadline, fut).await,
    }
}

/// A deadline in this thread's list from its future's first wait, removed when dropped (LD3).
struct Entry {
    /// `None` until the first wait.
    key: Option<Key>,
    /// The list's id, once in it.
    list: u64,
}

impl Entry {
    /// Whether `deadline` still waits, with `waker` to wake when it fires: added to this
    /// thread's list at the first call (the timer woken when it comes before its next look),
    /// its waker replaced at the next ones. `false` once it fired, or when the thread has no
    /// list (or, which never happens on a lane thread, the list is not the one it is in):
    /// the runtime's timer then bounds the wait.
    fn wait(&mut self, deadline: Instant, waker: &Waker) -> bool {
        // The waker replaced, if any, is one of this same task's, which is running: dropping
        // it cannot end the task. The timer is woken after the borrow.
        let (waits, timer) = with_list(|l| match self.key.as_ref() {
            None => {
                let (key, rearm) = l.deadlines.insert(deadline);
                if let Some(slot) = l.deadlines.waiting_waker(&key) {
                    *slot = Some(waker.clone());
                }
                self.key = Some(key);
                self.list = l.id;
                (true, if rearm { l.timer.clone() } else { None })
            }
            Some(_) if l.id != self.list => (false, None),
            Some(key) => match l.deadlines.waiting_waker(key) {
                Some(slot) => {
                    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                        *slot = Some(waker.clone());
                    }
                    (true, None)
                }
                None => (false, None),
            },
        })
        .unwrap_or((false, None));
        if let Some(timer) = timer {
            timer.wake();
        }
        waits
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        // A list gone (the thread's timer ended first) or not this entry's keeps the key,
        // which is then dropped with nothing to free.
        let waker = with_list(|l| (l.id == self.list).then(|| l.deadlines.remove(key))).flatten();
        drop(waker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::io::AsyncReadExt;

    /// How many deadlines wait in this thread's list.
    fn waiting() -> Option<usize> {
        with_list(|l| l.deadlines.waiting())
    }

    /// A current-thread runtime with its clock paused, as a lane thread's (I/O and time).
    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// Runs `f` on a paused lane-like runtime whose timer looks every `horizon`.
    fn on_lane<F: Future>(horizon: Duration, f: F) -> F::Output {
        paused_runtime().block_on(async move {
            tokio::spawn(run_timer(horizon));
            // The timer's first poll sets up the list.
            tokio::task::yield_now().await;
            assert_eq!(waiting(), Some(0));
            f.await
        })
    }

    /// On a lane whose timer looks every `horizon`, a pending future bounded `after` its
    /// start: it has passed, at its deadline (within the 100 ms of the paused clock's steps),
    /// and its deadline has left the list.
    fn passes_on_time(horizon: Duration, after: Duration) {
        on_lane(horizon, async {
            let start = Instant::now();
            let pending = std::pin::pin!(std::future::pending::<()>());
            assert_eq!(within(start + after, pending).await, Err(Passed));
            let took = start.elapsed();
            assert!(
                took >= after && took < after + Duration::from_millis(100),
                "{took:?}"
            );
            assert_eq!(waiting(), Some(0));
        });
    }

    #[test]
    fn test_a_pending_future_passes_its_deadline_on_time() {
        // At the deadline, not at the timer's 10 s look (LD2).
        passes_on_time(Duration::from_secs(10), Duration::from_millis(300));
    }

    #[test]
    fn test_a_deadline_past_the_horizon_fires_on_time() {
        passes_on_time(Duration::from_secs(1), Duration::from_millis(2_500));
    }

    #[test]
    fn test_a_future_that_completes_in_time_wins_and_leaves_no_deadline() {
        on_lane(Duration::from_secs(1), async {
            // Answered by another task a few turns later: the wait is pending first, its
            // deadline in the list, and woken by the answer, not the timer.
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                let _ = tx.send(7);
            });
            let out = within(Instant::now() + Duration::from_secs(30), std::pin::pin!(rx)).await;
            assert_eq!(out, Ok(Ok(7)));
            assert_eq!(waiting(), Some(0));
            // Many in a row reuse the one slot.
            for i in 0..100 {
                let out = within(
                    Instant::now() + Duration::from_secs(30),
                    std::pin::pin!(async move { i }),
                )
                .await;
                assert_eq!(out, Ok(i));
            }
            assert_eq!(waiting(), Some(0));
        });
    }

    #[test]
    fn test_a_dropped_wait_leaves_no_deadline() {
        on_lane(Duration::from_secs(1), async {
            let deadline = Instant::now() + Duration::from_secs(30);
            let pending = std::pin::pin!(std::future::pending::<()>());
            tokio::select! {
                _ = within(deadline, pending) => {
                    panic!("the wait was pending");
                }
                () = async {
                    tokio::task::yield_now().await;
                    assert_eq!(waiting(), Some(1), "the wait's deadline is in the list");
                } => {}
            }
            assert_eq!(waiting(), Some(0));
        });
    }

    #[test]
    fn test_a_read_ready_when_the_lane_deadline_fires_wins() {
        // D1 through the lane's list: the bytes are in the socket, but the driver has not
        // run since the stream was registered, and the deadline is past.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::spawn(run_timer(Duration::from_secs(1)));
            tokio::task::yield_now().await;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            server.set_nonblocking(true).unwrap();
            let mut conn = tokio::net::TcpStream::from_std(server).unwrap();
            peer.write_all(b"answer").unwrap();
            // In a task of its own, as a lane search: the timer task's wake-up runs it in the
            // same turn of the scheduler, with no turn of the driver since the write.
            tokio::spawn(async move {
                let mut buf = [0u8; 6];
                let long_ago = Instant::now() - Duration::from_secs(1);
                let read = within(long_ago, std::pin::pin!(conn.read_exact(&mut buf))).await;
                assert_eq!(read.map(|r| r.is_ok()), Ok(true));
                assert_eq!(&buf, b"answer");
                assert_eq!(waiting(), Some(0));
            })
            .await
            .unwrap();
            drop(peer);
        });
    }

    #[test]
    fn test_off_a_lane_thread_the_runtimes_timer_bounds() {
        paused_runtime().block_on(async {
            assert_eq!(waiting(), None, "no timer runs here");
            let start = Instant::now();
            let out = within(
                start + Duration::from_millis(300),
                std::pin::pin!(std::future::pending::<()>()),
            )
            .await;
            assert_eq!(out, Err(Passed));
            assert!(start.elapsed() >= Duration::from_millis(300));
        });
    }
}
