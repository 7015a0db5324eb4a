//! The OpenSearch query DSL translated to tantivy queries.
//!
//! [`build_query`] takes the JSON of a `query` clause and returns a tantivy [`Query`] over the
//! sluice [schema]: user fields are paths inside the `_txt` and `_kw` JSON fields,
//! resolved through the index's [`Mapping`]. The translation is split by query family:
//!
//! - full-text queries (`match`, `match_phrase`, `match_phrase_prefix`, `multi_match`) analyse
//!   their text with the index's `default` tokenizer on `text` fields and behave like `term` on
//!   every other type;
//! - term-level queries (`term`, `terms`, `range`, `exists`, `ids`, `prefix`, `wildcard`,
//!   `regexp`, `fuzzy`) convert their values to the field's type first; `terms` may fetch its values
//!   from other documents ([terms lookup](crate::lookup), through [`QueryContext::lookups`]);
//! - compound queries (`bool`, `constant_score`, `dis_max`) recurse;
//! - `query_string` has its own small Lucene-syntax parser.
//!
//! Errors follow OpenSearch: a malformed clause is a `parsing_exception`, a value that does not
//! fit the field's type is a `query_shard_exception` naming the index, and a query on an unmapped
//! field matches nothing.

mod compound;
mod full_text;
mod fuzzy;
mod query_string;
mod simple_query_string;
mod term_level;
mod values;

pub(crate) use term_level::check_utc;

use serde_json::{Map, Value};
use tantivy::Term;
use tantivy::query::{AllQuery, BooleanQuery, BoostQuery, ConstScoreQuery, EmptyQuery, Query};

use crate::error::{EngineError, Result};
use crate::lookup::TermsLookups;
use crate::mapping::{Mapping, ResolvedField, Storage};
use crate::schema;

/// The tokenizer the `_txt` field is indexed with (see [`schema::build_schema`]); queries analyse
/// their text with the same one so that terms line up.
const TEXT_TOKENIZER: &str = "default";

/// What a query needs to know about the index it runs on.
pub struct QueryContext<'a> {
    /// The index's mapping, to resolve user field names.
    pub mapping: &'a Mapping,
    /// The tantivy fields of the sluice schema.
    pub fields: schema::Fields,
    /// The tantivy index, for its tokenizers.
    pub index: &'a tantivy::Index,
    /// "Now" for date math (`now-1d/d`), in epoch milliseconds.
    pub now_millis: i64,
    /// The index name, reported by `query_shard_exception`s.
    pub index_name: &'a str,
    /// The most terms a `terms` query may hold (`index.max_terms_count`).
    pub max_terms_count: u64,
    /// Resolves `terms` lookups; `None` makes a lookup an error.
    pub lookups: Option<&'a TermsLookups<'a>>,
}

impl QueryContext<'_> {
    /// A `query_shard_exception` about this index.
    pub(crate) fn shard_error(&self, reason: impl Into<String>) -> EngineError {
        EngineError::query_shard(reason).with_index(self.index_name)
    }

    /// The `query_shard_exception` OpenSearch reports for a value that does not fit a field.
    pub(crate) fn value_error(&self, reason: &str) -> EngineError {
        self.shard_error(format!("failed to create query: {reason}"))
    }

    /// The tantivy JSON field holding a resolved field's values.
    pub(crate) fn storage_field(&self, field: &ResolvedField) -> tantivy::schema::Field {
        match field.storage {
            Storage::Text => self.fields.txt,
            Storage::Kw => self.fields.kw,
        }
    }

    /// A term on a resolved field's JSON path, without a value yet.
    pub(crate) fn path_term(&self, field: &ResolvedField) -> Term {
        Term::from_field_json_path(self.storage_field(field), &field.path, true)
    }

    /// A string term on a resolved field's JSON path.
    pub(crate) fn str_term(&self, field: &ResolvedField, text: &str) -> Term {
        let mut term = self.path_term(field);
        term.append_type_and_str(text);
        term
    }

    /// Splits `text` into `(position, token)` with the index's `default` tokenizer, the one the
    /// `_txt` field is indexed with.
    pub(crate) fn analyze(&self, text: &str) -> Vec<(usize, String)> {
        let Some(mut analyzer) = self.index.tokenizers().get(TEXT_TOKENIZER) else {
            return Vec::new();
        };
        let mut tokens = Vec::new();
        let mut stream = analyzer.token_stream(text);
        while stream.advance() {
            let token = stream.token();
            tokens.push((token.position, token.text.clone()));
        }
        tokens
    }
}

