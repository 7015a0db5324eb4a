//! The figures the node already keeps, written into a fresh recorder at every scrape (see the
//! [module docs](super)): per group its counters (the shared tier's refusals and fail-opens
//! among them), queue, in-flight tasks, usage and limits, the shared leases it owns, and the
//! dry-run figures; per node duress, usage, the search pool (not on a gateway, whose searches
//! run upstream), the running tasks and the shared tier's lease cache.

use metrics::Label;
use metrics_exporter_prometheus::PrometheusBuilder;
use sluice_core::ResourceType;

use super::Sink;
use super::histogram;
use super::names::{self, Described};
use crate::state::AppState;
use crate::workload::GroupEntry;

/// Milliseconds per second, for the figures kept in milliseconds and exposed in seconds.
const MILLIS_PER_SEC: f64 = 1000.0;

/// Reads one counter of a group's stats.
type ReadCounter = fn(&crate::workload::GroupStats) -> u64;

/// The per-group counters and the stats field each reads.
const GROUP_COUNTERS: [(Described, ReadCounter); 17] = [
    (names::GROUP_COMPLETIONS, |s| s.total_completions.get()),
    (names::GROUP_FAILURES, |s| s.failures.get()),
    (names::GROUP_REJECTIONS, |s| s.total_rejections.get()),
    (names::GROUP_CANCELLATIONS, |s| s.total_cancellations.get()),
    (names::GROUP_THROTTLED, |s| s.total_throttled.get()),
    (names::GROUP_SHARED_THROTTLED, |s| {
        s.total_shared_throttled.get()
    }),
    (names::GROUP_SHARED_FAIL_OPEN, |s| {
        s.total_shared_fail_open.get()
    }),
    (names::GROUP_SHARED_ACQUIRED, |s| {
        s.total_shared_acquired.get()
    }),
    (names::GROUP_SHARED_REUSED, |s| s.total_shared_reused.get()),
    (names::GROUP_SHARED_PUSHED, |s| s.total_shared_pushed.get()),
    (names::GROUP_QUEUED, |s| s.total_queued.get()),
    (names::GROUP_QUEUE_REJECTIONS, |s| {
        s.total_queue_rejections.get()
    }),
    (names::GROUP_WOULD_THROTTLE, |s| {
        s.total_would_throttle.get()
    }),
    (names::GROUP_WOULD_QUEUE, |s| s.total_would_queue.get()),
    (names::GROUP_WOULD_REJECT, |s| s.total_would_reject.get()),
    (names::GROUP_WOULD_CANCEL, |s| s.total_would_cancel.get()),
    (names::GROUP_UNKNOWN_TAGS, |s| {
        s.total_unknown_group_tags.get()
    }),
];

/// Running totals in seconds: recorded as gauges (the `metrics` crate's counters are integers,
/// and whole seconds would hide short waits), typed `counter` in the text, so that `rate()`
/// and `increase()` handle a restart's reset.
const FRACTIONAL_COUNTERS: [Described; 1] = [names::GROUP_WOULD_QUEUE_WAIT];

/// The node's figures now, in the Prometheus text format.
pub fn render(st: &AppState) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let sink = Sink(&recorder);
    describe(&sink);
    crate::admission::shared::refresh_owned(st);
    let view = st.workload.view();
    let mut groups: Vec<&std::sync::Arc<GroupEntry>> = view.groups.values().collect();
    groups.push(st.workload.default_entry());
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    for entry in &groups {
        group(&sink, entry);
    }
    node(&sink, st);
    let mut text = recorder.handle().render();
    for (name, _) in FRACTIONAL_COUNTERS {
        text = text.replace(
            &format!("# TYPE {name} gauge\n"),
            &format!("# TYPE {name} counter\n"),
        );
    }
    queue_waits(&mut text, &groups);
    text
}

/// The queue wait histogram of every group that has parked a request.
fn queue_waits(out: &mut String, groups: &[&std::sync::Arc<GroupEntry>]) {
    let waited: Vec<_> = groups
        .iter()
        .filter(|g| g.stats.queue_wait.histogram().read().any(|(n, _)| n > 0))
        .collect();
    if waited.is_empty() {
        return;
    }
    histogram::write_header(out, names::GROUP_QUEUE_WAIT);
    for entry in waited {
        let id = entry.id.to_string();
        histogram::write_series(
            out,
            names::GROUP_QUEUE_WAIT.0,
            &[(names::GROUP_ID, &id), (names::GROUP_NAME, entry.name())],
            entry.stats.queue_wait.histogram(),
            MILLIS_PER_SEC,
        );
    }
    out.push('\n');
}

