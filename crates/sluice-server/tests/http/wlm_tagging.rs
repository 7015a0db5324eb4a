//! Tagging requests with workload groups over HTTP: the `workloadGroupId` header, the
//! fail-open path for unknown ids, auto-tagging rules and their precedence, the group on the
//! task, group search settings applied to requests, and the `_wlm/stats` counters that prove
//! where each request landed.

use crate::common;
use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

const ADMIN: (&str, &str) = ("x-proxy-user", "root");
const ADMIN_ROLES: (&str, &str) = ("x-proxy-roles", "admin");

/// A node with three small indices (`logs-1`, `metrics-1`, `other`), loaded with `headers`
/// (credentials when the node authenticates).
async fn node_with_indices_as(extra: &[&str], headers: &[(&str, &str)]) -> TestNode {
    let node = TestNode::start_with(extra).await;
    for index in ["logs-1", "metrics-1", "other"] {
        let lines: Vec<Value> = (0..5)
            .flat_map(|i| {
                [
                    json!({"index": {}}),
                    json!({"tag": format!("t{i}"), "n": i}),
                ]
            })
            .collect();
        let mut rb = node
            .client
            .post(node.url(&format!("/{index}/_bulk?refresh=true")))
            .header("content-type", "application/x-ndjson")
            .body(common::ndjson(&lines));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        let resp = rb.send().await.expect("bulk sent");
        assert_eq!(resp.status().as_u16(), 200, "bulk into {index}");
    }
    node
}

async fn node_with_indices(extra: &[&str]) -> TestNode {
    node_with_indices_as(extra, &[]).await
}

/// Creates a group and returns its id.
async fn create_group(node: &TestNode, body: Value, headers: &[(&str, &str)]) -> String {
    let r = node
        .req_with("PUT", "/_wlm/workload_group", Some(body), headers)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["_id"].as_str().expect("_id").to_string()
}

async fn create_rule(node: &TestNode, body: Value, headers: &[(&str, &str)]) {
    let r = node
        .req_with("PUT", "/_rules/workload_group", Some(body), headers)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The `_wlm/stats` object of group `id` on the only node.
async fn group_stats(node: &TestNode, id: &str) -> Value {
    // The admin headers authenticate on proxy-auth nodes and are ignored elsewhere.
    let r = node
        .req_with("GET", "/_wlm/stats", None, &[ADMIN, ADMIN_ROLES])
        .await;
    let body = r.body;
    assert_eq!(r.status, 200, "{body}");
    let obj = body.as_object().expect("object");
    let (_, node_stats) = obj
        .iter()
        .find(|(k, _)| *k != "_nodes" && *k != "cluster_name")
        .expect("a node entry");
    node_stats["workload_groups"][id].clone()
}

async fn completions(node: &TestNode, id: &str) -> u64 {
    group_stats(node, id).await["total_completions"]
        .as_u64()
        .unwrap_or_else(|| panic!("no total_completions for {id}"))
}

fn group(name: &str, cpu: f64) -> Value {
    json!({"name": name, "resiliency_mode": "soft", "resource_limits": {"cpu": cpu}})
}

#[tokio::test]
async fn test_header_tags_the_request_and_untagged_requests_land_in_default() {
    let node = node_with_indices(&[]).await;
    let id = create_group(&node, group("analytics", 0.3), &[]).await;
    let r = node
        .req_with(
            "POST",
            "/logs-1/_search",
            Some(json!({"query": {"match_all": {}}})),
            &[("workloadGroupId", &id)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header_values("warning").is_empty());
    assert_eq!(completions(&node, &id).await, 1);
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 0);

    node.search("logs-1", json!({})).await;
    let (s, _) = node.req("POST", "/logs-1/_count", None).await;
    assert_eq!(s, 200);
    assert_eq!(completions(&node, &id).await, 1);
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 2);
}

