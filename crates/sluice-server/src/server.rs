//! Starting and stopping a node: bind, serve, refresh periodically, shut down cleanly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use sluice_engine::Engine;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::decompression::RequestDecompressionLayer;

use crate::api;
use crate::config::Config;
use crate::http::BodyLimit;
use crate::pool::SearchPool;
use crate::state::{AppState, NodeIdentity};
use crate::tasks::TaskManager;

/// How often the refresher looks for indices due a refresh; well under the 1 s default
/// `refresh_interval` so a refresh is late by at most this much.
const REFRESH_TICK: Duration = Duration::from_millis(100);

/// How often the throttle queues' backstop sweep re-attempts admission for buckets with free
/// capacity and waiters (seed 002: "about once a second"; a release drains its own bucket at
/// once, so this bounds only what nothing else would drive).
const QUEUE_SWEEP: Duration = Duration::from_secs(1);

/// How many connections the kernel holds for the HTTP listener before the accept loop takes
/// them (the kernel caps it at `net.core.somaxconn`, 4096 by default). A burst of new
/// connections — clients without keep-alive, a load balancer reconnecting — otherwise
/// overflows tokio's default of 1,024: the kernel drops the handshakes past it and each
/// client waits a SYN retransmission (1 s, then 3, 7 …). A burst of 3,000 connections
/// overflowed it 8,700 times (`nstat TcpExtListenOverflows` around
/// `queue_stress::test_burst_of_3000_parks_drains_in_fifo_order_and_leaves_nothing_behind`).
const LISTEN_BACKLOG: u32 = 4096;

/// Binds the HTTP listener on `addr` with [`LISTEN_BACKLOG`] (address reuse on, as
/// `TcpListener::bind` sets it, so a restarted node binds its port at once).
fn bind_http(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A started node, before it serves.
pub struct Node {
    /// The bound listener.
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    /// The metastore change counters the loaded view reflects; the watcher starts from them.
    applied_changes: sluice_meta::Changes,
    /// Asked by the node itself when it must not go on (`cluster/twins.rs`).
    stop: Arc<StopRequest>,
}

/// A node's own request to stop, for a conflict it cannot serve through (another running node
/// with its id): [`Node::serve`] then ends as on a shutdown signal and answers the reason as
/// its error, so the process exits with a failure status and the reason.
#[derive(Debug, Default)]
pub struct StopRequest {
    reason: parking_lot::Mutex<Option<String>>,
    asked: tokio::sync::Notify,
}

impl StopRequest {
    /// Asks the node to stop for `reason` (the first reason asked is kept).
    pub fn request(&self, reason: String) {
        self.reason.lock().get_or_insert(reason);
        // A stored permit: `asked` completes even when nobody waits yet.
        self.asked.notify_one();
    }

    /// Completes once a stop is asked.
    async fn asked(&self) {
        self.asked.notified().await;
    }

    /// Why the node was asked to stop, if it was.
    fn reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }
}

