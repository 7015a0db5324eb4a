//! Two running nodes with one node id (a data folder copied with its `node.json`, a cloned VM
//! image): which of them stops.
//!
//! Gossip keeps one incarnation per node id, the one started last (M3 of `sluice-cluster`'s
//! `membership.rs`), so without this the copy silently takes the original's place: the
//! original drops out of every peer's view while it still serves its clients, and the shared
//! tier's ring sends its buckets to the copy. OpenSearch refuses a node whose id is taken when
//! it joins; here the node started later stops, with an error that says how to fix it, and the
//! node started first goes on (and logs the copy if it sees it live before it stopped).
//!
//! A live incarnation of this node's id ([`sluice_cluster::membership::Members::twins`]) started
//! after this one is another process (this one still runs). One started before is not always:
//! right after a restart, peers' gossip can still carry the previous incarnation's last
//! heartbeats. So such a twin is first called (`Ping`): only a running process answers, and
//! only one holding this id answers with it.

use std::sync::Arc;
use std::time::Duration;

use sluice_cluster::{Cluster, Member};

use crate::server::StopRequest;

/// How long the call to a twin may take. It answers from memory; a previous incarnation that
/// is gone refuses the connection at once, or, on another host, times out here.
const PING_DEADLINE: Duration = Duration::from_secs(2);

/// Calls each new twin once; when it is a running node with this node's id, the later of the
/// two asks to stop (through `stop`) and both log why.
pub fn watch(cluster: &Arc<Cluster>, stop: Arc<StopRequest>) {
    let mut rx = cluster.watch();
    let cluster = cluster.clone();
    tokio::spawn(async move {
        let mut called: Vec<u64> = Vec::new();
        loop {
            let twins = rx.borrow_and_update().twins.clone();
            for twin in twins.iter() {
                if called.contains(&twin.generation) {
                    continue;
                }
                let me = cluster.me().clone();
                if twin.transport_addr == me.transport_addr {
                    // This node's previous incarnation: nothing else can hold this address.
                    called.push(twin.generation);
                    continue;
                }
                if twin.generation > me.generation {
                    // Started after this node, which still runs: not a restart of it. (It may
                    // not answer calls yet; it calls this node, and stops.)
                    called.push(twin.generation);
                    conflict(&me, twin, &stop);
                    continue;
                }
                // Unanswered, it is called again at the next change of the view (a node that
                // has just started answers calls only once it is up).
                match cluster.ping(twin, PING_DEADLINE).await {
                    Ok(id) if id == me.node_id => {
                        called.push(twin.generation);
                        conflict(&me, twin, &stop);
                    }
                    Ok(_) => called.push(twin.generation),
                    Err(_) => {}
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Logs the conflict with `twin`, a running node with this node's id, and asks this node to
/// stop when it is the later of the two.
fn conflict(me: &Member, twin: &Member, stop: &StopRequest) {
    if twin.generation < me.generation {
        let reason = format!(
            "node id [{}] is already used by node [{}], running since before this node started (transport {}, http {}): this node's data folder, or its node.json, is a copy of that node's. This node stops. Remove node.json from this node's path.data to give it an id of its own, then start it again",
            me.node_id, twin.name, twin.transport_addr, twin.http_addr
        );
        tracing::error!("{reason}");
        stop.request(reason);
    } else {
        tracing::error!(
            "node [{}] (transport {}, http {}) started with this node's id [{}]: its data folder, or its node.json, is a copy of this node's. It stops when it sees this node",
            twin.name,
            twin.transport_addr,
            twin.http_addr,
            me.node_id
        );
    }
}
