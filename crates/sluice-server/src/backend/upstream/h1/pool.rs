//! The fast lane's idle upstream connections ([`super`] R1, R5, R6): by host and lane thread,
//! each with the buffer its answers were read into, capped and expiring on a timer of the
//! thread's own.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::net::TcpStream;

use super::READ_CHUNK;
use crate::backend::upstream::client::POOL_IDLE_TIMEOUT;

/// The largest read buffer an idle connection keeps for its next answer ([`ThreadPool::put`]): one
/// that grew past it (a large head) is let go rather than held while idle.
const KEPT_BUFFER: usize = 2 * READ_CHUNK;

/// The most idle connections to one host a lane thread keeps (R6): one for each of 64
/// concurrent searches on the thread, twice the 32 clients the gateway benchmark measures
/// and nginx's `keepalive` there; past it a new burst opens connections, about 0.1 ms each on
/// a local network, rather than every past burst's staying open.
pub(super) const MAX_IDLE: usize = 64;

/// An idle list of one lane thread (R6): the newest at the back.
type Idle<T> = std::collections::VecDeque<(T, Instant)>;

/// Puts `item` back at `now` on `idle` (R6), taking off those idle past `timeout` from the
/// front, then the oldest while more than `cap` remain: answers what was taken off, for the
/// caller to close once it let go of the list's lock.
fn keep_idle<T>(
    idle: &mut Idle<T>,
    item: T,
    now: Instant,
    cap: usize,
    timeout: Duration,
) -> Vec<T> {
    let mut closed = expire(idle, now, timeout);
    idle.push_back((item, now));
    while idle.len() > cap {
        closed.extend(idle.pop_front().map(|(item, _)| item));
    }
    closed
}

/// Takes off `idle` those idle past `timeout` at `now` (the oldest, at the front), answering
/// them for the caller to close once it let go of the list's lock.
fn expire<T>(idle: &mut Idle<T>, now: Instant, timeout: Duration) -> Vec<T> {
    let mut closed = Vec::new();
    while idle
        .front()
        .is_some_and(|(_, at)| now.saturating_duration_since(*at) > timeout)
    {
        closed.extend(idle.pop_front().map(|(item, _)| item));
    }
    closed
}

/// How many lane threads a pool keeps connections for (R5): one per worker of the node's
/// runtime, a core each, so a machine would need more cores than this for a thread to go
/// without; a thread past it pools nothing (its connections close after their answer).
const MAX_THREADS: usize = 256;

/// One host's idle connections, by lane thread (R5), each with the buffer its answers were
/// read into: the next answer on it is read into the same memory (a new 16 KiB buffer per
/// search cost about 700 instructions in the allocator, BENCHMARKS.md "Leaner heads").
///
/// Each thread's list is an allocation of its own, which only that thread writes (its lock,
/// its reference count): nginx's workers keep their upstream connections apart the same way.
/// One list of lists under one lock, with the pool's reference count beside it, was a cache
/// line both lane threads wrote six times a search: the lock taken and let go at the checkout
/// and at the put, the answer's reference taken and dropped (BENCHMARKS.md "The lane's
/// deadlines").
pub struct Pool {
    threads: Box<[OnceLock<Arc<ThreadPool>>]>,
    /// How long a connection is kept idle: [`POOL_IDLE_TIMEOUT`] (shorter in tests).
    timeout: Duration,
}

/// A lane thread's idle connections to a host, and whether its expiry timer runs (R6).
/// Aligned so that no other thread's data shares its cache lines.
#[repr(align(128))]
pub struct ThreadPool {
    idle: Mutex<ThreadIdle>,
    timeout: Duration,
}

/// [`ThreadPool`]'s list and timer.
#[derive(Default)]
struct ThreadIdle {
    list: Idle<(TcpStream, BytesMut)>,
    timer: bool,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::with_timeout(POOL_IDLE_TIMEOUT)
    }
}

impl Pool {
    /// An empty pool whose connections go after `timeout` idle.
    fn with_timeout(timeout: Duration) -> Pool {
        Pool {
            threads: (0..MAX_THREADS).map(|_| OnceLock::new()).collect(),
            timeout,
        }
    }

