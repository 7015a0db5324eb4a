//! One time-value rule everywhere (OpenSearch 3.x's `TimeValue.parseTimeValue`): the same text
//! is accepted or refused the same way as a request parameter, a body field, a scroll
//! keep-alive, a workload group setting, a cluster setting and an index setting. Fractional
//! values such as `1.5s` are refused with OpenSearch's 400 `illegal_argument_exception`
//! "failed to parse [1.5s], fractional time values are not supported".

use serde_json::{Value, json};

use crate::common::{TestNode, assert_error};

const FRACTIONAL: &str = "fractional time values are not supported";

fn reason(resp: &(u16, Value)) -> String {
    resp.1["error"]["root_cause"][0]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason in {}", resp.1))
        .to_string()
}

/// Asserts a 400 whose reason is OpenSearch's refusal of the fractional `raw`.
fn assert_fractional_refused(resp: &(u16, Value), raw: &str) {
    assert_eq!(resp.0, 400, "{raw}: {}", resp.1);
    assert_eq!(
        reason(resp),
        format!("failed to parse [{raw}], {FRACTIONAL}"),
        "{}",
        resp.1
    );
}

async fn with_index(node: &TestNode) {
    let (s, b) = node
        .req("PUT", "/t/_doc/1?refresh=true", Some(json!({"n": 1})))
        .await;
    assert!(s == 201 || s == 200, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_request_parameters_refuse_fractional_time_values() {
    let node = TestNode::start().await;
    with_index(&node).await;
    for (param, ok) in [
        ("cancel_after_time_interval", "1500ms"),
        ("timeout", "1500ms"),
    ] {
        let resp = node
            .req("POST", &format!("/t/_search?{param}=1.5s"), Some(json!({})))
            .await;
        assert_error(&resp, 400, "illegal_argument_exception");
        assert!(reason(&resp).contains(FRACTIONAL), "{param}: {}", resp.1);
        let (s, b) = node
            .req("POST", &format!("/t/_search?{param}={ok}"), Some(json!({})))
            .await;
        assert_eq!(s, 200, "{param}={ok}: {b}");
    }
    let resp = node
        .req(
            "POST",
            "/t/_search?cancel_after_time_interval=-1",
            Some(json!({})),
        )
        .await;
    assert_eq!(resp.0, 200, "-1 disables: {}", resp.1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_body_timeout_refuses_fractional_time_values() {
    let node = TestNode::start().await;
    with_index(&node).await;
    let resp = node
        .req("POST", "/t/_search", Some(json!({"timeout": "1.5s"})))
        .await;
    assert_eq!(resp.0, 400, "{}", resp.1);
    assert!(reason(&resp).contains(FRACTIONAL), "{}", resp.1);
    let (s, b) = node
        .req("POST", "/t/_search", Some(json!({"timeout": "1500ms"})))
        .await;
    assert_eq!(s, 200, "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_scroll_keep_alive_refuses_fractional_time_values() {
    let node = TestNode::start().await;
    with_index(&node).await;
    let resp = node
        .req("POST", "/t/_search?scroll=1.5m", Some(json!({})))
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_fractional_refused(&resp, "1.5m");
    let (s, b) = node
        .req("POST", "/t/_search?scroll=90s", Some(json!({})))
        .await;
    assert_eq!(s, 200, "{b}");
    let id = b["_scroll_id"].as_str().expect("scroll id").to_string();
    let resp = node
        .req(
            "POST",
            "/_search/scroll",
            Some(json!({"scroll": "0.5m", "scroll_id": id})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_fractional_refused(&resp, "0.5m");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_group_setting_refuses_fractional_time_values() {
    let node = TestNode::start().await;
    let group = |value: &str| {
        json!({
            "name": format!("g{}", value.len()),
            "resiliency_mode": "soft",
            "resource_limits": {"cpu": 0.1},
            "settings": {"search.cancel_after_time_interval": value}
        })
    };
    let resp = node
        .req("PUT", "/_wlm/workload_group", Some(group("1.5s")))
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(
        reason(&resp).ends_with(&format!("failed to parse [1.5s], {FRACTIONAL}")),
        "{}",
        resp.1
    );
    for ok in ["1500ms", "-1"] {
        let (s, b) = node
            .req("PUT", "/_wlm/workload_group", Some(group(ok)))
            .await;
        assert_eq!(s, 200, "{ok}: {b}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_setting_refuses_fractional_time_values() {
    let node = TestNode::start().await;
    for key in [
        "search.cancel_after_time_interval",
        "search.default_keep_alive",
        "search.max_keep_alive",
    ] {
        let resp = node
            .req(
                "PUT",
                "/_cluster/settings",
                Some(json!({"transient": {key: "1.5h"}})),
            )
            .await;
        assert_error(&resp, 400, "illegal_argument_exception");
        assert_fractional_refused(&resp, "1.5h");
    }
    let (s, b) = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"search.cancel_after_time_interval": "1500ms"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_index_refresh_interval_refuses_fractional_time_values() {
    let node = TestNode::start().await;
    let resp = node
        .req(
            "PUT",
            "/r",
            Some(json!({"settings": {"index.refresh_interval": "1.5s"}})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_fractional_refused(&resp, "1.5s");
    let (s, b) = node
        .req(
            "PUT",
            "/r",
            Some(json!({"settings": {"index.refresh_interval": "1500ms"}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node.stop().await;
}

/// The cluster-manager timeouts (`cluster_manager_timeout`, deprecated `master_timeout`) are
/// time values wherever a route takes them, as OpenSearch's handlers read them: a value that is
/// not one is a 400 naming the parameter, and the request does nothing; a time value is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cluster_manager_timeouts_are_time_values_on_every_route_that_takes_them() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/_wlm/workload_group",
            Some(json!({"name": "g", "resiliency_mode": "soft",
                        "resource_limits": {"memory": 0.1}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let requests = |name: &str, value: &str| {
        let q = format!("{name}={value}");
        vec![
            ("GET", format!("/_cluster/settings?{q}"), None),
            (
                "PUT",
                format!("/_cluster/settings?{q}"),
                Some(json!({"transient": {"wlm.workload_group.mode": "enabled"}})),
            ),
            (
                "PUT",
                format!("/_cluster/settings?{q}"),
                Some(json!({"transient": {"search.max_buckets": 7}})),
            ),
            ("GET", format!("/_cluster/health?{q}"), None),
            ("GET", format!("/_cat/indices?format=json&{q}"), None),
            ("PUT", format!("/made?{q}"), None),
            ("DELETE", format!("/_wlm/workload_group/g?{q}"), None),
        ]
    };
    for name in ["master_timeout", "cluster_manager_timeout"] {
        for (method, path, body) in requests(name, "abc") {
            let resp = node.req(method, &path, body).await;
            assert_error(&resp, 400, "illegal_argument_exception");
            assert_eq!(
                reason(&resp),
                format!(
                    "failed to parse setting [{name}] with value [abc] as a time value: unit is missing or unrecognized"
                ),
                "{method} {path}"
            );
        }
    }
    let (_, settings) = node
        .req("GET", "/_cluster/settings?flat_settings=true", None)
        .await;
    assert_eq!(
        settings,
        json!({"persistent": {}, "transient": {}}),
        "a refused update changed nothing"
    );
    let (s, _) = node.req("HEAD", "/made", None).await;
    assert_eq!(s, 404, "a refused create made no index");
    // The delete's own `timeout` (OpenSearch's acknowledgement wait) is read the same way.
    let resp = node
        .req("DELETE", "/_wlm/workload_group/g?timeout=abc", None)
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(reason(&resp).contains("[timeout]"), "{}", resp.1);
    let (s, b) = node.req("GET", "/_wlm/workload_group/g", None).await;
    assert_eq!(s, 200, "a refused delete kept the group: {b}");

    let (name, value) = ("master_timeout", "30s");
    for (method, path, body) in requests(name, value) {
        let (s, b) = node.req(method, &path, body).await;
        assert_eq!(s, 200, "{method} {path}: {b}");
    }
    let (s, b) = node
        .req(
            "GET",
            "/_cluster/settings?cluster_manager_timeout=-1&timeout=1m",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node.stop().await;
}

/// An action's own `timeout` is a time value wherever its route takes it, as OpenSearch's
/// handlers read it, whether or not sluice waits on it: `timeout=30` (no unit) is a 400 naming
/// the parameter, and the request does nothing. Where a route does not take it, it is an
/// unknown parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_actions_timeout_is_a_time_value_wherever_its_route_takes_it() {
    let node = TestNode::start().await;
    with_index(&node).await;
    let bulk = "{\"index\":{\"_index\":\"t\",\"_id\":\"b\"}}\n{\"n\":2}\n";
    for value in ["abc", "30"] {
        let refused = [
            node.req("PUT", &format!("/made?timeout={value}"), None)
                .await,
            node.req("DELETE", &format!("/t?timeout={value}"), None)
                .await,
            node.req(
                "PUT",
                &format!("/t/_mapping?timeout={value}"),
                Some(json!({"properties": {"m": {"type": "keyword"}}})),
            )
            .await,
            node.req(
                "PUT",
                &format!("/_cluster/settings?timeout={value}"),
                Some(json!({"transient": {"search.max_buckets": 7}})),
            )
            .await,
            node.raw("POST", &format!("/_bulk?timeout={value}"), bulk)
                .await,
        ];
        for resp in refused {
            assert_error(&resp, 400, "illegal_argument_exception");
            assert_eq!(
                reason(&resp),
                format!(
                    "failed to parse setting [timeout] with value [{value}] as a time value: unit is missing or unrecognized"
                )
            );
        }
    }
    let (s, _) = node.req("HEAD", "/made", None).await;
    assert_eq!(s, 404, "a refused create made no index");
    let (s, _) = node.req("HEAD", "/t", None).await;
    assert_eq!(s, 200, "a refused delete kept the index");
    let (s, b) = node.req("GET", "/t/_mapping", None).await;
    assert_eq!(s, 200, "{b}");
    assert!(
        b["t"]["mappings"]["properties"].get("m").is_none(),
        "a refused mapping update changed nothing: {b}"
    );
    let (_, settings) = node
        .req("GET", "/_cluster/settings?flat_settings=true", None)
        .await;
    assert_eq!(settings["transient"], json!({}), "{settings}");
    let (s, _) = node.req("GET", "/t/_doc/b", None).await;
    assert_eq!(s, 404, "a refused bulk wrote nothing");

    // Taken where the route takes it.
    let (s, b) = node.req("PUT", "/made?timeout=30s", None).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .raw("POST", "/_bulk?timeout=1m&refresh=true", bulk)
        .await;
    assert_eq!(s, 200, "{b}");
    // A document read takes no `timeout`: an unknown parameter, as in OpenSearch.
    let resp = node.req("GET", "/t/_doc/1?timeout=1s", None).await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(
        reason(&resp).contains("contains unrecognized parameter: [timeout]"),
        "{}",
        resp.1
    );
    node.stop().await;
}
