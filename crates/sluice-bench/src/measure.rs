//! Closed-loop search drivers, over HTTP and in-process, and the latency summary they produce.
//!
//! Each driver runs `concurrency` workers that send one request, wait for the full answer, and
//! send the next, until a deadline. Requests started during the warm-up are not recorded.
//!
//! A run's latencies are kept as a [`Sample`] (an HDR histogram, the failures and the measured
//! time), which merges with other samples of the same configuration — the throttle-overhead
//! scenario measures each configuration in several short windows and merges them — and is
//! reduced to a [`Summary`] for reports.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use serde_json::Value;

use crate::http::JSON_CONTENT_TYPE;

/// Smallest latency the histograms resolve: one microsecond.
const MIN_LATENCY_MICROS: u64 = 1;

/// Largest latency the histograms hold: one minute, twice the HTTP request timeout; anything
/// slower is recorded as one minute rather than lost.
const MAX_LATENCY_MICROS: u64 = 60_000_000;

/// Significant decimal digits of the histograms: 0.1 % error on every recorded value.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// Characters of an error answer kept for the report: enough for an OpenSearch error's `type`
/// and `reason`.
const ERROR_EXCERPT_CHARS: usize = 300;

/// Latency and throughput of one measured run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// Requests that succeeded during the measured window.
    pub num_requests: u64,
    /// Requests that failed during the measured window; they are not in the latencies.
    pub num_errors: u64,
    /// Length of the measured window, from its start until the last worker stopped.
    pub elapsed_secs: f64,
    /// Successful requests per second over the window.
    pub qps: f64,
    /// Mean latency of successful requests.
    pub mean_ms: f64,
    /// Median latency of successful requests.
    pub p50_ms: f64,
    /// 90th-percentile latency of successful requests.
    pub p90_ms: f64,
    /// 99th-percentile latency of successful requests.
    pub p99_ms: f64,
    /// Slowest successful request.
    pub max_ms: f64,
    /// The first failure, to tell a broken setup from a slow one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

/// When a run's workers start recording and when they stop sending.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Requests started before this instant are warm-up and not recorded.
    pub measure_from: Instant,
    /// No request is started at or after this instant.
    pub deadline: Instant,
}

impl Window {
    /// Returns the window that starts now, warms up for `warmup`, then measures for `duration`.
    pub fn starting_now(warmup: Duration, duration: Duration) -> Self {
        let measure_from = Instant::now() + warmup;
        Self {
            measure_from,
            deadline: measure_from + duration,
        }
    }
}

/// What one worker observed: its latencies, failures, and the first failure's text.
#[derive(Debug)]
struct WorkerTally {
    latencies: Histogram<u64>,
    num_errors: u64,
    first_error: Option<String>,
}

impl WorkerTally {
    fn new() -> Self {
        Self {
            latencies: new_histogram(),
            num_errors: 0,
            first_error: None,
        }
    }

    /// Records the outcome of a request that took `latency`.
    fn record(&mut self, outcome: std::result::Result<(), String>, latency: Duration) {
        match outcome {
            Ok(()) => {
                let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                self.latencies
                    .saturating_record(micros.max(MIN_LATENCY_MICROS));
            }
            Err(error) => {
                self.num_errors += 1;
                self.first_error.get_or_insert(error);
            }
        }
    }
}

/// Returns an empty latency histogram in microseconds.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(
        MIN_LATENCY_MICROS,
        MAX_LATENCY_MICROS,
        LATENCY_SIGNIFICANT_DIGITS,
    )
    .expect("the histogram bounds are constants that hdrhistogram accepts")
}

/// The latencies, failures and measured time of one or more runs of one configuration.
#[derive(Debug, Clone)]
pub struct Sample {
    latencies: Histogram<u64>,
    num_errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
}

impl Default for Sample {
    fn default() -> Self {
        Self {
            latencies: new_histogram(),
            num_errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
        }
    }
}

impl Sample {
    /// Merges the workers' tallies of one run that measured for `elapsed`.
    fn from_tallies(tallies: Vec<WorkerTally>, elapsed: Duration) -> Self {
        let mut sample = Sample {
            elapsed,
            ..Sample::default()
        };
        for tally in tallies {
            sample
                .latencies
                .add(&tally.latencies)
                .expect("histograms with equal bounds always merge");
            sample.num_errors += tally.num_errors;
            sample.first_error = sample.first_error.take().or(tally.first_error);
        }
        sample
    }

