//! Time as the cluster code sees it, injected so a protocol can run in a deterministic
//! simulation: [`SystemClock`] in a node, [`ManualClock`] in a test that moves time itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

/// A boxed `Send` future that ends after a delay.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Monotonic time and sleeping.
pub trait Clock: Send + Sync + 'static {
    /// Time since an arbitrary fixed origin; never goes back.
    fn now(&self) -> Duration;
    /// A future that completes once `d` has passed on this clock.
    fn sleep(&self, d: Duration) -> Sleep;
}

/// The real clock: tokio's, so `#[tokio::test(start_paused = true)]` also drives it.
#[derive(Debug, Clone)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A clock that moves only when the test calls [`ManualClock::advance`]; sleepers wake when
/// it passes their deadline.
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Duration>>,
    tick: Arc<watch::Sender<Duration>>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(Duration::ZERO)),
            tick: Arc::new(watch::channel(Duration::ZERO).0),
        }
    }

    /// Moves time forward by `d`, waking every sleeper whose deadline has passed.
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock();
        *now += d;
        self.tick.send_replace(*now);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        let deadline = self.now() + d;
        let mut rx = self.tick.subscribe();
        Box::pin(async move {
            // `wait_for` checks the current value first, so a deadline already passed
            // returns at once; the sender lives as long as any clone of the clock.
            let _ = rx.wait_for(|now| *now >= deadline).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn test_manual_sleepers_wake_only_when_time_passes_their_deadline() {
        let clock = ManualClock::new();
        let mut short = clock.sleep(Duration::from_millis(10));
        let mut long = clock.sleep(Duration::from_millis(100));
        let poll = |f: &mut Sleep| futures::FutureExt::now_or_never(f.as_mut()).is_some();
        assert!(!poll(&mut short));
        clock.advance(Duration::from_millis(10));
        assert!(poll(&mut short));
        assert!(!poll(&mut long));
        clock.advance(Duration::from_millis(89));
        assert!(!poll(&mut long));
        clock.advance(Duration::from_millis(1));
        assert!(poll(&mut long));
        assert_eq!(clock.now(), Duration::from_millis(100));
    }
}
