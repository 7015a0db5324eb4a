//! `sluice-bench`: loads generated log documents into a sluice node and measures search
//! throughput and latency over HTTP, next to the same searches run in-process as the ceiling.
//!
//! A run has four steps:
//!
//! 1. **Load.** [`load::Batches`] cuts the [`sluice_datagen`] stream into `_bulk` batches;
//!    [`http::HttpTarget`] sends them to `POST /_bulk` from a few concurrent loaders and
//!    refreshes the index. The in-process target ([`in_process::InProcessTarget`], an engine
//!    opened on its own data dir) gets the same documents through the engine API.
//! 2. **Cross-check.** The first body of each [`queries::QueryShape`] runs once on both targets;
//!    differing hit counts or aggregations are reported as warnings.
//! 3. **Measure.** For each shape and concurrency, [`measure::run_http`] drives
//!    `POST <index>/_search` from that many tokio tasks, and [`measure::run_in_process`] calls
//!    the engine from that many threads, each for a fixed duration after a warm-up, recording
//!    latencies in HDR histograms.
//! 4. **Report.** [`report::Report`] prints a Markdown table and optionally writes JSON.
//!
//! Only servers on this machine are accepted. With `--spawn` the benchmark starts its own
//! `sluice serve` on an ephemeral port ([`target::SpawnedServer`]).
//!
//! That is the default scenario, `foundation`. The `throttle-overhead` scenario
//! ([`overhead`]) loads the same way, then measures one cheap query over HTTP only, untagged
//! and tagged into workload groups with and without a node-tier throttle ([`wlm`] sets them
//! up), interleaving the configurations in rounds, and reports their latencies side by side.
//! The subcommands `noisy-neighbour` ([`noisy`]) and `queue-burst` ([`burst`]) are scenarios
//! with their own arguments.

mod burst;
mod gateway;
mod http;
#[cfg(feature = "in-process")]
mod in_process;
mod load;
mod measure;
mod noisy;
mod overhead;
mod paired;
mod queries;
mod report;
mod target;
mod wlm;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use reqwest::Url;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sluice_datagen::DEFAULT_START_EPOCH_MILLIS;

use crate::http::HttpTarget;
use crate::load::{Batches, LoadSummary};
use crate::measure::{Summary, Window};
use crate::overhead::{Config, Load, LoadLevel, OverheadReport, Plan};
use crate::queries::{QueryPool, QueryShape, TimeSpan};
use crate::report::{Report, Row};
use crate::target::SpawnedServer;

/// Most concurrent requests a run may use: far above what two cores can serve, low enough that
/// a typo cannot open thousands of sockets or threads.
const MAX_CONCURRENCY: usize = 512;

/// Longest measured duration per shape and concurrency: ten minutes keeps a full run (4 shapes,
/// a few levels, two targets) within hours, never days.
const MAX_DURATION_SECS: u64 = 600;

/// Most documents a run may load: 100 million is tens of gigabytes of index, the most a
/// benchmark machine should be asked to hold.
const MAX_DOCS: u64 = 100_000_000;

/// Largest `_bulk` batch: OpenSearch's default `http.max_content_length` is 100 MB and a batch
/// of 50 000 generated documents is about 15 MB.
const MAX_BATCH_SIZE: usize = 50_000;

/// How long one HTTP request may take before it counts as failed: a minute covers a large
/// `_bulk` on a busy node; a search taking that long is a failure worth reporting.
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

/// Name of the spawned server's log file inside the data dir.
const SERVER_LOG_FILE: &str = "server.log";

/// Most rounds of the throttle-overhead scenario: a hundred short windows per configuration
/// is already far more than the noise of one machine calls for.
const MAX_ROUNDS: usize = 100;

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// Every query shape at every concurrency, over HTTP and in-process.
    Foundation,
    /// One `term` query over HTTP, untagged vs tagged into groups with and without a
    /// node-tier throttle far above the load, at a steady and a burst load, interleaved.
    ThrottleOverhead,
}

