//! Which members a request names (`nodes=` / `{nodes}`), and the `_nodes` envelope of a
//! fanned-out answer.

use serde_json::{Value, json};
use sluice_cluster::Member;
use sluice_cluster::fanout::Outcome;
use sluice_cluster::rpc::RpcError;
use sluice_engine::EngineError;

/// The members a node selector names, in node-id order, resolved as OpenSearch's
/// `DiscoveryNodes.resolveNodes` resolves one: `None` (no selector), `_all`, `*` and an empty
/// entry name every member; `_local` this node; `_cluster_manager` (or its old name
/// `_master`) the member wearing the cluster manager's `*` ([`super::shown_manager`]); `role:true` every member with that role (every sluice node has
/// [`super::ROLES`]; `master` is `cluster_manager`'s old name) and `role:false` removes them
/// from what the entries before it named; otherwise node ids, node names, and the IP
/// addresses and `ip:port` transport addresses members listen on, each matched with `*`
/// wildcards. Entries apply in order.
pub fn select(
    members: &[Member],
    me: &str,
    selector: Option<&str>,
) -> Result<Vec<Member>, EngineError> {
    let Some(selector) = selector else {
        return Ok(members.to_vec());
    };
    let manager = super::shown_manager(members).map(|m| m.node_id.as_str());
    let mut chosen = vec![false; members.len()];
    for part in selector.split(',').map(str::trim) {
        if let Some(keep) = role_entry(part)? {
            // Every member has every role sluice nodes have: the entry adds all, or removes all.
            chosen.iter_mut().for_each(|c| *c = keep);
            continue;
        }
        for (m, c) in members.iter().zip(chosen.iter_mut()) {
            *c |= match part {
                "" | "_all" | "*" => true,
                "_local" => m.node_id == me,
                "_cluster_manager" | "_master" => manager == Some(m.node_id.as_str()),
                p => names_member(p, m),
            };
        }
    }
    Ok(members
        .iter()
        .zip(chosen)
        .filter(|(_, c)| *c)
        .map(|(m, _)| m.clone())
        .collect())
}

/// A `role:true` / `role:false` entry naming a role sluice nodes have ([`super::ROLES`];
/// `master` is `cluster_manager`'s old name): `Some(true)` adds every member, `Some(false)`
/// removes every member. Any other `attr:value` (a role no sluice node has, a custom
/// attribute) names no member, as it names no node in OpenSearch: it is matched as a name
/// and finds none.
/// A value that is not a boolean is refused as OpenSearch's `Booleans.parseBoolean` refuses it.
fn role_entry(part: &str) -> Result<Option<bool>, EngineError> {
    let Some((attr, value)) = part.split_once(':') else {
        return Ok(None);
    };
    let role = if attr == "master" {
        "cluster_manager"
    } else {
        attr
    };
    if !super::ROLES.contains(&role) {
        return Ok(None);
    }
    match value {
        "true" => Ok(Some(true)),
        "false" => Ok(Some(false)),
        other => Err(EngineError::illegal_argument(format!(
            "Failed to parse value [{other}] as only [true] or [false] are allowed."
        ))),
    }
}

/// Whether `pattern` (with `*` wildcards) is member `m`'s node id, name, IP address or
/// transport address.
fn names_member(pattern: &str, m: &Member) -> bool {
    let matches = |text: &str| sluice_wire::simple_match(pattern, text);
    matches(&m.node_id)
        || matches(&m.name)
        || matches(&m.transport_addr.ip().to_string())
        || matches(&m.http_addr.ip().to_string())
        || matches(&m.transport_addr.to_string())
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

/// The `caused_by` of an RPC failure, typed as OpenSearch's transport exceptions: a connection
/// that could not be made, one that closed with the request on it (`NodeDisconnectedException`)
/// and a request not answered in time.
pub fn rpc_cause(e: &RpcError) -> Value {
    let ty = match e {
        RpcError::Unreachable { .. } => "connect_transport_exception",
        RpcError::Disconnected { .. } => "node_disconnected_exception",
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
                .unwrap()
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

    #[test]
    fn test_selectors_resolve_as_opensearchs_discovery_nodes() {
        let mut ms = vec![
            member("b2", "node-2"),
            member("a1", "node-1"),
            member("c3", "other"),
        ];
        ms[2].transport_addr = "10.0.0.3:9300".parse().unwrap();
        ms[2].http_addr = "10.0.0.3:9200".parse().unwrap();
        ms.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        let ids = |sel: &str| -> Vec<String> {
            select(&ms, "b2", Some(sel))
                .unwrap()
                .into_iter()
                .map(|m| m.node_id)
                .collect()
        };
        // The member wearing the cluster manager's `*`: the lowest node id.
        assert_eq!(ids("_cluster_manager"), ["a1"]);
        assert_eq!(ids("_master"), ["a1"]);
        for every in [
            "cluster_manager:true",
            "master:true",
            "data:true",
            "ingest:true",
        ] {
            assert_eq!(ids(every), ["a1", "b2", "c3"], "{every}");
        }
        assert!(ids("data:false").is_empty());
        assert!(ids("ml:true").is_empty());
        assert!(ids("zone:a").is_empty());
        // In order: all, then the data nodes removed, then one added back.
        assert_eq!(ids("_all,data:false,node-2"), ["b2"]);
        // Addresses: an IP, an ip:port, a wildcard over them.
        assert_eq!(ids("10.0.0.3"), ["c3"]);
        assert_eq!(ids("10.0.0.3:9300"), ["c3"]);
        assert_eq!(ids("10.0.*"), ["c3"]);
        assert_eq!(ids("127.0.0.1"), ["a1", "b2"]);
        // A role's value is a boolean, as OpenSearch parses it.
        for bad in ["data:*", "cluster_manager:TRUE", "ingest:"] {
            let e = select(&ms, "b2", Some(bad)).unwrap_err();
            assert!(
                e.reason.contains("only [true] or [false]"),
                "{bad}: {}",
                e.reason
            );
        }
    }
}
