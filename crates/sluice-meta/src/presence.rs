//! Presence on a shared PostgreSQL metastore: whether any other process had the database open
//! when this one opened it — what tells a node that the whole cluster had stopped (a full
//! cluster restart, after which OpenSearch forgets its transient settings).
//!
//! Every open [`crate::PostgresMetaStore`] holds a shared session-level advisory lock on
//! [`PRESENCE_KEY`] on a connection of its own, for as long as the store lives. At open, before
//! taking it, the store tries the same lock exclusively: that succeeds only when no other
//! session holds it, that is when no other store is open on the database. The shared lock is
//! then taken on the same session before the exclusive one is let go, so there is no moment
//! when a store that is open holds neither.
//!
//! # Invariants
//! - P1 — a store opened while another store is open on the same database is not alone.
//!   Tested by `test_presence_tells_whether_another_store_is_open`.
//! - P2 — once every store on a database has been dropped (or its process has died: the
//!   server ends the session and its locks with the connection), the next store to open is
//!   alone. Tested by the same test, and over HTTP by
//!   `test_transient_settings_end_with_a_full_cluster_restart`.
//! - P3 — a lost presence connection is reconnected and the shared lock taken again, so a
//!   live store counts as present again within [`PRESENCE_RETRY`] of the server being back.
//!   While it is lost (a server restart, a partition), a store opening elsewhere may find
//!   itself alone although this one is alive: presence is advisory, used only to forget
//!   transient settings, never for safety.
//!
//! Locks are per database, so clusters on different databases of one server (and the tests,
//! each on a database of its own) never see each other.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::MetaResult;
use crate::postgres::within;

/// The advisory lock every open store holds shared: a fixed 64-bit key, the ASCII of
/// "sluice" and a 1, chosen to be unlikely to collide with another application's keys in a
/// shared database (sqlx's migration lock derives its key from the database name instead).
pub const PRESENCE_KEY: i64 = 0x736c_7569_6365_0001;

/// How often the presence connection is checked: a lost one is found within this, and the
/// lock retaken within this plus [`PRESENCE_RETRY`] of the server being reachable again. A
/// query every ten seconds per node is nothing to the server.
const PRESENCE_CHECK: Duration = Duration::from_secs(10);

/// Pause between attempts to reconnect a lost presence connection.
const PRESENCE_RETRY: Duration = Duration::from_secs(1);

/// Opens the presence session: tries [`PRESENCE_KEY`] exclusively (whether this store is
/// alone), then holds it shared. Returns the session and whether the store is alone.
pub(crate) async fn open(options: &PgConnectOptions) -> MetaResult<(PgConnection, bool)> {
    let mut conn = within("cannot open the presence connection", options.connect()).await?;
    let alone: bool = within(
        "cannot check for other nodes",
        sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(PRESENCE_KEY)
            .fetch_one(&mut conn),
    )
    .await?;
    within("cannot mark this node present", hold_shared(&mut conn)).await?;
    if alone {
        within(
            "cannot mark this node present",
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(PRESENCE_KEY)
                .execute(&mut conn),
        )
        .await?;
    }
    Ok((conn, alone))
}

/// Takes [`PRESENCE_KEY`] shared on `conn`, waiting while another store opening holds it
/// exclusively (for the few statements of [`open`]).
async fn hold_shared(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_lock_shared($1)")
        .bind(PRESENCE_KEY)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Keeps the presence session alive until the task is aborted (the store dropped), which
/// drops the connection and with it the lock (P2); reconnects a lost one (P3).
pub(crate) async fn keep(options: PgConnectOptions, mut conn: PgConnection) {
    loop {
        tokio::time::sleep(PRESENCE_CHECK).await;
        // Bounded, so a connection cut off without a reset (a partition) is found too.
        if within("presence check", conn.ping()).await.is_ok() {
            continue;
        }
        tracing::debug!("metastore presence connection lost; reconnecting");
        conn = loop {
            tokio::time::sleep(PRESENCE_RETRY).await;
            let Ok(mut fresh) = within("presence reconnect", options.connect()).await else {
                continue;
            };
            if within("presence reconnect", hold_shared(&mut fresh))
                .await
                .is_ok()
            {
                break fresh;
            }
        };
    }
}
