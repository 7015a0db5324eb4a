//! `sluice-bench queue-burst`: a burst of concurrent requests against one throttle bucket
//! (issue #11 B.9), with and without a queue, side by side in one run.
//!
//! Every burst sends `--requests` cheap `term` searches at the same instant, all tagged into one
//! workload group with `throttling: {attribute: group, node_limit: N}`, from as many
//! already-open keep-alive connections (opened before the burst, so the server's accept backlog
//! is not what is measured). The configurations:
//!
//! - `queue`: the group also has `queue.size_per_bucket` (the burst's size by default): the
//!   requests the limit refuses park and run as slots free;
//! - `reject`: the same group without a queue: refused requests get 429 at once, and the client
//!   gives up (what the node does without queueing);
//! - `reject-retry`: the same, but each client waits the 429's `Retry-After` and tries again, up
//!   to `--max-attempts` times (what a polite client does without a queue).
//!
//! A request's latency counts from the burst's start (the instant every request was released),
//! so a request that waited in the queue, or retried, shows its whole wait. The group is
//! re-created before each burst so that its `_wlm/stats` peaks (`queue_peak`,
//! `max_queue_wait_millis`, `peak_executing`) are that burst's. After each burst the scenario
//! waits (bounded) until the group has nothing parked and nothing executing, and fails the run
//! if in-flight ever exceeded the limit, if anything stayed parked, or if a request neither
//! completed nor was refused.
//!
//! Bounded everywhere: the request count (at most the queue's ceiling), each request's time
//! (the client timeout), each retry loop (attempts and a deadline), the waits for the node to
//! settle; only loopback servers are accepted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use serde_json::{Value, json};
use sluice_datagen::DEFAULT_START_EPOCH_MILLIS;
use tokio::sync::{mpsc, watch};

use crate::http::{HttpTarget, JSON_CONTENT_TYPE};
use crate::load::Batches;
use crate::queries::{QueryPool, QueryShape, TimeSpan};
use crate::wlm;

/// Most requests in one burst: the group queue's ceiling on a node (10,000).
const MAX_REQUESTS: usize = 10_000;

/// Most rounds.
const MAX_ROUNDS: u32 = 30;

/// Most attempts of one request in `reject-retry`.
const MAX_ATTEMPTS: u32 = 100;

/// Longest a `reject-retry` request keeps retrying, from the burst's start.
const RETRY_DEADLINE: Duration = Duration::from_secs(120);

/// Longest wait for the pre-opened connections of a burst.
const WARM_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait, after a burst, for the group to have nothing parked and nothing executing.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the group's stats are polled while waiting for it to settle.
const SETTLE_POLL: Duration = Duration::from_millis(20);

/// Latencies recorded from 1 µs to 10 min, 0.1 % precision.
const MAX_LATENCY_MICROS: u64 = 600_000_000;

/// Name of the benchmark's workload group (re-created before each burst).
const GROUP_NAME: &str = "bench_burst";

/// What a burst is sent against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BurstConfig {
    /// `node_limit` plus `queue.size_per_bucket`: refused requests wait for a slot.
    Queue,
    /// `node_limit` only: refused requests get 429 and the client gives up.
    Reject,
    /// `node_limit` only; clients wait `Retry-After` after a 429 and try again.
    RejectRetry,
}

impl BurstConfig {
    /// Every configuration, in the order of the first round.
    pub const ALL: [BurstConfig; 3] = [
        BurstConfig::Queue,
        BurstConfig::Reject,
        BurstConfig::RejectRetry,
    ];

    fn name(self) -> &'static str {
        match self {
            BurstConfig::Queue => "queue",
            BurstConfig::Reject => "reject",
            BurstConfig::RejectRetry => "reject-retry",
        }
    }

    fn queued(self) -> bool {
        self == BurstConfig::Queue
    }

    fn retries(self) -> bool {
        self == BurstConfig::RejectRetry
    }
}

