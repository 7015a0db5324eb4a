//! `GET /_list/indices[/{index}]` and `GET /_list/shards[/{index}]`: the `_cat/indices` and
//! `_cat/shards` tables cut into pages (OpenSearch's `RestIndicesListAction` and
//! `RestShardsListAction`, 2.18 and later), with the `_cat` parameters and `size`, `sort` and
//! `next_token` (`api/paging.rs` decides what a page holds).
//!
//! # Decisions
//! - The pages run over the indices the expression names, as `_cat/indices` resolves it
//!   (closed indices included, hidden ones when wildcards are asked to reach them); OpenSearch
//!   cuts its pages over the cluster state's indices, hidden ones included, and leaves those
//!   it does not show out of the page, which then holds fewer rows.
//! - `health=` keeps the page's indices of that health, after the page is cut, as OpenSearch
//!   does: a page may hold fewer rows than `size`, and its token still leads on.
//! - `help` answers the column list before any page parameter is read, as OpenSearch does.
//! - `s=` sorts the rows within the page; the pages themselves follow `sort`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use sluice_engine::EngineError;
use sluice_engine::index::IndexHandle;

use super::cat::{Column, Page, Table, help, text, wants_help};
use super::indices::{CAT_INDICES, health_filter, index_expr, index_row, resolve_for};
use super::paging::{
    INDEX_LIMITS, IndexToken, Limits, PageParams, SHARD_LIMITS, ShardToken, index_page, shard_page,
};
use super::shards::{CAT_SHARDS, creation_key as key, layout, push_rows};
use crate::error::ApiResult;
use crate::http::{Params, Path, Query};
use crate::state::AppState;

/// `GET /_list/indices[/{index}]`: a page of `_cat/indices`' rows, under `indices` in JSON.
pub async fn list_indices(
    State(st): State<Arc<AppState>>,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let list = Listing {
        columns: CAT_INDICES,
        limits: INDEX_LIMITS,
        entity: "indices",
    };
    list.answer(
        &st,
        index,
        &params,
        IndexToken::parse,
        |handles, page, token, table| {
            let health = health_filter(&params)?;
            let (handles, next) = index_page(handles, key, page, token);
            for h in &handles {
                if let Some(row) = index_row(h, health) {
                    table.push(row);
                }
            }
            Ok(next)
        },
    )
}

/// `GET /_list/shards[/{index}]`: a page of `_cat/shards`' rows, under `shards` in JSON.
pub async fn list_shards(
    State(st): State<Arc<AppState>>,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let list = Listing {
        columns: CAT_SHARDS,
        limits: SHARD_LIMITS,
        entity: "shards",
    };
    list.answer(
        &st,
        index,
        &params,
        ShardToken::parse,
        |handles, page, token, table| {
            let (spans, next) = shard_page(handles, key, |h| layout(h), page, token)?;
            for span in spans {
                push_rows(table, &span.item, span.shards, st.cluster.me());
            }
            Ok(next)
        },
    )
}

/// A paginated table: its `_cat` columns, its page sizes and the key of its rows in JSON.
struct Listing {
    columns: &'static [Column],
    limits: Limits,
    entity: &'static str,
}

impl Listing {
    /// Answers a `_list` request: `help` before anything else, then the page parameters and
    /// the token (read by `read_token`), the indices `index` names, and the page `fill` puts
    /// in the table, which answers the next page's token.
    fn answer<T>(
        &self,
        st: &AppState,
        index: Option<Path<String>>,
        params: &Params,
        read_token: fn(&str) -> Result<T, EngineError>,
        fill: impl FnOnce(
            Vec<Arc<IndexHandle>>,
            &PageParams,
            Option<&T>,
            &mut Table,
        ) -> ApiResult<Option<String>>,
    ) -> ApiResult<Response> {
        if wants_help(params) {
            return Ok(text(help(self.columns)));
        }
        let page = PageParams::parse(params, self.limits)?;
        let token = page.token.as_deref().map(read_token).transpose()?;
        let handles = resolve_for(st, &index_expr(index), params, true)?;
        let mut table = Table::new(self.columns);
        let next = fill(handles, &page, token.as_ref(), &mut table)?;
        table.respond_page(
            params,
            Page {
                entity: self.entity,
                next_token: next.as_deref(),
            },
        )
    }
}
