//! `sluice-bench noisy-neighbour`: two workload groups on one node (issue #6 item 6).
//!
//! - **product** (`soft`, cpu 0.6) sends cheap `term` queries at a fixed rate, open loop: a
//!   request is sent at its scheduled time whether or not earlier ones have answered, and its
//!   latency counts from that scheduled time, so a stalled node shows up in the percentiles
//!   instead of slowing the sender down (no coordinated omission).
//! - **analytics** (`enforced`, cpu 0.3 by default) runs heavy aggregations from many clients,
//!   closed loop; a client told 429 waits the `Retry-After` it was given, as a polite client
//!   does.
//!
//! Eight phases run on the same node and data: product alone (the baseline), product next to
//! analytics with `wlm.workload_group.mode: disabled`, the same with `enabled` (resource
//! enforcement) three times — with group usage measured only at each enforcement run, as
//! OpenSearch does (`wlm.workload_group.usage_refresh_interval` = the 1 s interval, no
//! estimate of unmeasured tasks), with sluice's 100 ms refresh alone, and with sluice's
//! defaults (the refresh plus `wlm.workload_group.estimate_unmeasured_tasks`) — and `enabled`
//! with analytics also throttled to `node_limit` requests in flight (enforcement plus the
//! node-tier throttle). Two more phases (issue #11 B.9) throttle analytics *and* queue it: a
//! `node_limit` matching the concurrent aggregations its cpu share sustains and a queue with
//! room for every client, so its clients wait for a slot instead of being told 429 — once with
//! analytics `enforced` (the share is still enforced by rejection and cancellation) and once
//! `soft` (the throttle bounds it; it is policed by its share only when the node is in
//! duress). Their report adds what share of the aggregations analytics' cpu share allows it
//! completed (share × cores ÷ one aggregation's cpu time, measured from solo runs). The phases
//! are interleaved in rounds, so a change
//! in the machine's background load during the run falls on every phase alike; each phase warms
//! up, then measures, and its measurements add up over the rounds. The report is product's
//! latency per phase with its ratio to the baseline, and what happened to analytics' requests.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use serde_json::{Value, json};
use sluice_datagen::{DEFAULT_START_EPOCH_MILLIS, field};

use crate::http::{HttpTarget, JSON_CONTENT_TYPE};
use crate::load::Batches;
use crate::queries::{QueryPool, QueryShape, TimeSpan};
use crate::target::SpawnedServer;

/// Highest product rate accepted: far more than two cores answer, low enough that a typo
/// cannot open tens of thousands of sockets.
const MAX_PRODUCT_RATE: u32 = 2_000;

/// Most rounds: with the longest phases, a day.
const MAX_ROUNDS: u32 = 30;

/// Most analytics clients: the same bound as the main benchmark's concurrency.
const MAX_ANALYTICS_CLIENTS: usize = crate::MAX_CONCURRENCY;

/// Largest `queue.size_per_bucket` a group accepts.
const MAX_QUEUE_SIZE: u32 = 10_000;

/// Most solo runs for the cpu time of one aggregation.
const MAX_CPU_PROBE_RUNS: u32 = 50;

/// Linux reports a process's cpu time in `/proc/<pid>/stat` in ticks of `USER_HZ`, 100 per
/// second on every architecture sluice runs on.
const USER_HZ: f64 = 100.0;

/// The `_bulk` batch size and loaders of the load step: the main benchmark's defaults.
const LOAD_BATCH_SIZE: usize = 5000;
const LOAD_LOADERS: usize = 2;

/// Longest wait, between phases, for the node to finish (or cancel) the last phase's searches.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

/// How often the node's running searches are polled while waiting for them to end.
const SETTLE_POLL: Duration = Duration::from_millis(50);

/// Latencies are recorded from 1 µs to 2 min (product requests that wait behind heavy
/// aggregations can take many seconds), with 0.1 % precision.
const MAX_LATENCY_MICROS: u64 = 120_000_000;

