//! Request parsing: a `_search` body and its URL parameters into a [`SearchRequest`], with
//! OpenSearch's refusals and texts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::sort::{SortField, SortSpec};
use crate::error::{EngineError, ErrorCode, Result};

/// OpenSearch's default `track_total_hits` threshold.
pub const DEFAULT_TRACK_TOTAL_HITS: u64 = 10_000;

/// OpenSearch's default page size.
pub const DEFAULT_SIZE: u64 = 10;

/// How `hits.total` is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackTotalHits {
    /// Count exactly.
    Exact,
    /// Count up to this many, then report `gte`.
    UpTo(u64),
    /// Leave `hits.total` out.
    Off,
}

/// `_source` filtering.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceFilter {
    /// `_source: false`.
    pub disabled: bool,
    /// Patterns to keep (all when empty).
    pub includes: Vec<String>,
    /// Patterns to drop.
    pub excludes: Vec<String>,
}

/// A parsed search request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// The query DSL.
    pub query: Value,
    /// `post_filter`: a query that narrows the hits (and `hits.total`) after the aggregations
    /// have seen every match of `query`, as `FacetedSearch` uses it for selected facets.
    pub post_filter: Option<Value>,
    /// How the index expression resolves (`ignore_unavailable`, `allow_no_indices`,
    /// `expand_wildcards`).
    pub indices_options: crate::resolve::IndicesOptions,
    /// First hit to return.
    pub from: u64,
    /// Number of hits to return.
    pub size: u64,
    /// Sort keys; empty means by score.
    pub sort: Vec<SortSpec>,
    /// Source filtering.
    pub source: SourceFilter,
    /// Total hits counting.
    pub track_total_hits: TrackTotalHits,
    /// Whether the request set `track_total_hits` itself (a scroll refuses any but exact).
    pub track_total_hits_set: bool,
    /// `fields`: values of mapped fields, read from the document, shown by type.
    pub fields: Vec<super::fields::FieldSpec>,
    /// `docvalue_fields`: the same, for fields with doc values (no text fields).
    pub docvalue_fields: Vec<super::fields::FieldSpec>,
    /// `stored_fields`: `_none_` leaves out `_id` and `_source`; any other list leaves out
    /// `_source` unless `_source` is asked for (sluice stores no other field).
    pub stored_fields: Option<Vec<String>>,
    /// Whether the request gave `_source` itself (body or parameters).
    pub source_set: bool,
    /// The body's `timeout`.
    pub timeout: Option<Duration>,
    /// The `aggs`/`aggregations` object.
    pub aggs: Option<Value>,
    /// `typed_keys`: each aggregation is named `type#name` in the response.
    pub typed_keys: bool,
    /// `highlight`: the query's terms marked in the hits' fields.
    pub highlight: Option<super::highlight::HighlightSpec>,
    /// Compute scores even when sorting on fields.
    pub track_scores: bool,
    /// Only hits with at least this score.
    pub min_score: Option<f32>,
    /// `terminate_after`: each index stops collecting after this many matches (OpenSearch
    /// stops each shard; a sluice index is searched whole); `None` when absent or 0,
    /// OpenSearch's "no limit".
    pub terminate_after: Option<u64>,
    /// The most aggregation buckets the search may build (`search.max_buckets`); `None` is
    /// OpenSearch's default.
    pub max_buckets: Option<u32>,
    /// `search_after`: the sort values of the hit the page starts after (hits with exactly
    /// these values are skipped too, as in OpenSearch); `None` when absent or empty.
    pub search_after: Option<Vec<Value>>,
    /// `seq_no_primary_term`: each hit carries its `_seq_no` and `_primary_term`.
    pub seq_no_primary_term: bool,
    /// `version`: each hit carries its `_version`.
    pub version: bool,
    /// `profile`: the response carries a `profile` section with the timings of each index's
    /// query, collectors and aggregations ([`super::profile`]).
    pub profile: bool,
    /// The node id a profile names its shards by (`[node][index][0]`); never parsed from the
    /// request, set by the server. `None` renders `local`.
    pub node_id: Option<Arc<str>>,
    /// An opaque label the caller attaches; never parsed from the request. A scroll keeps it
    /// for its continuations ([`crate::ScrollStore::owner`]) — the server stores the workload
    /// group the scroll was opened in.
    pub owner: Option<Arc<str>>,
    /// Another opaque caller label, never parsed from the request: the user who opened a
    /// scroll, kept for its continuations ([`crate::ScrollStore::opened_by`]) so the server
    /// lets only that user continue or clear it.
    pub opened_by: Option<Arc<str>>,
}

