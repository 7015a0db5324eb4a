//! tantivy's final aggregation results rendered as OpenSearch renders them.
//!
//! The plan tree supplies what tantivy's result lacks: request order, `meta`, the field type
//! behind each key (integers stay integers, dates get `key_as_string`), calendar bucket keys,
//! and the requested ranges (tantivy adds buckets for the gaps between them).

use serde_json::{Map, Number, Value};
use tantivy::aggregation::Key;
use tantivy::aggregation::agg_result::{
    AggregationResult, AggregationResults, BucketEntries, BucketEntry, BucketResult, MetricResult,
    RangeBucketEntry,
};
use tantivy::aggregation::metric::PercentileValues;

use super::request::{AggPlan, BucketOrder, MetricKind, PlanKind, ValueKind};
use super::sources;
use crate::date::format_millis;

/// Renders the results of the aggregations in `plans`, in request order; with `typed`
/// (`typed_keys`), each named `type#name` ([`AggPlan::typed_name`]).
pub(super) fn render(
    results: &AggregationResults,
    plans: &[AggPlan],
    typed: bool,
) -> Map<String, Value> {
    let mut out = Map::new();
    render_into(&mut out, results, plans, typed);
    out
}

fn render_into(
    out: &mut Map<String, Value>,
    results: &AggregationResults,
    plans: &[AggPlan],
    typed: bool,
) {
    for plan in plans {
        let name = if typed {
            plan.typed_name()
        } else {
            plan.name.clone()
        };
        out.insert(name, Value::Object(render_agg(results, plan, typed)));
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn opt_float(f: Option<f64>) -> Value {
    f.map_or(Value::Null, float)
}

fn bucket_result<'r>(results: &'r AggregationResults, name: &str) -> Option<&'r BucketResult> {
    match results.0.get(name) {
        Some(AggregationResult::BucketResult(b)) => Some(b),
        _ => None,
    }
}

