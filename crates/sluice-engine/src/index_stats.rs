//! The counters an index keeps for `_stats`: indexing, gets, searches, scrolls, refreshes,
//! flushes and merges, as OpenSearch's shard stats name them. Only what sluice really measures
//! is here; `_stats` renders nothing it does not keep.
//!
//! Counters are relaxed atomics: each is a monotonic tally read for reporting, never used to
//! order other memory, so no stronger ordering is needed.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde_json::{Value, json};

/// One index's counters since the node opened it.
#[derive(Debug, Default)]
pub struct IndexStats {
    index_total: AtomicU64,
    index_time_nanos: AtomicU64,
    index_failed: AtomicU64,
    delete_total: AtomicU64,
    delete_time_nanos: AtomicU64,
    noop_update_total: AtomicU64,
    get_total: AtomicU64,
    get_time_nanos: AtomicU64,
    get_exists: AtomicU64,
    query_total: AtomicU64,
    query_time_nanos: AtomicU64,
    query_current: AtomicU64,
    scroll_total: AtomicU64,
    refresh_total: AtomicU64,
    refresh_time_nanos: AtomicU64,
    flush_total: AtomicU64,
    flush_time_nanos: AtomicU64,
    merge_total: AtomicU64,
    merge_time_nanos: AtomicU64,
    merge_docs: AtomicU64,
    merge_current: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn millis(n: &AtomicU64) -> u64 {
    n.load(Relaxed) / 1_000_000
}

/// Counts one running operation while it lives (`query_current`, `merges.current`).
pub struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl IndexStats {
    /// Records a document write: `ok` false for a failed one.
    pub fn record_index(&self, took: Duration, ok: bool) {
        if ok {
            self.index_total.fetch_add(1, Relaxed);
            self.index_time_nanos.fetch_add(nanos(took), Relaxed);
        } else {
            self.index_failed.fetch_add(1, Relaxed);
        }
    }

    /// Records a delete.
    pub fn record_delete(&self, took: Duration) {
        self.delete_total.fetch_add(1, Relaxed);
        self.delete_time_nanos.fetch_add(nanos(took), Relaxed);
    }

    /// Records an update that changed nothing.
    pub fn record_noop(&self) {
        self.noop_update_total.fetch_add(1, Relaxed);
    }

    /// Records a real-time get and whether it found the document.
    pub fn record_get(&self, took: Duration, found: bool) {
        self.get_total.fetch_add(1, Relaxed);
        self.get_time_nanos.fetch_add(nanos(took), Relaxed);
        if found {
            self.get_exists.fetch_add(1, Relaxed);
        }
    }

    /// Marks a query phase running on this index until the guard drops.
    pub fn query_started(&self) -> InFlight<'_> {
        self.query_current.fetch_add(1, Relaxed);
        InFlight(&self.query_current)
    }

    /// Records a finished query phase.
    pub fn record_query(&self, took: Duration) {
        self.query_total.fetch_add(1, Relaxed);
        self.query_time_nanos.fetch_add(nanos(took), Relaxed);
    }

    /// Records a scroll continuation.
    pub fn record_scroll(&self) {
        self.scroll_total.fetch_add(1, Relaxed);
    }

    /// Records a refresh that committed writes.
    pub fn record_refresh(&self, took: Duration) {
        self.refresh_total.fetch_add(1, Relaxed);
        self.refresh_time_nanos.fetch_add(nanos(took), Relaxed);
    }

    /// Records a flush request that took `took`.
    pub fn record_flush(&self, took: Duration) {
        self.flush_total.fetch_add(1, Relaxed);
        self.flush_time_nanos.fetch_add(nanos(took), Relaxed);
    }

    /// Marks a merge running until the guard drops.
    pub fn merge_started(&self) -> InFlight<'_> {
        self.merge_current.fetch_add(1, Relaxed);
        InFlight(&self.merge_current)
    }

    /// Records a finished merge of `docs` documents.
    pub fn record_merge(&self, took: Duration, docs: u64) {
        self.merge_total.fetch_add(1, Relaxed);
        self.merge_time_nanos.fetch_add(nanos(took), Relaxed);
        self.merge_docs.fetch_add(docs, Relaxed);
    }

    /// The `indexing` section of `_stats`.
    pub fn indexing_json(&self) -> Value {
        json!({
            "index_total": self.index_total.load(Relaxed),
            "index_time_in_millis": millis(&self.index_time_nanos),
            "index_current": 0,
            "index_failed": self.index_failed.load(Relaxed),
            "delete_total": self.delete_total.load(Relaxed),
            "delete_time_in_millis": millis(&self.delete_time_nanos),
            "delete_current": 0,
            "noop_update_total": self.noop_update_total.load(Relaxed),
            "is_throttled": false,
            "throttle_time_in_millis": 0,
        })
    }

    /// The `get` section of `_stats`.
    pub fn get_json(&self) -> Value {
        let total = self.get_total.load(Relaxed);
        let exists = self.get_exists.load(Relaxed);
        json!({
            "total": total,
            "time_in_millis": millis(&self.get_time_nanos),
            "exists_total": exists,
            "missing_total": total.saturating_sub(exists),
            "current": 0,
        })
    }

    /// The `search` section of `_stats`.
    pub fn search_json(&self) -> Value {
        json!({
            "query_total": self.query_total.load(Relaxed),
            "query_time_in_millis": millis(&self.query_time_nanos),
            "query_current": self.query_current.load(Relaxed),
            "scroll_total": self.scroll_total.load(Relaxed),
        })
    }

    /// The `refresh` section of `_stats`.
    pub fn refresh_json(&self) -> Value {
        json!({
            "total": self.refresh_total.load(Relaxed),
            "total_time_in_millis": millis(&self.refresh_time_nanos),
        })
    }

    /// The `flush` section of `_stats`.
    pub fn flush_json(&self) -> Value {
        json!({
            "total": self.flush_total.load(Relaxed),
            "total_time_in_millis": millis(&self.flush_time_nanos),
        })
    }

    /// The `merges` section of `_stats` (force merges: tantivy's own background merges are
    /// not observable from outside its writer). Merges are never throttled in sluice (tantivy
    /// runs them at full speed on its merge threads), so the throttled time is 0.
    pub fn merges_json(&self) -> Value {
        json!({
            "current": self.merge_current.load(Relaxed),
            "total": self.merge_total.load(Relaxed),
            "total_time_in_millis": millis(&self.merge_time_nanos),
            "total_docs": self.merge_docs.load(Relaxed),
            "total_throttled_time_in_millis": 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_in_flight_guard_counts_while_it_lives() {
        let s = IndexStats::default();
        {
            let _g = s.merge_started();
            assert_eq!(s.merges_json()["current"], 1);
        }
        assert_eq!(s.merges_json()["current"], 0);
        s.record_merge(Duration::from_millis(3), 10);
        assert_eq!(s.merges_json()["total_docs"], 10);
        s.record_get(Duration::from_millis(1), false);
        assert_eq!(s.get_json()["missing_total"], 1);
        s.record_flush(Duration::from_millis(4));
        assert_eq!(
            s.flush_json(),
            json!({"total": 1, "total_time_in_millis": 4})
        );
    }
}
