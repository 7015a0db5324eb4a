//! Index APIs: create, delete, exists, get, mappings, settings, refresh, `_cat/indices` (its
//! rows also `_list/indices`').

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sluice_engine::index::{flat_settings, unset_defaults};
use sluice_engine::mapping::Mapping;
use sluice_engine::resolve::IndicesOptions;

use super::cat::{Cell, Column, Table};
use super::cluster_settings::{bool_param, render};
use crate::backend::embedded::blocking;
use crate::error::ApiResult;
use crate::http::{Body, Params, reply};
use crate::state::AppState;
use sluice_engine::mapping::wildcard_match;
use sluice_engine::{EngineError, ErrorCode};
use std::collections::BTreeMap;

use crate::http::RequestMeta;

/// Resolves an index expression for an index API: the request's `ignore_unavailable`,
/// `allow_no_indices` and `expand_wildcards` over the index APIs' defaults (closed indices may
/// be named; wildcards reach them when `closed`).
pub(crate) fn resolve_for(
    st: &AppState,
    expr: &str,
    params: &Params,
    closed: bool,
) -> ApiResult<Vec<Arc<sluice_engine::index::IndexHandle>>> {
    let opts = IndicesOptions::from_params(params, IndicesOptions::for_index_apis(closed))?;
    Ok(st
        .engine
        .resolve_targets(expr, &opts)?
        .into_iter()
        .map(|t| t.handle)
        .collect())
}

/// `PUT /{index}`.
pub async fn create_index(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    super::aliases::authorize_create_aliases(&st, &meta, &body)?;
    let engine = st.engine.clone();
    let name = index.clone();
    blocking(move || engine.create_index(&name, &body).map(|_| ())).await?;
    Ok(reply(
        StatusCode::OK,
        json!({"acknowledged": true, "shards_acknowledged": true, "index": index}),
        &params,
    ))
}

/// `DELETE /{index}`: with `ignore_unavailable`, missing concrete names are skipped and the
/// rest deleted (OpenSearch's delete-index reads the request's `IndicesOptions`).
pub async fn delete_index(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let opts = IndicesOptions::from_params(&params, IndicesOptions::for_index_apis(true))?;
    let engine = st.engine.clone();
    blocking(move || engine.delete_indices(&index, &opts)).await?;
    Ok(reply(
        StatusCode::OK,
        json!({"acknowledged": true}),
        &params,
    ))
}

/// `HEAD /{index}`: 200 or 404, no body.
pub async fn head_index(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> Response {
    let status = match resolve_for(&st, &index, &params, false) {
        Ok(v) if !v.is_empty() => StatusCode::OK,
        _ => StatusCode::NOT_FOUND,
    };
    // OpenSearch answers index existence with its JSON content type and no body.
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=UTF-8"),
        )],
    )
        .into_response()
}

/// `GET /{index}`: aliases, mappings and settings of each index.
pub async fn get_index(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let mut out = Map::new();
    for h in resolve_for(&st, &index, &params, false)? {
        out.insert(
            h.name().to_string(),
            json!({
                "aliases": Value::Object(h.aliases().iter().map(|(a, m)| (a.clone(), m.render())).collect()),
                "mappings": h.mapping().render(),
                "settings": render(&flat_settings(&h), false),
            }),
        );
    }
    Ok(reply(StatusCode::OK, Value::Object(out), &params))
}

/// `GET /{index}/_mapping`.
pub async fn get_mapping(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    mapping_of(&st, &index, &params)
}

/// `GET /_mapping`.
pub async fn get_mapping_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    mapping_of(&st, "_all", &params)
}

fn mapping_of(st: &AppState, expr: &str, params: &Params) -> ApiResult<Response> {
    let mut out = Map::new();
    for h in resolve_for(st, expr, params, false)? {
        out.insert(
            h.name().to_string(),
            json!({"mappings": h.mapping().render()}),
        );
    }
    Ok(reply(StatusCode::OK, Value::Object(out), params))
}

