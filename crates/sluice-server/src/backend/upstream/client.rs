//! The pooled HTTP client to the upstream: hyper-util's client over rustls (HTTP/1.1, and
//! HTTP/2 where TLS negotiates it), one attempt per host in [`Hosts::order`], failures
//! classified into OpenSearch-shaped 502s and 504s that name the host and the cause.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sluice_engine::{EngineError, ErrorCode};

use super::config::UpstreamConfig;
use super::hosts::Hosts;

/// How long an idle pooled connection is kept: under the 60 s+ idle timeouts of common load
/// balancers in front of clusters, so the pool does not hand out connections they closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// A request body to forward: bytes the gateway holds (a request that can be tried on the
/// next host when a host refuses) or the client's stream (sent once, never buffered).
pub enum OutBody {
    /// A body read whole (search-class requests, bounded by `http.max_content_length`).
    Bytes(Bytes),
    /// The client's body, streamed.
    Stream(Body),
}

/// The client and the hosts it spreads requests over.
pub struct UpstreamClient {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    hosts: Hosts,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl UpstreamClient {
    /// Builds the client of `config`: TLS verified against `ca_file` or the system's roots.
    pub fn new(config: &UpstreamConfig) -> anyhow::Result<UpstreamClient> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| anyhow::anyhow!("cannot set up TLS for backend.upstream.hosts: {e}"))?;
        let tls = match &config.ca_file {
            Some(path) => {
                use rustls_pki_types::pem::PemObject;
                let mut roots = rustls::RootCertStore::empty();
                let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "cannot read backend.upstream.ca_file [{}]: {e}",
                            path.display()
                        )
                    })?;
                if certs.is_empty() {
                    anyhow::bail!(
                        "backend.upstream.ca_file [{}] holds no PEM certificate",
                        path.display()
                    );
                }
                for cert in certs {
                    roots.add(cert).map_err(|e| {
                        anyhow::anyhow!(
                            "backend.upstream.ca_file [{}] holds an unusable certificate: {e}",
                            path.display()
                        )
                    })?;
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            None => {
                use hyper_rustls::ConfigBuilderExt;
                builder
                    .with_native_roots()
                    .map_err(|e| anyhow::anyhow!("cannot load the system's CA certificates: {e}"))?
                    .with_no_client_auth()
            }
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector);
        Ok(UpstreamClient {
            client,
            hosts: Hosts::new(&config.hosts),
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
        })
    }

    /// The hosts.
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// Sends `method path_and_query` with `headers` and `body` to the upstream and answers its
    /// response as soon as its headers arrived (the body streams). A host that cannot be
    /// connected to is put in back-off; a replayable request then goes to the next host.
    ///
    /// Errors: 502 `upstream_exception` naming the host and the cause (refused, unreachable
    /// within `connect_timeout`, reset, not HTTP), 504 `upstream_timeout_exception` when the
    /// response headers did not arrive within `request_timeout`.
    ///
    /// # Cancel safety
    /// Dropping the future drops the upstream request: its connection is closed (HTTP/1.1) or
    /// its stream reset (HTTP/2), which OpenSearch takes as the client going away.
    pub async fn send(
        &self,
        method: &Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: OutBody,
    ) -> Result<Response<Incoming>, EngineError> {
        let order = self.hosts.order(Instant::now());
        let mut body = Some(body);
        let mut headers = Some(headers);
        let mut last_error = None;
        for (attempt, &i) in order.iter().enumerate() {
            let host = self.hosts.get(i);
            let Some(this_body) = body.take() else { break };
            let (out, replay) = match this_body {
                OutBody::Bytes(b) => (Body::from(b.clone()), Some(OutBody::Bytes(b))),
                OutBody::Stream(s) => (s, None),
            };
            // The headers are copied only for a request another host may still be sent.
            let last_try = replay.is_none() || attempt + 1 == order.len();
            let mut h = match (last_try, headers.take()) {
                (true, Some(h)) => h,
                (false, Some(h)) => {
                    let copy = h.clone();
                    headers = Some(h);
                    copy
                }
                (_, None) => break,
            };
            body = replay;
            let uri = join(&host.base, path_and_query)?;
            // A body the gateway holds may differ from the client's (an msearch of the
            // admitted items only): its length is the gateway's to say.
            if let Some(OutBody::Bytes(b)) = &body {
                if b.is_empty() {
                    h.remove(http::header::CONTENT_LENGTH);
                } else {
                    h.insert(
                        http::header::CONTENT_LENGTH,
                        http::HeaderValue::from(b.len()),
                    );
                }
            }
            // The `Host` hyper-util would write for an HTTP/1.1 host, made once per host
            // instead of formatted per request (`https://` hosts may speak HTTP/2, which
            // names the host in `:authority`: hyper-util's to decide).
            if let Some(v) = &host.http1_host {
                h.insert(http::header::HOST, v.clone());
            }
            let mut req = Request::new(out);
            *req.method_mut() = method.clone();
            *req.uri_mut() = uri;
            *req.headers_mut() = h;
            match tokio::time::timeout(self.request_timeout, self.client.request(req)).await {
                Ok(Ok(resp)) => {
                    self.hosts.succeeded(i);
                    return Ok(resp);
                }
                Ok(Err(e)) if e.is_connect() => {
                    let backoff = self.hosts.failed(i, Instant::now());
                    let cause = if timed_out(&e) {
                        format!(
                            "not connected within backend.upstream.connect_timeout [{}] ({})",
                            sluice_wire::format_time_value(self.connect_timeout),
                            causes(&e)
                        )
                    } else {
                        causes(&e)
                    };
                    tracing::warn!(host = %host.name, %cause, backoff_ms = backoff.as_millis() as u64,
                        attempt, "upstream host unreachable; skipped until its back-off ends");
                    last_error = Some(EngineError::new(
                        ErrorCode::UpstreamFailed,
                        format!("cannot connect to upstream [{}]: {cause}", host.name),
                    ));
                }
                Ok(Err(e)) => {
                    return Err(EngineError::new(
                        ErrorCode::UpstreamFailed,
                        format!("upstream [{}] failed to answer: {}", host.name, causes(&e)),
                    ));
                }
                Err(_) => {
                    return Err(EngineError::new(
                        ErrorCode::UpstreamTimeout,
                        format!(
                            "upstream [{}] did not answer within backend.upstream.request_timeout [{}]",
                            host.name,
                            sluice_wire::format_time_value(self.request_timeout)
                        ),
                    ));
                }
            }
        }
        Err(last_error.unwrap_or_else(|| {
            EngineError::new(
                ErrorCode::UpstreamFailed,
                "no upstream host to send the request to",
            )
        }))
    }

    /// Sends a bodiless request and reads the whole (small) answer: for the gateway's own calls
    /// (`GET /` at start, listing and cancelling upstream tasks).
    pub async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
    ) -> Result<(http::StatusCode, Bytes), EngineError> {
        let resp = self
            .send(
                &method,
                path_and_query,
                headers.clone(),
                OutBody::Bytes(Bytes::new()),
            )
            .await?;
        let status = resp.status();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .map_err(|e| {
                EngineError::new(
                    ErrorCode::UpstreamFailed,
                    format!(
                        "upstream answer to [{method} {path_and_query}] broke off: {}",
                        causes(&e)
                    ),
                )
            })?
            .to_bytes();
        Ok((status, body))
    }
}

/// `base` (scheme and authority) with `path_and_query`.
fn join(base: &Uri, path_and_query: &str) -> Result<Uri, EngineError> {
    let mut parts = base.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().map_err(|e| {
        EngineError::illegal_argument(format!("invalid request path [{path_and_query}]: {e}"))
    })?);
    Uri::from_parts(parts).map_err(|e| {
        EngineError::illegal_argument(format!("invalid request path [{path_and_query}]: {e}"))
    })
}

/// Whether an error was caused by a timeout (the connector's `connect_timeout` gives an I/O
/// error of kind `TimedOut`).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// An error and its causes, outermost first: hyper's errors say little on their own
/// ("client error (Connect)"), their sources say what happened ("Connection refused").
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}
