//! The query DSL and aggregations against a small in-RAM index built on the sluice schema.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sluice_engine::aggs;
use sluice_engine::mapping::{Mapping, ParsedDocument, TypedValue};
use sluice_engine::query::{QueryContext, build_query};
use sluice_engine::schema::{self, Fields};
use sluice_engine::{EngineError, ErrorCode};
use tantivy::collector::{Count, TopDocs};
use tantivy::query::Query;
use tantivy::schema::OwnedValue;
use tantivy::schema::document::Value as _;
use tantivy::{DateTime, Index, TantivyDocument};

/// "Now" for date math in these tests: 2024-01-02T10:00:00Z.
const NOW_MILLIS: i64 = 1_704_189_600_000;

/// Millisecond timestamps of the month starts the date tests use.
const JAN_1: i64 = 1_704_067_200_000;
const FEB_1: i64 = 1_706_745_600_000;
const MAR_1: i64 = 1_709_251_200_000;
const APR_1: i64 = 1_711_929_600_000;

struct TestIndex {
    name: String,
    index: Index,
    mapping: Mapping,
    fields: Fields,
}

impl TestIndex {
    /// Builds an index with `mapping`, committing each group of documents as a segment.
    fn build(name: &str, mapping: Value, segments: &[Vec<(&str, Value)>]) -> TestIndex {
        let (schema, fields) = schema::build_schema();
        let index = Index::create_in_ram(schema);
        let mut mapping = Mapping::parse(&mapping).expect("mapping");
        let mut writer = index
            .writer_with_num_threads(1, 15_000_000)
            .expect("writer");
        for segment in segments {
            for (id, source) in segment {
                let parsed = mapping
                    .parse_document(source, id)
                    .expect("document fits the mapping");
                writer
                    .add_document(to_tantivy(&fields, id, &parsed))
                    .expect("add");
            }
            writer.commit().expect("commit");
        }
        TestIndex {
            name: name.to_string(),
            index,
            mapping,
            fields,
        }
    }

    fn ctx(&self) -> QueryContext<'_> {
        QueryContext {
            mapping: &self.mapping,
            fields: self.fields,
            index: &self.index,
            now_millis: NOW_MILLIS,
            index_name: &self.name,
            max_terms_count: sluice_engine::index::DEFAULT_MAX_TERMS_COUNT,
            lookups: None,
        }
    }

    fn query(&self, dsl: &Value) -> Result<Box<dyn Query>, EngineError> {
        build_query(dsl, &self.ctx())
    }

    /// The sorted `_id`s of the documents `dsl` matches.
    fn ids(&self, dsl: Value) -> Vec<String> {
        let query = self
            .query(&dsl)
            .unwrap_or_else(|e| panic!("query {dsl} failed: {e}"));
        let searcher = self.index.reader().expect("reader").searcher();
        let hits = searcher
            .search(&query, &TopDocs::with_limit(100).order_by_score())
            .expect("search");
        let count = searcher.search(&query, &Count).expect("count");
        assert_eq!(count, hits.len(), "count and hits agree for {dsl}");
        let mut ids: Vec<String> = hits
            .into_iter()
            .map(|(_, addr)| {
                let doc: TantivyDocument = searcher.doc(addr).expect("doc");
                doc.get_first(self.fields.id)
                    .and_then(|v| v.as_str())
                    .expect("_id")
                    .to_string()
            })
            .collect();
        ids.sort();
        ids
    }

    /// The scores of the documents `dsl` matches, by `_id`.
    fn scores(&self, dsl: Value) -> BTreeMap<String, f32> {
        let query = self.query(&dsl).expect("query");
        let searcher = self.index.reader().expect("reader").searcher();
        let hits = searcher
            .search(&query, &TopDocs::with_limit(100).order_by_score())
            .expect("search");
        hits.into_iter()
            .map(|(score, addr)| {
                let doc: TantivyDocument = searcher.doc(addr).expect("doc");
                (
                    doc.get_first(self.fields.id)
                        .and_then(|v| v.as_str())
                        .expect("_id")
                        .to_string(),
                    score,
                )
            })
            .collect()
    }

    fn query_err(&self, dsl: Value) -> EngineError {
        match self.query(&dsl) {
            Ok(q) => panic!("query {dsl} should fail, got {q:?}"),
            Err(e) => e,
        }
    }
}

/// Turns a parsed document into a tantivy document: `_txt`/`_kw` as JSON objects keyed by the
/// dotted paths, repeated paths as arrays.
fn to_tantivy(fields: &Fields, id: &str, parsed: &ParsedDocument) -> TantivyDocument {
    fn object(values: &[(String, TypedValue)]) -> BTreeMap<String, OwnedValue> {
        let mut grouped: BTreeMap<String, Vec<OwnedValue>> = BTreeMap::new();
        for (path, value) in values {
            let v = match value {
                TypedValue::Text(s) | TypedValue::Keyword(s) => OwnedValue::Str(s.clone()),
                TypedValue::I64(i) => OwnedValue::I64(*i),
                TypedValue::F64(f) => OwnedValue::F64(*f),
                TypedValue::Date(ms) => OwnedValue::Date(DateTime::from_timestamp_millis(*ms)),
                TypedValue::Bool(b) => OwnedValue::Bool(*b),
            };
            grouped.entry(path.clone()).or_default().push(v);
        }
        grouped
            .into_iter()
            .map(|(path, mut vs)| {
                let v = if vs.len() == 1 {
                    vs.pop().expect("one value")
                } else {
                    OwnedValue::Array(vs)
                };
                (path, v)
            })
            .collect()
    }
    let mut doc = TantivyDocument::default();
    doc.add_text(fields.id, id);
    if !parsed.text.is_empty() {
        doc.add_object(fields.txt, object(&parsed.text));
    }
    if !parsed.kw.is_empty() {
        doc.add_object(fields.kw, object(&parsed.kw));
    }
    doc
}

fn mapping() -> Value {
    json!({"properties": {
        "message": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "status": {"type": "integer"},
        "level": {"type": "keyword"},
        "price": {"type": "double"},
        "ratio": {"type": "float"},
        "ts": {"type": "date"},
        "active": {"type": "boolean"},
        "user": {"properties": {"name": {"type": "keyword"}, "bio": {"type": "text"}}},
        "tags": {"type": "keyword"}
    }})
}

/// Eight documents in two segments.
fn logs() -> TestIndex {
    TestIndex::build(
        "logs",
        mapping(),
        &[
            vec![
                (
                    "1",
                    json!({"message": "The quick brown fox", "status": 200, "level": "info", "price": 10.5,
                             "ratio": 0.5, "ts": "2024-01-01T00:00:00Z", "active": true,
                             "user": {"name": "alice"}, "tags": ["a", "b"]}),
                ),
                (
                    "2",
                    json!({"message": "quick brown dogs jump", "status": 404, "level": "warn", "price": 20.0,
                             "ts": "2024-01-01T12:00:00Z", "active": false, "user": {"name": "bob"}, "tags": ["b"]}),
                ),
                (
                    "3",
                    json!({"message": "lazy dog sleeps", "status": 500, "level": "error", "price": 30.0,
                             "ts": "2024-01-02T00:00:00Z", "active": true, "user": {"name": "Carol"}}),
                ),
                (
                    "4",
                    json!({"message": "the fox and the dog", "status": 200, "level": "info", "price": 40.25,
                             "ts": "2024-01-08T00:00:00Z", "active": false, "user": {"bio": "loves quick foxes"}}),
                ),
            ],
            vec![
                (
                    "5",
                    json!({"message": "Error: disk full", "status": 503, "level": "error", "price": 5.0,
                             "ts": "2024-02-15T10:30:00Z", "active": true}),
                ),
                (
                    "6",
                    json!({"status": 200, "level": "debug", "ts": "2024-03-31T23:59:59.999Z"}),
                ),
                (
                    "7",
                    json!({"message": "quick quick quick", "price": 100.0, "ts": "2024-04-01T00:00:00Z",
                             "level": "info"}),
                ),
                ("8", json!({"message": "brown", "status": 201})),
            ],
        ],
    )
}

fn ids(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// Queries

#[test]
fn test_match_all_and_match_none() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"match_all": {}})),
        ids(&["1", "2", "3", "4", "5", "6", "7", "8"])
    );
    assert_eq!(t.ids(json!({"match_none": {}})), ids(&[]));
    let scores = t.scores(json!({"match_all": {"boost": 2.5}}));
    assert!(
        scores.values().all(|s| (*s - 2.5).abs() < 1e-6),
        "{scores:?}"
    );
}

#[test]
fn test_match_analyses_text_and_combines_terms() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"match": {"message": "quick"}})),
        ids(&["1", "2", "7"])
    );
    assert_eq!(
        t.ids(json!({"match": {"message": "QUICK Fox"}})),
        ids(&["1", "2", "4", "7"])
    );
    assert_eq!(
        t.ids(json!({"match": {"message": {"query": "quick fox", "operator": "and"}}})),
        ids(&["1"])
    );
    for msm in [json!(2), json!("2"), json!(-1), json!("75%"), json!("-34%")] {
        let q = json!({"match": {"message": {"query": "quick brown fox", "minimum_should_match": msm}}});
        assert_eq!(t.ids(q), ids(&["1", "2"]), "minimum_should_match {msm}");
    }
    let q = json!({"match": {"message": {"query": "quick brown fox", "minimum_should_match": 3}}});
    assert_eq!(t.ids(q), ids(&["1"]));
    let q = json!({"match": {"message": {"query": "quikc", "fuzziness": "AUTO"}}});
    assert_eq!(t.ids(q), ids(&["1", "2", "7"]));
    assert_eq!(t.ids(json!({"match": {"message": "!!!"}})), ids(&[]));
    let q = json!({"match": {"message": {"query": "!!!", "zero_terms_query": "all"}}});
    assert_eq!(t.ids(q).len(), 8);
}

