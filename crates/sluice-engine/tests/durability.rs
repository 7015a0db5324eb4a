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
                    routing: None,
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
                    routing: None,
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
        routing: None,
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

/// A mapping change commits the writes before it, so a crash after it never replays a
/// document under a mapping it does not fit (found by an outside trial: the node then refused
/// to start, for good).
#[test]
fn test_a_mapping_change_after_unfitting_writes_survives_a_crash() {
    use sluice_engine::mapping::Mapping;
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path()).unwrap();
        engine
            .create_index("d", &json!({"mappings": {"dynamic": false}}))
            .unwrap();
        let r = engine.bulk(vec![("d".into(), put("1", json!({"y": "abc"})))]);
        assert!(r.iter().all(Result::is_ok), "{r:?}");
        let h = engine.index("d").unwrap();
        h.put_mapping(&Mapping::parse(&json!({"properties": {"y": {"type": "long"}}})).unwrap())
            .unwrap();
        // A multi-field of a type the earlier value does not have, on a dynamic index.
        let r = engine.bulk(vec![("e".into(), put("1", json!({"z": "abc"})))]);
        assert!(r.iter().all(Result::is_ok), "{r:?}");
        engine
            .index("e")
            .unwrap()
            .put_mapping(
                &Mapping::parse(&json!({"properties": {"z": {"type": "text",
                    "fields": {"n": {"type": "long"}}}}}))
                .unwrap(),
            )
            .unwrap();
        // Dropped without a refresh, as a crash.
    }
    let engine = Engine::open(dir.path()).expect("the node starts again");
    for index in ["d", "e"] {
        let doc = engine
            .index(index)
            .unwrap()
            .get("1")
            .unwrap()
            .expect("kept");
        assert_eq!(doc.version, 1, "{index}");
    }
}

/// What a crash leaves of an index being created or deleted never keeps the node from
/// starting: a directory without its description (a creation cut short, never acknowledged)
/// and one renamed as deleted are removed at start; a deleted index stays deleted.
#[test]
fn test_leftovers_of_creates_and_deletes_are_cleared_at_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path()).unwrap();
        engine.create_index("kept", &json!({})).unwrap();
        engine.create_index("gone", &json!({})).unwrap();
        let r = engine.bulk(vec![("gone".into(), put("1", json!({"n": 1})))]);
        assert!(r.iter().all(Result::is_ok), "{r:?}");
        engine.refresh("gone").unwrap();
        engine
            .delete_indices(
                "gone",
                &sluice_engine::resolve::IndicesOptions::for_index_apis(true),
            )
            .unwrap();
    }
    let indices = dir.path().join("indices");
    // Creations a crash cut short: nothing yet, the engine's files only, and a description
    // still being written.
    std::fs::create_dir_all(indices.join("a-00000000000000000000000000000001")).unwrap();
    std::fs::create_dir_all(indices.join("b-00000000000000000000000000000002/tantivy")).unwrap();
    let c = indices.join("c-00000000000000000000000000000003");
    std::fs::create_dir_all(c.join("tantivy")).unwrap();
    std::fs::write(c.join("index.tmp"), b"{\"name\": \"c\"").unwrap();
    // A delete a crash cut short after its rename.
    let d = indices.join("d-00000000000000000000000000000004.deleted");
    std::fs::create_dir_all(d.join("tantivy")).unwrap();
    std::fs::write(d.join("index.json"), b"{}").unwrap();

    let engine = Engine::open(dir.path()).expect("the node starts");
    let mut names: Vec<String> = engine
        .all_indices()
        .iter()
        .map(|h| h.name().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["kept"]);
    let left: Vec<String> = std::fs::read_dir(&indices)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("kept-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An alias change a crash cut short between two indices' writes is finished at start: the
/// alias is on exactly the index the change put it on.
#[test]
fn test_an_alias_move_cut_short_is_finished_at_start() {
    use sluice_engine::aliases::{AliasAction, AliasMeta};
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path()).unwrap();
        engine.create_index("ia", &json!({})).unwrap();
        engine.create_index("ib", &json!({})).unwrap();
        engine
            .update_aliases(&[AliasAction::Add {
                indices: vec!["ia".into()],
                aliases: vec!["w".into()],
                meta: AliasMeta::default(),
            }])
            .unwrap();
    }
    // What `update_aliases` records before writing the indices, moving `w` from ia to ib, and
    // a crash before either index was written.
    std::fs::write(
        dir.path().join("indices/aliases.pending.json"),
        br#"{"aliases": {"ia": {}, "ib": {"w": {}}}, "remove": []}"#,
    )
    .unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    assert!(engine.index("ia").unwrap().aliases().is_empty());
    assert!(engine.index("ib").unwrap().aliases().contains_key("w"));
    assert_eq!(engine.resolve("w").unwrap()[0].name(), "ib");
    assert!(!dir.path().join("indices/aliases.pending.json").exists());
    // A record cut short while it was written was never acted on: ignored and removed,
    // whether it was cut short before its rename or (on a file system that reorders) after.
    drop(engine);
    std::fs::write(dir.path().join("indices/aliases.pending.json"), b"{\"alia").unwrap();
    std::fs::write(dir.path().join("indices/aliases.pending.tmp"), b"{\"alia").unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    assert_eq!(engine.resolve("w").unwrap()[0].name(), "ib");
    assert!(!dir.path().join("indices/aliases.pending.json").exists());
    assert!(!dir.path().join("indices/aliases.pending.tmp").exists());
    // A move done whole leaves no record behind.
    engine
        .update_aliases(&[
            AliasAction::Remove {
                indices: vec!["ib".into()],
                aliases: vec!["w".into()],
                must_exist: None,
            },
            AliasAction::Add {
                indices: vec!["ia".into()],
                aliases: vec!["w".into()],
                meta: AliasMeta::default(),
            },
        ])
        .unwrap();
    assert!(!dir.path().join("indices/aliases.pending.json").exists());
    drop(engine);
    let engine = Engine::open(dir.path()).unwrap();
    assert_eq!(engine.resolve("w").unwrap()[0].name(), "ia");
}

