//! Prometheus metrics of the node (issue #16): `GET /_prometheus/metrics` in the Prometheus text
//! format, written by `metrics-exporter-prometheus`.
//!
//! - [`NodeMetrics`] (in [`crate::state::AppState`]): the node's own recorder of events that
//!   happen once and are not kept anywhere else — HTTP requests by method, route and status,
//!   and their latency histogram — fed by [`route::HttpTimer`].
//! - [`snapshot`]: the figures the node already keeps (each group's [`crate::workload::GroupStats`],
//!   duress, the search pool, the running tasks), written into a fresh recorder at every scrape.
//! - [`route`]: the endpoint (admin role when authentication is on) and the HTTP request timer.
//! - [`names`]: every metric name, label and help text.
//!
//! # Decisions
//! - No global recorder: each node records into its own [`PrometheusRecorder`], through the
//!   recorder's methods rather than the `metrics` macros, so the nodes one process runs (the
//!   in-process test clusters) never mix their values, and nothing depends on which node
//!   installed a global first.
//! - Figures the node already counts are rendered from its own stats at scrape time instead of
//!   being counted twice: `_wlm/stats` and the metrics cannot disagree, a deleted group's series
//!   disappear with it, and the request path does no metrics work for them. The two renders are
//!   concatenated; their metric names are disjoint.
//! - Each node answers for itself (Prometheus scrapes every node, which adds the `instance`
//!   label), as OpenSearch's exporter does for node figures; `_wlm/stats` stays the cluster-wide
//!   JSON view.
//! - Histograms have explicit buckets (never summaries), kept by the node as a count and a sum
//!   per bucket and written by [`histogram`], not by the exporter: its histogram handle keeps
//!   every observation until a scrape drains it (a node nobody scraped grew by a request's
//!   sample for every request, and paid a clock read and an epoch pin for each), and fed at
//!   scrape time it took the queue waits one by one. The HTTP latency histogram is a
//!   [`histogram::Buckets`] per route and method in [`NodeMetrics`]; the queue wait histogram is
//!   kept by the group ([`crate::workload::stats::WaitHistogram`]). Bucket counts and sums are
//!   exact, and a scrape costs the same however many requests the node answered.

pub mod histogram;
pub mod names;
pub mod route;
pub mod snapshot;

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Key, Label, Level, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use histogram::Buckets;
use names::Described;

/// The metadata the recorder asks for (it does not filter on it).
const METADATA: Metadata<'static> = Metadata::new("sluice", Level::INFO, None);

/// The upper bounds of the HTTP latency buckets, in microseconds: from a cached count (1 ms) to
/// the longest search a client usually waits for (30 s), about ×2.5 apart.
const HTTP_BUCKETS_MICROS: [u64; 14] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000, 30_000_000,
];

/// Microseconds in a second: the HTTP latency histogram's unit.
const MICROS_PER_SEC: f64 = 1_000_000.0;

/// The `route` (and `method`) label of the latency of requests whose route and method found
/// the handle cache full ([`HTTP_HANDLES_MAX`]): counted together rather than not at all.
pub const OVERFLOW_LABEL: &str = "_OTHER";

/// How many (route, method, status) handles [`NodeMetrics::record_http`] keeps: far more than
/// the API's routes × the methods and statuses they answer, so a real workload always hits;
/// past it (a client inventing methods), requests are still counted, through the registry's
/// own lookup, and their latency into one overflow series ([`OVERFLOW_LABEL`]), so the cache
/// cannot grow without bound.
const HTTP_HANDLES_MAX: usize = 4096;

/// The node's recorder of HTTP requests (see the module docs).
pub struct NodeMetrics {
    events: PrometheusRecorder,
    /// The HTTP metrics' handles by route, then method and status: a request is counted with
    /// three atomic adds instead of building and hashing its labels into the registry (five
    /// strings and two lookups; a few percent of a proxied search's instructions).
    http: parking_lot::RwLock<HttpHandles>,
    /// The latency of requests whose series found [`Self::http`] full.
    http_overflow: Arc<Buckets>,
    /// The gateway's fast-lane counters, registered at their first use (a node that is no
    /// gateway shows none).
    lane: std::sync::OnceLock<LaneCounters>,
}

