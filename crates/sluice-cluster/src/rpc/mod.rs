//! Node-to-node calls: the messages (`proto/node.proto`, compiled by protox at build time),
//! the [`Transport`] seam a coordinator calls through, and the [`LocalHandler`] a node answers
//! with.
//!
//! Every call has a deadline and ends with an answer or an [`RpcError`] by then — never a
//! hang. The real transport is gRPC over tonic ([`tonic_transport::TonicTransport`], served
//! by [`service::serve`]); a simulation can implement [`Transport`] over an in-memory network.

pub mod service;
pub mod shared_wire;
pub mod tonic_transport;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;

use crate::member::Member;

/// The generated messages and services of `sluice.node.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("sluice.node.v1");
}

pub use proto::LocalApi;

/// A boxed `Send` future, the return type of the object-safe traits here.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a call to another node did not produce its answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// No connection could be made (refused, no route, connect timed out): the node is down
    /// or unreachable. The call never reached it.
    #[error("node [{node}] at [{addr}] is unreachable: {reason}")]
    Unreachable {
        node: String,
        addr: String,
        reason: String,
    },
    /// The connection broke with the call on it (reset, closed, an HTTP/2 error): the node
    /// went away or its network did, and the call may or may not have run there.
    #[error("the connection to node [{node}] at [{addr}] broke during the call: {reason}")]
    Disconnected {
        node: String,
        addr: String,
        reason: String,
    },
    /// The node did not answer within the call's deadline (the connection stayed up).
    #[error("node [{node}] did not answer within [{}ms]", deadline.as_millis())]
    DeadlineExceeded { node: String, deadline: Duration },
    /// The node speaks another protocol version.
    #[error("node [{node}] speaks protocol version [{theirs}], this node [{ours}]")]
    VersionMismatch {
        node: String,
        ours: u32,
        theirs: u32,
    },
    /// The node answered with an error of the RPC layer itself (not an API error, which is a
    /// [`LocalAnswer`] with a non-2xx status).
    #[error("node [{node}] failed the call: {reason}")]
    Remote { node: String, reason: String },
}

/// A node's answer to a [`LocalApi`] call: an HTTP-like status and a JSON body (an
/// OpenSearch error body when the status is not 2xx).
#[derive(Debug, Clone, PartialEq)]
pub struct LocalAnswer {
    /// 200 on success.
    pub status: u16,
    /// The JSON document.
    pub body: Value,
}

impl LocalAnswer {
    /// A 200 answer.
    pub fn ok(body: Value) -> LocalAnswer {
        LocalAnswer { status: 200, body }
    }
}

/// What a node runs when another node calls one of its local APIs. The server implements it
/// over its own state; this crate never reads the JSON.
pub trait LocalHandler: Send + Sync + 'static {
    /// Answers `api` with `params` (a JSON object).
    fn local(&self, api: LocalApi, params: Value) -> BoxFuture<'static, LocalAnswer>;
}

/// A shared-tier call (see `shared/`): to a bucket's owner, or an owner's offer to a
/// coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedCall {
    /// One lease of `bucket` under `limit`; with `wants_queue`, a denial registers the caller
    /// as a waiter (it has parked the request first). With a grant, up to `extra` more leases
    /// from room no waiter is owed (a batch for the caller's idle cache; the pool's P7).
    Acquire {
        bucket: String,
        limit: u64,
        wants_queue: bool,
        extra: u64,
    },
    /// Extends the caller's leases.
    Renew { leases: Vec<u64> },
    /// Ends the caller's leases.
    Release { leases: Vec<u64> },
    /// The owner offers the reserved lease `lease` of `bucket` to a waiting coordinator;
    /// `limit` is the bucket's `shared_limit` the owner checked it against (0: unknown).
    Offer {
        bucket: String,
        lease: u64,
        ttl: Duration,
        limit: u64,
    },
    /// Per bucket, whether the owner has room no waiter is owed (the pool's P7): the caller
    /// keeps its idle leases of those buckets for another reuse window.
    Room { buckets: Vec<String> },
}

/// The answer to a [`SharedCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedReply {
    /// Acquire: granted, with the `extra` leases of a batch (maybe none).
    Granted {
        lease: u64,
        ttl: Duration,
        extra: Vec<u64>,
    },
    /// Acquire: the pool is full.
    Denied {
        in_use: u64,
        limit: u64,
        waiter_registered: bool,
    },
    /// Acquire: the owner's tables are at their hard cap; the caller fails open.
    Overloaded,
    /// Renew: the leases no longer held.
    Renewed { lost: Vec<u64> },
    /// Release: done.
    Released,
    /// Offer: whether the lease now runs a request, and whether more wait.
    OfferAnswer { used: bool, more_waiting: bool },
    /// Room: per asked bucket, in order, whether it has room no waiter is owed.
    Room { free: Vec<bool> },
}

/// What a node runs when another node makes a shared-tier call to it.
pub trait SharedHandler: Send + Sync + 'static {
    /// Answers `call` from node `from`.
    fn shared(&self, from: &str, call: SharedCall) -> BoxFuture<'static, SharedReply>;
}

/// How a coordinator reaches other members. Implementations must end every call by
/// `deadline`.
pub trait Transport: Send + Sync + 'static {
    /// Checks that `to` is up and speaks this protocol; returns its answer's node id.
    fn ping(&self, to: &Member, deadline: Duration) -> BoxFuture<'_, Result<String, RpcError>>;

    /// Runs `api` on `to`.
    fn local(
        &self,
        to: &Member,
        api: LocalApi,
        params: Value,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<LocalAnswer, RpcError>>;

    /// Makes a shared-tier call to `to`.
    fn shared(
        &self,
        to: &Member,
        call: SharedCall,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<SharedReply, RpcError>>;
}