/// Options of the queue-burst scenario.
#[derive(Debug, clap::Args)]
pub struct BurstArgs {
    /// Server to run against; must be on this machine. Its `--index` is re-created unless
    /// `--skip-load`, and its `bench_burst` workload group is replaced.
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
    #[arg(long, default_value_t = 100_000)]
    docs: u64,

    /// Seed of the documents and of the query bodies.
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Do not load: use the index as a previous run with the same --docs and --seed left it.
    #[arg(long)]
    skip_load: bool,

    /// Index the documents are loaded into and searched.
    #[arg(long, default_value = "logs")]
    index: String,

    /// Concurrent requests in one burst.
    #[arg(long, default_value_t = 3000)]
    requests: usize,

    /// The group's `throttling.node_limit`.
    #[arg(long, default_value_t = 4)]
    node_limit: u32,

    /// The `queue` configuration's `queue.size_per_bucket` [default: --requests].
    #[arg(long)]
    queue_size: Option<u32>,

    /// Bursts per configuration, the configurations' order rotating from round to round.
    #[arg(long, default_value_t = 3)]
    rounds: u32,

    /// Attempts per request in `reject-retry` (the first included).
    #[arg(long, default_value_t = 30)]
    max_attempts: u32,

    /// Seconds one HTTP request may take before it counts as failed.
    #[arg(long, default_value_t = 120)]
    request_timeout_secs: u64,

    /// Configurations to compare, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = BurstConfig::ALL)]
    configs: Vec<BurstConfig>,
}

impl BurstArgs {
    fn validate(&self) -> Result<()> {
        if self.docs == 0 || self.docs > crate::MAX_DOCS {
            bail!(
                "--docs must be between 1 and {}, got {}",
                crate::MAX_DOCS,
                self.docs
            );
        }
        if self.requests == 0 || self.requests > MAX_REQUESTS {
            bail!(
                "--requests must be between 1 and {MAX_REQUESTS}, got {}",
                self.requests
            );
        }
        if self.node_limit == 0 {
            bail!("--node-limit must be at least 1, got 0");
        }
        if let Some(q) = self.queue_size
            && (q == 0 || q as usize > MAX_REQUESTS)
        {
            bail!("--queue-size must be between 1 and {MAX_REQUESTS}, got {q}");
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            bail!(
                "--rounds must be between 1 and {MAX_ROUNDS}, got {}",
                self.rounds
            );
        }
        if self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS {
            bail!(
                "--max-attempts must be between 1 and {MAX_ATTEMPTS}, got {}",
                self.max_attempts
            );
        }
        if self.request_timeout_secs == 0 || self.request_timeout_secs > crate::MAX_DURATION_SECS {
            bail!(
                "--request-timeout-secs must be between 1 and {}, got {}",
                crate::MAX_DURATION_SECS,
                self.request_timeout_secs
            );
        }
        if self.configs.is_empty() {
            bail!("--configs must name at least one configuration");
        }
        for (i, c) in self.configs.iter().enumerate() {
            if self.configs[..i].contains(c) {
                bail!("--configs lists {} twice; list each once", c.name());
            }
        }
        if !self.spawn {
            crate::target::check_loopback(&self.url)?;
        }
        Ok(())
    }

    fn queue_size(&self) -> u32 {
        self.queue_size
            .unwrap_or(u32::try_from(self.requests).unwrap_or(u32::MAX))
    }

    /// The group's creation body in `config`.
    fn group_body(&self, config: BurstConfig) -> Value {
        let mut body = json!({
            "name": GROUP_NAME,
            "resiliency_mode": "enforced",
            // Memory, not cpu: the burst saturates the cores, and a cpu share would bring
            // resource enforcement in; this measures the throttle and its queue.
            "resource_limits": {"memory": wlm::GROUP_MEMORY_LIMIT},
            "throttling": {"attribute": "group", "node_limit": self.node_limit},
        });
        if config.queued() {
            body["queue"] = json!({"size_per_bucket": self.queue_size()});
        }
        body
    }
}