/// What [`Node::serve`] started beside its listener, ended when `serve`'s future is dropped
/// before it returns: the loops that stop when told are told (the work they handed a blocking
/// thread finishes first), the other tasks aborted. On `serve`'s own way out each has ended
/// already, and this does nothing.
struct Background {
    _loops: tokio_util::sync::DropGuard,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Node {
    /// Opens the data folder and binds the HTTP port.
    pub async fn start(config: Config) -> anyhow::Result<Node> {
        std::fs::create_dir_all(&config.data_path).map_err(|e| {
            anyhow::anyhow!(
                "cannot create path.data [{}]: {e}",
                config.data_path.display()
            )
        })?;
        let mut identity = NodeIdentity::load_or_create(&config.data_path)?;
        let metastore = config.metastore.open().await.map_err(|e| {
            anyhow::anyhow!(
                "cannot open the metastore [{}] ({}): {e}",
                config.metastore,
                crate::config::keys::METASTORE_URI
            )
        })?;
        tracing::info!(metastore = %config.metastore, kind = %metastore.kind(), "metastore open");
        let metastore_status = Arc::new(crate::catalog::sync::MetastoreStatus::new(
            metastore.kind(),
            config.metastore.to_string(),
        ));
        // Every read and write reports to the status, so `_cluster/health` follows them.
        let metastore: Arc<dyn sluice_meta::MetaStore> = Arc::new(
            crate::catalog::sync::ObservedStore::new(metastore, metastore_status.clone()),
        );
        // Every node of a cluster reports the metastore's uuid; the one in node.json is only
        // this node's proposal for a metastore that has none yet.
        identity.cluster_uuid = crate::cluster::uuid::load_or_init(
            metastore.as_ref(),
            &identity.cluster_uuid,
            &config.cluster_name,
            crate::cluster::uuid::is_shared(metastore.as_ref()),
        )
        .await
        .map_err(|e| anyhow::anyhow!(e.describe(&config.cluster_name, &config.metastore)))?;
        // Read before the view is loaded, so a change landing meanwhile is reloaded later.
        let applied_changes = metastore.changes().await.map_err(|e| {
            anyhow::anyhow!("cannot read the metastore [{}]: {e}", config.metastore)
        })?;
        let cluster_settings = Arc::new(
            crate::settings::ClusterSettings::load_on(
                metastore.clone(),
                config.cluster_defaults.clone(),
            )
            .await?,
        );
        let data = config.data_path.clone();
        let engine = Arc::new(tokio::task::spawn_blocking(move || Engine::open(&data)).await??);
        let addr = SocketAddr::new(config.http_host, config.http_port);
        let listener = bind_http(addr)
            .map_err(|e| anyhow::anyhow!("cannot bind http.host:http.port [{addr}]: {e}"))?;
        let stop = Arc::new(StopRequest::default());
        let http_bound_addr = listener.local_addr()?;
        let cluster = crate::cluster::join(
            &config,
            crate::cluster::NodeFacts {
                node_id: &identity.node_id,
                cluster_uuid: &identity.cluster_uuid,
                http_addr: crate::cluster::publish::publish_addr(
                    http_bound_addr,
                    config.http_publish_host,
                    config.http_publish_port,
                ),
                backend: match &config.backend {
                    crate::backend::upstream::config::BackendConfig::Embedded => "embedded",
                    crate::backend::upstream::config::BackendConfig::Upstream(_) => "upstream",
                },
            },
            &metastore,
            stop.clone(),
        )
        .await?;
        let search_pool = Arc::new(SearchPool::new(
            "search",
            config.search_pool_size,
            config.search_pool_queue_size,
        ));
        let tasks = Arc::new(TaskManager::new(&identity.node_id));
        let auth = Arc::new(crate::auth::Authenticator::new(config.auth.clone())?);
        let authz = Arc::new(crate::auth::Authz::load(&config.auth)?);
        let auth_enabled = config.auth.mode != crate::auth::AuthMode::None;
        let workload = Arc::new(crate::workload::Workload::new(auth_enabled));
        crate::catalog::reload(&workload, metastore.as_ref())
            .await
            .map_err(|e| anyhow::anyhow!("cannot load the workload groups and rules: {e:?}"))?;
        let memory_budget = config
            .memory_budget
            .resolve(crate::node_usage::detect_memory_bytes());
        let enforcement = crate::enforcement::Enforcement::new(memory_budget);
        tracing::info!(
            cores = enforcement.capacity().cores,
            memory_budget_bytes = memory_budget,
            "workload usage is measured as a fraction of this node's cores and memory budget"
        );
        let upstream = match &config.backend {
            crate::backend::upstream::config::BackendConfig::Embedded => None,
            crate::backend::upstream::config::BackendConfig::Upstream(u) => {
                let capacity = enforcement.capacity();
                let up = crate::backend::upstream::start(
                    u,
                    &config.auth,
                    &identity.node_id,
                    capacity,
                    &config.data_path,
                );
                Some(Arc::new(up.await?))
            }
        };
        let state = Arc::new(AppState {
            http_bound_addr,
            metastore_status,
            upstream,
            enforcement,
            workload,
            auth,
            authz,
            config,
            identity,
            backend: Arc::new(crate::backend::embedded::EmbeddedBackend::new(
                engine.clone(),
                search_pool.clone(),
            )),
            engine,
            search_pool,
            tasks,
            cluster,
            metastore,
            cluster_settings,
            metrics: crate::metrics::NodeMetrics::new(),
            decisions: crate::logging::DecisionLog::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        let sink = Arc::new(crate::admission::shared::OfferToQueue {
            state: Arc::downgrade(&state),
        });
        state.cluster.shared().coordinator.set_sink(sink.clone());
        state.cluster.shared().owner.set_events(sink);
        state
            .cluster
            .serve(Arc::new(crate::cluster::local::NodeRpc::new(&state)));
        crate::cluster::upstream_identity::watch(&state);
        Ok(Node {
            listener,
            state,
            applied_changes,
            stop,
        })
    }

    /// The node's shared state (for embedding and tests).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// The address the node listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then drains requests and commits every index.
    ///
    /// # Cancel safety
    /// Dropping the future stops the node without its drain or last commit (what a crash
    /// leaves, which the translogs replay): the background tasks it started end with it
    /// ([`Background`]), and connections end as their clients close them.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let addr = self.local_addr()?;
        tracing::info!(
            node = %self.state.config.node_name,
            cluster = %self.state.config.cluster_name,
            publish_address = %self.state.cluster.me().http_addr,
            "listening on http://{addr}"
        );
        let app = app(self.state.clone());
        let engine = self.state.engine.clone();
        // The loops that hand work to blocking threads stop when told, after that work, not by
        // an abort: a refresh or enforcement pass left running would hold the node's state,
        // and its engine's index locks, after `serve` returned, and a node started again at
        // once on the same data (as a test restarts one) could fail to open its index.
        let stop_loops = tokio_util::sync::CancellationToken::new();
        // Not on a gateway: its embedded engine holds no index (every index API is the
        // upstream's), and each tick handed a blocking thread nothing to do, ten times a
        // second (BENCHMARKS.md "Runs of other requests").
        let refresher = self.state.upstream.is_none().then(|| {
            let stop = stop_loops.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(REFRESH_TICK);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = stop.cancelled() => return,
                    }
                    let e = engine.clone();
                    let _ = tokio::task::spawn_blocking(move || e.refresh_due()).await;
                }
            })
        });
        let enforcement = tokio::spawn(crate::enforcement::run_loop(
            self.state.clone(),
            stop_loops.clone(),
        ));
        let usage_poll = self
            .state
            .upstream
            .clone()
            .map(|up| tokio::spawn(up.poll_usage(self.state.clone())));
        // The queues' backstop: a release already hands its slot to the bucket's oldest
        // waiter, so this only catches what nothing else drives (seed 002).
        // The shared tier's backstop too: orphaned leases back, parked buckets asked again.
        // It runs at once when the ring changes too: requests parked here had registered
        // with their buckets' owners, and a bucket the ring moved has an owner that knows no
        // waiter of this node's (an outside trial's backlog, parked when its owner died,
        // otherwise drained at one request a sweep); and when an owner stops answering or
        // answers again (its breaker, K16 of the coordinator): its buckets' parked requests
        // fail open at once, within the allowance, or register with it again.
        let state = self.state.clone();
        let sweep = tokio::spawn(async move {
            let mut tick = tokio::time::interval(QUEUE_SWEEP);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let coordinator = state.cluster.shared().coordinator.clone();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = coordinator.owners_changed() => {}
                }
                state.workload.permits.drain_all();
                crate::admission::shared::sweep(&state).await;
            }
        });
        // What the decision lines of a flood left out, written once it stops
        // (`logging::decisions` L2).
        let state = self.state.clone();
        let left_out = tokio::spawn(async move {
            let mut tick = tokio::time::interval(crate::logging::decisions::FLUSH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                state.decisions.flush();
            }
        });
        // Changes other nodes make to a shared metastore, and the metastore's reachability.
        let watcher = tokio::spawn(crate::catalog::sync::run(
            self.state.clone(),
            self.applied_changes,
        ));
        // Should `serve` be dropped before it returns (its caller cancelled it, as a test
        // drops its node), what it started ends with it instead of running on with the node's
        // state: a dropped node's refresher once kept committing, ten times a second, into a
        // data folder its test had deleted, for the rest of the process.
        let _background = Background {
            _loops: stop_loops.clone().drop_guard(),
            tasks: [&sweep, &left_out, &watcher]
                .into_iter()
                .chain(usage_poll.as_ref())
                .map(tokio::task::JoinHandle::abort_handle)
                .collect(),
        };
        // A gateway with a fast lane reads its connections there first.
        let lane = self
            .state
            .upstream
            .as_ref()
            .is_some_and(|up| up.lane.is_some())
            .then(|| self.state.clone());
        // Once asked to stop, every request waiting for admission is answered at once and never
        // runs (`admission::queue` S1): the parked ones woken by the release of their queues,
        // those waiting for their group's share by the change, each then reading `stopping`.
        // The drain then waits only for work, never for a queue (an outside trial's node, asked
        // to stop with requests queued in a paced group, was still draining a minute later),
        // and keeps every limit (running them without a permit, as it once did, let a stopping
        // node's backlog past the cluster-wide `shared_limit`).
        let state = self.state.clone();
        let stop = self.stop.clone();
        let shutdown = async move {
            tokio::select! {
                () = shutdown => {}
                () = stop.asked() => {}
            }
            state
                .stopping
                .store(true, std::sync::atomic::Ordering::Release);
            state.workload.release_all_queues().await;
        };
        let read_timeout = self.state.config.read_timeout;
        let grace = self.state.config.shutdown_grace;
        crate::http::serve::serve(self.listener, app, lane, read_timeout, grace, shutdown).await?;
        // A gateway's followers of upstream work give their slots back now (their work
        // dropped, not finished: no wait past the drain's bound), while the cluster is still
        // there to take back a shared lease (`upstream/followers.rs` W1).
        if let Some(up) = &self.state.upstream {
            up.stop_following().await;
        }
        // Every background task ended, not only told to: none holds the node's state once
        // this returns.
        stop_loops.cancel();
        if let Some(refresher) = refresher {
            let _ = refresher.await;
        }
        let _ = enforcement.await;
        sweep.abort();
        let _ = sweep.await;
        left_out.abort();
        let _ = left_out.await;
        // Leave the cluster: peers see the node silent and mark it dead.
        self.state.cluster.shutdown().await;
        watcher.abort();
        let _ = watcher.await;
        if let Some(poll) = usage_poll {
            poll.abort();
            let _ = poll.await;
        }
        let engine = self.state.engine.clone();
        tokio::task::spawn_blocking(move || engine.flush_all()).await??;
        tracing::info!("stopped; all indices committed");
        match self.stop.reason() {
            Some(reason) => Err(anyhow::anyhow!(reason)),
            None => Ok(()),
        }
    }
}

