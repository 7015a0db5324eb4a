//! JSON as OpenSearch's parser (Jackson) names it in messages.

use serde_json::Value;

/// The name of the token a JSON value starts with, as OpenSearch's parser reports it
/// (`VALUE_STRING`, `START_OBJECT` …) in "expected … but found `[X]`" messages.
pub fn token_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "VALUE_NULL",
        Value::Bool(_) => "VALUE_BOOLEAN",
        Value::Number(_) => "VALUE_NUMBER",
        Value::String(_) => "VALUE_STRING",
        Value::Array(_) => "START_ARRAY",
        Value::Object(_) => "START_OBJECT",
    }
}

/// Where the value of the first member named `key` starts in the JSON `text`: its 1-based line
/// and column, as Jackson reports a token's location (OpenSearch's `line` and `col`).
pub fn locate_member_value(text: &str, key: &str) -> Option<(usize, usize)> {
    let quoted = format!("\"{key}\"");
    let mut from = 0;
    while let Some(found) = text[from..].find(&quoted) {
        let after = from + found + quoted.len();
        let rest = &text[after..];
        let colon = rest.len() - rest.trim_start().len();
        if rest[colon..].starts_with(':') {
            let value_rest = &rest[colon + 1..];
            let pad = value_rest.len() - value_rest.trim_start().len();
            let at = after + colon + 1 + pad;
            let before = &text[..at];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            return Some((line, col));
        }
        from = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_member_value_location_is_one_based_line_and_column() {
        assert_eq!(
            locate_member_value(r#"{"query":{"foo":{}}}"#, "foo"),
            Some((1, 17))
        );
        let text = "{\n  \"query\": {\n    \"bogus\" : 1\n  }\n}";
        assert_eq!(locate_member_value(text, "bogus"), Some((3, 15)));
        // A string value equal to the key is not a member name.
        assert_eq!(
            locate_member_value(r#"{"a":"foo","foo":2}"#, "foo"),
            Some((1, 18))
        );
        assert_eq!(locate_member_value("{}", "foo"), None);
    }

    #[test]
    fn test_token_names_are_jacksons() {
        assert_eq!(token_name(&json!(null)), "VALUE_NULL");
        assert_eq!(token_name(&json!(1.5)), "VALUE_NUMBER");
        assert_eq!(token_name(&json!("x")), "VALUE_STRING");
        assert_eq!(token_name(&json!([])), "START_ARRAY");
        assert_eq!(token_name(&json!({})), "START_OBJECT");
        assert_eq!(token_name(&json!(true)), "VALUE_BOOLEAN");
    }
}

/// Parses JSON `bytes` as OpenSearch's parser does with its strict duplicate detection (on by
/// default): an object naming a member twice is an error (`Duplicate field 'name'`, with
/// where it is), not the last value silently winning as `serde_json`'s [`Value`] would take it.
pub fn from_slice_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|s| s.0)
}

/// [`from_slice_strict`] of a string.
pub fn from_str_strict(text: &str) -> Result<Value, serde_json::Error> {
    from_slice_strict(text.as_bytes())
}

/// A [`Value`] read with duplicate members refused.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own visitor: a non-finite number is null.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if members.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("Duplicate field '{key}'")));
            }
            let Strict(v) = map.next_value()?;
            members.insert(key, v);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod strict_tests {
    use super::*;

    #[test]
    fn test_strict_parsing_refuses_a_member_named_twice_at_any_depth() {
        let e = from_str_strict(r#"{"name": "a", "name": "b"}"#).unwrap_err();
        assert!(e.to_string().starts_with("Duplicate field 'name'"), "{e}");
        assert_eq!((e.line(), e.column()), (1, 20), "{e}");
        let e = from_str_strict("{\"q\": {\"bool\": {\"must\": [], \"must\": []}}}").unwrap_err();
        assert!(e.to_string().contains("Duplicate field 'must'"), "{e}");
        let e = from_str_strict(r#"[{"a": 1}, {"b": 1, "b": 2}]"#).unwrap_err();
        assert!(e.to_string().contains("Duplicate field 'b'"), "{e}");
    }

    #[test]
    fn test_strict_parsing_reads_what_serde_json_reads() {
        let text = r#"{"s": "x\u00e9", "i": -3, "u": 18446744073709551615, "f": 1.5e3,
                       "b": true, "n": null, "a": [1, [2, {"k": []}]], "o": {}, "same": {"same": 1}}"#;
        assert_eq!(
            from_str_strict(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        // Key order is kept, as with serde_json's preserve_order.
        let v = from_str_strict(r#"{"z": 1, "a": 2}"#).unwrap();
        assert_eq!(
            v.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["z", "a"]
        );
        assert!(from_str_strict("{").is_err());
        assert!(from_str_strict("[1,]").is_err());
    }
}
