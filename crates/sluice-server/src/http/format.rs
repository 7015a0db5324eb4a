//! `?format=yaml` and `Accept: application/yaml`: the answers sluice builds as JSON rendered as
//! YAML when the request asks, as OpenSearch renders every answer of its REST layer in the
//! content type the request names (`AbstractRestChannel`): the `format` parameter when there is
//! one, else the `Accept` header; a value naming no type it knows leaves JSON. Errors are
//! rendered too (OpenSearch builds them with the same channel), `_cat` tables answer their rows
//! as a YAML list (they build them as for `format=json`, [`crate::api::cat::wants_json`]).
//!
//! One place for the general path: the node's outermost layer ([`crate::server`]); the fast
//! lane renders its own answers (errors, rejections) by the same rule (L1). Answers relayed
//! from a gateway's upstream ([`Relayed`](crate::http::pretty::Relayed)) are left as the
//! upstream wrote them: it was sent the same `format` and renders them itself; an upstream
//! answer the gateway reads to build its own (an `_msearch` merged, settings joined) it reads
//! in either type ([`parse_answer`]).
//!
//! The binary types OpenSearch also writes (`cbor`, `smile`) are not: such a request is
//! answered JSON, as one naming a format OpenSearch does not know (docs/compatibility.md).

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use serde_json::Value;

/// The `Content-Type` of a YAML answer, as OpenSearch's `XContentType.YAML` names it.
pub const YAML: &str = "application/yaml";

/// Whether a request asks for YAML: its last `format` parameter names it (`yaml`, or the media
/// type), or, with no `format` parameter at all, its `Accept` header does (`accept`; one media
/// type, parameters allowed, as OpenSearch parses the header whole: a list of types is not
/// read as YAML). A scan of the query with no allocation, as
/// [`crate::http::pretty::wants_pretty`].
pub fn wants_yaml(query: Option<&str>, accept: Option<&str>) -> bool {
    match format_param(query) {
        Some(format) => names_yaml(format),
        None => accept.is_some_and(names_yaml),
    }
}

/// A request's `Accept` header, for [`wants_yaml`].
pub fn accept(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())
}

/// The value of the query's last `format` parameter (empty when it has none), undecoded: the
/// names it is compared with need no escapes.
fn format_param(query: Option<&str>) -> Option<&str> {
    let query = query?;
    if !query.contains("format") {
        return None;
    }
    query
        .split('&')
        .filter_map(|pair| match pair.split_once('=') {
            None => (pair == "format").then_some(""),
            Some((key, value)) => (key == "format").then_some(value),
        })
        .next_back()
}

/// Whether `value` (a `format` parameter or an `Accept` header) names YAML: `yaml` or
/// `application/yaml`, in any case, a media type's parameters ignored.
fn names_yaml(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("yaml") || essence.eq_ignore_ascii_case(YAML)
}

/// `value` rendered as OpenSearch renders a YAML answer (Jackson's YAML writer with its
/// defaults): a document start (`---`), block style indented by two, a list's items at its
/// key's indentation, every string double-quoted, keys plain where they read back as the same
/// string. Quoting every string, as Jackson does, keeps a YAML 1.1 reader (PyYAML, the most
/// used) from reading `13:49:30` as a number or `yes` as a boolean.
pub fn yaml_of(value: &Value) -> Vec<u8> {
    let mut out = String::from("---");
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(map, 0, false, &mut out);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_list(items, 0, false, &mut out);
        }
        scalar => {
            out.push(' ');
            write_flow(scalar, &mut out);
            out.push('\n');
        }
    }
    out.into_bytes()
}

/// A mapping's entries at `indent`; the first on the current line when `inline` (an item of a
/// list, after its `- `).
fn write_map(map: &serde_json::Map<String, Value>, indent: usize, inline: bool, out: &mut String) {
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 || !inline {
            push_indent(indent, out);
        }
        write_key(key, out);
        out.push(':');
        match value {
            Value::Object(inner) if !inner.is_empty() => {
                out.push('\n');
                write_map(inner, indent + 2, false, out);
            }
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                write_list(items, indent, false, out);
            }
            scalar => {
                out.push(' ');
                write_flow(scalar, out);
                out.push('\n');
            }
        }
    }
}

