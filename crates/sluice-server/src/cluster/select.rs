//! Which members a request names (`nodes=` / `{nodes}`), and the `_nodes` envelope of a
//! fanned-out answer.

use serde_json::{Value, json};
use sluice_cluster::Member;
use sluice_cluster::fanout::Outcome;
use sluice_cluster::rpc::RpcError;

/// The members a node selector names, in node-id order. `None` (no selector), `_all`, `*` and
/// an empty entry name every member; `_local` this node; otherwise node ids, node names, and
/// wildcards over either (OpenSearch's node-id resolution).
pub fn select(members: &[Member], me: &str, selector: Option<&str>) -> Vec<Member> {
    let Some(selector) = selector else {
        return members.to_vec();
    };
    let parts: Vec<&str> = selector.split(',').map(str::trim).collect();
    members
        .iter()
        .filter(|m| {
            parts.iter().any(|p| match *p {
                "" | "_all" | "*" => true,
                "_local" => m.node_id == me,
                p => {
                    sluice_wire::simple_match(p, &m.node_id)
                        || sluice_wire::simple_match(p, &m.name)
                }
            })
        })
        .cloned()
        .collect()
}

/// One member's failure as OpenSearch's nodes framework reports it.
pub fn failure(node_id: &str, cause: Value) -> Value {
    json!({
        "type": "failed_node_exception",
        "reason": format!("Failed node [{node_id}]"),
        "node_id": node_id,
        "caused_by": cause,
    })
}

/// The `caused_by` of an RPC failure.
pub fn rpc_cause(e: &RpcError) -> Value {
    let ty = match e {
        RpcError::Unreachable { .. } => "connect_transport_exception",
        RpcError::DeadlineExceeded { .. } => "receive_timeout_transport_exception",
        RpcError::VersionMismatch { .. } | RpcError::Remote { .. } => "transport_exception",
    };
    json!({"type": ty, "reason": e.to_string()})
}

/// The `caused_by` of a member's non-2xx answer (its OpenSearch error body's `error`).
pub fn answer_cause(body: &Value) -> Value {
    match body.get("error") {
        Some(e @ Value::Object(_)) => {
            let mut e = e.clone();
            if let Some(o) = e.as_object_mut() {
                o.remove("root_cause");
            }
            e
        }
        Some(Value::String(s)) => json!({"type": "exception", "reason": s}),
        _ => json!({"type": "exception", "reason": body.to_string()}),
    }
}

/// The successful answers of a fan-out and its `_nodes` envelope
/// (`total`/`successful`/`failed`, plus `failures` when some member failed).
pub fn envelope(outcomes: Vec<Outcome>) -> (Vec<(Member, Value)>, Value) {
    let total = outcomes.len();
    let mut ok = Vec::new();
    let mut failures = Vec::new();
    for o in outcomes {
        match o.result {
            Ok(a) if (200..300).contains(&a.status) => ok.push((o.member, a.body)),
            Ok(a) => failures.push(failure(&o.member.node_id, answer_cause(&a.body))),
            Err(e) => failures.push(failure(&o.member.node_id, rpc_cause(&e))),
        }
    }
    let mut nodes = json!({"total": total, "successful": ok.len(), "failed": failures.len()});
    if !failures.is_empty() {
        nodes["failures"] = Value::Array(failures);
    }
    (ok, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, name: &str) -> Member {
        Member {
            node_id: id.into(),
            generation: 1,
            name: name.into(),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version: 1,
            backend: "embedded".into(),
            version: "t".into(),
            cluster_uuid: "u".into(),
        }
    }

    #[test]
    fn test_selectors_name_members_by_id_name_wildcard_and_local() {
        let ms = [
            member("a1", "node-1"),
            member("b2", "node-2"),
            member("c3", "other"),
        ];
        let ids = |sel: Option<&str>| -> Vec<String> {
            select(&ms, "b2", sel)
                .into_iter()
                .map(|m| m.node_id)
                .collect()
        };
        assert_eq!(ids(None), ["a1", "b2", "c3"]);
        assert_eq!(ids(Some("_all")), ["a1", "b2", "c3"]);
        assert_eq!(ids(Some("_local")), ["b2"]);
        assert_eq!(ids(Some("node-*")), ["a1", "b2"]);
        assert_eq!(ids(Some("c3,node-1")), ["a1", "c3"]);
        assert!(ids(Some("nope")).is_empty());
    }
}