/// How one request of a burst ended.
#[derive(Debug)]
enum Outcome {
    /// 200, after `attempts` tries; `latency` from the burst's start.
    Completed { latency: Duration, attempts: u32 },
    /// 429 on its last try; `queue_full` when the body said the queue was full.
    Rejected {
        attempts: u32,
        queue_full: bool,
        retry_after: Option<u64>,
    },
    /// Anything else (connection error, timeout, another status).
    Other(String),
}

/// One burst's figures.
#[derive(Debug)]
struct BurstResult {
    completed: u64,
    rejected: u64,
    queue_full: u64,
    other: u64,
    first_other: Option<String>,
    attempts: u64,
    /// Time until every request of the burst had ended.
    elapsed: Duration,
    latencies: Histogram<u64>,
    /// `Retry-After` values of the 429s, smallest and largest.
    retry_after: Option<(u64, u64)>,
    stats: GroupStats,
    /// Time after the last response until the group had nothing parked or executing.
    settle: Duration,
}

/// A group's `_wlm/stats` figures this scenario reads.
#[derive(Debug, Default, Clone, Copy)]
struct GroupStats {
    total_completions: u64,
    total_throttled: u64,
    total_queued: u64,
    total_queue_rejections: u64,
    total_cancellations: u64,
    total_rejections: u64,
    queued_current: u64,
    queue_peak: u64,
    queue_wait_count: u64,
    total_queue_wait_millis: u64,
    max_queue_wait_millis: u64,
    executing: u64,
    peak_executing: u64,
}

impl GroupStats {
    fn of(group: &Value) -> GroupStats {
        let n = |k: &str| group[k].as_u64().unwrap_or(0);
        GroupStats {
            total_completions: n("total_completions"),
            total_throttled: n("total_throttled"),
            total_queued: n("total_queued"),
            total_queue_rejections: n("total_queue_rejections"),
            total_cancellations: n("total_cancellations"),
            total_rejections: n("total_rejections"),
            queued_current: n("queued_current"),
            queue_peak: n("queue_peak"),
            queue_wait_count: n("queue_wait_count"),
            total_queue_wait_millis: n("total_queue_wait_millis"),
            max_queue_wait_millis: n("max_queue_wait_millis"),
            executing: n("executing"),
            peak_executing: n("peak_executing"),
        }
    }
}

/// Runs the scenario and prints its table.
pub fn main(args: &BurstArgs) -> Result<()> {
    args.validate()?;
    let (data_root, _temp) = match &args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("could not create --data-dir {}", dir.display()))?;
            (dir.clone(), None)
        }
        None => {
            let temp = tempfile::Builder::new()
                .prefix("sluice-burst-")
                .tempdir()
                .context("could not create a temporary data dir")?;
            (temp.path().to_owned(), Some(temp))
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("could not start the tokio runtime")?;
    runtime.block_on(run(args, &data_root))
}

