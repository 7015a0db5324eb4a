//! Who is in the cluster: chitchat gossip over UDP with its phi-accrual failure detector.
//!
//! Invariants:
//! - M1 A node of another `cluster.name` is never a member: chitchat drops gossip whose
//!   cluster id differs (the cluster id is `cluster.name`).
//! - M2 A node of another metastore (another cluster uuid) is never a member; it is listed in
//!   [`Members::strangers`] so the node can say why it is ignored.
//! - M3 One entry per node id: a restarted node (same id and transport address, higher
//!   generation) replaces its earlier incarnation at once.
//! - M4 A node that stops gossiping leaves the live set within [`DEAD_AFTER`] (of a node that
//!   itself kept running; M5).
//! - M6 Another live incarnation of this node's id (a copy of its data folder started
//!   elsewhere) is never this node's member; it is listed in [`Members::twins`] so the node
//!   can find out which of the two must stop (the server's `cluster/twins.rs`). Peers keep
//!   the incarnation at the address the id has had longest while it lives ([`incarnation`]):
//!   a copy started elsewhere never takes the original's place in their views, so they do not
//!   send the original's RPCs and shared-tier calls to the copy, which stops. (A node
//!   restarted at a new address shows once its old incarnation is declared dead, M4.)
//! - M7 A node that stops announces it ([`Membership::announce_leave`], the first step of
//!   `Cluster::shutdown`): it gossips a [`LEAVING`] key and calls every live peer at once, and
//!   a peer drops an incarnation that gossips it from its live set at its next gossip round —
//!   within about [`GOSSIP_INTERVAL`] instead of the failure detector's seconds (M4 still
//!   bounds a node that dies, or whose announcement is lost). So a stopped owner's buckets move
//!   to the survivors about as soon as it stops answering (`shared/coordinator.rs`, K16: until
//!   then its buckets fail open at once). Tested by `tests/membership.rs`
//!   (`test_a_node_that_announces_its_leave_is_dropped_while_it_still_gossips`).
//! - M5 A node that was itself paused (its membership task did not run for over
//!   [`crate::pause::STALL`]) drops no peer for [`crate::pause::TRUST_AFTER`] after it runs
//!   again: its failure detector measured its own silence. A peer still dead then is dropped
//!   then ([`crate::pause`]).
//!
//! Tested in `tests/membership.rs` (M1–M4 over real UDP on loopback), `pause.rs` (M5's
//! decisions) and in the server's multi-process cluster tests (M5 end to end:
//! `test_a_node_resuming_from_a_pause_keeps_its_peers`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chitchat::transport::UdpTransport;
use chitchat::{ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, NodeState};
use tokio::sync::watch;

use crate::member::Member;
use crate::pause::{self, PauseGuard};

/// How often a node gossips with a random peer. Every round bumps the node's heartbeat, so
/// peers see a heartbeat about this often; 500 ms keeps gossip traffic to a few small
/// datagrams per second per node while letting failure detection finish in seconds.
pub const GOSSIP_INTERVAL: Duration = Duration::from_millis(500);

/// The phi-accrual threshold above which a silent node is declared dead. Chitchat's phi is
/// the silence divided by the mean heartbeat interval, so 8 means "silent for eight mean
/// intervals": with heartbeats every ~0.5 s that is about 4 s, and a late datagram or two
/// (a busy machine) never reaches it.
pub const PHI_THRESHOLD: f64 = 8.0;

/// The bound M4 states and the cluster tests check: a stopped node is out of the live set
/// within this. It is the phi threshold times the longest mean heartbeat interval the
/// detector accepts before a node counts as dead anyway (`MAX_HEARTBEAT_INTERVAL`, 1.2 s, is its
/// sample cap, chitchat drops longer samples), plus a gossip round to publish the change —
/// in practice detection takes about 4 s on loopback.
pub const DEAD_AFTER: Duration = Duration::from_secs(10);

