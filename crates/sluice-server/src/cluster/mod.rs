//! The node's part in a cluster: joining it (transport bind, gossip, the member record), the
//! cluster uuid kept in the metastore, which members a request's node selector names, the
//! `_nodes` envelope of a fanned-out answer, and what this node answers when another node
//! calls it (`local/`). Membership and RPC themselves are `sluice-cluster`'s.

pub mod local;
pub mod presence;
pub mod publish;
pub mod select;
pub mod twins;
pub mod upstream_identity;
pub mod uuid;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_cluster::membership::GOSSIP_INTERVAL;
use sluice_cluster::{Cluster, ClusterConfig, Member, PROTOCOL_VERSION};

use crate::config::Config;

/// How long a fanned-out call (`_wlm/stats`, `_tasks`) waits for a member before reporting it
/// as a failure, when the request sets no `timeout`. A live member answers these from memory
/// in microseconds plus a loopback or LAN round trip; a member that has not answered in 10 s
/// is stuck (a stopped process is refused at once), and the client gets the others' answers
/// with a failure entry instead of a hang.
pub const DEFAULT_FANOUT_TIMEOUT: Duration = Duration::from_secs(10);

/// The roles every sluice node reports (`_nodes`, `_cat/nodes`, `_tasks`): it holds data
/// (its embedded indices), ingests, and coordinates; sluice has no elected manager, so
/// `cluster_manager` says only that any node can answer cluster-level requests.
pub const ROLES: [&str; 3] = ["cluster_manager", "data", "ingest"];

/// How long a starting node waits, before it serves, for the nodes its metastore records live
/// to be its gossip members ([`join`]). Until then its ring holds only itself: it takes itself
/// for every bucket's owner of the shared tier and admits up to each `shared_limit` beside the
/// real owners' grants (an outside trial: a restarted node admitted four searches 3 ms after
/// it listened, 440 ms before its peers joined, and a bucket of `shared_limit` 4 ran 8 for the
/// searches' length), and a scroll opened on it is unknown to them. A peer that runs joins in
/// one or two gossip rounds ([`GOSSIP_INTERVAL`], 500 ms); a row whose node has just died
/// (it counts as live for `presence::LIVE_WITHIN`) never joins, and four rounds bound what
/// such a row delays the start.
pub const JOIN_WAIT: Duration = Duration::from_secs(2);

/// The member shown as the cluster manager (`*` in `_cat/nodes`, `_cluster_manager` in a node
/// selector): sluice has no elected manager, and any node answers cluster-level requests, so
/// the member with the lowest node id wears it, the same on every node.
pub fn shown_manager(members: &[sluice_cluster::Member]) -> Option<&sluice_cluster::Member> {
    members.iter().min_by(|a, b| a.node_id.cmp(&b.node_id))
}

/// What [`join`] needs to know about the node.
pub struct NodeFacts<'a> {
    /// The persisted node id.
    pub node_id: &'a str,
    /// The cluster uuid from the metastore.
    pub cluster_uuid: &'a str,
    /// The published HTTP address ([`publish`]): where clients reach the node.
    pub http_addr: SocketAddr,
    /// `embedded` or `upstream`.
    pub backend: &'a str,
}

