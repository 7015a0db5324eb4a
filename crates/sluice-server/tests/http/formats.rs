//! Answers in the format the request names, as OpenSearch renders them: `?format=yaml` or
//! `Accept: application/yaml` turns every JSON answer into YAML (a `---` document start,
//! `Content-Type: application/yaml`), errors and `_cat` rows included; `format` comes before
//! the header. Through a gateway (`SLUICE_TEST_BACKEND=upstream`) the same answers come back:
//! relayed from the node behind it (which was sent the same `format`), or built by the gateway
//! from the node's YAML (`_msearch`) and rendered as YAML.

use serde_json::{Value, json};

use crate::common::{Raw, TestNode, ndjson, send_raw};

/// The body of `r` read as YAML, after checking it is one: the content type and the document
/// start OpenSearch writes.
fn yaml(r: &Raw, what: &str) -> Value {
    assert_eq!(
        r.content_type, "application/yaml",
        "{what}: {} {}",
        r.status, r.text
    );
    assert!(r.text.starts_with("---\n"), "{what}: {}", r.text);
    serde_yaml_ng::from_str(&r.text)
        .unwrap_or_else(|e| panic!("{what}: not YAML ({e}): {}", r.text))
}

/// `method path` with an optional `Accept` and body (NDJSON for `_msearch`, else JSON).
async fn send(
    node: &TestNode,
    method: &str,
    path: &str,
    accept: Option<&str>,
    body: Option<String>,
) -> Raw {
    let mut headers = Vec::new();
    if let Some(a) = accept {
        headers.push(("accept", a));
    }
    if body.is_some() {
        let ty = if path.contains("_msearch") {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        headers.push(("content-type", ty));
    }
    send_raw(node, method, path, &headers, body.as_deref()).await
}

async fn logs(node: &TestNode) {
    let (s, b) = node.req("PUT", "/logs", Some(json!({}))).await;
    assert_eq!(s, 200, "{b}");
    node.bulk(
        "/logs/_bulk?refresh=true",
        &[
            json!({"index": {"_id": "1"}}),
            json!({"msg": "hello world", "n": 1}),
            json!({"index": {"_id": "2"}}),
            json!({"msg": "hello there", "n": 2}),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_answers_are_yaml_when_the_request_asks() {
    let node = TestNode::start().await;
    logs(&node).await;
    // A search, by the parameter and by the header: the same document as its JSON.
    let body = json!({"query": {"match": {"msg": "hello"}}, "sort": [{"n": "asc"}]}).to_string();
    let json = send(&node, "POST", "/logs/_search", None, Some(body.clone())).await;
    assert_eq!(json.status, 200, "{}", json.text);
    assert!(
        json.content_type.starts_with("application/json"),
        "{}",
        json.content_type
    );
    let as_json: Value = serde_json::from_str(&json.text).unwrap();
    for (path, accept) in [
        ("/logs/_search?format=yaml", None),
        ("/logs/_search", Some("application/yaml")),
        ("/logs/_search?format=yaml&pretty", None),
    ] {
        let r = send(&node, "POST", path, accept, Some(body.clone())).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        let v = yaml(&r, path);
        assert_eq!(v["hits"], as_json["hits"], "{path}: {}", r.text);
        assert!(r.text.contains("\n  hits:\n"), "{path}: {}", r.text);
    }
    // Workload management's own answers, and a cluster answer.
    for path in [
        "/_wlm/stats?format=yaml",
        "/_wlm/workload_group?format=yaml",
        "/_cluster/health?format=yaml",
    ] {
        let r = send(&node, "GET", path, None, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        let v = yaml(&r, path);
        assert!(v.is_object(), "{path}: {v}");
    }
    let r = send(&node, "GET", "/_cluster/health?format=yaml", None, None).await;
    let v = yaml(&r, "health");
    assert!(
        v["status"].is_string() && v["number_of_nodes"].is_u64(),
        "{v}"
    );
    // As OpenSearch's Jackson writer: keys plain, every string double-quoted.
    assert!(r.text.contains("\nstatus: \""), "{}", r.text);
    assert!(r.text.contains("\ntimed_out: false\n"), "{}", r.text);
    // `format` first: JSON asked by the parameter wins over the header, and a format that names
    // nothing known leaves JSON whatever the header says, as OpenSearch reads them.
    for path in ["/logs/_search?format=json", "/logs/_search?format=txt"] {
        let r = send(
            &node,
            "POST",
            path,
            Some("application/yaml"),
            Some(body.clone()),
        )
        .await;
        assert!(
            r.content_type.starts_with("application/json"),
            "{path}: {}",
            r.content_type
        );
        assert!(
            serde_json::from_str::<Value>(&r.text).is_ok(),
            "{path}: {}",
            r.text
        );
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_errors_and_cat_rows_are_yaml_when_the_request_asks() {
    let node = TestNode::start().await;
    logs(&node).await;
    // Errors: a missing index, an unknown parameter, a bad group definition.
    for (method, path, body, status, ty) in [
        (
            "GET",
            "/nope/_search?format=yaml",
            None,
            404,
            "index_not_found_exception",
        ),
        (
            "GET",
            "/logs/_search?sise=1&format=yaml",
            None,
            400,
            "illegal_argument_exception",
        ),
        (
            "PUT",
            "/_wlm/workload_group?format=yaml",
            Some(json!({"name": "g"}).to_string()),
            400,
            "illegal_argument_exception",
        ),
    ] {
        let r = send(&node, method, path, None, body).await;
        assert_eq!(r.status, status, "{path}: {}", r.text);
        let v = yaml(&r, path);
        assert_eq!(v["status"], status, "{path}: {v}");
        assert_eq!(v["error"]["type"], ty, "{path}: {v}");
    }
    // `_cat` rows as a YAML list, as for `format=json`.
    let r = send(&node, "GET", "/_cat/indices?format=yaml", None, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rows = yaml(&r, "_cat/indices");
    let names: Vec<&str> = rows
        .as_array()
        .unwrap_or_else(|| panic!("{rows}"))
        .iter()
        .filter_map(|row| row["index"].as_str())
        .collect();
    assert!(names.contains(&"logs"), "{rows}");
    let r = send(&node, "GET", "/_list/wlm_stats?format=yaml", None, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = yaml(&r, "_list/wlm_stats");
    assert!(v.is_object() || v.is_array(), "{v}");
    // Without `format`, a table stays text; or answers in the type `Accept` names, as
    // OpenSearch's `RestTable` reads the header for a missing `format`.
    let r = send(&node, "GET", "/_cat/indices", None, None).await;
    assert!(
        r.content_type.starts_with("text/plain"),
        "{}",
        r.content_type
    );
    let r = send(
        &node,
        "GET",
        "/_cat/indices",
        Some("application/yaml"),
        None,
    )
    .await;
    assert!(yaml(&r, "_cat/indices by Accept").is_array(), "{}", r.text);
    let r = send(
        &node,
        "GET",
        "/_cat/indices?v",
        Some("application/json"),
        None,
    )
    .await;
    assert!(
        r.content_type.starts_with("application/json"),
        "{}",
        r.content_type
    );
    let rows: Value = serde_json::from_str(&r.text).unwrap();
    assert!(rows.as_array().is_some_and(|a| !a.is_empty()), "{rows}");
    let r = send(
        &node,
        "GET",
        "/_list/wlm_stats",
        Some("application/yaml"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    yaml(&r, "_list/wlm_stats by Accept");
    // `format` wins over the header; a header naming no document type leaves the text table.
    let r = send(
        &node,
        "GET",
        "/_cat/indices?format=txt",
        Some("application/json"),
        None,
    )
    .await;
    assert!(
        r.content_type.starts_with("text/plain"),
        "{}",
        r.content_type
    );
    let r = send(&node, "GET", "/_cat/indices", Some("text/plain, */*"), None).await;
    assert!(
        r.content_type.starts_with("text/plain"),
        "{}",
        r.content_type
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_msearch_answers_are_yaml_when_the_request_asks() {
    // Through a gateway the items are merged by the gateway from the node's YAML answer.
    let node = TestNode::start().await;
    logs(&node).await;
    let body = ndjson(&[
        json!({"index": "logs"}),
        json!({"query": {"match": {"msg": "world"}}}),
        json!({"index": "nope"}),
        json!({"query": {"match_all": {}}}),
    ]);
    let r = send(
        &node,
        "POST",
        "/_msearch?format=yaml",
        None,
        Some(body.clone()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = yaml(&r, "_msearch");
    let items = v["responses"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(items.len(), 2, "{v}");
    assert_eq!(items[0]["hits"]["total"]["value"], 1, "{v}");
    assert_eq!(items[1]["status"], 404, "{v}");
    assert_eq!(
        items[1]["error"]["type"], "index_not_found_exception",
        "{v}"
    );
    let json = send(&node, "POST", "/_msearch", None, Some(body)).await;
    let as_json: Value = serde_json::from_str(&json.text).unwrap();
    assert_eq!(
        as_json["responses"][0]["hits"], items[0]["hits"],
        "{}",
        json.text
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_background_action_answers_yaml_when_the_request_asks() {
    let node = TestNode::start().await;
    logs(&node).await;
    let body = json!({"query": {"match": {"msg": "world"}}}).to_string();
    let r = send(
        &node,
        "POST",
        "/logs/_delete_by_query?refresh=true",
        Some("application/yaml"),
        Some(body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(yaml(&r, "_delete_by_query")["deleted"], 1, "{}", r.text);
    // In the background: through a gateway the action runs as an upstream task the gateway
    // follows, reading the upstream's answers about it as JSON whatever the client accepts.
    let body = json!({"query": {"match_all": {}}}).to_string();
    let r = send(
        &node,
        "POST",
        "/logs/_update_by_query?wait_for_completion=false",
        Some("application/yaml"),
        Some(body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = yaml(&r, "_update_by_query");
    let task = v["task"].as_str().unwrap_or_else(|| panic!("{v}"));
    let done = node.task_result(task).await;
    assert_eq!(done["response"]["updated"], 1, "{done}");
    node.stop().await;
}
