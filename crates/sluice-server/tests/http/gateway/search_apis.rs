//! The APIs besides searches, counts, `_msearch` and scrolls that run searches upstream
//! (`_reindex`, `_rank_eval`, SQL and PPL, asynchronous search …), admitted through the
//! gateway: each holds its group's slot while a fake upstream works on it, shows in `_tasks`
//! under its action with its group, counts in `_wlm/stats`, and is cancelled upstream when
//! its client leaves or its task is cancelled. Before, they were forwarded outside every
//! group: a tenant ran any number of them past its `node_limit`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::{Fake, Received, enabled_group, fake, gateway, group_stats, one_slot_group};
use crate::common::{self, TestNode};

/// What the fake upstream knows of the work it runs.
#[derive(Default)]
struct Work {
    /// The work running, by the fake's task number: the `X-Opaque-Id` it came with.
    running: Mutex<HashMap<u64, String>>,
    /// Every task's `X-Opaque-Id`, running or ended (a followed task is looked at after).
    opaque: Mutex<HashMap<u64, String>>,
    /// The tasks cancelled by `POST /_tasks/upnode:{n}/_cancel`.
    cancelled: Mutex<Vec<u64>>,
    /// Set when all work may end.
    released: AtomicBool,
    next: AtomicU64,
    changed: tokio::sync::Notify,
}

impl Work {
    fn start(&self, r: &Received) -> u64 {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let opaque = r
            .headers
            .get("x-opaque-id")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        self.running.lock().insert(n, opaque.clone());
        self.opaque.lock().insert(n, opaque);
        n
    }

    fn running(&self) -> usize {
        self.running.lock().len()
    }

    fn was_cancelled(&self, n: u64) -> bool {
        self.cancelled.lock().contains(&n)
    }

    /// Ends every piece of work.
    fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
        self.running.lock().clear();
        self.changed.notify_waiters();
    }

    /// Waits until work `n` is released or cancelled; answers whether it was cancelled.
    async fn until_done(&self, n: u64) -> bool {
        loop {
            let changed = self.changed.notified();
            if self.released.load(Ordering::SeqCst) || self.was_cancelled(n) {
                self.running.lock().remove(&n);
                return self.was_cancelled(n);
            }
            changed.await;
        }
    }
}

/// A fake upstream that runs each request of a search API until [`Work::release`] or its
/// cancellation: a waiting request answers then; an asynchronous search submission answers at
/// once and its search is listed by `_tasks` until then; a reindex with
/// `wait_for_completion=false` (a by-query action's too) answers its task, which `GET
/// _tasks/upnode:{n}` shows running until then.
async fn working_upstream() -> (Fake, Arc<Work>) {
    let work = Arc::new(Work::default());
    let w = work.clone();
    let up = fake(Arc::new(move |r: Received| {
        let w = w.clone();
        Box::pin(async move { answer(&w, r).await })
    }))
    .await;
    (up, work)
}

async fn answer(w: &Work, r: Received) -> Response {
    let json = |v: Value| axum::Json(v).into_response();
    if r.uri.starts_with("/_tasks?") {
        let tasks: serde_json::Map<String, Value> = w
            .running
            .lock()
            .iter()
            .map(|(n, o)| {
                let t = json!({"node": "upnode", "id": n, "action": "indices:data/read/search",
                               "headers": {"X-Opaque-Id": o}});
                (format!("upnode:{n}"), t)
            })
            .collect();
        return json(json!({"nodes": {"upnode": {"tasks": tasks}}}));
    }
    if let Some(rest) = r.uri.strip_prefix("/_tasks/upnode:") {
        let n: u64 = rest
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        if r.method == "POST" && rest.contains("/_cancel") {
            w.cancelled.lock().push(n);
            w.running.lock().remove(&n);
            w.changed.notify_waiters();
            return json(json!({"nodes": {}}));
        }
        let opaque = w.opaque.lock().get(&n).cloned().unwrap_or_default();
        let task = json!({"headers": {"X-Opaque-Id": opaque}, "status": {"total": 5}});
        if w.running.lock().contains_key(&n) {
            return json(json!({"completed": false, "task": task}));
        }
        let response = if w.was_cancelled(n) {
            json!({"total": 5, "created": 1, "canceled": "by user request"})
        } else {
            json!({"total": 5, "created": 5})
        };
        return json(json!({"completed": true, "task": task, "response": response}));
    }
    let api = [
        "_reindex",
        "_by_query",
        "_rank_eval",
        "_plugins/_",
        "_async",
    ];
    if !api.iter().any(|a| r.uri.contains(a)) {
        // The gateway's own calls (its settings, its nodes).
        return json(json!({}));
    }
    let n = w.start(&r);
    if r.uri.contains("_asynchronous_search") || r.uri.contains("_async_search") {
        return json(json!({"id": format!("as-{n}"), "state": "RUNNING", "is_running": true}));
    }
    if r.uri.contains("wait_for_completion=false") {
        return json(json!({"task": format!("upnode:{n}")}));
    }
    if w.until_done(n).await {
        return json(json!({"total": 5, "created": 1, "canceled": "by user request"}));
    }
    json(json!({"total": 5, "created": 5, "ok": true}))
}

