//! The `wait_for_*` parameters of `_cluster/health`: what a health request waits for, read as
//! OpenSearch's `RestClusterHealthAction` reads them, and whether a health document meets it
//! (OpenSearch's `TransportClusterHealthAction` conditions). The waiting itself is the
//! handler's ([`crate::api::cluster::health`]).
//!
//! - `wait_for_status` (`green`, `yellow`, `red`): the status is that or better;
//! - `wait_for_nodes` (`N`, `>=N`, `<=N`, `>N`, `<N`, `ge(N)`, `le(N)`, `gt(N)`, `lt(N)`): the
//!   number of nodes compares so;
//! - `wait_for_active_shards` (a number or `all`): that many shard copies are active (`all`:
//!   none is unassigned or initializing);
//! - `wait_for_no_relocating_shards`, `wait_for_no_initializing_shards`,
//!   `wait_for_events` (a priority): met at once, as sluice never relocates or initializes a
//!   shard and has no queue of cluster-state updates; their values are still checked;
//! - `timeout` (default 30 s): how long to wait before answering with `timed_out: true`
//!   (and 408).
//!
//! A value OpenSearch cannot parse is refused with its words (400); a `wait_for_nodes` that is
//! none of the forms above is refused too, where OpenSearch would wait out its timeout for a
//! count that can never match.

use std::time::Duration;

use serde_json::Value;
use sluice_engine::EngineError;
use sluice_engine::settings::bool_param;

use crate::http::Params;

/// OpenSearch's default health `timeout`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A cluster health status, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Green,
    Yellow,
    Red,
}

impl Status {
    fn parse(s: &str) -> Option<Status> {
        match s.to_ascii_lowercase().as_str() {
            "green" => Some(Status::Green),
            "yellow" => Some(Status::Yellow),
            "red" => Some(Status::Red),
            _ => None,
        }
    }
}

/// How `wait_for_nodes` compares the number of nodes with its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    Eq,
    Ge,
    Le,
    Gt,
    Lt,
}

/// `wait_for_active_shards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ActiveShards {
    All,
    AtLeast(u64),
}

/// What a health request waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthWait {
    /// The request names indices (`_cluster/health/{index}`): they must all exist.
    indices: bool,
    status: Option<Status>,
    nodes: Option<(Compare, u64)>,
    active_shards: Option<ActiveShards>,
    /// How long to wait before answering `timed_out`.
    pub timeout: Duration,
}

impl HealthWait {
    /// Reads the parameters of a request that names indices or not (`indices`: as in
    /// OpenSearch, the indices named existing is one more condition); `None` when the request
    /// waits for nothing (no condition that can be unmet), so it is answered at once.
    pub fn from_params(params: &Params, indices: bool) -> Result<Option<HealthWait>, EngineError> {
        let status = match params.get("wait_for_status") {
            None => None,
            Some(s) => Some(Status::parse(s).ok_or_else(|| {
                EngineError::illegal_argument(format!("unknown cluster health status [{s}]"))
            })?),
        };
        let nodes = match params.get("wait_for_nodes").map(String::as_str) {
            None | Some("") => None,
            Some(v) => Some(parse_nodes(v)?),
        };
        let active_shards = match params.get("wait_for_active_shards").map(String::as_str) {
            None => None,
            Some("all") => Some(ActiveShards::All),
            Some(v) => match v.parse::<i64>() {
                Ok(0) => None,
                Ok(n) if n < 0 => {
                    return Err(EngineError::illegal_argument(
                        "shard count cannot be a negative value",
                    ));
                }
                Ok(n) => Some(ActiveShards::AtLeast(n.unsigned_abs())),
                Err(_) => {
                    return Err(EngineError::illegal_argument(format!(
                        "cannot parse ActiveShardCount[{v}]"
                    )));
                }
            },
        };
        // Always met here, but checked as OpenSearch checks them.
        bool_param(params, "wait_for_no_relocating_shards")?;
        bool_param(params, "wait_for_no_initializing_shards")?;
        if let Some(priority) = params.get("wait_for_events") {
            const PRIORITIES: [&str; 6] =
                ["immediate", "urgent", "high", "normal", "low", "languid"];
            if !PRIORITIES.iter().any(|p| p.eq_ignore_ascii_case(priority)) {
                return Err(EngineError::illegal_argument(format!(
                    "No enum constant org.opensearch.common.Priority.{}",
                    priority.to_ascii_uppercase()
                )));
            }
        }
        // `-1` (no timeout in OpenSearch's words) times out at once there, as here.
        let timeout = match params.get("timeout") {
            None => DEFAULT_TIMEOUT,
            Some(v) => sluice_wire::parse_time_value(v, "timeout")
                .map_err(sluice_wire::OpenSearchError::from)?
                .duration_opt()
                .unwrap_or(Duration::ZERO),
        };
        if !indices && status.is_none() && nodes.is_none() && active_shards.is_none() {
            return Ok(None);
        }
        Ok(Some(HealthWait {
            indices,
            status,
            nodes,
            active_shards,
            timeout,
        }))
    }

