//! `sluice-bench gateway-overhead`: what sluice's gateway mode adds to a search's latency, side
//! by side with nginx as a reverse proxy, against the same upstream in one run (issue 13,
//! point 9).
//!
//! One upstream (an embedded `sluice serve`, loaded with the generated documents), and four
//! ways to reach it:
//!
//! - `direct`: the upstream itself (the baseline);
//! - `gateway`: a `sluice serve -E backend.type=upstream` in front of it, untagged requests
//!   (DEFAULT);
//! - `gateway-group`: the same gateway, requests tagged into a group with a node-tier throttle
//!   far above the load (every request takes a permit, none is refused);
//! - `nginx`: nginx (`proxy_pass` with upstream keep-alive, `limit_conn` far above the load),
//!   installed from Debian's packages by `scripts/gateway_bench.sh` when missing.
//!
//! Each is measured with the cheap `term` query at each client count under two loads:
//! `steady`, closed loops (each client sends its next request as soon as its answer arrived),
//! and `burst`, all clients' requests released at one instant at an idle server, the next burst
//! [`DEFAULT_BURST_GAP_MS`] after the last answer. The targets are interleaved round by round in
//! a rotating order as in `throttle-overhead`, so that the machine's drift falls on all of them
//! alike; the rounds of a target are merged. The report gives each target's latencies, what it
//! adds to `direct`'s p50 and p99, and its p50 and p99 as ratios of `direct`'s; then, when nginx
//! was measured, each gateway target against nginx round by round (`paired.rs`: the median
//! difference and a sign test), which the machine's drift between rounds does not blur.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use reqwest::Url;
use reqwest::header::HeaderMap;
use sluice_datagen::DEFAULT_START_EPOCH_MILLIS;
use tokio::process::{Child, Command};

use crate::http::HttpTarget;
use crate::load::Batches;
use crate::measure::{self, Sample, Summary, Window};
use crate::paired::Paired;
use crate::queries::{QueryPool, QueryShape, TimeSpan};
use crate::target::SpawnedServer;
use crate::wlm::{self, GroupSpec};

/// Most rounds.
const MAX_ROUNDS: usize = 100;

/// The group `gateway-group` tags requests with: a throttle no load of this benchmark reaches
/// (the bench's client cap is 512).
const GROUP: GroupSpec = GroupSpec {
    name: "bench_gateway",
    node_limit: Some(crate::overhead::NODE_LIMIT),
    shared_limit: None,
};

/// nginx's `limit_conn`: far above any client count (the bench caps clients at 512), so it
/// counts and never refuses, like the gateway group's throttle; nginx takes at most 65535.
const NGINX_LIMIT_CONN: u64 = 60_000;

/// Idle keep-alive connections nginx keeps to the upstream: above the largest client count
/// measured by default (32), so nginx does not open a connection per request.
const NGINX_KEEPALIVE: u32 = 64;

/// The pause between two bursts: long enough that the previous burst's answers are all out
/// and the servers idle (a `term` search takes ~1 ms), short enough for hundreds of bursts in
/// a window.
const DEFAULT_BURST_GAP_MS: u64 = 20;

/// How long nginx may take to listen.
const NGINX_START: Duration = Duration::from_secs(10);

/// The ways to reach the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum Via {
    /// The upstream itself.
    Direct,
    /// sluice's gateway, untagged.
    Gateway,
    /// sluice's gateway, tagged into a throttled group.
    GatewayGroup,
    /// nginx as a reverse proxy with `limit_conn`.
    Nginx,
}

impl Via {
    /// Every way, in report order.
    pub const ALL: [Via; 4] = [Via::Direct, Via::Gateway, Via::GatewayGroup, Via::Nginx];

    fn name(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Gateway => "gateway",
            Via::GatewayGroup => "gateway-group",
            Via::Nginx => "nginx",
        }
    }
}

/// How the clients send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum Load {
    /// Closed loops: each client sends again as soon as its answer arrived.
    Steady,
    /// All clients at one instant, then a pause ([`GatewayArgs::burst_gap_ms`]).
    Burst,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::Steady => "steady",
            Load::Burst => "burst",
        }
    }
}