#[test]
fn test_match_on_non_text_fields_is_exact() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"match": {"level": "info"}})),
        ids(&["1", "4", "7"])
    );
    assert_eq!(t.ids(json!({"match": {"level": "INFO"}})), ids(&[]));
    assert_eq!(
        t.ids(json!({"match": {"status": "200"}})),
        ids(&["1", "4", "6"])
    );
    assert_eq!(
        t.ids(json!({"match": {"status": {"query": "abc", "lenient": true}}})),
        ids(&[])
    );
    assert_eq!(
        t.ids(json!({"match": {"message.keyword": "brown"}})),
        ids(&["8"])
    );
    assert_eq!(t.ids(json!({"match": {"nope": "x"}})), ids(&[]));
}

#[test]
fn test_match_phrase_and_phrase_prefix() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"match_phrase": {"message": "quick brown"}})),
        ids(&["1", "2"])
    );
    assert_eq!(
        t.ids(json!({"match_phrase": {"message": "brown quick"}})),
        ids(&[])
    );
    assert_eq!(
        t.ids(json!({"match_phrase": {"message": "quick fox"}})),
        ids(&[])
    );
    assert_eq!(
        t.ids(json!({"match_phrase": {"message": {"query": "quick fox", "slop": 1}}})),
        ids(&["1"])
    );
    assert_eq!(
        t.ids(json!({"match_phrase_prefix": {"message": "quick br"}})),
        ids(&["1", "2"])
    );
    assert_eq!(
        t.ids(json!({"match_phrase_prefix": {"message": "la"}})),
        ids(&["3"])
    );
}

#[test]
fn test_multi_match_types_and_field_patterns() {
    let t = logs();
    let q = json!({"multi_match": {"query": "fox", "fields": ["message", "user.bio"]}});
    assert_eq!(t.ids(q), ids(&["1", "4"]));
    let q = json!({"multi_match": {"query": "quick", "fields": ["message^2", "user.*"], "type": "most_fields"}});
    assert_eq!(t.ids(q), ids(&["1", "2", "4", "7"]));
    let q = json!({"multi_match": {"query": "quick", "fields": ["user.*"]}});
    assert_eq!(t.ids(q), ids(&["4"]));
    // Default fields: every text and keyword field.
    assert_eq!(
        t.ids(json!({"multi_match": {"query": "alice"}})),
        ids(&["1"])
    );
    assert_eq!(t.ids(json!({"multi_match": {"query": "200"}})), ids(&[]));
    let q = json!({"multi_match": {"query": "brown fox", "fields": ["message"], "type": "phrase"}});
    assert_eq!(t.ids(q), ids(&["1"]));
    let q = json!({"multi_match": {"query": "quick fox", "fields": ["message", "user.bio"], "operator": "and"}});
    assert_eq!(t.ids(q), ids(&["1"]));
    // best_fields scores a document by its best field, plus tie_breaker times the others.
    let best = t.scores(
        json!({"multi_match": {"query": "quick", "fields": ["message", "message.keyword"]}}),
    );
    let single = t.scores(json!({"match": {"message": "quick"}}));
    assert_eq!(best, single);
}

#[test]
fn test_term_converts_values_to_the_field_type() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"term": {"level": "info"}})),
        ids(&["1", "4", "7"])
    );
    assert_eq!(
        t.ids(json!({"term": {"level": {"value": "INFO", "case_insensitive": true}}})),
        ids(&["1", "4", "7"])
    );
    // Text fields are searched for the raw term, not analysed.
    assert_eq!(
        t.ids(json!({"term": {"message": "quick"}})),
        ids(&["1", "2", "7"])
    );
    assert_eq!(t.ids(json!({"term": {"message": "Quick"}})), ids(&[]));
    assert_eq!(
        t.ids(json!({"term": {"message.keyword": "brown"}})),
        ids(&["8"])
    );
    assert_eq!(
        t.ids(json!({"term": {"status": 200}})),
        ids(&["1", "4", "6"])
    );
    assert_eq!(
        t.ids(json!({"term": {"status": "200"}})),
        ids(&["1", "4", "6"])
    );
    assert_eq!(t.ids(json!({"term": {"price": 20}})), ids(&["2"]));
    assert_eq!(t.ids(json!({"term": {"price": "10.5"}})), ids(&["1"]));
    assert_eq!(t.ids(json!({"term": {"ratio": 0.5}})), ids(&["1"]));
    assert_eq!(
        t.ids(json!({"term": {"active": true}})),
        ids(&["1", "3", "5"])
    );
    assert_eq!(
        t.ids(json!({"term": {"active": "false"}})),
        ids(&["2", "4"])
    );
    assert_eq!(t.ids(json!({"term": {"tags": "b"}})), ids(&["1", "2"]));
    // A date without time covers its day; with time it is exact.
    assert_eq!(
        t.ids(json!({"term": {"ts": "2024-01-01"}})),
        ids(&["1", "2"])
    );
    assert_eq!(
        t.ids(json!({"term": {"ts": "2024-01-01T00:00:00Z"}})),
        ids(&["1"])
    );
    assert_eq!(t.ids(json!({"term": {"ts": JAN_1}})), ids(&["1"]));
    assert_eq!(t.ids(json!({"term": {"_id": "3"}})), ids(&["3"]));
    assert_eq!(t.ids(json!({"term": {"_index": "logs"}})).len(), 8);
    assert_eq!(t.ids(json!({"term": {"nope": "x"}})), ids(&[]));
    let scores = t.scores(json!({"term": {"level": {"value": "error", "boost": 3.0}}}));
    let plain = t.scores(json!({"term": {"level": "error"}}));
    for (id, s) in &scores {
        assert!((s - 3.0 * plain[id]).abs() < 1e-4);
    }
}

#[test]
fn test_terms_and_ids() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"terms": {"level": ["info", "warn"]}})),
        ids(&["1", "2", "4", "7"])
    );
    assert_eq!(
        t.ids(json!({"terms": {"status": [404, "500"]}})),
        ids(&["2", "3"])
    );
    assert_eq!(
        t.ids(json!({"terms": {"ts": ["2024-01-02T00:00:00Z", "2024-01-08"]}})),
        ids(&["3", "4"])
    );
    assert_eq!(
        t.ids(json!({"terms": {"tags": ["a"], "boost": 2.0}})),
        ids(&["1"])
    );
    assert_eq!(t.ids(json!({"terms": {"level": []}})), ids(&[]));
    assert_eq!(
        t.ids(json!({"ids": {"values": ["1", "3", "99"]}})),
        ids(&["1", "3"])
    );
}

#[test]
fn test_range_on_every_type() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"range": {"status": {"gte": 400, "lt": 503}}})),
        ids(&["2", "3"])
    );
    assert_eq!(
        t.ids(json!({"range": {"status": {"gt": 200}}})),
        ids(&["2", "3", "5", "8"])
    );
    assert_eq!(
        t.ids(json!({"range": {"status": {"gte": 200.5}}})),
        ids(&["2", "3", "5", "8"])
    );
    assert_eq!(
        t.ids(json!({"range": {"status": {"lte": "200.9"}}})),
        ids(&["1", "4", "6"])
    );
    assert_eq!(
        t.ids(json!({"range": {"status": {"from": 201, "to": 404, "include_upper": false}}})),
        ids(&["8"])
    );
    assert_eq!(
        t.ids(json!({"range": {"price": {"gte": 10, "lte": 30}}})),
        ids(&["1", "2", "3"])
    );
    assert_eq!(
        t.ids(json!({"range": {"price": {"gt": 20, "lt": 100}}})),
        ids(&["3", "4"])
    );
    assert_eq!(
        t.ids(json!({"range": {"ratio": {"lte": 0.5}}})),
        ids(&["1"])
    );
    assert_eq!(
        t.ids(json!({"range": {"level": {"gte": "e", "lt": "j"}}})),
        ids(&["1", "3", "4", "5", "7"])
    );
    assert_eq!(
        t.ids(json!({"range": {"message": {"gte": "l", "lt": "m"}}})),
        ids(&["3"])
    );
    assert_eq!(
        t.ids(json!({"range": {"active": {"gte": true}}})),
        ids(&["1", "3", "5"])
    );
    assert_eq!(t.ids(json!({"range": {"nope": {"gte": 1}}})), ids(&[]));
    // An unbounded range is an exists query.
    assert_eq!(
        t.ids(json!({"range": {"price": {}}})),
        ids(&["1", "2", "3", "4", "5", "7"])
    );
}

#[test]
fn test_range_on_dates_rounds_like_opensearch() {
    let t = logs();
    let q = json!({"range": {"ts": {"gte": "2024-01-01", "lte": "2024-01-01"}}});
    assert_eq!(t.ids(q), ids(&["1", "2"]));
    assert_eq!(
        t.ids(json!({"range": {"ts": {"gt": "2024-01-01"}}})),
        ids(&["3", "4", "5", "6", "7"])
    );
    assert_eq!(
        t.ids(json!({"range": {"ts": {"lt": "2024-01-08"}}})),
        ids(&["1", "2", "3"])
    );
    // now = 2024-01-02T10:00Z: now-1d/d rounds down to 2024-01-01, now/d to 2024-01-02.
    let q = json!({"range": {"ts": {"gte": "now-1d/d", "lt": "now/d"}}});
    assert_eq!(t.ids(q), ids(&["1", "2"]));
    let q = json!({"range": {"ts": {"gt": "now-1d/d", "lte": "now/d"}}});
    assert_eq!(t.ids(q), ids(&["3"]));
    let q =
        json!({"range": {"ts": {"gte": "2024-01-31||+1M", "format": "strict_date_optional_time"}}});
    assert_eq!(t.ids(q), ids(&["6", "7"]));
    assert_eq!(
        t.ids(json!({"range": {"ts": {"gte": FEB_1, "lt": APR_1}}})),
        ids(&["5", "6"])
    );
    assert_eq!(
        t.ids(json!({"range": {"ts": {"gte": "2024-04-01", "time_zone": "UTC"}}})),
        ids(&["7"])
    );
}

