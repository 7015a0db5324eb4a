//! Which workload group each scroll opened through the gateway runs in, and who opened it: the
//! upstream keeps the scroll, the gateway remembers scroll id → (group, opener) until the
//! scroll is cleared or its keep-alive passes, so continuations are charged to the group the
//! scroll was opened in and only its opener may continue or clear it
//! ([`crate::auth::authz::authorize_scroll`], as on an embedded node). In a cluster of
//! gateways the other gateways ask for an id they do not know and keep the answer
//! ([`super::scroll_peers`]): such an entry is *shared*, and clearing it is told to them.
//!
//! # Invariants
//! - S1 — an entry is never answered after its keep-alive passed (checked on read), and
//!   expired entries are swept whenever the map doubles past [`SWEEP_FROM`], so the map holds
//!   at most about twice the live scrolls. Tested by `test_entry_expires_with_its_keep_alive`.
//! - S2 — an entry another gateway was told of ([`ScrollGroups::tell`]) or that was learned
//!   from one ([`ScrollGroups::learn`]) stays shared under its next ids, and forgetting it
//!   says so, so a clear of a scroll no other gateway knows calls none (the opener's own
//!   continue and clear cost what they did before the cluster knew scrolls). Tested by
//!   `test_forgetting_says_whether_other_gateways_may_know`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Below this many entries no sweep runs: a sweep is a pass over the map, and a few thousand
/// stale ids cost less memory than the passes.
const SWEEP_FROM: usize = 4096;

/// Scroll id → (group id, opener, expiry, shared).
#[derive(Debug, Default)]
pub struct ScrollGroups {
    map: Mutex<Entries>,
}

/// What the gateway knows of a live scroll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrollEntry {
    /// The workload group it runs in.
    pub group: Arc<str>,
    /// The user who opened it; `None` when it was opened without authentication.
    pub opened_by: Option<Arc<str>>,
}

#[derive(Debug, Default)]
struct Entries {
    by_id: HashMap<String, Known>,
    /// The size at which the next sweep runs.
    sweep_at: usize,
}

#[derive(Debug)]
struct Known {
    entry: ScrollEntry,
    expires: Instant,
    /// Another gateway may know it too (S2).
    shared: bool,
}

impl ScrollGroups {
    /// Remembers that scroll `id` runs as `entry` says for `keep_alive` from `now`.
    pub fn remember(&self, id: String, entry: ScrollEntry, keep_alive: Duration, now: Instant) {
        self.insert(id, entry, now + keep_alive, false, now);
    }

    /// Remembers scroll `id` as another gateway answered it: it runs as `entry` says until
    /// `remaining` from `now`, and other gateways know it (S2).
    pub fn learn(&self, id: String, entry: ScrollEntry, remaining: Duration, now: Instant) {
        self.insert(id, entry, now + remaining, true, now);
    }

    fn insert(&self, id: String, entry: ScrollEntry, expires: Instant, shared: bool, now: Instant) {
        let mut m = self.map.lock();
        m.by_id.insert(
            id,
            Known {
                entry,
                expires,
                shared,
            },
        );
        if m.by_id.len() >= m.sweep_at.max(SWEEP_FROM) {
            m.by_id.retain(|_, k| k.expires > now);
            m.sweep_at = m.by_id.len() * 2;
        }
    }

    /// What is known of scroll `id`, if it is known and alive at `now`.
    pub fn entry_of(&self, id: &str, now: Instant) -> Option<ScrollEntry> {
        let m = self.map.lock();
        m.by_id
            .get(id)
            .filter(|k| k.expires > now)
            .map(|k| k.entry.clone())
    }

    /// What is known of scroll `id` for another gateway that asks: the entry and how long it
    /// still lives from `now`. The entry is shared from now on (S2).
    pub fn tell(&self, id: &str, now: Instant) -> Option<(ScrollEntry, Duration)> {
        let mut m = self.map.lock();
        let k = m.by_id.get_mut(id).filter(|k| k.expires > now)?;
        k.shared = true;
        Some((k.entry.clone(), k.expires - now))
    }

    /// Extends scroll `id`'s keep-alive (by a continuation: [`renewal`]), or remembers a new id
    /// the upstream answered for it.
    pub fn extend(&self, old: &str, new: String, keep_alive: Duration, now: Instant) {
        let known = self.map.lock().by_id.remove(old);
        if let Some(k) = known {
            self.insert(new, k.entry, now + keep_alive, k.shared, now);
        }
    }

    /// Forgets the scrolls `ids` (cleared), every scroll for `_all`. Answers whether another
    /// gateway may know one of them (S2; always for `_all`), so that the clear is told to them.
    pub fn forget(&self, ids: &[String]) -> bool {
        let mut m = self.map.lock();
        if ids.iter().any(|i| i == "_all") {
            m.by_id.clear();
            return true;
        }
        let mut shared = false;
        for id in ids {
            shared |= m.by_id.remove(id).is_some_and(|k| k.shared);
        }
        shared
    }
}

