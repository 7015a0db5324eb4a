//! The queue a monitored group would have had (issue #16's dry run): per bucket, the requests
//! admitted over its `node_limit` because workload management only monitors them, that
//! `enabled` would have parked, while they run. Under `enabled` those requests would have been
//! parked, so a new breach would have found them ahead of it in the queue: its would-be
//! position, which sizes its estimated wait, and whether the queue would have had room for it
//! at all ([`sluice_core::throttle::would_park`], with the permit table's bounds).
//!
//! A monitored breach holds no permit (it is admitted), so the permit table cannot tell how
//! many there are; [`DryQueues`] counts them, each breach that would have parked holding a
//! [`DryPlace`] until its request ends. One that would have been refused takes no place:
//! `enabled` would have turned it away, so it is in nobody's way.
//!
//! Invariants (tests below):
//! - Q1 — a bucket's count is the number of live [`DryPlace`]s taken for it, the group's the
//!   sum of its buckets', and the position a breach is told is its bucket's count before it
//!   (`test_positions_count_the_breaches_in_flight`).
//! - Q2 — a bucket with no breach in flight holds no entry (the map does not grow with the
//!   buckets ever seen) (`test_a_bucket_leaves_the_map_with_its_last_breach`).
//! - Q3 — the verdict and the place are taken under one lock, so two concurrent breaches never
//!   both take the last place, and a refused breach takes none
//!   (`test_a_refused_breach_takes_no_place`).

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::BucketKey;
use sluice_core::throttle::DryQueueSeen;

/// Monitored breaches that would have parked, in flight, of one group on this node.
#[derive(Debug, Default)]
pub struct DryQueues {
    inner: parking_lot::Mutex<Inner>,
}

/// The counts, under [`DryQueues`]' lock.
#[derive(Debug, Default)]
struct Inner {
    /// Per bucket (only buckets with a place taken: Q2).
    by_bucket: HashMap<BucketKey, u64>,
    /// The sum of `by_bucket` (Q1).
    total: u64,
}

impl DryQueues {
    /// Decides a breach of `key` with `verdict`, given what the would-be queue holds now; when
    /// it answers `Ok` (the breach would have parked) takes a place, held until the returned
    /// [`DryPlace`] drops (Q1, Q3). Answers the verdict's value with the place, or its refusal.
    pub fn enter<T, E>(
        self: &Arc<Self>,
        key: &BucketKey,
        verdict: impl FnOnce(DryQueueSeen) -> Result<T, E>,
    ) -> Result<(T, DryPlace), E> {
        let mut inner = self.inner.lock();
        let seen = DryQueueSeen {
            bucket: inner.by_bucket.get(key).copied().unwrap_or(0),
            group: inner.total,
            waiting_buckets: inner.by_bucket.len() as u64,
        };
        let value = verdict(seen)?;
        *inner.by_bucket.entry(key.clone()).or_insert(0) += 1;
        inner.total += 1;
        let place = DryPlace {
            queues: self.clone(),
            key: key.clone(),
        };
        Ok((value, place))
    }

    /// The breaches of `key` in flight.
    #[cfg(test)]
    fn in_flight(&self, key: &BucketKey) -> u64 {
        self.inner.lock().by_bucket.get(key).copied().unwrap_or(0)
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
        let mut inner = self.queues.inner.lock();
        if let Some(n) = inner.by_bucket.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.by_bucket.remove(&self.key);
            }
            inner.total = inner.total.saturating_sub(1);
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

    /// Enters a breach of `value`'s bucket that always parks; answers its position and place.
    fn park(q: &Arc<DryQueues>, value: &str) -> (u64, DryPlace) {
        q.enter(&key(value), |seen| Ok::<_, ()>(seen.bucket))
            .expect("parks")
    }

    #[test]
    fn test_positions_count_the_breaches_in_flight() {
        let q = Arc::new(DryQueues::default());
        let (a, pa) = park(&q, "u");
        let (b, pb) = park(&q, "u");
        let (other, _po) = park(&q, "v");
        assert_eq!((a, b, other), (0, 1, 0));
        let seen = q.enter(&key("w"), Err::<(), _>).unwrap_err();
        assert_eq!(
            seen,
            DryQueueSeen {
                bucket: 0,
                group: 3,
                waiting_buckets: 2
            }
        );
        drop(pa);
        assert_eq!(q.in_flight(&key("u")), 1);
        let (c, _pc) = park(&q, "u");
        assert_eq!(c, 1);
        drop(pb);
        assert_eq!(q.in_flight(&key("u")), 1);
        assert_eq!(q.inner.lock().total, 2);
    }

    #[test]
    fn test_a_bucket_leaves_the_map_with_its_last_breach() {
        let q = Arc::new(DryQueues::default());
        let places: Vec<_> = (0..3).map(|_| park(&q, "u").1).collect();
        assert_eq!(q.inner.lock().by_bucket.len(), 1);
        drop(places);
        assert!(q.inner.lock().by_bucket.is_empty());
        assert_eq!(q.inner.lock().total, 0);
    }

    #[test]
    fn test_a_refused_breach_takes_no_place() {
        let q = Arc::new(DryQueues::default());
        let _p = park(&q, "u");
        let refused = q.enter(&key("u"), |seen| {
            if seen.bucket >= 1 {
                Err("full")
            } else {
                Ok(())
            }
        });
        assert_eq!(refused.err(), Some("full"));
        assert_eq!(q.in_flight(&key("u")), 1);
        assert_eq!(q.inner.lock().total, 1);
    }
}
