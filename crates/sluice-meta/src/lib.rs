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
//! [`MetaStore`] is the trait the server holds (`Arc<dyn MetaStore>`). Three backends
//! implement it:
//!
//! - [`SqliteMetaStore`] — the embedded default: one SQLite file in the data folder, WAL
//!   journal, `synchronous=FULL`, every batch one transaction;
//! - [`PostgresMetaStore`] — one PostgreSQL database shared by every node of a cluster; every
//!   batch one transaction serialized on a row lock, change notifications by `LISTEN/NOTIFY`;
//! - [`MemoryMetaStore`] — a map behind a mutex, for tests and tools.
//!
//! [`MetastoreUri`] (the `metastore.uri` setting) names a backend and opens it.
//!
//! Change watching: every store keeps per-collection change counters ([`Changes`]), read with
//! [`MetaStore::changes`]; [`MetaStore::subscribe`] hands out a `watch` receiver of the newest
//! counters the store instance has seen — its own commits at once, and for PostgreSQL other
//! processes' commits as their notifications arrive. A node reloads what changed when woken by
//! the receiver, and polls `changes` as the backstop for what a notification cannot carry (a
//! write by another process to a SQLite file, notifications lost while reconnecting).
//!
//! Every backend must pass the same behavioural suite, `test_suite` (cargo feature
//! `test-suite`), which this crate's own tests run against each backend, next to a property
//! test that compares random operation sequences with a plain `BTreeMap` model.

mod error;
mod memory;
pub mod model;
mod postgres;
mod presence;
mod sqlite;
#[cfg(feature = "test-suite")]
pub mod test_suite;
mod uri;

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

pub use error::{MetaError, MetaResult};
pub use memory::MemoryMetaStore;
pub use model::{Changes, Collection, Document, Expect, MetaKind, NodePresence, Op, Outcome};
pub use postgres::PostgresMetaStore;
pub use sqlite::SqliteMetaStore;
pub use uri::{MetastoreUri, redact as redact_url};

/// The future a [`MetaStore`] method returns: boxed, `Send`, borrowing the store for `'a`.
pub type MetaFuture<'a, T> = Pin<Box<dyn Future<Output = MetaResult<T>> + Send + 'a>>;

/// A durable store of versioned JSON documents with compare-and-set writes and atomic
/// batches.
///
/// Methods return boxed futures ([`MetaFuture`]) rather than being `async fn`s: an `async fn`
/// (or `-> impl Future`) in a trait makes the trait unusable as `dyn MetaStore`, and the
/// server picks its backend at run time (SQLite or PostgreSQL) and shares it as
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
/// - Compare-and-set holds across processes sharing the store: of two writes expecting the
///   same version, at most one lands, whichever node sent it.
/// - Every committed non-empty batch adds one to the [`Changes`] counter of each collection
///   it writes; failed and empty batches change none.
///
/// # Cancel safety
///
/// Reads are cancel safe. Dropping the future of a write after it was first polled does not
/// roll the write back: it either lands whole or not at all, and the caller no longer learns
/// which; re-read the key to find out.
pub trait MetaStore: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> MetaKind;

    /// Whether the backend knows that no other process had this store open when this one
    /// opened it: on a store a cluster shares, that the whole cluster had stopped. PostgreSQL
    /// knows (an advisory lock every open store holds shared); the other backends answer
    /// `false`, as they cannot tell (and keep no transient settings of a cluster).
    fn opened_alone(&self) -> bool {
        false
    }

    /// Reads the store's change counters as committed now (whoever committed); fails with
    /// [`MetaError::Unavailable`] when the store cannot be reached, which makes it the
    /// node's liveness probe too.
    fn changes(&self) -> MetaFuture<'_, Changes>;

    /// A receiver of the newest change counters this store instance has seen: its own
    /// commits as soon as they commit, other processes' commits as the backend learns of them
    /// (PostgreSQL: notifications; the others: never). Counters only grow. Poll
    /// [`MetaStore::changes`] too: a receiver alone can miss other processes' writes.
    fn subscribe(&self) -> tokio::sync::watch::Receiver<Changes>;

    /// Records `me` as live now and answers every node recorded live within `live_within`
    /// (this one included), ordered by node id, by the metastore's clock (nodes' clocks may
    /// differ). Only a store a cluster shares (PostgreSQL) keeps these; the others answer no
    /// node: a node on a store of its own has no other node to miss.
    fn heartbeat<'a>(
        &'a self,
        me: &'a NodePresence,
        live_within: std::time::Duration,
    ) -> MetaFuture<'a, Vec<NodePresence>> {
        let _ = (me, live_within);
        Box::pin(async { Ok(Vec::new()) })
    }

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
