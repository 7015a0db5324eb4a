//! The cluster uuid, kept in the metastore so every node sharing it reports the same one.

use serde_json::json;
use sluice_meta::{Collection, Expect, MetaError, MetaStore};

/// The metastore key of the cluster uuid document (`{"uuid": "…"}`), in the cluster
/// settings collection next to the persistent settings document.
const KEY: &str = "cluster_uuid";

/// The cluster uuid: the one in the metastore, or — the first time a node starts on this
/// metastore — `proposed` (the uuid the node kept in `node.json`, so a single node keeps
/// the uuid it always had). Two nodes starting at once on an empty metastore agree: the
/// write is create-if-absent, and the loser reads the winner's.
pub async fn load_or_init(store: &dyn MetaStore, proposed: &str) -> Result<String, MetaError> {
    for _ in 0..2 {
        if let Some(doc) = store.get(Collection::ClusterSettings, KEY).await? {
            if let Some(uuid) = doc.value.get("uuid").and_then(|v| v.as_str()) {
                return Ok(uuid.to_string());
            }
            return Err(MetaError::Backend(format!(
                "the metastore document [{}/{KEY}] has no string [uuid]: {}",
                Collection::ClusterSettings,
                doc.value
            )));
        }
        match store
            .put(
                Collection::ClusterSettings,
                KEY,
                json!({ "uuid": proposed }),
                Expect::Absent,
            )
            .await
        {
            Ok(_) => return Ok(proposed.to_string()),
            Err(MetaError::Conflict { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(MetaError::Backend(format!(
        "the cluster uuid document [{}/{KEY}] kept changing while it was read",
        Collection::ClusterSettings
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn test_the_first_proposal_wins_and_later_nodes_read_it() {
        let store = sluice_meta::MemoryMetaStore::new();
        assert_eq!(load_or_init(&store, "first").await.unwrap(), "first");
        assert_eq!(load_or_init(&store, "second").await.unwrap(), "first");
    }
}
