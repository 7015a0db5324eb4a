//! Workload management on the server under test, over HTTP: the WLM mode, the benchmark's
//! workload groups, and the per-group counters of `GET /_wlm/stats`.
//!
//! The setting key, header name and group ids sluice uses are constants here, in one place.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::http::HttpTarget;

/// Cluster setting selecting the WLM mode (`disabled`, `monitor_only`, `enabled`).
pub const MODE_SETTING: &str = "wlm.workload_group.mode";

/// The WLM mode in which the node-tier throttle rejects; the benchmark measures in it.
pub const MODE_ENABLED: &str = "enabled";

/// Header tagging a request with a workload group id. OpenSearch spells it `workloadGroupId`;
/// header names are case-insensitive and `HeaderName` holds them in lower case.
pub const GROUP_HEADER: &str = "workloadgroupid";

/// Id of the group untagged requests run in; it is never throttled.
pub use sluice_wire::DEFAULT_GROUP_ID;

/// Share of the node's memory each benchmark group is given. The same for every group, so
/// groups differ only in their throttling; two of them sum to 0.8, under the 1.0 total a node
/// allows, leaving room for a group that already exists on a `--url` server.
///
/// Memory, not CPU: the load is closed-loop and saturates the node's cores, so a group with a
/// cpu share under 1 really is over it, and resource enforcement (issue #6) would reject and
/// cancel its requests; the scenario measures tagging and the throttle, not enforcement. A
/// `term` query's few kilobytes never approach 40% of the node's memory.
pub const GROUP_MEMORY_LIMIT: f64 = 0.4;

/// What a benchmark group is configured with besides its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSpec {
    /// Name of the group; re-created on every run.
    pub name: &'static str,
    /// `throttling.node_limit` of a group-attribute throttle; `None` leaves the group
    /// unthrottled.
    pub node_limit: Option<u64>,
    /// `throttling.shared_limit` (the cluster-wide pool) of the same throttle; `None` for
    /// none.
    pub shared_limit: Option<u64>,
}

impl GroupSpec {
    /// Returns the `PUT /_wlm/workload_group` body creating this group.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "name": self.name,
            "resiliency_mode": "enforced",
            "resource_limits": { "memory": GROUP_MEMORY_LIMIT },
        });
        if self.node_limit.is_some() || self.shared_limit.is_some() {
            let mut throttling = json!({ "attribute": "group" });
            if let Some(limit) = self.node_limit {
                throttling["node_limit"] = json!(limit);
            }
            if let Some(limit) = self.shared_limit {
                throttling["shared_limit"] = json!(limit);
            }
            body["throttling"] = throttling;
        }
        body
    }
}

/// Returns the headers tagging a request with group `id`.
pub fn tag_headers(id: &str) -> Result<HeaderMap> {
    let value = HeaderValue::from_str(id)
        .with_context(|| format!("the group id {id:?} cannot be sent as a header value"))?;
    let mut headers = HeaderMap::new();
    headers.insert(HeaderName::from_static(GROUP_HEADER), value);
    Ok(headers)
}

/// Sets the persistent WLM mode of the server's cluster.
///
/// # Cancel safety
///
/// Dropping the future abandons the request; the setting may or may not change.
pub async fn set_mode(target: &HttpTarget, mode: &str) -> Result<()> {
    let body = json!({ "persistent": { MODE_SETTING: mode } });
    send(
        target,
        reqwest::Method::PUT,
        "_cluster/settings",
        Some(&body),
    )
    .await?;
    Ok(())
}

/// Deletes the group named as `spec` if it exists, creates it afresh and returns its `_id`.
///
/// Re-creating rather than reusing makes the group's configuration and counters exactly those
/// of this run, whatever a previous run on the same data left behind.
///
/// # Cancel safety
///
/// Dropping the future may leave the group deleted and not yet re-created.
pub async fn recreate_group(target: &HttpTarget, spec: &GroupSpec) -> Result<String> {
    target
        .delete_if_exists(&format!("_wlm/workload_group/{}", spec.name))
        .await?;
    let created = send(
        target,
        reqwest::Method::PUT,
        "_wlm/workload_group",
        Some(&spec.body()),
    )
    .await?;
    created["_id"].as_str().map(str::to_owned).with_context(|| {
        format!(
            "creating workload group {} answered no _id: {created}",
            spec.name
        )
    })
}

