//! `_delete_by_query` and `_update_by_query` over HTTP: what they change, their response,
//! version conflicts (`conflicts=abort|proceed`), `max_docs`, aliases, their task and their
//! refusals; with `wait_for_completion=false`, the task id answered at once, the running
//! status and the stored result of `GET _tasks/{id}`, queueing in the caller's workload group
//! and cancellation. No sleeps: every wait polls with a bound.

use crate::common::{TestNode, assert_error};
use crate::throttling::{ADMIN, cancel_all, create_group, node_in_mode, start_heavy, wait_running};
use serde_json::{Value, json};

async fn ten_docs(node: &TestNode) {
    let lines: Vec<Value> = (0..10)
        .flat_map(|i| {
            [
                json!({"index": {"_index": "q", "_id": i.to_string()}}),
                json!({"n": i, "even": i % 2 == 0}),
            ]
        })
        .collect();
    node.bulk("/_bulk?refresh=true", &lines).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_delete_by_query_deletes_the_matching_documents() {
    let node = TestNode::start().await;
    ten_docs(&node).await;
    let (s, b) = node
        .req(
            "POST",
            "/q/_delete_by_query?refresh=true&scroll_size=2",
            Some(json!({"query": {"term": {"even": true}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["deleted"], 5);
    assert_eq!(b["total"], 5);
    assert_eq!(b["batches"], 3);
    assert_eq!(b["version_conflicts"], 0);
    assert_eq!(b["failures"], json!([]));
    assert_eq!(node.count("q", None).await, 5);
    let (s, b) = node
        .req("POST", "/q/_delete_by_query?max_docs=2", Some(json!({})))
        .await;
    assert_eq!((s, &b["deleted"]), (200, &json!(2)), "{b}");
    node.refresh("q").await;
    assert_eq!(node.count("q", None).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_update_by_query_writes_documents_again() {
    let node = TestNode::start().await;
    ten_docs(&node).await;
    node.req(
        "POST",
        "/_aliases",
        Some(json!({"actions": [{"add": {"index": "q", "alias": "qa"}}]})),
    )
    .await;
    let (s, b) = node
        .req(
            "POST",
            "/qa/_update_by_query",
            Some(json!({"query": {"range": {"n": {"lt": 3}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["updated"], 3);
    let (_, doc) = node.req("GET", "/q/_doc/0", None).await;
    assert_eq!(doc["_version"], 2);
    assert_eq!(doc["_source"], json!({"n": 0, "even": true}));
    let script = node
        .req(
            "POST",
            "/q/_update_by_query",
            Some(json!({"script": {"source": "ctx._source.n++"}})),
        )
        .await;
    assert_error(&script, 400, "illegal_argument_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_refusals_and_the_task_it_runs_as() {
    let node = TestNode::start().await;
    ten_docs(&node).await;
    for (path, why) in [
        (
            "/q/_delete_by_query?conflicts=maybe",
            "conflicts may only be",
        ),
        (
            "/q/_delete_by_query?wait_for_completion=maybe",
            "Failed to parse value [maybe]",
        ),
        (
            "/q/_delete_by_query?requests_per_second=10",
            "requests_per_second=10",
        ),
        ("/q/_delete_by_query?slices=4", "slices=4"),
    ] {
        let resp = node.req("POST", path, Some(json!({}))).await;
        assert_error(&resp, 400, "illegal_argument_exception");
        assert!(
            resp.1["error"]["reason"].as_str().unwrap().contains(why),
            "{path}: {}",
            resp.1
        );
    }
    // In the background too: a request refused for what it says is refused at once, not a
    // task whose result is the refusal (through a gateway: the upstream's refusal, forwarded
    // before the task id is answered).
    for path in [
        "/q/_delete_by_query?wait_for_completion=false&conflicts=maybe",
        "/q/_update_by_query?wait_for_completion=false&slices=4",
    ] {
        let resp = node.req("POST", path, Some(json!({}))).await;
        assert_error(&resp, 400, "illegal_argument_exception");
    }
    // A query that cannot be read too, as OpenSearch parses the body when the request
    // arrives (a missing index is the task's to report, as there).
    let unreadable = node
        .req(
            "POST",
            "/q/_delete_by_query?wait_for_completion=false",
            Some(json!({"query": {"no_such_query": {}}})),
        )
        .await;
    assert_error(&unreadable, 400, "parsing_exception");
    let (_, listed) = node.req("GET", "/_tasks?actions=*byquery", None).await;
    assert_eq!(listed["nodes"], json!({}), "{listed}");
    let missing = node
        .req("POST", "/nope/_delete_by_query", Some(json!({})))
        .await;
    assert_error(&missing, 404, "index_not_found_exception");
    // Its group is on the task (tagging works like a search): the header picks one.
    let (s, g) = node
        .req(
            "PUT",
            "/_wlm/workload_group",
            Some(json!({"name": "bq", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.2}})),
        )
        .await;
    assert_eq!(s, 200, "{g}");
    let id = g["_id"].as_str().unwrap();
    let r = node
        .req_with(
            "POST",
            "/q/_delete_by_query",
            Some(json!({"query": {"term": {"n": 1}}})),
            &[("workloadGroupId", id)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (_, stats) = node.req("GET", "/_wlm/stats", None).await;
    let (_, n) = stats
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| *k != "_nodes" && *k != "cluster_name")
        .unwrap();
    assert_eq!(n["workload_groups"][id]["total_completions"], 1, "{stats}");
}

/// Polls `GET _tasks/{id}` (as `headers`) until `done` holds for its answer; panics with the
/// last answer when it never does.
async fn poll_task(
    node: &TestNode,
    id: &str,
    headers: &[(&str, &str)],
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..20_000 {
        let r = node
            .req_with("GET", &format!("/_tasks/{id}"), None, headers)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        if done(&r.body) {
            return r.body;
        }
        last = r.body;
        tokio::task::yield_now().await;
    }
    panic!("task {id} never reached the awaited state: {last}");
}

/// Starts a by-query action in the background; answers its task id.
async fn start_background(
    node: &TestNode,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> String {
    let r = node.req_with("POST", path, Some(body), headers).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let obj = r.body.as_object().expect("object");
    assert_eq!(obj.len(), 1, "only the task: {}", r.body);
    let id = r.body["task"].as_str().expect("task id").to_string();
    let (node_id, seq) = id.rsplit_once(':').expect("node:seq");
    assert!(!node_id.is_empty() && seq.parse::<u64>().is_ok(), "{id}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_wait_for_completion_false_answers_a_task_and_stores_its_result() {
    let node = TestNode::start().await;
    ten_docs(&node).await;
    let id = start_background(
        &node,
        "/q/_delete_by_query?wait_for_completion=false&refresh=true",
        json!({"query": {"term": {"even": true}}}),
        &[],
    )
    .await;
    let (s, done) = node
        .req(
            "GET",
            &format!("/_tasks/{id}?wait_for_completion=true&timeout=1m"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["completed"], true, "{done}");
    assert_eq!(done["response"]["deleted"], 5, "{done}");
    assert_eq!(done["response"]["total"], 5, "{done}");
    assert_eq!(done["response"]["failures"], json!([]), "{done}");
    assert!(done.get("error").is_none(), "{done}");
    let task = &done["task"];
    assert_eq!(
        task["action"], "indices:data/write/delete/byquery",
        "{done}"
    );
    assert_eq!(task["description"], "delete-by-query [q]", "{done}");
    assert_eq!(task["status"]["deleted"], 5, "{done}");
    assert_eq!(task["status"]["total"], 5, "{done}");
    assert_eq!(
        format!("{}:{}", task["node"].as_str().unwrap(), task["id"]),
        id
    );
    // The work was done, and refreshed before the result was stored.
    assert_eq!(node.count("q", None).await, 5);
    // The result stays readable; the task is no longer listed as running.
    let (s, again) = node.req("GET", &format!("/_tasks/{id}"), None).await;
    assert_eq!((s, &again), (200, &done));
    let (_, listed) = node.req("GET", "/_tasks?actions=*byquery", None).await;
    assert_eq!(listed["nodes"], json!({}), "{listed}");
    // An update in the background: its result names what it updated.
    let id = start_background(
        &node,
        "/q/_update_by_query?wait_for_completion=false",
        json!({}),
        &[],
    )
    .await;
    let done = node.task_result(&id).await;
    assert_eq!(done["response"]["updated"], 5, "{done}");
    assert_eq!(done["task"]["status"]["updated"], 5, "{done}");
    // A task id that never ran, and a bad timeout, are refused as OpenSearch refuses them.
    let node_id = id.rsplit_once(':').unwrap().0;
    let missing = node
        .req("GET", &format!("/_tasks/{node_id}:999999"), None)
        .await;
    assert_error(&missing, 404, "resource_not_found_exception");
    let bad = node
        .req(
            "GET",
            &format!("/_tasks/{id}?wait_for_completion=true&timeout=soon"),
            None,
        )
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_running_action_shows_its_counts_and_stops_when_cancelled() {
    let node = TestNode::start_heavy(&[]).await;
    let docs = crate::common::HEAVY_DOCS as u64;
    // Small batches: thousands of them, each a bulk write, so the action runs long enough
    // to be seen at work.
    let id = start_background(
        &node,
        "/heavy/_delete_by_query?wait_for_completion=false&scroll_size=10",
        json!({"query": {"match_all": {}}}),
        &[],
    )
    .await;
    let running = poll_task(&node, &id, &[], |b| {
        assert_eq!(
            b["completed"], false,
            "finished before it was seen at work: {b}"
        );
        b["task"]["status"]["deleted"].as_u64().unwrap_or(0) > 0
    })
    .await;
    let status = &running["task"]["status"];
    assert_eq!(status["total"], docs, "{running}");
    assert!(status["batches"].as_u64().unwrap() >= 1, "{running}");
    assert_eq!(running["task"]["cancellable"], true);
    let seen = status["deleted"].as_u64().unwrap();
    let (s, c) = node
        .req("POST", &format!("/_tasks/{id}/_cancel"), None)
        .await;
    assert_eq!(s, 200, "{c}");
    let done = node.task_result(&id).await;
    let resp = &done["response"];
    assert_eq!(resp["canceled"], "by user request", "{done}");
    let deleted = resp["deleted"].as_u64().unwrap();
    assert!(deleted >= seen && deleted < docs, "{done}");
    assert_eq!(done["task"]["cancelled"], true, "{done}");
    // What it deleted is gone, the rest stays.
    node.refresh("heavy").await;
    assert_eq!(node.count("heavy", None).await, docs - deleted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_background_action_waits_in_its_groups_queue_and_can_be_cancelled_there() {
    let node = node_in_mode("enabled", &[]).await;
    let group = create_group(
        &node,
        json!({"name": "bq", "resiliency_mode": "soft", "resource_limits": {"memory": 0.1},
               "throttling": {"attribute": "group", "node_limit": 1},
               "queue": {"size_per_bucket": 4}}),
    )
    .await;
    let mut tagged: Vec<(&str, &str)> = ADMIN.to_vec();
    tagged.push(("workloadGroupId", &group));
    // The group's one slot is held by a heavy search.
    let heavy = start_heavy(&node, &tagged);
    wait_running(&node, &group, 1).await;
    let queued = |b: &Value| b["task"]["status"]["state"] == "queued";
    // 1. Parked in the group's queue, listed as queued in the caller's group; cancelled there.
    let first = start_background(
        &node,
        "/small/_delete_by_query?wait_for_completion=false",
        json!({}),
        &tagged,
    )
    .await;
    let parked = poll_task(&node, &first, &ADMIN, queued).await;
    assert_eq!(parked["completed"], false);
    assert_eq!(
        parked["task"]["workload_group"]["id"],
        json!(group),
        "{parked}"
    );
    assert_eq!(parked["task"]["status"]["deleted"], 0, "{parked}");
    let c = node
        .req_with("POST", &format!("/_tasks/{first}/_cancel"), None, &ADMIN)
        .await;
    assert_eq!(c.status, 200, "{}", c.body);
    let done = node
        .req_with(
            "GET",
            &format!("/_tasks/{first}?wait_for_completion=true"),
            None,
            &ADMIN,
        )
        .await;
    assert_eq!(done.body["completed"], true, "{}", done.body);
    assert!(done.body.get("response").is_none(), "{}", done.body);
    let reason = done.body["error"].to_string();
    assert!(reason.contains("by user request"), "{}", done.body);
    // 2. Parked again; runs once the slot frees.
    let second = start_background(
        &node,
        "/small/_delete_by_query?wait_for_completion=false&refresh=true",
        json!({}),
        &tagged,
    )
    .await;
    poll_task(&node, &second, &ADMIN, queued).await;
    cancel_all(&node, vec![heavy]).await;
    let done = node
        .req_with(
            "GET",
            &format!("/_tasks/{second}?wait_for_completion=true"),
            None,
            &ADMIN,
        )
        .await;
    assert_eq!(done.body["response"]["deleted"], 1, "{}", done.body);
    assert_eq!(node.count("small", None).await, 0);
}

/// `refresh=true` refreshes what the action changed: the indices it resolved with the request's
/// `expand_wildcards`, a hidden one included (an outside trial's count still saw the deleted
/// document). The hidden index refreshes on no timer here, so only the request's refresh can
/// make the delete visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_refresh_covers_the_hidden_indices_the_action_reached() {
    let node = TestNode::start().await;
    let settings = json!({"settings": {"index.hidden": true, "index.refresh_interval": "-1"}});
    let (s, b) = node.req("PUT", "/hid-1", Some(settings)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req("PUT", "/hid-1/_doc/1?refresh=true", Some(json!({"n": 1})))
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = node
        .req(
            "POST",
            "/hid-*/_delete_by_query?expand_wildcards=all&refresh=true",
            Some(json!({"query": {"match_all": {}}})),
        )
        .await;
    assert_eq!((s, &b["deleted"]), (200, &json!(1)), "{b}");
    let (s, b) = node.req("GET", "/hid-1/_count", None).await;
    assert_eq!((s, &b["count"]), (200, &json!(0)), "{b}");
    node.stop().await;
}
