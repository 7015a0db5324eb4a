//! The synchronization primitives of the admission structures (the permit table, the
//! unmeasured-task reservations, [`crate::repoll`]'s wake state), swapped for loom's under the `loom` feature so the loom
//! models in `tests/loom_*.rs` explore every interleaving of their operations.
//!
//! Only what they need: a mutex whose `lock` returns the guard directly (parking_lot has no
//! poisoning; the loom wrapper recovers a poisoned lock the same way, by taking the guard),
//! `Arc` for what permits and reservations keep alive, and atomics.

#[cfg(not(feature = "loom"))]
pub(crate) use parking_lot::Mutex;
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::Arc;
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64};

#[cfg(feature = "loom")]
pub(crate) use loom::sync::Arc;
#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicU64};
#[cfg(feature = "loom")]
pub(crate) use loom_mutex::Mutex;

#[cfg(feature = "loom")]
mod loom_mutex {
    use std::sync::PoisonError;

    /// `loom::sync::Mutex` with parking_lot's signature: `lock` returns the guard.
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        /// Creates a mutex holding `value`.
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        /// Locks the mutex; a poisoned lock is taken over as is, as parking_lot would.
        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }
}
