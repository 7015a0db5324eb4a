//! `http.read_timeout`: a connection from which nothing has been read for that long is closed,
//! as OpenSearch's HTTP server closes it (Netty's `ReadTimeoutHandler`, "http client did not
//! trigger a read for …; closing"): whatever it is doing — idle between requests, in the middle
//! of a request's head or body, or waiting for the answer of a request in flight, which is
//! then cancelled as when its client leaves. Unset or `0`, OpenSearch's default, connections
//! are never closed for quiet (ARCHITECTURE.md "Serving connections").
//!
//! Every path that reads a connection — the accept loop's ([`crate::http::leaving::Watched`]),
//! the fast lane's own reads, a request the lane lends hyper ([`crate::http::lane`]) — tells
//! the connection's [`ReadClock`] when it read something; the connection's future runs
//! alongside [`ReadClock::expired`] and is dropped when that ends.
//!
//! # Invariants
//! - R1 — a connection is closed only after `http.read_timeout` has passed since it last read
//!   a byte (the expiry re-arms on each wake to the last read's deadline). Tested by
//!   `test_a_read_postpones_the_expiry` and, end to end, `test_read_timeout_closes_quiet_connections`
//!   (node) and `test_read_timeout_closes_quiet_gateway_connections` (every path of a gateway).
//! - R2 — with no `http.read_timeout` nothing is timed: no clock exists, no read pays for one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// When a connection last read something, and how long it may stay quiet.
#[derive(Debug)]
pub struct ReadClock {
    /// When the connection was accepted; reads are recorded as time since then.
    start: Instant,
    /// Microseconds from `start` to the last read.
    last_read: AtomicU64,
    /// `http.read_timeout`.
    timeout: Duration,
}

impl ReadClock {
    /// A clock for a connection accepted now, when `timeout` is set (R2).
    pub fn start(timeout: Option<Duration>) -> Option<Arc<ReadClock>> {
        timeout.map(|timeout| {
            Arc::new(ReadClock {
                start: Instant::now(),
                last_read: AtomicU64::new(0),
                timeout,
            })
        })
    }

    /// Records that the connection read something now.
    pub fn read(&self) {
        let since = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_read.fetch_max(since, Ordering::Relaxed);
    }

    /// When the connection times out if it reads nothing more.
    fn deadline(&self) -> Instant {
        self.start + Duration::from_micros(self.last_read.load(Ordering::Relaxed)) + self.timeout
    }

    /// Ends once the connection has read nothing for the timeout (R1), judged after the
    /// runtime's I/O driver ran since the timer fired: bytes that came while the node stalled
    /// are read, and postpone it, first (`crate::deadline`).
    pub async fn expired(&self) {
        loop {
            crate::deadline::passed(self.deadline()).await;
            if self.deadline() <= Instant::now() {
                return;
            }
        }
    }
}

/// Records a read on `clock`, if the connection has one.
pub fn read(clock: Option<&ReadClock>) {
    if let Some(clock) = clock {
        clock.read();
    }
}

/// Runs `conn` (a connection's future, pinned where its owner keeps it: see
/// [`crate::http::closing`] for why not by value) until it ends or, with a clock, until the
/// connection has read nothing for the timeout (logged for `peer`), left unfinished for its
/// owner to drop.
pub async fn run<F: std::future::Future + ?Sized>(
    clock: Option<&ReadClock>,
    peer: SocketAddr,
    conn: std::pin::Pin<&mut F>,
) {
    match clock {
        None => {
            conn.await;
        }
        Some(clock) => {
            // The connection first: what it read during a stall of the node is recorded
            // before the expiry's second look judges it (`crate::deadline`).
            tokio::select! {
                biased;
                _ = conn => {}
                () = clock.expired() => {
                    tracing::debug!(%peer, "the connection read nothing for http.read_timeout; closing");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn test_a_read_postpones_the_expiry() {
        let clock = ReadClock::start(Some(Duration::from_secs(10))).expect("a clock");
        let expired = clock.expired();
        tokio::pin!(expired);
        tokio::time::advance(Duration::from_secs(6)).await;
        clock.read();
        // Ten seconds after the start, but four after the last read: not yet.
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(futures::poll!(expired.as_mut()).is_pending());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(futures::poll!(expired.as_mut()).is_pending());
        tokio::time::advance(Duration::from_secs(1)).await;
        // Its timer fired; once the runtime has looked at its sockets again with nothing
        // read, it has expired (`crate::deadline`).
        assert!(futures::poll!(expired.as_mut()).is_pending());
        tokio::task::yield_now().await;
        assert!(futures::poll!(expired.as_mut()).is_ready());
    }

    #[test]
    fn test_no_timeout_means_no_clock() {
        assert!(ReadClock::start(None).is_none());
    }
}
