//! `GET _nodes` info on a gateway: a request that can tell a client where to connect (the
//! `http` metric, asked for by name or as part of every metric) is answered with the sluice
//! nodes themselves, as on an embedded node ([`crate::api::nodes`]); every other `_nodes`
//! request (stats, usage, hot threads, info without `http`) is the upstream's, forwarded.
//!
//! Client sniffing (`GET _nodes/_all/http` in opensearch-py, `_nodes/http` in the Java and Go
//! clients) replaces the hosts a client was given with the `http.publish_address` of the
//! nodes listed. Forwarded, that listed the upstream's nodes: a sniffing client then sent
//! every request straight to the upstream, past the gateway's tagging, throttling and
//! authentication.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};

use crate::api::nodes::{METRICS, info};
use sluice_engine::EngineError;

use crate::error::ApiError;
use crate::http::{Params, RequestMeta};
use crate::state::AppState;

/// `_nodes` info of the gateway's own nodes when it includes `http`, else forwarded.
pub async fn nodes(State(st): State<Arc<AppState>>, meta: RequestMeta, req: Request) -> Response {
    let owned = (*req.method() == Method::GET)
        .then(|| owned_info(req.uri().path()))
        .flatten();
    let Some((nodes, metrics)) = owned else {
        return crate::http::fallback::forward(State(st), meta, req).await;
    };
    let params = match axum::extract::Query::<Params>::try_from_uri(req.uri()) {
        Ok(p) => p.0,
        Err(e) => {
            let q = req.uri().query().unwrap_or("");
            return ApiError::Engine(EngineError::illegal_argument(format!(
                "invalid query string [{q}]: {e}"
            )))
            .into_response();
        }
    };
    info(&st, nodes.as_deref(), metrics.as_deref(), &params)
        .unwrap_or_else(IntoResponse::into_response)
}

/// The first path segments under `_nodes` that are other APIs than node info.
const OTHER_APIS: [&str; 6] = [
    "stats",
    "usage",
    "hot_threads",
    "hotthreads",
    "_hot_threads",
    "reload_secure_settings",
];

/// For a `_nodes` path whose answer lists the `http` section: the nodes and metrics asked
/// for (`None` each when the path names none); `None` for a path that is another API, or
/// info without `http`.
fn owned_info(path: &str) -> Option<(Option<String>, Option<String>)> {
    let parts: Vec<&str> = path
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let is_metrics = |s: &str| {
        s.split(',')
            .all(|m| METRICS.contains(&m.trim()) || m.trim() == "_all")
    };
    let with_http = |s: &str| s.split(',').any(|m| matches!(m.trim(), "http" | "_all"));
    match parts.as_slice() {
        ["_nodes"] => Some((None, None)),
        ["_nodes", one] if is_metrics(one) => with_http(one).then(|| (None, Some(one.to_string()))),
        ["_nodes", one] if OTHER_APIS.contains(one) => None,
        ["_nodes", nodes] => Some((Some(nodes.to_string()), None)),
        ["_nodes", nodes, metrics] if is_metrics(metrics) => {
            with_http(metrics).then(|| (Some(nodes.to_string()), Some(metrics.to_string())))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(path: &str) -> Option<(Option<&'static str>, Option<&'static str>)> {
        owned_info(path).map(|(n, m)| {
            (
                n.map(|n| &*Box::leak(n.into_boxed_str())),
                m.map(|m| &*Box::leak(m.into_boxed_str())),
            )
        })
    }

    #[test]
    fn test_info_that_lists_http_addresses_is_the_gateways_own() {
        // What the clients' sniffers ask.
        assert_eq!(
            owned("/_nodes/_all/http"),
            Some((Some("_all"), Some("http")))
        );
        assert_eq!(owned("/_nodes/http"), Some((None, Some("http"))));
        assert_eq!(owned("/_nodes"), Some((None, None)));
        assert_eq!(owned("/_nodes/_local"), Some((Some("_local"), None)));
        assert_eq!(owned("/_nodes/_all"), Some((None, Some("_all"))));
        assert_eq!(
            owned("/_nodes/n1,n2/jvm,http"),
            Some((Some("n1,n2"), Some("jvm,http")))
        );
        assert_eq!(owned("/_nodes/os,http"), Some((None, Some("os,http"))));
    }

    #[test]
    fn test_other_nodes_apis_and_info_without_http_are_the_upstreams() {
        for path in [
            "/_nodes/stats",
            "/_nodes/stats/jvm",
            "/_nodes/n1/stats",
            "/_nodes/usage",
            "/_nodes/hot_threads",
            "/_nodes/n1/hot_threads",
            "/_nodes/jvm",
            "/_nodes/_all/jvm,os",
            "/_nodes/reload_secure_settings",
            "/_cluster/health",
        ] {
            assert_eq!(owned(path), None, "{path}");
        }
    }
}
