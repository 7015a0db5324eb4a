//! Alias APIs: `POST _aliases` (atomic `add` / `remove` / `remove_index`), `PUT|POST|DELETE
//! /{index}/_alias/{name}` (and `_aliases`), `GET|HEAD _alias[/{name}]`, `GET /{index}/_alias
//! [/{name}]` and `_cat/aliases`. Parsing and validation are the engine's
//! (`sluice_engine::aliases`); every change goes through `Engine::update_aliases`, one step.

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};
use sluice_core::authz::Action;
use sluice_engine::EngineError;
use sluice_engine::aliases::{AliasAction, AliasMeta, parse_actions, validate_alias_name};
use sluice_engine::mapping::wildcard_match;
use sluice_engine::resolve::IndicesOptions;

use crate::backend::embedded::blocking;
use crate::error::ApiResult;
use crate::http::{Body, Params, RequestMeta, reply};
use crate::state::AppState;

/// The alias routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_aliases", get(get_all).post(update_aliases))
        .route("/_alias", get(get_all))
        .route("/_alias/{name}", get(get_named))
        .route("/_cat/aliases", get(cat_aliases))
        .route("/_cat/aliases/{name}", get(cat_aliases))
        .route("/{index}/_alias", get(get_of_index))
        .route("/{index}/_aliases", get(get_of_index))
        .route(
            "/{index}/_alias/{name}",
            get(get_of_index_named)
                .put(put_alias)
                .post(put_alias)
                .delete(delete_alias),
        )
        .route(
            "/{index}/_aliases/{name}",
            get(get_of_index_named)
                .put(put_alias)
                .post(put_alias)
                .delete(delete_alias),
        )
}

fn acknowledged(params: &Params) -> Response {
    reply(StatusCode::OK, json!({"acknowledged": true}), params)
}

async fn apply(st: &AppState, actions: Vec<AliasAction>) -> ApiResult<()> {
    let engine = st.engine.clone();
    blocking(move || engine.update_aliases(&actions)).await
}

/// Authorizes each action of a `POST /_aliases` on the indices it names: `indices:admin/aliases`
/// to add or remove an alias — on its indices and on the alias names as names
/// ([`crate::auth::authz::allows_names`]) — `indices:admin/delete` for `remove_index`, as the
/// path routes check them. The request is atomic, so the first refused action refuses it (403, counted
/// and audited); nothing applies. Used by the embedded handler and the gateway's.
pub fn authorize_actions(
    st: &AppState,
    meta: &RequestMeta,
    actions: &[AliasAction],
) -> Result<(), EngineError> {
    for action in actions {
        match action {
            AliasAction::Add {
                indices, aliases, ..
            }
            | AliasAction::Remove {
                indices, aliases, ..
            } => {
                crate::auth::authorize_item(st, meta, Action::Aliases, &indices.join(","))?;
                crate::auth::authorize_names(st, meta, Action::Aliases, &aliases.join(","))?;
            }
            AliasAction::RemoveIndex { indices } => {
                crate::auth::authorize_item(st, meta, Action::IndexDelete, &indices.join(","))?;
            }
        }
    }
    Ok(())
}

/// Authorizes the aliases a create-index body names (`{"aliases": {"name": {…}}}`) as
/// `indices:admin/aliases` on their names ([`crate::auth::authz::allows_names`]), as an add
/// through `_aliases` is: creating an index under one's own name must not plant an alias
/// under another tenant's (an outside trial's write alias captured that tenant's writes).
/// A body without aliases, or one that is not an object, needs nothing here (the engine
/// refuses what it cannot read). Used by the embedded handler and the gateway's.
pub fn authorize_create_aliases(
    st: &AppState,
    meta: &RequestMeta,
    body: &Value,
) -> Result<(), EngineError> {
    let Some(Value::Object(aliases)) = body.get("aliases") else {
        return Ok(());
    };
    if aliases.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = aliases.keys().map(String::as_str).collect();
    crate::auth::authorize_names(st, meta, Action::Aliases, &names.join(","))
}

/// `POST /_aliases`: every action applies, or none.
async fn update_aliases(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    let actions = parse_actions(&body)?;
    authorize_actions(&st, &meta, &actions)?;
    apply(&st, actions).await?;
    Ok(acknowledged(&params))
}

