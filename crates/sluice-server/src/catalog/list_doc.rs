//! A list kept as one metastore document, `{"<field>": [item, …]}`, read whole and written whole
//! with compare-and-set: the storage of workload groups and of tagging rules ([`super`]).
//!
//! One document per list means one compare-and-set covers a whole change (a create that checks
//! name uniqueness, a delete, an update that must not race another update), so the stored list
//! is always one that validation accepted.
//!
//! # Invariants
//! - A write is computed from the list as read and lands only if the document still has the
//!   version read ([`Expect::Version`], or [`Expect::Absent`] when it never existed): the
//!   metastore's compare-and-set is the only serialization of writers, on this node and across
//!   nodes sharing the store; there is no lock of our own.
//! - A conflict (another writer landed in between) makes the caller re-read and re-validate
//!   from scratch ([`ListDoc::try_write`] answers `false`), at most [`MAX_WRITE_ATTEMPTS`]
//!   times; then the conflict is the answer (500). Each conflict means another write landed,
//!   so concurrent writers always make progress.
//! - After a write lands, the node's workload view is reloaded before the caller answers, so a
//!   request sent after the answer is tagged with the new definitions.

use serde_json::{Value, json};
use sluice_meta::{Collection, Expect, MetaError, MetaStore};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// How many times a write re-reads and re-validates after another writer changed the list
/// between its read and its write. Each conflict means another write of the list landed, so a
/// writer gives up only after this many others landed during its own attempts: far more than
/// the admin requests that change groups or rules at once, even from several nodes.
pub const MAX_WRITE_ATTEMPTS: usize = 100;

/// Where a list is stored and how its items read and write.
#[derive(Debug, Clone, Copy)]
pub struct ListDoc<T> {
    /// The metastore collection.
    pub collection: Collection,
    /// The document's key in the collection.
    pub key: &'static str,
    /// The document's one field, holding the items.
    pub field: &'static str,
    /// What the list holds, for messages ("workload groups").
    pub what: &'static str,
    /// Decodes a stored item; the error says what is wrong with it.
    pub decode: fn(&Value) -> Result<T, String>,
    /// Encodes an item for storage.
    pub encode: fn(&T) -> Value,
}

/// A list as read, with the version of the document it was read from.
#[derive(Debug, Clone)]
pub struct Stored<T> {
    /// Every item, in stored order.
    pub items: Vec<T>,
    /// The document's version; `None` when it was never written.
    pub version: Option<u64>,
}

impl<T> Default for Stored<T> {
    fn default() -> Self {
        Stored {
            items: Vec::new(),
            version: None,
        }
    }
}

impl<T> ListDoc<T> {
    /// Reads the list; an absent document is an empty list, one that does not decode is a 500
    /// naming it (it was not written by this module).
    ///
    /// # Cancel safety
    /// Only reads; safe to drop.
    pub async fn load(&self, store: &dyn MetaStore) -> ApiResult<Stored<T>> {
        let Some(doc) = store
            .get(self.collection, self.key)
            .await
            .map_err(|e| self.meta_error(e))?
        else {
            return Ok(Stored::default());
        };
        let corrupt = |reason: String| {
            self.meta_error(MetaError::Corrupt {
                location: format!("{}/{}", self.collection, self.key),
                reason,
            })
        };
        let items = doc
            .value
            .get(self.field)
            .and_then(Value::as_array)
            .ok_or_else(|| corrupt(format!("no [{}] array", self.field)))?;
        let items = items
            .iter()
            .map(|v| (self.decode)(v).map_err(corrupt))
            .collect::<ApiResult<Vec<_>>>()?;
        Ok(Stored {
            items,
            version: Some(doc.version),
        })
    }

    /// `{"<field>": [encoded items]}`: the stored document.
    pub fn render(&self, items: &[T]) -> Value {
        let items: Vec<Value> = items.iter().map(self.encode).collect();
        json!({ self.field: items })
    }

