//! [`PostgresMetaStore`]: the metastore of a cluster, one PostgreSQL database that every node
//! shares.
//!
//! The schema is sqlx migrations embedded in the binary ([`MIGRATIONS`], SQL files under
//! `migrations/postgres/`), applied at open under sqlx's advisory lock, each in a transaction,
//! and recorded in `sluice_migrations`: two nodes starting at once migrate once, and a
//! database migrated by a newer sluice is refused.
//!
//! Tables: `sluice_documents` (every document, primary key `(collection, key)`, the value as
//! JSON text), `sluice_counters` (the store-wide `revision` and one `changes.<collection>`
//! counter per collection) and `sluice_nodes` (one row per node, its last heartbeat by the
//! server's clock: [`MetaStore::heartbeat`]).
//!
//! # Concurrency: one row lock serializes writers
//!
//! Every batch runs in one READ COMMITTED transaction that first locks the `revision` row
//! (`SELECT … FOR UPDATE`). So batches commit one after the other, cluster-wide, and each
//! statement after the lock sees every batch committed before it: the compare-and-set checks
//! read the truth, and two nodes expecting the same version can never both write. (SERIALIZABLE
//! would give the same guarantee with serialization failures to retry; metadata writes are rare
//! and tiny, so queueing on one lock is simpler and never fails spuriously.)
//!
//! # Change notifications
//!
//! A batch advances the `changes.<collection>` counters of the collections it writes and sends
//! `NOTIFY sluice_metastore` with the new counters ([`Changes::encode`]) in the same
//! transaction, so the notification goes out exactly when the batch commits, and in commit
//! order. A background task per store `LISTEN`s on a connection of its own and raises the
//! store's watch channel ([`MetaStore::subscribe`]); it reconnects by itself, and what it
//! missed while disconnected is for the reader's poll of [`MetaStore::changes`] to find.
//!
//! # Unreachable server
//!
//! Connection failures, a server shutting down and pool timeouts are
//! [`MetaError::Unavailable`]; every operation gives up after [`OPERATION_TIMEOUT`], so a
//! partitioned server cannot hang a caller. Server-side, `lock_timeout` and
//! `idle_in_transaction_session_timeout` keep a writer that died mid-batch from holding the
//! revision lock for longer than that.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, PgConnection, Postgres, Row, SqlSafeStr, Transaction};
use tokio::sync::watch;

use crate::model::{Changes, Collection, Document, MetaKind, NodePresence, Op, Outcome};
use crate::uri::redact;
use crate::{MetaError, MetaFuture, MetaResult, MetaStore, now_millis};

/// The schema, version by version: `(version, description, SQL)`. Append only: sqlx refuses
/// to start on a database where an applied migration's SQL changed.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "documents and counters",
        include_str!("../migrations/postgres/0001_documents.sql"),
    ),
    (
        2,
        "nodes",
        include_str!("../migrations/postgres/0002_nodes.sql"),
    ),
    (
        3,
        "whom each node hears",
        include_str!("../migrations/postgres/0003_node_hears.sql"),
    ),
    (
        4,
        "whom each node counts off its side",
        include_str!("../migrations/postgres/0004_node_unjoined.sql"),
    ),
];

/// How long a node's row is kept after its last heartbeat before a heartbeat of any node
/// deletes it: a day, so the table holds the nodes of the last day and no more, while a row
/// is never deleted while its node could still be seen live (liveness windows are seconds).
const NODE_ROW_KEPT_SECS: f64 = 86_400.0;

/// The table sqlx records applied migrations in (its default name, `_sqlx_migrations`, could
/// collide with another application's in a shared database).
const MIGRATIONS_TABLE: &str = "sluice_migrations";

/// The notification channel batches `NOTIFY` on.
pub const CHANNEL: &str = "sluice_metastore";

