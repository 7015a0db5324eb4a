//! The sluice metastore: the node's durable metadata — persistent cluster settings, workload
//! groups, tagging rules — as small versioned JSON documents.
//!
//! The model ([`model`]) is deliberately tiny: a fixed set of [`Collection`]s, each a keyspace
//! of [`Document`]s `(key, value, version, updated_at_millis)`. Every write carries an
//! [`Expect`] precondition (`Any`, `Absent`, `Version(v)`), so concurrent writers use
//! compare-and-set instead of locks; a failed precondition is [`MetaError::Conflict`]. Several
//! writes that must land together (a group and the rules that name it) go through
//! [`MetaStore::apply`] as one atomic batch of [`Op`]s.
//!
//! [`MetaStore`] is the trait the server holds (`Arc<dyn MetaStore>`). Two backends implement
//! it:
//!
//! - [`SqliteMetaStore`] — the embedded default: one SQLite file in the data folder, WAL
//!   journal, `synchronous=FULL`, every batch one transaction;
//! - [`MemoryMetaStore`] — a map behind a mutex, for tests and tools.
//!
//! A PostgreSQL backend for multi-node clusters comes later. Every backend must pass the same
//! behavioural suite, [`test_suite`] (cargo feature `test-suite`), which this crate's own tests
//! run against both backends, next to a property test that compares random operation sequences
//! with a plain `BTreeMap` model.

mod error;
mod memory;
pub mod model;
mod sqlite;
#[cfg(feature = "test-suite")]
pub mod test_suite;

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

pub use error::{MetaError, MetaResult};
pub use memory::MemoryMetaStore;
pub use model::{Collection, Document, Expect, Op, Outcome};
pub use sqlite::SqliteMetaStore;

/// The future a [`MetaStore`] method returns: boxed, `Send`, borrowing the store for `'a`.
pub type MetaFuture<'a, T> = Pin<Box<dyn Future<Output = MetaResult<T>> + Send + 'a>>;

/// A durable store of versioned JSON documents with compare-and-set writes and atomic
/// batches.
///
/// Methods return boxed futures ([`MetaFuture`]) rather than being `async fn`s: an `async fn`
/// (or `-> impl Future`) in a trait makes the trait unusable as `dyn MetaStore`, and the
/// server picks its backend at run time (SQLite now, PostgreSQL later) and shares it as
/// `Arc<dyn MetaStore>`. The box costs one allocation per call, nothing next to a disk write,
/// and keeps the trait free of macros such as `async_trait`.
///
/// # Semantics every backend guarantees
///
/// - `list` returns a collection's documents ordered by key, bytewise (UTF-8 order).
/// - A put gives the document the next store-wide revision as its version (see
///   [`Document::version`]); a failed write or batch consumes no revision.
/// - A batch applies its ops in order, each seeing the effect of the ones before it, and
///   lands entirely or not at all: on any error nothing of it is visible, now or after a
///   crash.
/// - A write acknowledged with `Ok` survives a crash of the process or the machine.
///
/// # Cancel safety
///
/// Reads are cancel safe. Dropping the future of a write after it was first polled does not
/// roll the write back: it either lands whole or not at all, and the caller no longer learns
/// which; re-read the key to find out.
pub trait MetaStore: Send + Sync {
    /// Reads the document at `key`, `None` when there is none.
    fn get<'a>(&'a self, collection: Collection, key: &'a str) -> MetaFuture<'a, Option<Document>>;

    /// Reads every document of `collection`, ordered by key.
    fn list(&self, collection: Collection) -> MetaFuture<'_, Vec<Document>>;

    /// Applies `batch` atomically, in order; returns one [`Outcome`] per op.
    ///
    /// The first op whose precondition fails aborts the whole batch with
    /// [`MetaError::Conflict`] naming that op's key. An empty batch does nothing.
    fn apply(&self, batch: Vec<Op>) -> MetaFuture<'_, Vec<Outcome>>;

    /// Creates or replaces the document at `key` when `expected` holds; returns it as stored.
    fn put<'a>(
        &'a self,
        collection: Collection,
        key: &'a str,
        value: Value,
        expected: Expect,
    ) -> MetaFuture<'a, Document> {
        Box::pin(async move {
            let mut outcomes = self
                .apply(vec![Op::put(collection, key, value, expected)])
                .await?;
            match outcomes.pop() {
                Some(Outcome::Put(doc)) if outcomes.is_empty() => Ok(doc),
                other => Err(MetaError::Backend(format!(
                    "a put of [{collection}/{key}] returned {other:?} instead of the written document"
                ))),
            }
        })
    }

    /// Removes the document at `key` when `expected` holds; returns the version it removed,
    /// `None` when the key held nothing.
    fn delete<'a>(
        &'a self,
        collection: Collection,
        key: &'a str,
        expected: Expect,
    ) -> MetaFuture<'a, Option<u64>> {
        Box::pin(async move {
            let mut outcomes = self
                .apply(vec![Op::delete(collection, key, expected)])
                .await?;
            match outcomes.pop() {
                Some(Outcome::Deleted(version)) if outcomes.is_empty() => Ok(version),
                other => Err(MetaError::Backend(format!(
                    "a delete of [{collection}/{key}] returned {other:?} instead of the removed version"
                ))),
            }
        })
    }
}

/// Milliseconds since the Unix epoch, for [`Document::updated_at_millis`]; 0 if the clock is
/// before 1970.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
