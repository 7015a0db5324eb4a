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
//!
//! # Gaps
//!
//! The reported measure can fail after start, and an undecided one is none: a [`Gap`] is
//! either, kept with what stands in by [`Gaps`].
//!
//! - **No figures** ([`Gap::NoStats`]): the upstream lists the gateway's searches with
//!   `resource_stats` of zeros (OpenSearch with `task_resource_tracking.enabled: false`) or
//!   none (before 2.1), [`NO_STATS_POLLS`] polls in a row ([`Listed::reports_usage`]).
//! - **No listing** ([`Gap::Listing`]): the `_tasks` listing answers an error (a 403: the
//!   gateway's user lacks `cluster:monitor/tasks/lists`; `passthrough` without credentials)
//!   or does not answer.
//! - **Undecided** ([`Gap::Undecided`], [`Gap::Unmeasurable`]): the upstream's `GET /` has not
//!   succeeded since start (down, or refusing the gateway's user), or answers but gives no
//!   measure.
//!
//! During a gap the in-flight measure stands in when the upstream's `_nodes/thread_pool` says
//! how many search threads it has (read once, retried every [`GAP_LOG_EVERY`]): each search
//! in flight counts as one of them, as on Elasticsearch, so a search the gateway cannot weigh
//! still counts at what it takes of the upstream's capacity, not at 0. Without it, limits have
//! only the per-task estimate a group learned before the gap (no search teaches it during
//! one), so in effect no measure: the gap is logged as an ERROR every [`GAP_LOG_EVERY`]
//! ([`log_due`]), a group written with limits gets a `Warning`, and `_wlm/stats` shows it
//! under the group's `warnings`. A poll seeing figures again ends the gap (logged at INFO); while one stands,
//! polls come once every enforcement interval, only to see it end.

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

/// What one poll of the upstream's search tasks tells: the reported usage per gateway task,
/// and whether the upstream reports usage at all.
#[derive(Debug, Default)]
pub struct Listed {
    /// The sums of `resource_stats.total` of the tasks whose `X-Opaque-Id` ends in
    /// `sluice:<node_id>:<seq>`, by `seq` (a task listed without `resource_stats` adds 0).
    pub usage: HashMap<u64, (u64, u64)>,
    /// Whether the upstream measures the resources of searches: `Some(true)` when one of the
    /// gateway's tasks carries a figure that is not 0; `Some(false)` when none does and one of
    /// its search tasks has run [`NO_STATS_AFTER`] (OpenSearch lists `resource_stats` of
    /// zeros when `task_resource_tracking.enabled` is false, and none before 2.1); `None`
    /// when there is nothing to judge by (no search of the gateway's listed, or only young
    /// ones, which may still wait for a thread).
    pub reports_usage: Option<bool>,
}

/// The upstream's reported usage per gateway task in a `_tasks?detailed` answer (see
/// [`Listed`]). Only tasks of a search action (`indices:data/read/search`, its shard phases)
/// judge that the upstream does not measure: OpenSearch tracks the resources of those, not of
/// a by-query's parent task.
pub fn reported_usage(body: &[u8], node_id: &str) -> Listed {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let marker = format!("sluice:{node_id}:");
    let mut out = Listed::default();
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
            let cpu = total["cpu_time_in_nanos"].as_u64().unwrap_or(0);
            let memory = total["memory_in_bytes"].as_u64().unwrap_or(0);
            if cpu > 0 || memory > 0 {
                out.reports_usage = Some(true);
            } else if out.reports_usage.is_none()
                && t["action"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("indices:data/read/search"))
                && t["running_time_in_nanos"]
                    .as_u64()
                    .is_some_and(|n| u128::from(n) >= NO_STATS_AFTER.as_nanos())
            {
                out.reports_usage = Some(false);
            }
            let e = out.usage.entry(seq).or_default();
            e.0 = e.0.saturating_add(cpu);
            e.1 = e.1.saturating_add(memory);
        }
    }
    out
}