/// The node's HTTP service: the API router under its layers (gzip of request bodies, the body
/// limit, then [`request_layers`]: metrics, authentication, authorization, request metadata,
/// the release of the admission ticket; panics caught outside them), and, outside the router
/// so it sees the `Allow` header the router sets on a 405, [`outer_layer`]: the method-name
/// fallback, `?pretty` for error answers, `?format=yaml` and the echo of `X-Opaque-Id`;
/// outermost, the gzip of answers, so that an answer rendered there is compressed as any is. `serve` runs it
/// on the listener; tests may drive it in-process.
///
/// The request's own steps run in one middleware function, not one layer each: every
/// `from_fn` layer clones the whole service stack inside it and boxes a future per request,
/// which with six such layers was a fifth of a proxied search's instructions in gateway mode
/// (ARCHITECTURE.md "Serving connections").
pub fn app(state: Arc<AppState>) -> HttpService {
    let limit = state.config.max_content_length;
    // A gateway answers its own routes and forwards the rest (DESIGN D15).
    let router = match state.upstream {
        Some(_) => crate::backend::upstream::routes::router(state.clone()),
        None => api::router(state.clone()),
    };
    // One `layer` call for the whole stack: axum boxes a route's service at each `layer`,
    // and a request clones every box below the one it enters (ServiceBuilder: first is
    // outermost).
    let outer_state = state.clone();
    let layers = tower::ServiceBuilder::new()
        .layer(CatchPanicLayer::custom(panic_response))
        // The official clients' `compression` option: a gzip request body is inflated
        // before the body limit counts it (so a small bomb still stops at the limit); an
        // encoding it cannot read passes through and fails as the JSON it is not.
        .layer(RequestDecompressionLayer::new().pass_through_unaccepted(true))
        .map_request(|req: axum::http::Request<_>| req.map(axum::body::Body::new))
        .layer(middleware::from_fn_with_state(state, request_layers))
        .layer(axum::extract::DefaultBodyLimit::max(
            usize::try_from(limit).unwrap_or(usize::MAX),
        ));
    let app = router.layer(layers);
    let outer = tower::ServiceBuilder::new()
        // A HEAD answer has no body to compress: compressed, it lost the GET's length (a
        // gateway's then said `content-length: 0`). Without the client's `Accept-Encoding`
        // the compression layer leaves it alone, and the answer is the GET's head.
        .map_request(|mut req: Request| {
            if req.method() == axum::http::Method::HEAD {
                req.headers_mut()
                    .remove(axum::http::header::ACCEPT_ENCODING);
            }
            req
        })
        .map_response(|resp: axum::http::Response<_>| resp.map(axum::body::Body::new))
        // Responses are gzipped when the client sends `Accept-Encoding: gzip`.
        .layer(CompressionLayer::new())
        .layer(middleware::from_fn_with_state(outer_state, outer_layer))
        .service(app);
    tower::util::BoxCloneSyncService::new(outer)
}