/// Translates a query DSL object (`{"match": {...}}`) into a tantivy query.
///
/// # Errors
///
/// `parsing_exception` for an unknown query type or a malformed clause; `query_shard_exception`
/// (naming the index) for a value that cannot be converted to its field's type or a query the
/// field's type does not support.
pub fn build_query(dsl: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let (name, body) = query_clause(dsl)?;
    match name {
        "match_all" => match_all(body),
        "match_none" => {
            object_body(name, body, &["boost", "_name"])?;
            Ok(Box::new(EmptyQuery))
        }
        "match" => full_text::match_query(body, ctx),
        "match_phrase" => full_text::match_phrase(body, ctx),
        "match_phrase_prefix" => full_text::match_phrase_prefix(body, ctx),
        "multi_match" => full_text::multi_match(body, ctx),
        "term" => term_level::term(body, ctx),
        "terms" => term_level::terms(body, ctx),
        "range" => term_level::range(body, ctx),
        "exists" => term_level::exists(body, ctx),
        "ids" => term_level::ids(body, ctx),
        "fuzzy" => fuzzy::fuzzy(body, ctx),
        "prefix" => term_level::pattern(term_level::PatternKind::Prefix, body, ctx),
        "wildcard" => term_level::pattern(term_level::PatternKind::Wildcard, body, ctx),
        "regexp" => term_level::pattern(term_level::PatternKind::Regexp, body, ctx),
        "bool" => compound::bool_query(body, ctx),
        "constant_score" => compound::constant_score(body, ctx),
        "dis_max" => compound::dis_max(body, ctx),
        "query_string" => query_string::query_string(body, ctx),
        "simple_query_string" => simple_query_string::simple_query_string(body, ctx),
        other => Err(EngineError::parsing(format!("unknown query [{other}]"))),
    }
}

/// Splits `{"<type>": <body>}` into its one key and value.
fn query_clause(dsl: &Value) -> Result<(&str, &Value)> {
    let obj = dsl.as_object().ok_or_else(|| {
        EngineError::parsing(format!(
            "[_na] query malformed, must start with start_object, got [{}]",
            json_kind(dsl)
        ))
    })?;
    let mut entries = obj.iter();
    let Some((name, body)) = entries.next() else {
        return Err(EngineError::parsing("query malformed, empty clause found"));
    };
    if let Some((second, _)) = entries.next() {
        return Err(EngineError::parsing(format!(
            "[{name}] malformed query, expected [END_OBJECT] but found [FIELD_NAME] [{second}]"
        )));
    }
    Ok((name.as_str(), body))
}

fn match_all(body: &Value) -> Result<Box<dyn Query>> {
    let obj = object_body("match_all", body, &["boost", "_name"])?;
    let boost = boost_param("match_all", obj)?;
    // tantivy drops a bare `AllQuery` from conjunctions, score and all; a constant score keeps
    // its 1.0 in `must` clauses, as OpenSearch scores them.
    Ok(Box::new(ConstScoreQuery::new(Box::new(AllQuery), boost)))
}

/// The JSON token name OpenSearch's parser would report for a value (the wire crate's).
pub(crate) use sluice_wire::json::token_name as json_kind;

/// The body of a query that must be an object whose keys are all in `allowed`.
fn object_body<'a>(
    query: &str,
    body: &'a Value,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>> {
    let obj = body.as_object().ok_or_else(|| malformed(query))?;
    check_params(query, obj, allowed)?;
    Ok(obj)
}

/// Rejects any key of `obj` not in `allowed`, as OpenSearch's query parsers do.
fn check_params(query: &str, obj: &Map<String, Value>, allowed: &[&str]) -> Result<()> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(unsupported_param(query, key)),
        None => Ok(()),
    }
}

/// `[<query>] query malformed, no start_object after query name`.
fn malformed(query: &str) -> EngineError {
    EngineError::parsing(format!(
        "[{query}] query malformed, no start_object after query name"
    ))
}

/// `[<query>] query does not support [<key>]`.
fn unsupported_param(query: &str, key: &str) -> EngineError {
    EngineError::parsing(format!("[{query}] query does not support [{key}]"))
}

/// Reads the body of a single-field query, `{"<field>": <spec>}`.
fn single_field<'a>(query: &str, body: &'a Value) -> Result<(&'a str, &'a Value)> {
    let obj = body.as_object().ok_or_else(|| malformed(query))?;
    let mut entries = obj.iter();
    let Some((field, spec)) = entries.next() else {
        return Err(EngineError::parsing(format!(
            "[{query}] query malformed, no field specified"
        )));
    };
    if let Some((second, _)) = entries.next() {
        return Err(EngineError::parsing(format!(
            "[{query}] query doesn't support multiple fields, found [{field}] and [{second}]"
        )));
    }
    Ok((field.as_str(), spec))
}

/// Reads the optional `boost` of a query object (default 1.0).
fn boost_param(query: &str, obj: &Map<String, Value>) -> Result<f32> {
    match obj.get("boost") {
        None => Ok(1.0),
        Some(v) => number_param(query, "boost", v).map(|b| b as f32),
    }
}

/// Reads a numeric parameter that may also be given as a numeric string.
fn number_param(query: &str, key: &str, v: &Value) -> Result<f64> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    n.filter(|f| f.is_finite()).ok_or_else(|| {
        EngineError::new(
            crate::error::ErrorCode::XContentParse,
            format!("[{query}] failed to parse field [{key}]: expected a number, got [{v}]"),
        )
    })
}

