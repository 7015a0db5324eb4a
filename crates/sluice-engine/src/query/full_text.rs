//! Full-text queries: `match`, `match_phrase`, `match_phrase_prefix` and `multi_match`.
//!
//! On `text` fields the query text is analysed with the index's `default` tokenizer; on every
//! other type the whole text is one value and the query behaves like `term`.

use serde_json::{Map, Value};
use tantivy::query::{
    AllQuery, BooleanQuery, DisjunctionMaxQuery, EmptyQuery, FuzzyTermQuery, PhrasePrefixQuery,
    PhraseQuery, Query, TermQuery,
};
use tantivy::schema::IndexRecordOption;

use super::term_level::{self, PatternKind};
use super::values;
use super::{
    MinimumShouldMatch, QueryContext, bool_param, boost_param, check_params, number_param,
    single_field, text_param, with_boost,
};
use crate::error::{EngineError, Result};
use crate::mapping::{FieldType, ResolvedField, Storage};
use crate::schema::ID_FIELD;

/// How the terms of an analysed text combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operator {
    /// Any term may match (the default).
    Or,
    /// All terms must match.
    And,
}

impl Operator {
    pub(super) fn parse(query: &str, v: &Value) -> Result<Operator> {
        match v.as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("or") => Ok(Operator::Or),
            Some("and") => Ok(Operator::And),
            _ => Err(EngineError::parsing(format!(
                "[{query}] query does not support [operator] value [{v}]; use \"or\" or \"and\""
            ))),
        }
    }
}

/// Fuzzy matching of analysed terms: an edit distance, fixed or by term length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fuzziness {
    /// `AUTO:low,high`: no edits below `low` characters, one below `high`, two from there.
    Auto { low: usize, high: usize },
    /// A fixed distance (0, 1 or 2).
    Fixed(u8),
}

impl Fuzziness {
    /// The thresholds of plain `AUTO`, as OpenSearch defines it.
    pub(super) const AUTO: Fuzziness = Fuzziness::Auto { low: 3, high: 6 };

    pub(super) fn parse(query: &str, v: &Value) -> Result<Fuzziness> {
        let bad = || {
            EngineError::parsing(format!(
                "[{query}] fuzziness [{v}] is not supported; use AUTO, AUTO:low,high, 0, 1 or 2"
            ))
        };
        let text = match v {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.trim().to_string(),
            _ => return Err(bad()),
        };
        if text.eq_ignore_ascii_case("auto") {
            return Ok(Fuzziness::AUTO);
        }
        if let Some(bounds) = text
            .strip_prefix("AUTO:")
            .or_else(|| text.strip_prefix("auto:"))
        {
            let (low, high) = bounds.split_once(',').ok_or_else(bad)?;
            let low = low.trim().parse().map_err(|_| bad())?;
            let high = high.trim().parse().map_err(|_| bad())?;
            return Ok(Fuzziness::Auto { low, high });
        }
        let distance: f64 = text.parse().map_err(|_| bad())?;
        if !(0.0..=2.0).contains(&distance) {
            return Err(bad());
        }
        Ok(Fuzziness::Fixed(distance as u8))
    }

    /// The edit distance allowed for a term of `len` characters.
    pub(super) fn distance(self, len: usize) -> u8 {
        match self {
            Fuzziness::Fixed(d) => d,
            Fuzziness::Auto { low, high } => {
                if len < low {
                    0
                } else if len < high {
                    1
                } else {
                    2
                }
            }
        }
    }
}

/// The options of `match` that shape how analysed terms combine.
#[derive(Debug, Clone, Copy)]
pub(super) struct MatchOptions {
    /// How the terms combine.
    pub(super) operator: Operator,
    /// With [`Operator::Or`], how many terms must match.
    pub(super) minimum_should_match: Option<MinimumShouldMatch>,
    /// Fuzzy matching of each term.
    pub(super) fuzziness: Option<Fuzziness>,
    /// Whether a value that does not fit a non-text field matches nothing instead of failing.
    pub(super) lenient: bool,
    /// Whether a text with no terms (all stop characters) matches everything (`zero_terms_query:
    /// all`) instead of nothing.
    pub(super) zero_terms_all: bool,
}