/// `PUT|POST /{index}/_alias/{name}`: adds the alias (body: `filter`, `routing`,
/// `is_write_index` …) to the indices `index` names.
async fn put_alias(
    State(st): State<Arc<AppState>>,
    Path((index, name)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    let names: Vec<String> = name.split(',').map(str::to_string).collect();
    let mut meta = AliasMeta::default();
    for n in &names {
        validate_alias_name(n)?;
        meta = AliasMeta::parse(n, &body)?;
    }
    let action = AliasAction::Add {
        indices: split(&index),
        aliases: names,
        meta,
    };
    apply(&st, vec![action]).await?;
    Ok(acknowledged(&params))
}

/// `DELETE /{index}/_alias/{name}`: removes the aliases `name` matches (a list or wildcards);
/// 404 `aliases_not_found_exception` when none does.
async fn delete_alias(
    State(st): State<Arc<AppState>>,
    Path((index, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let action = AliasAction::Remove {
        indices: split(&index),
        aliases: split(&name),
        must_exist: None,
    };
    apply(&st, vec![action]).await?;
    Ok(acknowledged(&params))
}

fn split(expr: &str) -> Vec<String> {
    expr.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// `GET /_alias`: every index with its aliases.
async fn get_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    render_aliases(&st, "_all", None, &params)
}

/// `GET|HEAD /_alias/{name}`: the indices holding the aliases `name` matches.
async fn get_named(
    State(st): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    render_aliases(&st, "_all", Some(&name), &params)
}

/// `GET /{index}/_alias`: the aliases of the indices `index` names.
async fn get_of_index(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    render_aliases(&st, &index, None, &params)
}

/// `GET|HEAD /{index}/_alias/{name}`.
async fn get_of_index_named(
    State(st): State<Arc<AppState>>,
    Path((index, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    render_aliases(&st, &index, Some(&name), &params)
}

/// Renders `GET _alias` as OpenSearch does: `{index: {"aliases": {name: {...}}}}`; with names,
/// only the indices holding a match, and a 404 with `error: "alias [x] missing"` beside what
/// was found when a name without wildcards matched nothing.
fn render_aliases(
    st: &AppState,
    index_expr: &str,
    names: Option<&str>,
    params: &Params,
) -> ApiResult<Response> {
    let mut defaults = IndicesOptions::for_index_apis(true);
    defaults.expand_wildcards.hidden = names.is_some();
    let opts = IndicesOptions::from_params(params, defaults)?;
    let targets = st.engine.resolve_targets(index_expr, &opts)?;
    let patterns: Option<Vec<&str>> = names.map(|n| {
        n.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    });
    let wanted = |alias: &str| {
        patterns.as_ref().is_none_or(|ps| {
            ps.iter()
                .any(|p| *p == "_all" || *p == "*" || wildcard_match(p, alias))
        })
    };
    let mut out = Map::new();
    let mut matched: Vec<String> = Vec::new();
    for t in &targets {
        let mut list = Map::new();
        for (alias, meta) in t.handle.aliases().iter() {
            if wanted(alias) {
                list.insert(alias.clone(), meta.render());
                matched.push(alias.clone());
            }
        }
        if patterns.is_none() || !list.is_empty() {
            out.insert(
                t.handle.name().to_string(),
                json!({ "aliases": Value::Object(list) }),
            );
        }
    }
    let missing: Vec<&str> = patterns
        .iter()
        .flatten()
        .filter(|p| !p.contains('*') && **p != "_all" && !matched.iter().any(|m| m == *p))
        .copied()
        .collect();
    if missing.is_empty() {
        return Ok(reply(StatusCode::OK, Value::Object(out), params));
    }
    let what = if missing.len() == 1 {
        "alias"
    } else {
        "aliases"
    };
    let mut body = Map::new();
    body.insert(
        "error".into(),
        json!(format!("{what} [{}] missing", missing.join(","))),
    );
    body.insert("status".into(), json!(404));
    body.extend(out);
    Ok(reply(StatusCode::NOT_FOUND, Value::Object(body), params))
}

/// `GET /_cat/aliases[/{name}]`: `alias index filter routing.index routing.search
/// is_write_index`, one line per alias and index.
async fn cat_aliases(
    State(st): State<Arc<AppState>>,
    name: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let patterns: Option<Vec<String>> = name.map(|Path(n)| split(&n));
    let table = st.engine.alias_table();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (alias, members) in table.iter() {
        if patterns
            .as_ref()
            .is_some_and(|ps| !ps.iter().any(|p| wildcard_match(p, alias)))
        {
            continue;
        }
        for (index, meta) in members {
            rows.push(vec![
                alias.clone(),
                index.clone(),
                if meta.filter.is_some() { "*" } else { "-" }.to_string(),
                meta.index_routing.clone().unwrap_or_else(|| "-".into()),
                meta.search_routing.clone().unwrap_or_else(|| "-".into()),
                meta.is_write_index
                    .map_or_else(|| "-".to_string(), |w| w.to_string()),
            ]);
        }
    }
    let headers = [
        "alias",
        "index",
        "filter",
        "routing.index",
        "routing.search",
        "is_write_index",
    ];
    if crate::api::cat::wants_json(&params) {
        let list: Vec<Value> = rows
            .iter()
            .map(|r| {
                Value::Object(
                    headers
                        .iter()
                        .zip(r)
                        .map(|(h, v)| (h.to_string(), json!(v)))
                        .collect(),
                )
            })
            .collect();
        return Ok(reply(StatusCode::OK, Value::Array(list), &params));
    }
    let verbose = params.get("v").is_some_and(|v| v.is_empty() || v == "true");
    let mut table_rows = Vec::new();
    if verbose {
        table_rows.push(headers.iter().map(|h| h.to_string()).collect());
    }
    table_rows.extend(rows);
    let text = crate::http::render_table(&table_rows);
    Ok((
        StatusCode::OK,
        [("content-type", "text/plain; charset=UTF-8")],
        text,
    )
        .into_response())
}