/// What a continuation renews its scroll for: its own `scroll`, else the upstream's
/// `search.default_keep_alive` (OpenSearch's `SearchService.getScrollKeepAlive`), which the
/// gateway takes at OpenSearch's default since it does not read the upstream's settings.
pub fn renewal(requested: Option<Duration>) -> Duration {
    requested.unwrap_or(sluice_engine::scroll::DEFAULT_KEEP_ALIVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(group: &str) -> ScrollEntry {
        ScrollEntry {
            group: Arc::from(group),
            opened_by: Some(Arc::from("alice")),
        }
    }

    fn group_of(s: &ScrollGroups, id: &str, now: Instant) -> Option<Arc<str>> {
        s.entry_of(id, now).map(|e| e.group)
    }

    #[test]
    fn test_entry_expires_with_its_keep_alive() {
        let s = ScrollGroups::default();
        let now = Instant::now();
        s.remember("a".into(), entry("g1"), Duration::from_secs(60), now);
        assert_eq!(s.entry_of("a", now), Some(entry("g1")));
        assert_eq!(group_of(&s, "a", now + Duration::from_secs(61)), None);
        s.extend(
            "a",
            "b".into(),
            Duration::from_secs(120),
            now + Duration::from_secs(30),
        );
        assert_eq!(group_of(&s, "a", now), None);
        // The opener moves with the scroll to its new id.
        assert_eq!(
            s.entry_of("b", now + Duration::from_secs(100)),
            Some(entry("g1"))
        );
        s.forget(&["b".to_string()]);
        assert_eq!(group_of(&s, "b", now), None);
    }

    #[test]
    fn test_a_continuation_without_keep_alive_outlives_the_opening_one() {
        let s = ScrollGroups::default();
        let now = Instant::now();
        s.remember("a".into(), entry("g1"), Duration::from_secs(1), now);
        let at = now + Duration::from_millis(500);
        s.extend("a", "a".into(), renewal(None), at);
        assert_eq!(renewal(None), Duration::from_secs(5 * 60));
        assert_eq!(
            group_of(&s, "a", now + Duration::from_secs(2)).as_deref(),
            Some("g1"),
            "past the opening's 1s"
        );
        assert_eq!(group_of(&s, "a", at + renewal(None)), None);
        s.extend("a", "a".into(), renewal(Some(Duration::from_secs(10))), at);
        assert_eq!(group_of(&s, "a", at + Duration::from_secs(11)), None);
    }

    #[test]
    fn test_sweep_bounds_the_map() {
        let s = ScrollGroups::default();
        let now = Instant::now();
        for i in 0..(SWEEP_FROM * 3) {
            s.remember(format!("{i}"), entry("g"), Duration::from_secs(1), now);
        }
        let later = now + Duration::from_secs(2);
        for i in 0..SWEEP_FROM {
            s.remember(
                format!("late{i}"),
                entry("g"),
                Duration::from_secs(1),
                later,
            );
        }
        assert!(
            s.map.lock().by_id.len() <= SWEEP_FROM * 2,
            "{}",
            s.map.lock().by_id.len()
        );
    }

    #[test]
    fn test_forgetting_says_whether_other_gateways_may_know() {
        let s = ScrollGroups::default();
        let now = Instant::now();
        let minute = Duration::from_secs(60);
        s.remember("own".into(), entry("g1"), minute, now);
        assert!(!s.forget(&["own".to_string()]), "nobody asked for it");
        // Told to another gateway, then continued here under a new id: still shared.
        s.remember("told".into(), entry("g1"), minute, now);
        let later = now + Duration::from_secs(20);
        assert_eq!(
            s.tell("told", later),
            Some((entry("g1"), Duration::from_secs(40)))
        );
        s.extend("told", "told2".into(), minute, later);
        assert!(s.forget(&["told2".to_string()]));
        // Learned from another gateway: shared, and it lives as long as it was told.
        s.learn("learned".into(), entry("g2"), Duration::from_secs(5), now);
        assert_eq!(group_of(&s, "learned", now).as_deref(), Some("g2"));
        assert_eq!(group_of(&s, "learned", now + Duration::from_secs(6)), None);
        assert!(s.forget(&["learned".to_string(), "unknown".to_string()]));
        assert!(!s.forget(&["unknown".to_string()]));
        assert!(s.forget(&["_all".to_string()]), "anyone may know some");
        // An expired entry is not told.
        s.remember("old".into(), entry("g1"), Duration::from_secs(1), now);
        assert_eq!(s.tell("old", now + Duration::from_secs(2)), None);
    }
}