/// Options of the noisy-neighbour scenario.
#[derive(Debug, clap::Args)]
pub struct NoisyArgs {
    /// Server to run against; must be on this machine. Its `--index` is re-created unless
    /// `--skip-load`, and its `analytics` and `product` workload groups are replaced.
    #[arg(
        long,
        default_value = "http://127.0.0.1:9200",
        conflicts_with = "spawn"
    )]
    url: Url,

    /// Start `sluice serve` on an ephemeral port with a data dir under --data-dir instead.
    #[arg(long)]
    spawn: bool,

    /// The `sluice` binary --spawn starts [default: `sluice` next to this binary].
    #[arg(long, requires = "spawn")]
    sluice_bin: Option<PathBuf>,

    /// Directory for the spawned server's data and log [default: a temporary directory].
    #[arg(long)]
    data_dir: Option<PathBuf>,

    /// Documents to generate and load.
    #[arg(long, default_value_t = 1_000_000)]
    docs: u64,

    /// Seed of the documents and of product's query bodies.
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Do not load: use the index as a previous run with the same --docs and --seed left it.
    #[arg(long)]
    skip_load: bool,

    /// Index the documents are loaded into and searched.
    #[arg(long, default_value = "logs")]
    index: String,

    /// Seconds each phase is measured per round, after its warm-up.
    #[arg(long, default_value_t = 8)]
    phase_secs: u64,

    /// Rounds of the eight phases.
    #[arg(long, default_value_t = 3)]
    rounds: u32,

    /// Seconds of unrecorded warm-up at the start of each phase.
    #[arg(long, default_value_t = 2)]
    warmup_secs: u64,

    /// Product requests per second (open loop).
    #[arg(long, default_value_t = 50)]
    product_rate: u32,

    /// Concurrent analytics clients (closed loop).
    #[arg(long, default_value_t = 4)]
    analytics_clients: usize,

    /// Analytics' `throttling.node_limit` in the last phase.
    #[arg(long, default_value_t = 2)]
    analytics_node_limit: u32,

    /// The analytics group's cpu limit.
    #[arg(long, default_value_t = 0.3)]
    analytics_cpu: f64,

    /// The product group's cpu limit.
    #[arg(long, default_value_t = 0.6)]
    product_cpu: f64,

    /// Analytics' `throttling.node_limit` in the queued phases: the concurrent aggregations
    /// its cpu share sustains, share × cores ÷ the cores one aggregation keeps busy (0.3 × 2
    /// ÷ 1 = 0.6, rounded up to 1).
    #[arg(long, default_value_t = 1)]
    queued_node_limit: u32,

    /// Analytics' `queue.size_per_bucket` in the queued phases: room for every analytics
    /// client, so none is turned away.
    #[arg(long, default_value_t = 64)]
    queue_size: u32,

    /// Solo runs of the analytics aggregation whose server cpu time is averaged into the
    /// cpu time of one aggregation (spawned servers; a `--url` server uses the wall time).
    #[arg(long, default_value_t = 5)]
    cpu_probe_runs: u32,
}

impl NoisyArgs {
    fn validate(&self) -> Result<()> {
        if self.docs == 0 || self.docs > crate::MAX_DOCS {
            bail!(
                "--docs must be between 1 and {}, got {}",
                crate::MAX_DOCS,
                self.docs
            );
        }
        if self.phase_secs == 0 || self.phase_secs > crate::MAX_DURATION_SECS {
            bail!(
                "--phase-secs must be between 1 and {}, got {}",
                crate::MAX_DURATION_SECS,
                self.phase_secs
            );
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            bail!(
                "--rounds must be between 1 and {MAX_ROUNDS}, got {}",
                self.rounds
            );
        }
        if self.analytics_node_limit == 0 {
            bail!("--analytics-node-limit must be at least 1, got 0");
        }
        if self.queued_node_limit == 0 {
            bail!("--queued-node-limit must be at least 1, got 0");
        }
        if self.queue_size == 0 || self.queue_size > MAX_QUEUE_SIZE {
            bail!(
                "--queue-size must be between 1 and {MAX_QUEUE_SIZE}, got {}",
                self.queue_size
            );
        }
        if self.cpu_probe_runs == 0 || self.cpu_probe_runs > MAX_CPU_PROBE_RUNS {
            bail!(
                "--cpu-probe-runs must be between 1 and {MAX_CPU_PROBE_RUNS}, got {}",
                self.cpu_probe_runs
            );
        }
        if self.warmup_secs > crate::MAX_DURATION_SECS {
            bail!(
                "--warmup-secs must be at most {}, got {}",
                crate::MAX_DURATION_SECS,
                self.warmup_secs
            );
        }
        if self.product_rate == 0 || self.product_rate > MAX_PRODUCT_RATE {
            bail!(
                "--product-rate must be between 1 and {MAX_PRODUCT_RATE}, got {}",
                self.product_rate
            );
        }
        if self.analytics_clients == 0 || self.analytics_clients > MAX_ANALYTICS_CLIENTS {
            bail!(
                "--analytics-clients must be between 1 and {MAX_ANALYTICS_CLIENTS}, got {}",
                self.analytics_clients
            );
        }
        for (flag, v) in [
            ("--analytics-cpu", self.analytics_cpu),
            ("--product-cpu", self.product_cpu),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                bail!("{flag} must be in (0, 1], got {v}");
            }
        }
        if self.analytics_cpu + self.product_cpu > 1.0 {
            bail!(
                "--analytics-cpu + --product-cpu must be at most 1 (workload groups share the \
                 node), got {}",
                self.analytics_cpu + self.product_cpu
            );
        }
        if !self.spawn {
            crate::target::check_loopback(&self.url)?;
        }
        Ok(())
    }
}

