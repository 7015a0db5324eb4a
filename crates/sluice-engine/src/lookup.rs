//! Terms lookup: the values of a `terms` query fetched from documents of another index.
//!
//! Two forms, as in OpenSearch:
//!
//! - by id, `{"terms": {"FIELD": {"index": "IDX", "id": "DOC_ID", "path": "P"}}}`: the values at
//!   `path` of one document, read with a real-time get. A document get is not a search, so it
//!   does not go through the [`NestedSearchHook`] (OpenSearch does not make it a search task
//!   either); a missing document gives no values.
//! - by query (OpenSearch 3.2), `{"terms": {"FIELD": {"index": "IDX", "path": "P", "query":
//!   {..}}}}`: the values at `path` of every hit of a nested search on `IDX`. The nested search
//!   fetches at most [`MAX_CLAUSE_COUNT`] hits (less when the lookup index's
//!   `index.max_terms_count` or `index.max_result_window` is lower) and fails when more match,
//!   rather than filter on an incomplete list.
//!
//! Values at `path` may be scalars or arrays, `path` may be dotted (`a.b.c`, through objects,
//! arrays of objects and dotted keys); `null`s, missing fields and objects give nothing, and
//! the values of all documents are flattened and deduplicated in order of appearance.
//!
//! [`TermsLookups`] resolves the lookups of one request while its queries are built: each
//! distinct lookup once, however many indices the request searches, and the nested search runs
//! synchronously on the current (search pool) thread under the context the request's
//! [`NestedSearchHook`] returns, or under the request's own context when it has none; the hook
//! is called once per lookup by query, and the guard it returns is dropped as soon as the nested
//! search ends. A failed lookup fails the whole request with its own error, as OpenSearch's
//! rewrite phase does, not as a shard failure.
//!
//! [`NestedSearchHook`]: crate::search::NestedSearchHook

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode, Result};
use crate::search::{
    SearchContext, SearchRequest, SortField, SortSpec, SourceFilter, TrackTotalHits,
};

/// OpenSearch's `indices.query.max_clause_count` default. OpenSearch's lookup by query reads it
/// from the lookup index's settings, where it never is, so this is the most hits its nested
/// search fetches; sluice keeps the same bound so that a lookup that works here works there.
pub const MAX_CLAUSE_COUNT: u64 = 1024;

/// The name OpenSearch's parser gives the lookup object in its errors.
const LOOKUP: &str = "terms_lookup";

/// Where a lookup takes its documents from.
#[derive(Debug, Clone, PartialEq)]
pub enum LookupSource {
    /// One document, by id.
    Id(String),
    /// The hits of a query.
    Query(Value),
}

/// A parsed terms lookup specification.
#[derive(Debug, Clone, PartialEq)]
pub struct TermsLookup {
    /// The index (for a query, an index expression) to read from.
    pub index: String,
    /// The document or the query.
    pub source: LookupSource,
    /// The dotted path of the values in each document's `_source`.
    pub path: String,
    /// The routing value of a lookup by id: it picks no shard here (an index is one shard),
    /// but an index whose mapping requires routing refuses a lookup without it.
    pub routing: Option<String>,
}

