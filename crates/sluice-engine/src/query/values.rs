//! Query values converted to the type of the field they are compared with.
//!
//! Conversions return `Err(reason)` in OpenSearch's words (`For input string: "abc"`) so that each
//! query decides whether a bad value is an error or, with `lenient`, no match.

use std::ops::Bound;

use serde_json::Value;
use tantivy::columnar::NumericalValue;
use tantivy::query::{Query, RangeQuery, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{DateTime, Term};

use super::QueryContext;
use crate::date::{self, DateFormat};
use crate::mapping::{FieldType, ResolvedField, Storage};

/// Milliseconds in a day, for rounding date-only values up to the day's last millisecond.
const DAY_MILLIS: i64 = 86_400_000;

/// A query value converted to a field's type.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Exact {
    /// A keyword or a raw text term.
    Str(String),
    /// An integer.
    I64(i64),
    /// A float.
    F64(f64),
    /// A boolean.
    Bool(bool),
    /// A date, as the inclusive millisecond range it names: `2024-01-01` as a term covers the
    /// whole day, as OpenSearch's date `term` query does (it is a range from the value rounded
    /// down to the value rounded up).
    Date { from: i64, to: i64 },
    /// The addresses of a CIDR block on an `ip` field, as the inclusive range of their
    /// [encodings](crate::ip).
    IpBlock { from: String, to: String },
}

/// Converts `value` to the type of `field`.
pub(super) fn exact(
    ctx: &QueryContext,
    field: &ResolvedField,
    value: &Value,
) -> Result<Exact, String> {
    match field.ty {
        FieldType::Text | FieldType::Keyword => scalar_string(value).map(Exact::Str),
        ty if ty.is_integer() => parse_integer(ty, value).map(Exact::I64),
        ty if ty.is_float() => parse_float(ty, value).map(Exact::F64),
        FieldType::Date => Ok(Exact::Date {
            from: parse_date(ctx, field, value, false)?,
            to: parse_date(ctx, field, value, true)?,
        }),
        FieldType::Ip => {
            let text = scalar_string(value)?;
            match crate::ip::cidr_bounds(&text) {
                Some(block) => block.map(|(from, to)| Exact::IpBlock { from, to }),
                None => crate::ip::encode_text(&text).map(Exact::Str),
            }
        }
        _ => parse_bool(value).map(Exact::Bool),
    }
}

/// The text of a scalar JSON value, as a keyword field indexes it.
pub(super) fn scalar_string(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(format!("Can't parse [{other}] as a term value")),
    }
}

fn for_input(text: &str) -> String {
    format!("For input string: \"{text}\"")
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parses an integer value for a field of integer type `ty`, as OpenSearch's `NumberFieldMapper`
/// does: numbers and numeric strings, no decimal part, within the type's bounds.
pub(super) fn parse_integer(ty: FieldType, value: &Value) -> Result<i64, String> {
    let text = value_text(value);
    let whole = |f: f64| -> Result<i64, String> {
        if f.fract() != 0.0 {
            Err(format!("Value [{text}] has a decimal part"))
        } else if f < i64::MIN as f64 || f >= i64::MAX as f64 {
            Err(format!("Value [{text}] is out of range for a long"))
        } else {
            Ok(f as i64)
        }
    };
    let n = match value {
        Value::Number(n) => match n.as_i64() {
            Some(i) => i,
            None => whole(n.as_f64().unwrap_or(f64::NAN))?,
        },
        Value::String(s) => match s.trim().parse::<i64>() {
            Ok(i) => i,
            Err(_) => match s.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => whole(f)?,
                _ => return Err(for_input(s)),
            },
        },
        _ => return Err(for_input(&text)),
    };
    let (lo, hi, name) = match ty {
        FieldType::Integer => (i64::from(i32::MIN), i64::from(i32::MAX), "an integer"),
        FieldType::Short => (i64::from(i16::MIN), i64::from(i16::MAX), "a short"),
        FieldType::Byte => (i64::from(i8::MIN), i64::from(i8::MAX), "a byte"),
        _ => (i64::MIN, i64::MAX, "a long"),
    };
    if n < lo || n > hi {
        return Err(format!("Value [{text}] is out of range for {name}"));
    }
    Ok(n)
}

