//! Updates and persistence: [`ClusterSettings`] holds the current [`SettingsSnapshot`] and
//! publishes a new one after each [`ClusterSettings::apply`], which validates an update, saves
//! the persistent values to the metastore (one document, compare-and-set) and never leaves a
//! half-applied state.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};
use sluice_core::WlmMode;
use sluice_engine::EngineError;
use sluice_meta::{Collection, Expect, MetaError, MetaStore, Op, Outcome};
use tokio::sync::watch;

use super::keys::ARCHIVED_PREFIX;
use super::registry::definition;
use super::snapshot::{CROSS_CHECKS, SettingsSnapshot};
use super::values::parse_value;

/// The metastore document (in [`Collection::ClusterSettings`]) holding every persistent
/// setting as one flat object `{"key": "value", …}`; one document, so one compare-and-set
/// covers a whole update and the merged result stays valid.
pub const PERSISTENT_DOC: &str = "persistent";

/// The metastore document holding the transient settings of a cluster that shares its
/// metastore (PostgreSQL), in the same shape: every node applies them, as OpenSearch's cluster
/// state carries transient settings to every node. A node with its own metastore (the
/// embedded SQLite file) keeps them in memory only, so they end with its process.
pub const TRANSIENT_DOC: &str = "transient";

/// Which of the two update scopes a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Saved in the metastore; survives restarts.
    Persistent,
    /// Shared by the nodes of a cluster through its metastore; memory only on a node with
    /// a metastore of its own, gone after its restart.
    Transient,
}

impl Scope {
    /// The scope's name in requests, responses and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Persistent => "persistent",
            Scope::Transient => "transient",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a settings update was refused or could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A key or value the registry rejects, or a merged result that breaks a rule; the
    /// message is OpenSearch's.
    #[error("{0}")]
    Invalid(String),
    /// The metastore failed; nothing was changed.
    #[error("cannot save the cluster settings: {0}")]
    Store(#[from] MetaError),
}

impl From<SettingsError> for EngineError {
    fn from(e: SettingsError) -> Self {
        match e {
            SettingsError::Invalid(reason) => EngineError::illegal_argument(reason),
            // 503 when the metastore is unreachable, else 500 (see `catalog::meta_error`).
            SettingsError::Store(e) => crate::catalog::meta_error("save the cluster settings", e),
        }
    }
}

/// One `PUT _cluster/settings`: per scope, the keys to set (`Some`) or reset (`None`, which
/// also takes `*` patterns), flattened to dotted keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingsUpdate {
    /// Changes to the persistent values.
    pub persistent: Vec<(String, Option<String>)>,
    /// Changes to the transient values.
    pub transient: Vec<(String, Option<String>)>,
}

impl SettingsUpdate {
    /// Whether the update names no key at all.
    pub fn is_empty(&self) -> bool {
        self.persistent.is_empty() && self.transient.is_empty()
    }
}

/// What an update set, per scope (resets are not echoed), as OpenSearch's response shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppliedUpdate {
    /// Persistent values set by the update.
    pub persistent: BTreeMap<String, String>,
    /// Transient values set by the update.
    pub transient: BTreeMap<String, String>,
}

/// How many times an update retries when another writer changed the persistent document
/// between our read and our write (updates on this node queue on [`ClusterSettings`]'s
/// mutex, so only other nodes sharing the metastore cause this); each conflict means another
/// update landed, so this is far more than the admin requests that race in practice.
const MAX_UPDATE_ATTEMPTS: usize = 100;

/// [`ClusterSettings::cancel_after_nanos`] when `search.cancel_after_time_interval` is
/// disabled. A longer interval (585 years) is kept as one nanosecond less.
const NO_CANCEL_AFTER: u64 = u64::MAX;

/// A mode as [`ClusterSettings::wlm_mode`] keeps it (`wlm_mode` reads it back).
fn mode_code(mode: WlmMode) -> u8 {
    match mode {
        WlmMode::Enabled => 0,
        WlmMode::MonitorOnly => 1,
        WlmMode::Disabled => 2,
    }
}