/// The counters of one workload group in `GET /_wlm/stats`, summed over the nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct GroupCounters {
    /// Tasks of the group that ended, however they ended.
    pub total_completions: u64,
    /// Requests the node-tier throttle refused with 429.
    pub total_throttled: u64,
    /// Requests the throttle would have refused but only monitored.
    pub total_would_throttle: u64,
    /// Requests rejected for the group's resource limits.
    pub total_rejections: u64,
    /// Tasks cancelled for the group's resource limits.
    pub total_cancellations: u64,
    /// Requests admitted with a lease of the cluster-wide shared tier.
    #[serde(default)]
    pub total_shared_acquired: u64,
    /// Shared leases a node took from its idle cache instead of asking the owner.
    #[serde(default)]
    pub total_shared_reused: u64,
    /// Requests the shared tier refused.
    #[serde(default)]
    pub total_shared_throttled: u64,
    /// Requests admitted without a lease because no owner answered.
    #[serde(default)]
    pub total_shared_fail_open: u64,
}

impl GroupCounters {
    /// Returns how much each counter grew from `before` to `self`.
    pub fn since(&self, before: &GroupCounters) -> GroupCounters {
        GroupCounters {
            total_completions: self
                .total_completions
                .saturating_sub(before.total_completions),
            total_throttled: self.total_throttled.saturating_sub(before.total_throttled),
            total_would_throttle: self
                .total_would_throttle
                .saturating_sub(before.total_would_throttle),
            total_rejections: self
                .total_rejections
                .saturating_sub(before.total_rejections),
            total_cancellations: self
                .total_cancellations
                .saturating_sub(before.total_cancellations),
            total_shared_acquired: self
                .total_shared_acquired
                .saturating_sub(before.total_shared_acquired),
            total_shared_reused: self
                .total_shared_reused
                .saturating_sub(before.total_shared_reused),
            total_shared_throttled: self
                .total_shared_throttled
                .saturating_sub(before.total_shared_throttled),
            total_shared_fail_open: self
                .total_shared_fail_open
                .saturating_sub(before.total_shared_fail_open),
        }
    }
}

/// Reads `GET /_wlm/stats` and returns the counters of each group in `ids`.
///
/// # Cancel safety
///
/// Dropping the future abandons the request; nothing else is affected.
pub async fn group_counters(
    target: &HttpTarget,
    ids: &[&str],
) -> Result<BTreeMap<String, GroupCounters>> {
    let stats = send(target, reqwest::Method::GET, "_wlm/stats", None).await?;
    counters_of(&stats, ids)
}