/// Options of the gateway-overhead scenario.
#[derive(Debug, clap::Args)]
pub struct GatewayArgs {
    /// The `sluice` binary started as upstream and gateway [default: next to this binary].
    #[arg(long)]
    sluice_bin: Option<PathBuf>,

    /// The nginx binary.
    #[arg(long, default_value = "/usr/sbin/nginx")]
    nginx_bin: PathBuf,

    /// Directory for the servers' data, logs and nginx's config [default: a temporary one].
    #[arg(long)]
    data_dir: Option<PathBuf>,

    /// Documents loaded into the upstream.
    #[arg(long, default_value_t = 100_000)]
    docs: u64,

    /// Seed of the documents and of the query bodies.
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Client counts (closed loops), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    clients: Vec<usize>,

    /// Loads, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Load::Steady, Load::Burst])]
    loads: Vec<Load>,

    /// Milliseconds between the last answer of a burst and the next burst.
    #[arg(long, default_value_t = DEFAULT_BURST_GAP_MS)]
    burst_gap_ms: u64,

    /// Rounds; each measures every target at every load and client count once.
    #[arg(long, default_value_t = 5)]
    rounds: usize,

    /// Seconds measured per target, client count and round.
    #[arg(long, default_value_t = 3)]
    duration_secs: u64,

    /// Unrecorded seconds before each measured window.
    #[arg(long, default_value_t = 1)]
    warmup_secs: u64,

    /// Ways to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Via::ALL)]
    via: Vec<Via>,

    /// Also write the results as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,

    /// Run the gateway and nginx on these CPUs alone (a `taskset` list: `1`, `2-3`), apart from
    /// the upstream and the clients, as a proxy on hosts of its own runs. The bench itself
    /// must then run on other CPUs (`taskset -c 0 sluice-bench gateway-overhead
    /// --proxy-cpus 1`); the upstream inherits its CPUs. Without it every process shares every
    /// CPU, and what a proxy adds at 8 and 32 clients is mostly the CPU it takes from them.
    #[arg(long)]
    proxy_cpus: Option<String>,
}

impl GatewayArgs {
    fn validate(&self) -> Result<()> {
        if self.docs == 0 || self.docs > crate::MAX_DOCS {
            bail!(
                "--docs must be between 1 and {}, got {}",
                crate::MAX_DOCS,
                self.docs
            );
        }
        if self.clients.is_empty()
            || self
                .clients
                .iter()
                .any(|c| *c == 0 || *c > crate::MAX_CONCURRENCY)
        {
            bail!(
                "--clients must list counts between 1 and {}, got {:?}",
                crate::MAX_CONCURRENCY,
                self.clients
            );
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            bail!(
                "--rounds must be between 1 and {MAX_ROUNDS}, got {}",
                self.rounds
            );
        }
        if self.duration_secs == 0 || self.duration_secs > crate::MAX_DURATION_SECS {
            bail!(
                "--duration-secs must be between 1 and {}, got {}",
                crate::MAX_DURATION_SECS,
                self.duration_secs
            );
        }
        if self.loads.is_empty() {
            bail!("--loads must name steady, burst or both");
        }
        if self.burst_gap_ms > 10_000 {
            bail!(
                "--burst-gap-ms must be at most 10000, got {}",
                self.burst_gap_ms
            );
        }
        if self.via.is_empty() || !self.via.contains(&Via::Direct) {
            bail!("--via must include direct, the baseline");
        }
        if let Some(proxy) = &self.proxy_cpus {
            let proxy = cpu_list(proxy).with_context(|| {
                format!("--proxy-cpus must be a CPU list such as 1 or 2-3, got {proxy:?}")
            })?;
            let own = own_cpus()?;
            if own.iter().any(|c| proxy.contains(c)) {
                bail!(
                    "--proxy-cpus {proxy:?} overlaps the CPUs this bench runs on ({own:?}), which \
                     the upstream and the clients use: run the bench on the others, e.g. \
                     `taskset -c 0 sluice-bench gateway-overhead --proxy-cpus 1`"
                );
            }
        }
        Ok(())
    }
}

