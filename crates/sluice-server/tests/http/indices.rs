//! Index and cluster APIs over HTTP: `GET /`, `_cluster/health`, create/get/delete/exists,
//! mappings (explicit, dynamic, updates), settings, `_cat/indices`, name validation, restart.

use crate::common::{TestNode, assert_error, enc};
use serde_json::{Value, json};

/// A mapping with one field of every type sluice supports.
fn every_type_mapping() -> Value {
    json!({
        "properties": {
            "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
            "body": {"type": "text"},
            "tag": {"type": "keyword"},
            "big": {"type": "long"},
            "count": {"type": "integer"},
            "small": {"type": "short"},
            "tiny": {"type": "byte"},
            "ratio": {"type": "double"},
            "score": {"type": "float"},
            "at": {"type": "date", "format": "strict_date_optional_time||epoch_millis"},
            "ok": {"type": "boolean"}
        }
    })
}

/// The parts of `every_type_mapping` that OpenSearch echoes back unchanged (the date's format
/// is left out: OpenSearch may omit a format equal to its default).
fn assert_every_type_properties(props: &Value) {
    let expected = every_type_mapping();
    for (name, field) in expected["properties"].as_object().unwrap() {
        if name == "at" {
            assert_eq!(props["at"]["type"], "date", "date field in {props}");
        } else {
            assert_eq!(&props[name], field, "field {name} in {props}");
        }
    }
    assert_eq!(
        props.as_object().unwrap().len(),
        11,
        "unexpected fields in {props}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_root_reports_node_cluster_and_version_fields() {
    let node = TestNode::start().await;
    let (status, body) = node.req("GET", "/", None).await;
    assert_eq!(status, 200);
    assert!(
        body["name"].as_str().is_some_and(|s| !s.is_empty()),
        "{body}"
    );
    assert!(
        body["cluster_name"].as_str().is_some_and(|s| !s.is_empty()),
        "{body}"
    );
    assert!(
        body["cluster_uuid"].as_str().is_some_and(|s| !s.is_empty()),
        "{body}"
    );
    let v = &body["version"];
    assert_eq!(v["distribution"], "opensearch", "{body}");
    assert!(
        v["number"]
            .as_str()
            .is_some_and(|n| n.split('.').count() == 3),
        "{body}"
    );
    for key in [
        "build_type",
        "build_hash",
        "build_date",
        "lucene_version",
        "minimum_wire_compatibility_version",
        "minimum_index_compatibility_version",
    ] {
        assert!(v[key].is_string(), "version.{key} missing in {body}");
    }
    assert_eq!(v["build_snapshot"], false, "{body}");
    assert_eq!(
        body["tagline"],
        "The OpenSearch Project: https://opensearch.org/"
    );
    // The cluster uuid is stable across requests.
    let (_, again) = node.req("GET", "/", None).await;
    assert_eq!(again["cluster_uuid"], body["cluster_uuid"]);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_health_is_yellow_when_replicas_cannot_be_assigned() {
    let node = TestNode::start().await;
    let (status, empty) = node.req("GET", "/_cluster/health", None).await;
    assert_eq!(status, 200);
    assert_eq!(empty["status"], "green", "no indices: {empty}");
    assert_eq!(empty["active_primary_shards"], 0);

    let (s, b) = node
        .req(
            "PUT",
            "/replicated",
            Some(json!({"settings": {"number_of_shards": 3}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (status, h) = node.req("GET", "/_cluster/health", None).await;
    assert_eq!(status, 200);
    assert_eq!(h["status"], "yellow", "{h}");
    assert_eq!(
        h["cluster_name"],
        node.req("GET", "/", None).await.1["cluster_name"]
    );
    assert_eq!(h["timed_out"], false);
    assert_eq!(h["number_of_nodes"], 1);
    assert_eq!(h["number_of_data_nodes"], 1);
    assert_eq!(h["active_primary_shards"], 3, "{h}");
    assert_eq!(h["active_shards"], 3, "{h}");
    assert_eq!(h["unassigned_shards"], 3, "{h}");
    assert_eq!(h["relocating_shards"], 0);
    assert_eq!(h["initializing_shards"], 0);
    assert_eq!(
        h["active_shards_percent_as_number"].as_f64(),
        Some(50.0),
        "{h}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_health_is_green_without_replicas() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/solo",
            Some(json!({"settings": {"number_of_shards": 2, "number_of_replicas": 0}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (status, h) = node.req("GET", "/_cluster/health", None).await;
    assert_eq!(status, 200);
    assert_eq!(h["status"], "green", "{h}");
    assert_eq!(h["active_primary_shards"], 2, "{h}");
    assert_eq!(h["unassigned_shards"], 0, "{h}");
    assert_eq!(
        h["active_shards_percent_as_number"].as_f64(),
        Some(100.0),
        "{h}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_create_index_with_every_field_type_echoes_mapping_and_settings() {
    let node = TestNode::start().await;
    let (status, body) = node
        .req(
            "PUT",
            "/typed",
            Some(json!({"settings": {"number_of_shards": 3}, "mappings": every_type_mapping()})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"acknowledged": true, "shards_acknowledged": true, "index": "typed"})
    );

    let (status, index) = node.req("GET", "/typed", None).await;
    assert_eq!(status, 200, "{index}");
    assert_eq!(
        index.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["typed"],
        "{index}"
    );
    let typed = &index["typed"];
    assert_eq!(typed["aliases"], json!({}), "{index}");
    assert_every_type_properties(&typed["mappings"]["properties"]);
    let settings = &typed["settings"]["index"];
    assert_eq!(settings["number_of_shards"], "3", "{index}");
    assert_eq!(
        settings["number_of_replicas"], "1",
        "default replicas in {index}"
    );
    assert_eq!(settings["provided_name"], "typed", "{index}");
    assert!(
        settings["uuid"].as_str().is_some_and(|u| !u.is_empty()),
        "{index}"
    );
    assert!(
        settings["creation_date"]
            .as_str()
            .is_some_and(|d| d.parse::<u64>().is_ok()),
        "creation_date is a string of epoch millis in {index}"
    );

    let (status, s) = node.req("GET", "/typed/_settings", None).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(
        s["typed"]["settings"]["index"]["number_of_shards"], "3",
        "{s}"
    );
    assert_eq!(
        s["typed"]["settings"]["index"]["uuid"], settings["uuid"],
        "{s}"
    );

    let (status, m) = node.req("GET", "/typed/_mapping", None).await;
    assert_eq!(status, 200, "{m}");
    assert_every_type_properties(&m["typed"]["mappings"]["properties"]);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_documents_of_every_type_are_indexed_and_found() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/typed",
            Some(json!({"mappings": every_type_mapping()})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let doc = json!({
        "title": "Hello World", "body": "some body text", "tag": "t1", "big": 9_007_199_254_740_993_i64,
        "count": 42, "small": -300, "tiny": 7, "ratio": 0.25, "score": 1.5,
        "at": "2024-05-06T07:08:09Z", "ok": true
    });
    let (s, b) = node
        .req("PUT", "/typed/_doc/1?refresh=true", Some(doc.clone()))
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, got) = node.req("GET", "/typed/_doc/1", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        got["_source"], doc,
        "the source comes back byte-for-byte equal as JSON"
    );
    for q in [
        json!({"term": {"tag": "t1"}}),
        json!({"term": {"title.keyword": "Hello World"}}),
        json!({"match": {"title": "hello"}}),
        json!({"term": {"big": 9_007_199_254_740_993_i64}}),
        json!({"term": {"count": 42}}),
        json!({"term": {"small": -300}}),
        json!({"term": {"tiny": 7}}),
        json!({"term": {"ratio": 0.25}}),
        json!({"term": {"score": 1.5}}),
        json!({"range": {"at": {"gte": "2024-05-06", "lt": "2024-05-07"}}}),
        json!({"range": {"at": {"gte": 1714979289000_i64, "lte": 1714979289000_i64}}}),
        json!({"term": {"ok": true}}),
    ] {
        assert_eq!(
            node.count("typed", Some(q.clone())).await,
            1,
            "query {q} should find the document"
        );
    }
    for q in [
        json!({"term": {"count": 41}}),
        json!({"term": {"ok": false}}),
        json!({"term": {"tag": "T1"}}),
    ] {
        assert_eq!(
            node.count("typed", Some(q.clone())).await,
            0,
            "query {q} should find nothing"
        );
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_dynamic_mapping_infers_field_types_from_first_document() {
    let node = TestNode::start().await;
    let doc = json!({"s": "x", "n": 1, "f": 1.5, "b": true, "d": "2024-01-01T00:00:00Z", "o": {"k": "v"}});
    let (s, b) = node.req("PUT", "/dyn/_doc/1", Some(doc)).await;
    assert_eq!(s, 201, "{b}");
    let (s, m) = node.req("GET", "/dyn/_mapping", None).await;
    assert_eq!(s, 200, "{m}");
    let props = &m["dyn"]["mappings"]["properties"];
    let text_with_keyword =
        json!({"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}});
    assert_eq!(props["s"], text_with_keyword, "{m}");
    assert_eq!(props["n"], json!({"type": "long"}), "{m}");
    assert_eq!(props["f"], json!({"type": "float"}), "{m}");
    assert_eq!(props["b"], json!({"type": "boolean"}), "{m}");
    assert_eq!(props["d"]["type"], "date", "{m}");
    // An object field renders as its properties, without a type.
    assert_eq!(
        props["o"],
        json!({"properties": {"k": text_with_keyword}}),
        "{m}"
    );
    assert_eq!(props.as_object().unwrap().len(), 6, "{m}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_head_index_answers_200_or_404_without_body() {
    let node = TestNode::start().await;
    let (s, b) = node.req("PUT", "/present", None).await;
    assert_eq!(s, 200, "{b}");
    let (s, body) = node.req("HEAD", "/present", None).await;
    assert_eq!(s, 200);
    assert_eq!(body, Value::String(String::new()), "HEAD has no body");
    let (s, body) = node.req("HEAD", "/absent", None).await;
    assert_eq!(s, 404);
    assert_eq!(body, Value::String(String::new()), "HEAD has no body");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_delete_index_acknowledges_then_index_is_gone() {
    let node = TestNode::start().await;
    let (s, _) = node
        .req("PUT", "/doomed/_doc/1?refresh=true", Some(json!({"a": 1})))
        .await;
    assert_eq!(s, 201);
    let (s, body) = node.req("DELETE", "/doomed", None).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body, json!({"acknowledged": true}));
    let resp = node.req("GET", "/doomed", None).await;
    assert_error(&resp, 404, "index_not_found_exception");
    assert_eq!(node.req("HEAD", "/doomed", None).await.0, 404);
    let resp = node.req("GET", "/doomed/_doc/1", None).await;
    assert_error(&resp, 404, "index_not_found_exception");
    let resp = node.req("DELETE", "/doomed", None).await;
    assert_error(&resp, 404, "index_not_found_exception");
    // The name can be used again, and the new index starts empty.
    let (s, _) = node.req("PUT", "/doomed", None).await;
    assert_eq!(s, 200);
    assert_eq!(node.count("doomed", None).await, 0);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_delete_and_flush_with_ignore_unavailable_skip_missing_indices() {
    let node = TestNode::start().await;
    assert_eq!(node.req("PUT", "/kept", None).await.0, 200);
    assert_eq!(node.req("PUT", "/doomed", None).await.0, 200);
    // opensearch-py's `indices.delete(index=..., ignore_unavailable=True)` cleanup idiom.
    let (s, b) = node
        .req("DELETE", "/never-was?ignore_unavailable=true", None)
        .await;
    assert_eq!((s, b), (200, json!({"acknowledged": true})));
    // The missing name is skipped; the existing one is deleted.
    let (s, b) = node
        .req("DELETE", "/doomed,never-was?ignore_unavailable=true", None)
        .await;
    assert_eq!((s, b), (200, json!({"acknowledged": true})));
    assert_eq!(node.req("HEAD", "/doomed", None).await.0, 404);
    assert_eq!(node.req("HEAD", "/kept", None).await.0, 200);
    // Without the flag a missing name still fails the whole call, and nothing is deleted.
    let resp = node.req("DELETE", "/kept,never-was", None).await;
    assert_error(&resp, 404, "index_not_found_exception");
    assert_eq!(node.req("HEAD", "/kept", None).await.0, 200);
    // A wildcard matching nothing is allowed by default, refused with allow_no_indices=false.
    let (s, b) = node.req("DELETE", "/nomatch-*", None).await;
    assert_eq!((s, b), (200, json!({"acknowledged": true})));
    let resp = node
        .req("DELETE", "/nomatch-*?allow_no_indices=false", None)
        .await;
    assert_error(&resp, 404, "index_not_found_exception");
    // Flush reads the same options: the missing index is skipped, so no shard is flushed.
    let (s, b) = node
        .req("POST", "/never-was/_flush?ignore_unavailable=true", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["_shards"]["total"], 0, "{b}");
    let resp = node.req("POST", "/never-was/_flush", None).await;
    assert_error(&resp, 404, "index_not_found_exception");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cat_indices_lists_indices_as_text_and_json() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/cat-a",
            Some(json!({"settings": {"number_of_shards": 1, "number_of_replicas": 0}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req(
            "PUT",
            "/cat-b",
            Some(json!({"settings": {"number_of_shards": 2}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node.bulk(
        "/cat-a/_bulk?refresh=true",
        &[
            json!({"index": {"_id": "1"}}),
            json!({"v": 1}),
            json!({"index": {"_id": "2"}}),
            json!({"v": 2}),
        ],
    )
    .await;
    let uuid_a =
        node.req("GET", "/cat-a/_settings", None).await.1["cat-a"]["settings"]["index"]["uuid"]
            .clone();

    let (s, text) = node.req("GET", "/_cat/indices", None).await;
    assert_eq!(s, 200);
    let text = text.as_str().expect("plain text").to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "one line per index: {text:?}");
    let row_a: Vec<&str> = lines
        .iter()
        .find(|l| l.contains("cat-a"))
        .expect("cat-a row")
        .split_whitespace()
        .collect();
    assert_eq!(&row_a[..3], &["green", "open", "cat-a"], "{text:?}");
    assert_eq!(row_a[3], uuid_a.as_str().unwrap(), "{text:?}");
    assert_eq!(
        &row_a[4..8],
        &["1", "0", "2", "0"],
        "pri rep docs.count docs.deleted in {text:?}"
    );
    let row_b: Vec<&str> = lines
        .iter()
        .find(|l| l.contains("cat-b"))
        .expect("cat-b row")
        .split_whitespace()
        .collect();
    assert_eq!(&row_b[..3], &["yellow", "open", "cat-b"], "{text:?}");
    assert_eq!(&row_b[4..7], &["2", "1", "0"], "{text:?}");

    let (s, text) = node.req("GET", "/_cat/indices?v", None).await;
    assert_eq!(s, 200);
    let text = text.as_str().expect("plain text").to_string();
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert!(
        text.lines().next().unwrap().contains("health status index"),
        "{text:?}"
    );
    assert_eq!(
        header,
        [
            "health",
            "status",
            "index",
            "uuid",
            "pri",
            "rep",
            "docs.count",
            "docs.deleted",
            "store.size",
            "pri.store.size"
        ],
        "{text:?}"
    );
    assert_eq!(
        text.lines().count(),
        3,
        "header plus one line per index: {text:?}"
    );

    let (s, arr) = node.req("GET", "/_cat/indices?format=json", None).await;
    assert_eq!(s, 200, "{arr}");
    let arr = arr.as_array().expect("a JSON array");
    assert_eq!(arr.len(), 2);
    let a = arr
        .iter()
        .find(|r| r["index"] == "cat-a")
        .expect("cat-a entry");
    assert_eq!(a["health"], "green");
    assert_eq!(a["status"], "open");
    assert_eq!(a["uuid"], uuid_a);
    assert_eq!(a["pri"], "1");
    assert_eq!(a["rep"], "0");
    assert_eq!(a["docs.count"], "2", "counts are strings in cat JSON: {a}");
    assert_eq!(a["docs.deleted"], "0");
    assert!(a["store.size"].is_string(), "{a}");

    // A single index by name.
    let (s, arr) = node
        .req("GET", "/_cat/indices/cat-b?format=json", None)
        .await;
    assert_eq!(s, 200, "{arr}");
    assert_eq!(arr.as_array().map(Vec::len), Some(1), "{arr}");
    assert_eq!(arr[0]["index"], "cat-b");
    assert_eq!(arr[0]["docs.count"], "0");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_invalid_index_names_are_rejected() {
    let node = TestNode::start().await;
    let long = "a".repeat(256);
    // "." and ".." are left out: HTTP clients normalise them away as path segments.
    let names = [
        "Upper",
        "_under",
        "-dash",
        "+plus",
        "a*b",
        "a?b",
        "a\"b",
        "a<b",
        "a>b",
        "a|b",
        "a b",
        "a,b",
        "a#b",
        "a\\b",
        "a:b",
        long.as_str(),
    ];
    for name in names {
        let path = format!("/{}", enc(name));
        let resp = node.req("PUT", &path, None).await;
        assert_error(&resp, 400, "invalid_index_name_exception");
        let reason = resp.1["error"]["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("Invalid index name ["),
            "reason for {name:?}: {reason}"
        );
        // Indexing a document into such a name is refused the same way.
        let resp = node
            .req("PUT", &format!("{path}/_doc/1"), Some(json!({"a": 1})))
            .await;
        assert_error(&resp, 400, "invalid_index_name_exception");
    }
    let (s, arr) = node.req("GET", "/_cat/indices?format=json", None).await;
    assert_eq!(s, 200);
    assert_eq!(arr, json!([]), "no index was created");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_creating_an_existing_index_is_rejected() {
    let node = TestNode::start().await;
    let (s, _) = node
        .req(
            "PUT",
            "/twice",
            Some(json!({"mappings": {"properties": {"a": {"type": "keyword"}}}})),
        )
        .await;
    assert_eq!(s, 200);
    let uuid =
        node.req("GET", "/twice/_settings", None).await.1["twice"]["settings"]["index"]["uuid"]
            .clone();
    let resp = node
        .req(
            "PUT",
            "/twice",
            Some(json!({"mappings": {"properties": {"a": {"type": "long"}}}})),
        )
        .await;
    assert_error(&resp, 400, "resource_already_exists_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!("index [twice/{}] already exists", uuid.as_str().unwrap())
    );
    assert_eq!(resp.1["error"]["index"], "twice");
    // The first index is untouched.
    let (_, m) = node.req("GET", "/twice/_mapping", None).await;
    assert_eq!(m["twice"]["mappings"]["properties"]["a"]["type"], "keyword");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_put_mapping_adds_fields_and_refuses_type_changes() {
    let node = TestNode::start().await;
    let (s, _) = node
        .req(
            "PUT",
            "/m",
            Some(json!({"mappings": {"properties": {"count": {"type": "integer"}}}})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, body) = node
        .req(
            "PUT",
            "/m/_mapping",
            Some(json!({"properties": {"extra": {"type": "keyword"}}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body, json!({"acknowledged": true}));
    let (_, m) = node.req("GET", "/m/_mapping", None).await;
    assert_eq!(
        m["m"]["mappings"]["properties"],
        json!({"count": {"type": "integer"}, "extra": {"type": "keyword"}}),
        "{m}"
    );
    // The new field is a real keyword field.
    let (s, _) = node
        .req(
            "PUT",
            "/m/_doc/1?refresh=true",
            Some(json!({"count": 1, "extra": "Exact Value"})),
        )
        .await;
    assert_eq!(s, 201);
    assert_eq!(
        node.count("m", Some(json!({"term": {"extra": "Exact Value"}})))
            .await,
        1
    );
    assert_eq!(
        node.count("m", Some(json!({"term": {"extra": "exact"}})))
            .await,
        0
    );

    let resp = node
        .req(
            "PUT",
            "/m/_mapping",
            Some(json!({"properties": {"count": {"type": "keyword"}}})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("mapper [count] cannot be changed from type [integer] to [keyword]"),
        "{reason}"
    );
    let (_, m) = node.req("GET", "/m/_mapping", None).await;
    assert_eq!(
        m["m"]["mappings"]["properties"]["count"],
        json!({"type": "integer"}),
        "unchanged: {m}"
    );

    let resp = node
        .req(
            "PUT",
            "/missing/_mapping",
            Some(json!({"properties": {"x": {"type": "keyword"}}})),
        )
        .await;
    assert_error(&resp, 404, "index_not_found_exception");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_restart_keeps_indices_mappings_settings_and_documents() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/keep",
            Some(json!({
                "settings": {"number_of_shards": 3, "number_of_replicas": 0},
                "mappings": {"properties": {
                    "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
                    "n": {"type": "integer"}
                }}
            })),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    for (id, title, n) in [
        ("1", "first doc", 1),
        ("2", "second doc", 2),
        ("3", "third doc", 3),
    ] {
        let (s, _) = node
            .req(
                "PUT",
                &format!("/keep/_doc/{id}?refresh=true"),
                Some(json!({"title": title, "n": n})),
            )
            .await;
        assert_eq!(s, 201);
    }
    // Written but never refreshed before the restart; adds a dynamic field.
    let (s, _) = node
        .req(
            "PUT",
            "/keep/_doc/4",
            Some(json!({"title": "fourth doc", "n": 4, "extra": "dyn"})),
        )
        .await;
    assert_eq!(s, 201);
    let (s, _) = node
        .req("POST", "/keep/_update/2", Some(json!({"doc": {"n": 20}})))
        .await;
    assert_eq!(s, 200);
    let (s, _) = node.req("DELETE", "/keep/_doc/3", None).await;
    assert_eq!(s, 200);
    let (_, mapping_before) = node.req("GET", "/keep/_mapping", None).await;
    let (_, settings_before) = node.req("GET", "/keep/_settings", None).await;
    assert_eq!(
        mapping_before["keep"]["mappings"]["properties"]["extra"]["type"],
        "text"
    );

    let data = node.data.clone();
    let tmp = node.stop().await;
    let node = TestNode::start_on(&data, &[]).await;

    let (s, mapping_after) = node.req("GET", "/keep/_mapping", None).await;
    assert_eq!(s, 200, "{mapping_after}");
    assert_eq!(mapping_after, mapping_before);
    let (s, settings_after) = node.req("GET", "/keep/_settings", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        settings_after, settings_before,
        "uuid, creation date and shard count survive"
    );
    assert_eq!(
        settings_after["keep"]["settings"]["index"]["number_of_shards"],
        "3"
    );

    let (s, d2) = node.req("GET", "/keep/_doc/2", None).await;
    assert_eq!(s, 200);
    assert_eq!(d2["_version"], 2);
    assert_eq!(d2["_source"], json!({"title": "second doc", "n": 20}));
    let (s, d4) = node.req("GET", "/keep/_doc/4", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        d4["_source"],
        json!({"title": "fourth doc", "n": 4, "extra": "dyn"})
    );
    let (s, d3) = node.req("GET", "/keep/_doc/3", None).await;
    assert_eq!(s, 404);
    assert_eq!(d3["found"], false);

    assert_eq!(node.count("keep", None).await, 3);
    assert_eq!(
        node.count("keep", Some(json!({"term": {"n": 20}}))).await,
        1
    );
    assert_eq!(
        node.count("keep", Some(json!({"match": {"title": "fourth"}})))
            .await,
        1
    );
    assert_eq!(
        node.count("keep", Some(json!({"match": {"title": "third"}})))
            .await,
        0
    );
    // New writes continue the version history.
    let (s, w) = node
        .req(
            "PUT",
            "/keep/_doc/2",
            Some(json!({"title": "again", "n": 2})),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(w["_version"], 3);
    node.stop().await;
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_put_settings_changes_dynamic_settings_and_get_filters_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = TestNode::start_on(tmp.path(), &[]).await;
    assert_eq!(node.req("PUT", "/movies", None).await.0, 200);
    let body =
        json!({"settings": {"index.max_result_window": 50, "index": {"number_of_replicas": 0}}});
    let (s, b) = node.req("PUT", "/movies/_settings", Some(body)).await;
    assert_eq!((s, b), (200, json!({"acknowledged": true})));
    let (s, b) = node.req("GET", "/movies/_settings", None).await;
    assert_eq!(s, 200, "{b}");
    let index = &b["movies"]["settings"]["index"];
    assert_eq!(index["max_result_window"], "50", "{b}");
    assert_eq!(index["number_of_replicas"], "0", "{b}");
    assert_eq!(index["provided_name"], "movies", "{b}");
    // One setting by name, nested or flat, and wildcards.
    let (_, b) = node
        .req("GET", "/movies/_settings/index.max_result_window", None)
        .await;
    assert_eq!(
        b,
        json!({"movies": {"settings": {"index": {"max_result_window": "50"}}}})
    );
    let (_, b) = node
        .req(
            "GET",
            "/movies/_settings/index.number_of_*?flat_settings=true",
            None,
        )
        .await;
    assert_eq!(
        b,
        json!({"movies": {"settings": {"index.number_of_replicas": "0", "index.number_of_shards": "1"}}})
    );
    // Defaults of what is not set.
    let (_, b) = node
        .req("GET", "/movies/_settings?include_defaults=true", None)
        .await;
    assert_eq!(b["movies"]["defaults"]["index"]["store"]["type"], "", "{b}");
    assert_eq!(b["movies"]["defaults"]["index"]["blocks"]["write"], "false");
    assert!(b["movies"]["defaults"]["index"]["max_result_window"].is_null());
    // The window applies at once: from + size over 50 is refused.
    let (s, b) = node.req("GET", "/movies/_search?size=51", None).await;
    assert_eq!(s, 400, "{b}");
    // A null resets to the default; the change survives a restart.
    let (s, _) = node
        .req(
            "PUT",
            "/movies/_settings",
            Some(json!({"index.max_result_window": null})),
        )
        .await;
    assert_eq!(s, 200);
    node.stop().await;
    let node = TestNode::start_on(tmp.path(), &[]).await;
    let (_, b) = node.req("GET", "/movies/_settings", None).await;
    let index = &b["movies"]["settings"]["index"];
    assert!(index["max_result_window"].is_null(), "{b}");
    assert_eq!(index["number_of_replicas"], "0", "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_put_settings_refuses_static_unknown_private_and_bad_values() {
    let node = TestNode::start().await;
    assert_eq!(node.req("PUT", "/movies", None).await.0, 200);
    let uuid =
        node.req("GET", "/movies/_settings", None).await.1["movies"]["settings"]["index"]["uuid"]
            .as_str()
            .expect("uuid")
            .to_string();
    let cases = [
        (
            json!({"index": {"number_of_shards": 3}}),
            format!(
                "Can't update non dynamic settings [[index.number_of_shards]] for open indices [[movies/{uuid}]]"
            ),
        ),
        (
            json!({"index.nope": 1}),
            "unknown setting [index.nope] please check that any required plugins are installed, or check the breaking changes documentation for removed settings".to_string(),
        ),
        (
            json!({"index.uuid": "x"}),
            "private index setting [index.uuid] can not be set explicitly".to_string(),
        ),
        (
            json!({"index.blocks.write": "maybe"}),
            "Failed to parse value [maybe] as only [true] or [false] are allowed.".to_string(),
        ),
        (
            json!({"max_result_window": 5, "index.max_result_window": 6}),
            "duplicate settings key [index.max_result_window] found, previous value [5], current value [6]"
                .to_string(),
        ),
        (
            json!({"number_of_replicas": -1}),
            "Failed to parse value [-1] for setting [index.number_of_replicas] must be >= 0 and <= 1024"
                .to_string(),
        ),
    ];
    for (body, reason) in cases {
        let r = node
            .req("PUT", "/movies/_settings", Some(body.clone()))
            .await;
        assert_error(&r, 400, "illegal_argument_exception");
        assert_eq!(r.1["error"]["reason"], reason.as_str(), "{body}");
    }
    let r = node.req("PUT", "/movies/_settings", Some(json!({}))).await;
    assert_error(&r, 400, "action_request_validation_exception");
    assert_eq!(
        r.1["error"]["reason"],
        "Validation Failed: 1: no settings to update;"
    );
    let r = node
        .req(
            "PUT",
            "/nope/_settings",
            Some(json!({"number_of_replicas": 0})),
        )
        .await;
    assert_error(&r, 404, "index_not_found_exception");
    // Nothing was changed by the refused updates.
    let (_, b) = node
        .req("GET", "/movies/_settings?flat_settings=true", None)
        .await;
    let settings = b["movies"]["settings"].as_object().expect("settings");
    assert!(!settings.contains_key("index.blocks.write"), "{b}");
    assert_eq!(settings["index.number_of_shards"], "1");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_write_and_read_only_blocks_refuse_writes_until_lifted() {
    let node = TestNode::start().await;
    let (s, _) = node
        .req(
            "PUT",
            "/movies/_doc/1?refresh=true",
            Some(json!({"t": "a"})),
        )
        .await;
    assert_eq!(s, 201);
    let block = |on: Value| json!({"settings": {"index.blocks.write": on}});
    assert_eq!(
        node.req("PUT", "/movies/_settings", Some(block(json!(true))))
            .await
            .0,
        200
    );
    let r = node
        .req("PUT", "/movies/_doc/2", Some(json!({"t": "b"})))
        .await;
    assert_error(&r, 403, "cluster_block_exception");
    assert_eq!(
        r.1["error"]["reason"],
        "index [movies] blocked by: [FORBIDDEN/8/index write (api)];"
    );
    let items = node
        .bulk(
            "/_bulk",
            &[json!({"delete": {"_index": "movies", "_id": "1"}})],
        )
        .await;
    assert_eq!(items["errors"], true, "{items}");
    assert_eq!(items["items"][0]["delete"]["status"], 403, "{items}");
    // Reads still work; the mapping may still change under a write block.
    assert_eq!(node.req("GET", "/movies/_doc/1", None).await.0, 200);
    let mapping = json!({"properties": {"n": {"type": "long"}}});
    assert_eq!(
        node.req("PUT", "/movies/_mapping", Some(mapping.clone()))
            .await
            .0,
        200
    );
    // read_only also refuses mapping changes.
    let ro = json!({"index.blocks.read_only": true, "index.blocks.write": null});
    assert_eq!(node.req("PUT", "/movies/_settings", Some(ro)).await.0, 200);
    let r = node.req("PUT", "/movies/_mapping", Some(mapping)).await;
    assert_error(&r, 403, "cluster_block_exception");
    assert_eq!(
        r.1["error"]["reason"],
        "index [movies] blocked by: [FORBIDDEN/5/index read-only (api)];"
    );
    // Lifting the block lets writes through again.
    let lift = json!({"index.blocks.read_only": false});
    assert_eq!(
        node.req("PUT", "/movies/_settings", Some(lift)).await.0,
        200
    );
    let (s, b) = node
        .req("PUT", "/movies/_doc/2", Some(json!({"t": "b"})))
        .await;
    assert_eq!(s, 201, "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cat_count_and_settings_of_every_index() {
    let node = TestNode::start().await;
    let body = json!({"settings": {"index.routing.allocation.require.zone": "a"}});
    let (s, b) = node.req("PUT", "/movies", Some(body)).await;
    assert_eq!(s, 200, "allocation filters are kept: {b}");
    for (id, index) in [("1", "movies"), ("2", "movies"), ("3", "books")] {
        let (s, _) = node
            .req(
                "PUT",
                &format!("/{index}/_doc/{id}?refresh=true"),
                Some(json!({"t": id})),
            )
            .await;
        assert_eq!(s, 201);
    }
    let (s, b) = node
        .req("GET", "/_cat/count/movies?format=json", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b[0]["count"], "2", "{b}");
    assert!(
        b[0]["epoch"]
            .as_str()
            .is_some_and(|e| e.parse::<u64>().is_ok()),
        "{b}"
    );
    let (_, b) = node.req("GET", "/_cat/count?format=json", None).await;
    assert_eq!(b[0]["count"], "3", "{b}");
    let text = node
        .client
        .get(node.url("/_cat/count?v"))
        .send()
        .await
        .expect("sent");
    let text = text.text().await.expect("text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("epoch") && lines[0].trim_end().ends_with("count"),
        "{text}"
    );
    assert!(lines[1].trim_end().ends_with(" 3"), "{text}");

    let (s, b) = node.req("GET", "/_settings", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["books"]["settings"]["index"]["provided_name"], "books");
    assert_eq!(
        b["movies"]["settings"]["index"]["routing"]["allocation"]["require"]["zone"],
        "a"
    );
    let (_, b) = node
        .req("GET", "/_settings/index.provided_name", None)
        .await;
    assert_eq!(
        b,
        json!({
            "books": {"settings": {"index": {"provided_name": "books"}}},
            "movies": {"settings": {"index": {"provided_name": "movies"}}}
        })
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_ip_fields_and_dynamic_settings_through_the_mapping_api() {
    let node = TestNode::start().await;
    let mappings = json!({"properties": {
        "director": {"type": "text"},
        "year": {"type": "integer"},
        "location": {"type": "ip", "ignore_malformed": true}
    }});
    let (s, b) = node
        .req(
            "PUT",
            "/movies",
            Some(json!({"mappings": mappings.clone()})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, m) = node.req("GET", "/movies/_mapping", None).await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(m["movies"]["mappings"], mappings, "{m}");
    for (id, doc) in [
        ("1", json!({"director": "a", "location": "10.0.0.2"})),
        ("2", json!({"director": "b", "location": "2001:db8::1"})),
        ("3", json!({"director": "c", "location": "not an address"})),
    ] {
        let (s, b) = node
            .req("PUT", &format!("/movies/_doc/{id}?refresh=true"), Some(doc))
            .await;
        assert_eq!(s, 201, "{b}");
    }
    let (_, got) = node.req("GET", "/movies/_doc/3", None).await;
    assert_eq!(got["_source"]["location"], "not an address", "{got}");
    for (q, n) in [
        (json!({"term": {"location": "10.0.0.0/8"}}), 1),
        (json!({"term": {"location": "2001:DB8::1"}}), 1),
        (
            json!({"range": {"location": {"gte": "10.0.0.1", "lte": "10.0.0.9"}}}),
            1,
        ),
        (json!({"exists": {"field": "location"}}), 2),
    ] {
        assert_eq!(node.count("movies", Some(q.clone())).await, n, "{q}");
    }
    let resp = node
        .req(
            "POST",
            "/movies/_search",
            Some(json!({"query": {"term": {"location": "10.0.0.300"}}})),
        )
        .await;
    assert_error(&resp, 400, "query_shard_exception");
    let (s, b) = node
        .req("PUT", "/movies/_doc/4", Some(json!({"location": 5})))
        .await;
    assert_eq!(
        s, 201,
        "ignore_malformed keeps a non-string value in _source only: {b}"
    );

    for dynamic in ["true", "false", "strict", "strict_allow_templates"] {
        let (s, b) = node
            .req(
                "PUT",
                "/movies/_mapping",
                Some(json!({"dynamic": dynamic, "properties": {"producer": {"type": "text"}}})),
            )
            .await;
        assert_eq!((s, &b), (200, &json!({"acknowledged": true})), "{dynamic}");
    }
    let (_, m) = node.req("GET", "/movies/_mapping", None).await;
    assert_eq!(
        m["movies"]["mappings"]["dynamic"], "strict_allow_templates",
        "{m}"
    );
    let resp = node
        .req("PUT", "/movies/_doc/5", Some(json!({"unknown": 1})))
        .await;
    // OpenSearch's StrictDynamicMappingException, for strict and strict_allow_templates.
    assert_error(&resp, 400, "strict_dynamic_mapping_exception");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_block_api_sets_the_block_and_flush_commits() {
    let node = TestNode::start().await;
    assert_eq!(node.req("PUT", "/movies", None).await.0, 200);
    let (s, b) = node
        .req("PUT", "/movies/_doc/1", Some(json!({"t": "a"})))
        .await;
    assert_eq!(s, 201, "{b}");
    // A flush commits: the write is visible without a refresh.
    let (s, b) = node.req("POST", "/movies/_flush", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["_shards"]["failed"], 0, "{b}");
    assert_eq!(node.req("GET", "/_flush", None).await.0, 200);
    let (_, b) = node.req("GET", "/movies/_count", None).await;
    assert_eq!(b["count"], 1, "{b}");

    let (s, b) = node.req("PUT", "/movies/_block/write", None).await;
    assert_eq!(
        (s, b),
        (
            200,
            json!({"acknowledged": true, "shards_acknowledged": true,
                   "indices": [{"name": "movies", "blocked": true}]})
        )
    );
    let r = node
        .req("PUT", "/movies/_doc/2", Some(json!({"t": "b"})))
        .await;
    assert_error(&r, 403, "cluster_block_exception");
    let (_, b) = node
        .req("GET", "/movies/_settings/index.blocks.write", None)
        .await;
    assert_eq!(b["movies"]["settings"]["index"]["blocks"]["write"], "true");
    for block in ["read", "nope"] {
        let r = node
            .req("PUT", &format!("/movies/_block/{block}"), None)
            .await;
        assert_error(&r, 400, "illegal_argument_exception");
    }
    let r = node.req("PUT", "/nope/_block/write", None).await;
    assert_error(&r, 404, "index_not_found_exception");
    node.stop().await;
}

/// OpenSearch's handlers read `request.param("index")`, which is the URL's `index` when the
/// path names none: every index API with both forms acts on the parameter's indices
/// (`http/url_index.rs`). Through a gateway, the upstream is asked for the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_the_url_index_parameter_is_the_path_index_of_every_index_api() {
    let node = TestNode::start().await;
    for (index, field) in [("movies", "title"), ("books", "author")] {
        let (s, b) = node
            .req(
                "PUT",
                &format!("/{index}/_doc/1?refresh=true"),
                Some(json!({ field: "x" })),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    for path in [
        "/_mapping?index=movies",
        "/_settings?index=movies",
        "/_settings/index.provided_name?index=movies",
        "/_alias?index=movies",
        // The name read as the handlers read it: escaped, it is still `index`.
        "/_mapping?%69ndex=movies",
    ] {
        let (s, b) = node.req("GET", path, None).await;
        assert_eq!(
            (s, keys(&b)),
            (200, vec!["movies".to_string()]),
            "{path}: {b}"
        );
    }
    let (s, b) = node
        .req("GET", "/_mapping?index=books,movies&pretty", None)
        .await;
    assert_eq!(
        (s, keys(&b)),
        (200, vec!["books".into(), "movies".into()]),
        "{b}"
    );
    let (s, b) = node.req("GET", "/_stats?index=books", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(keys(&b["indices"]), vec!["books".to_string()], "{b}");
    let (s, b) = node
        .req("GET", "/_cat/indices?index=books&format=json", None)
        .await;
    assert_eq!(s, 200, "{b}");
    let names: Vec<&str> = b
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["index"].as_str())
        .collect();
    assert_eq!(names, ["books"], "{b}");
    let (s, b) = node
        .req("GET", "/_cat/count?index=movies&format=json", None)
        .await;
    assert_eq!((s, &b[0]["count"]), (200, &json!("1")), "{b}");
    // The path's index wins; an index that does not exist is not found, as by path.
    let (s, b) = node.req("GET", "/books/_mapping?index=movies", None).await;
    assert_eq!((s, keys(&b)), (200, vec!["books".to_string()]), "{b}");
    let (s, b) = node.req("GET", "/_mapping?index=nope", None).await;
    assert_error(&(s, b), 404, "index_not_found_exception");
    // A value cannot reach another route: it is one path segment.
    let (s, b) = node
        .req("GET", "/_mapping?index=..%2F_cluster%2Fsettings", None)
        .await;
    assert!(s == 400 || s == 404, "{s} {b}");
    node.stop().await;
}

/// OpenSearch's mapping-explosion limits (`index.mapping.total_fields.limit`, default 1000;
/// `index.mapping.depth.limit`, default 20): dynamic index settings, enforced on what a write
/// adds — a document's new fields, a mapping update, a create with mappings — and a refused
/// write leaves the mapping as it was. Tools that set them create their indices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_mapping_limits_bound_what_writes_add() {
    let node = TestNode::start().await;
    let settings = json!({"settings": {"index.mapping.total_fields.limit": 3}});
    let (s, b) = node.req("PUT", "/narrow", Some(settings)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req(
            "PUT",
            "/narrow/_doc/1",
            Some(json!({"a": 1, "b": 2, "c": 3})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let r = node
        .req("PUT", "/narrow/_doc/2", Some(json!({"d": 1})))
        .await;
    assert_error(&r, 400, "illegal_argument_exception");
    assert_eq!(
        r.1["error"]["reason"], "Limit of total fields [3] has been exceeded",
        "{}",
        r.1
    );
    let r = node
        .req(
            "PUT",
            "/narrow/_mapping",
            Some(json!({"properties": {"e": {"type": "keyword"}}})),
        )
        .await;
    assert_error(&r, 400, "illegal_argument_exception");
    let (_, m) = node.req("GET", "/narrow/_mapping", None).await;
    let fields = m["narrow"]["mappings"]["properties"].as_object().unwrap();
    assert_eq!(fields.len(), 3, "nothing added: {m}");
    // Raised (a dynamic setting), the same document goes in.
    let raise = json!({"index.mapping.total_fields.limit": 10});
    let (s, b) = node.req("PUT", "/narrow/_settings", Some(raise)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req("PUT", "/narrow/_doc/2", Some(json!({"d": 1})))
        .await;
    assert_eq!(s, 201, "{b}");

    // Depth, by default 20: a document fifty objects deep is refused.
    let mut deep = json!(1);
    for _ in 0..50 {
        deep = json!({ "a": deep });
    }
    let r = node.req("PUT", "/deep/_doc/1", Some(deep)).await;
    assert_error(&r, 400, "illegal_argument_exception");
    let reason = r.1["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason
            .starts_with("Limit of mapping depth [20] has been exceeded due to object field [a.a."),
        "{}",
        r.1
    );
    // A create whose mappings are beyond its own limits is refused.
    let body = json!({"settings": {"index.mapping.total_fields.limit": 1},
                      "mappings": {"properties": {"x": {"type": "keyword"}, "y": {"type": "long"}}}});
    let r = node.req("PUT", "/too-wide", Some(body)).await;
    assert_error(&r, 400, "illegal_argument_exception");
    let (s, _) = node.req("HEAD", "/too-wide", None).await;
    assert_eq!(s, 404);
    // The settings are shown, with their defaults when unset.
    let (_, b) = node
        .req(
            "GET",
            "/narrow/_settings?flat_settings=true&include_defaults=true",
            None,
        )
        .await;
    assert_eq!(
        b["narrow"]["settings"]["index.mapping.total_fields.limit"], "10",
        "{b}"
    );
    assert_eq!(
        b["narrow"]["defaults"]["index.mapping.depth.limit"], "20",
        "{b}"
    );
    // Bad values are refused naming the setting.
    let r = node
        .req(
            "PUT",
            "/narrow/_settings",
            Some(json!({"index.mapping.depth.limit": 0})),
        )
        .await;
    assert_error(&r, 400, "illegal_argument_exception");
    node.stop().await;
}

/// An unknown top-level key of a create-index body: OpenSearch's `parse_exception`
/// (`CreateIndexRequest.source`), not `parsing_exception`.
#[tokio::test]
async fn test_an_unknown_key_of_a_create_body_is_a_parse_exception() {
    let node = TestNode::start().await;
    let r = node.req("PUT", "/k", Some(json!({"mapings": {}}))).await;
    assert_error(&r, 400, "parse_exception");
    assert_eq!(
        r.1["error"]["reason"],
        "unknown key [mapings] for create index"
    );
    node.stop().await;
}

/// OpenSearch reads every top-level key of a create-index body before validating the values
/// (or the index name): an unknown key is the error wherever it stands.
#[tokio::test]
async fn test_an_unknown_key_of_a_create_body_wins_over_bad_values() {
    let node = TestNode::start().await;
    let bad_settings = json!({"index.number_of_shards": "bad"});
    let bodies = [
        json!({"settings": bad_settings, "unknown_top": 1}),
        json!({"unknown_top": 1, "settings": bad_settings}),
        json!({"mappings": {"properties": {"f": {"type": "nope"}}}, "unknown_top": 1}),
    ];
    for (path, body) in [
        ("/x", &bodies[0]),
        ("/x", &bodies[1]),
        ("/x", &bodies[2]),
        ("/Bad", &bodies[0]),
    ] {
        let r = node.req("PUT", path, Some(body.clone())).await;
        assert_error(&r, 400, "parse_exception");
        assert_eq!(
            r.1["error"]["reason"], "unknown key [unknown_top] for create index",
            "PUT {path} {body}"
        );
    }
    // Without the unknown key, the settings are what is wrong.
    let r = node
        .req("PUT", "/x", Some(json!({"settings": bad_settings})))
        .await;
    assert_error(&r, 400, "illegal_argument_exception");
    let (s, b) = node.req("HEAD", "/x", None).await;
    assert_eq!(s, 404, "no index was created: {b}");
    node.stop().await;
}

/// `_refresh` counts shard copies as a write does (OpenSearch on one node: a primary and its
/// unassigned replica are 2 in `total`, 1 `successful`), and reads the request's index options
/// (a hidden index through `expand_wildcards`).
#[tokio::test]
async fn test_refresh_counts_copies_and_reads_the_index_options() {
    let node = TestNode::start().await;
    let (s, w) = node.req("PUT", "/r1/_doc/1", Some(json!({"a": 1}))).await;
    assert_eq!(s, 201, "{w}");
    let (s, b) = node.req("POST", "/r1/_refresh", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["_shards"],
        json!({"total": 2, "successful": 1, "failed": 0})
    );
    assert_eq!(
        b["_shards"]["total"], w["_shards"]["total"],
        "as the write's"
    );
    let body = json!({"settings": {"index.number_of_replicas": 0, "index.hidden": true,
                                   "index.refresh_interval": "-1"}});
    let (s, b) = node.req("PUT", "/r-hidden", Some(body)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req("PUT", "/r-hidden/_doc/1", Some(json!({"a": 1})))
        .await;
    assert_eq!(s, 201, "{b}");
    let (_, b) = node.req("POST", "/r-*/_refresh", None).await;
    assert_eq!(
        b["_shards"]["successful"], 0,
        "a hidden index is skipped by default: {b}"
    );
    let (_, b) = node
        .req("POST", "/r-*/_refresh?expand_wildcards=all", None)
        .await;
    assert_eq!(
        b["_shards"],
        json!({"total": 1, "successful": 1, "failed": 0}),
        "{b}"
    );
    let (_, c) = node.req("GET", "/r-hidden/_count", None).await;
    assert_eq!(c["count"], 1, "refreshed: {c}");
    node.stop().await;
}