fn render_agg(results: &AggregationResults, plan: &AggPlan, typed: bool) -> Map<String, Value> {
    let mut obj = Map::new();
    if let Some(meta) = &plan.meta {
        obj.insert("meta".into(), meta.clone());
    }
    match &plan.kind {
        PlanKind::Terms { values, show_error } => {
            let (buckets, other, error) = match bucket_result(results, &plan.name) {
                Some(BucketResult::Terms {
                    buckets,
                    sum_other_doc_count,
                    doc_count_error_upper_bound,
                }) => (
                    buckets.as_slice(),
                    *sum_other_doc_count,
                    doc_count_error_upper_bound.unwrap_or(0),
                ),
                _ => (&[][..], 0, 0),
            };
            obj.insert("doc_count_error_upper_bound".into(), Value::from(error));
            obj.insert("sum_other_doc_count".into(), Value::from(other));
            let rendered = buckets
                .iter()
                .map(|b| Value::Object(terms_bucket(b, *values, *show_error, &plan.subs, typed)))
                .collect();
            obj.insert("buckets".into(), Value::Array(rendered));
        }
        PlanKind::Histogram {
            values,
            keyed,
            order,
            format,
        } => {
            let mut buckets: Vec<(f64, Map<String, Value>)> =
                histogram_entries(results, &plan.name)
                    .into_iter()
                    .map(|b| {
                        let key = key_f64(&b.key);
                        let mut m = Map::new();
                        if *values == ValueKind::Date {
                            m.insert(
                                "key_as_string".into(),
                                Value::from(format_millis(key as i64)),
                            );
                        } else if let Some(format) = format {
                            m.insert("key_as_string".into(), Value::from(format.format(key)));
                        }
                        m.insert("key".into(), float(key));
                        m.insert("doc_count".into(), Value::from(b.doc_count));
                        render_into(&mut m, &b.sub_aggregation, &plan.subs, typed);
                        (key, m)
                    })
                    .collect();
            sort_buckets(&mut buckets, *order);
            obj.insert("buckets".into(), keyed_or_list(buckets, *keyed));
        }
        PlanKind::DateHistogram {
            calendar,
            offset_millis,
            keyed,
            order,
        } => {
            let mut buckets: Vec<(f64, Map<String, Value>)> =
                histogram_entries(results, &plan.name)
                    .into_iter()
                    .map(|b| {
                        let raw = key_f64(&b.key);
                        let millis = match calendar {
                            Some(unit) => unit.start_of(raw as i64).saturating_add(*offset_millis),
                            None => raw as i64,
                        };
                        let mut m = Map::new();
                        m.insert("key_as_string".into(), Value::from(format_millis(millis)));
                        m.insert("key".into(), Value::from(millis));
                        m.insert("doc_count".into(), Value::from(b.doc_count));
                        render_into(&mut m, &b.sub_aggregation, &plan.subs, typed);
                        (millis as f64, m)
                    })
                    .collect();
            sort_buckets(&mut buckets, *order);
            obj.insert("buckets".into(), keyed_or_list(buckets, *keyed));
        }
        PlanKind::Range {
            values,
            ranges,
            keyed,
        } => {
            let mut out = Vec::with_capacity(ranges.len());
            for range in ranges {
                let entry = range_entries(results, &range.tantivy_name)
                    .into_iter()
                    .find(|e| matches!(&e.key, Key::Str(k) if *k == range.internal_key));
                let is_date = *values == ValueKind::Date;
                let end_text = |v: Option<f64>| match v {
                    None => "*".to_string(),
                    Some(v) if is_date => format_millis(v as i64),
                    Some(v) => java_double(v),
                };
                let key = range
                    .key
                    .clone()
                    .unwrap_or_else(|| format!("{}-{}", end_text(range.from), end_text(range.to)));
                let mut m = Map::new();
                if !keyed {
                    m.insert("key".into(), Value::from(key.clone()));
                }
                if let Some(from) = range.from {
                    m.insert("from".into(), float(from));
                    if is_date {
                        m.insert(
                            "from_as_string".into(),
                            Value::from(format_millis(from as i64)),
                        );
                    }
                }
                if let Some(to) = range.to {
                    m.insert("to".into(), float(to));
                    if is_date {
                        m.insert("to_as_string".into(), Value::from(format_millis(to as i64)));
                    }
                }
                m.insert(
                    "doc_count".into(),
                    Value::from(entry.map_or(0, |e| e.doc_count)),
                );
                match entry {
                    Some(e) => render_into(&mut m, &e.sub_aggregation, &plan.subs, typed),
                    None => render_into(&mut m, &AggregationResults::default(), &plan.subs, typed),
                }
                out.push((key, m));
            }
            let buckets = if *keyed {
                Value::Object(
                    out.into_iter()
                        .map(|(k, m)| (k, Value::Object(m)))
                        .collect(),
                )
            } else {
                Value::Array(out.into_iter().map(|(_, m)| Value::Object(m)).collect())
            };
            obj.insert("buckets".into(), buckets);
        }
        PlanKind::Metric { metric, values } => {
            render_metric(&mut obj, results.0.get(&plan.name), *metric, *values)
        }
        PlanKind::Percentiles {
            values,
            percents,
            keyed,
        } => {
            let rendered = render_percentiles(results.0.get(&plan.name), *values, percents, *keyed);
            obj.insert("values".into(), rendered);
        }
        PlanKind::Filter => {
            let (doc_count, subs) = match bucket_result(results, &plan.name) {
                Some(BucketResult::Filter(f)) => (f.doc_count, Some(&f.sub_aggregations)),
                _ => (0, None),
            };
            obj.insert("doc_count".into(), Value::from(doc_count));
            render_into(
                &mut obj,
                subs.unwrap_or(&AggregationResults::default()),
                &plan.subs,
                typed,
            );
        }
    }
    obj
}

fn histogram_entries<'r>(results: &'r AggregationResults, name: &str) -> Vec<&'r BucketEntry> {
    match bucket_result(results, name) {
        Some(BucketResult::Histogram { buckets }) => buckets.iter().collect(),
        _ => Vec::new(),
    }
}

fn range_entries<'r>(results: &'r AggregationResults, name: &str) -> Vec<&'r RangeBucketEntry> {
    match bucket_result(results, name) {
        Some(BucketResult::Range {
            buckets: BucketEntries::Vec(v),
        }) => v.iter().collect(),
        Some(BucketResult::Range {
            buckets: BucketEntries::HashMap(m),
        }) => m.values().collect(),
        _ => Vec::new(),
    }
}

