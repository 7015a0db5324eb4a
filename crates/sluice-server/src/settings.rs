//! Dynamic cluster settings, OpenSearch style: a registry of known settings ([`SETTINGS`]),
//! each with a key, a value [`Kind`] with its bounds, a default and documentation, and
//! [`ClusterSettings`], the node's current persistent and transient values.
//!
//! Values are kept and echoed as the strings the user sent (numbers become their decimal
//! text), as OpenSearch does; each is parsed and validated on the way in, and the effective
//! value of every setting — transient over persistent over default — is kept parsed in an
//! immutable [`SettingsSnapshot`], so a handler reads a typed value without parsing or
//! locking for more than an `Arc` clone:
//!
//! ```text
//! let max = st.cluster_settings.max_open_scroll_context();   // one value
//! let s = st.cluster_settings.snapshot();                    // several, consistent
//! let (d, m) = (s.default_keep_alive(), s.max_keep_alive());
//! ```
//!
//! An update ([`ClusterSettings::apply`]) validates every key and value, then the merged
//! result as a whole ([`CROSS_CHECKS`]), and only then saves the persistent values to the
//! metastore (one document, compare-and-set on its version) and publishes the new snapshot.
//! Transient values live in memory only and are gone after a restart, as in OpenSearch.
//!
//! Adding a setting is one entry in [`SETTINGS`] (plus a key constant in [`keys`]); a typed
//! accessor on [`SettingsSnapshot`] is optional sugar.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde_json::{Map, Value};
use sluice_engine::EngineError;
use sluice_meta::{Collection, Expect, MetaError, MetaStore};
use sluice_wire::{
    format_time_value, format_time_value_exact, java_double, parse_java_long, parse_time_value,
};
use tokio::sync::watch;

/// The keys of the dynamic cluster settings, as users write them (defined in
/// [`sluice_wire::keys`], shared with the group settings bags).
pub mod keys {
    pub use sluice_wire::keys::{
        SEARCH_CANCEL_AFTER_TIME_INTERVAL, SEARCH_DEFAULT_KEEP_ALIVE, SEARCH_MAX_BUCKETS,
        SEARCH_MAX_KEEP_ALIVE, SEARCH_MAX_OPEN_SCROLL_CONTEXT, WLM_CPU_CANCELLATION_THRESHOLD,
        WLM_CPU_REJECTION_THRESHOLD, WLM_DURESS_STREAK, WLM_ENFORCEMENT_INTERVAL,
        WLM_ESTIMATE_UNMEASURED_TASKS, WLM_MAX_GROUP_COUNT, WLM_MEMORY_CANCELLATION_THRESHOLD,
        WLM_MEMORY_REJECTION_THRESHOLD, WLM_MODE, WLM_USAGE_REFRESH_INTERVAL,
    };
}

/// OpenSearch's prefix for settings it no longer recognises after an upgrade; a reset of
/// such a key (`"archived.x": null`) is accepted so that old clean-up scripts keep working.
const ARCHIVED_PREFIX: &str = "archived.";

/// The metastore document (in [`Collection::ClusterSettings`]) holding every persistent
/// setting as one flat object `{"key": "value", …}`; one document, so one compare-and-set
/// covers a whole update and the merged result stays valid.
pub const PERSISTENT_DOC: &str = "persistent";

/// What a setting's value is, with its bounds.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A time value: a whole number with a unit (`nanos`, `micros`, `ms`, `s`, `m`, `h`,
    /// `d`), `0`, or `-1`. With `min` (OpenSearch `positiveTimeSetting` is `min: 0`) smaller
    /// values, `-1` included, are rejected; without it `-1` means "disabled".
    Time {
        /// Smallest accepted value.
        min: Option<Duration>,
    },
    /// A whole number in `min..=max` (OpenSearch `intSetting` / `longSetting`).
    Integer {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A floating-point number in `min..=max` (OpenSearch `doubleSetting`).
    Double {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
    /// `true` or `false`, nothing else.
    Bool,
    /// One of a fixed list of words, matched exactly.
    Enum(&'static [&'static str]),
}

/// A parsed setting value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SettingValue {
    /// A time value; `None` for a negative one (`-1`: disabled).
    Time(Option<Duration>),
    /// A whole number.
    Integer(i64),
    /// A floating-point number.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// One of the setting's allowed words.
    Enum(&'static str),
}

/// A check of one setting's parsed value beyond its [`Kind`] bounds, returning
/// OpenSearch's message on failure.
pub type ValueCheck = fn(key: &str, value: &SettingValue) -> Result<(), String>;

/// One registered dynamic setting.
#[derive(Debug)]
pub struct SettingDef {
    /// The key users write.
    pub key: &'static str,
    /// Its value kind and bounds.
    pub kind: Kind,
    /// The default, in the text form the API echoes.
    pub default: &'static str,
    /// An extra check of the parsed value, for settings whose rule or message the bounds do
    /// not express. For numbers it runs before the [`Kind`] bounds, so it can word them.
    pub check: Option<ValueCheck>,
    /// What the setting does, for operators.
    pub doc: &'static str,
}

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

