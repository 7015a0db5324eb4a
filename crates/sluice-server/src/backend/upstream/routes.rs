//! The gateway's router: sluice's own routes ([`crate::api::owned_routes`]), `_nodes` info
//! that lists addresses to connect to ([`super::nodes`]), the search-class
//! routes admitted here and forwarded by [`super::Upstream::execute`], `_bulk` and `_mget`
//! authorized item by item ([`super::doc_items`]), `POST _aliases` action by action
//! ([`super::aliases`]), and every other request forwarded
//! unchanged ([`crate::http::fallback::forward`]).
//!
//! Each search-class handler reads the request (its body bounded by `http.max_content_length`:
//! a search body is small, and the gateway may rewrite it), builds the [`TaskSpec`] admission
//! tags and throttles exactly as on an embedded node, applies the group's search settings to
//! what it forwards (`default_search_timeout` → `timeout`, `cancel_after_time_interval` → the
//! parameter, also enforced here), and streams the upstream's answer back. Where OpenSearch
//! takes no `timeout` — `_count` refuses the parameter, and a search template drops it when
//! the rendered source replaces the search's — the group's timeout goes into a template's
//! inline `source` object, and is otherwise enforced here as a deadline that cancels the
//! request ([`TimeoutWay`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::http::Path;
use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use bytes::Bytes;
use http::request::Parts;
use serde_json::Value;
use sluice_core::authz::Action;
use sluice_core::search_settings::GroupSearchSettings;
use sluice_engine::EngineError;

use super::scrolls::ScrollEntry;
use super::sniff::{Format, ScrollIdSniffer};
use super::{Call, stream_back};
use crate::admission::{Admitted, Inherited, TaskSpec, admit, requested_cancel_after};
use crate::auth::{authorize_scroll, route};
use crate::error::{ApiError, ApiResult};
use crate::http::target::split_once_ascii;
use crate::http::{BodyLimit, Params, RequestMeta};
use crate::state::AppState;
use crate::tasks::{Description, actions};

/// The gateway's router (`backend.type: upstream`).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .merge(crate::api::owned_routes(&state))
        .route("/_cluster/settings", any(super::settings::cluster_settings))
        .route("/_cluster/health", any(super::health::cluster_health))
        .route(
            "/_cluster/health/{index}",
            any(super::health::cluster_health),
        )
        .route("/_tasks/{task_id}", get(super::tasks::get_task))
        .route("/_tasks/{task_id}/_cancel", post(super::tasks::cancel_one))
        .route("/_nodes/{a}", any(super::nodes::nodes))
        .route("/_nodes/{a}/{b}", any(super::nodes::nodes))
        .route("/_search", any(search))
        .route("/{index}/_search", any(search))
        .route("/_count", any(count))
        .route("/{index}/_count", any(count))
        .route("/_search/template", any(search_template))
        .route("/{index}/_search/template", any(search_template))
        .route("/_msearch", any(msearch))
        .route("/{index}/_msearch", any(msearch))
        .route("/_msearch/template", any(msearch_template))
        .route("/{index}/_msearch/template", any(msearch_template))
        .route("/_bulk", any(bulk))
        .route("/{index}/_bulk", any(bulk))
        .route("/{index}/_delete_by_query", any(delete_by_query))
        .route("/{index}/_update_by_query", any(update_by_query))
        .route("/_reindex", any(reindex))
        .route("/_rank_eval", any(rank_eval))
        .route("/{index}/_rank_eval", any(rank_eval))
        .route("/_plugins/_sql", any(sql))
        .route("/_opendistro/_sql", any(sql))
        .route("/_plugins/_ppl", any(ppl))
        .route("/_opendistro/_ppl", any(ppl))
        .route("/_plugins/_asynchronous_search", any(asynchronous_search))
        .route(
            "/{index}/_plugins/_asynchronous_search",
            any(asynchronous_search),
        )
        .route(
            "/_opendistro/_asynchronous_search",
            any(asynchronous_search),
        )
        .route(
            "/{index}/_opendistro/_asynchronous_search",
            any(asynchronous_search),
        )
        .route("/_async_search", any(async_search))
        .route("/{index}/_async_search", any(async_search))
        .route("/{index}/_eql/search", any(eql))
        .route("/_sql", any(es_sql))
        .route("/{index}/_knn_search", any(knn_search))
        .route("/_mget", any(mget))
        .route("/{index}/_mget", any(mget))
        .route("/_aliases", any(super::aliases::aliases))
        .route("/{index}", any(super::aliases::index_root))
        .route("/_search/scroll", any(scroll))
        .route("/_search/scroll/{scroll_id}", any(scroll))
        // A HEAD where OpenSearch answers none (a search, a count …) is refused here, not
        // forwarded past admission to an upstream that might run it.
        .route_layer(axum::middleware::from_fn(
            crate::http::fallback::refuse_head,
        ))
        .method_not_allowed_fallback(crate::http::fallback::method_not_allowed)
        .fallback(crate::http::fallback::forward)
        .with_state(state)
}