/// The steps every routed request goes through before its handler, in order, and the ones
/// its response goes through after it, in reverse:
/// 1. metrics: the request counted and timed once answered, whatever answered it;
/// 2. the body limit put where the handlers' body readers find it, the head checked as
///    OpenSearch's HTTP layer checks it ([`check_head`]: a 400 for a head too long, a 413 for
///    a `Content-Length` over the limit) and the single-valued headers' values
///    ([`crate::http::meta::read_single_valued`]): a 400 ends the request here;
/// 3. authentication: a 401 ends the request here;
/// 4. authorization (inside authentication, outside the handlers: every request, routed or
///    not, a gateway's pass-through included): a 403 ends it here; an admin action is
///    audited once answered;
/// 5. the request's metadata gathered; the warnings raised while handling it added to the
///    response;
/// 6. the admission ticket that rode with the response released once it is built.
///
/// # Cancel safety
/// Dropping the future drops the request, as for any handler; a request whose connection
/// closed before its response is not counted.
async fn request_layers(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let timer = crate::metrics::route::HttpTimer::start(&req, st.upstream.is_some());
    req.extensions_mut()
        .insert(BodyLimit(st.config.max_content_length));
    // Not in `check_lines`, which the gateway's lane runs too: the lane takes heads of at
    // most 16 KB (its `MAX_HEAD`), so its requests never reach either limit, and a longer
    // head or a longer body comes here.
    // A gateway streams the bodies it forwards untouched: the upstream's own limit applies
    // to them, and the gateway's readers refuse a body they read from its head.
    let limit = match st.upstream {
        Some(_) => None,
        None => Some(st.config.max_content_length),
    };
    let checked = match check_head(&req, limit) {
        Some(refused) => Err(refused),
        None => check_request(&st, &mut req).await,
    };
    let resp = match checked {
        Err(refused) => refused,
        Ok((warnings, audited)) => {
            let mut resp = next.run(req).await;
            crate::admission::ticket::release_with_response(&mut resp);
            let product = st.upstream.as_deref().map(|up| &up.product);
            crate::http::meta::add_warnings(&warnings, product, &mut resp);
            if let Some(audited) = audited {
                audited.record(&st, resp.status());
            }
            resp
        }
    };
    timer.record(&st, resp.status());
    resp
}

