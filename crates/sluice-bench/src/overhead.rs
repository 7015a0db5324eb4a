//! The `throttle-overhead` scenario: what the node-tier throttle costs a request it admits,
//! end to end over HTTP (issue #5, item 7).
//!
//! One node, one index, one cheap query shape. Each [`Config`] sends the same bodies, differing
//! only in how the requests are tagged: untagged into DEFAULT (never throttled), tagged into a
//! group without throttling, or tagged into a group whose `node_limit` is far above any load the
//! benchmark can create ([`NODE_LIMIT`]), so every request takes and releases a permit and none
//! is refused. Each [`LoadLevel`] is a closed loop of some number of clients.
//!
//! Machine noise on a shared box drifts over seconds to minutes, so the configurations are not
//! measured one after the other but interleaved: [`Plan::schedule`] runs every configuration at
//! every load once per round, rotating the order of the configurations from round to round, and
//! the rounds of a configuration are merged ([`Sample::merge`]) into its row. The ratios
//! ([`RATIO_PAIRS`]) are taken within the run, and the spread of the per-round ratios shows how
//! large the noise is next to the difference being measured.
//!
//! Noise that moves within seconds still lands on one configuration's window and not another's.
//! With [`Plan::mixed`], each round runs one window per load in which every client sends the
//! configurations in turn, request by request ([`measure::run_http_interleaved`]): the
//! configurations then share every moment of the machine, and what differs between their
//! latencies is what their own path adds to a request. Their throughputs are equal by
//! construction then, so a mixed run measures added latency, not lost throughput (the separate
//! windows, or the server's CPU per request, measure that).
//!
//! Each row is also split by node ([`NodeRow`]), to tell a cost of one node (a bucket's owner,
//! say) from a cost of all.
//!
//! Latency under a saturating load follows throughput, and throughput follows what each request
//! costs the servers. A window of one configuration also reads the nodes' process CPU time
//! (`_nodes/_local/stats/process`) when its measured part starts and after its last answer;
//! [`OverheadRow::cpu_ms_per_request`] divides it by the requests measured. CPU time hardly
//! moves with the machine's other load, so it shows a configuration's throughput cost more
//! steadily than its QPS does.
//!
//! Before and after the measurements, `GET /_wlm/stats` is read; the [`OverheadReport`] carries
//! each group's counter deltas and [`OverheadReport::problems`] lists what would make the numbers
//! meaningless: failed requests, throttled or rejected requests, tags that did not take.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use reqwest::header::HeaderMap;

use crate::http::HttpTarget;
use crate::load::LoadSummary;
use crate::measure::{self, Sample, Summary, Window};
use crate::queries::{QueryPool, QueryShape};
use crate::wlm::{self, DEFAULT_GROUP_ID, GroupCounters, GroupSpec};

/// `throttling.node_limit` of the throttled group: about 200 times the benchmark's largest
/// allowed concurrency (512), so no request of the run can be refused, while every request still
/// goes through the permit table and holds a permit until its response is sent.
pub const NODE_LIMIT: u64 = 100_000;

/// The group the `group` configuration tags requests with.
const THROTTLED_GROUP: GroupSpec = GroupSpec {
    name: "bench_throttled",
    node_limit: Some(NODE_LIMIT),
    shared_limit: None,
};

/// `throttling.shared_limit` of the shared-only group: as [`NODE_LIMIT`], far above any load
/// of the run, so every request takes a lease of the cluster-wide pool (from its bucket's
/// owner, over RPC unless the coordinator owns it) and none is refused.
pub const SHARED_LIMIT: u64 = 100_000;

/// The group the `shared` configuration tags requests with: shared-only (no `node_limit`).
const SHARED_GROUP: GroupSpec = GroupSpec {
    name: "bench_shared",
    node_limit: None,
    shared_limit: Some(SHARED_LIMIT),
};

/// The group the `tagged` configuration tags requests with: the same as [`THROTTLED_GROUP`]
/// without throttling.
const TAGGED_GROUP: GroupSpec = GroupSpec {
    name: "bench_tagged",
    node_limit: None,
    shared_limit: None,
};

/// The query shape the scenario measures: a `term` query returning 10 hits is about the
/// cheapest search, so a fixed per-request cost shows most in it.
pub const SHAPE: QueryShape = QueryShape::Term;

/// How the requests of one configuration are tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Config {
    /// Untagged: the requests run in DEFAULT, which is never throttled (the baseline).
    None,
    /// Tagged into a group without throttling: the cost of tagging, without a permit.
    Tagged,
    /// Tagged into a group with `attribute: group` and `node_limit` [`NODE_LIMIT`] (node-only).
    Group,
    /// Tagged into a shared-only group: `attribute: group`, `shared_limit` [`SHARED_LIMIT`],
    /// no `node_limit` — every request takes a lease of the cluster-wide tier. Meant for a
    /// run over several nodes of one cluster (`--url` a comma-separated list).
    Shared,
}

