//! Document APIs over HTTP: index, create, get, delete, update, real-time get versus search
//! visibility and refresh, and `_bulk` with its per-item results and failures.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{TestNode, assert_error, ndjson};
use serde_json::{Value, json};

/// The `_shards` of a write on a one-node cluster with the default single replica: two copies
/// wanted, the primary written, the replica unassigned.
fn shards_one_replica() -> Value {
    json!({"total": 2, "successful": 1, "failed": 0})
}

/// The keys of a successful bulk item, as OpenSearch renders them.
const BULK_ITEM_KEYS: [&str; 8] = [
    "_index",
    "_id",
    "_version",
    "result",
    "_shards",
    "_seq_no",
    "_primary_term",
    "status",
];

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// Creates `name` with `refresh_interval: -1`, so only explicit refreshes make writes searchable.
async fn create_manual_refresh_index(node: &TestNode, name: &str) {
    let (s, b) = node
        .req(
            "PUT",
            &format!("/{name}"),
            Some(json!({"settings": {"refresh_interval": "-1"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_index_with_id_creates_then_updates_with_new_version() {
    let node = TestNode::start().await;
    let (s, body) = node
        .req("PUT", "/docs/_doc/1", Some(json!({"msg": "one"})))
        .await;
    assert_eq!(s, 201, "{body}");
    let mut created = body.clone();
    let created_shards = created.as_object_mut().unwrap().remove("_shards");
    assert_eq!(
        created,
        json!({
            "_index": "docs", "_id": "1", "_version": 1, "result": "created",
            "_seq_no": 0, "_primary_term": 1
        })
    );
    let (s, body) = node
        .req("PUT", "/docs/_doc/1", Some(json!({"msg": "two"})))
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["result"], "updated");
    assert_eq!(body["_version"], 2);
    assert_eq!(body["_seq_no"], 1);
    let updated_shards = body["_shards"].clone();
    // POST with an id behaves the same.
    let (s, body) = node
        .req("POST", "/docs/_doc/1", Some(json!({"msg": "three"})))
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["_version"], 3);
    let (_, got) = node.req("GET", "/docs/_doc/1", None).await;
    assert_eq!(
        got["_source"],
        json!({"msg": "three"}),
        "a full replace, not a merge"
    );
    // Checked last so that a mismatch here does not hide the checks above.
    assert_eq!(created_shards, Some(shards_one_replica()), "created");
    assert_eq!(updated_shards, shards_one_replica(), "updated");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_post_without_id_generates_distinct_ids() {
    let node = TestNode::start().await;
    let mut ids = BTreeSet::new();
    for i in 0..3 {
        let (s, body) = node.req("POST", "/auto/_doc", Some(json!({"i": i}))).await;
        assert_eq!(s, 201, "{body}");
        assert_eq!(body["result"], "created");
        assert_eq!(body["_version"], 1);
        let id = body["_id"].as_str().expect("generated _id").to_string();
        assert!(!id.is_empty() && id.len() <= 512, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "URL-safe id: {id}"
        );
        let (s, got) = node.req("GET", &format!("/auto/_doc/{id}"), None).await;
        assert_eq!(s, 200);
        assert_eq!(got["_source"], json!({"i": i}));
        ids.insert(id);
    }
    assert_eq!(ids.len(), 3, "every generated id is new: {ids:?}");
    node.refresh("auto").await;
    assert_eq!(node.count("auto", None).await, 3);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_get_returns_source_version_and_seq_no() {
    let node = TestNode::start().await;
    let doc = json!({"title": "a", "nested": {"x": [1, 2, 3]}, "flag": false});
    node.req("PUT", "/g/_doc/a", Some(json!({"first": true})))
        .await;
    node.req("PUT", "/g/_doc/b", Some(doc.clone())).await;
    let (s, got) = node.req("GET", "/g/_doc/b", None).await;
    assert_eq!(s, 200, "{got}");
    assert_eq!(
        got,
        json!({
            "_index": "g", "_id": "b", "_version": 1, "_seq_no": 1, "_primary_term": 1,
            "found": true, "_source": doc
        })
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_get_missing_document_is_404_found_false() {
    let node = TestNode::start().await;
    node.req("PUT", "/g/_doc/present", Some(json!({"a": 1})))
        .await;
    let (s, body) = node.req("GET", "/g/_doc/nope", None).await;
    assert_eq!(s, 404);
    assert_eq!(body, json!({"_index": "g", "_id": "nope", "found": false}));
    assert_eq!(node.req("HEAD", "/g/_doc/nope", None).await.0, 404);
    assert_eq!(node.req("HEAD", "/g/_doc/present", None).await.0, 200);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_head_answers_the_get_headers_without_a_body() {
    let node = TestNode::start().await;
    node.req("PUT", "/g/_doc/present?refresh=true", Some(json!({"a": 1})))
        .await;
    for (path, status) in [("/", 200), ("/g/_doc/present", 200), ("/g/_doc/nope", 404)] {
        let get = node.req_with("GET", path, None, &[]).await;
        let head = node.req_with("HEAD", path, None, &[]).await;
        assert_eq!((get.status, head.status), (status, status), "{path}");
        assert_eq!(
            head.header_values("content-type"),
            ["application/json; charset=UTF-8"],
            "{path}"
        );
        assert_eq!(
            head.header_values("content-length"),
            get.header_values("content-length"),
            "{path}"
        );
        assert_eq!(head.body, Value::String(String::new()), "{path}: no body");
    }
    // Index existence has no GET twin: an empty body with the JSON content type.
    let head = node.req_with("HEAD", "/g", None, &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header_values("content-type"),
        ["application/json; charset=UTF-8"]
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_head_is_refused_where_opensearch_answers_no_head() {
    // A search, a count, a stats read: OpenSearch registers no HEAD there (405, naming the
    // methods it does take); served by the GET handler, a HEAD would run a whole search for
    // an answer without a body (through a gateway, past its admission). Nothing runs.
    let node = TestNode::start().await;
    node.req("PUT", "/g/_doc/1?refresh=true", Some(json!({"a": 1})))
        .await;
    for (path, allow) in [
        ("/g/_search", "GET,POST"),
        ("/_search?q=a:1", "GET,POST"),
        ("/g/_count", "GET,POST"),
        ("/_msearch", "GET,POST"),
        ("/_cluster/health", "GET"),
        ("/_cat/indices", "GET"),
        ("/_tasks", "GET"),
    ] {
        let head = node.req_with("HEAD", path, None, &[]).await;
        assert_eq!(head.status, 405, "{path}");
        assert_eq!(head.header_values("allow"), [allow], "{path}");
    }
    // With a body, as a search would send one: refused before anything reads it.
    let m = reqwest::Method::HEAD;
    let resp = node
        .client
        .request(m, node.url("/g/_search"))
        .header("content-type", "application/json")
        .body(json!({"query": {"match_all": {}}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    let (_, tasks) = node.req("GET", "/_tasks?actions=*search*", None).await;
    let running: usize = tasks["nodes"].as_object().map_or(0, |n| {
        n.values()
            .map(|n| n["tasks"].as_object().map_or(0, |t| t.len()))
            .sum()
    });
    assert_eq!(running, 0, "{tasks}");
    // The same request as a GET runs; HEAD stays where OpenSearch has it.
    assert_eq!(node.req("GET", "/g/_search", None).await.0, 200);
    for path in ["/", "/g", "/g/_doc/1"] {
        assert_eq!(node.req("HEAD", path, None).await.0, 200, "{path}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_get_source_returns_the_source_alone() {
    let node = TestNode::start().await;
    let doc = json!({"title": "Beauty and the Beast", "year": 1991, "tags": {"a": 1, "b": 2}});
    node.req("PUT", "/movies/_doc/1", Some(doc.clone())).await;
    let (s, got) = node.req("GET", "/movies/_source/1", None).await;
    assert_eq!((s, &got), (200, &doc));
    let (s, got) = node
        .req("GET", "/movies/_source/1?_source_includes=tags.*", None)
        .await;
    assert_eq!((s, got), (200, json!({"tags": {"a": 1, "b": 2}})));
    let (s, got) = node
        .req("GET", "/movies/_source/1?_source_excludes=tags,year", None)
        .await;
    assert_eq!((s, got), (200, json!({"title": "Beauty and the Beast"})));
    assert_eq!(node.req("HEAD", "/movies/_source/1", None).await.0, 200);

    let missing = node.req("GET", "/movies/_source/2", None).await;
    assert_error(&missing, 404, "resource_not_found_exception");
    assert_eq!(
        missing.1["error"]["reason"], "Document not found [movies]/[2]",
        "{}",
        missing.1
    );
    assert_eq!(node.req("HEAD", "/movies/_source/2", None).await.0, 404);
    let no_index = node.req("GET", "/nope/_source/1", None).await;
    assert_error(&no_index, 404, "index_not_found_exception");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_delete_document_then_delete_again_is_not_found() {
    let node = TestNode::start().await;
    node.req("PUT", "/d/_doc/1?refresh=true", Some(json!({"a": 1})))
        .await;
    node.req("PUT", "/d/_doc/2?refresh=true", Some(json!({"a": 2})))
        .await;
    let (s, body) = node.req("DELETE", "/d/_doc/1", None).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["result"], "deleted");
    assert_eq!(body["_version"], 2);
    assert_eq!(body["_index"], "d");
    assert_eq!(body["_id"], "1");
    let (s, body) = node.req("GET", "/d/_doc/1", None).await;
    assert_eq!(s, 404);
    assert_eq!(body["found"], false);
    let (s, body) = node.req("DELETE", "/d/_doc/1", None).await;
    assert_eq!(s, 404, "{body}");
    assert_eq!(body["result"], "not_found");
    node.refresh("d").await;
    assert_eq!(node.count("d", None).await, 1, "only document 2 is left");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_create_of_existing_id_is_version_conflict() {
    let node = TestNode::start().await;
    node.req("PUT", "/c/_doc/1", Some(json!({"v": "original"})))
        .await;
    let resp = node
        .req(
            "PUT",
            "/c/_doc/1?op_type=create",
            Some(json!({"v": "replacement"})),
        )
        .await;
    assert_error(&resp, 409, "version_conflict_engine_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        "[1]: version conflict, document already exists (current version [1])"
    );
    let resp = node
        .req("PUT", "/c/_create/1", Some(json!({"v": "replacement"})))
        .await;
    assert_error(&resp, 409, "version_conflict_engine_exception");
    let (_, got) = node.req("GET", "/c/_doc/1", None).await;
    assert_eq!(got["_source"], json!({"v": "original"}));
    assert_eq!(got["_version"], 1);
    // op_type=create on a new id creates.
    let (s, body) = node
        .req("PUT", "/c/_doc/2?op_type=create", Some(json!({"v": "new"})))
        .await;
    assert_eq!(s, 201, "{body}");
    assert_eq!(body["result"], "created");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_update_merges_partial_document() {
    let node = TestNode::start().await;
    node.req(
        "PUT",
        "/u/_doc/1",
        Some(json!({"a": 1, "b": {"c": 1, "d": 2}, "keep": "me"})),
    )
    .await;
    let (s, body) = node
        .req(
            "POST",
            "/u/_update/1",
            Some(json!({"doc": {"b": {"c": 9}, "e": "new"}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["result"], "updated");
    assert_eq!(body["_version"], 2);
    assert_eq!(body["_index"], "u");
    assert_eq!(body["_id"], "1");
    let (_, got) = node.req("GET", "/u/_doc/1", None).await;
    assert_eq!(
        got["_source"],
        json!({"a": 1, "b": {"c": 9, "d": 2}, "keep": "me", "e": "new"})
    );
    // An update that changes nothing is a noop and keeps the version.
    let (s, body) = node
        .req("POST", "/u/_update/1", Some(json!({"doc": {"a": 1}})))
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["result"], "noop");
    assert_eq!(body["_version"], 2);
    node.refresh("u").await;
    assert_eq!(
        node.count("u", Some(json!({"term": {"e.keyword": "new"}})))
            .await,
        1
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_update_of_missing_document_is_404_unless_upserting() {
    let node = TestNode::start().await;
    node.req("PUT", "/u/_doc/other", Some(json!({"a": 1})))
        .await;
    let resp = node
        .req("POST", "/u/_update/ghost", Some(json!({"doc": {"a": 2}})))
        .await;
    assert_error(&resp, 404, "document_missing_exception");
    assert_eq!(resp.1["error"]["reason"], "[ghost]: document missing");
    assert_eq!(
        node.req("GET", "/u/_doc/ghost", None).await.0,
        404,
        "nothing was created"
    );

    let (s, body) = node
        .req(
            "POST",
            "/u/_update/ghost",
            Some(json!({"doc": {"a": 2}, "doc_as_upsert": true})),
        )
        .await;
    assert_eq!(s, 201, "{body}");
    assert_eq!(body["result"], "created");
    assert_eq!(body["_version"], 1);
    let (s, got) = node.req("GET", "/u/_doc/ghost", None).await;
    assert_eq!(s, 200);
    assert_eq!(got["_source"], json!({"a": 2}));

    let (s, body) = node
        .req(
            "POST",
            "/u/_update/up",
            Some(json!({"doc": {"a": 3}, "upsert": {"a": 0, "fresh": true}})),
        )
        .await;
    assert_eq!(s, 201, "{body}");
    let (_, got) = node.req("GET", "/u/_doc/up", None).await;
    assert_eq!(
        got["_source"],
        json!({"a": 0, "fresh": true}),
        "upsert indexes the upsert document"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_get_is_real_time_but_search_waits_for_refresh() {
    let node = TestNode::start().await;
    create_manual_refresh_index(&node, "rt").await;
    let (s, _) = node
        .req("PUT", "/rt/_doc/1", Some(json!({"msg": "hello"})))
        .await;
    assert_eq!(s, 201);
    let (s, got) = node.req("GET", "/rt/_doc/1", None).await;
    assert_eq!(s, 200, "real-time get sees the unrefreshed write");
    assert_eq!(got["_source"], json!({"msg": "hello"}));
    assert_eq!(
        node.count("rt", None).await,
        0,
        "search does not see it before a refresh"
    );
    let resp = node
        .search("rt", json!({"query": {"match": {"msg": "hello"}}}))
        .await;
    assert_eq!(resp["hits"]["total"]["value"], 0, "{resp}");

    let (s, r) = node.req("POST", "/rt/_refresh", None).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["_shards"]["failed"], 0, "{r}");
    assert_eq!(node.count("rt", None).await, 1);
    let resp = node
        .search("rt", json!({"query": {"match": {"msg": "hello"}}}))
        .await;
    assert_eq!(common::hit_ids(&resp), vec!["1"], "{resp}");

    // ?refresh=true makes the write searchable before the response.
    let (s, body) = node
        .req(
            "PUT",
            "/rt/_doc/2?refresh=true",
            Some(json!({"msg": "hello again"})),
        )
        .await;
    assert_eq!(s, 201);
    assert_eq!(body["forced_refresh"], true, "{body}");
    assert_eq!(node.count("rt", None).await, 2);

    // A delete is also invisible to search until a refresh.
    node.req("DELETE", "/rt/_doc/1", None).await;
    assert_eq!(
        node.req("GET", "/rt/_doc/1", None).await.0,
        404,
        "real-time get sees the delete"
    );
    assert_eq!(node.count("rt", None).await, 2);
    node.refresh("_all").await;
    assert_eq!(node.count("rt", None).await, 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unrefreshed_write_becomes_searchable_by_periodic_refresh() {
    let node = TestNode::start().await;
    let (s, _) = node
        .req(
            "PUT",
            "/auto-refresh/_doc/1",
            Some(json!({"msg": "eventually"})),
        )
        .await;
    assert_eq!(s, 201);
    // The default refresh_interval is 1s: poll _count every 50 ms for up to 5 s.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut seen = 0;
    while Instant::now() < deadline {
        tick.tick().await;
        seen = node.count("auto-refresh", None).await;
        if seen == 1 {
            break;
        }
    }
    assert_eq!(
        seen, 1,
        "the periodic refresh never made the document searchable within 5 s"
    );
    let resp = node
        .search(
            "auto-refresh",
            json!({"query": {"match": {"msg": "eventually"}}}),
        )
        .await;
    assert_eq!(common::hit_ids(&resp), vec!["1"]);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_items_have_opensearch_shape_and_apply_in_order() {
    let node = TestNode::start().await;
    let lines = [
        json!({"index": {"_index": "b", "_id": "1"}}),
        json!({"title": "one", "n": 1}),
        json!({"create": {"_index": "b", "_id": "2"}}),
        json!({"title": "two", "n": 2}),
        json!({"index": {"_index": "b", "_id": "3"}}),
        json!({"title": "three", "n": 3}),
        json!({"update": {"_index": "b", "_id": "1"}}),
        json!({"doc": {"n": 10}}),
        json!({"delete": {"_index": "b", "_id": "3"}}),
        json!({"index": {"_index": "b"}}),
        json!({"title": "auto id", "n": 4}),
    ];
    let resp = node.bulk("/_bulk?refresh=true", &lines).await;
    assert_eq!(resp["errors"], false, "{resp}");
    assert!(resp["took"].is_u64(), "{resp}");
    let items = resp["items"].as_array().unwrap();
    assert_eq!(items.len(), 6, "{resp}");
    let expected = [
        ("index", "1", 1, "created", 201),
        ("create", "2", 1, "created", 201),
        ("index", "3", 1, "created", 201),
        ("update", "1", 2, "updated", 200),
        ("delete", "3", 2, "deleted", 200),
    ];
    for (i, (action, id, version, result, status)) in expected.into_iter().enumerate() {
        let item = &items[i];
        assert_eq!(
            keys(item),
            BTreeSet::from([action.to_string()]),
            "item {i}: {item}"
        );
        let it = &item[action];
        assert_eq!(
            keys(it),
            BULK_ITEM_KEYS.iter().map(|k| k.to_string()).collect(),
            "item {i}: {it}"
        );
        assert_eq!(it["_index"], "b", "item {i}");
        assert_eq!(it["_id"], id, "item {i}");
        assert_eq!(it["_version"], version, "item {i}");
        assert_eq!(it["result"], result, "item {i}");
        assert_eq!(it["status"], status, "item {i}");
        assert_eq!(it["_primary_term"], 1, "item {i}");
        assert_eq!(
            it["_seq_no"], i as u64,
            "sequence numbers follow the item order: {it}"
        );
    }
    let auto_id = items[5]["index"]["_id"]
        .as_str()
        .expect("generated id")
        .to_string();
    assert_eq!(items[5]["index"]["status"], 201);

    let (_, d1) = node.req("GET", "/b/_doc/1", None).await;
    assert_eq!(d1["_source"], json!({"title": "one", "n": 10}));
    let (_, d2) = node.req("GET", "/b/_doc/2", None).await;
    assert_eq!(d2["_source"], json!({"title": "two", "n": 2}));
    assert_eq!(node.req("GET", "/b/_doc/3", None).await.0, 404);
    let (_, d4) = node.req("GET", &format!("/b/_doc/{auto_id}"), None).await;
    assert_eq!(d4["_source"], json!({"title": "auto id", "n": 4}));
    assert_eq!(node.count("b", None).await, 3);
    let resp = node
        .search("b", json!({"query": {"term": {"n": 10}}}))
        .await;
    assert_eq!(common::hit_ids(&resp), vec!["1"]);
    // Checked last so that a mismatch here does not hide the checks above.
    for (i, item) in items[..5].iter().enumerate() {
        let it = item.as_object().unwrap().values().next().unwrap();
        assert_eq!(it["_shards"], shards_one_replica(), "item {i}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_on_index_path_uses_it_as_default_index() {
    let node = TestNode::start().await;
    let lines = [
        json!({"index": {"_id": "1"}}),
        json!({"where": "path index"}),
        json!({"index": {"_index": "elsewhere", "_id": "2"}}),
        json!({"where": "explicit index"}),
    ];
    let resp = node.bulk("/dflt/_bulk?refresh=true", &lines).await;
    assert_eq!(resp["errors"], false, "{resp}");
    assert_eq!(resp["items"][0]["index"]["_index"], "dflt");
    assert_eq!(resp["items"][1]["index"]["_index"], "elsewhere");
    let (_, d) = node.req("GET", "/dflt/_doc/1", None).await;
    assert_eq!(d["_source"], json!({"where": "path index"}));
    let (_, d) = node.req("GET", "/elsewhere/_doc/2", None).await;
    assert_eq!(d["_source"], json!({"where": "explicit index"}));
    assert_eq!(node.req("GET", "/dflt/_doc/2", None).await.0, 404);
    // PUT is accepted as well as POST.
    let (s, resp) = node
        .raw(
            "PUT",
            "/dflt/_bulk?refresh=true",
            ndjson(&[json!({"delete": {"_id": "1"}})]),
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(resp["items"][0]["delete"]["result"], "deleted");
    assert_eq!(node.count("dflt", None).await, 0);
    // Without an index in the path, the URL's `index` parameter is the default, for `_bulk`
    // and `_mget` alike, as OpenSearch's handlers read it.
    let resp = node
        .bulk(
            "/_bulk?index=byparam&refresh=true",
            &[
                json!({"index": {"_id": "7"}}),
                json!({"where": "parameter"}),
            ],
        )
        .await;
    assert_eq!(resp["items"][0]["index"]["_index"], "byparam", "{resp}");
    let (s, got) = node
        .req("POST", "/_mget?index=byparam", Some(json!({"ids": ["7"]})))
        .await;
    assert_eq!(s, 200, "{got}");
    assert_eq!(
        got["docs"][0]["_source"],
        json!({"where": "parameter"}),
        "{got}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_failed_items_do_not_affect_others() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/bm",
            Some(json!({"mappings": {"properties": {"n": {"type": "integer"}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node.req(
        "PUT",
        "/bm/_doc/exists?refresh=true",
        Some(json!({"n": 0, "tag": "original"})),
    )
    .await;
    let lines = [
        json!({"index": {"_index": "bm", "_id": "1"}}),
        json!({"n": 1, "tag": "a"}),
        json!({"index": {"_index": "bm", "_id": "2"}}),
        json!({"n": "not a number", "tag": "b"}),
        json!({"create": {"_index": "bm", "_id": "exists"}}),
        json!({"n": 99, "tag": "clobber"}),
        json!({"index": {"_index": "bm", "_id": "3"}}),
        json!({"n": 3, "tag": "c"}),
        json!({"update": {"_index": "bm", "_id": "missing"}}),
        json!({"doc": {"n": 5}}),
        json!({"index": {"_index": "bm", "_id": "4"}}),
        json!({"n": 4, "tag": "d"}),
    ];
    let resp = node.bulk("/_bulk?refresh=true", &lines).await;
    assert_eq!(resp["errors"], true, "{resp}");
    let items = resp["items"].as_array().unwrap();
    let statuses: Vec<u64> = items
        .iter()
        .map(|it| {
            it.as_object().unwrap().values().next().unwrap()["status"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(statuses, vec![201, 400, 409, 201, 404, 201], "{resp}");

    let failed = [
        (1, "index", "2", "mapper_parsing_exception"),
        (2, "create", "exists", "version_conflict_engine_exception"),
        (4, "update", "missing", "document_missing_exception"),
    ];
    for (pos, action, id, ty) in failed {
        let it = &items[pos][action];
        assert_eq!(it["_index"], "bm", "{it}");
        assert_eq!(it["_id"], id, "{it}");
        assert_eq!(it["error"]["type"], ty, "{it}");
        assert!(
            it["error"]["reason"]
                .as_str()
                .is_some_and(|r| !r.is_empty()),
            "{it}"
        );
        assert!(
            it.get("result").is_none(),
            "a failed item has no result: {it}"
        );
    }
    for pos in [0, 3, 5] {
        assert!(items[pos]["index"].get("error").is_none(), "{}", items[pos]);
        assert_eq!(items[pos]["index"]["result"], "created");
    }

    assert_eq!(node.count("bm", None).await, 4, "exists, 1, 3 and 4");
    for (id, source) in [
        ("1", json!({"n": 1, "tag": "a"})),
        ("3", json!({"n": 3, "tag": "c"})),
        ("4", json!({"n": 4, "tag": "d"})),
        ("exists", json!({"n": 0, "tag": "original"})),
    ] {
        let (s, d) = node.req("GET", &format!("/bm/_doc/{id}"), None).await;
        assert_eq!(s, 200, "{id}: {d}");
        assert_eq!(d["_source"], source, "{id}");
    }
    let (_, exists) = node.req("GET", "/bm/_doc/exists", None).await;
    assert_eq!(
        exists["_version"], 1,
        "the failed create did not bump the version"
    );
    assert_eq!(node.req("GET", "/bm/_doc/2", None).await.0, 404);
    assert_eq!(node.req("GET", "/bm/_doc/missing", None).await.0, 404);
    let resp = node
        .search(
            "bm",
            json!({"query": {"range": {"n": {"gte": 1}}}, "sort": [{"n": "asc"}]}),
        )
        .await;
    assert_eq!(common::hit_ids(&resp), vec!["1", "3", "4"], "{resp}");
    let resp = node
        .search("bm", json!({"query": {"match": {"tag": "clobber"}}}))
        .await;
    assert_eq!(resp["hits"]["total"]["value"], 0, "{resp}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_without_trailing_newline_is_rejected_whole() {
    let node = TestNode::start().await;
    let mut body = ndjson(&[
        json!({"index": {"_index": "nl", "_id": "1"}}),
        json!({"a": 1}),
    ]);
    body.pop();
    let resp = node.raw("POST", "/_bulk", body).await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(
        resp.1["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("The bulk request must be terminated by a newline [\\n]"),
        "{}",
        resp.1
    );
    assert_eq!(
        node.req("HEAD", "/nl", None).await.0,
        404,
        "nothing was indexed"
    );
    // The same body with its newline is fine.
    let resp = node
        .bulk(
            "/_bulk?refresh=true",
            &[
                json!({"index": {"_index": "nl", "_id": "1"}}),
                json!({"a": 1}),
            ],
        )
        .await;
    assert_eq!(resp["errors"], false);
    assert_eq!(node.count("nl", None).await, 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_malformed_action_line_fails_whole_request() {
    let node = TestNode::start().await;
    let body = "{\"index\":{\"_index\":\"mal\",\"_id\":\"1\"}}\n{\"a\":1}\n{not json}\n{\"a\":2}\n";
    let (s, resp) = node.raw("POST", "/_bulk", body).await;
    assert_eq!(s, 400, "{resp}");
    assert_eq!(resp["status"], 400, "{resp}");
    assert!(
        resp["error"]["type"].is_string() && resp["error"]["reason"].is_string(),
        "{resp}"
    );
    assert_eq!(
        node.req("HEAD", "/mal", None).await.0,
        404,
        "the valid first item was not applied"
    );

    let body = "{\"index\":{\"_index\":\"mal\",\"_id\":\"1\"}}\n{\"a\":1}\n{\"upsert\":{\"_index\":\"mal\"}}\n{\"a\":2}\n";
    let resp = node.raw("POST", "/_bulk", body).await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "Malformed action/metadata line [3], expected one of [create, delete, index, update] but found [upsert]"
    );
    assert_eq!(node.req("HEAD", "/mal", None).await.0, 404);

    let resp = node.raw("POST", "/_bulk", "[1]\n{}\n").await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(
        resp.1["error"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("Malformed action/metadata line [1]"),
        "{}",
        resp.1
    );
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_empty_body_is_rejected() {
    let node = TestNode::start().await;
    // No body at all: the REST layer requires one.
    let resp = node.raw("POST", "/_bulk", "").await;
    assert_error(&resp, 400, "parse_exception");
    assert_eq!(resp.1["error"]["reason"], "request body is required");
    // A body with no action in it: the bulk request has nothing to do.
    let resp = node.raw("POST", "/_bulk", "\n").await;
    assert_error(&resp, 400, "action_request_validation_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "Validation Failed: 1: no requests added;"
    );
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_delete_without_id_fails_validation_of_whole_request() {
    let node = TestNode::start().await;
    let body = ndjson(&[
        json!({"index": {"_index": "v", "_id": "1"}}),
        json!({"a": 1}),
        json!({"delete": {"_index": "v"}}),
    ]);
    let resp = node.raw("POST", "/_bulk", body).await;
    assert_error(&resp, 400, "action_request_validation_exception");
    assert!(
        resp.1["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("id is missing"),
        "{}",
        resp.1
    );
    assert_eq!(node.req("HEAD", "/v", None).await.0, 404, "no item ran");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_mget_answers_each_document_on_its_own() {
    let node = TestNode::start().await;
    let book = json!({"author": "Harper Lee", "title": "To Kill a Mockingbird", "year": 1960});
    let movie = json!({"director": "Bennett Miller", "title": "The Cruise", "year": 1998});
    node.req("PUT", "/books/_doc/book1", Some(book.clone()))
        .await;
    node.req("PUT", "/movies/_doc/movie1", Some(movie.clone()))
        .await;
    let body = json!({"docs": [
        {"_index": "movies", "_id": "movie1", "_source": true},
        {"_index": "books", "_id": "book1", "_source": {"includes": ["title"]}},
        {"_index": "books", "_id": "nope"},
        {"_index": "missing", "_id": "1"},
    ]});
    for method in ["GET", "POST"] {
        let (s, b) = node.req(method, "/_mget", Some(body.clone())).await;
        assert_eq!(s, 200, "{b}");
        let docs = b["docs"].as_array().expect("docs");
        assert_eq!(docs.len(), 4, "{b}");
        assert_eq!(docs[0]["_source"], movie);
        assert_eq!(docs[0]["found"], true);
        assert_eq!(docs[0]["_version"], 1);
        assert_eq!(
            docs[1]["_source"],
            json!({"title": "To Kill a Mockingbird"})
        );
        assert_eq!(
            docs[2],
            json!({"_index": "books", "_id": "nope", "found": false})
        );
        assert_eq!(docs[3]["_index"], "missing");
        assert_eq!(docs[3]["error"]["type"], "index_not_found_exception", "{b}");
    }
    // The index in the path, ids only, and a filter from the parameters.
    let (s, b) = node
        .req(
            "POST",
            "/books/_mget?_source_excludes=author,year",
            Some(json!({"ids": ["book1"]})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["docs"][0]["_source"],
        json!({"title": "To Kill a Mockingbird"})
    );
    // Bad input: named, never a half answer.
    let r = node
        .req(
            "POST",
            "/_mget",
            Some(json!({"docs": [{"_id": "1"}, {"_index": "books"}]})),
        )
        .await;
    assert_error(&r, 400, "action_request_validation_exception");
    assert_eq!(
        r.1["error"]["reason"],
        "Validation Failed: 1: index is missing for doc 0;2: id is missing for doc 1;"
    );
    let r = node.req("POST", "/_mget", Some(json!({"docs": []}))).await;
    assert_error(&r, 400, "action_request_validation_exception");
    let r = node
        .req(
            "POST",
            "/_mget",
            Some(json!({"docs": [{"_index": "books", "_id": "1", "x": 1}]})),
        )
        .await;
    assert_error(&r, 400, "parsing_exception");
    node.stop().await;
}

/// A write's parameters that OpenSearch refuses are refused before anything is written: a
/// `timeout` that is no time value, a `wait_for_active_shards` that is no count, and any
/// `pipeline` but `_none` (sluice has no ingest pipelines; a client relying on one would
/// otherwise get its documents untransformed). Through a gateway, the upstream refuses them.
#[tokio::test]
async fn test_bad_write_parameters_are_refused_and_nothing_is_written() {
    let node = TestNode::start().await;
    let doc = || Some(json!({"a": 1}));
    for (path, ty, reason) in [
        (
            "/w/_doc/1?timeout=5x",
            // As every time parameter sluice reads (its one time-value parser).
            "illegal_argument_exception",
            "failed to parse setting [timeout] with value [5x] as a time value: unit is missing or unrecognized",
        ),
        (
            "/w/_doc/1?wait_for_active_shards=abc",
            "illegal_argument_exception",
            "cannot parse ActiveShardCount[abc]",
        ),
        (
            "/w/_doc/1?pipeline=nosuch",
            "illegal_argument_exception",
            "pipeline with id [nosuch] does not exist",
        ),
    ] {
        let r = node.req("PUT", path, doc()).await;
        assert_error(&r, 400, ty);
        assert_eq!(r.1["error"]["reason"], reason, "{path}: {}", r.1);
    }
    let (s, _) = node.req("HEAD", "/w", None).await;
    assert_eq!(s, 404, "nothing was written");
    let r = node
        .raw(
            "POST",
            "/_bulk?timeout=zz",
            "{\"index\":{\"_index\":\"w\"}}\n{\"a\":1}\n".to_string(),
        )
        .await;
    assert_eq!(r.0, 400, "{}", r.1);
    for ok in [
        "/w/_doc/1?timeout=5s&wait_for_active_shards=all&pipeline=_none",
        "/w/_doc/2?wait_for_active_shards=1",
    ] {
        let (s, b) = node.req("PUT", ok, doc()).await;
        assert_eq!(s, 201, "{ok}: {b}");
    }
    let r = node.req("DELETE", "/w/_doc/1?timeout=zz", None).await;
    assert_eq!(r.0, 400, "{}", r.1);
    node.stop().await;
}

/// The keys of `v` in the order it renders them.
fn key_order(v: &Value) -> Vec<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_routing_is_stored_and_echoed_by_get_mget_and_search() {
    let node = TestNode::start().await;
    for (method, path, body) in [
        ("PUT", "/rt/_doc/1?routing=u1", json!({"n": 1})),
        ("PUT", "/rt/_create/2?routing=u2", json!({"n": 2})),
        ("PUT", "/rt/_doc/3", json!({"n": 3})),
        (
            "POST",
            "/rt/_update/5?routing=u5",
            json!({"doc": {"n": 5}, "doc_as_upsert": true}),
        ),
    ] {
        let (s, b) = node.req(method, path, Some(body)).await;
        assert!(s == 200 || s == 201, "{method} {path}: {b}");
    }
    // A bulk item's `routing`, and the request's `routing` as the default of the others.
    let resp = node
        .bulk(
            "/_bulk?routing=dflt",
            &[
                json!({"index": {"_index": "rt", "_id": "4", "routing": "u4"}}),
                json!({"n": 4}),
                json!({"index": {"_index": "rt", "_id": "6"}}),
                json!({"n": 6}),
            ],
        )
        .await;
    assert_eq!(resp["errors"], false, "{resp}");
    let expected = [
        ("1", Some("u1")),
        ("2", Some("u2")),
        ("3", None),
        ("4", Some("u4")),
        ("5", Some("u5")),
        ("6", Some("dflt")),
    ];
    // Real-time gets (not refreshed yet), with and without `_source`.
    for (id, routing) in expected {
        for query in ["", "?_source=false"] {
            let (s, got) = node
                .req("GET", &format!("/rt/_doc/{id}{query}"), None)
                .await;
            assert_eq!(s, 200, "{got}");
            assert_eq!(got["_routing"].as_str(), routing, "{id}{query}: {got}");
        }
    }
    let (_, got) = node.req("GET", "/rt/_doc/1", None).await;
    assert_eq!(
        key_order(&got),
        [
            "_index",
            "_id",
            "_version",
            "_seq_no",
            "_primary_term",
            "_routing",
            "found",
            "_source"
        ]
    );
    let (s, mget) = node
        .req(
            "POST",
            "/rt/_mget",
            Some(json!({"ids": ["1", "2", "3", "4", "5", "6"]})),
        )
        .await;
    assert_eq!(s, 200, "{mget}");
    for ((id, routing), doc) in expected.iter().zip(mget["docs"].as_array().unwrap()) {
        assert_eq!(doc["_id"], *id, "{mget}");
        assert_eq!(doc["_routing"].as_str(), *routing, "{mget}");
    }
    node.refresh("rt").await;
    let resp = node
        .search("rt", json!({"sort": [{"n": "asc"}], "size": 10}))
        .await;
    let hits = resp["hits"]["hits"].as_array().unwrap();
    assert_eq!(hits.len(), expected.len(), "{resp}");
    for ((id, routing), hit) in expected.iter().zip(hits) {
        assert_eq!(hit["_id"], *id, "{resp}");
        assert_eq!(hit["_routing"].as_str(), *routing, "{resp}");
    }
    // After a refresh the stored documents answer the gets with the same routing.
    let (_, got) = node.req("GET", "/rt/_doc/4", None).await;
    assert_eq!(got["_routing"], "u4", "{got}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_required_routing_refuses_writes_and_gets_without_it() {
    let node = TestNode::start().await;
    let mappings = json!({"_routing": {"required": true}, "properties": {"n": {"type": "long"}}});
    let (s, b) = node
        .req("PUT", "/rq", Some(json!({"mappings": mappings})))
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, m) = node.req("GET", "/rq/_mapping", None).await;
    assert_eq!(
        m["rq"]["mappings"]["_routing"],
        json!({"required": true}),
        "{m}"
    );
    let missing = |resp: &(u16, Value), id: &str| {
        assert_error(resp, 400, "routing_missing_exception");
        let err = &resp.1["error"];
        assert_eq!(
            err["reason"],
            format!("routing is required for [rq]/[{id}]"),
            "{err}"
        );
        assert_eq!(err["index"], "rq", "{err}");
    };
    missing(
        &node.req("PUT", "/rq/_doc/1", Some(json!({"n": 1}))).await,
        "1",
    );
    missing(
        &node
            .req("PUT", "/rq/_create/1", Some(json!({"n": 1})))
            .await,
        "1",
    );
    let (s, b) = node
        .req("PUT", "/rq/_doc/1?routing=a", Some(json!({"n": 1})))
        .await;
    assert_eq!(s, 201, "{b}");
    missing(&node.req("GET", "/rq/_doc/1", None).await, "1");
    missing(&node.req("GET", "/rq/_source/1", None).await, "1");
    missing(&node.req("DELETE", "/rq/_doc/1", None).await, "1");
    missing(
        &node
            .req("POST", "/rq/_update/1", Some(json!({"doc": {"n": 2}})))
            .await,
        "1",
    );
    let (s, got) = node.req("GET", "/rq/_doc/1?routing=a", None).await;
    assert_eq!(
        (s, &got["_routing"], &got["_source"]["n"]),
        (200, &json!("a"), &json!(1)),
        "{got}"
    );
    // One item without routing fails alone, in `_bulk` and `_mget`.
    let resp = node
        .bulk(
            "/_bulk",
            &[
                json!({"index": {"_index": "rq", "_id": "2"}}),
                json!({"n": 2}),
                json!({"index": {"_index": "rq", "_id": "3", "routing": "b"}}),
                json!({"n": 3}),
            ],
        )
        .await;
    assert_eq!(resp["errors"], true, "{resp}");
    let failed = &resp["items"][0]["index"];
    assert_eq!(failed["status"], 400, "{resp}");
    assert_eq!(
        failed["error"]["type"], "routing_missing_exception",
        "{resp}"
    );
    assert_eq!(
        failed["error"]["reason"], "routing is required for [rq]/[2]",
        "{resp}"
    );
    assert_eq!(resp["items"][1]["index"]["status"], 201, "{resp}");
    let (s, mget) = node
        .req(
            "POST",
            "/_mget",
            Some(json!({"docs": [
                {"_index": "rq", "_id": "3"},
                {"_index": "rq", "_id": "3", "routing": "b"}
            ]})),
        )
        .await;
    assert_eq!(s, 200, "{mget}");
    assert_eq!(
        mget["docs"][0]["error"]["type"], "routing_missing_exception",
        "{mget}"
    );
    assert_eq!(mget["docs"][1]["_routing"], "b", "{mget}");
    // `required` cannot be changed once the index exists; restating it is fine.
    let r = node
        .req(
            "PUT",
            "/rq/_mapping",
            Some(json!({"_routing": {"required": false}})),
        )
        .await;
    assert_error(&r, 400, "illegal_argument_exception");
    let (s, b) = node
        .req(
            "PUT",
            "/rq/_mapping",
            Some(json!({"_routing": {"required": true}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node.stop().await;
}
