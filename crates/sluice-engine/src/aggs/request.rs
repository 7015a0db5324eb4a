//! An OpenSearch aggregation request turned into tantivy's request and a rendering plan.
//!
//! Each user field becomes its `_kw` column (or a computed column, see [`sources`]); parameters
//! are validated here so that errors carry OpenSearch's words, and the tantivy request only
//! receives parameters it understands. The [`AggPlan`] tree remembers what tantivy's result
//! cannot: request order, field types for key rendering, calendar units, `meta`, range keys.
//!
//! The tantivy variant chosen for an aggregation depends only on the request, never on the
//! mapping, so that intermediate results of indices with different mappings merge.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};
use tantivy::aggregation::ValueSourceRegistry;
use tantivy::aggregation::agg_req::{Aggregation, AggregationVariants, Aggregations};
use tantivy::aggregation::bucket::{FilterAggregation, QueryBuilder};
use tantivy::columnar::MonotonicallyMappableToU64;
use tantivy::query::Query;
use tantivy::schema::Schema;
use tantivy::tokenizer::TokenizerManager;

use super::decimal::DecimalPattern;
use super::include_exclude;
use super::sources::{self, CalendarUnit, Derivation, DerivedProvider};
use crate::error::{EngineError, ErrorCode, Result};
use crate::mapping::FieldType;
use crate::query::{self, QueryContext};
use crate::schema::KW_FIELD;

/// Milliseconds in a second, the `s` unit of `fixed_interval`.
const SECOND_MILLIS: i64 = 1_000;
/// Milliseconds in a minute, the `m` unit (UTC has no leap seconds in epoch time).
const MINUTE_MILLIS: i64 = 60 * SECOND_MILLIS;
/// Milliseconds in an hour, the `h` unit.
const HOUR_MILLIS: i64 = 60 * MINUTE_MILLIS;
/// Milliseconds in a day, the `d` unit (fixed: sluice evaluates dates in UTC only).
const DAY_MILLIS: i64 = 24 * HOUR_MILLIS;
/// Milliseconds in a calendar week, which in UTC is always seven days.
const WEEK_MILLIS: i64 = 7 * DAY_MILLIS;
/// Fixed 7-day buckets are aligned to the epoch, a Thursday; shifting them by four days makes
/// them start on Mondays, as OpenSearch's calendar weeks do.
const MONDAY_OFFSET_MILLIS: i64 = 4 * DAY_MILLIS;

/// The fielddata error OpenSearch gives for aggregating on a `text` field.
pub(super) fn text_field_error(field: &str) -> EngineError {
    EngineError::illegal_argument(format!(
        "Text fields are not optimised for operations that require per-document field data like \
         aggregations and sorting, so these operations are disabled by default. Please use a \
         keyword field instead. Alternatively, set fielddata=true on [{field}] in order to load \
         field data by uninverting the inverted index. Note that this can use significant memory."
    ))
}

/// The type of the values an aggregation reads, for rendering keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueKind {
    /// Strings.
    Keyword,
    /// Integers.
    Integer,
    /// Floats.
    Float,
    /// Dates, read as epoch milliseconds.
    Date,
    /// Booleans.
    Boolean,
    /// IP addresses, kept in their hex encoding ([`crate::ip`]).
    Ip,
    /// A field this index does not map: no values.
    Unmapped,
}

impl ValueKind {
    fn of(ty: FieldType) -> ValueKind {
        match ty {
            FieldType::Text | FieldType::Keyword => ValueKind::Keyword,
            ty if ty.is_integer() => ValueKind::Integer,
            ty if ty.is_float() => ValueKind::Float,
            FieldType::Date => ValueKind::Date,
            FieldType::Ip => ValueKind::Ip,
            _ => ValueKind::Boolean,
        }
    }
}

/// The single-value and multi-value metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MetricKind {
    Avg,
    Min,
    Max,
    Sum,
    ValueCount,
    Stats,
    Cardinality,
}

/// A bucket order applied when rendering histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BucketOrder {
    KeyAsc,
    KeyDesc,
    CountAsc,
    CountDesc,
}

/// One requested range of a `range` aggregation.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RangePlan {
    /// The key tantivy knows the bucket by (unique within the aggregation).
    pub(super) internal_key: String,
    /// The name of the tantivy aggregation holding the bucket.
    pub(super) tantivy_name: String,
    /// The user's key, if any.
    pub(super) key: Option<String>,
    /// Inclusive lower end (milliseconds for dates).
    pub(super) from: Option<f64>,
    /// Exclusive upper end.
    pub(super) to: Option<f64>,
}

/// How to render one aggregation.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum PlanKind {
    Terms {
        values: ValueKind,
        /// `show_term_doc_count_error`: each bucket carries its `doc_count_error_upper_bound`.
        show_error: bool,
    },
    Histogram {
        values: ValueKind,
        keyed: bool,
        order: Option<BucketOrder>,
        /// The `format` pattern rendering each key's `key_as_string`.
        format: Option<DecimalPattern>,
    },
    DateHistogram {
        calendar: Option<CalendarUnit>,
        offset_millis: i64,
        keyed: bool,
        order: Option<BucketOrder>,
    },
    Range {
        values: ValueKind,
        ranges: Vec<RangePlan>,
        keyed: bool,
    },
    Metric {
        metric: MetricKind,
        values: ValueKind,
    },
    /// `percentiles`: the requested percents, sorted as OpenSearch sorts them; tantivy is always
    /// asked for an unkeyed list in this order, and `keyed` only changes the rendering.
    Percentiles {
        values: ValueKind,
        percents: Vec<f64>,
        keyed: bool,
    },
    Filter,
}

impl PlanKind {
    fn values_mut(&mut self) -> Option<&mut ValueKind> {
        match self {
            PlanKind::Terms { values, .. }
            | PlanKind::Histogram { values, .. }
            | PlanKind::Range { values, .. }
            | PlanKind::Metric { values, .. }
            | PlanKind::Percentiles { values, .. } => Some(values),
            PlanKind::DateHistogram { .. } | PlanKind::Filter => None,
        }
    }
}

/// Fills the value kinds `plans` lack (fields unmapped in their index) from the plans of another
/// index of the same search; the trees have the same shape, as they come from one request.
pub(super) fn adopt_value_kinds(plans: &mut [AggPlan], other: &[AggPlan]) {
    for (plan, other) in plans.iter_mut().zip(other) {
        let mut other_kind = other.kind.clone();
        if let (Some(values), Some(other_values)) =
            (plan.kind.values_mut(), other_kind.values_mut())
            && *values == ValueKind::Unmapped
        {
            *values = *other_values;
        }
        adopt_value_kinds(&mut plan.subs, &other.subs);
    }
}

/// One aggregation of the request, with its sub-aggregations, in request order.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AggPlan {
    pub(super) name: String,
    /// The aggregation's type as the request names it (`terms`, `date_range`, `avg`…), for
    /// `typed_keys` ([`AggPlan::typed_name`]).
    pub(super) ty: &'static str,
    pub(super) meta: Option<Value>,
    pub(super) kind: PlanKind,
    pub(super) subs: Vec<AggPlan>,
}

impl AggPlan {
    /// The name of its result with `typed_keys`: `type#name`, typed as OpenSearch types the
    /// result (a `terms` aggregation by its values: `sterms`, `lterms`, `dterms`, or `umterms`
    /// when no index maps the field; `percentiles` as `tdigest_percentiles`), so a client can
    /// tell which class to read it with.
    pub(super) fn typed_name(&self) -> String {
        let ty = match (&self.kind, self.ty) {
            (PlanKind::Terms { values, .. }, _) => match values {
                ValueKind::Keyword | ValueKind::Ip => "sterms",
                ValueKind::Integer | ValueKind::Date | ValueKind::Boolean => "lterms",
                ValueKind::Float => "dterms",
                ValueKind::Unmapped => "umterms",
            },
            (_, "percentiles") => "tdigest_percentiles",
            (_, ty) => ty,
        };
        format!("{ty}#{}", self.name)
    }
}