/// The values of `snapshot` kept in [`ClusterSettings`]' atomics.
fn hot_values(snapshot: &SettingsSnapshot) -> (u8, u64) {
    let cancel_after = snapshot
        .cancel_after_time_interval()
        .map_or(NO_CANCEL_AFTER, |d| {
            u64::try_from(d.as_nanos()).map_or(NO_CANCEL_AFTER - 1, |n| n.min(NO_CANCEL_AFTER - 1))
        });
    (mode_code(snapshot.wlm_mode()), cancel_after)
}

/// The node's dynamic cluster settings: the current [`SettingsSnapshot`], published through
/// a watch channel, and the metastore holding the persistent values.
///
/// Reads ([`ClusterSettings::snapshot`] and the typed accessors) take the channel's read
/// lock only to clone an `Arc`; updates are serialized by an async mutex held across the
/// metastore write, so two updates never interleave their read-validate-write. The two
/// settings every search reads ([`ClusterSettings::wlm_mode`],
/// [`ClusterSettings::cancel_after_time_interval`]) are also kept in atomics each publication
/// sets, and read there: the channel's read lock writes its lock word, and the gateway's lane
/// threads passed that cache line between them four times a search (BENCHMARKS.md "Lines the
/// lane threads shared").
pub struct ClusterSettings {
    current: watch::Sender<Arc<SettingsSnapshot>>,
    /// `wlm.workload_group.mode` of the current snapshot ([`mode_code`]).
    wlm_mode: AtomicU8,
    /// `search.cancel_after_time_interval` of the current snapshot in nanoseconds,
    /// [`NO_CANCEL_AFTER`] when disabled.
    cancel_after_nanos: AtomicU64,
    store: Arc<dyn MetaStore>,
    /// Whether the transient values live in the metastore too ([`TRANSIENT_DOC`]): a
    /// metastore other nodes share.
    shared_transient: bool,
    /// Held by an update from validation to publication; holds the versions of the
    /// documents the current snapshot was built from (`None`: no document).
    update: tokio::sync::Mutex<Versions>,
}

/// The versions of the persistent and transient documents a snapshot was built from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Versions {
    persistent: Option<u64>,
    transient: Option<u64>,
}

impl fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("current", &*self.current.borrow())
            .finish_non_exhaustive()
    }
}

impl ClusterSettings {
    /// Loads the persistent settings from `store`, and the transient ones when the store is
    /// shared by a cluster (else they start empty).
    ///
    /// A stored key that is no longer registered, or a value that no longer validates, is
    /// dropped with a warning (and disappears from the store at the next update), so a
    /// downgrade or a tightened bound never keeps the node from starting.
    ///
    /// # Cancel safety
    ///
    /// Only reads; safe to drop.
    pub async fn load(store: Arc<dyn MetaStore>) -> Result<ClusterSettings, MetaError> {
        ClusterSettings::load_on(store, BTreeMap::new()).await
    }

    /// [`ClusterSettings::load`] over the node's own defaults (settings given in its
    /// configuration, already validated): they apply where neither scope sets a value.
    ///
    /// # Cancel safety
    ///
    /// Only reads; safe to drop.
    pub async fn load_on(
        store: Arc<dyn MetaStore>,
        node_defaults: BTreeMap<String, String>,
    ) -> Result<ClusterSettings, MetaError> {
        let shared_transient = store.kind() != sluice_meta::MetaKind::Sqlite;
        if shared_transient && store.opened_alone() {
            forget_transient(store.as_ref()).await?;
        }
        let (persistent, transient, versions) =
            read_stored(store.as_ref(), shared_transient).await?;
        let snapshot = SettingsSnapshot::build_on(Arc::new(node_defaults), persistent, transient);
        for rule in CROSS_CHECKS {
            if let Err(reason) = rule(&snapshot) {
                tracing::warn!(%reason, "persistent cluster settings break a rule; fix them with PUT _cluster/settings");
            }
        }
        let (wlm_mode, cancel_after_nanos) = hot_values(&snapshot);
        let (current, _) = watch::channel(Arc::new(snapshot));
        Ok(ClusterSettings {
            current,
            wlm_mode: AtomicU8::new(wlm_mode),
            cancel_after_nanos: AtomicU64::new(cancel_after_nanos),
            store,
            shared_transient,
            update: tokio::sync::Mutex::new(versions),
        })
    }

