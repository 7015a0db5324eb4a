//! [`SqliteMetaStore`]: the embedded metastore, one SQLite file in the data folder.
//!
//! One table holds every document, primary key `(collection, key)`; a second, `meta_info`,
//! holds the schema version, the store-wide revision counter and the per-collection change
//! counters (`changes.<collection>`, created by the first batch that writes the collection). Every batch runs in one
//! `BEGIN IMMEDIATE` transaction (the write lock is taken up front, so two writers never
//! deadlock upgrading a read lock), and the WAL journal with `synchronous=FULL` makes a
//! committed batch durable and an interrupted one invisible: after a crash each document
//! holds its old or its new value, never a mix, and a batch is there whole or not at all.
//!
//! Queries are built at run time with `sqlx::query`, not sqlx's compile-time macros, so
//! building needs no database.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Row, Sqlite, SqliteConnection, Transaction};
use tokio::sync::watch;

use crate::model::{Changes, Collection, Document, MetaKind, Op, Outcome};
use crate::{MetaError, MetaFuture, MetaResult, MetaStore, now_millis};

/// The schema version this code writes; [`MIGRATIONS`] has one entry per version.
const SCHEMA_VERSION: i64 = 1;

/// The statements that take a schema from version `i` to `i + 1`, run in one transaction
/// together with the bump of `schema_version`. Append only: released entries never change.
const MIGRATIONS: &[&[&str]] = &[&[
    "CREATE TABLE documents (
        collection TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        version INTEGER NOT NULL,
        updated_at_millis INTEGER NOT NULL,
        PRIMARY KEY (collection, key)
    ) WITHOUT ROWID",
    "INSERT INTO meta_info (name, value) VALUES ('revision', 0)",
]];

/// How long a connection waits for another's write lock before failing with "database is
/// locked". Metadata batches take milliseconds; five seconds only runs out when something
/// holds the file for real (a stuck process, a dying disk), which the error then reports.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Pool size: WAL lets readers run beside the one writer; metadata traffic is light and
/// mostly served from the server's in-memory copies, so a few connections are plenty.
const MAX_CONNECTIONS: u32 = 4;

/// The embedded [`MetaStore`]: a SQLite database file, opened with WAL journaling and
/// `synchronous=FULL`. Clones share one connection pool.
///
/// # Invariants
///
/// - The `revision` row of `meta_info` is at least the version of every document; each
///   batch reads and advances it in the transaction that writes the documents.
/// - The `changes.<collection>` rows advance in the transaction of the batch they count; the
///   watch channel is raised to them after the commit (never lowered).
#[derive(Debug, Clone)]
pub struct SqliteMetaStore {
    pool: SqlitePool,
    path: PathBuf,
    watch: Arc<watch::Sender<Changes>>,
}

impl SqliteMetaStore {
    /// Opens (creating if needed) the metastore file at `path`, and brings its schema to the
    /// current version.
    ///
    /// Fails with [`MetaError::Backend`] when the file cannot be opened or was written by a
    /// newer sluice whose schema this one does not know.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the file as it was or migrated whole (migrations are
    /// transactional).
    pub async fn open(path: impl AsRef<Path>) -> MetaResult<SqliteMetaStore> {
        let path = path.as_ref().to_path_buf();
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .disable_statement_logging();
        let pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options)
            .await
            .map_err(|e| backend(&format!("cannot open [{}]", path.display()), e))?;
        let store = SqliteMetaStore {
            pool,
            path,
            watch: Arc::new(watch::channel(Changes::default()).0),
        };
        store.migrate().await?;
        let changes = store.changes().await?;
        store.watch.send_replace(changes);
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes every connection, waiting for in-flight operations; later calls fail.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the pool closing in the background.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn migrate(&self) -> MetaResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS meta_info (
                name TEXT PRIMARY KEY NOT NULL,
                value INTEGER NOT NULL
            ) WITHOUT ROWID",
        )
        .execute(&mut *tx)
        .await
        .map_err(|e| backend("cannot create table meta_info", e))?;
        let found: Option<i64> =
            sqlx::query_scalar("SELECT value FROM meta_info WHERE name = 'schema_version'")
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| backend("cannot read the schema version", e))?;
        let found = found.unwrap_or(0);
        if found > SCHEMA_VERSION {
            return Err(MetaError::Backend(format!(
                "[{}] has metastore schema version {found} but this sluice knows versions up to {SCHEMA_VERSION}; run a sluice at least as new as the one that last wrote it",
                self.path.display()
            )));
        }
        if found < 0 {
            return Err(MetaError::Corrupt {
                location: "meta_info/schema_version".to_string(),
                reason: format!("negative schema version {found}"),
            });
        }
        for (from, statements) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            for statement in *statements {
                sqlx::query(*statement)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| {
                        backend(&format!("cannot migrate schema from version {from}"), e)
                    })?;
            }
        }
        if found < SCHEMA_VERSION {
            sqlx::query(
                "INSERT INTO meta_info (name, value) VALUES ('schema_version', ?)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            )
            .bind(SCHEMA_VERSION)
            .execute(&mut *tx)
            .await
            .map_err(|e| backend("cannot record the schema version", e))?;
            tracing::info!(path = %self.path.display(), from = found, to = SCHEMA_VERSION, "metastore schema migrated");
        }
        tx.commit()
            .await
            .map_err(|e| backend("cannot commit the schema migration", e))
    }

    async fn begin_write(&self) -> MetaResult<Transaction<'static, Sqlite>> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| backend("cannot start a write transaction", e))
    }
}

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