impl Default for MatchOptions {
    fn default() -> Self {
        MatchOptions {
            operator: Operator::Or,
            minimum_should_match: None,
            fuzziness: None,
            lenient: false,
            zero_terms_all: false,
        }
    }
}

impl MatchOptions {
    /// Reads the options of a `match`-like query object; unknown keys are checked by the caller.
    fn parse(query: &str, obj: &Map<String, Value>) -> Result<MatchOptions> {
        let mut opts = MatchOptions::default();
        for (key, v) in obj {
            match key.as_str() {
                "operator" => opts.operator = Operator::parse(query, v)?,
                "minimum_should_match" => {
                    opts.minimum_should_match = Some(MinimumShouldMatch::parse(query, v)?);
                }
                "fuzziness" => opts.fuzziness = Some(Fuzziness::parse(query, v)?),
                "lenient" => opts.lenient = bool_param(query, key, v)?,
                "zero_terms_query" => {
                    opts.zero_terms_all =
                        match text_param(query, key, v)?.to_ascii_lowercase().as_str() {
                            "all" => true,
                            "none" => false,
                            other => {
                                return Err(EngineError::parsing(format!(
                                    "[{query}] unsupported zero_terms_query value [{other}]"
                                )));
                            }
                        }
                }
                _ => {}
            }
        }
        Ok(opts)
    }

    fn zero_terms(&self) -> Box<dyn Query> {
        if self.zero_terms_all {
            Box::new(AllQuery)
        } else {
            Box::new(EmptyQuery)
        }
    }
}

/// The keys `match` accepts; those without an effect in sluice are read and ignored.
const MATCH_PARAMS: &[&str] = &[
    "query",
    "operator",
    "minimum_should_match",
    "fuzziness",
    "boost",
    "analyzer",
    "zero_terms_query",
    "lenient",
    "prefix_length",
    "max_expansions",
    "fuzzy_transpositions",
    "fuzzy_rewrite",
    "auto_generate_synonyms_phrase_query",
    "cutoff_frequency",
    "_name",
];

/// The keys `match_phrase` accepts.
const PHRASE_PARAMS: &[&str] = &[
    "query",
    "slop",
    "analyzer",
    "boost",
    "zero_terms_query",
    "_name",
];

/// The keys `match_phrase_prefix` accepts.
const PHRASE_PREFIX_PARAMS: &[&str] = &[
    "query",
    "slop",
    "max_expansions",
    "analyzer",
    "boost",
    "zero_terms_query",
    "_name",
];

/// The default `max_expansions` of `match_phrase_prefix`, as in OpenSearch.
const DEFAULT_MAX_EXPANSIONS: u32 = 50;

/// A full-text query body: the field name, the query text and the long form's options.
type FullTextBody<'a> = (&'a str, &'a Value, Option<&'a Map<String, Value>>);

/// Reads a full-text query body: `{field: "text"}` or `{field: {query: "text", ...}}`.
fn full_text_body<'a>(query: &str, body: &'a Value, params: &[&str]) -> Result<FullTextBody<'a>> {
    let (name, spec) = single_field(query, body)?;
    match spec {
        Value::Object(obj) => {
            check_params(query, obj, params)?;
            let text = obj.get("query").ok_or_else(|| {
                EngineError::parsing(format!(
                    "[{query}] query malformed, no query text specified for field [{name}]"
                ))
            })?;
            check_text(query, text)?;
            Ok((name, text, Some(obj)))
        }
        other => {
            check_text(query, other)?;
            Ok((name, other, None))
        }
    }
}

fn check_text(query: &str, text: &Value) -> Result<()> {
    match text {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok(()),
        other => Err(EngineError::parsing(format!(
            "[{query}] unknown token [{}] after [query]",
            super::json_kind(other)
        ))),
    }
}

/// `match`.
pub(super) fn match_query(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let (name, text, obj) = full_text_body("match", body, MATCH_PARAMS)?;
    let (opts, boost) = match obj {
        Some(obj) => (
            MatchOptions::parse("match", obj)?,
            boost_param("match", obj)?,
        ),
        None => (MatchOptions::default(), 1.0),
    };
    Ok(with_boost(match_field(ctx, name, text, &opts)?, boost))
}

