//! Term-level queries: `term`, `terms`, `range`, `exists`, `ids`, `prefix`, `wildcard` and
//! `regexp`. Their values are not analysed; they are converted to the field's type.

use std::ops::Bound;

use serde_json::{Map, Value};
use tantivy::Term;
use tantivy::query::{
    AllQuery, ConstScoreQuery, EmptyQuery, ExistsQuery, InvertedIndexRangeQuery, PhrasePrefixQuery,
    Query, RangeQuery, RegexQuery, TermQuery, TermSetQuery,
};
use tantivy::schema::IndexRecordOption;

use super::values::{self, Exact};
use super::{
    QueryContext, bool_param, boost_param, check_params, malformed, single_field, text_param,
    unsupported_param, with_boost,
};
use crate::date::DateFormat;
use crate::error::{EngineError, Result};
use crate::mapping::{FieldType, ResolvedField, Storage};
use crate::schema::{ID_FIELD, KW_FIELD};

/// The largest code point, repeated: an upper bound above every real token, for text ranges
/// without an upper end (the bound must stay inside the field's JSON path).
const TEXT_RANGE_TOP: &str = "\u{10FFFF}\u{10FFFF}\u{10FFFF}\u{10FFFF}";

/// `term`: documents whose field holds exactly the value (text fields are not analysed).
pub(super) fn term(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let (name, spec) = single_field("term", body)?;
    let (value, boost, case_insensitive) = match spec {
        Value::Object(obj) => {
            check_params(
                "term",
                obj,
                &["value", "boost", "case_insensitive", "_name"],
            )?;
            let value = obj.get("value").ok_or_else(|| {
                EngineError::parsing(format!(
                    "[term] query malformed, no value specified for field [{name}]"
                ))
            })?;
            (
                value,
                boost_param("term", obj)?,
                case_insensitive_param("term", obj)?,
            )
        }
        other => (other, 1.0, false),
    };
    check_scalar("term", value)?;
    Ok(with_boost(
        term_query(ctx, name, value, case_insensitive, false)?,
        boost,
    ))
}

fn case_insensitive_param(query: &str, obj: &Map<String, Value>) -> Result<bool> {
    obj.get("case_insensitive")
        .map(|v| bool_param(query, "case_insensitive", v))
        .transpose()
        .map(|b| b.unwrap_or(false))
}

/// Rejects arrays, objects and null where a single value is expected.
fn check_scalar(query: &str, value: &Value) -> Result<()> {
    match value {
        Value::Array(_) => Err(EngineError::parsing(format!(
            "[{query}] query does not support array of values"
        ))),
        Value::Object(_) => Err(EngineError::parsing(format!(
            "[{query}] query does not support object values"
        ))),
        Value::Null => Err(EngineError::parsing(format!(
            "[{query}] query does not support null values"
        ))),
        _ => Ok(()),
    }
}

/// The query for "field `name` equals `value`", shared by `term`, `match` on non-text fields
/// and `query_string`. With `lenient`, a value that does not fit the field matches nothing.
pub(super) fn term_query(
    ctx: &QueryContext,
    name: &str,
    value: &Value,
    case_insensitive: bool,
    lenient: bool,
) -> Result<Box<dyn Query>> {
    match name {
        ID_FIELD => return Ok(id_query(ctx, std::slice::from_ref(value))),
        "_index" => return Ok(index_name_query(ctx, std::slice::from_ref(value))),
        _ => {}
    }
    let Some(field) = ctx.mapping.resolve(name) else {
        return Ok(Box::new(EmptyQuery));
    };
    field_term_query(ctx, &field, value, case_insensitive, lenient)
}

/// [`term_query`] on a resolved field.
pub(super) fn field_term_query(
    ctx: &QueryContext,
    field: &ResolvedField,
    value: &Value,
    case_insensitive: bool,
    lenient: bool,
) -> Result<Box<dyn Query>> {
    let exact = match values::exact(ctx, field, value) {
        Ok(exact) => exact,
        Err(_) if lenient => return Ok(Box::new(EmptyQuery)),
        Err(reason) => return Err(ctx.value_error(&reason)),
    };
    if case_insensitive && let Exact::Str(s) = &exact {
        return regex_query(ctx, field, &regex::escape(s), true);
    }
    Ok(values::exact_query(ctx, field, &exact))
}

