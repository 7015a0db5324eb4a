//! What the node as a whole uses, for the duress trackers (issue #6 item 3), and the memory
//! budget task memory is measured against (item 2).
//!
//! - **CPU**: the process CPU clock (`CLOCK_PROCESS_CPUTIME_ID`, through `cpu-time`) between two
//!   samples, over the wall time between them and the node's cores: 1.0 = every core busy with
//!   this process for the whole interval (OpenSearch: process CPU percent / 100).
//! - **Memory in use**: jemalloc's `stats.allocated`, the bytes the application holds in live
//!   allocations — the counterpart of a JVM's used heap, which OpenSearch compares with its max
//!   heap. Page cache and the index files tantivy maps are not counted: the kernel gives those
//!   back under pressure, so they are not what puts a node in duress.
//! - **Memory budget**: `node.memory_budget` ([`MemoryBudget`]): bytes, or a percentage of the
//!   memory the node may use — the cgroup limit (v2 `memory.max`, v1
//!   `memory.limit_in_bytes`) when one is set and lower than the machine's, else `MemTotal`
//!   from `/proc/meminfo` ([`detect_memory_bytes`]).
//!
//! Parsing is split from reading the files, so the parsers are tested on fixed text.

use std::path::Path;
use std::time::{Duration, Instant};

/// cgroup v1 reports "no limit" as a huge number (`PAGE_COUNTER_MAX` pages, about 2^63 bytes);
/// any value at or above 2^60 bytes (an exbibyte) is treated as unlimited.
const UNLIMITED_BYTES: u64 = 1 << 60;

/// How `node.memory_budget` is set: an absolute size or a share of the detected memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryBudget {
    /// A percentage (`0 < p <= 100`) of [`detect_memory_bytes`].
    Percent(f64),
    /// An absolute number of bytes (`> 0`).
    Bytes(u64),
}

impl Default for MemoryBudget {
    /// All of the detected memory, as OpenSearch measures task memory against the whole heap.
    fn default() -> Self {
        MemoryBudget::Percent(100.0)
    }
}

impl MemoryBudget {
    /// What a valid value looks like, for configuration errors.
    pub const EXPECTED: &str = "expected a positive byte size such as 8gb or 512mb, or a \
         percentage of the node's memory (its cgroup limit, else the machine's) such as 50%";

    /// Parses `50%`, `12.5%`, `8gb`, `512mb` or a bare number of bytes; `None` when the value
    /// is malformed, zero, or a percentage outside `(0, 100]`.
    pub fn parse(s: &str) -> Option<MemoryBudget> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let p: f64 = p.trim().parse().ok()?;
            return (p.is_finite() && p > 0.0 && p <= 100.0).then_some(MemoryBudget::Percent(p));
        }
        sluice_wire::parse_byte_size(s)
            .filter(|&n| n > 0)
            .map(MemoryBudget::Bytes)
    }

    /// The budget in bytes, given the detected memory (0 when unknown: a percentage of an
    /// unknown amount is 0, which disables memory usage).
    pub fn resolve(&self, detected_bytes: u64) -> u64 {
        match *self {
            MemoryBudget::Bytes(n) => n,
            MemoryBudget::Percent(p) => (detected_bytes as f64 * p / 100.0) as u64,
        }
    }
}

/// Returns the memory this process may use: the lowest of the cgroup v2 and v1 limits of its
/// cgroup and the machine's `MemTotal`; 0 when none can be read.
pub fn detect_memory_bytes() -> u64 {
    let read = |p: &str| std::fs::read_to_string(Path::new(p)).ok();
    let cgroups = read("/proc/self/cgroup").unwrap_or_default();
    let (v2, v1) = cgroup_memory_paths(&cgroups);
    let mut candidates = Vec::new();
    if let Some(path) = v2 {
        candidates.push(format!("/sys/fs/cgroup{path}/memory.max"));
    }
    candidates.push("/sys/fs/cgroup/memory.max".to_string());
    if let Some(path) = v1 {
        candidates.push(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"));
    }
    candidates.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".to_string());
    let cgroup = candidates
        .iter()
        .filter_map(|p| read(p).as_deref().and_then(parse_cgroup_limit))
        .min();
    let total = read("/proc/meminfo")
        .as_deref()
        .and_then(parse_meminfo_total);
    [cgroup, total].into_iter().flatten().min().unwrap_or(0)
}

/// Returns the cgroup v2 path (`0::<path>`) and the v1 memory controller's path
/// (`<n>:...memory...:<path>`) of a `/proc/self/cgroup` text; a root path (`/`) is returned as
/// the empty string so it joins onto the mount point.
pub fn cgroup_memory_paths(text: &str) -> (Option<String>, Option<String>) {
    let mut v2 = None;
    let mut v1 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim().trim_end_matches('/').to_string();
        if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path);
        }
    }
    (v2, v1)
}

/// Parses a cgroup memory limit file: bytes, or `max` (v2) / a huge number (v1) for no limit.
pub fn parse_cgroup_limit(text: &str) -> Option<u64> {
    let n: u64 = text.trim().parse().ok()?;
    (n > 0 && n < UNLIMITED_BYTES).then_some(n)
}

/// Parses `MemTotal:  24684084 kB` out of `/proc/meminfo`, in bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = fields.next()?.parse().ok()?;
    let mult = match fields.next().map(str::to_ascii_lowercase).as_deref() {
        None | Some("b") => 1,
        Some("kb") => 1024,
        Some("mb") => 1024 * 1024,
        Some(_) => return None,
    };
    n.checked_mul(mult).filter(|&b| b > 0)
}

