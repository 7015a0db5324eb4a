//! `terms` lookup, by id and by query, through the engine: values, errors, limits, and the
//! nested-search hook that lets the server make each lookup search a child task.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};
use sluice_engine::index::{DocOp, OpType};
use sluice_engine::{
    Engine, EngineError, ErrorCode, NestedScope, NestedSearchHook, SearchContext, SearchRequest,
};

fn put(id: &str, source: Value) -> DocOp {
    DocOp::index(Some(id.to_string()), source, OpType::Index)
}

fn index(engine: &Engine, name: &str, body: Value, docs: Vec<(&str, Value)>) {
    engine.create_index(name, &body).expect("create index");
    let ops = docs
        .into_iter()
        .map(|(id, source)| (name.to_string(), put(id, source)))
        .collect();
    let results = engine.bulk(ops);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    engine.refresh(name).expect("refresh");
}

/// `users` (the search target), `groups` (looked up by query) and `classes` (looked up by id),
/// after OpenSearch's documentation examples.
fn engine() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    let users = json!({"mappings": {"properties": {"username": {"type": "keyword"}}}});
    let user_docs = |names: &[&'static str]| -> Vec<(&'static str, Value)> {
        names.iter().map(|n| (*n, json!({"username": n}))).collect()
    };
    index(
        &engine,
        "users",
        users.clone(),
        user_docs(&["alice", "bob", "carol", "dave", "erin"]),
    );
    index(&engine, "users2", users, user_docs(&["alice", "carol"]));
    index(
        &engine,
        "groups",
        json!({"mappings": {"properties": {
            "group": {"type": "keyword"},
            "members": {"type": "keyword"}
        }}}),
        vec![
            ("1", json!({"group": "g1", "members": ["alice", "bob"]})),
            ("2", json!({"group": "g1", "members": "carol"})),
            ("3", json!({"group": "g1"})),
            ("4", json!({"group": "g1", "members": []})),
            ("5", json!({"group": "g1", "members": null})),
            ("6", json!({"group": "g2", "members": "carol"})),
            (
                "7",
                json!({"group": "g3", "team": [{"lead": ["dave"]}, {"lead": "erin"}]}),
            ),
            ("8", json!({"group": "g4", "team": {"lead": "bob"}})),
        ],
    );
    index(
        &engine,
        "classes",
        json!({}),
        vec![
            (
                "101",
                json!({"name": "CS101", "enrolled": ["alice", "bob"]}),
            ),
            (
                "102",
                json!({"name": "CS102", "enrolled_students": {"id_list": ["carol", "dave"]}}),
            ),
            ("7", json!({"name": "CS7", "enrolled": "erin"})),
        ],
    );
    (dir, engine)
}

fn search(engine: &Engine, index: &str, query: Value) -> Result<Value, EngineError> {
    engine.search(
        index,
        &json!({"query": query, "size": 100}),
        &SearchContext::default(),
    )
}