async fn run(args: &BurstArgs, data_root: &std::path::Path) -> Result<()> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(args.request_timeout_secs))
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
        let batches = Batches::new(args.seed, DEFAULT_START_EPOCH_MILLIS, args.docs, 5000);
        let took = target.load(batches, 2).await?;
        target.refresh().await?;
        eprintln!("loaded in {:.1} s", took.as_secs_f64());
    }
    wlm::set_mode(&target, wlm::MODE_ENABLED).await?;
    let span = TimeSpan::of_generated(DEFAULT_START_EPOCH_MILLIS, args.docs);
    let bodies: Arc<[Bytes]> = QueryPool::new(QueryShape::Term, args.seed, span)
        .encoded
        .into();
    let search_url = target.search_url();

    // Unthrottled, untagged: the caches are warm before the first burst.
    for body in bodies.iter() {
        target.search(&serde_json::from_slice(body)?).await?;
    }

    let mut results: Vec<(BurstConfig, Vec<BurstResult>)> =
        args.configs.iter().map(|&c| (c, Vec::new())).collect();
    let n = results.len();
    for round in 0..args.rounds as usize {
        for i in 0..n {
            let slot = (i + round) % n;
            let config = results[slot].0;
            let group_id = recreate_group(&target, &args.group_body(config)).await?;
            let opened = warm_connections(&client, &base_url, args.requests).await?;
            eprintln!(
                "round {}/{}: {} ({} connections open)…",
                round + 1,
                args.rounds,
                config.name(),
                opened
            );
            let r = burst(
                args,
                config,
                &client,
                &search_url,
                &bodies,
                &target,
                &group_id,
            )
            .await?;
            eprintln!(
                "  {} completed, {} rejected, {} other in {:.2} s; queue_peak {}, peak_executing {}",
                r.completed,
                r.rejected,
                r.other,
                r.elapsed.as_secs_f64(),
                r.stats.queue_peak,
                r.stats.peak_executing
            );
            results[slot].1.push(r);
        }
    }
    target
        .delete_if_exists(&format!("_wlm/workload_group/{GROUP_NAME}"))
        .await?;
    let report = render(args, &results);
    print!("{report}");
    if let Some(server) = server {
        server.stop().await?;
    }
    let problems = problems(args, &results);
    if !problems.is_empty() {
        bail!("the run found problems:\n{}", problems.join("\n"));
    }
    Ok(())
}

