//! Resource accounting: the CPU time and memory a task uses, measured on the threads that work
//! for it (issue #6 item 1), and the node-level figures the duress trackers read.
//!
//! - **CPU**: the thread CPU clock (`CLOCK_THREAD_CPUTIME_ID`, through `cpu-time`). A search
//!   runs on one search-pool thread from start to end, so the clock's advance over the task is
//!   the task's CPU time.
//! - **Memory**: jemalloc's per-thread cumulative allocated-bytes counter
//!   (`thread.allocatedp`), read as a pointer, so a sample costs a load. The bytes a task
//!   allocated are the counter's advance over the task — allocations, not live memory, which is
//!   what OpenSearch's per-task memory tracking reports too.
//!
//! jemalloc is the process's global allocator (declared here, so every binary that links the
//! server — `sluice`, the tests — measures the same way).
//!
//! A [`ThreadUsage`] is started on the task's thread when its work starts and sampled at the
//! engine's cancellation checkpoints and at the end, so a long search's usage is visible while
//! it runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once when it starts (its `malloc_conf`, under the prefix
/// `tikv-jemalloc-sys` builds it with); the environment's `_RJEM_MALLOC_CONF` still overrides
/// them.
///
/// - `tcache_gc_incr_bytes`: a thread's cache of freed blocks is trimmed (the blocks it did not
///   reuse since the last pass handed back to the shared arena) each time the thread has
///   allocated this many bytes. jemalloc's default, 64 KB, is five gateway searches (about
///   12.7 KB each): each pass walked every size class (about 4,100 instructions) and handed
///   back blocks the next searches took again from the arena, 3 % of a proxied search's
///   instructions (BENCHMARKS.md "The allocator's cache trims, and the answer boxed"). At
///   1 MB it is about 80 searches. What a thread's cache may hold is not changed (jemalloc
///   bounds each size class's count), only how soon an unused block goes back; a thread that
///   stops allocating makes no passes, as before.
#[used]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"tcache_gc_incr_bytes:1048576".as_ptr());

/// The C string jemalloc reads its options from: a `const char *`, as it declares it.
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a string literal, immutable and alive for the whole program.
unsafe impl Sync for MallocConf {}

/// What a task has used so far; written by its thread, read by `_tasks` and the enforcement
/// loop (relaxed: each figure is a monotone sample, read for reporting and decisions that
/// tolerate one sample of staleness).
#[derive(Debug, Default)]
pub struct TaskUsage {
    cpu_nanos: AtomicU64,
    memory_bytes: AtomicU64,
    /// When a search thread started the task's work (after any wait in the pool's queue).
    executing_since: std::sync::OnceLock<std::time::Instant>,
    /// The part of `cpu_nanos` already charged to the group's CPU quota.
    charged_cpu_nanos: AtomicU64,
    /// When the figures were last taken elsewhere than on the task's own thread (a gateway's
    /// poll of its upstream): what they are figures *at* ([`TaskUsage::record_at`]).
    measured_at: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl TaskUsage {
    /// Marks the moment a search thread starts the task's work; later calls change nothing.
    pub fn mark_executing(&self) {
        self.mark_executing_at(std::time::Instant::now());
    }

    /// [`Self::mark_executing`] with the moment read by the caller, which uses the same reading
    /// (a forwarded search's exchange starts then).
    pub fn mark_executing_at(&self, at: std::time::Instant) {
        let _ = self.executing_since.set(at);
    }

    /// When the task's work started on a search thread; `None` while it is queued.
    pub fn executing_since(&self) -> Option<std::time::Instant> {
        self.executing_since.get().copied()
    }

    /// CPU time so far, nanoseconds.
    pub fn cpu_nanos(&self) -> u64 {
        self.cpu_nanos.load(Ordering::Relaxed)
    }

    /// Bytes allocated so far.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes.load(Ordering::Relaxed)
    }

    /// The CPU time used since the last call (or since the start), marking it charged: what a
    /// group's CPU quota is to be charged for this task now. Concurrent callers split it: each
    /// nanosecond is taken once.
    pub fn take_uncharged_cpu(&self) -> u64 {
        let now = self.cpu_nanos();
        let before = self.charged_cpu_nanos.fetch_max(now, Ordering::Relaxed);
        now.saturating_sub(before)
    }

