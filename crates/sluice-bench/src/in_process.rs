//! The index under test in an engine opened inside the benchmark: the no-HTTP ceiling.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};
use sluice_datagen::index_mapping;
use sluice_engine::index::{DocOp, OpType};
use sluice_engine::{Engine, ErrorCode, SearchContext};

use crate::load::Batches;

/// The engine the benchmark drives directly, and the index it loads and searches.
#[derive(Debug)]
pub struct InProcessTarget {
    engine: Engine,
    index: String,
}

impl InProcessTarget {
    /// Opens (or creates) an engine on `data_dir`, which no server may be using.
    pub fn open(data_dir: &Path, index: &str) -> Result<Self> {
        std::fs::create_dir_all(data_dir).with_context(|| {
            format!(
                "could not create the in-process data dir {}",
                data_dir.display()
            )
        })?;
        let engine = Engine::open(data_dir)
            .map_err(|e| anyhow!("could not open the engine on {}: {e}", data_dir.display()))?;
        Ok(Self {
            engine,
            index: index.to_owned(),
        })
    }

    /// Deletes the index if it exists and creates it with the generated documents' mapping.
    pub fn recreate_index(&self) -> Result<()> {
        match self.engine.delete_indices(
            &self.index,
            &sluice_engine::resolve::IndicesOptions::for_index_apis(true),
        ) {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::IndexNotFound => {}
            Err(e) => bail!("could not delete the in-process index {}: {e}", self.index),
        }
        self.engine
            .create_index(&self.index, &json!({ "mappings": index_mapping() }))
            .map_err(|e| anyhow!("could not create the in-process index {}: {e}", self.index))?;
        Ok(())
    }

    /// Applies every batch through [`Engine::bulk`] from `num_loaders` threads and returns the
    /// time taken.
    pub fn load(&self, mut batches: Batches, num_loaders: usize) -> Result<Duration> {
        let mut elapsed = Duration::ZERO;
        while let Some(round) = batches.next_round(|first_id, docs| self.index_ops(first_id, docs))
        {
            // Loaders take the next batch from a shared queue; the lock is held only to pop.
            let queue = Mutex::new(round.into_iter());
            let next_batch = || queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let started = Instant::now();
            std::thread::scope(|scope| {
                let loaders: Vec<_> = (0..num_loaders)
                    .map(|_| {
                        scope.spawn(|| -> Result<()> {
                            while let Some(ops) = next_batch() {
                                self.apply(ops)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                loaders.into_iter().try_for_each(|loader| {
                    loader
                        .join()
                        .map_err(|_| anyhow!("an in-process bulk thread panicked"))?
                })
            })?;
            elapsed += started.elapsed();
        }
        Ok(elapsed)
    }

    /// Turns a batch into engine operations with ids from `first_id` on, as the HTTP bodies have.
    fn index_ops(&self, first_id: u64, docs: Vec<Value>) -> Vec<(String, DocOp)> {
        (first_id..)
            .zip(docs)
            .map(|(id, source)| {
                (
                    self.index.clone(),
                    DocOp::index(Some(id.to_string()), source, OpType::Index),
                )
            })
            .collect()
    }

    /// Applies one batch and fails with the first failed item.
    fn apply(&self, ops: Vec<(String, DocOp)>) -> Result<()> {
        let num_ops = ops.len();
        let results = self.engine.bulk(ops);
        let num_failed = results.iter().filter(|r| r.is_err()).count();
        if let Some(Err(first)) = results.into_iter().find(Result::is_err) {
            bail!("{num_failed} of {num_ops} in-process bulk items failed; the first: {first}");
        }
        Ok(())
    }

    /// Makes the loaded documents searchable and returns how long that took.
    pub fn refresh(&self) -> Result<Duration> {
        let started = Instant::now();
        self.engine
            .refresh(&self.index)
            .map_err(|e| anyhow!("could not refresh the in-process index: {e}"))?;
        Ok(started.elapsed())
    }

    /// Runs one search, as a request without a workload group or deadline would run.
    pub fn search(&self, body: &Value) -> std::result::Result<Value, String> {
        self.engine
            .search(&self.index, body, &SearchContext::default())
            .map_err(|e| e.to_string())
    }
}
