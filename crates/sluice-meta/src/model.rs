//! The document model every backend stores: collections of versioned JSON documents, the
//! compare-and-set precondition [`Expect`], and the write operations of a batch.

use std::fmt;

use serde_json::Value;

/// A named set of documents; each backend keeps one keyspace per collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collection {
    /// Persistent cluster settings (`PUT _cluster/settings` with `persistent`).
    ClusterSettings,
    /// Workload groups: the server keeps them all in one document (key `groups`) so that one
    /// compare-and-set guards the cross-group checks (see `sluice-server`'s `api/wlm.rs`).
    WorkloadGroups,
    /// Auto-tagging rules, keyed by rule id.
    Rules,
}

impl Collection {
    /// Every collection, in a fixed order (the order of [`Collection::as_str`] names).
    pub const ALL: [Collection; 3] = [
        Collection::ClusterSettings,
        Collection::Rules,
        Collection::WorkloadGroups,
    ];

    /// The collection's stored name; stable, since it is written to disk.
    pub fn as_str(self) -> &'static str {
        match self {
            Collection::ClusterSettings => "cluster_settings",
            Collection::WorkloadGroups => "workload_groups",
            Collection::Rules => "rules",
        }
    }

    /// The collection's position in [`Collection::ALL`].
    pub fn index(self) -> usize {
        match self {
            Collection::ClusterSettings => 0,
            Collection::Rules => 1,
            Collection::WorkloadGroups => 2,
        }
    }

    /// The collection stored under `name`, if any.
    pub fn from_name(name: &str) -> Option<Collection> {
        Collection::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored document: its key, JSON value, version and last write time.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The key, unique within its collection.
    pub key: String,
    /// The JSON value, returned exactly as written (object key order included).
    pub value: Value,
    /// The store-wide revision at which this document was last written.
    ///
    /// Revisions start at 1 and grow by one with every put anywhere in the store, so a key
    /// never sees the same version twice, not even across a delete and re-create: a writer
    /// holding an old version cannot overwrite a newer document by accident (no ABA).
    pub version: u64,
    /// Wall-clock time of the last write, in milliseconds since the Unix epoch.
    pub updated_at_millis: i64,
}

/// The precondition of a write on the current state of its key (compare-and-set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expect {
    /// No precondition: the write applies whatever the key holds.
    Any,
    /// The key must hold no document (create only).
    Absent,
    /// The key must hold a document at exactly this version.
    Version(u64),
}

impl Expect {
    /// Whether a key whose current version is `current` (`None`: absent) meets this
    /// precondition.
    pub fn is_met_by(self, current: Option<u64>) -> bool {
        match self {
            Expect::Any => true,
            Expect::Absent => current.is_none(),
            Expect::Version(v) => current == Some(v),
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Any => f.write_str("any version"),
            Expect::Absent => f.write_str("no document"),
            Expect::Version(v) => write!(f, "version {v}"),
        }
    }
}

/// One write of a batch applied by [`MetaStore::apply`](crate::MetaStore::apply).
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Creates or replaces the document at `key` when `expected` holds.
    Put {
        collection: Collection,
        key: String,
        value: Value,
        expected: Expect,
    },
    /// Removes the document at `key` (if any) when `expected` holds.
    Delete {
        collection: Collection,
        key: String,
        expected: Expect,
    },
}

impl Op {
    /// A put of `value` at `key`.
    pub fn put(
        collection: Collection,
        key: impl Into<String>,
        value: Value,
        expected: Expect,
    ) -> Op {
        Op::Put {
            collection,
            key: key.into(),
            value,
            expected,
        }
    }

    /// A delete of `key`.
    pub fn delete(collection: Collection, key: impl Into<String>, expected: Expect) -> Op {
        Op::Delete {
            collection,
            key: key.into(),
            expected,
        }
    }

    /// The collection the op writes to.
    pub fn collection(&self) -> Collection {
        match self {
            Op::Put { collection, .. } | Op::Delete { collection, .. } => *collection,
        }
    }

    /// The key the op writes to.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    /// The op's precondition.
    pub fn expected(&self) -> Expect {
        match self {
            Op::Put { expected, .. } | Op::Delete { expected, .. } => *expected,
        }
    }
}

/// What one op of an applied batch did, in the order of the batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The document as written by a put, with its new version.
    Put(Document),
    /// The version a delete removed; `None` when the key held nothing.
    Deleted(Option<u64>),
}