/// Benchmark driver for sluice: bulk load, then search QPS and latency over HTTP and in-process.
#[derive(Debug, Parser)]
#[command(name = "sluice-bench", version, args_conflicts_with_subcommands = true)]
struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Scenario::Foundation)]
    scenario: Scenario,

    /// A scenario with its own arguments, run instead of the query-shape benchmark.
    #[command(subcommand)]
    command: Option<Command>,

    /// Documents to generate and load into each target.
    #[arg(long, default_value_t = 100_000)]
    docs: u64,

    /// Seed of the documents and the query bodies; the same seed gives the same run.
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Server to benchmark; must be on this machine. Its index is deleted and re-created.
    #[arg(
        long,
        default_value = "http://127.0.0.1:9200",
        conflicts_with = "spawn"
    )]
    url: Url,

    /// Start `sluice serve` on an ephemeral port with a data dir under --data-dir, instead of --url.
    #[arg(long)]
    spawn: bool,

    /// The `sluice` binary --spawn starts [default: `sluice` next to this binary].
    #[arg(long, requires = "spawn")]
    sluice_bin: Option<PathBuf>,

    /// Concurrent requests to measure at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    concurrency: Vec<usize>,

    /// Seconds each shape is measured at each concurrency, after the warm-up.
    #[arg(long, default_value_t = 10)]
    duration_secs: u64,

    /// Seconds of unrecorded warm-up before each measurement.
    #[arg(long, default_value_t = 1)]
    warmup_secs: u64,

    /// Query shapes to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = QueryShape::ALL)]
    shapes: Vec<QueryShape>,

    /// Directory for the in-process engine's data (`in-process/`) and the spawned server's
    /// (`server/`, `server.log`); kept after the run [default: a temporary directory, removed].
    #[arg(long)]
    data_dir: Option<PathBuf>,

    /// Index the documents are loaded into and searched.
    #[arg(long, default_value = "logs")]
    index: String,

    /// Documents per `_bulk` request.
    #[arg(long, default_value_t = 5000)]
    batch_size: usize,

    /// Concurrent `_bulk` requests while loading.
    #[arg(long, default_value_t = 2)]
    loaders: usize,

    /// Do not load: search the index as a previous run with the same --docs and --seed left it.
    #[arg(long)]
    skip_load: bool,

    /// Measure only in-process; no server is contacted.
    #[arg(long, conflicts_with_all = ["spawn", "no_in_process"])]
    no_http: bool,

    /// Measure only over HTTP.
    #[arg(long)]
    no_in_process: bool,

    /// Also write the results as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,

    /// throttle-overhead: how many times each config is measured at each load, in rotating
    /// order; each time for --duration-secs after --warmup-secs.
    #[arg(long, default_value_t = 5)]
    rounds: usize,

    /// throttle-overhead: concurrent clients of the steady load.
    #[arg(long, default_value_t = 8)]
    steady_clients: usize,

    /// throttle-overhead: concurrent clients of the burst load.
    #[arg(long, default_value_t = 64)]
    burst_clients: usize,

    /// throttle-overhead: more nodes of --url's cluster, comma-separated. The index is loaded
    /// into each (an embedded node searches its own data) and requests go round-robin over
    /// --url and these; needed by the `shared` config (see scripts/cluster.sh).
    #[arg(long, value_delimiter = ',', conflicts_with = "spawn")]
    also_url: Vec<Url>,

    /// throttle-overhead: mix the configs request by request in one window per load and round
    /// (each client sends them in turn), instead of one window per config: the configs share
    /// every moment of the machine, so the run shows the latency a config adds with far less
    /// noise, but not the throughput it costs.
    #[arg(long)]
    mixed: bool,

    /// throttle-overhead: configs to compare, comma-separated; ratios are taken to `none`.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Config::ALL)]
    configs: Vec<Config>,
}

