//! How `resource_limits` apply on a gateway (DESIGN D15; ARCHITECTURE.md "Gateway").
//!
//! A gateway cannot read the CPU time or the allocations of a search that runs on the upstream
//! cluster's threads, so it takes a measure from the upstream, chosen at start by what the
//! upstream's `GET /` says it is:
//!
//! - **[`Measure::Reported`]** (OpenSearch, and sluice as an upstream): the upstream reports
//!   each task's `resource_stats` (CPU time, allocated bytes) in `_tasks?detailed`. While
//!   forwarded searches are in flight, the gateway polls the upstream's search tasks every
//!   `wlm.workload_group.usage_refresh_interval`, sums the figures of the tasks whose
//!   `X-Opaque-Id` names each of its own tasks (a search's shard tasks carry its header) and
//!   records them on the gateway's task. While every search in flight is younger than one
//!   refresh interval, it polls once every `wlm.workload_group.enforcement_interval` instead
//!   ([`poll_due`]): each poll is a listing of the upstream's searches with their sources
//!   (`resource_stats` come only with `detailed`), over every node of its cluster, and ten a
//!   second while only short searches run cost the upstream's searches their tail (the 32
//!   clients' p99 through a gateway, BENCHMARKS.md "What the usage poll costs") and buy
//!   figures of searches that end before any enforcement pass could act on them; sampled
//!   once a pass, they still teach the estimate that counts them while they run. From there the enforcement pass, the admission share
//!   check and the per-task estimate act exactly as on an embedded node, the fractions being
//!   of the gateway node's cores and `node.memory_budget` (set them to the upstream's search
//!   capacity; the default is the gateway machine's). A search shorter than one poll is
//!   measured at the per-task estimate only, as a task between two refreshes is on an
//!   embedded node, and teaches the estimate nothing when it ends (it has no figure; see
//!   [`super::Upstream::finished`]).
//! - **[`Measure::InFlight`]** (Elasticsearch, which reports no per-task usage): each
//!   forwarded search occupies one of the upstream's search threads from the moment it is sent
//!   until its answer's headers arrive; a group's CPU and memory usage is its searches in
//!   flight over the upstream's search threads (`backend.upstream.search_threads`, or the sum
//!   of `thread_pool.search.size` its `_nodes/thread_pool` reports at start). Recorded as
//!   `t × cores / search_threads` of CPU time for `t` in flight and
//!   `memory_budget / search_threads` bytes, so the enforcement sees `1 / search_threads` per
//!   search in flight. The limits then bound a group's share of the upstream's search
//!   capacity, not how heavy each search is; start-up says so at WARN.
//!
//! Either way a limit acts: none is accepted that would silently have no effect.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::tasks::{OPAQUE_ID_HEADER, Task};

/// How a gateway measures its forwarded searches (see the module docs).
#[derive(Debug, Clone, Copy)]
pub enum Measure {
    /// The upstream's own per-task `resource_stats`, polled.
    Reported,
    /// Searches in flight over the upstream's search threads.
    InFlight(InFlight),
}

/// The in-flight measure (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    /// The gateway's cores, the unit the enforcement divides CPU time by.
    pub cores: u32,
    /// The upstream's search threads, the capacity a search in flight takes one of.
    pub search_threads: u32,
    /// The node's memory budget, the unit the enforcement divides memory by.
    pub memory_budget_bytes: u64,
}

impl InFlight {
    /// The CPU time a search in flight since `since` counts as at `now`.
    pub fn cpu_nanos(&self, since: Instant, now: Instant) -> u64 {
        let wall = now.saturating_duration_since(since).as_nanos();
        let scaled = wall * u128::from(self.cores) / u128::from(self.search_threads.max(1));
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    /// The memory a search in flight counts as.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_budget_bytes / u64::from(self.search_threads.max(1))
    }

