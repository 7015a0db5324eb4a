//! Admitted tasks whose usage is not measured yet, so that admission sees a burst (sluice's
//! own; OpenSearch has no counterpart).
//!
//! The admission check ([`super::check_rejection`]) compares a group's *last recorded* usage
//! with its share. Usage is read off running tasks, at their checkpoints, by the usage refresh:
//! a task admitted a moment ago counts as 0 until its first sample has been collected. A burst
//! that arrives while a group is under its share is therefore admitted whole and fills the
//! search threads before anything can see it (trinodb/trino#25093: "queries submitted in
//! parallel" pass a soft limit; BENCHMARKS.md, noisy neighbour, measured the same here).
//!
//! [`UnmeasuredTasks`] counts, per group, the tasks admitted whose usage no refresh has
//! measured yet, and learns what one finished task of the group used. Admission then compares
//! the **projected** usage, `last recorded + unmeasured × per-task estimate` ([`project`]), with
//! the share. A group runs at most as many new tasks at once as fit under its share at the
//! estimate, plus the one that crosses it (one at a time when a task alone is over it); a task's
//! CPU share is its rate while it runs, so short CPU-bound searches count like long ones and
//! searches that wait on I/O count less. A group with no finished task yet has no estimate and
//! is admitted as before.
//!
//! # Invariants
//! - `count` is the number of [`Reservation`]s still held. A reservation is counted once when
//!   made and uncounted exactly once, by whichever comes first of [`Reservation::release`] (a
//!   refresh measured its task) and its drop (its task ended); the count never wraps below 0.
//!   loom models in `tests/loom_unmeasured.rs`.
//! - Admission reserves *before* it decides ([`UnmeasuredTasks::try_admit`]): concurrent
//!   requests see distinct counts, so a burst cannot all read the same stale 0. With the last
//!   recorded usage `u`, a per-task estimate `e > 0` and a threshold `t`, at most
//!   `⌊(t − u) / e⌋ + 1` reservations admitted by [`UnmeasuredTasks::try_admit`] are held at
//!   once (the one that crosses the threshold is admitted, as the plain check admits a group
//!   exactly at it). The price: a request that is then rejected held a reservation for a
//!   moment and may make a concurrent one look over its share — an error towards rejecting,
//!   never towards over-admitting.
//! - The per-task estimate is finite and `>= 0`, an exponentially weighted mean (weight
//!   [`ESTIMATE_WEIGHT`]) of finished tasks' shares, within the range of the shares observed.
//!   An update is a load and a store: two tasks finishing at once may lose one update, which an
//!   estimate can afford (a count could not, and `count` is a read-modify-write).

use super::ResourceUsage;
use crate::group::ResourceType;
use crate::sync::{Arc, AtomicBool, AtomicU64};
use std::sync::atomic::Ordering;

/// The weight of a newly finished task in the per-task estimate: about the last four tasks
/// matter, so the estimate follows a group whose queries change within seconds.
pub const ESTIMATE_WEIGHT: f64 = 0.25;

/// `last + others × per_task`, per resource, finite and `>= 0` whatever the inputs.
pub fn project(last: ResourceUsage, others: u64, per_task: ResourceUsage) -> ResourceUsage {
    let one = |last: f64, per_task: f64| {
        let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        let sum = clean(last) + others as f64 * clean(per_task);
        if sum.is_finite() { sum } else { f64::MAX }
    };
    ResourceUsage {
        cpu: one(last.cpu, per_task.cpu),
        memory: one(last.memory, per_task.memory),
    }
}

/// One group's admitted-but-unmeasured tasks and its per-task estimate. See the module docs.
#[derive(Debug, Default)]
pub struct UnmeasuredTasks {
    count: AtomicU64,
    /// `f64` bits of the per-task CPU estimate (0 bits = 0.0: no estimate yet).
    cpu: AtomicU64,
    /// `f64` bits of the per-task memory estimate.
    memory: AtomicU64,
}

