//! The URL's `index` parameter as the path's index.
//!
//! OpenSearch's handlers read a request's indices with `request.param("index")`, and a
//! request's parameters are its query's and its path's in one map: `GET /_mapping?index=logs`
//! is `GET /logs/_mapping`, `GET /_cat/indices?index=logs` is `GET /_cat/indices/logs`.
//! [`rewrite`] makes that so for every route the OpenSearch route table
//! ([`crate::api::known_params`]) lists both without and with an `{index}` (as `/_x` and
//! `/{index}/_x`, or `/_cat/x` and `/_cat/x/{index}`), before authentication, authorization and
//! routing, so the node's handlers, a gateway's forwarding and authorization all see the one
//! path OpenSearch would act on.
//!
//! Rules:
//! - I1 Only a path that names no index is rewritten: the path's index wins, as OpenSearch's
//!   path parameters overwrite its query's (`test_a_path_index_wins`).
//! - I2 The root `/` is never a route without an index: `/` (the node's banner) and
//!   `/{index}` are different APIs (`test_the_root_is_left_alone`).
//! - I3 The value is the last `index` parameter, decoded as a query's values are (`+` a
//!   space), and put in the path as one segment, percent-encoded, so it can never add a path
//!   segment (`test_the_value_stays_one_segment`); an empty one names all indices and changes
//!   nothing (`test_an_empty_index_names_all`). Every `index` parameter leaves the query;
//!   the others stay, byte for byte (`test_other_parameters_stay`).
//! - I4 A request whose query has neither `ndex` nor a `%` costs a scan of it and nothing
//!   else (`test_most_requests_are_untouched`); an escaped name (`%69ndex`) is read as the
//!   handlers read it (`test_the_index_is_read_as_the_handlers_read_it`).

use std::borrow::Cow;
use std::sync::LazyLock;

use axum::http::{Method, Uri};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// What a path segment may not hold unencoded: the separators of a URL and of its path, `%`
/// itself, and what is never bare in a URL (RFC 3986's path segment, conservatively).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// A route without an index and the one with it, as segments of their patterns.
struct Pair {
    method: Method,
    without: Vec<&'static str>,
    with: Vec<&'static str>,
}

/// The routes a query's `index` moves into the path of, from the OpenSearch route table.
static PAIRS: LazyLock<Vec<Pair>> = LazyLock::new(|| {
    let routes: Vec<(&Method, &str)> = crate::api::known_params::routes().collect();
    let mut pairs = Vec::new();
    for (method, route) in &routes {
        // I2: the root has no segment to keep.
        if route.contains("{index}") || *route == "/" {
            continue;
        }
        let candidates = [format!("/{{index}}{route}"), format!("{route}/{{index}}")];
        for candidate in candidates {
            if let Some((_, with)) = routes
                .iter()
                .find(|(m, r)| m == method && *r == candidate.as_str())
            {
                pairs.push(Pair {
                    method: (*method).clone(),
                    without: segments(route).collect(),
                    with: segments(with).collect(),
                });
            }
        }
    }
    pairs
});

/// The non-empty segments of a path or pattern.
fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

/// The URI OpenSearch would act on for a request of `method` to `uri`: `uri` with its query's
/// `index` moved into the path, or `None` when it stays as it is (see the module's rules).
pub fn rewrite(method: &Method, uri: &Uri) -> Option<Uri> {
    let query = uri.query()?;
    // I4: the cheap test first (a name spelled with escapes, `%69ndex`, has a `%`).
    if !query.contains("ndex") && !query.contains('%') {
        return None;
    }
    let index = query_index(Some(query))?;
    if index.is_empty() {
        return None;
    }
    let path: Vec<&str> = segments(uri.path()).collect();
    let (pair, captured) = PAIRS
        .iter()
        .filter(|p| p.method == *method)
        .find_map(|p| matches(&p.without, &path).map(|c| (p, c)))?;
    let encoded = utf8_percent_encode(&index, SEGMENT).to_string();
    let mut new_path = String::new();
    let mut captured = captured.into_iter();
    for seg in &pair.with {
        new_path.push('/');
        if *seg == "{index}" {
            new_path.push_str(&encoded);
        } else if seg.starts_with('{') {
            new_path.push_str(captured.next()?);
        } else {
            new_path.push_str(seg);
        }
    }
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| {
            let key = kv.split_once('=').map_or(*kv, |(k, _)| k);
            form_urlencoded::parse(key.as_bytes())
                .next()
                .is_none_or(|(k, _)| k != "index")
        })
        .collect();
    if !rest.is_empty() {
        new_path.push('?');
        new_path.push_str(&rest.join("&"));
    }
    new_path.parse().ok()
}

/// The URL's `index` parameter as OpenSearch's `request.param("index")` and sluice's handlers
/// (`Query<Params>`) read it: the last one, name and value decoded as a query's are (`%69ndex`
/// is `index`, `+` a space), a bare `index` an empty value. Every reader of a query's `index`
/// that decides what a request may touch (authorization, a gateway's tagging) takes it from
/// here, so none reads another value than the handler acts on (I3).
pub fn query_index(query: Option<&str>) -> Option<Cow<'_, str>> {
    form_urlencoded::parse(query?.as_bytes())
        .filter(|(k, _)| k == "index")
        .map(|(_, v)| v)
        .last()
}

