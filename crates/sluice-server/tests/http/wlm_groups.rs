//! The workload group API over HTTP: every `_wlm/workload_group` route, one representative of
//! each class of validation error, partial updates, persistence across a restart, admin
//! permissions under basic auth, and the WLM cluster settings.

use std::path::{Path, PathBuf};

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};
use sluice_server::auth::add_user;

const GROUPS: &str = "/_wlm/workload_group";

fn group_path(name: &str) -> String {
    format!("{GROUPS}/{name}")
}

fn analytics() -> Value {
    json!({"name": "analytics", "resiliency_mode": "enforced",
           "resource_limits": {"cpu": 0.4, "memory": 0.2}})
}

/// Creates a group and returns the created group object.
async fn create_ok(node: &TestNode, body: Value) -> Value {
    let (status, group) = node.req("PUT", GROUPS, Some(body)).await;
    assert_eq!(status, 200, "{group}");
    group
}

/// Asserts a 400 `illegal_argument_exception` whose reason contains `needle`.
fn assert_bad_request(resp: &(u16, Value), needle: &str) {
    assert_error(resp, 400, "illegal_argument_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(needle),
        "reason {reason:?} lacks {needle:?}"
    );
}

/// The names of a `{"workload_groups":[…]}` response, in order.
fn names(resp: &Value) -> Vec<String> {
    resp["workload_groups"]
        .as_array()
        .unwrap_or_else(|| panic!("no workload_groups in {resp}"))
        .iter()
        .map(|g| g["name"].as_str().expect("name").to_string())
        .collect()
}

#[tokio::test]
async fn test_create_answers_the_group_with_a_generated_id() {
    let node = TestNode::start().await;
    let mut body = analytics();
    body["_id"] = json!("client-chosen");
    let g = create_ok(&node, body).await;
    let id = g["_id"].as_str().expect("_id");
    assert_ne!(id, "client-chosen");
    assert_eq!(id.len(), 22, "{id}");
    assert!(
        id.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    );
    assert_eq!(g["name"], "analytics");
    assert_eq!(g["resiliency_mode"], "enforced");
    assert_eq!(g["resource_limits"], json!({"cpu": 0.4, "memory": 0.2}));
    assert_eq!(g["settings"], json!({}));
    assert!(g["updated_at"].as_i64().expect("updated_at") > 0);
    let keys: Vec<&str> = g
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys[..4],
        ["_id", "name", "resiliency_mode", "resource_limits"]
    );

    // POST creates too.
    let (status, g2) = node
        .req(
            "POST",
            GROUPS,
            Some(json!({"name": "batch", "resiliency_mode": "SOFT",
                        "resource_limits": {"cpu": 0.1}})),
        )
        .await;
    assert_eq!(status, 200, "{g2}");
    assert_eq!(g2["resiliency_mode"], "soft");
    assert_ne!(g2["_id"], g["_id"]);
}

#[tokio::test]
async fn test_get_lists_all_groups_and_one_by_name() {
    let node = TestNode::start().await;
    let (status, empty) = node.req("GET", GROUPS, None).await;
    assert_eq!(status, 200);
    assert_eq!(empty, json!({"workload_groups": []}));

    let created = create_ok(&node, analytics()).await;
    create_ok(
        &node,
        json!({"name": "batch", "resiliency_mode": "monitor", "resource_limits": {"memory": 0.3}}),
    )
    .await;
    let (status, all) = node.req("GET", GROUPS, None).await;
    assert_eq!(status, 200);
    assert_eq!(names(&all), ["analytics", "batch"]);

    let (status, one) = node.req("GET", &group_path("analytics"), None).await;
    assert_eq!(status, 200);
    assert_eq!(one, json!({"workload_groups": [created]}));

    let missing = node.req("GET", &group_path("nope"), None).await;
    assert_error(&missing, 404, "resource_not_found_exception");
    assert_eq!(
        missing.1["error"]["reason"],
        "No WorkloadGroup exists with the provided name: nope"
    );
}