/// Steps 3 to 5 of [`request_layers`] ([`check_lines`]) for a request of the general path,
/// whose metadata (its principal among it) then rides in its extensions for the handlers'
/// extractors.
/// Answers the sink of the warnings raised while handling it and the audit to record once it
/// is answered, or the refusal to answer.
async fn check_request(
    st: &AppState,
    req: &mut Request,
) -> Result<(crate::http::meta::Warnings, Option<crate::auth::Audited>), Response> {
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let uri = req.uri();
    let route = crate::auth::route::classify(req.method(), uri.path(), uri.query());
    let opaque = crate::http::meta::opaque_ids(req.headers());
    let Checked { meta, audited } = check_lines(
        st,
        req.headers(),
        &opaque,
        peer,
        req.method(),
        uri.path(),
        route,
    )
    .await?;
    let warnings = meta.warnings.clone();
    req.extensions_mut().insert(meta);
    Ok((warnings, audited))
}

/// What [`check_lines`] found of a request it let through.
pub(crate) struct Checked {
    /// The request's metadata, its principal and permissions among it.
    pub meta: crate::http::RequestMeta,
    /// The admin action to write to the audit log once the request is answered.
    pub audited: Option<crate::auth::Audited>,
}

/// Steps 3 to 5 of [`request_layers`], which the gateway's fast lane (`crate::http::lane`)
/// takes too, on a request from `peer` with header lines `headers`, `X-Opaque-Id` values
/// `opaque` (read once, by [`crate::http::meta::opaque_ids`]), `method` and `path`, and `route`
/// its action: a single-valued header (`X-Opaque-Id`, `workloadGroupId`) sent with different
/// values refused (a 400, as OpenSearch's REST layer refuses it before its handlers, whatever
/// the request: [`crate::http::meta::read_single_valued`]), authentication (a 401 ends the request),
/// authorization (a 403 ends it), the request's metadata gathered. Answers what they found, or
/// the refusal to answer.
pub(crate) async fn check_lines(
    st: &AppState,
    headers: &impl crate::http::header_lines::HeaderLines,
    opaque: &[axum::http::HeaderValue],
    peer: Option<std::net::IpAddr>,
    method: &axum::http::Method,
    path: &str,
    route: crate::auth::route::RouteAction<'_>,
) -> Result<Checked, Response> {
    let single = crate::http::meta::read_single_valued(headers, opaque)
        .map_err(IntoResponse::into_response)?;
    let principal = crate::auth::authenticate(&st.auth, headers, peer, path).await?;
    let (permissions, audited) =
        crate::auth::authorize(st, principal.as_ref(), peer, method, path, route)
            .map_err(|refused| crate::error::ApiError::Engine(refused).into_response())?;
    let meta = crate::http::meta::gather(single, principal, permissions, peer);
    Ok(Checked { meta, audited })
}