impl Args {
    /// Checks the limits clap cannot express, naming the offending flag and value.
    fn validate(&self) -> Result<()> {
        if self.docs == 0 || self.docs > MAX_DOCS {
            bail!("--docs must be between 1 and {MAX_DOCS}, got {}", self.docs);
        }
        if let Some(&bad) = self
            .concurrency
            .iter()
            .find(|&&c| c == 0 || c > MAX_CONCURRENCY)
        {
            bail!("--concurrency values must be between 1 and {MAX_CONCURRENCY}, got {bad}");
        }
        if self.duration_secs == 0 || self.duration_secs > MAX_DURATION_SECS {
            bail!(
                "--duration-secs must be between 1 and {MAX_DURATION_SECS}, got {}",
                self.duration_secs
            );
        }
        if self.warmup_secs > MAX_DURATION_SECS {
            bail!(
                "--warmup-secs must be at most {MAX_DURATION_SECS}, got {}",
                self.warmup_secs
            );
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH_SIZE {
            bail!(
                "--batch-size must be between 1 and {MAX_BATCH_SIZE}, got {}",
                self.batch_size
            );
        }
        if self.loaders == 0 || self.loaders > MAX_CONCURRENCY {
            bail!(
                "--loaders must be between 1 and {MAX_CONCURRENCY}, got {}",
                self.loaders
            );
        }
        if self.index.is_empty()
            || !self
                .index
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        {
            bail!(
                "--index must be lowercase letters, digits, '-', '_' or '.', got {:?}",
                self.index
            );
        }
        if self.skip_load && self.data_dir.is_none() && self.measures_in_process() {
            bail!(
                "--skip-load needs --data-dir (where a previous run left the in-process index) or --no-in-process"
            );
        }
        if self.no_http && !cfg!(feature = "in-process") {
            bail!("--no-http leaves nothing to measure: this build lacks the `in-process` feature");
        }
        if !self.spawn && !self.no_http {
            target::check_loopback(&self.url)?;
        }
        if self.scenario == Scenario::ThrottleOverhead {
            self.validate_throttle_overhead()?;
        } else if self.mixed {
            bail!("--mixed applies to --scenario throttle-overhead; add it or drop --mixed");
        }
        Ok(())
    }

    /// Checks the flags of the throttle-overhead scenario.
    fn validate_throttle_overhead(&self) -> Result<()> {
        if self.no_http {
            bail!("--scenario throttle-overhead measures over HTTP; drop --no-http");
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            bail!(
                "--rounds must be between 1 and {MAX_ROUNDS}, got {}",
                self.rounds
            );
        }
        for (flag, clients) in [
            ("--steady-clients", self.steady_clients),
            ("--burst-clients", self.burst_clients),
        ] {
            if clients == 0 || clients > MAX_CONCURRENCY {
                bail!("{flag} must be between 1 and {MAX_CONCURRENCY}, got {clients}");
            }
        }
        for (i, config) in self.configs.iter().enumerate() {
            if self.configs[..i].contains(config) {
                bail!("--configs lists {} twice; list each once", config.name());
            }
        }
        Ok(())
    }

    fn measures_http(&self) -> bool {
        !self.no_http
    }

    fn measures_in_process(&self) -> bool {
        !self.no_in_process && self.scenario == Scenario::Foundation
    }

    /// Returns the throttle-overhead scenario's plan.
    fn overhead_plan(&self) -> Plan {
        Plan {
            configs: self.configs.clone(),
            loads: vec![
                LoadLevel {
                    load: Load::Steady,
                    clients: self.steady_clients,
                },
                LoadLevel {
                    load: Load::Burst,
                    clients: self.burst_clients,
                },
            ],
            rounds: self.rounds,
            warmup: Duration::from_secs(self.warmup_secs),
            window: Duration::from_secs(self.duration_secs),
            mixed: self.mixed,
        }
    }
}

/// Scenarios with their own arguments.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Two workload groups on one node: product's cheap queries alone, then next to
    /// analytics' heavy aggregations with workload management disabled, then enabled.
    NoisyNeighbour(noisy::NoisyArgs),
    /// A burst of concurrent requests against one throttled bucket, with a queue, without
    /// one, and without one with clients retrying after `Retry-After` (issue #11 B.9).
    QueueBurst(burst::BurstArgs),
    /// The latency sluice's gateway adds in front of an upstream, next to nginx's, in one run
    /// (issue 13).
    GatewayOverhead(gateway::GatewayArgs),
}

fn main() -> Result<()> {
    let args = Args::parse();
    match &args.command {
        Some(Command::NoisyNeighbour(noisy)) => return noisy::main(noisy),
        Some(Command::QueueBurst(burst)) => return burst::main(burst),
        Some(Command::GatewayOverhead(g)) => return gateway::main(g),
        None => {}
    }
    args.validate()?;
    match args.scenario {
        Scenario::Foundation => {
            let report = run(&args)?;
            print!("{}", report.to_markdown());
            write_json(&args, &report.to_json())
        }
        Scenario::ThrottleOverhead => {
            let report = run_throttle_overhead(&args)?;
            print!("{}", report.to_markdown());
            write_json(&args, &report.to_json())?;
            let problems = report.problems();
            if !problems.is_empty() {
                bail!(
                    "the run is unfit for comparing configs:\n{}",
                    problems.join("\n")
                );
            }
            Ok(())
        }
    }
}

