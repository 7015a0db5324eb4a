//! The real [`Transport`]: gRPC over tonic, one lazily connected HTTP/2 channel per member
//! address, every call bounded by its deadline on the injected clock.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tonic::transport::{Channel, Endpoint};

use super::proto::node_client::NodeClient;
use super::proto::{Header, LocalApi, LocalRequest, PingRequest};
use super::service::parse_version_mismatch;
use super::{BoxFuture, LocalAnswer, RpcError, SharedCall, SharedReply, Transport};
use crate::PROTOCOL_VERSION;
use crate::clock::Clock;
use crate::member::Member;

/// How long a connection attempt may take on its own; a call's deadline bounds it too. On a
/// LAN a connect takes well under a millisecond, so 1 s only ever expires for a dead host
/// that drops packets (a stopped process refuses at once).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Calls other members over gRPC.
pub struct TonicTransport {
    self_id: String,
    clock: Arc<dyn Clock>,
    channels: Mutex<HashMap<SocketAddr, Channel>>,
}

impl TonicTransport {
    /// A transport calling as node `self_id`.
    pub fn new(self_id: String, clock: Arc<dyn Clock>) -> TonicTransport {
        TonicTransport {
            self_id,
            clock,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets channels to addresses no member has any more (called on membership changes,
    /// so the map is bounded by the members ever live at once, not by every address seen).
    pub fn retain(&self, live: &[Member]) {
        self.channels
            .lock()
            .retain(|addr, _| live.iter().any(|m| m.transport_addr == *addr));
    }

    fn client(&self, to: &Member) -> Result<NodeClient<Channel>, RpcError> {
        let mut channels = self.channels.lock();
        if let Some(c) = channels.get(&to.transport_addr) {
            return Ok(NodeClient::new(c.clone()));
        }
        let endpoint = Endpoint::from_shared(format!("http://{}", to.transport_addr))
            .map_err(|e| RpcError::Unreachable {
                node: to.node_id.clone(),
                addr: to.transport_addr.to_string(),
                reason: e.to_string(),
            })?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = endpoint.connect_lazy();
        channels.insert(to.transport_addr, channel.clone());
        Ok(NodeClient::new(channel))
    }

    fn header(&self) -> Option<Header> {
        Some(Header {
            protocol_version: PROTOCOL_VERSION,
            from_node: self.self_id.clone(),
        })
    }

    /// Runs `call` with `deadline` on this transport's clock.
    async fn bounded<T>(
        &self,
        to: &Member,
        deadline: Duration,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, RpcError> {
        tokio::select! {
            r = call => r.map(tonic::Response::into_inner).map_err(|s| status_error(to, deadline, &s)),
            () = self.clock.sleep(deadline) => Err(RpcError::DeadlineExceeded {
                node: to.node_id.clone(),
                deadline,
            }),
        }
    }
}

/// The [`RpcError`] a gRPC status stands for.
fn status_error(to: &Member, deadline: Duration, s: &tonic::Status) -> RpcError {
    let node = to.node_id.clone();
    match s.code() {
        tonic::Code::Unavailable => RpcError::Unreachable {
            node,
            addr: to.transport_addr.to_string(),
            reason: s.message().to_string(),
        },
        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            RpcError::DeadlineExceeded { node, deadline }
        }
        tonic::Code::FailedPrecondition => match parse_version_mismatch(s.message()) {
            Some(theirs) => RpcError::VersionMismatch {
                node,
                ours: PROTOCOL_VERSION,
                theirs,
            },
            None => RpcError::Remote {
                node,
                reason: s.message().to_string(),
            },
        },
        _ => RpcError::Remote {
            node,
            reason: format!("{:?}: {}", s.code(), s.message()),
        },
    }
}

impl Transport for TonicTransport {
    fn ping(&self, to: &Member, deadline: Duration) -> BoxFuture<'_, Result<String, RpcError>> {
        let to = to.clone();
        Box::pin(async move {
            let mut client = self.client(&to)?;
            let mut req = tonic::Request::new(PingRequest {
                header: self.header(),
            });
            req.set_timeout(deadline);
            let reply = self.bounded(&to, deadline, client.ping(req)).await?;
            Ok(reply.node_id)
        })
    }

    fn local(
        &self,
        to: &Member,
        api: LocalApi,
        params: Value,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<LocalAnswer, RpcError>> {
        let to = to.clone();
        Box::pin(async move {
            let mut client = self.client(&to)?;
            let params_json = serde_json::to_vec(&params).map_err(|e| RpcError::Remote {
                node: to.node_id.clone(),
                reason: format!("params do not serialize: {e}"),
            })?;
            let mut req = tonic::Request::new(LocalRequest {
                header: self.header(),
                api: api as i32,
                params_json,
            });
            req.set_timeout(deadline);
            let reply = self.bounded(&to, deadline, client.local(req)).await?;
            let body = serde_json::from_slice(&reply.body_json).map_err(|e| RpcError::Remote {
                node: to.node_id.clone(),
                reason: format!("the answer is not JSON: {e}"),
            })?;
            let status = u16::try_from(reply.status).unwrap_or(500);
            Ok(LocalAnswer { status, body })
        })
    }

    fn shared(
        &self,
        to: &Member,
        call: SharedCall,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<SharedReply, RpcError>> {
        let to = to.clone();
        Box::pin(async move {
            let mut client = self.client(&to)?;
            let mut req = tonic::Request::new(super::shared_wire::request(self.header(), call));
            req.set_timeout(deadline);
            let resp = self.bounded(&to, deadline, client.shared(req)).await?;
            super::shared_wire::reply_of(resp).ok_or_else(|| RpcError::Remote {
                node: to.node_id.clone(),
                reason: "a shared-tier response without a reply".into(),
            })
        })
    }
}
