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
use super::{LocalHandler, SharedHandler};
use crate::PROTOCOL_VERSION;

/// The prefix of a version-mismatch status message; the client reads the peer's version
/// after it (see [`parse_version_mismatch`]).
const VERSION_MISMATCH: &str = "protocol version mismatch: this node speaks ";

/// Serves the node's RPC on `listener` until `shutdown` completes.
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
