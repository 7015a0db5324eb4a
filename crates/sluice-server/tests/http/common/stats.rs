//! Reading a `_wlm/stats` answer, for the HTTP tests' nodes and the cluster tests' alike.

use serde_json::Value;

/// Group `id`'s entry in the `_wlm/stats` answer `answer` of one node (its first node entry:
/// the keys that are not `_nodes` or `cluster_name`).
pub fn group_of(answer: &Value, id: &str) -> Value {
    answer
        .as_object()
        .expect("a _wlm/stats object")
        .iter()
        .find(|(k, _)| !k.starts_with('_') && *k != "cluster_name")
        .map(|(_, n)| n["workload_groups"][id].clone())
        .expect("a node")
}
