//! Durability: acknowledged writes survive a crash (no commit) through translog replay, and a
//! failed write never disturbs the others.

use serde_json::json;
use sluice_engine::index::{DocOp, OpType};
use sluice_engine::{Engine, SearchContext};

fn put(id: &str, source: serde_json::Value) -> DocOp {
    DocOp::index(Some(id.to_string()), source, OpType::Index)
}

#[test]
fn test_unrefreshed_writes_are_replayed_after_crash() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path()).unwrap();
        let results = engine.bulk(vec![
            ("logs".into(), put("1", json!({"msg": "one", "n": 1}))),
            ("logs".into(), put("2", json!({"msg": "two", "n": 2}))),
            (
                "logs".into(),
                DocOp::Delete {
                    id: "1".into(),
                    versioning: Default::default(),
                },
            ),
            (
                "logs".into(),
                put("3", json!({"msg": "three", "extra": "new field"})),
            ),
        ]);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        // Dropped without a refresh or flush: tantivy discards uncommitted documents, as a
        // crash would; only the translog has them.
    }
    let engine = Engine::open(dir.path()).unwrap();
    let h = engine.index("logs").expect("index survives");
    assert!(h.get("1").unwrap().is_none(), "delete replayed");
    assert_eq!(h.get("2").unwrap().unwrap().source["msg"], "two");
    assert_eq!(h.get("3").unwrap().unwrap().version, 1);
    assert!(
        h.mapping().resolve("extra.keyword").is_some(),
        "dynamic mapping kept"
    );
    let resp = engine
        .search(
            "logs",
            &json!({"query": {"match_all": {}}}),
            &SearchContext::default(),
        )
        .unwrap();
    assert_eq!(resp["hits"]["total"]["value"], 2, "{resp}");
    // A second restart replays nothing twice.
    drop(h);
    drop(engine);
    let engine = Engine::open(dir.path()).unwrap();
    let resp = engine
        .search("logs", &json!({}), &SearchContext::default())
        .unwrap();
    assert_eq!(resp["hits"]["total"]["value"], 2, "{resp}");
    assert_eq!(
        engine
            .index("logs")
            .unwrap()
            .get("2")
            .unwrap()
            .unwrap()
            .seq_no,
        1
    );
}

/// A document deleted and indexed again with no commit between, then a crash: after replay
/// it is live for every write check, not shadowed by the delete's tombstone (which made
/// `_update_by_query`, whose writes carry `if_seq_no`, conflict on it, and a plain index
/// answer `created` with a repeated version).
#[test]
fn test_a_document_deleted_then_indexed_again_is_live_after_a_crash() {
    use sluice_engine::versioning::Versioning;
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path()).unwrap();
        let first = engine.bulk(vec![("t".into(), put("a", json!({"n": 1})))]);
        assert!(first.iter().all(Result::is_ok), "{first:?}");
        engine.refresh("t").unwrap();
        let results = engine.bulk(vec![
            (
                "t".into(),
                DocOp::Delete {
                    id: "a".into(),
                    versioning: Default::default(),
                },
            ),
            ("t".into(), put("a", json!({"n": 2}))),
        ]);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        // Dropped without a refresh: the delete and the new version are only in the translog.
    }
    let engine = Engine::open(dir.path()).unwrap();
    let h = engine.index("t").expect("index survives");
    let doc = h.get("a").unwrap().expect("live after replay");
    assert_eq!((doc.version, doc.seq_no), (3, 2));
    assert_eq!(doc.source["n"], 2);
    // A write conditioned on the document's sequence number, as `_update_by_query` sends.
    let conditional = DocOp::Index {
        id: Some("a".into()),
        source: json!({"n": 3}),
        op_type: OpType::Index,
        versioning: Versioning {
            if_seq_no: Some(2),
            if_primary_term: Some(1),
            ..Versioning::default()
        },
    };
    let written = engine.bulk(vec![("t".into(), conditional)]);
    let written = written[0].as_ref().expect("no version conflict");
    assert_eq!((written.result, written.version), ("updated", 4));
    let plain = engine.bulk(vec![("t".into(), put("a", json!({"n": 4})))]);
    let plain = plain[0].as_ref().expect("indexed");
    assert_eq!((plain.result, plain.version), ("updated", 5));
}

#[test]
fn test_failed_bulk_item_leaves_others_intact() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    engine
        .create_index(
            "t",
            &json!({"mappings": {"properties": {"n": {"type": "integer"}}}}),
        )
        .unwrap();
    let results = engine.bulk(vec![
        ("t".into(), put("a", json!({"n": 1}))),
        ("t".into(), put("b", json!({"n": "not a number"}))),
        (
            "t".into(),
            DocOp::index(Some("a".into()), json!({"n": 5}), OpType::Create),
        ),
        ("t".into(), put("c", json!({"n": 3}))),
    ]);
    assert!(results[0].is_ok());
    assert_eq!(
        results[1].as_ref().unwrap_err().code,
        sluice_engine::ErrorCode::MapperParsing
    );
    assert_eq!(
        results[2].as_ref().unwrap_err().code,
        sluice_engine::ErrorCode::VersionConflict
    );
    assert!(results[3].is_ok());
    engine.refresh("t").unwrap();
    let resp = engine
        .search(
            "t",
            &json!({"sort": [{"n": "asc"}]}),
            &SearchContext::default(),
        )
        .unwrap();
    let ids: Vec<&str> = resp["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "c"]);
    assert_eq!(resp["hits"]["hits"][0]["_source"], json!({"n": 1}));
}

#[test]
fn test_cancelled_search_stops_with_task_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    let ops = (0..10_000)
        .map(|i| ("big".to_string(), put(&i.to_string(), json!({"n": i}))))
        .collect();
    assert!(engine.bulk(ops).iter().all(Result::is_ok));
    engine.refresh("big").unwrap();
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let ctx = SearchContext {
        cancel_at: None,
        cancelled: Some(flag),
        deadline: None,
        ..Default::default()
    };
    let err = engine.search("big", &json!({}), &ctx).unwrap_err();
    assert_eq!(err.code, sluice_engine::ErrorCode::TaskCancelled);
}

#[test]
fn test_search_past_deadline_returns_partial_results_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    let ops = (0..20_000)
        .map(|i| ("big".to_string(), put(&i.to_string(), json!({"n": i}))))
        .collect();
    assert!(engine.bulk(ops).iter().all(Result::is_ok));
    engine.refresh("big").unwrap();
    let ctx = SearchContext {
        cancel_at: None,
        cancelled: None,
        deadline: Some(std::time::Instant::now()),
        ..Default::default()
    };
    let resp = engine
        .search("big", &json!({"track_total_hits": true}), &ctx)
        .unwrap();
    assert_eq!(resp["timed_out"], true, "{resp}");
    assert!(resp["hits"]["total"]["value"].as_u64().unwrap() < 20_000);
}
