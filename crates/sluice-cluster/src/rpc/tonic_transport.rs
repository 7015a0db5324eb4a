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

/// How often a connection to a member is pinged (HTTP/2 PING), idle or not, and how long the
/// ping may go unanswered before the connection is closed: a connection that went silent (a
/// partition, a peer's host gone) is found dead within three seconds, and the next call
/// connects anew — failing within [`CONNECT_TIMEOUT`] while the partition lasts, and reaching
/// the member at once when it heals. Without them, every call and probe queued on the dead
/// connection, which recovers only at TCP's next retransmission, an exponential backoff: an
/// outside trial saw the shared tier's breakers close 13 to 51 s after partitions of 40 to
/// 75 s had healed, the cut-off nodes failing open meanwhile. A ping a second each way is
/// nothing to a member; two seconds is many round trips even on a loaded machine. The server
/// pings its callers alike (`service.rs`), so that a connection its caller gave up on is
/// closed at both ends.
pub(crate) const KEEPALIVE_EVERY: Duration = Duration::from_secs(1);
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

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
            .http2_keep_alive_interval(KEEPALIVE_EVERY)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
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
///
/// The code alone does not tell a broken connection from an answer: tonic reports a failure
/// of the connection as a status it makes on this side, under whatever code the layer that
/// saw it picked — `Unavailable` for a refused connect, `Unknown` for a reset or a closed
/// stream, `Cancelled` for a connection that closed with the call queued on it, `Internal`
/// for an HTTP/2 error — and keeps the failure as the status's `source`; a status the callee
/// sent has none. So a status with a source is read by its source ([`transport_failure`]),
/// and only one without is read by its code. `Cancelled` without a source is the callee's
/// own `grpc-timeout` expiring (tonic's server answers that as `Cancelled`): a deadline.
fn status_error(to: &Member, deadline: Duration, s: &tonic::Status) -> RpcError {
    let node = to.node_id.clone();
    let addr = to.transport_addr.to_string();
    match transport_failure(s) {
        Some(TransportFailure::Connect(reason)) => {
            return RpcError::Unreachable { node, addr, reason };
        }
        Some(TransportFailure::Broken(reason)) => {
            return RpcError::Disconnected { node, addr, reason };
        }
        Some(TransportFailure::Timeout) => return RpcError::DeadlineExceeded { node, deadline },
        None => {}
    }
    match s.code() {
        tonic::Code::Unavailable => RpcError::Unreachable {
            node,
            addr,
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

/// What went wrong below gRPC, read from a status's source chain.
#[derive(Debug, PartialEq, Eq)]
enum TransportFailure {
    /// No connection could be made; the cause, e.g. `Connection refused (os error 111)`.
    Connect(String),
    /// The connection broke with the call on it; the cause, e.g. `connection reset`.
    Broken(String),
    /// A timer of tonic's own expired (none is configured here; read as the deadline).
    Timeout,
}

/// The failure of the connection a status was made from on this side, or `None` for a status
/// the callee sent (which has no source). The cause named is the innermost error of the
/// chain: the outer ones are tonic's and hyper's wrappers ("transport error").
fn transport_failure(s: &tonic::Status) -> Option<TransportFailure> {
    let first = std::error::Error::source(s)?;
    let chain = || std::iter::successors(Some(first), |e| e.source());
    let cause = chain().last().map_or_else(String::new, ToString::to_string);
    if chain().any(|e| e.is::<tonic::ConnectError>()) {
        Some(TransportFailure::Connect(cause))
    } else if chain().any(|e| e.is::<tonic::TimeoutExpired>()) {
        Some(TransportFailure::Timeout)
    } else {
        Some(TransportFailure::Broken(cause))
    }
}

/// The longest deadline a call carries on the wire: a year. tonic writes a call's deadline
/// into its `grpc-timeout` header, at most eight digits of a unit (99,999,999 hours), and
/// panics past that ("duration is unrealistically large"); an outside trial's
/// `_wlm/stats?timeout=10000000d` made every fan-out route answer 500 so. A year is past any
/// wait an operator means, and far inside the header; the call itself is still bounded by the
/// whole `deadline` on this node's clock ([`TonicTransport::bounded`]).
const MAX_WIRE_DEADLINE: Duration = Duration::from_secs(365 * 24 * 3600);

/// `deadline` as a call's `grpc-timeout` carries it ([`MAX_WIRE_DEADLINE`]).
fn wire_deadline(deadline: Duration) -> Duration {
    deadline.min(MAX_WIRE_DEADLINE)
}

impl Transport for TonicTransport {
    fn ping(&self, to: &Member, deadline: Duration) -> BoxFuture<'_, Result<String, RpcError>> {
        let to = to.clone();
        Box::pin(async move {
            let mut client = self.client(&to)?;
            let mut req = tonic::Request::new(PingRequest {
                header: self.header(),
            });
            req.set_timeout(wire_deadline(deadline));
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
            req.set_timeout(wire_deadline(deadline));
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
            req.set_timeout(wire_deadline(deadline));
            let resp = self.bounded(&to, deadline, client.shared(req)).await?;
            super::shared_wire::reply_of(resp).ok_or_else(|| RpcError::Remote {
                node: to.node_id.clone(),
                reason: "a shared-tier response without a reply".into(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Notify;

    use super::*;
    use crate::clock::SystemClock;
    use crate::rpc::{LocalHandler, SharedHandler};

    fn member(addr: SocketAddr) -> Member {
        Member {
            node_id: "peer".into(),
            generation: 1,
            name: "peer".into(),
            http_addr: addr,
            transport_addr: addr,
            protocol_version: PROTOCOL_VERSION,
            backend: "embedded".into(),
            version: "test".into(),
            cluster_uuid: "u".into(),
        }
    }

    fn map(s: &tonic::Status) -> RpcError {
        let to = member("127.0.0.1:9300".parse().unwrap());
        status_error(&to, Duration::from_secs(30), s)
    }

    #[test]
    fn test_a_deadline_of_any_length_goes_on_the_wire_without_a_panic() {
        // tonic encodes the deadline when it is set: what it refused panicked the handler.
        for d in [
            Duration::ZERO,
            Duration::from_millis(200),
            MAX_WIRE_DEADLINE,
            Duration::from_secs(10_000_000 * 86_400),
            Duration::from_secs(u64::MAX),
            Duration::MAX,
        ] {
            let mut req = tonic::Request::new(());
            req.set_timeout(wire_deadline(d));
            assert!(req.metadata().get("grpc-timeout").is_some(), "{d:?}");
        }
        assert_eq!(
            wire_deadline(Duration::from_secs(5)),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn test_a_status_made_from_a_broken_connection_says_it_broke_whatever_its_code() {
        // tonic's own reading of a reset: `Unknown`, the io error as the source.
        let reset =
            tonic::Status::from_error(Box::new(io::Error::from(io::ErrorKind::ConnectionReset)));
        assert_eq!(reset.code(), tonic::Code::Unknown);
        let e = map(&reset);
        assert!(matches!(e, RpcError::Disconnected { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "the connection to node [peer] at [127.0.0.1:9300] broke during the call: connection reset"
        );
        // A connection closed with the call queued on it: `Cancelled`, with a source. It used
        // to read as the deadline ("did not answer within [30000ms]").
        let mut closed = tonic::Status::cancelled("operation was canceled");
        closed.set_source(Arc::new(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "connection closed",
        )));
        let e = map(&closed);
        assert!(matches!(e, RpcError::Disconnected { .. }), "{e:?}");
        assert!(e.to_string().ends_with("connection closed"), "{e}");
    }

    #[test]
    fn test_a_refused_connect_names_the_cause() {
        let refused = tonic::Status::from_error(Box::new(tonic::ConnectError(Box::new(
            io::Error::from(io::ErrorKind::ConnectionRefused),
        ))));
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert_eq!(
            map(&refused).to_string(),
            "node [peer] at [127.0.0.1:9300] is unreachable: connection refused"
        );
    }

    #[test]
    fn test_only_a_deadline_reads_as_no_answer_within_the_deadline() {
        // The callee's `grpc-timeout` expiring: tonic's server answers `Cancelled`.
        for s in [
            tonic::Status::cancelled("Timeout expired"),
            tonic::Status::deadline_exceeded("deadline"),
        ] {
            assert_eq!(
                map(&s).to_string(),
                "node [peer] did not answer within [30000ms]",
                "{s:?}"
            );
        }
        // An error the callee answered is its own.
        let e = map(&tonic::Status::internal("boom"));
        assert!(matches!(e, RpcError::Remote { .. }), "{e:?}");
        let e = map(&tonic::Status::unavailable("draining"));
        assert!(matches!(e, RpcError::Unreachable { .. }), "{e:?}");
    }

    /// Hangs every call once it has arrived, after saying so.
    struct Hang(Arc<Notify>);

    impl LocalHandler for Hang {
        fn local(&self, _: LocalApi, _: Value) -> BoxFuture<'static, LocalAnswer> {
            let arrived = self.0.clone();
            Box::pin(async move {
                arrived.notify_one();
                std::future::pending().await
            })
        }
    }

    impl SharedHandler for Hang {
        fn shared(&self, _: &str, _: SharedCall) -> BoxFuture<'static, SharedReply> {
            Box::pin(std::future::pending())
        }
    }

    /// A node serving on a port of its own that hangs every call (`arrived` told when one has
    /// arrived); its address.
    async fn hanging_node(arrived: Arc<Notify>) -> SocketAddr {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let hang = Arc::new(Hang(arrived));
        tokio::spawn(super::super::service::serve(
            server,
            "peer".into(),
            hang.clone(),
            hang,
            std::future::pending(),
        ));
        addr
    }

    /// A node that hangs every call, behind a one-connection TCP relay that drops both sides
    /// once a call has arrived — with a reset when `reset`, else closed — and the address to
    /// call.
    async fn node_whose_connection_breaks_mid_call(reset: bool) -> SocketAddr {
        let arrived = Arc::new(Notify::new());
        let server_addr = hanging_node(arrived.clone()).await;
        let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_addr = relay.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut client, _) = relay.accept().await.unwrap();
            let mut node = TcpStream::connect(server_addr).await.unwrap();
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut node) => {}
                () = arrived.notified() => {}
            }
            if reset {
                // SO_LINGER 0: close sends RST, not FIN (and does not block, which is why
                // tokio deprecates the call for other values).
                #[allow(deprecated)]
                client.set_linger(Some(Duration::ZERO)).unwrap();
            }
        });
        relay_addr
    }

    #[tokio::test]
    async fn test_a_connection_reset_or_closed_mid_call_is_reported_as_broken_not_as_a_timeout() {
        let transport = TonicTransport::new("me".into(), Arc::new(SystemClock::new()));
        for reset in [true, false] {
            let addr = node_whose_connection_breaks_mid_call(reset).await;
            let e = transport
                .local(
                    &member(addr),
                    LocalApi::WlmStats,
                    Value::Null,
                    Duration::from_secs(30),
                )
                .await
                .unwrap_err();
            assert!(
                matches!(e, RpcError::Disconnected { .. }),
                "reset {reset}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("the connection to node [peer] at [{addr}] broke")),
                "{text}"
            );
            assert!(
                !text.ends_with("transport error"),
                "the cause is named: {text}"
            );
        }
    }

    /// A relay to `server` that forwards both ways until `stalled` says true, then drops what
    /// either side sends (the connection goes silent, as in a partition) while keeping it
    /// open; `closed` is told when a client closes its side.
    async fn stalling_relay(
        server: SocketAddr,
        stalled: tokio::sync::watch::Receiver<bool>,
        closed: Arc<Notify>,
    ) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = relay.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((client, _)) = relay.accept().await {
                let node = TcpStream::connect(server).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut nr, mut nw) = node.into_split();
                let (up_stalled, down_stalled) = (stalled.clone(), stalled.clone());
                let closed = closed.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return closed.notify_one(),
                            Ok(n) if !*up_stalled.borrow() => {
                                if nw.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match nr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) if !*down_stalled.borrow() => {
                                if cw.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn test_a_connection_gone_silent_is_dropped_and_the_next_call_connects_anew() {
        let server_addr = hanging_node(Arc::new(Notify::new())).await;
        let (stall, stalled) = tokio::sync::watch::channel(false);
        let closed = Arc::new(Notify::new());
        let peer = member(stalling_relay(server_addr, stalled, closed.clone()).await);
        let transport = TonicTransport::new("me".into(), Arc::new(SystemClock::new()));
        transport
            .ping(&peer, Duration::from_secs(5))
            .await
            .expect("a ping through the relay");
        // The connection goes silent: its unanswered keepalive pings close it.
        stall.send(true).unwrap();
        tokio::time::timeout(
            KEEPALIVE_EVERY + KEEPALIVE_TIMEOUT + Duration::from_secs(5),
            closed.notified(),
        )
        .await
        .expect("the silent connection was closed");
        // Healed: the next call connects anew and is answered.
        stall.send(false).unwrap();
        transport
            .ping(&peer, Duration::from_secs(5))
            .await
            .expect("a ping on a new connection");
    }

    /// Counts the acquires that reach it and grants each.
    struct Grants(Arc<std::sync::atomic::AtomicUsize>);

    impl LocalHandler for Grants {
        fn local(&self, _: LocalApi, _: Value) -> BoxFuture<'static, LocalAnswer> {
            Box::pin(std::future::pending())
        }
    }

    impl SharedHandler for Grants {
        fn shared(&self, _: &str, call: SharedCall) -> BoxFuture<'static, SharedReply> {
            let reply = match call {
                SharedCall::Acquire { .. } => {
                    let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    SharedReply::Granted {
                        lease: n as u64 + 1,
                        ttl: Duration::from_secs(30),
                        extra: Vec::new(),
                    }
                }
                _ => SharedReply::Renewed { lost: Vec::new() },
            };
            Box::pin(async move { reply })
        }
    }

    /// A relay to `server` that forwards both ways until `stalled` says true; then, until it
    /// says false again, it drops what the server sends and holds what the client sends, and
    /// delivers that afterwards — also once the client has closed its side, as a kernel goes
    /// on retransmitting the unacknowledged bytes of a socket its process closed, and delivers
    /// them when a partition heals. `server_closed` is told when the server closes its side,
    /// `delivered` when every held byte was written to the server (or a write failed) after
    /// the client closed its side.
    async fn holding_relay(
        server: SocketAddr,
        stalled: tokio::sync::watch::Receiver<bool>,
        server_closed: Arc<Notify>,
        delivered: Arc<Notify>,
    ) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = relay.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((client, _)) = relay.accept().await {
                let node = TcpStream::connect(server).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut nr, mut nw) = node.into_split();
                let (held, mut to_deliver) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n @ 1..) = cr.read(&mut buf).await {
                        if held.send(buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                });
                let (mut link, delivered) = (stalled.clone(), delivered.clone());
                tokio::spawn(async move {
                    while let Some(bytes) = to_deliver.recv().await {
                        while *link.borrow_and_update() {
                            if link.changed().await.is_err() {
                                return;
                            }
                        }
                        if nw.write_all(&bytes).await.is_err() {
                            return delivered.notify_one();
                        }
                    }
                    delivered.notify_one();
                    // The server's side stays open: the bytes, not a close, are what it sees.
                    let _open = nw;
                    std::future::pending::<()>().await;
                });
                let (down_stalled, closed) = (stalled.clone(), server_closed.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match nr.read(&mut buf).await {
                            Ok(0) | Err(_) => return closed.notify_one(),
                            Ok(n) if !*down_stalled.borrow() => {
                                let _ = cw.write_all(&buf[..n]).await;
                            }
                            Ok(_) => {}
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn test_a_call_whose_caller_gave_up_on_a_silent_connection_is_not_served_when_it_arrives_late()
     {
        // Trial 105: a coordinator's acquire sent into a partition; its connection, silent, is
        // closed by the caller's keepalive (the call fails); the kernel still holds the bytes
        // and delivers them once the link is up again, to an owner that then granted a lease
        // nobody would ever renew or release.
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server_addr = server.local_addr().unwrap();
        let acquires = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let grants = Arc::new(Grants(acquires.clone()));
        tokio::spawn(super::super::service::serve(
            server,
            "peer".into(),
            grants.clone(),
            grants,
            std::future::pending(),
        ));
        let (stall, stalled) = tokio::sync::watch::channel(false);
        let (server_closed, delivered) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let peer = member(
            holding_relay(
                server_addr,
                stalled,
                server_closed.clone(),
                delivered.clone(),
            )
            .await,
        );
        let transport = TonicTransport::new("me".into(), Arc::new(SystemClock::new()));
        transport
            .ping(&peer, Duration::from_secs(5))
            .await
            .expect("a ping through the relay");
        // The link goes down; an acquire goes out on the connection and waits, unanswered,
        // until the caller's keepalive gives the connection up.
        stall.send(true).unwrap();
        let call = SharedCall::Acquire {
            bucket: "b".into(),
            limit: 4,
            wants_queue: false,
            extra: 0,
        };
        let e = transport
            .shared(&peer, call, Duration::from_secs(16 * 60))
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Disconnected { .. }), "{e:?}");
        // The server's side of the silent connection goes too, within its own keepalive (it
        // stayed open before the server pinged its callers, and served the late bytes).
        tokio::time::timeout(
            KEEPALIVE_EVERY + KEEPALIVE_TIMEOUT + Duration::from_secs(3),
            server_closed.notified(),
        )
        .await
        .expect("the server closes a connection gone silent");
        // The link is up: the held bytes arrive, at a closed socket. Nobody waits for their
        // answer any more.
        stall.send(false).unwrap();
        delivered.notified().await;
        assert_eq!(
            acquires.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "an acquire its caller gave up on was served when it arrived late"
        );
    }

    #[tokio::test]
    async fn test_a_refused_connection_is_unreachable_and_a_hung_node_a_deadline() {
        let transport = TonicTransport::new("me".into(), Arc::new(SystemClock::new()));
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let e = transport
            .local(
                &member(addr),
                LocalApi::WlmStats,
                Value::Null,
                Duration::from_secs(30),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Unreachable { .. }), "{e:?}");
        assert!(e.to_string().to_lowercase().contains("refused"), "{e}");

        let addr = hanging_node(Arc::new(Notify::new())).await;
        let e = transport
            .local(
                &member(addr),
                LocalApi::WlmStats,
                Value::Null,
                Duration::from_millis(200),
            )
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "node [peer] did not answer within [200ms]");
    }
}