impl Config {
    /// Every configuration, in the order the scenario runs and reports them.
    pub const ALL: [Config; 3] = [Config::None, Config::Tagged, Config::Group];

    /// Every configuration the reports know, in report order.
    const ORDER: [Config; 4] = [Config::None, Config::Tagged, Config::Group, Config::Shared];

    /// Returns the configuration's name as used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Config::None => "none",
            Config::Tagged => "tagged",
            Config::Group => "group",
            Config::Shared => "shared",
        }
    }

    /// Returns the group the configuration's requests are tagged with, if any.
    fn group(self) -> Option<GroupSpec> {
        match self {
            Config::None => None,
            Config::Tagged => Some(TAGGED_GROUP),
            Config::Group => Some(THROTTLED_GROUP),
            Config::Shared => Some(SHARED_GROUP),
        }
    }
}

/// The name of a load pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// A few clients: the node keeps up and requests rarely wait for the search pool.
    Steady,
    /// Many clients: requests queue for the search pool and permits are held for longer.
    Burst,
}

impl Load {
    /// Returns the load's name as used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Load::Steady => "steady",
            Load::Burst => "burst",
        }
    }
}

/// A load pattern: a closed loop of `clients` concurrent requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LoadLevel {
    /// The pattern's name.
    pub load: Load,
    /// Concurrent clients, each sending its next request when the previous one is answered.
    pub clients: usize,
}

/// What the scenario measures and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The configurations, in their order in the first round; no duplicates.
    pub configs: Vec<Config>,
    /// The load patterns, in the order each round runs them.
    pub loads: Vec<LoadLevel>,
    /// How many times each configuration is measured at each load.
    pub rounds: usize,
    /// Unrecorded warm-up before each measured window.
    pub warmup: Duration,
    /// Length of each measured window.
    pub window: Duration,
    /// Whether each window mixes every configuration, request by request, instead of measuring
    /// one configuration.
    pub mixed: bool,
}

/// One measured window: a configuration at a load in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Round number, from 0.
    pub round: usize,
    /// Index into [`Plan::loads`].
    pub load: usize,
    /// The configuration measured.
    pub config: Config,
}

impl Plan {
    /// Returns the windows in the order they run: round by round, each load in turn, and the
    /// configurations rotated left by the round number, so that each configuration runs in each
    /// position (first after a load change, last before the next) equally often.
    ///
    /// A [`Plan::mixed`] plan runs every configuration in one window; its steps are one per
    /// round and load, with the first configuration of that round's order.
    pub fn schedule(&self) -> Vec<Step> {
        let mut steps = Vec::with_capacity(self.rounds * self.loads.len() * self.configs.len());
        for round in 0..self.rounds {
            let mut order = self.configs.clone();
            let num_configs = order.len();
            if num_configs > 0 {
                order.rotate_left(round % num_configs);
            }
            if self.mixed {
                order.truncate(1);
            }
            for load in 0..self.loads.len() {
                steps.extend(order.iter().map(|&config| Step {
                    round,
                    load,
                    config,
                }));
            }
        }
        steps
    }
}

/// One configuration at one load, over all rounds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OverheadRow {
    /// The load pattern.
    pub load: LoadLevel,
    /// The configuration.
    pub config: Config,
    /// All rounds merged.
    pub summary: Summary,
    /// Each round on its own, in round order.
    pub rounds: Vec<Summary>,
    /// The nodes' CPU time per measured request, in milliseconds, summed over the nodes; not
    /// measured in a mixed run, where the configurations share the windows.
    pub cpu_ms_per_request: Option<f64>,
}

/// One configuration at one load on one node, over all rounds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeRow {
    /// The load pattern.
    pub load: LoadLevel,
    /// The configuration.
    pub config: Config,
    /// The node's search URL.
    pub node: String,
    /// All rounds merged.
    pub summary: Summary,
    /// The node's CPU time per request measured on any node, in milliseconds (so the nodes'
    /// figures add up to the row's); not measured in a mixed run.
    pub cpu_ms_per_request: Option<f64>,
}

/// The ratios a report shows, as (configuration, baseline): each tagged configuration against
/// untagged DEFAULT, and the throttled group against the same group without throttling — the
/// permit's own cost, with tagging on both sides.
pub const RATIO_PAIRS: [(Config, Config); 5] = [
    (Config::Tagged, Config::None),
    (Config::Group, Config::None),
    (Config::Group, Config::Tagged),
    (Config::Shared, Config::None),
    (Config::Shared, Config::Group),
];

