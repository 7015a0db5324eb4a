//! `_wlm/stats` and `_list/wlm_stats` over HTTP: every route, the response shapes of
//! OpenSearch (nodes envelope, groups keyed and sorted by id, DEFAULT always present), the
//! node and group filters, `breach`, the table with its pagination, and parameter errors.

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

async fn create_group(node: &TestNode, name: &str) -> String {
    node.create_group(json!({"name": name, "resiliency_mode": "enforced",
                             "resource_limits": {"cpu": 0.1}}))
        .await
}

fn node_id(body: &Value) -> String {
    body.as_object()
        .expect("object")
        .keys()
        .find(|k| *k != "_nodes" && *k != "cluster_name")
        .expect("a node entry")
        .clone()
}

async fn text(node: &TestNode, path: &str) -> (u16, String) {
    let resp = node.client.get(node.url(path)).send().await.expect("sent");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("text"))
}

#[tokio::test]
async fn test_stats_have_the_nodes_envelope_and_every_group_sorted_by_id() {
    let node = TestNode::start().await;
    let a = create_group(&node, "a").await;
    let b = create_group(&node, "b").await;
    let (s, body) = node.req("GET", "/_wlm/stats", None).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        body["_nodes"],
        json!({"total": 1, "successful": 1, "failed": 0})
    );
    assert!(body["cluster_name"].is_string());
    let nid = node_id(&body);
    let groups = body[&nid]["workload_groups"].as_object().expect("groups");
    let mut expected = vec![a.clone(), b.clone(), "DEFAULT_WORKLOAD_GROUP".to_string()];
    expected.sort();
    assert_eq!(groups.keys().cloned().collect::<Vec<_>>(), expected);
    let g = &groups[&a];
    for field in [
        "total_completions",
        "total_rejections",
        "total_cancellations",
        "failures",
        "total_throttled",
        "total_would_throttle",
        "total_queued",
        "total_queue_rejections",
        "queued_current",
        "queue_peak",
        "queue_wait_count",
        "total_queue_wait_millis",
        "max_queue_wait_millis",
        "total_would_queue",
    ] {
        assert_eq!(g[field], 0, "{field} in {g}");
    }
    for r in ["cpu", "memory"] {
        assert_eq!(g[r]["cancellations"], 0);
        assert_eq!(g[r]["rejections"], 0);
        assert!(g[r]["current_usage"].is_number(), "{g}");
    }
    // The first three keys are OpenSearch's, in its order.
    let keys: Vec<&String> = g.as_object().unwrap().keys().take(3).collect();
    assert_eq!(
        keys,
        [
            "total_completions",
            "total_rejections",
            "total_cancellations"
        ]
    );
}

#[tokio::test]
async fn test_node_and_group_filters() {
    let node = TestNode::start().await;
    let a = create_group(&node, "a").await;
    let _b = create_group(&node, "b").await;
    let (_, all) = node.req("GET", "/_wlm/stats", None).await;
    let nid = node_id(&all);

    for path in [
        format!("/_wlm/{nid}/stats"),
        "/_wlm/_local/stats".to_string(),
        "/_wlm/_all/stats".to_string(),
    ] {
        let (s, body) = node.req("GET", &path, None).await;
        assert_eq!(s, 200, "{path}: {body}");
        assert_eq!(body[&nid], all[&nid], "{path}");
    }
    let (s, body) = node.req("GET", "/_wlm/nobody/stats", None).await;
    assert_eq!(s, 200);
    assert_eq!(body["_nodes"]["total"], 0);
    assert!(body.get(&nid).is_none());

    let (s, body) = node.req("GET", &format!("/_wlm/stats/{a}"), None).await;
    assert_eq!(s, 200, "{body}");
    let groups = body[&nid]["workload_groups"].as_object().unwrap();
    assert_eq!(groups.keys().collect::<Vec<_>>(), [&a]);
    let (s, body) = node
        .req(
            "GET",
            &format!("/_wlm/{nid}/stats/{a},DEFAULT_WORKLOAD_GROUP"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body[&nid]["workload_groups"].as_object().unwrap().len(), 2);

    let (s, body) = node.req("GET", "/_wlm/stats/nope", None).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["_nodes"]["failed"], 1);
    let failure = &body["_nodes"]["failures"][0];
    assert_eq!(failure["caused_by"]["type"], "resource_not_found_exception");
    assert_eq!(
        failure["caused_by"]["reason"],
        "WorkloadGroup with id nope does not exist"
    );
}