/// How long getting a connection may take before the store counts as unreachable: a
/// metastore round trip is milliseconds on a LAN, so two seconds without a connection means
/// the server is down or cut off; waiting longer would only hold the caller (an admin
/// request, the node's 1 s change poll).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest any one operation may take, connection included: beyond it the server is
/// treated as unreachable ([`MetaError::Unavailable`]) rather than letting a partition hang
/// a request. A batch is a few statements on a handful of rows; ten seconds leaves room for
/// queueing behind other nodes' batches on the revision lock.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Server-side: a batch that waits longer than this for the revision lock fails (and may be
/// retried), instead of waiting without bound behind a stuck writer.
const LOCK_TIMEOUT: &str = "5s";

/// Server-side: a session idle inside a transaction this long is ended, releasing the
/// revision lock a writer that died mid-batch (a killed process, a partition) would hold.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "10s";

/// Pool size: metadata traffic is light (writes are admin requests; reads are the node's
/// reloads and its 1 s change poll), so a few connections per node are plenty, and a cluster
/// of many nodes stays far below the server's `max_connections`.
const MAX_CONNECTIONS: u32 = 4;

/// Pause between attempts of the notification listener to reconnect.
const LISTEN_RETRY: Duration = Duration::from_millis(500);

/// The [`MetaStore`] of a cluster: a PostgreSQL database shared by every node. Clones share
/// one connection pool and one notification listener.
///
/// # Invariants
///
/// - The `revision` counter is at least the version of every document; each batch reads and
///   advances it under its row lock, in the transaction that writes the documents.
/// - The `changes.<collection>` counters advance in the transaction of the batch they count,
///   and the watch channel only ever rises to counters read from a committed state.
#[derive(Debug, Clone)]
pub struct PostgresMetaStore {
    pool: PgPool,
    /// The connection URL with its password masked, for messages.
    redacted: Arc<str>,
    watch: Arc<watch::Sender<Changes>>,
    /// Stops the notification listener when the last clone is dropped.
    _listener: Arc<AbortOnDrop>,
    /// Whether no other store was open on the database when this one opened
    /// ([`crate::presence`]).
    alone: bool,
    /// Keeps this store's presence session (and its lock) until the last clone is dropped.
    _presence: Arc<AbortOnDrop>,
}

