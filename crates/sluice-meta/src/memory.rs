//! [`MemoryMetaStore`]: the metastore as a map behind a mutex, for tests and tools.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::model::{Changes, Collection, Document, MetaKind, Op, Outcome};
use crate::{MetaError, MetaFuture, MetaResult, MetaStore, now_millis};

/// A [`MetaStore`] that keeps everything in memory and loses it on drop.
///
/// # Invariants
///
/// - `revision` is at least the version of every stored document (checked with
///   `debug_assert!` after each batch, tested by the shared suite's version checks).
/// - The watch channel holds `Inner::changes` as of the last commit: it is sent under the
///   lock that committed it, so receivers never see counters go back.
#[derive(Debug)]
pub struct MemoryMetaStore {
    inner: Mutex<Inner>,
    watch: watch::Sender<Changes>,
}

#[derive(Debug, Default)]
struct Inner {
    docs: BTreeMap<Collection, BTreeMap<String, Document>>,
    /// The last revision handed out by a put.
    revision: u64,
    /// Committed batches per collection.
    changes: Changes,
}

impl Default for MemoryMetaStore {
    fn default() -> Self {
        MemoryMetaStore {
            inner: Mutex::new(Inner::default()),
            watch: watch::channel(Changes::default()).0,
        }
    }
}

impl MemoryMetaStore {
    /// An empty store.
    pub fn new() -> MemoryMetaStore {
        MemoryMetaStore::default()
    }
}

impl Inner {
    fn current(
        &self,
        staged: &BTreeMap<(Collection, &str), Option<u64>>,
        c: Collection,
        key: &str,
    ) -> Option<u64> {
        match staged.get(&(c, key)) {
            Some(v) => *v,
            None => self
                .docs
                .get(&c)
                .and_then(|m| m.get(key))
                .map(|d| d.version),
        }
    }

    /// Checks the whole batch against the current state plus the batch's own earlier ops,
    /// then applies it; nothing changes when any precondition fails.
    fn apply(&mut self, batch: Vec<Op>) -> MetaResult<Vec<Outcome>> {
        // Pass 1: preconditions, with each op seeing the ones before it.
        let mut staged: BTreeMap<(Collection, &str), Option<u64>> = BTreeMap::new();
        let mut revision = self.revision;
        for op in &batch {
            let current = self.current(&staged, op.collection(), op.key());
            if !op.expected().is_met_by(current) {
                return Err(MetaError::Conflict {
                    collection: op.collection(),
                    key: op.key().to_string(),
                    expected: op.expected(),
                    current,
                });
            }
            let next = match op {
                Op::Put { .. } => {
                    revision += 1;
                    Some(revision)
                }
                Op::Delete { .. } => None,
            };
            staged.insert((op.collection(), op.key()), next);
        }
        drop(staged);
        // Pass 2: every precondition holds, so apply without further checks.
        let mut touched: Vec<Collection> = batch.iter().map(Op::collection).collect();
        touched.sort();
        touched.dedup();
        for c in touched {
            self.changes.bump(c);
        }
        let now = now_millis();
        let mut outcomes = Vec::with_capacity(batch.len());
        for op in batch {
            match op {
                Op::Put {
                    collection,
                    key,
                    value,
                    ..
                } => {
                    self.revision += 1;
                    let doc = Document {
                        key: key.clone(),
                        value,
                        version: self.revision,
                        updated_at_millis: now,
                    };
                    self.docs
                        .entry(collection)
                        .or_default()
                        .insert(key, doc.clone());
                    outcomes.push(Outcome::Put(doc));
                }
                Op::Delete {
                    collection, key, ..
                } => {
                    let removed = self
                        .docs
                        .get_mut(&collection)
                        .and_then(|m| m.remove(&key))
                        .map(|d| d.version);
                    outcomes.push(Outcome::Deleted(removed));
                }
            }
        }
        debug_assert_eq!(
            self.revision, revision,
            "pass 2 handed out other revisions than pass 1 checked"
        );
        debug_assert!(
            self.docs
                .values()
                .flat_map(|m| m.values())
                .all(|d| d.version <= self.revision),
            "a document is newer than the store revision"
        );
        Ok(outcomes)
    }
}

impl MetaStore for MemoryMetaStore {
    fn kind(&self) -> MetaKind {
        MetaKind::Memory
    }

    fn changes(&self) -> MetaFuture<'_, Changes> {
        Box::pin(async move { Ok(self.inner.lock().changes) })
    }

    fn subscribe(&self) -> watch::Receiver<Changes> {
        self.watch.subscribe()
    }

    fn get<'a>(&'a self, collection: Collection, key: &'a str) -> MetaFuture<'a, Option<Document>> {
        Box::pin(async move {
            let inner = self.inner.lock();
            Ok(inner
                .docs
                .get(&collection)
                .and_then(|m| m.get(key))
                .cloned())
        })
    }

    fn list(&self, collection: Collection) -> MetaFuture<'_, Vec<Document>> {
        Box::pin(async move {
            let inner = self.inner.lock();
            Ok(inner
                .docs
                .get(&collection)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default())
        })
    }

    // The lock is taken and released inside one poll: no `.await` while it is held.
    fn apply(&self, batch: Vec<Op>) -> MetaFuture<'_, Vec<Outcome>> {
        Box::pin(async move {
            let mut inner = self.inner.lock();
            let outcomes = inner.apply(batch)?;
            let now = inner.changes;
            self.watch.send_if_modified(|seen| seen.merge(&now));
            Ok(outcomes)
        })
    }
}