/// Writes `json` to `--out`, if given.
fn write_json(args: &Args, json: &Value) -> Result<()> {
    if let Some(path) = &args.out {
        let text = serde_json::to_string_pretty(json).expect("a JSON value always serialises");
        std::fs::write(path, text + "\n")
            .with_context(|| format!("could not write --out {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Returns the run's data root: `--data-dir`, created if needed, or a temporary directory that
/// is removed when the returned guard drops.
fn data_root(args: &Args) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    match &args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("could not create --data-dir {}", dir.display()))?;
            Ok((dir.clone(), None))
        }
        None => {
            let temp = tempfile::Builder::new()
                .prefix("sluice-bench-")
                .tempdir()
                .context("could not create a temporary data dir")?;
            Ok((temp.path().to_owned(), Some(temp)))
        }
    }
}

/// Runs the throttle-overhead scenario: connect (or spawn), load, measure the plan.
fn run_throttle_overhead(args: &Args) -> Result<OverheadReport> {
    let (data_root, _temp_root) = data_root(args)?;
    let runtime = tokio::runtime::Runtime::new().context("could not start the tokio runtime")?;
    let (target, server) = runtime.block_on(connect(args, &data_root))?;
    let mut targets = vec![target];
    for url in &args.also_url {
        target::check_loopback(url)?;
        targets.push(HttpTarget {
            client: targets[0].client.clone(),
            base_url: url.clone(),
            index: args.index.clone(),
        });
    }
    let mut http_load = None;
    if !args.skip_load {
        for node in &targets {
            http_load = Some(runtime.block_on(load_over_http(node, args))?);
        }
    }
    let span = TimeSpan::of_generated(DEFAULT_START_EPOCH_MILLIS, args.docs);
    let pool = QueryPool::new(overhead::SHAPE, args.seed, span);
    let plan = args.overhead_plan();
    let empty = OverheadReport {
        seed: args.seed,
        num_docs: args.docs,
        url: targets
            .iter()
            .map(|t| t.base_url.to_string())
            .collect::<Vec<_>>()
            .join(","),
        shape: overhead::SHAPE,
        rounds: plan.rounds,
        warmup_secs: plan.warmup.as_secs_f64(),
        window_secs: plan.window.as_secs_f64(),
        mixed: plan.mixed,
        node_limit: overhead::NODE_LIMIT,
        http_load,
        rows: Vec::new(),
        by_node: Vec::new(),
        groups: Vec::new(),
    };
    let report = runtime.block_on(overhead::run(&targets, &pool, &plan, empty));
    if let Some(server) = server {
        runtime.block_on(server.stop())?;
    }
    report
}

/// Runs the whole benchmark and returns what it measured.
fn run(args: &Args) -> Result<Report> {
    // A temporary root is removed when `_temp_root` drops at the end of the run.
    let (data_root, _temp_root) = data_root(args)?;
    let runtime = tokio::runtime::Runtime::new().context("could not start the tokio runtime")?;

    let mut report = Report {
        seed: args.seed,
        num_docs: args.docs,
        url: None,
        duration_secs: args.duration_secs as f64,
        warmup_secs: args.warmup_secs as f64,
        http_load: None,
        in_process_load: None,
        rows: Vec::new(),
        mismatches: Vec::new(),
    };

    let mut server = None;
    let http_target = if args.measures_http() {
        let (target, spawned) = runtime.block_on(connect(args, &data_root))?;
        report.url = Some(target.base_url.to_string());
        if !args.skip_load {
            report.http_load = Some(runtime.block_on(load_over_http(&target, args))?);
        }
        server = spawned;
        Some(target)
    } else {
        None
    };

    let in_process_target = if args.measures_in_process() {
        let (target, load) = open_in_process(args, &data_root)?;
        report.in_process_load = load;
        target
    } else {
        None
    };

    let span = TimeSpan::of_generated(DEFAULT_START_EPOCH_MILLIS, args.docs);
    let pools: Vec<QueryPool> = args
        .shapes
        .iter()
        .map(|&shape| QueryPool::new(shape, args.seed, span))
        .collect();

    if let (Some(http_target), Some(in_process_target)) = (&http_target, &in_process_target) {
        report.mismatches = cross_check(&runtime, &pools, http_target, in_process_target);
    }
    let warmup = Duration::from_secs(args.warmup_secs);
    let duration = Duration::from_secs(args.duration_secs);
    for pool in &pools {
        for &concurrency in &args.concurrency {
            let http = http_target.as_ref().map(|target| {
                let window = Window::starting_now(warmup, duration);
                let summary = runtime
                    .block_on(measure::run_http(
                        &target.client,
                        &[target.search_url()],
                        &pool.encoded,
                        &HeaderMap::new(),
                        concurrency,
                        window,
                    ))
                    .summary();
                log_summary(pool.shape, concurrency, "HTTP", &summary);
                summary
            });
            let in_process = match &in_process_target {
                Some(target) => {
                    let window = Window::starting_now(warmup, duration);
                    let search = |body: &Value| in_process_search(target, body);
                    let summary =
                        measure::run_in_process(search, &pool.values, concurrency, window)?;
                    log_summary(pool.shape, concurrency, "in-process", &summary);
                    Some(summary)
                }
                None => None,
            };
            report.rows.push(Row {
                shape: pool.shape,
                concurrency,
                http,
                in_process,
            });
        }
    }

    if let Some(server) = server {
        runtime.block_on(server.stop())?;
    }
    Ok(report)
}

