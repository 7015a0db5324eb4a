//! `highlight`: the query's terms marked in each hit's text and keyword fields, as OpenSearch's
//! default (`unified`) highlighter shows them: `"highlight": {"title": ["a <em>quick</em>
//! fox"]}`.
//!
//! What is highlighted: the terms the query searches each field for (tantivy's
//! `Query::query_terms`: term, match, match_phrase, multi_match, query_string, bool…; not
//! prefix, wildcard, fuzzy or regexp, whose terms are not known before the search), found by
//! tokenizing the field's values from `_source` with the analyzer the index uses. A keyword
//! field is highlighted whole when a term equals its value. With `require_field_match: false`
//! the terms of every text field count in every highlighted field.
//!
//! Fragments (`number_of_fragments`, default 5; `fragment_size`, default 100): a value is cut
//! into sentences; each sentence holding a match is a fragment, cut to about `fragment_size`
//! characters around its first match when longer, and fragments come in the order they
//! appear (OpenSearch's `order: none`). `number_of_fragments: 0` returns each matching value
//! whole. A field without a match is left out, unless `no_match_size` asks for its start.
//! Fragment boundaries of long values may differ from OpenSearch's (its sentence iterator is
//! ICU's); short values (under `fragment_size`) come out as OpenSearch shows them.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};
use tantivy::Term;
use tantivy::query::Query;
use tantivy::tokenizer::TextAnalyzer;

use crate::error::{EngineError, Result};
use crate::mapping::{FieldType, Mapping, Storage};
use crate::schema::Fields;

/// OpenSearch's default tags around a match.
const PRE_TAG: &str = "<em>";
const POST_TAG: &str = "</em>";
/// OpenSearch's default fragment length in characters.
const FRAGMENT_SIZE: usize = 100;
/// OpenSearch's default number of fragments per field.
const NUMBER_OF_FRAGMENTS: usize = 5;

/// Options of one highlighted field (the request's top-level ones unless the field sets its
/// own).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pre_tag: String,
    post_tag: String,
    fragment_size: usize,
    number_of_fragments: usize,
    no_match_size: usize,
    require_field_match: bool,
    html: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pre_tag: PRE_TAG.to_string(),
            post_tag: POST_TAG.to_string(),
            fragment_size: FRAGMENT_SIZE,
            number_of_fragments: NUMBER_OF_FRAGMENTS,
            no_match_size: 0,
            require_field_match: true,
            html: false,
        }
    }
}

/// A request's `highlight`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HighlightSpec {
    /// Field patterns (`*` wildcards allowed) and their options, in request order.
    fields: Vec<(String, Options)>,
}

/// Keys OpenSearch's highlighter accepts that change nothing here (another highlighter type,
/// its boundary scanner, ordering by score, phrase limits…): accepted so that clients that
/// send them are not refused.
const ACCEPTED: &[&str] = &[
    "type",
    "order",
    "boundary_scanner",
    "boundary_scanner_locale",
    "boundary_chars",
    "boundary_max_scan",
    "fragmenter",
    "phrase_limit",
    "max_analyzed_offset",
    "force_source",
    "highlight_filter",
    "matched_fields",
    "fragment_offset",
    "highlight_query",
    "tags_schema",
    "options",
    "max_fragment_length",
];

fn err(reason: impl Into<String>) -> EngineError {
    EngineError::parsing(reason)
}

fn usize_of(key: &str, v: &Value) -> Result<usize> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .ok_or_else(|| {
            err(format!(
                "[highlight] [{key}] must be a non-negative integer"
            ))
        })
}

fn bool_of(key: &str, v: &Value) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
        _ => Err(err(format!("[highlight] [{key}] must be a boolean"))),
    }
}

fn tag_of(key: &str, v: &Value) -> Result<String> {
    let first = match v {
        Value::Array(a) => a.first(),
        Value::String(_) => Some(v),
        _ => None,
    };
    first
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| err(format!("[highlight] [{key}] must be an array of strings")))
}