/// One phase of the scenario.
#[derive(Debug, Clone, Copy)]
struct Phase {
    name: &'static str,
    mode: &'static str,
    analytics: bool,
    throttled: bool,
    /// `wlm.workload_group.usage_refresh_interval` in ms; `None` leaves the default.
    usage_refresh_ms: Option<u64>,
    /// `wlm.workload_group.estimate_unmeasured_tasks` (the default is `true`).
    estimate: bool,
    /// Analytics throttled to `--queued-node-limit` with a `--queue-size` queue, in this
    /// resiliency mode, instead of its `enforced` default.
    queued: Option<&'static str>,
}

/// Usage measured only once per enforcement run (the 1 s default), as OpenSearch measures it.
const ONCE_PER_RUN_MS: u64 = 1000;

const PHASES: [Phase; 8] = [
    Phase {
        name: "baseline: product alone",
        mode: "disabled",
        analytics: false,
        throttled: false,
        usage_refresh_ms: None,
        estimate: true,
        queued: None,
    },
    Phase {
        name: "product + analytics",
        mode: "disabled",
        analytics: true,
        throttled: false,
        usage_refresh_ms: None,
        estimate: true,
        queued: None,
    },
    Phase {
        name: "product + analytics, usage measured once per run (OpenSearch)",
        mode: "enabled",
        analytics: true,
        throttled: false,
        usage_refresh_ms: Some(ONCE_PER_RUN_MS),
        estimate: false,
        queued: None,
    },
    Phase {
        name: "product + analytics, usage refreshed every 100 ms, no estimate",
        mode: "enabled",
        analytics: true,
        throttled: false,
        usage_refresh_ms: None,
        estimate: false,
        queued: None,
    },
    Phase {
        name: "product + analytics",
        mode: "enabled",
        analytics: true,
        throttled: false,
        usage_refresh_ms: None,
        estimate: true,
        queued: None,
    },
    Phase {
        name: "product + analytics, analytics node_limit",
        mode: "enabled",
        analytics: true,
        throttled: true,
        usage_refresh_ms: None,
        estimate: true,
        queued: None,
    },
    Phase {
        name: "product + analytics, analytics enforced, node_limit + queue",
        mode: "enabled",
        analytics: true,
        throttled: true,
        usage_refresh_ms: None,
        estimate: true,
        queued: Some("enforced"),
    },
    Phase {
        name: "product + analytics, analytics soft, node_limit + queue",
        mode: "enabled",
        analytics: true,
        throttled: true,
        usage_refresh_ms: None,
        estimate: true,
        queued: Some("soft"),
    },
];

/// Product's latencies in one phase.
#[derive(Debug)]
struct ProductResult {
    latencies: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl ProductResult {
    fn new() -> ProductResult {
        ProductResult {
            latencies: Histogram::new_with_bounds(1, MAX_LATENCY_MICROS, 3)
                .expect("constant bounds hdrhistogram accepts"),
            errors: 0,
            first_error: None,
        }
    }

    fn merge(&mut self, o: ProductResult) {
        self.latencies
            .add(&o.latencies)
            .expect("histograms with equal bounds merge");
        self.errors += o.errors;
        self.first_error = self.first_error.take().or(o.first_error);
    }

    fn ms(&self, q: f64) -> f64 {
        self.latencies.value_at_quantile(q) as f64 / 1000.0
    }
}

/// What happened to analytics' requests in one phase.
#[derive(Debug, Default)]
struct AnalyticsResult {
    completed: u64,
    /// Completions whose answer arrived inside the measured window, whenever they started:
    /// the steady rate the share is compared with.
    ended_in_window: u64,
    cancelled: u64,
    rejected: u64,
    other: u64,
    first_other: Option<String>,
}

impl AnalyticsResult {
    fn merge(&mut self, o: AnalyticsResult) {
        self.completed += o.completed;
        self.ended_in_window += o.ended_in_window;
        self.cancelled += o.cancelled;
        self.rejected += o.rejected;
        self.other += o.other;
        self.first_other = self.first_other.take().or(o.first_other);
    }
}

/// The analytics group's counters over a phase, from `_wlm/stats`.
#[derive(Debug, Default)]
struct GroupCounters {
    cancellations: u64,
    rejections: u64,
    throttled: u64,
    queued: u64,
    queue_wait_count: u64,
    queue_wait_millis: u64,
    /// `queued_current` after the phase settled (a sum over rounds; must stay 0).
    left_queued: u64,
}

/// A phase's measurements, added up over the rounds.
#[derive(Debug)]
struct PhaseResult {
    phase: Phase,
    product: ProductResult,
    analytics: AnalyticsResult,
    counters: GroupCounters,
}

/// Runs the scenario and prints its tables.
pub fn main(args: &NoisyArgs) -> Result<()> {
    args.validate()?;
    let (data_root, _temp) = match &args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("could not create --data-dir {}", dir.display()))?;
            (dir.clone(), None)
        }
        None => {
            let temp = tempfile::Builder::new()
                .prefix("sluice-noisy-")
                .tempdir()
                .context("could not create a temporary data dir")?;
            (temp.path().to_owned(), Some(temp))
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("could not start the tokio runtime")?;
    runtime.block_on(run(args, &data_root))
}

