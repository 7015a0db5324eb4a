//! `GET /_prometheus/metrics` (the path of OpenSearch's prometheus-exporter plugin) and the
//! timer that counts HTTP requests into the node's [`super::NodeMetrics`].

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{HttpSeries, NodeMetrics};
use crate::error::ApiResult;
use crate::http::RequestMeta;
use crate::state::AppState;

/// The action the endpoint needs an admin role for when authentication is on: the figures name
/// every group and the node's load.
pub const METRICS_ACTION: &str = sluice_core::authz::Action::Metrics.name();

/// The Prometheus text exposition format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The route label of a request that matched no route (bounded, unlike its path).
const UNMATCHED_ROUTE: &str = "unmatched";

/// The route label of a request a gateway matched to no route of its own and forwarded
/// whole to its upstream (any API sluice does not answer itself).
const FORWARDED_ROUTE: &str = "forwarded";

/// The routes of this module.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/_prometheus/metrics", get(scrape))
}

async fn scrape(State(st): State<Arc<AppState>>, meta: RequestMeta) -> ApiResult<Response> {
    st.auth
        .authorize_admin(meta.principal.as_deref(), METRICS_ACTION)?;
    let text = st.metrics.render(&st);
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response())
}

/// Counts a request in `sluice_http_requests_total` and its time to response headers in
/// `sluice_http_request_duration_seconds`, labelled with the route pattern it matched: started
/// when the request enters the node's request layers ([`crate::server::app`]), recorded once
/// its response is built.
///
/// A request whose connection closes before the response is not counted (the timer is
/// dropped unrecorded).
pub struct HttpTimer {
    started: Instant,
    method: Method,
    route: Route,
}

/// The route a timed request matched.
enum Route {
    /// Matched by the router.
    Matched(MatchedPath),
    /// Matched by no route of the router, by this pattern (a gateway's forwarded requests).
    Pattern(&'static str),
    /// No route matched.
    None,
}

impl HttpTimer {
    /// Starts timing `req`; `gateway`: the node forwards what matches none of its routes.
    pub fn start(req: &Request, gateway: bool) -> Self {
        let unmatched = if gateway {
            Route::Pattern(FORWARDED_ROUTE)
        } else {
            Route::None
        };
        Self {
            started: Instant::now(),
            method: req.method().clone(),
            route: req
                .extensions()
                .get::<MatchedPath>()
                .cloned()
                .map_or(unmatched, Route::Matched),
        }
    }

    /// Counts the request with the status it was answered.
    pub fn record(self, st: &AppState, status: StatusCode) {
        let route = match &self.route {
            Route::Matched(m) => m.as_str(),
            Route::Pattern(p) => p,
            Route::None => UNMATCHED_ROUTE,
        };
        st.metrics.record_http(
            method_label(&self.method),
            route,
            status.as_u16(),
            self.started.elapsed(),
        );
    }
}

/// The series of one route and method's requests answered 200, resolved at the first such
/// request and kept by a caller that times many requests of that route and method (the
/// gateway's fast lane, `crate::http::lane`), so that the common request is counted without
/// [`super::NodeMetrics`]' lock and lookup (the lookup cost 344 instructions and 19
/// first-level data-cache misses of a proxied search's; BENCHMARKS.md "Pinned series and no
/// process driver"). Any other status goes through [`super::NodeMetrics::record_http`], as
/// [`HttpTimer`]'s does: the series are the same, and none is made before a request is counted
/// in it.
#[derive(Debug)]
pub struct PinnedSeries {
    method: &'static str,
    route: &'static str,
    ok: OnceLock<HttpSeries>,
}

impl PinnedSeries {
    /// The series of `method` requests of the route of `pattern`, as [`HttpTimer`] labels them.
    pub fn new(method: &Method, pattern: &'static str) -> PinnedSeries {
        PinnedSeries {
            method: method_label(method),
            route: pattern,
            ok: OnceLock::new(),
        }
    }

    /// Starts timing a request of this series.
    pub fn start(&self) -> PinnedTimer<'_> {
        PinnedTimer {
            started: Instant::now(),
            series: self,
        }
    }
}

/// [`HttpTimer`] for a request of a [`PinnedSeries`]: the same counts, the same series.
pub struct PinnedTimer<'a> {
    started: Instant,
    series: &'a PinnedSeries,
}

impl PinnedTimer<'_> {
    /// Counts the request with the status it was answered.
    pub fn record(self, metrics: &NodeMetrics, status: StatusCode) {
        let elapsed = self.started.elapsed();
        let series = self.series;
        if status == StatusCode::OK {
            series
                .ok
                .get_or_init(|| metrics.series_ok(series.method, series.route))
                .record(elapsed);
        } else {
            metrics.record_http(series.method, series.route, status.as_u16(), elapsed);
        }
    }
}

/// The `method` label of a request: its method when it is one HTTP defines (RFC 9110's eight
/// and PATCH), else [`OTHER_METHOD`]. Any token is a method on the wire, and each would be a
/// series of its own: a client — before authentication answers its 401 — could add series
/// without end (an outside trial added 36,000 with 2,000 requests).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => OTHER_METHOD,
    }
}

/// The `method` label of every method HTTP does not define: OpenTelemetry's name for it
/// (`http.request.method` in its HTTP semantic conventions).
pub const OTHER_METHOD: &str = "_OTHER";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_only_the_methods_http_defines_are_labels_of_their_own() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        for made_up in ["FOO", "GETX", "get"] {
            let m = Method::from_bytes(made_up.as_bytes()).unwrap();
            assert_eq!(method_label(&m), OTHER_METHOD, "{made_up}");
        }
    }
}
