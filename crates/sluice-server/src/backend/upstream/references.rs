//! What a forwarded search body makes the upstream read besides the indices it searches: the
//! documents and indices its queries name, found before the body is forwarded so the gateway
//! can authorize them (the upstream reads them as whoever the gateway sends it as — with
//! `backend.upstream.identity: service`, one account for every user).
//!
//! References, each read as a document (`indices:data/read/get`) unless it searches:
//! - a `terms` lookup: `{"terms": {"F": {"index": I, "id": …}}}` reads a document of `I`, one by
//!   `query` searches `I` (`indices:data/read/search`);
//! - `more_like_this`: each `like`/`unlike` (and the older `docs`) item with an `_index`;
//! - `percolate`: the document it names by `index` and `id`;
//! - `geo_shape`, `shape`, `xy_shape`: an `indexed_shape`, of its `index` or OpenSearch's
//!   default index `shapes`;
//! - a `wrapper` query: the references of the query it encodes (base64 of JSON).
//!
//! Some bodies cannot be checked this way, and [`Found::unchecked`] says why: a `wrapper` query
//! that is not base64 of JSON, and templates whose rendered query is not the template read as a
//! query — a `source` given as a string, a stored template (`id`), a mustache placeholder in an
//! object key, in the index of a reference, or any tag but a plain `{{name}}` (a section,
//! `{{{name}}}`/`{{&name}}` unescaped, a delimiter change). A plain `{{name}}` inside a string
//! value renders JSON-escaped inside that string, so an object source holding only those is
//! checked as its query with the placeholders left as they are. Templates are `_search/template`
//! and `_msearch/template` bodies, and a phrase suggester's `collate.query`.

use base64::Engine as _;
use serde_json::Value;
use sluice_core::authz::Action;

/// An index (expression) a body makes the upstream read, and the action that read is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The index expression, as the body names it.
    pub index: String,
    pub action: Action,
}

/// The references of a body, and why it cannot be checked, when it cannot.
#[derive(Debug, Default)]
pub struct Found {
    pub references: Vec<Reference>,
    /// The first reason the body's reads cannot all be known from its JSON.
    pub unchecked: Option<String>,
}

/// OpenSearch's index of an `indexed_shape` that names none (`DEFAULT_SHAPE_INDEX_NAME`).
const DEFAULT_SHAPE_INDEX: &str = "shapes";

/// The query types whose field objects may hold an `indexed_shape`.
const SHAPE_QUERIES: &[&str] = &["geo_shape", "shape", "xy_shape"];

/// The keys of a `more_like_this` query that list documents (`docs` is the older spelling).
const MLT_ITEMS: &[&str] = &["like", "unlike", "docs"];

/// The references of a search body (`_search`, `_count`, an `_msearch` item, a by-query's).
pub fn of_search(body: &Value) -> Found {
    let mut walk = Walk::default();
    walk.value(body, false);
    walk.found
}

/// The references of a template body (`_search/template`, an `_msearch/template` item): those
/// of its object `source` read as a query; a string source or a stored `id` cannot be checked.
pub fn of_template(body: &Value) -> Found {
    let mut walk = Walk::default();
    walk.template(body);
    walk.found
}

#[derive(Default)]
struct Walk {
    found: Found,
}

impl Walk {
    fn unchecked(&mut self, why: impl FnOnce() -> String) {
        if self.found.unchecked.is_none() {
            self.found.unchecked = Some(why());
        }
    }

    /// A reference to `index`; in a template (`rendered`), a placeholder in it is unchecked.
    fn reference(&mut self, index: &str, action: Action, what: &str, rendered: bool) {
        if rendered && index.contains("{{") {
            self.unchecked(|| format!("a template placeholder names the index of a [{what}]"));
            return;
        }
        self.found.references.push(Reference {
            index: index.to_string(),
            action,
        });
    }

    /// A template: `{"source": {…} | "…", "id": "…", "params": {…}}` (a `collate.query` has
    /// the same shape).
    fn template(&mut self, body: &Value) {
        let Value::Object(map) = body else {
            // A bare string is an inline source (`collate.query: "…"`).
            if body.is_string() {
                self.unchecked(|| "a template source given as a string".to_string());
            }
            return;
        };
        if map.contains_key("id") {
            self.unchecked(|| "a stored template (id)".to_string());
        }
        for key in ["source", "inline"] {
            match map.get(key) {
                Some(Value::String(_)) => {
                    self.unchecked(|| "a template source given as a string".to_string())
                }
                Some(source) => self.value(source, true),
                None => {}
            }
        }
    }

