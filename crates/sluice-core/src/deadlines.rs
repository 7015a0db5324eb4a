//! A thread's deadlines, watched by one timer: the list a gateway lane thread keeps of its
//! upstream exchanges' deadlines, so that a search registers its deadline with a push onto a
//! list only its own thread touches instead of with the async runtime's shared timer wheel
//! (the server's `deadline::within_lane`; ARCHITECTURE.md "The lane's deadlines").
//!
//! The list holds each deadline with the waker of the future waiting on it. The thread's one
//! timer looks at the list at [`Deadlines::looks_at`], no later; each look
//! ([`Deadlines::fire_due`]) fires every deadline then due, hands their wakers back to be woken,
//! and says when to look next. A deadline inserted before the timer's next look says so
//! ([`Deadlines::insert`] returns `true`), and its caller wakes the timer to re-arm. The list
//! is one thread's (the server keeps it in a thread-local): no lock, no atomic.
//!
//! ```
//! use sluice_core::deadlines::Deadlines;
//!
//! let mut list: Deadlines<u64, &str> = Deadlines::new();
//! assert_eq!(list.fire_due(0, 1_000, &mut Vec::new()), 1_000); // the timer's first look
//! let (key, rearm) = list.insert(30_000);
//! assert!(!rearm, "after the timer's next look: it will look again then");
//! *list.waiting_waker(&key).unwrap() = Some("search");
//! let mut woken = Vec::new();
//! assert_eq!(list.fire_due(1_000, 2_000, &mut woken), 2_000);
//! assert!(woken.is_empty() && !list.has_fired(&key));
//! assert_eq!(list.fire_due(30_000, 31_000, &mut woken), 31_000);
//! assert_eq!(woken, ["search"]);
//! assert!(list.has_fired(&key));
//! list.remove(key);
//! assert_eq!(list.waiting(), 0);
//! ```
//!
//! # Invariants
//!
//! - **E1** — the timer looks no later than any waiting deadline: every waiting deadline is at
//!   or after [`looks_at`](Deadlines::looks_at). [`insert`](Deadlines::insert) lowers it to a
//!   deadline before it (and returns `true`: the caller must re-arm the timer), and
//!   [`fire_due`](Deadlines::fire_due) sets it to the earliest deadline still waiting or the
//!   horizon, whichever comes first; a removal can only leave it earlier than needed (the
//!   timer then looks once for nothing). Checked by `debug_assert!` after every look; tested
//!   by `test_an_earlier_deadline_asks_for_a_rearm`, `test_a_look_sets_the_next_to_the_earliest`
//!   and the proptest (`tests/deadlines_model.rs`).
//! - **E2** — a deadline fires once, when a look at or after it comes, never before: a look at
//!   `now` fires exactly the waiting deadlines at or before `now`, and a fired deadline stays
//!   fired until its key is removed. Tested by `test_a_deadline_fires_once_at_the_look_after_it`
//!   and the proptest.
//! - **E3** — a key is its deadline's until it is removed, once: [`Key`] is neither `Clone`
//!   nor `Copy`, [`remove`](Deadlines::remove) takes it by value, and a slot is reused only
//!   after its removal. [`waiting`](Deadlines::waiting) counts the waiting slots (checked by
//!   `debug_assert!` after every look). Tested by `test_a_removed_slot_is_reused` and the
//!   proptest.
//! - **E4** — steady state does not allocate: a removed slot is reused by the next insert, and
//!   the list keeps its capacity. Tested by `tests/deadlines_alloc.rs`.
//!
//! A look walks every slot, so it costs the thread's peak of deadlines at once (a lane thread:
//! its searches in flight). The timer looks when the earliest deadline comes or at the horizon
//! the caller gives, whichever is first; searches whose deadlines are seconds away and that
//! end in milliseconds cost no look at all.