/// `node.workload_group.max_count`: `1..=100`, with OpenSearch's message.
fn check_max_group_count(_key: &str, value: &SettingValue) -> Result<(), String> {
    match *value {
        SettingValue::Integer(n) => sluice_core::check_max_count_setting(n)
            .map(|_| ())
            .map_err(|e| e.message().to_string()),
        _ => Ok(()),
    }
}

/// A check over the merged effective settings (transient over persistent over defaults),
/// for rules that tie settings together; returns OpenSearch's message on failure.
pub type CrossCheck = fn(&SettingsSnapshot) -> Result<(), String>;

/// The rules between settings, run on the merged result of every update before anything is
/// saved, so that changing both sides of a rule in one request works.
pub static CROSS_CHECKS: &[CrossCheck] = &[check_keep_alives, check_wlm_thresholds];

/// For each resource, the WLM cancellation threshold must not be below the rejection
/// threshold (OpenSearch's `WorkloadManagementSettings` validator, with its wording); checked on
/// the merged settings, so lowering both in one request works.
fn check_wlm_thresholds(s: &SettingsSnapshot) -> Result<(), String> {
    for (cancellation, rejection) in [
        (
            keys::WLM_CPU_CANCELLATION_THRESHOLD,
            keys::WLM_CPU_REJECTION_THRESHOLD,
        ),
        (
            keys::WLM_MEMORY_CANCELLATION_THRESHOLD,
            keys::WLM_MEMORY_REJECTION_THRESHOLD,
        ),
    ] {
        if s.double(cancellation) < s.double(rejection) {
            return Err(format!(
                "{cancellation} value should not be less than {rejection}"
            ));
        }
    }
    Ok(())
}

/// `search.default_keep_alive` must not exceed `search.max_keep_alive` (OpenSearch's
/// `SearchService.validateKeepAlives`, with its wording).
fn check_keep_alives(s: &SettingsSnapshot) -> Result<(), String> {
    let (default, max) = (s.default_keep_alive(), s.max_keep_alive());
    if default > max {
        return Err(format!(
            "Default keep alive setting for request [{}] should be smaller than max keep alive [{}], was ({} > {})",
            keys::SEARCH_DEFAULT_KEEP_ALIVE,
            keys::SEARCH_MAX_KEEP_ALIVE,
            format_time_value(default),
            format_time_value(max)
        ));
    }
    Ok(())
}

/// Position of each key in [`SETTINGS`], built once.
static INDEX: LazyLock<HashMap<&'static str, usize>> = LazyLock::new(|| {
    SETTINGS
        .iter()
        .enumerate()
        .map(|(i, d)| (d.key, i))
        .collect()
});

/// Parsed defaults of every setting, in [`SETTINGS`] order, built once.
static DEFAULTS: LazyLock<Vec<SettingValue>> = LazyLock::new(|| {
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

/// Which of the two update scopes a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Saved in the metastore; survives restarts.
    Persistent,
    /// Memory only; gone after a restart.
    Transient,
}

impl Scope {
    /// The scope's name in requests, responses and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Persistent => "persistent",
            Scope::Transient => "transient",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a settings update was refused or could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A key or value the registry rejects, or a merged result that breaks a rule; the
    /// message is OpenSearch's.
    #[error("{0}")]
    Invalid(String),
    /// The metastore failed; nothing was changed.
    #[error("cannot save the persistent cluster settings: {0}")]
    Store(#[from] MetaError),
}

impl From<SettingsError> for EngineError {
    fn from(e: SettingsError) -> Self {
        match e {
            SettingsError::Invalid(reason) => EngineError::illegal_argument(reason),
            SettingsError::Store(_) => EngineError::internal(e.to_string()),
        }
    }
}

/// Parses `raw` as a value of `def`, with OpenSearch's messages (extended with what is
/// accepted where OpenSearch's own message does not say).
pub fn parse_value(def: &SettingDef, raw: &str) -> Result<SettingValue, String> {
    let key = def.key;
    let value = match def.kind {
        Kind::Time { min } => {
            let value = parse_time_value(raw, key)
                .map_err(|e| e.to_string())?
                .duration_opt();
            if let Some(min) = min {
                // OpenSearch compares in whole milliseconds, truncated toward zero; `-1` is
                // below every bound.
                if value.is_none_or(|d| d.as_millis() < min.as_millis()) {
                    return Err(format!(
                        "failed to parse value [{raw}] for setting [{key}], must be >= [{}]",
                        format_time_value_exact(min)
                    ));
                }
            }
            SettingValue::Time(value)
        }
        Kind::Integer { min, max } => {
            let n: i64 = parse_java_long(raw).ok_or_else(|| {
                format!(
                    "Failed to parse value [{raw}] for setting [{key}]: expected a whole number from {min} to {max}"
                )
            })?;
            run_check_first(def, SettingValue::Integer(n))?;
            if n < min {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be >= {min}"
                ));
            }
            if n > max {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be <= {max}"
                ));
            }
            SettingValue::Integer(n)
        }
        Kind::Double { min, max } => {
            let x: f64 = raw.trim().parse().map_err(|_| {
                format!(
                    "Failed to parse value [{raw}] for setting [{key}]: expected a number from {} to {}",
                    java_double(min),
                    java_double(max)
                )
            })?;
            run_check_first(def, SettingValue::Double(x))?;
            if x < min {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be >= {}",
                    java_double(min)
                ));
            }
            if x > max {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be <= {}",
                    java_double(max)
                ));
            }
            SettingValue::Double(x)
        }
        Kind::Bool => match raw {
            "true" => SettingValue::Bool(true),
            "false" => SettingValue::Bool(false),
            _ => {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] as only [true] or [false] are allowed."
                ));
            }
        },
        Kind::Enum(allowed) => match allowed.iter().find(|a| **a == raw) {
            Some(a) => SettingValue::Enum(a),
            None => {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}]: expected one of [{}]",
                    allowed.join(", ")
                ));
            }
        },
    };
    if let Some(check) = def.check {
        check(key, &value)?;
    }
    Ok(value)
}