    /// Adds another run's requests, failures and measured time to this one.
    ///
    /// The runs are taken to have been measured one after the other, so their times add up.
    pub fn merge(&mut self, other: &Sample) {
        self.latencies
            .add(&other.latencies)
            .expect("histograms with equal bounds always merge");
        self.num_errors += other.num_errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.elapsed += other.elapsed;
    }

    /// Adds the requests and failures of a run measured at the same time as this one (another
    /// node's, another set of tags'), so the measured time is the longer of the two.
    pub fn merge_concurrent(&mut self, other: &Sample) {
        let elapsed = self.elapsed.max(other.elapsed);
        self.merge(other);
        self.elapsed = elapsed;
    }

    /// Returns the throughput and the latency mean and quantiles, in milliseconds.
    pub fn summary(&self) -> Summary {
        let millis = |micros: u64| micros as f64 / 1000.0;
        let latencies = &self.latencies;
        let num_requests = latencies.len();
        let elapsed_secs = self.elapsed.as_secs_f64();
        Summary {
            num_requests,
            num_errors: self.num_errors,
            elapsed_secs,
            qps: if elapsed_secs > 0.0 {
                num_requests as f64 / elapsed_secs
            } else {
                0.0
            },
            mean_ms: if num_requests > 0 {
                latencies.mean() / 1000.0
            } else {
                0.0
            },
            p50_ms: millis(latencies.value_at_quantile(0.50)),
            p90_ms: millis(latencies.value_at_quantile(0.90)),
            p99_ms: millis(latencies.value_at_quantile(0.99)),
            max_ms: millis(latencies.max()),
            first_error: self.first_error.clone(),
        }
    }
}

/// Merges the workers' tallies into the run's summary over `elapsed`.
fn summarize(tallies: Vec<WorkerTally>, elapsed: Duration) -> Summary {
    Sample::from_tallies(tallies, elapsed).summary()
}

/// Cuts an error answer down to [`ERROR_EXCERPT_CHARS`] characters.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(ERROR_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Drives `POST <search_url>` with the pool's bodies and `headers` from `concurrency` tokio
/// tasks, round-robin over `search_urls` (the same index on several nodes).
///
/// A response counts as a success when its status is 2xx; its body is read in full either way.
///
/// # Cancel safety
///
/// Dropping the future aborts the workers' in-flight requests, which the server sees as client
/// disconnects; nothing is recorded.
pub async fn run_http(
    client: &reqwest::Client,
    search_urls: &[reqwest::Url],
    bodies: &[Bytes],
    headers: &HeaderMap,
    concurrency: usize,
    window: Window,
) -> Sample {
    let cells = run_http_interleaved(
        client,
        search_urls,
        bodies,
        std::slice::from_ref(headers),
        concurrency,
        window,
    )
    .await;
    let mut merged = Sample::default();
    for cell in cells.iter().flatten() {
        merged.merge_concurrent(cell);
    }
    merged
}

/// Which node and which tags a worker's `i`-th request uses: `(url index, tags index)`.
///
/// Nodes go round-robin with every request; the tags change after each full turn over the
/// nodes, and each worker starts at another one. So any `num_urls × num_tags` consecutive
/// requests of one worker send each set of tags to each node exactly once: the sets of tags see
/// the same nodes at the same moments, and a difference between them is theirs, not the
/// machine's.
fn interleaved_cell(worker: usize, i: usize, num_urls: usize, num_tags: usize) -> (usize, usize) {
    (i % num_urls, (worker + i / num_urls) % num_tags)
}

