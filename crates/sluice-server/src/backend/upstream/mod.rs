//! The upstream backend: sluice as a gateway in front of an existing OpenSearch or
//! Elasticsearch cluster (`backend.type: upstream`).
//!
//! sluice answers its own routes (workload groups, rules, stats, its `_tasks`, the cluster
//! settings); search-class requests go through admission exactly as on an embedded node and
//! are then forwarded by [`Upstream::execute`]; every other request is forwarded unchanged by
//! [`Upstream::forward`] with its body streamed both ways.
//!
//! The embedded [`super::Backend`] takes requests parsed into the embedded engine's own
//! language; a gateway forwards the client's bytes (the upstream understands far more of the
//! query DSL than sluice parses), so it takes the same [`Execution`] from admission and the
//! raw request instead.
//!
//! - [`config`]: the `backend.*` settings;
//! - [`hosts`]: round-robin over healthy hosts with back-off;
//! - [`client`]: the pooled hyper client over rustls and its failure mapping (502/504);
//! - [`headers`]: hop-by-hop headers, proxy-trust headers, identity forwarding;
//!   [`forwarded`]: the `X-Forwarded-For` chain of a trusted proxy, as far as it is believed;
//! - [`mod@cancelled`]: a forwarded request that ended without its answer: its upstream tasks
//!   cancelled, and its slot held until they have ended; [`followers`]: the tasks that hold
//!   such slots, stopped when the node stops;
//! - [`scrolls`]: scroll id → group; [`scroll_peers`]: the other gateways' scrolls;
//!   [`sniff`] reads a response's scroll id as it streams;
//! - [`routes`]: the gateway's router and its search-class handlers; [`msearch`]: the split of
//!   an `_msearch` into admitted items and the merge of the answers, relayed unparsed
//!   ([`msearch_scan`] finds the items of an answer as it streams, [`msearch_merge`] puts
//!   them in request order); [`references`]: what a search body makes the upstream read
//!   besides its indices, authorized before it goes.

pub mod aliases;
pub mod cancelled;
pub mod client;
pub mod config;
pub mod doc_items;
pub mod followers;
pub mod forwarded;
pub mod h1;
pub mod headers;
pub mod health;
pub mod held;
pub mod hosts;
pub mod limits;
pub mod msearch;
pub mod msearch_merge;
pub mod msearch_scan;
pub mod nodes;
pub mod product;
pub mod references;
pub mod routes;
pub mod scroll_peers;
pub mod scrolls;
pub mod search_apis;
pub mod settings;
pub mod sniff;
pub mod streamed;
pub mod tasks;

use std::any::Any;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use futures::future::Either;
use http::{HeaderMap, HeaderValue, Method, Response};
use serde_json::Value;
use sluice_engine::{EngineError, ErrorCode};
use streamed::AnswerBody;

use self::cancelled::{CancelUpstream, Slot, Until};
use self::client::{OutBody, UpstreamClient};
use self::config::UpstreamConfig;
use self::headers::Identity;
use self::limits::{Gap, GapLog, Gaps, InFlight, Measure, Polled};
use self::scrolls::ScrollGroups;
use super::Execution;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::tasks::Task;

/// How often a gateway whose upstream was down at start asks it again, to decide how resource
/// limits measure forwarded searches: the upstream's searches run unmeasured for at most this
/// long after it is back. One `GET /` a second is nothing to a cluster.
const MEASURE_RETRY: Duration = Duration::from_secs(1);

/// How often it asks again while the upstream answers but gives no measure (a configuration
/// error, logged as often, [`limits::Gap::Unmeasurable`]): often enough to notice a fix,
/// seldom enough not to flood the log.
const MEASURE_RETRY_FAILED: Duration = limits::GAP_LOG_EVERY;

/// The upstream did not answer `GET /` with a success: what it answered, or why it did not.
#[derive(Debug)]
pub struct Unreachable(pub String);

/// The upstream cluster and what the gateway keeps about it.
pub struct Upstream {
    client: UpstreamClient,
    identity: Identity,
    /// Which group each scroll opened through the gateway runs in.
    pub scrolls: ScrollGroups,
    /// The node id the gateway's task ids carry, part of every forwarded `X-Opaque-Id`.
    node_id: String,
    /// How a forwarded search's usage is measured ([`limits`]): decided once the upstream
    /// first answers (at start, or later when it was down then: [`Self::settled_measure`]).
    measure: OnceLock<Measure>,
    /// Whether start-up warned that the upstream cannot honour the identity mode
    /// ([`Identity::unhonoured_by`]): once, whenever its `GET /` first answers.
    identity_warned: AtomicBool,
    /// What the measure is decided from: `backend.upstream.search_threads` and the node's
    /// capacity.
    measure_from: (Option<u32>, sluice_core::resources::NodeCapacity),
    /// Gaps in the measure: why limits have none now, what stands in ([`limits::Gaps`]).
    gaps: parking_lot::Mutex<Gaps>,
    /// Whether a gap stands or the measure is undecided: the one thing a forwarded search
    /// reads of the gaps, without their lock, while there are none.
    gapped: AtomicBool,
    /// The fast lane's exchange ([`h1`]): `None` when `backend.upstream.fast_lane` is off or
    /// a host is `https://` (the lane speaks plain HTTP/1.1 only).
    pub lane: Option<h1::H1>,
    /// `backend.upstream.cancel_wait_timeout`: the longest a request that ended without its
    /// answer keeps its slot while the upstream still lists its tasks ([`mod@cancelled`]).
    cancel_wait_timeout: Duration,
    /// The tasks following upstream work that outlived its request ([`followers`]).
    followers: followers::Followers,
    /// The product the upstream's `GET /` named (Elasticsearch's `X-Elastic-Product`), put on
    /// the gateway's own answers ([`product`]).
    pub product: product::Product,
    /// The upstream cluster as its `GET /` names it (`cluster_name` and `cluster_uuid`),
    /// once it answered: what a gateway gossips, so gateways in front of different clusters
    /// are told apart (`cluster/upstream_identity.rs`).
    cluster: OnceLock<UpstreamCluster>,
}

/// The cluster a gateway forwards to, as its `GET /` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamCluster {
    /// `cluster_name`.
    pub name: String,
    /// `cluster_uuid` (empty when it names none).
    pub uuid: String,
}