#[test]
fn test_exists_on_keyword_text_and_object_paths() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"exists": {"field": "message"}})),
        ids(&["1", "2", "3", "4", "5", "7", "8"])
    );
    assert_eq!(t.ids(json!({"exists": {"field": "user.bio"}})), ids(&["4"]));
    assert_eq!(
        t.ids(json!({"exists": {"field": "user"}})),
        ids(&["1", "2", "3", "4"])
    );
    assert_eq!(
        t.ids(json!({"exists": {"field": "status"}})),
        ids(&["1", "2", "3", "4", "5", "6", "8"])
    );
    assert_eq!(
        t.ids(json!({"exists": {"field": "tags"}})),
        ids(&["1", "2"])
    );
    assert_eq!(
        t.ids(json!({"exists": {"field": "ts"}})),
        ids(&["1", "2", "3", "4", "5", "6", "7"])
    );
    assert_eq!(
        t.ids(json!({"exists": {"field": "user.*"}})),
        ids(&["1", "2", "3", "4"])
    );
    assert_eq!(t.ids(json!({"exists": {"field": "nope"}})), ids(&[]));
}

#[test]
fn test_prefix_wildcard_and_regexp() {
    let t = logs();
    assert_eq!(
        t.ids(json!({"prefix": {"level": "in"}})),
        ids(&["1", "4", "7"])
    );
    assert_eq!(
        t.ids(json!({"prefix": {"message": {"value": "qu"}}})),
        ids(&["1", "2", "7"])
    );
    let q = json!({"prefix": {"user.name": {"value": "CAR", "case_insensitive": true}}});
    assert_eq!(t.ids(q), ids(&["3"]));
    assert_eq!(t.ids(json!({"prefix": {"user.name": "car"}})), ids(&[]));
    assert_eq!(
        t.ids(json!({"wildcard": {"level": "*rr*"}})),
        ids(&["3", "5"])
    );
    assert_eq!(
        t.ids(json!({"wildcard": {"message": {"value": "qu?ck"}}})),
        ids(&["1", "2", "7"])
    );
    assert_eq!(
        t.ids(json!({"wildcard": {"message": {"wildcard": "QU*"}}})),
        ids(&["1", "2", "7"])
    );
    let q = json!({"wildcard": {"user.name": {"value": "A*", "case_insensitive": true}}});
    assert_eq!(t.ids(q), ids(&["1"]));
    assert_eq!(
        t.ids(json!({"wildcard": {"message.keyword": "*fox*"}})),
        ids(&["1", "4"])
    );
    assert_eq!(t.ids(json!({"wildcard": {"level": "in.o"}})), ids(&[]));
    assert_eq!(
        t.ids(json!({"regexp": {"level": "e.*r"}})),
        ids(&["3", "5"])
    );
    assert_eq!(
        t.ids(json!({"regexp": {"user.name": {"value": "[ab].*"}}})),
        ids(&["1", "2"])
    );
    assert_eq!(t.ids(json!({"prefix": {"nope": "x"}})), ids(&[]));
}

#[test]
fn test_bool_clauses_follow_opensearch_semantics() {
    let t = logs();
    let q = json!({"bool": {"must": {"match": {"message": "quick"}}, "filter": [{"term": {"level": "info"}}]}});
    assert_eq!(t.ids(q), ids(&["1", "7"]));
    let q =
        json!({"bool": {"should": [{"term": {"level": "warn"}}, {"term": {"level": "debug"}}]}});
    assert_eq!(t.ids(q), ids(&["2", "6"]));
    let q = json!({"bool": {"must_not": {"exists": {"field": "message"}}}});
    assert_eq!(t.ids(q), ids(&["6"]));
    let should =
        json!([{"term": {"level": "info"}}, {"term": {"status": 200}}, {"term": {"active": true}}]);
    assert_eq!(
        t.ids(json!({"bool": {"should": should, "minimum_should_match": 2}})),
        ids(&["1", "4"])
    );
    assert_eq!(
        t.ids(json!({"bool": {"should": should, "minimum_should_match": "100%"}})),
        ids(&["1"])
    );
    // Next to a filter, should clauses are optional unless minimum_should_match says otherwise.
    let filter = json!({"range": {"status": {"gte": 200}}});
    let fox = json!([{"match": {"message": "fox"}}]);
    let q = json!({"bool": {"filter": filter, "should": fox}});
    assert_eq!(t.ids(q), ids(&["1", "2", "3", "4", "5", "6", "8"]));
    let q = json!({"bool": {"filter": filter, "should": fox, "minimum_should_match": 1}});
    assert_eq!(t.ids(q), ids(&["1", "4"]));
    let q = json!({"bool": {
        "must": [{"bool": {"should": [{"term": {"level": "error"}}, {"term": {"level": "warn"}}]}}],
        "must_not": [{"term": {"status": 503}}]
    }});
    assert_eq!(t.ids(q), ids(&["2", "3"]));
    assert_eq!(t.ids(json!({"bool": {}})).len(), 8);
    // Filters do not score; a filter-only bool scores 0.
    let scores = t.scores(json!({"bool": {"filter": {"term": {"level": "error"}}}}));
    assert!(scores.values().all(|s| *s == 0.0), "{scores:?}");
    let scores = t.scores(
        json!({"bool": {"must": {"match_all": {}}, "filter": {"term": {"level": "error"}}}}),
    );
    assert!(scores.values().all(|s| *s == 1.0), "{scores:?}");
}

#[test]
fn test_constant_score_and_dis_max() {
    let t = logs();
    let scores =
        t.scores(json!({"constant_score": {"filter": {"term": {"level": "error"}}, "boost": 2.0}}));
    assert_eq!(scores.keys().cloned().collect::<Vec<_>>(), ids(&["3", "5"]));
    assert!(scores.values().all(|s| *s == 2.0));
    let q =
        json!({"dis_max": {"queries": [{"term": {"level": "warn"}}, {"term": {"status": 500}}]}});
    assert_eq!(t.ids(q), ids(&["2", "3"]));
}

#[test]
fn test_query_string_syntax() {
    let t = logs();
    let qs = |q: &str| t.ids(json!({"query_string": {"query": q}}));
    assert_eq!(qs("quick"), ids(&["1", "2", "4", "7"]));
    assert_eq!(qs("message:quick AND level:info"), ids(&["1", "7"]));
    assert_eq!(qs("message:(quick OR fox) -level:info"), ids(&["2"]));
    assert_eq!(qs("message:(quick OR fox) AND NOT level:info"), ids(&["2"]));
    assert_eq!(qs("+level:error -status:503"), ids(&["3"]));
    assert_eq!(qs("status:[400 TO 500]"), ids(&["2", "3"]));
    assert_eq!(qs("status:{404 TO *]"), ids(&["3", "5"]));
    assert_eq!(qs("status:>=500"), ids(&["3", "5"]));
    assert_eq!(qs("status:<201"), ids(&["1", "4", "6"]));
    assert_eq!(qs("level:err*"), ids(&["3", "5"]));
    assert_eq!(qs("message:\"quick brown\""), ids(&["1", "2"]));
    assert_eq!(qs("message:\"quick fox\"~1"), ids(&["1"]));
    assert_eq!(qs("_exists_:user.bio"), ids(&["4"]));
    assert_eq!(qs("user.name:*"), ids(&["1", "2", "3"]));
    // OpenSearch's documented form escapes the wildcard of a field pattern.
    assert_eq!(qs("user.\\*:alice"), ids(&["1"]));
    assert_eq!(qs("user.*:alice"), ids(&["1"]));
    assert_eq!(qs("NOT level:info"), ids(&["2", "3", "5", "6", "8"]));
    assert_eq!(qs("quick^2 OR lazy"), ids(&["1", "2", "3", "4", "7"]));
    assert_eq!(qs("level:/e.*r/"), ids(&["3", "5"]));
    assert_eq!(qs("message:quikc~"), ids(&["1", "2", "7"]));
    assert_eq!(qs("message:quikc~0"), ids(&[]));
    assert_eq!(qs("ts:[2024-01-01 TO 2024-01-02}"), ids(&["1", "2"]));
    assert_eq!(qs("ts:[2024-01-01 TO 2024-01-02]"), ids(&["1", "2", "3"]));
    assert_eq!(qs("*"), ids(&["1", "2", "3", "4", "5", "6", "7", "8"]));
    let q = json!({"query_string": {"query": "quick brown", "default_field": "message", "default_operator": "AND"}});
    assert_eq!(t.ids(q), ids(&["1", "2"]));
    let q = json!({"query_string": {"query": "quick brown", "fields": ["message"], "default_operator": "and"}});
    assert_eq!(t.ids(q), ids(&["1", "2"]));
    let q = json!({"query_string": {"query": "fox", "fields": ["user.bio", "level"]}});
    assert_eq!(t.ids(q), ids(&[]));
    let q = json!({"query_string": {"query": "status:abc", "lenient": true}});
    assert_eq!(t.ids(q), ids(&[]));
}

#[test]
fn test_unknown_and_malformed_queries_are_parsing_errors() {
    let t = logs();
    let cases = [
        (json!({"foo": {}}), "unknown query [foo]"),
        (
            json!({"term": 5}),
            "[term] query malformed, no start_object after query name",
        ),
        (
            json!({"match": {}}),
            "[match] query malformed, no field specified",
        ),
        (
            json!({"term": {"a": 1, "b": 2}}),
            "[term] query doesn't support multiple fields, found [a] and [b]",
        ),
        (
            json!({"range": {"status": {"gte": 1, "foo": 2}}}),
            "[range] query does not support [foo]",
        ),
        (
            json!({"term": {"status": {"value": 1, "valu": 2}}}),
            "[term] query does not support [valu]",
        ),
        (
            json!({"bool": {"must": 5}}),
            "[bool] query does not support [must] of type [VALUE_NUMBER]",
        ),
        (
            json!({"bool": {"must": {"nope": {}}}}),
            "unknown query [nope]",
        ),
        (
            json!({"match_all": {}, "match_none": {}}),
            "[match_all] malformed query, expected [END_OBJECT] but found [FIELD_NAME] [match_none]",
        ),
        (json!({}), "query malformed, empty clause found"),
        (
            json!({"constant_score": {"boost": 1}}),
            "[constant_score] requires a 'filter' element",
        ),
        (
            json!({"terms": {"level": "info"}}),
            "[terms] query does not support [level]",
        ),
    ];
    for (q, reason) in cases {
        let e = t.query_err(q.clone());
        assert_eq!(e.code, ErrorCode::Parsing, "{q}: {e}");
        assert_eq!(e.reason, reason, "{q}");
    }
}