/// [`run_http`] with several sets of tag headers sent in turn by every worker
/// ([`interleaved_cell`]) within the one window, each request recorded under its tags and node.
///
/// Returns one [`Sample`] per set of tags and node, `[tags][url]`, each over the whole window:
/// the cells ran at the same time, so merge them with [`Sample::merge_concurrent`].
///
/// # Cancel safety
///
/// As [`run_http`].
pub async fn run_http_interleaved(
    client: &reqwest::Client,
    search_urls: &[reqwest::Url],
    bodies: &[Bytes],
    tags: &[HeaderMap],
    concurrency: usize,
    window: Window,
) -> Vec<Vec<Sample>> {
    let (num_urls, num_tags) = (search_urls.len(), tags.len());
    assert!(
        num_urls > 0 && num_tags > 0,
        "the driver needs a node and a set of tags"
    );
    let bodies: Arc<[Bytes]> = bodies.into();
    let tags: Arc<[HeaderMap]> = tags.into();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..concurrency {
        let (client, urls, bodies, tags) = (
            client.clone(),
            search_urls.to_vec(),
            bodies.clone(),
            tags.clone(),
        );
        workers.spawn(async move {
            let mut tallies: Vec<WorkerTally> = (0..num_tags * num_urls)
                .map(|_| WorkerTally::new())
                .collect();
            // Start each worker at a different body so concurrent requests differ.
            for i in worker.. {
                let started = Instant::now();
                if started >= window.deadline {
                    break;
                }
                let body = bodies[i % bodies.len()].clone();
                let (url, tag) = interleaved_cell(worker, i, num_urls, num_tags);
                let outcome = send_search(&client, &urls[url], &tags[tag], body).await;
                if started >= window.measure_from {
                    tallies[tag * num_urls + url].record(outcome, started.elapsed());
                }
            }
            tallies
        });
    }
    // Each worker's tallies are in cell order: gather them by cell across the workers.
    let mut cells: Vec<Vec<WorkerTally>> = (0..num_tags * num_urls).map(|_| Vec::new()).collect();
    for tallies in workers.join_all().await {
        for (cell, tally) in cells.iter_mut().zip(tallies) {
            cell.push(tally);
        }
    }
    let elapsed = window.measure_from.elapsed();
    let mut samples = cells
        .into_iter()
        .map(|cell| Sample::from_tallies(cell, elapsed));
    (0..num_tags)
        .map(|_| samples.by_ref().take(num_urls).collect())
        .collect()
}

/// Drives `POST <search_url>` in bursts: `size` requests released at one instant, each from its
/// own tokio task, the next burst `gap` after the last answer of the one before, until the
/// window's deadline. Where [`run_http`] keeps `size` requests in flight all the time, this is
/// traffic that arrives all at once at an idle server, then stops.
///
/// # Cancel safety
///
/// As [`run_http`].
pub async fn run_http_bursts(
    client: &reqwest::Client,
    search_url: &reqwest::Url,
    bodies: &[Bytes],
    headers: &HeaderMap,
    size: usize,
    gap: Duration,
    window: Window,
) -> Sample {
    let mut tally = WorkerTally::new();
    let mut next_body = 0usize;
    loop {
        let started = Instant::now();
        if started >= window.deadline {
            break;
        }
        let mut burst = tokio::task::JoinSet::new();
        for _ in 0..size {
            let (client, url, headers) = (client.clone(), search_url.clone(), headers.clone());
            let body = bodies[next_body % bodies.len()].clone();
            next_body += 1;
            burst.spawn(async move {
                let sent = Instant::now();
                let outcome = send_search(&client, &url, &headers, body).await;
                (outcome, sent.elapsed())
            });
        }
        while let Some(done) = burst.join_next().await {
            if started >= window.measure_from {
                match done {
                    Ok((outcome, latency)) => tally.record(outcome, latency),
                    Err(e) => tally.record(Err(format!("burst task failed: {e}")), Duration::ZERO),
                }
            }
        }
        tokio::time::sleep(gap).await;
    }
    Sample::from_tallies(vec![tally], window.measure_from.elapsed())
}

/// Sends one search and reads its whole answer; `Err` carries what went wrong.
async fn send_search(
    client: &reqwest::Client,
    url: &reqwest::Url,
    headers: &HeaderMap,
    body: Bytes,
) -> std::result::Result<(), String> {
    let response = client
        .post(url.clone())
        .headers(headers.clone())
        .header(CONTENT_TYPE, JSON_CONTENT_TYPE)
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status();
    let answer = response
        .bytes()
        .await
        .map_err(|e| format!("reading the answer failed: {e}"))?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!(
            "status {status}: {}",
            excerpt(&String::from_utf8_lossy(&answer))
        ))
    }
}