/// A request to forward, with its headers already rewritten for the upstream.
pub struct Call {
    /// The method.
    pub method: Method,
    /// Path and query as forwarded.
    pub path_and_query: String,
    /// Headers as forwarded (on a lane call, after `raw`: only those the gateway adds).
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
    /// On a call of the fast lane, the client's header lines forwarded from the request's own
    /// bytes ([`h1::RawHeaders`]), a header of `headers` replacing any line of its name;
    /// `None` on the general path, whose `headers` are the request's own, rewritten.
    pub raw: Option<h1::RawHeaders>,
}

impl Call {
    /// The call asking for its answer uncompressed (`Accept-Encoding: identity` in place of
    /// the client's): for a request whose answer the gateway reads (merges, filters, finds a
    /// scroll id in), which it could not in a compressed answer. The client still gets its
    /// answer compressed when it asked: the node's compression layer compresses what the
    /// gateway answers, as it does every answer of sluice's.
    pub fn answer_uncompressed(mut self) -> Call {
        self.headers.insert(
            http::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        self
    }
}

impl Upstream {
    /// The upstream of `config`; `auth` is sluice's own authentication, `capacity` the node's
    /// (what the enforcement divides CPU time and memory by), `data` its data folder (where
    /// the upstream's product is remembered, `product.rs` P5). Its measure is not decided yet.
    pub fn new(
        config: &UpstreamConfig,
        auth: &crate::auth::AuthConfig,
        node_id: &str,
        capacity: sluice_core::resources::NodeCapacity,
        data: &std::path::Path,
    ) -> anyhow::Result<Upstream> {
        let plain = config.hosts.iter().all(|h| h.scheme_str() == Some("http"));
        let lane = (config.fast_lane && plain).then(|| {
            h1::H1::new(
                config.hosts.len(),
                config.connect_timeout,
                config.request_timeout,
            )
        });
        Ok(Upstream {
            lane,
            client: UpstreamClient::new(config)?,
            identity: Identity::new(config, auth),
            scrolls: ScrollGroups::default(),
            node_id: node_id.to_string(),
            measure: OnceLock::new(),
            identity_warned: AtomicBool::new(false),
            measure_from: (config.search_threads, capacity),
            gaps: parking_lot::Mutex::new(Gaps::default()),
            gapped: AtomicBool::new(true),
            cancel_wait_timeout: config.cancel_wait_timeout,
            followers: followers::Followers::default(),
            cluster: OnceLock::new(),
            product: product::Product::remembered_in(data),
        })
    }

    /// The upstream's search threads in all: the sum of `thread_pool.search.size` over the
    /// nodes its `_nodes/thread_pool` lists; `None` when it does not say.
    async fn read_search_threads(&self, first: bool) -> Option<u32> {
        let headers = self.identity.own_call();
        let path = "/_nodes/thread_pool";
        let answer = if first {
            self.client.call_at_start(path, &headers).await
        } else {
            self.client.call_whole(Method::GET, path, &headers).await
        }
        .ok()?;
        if !answer.status.is_success() {
            return None;
        }
        let v: Value = serde_json::from_slice(&answer.body).ok()?;
        let total: u64 = v["nodes"]
            .as_object()?
            .values()
            .filter_map(|n| n["thread_pool"]["search"]["size"].as_u64())
            .sum();
        u32::try_from(total).ok().filter(|n| *n > 0)
    }

    /// `backend.upstream.request_timeout`.
    pub fn request_timeout(&self) -> Duration {
        self.client.request_timeout()
    }

    /// A bodiless call of the gateway's own to the upstream, sent with `headers` (already
    /// rewritten for the upstream): its status and its whole answer.
    pub async fn call_upstream(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
    ) -> Result<(http::StatusCode, Bytes), EngineError> {
        self.client.call(method, path_and_query, headers).await
    }

    /// Stops following the upstream's work (cancelled requests' tasks, background work) and
    /// gives back the slots the followers hold, once the node stops serving: at once, their
    /// work dropped rather than finished ([`followers`] W1).
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting for the followers' end; they are stopped all the same.
    pub async fn stop_following(&self) {
        self.followers.stop().await;
    }

    /// The upstream cluster, once its `GET /` answered.
    pub fn cluster(&self) -> Option<&UpstreamCluster> {
        self.cluster.get()
    }

    /// The identity forwarding.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Calls the upstream's `GET /` and logs what answered; answers its distribution
    /// (`opensearch`, `elasticsearch` when it names none, as Elasticsearch does), `None` when it
    /// answered an error, `Err` when it did not answer (a cluster restarting while its gateway
    /// starts is served once it is back): logged as a warning when `first`, else quietly.
    pub async fn probe(&self, first: bool) -> Result<Option<String>, Unreachable> {
        let headers = self.identity.own_call();
        // At start each host has a short bound, and the next is asked (`client.rs`).
        let answer = if first {
            self.client.call_at_start("/", &headers).await
        } else {
            self.client.call_whole(Method::GET, "/", &headers).await
        };
        match answer.map(|a| (a.status, a.headers, a.body)) {
            Ok((status, headers, body)) if status.is_success() => {
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                self.product.learn(&headers, &v);
                self.product.save().await;
                let _ = self.cluster.set(UpstreamCluster {
                    name: v["cluster_name"].as_str().unwrap_or("").to_string(),
                    uuid: v["cluster_uuid"].as_str().unwrap_or("").to_string(),
                });
                let distribution = v["version"]["distribution"]
                    .as_str()
                    .unwrap_or("elasticsearch")
                    .to_string();
                tracing::info!(
                    cluster = %v["cluster_name"].as_str().unwrap_or("?"),
                    distribution = %distribution,
                    version = %v["version"]["number"].as_str().unwrap_or("?"),
                    "gateway mode: forwarding to the upstream cluster"
                );
                // As the start-up warning of `service`: the same single identity, by mistake.
                if let Some(risk) = self.identity.unhonoured_by(&distribution)
                    && !self.identity_warned.swap(true, Ordering::Relaxed)
                {
                    tracing::warn!("{risk}");
                }
                Ok(Some(distribution))
            }
            // Not an answer to decide from: a cluster still starting (503 "not initialized"),
            // or credentials it refuses. Asked again later, as when it is down, rather than
            // taken as an upstream that says nothing (which stopped start-up when
            // `search_threads` was not set: a restart loop under a supervisor).
            Ok((status, _, body)) => {
                let body = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
                if first {
                    tracing::warn!(%status, %body,
                        "gateway mode: the upstream's GET / did not succeed; asked again every second (a 401 or 403: check backend.upstream.username/password and identity)");
                } else {
                    tracing::debug!(%status, %body, "gateway mode: the upstream's GET / still does not succeed");
                }
                Err(Unreachable(format!(
                    "it answered {status}: {}",
                    limits::excerpt(body.as_bytes())
                )))
            }
            Err(e) => {
                if first {
                    tracing::warn!(error = %e.reason, "gateway mode: no upstream host answered GET / at start (each tried in turn); requests get 502 or 504 until one does, and it is asked again every second");
                } else {
                    tracing::debug!(error = %e.reason, "gateway mode: the upstream is still not reachable");
                }
                Err(Unreachable(format!(
                    "it is not reachable: {}",
                    limits::excerpt(e.reason.as_bytes())
                )))
            }
        }
    }

