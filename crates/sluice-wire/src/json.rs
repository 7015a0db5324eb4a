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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
