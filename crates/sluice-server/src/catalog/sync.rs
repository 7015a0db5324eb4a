//! Keeping this node's view in step with the metastore, and knowing whether it can reach it.
//!
//! Several nodes share one PostgreSQL metastore; a change made through any of them (a group,
//! a rule, a persistent cluster setting) must take effect on all. [`run`] is the node's
//! watcher task: it wakes when the store's change receiver moves ([`MetaStore::subscribe`]:
//! this node's own commits, other nodes' by PostgreSQL `NOTIFY`) and at least every
//! [`POLL_INTERVAL`] (the backstop for a notification lost while the listener reconnected),
//! reads the store's change counters ([`MetaStore::changes`]) and reloads what moved since it
//! last applied them: the workload view ([`super::reload`]) for groups and rules, the
//! persistent cluster settings ([`ClusterSettings::reload`]) for settings.
//!
//! The same read is the liveness probe: when it fails with
//! [`MetaError::Unavailable`] the node records the outage
//! in its [`MetastoreStatus`] (shown by `_cluster/health`), logs it once, and keeps serving
//! from its last view; writes of groups, rules and settings fail with 503 until the store is
//! back ([`super::meta_error`]). The first successful read after the outage logs the recovery
//! and reloads whatever changed meanwhile.
//!
//! # Invariants
//! - `applied` (the counters the node's view reflects) only moves to counters read *before*
//!   the reloads that succeeded after them, so a change committed during a reload is seen by
//!   the next wake-up, never skipped.
//! - An outage is logged once when it starts and once when it ends, not per request or poll.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice_meta::{Changes, Collection, MetaError, MetaKind, MetaStore};

use crate::settings::ClusterSettings;
use crate::state::AppState;
use crate::workload::Workload;

/// The longest a change made on another node waits before this node polls for it: issue
/// #12's bound ("takes effect on every node within 1 s"). A notification usually wakes the
/// watcher within milliseconds; the poll covers the ones lost while the listener reconnects,
/// and costs one one-row-per-collection read per second.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Whether this node can reach its metastore, as its watcher last found.
#[derive(Debug, Clone, PartialEq)]
pub enum Reachability {
    /// The last probe (or write) succeeded.
    Reachable,
    /// Probes fail since `since_millis` (epoch ms); `reason` is the last failure.
    Unreachable {
        /// When the outage started, in milliseconds since the Unix epoch.
        since_millis: i64,
        /// The last failure's message.
        reason: String,
    },
}

/// Which metastore the node uses and whether it can reach it; shown by `_cluster/health`.
#[derive(Debug)]
pub struct MetastoreStatus {
    kind: MetaKind,
    location: String,
    state: Mutex<Reachability>,
}

impl MetastoreStatus {
    /// A reachable store of `kind` at `location` (the file, or the URL with its password
    /// masked).
    pub fn new(kind: MetaKind, location: String) -> MetastoreStatus {
        MetastoreStatus {
            kind,
            location,
            state: Mutex::new(Reachability::Reachable),
        }
    }

    /// Which backend the node uses: a node on the embedded SQLite file must not join others.
    pub fn kind(&self) -> MetaKind {
        self.kind
    }

    /// The file path or the masked URL.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The current reachability.
    pub fn reachability(&self) -> Reachability {
        self.state.lock().clone()
    }

    /// Whether the last probe reached the store.
    pub fn is_reachable(&self) -> bool {
        *self.state.lock() == Reachability::Reachable
    }

    /// Records a failed probe; answers `true` when this starts an outage (log it then).
    pub fn mark_unreachable(&self, reason: String, now_millis: i64) -> bool {
        let mut state = self.state.lock();
        match &mut *state {
            Reachability::Reachable => {
                *state = Reachability::Unreachable {
                    since_millis: now_millis,
                    reason,
                };
                true
            }
            Reachability::Unreachable { reason: last, .. } => {
                *last = reason;
                false
            }
        }
    }

    /// Records a successful probe; answers `true` when this ends an outage.
    pub fn mark_reachable(&self) -> bool {
        let mut state = self.state.lock();
        let was_down = *state != Reachability::Reachable;
        *state = Reachability::Reachable;
        was_down
    }

    /// The `metastore` object of `_cluster/health`: `type`, `status` (`available` or
    /// `unavailable`), and during an outage `unavailable_since_millis` and `reason`.
    pub fn to_json(&self) -> Value {
        match self.reachability() {
            Reachability::Reachable => json!({
                "type": self.kind.as_str(),
                "status": "available",
            }),
            Reachability::Unreachable {
                since_millis,
                reason,
            } => json!({
                "type": self.kind.as_str(),
                "status": "unavailable",
                "unavailable_since_millis": since_millis,
                "reason": reason,
            }),
        }
    }
}