/// Documents whose `_id` is one of `values`.
fn id_query(ctx: &QueryContext, values: &[Value]) -> Box<dyn Query> {
    let terms: Vec<Term> = values
        .iter()
        .filter_map(|v| values::scalar_string(v).ok())
        .map(|id| Term::from_field_text(ctx.fields.id, &id))
        .collect();
    match terms.len() {
        0 => Box::new(EmptyQuery),
        1 => Box::new(TermQuery::new(
            terms.into_iter().next().expect("one term"),
            IndexRecordOption::Basic,
        )),
        _ => Box::new(TermSetQuery::new(terms)),
    }
}

/// All documents if one of `values` names this index, none otherwise.
fn index_name_query(ctx: &QueryContext, values: &[Value]) -> Box<dyn Query> {
    if values.iter().any(|v| v.as_str() == Some(ctx.index_name)) {
        Box::new(AllQuery)
    } else {
        Box::new(EmptyQuery)
    }
}

/// `terms`: documents whose field holds any of the values, listed or fetched from other
/// documents by a [terms lookup](crate::lookup).
pub(super) fn terms(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = body.as_object().ok_or_else(|| malformed("terms"))?;
    let mut field: Option<(&str, &Value)> = None;
    for (key, value) in obj {
        match key.as_str() {
            "boost" | "_name" => {}
            "value_type" => check_value_type(value)?,
            _ => {
                if let Some((first, _)) = field {
                    return Err(EngineError::parsing(format!(
                        "[terms] query does not support multiple fields, found [{first}] and [{key}]"
                    )));
                }
                field = Some((key.as_str(), value));
            }
        }
    }
    let boost = boost_param("terms", obj)?;
    let (name, values) =
        field.ok_or_else(|| EngineError::parsing("[terms] query malformed, no field specified"))?;
    let looked_up;
    let values: &[Value] = match values {
        Value::Array(values) => values,
        Value::Object(spec) => match ctx.lookups {
            Some(lookups) => {
                looked_up = lookups.resolve(spec)?;
                &looked_up
            }
            None => {
                crate::lookup::TermsLookup::parse(spec)?;
                return Err(EngineError::illegal_argument(
                    "[terms] lookup needs the engine to fetch its values; run the query through \
                     Engine::search",
                ));
            }
        },
        _ => return Err(unsupported_param("terms", name)),
    };
    if values.len() as u64 > ctx.max_terms_count {
        return Err(EngineError::illegal_argument(format!(
            "The number of terms [{}] used in the Terms Query request has exceeded the allowed \
             maximum of [{}]. This maximum can be set by changing the [index.max_terms_count] \
             index level setting.",
            values.len(),
            ctx.max_terms_count
        )));
    }
    for v in values {
        check_scalar("terms", v)?;
    }
    Ok(Box::new(ConstScoreQuery::new(
        terms_query(ctx, name, values)?,
        boost,
    )))
}

/// Accepts `value_type: default`; sluice has no `bitmap` terms.
fn check_value_type(value: &Value) -> Result<()> {
    match text_param("terms", "value_type", value)?.as_str() {
        t if t.eq_ignore_ascii_case("default") => Ok(()),
        t if t.eq_ignore_ascii_case("bitmap") => Err(EngineError::parsing(
            "[terms] query does not support [value_type] [bitmap]; list the values instead",
        )),
        other => Err(EngineError::illegal_argument(format!(
            "{other} is not valid value_type"
        ))),
    }
}