/// A configuration's latencies and throughput divided by the baseline's at the same load.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Ratio {
    /// The load pattern.
    pub load: LoadLevel,
    /// The configuration divided by the baseline.
    pub config: Config,
    /// The configuration it is divided by.
    pub baseline: Config,
    /// Ratio of the mean latencies.
    pub mean: f64,
    /// Ratio of the medians.
    pub p50: f64,
    /// Ratio of the 90th percentiles.
    pub p90: f64,
    /// Ratio of the 99th percentiles.
    pub p99: f64,
    /// Ratio of the throughputs.
    pub qps: f64,
    /// Ratio of the nodes' CPU time per request; NaN when it was not measured.
    pub cpu: f64,
    /// Smallest ratio of the mean latencies within one round.
    pub round_mean_min: f64,
    /// Largest ratio of the mean latencies within one round.
    pub round_mean_max: f64,
}

/// The counters of the group a configuration's requests ran in, over the whole run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupRow {
    /// The configuration.
    pub config: Config,
    /// The group's name (`DEFAULT_WORKLOAD_GROUP` for `none`).
    pub name: String,
    /// The group's id.
    pub id: String,
    /// How much each counter grew during the run, warm-ups included.
    pub delta: GroupCounters,
}

/// Everything one throttle-overhead run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OverheadReport {
    /// Seed of the documents and query bodies.
    pub seed: u64,
    /// Documents in the index.
    pub num_docs: u64,
    /// The server measured.
    pub url: String,
    /// The query shape.
    pub shape: QueryShape,
    /// Rounds per configuration and load.
    pub rounds: usize,
    /// Unrecorded seconds before each window.
    pub warmup_secs: f64,
    /// Measured seconds per window.
    pub window_secs: f64,
    /// Whether each window mixed every configuration request by request ([`Plan::mixed`]).
    pub mixed: bool,
    /// `node_limit` of the throttled group.
    pub node_limit: u64,
    /// Loading through `POST /_bulk`, if the run loaded.
    pub http_load: Option<LoadSummary>,
    /// One row per load and configuration, loads in plan order, configurations in
    /// [`Config::ALL`] order.
    pub rows: Vec<OverheadRow>,
    /// The rows split by node, in the same order, nodes in `--url` order; empty for one node.
    pub by_node: Vec<NodeRow>,
    /// The groups' counters.
    pub groups: Vec<GroupRow>,
}

