//! The queue a monitored group would have had (issue #16's dry run): per bucket, the requests
//! admitted over its `node_limit` because workload management only monitors them, while they
//! run. Under `enabled` those requests would have been parked, so a new breach would have
//! found them ahead of it in the queue: its would-be position, which sizes its estimated wait
//! and tells whether the queue (`queue.size_per_bucket`) would have had room for it at all.
//!
//! A monitored breach holds no permit (it is admitted), so the permit table cannot tell how
//! many there are; [`DryQueues`] counts them, each breach holding a [`DryPlace`] until its
//! request ends.
//!
//! Invariants (tests below):
//! - Q1 — a bucket's count is the number of live [`DryPlace`]s taken for it, and the position
//!   a breach is told is the count before it
//!   (`test_positions_count_the_breaches_in_flight`).
//! - Q2 — a bucket with no breach in flight holds no entry (the map does not grow with the
//!   buckets ever seen) (`test_a_bucket_leaves_the_map_with_its_last_breach`).

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::BucketKey;

/// Monitored breaches in flight, per bucket, of one group on this node.
#[derive(Debug, Default)]
pub struct DryQueues {
    by_bucket: parking_lot::Mutex<HashMap<BucketKey, u64>>,
}

impl DryQueues {
    /// Counts a breach of `key`: answers how many were in flight before it (its would-be
    /// position in the queue) and the place it holds until it is dropped (Q1).
    pub fn enter(self: &Arc<Self>, key: &BucketKey) -> (u64, DryPlace) {
        let mut map = self.by_bucket.lock();
        let n = map.entry(key.clone()).or_insert(0);
        let ahead = *n;
        *n += 1;
        let place = DryPlace {
            queues: self.clone(),
            key: key.clone(),
        };
        (ahead, place)
    }

    /// The breaches of `key` in flight.
    #[cfg(test)]
    fn in_flight(&self, key: &BucketKey) -> u64 {
        self.by_bucket.lock().get(key).copied().unwrap_or(0)
    }
}

/// A monitored breach's place in its bucket's would-be queue, left when dropped (with its
/// request).
#[derive(Debug)]
pub struct DryPlace {
    queues: Arc<DryQueues>,
    key: BucketKey,
}

impl Drop for DryPlace {
    fn drop(&mut self) {
        let mut map = self.queues.by_bucket.lock();
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::ThrottleAttribute;

    fn key(value: &str) -> BucketKey {
        BucketKey {
            group_id: Arc::from("g"),
            attribute: ThrottleAttribute::Username,
            value: Some(Arc::from(value)),
        }
    }

    #[test]
    fn test_positions_count_the_breaches_in_flight() {
        let q = Arc::new(DryQueues::default());
        let (a, pa) = q.enter(&key("u"));
        let (b, pb) = q.enter(&key("u"));
        let (other, _po) = q.enter(&key("v"));
        assert_eq!((a, b, other), (0, 1, 0));
        drop(pa);
        assert_eq!(q.in_flight(&key("u")), 1);
        let (c, _pc) = q.enter(&key("u"));
        assert_eq!(c, 1);
        drop(pb);
        assert_eq!(q.in_flight(&key("u")), 1);
    }

    #[test]
    fn test_a_bucket_leaves_the_map_with_its_last_breach() {
        let q = Arc::new(DryQueues::default());
        let places: Vec<_> = (0..3).map(|_| q.enter(&key("u")).1).collect();
        assert_eq!(q.by_bucket.lock().len(), 1);
        drop(places);
        assert!(q.by_bucket.lock().is_empty());
    }
}
