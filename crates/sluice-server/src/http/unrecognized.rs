//! OpenSearch's check of a request's URL parameters (`BaseRestHandler`): a parameter the
//! route's handler does not read is refused, 400 `illegal_argument_exception`, naming it and
//! the known parameters that look like it —
//! `request [/_wlm/stats] contains unrecognized parameter: [incude] -> did you mean [include]?`
//! — so that a misspelt parameter is an error, not silently ignored.
//!
//! The routes of workload management check it in their handlers (a gateway answers them
//! itself), each naming the parameters it reads. The embedded node's other routes are checked
//! by a route layer ([`check_route`]) against what OpenSearch's REST specification lists for
//! each API ([`crate::api::known_params`]), so that no parameter OpenSearch accepts is
//! refused, whether or not sluice acts on it; a route the table does not list is not checked.
//! The parameters every route reads ([`EVERY_ROUTE`]) are always known.

use axum::extract::FromRequestParts;
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sluice_engine::EngineError;

use crate::error::ApiError;
use crate::http::{Params, Query};

/// What every route reads, as OpenSearch's REST layer consumes them before the handler runs:
/// the rendering parameters, and the body given as a parameter.
pub const EVERY_ROUTE: [&str; 7] = [
    "error_trace",
    "filter_path",
    "format",
    "human",
    "pretty",
    "source",
    "source_content_type",
];

/// How alike two parameter names must be for the error to suggest one for the other: Lucene's
/// `LevenshteinDistance` similarity (1 − edits ÷ the longer length), above OpenSearch's 0.5.
const SUGGEST_ABOVE: f32 = 0.5;

/// Refuses the request to `path` (the URL's path, as the error names it) when `params` holds
/// one that is neither in `known` nor in [`EVERY_ROUTE`].
pub fn refuse_unrecognized(path: &str, params: &Params, known: &[&str]) -> Result<(), EngineError> {
    let is_known = |p: &str| known.contains(&p) || EVERY_ROUTE.contains(&p);
    let mut unknown: Vec<&str> = params
        .keys()
        .map(String::as_str)
        .filter(|p| !is_known(p))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_unstable();
    let candidates: Vec<&str> = known.iter().chain(EVERY_ROUTE.iter()).copied().collect();
    Err(EngineError::illegal_argument(message(
        path,
        &unknown,
        &candidates,
    )))
}

