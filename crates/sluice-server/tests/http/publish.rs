//! The addresses a node publishes (`_nodes`' `publish_address`, `_cat/nodes`): what sniffing
//! clients replace their hosts with, so never a wildcard such as `0.0.0.0`, which a client on
//! another machine would dial as itself; `http.publish_host`/`http.publish_port` when set.

use std::net::SocketAddr;

use crate::common::TestNode;
use serde_json::Value;

/// The entry of the node that answered a `_nodes` request (the only one: a single node, or a
/// gateway, whose `_nodes/…/http` lists the gateways).
fn own_entry(b: &Value) -> &Value {
    let nodes = b["nodes"].as_object().expect("nodes");
    assert_eq!(nodes.len(), 1, "{b}");
    nodes.values().next().unwrap()
}

fn addr(v: &Value) -> SocketAddr {
    v.as_str()
        .unwrap_or_else(|| panic!("not an address: {v}"))
        .parse()
        .unwrap_or_else(|_| panic!("not an address: {v}"))
}

/// Asserts `a` is no wildcard and a node answers HTTP there.
async fn assert_answers_http(node: &TestNode, a: SocketAddr, what: &str) {
    assert!(!a.ip().is_unspecified(), "{what} is a wildcard: {a}");
    let resp = node
        .client
        .get(format!("http://{a}/"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what} {a} does not answer: {e}"));
    assert_eq!(resp.status().as_u16(), 200, "{what} {a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_node_bound_on_a_wildcard_publishes_an_address_that_answers() {
    let node = TestNode::start_with(&["http.host=0.0.0.0"]).await;
    assert!(node.addr.ip().is_unspecified(), "bound {}", node.addr);
    let (s, b) = node.req("GET", "/_nodes/_all/http,transport", None).await;
    assert_eq!(s, 200, "{b}");
    let me = own_entry(&b);
    let published = addr(&me["http"]["publish_address"]);
    assert_eq!(published.port(), node.addr.port(), "{b}");
    assert_answers_http(&node, published, "http.publish_address").await;
    // Its own bound address is the wildcard it bound.
    assert_eq!(
        me["http"]["bound_address"],
        serde_json::json!([node.addr.to_string()]),
        "{b}"
    );
    // `transport.host` defaults to `http.host`: the transport bound the wildcard too, and
    // publishes an address of this machine as well.
    let transport = addr(&me["transport"]["publish_address"]);
    assert!(!transport.ip().is_unspecified(), "{b}");
    assert_eq!(me["transport_address"], transport.to_string(), "{b}");
    assert_eq!(me["ip"], transport.ip().to_string(), "{b}");
    assert!(
        me["transport"]["bound_address"][0]
            .as_str()
            .is_some_and(|a| a.starts_with("0.0.0.0:")),
        "{b}"
    );
    // `_cat/nodes` lists reachable addresses too (through a gateway, the upstream's node,
    // bound on the wildcard as well).
    let (s, rows) = node
        .req("GET", "/_cat/nodes?format=json&h=ip,http_address", None)
        .await;
    assert_eq!(s, 200, "{rows}");
    let rows = rows.as_array().expect("rows");
    assert!(!rows.is_empty());
    for row in rows {
        let ip: std::net::IpAddr = row["ip"].as_str().unwrap().parse().unwrap();
        assert!(!ip.is_unspecified(), "{row}");
        assert_answers_http(&node, addr(&row["http_address"]), "_cat/nodes http_address").await;
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_publish_host_and_port_are_what_nodes_shows() {
    // A port nothing listens on: published as set, as behind a port-forwarding proxy.
    let node = TestNode::start_with(&[
        "http.host=0.0.0.0",
        "http.publish_host=127.0.0.1",
        "http.publish_port=19999",
    ])
    .await;
    let (s, b) = node.req("GET", "/_nodes/http", None).await;
    assert_eq!(s, 200, "{b}");
    let me = own_entry(&b);
    assert_eq!(me["http"]["publish_address"], "127.0.0.1:19999", "{b}");
    assert_eq!(
        me["http"]["bound_address"],
        serde_json::json!([node.addr.to_string()]),
        "{b}"
    );
    // `transport.publish_host` defaults to `http.publish_host`; the port is the bound one.
    assert_eq!(me["ip"], "127.0.0.1", "{b}");
    node.stop().await;
}