#[test]
fn test_values_that_do_not_fit_the_field_are_query_shard_errors() {
    let t = logs();
    let cases = [
        (
            json!({"term": {"status": "abc"}}),
            "failed to create query: For input string: \"abc\"",
        ),
        (
            json!({"match": {"status": "abc"}}),
            "failed to create query: For input string: \"abc\"",
        ),
        (
            json!({"terms": {"price": [1, "x"]}}),
            "failed to create query: For input string: \"x\"",
        ),
        (
            json!({"range": {"status": {"gte": "abc"}}}),
            "failed to create query: For input string: \"abc\"",
        ),
        (
            json!({"term": {"status": 5.5}}),
            "failed to create query: Value [5.5] has a decimal part",
        ),
        (
            json!({"term": {"status": 3_000_000_000u64}}),
            "failed to create query: Value [3000000000] is out of range for an integer",
        ),
        (
            json!({"term": {"ts": "not-a-date"}}),
            "failed to create query: failed to parse date field [not-a-date] with format [strict_date_optional_time||epoch_millis]",
        ),
        (
            json!({"range": {"ts": {"gte": "now-1x"}}}),
            "failed to create query: failed to parse date field [now-1x] with format [strict_date_optional_time||epoch_millis]",
        ),
        (
            json!({"term": {"active": "yes"}}),
            "failed to create query: Failed to parse value [yes] as only [true] or [false] are allowed.",
        ),
        (
            json!({"prefix": {"status": "2"}}),
            "Can only use prefix queries on keyword and text fields - not on [status] which is of type [integer]",
        ),
        (
            json!({"wildcard": {"ts": "2024*"}}),
            "Can only use wildcard queries on keyword and text fields - not on [ts] which is of type [date]",
        ),
        (
            json!({"regexp": {"price": "1.*"}}),
            "Can only use regexp queries on keyword and text fields - not on [price] which is of type [double]",
        ),
        (
            json!({"query_string": {"query": "(quick"}}),
            "Failed to parse query [(quick]",
        ),
        (
            json!({"query_string": {"query": "status:abc"}}),
            "failed to create query: For input string: \"abc\"",
        ),
        (
            json!({"multi_match": {"query": "abc", "fields": ["status"]}}),
            "failed to create query: For input string: \"abc\"",
        ),
    ];
    for (q, reason) in cases {
        let e = t.query_err(q.clone());
        assert_eq!(e.code, ErrorCode::QueryShard, "{q}: {e}");
        assert_eq!(e.reason, reason, "{q}");
        assert_eq!(e.index.as_deref(), Some("logs"), "{q}");
    }
    let e = t.query_err(json!({"range": {"ts": {"gte": "now", "time_zone": "Europe/Paris"}}}));
    assert_eq!(e.code, ErrorCode::IllegalArgument);
}

// ---------------------------------------------------------------------------------------------
// Aggregations

/// Runs `aggs` over the documents `query` matches in each index, merges and renders them.
fn run_aggs_on(
    indices: &[&TestIndex],
    query: Value,
    aggs_json: Value,
    max_buckets: Option<u32>,
) -> Result<Value, EngineError> {
    let mut prepared = Vec::new();
    let mut merged: Option<aggs::AggFruit> = None;
    for t in indices {
        let ctx = t.ctx();
        let q = build_query(&query, &ctx)?;
        let p = aggs::prepare(&aggs_json, &ctx, max_buckets)?;
        let searcher = t.index.reader().expect("reader").searcher();
        let fruit = searcher
            .search(&q, &p.collector())
            .map_err(aggs::classify_error)?;
        merged = Some(match merged {
            None => fruit,
            Some(m) => aggs::merge(m, fruit)?,
        });
        prepared.push(p);
    }
    let prepared: Vec<&aggs::PreparedAggs> = prepared.iter().collect();
    aggs::finish_all(merged.expect("one index"), &prepared, false)
}

fn run_aggs(t: &TestIndex, aggs_json: Value) -> Value {
    run_aggs_on(&[t], json!({"match_all": {}}), aggs_json.clone(), None)
        .unwrap_or_else(|e| panic!("aggs {aggs_json} failed: {e}"))
}

fn agg_err(t: &TestIndex, aggs_json: Value) -> EngineError {
    match run_aggs_on(&[t], json!({"match_all": {}}), aggs_json.clone(), None) {
        Ok(v) => panic!("aggs {aggs_json} should fail, got {v}"),
        Err(e) => e,
    }
}

#[test]
fn test_terms_on_keywords_counts_in_opensearch_order() {
    let t = logs();
    let out = run_aggs(&t, json!({"levels": {"terms": {"field": "level"}}}));
    assert_eq!(
        out,
        json!({"levels": {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": 0,
            "buckets": [
                {"key": "info", "doc_count": 3},
                {"key": "error", "doc_count": 2},
                {"key": "debug", "doc_count": 1},
                {"key": "warn", "doc_count": 1}
            ]
        }})
    );
    let out = run_aggs(
        &t,
        json!({"levels": {"terms": {"field": "level", "size": 2, "order": {"_key": "asc"}}}}),
    );
    assert_eq!(
        out,
        json!({"levels": {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": 4,
            "buckets": [{"key": "debug", "doc_count": 1}, {"key": "error", "doc_count": 2}]
        }})
    );
}

#[test]
fn test_terms_on_numbers_dates_and_booleans_with_sub_aggregations() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({"by_status": {"terms": {"field": "status"}, "aggs": {"avg_price": {"avg": {"field": "price"}}}}}),
    );
    assert_eq!(
        out,
        json!({"by_status": {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": 0,
            "buckets": [
                {"key": 200, "doc_count": 3, "avg_price": {"value": 25.375}},
                {"key": 201, "doc_count": 1, "avg_price": {"value": null}},
                {"key": 404, "doc_count": 1, "avg_price": {"value": 20.0}},
                {"key": 500, "doc_count": 1, "avg_price": {"value": 30.0}},
                {"key": 503, "doc_count": 1, "avg_price": {"value": 5.0}}
            ]
        }})
    );
    let out = run_aggs_on(
        &[&t],
        json!({"term": {"level": "error"}}),
        json!({"days": {"terms": {"field": "ts", "order": {"_key": "asc"}}}}),
        None,
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"days": {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": 0,
            "buckets": [
                {"key": 1_704_153_600_000i64, "key_as_string": "2024-01-02T00:00:00.000Z", "doc_count": 1},
                {"key": 1_707_993_000_000i64, "key_as_string": "2024-02-15T10:30:00.000Z", "doc_count": 1}
            ]
        }})
    );
    let out = run_aggs(&t, json!({"active": {"terms": {"field": "active"}}}));
    assert_eq!(
        out["active"]["buckets"],
        json!([
            {"key": 1, "key_as_string": "true", "doc_count": 3},
            {"key": 0, "key_as_string": "false", "doc_count": 2}
        ])
    );
    let out = run_aggs(
        &t,
        json!({"prices": {"terms": {"field": "price", "size": 2, "order": {"_key": "asc"}}}}),
    );
    assert_eq!(
        out["prices"]["buckets"],
        json!([{"key": 5.0, "doc_count": 1}, {"key": 10.5, "doc_count": 1}])
    );
    let out = run_aggs(
        &t,
        json!({"levels": {"terms": {"field": "level", "order": {"max_price": "desc"}},
                          "aggs": {"max_price": {"max": {"field": "price"}}}}}),
    );
    let keys: Vec<&str> = out["levels"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec!["info", "error", "warn", "debug"]);
}

#[test]
fn test_histogram_fills_gaps_with_float_keys() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({"prices": {"histogram": {"field": "price", "interval": 25}}}),
    );
    assert_eq!(
        out,
        json!({"prices": {"buckets": [
            {"key": 0.0, "doc_count": 3},
            {"key": 25.0, "doc_count": 2},
            {"key": 50.0, "doc_count": 0},
            {"key": 75.0, "doc_count": 0},
            {"key": 100.0, "doc_count": 1}
        ]}})
    );
    let out = run_aggs(
        &t,
        json!({"prices": {"histogram": {"field": "price", "interval": 25, "min_doc_count": 1, "keyed": true}}}),
    );
    assert_eq!(
        out,
        json!({"prices": {"buckets": {
            "0.0": {"key": 0.0, "doc_count": 3},
            "25.0": {"key": 25.0, "doc_count": 2},
            "100.0": {"key": 100.0, "doc_count": 1}
        }}})
    );
}