/// The route layer of the embedded node's routes: refuses a request with a URL parameter its
/// route does not know ([`crate::api::known_params::known`]), or with a timeout it takes that
/// is not a time value ([`timeouts`](crate::http::timeouts): a cluster-manager timeout, which no
/// handler reads, or the action's `timeout`, which only some do); lets every other request through (a query string that cannot be
/// read is the handler's to refuse).
///
/// # Cancel safety
/// Dropping the future drops the request, as for any handler.
pub async fn check_route(req: Request, next: Next) -> Response {
    let known = req.extensions().get::<MatchedPath>().and_then(|route| {
        // A HEAD is served by the route's GET unless it has its own.
        crate::api::known_params::known(req.method(), route.as_str()).or_else(|| {
            (req.method() == Method::HEAD)
                .then(|| crate::api::known_params::known(&Method::GET, route.as_str()))
                .flatten()
        })
    });
    let (Some(known), Some(_)) = (known, req.uri().query()) else {
        return next.run(req).await;
    };
    let (mut parts, body) = req.into_parts();
    if let Ok(Query(params)) = Query::<Params>::from_request_parts(&mut parts, &()).await
        && let Err(refused) = refuse_unrecognized(parts.uri.path(), &params, known).and_then(|()| {
            let takes_timeout = known.contains(&crate::http::timeouts::TIMEOUT);
            crate::http::timeouts::refuse_unparsable(&params, takes_timeout)
        })
    {
        return ApiError::Engine(refused).into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

/// OpenSearch's words (`BaseRestHandler.unrecognized`): each unknown parameter (sorted), with
/// the candidates most like it, most alike first, then by name.
fn message(path: &str, unknown: &[&str], candidates: &[&str]) -> String {
    let plural = if unknown.len() > 1 { "s" } else { "" };
    let mut out = format!("request [{path}] contains unrecognized parameter{plural}: ");
    for (i, name) in unknown.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('[');
        out.push_str(name);
        out.push(']');
        let mut alike: Vec<(f32, &str)> = candidates
            .iter()
            .map(|c| (similarity(name, c), *c))
            .filter(|(s, _)| *s > SUGGEST_ABOVE)
            .collect();
        alike.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        alike.dedup_by(|a, b| a.1 == b.1);
        match alike.as_slice() {
            [] => {}
            [(_, one)] => out.push_str(&format!(" -> did you mean [{one}]?")),
            many => {
                let names: Vec<&str> = many.iter().map(|(_, c)| *c).collect();
                out.push_str(&format!(" -> did you mean any of [{}]?", names.join(", ")));
            }
        }
    }
    out
}

/// Lucene's `LevenshteinDistance.getDistance`: 1 − (edits ÷ the longer length), counted in
/// UTF-16 units as Java does; two empty names are alike (1), one empty name is not (0).
fn similarity(a: &str, b: &str) -> f32 {
    let a: Vec<u16> = a.encode_utf16().collect();
    let b: Vec<u16> = b.encode_utf16().collect();
    if a.is_empty() || b.is_empty() {
        return if a.len() == b.len() { 1.0 } else { 0.0 };
    }
    let mut previous: Vec<usize> = (0..=a.len()).collect();
    let mut current = vec![0; a.len() + 1];
    for (j, &bc) in b.iter().enumerate() {
        current[0] = j + 1;
        for (i, &ac) in a.iter().enumerate() {
            let cost = usize::from(ac != bc);
            current[i + 1] = (current[i] + 1)
                .min(previous[i + 1] + 1)
                .min(previous[i] + cost);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    // Lengths of parameter names: far below f32's exact integers.
    #[allow(clippy::cast_precision_loss)]
    let (edits, longer) = (previous[a.len()] as f32, a.len().max(b.len()) as f32);
    1.0 - edits / longer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::params_of;

    #[test]
    fn test_known_and_every_route_parameters_pass() {
        let params = params_of(&[("include", "buckets"), ("pretty", ""), ("filter_path", "x")]);
        assert!(refuse_unrecognized("/_wlm/stats", &params, &["include"]).is_ok());
    }

    #[test]
    fn test_a_misspelt_parameter_is_named_with_what_it_looks_like() {
        let params = params_of(&[("incude", "buckets")]);
        let err = refuse_unrecognized("/_wlm/stats", &params, &["include", "size"]).unwrap_err();
        assert_eq!(
            err.reason,
            "request [/_wlm/stats] contains unrecognized parameter: [incude] -> did you mean [include]?"
        );
    }

    #[test]
    fn test_several_unknown_parameters_sorted_each_with_its_suggestions() {
        let params = params_of(&[("zzz", "1"), ("prety", ""), ("ordr", "asc")]);
        let err = refuse_unrecognized("/_list/wlm_stats", &params, &["order", "sort"]).unwrap_err();
        assert_eq!(
            err.reason,
            "request [/_list/wlm_stats] contains unrecognized parameters: [ordr] -> did you mean \
             [order]?, [prety] -> did you mean [pretty]?, [zzz]"
        );
    }

    #[test]
    fn test_similarity_is_lucenes() {
        assert!((similarity("incude", "include") - (1.0 - 1.0 / 7.0)).abs() < 1e-6);
        assert_eq!(similarity("", ""), 1.0);
        assert_eq!(similarity("a", ""), 0.0);
        assert_eq!(similarity("abc", "abc"), 1.0);
        // Two of four differ: exactly 0.5, not suggested.
        assert_eq!(similarity("abcd", "abxy"), 0.5);
    }
}