/// Deletes the benchmark group if it exists, creates it with `body`, returns its `_id`.
async fn recreate_group(target: &HttpTarget, body: &Value) -> Result<String> {
    target
        .delete_if_exists(&format!("_wlm/workload_group/{GROUP_NAME}"))
        .await?;
    let created = wlm::send(
        target,
        reqwest::Method::PUT,
        "_wlm/workload_group",
        Some(body),
    )
    .await?;
    created["_id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("creating {GROUP_NAME} answered no _id: {created}"))
}

/// Opens (or re-uses) `n` keep-alive connections to the server: `n` concurrent `GET /` whose
/// answers are all held, headers read and bodies not, until every one has arrived (so each
/// holds its own connection), then read and released to the client's pool. Returns how many
/// succeeded.
async fn warm_connections(client: &reqwest::Client, base: &Url, n: usize) -> Result<usize> {
    let (arrived_tx, mut arrived_rx) = mpsc::unbounded_channel::<bool>();
    let (release_tx, release_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (client, url, arrived, mut release) = (
            client.clone(),
            base.clone(),
            arrived_tx.clone(),
            release_rx.clone(),
        );
        tasks.spawn(async move {
            match client.get(url).send().await {
                Ok(resp) => {
                    let _ = arrived.send(true);
                    let _ = release.wait_for(|&r| r).await;
                    let _ = resp.bytes().await;
                }
                Err(_) => {
                    let _ = arrived.send(false);
                }
            }
        });
    }
    drop(arrived_tx);
    let deadline = tokio::time::Instant::now() + WARM_TIMEOUT;
    let mut ok = 0;
    for _ in 0..n {
        match tokio::time::timeout_at(deadline, arrived_rx.recv()).await {
            Ok(Some(true)) => ok += 1,
            Ok(Some(false)) | Ok(None) => {}
            Err(_) => break,
        }
    }
    let _ = release_tx.send(true);
    while tasks.join_next().await.is_some() {}
    if ok < n {
        eprintln!("warning: only {ok} of {n} connections opened before the burst");
    }
    Ok(ok)
}

/// Sends one burst and waits for the group to settle.
async fn burst(
    args: &BurstArgs,
    config: BurstConfig,
    client: &reqwest::Client,
    url: &Url,
    bodies: &Arc<[Bytes]>,
    target: &HttpTarget,
    group_id: &str,
) -> Result<BurstResult> {
    let (go_tx, go_rx) = watch::channel::<Option<Instant>>(None);
    let mut tasks = tokio::task::JoinSet::new();
    let max_attempts = if config.retries() {
        args.max_attempts
    } else {
        1
    };
    for i in 0..args.requests {
        let (client, url, group, mut go) = (
            client.clone(),
            url.clone(),
            group_id.to_owned(),
            go_rx.clone(),
        );
        let body = bodies[i % bodies.len()].clone();
        tasks.spawn(async move {
            let Ok(start) = go.wait_for(Option::is_some).await.map(|s| s.expect("some")) else {
                return (
                    Outcome::Other("the burst never started".into()),
                    Duration::ZERO,
                );
            };
            let outcome = one_request(&client, &url, &body, &group, start, max_attempts).await;
            (outcome, start.elapsed())
        });
    }
    // Let every task reach its wait before the start.
    tokio::task::yield_now().await;
    let start = Instant::now();
    go_tx
        .send(Some(start))
        .context("every request task ended before the burst")?;
    let mut result = BurstResult {
        completed: 0,
        rejected: 0,
        queue_full: 0,
        other: 0,
        first_other: None,
        attempts: 0,
        elapsed: Duration::ZERO,
        latencies: Histogram::new_with_bounds(1, MAX_LATENCY_MICROS, 3)
            .expect("constant bounds hdrhistogram accepts"),
        retry_after: None,
        stats: GroupStats::default(),
        settle: Duration::ZERO,
    };
    while let Some(joined) = tasks.join_next().await {
        let (outcome, ended) = joined.context("a request task panicked")?;
        result.elapsed = result.elapsed.max(ended);
        match outcome {
            Outcome::Completed { latency, attempts } => {
                result.completed += 1;
                result.attempts += u64::from(attempts);
                let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                result.latencies.saturating_record(micros.max(1));
            }
            Outcome::Rejected {
                attempts,
                queue_full,
                retry_after,
            } => {
                result.rejected += 1;
                result.attempts += u64::from(attempts);
                result.queue_full += u64::from(queue_full);
                if let Some(ra) = retry_after {
                    let (lo, hi) = result.retry_after.unwrap_or((ra, ra));
                    result.retry_after = Some((lo.min(ra), hi.max(ra)));
                }
            }
            Outcome::Other(e) => {
                result.other += 1;
                result.attempts += 1;
                result.first_other.get_or_insert(e);
            }
        }
    }
    let answered = Instant::now();
    let deadline = answered + SETTLE_TIMEOUT;
    let mut poll = tokio::time::interval(SETTLE_POLL);
    loop {
        poll.tick().await;
        let stats = group_stats(target, group_id).await?;
        if stats.queued_current == 0 && stats.executing == 0 {
            result.stats = stats;
            result.settle = answered.elapsed();
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "{} burst: {} requests still parked and {} executing {} s after the last answer",
                config.name(),
                stats.queued_current,
                stats.executing,
                SETTLE_TIMEOUT.as_secs()
            );
        }
    }
    Ok(result)
}

/// Sends one request of a burst, retrying after a 429 up to `max_attempts` tries (and within
/// [`RETRY_DEADLINE`] of `start`), waiting the `Retry-After` it was given.
async fn one_request(
    client: &reqwest::Client,
    url: &Url,
    body: &Bytes,
    group: &str,
    start: Instant,
    max_attempts: u32,
) -> Outcome {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let resp = client
            .post(url.clone())
            .header(CONTENT_TYPE, JSON_CONTENT_TYPE)
            .header(wlm::GROUP_HEADER, group)
            .body(body.clone())
            .send()
            .await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) => return Outcome::Other(e.to_string()),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => return Outcome::Other(format!("reading the answer: {e}")),
        };
        match status {
            200 => {
                return Outcome::Completed {
                    latency: start.elapsed(),
                    attempts,
                };
            }
            429 => {
                let wait = Duration::from_secs(retry_after.unwrap_or(1));
                let retry_at = Instant::now() + wait;
                if attempts >= max_attempts || retry_at >= start + RETRY_DEADLINE {
                    return Outcome::Rejected {
                        attempts,
                        queue_full: text.contains("queue is full")
                            || text.contains("queue on this node is full"),
                        retry_after,
                    };
                }
                tokio::time::sleep_until(retry_at.into()).await;
            }
            _ => {
                return Outcome::Other(format!(
                    "{status}: {}",
                    text.chars().take(200).collect::<String>()
                ));
            }
        }
    }
}