/// Binds the transport (`transport.host`/`transport.port`), starts gossip with
/// `discovery.seed_hosts` and logs the bound and published addresses; the RPC server starts
/// answering once the node calls [`Cluster::serve`]. Peers are told the published address
/// ([`publish`]): a wildcard bind is no address they can dial.
pub async fn join(
    config: &Config,
    facts: NodeFacts<'_>,
    metastore: &Arc<dyn sluice_meta::MetaStore>,
    stop: Arc<crate::server::StopRequest>,
) -> anyhow::Result<Arc<Cluster>> {
    let t = &config.transport;
    let listener = sluice_cluster::bind::bind_transport(t.host, t.port)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot bind transport.host:transport.port [{}:{}]: {e}",
                t.host,
                match t.port {
                    sluice_cluster::bind::PortSpec::Exact(p) => p.to_string(),
                    sluice_cluster::bind::PortSpec::Range(lo, hi) => format!("{lo}-{hi}"),
                }
            )
        })?;
    let bound_addr = listener.local_addr()?;
    let transport_addr = publish::publish_addr(bound_addr, t.publish_host, t.publish_port);
    // A restarted node must out-rank its earlier incarnation in gossip: its start time does.
    let generation = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let me = Member {
        node_id: facts.node_id.to_string(),
        generation,
        name: config.node_name.clone(),
        http_addr: facts.http_addr,
        transport_addr,
        protocol_version: PROTOCOL_VERSION,
        backend: facts.backend.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        cluster_uuid: facts.cluster_uuid.to_string(),
    };
    // The nodes live on a shared metastore are seeds too: a node whose discovery.seed_hosts
    // misses them (a typo) joins them anyway, rather than forming a cluster of its own on the
    // same groups and rules (`presence.rs`).
    let mut seeds = t.seed_hosts.clone();
    // The peers the metastore records live: the members to wait for before serving.
    let mut expected: Vec<String> = Vec::new();
    let shared = self::uuid::is_shared(metastore.as_ref());
    if shared {
        let row = sluice_meta::NodePresence {
            node_id: me.node_id.clone(),
            name: me.name.clone(),
            transport: transport_addr.to_string(),
            cluster_name: config.cluster_name.clone(),
            generation,
            // Gossip has not started: whom it hears (and counts off) is not known yet.
            hears: None,
            unjoined: None,
        };
        match metastore.heartbeat(&row, presence::LIVE_WITHIN).await {
            Ok(rows) => {
                for p in presence::present(&rows, &config.cluster_name) {
                    if p.node_id == me.node_id {
                        continue;
                    }
                    expected.push(p.node_id);
                    if !seeds.contains(&p.transport) {
                        seeds.push(p.transport);
                    }
                }
            }
            Err(e) => tracing::warn!("cannot read the nodes live on the metastore: {e}"),
        }
    }
    let cluster = Cluster::start(
        ClusterConfig {
            cluster_name: config.cluster_name.clone(),
            me,
            seeds: seeds.clone(),
            gossip_interval: GOSSIP_INTERVAL,
        },
        listener,
    )
    .await
    .map_err(|e| anyhow::anyhow!("cannot start the cluster transport on [{bound_addr}]: {e}"))?;
    tracing::info!(
        publish_address = %transport_addr,
        seeds = ?t.seed_hosts,
        metastore_seeds = ?&seeds[t.seed_hosts.len()..],
        "transport on {bound_addr} (node-to-node RPC over TCP, gossip over UDP)"
    );
    let cluster = Arc::new(cluster);
    log_membership(&cluster);
    twins::watch(&cluster, stop);
    if shared {
        presence::watch(&cluster, metastore.clone(), config.cluster_name.clone());
    }
    await_peers(&cluster, &expected, JOIN_WAIT).await;
    Ok(cluster)
}

/// Waits until every node of `expected` is a live member, for at most `within` ([`JOIN_WAIT`]);
/// those that are not by then are named in a warning, and the node serves without them (they
/// join when they answer, as any node does).
async fn await_peers(cluster: &Cluster, expected: &[String], within: Duration) {
    if expected.is_empty() {
        return;
    }
    let missing = |live: &[Member]| -> Vec<String> {
        expected
            .iter()
            .filter(|id| !live.iter().any(|m| &m.node_id == *id))
            .cloned()
            .collect()
    };
    let mut rx = cluster.watch();
    let joined = tokio::time::timeout(within, async {
        loop {
            if missing(&rx.borrow_and_update().live).is_empty() {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    if joined.is_err() {
        let missing = missing(&cluster.members().live);
        tracing::warn!(
            ?missing,
            "serving before every node the metastore records live has joined by gossip (waited {:?}); until they do, this node counts them on the other side of a split, keeping only its side's share of every shared_limit",
            within
        );
        cluster.presume_unjoined(&missing);
    }
}

/// Logs joins and departures of members, and — once per node — a live peer of this cluster
/// name that is not a member because it uses another metastore.
fn log_membership(cluster: &Arc<Cluster>) {
    let mut rx = cluster.watch();
    let me = cluster.me().node_id.clone();
    tokio::spawn(async move {
        let mut known: Vec<Member> = rx.borrow_and_update().live.to_vec();
        let mut warned: Vec<String> = Vec::new();
        while rx.changed().await.is_ok() {
            let now = rx.borrow_and_update().clone();
            for m in now.live.iter().filter(|m| m.node_id != me) {
                if !known.iter().any(|k| k.node_id == m.node_id) {
                    tracing::info!(node = %m.name, id = %m.node_id, transport = %m.transport_addr, "node joined");
                }
            }
            for k in known
                .iter()
                .filter(|k| !now.live.iter().any(|m| m.node_id == k.node_id))
            {
                tracing::warn!(node = %k.name, id = %k.node_id, transport = %k.transport_addr, "node left or stopped answering gossip");
            }
            for s in now.strangers.iter() {
                if !warned.contains(&s.node_id) {
                    warned.push(s.node_id.clone());
                    tracing::error!(
                        node = %s.name,
                        transport = %s.transport_addr,
                        "a node with this cluster.name uses another metastore (cluster uuid [{}]); it is not a member: every node of a cluster must use the same metastore.uri (PostgreSQL)",
                        s.cluster_uuid
                    );
                }
            }
            known = now.live.to_vec();
        }
    });
}