#[tokio::test]
async fn test_unknown_group_header_fails_open_with_a_warning_and_a_count() {
    let node = node_with_indices(&[]).await;
    let r = node
        .req_with(
            "POST",
            "/logs-1/_search",
            Some(json!({})),
            &[("workloadGroupId", "no-such-group")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["hits"]["total"]["value"], 5);
    let warnings = r.header_values("warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("299 OpenSearch-") && warnings[0].contains("[no-such-group]"),
        "{warnings:?}"
    );
    let default = group_stats(&node, "DEFAULT_WORKLOAD_GROUP").await;
    assert_eq!(default["total_completions"], 1);
    assert_eq!(default["total_unknown_group_tags"], 1);
}

/// Sends `method path` with `headers` and a text `body` (NDJSON for `_msearch`, else JSON).
async fn send(
    node: &TestNode,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> common::Reply {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut rb = node.client.request(m, node.url(path));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    if let Some(body) = body {
        let ty = if path.contains("_msearch") {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        rb = rb.header("content-type", ty).body(body);
    }
    common::Reply::of(rb.send().await.expect("sent")).await
}

/// Requests of every kind: a search (on a gateway, its fast lane), an `_msearch` (a whole
/// request of items tagged one by one), one that tags nothing, one that writes.
fn requests() -> [(&'static str, &'static str, Option<String>); 4] {
    let msearch = common::ndjson(&[json!({"index": "logs-1"}), json!({})]);
    [
        ("POST", "/logs-1/_search", Some("{}".to_string())),
        ("POST", "/_msearch", Some(msearch)),
        ("GET", "/_cluster/health", None),
        ("PUT", "/created", Some("{}".to_string())),
    ]
}

#[tokio::test]
async fn test_group_header_with_different_values_refuses_the_whole_request() {
    let node = node_with_indices(&[]).await;
    let id = create_group(&node, group("analytics", 0.3), &[]).await;
    for (method, path, body) in requests() {
        let r = send(
            &node,
            method,
            path,
            &[("workloadGroupId", &id), ("WorkloadGroupId", "other")],
            body,
        )
        .await;
        // OpenSearch's REST layer refuses it before any handler, with its simple error.
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert_eq!(
            r.body,
            json!({"error": "multiple values for single-valued header [workloadGroupId].", "status": 400}),
            "{path}"
        );
    }
    // Nothing ran: no search in any group, no index created.
    assert_eq!(completions(&node, &id).await, 0);
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 0);
    let (s, _) = node.req("HEAD", "/created", None).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn test_group_header_repeated_with_one_value_is_that_value() {
    let node = node_with_indices(&[]).await;
    let id = create_group(&node, group("analytics", 0.3), &[]).await;
    let mut searches = 0;
    for (method, path, body) in requests() {
        let r = send(
            &node,
            method,
            path,
            &[("workloadGroupId", &id), ("workloadgroupid", &id)],
            body,
        )
        .await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert!(r.header_values("warning").is_empty(), "{path}");
        match path {
            "/logs-1/_search" => assert_eq!(r.body["hits"]["total"]["value"], 5, "{}", r.body),
            "/_msearch" => assert_eq!(r.body["responses"][0]["status"], 200, "{}", r.body),
            _ => {}
        }
        if path.contains("search") {
            searches += 1;
        }
        assert_eq!(completions(&node, &id).await, searches, "{path}");
    }
    assert_eq!(searches, 2);
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 0);
}

#[tokio::test]
async fn test_group_header_with_a_tab_is_refused_as_not_visible_text() {
    let node = node_with_indices(&[]).await;
    let refused = "the [workloadGroupId] header must be visible ASCII text";
    // A search (on a gateway, its fast lane) and the items of an `_msearch` (its general
    // path), each refused as the request that uses the header.
    let [(method, path, body), (m_method, m_path, m_body), ..] = requests();
    let r = send(&node, method, path, &[("workloadGroupId", "a\tb")], body).await;
    assert_error(
        &(r.status, r.body.clone()),
        400,
        "illegal_argument_exception",
    );
    assert_eq!(r.body["error"]["reason"], refused, "{}", r.body);
    assert!(r.header_values("warning").is_empty());
    let r = send(
        &node,
        m_method,
        m_path,
        &[("workloadGroupId", "a\tb")],
        m_body,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let item = &r.body["responses"][0];
    assert_eq!(item["status"], 400, "{}", r.body);
    assert_eq!(item["error"]["reason"], refused, "{}", r.body);
    assert!(r.header_values("warning").is_empty());
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 0);
}

#[tokio::test]
async fn test_failures_count_requests_that_fail_after_tagging() {
    let node = node_with_indices(&[]).await;
    let id = create_group(&node, group("g", 0.2), &[]).await;
    let r = node
        .req_with(
            "POST",
            "/missing-index/_search",
            Some(json!({})),
            &[("workloadGroupId", &id)],
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let stats = group_stats(&node, &id).await;
    assert_eq!(stats["total_completions"], 1);
    assert_eq!(stats["failures"], 1);
}

#[tokio::test]
async fn test_index_rules_tag_by_longest_prefix_and_the_header_wins() {
    let node = node_with_indices(&[]).await;
    let broad = create_group(&node, group("broad", 0.2), &[]).await;
    let narrow = create_group(&node, group("narrow", 0.2), &[]).await;
    create_rule(
        &node,
        json!({"description": "all l", "index_pattern": ["l*"], "workload_group": broad}),
        &[],
    )
    .await;
    create_rule(
        &node,
        json!({"description": "logs", "index_pattern": ["logs-*"], "workload_group": narrow}),
        &[],
    )
    .await;
    node.search("logs-1", json!({})).await;
    assert_eq!(completions(&node, &narrow).await, 1);
    assert_eq!(completions(&node, &broad).await, 0);
    node.search("other", json!({})).await;
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 1);

    // An explicit header beats every rule.
    let r = node
        .req_with(
            "POST",
            "/logs-1/_search",
            Some(json!({})),
            &[("workloadGroupId", &broad)],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(completions(&node, &broad).await, 1);
    assert_eq!(completions(&node, &narrow).await, 1);

    // _msearch items are tagged one by one.
    let (s, body) = node
        .raw(
            "POST",
            "/_msearch",
            common::ndjson(&[
                json!({"index": "logs-1"}),
                json!({}),
                json!({"index": "other"}),
                json!({}),
            ]),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(completions(&node, &narrow).await, 2);
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 2);
}

#[tokio::test]
async fn test_equally_specific_rules_for_different_groups_tag_nothing() {
    let node = node_with_indices(&[]).await;
    let a = create_group(&node, group("a", 0.2), &[]).await;
    let b = create_group(&node, group("b", 0.2), &[]).await;
    // Both rules match a search over both indices with a 4-character prefix.
    create_rule(
        &node,
        json!({"description": "a", "index_pattern": ["logs*"], "workload_group": a}),
        &[],
    )
    .await;
    create_rule(
        &node,
        json!({"description": "b", "index_pattern": ["othe*"], "workload_group": b}),
        &[],
    )
    .await;
    node.search("logs-1,other", json!({})).await;
    assert_eq!(completions(&node, &a).await, 0);
    assert_eq!(completions(&node, &b).await, 0);
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 1);
}

#[tokio::test]
async fn test_principal_rules_beat_index_rules_and_disabled_mode_skips_rules() {
    let node = node_with_indices_as(
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.0/8",
        ],
        &[ADMIN, ADMIN_ROLES],
    )
    .await;
    let admin = [ADMIN, ADMIN_ROLES];
    let by_user = create_group(&node, group("by-user", 0.2), &admin).await;
    let by_role = create_group(&node, group("by-role", 0.2), &admin).await;
    let by_index = create_group(&node, group("by-index", 0.2), &admin).await;
    create_rule(
        &node,
        json!({"description": "u", "principal": {"username": ["alice"]}, "workload_group": by_user}),
        &admin,
    )
    .await;
    create_rule(
        &node,
        json!({"description": "r", "principal": {"role": ["analyst"]}, "workload_group": by_role}),
        &admin,
    )
    .await;
    create_rule(
        &node,
        json!({"description": "i", "index_pattern": ["logs-1"], "workload_group": by_index}),
        &admin,
    )
    .await;
    let search = |user: &'static str, roles: &'static str| {
        let node = &node;
        async move {
            let r = node
                .req_with(
                    "POST",
                    "/logs-1/_search",
                    Some(json!({})),
                    &[("x-proxy-user", user), ("x-proxy-roles", roles)],
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };
    search("alice", "analyst").await;
    assert_eq!(completions(&node, &by_user).await, 1);
    search("bob", "analyst").await;
    assert_eq!(completions(&node, &by_role).await, 1);
    search("carol", "viewer").await;
    assert_eq!(completions(&node, &by_index).await, 1);

    let r = node
        .req_with(
            "PUT",
            "/_cluster/settings",
            Some(json!({"persistent": {"wlm.workload_group.mode": "disabled"}})),
            &admin,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    search("alice", "analyst").await;
    assert_eq!(completions(&node, &by_user).await, 1);
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 1);
}

#[tokio::test]
async fn test_deleting_a_group_named_by_rules_warns_and_its_rules_tag_nothing() {
    let node = node_with_indices(&[]).await;
    let id = create_group(&node, group("doomed", 0.2), &[]).await;
    create_rule(
        &node,
        json!({"description": "d", "index_pattern": ["logs-*"], "workload_group": id}),
        &[],
    )
    .await;
    let r = node
        .req_with("DELETE", "/_wlm/workload_group/doomed", None, &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let warnings = r.header_values("warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("doomed"), "{warnings:?}");
    node.search("logs-1", json!({})).await;
    assert_eq!(completions(&node, "DEFAULT_WORKLOAD_GROUP").await, 1);
    let (s, body) = node.req("GET", "/_wlm/stats", None).await;
    assert_eq!(s, 200);
    assert!(!body.to_string().contains(&id), "{body}");
}

#[tokio::test]
async fn test_group_max_buckets_limits_aggregations_of_its_requests_only() {
    let node = node_with_indices(&[]).await;
    let mut body = group("small", 0.2);
    body["settings"] = json!({"search.max_buckets": 3});
    let id = create_group(&node, body, &[]).await;
    let agg = json!({"size": 0, "aggs": {"t": {"terms": {"field": "tag.keyword", "size": 10}}}});
    let r = node
        .req_with(
            "POST",
            "/logs-1/_search",
            Some(agg.clone()),
            &[("workloadGroupId", &id)],
        )
        .await;
    if common::gateway_mode() {
        // A search request has no parameter for it: a gateway cannot apply the setting, and
        // says so when the group is created (docs/compatibility.md; the gateway suite checks
        // the warning). Its requests are forwarded as they are.
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body["aggregations"]["t"]["buckets"]
                .as_array()
                .map(Vec::len),
            Some(5)
        );
    } else {
        assert_error(
            &(r.status, r.body.clone()),
            503,
            "too_many_buckets_exception",
        );
    }
    let resp = node.search("logs-1", agg).await;
    assert_eq!(
        resp["aggregations"]["t"]["buckets"]
            .as_array()
            .map(Vec::len),
        Some(5)
    );
}

#[tokio::test]
async fn test_group_timeout_and_cancel_after_follow_override_request_values() {
    let node = TestNode::start_heavy(&[]).await;
    let mut body = group("slow", 0.2);
    body["settings"] = json!({"search.default_search_timeout": "1ms"});
    let slow = create_group(&node, body, &[]).await;
    let heavy = common::heavy_query();

    // The group's timeout applies when the request sets none ...
    let r = node
        .req_with(
            "POST",
            "/heavy/_search",
            Some(heavy.clone()),
            &[("workloadGroupId", &slow)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["timed_out"], true);

    // ... and an explicit request value wins while override_request_values is false.
    let mut explicit = heavy.clone();
    explicit["timeout"] = json!("10m");
    explicit["size"] = json!(1);
    explicit["aggs"] = json!({});
    let r = node
        .req_with(
            "POST",
            "/heavy/_search",
            Some(explicit.clone()),
            &[("workloadGroupId", &slow)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["timed_out"], false);

    // With override_request_values the group's cancel-after beats the request's `-1`.
    let mut body = group("strict", 0.2);
    body["settings"] =
        json!({"search.cancel_after_time_interval": "1ms", "override_request_values": true});
    let strict = create_group(&node, body, &[]).await;
    let r = node
        .req_with(
            "POST",
            "/heavy/_search?cancel_after_time_interval=-1",
            Some(heavy.clone()),
            &[("workloadGroupId", &strict)],
        )
        .await;
    assert_error(
        &(r.status, r.body.clone()),
        500,
        "search_phase_execution_exception",
    );
    assert!(
        r.body.to_string().contains("task_cancelled_exception"),
        "{}",
        r.body
    );
    let stats = group_stats(&node, &strict).await;
    assert_eq!(stats["failures"], 1);
}

#[tokio::test]
async fn test_running_task_shows_its_group() {
    let node = TestNode::start_heavy(&[]).await;
    let id = create_group(&node, group("seen", 0.2), &[]).await;
    let client = node.client.clone();
    let url = node.url("/heavy/_search");
    let header_id = id.clone();
    let running = tokio::spawn(async move {
        client
            .post(url)
            .header("workloadGroupId", header_id)
            .header("content-type", "application/json")
            .body(common::heavy_query().to_string())
            .send()
            .await
    });
    let mut seen = None;
    for _ in 0..500 {
        let (s, body) = node
            .req(
                "GET",
                "/_tasks?detailed&actions=indices:data/read/search",
                None,
            )
            .await;
        assert_eq!(s, 200);
        let found = body["nodes"]
            .as_object()
            .into_iter()
            .flat_map(|n| n.values())
            .flat_map(|n| n["tasks"].as_object().into_iter().flat_map(|t| t.values()))
            .find(|t| t["workload_group"]["id"] == json!(id))
            .cloned();
        if found.is_some() {
            seen = found;
            break;
        }
        tokio::task::yield_now().await;
    }
    let task = seen.expect("the running search was listed with its group");
    assert_eq!(task["workload_group"]["name"], "seen");
    let (s, _) = node
        .req("POST", "/_tasks/_cancel?actions=*search*", None)
        .await;
    assert_eq!(s, 200);
    let _ = running.await;
}

#[tokio::test]
async fn test_groups_and_rules_tag_requests_after_a_restart() {
    let node = node_with_indices(&[]).await;
    let id = create_group(&node, group("kept", 0.2), &[]).await;
    create_rule(
        &node,
        json!({"description": "k", "index_pattern": ["logs-*"], "workload_group": id}),
        &[],
    )
    .await;
    let data = node.data.clone();
    let tmp = node.stop().await;
    let node = TestNode::start_on(&data, &[]).await;
    node.search("logs-1", json!({})).await;
    assert_eq!(completions(&node, &id).await, 1);
    drop(node);
    drop(tmp);
}