/// Measures `plan` on the nodes behind `targets` (one, or several nodes of one cluster, each
/// holding the same index; requests go round-robin over them) with the bodies of `pool`.
///
/// Sets the cluster's WLM mode to `enabled` and re-creates the benchmark's groups first (on the
/// first node; it waits until every node's view has them);
/// `report` carries the fields this function does not know (seed, documents, load).
///
/// # Cancel safety
///
/// Dropping the future aborts the in-flight requests; the groups and mode stay as set.
pub async fn run(
    targets: &[HttpTarget],
    pool: &QueryPool,
    plan: &Plan,
    mut report: OverheadReport,
) -> Result<OverheadReport> {
    let target = &targets[0];
    wlm::set_mode(target, wlm::MODE_ENABLED).await?;
    let mut tags: Vec<(Config, String, String, HeaderMap)> = Vec::new();
    for &config in &plan.configs {
        let (name, id, headers) = match config.group() {
            None => (
                DEFAULT_GROUP_ID.to_owned(),
                DEFAULT_GROUP_ID.to_owned(),
                HeaderMap::new(),
            ),
            Some(spec) => {
                let id = wlm::recreate_group(target, &spec).await?;
                eprintln!("workload group {} is {id}", spec.name);
                let headers = wlm::tag_headers(&id)?;
                (spec.name.to_owned(), id, headers)
            }
        };
        tags.push((config, name, id, headers));
    }
    let ids: Vec<&str> = tags.iter().map(|(_, _, id, _)| id.as_str()).collect();
    for node in targets {
        wlm::wait_for_groups(node, &ids).await?;
    }
    let before = wlm::group_counters(target, &ids).await?;

    // samples[load][config][round], and by_node[load][config][node] over all rounds
    let mut samples: Vec<Vec<Vec<Sample>>> =
        vec![vec![Vec::with_capacity(plan.rounds); plan.configs.len()]; plan.loads.len()];
    let mut by_node: Vec<Vec<Vec<Sample>>> =
        vec![vec![vec![Sample::default(); targets.len()]; plan.configs.len()]; plan.loads.len()];
    // cpu[load][config]: each node's CPU milliseconds, and the requests the nodes served
    let mut cpu: Vec<Vec<(Vec<u64>, u64)>> =
        vec![vec![(vec![0; targets.len()], 0); plan.configs.len()]; plan.loads.len()];
    let search_urls: Vec<reqwest::Url> = targets.iter().map(HttpTarget::search_url).collect();
    for step in plan.schedule() {
        let level = plan.loads[step.load];
        // The configurations this window sends, by their index in the plan.
        let measured: Vec<usize> = if plan.mixed {
            (0..plan.configs.len()).collect()
        } else {
            vec![
                plan.configs
                    .iter()
                    .position(|&c| c == step.config)
                    .expect("the schedule holds only the plan's configurations"),
            ]
        };
        let headers: Vec<HeaderMap> = measured.iter().map(|&i| tags[i].3.clone()).collect();
        let window = Window::starting_now(plan.warmup, plan.window);
        let driver = measure::run_http_interleaved(
            &target.client,
            &search_urls,
            &pool.encoded,
            &headers,
            level.clients,
            window,
        );
        // Each node's CPU milliseconds over the measured part (not in a mixed window, whose
        // configurations share it).
        let (cells, cpu_used) = if plan.mixed {
            (driver.await, None)
        } else {
            let cpu_at_start = async {
                tokio::time::sleep_until(window.measure_from.into()).await;
                nodes_cpu_millis(targets).await
            };
            let (cells, cpu_at_start) = tokio::join!(driver, cpu_at_start);
            let (start, end) = (cpu_at_start?, nodes_cpu_millis(targets).await?);
            let used: Vec<u64> = end
                .iter()
                .zip(&start)
                .map(|(e, s)| e.saturating_sub(*s))
                .collect();
            (cells, Some(used))
        };
        for (&index, per_node) in measured.iter().zip(cells) {
            let mut sample = Sample::default();
            for (node, cell) in per_node.iter().enumerate() {
                sample.merge_concurrent(cell);
                by_node[step.load][index][node].merge(cell);
            }
            let summary = sample.summary();
            if let Some(used) = &cpu_used {
                let (total, served) = &mut cpu[step.load][index];
                for (total, used) in total.iter_mut().zip(used) {
                    *total += used;
                }
                *served += summary.num_requests + summary.num_errors;
            }
            eprintln!(
                "round {}/{} {:<6} c={:<3} {:<6} {:>6.0} qps  mean {:>6.2}  p50 {:>6.2}  p90 {:>6.2}  p99 {:>6.2} ms  errors {}",
                step.round + 1,
                plan.rounds,
                level.load.name(),
                level.clients,
                plan.configs[index].name(),
                summary.qps,
                summary.mean_ms,
                summary.p50_ms,
                summary.p90_ms,
                summary.p99_ms,
                summary.num_errors
            );
            if let Some(error) = &summary.first_error {
                eprintln!("  first error: {error}");
            }
            samples[step.load][index].push(sample);
        }
    }
    debug_assert!(
        samples
            .iter()
            .flatten()
            .all(|rounds| rounds.len() == plan.rounds)
    );

    let after = wlm::group_counters(target, &ids).await?;
    for (load_index, per_config) in samples.into_iter().enumerate() {
        let mut rows: Vec<OverheadRow> = per_config
            .into_iter()
            .zip(&plan.configs)
            .zip(&cpu[load_index])
            .map(|((rounds, &config), (cpu_ms, served))| {
                let mut merged = Sample::default();
                for sample in &rounds {
                    merged.merge(sample);
                }
                OverheadRow {
                    load: plan.loads[load_index],
                    config,
                    summary: merged.summary(),
                    rounds: rounds.iter().map(Sample::summary).collect(),
                    cpu_ms_per_request: per_request(cpu_ms.iter().sum(), *served),
                }
            })
            .collect();
        rows.sort_by_key(|row| Config::ORDER.iter().position(|&c| c == row.config));
        report.rows.extend(rows);
    }
    if targets.len() > 1 {
        for (load_index, per_config) in by_node.into_iter().enumerate() {
            let cpu = &cpu[load_index];
            let mut rows: Vec<NodeRow> = per_config
                .into_iter()
                .zip(&plan.configs)
                .zip(cpu)
                .flat_map(|((nodes, &config), (cpu_ms, served))| {
                    nodes.into_iter().zip(&search_urls).zip(cpu_ms).map(
                        move |((sample, url), &cpu_ms)| NodeRow {
                            load: plan.loads[load_index],
                            config,
                            node: url.to_string(),
                            summary: sample.summary(),
                            cpu_ms_per_request: per_request(cpu_ms, *served),
                        },
                    )
                })
                .collect();
            rows.sort_by_key(|row| Config::ORDER.iter().position(|&c| c == row.config));
            report.by_node.extend(rows);
        }
    }
    let mut groups: Vec<GroupRow> = tags
        .into_iter()
        .map(|(config, name, id, _)| GroupRow {
            config,
            delta: after[&id].since(&before[&id]),
            name,
            id,
        })
        .collect();
    groups.sort_by_key(|row| Config::ORDER.iter().position(|&c| c == row.config));
    report.groups = groups;
    Ok(report)
}