#[tokio::test]
async fn test_update_merges_onto_the_stored_group() {
    let node = TestNode::start().await;
    let created = create_ok(
        &node,
        json!({"name": "analytics", "resiliency_mode": "enforced",
               "resource_limits": {"cpu": 0.4, "memory": 0.2},
               "throttling": {"attribute": "group", "node_limit": 5}}),
    )
    .await;
    assert_eq!(created["throttling"]["attribute"], "group");

    // Only node_limit changes: the attribute, limits and mode are kept.
    let (status, updated) = node
        .req(
            "PUT",
            &group_path("analytics"),
            Some(json!({"throttling": {"node_limit": 10}})),
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["_id"], created["_id"]);
    assert_eq!(updated["throttling"]["attribute"], "group");
    assert_eq!(
        updated["throttling"]["node_limit"]
            .to_string()
            .trim_matches('"'),
        "10"
    );
    assert_eq!(updated["resiliency_mode"], "enforced");
    assert_eq!(
        updated["resource_limits"],
        json!({"cpu": 0.4, "memory": 0.2})
    );
    assert!(updated["updated_at"].as_i64() >= created["updated_at"].as_i64());

    // POST updates too; limits merge key by key.
    let (status, updated) = node
        .req(
            "POST",
            &group_path("analytics"),
            Some(json!({"resiliency_mode": "soft", "resource_limits": {"memory": 0.5}})),
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["resiliency_mode"], "soft");
    assert_eq!(
        updated["resource_limits"],
        json!({"cpu": 0.4, "memory": 0.5})
    );

    // The update is what GET sees.
    let (_, got) = node.req("GET", &group_path("analytics"), None).await;
    assert_eq!(got["workload_groups"][0], updated);

    let missing = node
        .req(
            "PUT",
            &group_path("nope"),
            Some(json!({"resiliency_mode": "soft"})),
        )
        .await;
    assert_error(&missing, 404, "resource_not_found_exception");
}

#[tokio::test]
async fn test_delete_removes_the_group_then_answers_404() {
    let node = TestNode::start().await;
    create_ok(&node, analytics()).await;
    let (status, body) = node.req("DELETE", &group_path("analytics"), None).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"acknowledged": true}));
    let gone = node.req("GET", &group_path("analytics"), None).await;
    assert_error(&gone, 404, "resource_not_found_exception");
    let again = node.req("DELETE", &group_path("analytics"), None).await;
    assert_error(&again, 404, "resource_not_found_exception");
    assert_eq!(
        again.1["error"]["reason"],
        "No WorkloadGroup exists with the provided name: analytics"
    );
    // The freed capacity is available again.
    let mut full = analytics();
    full["resource_limits"] = json!({"cpu": 1.0});
    create_ok(&node, full).await;
}

#[tokio::test]
async fn test_create_rejects_each_class_of_invalid_group() {
    let node = TestNode::start().await;
    let base = analytics();
    let with = |key: &str, value: Value| {
        let mut b = base.clone();
        b[key] = value;
        b
    };
    let cases: Vec<(Value, &str)> = vec![
        (
            with("name", json!("")),
            "WorkloadGroup.name shouldn't be null, empty or more than 50 chars long",
        ),
        (
            with("name", json!("x".repeat(51))),
            "WorkloadGroup.name shouldn't be null, empty or more than 50 chars long",
        ),
        (
            with("resiliency_mode", json!("strict")),
            "Invalid value for WorkloadGroupMode: strict",
        ),
        (
            with("resource_limits", json!({"cpu": 1.5})),
            "resource value should be greater than 0 and less or equal to 1.0",
        ),
        (
            with("resource_limits", json!({"cpu": 0})),
            "resource value should be greater than 0 and less or equal to 1.0",
        ),
        (
            with("resource_limits", json!({})),
            "WorkloadGroup.resourceLimits should at least have 1 resource limit",
        ),
        (
            with("colour", json!("red")),
            "colour is not a valid field in WorkloadGroup",
        ),
        (
            with("throttling", json!({"node_limit": 5})),
            "throttling.attribute is required when throttling.node_limit is set",
        ),
        (
            with(
                "throttling",
                json!({"attribute": "group", "node_limit": 0, "shared_limit": 0}),
            ),
            "effective throttle ceiling is 0 (node_limit=0 and shared_limit=0)",
        ),
        (
            with(
                "throttling",
                json!({"attribute": "username", "node_limit": 5}),
            ),
            "needs an authenticated caller",
        ),
        (
            with(
                "throttling",
                json!({"attribute": "group", "node_limit": 2_147_483_648u64}),
            ),
            "throttling.node_limit must be at most 2147483647, got 2147483648",
        ),
        (
            with(
                "throttling",
                json!({"attribute": "group", "shared_limit": "4294967295"}),
            ),
            "throttling.shared_limit must be at most 2147483647, got 4294967295",
        ),
    ];
    for (body, needle) in cases {
        let resp = node.req("PUT", GROUPS, Some(body.clone())).await;
        assert_bad_request(&resp, needle);
    }
    // None of them was stored.
    let (_, all) = node.req("GET", GROUPS, None).await;
    assert_eq!(all, json!({"workload_groups": []}));
}

