//! Scrolls across a cluster of gateways: a scroll opened through one gateway and continued or
//! cleared through another (a round-robin balancer, a sniffing client) stays in its workload
//! group and stays its opener's (`backend/upstream/scroll_peers.rs`).

use std::time::Duration;

use serde_json::{Value, json};
use sluice_server::auth::add_user;

use crate::harness::{GatewayOptions, TestCluster, heavy_query};
use crate::shared_tier::{enable, end_searches, everywhere, group};

/// Opens a scroll of one document of the heavy index on gateway `i` with `headers` (as the
/// harness's user); its id.
async fn open_scroll(c: &TestCluster, i: usize, headers: &[(&str, &str)]) -> String {
    let body = json!({"size": 1, "sort": ["_doc"]});
    let (s, b) = c
        .req_with(i, "POST", "/heavy/_search?scroll=1m", Some(body), headers)
        .await;
    assert_eq!(s, 200, "{b}");
    b["_scroll_id"].as_str().expect("a scroll id").to_string()
}

fn next_page(id: &str) -> Option<Value> {
    Some(json!({"scroll": "1m", "scroll_id": id}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_scroll_continued_through_another_gateway_is_throttled_in_its_group() {
    let c = TestCluster::start_gateways(2, "scroll_group", GatewayOptions::default()).await;
    enable(&c).await;
    let id = group(
        &c,
        json!({"name": "reports", "resiliency_mode": "enforced",
            "resource_limits": {"memory": 0.5},
            "throttling": {"attribute": "group", "node_limit": 1}}),
    )
    .await;
    everywhere(&c, 2, &id).await;
    let header = [("workloadGroupId", id.as_str())];
    let scroll = open_scroll(&c, 0, &header).await;
    // A heavy search of the group holds gateway 1's only slot of it.
    let heavy = c.start_search(1, "/heavy/_search", heavy_query(), &header);
    c.eventually(
        Duration::from_secs(30),
        "the heavy search holds its slot on gateway 1",
        || async {
            let (_, t) = c
                .get(1, "/_tasks?actions=*search*&nodes=_local&detailed")
                .await;
            let tasks = t["nodes"].as_object()?.values().next()?["tasks"].clone();
            // Neither queued nor still being admitted.
            let holding = tasks
                .as_object()?
                .values()
                .filter(|x| x["status"]["state"].is_null())
                .count();
            (holding == 1).then_some(())
        },
    )
    .await;
    // The continuation, sent to gateway 1 without a header, runs in the scroll's group there:
    // turned away as the group's next search would be (it ran in DEFAULT, before).
    let (s, b) = c
        .req(1, "POST", "/_search/scroll", next_page(&scroll))
        .await;
    assert_eq!(s, 429, "{b}");
    assert_eq!(b["error"]["type"], "rejected_execution_exception", "{b}");
    let g = c.local_group_stats(1, &id).await;
    assert_eq!(g["total_throttled"], 1, "{g}");
    end_searches(&c, 1, heavy).await;
    // With the slot free it runs, counted in the group on gateway 1, not in DEFAULT.
    let before = c.local_group_stats(1, &id).await["total_completions"]
        .as_u64()
        .unwrap();
    let (s, b) = c
        .req(1, "POST", "/_search/scroll", next_page(&scroll))
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["hits"]["hits"].as_array().map(Vec::len), Some(1), "{b}");
    let g = c.local_group_stats(1, &id).await;
    assert_eq!(g["total_completions"], before + 1, "{g}");
    let d = c.local_group_stats(1, "DEFAULT_WORKLOAD_GROUP").await;
    assert_eq!(d["total_completions"], 0, "{d}");
}

const ROLES: &str = r#"
_meta:
  type: roles
  config_version: 2
tenant:
  index_permissions:
    - index_patterns: ["heavy"]
      allowed_actions: [read]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_scroll_is_its_openers_through_every_gateway() {
    let files = tempfile::tempdir().unwrap();
    let users = files.path().join("users.yml");
    add_user(&users, "root", "root-pw", &["admin".into()], false).expect("add root");
    for u in ["alice", "bob"] {
        add_user(&users, u, &format!("{u}-pw"), &["tenant".into()], false).expect("add user");
    }
    let roles = files.path().join("roles.yml");
    std::fs::write(&roles, ROLES).expect("roles file");
    let options = GatewayOptions {
        flags: vec![
            "auth.type=basic".to_string(),
            format!("auth.users_file={}", users.display()),
            format!("auth.roles_file={}", roles.display()),
        ],
        auth: Some(("root".to_string(), "root-pw".to_string())),
    };
    let c = TestCluster::start_gateways(2, "scroll_auth", options).await;
    let alice = Some(("alice", "alice-pw"));
    let bob = Some(("bob", "bob-pw"));
    let (s, b) = c
        .req_as(
            0,
            alice,
            "POST",
            "/heavy/_search?scroll=1m",
            Some(json!({"size": 1, "sort": ["_doc"]})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let scroll = b["_scroll_id"].as_str().expect("a scroll id").to_string();
    // Another user is refused on either gateway as on the opener: not its scroll.
    for i in [1, 0] {
        let (s, b) = c
            .req_as(i, bob, "POST", "/_search/scroll", next_page(&scroll))
            .await;
        assert_eq!(s, 403, "gateway {i}: {b}");
        assert_eq!(
            b["error"]["reason"], "Wrong user in reader context",
            "gateway {i}: {b}"
        );
    }
    // Its opener continues it through the other gateway, then the first (refused 403 before:
    // the other gateway did not know the scroll).
    let mut scroll = scroll;
    for i in [1, 0, 1] {
        let (s, b) = c
            .req_as(i, alice, "POST", "/_search/scroll", next_page(&scroll))
            .await;
        assert_eq!(s, 200, "gateway {i}: {b}");
        assert_eq!(b["hits"]["hits"].as_array().map(Vec::len), Some(1), "{b}");
        scroll = b["_scroll_id"].as_str().expect("a scroll id").to_string();
    }
    let clear = || Some(json!({"scroll_id": scroll}));
    let (s, b) = c.req_as(1, bob, "DELETE", "/_search/scroll", clear()).await;
    assert_eq!(s, 403, "{b}");
    let (s, b) = c
        .req_as(1, alice, "DELETE", "/_search/scroll", clear())
        .await;
    assert_eq!((s, &b["num_freed"]), (200, &json!(1)), "{b}");
    // Cleared through gateway 1, forgotten on gateway 0 too: no gateway knows it now, so
    // whose it was cannot be checked (as on one gateway after a clear).
    let (s, b) = c
        .req_as(0, alice, "POST", "/_search/scroll", next_page(&scroll))
        .await;
    assert_eq!(s, 403, "{b}");
    assert_eq!(b["error"]["type"], "security_exception", "{b}");
}