/// Returns the CPU milliseconds each server behind `targets` has used, in `targets` order.
async fn nodes_cpu_millis(targets: &[HttpTarget]) -> Result<Vec<u64>> {
    let mut used = Vec::with_capacity(targets.len());
    for target in targets {
        used.push(target.process_cpu_millis().await?);
    }
    Ok(used)
}

/// Returns `cpu_ms / served`, or `None` when no request was measured (or no CPU read: a
/// mixed run).
fn per_request(cpu_ms: u64, served: u64) -> Option<f64> {
    (served > 0).then(|| cpu_ms as f64 / served as f64)
}

impl OverheadReport {
    /// Returns the [`RATIO_PAIRS`] whose two configurations were measured, at each load, in
    /// row order.
    pub fn ratios(&self) -> Vec<Ratio> {
        let mut ratios = Vec::new();
        for row in &self.rows {
            for &(_, baseline) in RATIO_PAIRS.iter().filter(|(c, _)| *c == row.config) {
                let Some(baseline) = self
                    .rows
                    .iter()
                    .find(|b| b.load == row.load && b.config == baseline)
                else {
                    continue;
                };
                let (a, b) = (&row.summary, &baseline.summary);
                let per_round: Vec<f64> = row
                    .rounds
                    .iter()
                    .zip(&baseline.rounds)
                    .map(|(a, b)| divide(a.mean_ms, b.mean_ms))
                    .collect();
                ratios.push(Ratio {
                    load: row.load,
                    config: row.config,
                    baseline: baseline.config,
                    mean: divide(a.mean_ms, b.mean_ms),
                    p50: divide(a.p50_ms, b.p50_ms),
                    p90: divide(a.p90_ms, b.p90_ms),
                    p99: divide(a.p99_ms, b.p99_ms),
                    qps: divide(a.qps, b.qps),
                    cpu: match (row.cpu_ms_per_request, baseline.cpu_ms_per_request) {
                        (Some(a), Some(b)) => divide(a, b),
                        _ => f64::NAN,
                    },
                    round_mean_min: per_round.iter().copied().fold(f64::NAN, f64::min),
                    round_mean_max: per_round.iter().copied().fold(f64::NAN, f64::max),
                });
            }
        }
        ratios
    }