/// The CPUs of a `taskset`/cpuset list (`0`, `0-1`, `0,2-3`).
fn cpu_list(list: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (u32, u32) = (lo.trim().parse()?, hi.trim().parse()?);
        if lo > hi || hi >= 1024 {
            bail!("{part:?} is not a CPU range");
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

/// The CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`).
fn own_cpus() -> Result<Vec<u32>> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("could not read /proc/self/status")?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .context("/proc/self/status has no Cpus_allowed_list")?;
    cpu_list(list)
}

/// One target at one load and client count, over all rounds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// How the upstream was reached.
    pub via: Via,
    /// How the clients sent.
    pub load: Load,
    /// Concurrent clients.
    pub clients: usize,
    /// All rounds merged.
    pub summary: Summary,
    /// p50 minus `direct`'s p50 at the same client count, ms.
    pub added_p50_ms: f64,
    /// p99 minus `direct`'s p99 at the same client count, ms.
    pub added_p99_ms: f64,
    /// p50 over `direct`'s p50 at the same load and client count.
    pub p50_ratio: f64,
    /// p99 over `direct`'s p99 at the same load and client count.
    pub p99_ratio: f64,
}

/// Runs the scenario.
pub fn main(args: &GatewayArgs) -> Result<()> {
    args.validate()?;
    let (root, _temp) = match &args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("could not create --data-dir {}", dir.display()))?;
            (dir.clone(), None)
        }
        None => {
            let temp = tempfile::Builder::new()
                .prefix("sluice-gateway-bench-")
                .tempdir()
                .context("could not create a temporary data dir")?;
            (temp.path().to_owned(), Some(temp))
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("could not start the tokio runtime")?;
    let report = runtime.block_on(run(args, &root))?;
    print!("{}", to_markdown(&report.rows));
    if !report.comparisons.is_empty() {
        print!("\n{}", comparisons_markdown(&report.comparisons));
    }
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("could not write {}", out.display()))?;
    }
    Ok(())
}