/// A gateway in front of `up` whose one group lets one request run at a time and refuses the
/// next (429); answers it and the group's id. Its request timeout is long: the fake holds work
/// as long as a test needs.
async fn one_slot_gateway(up: &Fake) -> (TestNode, String) {
    let gw = gateway(
        &up.base,
        &[
            "node.memory_budget=1tb",
            "backend.upstream.request_timeout=60s",
        ],
    )
    .await;
    let group = one_slot_group(&gw).await;
    (gw, group)
}

/// One request of an API the gateway admits.
#[derive(Clone, Copy)]
struct Case {
    method: &'static str,
    path: &'static str,
    body: fn() -> Value,
    /// The action its gateway task shows.
    action: &'static str,
    /// How the client's answer comes.
    answers: Answers,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Answers {
    /// When the upstream's work ends.
    AtTheEnd,
    /// At once, with the upstream's id (an asynchronous search submission).
    UpstreamId,
    /// At once, with the gateway's task id (`wait_for_completion=false`).
    GatewayTask,
}

const REINDEX: Case = Case {
    method: "POST",
    path: "/_reindex",
    body: || json!({"source": {"index": "logs"}, "dest": {"index": "copy"}}),
    action: "indices:data/write/reindex",
    answers: Answers::AtTheEnd,
};
const REINDEX_BACKGROUND: Case = Case {
    path: "/_reindex?wait_for_completion=false",
    answers: Answers::GatewayTask,
    ..REINDEX
};
const RANK_EVAL: Case = Case {
    method: "GET",
    path: "/logs/_rank_eval",
    body: || {
        json!({"requests": [{"id": "q", "request": {"query": {"match_all": {}}}, "ratings": []}],
               "metric": {"precision": {"k": 10}}})
    },
    action: "indices:data/read/rank_eval",
    answers: Answers::AtTheEnd,
};
const PPL: Case = Case {
    method: "POST",
    path: "/_plugins/_ppl",
    body: || json!({"query": "source=logs | fields a"}),
    action: "cluster:admin/opensearch/ppl",
    answers: Answers::AtTheEnd,
};
const SQL: Case = Case {
    method: "POST",
    path: "/_plugins/_sql",
    body: || json!({"query": "SELECT * FROM logs"}),
    action: "cluster:admin/opensearch/sql",
    answers: Answers::AtTheEnd,
};
const ASYNCHRONOUS_SEARCH: Case = Case {
    method: "POST",
    path: "/logs/_plugins/_asynchronous_search?wait_for_completion_timeout=1ms",
    body: || json!({"query": {"match_all": {}}}),
    action: "cluster:admin/opendistro/asynchronous_search/submit",
    answers: Answers::UpstreamId,
};

/// Sends `case` in `group` (tagged by the rules when empty) in the background.
fn send(gw: &TestNode, case: Case, group: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let m = reqwest::Method::from_bytes(case.method.as_bytes()).unwrap();
    let mut rb = gw.client.request(m, gw.url(case.path));
    if !group.is_empty() {
        rb = rb.header("workloadGroupId", group);
    }
    let rb = rb
        .header("content-type", "application/json")
        .body((case.body)().to_string());
    tokio::spawn(async move {
        let r = rb.send().await.expect("answered");
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap_or(Value::Null))
    })
}

/// Waits until `what` holds of `group`'s stats on `gw`.
async fn stats_until(
    gw: &TestNode,
    group: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    common::eventually(what, || async {
        let stats = group_stats(gw, group).await;
        if done(&stats) {
            Ok(stats)
        } else {
            Err(stats.to_string())
        }
    })
    .await
}

/// Waits until the fake runs `n` pieces of work.
async fn running(work: &Work, n: usize) {
    common::wait_until(
        &format!("{n} pieces of work running upstream"),
        || work.running() == n,
        || format!("{} running", work.running()),
    )
    .await;
}