    /// Decides how forwarded searches are measured from what the upstream answers (see
    /// [`limits`]): what it reports itself when it is OpenSearch and
    /// `backend.upstream.search_threads` is not set, else searches in flight over its search
    /// threads (the setting, or what its `_nodes/thread_pool` says). `Ok(None)` when the
    /// upstream did not answer (decided later); `Err` when it answered but neither applies.
    /// `first`: the first time it is asked (see [`Self::probe`]).
    async fn decide_measure(&self, first: bool) -> anyhow::Result<Option<Measure>> {
        let (configured, capacity) = self.measure_from;
        let probed = self.probe(first).await;
        let answered = probed.is_ok();
        let distribution = match probed {
            Ok(d) => d,
            // With `search_threads` set, the measure does not depend on the upstream.
            Err(Unreachable(_)) if configured.is_some() => None,
            Err(Unreachable(what)) => {
                self.gaps.lock().open(Gap::Undecided(what), Instant::now());
                return Ok(None);
            }
        };
        // OpenSearch reports each task's resource usage; Elasticsearch does not.
        if distribution.as_deref() == Some("opensearch") && configured.is_none() {
            tracing::info!(
                "gateway mode: a group's cpu and memory usage is what the upstream reports for its searches (_tasks resource_stats), as fractions of this node's cores and node.memory_budget"
            );
            return Ok(Some(Measure::Reported));
        }
        let reported = if answered {
            self.read_search_threads(first).await
        } else {
            None
        };
        let search_threads = match (configured, reported) {
            (Some(set), Some(seen)) if set != seen => {
                tracing::warn!(
                    configured = set,
                    reported = seen,
                    "backend.upstream.search_threads differs from the search threads the upstream reports; limits are shares of the configured figure"
                );
                set
            }
            (Some(set), _) => set,
            (None, Some(seen)) => seen,
            (None, None) => anyhow::bail!(
                "the upstream does not report per-task resource usage and its search threads could not be read from GET /_nodes/thread_pool: set backend.upstream.search_threads (the sum of thread_pool.search.size over the upstream's data nodes), which a gateway's resource limits are shares of"
            ),
        };
        tracing::warn!(
            search_threads,
            "gateway mode: a group's cpu and memory usage is its searches in flight over the upstream's search threads (the upstream reports no per-task usage, or backend.upstream.search_threads is set): limits bound a group's share of the upstream's search capacity, not how heavy each search is"
        );
        Ok(Some(Measure::InFlight(InFlight {
            cores: capacity.cores,
            search_threads,
            memory_budget_bytes: capacity.memory_budget_bytes,
        })))
    }

    /// How forwarded searches are measured; `None` until the upstream first answered.
    pub fn measure(&self) -> Option<Measure> {
        self.measure.get().copied()
    }

    /// The measure, once decided: when the upstream was down at start, asks it again every
    /// [`MEASURE_RETRY`] until it answers (every [`MEASURE_RETRY_FAILED`] while it answers but
    /// the measure cannot be decided). Meanwhile limits have no measure of their own: the
    /// upstream's search threads stand in when its `_nodes/thread_pool` answers, and the gap
    /// is logged as an ERROR every 30 s once it lasted that long ([`limits::log_due`]).
    ///
    /// # Cancel safety
    /// Dropping the future stops asking; a later call starts again.
    pub async fn settled_measure(&self) -> Measure {
        loop {
            if let Some(m) = self.measure.get() {
                self.close_gap();
                return *m;
            }
            let wait = match self.decide_measure(false).await {
                Ok(Some(m)) => {
                    let _ = self.measure.set(m);
                    continue;
                }
                Ok(None) => MEASURE_RETRY,
                Err(e) => {
                    self.gaps.lock().open(
                        Gap::Unmeasurable(format!(
                            "the upstream answers, but resource limits have no measure until this is fixed: {e}"
                        )),
                        Instant::now(),
                    );
                    MEASURE_RETRY_FAILED
                }
            };
            self.tend_gap(true).await;
            tokio::time::sleep(wait).await;
        }
    }

    /// The measure in effect now ([`limits::effective`]): the decided one while no gap
    /// stands, else the stand-in; `Err` with why limits have no measure.
    pub fn effective_measure(&self) -> Result<Measure, String> {
        if !self.gapped.load(Ordering::Acquire)
            && let Some(m) = self.measure.get()
        {
            return Ok(*m);
        }
        limits::effective(self.measure.get().copied(), &self.gaps.lock())
    }

    /// Why resource limits have no measure on this gateway now; `None` when they have one
    /// (for the `Warning` of a group written with limits, and `_wlm/stats`).
    pub fn unmeasured(&self) -> Option<String> {
        self.effective_measure().err()
    }

    /// Ends a gap (its end logged at INFO).
    fn close_gap(&self) {
        let mut gaps = self.gaps.lock();
        if let Some(gap) = gaps.close() {
            tracing::info!(was = %gap.why(), "gateway mode: resource limits have their measure again");
        }
        self.gapped.store(false, Ordering::Release);
    }

    /// Looks after a gap (or an undecided measure): reads the upstream's search threads for a
    /// stand-in when none was read ([`Gaps::wants_stand_in`]) and logs the gap when due.
    async fn tend_gap(&self, undecided: bool) {
        let now = Instant::now();
        let want = {
            let gaps = &mut *self.gaps.lock();
            self.gapped
                .store(undecided || gaps.gap().is_some(), Ordering::Release);
            gaps.wants_stand_in(undecided, now)
        };
        if want && let Some(search_threads) = self.read_search_threads(false).await {
            let capacity = self.measure_from.1;
            self.gaps.lock().set_stand_in(InFlight {
                cores: capacity.cores,
                search_threads,
                memory_budget_bytes: capacity.memory_budget_bytes,
            });
        }
        let logged = self.gaps.lock().log_now(Instant::now());
        match logged {
            Some((GapLog::Error, text)) => tracing::error!("gateway mode: {text}"),
            Some((GapLog::Warn, text)) => tracing::warn!("gateway mode: {text}"),
            _ => {}
        }
    }

