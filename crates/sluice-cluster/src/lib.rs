//! A cluster of sluice nodes: who is a member, and how members call each other.
//!
//! - [`membership`]: chitchat gossip over UDP. Each node gossips its [`Member`] record (id,
//!   name, HTTP and transport addresses, protocol version, backend, cluster uuid); chitchat's
//!   phi-accrual detector marks a silent node dead ([`membership::DEAD_AFTER`] states the
//!   bound). Nodes of another `cluster.name` are never joined (chitchat drops their gossip),
//!   and nodes of another metastore (another cluster uuid) are never counted as members.
//! - [`rpc`]: node-to-node calls over tonic (gRPC on TCP, on the same port number as the
//!   gossip), versioned messages with deadlines, behind the [`rpc::Transport`] trait so the
//!   shared-tier protocol can later run over a simulated network with a [`clock::ManualClock`].
//! - [`fanout`]: one call to every selected member at once, every answer or failure
//!   collected within a deadline — the shape of `_wlm/stats` and `_tasks` across the cluster.
//! - [`split`]: live nodes on the same metastore that gossip did not join (a typo in
//!   `discovery.seed_hosts`): reported, reached, and the smaller side stands aside.
//! - [`bind`]: the transport port: TCP and UDP bound on one number, `0` or a range picking a
//!   free one.
//! - [`publish`]: the address a node publishes to its peers and clients, which is not a
//!   wildcard its sockets bind (OpenSearch's publish host rules).
//!
//! This crate knows nothing of HTTP, search or workload groups: what a node answers to a
//! [`rpc::LocalApi`] call is a JSON document the server renders and reads.

pub mod bind;
pub mod clock;
mod cluster;
pub mod fanout;
pub mod member;
pub mod membership;
pub mod pause;
pub mod publish;
pub mod ring;
pub mod rpc;
pub mod shared;
pub mod split;

pub use cluster::{Cluster, ClusterConfig};
pub use member::Member;

/// The node-to-node protocol this build speaks: gossiped in every [`Member`] record and sent
/// in every RPC header. A node answers a call of another version with
/// [`rpc::RpcError::VersionMismatch`] rather than misreading it. Bump it when a message
/// changes meaning (adding a field does not).
pub const PROTOCOL_VERSION: u32 = 1;