/// Runs `def.check` on a number before its [`Kind`] bounds, so a setting whose OpenSearch
/// message for an out-of-bounds value differs from the generic one (the WLM thresholds,
/// `node.workload_group.max_count`) words it itself.
fn run_check_first(def: &SettingDef, value: SettingValue) -> Result<(), String> {
    match def.check {
        Some(check) => check(def.key, &value),
        None => Ok(()),
    }
}

/// One immutable state of the cluster settings: the persistent and transient values as
/// set, and every setting's effective parsed value.
///
/// # Invariants
///
/// - Every key in `persistent` and `transient` is registered and its value parses
///   (checked with `debug_assert!` when a snapshot is built; values from the metastore that
///   do not are dropped at load with a warning).
/// - `effective[i]` is the parsed value of `SETTINGS[i]`: transient if set, else persistent
///   if set, else the default.
#[derive(Debug, Clone)]
pub struct SettingsSnapshot {
    persistent: BTreeMap<String, String>,
    transient: BTreeMap<String, String>,
    effective: Vec<SettingValue>,
}

impl Default for SettingsSnapshot {
    fn default() -> Self {
        SettingsSnapshot::build(BTreeMap::new(), BTreeMap::new())
    }
}

impl SettingsSnapshot {
    /// Builds a snapshot from validated maps.
    fn build(persistent: BTreeMap<String, String>, transient: BTreeMap<String, String>) -> Self {
        let effective = SETTINGS
            .iter()
            .zip(DEFAULTS.iter())
            .map(|(def, default)| {
                let set = transient.get(def.key).or_else(|| persistent.get(def.key));
                match set.map(|raw| parse_value(def, raw)) {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => {
                        debug_assert!(false, "unvalidated value in a snapshot: {e}");
                        *default
                    }
                    None => *default,
                }
            })
            .collect();
        SettingsSnapshot {
            persistent,
            transient,
            effective,
        }
    }

    /// The persistent values as set, by key.
    pub fn persistent(&self) -> &BTreeMap<String, String> {
        &self.persistent
    }

    /// The transient values as set, by key.
    pub fn transient(&self) -> &BTreeMap<String, String> {
        &self.transient
    }

    /// The defaults of every setting set in neither scope, by key (for `include_defaults`).
    pub fn unset_defaults(&self) -> BTreeMap<String, String> {
        SETTINGS
            .iter()
            .filter(|d| !self.persistent.contains_key(d.key) && !self.transient.contains_key(d.key))
            .map(|d| (d.key.to_string(), d.default.to_string()))
            .collect()
    }

    /// The effective parsed value of the setting `key`.
    ///
    /// # Panics
    ///
    /// When `key` is not registered in [`SETTINGS`]: callers pass [`keys`] constants.
    pub fn value(&self, key: &str) -> SettingValue {
        match INDEX.get(key) {
            Some(&i) => self.effective[i],
            None => panic!("setting [{key}] is not registered in settings::SETTINGS"),
        }
    }

    /// The effective value of a time setting; `None` when it is negative (`-1`: disabled).
    ///
    /// # Panics
    ///
    /// When `key` is not a registered time setting.
    pub fn time_opt(&self, key: &str) -> Option<Duration> {
        match self.value(key) {
            SettingValue::Time(t) => t,
            other => panic!("setting [{key}] is not a time setting: {other:?}"),
        }
    }

    /// The effective value of a time setting with a lower bound of zero.
    ///
    /// # Panics
    ///
    /// When `key` is not a registered time setting.
    pub fn time(&self, key: &str) -> Duration {
        self.time_opt(key).unwrap_or(Duration::ZERO)
    }

    /// The effective value of an integer setting.
    ///
    /// # Panics
    ///
    /// When `key` is not a registered integer setting.
    pub fn integer(&self, key: &str) -> i64 {
        match self.value(key) {
            SettingValue::Integer(n) => n,
            other => panic!("setting [{key}] is not an integer setting: {other:?}"),
        }
    }

