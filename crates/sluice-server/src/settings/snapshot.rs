//! The live values the request path reads: [`SettingsSnapshot`], one immutable state of the
//! cluster settings with every effective value parsed, and the rules that tie settings
//! together ([`CROSS_CHECKS`]), checked on a whole snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_wire::format_time_value;

use super::keys;
use super::registry::{DEFAULTS, INDEX, SETTINGS};
use super::values::{SettingValue, parse_value};

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

/// One immutable state of the cluster settings: the persistent and transient values as
/// set, and every setting's effective parsed value.
///
/// # Invariants
///
/// - Every key in `persistent` and `transient` is registered and its value parses
///   (checked with `debug_assert!` when a snapshot is built; values from the metastore that
///   do not are dropped at load with a warning).
/// - `effective[i]` is the parsed value of `SETTINGS[i]`: transient if set, else persistent
///   if set, else the node's own default (config file, `SLUICE_*`, `-E`) if set, else the
///   built-in default — OpenSearch's order with `opensearch.yml`.
#[derive(Debug, Clone)]
pub struct SettingsSnapshot {
    persistent: BTreeMap<String, String>,
    transient: BTreeMap<String, String>,
    /// The node's defaults from its configuration, validated at start.
    node: Arc<BTreeMap<String, String>>,
    effective: Vec<SettingValue>,
    /// `wlm.workload_group.mode`, read by every request: parsed once here rather than looked
    /// up by name and parsed per request.
    wlm_mode: sluice_core::WlmMode,
    /// `search.cancel_after_time_interval`, read by every search: the same.
    cancel_after: Option<Duration>,
    /// `wlm.workload_group.estimate_unmeasured_tasks`, read by both share checks of every
    /// request of a group (at the door and when its search starts): the same.
    estimate_unmeasured_tasks: bool,
    /// The four `wlm.workload_group.node.*_threshold` values, read by every share check that
    /// finds usage: the same.
    wlm_thresholds: sluice_core::resources::NodeThresholds,
}

impl Default for SettingsSnapshot {
    fn default() -> Self {
        SettingsSnapshot::build(BTreeMap::new(), BTreeMap::new())
    }
}

impl SettingsSnapshot {
    /// Builds a snapshot from validated maps, without node defaults.
    pub(super) fn build(
        persistent: BTreeMap<String, String>,
        transient: BTreeMap<String, String>,
    ) -> Self {
        SettingsSnapshot::build_on(Arc::default(), persistent, transient)
    }

