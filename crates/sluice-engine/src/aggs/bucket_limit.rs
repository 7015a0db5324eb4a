//! The bucket limit checked before tantivy fills in a histogram's empty buckets.
//!
//! With `min_doc_count: 0` a histogram has a bucket for every interval between its lowest and
//! highest key (widened by `extended_bounds`, clamped by `hard_bounds`), and tantivy only adds
//! the empty ones when it finishes the result. It counts their memory first, and a tiny
//! `interval` over a wide range fails that memory check (an `illegal_argument_exception`)
//! before the bucket limit is ever looked at. OpenSearch counts those buckets against
//! `search.max_buckets` as it adds them and answers `too_many_buckets_exception`; so
//! [`check_filled_histograms`] counts each histogram's buckets from its merged keys, as tantivy
//! will fill them, and reports the same error before tantivy starts.
//!
//! The check is per histogram (one under each bucket of a parent aggregation counts on its
//! own); tantivy's own check still counts the whole result once it is built.

use tantivy::aggregation::agg_req::{AggregationVariants, Aggregations};
use tantivy::aggregation::bucket::HistogramAggregation;
use tantivy::aggregation::intermediate_agg_result::{
    IntermediateAggregationResult, IntermediateBucketResult, IntermediateHistogramBucketEntry,
};

use super::{AggFruit, too_many_buckets};
use crate::error::Result;

/// Nanoseconds per millisecond: tantivy keeps a date column's histogram keys in nanoseconds
/// while the request's interval, offset and bounds are in milliseconds.
const NANOS_PER_MILLI: f64 = 1_000_000.0;

/// Fails with `too_many_buckets_exception` when a histogram of `merged` that fills in empty
/// buckets (`min_doc_count: 0`) would hold more than `limit` buckets; nested histograms are
/// checked under each bucket of their parent.
///
/// `request` is the tantivy request `merged` was collected for. Results the request does not
/// describe, and the buckets of `range` aggregations (whose entries tantivy keeps private), are
/// left to tantivy's own checks.
pub(super) fn check_filled_histograms(
    merged: &AggFruit,
    request: &Aggregations,
    limit: u32,
) -> Result<()> {
    for (name, agg) in request {
        let Some(IntermediateAggregationResult::Bucket(result)) = merged.get(name) else {
            continue;
        };
        let subs = &agg.sub_aggregation;
        match result {
            IntermediateBucketResult::Histogram {
                buckets,
                is_date_agg,
            } => {
                if let AggregationVariants::Histogram(histogram) = &agg.agg {
                    let count = filled_len(histogram, buckets, *is_date_agg);
                    if count > u64::from(limit) {
                        return Err(too_many_buckets(limit, count));
                    }
                }
                for bucket in buckets {
                    check_filled_histograms(&bucket.sub_aggregation, subs, limit)?;
                }
            }
            IntermediateBucketResult::Terms { buckets } => {
                for (_, entry) in buckets.entries() {
                    check_filled_histograms(&entry.sub_aggregation, subs, limit)?;
                }
            }
            IntermediateBucketResult::Filter {
                sub_aggregations, ..
            } => check_filled_histograms(sub_aggregations, subs, limit)?,
            IntermediateBucketResult::Range(_)
            | IntermediateBucketResult::Composite { .. }
            | IntermediateBucketResult::MultiTerms { .. } => {}
        }
    }
    Ok(())
}

/// The number of buckets tantivy's final result gives `histogram` with these collected
/// `buckets`: every interval from the lowest to the highest key, the range widened by
/// `extended_bounds` and clamped by `hard_bounds`, when `min_doc_count` is 0; otherwise at most
/// the collected ones.
///
/// This follows tantivy's gap filling (`generate_bucket_pos_with_opt_minmax`): bucket positions
/// are `floor((value - offset) / interval)`, saturated to `i64`.
fn filled_len(
    histogram: &HistogramAggregation,
    buckets: &[IntermediateHistogramBucketEntry],
    is_date_agg: bool,
) -> u64 {
    let collected = buckets.len() as u64;
    if histogram.min_doc_count.unwrap_or(0) > 0 {
        return collected;
    }
    // The request's values in the unit of the keys.
    let scale = if is_date_agg && !histogram.is_normalized_to_ns {
        NANOS_PER_MILLI
    } else {
        1.0
    };
    let (mut min, mut max) = buckets
        .iter()
        .map(|b| b.key)
        .fold((f64::MAX, f64::MIN), |(lo, hi), k| (lo.min(k), hi.max(k)));
    if let Some(bounds) = &histogram.extended_bounds {
        min = min.min(bounds.min * scale);
        max = max.max(bounds.max * scale);
    }
    if let Some(bounds) = &histogram.hard_bounds {
        min = min.max(bounds.min * scale);
        max = max.min(bounds.max * scale);
    }
    let interval = histogram.interval * scale;
    let offset = histogram.offset.unwrap_or(0.0) * scale;
    let position = |value: f64| ((value - offset) / interval).floor() as i64;
    let span = i128::from(position(max)) - i128::from(position(min)) + 1;
    u64::try_from(span.max(0))
        .unwrap_or(u64::MAX)
        .max(collected)
}
