//! A diagnostics probe of per-bucket concurrency as the execution threads see it, independent
//! of the permit table's own bookkeeping (the stress tests check the throttle with it).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_core::BucketKey;

/// Counts, per throttle bucket, the admitted requests executing on search threads at once,
/// and the peak: what actually ran, independent of the permit table's own bookkeeping.
#[derive(Debug, Default)]
pub struct BucketProbe {
    buckets: Mutex<HashMap<BucketKey, (u64, u64)>>,
    /// The order in which requests started executing: (bucket, task sequence number).
    starts: Mutex<Vec<(BucketKey, u64)>>,
}

impl BucketProbe {
    /// The request of task `seq` in bucket `key` starts executing; returns a guard that ends
    /// it.
    pub fn enter(self: &Arc<Self>, key: &BucketKey, seq: u64) -> ProbeGuard {
        let mut b = self.buckets.lock();
        let e = b.entry(key.clone()).or_default();
        e.0 += 1;
        e.1 = e.1.max(e.0);
        self.starts.lock().push((key.clone(), seq));
        ProbeGuard {
            probe: self.clone(),
            key: key.clone(),
        }
    }

    /// The tasks of `key` in the order they started executing.
    pub fn starts(&self, key: &BucketKey) -> Vec<u64> {
        self.starts
            .lock()
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, seq)| *seq)
            .collect()
    }

    /// The peak per bucket.
    pub fn peaks(&self) -> Vec<(BucketKey, u64)> {
        self.buckets
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.1))
            .collect()
    }

    /// Requests executing now, over all buckets.
    pub fn executing(&self) -> u64 {
        self.buckets.lock().values().map(|v| v.0).sum()
    }
}

/// Ends one execution recorded by [`BucketProbe::enter`].
#[derive(Debug)]
pub struct ProbeGuard {
    probe: Arc<BucketProbe>,
    key: BucketKey,
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        if let Some(e) = self.probe.buckets.lock().get_mut(&self.key) {
            e.0 = e.0.saturating_sub(1);
        }
    }
}