    /// Re-reads the stored settings from the metastore and, when another node changed them
    /// since this node last read or wrote them, publishes a snapshot of them (next to this
    /// node's own transient values when those are not shared). Answers whether a new
    /// snapshot was published.
    ///
    /// Values that no longer validate are dropped with a warning, as at [`ClusterSettings::load`].
    ///
    /// # Cancel safety
    ///
    /// Only reads the store; dropping the future before it publishes changes nothing.
    pub async fn reload(&self) -> Result<bool, MetaError> {
        let mut stored_versions = self.update.lock().await;
        let (persistent, transient, versions) =
            read_stored(self.store.as_ref(), self.shared_transient).await?;
        if versions == *stored_versions {
            return Ok(false);
        }
        *stored_versions = versions;
        let current = self.snapshot();
        let transient = self.transient_of(transient, &current);
        if persistent == *current.persistent() && transient == *current.transient() {
            return Ok(false);
        }
        let next = SettingsSnapshot::build_on(current.node_defaults(), persistent, transient);
        for rule in CROSS_CHECKS {
            if let Err(reason) = rule(&next) {
                tracing::warn!(%reason, "persistent cluster settings changed by another node break a rule; fix them with PUT _cluster/settings");
            }
        }
        self.publish(next);
        Ok(true)
    }

    /// The transient values a snapshot built from the store holds: the `stored` ones when they
    /// are shared, else this node's own, as in `current`.
    fn transient_of(&self, stored: SettingsMap, current: &SettingsSnapshot) -> SettingsMap {
        if self.shared_transient {
            stored
        } else {
            current.transient().clone()
        }
    }

    /// Makes `next` the current snapshot: its hot values first, then the snapshot, so a
    /// subscriber woken by it reads the same through the accessors. Called with the update
    /// mutex held, so publications do not interleave.
    fn publish(&self, next: SettingsSnapshot) {
        let (wlm_mode, cancel_after_nanos) = hot_values(&next);
        self.wlm_mode.store(wlm_mode, Ordering::Release);
        self.cancel_after_nanos
            .store(cancel_after_nanos, Ordering::Release);
        self.current.send_replace(Arc::new(next));
    }

    /// The current settings; cheap (an `Arc` clone), and consistent across several reads.
    pub fn snapshot(&self) -> Arc<SettingsSnapshot> {
        self.current.borrow().clone()
    }