#[tokio::test]
async fn test_breach_filters_and_bad_parameters_are_400s() {
    let node = TestNode::start().await;
    let a = create_group(&node, "a").await;
    let (_, body) = node.req("GET", "/_wlm/stats?breach=false", None).await;
    let nid = node_id(&body);
    assert!(body[&nid]["workload_groups"].get(&a).is_some(), "{body}");
    let (_, body) = node.req("GET", "/_wlm/stats?breach=true", None).await;
    assert_eq!(body[&nid]["workload_groups"], json!({}), "{body}");

    for (path, needle) in [
        ("/_wlm/stats?size=0", "Allowed range: 1 to 100"),
        ("/_wlm/stats?size=101", "Allowed range: 1 to 100"),
        (
            "/_list/wlm_stats?sort=name",
            "Allowed: 'node_id', 'workload_group'",
        ),
        ("/_list/wlm_stats?order=up", "Allowed: 'asc', 'desc'"),
        ("/_wlm/stats?breach=maybe", "breach"),
        (
            "/_list/wlm_stats?next_token=garbage!",
            "Invalid pagination token format",
        ),
    ] {
        let resp = node.req("GET", path, None).await;
        assert_error(&resp, 400, "illegal_argument_exception");
        let reason = resp.1["error"]["reason"].as_str().unwrap();
        assert!(reason.contains(needle), "{path}: {reason}");
    }
}