fn terms_query(ctx: &QueryContext, name: &str, values: &[Value]) -> Result<Box<dyn Query>> {
    match name {
        ID_FIELD => return Ok(id_query(ctx, values)),
        "_index" => return Ok(index_name_query(ctx, values)),
        _ => {}
    }
    let Some(field) = ctx.mapping.resolve(name) else {
        return Ok(Box::new(EmptyQuery));
    };
    let mut terms = Vec::with_capacity(values.len());
    let mut date_queries: Vec<Box<dyn Query>> = Vec::new();
    for value in values {
        let exact = values::exact(ctx, &field, value).map_err(|reason| ctx.value_error(&reason))?;
        match values::term_of(ctx, &field, &exact) {
            Some(term) => terms.push(term),
            None => date_queries.push(values::exact_query(ctx, &field, &exact)),
        }
    }
    if !terms.is_empty() {
        date_queries.push(Box::new(TermSetQuery::new(terms)));
    }
    Ok(super::any_of(date_queries))
}

/// One end of a range: the value and whether it is included.
type RangeEnd<'a> = Option<(&'a Value, bool)>;

/// `range`: documents whose field lies between the bounds.
pub(super) fn range(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let (name, spec) = single_field("range", body)?;
    let obj = spec.as_object().ok_or_else(|| {
        EngineError::parsing(format!(
            "[range] query malformed, no start_object after field name [{name}]"
        ))
    })?;
    // OpenSearch reads the keys in order: gt/gte/from set the lower end, lt/lte/to the upper
    // one, and include_lower/include_upper change whether an end is included.
    let (mut from, mut include_lower) = (None::<&Value>, true);
    let (mut to, mut include_upper) = (None::<&Value>, true);
    let mut format = None;
    for (key, value) in obj {
        let non_null = (!value.is_null()).then_some(value);
        match key.as_str() {
            "from" => from = non_null,
            "gt" => (from, include_lower) = (non_null, false),
            "gte" => (from, include_lower) = (non_null, true),
            "to" => to = non_null,
            "lt" => (to, include_upper) = (non_null, false),
            "lte" => (to, include_upper) = (non_null, true),
            "include_lower" => include_lower = bool_param("range", key, value)?,
            "include_upper" => include_upper = bool_param("range", key, value)?,
            "time_zone" => check_utc("range", &text_param("range", key, value)?)?,
            "format" => format = Some(text_param("range", key, value)?),
            "boost" | "relation" | "_name" => {}
            other => return Err(unsupported_param("range", other)),
        }
    }
    let boost = boost_param("range", obj)?;
    let lower = from.map(|v| (v, include_lower));
    let upper = to.map(|v| (v, include_upper));
    let field = ctx.mapping.resolve(name).map(|mut field| {
        // The query's `format` reads its bounds instead of the field's (dates only).
        if let Some(fmt) = &format
            && field.ty == FieldType::Date
        {
            field.date_format = DateFormat::parse(fmt).ok_or_else(|| {
                EngineError::illegal_argument(format!(
                    "Invalid format: [{fmt}]; sluice supports strict_date_optional_time, \
                     date_optional_time, epoch_millis and epoch_second, joined with ||"
                ))
            })?;
        }
        Ok::<_, EngineError>(field)
    });
    let query = match field.transpose()? {
        None => Box::new(EmptyQuery),
        Some(field) if lower.is_none() && upper.is_none() => field_exists(ctx, &field),
        Some(field) => field_range(ctx, &field, lower, upper)?,
    };
    Ok(Box::new(ConstScoreQuery::new(query, boost)))
}

/// Rejects any time zone but UTC, the only one sluice evaluates dates in.
pub(crate) fn check_utc(what: &str, tz: &str) -> Result<()> {
    if is_utc(tz) {
        Ok(())
    } else {
        Err(EngineError::illegal_argument(format!(
            "[{what}] time_zone [{tz}] is not supported; sluice evaluates dates in UTC only \
             (use \"UTC\", \"Z\" or \"+00:00\")"
        )))
    }
}

/// Whether a `time_zone` parameter names UTC.
fn is_utc(tz: &str) -> bool {
    matches!(
        tz,
        "UTC"
            | "utc"
            | "Z"
            | "z"
            | "+00:00"
            | "-00:00"
            | "+0000"
            | "+00"
            | "Etc/UTC"
            | "GMT"
            | "UCT"
    )
}