    /// Whether `health` (a `_cluster/health` document), with `exist` whether every index the
    /// request named exists, meets every condition.
    pub fn met(&self, health: &Value, exist: bool) -> bool {
        let int = |key: &str| health[key].as_u64().unwrap_or(0);
        let status_met = self.status.is_none_or(|wanted| {
            health["status"]
                .as_str()
                .and_then(Status::parse)
                .is_some_and(|now| now <= wanted)
        });
        let nodes_met = self.nodes.is_none_or(|(compare, count)| {
            let n = int("number_of_nodes");
            match compare {
                Compare::Eq => n == count,
                Compare::Ge => n >= count,
                Compare::Le => n <= count,
                Compare::Gt => n > count,
                Compare::Lt => n < count,
            }
        });
        let shards_met = self.active_shards.is_none_or(|wanted| match wanted {
            ActiveShards::All => int("unassigned_shards") == 0 && int("initializing_shards") == 0,
            ActiveShards::AtLeast(n) => int("active_shards") >= n,
        });
        (!self.indices || exist) && status_met && nodes_met && shards_met
    }
}

/// `wait_for_nodes`: a count, optionally after `>=`, `<=`, `>`, `<`, or inside `ge()`,
/// `le()`, `gt()`, `lt()`.
fn parse_nodes(v: &str) -> Result<(Compare, u64), EngineError> {
    let (compare, count) = if let Some(n) = v.strip_prefix(">=") {
        (Compare::Ge, n)
    } else if let Some(n) = v.strip_prefix("<=") {
        (Compare::Le, n)
    } else if let Some(n) = v.strip_prefix('>') {
        (Compare::Gt, n)
    } else if let Some(n) = v.strip_prefix('<') {
        (Compare::Lt, n)
    } else if let Some(n) = function(v, "ge") {
        (Compare::Ge, n)
    } else if let Some(n) = function(v, "le") {
        (Compare::Le, n)
    } else if let Some(n) = function(v, "gt") {
        (Compare::Gt, n)
    } else if let Some(n) = function(v, "lt") {
        (Compare::Lt, n)
    } else {
        (Compare::Eq, v)
    };
    let count = count.trim().parse::<u64>().map_err(|_| {
        EngineError::illegal_argument(format!(
            "cannot parse wait_for_nodes [{v}]: expected a number of nodes, optionally after \
             >=, <=, > or <, or inside ge(), le(), gt() or lt()"
        ))
    })?;
    Ok((compare, count))
}

/// The argument of `name(…)` in `v`.
fn function<'a>(v: &'a str, name: &str) -> Option<&'a str> {
    v.strip_prefix(name)?.strip_prefix('(')?.strip_suffix(')')
}

#[cfg(test)]
mod tests {
    use crate::http::params_of as params;
    use serde_json::json;

    use super::*;

    fn wait(pairs: &[(&str, &str)]) -> HealthWait {
        HealthWait::from_params(&params(pairs), false)
            .expect("valid")
            .expect("waits")
    }

    fn health(status: &str, nodes: u64, active: u64, unassigned: u64) -> Value {
        json!({"status": status, "number_of_nodes": nodes, "active_shards": active,
               "unassigned_shards": unassigned, "initializing_shards": 0})
    }

