//! This node's presence in a shared metastore, and the split it reveals: every second the node
//! records itself (`MetaStore::heartbeat`: id, name, transport address, `cluster.name`) and
//! reads the nodes recorded live, which `sluice-cluster`'s `split.rs` compares with the
//! gossip membership. A live node missing from gossip is gossiped with at once (a typo in
//! `discovery.seed_hosts` heals itself: the rows carry every node's transport address); one
//! still missing after the grace is logged at ERROR, at most every [`SPLIT_LOG_EVERY`], and
//! shown by `_cluster/health`; each side then enforces only its share of every
//! `shared_limit` (`admission/shared.rs`, S5 of `split.rs`) rather than the whole limit once
//! more on a ring of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_cluster::split::{PresentNode, SplitView};
use sluice_cluster::{Cluster, Member};
use sluice_meta::{MetaStore, NodePresence};

/// How often a node records itself and reads the others: one small upsert and one read a
/// second per node is nothing to PostgreSQL, and a split is seen (and a heal tried) within
/// a second of the rows showing it.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// How recent a node's heartbeat must be for it to count as live: five heartbeats, so a write
/// or two delayed by a loaded machine or a slow PostgreSQL do not make a running node vanish,
/// while a stopped or paused node stops counting within seconds (and within the split's
/// grace, `sluice_cluster::split::GRACE`, which is why that grace is twice this).
pub const LIVE_WITHIN: Duration = Duration::from_secs(5);

/// How often a split still standing is logged again at ERROR: often enough that an operator
/// tailing the log sees it, rarely enough not to flood it.
const SPLIT_LOG_EVERY: Duration = Duration::from_secs(30);

/// This node's row, with whom its gossip hears now (S6 of `split.rs`: its peers tell from it
/// whether it hears them) and whom its split view counts off its side (S11: whether it counts
/// them off).
pub fn row_of(cluster: &Cluster, cluster_name: &str) -> NodePresence {
    let me = cluster.me();
    NodePresence {
        node_id: me.node_id.clone(),
        name: me.name.clone(),
        transport: me.transport_addr.to_string(),
        cluster_name: cluster_name.to_string(),
        generation: me.generation,
        hears: Some(
            cluster
                .members()
                .live
                .iter()
                .map(|m| m.node_id.clone())
                .collect(),
        ),
        unjoined: Some(
            cluster
                .split()
                .unjoined
                .iter()
                .map(|n| n.node_id.clone())
                .collect(),
        ),
    }
}

/// The rows as the split detector reads them, of this `cluster_name` only (a node of another
/// name refuses to start on the metastore, so another name is a row of the past).
pub fn present(rows: &[NodePresence], cluster_name: &str) -> Vec<PresentNode> {
    rows.iter()
        .filter(|r| r.cluster_name == cluster_name)
        .map(|r| PresentNode {
            node_id: r.node_id.clone(),
            name: r.name.clone(),
            transport: r.transport.clone(),
            hears: r.hears.clone(),
            unjoined: r.unjoined.clone(),
        })
        .collect()
}

/// Records this node and watches for a split, every [`HEARTBEAT_EVERY`], until the cluster's
/// last reference is gone. Only on a metastore a cluster shares.
pub fn watch(cluster: &Arc<Cluster>, store: Arc<dyn MetaStore>, cluster_name: String) {
    let weak = Arc::downgrade(cluster);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut logged: Option<Instant> = None;
        let mut reported = false;
        loop {
            tick.tick().await;
            let Some(cluster) = weak.upgrade() else { break };
            let me = row_of(&cluster, &cluster_name);
            let view = match store.heartbeat(&me, LIVE_WITHIN).await {
                Ok(rows) => cluster.observe_presence(Some(&present(&rows, &cluster_name))),
                // The outage is the metastore status's to report (`ObservedStore`).
                Err(_) => cluster.observe_presence(None),
            };
            if view.unjoined.is_empty() {
                if reported {
                    tracing::info!("every node live on the metastore is a member again");
                }
                reported = false;
                logged = None;
                continue;
            }
            reported = true;
            if logged.is_none_or(|at| at.elapsed() >= SPLIT_LOG_EVERY) {
                logged = Some(Instant::now());
                tracing::error!(
                    unjoined = %view.describe_unjoined(),
                    cut_off = view.cut_off,
                    "nodes that use this node's metastore and cluster.name are live but not members of its cluster: gossip between them fails, most likely because discovery.seed_hosts names none of them (a typo), or a firewall drops transport traffic (in one direction only for those heard by this node but not hearing it); this node keeps trying to gossip with them. Meanwhile each side allows only its share of every cluster-wide limit (shared_limit × {} / {} on this side, rounded {}; a share of 0 refuses with 503) rather than each limit once per side; logged every {}s while it lasts",
                    view.side,
                    view.side + view.unjoined.len(),
                    if view.cut_off { "down: it is the smaller side" } else { "up: it is the larger side" },
                    SPLIT_LOG_EVERY.as_secs()
                );
            }
        }
    });
}