/// The handles of one method, route and status, resolved once ([`NodeMetrics::series_ok`]):
/// a request is counted with their three atomic adds, without the cache's lock and lookup.
#[derive(Debug, Clone)]
pub struct HttpSeries {
    counter: Counter,
    duration: Arc<Buckets>,
}

impl HttpSeries {
    /// Counts one request of the series, answered in `elapsed`.
    pub fn record(&self, elapsed: Duration) {
        self.counter.increment(1);
        self.duration.record(micros(elapsed));
    }
}

/// `elapsed` in whole microseconds, the HTTP latency histogram's unit.
fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// How a gateway's connections carried requests (`crate::http::lane`).
struct LaneCounters {
    fast_lane: Counter,
    lent: Counter,
    handed_off: Counter,
}

/// What the fast lane did with a request or a connection, for [`NodeMetrics::count_lane`].
#[derive(Debug, Clone, Copy)]
pub enum LaneEvent {
    /// A request served by the fast lane.
    FastLane,
    /// A request lent to the general path.
    Lent,
    /// A connection left to the general path for good.
    HandedOff,
}

#[derive(Default)]
struct HttpHandles {
    /// Looked up on every request: foldhash, not std's SipHash (the same as the task registry).
    by_route: std::collections::HashMap<Box<str>, Vec<MethodHandles>, foldhash::fast::RandomState>,
    len: usize,
}

/// One route's handles for one method: its latency histogram and a counter per status.
struct MethodHandles {
    method: Box<str>,
    /// Shared with the [`HttpSeries`] resolved for the route and method.
    duration: Arc<Buckets>,
    by_status: Vec<(u16, Counter)>,
}

impl HttpHandles {
    fn get(&self, method: &str, route: &str, status: u16) -> Option<(&Counter, &Buckets)> {
        let m = self
            .by_route
            .get(route)?
            .iter()
            .find(|m| &*m.method == method)?;
        let (_, counter) = m.by_status.iter().find(|(s, _)| *s == status)?;
        Some((counter, &*m.duration))
    }

    /// Keeps `counter` for `method`, `route` and `status` while the cache has room; the
    /// latency histogram of `method` and `route`, `None` when they have none and the cache is
    /// full.
    fn insert(
        &mut self,
        method: &str,
        route: &str,
        status: u16,
        counter: &Counter,
    ) -> Option<&Arc<Buckets>> {
        let full = self.len >= HTTP_HANDLES_MAX;
        if full && !self.by_route.contains_key(route) {
            return None;
        }
        let methods = self.by_route.entry(route.into()).or_default();
        let i = match methods.iter().position(|m| &*m.method == method) {
            Some(i) => i,
            None if full => return None,
            None => {
                methods.push(MethodHandles {
                    method: method.into(),
                    duration: Arc::new(Buckets::new(&HTTP_BUCKETS_MICROS)),
                    by_status: Vec::new(),
                });
                methods.len() - 1
            }
        };
        let m = &mut methods[i];
        if !full && !m.by_status.iter().any(|(s, _)| *s == status) {
            m.by_status.push((status, counter.clone()));
            self.len += 1;
        }
        Some(&m.duration)
    }
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

impl Default for NodeMetrics {
    fn default() -> Self {
        NodeMetrics::new()
    }
}

impl NodeMetrics {
    /// A recorder with no values yet.
    pub fn new() -> NodeMetrics {
        let events = PrometheusBuilder::new().build_recorder();
        Sink(&events).describe_counter(names::HTTP_REQUESTS);
        NodeMetrics {
            events,
            http: parking_lot::RwLock::default(),
            http_overflow: Arc::new(Buckets::new(&HTTP_BUCKETS_MICROS)),
            lane: std::sync::OnceLock::new(),
        }
    }