/// What a search-class route is, for admission and for what is forwarded.
#[derive(Clone, Copy)]
struct Kind {
    action: &'static str,
    /// The route takes OpenSearch's search parameters (`timeout`, `cancel_after_time_interval`).
    search_params: bool,
    /// The body is a search template (its references are those of its source).
    template: bool,
    /// How the group's search timeout reaches the search.
    timeout: TimeoutWay,
}

/// How a forwarded request carries the group's `default_search_timeout`, as the upstream's
/// API allows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TimeoutWay {
    /// The `timeout` parameter (`_search`).
    Param,
    /// The template's inline `source` object, where OpenSearch reads it; a template without
    /// one (a stored `id`, a `source` string) is bounded by [`TimeoutWay::Enforced`]
    /// (`_search/template`: OpenSearch parses its `timeout` parameter but drops it, as the
    /// rendered source replaces the search's).
    TemplateSource,
    /// A deadline the gateway enforces by cancelling the request
    /// ([`Admitted::bound_by_timeout`]): `_count`, whose API refuses a `timeout`.
    Enforced,
}

const SEARCH: Kind = Kind {
    action: actions::SEARCH,
    search_params: true,
    template: false,
    timeout: TimeoutWay::Param,
};
const SEARCH_TEMPLATE: Kind = Kind {
    template: true,
    timeout: TimeoutWay::TemplateSource,
    ..SEARCH
};
const COUNT: Kind = Kind {
    action: actions::SEARCH,
    search_params: false,
    template: false,
    timeout: TimeoutWay::Enforced,
};

/// The path's one parameter (an index expression or a scroll id), when the route has one.
type PathParam = Option<Path<String>>;

/// Searches: `/_search`, `/{index}/_search`.
async fn search(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
) -> Response {
    let index = index_of(index, req.uri());
    admitted_or_forward(st.0, meta, index, req, SEARCH).await
}

/// Search templates: `/_search/template`, `/{index}/_search/template`.
async fn search_template(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
) -> Response {
    let index = index_of(index, req.uri());
    admitted_or_forward(st.0, meta, index, req, SEARCH_TEMPLATE).await
}

async fn count(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
) -> Response {
    let index = index_of(index, req.uri());
    admitted_or_forward(st.0, meta, index, req, COUNT).await
}

async fn msearch(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
) -> Response {
    let index = index.map(|p| p.0).or_else(|| url_index(req.uri()));
    msearch_or_forward(st.0, meta, index, req, false).await
}

async fn msearch_template(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
) -> Response {
    let index = index.map(|p| p.0).or_else(|| url_index(req.uri()));
    msearch_or_forward(st.0, meta, index, req, true).await
}

async fn bulk(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
) -> Response {
    super::doc_items::bulk(st.0, meta, index.map(|p| p.0), req).await
}

async fn delete_by_query(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    req: Request,
) -> Response {
    by_query_or_forward(st.0, meta, index, req, false).await
}

async fn update_by_query(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    req: Request,
) -> Response {
    by_query_or_forward(st.0, meta, index, req, true).await
}

/// A by-query action: admitted ([`super::search_apis::by_query`]); other methods pass through.
async fn by_query_or_forward(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    req: Request,
    update: bool,
) -> Response {
    super::search_apis::by_query(st, meta, index, req, update).await
}

/// Defines a handler per API of [`super::search_apis`] that runs searches upstream.
macro_rules! search_api_routes {
    ($($name:ident => $api:ident),* $(,)?) => {$(
        async fn $name(
            st: State<Arc<AppState>>,
            meta: RequestMeta,
            index: PathParam,
            req: Request,
        ) -> Response {
            super::search_apis::admitted_or_forward(st, meta, index, req, &super::search_apis::$api)
                .await
        }
    )*};
}

search_api_routes! {
    reindex => REINDEX,
    rank_eval => RANK_EVAL,
    sql => SQL,
    ppl => PPL,
    asynchronous_search => ASYNCHRONOUS_SEARCH,
    async_search => ASYNC_SEARCH,
    eql => EQL,
    es_sql => ES_SQL,
    knn_search => KNN_SEARCH,
}

async fn mget(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
) -> Response {
    super::doc_items::mget(st.0, meta, index.map(|p| p.0), req).await
}

async fn scroll(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    id: PathParam,
    req: Request,
) -> Response {
    scroll_or_forward(st.0, meta, id.map(|p| p.0), req).await
}

/// The route's index expression: the path's, else the URL's `index` parameter, else `_all`,
/// as OpenSearch's handlers read it (`request.param("index")` is the query's when the path
/// names none): tagged, authorized and admitted on the indices the upstream will search.
fn index_of(index: PathParam, uri: &http::Uri) -> String {
    index
        .map(|p| p.0)
        .or_else(|| url_index(uri))
        .unwrap_or_else(|| "_all".to_string())
}

/// The URL's `index` parameter as the handlers read it
/// ([`crate::http::url_index::query_index`]), when it names one (an empty one names all, as
/// `_all`).
pub(super) fn url_index(uri: &http::Uri) -> Option<String> {
    crate::http::url_index::query_index(uri.query())
        .filter(|i| !i.is_empty())
        .map(|i| i.into_owned())
}

