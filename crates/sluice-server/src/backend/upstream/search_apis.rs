//! The gateway's routes of the APIs besides `_search`, `_count`, `_msearch` and scrolls that
//! run searches upstream, each admitted as one task in the caller's workload group that holds
//! its slot while the upstream works ([`super::held`]), as OpenSearch's workload management
//! counts the searches they run (under the caller's thread context) in the caller's group:
//!
//! | route (methods admitted) | task action | indices the rules match | [`Form`] |
//! | --- | --- | --- | --- |
//! | `/{index}/_delete_by_query`, `_update_by_query` (POST) | `indices:data/write/{delete,update}/byquery` | the path's | waiting or background |
//! | `/_reindex` (POST) | `indices:data/write/reindex` | the body's `source.index` | waiting or background |
//! | `[/{index}]/_rank_eval` (GET, POST) | `indices:data/read/rank_eval` | the path's | waiting |
//! | `/_plugins/_sql`, `/_opendistro/_sql` (POST) | `cluster:admin/opensearch/sql` | the query's `FROM` targets | waiting |
//! | `/_plugins/_ppl`, `/_opendistro/_ppl` (POST) | `cluster:admin/opensearch/ppl` | the query's `source=` | waiting |
//! | `[/{index}]/_plugins/_asynchronous_search` (and `_opendistro`) (POST) | `cluster:admin/opendistro/asynchronous_search/submit` | the path's | submission |
//! | `[/{index}]/_async_search` (POST) | `indices:data/read/async_search/submit` | the path's | submission |
//! | `/{index}/_eql/search` (GET, POST) | `indices:data/read/eql` | the path's | submission |
//! | `/_sql` (GET, POST) | `indices:data/read/sql` | the query's `FROM` targets | submission |
//! | `/{index}/_knn_search` (GET, POST) | `indices:data/read/search` | the path's | waiting |
//!
//! Other methods pass through unadmitted, as before. "The path's" index is the path's, else
//! the URL's `index` parameter, else `_all`, as for a search. An index read from a body (a
//! reindex's source, a query's text) is best effort: a body that does not parse, or a query
//! whose target is not found, gives no index, and the request is tagged by its header, its
//! user and its roles alone (a rule naming an index pattern does not match it).
//!
//! Authorization is unchanged: with authentication on, each of these routes but the by-query
//! ones is unclassified (`auth/route.rs`) and needs the admin action
//! `cluster:admin/sluice/unclassified`, checked before the handler runs.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sluice_core::authz::Action;

use super::held::{self, Form, Work};
use super::routes::{authorize_request_references, read, url_index};
use crate::admission::TaskSpec;
use crate::error::ApiResult;
use crate::http::{Path, RequestMeta};
use crate::state::AppState;
use crate::tasks::actions;

/// Where an API's indices are read from, for the tagging rules.
#[derive(Clone, Copy)]
enum Indices {
    /// The path's index expression (else the URL's `index`, else `_all`).
    Path,
    /// A reindex body's `source.index`.
    ReindexSource,
    /// The `FROM` targets of an SQL body's `query`.
    SqlFrom,
    /// The `source=` of a PPL body's `query`.
    PplSource,
}

/// One API this module admits.
pub struct Api {
    action: &'static str,
    /// What it is, in task descriptions and errors.
    what: &'static str,
    /// Whether a `GET` is admitted too (the API takes a body on `GET`); `POST` always is.
    get: bool,
    indices: Indices,
    /// Whether it may go on upstream after answering (an id the client polls): held while it
    /// runs ([`Form::Submission`]), else until its answer ([`Form::Waiting`]).
    submission: bool,
}

