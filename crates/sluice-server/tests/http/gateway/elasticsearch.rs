//! A gateway in front of Elasticsearch (found by an outside trial with its Python client):
//! what its official clients check of the answers they get holds for the answers the gateway
//! builds itself, not only for the ones it relays; the media types they send are read on
//! sluice's own routes; and the gateway's own calls about a user's work go as the gateway,
//! as Elasticsearch's `run_as` users often may not read tasks.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{Received, fake, fake_answering_root, gateway, one_slot_group};
use crate::common::{self, ADMIN, Reply, TestNode};

/// Elasticsearch's product header, which its 8.x clients require on a successful answer.
const PRODUCT: &str = "x-elastic-product";

/// An Elasticsearch-like upstream: `GET /` and every answer name the product, but the answers
/// on paths containing `bare`; searches on `hang` wait until `release` says true; `_msearch`
/// answers one empty item per item sent.
async fn elasticsearch(release: tokio::sync::watch::Receiver<bool>) -> super::Fake {
    fake_answering_root(Arc::new(move |r: Received| {
        let mut release = release.clone();
        Box::pin(async move {
            let body = if r.uri == "/" {
                json!({"name": "es-1", "cluster_name": "es", "version": {"number": "8.15.1",
                       "build_flavor": "default"}, "tagline": "You Know, for Search"})
            } else if r.uri.contains("_msearch") {
                let n = String::from_utf8_lossy(&r.body)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .count()
                    / 2;
                json!({"took": 1, "responses": vec![json!({"status": 200, "hits": {"hits": []}}); n]})
            } else {
                if r.uri.contains("hang") {
                    let _ = release.wait_for(|go| *go).await;
                }
                json!({"took": 1, "hits": {"hits": []}})
            };
            let mut resp: Response = axum::Json(body).into_response();
            if !r.uri.contains("bare") {
                resp.headers_mut()
                    .insert(PRODUCT, "Elasticsearch".parse().unwrap());
            }
            resp
        })
    }))
    .await
}

fn product_of(r: &Reply) -> Vec<String> {
    r.header_values(PRODUCT)
}