async fn run(args: &NoisyArgs, data_root: &std::path::Path) -> Result<()> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .context("could not build the HTTP client")?;
    let (base_url, _, server) = crate::target::spawn_or_connect(
        &client,
        args.spawn,
        args.sluice_bin.as_deref(),
        &args.url,
        data_root,
    )
    .await?;
    let target = HttpTarget {
        client: client.clone(),
        base_url: base_url.clone(),
        index: args.index.clone(),
    };
    if !args.skip_load {
        target.recreate_index().await?;
        eprintln!("loading {} documents…", args.docs);
        let batches = Batches::new(
            args.seed,
            DEFAULT_START_EPOCH_MILLIS,
            args.docs,
            LOAD_BATCH_SIZE,
        );
        let took = target.load(batches, LOAD_LOADERS).await?;
        target.refresh().await?;
        eprintln!("loaded in {:.1} s", took.as_secs_f64());
    }
    let api = Api {
        client: client.clone(),
        base: base_url.clone(),
    };
    let analytics_id = api
        .replace_group(json!({"name": "analytics", "resiliency_mode": "enforced",
                              "resource_limits": {"cpu": args.analytics_cpu}}))
        .await?;
    let product_id = api
        .replace_group(json!({"name": "product", "resiliency_mode": "soft",
                              "resource_limits": {"cpu": args.product_cpu}}))
        .await?;
    let heavy = Bytes::from(heavy_aggregation().to_string());
    let span = TimeSpan::of_generated(DEFAULT_START_EPOCH_MILLIS, args.docs);
    let product_bodies = QueryPool::new(QueryShape::Term, args.seed, span).encoded;
    let search_url = target.search_url();

    // The first run warms the caches; the second is the figure reported.
    time_one(&client, &search_url, &heavy, &analytics_id).await?;
    let probe = time_one(&client, &search_url, &heavy, &analytics_id).await?;
    eprintln!(
        "one analytics aggregation alone takes {:.0} ms",
        probe.as_secs_f64() * 1000.0
    );
    let cpu = aggregation_cpu(
        args,
        server.as_ref().and_then(SpawnedServer::pid),
        &client,
        &search_url,
        &heavy,
        &analytics_id,
    )
    .await?;
    eprintln!(
        "one analytics aggregation uses {:.0} ms of cpu ({})",
        cpu.seconds * 1000.0,
        cpu.source
    );

    let mut results: Vec<PhaseResult> = PHASES
        .iter()
        .map(|&phase| PhaseResult {
            phase,
            product: ProductResult::new(),
            analytics: AnalyticsResult::default(),
            counters: GroupCounters::default(),
        })
        .collect();
    for round in 1..=args.rounds {
        for result in &mut results {
            let phase = result.phase;
            api.update_group("analytics", analytics_settings(args, &phase))
                .await?;
            api.set_mode(phase.mode, phase.usage_refresh_ms, phase.estimate)
                .await?;
            eprintln!(
                "round {round}/{}: {} (mode {})…",
                args.rounds, phase.name, phase.mode
            );
            let measure_from = Instant::now() + Duration::from_secs(args.warmup_secs);
            let deadline = measure_from + Duration::from_secs(args.phase_secs);
            let before = api.counters(&analytics_id).await?;
            let mut analytics = tokio::task::JoinSet::new();
            if phase.analytics {
                for _ in 0..args.analytics_clients {
                    analytics.spawn(analytics_client(
                        client.clone(),
                        search_url.clone(),
                        heavy.clone(),
                        analytics_id.clone(),
                        measure_from,
                        deadline,
                    ));
                }
            }
            let product = product_load(
                &client,
                &search_url,
                &product_bodies,
                &product_id,
                args.product_rate,
                measure_from,
                deadline,
            )
            .await;
            result.product.merge(product);
            for r in analytics.join_all().await {
                result.analytics.merge(r);
            }
            let after = api.counters(&analytics_id).await?;
            result.counters.cancellations += after.cancellations - before.cancellations;
            result.counters.rejections += after.rejections - before.rejections;
            result.counters.throttled += after.throttled - before.throttled;
            // The next phase starts on an idle node: no search of this one still holds a
            // thread (the enforcement loop's 100 ms usage refresh then sees it idle during
            // the next phase's warm-up).
            api.wait_until_no_search_runs().await?;
            let settled = api.counters(&analytics_id).await?;
            let c = &mut result.counters;
            c.queued += settled.queued - before.queued;
            c.queue_wait_count += settled.queue_wait_count - before.queue_wait_count;
            c.queue_wait_millis += settled.queue_wait_millis - before.queue_wait_millis;
            c.left_queued += settled.left_queued;
        }
    }
    api.update_group(
        "analytics",
        json!({"resiliency_mode": "enforced", "throttling": {}, "queue": {}}),
    )
    .await?;
    api.reset_mode().await?;
    print!("{}", render(args, probe, &cpu, &results));
    if let Some(server) = server {
        server.stop().await?;
    }
    Ok(())
}