/// How many committed batches have written to each collection: the store's change counters.
///
/// Every committed, non-empty batch adds one to the counter of each collection it has an op
/// for (a put, or a delete even of a missing key), whichever process committed it. A reader
/// that remembers the counters it last acted on learns from a newer reading which collections
/// changed since, deletes included (which consume no revision, see [`Document::version`]).
/// Failed and empty batches change no counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Changes {
    counts: [u64; Collection::ALL.len()],
}

impl Changes {
    /// The counter of `collection`.
    pub fn get(&self, collection: Collection) -> u64 {
        self.counts[collection.index()]
    }

    /// Sets the counter of `collection` (for backends decoding stored counters).
    pub fn set(&mut self, collection: Collection, count: u64) {
        self.counts[collection.index()] = count;
    }

    /// Adds one to the counter of `collection`.
    pub fn bump(&mut self, collection: Collection) {
        self.counts[collection.index()] += 1;
    }

    /// The collections whose counter differs from `earlier`'s.
    pub fn changed_since(&self, earlier: &Changes) -> Vec<Collection> {
        Collection::ALL
            .into_iter()
            .filter(|c| self.get(*c) != earlier.get(*c))
            .collect()
    }

    /// Raises every counter to at least `other`'s; answers whether any counter grew.
    /// Counters only grow, so merging readings that arrive out of order keeps the newest.
    pub fn merge(&mut self, other: &Changes) -> bool {
        let mut grew = false;
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            if theirs > *mine {
                *mine = theirs;
                grew = true;
            }
        }
        grew
    }

    /// The counters as `collection=count` pairs joined by commas, in [`Collection::ALL`]
    /// order: the payload of PostgreSQL change notifications.
    pub fn encode(&self) -> String {
        Collection::ALL
            .into_iter()
            .map(|c| format!("{c}={}", self.get(c)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Parses what [`Changes::encode`] wrote; unknown collections are skipped (a newer
    /// writer), a malformed pair is `None`.
    pub fn decode(text: &str) -> Option<Changes> {
        let mut changes = Changes::default();
        for pair in text.split(',').filter(|p| !p.is_empty()) {
            let (name, count) = pair.split_once('=')?;
            let count = count.parse::<u64>().ok()?;
            if let Some(c) = Collection::from_name(name) {
                changes.set(c, count);
            }
        }
        Some(changes)
    }
}

/// Which backend a [`MetaStore`](crate::MetaStore) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaKind {
    /// [`MemoryMetaStore`](crate::MemoryMetaStore): one process, nothing on disk.
    Memory,
    /// [`SqliteMetaStore`](crate::SqliteMetaStore): the embedded file; one node only.
    Sqlite,
    /// [`PostgresMetaStore`](crate::PostgresMetaStore): shared by every node of a cluster.
    Postgres,
}

impl MetaKind {
    /// The backend's name in messages and APIs: `memory`, `sqlite`, `postgres`.
    pub fn as_str(self) -> &'static str {
        match self {
            MetaKind::Memory => "memory",
            MetaKind::Sqlite => "sqlite",
            MetaKind::Postgres => "postgres",
        }
    }

    /// Whether several nodes (processes) can share the store: only PostgreSQL.
    pub fn is_shared(self) -> bool {
        self == MetaKind::Postgres
    }
}

impl fmt::Display for MetaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node as it records itself in a shared metastore ([`crate::MetaStore::heartbeat`]): what
/// another node needs to tell whether it is a member, and to reach it if it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePresence {
    /// The node id.
    pub node_id: String,
    /// `node.name`.
    pub name: String,
    /// Its transport address (`host:port`: gossip over UDP, RPC over TCP).
    pub transport: String,
    /// `cluster.name`.
    pub cluster_name: String,
    /// Its incarnation (start time in milliseconds).
    pub generation: u64,
    /// The node ids its gossip membership held at this heartbeat, itself included: whom it
    /// hears, so that a node its peers no longer hear, while it hears them, can tell (a link
    /// dropping one direction). `None`: not known yet (a node writing its row before its
    /// gossip starts) or not recorded (a row of an earlier sluice).
    pub hears: Option<Vec<String>>,
    /// The node ids its split view counted off its side at this heartbeat (unjoined past the
    /// grace, or joined again for less than it), so that two nodes that each count the other
    /// off can tell, and keep each other out of their shared-tier rings until the link has
    /// held (S11 of `sluice-cluster`'s `split.rs`). `None`: not known yet or not recorded.
    pub unjoined: Option<Vec<String>>,
}
