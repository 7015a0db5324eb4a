//! The registry: every dynamic cluster setting sluice knows ([`SETTINGS`]), the checks of
//! single values whose rule the bounds do not express, and the lookups built from the table.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use super::keys;
use super::values::{Kind, SettingDef, SettingValue, parse_value};

/// Every dynamic cluster setting sluice knows; a key not here is "not recognized".
///
/// Bounds and defaults are OpenSearch's (`SearchService`, `MultiBucketConsumerService`).
pub static SETTINGS: &[SettingDef] = &[
    SettingDef {
        key: keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL,
        kind: Kind::Time { min: None },
        default: "-1",
        check: None,
        doc: "Cancels a search task that has run longer than this; -1 (the default) never cancels. \
              A request's own cancel_after_time_interval overrides it.",
    },
    SettingDef {
        key: keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT,
        kind: Kind::Integer {
            min: 0,
            max: i32::MAX as i64,
        },
        default: "500",
        check: None,
        doc: "The most scroll contexts that may be open on the node at once; a scroll search \
              beyond it is rejected until others are cleared or expire.",
    },
    SettingDef {
        key: keys::SEARCH_DEFAULT_KEEP_ALIVE,
        kind: Kind::Time {
            min: Some(Duration::ZERO),
        },
        default: "5m",
        check: None,
        doc: "How long a scroll context stays open when the request gives no keep-alive. \
              Must not exceed search.max_keep_alive.",
    },
    SettingDef {
        key: keys::SEARCH_MAX_KEEP_ALIVE,
        kind: Kind::Time {
            min: Some(Duration::ZERO),
        },
        default: "24h",
        check: None,
        doc: "The longest keep-alive a scroll request may ask for; longer ones are rejected. \
              Must be at least search.default_keep_alive.",
    },
    SettingDef {
        key: keys::SEARCH_MAX_BUCKETS,
        kind: Kind::Integer {
            min: 0,
            max: i32::MAX as i64,
        },
        default: "65535",
        check: None,
        doc: "The most aggregation buckets a single search may create; a search that needs more \
              fails with too_many_buckets_exception.",
    },
    SettingDef {
        key: keys::WLM_MODE,
        kind: Kind::Enum(&["enabled", "monitor_only", "disabled"]),
        default: "monitor_only",
        check: None,
        doc: "Workload management mode: enabled throttles, rejects and cancels; monitor_only \
              (the default) only counts and logs what it would do; disabled evaluates nothing. \
              Group CRUD works in every mode.",
    },
    SettingDef {
        key: keys::WLM_CPU_REJECTION_THRESHOLD,
        kind: Kind::Double { min: 0.0, max: 0.9 },
        default: "0.8",
        check: Some(check_rejection_threshold),
        doc: "Node CPU usage (fraction of all cores) above which new requests of groups over \
              their cpu limit are rejected. At most the cpu cancellation threshold.",
    },
    SettingDef {
        key: keys::WLM_CPU_CANCELLATION_THRESHOLD,
        kind: Kind::Double {
            min: 0.0,
            max: 0.95,
        },
        default: "0.9",
        check: Some(check_cancellation_threshold),
        doc: "Node CPU usage (fraction of all cores) above which running tasks of groups over \
              their cpu limit are cancelled. At least the cpu rejection threshold.",
    },
    SettingDef {
        key: keys::WLM_MEMORY_REJECTION_THRESHOLD,
        kind: Kind::Double { min: 0.0, max: 0.9 },
        default: "0.8",
        check: Some(check_rejection_threshold),
        doc: "Node heap usage (fraction) above which new requests of groups over their memory \
              limit are rejected. At most the memory cancellation threshold.",
    },
    SettingDef {
        key: keys::WLM_MEMORY_CANCELLATION_THRESHOLD,
        kind: Kind::Double {
            min: 0.0,
            max: 0.95,
        },
        default: "0.9",
        check: Some(check_cancellation_threshold),
        doc: "Node heap usage (fraction) above which running tasks of groups over their memory \
              limit are cancelled. At least the memory rejection threshold.",
    },
    SettingDef {
        key: keys::WLM_ENFORCEMENT_INTERVAL,
        kind: Kind::Integer {
            min: 1000,
            max: i64::MAX,
        },
        default: "1000",
        check: None,
        doc: "Milliseconds between two runs of the enforcement loop (at least 1000). The loop \
              re-reads it before each wait, so a change applies from the next run on (OpenSearch \
              needs a restart).",
    },
    SettingDef {
        key: keys::WLM_USAGE_REFRESH_INTERVAL,
        kind: Kind::Integer {
            min: 10,
            max: i64::MAX,
        },
        default: "100",
        check: None,
        doc: "Milliseconds between two refreshes of each group's usage (current_usage), which the \
              admission check compares with the group's limit (at least 10; used as at most \
              wlm.workload_group.enforcement_interval). Sluice's own setting: OpenSearch \
              measures usage only at each enforcement run, so a group over its share is let \
              back in for up to a whole interval. Cancellation and duress still advance once \
              per enforcement run.",
    },
    SettingDef {
        key: keys::WLM_SHARED_ACQUIRE_TIMEOUT,
        kind: Kind::Time {
            min: Some(Duration::from_millis(1)),
        },
        default: "200ms",
        check: Some(check_shared_acquire_timeout),
        doc: "How long a node waits for the owner of a bucket's cluster-wide pool \
              (throttling.shared_limit) to answer before it admits the request without a lease \
              (fails open, counted in total_shared_fail_open); 1ms to 1m. Sluice's own setting, \
              like the timeout of Envoy's global rate-limit call: raise it on a slow or loaded \
              network, where an owner's answer can take longer than the default's 200ms.",
    },
    SettingDef {
        key: keys::WLM_ESTIMATE_UNMEASURED_TASKS,
        kind: Kind::Bool,
        default: "true",
        check: None,
        doc: "Whether the admission check adds, to a group's last recorded usage, each of its \
              tasks admitted since and not yet measured, at what one finished task of the group \
              used (sluice's own setting). Without it a burst that arrives while the group is \
              under its share is admitted whole: its tasks measure 0 until a refresh samples \
              them. With it, a group of CPU-bound searches (about one core each) runs at most \
              floor(rejection threshold x limit x cores) + 1 at once. false compares the last \
              recorded usage alone, as OpenSearch does.",
    },
    SettingDef {
        key: keys::WLM_DURESS_STREAK,
        kind: Kind::Integer {
            min: 3,
            max: i32::MAX as i64,
        },
        default: "3",
        check: None,
        doc: "How many consecutive enforcement runs must see usage over a threshold before the \
              node counts as in duress (at least 3).",
    },
    SettingDef {
        key: keys::WLM_MAX_GROUP_COUNT,
        kind: Kind::Integer { min: 1, max: 100 },
        default: "100",
        check: Some(check_max_group_count),
        doc: "The most workload groups the node holds (1 to 100); creating one more fails with \
              429 rejected_execution_exception.",
    },
    SettingDef {
        key: keys::WLM_AUTOTAGGING_MAX_RULES,
        kind: Kind::Integer { min: 10, max: 500 },
        default: "200",
        check: None,
        doc: "The most auto-tagging rules the cluster holds (10 to 500); creating one more fails \
              with 429, naming the limit.",
    },
];