/// The analytics aggregation: per-user and per-host statistics over every document, a
/// per-minute histogram with a per-service breakdown, and distinct users and hosts — about
/// 0.4 s of one core on a million documents, nearly all of it in the collection loop, which
/// samples the task's CPU and checks its cancellation flag as it goes.
fn heavy_aggregation() -> Value {
    let stats = |f: &str| json!({"stats": {"field": f}});
    json!({
        "size": 0,
        "track_total_hits": true,
        "aggs": {
            "per_user": {
                "terms": {"field": field::USER, "size": 5000},
                "aggs": {
                    "latency": stats(field::LATENCY_MS),
                    "bytes": stats(field::BYTES),
                    "status": stats(field::STATUS)
                }
            },
            "per_host": {
                "terms": {"field": field::HOST, "size": 1000},
                "aggs": {"latency": stats(field::LATENCY_MS), "bytes": stats(field::BYTES)}
            },
            "per_minute": {
                "date_histogram": {"field": field::TIMESTAMP, "fixed_interval": "1m"},
                "aggs": {
                    "latency": stats(field::LATENCY_MS),
                    "per_service": {
                        "terms": {"field": field::SERVICE, "size": 20},
                        "aggs": {"latency": {"avg": {"field": field::LATENCY_MS}}}
                    }
                }
            },
            "users": {"cardinality": {"field": field::USER}},
            "hosts": {"cardinality": {"field": field::HOST}}
        }
    })
}