/// Finds the server (starting one with `--spawn`), waits until it answers, and returns the
/// target and the spawned process, if any.
///
/// # Cancel safety
///
/// Dropping the future kills a server it started.
async fn connect(args: &Args, data_root: &Path) -> Result<(HttpTarget, Option<SpawnedServer>)> {
    let client = reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .tcp_nodelay(true)
        .build()
        .context("could not build the HTTP client")?;
    let (base_url, about, spawned) = target::spawn_or_connect(
        &client,
        args.spawn,
        args.sluice_bin.as_deref(),
        &args.url,
        data_root,
    )
    .await?;
    eprintln!(
        "server {base_url} is up: version {}",
        about["version"]["number"]
    );
    Ok((
        HttpTarget {
            client,
            base_url,
            index: args.index.clone(),
        },
        spawned,
    ))
}

/// Returns `sluice` next to this binary, where `cargo build --release` puts both.
fn default_sluice_bin() -> Result<PathBuf> {
    let me =
        std::env::current_exe().context("could not find this binary's path to locate `sluice`")?;
    let bin = me.with_file_name(format!("sluice{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        bail!(
            "{} does not exist; build it with `cargo build --release -p sluice-server` or pass --sluice-bin",
            bin.display()
        );
    }
    Ok(bin)
}

/// Re-creates the index on the server, loads the documents, refreshes, and checks the count.
///
/// # Cancel safety
///
/// Dropping the future leaves the index partially loaded.
async fn load_over_http(target: &HttpTarget, args: &Args) -> Result<LoadSummary> {
    target.recreate_index().await?;
    eprintln!(
        "loading {} documents over HTTP in batches of {} from {} loaders…",
        args.docs, args.batch_size, args.loaders
    );
    let batches = Batches::new(
        args.seed,
        DEFAULT_START_EPOCH_MILLIS,
        args.docs,
        args.batch_size,
    );
    let load = target.load(batches, args.loaders).await?;
    let refresh = target.refresh().await?;
    let summary = LoadSummary::new(args.docs, load, refresh);
    eprintln!(
        "HTTP _bulk: {:.0} docs/s, refresh {:.2} s",
        summary.docs_per_sec, summary.refresh_secs
    );
    match target.count().await {
        Ok(count) if count == args.docs => {}
        Ok(count) => eprintln!(
            "warning: {} holds {count} documents after loading {}",
            target.index, args.docs
        ),
        Err(error) => eprintln!("warning: could not count the loaded documents: {error:#}"),
    }
    Ok(summary)
}

#[cfg(feature = "in-process")]
type InProcessTarget = in_process::InProcessTarget;

/// Stands in for the engine when the bench is built without the `in-process` feature.
#[cfg(not(feature = "in-process"))]
#[derive(Debug)]
enum InProcessTarget {}