/// How long a search of the gateway's runs upstream with no figure before a poll takes it
/// for a sign that the upstream does not measure ([`Listed::reports_usage`]): a search
/// measured by OpenSearch has CPU time once its coordinating step ran, within milliseconds;
/// one still waiting for a thread upstream has none, and a second is long for that while no
/// other search of the gateway's shows a figure. [`NO_STATS_POLLS`] such polls in a row make
/// a gap.
pub const NO_STATS_AFTER: Duration = Duration::from_secs(1);

/// How many polls in a row must judge that the upstream does not measure before the gateway
/// takes it so ([`Gap::NoStats`]): one poll could catch the gateway's only old search waiting
/// in a busy upstream's queue; three in a row (a refresh interval apart at least) rarely do.
pub const NO_STATS_POLLS: u32 = 3;

/// How often a gap in the measure is logged again while it lasts ([`log_due`]): often enough
/// that an operator reading the last minutes of a log sees it, seldom enough not to flood it.
pub const GAP_LOG_EVERY: Duration = Duration::from_secs(30);

/// Why a gateway's measure of its forwarded searches is missing now: its limits then act
/// through the in-flight measure when the upstream's search threads could be read (the
/// stand-in), or not at all, which is logged and shown (see the module docs, "Gaps").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gap {
    /// No measure decided yet: the upstream's `GET /` has not succeeded (what it answered).
    Undecided(String),
    /// The upstream lists the gateway's searches without figures (`resource_stats` of zeros,
    /// or none).
    NoStats,
    /// The upstream's `_tasks` listing failed (its status and answer, or why it did not
    /// answer).
    Listing(String),
    /// The upstream answers but gives no measure (what is missing): it was down at start,
    /// and is not OpenSearch, has no readable `_nodes/thread_pool`, and no setting says.
    Unmeasurable(String),
}

impl Gap {
    /// Why, and what fixes it, for the log, the `Warning` header and `_wlm/stats`.
    pub fn why(&self) -> String {
        match self {
            Gap::Undecided(what) => format!(
                "the upstream's GET / has not succeeded ({what}), so how to measure its searches is not decided: check backend.upstream.username/password (the gateway's user needs cluster:monitor/main), or set backend.upstream.search_threads"
            ),
            Gap::NoStats => "the upstream lists its search tasks without resource_stats (OpenSearch with task_resource_tracking.enabled false, or a version without them): enable task_resource_tracking.enabled on the upstream, or set backend.upstream.search_threads".to_string(),
            Gap::Listing(what) => format!("the upstream's _tasks listing {what}"),
            Gap::Unmeasurable(what) => what.clone(),
        }
    }
}

/// What to log about a gap now (see [`log_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapLog {
    /// Nothing.
    Nothing,
    /// A WARN: the stand-in measure acts (logged once).
    Warn,
    /// An ERROR: limits have no measure, or a permission the gateway needs is missing.
    Error,
}

/// What to log about `gap`, in effect since `since`, with `stand_in` whether the in-flight
/// measure stands in for it and `logged` when it was last logged (`None`: not yet):
///
/// 1. a missing `resource_stats` with a stand-in is logged once, as a WARN: limits act, on
///    another measure (`test_gaps_are_logged_once_or_every_30_s`);
/// 2. a failed listing, a missing `resource_stats` without a stand-in, or an upstream that
///    gives no measure, is an ERROR at once and every [`GAP_LOG_EVERY`] while it lasts: a
///    permission or a setting is missing;
/// 3. an undecided measure is an ERROR every [`GAP_LOG_EVERY`] from its first
///    [`GAP_LOG_EVERY`] on (an upstream restarting as its gateway starts is not an error).
pub fn log_due(
    gap: &Gap,
    stand_in: bool,
    since: Instant,
    logged: Option<Instant>,
    now: Instant,
) -> GapLog {
    let again = logged.is_none_or(|at| now.saturating_duration_since(at) >= GAP_LOG_EVERY);
    match gap {
        Gap::NoStats if stand_in => {
            if logged.is_none() {
                GapLog::Warn
            } else {
                GapLog::Nothing
            }
        }
        Gap::NoStats | Gap::Listing(_) | Gap::Unmeasurable(_) if again => GapLog::Error,
        Gap::Undecided(_) if again && now.saturating_duration_since(since) >= GAP_LOG_EVERY => {
            GapLog::Error
        }
        _ => GapLog::Nothing,
    }
}