/// The node's watcher: reloads what other nodes (or this one) changed in the metastore,
/// and tracks whether the store is reachable. Runs until aborted; `applied` is the change
/// counters the node's view was loaded at.
///
/// # Cancel safety
/// Meant to be aborted at shutdown: an abort between a reload's read and its install leaves
/// the previous view in place.
pub async fn run(st: Arc<AppState>, applied: Changes) {
    let mut watcher = Watcher {
        store: st.metastore.clone(),
        workload: st.workload.clone(),
        settings: st.cluster_settings.clone(),
        status: st.metastore_status.clone(),
        applied,
        last_failure: None,
    };
    let mut changes = Some(st.metastore.subscribe());
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        match changes.as_mut() {
            Some(rx) => tokio::select! {
                woke = rx.changed() => if woke.is_err() {
                    changes = None; // the store dropped its sender: poll only
                },
                _ = tick.tick() => {}
            },
            None => {
                tick.tick().await;
            }
        }
        watcher.sync_once().await;
    }
}

/// The watcher's state between wake-ups.
struct Watcher {
    store: Arc<dyn MetaStore>,
    workload: Arc<Workload>,
    settings: Arc<ClusterSettings>,
    status: Arc<MetastoreStatus>,
    /// The change counters the node's view reflects.
    applied: Changes,
    /// The last reload failure logged, so a lasting one is logged once.
    last_failure: Option<String>,
}

impl Watcher {
    /// Reads the change counters and reloads what moved; records reachability.
    async fn sync_once(&mut self) {
        let now = match self.store.changes().await {
            Ok(now) => now,
            Err(e) => {
                self.unreachable(&e);
                return;
            }
        };
        if self.status.mark_reachable() {
            tracing::info!(
                metastore = self.status.location(),
                "the metastore is reachable again; reloading what changed meanwhile"
            );
        }
        let moved = now.changed_since(&self.applied);
        let catalog = moved
            .iter()
            .any(|c| matches!(c, Collection::WorkloadGroups | Collection::Rules));
        let mut failure = None;
        if catalog && let Err(e) = super::reload(&self.workload, self.store.as_ref()).await {
            failure = Some(format!(
                "cannot reload the workload groups and rules: {e:?}"
            ));
        }
        if failure.is_none() && moved.contains(&Collection::ClusterSettings) {
            match self.settings.reload().await {
                Ok(true) => {
                    if self.settings.wlm_mode() != sluice_core::WlmMode::Enabled {
                        // As after a local `PUT _cluster/settings`: only `enabled` parks.
                        self.workload.release_all_queues().await;
                    }
                }
                Ok(false) => {}
                Err(MetaError::Unavailable(reason)) => {
                    self.unreachable(&MetaError::Unavailable(reason));
                    return;
                }
                Err(e) => failure = Some(format!("cannot reload the cluster settings: {e}")),
            }
        }
        match failure {
            None => {
                self.applied = now;
                self.last_failure = None;
            }
            Some(message) => {
                // Retried at the next wake-up; logged once while it stays the same.
                if self.last_failure.as_ref() != Some(&message) {
                    tracing::warn!(metastore = self.status.location(), "{message}");
                    self.last_failure = Some(message);
                }
            }
        }
    }