/// Parses a float value for a field of float type `ty`; a `float` field's values are rounded to
/// 32 bits, as they were when indexed.
pub(super) fn parse_float(ty: FieldType, value: &Value) -> Result<f64, String> {
    let f = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let f = f
        .filter(|f| f.is_finite())
        .ok_or_else(|| for_input(&value_text(value)))?;
    Ok(if ty == FieldType::Float {
        f64::from(f as f32)
    } else {
        f
    })
}

/// Parses a boolean value: `true`, `false` or their strings.
pub(super) fn parse_bool(value: &Value) -> Result<bool, String> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" => Ok(true),
        Value::String(s) if s == "false" => Ok(false),
        other => Err(format!(
            "Failed to parse value [{}] as only [true] or [false] are allowed.",
            value_text(other)
        )),
    }
}

/// Parses a date value in the field's format (its mapping's `format`, or the range query's):
/// an epoch number, a date-time, or date math.
///
/// With `round_up`, `/unit` rounding goes to the unit's last millisecond and missing time fields
/// are filled with their maximum (`2024-01-31` is `2024-01-31T23:59:59.999Z`, a whole
/// `epoch_second` ends at its 999th millisecond), as OpenSearch does for the `gt` and `lte`
/// ends of a range.
pub(super) fn parse_date(
    ctx: &QueryContext,
    field: &ResolvedField,
    value: &Value,
    round_up: bool,
) -> Result<i64, String> {
    let format = &field.date_format;
    match value {
        Value::Number(n) => format
            .parse_value_rounding(value, round_up)
            .ok_or_else(|| for_input(&n.to_string())),
        Value::String(s) => date_bound(s, ctx.now_millis, round_up, format),
        other => Err(date::bad_date(&other.to_string(), format)),
    }
}

/// Evaluates a date expression in `format`, rounding a partial anchor date up when asked.
pub(super) fn date_bound(
    expr: &str,
    now_millis: i64,
    round_up: bool,
    format: &DateFormat,
) -> Result<i64, String> {
    let expr = expr.trim();
    if round_up && !expr.starts_with("now") {
        let (anchor, ops) = match expr.find("||") {
            Some(pos) => (&expr[..pos], Some(&expr[pos + 2..])),
            None => (expr, None),
        };
        if let Some(ms) = round_up_partial(anchor, format) {
            return match ops {
                None => Ok(ms),
                // The anchor is epoch milliseconds now, whatever the field's format.
                Some(ops) => date::parse_date_math_in(
                    &format!("{ms}||{ops}"),
                    now_millis,
                    true,
                    &DateFormat::DEFAULT,
                ),
            };
        }
    }
    date::parse_date_math_in(expr, now_millis, round_up, format)
}

/// The last millisecond a partial date names: missing time fields take their maximum, as
/// OpenSearch's round-up date parser fills them (month and day are not rounded: `2024-01` is
/// `2024-01-01T23:59:59.999Z`). `None` if `anchor` is not a date in `format`.
fn round_up_partial(anchor: &str, format: &DateFormat) -> Option<i64> {
    if format.reads_as_epoch(anchor) {
        // Epoch milliseconds are exact; a whole epoch second ends at its last millisecond.
        return format.parse_str_rounding(anchor, true);
    }
    let ms = format.parse_str(anchor)?;
    let Some(t) = anchor.find(['T', 't']) else {
        // A date without time ends at the day's last millisecond.
        return Some(ms + DAY_MILLIS - 1);
    };
    let time = &anchor[t + 1..];
    let time = &time[..time.find(['Z', 'z', '+', '-']).unwrap_or(time.len())];
    let extra = match time.len() {
        2 => 3_600_000 - 1,
        5 => 60_000 - 1,
        8 => 999,
        _ => 0,
    };
    Some(ms + extra)
}

/// The postings detail term queries read: frequencies for scoring on `_txt`, none on `_kw`.
pub(super) fn record_option(field: &ResolvedField) -> IndexRecordOption {
    match field.storage {
        Storage::Text => IndexRecordOption::WithFreqs,
        Storage::Kw => IndexRecordOption::Basic,
    }
}

/// The indexed term of a value; `None` for dates and CIDR blocks, which are searched as ranges.
pub(super) fn term_of(ctx: &QueryContext, field: &ResolvedField, value: &Exact) -> Option<Term> {
    let mut term = ctx.path_term(field);
    match value {
        Exact::Str(s) => term.append_type_and_str(s),
        Exact::I64(i) => term.append_type_and_fast_value(*i),
        // The inverted index holds JSON numbers in canonical form (an integral f64 as i64), so
        // the query term must be normalised the same way.
        Exact::F64(f) => match NumericalValue::F64(*f).normalize() {
            NumericalValue::I64(i) => term.append_type_and_fast_value(i),
            NumericalValue::U64(u) => term.append_type_and_fast_value(u),
            NumericalValue::F64(f) => term.append_type_and_fast_value(f),
        },
        Exact::Bool(b) => term.append_type_and_fast_value(*b),
        Exact::Date { .. } | Exact::IpBlock { .. } => return None,
    }
    Some(term)
}