    /// Records a sample (never lowers a figure).
    pub fn record(&self, cpu_nanos: u64, memory_bytes: u64) {
        self.cpu_nanos.fetch_max(cpu_nanos, Ordering::Relaxed);
        self.memory_bytes.fetch_max(memory_bytes, Ordering::Relaxed);
    }

    /// Records a sample taken at `at` (never lowers a figure, nor moves the time back).
    pub fn record_at(&self, cpu_nanos: u64, memory_bytes: u64, at: std::time::Instant) {
        let mut measured_at = self.measured_at.lock();
        self.record(cpu_nanos, memory_bytes);
        *measured_at = Some(measured_at.map_or(at, |before| before.max(at)));
    }

    /// When the last sample [`TaskUsage::record_at`] recorded was taken; `None` when none was.
    pub fn measured_at(&self) -> Option<std::time::Instant> {
        *self.measured_at.lock()
    }
}

/// Measures one thread's CPU time and allocations from the moment it was started.
///
/// Sampling reads the *calling* thread's clock and counter, so it must happen on the thread
/// that started it (a search runs on one pool thread from start to end); a sample taken
/// elsewhere would be meaningless, though never unsafe (figures saturate at zero).
pub struct ThreadUsage {
    cpu_start: Option<Duration>,
    allocated: Option<tikv_jemalloc_ctl::thread::allocatedp_mib>,
    allocated_start: u64,
}

impl ThreadUsage {
    /// Starts measuring the current thread. A clock or counter that cannot be read measures
    /// zero (logged at DEBUG), never fails the task.
    pub fn start() -> ThreadUsage {
        let cpu_start = thread_cpu();
        let allocated = tikv_jemalloc_ctl::thread::allocatedp::mib().ok();
        let allocated_start = allocated.as_ref().and_then(thread_allocated).unwrap_or(0);
        if cpu_start.is_none() || allocated.is_none() {
            tracing::debug!(
                "thread CPU clock or jemalloc counters unavailable; task usage reads 0"
            );
        }
        ThreadUsage {
            cpu_start,
            allocated,
            allocated_start,
        }
    }

    /// `(cpu nanos, allocated bytes)` since [`ThreadUsage::start`].
    pub fn sample(&self) -> (u64, u64) {
        let cpu = self.cpu_start.zip(thread_cpu()).map_or(0, |(start, now)| {
            u64::try_from(now.saturating_sub(start).as_nanos()).unwrap_or(u64::MAX)
        });
        let bytes = self
            .allocated
            .as_ref()
            .and_then(thread_allocated)
            .map_or(0, |now| now.saturating_sub(self.allocated_start));
        (cpu, bytes)
    }

    /// Samples into `usage`.
    pub fn record_into(&self, usage: &TaskUsage) {
        let (cpu, bytes) = self.sample();
        usage.record(cpu, bytes);
    }
}

/// The calling thread's CPU time so far.
fn thread_cpu() -> Option<Duration> {
    cpu_time::ThreadTime::try_now()
        .ok()
        .map(|t| t.as_duration())
}

/// The calling thread's cumulative allocated bytes.
fn thread_allocated(mib: &tikv_jemalloc_ctl::thread::allocatedp_mib) -> Option<u64> {
    mib.read().ok().map(|p| p.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jemalloc took [`MALLOC_CONF`]: a name or value it does not accept is skipped with a
    /// message on stderr, the default kept.
    #[test]
    fn test_jemalloc_runs_with_the_options_set_here() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return; // The environment's options override these, as documented.
        }
        // SAFETY: the name is NUL-terminated and the option a `size_t`.
        let gc = unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"opt.tcache_gc_incr_bytes\0") };
        assert_eq!(gc, Ok(1 << 20));
    }

    #[test]
    fn test_thread_usage_sees_this_threads_work_and_allocations() {
        let usage = ThreadUsage::start();
        let mut v: Vec<u64> = Vec::with_capacity(1_000_000);
        let mut x = 1u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            v.push(x);
        }
        std::hint::black_box(&v);
        let (cpu, bytes) = usage.sample();
        assert!(bytes >= 8_000_000, "allocated {bytes}");
        assert!(cpu > 0, "cpu {cpu}");
        let t = TaskUsage::default();
        usage.record_into(&t);
        t.record(0, 0);
        assert!(t.memory_bytes() >= 8_000_000);
    }
}