    /// Counts what the gateway's fast lane did (one atomic add once registered).
    pub fn count_lane(&self, event: LaneEvent) {
        let c = self.lane.get_or_init(|| {
            let sink = Sink(&self.events);
            sink.describe_counter(names::GATEWAY_LANE_REQUESTS);
            sink.describe_counter(names::GATEWAY_HANDED_OFF);
            let requests = |path: &'static str| {
                self.events.register_counter(
                    &Key::from_parts(
                        names::GATEWAY_LANE_REQUESTS.0,
                        vec![Label::new(names::LANE_PATH, path)],
                    ),
                    &METADATA,
                )
            };
            LaneCounters {
                fast_lane: requests("fast_lane"),
                lent: requests("lent"),
                handed_off: self
                    .events
                    .register_counter(&Key::from_name(names::GATEWAY_HANDED_OFF.0), &METADATA),
            }
        });
        match event {
            LaneEvent::FastLane => c.fast_lane.increment(1),
            LaneEvent::Lent => c.lent.increment(1),
            LaneEvent::HandedOff => c.handed_off.increment(1),
        }
    }

    /// Records one answered HTTP request.
    pub fn record_http(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let us = micros(elapsed);
        if let Some((counter, duration)) = self.http.read().get(method, route, status) {
            // The handles are atomics: recorded under the read lock, without cloning them.
            counter.increment(1);
            duration.record(us);
            return;
        }
        let counter = self.register_http(method, route, status);
        counter.increment(1);
        let mut http = self.http.write();
        match http.insert(method, route, status, &counter) {
            Some(duration) => duration.record(us),
            None => self.http_overflow.record(us),
        }
    }

    /// The handles of requests answered 200 for `method` and `route`, for a caller that keeps
    /// them ([`route::PinnedSeries`]): the same series [`Self::record_http`] counts such a
    /// request in, its latency in the overflow series when the cache is full.
    pub fn series_ok(&self, method: &str, route: &str) -> HttpSeries {
        const OK: u16 = 200;
        let counter = self.register_http(method, route, OK);
        let duration = self
            .http
            .write()
            .insert(method, route, OK, &counter)
            .unwrap_or(&self.http_overflow)
            .clone();
        HttpSeries { counter, duration }
    }

    /// The registry's counter of HTTP requests for one method, route and status.
    fn register_http(&self, method: &str, route: &str, status: u16) -> Counter {
        let labels = vec![
            Label::new(names::METHOD, method.to_string()),
            Label::new(names::ROUTE, route.to_string()),
            Label::new(names::STATUS, status.to_string()),
        ];
        self.events
            .register_counter(&Key::from_parts(names::HTTP_REQUESTS.0, labels), &METADATA)
    }

    /// The node's metrics in the Prometheus text format: the recorded events, then the
    /// figures of `st` now.
    pub fn render(&self, st: &crate::state::AppState) -> String {
        let mut text = self.render_events();
        text.push_str(&snapshot::render(st));
        text
    }

    /// The recorded events: the exporter's counters, then the HTTP latency histogram.
    fn render_events(&self) -> String {
        let mut text = self.events.handle().render();
        let http = self.http.read();
        let mut series: Vec<(&str, &str, &Buckets)> = http
            .by_route
            .iter()
            .flat_map(|(route, methods)| {
                methods
                    .iter()
                    .map(move |m| (&*m.method, &**route, &*m.duration))
            })
            .collect();
        series.sort_by_key(|(method, route, _)| (*route, *method));
        if self.http_overflow.read().any(|(n, _)| n > 0) {
            series.push((OVERFLOW_LABEL, OVERFLOW_LABEL, &*self.http_overflow));
        }
        if series.is_empty() {
            return text;
        }
        let name = names::HTTP_REQUEST_DURATION;
        histogram::write_header(&mut text, name);
        for (method, route, duration) in series {
            histogram::write_series(
                &mut text,
                name.0,
                &[(names::METHOD, method), (names::ROUTE, route)],
                duration,
                MICROS_PER_SEC,
            );
        }
        text.push('\n');
        text
    }
}

/// Writes values into a recorder by name, labels and help text.
struct Sink<'r>(&'r PrometheusRecorder);