    /// An integer setting whose bounds fit `u32` (OpenSearch `intSetting` with `min >= 0`).
    fn integer_u32(&self, key: &str) -> u32 {
        u32::try_from(self.integer(key)).unwrap_or(u32::MAX)
    }

    /// The effective value of a floating-point setting.
    ///
    /// # Panics
    ///
    /// When `key` is not a registered double setting.
    pub fn double(&self, key: &str) -> f64 {
        match self.value(key) {
            SettingValue::Double(x) => x,
            other => panic!("setting [{key}] is not a double setting: {other:?}"),
        }
    }

    /// The effective value of a boolean setting.
    ///
    /// # Panics
    ///
    /// When `key` is not a registered boolean setting.
    pub fn bool(&self, key: &str) -> bool {
        match self.value(key) {
            SettingValue::Bool(b) => b,
            other => panic!("setting [{key}] is not a boolean setting: {other:?}"),
        }
    }

    /// The effective value of an enum setting.
    ///
    /// # Panics
    ///
    /// When `key` is not a registered enum setting.
    pub fn enum_value(&self, key: &str) -> &'static str {
        match self.value(key) {
            SettingValue::Enum(s) => s,
            other => panic!("setting [{key}] is not an enum setting: {other:?}"),
        }
    }

    /// `search.cancel_after_time_interval`; `None` when disabled (`-1`).
    pub fn cancel_after_time_interval(&self) -> Option<Duration> {
        self.time_opt(keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL)
    }

    /// `search.max_open_scroll_context`.
    pub fn max_open_scroll_context(&self) -> u32 {
        self.integer_u32(keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT)
    }

    /// `search.default_keep_alive`.
    pub fn default_keep_alive(&self) -> Duration {
        self.time(keys::SEARCH_DEFAULT_KEEP_ALIVE)
    }

    /// `search.max_keep_alive`.
    pub fn max_keep_alive(&self) -> Duration {
        self.time(keys::SEARCH_MAX_KEEP_ALIVE)
    }

    /// `search.max_buckets`.
    pub fn max_buckets(&self) -> u32 {
        self.integer_u32(keys::SEARCH_MAX_BUCKETS)
    }

    /// `wlm.workload_group.mode`.
    pub fn wlm_mode(&self) -> sluice_core::WlmMode {
        // The table only admits the three values, so the fallback is unreachable in practice;
        // it picks the default rather than panicking.
        sluice_core::WlmMode::parse(self.enum_value(keys::WLM_MODE))
            .unwrap_or(sluice_core::WlmMode::MonitorOnly)
    }
}

/// One `PUT _cluster/settings`: per scope, the keys to set (`Some`) or reset (`None`, which
/// also takes `*` patterns), flattened to dotted keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingsUpdate {
    /// Changes to the persistent values.
    pub persistent: Vec<(String, Option<String>)>,
    /// Changes to the transient values.
    pub transient: Vec<(String, Option<String>)>,
}

impl SettingsUpdate {
    /// Whether the update names no key at all.
    pub fn is_empty(&self) -> bool {
        self.persistent.is_empty() && self.transient.is_empty()
    }
}

/// What an update set, per scope (resets are not echoed), as OpenSearch's response shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppliedUpdate {
    /// Persistent values set by the update.
    pub persistent: BTreeMap<String, String>,
    /// Transient values set by the update.
    pub transient: BTreeMap<String, String>,
}

/// How many times an update retries when another writer changed the persistent document
/// between our read and our write (only possible once several nodes share a metastore);
/// more than a handful means something rewrites it in a loop.
const MAX_UPDATE_ATTEMPTS: usize = 5;

/// The node's dynamic cluster settings: the current [`SettingsSnapshot`], published through
/// a watch channel, and the metastore holding the persistent values.
///
/// Reads ([`ClusterSettings::snapshot`] and the typed accessors) take the channel's read
/// lock only to clone an `Arc`; updates are serialized by an async mutex held across the
/// metastore write, so two updates never interleave their read-validate-write.
pub struct ClusterSettings {
    current: watch::Sender<Arc<SettingsSnapshot>>,
    store: Arc<dyn MetaStore>,
    /// Held by an update from validation to publication; holds the version of the
    /// persistent document the current snapshot was built from (`None`: no document).
    update: tokio::sync::Mutex<Option<u64>>,
}

impl fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("current", &*self.current.borrow())
            .finish_non_exhaustive()
    }
}