/// `match` on field `name`.
pub(super) fn match_field(
    ctx: &QueryContext,
    name: &str,
    text: &Value,
    opts: &MatchOptions,
) -> Result<Box<dyn Query>> {
    if name == ID_FIELD || name == "_index" {
        return term_level::term_query(ctx, name, text, false, opts.lenient);
    }
    match ctx.mapping.resolve(name) {
        Some(field) => match_resolved(ctx, &field, text, opts),
        None => Ok(Box::new(EmptyQuery)),
    }
}

/// `match` on a resolved field.
pub(super) fn match_resolved(
    ctx: &QueryContext,
    field: &ResolvedField,
    text: &Value,
    opts: &MatchOptions,
) -> Result<Box<dyn Query>> {
    if field.storage == Storage::Kw {
        return term_level::field_term_query(ctx, field, text, false, opts.lenient);
    }
    let text = values::scalar_string(text).map_err(|reason| ctx.value_error(&reason))?;
    let mut clauses: Vec<Box<dyn Query>> = ctx
        .analyze(&text)
        .into_iter()
        .map(|(_, token)| token_query(ctx, field, &token, opts.fuzziness))
        .collect();
    let n = clauses.len();
    Ok(match n {
        0 => opts.zero_terms(),
        1 => clauses.pop().expect("one clause"),
        _ if opts.operator == Operator::And => Box::new(BooleanQuery::intersection(clauses)),
        _ => {
            // A minimum of 0 or 1 is a plain disjunction: at least one term must match.
            let required = opts
                .minimum_should_match
                .map_or(1, |m| m.required(n))
                .max(1);
            if required > n {
                Box::new(EmptyQuery)
            } else if required == 1 {
                Box::new(BooleanQuery::union(clauses))
            } else {
                Box::new(BooleanQuery::union_with_minimum_required_clauses(
                    clauses, required,
                ))
            }
        }
    })
}

/// The query for one analysed token, fuzzy if asked.
fn token_query(
    ctx: &QueryContext,
    field: &ResolvedField,
    token: &str,
    fuzziness: Option<Fuzziness>,
) -> Box<dyn Query> {
    let term = ctx.str_term(field, token);
    match fuzziness.map(|f| f.distance(token.chars().count())) {
        Some(distance) if distance > 0 => Box::new(FuzzyTermQuery::new(term, distance, true)),
        _ => Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)),
    }
}

/// `match_phrase`.
pub(super) fn match_phrase(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let (name, text, obj) = full_text_body("match_phrase", body, PHRASE_PARAMS)?;
    let (opts, boost, slop) = phrase_options("match_phrase", obj)?;
    let query = match ctx.mapping.resolve(name) {
        Some(field) => phrase_resolved(ctx, &field, text, slop, &opts)?,
        None if name == ID_FIELD => term_level::term_query(ctx, name, text, false, false)?,
        None => Box::new(EmptyQuery),
    };
    Ok(with_boost(query, boost))
}

fn phrase_options(
    query: &str,
    obj: Option<&Map<String, Value>>,
) -> Result<(MatchOptions, f32, u32)> {
    let Some(obj) = obj else {
        return Ok((MatchOptions::default(), 1.0, 0));
    };
    let slop = match obj.get("slop") {
        Some(v) => {
            let slop = number_param(query, "slop", v)?;
            if slop < 0.0 {
                return Err(EngineError::illegal_argument(format!(
                    "[{query}] slop must be >= 0, got [{v}]"
                )));
            }
            slop as u32
        }
        None => 0,
    };
    Ok((
        MatchOptions::parse(query, obj)?,
        boost_param(query, obj)?,
        slop,
    ))
}

