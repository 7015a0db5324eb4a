//! `GET _nodes` info on a gateway: a request for the `http` metric by name — what client
//! sniffing asks (`_nodes/_all/http` in opensearch-py and the JavaScript client, `_nodes/http`
//! in the Java, Go and Ruby ones) — is answered with the sluice nodes themselves, as on an
//! embedded node ([`crate::api::nodes`]); every other `_nodes` request (info without the
//! metric named, stats, usage, hot threads) is the upstream's, forwarded.
//!
//! A sniffing client replaces the hosts it was given with the `http.publish_address` of the
//! nodes listed. Forwarded, that listed the upstream's nodes: the client then sent every
//! request straight to the upstream, past the gateway's tagging, throttling and
//! authentication. Info that does not name the metric stays the upstream's: it is what a
//! profile's or an allocation's node ids refer to (`_nodes/_local` through a gateway is the
//! upstream's node, whose id a search profile's shards carry).

use std::sync::Arc;

use crate::http::Path;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};

use crate::api::nodes::{METRICS, OTHER_APIS, info};

use crate::http::RequestMeta;
use crate::state::AppState;

/// `_nodes/{a}[/{b}]` info of the gateway's own nodes when it names `http`, else forwarded.
/// The path's parts are read decoded (`http%2Cos` names `http` too).
pub async fn nodes(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(parts): Path<Vec<String>>,
    req: Request,
) -> Response {
    let decoded = format!("/_nodes/{}", parts.join("/"));
    let owned = (*req.method() == Method::GET)
        .then(|| owned_info(&decoded))
        .flatten();
    let Some((nodes, metrics)) = owned else {
        return crate::http::fallback::forward(State(st), meta, req).await;
    };
    let params = match super::routes::params_of_uri(req.uri()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    info(&st, nodes.as_deref(), metrics.as_deref(), &params)
        .unwrap_or_else(IntoResponse::into_response)
}

/// For a `_nodes` path that names the `http` metric: the nodes and metrics asked for
/// (`None` for the nodes when the path names none); `None` for any other path.
fn owned_info(path: &str) -> Option<(Option<String>, Option<String>)> {
    let parts: Vec<&str> = path
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let is_metrics = |s: &str| s.split(',').all(|m| METRICS.contains(&m.trim()));
    let with_http = |s: &str| is_metrics(s) && s.split(',').any(|m| m.trim() == "http");
    match parts.as_slice() {
        ["_nodes", metrics] if with_http(metrics) => Some((None, Some(metrics.to_string()))),
        ["_nodes", nodes, metrics] if with_http(metrics) && !OTHER_APIS.contains(nodes) => {
            Some((Some(nodes.to_string()), Some(metrics.to_string())))
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
    fn test_info_that_names_the_http_metric_is_the_gateways_own() {
        // What the clients' sniffers ask.
        assert_eq!(
            owned("/_nodes/_all/http"),
            Some((Some("_all"), Some("http")))
        );
        assert_eq!(owned("/_nodes/http"), Some((None, Some("http"))));
        assert_eq!(
            owned("/_nodes/n1,n2/jvm,http"),
            Some((Some("n1,n2"), Some("jvm,http")))
        );
        assert_eq!(owned("/_nodes/os,http"), Some((None, Some("os,http"))));
    }

    #[test]
    fn test_other_nodes_requests_are_the_upstreams() {
        for path in [
            "/_nodes",
            "/_nodes/_local",
            "/_nodes/_all",
            "/_nodes/stats",
            "/_nodes/stats/jvm",
            "/_nodes/n1/stats",
            "/_nodes/usage",
            "/_nodes/hot_threads",
            "/_nodes/n1/hot_threads",
            "/_nodes/jvm",
            "/_nodes/_all/jvm,os",
            "/_nodes/reload_secure_settings",
            "/_nodes/http/stats",
            // Stats and usage of the `http` metric, not info of nodes named so.
            "/_nodes/stats/http",
            "/_nodes/stats/http,jvm",
            "/_nodes/usage/http",
            "/_cluster/health",
        ] {
            assert_eq!(owned(path), None, "{path}");
        }
    }
}