/// Reads the options of `obj` over `base`; `top`: the `highlight` object itself (where
/// `fields` and `encoder` belong), not a field's options.
fn options(obj: &Map<String, Value>, base: &Options, top: bool) -> Result<Options> {
    let mut o = base.clone();
    for (k, v) in obj {
        match k.as_str() {
            "pre_tags" => o.pre_tag = tag_of(k, v)?,
            "post_tags" => o.post_tag = tag_of(k, v)?,
            "fragment_size" => o.fragment_size = usize_of(k, v)?,
            "number_of_fragments" => o.number_of_fragments = usize_of(k, v)?,
            "no_match_size" => o.no_match_size = usize_of(k, v)?,
            "require_field_match" => o.require_field_match = bool_of(k, v)?,
            "encoder" if top => match v.as_str() {
                Some("html") => o.html = true,
                Some("default") => o.html = false,
                _ => {
                    return Err(err(format!(
                        "[highlight] unknown encoder [{v}]: use [default] or [html]"
                    )));
                }
            },
            "fields" if top => {}
            other if ACCEPTED.contains(&other) => {}
            other => return Err(err(format!("[highlight] unknown field [{other}]"))),
        }
    }
    Ok(o)
}

/// Parses a request's `highlight` object.
pub fn parse(v: &Value) -> Result<HighlightSpec> {
    let Some(obj) = v.as_object() else {
        return Err(err("[highlight] expects an object"));
    };
    let top = options(obj, &Options::default(), true)?;
    let mut fields = Vec::new();
    let mut add = |name: &str, spec: &Value| -> Result<()> {
        let own = match spec {
            Value::Object(m) => options(m, &top, false)?,
            _ => {
                return Err(err(format!(
                    "[highlight] field [{name}] expects an object of options"
                )));
            }
        };
        fields.push((name.to_string(), own));
        Ok(())
    };
    match obj.get("fields") {
        None => {}
        Some(Value::Object(m)) => {
            for (name, spec) in m {
                add(name, spec)?;
            }
        }
        // The ordered form: `[{"title": {}}, {"body": {}}]`.
        Some(Value::Array(items)) => {
            for item in items {
                let Some(m) = item.as_object().filter(|m| m.len() == 1) else {
                    return Err(err(
                        "[highlight] [fields] entries must be objects of one field each",
                    ));
                };
                for (name, spec) in m {
                    add(name, spec)?;
                }
            }
        }
        Some(_) => return Err(err("[highlight] [fields] must be an object or an array")),
    }
    Ok(HighlightSpec { fields })
}

/// Highlights the hits of one index: the query's terms per field, read once.
pub struct Highlighter<'a> {
    spec: &'a HighlightSpec,
    mapping: &'a Mapping,
    analyzer: TextAnalyzer,
    /// Each text field's terms (`path` → tokens), and every text term under `""`.
    text_terms: HashMap<String, BTreeSet<String>>,
    /// Each keyword field's exact terms.
    kw_terms: HashMap<String, BTreeSet<String>>,
}