/// Whether a method is one a search-class route admits (others pass through unchanged).
fn is_search_method(m: &Method) -> bool {
    *m == Method::GET || *m == Method::POST
}

async fn admitted_or_forward(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    req: Request,
    kind: Kind,
) -> Response {
    if !is_search_method(req.method()) {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    run_admitted(st, meta, index, req, kind)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn msearch_or_forward(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: Option<String>,
    req: Request,
    template: bool,
) -> Response {
    if !is_search_method(req.method()) {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    super::msearch::run(st, meta, index, req, template)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn scroll_or_forward(
    st: Arc<AppState>,
    meta: RequestMeta,
    path_id: Option<String>,
    req: Request,
) -> Response {
    let result = if *req.method() == Method::DELETE {
        clear_scrolls(st, meta, path_id, req).await
    } else if is_search_method(req.method()) {
        run_scroll(st, meta, path_id, req).await
    } else {
        return crate::http::fallback::forward(State(st), meta, req).await;
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A search-class request read for forwarding.
pub(super) struct Read {
    /// Boxed: 224 bytes, moved from future to future on the way to the call otherwise
    /// (BENCHMARKS.md "The allocator's cache trims, and the answer boxed").
    pub parts: Box<Parts>,
    pub params: Params,
    pub body: Bytes,
}

/// Reads the request: its query parameters and its body, up to `http.max_content_length`
/// (a body announced over it refused from the head, [`crate::http::body::announced_over`]).
pub(super) async fn read(req: Request) -> ApiResult<Read> {
    let (parts, body) = req.into_parts();
    let limit = parts
        .extensions
        .get::<BodyLimit>()
        .map_or(u64::MAX, |l| l.0);
    if crate::http::body::announced_over(&parts.headers, limit) {
        return Err(ApiError::TooLarge { limit });
    }
    let params = params_of(&parts)?;
    let body = axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX))
        .await
        .map_err(|e| {
            // Over the limit, or the body itself broke off or was malformed (a bad chunk).
            let e = e.into_inner();
            if e.is::<http_body_util::LengthLimitError>() {
                ApiError::TooLarge { limit }
            } else {
                ApiError::Engine(EngineError::parsing(format!(
                    "failed to read request body: {}",
                    super::client::causes(&*e)
                )))
            }
        })?;
    Ok(Read {
        parts: Box::new(parts),
        params,
        body,
    })
}

/// The request's query parameters.
fn params_of(parts: &Parts) -> ApiResult<Params> {
    params_of_uri(&parts.uri)
}

/// The query parameters of `uri`; a query that does not parse is a 400 naming it.
// axum's `Query` as a parser, not an extractor: its refusal is mapped to OpenSearch's here.
#[allow(clippy::disallowed_types)]
pub(super) fn params_of_uri(uri: &http::Uri) -> ApiResult<Params> {
    Ok(uri
        .query()
        .map(|q| {
            axum::extract::Query::<Params>::try_from_uri(uri)
                .map(|p| p.0)
                .map_err(|e| {
                    EngineError::illegal_argument(format!("invalid query string [{q}]: {e}"))
                })
        })
        .transpose()?
        .unwrap_or_default())
}

/// The client's address, for identity forwarding.
pub(super) fn client_ip(parts: &Parts) -> Option<std::net::IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// What is forwarded of a request read whole (`parts`, `body`): its method, its path and
/// query with `set` parameters replacing any of the same name, and its headers as the upstream
/// identity rewrites them for `meta`'s principal ([`super::headers::Identity::outbound`]).
pub(super) fn call_as(
    up: &super::Upstream,
    meta: &RequestMeta,
    parts: &Parts,
    set: &[(&str, String)],
    body: bytes::Bytes,
) -> Call {
    call_with_headers(up, meta, parts, parts.headers.clone(), set, body)
}

/// [`call_as`] for a request whose parts are not needed afterwards: its headers are moved
/// into the call, not copied (once per proxied search).
pub(super) fn into_call_as(
    up: &super::Upstream,
    meta: &RequestMeta,
    mut parts: Box<Parts>,
    set: &[(&str, String)],
    body: bytes::Bytes,
) -> Call {
    let headers = std::mem::take(&mut parts.headers);
    call_with_headers(up, meta, &parts, headers, set, body)
}

/// The call of `parts` with `headers` (the request's own) rewritten for the upstream.
fn call_with_headers(
    up: &super::Upstream,
    meta: &RequestMeta,
    parts: &Parts,
    mut headers: http::HeaderMap,
    set: &[(&str, String)],
    body: bytes::Bytes,
) -> Call {
    up.identity()
        .outbound(&mut headers, meta.principal.as_deref(), client_ip(parts));
    Call {
        method: parts.method.clone(),
        path_and_query: with_params(parts, set),
        headers,
        body,
        raw: None,
    }
}

/// The call of a fast-lane request (`parts`, and `lane`'s header lines as sent): [`into_call_as`]
/// with the client's headers forwarded from its own bytes ([`super::h1::RawHeaders`]) rather
/// than moved out of its header map and rewritten there, which cost about 2,000 instructions
/// more a proxied search (BENCHMARKS.md "Leaner heads").
fn lane_call(
    up: &super::Upstream,
    meta: &RequestMeta,
    parts: &Parts,
    lane: Lane,
    set: &[(&str, String)],
    body: bytes::Bytes,
) -> Call {
    let Lane { mut raw, client } = lane;
    let mut headers = http::HeaderMap::new();
    up.identity().outbound_raw(
        &mut raw,
        &mut headers,
        meta.principal.as_deref(),
        Some(client),
    );
    Call {
        method: parts.method.clone(),
        path_and_query: with_params(parts, set),
        headers,
        body,
        raw: Some(raw),
    }
}

/// The request's path and query with `set` parameters replacing any of the same name.
pub(super) fn with_params(parts: &Parts, set: &[(&str, String)]) -> String {
    let path = parts.uri.path();
    if set.is_empty() {
        // The usual search: its target forwarded as sent.
        return parts
            .uri
            .path_and_query()
            .map_or(path, |pq| pq.as_str())
            .to_string();
    }
    let mut pairs: Vec<String> = parts
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let key = p.split('=').next().unwrap_or("");
            !set.iter().any(|(k, _)| *k == key)
        })
        .map(str::to_string)
        .collect();
    pairs.extend(set.iter().map(|(k, v)| format!("{k}={v}")));
    if pairs.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", pairs.join("&"))
    }
}

/// A duration as a time-value parameter (`1500ms`; `-1` for none).
pub(super) fn time_param(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{}ms", d.as_millis()),
        None => "-1".to_string(),
    }
}

