//! `GET /_cat/shards[/{index}]`: one row per shard copy, as OpenSearch's `RestShardsAction`
//! lays them out (its rows also `_list/shards`', `api/list.rs`).
//!
//! # Decisions
//! - The shards are those the node's other APIs report (`_cluster/health`, `_cat/indices`):
//!   `index.number_of_shards` primaries, `STARTED` on this node, and `index.number_of_replicas`
//!   replicas of each, `UNASSIGNED` (a sluice node keeps one copy of its data). An index is
//!   one tantivy index whatever its shard count, so its documents, store and segments are
//!   shown on shard 0 and the other primaries show 0; a replica or a closed index shows none.
//! - Rows come in the `_list` order — indices by creation date, then name; shard ids
//!   ascending; each primary before its replicas — where OpenSearch's follow its routing
//!   table's map. `s=` sorts them as on every `_cat` table.
//! - The columns are OpenSearch's defaults (`index`, `shard`, `prirep`, `state`, `docs`,
//!   `store`, `ip`, `node`) and the node's `id` and `segments.count`; OpenSearch's other
//!   columns (per-shard indexing, search, merge … figures) are not kept per shard here, so
//!   `h=` skips them as it skips any unknown name.

use std::ops::Range;
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use sluice_cluster::Member;
use sluice_engine::index::IndexHandle;

use super::cat::{Cell, Column, Table};
use super::indices::{index_expr, resolve_for};
use super::paging::{Order, sort_items};
use crate::error::ApiResult;
use crate::http::{Params, Path, Query};
use crate::state::AppState;

/// The columns of `_cat/shards` (and `_list/shards`), with OpenSearch's names and aliases.
pub(crate) const CAT_SHARDS: &[Column] = &[
    Column::new("index", "i,idx", "index name"),
    Column::new("shard", "s,sh", "shard name"),
    Column::new("prirep", "p,pr,primaryOrReplica", "primary or replica"),
    Column::new("state", "st", "shard state"),
    Column::new("docs", "d,dc", "number of docs in shard"),
    Column::new(
        "store",
        "sto",
        "store size of shard (how much disk it uses)",
    ),
    Column::new("ip", "", "ip of node where it lives"),
    Column::hidden("id", "", "unique id of node where it lives"),
    Column::new("node", "n", "name of node where it lives"),
    Column::hidden("segments.count", "sc,segmentsCount", "number of segments"),
];

/// `GET /_cat/shards[/{index}]`: every shard copy of the indices named (every index by
/// default, closed ones included), with the `_cat` parameters.
pub async fn cat_shards(
    State(st): State<Arc<AppState>>,
    index: Option<Path<String>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let mut handles = resolve_for(&st, &index_expr(index), &params, true)?;
    sort_items(&mut handles, &creation_key, Order::Asc);
    let mut table = Table::new(CAT_SHARDS);
    for h in &handles {
        push_rows(&mut table, h, 0..layout(h).0, st.cluster.me());
    }
    table.respond(&params)
}

/// An index's place in the `_list` order (and `_cat/shards`'): its creation date and name.
pub(crate) fn creation_key(h: &Arc<IndexHandle>) -> (i64, &str) {
    (h.creation_date(), h.name())
}

/// An index's shards as `_list/shards` pages them: its shard count and the copies of each
/// (the primary and its replicas).
pub(crate) fn layout(h: &IndexHandle) -> (u64, u64) {
    let replicas = h.setting_u64("index.number_of_replicas", 1);
    (h.number_of_shards(), replicas.saturating_add(1))
}

/// Adds the rows of `h`'s shard ids `shards` to `table`: each primary, on `node`, then its
/// replicas.
pub(crate) fn push_rows(table: &mut Table, h: &IndexHandle, shards: Range<u64>, node: &Member) {
    let (_, copies) = layout(h);
    let closed = h.is_closed();
    // The index's figures, read once and only for the shard that shows them.
    let figures = (shards.contains(&0) && !closed).then(|| {
        let searcher = h.searcher();
        (
            searcher.num_docs() as i64,
            h.size_in_bytes(),
            searcher.segment_readers().len() as i64,
        )
    });
    for shard in shards {
        let (docs, store, segments) = match (closed, shard, figures) {
            (true, _, _) => (Cell::Null, Cell::Null, Cell::Null),
            (false, 0, Some((d, s, g))) => (Cell::Int(d), Cell::Bytes(s), Cell::Int(g)),
            (false, _, _) => (Cell::Int(0), Cell::Bytes(0), Cell::Int(0)),
        };
        table.push(vec![
            Cell::Text(h.name().to_string()),
            Cell::Int(shard as i64),
            Cell::Text("p".to_string()),
            Cell::Text("STARTED".to_string()),
            docs,
            store,
            Cell::Text(node.transport_addr.ip().to_string()),
            Cell::Text(node.node_id.clone()),
            Cell::Text(node.name.clone()),
            segments,
        ]);
        for _ in 1..copies {
            table.push(vec![
                Cell::Text(h.name().to_string()),
                Cell::Int(shard as i64),
                Cell::Text("r".to_string()),
                Cell::Text("UNASSIGNED".to_string()),
                Cell::Null,
                Cell::Null,
                Cell::Null,
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ]);
        }
    }
}