    /// Lane thread `thread`'s list, made on its first use; `None` past [`MAX_THREADS`].
    pub(super) fn thread(&self, thread: usize) -> Option<&Arc<ThreadPool>> {
        let slot = self.threads.get(thread)?;
        Some(slot.get_or_init(|| {
            Arc::new(ThreadPool {
                idle: Mutex::default(),
                timeout: self.timeout,
            })
        }))
    }

    /// An idle connection of lane thread `thread` the upstream has not closed (R2, R5),
    /// dropping closed ones and those idle longer than the hyper client's pool keeps them
    /// ([`POOL_IDLE_TIMEOUT`]).
    pub(super) fn checkout(&self, thread: usize, now: Instant) -> Option<(TcpStream, BytesMut)> {
        self.threads.get(thread)?.get()?.checkout(now)
    }

    /// [`ThreadPool::put`] on lane thread `thread`'s list.
    #[cfg(test)]
    fn put(&self, thread: usize, conn: TcpStream, buf: BytesMut) {
        if let Some(mine) = self.thread(thread) {
            mine.put(conn, buf);
        }
    }
}

impl ThreadPool {
    /// Starts the expiry timer of this list on the current runtime, its thread's own (R5: its
    /// connections' I/O driver is there too), answering whether it runs: a task that sleeps
    /// until the list's oldest connection would expire, closes those expired then, and ends
    /// once the list is empty (a quiet gateway's lane threads wake for nothing; the next put
    /// starts it again). Holds the list weakly.
    fn start_timer(self: &Arc<Self>) -> bool {
        let pool = Arc::downgrade(self);
        crate::backend::upstream::client::spawn_expiry(move || {
            let pool = pool.upgrade()?;
            let mut mine = pool.idle.lock();
            let closed = expire(&mut mine.list, Instant::now(), pool.timeout);
            let next = mine.list.front().map(|(_, at)| *at + pool.timeout);
            if next.is_none() {
                mine.timer = false;
            }
            drop(mine);
            drop(closed);
            next
        })
    }