/// A list's items at `indent`, each after `- `; the first on the current line when `inline` (an
/// item of a list itself).
fn write_list(items: &[Value], indent: usize, inline: bool, out: &mut String) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 || !inline {
            push_indent(indent, out);
        }
        out.push_str("- ");
        match item {
            Value::Object(inner) if !inner.is_empty() => write_map(inner, indent + 2, true, out),
            Value::Array(inner) if !inner.is_empty() => write_list(inner, indent + 2, true, out),
            scalar => {
                write_flow(scalar, out);
                out.push('\n');
            }
        }
    }
}

fn push_indent(indent: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A scalar, or an empty mapping or list, on one line.
fn write_flow(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_quoted(s, out),
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
    }
}

/// A number as JSON writes it, a float's in the form YAML 1.1 reads as a float too: with a
/// fraction and a signed exponent (`1e-7` is a string to PyYAML, `1.0e-7` a float).
fn write_number(n: &serde_json::Number, out: &mut String) {
    let text = n.to_string();
    if !n.is_f64() {
        out.push_str(&text);
        return;
    }
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (text.as_str(), None),
    };
    out.push_str(mantissa);
    if !mantissa.contains('.') {
        out.push_str(".0");
    }
    if let Some(e) = exponent {
        out.push('e');
        if !e.starts_with(['-', '+']) {
            out.push('+');
        }
        out.push_str(e);
    }
}

/// A key plain when it is a name that reads back as that string in YAML 1.1 and 1.2 (letters,
/// digits, `_`, `.`, `-`, not starting with a digit, `.` or `-`, and no word YAML reads as
/// something else), else double-quoted.
fn write_key(key: &str, out: &mut String) {
    // The words YAML 1.1 readers (PyYAML, SnakeYAML) resolve to booleans or null.
    const WORDS: [&str; 7] = ["true", "false", "yes", "no", "on", "off", "null"];
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !WORDS.iter().any(|w| key.eq_ignore_ascii_case(w));
    if plain {
        out.push_str(key);
    } else {
        write_quoted(key, out);
    }
}

/// A double-quoted scalar: `"` and `\` escaped, and every character YAML does not print as
/// itself (controls, line and paragraph separators, the byte-order mark, non-characters).
fn write_quoted(s: &str, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            ' '..='~' => out.push(c),
            '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..
                if !matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}') =>
            {
                out.push(c);
            }
            c if (c as u32) <= 0xffff => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08X}", c as u32);
            }
        }
    }
    out.push('"');
}

/// `resp` rendered as YAML when it is an answer sluice built as JSON
/// ([`crate::http::pretty::is_own_json`]); any other answer (text, relayed, empty) as it is.
/// Such an answer was built whole in memory.
pub async fn yaml_answer(resp: Response) -> Response {
    if !crate::http::pretty::is_own_json(&resp) {
        return resp;
    }
    crate::http::pretty::rerender(resp, Some(HeaderValue::from_static(YAML)), yaml_body).await
}

/// `body` (JSON) rendered as YAML; `None` when it is not JSON (a `HEAD` answer's empty body).
pub fn yaml_body(body: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    Some(yaml_of(&value))
}