/// Aborts a task when dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PostgresMetaStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`), brings
    /// its schema to the current version, and starts listening for other nodes' changes.
    ///
    /// Fails with [`MetaError::Unavailable`] when the server cannot be reached, and with
    /// [`MetaError::Backend`] when the URL is malformed or the database was migrated by a
    /// newer sluice. Messages never contain the password.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the schema as it was or migrated whole (each migration is a
    /// transaction).
    pub async fn open(url: &str) -> MetaResult<PostgresMetaStore> {
        let redacted: Arc<str> = Arc::from(redact(url));
        let options = connect_options(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_with(options.clone());
        let what = format!("cannot connect to [{redacted}]");
        let pool = match within(&what, pool).await {
            Ok(pool) => pool,
            // The pool retries a failing connection until its timeout and then says only
            // "pool timed out": one connection of its own names the cause (connection
            // refused, no route to host, a name that does not resolve).
            Err(MetaError::Unavailable(timed_out)) => {
                let direct = options.connect();
                return Err(match tokio::time::timeout(CONNECT_TIMEOUT, direct).await {
                    Ok(Err(e)) => classify(&what, e),
                    _ => MetaError::Unavailable(timed_out),
                });
            }
            Err(e) => return Err(e),
        };
        migrate(&pool, &redacted).await?;
        let (presence, alone) = crate::presence::open(&options).await?;
        let presence = tokio::spawn(crate::presence::keep(options.clone(), presence));
        let changes = {
            let mut conn = within("cannot get a connection", pool.acquire()).await?;
            read_changes(&mut conn).await?
        };
        // Listening starts before `open` returns, so no commit after it goes unnoticed.
        let listen_pool = listener_pool(options);
        let listener = within("cannot listen for changes", connect_listener(&listen_pool)).await?;
        let watch = Arc::new(watch::channel(changes).0);
        let listener = tokio::spawn(listen(listen_pool, listener, Arc::downgrade(&watch)));
        tracing::debug!(metastore = %redacted, "postgres metastore open");
        Ok(PostgresMetaStore {
            pool,
            redacted,
            watch,
            _listener: Arc::new(AbortOnDrop(listener.abort_handle())),
            alone,
            _presence: Arc::new(AbortOnDrop(presence.abort_handle())),
        })
    }

    /// The connection URL with its password masked.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }

    /// Closes every connection, waiting for in-flight operations; later calls fail.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the pool closing in the background.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The connection options of `url`, with sluice's session settings.
fn connect_options(url: &str) -> MetaResult<PgConnectOptions> {
    let options = PgConnectOptions::from_str(url).map_err(|e| {
        MetaError::Backend(format!(
            "[{}] is not a PostgreSQL URL ({e}); expected postgres://user:password@host:port/database",
            redact(url)
        ))
    })?;
    Ok(options
        .application_name("sluice")
        .options([
            ("lock_timeout", LOCK_TIMEOUT),
            (
                "idle_in_transaction_session_timeout",
                IDLE_IN_TRANSACTION_TIMEOUT,
            ),
        ])
        .disable_statement_logging())
}

/// Applies the embedded migrations that `pool`'s database lacks.
async fn migrate(pool: &PgPool, redacted: &str) -> MetaResult<()> {
    let migrations = MIGRATIONS
        .iter()
        .map(|(version, description, sql)| {
            Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                (*sql).into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    let run = async {
        migrator.run(pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(e) => classify("cannot migrate the schema", e),
            sqlx::migrate::MigrateError::VersionMissing(v) => MetaError::Backend(format!(
                "[{redacted}] has metastore schema version {v} but this sluice knows versions up to {}; run a sluice at least as new as the one that last wrote it",
                MIGRATIONS.len()
            )),
            other => MetaError::Backend(format!(
                "postgres: cannot migrate the schema of [{redacted}]: {other}"
            )),
        })
    };
    match tokio::time::timeout(OPERATION_TIMEOUT, run).await {
        Ok(result) => result,
        Err(_) => Err(MetaError::Unavailable(format!(
            "postgres: migrating [{redacted}] took longer than {OPERATION_TIMEOUT:?}"
        ))),
    }
}

/// Runs `fut` (a sqlx call) within [`OPERATION_TIMEOUT`], classifying its error.
pub(crate) async fn within<T>(
    what: &str,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> MetaResult<T> {
    match tokio::time::timeout(OPERATION_TIMEOUT, fut).await {
        Ok(result) => result.map_err(|e| classify(what, e)),
        Err(_) => Err(MetaError::Unavailable(format!(
            "postgres: {what}: no answer within {OPERATION_TIMEOUT:?}"
        ))),
    }
}

/// Runs a whole store operation within [`OPERATION_TIMEOUT`].
async fn bounded<T>(what: &str, fut: impl Future<Output = MetaResult<T>>) -> MetaResult<T> {
    match tokio::time::timeout(OPERATION_TIMEOUT, fut).await {
        Ok(result) => result,
        Err(_) => Err(MetaError::Unavailable(format!(
            "postgres: {what}: no answer within {OPERATION_TIMEOUT:?}"
        ))),
    }
}

/// Sorts a sqlx error into "the server cannot be reached" ([`MetaError::Unavailable`]) and
/// everything else ([`MetaError::Backend`]).
fn classify(what: &str, e: sqlx::Error) -> MetaError {
    // sluice's PostgreSQL client has no TLS: a URL that asks for it (`sslmode=require` and
    // up) can never connect, whatever the server does.
    if matches!(&e, sqlx::Error::Tls(_)) {
        return MetaError::Backend(format!(
            "postgres: {what}: {e}; sluice connects to PostgreSQL without TLS: drop sslmode \
             from metastore.uri (or set sslmode=disable or prefer), and keep the connection \
             on a trusted network"
        ));
    }
    let unreachable = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // SQLSTATE class 08: connection exceptions; 57P01-57P03: the server is shutting
        // down, crashed, or not yet accepting connections; 53300: too many connections.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "53300"),
        _ => false,
    };
    // The server's own words and SQLSTATE: sqlx's rendering of a database error adds the line
    // of PostgreSQL's source that raised it ("at line 334"), which tells an operator nothing.
    let said = match &e {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("{} (SQLSTATE {code})", db.message()),
            None => db.message().to_string(),
        },
        other => other.to_string(),
    };
    if unreachable {
        return MetaError::Unavailable(format!("postgres: {what}: {said}"));
    }
    let code = match &e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    };
    let hint = match code.as_deref() {
        // invalid_password, invalid_authorization_specification
        Some("28P01" | "28000") => {
            "check the user and password in metastore.uri (and the server's pg_hba.conf)"
        }
        // invalid_catalog_name
        Some("3D000") => {
            "create the database (CREATE DATABASE ...) or name an existing one in metastore.uri"
        }
        // insufficient_privilege
        Some("42501") => {
            "grant the metastore.uri user the rights to create and use tables in that database"
        }
        _ => "see the PostgreSQL server's log for the cause, then retry",
    };
    MetaError::Backend(format!("postgres: {what}: {said}; {hint}"))
}