async fn msearch(gw: &TestNode) -> Reply {
    let body = common::ndjson(&[
        json!({"index": "a"}),
        json!({}),
        json!({"index": "b"}),
        json!({}),
    ]);
    let resp = gw
        .client
        .post(gw.url("/_msearch"))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    Reply::of(resp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_own_answers_carry_the_upstreams_product_header() {
    let (release, released) = tokio::sync::watch::channel(false);
    let up = elasticsearch(released).await;
    let gw = gateway(&up.base, &["node.memory_budget=1tb"]).await;
    let group = one_slot_group(&gw).await;
    let r = gw
        .req_with(
            "PUT",
            "/_rules/workload_group",
            Some(
                json!({"description": "t", "index_pattern": ["tenant*"], "workload_group": group}),
            ),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(product_of(&r), ["Elasticsearch"], "a route of sluice's own");

    // A merged `_msearch`: the answer an 8.x client refused when it came first.
    let r = msearch(&gw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["responses"].as_array().unwrap().len(),
        2,
        "{}",
        r.body
    );
    assert_eq!(product_of(&r), ["Elasticsearch"], "a merged _msearch");

    let r = gw.req_with("GET", "/_wlm/stats", None, &ADMIN).await;
    assert_eq!(product_of(&r), ["Elasticsearch"], "_wlm/stats");
    let r = gw.req_with("DELETE", "/_wlm/stats", None, &ADMIN).await;
    assert_eq!(r.status, 405, "{}", r.body);
    assert_eq!(
        product_of(&r),
        ["Elasticsearch"],
        "an error of sluice's own"
    );

    // Relayed answers as the upstream sent them (P1), on the lane and on the general path;
    // the upstream's own header once, not twice.
    let r = gw
        .req_with("POST", "/a/_search", Some(json!({})), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(product_of(&r), ["Elasticsearch"], "a relayed search");
    for (method, path) in [("POST", "/bare/_search"), ("GET", "/bare/_doc/1")] {
        let r = gw.req_with(method, path, None, &[]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert!(product_of(&r).is_empty(), "{path} is relayed as it came");
    }

    // A 429 of the lane's own: the group's one slot is held upstream.
    let client = gw.client.clone();
    let url = gw.url("/tenant-hang/_search");
    let held = tokio::spawn(async move { client.post(url).send().await.map(|r| r.status()) });
    up.wait_received("tenant-hang").await;
    let r = gw
        .req_with("POST", "/tenant-2/_search", Some(json!({})), &[])
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(product_of(&r), ["Elasticsearch"], "a lane refusal");
    release.send_replace(true);
    assert_eq!(held.await.unwrap().unwrap(), 200);
    gw.stop().await;

    // An upstream that names no product (OpenSearch) gets none added.
    let up = fake(Arc::new(|_r: Received| {
        Box::pin(async { axum::Json(json!({"hits": {"hits": []}})).into_response() })
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    for r in [
        msearch(&gw).await,
        gw.req_with("GET", "/_wlm/stats", None, &ADMIN).await,
    ] {
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(product_of(&r).is_empty(), "{:?}", r.headers);
    }
    gw.stop().await;
}

/// The `Warning` a request tagged with an unknown group gets, with the agent `agent`.
fn unknown_group_warning(agent: &str) -> String {
    format!(
        "299 {agent} \"workload group [nope] does not exist; the request ran in [DEFAULT_WORKLOAD_GROUP]\""
    )
}

/// The `type` of an error object and of its root cause.
fn types_of(error: &serde_json::Value) -> (&str, &str) {
    (
        error["type"].as_str().unwrap_or_default(),
        error["root_cause"][0]["type"].as_str().unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_own_answers_speak_elasticsearch_in_front_of_it() {
    // An outside trial found the gateway's own answers in OpenSearch's words in front of
    // Elasticsearch: its 429s `rejected_execution_exception`, its warnings'
    // `OpenSearch-3.3.0`, its `_nodes/http` nodes `distribution: opensearch`.
    const ES_REJECTED: &str = "es_rejected_execution_exception";
    let (release, released) = tokio::sync::watch::channel(false);
    let up = elasticsearch(released).await;
    let gw = gateway(&up.base, &["node.memory_budget=1tb"]).await;
    let group = one_slot_group(&gw).await;
    let r = gw
        .req_with(
            "PUT",
            "/_rules/workload_group",
            Some(
                json!({"description": "t", "index_pattern": ["tenant*"], "workload_group": group}),
            ),
            &ADMIN,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Warnings, on a search relayed on the lane and on a merged `_msearch`: Elasticsearch's
    // format, with the upstream's version (its build hash unknown: the fake gives none).
    let es_warning = unknown_group_warning("Elasticsearch-8.15.1-unknown");
    let unknown = [("workloadGroupId", "nope")];
    let r = gw
        .req_with("POST", "/a/_search", Some(json!({})), &unknown)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header_values("warning"),
        std::slice::from_ref(&es_warning),
        "a search"
    );
    let body = common::ndjson(&[json!({"index": "a"}), json!({})]);
    let resp = gw
        .client
        .post(gw.url("/_msearch"))
        .header("content-type", "application/x-ndjson")
        .header("workloadGroupId", "nope")
        .body(body)
        .send()
        .await
        .unwrap();
    let r = Reply::of(resp).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header_values("warning"), [es_warning], "an _msearch");

    // 429s of the gateway's own while the group's one slot is held upstream: on the lane, on
    // the general path (a scroll), and as a merged `_msearch`'s item.
    let client = gw.client.clone();
    let url = gw.url("/tenant-hang/_search");
    let held = tokio::spawn(async move { client.post(url).send().await.map(|r| r.status()) });
    up.wait_received("tenant-hang").await;
    for path in ["/tenant-2/_search", "/tenant-2/_search?scroll=1m"] {
        let r = gw.req_with("POST", path, Some(json!({})), &[]).await;
        assert_eq!(r.status, 429, "{path}: {}", r.body);
        assert_eq!(
            types_of(&r.body["error"]),
            (ES_REJECTED, ES_REJECTED),
            "{path}: {}",
            r.body
        );
    }
    let body = common::ndjson(&[json!({"index": "tenant-3"}), json!({})]);
    let resp = gw
        .client
        .post(gw.url("/_msearch"))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    let r = Reply::of(resp).await;
    let item = &r.body["responses"][0];
    assert_eq!(item["status"], 429, "{}", r.body);
    assert_eq!(
        types_of(&item["error"]),
        (ES_REJECTED, ES_REJECTED),
        "{}",
        r.body
    );
    release.send_replace(true);
    assert_eq!(held.await.unwrap().unwrap(), 200);

    // The nodes a sniffer reads, described as Elasticsearch describes its own.
    let r = gw.req_with("GET", "/_nodes/http", None, &ADMIN).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let nodes = r.body["nodes"].as_object().expect("nodes");
    assert!(!nodes.is_empty(), "{}", r.body);
    for node in nodes.values() {
        assert!(node.get("distribution").is_none(), "{node}");
        assert_eq!(node["version"], "8.15.1", "{node}");
    }
    gw.stop().await;

    // In front of OpenSearch (no product named): OpenSearch's words, as ever.
    let up = fake(Arc::new(|_r: Received| {
        Box::pin(async { axum::Json(json!({"hits": {"hits": []}})).into_response() })
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    let r = gw
        .req_with("POST", "/a/_search", Some(json!({})), &unknown)
        .await;
    assert_eq!(
        r.header_values("warning"),
        [unknown_group_warning("OpenSearch-3.3.0")]
    );
    let r = gw.req_with("GET", "/_nodes/http", None, &ADMIN).await;
    for node in r.body["nodes"].as_object().expect("nodes").values() {
        assert_eq!(node["distribution"], "opensearch", "{node}");
    }
    gw.stop().await;
}

/// A request to `gw` with Elasticsearch 8.x clients' versioned media types.
async fn versioned(gw: &TestNode, method: &str, path: &str, body: serde_json::Value) -> Reply {
    const JSON8: &str = "application/vnd.elasticsearch+json; compatible-with=8";
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let resp = gw
        .client
        .request(m, gw.url(path))
        .header("content-type", JSON8)
        .header("accept", JSON8)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    Reply::of(resp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_elasticsearchs_versioned_types_are_read_in_front_of_it() {
    let group = json!({"name": "analytics", "resiliency_mode": "soft",
                       "resource_limits": {"memory": 0.2}});
    let up = elasticsearch(tokio::sync::watch::channel(true).1).await;
    let gw = gateway(&up.base, &[]).await;
    let r = versioned(&gw, "PUT", "/_wlm/workload_group", group.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["name"], "analytics", "{}", r.body);
    let r = versioned(
        &gw,
        "PUT",
        "/_rules/workload_group",
        json!({"description": "a", "index_pattern": ["logs*"], "workload_group": r.body["_id"]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    gw.stop().await;

    // In front of OpenSearch, which refuses them, so does the gateway.
    let up = fake(Arc::new(|_r: Received| {
        Box::pin(async { axum::Json(json!({})).into_response() })
    }))
    .await;
    let gw = gateway(&up.base, &[]).await;
    let r = versioned(&gw, "PUT", "/_wlm/workload_group", group).await;
    assert_eq!(r.status, 406, "{}", r.body);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_background_work_is_followed_with_the_gateways_own_credentials() {
    // An upstream that runs a by-query in the background and answers its task's looks; it
    // records what each request carried.
    let opaque = Arc::new(parking_lot::Mutex::new(String::new()));
    let seen = opaque.clone();
    let up = fake(Arc::new(move |r: Received| {
        let seen = seen.clone();
        Box::pin(async move {
            if r.uri.contains("_delete_by_query") {
                *seen.lock() = r.headers["x-opaque-id"].to_str().unwrap().to_string();
                return axum::Json(json!({"task": "upnode:7"})).into_response();
            }
            if r.uri.starts_with("/_tasks/upnode:7") {
                let ours = seen.lock().clone();
                return axum::Json(json!({"completed": true,
                    "task": {"headers": {"X-Opaque-Id": ours}, "status": {"deleted": 5}},
                    "response": {"deleted": 5, "failures": []}}))
                .into_response();
            }
            axum::Json(json!({})).into_response()
        })
    }))
    .await;
    let gw = gateway(
        &up.base,
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.1",
            "backend.upstream.identity=run_as",
            "backend.upstream.username=gw",
            "backend.upstream.password=secret",
        ],
    )
    .await;
    let alice = [("x-proxy-user", "alice"), ("x-proxy-roles", "admin")];
    let r = gw
        .req_with(
            "POST",
            "/logs/_delete_by_query?wait_for_completion=false",
            Some(json!({"query": {"match_all": {}}})),
            &alice,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["task"].as_str().unwrap().to_string();
    let done = gw
        .req_with(
            "GET",
            &format!("/_tasks/{id}?wait_for_completion=true"),
            None,
            &alice,
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.body["response"]["deleted"], 5, "{}", done.body);

    // The work went as alice; the gateway's looks at it as the gateway.
    let sent = &up.received_on("_delete_by_query")[0];
    assert_eq!(sent.headers["es-security-runas-user"], "alice");
    let looks = up.received_on("/_tasks/upnode:7");
    assert!(!looks.is_empty());
    for look in &looks {
        assert_eq!(
            look.headers["authorization"], "Basic Z3c6c2VjcmV0",
            "{}",
            look.uri
        );
        assert!(
            look.headers.get("es-security-runas-user").is_none(),
            "{} was sent as the user",
            look.uri
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_restarted_gateway_remembers_its_upstreams_product() {
    let (_release, released) = tokio::sync::watch::channel(true);
    let up = elasticsearch(released).await;
    let data = tempfile::tempdir().unwrap();
    let settings = |hosts: &str| {
        vec![
            "backend.type=upstream".to_string(),
            format!("backend.upstream.hosts={hosts}"),
            "backend.upstream.search_threads=4".to_string(),
            "backend.upstream.request_timeout=500ms".to_string(),
            "backend.upstream.connect_timeout=500ms".to_string(),
        ]
    };
    let first = settings(&up.base);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let gw = TestNode::start_embedded_on(data.path(), &first).await;
    let r = gw.req_with("GET", "/_wlm/stats", None, &ADMIN).await;
    assert_eq!(product_of(&r), ["Elasticsearch"], "learned at start");
    gw.stop().await;
    // Started again while its upstream is down (nothing listens where it points): sluice's own
    // routes stay readable, and an Elasticsearch 8 client still finds the product on them.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let again = settings(&down);
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let gw = TestNode::start_embedded_on(data.path(), &again).await;
    for path in ["/_wlm/stats", "/_list/wlm_stats", "/_tasks"] {
        let r = gw.req_with("GET", path, None, &ADMIN).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(product_of(&r), ["Elasticsearch"], "{path}");
    }
    gw.stop().await;
}
