//! The bounded search thread pool: OpenSearch's `search` pool, `cores * 3 / 2 + 1` threads with a
//! queue of 1000; a task submitted when both are full is rejected (HTTP 429
//! `rejected_execution_exception`), so overload becomes a fast answer instead of unbounded memory.
//!
//! # Invariants
//! - At most `max_queue` jobs wait at once; `submit` never blocks.
//! - Every accepted job runs exactly once, on a pool thread; a job that panics is reported to its
//!   submitter as an error and the thread keeps serving.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// OpenSearch's search pool queue size.
pub const DEFAULT_QUEUE_SIZE: usize = 1000;

/// OpenSearch's search pool size for `cores` processors.
pub fn default_pool_size(cores: usize) -> usize {
    cores * 3 / 2 + 1
}

struct Shared {
    queue: Mutex<State>,
    available: Condvar,
}

struct State {
    jobs: VecDeque<Job>,
    /// Threads currently running a job.
    active: usize,
    shutdown: bool,
}

/// A fixed-size pool of threads with a bounded FIFO queue.
pub struct SearchPool {
    name: String,
    shared: Arc<Shared>,
    threads: usize,
    max_queue: usize,
    /// Jobs refused since the pool started (relaxed: a tally read only for reporting).
    rejected: std::sync::atomic::AtomicU64,
}

/// A job was refused because the pool and its queue were full.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// OpenSearch's rejection message.
    pub reason: String,
}

/// A submitted job's failure: the job panicked.
#[derive(Debug)]
pub struct JobPanicked(pub String);

impl SearchPool {
    /// Starts `threads` workers named `name[i]` with room for `max_queue` waiting jobs.
    pub fn new(name: &str, threads: usize, max_queue: usize) -> SearchPool {
        let shared = Arc::new(Shared {
            queue: Mutex::new(State {
                jobs: VecDeque::new(),
                active: 0,
                shutdown: false,
            }),
            available: Condvar::new(),
        });
        for i in 0..threads.max(1) {
            let shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{name}[{i}]"))
                .spawn(move || worker(&shared));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a search pool thread");
            }
        }
        SearchPool {
            name: name.to_string(),
            shared,
            threads: threads.max(1),
            max_queue,
            rejected: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Number of worker threads.
    pub fn num_threads(&self) -> usize {
        self.threads
    }

    /// The most jobs that wait for a thread before more are refused.
    pub fn max_queue(&self) -> usize {
        self.max_queue
    }

    /// Jobs refused because the pool and its queue were full, since the pool started.
    pub fn num_rejected(&self) -> u64 {
        self.rejected.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Jobs waiting and running now.
    pub fn num_queued_and_active(&self) -> (usize, usize) {
        let st = self.shared.queue.lock();
        (st.jobs.len(), st.active)
    }

    /// Queues `f`; resolves with its result. Refused at once when every thread is busy and the
    /// queue is full.
    ///
    /// # Cancel safety
    /// Dropping the returned receiver does not stop a job already queued; the job's own
    /// cancellation flag does that.
    pub fn submit<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<oneshot::Receiver<Result<T, JobPanicked>>, Rejected> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
                JobPanicked(
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
                        .unwrap_or_else(|| "unknown panic".into()),
                )
            });
            let _ = tx.send(r);
        });
        {
            let mut st = self.shared.queue.lock();
            let idle = self.threads.saturating_sub(st.active);
            if st.jobs.len() >= self.max_queue + idle {
                self.rejected
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(Rejected {
                    reason: format!(
                        "rejected execution of search task on OpenSearchThreadPoolExecutor[name = {}, pool size = {}, active threads = {}, queued tasks = {}, queue capacity = {}]",
                        self.name,
                        self.threads,
                        st.active,
                        st.jobs.len(),
                        self.max_queue
                    ),
                });
            }
            st.jobs.push_back(job);
        }
        self.shared.available.notify_one();
        Ok(rx)
    }
}

fn worker(shared: &Shared) {
    loop {
        let job = {
            let mut st = shared.queue.lock();
            loop {
                if let Some(job) = st.jobs.pop_front() {
                    st.active += 1;
                    break job;
                }
                if st.shutdown {
                    return;
                }
                shared.available.wait(&mut st);
            }
        };
        job();
        shared.queue.lock().active -= 1;
    }
}

impl Drop for SearchPool {
    fn drop(&mut self) {
        self.shared.queue.lock().shutdown = true;
        self.shared.available.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use super::*;

    #[tokio::test]
    async fn test_runs_jobs_and_returns_results() {
        let pool = SearchPool::new("t", 2, 10);
        let rx = pool.submit(|| 40 + 2).unwrap();
        assert_eq!(rx.await.unwrap().unwrap(), 42);
    }

    #[tokio::test]
    async fn test_rejects_when_threads_and_queue_are_full() {
        let pool = SearchPool::new("t", 1, 1);
        let gate = Arc::new(Barrier::new(2));
        let started = Arc::new(Barrier::new(2));
        let (g, s) = (gate.clone(), started.clone());
        let running = pool
            .submit(move || {
                s.wait();
                g.wait();
            })
            .unwrap();
        started.wait();
        let queued = pool.submit(|| 1).unwrap();
        let rejected = pool.submit(|| 2).unwrap_err();
        assert!(
            rejected.reason.contains("queue capacity = 1"),
            "{}",
            rejected.reason
        );
        gate.wait();
        running.await.unwrap().unwrap();
        assert_eq!(queued.await.unwrap().unwrap(), 1);
        // Room again once the backlog drained.
        assert_eq!(pool.submit(|| 3).unwrap().await.unwrap().unwrap(), 3);
    }

    #[tokio::test]
    async fn test_panicking_job_is_reported_and_pool_survives() {
        let pool = SearchPool::new("t", 1, 4);
        let rx = pool.submit(|| -> u32 { panic!("boom") }).unwrap();
        assert!(rx.await.unwrap().unwrap_err().0.contains("boom"));
        assert_eq!(pool.submit(|| 7).unwrap().await.unwrap().unwrap(), 7);
    }
}