impl Default for SearchRequest {
    fn default() -> Self {
        SearchRequest {
            query: json!({"match_all": {}}),
            post_filter: None,
            indices_options: crate::resolve::IndicesOptions::default(),
            from: 0,
            size: DEFAULT_SIZE,
            sort: Vec::new(),
            source: SourceFilter::default(),
            track_total_hits: TrackTotalHits::UpTo(DEFAULT_TRACK_TOTAL_HITS),
            track_total_hits_set: false,
            fields: Vec::new(),
            docvalue_fields: Vec::new(),
            stored_fields: None,
            source_set: false,
            timeout: None,
            aggs: None,
            typed_keys: false,
            highlight: None,
            track_scores: false,
            min_score: None,
            terminate_after: None,
            max_buckets: None,
            search_after: None,
            seq_no_primary_term: false,
            version: false,
            profile: false,
            node_id: None,
            owner: None,
            opened_by: None,
        }
    }
}

/// The URL parameter that names each aggregation of the response `type#name`, so a client can
/// tell which class to parse it with (the Java clients always send it).
pub const TYPED_KEYS: &str = "typed_keys";

/// Reads the `typed_keys` URL parameter as OpenSearch reads a boolean parameter.
pub fn typed_keys(params: &HashMap<String, String>) -> Result<bool> {
    crate::settings::bool_param(params, TYPED_KEYS)
}

/// The URL parameter that renders `hits.total` as a plain number.
pub const REST_TOTAL_HITS_AS_INT: &str = "rest_total_hits_as_int";

/// Reads the `rest_total_hits_as_int` URL parameter as OpenSearch reads a boolean parameter
/// (absent is false, empty is true).
pub fn rest_total_hits_as_int(params: &HashMap<String, String>) -> Result<bool> {
    crate::settings::bool_param(params, REST_TOTAL_HITS_AS_INT)
}

fn parse_err(reason: impl Into<String>) -> EngineError {
    EngineError::parsing(reason)
}

fn as_u64_param(key: &str, v: &Value) -> Result<u64> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| {
            EngineError::illegal_argument(format!(
                "[{key}] parameter cannot be negative, found [{n}]"
            ))
        }),
        Value::String(s) => s
            .parse::<i64>()
            .map_err(|_| {
                EngineError::new(
                    ErrorCode::XContentParse,
                    format!("[{key}] failed to parse field [{key}]: For input string: \"{s}\""),
                )
            })
            .and_then(|n| {
                u64::try_from(n).map_err(|_| {
                    EngineError::illegal_argument(format!(
                        "[{key}] parameter cannot be negative, found [{n}]"
                    ))
                })
            }),
        _ => Err(EngineError::new(
            ErrorCode::XContentParse,
            format!("[{key}] failed to parse field [{key}]"),
        )),
    }
}

fn parse_sort_entry(v: &Value, out: &mut Vec<SortSpec>) -> Result<()> {
    let field = |name: &str| match name {
        "_score" => SortField::Score,
        "_doc" => SortField::Doc,
        "_id" => SortField::Id,
        other => SortField::Field(other.to_string()),
    };
    match v {
        Value::String(s) => {
            let (name, desc) = match s.split_once(':') {
                Some((n, "desc")) => (n, true),
                Some((n, "asc")) => (n, false),
                Some((_, o)) => {
                    return Err(EngineError::illegal_argument(format!(
                        "Unknown SortOrder [{o}]"
                    )));
                }
                None => (s.as_str(), s == "_score"),
            };
            out.push(SortSpec {
                field: field(name),
                desc,
                missing_first: false,
                unmapped_ok: false,
            });
        }
        Value::Object(m) => {
            for (name, spec) in m {
                let default_desc = name == "_score";
                let (desc, missing_first, unmapped_ok) = match spec {
                    Value::String(o) => (parse_order(o)?, false, false),
                    Value::Object(o) => {
                        let mut desc = default_desc;
                        let mut missing_first = false;
                        let mut unmapped_ok = false;
                        for (k, val) in o {
                            match k.as_str() {
                                "order" => desc = parse_order(val.as_str().unwrap_or_default())?,
                                "missing" => missing_first = val.as_str() == Some("_first"),
                                "unmapped_type" => unmapped_ok = true,
                                "mode" | "format" | "numeric_type" => {}
                                _ => {
                                    return Err(parse_err(format!(
                                        "[field_sort] unknown field [{k}]"
                                    )));
                                }
                            }
                        }
                        (desc, missing_first, unmapped_ok)
                    }
                    _ => {
                        return Err(parse_err(format!(
                            "[sort] malformed sort for field [{name}]"
                        )));
                    }
                };
                out.push(SortSpec {
                    field: field(name),
                    desc,
                    missing_first,
                    unmapped_ok,
                });
            }
        }
        Value::Array(items) => {
            for item in items {
                parse_sort_entry(item, out)?;
            }
        }
        _ => return Err(parse_err("[sort] must be a string, an object or an array")),
    }
    Ok(())
}