/// `match_phrase` on a resolved field.
pub(super) fn phrase_resolved(
    ctx: &QueryContext,
    field: &ResolvedField,
    text: &Value,
    slop: u32,
    opts: &MatchOptions,
) -> Result<Box<dyn Query>> {
    if field.storage == Storage::Kw {
        return term_level::field_term_query(ctx, field, text, false, opts.lenient);
    }
    let text = values::scalar_string(text).map_err(|reason| ctx.value_error(&reason))?;
    let tokens = ctx.analyze(&text);
    Ok(match tokens.len() {
        0 => opts.zero_terms(),
        1 => Box::new(TermQuery::new(
            ctx.str_term(field, &tokens[0].1),
            IndexRecordOption::WithFreqs,
        )),
        _ => {
            let terms = tokens
                .iter()
                .map(|(pos, token)| (*pos, ctx.str_term(field, token)))
                .collect();
            Box::new(PhraseQuery::new_with_offset_and_slop(terms, slop))
        }
    })
}

/// `match_phrase_prefix`.
pub(super) fn match_phrase_prefix(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let (name, text, obj) = full_text_body("match_phrase_prefix", body, PHRASE_PREFIX_PARAMS)?;
    let (opts, boost, _slop) = phrase_options("match_phrase_prefix", obj)?;
    let max_expansions = match obj.and_then(|o| o.get("max_expansions")) {
        Some(v) => number_param("match_phrase_prefix", "max_expansions", v)? as u32,
        None => DEFAULT_MAX_EXPANSIONS,
    };
    let query = match ctx.mapping.resolve(name) {
        Some(field) => phrase_prefix_resolved(ctx, &field, text, max_expansions, &opts)?,
        None => Box::new(EmptyQuery),
    };
    Ok(with_boost(query, boost))
}

/// `match_phrase_prefix` on a resolved field: the last token is a prefix.
fn phrase_prefix_resolved(
    ctx: &QueryContext,
    field: &ResolvedField,
    text: &Value,
    max_expansions: u32,
    opts: &MatchOptions,
) -> Result<Box<dyn Query>> {
    let text = values::scalar_string(text).map_err(|reason| ctx.value_error(&reason))?;
    match field.ty {
        FieldType::Keyword => {
            return term_level::pattern_query(ctx, PatternKind::Prefix, &field.path, &text, false);
        }
        FieldType::Text => {}
        _ => {
            return term_level::field_term_query(
                ctx,
                field,
                &Value::String(text),
                false,
                opts.lenient,
            );
        }
    }
    let tokens = ctx.analyze(&text);
    if tokens.is_empty() {
        return Ok(opts.zero_terms());
    }
    let terms = tokens
        .iter()
        .map(|(pos, token)| (*pos, ctx.str_term(field, token)))
        .collect();
    let mut query = PhrasePrefixQuery::new_with_offset(terms);
    query.set_max_expansions(max_expansions);
    Ok(Box::new(query))
}

/// The `multi_match` types sluice runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MultiMatchType {
    BestFields,
    MostFields,
    Phrase,
    PhrasePrefix,
    CrossFields,
}

/// The keys `multi_match` accepts.
const MULTI_MATCH_PARAMS: &[&str] = &[
    "query",
    "fields",
    "type",
    "operator",
    "minimum_should_match",
    "tie_breaker",
    "boost",
    "analyzer",
    "fuzziness",
    "lenient",
    "slop",
    "zero_terms_query",
    "prefix_length",
    "max_expansions",
    "fuzzy_transpositions",
    "fuzzy_rewrite",
    "auto_generate_synonyms_phrase_query",
    "cutoff_frequency",
    "_name",
];

