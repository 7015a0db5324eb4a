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
//!   a peer drops an incarnation that gossips it from its live set at its membership task's
//!   next tick ([`crate::pause::TICK`], 100 ms; the task reads the key from chitchat's states,
//!   as chitchat publishes its live set only at its own rounds, [`GOSSIP_INTERVAL`]) — instead
//!   of the failure detector's seconds (M4 still bounds a node that dies, or whose
//!   announcement is lost). So a stopped owner's buckets move
//!   to the survivors about as soon as it stops answering (`shared/coordinator.rs`, K16: until
//!   then its buckets fail open at once). Tested by `tests/membership.rs`
//!   (`test_a_node_that_announces_its_leave_is_dropped_while_it_still_gossips`).
//! - M8 A peer that has published a view without a leaving incarnation says so: it gossips
//!   [`LEFT_PREFIX`]`<node id>` = the incarnation's generation ([`leaves_to_acknowledge`]).
//!   The stopping node goes on answering until every peer it told has said so, or
//!   [`LEAVE_ANNOUNCE`] has passed ([`Membership::await_leave_known`]): so it stops as soon
//!   as its peers know, and keeps answering until then (a peer of a version that does not
//!   acknowledge costs the whole [`LEAVE_ANNOUNCE`], the wait before M8). Tested by
//!   `tests/membership.rs`
//!   (`test_a_stopping_node_stops_once_its_peers_dropped_it`) and the unit tests below.
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

/// The longest a stopping node keeps gossiping (and answering calls) after it announced its
/// leave, waiting for its peers to acknowledge it (M7, M8): one gossip round. Its own calls to
/// its peers take a round trip to reach them (well under a millisecond on a LAN), and in a
/// round each peer gossips with it too (up to three peers a round, chitchat's fan-out), which
/// carries the announcement again; a peer publishes the change at its next round, so within
/// one round of the announcement unless a datagram was lost or the peer is slow. An
/// announcement lost anyway leaves the failure detector to drop the node (M4).
pub const LEAVE_ANNOUNCE: Duration = GOSSIP_INTERVAL;

/// The prefix of the gossip key by which a node acknowledges another's leave (M8): the key is
/// `left:<node id>`, the value the generation of the incarnation it dropped. One key per node
/// id (a later leave of the same id overwrites it), set with chitchat's TTL so that it is
/// forgotten after [`DEAD_NODE_GRACE`]. On the wire: stable.
pub const LEFT_PREFIX: &str = "left:";

/// How often a stopping node asks each peer that has not acknowledged its leave yet for its
/// state (a gossip handshake: one datagram each way, and the peer's answer carries its
/// acknowledgement once set). 10 ms puts the stop within 10 ms of the last acknowledgement,
/// for at most 50 handshakes a peer within [`LEAVE_ANNOUNCE`].
const ASK_ACK_EVERY: Duration = Duration::from_millis(10);

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
    /// Where gossip binds (UDP): the transport's bound address, perhaps a wildcard. Peers
    /// are told `me.transport_addr` instead, the published one ([`crate::publish`]).
    pub listen_addr: SocketAddr,
    /// [`GOSSIP_INTERVAL`] in a node; tests may shorten it.
    pub gossip_interval: Duration,
}

/// A running membership: gossip in the background, the live members on a watch.
pub struct Membership {
    handle: parking_lot::Mutex<Option<ChitchatHandle>>,
    members: watch::Receiver<Members>,
    me: Member,
    /// The peers [`Membership::announce_leave`] told, whose acknowledgement
    /// [`Membership::await_leave_known`] waits for (M8).
    told: parking_lot::Mutex<Vec<Member>>,
}