fn parse_order(o: &str) -> Result<bool> {
    match o {
        "asc" => Ok(false),
        "desc" => Ok(true),
        _ => Err(EngineError::illegal_argument(format!(
            "Unknown SortOrder [{o}]"
        ))),
    }
}

/// Parses a `_source` value of a request body: `true`/`false`, a pattern or list of patterns,
/// or `{"includes": …, "excludes": …}`.
/// The search options sluice reads and does not act on (one shard, no remote clusters, no
/// request cache), refused when malformed as OpenSearch refuses them, in a fixed order (the
/// booleans, `allow_partial_search_results` first, then `search_type`), so that a request with
/// two bad ones always gets the same error.
pub fn check_unused_options(params: &HashMap<String, String>) -> Result<()> {
    const BOOLEANS: [&str; 10] = [
        "allow_partial_search_results",
        "ccs_minimize_roundtrips",
        "request_cache",
        "ignore_throttled",
        "track_scores",
        "explain",
        "lenient",
        "analyze_wildcard",
        "phase_took",
        "include_named_queries_score",
    ];
    for key in BOOLEANS {
        if let Some(v) = params.get(key)
            && !matches!(v.as_str(), "" | "true" | "false")
        {
            return Err(EngineError::illegal_argument(format!(
                "Failed to parse value [{v}] as only [true] or [false] are allowed."
            )));
        }
    }
    match params.get("search_type").map(String::as_str) {
        None | Some("query_then_fetch" | "dfs_query_then_fetch") => Ok(()),
        Some(v) => Err(EngineError::illegal_argument(format!(
            "No search type for [{v}]"
        ))),
    }
}

pub fn parse_source(v: &Value) -> Result<SourceFilter> {
    let list = |v: &Value| -> Result<Vec<String>> {
        match v {
            Value::String(s) => Ok(vec![s.clone()]),
            Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| parse_err("[_source] patterns must be strings"))
                })
                .collect(),
            _ => Err(parse_err("[_source] patterns must be strings")),
        }
    };
    Ok(match v {
        Value::Bool(b) => SourceFilter {
            disabled: !b,
            ..Default::default()
        },
        Value::String(_) | Value::Array(_) => SourceFilter {
            includes: list(v)?,
            ..Default::default()
        },
        Value::Object(m) => {
            let mut f = SourceFilter::default();
            for (k, val) in m {
                match k.as_str() {
                    "includes" | "include" => f.includes = list(val)?,
                    "excludes" | "exclude" => f.excludes = list(val)?,
                    _ => {
                        return Err(parse_err(format!(
                            "Unknown key for a START_OBJECT in [{k}]."
                        )));
                    }
                }
            }
            f
        }
        _ => {
            return Err(parse_err(
                "[_source] must be a boolean, a string, an array or an object",
            ));
        }
    })
}

fn parse_track_total_hits(v: &Value) -> Result<TrackTotalHits> {
    match v {
        Value::Bool(true) => Ok(TrackTotalHits::Exact),
        Value::Bool(false) => Ok(TrackTotalHits::Off),
        Value::String(s) if s == "true" => Ok(TrackTotalHits::Exact),
        Value::String(s) if s == "false" => Ok(TrackTotalHits::Off),
        other => match other
            .as_i64()
            .or_else(|| other.as_str().and_then(|s| s.parse().ok()))
        {
            Some(-1) => Ok(TrackTotalHits::Exact),
            Some(n) if n >= 0 => Ok(TrackTotalHits::UpTo(n as u64)),
            _ => Err(EngineError::illegal_argument(format!(
                "[track_total_hits] parameter must be positive or equals to -1, got {other}"
            ))),
        },
    }
}

