//! A node's own pauses, and what they do to its view of the others (membership.rs, M5).
//!
//! A failure detector measures how long it has not heard from a peer. When the node itself
//! did not run (a stopped process, a frozen VM, a long stall of its runtime), that silence is
//! its own: every peer looks dead at once the moment it runs again, and is live again a
//! gossip round or two later. Published, that flap makes the node the owner of every bucket
//! of the shared tier for as long as it lasts, and the leases it grants alone outlive it (an
//! outside trial: 2 to 2.5 times `shared_limit` for 6 to 10 s after a pause of 2 s or more).
//!
//! [`PauseGuard`] notices that the membership task did not run for longer than it should have
//! and, for [`TRUST_AFTER`] from then, holds back the removal of peers: a peer that is really
//! gone is dropped once that time is up, one that was only unheard is live again before.
//!
//! Invariants (tested by the unit tests below, and end to end by the server's cluster test
//! `test_a_node_resuming_from_a_pause_keeps_its_peers`):
//! - G1 — a gap of more than [`STALL`] between two observations opens a window of
//!   [`TRUST_AFTER`] from the second one (`test_a_gap_opens_a_window_from_the_resume`);
//!   gaps within `STALL` open none (`test_regular_ticks_open_no_window`).
//! - G2 — within the window a removal is held: the view published keeps every member of the
//!   previous view that the fresh one lacks, as it was; additions, restarts and strangers are
//!   the fresh view's at once (`test_held_view_keeps_removed_members_and_takes_the_rest`).
//! - G3 — a removal is delayed by at most [`TRUST_AFTER`] past the resume: the window ends,
//!   and the fresh view is published whole (`test_the_window_ends`).

use std::time::{Duration, Instant};

use crate::membership::Members;

/// How often the membership task observes the clock while nothing else wakes it. A tenth of
/// a second makes a stall of [`STALL`] show as five missed ticks, at ten wake-ups a second.
pub const TICK: Duration = Duration::from_millis(100);

/// A gap between observations past which the node counts as having been paused. Half a
/// second: the failure detector declares a peer dead after eight mean heartbeat intervals
/// (about 2 to 4 s here, `membership::PHI_THRESHOLD`), so a stall shorter than this cannot make
/// a live peer look dead, and a runtime merely busy for a tick or two (100 ms late) is not
/// taken for paused.
pub const STALL: Duration = Duration::from_millis(500);

/// How long after a pause the node holds back removals. After a pause chitchat forgets a
/// peer's heartbeat intervals and needs two heartbeats of it, no more than its 1.2 s sample
/// cap apart, before the peer is live again, then one gossip round to publish it: 2 × 1.2 s +
/// 0.5 s. Three seconds covers that; a peer that really died while the node was paused is
/// dropped this much later than it would have been.
pub const TRUST_AFTER: Duration = Duration::from_secs(3);

/// Watches the membership task's own gaps (G1).
#[derive(Debug, Clone)]
pub struct PauseGuard {
    last_seen: Instant,
    distrust_until: Option<Instant>,
}

impl PauseGuard {
    /// A guard whose first observation is `now`.
    pub fn new(now: Instant) -> PauseGuard {
        PauseGuard {
            last_seen: now,
            distrust_until: None,
        }
    }

    /// Records that the task runs at `now`; answers until when removals are held back, if
    /// they are (G1, G3).
    pub fn observe(&mut self, now: Instant) -> Option<Instant> {
        if now.saturating_duration_since(self.last_seen) > STALL {
            self.distrust_until = Some(now + TRUST_AFTER);
        }
        self.last_seen = now;
        match self.distrust_until {
            Some(until) if now < until => Some(until),
            _ => {
                self.distrust_until = None;
                None
            }
        }
    }
}

/// The view to publish while removals are held back (G2): `fresh`, plus every live member of
/// `published` that `fresh` lacks (by node id), as `published` had it.
pub fn held_view(published: &Members, fresh: Members) -> Members {
    let missing: Vec<_> = published
        .live
        .iter()
        .filter(|m| fresh.live.iter().all(|f| f.node_id != m.node_id))
        .cloned()
        .collect();
    if missing.is_empty() {
        return fresh;
    }
    let mut live = fresh.live.to_vec();
    live.extend(missing);
    live.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    Members {
        live: std::sync::Arc::new(live),
        ..fresh
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Member;

    fn member(id: &str, generation: u64) -> Member {
        Member {
            node_id: id.to_string(),
            generation,
            name: format!("node-{id}"),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version: 1,
            backend: "embedded".to_string(),
            version: "0".to_string(),
            cluster_uuid: "u".to_string(),
        }
    }

    fn view(members: &[Member]) -> Members {
        Members {
            live: Arc::new(members.to_vec()),
            strangers: Arc::new(Vec::new()),
            twins: Arc::new(Vec::new()),
        }
    }

    #[test]
    fn test_regular_ticks_open_no_window() {
        let t0 = Instant::now();
        let mut g = PauseGuard::new(t0);
        for i in 1..100 {
            assert_eq!(g.observe(t0 + TICK * i), None);
        }
        // A busy runtime, late by a few ticks, is not paused.
        assert_eq!(g.observe(t0 + TICK * 99 + STALL), None);
    }

    #[test]
    fn test_a_gap_opens_a_window_from_the_resume() {
        let t0 = Instant::now();
        let mut g = PauseGuard::new(t0);
        let resumed = t0 + STALL + Duration::from_millis(1);
        assert_eq!(g.observe(resumed), Some(resumed + TRUST_AFTER));
        // Regular ticks after it keep the window where it was.
        assert_eq!(g.observe(resumed + TICK), Some(resumed + TRUST_AFTER));
        // A second pause within the window moves its end.
        let again = resumed + TICK + Duration::from_secs(2);
        assert_eq!(g.observe(again), Some(again + TRUST_AFTER));
    }

    #[test]
    fn test_the_window_ends() {
        let t0 = Instant::now();
        let mut g = PauseGuard::new(t0);
        let resumed = t0 + Duration::from_secs(5);
        assert!(g.observe(resumed).is_some());
        let mut t = resumed;
        while t < resumed + TRUST_AFTER {
            assert_eq!(g.observe(t), Some(resumed + TRUST_AFTER));
            t += TICK;
        }
        assert_eq!(g.observe(resumed + TRUST_AFTER), None);
        assert_eq!(g.observe(resumed + TRUST_AFTER + TICK), None);
    }

    #[test]
    fn test_held_view_keeps_removed_members_and_takes_the_rest() {
        let published = view(&[member("a", 1), member("b", 1), member("c", 1)]);
        // b missing (held, as published), c restarted (the fresh incarnation), d new.
        let fresh = Members {
            live: Arc::new(vec![member("a", 1), member("c", 2), member("d", 1)]),
            strangers: Arc::new(vec![member("s", 1)]),
            twins: Arc::new(Vec::new()),
        };
        let held = held_view(&published, fresh.clone());
        let ids: Vec<_> = held
            .live
            .iter()
            .map(|m| (m.node_id.as_str(), m.generation))
            .collect();
        assert_eq!(ids, [("a", 1), ("b", 1), ("c", 2), ("d", 1)]);
        assert_eq!(held.strangers, fresh.strangers);
        // Nothing missing: the fresh view itself.
        let same = held_view(&fresh, fresh.clone());
        assert!(Arc::ptr_eq(&same.live, &fresh.live));
    }
}
