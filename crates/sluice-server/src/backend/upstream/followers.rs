//! The gateway's followers: tasks of its own that hold a slot while the upstream runs work
//! that outlived its request — a cancelled request's upstream tasks ([`mod@super::cancelled`]),
//! background by-query and reindex work, asynchronous search submissions ([`super::held`]).
//! They are stopped together when the node stops.
//!
//! Before, they were spawned loose and ended with the runtime: a stopped node (a test's, or
//! one embedded in a process that goes on) kept polling the upstream from its followers and
//! kept their slots and tasks, for up to `backend.upstream.cancel_wait_timeout` or for as
//! long as the followed work ran.
//!
//! # Invariants
//! - W1 — once [`Followers::stop`] is called, every follower ends at its next poll (one
//!   spawned later at its first), dropping what it holds (its permit or lease, its task's
//!   registration: the slot is given back, the ticket counts the end once if it was not
//!   settled), and `stop` returns once they all have. A follower never delays it by I/O: its
//!   work is dropped, not finished. The upstream's work goes on (a background reindex is the
//!   client's, not the gateway's). Tested by
//!   `gateway::search_apis::test_a_stopping_gateway_stops_its_followers_and_gives_back_their_slots`
//!   (background work, a submission) and
//!   `gateway::test_a_stopping_gateway_stops_following_a_cancelled_search`.

use std::future::Future;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The followers of one gateway (see the module docs).
pub(super) struct Followers {
    /// Cancelled by [`Followers::stop`].
    stop: CancellationToken,
    /// Each running follower holds one of its receivers: [`watch::Sender::closed`] resolves
    /// once none is left.
    live: watch::Sender<()>,
}

impl Default for Followers {
    fn default() -> Self {
        Followers {
            stop: CancellationToken::new(),
            live: watch::Sender::new(()),
        }
    }
}

impl Followers {
    /// Runs `work` as a follower on the current runtime: until it ends, or until
    /// [`Self::stop`] (W1). Outside a runtime (a test dropping a guard) `work` is dropped.
    pub(super) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (stop, alive) = (self.stop.clone(), self.live.subscribe());
        rt.spawn(async move {
            tokio::select! {
                // A follower spawned after the stop does not start.
                biased;
                () = stop.cancelled() => {}
                () = work => {}
            }
            drop(alive);
        });
    }

    /// Stops every follower and waits until each has ended (W1).
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the followers are stopped all the same.
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        self.live.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn test_stop_ends_running_and_later_followers_and_drops_their_work() {
        let followers = Followers::default();
        let held = std::sync::Arc::new(());
        let kept = held.clone();
        followers.spawn(async move {
            let _kept = kept;
            std::future::pending::<()>().await;
        });
        assert_eq!(std::sync::Arc::strong_count(&held), 2);
        followers.stop().await;
        assert_eq!(std::sync::Arc::strong_count(&held), 1, "its work dropped");
        let kept = held.clone();
        followers.spawn(async move {
            let _kept = kept;
            std::future::pending::<()>().await;
        });
        followers.stop().await;
        assert_eq!(std::sync::Arc::strong_count(&held), 1, "never started");
    }
}