impl SearchRequest {
    /// Parses a `_search` body and applies URL parameters over it (`q`, `from`, `size`,
    /// `sort`, `_source*`, `track_total_hits`, `timeout`), as OpenSearch does.
    ///
    /// With `rest_total_hits_as_int=true` totals are counted exactly unless the request says
    /// otherwise, and a `track_total_hits` threshold is refused, as OpenSearch does: a number
    /// cannot say "at least".
    pub fn parse(body: Option<&Value>, params: &HashMap<String, String>) -> Result<SearchRequest> {
        let mut req = SearchRequest::default();
        let mut track_total_hits_set = false;
        if let Some(body) = body {
            let obj = body
                .as_object()
                .ok_or_else(|| parse_err("request body must be a JSON object"))?;
            for (key, v) in obj {
                match key.as_str() {
                    "query" => {
                        if !v.is_object() {
                            return Err(parse_err("[query] must be an object"));
                        }
                        req.query = v.clone();
                    }
                    // Anything but an object is OpenSearch's "Unknown key" below.
                    "post_filter" if v.is_object() => req.post_filter = Some(v.clone()),
                    "from" => req.from = as_u64_param("from", v)?,
                    "size" => req.size = as_u64_param("size", v)?,
                    "sort" => parse_sort_entry(v, &mut req.sort)?,
                    "_source" => {
                        req.source = parse_source(v)?;
                        req.source_set = true;
                    }
                    "track_total_hits" => {
                        req.track_total_hits = parse_track_total_hits(v)?;
                        track_total_hits_set = true;
                    }
                    "timeout" => {
                        let s = v.as_str().ok_or_else(|| {
                            parse_err("[timeout] must be a time value string like \"500ms\"")
                        })?;
                        req.timeout = Some(crate::parse_time_value(s).map_err(|e| {
                            EngineError::new(ErrorCode::Parsing, format!("failed to parse setting [timeout] with value [{s}] as a time value: {e}"))
                        })?);
                    }
                    "aggs" | "aggregations" => {
                        if !v.is_object() {
                            return Err(parse_err(format!("[{key}] must be an object")));
                        }
                        req.aggs = Some(v.clone());
                    }
                    "track_scores" => req.track_scores = expect_bool(key, v)?,
                    "min_score" => {
                        req.min_score = Some(
                            v.as_f64()
                                .ok_or_else(|| parse_err("[min_score] must be a number"))?
                                as f32,
                        )
                    }
                    "search_after" if v.is_array() => req.search_after = parse_search_after(v)?,
                    "seq_no_primary_term" => req.seq_no_primary_term = expect_bool(key, v)?,
                    "version" => req.version = expect_bool(key, v)?,
                    "profile" => req.profile = expect_bool(key, v)?,
                    "explain" => {
                        expect_bool(key, v)?;
                    }
                    "terminate_after" => {
                        req.terminate_after = Some(as_u64_param(key, v)?).filter(|n| *n > 0);
                    }
                    "stored_fields" => {
                        let list: Option<Vec<String>> = match v {
                            Value::String(s) => Some(vec![s.clone()]),
                            Value::Array(a) => {
                                a.iter().map(|x| x.as_str().map(str::to_string)).collect()
                            }
                            _ => None,
                        };
                        let Some(list) = list else {
                            return Err(parse_err(
                                "[stored_fields] must be a string or an array of strings",
                            ));
                        };
                        req.stored_fields = Some(list);
                    }
                    "fields" => req.fields = super::fields::parse_specs(key, v)?,
                    "docvalue_fields" => req.docvalue_fields = super::fields::parse_specs(key, v)?,
                    "highlight" => {
                        if !v.is_object() {
                            return Err(parse_err(format!(
                                "[highlight] expects an object, got a {}",
                                sluice_wire::json::token_name(v)
                            )));
                        }
                        req.highlight = Some(super::highlight::parse(v)?);
                    }
                    _ => {
                        return Err(parse_err(format!(
                            "Unknown key for a {} in [{key}].",
                            sluice_wire::json::token_name(v)
                        )));
                    }
                }
            }
        }
        req.indices_options = crate::resolve::IndicesOptions::from_params(
            params,
            crate::resolve::IndicesOptions::default(),
        )?;
        check_unused_options(params)?;
        for (key, v) in params {
            match key.as_str() {
                "q" => {
                    let mut qs = Map::new();
                    qs.insert("query".into(), Value::from(v.as_str()));
                    if let Some(df) = params.get("df") {
                        qs.insert("default_field".into(), Value::from(df.as_str()));
                    }
                    if let Some(op) = params.get("default_operator") {
                        qs.insert("default_operator".into(), Value::from(op.as_str()));
                    }
                    req.query = json!({"query_string": qs});
                }
                "from" => req.from = as_u64_param("from", &Value::from(v.as_str()))?,
                "size" => req.size = as_u64_param("size", &Value::from(v.as_str()))?,
                "sort" => {
                    req.sort.clear();
                    for part in v.split(',') {
                        parse_sort_entry(&Value::from(part), &mut req.sort)?;
                    }
                }
                "_source" => {
                    req.source_set = true;
                    req.source = match v.as_str() {
                        "true" => SourceFilter::default(),
                        "false" => SourceFilter {
                            disabled: true,
                            ..Default::default()
                        },
                        list => SourceFilter {
                            includes: list.split(',').map(str::to_string).collect(),
                            ..Default::default()
                        },
                    }
                }
                "docvalue_fields" => {
                    req.docvalue_fields
                        .extend(v.split(',').map(|f| super::fields::FieldSpec {
                            field: f.trim().to_string(),
                            format: None,
                        }))
                }
                "stored_fields" => {
                    req.stored_fields = Some(v.split(',').map(|f| f.trim().to_string()).collect())
                }
                "_source_includes" => {
                    req.source.includes = v.split(',').map(str::to_string).collect()
                }
                "_source_excludes" => {
                    req.source.excludes = v.split(',').map(str::to_string).collect()
                }
                "track_total_hits" => {
                    req.track_total_hits = parse_track_total_hits(&Value::from(v.as_str()))?;
                    track_total_hits_set = true;
                }
                "seq_no_primary_term" => {
                    req.seq_no_primary_term = expect_bool(key, &Value::from(v.as_str()))?
                }
                "version" => req.version = expect_bool(key, &Value::from(v.as_str()))?,
                "terminate_after" => {
                    req.terminate_after =
                        Some(as_u64_param(key, &Value::from(v.as_str()))?).filter(|n| *n > 0)
                }
                "timeout" => req.timeout = Some(crate::parse_time_value(v).map_err(|e| {
                    EngineError::illegal_argument(format!(
                        "failed to parse setting [timeout] with value [{v}] as a time value: {e}"
                    ))
                })?),
                _ => {}
            }
        }
        req.track_total_hits_set = track_total_hits_set;
        req.typed_keys = typed_keys(params)?;
        if rest_total_hits_as_int(params)? {
            match req.track_total_hits {
                TrackTotalHits::UpTo(n) if track_total_hits_set => {
                    return Err(EngineError::illegal_argument(format!(
                        "[{REST_TOTAL_HITS_AS_INT}] cannot be used if the tracking of total hits is not accurate, got {n}"
                    )));
                }
                TrackTotalHits::UpTo(_) => req.track_total_hits = TrackTotalHits::Exact,
                TrackTotalHits::Exact | TrackTotalHits::Off => {}
            }
        }
        Ok(req)
    }
}

/// Reads the `search_after` array: scalars only, as OpenSearch's `SearchAfterBuilder` reads it.
/// An empty array is no cursor.
fn parse_search_after(v: &Value) -> Result<Option<Vec<Value>>> {
    let values = v.as_array().map(Vec::as_slice).unwrap_or_default();
    if let Some(bad) = values.iter().find(|x| x.is_array() || x.is_object()) {
        return Err(parse_err(format!(
            "Expected [VALUE_STRING] or [VALUE_NUMBER] or [VALUE_BOOLEAN] or [VALUE_NULL] but found [{}] inside search_after.",
            sluice_wire::json::token_name(bad)
        )));
    }
    Ok((!values.is_empty()).then(|| values.to_vec()))
}

fn expect_bool(key: &str, v: &Value) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
        other => Err(parse_err(format!(
            "[{key}] expects a boolean, got a {}",
            sluice_wire::json::token_name(other)
        ))),
    }
}