async fn run(args: &GatewayArgs, root: &Path) -> Result<Report> {
    let bin = match &args.sluice_bin {
        Some(b) => b.clone(),
        None => crate::default_sluice_bin()?,
    };
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(crate::HTTP_TIMEOUT)
        .build()
        .context("could not build the HTTP client")?;
    let dir = |name: &str| -> Result<PathBuf> {
        let d = root.join(name);
        std::fs::create_dir_all(&d).with_context(|| format!("could not create {}", d.display()))?;
        Ok(d)
    };
    let upstream =
        SpawnedServer::start(&bin, &dir("upstream")?, &root.join("upstream.log")).await?;
    crate::target::wait_until_ready(&client, &upstream.base_url).await?;
    let direct = HttpTarget {
        client: client.clone(),
        base_url: upstream.base_url.clone(),
        index: "logs".into(),
    };
    direct.recreate_index().await?;
    eprintln!(
        "loading {} documents into {}…",
        args.docs, upstream.base_url
    );
    direct
        .load(
            Batches::new(args.seed, DEFAULT_START_EPOCH_MILLIS, args.docs, 5000),
            2,
        )
        .await?;
    direct.refresh().await?;
    let upstream_host = upstream.base_url.as_str().trim_end_matches('/').to_string();
    let gateway_server = SpawnedServer::start_with(
        &bin,
        &dir("gateway")?,
        &root.join("gateway.log"),
        &[
            "backend.type=upstream".to_string(),
            format!("backend.upstream.hosts={upstream_host}"),
        ],
        args.proxy_cpus.as_deref(),
    )
    .await?;
    crate::target::wait_until_ready(&client, &gateway_server.base_url).await?;
    let gateway = HttpTarget {
        client: client.clone(),
        base_url: gateway_server.base_url.clone(),
        index: "logs".into(),
    };
    wlm::set_mode(&gateway, wlm::MODE_ENABLED).await?;
    let group_id = wlm::recreate_group(&gateway, &GROUP).await?;
    let _nginx = if args.via.contains(&Via::Nginx) {
        Some(
            Nginx::start(
                &args.nginx_bin,
                &dir("nginx")?,
                &upstream_host,
                &client,
                args.proxy_cpus.as_deref(),
            )
            .await?,
        )
    } else {
        None
    };
    let targets: Vec<(Via, Url, HeaderMap)> = args
        .via
        .iter()
        .map(|&via| -> Result<(Via, Url, HeaderMap)> {
            let (base, headers) = match via {
                Via::Direct => (upstream.base_url.clone(), HeaderMap::new()),
                Via::Gateway => (gateway_server.base_url.clone(), HeaderMap::new()),
                Via::GatewayGroup => (
                    gateway_server.base_url.clone(),
                    wlm::tag_headers(&group_id)?,
                ),
                Via::Nginx => (
                    _nginx.as_ref().expect("nginx started").base_url.clone(),
                    HeaderMap::new(),
                ),
            };
            Ok((via, base.join("logs/_search")?, headers))
        })
        .collect::<Result<_>>()?;
    let span = TimeSpan::of_generated(DEFAULT_START_EPOCH_MILLIS, args.docs);
    let pool = QueryPool::new(QueryShape::Term, args.seed, span);
    let before = wlm::group_counters(&gateway, &[group_id.as_str()]).await?;
    // samples[load][clients][target]
    let mut samples: Vec<Vec<Vec<Sample>>> =
        vec![vec![vec![Sample::default(); targets.len()]; args.clients.len()]; args.loads.len()];
    // Each round's own p50 and p99, for the paired comparison: per_round[load][clients][target].
    let mut per_round: Vec<Vec<Vec<RoundFigures>>> =
        vec![
            vec![vec![RoundFigures::default(); targets.len()]; args.clients.len()];
            args.loads.len()
        ];
    let gap = Duration::from_millis(args.burst_gap_ms);
    for round in 0..args.rounds {
        for (li, &load) in args.loads.iter().enumerate() {
            for (ci, &clients) in args.clients.iter().enumerate() {
                for k in 0..targets.len() {
                    let ti = (k + round) % targets.len();
                    let (via, url, headers) = &targets[ti];
                    let window = Window::starting_now(
                        Duration::from_secs(args.warmup_secs),
                        Duration::from_secs(args.duration_secs),
                    );
                    let bodies = &pool.encoded;
                    let sample = match load {
                        Load::Steady => {
                            measure::run_http(
                                &client,
                                std::slice::from_ref(url),
                                bodies,
                                headers,
                                clients,
                                window,
                            )
                            .await
                        }
                        Load::Burst => {
                            measure::run_http_bursts(
                                &client, url, bodies, headers, clients, gap, window,
                            )
                            .await
                        }
                    };
                    let s = sample.summary();
                    eprintln!(
                        "round {}/{} {:<6} c={clients:<3} {:<13} {:>6.0} qps  p50 {:>6.2}  p99 {:>6.2} ms  errors {}",
                        round + 1,
                        args.rounds,
                        load.name(),
                        via.name(),
                        s.qps,
                        s.p50_ms,
                        s.p99_ms,
                        s.num_errors
                    );
                    if let Some(e) = &s.first_error {
                        eprintln!("  first error: {e}");
                    }
                    per_round[li][ci][ti].p50_ms.push(s.p50_ms);
                    per_round[li][ci][ti].p99_ms.push(s.p99_ms);
                    samples[li][ci][ti].merge(&sample);
                }
            }
        }
    }
    let after = wlm::group_counters(&gateway, &[group_id.as_str()]).await?;
    let delta = after[&group_id].since(&before[&group_id]);
    if delta.total_throttled + delta.total_rejections + delta.total_cancellations > 0 {
        bail!(
            "the gateway group refused or cancelled requests ({delta:?}): the run does not measure the admitted path"
        );
    }
    let group_sent: u64 = targets
        .iter()
        .position(|(v, _, _)| *v == Via::GatewayGroup)
        .map(|ti| {
            samples
                .iter()
                .flat_map(|by_clients| by_clients.iter().map(|t| t[ti].summary().num_requests))
                .sum()
        })
        .unwrap_or(0);
    if delta.total_completions < group_sent {
        bail!(
            "the gateway group completed {} tasks but {group_sent} tagged requests were measured: the tag did not take",
            delta.total_completions
        );
    }
    let mut rows = Vec::new();
    let mut comparisons = Vec::new();
    let nginx = targets.iter().position(|(v, _, _)| *v == Via::Nginx);
    for (li, &load) in args.loads.iter().enumerate() {
        for (ci, &clients) in args.clients.iter().enumerate() {
            let direct = targets
                .iter()
                .position(|(v, _, _)| *v == Via::Direct)
                .map(|i| samples[li][ci][i].summary())
                .expect("direct is measured");
            for (ti, (via, _, _)) in targets.iter().enumerate() {
                let summary = samples[li][ci][ti].summary();
                if summary.num_errors > 0 {
                    bail!(
                        "{} {} at {clients} clients had {} failed requests; first: {:?}",
                        via.name(),
                        load.name(),
                        summary.num_errors,
                        summary.first_error
                    );
                }
                rows.push(row(*via, load, clients, summary, &direct));
            }
            let Some(ni) = nginx else { continue };
            let against = &per_round[li][ci][ni];
            for (ti, (via, _, _)) in targets.iter().enumerate() {
                if !matches!(via, Via::Gateway | Via::GatewayGroup) {
                    continue;
                }
                let mine = &per_round[li][ci][ti];
                if let (Some(p50), Some(p99)) = (
                    Paired::of(&mine.p50_ms, &against.p50_ms),
                    Paired::of(&mine.p99_ms, &against.p99_ms),
                ) {
                    comparisons.push(Comparison {
                        via: *via,
                        load,
                        clients,
                        p50,
                        p99,
                    });
                }
            }
        }
    }
    Ok(Report { rows, comparisons })
}

