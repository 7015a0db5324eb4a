//! The RPC server: answers other nodes' calls with this node's [`LocalHandler`].

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use super::proto::node_server::{Node, NodeServer};
use super::proto::{
    Header, LocalApi, LocalReply, LocalRequest, PingReply, PingRequest, SharedRequest,
    SharedResponse,
};
use super::tonic_transport::{KEEPALIVE_EVERY, KEEPALIVE_TIMEOUT};
use super::{LocalHandler, SharedHandler};
use crate::PROTOCOL_VERSION;

/// The prefix of a version-mismatch status message; the client reads the peer's version
/// after it (see [`parse_version_mismatch`]).
const VERSION_MISMATCH: &str = "protocol version mismatch: this node speaks ";

/// Serves the node's RPC on `listener` until `shutdown` completes.
///
/// Each connection is pinged as the callers ping theirs (HTTP/2 PING every
/// [`KEEPALIVE_EVERY`], closed when one goes unanswered for [`KEEPALIVE_TIMEOUT`]), so a
/// connection gone silent is closed here as the caller closes it, within three seconds. A
/// call sent into a partition is held in its caller's socket, whose kernel goes on
/// retransmitting it after the caller gave the connection up — its call failed, and nothing
/// listens for the answer — for up to about 100 s (Linux retries an orphaned socket's data
/// eight times, an exponential backoff from 200 ms). Its bytes used to reach this node when
/// the link came back, on its end of the connection, still open, and were served in full (a
/// call's `grpc-timeout` counts from its arrival): an owner granted leases nobody held, each
/// counted until its TTL. That is the likeliest reading of an outside trial (105): a cut-off
/// owner on a two-way flapping link counted 3, then 4, of its peers' leases of a
/// `shared_limit` of 4 from ups some 50 s after the first cuts, and admitted nothing for 34 s
/// (ARCHITECTURE.md, S11). Closed here, the late bytes are refused (the kernel resets a closed
/// socket's connection on data). A connection that survives (a cut shorter than the
/// keepalive) still delivers late calls to callers that still listen (K14 of the coordinator).
/// Tested by `test_a_call_whose_caller_gave_up_on_a_silent_connection_is_not_served_when_it_arrives_late`.
pub async fn serve(
    listener: TcpListener,
    node_id: String,
    handler: Arc<dyn LocalHandler>,
    shared: Arc<dyn SharedHandler>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let service = NodeService {
        node_id,
        handler,
        shared,
    };
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_EVERY))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(NodeServer::new(service))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
}

struct NodeService {
    node_id: String,
    handler: Arc<dyn LocalHandler>,
    shared: Arc<dyn SharedHandler>,
}

/// Refuses a call whose header is missing or of another protocol version.
fn check_header(header: Option<&Header>) -> Result<(), Status> {
    let Some(h) = header else {
        return Err(Status::invalid_argument("the request has no header"));
    };
    if h.protocol_version != PROTOCOL_VERSION {
        return Err(Status::failed_precondition(format!(
            "{VERSION_MISMATCH}{PROTOCOL_VERSION}, the caller [{}] {}",
            h.from_node, h.protocol_version
        )));
    }
    Ok(())
}

/// The version a peer said it speaks in a version-mismatch status, if `message` is one.
pub(crate) fn parse_version_mismatch(message: &str) -> Option<u32> {
    let rest = message.strip_prefix(VERSION_MISMATCH)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn ping(&self, request: Request<PingRequest>) -> Result<Response<PingReply>, Status> {
        check_header(request.get_ref().header.as_ref())?;
        Ok(Response::new(PingReply {
            node_id: self.node_id.clone(),
            protocol_version: PROTOCOL_VERSION,
        }))
    }

    async fn local(&self, request: Request<LocalRequest>) -> Result<Response<LocalReply>, Status> {
        let req = request.into_inner();
        check_header(req.header.as_ref())?;
        let api = LocalApi::try_from(req.api)
            .ok()
            .filter(|a| *a != LocalApi::Unspecified)
            .ok_or_else(|| Status::invalid_argument(format!("unknown local api [{}]", req.api)))?;
        let params = if req.params_json.is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_slice(&req.params_json)
                .map_err(|e| Status::invalid_argument(format!("params are not JSON: {e}")))?
        };
        let answer = self.handler.local(api, params).await;
        let body_json = serde_json::to_vec(&answer.body)
            .map_err(|e| Status::internal(format!("the answer does not serialize: {e}")))?;
        Ok(Response::new(LocalReply {
            status: u32::from(answer.status),
            body_json,
        }))
    }

    async fn shared(
        &self,
        request: Request<SharedRequest>,
    ) -> Result<Response<SharedResponse>, Status> {
        let req = request.into_inner();
        check_header(req.header.as_ref())?;
        let from = req
            .header
            .as_ref()
            .map(|h| h.from_node.clone())
            .unwrap_or_default();
        let call = super::shared_wire::call_of(req)
            .ok_or_else(|| Status::invalid_argument("a shared-tier request without a call"))?;
        let reply = self.shared.shared(&from, call).await;
        Ok(Response::new(super::shared_wire::response(reply)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_version_mismatch_messages_carry_the_peer_version() {
        let status = check_header(Some(&Header {
            protocol_version: PROTOCOL_VERSION + 1,
            from_node: "n2".into(),
        }))
        .unwrap_err();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            parse_version_mismatch(status.message()),
            Some(PROTOCOL_VERSION)
        );
        assert_eq!(parse_version_mismatch("something else"), None);
        assert!(check_header(None).is_err());
    }
}