#[tokio::test]
async fn test_cross_group_rules_run_against_the_stored_groups() {
    let node = TestNode::start().await;
    create_ok(&node, analytics()).await;

    let dup = node.req("PUT", GROUPS, Some(analytics())).await;
    assert_bad_request(
        &dup,
        "WorkloadGroup with name analytics already exists. Not creating a new one.",
    );

    let over = node
        .req(
            "PUT",
            GROUPS,
            Some(json!({"name": "big", "resiliency_mode": "soft",
                        "resource_limits": {"cpu": 0.7}})),
        )
        .await;
    assert_bad_request(
        &over,
        "Total resource allocation for cpu will go above the max limit of 1.0.",
    );

    // An update is checked against the other groups, not against its own old value.
    create_ok(
        &node,
        json!({"name": "batch", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.5}}),
    )
    .await;
    let (status, _) = node
        .req(
            "PUT",
            &group_path("analytics"),
            Some(json!({"resource_limits": {"cpu": 0.5}})),
        )
        .await;
    assert_eq!(status, 200);
    let over = node
        .req(
            "PUT",
            &group_path("analytics"),
            Some(json!({"resource_limits": {"cpu": 0.6}})),
        )
        .await;
    assert_bad_request(&over, "Total resource allocation for cpu");

    // Invalid updates: unknown field, bad mode.
    let bad = node
        .req("PUT", &group_path("batch"), Some(json!({"colour": "red"})))
        .await;
    assert_bad_request(&bad, "colour is not a valid field in WorkloadGroup");
    let bad = node
        .req(
            "POST",
            &group_path("batch"),
            Some(json!({"resiliency_mode": "lax"})),
        )
        .await;
    assert_bad_request(&bad, "Invalid value for WorkloadGroupMode: lax");
}

#[tokio::test]
async fn test_concurrent_creates_never_exceed_the_resource_sum() {
    let node = TestNode::start().await;
    let mut handles = Vec::new();
    for i in 0..8 {
        let client = node.client.clone();
        let url = node.url(GROUPS);
        handles.push(tokio::spawn(async move {
            client
                .put(url)
                .header("content-type", "application/json")
                .body(
                    json!({"name": format!("g{i}"), "resiliency_mode": "soft",
                           "resource_limits": {"cpu": 0.3}})
                    .to_string(),
                )
                .send()
                .await
                .expect("sent")
                .status()
                .as_u16()
        }));
    }
    let mut ok = 0;
    for h in handles {
        match h.await.expect("task") {
            200 => ok += 1,
            400 => {}
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(ok, 3, "0.3 cpu fits three times into 1.0");
    let (_, all) = node.req("GET", GROUPS, None).await;
    assert_eq!(names(&all).len(), 3);
}

#[tokio::test]
async fn test_max_count_setting_limits_the_number_of_groups() {
    let node = TestNode::start().await;
    let (status, body) = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"node.workload_group.max_count": 1}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    create_ok(&node, analytics()).await;
    let resp = node
        .req(
            "PUT",
            GROUPS,
            Some(json!({"name": "b", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}})),
        )
        .await;
    assert_error(&resp, 429, "rejected_execution_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "Can't create more than 1 WorkloadGroups in the system."
    );
    let bad = node
        .req(
            "PUT",
            "/_cluster/settings",
            Some(json!({"transient": {"node.workload_group.max_count": 101}})),
        )
        .await;
    assert_bad_request(
        &bad,
        "node.workload_group.max_count should be in range [1-100].",
    );
}

