//! What cluster settings and index settings share: reading a settings object whose keys may be
//! nested or dotted, and reading a boolean URL parameter.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::{EngineError, Result};

/// Flattens a settings object (nested objects and dotted keys alike) into dotted keys and
/// their values; `null` becomes `None` (a reset). Values are kept as OpenSearch keeps them:
/// strings as they are, numbers and booleans as their text. A key given twice (once nested,
/// once dotted) is refused, as OpenSearch refuses it.
pub fn flatten_settings(
    object: &Map<String, Value>,
) -> std::result::Result<Vec<(String, Option<String>)>, String> {
    flatten_settings_as(object, |key| key)
}

/// [`flatten_settings`], with each flat key passed through `key_of` before duplicates are
/// looked for (index settings take `max_result_window` for `index.max_result_window`).
pub fn flatten_settings_as(
    object: &Map<String, Value>,
    key_of: impl Fn(String) -> String,
) -> std::result::Result<Vec<(String, Option<String>)>, String> {
    fn walk(
        prefix: &str,
        object: &Map<String, Value>,
        key_of: &dyn Fn(String) -> String,
        out: &mut Vec<(String, Option<String>)>,
        seen: &mut HashMap<String, Option<String>>,
    ) -> std::result::Result<(), String> {
        for (k, v) in object {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            let value = match v {
                Value::Object(inner) => {
                    walk(&key, inner, key_of, out, seen)?;
                    continue;
                }
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Array(_) => {
                    return Err(format!(
                        "setting [{key}] takes a single value, got the array {v}"
                    ));
                }
            };
            let key = key_of(key);
            if let Some(previous) = seen.insert(key.clone(), value.clone()) {
                let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "null".to_string());
                return Err(format!(
                    "duplicate settings key [{key}] found, previous value [{}], current value [{}]",
                    show(&previous),
                    show(&value)
                ));
            }
            out.push((key, value));
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk("", object, &key_of, &mut out, &mut HashMap::new())?;
    Ok(out)
}

/// A boolean URL parameter as OpenSearch reads one: absent is false, empty or `true` is true,
/// `false` is false, anything else is a 400.
pub fn bool_param(params: &HashMap<String, String>, key: &str) -> Result<bool> {
    match params.get(key).map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("" | "true") => Ok(true),
        Some(other) => Err(EngineError::illegal_argument(format!(
            "Failed to parse value [{other}] as only [true] or [false] are allowed."
        ))),
    }
}
