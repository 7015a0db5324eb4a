//! The cluster's identity in the metastore: its uuid, which every node sharing the metastore
//! reports, and its `cluster.name`, which every node sharing it must have.
//!
//! Invariants:
//! - U1 Every node on one metastore reports the same cluster uuid: the first node's proposal,
//!   written create-if-absent (`test_the_first_proposal_wins_and_later_nodes_read_it`).
//! - U2 A shared metastore (PostgreSQL) serves one `cluster.name`: a node of another name
//!   refuses to start, naming both. Gossip keeps clusters of different names apart, so two
//!   names on one metastore would be two clusters sharing groups, rules and settings, each
//!   with its own shared-tier ring — every `shared_limit` allowed once per name
//!   (`test_a_shared_metastore_refuses_another_cluster_name`; over HTTP,
//!   `test_a_node_of_another_cluster_name_refuses_a_shared_metastore`).
//! - U3 A node's own metastore (SQLite, memory) takes the node's current name: renaming a
//!   one-node cluster is a restart with another `cluster.name`, as in OpenSearch
//!   (`test_a_nodes_own_metastore_follows_a_rename`).
//! - U4 A metastore written before the name was kept (a uuid document without a name) takes
//!   the name of the first node that starts on it (`test_an_unnamed_cluster_takes_the_first_name`).

use serde_json::{Value, json};
use sluice_meta::{Collection, Document, Expect, MetaError, MetaKind, MetaStore};

/// The metastore key of the cluster identity document (`{"uuid": "…", "cluster_name":
/// "…"}`), in the cluster settings collection next to the persistent settings document.
const KEY: &str = "cluster_uuid";

/// How many times a node re-reads the identity document after losing a compare-and-set to
/// another node starting at the same moment. Each loss means another node's write landed, and
/// that write is create-once or name-once, so a second round always finds it settled; a third
/// is room for a metastore that answers a conflict spuriously.
const CLAIM_ROUNDS: usize = 3;

/// Why a node cannot take its identity from the metastore.
#[derive(Debug)]
pub enum IdentityError {
    /// The metastore failed, or holds an identity document sluice cannot read.
    Meta(MetaError),
    /// The shared metastore belongs to a cluster of another name (U2).
    OtherClusterName {
        /// The name recorded in the metastore.
        recorded: String,
        /// The cluster uuid recorded with it.
        uuid: String,
    },
}

impl IdentityError {
    /// The start-up error of a node named into `cluster_name` on `metastore` (shown as in
    /// logs, without a password): what is wrong, and the two ways out.
    pub fn describe(&self, cluster_name: &str, metastore: &dyn std::fmt::Display) -> String {
        match self {
            IdentityError::Meta(e) => {
                format!("cannot read the cluster identity from the metastore [{metastore}]: {e}")
            }
            IdentityError::OtherClusterName { recorded, uuid } => format!(
                "the metastore [{metastore}] belongs to cluster [{recorded}] (uuid [{uuid}]), \
                 and this node's cluster.name is [{cluster_name}]: nodes of two cluster names \
                 would share its workload groups, rules and settings without being one \
                 cluster. Set cluster.name to [{recorded}] to join that cluster, or give this \
                 cluster a metastore of its own (metastore.uri)"
            ),
        }
    }
}

impl From<MetaError> for IdentityError {
    fn from(e: MetaError) -> Self {
        IdentityError::Meta(e)
    }
}