fn key_f64(key: &Key) -> f64 {
    match key {
        Key::F64(f) => *f,
        Key::I64(i) => *i as f64,
        Key::U64(u) => *u as f64,
        Key::Str(s) => s.parse().unwrap_or(f64::NAN),
    }
}

fn sort_buckets(buckets: &mut [(f64, Map<String, Value>)], order: Option<BucketOrder>) {
    let count = |m: &Map<String, Value>| m.get("doc_count").and_then(Value::as_u64).unwrap_or(0);
    match order {
        None | Some(BucketOrder::KeyAsc) => {}
        Some(BucketOrder::KeyDesc) => buckets.reverse(),
        Some(BucketOrder::CountAsc) => {
            buckets.sort_by(|a, b| count(&a.1).cmp(&count(&b.1)).then(a.0.total_cmp(&b.0)))
        }
        Some(BucketOrder::CountDesc) => {
            buckets.sort_by(|a, b| count(&b.1).cmp(&count(&a.1)).then(a.0.total_cmp(&b.0)))
        }
    }
}

/// Buckets as a list, or keyed by `key_as_string` (else the key's text) when `keyed`.
fn keyed_or_list(buckets: Vec<(f64, Map<String, Value>)>, keyed: bool) -> Value {
    if !keyed {
        return Value::Array(buckets.into_iter().map(|(_, m)| Value::Object(m)).collect());
    }
    let mut out = Map::new();
    for (key, m) in buckets {
        let name = match m.get("key_as_string") {
            Some(Value::String(s)) => s.clone(),
            _ => java_double(key),
        };
        out.insert(name, Value::Object(m));
    }
    Value::Object(out)
}

/// A terms bucket: `key` typed by the field (and `key_as_string` for dates and booleans),
/// `doc_count` (and `doc_count_error_upper_bound` when `show_error`), then sub-aggregations.
fn terms_bucket(
    bucket: &BucketEntry,
    values: ValueKind,
    show_error: bool,
    subs: &[AggPlan],
    typed: bool,
) -> Map<String, Value> {
    let mut m = Map::new();
    let (key, key_as_string) = match (values, &bucket.key) {
        (ValueKind::Date, key) => {
            let millis = key_f64(key) as i64;
            (Value::from(millis), Some(format_millis(millis)))
        }
        (ValueKind::Ip, Key::Str(s)) => (
            Value::from(crate::ip::decode(s).unwrap_or_else(|| s.clone())),
            None,
        ),
        (ValueKind::Boolean, key) => {
            let truthy = key_f64(key) != 0.0 || bucket.key_as_string.as_deref() == Some("true");
            (Value::from(u64::from(truthy)), Some(truthy.to_string()))
        }
        (ValueKind::Float, Key::I64(encoded)) => {
            (float(sources::decode_ordered_float(*encoded)), None)
        }
        (ValueKind::Float, key) => (float(key_f64(key)), None),
        (_, Key::F64(f))
            if f.fract() == 0.0 && f.abs() < 9.0e15 && values == ValueKind::Integer =>
        {
            (Value::from(*f as i64), None)
        }
        (_, Key::F64(f)) => (float(*f), None),
        (_, Key::I64(i)) => (Value::from(*i), None),
        (_, Key::U64(u)) => (Value::from(*u), bucket.key_as_string.clone()),
        (_, Key::Str(s)) => (Value::from(s.clone()), None),
    };
    m.insert("key".into(), key);
    if let Some(s) = key_as_string {
        m.insert("key_as_string".into(), Value::from(s));
    }
    m.insert("doc_count".into(), Value::from(bucket.doc_count));
    if show_error {
        // A sluice index is one shard, which sees every term, so each bucket's count is exact:
        // OpenSearch reports 0 for the buckets of a single-shard search.
        m.insert("doc_count_error_upper_bound".into(), Value::from(0));
    }
    render_into(&mut m, &bucket.sub_aggregation, subs, typed);
    m
}

