//! Cluster-wide answers gathered over RPC: `_wlm/stats`, `_list/wlm_stats`, `_nodes/stats` and
//! `_tasks`, with a member that died or hangs reported as a failure within the timeout — never
//! a hang.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestCluster, heavy_query};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_stats_gather_every_node_and_name_a_hung_or_dead_one() {
    let mut c = TestCluster::start(3, "stats").await;
    let (status, stats) = c.get(0, "/_wlm/stats").await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["_nodes"]["total"], 3, "{stats}");
    assert_eq!(stats["_nodes"]["successful"], 3, "{stats}");
    let node_entries: Vec<&Value> = stats
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !k.starts_with('_') && *k != "cluster_name")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(node_entries.len(), 3, "{stats}");
    assert!(
        node_entries
            .iter()
            .all(|e| e["workload_groups"]["DEFAULT_WORKLOAD_GROUP"].is_object())
    );
    // The table has one DEFAULT row per node; a node selector narrows it.
    let (_, table) = c.get(1, "/_list/wlm_stats?format=json").await;
    assert_eq!(table["wlm_stats"].as_array().unwrap().len(), 3, "{table}");
    let (_, one) = c.get(1, "/_wlm/node-2/stats").await;
    assert_eq!(one["_nodes"]["total"], 1, "{one}");
    // `_nodes/stats` gathers every member's entry too, and a selector narrows it.
    let (status, ns) = c.get(1, "/_nodes/stats/process").await;
    assert_eq!(status, 200, "{ns}");
    assert_eq!(ns["_nodes"]["successful"], 3, "{ns}");
    let entries = ns["nodes"].as_object().unwrap();
    assert_eq!(entries.len(), 3, "{ns}");
    assert!(entries.values().all(|e| e["process"].is_object()), "{ns}");
    // Each entry names its node's bound transport address, as `_nodes` does.
    let (_, info) = c.get(1, "/_nodes").await;
    for (id, e) in entries {
        let bound = &info["nodes"][id]["transport_address"];
        assert!(bound.as_str().is_some_and(|a| !a.ends_with(":0")), "{info}");
        assert_eq!(&e["transport_address"], bound, "{ns}");
        assert_eq!(&e["ip"], bound, "{ns}");
    }
    let (_, ns) = c.get(1, "/_nodes/node-2/stats").await;
    let entries = ns["nodes"].as_object().unwrap();
    assert_eq!(entries.len(), 1, "{ns}");
    assert_eq!(entries.values().next().unwrap()["name"], "node-2", "{ns}");
    // A timeout of any length is a wait, never a handler's panic: tonic writes a call's
    // deadline into a header that holds at most 99,999,999 hours (an outside trial's
    // `timeout=10000000d` answered 500 on every fan-out route).
    for path in [
        "/_wlm/stats?timeout=10000000d",
        "/_nodes/stats?timeout=99999999999999d",
        "/_tasks?timeout=10000000d",
    ] {
        let (status, body) = c.get(0, path).await;
        assert_eq!(status, 200, "{path}: {body}");
        // `_tasks` names failures only when there are some.
        let failed = body["_nodes"]["failed"].as_u64().unwrap_or(0)
            + body["node_failures"]
                .as_array()
                .map_or(0, |f| f.len() as u64);
        assert_eq!(failed, 0, "{path}: {body}");
    }
    // An unknown group is each node's failure, as OpenSearch reports it.
    let (_, missing) = c.get(0, "/_wlm/stats/nope").await;
    assert_eq!(missing["_nodes"]["failed"], 3, "{missing}");

    // A hung node (stopped, not dead yet) is a failure once the timeout passes.
    c.node(2).signal("STOP");
    let (status, hung) = c.get(0, "/_wlm/stats?timeout=1s").await;
    let (_, hung_nodes) = c.get(0, "/_nodes/stats?timeout=1s").await;
    c.node(2).signal("CONT");
    assert_eq!(hung_nodes["_nodes"]["failed"], 1, "{hung_nodes}");
    assert_eq!(
        hung_nodes["nodes"].as_object().unwrap().len(),
        2,
        "{hung_nodes}"
    );
    assert_eq!(status, 200, "{hung}");
    assert_eq!(hung["_nodes"]["successful"], 2, "{hung}");
    assert_eq!(hung["_nodes"]["failed"], 1, "{hung}");
    let failure = &hung["_nodes"]["failures"][0];
    assert_eq!(failure["type"], "failed_node_exception", "{hung}");
    assert_eq!(
        failure["caused_by"]["type"], "receive_timeout_transport_exception",
        "{hung}"
    );

    // A node killed with a call on its connection: the failure says the connection broke
    // and names the node, not that it did not answer within the timeout (tonic reports a
    // reset under several codes; one of them used to read as the deadline). Node 2 is
    // stopped so the call stays on the connection; the listing on node 0 is a task while it
    // waits, which shows the call is out before the kill.
    c.node(2).signal("STOP");
    let stalled = {
        let rb = c
            .client
            .get(format!("http://{}/_tasks?timeout=1m", c.node(0).http))
            .header("X-Opaque-Id", "stalled-listing");
        tokio::spawn(async move {
            let resp = rb.send().await.expect("sent");
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.expect("json"),
            )
        })
    };
    c.eventually(
        Duration::from_secs(30),
        "the listing waits for node 2",
        || async {
            let (_, tasks) = c.get(0, "/_tasks?nodes=node-0&group_by=none").await;
            tasks["tasks"]
                .as_array()?
                .iter()
                .any(|t| t["headers"]["X-Opaque-Id"] == "stalled-listing")
                .then_some(())
        },
    )
    .await;
    let (_, node2) = c.get(0, "/_nodes/node-2").await;
    let node2_id = node2["nodes"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    c.kill9(2).await;
    let (status, listed) = tokio::time::timeout(Duration::from_secs(30), stalled)
        .await
        .expect("the listing ends when node 2 dies, not at its timeout")
        .expect("listing task");
    assert_eq!(status, 200, "{listed}");
    let failure = &listed["node_failures"][0];
    assert_eq!(failure["node_id"], node2_id.as_str(), "{listed}");
    let cause = &failure["caused_by"];
    assert_eq!(cause["type"], "node_disconnected_exception", "{listed}");
    let reason = cause["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("the connection to node [{node2_id}]"))
            && reason.contains("broke during the call"),
        "{listed}"
    );

    // A killed node, before the failure detector drops it, is a failure at once, and its
    // failure says why (refused or broken), never a timeout.
    let (status, dead) = c.get(0, "/_wlm/stats").await;
    assert_eq!(status, 200, "{dead}");
    let nodes = &dead["_nodes"];
    let listed = nodes["total"].as_u64().unwrap();
    assert_eq!(nodes["successful"], 2, "{dead}");
    assert_eq!(nodes["failed"].as_u64().unwrap(), listed - 2, "{dead}");
    for f in nodes["failures"].as_array().into_iter().flatten() {
        let reason = f["caused_by"]["reason"].as_str().unwrap();
        assert!(reason.contains(f["node_id"].as_str().unwrap()), "{dead}");
        assert!(!reason.contains("did not answer"), "{dead}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_tasks_are_listed_fetched_and_cancelled_from_any_node() {
    let c = TestCluster::start_heavy(3, "tasks").await;
    let search = c.start_search(1, "/heavy/_search", heavy_query(), &[]);
    let (_, local) = c.get(1, "/_nodes/_local").await;
    let node1 = local["nodes"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();

    // Node 0 lists node 1's running search.
    let task_id: String = c
        .eventually(
            Duration::from_secs(30),
            "node 1's search listed on node 0",
            || async {
                let (_, tasks) = c.get(0, "/_tasks?actions=*search*&detailed").await;
                let entry = tasks["nodes"].get(&node1)?;
                assert_eq!(entry["name"], "node-1", "{tasks}");
                let (id, _) = entry["tasks"].as_object()?.iter().next()?;
                Some(id.clone())
            },
        )
        .await;
    assert!(task_id.starts_with(&format!("{node1}:")), "{task_id}");
    // A selector that leaves node 1 out does not list it.
    let (_, others) = c
        .get(0, "/_tasks?actions=*search*&nodes=node-0,node-2")
        .await;
    assert!(others["nodes"].get(&node1).is_none(), "{others}");
    // Fetched through node 2, from node 1.
    let (status, one) = c.get(2, &format!("/_tasks/{task_id}")).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["task"]["node"], node1.as_str(), "{one}");
    assert!(
        one["task"]["action"].as_str().unwrap().contains("search"),
        "{one}"
    );

    // Waited for through node 2: the wait happens on node 1, up to `timeout`, whichever node
    // is asked (a wait that runs out is OpenSearch's `timeout_exception`).
    let waiting = {
        let (client, url) = (
            c.client.clone(),
            format!(
                "http://{}/_tasks/{task_id}?wait_for_completion=true&timeout=1m",
                c.node(2).http
            ),
        );
        tokio::spawn(async move {
            let resp = client.get(url).send().await.expect("sent");
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.expect("json"),
            )
        })
    };
    let (status, ran_out) = c
        .get(
            2,
            &format!("/_tasks/{task_id}?wait_for_completion=true&timeout=1s"),
        )
        .await;
    assert_eq!(status, 500, "{ran_out}");
    assert_eq!(ran_out["error"]["type"], "timeout_exception", "{ran_out}");

    // Cancelled through node 0: the search on node 1 ends cancelled.
    let (status, cancel) = c
        .req(0, "POST", &format!("/_tasks/{task_id}/_cancel"), None)
        .await;
    assert_eq!(status, 200, "{cancel}");
    assert!(
        cancel["nodes"][&node1]["tasks"][&task_id].is_object(),
        "{cancel}"
    );
    let (status, body) = tokio::time::timeout(Duration::from_secs(60), search)
        .await
        .expect("the cancelled search ends")
        .expect("search task");
    assert_eq!(status, 500, "{body}");
    assert!(
        body.to_string().contains("task_cancelled_exception"),
        "{body}"
    );
    // The wait ends with the task's end: a search keeps no result, so the answer is the task
    // as it was when the wait began, completed (OpenSearch's answer), not a 404.
    let (status, waited) = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the wait ends with the task")
        .expect("waiting task");
    assert_eq!(status, 200, "{waited}");
    assert_eq!(waited["completed"], true, "{waited}");
    assert_eq!(waited["task"]["node"], node1.as_str(), "{waited}");
    assert!(
        waited["task"]["action"]
            .as_str()
            .unwrap()
            .contains("search"),
        "{waited}"
    );
    c.eventually(Duration::from_secs(10), "the task is gone", || async {
        let (s, _) = c.get(0, &format!("/_tasks/{task_id}")).await;
        (s == 404).then_some(())
    })
    .await;
    // A task of a node that is not a member is missing, as a finished one is.
    let (status, err) = c.get(0, "/_tasks/nosuchnode:1").await;
    assert_eq!(status, 404, "{err}");
    assert_eq!(
        err["error"]["type"], "resource_not_found_exception",
        "{err}"
    );
}