impl ClusterSettings {
    /// Loads the persistent settings from `store`; transient ones start empty.
    ///
    /// A stored key that is no longer registered, or a value that no longer validates, is
    /// dropped with a warning (and disappears from the store at the next update), so a
    /// downgrade or a tightened bound never keeps the node from starting.
    ///
    /// # Cancel safety
    ///
    /// Only reads; safe to drop.
    pub async fn load(store: Arc<dyn MetaStore>) -> Result<ClusterSettings, MetaError> {
        let (persistent, version) = read_persistent(store.as_ref()).await?;
        let snapshot = SettingsSnapshot::build(persistent, BTreeMap::new());
        for rule in CROSS_CHECKS {
            if let Err(reason) = rule(&snapshot) {
                tracing::warn!(%reason, "persistent cluster settings break a rule; fix them with PUT _cluster/settings");
            }
        }
        let (current, _) = watch::channel(Arc::new(snapshot));
        Ok(ClusterSettings {
            current,
            store,
            update: tokio::sync::Mutex::new(version),
        })
    }

    /// The current settings; cheap (an `Arc` clone), and consistent across several reads.
    pub fn snapshot(&self) -> Arc<SettingsSnapshot> {
        self.current.borrow().clone()
    }

    /// A receiver that sees every new snapshot, for components that react to changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<SettingsSnapshot>> {
        self.current.subscribe()
    }

    /// `search.cancel_after_time_interval`; `None` when disabled.
    pub fn cancel_after_time_interval(&self) -> Option<Duration> {
        self.current.borrow().cancel_after_time_interval()
    }

    /// `search.max_open_scroll_context`.
    pub fn max_open_scroll_context(&self) -> u32 {
        self.current.borrow().max_open_scroll_context()
    }

    /// `search.default_keep_alive`.
    pub fn default_keep_alive(&self) -> Duration {
        self.current.borrow().default_keep_alive()
    }

    /// `search.max_keep_alive`.
    pub fn max_keep_alive(&self) -> Duration {
        self.current.borrow().max_keep_alive()
    }

    /// `search.max_buckets`.
    pub fn max_buckets(&self) -> u32 {
        self.current.borrow().max_buckets()
    }

    /// `wlm.workload_group.mode`.
    pub fn wlm_mode(&self) -> sluice_core::WlmMode {
        self.current.borrow().wlm_mode()
    }

    /// Applies `update`: checks every key and value (transient first, then persistent, each
    /// in key order, as OpenSearch does), then the merged result against [`CROSS_CHECKS`];
    /// only when all pass saves the persistent values and publishes the new snapshot.
    /// Returns the values set.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the metastore write leaves everything unchanged; after
    /// it, the write may land while the in-memory snapshot stays old until the next update or
    /// restart reads it back.
    pub async fn apply(&self, update: SettingsUpdate) -> Result<AppliedUpdate, SettingsError> {
        let mut stored_version = self.update.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.snapshot();
            let (transient, set_transient) =
                merge_scope(current.transient(), &update.transient, Scope::Transient)?;
            let (persistent, set_persistent) =
                merge_scope(current.persistent(), &update.persistent, Scope::Persistent)?;
            let next = SettingsSnapshot::build(persistent, transient);
            for rule in CROSS_CHECKS {
                rule(&next).map_err(SettingsError::Invalid)?;
            }
            if next.persistent != current.persistent {
                let doc: Map<String, Value> = next
                    .persistent
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let expected = stored_version.map_or(Expect::Absent, Expect::Version);
                let written = self
                    .store
                    .put(
                        Collection::ClusterSettings,
                        PERSISTENT_DOC,
                        Value::Object(doc),
                        expected,
                    )
                    .await;
                match written {
                    Ok(doc) => *stored_version = Some(doc.version),
                    Err(MetaError::Conflict { .. }) if attempt < MAX_UPDATE_ATTEMPTS => {
                        // Another writer changed the persistent settings: start over from
                        // what it wrote, keeping our transient values.
                        let (persistent, version) = read_persistent(self.store.as_ref()).await?;
                        *stored_version = version;
                        self.current.send_replace(Arc::new(SettingsSnapshot::build(
                            persistent,
                            current.transient().clone(),
                        )));
                        continue;
                    }
                    Err(e) => return Err(SettingsError::Store(e)),
                }
            }
            self.current.send_replace(Arc::new(next));
            return Ok(AppliedUpdate {
                persistent: set_persistent,
                transient: set_transient,
            });
        }
    }
}

/// Reads and validates the persistent document; returns the valid values and its version.
async fn read_persistent(
    store: &dyn MetaStore,
) -> Result<(BTreeMap<String, String>, Option<u64>), MetaError> {
    let Some(doc) = store
        .get(Collection::ClusterSettings, PERSISTENT_DOC)
        .await?
    else {
        return Ok((BTreeMap::new(), None));
    };
    let Value::Object(map) = doc.value else {
        return Err(MetaError::Corrupt {
            location: format!("{}/{PERSISTENT_DOC}", Collection::ClusterSettings),
            reason: format!("expected an object of settings, found {}", doc.value),
        });
    };
    let mut persistent = BTreeMap::new();
    for (key, value) in map {
        let Value::String(raw) = value else {
            tracing::warn!(%key, %value, "dropping a stored persistent setting whose value is not a string");
            continue;
        };
        let Some(def) = definition(&key) else {
            tracing::warn!(%key, value = %raw, "dropping a stored persistent setting this node does not recognize");
            continue;
        };
        if let Err(reason) = parse_value(def, &raw) {
            tracing::warn!(%key, value = %raw, %reason, "dropping a stored persistent setting that no longer validates");
            continue;
        }
        persistent.insert(key, raw);
    }
    Ok((persistent, Some(doc.version)))
}

