//! The node's shared state, handed to every handler.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_engine::Engine;

use crate::config::Config;
use crate::pool::SearchPool;
use crate::tasks::TaskManager;

/// The node's persistent identity, kept in `node.json` in the data folder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// The node id, stable across restarts.
    pub node_id: String,
    /// The cluster uuid, stable across restarts.
    pub cluster_uuid: String,
}

impl NodeIdentity {
    /// Loads the identity from `data/node.json`, creating it on first start.
    pub fn load_or_create(data: &Path) -> std::io::Result<NodeIdentity> {
        let path = data.join("node.json");
        if let Ok(bytes) = std::fs::read(&path)
            && let Ok(id) = serde_json::from_slice(&bytes)
        {
            return Ok(id);
        }
        let short = |u: uuid::Uuid| u.simple().to_string()[..22].to_string();
        let id = NodeIdentity {
            node_id: short(uuid::Uuid::new_v4()),
            cluster_uuid: short(uuid::Uuid::new_v4()),
        };
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&id).unwrap_or_default())?;
        std::fs::rename(&tmp, &path)?;
        Ok(id)
    }
}

/// Everything a handler may need.
pub struct AppState {
    /// The node configuration.
    pub config: Config,
    /// The HTTP listener's own address (`http.host`:`http.port`, perhaps a wildcard); the
    /// member record's `http_addr` is the published one ([`crate::cluster::publish`]).
    pub http_bound_addr: std::net::SocketAddr,
    /// The node identity.
    pub identity: NodeIdentity,
    /// The embedded engine, which the data APIs (documents, bulk, index admin) use directly.
    pub engine: Arc<Engine>,
    /// What runs admitted search-class work ([`crate::backend`]).
    pub backend: Arc<dyn crate::backend::Backend>,
    /// The upstream cluster when the node is a gateway (`backend.type: upstream`).
    pub upstream: Option<Arc<crate::backend::upstream::Upstream>>,
    /// The pool searches run on.
    pub search_pool: Arc<SearchPool>,
    /// The running tasks.
    pub tasks: Arc<TaskManager>,
    /// The cluster: membership, node-to-node RPC ([`crate::cluster`]).
    pub cluster: Arc<sluice_cluster::Cluster>,
    /// The metastore: persistent cluster settings, workload groups, rules.
    pub metastore: Arc<dyn sluice_meta::MetaStore>,
    /// Which metastore the node uses (`kind()`: SQLite, PostgreSQL) and whether it can reach
    /// it, as the metastore watcher last found ([`crate::catalog::sync`]).
    pub metastore_status: Arc<crate::catalog::sync::MetastoreStatus>,
    /// The dynamic cluster settings (`_cluster/settings`), read with
    /// `cluster_settings.snapshot()` or its typed accessors.
    pub cluster_settings: Arc<crate::settings::ClusterSettings>,
    /// Authentication (`auth.*`): who sends a request.
    pub auth: Arc<crate::auth::Authenticator>,
    /// Authorization (`auth.roles_file`, `auth.admin_roles`): what a request may do, and the
    /// audit log.
    pub authz: Arc<crate::auth::Authz>,
    /// Workload management at run time: groups, rules, stats, tagging.
    pub workload: Arc<crate::workload::Workload>,
    /// Resource enforcement: node capacity, duress, the enforcement loop's state.
    pub enforcement: crate::enforcement::node::Enforcement,
    /// The node's own metrics recorder (`GET /_prometheus/metrics`).
    pub metrics: crate::metrics::NodeMetrics,
    /// The rate-limited log lines of throttle, queue, rejection and cancellation decisions.
    pub decisions: crate::logging::DecisionLog,
    /// Set once the node begins to stop: nothing waits for admission any more (the drain
    /// waits for every request in flight, and a queue could hold one for as long as its
    /// group's slots or share allow).
    pub stopping: std::sync::atomic::AtomicBool,
}