    /// Any value of a search body; `rendered` when it is (part of) a template source.
    fn value(&mut self, v: &Value, rendered: bool) {
        match v {
            Value::Object(map) => {
                for (key, value) in map {
                    if rendered && key.contains("{{") {
                        self.unchecked(|| {
                            format!("a template placeholder in the key [{key}] of its source")
                        });
                    }
                    self.keyed(key, value, rendered);
                    self.value(value, rendered);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| self.value(i, rendered)),
            Value::String(s) if rendered => {
                if let Some(tag) = non_plain_tag(s) {
                    self.unchecked(|| {
                        format!("the template tag [{tag}]: only plain {{{{name}}}} variables can be checked")
                    });
                }
            }
            _ => {}
        }
    }

    /// The references `key: value` names itself (its inner values are walked by the caller).
    fn keyed(&mut self, key: &str, value: &Value, rendered: bool) {
        let Value::Object(spec) = value else {
            return;
        };
        match key {
            "terms" => {
                for lookup in spec.values().filter_map(Value::as_object) {
                    if let Some(index) = lookup.get("index").and_then(scalar_text) {
                        let action =
                            crate::auth::authz::lookup_action(lookup.contains_key("query"));
                        self.reference(&index, action, "terms lookup", rendered);
                    }
                }
            }
            "more_like_this" => {
                let items = MLT_ITEMS.iter().filter_map(|k| spec.get(*k));
                for item in
                    items.flat_map(|v| v.as_array().map_or(std::slice::from_ref(v), Vec::as_slice))
                {
                    let index = item.get("_index").or_else(|| item.get("index"));
                    if let Some(index) = index.and_then(scalar_text) {
                        self.reference(&index, Action::Get, "more_like_this", rendered);
                    }
                }
            }
            "percolate" => {
                if let Some(index) = spec.get("index").and_then(scalar_text) {
                    self.reference(&index, Action::Get, "percolate", rendered);
                }
            }
            _ if SHAPE_QUERIES.contains(&key) => {
                for field in spec.values() {
                    if let Some(Value::Object(shape)) = field.get("indexed_shape") {
                        let index = shape.get("index").and_then(scalar_text);
                        let index = index.as_deref().unwrap_or(DEFAULT_SHAPE_INDEX);
                        self.reference(index, Action::Get, key, rendered);
                    }
                }
            }
            "wrapper" => match spec.get("query") {
                Some(Value::String(encoded)) => match decode_wrapped(encoded) {
                    Some(query) => self.value(&query, false),
                    None => self.unchecked(|| {
                        "a [wrapper] query that is not base64-encoded JSON".to_string()
                    }),
                },
                Some(_) => self.unchecked(|| "a [wrapper] query that is not a string".to_string()),
                None => {}
            },
            "collate" => {
                if let Some(query) = spec.get("query") {
                    self.template(query);
                }
            }
            _ => {}
        }
    }
}

/// The text OpenSearch's parser reads from a scalar where it wants a string (`5` is "5",
/// `true` "true"); `None` for null, an array or an object, which it refuses there.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The query a `wrapper` query encodes, when it is base64 of a JSON object (OpenSearch also
/// takes other content types there, which this gateway does not read).
fn decode_wrapped(encoded: &str) -> Option<Value> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    sluice_wire::json::from_slice_strict(&bytes)
        .ok()
        .filter(Value::is_object)
}