impl<'a> Highlighter<'a> {
    /// A highlighter of `spec` for the hits of an index searched by `query`.
    pub fn new(
        spec: &'a HighlightSpec,
        mapping: &'a Mapping,
        fields: Fields,
        index: &tantivy::Index,
        query: &dyn Query,
    ) -> Highlighter<'a> {
        let analyzer = index
            .tokenizer_for_field(fields.txt)
            .unwrap_or_else(|_| TextAnalyzer::from(tantivy::tokenizer::SimpleTokenizer::default()));
        let mut text_terms: HashMap<String, BTreeSet<String>> = HashMap::new();
        let mut kw_terms: HashMap<String, BTreeSet<String>> = HashMap::new();
        let wanted: Vec<_> = spec
            .fields
            .iter()
            .flat_map(|(pattern, _)| mapping.expand_field_pattern(pattern))
            .collect();
        let mut prefixes = Vec::new();
        for f in &wanted {
            let (field, is_text) = match (f.storage, f.ty) {
                (Storage::Text, _) => (fields.txt, true),
                (Storage::Kw, FieldType::Keyword) => (fields.kw, false),
                _ => continue,
            };
            let mut t = Term::from_field_json_path(field, &f.path, true);
            t.append_type_and_str("");
            prefixes.push((
                field,
                t.serialized_value_bytes().to_vec(),
                f.path.clone(),
                is_text,
            ));
        }
        query.query_terms(&mut |term, _| {
            let bytes = term.serialized_value_bytes();
            for (field, prefix, path, is_text) in &prefixes {
                if term.field() != *field || !bytes.starts_with(prefix) {
                    continue;
                }
                let Ok(text) = std::str::from_utf8(&bytes[prefix.len()..]) else {
                    continue;
                };
                let map = if *is_text {
                    &mut text_terms
                } else {
                    &mut kw_terms
                };
                map.entry(path.clone())
                    .or_default()
                    .insert(text.to_string());
                if *is_text {
                    map.entry(String::new())
                        .or_default()
                        .insert(text.to_string());
                }
            }
        });
        Highlighter {
            spec,
            mapping,
            analyzer,
            text_terms,
            kw_terms,
        }
    }

    /// The `highlight` object of a hit whose source is `source`; `None` when no field has
    /// anything to show.
    pub fn hit(&mut self, source: &Value) -> Option<Value> {
        let mut out = Map::new();
        for (pattern, opts) in &self.spec.fields {
            for f in self.mapping.expand_field_pattern(pattern) {
                if out.contains_key(&f.path) {
                    continue;
                }
                let mut values = Vec::new();
                super::fields::values_at(source, &f.path, &mut values);
                let values: Vec<&str> = values.iter().filter_map(|v| v.as_str()).collect();
                let fragments = match (f.storage, f.ty) {
                    (Storage::Text, _) => {
                        let key = if opts.require_field_match {
                            f.path.as_str()
                        } else {
                            ""
                        };
                        let terms = self.text_terms.get(key).cloned().unwrap_or_default();
                        self.text_fragments(&values, &terms, opts)
                    }
                    (Storage::Kw, FieldType::Keyword) => {
                        let terms = self.kw_terms.get(&f.path);
                        values
                            .iter()
                            .filter(|v| terms.is_some_and(|t| t.contains(**v)))
                            .map(|v| {
                                format!("{}{}{}", opts.pre_tag, encode(v, opts.html), opts.post_tag)
                            })
                            .collect()
                    }
                    _ => continue,
                };
                let fragments = if fragments.is_empty() {
                    no_match(&values, opts)
                } else {
                    fragments
                };
                if !fragments.is_empty() {
                    out.insert(
                        f.path.clone(),
                        Value::Array(fragments.into_iter().map(Value::String).collect()),
                    );
                }
            }
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }

    /// The fragments of a text field's `values` that hold one of `terms`.
    fn text_fragments(
        &mut self,
        values: &[&str],
        terms: &BTreeSet<String>,
        opts: &Options,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if terms.is_empty() {
            return out;
        }
        for value in values {
            let mut matches = Vec::new();
            let mut stream = self.analyzer.token_stream(value);
            while let Some(token) = stream.next() {
                if terms.contains(&token.text) {
                    matches.push(token.offset_from..token.offset_to);
                }
            }
            if matches.is_empty() {
                continue;
            }
            if opts.number_of_fragments == 0 {
                out.push(mark(value, 0..value.len(), &matches, opts));
                continue;
            }
            for span in sentences(value) {
                let inside: Vec<_> = matches
                    .iter()
                    .filter(|m| m.start >= span.start && m.end <= span.end)
                    .cloned()
                    .collect();
                let Some(first) = inside.first() else {
                    continue;
                };
                let span = bound(value, span.clone(), first.start, opts.fragment_size);
                let inside: Vec<_> = inside
                    .into_iter()
                    .filter(|m| m.start >= span.start && m.end <= span.end)
                    .collect();
                out.push(mark(value, span, &inside, opts));
                if out.len() >= opts.number_of_fragments {
                    return out;
                }
            }
        }
        out
    }
}

/// `no_match_size`: the start of the field's first value, cut at a word boundary.
fn no_match(values: &[&str], opts: &Options) -> Vec<String> {
    if opts.no_match_size == 0 {
        return Vec::new();
    }
    let Some(value) = values.first() else {
        return Vec::new();
    };
    let mut end = value
        .char_indices()
        .nth(opts.no_match_size)
        .map_or(value.len(), |(i, _)| i);
    if end < value.len() {
        // Back to the end of the last whole word.
        end = value[..end].rfind(char::is_whitespace).unwrap_or(end);
    }
    vec![encode(value[..end].trim_end(), opts.html)]
}