    /// Forwards a request sluice does not answer itself: headers rewritten
    /// ([`Identity::outbound`]), the body streamed to the upstream and its answer streamed back
    /// with status and headers unchanged (hop-by-hop headers aside).
    ///
    /// # Cancel safety
    /// Dropping the future drops the upstream request.
    pub async fn forward(
        &self,
        req: axum::extract::Request,
        principal: Option<&Principal>,
        client: Option<IpAddr>,
    ) -> Result<axum::response::Response, ApiError> {
        let (parts, body) = req.into_parts();
        let mut headers = parts.headers;
        self.identity.outbound(&mut headers, principal, client);
        // Never another path than the client's: a target without one is no route's
        // (`crate::http::fallback::forward` answers it before this).
        let Some(path) = parts.uri.path_and_query().map(|p| p.as_str().to_string()) else {
            return Err(ApiError::Engine(EngineError::illegal_argument(format!(
                "request target [{}] has no path",
                parts.uri
            ))));
        };
        // A request without a body can be sent again when its connection closed as it went
        // out (`client.rs` C2); any request goes to the next host when one refuses (C8). A
        // body's end may be known only by its length (zero; a lent request's body says no
        // more).
        let bodiless = hyper::body::Body::is_end_stream(&body)
            || hyper::body::Body::size_hint(&body).exact() == Some(0);
        let (body, ended) = if bodiless {
            (OutBody::Bytes(Bytes::new()), None)
        } else {
            let length = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| h1::content_length(v.as_bytes()));
            let (body, ended) = streamed::EndWatched::watch(body, length);
            (OutBody::Stream(body), Some(ended))
        };
        let mut resp = match self.client.send(&parts.method, &path, headers, body).await {
            Ok(resp) => stream_back(resp),
            // The gateway's own answer (a head its lines take over the limit, a 502) is given
            // before the body is read as well.
            Err(e) => axum::response::IntoResponse::into_response(ApiError::Engine(e)),
        };
        if ended.is_some_and(|e| !streamed::EndWatched::ended(&e)) {
            // Answered before the body was all read: the connection closes after this answer,
            // and says so (`streamed.rs`).
            resp.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        Ok(resp)
    }

    /// Sends `call` as it is (no admission, no `X-Opaque-Id` of sluice's), answering once the
    /// response headers arrived.
    ///
    /// # Cancel safety
    /// Dropping the future drops the upstream request.
    pub async fn send_call(&self, call: Call) -> Result<Response<AnswerBody>, ApiError> {
        debug_assert!(call.raw.is_none(), "a lane call sent on the general path");
        Ok(self
            .client
            .send(
                &call.method,
                &call.path_and_query,
                call.headers,
                OutBody::Bytes(call.body),
            )
            .await?)
    }

    /// Runs an admitted search-class request on the upstream: marks it executing (admission's
    /// start hook, which may still turn it away), forwards `call` with an `X-Opaque-Id` naming
    /// the task, and answers the upstream's response once its headers arrived. When the task
    /// is cancelled (`_tasks/_cancel`, its `cancel_after_time_interval` passing, its client
    /// leaving) the upstream request is dropped and the upstream's tasks carrying that id are
    /// cancelled; the request is answered at once, but its slot and its task are held until
    /// those tasks have ended, within `backend.upstream.cancel_wait_timeout` ([`mod@cancelled`]).
    ///
    /// # Cancel safety
    /// Dropping the future (the client left) drops the upstream request and cancels the
    /// upstream's tasks of it in the background, holding the slot until they have ended.
    pub async fn execute(
        self: &Arc<Self>,
        exec: Execution,
        call: Call,
    ) -> Result<Response<AnswerBody>, ApiError> {
        self.execute_with(exec, call, |c, _| self.send_admitted(c))
            .await
    }

    /// [`Self::execute`] on the fast lane's own HTTP/1.1 exchange ([`h1`]), on upstream
    /// connections of lane thread `thread` (the one this runs on): answers once the answer's
    /// head arrived, its body still to relay.
    ///
    /// [`Self::execute_with`]'s future itself, not one awaiting it: a future of its own would
    /// keep room for the execution and the call beside the one it awaits (328 bytes in every
    /// search's), and move that one (2.5 KB) into itself.
    ///
    /// # Cancel safety
    /// As [`Self::execute`].
    pub fn execute_h1(
        self: &Arc<Self>,
        exec: Execution,
        call: Call,
        thread: usize,
    ) -> impl Future<Output = Result<Box<h1::Answer>, ApiError>> {
        let Some(lane) = self.lane.as_ref() else {
            return Either::Left(std::future::ready(Err(ApiError::Engine(
                EngineError::internal("fast lane request on a gateway without one"),
            ))));
        };
        Either::Right(self.execute_with(exec, call, move |c, at| async move {
            lane.send(thread, self.client.hosts(), &c, at.into()).await
        }))
    }