/// One target's p50s and p99s, a value a round.
#[derive(Debug, Clone, Default)]
struct RoundFigures {
    p50_ms: Vec<f64>,
    p99_ms: Vec<f64>,
}

/// A gateway target against nginx at one load and client count, round by round (the two were
/// measured seconds apart in each round, so the machine's drift between rounds cancels).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    /// The gateway target.
    pub via: Via,
    /// How the clients sent.
    pub load: Load,
    /// Concurrent clients.
    pub clients: usize,
    /// The gateway's p50 minus nginx's, round by round.
    pub p50: Paired,
    /// The gateway's p99 minus nginx's, round by round.
    pub p99: Paired,
}

/// What a run found: every target's merged figures, and the gateway's paired comparison with
/// nginx when both were measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// One row a target, load and client count, rounds merged.
    pub rows: Vec<Row>,
    /// One a gateway target, load and client count (none without nginx).
    pub comparisons: Vec<Comparison>,
}

/// A target's row: its summary and how it compares with `direct`'s.
fn row(via: Via, load: Load, clients: usize, summary: Summary, direct: &Summary) -> Row {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    Row {
        via,
        load,
        clients,
        added_p50_ms: summary.p50_ms - direct.p50_ms,
        added_p99_ms: summary.p99_ms - direct.p99_ms,
        p50_ratio: ratio(summary.p50_ms, direct.p50_ms),
        p99_ratio: ratio(summary.p99_ms, direct.p99_ms),
        summary,
    }
}

fn to_markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| load | clients | via | requests | QPS | p50 ms | p99 ms | added p50 ms | added p99 ms | p50 / direct | p99 / direct |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let s = &r.summary;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:+.2} | {:+.2} | {:.3} | {:.3} |",
            r.load.name(),
            r.clients,
            r.via.name(),
            s.num_requests,
            s.qps,
            s.p50_ms,
            s.p99_ms,
            r.added_p50_ms,
            r.added_p99_ms,
            r.p50_ratio,
            r.p99_ratio
        );
    }
    out
}