    /// Writes `next` if the document is still at `version` (the one `next` was computed
    /// from); on success reloads the node's workload view and answers `true`. A conflict on
    /// the `attempt`-th try answers `false` (re-read, re-validate and try again) until
    /// [`MAX_WRITE_ATTEMPTS`], then the conflict is the error.
    ///
    /// # Cancel safety
    /// Dropping the future before the metastore write changes nothing; after it, the write
    /// either lands whole or not at all (re-read to find out).
    pub async fn try_write(
        &self,
        st: &AppState,
        next: &[T],
        version: Option<u64>,
        attempt: usize,
    ) -> ApiResult<bool> {
        let expected = version.map_or(Expect::Absent, Expect::Version);
        let written = st
            .metastore
            .put(self.collection, self.key, self.render(next), expected)
            .await;
        match written {
            Ok(_) => {
                super::reload(&st.workload, st.metastore.as_ref()).await?;
                Ok(true)
            }
            Err(MetaError::Conflict { .. }) if attempt < MAX_WRITE_ATTEMPTS => {
                tracing::debug!(attempt, what = self.what, "changed concurrently; retrying");
                Ok(false)
            }
            Err(e) => Err(self.meta_error(e)),
        }
    }

    /// A metastore failure: 503 when the store is unreachable, else 500, with the store's
    /// message ([`super::meta_error`]).
    pub fn meta_error(&self, e: MetaError) -> ApiError {
        ApiError::Engine(super::meta_error(&format!("access the {}", self.what), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_meta::MemoryMetaStore;

    /// A list of names; an item must be a string.
    const NAMES: ListDoc<String> = ListDoc {
        collection: Collection::Rules,
        key: "names",
        field: "names",
        what: "names",
        decode: decode_name,
        encode: encode_name,
    };

    fn decode_name(v: &Value) -> Result<String, String> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("not a name: {v}"))
    }

    #[allow(
        clippy::ptr_arg,
        reason = "ListDoc<String>::encode is fn(&String) -> Value"
    )]
    fn encode_name(name: &String) -> Value {
        Value::from(name.as_str())
    }

    fn message(e: ApiError) -> String {
        match e {
            ApiError::Engine(e) => e.reason,
            other => panic!("not an engine error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn test_absent_document_is_an_empty_list_and_a_written_one_reads_back() {
        let store = MemoryMetaStore::new();
        let empty = NAMES.load(&store).await.unwrap();
        assert!(empty.items.is_empty());
        assert_eq!(empty.version, None);

        let names = vec!["a".to_string(), "b".to_string()];
        let doc = NAMES.render(&names);
        assert_eq!(doc, json!({"names": ["a", "b"]}));
        store
            .put(Collection::Rules, "names", doc, Expect::Absent)
            .await
            .unwrap();
        let read = NAMES.load(&store).await.unwrap();
        assert_eq!(read.items, names);
        assert!(read.version.is_some());
    }

    #[tokio::test]
    async fn test_a_document_this_module_did_not_write_is_a_500_naming_it() {
        let store = MemoryMetaStore::new();
        store
            .put(
                Collection::Rules,
                "names",
                json!({"other": []}),
                Expect::Absent,
            )
            .await
            .unwrap();
        let e = message(NAMES.load(&store).await.unwrap_err());
        assert!(e.starts_with("cannot access the names: "), "{e}");
        assert!(e.contains("rules/names"), "{e}");
        assert!(e.contains("no [names] array"), "{e}");

        let v = NAMES.load(&store).await.map(|_| ()).unwrap_err();
        assert!(matches!(v, ApiError::Engine(ref e) if e.code.status() == 500));

        let current = store.get(Collection::Rules, "names").await.unwrap();
        store
            .put(
                Collection::Rules,
                "names",
                json!({"names": ["a", 7]}),
                Expect::Version(current.unwrap().version),
            )
            .await
            .unwrap();
        let e = message(NAMES.load(&store).await.unwrap_err());
        assert!(e.contains("not a name: 7"), "{e}");
    }
}
