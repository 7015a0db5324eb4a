//! Which workload group each scroll opened through the gateway runs in, and who opened it: the
//! upstream keeps the scroll, the gateway remembers scroll id → (group, opener) until the
//! scroll is cleared or its keep-alive passes, so continuations are charged to the group the
//! scroll was opened in and only its opener may continue or clear it
//! ([`crate::auth::authz::authorize_scroll`], as on an embedded node).
//!
//! # Invariants
//! - S1 — an entry is never answered after its keep-alive passed (checked on read), and
//!   expired entries are swept whenever the map doubles past [`SWEEP_FROM`], so the map holds
//!   at most about twice the live scrolls. Tested by `test_entry_expires_with_its_keep_alive`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Below this many entries no sweep runs: a sweep is a pass over the map, and a few thousand
/// stale ids cost less memory than the passes.
const SWEEP_FROM: usize = 4096;

/// Scroll id → (group id, opener, expiry).
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
    by_id: HashMap<String, (ScrollEntry, Instant)>,
    /// The size at which the next sweep runs.
    sweep_at: usize,
}

impl ScrollGroups {
    /// Remembers that scroll `id` runs as `entry` says for `keep_alive` from `now`.
    pub fn remember(&self, id: String, entry: ScrollEntry, keep_alive: Duration, now: Instant) {
        let mut m = self.map.lock();
        m.by_id.insert(id, (entry, now + keep_alive));
        if m.by_id.len() >= m.sweep_at.max(SWEEP_FROM) {
            m.by_id.retain(|_, (_, exp)| *exp > now);
            m.sweep_at = m.by_id.len() * 2;
        }
    }

    /// What is known of scroll `id`, if it is known and alive at `now`.
    pub fn entry_of(&self, id: &str, now: Instant) -> Option<ScrollEntry> {
        let m = self.map.lock();
        m.by_id
            .get(id)
            .filter(|(_, exp)| *exp > now)
            .map(|(e, _)| e.clone())
    }

    /// Extends scroll `id`'s keep-alive (by a continuation: [`renewal`]), or remembers a new id
    /// the upstream answered for it.
    pub fn extend(&self, old: &str, new: String, keep_alive: Duration, now: Instant) {
        let entry = self.map.lock().by_id.remove(old).map(|(e, _)| e);
        if let Some(e) = entry {
            self.remember(new, e, keep_alive, now);
        }
    }

    /// Forgets the scrolls `ids` (cleared), every scroll for `_all`.
    pub fn forget(&self, ids: &[String]) {
        let mut m = self.map.lock();
        if ids.iter().any(|i| i == "_all") {
            m.by_id.clear();
        } else {
            for id in ids {
                m.by_id.remove(id);
            }
        }
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
}