/// How a group's integer search setting gives a request's value from the request's own.
type ShardSetting = fn(&GroupSearchSettings, Option<u32>) -> Option<u32>;

/// The search parameters the gateway forwards for an admitted request: the `timeout`,
/// `max_concurrent_shard_requests` and `batched_reduce_size` the group's settings give when they
/// differ from the request's own, and what is left of the task's `cancel_after_time_interval`
/// (queue time counts, as on an embedded node). (A group's `search.max_buckets` has no request
/// parameter: the upstream's own setting applies, docs/compatibility.md.)
fn search_params(
    admitted: &Admitted,
    params: &Params,
    body: &[u8],
    kind: Kind,
) -> Vec<(&'static str, String)> {
    let mut set = Vec::new();
    let group = admitted.search_settings();
    let shard_settings: [(&str, ShardSetting); 2] = [
        (
            "max_concurrent_shard_requests",
            GroupSearchSettings::max_concurrent_shard_requests,
        ),
        (
            "batched_reduce_size",
            GroupSearchSettings::batched_reduce_size,
        ),
    ];
    // Most groups set neither: their requests' parameters are not looked up.
    let group_sets_shards =
        group.max_concurrent_shard_requests.is_some() || group.batched_reduce_size.is_some();
    for (key, effective_of) in shard_settings.into_iter().filter(|_| group_sets_shards) {
        let requested = match params.get(key).map(|v| v.parse::<u32>()) {
            // A request value that is not a number is the upstream's to refuse, as it is.
            Some(Err(_)) => continue,
            Some(Ok(n)) => Some(n),
            None => None,
        };
        let effective = effective_of(group, requested);
        if effective != requested
            && let Some(n) = effective
        {
            set.push((key, n.to_string()));
        }
    }
    // Only a group with a timeout setting changes the request's: the body is parsed for its
    // own `timeout` only then (the gateway does not parse what it only forwards).
    if kind.timeout == TimeoutWay::Param && group_sets_timeout(admitted) {
        let body: Option<Value> = serde_json::from_slice(body).ok();
        let requested = requested_time(
            params
                .get("timeout")
                .map(String::as_str)
                .or_else(|| body.as_ref().and_then(|b| b["timeout"].as_str())),
        );
        let effective = admitted.search_timeout(requested);
        if effective != requested {
            set.push(("timeout", time_param(effective)));
        }
    }
    if let Some(at) = admitted.execution().cancel_at {
        let left = at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        set.push(("cancel_after_time_interval", time_param(Some(left))));
    }
    set
}

/// Whether the request's group sets a search timeout (else the request's own stands, and its
/// body need not be read for it).
fn group_sets_timeout(admitted: &Admitted) -> bool {
    let probe = Some(Duration::MAX);
    admitted.search_timeout(None).is_some() || admitted.search_timeout(probe) != probe
}

/// A time value as the request gave it, if it parses.
fn requested_time(v: Option<&str>) -> Option<Duration> {
    v.and_then(|t| sluice_wire::parse_time_value(t, "timeout").ok())
        .and_then(|t| t.duration_opt())
}