/// The sentences of `text`, as byte ranges (a sentence ends after `.`, `!` or `?` followed by
/// white space, or at a line break).
fn sentences(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_some_and(|(_, n)| n.is_whitespace());
        let ends = c == '\n' || (matches!(c, '.' | '!' | '?') && next_is_space);
        if ends {
            let end = i + c.len_utf8();
            out.push(start..end);
            start = end;
        }
    }
    if start < text.len() {
        out.push(start..text.len());
    }
    out
}

/// `span` cut to about `size` characters from the word boundary before `first` (the first
/// match in it), ending at a word boundary: the whole span when it is short enough.
fn bound(
    text: &str,
    span: std::ops::Range<usize>,
    first: usize,
    size: usize,
) -> std::ops::Range<usize> {
    if text[span.clone()].chars().count() <= size {
        return span;
    }
    // Start at the sentence's start when the first match lies within the size, else at the
    // start of the match's word.
    let start = if text[span.start..first].chars().count() < size / 2 {
        span.start
    } else {
        text[span.start..first]
            .rfind(char::is_whitespace)
            .map_or(span.start, |i| span.start + i + 1)
    };
    let end = text[start..span.end]
        .char_indices()
        .nth(size)
        .map_or(span.end, |(i, _)| start + i);
    let end = if end < span.end {
        text[end..span.end]
            .find(char::is_whitespace)
            .map_or(span.end, |i| end + i)
    } else {
        end
    };
    start..end
}

/// `text[span]` with each of `matches` (inside `span`) between the tags, trimmed.
fn mark(
    text: &str,
    span: std::ops::Range<usize>,
    matches: &[std::ops::Range<usize>],
    opts: &Options,
) -> String {
    let mut out = String::new();
    let mut at = span.start;
    for m in matches {
        if m.start < at {
            continue;
        }
        out.push_str(&encode(&text[at..m.start], opts.html));
        out.push_str(&opts.pre_tag);
        out.push_str(&encode(&text[m.clone()], opts.html));
        out.push_str(&opts.post_tag);
        at = m.end;
    }
    out.push_str(&encode(&text[at..span.end], opts.html));
    out.trim().to_string()
}

/// `text` as the encoder writes it: unchanged, or HTML-escaped (`encoder: html`).
fn encode(text: &str, html: bool) -> String {
    if !html {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            '/' => out.push_str("&#x2F;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_options_parse_and_unknown_keys_are_refused() {
        let spec = parse(&json!({"pre_tags": ["<b>"], "post_tags": ["</b>"],
            "fields": {"title": {"number_of_fragments": 0}, "body": {}}}))
        .unwrap();
        assert_eq!(spec.fields[0].0, "title");
        assert_eq!(spec.fields[0].1.number_of_fragments, 0);
        assert_eq!(spec.fields[0].1.pre_tag, "<b>");
        assert_eq!(spec.fields[1].1.number_of_fragments, 5);
        let ordered = parse(&json!({"fields": [{"a": {}}, {"b": {}}]})).unwrap();
        assert_eq!(ordered.fields.len(), 2);
        let e = parse(&json!({"fields": {"a": {}}, "colour": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field [colour]"), "{e}");
        assert!(parse(&json!({"fields": {"a": {"fragment_size": -1}}})).is_err());
        assert!(parse(&json!({"fields": 3})).is_err());
        assert!(parse(&json!({"type": "unified", "fields": {"a": {"type": "plain"}}})).is_ok());
    }

    #[test]
    fn test_sentences_and_bounds() {
        let text = "One fox. Two quick foxes! Three?";
        let s: Vec<&str> = sentences(text).into_iter().map(|r| &text[r]).collect();
        assert_eq!(s, ["One fox.", " Two quick foxes!", " Three?"]);
        let long = "word ".repeat(60) + "target " + &"tail ".repeat(60);
        let at = long.find("target").unwrap();
        let span = bound(&long, 0..long.len(), at, 100);
        let cut = &long[span];
        assert!(cut.starts_with("target"), "{cut}");
        assert!(cut.chars().count() <= 105, "{cut}");
    }

    #[test]
    fn test_marks_and_html_encoding() {
        let opts = Options {
            html: true,
            ..Options::default()
        };
        let text = "a <quick> fox";
        let quick = std::ops::Range { start: 3, end: 8 };
        let out = mark(text, 0..text.len(), std::slice::from_ref(&quick), &opts);
        assert_eq!(out, "a &lt;<em>quick</em>&gt; fox");
    }
}