/// The paired comparisons as Markdown: a difference's median over the rounds, how many rounds
/// it went each way, and the sign test's p-value.
fn comparisons_markdown(comparisons: &[Comparison]) -> String {
    let mut out = String::from(
        "Round by round against nginx (gateway minus nginx; rounds higher / lower; sign test p):\n\n\
         | load | clients | via | rounds | p50 diff ms (median) | p50 higher / lower | p50 p | p99 diff ms (median) | p99 higher / lower | p99 p |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in comparisons {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:+.3} | {} / {} | {:.3} | {:+.3} | {} / {} | {:.3} |",
            c.load.name(),
            c.clients,
            c.via.name(),
            c.p50.rounds,
            c.p50.median_ms,
            c.p50.higher,
            c.p50.lower,
            c.p50.sign_test_p,
            c.p99.median_ms,
            c.p99.higher,
            c.p99.lower,
            c.p99.sign_test_p
        );
    }
    out
}

/// nginx as a reverse proxy in front of the upstream; stopped when dropped.
struct Nginx {
    child: Child,
    base_url: Url,
    bin: PathBuf,
    conf: PathBuf,
}

impl Drop for Nginx {
    /// Stops nginx with `nginx -s stop` and waits (up to [`NGINX_START`]) for the master to
    /// end its workers and exit: killing the master alone, as `kill_on_drop` does, would leave
    /// the workers running.
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.bin)
            .arg("-c")
            .arg(&self.conf)
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = std::time::Instant::now() + NGINX_START;
        while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Nginx {
    /// Writes a config into `dir` and starts nginx in the foreground on a free port.
    async fn start(
        bin: &Path,
        dir: &Path,
        upstream_host: &str,
        client: &reqwest::Client,
        cpus: Option<&str>,
    ) -> Result<Nginx> {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        let upstream = upstream_host.trim_start_matches("http://");
        let d = dir.display();
        // One worker a CPU nginx may use (`auto` counts the machine's, whatever its mask).
        let workers = match cpus {
            Some(cpus) => cpu_list(cpus)?.len().to_string(),
            None => "auto".to_string(),
        };
        let conf = format!(
            "user root root;\nworker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               limit_conn_zone $server_name zone=perserver:1m;\n\
               upstream search {{ server {upstream}; keepalive {NGINX_KEEPALIVE}; }}\n\
               server {{\n    listen 127.0.0.1:{port};\n    limit_conn perserver {NGINX_LIMIT_CONN};\n\
                 location / {{\n      proxy_pass http://search;\n      proxy_http_version 1.1;\n\
                   proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf)
            .with_context(|| format!("could not write {}", path.display()))?;
        let mut command = match cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = command
            .arg("-c")
            .arg(&path)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "could not start {}; install nginx (scripts/gateway_bench.sh does) or pass --nginx-bin",
                    bin.display()
                )
            })?;
        let base_url = Url::parse(&format!("http://127.0.0.1:{port}/"))?;
        let deadline = tokio::time::Instant::now() + NGINX_START;
        while client.get(base_url.clone()).send().await.is_err() {
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "nginx did not listen on {base_url} within {NGINX_START:?}; see {d}/error.log"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("started nginx at {base_url}");
        Ok(Nginx {
            child,
            base_url,
            bin: bin.to_owned(),
            conf: path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_cpu_lists_read_as_taskset_writes_them() {
        assert_eq!(cpu_list("1").unwrap(), vec![1]);
        assert_eq!(cpu_list("0-1").unwrap(), vec![0, 1]);
        assert_eq!(cpu_list("0,2-3\n").unwrap(), vec![0, 2, 3]);
        for bad in ["", "x", "3-1", "1-", "-1", "0,,1"] {
            assert!(cpu_list(bad).is_err(), "{bad:?} was read as a CPU list");
        }
    }

    #[test]
    fn test_this_process_has_cpus() {
        assert!(!own_cpus().unwrap().is_empty());
    }
}