/// One top-level aggregation of a request and the tantivy aggregations it is made of.
#[derive(Debug, Clone)]
pub(super) struct AggGroup {
    /// The aggregation's name.
    pub(super) name: String,
    /// The class of OpenSearch's aggregator for it, as a profile names it.
    pub(super) class: &'static str,
    /// The names of its tantivy aggregations.
    pub(super) entries: Vec<String>,
}

/// The class name OpenSearch's profile gives the aggregator of an aggregation of type `ty`.
fn aggregator_class(ty: &str, kind: &PlanKind) -> &'static str {
    match ty {
        "terms" => match kind {
            PlanKind::Terms {
                values: ValueKind::Keyword | ValueKind::Ip,
                ..
            } => "GlobalOrdinalsStringTermsAggregator",
            _ => "NumericTermsAggregator",
        },
        "histogram" => "NumericHistogramAggregator",
        "date_histogram" => "DateHistogramAggregator",
        "range" | "date_range" => "RangeAggregator",
        "filter" => "FilterAggregator",
        "avg" => "AvgAggregator",
        "min" => "MinAggregator",
        "max" => "MaxAggregator",
        "sum" => "SumAggregator",
        "value_count" => "ValueCountAggregator",
        "stats" => "StatsAggregator",
        "cardinality" => "CardinalityAggregator",
        "percentiles" => "TDigestPercentilesAggregator",
        _ => "Aggregator",
    }
}

/// A filter aggregation's query, built from the DSL before the search.
///
/// tantivy takes custom filter queries as a typetag-serialisable [`QueryBuilder`]; the query is
/// prebuilt, so the builder only clones it. The serialisation hooks are only used to send
/// requests across processes, which sluice does not do: the query is skipped and the type name
/// is fixed.
#[derive(Debug, Clone, Serialize)]
struct PrebuiltFilter {
    #[serde(skip)]
    query: Arc<dyn Query>,
}

impl QueryBuilder for PrebuiltFilter {
    fn build_query(
        &self,
        _schema: &Schema,
        _tokenizers: &TokenizerManager,
    ) -> tantivy::Result<Box<dyn Query>> {
        Ok(self.query.box_clone())
    }

    fn box_clone(&self) -> Box<dyn QueryBuilder> {
        Box::new(self.clone())
    }

    fn typetag_name(&self) -> &'static str {
        "sluice_prebuilt_filter"
    }

    fn typetag_deserialize(&self) {}
}

/// Aggregation types OpenSearch knows that sluice does not run.
/// The aggregation types sluice runs (the checks before a plan is built refuse the others).
const SUPPORTED_TYPES: &[&str] = &[
    "terms",
    "histogram",
    "date_histogram",
    "range",
    "date_range",
    "filter",
    "avg",
    "min",
    "max",
    "sum",
    "value_count",
    "stats",
    "cardinality",
    "percentiles",
];

/// `ty`, one of [`SUPPORTED_TYPES`], as a `&'static str` for its plan.
fn static_type(ty: &str) -> &'static str {
    SUPPORTED_TYPES
        .iter()
        .copied()
        .find(|t| *t == ty)
        .unwrap_or("unsupported")
}

const UNSUPPORTED_TYPES: &[&str] = &[
    "adjacency_matrix",
    "auto_date_histogram",
    "avg_bucket",
    "bucket_script",
    "bucket_selector",
    "bucket_sort",
    "children",
    "composite",
    "cumulative_sum",
    "derivative",
    "diversified_sampler",
    "extended_stats",
    "filters",
    "geo_bounds",
    "geo_centroid",
    "geo_distance",
    "geohash_grid",
    "global",
    "ip_range",
    "matrix_stats",
    "max_bucket",
    "median_absolute_deviation",
    "min_bucket",
    "missing",
    "moving_avg",
    "multi_terms",
    "nested",
    "parent",
    "percentile_ranks",
    "rare_terms",
    "reverse_nested",
    "sampler",
    "scripted_metric",
    "serial_diff",
    "significant_terms",
    "significant_text",
    "stats_bucket",
    "sum_bucket",
    "top_hits",
    "variable_width_histogram",
    "weighted_avg",
];

/// Builds the tantivy request, the plans and the computed columns of one index.
///
/// # Invariants
///
/// Every name in `registered` is registered in `sources` (both only grow, in
/// [`Builder::derived`]), so a computed column is registered once however often it is named.
pub(super) struct Builder<'a, 'c> {
    ctx: &'a QueryContext<'c>,
    /// The computed columns the request names.
    pub(super) sources: ValueSourceRegistry,
    registered: HashSet<String>,
    /// `terms` columns with `include`/`exclude` applied, registered by [`Builder::finish`].
    pending_terms_sources: Vec<(String, include_exclude::TermsValuesProvider)>,
}

/// An aggregation's field, resolved in the index's mapping.
struct FieldRef {
    /// The fast-field column (`_kw.<path>`), also for unmapped fields (it has no values).
    column: String,
    /// What the values are.
    values: ValueKind,
    /// The field as the request names it.
    name: String,
    /// The mapping type name, for messages.
    type_name: &'static str,
}

/// The parameters of an aggregation body and the aggregation's name and type, for messages.
struct Body<'a> {
    name: &'a str,
    ty: &'a str,
    obj: &'a Map<String, Value>,
}

impl Body<'_> {
    fn unknown(&self, key: &str) -> EngineError {
        EngineError::new(
            ErrorCode::XContentParse,
            format!("[{}] unknown field [{key}]", self.ty),
        )
    }

    fn bad_value(&self, key: &str, v: &Value, expected: &str) -> EngineError {
        EngineError::new(
            ErrorCode::XContentParse,
            format!(
                "[{}] failed to parse field [{key}] in [{}]: expected {expected}, got [{v}]",
                self.ty, self.name
            ),
        )
    }

    fn uint(&self, key: &str, v: &Value) -> Result<u64> {
        match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
        .ok_or_else(|| self.bad_value(key, v, "a non-negative integer"))
    }

    fn number(&self, key: &str, v: &Value) -> Result<f64> {
        match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
        .filter(|f: &f64| f.is_finite())
        .ok_or_else(|| self.bad_value(key, v, "a number"))
    }

    fn boolean(&self, key: &str, v: &Value) -> Result<bool> {
        match v {
            Value::Bool(b) => Ok(*b),
            Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
            _ => Err(self.bad_value(key, v, "[true] or [false]")),
        }
    }

    fn string<'v>(&self, key: &str, v: &'v Value) -> Result<&'v str> {
        v.as_str().ok_or_else(|| self.bad_value(key, v, "a string"))
    }

    fn unsupported_type(&self, field: &FieldRef) -> EngineError {
        EngineError::illegal_argument(format!(
            "Field [{}] of type [{}] is not supported for aggregation [{}]",
            field.name, field.type_name, self.ty
        ))
    }
}

impl<'a, 'c> Builder<'a, 'c> {
    pub(super) fn new(ctx: &'a QueryContext<'c>) -> Self {
        Builder {
            ctx,
            sources: ValueSourceRegistry::default(),
            registered: HashSet::new(),
            pending_terms_sources: Vec::new(),
        }
    }

    /// Registers the `terms` columns built while parsing (kept until then because a column's
    /// `missing` is set after it is named); call once, after [`Builder::top_level`].
    pub(super) fn finish(&mut self) {
        for (name, provider) in self.pending_terms_sources.drain(..) {
            self.sources
                .register(&name, include_exclude::provider(provider));
        }
    }