    /// Builds a snapshot from validated maps over the node's defaults.
    pub(super) fn build_on(
        node: Arc<BTreeMap<String, String>>,
        persistent: BTreeMap<String, String>,
        transient: BTreeMap<String, String>,
    ) -> Self {
        let effective = SETTINGS
            .iter()
            .zip(DEFAULTS.iter())
            .map(|(def, default)| {
                let set = transient
                    .get(def.key)
                    .or_else(|| persistent.get(def.key))
                    .or_else(|| node.get(def.key));
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
        let mut snapshot = SettingsSnapshot {
            persistent,
            transient,
            node,
            effective,
            wlm_mode: sluice_core::WlmMode::MonitorOnly,
            cancel_after: None,
            estimate_unmeasured_tasks: false,
            wlm_thresholds: sluice_core::resources::NodeThresholds::default(),
        };
        // The table only admits the three values, so the fallback is unreachable in practice;
        // it picks the default rather than panicking.
        snapshot.wlm_mode = sluice_core::WlmMode::parse(snapshot.enum_value(keys::WLM_MODE))
            .unwrap_or(sluice_core::WlmMode::MonitorOnly);
        snapshot.cancel_after = snapshot.time_opt(keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL);
        snapshot.estimate_unmeasured_tasks = snapshot.bool(keys::WLM_ESTIMATE_UNMEASURED_TASKS);
        snapshot.wlm_thresholds = sluice_core::resources::NodeThresholds {
            cpu_rejection: snapshot.double(keys::WLM_CPU_REJECTION_THRESHOLD),
            cpu_cancellation: snapshot.double(keys::WLM_CPU_CANCELLATION_THRESHOLD),
            memory_rejection: snapshot.double(keys::WLM_MEMORY_REJECTION_THRESHOLD),
            memory_cancellation: snapshot.double(keys::WLM_MEMORY_CANCELLATION_THRESHOLD),
        };
        snapshot
    }

    /// A snapshot with only node defaults set (to check them at start).
    pub fn from_node_defaults(node: BTreeMap<String, String>) -> Self {
        SettingsSnapshot::build_on(Arc::new(node), BTreeMap::new(), BTreeMap::new())
    }

    /// The node's defaults from its configuration.
    pub fn node_defaults(&self) -> Arc<BTreeMap<String, String>> {
        self.node.clone()
    }

    /// The persistent values as set, by key.
    pub fn persistent(&self) -> &BTreeMap<String, String> {
        &self.persistent
    }

    /// The transient values as set, by key.
    pub fn transient(&self) -> &BTreeMap<String, String> {
        &self.transient
    }

    /// The defaults of every setting set in neither scope, by key (for `include_defaults`):
    /// the node's own default where its configuration gives one.
    pub fn unset_defaults(&self) -> BTreeMap<String, String> {
        SETTINGS
            .iter()
            .filter(|d| !self.persistent.contains_key(d.key) && !self.transient.contains_key(d.key))
            .map(|d| {
                let value = self.node.get(d.key).map_or(d.default, String::as_str);
                (d.key.to_string(), value.to_string())
            })
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
        self.cancel_after
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
        self.wlm_mode
    }

    /// `wlm.workload_group.estimate_unmeasured_tasks`.
    pub fn estimate_unmeasured_tasks(&self) -> bool {
        self.estimate_unmeasured_tasks
    }

    /// The node-level thresholds (`wlm.workload_group.node.{cpu,memory}_{rejection,cancellation}_threshold`).
    pub fn wlm_thresholds(&self) -> sluice_core::resources::NodeThresholds {
        self.wlm_thresholds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::registry::definition;
    use crate::settings::values::SettingDef;

    fn def(key: &str) -> &'static SettingDef {
        definition(key).expect("registered")
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

    /// The values parsed once per snapshot for the request path are the effective ones, in
    /// each scope's order (transient over persistent over the node's over the default).
    #[test]
    fn test_values_parsed_once_are_the_effective_ones() {
        let defaults = SettingsSnapshot::default();
        assert!(defaults.estimate_unmeasured_tasks());
        assert_eq!(
            defaults.wlm_thresholds(),
            sluice_core::resources::NodeThresholds::default()
        );
        let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect()
        };
        let node = Arc::new(set(&[(keys::WLM_MEMORY_REJECTION_THRESHOLD, "0.5")]));
        let persistent = set(&[
            (keys::WLM_ESTIMATE_UNMEASURED_TASKS, "false"),
            (keys::WLM_CPU_REJECTION_THRESHOLD, "0.6"),
            (keys::WLM_CPU_CANCELLATION_THRESHOLD, "0.7"),
        ]);
        let transient = set(&[(keys::WLM_CPU_CANCELLATION_THRESHOLD, "0.8")]);
        let s = SettingsSnapshot::build_on(node, persistent, transient);
        assert!(!s.estimate_unmeasured_tasks());
        assert_eq!(
            s.wlm_thresholds(),
            sluice_core::resources::NodeThresholds {
                cpu_rejection: 0.6,
                cpu_cancellation: 0.8,
                memory_rejection: 0.5,
                memory_cancellation: s.double(keys::WLM_MEMORY_CANCELLATION_THRESHOLD),
            }
        );
        assert_eq!(
            s.estimate_unmeasured_tasks(),
            s.bool(keys::WLM_ESTIMATE_UNMEASURED_TASKS)
        );
    }
}