/// The first mustache tag of `s` that is not a plain `{{name}}` variable (which renders
/// JSON-escaped where it stands), when there is one.
fn non_plain_tag(s: &str) -> Option<&str> {
    let mut rest = s;
    while let Some(at) = rest.find("{{") {
        let tag = &rest[at..];
        // `{{{name}}}` closes with three braces; an unclosed tag runs to the end.
        let triple = tag.starts_with("{{{");
        let close = if triple { "}}}" } else { "}}" };
        let Some(end) = tag.find(close).map(|e| e + close.len()) else {
            return Some(tag);
        };
        let inner = tag[2..end - 2].trim();
        let plain = !triple
            && !inner.is_empty()
            && inner
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !plain {
            return Some(&tag[..end]);
        }
        rest = &tag[end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn indices(found: &Found) -> Vec<(&str, Action)> {
        found
            .references
            .iter()
            .map(|r| (r.index.as_str(), r.action))
            .collect()
    }

    #[test]
    fn test_every_kind_of_reference_is_found_at_any_depth() {
        let body = json!({
            "query": {"bool": {"should": [
                {"terms": {"f": {"index": "l-id", "id": "1", "path": "p"}}},
                {"terms": {"f": {"index": "l-q", "path": "p", "query":
                    {"terms": {"g": {"index": "l-nested", "id": 2, "path": "p"}}}}}},
                {"terms": {"g": ["plain", "values"]}},
                {"more_like_this": {"fields": ["t"], "like": [{"_index": "m-1", "_id": "0"}, "text"],
                    "unlike": {"_index": "m-2", "_id": "1"}}},
                {"percolate": {"field": "q", "index": "p-1", "id": "0"}},
                {"geo_shape": {"loc": {"indexed_shape": {"index": "g-1", "id": "0"}}}},
                {"shape": {"loc": {"indexed_shape": {"id": "0"}}}},
                {"percolate": {"field": "q", "index": 7, "id": "0"}},
            ]}},
            "aggs": {"a": {"filter": {"percolate": {"field": "q", "index": "p-2", "id": "1"}}}},
        });
        let found = of_search(&body);
        assert_eq!(found.unchecked, None);
        let mut got = indices(&found);
        got.sort_by_key(|r| r.0);
        assert_eq!(
            got,
            [
                ("7", Action::Get),
                ("g-1", Action::Get),
                ("l-id", Action::Get),
                ("l-nested", Action::Get),
                ("l-q", Action::Search),
                ("m-1", Action::Get),
                ("m-2", Action::Get),
                ("p-1", Action::Get),
                ("p-2", Action::Get),
                ("shapes", Action::Get),
            ]
        );
        // Text items, a percolated document given inline, plain queries: nothing.
        let plain = json!({"query": {"more_like_this": {"like": "text"}},
            "aggs": {"t": {"terms": {"field": "f", "order": {"_count": "desc"}}}},
            "post_filter": {"percolate": {"field": "q", "document": {"x": 1}}}});
        assert!(of_search(&plain).references.is_empty());
    }

    #[test]
    fn test_a_wrapper_query_is_read_or_unchecked() {
        let inner = json!({"terms": {"f": {"index": "w-1", "id": "1", "path": "p"}}});
        let encoded = base64::engine::general_purpose::STANDARD.encode(inner.to_string());
        let found = of_search(&json!({"query": {"wrapper": {"query": encoded}}}));
        assert_eq!(indices(&found), [("w-1", Action::Get)]);
        assert_eq!(found.unchecked, None);
        let found = of_search(&json!({"query": {"wrapper": {"query": "not base64!"}}}));
        assert!(found.unchecked.unwrap().contains("wrapper"));
    }

    #[test]
    fn test_templates_are_checked_as_their_query_or_unchecked() {
        let lookup =
            |index: &str| json!({"terms": {"f": {"index": index, "id": "0", "path": "p"}}});
        // An object source with plain placeholders in values: its query's references.
        let ok = json!({"source": {"query": lookup("t-1"), "size": "{{size}}",
            "post_filter": {"match": {"x": "{{ text }}"}}}, "params": {"size": 1}});
        let found = of_template(&ok);
        assert_eq!(indices(&found), [("t-1", Action::Get)]);
        assert_eq!(found.unchecked, None);
        // What cannot be checked, and says why.
        for (body, why) in [
            (json!({"source": "{\"query\": {}}"}), "as a string"),
            (json!({"id": "stored", "params": {}}), "stored template"),
            (
                json!({"source": {"query": {"{{q}}": {"f": {"index": "b"}}}}}),
                "key [{{q}}]",
            ),
            (
                json!({"source": {"query": {"terms": {"f": {"{{k}}": "b", "id": "0"}}}}}),
                "key [{{k}}]",
            ),
            (
                json!({"source": {"query": lookup("{{i}}")}}),
                "index of a [terms lookup]",
            ),
            (
                json!({"source": {"query": lookup("a-{{i}}")}}),
                "index of a [terms lookup]",
            ),
            (
                json!({"source": {"query": {"match": {"x": "{{{raw}}}"}}}}),
                "[{{{raw}}}]",
            ),
            (
                json!({"source": {"query": {"match": {"x": "{{&raw}}"}}}}),
                "[{{&raw}}]",
            ),
            (
                json!({"source": {"query": {"match": {"x": "{{#toJson}}p{{/toJson}}"}}}}),
                "[{{#toJson}}]",
            ),
            (
                json!({"source": {"query": {"match": {"x": "{{=<% %>=}}"}}}}),
                "[{{=<% %>=}}]",
            ),
            (
                json!({"source": {"query": {"match": {"x": "{{unclosed"}}}}),
                "[{{unclosed]",
            ),
        ] {
            let unchecked = of_template(&body).unchecked;
            assert!(
                unchecked.as_deref().is_some_and(|u| u.contains(why)),
                "{body}: {unchecked:?}"
            );
        }
        // A phrase suggester's collate query is a template too; in a plain search body,
        // braces are text.
        let collate = json!({"suggest": {"s": {"phrase": {"field": "t",
            "collate": {"query": {"source": {"terms": {"f": {"{{k}}": "b"}}}}}}}}});
        assert!(of_search(&collate).unchecked.is_some());
        let collate = json!({"suggest": {"s": {"phrase": {"collate": {"query": "{\"x\": 1}"}}}}});
        assert!(of_search(&collate).unchecked.is_some());
        assert_eq!(
            of_search(&json!({"query": {"match": {"{{x}}": "{{{y}}}"}}})).unchecked,
            None
        );
    }
}