#[test]
fn test_date_histogram_calendar_months_quarters_and_years() {
    let t = logs();
    let bucket = |ms: i64, s: &str, n: u64| json!({"key_as_string": s, "key": ms, "doc_count": n});
    for interval in [
        json!({"calendar_interval": "month"}),
        json!({"calendar_interval": "1M"}),
        json!({"interval": "1M"}),
    ] {
        let mut req = json!({"field": "ts", "format": "yyyy-MM-dd"});
        req.as_object_mut()
            .unwrap()
            .extend(interval.as_object().unwrap().clone());
        let out = run_aggs(&t, json!({"per_month": {"date_histogram": req}}));
        assert_eq!(
            out,
            json!({"per_month": {"buckets": [
                bucket(JAN_1, "2024-01-01T00:00:00.000Z", 4),
                bucket(FEB_1, "2024-02-01T00:00:00.000Z", 1),
                bucket(MAR_1, "2024-03-01T00:00:00.000Z", 1),
                bucket(APR_1, "2024-04-01T00:00:00.000Z", 1)
            ]}}),
            "{interval}"
        );
    }
    let out = run_aggs(
        &t,
        json!({"q": {"date_histogram": {"field": "ts", "calendar_interval": "quarter"}}}),
    );
    assert_eq!(
        out,
        json!({"q": {"buckets": [bucket(JAN_1, "2024-01-01T00:00:00.000Z", 6), bucket(APR_1, "2024-04-01T00:00:00.000Z", 1)]}})
    );
    let out = run_aggs(
        &t,
        json!({"y": {"date_histogram": {"field": "ts", "calendar_interval": "1y", "time_zone": "UTC"}}}),
    );
    assert_eq!(
        out,
        json!({"y": {"buckets": [bucket(JAN_1, "2024-01-01T00:00:00.000Z", 7)]}})
    );
    // Months with sub-aggregations, empty months filled up to the extended bounds.
    let out = run_aggs_on(
        &[&t],
        json!({"range": {"ts": {"lt": "2024-02-01"}}}),
        json!({"m": {"date_histogram": {"field": "ts", "calendar_interval": "month",
                                         "extended_bounds": {"min": "2024-01-01", "max": "2024-03-15"}},
                     "aggs": {"total": {"sum": {"field": "price"}}}}}),
        None,
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"m": {"buckets": [
            {"key_as_string": "2024-01-01T00:00:00.000Z", "key": JAN_1, "doc_count": 4, "total": {"value": 100.75}},
            {"key_as_string": "2024-02-01T00:00:00.000Z", "key": FEB_1, "doc_count": 0, "total": {"value": 0.0}},
            {"key_as_string": "2024-03-01T00:00:00.000Z", "key": MAR_1, "doc_count": 0, "total": {"value": 0.0}}
        ]}})
    );
}

#[test]
fn test_date_histogram_fixed_intervals_and_monday_weeks() {
    let t = logs();
    let early = json!({"range": {"ts": {"lt": "2024-01-09"}}});
    let out = run_aggs_on(&[&t], early.clone(), json!({"d": {"date_histogram": {"field": "ts", "fixed_interval": "1d", "min_doc_count": 1}}}), None).unwrap();
    assert_eq!(
        out,
        json!({"d": {"buckets": [
            {"key_as_string": "2024-01-01T00:00:00.000Z", "key": JAN_1, "doc_count": 2},
            {"key_as_string": "2024-01-02T00:00:00.000Z", "key": JAN_1 + 86_400_000, "doc_count": 1},
            {"key_as_string": "2024-01-08T00:00:00.000Z", "key": JAN_1 + 7 * 86_400_000, "doc_count": 1}
        ]}})
    );
    let out = run_aggs_on(&[&t], early.clone(), json!({"h": {"date_histogram": {"field": "ts", "fixed_interval": "12h", "min_doc_count": 1}}}), None).unwrap();
    let keys: Vec<i64> = out["h"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_i64().unwrap())
        .collect();
    assert_eq!(
        keys,
        vec![
            JAN_1,
            JAN_1 + 43_200_000,
            JAN_1 + 86_400_000,
            JAN_1 + 7 * 86_400_000
        ]
    );
    // 2024-01-01 is a Monday: calendar weeks start there.
    let out = run_aggs_on(
        &[&t],
        early,
        json!({"w": {"date_histogram": {"field": "ts", "calendar_interval": "week"}}}),
        None,
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"w": {"buckets": [
            {"key_as_string": "2024-01-01T00:00:00.000Z", "key": JAN_1, "doc_count": 3},
            {"key_as_string": "2024-01-08T00:00:00.000Z", "key": JAN_1 + 7 * 86_400_000, "doc_count": 1}
        ]}})
    );
}

#[test]
fn test_range_aggregation_keys_and_overlaps() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({"prices": {"range": {"field": "price", "ranges": [{"to": 10}, {"from": 10, "to": 50}, {"from": 50}]}}}),
    );
    assert_eq!(
        out,
        json!({"prices": {"buckets": [
            {"key": "*-10.0", "to": 10.0, "doc_count": 1},
            {"key": "10.0-50.0", "from": 10.0, "to": 50.0, "doc_count": 4},
            {"key": "50.0-*", "from": 50.0, "doc_count": 1}
        ]}})
    );
    let out = run_aggs(
        &t,
        json!({"prices": {"range": {"field": "price", "keyed": true,
                                    "ranges": [{"key": "cheap", "to": 20}, {"key": "dear", "from": 20}]},
                          "aggs": {"n": {"value_count": {"field": "price"}}}}}),
    );
    assert_eq!(
        out,
        json!({"prices": {"buckets": {
            "cheap": {"to": 20.0, "doc_count": 2, "n": {"value": 2}},
            "dear": {"from": 20.0, "doc_count": 4, "n": {"value": 4}}
        }}})
    );
    let out = run_aggs(
        &t,
        json!({"o": {"range": {"field": "price", "ranges": [{"from": 20}, {"from": 0, "to": 50}]}}}),
    );
    assert_eq!(
        out,
        json!({"o": {"buckets": [
            {"key": "0.0-50.0", "from": 0.0, "to": 50.0, "doc_count": 5},
            {"key": "20.0-*", "from": 20.0, "doc_count": 4}
        ]}})
    );
    let out = run_aggs(
        &t,
        json!({"s": {"range": {"field": "status", "ranges": [{"from": 200, "to": 201}, {"from": 400}]}}}),
    );
    assert_eq!(out["s"]["buckets"][0]["doc_count"], json!(3));
    assert_eq!(out["s"]["buckets"][1]["doc_count"], json!(3));
    let out = run_aggs(
        &t,
        json!({"r": {"range": {"field": "ts", "ranges": [{"to": "2024-02-01"}]}}}),
    );
    assert_eq!(
        out,
        json!({"r": {"buckets": [{
            "key": "*-2024-02-01T00:00:00.000Z", "to": FEB_1 as f64, "to_as_string": "2024-02-01T00:00:00.000Z", "doc_count": 4
        }]}})
    );
}

#[test]
fn test_metrics_render_like_opensearch() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({
            "avg": {"avg": {"field": "price"}},
            "min": {"min": {"field": "price"}},
            "max": {"max": {"field": "price"}},
            "sum": {"sum": {"field": "price"}},
            "count": {"value_count": {"field": "price"}},
            "levels": {"cardinality": {"field": "level"}},
            "status": {"stats": {"field": "status"}},
            "first": {"min": {"field": "ts"}},
            "actives": {"sum": {"field": "active"}}
        }),
    );
    assert_eq!(
        out,
        json!({
            "avg": {"value": 205.75 / 6.0},
            "min": {"value": 5.0},
            "max": {"value": 100.0},
            "sum": {"value": 205.75},
            "count": {"value": 6},
            "levels": {"value": 4},
            "status": {"count": 7, "min": 200.0, "max": 503.0, "avg": 2208.0 / 7.0, "sum": 2208.0},
            "first": {"value": JAN_1 as f64, "value_as_string": "2024-01-01T00:00:00.000Z"},
            "actives": {"value": 3.0}
        })
    );
}

#[test]
fn test_unmapped_fields_give_empty_results() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({
            "t": {"terms": {"field": "nope"}},
            "a": {"avg": {"field": "nope"}},
            "s": {"sum": {"field": "nope"}},
            "c": {"value_count": {"field": "nope"}},
            "st": {"stats": {"field": "nope"}},
            "h": {"date_histogram": {"field": "nope", "calendar_interval": "month"}}
        }),
    );
    assert_eq!(
        out,
        json!({
            "t": {"doc_count_error_upper_bound": 0, "sum_other_doc_count": 0, "buckets": []},
            "a": {"value": null},
            "s": {"value": 0.0},
            "c": {"value": 0},
            "st": {"count": 0, "min": null, "max": null, "avg": null, "sum": 0.0},
            "h": {"buckets": []}
        })
    );
}

#[test]
fn test_filter_aggregation_and_meta() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({"errors": {"meta": {"color": "red"}, "filter": {"term": {"level": "error"}},
                          "aggs": {"avg_price": {"avg": {"field": "price"}}}}}),
    );
    assert_eq!(
        out,
        json!({"errors": {"meta": {"color": "red"}, "doc_count": 2, "avg_price": {"value": 17.5}}})
    );
    let out = run_aggs(
        &t,
        json!({"active": {"terms": {"field": "active"},
                          "aggs": {"dear": {"filter": {"range": {"price": {"gte": 20}}}}}}}),
    );
    assert_eq!(
        out["active"]["buckets"],
        json!([
            {"key": 1, "key_as_string": "true", "doc_count": 3, "dear": {"doc_count": 1}},
            {"key": 0, "key_as_string": "false", "doc_count": 2, "dear": {"doc_count": 2}}
        ])
    );
    let e = agg_err(&t, json!({"f": {"filter": {"nope": {}}}}));
    assert_eq!(
        (e.code, e.reason.as_str()),
        (ErrorCode::Parsing, "unknown query [nope]")
    );
}