    /// [`Self::execute`] for work the upstream answers for even when cancelled (a by-query
    /// action: a 200 saying `canceled`, with what it did): the gateway task's cancellation
    /// cancels the upstream's tasks carrying its `X-Opaque-Id`, and the answer is still waited
    /// for and returned, rather than the request dropped. The client leaving (this future
    /// dropped) still cancels them, and so does a request sent that ends without its answer
    /// (a 504 of `request_timeout`, an exchange broken off): its slot is held until they have
    /// ended, as a search's (`cancelled.rs` F1, F3, F4).
    ///
    /// # Cancel safety
    /// As [`Self::execute`].
    pub async fn execute_to_the_end(
        self: &Arc<Self>,
        exec: Execution,
        mut call: Call,
    ) -> Result<Response<AnswerBody>, ApiError> {
        let executing = exec.hooks.start().map_err(ApiError::Engine)?;
        exec.task.usage.mark_executing();
        let opaque = self.opaque_id(&exec.task);
        if let Some(v) = opaque_id_value(&opaque) {
            call.headers
                .insert(crate::http::meta::OPAQUE_ID_NAME.clone(), v);
        }
        // The client leaving drops the guard armed: the slot is held until the upstream's
        // tasks have ended (`cancelled.rs`). Otherwise the answer comes once they have.
        let mut guard =
            CancelUpstream::new(self, exec.task.clone(), Slot::new(executing, exec.hold));
        let send = self.send_admitted(call);
        tokio::pin!(send);
        // `cancel_after_time_interval` passing cancels the task (the ticket words the reason),
        // unless the answer came by then, stall or not (polled first; `crate::deadline`).
        let deadline = async {
            match exec.cancel_at {
                Some(at) => crate::deadline::passed(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        let (mut cancel_sent, mut deadline_passed) = (false, false);
        let out = loop {
            tokio::select! {
                biased;
                r = &mut send => break r,
                () = exec.task.execution_cancelled(), if !cancel_sent => {
                    cancel_sent = true;
                    let (up, opaque) = (self.clone(), opaque.clone());
                    self.followers
                        .spawn(async move { up.end_tasks(&opaque, Until::Cancelled).await });
                }
                () = &mut deadline, if !deadline_passed => {
                    deadline_passed = true;
                    exec.task.cancel(None);
                }
            }
        };
        match &out {
            // Sent, and no answer: the upstream may run the work on (the connection's end
            // need not stop it), so it is cancelled and followed.
            Err(e) if !cancelled::never_sent(e) => {
                cancelled::show_cancelled(std::slice::from_ref(&exec.task));
            }
            _ => guard.disarm(),
        }
        self.finished(&exec.task, exec.hooks.as_ref());
        out.map_err(ApiError::Engine)
    }

    /// [`Self::execute`] with `send` forwarding the call, given the moment the execution
    /// started: one clock reading for both.
    ///
    /// An `async move` block rather than an `async fn`, whose future would keep room for each
    /// argument twice (see `routes::lane_search`): this is inside every forwarded search's.
    // Not an `async fn`: its future would keep room for each argument twice.
    #[allow(clippy::manual_async_fn)]
    fn execute_with<T, F>(
        self: &Arc<Self>,
        exec: Execution,
        call: Call,
        send: impl FnOnce(Call, std::time::Instant) -> F,
    ) -> impl Future<Output = Result<T, ApiError>>
    where
        F: Future<Output = Result<T, EngineError>>,
    {
        async move {
            let executing = exec.hooks.start().map_err(ApiError::Engine)?;
            let at = std::time::Instant::now();
            exec.task.usage.mark_executing_at(at);
            // Held as one slot, not boxed into a `Vec` as `run_started`'s callers hold theirs: two
            // allocations fewer per forwarded search.
            let keep = Slot::new(executing, exec.hold);
            let out = self
                .guarded(exec.task.clone(), exec.cancel_at, keep, None, call, |c| {
                    send(c, at)
                })
                .await;
            self.finished(&exec.task, exec.hooks.as_ref());
            out
        }
    }

    /// Sends an admitted call on the hyper client.
    async fn send_admitted(&self, call: Call) -> Result<Response<AnswerBody>, EngineError> {
        debug_assert!(call.raw.is_none(), "a lane call sent on the general path");
        let Call {
            method,
            path_and_query,
            headers,
            body,
            ..
        } = call;
        self.client
            .send(&method, &path_and_query, headers, OutBody::Bytes(body))
            .await
    }

    /// Records a forwarded task's in-flight usage at its end and reports it to admission
    /// (the group's per-task estimate learns from it).
    ///
    /// A task that no poll of the upstream's usage measured (it ended between two polls, or
    /// before the measure was decided) has no figure, and is not reported: a 0 would teach
    /// the estimate that the search used nothing, and a few such quick searches (weight 1/4
    /// each) wiped a group's estimate, so a burst of its heavy searches was admitted whole.
    /// Such a search counted at the estimate while it ran ([`limits`]), and leaves it as it
    /// was. (Nothing of its CPU is left to charge to a paced group's quota either.)
    ///
    /// The figures are those of the time they were taken ([`limits::at_end`]): a polled
    /// search's at its last poll, not at its end, so the estimate is not taught the CPU of
    /// one span of time over a longer one.
    pub fn finished(&self, task: &Task, hooks: &dyn super::ExecutionHooks) {
        let Some(since) = task.usage.executing_since() else {
            return;
        };
        let measure = self.effective_measure().ok();
        if let Some((at, cpu, memory)) = limits::at_end(measure, &task.usage, since, Instant::now) {
            hooks.finished(since, at, cpu, memory);
        }
    }

    /// Records the in-flight measure on the forwarded tasks in flight when it is the measure
    /// in effect, decided or standing in for a gap (nothing when the upstream reports usage:
    /// [`Self::poll_usage`] records it).
    pub fn record_in_flight(&self, tasks: &[Arc<Task>]) {
        if let Ok(Measure::InFlight(m)) = self.effective_measure() {
            m.record(tasks, Instant::now());
        }
    }

    /// Polls the upstream's search tasks while the gateway has searches in flight, when
    /// [`limits::poll_due`] says, recording each one's reported usage on its task (see
    /// [`limits`]), and watches for gaps: a listing that fails, or searches listed without
    /// figures, open one ([`Gaps::polled`]), logged and stood in for by [`Self::tend_gap`];
    /// returns once the measure is decided as the in-flight one.
    ///
    /// # Cancel safety
    /// Dropping the future (aborting its task at shutdown) stops the polling.
    pub async fn poll_usage(self: Arc<Self>, st: Arc<crate::state::AppState>) {
        if !matches!(self.settled_measure().await, Measure::Reported) {
            return;
        }
        let headers = self.identity.own_call();
        let mut last_poll: Option<Instant> = None;
        loop {
            let settings = st.cluster_settings.snapshot();
            let refresh = crate::enforcement::node::usage_refresh_interval(&settings);
            tokio::time::sleep(refresh).await;
            self.tend_gap(false).await;
            if !settings.wlm_mode().runs_enforcement_loop() {
                continue;
            }
            let in_flight: Vec<Arc<Task>> = st
                .tasks
                .list()
                .into_iter()
                .filter(|t| t.usage.executing_since().is_some())
                .collect();
            let now = Instant::now();
            let oldest = in_flight
                .iter()
                .filter_map(|t| t.usage.executing_since())
                .min()
                .map(|since| now.saturating_duration_since(since));
            let sample = crate::enforcement::node::enforcement_interval(&settings);
            let since_last = last_poll.map(|at| now.saturating_duration_since(at));
            let gapped = self.gapped.load(Ordering::Acquire);
            if !limits::poll_due(oldest, since_last, refresh, sample, gapped) {
                continue;
            }
            last_poll = Some(now);
            let path = format!("/_tasks?actions={WORK_ACTIONS}&detailed=true");
            let listed = self.client.call(Method::GET, &path, &headers).await;
            let (polled, listed) = match listed {
                Ok((s, body)) if s.is_success() => {
                    let listed = limits::reported_usage(&body, &self.node_id);
                    (Polled::Listed(listed.reports_usage), Some(listed))
                }
                Ok((s, body)) => (
                    Polled::Failed(limits::listing_failed(Some(s), &limits::excerpt(&body))),
                    None,
                ),
                Err(e) => (
                    Polled::Failed(limits::listing_failed(
                        None,
                        &limits::excerpt(e.reason.as_bytes()),
                    )),
                    None,
                ),
            };
            let ended = self.gaps.lock().polled(polled, Instant::now());
            if let Some(gap) = ended {
                tracing::info!(was = %gap.why(), "gateway mode: the upstream's task usage is readable again");
            }
            self.tend_gap(false).await;
            let Some(listed) = listed else {
                continue;
            };
            // The figures as of the answer (the upstream took them while it answered).
            let at = Instant::now();
            for task in in_flight {
                if let Some((cpu, mem)) = listed.usage.get(&task.seq) {
                    task.usage.record_at(*cpu, *mem, at);
                }
            }
        }
    }

    /// Forwards `call` for work admission already started (`keep` holds what it granted until
    /// the answer's headers arrived, or, when the request ends without them, until the
    /// upstream's tasks of it have ended): `task` names the request in its `X-Opaque-Id` and
    /// its cancellation, or `cancel_at` passing, drops the upstream request (see
    /// [`Self::execute`]). `items`: the tasks whose slots `keep` holds when they are not
    /// `task` itself (an `_msearch` batch's items, `task` their parent), shown cancelled while
    /// held after the request ended without its answer (`cancelled.rs` F4). Without `items`
    /// this is `task`'s one execution ([`Task::execution_cancelled`]); with them, several
    /// batches of one parent may run at once.
    ///
    /// # Cancel safety
    /// As [`Self::execute`].
    pub async fn run_started(
        self: &Arc<Self>,
        task: Arc<Task>,
        cancel_at: Option<Instant>,
        keep: Vec<Box<dyn Any + Send>>,
        items: Option<&[Arc<Task>]>,
        call: Call,
    ) -> Result<Response<AnswerBody>, ApiError> {
        self.guarded(task, cancel_at, keep, items, call, |c| {
            self.send_admitted(c)
        })
        .await
    }

    /// [`Self::run_started`] with `send` forwarding the call.
    ///
    /// An `async move` block, not an `async fn`, as [`Self::execute_with`]: see
    /// `routes::lane_search`.
    // Not an `async fn`: its future would keep room for each argument twice.
    #[allow(clippy::manual_async_fn)]
    fn guarded<T, F, K: Send + 'static>(
        self: &Arc<Self>,
        task: Arc<Task>,
        cancel_at: Option<Instant>,
        keep: K,
        items: Option<&[Arc<Task>]>,
        mut call: Call,
        send: impl FnOnce(Call) -> F,
    ) -> impl Future<Output = Result<T, ApiError>>
    where
        F: Future<Output = Result<T, EngineError>>,
    {
        async move {
            let opaque = self.opaque_id(&task);
            match call.raw.as_mut() {
                Some(raw) => raw.set_opaque_id(opaque),
                None => {
                    if let Some(v) = opaque_id_value(&opaque) {
                        call.headers
                            .insert(crate::http::meta::OPAQUE_ID_NAME.clone(), v);
                    }
                }
            }
            // Fired, it keeps what admission granted until the upstream's tasks of the request
            // have ended (`cancelled.rs` F1); the client's answer does not wait for that (F2).
            let mut guard = CancelUpstream::new(self, task.clone(), keep);
            // Pinned where they are made, the `select!` below borrowing them: taken by value,
            // it moved each into a tuple of its own, the sending (about a kilobyte on the
            // fast lane) included (BENCHMARKS.md "Fewer moves").
            let send = std::pin::pin!(send(call));
            // An answer that came while the gateway stalled past the deadline is taken (the
            // answer's branch is polled first; `crate::deadline`).
            let deadline = std::pin::pin!(async {
                match cancel_at {
                    Some(at) => crate::deadline::passed(at.into()).await,
                    None => std::future::pending().await,
                }
            });
            // The tasks whose slots a fired guard holds, shown cancelled (F4).
            let held = items.unwrap_or(std::slice::from_ref(&task));
            // A task's one execution waits with its own waker; an `_msearch` parent names
            // several batches at once, each waiting in the task's list.
            let cancel = async {
                if items.is_some() {
                    task.cancelled().await;
                } else {
                    task.execution_cancelled().await;
                }
            };
            tokio::select! {
                // The answer first: no random pick a search.
                biased;
                r = send => match r {
                    Ok(resp) => {
                        guard.disarm();
                        Ok(resp)
                    }
                    Err(e) => {
                        if cancelled::never_sent(&e) {
                            // Refused by the gateway, or no host reached: nothing of it can run
                            // upstream, and its slot is given back at once (F3).
                            guard.disarm();
                        } else {
                            // Sent, then failed (no answer within `request_timeout`, an exchange
                            // broken off): the upstream may run it.
                            cancelled::show_cancelled(held);
                        }
                        Err(ApiError::Engine(e))
                    }
                },
                () = cancel => Err(cancelled()),
                () = deadline => {
                    // `cancel_after_time_interval` passed: the ticket words the reason.
                    task.cancel(None);
                    if items.is_some() {
                        cancelled::show_cancelled(held);
                    }
                    Err(cancelled())
                }
            }
        }
    }

    /// The `X-Opaque-Id` a forwarded request of `task` carries: the gateway's task id, after
    /// the client's own id when it sent one (`<client id>;sluice:<task>`), so the upstream's
    /// logs and `_tasks` keep the client's name and the gateway can find its tasks.
    pub fn opaque_id(&self, task: &Task) -> String {
        gateway_opaque_id(task.opaque_id().map(|o| &**o), &self.node_id, task.seq)
    }

    /// The upstream's running tasks (`node:id`) whose `X-Opaque-Id` is `opaque`, among those
    /// of the actions that run searches ([`WORK_ACTIONS`]), listed with the gateway's own
    /// credentials; or why they could not be listed.
    pub async fn tasks_of(&self, opaque: &str) -> Result<Vec<String>, String> {
        let headers = self.identity.own_call();
        let path = format!("/_tasks?actions={WORK_ACTIONS}&detailed=false");
        match self.client.call(Method::GET, &path, &headers).await {
            Ok((s, body)) if s.is_success() => Ok(cancelled::matching_tasks(&body, opaque)
                .into_iter()
                .map(|t| t.id)
                .collect()),
            Ok((s, _)) => Err(format!("answered {s}")),
            Err(e) => Err(e.reason),
        }
    }
}

/// The upstream actions whose tasks the gateway cancels, follows and reads the usage of by
/// `X-Opaque-Id`: searches
/// (an async search's, a rank evaluation's, a `_knn_search`'s), by-query actions, reindexing,
/// rank evaluation, SQL and PPL (OpenSearch's `cluster:admin/opensearch/sql` and `…/ppl`,
/// Elasticsearch's `indices:data/read/sql`) and EQL. Each runs under the thread context of
/// the request that started it, so it carries that request's `X-Opaque-Id`.
pub(super) const WORK_ACTIONS: &str = "*search*,*byquery*,*reindex*,*rank_eval*,*sql*,*ppl*,*eql*";

/// Starts gateway mode: builds the upstream client (TLS set up from `config`), warns when every
/// user would reach the upstream under one identity, calls the upstream's `GET /` and decides
/// how forwarded searches are measured. An upstream that answers but gives no measure stops
/// start-up; one that does not answer is asked again later ([`Upstream::settled_measure`]):
/// the gateway starts, and its requests get 502 until the upstream is back. Each host has a
/// short bound to answer the start-up calls, and the next is asked
/// ([`UpstreamClient::call_at_start`]).
/// `capacity` is the node's (what the enforcement divides CPU time and memory by); `data` its
/// data folder, where the upstream's product is remembered across restarts (`product.rs` P5).
pub async fn start(
    config: &UpstreamConfig,
    auth: &crate::auth::AuthConfig,
    node_id: &str,
    capacity: sluice_core::resources::NodeCapacity,
    data: &std::path::Path,
) -> anyhow::Result<Upstream> {
    let upstream = Upstream::new(config, auth, node_id, capacity, data)?;
    if upstream.identity().is_single_identity() {
        if config.credentials.is_none() && auth.mode == crate::auth::AuthMode::None {
            tracing::warn!(
                "backend.upstream.identity is service without backend.upstream.username: requests reach the upstream with no credentials, and clients' Authorization headers are not forwarded; set the gateway's own credentials, or backend.upstream.identity=passthrough to forward the client's"
            );
        } else {
            tracing::warn!(
                user = config
                    .credentials
                    .as_ref()
                    .map_or("(none)", |(u, _)| u.as_str()),
                "backend.upstream.identity is service: every user's requests reach the upstream under this one identity, so the upstream's own security cannot tell users apart or restrict what each may read; use proxy (OpenSearch security), run_as (Elasticsearch) or passthrough to forward the user"
            );
        }
    }
    if config.identity == config::IdentityMode::Passthrough {
        tracing::warn!(
            "backend.upstream.identity is passthrough, with auth.type none: the upstream authenticates each client, but sluice's own APIs (_wlm, _rules, the wlm.* cluster settings, _tasks, metrics) answer anyone who can reach this node; keep it on a network only trusted clients reach"
        );
        if upstream.identity().own_calls_anonymous() {
            tracing::warn!(
                "backend.upstream.identity is passthrough without backend.upstream.username: the gateway's own calls to the upstream (its probe of GET /, the cancelling of upstream searches whose client left or was cancelled, the polling of their usage) carry no credentials, and a secured upstream refuses them; set backend.upstream.username and backend.upstream.password for them"
            );
        }
    }
    match upstream.decide_measure(true).await? {
        Some(m) => {
            let _ = upstream.measure.set(m);
            upstream.gapped.store(false, Ordering::Release);
        }
        None => tracing::warn!(
            "gateway mode: how resource limits measure forwarded searches is decided once the upstream answers"
        ),
    }
    Ok(upstream)
}

/// The upstream of a gateway node, for its handlers.
pub(crate) fn routes_upstream(st: &crate::state::AppState) -> Result<Arc<Upstream>, ApiError> {
    routes_upstream_ref(st).cloned()
}

/// [`routes_upstream`] borrowed, for a handler whose future borrows the state: no reference
/// taken, on a count both lane threads would write every search.
pub(crate) fn routes_upstream_ref(st: &crate::state::AppState) -> Result<&Arc<Upstream>, ApiError> {
    st.upstream.as_ref().ok_or_else(|| {
        ApiError::Engine(EngineError::internal(
            "gateway route on a node without an upstream",
        ))
    })
}

/// The error a cancelled forwarded request settles with; the ticket words it as OpenSearch
/// does (`search_phase_execution_exception` caused by `task_cancelled_exception`).
pub(super) fn cancelled() -> ApiError {
    ApiError::Engine(EngineError::new(ErrorCode::TaskCancelled, "task cancelled"))
}

/// The upstream's response as the gateway's: status and headers unchanged but hop-by-hop
/// ones, the body streamed; marked [`Relayed`](crate::http::pretty::Relayed) so the node's
/// layers leave its body as the upstream wrote it (no `?pretty` rendering of an error).
pub fn stream_back(resp: Response<AnswerBody>) -> axum::response::Response {
    let (mut parts, body) = resp.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    parts.extensions.insert(crate::http::pretty::Relayed);
    axum::response::Response::from_parts(parts, Body::new(body))
}

/// The upstream's answer read whole as a document: JSON, or YAML when it answered the client's
/// `format=yaml` so ([`crate::http::format::parse_answer`]; the gateway renders what it builds
/// of it by the same `format`). `what` names it in the errors (`_msearch`,
/// `_cluster/settings`): the answer breaking off or not being JSON is an `upstream_exception`.
pub async fn json_answer(resp: Response<AnswerBody>, what: &str) -> Result<Value, EngineError> {
    uncompressed(&resp, what)?;
    let content_type = resp.headers().get(http::header::CONTENT_TYPE).cloned();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .map_err(|e| {
            EngineError::new(
                ErrorCode::UpstreamFailed,
                format!(
                    "the upstream's {what} answer broke off: {}",
                    client::causes(&e)
                ),
            )
        })?
        .to_bytes();
    crate::http::format::parse_answer(content_type.as_ref(), &bytes).map_err(|e| {
        EngineError::new(
            ErrorCode::UpstreamFailed,
            format!("the upstream's {what} answer is not JSON: {e}"),
        )
    })
}

/// An error unless the upstream's answer `resp` (`what`, in the error) came uncompressed, as
/// the gateway asked ([`Call::answer_uncompressed`]): an upstream that encodes it anyway is
/// named for it, not reported as sending something other than JSON.
pub fn uncompressed(resp: &Response<AnswerBody>, what: &str) -> Result<(), EngineError> {
    match resp
        .headers()
        .get(http::header::CONTENT_ENCODING)
        .filter(|c| !c.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        Some(coding) => Err(EngineError::new(
            ErrorCode::UpstreamFailed,
            format!(
                "the upstream's {what} answer is encoded [{}] although the gateway asked for \
                 it uncompressed",
                String::from_utf8_lossy(coding.as_bytes())
            ),
        )),
        None => Ok(()),
    }
}

/// The `X-Opaque-Id` of the gateway's task `seq` on node `node_id`: `sluice:<node>:<seq>`, after
/// the client's own id `own` and a `;` when it sent one that is not empty (an empty one adds
/// nothing a reader of the upstream's tasks could match).
fn gateway_opaque_id(own: Option<&str>, node_id: &str, seq: u64) -> String {
    let own = own.filter(|o| !o.is_empty());
    // Pieces pushed into one allocation of the right size: cheaper than `format!`, which
    // runs the formatting machinery and grows its string as it goes (once per search).
    // `u64::MAX` has 20 digits.
    let mut id = String::with_capacity(
        own.map_or(0, |o| o.len() + 1) + "sluice::".len() + node_id.len() + 20,
    );
    if let Some(own) = own {
        id.push_str(own);
        id.push(';');
    }
    id.push_str("sluice:");
    id.push_str(node_id);
    id.push(':');
    // Without the formatting machinery (about 230 instructions a search).
    id.push_str(itoa::Buffer::new().format(seq));
    id
}

/// The `X-Opaque-Id` header value of an id built by [`gateway_opaque_id`]: its text as
/// ISO-8859-1 bytes, one byte a character, so a client's id that is not ASCII
/// ([`crate::http::meta::opaque_id_text`] read its bytes one character each) reaches the
/// upstream as the bytes the client sent, and the upstream, reading them as OpenSearch does,
/// shows the same text the gateway matches its tasks by. `None` for a character past U+00FF
/// or one a header value cannot hold, which no id read from a header has.
fn opaque_id_value(id: &str) -> Option<HeaderValue> {
    opaque_id_bytes(id).and_then(|bytes| HeaderValue::from_bytes(&bytes).ok())
}

/// The bytes of [`opaque_id_value`], for a request written from its header lines
/// ([`h1::RawHeaders::set_opaque_id`]): the id's text as ISO-8859-1, `None` for a character
/// past U+00FF or a byte a header value cannot hold (a control character but tab, as
/// [`HeaderValue::from_bytes`] refuses).
pub(crate) fn opaque_id_bytes(id: &str) -> Option<std::borrow::Cow<'_, [u8]>> {
    let valid = |b: u8| (b >= 0x20 && b != 0x7f) | (b == b'\t');
    // The usual id, printable ASCII, in one pass without a branch a byte (`&`, not `&&`, so
    // the loop is vectorized: a short-circuiting check cost 10 instructions a byte).
    let printable = id.bytes().fold(true, |ok, b| {
        ok & ((0x20..0x7f).contains(&b) | (b == b'\t'))
    });
    if printable {
        return Some(std::borrow::Cow::Borrowed(id.as_bytes()));
    }
    let bytes = id
        .chars()
        .map(|c| u8::try_from(c).ok())
        .collect::<Option<Vec<u8>>>()?;
    bytes
        .iter()
        .all(|&b| valid(b))
        .then_some(std::borrow::Cow::Owned(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_an_opaque_id_reaches_the_upstream_as_the_client_sent_it() {
        // Every byte a header value may hold, alone and inside an ASCII id.
        for b in 0..=u8::MAX {
            let Ok(sent) = HeaderValue::from_bytes(&[b'x', b, b'y']) else {
                continue;
            };
            let text = crate::http::meta::opaque_id_text(&sent);
            assert_eq!(text.chars().count(), 3, "byte {b:#04x}");
            let id = gateway_opaque_id(Some(&text), "gw", 7);
            let mut expected = sent.as_bytes().to_vec();
            expected.extend_from_slice(b";sluice:gw:7");
            assert_eq!(
                opaque_id_value(&id).map(|v| v.as_bytes().to_vec()),
                Some(expected.clone()),
                "byte {b:#04x}"
            );
            // The fast lane writes the same bytes.
            assert_eq!(
                opaque_id_bytes(&id).map(|v| v.to_vec()),
                Some(expected),
                "byte {b:#04x}"
            );
        }
        assert_eq!(
            opaque_id_value("caf\u{e9}"),
            Some(HeaderValue::from_bytes(b"caf\xe9").unwrap())
        );
        for refused in ["\u{20ac}", "a\nb", "a\u{7f}", "a\u{0}"] {
            assert_eq!(opaque_id_value(refused), None, "{refused:?}");
            assert_eq!(opaque_id_bytes(refused), None, "{refused:?}");
        }
        // Every byte value: the lane's check is `HeaderValue`'s.
        for b in 0..=u8::MAX {
            let text: String = [char::from(b)].into_iter().collect();
            assert_eq!(
                opaque_id_bytes(&text).is_some(),
                HeaderValue::from_bytes(&[b]).is_ok(),
                "byte {b:#04x}"
            );
        }
    }

    #[test]
    fn test_the_gateways_opaque_id_follows_the_clients_own() {
        assert_eq!(gateway_opaque_id(None, "gw", 7), "sluice:gw:7");
        assert_eq!(
            gateway_opaque_id(Some("job-1"), "gw", 7),
            "job-1;sluice:gw:7"
        );
        assert_eq!(gateway_opaque_id(Some(""), "gw", 7), "sluice:gw:7");
        assert_eq!(
            gateway_opaque_id(None, "n", u64::MAX),
            format!("sluice:n:{}", u64::MAX)
        );
    }
}
