//! The running cluster part of a node: membership, the RPC server and the transport to the
//! other members, wired together.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::fanout::{self, Outcome};
use crate::member::Member;
use crate::membership::{LEAVE_ANNOUNCE, Members, Membership, MembershipConfig, StartError};
use crate::rpc::tonic_transport::TonicTransport;
use crate::rpc::{LocalAnswer, LocalApi, LocalHandler, RpcError, Transport};
use crate::shared::{OWNER_LIMITS, SharedTier, coordinator::Coordinator, owner::Owner};
use crate::split::{PresentNode, SplitDetector, SplitView};

/// What [`Cluster::start`] needs.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// `cluster.name`.
    pub cluster_name: String,
    /// This node's record; its `transport_addr` is the address peers reach the transport at:
    /// the published one ([`crate::publish`]), which is the listener's own address unless
    /// that is a wildcard (`0.0.0.0`, `::`) or `transport.publish_host`/`_port` say otherwise.
    /// Gossip binds the listener's address ([`Cluster::start`]).
    pub me: Member,
    /// `discovery.seed_hosts`.
    pub seeds: Vec<String>,
    /// [`crate::membership::GOSSIP_INTERVAL`] in a node.
    pub gossip_interval: Duration,
}

/// How long a stopping node waits for its owners to take back its idle shared leases: a
/// release is one round trip (well under a millisecond); beyond a second the owner is slow or
/// gone, and its purge (once this node leaves) or TTL reclaims them.
const SHUTDOWN_RELEASE_DEADLINE: Duration = Duration::from_secs(1);

/// How long a stopping node's RPC server may take to close its connections: an answer on its
/// way to a reachable peer is delivered within milliseconds, and the calls a peer makes of a
/// stopping node are short (an owner answers an acquire at once; fan-outs read local state).
/// Past it, the connections left are to peers that cannot be reached — an outside trial's
/// node, its links to every peer losing all packets, took 34 to 93 s to stop, until the link
/// healed, recording itself live in the metastore all along.
const SERVER_DRAIN_DEADLINE: Duration = Duration::from_secs(2);

/// Membership, RPC server and client of one node.
pub struct Cluster {
    membership: Membership,
    transport: Arc<TonicTransport>,
    listener: parking_lot::Mutex<Option<TcpListener>>,
    handler: OnceLock<Arc<dyn LocalHandler>>,
    shared: Arc<SharedTier>,
    server: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    stop: CancellationToken,
    /// Live nodes of the metastore that gossip did not join ([`crate::split`]), and the side
    /// the shared tier works with (S9).
    split: Arc<parking_lot::Mutex<Split>>,
    /// The transport listener's own address (TCP and UDP), perhaps a wildcard.
    bound_addr: std::net::SocketAddr,
}

/// The split as this node sees it, and the side it publishes to its shared tier.
struct Split {
    detector: SplitDetector,
    /// The split as last observed.
    view: SplitView,
    /// S9 of [`crate::split`]: the members the shared tier works with (its ring, the
    /// coordinators whose leases its owner keeps): [`SplitView::side_of`] the membership.
    side: tokio::sync::watch::Sender<Members>,
}

impl Split {
    /// Publishes the side of `members` under the view now, when it changed. Called under the
    /// lock with the membership as of then, by whichever of the two changed: so the last
    /// publication is of the latest of both.
    fn publish(&self, members: &Members) {
        let side = self.view.side_of(members);
        self.side.send_if_modified(|now| {
            let changed = *now != side;
            if changed {
                *now = side;
            }
            changed
        });
    }
}