#[test]
fn test_aggregations_merge_across_indices() {
    let a = logs();
    let b = TestIndex::build(
        "other",
        json!({"properties": {"level": {"type": "keyword"}, "price": {"type": "double"}}}),
        &[vec![
            ("x1", json!({"level": "warn", "price": 1.0})),
            ("x2", json!({"level": "trace", "price": 2.0})),
        ]],
    );
    let out = run_aggs_on(
        &[&a, &b],
        json!({"match_all": {}}),
        json!({"levels": {"terms": {"field": "level"}, "aggs": {"p": {"max": {"field": "price"}}}},
               "months": {"date_histogram": {"field": "ts", "calendar_interval": "quarter"}},
               "total": {"sum": {"field": "price"}}}),
        None,
    )
    .unwrap();
    assert_eq!(
        out["levels"]["buckets"],
        json!([
            {"key": "info", "doc_count": 3, "p": {"value": 100.0}},
            {"key": "error", "doc_count": 2, "p": {"value": 30.0}},
            {"key": "warn", "doc_count": 2, "p": {"value": 20.0}},
            {"key": "debug", "doc_count": 1, "p": {"value": null}},
            {"key": "trace", "doc_count": 1, "p": {"value": 2.0}}
        ])
    );
    assert_eq!(out["months"]["buckets"][0]["doc_count"], json!(6));
    assert_eq!(out["total"], json!({"value": 208.75}));
    let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
    assert_eq!(keys, vec!["levels", "months", "total"], "request order");
    // The index that does not map `ts` comes first: keys are still typed as dates.
    let out = run_aggs_on(
        &[&b, &a],
        json!({"term": {"level": "error"}}),
        json!({"days": {"terms": {"field": "ts", "order": {"_key": "asc"}}},
               "first": {"min": {"field": "ts"}}}),
        None,
    )
    .unwrap();
    assert_eq!(
        out["days"]["buckets"][0]["key_as_string"],
        json!("2024-01-02T00:00:00.000Z")
    );
    assert_eq!(
        out["first"]["value_as_string"],
        json!("2024-01-02T00:00:00.000Z")
    );
}

#[test]
fn test_terms_on_object_paths_and_multi_fields() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({"names": {"terms": {"field": "user.name"}},
               "messages": {"terms": {"field": "message.keyword", "size": 1, "order": {"_key": "desc"}}}}),
    );
    assert_eq!(
        out["names"]["buckets"],
        json!([
            {"key": "Carol", "doc_count": 1},
            {"key": "alice", "doc_count": 1},
            {"key": "bob", "doc_count": 1}
        ])
    );
    assert_eq!(
        out["messages"]["buckets"],
        json!([{"key": "the fox and the dog", "doc_count": 1}])
    );
    assert_eq!(out["messages"]["sum_other_doc_count"], json!(6));
}

#[test]
fn test_too_many_buckets_is_reported_with_the_limit() {
    let t = logs();
    let e = run_aggs_on(
        &[&t],
        json!({"match_all": {}}),
        json!({"levels": {"terms": {"field": "level"}}}),
        Some(3),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::TooManyBuckets);
    assert_eq!(
        e.reason,
        "Trying to create too many buckets. Must be less than or equal to: [3] but was [4]. This limit can be set \
         by changing the [search.max_buckets] cluster level setting."
    );
    assert!(
        run_aggs_on(
            &[&t],
            json!({"match_all": {}}),
            json!({"levels": {"terms": {"field": "level"}}}),
            Some(4)
        )
        .is_ok()
    );
}

#[test]
fn test_histogram_gaps_over_max_buckets_are_too_many_buckets_not_memory() {
    // Prices run from 5 to 100: a tiny interval fills in about a billion empty buckets, which
    // OpenSearch counts against `search.max_buckets`; tantivy would fail its memory check first.
    let t = logs();
    let all = json!({"match_all": {}});
    let too_many = |aggs_json: Value| {
        let e =
            run_aggs_on(&[&t], all.clone(), aggs_json.clone(), None).expect_err("too many buckets");
        assert_eq!(e.code, ErrorCode::TooManyBuckets, "{aggs_json}: {e}");
        assert!(
            e.reason.starts_with(
                "Trying to create too many buckets. Must be less than or equal to: [65535] but was ["
            ),
            "{aggs_json}: {}",
            e.reason
        );
        e
    };
    let e = too_many(json!({"a": {"histogram": {"field": "price", "interval": 0.0000001}}}));
    assert!(e.reason.contains("but was [950000001]"), "{}", e.reason);
    // Widened by `extended_bounds`, under a parent's buckets, and over dates.
    too_many(json!({"a": {"histogram": {"field": "price", "interval": 1,
        "extended_bounds": {"min": 0, "max": 1000000000}}}}));
    too_many(json!({"l": {"terms": {"field": "level"},
        "aggs": {"a": {"histogram": {"field": "price", "interval": 0.0000001}}}}}));
    too_many(json!({"d": {"date_histogram": {"field": "ts", "fixed_interval": "1ms"}}}));
    too_many(
        json!({"d": {"date_histogram": {"field": "ts", "calendar_interval": "1d",
        "extended_bounds": {"min": "1000-01-01", "max": "2024-01-01"}}}}),
    );
    // Only the filled range counts: one matching value, no gaps to fill, no empty buckets kept,
    // or `hard_bounds` narrowing the range to what fits.
    let one = run_aggs_on(
        &[&t],
        json!({"term": {"price": 10.5}}),
        json!({"a": {"histogram": {"field": "price", "interval": 0.0000001}}}),
        None,
    )
    .expect("one bucket");
    assert_eq!(
        one["a"]["buckets"].as_array().map(Vec::len),
        Some(1),
        "{one}"
    );
    let sparse = run_aggs(
        &t,
        json!({"a": {"histogram": {"field": "price", "interval": 0.0000001, "min_doc_count": 1}}}),
    );
    assert_eq!(
        sparse["a"]["buckets"].as_array().map(Vec::len),
        Some(6),
        "{sparse}"
    );
    let narrowed = run_aggs(
        &t,
        json!({"a": {"histogram": {"field": "price", "interval": 0.001,
            "hard_bounds": {"min": 5, "max": 20}}}}),
    );
    assert_eq!(
        narrowed["a"]["buckets"].as_array().map(Vec::len),
        Some(15001),
        "{narrowed}"
    );
}

#[test]
fn test_aggregation_errors_use_opensearch_codes_and_reasons() {
    let t = logs();
    let cases = [
        (
            json!({"m": {"terms": {"field": "message"}}}),
            ErrorCode::IllegalArgument,
            "Text fields are not optimised for operations that require per-document field data like aggregations \
             and sorting, so these operations are disabled by default. Please use a keyword field instead. \
             Alternatively, set fielddata=true on [message] in order to load field data by uninverting the \
             inverted index. Note that this can use significant memory.",
        ),
        (
            json!({"x": {"foo": {"field": "level"}}}),
            ErrorCode::Parsing,
            "Unknown aggregation type [foo]",
        ),
        (
            json!({"x": 5}),
            ErrorCode::Parsing,
            "Aggregation definition for [x starts with a [VALUE_NUMBER], expected a [START_OBJECT].",
        ),
        (
            json!({"x": {"aggs": {}}}),
            ErrorCode::Parsing,
            "Missing definition for aggregation [x]",
        ),
        (
            json!({"x": {"terms": {"field": "level"}, "avg": {"field": "price"}}}),
            ErrorCode::Parsing,
            "Found two aggregation type definitions in [x]: [terms] and [avg]",
        ),
        (
            json!({"x": {"terms": {"field": "level", "foo": 1}}}),
            ErrorCode::XContentParse,
            "[terms] unknown field [foo]",
        ),
        (
            json!({"h": {"histogram": {"field": "price", "interval": -1}}}),
            ErrorCode::IllegalArgument,
            "[interval] must be >0 for histogram aggregation [h]",
        ),
        (
            json!({"h": {"date_histogram": {"field": "ts", "calendar_interval": "2M"}}}),
            ErrorCode::IllegalArgument,
            "The supplied interval [2M] could not be parsed as a calendar interval.",
        ),
        (
            json!({"h": {"date_histogram": {"field": "ts", "fixed_interval": "abc"}}}),
            ErrorCode::IllegalArgument,
            "failed to parse setting [date_histogram.fixedInterval] with value [abc] as a time value: unit is \
             missing or unrecognized",
        ),
        (
            json!({"a": {"avg": {"field": "level"}}}),
            ErrorCode::IllegalArgument,
            "Field [level] of type [keyword] is not supported for aggregation [avg]",
        ),
        (
            json!({"a": {"avg": {"field": "price"}, "aggs": {"b": {"max": {"field": "price"}}}}}),
            ErrorCode::IllegalArgument,
            "Aggregator [a] of type [avg] cannot accept sub-aggregations",
        ),
        (
            json!({"t": {"terms": {"field": "level", "size": 0}}}),
            ErrorCode::IllegalArgument,
            "[size] must be greater than 0. Found [0] in [t]",
        ),
        (
            json!({"t": {"terms": {"field": "level", "order": {"nope": "asc"}}}}),
            ErrorCode::IllegalArgument,
            "Invalid aggregation order path [nope]. The provided aggregation [nope] either does not exist, or is a \
             pipeline aggregation and cannot be used to sort the buckets.",
        ),
        (
            json!({"h": {"date_histogram": {"field": "ts", "calendar_interval": "month", "time_zone": "+01:00"}}}),
            ErrorCode::IllegalArgument,
            "[date_histogram] time_zone [+01:00] is not supported; sluice evaluates dates in UTC only (use \"UTC\", \"Z\" \
             or \"+00:00\")",
        ),
    ];
    for (req, code, reason) in cases {
        let e = agg_err(&t, req.clone());
        assert_eq!(e.code, code, "{req}: {e}");
        assert_eq!(e.reason, reason, "{req}");
    }
}

#[test]
fn test_empty_search_renders_empty_aggregations() {
    let t = logs();
    let p = aggs::prepare(
        &json!({"l": {"terms": {"field": "level"}}, "a": {"avg": {"field": "price"}}}),
        &t.ctx(),
        None,
    )
    .unwrap();
    assert_eq!(
        aggs::finish_empty(&p, false).unwrap(),
        json!({"l": {"doc_count_error_upper_bound": 0, "sum_other_doc_count": 0, "buckets": []}, "a": {"value": null}})
    );
    // A query matching nothing goes through the same path.
    let out = run_aggs_on(
        &[&t],
        json!({"match_none": {}}),
        json!({"a": {"avg": {"field": "price"}}}),
        None,
    )
    .unwrap();
    assert_eq!(out, json!({"a": {"value": null}}));
}

// ---------------------------------------------------------------------------------------------
// More queries, aggregation rendering and field types

