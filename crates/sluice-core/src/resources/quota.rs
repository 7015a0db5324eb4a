//! A group's CPU-time quota (sluice's own; OpenSearch has no queue to pace): how a queued
//! `enforced` group is held to its cpu share on average instead of by rejection and
//! cancellation.
//!
//! The group earns CPU time at its share of the node — `limit × cores` CPU-seconds per
//! wall-second — and spends what its tasks use. A request of the group may start while the
//! balance is not negative; when it is, the request waits in its queue until the balance has
//! been earned back. This is Trino's resource-group CPU quota (`hardCpuLimit` with
//! `cpuQuotaGenerationMillisPerSecond`): a group that used more than its quota cannot start new
//! work until its usage regenerates.
//!
//! # Invariants
//! - Q1 — over any interval, the CPU the group is allowed to start work with is at most what it
//!   earned in that interval plus [`BURST`] of its share banked before: the balance never
//!   exceeds `rate × BURST` (`refill` caps it). Tested by
//!   `test_spending_is_bounded_by_earnings_plus_the_burst` (property).
//! - Q2 — time is a parameter: [`CpuQuota::refill`] takes `now_nanos` and never reads a clock;
//!   a `now` earlier than the last refill earns nothing (no negative time).

use std::time::Duration;

/// How much unused quota a group may bank: one second of its share. Enough that a group idle
/// for a moment starts its next task at once; short enough that a long idle period cannot be
/// spent as a burst that starves its neighbours (Trino caps its quota the same way).
pub const BURST: Duration = Duration::from_secs(1);

/// A CPU-time balance in nanoseconds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    /// Earned minus spent; negative once the group used more than it earned.
    balance_nanos: i128,
    /// When the balance was last refilled, on the caller's clock.
    last_nanos: u64,
}

impl CpuQuota {
    /// A quota starting at `now_nanos` with a full burst banked (a group starts with a second
    /// of its share), for a group that earns `rate` CPU-nanoseconds per second.
    pub fn new(now_nanos: u64, rate: f64) -> CpuQuota {
        CpuQuota {
            balance_nanos: cap(rate),
            last_nanos: now_nanos,
        }
    }

    /// Earns `rate` CPU-nanoseconds per second of wall time since the last refill, up to the
    /// burst cap.
    pub fn refill(&mut self, now_nanos: u64, rate: f64) {
        let elapsed = now_nanos.saturating_sub(self.last_nanos);
        self.last_nanos = self.last_nanos.max(now_nanos);
        let earned = (elapsed as f64 / 1e9 * rate.max(0.0)) as i128;
        self.balance_nanos = (self.balance_nanos + earned).min(cap(rate));
    }

    /// Spends `cpu_nanos` of CPU the group's tasks used.
    pub fn charge(&mut self, cpu_nanos: u64) {
        self.balance_nanos -= i128::from(cpu_nanos);
    }

    /// Whether the group may start work now.
    pub fn allows(&self) -> bool {
        self.balance_nanos >= 0
    }

    /// The balance, in CPU-nanoseconds.
    pub fn balance_nanos(&self) -> i128 {
        self.balance_nanos
    }
}

/// The most a group may bank: [`BURST`] of its share.
fn cap(rate: f64) -> i128 {
    (rate.max(0.0) * BURST.as_secs_f64()) as i128
}

/// What a group with cpu `limit` earns on a node of `cores`, in CPU-nanoseconds per second.
pub fn rate_of(limit: f64, cores: u32) -> f64 {
    limit * f64::from(cores) * 1e9
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn test_a_group_earns_its_share_and_waits_after_spending_more() {
        // Share 0.3 of 2 cores: 0.6 CPU-seconds per second.
        let rate = rate_of(0.3, 2);
        let mut q = CpuQuota::new(0, rate);
        assert!(q.allows());
        // A task used 1 CPU-second over 1 s: 0.6 banked at start − 1 + 0.6 earned... capped.
        q.charge(SEC);
        assert!(!q.allows(), "{q:?}");
        q.refill(SEC / 2, rate);
        // −0.4 + 0.3 = −0.1: still waiting.
        assert!(!q.allows(), "{q:?}");
        q.refill(SEC, rate);
        assert!(q.allows(), "{q:?}");
    }

    #[test]
    fn test_an_idle_group_banks_at_most_the_burst_and_time_never_runs_back() {
        let rate = rate_of(0.5, 4);
        let mut q = CpuQuota::new(0, rate);
        q.refill(3600 * SEC, rate);
        assert_eq!(q.balance_nanos(), cap(rate));
        let before = q.balance_nanos();
        q.charge(SEC);
        q.refill(10 * SEC, rate);
        assert_eq!(q.balance_nanos(), before - i128::from(SEC));
    }

    proptest! {
        /// Q1: whatever the pattern of refills and charges, the CPU spent while allowed to
        /// start work is at most what was earned plus the burst (plus the last charge, which
        /// may overshoot: a task is judged when it starts, not when it ends).
        #[test]
        fn test_spending_is_bounded_by_earnings_plus_the_burst(
            steps in proptest::collection::vec((0u64..SEC, 0u64..2 * SEC), 1..200),
            limit in 0.05f64..1.0,
            cores in 1u32..16,
        ) {
            let rate = rate_of(limit, cores);
            let mut q = CpuQuota::new(0, rate);
            let (mut now, mut spent, mut max_charge) = (0u64, 0i128, 0i128);
            for (dt, cpu) in steps {
                now += dt;
                q.refill(now, rate);
                if q.allows() {
                    q.charge(cpu);
                    spent += i128::from(cpu);
                    max_charge = max_charge.max(i128::from(cpu));
                }
            }
            let earned = (now as f64 / 1e9 * rate) as i128 + cap(rate);
            prop_assert!(spent <= earned + max_charge + 1, "spent {spent} earned {earned}");
        }
    }
}