/// Longest heartbeat interval the detector samples: with phi 8 the detection time can never
/// exceed about 8 × this (~ 9.6 s) plus one gossip round, which is what bounds
/// [`DEAD_AFTER`].
const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(1_200);

/// The gossip key a node sets when it stops (M7): an incarnation that gossips it is no member.
/// On the wire: stable.
pub const LEAVING: &str = "leaving";

/// How long a stopping node keeps gossiping (and answering calls) after it announced its leave
/// (M7): one gossip round. Its own calls to its peers take a round trip to reach them (well
/// under a millisecond on a LAN), and in a round each peer gossips with it too (up to three
/// peers a round, chitchat's fan-out), which carries the announcement again; a peer publishes
/// the change at its next round. An announcement lost anyway leaves the failure detector to
/// drop the node (M4).
pub const LEAVE_ANNOUNCE: Duration = GOSSIP_INTERVAL;

/// How long a dead node's state is kept before chitchat forgets it (a node back within this
/// is recognised; one back later simply joins again).
const DEAD_NODE_GRACE: Duration = Duration::from_secs(3_600);

/// The members this node currently counts, and the live peers it refuses (M2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// Live members of this cluster, this node included, ordered by node id.
    pub live: Arc<Vec<Member>>,
    /// Live peers with this `cluster.name` but another cluster uuid (another metastore).
    pub strangers: Arc<Vec<Member>>,
    /// Live incarnations of this node's own id other than this one (M6): a node started on a
    /// copy of this node's data folder, or this node's previous incarnation while its peers'
    /// gossip still carries its heartbeats. Never members.
    pub twins: Arc<Vec<Member>>,
}

impl Members {
    /// The live member with `node_id`.
    pub fn get(&self, node_id: &str) -> Option<&Member> {
        self.live.iter().find(|m| m.node_id == node_id)
    }
}

/// What a node needs to join.
#[derive(Debug, Clone)]
pub struct MembershipConfig {
    /// `cluster.name`: chitchat's cluster id (M1).
    pub cluster_name: String,
    /// This node's record; its `generation` must grow across restarts.
    pub me: Member,
    /// `discovery.seed_hosts`: `host:port` transport addresses of other nodes.
    pub seeds: Vec<String>,
    /// Where gossip binds (UDP): the transport address.
    pub listen_addr: SocketAddr,
    /// [`GOSSIP_INTERVAL`] in a node; tests may shorten it.
    pub gossip_interval: Duration,
}

/// A running membership: gossip in the background, the live members on a watch.
pub struct Membership {
    handle: parking_lot::Mutex<Option<ChitchatHandle>>,
    members: watch::Receiver<Members>,
    me: Member,
}