#[test]
fn test_fuzzy_matches_terms_within_the_edit_distance() {
    let t = logs();
    // "quack" is one substitution from "quick"; AUTO gives 1 edit to a 5-letter term.
    assert_eq!(
        t.ids(json!({"fuzzy": {"message": "quack"}})),
        ids(&["1", "2", "7"])
    );
    assert_eq!(
        t.ids(json!({"fuzzy": {"message": {"value": "quack", "fuzziness": 0}}})),
        ids(&[])
    );
    // "fax" is one edit from "fox".
    assert_eq!(
        t.ids(json!({"fuzzy": {"message": {"value": "fax", "fuzziness": "AUTO"}}})),
        ids(&["1", "4"])
    );
    // AUTO gives no edit below 3 characters.
    assert_eq!(t.ids(json!({"fuzzy": {"tags": "c"}})), ids(&[]));
    assert_eq!(
        t.ids(json!({"fuzzy": {"tags": {"value": "c", "fuzziness": 1}}})),
        ids(&["1", "2"])
    );
    // prefix_length: "fax" keeps its "f", "dax" cannot reach "fox" with the "d" fixed.
    assert_eq!(
        t.ids(json!({"fuzzy": {"message": {"value": "fax", "prefix_length": 1}}})),
        ids(&["1", "4"])
    );
    assert_eq!(
        t.ids(json!({"fuzzy": {"message": {"value": "dox", "prefix_length": 1, "fuzziness": 1}}})),
        ids(&["3", "4"])
    );
    // Transpositions count one edit unless turned off.
    assert_eq!(
        t.ids(json!({"fuzzy": {"message": {"value": "qiuck", "fuzziness": 1}}})),
        ids(&["1", "2", "7"])
    );
    assert_eq!(
        t.ids(json!({"fuzzy": {"message": {"value": "qiuck", "fuzziness": 1, "transpositions": false}}})),
        ids(&[])
    );
    // Keywords are fuzzy as they are; every expansion scores the boost.
    let scores = t.scores(
        json!({"fuzzy": {"user.name": {"value": "alise", "boost": 2.0,
        "rewrite": "constant_score", "max_expansions": 10}}}),
    );
    assert_eq!(
        scores.into_iter().collect::<Vec<_>>(),
        vec![("1".to_string(), 2.0)]
    );
    assert_eq!(t.ids(json!({"fuzzy": {"missing_field": "x"}})), ids(&[]));
}

#[test]
fn test_fuzzy_rejects_bad_input_like_opensearch() {
    let t = logs();
    let parsing = [
        (
            json!({"fuzzy": {"message": {"value": "x", "fuzzy": 1}}}),
            "[fuzzy] query does not support [fuzzy]",
        ),
        (
            json!({"fuzzy": {"message": {"fuzziness": 1}}}),
            "[fuzzy] query malformed, no value specified for field [message]",
        ),
        (
            json!({"fuzzy": {"message": {"value": "x", "fuzziness": 3}}}),
            "[fuzzy] fuzziness [3] is not supported; use AUTO, AUTO:low,high, 0, 1 or 2",
        ),
        (
            json!({"fuzzy": {"a": "x", "b": "y"}}),
            "[fuzzy] query doesn't support multiple fields, found [a] and [b]",
        ),
        (
            json!({"fuzzy": 5}),
            "[fuzzy] query malformed, no start_object after query name",
        ),
    ];
    for (q, reason) in parsing {
        let e = t.query_err(q.clone());
        assert_eq!(e.code, ErrorCode::Parsing, "{q}: {e}");
        assert_eq!(e.reason, reason, "{q}");
    }
    let e = t.query_err(json!({"fuzzy": {"status": "200"}}));
    assert_eq!(e.code, ErrorCode::QueryShard, "{e}");
    assert!(e.reason.contains("Can only use fuzzy queries on keyword and text fields - not on [status] which is of type [integer]"), "{}", e.reason);
    let e = t.query_err(json!({"fuzzy": {"message": {"value": "x", "max_expansions": 0}}}));
    assert_eq!(
        e.reason,
        "failed to create query: maxExpansions must be positive."
    );
    let e = t.query_err(json!({"fuzzy": {"message": {"value": "x", "transpositions": "maybe"}}}));
    assert_eq!(e.code, ErrorCode::XContentParse, "{e}");
}

#[test]
fn test_terms_show_term_doc_count_error_per_bucket() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({"levels": {"terms": {"field": "level", "size": 1, "show_term_doc_count_error": true},
               "aggs": {"s": {"sum": {"field": "status"}}}}}),
    );
    assert_eq!(
        out,
        json!({"levels": {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": 4,
            "buckets": [{"key": "info", "doc_count": 3, "doc_count_error_upper_bound": 0,
                         "s": {"value": 400.0}}]
        }})
    );
}

#[test]
fn test_histogram_format_renders_key_as_string() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({"p": {"histogram": {"field": "price", "interval": 50, "format": "##0.0"}}}),
    );
    assert_eq!(
        out,
        json!({"p": {"buckets": [
            {"key_as_string": "0.0", "key": 0.0, "doc_count": 5},
            {"key_as_string": "50.0", "key": 50.0, "doc_count": 0},
            {"key_as_string": "100.0", "key": 100.0, "doc_count": 1}
        ]}})
    );
    let out = run_aggs(
        &t,
        json!({"p": {"histogram": {"field": "status", "interval": 1000, "format": "#,##0.00", "keyed": true}}}),
    );
    assert_eq!(
        out,
        json!({"p": {"buckets": {"0.00": {"key_as_string": "0.00", "key": 0.0, "doc_count": 7}}}})
    );
    let e = agg_err(
        &t,
        json!({"p": {"histogram": {"field": "price", "interval": 50, "format": "0.0E0"}}}),
    );
    assert_eq!(e.code, ErrorCode::IllegalArgument, "{e}");
}

fn hosts() -> TestIndex {
    TestIndex::build(
        "hosts",
        json!({"properties": {"addr": {"type": "ip"}, "bad": {"type": "ip", "ignore_malformed": true}}}),
        &[vec![
            ("1", json!({"addr": "10.0.0.2", "bad": "nope"})),
            ("2", json!({"addr": "10.0.0.10"})),
            ("3", json!({"addr": "192.168.1.7"})),
            ("4", json!({"addr": "2001:db8::1"})),
            ("5", json!({"addr": ["::ffff:10.0.0.2", "10.1.0.1"]})),
            ("6", json!({"bad": "10.0.0.2"})),
        ]],
    )
}

#[test]
fn test_ip_fields_index_and_answer_term_terms_range_and_exists() {
    let t = hosts();
    assert_eq!(
        t.ids(json!({"term": {"addr": "10.0.0.2"}})),
        ids(&["1", "5"])
    );
    assert_eq!(
        t.ids(json!({"term": {"addr": "2001:DB8:0::1"}})),
        ids(&["4"])
    );
    assert_eq!(
        t.ids(json!({"term": {"addr": "10.0.0.0/24"}})),
        ids(&["1", "2", "5"])
    );
    assert_eq!(
        t.ids(json!({"term": {"addr": "2001:db8::/32"}})),
        ids(&["4"])
    );
    assert_eq!(
        t.ids(json!({"terms": {"addr": ["192.168.1.7", "10.0.0.0/8"]}})),
        ids(&["1", "2", "3", "5"])
    );
    // Address order, not text order: 10.0.0.10 is above 10.0.0.9.
    assert_eq!(
        t.ids(json!({"range": {"addr": {"gt": "10.0.0.9", "lte": "192.168.1.7"}}})),
        ids(&["2", "3", "5"])
    );
    assert_eq!(t.ids(json!({"exists": {"field": "bad"}})), ids(&["6"]));
    assert_eq!(
        t.ids(json!({"match": {"addr": "192.168.1.7"}})),
        ids(&["3"])
    );
    let e = t.query_err(json!({"term": {"addr": "nope"}}));
    assert_eq!(e.code, ErrorCode::QueryShard, "{e}");
    assert_eq!(
        e.reason,
        "failed to create query: 'nope' is not an IP string literal."
    );

    let mut mapping = t.mapping.clone();
    let e = mapping
        .parse_document(&json!({"addr": "300.1.1.1"}), "9")
        .unwrap_err();
    assert!(
        e.reason
            .starts_with("failed to parse field [addr] of type [ip]"),
        "{}",
        e.reason
    );
    let out = run_aggs(&t, json!({"a": {"terms": {"field": "addr", "size": 1}}}));
    assert_eq!(
        out["a"]["buckets"],
        json!([{"key": "10.0.0.2", "doc_count": 2}])
    );
}

// ---------------------------------------------------------------------------------------------
// Date formats

/// 2015-01-01T00:00:00Z in seconds, the `http_logs` corpus's kind of timestamp.
const JAN_1_2015_SECONDS: i64 = 1_420_070_400;

/// Documents whose `@timestamp` is mapped `strict_date_optional_time||epoch_second`, written
/// as epoch seconds (number and string, whole and fractional) and as a date-time.
fn epoch_second_logs() -> TestIndex {
    TestIndex::build(
        "http_logs",
        json!({"properties": {
            "@timestamp": {"type": "date", "format": "strict_date_optional_time||epoch_second"},
            "ms": {"type": "date", "format": "epoch_millis||epoch_second"},
            "iso": {"type": "date", "format": "strict_date_optional_time"}
        }}),
        &[vec![
            ("s", json!({"@timestamp": JAN_1_2015_SECONDS, "ms": 1_000})),
            ("s_str", json!({"@timestamp": "1420070401"})),
            ("s_frac", json!({"@timestamp": "1420070402.250"})),
            (
                "iso",
                json!({"@timestamp": "2015-01-01T00:00:03Z", "iso": "2015-01-01"}),
            ),
        ]],
    )
}