    fn unreachable(&self, e: &MetaError) {
        if self
            .status
            .mark_unreachable(e.to_string(), sluice_engine::now_millis())
        {
            tracing::warn!(
                metastore = self.status.location(),
                error = %e,
                "the metastore is unreachable: this node keeps serving with its last view of workload groups, rules and settings; changes to them fail until it returns"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_meta::{Document, Expect, MemoryMetaStore, MetaFuture, Op, Outcome};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A memory store that can be made unreachable, and whose change receiver never fires (a
    /// store whose notifications are lost), so only the watcher's poll finds changes.
    struct Flaky {
        inner: MemoryMetaStore,
        down: AtomicBool,
        quiet: tokio::sync::watch::Sender<Changes>,
    }

    impl Flaky {
        fn check(&self) -> Result<(), MetaError> {
            if self.down.load(Ordering::SeqCst) {
                Err(MetaError::Unavailable("connection refused".into()))
            } else {
                Ok(())
            }
        }
    }

    impl MetaStore for Flaky {
        fn kind(&self) -> MetaKind {
            MetaKind::Postgres
        }
        fn changes(&self) -> MetaFuture<'_, Changes> {
            Box::pin(async move {
                self.check()?;
                self.inner.changes().await
            })
        }
        fn subscribe(&self) -> tokio::sync::watch::Receiver<Changes> {
            self.quiet.subscribe()
        }
        fn get<'a>(&'a self, c: Collection, key: &'a str) -> MetaFuture<'a, Option<Document>> {
            Box::pin(async move {
                self.check()?;
                self.inner.get(c, key).await
            })
        }
        fn list(&self, c: Collection) -> MetaFuture<'_, Vec<Document>> {
            Box::pin(async move {
                self.check()?;
                self.inner.list(c).await
            })
        }
        fn apply(&self, batch: Vec<Op>) -> MetaFuture<'_, Vec<Outcome>> {
            Box::pin(async move {
                self.check()?;
                self.inner.apply(batch).await
            })
        }
    }

    #[tokio::test]
    async fn test_the_poll_reloads_what_another_node_changed_and_tracks_outages() {
        let flaky = Arc::new(Flaky {
            inner: MemoryMetaStore::new(),
            down: AtomicBool::new(false),
            quiet: tokio::sync::watch::channel(Changes::default()).0,
        });
        let store: Arc<dyn MetaStore> = flaky.clone();
        let workload = Arc::new(Workload::new(false));
        let settings = Arc::new(ClusterSettings::load(store.clone()).await.expect("load"));
        let status = Arc::new(MetastoreStatus::new(MetaKind::Postgres, "pg".into()));
        let mut watcher = Watcher {
            store: store.clone(),
            workload: workload.clone(),
            settings: settings.clone(),
            status: status.clone(),
            applied: store.changes().await.expect("changes"),
            last_failure: None,
        };

        // "Another node" writes a group and a persistent setting straight to the store.
        let group = sluice_core::validate_create(
            &[],
            &json!({"name": "g", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.2}}),
            "gid",
            1_754_493_164_791,
            &sluice_core::GroupLimits::default(),
        )
        .expect("group");
        store
            .put(
                Collection::WorkloadGroups,
                super::super::GROUPS_DOC,
                super::super::GROUPS.render(&[group]),
                Expect::Absent,
            )
            .await
            .expect("put groups");
        watcher.sync_once().await;
        assert!(
            workload.entry("gid").is_some(),
            "the group was not reloaded"
        );
        store
            .put(
                Collection::ClusterSettings,
                crate::settings::PERSISTENT_DOC,
                json!({"search.max_buckets": "12"}),
                Expect::Absent,
            )
            .await
            .expect("put settings");
        watcher.sync_once().await;
        assert_eq!(settings.max_buckets(), 12, "the settings were not reloaded");

        // An outage is recorded, the view stays, and the change made meanwhile is picked up
        // on return.
        flaky.down.store(true, Ordering::SeqCst);
        watcher.sync_once().await;
        watcher.sync_once().await;
        assert!(!status.is_reachable());
        assert!(workload.entry("gid").is_some(), "the last view is kept");
        flaky.down.store(false, Ordering::SeqCst);
        store
            .put(
                Collection::WorkloadGroups,
                super::super::GROUPS_DOC,
                super::super::GROUPS.render(&[]),
                Expect::Any,
            )
            .await
            .expect("delete every group");
        watcher.sync_once().await;
        assert!(status.is_reachable());
        assert!(
            workload.entry("gid").is_none(),
            "the change made meanwhile was missed"
        );
    }

    #[test]
    fn test_an_outage_starts_and_ends_once() {
        let status = MetastoreStatus::new(MetaKind::Postgres, "postgres://u:***@h/db".into());
        assert!(status.is_reachable());
        assert_eq!(
            status.to_json(),
            json!({"type": "postgres", "status": "available"})
        );
        assert!(
            status.mark_unreachable("refused".into(), 7),
            "first failure starts it"
        );
        assert!(
            !status.mark_unreachable("timed out".into(), 9),
            "later ones do not"
        );
        assert_eq!(
            status.to_json(),
            json!({
                "type": "postgres",
                "status": "unavailable",
                "unavailable_since_millis": 7,
                "reason": "timed out"
            })
        );
        assert!(status.mark_reachable(), "the first success ends it");
        assert!(!status.mark_reachable());
        assert!(status.is_reachable());
    }
}