    /// Records the measure on every forwarded task in flight (those a gateway marked
    /// executing), before the enforcement reads the tasks' usage.
    pub fn record(&self, tasks: &[Arc<Task>], now: Instant) {
        for task in tasks {
            if let Some(since) = task.usage.executing_since() {
                task.usage
                    .record(self.cpu_nanos(since, now), self.memory_bytes());
            }
        }
    }
}

/// The upstream's reported usage per gateway task: sums the `resource_stats.total` of the
/// tasks in a `_tasks?detailed` answer whose `X-Opaque-Id` ends in `sluice:<node_id>:<seq>`,
/// by `seq`.
pub fn reported_usage(body: &[u8], node_id: &str) -> HashMap<u64, (u64, u64)> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let marker = format!("sluice:{node_id}:");
    let mut out: HashMap<u64, (u64, u64)> = HashMap::new();
    let Some(nodes) = v["nodes"].as_object() else {
        return out;
    };
    for n in nodes.values() {
        let Some(tasks) = n["tasks"].as_object() else {
            continue;
        };
        for t in tasks.values() {
            let header = t["headers"]
                .as_object()
                .and_then(|h| {
                    h.iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(OPAQUE_ID_HEADER))
                })
                .and_then(|(_, v)| v.as_str());
            let Some(seq) = header
                .and_then(|h| h.rsplit_once(&marker))
                .and_then(|(_, seq)| seq.parse::<u64>().ok())
            else {
                continue;
            };
            let total = &t["resource_stats"]["total"];
            let e = out.entry(seq).or_default();
            e.0 =
                e.0.saturating_add(total["cpu_time_in_nanos"].as_u64().unwrap_or(0));
            e.1 =
                e.1.saturating_add(total["memory_in_bytes"].as_u64().unwrap_or(0));
        }
    }
    out
}

/// What a forwarded search that was executing since `since` and ends at `now` teaches the
/// per-task estimate: the time its figures were taken, its CPU time and its allocated bytes.
/// Under the in-flight measure, its time in flight until `now` (recorded on `usage`); under
/// the reported one, the figures of its last poll at that poll's time; `None` when no poll
/// measured it (a 0 would teach the estimate that it used nothing: see
/// [`super::Upstream::finished`]).
pub fn at_end(
    measure: Option<Measure>,
    usage: &crate::accounting::TaskUsage,
    since: Instant,
    now: Instant,
) -> Option<(Instant, u64, u64)> {
    match measure {
        Some(Measure::InFlight(m)) => {
            usage.record(m.cpu_nanos(since, now), m.memory_bytes());
            Some((now, usage.cpu_nanos(), usage.memory_bytes()))
        }
        _ => usage
            .measured_at()
            .map(|at| (at, usage.cpu_nanos(), usage.memory_bytes()))
            // Found, but not yet started upstream (waiting in its pool): nothing measured.
            .filter(|&(_, cpu, memory)| cpu > 0 || memory > 0),
    }
}