/// The range query on a resolved field, its ends converted to the field's type.
pub(super) fn field_range(
    ctx: &QueryContext,
    field: &ResolvedField,
    lower: RangeEnd,
    upper: RangeEnd,
) -> Result<Box<dyn Query>> {
    let err = |reason: String| ctx.value_error(&reason);
    Ok(match field.ty {
        FieldType::Text | FieldType::Keyword => {
            let bound = |end: RangeEnd| -> Result<Bound<Term>> {
                Ok(match end {
                    None => Bound::Unbounded,
                    Some((v, incl)) => inclusive(
                        incl,
                        ctx.str_term(field, &values::scalar_string(v).map_err(err)?),
                    ),
                })
            };
            let (lo, hi) = (bound(lower)?, bound(upper)?);
            if field.storage == Storage::Text {
                // `_txt` is not a fast field: range over its terms, kept inside its JSON path.
                let lo = match lo {
                    Bound::Unbounded => Bound::Included(ctx.str_term(field, "")),
                    b => b,
                };
                let hi = match hi {
                    Bound::Unbounded => Bound::Included(ctx.str_term(field, TEXT_RANGE_TOP)),
                    b => b,
                };
                Box::new(InvertedIndexRangeQuery::new(lo, hi))
            } else {
                Box::new(RangeQuery::new(lo, hi))
            }
        }
        FieldType::Ip => {
            let bound = |end: RangeEnd| -> Result<Bound<Term>> {
                Ok(match end {
                    None => Bound::Unbounded,
                    Some((v, incl)) => {
                        let text = values::scalar_string(v).map_err(err)?;
                        let encoded = crate::ip::encode_text(&text).map_err(err)?;
                        inclusive(incl, ctx.str_term(field, &encoded))
                    }
                })
            };
            Box::new(RangeQuery::new(bound(lower)?, bound(upper)?))
        }
        ty if ty.is_integer() => {
            let lo = match lower {
                None => i64::MIN,
                Some((v, incl)) => match integer_end(v, incl, true).map_err(err)? {
                    Some(n) => n,
                    None => return Ok(Box::new(EmptyQuery)),
                },
            };
            let hi = match upper {
                None => i64::MAX,
                Some((v, incl)) => match integer_end(v, incl, false).map_err(err)? {
                    Some(n) => n,
                    None => return Ok(Box::new(EmptyQuery)),
                },
            };
            if lo > hi {
                return Ok(Box::new(EmptyQuery));
            }
            let term = |n: i64| {
                let mut t = ctx.path_term(field);
                t.append_type_and_fast_value(n);
                t
            };
            let lo = if lower.is_some() {
                Bound::Included(term(lo))
            } else {
                Bound::Unbounded
            };
            let hi = if upper.is_some() {
                Bound::Included(term(hi))
            } else {
                Bound::Unbounded
            };
            Box::new(RangeQuery::new(lo, hi))
        }
        ty if ty.is_float() => {
            let bound = |end: RangeEnd| -> Result<Bound<Term>> {
                Ok(match end {
                    None => Bound::Unbounded,
                    Some((v, incl)) => {
                        let mut t = ctx.path_term(field);
                        t.append_type_and_fast_value(values::parse_float(ty, v).map_err(err)?);
                        inclusive(incl, t)
                    }
                })
            };
            Box::new(RangeQuery::new(bound(lower)?, bound(upper)?))
        }
        FieldType::Date => {
            // `gt` and `lte` round up (`now/d` is the day's last millisecond), `gte` and `lt`
            // round down.
            let lo = match lower {
                None => Bound::Unbounded,
                Some((v, incl)) => inclusive(
                    incl,
                    values::date_term(
                        ctx,
                        field,
                        values::parse_date(ctx, field, v, !incl).map_err(err)?,
                    ),
                ),
            };
            let hi = match upper {
                None => Bound::Unbounded,
                Some((v, incl)) => inclusive(
                    incl,
                    values::date_term(
                        ctx,
                        field,
                        values::parse_date(ctx, field, v, incl).map_err(err)?,
                    ),
                ),
            };
            Box::new(RangeQuery::new(lo, hi))
        }
        _ => {
            // Booleans order false < true; the range is one of at most two terms.
            let lo = lower
                .map(|(v, incl)| values::parse_bool(v).map(|b| (b, incl)))
                .transpose()
                .map_err(err)?;
            let hi = upper
                .map(|(v, incl)| values::parse_bool(v).map(|b| (b, incl)))
                .transpose()
                .map_err(err)?;
            let in_range = |b: bool| {
                let b = u8::from(b);
                lo.is_none_or(|(l, incl)| {
                    if incl {
                        b >= u8::from(l)
                    } else {
                        b > u8::from(l)
                    }
                }) && hi.is_none_or(|(h, incl)| {
                    if incl {
                        b <= u8::from(h)
                    } else {
                        b < u8::from(h)
                    }
                })
            };
            let terms: Vec<Term> = [false, true]
                .into_iter()
                .filter(|b| in_range(*b))
                .filter_map(|b| values::term_of(ctx, field, &Exact::Bool(b)))
                .collect();
            if terms.is_empty() {
                Box::new(EmptyQuery)
            } else {
                Box::new(TermSetQuery::new(terms))
            }
        }
    })
}