/// Reads the group's figures from `GET /_wlm/stats/<id>` (one node).
async fn group_stats(target: &HttpTarget, group_id: &str) -> Result<GroupStats> {
    let answer = wlm::send(
        target,
        reqwest::Method::GET,
        &format!("_wlm/stats/{group_id}"),
        None,
    )
    .await?;
    let group = answer
        .as_object()
        .into_iter()
        .flat_map(|m| m.iter())
        .filter(|(k, _)| *k != "_nodes" && *k != "cluster_name")
        .map(|(_, n)| &n["workload_groups"][group_id])
        .find(|g| g.is_object())
        .with_context(|| format!("no stats of group {group_id} in {answer}"))?;
    Ok(GroupStats::of(group))
}

/// The median of `values` (the lower middle for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

/// One configuration's bursts, added up.
struct Totals {
    bursts: usize,
    requests: u64,
    completed: u64,
    rejected: u64,
    queue_full: u64,
    other: u64,
    attempts: u64,
    elapsed_s: Vec<f64>,
    throughput: Vec<f64>,
    latencies: Histogram<u64>,
    retry_after: Option<(u64, u64)>,
    queue_peak: u64,
    max_wait_ms: u64,
    wait_count: u64,
    total_wait_ms: u64,
    peak_executing: u64,
    left_parked: u64,
    left_executing: u64,
    total_queued: u64,
    total_throttled: u64,
    queue_rejections: u64,
    share_rejections: u64,
    server_completions: u64,
    cancellations: u64,
    settle_ms: f64,
}

impl Totals {
    fn of(requests: usize, runs: &[BurstResult]) -> Totals {
        let mut latencies = Histogram::new_with_bounds(1, MAX_LATENCY_MICROS, 3)
            .expect("constant bounds hdrhistogram accepts");
        let mut t = Totals {
            bursts: runs.len(),
            requests: (requests * runs.len()) as u64,
            completed: 0,
            rejected: 0,
            queue_full: 0,
            other: 0,
            attempts: 0,
            elapsed_s: Vec::new(),
            throughput: Vec::new(),
            latencies: Histogram::new_with_bounds(1, MAX_LATENCY_MICROS, 3)
                .expect("constant bounds hdrhistogram accepts"),
            retry_after: None,
            queue_peak: 0,
            max_wait_ms: 0,
            wait_count: 0,
            total_wait_ms: 0,
            peak_executing: 0,
            left_parked: 0,
            left_executing: 0,
            total_queued: 0,
            total_throttled: 0,
            queue_rejections: 0,
            share_rejections: 0,
            server_completions: 0,
            cancellations: 0,
            settle_ms: 0.0,
        };
        for r in runs {
            t.completed += r.completed;
            t.rejected += r.rejected;
            t.queue_full += r.queue_full;
            t.other += r.other;
            t.attempts += r.attempts;
            let secs = r.elapsed.as_secs_f64();
            t.elapsed_s.push(secs);
            t.throughput.push(if secs > 0.0 {
                r.completed as f64 / secs
            } else {
                0.0
            });
            latencies
                .add(&r.latencies)
                .expect("histograms with equal bounds merge");
            if let Some((lo, hi)) = r.retry_after {
                let (a, b) = t.retry_after.unwrap_or((lo, hi));
                t.retry_after = Some((a.min(lo), b.max(hi)));
            }
            let s = &r.stats;
            t.queue_peak = t.queue_peak.max(s.queue_peak);
            t.max_wait_ms = t.max_wait_ms.max(s.max_queue_wait_millis);
            t.wait_count += s.queue_wait_count;
            t.total_wait_ms += s.total_queue_wait_millis;
            t.peak_executing = t.peak_executing.max(s.peak_executing);
            t.left_parked += s.queued_current;
            t.left_executing += s.executing;
            t.total_queued += s.total_queued;
            t.total_throttled += s.total_throttled;
            t.queue_rejections += s.total_queue_rejections;
            t.share_rejections += s.total_rejections;
            t.server_completions += s.total_completions;
            t.cancellations += s.total_cancellations;
            t.settle_ms = t.settle_ms.max(r.settle.as_secs_f64() * 1000.0);
        }
        t.latencies = latencies;
        t
    }