/// Decodes one `sluice_documents` row (`key, value, version, updated_at_millis`).
fn decode(collection: Collection, row: &PgRow) -> MetaResult<Document> {
    let key: String = row
        .try_get(0)
        .map_err(|e| classify("cannot read a document key", e))?;
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

/// The `sluice_counters` row counting the committed batches that wrote `collection`.
fn changes_row(collection: Collection) -> String {
    format!("changes.{collection}")
}

/// Reads the change counters.
async fn read_changes(conn: &mut PgConnection) -> MetaResult<Changes> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT name, value FROM sluice_counters WHERE name LIKE 'changes.%'")
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| classify("cannot read the change counters", e))?;
    let mut changes = Changes::default();
    for (name, value) in rows {
        let Some(c) = name
            .strip_prefix("changes.")
            .and_then(Collection::from_name)
        else {
            continue; // a collection of a newer sluice
        };
        let value = u64::try_from(value).map_err(|_| MetaError::Corrupt {
            location: format!("sluice_counters/{name}"),
            reason: format!("negative change counter {value}"),
        })?;
        changes.set(c, value);
    }
    Ok(changes)
}

fn negative_version(collection: Collection, key: &str, v: i64) -> MetaError {
    MetaError::Corrupt {
        location: format!("{collection}/{key}"),
        reason: format!("version {v} is negative"),
    }
}

/// Applies `batch` in one transaction that holds the revision lock; any error rolls all of
/// it back. Returns the outcomes and the change counters as committed.
async fn apply_batch(pool: &PgPool, batch: Vec<Op>) -> MetaResult<(Vec<Outcome>, Changes)> {
    let mut tx: Transaction<'static, Postgres> = pool
        .begin()
        .await
        .map_err(|e| classify("cannot start a write transaction", e))?;
    // The lock that serializes writers of every node (see the module docs).
    let revision: i64 =
        sqlx::query_scalar("SELECT value FROM sluice_counters WHERE name = 'revision' FOR UPDATE")
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| classify("cannot lock the revision counter", e))?;
    let mut revision = u64::try_from(revision).map_err(|_| MetaError::Corrupt {
        location: "sluice_counters/revision".to_string(),
        reason: format!("negative revision {revision}"),
    })?;
    let now = now_millis();
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut touched: Vec<Collection> = batch.iter().map(Op::collection).collect();
    for op in batch {
        let (collection, expected) = (op.collection(), op.expected());
        let current: Option<i64> = sqlx::query_scalar(
            "SELECT version FROM sluice_documents WHERE collection = $1 AND key = $2",
        )
        .bind(collection.as_str())
        .bind(op.key())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| classify(&format!("cannot read [{collection}/{}]", op.key()), e))?;
        let current = current
            .map(|v| u64::try_from(v).map_err(|_| negative_version(collection, op.key(), v)))
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
                    location: "sluice_counters/revision".to_string(),
                    reason: "revision counter overflowed".to_string(),
                })?;
                sqlx::query(
                    "INSERT INTO sluice_documents (collection, key, value, version, updated_at_millis)
                     VALUES ($1, $2, $3, $4, $5)
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
                .map_err(|e| classify(&format!("cannot write [{collection}/{key}]"), e))?;
                outcomes.push(Outcome::Put(Document {
                    key,
                    value,
                    version: revision,
                    updated_at_millis: now,
                }));
            }
            Op::Delete { key, .. } => {
                if current.is_some() {
                    sqlx::query("DELETE FROM sluice_documents WHERE collection = $1 AND key = $2")
                        .bind(collection.as_str())
                        .bind(&key)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| classify(&format!("cannot delete [{collection}/{key}]"), e))?;
                }
                outcomes.push(Outcome::Deleted(current));
            }
        }
    }
    sqlx::query("UPDATE sluice_counters SET value = $1 WHERE name = 'revision'")
        .bind(i64::try_from(revision).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(|e| classify("cannot advance the revision counter", e))?;
    touched.sort();
    touched.dedup();
    let names: Vec<String> = touched.into_iter().map(changes_row).collect();
    // Upsert, so a collection added by a later sluice needs no migration of its own.
    sqlx::query(
        "INSERT INTO sluice_counters (name, value) SELECT unnest($1::text[]), 1
         ON CONFLICT (name) DO UPDATE SET value = sluice_counters.value + 1",
    )
    .bind(&names)
    .execute(&mut *tx)
    .await
    .map_err(|e| classify("cannot count the changes", e))?;
    let changes = read_changes(&mut tx).await?;
    // Delivered to listeners when (and only if) the transaction commits.
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(changes.encode())
        .execute(&mut *tx)
        .await
        .map_err(|e| classify("cannot notify the other nodes", e))?;
    tx.commit()
        .await
        .map_err(|e| classify("cannot commit the batch", e))?;
    Ok((outcomes, changes))
}