/// Whether the gateway polls the upstream's task usage now (see the module docs), with
/// `oldest` the time in flight of its oldest forwarded search (`None`: none in flight),
/// `since_last` the time since its last poll (`None`: none yet), `refresh` the usage refresh
/// interval and `sample` the enforcement interval: at every refresh while a search has been in
/// flight a whole refresh interval, else once every `sample`, and never with nothing in
/// flight.
pub fn poll_due(
    oldest: Option<Duration>,
    since_last: Option<Duration>,
    refresh: Duration,
    sample: Duration,
) -> bool {
    match oldest {
        None => false,
        Some(age) if age >= refresh => true,
        Some(_) => since_last.is_none_or(|s| s >= sample),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[test]
    fn test_a_search_in_flight_counts_as_one_upstream_search_thread() {
        let m = InFlight {
            cores: 2,
            search_threads: 8,
            memory_budget_bytes: 8 << 30,
        };
        let t0 = Instant::now();
        let cpu = m.cpu_nanos(t0, t0 + Duration::from_secs(4));
        // Share = cpu / (wall × cores) = 1 / search_threads.
        let share = cpu as f64 / (4e9 * 2.0);
        assert!((share - 1.0 / 8.0).abs() < 1e-9, "{share}");
        assert_eq!(m.cpu_nanos(t0 + Duration::from_secs(1), t0), 0);
        assert_eq!(m.memory_bytes(), 1 << 30);
    }

    #[test]
    fn test_reported_usage_sums_the_tasks_of_each_gateway_task() {
        let stats = |cpu: u64, mem: u64| json!({"total": {"cpu_time_in_nanos": cpu, "memory_in_bytes": mem}});
        let body = json!({"nodes": {
            "a": {"tasks": {
                "a:1": {"headers": {"X-Opaque-Id": "sluice:gw:7"}, "resource_stats": stats(10, 100)},
                "a:2": {"headers": {"X-Opaque-Id": "mine;sluice:gw:7"}, "resource_stats": stats(5, 50)},
                "a:3": {"headers": {"X-Opaque-Id": "sluice:other:7"}, "resource_stats": stats(1, 1)},
                "a:4": {"headers": {}, "resource_stats": stats(1, 1)}
            }},
            "b": {"tasks": {
                "b:9": {"headers": {"X-Opaque-Id": "sluice:gw:8"}, "resource_stats": stats(3, 30)}
            }}
        }});
        let got = reported_usage(body.to_string().as_bytes(), "gw");
        assert_eq!(got.len(), 2);
        assert_eq!(got[&7], (15, 150));
        assert_eq!(got[&8], (3, 30));
    }

    #[test]
    fn test_polls_follow_long_searches_and_sample_short_ones() {
        let ms = Duration::from_millis;
        let (refresh, sample) = (ms(100), ms(1000));
        // Nothing in flight: no poll, however long ago the last one.
        assert!(!poll_due(None, None, refresh, sample));
        assert!(!poll_due(None, Some(ms(5000)), refresh, sample));
        // A search in flight a whole refresh interval: every refresh.
        assert!(poll_due(Some(ms(100)), Some(ms(100)), refresh, sample));
        assert!(poll_due(Some(ms(250)), Some(ms(0)), refresh, sample));
        // Only younger ones: the first poll, then one a sample interval.
        assert!(poll_due(Some(ms(3)), None, refresh, sample));
        assert!(!poll_due(Some(ms(99)), Some(ms(100)), refresh, sample));
        assert!(!poll_due(Some(ms(3)), Some(ms(999)), refresh, sample));
        assert!(poll_due(Some(ms(3)), Some(ms(1000)), refresh, sample));
        // Equal intervals: every refresh, as before the sampling.
        assert!(poll_due(Some(ms(3)), Some(ms(1000)), sample, sample));
    }

    #[test]
    fn test_a_polled_search_teaches_its_figures_at_its_last_poll() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let end = at(500);
        // Never polled, or polled before it started upstream: nothing to teach.
        let usage = crate::accounting::TaskUsage::default();
        assert_eq!(at_end(Some(Measure::Reported), &usage, start, end), None);
        assert_eq!(at_end(None, &usage, start, end), None);
        usage.record_at(0, 0, at(100));
        assert_eq!(at_end(Some(Measure::Reported), &usage, start, end), None);
        // Polled twice: the figures of the later poll, at its time, not at the end.
        usage.record_at(30_000_000, 1_000, at(200));
        usage.record_at(60_000_000, 2_000, at(300));
        assert_eq!(
            at_end(Some(Measure::Reported), &usage, start, end),
            Some((at(300), 60_000_000, 2_000))
        );
        // An answer that arrives late never moves the time back.
        usage.record_at(50_000_000, 1_500, at(250));
        assert_eq!(usage.measured_at(), Some(at(300)));
        // In flight: its time in flight until its end.
        let m = InFlight {
            cores: 2,
            search_threads: 8,
            memory_budget_bytes: 800,
        };
        let usage = crate::accounting::TaskUsage::default();
        assert_eq!(
            at_end(Some(Measure::InFlight(m)), &usage, start, end),
            Some((end, m.cpu_nanos(start, end), 100))
        );
    }
}