fn inclusive(included: bool, term: Term) -> Bound<Term> {
    if included {
        Bound::Included(term)
    } else {
        Bound::Excluded(term)
    }
}

/// The inclusive integer end of a range on an integer field; `None` when no integer can satisfy
/// it (`gt` the largest long). Fractional ends round inwards: `gte 1.5` is `gte 2`.
fn integer_end(value: &Value, included: bool, is_lower: bool) -> Result<Option<i64>, String> {
    let exact = match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    if let Some(n) = exact {
        return Ok(match (is_lower, included) {
            (_, true) => Some(n),
            (true, false) => n.checked_add(1),
            (false, false) => n.checked_sub(1),
        });
    }
    let f = values::parse_float(FieldType::Double, value)?;
    let n = match (is_lower, included) {
        (true, true) => f.ceil(),
        (true, false) => f.floor() + 1.0,
        (false, true) => f.floor(),
        (false, false) => f.ceil() - 1.0,
    };
    // Saturating casts keep ends beyond the long range meaningful.
    Ok(Some(n as i64))
}

/// `exists`: documents with a value in the field (or any field under an object path).
pub(super) fn exists(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = super::object_body("exists", body, &["field", "boost", "_name"])?;
    let name = match obj.get("field") {
        Some(v) => text_param("exists", "field", v)?,
        None => {
            return Err(EngineError::parsing(
                "[exists] must be provided with a [field]",
            ));
        }
    };
    let boost = boost_param("exists", obj)?;
    Ok(Box::new(ConstScoreQuery::new(
        exists_query(ctx, &name),
        boost,
    )))
}

/// Documents with a value in `name`, which may be a pattern or an object path.
pub(super) fn exists_query(ctx: &QueryContext, name: &str) -> Box<dyn Query> {
    if name == ID_FIELD {
        return Box::new(AllQuery);
    }
    let fields = if name.contains('*') {
        ctx.mapping.expand_field_pattern(name)
    } else {
        match ctx.mapping.resolve(name) {
            Some(field) => vec![field],
            None => {
                let prefix = format!("{name}.");
                ctx.mapping
                    .leaf_fields()
                    .into_iter()
                    .filter(|f| f.path.starts_with(&prefix))
                    .collect()
            }
        }
    };
    super::any_of(fields.iter().map(|f| field_exists(ctx, f)).collect())
}

/// Documents with a value in a resolved field: a fast-field exists on `_kw`, and on `_txt` (not
/// fast) a prefix query with an empty prefix, which matches every token of the path.
fn field_exists(ctx: &QueryContext, field: &ResolvedField) -> Box<dyn Query> {
    match field.storage {
        Storage::Kw => Box::new(ExistsQuery::new(
            format!("{KW_FIELD}.{}", field.path),
            false,
        )),
        Storage::Text => Box::new(PhrasePrefixQuery::new(vec![ctx.str_term(field, "")])),
    }
}