/// The sorted `_id`s of a search's hits.
fn ids(resp: &Value) -> Vec<String> {
    let mut ids: Vec<String> = resp["hits"]["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["_id"].as_str().expect("_id").to_string())
        .collect();
    ids.sort();
    ids
}

fn hit_ids(engine: &Engine, query: Value) -> Vec<String> {
    let resp = search(engine, "users", query.clone())
        .unwrap_or_else(|e| panic!("query {query} failed: {e}"));
    ids(&resp)
}

fn by_query(query: Value, path: &str) -> Value {
    json!({"terms": {"username": {"index": "groups", "path": path, "query": query}}})
}

#[test]
fn test_lookup_by_id_takes_the_values_of_one_document() {
    let (_dir, engine) = engine();
    let q = json!({"terms": {"username": {"index": "classes", "id": "101", "path": "enrolled"}}});
    assert_eq!(hit_ids(&engine, q), ["alice", "bob"]);
    let dotted = json!({"terms": {"username": {
        "index": "classes", "id": "102", "path": "enrolled_students.id_list"
    }}});
    assert_eq!(hit_ids(&engine, dotted), ["carol", "dave"]);
    // A numeric id and a scalar value; `routing` is accepted (one shard per index).
    let numeric = json!({"terms": {"username": {"index": "classes", "id": 7, "path": "enrolled", "routing": "x"}}});
    assert_eq!(hit_ids(&engine, numeric), ["erin"]);
}

#[test]
fn test_lookup_by_query_flattens_the_values_of_every_hit() {
    let (_dir, engine) = engine();
    // Arrays, a scalar, a missing field, an empty array and a null, as OpenSearch documents.
    let q = by_query(json!({"term": {"group": "g1"}}), "members");
    assert_eq!(hit_ids(&engine, q), ["alice", "bob", "carol"]);
    // A dotted path through an array of objects.
    let q = by_query(json!({"term": {"group": "g3"}}), "team.lead");
    assert_eq!(hit_ids(&engine, q), ["dave", "erin"]);
    let q = by_query(json!({"terms": {"group": ["g2", "g4"]}}), "team.lead");
    assert_eq!(hit_ids(&engine, q), ["bob"]);
}

#[test]
fn test_lookup_without_values_matches_nothing() {
    let (_dir, engine) = engine();
    let no_hits = by_query(json!({"term": {"group": "nope"}}), "members");
    assert!(hit_ids(&engine, no_hits).is_empty());
    let no_field = by_query(json!({"term": {"group": "g3"}}), "members");
    assert!(hit_ids(&engine, no_field).is_empty());
    let no_doc =
        json!({"terms": {"username": {"index": "classes", "id": "999", "path": "enrolled"}}});
    assert!(hit_ids(&engine, no_doc).is_empty());
}

#[test]
fn test_lookup_on_a_missing_index_is_index_not_found() {
    let (_dir, engine) = engine();
    for lookup in [
        json!({"index": "nope", "id": "1", "path": "p"}),
        json!({"index": "nope", "query": {"match_all": {}}, "path": "p"}),
    ] {
        let err = search(&engine, "users", json!({"terms": {"username": lookup}})).unwrap_err();
        assert_eq!(err.code, ErrorCode::IndexNotFound, "{err}");
        assert_eq!(err.code.status(), 404);
        assert_eq!(err.reason, "no such index [nope]");
    }
}

#[test]
fn test_lookup_needs_exactly_one_of_id_and_query() {
    let (_dir, engine) = engine();
    let both = json!({"terms": {"username": {
        "index": "groups", "id": "1", "query": {"match_all": {}}, "path": "members"
    }}});
    let err = search(&engine, "users", both).unwrap_err();
    assert_eq!(err.code, ErrorCode::XContentParse, "{err}");
    assert_eq!(err.code.status(), 400);
    assert_eq!(
        err.root_cause().reason,
        "[terms] query lookup element cannot specify both id and query."
    );
    let neither = json!({"terms": {"username": {"index": "groups", "path": "members"}}});
    let err = search(&engine, "users", neither).unwrap_err();
    assert_eq!(err.code, ErrorCode::XContentParse, "{err}");
    assert_eq!(err.root_cause().code, ErrorCode::IllegalArgument);
    assert_eq!(
        err.root_cause().reason,
        "[terms] query lookup element requires specifying either the id or the query."
    );
    let no_path = json!({"terms": {"username": {"index": "groups", "id": "1"}}});
    let err = search(&engine, "users", no_path).unwrap_err();
    assert_eq!(err.code, ErrorCode::IllegalArgument, "{err}");
    assert_eq!(err.reason, "Required [path]");
}

#[test]
fn test_lookup_rejects_unknown_and_unsupported_options() {
    let (_dir, engine) = engine();
    let typo = json!({"terms": {"username": {"index": "classes", "id": "101", "path": "enrolled", "type": "_doc"}}});
    let err = search(&engine, "users", typo).unwrap_err();
    assert_eq!(err.code, ErrorCode::XContentParse, "{err}");
    assert_eq!(err.reason, "[terms_lookup] unknown field [type]");
    let store = json!({"terms": {"username": {"index": "classes", "id": "101", "path": "enrolled", "store": true}}});
    let err = search(&engine, "users", store).unwrap_err();
    assert_eq!(err.code.status(), 400, "{err}");
    assert!(err.reason.contains("[store]"), "{err}");
    let not_stored = json!({"terms": {"username": {"index": "classes", "id": "101", "path": "enrolled", "store": false}}});
    assert_eq!(hit_ids(&engine, not_stored), ["alice", "bob"]);
    let bitmap = json!({"terms": {"username": ["alice"], "value_type": "bitmap"}});
    let err = search(&engine, "users", bitmap).unwrap_err();
    assert!(err.reason.contains("[value_type] [bitmap]"), "{err}");
}

#[test]
fn test_terms_over_max_terms_count_fail_with_opensearch_error() {
    let (_dir, engine) = engine();
    index(
        &engine,
        "capped",
        json!({
            "settings": {"index": {"max_terms_count": 2}},
            "mappings": {"properties": {"username": {"type": "keyword"}}}
        }),
        vec![("alice", json!({"username": "alice"}))],
    );
    let expected = "The number of terms [3] used in the Terms Query request has exceeded the \
                    allowed maximum of [2]. This maximum can be set by changing the \
                    [index.max_terms_count] index level setting.";
    for query in [
        by_query(json!({"term": {"group": "g1"}}), "members"),
        json!({"terms": {"username": ["alice", "bob", "carol"]}}),
    ] {
        let err = search(&engine, "capped", query).unwrap_err();
        assert_eq!(err.code, ErrorCode::SearchPhaseExecution, "{err}");
        assert_eq!(err.root_cause().code, ErrorCode::IllegalArgument);
        assert_eq!(err.root_cause().reason, expected);
        assert_eq!(err.root_cause().index.as_deref(), Some("capped"));
    }
    // Two terms are within the cap.
    let ok = search(
        &engine,
        "capped",
        json!({"terms": {"username": ["alice", "bob"]}}),
    );
    assert_eq!(ids(&ok.unwrap()), ["alice"]);
}

#[test]
fn test_lookup_by_query_fails_when_more_documents_match_than_it_fetches() {
    let (_dir, engine) = engine();
    index(
        &engine,
        "small_groups",
        json!({"settings": {"index": {"max_terms_count": 2}}}),
        vec![
            ("1", json!({"members": "alice"})),
            ("2", json!({"members": "bob"})),
            ("3", json!({"members": "carol"})),
        ],
    );
    let q = json!({"terms": {"username": {
        "index": "small_groups", "path": "members", "query": {"match_all": {}}
    }}});
    let err = search(&engine, "users", q).unwrap_err();
    assert_eq!(err.code, ErrorCode::IllegalArgument, "{err}");
    assert_eq!(
        err.reason,
        "Terms lookup subquery total hits [3] exceed fetch limit [2]; filter may be incomplete."
    );
    let fits = json!({"terms": {"username": {
        "index": "small_groups", "path": "members", "query": {"ids": {"values": ["1", "3"]}}
    }}});
    assert_eq!(hit_ids(&engine, fits), ["alice", "carol"]);
}

#[test]
fn test_lookup_works_inside_bool_clauses_and_filter_aggregations() {
    let (_dir, engine) = engine();
    let g1 = by_query(json!({"term": {"group": "g1"}}), "members");
    let by_id =
        json!({"terms": {"username": {"index": "classes", "id": "101", "path": "enrolled"}}});
    let q = json!({"bool": {"filter": [g1.clone()], "must_not": by_id}});
    assert_eq!(hit_ids(&engine, q), ["carol"]);
    let q = json!({"bool": {"should": [
        {"constant_score": {"filter": by_query(json!({"term": {"group": "g3"}}), "team.lead")}},
        {"bool": {"must": g1.clone()}}
    ]}});
    assert_eq!(
        hit_ids(&engine, q),
        ["alice", "bob", "carol", "dave", "erin"]
    );
    let resp = engine
        .search(
            "users",
            &json!({"size": 0, "aggs": {"in_g1": {"filter": g1}}}),
            &SearchContext::default(),
        )
        .unwrap();
    assert_eq!(resp["aggregations"]["in_g1"]["doc_count"], 3, "{resp}");
}

#[test]
fn test_lookup_works_in_count_and_scroll() {
    let (_dir, engine) = engine();
    let g1 = by_query(json!({"term": {"group": "g1"}}), "members");
    let n = engine
        .count(
            "users,users2",
            &Default::default(),
            &g1,
            &SearchContext::default(),
        )
        .unwrap();
    assert_eq!(n, 5);
    let req = SearchRequest::parse(
        Some(&json!({"query": g1, "size": 2, "sort": ["_doc"]})),
        &Default::default(),
    )
    .unwrap();
    let first = engine
        .open_scroll(
            "users",
            &req,
            std::time::Duration::from_secs(60),
            &SearchContext::default(),
        )
        .unwrap();
    let scroll_id = first["_scroll_id"].as_str().unwrap().to_string();
    let second = engine
        .continue_scroll(&scroll_id, None, &SearchContext::default())
        .unwrap();
    let mut all = ids(&first);
    all.extend(ids(&second));
    all.sort();
    assert_eq!(all, ["alice", "bob", "carol"]);
}

#[test]
fn test_classic_terms_array_still_works() {
    let (_dir, engine) = engine();
    assert_eq!(
        hit_ids(
            &engine,
            json!({"terms": {"username": ["bob", "dave", "zed"]}})
        ),
        ["bob", "dave"]
    );
    assert_eq!(
        hit_ids(
            &engine,
            json!({"terms": {"username": ["erin"], "boost": 2.0, "value_type": "default"}})
        ),
        ["erin"]
    );
    assert!(hit_ids(&engine, json!({"terms": {"username": []}})).is_empty());
}

/// A guard that counts how many nested searches are running.
struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a [`RecordingHook`] does when a nested search enters.
enum Behaviour {
    /// Hands out a fresh context with its own flag.
    Fresh,
    /// Hands out a context that is already cancelled.
    PreCancelled,
    /// Sets this flag (the outer request's) and hands out a fresh context.
    CancelOuter(Arc<AtomicBool>),
    /// Fails with this error.
    Fail(EngineError),
}

struct RecordingHook {
    behaviour: Behaviour,
    /// (index, description, nested searches already running) of each call.
    calls: Mutex<Vec<(String, String, usize)>>,
    live: Arc<AtomicUsize>,
}

impl RecordingHook {
    fn new(behaviour: Behaviour) -> Arc<RecordingHook> {
        Arc::new(RecordingHook {
            behaviour,
            calls: Mutex::new(Vec::new()),
            live: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn ctx(self: &Arc<Self>) -> SearchContext {
        SearchContext {
            cancelled: Some(Arc::new(AtomicBool::new(false))),
            nested: Some(self.clone()),
            ..Default::default()
        }
    }
}

impl NestedSearchHook for RecordingHook {
    fn enter(&self, index: &str, description: &str) -> Result<NestedScope, EngineError> {
        let running = self.live.load(Ordering::SeqCst);
        self.calls
            .lock()
            .push((index.to_string(), description.to_string(), running));
        let flag = Arc::new(AtomicBool::new(false));
        match &self.behaviour {
            Behaviour::Fresh => {}
            Behaviour::PreCancelled => flag.store(true, Ordering::SeqCst),
            Behaviour::CancelOuter(outer) => outer.store(true, Ordering::SeqCst),
            Behaviour::Fail(e) => return Err(e.clone()),
        }
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(NestedScope {
            ctx: SearchContext {
                cancelled: Some(flag),
                ..Default::default()
            },
            guard: Box::new(LiveGuard(self.live.clone())),
        })
    }
}

#[test]
fn test_hook_is_called_once_per_lookup_and_its_guard_dropped_after() {
    let (_dir, engine) = engine();
    let hook = RecordingHook::new(Behaviour::Fresh);
    let g1 = by_query(json!({"term": {"group": "g1"}}), "members");
    // Two target indices, one lookup: one nested search.
    let resp = engine
        .search(
            "users,users2",
            &json!({"query": g1, "size": 100}),
            &hook.ctx(),
        )
        .unwrap();
    assert_eq!(resp["hits"]["total"]["value"], 5, "{resp}");
    let calls = hook.calls.lock().clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, "groups");
    assert!(
        calls[0]
            .1
            .starts_with("indices[groups], search_type[QUERY_THEN_FETCH], source["),
        "{}",
        calls[0].1
    );
    assert!(
        calls[0].1.contains(r#""term":{"group":"g1"}"#),
        "{}",
        calls[0].1
    );
    assert_eq!(hook.live.load(Ordering::SeqCst), 0, "guard dropped");
    // A lookup by id is a document get, not a search: no nested search.
    let by_id =
        json!({"terms": {"username": {"index": "classes", "id": "101", "path": "enrolled"}}});
    engine
        .search("users", &json!({"query": by_id}), &hook.ctx())
        .unwrap();
    assert_eq!(hook.calls.lock().len(), 1);
}

#[test]
fn test_guard_lives_while_a_lookup_nested_in_the_lookup_runs() {
    let (_dir, engine) = engine();
    let hook = RecordingHook::new(Behaviour::Fresh);
    // The members of every group carol is in: a lookup by query inside a lookup's query.
    let inner = json!({"terms": {"group": {
        "index": "groups", "path": "group", "query": {"term": {"members": "carol"}}
    }}});
    let outer = by_query(inner, "members");
    let resp = engine
        .search("users", &json!({"query": outer, "size": 100}), &hook.ctx())
        .unwrap();
    // carol is in g1 and g2: every member of g1 and g2.
    assert_eq!(ids(&resp), ["alice", "bob", "carol"]);
    let calls = hook.calls.lock().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].2, 0, "the outer lookup enters first");
    assert_eq!(
        calls[1].2, 1,
        "the outer lookup's guard lives while its own lookup runs"
    );
    assert_eq!(hook.live.load(Ordering::SeqCst), 0);
}

#[test]
fn test_pre_cancelled_nested_context_cancels_the_search() {
    let (_dir, engine) = engine();
    let hook = RecordingHook::new(Behaviour::PreCancelled);
    let g1 = by_query(json!({"term": {"group": "g1"}}), "members");
    let err = engine
        .search("users", &json!({"query": g1}), &hook.ctx())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::TaskCancelled, "{err}");
    assert_eq!(hook.calls.lock().len(), 1);
    assert_eq!(
        hook.live.load(Ordering::SeqCst),
        0,
        "guard dropped on failure"
    );
}

#[test]
fn test_cancelling_the_outer_request_stops_the_nested_search() {
    let (_dir, engine) = engine();
    let outer_flag = Arc::new(AtomicBool::new(false));
    // The hook cancels the outer request and hands out a live child context: the nested search
    // must see the outer cancellation through its parent and stop before it starts its own
    // nested lookup (which would call the hook again).
    let hook = RecordingHook::new(Behaviour::CancelOuter(outer_flag.clone()));
    let ctx = SearchContext {
        cancelled: Some(outer_flag),
        nested: Some(hook.clone()),
        ..Default::default()
    };
    let inner = json!({"terms": {"group": {
        "index": "groups", "path": "group", "query": {"term": {"members": "carol"}}
    }}});
    let err = engine
        .search("users", &json!({"query": by_query(inner, "members")}), &ctx)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::TaskCancelled, "{err}");
    assert_eq!(
        hook.calls.lock().len(),
        1,
        "the nested search stopped first"
    );
    assert_eq!(hook.live.load(Ordering::SeqCst), 0);
}

