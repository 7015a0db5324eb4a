//! `GET /_stats[/{metric}]` and `GET /{index}/_stats[/{metric}]`: the documents, store,
//! indexing, get, search, merge, refresh, flush, segment and translog figures each index keeps
//! (`sluice_engine::index_stats`), per index and summed under `_all`, at `level=cluster`,
//! `indices` (the default) or `shards`. Every index is one shard with only its primary
//! assigned, so `primaries` and `total` hold the same figures. `translog` is the size of the
//! index's write-ahead log, which is emptied at each commit, so all of it is uncommitted.

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_engine::EngineError;
use sluice_engine::index::IndexHandle;

use super::indices::resolve_for;
use crate::error::ApiResult;
use crate::http::{Params, reply};
use crate::state::AppState;

/// The metrics OpenSearch's indices stats accept; sluice renders those it keeps (the others,
/// such as `query_cache`, are accepted and answer nothing, as sluice has no such cache).
const KNOWN_METRICS: &[&str] = &[
    "_all",
    "docs",
    "store",
    "indexing",
    "get",
    "search",
    "merge",
    "refresh",
    "flush",
    "segments",
    "warmer",
    "query_cache",
    "fielddata",
    "completion",
    "translog",
    "suggest",
    "request_cache",
    "recovery",
];

/// The heap figures of `segments` that OpenSearch 3.x still names and always reports as 0
/// (Lucene has kept terms, norms, points and doc values off the heap since 9.0); tantivy reads
/// them through mmap likewise, so sluice reports the same 0. opensearch-benchmark's index-stats
/// telemetry reads these keys and logs a warning for each one missing.
const SEGMENT_MEMORY_KEYS: &[&str] = &[
    "memory_in_bytes",
    "terms_memory_in_bytes",
    "stored_fields_memory_in_bytes",
    "term_vectors_memory_in_bytes",
    "norms_memory_in_bytes",
    "points_memory_in_bytes",
    "doc_values_memory_in_bytes",
];

/// `GET /_stats` and `/_stats/{metric}`.
pub async fn stats_all(
    State(st): State<Arc<AppState>>,
    metric: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let metric = metric.map(|Path(m)| m);
    let path = format!(
        "/_stats{}",
        metric
            .as_deref()
            .map(|m| format!("/{m}"))
            .unwrap_or_default()
    );
    render(&st, "_all", metric.as_deref(), &path, &params)
}

/// `GET /{index}/_stats` and `/{index}/_stats/{metric}`.
pub async fn stats_index(
    State(st): State<Arc<AppState>>,
    Path(parts): Path<Vec<(String, String)>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let get = |k: &str| parts.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let index = get("index").unwrap_or_else(|| "_all".to_string());
    let metric = get("metric");
    let path = format!(
        "/{index}/_stats{}",
        metric
            .as_deref()
            .map(|m| format!("/{m}"))
            .unwrap_or_default()
    );
    render(&st, &index, metric.as_deref(), &path, &params)
}

/// The figures of one index for the wanted metrics.
pub(crate) fn index_figures(h: &IndexHandle, wants: &dyn Fn(&str) -> bool) -> Map<String, Value> {
    let mut out = Map::new();
    let searcher = h.searcher();
    let stats = h.stats();
    if wants("docs") {
        let deleted: u64 = searcher
            .segment_readers()
            .iter()
            .map(|s| u64::from(s.num_deleted_docs()))
            .sum();
        out.insert(
            "docs".into(),
            json!({"count": searcher.num_docs(), "deleted": deleted}),
        );
    }
    if wants("store") {
        out.insert(
            "store".into(),
            json!({"size_in_bytes": h.size_in_bytes(), "reserved_in_bytes": 0}),
        );
    }
    if wants("indexing") {
        out.insert("indexing".into(), stats.indexing_json());
    }
    if wants("get") {
        out.insert("get".into(), stats.get_json());
    }
    if wants("search") {
        out.insert("search".into(), stats.search_json());
    }
    if wants("merge") {
        out.insert("merges".into(), stats.merges_json());
    }
    if wants("refresh") {
        out.insert("refresh".into(), stats.refresh_json());
    }
    if wants("flush") {
        out.insert("flush".into(), stats.flush_json());
    }
    if wants("segments") {
        let mut segments = json!({"count": searcher.segment_readers().len()});
        for key in SEGMENT_MEMORY_KEYS {
            segments[*key] = json!(0);
        }
        out.insert("segments".into(), segments);
    }
    if wants("translog") {
        let size = h.translog_size_in_bytes();
        out.insert(
            "translog".into(),
            json!({"size_in_bytes": size, "uncommitted_size_in_bytes": size}),
        );
    }
    out
}

/// Adds `b`'s numbers into `a`, key by key (objects recursively), for `_all`.
pub(crate) fn sum_into(a: &mut Map<String, Value>, b: &Map<String, Value>) {
    for (k, v) in b {
        match (a.get_mut(k), v) {
            (Some(Value::Object(x)), Value::Object(y)) => sum_into(x, y),
            (Some(Value::Number(x)), Value::Number(y)) => {
                if let (Some(p), Some(q)) = (x.as_u64(), y.as_u64()) {
                    *x = (p + q).into();
                }
            }
            (None, v) => {
                a.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
}

fn render(
    st: &AppState,
    index: &str,
    metric: Option<&str>,
    path: &str,
    params: &Params,
) -> ApiResult<Response> {
    let metrics: Vec<&str> = metric
        .unwrap_or("_all")
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    let unknown: Vec<&str> = metrics
        .iter()
        .copied()
        .filter(|m| !KNOWN_METRICS.contains(m))
        .collect();
    if !unknown.is_empty() {
        return Err(EngineError::illegal_argument(format!(
            "request [{path}] contains unrecognized metric{}: [{}]",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", ")
        ))
        .into());
    }
    let all = metrics.contains(&"_all");
    let wants = |m: &str| all || metrics.contains(&m);
    let level = params.get("level").map(String::as_str).unwrap_or("indices");
    if !matches!(level, "cluster" | "indices" | "shards") {
        return Err(EngineError::illegal_argument(format!(
            "level parameter must be one of [cluster] or [indices] or [shards] but was [{level}]"
        ))
        .into());
    }
    let handles = resolve_for(st, index, params, false)?;
    let mut totals = Map::new();
    let mut per_index = Map::new();
    let (mut shards_total, mut shards_ok) = (0u64, 0u64);
    for h in handles.iter().filter(|h| !h.is_closed()) {
        let health = super::health::index_health(h);
        shards_total += health.copies();
        shards_ok += health.active;
        let figures = index_figures(h, &wants);
        sum_into(&mut totals, &figures);
        if level == "cluster" {
            continue;
        }
        let mut entry = json!({
            "uuid": h.uuid(),
            "primaries": Value::Object(figures.clone()),
            "total": Value::Object(figures.clone()),
        });
        if level == "shards" {
            let mut shard = figures.clone();
            shard.insert(
                "routing".into(),
                json!({"state": "STARTED", "primary": true, "node": st.identity.node_id, "relocating_node": null}),
            );
            entry["shards"] = json!({ "0": [Value::Object(shard)] });
        }
        per_index.insert(h.name().to_string(), entry);
    }
    let mut body = json!({
        "_shards": {"total": shards_total, "successful": shards_ok, "failed": 0},
        "_all": {"primaries": Value::Object(totals.clone()), "total": Value::Object(totals)},
    });
    if level != "cluster" {
        body["indices"] = Value::Object(per_index);
    }
    Ok(reply(StatusCode::OK, body, params))
}
