//! The ERROR line of a request that failed on the node's side (a 5xx sluice answers itself),
//! rate-limited per error type as decision lines are per kind and group ([`LineBudget`]).
//!
//! Each such request wrote one line, without limit: during a 10 s upstream outage each gateway
//! of an outside soak trial wrote about 600 `upstream_exception` lines a minute (2,759 in one),
//! where the host's back-off is already logged once. Now each error type writes a burst, then
//! one line a second carrying how many it stands for (`suppressed`); one type's flood does not
//! hide another's (an `internal_server_error` among the `upstream_exception`s is still
//! written). What was left out at the end of a flood is counted in that type's next line.
//!
//! The budgets are the process's, as its log is: the lines are written where a response is
//! rendered from an error (`crate::error`), which knows no node state.
//!
//! # Invariants
//! - F1 — over any stretch of `t` seconds, at most `BURST + t` lines of one error type are
//!   written, and every failure is written or counted in the `suppressed` of its type's next
//!   line. Tested by `test_a_flood_of_one_type_is_bounded_and_counted` and
//!   `test_types_have_their_own_budgets`.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Instant;

use parking_lot::Mutex;

use super::decisions::LineBudget;

/// The budgets by error type, on a clock counted from their first use.
struct Failures {
    epoch: Instant,
    /// Keyed by the error's `type`, a `&'static str` of a closed set (the wire's error codes):
    /// bounded by that set.
    budgets: Mutex<HashMap<&'static str, LineBudget>>,
}

impl Failures {
    /// Whether a failure of `kind` at `now_nanos` is written: `Some(suppressed)`, or `None`
    /// when it is left out (and counted).
    fn take(&self, kind: &'static str, now_nanos: u64) -> Option<u64> {
        self.budgets.lock().entry(kind).or_default().take(now_nanos)
    }
}

fn failures() -> &'static Failures {
    static FAILURES: OnceLock<Failures> = OnceLock::new();
    FAILURES.get_or_init(|| Failures {
        epoch: Instant::now(),
        budgets: Mutex::new(HashMap::new()),
    })
}

/// Writes the ERROR line of a request that failed with `error` (its OpenSearch type `kind`),
/// within `kind`'s budget (F1).
pub fn request_failed(kind: &'static str, error: &dyn std::fmt::Display) {
    let f = failures();
    let now = u64::try_from(f.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
    if let Some(suppressed) = f.take(kind, now) {
        tracing::error!(error = %error, suppressed, "request failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Failures {
        Failures {
            epoch: Instant::now(),
            budgets: Mutex::new(HashMap::new()),
        }
    }

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn test_a_flood_of_one_type_is_bounded_and_counted() {
        let f = fresh();
        // 1,000 failures a second for 10 s: a burst, then one line a second.
        let (mut written, mut counted) = (0u64, 0u64);
        for i in 0..10_000u64 {
            if let Some(suppressed) = f.take("upstream_exception", i * SECOND / 1000) {
                written += 1;
                counted += suppressed;
            }
        }
        assert!(written <= 10 + 10, "{written} lines");
        // The next line, a quiet second later, counts every one left out.
        counted += f.take("upstream_exception", 11 * SECOND).unwrap();
        assert_eq!(written + 1 + counted, 10_001);
    }

    #[test]
    fn test_types_have_their_own_budgets() {
        let f = fresh();
        for _ in 0..1_000 {
            f.take("upstream_exception", 0);
        }
        assert_eq!(f.take("upstream_exception", 0), None);
        assert_eq!(f.take("internal_server_error", 0), Some(0));
    }
}