/// The admin calls the scenario makes.
struct Api {
    client: reqwest::Client,
    base: Url,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value)> {
        let url = self
            .base
            .join(path)
            .expect("constant paths make valid URLs");
        let mut rb = self.client.request(method.clone(), url.clone());
        if let Some(b) = body {
            rb = rb
                .header(CONTENT_TYPE, JSON_CONTENT_TYPE)
                .body(b.to_string());
        }
        let resp = rb
            .send()
            .await
            .with_context(|| format!("{method} {url} failed"))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// Deletes the group named in `body` if it exists, creates it, and returns its id.
    async fn replace_group(&self, body: Value) -> Result<String> {
        let name = body["name"].as_str().expect("a name").to_owned();
        let path = format!("_wlm/workload_group/{name}");
        let (status, _) = self.call(reqwest::Method::GET, &path, None).await?;
        if status == 200 {
            let (status, answer) = self.call(reqwest::Method::DELETE, &path, None).await?;
            if status != 200 {
                bail!("DELETE {path} answered {status}: {answer}");
            }
        }
        let (status, answer) = self
            .call(reqwest::Method::PUT, "_wlm/workload_group", Some(body))
            .await?;
        if status != 200 {
            bail!("creating workload group {name} answered {status}: {answer}");
        }
        answer["_id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no _id in {answer}"))
    }

    /// Updates the group `name` with `body`.
    async fn update_group(&self, name: &str, body: Value) -> Result<()> {
        let path = format!("_wlm/workload_group/{name}");
        let (status, answer) = self.call(reqwest::Method::PUT, &path, Some(body)).await?;
        if status != 200 {
            bail!("updating workload group {name} answered {status}: {answer}");
        }
        Ok(())
    }

    /// Sets the WLM mode, the usage refresh interval (`None`: the default) and whether
    /// admission estimates unmeasured tasks.
    async fn set_mode(
        &self,
        mode: &str,
        usage_refresh_ms: Option<u64>,
        estimate: bool,
    ) -> Result<()> {
        self.put_mode(json!(mode), json!(usage_refresh_ms), json!(estimate))
            .await
    }

    async fn reset_mode(&self) -> Result<()> {
        self.put_mode(Value::Null, Value::Null, Value::Null).await
    }

    async fn put_mode(&self, mode: Value, usage_refresh_ms: Value, estimate: Value) -> Result<()> {
        let body = json!({"persistent": {
            "wlm.workload_group.mode": mode,
            "wlm.workload_group.usage_refresh_interval": usage_refresh_ms,
            "wlm.workload_group.estimate_unmeasured_tasks": estimate,
        }});
        let (status, answer) = self
            .call(reqwest::Method::PUT, "_cluster/settings", Some(body))
            .await?;
        if status != 200 {
            bail!(
                "setting wlm.workload_group.mode to {mode} and usage_refresh_interval to \
                 {usage_refresh_ms} answered {status}: {answer}"
            );
        }
        Ok(())
    }

    /// Polls `_tasks` until the node runs no search, failing after [`SETTLE_TIMEOUT`].
    async fn wait_until_no_search_runs(&self) -> Result<()> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let mut poll = tokio::time::interval(SETTLE_POLL);
        loop {
            poll.tick().await;
            let (status, answer) = self
                .call(reqwest::Method::GET, "_tasks?actions=*search*", None)
                .await?;
            if status != 200 {
                bail!("GET _tasks answered {status}: {answer}");
            }
            let running = answer["nodes"]
                .as_object()
                .into_iter()
                .flat_map(|n| n.values())
                .filter_map(|n| n["tasks"].as_object())
                .map(|t| t.len())
                .sum::<usize>();
            if running == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{running} searches still ran {} s after their phase ended",
                    SETTLE_TIMEOUT.as_secs()
                );
            }
        }
    }

    async fn counters(&self, group_id: &str) -> Result<GroupCounters> {
        let path = format!("_wlm/stats/{group_id}");
        let (status, answer) = self.call(reqwest::Method::GET, &path, None).await?;
        if status != 200 {
            bail!("GET {path} answered {status}: {answer}");
        }
        let group = answer
            .as_object()
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(|(k, _)| *k != "_nodes" && *k != "cluster_name")
            .map(|(_, n)| &n["workload_groups"][group_id])
            .next()
            .with_context(|| format!("no node in {answer}"))?;
        Ok(GroupCounters {
            cancellations: group["total_cancellations"].as_u64().unwrap_or(0),
            rejections: group["total_rejections"].as_u64().unwrap_or(0),
            throttled: group["total_throttled"].as_u64().unwrap_or(0),
            queued: group["total_queued"].as_u64().unwrap_or(0),
            queue_wait_count: group["queue_wait_count"].as_u64().unwrap_or(0),
            queue_wait_millis: group["total_queue_wait_millis"].as_u64().unwrap_or(0),
            left_queued: group["queued_current"].as_u64().unwrap_or(0),
        })
    }
}

/// The analytics group's settings in `phase`: `enforced` without throttle or queue, throttled
/// to `--analytics-node-limit`, or (queued phases) in the phase's resiliency mode with
/// `--queued-node-limit` and a `--queue-size` queue.
fn analytics_settings(args: &NoisyArgs, phase: &Phase) -> Value {
    match phase.queued {
        Some(resiliency) => json!({
            "resiliency_mode": resiliency,
            "throttling": {"attribute": "group", "node_limit": args.queued_node_limit},
            "queue": {"size_per_bucket": args.queue_size},
        }),
        None if phase.throttled => json!({
            "resiliency_mode": "enforced",
            "throttling": {"attribute": "group", "node_limit": args.analytics_node_limit},
            "queue": {},
        }),
        None => json!({"resiliency_mode": "enforced", "throttling": {}, "queue": {}}),
    }
}

/// The cpu time of one analytics aggregation, and how it was measured.
#[derive(Debug)]
struct AggregationCpu {
    seconds: f64,
    source: String,
}

/// Measures the cpu time of one analytics aggregation: the server process's cpu time
/// (`/proc/<pid>/stat`, all threads) over `--cpu-probe-runs` solo runs, divided by the runs;
/// without a pid (a `--url` server) or `/proc`, their mean wall time (the aggregation runs on
/// one thread, so wall time bounds its cpu time from above).
async fn aggregation_cpu(
    args: &NoisyArgs,
    pid: Option<u32>,
    client: &reqwest::Client,
    url: &Url,
    body: &Bytes,
    group: &str,
) -> Result<AggregationCpu> {
    let cpu_before = pid.and_then(process_cpu_seconds);
    let started = Instant::now();
    for _ in 0..args.cpu_probe_runs {
        time_one(client, url, body, group).await?;
    }
    let wall = started.elapsed().as_secs_f64() / f64::from(args.cpu_probe_runs);
    let cpu_after = pid.and_then(process_cpu_seconds);
    Ok(match (cpu_before, cpu_after) {
        (Some(a), Some(b)) if b > a => AggregationCpu {
            seconds: (b - a) / f64::from(args.cpu_probe_runs),
            source: format!(
                "server process cpu time over {} solo runs, /proc/<pid>/stat; wall {:.0} ms each",
                args.cpu_probe_runs,
                wall * 1000.0
            ),
        },
        _ => AggregationCpu {
            seconds: wall,
            source: format!(
                "mean wall time of {} solo runs (no server pid to read cpu time from)",
                args.cpu_probe_runs
            ),
        },
    })
}

