//! OpenSearch aggregations on tantivy's aggregation module.
//!
//! A search spans one or more indices, each its own tantivy index with its own mapping, so
//! aggregations run in three steps:
//!
//! 1. [`prepare`] parses the request against one index's mapping into a [`PreparedAggs`]: the
//!    tantivy request (user fields rewritten to their `_kw` columns, dates and calendar units as
//!    computed columns, filters prebuilt from the query DSL) and a plan for rendering.
//! 2. [`PreparedAggs::collector`] runs in the index's search and yields an [`AggFruit`], tantivy's
//!    mergeable intermediate result; [`merge`] folds the fruits of all indices.
//! 3. [`finish`] turns the merged fruit into the `aggregations` object of the response, shaped as
//!    OpenSearch shapes it (request order, integer keys and counts, `key_as_string`, `meta`), and
//!    enforces `search.max_buckets`: first on the empty buckets histograms are about to fill in
//!    (`bucket_limit`, before tantivy's memory check can trip on them), then on the result.
//!
//! Supported: `terms`, `histogram`, `date_histogram` (fixed intervals; calendar minutes to years,
//! weeks starting on Monday; UTC only), `range`, `filter`, `avg`, `min`, `max`, `sum`,
//! `value_count`, `stats` and `cardinality`, with sub-aggregations under bucket aggregations.
//! A numeric `histogram` with `format` renders `key_as_string` with the `DecimalFormat` pattern
//! (`decimal`); `terms` with `show_term_doc_count_error` gives each bucket its (single-shard, so
//! zero) `doc_count_error_upper_bound`. A `terms` aggregation's `include`/`exclude` (regular
//! expressions, value lists, partitions) is read and applied by field type in `include_exclude`.
//!
//! A profiled search collects each top-level aggregation with its own collector
//! ([`PreparedAggs::profiled_parts`]) so that each can be timed; their fruits merge into
//! the same result.
//!
//! # Cancellation
//!
//! The collector is a plain tantivy [`Collector`](tantivy::collector::Collector) with no
//! cancellation of its own: tantivy's aggregation code never checks a flag. A caller that must
//! stop a search wraps it (or drives its segment collectors itself) and checks its flag in
//! `for_segment` and every few thousand documents in `collect`; dropping a segment collector
//! midway is safe, and the fruits harvested so far stay mergeable, so a timed-out search can still
//! [`finish`] with partial results.

mod bucket_limit;
mod decimal;
mod include_exclude;
mod render;
mod request;
mod sources;

use std::sync::Arc;

use serde_json::Value;
use tantivy::TantivyError;
use tantivy::aggregation::agg_req::Aggregations;
use tantivy::aggregation::intermediate_agg_result::IntermediateAggregationResults;
use tantivy::aggregation::{
    AggContextParams, AggregationError, AggregationLimitsGuard, DistributedAggregationCollector,
};

use crate::error::{EngineError, ErrorCode, Result};
use crate::query::QueryContext;

/// OpenSearch's default `search.max_buckets`.
pub const DEFAULT_MAX_BUCKETS: u32 = 65_535;

/// The per-index intermediate result of the aggregations; merge them with [`merge`].
pub type AggFruit = IntermediateAggregationResults;

/// The collector computing an index's [`AggFruit`].
pub type AggCollector = DistributedAggregationCollector;

/// Aggregations prepared for one index.
pub struct PreparedAggs {
    /// The tantivy request, whose names are the user's aggregation names.
    request: Aggregations,
    /// Limits, tokenizers and the computed columns the request reads.
    context: AggContextParams,
    /// How to render each aggregation, in request order.
    plans: Vec<request::AggPlan>,
    /// The most buckets [`finish`] may return (`search.max_buckets`).
    max_buckets: u32,
    /// The top-level aggregations and their tantivy parts, for profiling.
    groups: Vec<request::AggGroup>,
}

/// One top-level aggregation collected on its own, so that a profile can time it.
pub struct ProfiledAgg {
    /// The aggregation's name (OpenSearch's profile `description`).
    pub name: String,
    /// OpenSearch's aggregator class for it (the profile `type`).
    pub class: &'static str,
    /// Its part of the tantivy request.
    request: Aggregations,
}

impl PreparedAggs {
    /// The collector computing this index's intermediate results; a plain tantivy collector
    /// (see the module docs on cancellation).
    pub fn collector(&self) -> AggCollector {
        DistributedAggregationCollector::from_aggs(self.request.clone(), self.context.clone())
    }

    /// The collector of one top-level aggregation of [`Self::profiled_parts`].
    pub fn collector_of(&self, part: &ProfiledAgg) -> AggCollector {
        DistributedAggregationCollector::from_aggs(part.request.clone(), self.context.clone())
    }

    /// The top-level aggregations, in request order, each to be collected on its own
    /// ([`Self::collector_of`]) in a profiled search: the merged fruits of all of them are the
    /// fruit of [`Self::collector`]. Sub-aggregations are collected (and timed) with their
    /// parent.
    pub fn profiled_parts(&self) -> Vec<ProfiledAgg> {
        self.groups
            .iter()
            .map(|g| {
                let mut request = Aggregations::default();
                for name in &g.entries {
                    if let Some(agg) = self.request.get(name) {
                        request.insert(name.clone(), agg.clone());
                    }
                }
                ProfiledAgg {
                    name: g.name.clone(),
                    class: g.class,
                    request,
                }
            })
            .collect()
    }