fn render_metric(
    obj: &mut Map<String, Value>,
    result: Option<&AggregationResult>,
    metric: MetricKind,
    values: ValueKind,
) {
    let metric_result = match result {
        Some(AggregationResult::MetricResult(m)) => Some(m),
        _ => None,
    };
    let single = |r: Option<&MetricResult>| match r {
        Some(
            MetricResult::Average(v)
            | MetricResult::Min(v)
            | MetricResult::Max(v)
            | MetricResult::Sum(v)
            | MetricResult::Count(v)
            | MetricResult::Cardinality(v),
        ) => v.value,
        _ => None,
    };
    let as_string = |obj: &mut Map<String, Value>, key: &str, v: Option<f64>| {
        if values == ValueKind::Date
            && let Some(v) = v
        {
            obj.insert(key.into(), Value::from(format_millis(v as i64)));
        }
    };
    match metric {
        MetricKind::Avg | MetricKind::Min | MetricKind::Max => {
            let v = single(metric_result);
            obj.insert("value".into(), opt_float(v));
            as_string(obj, "value_as_string", v);
        }
        MetricKind::Sum => {
            // The sum of no values is 0, not null.
            let v = single(metric_result).unwrap_or(0.0);
            obj.insert("value".into(), float(v));
            as_string(obj, "value_as_string", Some(v));
        }
        MetricKind::ValueCount | MetricKind::Cardinality => {
            // tantivy counts in f64; OpenSearch renders counts as integers.
            let v = single(metric_result).unwrap_or(0.0);
            obj.insert("value".into(), Value::from(v.max(0.0).round() as u64));
        }
        MetricKind::Stats => {
            let (count, min, max, avg, sum) = match metric_result {
                Some(MetricResult::Stats(s)) => (s.count, s.min, s.max, s.avg, s.sum),
                _ => (0, None, None, None, 0.0),
            };
            obj.insert("count".into(), Value::from(count));
            obj.insert("min".into(), opt_float(min));
            obj.insert("max".into(), opt_float(max));
            obj.insert("avg".into(), opt_float(avg));
            obj.insert("sum".into(), float(sum));
            if count > 0 {
                as_string(obj, "min_as_string", min);
                as_string(obj, "max_as_string", max);
                as_string(obj, "avg_as_string", avg);
                as_string(obj, "sum_as_string", Some(sum));
            }
        }
    }
}

/// Renders `percentiles` values: keyed by the percent's Java text (with `<key>_as_string` for
/// dates), or a list of `{key, value}`; values are `null` when no document had a value.
fn render_percentiles(
    result: Option<&AggregationResult>,
    values: ValueKind,
    percents: &[f64],
    keyed: bool,
) -> Value {
    // tantivy was asked for an unkeyed list in the order of `percents`; an empty sketch yields NaN.
    let estimates: Vec<Option<f64>> = match result {
        Some(AggregationResult::MetricResult(MetricResult::Percentiles(p))) => match &p.values {
            PercentileValues::Vec(entries) => entries
                .iter()
                .map(|e| Some(e.value).filter(|v| v.is_finite()))
                .collect(),
            PercentileValues::HashMap(_) => Vec::new(),
        },
        _ => Vec::new(),
    };
    let estimate = |i: usize| estimates.get(i).copied().flatten();
    let as_string = |v: Option<f64>| {
        v.filter(|_| values == ValueKind::Date)
            .map(|v| Value::from(format_millis(v as i64)))
    };
    if keyed {
        let mut out = Map::new();
        for (i, percent) in percents.iter().enumerate() {
            let key = java_double(*percent);
            let v = estimate(i);
            out.insert(key.clone(), opt_float(v));
            if let Some(s) = as_string(v) {
                out.insert(format!("{key}_as_string"), s);
            }
        }
        Value::Object(out)
    } else {
        let list = percents
            .iter()
            .enumerate()
            .map(|(i, percent)| {
                let v = estimate(i);
                let mut m = Map::new();
                m.insert("key".into(), float(*percent));
                m.insert("value".into(), opt_float(v));
                if let Some(s) = as_string(v) {
                    m.insert("value_as_string".into(), s);
                }
                Value::Object(m)
            })
            .collect();
        Value::Array(list)
    }
}

/// Formats a double as Java's `Double.toString` does, as OpenSearch range keys show them:
/// `10.0`, `0.5`, `1.0E7` (the wire crate's one formatter).
pub(super) use sluice_wire::java_double;