/// Waits (up to ten seconds) until the node behind `target` has every group of `ids` in its
/// view (`GET _wlm/_local/stats`): a group created on another node of a cluster reaches it
/// within a second.
///
/// # Cancel safety
///
/// Dropping the future abandons the wait; nothing else is affected.
pub async fn wait_for_groups(target: &HttpTarget, ids: &[&str]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let stats = send(target, reqwest::Method::GET, "_wlm/_local/stats", None).await?;
        if counters_of(&stats, ids).is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{} never showed the benchmark's groups {ids:?} in _wlm/_local/stats",
                target.base_url
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Sums each group's counters over the node objects of a `_wlm/stats` answer.
fn counters_of(stats: &Value, ids: &[&str]) -> Result<BTreeMap<String, GroupCounters>> {
    let nodes: Vec<&Value> = stats
        .as_object()
        .context("the _wlm/stats answer is not an object")?
        .iter()
        .filter(|(key, _)| *key != "_nodes" && *key != "cluster_name")
        .map(|(_, node)| node)
        .collect();
    let mut counters = BTreeMap::new();
    for &id in ids {
        let mut sum = GroupCounters::default();
        let mut seen = false;
        for node in &nodes {
            let Some(group) = node["workload_groups"].get(id) else {
                continue;
            };
            let on_node: GroupCounters =
                serde_json::from_value(group.clone()).with_context(|| {
                    format!("the _wlm/stats counters of group {id} are malformed: {group}")
                })?;
            sum.total_completions += on_node.total_completions;
            sum.total_throttled += on_node.total_throttled;
            sum.total_would_throttle += on_node.total_would_throttle;
            sum.total_rejections += on_node.total_rejections;
            sum.total_cancellations += on_node.total_cancellations;
            sum.total_shared_acquired += on_node.total_shared_acquired;
            sum.total_shared_reused += on_node.total_shared_reused;
            sum.total_shared_throttled += on_node.total_shared_throttled;
            sum.total_shared_fail_open += on_node.total_shared_fail_open;
            seen = true;
        }
        if !seen {
            bail!("the _wlm/stats answer has no workload group {id}: {stats}");
        }
        counters.insert(id.to_owned(), sum);
    }
    Ok(counters)
}

/// Sends one JSON request to `path` and returns the JSON answer; fails unless it is 2xx.
///
/// # Cancel safety
///
/// Dropping the future abandons the request; it may or may not take effect.
pub async fn send(
    target: &HttpTarget,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Value> {
    let url = target.url(path);
    let mut request = target.client.request(method.clone(), url.clone());
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("{method} {url} failed"))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .with_context(|| format!("reading the answer of {method} {url} failed"))?;
    if !status.is_success() {
        bail!("{method} {url} answered {status}: {text}");
    }
    serde_json::from_str(&text)
        .with_context(|| format!("{method} {url} did not answer JSON: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_throttled_group_body_carries_a_group_attribute_limit() {
        let spec = GroupSpec {
            name: "bench",
            node_limit: Some(100_000),
            shared_limit: None,
        };
        assert_eq!(
            spec.body(),
            json!({"name": "bench", "resiliency_mode": "enforced",
                   "resource_limits": {"memory": 0.4},
                   "throttling": {"attribute": "group", "node_limit": 100_000}})
        );
        let unthrottled = GroupSpec {
            name: "bench",
            node_limit: None,
            shared_limit: None,
        };
        assert!(unthrottled.body().get("throttling").is_none());
    }

    #[test]
    fn test_tag_headers_name_the_group_case_insensitively() {
        let headers = tag_headers("abc123").unwrap();
        assert_eq!(headers.get("workloadGroupId").unwrap(), "abc123");
        assert!(tag_headers("bad\nid").is_err());
    }

    #[test]
    fn test_counters_are_summed_over_nodes_and_missing_groups_fail() {
        let stats = json!({
            "_nodes": {"total": 2, "successful": 2, "failed": 0},
            "cluster_name": "sluice",
            "node-a": {"workload_groups": {
                "g1": {"total_completions": 10, "total_throttled": 1, "total_would_throttle": 0,
                       "total_rejections": 0, "total_cancellations": 0, "executing": 3},
                "DEFAULT_WORKLOAD_GROUP": {"total_completions": 5, "total_throttled": 0,
                       "total_would_throttle": 0, "total_rejections": 0, "total_cancellations": 0}
            }},
            "node-b": {"workload_groups": {
                "g1": {"total_completions": 7, "total_throttled": 2, "total_would_throttle": 4,
                       "total_rejections": 1, "total_cancellations": 0}
            }}
        });
        let counters = counters_of(&stats, &["g1", DEFAULT_GROUP_ID]).unwrap();
        assert_eq!(
            counters["g1"],
            GroupCounters {
                total_completions: 17,
                total_throttled: 3,
                total_would_throttle: 4,
                total_rejections: 1,
                total_cancellations: 0,
                ..GroupCounters::default()
            }
        );
        assert_eq!(counters[DEFAULT_GROUP_ID].total_completions, 5);
        let error = counters_of(&stats, &["g2"]).unwrap_err().to_string();
        assert!(error.contains("no workload group g2"), "{error}");
    }

    #[test]
    fn test_since_subtracts_and_never_wraps() {
        let before = GroupCounters {
            total_completions: 10,
            total_throttled: 2,
            ..GroupCounters::default()
        };
        let after = GroupCounters {
            total_completions: 25,
            total_throttled: 2,
            ..GroupCounters::default()
        };
        let delta = after.since(&before);
        assert_eq!((delta.total_completions, delta.total_throttled), (15, 0));
        assert_eq!(before.since(&after).total_completions, 0);
    }
}