    /// The bucket limit [`finish`] enforces.
    pub fn max_buckets(&self) -> u32 {
        self.max_buckets
    }
}

/// Prepares the `aggs` object of a search for one index; `max_buckets` defaults to
/// [`DEFAULT_MAX_BUCKETS`].
///
/// # Errors
///
/// `parsing_exception` for an unknown aggregation type or a malformed definition,
/// `x_content_parse_exception` for an unknown parameter or a value of the wrong shape,
/// `illegal_argument_exception` for an aggregation on a `text` field, a field type the
/// aggregation does not support or an invalid interval; errors of `filter` queries as
/// [`build_query`](crate::query::build_query) reports them.
pub fn prepare(aggs: &Value, ctx: &QueryContext, max_buckets: Option<u32>) -> Result<PreparedAggs> {
    let mut builder = request::Builder::new(ctx);
    let (request, plans, groups) = builder.top_level(aggs)?;
    builder.finish();
    let max_buckets = max_buckets.unwrap_or(DEFAULT_MAX_BUCKETS);
    // The bucket limit is checked by `finish`; the limits here guard memory during collection.
    let limits = AggregationLimitsGuard::new(None, Some(max_buckets));
    let context = AggContextParams::new(limits, ctx.index.tokenizers().clone())
        .with_value_sources(Arc::new(builder.sources));
    Ok(PreparedAggs {
        request,
        context,
        plans,
        max_buckets,
        groups,
    })
}

/// Merges the intermediate results of two indices (or segments).
pub fn merge(mut a: AggFruit, b: AggFruit) -> Result<AggFruit> {
    a.merge_fruits(b).map_err(classify_error)?;
    Ok(a)
}

/// Renders merged intermediate results as the `aggregations` object of a search response.
///
/// `prepared` is the [`PreparedAggs`] of one index of the search: all share the request's
/// structure, and its mapping decides how keys are typed. When the search spans indices whose
/// mappings differ, prefer [`finish_all`], which types a field unmapped in the first index by
/// the next index that maps it.
///
/// # Errors
///
/// `too_many_buckets_exception` when the result holds more than `max_buckets` buckets, or a
/// histogram would fill in more than that many.
pub fn finish(merged: AggFruit, prepared: &PreparedAggs) -> Result<Value> {
    finish_all(merged, &[prepared], false)
}

/// [`finish`] with the [`PreparedAggs`] of every index of the search (at least one); the first
/// one's limit applies. With `typed_keys`, each aggregation is named `type#name`, as
/// OpenSearch names it for that parameter.
pub fn finish_all(merged: AggFruit, prepared: &[&PreparedAggs], typed_keys: bool) -> Result<Value> {
    let (first, rest) = prepared
        .split_first()
        .ok_or_else(|| EngineError::internal("no prepared aggregations to finish"))?;
    bucket_limit::check_filled_histograms(&merged, &first.request, first.max_buckets)?;
    let limits = AggregationLimitsGuard::new(None, Some(first.max_buckets));
    let results = merged
        .into_final_result(first.request.clone(), limits)
        .map_err(classify_error)?;
    if rest.is_empty() {
        return Ok(Value::Object(render::render(
            &results,
            &first.plans,
            typed_keys,
        )));
    }
    let mut plans = first.plans.clone();
    for other in rest {
        request::adopt_value_kinds(&mut plans, &other.plans);
    }
    Ok(Value::Object(render::render(&results, &plans, typed_keys)))
}

/// Renders the `aggregations` object of a search that collected nothing (every aggregation
/// empty, as OpenSearch renders it), typed as [`finish_all`] types it.
pub fn finish_empty(prepared: &PreparedAggs, typed_keys: bool) -> Result<Value> {
    finish_all(AggFruit::default(), &[prepared], typed_keys)
}

/// Classifies a tantivy error raised while collecting or finishing aggregations: the bucket
/// limit is `too_many_buckets_exception`, invalid requests and the memory limit are
/// `illegal_argument_exception`, anything else is internal.
pub fn classify_error(e: TantivyError) -> EngineError {
    match e {
        TantivyError::AggregationError(AggregationError::BucketLimitExceeded {
            limit,
            current,
        }) => too_many_buckets(limit, u64::from(current)),
        TantivyError::AggregationError(AggregationError::MemoryExceeded { limit, current }) => {
            EngineError::illegal_argument(format!(
                "aggregations need more memory than allowed: [{current:?}] > [{limit:?}]; narrow the query \
                 or request fewer buckets"
            ))
        }
        TantivyError::AggregationError(AggregationError::InvalidRequest(reason))
        | TantivyError::AggregationError(AggregationError::InternalError(reason))
        | TantivyError::InvalidArgument(reason) => EngineError::illegal_argument(reason),
        TantivyError::AggregationError(AggregationError::DateHistogramParseError(e)) => {
            EngineError::illegal_argument(e.to_string())
        }
        other => crate::error::tantivy_error(other),
    }
}

/// OpenSearch's `too_many_buckets_exception` for a result of `current` buckets over the
/// `limit` of `search.max_buckets`.
fn too_many_buckets(limit: u32, current: u64) -> EngineError {
    EngineError::new(
        ErrorCode::TooManyBuckets,
        format!(
            "Trying to create too many buckets. Must be less than or equal to: [{limit}] but was \
             [{current}]. This limit can be set by changing the [search.max_buckets] cluster level setting."
        ),
    )
    .with_extra("max_buckets", Value::from(limit))
}