/// A date term on a field's JSON path, for fast-field range queries. A bound beyond the dates
/// an index can hold is brought to the nearest one it can: no stored date lies beyond it.
pub(super) fn date_term(ctx: &QueryContext, field: &ResolvedField, millis: i64) -> Term {
    let mut term = ctx.path_term(field);
    let millis = millis.clamp(
        *crate::date::STORABLE_MILLIS.start(),
        *crate::date::STORABLE_MILLIS.end(),
    );
    term.append_type_and_fast_value(DateTime::from_timestamp_millis(millis));
    term
}

/// The query matching documents whose field equals `value`.
pub(super) fn exact_query(
    ctx: &QueryContext,
    field: &ResolvedField,
    value: &Exact,
) -> Box<dyn Query> {
    match value {
        Exact::Date { from, to } => Box::new(RangeQuery::new(
            Bound::Included(date_term(ctx, field, *from)),
            Bound::Included(date_term(ctx, field, *to)),
        )),
        Exact::IpBlock { from, to } => Box::new(RangeQuery::new(
            Bound::Included(ctx.str_term(field, from)),
            Bound::Included(ctx.str_term(field, to)),
        )),
        other => match term_of(ctx, field, other) {
            Some(term) => Box::new(TermQuery::new(term, record_option(field))),
            None => Box::new(tantivy::query::EmptyQuery),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_integer_parsing_reports_opensearch_reasons() {
        assert_eq!(parse_integer(FieldType::Long, &json!("42")), Ok(42));
        assert_eq!(parse_integer(FieldType::Long, &json!(5.0)), Ok(5));
        assert_eq!(
            parse_integer(FieldType::Long, &json!("abc")),
            Err("For input string: \"abc\"".to_string())
        );
        assert_eq!(
            parse_integer(FieldType::Long, &json!(5.5)),
            Err("Value [5.5] has a decimal part".to_string())
        );
        assert_eq!(
            parse_integer(FieldType::Integer, &json!(3_000_000_000u64)),
            Err("Value [3000000000] is out of range for an integer".to_string())
        );
    }

    #[test]
    fn test_float_field_values_round_to_f32() {
        assert_eq!(
            parse_float(FieldType::Float, &json!(1.1)),
            Ok(f64::from(1.1f32))
        );
        assert_eq!(parse_float(FieldType::Double, &json!("1.1")), Ok(1.1));
        assert!(parse_float(FieldType::Double, &json!("x")).is_err());
    }

    #[test]
    fn test_round_up_fills_missing_time_fields() {
        let day = date::parse_date_str("2024-01-31").unwrap();
        assert_eq!(
            date_bound("2024-01-31", 0, true, &DateFormat::DEFAULT),
            Ok(day + DAY_MILLIS - 1)
        );
        assert_eq!(
            date_bound("2024-01-31", 0, false, &DateFormat::DEFAULT),
            Ok(day)
        );
        assert_eq!(
            date_bound("2024-01-31T10", 0, true, &DateFormat::DEFAULT),
            Ok(day + 11 * 3_600_000 - 1)
        );
        assert_eq!(
            date_bound("2024-01-31T10:00:00Z", 0, true, &DateFormat::DEFAULT),
            Ok(day + 10 * 3_600_000 + 999)
        );
        assert_eq!(
            date_bound("2024-01-31T10:00:00.000Z", 0, true, &DateFormat::DEFAULT),
            Ok(day + 10 * 3_600_000)
        );
        assert_eq!(date_bound("1000", 0, true, &DateFormat::DEFAULT), Ok(1000));
        let feb = date::parse_date_str("2024-02-29").unwrap();
        assert_eq!(
            date_bound("2024-01-31||+1M", 0, false, &DateFormat::DEFAULT),
            Ok(feb)
        );
        assert_eq!(
            date_bound("2024-01-31||+1M/d", 0, true, &DateFormat::DEFAULT),
            Ok(feb + DAY_MILLIS - 1)
        );
    }
}
