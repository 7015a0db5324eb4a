//! loom models of the unmeasured-task reservations (`resources::unmeasured`): every
//! interleaving of their atomic operations is explored.
//!
//! Run with `cargo test -p sluice-core --features loom --test loom_unmeasured` (the `loom`
//! feature swaps their atomics and `Arc` for loom's; see `src/sync.rs`).
#![cfg(feature = "loom")]

mod loom_support;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_support::model;
use sluice_core::resources::{ResourceUsage, UnmeasuredTasks};

const IDLE: ResourceUsage = ResourceUsage {
    cpu: 0.0,
    memory: 0.0,
};

/// Admits while the projected cpu is at most `threshold`.
fn under(threshold: f64) -> impl FnOnce(ResourceUsage) -> Result<(), ()> {
    move |p| if p.cpu > threshold { Err(()) } else { Ok(()) }
}

/// (a) Three requests of a group whose tasks each take 0.5 arrive at once with nothing
/// recorded and a threshold of 0.24: however they interleave, at most one is admitted while
/// another admitted one still holds its reservation (⌊0.24 / 0.5⌋ + 1 = 1), and once all are
/// done nothing is left counted.
#[test]
fn test_loom_a_burst_never_admits_more_than_the_bound() {
    model(|| {
        let group = Arc::new(UnmeasuredTasks::default());
        group.observe_finished(ResourceUsage {
            cpu: 0.5,
            memory: 0.0,
        });
        let holders = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let group = Arc::clone(&group);
                let holders = Arc::clone(&holders);
                thread::spawn(move || {
                    if let Ok(reservation) = UnmeasuredTasks::try_admit(&group, IDLE, under(0.24)) {
                        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= 1, "{now} tasks admitted at once");
                        holders.fetch_sub(1, Ordering::SeqCst);
                        drop(reservation);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(group.count(), 0, "a reservation leaked");
    });
}

/// (b) A refresh that measured a task releases its reservation while the task ends and drops
/// it: the place is given back exactly once (the count never wraps, never stays up).
#[test]
fn test_loom_release_and_drop_give_the_place_back_once() {
    model(|| {
        let group = Arc::new(UnmeasuredTasks::default());
        let reservation =
            Arc::new(UnmeasuredTasks::try_admit(&group, IDLE, under(1.0)).expect("admitted"));
        let other = UnmeasuredTasks::try_admit(&group, IDLE, under(1.0)).expect("admitted");
        let refresh = {
            let reservation = Arc::clone(&reservation);
            thread::spawn(move || reservation.release())
        };
        let released_by_end = reservation.release();
        drop(reservation);
        let released_by_refresh = refresh.join().expect("refresh");
        assert!(
            released_by_end ^ released_by_refresh,
            "released by both or by neither"
        );
        assert_eq!(
            group.count(),
            1,
            "only the other task's place is still held"
        );
        drop(other);
        assert_eq!(group.count(), 0);
    });
}