impl Membership {
    /// Binds gossip on `config.listen_addr` (UDP) and starts gossiping with the seeds.
    pub async fn start(config: MembershipConfig) -> Result<Membership, StartError> {
        let me = config.me.clone();
        let chitchat_config = ChitchatConfig {
            chitchat_id: ChitchatId::new(me.node_id.clone(), me.generation, config.listen_addr),
            cluster_id: config.cluster_name.clone(),
            gossip_interval: config.gossip_interval,
            listen_addr: config.listen_addr,
            seed_nodes: config.seeds.clone(),
            failure_detector_config: FailureDetectorConfig {
                phi_threshold: PHI_THRESHOLD,
                sampling_window_size: 1_000,
                max_interval: MAX_HEARTBEAT_INTERVAL,
                // The first sample's stand-in: one gossip round, so a node that dies right
                // after joining is detected as fast as any other.
                initial_interval: config.gossip_interval,
                dead_node_grace_period: DEAD_NODE_GRACE,
            },
            marked_for_deletion_grace_period: DEAD_NODE_GRACE,
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: chitchat::ProtocolVersion::V0,
        };
        let handle = chitchat::spawn_chitchat(chitchat_config, me.key_values(), &UdpTransport)
            .await
            .map_err(|e| StartError(format!("{e:#}")))?;
        let mut live_rx = handle.chitchat().lock().await.live_nodes_watcher();
        let first = members_of(&me, &live_rx.borrow_and_update());
        let (tx, rx) = watch::channel(first.clone());
        let me_for_task = me.clone();
        tokio::spawn(async move {
            // M5: the task watches its own gaps; after a pause it holds back removals.
            let mut guard = PauseGuard::new(Instant::now());
            let mut tick = tokio::time::interval(pause::TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut published = first;
            loop {
                tokio::select! {
                    changed = live_rx.changed() => if changed.is_err() { break },
                    _ = tick.tick() => {}
                }
                let held = guard.observe(Instant::now()).is_some();
                let fresh = members_of(&me_for_task, &live_rx.borrow_and_update());
                let next = if held {
                    let kept = pause::held_view(&published, fresh.clone());
                    if kept.live.len() > fresh.live.len() {
                        tracing::debug!(
                            unheard = kept.live.len() - fresh.live.len(),
                            "this node was paused: peers unheard since are kept for now"
                        );
                    }
                    kept
                } else {
                    fresh
                };
                if tx.is_closed() {
                    break;
                }
                if next != published {
                    published = next.clone();
                    tx.send_replace(next);
                }
            }
        });
        Ok(Membership {
            handle: parking_lot::Mutex::new(Some(handle)),
            members: rx,
            me,
        })
    }

    /// The members as of now.
    pub fn members(&self) -> Members {
        self.members.borrow().clone()
    }

    /// A watch of the members, changed on every join, leave or restart.
    pub fn watch(&self) -> watch::Receiver<Members> {
        self.members.clone()
    }

    /// This node's record.
    pub fn me(&self) -> &Member {
        &self.me
    }

    /// Announces that this node stops (M7): gossips [`LEAVING`] and calls every live peer at
    /// once. The node goes on gossiping until [`Membership::shutdown`], which should come
    /// [`LEAVE_ANNOUNCE`] later so that the calls' answers are read and the peers' own rounds
    /// reach it. Returns whether there was a peer to tell; does nothing once shut down.
    pub async fn announce_leave(&self) -> bool {
        let chitchat = match self.handle.lock().as_ref() {
            Some(h) => h.chitchat(),
            None => return false,
        };
        chitchat.lock().await.self_node_state().set(LEAVING, "true");
        let peers: Vec<SocketAddr> = self
            .members()
            .live
            .iter()
            .filter(|m| m.node_id != self.me.node_id)
            .map(|m| m.transport_addr)
            .collect();
        if let Some(h) = self.handle.lock().as_ref() {
            for peer in &peers {
                // A handshake now rather than at the next round: the peer's answer carries
                // the announcement back in this node's reply.
                let _ = h.gossip(*peer);
            }
        }
        !peers.is_empty()
    }

    /// Stops gossiping (peers see the node silent and mark it dead within [`DEAD_AFTER`],
    /// or drop it at once if it announced its leave, M7). Later calls do nothing.
    pub async fn shutdown(&self) {
        let handle = self.handle.lock().take();
        if let Some(h) = handle {
            let _ = h.shutdown().await;
        }
    }
}

/// The live members seen in chitchat's live-node map (M2, M3).
fn members_of(me: &Member, live: &BTreeMap<ChitchatId, NodeState>) -> Members {
    let mut incarnations: BTreeMap<String, Vec<Member>> = BTreeMap::new();
    let mut twins = Vec::new();
    for (id, state) in live {
        // M7: an incarnation that announced its leave is gone.
        if state.get(LEAVING).is_some() {
            continue;
        }
        let Some(m) = Member::from_key_values(&id.node_id, id.generation_id, |k| state.get(k))
        else {
            continue;
        };
        if m.node_id == me.node_id {
            if m.generation != me.generation {
                twins.push(m);
            }
            continue;
        }
        incarnations.entry(m.node_id.clone()).or_default().push(m);
    }
    let mut by_id: BTreeMap<String, Member> = incarnations
        .into_iter()
        .filter_map(|(id, seen)| Some((id, incarnation(seen)?)))
        .collect();
    by_id.insert(me.node_id.clone(), me.clone());
    let (live, strangers): (Vec<Member>, Vec<Member>) = by_id
        .into_values()
        .partition(|m| m.cluster_uuid == me.cluster_uuid);
    Members {
        live: Arc::new(live),
        strangers: Arc::new(strangers),
        twins: Arc::new(twins),
    }
}

/// The incarnation of one node id that counts among the live ones (M3, M6): at each transport
/// address the latest (a restart there replaces its predecessor at once); of several
/// addresses, the one where the id was seen first, by its earliest generation there (ties by
/// address), so a copy of a node's data folder started elsewhere, later, never displaces the
/// original while the original lives.
fn incarnation(seen: Vec<Member>) -> Option<Member> {
    // Per address: its earliest generation, and its latest incarnation.
    let mut by_addr: BTreeMap<SocketAddr, (u64, Member)> = BTreeMap::new();
    for m in seen {
        match by_addr.get_mut(&m.transport_addr) {
            Some((first, latest)) => {
                *first = (*first).min(m.generation);
                if m.generation > latest.generation {
                    *latest = m;
                }
            }
            None => {
                by_addr.insert(m.transport_addr, (m.generation, m));
            }
        }
    }
    by_addr
        .into_iter()
        .min_by_key(|(addr, (first, _))| (*first, *addr))
        .map(|(_, (_, latest))| latest)
}

/// Why membership could not start (the gossip socket did not bind, say).
#[derive(Debug, thiserror::Error)]
#[error("gossip could not start: {0}")]
pub struct StartError(String);

#[cfg(test)]
mod tests {
    use super::*;