impl Sink<'_> {
    fn describe_counter(&self, (name, help): Described) {
        self.0
            .describe_counter(name.into(), None, SharedString::const_str(help));
    }

    fn describe_gauge(&self, (name, help): Described) {
        self.0
            .describe_gauge(name.into(), None, SharedString::const_str(help));
    }

    /// Sets the counter `name{labels}` to `value`.
    fn counter(&self, name: Described, labels: &[Label], value: u64) {
        self.0
            .register_counter(&Key::from_parts(name.0, labels.to_vec()), &METADATA)
            .absolute(value);
    }

    /// Sets the gauge `name{labels}` to `value`.
    fn gauge(&self, name: Described, labels: &[Label], value: f64) {
        self.0
            .register_gauge(&Key::from_parts(name.0, labels.to_vec()), &METADATA)
            .set(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, line_start: &str) -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(line_start))
            .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
    }

    #[test]
    fn test_cached_handles_count_into_the_same_series_as_the_first_request() {
        let m = NodeMetrics::new();
        let ms = Duration::from_millis(1);
        m.record_http("GET", "/{index}/_search", 200, ms);
        m.record_http("GET", "/{index}/_search", 200, ms);
        m.record_http("GET", "/{index}/_search", 404, ms);
        m.record_http("POST", "/{index}/_search", 200, ms);
        let text = m.render_events();
        let requests = names::HTTP_REQUESTS.0;
        let series = |method: &str, status: u16| {
            sample(
                &text,
                &format!(
                    "{requests}{{method=\"{method}\",route=\"/{{index}}/_search\",status=\"{status}\"}}"
                ),
            )
        };
        assert_eq!(series("GET", 200).as_deref(), Some("2"), "{text}");
        assert_eq!(series("GET", 404).as_deref(), Some("1"), "{text}");
        assert_eq!(series("POST", 200).as_deref(), Some("1"), "{text}");
        let count = format!(
            "{}_count{{method=\"GET\",route=\"/{{index}}/_search\"}}",
            names::HTTP_REQUEST_DURATION.0
        );
        assert_eq!(sample(&text, &count).as_deref(), Some("3"), "{text}");
    }

    #[test]
    fn test_the_handle_cache_stops_growing_at_its_bound_and_still_counts() {
        let m = NodeMetrics::new();
        for i in 0..HTTP_HANDLES_MAX + 10 {
            m.record_http(&format!("M{i}"), "/", 200, Duration::ZERO);
        }
        assert_eq!(m.http.read().len, HTTP_HANDLES_MAX);
        m.record_http("M4100", "/", 200, Duration::ZERO);
        m.record_http("M4100", "/elsewhere", 200, Duration::ZERO);
        assert_eq!(m.http.read().len, HTTP_HANDLES_MAX);
        let text = m.render_events();
        let line = format!(
            "{}{{method=\"M4100\",route=\"/\",status=\"200\"}}",
            names::HTTP_REQUESTS.0
        );
        assert_eq!(sample(&text, &line).as_deref(), Some("2"), "{text}");
        // Their latency, in the overflow series: the ten methods past the bound, M4100's
        // second request, and its one on a route the cache never saw.
        let duration = names::HTTP_REQUEST_DURATION.0;
        let overflow =
            format!("{duration}_count{{method=\"{OVERFLOW_LABEL}\",route=\"{OVERFLOW_LABEL}\"}}");
        assert_eq!(sample(&text, &overflow).as_deref(), Some("12"), "{text}");
        // A route and method the cache holds keeps its own series for a status it does not.
        m.record_http("M0", "/", 500, Duration::ZERO);
        let text = m.render_events();
        let m0 = format!("{duration}_count{{method=\"M0\",route=\"/\"}}");
        assert_eq!(sample(&text, &m0).as_deref(), Some("2"), "{text}");
        assert_eq!(sample(&text, &overflow).as_deref(), Some("12"), "{text}");
    }

    #[test]
    fn test_recording_a_known_series_allocates_nothing() {
        let m = NodeMetrics::new();
        // The first request of a route, method and status makes its series.
        m.record_http("POST", "/{index}/_search", 200, Duration::from_millis(2));
        m.record_http("GET", "/", 200, Duration::from_millis(2));
        let pinned = route::PinnedSeries::new(&axum::http::Method::GET, "/_search");
        pinned.start().record(&m, axum::http::StatusCode::OK);
        // jemalloc's count of this thread's allocated bytes (`crate::accounting`).
        let usage = crate::accounting::ThreadUsage::start();
        for i in 0..10_000u64 {
            let elapsed = Duration::from_micros(i * 37);
            m.record_http("POST", "/{index}/_search", 200, elapsed);
            m.record_http("GET", "/", 200, elapsed);
            pinned.start().record(&m, axum::http::StatusCode::OK);
        }
        let (_, bytes) = usage.sample();
        assert_eq!(bytes, 0, "bytes allocated while counting 30,000 requests");
    }

    #[test]
    fn test_a_pinned_series_counts_in_the_series_a_looked_up_request_does() {
        use axum::http::{Method, StatusCode};
        let m = NodeMetrics::new();
        let pinned = route::PinnedSeries::new(&Method::POST, "/{index}/_search");
        let requests = names::HTTP_REQUESTS.0;
        let duration = names::HTTP_REQUEST_DURATION.0;
        let line = |status: u16| {
            format!(
                "{requests}{{method=\"POST\",route=\"/{{index}}/_search\",status=\"{status}\"}}"
            )
        };
        let count = format!("{duration}_count{{method=\"POST\",route=\"/{{index}}/_search\"}}");
        // Nothing is made before a request is counted in it: a refusal makes no 200 series.
        pinned.start().record(&m, StatusCode::UNAUTHORIZED);
        let text = m.render_events();
        assert_eq!(sample(&text, &line(401)).as_deref(), Some("1"), "{text}");
        assert_eq!(sample(&text, &line(200)), None, "{text}");
        pinned.start().record(&m, StatusCode::OK);
        pinned.start().record(&m, StatusCode::OK);
        m.record_http("POST", "/{index}/_search", 200, Duration::from_millis(1));
        let text = m.render_events();
        assert_eq!(sample(&text, &line(200)).as_deref(), Some("3"), "{text}");
        assert_eq!(sample(&text, &count).as_deref(), Some("4"), "{text}");
        // With the cache full, a series pinned afterwards keeps its counter and its latency
        // goes to the overflow series, as a looked-up request's would.
        for i in 0..HTTP_HANDLES_MAX {
            m.record_http(&format!("M{i}"), "/", 200, Duration::ZERO);
        }
        let overflow =
            format!("{duration}_count{{method=\"{OVERFLOW_LABEL}\",route=\"{OVERFLOW_LABEL}\"}}");
        let overflowed = |text: &str| -> u64 {
            sample(text, &overflow).map_or(0, |n| n.parse().expect("a count"))
        };
        let before = overflowed(&m.render_events());
        let late = route::PinnedSeries::new(&Method::GET, "/_count");
        late.start().record(&m, StatusCode::OK);
        let text = m.render_events();
        let late_line = format!("{requests}{{method=\"GET\",route=\"/_count\",status=\"200\"}}");
        assert_eq!(sample(&text, &late_line).as_deref(), Some("1"), "{text}");
        assert_eq!(overflowed(&text), before + 1, "{text}");
    }

    #[test]
    fn test_the_latency_histogram_counts_each_request_in_its_bucket() {
        let m = NodeMetrics::new();
        for micros in [900, 1_000, 1_001, 40_000_000] {
            m.record_http("GET", "/", 200, Duration::from_micros(micros));
        }
        let text = m.render_events();
        let duration = names::HTTP_REQUEST_DURATION.0;
        let series = |le: &str| {
            sample(
                &text,
                &format!("{duration}_bucket{{method=\"GET\",route=\"/\",le=\"{le}\"}}"),
            )
        };
        assert_eq!(series("0.001").as_deref(), Some("2"), "{text}");
        assert_eq!(series("0.0025").as_deref(), Some("3"), "{text}");
        assert_eq!(series("30").as_deref(), Some("3"), "{text}");
        assert_eq!(series("+Inf").as_deref(), Some("4"), "{text}");
        let sum = sample(
            &text,
            &format!("{duration}_sum{{method=\"GET\",route=\"/\"}}"),
        );
        assert_eq!(sum.as_deref(), Some("40.002901"), "{text}");
        assert!(
            text.contains(&format!("# TYPE {duration} histogram\n")),
            "{text}"
        );
    }
}
