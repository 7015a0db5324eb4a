//! Aliases over HTTP, as OpenSearch 3.x answers them: `aliases` at index creation, the alias
//! APIs (`_alias`, `_aliases` with atomic actions), filter aliases, resolution in search, count,
//! msearch, `_doc` and `_bulk` (write index, `require_alias`), persistence across a restart, and
//! how workload-management rules see an alias.

use crate::common::{TestNode, assert_error, ndjson};
use serde_json::{Value, json};

/// `logs-1` (levels info, error) and `logs-2` (error, error), refreshed.
async fn two_indices(node: &TestNode) {
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "logs-1", "_id": "a"}}),
            json!({"level": "info"}),
            json!({"index": {"_index": "logs-1", "_id": "b"}}),
            json!({"level": "error"}),
            json!({"index": {"_index": "logs-2", "_id": "c"}}),
            json!({"level": "error"}),
            json!({"index": {"_index": "logs-2", "_id": "d"}}),
            json!({"level": "error"}),
        ],
    )
    .await;
}

async fn aliases(node: &TestNode, actions: Value) -> (u16, Value) {
    node.req("POST", "/_aliases", Some(json!({ "actions": actions })))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_aliases_at_creation_are_listed_by_every_get_form() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/idx",
            Some(json!({"aliases": {"plain": {}, "Writer": {"is_write_index": true, "routing": "1"}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node.req("GET", "/idx/_alias", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!({"idx": {"aliases": {
            "Writer": {"index_routing": "1", "search_routing": "1", "is_write_index": true},
            "plain": {}
        }}})
    );
    let (s, b) = node.req("GET", "/_alias/plain", None).await;
    assert_eq!((s, b), (200, json!({"idx": {"aliases": {"plain": {}}}})));
    let (_, b) = node.req("GET", "/idx", None).await;
    assert_eq!(b["idx"]["aliases"]["plain"], json!({}));
    let (s, b) = node.req("GET", "/_alias/nope", None).await;
    assert_eq!(
        (s, b),
        (404, json!({"error": "alias [nope] missing", "status": 404}))
    );
    let (s, b) = node.req("GET", "/_alias/plain,nope", None).await;
    assert_eq!(s, 404);
    assert_eq!(b["error"], "alias [nope] missing");
    assert_eq!(b["idx"]["aliases"]["plain"], json!({}));
    let (s, _) = node.req("HEAD", "/_alias/plain", None).await;
    assert_eq!(s, 200);
    let (s, _) = node.req("HEAD", "/_alias/nope", None).await;
    assert_eq!(s, 404);
    let (s, b) = node.req("GET", "/_alias/pl*", None).await;
    assert_eq!((s, &b["idx"]["aliases"]["plain"]), (200, &json!({})));
    // `GET /_aliases` is `GET /_alias`, as OpenSearch routes both to one action.
    let all = node.req("GET", "/_alias", None).await;
    assert_eq!(all.0, 200, "{}", all.1);
    assert_eq!(node.req("GET", "/_aliases", None).await, all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_put_and_delete_alias_and_their_errors() {
    let node = TestNode::start().await;
    two_indices(&node).await;
    let (s, b) = node.req("PUT", "/logs-*/_alias/all-logs", None).await;
    assert_eq!((s, &b), (200, &json!({"acknowledged": true})));
    assert_eq!(node.count("all-logs", None).await, 4);
    let (s, b) = node.req("DELETE", "/logs-2/_alias/all-logs", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(node.count("all-logs", None).await, 2);
    let missing = node.req("DELETE", "/logs-2/_alias/all-logs", None).await;
    assert_error(&missing, 404, "aliases_not_found_exception");
    assert_eq!(missing.1["error"]["reason"], "aliases [all-logs] missing");
    let clash = node.req("PUT", "/logs-1/_alias/logs-2", None).await;
    assert_error(&clash, 400, "invalid_alias_name_exception");
    assert_eq!(
        clash.1["error"]["reason"],
        "Invalid alias name [logs-2]: an index or data stream exists with the same name as the alias"
    );
    let bad = node.req("PUT", "/logs-1/_alias/_bad", None).await;
    assert_error(&bad, 400, "invalid_alias_name_exception");
    let index_clash = node.req("PUT", "/all-logs", None).await;
    assert_error(&index_clash, 400, "invalid_index_name_exception");
    assert_eq!(
        index_clash.1["error"]["reason"],
        "Invalid index name [all-logs], already exists as alias"
    );
    let no_index = node.req("PUT", "/nope/_alias/x", None).await;
    assert_error(&no_index, 404, "index_not_found_exception");
    let delete_by_alias = node.req("DELETE", "/all-logs", None).await;
    assert_error(&delete_by_alias, 400, "illegal_argument_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_aliases_actions_apply_all_or_nothing() {
    let node = TestNode::start().await;
    two_indices(&node).await;
    let (s, b) = aliases(
        &node,
        json!([{"add": {"index": "logs-1", "alias": "current"}}]),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    // Swap in one step.
    let (s, b) = aliases(
        &node,
        json!([
            {"remove": {"index": "logs-1", "alias": "current"}},
            {"add": {"index": "logs-2", "alias": "current"}}
        ]),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let (_, b) = node.req("GET", "/_alias/current", None).await;
    assert_eq!(b, json!({"logs-2": {"aliases": {"current": {}}}}));
    // A failing action leaves every earlier one unapplied.
    let failed = aliases(
        &node,
        json!([
            {"add": {"index": "logs-1", "alias": "extra"}},
            {"remove": {"index": "logs-1", "alias": "never-there"}}
        ]),
    )
    .await;
    assert_error(&failed, 404, "aliases_not_found_exception");
    let (s, _) = node.req("GET", "/_alias/extra", None).await;
    assert_eq!(s, 404, "the add of a failed request must not be visible");
    // must_exist: false skips a missing alias.
    let (s, b) = aliases(
        &node,
        json!([{"remove": {"index": "logs-1", "alias": "never-there", "must_exist": false}}]),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    // remove_index deletes the index in the same step.
    let (s, b) = aliases(
        &node,
        json!([
            {"add": {"index": "logs-2", "alias": "only"}},
            {"remove_index": {"index": "logs-1"}}
        ]),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let (s, _) = node.req("HEAD", "/logs-1", None).await;
    assert_eq!(s, 404);
    // Validation.
    let empty = aliases(&node, json!([])).await;
    assert_error(&empty, 400, "action_request_validation_exception");
    assert_eq!(
        empty.1["error"]["reason"],
        "Validation Failed: 1: No action specified;"
    );
    let no_alias = aliases(&node, json!([{"add": {"index": "logs-2"}}])).await;
    assert_eq!(
        no_alias.1["error"]["reason"],
        "Validation Failed: 1: One of [alias] or [aliases] is required;"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_filter_alias_filters_search_count_and_msearch() {
    let node = TestNode::start().await;
    two_indices(&node).await;
    let (s, b) = aliases(
        &node,
        json!([{"add": {"index": "logs-*", "alias": "errors", "filter": {"term": {"level": "error"}}}}]),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(node.count("errors", None).await, 3);
    let hits = node.search("errors", json!({"size": 10})).await;
    assert_eq!(hits["hits"]["total"]["value"], 3);
    // The index named beside the alias lifts the filter for that index.
    assert_eq!(node.count("errors,logs-1", None).await, 4);
    let (s, b) = node
        .raw(
            "POST",
            "/_msearch",
            ndjson(&[json!({"index": "errors"}), json!({"size": 0})]),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["responses"][0]["hits"]["total"]["value"], 3);
    // A filter that is not a query is refused.
    let bad = aliases(
        &node,
        json!([{"add": {"index": "logs-1", "alias": "x", "filter": {"no_such_query": {}}}}]),
    )
    .await;
    assert_error(&bad, 400, "illegal_argument_exception");
    assert_eq!(
        bad.1["error"]["reason"],
        "failed to parse filter for alias [x]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_writes_through_an_alias_go_to_its_write_index() {
    let node = TestNode::start().await;
    two_indices(&node).await;
    aliases(&node, json!([{"add": {"index": "logs-1", "alias": "one"}}])).await;
    let (s, b) = node.req("PUT", "/one/_doc/x", Some(json!({"n": 1}))).await;
    assert_eq!((s, &b["_index"]), (201, &json!("logs-1")), "{b}");
    let (s, b) = node.req("GET", "/one/_doc/x", None).await;
    assert_eq!((s, &b["_index"]), (200, &json!("logs-1")), "{b}");
    aliases(
        &node,
        json!([{"add": {"indices": ["logs-1", "logs-2"], "alias": "both"}}]),
    )
    .await;
    let no_writer = node.req("PUT", "/both/_doc/y", Some(json!({"n": 1}))).await;
    assert_error(&no_writer, 400, "illegal_argument_exception");
    assert!(
        no_writer.1["error"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("no write index is defined for alias [both]")
    );
    let multi_get = node.req("GET", "/both/_doc/x", None).await;
    assert_error(&multi_get, 400, "illegal_argument_exception");
    aliases(
        &node,
        json!([{"add": {"index": "logs-2", "alias": "both", "is_write_index": true}}]),
    )
    .await;
    let (s, b) = node.req("PUT", "/both/_doc/y", Some(json!({"n": 1}))).await;
    assert_eq!((s, &b["_index"]), (201, &json!("logs-2")), "{b}");
    let two_writers = aliases(
        &node,
        json!([{"add": {"index": "logs-1", "alias": "both", "is_write_index": true}}]),
    )
    .await;
    assert_error(&two_writers, 500, "illegal_state_exception");
    assert_eq!(
        two_writers.1["error"]["reason"],
        "alias [both] has more than one write index [logs-1,logs-2]"
    );
    // Bulk through the alias, and require_alias.
    let (s, b) = node
        .raw(
            "POST",
            "/_bulk",
            ndjson(&[
                json!({"index": {"_index": "both", "_id": "z", "require_alias": true}}),
                json!({"n": 2}),
                json!({"index": {"_index": "logs-1", "_id": "w", "require_alias": true}}),
                json!({"n": 3}),
            ]),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["items"][0]["index"]["_index"], "logs-2");
    assert_eq!(b["items"][0]["index"]["status"], 201);
    assert_eq!(b["items"][1]["index"]["status"], 404);
    assert_eq!(
        b["items"][1]["index"]["error"]["reason"],
        "no such index [logs-1] and [require_alias] request flag is [true] and [logs-1] is not an alias"
    );
    let required = node
        .req(
            "PUT",
            "/new-index/_doc/1?require_alias=true",
            Some(json!({"n": 1})),
        )
        .await;
    assert_error(&required, 404, "index_not_found_exception");
    let (s, _) = node.req("HEAD", "/new-index", None).await;
    assert_eq!(s, 404, "require_alias must not create the index");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_aliases_survive_a_restart() {
    let node = TestNode::start().await;
    two_indices(&node).await;
    aliases(
        &node,
        json!([{"add": {"index": "logs-2", "alias": "kept", "filter": {"term": {"level": "error"}}, "is_write_index": true}}]),
    )
    .await;
    let data = node.data.clone();
    let tmp = node.stop().await;
    let node = TestNode::start_on(&data, &[]).await;
    let (s, b) = node.req("GET", "/_alias/kept", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["logs-2"]["aliases"]["kept"]["is_write_index"], true);
    assert_eq!(node.count("kept", None).await, 2);
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cat_aliases_lists_alias_rows() {
    let node = TestNode::start().await;
    two_indices(&node).await;
    aliases(
        &node,
        json!([{"add": {"index": "logs-1", "alias": "f", "filter": {"match_all": {}}}}]),
    )
    .await;
    let (s, b) = node.req("GET", "/_cat/aliases?format=json", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!([{"alias": "f", "index": "logs-1", "filter": "*", "routing.index": "-", "routing.search": "-", "is_write_index": "-"}])
    );
}

/// OpenSearch's auto-tagging reads `request.indices()` before the indices are resolved, so an
/// `index_pattern` rule matches the alias name a request gives, not the indices it reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_rules_match_the_alias_name_as_written() {
    let node = TestNode::start().await;
    two_indices(&node).await;
    aliases(
        &node,
        json!([{"add": {"index": "logs-1", "alias": "recent"}}]),
    )
    .await;
    let (s, g) = node
        .req(
            "PUT",
            "/_wlm/workload_group",
            Some(json!({"name": "g", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.2}})),
        )
        .await;
    assert_eq!(s, 200, "{g}");
    let id = g["_id"].as_str().unwrap().to_string();
    let mut tagged = Vec::new();
    for (desc, pattern) in [("by alias", "rec*"), ("by index", "logs-1")] {
        let (s, b) = node
            .req(
                "PUT",
                "/_rules/workload_group",
                Some(
                    json!({"description": desc, "index_pattern": [pattern], "workload_group": id}),
                ),
            )
            .await;
        assert_eq!(s, 200, "{b}");
        let completions = |stats: &Value| -> u64 {
            let (_, n) = stats
                .as_object()
                .unwrap()
                .iter()
                .find(|(k, _)| *k != "_nodes" && *k != "cluster_name")
                .unwrap();
            n["workload_groups"][&id]["total_completions"]
                .as_u64()
                .unwrap()
        };
        let (_, before) = node.req("GET", "/_wlm/stats", None).await;
        node.search("recent", json!({})).await;
        let (_, after) = node.req("GET", "/_wlm/stats", None).await;
        tagged.push(completions(&after) - completions(&before));
        let (s, rules) = node.req("GET", "/_rules/workload_group", None).await;
        assert_eq!(s, 200);
        let rule_id = rules["rules"][0]["id"].as_str().unwrap().to_string();
        node.req("DELETE", &format!("/_rules/workload_group/{rule_id}"), None)
            .await;
    }
    assert_eq!(
        tagged,
        vec![1, 0],
        "a rule on the alias name tags the request; a rule on the index it reaches does not"
    );
}