impl UnmeasuredTasks {
    /// Tasks admitted and not measured yet.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// What one task of the group used, as learnt from finished tasks (0 before the first).
    pub fn per_task(&self) -> ResourceUsage {
        ResourceUsage {
            cpu: f64::from_bits(self.cpu.load(Ordering::Relaxed)),
            memory: f64::from_bits(self.memory.load(Ordering::Relaxed)),
        }
    }

    /// Learns from a finished task's share of the node: the first share is taken as it is,
    /// later ones weigh [`ESTIMATE_WEIGHT`]. Non-finite or negative shares count as 0.
    pub fn observe_finished(&self, share: ResourceUsage) {
        for r in ResourceType::ALL {
            let cell = match r {
                ResourceType::Cpu => &self.cpu,
                ResourceType::Memory => &self.memory,
            };
            let v = share.get(r);
            let v = if v.is_finite() && v > 0.0 { v } else { 0.0 };
            let old = f64::from_bits(cell.load(Ordering::Relaxed));
            let new = if old == 0.0 {
                v
            } else {
                old + ESTIMATE_WEIGHT * (v - old)
            };
            cell.store(new.to_bits(), Ordering::Relaxed);
        }
    }

    /// The usage projected for a new request: `last` plus every task admitted and not yet
    /// measured, each at the per-task estimate.
    pub fn projected(&self, last: ResourceUsage) -> ResourceUsage {
        project(last, self.count(), self.per_task())
    }

    /// The usage projected for the task holding `own`: as [`UnmeasuredTasks::projected`],
    /// without the task's own reservation (it is not a newcomer to itself).
    pub fn projected_for(&self, last: ResourceUsage, own: &Reservation) -> ResourceUsage {
        let others = self.count().saturating_sub(u64::from(own.is_held()));
        project(last, others, self.per_task())
    }

    /// Reserves a place for a new task, then asks `decide` about the usage projected with
    /// every reservation made before this one; keeps the reservation when it admits, gives it
    /// back when it refuses.
    pub fn try_admit<E>(
        this: &Arc<UnmeasuredTasks>,
        last: ResourceUsage,
        decide: impl FnOnce(ResourceUsage) -> Result<(), E>,
    ) -> Result<Reservation, E> {
        let before = this.count.fetch_add(1, Ordering::AcqRel);
        let reservation = Reservation {
            owner: Arc::clone(this),
            held: AtomicBool::new(true),
        };
        decide(project(last, before, this.per_task()))?;
        Ok(reservation)
    }
}

/// A task's place among its group's unmeasured tasks; given back once, by
/// [`Reservation::release`] or by its drop, whichever comes first.
#[derive(Debug)]
pub struct Reservation {
    owner: Arc<UnmeasuredTasks>,
    held: AtomicBool,
}

impl Reservation {
    /// Gives the place back (the task's usage is now measured); `true` the first time, `false`
    /// when it was already given back.
    pub fn release(&self) -> bool {
        let was_held = self.held.swap(false, Ordering::AcqRel);
        if was_held {
            self.owner.count.fetch_sub(1, Ordering::AcqRel);
        }
        was_held
    }

    /// Whether the place is still held.
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    fn usage(cpu: f64, memory: f64) -> ResourceUsage {
        ResourceUsage { cpu, memory }
    }

