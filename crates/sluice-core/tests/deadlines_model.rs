//! The deadline list against a reference model: a map of live key → (deadline, fired, waker).
//!
//! A random sequence of inserts (deadlines before, at and after the timer's next look), waker
//! settings, removals of any live key in any order, and the timer's looks (at the time it said,
//! or earlier: a timer woken to re-arm, or a stale look after a removal) runs against both.
//! After every step: each key's fired state and waker agree, what a look woke is exactly the
//! model's due deadlines (E2), every waiting deadline is at or after the next look (E1), a
//! re-arm is asked exactly when a deadline comes before the next look, and the waiting count
//! agrees (E3).
#![cfg(not(feature = "loom"))]

use std::collections::BTreeMap;

use proptest::prelude::*;
use sluice_core::deadlines::{Deadlines, Key};

#[derive(Debug, Clone)]
enum Op {
    /// A deadline `offset` after the clock, less 50 (so some are already due).
    Insert { offset: u64 },
    /// Sets the waker of live key `index % live`.
    Wake { index: usize },
    /// Removes live key `index % live`.
    Remove { index: usize },
    /// The clock moves `by`, then the timer looks, with `horizon` after the clock.
    Look { by: u64, horizon: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..400).prop_map(|offset| Op::Insert { offset }),
        2 => any::<usize>().prop_map(|index| Op::Wake { index }),
        2 => any::<usize>().prop_map(|index| Op::Remove { index }),
        2 => (0u64..300, 1u64..400).prop_map(|(by, horizon)| Op::Look { by, horizon }),
    ]
}

/// The model's view of one live key.
struct Live {
    key: Key,
    id: u32,
    at: u64,
    fired: bool,
    waker: Option<u32>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn test_deadlines_agree_with_the_model(ops in prop::collection::vec(op(), 1..120)) {
        let mut list: Deadlines<u64, u32> = Deadlines::new();
        let mut live: Vec<Live> = Vec::new();
        let mut looks_at: Option<u64> = None;
        let (mut clock, mut next_id) = (50u64, 0u32);
        for op in ops {
            match op {
                Op::Insert { offset } => {
                    let at = clock + offset - 50;
                    let (key, rearm) = list.insert(at);
                    prop_assert_eq!(rearm, looks_at.is_none_or(|l| at < l), "rearm for {}", at);
                    if rearm {
                        looks_at = Some(at);
                    }
                    live.push(Live { key, id: next_id, at, fired: false, waker: None });
                    next_id += 1;
                }
                Op::Wake { index } if !live.is_empty() => {
                    let n = live.len();
                    let l = &mut live[index % n];
                    match list.waiting_waker(&l.key) {
                        Some(w) => {
                            prop_assert!(!l.fired);
                            *w = Some(l.id);
                            l.waker = Some(l.id);
                        }
                        None => prop_assert!(l.fired, "a waiting key has a waker slot"),
                    }
                }
                Op::Remove { index } if !live.is_empty() => {
                    let n = live.len();
                    let l = live.swap_remove(index % n);
                    let back = list.remove(l.key);
                    prop_assert_eq!(back, if l.fired { None } else { l.waker });
                }
                Op::Look { by, horizon } => {
                    clock += by;
                    let mut woken = Vec::new();
                    let next = list.fire_due(clock, clock + horizon, &mut woken);
                    let mut expected = Vec::new();
                    let mut earliest = clock + horizon;
                    for l in live.iter_mut().filter(|l| !l.fired) {
                        if l.at <= clock {
                            l.fired = true;
                            expected.extend(l.waker.take());
                        } else {
                            earliest = earliest.min(l.at);
                        }
                    }
                    woken.sort_unstable();
                    expected.sort_unstable();
                    prop_assert_eq!(woken, expected, "woken at {}", clock);
                    prop_assert_eq!(next, earliest);
                    looks_at = Some(next);
                }
                _ => {}
            }
            // After every step.
            prop_assert_eq!(list.looks_at(), looks_at);
            let waiting: BTreeMap<u32, u64> =
                live.iter().filter(|l| !l.fired).map(|l| (l.id, l.at)).collect();
            prop_assert_eq!(list.waiting(), waiting.len());
            for l in &live {
                prop_assert_eq!(list.has_fired(&l.key), l.fired);
                if !l.fired {
                    prop_assert!(looks_at.is_some_and(|n| n <= l.at), "E1: {} before the look", l.at);
                }
            }
        }
        for l in live {
            list.remove(l.key);
        }
        prop_assert_eq!(list.waiting(), 0);
    }
}