/// Applies the group's timeout to a request whose API takes no `timeout` parameter the
/// upstream honours ([`TimeoutWay`]): a template's inline `source` object gets the effective
/// `timeout` (its own beside the group's, by OpenSearch's precedence), and the body is
/// answered rewritten; any other request is bounded by the effective timeout as a deadline.
fn apply_timeout(admitted: &mut Admitted, params: &Params, body: Bytes, kind: Kind) -> Bytes {
    if kind.timeout == TimeoutWay::Param || !group_sets_timeout(admitted) {
        return body;
    }
    if kind.timeout == TimeoutWay::TemplateSource
        && let Ok(mut doc) = serde_json::from_slice::<Value>(&body)
        && let Some(source) = doc.get_mut("source").and_then(Value::as_object_mut)
    {
        let requested = requested_time(source.get("timeout").and_then(Value::as_str));
        let effective = admitted.search_timeout(requested);
        if effective == requested {
            return body;
        }
        source.insert("timeout".into(), Value::String(time_param(effective)));
        return match serde_json::to_vec(&doc) {
            Ok(v) => Bytes::from(v),
            Err(_) => body,
        };
    }
    // A count has no timeout of its own; a template's parameter counts as its own, as on an
    // embedded node.
    let requested = match kind.timeout {
        TimeoutWay::TemplateSource => requested_time(params.get("timeout").map(String::as_str)),
        _ => None,
    };
    if let Some(t) = admitted.search_timeout(requested) {
        admitted.bound_by_timeout(t);
    }
    body
}

/// A search-class request admitted and ready to forward.
struct Prepared {
    admitted: Admitted,
    call: Call,
    /// The scroll's keep-alive, when the search opens a scroll.
    keep_alive: Option<Duration>,
}

/// What the fast lane knows of a request that its parts do not hold.
pub struct Lane {
    /// The request's header lines as sent (its parts have no header map).
    pub raw: super::h1::RawHeaders,
    /// The client's address (its parts have no extensions).
    pub client: std::net::IpAddr,
}

/// Admits a `_search`, `_count` or `_search/template` read whole and builds what is forwarded:
/// with its header lines as sent on the fast lane (`lane`), else from its header map.
///
/// An `async move` block, not an `async fn`, as [`lane_search`]; the request is taken apart
/// where it is passed, so that its parts are held once, not as `read` and as its fields.
// Not an `async fn`: its future would keep room for each argument twice.
#[allow(clippy::manual_async_fn)]
fn prepare(
    st: &Arc<AppState>,
    up: &super::Upstream,
    meta: &RequestMeta,
    index: &str,
    Read {
        parts,
        params,
        body,
    }: Read,
    kind: Kind,
    lane: Option<Lane>,
) -> impl Future<Output = ApiResult<Prepared>> {
    async move {
        let keep_alive = match params.get("scroll") {
            Some(s) if kind.search_params => Some(sluice_engine::scroll::parse_keep_alive(s)?),
            _ => None,
        };
        let (action, template) = match kind.template {
            true => (Action::SearchTemplate, true),
            false => (Action::Search, false),
        };
        authorize_request_references(st, meta, &body, &params, action, index, template)?;
        // The body as the client sent it (the gateway does not parse what it only forwards),
        // put into words when a listing asks.
        let description = Description::Forwarded {
            index: index.into(),
            body: body.clone(),
        };
        let spec = TaskSpec::new(kind.action, description, index, &params)?;
        let mut admitted = admit(st, meta, spec).await?;
        let body = apply_timeout(&mut admitted, &params, body, kind);
        let set = if kind.search_params {
            search_params(&admitted, &params, &body, kind)
        } else {
            Vec::new()
        };
        let call = match lane {
            Some(lane) => lane_call(up, meta, &parts, lane, &set, body),
            None => into_call_as(up, meta, parts, &set, body),
        };
        // A scroll's id is read from its answer.
        let call = match keep_alive {
            Some(_) => call.answer_uncompressed(),
            None => call,
        };
        Ok(Prepared {
            admitted,
            call,
            keep_alive,
        })
    }
}

/// Admits a `_search`, `_count` or `_search/template` and forwards it.
async fn run_admitted(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    req: Request,
    kind: Kind,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Prepared {
        mut admitted,
        call,
        keep_alive,
    } = prepare(&st, &up, &meta, &index, read(req).await?, kind, None).await?;
    let executed = up.execute(admitted.execution(), call).await;
    let mut resp = settle(&mut admitted, executed)?;
    // An answer whose body then breaks off or goes silent makes the task a failure.
    let status = resp.status();
    resp.body_mut()
        .count_failure_in(status, &admitted.group().stats);
    let resp = match keep_alive {
        Some(keep_alive) if resp.status().is_success() => {
            let (parts, body) = resp.into_parts();
            let entry = ScrollEntry {
                group: admitted.group().id.clone(),
                opened_by: meta.principal.as_ref().map(|p| p.username.clone()),
            };
            let up2 = up.clone();
            let sniffer = ScrollIdSniffer::new(
                body,
                Format::of(&parts.headers),
                Box::new(move |id| up2.scrolls.remember(id, entry, keep_alive, Instant::now())),
            );
            let mut p = parts;
            super::headers::strip_hop_by_hop(&mut p.headers);
            p.extensions.insert(crate::http::pretty::Relayed);
            Response::from_parts(p, axum::body::Body::new(sniffer))
        }
        _ => stream_back(resp),
    };
    Ok(admitted.ride_with(resp))
}

