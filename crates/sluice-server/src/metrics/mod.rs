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
//! - Histograms have explicit buckets (never summaries). The queue wait histogram is kept by the
//!   group ([`crate::workload::stats::WaitHistogram`]) with a count and a sum per bucket, and
//!   written at scrape time as each bucket's count at its mean: the bucket counts and the sum are
//!   exact. The price: the exporter takes those observations one by one, so a scrape costs one
//!   sample per queue wait since the node started (a known cost, not measured yet).

pub mod names;
pub mod route;
pub mod snapshot;

use std::time::Duration;

use metrics::{Counter, Histogram, Key, Label, Level, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

use names::Described;

/// The metadata the recorder asks for (it does not filter on it).
const METADATA: Metadata<'static> = Metadata::new("sluice", Level::INFO, None);

/// The upper bounds of the HTTP latency buckets, in seconds: from a cached count (1 ms) to the
/// longest search a client usually waits for (30 s), about ×2.5 apart.
const HTTP_BUCKETS_SECONDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How many (route, method, status) handles [`NodeMetrics::record_http`] keeps: far more than
/// the API's routes × the methods and statuses they answer, so a real workload always hits;
/// past it (a client inventing methods), requests are still counted, through the registry's
/// own lookup, so the cache cannot grow without bound.
const HTTP_HANDLES_MAX: usize = 4096;

/// The node's recorder of HTTP requests (see the module docs).
pub struct NodeMetrics {
    events: PrometheusRecorder,
    /// The HTTP metrics' handles by route, then method and status: a request is counted with
    /// two atomic adds instead of building and hashing its labels into the registry (five
    /// strings and two lookups; a few percent of a proxied search's instructions).
    http: parking_lot::RwLock<HttpHandles>,
    /// The gateway's fast-lane counters, registered at their first use (a node that is no
    /// gateway shows none).
    lane: std::sync::OnceLock<LaneCounters>,
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
    duration: Histogram,
    by_status: Vec<(u16, Counter)>,
}

impl HttpHandles {
    fn get(&self, method: &str, route: &str, status: u16) -> Option<(&Counter, &Histogram)> {
        let m = self
            .by_route
            .get(route)?
            .iter()
            .find(|m| &*m.method == method)?;
        let (_, counter) = m.by_status.iter().find(|(s, _)| *s == status)?;
        Some((counter, &m.duration))
    }

    fn insert(
        &mut self,
        method: &str,
        route: &str,
        status: u16,
        counter: &Counter,
        duration: &Histogram,
    ) {
        if self.len >= HTTP_HANDLES_MAX {
            return;
        }
        let methods = self.by_route.entry(route.into()).or_default();
        let i = match methods.iter().position(|m| &*m.method == method) {
            Some(i) => i,
            None => {
                methods.push(MethodHandles {
                    method: method.into(),
                    duration: duration.clone(),
                    by_status: Vec::new(),
                });
                methods.len() - 1
            }
        };
        let m = &mut methods[i];
        if !m.by_status.iter().any(|(s, _)| *s == status) {
            m.by_status.push((status, counter.clone()));
            self.len += 1;
        }
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
        let events = with_buckets(
            PrometheusBuilder::new(),
            names::HTTP_REQUEST_DURATION.0,
            &HTTP_BUCKETS_SECONDS,
        )
        .build_recorder();
        let sink = Sink(&events);
        sink.describe_counter(names::HTTP_REQUESTS);
        sink.describe_histogram(names::HTTP_REQUEST_DURATION);
        NodeMetrics {
            events,
            http: parking_lot::RwLock::default(),
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
        let seconds = elapsed.as_secs_f64();
        if let Some((counter, duration)) = self.http.read().get(method, route, status) {
            // The handles are atomics: recorded under the read lock, without cloning them.
            counter.increment(1);
            duration.record(seconds);
            return;
        }
        let (counter, duration) = self.register_http(method, route, status);
        counter.increment(1);
        duration.record(seconds);
        self.http
            .write()
            .insert(method, route, status, &counter, &duration);
    }

    /// The registry's handles of the HTTP metrics for one method, route and status.
    fn register_http(&self, method: &str, route: &str, status: u16) -> (Counter, Histogram) {
        let labels = |status: Option<u16>| {
            let mut l = vec![
                Label::new(names::METHOD, method.to_string()),
                Label::new(names::ROUTE, route.to_string()),
            ];
            if let Some(s) = status {
                l.push(Label::new(names::STATUS, s.to_string()));
            }
            l
        };
        let counter = self.events.register_counter(
            &Key::from_parts(names::HTTP_REQUESTS.0, labels(Some(status))),
            &METADATA,
        );
        let duration = self.events.register_histogram(
            &Key::from_parts(names::HTTP_REQUEST_DURATION.0, labels(None)),
            &METADATA,
        );
        (counter, duration)
    }

    /// The node's metrics in the Prometheus text format: the recorded events, then the
    /// figures of `st` now.
    pub fn render(&self, st: &crate::state::AppState) -> String {
        let mut text = self.events.handle().render();
        text.push_str(&snapshot::render(st));
        text
    }
}

/// `builder` with explicit buckets for the histogram `name`.
fn with_buckets(builder: PrometheusBuilder, name: &str, bounds: &[f64]) -> PrometheusBuilder {
    // Only an empty bounds list is an error, and every caller passes a constant non-empty one;
    // were it empty, the histogram would be written as a summary rather than the node panic.
    debug_assert!(!bounds.is_empty(), "histogram buckets of {name}");
    builder
        .set_buckets_for_metric(Matcher::Full(name.to_string()), bounds)
        .unwrap_or_else(|_| PrometheusBuilder::new())
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

    fn describe_histogram(&self, (name, help): Described) {
        self.0
            .describe_histogram(name.into(), None, SharedString::const_str(help));
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

    /// Records `count` observations of `value` into the histogram `name{labels}`.
    fn observe(&self, name: Described, labels: &[Label], value: f64, count: u64) {
        self.0
            .register_histogram(&Key::from_parts(name.0, labels.to_vec()), &METADATA)
            .record_many(value, usize::try_from(count).unwrap_or(usize::MAX));
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
        let text = m.events.handle().render();
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
        let text = m.events.handle().render();
        let line = format!(
            "{}{{method=\"M4100\",route=\"/\",status=\"200\"}}",
            names::HTTP_REQUESTS.0
        );
        assert_eq!(sample(&text, &line).as_deref(), Some("2"), "{text}");
    }
}