impl Membership {
    /// Binds gossip on `config.listen_addr` (UDP) and starts gossiping with the seeds.
    pub async fn start(config: MembershipConfig) -> Result<Membership, StartError> {
        let me = config.me.clone();
        let chitchat_config = ChitchatConfig {
            // Peers gossip to the advertised address: the published one, never a wildcard.
            chitchat_id: ChitchatId::new(me.node_id.clone(), me.generation, me.transport_addr),
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
        let chitchat = handle.chitchat();
        let mut live_rx = chitchat.lock().await.live_nodes_watcher();
        let first = members_of(&me, &live_rx.borrow_and_update(), &[]);
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
                // M7: the leaving incarnations as gossip brought them, not as of chitchat's
                // last round (its live set is published only at its own rounds).
                let leaving = leaving_incarnations(chitchat.lock().await.node_states());
                let fresh = members_of(&me_for_task, &live_rx.borrow_and_update(), &leaving);
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
                // M8: after the view without them is published, never before.
                let acks = leaves_to_acknowledge(&me_for_task, &leaving, &published);
                if !acks.is_empty() {
                    let mut chitchat = chitchat.lock().await;
                    let state = chitchat.self_node_state();
                    for (node_id, generation) in acks {
                        let key = format!("{LEFT_PREFIX}{node_id}");
                        let value = generation.to_string();
                        if state.get(&key) != Some(value.as_str()) {
                            state.set_with_ttl(key, value);
                        }
                    }
                }
            }
        });
        Ok(Membership {
            handle: parking_lot::Mutex::new(Some(handle)),
            members: rx,
            me,
            told: parking_lot::Mutex::new(Vec::new()),
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
    /// once. The node goes on gossiping until [`Membership::shutdown`], which should come once
    /// the peers know ([`Membership::await_leave_known`]). Returns whether there was a peer to
    /// tell; does nothing once shut down.
    pub async fn announce_leave(&self) -> bool {
        let chitchat = match self.handle.lock().as_ref() {
            Some(h) => h.chitchat(),
            None => return false,
        };
        chitchat.lock().await.self_node_state().set(LEAVING, "true");
        let peers: Vec<Member> = self
            .members()
            .live
            .iter()
            .filter(|m| m.node_id != self.me.node_id)
            .cloned()
            .collect();
        if let Some(h) = self.handle.lock().as_ref() {
            for peer in &peers {
                // A handshake now rather than at the next round: the peer's answer carries
                // the announcement back in this node's reply.
                let _ = h.gossip(peer.transport_addr);
            }
        }
        let told = !peers.is_empty();
        *self.told.lock() = peers;
        told
    }

    /// Waits until every peer [`Membership::announce_leave`] told has acknowledged the leave
    /// (M8: it published a view without this node), or `within` has passed; answers the node
    /// ids of the peers that had not. Meanwhile it asks each of those for its state every
    /// [`ASK_ACK_EVERY`] (its answer carries the acknowledgement), since a peer's own rounds
    /// reach this node only now and then.
    ///
    /// # Cancel safety
    /// Dropping the future only stops the wait: the leave stays announced.
    pub async fn await_leave_known(&self, within: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        let told = self.told.lock().clone();
        loop {
            let Some(chitchat) = self.handle.lock().as_ref().map(ChitchatHandle::chitchat) else {
                return Vec::new();
            };
            let waiting: Vec<&Member> = {
                let chitchat = chitchat.lock().await;
                let states = chitchat.node_states();
                told.iter()
                    .filter(|peer| !has_acknowledged(&self.me, peer, states))
                    .collect()
            };
            if waiting.is_empty() || tokio::time::Instant::now() >= deadline {
                return waiting.iter().map(|m| m.node_id.clone()).collect();
            }
            if let Some(h) = self.handle.lock().as_ref() {
                for peer in &waiting {
                    let _ = h.gossip(peer.transport_addr);
                }
            }
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + ASK_ACK_EVERY))
                .await;
        }
    }

    /// Gossips `key` = `value` as this node's (a key outside the [`Member`] record, such as
    /// a gateway's upstream cluster, known only after start). Does nothing once shut down.
    pub async fn set_value(&self, key: &str, value: &str) {
        let Some(chitchat) = self.handle.lock().as_ref().map(ChitchatHandle::chitchat) else {
            return;
        };
        chitchat.lock().await.self_node_state().set(key, value);
    }

    /// The value of `key` each live member gossips, by node id (members that gossip none are
    /// left out; this node's own is included).
    pub async fn values_of(&self, key: &str) -> Vec<(String, String)> {
        let Some(chitchat) = self.handle.lock().as_ref().map(ChitchatHandle::chitchat) else {
            return Vec::new();
        };
        let live = self.members().live;
        let chitchat = chitchat.lock().await;
        let states = chitchat.node_states();
        states
            .iter()
            .filter(|(id, _)| {
                live.iter()
                    .any(|m| m.node_id == *id.node_id && m.generation == id.generation_id)
            })
            .filter_map(|(id, state)| Some((id.node_id.to_string(), state.get(key)?.to_string())))
            .collect()
    }

    /// Gossips with `addr` now (a handshake: one datagram each way), whether or not it is a
    /// seed or a known node: a node of this cluster there learns of this one and this one of
    /// it and its members, which joins the two (chitchat keeps gossiping with the nodes it
    /// knows). Does nothing once shut down.
    pub fn gossip_with(&self, addr: SocketAddr) {
        if let Some(h) = self.handle.lock().as_ref() {
            let _ = h.gossip(addr);
        }
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

/// The incarnations (node id, generation) that gossip [`LEAVING`] in `states` (chitchat's
/// view of every node, live or not), the latest of each node id: one id's earlier incarnation
/// that left too is superseded (M8 acknowledges one generation per id). Empty, without
/// allocating, while nobody leaves.
fn leaving_incarnations(states: &BTreeMap<ChitchatId, NodeState>) -> Vec<(Arc<str>, u64)> {
    let mut leaving: Vec<(Arc<str>, u64)> = Vec::new();
    for (id, _) in states.iter().filter(|(_, s)| s.get(LEAVING).is_some()) {
        match leaving.iter_mut().find(|(n, _)| *n == id.node_id) {
            Some((_, generation)) => *generation = (*generation).max(id.generation_id),
            None => leaving.push((id.node_id.clone(), id.generation_id)),
        }
    }
    leaving
}

/// Of the incarnations `leaving` ([`leaving_incarnations`]), those the view `published` leaves
/// out, which this node acknowledges (M8). One it still counts (a view held after this
/// node's pause, M5) is not acknowledged: the stopping node waits on.
fn leaves_to_acknowledge(
    me: &Member,
    leaving: &[(Arc<str>, u64)],
    published: &Members,
) -> Vec<(Arc<str>, u64)> {
    leaving
        .iter()
        .filter(|(node_id, _)| **node_id != *me.node_id)
        .filter(|(node_id, generation)| {
            !published
                .live
                .iter()
                .any(|m| *m.node_id == **node_id && m.generation == *generation)
        })
        .cloned()
        .collect()
}

/// Whether `peer`, as `states` (this node's chitchat's view of every node) show it, has
/// acknowledged the leave of `me` (M8): the incarnation of `peer` told gossips
/// [`LEFT_PREFIX`]`<me>` with `me`'s generation.
fn has_acknowledged(me: &Member, peer: &Member, states: &BTreeMap<ChitchatId, NodeState>) -> bool {
    let key = format!("{LEFT_PREFIX}{}", me.node_id);
    let generation = me.generation.to_string();
    states.iter().any(|(id, state)| {
        *id.node_id == *peer.node_id
            && id.generation_id == peer.generation
            && state.get(&key) == Some(generation.as_str())
    })
}

/// The live members seen in chitchat's live-node map (M2, M3), without the incarnations that
/// gossip [`LEAVING`] there or are in `leaving` (M7).
fn members_of(
    me: &Member,
    live: &BTreeMap<ChitchatId, NodeState>,
    leaving: &[(Arc<str>, u64)],
) -> Members {
    let mut incarnations: BTreeMap<String, Vec<Member>> = BTreeMap::new();
    let mut twins = Vec::new();
    for (id, state) in live {
        // M7: an incarnation that announced its leave is gone.
        if state.get(LEAVING).is_some()
            || leaving
                .iter()
                .any(|(n, g)| *n == id.node_id && *g == id.generation_id)
        {
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
pub struct StartError(pub(crate) String);

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

    fn state(keys: &[(&str, &str)]) -> NodeState {
        let mut s = NodeState::for_test();
        for (k, v) in keys {
            s.set(*k, *v);
        }
        s
    }

    fn id_of(m: &Member) -> ChitchatId {
        ChitchatId::new(m.node_id.clone(), m.generation, m.transport_addr)
    }

    fn named(id: &str, generation: u64) -> Member {
        Member {
            node_id: id.to_string(),
            ..at(generation, "127.0.0.1:9300")
        }
    }

    #[test]
    fn test_a_leave_is_acknowledged_once_the_published_view_is_without_it() {
        let (me, staying, leaving) = (named("a", 1), named("b", 1), named("c", 4));
        let states: BTreeMap<ChitchatId, NodeState> = [
            (id_of(&me), state(&[])),
            (id_of(&staying), state(&[])),
            (id_of(&leaving), state(&[(LEAVING, "true")])),
            // An earlier incarnation of c that left too: superseded.
            (id_of(&named("c", 2)), state(&[(LEAVING, "true")])),
        ]
        .into();
        let gone = leaving_incarnations(&states);
        assert_eq!(gone, [(Arc::from("c"), 4)]);
        let view = |members: &[&Member]| Members {
            live: Arc::new(members.iter().map(|m| (*m).clone()).collect()),
            ..Members::default()
        };
        // The live set of chitchat's last round still carries c without its key: the fresh
        // states leave it out all the same.
        let record = |m: &Member| {
            let kv = m.key_values();
            let kv: Vec<(&str, &str)> = kv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            state(&kv)
        };
        let stale: BTreeMap<ChitchatId, NodeState> = [
            (id_of(&me), record(&me)),
            (id_of(&staying), record(&staying)),
            (id_of(&leaving), record(&leaving)),
        ]
        .into();
        assert_eq!(members_of(&me, &stale, &[]).live.len(), 3);
        let fresh = members_of(&me, &stale, &gone);
        assert_eq!(
            fresh.live.iter().map(|m| &*m.node_id).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            leaves_to_acknowledge(&me, &gone, &view(&[&me, &staying])),
            [(Arc::from("c"), 4)]
        );
        // Still counted (a view held after this node's pause): not yet.
        assert!(leaves_to_acknowledge(&me, &gone, &view(&[&me, &staying, &leaving])).is_empty());
        // This node's own id leaving (a twin's announcement) is never acknowledged here.
        assert!(leaves_to_acknowledge(&me, &[(Arc::from("a"), 9)], &view(&[&me])).is_empty());
        assert!(leaving_incarnations(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn test_only_the_peer_told_acknowledging_this_incarnation_counts() {
        let (me, peer) = (named("c", 4), named("a", 1));
        let key = format!("{LEFT_PREFIX}c");
        let states = |node: &Member, value: &str| -> BTreeMap<ChitchatId, NodeState> {
            [(id_of(node), state(&[(key.as_str(), value)]))].into()
        };
        assert!(has_acknowledged(&me, &peer, &states(&peer, "4")));
        // An acknowledgement of an earlier incarnation of this node.
        assert!(!has_acknowledged(&me, &peer, &states(&peer, "3")));
        // From another incarnation of the peer than the one told.
        assert!(!has_acknowledged(&me, &peer, &states(&named("a", 2), "4")));
        assert!(!has_acknowledged(&me, &peer, &BTreeMap::new()));
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
