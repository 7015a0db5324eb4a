//! The `fields` and `docvalue_fields` of a hit: the requested fields (names or wildcards over
//! the mapping) with their values read from the document and shown by type, as OpenSearch's
//! fields API and doc-value fetch show them — dates in the field's (or the request's) format,
//! numbers as numbers, keyword sub-fields from their parent's value.

use serde_json::{Map, Value};

use crate::error::{EngineError, Result};
use crate::mapping::{FieldType, Mapping, ResolvedField};

/// One requested field: a name or wildcard pattern and an optional value format.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldSpec {
    /// The field name or pattern.
    pub field: String,
    /// `format` (dates: `epoch_millis`, `epoch_second` or a date format).
    pub format: Option<String>,
}

/// Reads a `fields` / `docvalue_fields` list: strings or `{"field", "format"}` objects.
pub fn parse_specs(key: &str, v: &Value) -> Result<Vec<FieldSpec>> {
    let bad = || {
        EngineError::parsing(format!(
            "[{key}] must be an array of field names or {{\"field\": …, \"format\": …}} objects"
        ))
    };
    let items = match v {
        Value::Array(a) => a.as_slice(),
        Value::String(_) => std::slice::from_ref(v),
        _ => return Err(bad()),
    };
    items
        .iter()
        .map(|item| match item {
            Value::String(s) => Ok(FieldSpec {
                field: s.clone(),
                format: None,
            }),
            Value::Object(o) => {
                let field = o.get("field").and_then(Value::as_str).ok_or_else(bad)?;
                let format = match o.get("format") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(f)) => Some(f.clone()),
                    Some(_) => return Err(bad()),
                };
                if let Some(k) = o
                    .keys()
                    .find(|k| !matches!(k.as_str(), "field" | "format" | "include_unmapped"))
                {
                    return Err(EngineError::parsing(format!(
                        "[{key}] unknown field [{k}] in a field request"
                    )));
                }
                Ok(FieldSpec {
                    field: field.to_string(),
                    format,
                })
            }
            _ => Err(bad()),
        })
        .collect()
}

/// The values at `path` in `source` (dotted keys and nested objects alike; arrays flattened).
pub(super) fn values_at<'a>(source: &'a Value, path: &str, out: &mut Vec<&'a Value>) {
    match source {
        Value::Array(items) => {
            for item in items {
                values_at(item, path, out);
            }
        }
        Value::Object(obj) => {
            if let Some(v) = obj.get(path) {
                flatten(v, out);
            }
            for (k, v) in obj {
                if let Some(rest) = path
                    .strip_prefix(k.as_str())
                    .and_then(|r| r.strip_prefix('.'))
                {
                    values_at(v, rest, out);
                }
            }
        }
        _ => {}
    }
}

fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        Value::Null => {}
        other => out.push(other),
    }
}

/// A date as `format` shows it (`epoch_millis`, `epoch_second`, else the ISO form).
fn show_date(ms: i64, format: Option<&str>) -> Value {
    match format {
        Some("epoch_millis") => Value::String(ms.to_string()),
        Some("epoch_second") => Value::String(ms.div_euclid(1000).to_string()),
        _ => Value::String(crate::date::format_millis(ms)),
    }
}

/// One value of `field` as the fields API shows it; `None` when it does not fit the type.
fn show(field: &ResolvedField, v: &Value, format: Option<&str>) -> Option<Value> {
    match field.ty {
        FieldType::Date => field
            .date_format
            .parse_value(v)
            .map(|ms| show_date(ms, format)),
        t if t.is_integer() => crate::mapping::coerce_integer(v).map(Value::from),
        FieldType::Double | FieldType::Float => crate::mapping::coerce_float(v)
            .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)),
        FieldType::Boolean => match v {
            Value::Bool(b) => Some(Value::Bool(*b)),
            Value::String(s) if s == "true" || s == "false" => Some(Value::Bool(s == "true")),
            _ => None,
        },
        _ => match v {
            Value::String(s) => Some(Value::String(s.clone())),
            Value::Number(n) => Some(Value::String(n.to_string())),
            Value::Bool(b) => Some(Value::String(b.to_string())),
            _ => None,
        },
    }
}

/// The `fields` map of one hit for `specs`; `doc_values` refuses text fields as OpenSearch's
/// doc-value fetch does (they have no doc values).
pub fn hit_fields(
    mapping: &Mapping,
    source: &Value,
    specs: &[FieldSpec],
    doc_values: bool,
) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for spec in specs {
        for field in mapping.expand_field_pattern(&spec.field) {
            if doc_values && field.ty == FieldType::Text {
                return Err(EngineError::illegal_argument(format!(
                    "Text fields are not optimised for operations that require per-document field data like aggregations and sorting, so these operations are disabled by default. Please use a keyword field instead. Alternatively, set fielddata=true on [{}] in order to load field data by uninverting the inverted index. Note that this can use significant memory.",
                    field.path
                )));
            }
            let mut raw = Vec::new();
            values_at(source, &field.path, &mut raw);
            if raw.is_empty()
                && let Some((parent, _)) = field.path.rsplit_once('.')
                && mapping.resolve(parent).is_some()
            {
                // A multi-field (`msg.keyword`) takes its parent's value.
                values_at(source, parent, &mut raw);
            }
            let shown: Vec<Value> = raw
                .into_iter()
                .filter_map(|v| show(&field, v, spec.format.as_deref()))
                .collect();
            if !shown.is_empty() {
                out.insert(field.path.clone(), Value::Array(shown));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_fields_come_by_type_from_the_source() {
        let mapping = Mapping::parse(&json!({"properties": {
            "ts": {"type": "date"},
            "n": {"type": "long"},
            "msg": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
            "o": {"properties": {"b": {"type": "boolean"}}}
        }}))
        .unwrap();
        let source = json!({"ts": 1420070400000i64, "n": "7", "msg": "hi", "o.b": true});
        let specs = parse_specs(
            "fields",
            &json!(["n", "msg*", {"field": "ts", "format": "epoch_second"}, "o.*"]),
        )
        .unwrap();
        let f = hit_fields(&mapping, &source, &specs, false).unwrap();
        assert_eq!(f["n"], json!([7]));
        assert_eq!(f["msg"], json!(["hi"]));
        assert_eq!(f["msg.keyword"], json!(["hi"]));
        assert_eq!(f["ts"], json!(["1420070400"]));
        assert_eq!(f["o.b"], json!([true]));
        let dv = parse_specs("docvalue_fields", &json!(["msg"])).unwrap();
        assert!(hit_fields(&mapping, &source, &dv, true).is_err());
    }
}