/// `_reindex` (its form chosen by `wait_for_completion`, [`held::waits`]).
pub const REINDEX: Api = Api {
    action: actions::REINDEX,
    what: "reindex",
    get: false,
    indices: Indices::ReindexSource,
    submission: false,
};
/// `_rank_eval`.
pub const RANK_EVAL: Api = Api {
    action: actions::RANK_EVAL,
    what: "rank_eval",
    get: true,
    indices: Indices::Path,
    submission: false,
};
/// OpenSearch's `_plugins/_sql`.
pub const SQL: Api = Api {
    action: actions::SQL,
    what: "sql",
    get: false,
    indices: Indices::SqlFrom,
    submission: false,
};
/// OpenSearch's `_plugins/_ppl`.
pub const PPL: Api = Api {
    action: actions::PPL,
    what: "ppl",
    get: false,
    indices: Indices::PplSource,
    submission: false,
};
/// OpenSearch's `_plugins/_asynchronous_search` submission.
pub const ASYNCHRONOUS_SEARCH: Api = Api {
    action: actions::ASYNCHRONOUS_SEARCH_SUBMIT,
    what: "asynchronous search",
    get: false,
    indices: Indices::Path,
    submission: true,
};
/// Elasticsearch's `_async_search` submission.
pub const ASYNC_SEARCH: Api = Api {
    action: actions::ASYNC_SEARCH_SUBMIT,
    what: "async search",
    get: false,
    indices: Indices::Path,
    submission: true,
};
/// Elasticsearch's `_eql/search` (which may go on asynchronously).
pub const EQL: Api = Api {
    action: actions::EQL,
    what: "eql search",
    get: true,
    indices: Indices::Path,
    submission: true,
};
/// Elasticsearch's `_sql` (which may go on asynchronously).
pub const ES_SQL: Api = Api {
    action: actions::ES_SQL,
    what: "sql",
    get: true,
    indices: Indices::SqlFrom,
    submission: true,
};
/// Elasticsearch's `_knn_search`, run upstream as a search.
pub const KNN_SEARCH: Api = Api {
    action: actions::SEARCH,
    what: "knn search",
    get: true,
    indices: Indices::Path,
    submission: false,
};

/// The path's one parameter (an index expression), when the route has one.
type PathParam = Option<Path<String>>;

