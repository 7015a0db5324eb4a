//! Search execution: request parsing, the collection loop with sorting, cancellation and
//! deadlines, the fetch phase with `_source` filtering, and OpenSearch-shaped responses.
//!
//! The collection loop drives each segment's scorer itself (instead of a tantivy `Collector`)
//! so that it can check the request's [`SearchContext`] every [`CHECK_EVERY_DOCS`] documents
//! and between segments: a cancelled search stops with `task_cancelled_exception`, a search past
//! its deadline stops and returns what it has with `timed_out: true`.
//!
//! One file per role, each using only the ones listed before it:
//!
//! - `context.rs`: [`SearchContext`] (cancellation, deadlines) and the [`NestedSearchHook`];
//! - `sort.rs`: sort specs, the values hits sort by, the tie-break, the `search_after` cursor;
//! - `request.rs`: [`SearchRequest::parse`] and its helpers;
//! - `profile.rs`: the timings of a `profile: true` search and their rendering;
//! - `collect.rs`: per-index preparation and the collection loop over segments;
//! - `render.rs`: the fetch phase, hits, totals and `rest_total_hits_as_int`.
//!
//! This file runs them in order ([`execute`], [`count`]) and re-exports their public items.

mod collect;
mod context;
pub mod fields;
mod highlight;
mod profile;
mod render;
mod request;
mod sort;

use std::time::Instant;

use serde_json::{Value, json};

use crate::error::Result;
use crate::lookup::TermsLookups;
use crate::resolve::Target;

pub use collect::CHECK_EVERY_DOCS;
pub(crate) use collect::{Prepared, prepare};
use collect::{collect, finish_aggs, search_after_cursor};
pub(crate) use context::cancelled;
pub use context::{NestedScope, NestedSearchHook, SearchContext};
use render::render_response;
pub use render::{PRIMARY_TERM, filter_source, render_total_hits_as_int, score_json};
pub use request::{
    DEFAULT_SIZE, DEFAULT_TRACK_TOTAL_HITS, REST_TOTAL_HITS_AS_INT, SearchRequest, SourceFilter,
    TYPED_KEYS, TrackTotalHits, check_unused_options, parse_source, rest_total_hits_as_int,
    typed_keys,
};
pub(crate) use sort::Candidate;
pub use sort::{SortField, SortSpec};

/// Runs a search over `indices` and returns the response body.
///
/// `lookups` resolves the `terms` lookups of the query (see [`crate::lookup`]); without it a
/// lookup is an error.
pub fn execute(
    indices: &[Target],
    req: &SearchRequest,
    ctx: &SearchContext,
    now_millis: i64,
    started: Instant,
    max_buckets: Option<u32>,
    lookups: Option<&TermsLookups<'_>>,
) -> Result<Value> {
    let prepared = prepare(indices, req, now_millis, max_buckets, lookups)?;
    let after = search_after_cursor(&prepared, req)?;
    Ok(run_prepared(&prepared, req, ctx, started, after.as_ref())?.0)
}

/// Collects, aggregates and renders one page over prepared indices; with `after`, only hits
/// strictly after that hit in sort order (search after, for scroll pages). Returns the
/// response and the page's last hit.
pub(crate) fn run_prepared(
    prepared: &[Prepared],
    req: &SearchRequest,
    ctx: &SearchContext,
    started: Instant,
    after: Option<&Candidate>,
) -> Result<(Value, Option<Candidate>)> {
    let mut ctx = ctx.clone();
    if let Some(t) = req.timeout {
        let d = started + t;
        ctx.deadline = Some(ctx.deadline.map_or(d, |x| x.min(d)));
    }
    let collected = collect(prepared, req, &ctx, after)?;
    let aggregations = match (&req.aggs, prepared.first()) {
        (Some(_), Some(_)) => Some(finish_aggs(prepared, &collected, &ctx, req.typed_keys)?),
        (Some(_), None) => Some(json!({})),
        _ => None,
    };
    if ctx.is_cancelled() {
        return Err(cancelled());
    }
    let last = collected.1.hits.last().cloned();
    let resp = render_response(prepared, req, collected.1, aggregations, started, &ctx)?;
    Ok((resp, last))
}

/// Counts the documents matching a query (`_count`); `lookups` as for [`execute`].
pub fn count(
    indices: &[Target],
    query: &Value,
    ctx: &SearchContext,
    now_millis: i64,
    lookups: Option<&TermsLookups<'_>>,
) -> Result<u64> {
    let req = SearchRequest {
        query: query.clone(),
        size: 0,
        track_total_hits: TrackTotalHits::Exact,
        ..SearchRequest::default()
    };
    let v = execute(
        indices,
        &req,
        ctx,
        now_millis,
        Instant::now(),
        None,
        lookups,
    )?;
    Ok(v["hits"]["total"]["value"].as_u64().unwrap_or(0))
}