    /// A receiver that sees every new snapshot, for components that react to changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<SettingsSnapshot>> {
        self.current.subscribe()
    }

    /// `search.cancel_after_time_interval`; `None` when disabled.
    pub fn cancel_after_time_interval(&self) -> Option<Duration> {
        match self.cancel_after_nanos.load(Ordering::Acquire) {
            NO_CANCEL_AFTER => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// `search.max_open_scroll_context`.
    pub fn max_open_scroll_context(&self) -> u32 {
        self.current.borrow().max_open_scroll_context()
    }

    /// `search.default_keep_alive`.
    pub fn default_keep_alive(&self) -> Duration {
        self.current.borrow().default_keep_alive()
    }

    /// `search.max_keep_alive`.
    pub fn max_keep_alive(&self) -> Duration {
        self.current.borrow().max_keep_alive()
    }

    /// `search.max_buckets`.
    pub fn max_buckets(&self) -> u32 {
        self.current.borrow().max_buckets()
    }

    /// `wlm.workload_group.mode`.
    pub fn wlm_mode(&self) -> WlmMode {
        match self.wlm_mode.load(Ordering::Acquire) {
            0 => WlmMode::Enabled,
            1 => WlmMode::MonitorOnly,
            _ => WlmMode::Disabled,
        }
    }

    /// Applies `update`: checks every key and value (transient first, then persistent, each
    /// in key order, as OpenSearch does), then the merged result against [`CROSS_CHECKS`];
    /// only when all pass saves the persistent values and publishes the new snapshot.
    /// Returns the values set.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the metastore write leaves everything unchanged; after
    /// it, the write may land while the in-memory snapshot stays old until the next update or
    /// restart reads it back.
    pub async fn apply(&self, update: SettingsUpdate) -> Result<AppliedUpdate, SettingsError> {
        let mut stored_versions = self.update.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.snapshot();
            let (transient, set_transient) =
                merge_scope(current.transient(), &update.transient, Scope::Transient)?;
            let (persistent, set_persistent) =
                merge_scope(current.persistent(), &update.persistent, Scope::Persistent)?;
            let next = SettingsSnapshot::build_on(current.node_defaults(), persistent, transient);
            for rule in CROSS_CHECKS {
                rule(&next).map_err(SettingsError::Invalid)?;
            }
            // Both documents in one batch: an update of both scopes lands whole or not at all.
            // On a shared metastore a change of either writes both, the unchanged one as it
            // was read: its compare-and-set is what proves the cross-setting checks above ran
            // against the other scope's current values (a transient update on one node and a
            // persistent one on another, each valid alone, could otherwise break a rule
            // together).
            let persistent_changed = next.persistent() != current.persistent();
            let transient_changed =
                self.shared_transient && next.transient() != current.transient();
            let mut writes = Vec::new();
            if persistent_changed || transient_changed {
                writes.push((
                    PERSISTENT_DOC,
                    next.persistent(),
                    stored_versions.persistent,
                ));
            }
            if transient_changed || persistent_changed && self.shared_transient {
                writes.push((TRANSIENT_DOC, next.transient(), stored_versions.transient));
            }
            if !writes.is_empty() {
                let batch = writes
                    .iter()
                    .map(|(key, values, version)| {
                        let doc: Map<String, Value> = values
                            .iter()
                            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                            .collect();
                        let expected = version.map_or(Expect::Absent, Expect::Version);
                        Op::put(
                            Collection::ClusterSettings,
                            *key,
                            Value::Object(doc),
                            expected,
                        )
                    })
                    .collect();
                match self.store.apply(batch).await {
                    Ok(outcomes) => {
                        for ((key, _, _), outcome) in writes.iter().zip(outcomes) {
                            let Outcome::Put(doc) = outcome else { continue };
                            if *key == PERSISTENT_DOC {
                                stored_versions.persistent = Some(doc.version);
                            } else {
                                stored_versions.transient = Some(doc.version);
                            }
                        }
                    }
                    Err(MetaError::Conflict { .. }) if attempt < MAX_UPDATE_ATTEMPTS => {
                        // Another node changed the stored settings: start over from what it
                        // wrote (keeping our own transient values when they are not shared).
                        let (persistent, transient, versions) =
                            read_stored(self.store.as_ref(), self.shared_transient).await?;
                        *stored_versions = versions;
                        let transient = self.transient_of(transient, &current);
                        self.publish(SettingsSnapshot::build_on(
                            current.node_defaults(),
                            persistent,
                            transient,
                        ));
                        continue;
                    }
                    Err(e) => return Err(SettingsError::Store(e)),
                }
            }
            self.publish(next);
            return Ok(AppliedUpdate {
                persistent: set_persistent,
                transient: set_transient,
            });
        }
    }
}