/// A deadline's slot.
enum Slot<T, W> {
    /// Free, on the free list.
    Vacant,
    /// Its deadline not yet passed at any look, with the waker to wake when it does (`None`
    /// until its future first waits).
    Waiting { at: T, waker: Option<W> },
    /// A look came at or after its deadline.
    Fired,
}

/// One deadline in a [`Deadlines`] list, until [`Deadlines::remove`] takes it (E3).
#[derive(Debug)]
#[must_use = "a key not removed keeps its slot until the list is dropped"]
pub struct Key(usize);

/// One thread's deadlines (module docs).
pub struct Deadlines<T, W> {
    slots: Vec<Slot<T, W>>,
    /// The vacant slots' indices.
    free: Vec<usize>,
    /// How many slots are waiting.
    waiting: usize,
    /// When the timer looks next (E1); `None` before the first look or insert.
    looks_at: Option<T>,
}

impl<T: Ord + Copy, W> Default for Deadlines<T, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Ord + Copy, W> Deadlines<T, W> {
    /// An empty list, whose timer has not looked yet.
    pub const fn new() -> Self {
        Deadlines {
            slots: Vec::new(),
            free: Vec::new(),
            waiting: 0,
            looks_at: None,
        }
    }

    /// Adds the deadline `at`, with no waker yet. The `bool` is `true` when `at` comes before
    /// the timer's next look (or the timer never looked): the caller must have the timer look
    /// at `at` instead (E1).
    pub fn insert(&mut self, at: T) -> (Key, bool) {
        let slot = Slot::Waiting { at, waker: None };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.waiting += 1;
        let rearm = self.looks_at.is_none_or(|l| at < l);
        if rearm {
            self.looks_at = Some(at);
        }
        (Key(index), rearm)
    }

    /// Whether `key`'s deadline has fired (E2).
    pub fn has_fired(&self, key: &Key) -> bool {
        matches!(self.slots[key.0], Slot::Fired)
    }

    /// The waker slot of `key`'s deadline while it waits, to set or replace; `None` once it
    /// has fired.
    pub fn waiting_waker(&mut self, key: &Key) -> Option<&mut Option<W>> {
        match &mut self.slots[key.0] {
            Slot::Waiting { waker, .. } => Some(waker),
            _ => None,
        }
    }

    /// Removes `key`'s deadline, fired or not; its waker, if it still held one, is returned
    /// for the caller to drop where it chooses.
    pub fn remove(&mut self, key: Key) -> Option<W> {
        let old = std::mem::replace(&mut self.slots[key.0], Slot::Vacant);
        self.free.push(key.0);
        match old {
            Slot::Waiting { waker, .. } => {
                self.waiting -= 1;
                waker
            }
            Slot::Fired => None,
            Slot::Vacant => unreachable!("a key's slot is vacant only after its removal (E3)"),
        }
    }

    /// The timer's look at `now`: fires every waiting deadline at or before `now`, their
    /// wakers appended to `woken`, and returns when to look next — the earliest deadline
    /// still waiting, or `horizon` if that comes first (E1, E2).
    pub fn fire_due(&mut self, now: T, horizon: T, woken: &mut Vec<W>) -> T {
        let mut next = horizon;
        for slot in &mut self.slots {
            let Slot::Waiting { at, waker } = slot else {
                continue;
            };
            if *at <= now {
                woken.extend(waker.take());
                *slot = Slot::Fired;
                self.waiting -= 1;
            } else if *at < next {
                next = *at;
            }
        }
        self.looks_at = Some(next);
        debug_assert!(self.check(), "E1/E3 after a look");
        next
    }

    /// When the timer looks next (E1); `None` before its first look and any insert.
    pub fn looks_at(&self) -> Option<T> {
        self.looks_at
    }

