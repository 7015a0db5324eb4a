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
