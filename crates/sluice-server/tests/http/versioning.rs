//! Optimistic concurrency over HTTP, as OpenSearch 3.x answers it: `if_seq_no` +
//! `if_primary_term` on index, update and delete (single and `_bulk`), `version` +
//! `version_type=external|external_gte`, `?version` on GET, `op_type=create` in every form,
//! `detect_noop`, and two writers doing compare-and-set never losing an update.

use std::sync::Arc;

use crate::common::{TestNode, assert_error, ndjson};
use serde_json::{Value, json};

fn reason(resp: &(u16, Value)) -> String {
    resp.1["error"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_if_seq_no_mismatch_is_a_409_version_conflict() {
    let node = TestNode::start().await;
    let (s, first) = node.req("PUT", "/cas/_doc/1", Some(json!({"n": 1}))).await;
    assert_eq!(s, 201, "{first}");
    let seq = first["_seq_no"].as_u64().unwrap();
    let (s, second) = node
        .req(
            "PUT",
            &format!("/cas/_doc/1?if_seq_no={seq}&if_primary_term=1"),
            Some(json!({"n": 2})),
        )
        .await;
    assert_eq!(s, 200, "{second}");
    assert_eq!(second["_version"], 2);
    // The same compare-and-set again: the document moved on.
    let stale = node
        .req(
            "PUT",
            &format!("/cas/_doc/1?if_seq_no={seq}&if_primary_term=1"),
            Some(json!({"n": 3})),
        )
        .await;
    assert_error(&stale, 409, "version_conflict_engine_exception");
    let now = second["_seq_no"].as_u64().unwrap();
    assert_eq!(
        reason(&stale),
        format!(
            "[1]: version conflict, required seqNo [{seq}], primary term [1]. current document has seqNo [{now}] and primary term [1]"
        )
    );
    assert_eq!(stale.1["error"]["index"], "cas");
    assert_eq!(stale.1["error"]["shard"], "0");
    // A wrong primary term conflicts too.
    let term = node
        .req(
            "PUT",
            &format!("/cas/_doc/1?if_seq_no={now}&if_primary_term=2"),
            Some(json!({"n": 3})),
        )
        .await;
    assert_error(&term, 409, "version_conflict_engine_exception");
    // On a missing document.
    let missing = node
        .req(
            "PUT",
            "/cas/_doc/nope?if_seq_no=0&if_primary_term=1",
            Some(json!({"n": 1})),
        )
        .await;
    assert_error(&missing, 409, "version_conflict_engine_exception");
    assert_eq!(
        reason(&missing),
        "[nope]: version conflict, required seqNo [0], primary term [1]. but no document was found"
    );
    // The stale writes changed nothing.
    let (_, got) = node.req("GET", "/cas/_doc/1", None).await;
    assert_eq!(got["_source"], json!({"n": 2}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_if_seq_no_applies_to_delete_and_update() {
    let node = TestNode::start().await;
    let (_, doc) = node.req("PUT", "/cas/_doc/1", Some(json!({"n": 1}))).await;
    let seq = doc["_seq_no"].as_u64().unwrap();
    let bad = node
        .req(
            "POST",
            &format!("/cas/_update/1?if_seq_no={}&if_primary_term=1", seq + 5),
            Some(json!({"doc": {"n": 2}})),
        )
        .await;
    assert_error(&bad, 409, "version_conflict_engine_exception");
    let (s, upd) = node
        .req(
            "POST",
            &format!("/cas/_update/1?if_seq_no={seq}&if_primary_term=1"),
            Some(json!({"doc": {"n": 2}})),
        )
        .await;
    assert_eq!(s, 200, "{upd}");
    assert_eq!(upd["result"], "updated");
    let bad = node
        .req(
            "DELETE",
            &format!("/cas/_doc/1?if_seq_no={seq}&if_primary_term=1"),
            None,
        )
        .await;
    assert_error(&bad, 409, "version_conflict_engine_exception");
    let (s, del) = node
        .req(
            "DELETE",
            &format!("/cas/_doc/1?if_seq_no={}&if_primary_term=1", upd["_seq_no"]),
            None,
        )
        .await;
    assert_eq!(s, 200, "{del}");
    assert_eq!(del["result"], "deleted");
    assert_eq!(del["_version"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cas_parameters_are_validated_as_opensearch_does() {
    let node = TestNode::start().await;
    node.req("PUT", "/cas/_doc/1", Some(json!({"n": 1}))).await;
    let cases: [(&str, &str, u16, &str, &str); 7] = [
        (
            "PUT",
            "/cas/_doc/1?version=2",
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: internal versioning can not be used for optimistic concurrency control. Please use `if_seq_no` and `if_primary_term` instead;",
        ),
        (
            "PUT",
            "/cas/_doc/1?if_seq_no=1",
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: ifSeqNo is set, but primary term is [0];",
        ),
        (
            "PUT",
            "/cas/_doc/1?if_seq_no=abc&if_primary_term=1",
            400,
            "illegal_argument_exception",
            "Failed to parse long parameter [if_seq_no] with value [abc]",
        ),
        (
            "PUT",
            "/cas/_doc/1?version_type=bogus&version=1",
            400,
            "illegal_argument_exception",
            "No version type match [bogus]",
        ),
        (
            "PUT",
            "/cas/_create/2?if_seq_no=0&if_primary_term=1",
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: create operations do not support compare and set. use index instead;",
        ),
        (
            "POST",
            "/cas/_doc?version=4&version_type=external",
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: an id must be provided if version type or value are set;",
        ),
        (
            "PUT",
            "/cas/_doc/1?version_type=external",
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: illegal version value [-3] for version type [EXTERNAL];",
        ),
    ];
    for (method, path, status, ty, why) in cases {
        let resp = node.req(method, path, Some(json!({"n": 9}))).await;
        assert_error(&resp, status, ty);
        assert_eq!(reason(&resp), why, "{method} {path}");
    }
    let upd = node
        .req(
            "POST",
            "/cas/_update/1?version=1",
            Some(json!({"doc": {"n": 2}})),
        )
        .await;
    assert_error(&upd, 400, "action_request_validation_exception");
    let (_, got) = node.req("GET", "/cas/_doc/1", None).await;
    assert_eq!(got["_source"], json!({"n": 1}), "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_external_versions_take_the_clients_version_and_refuse_older_ones() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/ext/_doc/1?version=10&version_type=external",
            Some(json!({"n": 1})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["_version"], 10);
    let same = node
        .req(
            "PUT",
            "/ext/_doc/1?version=10&version_type=external",
            Some(json!({"n": 2})),
        )
        .await;
    assert_error(&same, 409, "version_conflict_engine_exception");
    assert_eq!(
        reason(&same),
        "[1]: version conflict, current version [10] is higher or equal to the one provided [10]"
    );
    let (s, b) = node
        .req(
            "PUT",
            "/ext/_doc/1?version=10&version_type=external_gte",
            Some(json!({"n": 2})),
        )
        .await;
    assert_eq!((s, &b["_version"]), (200, &json!(10)), "{b}");
    let older = node
        .req(
            "PUT",
            "/ext/_doc/1?version=9&version_type=external_gte",
            Some(json!({"n": 3})),
        )
        .await;
    assert_error(&older, 409, "version_conflict_engine_exception");
    assert_eq!(
        reason(&older),
        "[1]: version conflict, current version [10] is higher than the one provided [9]"
    );
    // Delete with an external version, then a late write with an older version still conflicts
    // with the delete's tombstone, across a refresh.
    let (s, del) = node
        .req(
            "DELETE",
            "/ext/_doc/1?version=20&version_type=external",
            None,
        )
        .await;
    assert_eq!((s, &del["_version"]), (200, &json!(20)), "{del}");
    node.refresh("ext").await;
    let late = node
        .req(
            "PUT",
            "/ext/_doc/1?version=15&version_type=external",
            Some(json!({"n": 4})),
        )
        .await;
    assert_error(&late, 409, "version_conflict_engine_exception");
    let (s, b) = node
        .req(
            "PUT",
            "/ext/_doc/1?version=21&version_type=external",
            Some(json!({"n": 5})),
        )
        .await;
    assert_eq!((s, &b["result"]), (201, &json!("created")), "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_internal_version_counts_on_from_a_refreshed_delete() {
    let node = TestNode::start().await;
    node.req("PUT", "/t/_doc/1", Some(json!({"n": 1}))).await;
    node.req("PUT", "/t/_doc/1", Some(json!({"n": 2}))).await;
    let (_, del) = node.req("DELETE", "/t/_doc/1", None).await;
    assert_eq!(del["_version"], 3);
    node.refresh("t").await;
    let (s, again) = node.req("PUT", "/t/_doc/1", Some(json!({"n": 3}))).await;
    assert_eq!(s, 201, "{again}");
    assert_eq!(again["result"], "created");
    assert_eq!(
        again["_version"], 4,
        "OpenSearch remembers deletes for gc_deletes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_get_with_version_checks_it() {
    let node = TestNode::start().await;
    node.req("PUT", "/g/_doc/1", Some(json!({"n": 1}))).await;
    node.req("PUT", "/g/_doc/1", Some(json!({"n": 2}))).await;
    let (s, b) = node.req("GET", "/g/_doc/1?version=2", None).await;
    assert_eq!((s, &b["_version"]), (200, &json!(2)), "{b}");
    let wrong = node.req("GET", "/g/_doc/1?version=1", None).await;
    assert_error(&wrong, 409, "version_conflict_engine_exception");
    assert_eq!(
        reason(&wrong),
        "[1]: version conflict, current version [2] is different than the one provided [1]"
    );
    let head = node.req("HEAD", "/g/_doc/1?version=1", None).await;
    assert_eq!(head.0, 409);
    let (s, _) = node.req("GET", "/g/_doc/2?version=1", None).await;
    assert_eq!(
        s, 404,
        "a missing document is not found whatever the version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_create_conflicts_on_an_existing_id_in_every_form() {
    let node = TestNode::start().await;
    node.req("PUT", "/c/_doc/1", Some(json!({"n": 1}))).await;
    let want = "[1]: version conflict, document already exists (current version [1])";
    for (method, path) in [
        ("PUT", "/c/_doc/1?op_type=create"),
        ("POST", "/c/_doc/1?op_type=create"),
        ("PUT", "/c/_create/1"),
        ("POST", "/c/_create/1"),
    ] {
        let resp = node.req(method, path, Some(json!({"n": 2}))).await;
        assert_error(&resp, 409, "version_conflict_engine_exception");
        assert_eq!(reason(&resp), want, "{method} {path}");
    }
    let bulk = ndjson(&[
        json!({"create": {"_index": "c", "_id": "1"}}),
        json!({"n": 3}),
        json!({"index": {"_index": "c", "_id": "1", "op_type": "create"}}),
        json!({"n": 4}),
        json!({"create": {"_index": "c", "_id": ""}}),
        json!({"n": 5}),
    ]);
    let (s, b) = node.raw("POST", "/_bulk", bulk).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["errors"], true);
    let items = b["items"].as_array().unwrap();
    assert_eq!(items[0]["create"]["status"], 409);
    assert_eq!(
        items[0]["create"]["error"]["type"],
        "version_conflict_engine_exception"
    );
    assert_eq!(items[1]["index"]["status"], 409);
    assert_eq!(items[2]["create"]["status"], 400);
    assert_eq!(
        items[2]["create"]["error"]["reason"],
        "if _id is specified it must not be empty"
    );
    let (_, got) = node.req("GET", "/c/_doc/1", None).await;
    assert_eq!(got["_source"], json!({"n": 1}));
    assert_eq!(node.count("c", None).await, 0, "nothing refreshed yet");
    node.refresh("c").await;
    assert_eq!(
        node.count("c", None).await,
        1,
        "no document under an empty id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bulk_items_carry_their_own_conditions() {
    let node = TestNode::start().await;
    let (_, doc) = node.req("PUT", "/b/_doc/1", Some(json!({"n": 1}))).await;
    let seq = doc["_seq_no"].as_u64().unwrap();
    let bulk = ndjson(&[
        json!({"index": {"_index": "b", "_id": "1", "if_seq_no": seq + 1, "if_primary_term": 1}}),
        json!({"n": 2}),
        json!({"update": {"_index": "b", "_id": "1", "if_seq_no": seq, "if_primary_term": 1, "_source": true}}),
        json!({"doc": {"m": 1}}),
        json!({"delete": {"_index": "b", "_id": "1", "if_seq_no": seq, "if_primary_term": 1}}),
        json!({"index": {"_index": "b", "_id": "2", "version": 7, "version_type": "external"}}),
        json!({"n": 7}),
    ]);
    let (s, b) = node.raw("POST", "/_bulk", bulk).await;
    assert_eq!(s, 200, "{b}");
    let items = b["items"].as_array().unwrap();
    assert_eq!(items[0]["index"]["status"], 409, "{b}");
    assert_eq!(items[1]["update"]["status"], 200, "{b}");
    assert_eq!(
        items[1]["update"]["get"]["_source"],
        json!({"n": 1, "m": 1})
    );
    assert_eq!(items[1]["update"]["get"]["found"], true);
    assert_eq!(
        items[2]["delete"]["status"], 409,
        "the update moved the seq_no on: {b}"
    );
    assert_eq!(items[3]["index"]["_version"], 7);
    // A bulk item that fails validation fails the whole request, as OpenSearch's.
    let bad = ndjson(&[
        json!({"index": {"_index": "b", "_id": "3", "version": 2}}),
        json!({"n": 1}),
    ]);
    let resp = node.raw("POST", "/_bulk", bad).await;
    assert_error(&resp, 400, "action_request_validation_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_detect_noop_false_bumps_the_version() {
    let node = TestNode::start().await;
    node.req("PUT", "/u/_doc/1", Some(json!({"n": 1}))).await;
    let (s, noop) = node
        .req("POST", "/u/_update/1", Some(json!({"doc": {"n": 1}})))
        .await;
    assert_eq!((s, &noop["result"]), (200, &json!("noop")), "{noop}");
    assert_eq!(noop["_version"], 1);
    assert_eq!(noop["_shards"]["total"], 0);
    let (s, upd) = node
        .req(
            "POST",
            "/u/_update/1?_source=true",
            Some(json!({"doc": {"n": 1}, "detect_noop": false})),
        )
        .await;
    assert_eq!((s, &upd["result"]), (200, &json!("updated")), "{upd}");
    assert_eq!(upd["_version"], 2);
    assert_eq!(upd["get"]["_source"], json!({"n": 1}));
}

/// Two writers increment one counter with read → compare-and-set → retry on 409. Without the
/// check, a writer's update read before the other's write would overwrite it and the final
/// count would fall short; with it, every acknowledged increment is in the final value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_two_writers_with_if_seq_no_never_lose_an_update() {
    const INCREMENTS_PER_WRITER: u64 = 40;
    let node = Arc::new(TestNode::start().await);
    node.req("PUT", "/counter/_doc/c", Some(json!({"n": 0})))
        .await;
    let writer = |node: Arc<TestNode>| async move {
        let mut conflicts = 0u64;
        let mut done = 0u64;
        while done < INCREMENTS_PER_WRITER {
            let (s, got) = node.req("GET", "/counter/_doc/c", None).await;
            assert_eq!(s, 200, "{got}");
            let n = got["_source"]["n"].as_u64().unwrap();
            let path = format!(
                "/counter/_doc/c?if_seq_no={}&if_primary_term={}",
                got["_seq_no"], got["_primary_term"]
            );
            let (s, b) = node.req("PUT", &path, Some(json!({"n": n + 1}))).await;
            match s {
                200 => done += 1,
                409 => {
                    assert_eq!(b["error"]["type"], "version_conflict_engine_exception");
                    conflicts += 1;
                }
                other => panic!("unexpected {other}: {b}"),
            }
        }
        conflicts
    };
    let a = tokio::spawn(writer(node.clone()));
    let b = tokio::spawn(writer(node.clone()));
    let conflicts = a.await.unwrap() + b.await.unwrap();
    let (_, got) = node.req("GET", "/counter/_doc/c", None).await;
    assert_eq!(
        got["_source"]["n"].as_u64().unwrap(),
        2 * INCREMENTS_PER_WRITER,
        "an increment was lost ({conflicts} conflicts retried)"
    );
    assert_eq!(
        got["_version"].as_u64().unwrap(),
        2 * INCREMENTS_PER_WRITER + 1
    );
}