/// Opens the in-process engine and loads it unless `--skip-load`.
#[cfg(feature = "in-process")]
fn open_in_process(
    args: &Args,
    data_root: &Path,
) -> Result<(Option<InProcessTarget>, Option<LoadSummary>)> {
    let target = InProcessTarget::open(&data_root.join("in-process"), &args.index)?;
    if args.skip_load {
        return Ok((Some(target), None));
    }
    target.recreate_index()?;
    eprintln!("loading {} documents in-process…", args.docs);
    let batches = Batches::new(
        args.seed,
        DEFAULT_START_EPOCH_MILLIS,
        args.docs,
        args.batch_size,
    );
    let load = target.load(batches, args.loaders)?;
    let refresh = target.refresh()?;
    let summary = LoadSummary::new(args.docs, load, refresh);
    eprintln!(
        "in-process bulk: {:.0} docs/s, refresh {:.2} s",
        summary.docs_per_sec, summary.refresh_secs
    );
    Ok((Some(target), Some(summary)))
}

#[cfg(not(feature = "in-process"))]
fn open_in_process(_: &Args, _: &Path) -> Result<(Option<InProcessTarget>, Option<LoadSummary>)> {
    eprintln!("warning: built without the `in-process` feature; measuring over HTTP only");
    Ok((None, None))
}

#[cfg(feature = "in-process")]
fn in_process_search(target: &InProcessTarget, body: &Value) -> std::result::Result<Value, String> {
    target.search(body)
}

#[cfg(not(feature = "in-process"))]
fn in_process_search(target: &InProcessTarget, _: &Value) -> std::result::Result<Value, String> {
    match *target {}
}

/// Runs the first body of each pool once on both targets and describes every disagreement.
///
/// Synchronous, so that the engine's blocking search never runs on a runtime thread.
fn cross_check(
    runtime: &tokio::runtime::Runtime,
    pools: &[QueryPool],
    http_target: &HttpTarget,
    in_process_target: &InProcessTarget,
) -> Vec<String> {
    let mut mismatches = Vec::new();
    for pool in pools {
        let body = &pool.values[0];
        let over_http = runtime
            .block_on(http_target.search(body))
            .map(|answer| answer_digest(&answer));
        let in_process =
            in_process_search(in_process_target, body).map(|answer| answer_digest(&answer));
        match (over_http, in_process) {
            (Ok(a), Ok(b)) if a == b => {}
            (a, b) => mismatches.push(format!(
                "{} answers differ for {body}: HTTP {}, in-process {}",
                pool.shape.name(),
                describe(&a),
                describe(&b)
            )),
        }
    }
    mismatches
}

/// Returns the parts of a search answer both targets must agree on: the hit count and the
/// aggregations. Scores and timings legitimately differ, hits with equal scores may tie-break
/// differently, so they are left out.
fn answer_digest(answer: &Value) -> Value {
    let total = match &answer["hits"]["total"] {
        Value::Object(total) => total.get("value").cloned().unwrap_or(Value::Null),
        other => other.clone(),
    };
    json!({ "total": total, "aggregations": answer.get("aggregations").cloned().unwrap_or(Value::Null) })
}

/// Describes a digest or a failure for the mismatch warning.
fn describe<E: std::fmt::Display>(outcome: &std::result::Result<Value, E>) -> String {
    match outcome {
        Ok(digest) => digest.to_string(),
        Err(error) => format!("error: {error}"),
    }
}