/// `ids`: documents with one of the given `_id`s.
pub(super) fn ids(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = super::object_body("ids", body, &["values", "boost", "type", "_name"])?;
    let values = match obj.get("values") {
        Some(Value::Array(values)) => values.as_slice(),
        Some(other) => {
            return Err(EngineError::parsing(format!(
                "[ids] query malformed, [values] must be an array, got [{}]",
                super::json_kind(other)
            )));
        }
        None => &[],
    };
    Ok(Box::new(ConstScoreQuery::new(
        id_query(ctx, values),
        boost_param("ids", obj)?,
    )))
}

/// The multi-term queries that match term patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PatternKind {
    /// `prefix`: terms starting with the value.
    Prefix,
    /// `wildcard`: `*` any run of characters, `?` one character, `\` escapes.
    Wildcard,
    /// `regexp`: a regular expression over the whole term.
    Regexp,
}

impl PatternKind {
    fn name(self) -> &'static str {
        match self {
            PatternKind::Prefix => "prefix",
            PatternKind::Wildcard => "wildcard",
            PatternKind::Regexp => "regexp",
        }
    }

    fn params(self) -> &'static [&'static str] {
        match self {
            PatternKind::Prefix => &[
                "value",
                "prefix",
                "case_insensitive",
                "boost",
                "rewrite",
                "_name",
            ],
            PatternKind::Wildcard => &[
                "value",
                "wildcard",
                "case_insensitive",
                "boost",
                "rewrite",
                "_name",
            ],
            PatternKind::Regexp => &[
                "value",
                "flags",
                "flags_value",
                "case_insensitive",
                "max_determinized_states",
                "boost",
                "rewrite",
                "_name",
            ],
        }
    }
}

/// `prefix`, `wildcard` and `regexp`, in their short (`{field: "v"}`) and long forms.
pub(super) fn pattern(
    kind: PatternKind,
    body: &Value,
    ctx: &QueryContext,
) -> Result<Box<dyn Query>> {
    let query = kind.name();
    let (name, spec) = single_field(query, body)?;
    let (value, boost, case_insensitive) = match spec {
        Value::Object(obj) => {
            check_params(query, obj, kind.params())?;
            let value = ["value", "prefix", "wildcard"]
                .iter()
                .find_map(|k| obj.get(*k))
                .ok_or_else(|| {
                    EngineError::parsing(format!(
                        "[{query}] query malformed, no value specified for field [{name}]"
                    ))
                })?;
            (
                text_param(query, "value", value)?,
                boost_param(query, obj)?,
                case_insensitive_param(query, obj)?,
            )
        }
        other => (text_param(query, name, other)?, 1.0, false),
    };
    Ok(with_boost(
        pattern_query(ctx, kind, name, &value, case_insensitive)?,
        boost,
    ))
}

/// The pattern query of `kind` on field `name`; shared with `query_string` (`fo*`, `/re/`).
pub(super) fn pattern_query(
    ctx: &QueryContext,
    kind: PatternKind,
    name: &str,
    value: &str,
    case_insensitive: bool,
) -> Result<Box<dyn Query>> {
    let user_regex = match kind {
        PatternKind::Prefix => format!("{}.*", regex::escape(value)),
        PatternKind::Wildcard => wildcard_to_regex(value),
        PatternKind::Regexp => value.to_string(),
    };
    if name == ID_FIELD {
        let pattern = format!(
            "(?s{}:{user_regex})",
            if case_insensitive { "i" } else { "" }
        );
        return RegexQuery::from_pattern(&pattern, ctx.fields.id)
            .map(|q| Box::new(q) as Box<dyn Query>)
            .map_err(|e| ctx.value_error(&e.to_string()));
    }
    let Some(field) = ctx.mapping.resolve(name) else {
        return Ok(Box::new(EmptyQuery));
    };
    if !matches!(field.ty, FieldType::Text | FieldType::Keyword) {
        return Err(ctx.shard_error(format!(
            "Can only use {} queries on keyword and text fields - not on [{name}] which is of type [{}]",
            kind.name(),
            field.ty.name()
        )));
    }
    match kind {
        PatternKind::Prefix if !case_insensitive => Ok(Box::new(PhrasePrefixQuery::new(vec![
            ctx.str_term(&field, value),
        ]))),
        // Text tokens are lowercased when indexed; a wildcard on a text field is normalised
        // the same way, as OpenSearch's search analyzer does.
        PatternKind::Wildcard if field.storage == Storage::Text => regex_query(
            ctx,
            &field,
            &wildcard_to_regex(&value.to_lowercase()),
            case_insensitive,
        ),
        _ => regex_query(ctx, &field, &user_regex, case_insensitive),
    }
}