impl TermsLookup {
    /// Parses the lookup object of a `terms` query, with OpenSearch's errors.
    ///
    /// # Errors
    ///
    /// `x_content_parse_exception` for an unknown key or a value of the wrong type, and for
    /// both or neither of `id` and `query` (caused by an `illegal_argument_exception` saying
    /// which); `illegal_argument_exception` `Required [index, path]` for a missing `index` or
    /// `path`, or for `store: true`, which sluice does not support (values come from
    /// `_source`); `routing_missing_exception` (when fetched) for a lookup by id without `routing`
    /// on an index whose mapping requires it.
    pub fn parse(spec: &Map<String, Value>) -> Result<TermsLookup> {
        let mut index = None;
        let mut id = None;
        let mut path = None;
        let mut query = None;
        let mut routing = None;
        for (key, value) in spec {
            match key.as_str() {
                "index" => index = Some(string_value(key, value, false)?),
                "id" => id = Some(string_value(key, value, true)?),
                "path" => path = Some(string_value(key, value, false)?),
                "routing" => routing = Some(string_value(key, value, true)?),
                "query" => {
                    if !value.is_object() {
                        return Err(wrong_type(key, value));
                    }
                    query = Some(value.clone());
                }
                "store" => {
                    let store = match value {
                        Value::Bool(b) => *b,
                        Value::String(s) if s == "true" || s == "false" => s == "true",
                        _ => return Err(wrong_type(key, value)),
                    };
                    if store {
                        return Err(EngineError::illegal_argument(
                            "[terms_lookup] [store] is not supported: sluice reads lookup values \
                             from _source; remove [store] or set it to false",
                        ));
                    }
                }
                _ => {
                    return Err(EngineError::new(
                        ErrorCode::XContentParse,
                        format!("[{LOOKUP}] unknown field [{key}]"),
                    ));
                }
            }
        }
        let missing: Vec<&str> = [("index", index.is_none()), ("path", path.is_none())]
            .into_iter()
            .filter_map(|(k, absent)| absent.then_some(k))
            .collect();
        if !missing.is_empty() {
            return Err(EngineError::illegal_argument(format!(
                "Required [{}]",
                missing.join(", ")
            )));
        }
        let source = match (id, query) {
            (Some(id), None) => LookupSource::Id(id),
            (None, Some(query)) => LookupSource::Query(query),
            (None, None) => {
                return Err(build_failure(
                    "[terms] query lookup element requires specifying either the id or the query.",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(build_failure(
                    "[terms] query lookup element cannot specify both id and query.",
                ));
            }
        };
        Ok(TermsLookup {
            index: index.unwrap_or_default(),
            source,
            path: path.unwrap_or_default(),
            routing,
        })
    }
}

/// A string field of the lookup object; with `numbers`, a number is taken as its text (an `id`
/// is often written as one).
fn string_value(key: &str, value: &Value, numbers: bool) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) if numbers => Ok(n.to_string()),
        _ => Err(wrong_type(key, value)),
    }
}

/// OpenSearch's object parser error for a value of the wrong type.
fn wrong_type(key: &str, value: &Value) -> EngineError {
    EngineError::new(
        ErrorCode::XContentParse,
        format!(
            "[{LOOKUP}] {key} doesn't support values of type: {}",
            crate::query::json_kind(value)
        ),
    )
}

/// OpenSearch's error when its lookup parser rejects the combination of fields: an
/// `x_content_parse_exception` caused by an `illegal_argument_exception` with `reason`.
fn build_failure(reason: &str) -> EngineError {
    let mut e = EngineError::new(
        ErrorCode::XContentParse,
        format!("Failed to build [{LOOKUP}] after last required field arrived"),
    );
    e.cause = Some(Box::new(EngineError::illegal_argument(reason)));
    e
}

/// The terms lookups of one request, resolved while its queries are built.
///
/// # Invariants
/// - Each distinct lookup (by its JSON) is fetched at most once per request: the indices a
///   request searches share its results, and the nested search hook sees one call per lookup.
pub struct TermsLookups<'a> {
    engine: &'a Engine,
    ctx: &'a SearchContext,
    now_millis: i64,
    /// Values of the lookups fetched so far, by the lookup's JSON.
    resolved: RefCell<HashMap<String, Arc<[Value]>>>,
    /// The error of the lookup that failed, reported instead of the shard failure wrapping it.
    failure: RefCell<Option<EngineError>>,
}

impl<'a> TermsLookups<'a> {
    /// Lookups for a request running under `ctx`; `now_millis` is the request's "now", which
    /// nested searches share.
    pub fn new(engine: &'a Engine, ctx: &'a SearchContext, now_millis: i64) -> Self {
        TermsLookups {
            engine,
            ctx,
            now_millis,
            resolved: RefCell::new(HashMap::new()),
            failure: RefCell::new(None),
        }
    }

