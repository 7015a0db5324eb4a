//! OpenSearch's action timeouts as URL parameters: `timeout` (how long an action waits for its
//! acknowledgement or its work) and the cluster-manager timeouts of cluster-state actions,
//! `cluster_manager_timeout` and its deprecated name `master_timeout`. OpenSearch's handlers
//! read each as a time value (`RestRequest.paramAsTime`) wherever their route takes it, and
//! refuse, 400 `illegal_argument_exception`, a value that is not one. sluice acts on some of
//! them (a health wait's or a task cancel's `timeout`) and on none of the cluster-manager
//! timeouts (it has no elected cluster manager to wait for); it still refuses every value
//! OpenSearch would refuse, so that a request sluice takes is one OpenSearch takes too, and a
//! typo (`timeout=30` without a unit) is an error, not ignored.
//!
//! Checked by the route layer ([`crate::http::unrecognized::check_route`]) on every route the
//! table of known parameters lists (`timeout` only where the route takes it), and by the
//! handlers that answer such a route without the layer (a workload group's delete;
//! `_cluster/settings` on a gateway).

use sluice_engine::EngineError;

use crate::http::Params;

/// The cluster-manager timeouts, in the order OpenSearch reads them (the current name, then
/// the deprecated one), so that a request with both wrong is refused for the first, as
/// OpenSearch does.
pub const CLUSTER_MANAGER: [&str; 2] = ["cluster_manager_timeout", "master_timeout"];

/// The action's own timeout. OpenSearch's handlers read it before the cluster-manager timeout
/// (a create index sets the request's `timeout`, then its `clusterManagerNodeTimeout`).
pub const TIMEOUT: &str = "timeout";

/// Refuses `params` when one of the timeouts in it is not a time value, naming it:
/// `failed to parse setting [master_timeout] with value [abc] as a time value: unit is missing
/// or unrecognized`. `timeout` is checked only when the route takes it (`takes_timeout`):
/// where it does not, it is an unknown parameter, refused as such.
pub fn refuse_unparsable(params: &Params, takes_timeout: bool) -> Result<(), EngineError> {
    let own = takes_timeout.then_some(TIMEOUT);
    for name in own.into_iter().chain(CLUSTER_MANAGER) {
        if let Some(value) = params.get(name) {
            sluice_wire::parse_time_value(value, name)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::params_of;

    #[test]
    fn test_time_values_pass_and_other_values_are_refused_by_name() {
        for ok in ["30s", "1m", "-1", "0", "500ms"] {
            for name in CLUSTER_MANAGER.into_iter().chain([TIMEOUT]) {
                assert!(
                    refuse_unparsable(&params_of(&[(name, ok)]), true).is_ok(),
                    "{name}={ok}"
                );
            }
        }
        let err = refuse_unparsable(&params_of(&[("master_timeout", "abc")]), false).unwrap_err();
        assert_eq!(
            err.reason,
            "failed to parse setting [master_timeout] with value [abc] as a time value: unit is missing or unrecognized"
        );
        assert_eq!(err.status(), 400);
        let err = refuse_unparsable(
            &params_of(&[("master_timeout", "x"), ("cluster_manager_timeout", "30")]),
            false,
        )
        .unwrap_err();
        assert!(
            err.reason.contains("[cluster_manager_timeout]"),
            "the current name is read first: {}",
            err.reason
        );
    }

    #[test]
    fn test_the_actions_own_timeout_is_read_first_and_only_where_the_route_takes_it() {
        let both = params_of(&[("timeout", "30"), ("cluster_manager_timeout", "x")]);
        let err = refuse_unparsable(&both, true).unwrap_err();
        assert_eq!(
            err.reason,
            "failed to parse setting [timeout] with value [30] as a time value: unit is missing or unrecognized"
        );
        let err = refuse_unparsable(&both, false).unwrap_err();
        assert!(
            err.reason.contains("[cluster_manager_timeout]"),
            "{}",
            err.reason
        );
        assert!(refuse_unparsable(&params_of(&[("timeout", "abc")]), false).is_ok());
    }
}