/// Forgets the transient settings a stopped cluster left in its shared store, as OpenSearch
/// forgets them in a full cluster restart: called by a node that found no other node running
/// when it opened the store. A write by another node that started meanwhile wins (its values
/// are the running cluster's).
async fn forget_transient(store: &dyn MetaStore) -> Result<(), MetaError> {
    let Some(doc) = store
        .get(Collection::ClusterSettings, TRANSIENT_DOC)
        .await?
    else {
        return Ok(());
    };
    let keys: Vec<&String> = doc
        .value
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    match store
        .delete(
            Collection::ClusterSettings,
            TRANSIENT_DOC,
            Expect::Version(doc.version),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(
                ?keys,
                "no other node had the metastore open: the transient cluster settings of the last run end here, as in a full cluster restart"
            );
            Ok(())
        }
        Err(MetaError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Reads the stored settings: the persistent values, the transient ones when `transient`
/// (they are shared), and the documents' versions.
async fn read_stored(
    store: &dyn MetaStore,
    transient: bool,
) -> Result<(SettingsMap, SettingsMap, Versions), MetaError> {
    let (persistent, persistent_version) = read_scope(store, Scope::Persistent).await?;
    let (transient, transient_version) = if transient {
        read_scope(store, Scope::Transient).await?
    } else {
        (BTreeMap::new(), None)
    };
    let versions = Versions {
        persistent: persistent_version,
        transient: transient_version,
    };
    Ok((persistent, transient, versions))
}

/// Reads and validates one scope's document; returns the valid values and its version.
async fn read_scope(
    store: &dyn MetaStore,
    scope: Scope,
) -> Result<(SettingsMap, Option<u64>), MetaError> {
    let key = match scope {
        Scope::Persistent => PERSISTENT_DOC,
        Scope::Transient => TRANSIENT_DOC,
    };
    let Some(doc) = store.get(Collection::ClusterSettings, key).await? else {
        return Ok((BTreeMap::new(), None));
    };
    let Value::Object(map) = doc.value else {
        return Err(MetaError::Corrupt {
            location: format!("{}/{key}", Collection::ClusterSettings),
            reason: format!("expected an object of settings, found {}", doc.value),
        });
    };
    let mut values = BTreeMap::new();
    for (key, value) in map {
        let Value::String(raw) = value else {
            tracing::warn!(%key, %value, "dropping a stored {scope} setting whose value is not a string");
            continue;
        };
        let Some(def) = definition(&key) else {
            tracing::warn!(%key, value = %raw, "dropping a stored {scope} setting this node does not recognize");
            continue;
        };
        if let Err(reason) = parse_value(def, &raw) {
            tracing::warn!(%key, value = %raw, %reason, "dropping a stored {scope} setting that no longer validates");
            continue;
        }
        values.insert(key, raw);
    }
    Ok((values, Some(doc.version)))
}

/// Setting values by key, as set (not parsed).
type SettingsMap = BTreeMap<String, String>;

/// Applies one scope's changes to `current`: returns the new map and the values set.
///
/// Resets apply before sets, as in OpenSearch, so `{"search.*": null, "search.x": "1"}`
/// clears the others and keeps the new `search.x`.
fn merge_scope(
    current: &BTreeMap<String, String>,
    changes: &[(String, Option<String>)],
    scope: Scope,
) -> Result<(SettingsMap, SettingsMap), SettingsError> {
    let mut sorted: Vec<&(String, Option<String>)> = changes.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut set = BTreeMap::new();
    let mut resets = Vec::new();
    for (key, value) in sorted {
        let Some(def) = definition(key) else {
            let removable = key.contains('*') || key.starts_with(ARCHIVED_PREFIX);
            if value.is_none() && removable {
                resets.push(key.as_str());
                continue;
            }
            return Err(SettingsError::Invalid(format!(
                "{scope} setting [{key}], not recognized"
            )));
        };
        match value {
            None => resets.push(key.as_str()),
            Some(raw) => {
                parse_value(def, raw).map_err(SettingsError::Invalid)?;
                set.insert(key.clone(), raw.clone());
            }
        }
    }
    let mut next = current.clone();
    for pattern in resets {
        next.retain(|k, _| !sluice_wire::simple_match(pattern, k));
    }
    next.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok((next, set))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::keys;
    use sluice_meta::MemoryMetaStore;

    fn update(scope: Scope, pairs: &[(&str, Option<&str>)]) -> SettingsUpdate {
        let list = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect();
        match scope {
            Scope::Persistent => SettingsUpdate {
                persistent: list,
                ..SettingsUpdate::default()
            },
            Scope::Transient => SettingsUpdate {
                transient: list,
                ..SettingsUpdate::default()
            },
        }
    }

    async fn fresh() -> ClusterSettings {
        ClusterSettings::load(Arc::new(MemoryMetaStore::new()))
            .await
            .expect("load")
    }

    #[tokio::test]
    async fn test_transient_overrides_persistent_overrides_default() {
        let cs = fresh().await;
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_MAX_BUCKETS, Some("100"))],
        ))
        .await
        .expect("persistent");
        assert_eq!(cs.max_buckets(), 100);
        cs.apply(update(
            Scope::Transient,
            &[(keys::SEARCH_MAX_BUCKETS, Some("7"))],
        ))
        .await
        .expect("transient");
        assert_eq!(cs.max_buckets(), 7);
        cs.apply(update(
            Scope::Transient,
            &[(keys::SEARCH_MAX_BUCKETS, None)],
        ))
        .await
        .expect("reset transient");
        assert_eq!(cs.max_buckets(), 100);
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_MAX_BUCKETS, None)],
        ))
        .await
        .expect("reset persistent");
        assert_eq!(cs.max_buckets(), 65535);
    }

    #[tokio::test]
    async fn test_the_searchs_settings_read_what_each_publication_set() {
        let cs = fresh().await;
        assert_eq!(cs.wlm_mode(), cs.snapshot().wlm_mode());
        assert_eq!(cs.cancel_after_time_interval(), None);
        for (mode, want) in [
            ("enabled", WlmMode::Enabled),
            ("disabled", WlmMode::Disabled),
            ("monitor_only", WlmMode::MonitorOnly),
        ] {
            cs.apply(update(Scope::Transient, &[(keys::WLM_MODE, Some(mode))]))
                .await
                .expect("mode");
            assert_eq!(cs.wlm_mode(), want);
        }
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL, Some("1500ms"))],
        ))
        .await
        .expect("cancel after");
        assert_eq!(
            cs.cancel_after_time_interval(),
            Some(Duration::from_millis(1500))
        );
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL, Some("-1"))],
        ))
        .await
        .expect("disabled");
        assert_eq!(cs.cancel_after_time_interval(), None);
        assert_eq!(
            cs.cancel_after_time_interval(),
            cs.snapshot().cancel_after_time_interval()
        );
    }

    #[tokio::test]
    async fn test_keep_alive_rule_runs_on_the_merged_settings() {
        let cs = fresh().await;
        // Raising the default above the current max alone fails …
        let err = cs
            .apply(update(
                Scope::Persistent,
                &[(keys::SEARCH_DEFAULT_KEEP_ALIVE, Some("2d"))],
            ))
            .await
            .expect_err("default above max");
        assert_eq!(
            err.to_string(),
            "Default keep alive setting for request [search.default_keep_alive] should be smaller than max keep alive [search.max_keep_alive], was (2d > 1d)"
        );
        assert_eq!(
            cs.default_keep_alive(),
            Duration::from_secs(300),
            "a refused update changed a value"
        );
        // … raising both in one request works …
        cs.apply(update(
            Scope::Persistent,
            &[
                (keys::SEARCH_DEFAULT_KEEP_ALIVE, Some("2d")),
                (keys::SEARCH_MAX_KEEP_ALIVE, Some("3d")),
            ],
        ))
        .await
        .expect("both");
        // … and a transient max below the persistent default is caught across scopes.
        let err = cs
            .apply(update(
                Scope::Transient,
                &[(keys::SEARCH_MAX_KEEP_ALIVE, Some("1h"))],
            ))
            .await
            .expect_err("transient max below persistent default");
        assert!(err.to_string().contains("was (2d > 1h)"), "{err}");
    }

    #[tokio::test]
    async fn test_unknown_keys_fail_with_their_scope_and_nothing_changes() {
        let cs = fresh().await;
        let both = SettingsUpdate {
            persistent: vec![
                ("search.max_buckets".into(), Some("5".into())),
                ("foo.bar".into(), Some("1".into())),
            ],
            transient: vec![("baz".into(), Some("1".into()))],
        };
        let err = cs.apply(both).await.expect_err("unknown");
        assert_eq!(err.to_string(), "transient setting [baz], not recognized");
        let err = cs
            .apply(update(Scope::Persistent, &[("foo.bar", None)]))
            .await
            .expect_err("reset of unknown");
        assert_eq!(
            err.to_string(),
            "persistent setting [foo.bar], not recognized"
        );
        assert_eq!(cs.max_buckets(), 65535);
        assert!(cs.snapshot().persistent().is_empty());
    }

    #[tokio::test]
    async fn test_wildcard_and_archived_resets() {
        let cs = fresh().await;
        cs.apply(update(
            Scope::Transient,
            &[
                (keys::SEARCH_MAX_BUCKETS, Some("1")),
                (keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT, Some("2")),
            ],
        ))
        .await
        .expect("set");
        cs.apply(update(
            Scope::Transient,
            &[("search.max_*", None), ("archived.old", None)],
        ))
        .await
        .expect("wildcard reset");
        assert!(cs.snapshot().transient().is_empty());
        assert_eq!(cs.max_open_scroll_context(), 500);
        // Resets apply before sets within one request.
        cs.apply(update(
            Scope::Transient,
            &[
                (keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT, Some("3")),
                ("*", None),
            ],
        ))
        .await
        .expect("reset and set");
        assert_eq!(cs.max_open_scroll_context(), 3);
    }

    #[tokio::test]
    async fn test_persistent_values_reload_and_transient_do_not() {
        // A node on a metastore of its own (the embedded SQLite file) restarts: its transient
        // values end with it (on a shared one they are the cluster's, see below).
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn MetaStore> = Arc::new(
            sluice_meta::SqliteMetaStore::open(dir.path().join("meta.sqlite"))
                .await
                .expect("open"),
        );
        let cs = ClusterSettings::load(store.clone()).await.expect("load");
        let applied = cs
            .apply(SettingsUpdate {
                persistent: vec![(
                    keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL.into(),
                    Some("30s".into()),
                )],
                transient: vec![(keys::SEARCH_MAX_BUCKETS.into(), Some("10".into()))],
            })
            .await
            .expect("apply");
        assert_eq!(
            applied.persistent[keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL],
            "30s"
        );
        assert_eq!(applied.transient[keys::SEARCH_MAX_BUCKETS], "10");
        let reloaded = ClusterSettings::load(store).await.expect("reload");
        assert_eq!(
            reloaded.cancel_after_time_interval(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(reloaded.max_buckets(), 65535);
    }

    #[tokio::test]
    async fn test_load_drops_unknown_and_invalid_stored_values() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        store
            .put(
                Collection::ClusterSettings,
                PERSISTENT_DOC,
                serde_json::json!({
                    "search.max_buckets": "12",
                    "gone.setting": "1",
                    "search.max_open_scroll_context": "-4",
                    "search.default_keep_alive": 5
                }),
                Expect::Absent,
            )
            .await
            .expect("seed");
        let cs = ClusterSettings::load(store).await.expect("load");
        let snap = cs.snapshot();
        assert_eq!(snap.persistent().len(), 1, "{:?}", snap.persistent());
        assert_eq!(snap.max_buckets(), 12);
        assert_eq!(snap.max_open_scroll_context(), 500);
    }

    #[tokio::test]
    async fn test_concurrent_writer_conflict_is_retried_on_fresh_state() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let cs = ClusterSettings::load(store.clone()).await.expect("load");
        // Another node writes the persistent document behind our back.
        store
            .put(
                Collection::ClusterSettings,
                PERSISTENT_DOC,
                serde_json::json!({"search.max_open_scroll_context": "9"}),
                Expect::Absent,
            )
            .await
            .expect("other writer");
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_MAX_BUCKETS, Some("3"))],
        ))
        .await
        .expect("retried");
        assert_eq!(cs.max_buckets(), 3);
        assert_eq!(
            cs.max_open_scroll_context(),
            9,
            "the other writer's value was lost"
        );
        let stored = store
            .get(Collection::ClusterSettings, PERSISTENT_DOC)
            .await
            .expect("get")
            .expect("doc");
        assert_eq!(
            stored.value,
            serde_json::json!({"search.max_buckets": "3", "search.max_open_scroll_context": "9"})
        );
    }

    #[tokio::test]
    async fn test_reload_picks_up_another_nodes_change_and_keeps_transient_values() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let here = ClusterSettings::load(store.clone()).await.expect("load");
        let there = ClusterSettings::load(store.clone()).await.expect("load");
        here.apply(update(
            Scope::Transient,
            &[(keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT, Some("7"))],
        ))
        .await
        .expect("transient here");
        assert!(!here.reload().await.expect("reload"), "nothing changed yet");
        there
            .apply(update(
                Scope::Persistent,
                &[(keys::SEARCH_MAX_BUCKETS, Some("12"))],
            ))
            .await
            .expect("persistent there");
        let rx = here.subscribe();
        assert!(
            here.reload().await.expect("reload"),
            "the change is picked up"
        );
        assert!(rx.has_changed().expect("alive"), "subscribers hear of it");
        assert_eq!(here.max_buckets(), 12);
        assert_eq!(here.max_open_scroll_context(), 7, "transient values stay");
        assert!(!here.reload().await.expect("reload"), "once");
        // Its own write is not reloaded again.
        here.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_MAX_BUCKETS, Some("13"))],
        ))
        .await
        .expect("persistent here");
        assert!(!here.reload().await.expect("reload"));
    }

    #[tokio::test]
    async fn test_transient_values_are_the_clusters_on_a_shared_metastore() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let here = ClusterSettings::load(store.clone()).await.expect("load");
        let there = ClusterSettings::load(store.clone()).await.expect("load");
        here.apply(update(
            Scope::Transient,
            &[(keys::WLM_MODE, Some("disabled"))],
        ))
        .await
        .expect("transient here");
        assert!(
            there.reload().await.expect("reload"),
            "the other node hears of it"
        );
        assert_eq!(there.wlm_mode(), sluice_core::WlmMode::Disabled);
        assert_eq!(
            there.snapshot().transient().get(keys::WLM_MODE),
            Some(&"disabled".to_string())
        );
        // A node that joins later starts with them; a reset on any node reaches every node.
        let later = ClusterSettings::load(store.clone()).await.expect("load");
        assert_eq!(later.wlm_mode(), sluice_core::WlmMode::Disabled);
        later
            .apply(update(Scope::Transient, &[(keys::WLM_MODE, None)]))
            .await
            .expect("reset there");
        assert!(here.reload().await.expect("reload"));
        assert!(here.snapshot().transient().is_empty());
        // An update from a node whose view of them is stale is not lost: it retries on what
        // the other wrote.
        there
            .apply(update(
                Scope::Transient,
                &[(keys::SEARCH_MAX_BUCKETS, Some("77"))],
            ))
            .await
            .expect("from a stale view");
        assert!(here.reload().await.expect("reload"));
        assert_eq!(here.max_buckets(), 77);
        assert_eq!(
            here.wlm_mode(),
            ClusterSettings::load(store).await.expect("load").wlm_mode()
        );
    }

    #[tokio::test]
    async fn test_updates_of_two_scopes_on_two_nodes_cannot_break_a_rule_together() {
        // Each valid against what its node saw; together the cancellation threshold would
        // fall below the rejection threshold.
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let here = ClusterSettings::load(store.clone()).await.expect("load");
        let there = ClusterSettings::load(store.clone()).await.expect("load");
        here.apply(update(
            Scope::Transient,
            &[(keys::WLM_CPU_REJECTION_THRESHOLD, Some("0.85"))],
        ))
        .await
        .expect("transient here");
        // `there` has not reloaded: its view still has the default rejection threshold.
        let refused = there
            .apply(update(
                Scope::Persistent,
                &[(keys::WLM_CPU_CANCELLATION_THRESHOLD, Some("0.8"))],
            ))
            .await
            .expect_err("checked against the transient value written meanwhile");
        assert!(
            refused.to_string().contains("should not be less than"),
            "{refused}"
        );
        assert!(there.snapshot().persistent().is_empty());
    }

    #[tokio::test]
    async fn test_a_reload_keeps_the_nodes_configured_defaults() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let defaults = BTreeMap::from([(keys::SEARCH_MAX_BUCKETS.to_string(), "500".to_string())]);
        let here = ClusterSettings::load_on(store.clone(), defaults)
            .await
            .expect("load");
        assert_eq!(here.max_buckets(), 500);
        let there = ClusterSettings::load(store).await.expect("load");
        there
            .apply(update(
                Scope::Persistent,
                &[(keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT, Some("9"))],
            ))
            .await
            .expect("persistent there");
        assert!(here.reload().await.expect("reload"));
        assert_eq!(here.max_open_scroll_context(), 9);
        assert_eq!(here.max_buckets(), 500, "the node's own default is kept");
    }

    #[tokio::test]
    async fn test_subscribers_see_new_snapshots() {
        let cs = fresh().await;
        let mut rx = cs.subscribe();
        cs.apply(update(
            Scope::Transient,
            &[(keys::SEARCH_MAX_BUCKETS, Some("42"))],
        ))
        .await
        .expect("apply");
        assert!(rx.has_changed().expect("sender alive"));
        assert_eq!(rx.borrow_and_update().max_buckets(), 42);
    }
}