/// The `membership` object of `_cluster/health` (embedded and gateway): `joined`, or `split`
/// (the larger side) or `cut_off` (the smaller) with the unjoined nodes and this side's
/// count of the live nodes, by which every `shared_limit` is shared (S5 of `split.rs`); and
/// the shared-tier owners this node cannot reach (`unreachable`, their breakers open: K16 of
/// the coordinator), toward which its requests fail open — `shared_tier` `failing_open` when
/// the membership is whole. An outside trial held a bucket at 10–12 of its `shared_limit` of
/// 4 for 32 s over a slow, lossy link to its owner while health said nothing of it; the
/// status is left as it is (a breaker opens on one late answer and closes on the next probe,
/// a fifth of a second later: a colour would flap), the owners are named.
pub fn health_json(view: &SplitView, unreachable: &[(Member, String)]) -> Value {
    let mut v = if view.unjoined.is_empty() {
        json!({"status": "joined"})
    } else {
        json!({
            "status": if view.cut_off { "cut_off" } else { "split" },
            "unjoined_nodes": view.unjoined.iter().map(|n| {
                let mut v = json!(n);
                if view.is_deaf(&n.node_id) {
                    v["hears_this_node"] = Value::Bool(false);
                }
                v
            }).collect::<Vec<_>>(),
            "side_nodes": view.side,
            "live_nodes": view.side + view.unjoined.len(),
            "shared_tier": "divided",
            "reason": "nodes live on this node's metastore are not members of its cluster (or, with hears_this_node false, do not hear this node): check discovery.seed_hosts and that transport ports are reachable both ways",
        })
    };
    if !unreachable.is_empty() {
        v["unreachable_owners"] = unreachable
            .iter()
            .map(|(m, why)| {
                json!({
                    "id": m.node_id,
                    "name": m.name,
                    "transport_address": m.transport_addr.to_string(),
                    "reason": why,
                })
            })
            .collect();
        if view.unjoined.is_empty() {
            v["shared_tier"] = json!("failing_open");
            v["reason"] = json!(
                "this node cannot reach the shared-tier owners listed in unreachable_owners: requests of their buckets are admitted without a cluster-wide lease (failing open, at most each bucket's shared_limit on this node, and only this node's share of it once an owner's calls have failed for 10 s) until they answer again; check that their transport ports are reachable from this node"
            );
        }
    }
    v
}

/// Adds the split to a `_cluster/health` document: the `membership` object; `status` `red`
/// on the smaller side (not joined to the larger; it keeps a smaller share of each
/// `shared_limit`, none when that rounds down to 0) and at least `yellow` on the
/// larger; `discovered_cluster_manager` `false` on the smaller side, OpenSearch's word for a
/// node that has not joined its cluster.
pub fn add_to_health(view: &SplitView, unreachable: &[(Member, String)], health: &mut Value) {
    let Value::Object(fields) = health else {
        return;
    };
    fields.insert("membership".into(), health_json(view, unreachable));
    if view.unjoined.is_empty() {
        return;
    }
    if view.cut_off {
        fields.insert("status".into(), Value::from("red"));
        for key in ["discovered_cluster_manager", "discovered_master"] {
            fields.insert(key.into(), Value::Bool(false));
        }
    } else if fields.get("status").and_then(Value::as_str) == Some("green") {
        fields.insert("status".into(), Value::from("yellow"));
    }
}