/// Returns the bytes the process holds in live allocations (jemalloc `stats.allocated`, after
/// refreshing jemalloc's statistics); `None` when jemalloc cannot say.
pub fn memory_in_use_bytes() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read()
        .ok()
        .map(|n| n as u64)
}

/// Measures the process's CPU use between successive samples.
#[derive(Debug)]
pub struct ProcessCpu {
    last: Option<(Instant, Duration)>,
}

impl Default for ProcessCpu {
    fn default() -> Self {
        ProcessCpu::start()
    }
}

impl ProcessCpu {
    /// Starts measuring from now.
    pub fn start() -> ProcessCpu {
        ProcessCpu {
            last: process_cpu().map(|cpu| (Instant::now(), cpu)),
        }
    }

    /// Returns the process's CPU use since the previous sample (or the start) as a fraction of
    /// `cores` (1.0 = all of them busy), and starts the next interval. 0 when the clock cannot
    /// be read, no time passed, or `cores` is 0.
    pub fn sample(&mut self, cores: u32) -> f64 {
        let now = process_cpu().map(|cpu| (Instant::now(), cpu));
        let fraction = match (self.last, now) {
            (Some((t0, c0)), Some((t1, c1))) => cpu_fraction(
                c1.saturating_sub(c0),
                t1.saturating_duration_since(t0),
                cores,
            ),
            _ => 0.0,
        };
        self.last = now;
        fraction
    }
}

/// Returns `cpu / wall / cores`, or 0 when `wall` or `cores` is zero.
pub fn cpu_fraction(cpu: Duration, wall: Duration, cores: u32) -> f64 {
    if wall.is_zero() || cores == 0 {
        return 0.0;
    }
    cpu.as_secs_f64() / wall.as_secs_f64() / f64::from(cores)
}

fn process_cpu() -> Option<Duration> {
    cpu_time::ProcessTime::try_now()
        .ok()
        .map(|t| t.as_duration())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_memory_budget_parses_sizes_and_percentages() {
        assert_eq!(
            MemoryBudget::parse("50%"),
            Some(MemoryBudget::Percent(50.0))
        );
        assert_eq!(
            MemoryBudget::parse(" 12.5 % "),
            Some(MemoryBudget::Percent(12.5))
        );
        assert_eq!(
            MemoryBudget::parse("100%"),
            Some(MemoryBudget::Percent(100.0))
        );
        assert_eq!(
            MemoryBudget::parse("8gb"),
            Some(MemoryBudget::Bytes(8 << 30))
        );
        assert_eq!(MemoryBudget::parse("1024"), Some(MemoryBudget::Bytes(1024)));
        for bad in [
            "0",
            "0%",
            "101%",
            "-5%",
            "abc",
            "",
            "%",
            "NaN%",
            "5 parsecs",
        ] {
            assert_eq!(MemoryBudget::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn test_memory_budget_resolves_against_detected_memory() {
        assert_eq!(MemoryBudget::Percent(50.0).resolve(1000), 500);
        assert_eq!(MemoryBudget::default().resolve(1000), 1000);
        assert_eq!(MemoryBudget::Bytes(7).resolve(1000), 7);
        assert_eq!(MemoryBudget::Percent(50.0).resolve(0), 0);
    }

    #[test]
    fn test_cgroup_paths_for_v1_v2_and_hybrid() {
        let v2 = "0::/user.slice/session-1.scope\n";
        assert_eq!(
            cgroup_memory_paths(v2),
            (Some("/user.slice/session-1.scope".into()), None)
        );
        let v1 = "9:name=systemd:/\n4:memory:/process_api/e1fb\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(
            cgroup_memory_paths(v1),
            (Some(String::new()), Some("/process_api/e1fb".into()))
        );
        assert_eq!(cgroup_memory_paths("garbage"), (None, None));
    }

    #[test]
    fn test_cgroup_limit_treats_max_and_huge_as_unlimited() {
        assert_eq!(parse_cgroup_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(parse_cgroup_limit("max\n"), None);
        assert_eq!(parse_cgroup_limit("9223372036854771712\n"), None);
        assert_eq!(parse_cgroup_limit("0"), None);
    }

    #[test]
    fn test_meminfo_total_in_bytes() {
        let text = "MemTotal:       24684084 kB\nMemFree:         7863416 kB\n";
        assert_eq!(parse_meminfo_total(text), Some(24684084 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn test_detected_memory_is_positive_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(detect_memory_bytes() > 0);
        }
    }

    #[test]
    fn test_cpu_fraction_divides_by_wall_and_cores() {
        let s = Duration::from_secs;
        assert_eq!(cpu_fraction(s(1), s(1), 2), 0.5);
        assert_eq!(cpu_fraction(s(4), s(2), 2), 1.0);
        assert_eq!(cpu_fraction(s(1), Duration::ZERO, 2), 0.0);
        assert_eq!(cpu_fraction(s(1), s(1), 0), 0.0);
    }

    #[test]
    fn test_process_cpu_sees_busy_work_and_live_memory_is_read() {
        let mut cpu = ProcessCpu::start();
        let started = Instant::now();
        let mut x = 1u64;
        while started.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let f = cpu.sample(1);
        assert!(f > 0.0, "busy loop measured as {f}");
        assert!(memory_in_use_bytes().is_some_and(|b| b > 0));
    }
}
