//! loom model of [`Repoll`]'s wake state (`src/repoll.rs`, invariant 1): a wake from another
//! thread racing a poll is never lost, in every interleaving.
//!
//! Run with `cargo test -p sluice-core --features loom --test loom_repoll`.
#![cfg(feature = "loom")]

mod loom_support;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_support::model;
use sluice_core::repoll::Repoll;

/// The task's waker: counts its wakes.
struct Task(AtomicUsize);

impl Wake for Task {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Pending until its flag is set; keeps the last waker it was polled with.
struct Flagged {
    flag: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<Waker>>>,
}

impl Future for Flagged {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        if self.flag.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Another thread sets the flag and wakes the future while the task polls it: either that
/// poll sees the flag, or the task's waker is woken (and the next poll sees it).
#[test]
fn test_a_wake_from_another_thread_is_never_lost() {
    model(|| {
        let task = std::sync::Arc::new(Task(AtomicUsize::new(0)));
        let task_waker = Waker::from(task.clone());
        let flag = Arc::new(AtomicBool::new(false));
        let kept = Arc::new(Mutex::new(None::<Waker>));
        let mut f = Repoll::new(Flagged {
            flag: flag.clone(),
            waker: kept.clone(),
        });
        let mut cx = Context::from_waker(&task_waker);
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        let inner = kept.lock().unwrap().clone().expect("polled once");
        let waker_thread = thread::spawn(move || {
            flag.store(true, Ordering::Release);
            inner.wake();
        });
        let second = Pin::new(&mut f).poll(&mut cx);
        waker_thread.join().unwrap();
        if second.is_pending() {
            assert!(
                task.0.load(Ordering::SeqCst) >= 1,
                "the wake was lost: the poll missed the flag and the task was not woken"
            );
            assert!(Pin::new(&mut f).poll(&mut cx).is_ready());
        }
    });
}