#[tokio::test]
async fn test_groups_survive_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let node = TestNode::start_on(&data, &[]).await;
    let created = create_ok(&node, analytics()).await;
    let (status, _) = node
        .req(
            "PUT",
            &group_path("analytics"),
            Some(json!({"resiliency_mode": "soft"})),
        )
        .await;
    assert_eq!(status, 200);
    node.stop().await;

    let node = TestNode::start_on(&data, &[]).await;
    let (status, all) = node.req("GET", GROUPS, None).await;
    assert_eq!(status, 200);
    let groups = all["workload_groups"].as_array().expect("array");
    assert_eq!(groups.len(), 1, "{all}");
    assert_eq!(groups[0]["_id"], created["_id"]);
    assert_eq!(groups[0]["resiliency_mode"], "soft");
    // The cross-group rules see the restored group.
    let dup = node.req("PUT", GROUPS, Some(analytics())).await;
    assert_bad_request(&dup, "already exists");
    node.stop().await;
}

#[tokio::test]
async fn test_crud_works_in_every_wlm_mode() {
    let node = TestNode::start().await;
    for (i, mode) in ["disabled", "monitor_only", "enabled"].iter().enumerate() {
        let (status, body) = node
            .req(
                "PUT",
                "/_cluster/settings",
                Some(json!({"persistent": {"wlm.workload_group.mode": mode}})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let name = format!("g{i}");
        create_ok(
            &node,
            json!({"name": name, "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}}),
        )
        .await;
        let (status, _) = node
            .req(
                "PUT",
                &group_path(&name),
                Some(json!({"resiliency_mode": "monitor"})),
            )
            .await;
        assert_eq!(status, 200, "update in {mode}");
        let (status, _) = node.req("DELETE", &group_path(&name), None).await;
        assert_eq!(status, 200, "delete in {mode}");
    }
}

/// Writes a users file with alice (analyst, admin) and bob (analyst) into `dir`.
fn users_file(dir: &Path) -> PathBuf {
    let path = dir.join("config/users.yml");
    add_user(
        &path,
        "alice",
        "alice-pw",
        &["analyst".into(), "admin".into()],
        false,
    )
    .expect("add alice");
    add_user(&path, "bob", "bob-pw", &["analyst".into()], false).expect("add bob");
    path
}

async fn send_as(
    node: &TestNode,
    user: (&str, &str),
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut rb = node
        .client
        .request(m, node.url(path))
        .basic_auth(user.0, Some(user.1));
    if let Some(b) = body {
        rb = rb
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = rb.send().await.expect("sent");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn test_mutations_need_an_admin_under_basic_auth() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let users = users_file(tmp.path());
    let users_setting = format!("auth.users_file={}", users.display());
    let node = TestNode::start_on(
        &tmp.path().join("data"),
        &["auth.type=basic", &users_setting],
    )
    .await;
    let alice = ("alice", "alice-pw");
    let bob = ("bob", "bob-pw");

    let denied = send_as(&node, bob, "PUT", GROUPS, Some(analytics())).await;
    assert_error(&denied, 403, "security_exception");
    let reason = denied.1["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("cluster:admin/opensearch/wlm/workload_group/_create"),
        "{reason}"
    );

    let (status, g) = send_as(&node, alice, "PUT", GROUPS, Some(analytics())).await;
    assert_eq!(status, 200, "{g}");

    let denied = send_as(
        &node,
        bob,
        "PUT",
        &group_path("analytics"),
        Some(json!({"resiliency_mode": "soft"})),
    )
    .await;
    assert_error(&denied, 403, "security_exception");
    let denied = send_as(&node, bob, "DELETE", &group_path("analytics"), None).await;
    assert_error(&denied, 403, "security_exception");

    // Reading needs no admin role.
    let (status, all) = send_as(&node, bob, "GET", GROUPS, None).await;
    assert_eq!(status, 200);
    assert_eq!(names(&all), ["analytics"]);

    // With authentication configured, a username throttle is accepted.
    let (status, g) = send_as(
        &node,
        alice,
        "PUT",
        &group_path("analytics"),
        Some(json!({"throttling": {"attribute": "username", "node_limit": 2}})),
    )
    .await;
    assert_eq!(status, 200, "{g}");
    assert_eq!(g["throttling"]["attribute"], "username");

    let (status, _) = send_as(&node, alice, "DELETE", &group_path("analytics"), None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn test_wlm_settings_are_validated() {
    let node = TestNode::start().await;
    let put = |body: Value| node.req("PUT", "/_cluster/settings", Some(body));

    let (status, defaults) = node
        .req(
            "GET",
            "/_cluster/settings?include_defaults&flat_settings",
            None,
        )
        .await;
    assert_eq!(status, 200);
    let d = &defaults["defaults"];
    assert_eq!(d["wlm.workload_group.mode"], "monitor_only");
    assert_eq!(d["wlm.workload_group.node.cpu_rejection_threshold"], "0.8");
    assert_eq!(
        d["wlm.workload_group.node.cpu_cancellation_threshold"],
        "0.9"
    );
    assert_eq!(
        d["wlm.workload_group.node.memory_rejection_threshold"],
        "0.8"
    );
    assert_eq!(
        d["wlm.workload_group.node.memory_cancellation_threshold"],
        "0.9"
    );
    assert_eq!(d["wlm.workload_group.enforcement_interval"], "1000");
    assert_eq!(d["wlm.workload_group.usage_refresh_interval"], "100");
    assert_eq!(d["wlm.workload_group.duress_streak"], "3");
    assert_eq!(d["node.workload_group.max_count"], "100");

    let bad = put(json!({"persistent": {"wlm.workload_group.mode": "on"}})).await;
    assert_bad_request(&bad, "wlm.workload_group.mode");

    let bad =
        put(json!({"persistent": {"wlm.workload_group.node.cpu_rejection_threshold": 0.95}})).await;
    assert_bad_request(
        &bad,
        "wlm.workload_group.node.cpu_rejection_threshold value cannot be greater than 0.9 as it can result in a node drop",
    );
    let bad =
        put(json!({"persistent": {"wlm.workload_group.node.memory_cancellation_threshold": 0.96}}))
            .await;
    assert_bad_request(
        &bad,
        "wlm.workload_group.node.memory_cancellation_threshold value cannot be greater than 0.95 as it can result in a node drop",
    );
    let bad =
        put(json!({"transient": {"wlm.workload_group.node.memory_rejection_threshold": -0.1}}))
            .await;
    assert_bad_request(
        &bad,
        "wlm.workload_group.node.memory_rejection_threshold value cannot be negative",
    );
    let bad = put(json!({"persistent": {"wlm.workload_group.enforcement_interval": 500}})).await;
    assert_bad_request(&bad, "must be >= 1000");
    let bad = put(json!({"persistent": {"wlm.workload_group.usage_refresh_interval": 5}})).await;
    assert_bad_request(&bad, "must be >= 10");
    let bad = put(json!({"persistent": {"wlm.workload_group.duress_streak": 2}})).await;
    assert_bad_request(&bad, "must be >= 3");

    // The invariant: cancellation ≥ rejection, on the merged settings.
    let bad =
        put(json!({"persistent": {"wlm.workload_group.node.cpu_cancellation_threshold": 0.7}}))
            .await;
    assert_bad_request(
        &bad,
        "wlm.workload_group.node.cpu_cancellation_threshold value should not be less than wlm.workload_group.node.cpu_rejection_threshold",
    );
    let bad = put(json!({"transient": {"wlm.workload_group.node.memory_rejection_threshold": 0.9,
                                        "wlm.workload_group.node.memory_cancellation_threshold": 0.85}}))
        .await;
    assert_bad_request(
        &bad,
        "memory_cancellation_threshold value should not be less than",
    );

    // Lowering both in one request works.
    let (status, body) = put(json!({"persistent": {
        "wlm.workload_group.node.cpu_rejection_threshold": 0.5,
        "wlm.workload_group.node.cpu_cancellation_threshold": 0.6,
        "wlm.workload_group.mode": "enabled"}}))
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, got) = node
        .req("GET", "/_cluster/settings?flat_settings", None)
        .await;
    assert_eq!(
        got["persistent"]["wlm.workload_group.node.cpu_cancellation_threshold"],
        "0.6"
    );
    assert_eq!(got["persistent"]["wlm.workload_group.mode"], "enabled");
}
