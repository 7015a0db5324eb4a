//! Which upstream cluster each gateway forwards to. A gateway gossips its upstream's
//! `cluster_name` and `cluster_uuid` (from the upstream's `GET /`, once it answered) under
//! [`UPSTREAM_KEY`]; a gateway whose peers forward to another cluster logs an ERROR naming
//! `backend.upstream.hosts` and both clusters (once per peer and cluster), and its
//! `_cluster/health` shows them. Such gateways share groups, rules and the shared tier's
//! ring, but answer from different data: every count through one is not the others'.
//!
//! Decision: reported, not refused. Which side is wrong cannot be told from inside (the
//! first gateways started, or the most, may be the mistaken ones, and a move from one
//! upstream to another passes through such a state), and refusing would take down the right
//! side's gateways as well as the wrong one.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::backend::upstream::UpstreamCluster;
use crate::state::AppState;

/// The gossip key: `<cluster_uuid>/<cluster_name>` of the node's upstream. On the wire:
/// stable.
pub const UPSTREAM_KEY: &str = "upstream";

/// How often a gateway looks whether its upstream answered (to gossip it) and compares it
/// with its peers': a gateway that joins is compared within a second of its gossip, and the
/// check reads gossip state in memory only.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The gossiped value of an upstream cluster.
fn encode(c: &UpstreamCluster) -> String {
    format!("{}/{}", c.uuid, c.name)
}

/// The peers (by node name) whose upstream differs from `mine`, with theirs.
pub async fn differing(st: &AppState, mine: &UpstreamCluster) -> Vec<(String, String)> {
    let own = encode(mine);
    let me = st.cluster.me().node_id.clone();
    let members = st.cluster.members();
    st.cluster
        .values_of(UPSTREAM_KEY)
        .await
        .into_iter()
        .filter(|(id, v)| *id != me && *v != own)
        .map(|(id, v)| {
            let name = members.get(&id).map_or(id.clone(), |m| m.name.clone());
            (name, v)
        })
        .collect()
}

/// The `upstream` object of a gateway's `_cluster/health`: its upstream cluster, and the
/// peers that forward to another one (the status is at least `yellow` then).
pub async fn add_to_health(st: &AppState, health: &mut Value) {
    let Some(mine) = st.upstream.as_ref().and_then(|u| u.cluster().cloned()) else {
        return;
    };
    let others = differing(st, &mine).await;
    let Value::Object(fields) = health else {
        return;
    };
    let mut upstream = json!({"cluster_name": mine.name, "cluster_uuid": mine.uuid});
    if !others.is_empty() {
        upstream["peers_with_another_upstream"] = others
            .iter()
            .map(|(node, v)| {
                let (uuid, name) = v.split_once('/').unwrap_or(("", v));
                json!({"node": node, "cluster_name": name, "cluster_uuid": uuid})
            })
            .collect();
        if fields.get("status").and_then(Value::as_str) == Some("green") {
            fields.insert("status".into(), Value::from("yellow"));
        }
    }
    fields.insert("upstream".into(), upstream);
}

/// On a gateway: gossips its upstream once known, and logs peers forwarding to another.
pub fn watch(st: &Arc<AppState>) {
    if st.upstream.is_none() {
        return;
    }
    let weak = Arc::downgrade(st);
    tokio::spawn(async move {
        let mut published = false;
        let mut warned: Vec<(String, String)> = Vec::new();
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tick.tick().await;
            let Some(st) = weak.upgrade() else { break };
            let Some(mine) = st.upstream.as_ref().and_then(|u| u.cluster().cloned()) else {
                continue;
            };
            if !published {
                st.cluster.set_value(UPSTREAM_KEY, &encode(&mine)).await;
                published = true;
            }
            for (node, theirs) in differing(&st, &mine).await {
                if warned.contains(&(node.clone(), theirs.clone())) {
                    continue;
                }
                let (uuid, name) = theirs.split_once('/').unwrap_or(("", &theirs));
                tracing::error!(
                    peer = %node,
                    "gateway [{}] forwards to upstream cluster [{}] (uuid [{}]) but its peer [{node}] forwards to [{name}] (uuid [{uuid}]): they share workload groups, rules and shared limits but answer from different data; check backend.upstream.hosts on both",
                    st.config.node_name, mine.name, mine.uuid
                );
                warned.push((node, theirs));
            }
        }
    });
}
