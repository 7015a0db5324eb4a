//! The node's accept loop: each connection is served by hyper (HTTP/1.1, and HTTP/2 with prior
//! knowledge) in a task of its own, the peer's address in every request's extensions as
//! axum's `ConnectInfo`, and the connection's future wrapped in [`Repoll`] so that hyper's
//! handing of a request body between its dispatcher and the handler, both in that task, does
//! not send the task through the scheduler and wake another worker for every request (see
//! `sluice_core::repoll`). This is what `axum::serve` does, but for that wrapper, and for
//! [`crate::http::leaving`]: a client that leaves ends its request at once, even with requests
//! pipelined behind it; and for [`crate::http::heads`]: hyper reads an HTTP/1 connection's
//! request heads as OpenSearch would have them read (a target sent unencoded served, a head
//! too long refused in OpenSearch's words).
//!
//! A gateway with a fast lane (`lane`) reads each connection in [`crate::http::lane`] first,
//! which hands it to hyper as above unless the request is one it takes; those connections are
//! served on the lane's own threads ([`crate::http::threads`]), one per worker of the node's
//! runtime.
//!
//! Shutdown is graceful, within a bound: once `shutdown` completes the listener closes,
//! connections with no request in flight close (idle, or holding part of a head), and the
//! loop returns when the requests in flight have been answered — or once `http.shutdown_grace`
//! has passed, when every connection still open is closed, its request dropped (and so
//! cancelled, as when its client leaves). Without the bound, one client stalled in the middle
//! of a body kept a stopping node running until it was killed, cutting every answer.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use sluice_core::repoll::Repoll;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::http::heads::{Heads, Refusals};
use crate::http::leaving::{StopOnLeave, Watched};
use crate::http::read_timeout::{self, ReadClock};
use crate::http::threads::{Job, Threads};
use crate::server::HttpService;
use crate::state::AppState;

