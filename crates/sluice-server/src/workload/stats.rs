//! The counters of a workload group on this node (DESIGN D10), as `_wlm/stats` shows them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use sluice_core::ResourceType;

use crate::metrics::histogram::Buckets;

/// A cumulative counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one and returns the new value.
    pub fn inc_get(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Takes one away (a gauge going down); never below zero.
    pub fn dec(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
    }

    /// Sets the value (a gauge read from elsewhere).
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// Raises the value to `n` if it is lower.
    pub fn raise_to(&self, n: u64) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Per-resource figures of a group.
#[derive(Debug, Default)]
pub struct ResourceStats {
    /// The last usage the enforcement loop computed, as `f64` bits (a fraction of the node).
    current_usage: AtomicU64,
    /// Tasks cancelled because of this resource.
    pub cancellations: Counter,
    /// Requests rejected because of this resource.
    pub rejections: Counter,
}

impl ResourceStats {
    /// The last recorded usage.
    pub fn current_usage(&self) -> f64 {
        f64::from_bits(self.current_usage.load(Ordering::Relaxed))
    }

    /// Records a new usage.
    pub fn set_current_usage(&self, v: f64) {
        self.current_usage.store(v.to_bits(), Ordering::Relaxed);
    }
}

/// The counters of one group on this node (DESIGN D10). All relaxed atomics: each is an
/// independent tally, read only for reporting.
#[derive(Debug, Default)]
pub struct GroupStats {
    /// Tasks of the group that ended, successfully or not.
    pub total_completions: Counter,
    /// Requests rejected by the resource check.
    pub total_rejections: Counter,
    /// Tasks cancelled by the enforcement loop.
    pub total_cancellations: Counter,
    /// Tasks that ended with an error.
    pub failures: Counter,
    /// Requests rejected by a throttle.
    pub total_throttled: Counter,
    /// Throttle breaches admitted because of `monitor_only` or a `monitor` group that `enabled`
    /// would have refused (429); one it would have parked counts in `total_would_queue` only.
    pub total_would_throttle: Counter,
    /// Requests parked in a queue.
    pub total_queued: Counter,
    /// Requests rejected because the queue was full.
    pub total_queue_rejections: Counter,
    /// The group's queue handle while its throttle acts (set by each view installed): the
    /// permit table's exact count of the group's parked requests, for `queued_current`.
    queue: parking_lot::Mutex<Option<Arc<sluice_core::permits::GroupQueue>>>,
    /// The most requests ever parked at once: the most parked at a slot (the permit table's
    /// exact count when each parked, N5b) plus those waiting for the group's share then.
    pub queue_peak: Counter,
    /// Requests waiting for the group's resource share right now (part of `queued_current`;
    /// not shown on its own).
    pub share_waiting: Counter,
    /// Parked requests that left the queue (admitted or gone).
    pub queue_wait_count: Counter,
    /// Their total wait.
    pub total_queue_wait_millis: Counter,
    /// The longest wait.
    pub max_queue_wait_millis: Counter,
    /// Requests whose `workloadGroupId` header named no group (counted on DEFAULT only).
    pub total_unknown_group_tags: Counter,
    /// Tasks of the group executing on a search thread right now.
    executing: AtomicU64,
    /// The most tasks of the group ever seen executing at once.
    pub peak_executing: Counter,
    /// CPU figures.
    pub cpu: ResourceStats,
    /// Memory figures.
    pub memory: ResourceStats,
    /// Tasks admitted and not measured yet, and what one task of the group uses: what the
    /// admission check adds to `current_usage` (sluice's own, see
    /// [`sluice_core::resources::unmeasured`]).
    pub unmeasured: Arc<sluice_core::resources::UnmeasuredTasks>,
    /// Monitored breaches that `enabled` would have parked (seed 002).
    pub total_would_queue: Counter,
    /// Requests admitted with a shared-tier lease granted by the bucket's owner on acquire
    /// (or reused from this node's idle cache: `total_shared_reused`).
    pub total_shared_acquired: Counter,
    /// Shared leases this node took from its idle cache for a request of the group rather than
    /// asking the owner (a lease of an ended request, reused within its window of
    /// `sluice_cluster`'s `REUSE_WINDOW`); each also counts in `total_shared_acquired` or, handed
    /// to a parked request, `total_shared_pushed`.
    pub total_shared_reused: Counter,
    /// Parked requests admitted, after they waited, with a shared slot handed to their bucket's
    /// oldest waiter: an owner's offer, a lease another request of the bucket or the backstop
    /// sweep acquired (enqueue-first), or a fail-open slot while the owner could not be asked
    /// (K17 of the coordinator: such a slot counts in `total_shared_fail_open` too, so the
    /// pushed, acquired and fail-open counts overlap and do not add up to admissions).
    pub total_shared_pushed: Counter,
    /// Requests the shared tier refused (429 naming the cluster-wide limit), or, monitored,
    /// would have refused.
    pub total_shared_throttled: Counter,
    /// Requests admitted without a lease because no owner answered (fail open, seed 004).
    pub total_shared_fail_open: Counter,
    /// Offers of freed shared leases of the group's buckets this node received as a
    /// coordinator (taken or not; `total_shared_pushed` counts the taken ones).
    pub total_shared_pushes_received: Counter,
    /// Offers of freed shared leases of the group's buckets this node sent as their owner.
    pub total_shared_pushes_sent: Counter,
    /// Shared leases of the group's buckets this node holds as their owner, for all
    /// coordinators (set from the owner's table when stats are read).
    pub shared_leases_owned: Counter,
    /// When (seconds of `admission::now_secs`, at least 1; 0: never) a fail-open admission of
    /// the group was last logged: the WARN is rate-limited to once a minute per group.
    pub fail_open_logged_at: std::sync::atomic::AtomicU64,
    /// The queue wait those parked requests would have had, estimated from the group's drain
    /// rate ([`DrainRate::estimated_wait_millis`]); breaches before any completion add nothing.
    pub total_would_queue_wait_millis: Counter,
    /// The longest of those estimated waits.
    pub max_would_queue_wait_millis: Counter,
    /// Requests the resource check would have rejected (`monitor_only`, or a `monitor` group).
    pub total_would_reject: Counter,
    /// Tasks the enforcement pass would have cancelled (`monitor_only`, or a `monitor` group
    /// judged as `enforced`), each task counted once.
    pub total_would_cancel: Counter,
    /// How long parked requests waited, by bucket ([`WaitHistogram`]).
    pub queue_wait: WaitHistogram,
    /// How fast the group's tasks end: what a 429's `Retry-After` is computed from (D14).
    pub drain: DrainRate,
    /// The CPU-time quota of a paced group (a queued `enforced` group with a cpu limit; see
    /// [`sluice_core::resources::quota`]), created at its first paced admission.
    pub quota: parking_lot::Mutex<Option<sluice_core::resources::CpuQuota>>,
    /// The monitored breaches in flight per bucket: the queue `enabled` would have had
    /// ([`crate::admission::dry_queue`]).
    pub dry_queues: Arc<crate::admission::dry_queue::DryQueues>,
    /// Set when the group is deleted (its stats leave the node's map): the ends of its tasks
    /// still running or released from its queue count in DEFAULT from then on
    /// ([`super::Workload::end_stats`]).
    retired: std::sync::atomic::AtomicBool,
}

/// Completions per second of a group over the last [`DrainRate::WINDOW_SECS`] seconds, in
/// one-second slots (a clock second → count), so a throttled client can be told how long the
/// queue ahead of it takes to drain (DESIGN D14).
#[derive(Debug, Default)]
pub struct DrainRate {
    slots: parking_lot::Mutex<Slots>,
}

/// One-second slots of completions, and the second of the first completion ever recorded.
#[derive(Debug, Default)]
struct Slots {
    counts: [(u64, u64); DrainRate::WINDOW_SECS as usize],
    first_sec: Option<u64>,
}

impl DrainRate {
    /// The window: long enough to smooth a burst of completions, short enough to follow a load
    /// that changed (ten times the 1 s backstop sweep).
    pub const WINDOW_SECS: u64 = 10;

    /// Records one completion at `now_secs` (seconds on a monotonic clock).
    pub fn record(&self, now_secs: u64) {
        let mut slots = self.slots.lock();
        slots.first_sec.get_or_insert(now_secs);
        let slot = &mut slots.counts[(now_secs % Self::WINDOW_SECS) as usize];
        if slot.0 != now_secs {
            *slot = (now_secs, 0);
        }
        slot.1 += 1;
    }

    /// Completions per second over the window ending at `now_secs` — over the part of it
    /// since the first completion, for a group that started completing less than a window ago
    /// (its rate is not diluted by the seconds before it ran anything); `None` before any.
    pub fn per_second(&self, now_secs: u64) -> Option<f64> {
        let slots = self.slots.lock();
        let first = slots.first_sec?;
        let recent: u64 = slots
            .counts
            .iter()
            .filter(|(sec, _)| now_secs.saturating_sub(*sec) < Self::WINDOW_SECS)
            .map(|(_, n)| n)
            .sum();
        let covered = (now_secs.saturating_sub(first) + 1).min(Self::WINDOW_SECS);
        Some(recent as f64 / covered as f64)
    }

    /// The wait, in milliseconds, of a request with `ahead` requests before it in a bucket
    /// that gets one `buckets`-th of the group's drain, at the measured rate: what a parked
    /// request would have waited. `None` before any completion or with none in the window
    /// (no rate to estimate from).
    pub fn estimated_wait_millis(&self, now_secs: u64, ahead: u64, buckets: u64) -> Option<u64> {
        let rate = self.per_second(now_secs)? / buckets.max(1) as f64;
        (rate > 0.0).then(|| ((ahead + 1) as f64 * 1000.0 / rate).ceil() as u64)
    }

    /// The `Retry-After` for a request with `ahead` requests queued before it in a bucket that
    /// gets one `buckets`-th of the group's drain (the group's buckets with waiters share it):
    /// the time that takes at the measured rate, bounded 1..=60 s. Before the group ever
    /// completed anything, 1 s; with no completion in the window, the window (nothing drained
    /// that long).
    pub fn retry_after_secs(&self, now_secs: u64, ahead: u64, buckets: u64) -> u64 {
        let secs = match self.per_second(now_secs) {
            // Nothing measured yet: the shortest wait.
            None => 1,
            Some(rate) if rate > 0.0 => {
                let rate = rate / buckets.max(1) as f64;
                ((ahead + 1) as f64 / rate).ceil() as u64
            }
            Some(_) => Self::WINDOW_SECS,
        };
        secs.clamp(1, 60)
    }
}

/// Queue waits counted by bucket, each bucket with the sum of its waits, so the metrics endpoint
/// renders a Prometheus histogram whose bucket counts and sum are exact
/// ([`WaitHistogram::histogram`]): a [`Buckets`] in milliseconds.
#[derive(Debug)]
pub struct WaitHistogram(Buckets);

impl Default for WaitHistogram {
    fn default() -> Self {
        WaitHistogram(Buckets::new(&WaitHistogram::BOUNDS_MILLIS))
    }
}

impl WaitHistogram {
    /// The upper bounds of the buckets, in milliseconds: from a wait barely noticed (5 ms) to
    /// the longest a client usually waits before timing out (60 s), about ×2.5 apart.
    pub const BOUNDS_MILLIS: [u64; 13] = [
        5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000,
    ];

    /// Records one wait of `millis`.
    pub fn record_millis(&self, millis: u64) {
        self.0.record(millis);
    }

    /// The waits by bucket, in milliseconds.
    pub fn histogram(&self) -> &Buckets {
        &self.0
    }
}

impl GroupStats {
    /// Marks the stats of a deleted group.
    pub fn retire(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the group is deleted.
    pub fn is_retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Requests parked right now: those the permit table holds parked for the group (exact:
    /// a request handed its slot has left the count even before its task runs, N5b) and those
    /// waiting for the group's share.
    pub fn queued_current(&self) -> u64 {
        let parked = self.queue.lock().as_ref().map_or(0, |q| q.num_parked());
        parked + self.share_waiting.get()
    }

    /// Records the group's queue handle of the view being installed (`None`: its throttle
    /// does not act).
    pub fn set_queue(&self, queue: Option<Arc<sluice_core::permits::GroupQueue>>) {
        *self.queue.lock() = queue;
    }
    /// The figures of `resource`.
    pub fn resource(&self, resource: ResourceType) -> &ResourceStats {
        match resource {
            ResourceType::Cpu => &self.cpu,
            ResourceType::Memory => &self.memory,
        }
    }

    /// Charges `cpu_nanos` its tasks used to the group's CPU quota while the group is `paced`;
    /// a group that is not paced (any more) drops its quota, so one paced again starts afresh
    /// instead of paying for what it used while it was not.
    pub fn charge_cpu(&self, cpu_nanos: u64, paced: bool) {
        let mut quota = self.quota.lock();
        match quota.as_mut() {
            Some(q) if paced => q.charge(cpu_nanos),
            Some(_) => *quota = None,
            None => {}
        }
    }

    /// A task of the group started executing.
    pub fn executing_started(&self) {
        let now = self.executing.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak_executing.raise_to(now);
    }

    /// A task of the group stopped executing.
    pub fn executing_ended(&self) {
        self.executing.fetch_sub(1, Ordering::AcqRel);
    }

    /// Tasks of the group executing right now.
    pub fn executing(&self) -> u64 {
        self.executing.load(Ordering::Acquire)
    }

    /// The `_wlm/stats` object of this group: OpenSearch's fields first, then sluice's
    /// throttle and queue figures.
    pub fn to_json(&self, is_default: bool) -> Value {
        let resource = |r: &ResourceStats| {
            json!({
                "current_usage": r.current_usage(),
                "cancellations": r.cancellations.get(),
                "rejections": r.rejections.get(),
            })
        };
        let mut v = json!({
            "total_completions": self.total_completions.get(),
            "total_rejections": self.total_rejections.get(),
            "total_cancellations": self.total_cancellations.get(),
            "failures": self.failures.get(),
            "total_throttled": self.total_throttled.get(),
            "total_would_throttle": self.total_would_throttle.get(),
            "total_queued": self.total_queued.get(),
            "total_queue_rejections": self.total_queue_rejections.get(),
            "queued_current": self.queued_current(),
            "queue_peak": self.queue_peak.get(),
            "queue_wait_count": self.queue_wait_count.get(),
            "total_queue_wait_millis": self.total_queue_wait_millis.get(),
            "max_queue_wait_millis": self.max_queue_wait_millis.get(),
            "total_would_queue": self.total_would_queue.get(),
            "total_shared_acquired": self.total_shared_acquired.get(),
            "total_shared_reused": self.total_shared_reused.get(),
            "total_shared_pushed": self.total_shared_pushed.get(),
            "total_shared_throttled": self.total_shared_throttled.get(),
            "total_shared_fail_open": self.total_shared_fail_open.get(),
            "total_shared_pushes_received": self.total_shared_pushes_received.get(),
            "total_shared_pushes_sent": self.total_shared_pushes_sent.get(),
            "shared_leases_owned": self.shared_leases_owned.get(),
            "total_would_queue_wait_millis": self.total_would_queue_wait_millis.get(),
            "max_would_queue_wait_millis": self.max_would_queue_wait_millis.get(),
            "total_would_reject": self.total_would_reject.get(),
            "total_would_cancel": self.total_would_cancel.get(),
            "executing": self.executing(),
            "peak_executing": self.peak_executing.get(),
            "cpu": resource(&self.cpu),
            "memory": resource(&self.memory),
        });
        if is_default {
            v["total_unknown_group_tags"] = json!(self.total_unknown_group_tags.get());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::DrainRate;

    #[test]
    fn test_retry_after_follows_the_drain_rate_within_bounds() {
        let d = DrainRate::default();
        // Nothing measured yet: the shortest wait.
        assert_eq!(d.retry_after_secs(100, 5, 1), 1);
        // A group that started completing a second ago: its rate is over that second only.
        d.record(90);
        d.record(90);
        assert_eq!(d.per_second(90), Some(2.0));
        // 20 completions in the window: 2 per second; 9 ahead → 5 s.
        for s in 91..=100 {
            d.record(s);
            d.record(s);
        }
        assert_eq!(d.per_second(100), Some(2.0));
        assert_eq!(d.retry_after_secs(100, 9, 1), 5);
        assert_eq!(d.retry_after_secs(100, 0, 1), 1);
        assert_eq!(d.retry_after_secs(100, 10_000, 1), 60);
        // Two buckets with waiters share the drain: each drains at 1 per second.
        assert_eq!(d.retry_after_secs(100, 9, 2), 10);
        // Slots older than the window no longer count: nothing drained for a whole window.
        assert_eq!(d.per_second(200), Some(0.0));
        assert_eq!(d.retry_after_secs(200, 0, 1), DrainRate::WINDOW_SECS);
    }

    #[test]
    fn test_estimated_wait_follows_the_drain_rate_and_needs_one() {
        let d = DrainRate::default();
        assert_eq!(d.estimated_wait_millis(100, 3, 1), None);
        for s in 91..=100 {
            d.record(s);
            d.record(s);
        }
        // 2 per second: 3 ahead and itself → 2 s; two buckets share the drain → 4 s.
        assert_eq!(d.estimated_wait_millis(100, 3, 1), Some(2000));
        assert_eq!(d.estimated_wait_millis(100, 3, 2), Some(4000));
        // Nothing drained for a whole window: no rate to estimate from.
        assert_eq!(d.estimated_wait_millis(200, 3, 1), None);
    }

    #[test]
    fn test_wait_histogram_puts_each_wait_in_the_first_bucket_that_holds_it() {
        let h = super::WaitHistogram::default();
        for ms in [0, 5, 6, 60_000, 60_001, 90_000] {
            h.record_millis(ms);
        }
        let b: Vec<(u64, u64)> = h.histogram().read().collect();
        assert_eq!(b[0], (2, 5)); // 0 and 5 are <= 5
        assert_eq!(b[1], (1, 6));
        assert_eq!(b[12], (1, 60_000));
        assert_eq!(b[13], (2, 150_001));
        assert_eq!(b.iter().map(|x| x.0).sum::<u64>(), 6);
    }

    #[test]
    fn test_a_group_not_paced_any_more_drops_its_quota_instead_of_running_into_debt() {
        let stats = super::GroupStats::default();
        *stats.quota.lock() = Some(sluice_core::resources::CpuQuota::new(0, 1e9));
        stats.charge_cpu(500_000_000, true);
        assert_eq!(
            stats.quota.lock().map(|q| q.balance_nanos()),
            Some(500_000_000)
        );
        // While not paced (soft, unqueued, mode not enabled) its usage is not a debt.
        stats.charge_cpu(5_000_000_000, false);
        assert!(stats.quota.lock().is_none());
        stats.charge_cpu(5_000_000_000, true);
        assert!(stats.quota.lock().is_none());
    }
}