/// A parameter a route does not read is refused as OpenSearch refuses it, naming what it looks
/// like, on every route workload management owns; the parameters each reads still pass.
#[tokio::test]
async fn test_unknown_parameters_are_refused_with_what_they_look_like() {
    let node = TestNode::start().await;
    let a = create_group(&node, "a").await;
    for (method, path, reason) in [
        (
            "GET",
            "/_wlm/stats?incude=buckets",
            "request [/_wlm/stats] contains unrecognized parameter: [incude] -> did you mean [include]?",
        ),
        (
            "GET",
            "/_list/wlm_stats?v&sortt=node_id&zz=1",
            "request [/_list/wlm_stats] contains unrecognized parameters: [sortt] -> did you mean [sort]?, [zz]",
        ),
        (
            "GET",
            "/_wlm/workload_group/a?prety",
            "request [/_wlm/workload_group/a] contains unrecognized parameter: [prety] -> did you mean [pretty]?",
        ),
        (
            "DELETE",
            "/_wlm/workload_group/a?timout=1s",
            "request [/_wlm/workload_group/a] contains unrecognized parameter: [timout] -> did you mean [timeout]?",
        ),
        (
            "GET",
            "/_rules/workload_group?index_patern=logs",
            "request [/_rules/workload_group] contains unrecognized parameter: [index_patern] -> did you mean [index_pattern]?",
        ),
    ] {
        let resp = node.req(method, path, None).await;
        assert_error(&resp, 400, "illegal_argument_exception");
        assert_eq!(resp.1["error"]["reason"], reason, "{method} {path}");
    }
    // The group is still there (the refused delete did nothing), and what each route reads
    // passes.
    for path in [
        format!("/_wlm/stats/{a}?include=buckets&size=5&sort=node_id&order=asc&timeout=5s&pretty"),
        "/_list/wlm_stats?v&h=NODE_ID&s=NODE_ID&size=5&format=json".to_string(),
        "/_wlm/workload_group/a?filter_path=workload_groups.name&human".to_string(),
        "/_rules/workload_group?index_pattern=logs&principal.username=alice&search_after=x"
            .to_string(),
    ] {
        let (status, body) = node.req("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (status, body) = node
        .req(
            "DELETE",
            "/_wlm/workload_group/a?timeout=1s&cluster_manager_timeout=1s",
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn test_list_table_pages_with_tokens_and_ends_with_a_footer() {
    let node = TestNode::start().await;
    let mut ids = vec!["DEFAULT_WORKLOAD_GROUP".to_string()];
    for name in ["a", "b", "c"] {
        ids.push(create_group(&node, name).await);
    }
    ids.sort();

    let (s, t) = text(&node, "/_list/wlm_stats?v").await;
    assert_eq!(s, 200, "{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 1 + 4 + 1, "{t}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NODE_ID",
            "|",
            "WORKLOAD_GROUP_ID",
            "|",
            "TOTAL_COMPLETIONS",
            "|",
            "TOTAL_REJECTIONS",
            "|",
            "TOTAL_CANCELLATIONS",
            "|",
            "CPU_USAGE",
            "|",
            "MEMORY_USAGE",
            "|",
            "TOTAL_THROTTLED",
            "|",
            "TOTAL_WOULD_THROTTLE",
            "|",
            "TOTAL_QUEUED",
            "|",
            "TOTAL_QUEUE_REJECTIONS",
            "|",
            "QUEUED_CURRENT",
            "|",
            "QUEUE_PEAK",
            "|",
            "QUEUE_WAIT_COUNT",
            "|",
            "TOTAL_QUEUE_WAIT_MILLIS",
            "|",
            "MAX_QUEUE_WAIT_MILLIS",
            "|",
            "TOTAL_WOULD_QUEUE",
            "|",
            "TOTAL_SHARED_ACQUIRED",
            "|",
            "TOTAL_SHARED_REUSED",
            "|",
            "TOTAL_SHARED_PUSHED",
            "|",
            "TOTAL_SHARED_THROTTLED",
            "|",
            "TOTAL_SHARED_FAIL_OPEN",
            "|",
            "TOTAL_SHARED_PUSHES_RECEIVED",
            "|",
            "TOTAL_SHARED_PUSHES_SENT",
            "|",
            "SHARED_LEASES_OWNED"
        ]
    );
    let groups: Vec<&str> = lines[1..5]
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(groups, ids.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(lines[5].starts_with("No more pages available"), "{t}");
    // A group without a memory limit shows NA for it.
    assert!(lines[1..5].iter().any(|l| l.contains("NA")), "{t}");

    // Pages of two, descending by group.
    let (s, t) = text(
        &node,
        "/_list/wlm_stats?size=2&sort=workload_group&order=desc",
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let token = t
        .lines()
        .find_map(|l| l.strip_prefix("next_token "))
        .expect("a next_token line")
        .to_string();
    let first: Vec<String> = t
        .lines()
        .filter(|l| !l.starts_with("next_token"))
        .map(|l| l.split_whitespace().nth(2).unwrap().to_string())
        .collect();
    assert_eq!(first, [ids[3].clone(), ids[2].clone()]);
    let (s, t) = text(
        &node,
        &format!("/_list/wlm_stats?size=2&sort=workload_group&order=desc&next_token={token}"),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    assert!(t.contains(&ids[1]) && t.contains(&ids[0]), "{t}");
    assert!(t.contains("No more pages available"), "{t}");

    // The row the token points after is gone: OpenSearch's pagination error. The page ends
    // at the first group that is not DEFAULT (which cannot be deleted).
    let k = ids
        .iter()
        .position(|id| id != "DEFAULT_WORKLOAD_GROUP")
        .unwrap();
    let (s, t) = text(&node, &format!("/_list/wlm_stats?size={}", k + 1)).await;
    assert_eq!(s, 200);
    let token = t
        .lines()
        .find_map(|l| l.strip_prefix("next_token "))
        .expect("next_token")
        .to_string();
    let (_, all) = node.req("GET", "/_wlm/workload_group", None).await;
    let name = all["workload_groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["_id"] == json!(ids[k]))
        .unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, _) = node
        .req("DELETE", &format!("/_wlm/workload_group/{name}"), None)
        .await;
    assert_eq!(s, 200);
    let (s, body) = node
        .req(
            "GET",
            &format!("/_list/wlm_stats?size={}&next_token={token}", k + 1),
            None,
        )
        .await;
    assert_eq!(s, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("Pagination state has changed"),
        "{body}"
    );

    // format=json
    let (s, body) = node
        .req("GET", "/_list/wlm_stats?format=json&size=100", None)
        .await;
    assert_eq!(s, 200, "{body}");
    assert!(body["next_token"].is_null());
    let rows = body["wlm_stats"].as_array().expect("rows");
    assert!(rows[0]["workload_group_id"].is_string(), "{body}");
}

#[tokio::test]
async fn test_list_table_takes_the_cat_parameters_h_help_and_format() {
    let node = TestNode::start().await;
    let a = create_group(&node, "a").await;
    let mut ids = vec!["DEFAULT_WORKLOAD_GROUP".to_string(), a.clone()];
    ids.sort();

    // h= picks columns by name or lower-case alias, in the order asked, unknown ones skipped;
    // the text keeps a `|` cell between two columns and a footer as wide as the rows.
    let (s, t) = text(
        &node,
        "/_list/wlm_stats?v&h=workload_group_id,TOTAL_THROTTLED,bogus,cpu_usage",
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 1 + 2 + 1, "{t}");
    assert_eq!(
        lines[0],
        [
            "WORKLOAD_GROUP_ID",
            "|",
            "TOTAL_THROTTLED",
            "|",
            "CPU_USAGE"
        ],
        "{t}"
    );
    for (line, id) in lines[1..3].iter().zip(&ids) {
        assert_eq!(line.len(), 5, "{t}");
        assert_eq!(line[0], id, "{t}");
        assert_eq!([line[1], line[2], line[3]], ["|", "0", "|"], "{t}");
    }
    // The footer: OpenSearch's first cell (four words here) and a `-` for every other cell.
    assert_eq!(
        lines[3],
        ["No", "more", "pages", "available", "-", "-", "-", "-"],
        "{t}"
    );

    // Wildcards, over names and aliases.
    let (s, t) = text(&node, "/_list/wlm_stats?v&h=node_id,total_shared_*").await;
    assert_eq!(s, 200, "{t}");
    let header: Vec<&str> = t.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NODE_ID",
            "|",
            "TOTAL_SHARED_ACQUIRED",
            "|",
            "TOTAL_SHARED_REUSED",
            "|",
            "TOTAL_SHARED_PUSHED",
            "|",
            "TOTAL_SHARED_THROTTLED",
            "|",
            "TOTAL_SHARED_FAIL_OPEN",
            "|",
            "TOTAL_SHARED_PUSHES_RECEIVED",
            "|",
            "TOTAL_SHARED_PUSHES_SENT"
        ],
        "{t}"
    );

    // format=json: OpenSearch's paginated shape, rows keyed by the shown columns in lower case.
    let (s, body) = node
        .req(
            "GET",
            "/_list/wlm_stats?format=json&h=WORKLOAD_GROUP_ID,total_completions",
            None,
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        body,
        json!({"next_token": null, "wlm_stats": [
            {"workload_group_id": ids[0], "total_completions": "0"},
            {"workload_group_id": ids[1], "total_completions": "0"},
        ]})
    );
    // Without h=, every column, as before.
    let (_, body) = node.req("GET", "/_list/wlm_stats?format=json", None).await;
    assert_eq!(
        body["wlm_stats"][0].as_object().map(|o| o.len()),
        Some(25),
        "{body}"
    );
    // A format the table does not know is answered as text, as the _cat APIs answer it.
    let (s, t) = text(&node, "/_list/wlm_stats?format=txt&h=workload_group_id").await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        t.lines().next().map(str::trim),
        Some(ids[0].as_str()),
        "{t}"
    );
    // format=yaml: the rows of format=json, rendered as YAML.
    let (s, t) = text(&node, "/_list/wlm_stats?format=yaml&h=workload_group_id").await;
    assert_eq!(s, 200, "{t}");
    let rows: serde_json::Value = serde_yaml_ng::from_str(&t).expect("YAML");
    assert_eq!(
        rows["wlm_stats"][0]["workload_group_id"],
        ids[0].as_str(),
        "{t}"
    );

    // help: the columns with their aliases and what they show, as a _cat API's.
    let (s, t) = text(&node, "/_list/wlm_stats?help").await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t.lines().count(), 25, "{t}");
    let throttled = t
        .lines()
        .find(|l| l.starts_with("TOTAL_SHARED_THROTTLED "))
        .unwrap_or_else(|| panic!("{t}"));
    let cells: Vec<&str> = throttled.split('|').map(str::trim).collect();
    assert_eq!(cells[1], "total_shared_throttled", "{t}");
    assert!(cells[2].contains("shared tier refused"), "{t}");
}