/// Prints one measurement's headline to stderr as it finishes, with its first error if any.
fn log_summary(shape: QueryShape, concurrency: usize, target: &str, summary: &Summary) {
    eprintln!(
        "{:<10} c={concurrency:<3} {target:<10} {:>8.0} qps  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}",
        shape.name(),
        summary.qps,
        summary.p50_ms,
        summary.p99_ms,
        summary.num_errors
    );
    if let Some(error) = &summary.first_error {
        eprintln!("  first error: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(["sluice-bench"].iter().chain(extra)).unwrap()
    }

    #[test]
    fn test_defaults_match_the_documented_invocation() {
        let args = args(&[]);
        assert_eq!(args.concurrency, [1, 8, 32]);
        assert_eq!(args.shapes, QueryShape::ALL);
        assert_eq!(args.url.as_str(), "http://127.0.0.1:9200/");
        assert_eq!(args.index, "logs");
        args.validate().unwrap();
    }

    #[test]
    fn test_lists_parse_comma_separated() {
        let args = args(&["--concurrency", "2,4", "--shapes", "term,bool_range"]);
        assert_eq!(args.concurrency, [2, 4]);
        assert_eq!(args.shapes, [QueryShape::Term, QueryShape::BoolRange]);
    }

    #[test]
    fn test_validate_rejects_out_of_range_values_by_flag_name() {
        for (flags, expected) in [
            (
                &["--concurrency", "1,0"][..],
                "--concurrency values must be between 1 and 512, got 0",
            ),
            (&["--docs", "0"][..], "--docs must be between 1"),
            (
                &["--duration-secs", "601"][..],
                "--duration-secs must be between 1 and 600, got 601",
            ),
            (
                &["--url", "http://10.1.2.3:9200"][..],
                "--url must point at this machine",
            ),
            (&["--index", "Logs"][..], "--index must be lowercase"),
            (&["--skip-load"][..], "--skip-load needs --data-dir"),
        ] {
            let error = args(flags).validate().unwrap_err().to_string();
            assert!(error.starts_with(expected), "{flags:?}: {error}");
        }
    }

    #[test]
    fn test_throttle_overhead_defaults_and_plan() {
        let args = args(&[
            "--scenario",
            "throttle-overhead",
            "--spawn",
            "--rounds",
            "3",
        ]);
        args.validate().unwrap();
        assert!(!args.measures_in_process());
        let plan = args.overhead_plan();
        assert_eq!(plan.configs, Config::ALL);
        assert_eq!(plan.rounds, 3);
        assert_eq!(
            plan.loads.iter().map(|l| l.clients).collect::<Vec<_>>(),
            [8, 64]
        );
        // The foundation scenario keeps measuring in-process.
        assert!(self::args(&[]).measures_in_process());
    }

    #[test]
    fn test_throttle_overhead_rejects_bad_flags_by_name() {
        for (flags, expected) in [
            (
                &["--no-http"][..],
                "--scenario throttle-overhead measures over HTTP",
            ),
            (
                &["--rounds", "0"][..],
                "--rounds must be between 1 and 100, got 0",
            ),
            (
                &["--burst-clients", "513"][..],
                "--burst-clients must be between 1 and 512, got 513",
            ),
            (
                &["--configs", "none,group,none"][..],
                "--configs lists none twice",
            ),
        ] {
            let mut all = vec!["--scenario", "throttle-overhead"];
            all.extend_from_slice(flags);
            let error = args(&all).validate().unwrap_err().to_string();
            assert!(error.starts_with(expected), "{flags:?}: {error}");
        }
        // --skip-load needs no --data-dir when nothing is measured in-process.
        args(&["--scenario", "throttle-overhead", "--skip-load"])
            .validate()
            .unwrap();
        // --mixed is the throttle-overhead scenario's, and makes a mixed plan.
        let mixed = args(&["--scenario", "throttle-overhead", "--mixed"]);
        mixed.validate().unwrap();
        assert!(mixed.overhead_plan().mixed);
        assert!(
            !args(&["--scenario", "throttle-overhead"])
                .overhead_plan()
                .mixed
        );
        let error = args(&["--mixed"]).validate().unwrap_err().to_string();
        assert!(
            error.starts_with("--mixed applies to --scenario throttle-overhead"),
            "{error}"
        );
    }

    #[test]
    fn test_spawn_conflicts_with_url_and_no_http() {
        assert!(
            Args::try_parse_from(["sluice-bench", "--spawn", "--url", "http://127.0.0.1:1"])
                .is_err()
        );
        assert!(Args::try_parse_from(["sluice-bench", "--spawn", "--no-http"]).is_err());
        assert!(Args::try_parse_from(["sluice-bench", "--no-http", "--no-in-process"]).is_err());
    }

    #[test]
    fn test_answer_digest_keeps_total_and_aggregations_only() {
        let answer = json!({
            "took": 3,
            "hits": {"total": {"value": 17, "relation": "eq"}, "max_score": 1.5, "hits": [{"_id": "1"}]},
            "aggregations": {"by_service": {"buckets": [{"key": "gateway", "doc_count": 9}]}}
        });
        let digest = answer_digest(&answer);
        assert_eq!(digest["total"], 17);
        assert_eq!(
            digest["aggregations"]["by_service"]["buckets"][0]["doc_count"],
            9
        );
        let mut slower = answer.clone();
        slower["took"] = json!(30);
        slower["hits"]["max_score"] = json!(2.0);
        assert_eq!(answer_digest(&slower), digest);
        let mut other = answer;
        other["hits"]["total"]["value"] = json!(16);
        assert_ne!(answer_digest(&other), digest);
    }
}