/// Translates a wildcard pattern to a regular expression: `*` and `?` become `.*` and `.`,
/// everything else (and anything escaped with `\`) matches literally.
pub(super) fn wildcard_to_regex(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut chars = pattern.chars();
    let mut buf = [0u8; 4];
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push_str(&regex::escape(next.encode_utf8(&mut buf)));
                }
            }
            c => out.push_str(&regex::escape(c.encode_utf8(&mut buf))),
        }
    }
    out
}

/// A regex query over the terms of one JSON path.
///
/// tantivy's `RegexQuery` matches whole term keys, and a JSON term's key is its path, a
/// separator, a type byte and the value; the pattern is the escaped key prefix of the path's
/// string terms followed by the user's expression.
pub(super) fn regex_query(
    ctx: &QueryContext,
    field: &ResolvedField,
    user_regex: &str,
    case_insensitive: bool,
) -> Result<Box<dyn Query>> {
    let prefix_term = ctx.str_term(field, "");
    let prefix = String::from_utf8_lossy(prefix_term.serialized_value_bytes());
    let mut pattern = String::with_capacity(prefix.len() * 4 + user_regex.len() + 8);
    for c in prefix.chars() {
        if c.is_ascii_alphanumeric() {
            pattern.push(c);
        } else {
            pattern.push_str(&format!("\\x{{{:x}}}", u32::from(c)));
        }
    }
    pattern.push_str(if case_insensitive { "(?is:" } else { "(?s:" });
    pattern.push_str(user_regex);
    pattern.push(')');
    RegexQuery::from_pattern(&pattern, ctx.storage_field(field))
        .map(|q| Box::new(q) as Box<dyn Query>)
        .map_err(|e| ctx.value_error(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_wildcard_translation_escapes_everything_but_wildcards() {
        assert_eq!(wildcard_to_regex("fo*b?r"), "fo.*b.r");
        assert_eq!(wildcard_to_regex("a.b"), "a\\.b");
        assert_eq!(wildcard_to_regex("a\\*b"), "a\\*b");
    }

    #[test]
    fn test_integer_ends_round_inwards() {
        use serde_json::json;
        assert_eq!(integer_end(&json!(1.5), true, true), Ok(Some(2)));
        assert_eq!(integer_end(&json!(1.5), false, true), Ok(Some(2)));
        assert_eq!(integer_end(&json!(2), false, true), Ok(Some(3)));
        assert_eq!(integer_end(&json!(1.5), true, false), Ok(Some(1)));
        assert_eq!(integer_end(&json!(2.0), false, false), Ok(Some(1)));
        assert_eq!(integer_end(&json!(i64::MAX), false, true), Ok(None));
        assert!(integer_end(&json!("abc"), true, true).is_err());
    }

    #[test]
    fn test_utc_spellings_are_accepted() {
        assert!(check_utc("range", "UTC").is_ok());
        assert!(check_utc("range", "+00:00").is_ok());
        assert_eq!(
            check_utc("range", "Europe/Paris").unwrap_err().code,
            crate::ErrorCode::IllegalArgument
        );
    }
}