/// `PUT /{index}/_mapping`: adds fields; changing a field's type is a 400.
pub async fn put_mapping(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.ok_or_else(|| {
        sluice_engine::EngineError::new(
            sluice_engine::ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: mapping source is empty;",
        )
    })?;
    let update = Mapping::parse(&body)?;
    acknowledge_each(&st, &index, &params, move |h| h.put_mapping(&update)).await
}

/// Applies `change` to every index `index` names, on the blocking pool, stopping at the first
/// failure; answers `{"acknowledged": true}`.
async fn acknowledge_each(
    st: &AppState,
    index: &str,
    params: &Params,
    change: impl Fn(&sluice_engine::index::IndexHandle) -> sluice_engine::Result<()> + Send + 'static,
) -> ApiResult<Response> {
    let targets = resolve_for(st, index, params, false)?;
    blocking(move || targets.iter().try_for_each(|h| change(h))).await?;
    Ok(reply(StatusCode::OK, json!({"acknowledged": true}), params))
}

/// `GET /{index}/_settings[?flat_settings][&include_defaults]`.
pub async fn get_settings(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    settings_of(&st, &index, None, &params)
}

/// `GET /{index}/_settings/{name}`: only the settings whose flat key matches one of the
/// comma-separated `name` patterns (`*` wildcards), e.g. `index.blocks.*`.
pub async fn get_settings_named(
    State(st): State<Arc<AppState>>,
    Path((index, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    settings_of(&st, &index, Some(&name), &params)
}

/// `GET /_settings`: the settings of every index.
pub async fn get_settings_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    settings_of(&st, "_all", None, &params)
}

/// `GET /_settings/{name}`: the named settings of every index.
pub async fn get_settings_all_named(
    State(st): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    settings_of(&st, "_all", Some(&name), &params)
}

fn settings_of(
    st: &AppState,
    index: &str,
    names: Option<&str>,
    params: &Params,
) -> ApiResult<Response> {
    let flat = bool_param(params, "flat_settings")?;
    let include_defaults = bool_param(params, "include_defaults")?;
    let wanted =
        |key: &str| names.is_none_or(|n| n.split(',').any(|p| wildcard_match(p.trim(), key)));
    let mut out = Map::new();
    for h in resolve_for(st, index, params, false)? {
        let mut settings = flat_settings(&h);
        let defaults: BTreeMap<String, String> = unset_defaults(&settings)
            .into_iter()
            .filter(|(k, _)| wanted(k))
            .collect();
        settings.retain(|k, _| wanted(k));
        let mut entry = Map::new();
        entry.insert("settings".into(), render(&settings, flat));
        if include_defaults {
            entry.insert("defaults".into(), render(&defaults, flat));
        }
        out.insert(h.name().to_string(), Value::Object(entry));
    }
    Ok(reply(StatusCode::OK, Value::Object(out), params))
}

/// `PUT /{index}/_settings`: changes dynamic settings of every index `index` names. The body
/// is the settings (nested or dotted, with or without the `index.` prefix), or an object with
/// one `settings` key holding them; a `null` value resets a setting to its default.
pub async fn put_settings(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    let update = match body {
        Value::Object(mut top) if top.len() == 1 && top.contains_key("settings") => {
            top.remove("settings").unwrap_or(Value::Null)
        }
        other => other,
    };
    match &update {
        Value::Object(m) if !m.is_empty() => {}
        Value::Object(_) | Value::Null => {
            return Err(EngineError::new(
                ErrorCode::ActionRequestValidation,
                "Validation Failed: 1: no settings to update;",
            )
            .into());
        }
        _ => {
            return Err(EngineError::parsing(
                "Failed to parse the index settings: expecting an object of settings",
            )
            .into());
        }
    }
    acknowledge_each(&st, &index, &params, move |h| h.update_settings(&update)).await
}

/// `POST|GET /{index}/_flush` and `/_flush`: commits the indices' writes. A commit is what a
/// refresh does in sluice (the translog is replayed from the last one), so flushed writes are
/// also visible to search afterwards, which OpenSearch's flush does not promise either way.
pub async fn flush(
    State(st): State<Arc<AppState>>,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let expr = index.map_or_else(|| "_all".to_string(), |Path(i)| i);
    let opts = IndicesOptions::from_params(&params, IndicesOptions::default())?;
    let handles: Vec<_> = st.engine.resolve_targets(&expr, &opts)?;
    let started = std::time::Instant::now();
    let reply = do_refresh(st, expr, params).await?;
    for t in &handles {
        t.handle.stats().record_flush(started.elapsed());
    }
    Ok(reply)
}

/// `PUT /{index}/_block/{block}`: sets `index.blocks.{block}` to true on every index named,
/// for the blocks sluice enforces (`write`, `read_only`).
pub async fn add_block(
    State(st): State<Arc<AppState>>,
    Path((index, block)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    match block.as_str() {
        "write" | "read_only" => {}
        "read" | "metadata" => {
            return Err(EngineError::illegal_argument(format!(
                "the [{block}] block is not supported by sluice; use [write] or [read_only]"
            ))
            .into());
        }
        other => {
            return Err(EngineError::illegal_argument(format!(
                "unknown index block [{other}]; expected one of [write, read_only, read, metadata]"
            ))
            .into());
        }
    }
    let targets = resolve_for(&st, &index, &params, false)?;
    let update = json!({ format!("index.blocks.{block}"): true });
    let names = blocking(move || {
        let mut names = Vec::new();
        for h in targets {
            h.update_settings(&update)?;
            names.push(json!({"name": h.name(), "blocked": true}));
        }
        Ok(names)
    })
    .await?;
    Ok(reply(
        StatusCode::OK,
        json!({"acknowledged": true, "shards_acknowledged": true, "indices": names}),
        &params,
    ))
}

/// `POST /{index}/_refresh`.
pub async fn refresh(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    do_refresh(st, index, params).await
}

/// `POST /_refresh`.
pub async fn refresh_all(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    do_refresh(st, "_all".to_string(), params).await
}

/// Refreshes the indices `index` names with the request's options (a hidden one through
/// `expand_wildcards`); `_shards` counts every copy as a write's does (`total`: primaries and
/// replicas, the unassigned ones included; `successful`: the copies refreshed, this node's).
async fn do_refresh(st: Arc<AppState>, index: String, params: Params) -> ApiResult<Response> {
    let opts = IndicesOptions::from_params(&params, IndicesOptions::default())?;
    let engine = st.engine.clone();
    let (total, done) = blocking(move || {
        let targets = engine.resolve_targets(&index, &opts)?;
        let mut total = 0;
        for t in &targets {
            t.handle.refresh()?;
            total += super::health::index_health(&t.handle).copies();
        }
        Ok::<_, EngineError>((total, targets.len() as u64))
    })
    .await?;
    Ok(reply(
        StatusCode::OK,
        json!({"_shards": {"total": total, "successful": done, "failed": 0}}),
        &params,
    ))
}

/// The columns of `_cat/indices` (and `_list/indices`).
pub(crate) const CAT_INDICES: &[Column] = &[
    Column::new("health", "h", "current health status"),
    Column::new("status", "s", "open/close status"),
    Column::new("index", "i,idx", "index name"),
    Column::new("uuid", "id,uuid", "index uuid"),
    Column::new(
        "pri",
        "p,shards.primary,shardsPrimary",
        "number of primary shards",
    ),
    Column::new(
        "rep",
        "r,shards.replica,shardsReplica",
        "number of replica shards",
    ),
    Column::new("docs.count", "dc,docsCount", "available docs"),
    Column::new("docs.deleted", "dd,docsDeleted", "deleted docs"),
    Column::hidden(
        "creation.date",
        "cd",
        "index creation date (millisecond value)",
    ),
    Column::new(
        "store.size",
        "ss,storeSize",
        "store size of primaries & replicas",
    ),
    Column::new("pri.store.size", "", "store size of primaries"),
    Column::hidden("segments.count", "sc,segmentsCount", "number of segments"),
];

/// `GET /_cat/indices[/{index}]`, with the `_cat` parameters (`h`, `s`, `bytes`, `help`,
/// `format`, `v`) and `health=` keeping only the indices of that health.
pub async fn cat_indices(
    State(st): State<Arc<AppState>>,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let health_filter = health_filter(&params)?;
    let handles = resolve_for(&st, &index_expr(index), &params, true)?;
    let mut table = Table::new(CAT_INDICES);
    for h in &handles {
        if let Some(row) = index_row(h, health_filter) {
            table.push(row);
        }
    }
    table.respond(&params)
}

/// The index expression of a `_cat` or `_list` route: its `{index}`, else every index.
pub(crate) fn index_expr(index: Option<Path<String>>) -> String {
    index.map_or_else(|| "_all".to_string(), |Path(i)| i)
}

/// The `health=` of `_cat/indices` and `_list/indices`: the one health to keep, if any.
pub(crate) fn health_filter(params: &Params) -> Result<Option<&'static str>, EngineError> {
    match params.get("health").map(String::as_str) {
        None => Ok(None),
        Some("green") => Ok(Some("green")),
        Some("yellow") => Ok(Some("yellow")),
        Some("red") => Ok(Some("red")),
        Some(other) => Err(EngineError::illegal_argument(format!(
            "unknown cluster health status [{other}]"
        ))),
    }
}

/// `h`'s row of [`CAT_INDICES`], or `None` when its health is not the one `health` keeps.
pub(crate) fn index_row(
    h: &sluice_engine::index::IndexHandle,
    health: Option<&str>,
) -> Option<Vec<Cell>> {
    let status = super::health::index_health(h).status;
    if health.is_some_and(|f| f != status) {
        return None;
    }
    let rep = h.setting_u64("index.number_of_replicas", 1);
    let searcher = h.searcher();
    let deleted: u64 = searcher
        .segment_readers()
        .iter()
        .map(|s| u64::from(s.num_deleted_docs()))
        .sum();
    let closed = h.is_closed();
    let size = h.size_in_bytes();
    let when_open = |c: Cell| if closed { Cell::Null } else { c };
    Some(vec![
        Cell::Text(status.to_string()),
        Cell::Text(if closed { "close" } else { "open" }.to_string()),
        Cell::Text(h.name().to_string()),
        Cell::Text(h.uuid().to_string()),
        Cell::Int(h.number_of_shards() as i64),
        Cell::Int(rep as i64),
        when_open(Cell::Int(searcher.num_docs() as i64)),
        when_open(Cell::Int(deleted as i64)),
        Cell::Int(h.creation_date()),
        when_open(Cell::Bytes(size)),
        when_open(Cell::Bytes(size)),
        when_open(Cell::Int(searcher.segment_readers().len() as i64)),
    ])
}

/// The columns of `_cat/count`.
const CAT_COUNT: &[Column] = &[
    Column::new("epoch", "t,time", "seconds since 1970-01-01 00:00:00"),
    Column::new("timestamp", "ts,hms,hhmmss", "time in HH:MM:SS"),
    Column::new("count", "dc,docs.count,docsCount", "the document count"),
];

/// `GET /_cat/count[/{index}]`: the documents visible to search, as `epoch timestamp count`.
pub async fn cat_count(
    State(st): State<Arc<AppState>>,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let count: u64 = st
        .engine
        .resolve(&index_expr(index))?
        .iter()
        .map(|h| h.searcher().num_docs())
        .sum();
    let (epoch, timestamp) = cat_now();
    let mut table = Table::new(CAT_COUNT);
    table.push(vec![
        Cell::Int(epoch),
        Cell::Text(timestamp),
        Cell::Int(count as i64),
    ]);
    table.respond(&params)
}

/// Now as `_cat` shows it: seconds since the epoch and `HH:MM:SS` (UTC).
pub(crate) fn cat_now() -> (i64, String) {
    let now_secs = sluice_engine::now_millis().div_euclid(1000);
    let day_secs = now_secs.rem_euclid(86_400);
    let timestamp = format!(
        "{:02}:{:02}:{:02}",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60
    );
    (now_secs, timestamp)
}