    /// Describes everything that makes the run's numbers unfit for the comparison: failed
    /// requests, throttled, rejected or cancelled requests, and tagged requests that did not
    /// reach their group. Empty for a clean run.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for row in &self.rows {
            if row.summary.num_errors > 0 {
                problems.push(format!(
                    "{} requests of config {} at {} load failed; the first: {}",
                    row.summary.num_errors,
                    row.config.name(),
                    row.load.load.name(),
                    row.summary.first_error.as_deref().unwrap_or("(not kept)")
                ));
            }
        }
        for group in &self.groups {
            let d = &group.delta;
            if d.total_throttled > 0 || d.total_would_throttle > 0 {
                problems.push(format!(
                    "group {} throttled {} requests (would have throttled {}); node_limit {} is not far above the load",
                    group.name, d.total_throttled, d.total_would_throttle, self.node_limit
                ));
            }
            if group.config == Config::Shared {
                if d.total_shared_throttled > 0 || d.total_shared_fail_open > 0 {
                    problems.push(format!(
                        "group {} was refused {} and failed open {} times in the shared tier; shared_limit {SHARED_LIMIT} is not far above the load or an owner was unreachable",
                        group.name, d.total_shared_throttled, d.total_shared_fail_open
                    ));
                }
                let measured: u64 = self
                    .rows
                    .iter()
                    .filter(|r| r.config == Config::Shared)
                    .map(|r| r.summary.num_requests)
                    .sum();
                if d.total_shared_acquired < measured {
                    problems.push(format!(
                        "group {} took {} shared leases for {measured} measured requests; the shared tier was not on their path",
                        group.name, d.total_shared_acquired
                    ));
                }
            }
            if d.total_rejections > 0 || d.total_cancellations > 0 {
                problems.push(format!(
                    "group {} rejected {} and cancelled {} requests for its resource limits",
                    group.name, d.total_rejections, d.total_cancellations
                ));
            }
            let measured: u64 = self
                .rows
                .iter()
                .filter(|r| r.config == group.config)
                .map(|r| r.summary.num_requests)
                .sum();
            if d.total_completions < measured {
                problems.push(format!(
                    "group {} completed {} tasks but {measured} requests of config {} were measured; the requests were not tagged into it",
                    group.name,
                    d.total_completions,
                    group.config.name()
                ));
            }
        }
        problems
    }

    /// Renders the run's parameters, the per-configuration table, the ratios and the counters.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Throttle overhead: `{}` query (size 10) on {} documents (seed {}); {} rounds of {:.0} s per {} after {:.0} s of warm-up, {}; node_limit {}",
            self.shape.name(),
            self.num_docs,
            self.seed,
            self.rounds,
            self.window_secs,
            if self.mixed {
                "load"
            } else {
                "config and load"
            },
            self.warmup_secs,
            if self.mixed {
                "configs mixed request by request in each window (their QPS are equal by construction)"
            } else {
                "configs interleaved"
            },
            self.node_limit
        );
        if let Some(load) = &self.http_load {
            let _ = writeln!(
                out,
                "HTTP `_bulk`: {:.0} docs/s ({} docs in {:.2} s, refresh {:.2} s)",
                load.docs_per_sec, load.num_docs, load.load_secs, load.refresh_secs
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| load | clients | config | requests | errors | QPS | mean ms | p50 ms | p90 ms | p99 ms | node CPU ms / request |"
        );
        let _ = writeln!(
            out,
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for row in &self.rows {
            let s = &row.summary;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                row.load.load.name(),
                row.load.clients,
                row.config.name(),
                s.num_requests,
                s.num_errors,
                s.qps,
                s.mean_ms,
                s.p50_ms,
                s.p90_ms,
                s.p99_ms,
                cpu_cell(row.cpu_ms_per_request)
            );
        }
        let ratios = self.ratios();
        if !ratios.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "| load | ratio | mean | p50 | p90 | p99 | QPS | CPU / request | mean, per round (min–max) |"
            );
            let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
            for r in &ratios {
                let _ = writeln!(
                    out,
                    "| {} | {}/{} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {:.3}–{:.3} |",
                    r.load.load.name(),
                    r.config.name(),
                    r.baseline.name(),
                    r.mean,
                    r.p50,
                    r.p90,
                    r.p99,
                    r.qps,
                    cpu_cell((!r.cpu.is_nan()).then_some(r.cpu)),
                    r.round_mean_min,
                    r.round_mean_max
                );
            }
        }
        if !self.by_node.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "| load | config | node | requests | mean ms | p50 ms | p90 ms | p99 ms | node CPU ms / request |"
            );
            let _ = writeln!(out, "|---|---|---|---:|---:|---:|---:|---:|---:|");
            for row in &self.by_node {
                let s = &row.summary;
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                    row.load.load.name(),
                    row.config.name(),
                    row.node,
                    s.num_requests,
                    s.mean_ms,
                    s.p50_ms,
                    s.p90_ms,
                    s.p99_ms,
                    cpu_cell(row.cpu_ms_per_request)
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| config | group | completions | total_throttled | total_would_throttle | total_rejections | total_cancellations |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
        for g in &self.groups {
            let d = &g.delta;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                g.config.name(),
                g.name,
                d.total_completions,
                d.total_throttled,
                d.total_would_throttle,
                d.total_rejections,
                d.total_cancellations
            );
        }
        let _ = writeln!(
            out,
            "\n(`GET /_wlm/stats` deltas over the run, warm-up requests included.)"
        );
        if let Some(group) = self.groups.iter().find(|g| g.config == Config::Group)
            && group.delta.total_throttled == 0
        {
            let _ = writeln!(
                out,
                "\ntotal_throttled stayed 0 in {} over {} completions.",
                group.name, group.delta.total_completions
            );
        }
        for problem in self.problems() {
            let _ = writeln!(out, "\nProblem: {problem}");
        }
        out
    }

    /// Returns the report as JSON, with the ratios and problems included.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value =
            serde_json::to_value(self).expect("the report holds only serialisable values");
        value["ratios"] =
            serde_json::to_value(self.ratios()).expect("ratios hold only serialisable values");
        value["problems"] = self.problems().into();
        value
    }
}

/// Renders a CPU figure for a table (a time per request, or a ratio): `–` when it was not
/// measured.
fn cpu_cell(ms: Option<f64>) -> String {
    ms.map_or_else(|| "–".to_owned(), |ms| format!("{ms:.3}"))
}