/// A pool of one connection for the notification listener, so listening never takes a
/// connection from the store's pool.
fn listener_pool(options: PgConnectOptions) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options)
}

/// A listener on [`CHANNEL`].
async fn connect_listener(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// The notification listener: raises `watch` to the counters each notification carries,
/// reconnecting after a lost connection, until the store is dropped.
///
/// Notifications sent while it is disconnected are lost; the node's poll of
/// [`MetaStore::changes`] finds those changes.
async fn listen(pool: PgPool, mut listener: PgListener, watch: Weak<watch::Sender<Changes>>) {
    loop {
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    let Some(tx) = watch.upgrade() else { return };
                    match Changes::decode(notification.payload()) {
                        Some(changes) => {
                            tx.send_if_modified(|seen| seen.merge(&changes));
                        }
                        None => tracing::warn!(
                            payload = notification.payload(),
                            "ignoring a metastore notification that does not parse"
                        ),
                    }
                }
                // The connection was lost and is back: what was sent meanwhile is lost, and
                // the node's poll will find it.
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "metastore change listener lost its connection");
                    break;
                }
            }
        }
        drop(listener);
        listener = loop {
            tokio::time::sleep(LISTEN_RETRY).await;
            if watch.strong_count() == 0 {
                return;
            }
            if let Ok(l) = connect_listener(&pool).await {
                tracing::debug!("metastore change listener reconnected");
                break l;
            }
        };
    }
}

impl MetaStore for PostgresMetaStore {
    fn kind(&self) -> MetaKind {
        MetaKind::Postgres
    }

    fn opened_alone(&self) -> bool {
        self.alone
    }