/// The cluster uuid for a node named into cluster `cluster_name`: the one in the metastore,
/// or — the first time a node starts on this metastore — `proposed` (the uuid the node kept
/// in `node.json`, so a single node keeps the uuid it always had). Two nodes starting at
/// once on an empty metastore agree: the write is create-if-absent, and the loser reads the
/// winner's (U1). The name is checked (`shared`: the metastore is other nodes' too, as
/// [`is_shared`] tells) or recorded as U2–U4 say.
pub async fn load_or_init(
    store: &dyn MetaStore,
    proposed: &str,
    cluster_name: &str,
    shared: bool,
) -> Result<String, IdentityError> {
    for _ in 0..CLAIM_ROUNDS {
        let Some(doc) = store.get(Collection::ClusterSettings, KEY).await? else {
            let created = store
                .put(
                    Collection::ClusterSettings,
                    KEY,
                    json!({ "uuid": proposed, "cluster_name": cluster_name }),
                    Expect::Absent,
                )
                .await;
            match created {
                Ok(_) => return Ok(proposed.to_string()),
                Err(MetaError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let uuid = uuid_of(&doc)?;
        let recorded = doc.value.get("cluster_name").and_then(Value::as_str);
        match recorded {
            Some(name) if name == cluster_name => return Ok(uuid),
            Some(name) if shared => {
                return Err(IdentityError::OtherClusterName {
                    recorded: name.to_string(),
                    uuid,
                });
            }
            // U3, U4: record this node's name.
            _ => {
                let named = store
                    .put(
                        Collection::ClusterSettings,
                        KEY,
                        json!({ "uuid": uuid, "cluster_name": cluster_name }),
                        Expect::Version(doc.version),
                    )
                    .await;
                match named {
                    Ok(_) => return Ok(uuid),
                    Err(MetaError::Conflict { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Err(MetaError::Backend(format!(
        "the cluster identity document [{}/{KEY}] kept changing while it was read",
        Collection::ClusterSettings
    ))
    .into())
}

/// Whether `store` is one other nodes may share (PostgreSQL), so that U2 applies.
pub fn is_shared(store: &dyn MetaStore) -> bool {
    store.kind() == MetaKind::Postgres
}

/// The uuid an identity document holds.
fn uuid_of(doc: &Document) -> Result<String, MetaError> {
    match doc.value.get("uuid").and_then(Value::as_str) {
        Some(uuid) => Ok(uuid.to_string()),
        None => Err(MetaError::Backend(format!(
            "the metastore document [{}/{KEY}] has no string [uuid]: {}",
            Collection::ClusterSettings,
            doc.value
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_meta::MemoryMetaStore;

    #[tokio::test]
    async fn test_the_first_proposal_wins_and_later_nodes_read_it() {
        let store = MemoryMetaStore::new();
        assert_eq!(
            load_or_init(&store, "first", "c", false).await.unwrap(),
            "first"
        );
        assert_eq!(
            load_or_init(&store, "second", "c", true).await.unwrap(),
            "first"
        );
    }

    #[tokio::test]
    async fn test_a_nodes_own_metastore_follows_a_rename() {
        let store = MemoryMetaStore::new();
        assert_eq!(load_or_init(&store, "u", "old", false).await.unwrap(), "u");
        assert_eq!(load_or_init(&store, "v", "new", false).await.unwrap(), "u");
        let doc = store
            .get(Collection::ClusterSettings, KEY)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(doc.value, json!({"uuid": "u", "cluster_name": "new"}));
    }

    #[tokio::test]
    async fn test_a_shared_metastore_refuses_another_cluster_name() {
        let store = MemoryMetaStore::new();
        assert_eq!(load_or_init(&store, "u", "alpha", true).await.unwrap(), "u");
        match load_or_init(&store, "v", "beta", true).await {
            Err(IdentityError::OtherClusterName { recorded, uuid }) => {
                assert_eq!((recorded.as_str(), uuid.as_str()), ("alpha", "u"));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // The refused node changed nothing.
        let doc = store
            .get(Collection::ClusterSettings, KEY)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(doc.value, json!({"uuid": "u", "cluster_name": "alpha"}));
        assert_eq!(load_or_init(&store, "w", "alpha", true).await.unwrap(), "u");
    }

    #[tokio::test]
    async fn test_an_unnamed_cluster_takes_the_first_name() {
        let store = MemoryMetaStore::new();
        store
            .put(
                Collection::ClusterSettings,
                KEY,
                json!({"uuid": "u"}),
                Expect::Absent,
            )
            .await
            .unwrap();
        assert_eq!(load_or_init(&store, "v", "c", true).await.unwrap(), "u");
        let doc = store
            .get(Collection::ClusterSettings, KEY)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(doc.value, json!({"uuid": "u", "cluster_name": "c"}));
    }

    #[tokio::test]
    async fn test_a_document_without_a_uuid_is_an_error_not_a_new_cluster() {
        let store = MemoryMetaStore::new();
        store
            .put(
                Collection::ClusterSettings,
                KEY,
                json!({"id": 1}),
                Expect::Absent,
            )
            .await
            .unwrap();
        match load_or_init(&store, "v", "c", true).await {
            Err(IdentityError::Meta(MetaError::Backend(m))) => assert!(m.contains("[uuid]"), "{m}"),
            other => panic!("expected a metastore error, got {other:?}"),
        }
    }
}