    /// How many deadlines wait (not fired, not removed).
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// E1 and E3's count, walked.
    fn check(&self) -> bool {
        let mut waiting = 0;
        for slot in &self.slots {
            if let Slot::Waiting { at, .. } = slot {
                waiting += 1;
                if self.looks_at.is_none_or(|l| *at < l) {
                    return false;
                }
            }
        }
        waiting == self.waiting && self.free.len() + self.len_taken() == self.slots.len()
    }

    /// Slots waiting or fired.
    fn len_taken(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s, Slot::Vacant))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list whose timer looked at 0 and looks next at `horizon`.
    fn looked(horizon: u64) -> Deadlines<u64, u32> {
        let mut list = Deadlines::new();
        list.fire_due(0, horizon, &mut Vec::new());
        list
    }

    #[test]
    fn test_an_earlier_deadline_asks_for_a_rearm() {
        let mut fresh: Deadlines<u64, u32> = Deadlines::new();
        let (a, rearm) = fresh.insert(500);
        assert!(rearm, "a timer that never looked must be armed");
        assert_eq!(fresh.looks_at(), Some(500));
        fresh.remove(a);

        let mut list = looked(1_000);
        let (late, rearm) = list.insert(30_000);
        assert!(!rearm, "the timer looks at 1,000 anyway");
        assert_eq!(list.looks_at(), Some(1_000));
        let (early, rearm) = list.insert(200);
        assert!(rearm, "200 comes before the next look");
        assert_eq!(list.looks_at(), Some(200));
        let (same, rearm) = list.insert(200);
        assert!(!rearm, "the timer already looks at 200");
        for k in [late, early, same] {
            list.remove(k);
        }
    }

    #[test]
    fn test_a_look_sets_the_next_to_the_earliest() {
        let mut list = looked(1_000);
        let (a, _) = list.insert(5_000);
        let (b, _) = list.insert(3_000);
        assert_eq!(list.fire_due(1_000, 10_000, &mut Vec::new()), 3_000);
        list.remove(b);
        // Removed: the timer looks at 3,000 for nothing, then at 5,000.
        assert_eq!(list.looks_at(), Some(3_000));
        assert_eq!(list.fire_due(3_000, 10_000, &mut Vec::new()), 5_000);
        // The horizon comes first.
        assert_eq!(list.fire_due(3_000, 4_000, &mut Vec::new()), 4_000);
        list.remove(a);
        assert_eq!(list.fire_due(4_000, 9_000, &mut Vec::new()), 9_000);
    }

    #[test]
    fn test_a_deadline_fires_once_at_the_look_after_it() {
        let mut list = looked(100);
        let (k, _) = list.insert(250);
        *list.waiting_waker(&k).unwrap() = Some(7);
        let mut woken = Vec::new();
        list.fire_due(249, 1_000, &mut woken);
        assert!(
            woken.is_empty() && !list.has_fired(&k),
            "not before its time"
        );
        list.fire_due(250, 1_000, &mut woken);
        assert_eq!(woken, [7]);
        assert!(list.has_fired(&k));
        assert!(list.waiting_waker(&k).is_none(), "no waker slot once fired");
        list.fire_due(900, 1_000, &mut woken);
        assert_eq!(woken, [7], "fired once");
        assert_eq!(list.remove(k), None);
        assert_eq!(list.waiting(), 0);
    }

    #[test]
    fn test_a_removed_slot_is_reused() {
        let mut list = looked(100);
        let (a, _) = list.insert(10);
        let (b, _) = list.insert(20);
        assert_eq!((a.0, b.0), (0, 1));
        *list.waiting_waker(&a).unwrap() = Some(1);
        assert_eq!(
            list.remove(a),
            Some(1),
            "the waker comes back to its caller"
        );
        let (c, _) = list.insert(30);
        assert_eq!(c.0, 0, "the freed slot, not a new one");
        assert_eq!(list.waiting(), 2);
        list.remove(b);
        list.remove(c);
        assert_eq!(list.waiting(), 0);
        assert_eq!(list.slots.len(), 2);
    }
}
