//! Loading the generated documents: cutting them into batches, and the load summary.

use std::time::Duration;

use serde_json::Value;
use sluice_datagen::LogGenerator;

/// Documents generated ahead of each timed loading round.
///
/// Generating while loading would make the client compete with the server for the same two
/// cores, so each round is generated first and only its sending is timed. A million documents
/// are about 300 MB of `_bulk` bodies, which bounds memory for any `--docs`.
const ROUND_DOCS: u64 = 1_000_000;

/// Throughput of loading the documents into one target.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoadSummary {
    /// Documents sent.
    pub num_docs: u64,
    /// Time spent sending them, without generation and refresh.
    pub load_secs: f64,
    /// `num_docs / load_secs`.
    pub docs_per_sec: f64,
    /// Time the refresh after loading took.
    pub refresh_secs: f64,
}

impl LoadSummary {
    /// Builds the summary of `num_docs` loaded in `load` and refreshed in `refresh`.
    pub fn new(num_docs: u64, load: Duration, refresh: Duration) -> Self {
        let load_secs = load.as_secs_f64();
        Self {
            num_docs,
            load_secs,
            docs_per_sec: if load_secs > 0.0 {
                num_docs as f64 / load_secs
            } else {
                0.0
            },
            refresh_secs: refresh.as_secs_f64(),
        }
    }
}

/// Cuts the generated document stream into batches, a round at a time.
///
/// Batch `k` holds documents `k * batch_size ..` with ids equal to their position, so every
/// target receives the same documents under the same ids.
///
/// # Invariants
///
/// `next_id + remaining` equals the requested number of documents, checked by `debug_assert!`
/// in [`Batches::next_round`].
#[derive(Debug)]
pub struct Batches {
    generator: LogGenerator,
    batch_size: usize,
    next_id: u64,
    remaining: u64,
}

impl Batches {
    /// Prepares `num_docs` documents from `seed` and `start_epoch_millis` in batches of `batch_size`.
    pub fn new(seed: u64, start_epoch_millis: i64, num_docs: u64, batch_size: usize) -> Self {
        assert!(batch_size > 0, "batch size must be positive");
        Self {
            generator: LogGenerator::new(seed, start_epoch_millis),
            batch_size,
            next_id: 0,
            remaining: num_docs,
        }
    }

    /// Generates the next round of batches and turns each into a `T`; `None` when all are done.
    ///
    /// `make` receives each batch's first id and its documents.
    pub fn next_round<T>(&mut self, mut make: impl FnMut(u64, Vec<Value>) -> T) -> Option<Vec<T>> {
        if self.remaining == 0 {
            return None;
        }
        let total = self.next_id + self.remaining;
        let round_docs = self.remaining.min(ROUND_DOCS);
        let mut round = Vec::new();
        let mut left_in_round = round_docs;
        while left_in_round > 0 {
            let batch_docs = left_in_round.min(self.batch_size as u64);
            let docs = self.generator.by_ref().take(batch_docs as usize).collect();
            round.push(make(self.next_id, docs));
            self.next_id += batch_docs;
            left_in_round -= batch_docs;
        }
        self.remaining -= round_docs;
        debug_assert_eq!(self.next_id + self.remaining, total);
        Some(round)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_datagen::DEFAULT_START_EPOCH_MILLIS;

    #[test]
    fn test_batches_cover_every_document_once_with_consecutive_ids() {
        let mut batches = Batches::new(42, DEFAULT_START_EPOCH_MILLIS, 12_345, 1000);
        let mut seen = Vec::new();
        while let Some(round) = batches.next_round(|first_id, docs| (first_id, docs)) {
            seen.extend(round);
        }
        assert_eq!(seen.len(), 13);
        assert!(seen.iter().all(|(first_id, _)| first_id % 1000 == 0));
        assert_eq!(seen.last().unwrap().1.len(), 345);
        let all: Vec<Value> = seen.into_iter().flat_map(|(_, docs)| docs).collect();
        let expected: Vec<Value> = LogGenerator::new(42, DEFAULT_START_EPOCH_MILLIS)
            .take(12_345)
            .collect();
        assert!(
            all == expected,
            "batches differ from the generator's stream"
        );
    }

    #[test]
    fn test_batches_of_no_documents_yield_no_round() {
        let mut batches = Batches::new(1, DEFAULT_START_EPOCH_MILLIS, 0, 10);
        assert!(batches.next_round(|_, _| ()).is_none());
    }

    #[test]
    fn test_load_summary_computes_docs_per_second() {
        let summary = LoadSummary::new(1000, Duration::from_millis(500), Duration::from_millis(20));
        assert_eq!(summary.docs_per_sec, 2000.0);
        assert_eq!(summary.refresh_secs, 0.02);
    }
}