/// `multi_match`: one `match`-like query per field, combined by type (`best_fields` takes the
/// best field's score plus `tie_breaker` times the others, `most_fields` sums them).
pub(super) fn multi_match(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = super::object_body("multi_match", body, MULTI_MATCH_PARAMS)?;
    let text = obj
        .get("query")
        .ok_or_else(|| EngineError::parsing("[multi_match] requires query value"))?;
    check_text("multi_match", text)?;
    let kind = match obj
        .get("type")
        .map(|v| text_param("multi_match", "type", v))
        .transpose()?
        .as_deref()
    {
        None | Some("best_fields") => MultiMatchType::BestFields,
        Some("most_fields") => MultiMatchType::MostFields,
        Some("phrase") => MultiMatchType::Phrase,
        Some("phrase_prefix") => MultiMatchType::PhrasePrefix,
        Some("cross_fields") => MultiMatchType::CrossFields,
        Some(other @ "bool_prefix") => {
            return Err(EngineError::parsing(format!(
                "[multi_match] query type [{other}] is not supported by sluice; use best_fields, \
                 most_fields, cross_fields, phrase or phrase_prefix"
            )));
        }
        Some(other) => {
            return Err(EngineError::parsing(format!(
                "[multi_match] query does not support type [{other}]"
            )));
        }
    };
    let opts = MatchOptions::parse("multi_match", obj)?;
    let tie_breaker = match obj.get("tie_breaker") {
        Some(v) => number_param("multi_match", "tie_breaker", v)? as f32,
        None => 0.0,
    };
    let slop = match obj.get("slop") {
        Some(v) => number_param("multi_match", "slop", v)? as u32,
        None => 0,
    };
    let max_expansions = match obj.get("max_expansions") {
        Some(v) => number_param("multi_match", "max_expansions", v)? as u32,
        None => DEFAULT_MAX_EXPANSIONS,
    };
    let patterns = field_patterns("multi_match", obj.get("fields"))?;
    if kind == MultiMatchType::CrossFields {
        let fields = resolve_patterns(ctx, &patterns);
        let query = cross_fields(ctx, &fields, text, &opts, tie_breaker)?;
        return Ok(with_boost(query, boost_param("multi_match", obj)?));
    }
    let mut per_field: Vec<Box<dyn Query>> = Vec::new();
    for (field, boost, lenient) in resolve_patterns(ctx, &patterns) {
        let opts = MatchOptions {
            lenient: opts.lenient || lenient,
            ..opts
        };
        let query = match kind {
            MultiMatchType::BestFields
            | MultiMatchType::MostFields
            | MultiMatchType::CrossFields => match_resolved(ctx, &field, text, &opts)?,
            MultiMatchType::Phrase => phrase_resolved(ctx, &field, text, slop, &opts)?,
            MultiMatchType::PhrasePrefix => {
                phrase_prefix_resolved(ctx, &field, text, max_expansions, &opts)?
            }
        };
        per_field.push(with_boost(query, boost));
    }
    let combined: Box<dyn Query> = match per_field.len() {
        0 => Box::new(EmptyQuery),
        1 => per_field.pop().expect("one field"),
        _ if kind == MultiMatchType::MostFields => Box::new(BooleanQuery::union(per_field)),
        _ => Box::new(DisjunctionMaxQuery::with_tie_breaker(
            per_field,
            tie_breaker,
        )),
    };
    Ok(with_boost(combined, boost_param("multi_match", obj)?))
}

/// `multi_match` of type `cross_fields`: term-centric, as OpenSearch's. The analysed fields
/// form one group in which each term may match in any field (the best field's score counts,
/// plus `tie_breaker` times the others), and the terms combine by `operator` and
/// `minimum_should_match` across the group, so `operator: and` needs every term somewhere, not
/// every term in one field. Keyword fields form a group of their own matching the whole text;
/// the groups combine as `best_fields` does. Difference: OpenSearch blends each term's document
/// frequency across the fields before scoring; sluice scores each field's term on its own, so
/// matches are the same and scores differ.
fn cross_fields(
    ctx: &QueryContext,
    fields: &[(ResolvedField, f32, bool)],
    text: &Value,
    opts: &MatchOptions,
    tie_breaker: f32,
) -> Result<Box<dyn Query>> {
    let (keyword, analysed): (Vec<_>, Vec<_>) = fields
        .iter()
        .partition(|(f, _, _)| f.storage == Storage::Kw);
    let mut groups: Vec<Box<dyn Query>> = Vec::new();
    if !analysed.is_empty() {
        let text = values::scalar_string(text).map_err(|reason| ctx.value_error(&reason))?;
        let mut terms: Vec<Box<dyn Query>> = ctx
            .analyze(&text)
            .into_iter()
            .map(|(_, token)| {
                let per_field: Vec<Box<dyn Query>> = analysed
                    .iter()
                    .map(|(f, boost, _)| {
                        with_boost(token_query(ctx, f, &token, opts.fuzziness), *boost)
                    })
                    .collect();
                Box::new(DisjunctionMaxQuery::with_tie_breaker(
                    per_field,
                    tie_breaker,
                )) as Box<dyn Query>
            })
            .collect();
        let n = terms.len();
        groups.push(match n {
            0 => opts.zero_terms(),
            1 => terms.pop().expect("one term"),
            _ if opts.operator == Operator::And => Box::new(BooleanQuery::intersection(terms)),
            _ => {
                let required = opts
                    .minimum_should_match
                    .map_or(1, |m| m.required(n))
                    .max(1);
                if required > n {
                    Box::new(EmptyQuery)
                } else if required == 1 {
                    Box::new(BooleanQuery::union(terms))
                } else {
                    Box::new(BooleanQuery::union_with_minimum_required_clauses(
                        terms, required,
                    ))
                }
            }
        });
    }
    for (field, boost, lenient) in keyword {
        let opts = MatchOptions {
            lenient: opts.lenient || *lenient,
            ..*opts
        };
        groups.push(with_boost(match_resolved(ctx, field, text, &opts)?, *boost));
    }
    Ok(match groups.len() {
        0 => Box::new(EmptyQuery),
        1 => groups.pop().expect("one group"),
        _ => Box::new(DisjunctionMaxQuery::with_tie_breaker(groups, tie_breaker)),
    })
}