    /// [`Pool::checkout`] on this list.
    fn checkout(&self, now: Instant) -> Option<(TcpStream, BytesMut)> {
        loop {
            let ((conn, buf), used) = self.idle.lock().list.pop_back()?;
            if now.duration_since(used) > self.timeout {
                continue;
            }
            let mut probe = [0u8; 1];
            match conn.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some((conn, buf)),
                // End of stream, bytes nobody asked for, or an error: not reusable.
                _ => continue,
            }
        }
    }

    /// Keeps `conn`, opened on this list's lane thread, for that thread's next exchange, with
    /// `buf` (emptied) to read its next answer into, unless it grew past [`KEPT_BUFFER`]; the
    /// thread's oldest idle connections beyond [`MAX_IDLE`] or [`POOL_IDLE_TIMEOUT`] are closed
    /// (R6).
    pub(super) fn put(self: &Arc<Self>, conn: TcpStream, mut buf: BytesMut) {
        buf.clear();
        if buf.capacity() > KEPT_BUFFER {
            buf = BytesMut::new();
        }
        let now = Instant::now();
        let mut mine = self.idle.lock();
        let closed = keep_idle(&mut mine.list, (conn, buf), now, MAX_IDLE, self.timeout);
        if !mine.timer {
            mine.timer = self.start_timer();
        }
        drop(mine);
        drop(closed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn test_idle_connections_are_capped_and_expire() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let timeout = Duration::from_millis(1000);
        let mut idle = Idle::new();
        // A burst of five put back at once on a list of three: the newest three stay, the
        // two oldest are closed.
        let mut closed = Vec::new();
        for i in 0..5 {
            closed.extend(keep_idle(&mut idle, i, at(i), 3, timeout));
        }
        assert_eq!(closed, vec![0, 1]);
        assert_eq!(
            idle.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        // The newest is taken first (the checkout pops the back).
        assert_eq!(idle.pop_back().map(|(i, _)| i), Some(4));
        // Put back after the others' timeout: they are closed, it alone stays.
        let closed = keep_idle(&mut idle, 4, at(1004), 3, timeout);
        assert_eq!(closed, vec![2, 3]);
        assert_eq!(idle.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![4]);
        // At the timeout itself, still kept.
        let closed = keep_idle(&mut idle, 5, at(2004), 3, timeout);
        assert!(closed.is_empty());
        assert_eq!(idle.len(), 2);
    }

    #[tokio::test]
    async fn test_idle_connections_expire_without_traffic() {
        // Connections put back on two threads' lists of a pool whose timeout is short, and no
        // exchange after: each thread's timer closes its own once idle past it, then stops.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::with_timeout(Duration::from_millis(100)));
        let mut accepted = Vec::new();
        for thread in [0, 1, 1] {
            let conn = TcpStream::connect(addr).await.unwrap();
            accepted.push(listener.accept().await.unwrap().0);
            pool.put(thread, conn, BytesMut::new());
        }
        let lists = || pool.threads.iter().filter_map(OnceLock::get);
        assert_eq!(lists().count(), 2);
        assert!(lists().all(|t| t.idle.lock().timer));
        for server in &mut accepted {
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(10), server.read(&mut buf)).await;
            assert!(matches!(read, Ok(Ok(0) | Err(_))), "still open: {read:?}");
        }
        // Each timer let go of its last connection (and stopped) before it closed it.
        assert!(lists().all(|t| {
            let mine = t.idle.lock();
            mine.list.is_empty() && !mine.timer
        }));
    }

    #[tokio::test]
    async fn test_pooled_connections_stay_with_their_thread() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::default());
        let mut accepted = Vec::new();
        for thread in [1, 0, 1] {
            let conn = TcpStream::connect(addr).await.unwrap();
            accepted.push(listener.accept().await.unwrap().0);
            pool.put(thread, conn, BytesMut::new());
        }
        let now = Instant::now();
        // Thread 2 never pooled one: it opens its own rather than take another thread's.
        assert!(pool.checkout(2, now).is_none());
        assert!(pool.checkout(0, now).is_some());
        assert!(pool.checkout(0, now).is_none());
        assert!(pool.checkout(1, now).is_some());
        assert!(pool.checkout(1, now).is_some());
        assert!(pool.checkout(1, now).is_none());
        drop(accepted);
    }

    #[tokio::test]
    async fn test_each_thread_has_a_list_of_its_own_and_none_past_the_last() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = Pool::default();
        let (a, b) = (pool.thread(0).unwrap(), pool.thread(1).unwrap());
        assert!(!Arc::ptr_eq(a, b), "two threads, two lists");
        assert!(Arc::ptr_eq(a, pool.thread(0).unwrap()), "made once");
        // No two lists share a cache line (nor its neighbour, which some cores fetch along).
        let gap = (Arc::as_ptr(a) as usize).abs_diff(Arc::as_ptr(b) as usize);
        assert!(gap >= 128, "{gap} bytes apart");
        assert!(pool.thread(MAX_THREADS).is_none());
        let conn = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let _accepted = listener.accept().await.unwrap();
        pool.put(MAX_THREADS, conn, BytesMut::new());
        assert!(pool.checkout(MAX_THREADS, Instant::now()).is_none());
    }

    #[tokio::test]
    async fn test_an_idle_connection_keeps_its_buffer_unless_it_grew() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::default());
        let mut accepted = Vec::new();
        for capacity in [READ_CHUNK, KEPT_BUFFER + 1] {
            let conn = TcpStream::connect(addr).await.unwrap();
            accepted.push(listener.accept().await.unwrap().0);
            let mut buf = BytesMut::with_capacity(capacity);
            buf.extend_from_slice(b"left over");
            pool.put(0, conn, buf);
        }
        let now = Instant::now();
        // The last one put is taken first: the one that grew comes back without its buffer.
        let (_, grown) = pool.checkout(0, now).unwrap();
        assert_eq!(grown.capacity(), 0);
        let (_, kept) = pool.checkout(0, now).unwrap();
        assert!(kept.is_empty());
        assert!(kept.capacity() >= READ_CHUNK);
        drop(accepted);
    }
}