/// Help texts for every family this render writes.
fn describe(sink: &Sink<'_>) {
    for (name, _) in GROUP_COUNTERS {
        sink.describe_counter(name);
    }
    sink.describe_counter(names::POOL_REJECTED);
    for name in [
        names::SHARED_ACQUIRED,
        names::SHARED_REUSED,
        names::SHARED_BATCHED,
        names::SHARED_IDLE_RELEASED,
        names::SHARED_EXTENDED,
    ] {
        sink.describe_counter(name);
    }
    sink.describe_gauge(names::SHARED_IDLE);
    sink.describe_gauge(names::SHARED_UNREACHABLE);
    for name in FRACTIONAL_COUNTERS {
        sink.describe_gauge(name);
    }
    for name in [
        names::GROUP_QUEUE_DEPTH,
        names::GROUP_IN_FLIGHT,
        names::GROUP_NODE_LIMIT,
        names::GROUP_SHARED_LEASES_OWNED,
        names::GROUP_USAGE,
        names::GROUP_LIMIT,
        names::NODE_DURESS,
        names::NODE_USAGE,
        names::POOL_THREADS,
        names::POOL_ACTIVE,
        names::POOL_QUEUED,
        names::TASKS_RUNNING,
    ] {
        sink.describe_gauge(name);
    }
}

/// One group's figures, labelled with its id and name.
fn group(sink: &Sink<'_>, entry: &GroupEntry) {
    let s = &entry.stats;
    let labels = [
        Label::new(names::GROUP_ID, entry.id.to_string()),
        Label::new(names::GROUP_NAME, entry.name().to_string()),
    ];
    for (name, read) in GROUP_COUNTERS {
        if name == names::GROUP_UNKNOWN_TAGS && !entry.is_default() {
            continue;
        }
        sink.counter(name, &labels, read(s));
    }
    sink.gauge(
        names::GROUP_WOULD_QUEUE_WAIT,
        &labels,
        s.total_would_queue_wait_millis.get() as f64 / MILLIS_PER_SEC,
    );
    sink.gauge(names::GROUP_QUEUE_DEPTH, &labels, s.queued_current() as f64);
    sink.gauge(names::GROUP_IN_FLIGHT, &labels, s.executing() as f64);
    let group = entry.group.as_ref();
    if let Some(limit) = group.and_then(|g| g.throttling.node_limit) {
        sink.gauge(names::GROUP_NODE_LIMIT, &labels, limit as f64);
    }
    // Shown for a group with a shared pool, and for one whose pool went while this node
    // still counts leases of it.
    let owned = s.shared_leases_owned.get();
    if owned > 0 || group.is_some_and(|g| g.throttling.shared_pool().is_some()) {
        sink.gauge(names::GROUP_SHARED_LEASES_OWNED, &labels, owned as f64);
    }
    for r in ResourceType::ALL {
        let with_resource = |labels: &[Label]| {
            let mut l = labels.to_vec();
            l.push(Label::new(names::RESOURCE, r.as_str()));
            l
        };
        let l = with_resource(&labels);
        sink.gauge(names::GROUP_USAGE, &l, s.resource(r).current_usage());
        if let Some(limit) = group.and_then(|g| g.resource_limits.get(r)) {
            sink.gauge(names::GROUP_LIMIT, &l, limit);
        }
    }
}

/// The node's own figures.
fn node(sink: &Sink<'_>, st: &AppState) {
    let reading = *st.enforcement.last_reading.lock();
    for (r, usage, duress) in [
        (ResourceType::Cpu, reading.cpu, reading.cpu_in_duress),
        (
            ResourceType::Memory,
            reading.memory,
            reading.memory_in_duress,
        ),
    ] {
        let l = [Label::new(names::RESOURCE, r.as_str())];
        sink.gauge(names::NODE_DURESS, &l, if duress { 1.0 } else { 0.0 });
        sink.gauge(names::NODE_USAGE, &l, usage);
    }
    // Not on a gateway: its pool runs no search (they run upstream), and its figures, 0
    // active while searches were in flight, read as an idle node. Its searches in flight are
    // its groups' `in_flight`.
    if st.upstream.is_none() {
        let pool = &st.search_pool;
        let (queued, active) = pool.num_queued_and_active();
        sink.gauge(names::POOL_THREADS, &[], pool.num_threads() as f64);
        sink.gauge(names::POOL_ACTIVE, &[], active as f64);
        sink.gauge(names::POOL_QUEUED, &[], queued as f64);
        sink.counter(names::POOL_REJECTED, &[], pool.num_rejected());
    }
    sink.gauge(names::TASKS_RUNNING, &[], st.tasks.list().len() as f64);
    let coordinator = &st.cluster.shared().coordinator;
    for (name, value) in shared_counters(&coordinator.stats) {
        sink.counter(name, &[], value);
    }
    sink.gauge(names::SHARED_IDLE, &[], coordinator.num_idle() as f64);
    sink.gauge(
        names::SHARED_UNREACHABLE,
        &[],
        coordinator.unreachable_owners().len() as f64,
    );
}

/// The node's shared-tier counters (its coordinator's), by metric.
fn shared_counters(
    s: &sluice_cluster::shared::coordinator::CoordinatorStats,
) -> [(Described, u64); 5] {
    use std::sync::atomic::Ordering::Relaxed;
    [
        (names::SHARED_ACQUIRED, s.acquired.load(Relaxed)),
        (names::SHARED_REUSED, s.reused.load(Relaxed)),
        (names::SHARED_BATCHED, s.prefetched.load(Relaxed)),
        (names::SHARED_IDLE_RELEASED, s.idle_released.load(Relaxed)),
        (names::SHARED_EXTENDED, s.extended.load(Relaxed)),
    ]
}