/// Reads a `fields` parameter (a string or an array of `name^boost` strings); `*` by default.
pub(super) fn field_patterns(query: &str, fields: Option<&Value>) -> Result<Vec<(String, f32)>> {
    let raw: Vec<String> = match fields {
        None => vec!["*".to_string()],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| text_param(query, "fields", v))
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(EngineError::parsing(format!(
                "[{query}] query does not support [fields] of type [{}]",
                super::json_kind(other)
            )));
        }
    };
    let mut out = Vec::with_capacity(raw.len());
    for spec in raw {
        match spec.rsplit_once('^') {
            Some((name, boost)) => {
                let boost: f32 = boost.trim().parse().map_err(|_| {
                    EngineError::parsing(format!("[{query}] invalid boost in field [{spec}]"))
                })?;
                out.push((name.trim().to_string(), boost));
            }
            None => out.push((spec.trim().to_string(), 1.0)),
        }
    }
    if out.is_empty() {
        out.push(("*".to_string(), 1.0));
    }
    Ok(out)
}

/// Resolves field patterns to `(field, boost, lenient)`.
///
/// `*` stands for every text and keyword field and is lenient, as OpenSearch's all-fields mode
/// is; other wildcard patterns take every matching field; a plain unmapped name is skipped (it
/// would match nothing).
pub(super) fn resolve_patterns(
    ctx: &QueryContext,
    patterns: &[(String, f32)],
) -> Vec<(ResolvedField, f32, bool)> {
    let mut out: Vec<(ResolvedField, f32, bool)> = Vec::new();
    for (pattern, boost) in patterns {
        let (fields, lenient) = if pattern == "*" {
            let fields = ctx
                .mapping
                .leaf_fields()
                .into_iter()
                .filter(|f| matches!(f.ty, FieldType::Text | FieldType::Keyword))
                .collect();
            (fields, true)
        } else {
            (ctx.mapping.expand_field_pattern(pattern), false)
        };
        for field in fields {
            // A field named twice keeps its first boost.
            if !out.iter().any(|(f, _, _)| f.path == field.path) {
                out.push((field, *boost, lenient));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_fuzziness_auto_follows_term_length() {
        let auto = Fuzziness::parse("match", &json!("AUTO")).unwrap();
        assert_eq!(auto.distance(2), 0);
        assert_eq!(auto.distance(4), 1);
        assert_eq!(auto.distance(8), 2);
        assert_eq!(
            Fuzziness::parse("match", &json!(1)).unwrap(),
            Fuzziness::Fixed(1)
        );
        assert!(Fuzziness::parse("match", &json!("3")).is_err());
    }

    #[test]
    fn test_field_patterns_split_boosts() {
        let p = field_patterns("multi_match", Some(&json!(["title^2", "body"]))).unwrap();
        assert_eq!(
            p,
            vec![("title".to_string(), 2.0), ("body".to_string(), 1.0)]
        );
        assert_eq!(
            field_patterns("multi_match", None).unwrap(),
            vec![("*".to_string(), 1.0)]
        );
    }
}