/// A route of `api`: admitted for the methods it admits, else forwarded as it came.
pub async fn admitted_or_forward(
    st: State<Arc<AppState>>,
    meta: RequestMeta,
    index: PathParam,
    req: Request,
    api: &'static Api,
) -> Response {
    let admitted = *req.method() == Method::POST || (api.get && *req.method() == Method::GET);
    if !admitted {
        return crate::http::fallback::forward(st, meta, req).await;
    }
    let path_index = index.map(|p| p.0).or_else(|| url_index(req.uri()));
    run(st.0, meta, path_index, req, api)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run(
    st: Arc<AppState>,
    meta: RequestMeta,
    path_index: Option<String>,
    req: Request,
    api: &'static Api,
) -> ApiResult<Response> {
    let read = read(req).await?;
    let body: Option<Value> = serde_json::from_slice(&read.body).ok();
    let index = match api.indices {
        Indices::Path => path_index.unwrap_or_else(|| "_all".to_string()),
        Indices::ReindexSource => body.as_ref().map(reindex_source).unwrap_or_default(),
        Indices::SqlFrom => query_of(body.as_ref()).map(sql_from).unwrap_or_default(),
        Indices::PplSource => query_of(body.as_ref()).map(ppl_source).unwrap_or_default(),
    };
    let form = if api.submission {
        Form::Submission
    } else if api.action == actions::REINDEX {
        held::waits(&read.params)?
    } else {
        Form::Waiting
    };
    let description = match api.indices {
        Indices::ReindexSource => format!("reindex from [{index}]"),
        _ => format!("{} [{index}]", api.what),
    };
    let spec = TaskSpec::new(api.action, description, &index, &read.params)?;
    let work = Work {
        spec,
        form,
        what: api.what,
    };
    held::run(st, meta, read, work).await
}

/// `POST /{index}/_delete_by_query` and `_update_by_query` (`update`): its reads authorized,
/// then admitted ([`super::held`]); other methods pass through.
pub async fn by_query(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    req: Request,
    update: bool,
) -> Response {
    if *req.method() != Method::POST {
        return crate::http::fallback::forward(State(st), meta, req).await;
    }
    run_by_query(st, meta, index, req, update)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run_by_query(
    st: Arc<AppState>,
    meta: RequestMeta,
    index: String,
    req: Request,
    update: bool,
) -> ApiResult<Response> {
    let read = read(req).await?;
    let route_action = if update {
        Action::UpdateByQuery
    } else {
        Action::DeleteByQuery
    };
    authorize_request_references(
        &st,
        &meta,
        &read.body,
        &read.params,
        route_action,
        &index,
        false,
    )?;
    let (action, verb) = if update {
        (actions::UPDATE_BY_QUERY, "update-by-query")
    } else {
        (actions::DELETE_BY_QUERY, "delete-by-query")
    };
    let form = held::waits(&read.params)?;
    let spec = TaskSpec::new(action, format!("{verb} [{index}]"), &index, &read.params)?;
    let work = Work {
        spec,
        form,
        what: "by-query",
    };
    held::run(st, meta, read, work).await
}

/// The `query` string of an SQL or PPL body.
fn query_of(body: Option<&Value>) -> Option<&str> {
    body?.get("query")?.as_str()
}

/// A reindex body's `source.index`: a string, or a list of them joined by commas.
fn reindex_source(body: &Value) -> String {
    match &body["source"]["index"] {
        Value::String(s) => s.clone(),
        Value::Array(list) => list
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        _ => String::new(),
    }
}

/// The tables an SQL query reads: the word after each `FROM` (case-insensitive), unquoted
/// (`` `logs-*` ``, `"logs"`), joined by commas; a subquery's `FROM (` names none. Best
/// effort, for the tagging rules only: what the query reads is the upstream's to decide.
fn sql_from(query: &str) -> String {
    let words: Vec<&str> = query
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == ')')
        .filter(|w| !w.is_empty())
        .collect();
    let mut tables = Vec::new();
    for pair in words.windows(2) {
        if pair[0].eq_ignore_ascii_case("from") && !pair[1].starts_with('(') {
            let table = pair[1].trim_matches(|c| c == '`' || c == '"');
            if !table.is_empty() {
                tables.push(table);
            }
        }
    }
    tables.join(",")
}

/// The indices a PPL query reads: the list after its `source=` (`source = a,b` too), up to a
/// space or the first `|`. Best effort, as [`sql_from`].
fn ppl_source(query: &str) -> String {
    let lower = query.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("source") {
        let start = from + at;
        let before = lower[..start].chars().next_back();
        let rest = query[start + "source".len()..].trim_start();
        from = start + "source".len();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(list) = rest.strip_prefix('=') else {
            continue;
        };
        let list = list.trim_start();
        let end = list
            .find(|c: char| c.is_whitespace() || c == '|')
            .unwrap_or(list.len());
        return list[..end]
            .trim_matches(|c| c == '`' || c == '"')
            .to_string();
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_a_reindex_is_tagged_on_its_source() {
        assert_eq!(
            reindex_source(&json!({"source": {"index": "logs-1"}, "dest": {"index": "x"}})),
            "logs-1"
        );
        assert_eq!(
            reindex_source(&json!({"source": {"index": ["a", "b"]}})),
            "a,b"
        );
        assert_eq!(reindex_source(&json!({"dest": {"index": "x"}})), "");
    }

    #[test]
    fn test_an_sql_query_is_tagged_on_the_tables_it_reads() {
        assert_eq!(sql_from("SELECT * FROM logs-2024 WHERE a > 1"), "logs-2024");
        assert_eq!(sql_from("select a from `logs-*` limit 5"), "logs-*");
        assert_eq!(sql_from("SELECT * FROM \"logs\";"), "logs");
        assert_eq!(
            sql_from("SELECT * FROM (SELECT a FROM inner_idx) t"),
            "inner_idx"
        );
        assert_eq!(sql_from("SELECT 1"), "");
        // A column named like the keyword is not a table.
        assert_eq!(sql_from("SELECT fromage FROM cheese"), "cheese");
    }

    #[test]
    fn test_a_ppl_query_is_tagged_on_its_source() {
        assert_eq!(ppl_source("source=accounts | fields a"), "accounts");
        assert_eq!(
            ppl_source("search source = logs-*,other| head 5"),
            "logs-*,other"
        );
        assert_eq!(ppl_source("SOURCE=`a`"), "a");
        // A field named `datasource` is not the source.
        assert_eq!(ppl_source("source=x | where datasource = 1"), "x");
        assert_eq!(ppl_source("describe accounts"), "");
    }
}