/// A write of `source` as `id` with a routing value.
fn put_routed(id: &str, routing: &str, source: serde_json::Value) -> DocOp {
    DocOp::Index {
        id: Some(id.to_string()),
        source,
        op_type: OpType::Index,
        versioning: Default::default(),
        routing: Some(routing.to_string()),
    }
}

/// The `_routing` of each hit of a match-all search of `index`, by id.
fn hit_routings(engine: &Engine, index: &str) -> Vec<(String, Option<String>)> {
    let resp = engine
        .search(
            index,
            &json!({"sort": [{"_id": "asc"}]}),
            &SearchContext::default(),
        )
        .unwrap();
    resp["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["_id"].as_str().unwrap().to_string(),
                h["_routing"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn test_routing_is_kept_through_translog_replay_refresh_and_merge() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path()).unwrap();
        let results = engine.bulk(vec![
            ("r".into(), put_routed("a", "u1", json!({"n": 1}))),
            ("r".into(), put("b", json!({"n": 2}))),
        ]);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let h = engine.index("r").unwrap();
        assert_eq!(h.get("a").unwrap().unwrap().routing.as_deref(), Some("u1"));
        // Dropped without a refresh: the routing is only in the translog.
    }
    let engine = Engine::open(dir.path()).unwrap();
    let h = engine.index("r").unwrap();
    assert_eq!(h.get("a").unwrap().unwrap().routing.as_deref(), Some("u1"));
    assert_eq!(h.get("b").unwrap().unwrap().routing, None);
    engine.refresh("r").unwrap();
    let expected = vec![
        ("a".to_string(), Some("u1".to_string())),
        ("b".into(), None),
    ];
    assert_eq!(hit_routings(&engine, "r"), expected);
    h.force_merge(1, false).unwrap();
    assert_eq!(hit_routings(&engine, "r"), expected);
}

/// An index written before `_routing` was a schema field: its tantivy `meta.json` lacks the
/// field. It must open, keep its documents, and store the routing of new writes.
#[test]
fn test_index_created_before_routing_was_stored_opens_and_stores_new_routing() {
    let dir = tempfile::tempdir().unwrap();
    let meta_path = {
        let engine = Engine::open(dir.path()).unwrap();
        assert!(
            engine
                .bulk(vec![("old".into(), put("a", json!({"n": 1})))])
                .iter()
                .all(Result::is_ok)
        );
        engine.refresh("old").unwrap();
        engine.index("old").unwrap().dir().join("tantivy/meta.json")
    };
    // Make the index what an older sluice left: the same schema without `_routing`.
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    let fields = meta["schema"].as_array_mut().unwrap();
    let before = fields.len();
    fields.retain(|f| f["name"] != "_routing");
    assert_eq!(fields.len(), before - 1, "the schema had a _routing field");
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();

    let engine = Engine::open(dir.path()).unwrap();
    let h = engine.index("old").expect("an older index opens");
    let old = h.get("a").unwrap().expect("its document is kept");
    assert_eq!((old.source["n"].as_i64(), old.routing), (Some(1), None));
    let results = engine.bulk(vec![("old".into(), put_routed("b", "u1", json!({"n": 2})))]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    engine.refresh("old").unwrap();
    let expected = vec![
        ("a".to_string(), None),
        ("b".into(), Some("u1".to_string())),
    ];
    assert_eq!(hit_routings(&engine, "old"), expected);
    // The segment without the field and the one with it merge into one that keeps both.
    h.force_merge(1, false).unwrap();
    assert_eq!(hit_routings(&engine, "old"), expected);
    drop((h, engine));
    let engine = Engine::open(dir.path()).unwrap();
    assert_eq!(hit_routings(&engine, "old"), expected);
}