    /// The values a lookup object (`{"index": .., "id"|"query": .., "path": ..}`) names.
    ///
    /// # Errors
    ///
    /// Those of [`TermsLookup::parse`]; 404 `index_not_found_exception` for a missing lookup
    /// index; `task_cancelled_exception` when the request is cancelled; the hook's error; the
    /// nested search's error; and `illegal_argument_exception` when more documents match the
    /// query than the lookup fetches.
    pub fn resolve(&self, spec: &Map<String, Value>) -> Result<Arc<[Value]>> {
        let key = Value::Object(spec.clone()).to_string();
        if let Some(values) = self.resolved.borrow().get(&key) {
            return Ok(values.clone());
        }
        match TermsLookup::parse(spec).and_then(|lookup| self.fetch(&lookup)) {
            Ok(values) => {
                let values: Arc<[Value]> = values.into();
                self.resolved.borrow_mut().insert(key, values.clone());
                Ok(values)
            }
            Err(e) => {
                *self.failure.borrow_mut() = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The error of the lookup that failed, if one did; a query build that fails after a lookup
    /// failed reports this error as is.
    pub(crate) fn take_failure(&self) -> Option<EngineError> {
        self.failure.borrow_mut().take()
    }

    fn fetch(&self, lookup: &TermsLookup) -> Result<Vec<Value>> {
        if self.ctx.is_cancelled() {
            return Err(crate::search::cancelled());
        }
        if let Some(hook) = &self.ctx.nested {
            let by_query = matches!(lookup.source, LookupSource::Query(_));
            hook.authorize_lookup(&lookup.index, by_query)?;
        }
        let values = match &lookup.source {
            LookupSource::Id(id) => {
                let (_, doc) = self
                    .engine
                    .get_doc(&lookup.index, id, lookup.routing.as_deref())?;
                let mut values = Values::default();
                if let Some(doc) = doc {
                    values.extract(&doc.source, &lookup.path);
                }
                values.into_vec()
            }
            LookupSource::Query(query) => self.fetch_hits(lookup, query)?,
        };
        // The outer search goes on only if its own request still runs.
        if self.ctx.is_cancelled() {
            return Err(crate::search::cancelled());
        }
        Ok(values)
    }

    /// Runs the nested search of a lookup by query and collects the values of its hits.
    fn fetch_hits(&self, lookup: &TermsLookup, query: &Value) -> Result<Vec<Value>> {
        let targets = self
            .engine
            .resolve_targets(&lookup.index, &crate::resolve::IndicesOptions::default())?;
        let indices: Vec<&std::sync::Arc<crate::index::IndexHandle>> =
            targets.iter().map(|t| &t.handle).collect();
        let max_terms = indices
            .iter()
            .map(|h| h.max_terms_count())
            .min()
            .unwrap_or(crate::index::DEFAULT_MAX_TERMS_COUNT);
        let window = indices
            .iter()
            .map(|h| h.max_result_window())
            .min()
            .unwrap_or(crate::index::DEFAULT_MAX_RESULT_WINDOW);
        let fetch_size = max_terms.min(window).min(MAX_CLAUSE_COUNT);
        // Only the path's top-level object is needed from each hit.
        let top = lookup
            .path
            .split('.')
            .next()
            .unwrap_or_default()
            .to_string();
        let req = SearchRequest {
            query: query.clone(),
            size: fetch_size,
            // Every hit is used, so their order does not matter: index order skips scoring.
            sort: vec![SortSpec {
                field: SortField::Doc,
                desc: false,
                missing_first: false,
                unmapped_ok: false,
            }],
            source: SourceFilter {
                disabled: false,
                includes: vec![top.clone()],
                excludes: Vec::new(),
            },
            track_total_hits: TrackTotalHits::Exact,
            ..SearchRequest::default()
        };
        let (sub_ctx, guard) = match &self.ctx.nested {
            Some(hook) => {
                let description = format!(
                    "indices[{}], search_type[QUERY_THEN_FETCH], source[{}]",
                    lookup.index,
                    json!({"size": fetch_size, "query": query, "_source": {"includes": [top]}})
                );
                let scope = hook.enter(&lookup.index, &description)?;
                let mut ctx = scope.ctx;
                ctx.parent = Some(Arc::new(self.ctx.clone()));
                if ctx.nested.is_none() {
                    ctx.nested = self.ctx.nested.clone();
                }
                (ctx, Some(scope.guard))
            }
            None => {
                // The request's `timeout` bounds its own collection: a lookup never filters on
                // the partial hits of a timed-out nested search.
                let mut ctx = self.ctx.clone();
                ctx.deadline = None;
                (ctx, None)
            }
        };
        let sub_lookups = TermsLookups::new(self.engine, &sub_ctx, self.now_millis);
        let response = crate::search::execute(
            &targets,
            &req,
            &sub_ctx,
            self.now_millis,
            Instant::now(),
            None,
            Some(&sub_lookups),
        );
        drop(guard);
        let response = response?;
        if response["timed_out"] == Value::Bool(true) {
            return Err(EngineError::illegal_argument(format!(
                "Terms lookup subquery on [{}] timed out; filter may be incomplete",
                lookup.index
            )));
        }
        let hits = &response["hits"];
        let total = hits["total"]["value"].as_u64().unwrap_or(0);
        if total > fetch_size {
            return Err(EngineError::illegal_argument(format!(
                "Terms lookup subquery total hits [{total}] exceed fetch limit [{fetch_size}]; filter may be incomplete."
            )));
        }
        let mut values = Values::default();
        for hit in hits["hits"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            values.extract(&hit["_source"], &lookup.path);
        }
        Ok(values.into_vec())
    }
}

/// The values a lookup collects: flattened, without duplicates, in order of appearance.
#[derive(Default)]
struct Values {
    seen: HashSet<String>,
    values: Vec<Value>,
}

impl Values {
    /// Adds the values at the dotted `path` of a document source.
    fn extract(&mut self, source: &Value, path: &str) {
        let parts: Vec<&str> = path.split('.').collect();
        if let Value::Object(obj) = source {
            self.walk_object(obj, &parts);
        }
    }

    /// Follows `parts` into an object. As OpenSearch's `XContentMapValues.extractRawValues`,
    /// a key may itself hold dots (`{"a.b": 1}` for `a.b`): the shortest key present wins.
    fn walk_object(&mut self, obj: &Map<String, Value>, parts: &[&str]) {
        let mut key = String::new();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                key.push('.');
            }
            key.push_str(part);
            if let Some(v) = obj.get(&key).filter(|v| !v.is_null()) {
                self.walk_value(v, &parts[i + 1..]);
                return;
            }
        }
    }

    fn walk_value(&mut self, value: &Value, rest: &[&str]) {
        match value {
            Value::Null => {}
            Value::Object(obj) => self.walk_object(obj, rest),
            Value::Array(items) => {
                for item in items {
                    self.walk_value(item, rest);
                }
            }
            scalar => {
                if rest.is_empty() && self.seen.insert(scalar.to_string()) {
                    self.values.push(scalar.clone());
                }
            }
        }
    }

    fn into_vec(self) -> Vec<Value> {
        self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(source: Value, path: &str) -> Vec<Value> {
        let mut v = Values::default();
        v.extract(&source, path);
        v.into_vec()
    }

    #[test]
    fn test_values_at_path_flatten_arrays_and_follow_dots() {
        assert_eq!(values(json!({"a": "x"}), "a"), vec![json!("x")]);
        assert_eq!(
            values(json!({"a": ["x", "y", "x", null]}), "a"),
            vec![json!("x"), json!("y")]
        );
        assert_eq!(
            values(json!({"a": {"b": [1, 2]}}), "a.b"),
            vec![json!(1), json!(2)]
        );
        assert_eq!(
            values(json!({"a": [{"b": "p"}, {"b": ["q"]}, {"c": "r"}]}), "a.b"),
            vec![json!("p"), json!("q")]
        );
        assert_eq!(
            values(json!({"a.b": "dotted"}), "a.b"),
            vec![json!("dotted")]
        );
        assert_eq!(
            values(json!({"a": {"b": {"c": 1}}}), "a.b"),
            Vec::<Value>::new()
        );
        assert_eq!(values(json!({"a": 5}), "a.b"), Vec::<Value>::new());
        assert_eq!(values(json!({"a": null}), "a"), Vec::<Value>::new());
    }

    #[test]
    fn test_lookup_parse_requires_index_path_and_one_of_id_or_query() {
        let parse = |v: Value| TermsLookup::parse(v.as_object().unwrap());
        let ok = parse(json!({"index": "i", "id": 7, "path": "p", "routing": "r"})).unwrap();
        assert_eq!(ok.source, LookupSource::Id("7".into()));
        let e = parse(json!({"id": "1"})).unwrap_err();
        assert_eq!(e.reason, "Required [index, path]");
        let e = parse(json!({"index": "i", "path": "p"})).unwrap_err();
        assert_eq!(e.code, ErrorCode::XContentParse);
        assert!(e.root_cause().reason.contains("either the id or the query"));
        let e = parse(json!({"index": "i", "path": "p", "typo": 1})).unwrap_err();
        assert_eq!(e.reason, "[terms_lookup] unknown field [typo]");
        let e = parse(json!({"index": "i", "path": "p", "query": "x"})).unwrap_err();
        assert_eq!(e.code, ErrorCode::XContentParse);
    }
}
