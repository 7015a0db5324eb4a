//! Index operations: `POST /{index}/_close`, `POST /{index}/_open` and
//! `POST [/{index}]/_forcemerge` (tantivy's merge of the index's segments).

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use sluice_engine::EngineError;

use super::cluster_settings::bool_param;
use super::indices::resolve_for;
use crate::backend::embedded::blocking;
use crate::error::ApiResult;
use crate::http::{Params, RequestMeta, reply};
use crate::state::AppState;
use crate::tasks::actions;

/// `POST /{index}/_close`: commits each index's writes and closes it; searches and document
/// operations on it answer `index_closed_exception` until `_open`.
pub async fn close(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let targets = resolve_for(&st, &index, &params, false)?;
    let names: Vec<String> = targets.iter().map(|h| h.name().to_string()).collect();
    blocking(move || targets.iter().try_for_each(|h| h.close())).await?;
    let indices: Map<String, Value> = names
        .into_iter()
        .map(|n| (n, json!({"closed": true})))
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({"acknowledged": true, "shards_acknowledged": true, "indices": indices}),
        &params,
    ))
}

/// `POST /{index}/_open`: opens closed indices (wildcards reach closed ones).
pub async fn open(
    State(st): State<Arc<AppState>>,
    Path(index): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let targets = resolve_for(&st, &index, &params, true)?;
    blocking(move || targets.iter().try_for_each(|h| h.open_again())).await?;
    Ok(reply(
        StatusCode::OK,
        json!({"acknowledged": true, "shards_acknowledged": true}),
        &params,
    ))
}

/// `POST /_forcemerge` and `/{index}/_forcemerge`: merges each index's segments down to
/// `max_num_segments` (default: as few as the merge gives, one), or with
/// `only_expunge_deletes` rewrites the segments that hold deleted documents; answers when done,
/// or with `wait_for_completion=false` at once with `{"task": …}` (a task of action
/// `indices:admin/forcemerge` whose result `GET _tasks/{id}` reads, as opensearch-benchmark's
/// polling force-merge does).
pub async fn forcemerge(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let index = index.map_or_else(|| "_all".to_string(), |Path(i)| i);
    let max_num_segments = match params.get("max_num_segments") {
        None => None,
        Some(v) => Some(v.parse::<i64>().map_err(|_| {
            EngineError::illegal_argument(format!(
                "Failed to parse int parameter [max_num_segments] with value [{v}]"
            ))
        })?),
    };
    let only_expunge_deletes = bool_param(&params, "only_expunge_deletes")?;
    bool_param(&params, "flush")?;
    if only_expunge_deletes && max_num_segments.is_some_and(|n| n != -1) {
        return Err(EngineError::new(
            sluice_engine::ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: cannot set only_expunge_deletes and max_num_segments at the same time, those two parameters are mutually exclusive;",
        )
        .into());
    }
    let max = match max_num_segments {
        None | Some(-1) => 1,
        Some(n) if n >= 1 => n as usize,
        Some(n) => {
            return Err(EngineError::illegal_argument(format!(
                "[max_num_segments] must be -1 or a positive number, got [{n}]"
            ))
            .into());
        }
    };
    let targets = resolve_for(&st, &index, &params, false)?;
    let shards: u64 = targets
        .iter()
        .map(|h| super::health::index_health(h).copies())
        .sum();
    let done = targets.len() as u64;
    let answer = json!({"_shards": {"total": shards, "successful": done, "failed": 0}});
    let merge = move || {
        targets
            .iter()
            .try_for_each(|h| h.force_merge(max, only_expunge_deletes))
    };
    // OpenSearch's default: the request answers when the merge is done.
    if !params.contains_key("wait_for_completion") || bool_param(&params, "wait_for_completion")? {
        blocking(merge).await?;
        return Ok(reply(StatusCode::OK, answer, &params));
    }
    let description = format!(
        "Force-merge indices [{index}], maxSegments[{max}], onlyExpungeDeletes[{only_expunge_deletes}], flush[true]"
    );
    let guard = st.tasks.register(
        actions::FORCEMERGE,
        description,
        None,
        meta.principal.clone(),
    );
    st.tasks.expect_result(guard.task());
    let id = guard.id().to_string();
    let bg = st.clone();
    tokio::spawn(async move {
        let outcome = blocking(merge).await.map(|()| answer);
        bg.tasks
            .store_outcome(guard.task(), outcome.as_ref().map(Value::clone));
        // Unregistered once its result is stored.
        drop(guard);
    });
    Ok(reply(StatusCode::OK, json!({"task": id}), &params))
}