/// Setting values by key, as set (not parsed).
type SettingsMap = BTreeMap<String, String>;

/// Applies one scope's changes to `current`: returns the new map and the values set.
///
/// Resets apply before sets, as in OpenSearch, so `{"search.*": null, "search.x": "1"}`
/// clears the others and keeps the new `search.x`.
fn merge_scope(
    current: &BTreeMap<String, String>,
    changes: &[(String, Option<String>)],
    scope: Scope,
) -> Result<(SettingsMap, SettingsMap), SettingsError> {
    let mut sorted: Vec<&(String, Option<String>)> = changes.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut set = BTreeMap::new();
    let mut resets = Vec::new();
    for (key, value) in sorted {
        let Some(def) = definition(key) else {
            let removable = key.contains('*') || key.starts_with(ARCHIVED_PREFIX);
            if value.is_none() && removable {
                resets.push(key.as_str());
                continue;
            }
            return Err(SettingsError::Invalid(format!(
                "{scope} setting [{key}], not recognized"
            )));
        };
        match value {
            None => resets.push(key.as_str()),
            Some(raw) => {
                parse_value(def, raw).map_err(SettingsError::Invalid)?;
                set.insert(key.clone(), raw.clone());
            }
        }
    }
    let mut next = current.clone();
    for pattern in resets {
        next.retain(|k, _| !sluice_wire::simple_match(pattern, k));
    }
    next.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok((next, set))
}