/// What a forwarded search that was executing since `since` and ends at `now()` teaches the
/// per-task estimate: the time its figures were taken, its CPU time and its allocated bytes.
/// Under the in-flight measure, its time in flight until `now()` (recorded on `usage`: the
/// clock is read for that measure alone, not at the end of every search); under
/// the reported one, the figures of its last poll at that poll's time; `None` when no poll
/// measured it (a 0 would teach the estimate that it used nothing: see
/// [`super::Upstream::finished`]).
pub fn at_end(
    measure: Option<Measure>,
    usage: &crate::accounting::TaskUsage,
    since: Instant,
    now: impl FnOnce() -> Instant,
) -> Option<(Instant, u64, u64)> {
    match measure {
        Some(Measure::InFlight(m)) => {
            let now = now();
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
/// interval, `sample` the enforcement interval and `gapped` whether a gap stands: at every
/// refresh while a search has been in flight a whole refresh interval, else once every
/// `sample`, and never with nothing in flight. While a gap stands, once every `sample`
/// whatever the searches' age: its polls only watch for the gap's end (a listing refused ten
/// times a second tells nothing more than once a second).
pub fn poll_due(
    oldest: Option<Duration>,
    since_last: Option<Duration>,
    refresh: Duration,
    sample: Duration,
    gapped: bool,
) -> bool {
    match oldest {
        None => false,
        Some(age) if age >= refresh && !gapped => true,
        Some(_) => since_last.is_none_or(|s| s >= sample),
    }
}

/// The first bytes of an upstream's answer as text a log line and a `Warning` header can
/// carry: at most 300 bytes (an error's type and reason; a whole HTML page says nothing more),
/// each character outside printable ASCII a space, runs of spaces one.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = if c.is_ascii_graphic() { c } else { ' ' };
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    out.trim().to_string()
}

/// What a failed `_tasks` listing says, for [`Polled::Failed`]: the upstream's `status` (`None`
/// when it did not answer) and `detail` (an excerpt of its answer, or why it did not answer),
/// and what fixes it. Only a refusal (401 or 403) names the permission the gateway's user
/// needs: an upstream that refused connections was once said to lack it (an outside trial).
pub fn listing_failed(status: Option<http::StatusCode>, detail: &str) -> String {
    match status {
        Some(s) if s == http::StatusCode::UNAUTHORIZED || s == http::StatusCode::FORBIDDEN => {
            format!(
                "answered {s}: {detail}: the gateway's user (backend.upstream.username) needs cluster:monitor/tasks/lists (OpenSearch's cluster_monitor), which cancelling upstream searches needs too"
            )
        }
        Some(s) => format!("answered {s}: {detail}"),
        None => format!(
            "failed: {detail} (the upstream did not answer: its searches' usage is unknown until it does)"
        ),
    }
}

/// What one poll of the upstream's tasks came to ([`Gaps::polled`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled {
    /// Listed: whether the upstream measures ([`Listed::reports_usage`]).
    Listed(Option<bool>),
    /// Failed: what it answered, or why it did not answer.
    Failed(String),
}

/// A gateway's gaps in its measure over time: the gap now, what stands in for it, and what
/// was logged of it. Kept by [`super::Upstream`]; its transitions are decided here.
#[derive(Debug, Default)]
pub struct Gaps {
    /// The gap now, and since when.
    gap: Option<(Gap, Instant)>,
    /// When the gap was last logged (`None`: not yet; reset when the gap changes kind).
    logged: Option<Instant>,
    /// Polls in a row that judged the upstream does not measure ([`NO_STATS_POLLS`]).
    no_stats_polls: u32,
    /// The in-flight measure standing in, from the upstream's `_nodes/thread_pool`.
    stand_in: Option<InFlight>,
    /// When reading the stand-in was last tried.
    stand_in_tried: Option<Instant>,
}

impl Gaps {
    /// The gap now.
    pub fn gap(&self) -> Option<&Gap> {
        self.gap.as_ref().map(|(g, _)| g)
    }

    /// The measure standing in for the gap, once read.
    pub fn stand_in(&self) -> Option<InFlight> {
        self.stand_in
    }

    /// Records `gap` as in effect at `now`: kept `since` its first poll when it is the same
    /// kind of gap as before (its text may change: another status), logged afresh when not.
    pub fn open(&mut self, gap: Gap, now: Instant) {
        let since = match &self.gap {
            Some((before, since))
                if std::mem::discriminant(before) == std::mem::discriminant(&gap) =>
            {
                *since
            }
            _ => {
                self.logged = None;
                now
            }
        };
        self.gap = Some((gap, since));
    }

    /// Ends the gap; answers the one that ended, if any (logged as ended).
    pub fn close(&mut self) -> Option<Gap> {
        self.no_stats_polls = 0;
        self.logged = None;
        self.gap.take().map(|(g, _)| g)
    }

    /// Records what a poll came to at `now` (see [`Polled`]); answers the gap it ended, if
    /// any:
    ///
    /// 1. a failed listing is a [`Gap::Listing`] at once (`test_a_poll_opens_and_closes_gaps`);
    /// 2. [`NO_STATS_POLLS`] polls in a row judging that the upstream does not measure are a
    ///    [`Gap::NoStats`]; one poll seeing a figure ends it, and the count;
    /// 3. a listing that judged nothing ends a [`Gap::Listing`] (the listing works again) and
    ///    leaves a [`Gap::NoStats`] as it is (nothing says the upstream measures now).
    pub fn polled(&mut self, polled: Polled, now: Instant) -> Option<Gap> {
        match polled {
            Polled::Failed(what) => {
                self.no_stats_polls = 0;
                self.open(Gap::Listing(what), now);
                None
            }
            Polled::Listed(Some(true)) => self.close(),
            Polled::Listed(Some(false)) => {
                let ended = self.close_listing();
                self.no_stats_polls = self.no_stats_polls.saturating_add(1);
                if self.no_stats_polls >= NO_STATS_POLLS {
                    self.open(Gap::NoStats, now);
                }
                ended
            }
            Polled::Listed(None) => self.close_listing(),
        }
    }

    /// Ends a [`Gap::Listing`], keeping the count of polls that judged.
    fn close_listing(&mut self) -> Option<Gap> {
        if matches!(self.gap(), Some(Gap::Listing(_))) {
            let polls = self.no_stats_polls;
            let ended = self.close();
            self.no_stats_polls = polls;
            ended
        } else {
            None
        }
    }

    /// Whether to read the upstream's search threads now for a stand-in: a gap (or no measure
    /// yet) without one, not tried in the last [`GAP_LOG_EVERY`]. Marks it tried.
    pub fn wants_stand_in(&mut self, undecided: bool, now: Instant) -> bool {
        let want = (undecided || self.gap.is_some())
            && self.stand_in.is_none()
            && self
                .stand_in_tried
                .is_none_or(|at| now.saturating_duration_since(at) >= GAP_LOG_EVERY);
        if want {
            self.stand_in_tried = Some(now);
        }
        want
    }

    /// Sets the stand-in measure (read from the upstream).
    pub fn set_stand_in(&mut self, m: InFlight) {
        self.stand_in = Some(m);
    }

    /// What to log of the gap at `now`, with its text ([`log_due`]); marks it logged.
    pub fn log_now(&mut self, now: Instant) -> Option<(GapLog, String)> {
        let (gap, since) = self.gap.as_ref()?;
        let level = log_due(gap, self.stand_in.is_some(), *since, self.logged, now);
        if level == GapLog::Nothing {
            return None;
        }
        self.logged = Some(now);
        let then = match self.stand_in {
            Some(m) => format!(
                "meanwhile each search in flight counts as one of the upstream's {} search threads",
                m.search_threads
            ),
            None => "resource limits have no measure until then: groups' cpu and memory usage reads 0, and their limits neither reject nor cancel".to_string(),
        };
        Some((level, format!("{}; {then}", gap.why())))
    }
}

/// The measure in effect, from the one `decided` (`None`: not yet) and the gaps: the decided
/// one while no gap stands, else the stand-in, else `Err` with why limits have no measure.
pub fn effective(decided: Option<Measure>, gaps: &Gaps) -> Result<Measure, String> {
    match (decided, gaps.gap(), gaps.stand_in()) {
        (Some(m @ Measure::InFlight(_)), _, _) | (Some(m @ Measure::Reported), None, _) => Ok(m),
        (_, _, Some(stand_in)) => Ok(Measure::InFlight(stand_in)),
        (_, Some(gap), None) => Err(gap.why()),
        (None, None, None) => Err("the upstream has not answered yet".to_string()),
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
        assert_eq!(got.usage.len(), 2);
        assert_eq!(got.usage[&7], (15, 150));
        assert_eq!(got.usage[&8], (3, 30));
        assert_eq!(got.reports_usage, Some(true));
    }

    #[test]
    fn test_a_listing_of_searches_without_figures_says_the_upstream_does_not_measure() {
        let task = |action: &str, running_ms: u64, stats: Option<(u64, u64)>| {
            let mut t = json!({"action": action, "running_time_in_nanos": running_ms * 1_000_000,
                "headers": {"X-Opaque-Id": "sluice:gw:7"}});
            if let Some((cpu, mem)) = stats {
                t["resource_stats"] =
                    json!({"total": {"cpu_time_in_nanos": cpu, "memory_in_bytes": mem}});
            }
            t
        };
        let judge = |tasks: Vec<Value>| {
            let tasks: serde_json::Map<String, Value> = tasks
                .into_iter()
                .enumerate()
                .map(|(i, t)| (format!("a:{i}"), t))
                .collect();
            let body = json!({"nodes": {"a": {"tasks": tasks}}});
            reported_usage(body.to_string().as_bytes(), "gw").reports_usage
        };
        let search = "indices:data/read/search";
        // OpenSearch with tracking off: zeros; before 2.1: no resource_stats at all.
        assert_eq!(judge(vec![task(search, 1500, Some((0, 0)))]), Some(false));
        assert_eq!(
            judge(vec![task(
                "indices:data/read/search[phase/query]",
                1000,
                None
            )]),
            Some(false)
        );
        // Young: may still wait for a thread upstream.
        assert_eq!(judge(vec![task(search, 999, None)]), None);
        // Not a search (a by-query's parent): not tracked by OpenSearch anyway.
        assert_eq!(
            judge(vec![task("indices:data/write/delete/byquery", 5000, None)]),
            None
        );
        // One figure anywhere says it measures.
        assert_eq!(
            judge(vec![
                task(search, 5000, Some((0, 0))),
                task(search, 10, Some((1, 0)))
            ]),
            Some(true)
        );
        assert_eq!(
            judge(vec![
                task(search, 10, Some((0, 8))),
                task(search, 5000, None)
            ]),
            Some(true)
        );
        // Nothing of the gateway's listed: nothing to judge by.
        assert_eq!(judge(vec![]), None);
    }

    #[test]
    fn test_an_answer_excerpt_fits_a_header() {
        assert_eq!(excerpt(b"{\"a\":\n\t 1}"), "{\"a\": 1}");
        assert_eq!(excerpt("caf\u{e9}\r\nx".as_bytes()), "caf x");
        assert_eq!(excerpt(&[b'a'; 1000]).len(), 300);
    }

    #[test]
    fn test_a_poll_opens_and_closes_gaps() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut gaps = Gaps::default();
        // 1. A failed listing is a gap at once; another status keeps its start.
        assert_eq!(
            gaps.polled(Polled::Failed("answered 403".into()), at(0)),
            None
        );
        assert_eq!(gaps.gap(), Some(&Gap::Listing("answered 403".into())));
        gaps.polled(Polled::Failed("answered 503".into()), at(5));
        assert_eq!(gaps.gap, Some((Gap::Listing("answered 503".into()), at(0))));
        // 3. A listing that judged nothing ends it.
        assert_eq!(
            gaps.polled(Polled::Listed(None), at(6)),
            Some(Gap::Listing("answered 503".into()))
        );
        assert_eq!(gaps.gap(), None);
        // 2. Three polls in a row judging no figures are a gap; one without judgement
        // between them does not break the row, a figure does.
        gaps.polled(Polled::Listed(Some(false)), at(7));
        gaps.polled(Polled::Listed(Some(false)), at(8));
        gaps.polled(Polled::Listed(Some(true)), at(9));
        gaps.polled(Polled::Listed(Some(false)), at(10));
        gaps.polled(Polled::Listed(None), at(11));
        gaps.polled(Polled::Listed(Some(false)), at(12));
        assert_eq!(gaps.gap(), None);
        gaps.polled(Polled::Listed(Some(false)), at(13));
        assert_eq!(gaps.gap(), Some(&Gap::NoStats));
        assert_eq!(gaps.polled(Polled::Listed(None), at(14)), None);
        assert_eq!(gaps.gap(), Some(&Gap::NoStats));
        assert_eq!(
            gaps.polled(Polled::Listed(Some(true)), at(15)),
            Some(Gap::NoStats)
        );
        assert_eq!(gaps.gap(), None);
    }

    #[test]
    fn test_gaps_are_logged_once_or_every_30_s() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let listing = Gap::Listing("answered 403".into());
        // 2. A failed listing: at once, then every 30 s, with or without a stand-in.
        for stand_in in [false, true] {
            assert_eq!(
                log_due(&listing, stand_in, at(0), None, at(0)),
                GapLog::Error
            );
            assert_eq!(
                log_due(&listing, stand_in, at(0), Some(at(0)), at(29)),
                GapLog::Nothing
            );
            assert_eq!(
                log_due(&listing, stand_in, at(0), Some(at(0)), at(30)),
                GapLog::Error
            );
        }
        // 1. No figures with a stand-in: one WARN; without: an ERROR every 30 s.
        assert_eq!(
            log_due(&Gap::NoStats, true, at(0), None, at(0)),
            GapLog::Warn
        );
        assert_eq!(
            log_due(&Gap::NoStats, true, at(0), Some(at(0)), at(300)),
            GapLog::Nothing
        );
        assert_eq!(
            log_due(&Gap::NoStats, false, at(0), None, at(0)),
            GapLog::Error
        );
        assert_eq!(
            log_due(&Gap::NoStats, false, at(0), Some(at(0)), at(30)),
            GapLog::Error
        );
        // 3. Undecided: nothing for 30 s, then every 30 s.
        let undecided = Gap::Undecided("401".into());
        assert_eq!(
            log_due(&undecided, false, at(0), None, at(29)),
            GapLog::Nothing
        );
        assert_eq!(
            log_due(&undecided, false, at(0), None, at(30)),
            GapLog::Error
        );
        assert_eq!(
            log_due(&undecided, false, at(0), Some(at(30)), at(59)),
            GapLog::Nothing
        );
        assert_eq!(
            log_due(&undecided, false, at(0), Some(at(30)), at(60)),
            GapLog::Error
        );
        // Logged through `Gaps`: the text says what stands in, or that limits do nothing.
        let mut gaps = Gaps::default();
        let refused = listing_failed(Some(http::StatusCode::FORBIDDEN), "no permission");
        gaps.polled(Polled::Failed(refused), at(0));
        let (level, text) = gaps.log_now(at(0)).unwrap();
        assert_eq!(level, GapLog::Error);
        assert!(
            text.contains("cluster:monitor/tasks/lists")
                && text.contains("neither reject nor cancel"),
            "{text}"
        );
        assert_eq!(gaps.log_now(at(1)), None);
        gaps.set_stand_in(InFlight {
            cores: 2,
            search_threads: 4,
            memory_budget_bytes: 8,
        });
        let (_, text) = gaps.log_now(at(30)).unwrap();
        assert!(
            text.contains("one of the upstream's 4 search threads"),
            "{text}"
        );
    }

    #[test]
    fn test_the_measure_in_effect_is_the_stand_in_during_a_gap_else_none() {
        let m = InFlight {
            cores: 2,
            search_threads: 4,
            memory_budget_bytes: 8,
        };
        let mut gaps = Gaps::default();
        let now = Instant::now();
        assert!(matches!(
            effective(Some(Measure::Reported), &gaps),
            Ok(Measure::Reported)
        ));
        assert!(effective(None, &gaps).is_err());
        gaps.polled(Polled::Failed("answered 403".into()), now);
        let why = effective(Some(Measure::Reported), &gaps).unwrap_err();
        assert!(why.contains("403"), "{why}");
        // Decided on the in-flight measure: no gap applies.
        assert!(matches!(
            effective(Some(Measure::InFlight(m)), &gaps),
            Ok(Measure::InFlight(_))
        ));
        // A stand-in read: it acts, decided or not.
        assert!(gaps.wants_stand_in(false, now));
        assert!(!gaps.wants_stand_in(false, now + Duration::from_secs(29)));
        gaps.set_stand_in(m);
        assert!(!gaps.wants_stand_in(true, now + Duration::from_secs(60)));
        assert!(matches!(
            effective(Some(Measure::Reported), &gaps),
            Ok(Measure::InFlight(_))
        ));
        assert!(matches!(effective(None, &gaps), Ok(Measure::InFlight(_))));
        gaps.close();
        assert!(matches!(
            effective(Some(Measure::Reported), &gaps),
            Ok(Measure::Reported)
        ));
    }

    #[test]
    fn test_polls_follow_long_searches_and_sample_short_ones() {
        let ms = Duration::from_millis;
        let (refresh, sample) = (ms(100), ms(1000));
        // Nothing in flight: no poll, however long ago the last one.
        assert!(!poll_due(None, None, refresh, sample, false));
        assert!(!poll_due(None, Some(ms(5000)), refresh, sample, false));
        // A search in flight a whole refresh interval: every refresh.
        assert!(poll_due(
            Some(ms(100)),
            Some(ms(100)),
            refresh,
            sample,
            false
        ));
        assert!(poll_due(Some(ms(250)), Some(ms(0)), refresh, sample, false));
        // Only younger ones: the first poll, then one a sample interval.
        assert!(poll_due(Some(ms(3)), None, refresh, sample, false));
        assert!(!poll_due(
            Some(ms(99)),
            Some(ms(100)),
            refresh,
            sample,
            false
        ));
        assert!(!poll_due(
            Some(ms(3)),
            Some(ms(999)),
            refresh,
            sample,
            false
        ));
        assert!(poll_due(
            Some(ms(3)),
            Some(ms(1000)),
            refresh,
            sample,
            false
        ));
        // Equal intervals: every refresh, as before the sampling.
        assert!(poll_due(Some(ms(3)), Some(ms(1000)), sample, sample, false));
        // A gap: once a sample interval, however old the searches.
        assert!(!poll_due(
            Some(ms(5000)),
            Some(ms(100)),
            refresh,
            sample,
            true
        ));
        assert!(poll_due(
            Some(ms(5000)),
            Some(ms(1000)),
            refresh,
            sample,
            true
        ));
        assert!(!poll_due(None, None, refresh, sample, true));
    }

    #[test]
    fn test_a_polled_search_teaches_its_figures_at_its_last_poll() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let end = at(500);
        // Never polled, or polled before it started upstream: nothing to teach.
        let usage = crate::accounting::TaskUsage::default();
        assert_eq!(at_end(Some(Measure::Reported), &usage, start, || end), None);
        assert_eq!(at_end(None, &usage, start, || end), None);
        usage.record_at(0, 0, at(100));
        assert_eq!(at_end(Some(Measure::Reported), &usage, start, || end), None);
        // Polled twice: the figures of the later poll, at its time, not at the end.
        usage.record_at(30_000_000, 1_000, at(200));
        usage.record_at(60_000_000, 2_000, at(300));
        assert_eq!(
            at_end(Some(Measure::Reported), &usage, start, || end),
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
            at_end(Some(Measure::InFlight(m)), &usage, start, || end),
            Some((end, m.cpu_nanos(start, end), 100))
        );
    }

    #[test]
    fn test_only_a_refused_listing_names_the_permission() {
        let refused = listing_failed(Some(http::StatusCode::UNAUTHORIZED), "x");
        assert!(refused.contains("cluster:monitor/tasks/lists"), "{refused}");
        for other in [
            listing_failed(Some(http::StatusCode::SERVICE_UNAVAILABLE), "x"),
            listing_failed(None, "tcp connect error: Connection refused"),
        ] {
            assert!(!other.contains("cluster:monitor/tasks/lists"), "{other}");
        }
        assert!(listing_failed(None, "x").contains("did not answer"));
    }
}