/// An upstream answer read by the gateway, in the type its `Content-Type` names: YAML when the
/// client asked for YAML (the upstream was sent the same `format`), else JSON.
pub fn parse_answer(content_type: Option<&HeaderValue>, body: &[u8]) -> Result<Value, String> {
    let yaml = content_type
        .and_then(|t| t.to_str().ok())
        .is_some_and(names_yaml);
    if yaml {
        serde_yaml_ng::from_slice(body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_format_parameter_comes_before_the_accept_header() {
        let yaml = Some("application/yaml");
        assert!(wants_yaml(Some("format=yaml"), None));
        assert!(wants_yaml(Some("a=1&format=YAML&b"), None));
        assert!(wants_yaml(Some("format=application/yaml"), None));
        assert!(wants_yaml(None, yaml));
        assert!(wants_yaml(Some("pretty"), Some("Application/YAML; q=1")));
        // The last `format` counts; any `format`, even one naming nothing, hides the header.
        assert!(!wants_yaml(Some("format=yaml&format=json"), None));
        assert!(!wants_yaml(Some("format=json"), yaml));
        assert!(!wants_yaml(Some("format=txt"), yaml));
        assert!(!wants_yaml(Some("format"), yaml));
        // Names that only contain the word, and lists of types, are not YAML.
        assert!(!wants_yaml(Some("formats=yaml&xformat=yaml"), None));
        assert!(!wants_yaml(None, Some("application/yaml, */*")));
        assert!(!wants_yaml(None, Some("application/json")));
        assert!(!wants_yaml(Some("format=cbor"), None));
    }

    #[test]
    fn the_accept_header_is_read_from_the_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(accept(&h), None);
        h.insert(header::ACCEPT, HeaderValue::from_static("application/yaml"));
        assert_eq!(accept(&h), Some("application/yaml"));
    }

    #[test]
    fn a_document_is_written_as_jacksons_yaml_writer_writes_it() {
        let v = json!({
            "cluster_name": "sluice", "timed_out": false, "n": 3, "pct": 100.0, "none": null,
            "nodes": [{"name": "a", "roles": ["data", "ingest"]}, {"name": "b", "roles": []}],
            "grid": [[1, 2], []], "empty": {}, "deep": {"a": {"b": 1}}
        });
        let text = String::from_utf8(yaml_of(&v)).unwrap();
        let expected = "---\n\
            cluster_name: \"sluice\"\n\
            timed_out: false\n\
            n: 3\n\
            pct: 100.0\n\
            none: null\n\
            nodes:\n\
            - name: \"a\"\n  roles:\n  - \"data\"\n  - \"ingest\"\n\
            - name: \"b\"\n  roles: []\n\
            grid:\n\
            - - 1\n  - 2\n\
            - []\n\
            empty: {}\n\
            deep:\n  a:\n    b: 1\n";
        assert_eq!(text, expected);
        assert_eq!(String::from_utf8(yaml_of(&json!([]))).unwrap(), "--- []\n");
        assert_eq!(
            String::from_utf8(yaml_of(&json!("x"))).unwrap(),
            "--- \"x\"\n"
        );
        assert_eq!(
            String::from_utf8(yaml_of(&json!([{"a": 1}]))).unwrap(),
            "---\n- a: 1\n"
        );
    }

    #[test]
    fn a_document_reads_back_as_the_json_it_was_rendered_from() {
        let v = json!({
            "cluster_name": "sluice", "status": "green", "timed_out": false,
            "number": 3, "ratio": 100.0, "neg": -1, "big": u64::MAX, "none": null,
            "small": 1e-7, "large": 1e21, "half": -0.5,
            "looks_like_a_number": "1796391698", "looks_like_a_bool": "true", "empty": "",
            "time": "13:49:30", "yes": "no", "colon": "a: b", "hash": "# not a comment",
            "multi": "line one\nline two\r\ttab", "quote": "say \"hi\" \\ back",
            "controls": "\u{1}\u{7f}\u{85}\u{2028}\u{2029}\u{feff}\u{fffe}", "emoji": "snow ☃ 🦀",
            "list": [1, "two", {"x": []}, [[]], [{"a": {"b": [1]}}]],
            "nested": {"a": {}, "b": [[1, 2], []]}, "": "empty key", "node.total": "1",
            "1st": 1, "a b": 2, "a:b": 3, "-x": 4, "Yes": 5, "null": 6, "k\"q": 7, "n": 8
        });
        let yaml = yaml_of(&v);
        let text = std::str::from_utf8(&yaml).unwrap();
        let back: Value = serde_yaml_ng::from_slice(&yaml).unwrap();
        assert_eq!(back, v, "{text}");
        // The order of the keys is kept; floats carry a fraction and a signed exponent.
        assert!(text.find("cluster_name").unwrap() < text.find("status").unwrap());
        assert!(text.contains("\nsmall: 1.0e-7\n"), "{text}");
        assert!(text.contains("\nlarge: 1.0e+21\n"), "{text}");
        assert!(text.contains("\n\"Yes\": 5\n"), "{text}");
    }

    #[test]
    fn an_answer_is_parsed_in_the_type_its_content_type_names() {
        let yaml = HeaderValue::from_static("application/yaml");
        let json = HeaderValue::from_static("application/json; charset=UTF-8");
        let v = json!({"responses": [{"status": 200}]});
        assert_eq!(parse_answer(Some(&yaml), &yaml_of(&v)).unwrap(), v);
        assert_eq!(
            parse_answer(Some(&json), v.to_string().as_bytes()).unwrap(),
            v
        );
        assert_eq!(parse_answer(None, v.to_string().as_bytes()).unwrap(), v);
        assert!(parse_answer(Some(&json), b"---\na: 1\n").is_err());
    }

    #[test]
    fn a_body_that_is_not_json_is_not_rendered() {
        assert_eq!(yaml_body(b""), None);
        assert_eq!(yaml_body(b"plain text"), None);
        assert_eq!(yaml_body(b"[]").unwrap(), b"--- []\n");
    }
}