/// The cpu time (user + system, all threads) of process `pid` so far, in seconds.
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may contain spaces: fields are counted after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of stat(5), utime 14, stime 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// Runs one search tagged with `group` and returns how long it took.
async fn time_one(
    client: &reqwest::Client,
    url: &Url,
    body: &Bytes,
    group: &str,
) -> Result<Duration> {
    let started = Instant::now();
    let resp = client
        .post(url.clone())
        .header(CONTENT_TYPE, JSON_CONTENT_TYPE)
        .header("workloadGroupId", group)
        .body(body.clone())
        .send()
        .await
        .with_context(|| format!("POST {url} failed"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("the analytics aggregation answered {status}: {text}");
    }
    Ok(started.elapsed())
}

/// One closed-loop analytics client: heavy aggregations back to back until `deadline`, waiting
/// `Retry-After` after a 429. Requests started before `measure_from` are not counted.
async fn analytics_client(
    client: reqwest::Client,
    url: Url,
    body: Bytes,
    group: String,
    measure_from: Instant,
    deadline: Instant,
) -> AnalyticsResult {
    let mut tally = AnalyticsResult::default();
    loop {
        let started = Instant::now();
        if started >= deadline {
            return tally;
        }
        let counted = started >= measure_from;
        let resp = client
            .post(url.clone())
            .header(CONTENT_TYPE, JSON_CONTENT_TYPE)
            .header("workloadGroupId", &group)
            .body(body.clone())
            .send()
            .await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                if counted {
                    tally.other += 1;
                    tally.first_other.get_or_insert(e.to_string());
                }
                continue;
            }
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let text = resp.text().await.unwrap_or_default();
        let ended = Instant::now();
        if status == 200 && ended >= measure_from && ended <= deadline {
            tally.ended_in_window += 1;
        }
        if counted {
            match status {
                200 => tally.completed += 1,
                429 => tally.rejected += 1,
                500 if text.contains("task_cancelled_exception") => tally.cancelled += 1,
                _ => {
                    tally.other += 1;
                    tally
                        .first_other
                        .get_or_insert_with(|| format!("{status}: {}", excerpt(&text)));
                }
            }
        }
        if status == 429 {
            let wait = Duration::from_secs(retry_after.unwrap_or(1));
            let until = (Instant::now() + wait).min(deadline);
            tokio::time::sleep_until(until.into()).await;
        }
    }
}

/// Product's open-loop load: one request every `1 / rate` s from now until `deadline`, each
/// sent at its scheduled time on its own task; latency counts from the scheduled time.
/// Requests scheduled before `measure_from` are not recorded.
async fn product_load(
    client: &reqwest::Client,
    url: &Url,
    bodies: &[Bytes],
    group: &str,
    rate: u32,
    measure_from: Instant,
    deadline: Instant,
) -> ProductResult {
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut requests = tokio::task::JoinSet::new();
    for i in 0.. {
        let scheduled = ticker.tick().await.into_std();
        if scheduled >= deadline {
            break;
        }
        let (client, url, group) = (client.clone(), url.clone(), group.to_owned());
        let body = bodies[i % bodies.len()].clone();
        requests.spawn(async move {
            let resp = client
                .post(url)
                .header(CONTENT_TYPE, JSON_CONTENT_TYPE)
                .header("workloadGroupId", group)
                .body(body)
                .send()
                .await;
            let outcome = match resp {
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    if status.is_success() {
                        Ok(())
                    } else {
                        Err(format!("{status}: {}", excerpt(&text)))
                    }
                }
                Err(e) => Err(e.to_string()),
            };
            (scheduled, scheduled.elapsed(), outcome)
        });
    }
    let mut result = ProductResult::new();
    for (scheduled, latency, outcome) in requests.join_all().await {
        if scheduled < measure_from {
            continue;
        }
        match outcome {
            Ok(()) => {
                let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                result.latencies.saturating_record(micros.max(1));
            }
            Err(e) => {
                result.errors += 1;
                result.first_error.get_or_insert(e);
            }
        }
    }
    result
}

fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

/// Renders the run's settings and its two tables as Markdown.
fn render(
    args: &NoisyArgs,
    probe: Duration,
    cpu: &AggregationCpu,
    results: &[PhaseResult],
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = writeln!(
        out,
        "- {} documents (seed {}), {} cores; product: `soft`, cpu {}, `term` queries at {}/s \
         open loop; analytics: `enforced`, cpu {}, {} closed-loop clients of one heavy \
         aggregation ({:.0} ms alone), waiting `Retry-After` after a 429",
        args.docs,
        args.seed,
        cores,
        args.product_cpu,
        args.product_rate,
        args.analytics_cpu,
        args.analytics_clients,
        probe.as_secs_f64() * 1000.0
    );
    let _ = writeln!(
        out,
        "- {} rounds of the {} phases, interleaved; each phase {} s warm-up, then {} s \
         measured; \"analytics node_limit\": analytics `enforced`, `throttling.node_limit` {}; \
         \"node_limit + queue\": analytics in the resiliency mode named, `throttling: \
         {{attribute: group, node_limit: {}}}`, `queue: {{size_per_bucket: {}}}`, cpu {} \
         unchanged",
        args.rounds,
        PHASES.len(),
        args.warmup_secs,
        args.phase_secs,
        args.analytics_node_limit,
        args.queued_node_limit,
        args.queue_size,
        args.analytics_cpu
    );
    let window_secs = (args.phase_secs * u64::from(args.rounds)) as f64;
    let per_second = args.analytics_cpu * cores as f64 / cpu.seconds;
    let allowed = per_second * window_secs;
    let _ = writeln!(
        out,
        "- one aggregation uses {:.0} ms of cpu ({}); analytics' share allows share × cores ÷ \
         cpu = {} × {} ÷ {:.3} s = {:.2} aggregations/s, {:.0} in the {:.0} s measured per \
         phase\n",
        cpu.seconds * 1000.0,
        cpu.source,
        args.analytics_cpu,
        cores,
        cpu.seconds,
        per_second,
        allowed,
        window_secs
    );
    let baseline = results.first().map(|r| &r.product);
    let ratio = |v: f64, base: f64| {
        if base > 0.0 {
            format!("{:.1}×", v / base)
        } else {
            "-".to_owned()
        }
    };
    let _ = writeln!(out, "Product latency (ms, from the scheduled send time):\n");
    let _ = writeln!(
        out,
        "| phase | wlm mode | requests | errors | p50 | p90 | p99 | max | p50 vs baseline | p90 vs baseline | p99 vs baseline |"
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in results {
        let p = &r.product;
        let cell = |q: f64| baseline.map_or("-".to_owned(), |b| ratio(p.ms(q), b.ms(q)));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
            r.phase.name,
            r.phase.mode,
            p.latencies.len(),
            p.errors,
            p.ms(0.5),
            p.ms(0.9),
            p.ms(0.99),
            p.latencies.max() as f64 / 1000.0,
            cell(0.5),
            cell(0.9),
            cell(0.99),
        );
    }
    let _ = writeln!(out, "\nAnalytics requests (measured windows):\n");
    let _ = writeln!(
        out,
        "| phase | wlm mode | completed | cancelled (task_cancelled) | rejected (429) | other errors | total_cancellations | total_rejections | total_throttled | ended in window | of share's {allowed:.0} | total_queued | mean queue wait ms | queued_current after |"
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in results.iter().filter(|r| r.phase.analytics) {
        let (a, c) = (&r.analytics, &r.counters);
        let wait = if c.queue_wait_count > 0 {
            format!(
                "{:.0}",
                c.queue_wait_millis as f64 / c.queue_wait_count as f64
            )
        } else {
            "–".to_owned()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} % | {} | {} | {} |",
            r.phase.name,
            r.phase.mode,
            a.completed,
            a.cancelled,
            a.rejected,
            a.other,
            c.cancellations,
            c.rejections,
            c.throttled,
            a.ended_in_window,
            100.0 * a.ended_in_window as f64 / allowed,
            c.queued,
            wait,
            c.left_queued
        );
    }
    let errors: Vec<String> = results
        .iter()
        .flat_map(|r| {
            let what = format!("{}, {}", r.phase.name, r.phase.mode);
            let p = r
                .product
                .first_error
                .as_ref()
                .map(|e| format!("product ({what}): {e}"));
            let a = r
                .analytics
                .first_other
                .as_ref()
                .map(|e| format!("analytics ({what}): {e}"));
            p.into_iter().chain(a)
        })
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(out, "\nFirst errors:\n");
        for e in errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}