/// A request the fast lane takes ([`crate::http::lane`]): a search or a count without a scroll,
/// on a route of this router.
#[derive(Clone, Copy)]
pub struct LaneRoute {
    kind: Kind,
    /// The index of the route's pattern in [`LANE_PATTERNS`].
    pub slot: usize,
}

/// The patterns of the fast lane's routes, as the HTTP metrics label them: a [`LaneRoute`]'s
/// `slot` is its pattern's index here.
pub const LANE_PATTERNS: [&str; 4] = ["/_search", "/_count", "/{index}/_search", "/{index}/_count"];

impl LaneRoute {
    /// What authorization makes of the route's request (`method`, `path` and `query` those
    /// [`lane_route`] took), as [`route::classify`] makes of it: a search on the path's index
    /// expression (which needs no decoding on the lane) read without classifying the path again,
    /// else on the `index` parameter's, as `classify` reads it.
    pub fn action<'a>(
        &self,
        method: &Method,
        path: &'a str,
        query: Option<&str>,
    ) -> route::RouteAction<'a> {
        match split_once_ascii(&path[1..], b'/') {
            Some((index, _)) => route::RouteAction::Index(
                sluice_core::authz::Action::Search,
                std::borrow::Cow::Borrowed(index),
            ),
            None => route::classify(method, path, query),
        }
    }
}

/// The fast lane's route for `method path?query`, when it is one the lane takes: `GET` or
/// `POST` on `/_search`, `/_count`, `/{index}/_search` or `/{index}/_count` with an index
/// expression that needs no decoding and names no sluice route (no leading `_`), and no
/// `scroll` parameter (a scroll's id is read from its answer, which the general path does).
/// Everything else takes the general path, which answers it exactly as before.
pub fn lane_route(method: &Method, path: &str, query: Option<&str>) -> Option<LaneRoute> {
    if !is_search_method(method) {
        return None;
    }
    if query.is_some_and(|q| q.split('&').any(|p| p.split('=').next() == Some("scroll"))) {
        return None;
    }
    let rest = path.strip_prefix('/')?;
    let (index, action) = match split_once_ascii(rest, b'/') {
        None => (None, rest),
        Some((index, action)) => (Some(index), action),
    };
    // `slot`: the pattern's index in `LANE_PATTERNS`.
    let (kind, slot) = match (index, action) {
        (None, "_search") => (SEARCH, 0),
        (None, "_count") => (COUNT, 1),
        (Some(_), "_search") => (SEARCH, 2),
        (Some(_), "_count") => (COUNT, 3),
        _ => return None,
    };
    let plain = |i: &str| {
        !i.is_empty()
            && !i.starts_with('_')
            && i.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'%' && b != b'+')
    };
    if index.is_some_and(|i| !plain(i)) {
        return None;
    }
    Some(LaneRoute { kind, slot })
}

/// The fast lane's search or count: admitted as [`run_admitted`] admits it, forwarded on the
/// lane's own exchange on lane thread `thread`'s connections (the thread this runs on);
/// answers the admission ticket, settled, and the upstream's answer with its body still to
/// relay. The ticket is released when dropped.
///
/// A function returning an `async move` block rather than an `async fn`: an `async fn` moves
/// each argument into a local of its own at its start, and its future keeps room for both
/// (the request's `Parts` twice, its metadata twice); the block uses what it captured in
/// place. What only admission needs (`params`, `index`) is scoped to it, so the forwarding's
/// state does not keep room for it either. With the steps it awaits written the same way
/// ([`prepare`], `Upstream::execute_with`, `guarded`) and `Upstream::execute_h1` returning
/// `execute_with`'s future rather than one of its own, 3,128 bytes against 4,176
/// (`-Zprint-type-sizes`, release): under the 4 KB up to which jemalloc allocates and frees on
/// its fast path, which matters since the lane boxes this future (`http/lane/mod.rs`
/// `forward`, which builds it in its box rather than copying it there).
// Not an `async fn`: its future would keep room for each argument twice.
#[allow(clippy::manual_async_fn)]
pub fn lane_search(
    st: &Arc<AppState>,
    meta: RequestMeta,
    route: LaneRoute,
    parts: Box<Parts>,
    lane: Lane,
    body: Bytes,
    thread: usize,
) -> impl Future<Output = ApiResult<(Admitted, Box<super::h1::Answer>)>> {
    async move {
        let up = super::routes_upstream_ref(st)?;
        let Prepared {
            mut admitted, call, ..
        } = {
            let params = params_of(&parts)?;
            // As [`index_of`]: the path's, else the URL's `index` parameter.
            let index = match split_once_ascii(&parts.uri.path()[1..], b'/') {
                Some((index, _)) => index.to_string(),
                None => match params.get("index") {
                    Some(i) if !i.is_empty() => i.clone(),
                    _ => "_all".to_string(),
                },
            };
            let read = Read {
                parts,
                params,
                body,
            };
            prepare(st, up, &meta, &index, read, route.kind, Some(lane)).await?
        };
        let executed = up.execute_h1(admitted.execution(), call, thread).await;
        let answer = settle_status(&mut admitted, executed, |a| a.status)?;
        Ok((admitted, answer))
    }
}