/// Runs `search` with the pool's bodies from `concurrency` OS threads, as the no-HTTP ceiling.
///
/// `search` is the engine call; it must be safe to call from many threads at once.
pub fn run_in_process<F>(
    search: F,
    bodies: &[Value],
    concurrency: usize,
    window: Window,
) -> Result<Summary>
where
    F: Fn(&Value) -> std::result::Result<Value, String> + Sync,
{
    run_in_process_on(search, bodies, concurrency, window, &Instant::now)
}

/// [`run_in_process`] with the time read from `now` (the tests' clock, which the calls move).
fn run_in_process_on<F>(
    search: F,
    bodies: &[Value],
    concurrency: usize,
    window: Window,
    now: &(dyn Fn() -> Instant + Sync),
) -> Result<Summary>
where
    F: Fn(&Value) -> std::result::Result<Value, String> + Sync,
{
    let tallies = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..concurrency)
            .map(|worker| {
                let search = &search;
                std::thread::Builder::new()
                    .name(format!("bench-search-{worker}"))
                    .spawn_scoped(scope, move || {
                        let mut tally = WorkerTally::new();
                        for i in worker.. {
                            let started = now();
                            if started >= window.deadline {
                                break;
                            }
                            let outcome = search(&bodies[i % bodies.len()])
                                .map(drop)
                                .map_err(|e| excerpt(&e));
                            if started >= window.measure_from {
                                tally.record(outcome, now().saturating_duration_since(started));
                            }
                        }
                        tally
                    })
            })
            .collect::<std::io::Result<_>>()
            .context("could not start an in-process search thread")?;
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .map_err(|_| anyhow::anyhow!("an in-process search thread panicked"))
            })
            .collect::<Result<Vec<_>>>()
    })?;
    Ok(summarize(
        tallies,
        now().saturating_duration_since(window.measure_from),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_summary_merges_workers_and_reports_quantiles_in_millis() {
        let mut a = WorkerTally::new();
        let mut b = WorkerTally::new();
        for millis in 1..=100 {
            let tally = if millis % 2 == 0 { &mut a } else { &mut b };
            tally.record(Ok(()), Duration::from_millis(millis));
        }
        b.record(Err("status 500: boom".into()), Duration::from_millis(1));
        b.record(Err("status 503: later".into()), Duration::from_millis(1));

        let summary = summarize(vec![a, b], Duration::from_secs(2));
        assert_eq!(summary.num_requests, 100);
        assert_eq!(summary.num_errors, 2);
        assert_eq!(summary.qps, 50.0);
        assert!(
            (summary.p50_ms - 50.0).abs() < 0.1,
            "p50 {}",
            summary.p50_ms
        );
        assert!(
            (summary.mean_ms - 50.5).abs() < 0.1,
            "mean {}",
            summary.mean_ms
        );
        assert!(
            (summary.p90_ms - 90.0).abs() < 0.1,
            "p90 {}",
            summary.p90_ms
        );
        assert!(
            (summary.p99_ms - 99.0).abs() < 0.1,
            "p99 {}",
            summary.p99_ms
        );
        assert!(
            (summary.max_ms - 100.0).abs() < 0.1,
            "max {}",
            summary.max_ms
        );
        assert_eq!(summary.first_error.as_deref(), Some("status 500: boom"));
    }

    #[test]
    fn test_merged_samples_add_requests_errors_and_time() {
        let run = |millis: u64, error: Option<&str>| {
            let mut tally = WorkerTally::new();
            for _ in 0..10 {
                tally.record(Ok(()), Duration::from_millis(millis));
            }
            if let Some(error) = error {
                tally.record(Err(error.to_owned()), Duration::ZERO);
            }
            Sample::from_tallies(vec![tally], Duration::from_secs(1))
        };
        let mut merged = Sample::default();
        merged.merge(&run(2, None));
        merged.merge(&run(4, Some("status 429: first")));
        merged.merge(&run(4, Some("status 500: second")));

        let summary = merged.summary();
        assert_eq!(summary.num_requests, 30);
        assert_eq!(summary.num_errors, 2);
        assert_eq!(summary.elapsed_secs, 3.0);
        assert_eq!(summary.qps, 10.0);
        assert!((summary.mean_ms - 10.0 / 3.0).abs() < 0.01, "{summary:?}");
        assert!((summary.p50_ms - 4.0).abs() < 0.01, "{summary:?}");
        assert_eq!(summary.first_error.as_deref(), Some("status 429: first"));
    }

    #[test]
    fn test_empty_sample_summarises_to_zeros() {
        let summary = Sample::default().summary();
        assert_eq!(summary.num_requests, 0);
        assert_eq!(
            (summary.qps, summary.mean_ms, summary.p99_ms),
            (0.0, 0.0, 0.0)
        );
    }

    #[test]
    fn test_latency_beyond_the_histogram_is_clamped_not_lost() {
        let mut tally = WorkerTally::new();
        tally.record(Ok(()), Duration::from_secs(3600));
        let summary = summarize(vec![tally], Duration::from_secs(1));
        assert_eq!(summary.num_requests, 1);
        assert!(summary.max_ms >= 59_000.0, "max {}", summary.max_ms);
    }

    /// A clock for the in-process driver that moves only when a search says so: a search
    /// "takes" exactly as long as it advances it.
    struct StepClock {
        base: Instant,
        micros: std::sync::atomic::AtomicU64,
    }

    impl StepClock {
        fn new() -> StepClock {
            StepClock {
                base: Instant::now(),
                micros: std::sync::atomic::AtomicU64::new(0),
            }
        }

        fn now(&self) -> Instant {
            self.base + Duration::from_micros(self.micros.load(std::sync::atomic::Ordering::SeqCst))
        }

        fn advance(&self, by: Duration) {
            self.micros
                .fetch_add(by.as_micros() as u64, std::sync::atomic::Ordering::SeqCst);
        }

        /// The window from `warmup` to `warmup + duration` after the clock's start.
        fn window(&self, warmup: Duration, duration: Duration) -> Window {
            Window {
                measure_from: self.base + warmup,
                deadline: self.base + warmup + duration,
            }
        }
    }

    #[test]
    fn test_in_process_driver_records_only_after_warmup_and_stops_at_deadline() {
        let clock = StepClock::new();
        let calls = std::sync::atomic::AtomicU64::new(0);
        let search = |_: &Value| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            clock.advance(Duration::from_millis(1));
            Ok(Value::Null)
        };
        // Searches start at 0, 1, ... 14 ms: those before 5 ms are warm-up, none starts at 15.
        let window = clock.window(Duration::from_millis(5), Duration::from_millis(10));
        let summary =
            run_in_process_on(search, &[Value::Null], 1, window, &|| clock.now()).unwrap();

        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 15);
        assert_eq!(
            summary.num_requests, 10,
            "warm-up recorded, or a search past the deadline"
        );
        assert_eq!(summary.num_errors, 0);
        assert!(
            (summary.p50_ms - 1.0).abs() < 0.01,
            "p50 {}",
            summary.p50_ms
        );
        assert!((summary.elapsed_secs - 0.010).abs() < 1e-9, "{summary:?}");
        assert!((summary.qps - 1000.0).abs() < 1e-6, "{summary:?}");
    }

    #[test]
    fn test_in_process_driver_counts_errors_with_the_first_message() {
        let clock = StepClock::new();
        let search = |_: &Value| {
            clock.advance(Duration::from_millis(1));
            Err::<Value, _>("index_not_found_exception".to_owned())
        };
        let window = clock.window(Duration::ZERO, Duration::from_millis(3));
        let summary =
            run_in_process_on(search, &[Value::Null], 1, window, &|| clock.now()).unwrap();
        assert_eq!(summary.num_requests, 0);
        assert_eq!(summary.num_errors, 3);
        assert_eq!(
            summary.first_error.as_deref(),
            Some("index_not_found_exception")
        );
    }

    #[test]
    fn test_interleaved_cells_send_each_tag_to_each_node_once_per_turn() {
        for (num_urls, num_tags) in [(1, 1), (3, 1), (1, 3), (3, 2), (3, 3), (2, 4)] {
            let turn = num_urls * num_tags;
            for worker in 0..5 {
                for start in [0, 1, 7, 100] {
                    let mut seen: Vec<(usize, usize)> = (start..start + turn)
                        .map(|i| interleaved_cell(worker, worker + i, num_urls, num_tags))
                        .collect();
                    seen.sort_unstable();
                    seen.dedup();
                    assert_eq!(
                        seen.len(),
                        turn,
                        "{num_urls} nodes × {num_tags} tags, worker {worker}, from {start}: {seen:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn test_concurrent_merge_keeps_the_longer_time() {
        let run = |requests: u32, secs: u64| {
            let mut tally = WorkerTally::new();
            for _ in 0..requests {
                tally.record(Ok(()), Duration::from_millis(1));
            }
            Sample::from_tallies(vec![tally], Duration::from_secs(secs))
        };
        let mut merged = run(10, 2);
        merged.merge_concurrent(&run(30, 1));
        let summary = merged.summary();
        assert_eq!(summary.num_requests, 40);
        assert_eq!(summary.elapsed_secs, 2.0);
        assert_eq!(summary.qps, 20.0);
    }

    /// Two local HTTP servers stand for two nodes; each counts the searches it got by the
    /// value of their `x-tag` header and answers 429 to tag `b` on the second server.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn test_interleaved_driver_records_each_request_under_its_tags_and_node() {
        use std::collections::HashMap;
        use std::sync::Mutex;

        type Counts = Arc<Mutex<HashMap<(usize, String), u64>>>;
        let counts: Counts = Arc::default();
        let mut urls = Vec::new();
        for node in 0..2 {
            let counts = counts.clone();
            let app = axum::Router::new().route(
                "/bench/_search",
                axum::routing::post(move |headers: axum::http::HeaderMap| async move {
                    let tag = headers["x-tag"].to_str().unwrap().to_owned();
                    let refused = node == 1 && tag == "b";
                    *counts.lock().unwrap().entry((node, tag)).or_default() += 1;
                    if refused {
                        (axum::http::StatusCode::TOO_MANY_REQUESTS, "{}")
                    } else {
                        (axum::http::StatusCode::OK, "{}")
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/bench/_search", listener.local_addr().unwrap());
            urls.push(reqwest::Url::parse(&url).unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        }
        let tags: Vec<HeaderMap> = ["a", "b"]
            .iter()
            .map(|tag| {
                let mut headers = HeaderMap::new();
                headers.insert("x-tag", tag.parse().unwrap());
                headers
            })
            .collect();
        let concurrency = 4;
        // No warm-up: every request sent is recorded, so the counts must match exactly.
        let window = Window::starting_now(Duration::ZERO, Duration::from_millis(200));
        let cells = run_http_interleaved(
            &reqwest::Client::new(),
            &urls,
            &[Bytes::from_static(b"{}")],
            &tags,
            concurrency,
            window,
        )
        .await;

        let counts = counts.lock().unwrap();
        assert_eq!(cells.len(), 2, "one row of cells per set of tags");
        assert!(
            cells.iter().all(|per_node| per_node.len() == 2),
            "a cell per node"
        );
        let mut sent = Vec::new();
        for (per_node, tag) in cells.iter().zip(["a", "b"]) {
            for (node, cell) in per_node.iter().enumerate() {
                let summary = cell.summary();
                let got = counts.get(&(node, (*tag).to_owned())).copied().unwrap_or(0);
                assert_eq!(
                    summary.num_requests + summary.num_errors,
                    got,
                    "tag {tag} on node {node}: the driver recorded what the server did not get"
                );
                let refused = node == 1 && tag == "b";
                assert_eq!(summary.num_errors > 0, refused, "{tag} {node}: {summary:?}");
                assert_eq!(
                    summary.num_requests > 0,
                    !refused,
                    "{tag} {node}: {summary:?}"
                );
                sent.push(got);
            }
        }
        // Each worker sends the four cells in turn, so no cell trails another by more than
        // one request per worker.
        let (least, most) = (sent.iter().min().unwrap(), sent.iter().max().unwrap());
        assert!(
            most - least <= concurrency as u64,
            "cells unbalanced: {sent:?}"
        );
        assert!(*least > 0, "{sent:?}");
    }

    #[test]
    fn test_excerpt_cuts_long_answers_on_a_char_boundary() {
        let long = "é".repeat(ERROR_EXCERPT_CHARS + 10);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), ERROR_EXCERPT_CHARS + 1);
        assert_eq!(excerpt("short"), "short");
    }
}