/// The path segments `pattern`'s parameters capture, in order, when `path` matches it.
fn matches<'p>(pattern: &[&str], path: &[&'p str]) -> Option<Vec<&'p str>> {
    if pattern.len() != path.len() {
        return None;
    }
    let mut captured = Vec::new();
    for (want, got) in pattern.iter().zip(path) {
        if want.starts_with('{') {
            captured.push(*got);
        } else if want != got {
            return None;
        }
    }
    Some(captured)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::FromRequestParts;

    fn rw(method: Method, uri: &str) -> Option<String> {
        rewrite(&method, &uri.parse().unwrap()).map(|u| u.to_string())
    }

    #[test]
    fn test_routes_with_an_index_sibling_take_the_parameter() {
        let cases = [
            (Method::GET, "/_mapping?index=logs", "/logs/_mapping"),
            (Method::GET, "/_stats/docs?index=logs", "/logs/_stats/docs"),
            (
                Method::GET,
                "/_cat/indices?index=logs&v",
                "/_cat/indices/logs?v",
            ),
            (Method::GET, "/_cat/count?index=a,b", "/_cat/count/a,b"),
            (
                Method::GET,
                "/_cluster/health?index=logs",
                "/_cluster/health/logs",
            ),
            (Method::POST, "/_refresh?index=logs", "/logs/_refresh"),
            (
                Method::GET,
                "/_settings/index.*?index=logs",
                "/logs/_settings/index.*",
            ),
            (
                Method::GET,
                "/_alias/current?index=logs",
                "/logs/_alias/current",
            ),
            (Method::POST, "/_search?index=logs-*", "/logs-*/_search"),
            (
                Method::POST,
                "/_bulk?index=logs&refresh=true",
                "/logs/_bulk?refresh=true",
            ),
        ];
        for (method, from, to) in cases {
            assert_eq!(
                rw(method.clone(), from).as_deref(),
                Some(to),
                "{method} {from}"
            );
        }
    }

    #[test]
    fn test_a_path_index_wins() {
        assert_eq!(rw(Method::GET, "/logs/_mapping?index=other"), None);
        assert_eq!(rw(Method::GET, "/_cat/indices/logs?index=other"), None);
    }

    #[test]
    fn test_the_root_is_left_alone() {
        assert_eq!(rw(Method::GET, "/?index=logs"), None);
        assert_eq!(rw(Method::DELETE, "/?index=logs"), None);
    }

    #[test]
    fn test_the_value_stays_one_segment() {
        assert_eq!(
            rw(Method::GET, "/_mapping?index=..%2F_cluster%2Fsettings").as_deref(),
            Some("/..%2F_cluster%2Fsettings/_mapping")
        );
        assert_eq!(
            rw(Method::GET, "/_mapping?index=a+b%3Fc%23").as_deref(),
            Some("/a%20b%3Fc%23/_mapping")
        );
    }

    #[test]
    fn test_the_index_is_read_as_the_handlers_read_it() {
        let read = |q: &str| query_index(Some(q)).map(|v| v.into_owned());
        assert_eq!(read("index=a&%69ndex=b").as_deref(), Some("b"));
        assert_eq!(read("index=a&index").as_deref(), Some(""));
        assert_eq!(read("index=a+b%2Cc").as_deref(), Some("a b,c"));
        assert_eq!(read("myindex=a"), None);
        assert_eq!(query_index(None), None);
        // As the handlers' parameter map reads them.
        for q in ["index=a&%69ndex=b", "index=a&index", "index=a+b%2Cc&x=1"] {
            let (mut parts, ()) = axum::http::Request::get(format!("/_search?{q}"))
                .body(())
                .unwrap()
                .into_parts();
            let params = futures::executor::block_on(
                crate::http::Query::<crate::http::Params>::from_request_parts(&mut parts, &()),
            )
            .unwrap();
            assert_eq!(params.0.get("index").cloned(), read(q), "{q}");
        }
        assert_eq!(
            rw(Method::GET, "/_mapping?index=a&%69ndex=b").as_deref(),
            Some("/b/_mapping")
        );
        assert_eq!(rw(Method::GET, "/_mapping?index=a&index"), None);
        assert_eq!(
            rw(Method::GET, "/_mapping?%69ndex=b").as_deref(),
            Some("/b/_mapping")
        );
        assert_eq!(
            rw(Method::GET, "/_cat/indices?%69%6E%64%65%78=b&v").as_deref(),
            Some("/_cat/indices/b?v")
        );
    }

    #[test]
    fn test_an_empty_index_names_all() {
        assert_eq!(rw(Method::GET, "/_mapping?index="), None);
        assert_eq!(rw(Method::GET, "/_mapping?index=logs&index="), None);
    }

    #[test]
    fn test_other_parameters_stay() {
        assert_eq!(
            rw(
                Method::GET,
                "/_stats?level=indices&index=a&index=b&pretty&x=%2B1"
            )
            .as_deref(),
            Some("/b/_stats?level=indices&pretty&x=%2B1")
        );
        // A parameter whose name merely ends in `index` is another parameter.
        assert_eq!(rw(Method::GET, "/_mapping?expand_index=x"), None);
        assert_eq!(
            rw(Method::GET, "/_mapping?myindex=x&index=logs").as_deref(),
            Some("/logs/_mapping?myindex=x")
        );
    }

    #[test]
    fn test_most_requests_are_untouched() {
        assert_eq!(rw(Method::GET, "/_mapping"), None);
        assert_eq!(rw(Method::GET, "/_mapping?pretty"), None);
        // A route with no sibling of that method keeps its parameter for its handler.
        assert_eq!(rw(Method::GET, "/_nodes?index=logs"), None);
        assert_eq!(rw(Method::POST, "/_mapping?index=logs"), None);
    }
}