fn backend(what: &str, e: sqlx::Error) -> MetaError {
    MetaError::Backend(format!(
        "sqlite: {what}: {e}; check that the data folder is writable and has free space, then retry"
    ))
}

/// Decodes one `documents` row (`key, value, version, updated_at_millis`).
fn decode(collection: Collection, row: &SqliteRow) -> MetaResult<Document> {
    let key: String = row
        .try_get(0)
        .map_err(|e| backend("cannot read a document key", e))?;
    let corrupt = |reason: String| MetaError::Corrupt {
        location: format!("{collection}/{key}"),
        reason,
    };
    let raw: String = row
        .try_get(1)
        .map_err(|e| corrupt(format!("value is not text: {e}")))?;
    let value = Value::from_str(&raw).map_err(|e| corrupt(format!("value is not JSON: {e}")))?;
    let version: i64 = row
        .try_get(2)
        .map_err(|e| corrupt(format!("version is not an integer: {e}")))?;
    let version = u64::try_from(version)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| corrupt(format!("version {version} is not positive")))?;
    let updated_at_millis: i64 = row
        .try_get(3)
        .map_err(|e| corrupt(format!("updated_at_millis is not an integer: {e}")))?;
    Ok(Document {
        key,
        value,
        version,
        updated_at_millis,
    })
}

/// Applies `batch` in one immediate transaction; any error rolls all of it back.
async fn apply_batch(store: SqliteMetaStore, batch: Vec<Op>) -> MetaResult<Vec<Outcome>> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = store.begin_write().await?;
    let revision: i64 = sqlx::query_scalar("SELECT value FROM meta_info WHERE name = 'revision'")
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| backend("cannot read the revision counter", e))?;
    let mut revision = u64::try_from(revision).map_err(|_| MetaError::Corrupt {
        location: "meta_info/revision".to_string(),
        reason: format!("negative revision {revision}"),
    })?;
    let now = now_millis();
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut touched: Vec<Collection> = batch.iter().map(Op::collection).collect();
    for op in batch {
        let (collection, expected) = (op.collection(), op.expected());
        let current: Option<i64> =
            sqlx::query_scalar("SELECT version FROM documents WHERE collection = ? AND key = ?")
                .bind(collection.as_str())
                .bind(op.key())
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| backend(&format!("cannot read [{collection}/{}]", op.key()), e))?;
        let current = current
            .map(|v| {
                u64::try_from(v).map_err(|_| MetaError::Corrupt {
                    location: format!("{collection}/{}", op.key()),
                    reason: format!("version {v} is negative"),
                })
            })
            .transpose()?;
        if !expected.is_met_by(current) {
            // Dropping `tx` rolls the batch back.
            return Err(MetaError::Conflict {
                collection,
                key: op.key().to_string(),
                expected,
                current,
            });
        }
        match op {
            Op::Put { key, value, .. } => {
                revision += 1;
                let version = i64::try_from(revision).map_err(|_| MetaError::Corrupt {
                    location: "meta_info/revision".to_string(),
                    reason: "revision counter overflowed".to_string(),
                })?;
                sqlx::query(
                    "INSERT INTO documents (collection, key, value, version, updated_at_millis)
                     VALUES (?, ?, ?, ?, ?)
                     ON CONFLICT (collection, key) DO UPDATE SET
                        value = excluded.value,
                        version = excluded.version,
                        updated_at_millis = excluded.updated_at_millis",
                )
                .bind(collection.as_str())
                .bind(&key)
                .bind(value.to_string())
                .bind(version)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(|e| backend(&format!("cannot write [{collection}/{key}]"), e))?;
                outcomes.push(Outcome::Put(Document {
                    key,
                    value,
                    version: revision,
                    updated_at_millis: now,
                }));
            }
            Op::Delete { key, .. } => {
                if current.is_some() {
                    sqlx::query("DELETE FROM documents WHERE collection = ? AND key = ?")
                        .bind(collection.as_str())
                        .bind(&key)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| backend(&format!("cannot delete [{collection}/{key}]"), e))?;
                }
                outcomes.push(Outcome::Deleted(current));
            }
        }
    }
    sqlx::query("UPDATE meta_info SET value = ? WHERE name = 'revision'")
        .bind(i64::try_from(revision).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(|e| backend("cannot advance the revision counter", e))?;
    touched.sort();
    touched.dedup();
    for c in touched {
        sqlx::query(
            "INSERT INTO meta_info (name, value) VALUES (?, 1)
             ON CONFLICT (name) DO UPDATE SET value = value + 1",
        )
        .bind(changes_row(c))
        .execute(&mut *tx)
        .await
        .map_err(|e| backend(&format!("cannot count the change of [{c}]"), e))?;
    }
    let changes = read_changes(&mut tx).await?;
    tx.commit()
        .await
        .map_err(|e| backend("cannot commit the batch", e))?;
    store.watch.send_if_modified(|seen| seen.merge(&changes));
    Ok(outcomes)
}