impl Cluster {
    /// Starts gossip on the listener's address (UDP, same port number) and keeps the TCP
    /// listener for [`Cluster::serve`]. Peers are told `config.me.transport_addr`.
    pub async fn start(
        config: ClusterConfig,
        listener: TcpListener,
    ) -> Result<Cluster, StartError> {
        let listen_addr = listener
            .local_addr()
            .map_err(|e| StartError(format!("cannot read the transport's bound address: {e}")))?;
        let membership = Membership::start(MembershipConfig {
            cluster_name: config.cluster_name,
            me: config.me.clone(),
            seeds: config.seeds,
            listen_addr,
            gossip_interval: config.gossip_interval,
        })
        .await?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let transport = Arc::new(TonicTransport::new(
            config.me.node_id.clone(),
            clock.clone(),
        ));
        let stop = CancellationToken::new();
        let me: Arc<str> = Arc::from(config.me.node_id.as_str());
        let (side, _) = tokio::sync::watch::channel(membership.members());
        let owner = Owner::start(
            me.clone(),
            OWNER_LIMITS,
            clock,
            transport.clone(),
            side.subscribe(),
            stop.clone(),
        );
        let coordinator = Coordinator::start(
            me,
            transport.clone(),
            owner.clone(),
            side.subscribe(),
            stop.clone(),
        );
        owner.set_local(&coordinator);
        let shared = Arc::new(SharedTier { owner, coordinator });
        let split = Arc::new(parking_lot::Mutex::new(Split {
            detector: SplitDetector::default(),
            view: SplitView::default(),
            side,
        }));
        // At every change of the membership: the side follows it (S9; `observe_presence`
        // follows the split), and the transport forgets the channels of members that left,
        // so its map stays bounded.
        let mut watch = membership.watch();
        let following = split.clone();
        let weak = Arc::downgrade(&transport);
        let stopped = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    changed = watch.changed() => if changed.is_err() { break },
                }
                let split = following.lock();
                let members = watch.borrow_and_update().clone();
                split.publish(&members);
                drop(split);
                match weak.upgrade() {
                    Some(t) => t.retain(&members.live),
                    None => break,
                }
            }
        });
        Ok(Cluster {
            membership,
            transport,
            listener: parking_lot::Mutex::new(Some(listener)),
            handler: OnceLock::new(),
            shared,
            server: parking_lot::Mutex::new(None),
            stop,
            split,
            bound_addr: listen_addr,
        })
    }

    /// Starts answering other nodes' calls with `handler`. Calls made before this wait in
    /// the listener's backlog; a second call does nothing.
    pub fn serve(&self, handler: Arc<dyn LocalHandler>) {
        if self.handler.set(handler.clone()).is_err() {
            return;
        }
        let Some(listener) = self.listener.lock().take() else {
            return;
        };
        let node_id = self.me().node_id.clone();
        let stop = self.stop.clone();
        let shared: Arc<dyn crate::rpc::SharedHandler> = self.shared.clone();
        let server = tokio::spawn(async move {
            if let Err(e) = crate::rpc::service::serve(
                listener,
                node_id,
                handler,
                shared,
                stop.cancelled_owned(),
            )
            .await
            {
                tracing::error!("the node-to-node RPC server stopped: {e}");
            }
        });
        *self.server.lock() = Some(server);
    }

    /// This node's shared tier (owner and coordinator).
    pub fn shared(&self) -> &Arc<SharedTier> {
        &self.shared
    }

    /// This node's record.
    pub fn me(&self) -> &Member {
        self.membership.me()
    }

    /// The address the transport's sockets are bound to (`transport.host`), which may be a
    /// wildcard; [`Cluster::me`]'s `transport_addr` is the one published to peers.
    pub fn bound_addr(&self) -> std::net::SocketAddr {
        self.bound_addr
    }

    /// The members as of now.
    pub fn members(&self) -> Members {
        self.membership.members()
    }

    /// A watch of the members.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<Members> {
        self.membership.watch()
    }

    /// Takes an observation of the nodes the metastore records live (`None`: it could not be
    /// read) against the membership now, gossips with every live node missing from it (S4 of
    /// [`crate::split`]: a node whose seeds missed the others joins them so) and answers the
    /// split as it stands, which [`Cluster::split`] answers until the next observation.
    pub fn observe_presence(&self, present: Option<&[PresentNode]>) -> SplitView {
        let me = self.me().node_id.clone();
        let now = std::time::Instant::now();
        let mut split = self.split.lock();
        let members = self.members();
        let live = &members.live;
        let view = match present {
            Some(present) => split.detector.observe(&me, live, present, now),
            None => split.detector.observe_gossip(&me, live, now),
        };
        for addr in split.detector.to_reach() {
            match addr.parse() {
                Ok(addr) => self.membership.gossip_with(addr),
                Err(_) => {
                    tracing::debug!(%addr, "a node's recorded transport address does not parse")
                }
            }
        }
        split.view = view.clone();
        // W3 of the owner: the nodes left out of the shared tier are granted nothing.
        self.shared.owner.set_left_out(&view.left_out);
        split.publish(&members);
        view
    }

    /// S8 of [`crate::split`]: the nodes of `ids` (recorded live, awaited at start) that
    /// have not joined are reported as unjoined from now on, not a grace later.
    pub fn presume_unjoined(&self, ids: &[String]) {
        let me = self.me().node_id.clone();
        let now = std::time::Instant::now();
        let mut split = self.split.lock();
        let members = self.members();
        split.detector.presume_unjoined(ids, now);
        split.view = split.detector.observe_gossip(&me, &members.live, now);
        self.shared.owner.set_left_out(&split.view.left_out);
        split.publish(&members);
    }

    /// The split as last observed ([`Cluster::observe_presence`]): none on a node that never
    /// observed one (a node on a metastore of its own).
    pub fn split(&self) -> SplitView {
        self.split.lock().view.clone()
    }

    /// Gossips `key` = `value` as this node's (see [`Membership::set_value`]).
    pub async fn set_value(&self, key: &str, value: &str) {
        self.membership.set_value(key, value).await;
    }

    /// The value of `key` each live member gossips, by node id.
    pub async fn values_of(&self, key: &str) -> Vec<(String, String)> {
        self.membership.values_of(key).await
    }

    /// The transport to other members (for protocols built on this crate).
    pub fn transport(&self) -> Arc<dyn Transport> {
        self.transport.clone()
    }

    /// Calls `api` on every member of `targets` (see [`fanout::fan_out`]).
    pub async fn fan_out(
        &self,
        targets: &[Member],
        api: LocalApi,
        params: &Value,
        deadline: Duration,
    ) -> Vec<Outcome> {
        let local = self.local_handler();
        fanout::fan_out(
            self.transport.as_ref(),
            local.as_ref(),
            &self.me().node_id,
            targets,
            api,
            params,
            deadline,
        )
        .await
    }

    /// Calls `api` on one member (in process when it is this node).
    pub async fn call(
        &self,
        to: &Member,
        api: LocalApi,
        params: Value,
        deadline: Duration,
    ) -> Result<LocalAnswer, RpcError> {
        if to.node_id == self.me().node_id {
            return Ok(self.local_handler().local(api, params).await);
        }
        self.transport.local(to, api, params, deadline).await
    }

    /// Pings a member (the RPC benchmark's empty call).
    pub async fn ping(&self, to: &Member, deadline: Duration) -> Result<String, RpcError> {
        self.transport.ping(to, deadline).await
    }

    fn local_handler(&self) -> Arc<dyn LocalHandler> {
        self.handler
            .get()
            .cloned()
            .unwrap_or_else(|| Arc::new(NotServing))
    }

    /// Announces that this node leaves (M7 of `membership.rs`): its peers drop it at their
    /// next gossip round, and the shared tier's ring moves its buckets. The node goes on
    /// serving and gossiping until [`Cluster::shutdown`]; returns whether a peer was told.
    pub async fn announce_leave(&self) -> bool {
        self.membership.announce_leave().await
    }

    /// Leaves the cluster: gives back idle shared leases, announces the leave (M7) and goes on
    /// answering until every peer told has dropped it (M8), at most [`LEAVE_ANNOUNCE`] (calls
    /// still sent to this node meanwhile are answered: its buckets' requests get leases, not a
    /// refused connection), then stops the RPC server (in-flight calls finish, connections
    /// close) and gossip; later calls do nothing.
    pub async fn shutdown(&self) {
        // Idle shared leases back to their owners first (K8 of the coordinator); an owner that
        // does not answer in time reclaims them by its purge or TTL.
        let _ = tokio::time::timeout(
            SHUTDOWN_RELEASE_DEADLINE,
            self.shared.coordinator.release_idle(),
        )
        .await;
        if self.membership.announce_leave().await {
            let unknowing = self.membership.await_leave_known(LEAVE_ANNOUNCE).await;
            if !unknowing.is_empty() {
                tracing::debug!(
                    peers = ?unknowing,
                    "peers did not acknowledge this node's leave in time: they drop it when they hear of it, or by their failure detectors"
                );
            }
        }
        self.stop.cancel();
        let server = self.server.lock().take();
        if let Some(mut server) = server {
            // The server's graceful shutdown waits for every connection to close; one to a
            // peer behind a link that lost every packet never does (its GOAWAY and PING are
            // never answered). Past the drain's bound the rest is dropped.
            if tokio::time::timeout(SERVER_DRAIN_DEADLINE, &mut server)
                .await
                .is_err()
            {
                tracing::warn!(
                    "node-to-node connections still open {}s after the RPC server began to stop (peers that cannot be reached): closed",
                    SERVER_DRAIN_DEADLINE.as_secs()
                );
                server.abort();
                let _ = server.await;
            }
        }
        self.membership.shutdown().await;
    }
}

/// The local handler before [`Cluster::serve`]: every call answers 503.
struct NotServing;

impl LocalHandler for NotServing {
    fn local(&self, _api: LocalApi, _params: Value) -> crate::rpc::BoxFuture<'static, LocalAnswer> {
        Box::pin(async {
            LocalAnswer {
                status: 503,
                body: serde_json::json!({"error": "the node is starting", "status": 503}),
            }
        })
    }
}
