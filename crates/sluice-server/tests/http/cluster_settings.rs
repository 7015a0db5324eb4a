//! `GET` and `PUT /_cluster/settings` over HTTP: shapes, validation errors, resets, and
//! persistence across a restart.

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

async fn get(node: &TestNode, query: &str) -> Value {
    let (status, body) = node
        .req("GET", &format!("/_cluster/settings{query}"), None)
        .await;
    assert_eq!(status, 200, "GET _cluster/settings{query}: {body}");
    body
}

async fn put(node: &TestNode, body: Value) -> (u16, Value) {
    node.req("PUT", "/_cluster/settings", Some(body)).await
}

async fn put_ok(node: &TestNode, body: Value) -> Value {
    let (status, resp) = put(node, body.clone()).await;
    assert_eq!(status, 200, "PUT {body}: {resp}");
    resp
}

fn reason(resp: &(u16, Value)) -> &str {
    resp.1["error"]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no error reason in {}", resp.1))
}

/// Asserts a 400 `illegal_argument_exception` with exactly `expected` as reason.
fn assert_illegal(resp: &(u16, Value), expected: &str) {
    assert_error(resp, 400, "illegal_argument_exception");
    assert_eq!(reason(resp), expected, "in {}", resp.1);
    assert_eq!(resp.1["error"]["root_cause"][0]["reason"], expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_fresh_node_has_no_settings_set() {
    let node = TestNode::start().await;
    assert_eq!(
        get(&node, "").await,
        json!({"persistent": {}, "transient": {}})
    );
    assert_eq!(
        get(&node, "?flat_settings=true").await,
        json!({"persistent": {}, "transient": {}})
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_include_defaults_lists_every_setting_with_its_default() {
    let node = TestNode::start().await;
    let body = get(&node, "?include_defaults=true&flat_settings=true").await;
    assert_eq!(
        body,
        json!({
            "persistent": {},
            "transient": {},
            "defaults": {
                "node.workload_group.max_count": "100",
                "search.cancel_after_time_interval": "-1",
                "search.default_keep_alive": "5m",
                "search.max_buckets": "65535",
                "search.max_keep_alive": "24h",
                "search.max_open_scroll_context": "500",
                "wlm.autotagging.max_rules": "200",
                "wlm.workload_group.duress_streak": "3",
                "wlm.workload_group.enforcement_interval": "1000",
                "wlm.workload_group.estimate_unmeasured_tasks": "true",
                "wlm.workload_group.mode": "monitor_only",
                "wlm.workload_group.node.cpu_cancellation_threshold": "0.9",
                "wlm.workload_group.node.cpu_rejection_threshold": "0.8",
                "wlm.workload_group.node.memory_cancellation_threshold": "0.9",
                "wlm.workload_group.node.memory_rejection_threshold": "0.8",
                "wlm.workload_group.shared_acquire_timeout": "200ms",
                "wlm.workload_group.usage_refresh_interval": "100"
            }
        })
    );
    let nested = get(&node, "?include_defaults").await;
    assert_eq!(nested["defaults"]["search"]["max_buckets"], "65535");
    assert_eq!(nested["defaults"]["search"]["default_keep_alive"], "5m");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_put_sets_values_and_echoes_them_as_strings() {
    let node = TestNode::start().await;
    let resp = put_ok(
        &node,
        json!({
            "persistent": {"search": {"max_buckets": 1000}, "search.max_open_scroll_context": "20"},
            "transient": {"search.cancel_after_time_interval": "30s"}
        }),
    )
    .await;
    // Nested by default, numbers echoed as strings, keys in order; scopes in OpenSearch's order.
    assert_eq!(
        serde_json::to_string(&resp).expect("json"),
        r#"{"acknowledged":true,"persistent":{"search":{"max_buckets":"1000","max_open_scroll_context":"20"}},"transient":{"search":{"cancel_after_time_interval":"30s"}}}"#
    );
    assert_eq!(
        get(&node, "").await,
        json!({
            "persistent": {"search": {"max_buckets": "1000", "max_open_scroll_context": "20"}},
            "transient": {"search": {"cancel_after_time_interval": "30s"}}
        })
    );
    let flat = get(&node, "?flat_settings=true&include_defaults=true").await;
    assert_eq!(
        flat["persistent"],
        json!({"search.max_buckets": "1000", "search.max_open_scroll_context": "20"})
    );
    assert_eq!(
        flat["transient"],
        json!({"search.cancel_after_time_interval": "30s"})
    );
    // Defaults list only what is set nowhere.
    let search_defaults: serde_json::Map<String, Value> = flat["defaults"]
        .as_object()
        .expect("defaults")
        .iter()
        .filter(|(k, _)| k.starts_with("search."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(
        Value::Object(search_defaults),
        json!({
            "search.default_keep_alive": "5m",
            "search.max_keep_alive": "24h"
        })
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_put_response_is_flat_with_flat_settings() {
    let node = TestNode::start().await;
    let (status, resp) = node
        .req(
            "PUT",
            "/_cluster/settings?flat_settings=true",
            Some(json!({"transient": {"search": {"max_keep_alive": "2h"}}})),
        )
        .await;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(
        resp,
        json!({"acknowledged": true, "persistent": {}, "transient": {"search.max_keep_alive": "2h"}})
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_null_resets_a_setting_to_its_default() {
    let node = TestNode::start().await;
    put_ok(
        &node,
        json!({"persistent": {"search.max_buckets": "7", "search.default_keep_alive": "1m"}}),
    )
    .await;
    let resp = put_ok(&node, json!({"persistent": {"search.max_buckets": null}})).await;
    assert_eq!(
        resp,
        json!({"acknowledged": true, "persistent": {}, "transient": {}})
    );
    let body = get(&node, "?flat_settings=true&include_defaults=true").await;
    assert_eq!(
        body["persistent"],
        json!({"search.default_keep_alive": "1m"})
    );
    assert_eq!(body["defaults"]["search.max_buckets"], "65535");
    // Resetting something never set is fine too.
    put_ok(
        &node,
        json!({"transient": {"search": {"max_buckets": null}}}),
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_wildcard_null_resets_every_matching_setting() {
    let node = TestNode::start().await;
    put_ok(
        &node,
        json!({"transient": {"search.max_buckets": "7", "search.max_keep_alive": "2h", "search.default_keep_alive": "1m"}}),
    )
    .await;
    put_ok(&node, json!({"transient": {"search.max_*": null}})).await;
    assert_eq!(
        get(&node, "?flat_settings=true").await["transient"],
        json!({"search.default_keep_alive": "1m"})
    );
    put_ok(&node, json!({"transient": {"*": null}})).await;
    assert_eq!(get(&node, "").await["transient"], json!({}));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unknown_setting_is_not_recognized_in_either_scope() {
    let node = TestNode::start().await;
    let resp = put(&node, json!({"persistent": {"foo.bar": "1"}})).await;
    assert_illegal(&resp, "persistent setting [foo.bar], not recognized");
    let resp = put(&node, json!({"transient": {"foo": {"bar": true}}})).await;
    assert_illegal(&resp, "transient setting [foo.bar], not recognized");
    // A reset of an unknown key is refused too (only archived.* and patterns are exempt).
    let resp = put(&node, json!({"persistent": {"foo.bar": null}})).await;
    assert_illegal(&resp, "persistent setting [foo.bar], not recognized");
    put_ok(&node, json!({"persistent": {"archived.foo.bar": null}})).await;
    // Transient keys are checked first, as in OpenSearch.
    let resp = put(
        &node,
        json!({"persistent": {"a.b": "1"}, "transient": {"c.d": "1"}}),
    )
    .await;
    assert_illegal(&resp, "transient setting [c.d], not recognized");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bad_values_are_rejected_with_opensearch_messages() {
    let node = TestNode::start().await;
    let cases = [
        (
            json!({"search.max_buckets": "abc"}),
            "Failed to parse value [abc] for setting [search.max_buckets]: expected a whole number from 0 to 2147483647",
        ),
        (
            json!({"search.max_buckets": -5}),
            "Failed to parse value [-5] for setting [search.max_buckets] must be >= 0",
        ),
        (
            json!({"search.max_open_scroll_context": 2147483648u64}),
            "Failed to parse value [2147483648] for setting [search.max_open_scroll_context] must be <= 2147483647",
        ),
        (
            json!({"search.max_buckets": 1.5}),
            "Failed to parse value [1.5] for setting [search.max_buckets]: expected a whole number from 0 to 2147483647",
        ),
        (
            json!({"search.cancel_after_time_interval": "30"}),
            "failed to parse setting [search.cancel_after_time_interval] with value [30] as a time value: unit is missing or unrecognized",
        ),
        (
            json!({"search.cancel_after_time_interval": "-5s"}),
            "failed to parse setting [search.cancel_after_time_interval] with value [-5s] as a time value: negative durations are not supported",
        ),
        (
            json!({"search.default_keep_alive": "-1"}),
            "failed to parse value [-1] for setting [search.default_keep_alive], must be >= [0ms]",
        ),
        (
            json!({"search.max_keep_alive": "1.5h"}),
            "failed to parse [1.5h], fractional time values are not supported",
        ),
        (
            json!({"wlm.workload_group.shared_acquire_timeout": "0ms"}),
            "failed to parse value [0ms] for setting [wlm.workload_group.shared_acquire_timeout], must be >= [1ms]",
        ),
        (
            json!({"wlm.workload_group.shared_acquire_timeout": "2m"}),
            "failed to parse value [2m] for setting [wlm.workload_group.shared_acquire_timeout], must be <= [1m]",
        ),
    ];
    for (settings, expected) in cases {
        let resp = put(&node, json!({"persistent": settings.clone()})).await;
        assert_illegal(&resp, expected);
        let resp = put(&node, json!({"transient": settings})).await;
        assert_illegal(&resp, expected);
    }
    assert_eq!(
        get(&node, "").await,
        json!({"persistent": {}, "transient": {}})
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_time_values_in_every_unit_are_accepted() {
    let node = TestNode::start().await;
    for value in [
        "-1",
        "0",
        "500ms",
        "30s",
        "5m",
        "2h",
        "1d",
        "100micros",
        "7nanos",
        "10S",
    ] {
        put_ok(
            &node,
            json!({"transient": {"search.cancel_after_time_interval": value}}),
        )
        .await;
        assert_eq!(
            get(&node, "?flat_settings=true").await["transient"]["search.cancel_after_time_interval"],
            value,
            "stored as sent"
        );
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_keep_alive_rule_is_checked_on_the_merged_settings() {
    let node = TestNode::start().await;
    let resp = put(
        &node,
        json!({"persistent": {"search.default_keep_alive": "2d"}}),
    )
    .await;
    assert_illegal(
        &resp,
        "Default keep alive setting for request [search.default_keep_alive] should be smaller than max keep alive [search.max_keep_alive], was (2d > 1d)",
    );
    // Both sides in one request: valid once merged.
    put_ok(
        &node,
        json!({"persistent": {"search.default_keep_alive": "2d", "search.max_keep_alive": "3d"}}),
    )
    .await;
    // A transient max below the persistent default breaks the rule across scopes.
    let resp = put(
        &node,
        json!({"transient": {"search.max_keep_alive": "90s"}}),
    )
    .await;
    assert_illegal(
        &resp,
        "Default keep alive setting for request [search.default_keep_alive] should be smaller than max keep alive [search.max_keep_alive], was (2d > 1.5m)",
    );
    // Lowering the default in the same request fixes it.
    put_ok(
        &node,
        json!({"transient": {"search.max_keep_alive": "90s", "search.default_keep_alive": "1m"}}),
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_refused_update_changes_nothing() {
    let node = TestNode::start().await;
    put_ok(&node, json!({"persistent": {"search.max_buckets": "10"}})).await;
    let resp = put(
        &node,
        json!({
            "persistent": {"search.max_buckets": "20", "search.max_open_scroll_context": "-1"},
            "transient": {"search.cancel_after_time_interval": "1s"}
        }),
    )
    .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_eq!(
        get(&node, "?flat_settings=true").await,
        json!({"persistent": {"search.max_buckets": "10"}, "transient": {}})
    );
    // Nor did it reach the metastore.
    let data = node.data.clone();
    let tmp = node.stop().await;
    let node = TestNode::start_on(&data, &[]).await;
    assert_eq!(
        get(&node, "?flat_settings=true").await["persistent"],
        json!({"search.max_buckets": "10"})
    );
    node.stop().await;
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_persistent_settings_survive_restart_and_transient_do_not() {
    let node = TestNode::start().await;
    put_ok(
        &node,
        json!({
            "persistent": {"search.max_buckets": "1000", "search.default_keep_alive": "1m"},
            "transient": {"search.cancel_after_time_interval": "30s", "search.max_buckets": "5"}
        }),
    )
    .await;
    put_ok(
        &node,
        json!({"persistent": {"search.default_keep_alive": null}}),
    )
    .await;
    let data = node.data.clone();
    let tmp = node.stop().await;

    let node = TestNode::start_on(&data, &[]).await;
    let body = get(&node, "?flat_settings=true&include_defaults=true").await;
    assert_eq!(body["persistent"], json!({"search.max_buckets": "1000"}));
    assert_eq!(body["transient"], json!({}));
    assert_eq!(body["defaults"]["search.cancel_after_time_interval"], "-1");
    assert_eq!(body["defaults"]["search.default_keep_alive"], "5m");
    // Updates after the restart build on the reloaded values.
    put_ok(
        &node,
        json!({"persistent": {"search.max_open_scroll_context": "9"}}),
    )
    .await;
    assert_eq!(
        get(&node, "?flat_settings=true").await["persistent"],
        json!({"search.max_buckets": "1000", "search.max_open_scroll_context": "9"})
    );
    node.stop().await;
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_malformed_bodies_are_rejected() {
    let node = TestNode::start().await;
    let resp = node.req("PUT", "/_cluster/settings", None).await;
    assert_error(&resp, 400, "parse_exception");
    assert_eq!(reason(&resp), "request body is required");

    let resp = node
        .raw_json("PUT", "/_cluster/settings", "{\"persistent\":")
        .await;
    assert_error(&resp, 400, "x_content_parse_exception");

    let resp = put(&node, json!([{"persistent": {}}])).await;
    assert_error(&resp, 400, "parsing_exception");
    assert_eq!(
        reason(&resp),
        "Failed to parse object: expecting token of type [START_OBJECT] but found [START_ARRAY]"
    );

    let resp = put(&node, json!({})).await;
    assert_error(&resp, 400, "action_request_validation_exception");
    assert_eq!(
        reason(&resp),
        "Validation Failed: 1: no settings to update;"
    );
    let resp = put(&node, json!({"persistent": {}, "transient": null})).await;
    assert_error(&resp, 400, "action_request_validation_exception");

    let resp = put(&node, json!({"persistant": {"search.max_buckets": "1"}})).await;
    assert_error(&resp, 400, "parsing_exception");
    assert!(
        reason(&resp).contains("unknown key [persistant]"),
        "{}",
        resp.1
    );

    let resp = put(&node, json!({"persistent": "search.max_buckets=1"})).await;
    assert_error(&resp, 400, "parsing_exception");
    assert_eq!(
        reason(&resp),
        "[persistent] must be an object of settings, found [VALUE_STRING]"
    );

    let resp = put(&node, json!({"transient": {"search.max_buckets": [1, 2]}})).await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(reason(&resp).contains("takes a single value"), "{}", resp.1);

    let resp = put(
        &node,
        json!({"transient": {"search.max_buckets": 1, "search": {"max_buckets": 2}}}),
    )
    .await;
    assert_illegal(
        &resp,
        "duplicate settings key [search.max_buckets] found, previous value [1], current value [2]",
    );
    assert_eq!(
        get(&node, "").await,
        json!({"persistent": {}, "transient": {}})
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_boolean_flags_must_be_true_or_false() {
    let node = TestNode::start().await;
    let resp = node
        .req("GET", "/_cluster/settings?flat_settings=maybe", None)
        .await;
    assert_illegal(
        &resp,
        "Failed to parse value [maybe] as only [true] or [false] are allowed.",
    );
    let resp = node
        .req(
            "PUT",
            "/_cluster/settings?flat_settings=1",
            Some(json!({"transient": {"search.max_buckets": "1"}})),
        )
        .await;
    assert_illegal(
        &resp,
        "Failed to parse value [1] as only [true] or [false] are allowed.",
    );
    assert_eq!(
        get(&node, "?include_defaults=false&flat_settings=false").await,
        json!({"persistent": {}, "transient": {}}),
        "the refused PUT changed nothing and false flags add nothing"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_other_methods_are_not_allowed() {
    let node = TestNode::start().await;
    for method in ["POST", "DELETE"] {
        let (status, body) = node.req(method, "/_cluster/settings", None).await;
        assert_eq!(status, 405, "{method}: {body}");
        assert_eq!(
            body["error"],
            format!(
                "Incorrect HTTP method for uri [/_cluster/settings] and method [{method}], allowed: [GET, PUT]"
            )
        );
    }
    node.stop().await;
}