    fn over(threshold: f64) -> impl FnOnce(ResourceUsage) -> Result<(), f64> {
        move |p| {
            if p.cpu > threshold {
                Err(p.cpu)
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn test_project_adds_each_unmeasured_task_at_the_estimate() {
        assert_eq!(project(usage(0.1, 0.2), 3, usage(0.5, 0.01)).cpu, 1.6);
        assert_eq!(
            project(usage(0.1, 0.2), 0, usage(0.5, 0.01)),
            usage(0.1, 0.2)
        );
        let p = project(usage(0.1, 0.2), 3, usage(0.5, 0.01));
        assert!((p.memory - 0.23).abs() < 1e-12, "{p:?}");
    }

    #[test]
    fn test_project_is_finite_and_non_negative_for_any_input() {
        let p = project(
            usage(f64::NAN, -1.0),
            u64::MAX,
            usage(f64::INFINITY, f64::MAX),
        );
        assert_eq!(p.cpu, 0.0);
        assert_eq!(p.memory, f64::MAX);
    }

    #[test]
    fn test_estimate_takes_the_first_share_then_an_exponential_mean() {
        let u = UnmeasuredTasks::default();
        assert_eq!(u.per_task(), usage(0.0, 0.0));
        u.observe_finished(usage(0.4, 0.1));
        assert_eq!(u.per_task(), usage(0.4, 0.1));
        u.observe_finished(usage(0.0, 0.5));
        let p = u.per_task();
        assert!(
            (p.cpu - 0.3).abs() < 1e-12 && (p.memory - 0.2).abs() < 1e-12,
            "{p:?}"
        );
        u.observe_finished(usage(f64::NAN, -3.0));
        assert!(
            (u.per_task().cpu - 0.225).abs() < 1e-12,
            "{:?}",
            u.per_task()
        );
    }

    #[test]
    fn test_without_an_estimate_every_request_is_admitted() {
        let u = Arc::new(UnmeasuredTasks::default());
        let held: Vec<_> = (0..10)
            .map(|_| UnmeasuredTasks::try_admit(&u, usage(0.0, 0.0), over(0.24)).expect("admit"))
            .collect();
        assert_eq!(u.count(), 10);
        drop(held);
        assert_eq!(u.count(), 0);
    }

    #[test]
    fn test_a_burst_is_admitted_up_to_the_threshold_then_refused() {
        let u = Arc::new(UnmeasuredTasks::default());
        u.observe_finished(usage(0.1, 0.0));
        // 0.05 recorded, threshold 0.24: 0.05, 0.15 admitted, 0.25 refused (the request that
        // crosses is the one whose projection *before* it is still under).
        let a = UnmeasuredTasks::try_admit(&u, usage(0.05, 0.0), over(0.24)).expect("first");
        let b = UnmeasuredTasks::try_admit(&u, usage(0.05, 0.0), over(0.24)).expect("second");
        let refused = UnmeasuredTasks::try_admit(&u, usage(0.05, 0.0), over(0.24));
        assert!((refused.expect_err("third") - 0.25).abs() < 1e-12);
        assert_eq!(u.count(), 2, "a refusal gives its reservation back");
        // The first task is measured: its place is free, once.
        assert!(a.release());
        assert!(!a.release());
        assert_eq!(u.count(), 1);
        drop(a);
        assert_eq!(
            u.count(),
            1,
            "a released reservation is not given back again on drop"
        );
        drop(b);
        assert_eq!(u.count(), 0);
    }

    #[test]
    fn test_exactly_at_the_threshold_is_admitted() {
        let u = Arc::new(UnmeasuredTasks::default());
        u.observe_finished(usage(0.25, 0.0));
        let _a = UnmeasuredTasks::try_admit(&u, usage(0.0, 0.0), over(0.25)).expect("first");
        let _b = UnmeasuredTasks::try_admit(&u, usage(0.0, 0.0), over(0.25)).expect("at 0.25");
        assert!(UnmeasuredTasks::try_admit(&u, usage(0.0, 0.0), over(0.25)).is_err());
    }

    #[test]
    fn test_a_task_is_not_a_newcomer_to_itself() {
        let u = Arc::new(UnmeasuredTasks::default());
        u.observe_finished(usage(0.5, 0.0));
        let own = UnmeasuredTasks::try_admit(&u, usage(0.0, 0.0), over(0.24)).expect("admit");
        assert_eq!(u.projected(usage(0.0, 0.0)).cpu, 0.5);
        assert_eq!(u.projected_for(usage(0.0, 0.0), &own).cpu, 0.0);
        own.release();
        assert_eq!(u.projected_for(usage(0.1, 0.0), &own).cpu, 0.1);
    }
}
