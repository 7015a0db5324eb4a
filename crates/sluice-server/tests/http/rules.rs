//! The auto-tagging rules API over HTTP: every `_rules/workload_group` route, validation
//! against the stored groups, duplicates, partial updates, paging, and persistence across a
//! restart.

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

const RULES: &str = "/_rules/workload_group";

fn rule_path(id: &str) -> String {
    format!("{RULES}/{id}")
}

/// Creates a workload group and returns its id.
async fn create_group(node: &TestNode, name: &str) -> String {
    node.create_group(
        json!({"name": name, "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}}),
    )
    .await
}

/// Creates a rule and returns the created rule object.
async fn create_rule(node: &TestNode, body: Value) -> Value {
    let (status, rule) = node.req("PUT", RULES, Some(body)).await;
    assert_eq!(status, 200, "{rule}");
    rule
}

fn assert_bad_request(resp: &(u16, Value), needle: &str) {
    assert_error(resp, 400, "illegal_argument_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(needle),
        "reason {reason:?} lacks {needle:?}"
    );
}

fn ids(resp: &Value) -> Vec<String> {
    resp["rules"]
        .as_array()
        .unwrap_or_else(|| panic!("no rules in {resp}"))
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test]
async fn test_rule_crud_round_trip() {
    let node = TestNode::start().await;
    let group = create_group(&node, "analytics").await;

    // Create: the server picks the id and sets updated_at.
    let rule = create_rule(
        &node,
        json!({"id": "mine", "description": "for logs", "index_pattern": ["logs*"],
               "workload_group": group}),
    )
    .await;
    let id = rule["id"].as_str().expect("id").to_string();
    assert_ne!(id, "mine");
    assert_eq!(rule["description"], "for logs");
    assert_eq!(rule["index_pattern"], json!(["logs*"]));
    assert_eq!(rule["workload_group"], group.as_str());
    let ts = rule["updated_at"].as_str().expect("updated_at");
    assert!(ts.ends_with('Z') && ts.contains('T'), "{ts}");

    // POST creates too.
    let (status, other) = node
        .req(
            "POST",
            RULES,
            Some(
                json!({"description": "metrics", "index_pattern": ["metrics*"],
                        "workload_group": group}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{other}");

    // Get one.
    let (status, got) = node.req("GET", &rule_path(&id), None).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, json!({"rules": [rule]}));

    // List: sorted by id, no search_after on a partial page.
    let (status, all) = node.req("GET", RULES, None).await;
    assert_eq!(status, 200, "{all}");
    let mut expected = vec![id.clone(), other["id"].as_str().unwrap().to_string()];
    expected.sort();
    assert_eq!(ids(&all), expected);
    assert!(all.get("search_after").is_none(), "{all}");

    // Attribute filter.
    let (status, filtered) = node
        .req("GET", &format!("{RULES}?index_pattern=logs*,x"), None)
        .await;
    assert_eq!(status, 200, "{filtered}");
    assert_eq!(ids(&filtered), std::slice::from_ref(&id));

    // Update merges: only the description changes.
    let (status, updated) = node
        .req(
            "PUT",
            &rule_path(&id),
            Some(json!({"description": "logs, renamed"})),
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["id"], id.as_str());
    assert_eq!(updated["description"], "logs, renamed");
    assert_eq!(updated["index_pattern"], json!(["logs*"]));
    assert_eq!(updated["workload_group"], group.as_str());

    // Delete, then 404 everywhere.
    let (status, ack) = node.req("DELETE", &rule_path(&id), None).await;
    assert_eq!((status, ack), (200, json!({"acknowledged": true})));
    let missing = node.req("GET", &rule_path(&id), None).await;
    assert_error(&missing, 404, "resource_not_found_exception");
    assert_eq!(
        missing.1["error"]["reason"],
        format!("Rule with ID {id} not found.")
    );
    let again = node.req("DELETE", &rule_path(&id), None).await;
    assert_error(&again, 404, "resource_not_found_exception");
    let upd = node
        .req("PUT", &rule_path(&id), Some(json!({"description": "x"})))
        .await;
    assert_error(&upd, 404, "resource_not_found_exception");
}

#[tokio::test]
async fn test_rule_validation_errors() {
    let node = TestNode::start().await;
    let group = create_group(&node, "analytics").await;

    // A group id that does not exist.
    let resp = node
        .req(
            "PUT",
            RULES,
            Some(json!({"description": "d", "index_pattern": ["a"], "workload_group": "nope"})),
        )
        .await;
    assert_bad_request(&resp, "nope is not a valid workload group id.");

    // Several errors collected into one validation failure.
    let resp = node
        .req(
            "PUT",
            RULES,
            Some(json!({"description": "", "index_pattern": ["a*b"], "workload_group": group})),
        )
        .await;
    assert_bad_request(&resp, "Validation Failed: 1: ");
    assert_bad_request(&resp, "only one '*' is allowed");

    // Unknown attribute.
    let resp = node
        .req(
            "PUT",
            RULES,
            Some(json!({"description": "d", "color": ["red"], "workload_group": group})),
        )
        .await;
    assert_bad_request(
        &resp,
        "color is not a valid attribute within the workload_group feature.",
    );

    // A duplicate names the existing rule.
    let first = create_rule(
        &node,
        json!({"description": "a", "index_pattern": ["logs*", "x"], "workload_group": group}),
    )
    .await;
    let resp = node
        .req(
            "PUT",
            RULES,
            Some(json!({"description": "b", "index_pattern": ["x"], "workload_group": group})),
        )
        .await;
    let first_id = first["id"].as_str().unwrap();
    assert_bad_request(&resp, &format!("Duplicate rule exists under id {first_id}"));

    // Malformed filter parameters.
    let many = ["v"; 11].join(",");
    let resp = node
        .req("GET", &format!("{RULES}?index_pattern={many}"), None)
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
}

#[tokio::test]
async fn test_rule_list_pages_by_id_with_search_after() {
    let node = TestNode::start().await;
    let group = create_group(&node, "analytics").await;
    let mut created = Vec::new();
    for i in 0..51 {
        let r = create_rule(
            &node,
            json!({"description": format!("r{i}"), "index_pattern": [format!("idx-{i}")],
                   "workload_group": group}),
        )
        .await;
        created.push(r["id"].as_str().unwrap().to_string());
    }
    created.sort();
    let (status, page1) = node.req("GET", RULES, None).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&page1), created[..50]);
    assert_eq!(page1["search_after"], json!([created[49]]));
    let (status, page2) = node
        .req(
            "GET",
            &format!("{RULES}?search_after={}", created[49]),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(ids(&page2), created[50..]);
    assert!(page2.get("search_after").is_none(), "{page2}");
}

#[tokio::test]
async fn test_rules_survive_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = TestNode::start_on(tmp.path(), &[]).await;
    let group = create_group(&node, "analytics").await;
    let rule = create_rule(
        &node,
        json!({"description": "keep", "principal": {"username": ["alice"]},
               "workload_group": group}),
    )
    .await;
    node.stop().await;

    let node = TestNode::start_on(tmp.path(), &[]).await;
    let id = rule["id"].as_str().unwrap();
    let (status, got) = node.req("GET", &rule_path(id), None).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, json!({"rules": [rule]}));
    node.stop().await;
}

/// `wlm.autotagging.max_rules` (default 200, 10 to 500) bounds the rules: one more is a 429
/// naming the limit; a value out of range is refused naming the setting.
#[tokio::test]
async fn test_max_rules_is_a_cluster_setting_that_bounds_the_rules() {
    let node = TestNode::start().await;
    let group = create_group(&node, "analytics").await;
    let set = |v: Value| json!({"persistent": {"wlm.autotagging.max_rules": v}});
    for bad in [json!(9), json!(501), json!("x")] {
        let (s, b) = node
            .req("PUT", "/_cluster/settings", Some(set(bad.clone())))
            .await;
        assert_eq!(s, 400, "{bad}: {b}");
        let reason = b["error"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("wlm.autotagging.max_rules"), "{b}");
    }
    let (s, b) = node
        .req("PUT", "/_cluster/settings", Some(set(json!(10))))
        .await;
    assert_eq!(s, 200, "{b}");
    for i in 0..10 {
        create_rule(
            &node,
            json!({"description": format!("r{i}"), "index_pattern": [format!("logs-{i}*")],
                   "workload_group": group}),
        )
        .await;
    }
    let one_more = json!({"description": "r10", "index_pattern": ["logs-10*"],
                          "workload_group": group});
    let r = node.req("PUT", RULES, Some(one_more.clone())).await;
    assert_eq!(r.0, 429, "{}", r.1);
    let reason = r.1["error"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("cardinality limit of 10"), "{}", r.1);
    // Raised, the same rule goes in.
    let (s, b) = node
        .req("PUT", "/_cluster/settings", Some(set(json!(11))))
        .await;
    assert_eq!(s, 200, "{b}");
    create_rule(&node, one_more).await;
    node.stop().await;
}