/// The largest accepted rejection threshold; OpenSearch keeps headroom so rejection starts
/// before the node is too loaded to answer.
const MAX_REJECTION_THRESHOLD: f64 = 0.9;

/// The largest accepted cancellation threshold; above it a node may drop out before
/// cancellation frees anything (OpenSearch's bound).
const MAX_CANCELLATION_THRESHOLD: f64 = 0.95;

/// A WLM node threshold in `0..=max`, with OpenSearch's messages (`WorkloadManagementSettings`).
fn check_threshold(
    key: &str,
    value: &SettingValue,
    max: f64,
    max_text: &str,
) -> Result<(), String> {
    let SettingValue::Double(x) = *value else {
        return Ok(());
    };
    if x.is_nan() {
        return Err(format!(
            "{key} value must be a number from 0 to {max_text}, got NaN"
        ));
    }
    if x < 0.0 {
        return Err(format!("{key} value cannot be negative"));
    }
    if x > max {
        return Err(format!(
            "{key} value cannot be greater than {max_text} as it can result in a node drop"
        ));
    }
    Ok(())
}

/// `wlm.workload_group.node.*_rejection_threshold`: `0..=0.9`.
fn check_rejection_threshold(key: &str, value: &SettingValue) -> Result<(), String> {
    check_threshold(key, value, MAX_REJECTION_THRESHOLD, "0.9")
}

/// `wlm.workload_group.node.*_cancellation_threshold`: `0..=0.95`.
fn check_cancellation_threshold(key: &str, value: &SettingValue) -> Result<(), String> {
    check_threshold(key, value, MAX_CANCELLATION_THRESHOLD, "0.95")
}

/// The longest `wlm.workload_group.shared_acquire_timeout`: a request should not wait longer
/// than a minute on an owner that does not answer.
const MAX_SHARED_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(60);

/// `wlm.workload_group.shared_acquire_timeout`: at most [`MAX_SHARED_ACQUIRE_TIMEOUT`].
fn check_shared_acquire_timeout(key: &str, value: &SettingValue) -> Result<(), String> {
    match *value {
        SettingValue::Time(Some(d)) if d > MAX_SHARED_ACQUIRE_TIMEOUT => Err(format!(
            "failed to parse value [{}] for setting [{key}], must be <= [1m]",
            sluice_wire::format_time_value_exact(d)
        )),
        _ => Ok(()),
    }
}

/// `node.workload_group.max_count`: `1..=100`, with OpenSearch's message.
fn check_max_group_count(_key: &str, value: &SettingValue) -> Result<(), String> {
    match *value {
        SettingValue::Integer(n) => sluice_core::check_max_count_setting(n)
            .map(|_| ())
            .map_err(|e| e.message().to_string()),
        _ => Ok(()),
    }
}