/// Asserts that a request of `case` holds its group's one slot while the upstream works on
/// it: a second one is refused (429) and not forwarded, the first shows in `_tasks` under its
/// action in its group and counts as executing, and once the work ends the slot is free and
/// the request counted as one completion.
async fn holds_its_groups_slot(case: Case) {
    let (up, work) = working_upstream().await;
    let (gw, group) = one_slot_gateway(&up).await;
    let mut first = Some(send(&gw, case, &group));
    running(&work, 1).await;
    let early = match case.answers {
        Answers::AtTheEnd => None,
        _ => Some(first.take().unwrap().await.unwrap()),
    };
    if let Some((s, b)) = &early {
        assert_eq!(*s, 200, "{}: {b}", case.path);
    }
    let tasks = gw.task_entries(case.action).await;
    assert_eq!(tasks.len(), 1, "{}: {tasks:?}", case.path);
    assert_eq!(
        tasks[0].1["workload_group"]["id"],
        group.as_str(),
        "{tasks:?}"
    );
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["executing"], 1, "{}: {stats}", case.path);
    // The tenant cannot run a second one past its node_limit: refused, not forwarded.
    let forwarded = up.received.lock().len();
    let (s, b) = send(&gw, case, &group).await.unwrap();
    let refused = if case.answers == Answers::GatewayTask {
        // As on an embedded node: the task id at once, the refusal its result.
        assert_eq!(s, 200, "{}: {b}", case.path);
        gw.task_result(b["task"].as_str().unwrap()).await
    } else {
        assert_eq!(s, 429, "{}: {b}", case.path);
        b
    };
    assert_eq!(
        refused["error"]["type"], "rejected_execution_exception",
        "{refused}"
    );
    // Nor a search: they share the group's slot.
    let r = gw
        .req_with(
            "POST",
            "/logs/_search",
            None,
            &[("workloadGroupId", &group)],
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(
        up.received.lock().len(),
        forwarded,
        "a refused request was forwarded"
    );
    assert_eq!(work.running(), 1);
    work.release();
    match case.answers {
        Answers::AtTheEnd => {
            let (s, b) = first.take().unwrap().await.unwrap();
            assert_eq!((s, &b["created"]), (200, &json!(5)), "{}: {b}", case.path);
        }
        Answers::UpstreamId => {
            let b = &early.unwrap().1;
            assert_eq!(
                b["id"], "as-1",
                "the upstream's answer is the client's: {b}"
            );
        }
        Answers::GatewayTask => {
            let id = early.unwrap().1["task"].as_str().unwrap().to_string();
            let done = gw.task_result(&id).await;
            assert_eq!(done["response"]["created"], 5, "{done}");
        }
    }
    let stats = stats_until(&gw, &group, "the slot given back", |s| {
        s["executing"] == 0 && s["total_completions"] == 1
    })
    .await;
    assert_eq!(stats["total_throttled"], 2, "{stats}");
    assert_eq!(stats["failures"], 0, "{stats}");
    assert!(gw.task_entries(case.action).await.is_empty());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_waiting_reindex_holds_its_groups_slot() {
    holds_its_groups_slot(REINDEX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_background_reindex_holds_its_groups_slot_until_its_upstream_task_ends() {
    holds_its_groups_slot(REINDEX_BACKGROUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_rank_eval_holds_its_groups_slot() {
    holds_its_groups_slot(RANK_EVAL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sql_and_ppl_queries_hold_their_groups_slot() {
    holds_its_groups_slot(PPL).await;
    holds_its_groups_slot(SQL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_an_asynchronous_search_holds_its_groups_slot_while_it_runs_upstream() {
    holds_its_groups_slot(ASYNCHRONOUS_SEARCH).await;
}

/// The fake's one piece of work, once `case`'s request reached it.
async fn the_work(work: &Work) -> u64 {
    running(work, 1).await;
    *work.running.lock().keys().next().unwrap()
}

/// Waits until the fake saw work `n` cancelled.
async fn cancelled_upstream(work: &Work, n: u64) {
    common::wait_until(
        "the upstream's work cancelled",
        || work.was_cancelled(n),
        || format!("cancelled {:?}", work.cancelled.lock()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_client_leaving_cancels_the_upstreams_work() {
    for case in [RANK_EVAL, PPL] {
        let (up, work) = working_upstream().await;
        let (gw, group) = one_slot_gateway(&up).await;
        let client = send(&gw, case, &group);
        let n = the_work(&work).await;
        client.abort();
        cancelled_upstream(&work, n).await;
        let stats = stats_until(&gw, &group, "the slot given back", |s| {
            s["executing"] == 0 && s["total_completions"] == 1
        })
        .await;
        assert_eq!(stats["failures"], 1, "{}: {stats}", case.path);
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cancelling_the_gateways_task_cancels_the_upstreams_work() {
    for case in [REINDEX, REINDEX_BACKGROUND, ASYNCHRONOUS_SEARCH] {
        let (up, work) = working_upstream().await;
        let (gw, group) = one_slot_gateway(&up).await;
        let mut client = Some(send(&gw, case, &group));
        let n = the_work(&work).await;
        // An answer that comes at once is awaited before the cancel: the fake starts the work
        // before it answers, and a cancel landing in between cancels the request itself (its
        // client gets the cancellation: the cases of the tests above), which once made this
        // test fail on a busy machine.
        let early = match case.answers {
            Answers::AtTheEnd => None,
            Answers::UpstreamId | Answers::GatewayTask => {
                Some(client.take().unwrap().await.unwrap())
            }
        };
        let (s, b) = gw
            .req(
                "POST",
                &format!("/_tasks/_cancel?actions={}", case.action),
                None,
            )
            .await;
        assert_eq!(s, 200, "{b}");
        cancelled_upstream(&work, n).await;
        let (s, b) = match early {
            Some(answer) => answer,
            None => client.take().unwrap().await.unwrap(),
        };
        assert_eq!(s, 200, "{}: {b}", case.path);
        match case.answers {
            // What the upstream did before it stopped is the client's answer.
            Answers::AtTheEnd => assert_eq!(b["canceled"], "by user request", "{b}"),
            Answers::GatewayTask => {
                let id = b["task"].as_str().unwrap();
                let done = gw.task_result(id).await;
                assert_eq!(done["response"]["canceled"], "by user request", "{done}");
            }
            Answers::UpstreamId => assert_eq!(b["id"], format!("as-{n}"), "{b}"),
        }
        stats_until(&gw, &group, "the slot given back", |s| {
            s["executing"] == 0 && s["total_completions"] == 1
        })
        .await;
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_rules_tag_them_on_the_indices_they_read() {
    // A reindex's source, an SQL query's FROM, a PPL query's source=, the path's index.
    let other_sql = Case {
        body: || json!({"query": "SELECT * FROM metrics"}),
        ..SQL
    };
    for (case, tagged) in [
        (REINDEX, true),
        (SQL, true),
        (PPL, true),
        (RANK_EVAL, true),
        (ASYNCHRONOUS_SEARCH, true),
        (other_sql, false),
    ] {
        let (up, work) = working_upstream().await;
        let (gw, group) = one_slot_gateway(&up).await;
        let r = gw
            .req_with(
                "PUT",
                "/_rules/workload_group",
                Some(json!({"description": "logs", "index_pattern": ["logs*"],
                            "workload_group": group})),
                &crate::common::ADMIN,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let _client = send(&gw, case, "");
        the_work(&work).await;
        let tasks = gw.task_entries(case.action).await;
        assert_eq!(tasks.len(), 1, "{}: {tasks:?}", case.path);
        let expected = if tagged {
            group.as_str()
        } else {
            "DEFAULT_WORKLOAD_GROUP"
        };
        assert_eq!(
            tasks[0].1["workload_group"]["id"], expected,
            "{}: {tasks:?}",
            case.path
        );
        work.release();
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_followed_search_is_cancelled_upstream_when_its_cancel_after_passes() {
    let (up, work) = working_upstream().await;
    let (gw, group) = one_slot_gateway(&up).await;
    let case = Case {
        path: "/logs/_plugins/_asynchronous_search?cancel_after_time_interval=100ms",
        ..ASYNCHRONOUS_SEARCH
    };
    let (s, b) = send(&gw, case, &group).await.unwrap();
    assert_eq!(s, 200, "{b}");
    let n = the_work(&work).await;
    cancelled_upstream(&work, n).await;
    let stats = stats_until(&gw, &group, "the slot given back", |s| {
        s["executing"] == 0 && s["total_completions"] == 1
    })
    .await;
    assert_eq!(stats["failures"], 1, "{stats}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_followed_background_work_is_cancelled_when_its_groups_cancel_after_passes() {
    // The group's `search.cancel_after_time_interval` bounds a by-query action and a reindex
    // followed in the background (`wait_for_completion=false`), as it bounds them waiting and
    // bounds an asynchronous search while it is followed: the upstream's task is cancelled,
    // what it did is the gateway task's result, and the slot is given back. The old code
    // applied it only until the upstream's task id came back, and followed the work for good.
    let delete_by_query = Case {
        method: "POST",
        path: "/logs/_delete_by_query?wait_for_completion=false",
        body: || json!({"query": {"match_all": {}}}),
        action: "indices:data/write/delete/byquery",
        answers: Answers::GatewayTask,
    };
    for case in [REINDEX_BACKGROUND, delete_by_query] {
        let (up, work) = working_upstream().await;
        let gw = gateway(
            &up.base,
            &[
                "node.memory_budget=1tb",
                "backend.upstream.request_timeout=60s",
            ],
        )
        .await;
        let group = enabled_group(
            &gw,
            json!({"name": "bounded", "resiliency_mode": "enforced",
                   "resource_limits": {"memory": 0.5},
                   "throttling": {"attribute": "group", "node_limit": 1},
                   "settings": {"search.cancel_after_time_interval": "200ms"}}),
        )
        .await;
        let (s, b) = send(&gw, case, &group).await.unwrap();
        assert_eq!(s, 200, "{}: {b}", case.path);
        let id = b["task"].as_str().expect("the gateway's task").to_string();
        // The fake's first piece of work.
        cancelled_upstream(&work, 1).await;
        let done = gw.task_result(&id).await;
        assert_eq!(
            done["response"]["canceled"], "by user request",
            "{}: {done}",
            case.path
        );
        let stats = stats_until(&gw, &group, "the slot given back", |s| {
            s["executing"] == 0 && s["total_completions"] == 1
        })
        .await;
        assert_eq!(stats["total_throttled"], 0, "{}: {stats}", case.path);
        assert!(gw.task_entries(case.action).await.is_empty());
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_stopping_gateway_stops_its_followers_and_gives_back_their_slots() {
    // A background reindex and an asynchronous search, each followed while the upstream runs
    // it. Stopping the gateway stops both followers and gives back their slots and tasks
    // (`followers.rs` W1); the upstream's work goes on (it is the client's). The old code's
    // followers outlived the stopped node, still looking at the upstream's tasks, their
    // tasks registered and the group's slot held — when they ran on the node's runtime, as
    // without the fast lane (off, or for an `https://` upstream); spawned on a lane thread,
    // they ended with that thread's runtime.
    let (up, work) = working_upstream().await;
    let gw = gateway(
        &up.base,
        &[
            "node.memory_budget=1tb",
            "backend.upstream.request_timeout=60s",
            "backend.upstream.fast_lane=false",
        ],
    )
    .await;
    let group = one_slot_group(&gw).await;
    let (s, b) = send(&gw, REINDEX_BACKGROUND, &group).await.unwrap();
    assert_eq!(s, 200, "{b}");
    running(&work, 1).await;
    let (s, b) = send(&gw, ASYNCHRONOUS_SEARCH, "").await.unwrap();
    assert_eq!(s, 200, "{b}");
    running(&work, 2).await;
    assert_eq!(gw.task_entries(REINDEX.action).await.len(), 1);
    assert_eq!(gw.task_entries(ASYNCHRONOUS_SEARCH.action).await.len(), 1);
    let stats = group_stats(&gw, &group).await;
    assert_eq!(stats["executing"], 1, "{stats}");
    let state = gw.state.clone();
    gw.stop().await;
    assert!(
        state.tasks.list().is_empty(),
        "a follower outlived the stopped gateway: {:?}",
        state
            .tasks
            .list()
            .iter()
            .map(|t| t.action)
            .collect::<Vec<_>>()
    );
    assert_eq!(state.workload.permits.num_buckets(), 0, "a slot still held");
    assert!(
        work.cancelled.lock().is_empty(),
        "the upstream's work cancelled"
    );
    assert_eq!(work.running(), 2, "the upstream's work goes on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_waiting_work_the_upstream_did_not_answer_in_time_is_cancelled_and_followed() {
    // A waiting reindex or rank evaluation whose answer does not come within
    // `request_timeout` is a 504, as a search's; the upstream's work is cancelled and the slot
    // held until the upstream lists it no more (`cancelled.rs` F1). The old code gave the slot
    // back with the 504 and left the work running upstream, outside the group's limit.
    for case in [REINDEX, RANK_EVAL] {
        let (up, work) = working_upstream().await;
        let gw = gateway(&up.base, &["node.memory_budget=1tb"]).await;
        let group = one_slot_group(&gw).await;
        let (s, b) = send(&gw, case, &group).await.unwrap();
        assert_eq!(s, 504, "{}: {b}", case.path);
        cancelled_upstream(&work, 1).await;
        let stats = stats_until(&gw, &group, "the slot given back", |s| {
            s["executing"] == 0 && s["total_completions"] == 1
        })
        .await;
        assert_eq!(stats["failures"], 1, "{}: {stats}", case.path);
        assert!(gw.task_entries(case.action).await.is_empty());
        gw.stop().await;
    }
}