    #[test]
    fn test_no_condition_waits_for_nothing() {
        for p in [
            vec![],
            vec![("timeout", "1s")],
            vec![("wait_for_no_relocating_shards", "true")],
            vec![("wait_for_events", "languid")],
            vec![("wait_for_active_shards", "0")],
            vec![("wait_for_nodes", "")],
        ] {
            assert_eq!(
                HealthWait::from_params(&params(&p), false).unwrap(),
                None,
                "{p:?}"
            );
        }
    }

    #[test]
    fn test_status_is_met_by_that_status_or_better() {
        let yellow = wait(&[("wait_for_status", "yellow")]);
        assert!(yellow.met(&health("green", 1, 1, 0), true));
        assert!(yellow.met(&health("yellow", 1, 1, 1), true));
        assert!(!yellow.met(&health("red", 1, 0, 1), true));
        let green = wait(&[("wait_for_status", "GREEN")]);
        assert!(!green.met(&health("yellow", 1, 1, 1), true));
    }

    #[test]
    fn test_nodes_forms() {
        let cases = [
            ("2", [false, true, false]),
            (">=2", [false, true, true]),
            ("ge(2)", [false, true, true]),
            ("<=2", [true, true, false]),
            ("le(2)", [true, true, false]),
            (">2", [false, false, true]),
            ("gt(2)", [false, false, true]),
            ("<2", [true, false, false]),
            ("lt(2)", [true, false, false]),
        ];
        for (form, expected) in cases {
            let w = wait(&[("wait_for_nodes", form)]);
            let got: Vec<bool> = (1..=3)
                .map(|n| w.met(&health("green", n, 0, 0), true))
                .collect();
            assert_eq!(got, expected, "{form}");
        }
    }

    #[test]
    fn test_active_shards() {
        let two = wait(&[("wait_for_active_shards", "2")]);
        assert!(!two.met(&health("yellow", 1, 1, 1), true));
        assert!(two.met(&health("yellow", 1, 2, 2), true));
        let all = wait(&[("wait_for_active_shards", "all")]);
        assert!(!all.met(&health("yellow", 1, 2, 2), true));
        assert!(all.met(&health("green", 1, 2, 0), true));
    }

    #[test]
    fn test_named_indices_must_exist() {
        let w = HealthWait::from_params(&params(&[]), true)
            .unwrap()
            .expect("naming indices is a condition");
        assert!(w.met(&health("green", 1, 1, 0), true));
        assert!(!w.met(&health("red", 1, 0, 0), false));
    }

    #[test]
    fn test_minus_one_timeout_times_out_at_once() {
        assert_eq!(
            wait(&[("wait_for_status", "green"), ("timeout", "-1")]).timeout,
            Duration::ZERO
        );
    }

    #[test]
    fn test_timeout_defaults_to_thirty_seconds() {
        assert_eq!(
            wait(&[("wait_for_status", "green")]).timeout,
            Duration::from_secs(30)
        );
        assert_eq!(
            wait(&[("wait_for_status", "green"), ("timeout", "250ms")]).timeout,
            Duration::from_millis(250)
        );
    }

    #[test]
    fn test_bad_values_are_refused_naming_them() {
        for (p, reason) in [
            (
                ("wait_for_status", "blue"),
                "unknown cluster health status [blue]",
            ),
            (
                ("wait_for_nodes", ">=x"),
                "cannot parse wait_for_nodes [>=x]",
            ),
            (
                ("wait_for_nodes", "ge(2"),
                "cannot parse wait_for_nodes [ge(2]",
            ),
            (
                ("wait_for_active_shards", "most"),
                "cannot parse ActiveShardCount[most]",
            ),
            (
                ("wait_for_active_shards", "ALL"),
                "cannot parse ActiveShardCount[ALL]",
            ),
            (
                ("wait_for_active_shards", "-1"),
                "shard count cannot be a negative value",
            ),
            (
                ("wait_for_no_relocating_shards", "yes"),
                "Failed to parse value [yes] as only [true] or [false] are allowed.",
            ),
            (
                ("wait_for_events", "soon"),
                "No enum constant org.opensearch.common.Priority.SOON",
            ),
            (
                ("timeout", "1.5s"),
                "fractional time values are not supported",
            ),
        ] {
            let err = HealthWait::from_params(&params(&[p]), false).unwrap_err();
            assert!(err.reason.contains(reason), "{p:?}: {}", err.reason);
        }
    }
}
