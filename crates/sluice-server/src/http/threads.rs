//! The fast lane's threads (ARCHITECTURE.md "The fast lane"): a gateway serves its lane
//! connections on threads of their own, as many as the node's runtime has workers, each
//! running a single-threaded tokio runtime, and each connection stays on one thread for its
//! whole life — nginx's model of one event loop per core. On the node's work-stealing runtime
//! every upstream answer woke a second, idle worker (0.53 `futex` calls and 0.3 more context
//! switches a search at 8 clients), and the lane spent a third more CPU a search than on one
//! thread (BENCHMARKS.md "The fast lane's threads").
//!
//! # Invariants
//! - T1 — a connection runs on one thread from its first byte to its close: the thread whose
//!   runtime's I/O driver it is registered with, so its reads and the upstream's answers wake
//!   that thread only. The upstream connections it opens are that thread's too, and pooled for
//!   that thread alone ([`crate::backend::upstream::h1`] R5). Tested by
//!   `test_lane_threads_take_connections_by_load` (which thread serves which connection) and
//!   h1's `test_pooled_connections_stay_with_their_thread`.
//! - T2 — a new connection goes to the thread serving the fewest: a connection ends its
//!   count when it closes. Tested by `test_lane_threads_take_connections_by_load`.
//! - T3 — the threads outlive every connection they serve: they end only once [`Threads`] is
//!   dropped, which [`crate::http::serve`] does after every lane connection has ended (L4);
//!   what a connection left running then (a cancellation on its way to the upstream) ends
//!   with its thread's runtime, as the node's own tasks end with the node's. Tested by
//!   `test_shutdown_answers_a_lane_search_in_flight_then_ends` (it fails with the threads
//!   ended before the connections).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

/// The period of a timer each thread keeps pending, so that its next wake-up is never further
/// than this. tokio's timer wakes its driver (a write to an eventfd, and an `epoll_wait` that
/// returns at once) whenever a timer is set to fire before the driver's next wake-up, even when
/// the driver is the thread setting it and is not asleep; a request's upstream timeout set on
/// an otherwise idle thread did that on every search at one client (1.00 `write` and one extra
/// `epoll_wait` a search, 0.26 at 8 clients; BENCHMARKS.md "The lane threads' timer floor"). With
/// this floor a request's timers (seconds away) never come first. One second: far below the
/// request timeouts, and a wake-up a second costs a thread nothing measurable. It is the
/// horizon of the thread's deadline timer ([`crate::deadline::lane::run_timer`]), which holds
/// the upstream exchanges' deadlines in a list of the thread's own: a deadline seconds away is
/// then no tokio timer at all, and one nearer than the floor re-arms that one timer.
const TIMER_FLOOR: std::time::Duration = std::time::Duration::from_secs(1);

/// A connection for a thread to serve: the socket, taken off the accepting runtime, and the
/// rest of what serving it needs.
pub struct Job<C> {
    /// The accepted socket (non-blocking), registered with the serving thread's runtime there.
    pub stream: std::net::TcpStream,
    /// The peer's address.
    pub peer: SocketAddr,
    /// What the connection is served with.
    pub conn: C,
}

/// One thread: where its connections are sent, and how many it serves.
struct Thread<C> {
    jobs: mpsc::UnboundedSender<(Job<C>, Live)>,
    live: Arc<AtomicUsize>,
}