/// The most a request's headers may weigh, names and values: OpenSearch's default
/// `http.max_header_size`. Past it, a header value is no credential or tag but a way to make
/// every echo and log line of it huge (an outside trial sent a 200 KB group id).
pub const MAX_HEADER_SIZE: usize = 16 * 1024;

/// OpenSearch's refusal of header lines over [`MAX_HEADER_SIZE`], in Netty's words: 400
/// `too_long_http_header_exception`. A gateway answers it too for a head its own lines (the
/// upstream's `Host`, its `X-Opaque-Id`) would push over the limit on the way to its upstream,
/// which would refuse it ([`crate::backend::upstream::client`], the lane's
/// [`crate::backend::upstream::h1`]).
pub(crate) fn headers_too_long() -> sluice_engine::EngineError {
    sluice_engine::EngineError::new(
        sluice_engine::ErrorCode::TooLongHttpHeader,
        format!("HTTP header is larger than {MAX_HEADER_SIZE} bytes."),
    )
}

/// What OpenSearch's HTTP layer (Netty's decoder and aggregator) answers a request it refuses
/// from its head, before anything reads the request, in its words; `None` when it takes it:
/// - a head [`crate::http::heads`] refused: a line over its limit (400
///   `too_long_http_line_exception`), header lines over [`MAX_HEADER_SIZE`] (400
///   `too_long_http_header_exception`), which an HTTP/1 request's headers never reach here,
///   or a body framing that cannot be read (400 `illegal_argument_exception`, in Netty's
///   words, as OpenSearch answers its decoder's failure);
/// - headers over [`MAX_HEADER_SIZE`], names and values (an HTTP/2 request's);
/// - a body announced over `limit` (`http.max_content_length`, on an embedded node, which
///   reads every body it takes; [`crate::http::body::announced_over`]): 413
///   `content_too_long_http_exception`, as the answer to a body over it.
///
/// The answer says `Connection: close`, and hyper closes the connection once it is out
/// rather than read a body, or the rest of a head, it will not take. An expectation Netty does
/// not know ([`expectation_failed`]) is answered before the body limit is looked at, as
/// Netty's aggregator answers it, and leaves the connection open.
fn check_head(req: &Request, limit: Option<u64>) -> Option<Response> {
    use crate::http::heads::{MAX_REQUEST_LINE, Refused};
    use sluice_engine::{EngineError, ErrorCode};
    let too_long_headers = || crate::error::ApiError::Engine(headers_too_long());
    let headers = req.headers();
    let size: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    let refused = match req.extensions().get::<Refused>() {
        Some(Refused::LineTooLong) => crate::error::ApiError::Engine(EngineError::new(
            ErrorCode::TooLongHttpLine,
            format!("An HTTP line is larger than {MAX_REQUEST_LINE} bytes."),
        )),
        Some(Refused::HeadersTooLong) => too_long_headers(),
        Some(Refused::Framing(why)) => {
            crate::error::ApiError::Engine(EngineError::illegal_argument(why.clone()))
        }
        None if size > MAX_HEADER_SIZE => too_long_headers(),
        None if unsupported_expectation(req) => return Some(expectation_failed()),
        None => match limit {
            Some(limit) if crate::http::body::announced_over(headers, limit) => {
                crate::error::ApiError::TooLarge { limit }
            }
            _ => return None,
        },
    };
    let mut resp = refused.into_response();
    // The rest of the request is not read: on HTTP/1 nothing after it is either (HTTP/2 ends
    // the stream alone, and has no `Connection` header).
    if req.version() < axum::http::Version::HTTP_2 {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    Some(resp)
}

/// Whether the request names an expectation other than `100-continue` (RFC 9110 §10.1.1), as
/// Netty's `HttpUtil.isUnsupportedExpectation` reads it: the first `Expect` value of an
/// HTTP/1.1 request, compared without case; HTTP/1.0 has no expectations, and the header is
/// ignored there. hyper answers `100-continue` itself and ignores any other expectation,
/// running the request.
fn unsupported_expectation(req: &Request) -> bool {
    req.version() == axum::http::Version::HTTP_11
        && req
            .headers()
            .get(axum::http::header::EXPECT)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Netty's answer to an expectation it does not know (`HttpObjectAggregator`'s
/// `EXPECTATION_FAILED`, which OpenSearch's HTTP layer sends before any handler sees the
/// request): `417 Expectation Failed` with an empty body; the request is not run, and its
/// body, if the client sends one, is skipped as the connection goes on.
fn expectation_failed() -> Response {
    let mut resp = axum::http::StatusCode::EXPECTATION_FAILED.into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_LENGTH,
        axum::http::HeaderValue::from_static("0"),
    );
    resp
}

/// Outside the router: the URL's `index` parameter moved into the path where OpenSearch
/// reads it as the path's ([`crate::http::url_index`]), a 405 completed the way OpenSearch words it (it needs the `Allow`
/// header the router sets), every error answer sluice built made pretty when the request asks
/// `?pretty` ([`crate::http::pretty`]; one place for all of them: handlers' errors,
/// rejections, 401/403/429, unknown routes, 405s and caught panics), every JSON answer sluice
/// built rendered as YAML when the request asks for it ([`crate::http::format`]), and the
/// request's `X-Opaque-Id` echoed on every response (so errors, rejections and caught panics
/// carry it too), and on a gateway the upstream's product header put on every answer of
/// sluice's own, with an error of its own in the upstream's names
/// ([`crate::backend::upstream::product`] P2, P4).
async fn outer_layer(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    // Before anything reads the path: authorization, routing and a gateway's forwarding act
    // on the indices OpenSearch would.
    if let Some(uri) = crate::http::url_index::rewrite(req.method(), req.uri()) {
        *req.uri_mut() = uri;
    }
    let opaque = crate::http::meta::opaque_ids(req.headers());
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let pretty = crate::http::pretty::wants_pretty(uri.query());
    let yaml =
        crate::http::format::wants_yaml(uri.query(), crate::http::format::accept(req.headers()));
    let resp = next.run(req).await;
    let mut resp = crate::http::fallback::name_allowed_methods(&method, &uri, resp);
    if let Some(up) = &st.upstream {
        // Before `?pretty` and YAML, which render the body it writes.
        up.product.restyle(&mut resp);
    }
    if yaml {
        resp = crate::http::format::yaml_answer(resp).await;
    } else if pretty {
        resp = crate::http::pretty::pretty_error(resp).await;
    }
    crate::http::meta::echo_opaque_id(opaque, &mut resp);
    if let Some(up) = &st.upstream {
        up.product.stamp(&mut resp);
    }
    resp
}

/// The type of [`app`]'s service.
pub type HttpService =
    tower::util::BoxCloneSyncService<Request, Response, std::convert::Infallible>;

pub(crate) fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "unknown panic".to_string());
    tracing::error!(panic = %msg, "request handler panicked");
    let e = sluice_engine::EngineError::internal(format!("request handler panicked: {msg}"));
    axum::response::IntoResponse::into_response(crate::error::ApiError::Engine(e))
}

/// Resolves when the process gets Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown requested");
}