    /// Parses an `aggs` object: `{"<name>": {"<type>": {...}, "aggs": {...}, "meta": {...}}}`.
    pub(super) fn aggs(&mut self, aggs: &Value) -> Result<(Aggregations, Vec<AggPlan>)> {
        let (request, plans, _) = self.top_level(aggs)?;
        Ok((request, plans))
    }

    /// [`Builder::aggs`], also naming which tantivy aggregations make up each aggregation (a
    /// profile times each top-level one on its own).
    pub(super) fn top_level(
        &mut self,
        aggs: &Value,
    ) -> Result<(Aggregations, Vec<AggPlan>, Vec<AggGroup>)> {
        let obj = aggs.as_object().ok_or_else(|| {
            EngineError::parsing(format!(
                "Expected [START_OBJECT] under [aggregations], but got a [{}]",
                query::json_kind(aggs)
            ))
        })?;
        let mut request = Aggregations::default();
        let mut plans = Vec::with_capacity(obj.len());
        let mut groups = Vec::with_capacity(obj.len());
        for (name, def) in obj {
            let (entries, plan) = self.agg(name, def)?;
            let ty = def
                .as_object()
                .and_then(|o| {
                    o.keys()
                        .find(|k| !matches!(k.as_str(), "aggs" | "aggregations" | "meta"))
                })
                .map_or("", String::as_str);
            groups.push(AggGroup {
                name: name.clone(),
                class: aggregator_class(ty, &plan.kind),
                entries: entries.iter().map(|(n, _)| n.clone()).collect(),
            });
            for (tantivy_name, agg) in entries {
                request.insert(tantivy_name, agg);
            }
            plans.push(plan);
        }
        Ok((request, plans, groups))
    }

    /// Parses one named aggregation; a `range` with overlapping ranges yields one tantivy
    /// aggregation per range.
    fn agg(&mut self, name: &str, def: &Value) -> Result<(Vec<(String, Aggregation)>, AggPlan)> {
        if name.is_empty() || name.contains(['[', ']', '>']) {
            return Err(EngineError::parsing(format!(
                "Invalid aggregation name [{name}]. Aggregation names can contain any character except '[', ']', and '>'"
            )));
        }
        // OpenSearch's message really lacks the bracket after the name.
        let obj = def.as_object().ok_or_else(|| {
            EngineError::parsing(format!(
                "Aggregation definition for [{name} starts with a [{}], expected a [START_OBJECT].",
                query::json_kind(def)
            ))
        })?;
        let mut kind: Option<(&str, &Value)> = None;
        let mut subs: Option<&Value> = None;
        let mut meta = None;
        for (key, value) in obj {
            match key.as_str() {
                "aggs" | "aggregations" => {
                    if subs.is_some() {
                        return Err(EngineError::parsing(format!(
                            "Found two sub aggregation definitions under [{name}]"
                        )));
                    }
                    subs = Some(value);
                }
                "meta" => {
                    if !value.is_object() {
                        return Err(EngineError::parsing(format!(
                            "Expected [START_OBJECT] under [meta], but got a [{}] in [{name}]",
                            query::json_kind(value)
                        )));
                    }
                    meta = Some(value.clone());
                }
                other => {
                    if let Some((first, _)) = kind {
                        return Err(EngineError::parsing(format!(
                            "Found two aggregation type definitions in [{name}]: [{first}] and [{other}]"
                        )));
                    }
                    kind = Some((other, value));
                }
            }
        }
        let (ty, body) = kind.ok_or_else(|| {
            EngineError::parsing(format!("Missing definition for aggregation [{name}]"))
        })?;
        if UNSUPPORTED_TYPES.contains(&ty) {
            return Err(EngineError::illegal_argument(format!(
                "aggregation type [{ty}] of [{name}] is not supported by sluice; supported types are \
                 terms, histogram, date_histogram, range, date_range, filter, avg, min, max, sum, \
                 value_count, stats, cardinality and percentiles"
            )));
        }
        let is_bucket = matches!(
            ty,
            "terms" | "histogram" | "date_histogram" | "range" | "date_range" | "filter"
        );
        let is_metric = matches!(
            ty,
            "avg" | "min" | "max" | "sum" | "value_count" | "stats" | "cardinality" | "percentiles"
        );
        if !is_bucket && !is_metric {
            return Err(EngineError::parsing(format!(
                "Unknown aggregation type [{ty}]"
            )));
        }
        let (sub_request, sub_plans) = match subs {
            Some(subs) if is_bucket => self.aggs(subs)?,
            Some(subs) if subs.as_object().is_some_and(|o| !o.is_empty()) => {
                return Err(EngineError::illegal_argument(format!(
                    "Aggregator [{name}] of type [{ty}] cannot accept sub-aggregations"
                )));
            }
            _ => (Aggregations::default(), Vec::new()),
        };
        if ty == "filter" {
            let query = query::build_query(body, self.ctx)?;
            let filter = FilterAggregation::new_with_builder(Box::new(PrebuiltFilter {
                query: Arc::from(query),
            }));
            let agg = Aggregation {
                agg: AggregationVariants::Filter(filter),
                sub_aggregation: sub_request,
            };
            let plan = AggPlan {
                name: name.to_string(),
                ty: "filter",
                meta,
                kind: PlanKind::Filter,
                subs: sub_plans,
            };
            return Ok((vec![(name.to_string(), agg)], plan));
        }
        let obj = body.as_object().ok_or_else(|| {
            EngineError::parsing(format!(
                "Expected [START_OBJECT] under [{ty}], but got a [{}] in [{name}]",
                query::json_kind(body)
            ))
        })?;
        let body = Body { name, ty, obj };
        let (entries, kind) = match ty {
            "terms" => self.terms(&body, &sub_request, &sub_plans)?,
            "histogram" => self.histogram(&body, sub_request)?,
            "date_histogram" => self.date_histogram(&body, sub_request)?,
            "range" => self.range(&body, sub_request)?,
            // A `range` over a date field, with its bounds read as dates (date math too).
            "date_range" => {
                let field = self.field(&body)?;
                if field.values != ValueKind::Date {
                    return Err(body.unsupported_type(&field));
                }
                self.range(&body, sub_request)?
            }
            "percentiles" => self.percentiles(&body)?,
            _ => self.metric(&body)?,
        };
        Ok((
            entries,
            AggPlan {
                name: name.to_string(),
                ty: static_type(ty),
                meta,
                kind,
                subs: sub_plans,
            },
        ))
    }

    /// Resolves the `field` of an aggregation to its column and value kind.
    fn field(&self, body: &Body) -> Result<FieldRef> {
        if body.obj.contains_key("script") {
            return Err(EngineError::illegal_argument(format!(
                "[{}] aggregation [{}] uses a script; scripts are not supported by sluice",
                body.ty, body.name
            )));
        }
        let name = match body.obj.get("field") {
            Some(v) => body.string("field", v)?.to_string(),
            None => {
                return Err(EngineError::illegal_argument(
                    "Required one of fields [field, script], but none were specified.",
                ));
            }
        };
        match self.ctx.mapping.resolve(&name) {
            None => Ok(FieldRef {
                column: format!("{KW_FIELD}.{name}"),
                values: ValueKind::Unmapped,
                type_name: "unmapped",
                name,
            }),
            Some(f) => match f.fast_field_name() {
                Some(column) => Ok(FieldRef {
                    column,
                    values: ValueKind::of(f.ty),
                    type_name: f.ty.name(),
                    name,
                }),
                None => Err(text_field_error(&name)),
            },
        }
    }