/// Reads a boolean parameter that may also be given as `"true"`/`"false"`.
fn bool_param(query: &str, key: &str, v: &Value) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" => Ok(true),
        Value::String(s) if s == "false" => Ok(false),
        _ => Err(EngineError::new(
            crate::error::ErrorCode::XContentParse,
            format!(
                "[{query}] failed to parse field [{key}]: expected [true] or [false], got [{v}]"
            ),
        )),
    }
}

/// Reads a string parameter; numbers and booleans are accepted as their text.
fn text_param(query: &str, key: &str, v: &Value) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(EngineError::parsing(format!(
            "[{query}] unknown token [{}] after [{key}]",
            json_kind(v)
        ))),
    }
}

/// A query matching any of `queries`: nothing for none, the query itself for one.
fn any_of(mut queries: Vec<Box<dyn Query>>) -> Box<dyn Query> {
    match queries.len() {
        0 => Box::new(EmptyQuery),
        1 => queries.pop().expect("one query"),
        _ => Box::new(BooleanQuery::union(queries)),
    }
}

/// Wraps `query` in a [`BoostQuery`] unless the boost is 1.
fn with_boost(query: Box<dyn Query>, boost: f32) -> Box<dyn Query> {
    if boost == 1.0 {
        query
    } else {
        Box::new(BoostQuery::new(query, boost))
    }
}

/// A `minimum_should_match` specification: `3`, `-1`, `"75%"`, `"-25%"`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum MinimumShouldMatch {
    /// An absolute count; negative means "all but n".
    Count(i64),
    /// A percentage of the optional clauses; negative means "all but p%".
    Percent(i64),
}

impl MinimumShouldMatch {
    /// Parses the parameter of `query`.
    fn parse(query: &str, v: &Value) -> Result<MinimumShouldMatch> {
        let bad = || {
            EngineError::parsing(format!(
                "[{query}] minimum_should_match [{v}] is not supported; use an integer (3, -1) or \
                 a percentage (\"75%\", \"-25%\")"
            ))
        };
        match v {
            Value::Number(n) => n.as_i64().map(MinimumShouldMatch::Count).ok_or_else(bad),
            Value::String(s) => {
                let s = s.trim();
                match s.strip_suffix('%') {
                    Some(p) => p
                        .trim()
                        .parse()
                        .map(MinimumShouldMatch::Percent)
                        .map_err(|_| bad()),
                    None => s.parse().map(MinimumShouldMatch::Count).map_err(|_| bad()),
                }
            }
            _ => Err(bad()),
        }
    }

    /// How many of `optional` clauses must match, as OpenSearch's
    /// `Queries.calculateMinShouldMatch` computes it: a negative spec counts down from all
    /// clauses, and a percentage is truncated towards zero.
    fn required(self, optional: usize) -> usize {
        let n = optional as i64;
        let result = match self {
            MinimumShouldMatch::Count(c) if c < 0 => n + c,
            MinimumShouldMatch::Count(c) => c,
            MinimumShouldMatch::Percent(p) => {
                let calc = (n * p) as f64 / 100.0;
                if calc < 0.0 {
                    n + calc.trunc() as i64
                } else {
                    calc.trunc() as i64
                }
            }
        };
        result.max(0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_minimum_should_match_follows_opensearch_arithmetic() {
        assert_eq!(MinimumShouldMatch::Count(2).required(3), 2);
        assert_eq!(MinimumShouldMatch::Count(-1).required(3), 2);
        assert_eq!(MinimumShouldMatch::Percent(75).required(3), 2);
        assert_eq!(MinimumShouldMatch::Percent(-25).required(3), 3);
        assert_eq!(MinimumShouldMatch::Percent(-50).required(4), 2);
        assert_eq!(MinimumShouldMatch::Count(-5).required(3), 0);
    }

    #[test]
    fn test_minimum_should_match_parses_ints_and_percentages() {
        let p = |v: Value| MinimumShouldMatch::parse("bool", &v);
        assert_eq!(p(Value::from(2)).unwrap(), MinimumShouldMatch::Count(2));
        assert_eq!(p(Value::from("-1")).unwrap(), MinimumShouldMatch::Count(-1));
        assert_eq!(
            p(Value::from("75%")).unwrap(),
            MinimumShouldMatch::Percent(75)
        );
        assert!(p(Value::from("3<90%")).is_err());
    }

    #[test]
    fn test_query_clause_rejects_empty_and_double_clauses() {
        let e = query_clause(&serde_json::json!({})).unwrap_err();
        assert_eq!(e.code, crate::ErrorCode::Parsing);
        let e = query_clause(&serde_json::json!({"match_all": {}, "term": {}})).unwrap_err();
        assert!(
            e.reason.contains("[match_all] malformed query"),
            "{}",
            e.reason
        );
    }
}