    fn ms(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            0.0
        } else {
            self.latencies.value_at_quantile(q) as f64 / 1000.0
        }
    }
}

/// Renders the run as Markdown.
fn render(args: &BurstArgs, results: &[(BurstConfig, Vec<BurstResult>)]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = writeln!(
        out,
        "- {} documents (seed {}), {} cores; bursts of {} concurrent `term` searches tagged \
         into one group (`enforced`, memory {}), `throttling.node_limit` {}; `queue`: \
         `queue.size_per_bucket` {}; `reject-retry`: at most {} attempts, waiting `Retry-After`",
        args.docs,
        args.seed,
        cores,
        args.requests,
        wlm::GROUP_MEMORY_LIMIT,
        args.node_limit,
        args.queue_size(),
        args.max_attempts,
    );
    let _ = writeln!(
        out,
        "- {} rounds, the configurations' order rotating; latency from the burst's start; \
         throughput = completed ÷ time until the burst's last answer (median over rounds)\n",
        args.rounds
    );
    let _ = writeln!(
        out,
        "| config | bursts | requests | completed | rejected (429) | other errors | attempts | burst time s (median) | throughput req/s (median) | p50 ms | p99 ms | max ms | queue_peak | max queue wait ms | mean queue wait ms | peak_executing | Retry-After s | parked / executing after |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    let totals: Vec<(BurstConfig, Totals)> = results
        .iter()
        .map(|(c, runs)| (*c, Totals::of(args.requests, runs)))
        .collect();
    for (c, t) in &totals {
        let mean_wait = if t.wait_count > 0 {
            format!("{:.1}", t.total_wait_ms as f64 / t.wait_count as f64)
        } else {
            "–".into()
        };
        let retry = t.retry_after.map_or("–".into(), |(lo, hi)| {
            if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo}–{hi}")
            }
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} / {} |",
            c.name(),
            t.bursts,
            t.requests,
            t.completed,
            t.rejected,
            t.other,
            t.attempts,
            median(t.elapsed_s.clone()),
            median(t.throughput.clone()),
            t.ms(0.5),
            t.ms(0.99),
            t.latencies.max() as f64 / 1000.0,
            t.queue_peak,
            t.max_wait_ms,
            mean_wait,
            t.peak_executing,
            retry,
            t.left_parked,
            t.left_executing,
        );
    }
    let find = |c: BurstConfig| totals.iter().find(|(k, _)| *k == c).map(|(_, t)| t);
    if let Some(q) = find(BurstConfig::Queue) {
        for other in [BurstConfig::Reject, BurstConfig::RejectRetry] {
            if let Some(o) = find(other) {
                let ratio = |a: f64, b: f64| {
                    if b > 0.0 {
                        format!("{:.2}", a / b)
                    } else {
                        "–".into()
                    }
                };
                let _ = writeln!(
                    out,
                    "\nqueue / {}: completed {}, throughput {}, burst time {}, p50 {}, p99 {}",
                    other.name(),
                    ratio(q.completed as f64, o.completed as f64),
                    ratio(median(q.throughput.clone()), median(o.throughput.clone())),
                    ratio(median(q.elapsed_s.clone()), median(o.elapsed_s.clone())),
                    ratio(q.ms(0.5), o.ms(0.5)),
                    ratio(q.ms(0.99), o.ms(0.99)),
                );
            }
        }
    }
    let _ = writeln!(out);
    for (c, t) in &totals {
        let _ = writeln!(
            out,
            "- {}: `_wlm/stats` total_completions {}, total_queued {}, total_throttled {}, total_queue_rejections {}, total_rejections {}, total_cancellations {}; 429s saying the queue was full {}; longest wait for the group to show nothing parked or executing after the last answer {:.0} ms",
            c.name(),
            t.server_completions,
            t.total_queued,
            t.total_throttled,
            t.queue_rejections,
            t.share_rejections,
            t.cancellations,
            t.queue_full,
            t.settle_ms
        );
    }
    for (c, runs) in results {
        if let Some(e) = runs.iter().find_map(|r| r.first_other.as_ref()) {
            let _ = writeln!(out, "- first other error ({}): {e}", c.name());
        }
    }
    out
}