pub use sluice_engine::settings::flatten_settings;

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_meta::MemoryMetaStore;

    fn def(key: &str) -> &'static SettingDef {
        definition(key).expect("registered")
    }

    fn update(scope: Scope, pairs: &[(&str, Option<&str>)]) -> SettingsUpdate {
        let list = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect();
        match scope {
            Scope::Persistent => SettingsUpdate {
                persistent: list,
                ..SettingsUpdate::default()
            },
            Scope::Transient => SettingsUpdate {
                transient: list,
                ..SettingsUpdate::default()
            },
        }
    }

    async fn fresh() -> ClusterSettings {
        ClusterSettings::load(Arc::new(MemoryMetaStore::new()))
            .await
            .expect("load")
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
    fn test_defaults_are_opensearch_defaults() {
        let s = SettingsSnapshot::default();
        assert_eq!(s.cancel_after_time_interval(), None);
        assert_eq!(s.max_open_scroll_context(), 500);
        assert_eq!(s.default_keep_alive(), Duration::from_secs(300));
        assert_eq!(s.max_keep_alive(), Duration::from_secs(24 * 3600));
        assert_eq!(s.max_buckets(), 65535);
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

    #[test]
    fn test_other_kinds_parse_for_the_settings_to_come() {
        let double = SettingDef {
            key: "x.ratio",
            kind: Kind::Double { min: 0.0, max: 0.9 },
            default: "0.8",
            check: None,
            doc: "test",
        };
        assert_eq!(parse_value(&double, "0.5"), Ok(SettingValue::Double(0.5)));
        assert_eq!(
            parse_value(&double, "0.95").expect_err("max"),
            "Failed to parse value [0.95] for setting [x.ratio] must be <= 0.9"
        );
        assert_eq!(
            parse_value(&double, "-1").expect_err("min"),
            "Failed to parse value [-1] for setting [x.ratio] must be >= 0.0"
        );
        let boolean = SettingDef {
            key: "x.flag",
            kind: Kind::Bool,
            default: "true",
            check: None,
            doc: "test",
        };
        assert_eq!(
            parse_value(&boolean, "false"),
            Ok(SettingValue::Bool(false))
        );
        assert!(parse_value(&boolean, "yes").is_err());
        let mode = SettingDef {
            key: "x.mode",
            kind: Kind::Enum(&["enabled", "disabled"]),
            default: "enabled",
            check: Some(|_, v| match v {
                SettingValue::Enum("disabled") => Err("no".to_string()),
                _ => Ok(()),
            }),
            doc: "test",
        };
        assert_eq!(
            parse_value(&mode, "enabled"),
            Ok(SettingValue::Enum("enabled"))
        );
        assert_eq!(parse_value(&mode, "disabled"), Err("no".to_string()));
        assert!(
            parse_value(&mode, "Enabled")
                .expect_err("case")
                .contains("[enabled, disabled]")
        );
    }

    #[test]
    fn test_wlm_thresholds_use_opensearch_messages_and_invariant() {
        let cpu_rej = def(keys::WLM_CPU_REJECTION_THRESHOLD);
        assert_eq!(parse_value(cpu_rej, "0.9"), Ok(SettingValue::Double(0.9)));
        assert_eq!(
            parse_value(cpu_rej, "0.91").expect_err("max"),
            "wlm.workload_group.node.cpu_rejection_threshold value cannot be greater than 0.9 as it can result in a node drop"
        );
        assert_eq!(
            parse_value(cpu_rej, "-0.1").expect_err("min"),
            "wlm.workload_group.node.cpu_rejection_threshold value cannot be negative"
        );
        assert!(parse_value(cpu_rej, "NaN").is_err());
        let mem_cancel = def(keys::WLM_MEMORY_CANCELLATION_THRESHOLD);
        assert_eq!(
            parse_value(mem_cancel, "0.95"),
            Ok(SettingValue::Double(0.95))
        );
        assert!(parse_value(mem_cancel, "0.96").is_err());
        assert_eq!(
            parse_value(def(keys::WLM_MAX_GROUP_COUNT), "0").expect_err("min"),
            "node.workload_group.max_count should be in range [1-100]."
        );
        let mut persistent = BTreeMap::new();
        persistent.insert(
            keys::WLM_CPU_CANCELLATION_THRESHOLD.to_string(),
            "0.7".to_string(),
        );
        let low = SettingsSnapshot::build(persistent, BTreeMap::new());
        assert_eq!(
            check_wlm_thresholds(&low).expect_err("invariant"),
            "wlm.workload_group.node.cpu_cancellation_threshold value should not be less than wlm.workload_group.node.cpu_rejection_threshold"
        );
        assert!(check_wlm_thresholds(&SettingsSnapshot::default()).is_ok());
    }

    #[test]
    fn test_flatten_accepts_nested_and_dotted_keys() {
        let body = serde_json::json!({
            "search": {"max_buckets": 10, "default_keep_alive": "1m"},
            "search.max_keep_alive": "2h",
            "a": {"b": {"c": null, "d": true}}
        });
        let flat = flatten_settings(body.as_object().expect("object")).expect("flat");
        assert_eq!(
            flat,
            vec![
                ("search.max_buckets".to_string(), Some("10".to_string())),
                (
                    "search.default_keep_alive".to_string(),
                    Some("1m".to_string())
                ),
                ("search.max_keep_alive".to_string(), Some("2h".to_string())),
                ("a.b.c".to_string(), None),
                ("a.b.d".to_string(), Some("true".to_string())),
            ]
        );
        let dup = serde_json::json!({"search.max_buckets": 1, "search": {"max_buckets": 2}});
        assert_eq!(
            flatten_settings(dup.as_object().expect("object")).expect_err("duplicate"),
            "duplicate settings key [search.max_buckets] found, previous value [1], current value [2]"
        );
        let arr = serde_json::json!({"search.max_buckets": [1]});
        assert!(flatten_settings(arr.as_object().expect("object")).is_err());
    }

    #[tokio::test]
    async fn test_transient_overrides_persistent_overrides_default() {
        let cs = fresh().await;
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_MAX_BUCKETS, Some("100"))],
        ))
        .await
        .expect("persistent");
        assert_eq!(cs.max_buckets(), 100);
        cs.apply(update(
            Scope::Transient,
            &[(keys::SEARCH_MAX_BUCKETS, Some("7"))],
        ))
        .await
        .expect("transient");
        assert_eq!(cs.max_buckets(), 7);
        cs.apply(update(
            Scope::Transient,
            &[(keys::SEARCH_MAX_BUCKETS, None)],
        ))
        .await
        .expect("reset transient");
        assert_eq!(cs.max_buckets(), 100);
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_MAX_BUCKETS, None)],
        ))
        .await
        .expect("reset persistent");
        assert_eq!(cs.max_buckets(), 65535);
    }

    #[tokio::test]
    async fn test_keep_alive_rule_runs_on_the_merged_settings() {
        let cs = fresh().await;
        // Raising the default above the current max alone fails …
        let err = cs
            .apply(update(
                Scope::Persistent,
                &[(keys::SEARCH_DEFAULT_KEEP_ALIVE, Some("2d"))],
            ))
            .await
            .expect_err("default above max");
        assert_eq!(
            err.to_string(),
            "Default keep alive setting for request [search.default_keep_alive] should be smaller than max keep alive [search.max_keep_alive], was (2d > 1d)"
        );
        assert_eq!(
            cs.default_keep_alive(),
            Duration::from_secs(300),
            "a refused update changed a value"
        );
        // … raising both in one request works …
        cs.apply(update(
            Scope::Persistent,
            &[
                (keys::SEARCH_DEFAULT_KEEP_ALIVE, Some("2d")),
                (keys::SEARCH_MAX_KEEP_ALIVE, Some("3d")),
            ],
        ))
        .await
        .expect("both");
        // … and a transient max below the persistent default is caught across scopes.
        let err = cs
            .apply(update(
                Scope::Transient,
                &[(keys::SEARCH_MAX_KEEP_ALIVE, Some("1h"))],
            ))
            .await
            .expect_err("transient max below persistent default");
        assert!(err.to_string().contains("was (2d > 1h)"), "{err}");
    }

    #[tokio::test]
    async fn test_unknown_keys_fail_with_their_scope_and_nothing_changes() {
        let cs = fresh().await;
        let both = SettingsUpdate {
            persistent: vec![
                ("search.max_buckets".into(), Some("5".into())),
                ("foo.bar".into(), Some("1".into())),
            ],
            transient: vec![("baz".into(), Some("1".into()))],
        };
        let err = cs.apply(both).await.expect_err("unknown");
        assert_eq!(err.to_string(), "transient setting [baz], not recognized");
        let err = cs
            .apply(update(Scope::Persistent, &[("foo.bar", None)]))
            .await
            .expect_err("reset of unknown");
        assert_eq!(
            err.to_string(),
            "persistent setting [foo.bar], not recognized"
        );
        assert_eq!(cs.max_buckets(), 65535);
        assert!(cs.snapshot().persistent().is_empty());
    }

    #[tokio::test]
    async fn test_wildcard_and_archived_resets() {
        let cs = fresh().await;
        cs.apply(update(
            Scope::Transient,
            &[
                (keys::SEARCH_MAX_BUCKETS, Some("1")),
                (keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT, Some("2")),
            ],
        ))
        .await
        .expect("set");
        cs.apply(update(
            Scope::Transient,
            &[("search.max_*", None), ("archived.old", None)],
        ))
        .await
        .expect("wildcard reset");
        assert!(cs.snapshot().transient().is_empty());
        assert_eq!(cs.max_open_scroll_context(), 500);
        // Resets apply before sets within one request.
        cs.apply(update(
            Scope::Transient,
            &[
                (keys::SEARCH_MAX_OPEN_SCROLL_CONTEXT, Some("3")),
                ("*", None),
            ],
        ))
        .await
        .expect("reset and set");
        assert_eq!(cs.max_open_scroll_context(), 3);
    }

    #[tokio::test]
    async fn test_persistent_values_reload_and_transient_do_not() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let cs = ClusterSettings::load(store.clone()).await.expect("load");
        let applied = cs
            .apply(SettingsUpdate {
                persistent: vec![(
                    keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL.into(),
                    Some("30s".into()),
                )],
                transient: vec![(keys::SEARCH_MAX_BUCKETS.into(), Some("10".into()))],
            })
            .await
            .expect("apply");
        assert_eq!(
            applied.persistent[keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL],
            "30s"
        );
        assert_eq!(applied.transient[keys::SEARCH_MAX_BUCKETS], "10");
        let reloaded = ClusterSettings::load(store).await.expect("reload");
        assert_eq!(
            reloaded.cancel_after_time_interval(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(reloaded.max_buckets(), 65535);
    }

    #[tokio::test]
    async fn test_load_drops_unknown_and_invalid_stored_values() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        store
            .put(
                Collection::ClusterSettings,
                PERSISTENT_DOC,
                serde_json::json!({
                    "search.max_buckets": "12",
                    "gone.setting": "1",
                    "search.max_open_scroll_context": "-4",
                    "search.default_keep_alive": 5
                }),
                Expect::Absent,
            )
            .await
            .expect("seed");
        let cs = ClusterSettings::load(store).await.expect("load");
        let snap = cs.snapshot();
        assert_eq!(snap.persistent().len(), 1, "{:?}", snap.persistent());
        assert_eq!(snap.max_buckets(), 12);
        assert_eq!(snap.max_open_scroll_context(), 500);
    }

    #[tokio::test]
    async fn test_concurrent_writer_conflict_is_retried_on_fresh_state() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let cs = ClusterSettings::load(store.clone()).await.expect("load");
        // Another node writes the persistent document behind our back.
        store
            .put(
                Collection::ClusterSettings,
                PERSISTENT_DOC,
                serde_json::json!({"search.max_open_scroll_context": "9"}),
                Expect::Absent,
            )
            .await
            .expect("other writer");
        cs.apply(update(
            Scope::Persistent,
            &[(keys::SEARCH_MAX_BUCKETS, Some("3"))],
        ))
        .await
        .expect("retried");
        assert_eq!(cs.max_buckets(), 3);
        assert_eq!(
            cs.max_open_scroll_context(),
            9,
            "the other writer's value was lost"
        );
        let stored = store
            .get(Collection::ClusterSettings, PERSISTENT_DOC)
            .await
            .expect("get")
            .expect("doc");
        assert_eq!(
            stored.value,
            serde_json::json!({"search.max_buckets": "3", "search.max_open_scroll_context": "9"})
        );
    }

    #[tokio::test]
    async fn test_subscribers_see_new_snapshots() {
        let cs = fresh().await;
        let mut rx = cs.subscribe();
        cs.apply(update(
            Scope::Transient,
            &[(keys::SEARCH_MAX_BUCKETS, Some("42"))],
        ))
        .await
        .expect("apply");
        assert!(rx.has_changed().expect("sender alive"));
        assert_eq!(rx.borrow_and_update().max_buckets(), 42);
    }
}
