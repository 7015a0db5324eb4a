//! The cluster-manager timeouts of OpenSearch's cluster-state actions: `cluster_manager_timeout`
//! and its deprecated name `master_timeout`, which OpenSearch's handlers read as time values
//! (`RestRequest.paramAsTime`) and refuse, 400 `illegal_argument_exception`, when they are not
//! one. sluice has no elected cluster manager to wait for, so it acts on neither; it still
//! refuses a value OpenSearch would refuse, so that a request sluice takes is one OpenSearch
//! takes too, and a typo (`master_timeout=30` without a unit) is an error, not ignored.
//!
//! Checked by the route layer ([`crate::http::unrecognized::check_route`]) on every route the
//! table of known parameters lists, and by the handlers that answer such a route without the
//! layer (a workload group's delete; `_cluster/settings` on a gateway).

use sluice_engine::EngineError;

use crate::http::Params;

/// The two names, in the order OpenSearch reads them (the current name, then the deprecated
/// one), so that a request with both wrong is refused for the first, as OpenSearch does.
pub const PARAMS: [&str; 2] = ["cluster_manager_timeout", "master_timeout"];

/// Refuses `params` when a cluster-manager timeout in it is not a time value, naming it:
/// `failed to parse setting [master_timeout] with value [abc] as a time value: unit is missing
/// or unrecognized`.
pub fn refuse_unparsable(params: &Params) -> Result<(), EngineError> {
    for name in PARAMS {
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
            for name in PARAMS {
                assert!(
                    refuse_unparsable(&params_of(&[(name, ok)])).is_ok(),
                    "{name}={ok}"
                );
            }
        }
        let err = refuse_unparsable(&params_of(&[("master_timeout", "abc")])).unwrap_err();
        assert_eq!(
            err.reason,
            "failed to parse setting [master_timeout] with value [abc] as a time value: unit is missing or unrecognized"
        );
        assert_eq!(err.status(), 400);
        let err = refuse_unparsable(&params_of(&[
            ("master_timeout", "x"),
            ("cluster_manager_timeout", "30"),
        ]))
        .unwrap_err();
        assert!(
            err.reason.contains("[cluster_manager_timeout]"),
            "the current name is read first: {}",
            err.reason
        );
        assert!(refuse_unparsable(&params_of(&[("timeout", "abc")])).is_ok());
    }
}