/// Position of each key in [`SETTINGS`], built once. Looked up whenever a setting is read by
/// name, several times a tagged search: foldhash, not std's SipHash (some 370 instructions a
/// look-up). The keys are this table's own.
pub(super) static INDEX: LazyLock<HashMap<&'static str, usize, foldhash::fast::RandomState>> =
    LazyLock::new(|| {
        SETTINGS
            .iter()
            .enumerate()
            .map(|(i, d)| (d.key, i))
            .collect()
    });

/// Parsed defaults of every setting, in [`SETTINGS`] order, built once.
pub(super) static DEFAULTS: LazyLock<Vec<SettingValue>> = LazyLock::new(|| {
    SETTINGS
        .iter()
        .map(|d| match parse_value(d, d.default) {
            Ok(v) => v,
            Err(e) => panic!("the default of setting [{}] is invalid: {e}", d.key),
        })
        .collect()
});

/// The registered setting named `key`.
pub fn definition(key: &str) -> Option<&'static SettingDef> {
    INDEX.get(key).map(|&i| &SETTINGS[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::keys;
    use crate::settings::values::SettingValue;

    fn def(key: &str) -> &'static SettingDef {
        definition(key).expect("registered")
    }

    #[test]
    fn test_every_default_parses_and_keys_are_unique() {
        assert_eq!(DEFAULTS.len(), SETTINGS.len());
        assert_eq!(INDEX.len(), SETTINGS.len(), "duplicate key in SETTINGS");
        for d in SETTINGS {
            assert!(!d.doc.is_empty(), "{} has no documentation", d.key);
        }
    }

    #[test]
    fn test_time_values_parse_like_opensearch() {
        let d = def(keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL);
        let ok = |raw: &str| parse_value(d, raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
        let secs = |s: u64| SettingValue::Time(Some(Duration::from_secs(s)));
        assert_eq!(ok("30s"), secs(30));
        assert_eq!(
            ok("500ms"),
            SettingValue::Time(Some(Duration::from_millis(500)))
        );
        assert_eq!(ok("5m"), secs(300));
        assert_eq!(ok("2h"), secs(7200));
        assert_eq!(ok("1d"), secs(86400));
        assert_eq!(
            ok("7micros"),
            SettingValue::Time(Some(Duration::from_micros(7)))
        );
        assert_eq!(
            ok("9nanos"),
            SettingValue::Time(Some(Duration::from_nanos(9)))
        );
        assert_eq!(ok(" 10S "), secs(10));
        assert_eq!(ok("0"), secs(0));
        assert_eq!(ok("000"), secs(0));
        assert_eq!(ok("-1"), SettingValue::Time(None));
        assert_eq!(ok("-001"), SettingValue::Time(None));
        assert_eq!(ok("-1s"), SettingValue::Time(None));
        let err = |raw: &str| parse_value(d, raw).expect_err(raw);
        assert_eq!(
            err("30"),
            "failed to parse setting [search.cancel_after_time_interval] with value [30] as a time value: unit is missing or unrecognized"
        );
        assert_eq!(
            err("-5s"),
            "failed to parse setting [search.cancel_after_time_interval] with value [-5s] as a time value: negative durations are not supported"
        );
        // The one parser's rule and words, as for a request parameter or a group setting.
        assert_eq!(
            err("1.5s"),
            "failed to parse [1.5s], fractional time values are not supported"
        );
        assert_eq!(err("abcs"), "failed to parse [abcs]");
        assert!(err("").contains("unit is missing or unrecognized"));
        assert!(err("-2").contains("unit is missing or unrecognized"));
    }

    #[test]
    fn test_positive_time_settings_reject_negative_values() {
        let d = def(keys::SEARCH_DEFAULT_KEEP_ALIVE);
        assert_eq!(
            parse_value(d, "-1").expect_err("-1"),
            "failed to parse value [-1] for setting [search.default_keep_alive], must be >= [0ms]"
        );
        assert!(parse_value(d, "0s").is_ok());
    }

    #[test]
    fn test_integer_settings_enforce_bounds_with_opensearch_messages() {
        let d = def(keys::SEARCH_MAX_BUCKETS);
        assert_eq!(parse_value(d, "1000"), Ok(SettingValue::Integer(1000)));
        assert_eq!(parse_value(d, "+7"), Ok(SettingValue::Integer(7)));
        assert_eq!(parse_value(d, "0"), Ok(SettingValue::Integer(0)));
        assert_eq!(
            parse_value(d, "-5").expect_err("-5"),
            "Failed to parse value [-5] for setting [search.max_buckets] must be >= 0"
        );
        assert_eq!(
            parse_value(d, "2147483648").expect_err("too big"),
            "Failed to parse value [2147483648] for setting [search.max_buckets] must be <= 2147483647"
        );
        for bad in ["abc", "1.5", " 5", "", "1e3"] {
            assert_eq!(
                parse_value(d, bad).expect_err(bad),
                format!(
                    "Failed to parse value [{bad}] for setting [search.max_buckets]: expected a whole number from 0 to 2147483647"
                )
            );
        }
    }
}