    /// Registers a computed column once and returns its name.
    fn derived(&mut self, column: &str, derivation: Derivation) -> String {
        let name = sources::source_name(column, derivation);
        if self.registered.insert(name.clone()) {
            self.sources
                .register(&name, Arc::new(DerivedProvider::new(column, derivation)));
        }
        name
    }

    /// Deserialises a tantivy aggregation from the JSON built for it.
    fn tantivy_agg(
        body: &Body,
        tantivy_ty: &str,
        params: Map<String, Value>,
        subs: Aggregations,
    ) -> Result<Aggregation> {
        let mut outer = Map::new();
        outer.insert(tantivy_ty.to_string(), Value::Object(params));
        let agg: AggregationVariants =
            serde_json::from_value(Value::Object(outer)).map_err(|e| {
                EngineError::illegal_argument(format!(
                    "[{}] aggregation [{}] is invalid: {e}",
                    body.ty, body.name
                ))
            })?;
        Ok(Aggregation {
            agg,
            sub_aggregation: subs,
        })
    }

    fn terms(
        &mut self,
        body: &Body,
        subs: &Aggregations,
        sub_plans: &[AggPlan],
    ) -> Result<(Vec<(String, Aggregation)>, PlanKind)> {
        let field = self.field(body)?;
        let (column, values) = (field.column.clone(), field.values);
        let column = match values {
            ValueKind::Date => self.derived(&column, Derivation::Millis),
            ValueKind::Float => self.derived(&column, Derivation::OrderedFloat),
            _ => column,
        };
        let mut params = Map::new();
        params.insert("field".into(), Value::from(column));
        let mut show_error = false;
        let mut include = None;
        let mut exclude = None;
        let mut missing_raw = None;
        for (key, v) in body.obj {
            match key.as_str() {
                "field"
                | "format"
                | "execution_hint"
                | "collect_mode"
                | "value_type"
                | "shard_min_doc_count" => {}
                "size" => {
                    let size = body.uint(key, v)?;
                    if size == 0 {
                        return Err(EngineError::illegal_argument(format!(
                            "[size] must be greater than 0. Found [0] in [{}]",
                            body.name
                        )));
                    }
                    params.insert("size".into(), Value::from(size));
                }
                "shard_size" => {
                    params.insert(
                        "segment_size".into(),
                        Value::from(body.uint(key, v)?.max(1)),
                    );
                }
                "min_doc_count" => {
                    params.insert("min_doc_count".into(), Value::from(body.uint(key, v)?));
                }
                "show_term_doc_count_error" => {
                    show_error = body.boolean(key, v)?;
                    params.insert(key.clone(), Value::from(show_error));
                }
                "order" => {
                    params.insert("order".into(), terms_order(body, v, sub_plans)?);
                }
                "missing" => {
                    let missing = match values {
                        ValueKind::Date => Value::from(self.date_millis(body, key, v)? as i64),
                        ValueKind::Float => {
                            Value::from(sources::encode_ordered_float(body.number(key, v)?))
                        }
                        _ => v.clone(),
                    };
                    missing_raw = Some(missing.clone());
                    params.insert("missing".into(), missing);
                }
                "include" => include = Some(include_exclude::parse_include(v)?),
                "exclude" => exclude = Some(include_exclude::parse_exclude(v)?),
                "script" => {}
                other => return Err(body.unknown(other)),
            }
        }
        let filter = include_exclude::merge(include, exclude)?;
        self.terms_filter(body, &field, &filter, missing_raw, &mut params)?;
        let agg = Self::tantivy_agg(body, "terms", params, subs.clone())?;
        Ok((
            vec![(body.name.to_string(), agg)],
            PlanKind::Terms { values, show_error },
        ))
    }

