//! Metastore errors: a failed precondition, a failing backend, or stored data that cannot be
//! read back.

use crate::model::{Collection, Expect};

/// Why a metastore operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetaError {
    /// A write's [`Expect`] precondition did not hold; nothing of its batch was applied.
    #[error(
        "version conflict on [{collection}/{key}]: expected {expected}, found {}; re-read the document and retry the change against its current version",
        describe_current(*current)
    )]
    Conflict {
        /// The collection of the conflicting write.
        collection: Collection,
        /// The key of the conflicting write.
        key: String,
        /// What the write expected.
        expected: Expect,
        /// The key's current version; `None` when it holds no document.
        current: Option<u64>,
    },
    /// The store cannot be reached (connection refused or lost, server shutting down, no
    /// connection within the timeout); nothing was learned or, for a write, it landed whole
    /// or not at all. Retry once the store is back.
    #[error(
        "the metastore is unreachable: {0}; check that it runs and this node can connect to it, then retry"
    )]
    Unavailable(String),
    /// The backend failed (I/O, lock timeout, a refused statement); the operation may be
    /// retried. The message says what to check, which depends on the backend (a data folder
    /// for SQLite, credentials or a database for PostgreSQL).
    #[error("metastore backend failed: {0}")]
    Backend(String),
    /// Stored data cannot be decoded; it was written by something other than this code.
    #[error(
        "metastore data at [{location}] is corrupt: {reason}; restore the metastore from a backup, or delete the damaged document and recreate it"
    )]
    Corrupt {
        /// Where the bad data is (`collection/key`, or a table name).
        location: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn describe_current(current: Option<u64>) -> String {
    match current {
        Some(v) => format!("version {v}"),
        None => "no document".to_string(),
    }
}

/// The metastore's result type.
pub type MetaResult<T> = Result<T, MetaError>;