/// The `meta_info` row counting the committed batches that wrote `collection`.
fn changes_row(collection: Collection) -> String {
    format!("changes.{collection}")
}

/// Reads the change counters; a collection never written has no row and counts 0.
async fn read_changes(conn: &mut SqliteConnection) -> MetaResult<Changes> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT name, value FROM meta_info WHERE name LIKE 'changes.%'")
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| backend("cannot read the change counters", e))?;
    let mut changes = Changes::default();
    for (name, value) in rows {
        let Some(c) = name
            .strip_prefix("changes.")
            .and_then(Collection::from_name)
        else {
            continue; // a collection of a newer sluice
        };
        let value = u64::try_from(value).map_err(|_| MetaError::Corrupt {
            location: format!("meta_info/{name}"),
            reason: format!("negative change counter {value}"),
        })?;
        changes.set(c, value);
    }
    Ok(changes)
}

impl MetaStore for SqliteMetaStore {
    fn kind(&self) -> MetaKind {
        MetaKind::Sqlite
    }

    fn changes(&self) -> MetaFuture<'_, Changes> {
        Box::pin(async move {
            let mut conn = self
                .pool
                .acquire()
                .await
                .map_err(|e| backend("cannot get a connection", e))?;
            read_changes(&mut conn).await
        })
    }

    fn subscribe(&self) -> watch::Receiver<Changes> {
        self.watch.subscribe()
    }

    fn get<'a>(&'a self, collection: Collection, key: &'a str) -> MetaFuture<'a, Option<Document>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT key, value, version, updated_at_millis FROM documents
                 WHERE collection = ? AND key = ?",
            )
            .bind(collection.as_str())
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| backend(&format!("cannot read [{collection}/{key}]"), e))?;
            row.map(|r| decode(collection, &r)).transpose()
        })
    }

    fn list(&self, collection: Collection) -> MetaFuture<'_, Vec<Document>> {
        Box::pin(async move {
            // TEXT compares with the BINARY collation: bytewise, the order of Rust's `str`.
            let rows = sqlx::query(
                "SELECT key, value, version, updated_at_millis FROM documents
                 WHERE collection = ? ORDER BY key",
            )
            .bind(collection.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(|e| backend(&format!("cannot list [{collection}]"), e))?;
            rows.iter().map(|r| decode(collection, r)).collect()
        })
    }

    fn apply(&self, batch: Vec<Op>) -> MetaFuture<'_, Vec<Outcome>> {
        // The transaction runs in its own task, so a caller that stops waiting cannot cut
        // it between statements: it commits or rolls back on its own (see the trait's
        // cancel-safety note).
        let store = self.clone();
        Box::pin(async move {
            tokio::spawn(apply_batch(store, batch)).await.map_err(|e| {
                MetaError::Backend(format!("the metastore write task failed: {e}; retry"))
            })?
        })
    }
}