#[test]
fn test_hook_error_aborts_the_outer_search_with_that_error() {
    let (_dir, engine) = engine();
    let rejected = EngineError::new(
        ErrorCode::RejectedExecution,
        "rejected by workload group [g], bucket [group], limit [1], tier [node]",
    );
    let hook = RecordingHook::new(Behaviour::Fail(rejected.clone()));
    let q = json!({"bool": {"filter": by_query(json!({"term": {"group": "g1"}}), "members")}});
    let err = engine
        .search("users", &json!({"query": q.clone()}), &hook.ctx())
        .unwrap_err();
    assert_eq!(err, rejected);
    let err = engine
        .count("users", &Default::default(), &q, &hook.ctx())
        .unwrap_err();
    assert_eq!(err, rejected);
    assert_eq!(hook.calls.lock().len(), 2);
    assert_eq!(hook.live.load(Ordering::SeqCst), 0);
}

#[test]
fn test_cancelled_request_runs_no_lookup() {
    let (_dir, engine) = engine();
    let hook = RecordingHook::new(Behaviour::Fresh);
    let ctx = hook.ctx();
    ctx.cancelled
        .as_ref()
        .unwrap()
        .store(true, Ordering::SeqCst);
    let g1 = by_query(json!({"term": {"group": "g1"}}), "members");
    let err = engine
        .search("users", &json!({"query": g1}), &ctx)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::TaskCancelled, "{err}");
    assert!(hook.calls.lock().is_empty());
}