/// Authorizes what a search-class request of `action` on `index` makes the upstream read
/// besides its indices ([`super::references`]) before it is forwarded, as the embedded engine
/// authorizes its `terms` lookups while it runs: the references of the body and of a `source`
/// parameter (read as a template when `template`). With authorization on, a body that is not
/// JSON is refused (400) rather than forwarded; and with identity `service`, one whose reads
/// cannot all be known is refused (403, [`authorize_references`]).
pub(super) fn authorize_request_references(
    st: &AppState,
    meta: &RequestMeta,
    body: &[u8],
    params: &Params,
    action: Action,
    index: &str,
    template: bool,
) -> ApiResult<()> {
    if meta.permissions.is_none() {
        return Ok(());
    }
    let source = params.get("source").map(String::as_bytes);
    for part in std::iter::once(body).chain(source) {
        if let Some(json) = crate::http::parse_json(part)? {
            authorize_references(st, meta, &json, action, index, template)?;
        }
    }
    Ok(())
}

/// Authorizes the references of one search body (`template`: a template body) for a request
/// of `action` on `index`: each on its index with the action its read is (`Err` is the first
/// forbidden one's 403, counted and audited). In a gateway whose identity is `service`, where
/// the upstream reads whatever it is sent as one account for every user, a body whose reads
/// cannot all be known from its JSON is refused with a 403 saying why, unless the user may
/// read every index anyway; in the other modes the upstream checks those reads as the user.
pub(super) fn authorize_references(
    st: &AppState,
    meta: &RequestMeta,
    body: &Value,
    action: Action,
    index: &str,
    template: bool,
) -> Result<(), EngineError> {
    let Some(perms) = &meta.permissions else {
        return Ok(());
    };
    let found = if template {
        super::references::of_template(body)
    } else {
        super::references::of_search(body)
    };
    for r in &found.references {
        crate::auth::authorize_item(st, meta, r.action, &r.index)?;
    }
    let single_identity = st
        .upstream
        .as_ref()
        .is_some_and(|up| up.identity().is_single_identity());
    match found.unchecked {
        Some(why) if single_identity && !reads_everything(perms) => {
            Err(crate::auth::authz::refuse_unchecked(
                st,
                meta,
                action,
                index,
                &format!(
                    "this gateway cannot tell what the request reads ({why}), and with \
                 backend.upstream.identity service the upstream would read it for every user \
                 alike; send a query the gateway can check, or use identity proxy or run_as"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Whether `perms` let their user read every index, local and remote (`*` and `*:*`: an admin
/// role, every user without a roles file): then nothing a query could read elsewhere is
/// forbidden to them, and what the gateway cannot check is forwarded.
fn reads_everything(perms: &sluice_core::authz::RoleSet) -> bool {
    [Action::Search, Action::Get]
        .into_iter()
        .all(|a| perms.allows_index_pattern(a, "*") && perms.allows_index_pattern(a, "*:*"))
}

/// Settles an admitted request's outcome: an upstream answer counts as a completion, a
/// failure unless its status is a success; a forwarding error is worded by the ticket.
pub(super) fn settle<T>(
    admitted: &mut Admitted,
    executed: Result<http::Response<T>, ApiError>,
) -> ApiResult<http::Response<T>> {
    settle_status(admitted, executed, http::Response::status)
}

/// [`settle`] for any answer whose status `status_of` reads.
fn settle_status<A>(
    admitted: &mut Admitted,
    executed: Result<A, ApiError>,
    status_of: impl Fn(&A) -> http::StatusCode,
) -> ApiResult<A> {
    match executed {
        Ok(answer) if status_of(&answer).is_success() => {
            admitted.finish(Ok(()))?;
            Ok(answer)
        }
        Ok(answer) => {
            // The upstream's error passes through unchanged; it counts as a failure.
            let _ = admitted.finish::<()>(Err(ApiError::Engine(EngineError::internal(
                "the upstream answered an error",
            ))));
            Ok(answer)
        }
        Err(e) => Err(admitted
            .finish::<()>(Err(e))
            .err()
            .unwrap_or_else(|| ApiError::Engine(EngineError::internal("forwarding failed")))),
    }
}

/// A scroll continuation: admitted in the group the scroll was opened in, through whichever
/// gateway of the cluster (tagged anew when no gateway knows the scroll: opened directly on
/// the upstream, or before its gateway restarted), then forwarded.
async fn run_scroll(
    st: Arc<AppState>,
    meta: RequestMeta,
    path_id: Option<String>,
    req: Request,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Read {
        parts,
        mut params,
        body,
    } = read(req).await?;
    if let Some(id) = path_id {
        params.insert("scroll_id".to_string(), id);
    }
    let json = crate::http::parse_json(&body)?;
    let sreq = crate::api::scroll::parse_scroll_request(&params, json.as_ref())?;
    let description = format!(
        "scrollId[{}], scroll[{}]",
        sreq.scroll_id,
        sreq.keep_alive.as_ref().map_or("null", |(s, _)| s.as_str())
    );
    // What this gateway knows of the scroll, else what another gateway of the cluster does.
    let known = super::scroll_peers::resolve(&st, &up, std::slice::from_ref(&sreq.scroll_id))
        .await
        .pop()
        .flatten();
    // Only the user who opened the scroll continues it; one no gateway knows, only a user
    // allowed others' scrolls.
    match &known {
        Some(e) => authorize_scroll(&st, &meta, route::SCROLL, e.opened_by.as_deref())?,
        None => crate::auth::authz::authorize_unknown_scroll(&st, &meta, route::SCROLL)?,
    }
    let inherited = known.map(|e| Inherited {
        group: st
            .workload
            .entry(&e.group)
            .unwrap_or_else(|| st.workload.default_entry().clone()),
        held: Vec::new(),
    });
    let spec = TaskSpec {
        action: actions::SCROLL,
        description: description.into(),
        parent: None,
        indices: Vec::new(),
        cancel_after: requested_cancel_after(&params)?,
        inherited,
    };
    let mut admitted = admit(&st, &meta, spec).await?;
    // The scroll's next id is read from its answer.
    let call = into_call_as(&up, &meta, parts, &[], body).answer_uncompressed();
    let executed = up.execute(admitted.execution(), call).await;
    let mut resp = settle(&mut admitted, executed)?;
    // As in `run_admitted`.
    let status = resp.status();
    resp.body_mut()
        .count_failure_in(status, &admitted.group().stats);
    let keep_alive = super::scrolls::renewal(sreq.keep_alive.map(|(_, k)| k));
    let resp = if resp.status().is_success() {
        let (mut p, body) = resp.into_parts();
        super::headers::strip_hop_by_hop(&mut p.headers);
        let (up2, old) = (up.clone(), sreq.scroll_id);
        let sniffer = ScrollIdSniffer::new(
            body,
            Format::of(&p.headers),
            Box::new(move |new| up2.scrolls.extend(&old, new, keep_alive, Instant::now())),
        );
        p.extensions.insert(crate::http::pretty::Relayed);
        Response::from_parts(p, axum::body::Body::new(sniffer))
    } else {
        stream_back(resp)
    };
    Ok(admitted.ride_with(resp))
}

/// `DELETE _search/scroll`: forgets the scrolls (here, and on the other gateways that may
/// know them) and forwards the clear.
async fn clear_scrolls(
    st: Arc<AppState>,
    meta: RequestMeta,
    path_id: Option<String>,
    req: Request,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    // The ids may come as a parameter too (`?scroll_id=a,b`), as OpenSearch reads them.
    let path_id = path_id.or_else(|| params.get("scroll_id").cloned());
    let parsed = crate::http::parse_json(&body).and_then(|json| {
        Ok(crate::api::scroll::parse_clear_request(
            path_id.as_deref(),
            json.as_ref(),
        )?)
    });
    // With authorization on, a clear whose scroll ids cannot be read is refused here, not
    // forwarded: the owner check needs them.
    let parsed = match parsed {
        Err(e) if meta.permissions.is_some() => return Err(e),
        other => other,
    };
    let mut tell_peers = None;
    if let Ok(ids) = parsed {
        // Only the user who opened a scroll clears it; `_all` needs the permission for
        // others' (as on an embedded node).
        let known = super::scroll_peers::resolve(&st, &up, &ids).await;
        for (id, known) in ids.iter().zip(known) {
            let opened_by = if id == "_all" {
                Some(Arc::from(crate::auth::authz::ALL_SCROLLS))
            } else {
                match known {
                    Some(e) => e.opened_by,
                    None => {
                        crate::auth::authz::authorize_unknown_scroll(
                            &st,
                            &meta,
                            route::SCROLL_CLEAR,
                        )?;
                        continue;
                    }
                }
            };
            authorize_scroll(&st, &meta, route::SCROLL_CLEAR, opened_by.as_deref())?;
        }
        if up.scrolls.forget(&ids) {
            tell_peers = Some(ids);
        }
    }
    let call = into_call_as(&up, &meta, parts, &[], body);
    let (resp, ()) = tokio::join!(up.send_call(call), async {
        if let Some(ids) = &tell_peers {
            super::scroll_peers::tell_forget(&st, ids).await;
        }
    });
    Ok(stream_back(resp?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str) -> Parts {
        http::Request::builder()
            .uri(uri)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn test_with_params_replaces_only_the_named_parameters() {
        let p = parts("/logs/_search?q=a&timeout=5s&pretty");
        assert_eq!(
            with_params(&p, &[("timeout", "2000ms".into())]),
            "/logs/_search?q=a&pretty&timeout=2000ms"
        );
        assert_eq!(with_params(&parts("/x"), &[]), "/x");
        assert_eq!(with_params(&parts("/x?a=1&&b"), &[]), "/x?a=1&&b");
        assert_eq!(
            with_params(
                &parts("/x"),
                &[("cancel_after_time_interval", "5ms".into())]
            ),
            "/x?cancel_after_time_interval=5ms"
        );
        assert_eq!(time_param(None), "-1");
    }
}