#[test]
fn test_epoch_second_format_reads_seconds_in_documents_and_ranges() {
    let t = epoch_second_logs();
    let ms = |s: i64| s * 1000;
    // Every form lands on the second it names: a range in milliseconds with the query's own
    // format finds each document at its instant.
    let at = |from_ms: i64, to_ms: i64| {
        t.ids(json!({"range": {"@timestamp": {"gte": from_ms, "lte": to_ms, "format": "epoch_millis"}}}))
    };
    assert_eq!(
        at(ms(JAN_1_2015_SECONDS), ms(JAN_1_2015_SECONDS)),
        ids(&["s"])
    );
    assert_eq!(
        at(ms(JAN_1_2015_SECONDS + 1), ms(JAN_1_2015_SECONDS + 1)),
        ids(&["s_str"])
    );
    assert_eq!(
        at(
            ms(JAN_1_2015_SECONDS + 2) + 250,
            ms(JAN_1_2015_SECONDS + 2) + 250
        ),
        ids(&["s_frac"])
    );
    assert_eq!(
        at(ms(JAN_1_2015_SECONDS + 3), ms(JAN_1_2015_SECONDS + 3)),
        ids(&["iso"])
    );

    // Range bounds are read in the field's format: numbers and numeric strings are seconds,
    // date-times stay date-times.
    assert_eq!(
        t.ids(
            json!({"range": {"@timestamp": {"gte": JAN_1_2015_SECONDS + 1, "lt": "1420070403"}}})
        ),
        ids(&["s_frac", "s_str"])
    );
    assert_eq!(
        t.ids(json!({"range": {"@timestamp": {"gt": "2015-01-01T00:00:01Z"}}})),
        ids(&["iso", "s_frac"])
    );
    // A whole second as the upper end of `lte` covers its last millisecond, as OpenSearch's
    // round-up parser fills the missing fraction; `lt` does not.
    assert_eq!(
        t.ids(json!({"range": {"@timestamp": {"gte": "1420070402", "lte": "1420070402"}}})),
        ids(&["s_frac"])
    );
    assert_eq!(
        t.ids(json!({"range": {"@timestamp": {"gte": "1420070402", "lt": "1420070402.250"}}})),
        ids(&[])
    );
    // Date math on an epoch-second anchor.
    assert_eq!(
        t.ids(
            json!({"range": {"@timestamp": {"gte": "1420070400||+2s", "lt": "1420070400||+3s"}}})
        ),
        ids(&["s_frac"])
    );
    // `term` on a date field reads the value in the field's format too.
    assert_eq!(
        t.ids(json!({"term": {"@timestamp": JAN_1_2015_SECONDS}})),
        ids(&["s"])
    );
    // The first epoch format of the list reads numbers: `epoch_millis||epoch_second` is millis.
    assert_eq!(
        t.ids(json!({"range": {"ms": {"gte": 1000, "lte": 1000, "format": "epoch_millis"}}})),
        ids(&["s"])
    );
    // A format without an epoch part reads only date-times.
    assert_eq!(
        t.ids(json!({"range": {"iso": {"gte": "2015-01-01", "lte": "2015-01-01"}}})),
        ids(&["iso"])
    );
}

#[test]
fn test_date_format_errors_name_the_format() {
    let t = epoch_second_logs();
    // A date-time-only field refuses a number, in OpenSearch's words for the document.
    let mut mapping = t.mapping.clone();
    let e = mapping
        .parse_document(&json!({"iso": 1_420_070_400}), "9")
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::MapperParsing, "{e}");
    assert!(
        e.reason
            .starts_with("failed to parse field [iso] of type [date]"),
        "{}",
        e.reason
    );
    // An `epoch_second` field refuses a value that is neither seconds nor a date-time.
    let e = mapping
        .parse_document(&json!({"@timestamp": "yesterday"}), "9")
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::MapperParsing, "{e}");

    // A range bound no part of the format reads names the format.
    let e = t.query_err(json!({"range": {"iso": {"gte": "1420070400"}}}));
    assert!(
        e.reason.contains(
            "failed to parse date field [1420070400] with format [strict_date_optional_time]"
        ),
        "{}",
        e.reason
    );
    // An unknown format in the query or in the mapping is refused.
    let e = t.query_err(json!({"range": {"@timestamp": {"gte": 1, "format": "yyyy"}}}));
    assert_eq!(e.code, ErrorCode::IllegalArgument, "{e}");
    assert!(
        e.reason.starts_with("Invalid format: [yyyy]"),
        "{}",
        e.reason
    );
    let e = Mapping::parse(&json!({"properties": {
        "t": {"type": "date", "format": "strict_date_optional_time||epoch_minute"}
    }}))
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::MapperParsing, "{e}");
    assert!(
        e.reason
            .contains("Invalid format: [strict_date_optional_time||epoch_minute]"),
        "{}",
        e.reason
    );
    // The mapping echoes the format as given.
    assert!(
        Mapping::parse(&json!({"properties": {"t": {"type": "date", "format": "epoch_second"}}}))
            .is_ok()
    );
}

// ---------------------------------------------------------------------------------------------
// Percentiles

/// Asserts that `actual` is a number within 2% of `expected` (tantivy's sketch is approximate).
fn assert_near(actual: &Value, expected: f64) {
    let v = actual
        .as_f64()
        .unwrap_or_else(|| panic!("{actual} is not a number"));
    assert!(
        (v - expected).abs() <= expected.abs() * 0.02,
        "{v} is not near {expected}"
    );
}

#[test]
fn test_percentiles_keyed_default_and_list_shapes() {
    let t = logs();
    // price: 5, 10.5, 20, 30, 40.25, 100 (six documents).
    let out = run_aggs(
        &t,
        json!({
            "default": {"percentiles": {"field": "price"}},
            "keyed": {"percentiles": {"field": "price", "percents": [99, 50, 0]}},
            "list": {"percentiles": {"field": "price", "percents": [50, 100], "keyed": false}}
        }),
    );
    let default = out["default"]["values"].as_object().expect("keyed object");
    let keys: Vec<&str> = default.keys().map(String::as_str).collect();
    assert_eq!(keys, ["1.0", "5.0", "25.0", "50.0", "75.0", "95.0", "99.0"]);
    // Percents are sorted, as OpenSearch sorts them.
    let keyed = out["keyed"]["values"].as_object().expect("keyed object");
    let keys: Vec<&str> = keyed.keys().map(String::as_str).collect();
    assert_eq!(keys, ["0.0", "50.0", "99.0"]);
    assert_near(&keyed["0.0"], 5.0);
    // An estimate between the two largest values (tantivy's sketch does not interpolate).
    let p99 = keyed["99.0"].as_f64().expect("p99");
    assert!((40.25 * 0.98..=100.0 * 1.02).contains(&p99), "{p99}");
    let list = out["list"]["values"].as_array().expect("list");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["key"], json!(50.0));
    assert_eq!(list[1]["key"], json!(100.0));
    assert_near(&list[1]["value"], 100.0);
    let median = list[0]["value"].as_f64().expect("median");
    assert!((20.0 * 0.98..=30.0 * 1.02).contains(&median), "{median}");
}

#[test]
fn test_percentiles_without_values_are_null_and_dates_have_strings() {
    let t = logs();
    let out = run_aggs(
        &t,
        json!({
            "none": {"percentiles": {"field": "nope", "percents": [50]}},
            "none_list": {"percentiles": {"field": "nope", "percents": [50], "keyed": false}},
            "ts": {"percentiles": {"field": "ts", "percents": [0]}},
            "per_level": {"terms": {"field": "level", "size": 1},
                          "aggs": {"p": {"percentiles": {"field": "status", "percents": [100]}}}}
        }),
    );
    assert_eq!(out["none"], json!({"values": {"50.0": null}}));
    assert_eq!(
        out["none_list"],
        json!({"values": [{"key": 50.0, "value": null}]})
    );
    let ts = &out["ts"]["values"];
    assert_near(&ts["0.0"], JAN_1 as f64);
    assert!(ts["0.0_as_string"].is_string(), "{ts}");
    // info: statuses 200 and 200 (document 7 has none).
    let bucket = &out["per_level"]["buckets"][0];
    assert_eq!(bucket["key"], json!("info"));
    assert_near(&bucket["p"]["values"]["100.0"], 200.0);
}

#[test]
fn test_percentiles_errors_use_opensearch_words() {
    let t = logs();
    let e = agg_err(
        &t,
        json!({"p": {"percentiles": {"field": "price", "percents": [50, 101]}}}),
    );
    assert_eq!(e.code, ErrorCode::IllegalArgument, "{e}");
    assert_eq!(e.reason, "percent must be in [0,100], got [101.0]: [p]");
    let e = agg_err(
        &t,
        json!({"p": {"percentiles": {"field": "price", "percents": []}}}),
    );
    assert_eq!(e.code, ErrorCode::IllegalArgument, "{e}");
    assert_eq!(e.reason, "[percents] must not be empty: [p]");
    let e = agg_err(
        &t,
        json!({"p": {"percentiles": {"field": "price", "bogus": 1}}}),
    );
    assert_eq!(e.code, ErrorCode::XContentParse, "{e}");
    assert_eq!(e.reason, "[percentiles] unknown field [bogus]");
    let e = agg_err(&t, json!({"p": {"percentiles": {"field": "level"}}}));
    assert_eq!(e.code, ErrorCode::IllegalArgument, "{e}");
    let e = agg_err(
        &t,
        json!({"p": {"percentiles": {"field": "price"}, "aggs": {"a": {"avg": {"field": "price"}}}}}),
    );
    assert_eq!(e.code, ErrorCode::IllegalArgument, "{e}");
}

#[test]
fn test_terms_order_by_a_percentile_is_refused_clearly() {
    let t = logs();
    let e = agg_err(
        &t,
        json!({"levels": {"terms": {"field": "level", "order": {"p.50": "desc"}},
                          "aggs": {"p": {"percentiles": {"field": "price", "percents": [50]}}}}}),
    );
    assert_eq!(e.code, ErrorCode::IllegalArgument, "{e}");
    assert!(
        e.reason.contains("percentiles aggregation [p]"),
        "{}",
        e.reason
    );
}