/// What makes the run wrong rather than slow.
fn problems(args: &BurstArgs, results: &[(BurstConfig, Vec<BurstResult>)]) -> Vec<String> {
    let mut out = Vec::new();
    for (c, runs) in results {
        for (i, r) in runs.iter().enumerate() {
            let what = format!("{} burst {}", c.name(), i + 1);
            if r.stats.peak_executing > u64::from(args.node_limit) {
                out.push(format!(
                    "{what}: peak_executing {} exceeds node_limit {}",
                    r.stats.peak_executing, args.node_limit
                ));
            }
            if r.completed + r.rejected + r.other != args.requests as u64 {
                out.push(format!("{what}: not every request ended"));
            }
            if r.other > 0 {
                out.push(format!(
                    "{what}: {} requests failed otherwise than 429: {}",
                    r.other,
                    r.first_other.as_deref().unwrap_or("")
                ));
            }
            if c.queued() && args.queue_size() as usize >= args.requests && r.rejected > 0 {
                out.push(format!(
                    "{what}: {} requests were refused though the queue holds the whole burst",
                    r.rejected
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BurstArgs,
    }

    fn args(extra: &[&str]) -> BurstArgs {
        Cli::try_parse_from(["queue-burst"].iter().chain(extra))
            .unwrap()
            .args
    }

    #[test]
    fn test_defaults_are_the_issue_burst() {
        let a = args(&[]);
        a.validate().unwrap();
        assert_eq!((a.requests, a.node_limit, a.queue_size()), (3000, 4, 3000));
        assert_eq!(a.configs, BurstConfig::ALL);
        let queued = a.group_body(BurstConfig::Queue);
        assert_eq!(queued["queue"]["size_per_bucket"], 3000);
        assert_eq!(queued["throttling"]["node_limit"], 4);
        assert!(a.group_body(BurstConfig::Reject).get("queue").is_none());
    }

    #[test]
    fn test_bad_flags_are_refused_by_name() {
        for (flags, expected) in [
            (
                &["--requests", "10001"][..],
                "--requests must be between 1 and 10000",
            ),
            (
                &["--node-limit", "0"][..],
                "--node-limit must be at least 1",
            ),
            (&["--queue-size", "0"][..], "--queue-size must be between 1"),
            (
                &["--max-attempts", "0"][..],
                "--max-attempts must be between 1",
            ),
            (
                &["--configs", "queue,queue"][..],
                "--configs lists queue twice",
            ),
            (
                &["--url", "http://10.0.0.1:9200"][..],
                "--url must point at this machine",
            ),
        ] {
            let e = args(flags).validate().unwrap_err().to_string();
            assert!(e.starts_with(expected), "{flags:?}: {e}");
        }
    }

    #[test]
    fn test_median_takes_the_lower_middle() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