/// How long the loop waits after an accept error that is not about one connection (out of
/// file descriptors, out of memory) before accepting again: retrying at once would spin on
/// the same error; a second lets connections close. `axum::serve` waits the same.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `shutdown` completes, then drains (see the module
/// documentation); a connection that reads nothing for `read_timeout` is closed
/// ([`crate::http::read_timeout`]).
pub async fn serve(
    listener: TcpListener,
    app: HttpService,
    lane: Option<Arc<AppState>>,
    read_timeout: Option<Duration>,
    grace: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    // Cancelled once the grace after `shutdown` has passed: every connection still open ends.
    let closing = CancellationToken::new();
    // Tells the lane's connections the node is shutting down; closed once all have ended.
    let (lane_shutdown, lane_watch) = tokio::sync::watch::channel(());
    let builder = auto::Builder::new(TokioExecutor::new());
    let threads = lane.as_ref().and_then(|_| {
        let count = tokio::runtime::Handle::current().metrics().num_workers();
        match Threads::start(count, "sluice-lane", crate::http::lane::serve_connection) {
            Ok(threads) => Some(threads),
            Err(e) => {
                // The lane still works on the node's runtime, at a higher cost a request.
                tracing::error!(error = %e, "cannot start the fast lane's threads");
                None
            }
        }
    });
    // Resolved by the lane's first requests, for every connection after them.
    let lane_series = Arc::new(crate::http::lane::LaneSeries::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Answers go out as soon as they are written, as nginx's `tcp_nodelay on` does: a
        // response's last segment must not wait for the client's delayed ACK.
        let _ = stream.set_nodelay(true);
        let clock = ReadClock::start(read_timeout);
        if let Some(st) = &lane {
            let conn = crate::http::lane::Conn {
                st: st.clone(),
                app: app.clone(),
                watcher: graceful.watcher(),
                shutdown: lane_watch.clone(),
                closing: closing.clone(),
                clock,
                series: lane_series.clone(),
            };
            match &threads {
                Some(threads) => match stream.into_std() {
                    Ok(stream) => threads.serve(Job { stream, peer, conn }),
                    Err(e) => tracing::debug!(%peer, error = %e, "connection lost at accept"),
                },
                None => {
                    tokio::spawn(Repoll::new(crate::http::lane::serve_connection(
                        0, stream, peer, conn,
                    )));
                }
            }
            continue;
        }
        // A client that leaves ends its request even with requests pipelined behind it.
        let io = Watched::new(stream, clock.clone());
        let leaving = io.leaving();
        // hyper reads the heads as OpenSearch would have them read.
        let refusals = Arc::new(Refusals::default());
        let io = Heads::new(io, refusals.clone());
        let service = StopOnLeave::new(for_peer(app.clone(), peer, refusals), leaving.clone());
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service))
            .into_owned();
        // Boxed apart: moved into the task's future and pinned there, it would take its room
        // twice (the block's captured value beside its pinned copy, `crate::http::closing`).
        let conn = Box::pin(graceful.watch(conn));
        let closing = closing.clone();
        tokio::spawn(Repoll::new(async move {
            {
                // Each layer pinned here, borrowed by the next (`crate::http::closing`); the
                // box moved in, to be dropped at the end of this block.
                let mut conn = conn;
                let conn = conn.as_mut();
                let served = std::pin::pin!(async {
                    // Until the shutdown's grace is over.
                    if let Some(Err(e)) = crate::http::closing::until_closed(conn, &closing).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
                read_timeout::run(clock.as_deref(), peer, served).await;
                // Dropped here, before the linger: dropping the connection's future cancels
                // its request in flight, as its client leaving does.
            }
            // An answer given before its body was read still reaches the client (G4); the
            // node's shutdown does not wait for this.
            leaving.linger().await;
        }));
    }
    // The lane's connections are told before the listener closes, so that whoever sees new
    // connections refused knows every lane connection's next answer is its last (L4): told
    // after, an answer could go out between the two without `Connection: close`, and a
    // request pipelined behind it be served (a test saw it once in eight runs).
    drop(lane_watch);
    let _ = lane_shutdown.send(());
    drop(listener);
    let drained = async move {
        tokio::join!(lane_shutdown.closed(), graceful.shutdown());
    };
    tokio::pin!(drained);
    tokio::select! {
        () = &mut drained => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!(?grace, "closing the connections whose requests are still in flight");
            closing.cancel();
            drained.await;
        }
    }
    // Every lane connection has ended: the threads can (T3).
    if let Some(threads) = threads {
        let _ = tokio::task::spawn_blocking(move || threads.join()).await;
    }
    Ok(())
}

/// [`for_peer`]'s service: the node's, its requests mapped by `Req` and its answers by `Resp`.
pub(crate) type ForPeer<Req, Resp> =
    tower::util::MapResponse<tower::util::MapRequest<HttpService, Req>, Resp>;

/// The node's service for one connection from `peer`, of whose heads `refusals` tells
/// ([`crate::http::heads`]): hyper's requests with the peer's address in their extensions, as
/// axum's `ConnectInfo`, the request standing for a refused head with why, and a request whose
/// head had more lines than hyper reads with those hyper was not given; an answer given once a
/// body's framing was lost says `Connection: close`, as hyper closes the connection after it.
pub(crate) fn for_peer(
    app: HttpService,
    peer: SocketAddr,
    refusals: Arc<Refusals>,
) -> ForPeer<
    impl FnMut(http::Request<hyper::body::Incoming>) -> axum::extract::Request + Clone,
    impl FnOnce(axum::response::Response) -> axum::response::Response + Clone,
> {
    let lost = refusals.clone();
    app.map_request(move |req: http::Request<hyper::body::Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
        let told = refusals.next();
        if let Some(refused) = told.refused {
            req.extensions_mut().insert(refused);
        }
        if let Some(lines) = told.lines {
            // hyper's lines were given it first, in order, and name none of these.
            let headers = req.headers_mut();
            for (name, value) in &lines {
                headers.append(name.clone(), value.clone());
            }
        }
        req
    })
    .map_response(move |mut resp: axum::response::Response| {
        if lost.framing_lost() {
            resp.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        resp
    })
}

/// Whether an accept error concerns only the connection being accepted (the next accept may
/// well succeed at once).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