    fn at(generation: u64, transport: &str) -> Member {
        Member {
            node_id: "n".to_string(),
            generation,
            name: "n".to_string(),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: transport.parse().unwrap(),
            protocol_version: 1,
            backend: "embedded".to_string(),
            version: "0".to_string(),
            cluster_uuid: "u".to_string(),
        }
    }

    fn kept(seen: &[Member]) -> (u64, String) {
        let m = incarnation(seen.to_vec()).unwrap();
        (m.generation, m.transport_addr.to_string())
    }

    #[test]
    fn test_a_restart_at_the_same_address_replaces_its_predecessor() {
        let (old, new) = (at(1, "127.0.0.1:9300"), at(2, "127.0.0.1:9300"));
        assert_eq!(
            kept(&[old.clone(), new.clone()]),
            (2, "127.0.0.1:9300".into())
        );
        assert_eq!(kept(&[new, old]), (2, "127.0.0.1:9300".into()));
    }

    #[test]
    fn test_a_copy_started_elsewhere_does_not_displace_the_original() {
        let (original, copy) = (at(1, "127.0.0.1:9300"), at(2, "127.0.0.1:9301"));
        assert_eq!(
            kept(&[original.clone(), copy.clone()]),
            (1, "127.0.0.1:9300".into())
        );
        assert_eq!(
            kept(&[copy.clone(), original.clone()]),
            (1, "127.0.0.1:9300".into())
        );
        // The original restarted at its address while the copy runs: still its address.
        let restarted = at(3, "127.0.0.1:9300");
        for order in [
            vec![original.clone(), copy.clone(), restarted.clone()],
            vec![restarted.clone(), copy.clone(), original.clone()],
            vec![copy.clone(), restarted.clone(), original.clone()],
        ] {
            assert_eq!(kept(&order), (3, "127.0.0.1:9300".into()));
        }
        // Once the original is gone from the live set, the other incarnation counts.
        assert_eq!(kept(&[copy]), (2, "127.0.0.1:9301".into()));
    }
}