    fn changes(&self) -> MetaFuture<'_, Changes> {
        Box::pin(bounded("cannot read the change counters", async move {
            let mut conn = self
                .pool
                .acquire()
                .await
                .map_err(|e| classify("cannot get a connection", e))?;
            read_changes(&mut conn).await
        }))
    }

    fn subscribe(&self) -> watch::Receiver<Changes> {
        self.watch.subscribe()
    }

    fn get<'a>(&'a self, collection: Collection, key: &'a str) -> MetaFuture<'a, Option<Document>> {
        Box::pin(async move {
            let row = within(
                &format!("cannot read [{collection}/{key}]"),
                sqlx::query(
                    "SELECT key, value, version, updated_at_millis FROM sluice_documents
                     WHERE collection = $1 AND key = $2",
                )
                .bind(collection.as_str())
                .bind(key)
                .fetch_optional(&self.pool),
            )
            .await?;
            row.map(|r| decode(collection, &r)).transpose()
        })
    }

    fn list(&self, collection: Collection) -> MetaFuture<'_, Vec<Document>> {
        Box::pin(async move {
            // `key` has the "C" collation: bytewise order, the order of Rust's `str`.
            let rows = within(
                &format!("cannot list [{collection}]"),
                sqlx::query(
                    "SELECT key, value, version, updated_at_millis FROM sluice_documents
                     WHERE collection = $1 ORDER BY key",
                )
                .bind(collection.as_str())
                .fetch_all(&self.pool),
            )
            .await?;
            rows.iter().map(|r| decode(collection, r)).collect()
        })
    }

    fn heartbeat<'a>(
        &'a self,
        me: &'a NodePresence,
        live_within: Duration,
    ) -> MetaFuture<'a, Vec<NodePresence>> {
        Box::pin(async move {
            let generation = i64::try_from(me.generation).unwrap_or(i64::MAX);
            within(
                "cannot record this node's heartbeat",
                sqlx::query(
                    "INSERT INTO sluice_nodes
                         (node_id, name, transport, cluster_name, generation, hears, unjoined,
                          last_seen)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp())
                     ON CONFLICT (node_id) DO UPDATE SET
                         name = EXCLUDED.name, transport = EXCLUDED.transport,
                         cluster_name = EXCLUDED.cluster_name,
                         generation = EXCLUDED.generation, hears = EXCLUDED.hears,
                         unjoined = EXCLUDED.unjoined, last_seen = EXCLUDED.last_seen",
                )
                .bind(&me.node_id)
                .bind(&me.name)
                .bind(&me.transport)
                .bind(&me.cluster_name)
                .bind(generation)
                .bind(&me.hears)
                .bind(&me.unjoined)
                .execute(&self.pool),
            )
            .await?;
            within(
                "cannot forget nodes gone for a day",
                sqlx::query(
                    "DELETE FROM sluice_nodes
                     WHERE last_seen < clock_timestamp() - make_interval(secs => $1)",
                )
                .bind(NODE_ROW_KEPT_SECS)
                .execute(&self.pool),
            )
            .await?;
            let rows = within(
                "cannot read the nodes' heartbeats",
                sqlx::query(
                    "SELECT node_id, name, transport, cluster_name, generation, hears, unjoined
                     FROM sluice_nodes
                     WHERE last_seen > clock_timestamp() - make_interval(secs => $1)
                     ORDER BY node_id",
                )
                .bind(live_within.as_secs_f64())
                .fetch_all(&self.pool),
            )
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(NodePresence {
                        node_id: r.try_get("node_id").map_err(|e| classify("node row", e))?,
                        name: r.try_get("name").map_err(|e| classify("node row", e))?,
                        transport: r
                            .try_get("transport")
                            .map_err(|e| classify("node row", e))?,
                        cluster_name: r
                            .try_get("cluster_name")
                            .map_err(|e| classify("node row", e))?,
                        generation: u64::try_from(
                            r.try_get::<i64, _>("generation")
                                .map_err(|e| classify("node row", e))?,
                        )
                        .unwrap_or(0),
                        hears: r.try_get("hears").map_err(|e| classify("node row", e))?,
                        unjoined: r.try_get("unjoined").map_err(|e| classify("node row", e))?,
                    })
                })
                .collect()
        })
    }

    fn apply(&self, batch: Vec<Op>) -> MetaFuture<'_, Vec<Outcome>> {
        if batch.is_empty() {
            return Box::pin(async { Ok(Vec::new()) });
        }
        // The transaction runs in its own task, so a caller that stops waiting cannot cut
        // it between statements: it commits or rolls back on its own (see the trait's
        // cancel-safety note).
        let pool = self.pool.clone();
        let watch = self.watch.clone();
        let task = tokio::spawn(async move {
            let (outcomes, changes) = apply_batch(&pool, batch).await?;
            watch.send_if_modified(|seen| seen.merge(&changes));
            Ok(outcomes)
        });
        Box::pin(bounded("cannot apply a batch", async move {
            task.await.map_err(|e| {
                MetaError::Backend(format!("the metastore write task failed: {e}; retry"))
            })?
        }))
    }
}