    /// Applies a `terms` aggregation's `include`/`exclude` (see [`include_exclude`]): string
    /// expressions and lists go to tantivy as `include`/`exclude`; anything else makes the
    /// aggregation read a [`include_exclude::TermsValuesProvider`] column, which then also
    /// applies `missing` (taken out of `params`). A long `missing` beyond 2^53 takes that column
    /// too, as tantivy would round it.
    fn terms_filter(
        &mut self,
        body: &Body,
        field: &FieldRef,
        filter: &include_exclude::IncludeExclude,
        missing: Option<Value>,
        params: &mut Map<String, Value>,
    ) -> Result<()> {
        use include_exclude::{Clause, KeyKind, TermsValuesProvider, ValueFilter};
        let (raw_column, type_name, values) = (&field.column, field.type_name, field.values);
        /// The largest integer an f64 holds exactly: tantivy reads a `missing` through an f64.
        const MAX_EXACT_F64_INT: i64 = 1 << 53;
        let big_missing = values == ValueKind::Integer
            && missing
                .as_ref()
                .and_then(Value::as_i64)
                .is_some_and(|m| m.unsigned_abs() > MAX_EXACT_F64_INT as u64);
        if filter.is_empty() && !big_missing {
            return Ok(());
        }
        let (keys, derivation) = match values {
            // A field no index maps has no values: nothing to filter (OpenSearch's unmapped
            // terms aggregation checks nothing either).
            ValueKind::Unmapped => return Ok(()),
            ValueKind::Keyword => (KeyKind::Keyword, None),
            ValueKind::Ip => (KeyKind::Ip, None),
            ValueKind::Integer => (KeyKind::Long, None),
            ValueKind::Date => (KeyKind::Long, Some(Derivation::Millis)),
            ValueKind::Float => (KeyKind::OrderedFloat, Some(Derivation::OrderedFloat)),
            ValueKind::Boolean => (KeyKind::Boolean, None),
        };
        let strings = matches!(keys, KeyKind::Keyword | KeyKind::Ip);
        if filter.is_regex() && keys != KeyKind::Keyword {
            return Err(include_exclude::regex_refused(body.name, !strings));
        }
        if !strings && params.get("min_doc_count").and_then(Value::as_u64) == Some(0) {
            return Err(EngineError::illegal_argument(format!(
                "[terms] aggregation [{}]: [min_doc_count] 0 together with [include], [exclude] or a [missing] beyond 2^53 is not supported by sluice on a [{}] field",
                body.name, type_name
            )));
        }
        if let Some((partition, num)) = filter.partition() {
            if strings {
                if missing.is_some() {
                    return Err(EngineError::illegal_argument(format!(
                        "[terms] aggregation [{}]: a partition-based [include] with [missing] is not supported by sluice on a [{}] field",
                        body.name,
                        if keys == KeyKind::Ip { "ip" } else { "keyword" }
                    )));
                }
                if params.get("min_doc_count").and_then(Value::as_u64) == Some(0) {
                    return Err(EngineError::illegal_argument(format!(
                        "[terms] aggregation [{}]: a partition-based [include] with [min_doc_count] 0 is not supported by sluice",
                        body.name
                    )));
                }
                // An empty exclude makes tantivy build its allowed-ordinals set, which keeps it
                // off its fast path that reads the physical column directly.
                params.insert("exclude".into(), Value::Array(Vec::new()));
            }
            let name = self.terms_source(TermsValuesProvider {
                column: raw_column.to_string(),
                derivation,
                keys,
                filter: Some(ValueFilter::Partition { partition, num }),
                missing: None,
            });
            if !strings && let Some(m) = self.take_missing(body, keys, params)? {
                self.set_missing(&name, m);
            }
            params.insert("field".into(), Value::from(name));
            return Ok(());
        }
        if keys == KeyKind::Keyword {
            for (key, clause) in [("include", &filter.include), ("exclude", &filter.exclude)] {
                match clause {
                    Some(Clause::Regex(r)) => {
                        params.insert(key.into(), Value::from(r.clone()));
                    }
                    Some(Clause::Values(v)) => {
                        params.insert(key.into(), Value::from(v.clone()));
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        if keys == KeyKind::Ip {
            for (key, clause) in [("include", &filter.include), ("exclude", &filter.exclude)] {
                if let Some(Clause::Values(v)) = clause {
                    let encoded = v
                        .iter()
                        .map(|t| crate::ip::encode_text(t).map_err(EngineError::illegal_argument))
                        .collect::<Result<Vec<_>>>()?;
                    params.insert(key.into(), Value::from(encoded));
                }
            }
            return Ok(());
        }
        // Dates are read in the field's format, as OpenSearch's `DocValueFormat` reads them.
        let date_format = match values {
            ValueKind::Date => self
                .ctx
                .mapping
                .resolve(&field.name)
                .map(|f| f.date_format.clone()),
            _ => None,
        };
        let encode = |this: &Self, text: &str| -> Result<u64> {
            this.encode_term(keys, date_format.as_ref(), text)
        };
        let set = |this: &Self, clause: &Option<Clause>| -> Result<Option<HashSet<u64>>> {
            match clause {
                Some(Clause::Values(v)) => v
                    .iter()
                    .map(|t| encode(this, t))
                    .collect::<Result<HashSet<u64>>>()
                    .map(Some),
                _ => Ok(None),
            }
        };
        let value_filter = if filter.is_empty() {
            None
        } else {
            Some(ValueFilter::Set {
                include: set(self, &filter.include)?,
                exclude: set(self, &filter.exclude)?.unwrap_or_default(),
            })
        };
        let name = self.terms_source(TermsValuesProvider {
            column: raw_column.to_string(),
            derivation,
            keys,
            filter: value_filter,
            missing: None,
        });
        if let Some(m) = self.take_missing(body, keys, params)? {
            self.set_missing(&name, m);
        }
        params.insert("field".into(), Value::from(name));
        Ok(())
    }

    /// Reads one include/exclude value in a numeric, date or boolean field's terms, in the
    /// encoding of the [`include_exclude::TermsValuesProvider`] column, as OpenSearch's
    /// `DocValueFormat.parseLong` (or `Double.parseDouble`) reads it.
    fn encode_term(
        &self,
        keys: include_exclude::KeyKind,
        date_format: Option<&crate::date::DateFormat>,
        text: &str,
    ) -> Result<u64> {
        use include_exclude::KeyKind;
        let number_error =
            || EngineError::illegal_argument(format!("For input string: \"{text}\""));
        match (keys, date_format) {
            (KeyKind::Long, Some(format)) => {
                crate::date::parse_date_math_in(text, self.ctx.now_millis, false, format)
                    .map(|ms| ms.to_u64())
                    .map_err(EngineError::illegal_argument)
            }
            (KeyKind::Long, _) => match text.trim().parse::<i64>() {
                Ok(n) => Ok(n.to_u64()),
                // Not a long: read as a double and rounded down, as OpenSearch's RAW format.
                Err(_) => text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(|f| (f.floor() as i64).to_u64())
                    .ok_or_else(number_error),
            },
            (KeyKind::OrderedFloat, _) => text
                .trim()
                .parse::<f64>()
                .ok()
                .map(|f| sources::encode_ordered_float(f).to_u64())
                .ok_or_else(number_error),
            _ => match text {
                "true" => Ok(1),
                "false" => Ok(0),
                _ => Err(EngineError::illegal_argument(format!(
                    "Cannot parse boolean [{text}], expected either [true] or [false]"
                ))),
            },
        }
    }

    /// Removes `missing` from a terms request whose column applies it, in that column's
    /// encoding.
    fn take_missing(
        &self,
        body: &Body,
        keys: include_exclude::KeyKind,
        params: &mut Map<String, Value>,
    ) -> Result<Option<u64>> {
        use include_exclude::KeyKind;
        let Some(m) = params.remove("missing") else {
            return Ok(None);
        };
        let encoded = match (keys, &m) {
            (KeyKind::Boolean, Value::Bool(b)) => u64::from(*b),
            (KeyKind::Boolean, Value::String(s)) if s == "true" || s == "false" => {
                u64::from(s == "true")
            }
            // Dates and floats were encoded as i64 when read.
            (KeyKind::Long | KeyKind::OrderedFloat, Value::Number(n)) if n.is_i64() => {
                n.as_i64().unwrap_or_default().to_u64()
            }
            (KeyKind::Long, v) => {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                self.encode_term(keys, None, &text)?
            }
            _ => {
                return Err(body.bad_value("missing", &m, "a value of the field's type"));
            }
        };
        Ok(Some(encoded))
    }

    /// Registers a terms column under a name of its own and returns the name.
    fn terms_source(&mut self, provider: include_exclude::TermsValuesProvider) -> String {
        let name = format!(
            "{}#terms@{}",
            provider.column,
            self.pending_terms_sources.len()
        );
        self.pending_terms_sources.push((name.clone(), provider));
        name
    }

    /// Sets the `missing` of a terms column registered by [`Self::terms_source`].
    fn set_missing(&mut self, name: &str, missing: u64) {
        if let Some((_, p)) = self
            .pending_terms_sources
            .iter_mut()
            .find(|(n, _)| n == name)
        {
            p.missing = Some(missing);
        }
    }

    fn histogram(
        &mut self,
        body: &Body,
        subs: Aggregations,
    ) -> Result<(Vec<(String, Aggregation)>, PlanKind)> {
        let field = self.field(body)?;
        let (column, values) = (field.column.clone(), field.values);
        let column = match values {
            ValueKind::Keyword | ValueKind::Boolean | ValueKind::Ip => {
                return Err(body.unsupported_type(&field));
            }
            ValueKind::Date => self.derived(&column, Derivation::Millis),
            _ => column,
        };
        let mut params = Map::new();
        params.insert("field".into(), Value::from(column));
        let mut keyed = false;
        let mut order = None;
        let mut min_doc_count = 0;
        let mut format = None;
        for (key, v) in body.obj {
            match key.as_str() {
                "field" | "script" => {}
                // A date field's keys are dates, rendered as such whatever the pattern.
                "format" if values == ValueKind::Date => {}
                "format" => format = Some(DecimalPattern::parse(body.string(key, v)?)?),
                "interval" => {
                    let interval = body.number(key, v)?;
                    if interval <= 0.0 {
                        return Err(EngineError::illegal_argument(format!(
                            "[interval] must be >0 for histogram aggregation [{}]",
                            body.name
                        )));
                    }
                    params.insert("interval".into(), Value::from(interval));
                }
                "offset" => {
                    params.insert("offset".into(), Value::from(body.number(key, v)?));
                }
                "min_doc_count" => {
                    min_doc_count = body.uint(key, v)?;
                    params.insert("min_doc_count".into(), Value::from(min_doc_count));
                }
                "extended_bounds" | "hard_bounds" => {
                    let (min, max) = bounds(body, key, v, |v| body.number(key, v))?;
                    params.insert(key.clone(), bounds_json(min, max));
                }
                "keyed" => keyed = body.boolean(key, v)?,
                "order" => order = Some(bucket_order(body, v)?),
                other => return Err(body.unknown(other)),
            }
        }
        if !params.contains_key("interval") {
            return Err(EngineError::illegal_argument(format!(
                "[interval] must be >0 for histogram aggregation [{}]",
                body.name
            )));
        }
        if min_doc_count > 0 {
            // tantivy rejects extended_bounds with min_doc_count; OpenSearch ignores them.
            params.remove("extended_bounds");
        }
        let agg = Self::tantivy_agg(body, "histogram", params, subs)?;
        Ok((
            vec![(body.name.to_string(), agg)],
            PlanKind::Histogram {
                values,
                keyed,
                order,
                format,
            },
        ))
    }

    fn date_histogram(
        &mut self,
        body: &Body,
        subs: Aggregations,
    ) -> Result<(Vec<(String, Aggregation)>, PlanKind)> {
        let field = self.field(body)?;
        let (column, values) = (field.column.clone(), field.values);
        if !matches!(values, ValueKind::Date | ValueKind::Unmapped) {
            return Err(body.unsupported_type(&field));
        }
        let mut interval = None;
        let mut offset_millis = 0i64;
        let mut keyed = false;
        let mut order = None;
        let mut min_doc_count = 0;
        let mut extended = None;
        let mut hard = None;
        let mut seen_fixed_or_calendar: Option<&str> = None;
        for (key, v) in body.obj {
            match key.as_str() {
                "field" | "format" | "script" => {}
                "calendar_interval" | "fixed_interval" | "interval" => {
                    if let Some(first) = seen_fixed_or_calendar
                        && first != "interval"
                        && key != "interval"
                    {
                        return Err(EngineError::illegal_argument(format!(
                            "Cannot use [{key}] with [{first}] configuration option."
                        )));
                    }
                    seen_fixed_or_calendar = Some(key.as_str());
                    let text = match v {
                        Value::Number(n) => format!("{n}ms"),
                        _ => body.string(key, v)?.to_string(),
                    };
                    interval = Some(match key.as_str() {
                        "calendar_interval" => calendar_interval(&text).ok_or_else(|| {
                            EngineError::illegal_argument(format!(
                                "The supplied interval [{text}] could not be parsed as a calendar interval."
                            ))
                        })?,
                        "fixed_interval" => DateInterval::Fixed(fixed_interval(&text)?),
                        _ => match calendar_interval(&text) {
                            Some(i) => i,
                            None => DateInterval::Fixed(fixed_interval(&text)?),
                        },
                    });
                }
                "offset" => {
                    offset_millis = match v {
                        Value::Number(n) => n
                            .as_i64()
                            .ok_or_else(|| body.bad_value(key, v, "an integer"))?,
                        _ => signed_interval(body.string(key, v)?)?,
                    };
                }
                "min_doc_count" => min_doc_count = body.uint(key, v)?,
                "extended_bounds" => {
                    extended = Some(bounds(body, key, v, |v| self.date_millis(body, key, v))?)
                }
                "hard_bounds" => {
                    hard = Some(bounds(body, key, v, |v| self.date_millis(body, key, v))?)
                }
                "time_zone" => query::check_utc("date_histogram", body.string(key, v)?)?,
                "keyed" => keyed = body.boolean(key, v)?,
                "order" => order = Some(bucket_order(body, v)?),
                other => return Err(body.unknown(other)),
            }
        }
        let interval = interval.ok_or_else(|| {
            EngineError::illegal_argument(
                "Invalid interval specified, must be non-null and non-empty",
            )
        })?;
        let mut params = Map::new();
        let calendar = match interval {
            DateInterval::Calendar(unit) => {
                // Calendar buckets are unit indices of a computed column, one per interval.
                let source = self.derived(
                    &column,
                    Derivation::Calendar {
                        unit,
                        offset_millis,
                    },
                );
                params.insert("field".into(), Value::from(source));
                params.insert("interval".into(), Value::from(1.0));
                let to_index = |(min, max): (f64, f64)| {
                    let index =
                        |ms: f64| unit.index_of((ms as i64).saturating_sub(offset_millis)) as f64;
                    (index(min), index(max))
                };
                extended = extended.map(to_index);
                hard = hard.map(|(min, max)| {
                    let (lo, hi) = to_index((min, max));
                    (
                        if min == f64::MIN { min } else { lo },
                        if max == f64::MAX { max } else { hi },
                    )
                });
                Some(unit)
            }
            DateInterval::Fixed(ms) | DateInterval::Week(ms) => {
                let align = if matches!(interval, DateInterval::Week(_)) {
                    MONDAY_OFFSET_MILLIS
                } else {
                    0
                };
                params.insert(
                    "field".into(),
                    Value::from(self.derived(&column, Derivation::Millis)),
                );
                params.insert("interval".into(), Value::from(ms as f64));
                let offset = (align + offset_millis).rem_euclid(ms);
                if offset != 0 {
                    params.insert("offset".into(), Value::from(offset as f64));
                }
                None
            }
        };
        params.insert("min_doc_count".into(), Value::from(min_doc_count));
        if let Some((min, max)) = extended
            && min_doc_count == 0
        {
            params.insert("extended_bounds".into(), bounds_json(min, max));
        }
        if let Some((min, max)) = hard {
            params.insert("hard_bounds".into(), bounds_json(min, max));
        }
        let agg = Self::tantivy_agg(body, "histogram", params, subs)?;
        let plan = PlanKind::DateHistogram {
            calendar,
            offset_millis,
            keyed,
            order,
        };
        Ok((vec![(body.name.to_string(), agg)], plan))
    }

    /// A date parameter: epoch milliseconds or a date (math) string.
    fn date_millis(&self, body: &Body, key: &str, v: &Value) -> Result<f64> {
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(|| body.bad_value(key, v, "a date")),
            Value::String(s) => crate::date::parse_date_math(s, self.ctx.now_millis, false)
                .map(|ms| ms as f64)
                .map_err(EngineError::illegal_argument),
            _ => Err(body.bad_value(key, v, "a date")),
        }
    }

    fn range(
        &mut self,
        body: &Body,
        subs: Aggregations,
    ) -> Result<(Vec<(String, Aggregation)>, PlanKind)> {
        let field = self.field(body)?;
        let (column, values) = (field.column.clone(), field.values);
        let column = match values {
            ValueKind::Keyword | ValueKind::Boolean | ValueKind::Ip => {
                return Err(body.unsupported_type(&field));
            }
            ValueKind::Date => self.derived(&column, Derivation::Millis),
            _ => self.derived(&column, Derivation::Float),
        };
        let mut keyed = false;
        let mut raw_ranges = None;
        for (key, v) in body.obj {
            match key.as_str() {
                "field" | "format" | "script" => {}
                "keyed" => keyed = body.boolean(key, v)?,
                "ranges" => {
                    raw_ranges = Some(
                        v.as_array()
                            .ok_or_else(|| body.bad_value(key, v, "an array"))?,
                    )
                }
                other => return Err(body.unknown(other)),
            }
        }
        let raw_ranges = raw_ranges.filter(|r| !r.is_empty()).ok_or_else(|| {
            EngineError::illegal_argument(format!(
                "No [ranges] specified for the [{}] aggregation",
                body.name
            ))
        })?;
        let mut ranges = Vec::with_capacity(raw_ranges.len());
        for (i, raw) in raw_ranges.iter().enumerate() {
            let obj = raw
                .as_object()
                .ok_or_else(|| body.bad_value("ranges", raw, "an object per range"))?;
            let mut range = RangePlan {
                internal_key: format!("#{i}"),
                tantivy_name: body.name.to_string(),
                key: None,
                from: None,
                to: None,
            };
            for (key, v) in obj {
                let end = |v: &Value| -> Result<Option<f64>> {
                    match (v, values) {
                        (Value::Null, _) => Ok(None),
                        (_, ValueKind::Date) => self.date_millis(body, key, v).map(Some),
                        _ => body.number(key, v).map(Some),
                    }
                };
                match key.as_str() {
                    "key" => range.key = Some(body.string(key, v)?.to_string()),
                    "from" => range.from = end(v)?,
                    "to" => range.to = end(v)?,
                    other => {
                        return Err(EngineError::new(
                            ErrorCode::XContentParse,
                            format!("[range] unknown field [{other}]"),
                        ));
                    }
                }
            }
            ranges.push(range);
        }
        // tantivy's range aggregation rejects overlapping ranges; those run as one aggregation
        // per range.
        let mut sorted: Vec<&RangePlan> = ranges.iter().collect();
        sorted.sort_by(|a, b| {
            a.from
                .unwrap_or(f64::MIN)
                .total_cmp(&b.from.unwrap_or(f64::MIN))
        });
        let overlapping = sorted
            .windows(2)
            .any(|w| w[0].to.unwrap_or(f64::MAX) > w[1].from.unwrap_or(f64::MIN));
        let range_json = |r: &RangePlan| {
            let mut m = Map::new();
            m.insert("key".into(), Value::from(r.internal_key.clone()));
            if let Some(from) = r.from {
                m.insert("from".into(), Value::from(from));
            }
            if let Some(to) = r.to {
                m.insert("to".into(), Value::from(to));
            }
            Value::Object(m)
        };
        let mut entries = Vec::new();
        if overlapping {
            for range in &mut ranges {
                range.tantivy_name = format!("{}{}", body.name, range.internal_key);
                let mut params = Map::new();
                params.insert("field".into(), Value::from(column.clone()));
                params.insert("ranges".into(), Value::Array(vec![range_json(range)]));
                entries.push((
                    range.tantivy_name.clone(),
                    Self::tantivy_agg(body, "range", params, subs.clone())?,
                ));
            }
        } else {
            let mut params = Map::new();
            params.insert("field".into(), Value::from(column));
            params.insert(
                "ranges".into(),
                Value::Array(ranges.iter().map(range_json).collect()),
            );
            entries.push((
                body.name.to_string(),
                Self::tantivy_agg(body, "range", params, subs)?,
            ));
        }
        // OpenSearch returns ranges sorted by their ends.
        ranges.sort_by(|a, b| {
            a.from
                .unwrap_or(f64::NEG_INFINITY)
                .total_cmp(&b.from.unwrap_or(f64::NEG_INFINITY))
                .then(
                    a.to.unwrap_or(f64::INFINITY)
                        .total_cmp(&b.to.unwrap_or(f64::INFINITY)),
                )
        });
        Ok((
            entries,
            PlanKind::Range {
                values,
                ranges,
                keyed,
            },
        ))
    }

    fn metric(&mut self, body: &Body) -> Result<(Vec<(String, Aggregation)>, PlanKind)> {
        let metric = match body.ty {
            "avg" => MetricKind::Avg,
            "min" => MetricKind::Min,
            "max" => MetricKind::Max,
            "sum" => MetricKind::Sum,
            "value_count" => MetricKind::ValueCount,
            "stats" => MetricKind::Stats,
            _ => MetricKind::Cardinality,
        };
        let field = self.field(body)?;
        let (column, values) = (field.column.clone(), field.values);
        let counts = matches!(metric, MetricKind::ValueCount | MetricKind::Cardinality);
        let column = match values {
            ValueKind::Float if metric == MetricKind::Cardinality => {
                self.derived(&column, Derivation::Float)
            }
            _ if counts => column,
            ValueKind::Keyword | ValueKind::Ip => return Err(body.unsupported_type(&field)),
            ValueKind::Date => self.derived(&column, Derivation::Millis),
            ValueKind::Boolean => self.derived(&column, Derivation::Float),
            _ => column,
        };
        let mut params = Map::new();
        params.insert("field".into(), Value::from(column));
        for (key, v) in body.obj {
            match key.as_str() {
                "field" | "format" | "script" => {}
                "precision_threshold" | "execution_hint" if metric == MetricKind::Cardinality => {}
                "missing" if metric != MetricKind::ValueCount => {
                    let missing = match (values, v) {
                        (ValueKind::Date, _) => Value::from(self.date_millis(body, key, v)?),
                        (_, Value::String(_)) if metric == MetricKind::Cardinality => v.clone(),
                        _ => Value::from(body.number(key, v)?),
                    };
                    params.insert("missing".into(), missing);
                }
                other => return Err(body.unknown(other)),
            }
        }
        let agg = Self::tantivy_agg(body, body.ty, params, Aggregations::default())?;
        Ok((
            vec![(body.name.to_string(), agg)],
            PlanKind::Metric { metric, values },
        ))
    }
}

/// The percents a `percentiles` aggregation computes when the request names none.
const DEFAULT_PERCENTS: [f64; 7] = [1.0, 5.0, 25.0, 50.0, 75.0, 95.0, 99.0];

impl Builder<'_, '_> {
    fn percentiles(&mut self, body: &Body) -> Result<(Vec<(String, Aggregation)>, PlanKind)> {
        let field = self.field(body)?;
        let (column, values) = (field.column.clone(), field.values);
        let column = match values {
            ValueKind::Keyword | ValueKind::Ip => return Err(body.unsupported_type(&field)),
            ValueKind::Date => self.derived(&column, Derivation::Millis),
            ValueKind::Boolean => self.derived(&column, Derivation::Float),
            _ => column,
        };
        let mut percents = None;
        let mut keyed = true;
        let mut missing = None;
        let mut methods = 0;
        for (key, v) in body.obj {
            match key.as_str() {
                "field" | "format" | "script" => {}
                "keyed" => keyed = body.boolean(key, v)?,
                "percents" => {
                    let items = v
                        .as_array()
                        .ok_or_else(|| body.bad_value(key, v, "an array of numbers"))?;
                    let parsed = items
                        .iter()
                        .map(|item| body.number(key, item))
                        .collect::<Result<Vec<f64>>>()?;
                    percents = Some(parsed);
                }
                "missing" => {
                    missing = Some(match values {
                        ValueKind::Date => self.date_millis(body, key, v)?,
                        _ => body.number(key, v)?,
                    })
                }
                // The estimation method: sluice always estimates with tantivy's sketch, so the
                // method's settings are checked for shape only.
                "tdigest" | "hdr" => {
                    if !v.is_object() {
                        return Err(body.bad_value(key, v, "an object"));
                    }
                    methods += 1;
                }
                other => return Err(body.unknown(other)),
            }
        }
        if methods > 1 {
            return Err(EngineError::illegal_argument(
                "Only one percentiles method should be declared.",
            ));
        }
        let percents = match percents {
            None => DEFAULT_PERCENTS.to_vec(),
            Some(p) if p.is_empty() => {
                return Err(EngineError::illegal_argument(format!(
                    "[percents] must not be empty: [{}]",
                    body.name
                )));
            }
            Some(mut p) => {
                p.sort_by(f64::total_cmp);
                if let Some(bad) = p.iter().find(|p| !(0.0..=100.0).contains(*p)) {
                    return Err(EngineError::illegal_argument(format!(
                        "percent must be in [0,100], got [{}]: [{}]",
                        super::render::java_double(*bad),
                        body.name
                    )));
                }
                p
            }
        };
        let mut params = Map::new();
        params.insert("field".into(), Value::from(column));
        params.insert("percents".into(), json!(percents));
        params.insert("keyed".into(), Value::from(false));
        if let Some(missing) = missing {
            params.insert("missing".into(), Value::from(missing));
        }
        let agg = Self::tantivy_agg(body, "percentiles", params, Aggregations::default())?;
        Ok((
            vec![(body.name.to_string(), agg)],
            PlanKind::Percentiles {
                values,
                percents,
                keyed,
            },
        ))
    }
}

/// A `date_histogram` interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DateInterval {
    /// A fixed number of milliseconds, aligned to the epoch.
    Fixed(i64),
    /// Calendar weeks: 7 days starting on Monday.
    Week(i64),
    /// Months, quarters or years.
    Calendar(CalendarUnit),
}

/// Parses a calendar interval (`1M`, `month`, ...); minutes, hours and days are fixed in UTC.
fn calendar_interval(text: &str) -> Option<DateInterval> {
    Some(match text {
        "1m" | "minute" => DateInterval::Fixed(MINUTE_MILLIS),
        "1h" | "hour" => DateInterval::Fixed(HOUR_MILLIS),
        "1d" | "day" => DateInterval::Fixed(DAY_MILLIS),
        "1w" | "week" => DateInterval::Week(WEEK_MILLIS),
        "1M" | "month" => DateInterval::Calendar(CalendarUnit::Month),
        "1q" | "quarter" => DateInterval::Calendar(CalendarUnit::Quarter),
        "1y" | "year" => DateInterval::Calendar(CalendarUnit::Year),
        _ => return None,
    })
}

/// Parses a fixed interval (`90m`, `1d`, `500ms`) to milliseconds.
fn fixed_interval(text: &str) -> Result<i64> {
    let ms = signed_interval(text)?;
    if ms <= 0 {
        return Err(EngineError::illegal_argument(format!(
            "failed to parse setting [date_histogram.fixedInterval] with value [{text}] as a time value: \
             intervals must be positive"
        )));
    }
    Ok(ms)
}

/// Parses a time value with an optional sign (`+6h`, `-1d`) to milliseconds.
fn signed_interval(text: &str) -> Result<i64> {
    let bad = || {
        EngineError::illegal_argument(format!(
            "failed to parse setting [date_histogram.fixedInterval] with value [{text}] as a time value: \
             unit is missing or unrecognized"
        ))
    };
    let trimmed = text.trim();
    let (sign, rest) = match trimmed.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = rest.split_at(digits);
    let number: i64 = number.parse().map_err(|_| bad())?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => SECOND_MILLIS,
        "m" => MINUTE_MILLIS,
        "h" => HOUR_MILLIS,
        "d" => DAY_MILLIS,
        _ => return Err(bad()),
    };
    number
        .checked_mul(unit_ms)
        .map(|ms| ms * sign)
        .ok_or_else(bad)
}

/// Reads `{min, max}` bounds; a missing end takes the other end (extended bounds then only
/// extend one way) or is open (hard bounds).
fn bounds(
    body: &Body,
    key: &str,
    v: &Value,
    mut parse: impl FnMut(&Value) -> Result<f64>,
) -> Result<(f64, f64)> {
    let obj = v
        .as_object()
        .ok_or_else(|| body.bad_value(key, v, "an object with [min] and [max]"))?;
    let mut min = None;
    let mut max = None;
    for (k, value) in obj {
        match k.as_str() {
            "min" if !value.is_null() => min = Some(parse(value)?),
            "max" if !value.is_null() => max = Some(parse(value)?),
            "min" | "max" => {}
            other => {
                return Err(EngineError::new(
                    ErrorCode::XContentParse,
                    format!("[{key}] unknown field [{other}]"),
                ));
            }
        }
    }
    let open = key == "hard_bounds";
    let (min, max) = match (min, max) {
        (Some(min), Some(max)) => (min, max),
        (Some(min), None) => (min, if open { f64::MAX } else { min }),
        (None, Some(max)) => (if open { f64::MIN } else { max }, max),
        (None, None) => (f64::MIN, f64::MAX),
    };
    if min > max {
        return Err(EngineError::illegal_argument(format!(
            "[{key}.min][{min}] cannot be greater than [{key}.max][{max}] for histogram aggregation [{}]",
            body.name
        )));
    }
    Ok((min, max))
}

fn bounds_json(min: f64, max: f64) -> Value {
    json!({ "min": min, "max": max })
}

/// Reads a histogram `order` (`{"_key": "asc"}`, `{"_count": "desc"}`).
fn bucket_order(body: &Body, v: &Value) -> Result<BucketOrder> {
    let first = match v {
        Value::Array(items) => items.first().unwrap_or(&Value::Null),
        other => other,
    };
    let (target, dir) = first
        .as_object()
        .and_then(|o| o.iter().next())
        .ok_or_else(|| body.bad_value("order", v, "an object such as {\"_key\": \"asc\"}"))?;
    let asc = order_direction(body, dir)?;
    match (target.as_str(), asc) {
        ("_key", true) => Ok(BucketOrder::KeyAsc),
        ("_key", false) => Ok(BucketOrder::KeyDesc),
        ("_count", true) => Ok(BucketOrder::CountAsc),
        ("_count", false) => Ok(BucketOrder::CountDesc),
        (other, _) => Err(EngineError::illegal_argument(format!(
            "[{}] aggregation [{}] can only be ordered by [_key] or [_count], got [{other}]",
            body.ty, body.name
        ))),
    }
}

fn order_direction(body: &Body, dir: &Value) -> Result<bool> {
    match dir.as_str().map(str::to_ascii_lowercase).as_deref() {
        Some("asc") => Ok(true),
        Some("desc") => Ok(false),
        _ => Err(EngineError::new(
            ErrorCode::XContentParse,
            format!("[{}] Unknown order direction [{dir}]", body.ty),
        )),
    }
}

/// Translates a `terms` order to tantivy's: `_term` is `_key`, and a sub-aggregation target
/// must name a metric sub-aggregation.
fn terms_order(body: &Body, v: &Value, sub_plans: &[AggPlan]) -> Result<Value> {
    let first = match v {
        Value::Array(items) => items.first().unwrap_or(&Value::Null),
        other => other,
    };
    let (target, dir) = first
        .as_object()
        .and_then(|o| o.iter().next())
        .ok_or_else(|| body.bad_value("order", v, "an object such as {\"_count\": \"desc\"}"))?;
    let asc = order_direction(body, dir)?;
    let target = match target.as_str() {
        "_term" | "_key" => "_key".to_string(),
        "_count" => "_count".to_string(),
        path => {
            let agg = path.split(['.', '[']).next().unwrap_or(path);
            let is_metric = sub_plans
                .iter()
                .any(|p| p.name == agg && matches!(p.kind, PlanKind::Metric { .. }));
            let is_percentiles = sub_plans
                .iter()
                .any(|p| p.name == agg && matches!(p.kind, PlanKind::Percentiles { .. }));
            if is_percentiles {
                // tantivy cannot order its final buckets by a percentile.
                return Err(EngineError::illegal_argument(format!(
                    "[{}] aggregation [{}] cannot be ordered by the percentiles aggregation [{agg}]; \
                     sluice does not support this order",
                    body.ty, body.name
                )));
            }
            if !is_metric {
                return Err(EngineError::illegal_argument(format!(
                    "Invalid aggregation order path [{path}]. The provided aggregation [{agg}] either does \
                     not exist, or is a pipeline aggregation and cannot be used to sort the buckets."
                )));
            }
            path.replace('[', ".").replace(']', "")
        }
    };
    let mut order = Map::new();
    order.insert(target, Value::from(if asc { "asc" } else { "desc" }));
    Ok(Value::Object(order))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_intervals_parse_to_millis() {
        assert_eq!(fixed_interval("90m").unwrap(), 90 * MINUTE_MILLIS);
        assert_eq!(signed_interval("-1d").unwrap(), -DAY_MILLIS);
        assert_eq!(signed_interval("+6h").unwrap(), 6 * HOUR_MILLIS);
        assert!(fixed_interval("1M").is_err());
        assert!(fixed_interval("-1d").is_err());
        assert!(fixed_interval("abc").is_err());
        assert_eq!(
            calendar_interval("1M"),
            Some(DateInterval::Calendar(CalendarUnit::Month))
        );
        assert_eq!(
            calendar_interval("day"),
            Some(DateInterval::Fixed(DAY_MILLIS))
        );
        assert_eq!(calendar_interval("2d"), None);
    }
}