/// Returns `a / b`, or NaN when `b` is not positive.
fn divide(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(configs: &[Config], rounds: usize) -> Plan {
        Plan {
            configs: configs.to_vec(),
            loads: vec![
                LoadLevel {
                    load: Load::Steady,
                    clients: 8,
                },
                LoadLevel {
                    load: Load::Burst,
                    clients: 64,
                },
            ],
            rounds,
            warmup: Duration::from_secs(1),
            window: Duration::from_secs(3),
            mixed: false,
        }
    }

    #[test]
    fn test_schedule_rotates_configs_each_round_and_covers_every_window_once() {
        let plan = plan(&[Config::None, Config::Tagged, Config::Group], 3);
        let steps = plan.schedule();
        assert_eq!(steps.len(), 3 * 2 * 3);
        let order = |round: usize, load: usize| -> Vec<Config> {
            steps
                .iter()
                .filter(|s| s.round == round && s.load == load)
                .map(|s| s.config)
                .collect()
        };
        assert_eq!(order(0, 0), [Config::None, Config::Tagged, Config::Group]);
        assert_eq!(order(0, 1), [Config::None, Config::Tagged, Config::Group]);
        assert_eq!(order(1, 0), [Config::Tagged, Config::Group, Config::None]);
        assert_eq!(order(2, 1), [Config::Group, Config::None, Config::Tagged]);
        // Each configuration runs first in exactly one round.
        for config in Config::ALL {
            let firsts = (0..3).filter(|&r| order(r, 0)[0] == config).count();
            assert_eq!(firsts, 1, "{config:?}");
        }
        // Rounds run in order, loads in order within a round.
        assert!(
            steps
                .windows(2)
                .all(|w| (w[0].round, w[0].load) <= (w[1].round, w[1].load))
        );
    }

    #[test]
    fn test_mixed_schedule_runs_one_window_per_round_and_load() {
        let mut plan = plan(&[Config::None, Config::Group, Config::Shared], 3);
        plan.mixed = true;
        let steps = plan.schedule();
        let windows: Vec<(usize, usize)> = steps.iter().map(|s| (s.round, s.load)).collect();
        assert_eq!(windows, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
    }

    #[test]
    fn test_markdown_splits_rows_by_node_and_says_when_configs_were_mixed() {
        let mut report = report();
        assert!(report.to_markdown().contains("configs interleaved"));
        assert!(!report.to_markdown().contains("| node |"));
        report.mixed = true;
        report.by_node = vec![NodeRow {
            load: report.rows[0].load,
            config: Config::Group,
            node: "http://127.0.0.1:9201/bench/_search".into(),
            summary: summary(1.25, 800.0),
            cpu_ms_per_request: Some(0.125),
        }];
        let markdown = report.to_markdown();
        assert!(
            markdown.contains("configs mixed request by request"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| steady | group | http://127.0.0.1:9201/bench/_search | ")
                && markdown.contains("| 0.125 |"),
            "{markdown}"
        );
    }

    #[test]
    fn test_schedule_of_two_configs_alternates_which_runs_first() {
        let steps = plan(&[Config::None, Config::Group], 4).schedule();
        let firsts: Vec<Config> = steps
            .iter()
            .filter(|s| s.load == 0)
            .step_by(2)
            .map(|s| s.config)
            .collect();
        assert_eq!(
            firsts,
            [Config::None, Config::Group, Config::None, Config::Group]
        );
    }

    fn summary(mean_ms: f64, qps: f64) -> Summary {
        Summary {
            num_requests: 1000,
            num_errors: 0,
            elapsed_secs: 3.0,
            qps,
            mean_ms,
            p50_ms: mean_ms * 0.8,
            p90_ms: mean_ms * 2.0,
            p99_ms: mean_ms * 4.0,
            max_ms: mean_ms * 10.0,
            first_error: None,
        }
    }

    fn row(clients: usize, config: Config, rounds: &[f64]) -> OverheadRow {
        let load = LoadLevel {
            load: if clients > 8 {
                Load::Burst
            } else {
                Load::Steady
            },
            clients,
        };
        let mean = rounds.iter().sum::<f64>() / rounds.len() as f64;
        OverheadRow {
            load,
            config,
            summary: Summary {
                num_requests: 1000 * rounds.len() as u64,
                ..summary(mean, 1000.0 / mean)
            },
            rounds: rounds.iter().map(|&m| summary(m, 1000.0 / m)).collect(),
            cpu_ms_per_request: Some(mean / 10.0),
        }
    }

    fn group(config: Config, completions: u64, throttled: u64) -> GroupRow {
        GroupRow {
            config,
            name: config
                .group()
                .map_or(DEFAULT_GROUP_ID, |g| g.name)
                .to_owned(),
            id: format!("id-{}", config.name()),
            delta: GroupCounters {
                total_completions: completions,
                total_throttled: throttled,
                ..GroupCounters::default()
            },
        }
    }

    fn report() -> OverheadReport {
        OverheadReport {
            seed: 42,
            num_docs: 100_000,
            url: "http://127.0.0.1:1/".into(),
            shape: SHAPE,
            rounds: 2,
            warmup_secs: 1.0,
            window_secs: 3.0,
            mixed: false,
            node_limit: NODE_LIMIT,
            http_load: None,
            rows: vec![
                row(8, Config::None, &[1.0, 1.2]),
                row(8, Config::Group, &[1.1, 1.2]),
                row(64, Config::None, &[8.0, 8.0]),
                row(64, Config::Group, &[7.6, 8.4]),
            ],
            by_node: Vec::new(),
            groups: vec![group(Config::None, 4100, 0), group(Config::Group, 4100, 0)],
        }
    }

    #[test]
    fn test_ratios_divide_by_none_at_the_same_load_with_the_per_round_spread() {
        let ratios = report().ratios();
        assert_eq!(ratios.len(), 2);
        let steady = &ratios[0];
        assert_eq!(
            (steady.load.clients, steady.config, steady.baseline),
            (8, Config::Group, Config::None)
        );
        assert!((steady.mean - 1.15 / 1.1).abs() < 1e-9, "{steady:?}");
        assert!((steady.p99 - 1.15 / 1.1).abs() < 1e-9, "{steady:?}");
        assert!((steady.round_mean_min - 1.0).abs() < 1e-9, "{steady:?}");
        assert!((steady.round_mean_max - 1.1).abs() < 1e-9, "{steady:?}");
        assert!((steady.cpu - 1.15 / 1.1).abs() < 1e-9, "{steady:?}");
        let burst = &ratios[1];
        assert_eq!(burst.load.clients, 64);
        assert!((burst.mean - 1.0).abs() < 1e-9, "{burst:?}");
        assert!((burst.round_mean_min - 0.95).abs() < 1e-9, "{burst:?}");
        assert!((burst.round_mean_max - 1.05).abs() < 1e-9, "{burst:?}");

        // A mixed run measures no CPU per configuration: its ratio is not a number.
        let mut mixed = report();
        for row in &mut mixed.rows {
            row.cpu_ms_per_request = None;
        }
        assert!(mixed.ratios().iter().all(|r| r.cpu.is_nan()));
        assert!(mixed.to_markdown().contains("| – |"));
    }

    #[test]
    fn test_ratios_compare_group_to_tagged_when_both_ran() {
        let mut report = report();
        report.rows.insert(1, row(8, Config::Tagged, &[1.1, 1.1]));
        let pairs: Vec<(usize, Config, Config)> = report
            .ratios()
            .iter()
            .map(|r| (r.load.clients, r.config, r.baseline))
            .collect();
        assert_eq!(
            pairs,
            [
                (8, Config::Tagged, Config::None),
                (8, Config::Group, Config::None),
                (8, Config::Group, Config::Tagged),
                (64, Config::Group, Config::None),
            ]
        );
        let group_to_tagged = &report.ratios()[2];
        assert!((group_to_tagged.mean - 1.15 / 1.1).abs() < 1e-9);
        assert!((group_to_tagged.round_mean_min - 1.0).abs() < 1e-9);
        assert!(
            report
                .to_markdown()
                .contains("| steady | group/tagged | 1.045 |")
        );
    }

    #[test]
    fn test_clean_run_has_no_problems_and_says_throttled_stayed_zero() {
        let report = report();
        assert_eq!(report.problems(), Vec::<String>::new());
        let markdown = report.to_markdown();
        assert!(
            markdown
                .contains("| steady | 8 | group | 2000 | 0 | 870 | 1.15 | 0.92 | 2.30 | 4.60 |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| burst | group/none | 1.000 |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("total_throttled stayed 0 in bench_throttled over 4100 completions"),
            "{markdown}"
        );
        assert!(!markdown.contains("Problem:"), "{markdown}");
    }

    #[test]
    fn test_throttled_failed_or_untagged_requests_are_problems() {
        let mut report = report();
        report.groups[1].delta.total_throttled = 3;
        report.rows[1].summary.num_errors = 3;
        report.rows[1].summary.first_error = Some("status 429: rejected".into());
        report.groups[0].delta.total_completions = 10;
        let problems = report.problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].starts_with("3 requests of config group at steady load failed"));
        assert!(
            problems[1].contains("were not tagged into it"),
            "{problems:?}"
        );
        assert!(problems[2].starts_with("group bench_throttled throttled 3 requests"));
        let markdown = report.to_markdown();
        assert!(!markdown.contains("stayed 0"), "{markdown}");
        assert!(
            markdown.contains("Problem: group bench_throttled"),
            "{markdown}"
        );
    }

    #[test]
    fn test_json_carries_rows_ratios_groups_and_problems() {
        let json = report().to_json();
        assert_eq!(json["rows"][0]["config"], "none");
        assert_eq!(json["rows"][0]["load"]["load"], "steady");
        assert!((json["ratios"][1]["mean"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(json["groups"][1]["delta"]["total_throttled"], 0);
        assert_eq!(json["problems"], serde_json::json!([]));
    }
}