/// Counts a connection on its thread until dropped (T2).
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The lane's threads; dropping it ends them once their queues are empty (T3).
pub struct Threads<C> {
    threads: Vec<Thread<C>>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl<C: Send + 'static> Threads<C> {
    /// Starts `count` threads (at least one), each serving the connections it is given with
    /// `serve(thread index, stream, peer, conn)`.
    ///
    /// # Errors
    /// A thread or its runtime could not be started (out of threads or file descriptors).
    pub fn start<F, Fut>(count: usize, name: &str, serve: F) -> std::io::Result<Threads<C>>
    where
        F: Fn(usize, tokio::net::TcpStream, SocketAddr, C) -> Fut + Send + Clone + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut threads = Vec::new();
        let mut handles = Vec::new();
        for index in 0..count.max(1) {
            // I/O and timers only: the signal driver's check ran at every wake-up and no
            // connection's task waits for a signal (the process's signals are the accepting
            // runtime's).
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()?;
            let (jobs, mut rx) = mpsc::unbounded_channel::<(Job<C>, Live)>();
            let serve = serve.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        // The thread's deadlines, and a timer always pending (see
                        // `TIMER_FLOOR`); it ends with the runtime.
                        tokio::spawn(crate::deadline::lane::run_timer(TIMER_FLOOR));
                        while let Some((job, live)) = rx.recv().await {
                            let Job { stream, peer, conn } = job;
                            // Registered with this thread's runtime: its I/O wakes this
                            // thread (T1).
                            let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
                                continue;
                            };
                            let served = serve(index, stream, peer, conn);
                            // Not wrapped in `Repoll` as the node's connections are: on this
                            // single-threaded runtime a task woken while it runs goes to the
                            // back of this thread's own queue, with no other thread to wake,
                            // and the wrapper's own waker and lock cost every search more
                            // than that. Boxed as the wrapper boxed it: inline in tokio's task
                            // cell, the connection's state took 60 more data-cache misses a
                            // search under callgrind, for the same instructions
                            // (BENCHMARKS.md "Atomics a search").
                            tokio::spawn(Box::pin(async move {
                                served.await;
                                drop(live);
                            }));
                        }
                    });
                })?;
            threads.push(Thread {
                jobs,
                live: Arc::default(),
            });
            handles.push(handle);
        }
        Ok(Threads { threads, handles })
    }

    /// Gives `job` to the thread serving the fewest connections (T2).
    pub fn serve(&self, job: Job<C>) {
        let Some(thread) = self
            .threads
            .iter()
            .min_by_key(|t| t.live.load(Ordering::Relaxed))
        else {
            return;
        };
        thread.live.fetch_add(1, Ordering::Relaxed);
        let live = Live(thread.live.clone());
        // The thread ends only when `Threads` is dropped (T3): the send cannot fail before.
        let _ = thread.jobs.send((job, live));
    }

    /// How many connections each thread serves.
    pub fn loads(&self) -> Vec<usize> {
        self.threads
            .iter()
            .map(|t| t.live.load(Ordering::Relaxed))
            .collect()
    }

    /// Ends the threads (their queues closed; each ends once its runtime stops) and waits
    /// for them.
    pub fn join(self) {
        let Threads { threads, handles } = self;
        drop(threads);
        for h in handles {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_lane_threads_take_connections_by_load() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        // Each connection reports the thread serving it and which thread name ran it, then
        // holds until its client closes.
        let threads = Threads::start(2, "lane-test", move |index, mut stream, _peer, n: usize| {
            let seen = seen_tx.clone();
            async move {
                let name = std::thread::current().name().unwrap_or("").to_string();
                seen.send((n, index, name)).unwrap();
                let mut byte = [0u8; 1];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut byte).await;
            }
        })
        .unwrap();
        // A client connects; its connection is given to the threads; what served it reports.
        let serve_one = |n: usize| {
            let client = std::net::TcpStream::connect(addr).unwrap();
            let (stream, peer) = listener.accept().unwrap();
            stream.set_nonblocking(true).unwrap();
            threads.serve(Job {
                stream,
                peer,
                conn: n,
            });
            (client, seen_rx.recv().unwrap())
        };
        let (mut clients, served): (Vec<_>, Vec<_>) = (0..4).map(serve_one).unzip();
        // The fewest-served thread takes each: they alternate, and each ran on its own thread.
        let indexes: Vec<usize> = served.iter().map(|s| s.1).collect();
        assert_eq!(indexes, [0, 1, 0, 1]);
        for (_, index, name) in &served {
            assert_eq!(name, &format!("lane-test-{index}"));
        }
        assert_eq!(threads.loads(), [2, 2]);
        // Two connections of thread 0 close: the next two both go there.
        drop(clients.remove(2));
        drop(clients.remove(0));
        while threads.loads() != [0, 2] {
            std::thread::yield_now();
        }
        for n in 4..6 {
            let (client, (_, index, _)) = serve_one(n);
            assert_eq!(index, 0);
            clients.push(client);
        }
        drop(clients);
        threads.join();
    }
}
