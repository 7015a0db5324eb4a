//! The three settings bags of a workload group (`settings`, `throttling`, `queue`): parsing,
//! per-key validation, partial-update merge and their OpenSearch string rendering.
//!
//! A bag in a request is a [`BagPatch`]: absent keeps the stored bag, `null` or `{}` clears it,
//! an object overlays key by key where a key set to `null` clears that key. Nested objects are
//! flattened with dots, as OpenSearch flattens a settings bag (`{"search":{"max_buckets":5}}` is
//! `search.max_buckets`). Every bag is echoed with string values, keys sorted (DESIGN D1).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{CoreError, Result};

/// What a request does to one bag.
#[derive(Debug, Clone, PartialEq)]
pub enum BagPatch<P> {
    /// The bag is absent from the request: keep the stored bag.
    Keep,
    /// The bag is `null` or `{}`: clear it.
    Clear,
    /// The bag is a non-empty object: overlay it key by key.
    Overlay(P),
}

/// What an overlaying bag does to one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPatch<T> {
    /// The key is absent: keep the stored value.
    Keep,
    /// The key is `null`: clear it.
    Clear,
    /// The key has a value: overwrite.
    Set(T),
}

impl<T: Clone> KeyPatch<T> {
    /// Applies this key patch to a stored value.
    pub fn apply(&self, old: Option<T>) -> Option<T> {
        match self {
            KeyPatch::Keep => old,
            KeyPatch::Clear => None,
            KeyPatch::Set(v) => Some(v.clone()),
        }
    }
}

/// Flattens a bag object into `(dotted key, value or None for null)`, or says it clears the bag.
///
/// The caller has checked that `v` is an object or `null`.
fn flatten_bag(v: &Value) -> BagPatch<Vec<(String, Option<&Value>)>> {
    match v {
        Value::Object(map) if !map.is_empty() => {
            let mut out = Vec::new();
            flatten_into(String::new(), map, &mut out);
            BagPatch::Overlay(out)
        }
        _ => BagPatch::Clear,
    }
}

fn flatten_into<'a>(
    prefix: String,
    map: &'a Map<String, Value>,
    out: &mut Vec<(String, Option<&'a Value>)>,
) {
    for (k, v) in map {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) => flatten_into(key, inner, out),
            Value::Null => out.push((key, None)),
            other => out.push((key, Some(other))),
        }
    }
}

/// Renders a JSON value the way it appears in messages: strings quoted, numbers bare.
pub(crate) fn show(v: &Value) -> String {
    v.to_string()
}

/// Renders a scalar JSON value as the string a settings bag stores, or `None` for arrays.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Parses a non-negative integer given as a JSON number or a numeric string, bounded by `max`;
/// a refusal names `shown` as the bound (a request's bound, where the parser also reads
/// stored values up to a larger `max`).
fn parse_count(field: &str, v: &Value, max: u64, shown: u64, max_msg: &str) -> Result<u32> {
    let bad = || {
        CoreError::validation(
            field,
            format!("{field} must be an integer >= 0, got {}", show(v)),
        )
    };
    let too_big =
        || CoreError::validation(field, format!("{field} {max_msg} {shown}, got {}", show(v)));
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                if u > max {
                    return Err(too_big());
                }
                Ok(u as u32)
            } else if n.as_i64().is_some() {
                Err(bad())
            } else {
                // A float: integral values beyond the bound say so; everything else is not an integer.
                match n.as_f64() {
                    Some(f) if f.is_finite() && f.fract() == 0.0 && f > max as f64 => {
                        Err(too_big())
                    }
                    _ => Err(bad()),
                }
            }
        }
        Value::String(s) => {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            // All digits: the only parse failure left is overflow of u64.
            match s.parse::<u64>() {
                Ok(u) if u <= max => Ok(u as u32),
                _ => Err(too_big()),
            }
        }
        _ => Err(bad()),
    }
}

// ---------------------------------------------------------------------------------------------
// settings
// ---------------------------------------------------------------------------------------------

/// Setting keys of the per-group search settings bag (facts §3); the strings live in
/// [`sluice_wire::keys`], shared with the cluster settings.
pub mod keys {
    /// Whether group values overwrite explicit request values.
    pub use sluice_wire::keys::OVERRIDE_REQUEST_VALUES;
    /// Queue bag: parked requests per bucket.
    pub use sluice_wire::keys::QUEUE_SIZE_PER_BUCKET;
    /// Batched reduce size of one search.
    pub use sluice_wire::keys::SEARCH_BATCHED_REDUCE_SIZE as BATCHED_REDUCE_SIZE;
    /// Request-level cancel-after interval.
    pub use sluice_wire::keys::SEARCH_CANCEL_AFTER_TIME_INTERVAL as CANCEL_AFTER_TIME_INTERVAL;
    /// Shard query timeout applied to a search (`source.timeout`).
    pub use sluice_wire::keys::SEARCH_DEFAULT_SEARCH_TIMEOUT as DEFAULT_SEARCH_TIMEOUT;
    /// Maximum aggregation buckets of one search.
    pub use sluice_wire::keys::SEARCH_MAX_BUCKETS as MAX_BUCKETS;
    /// Maximum concurrent shard requests of one search.
    pub use sluice_wire::keys::SEARCH_MAX_CONCURRENT_SHARD_REQUESTS as MAX_CONCURRENT_SHARD_REQUESTS;
    /// Throttling bag: the bucket dimension.
    pub use sluice_wire::keys::THROTTLE_ATTRIBUTE;
    /// Throttling bag: the per-node in-flight allowance per bucket.
    pub use sluice_wire::keys::THROTTLE_NODE_LIMIT;
    /// Throttling bag: the cluster-wide pool; not accepted until the shared tier exists (D1).
    pub use sluice_wire::keys::THROTTLE_SHARED_LIMIT;
}

/// The value of a time setting: `-1` disables it, anything else is a duration (the wire
/// crate's [`TimeValue`](sluice_wire::TimeValue), parsed by its one parser).
pub use sluice_wire::TimeValue as TimeSetting;

/// Parses a time setting with the one time-value parser, returning OpenSearch's message on
/// failure.
fn parse_time_value(key: &str, raw: &str) -> std::result::Result<TimeSetting, String> {
    sluice_wire::parse_time_value(raw, key).map_err(|e| e.to_string())
}

/// Validates one settings value, returning the underlying OpenSearch parse message on failure.
fn check_setting(key: &str, raw: &str) -> std::result::Result<(), String> {
    let int_min = |min: i32| -> std::result::Result<(), String> {
        match raw.parse::<i32>() {
            Ok(v) if v >= min => Ok(()),
            Ok(_) => Err(format!(
                "Failed to parse value [{raw}] for setting [{key}] must be >= {min}"
            )),
            Err(_) => Err(format!("Failed to parse value [{raw}] for setting [{key}]")),
        }
    };
    match key {
        keys::DEFAULT_SEARCH_TIMEOUT | keys::CANCEL_AFTER_TIME_INTERVAL => {
            parse_time_value(key, raw).map(|_| ())
        }
        keys::MAX_CONCURRENT_SHARD_REQUESTS => int_min(1),
        keys::BATCHED_REDUCE_SIZE => int_min(2),
        keys::MAX_BUCKETS => int_min(0),
        keys::OVERRIDE_REQUEST_VALUES => match raw {
            "true" | "false" => Ok(()),
            _ => Err(format!(
                "Failed to parse value [{raw}] as only [true] or [false] are allowed."
            )),
        },
        _ => unreachable!("check_setting called with unknown key {key}"),
    }
}

const SETTING_KEYS: [&str; 6] = [
    keys::DEFAULT_SEARCH_TIMEOUT,
    keys::CANCEL_AFTER_TIME_INTERVAL,
    keys::MAX_CONCURRENT_SHARD_REQUESTS,
    keys::BATCHED_REDUCE_SIZE,
    keys::MAX_BUCKETS,
    keys::OVERRIDE_REQUEST_VALUES,
];

/// The per-group search settings bag (facts §3), stored as validated strings.
///
/// # Invariants
/// Every key is one of [`keys`]' search settings and every value parses for its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchSettings {
    values: BTreeMap<String, String>,
}

/// A validated overlay of the search settings bag: `(key, None)` clears a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsPatch {
    /// Keys in request order; a later duplicate wins.
    pub entries: Vec<(String, Option<String>)>,
}

impl SearchSettings {
    /// Returns the stored string value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Returns whether no setting is stored.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Iterates over `(key, value)` in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn time(&self, key: &str) -> Option<TimeSetting> {
        self.get(key)
            .and_then(|raw| parse_time_value(key, raw).ok())
    }

    fn int(&self, key: &str) -> Option<u32> {
        self.get(key).and_then(|raw| raw.parse::<u32>().ok())
    }

    /// Returns `search.default_search_timeout` when the group sets it.
    pub fn default_search_timeout(&self) -> Option<TimeSetting> {
        self.time(keys::DEFAULT_SEARCH_TIMEOUT)
    }

    /// Returns `search.cancel_after_time_interval` when the group sets it.
    pub fn cancel_after_time_interval(&self) -> Option<TimeSetting> {
        self.time(keys::CANCEL_AFTER_TIME_INTERVAL)
    }

    /// Returns `search.max_concurrent_shard_requests` when the group sets it.
    pub fn max_concurrent_shard_requests(&self) -> Option<u32> {
        self.int(keys::MAX_CONCURRENT_SHARD_REQUESTS)
    }

    /// Returns `search.batched_reduce_size` when the group sets it.
    pub fn batched_reduce_size(&self) -> Option<u32> {
        self.int(keys::BATCHED_REDUCE_SIZE)
    }

    /// Returns `search.max_buckets` when the group sets it.
    pub fn max_buckets(&self) -> Option<u32> {
        self.int(keys::MAX_BUCKETS)
    }

    /// Returns `override_request_values` (default `false`).
    pub fn override_request_values(&self) -> bool {
        self.get(keys::OVERRIDE_REQUEST_VALUES) == Some("true")
    }

    /// Returns this bag merged with a patch.
    pub fn merge(&self, patch: &BagPatch<SettingsPatch>) -> SearchSettings {
        match patch {
            BagPatch::Keep => self.clone(),
            BagPatch::Clear => SearchSettings::default(),
            BagPatch::Overlay(p) => {
                let mut values = self.values.clone();
                for (k, v) in &p.entries {
                    match v {
                        Some(v) => values.insert(k.clone(), v.clone()),
                        None => values.remove(k),
                    };
                }
                SearchSettings { values }
            }
        }
    }

    /// Renders the bag as OpenSearch echoes it: keys sorted, values strings.
    pub fn to_json(&self) -> Value {
        string_map(self.iter())
    }
}

fn string_map<'a>(it: impl Iterator<Item = (&'a str, &'a str)>) -> Value {
    Value::Object(
        it.map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
            .collect(),
    )
}

/// Parses the `settings` bag of a request (an object or `null`).
pub fn parse_settings_patch(v: &Value) -> Result<BagPatch<SettingsPatch>> {
    let flat = match flatten_bag(v) {
        BagPatch::Overlay(flat) => flat,
        BagPatch::Clear => return Ok(BagPatch::Clear),
        BagPatch::Keep => return Ok(BagPatch::Keep),
    };
    let mut entries = Vec::with_capacity(flat.len());
    for (key, value) in flat {
        let field = format!("settings.{key}");
        if !SETTING_KEYS.contains(&key.as_str()) {
            return Err(CoreError::validation(
                field,
                format!("Unknown WLM setting: {key}"),
            ));
        }
        let Some(value) = value else {
            // A null value is a clear marker and skips validation.
            entries.push((key, None));
            continue;
        };
        let Some(raw) = scalar_text(value) else {
            return Err(CoreError::validation(
                field,
                format!(
                    "Invalid value '{}' for {key}: expected a single value",
                    show(value)
                ),
            ));
        };
        if let Err(why) = check_setting(&key, &raw) {
            return Err(CoreError::validation(
                field,
                format!("Invalid value '{raw}' for {key}: {why}"),
            ));
        }
        entries.push((key, Some(raw)));
    }
    Ok(BagPatch::Overlay(SettingsPatch { entries }))
}

// ---------------------------------------------------------------------------------------------
// throttling
// ---------------------------------------------------------------------------------------------

/// The dimension a throttle counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThrottleAttribute {
    /// One bucket for the whole group.
    Group,
    /// One bucket per username of the caller.
    Username,
    /// One bucket per role of the caller (the lexicographically smallest when several).
    Role,
}

impl ThrottleAttribute {
    /// Returns the lowercase wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ThrottleAttribute::Group => "group",
            ThrottleAttribute::Username => "username",
            ThrottleAttribute::Role => "role",
        }
    }

    /// Parses the wire name (exact, lowercase).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "group" => Some(ThrottleAttribute::Group),
            "username" => Some(ThrottleAttribute::Username),
            "role" => Some(ThrottleAttribute::Role),
            _ => None,
        }
    }

    /// Returns whether buckets of this attribute need an authenticated principal.
    pub fn needs_principal(&self) -> bool {
        !matches!(self, ThrottleAttribute::Group)
    }
}

/// Throttling of a group: per node (seed 000, DESIGN D1) and cluster-wide (seed 004).
///
/// # Invariants
/// After validation, either the attribute and at least one limit are set (throttling on) or
/// nothing is; the ceiling `node_limit × N + shared_limit` is at least 1 for any N ≥ 1 (so
/// `node_limit + shared_limit >= 1`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThrottleConfig {
    /// The bucket dimension.
    pub attribute: Option<ThrottleAttribute>,
    /// The per-node in-flight allowance per bucket; unset on a shared-only group.
    pub node_limit: Option<u32>,
    /// The cluster-wide overflow pool per bucket, used once the node allowance is exhausted.
    pub shared_limit: Option<u32>,
}

impl ThrottleConfig {
    /// Refuses a limit a request may not write (beyond [`MAX_LIMIT`]), naming it.
    pub fn check_writable(&self) -> Result<()> {
        for (field, value) in [
            ("throttling.node_limit", self.node_limit),
            ("throttling.shared_limit", self.shared_limit),
        ] {
            if let Some(v) = value.filter(|v| *v > MAX_LIMIT) {
                return Err(CoreError::validation(
                    field,
                    format!("{field} must be at most {MAX_LIMIT}, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

/// A validated overlay of the throttling bag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottlePatch {
    /// What to do with `attribute`.
    pub attribute: KeyPatch<ThrottleAttribute>,
    /// What to do with `node_limit`.
    pub node_limit: KeyPatch<u32>,
    /// What to do with `shared_limit`.
    pub shared_limit: KeyPatch<u32>,
}

impl ThrottleConfig {
    /// Returns whether this config throttles (an attribute and a limit set).
    pub fn is_enabled(&self) -> bool {
        self.attribute.is_some() && (self.node_limit.is_some() || self.shared_limit.is_some())
    }

    /// The node allowance per bucket: `node_limit`, 0 on a shared-only group.
    pub fn node_allowance(&self) -> u32 {
        self.node_limit.unwrap_or(0)
    }

    /// The cluster-wide pool per bucket, when the group has one (`shared_limit >= 1`).
    pub fn shared_pool(&self) -> Option<u32> {
        self.shared_limit.filter(|s| *s > 0)
    }

    /// Returns this bag merged with a patch (not yet validated as a whole).
    pub fn merge(&self, patch: &BagPatch<ThrottlePatch>) -> ThrottleConfig {
        match patch {
            BagPatch::Keep => *self,
            BagPatch::Clear => ThrottleConfig::default(),
            BagPatch::Overlay(p) => ThrottleConfig {
                attribute: p.attribute.apply(self.attribute),
                node_limit: p.node_limit.apply(self.node_limit),
                shared_limit: p.shared_limit.apply(self.shared_limit),
            },
        }
    }

    /// Checks the merged config as a whole: an attribute and a limit go together and the
    /// ceiling `node_limit × N + shared_limit` is not 0.
    pub fn validate(&self) -> Result<()> {
        let any_limit = self.node_limit.is_some() || self.shared_limit.is_some();
        match (self.attribute, any_limit) {
            (None, false) => Ok(()),
            (None, true) => {
                let which = if self.node_limit.is_some() {
                    "throttling.node_limit"
                } else {
                    "throttling.shared_limit"
                };
                Err(CoreError::validation(
                    "throttling.attribute",
                    format!(
                        "throttling.attribute is required when {which} is set; set it to group, \
                         username or role, or set throttling to null to disable throttling"
                    ),
                ))
            }
            (Some(a), false) => Err(CoreError::validation(
                "throttling.node_limit",
                format!(
                    "throttling.node_limit is required when throttling.attribute is set (attribute is [{}]); \
                     set a limit >= 1 (or a cluster-wide throttling.shared_limit), or set throttling to null \
                     to disable throttling",
                    a.as_str()
                ),
            )),
            (Some(_), true)
                if self.node_allowance() == 0 && self.shared_limit.unwrap_or(0) == 0 =>
            {
                let field = if self.node_limit.is_some() {
                    "throttling.node_limit"
                } else {
                    "throttling.shared_limit"
                };
                Err(CoreError::validation(
                    field,
                    format!(
                        "effective throttle ceiling is 0 (node_limit={} and shared_limit={}); this would reject \
                         every request: set throttling.node_limit >= 1 or throttling.shared_limit >= 1, or set \
                         throttling to null to disable throttling",
                        self.node_limit
                            .map_or("unset".to_string(), |n| n.to_string()),
                        self.shared_limit
                            .map_or("unset".to_string(), |n| n.to_string()),
                    ),
                ))
            }
            (Some(_), true) => Ok(()),
        }
    }

    /// Renders the bag with string values, keys sorted.
    pub fn to_json(&self) -> Value {
        let limit = self.node_limit.map(|n| n.to_string());
        let shared = self.shared_limit.map(|n| n.to_string());
        let mut entries: Vec<(&str, &str)> = Vec::new();
        if let Some(a) = self.attribute {
            entries.push((keys::THROTTLE_ATTRIBUTE, a.as_str()));
        }
        if let Some(l) = &limit {
            entries.push((keys::THROTTLE_NODE_LIMIT, l));
        }
        if let Some(l) = &shared {
            entries.push((keys::THROTTLE_SHARED_LIMIT, l));
        }
        string_map(entries.into_iter())
    }
}

/// Parses the `throttling` bag of a request (an object or `null`), validating each key alone.
pub fn parse_throttle_patch(v: &Value) -> Result<BagPatch<ThrottlePatch>> {
    let flat = match flatten_bag(v) {
        BagPatch::Overlay(flat) => flat,
        BagPatch::Clear => return Ok(BagPatch::Clear),
        BagPatch::Keep => return Ok(BagPatch::Keep),
    };
    let mut patch = ThrottlePatch {
        attribute: KeyPatch::Keep,
        node_limit: KeyPatch::Keep,
        shared_limit: KeyPatch::Keep,
    };
    for (key, value) in flat {
        match key.as_str() {
            keys::THROTTLE_ATTRIBUTE => {
                patch.attribute = match value {
                    None => KeyPatch::Clear,
                    Some(v) => match v.as_str().and_then(ThrottleAttribute::parse) {
                        Some(a) => KeyPatch::Set(a),
                        None => {
                            return Err(CoreError::validation(
                                "throttling.attribute",
                                format!(
                                    "throttling.attribute must be one of [group, username, role], got {}",
                                    show(v)
                                ),
                            ));
                        }
                    },
                }
            }
            keys::THROTTLE_NODE_LIMIT => {
                patch.node_limit = match value {
                    None => KeyPatch::Clear,
                    Some(v) => KeyPatch::Set(parse_count(
                        "throttling.node_limit",
                        v,
                        u64::from(u32::MAX),
                        u64::from(MAX_LIMIT),
                        "must be at most",
                    )?),
                }
            }
            keys::THROTTLE_SHARED_LIMIT => {
                patch.shared_limit = match value {
                    None => KeyPatch::Clear,
                    Some(v) => KeyPatch::Set(parse_count(
                        "throttling.shared_limit",
                        v,
                        u64::from(u32::MAX),
                        u64::from(MAX_LIMIT),
                        "must be at most",
                    )?),
                }
            }
            other => {
                return Err(CoreError::validation(
                    format!("throttling.{other}"),
                    format!(
                        "unknown throttling setting [{other}]; the allowed keys are [attribute, node_limit, shared_limit]"
                    ),
                ));
            }
        }
    }
    Ok(BagPatch::Overlay(patch))
}

// ---------------------------------------------------------------------------------------------
// queue
// ---------------------------------------------------------------------------------------------

/// Largest `queue.size_per_bucket`: the seeds' per-bucket ceiling, equal to the per-group ceiling,
/// so one bucket can never hold more than its group may.
pub const MAX_QUEUE_SIZE_PER_BUCKET: u32 = 10_000;

/// The largest `node_limit` or `shared_limit` a request may write: Java's `Integer.MAX_VALUE`.
/// OpenSearch reads both as an `int`, and its validation refuses "a negative or
/// int-overflowing limit" (seed 000). Checked on what a create or update writes
/// ([`ThrottleConfig::check_writable`]), not when a stored group is read back: a group
/// stored before the bound (up to `u32::MAX`) still loads, and an update must bring it down.
pub const MAX_LIMIT: u32 = 2_147_483_647;

/// Queueing of throttled requests of a group (seed 002).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueConfig {
    /// Parked requests per bucket per node; `None` or 0 disables queueing.
    pub size_per_bucket: Option<u32>,
}

/// A validated overlay of the queue bag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePatch {
    /// What to do with `size_per_bucket`.
    pub size_per_bucket: KeyPatch<u32>,
}

impl QueueConfig {
    /// Returns the effective queue size per bucket (0 when unset).
    pub fn num_size_per_bucket(&self) -> u32 {
        self.size_per_bucket.unwrap_or(0)
    }

    /// Returns this bag merged with a patch.
    pub fn merge(&self, patch: &BagPatch<QueuePatch>) -> QueueConfig {
        match patch {
            BagPatch::Keep => *self,
            BagPatch::Clear => QueueConfig::default(),
            BagPatch::Overlay(p) => QueueConfig {
                size_per_bucket: p.size_per_bucket.apply(self.size_per_bucket),
            },
        }
    }

    /// Renders the bag with string values.
    pub fn to_json(&self) -> Value {
        let size = self.size_per_bucket.map(|n| n.to_string());
        string_map(
            size.iter()
                .map(|s| (keys::QUEUE_SIZE_PER_BUCKET, s.as_str())),
        )
    }
}

/// Parses the `queue` bag of a request (an object or `null`).
pub fn parse_queue_patch(v: &Value) -> Result<BagPatch<QueuePatch>> {
    let flat = match flatten_bag(v) {
        BagPatch::Overlay(flat) => flat,
        BagPatch::Clear => return Ok(BagPatch::Clear),
        BagPatch::Keep => return Ok(BagPatch::Keep),
    };
    let mut patch = QueuePatch {
        size_per_bucket: KeyPatch::Keep,
    };
    for (key, value) in flat {
        if key != keys::QUEUE_SIZE_PER_BUCKET {
            return Err(CoreError::validation(
                format!("queue.{key}"),
                format!("unknown queue setting [{key}]; the only allowed key is [size_per_bucket]"),
            ));
        }
        patch.size_per_bucket = match value {
            None => KeyPatch::Clear,
            Some(v) => KeyPatch::Set(parse_count(
                "queue.size_per_bucket",
                v,
                u64::from(MAX_QUEUE_SIZE_PER_BUCKET),
                u64::from(MAX_QUEUE_SIZE_PER_BUCKET),
                "must not exceed",
            )?),
        };
    }
    Ok(BagPatch::Overlay(patch))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::group::{GroupLimits, WorkloadGroup, apply_update, validate_create};

    fn err_of<T: std::fmt::Debug>(r: Result<T>) -> (String, String) {
        match r.unwrap_err() {
            CoreError::Validation { field, message } => (field, message),
            other => panic!("expected validation error, got {other:?}"),
        }
    }

    fn throttle(v: Value) -> Result<BagPatch<ThrottlePatch>> {
        parse_throttle_patch(&v)
    }

    fn assert_err<T: std::fmt::Debug>(r: Result<T>, field: &str, message: &str) {
        assert_eq!(err_of(r), (field.to_owned(), message.to_owned()));
    }

    #[test]
    fn test_node_limit_rejects_negative_values_quoting_them() {
        let msg = |got: &str| format!("throttling.node_limit must be an integer >= 0, got {got}");
        assert_err(
            throttle(json!({"node_limit": "-3"})),
            "throttling.node_limit",
            &msg("\"-3\""),
        );
        assert_err(
            throttle(json!({"node_limit": -3})),
            "throttling.node_limit",
            &msg("-3"),
        );
    }

    #[test]
    fn test_node_limit_rejects_non_integers() {
        for bad in [
            json!(1.5),
            json!("1.5"),
            json!("ten"),
            json!(true),
            json!(""),
            json!(" 5"),
            json!([5]),
        ] {
            let expected = format!("throttling.node_limit must be an integer >= 0, got {bad}");
            assert_err(
                throttle(json!({"node_limit": bad})),
                "throttling.node_limit",
                &expected,
            );
        }
    }

    #[test]
    fn test_node_limit_rejects_values_beyond_u32_without_wrapping() {
        for bad in [
            json!(4_294_967_296u64),
            json!("4294967296"),
            json!("99999999999999999999999"),
            json!(1e20),
        ] {
            let expected = format!("throttling.node_limit must be at most 2147483647, got {bad}");
            assert_err(
                throttle(json!({"node_limit": bad})),
                "throttling.node_limit",
                &expected,
            );
        }
        let ok = throttle(json!({"node_limit": "4294967295"})).unwrap();
        assert_eq!(
            ok,
            BagPatch::Overlay(ThrottlePatch {
                attribute: KeyPatch::Keep,
                node_limit: KeyPatch::Set(u32::MAX),
                shared_limit: KeyPatch::Keep,
            })
        );
    }

    #[test]
    fn test_shared_limit_is_a_non_negative_integer_and_the_ceiling_counts_it() {
        let ok =
            throttle(json!({"attribute": "group", "node_limit": 5, "shared_limit": "40"})).unwrap();
        assert_eq!(
            ok,
            BagPatch::Overlay(ThrottlePatch {
                attribute: KeyPatch::Set(ThrottleAttribute::Group),
                node_limit: KeyPatch::Set(5),
                shared_limit: KeyPatch::Set(40),
            })
        );
        assert_err(
            throttle(json!({"shared_limit": -1})),
            "throttling.shared_limit",
            "throttling.shared_limit must be an integer >= 0, got -1",
        );
        let merged = |v: Value| {
            let BagPatch::Overlay(_) = throttle(v.clone()).unwrap() else {
                panic!()
            };
            ThrottleConfig::default().merge(&throttle(v).unwrap())
        };
        // Shared-only is valid; a zero ceiling is not, whichever limits are given.
        let shared_only = merged(json!({"attribute": "username", "shared_limit": 3}));
        assert!(shared_only.validate().is_ok());
        assert!(shared_only.is_enabled());
        assert_eq!(
            (shared_only.node_allowance(), shared_only.shared_pool()),
            (0, Some(3))
        );
        let zero = merged(json!({"attribute": "group", "node_limit": 0, "shared_limit": 0}));
        let e = zero.validate().unwrap_err();
        assert_eq!(e.field(), Some("throttling.node_limit"));
        assert!(
            e.to_string()
                .contains("effective throttle ceiling is 0 (node_limit=0 and shared_limit=0)"),
            "{e}"
        );
        let e = merged(json!({"shared_limit": 2})).validate().unwrap_err();
        assert_eq!(e.field(), Some("throttling.attribute"));
        assert!(
            e.to_string()
                .contains("when throttling.shared_limit is set"),
            "{e}"
        );
        assert!(
            merged(json!({"attribute": "group", "node_limit": 0, "shared_limit": 1}))
                .validate()
                .is_ok()
        );
        assert_eq!(
            merged(json!({"attribute": "group", "node_limit": 2, "shared_limit": 9})).to_json(),
            json!({"attribute": "group", "node_limit": "2", "shared_limit": "9"})
        );
    }

    #[test]
    fn test_throttling_rejects_unknown_key_and_bad_attribute() {
        assert_err(
            throttle(json!({"by": "username"})),
            "throttling.by",
            "unknown throttling setting [by]; the allowed keys are [attribute, node_limit, shared_limit]",
        );
        assert_err(
            throttle(json!({"attribute": "tenant"})),
            "throttling.attribute",
            "throttling.attribute must be one of [group, username, role], got \"tenant\"",
        );
        assert_err(
            throttle(json!({"attribute": "Group"})),
            "throttling.attribute",
            "throttling.attribute must be one of [group, username, role], got \"Group\"",
        );
    }

    #[test]
    fn test_throttling_null_and_empty_clear_and_key_null_clears_key() {
        assert_eq!(throttle(json!(null)).unwrap(), BagPatch::Clear);
        assert_eq!(throttle(json!({})).unwrap(), BagPatch::Clear);
        assert_eq!(
            throttle(json!({"node_limit": null})).unwrap(),
            BagPatch::Overlay(ThrottlePatch {
                attribute: KeyPatch::Keep,
                node_limit: KeyPatch::Clear,
                shared_limit: KeyPatch::Keep,
            })
        );
    }

    #[test]
    fn test_queue_size_is_bounded_and_validated() {
        let q = |v: Value| parse_queue_patch(&json!({"size_per_bucket": v}));
        assert!(q(json!(10_000)).is_ok());
        assert!(q(json!("0")).is_ok());
        assert_err(
            q(json!(10_001)),
            "queue.size_per_bucket",
            "queue.size_per_bucket must not exceed 10000, got 10001",
        );
        assert_err(
            q(json!(-1)),
            "queue.size_per_bucket",
            "queue.size_per_bucket must be an integer >= 0, got -1",
        );
        assert_err(
            parse_queue_patch(&json!({"timeout": "5s"})),
            "queue.timeout",
            "unknown queue setting [timeout]; the only allowed key is [size_per_bucket]",
        );
    }

    fn settings(v: Value) -> Result<BagPatch<SettingsPatch>> {
        parse_settings_patch(&v)
    }

    #[test]
    fn test_settings_rejects_unknown_key() {
        assert_err(
            settings(json!({"search": {"timeout": "5s"}})),
            "settings.search.timeout",
            "Unknown WLM setting: search.timeout",
        );
    }

    #[test]
    fn test_settings_rejects_bad_integers_with_opensearch_parse_messages() {
        assert_err(
            settings(json!({"search.max_concurrent_shard_requests": 0})),
            "settings.search.max_concurrent_shard_requests",
            "Invalid value '0' for search.max_concurrent_shard_requests: Failed to parse value [0] for setting \
             [search.max_concurrent_shard_requests] must be >= 1",
        );
        assert_err(
            settings(json!({"search.batched_reduce_size": "1"})),
            "settings.search.batched_reduce_size",
            "Invalid value '1' for search.batched_reduce_size: Failed to parse value [1] for setting \
             [search.batched_reduce_size] must be >= 2",
        );
        assert_err(
            settings(json!({"search.max_buckets": "many"})),
            "settings.search.max_buckets",
            "Invalid value 'many' for search.max_buckets: Failed to parse value [many] for setting \
             [search.max_buckets]",
        );
    }

    #[test]
    fn test_settings_rejects_non_boolean_override() {
        assert_err(
            settings(json!({"override_request_values": "yes"})),
            "settings.override_request_values",
            "Invalid value 'yes' for override_request_values: Failed to parse value [yes] as only [true] or \
             [false] are allowed.",
        );
    }

    #[test]
    fn test_settings_rejects_bad_time_values() {
        let key = "search.default_search_timeout";
        let invalid = |raw: &str, why: &str| {
            assert_err(
                settings(json!({ key: raw })),
                &format!("settings.{key}"),
                &format!("Invalid value '{raw}' for {key}: {why}"),
            );
        };
        let unit = |raw: &str, why: &str| {
            format!("failed to parse setting [{key}] with value [{raw}] as a time value: {why}")
        };
        invalid("30", &unit("30", "unit is missing or unrecognized"));
        invalid("5w", &unit("5w", "unit is missing or unrecognized"));
        invalid("5 parsecs", "failed to parse [5 parsecs]");
        invalid("-5s", &unit("-5s", "negative durations are not supported"));
        invalid("abcs", "failed to parse [abcs]");
        assert_err(
            settings(json!({ key: ["1s"] })),
            &format!("settings.{key}"),
            &format!("Invalid value '[\"1s\"]' for {key}: expected a single value"),
        );
    }

    /// `1.5s` is refused as a group setting exactly as the one parser refuses it everywhere
    /// else (URL parameters, cluster settings): OpenSearch's `TimeValue` takes no fractions.
    #[test]
    fn test_group_setting_refuses_fractional_time_value_like_every_other_place() {
        for key in [
            keys::CANCEL_AFTER_TIME_INTERVAL,
            keys::DEFAULT_SEARCH_TIMEOUT,
        ] {
            let wire = sluice_wire::parse_time_value("1.5s", key).expect_err("fractional");
            assert_eq!(
                wire.to_string(),
                "failed to parse [1.5s], fractional time values are not supported"
            );
            assert_err(
                settings(json!({ key: "1.5s" })),
                &format!("settings.{key}"),
                &format!("Invalid value '1.5s' for {key}: {wire}"),
            );
        }
        let BagPatch::Overlay(p) =
            settings(json!({"search.cancel_after_time_interval": "-1s"})).expect("-1s")
        else {
            panic!("expected an overlay")
        };
        let s = SearchSettings::default().merge(&BagPatch::Overlay(p));
        assert_eq!(s.cancel_after_time_interval(), Some(TimeSetting::Disabled));
    }

    #[test]
    fn test_settings_getters_return_typed_values() {
        let BagPatch::Overlay(p) = settings(json!({
            "search.default_search_timeout": "1500ms",
            "search.cancel_after_time_interval": -1,
            "search.max_concurrent_shard_requests": 3,
            "search.batched_reduce_size": "8",
            "search.max_buckets": 0,
            "override_request_values": true,
        }))
        .unwrap() else {
            panic!("expected an overlay")
        };
        let s = SearchSettings::default().merge(&BagPatch::Overlay(p));
        assert_eq!(
            s.default_search_timeout(),
            Some(TimeSetting::After(Duration::from_millis(1500)))
        );
        assert_eq!(s.cancel_after_time_interval(), Some(TimeSetting::Disabled));
        assert_eq!(s.max_concurrent_shard_requests(), Some(3));
        assert_eq!(s.batched_reduce_size(), Some(8));
        assert_eq!(s.max_buckets(), Some(0));
        assert!(s.override_request_values());
        assert_eq!(s.get("search.cancel_after_time_interval"), Some("-1"));
    }

    #[test]
    fn test_time_values_accept_every_unit() {
        let cases = [
            ("7nanos", Duration::from_nanos(7)),
            ("7micros", Duration::from_micros(7)),
            ("7ms", Duration::from_millis(7)),
            ("7s", Duration::from_secs(7)),
            ("7m", Duration::from_secs(420)),
            ("7h", Duration::from_secs(7 * 3600)),
            ("7d", Duration::from_secs(7 * 86_400)),
            ("0", Duration::ZERO),
            ("7S", Duration::from_secs(7)),
        ];
        for (raw, d) in cases {
            assert_eq!(
                parse_time_value("k", raw),
                Ok(TimeSetting::After(d)),
                "{raw}"
            );
        }
    }

    // ---- merge semantics against a model -------------------------------------------------------

    /// A bag as it appears in an update body.
    #[derive(Debug, Clone)]
    enum BagGen {
        Absent,
        Null,
        Empty,
        Object(Vec<(String, Option<Value>)>),
    }

    impl BagGen {
        fn json(&self) -> Option<Value> {
            match self {
                BagGen::Absent => None,
                BagGen::Null => Some(Value::Null),
                BagGen::Empty => Some(json!({})),
                BagGen::Object(kv) => Some(Value::Object(
                    kv.iter()
                        .map(|(k, v)| (k.clone(), v.clone().unwrap_or(Value::Null)))
                        .collect(),
                )),
            }
        }

        /// The model: absent keeps, null/{} clear, per-key null removes, values overwrite as strings.
        fn merge(&self, stored: &BTreeMap<String, String>) -> BTreeMap<String, String> {
            match self {
                BagGen::Absent => stored.clone(),
                BagGen::Null | BagGen::Empty => BTreeMap::new(),
                BagGen::Object(kv) => {
                    let mut m = stored.clone();
                    for (k, v) in kv {
                        match v {
                            None => m.remove(k),
                            Some(Value::String(s)) => m.insert(k.clone(), s.clone()),
                            Some(other) => m.insert(k.clone(), other.to_string()),
                        };
                    }
                    m
                }
            }
        }
    }

    /// One key with a valid value (as a number or a string) or null.
    fn key_value(
        key: &'static str,
        values: Vec<Value>,
    ) -> impl Strategy<Value = (String, Option<Value>)> {
        (proptest::option::weighted(0.75, proptest::sample::select(values)))
            .prop_map(move |v| (key.to_owned(), v))
    }

    fn bag(keys: Vec<BoxedStrategy<(String, Option<Value>)>>) -> impl Strategy<Value = BagGen> {
        let object =
            proptest::sample::subsequence((0..keys.len()).collect::<Vec<_>>(), 1..=keys.len())
                .prop_flat_map(move |idx| {
                    idx.into_iter().map(|i| keys[i].clone()).collect::<Vec<_>>()
                })
                .prop_map(BagGen::Object);
        prop_oneof![
            Just(BagGen::Absent),
            Just(BagGen::Null),
            Just(BagGen::Empty),
            object
        ]
    }

    fn throttle_bag() -> impl Strategy<Value = BagGen> {
        bag(vec![
            key_value(
                "attribute",
                vec![json!("group"), json!("username"), json!("role")],
            )
            .boxed(),
            key_value(
                "node_limit",
                vec![
                    json!(0),
                    json!(1),
                    json!("2"),
                    json!(30),
                    json!("2147483647"),
                ],
            )
            .boxed(),
        ])
    }

    fn queue_bag() -> impl Strategy<Value = BagGen> {
        bag(vec![
            key_value("size_per_bucket", vec![json!(0), json!("7"), json!(10_000)]).boxed(),
        ])
    }

    fn settings_bag() -> impl Strategy<Value = BagGen> {
        bag(vec![
            key_value(
                keys::DEFAULT_SEARCH_TIMEOUT,
                vec![json!("30s"), json!("-1")],
            )
            .boxed(),
            key_value(keys::MAX_BUCKETS, vec![json!(100), json!("5")]).boxed(),
            key_value(keys::BATCHED_REDUCE_SIZE, vec![json!(2)]).boxed(),
            key_value(
                keys::OVERRIDE_REQUEST_VALUES,
                vec![json!(true), json!("false")],
            )
            .boxed(),
        ])
    }

    /// A valid stored group's bags, built by creating it.
    fn stored_group() -> impl Strategy<Value = WorkloadGroup> {
        let throttle = prop_oneof![
            Just(json!({})),
            (
                proptest::sample::select(vec!["group", "username", "role"]),
                1u32..50
            )
                .prop_map(|(a, n)| json!({"attribute": a, "node_limit": n})),
        ];
        let queue = prop_oneof![
            Just(json!({})),
            (0u32..=10_000).prop_map(|n| json!({"size_per_bucket": n}))
        ];
        let settings = prop_oneof![
            Just(json!({})),
            Just(json!({"search.max_buckets": 7, "override_request_values": true})),
            Just(json!({"search.default_search_timeout": "1m"})),
        ];
        (throttle, queue, settings).prop_map(|(t, q, s)| {
            // A stored queue always has a throttle to queue behind.
            let q = if t == json!({}) { json!({}) } else { q };
            let body = json!({"name": "g", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.5},
                              "throttling": t, "queue": q, "settings": s});
            validate_create(&[], &body, "gid", 1, &GroupLimits { max_count: 100, auth_enabled: true }).unwrap()
        })
    }

    fn as_map(v: &Value) -> BTreeMap<String, String> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect()
    }

    fn node_limit_of(v: Value) -> Result<u32> {
        match parse_throttle_patch(&json!({ "node_limit": v }))? {
            BagPatch::Overlay(ThrottlePatch {
                node_limit: KeyPatch::Set(n),
                ..
            }) => Ok(n),
            other => panic!("unexpected patch {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn test_node_limit_accepts_exactly_the_u32_range_as_number_or_string(n in any::<u64>()) {
            for v in [json!(n), json!(n.to_string())] {
                match node_limit_of(v.clone()) {
                    Ok(got) => prop_assert_eq!(u64::from(got), n),
                    Err(e) => {
                        prop_assert!(n > u64::from(u32::MAX));
                        prop_assert_eq!(
                            e.to_string(),
                            format!("throttling.node_limit must be at most 2147483647, got {v}")
                        );
                    }
                }
            }
        }

        #[test]
        fn test_node_limit_rejects_every_negative_number(n in i64::MIN..0) {
            for v in [json!(n), json!(n.to_string())] {
                let e = node_limit_of(v.clone()).unwrap_err();
                prop_assert_eq!(e.to_string(), format!("throttling.node_limit must be an integer >= 0, got {v}"));
            }
        }

        #[test]
        fn test_update_merges_every_bag_like_the_model(
            group in stored_group(), t in throttle_bag(), q in queue_bag(), s in settings_bag()
        ) {
            let before = group.to_json();
            let mut body = Map::new();
            for (name, g) in [("throttling", &t), ("queue", &q), ("settings", &s)] {
                if let Some(v) = g.json() {
                    body.insert(name.to_owned(), v);
                }
            }
            let want_t = t.merge(&as_map(&before["throttling"]));
            let want_q = q.merge(&as_map(&before["queue"]));
            let want_s = s.merge(&as_map(&before["settings"]));
            let limits = GroupLimits { max_count: 100, auth_enabled: true };
            let result = apply_update(std::slice::from_ref(&group), "g", &Value::Object(body), 2, &limits);
            // The model of the merged throttling check: both keys or neither, and a limit >= 1.
            let throttle_ok = match (want_t.get("attribute"), want_t.get("node_limit")) {
                (None, None) => true,
                (Some(_), Some(n)) => n != "0",
                _ => false,
            };
            // And a queue needs a throttle to queue behind.
            let throttled = want_t.contains_key("node_limit");
            let queue_ok = throttled
                || want_q.get("size_per_bucket").is_none_or(|n| n == "0");
            if throttle_ok && queue_ok {
                let after = result.unwrap().to_json();
                prop_assert_eq!(as_map(&after["throttling"]), want_t);
                prop_assert_eq!(as_map(&after["queue"]), want_q);
                prop_assert_eq!(as_map(&after["settings"]), want_s);
            } else if throttle_ok {
                let field = result.unwrap_err().field().unwrap_or_default().to_owned();
                prop_assert_eq!(field, "queue.size_per_bucket");
            } else {
                let field = result.unwrap_err().field().unwrap_or_default().to_owned();
                prop_assert!(field.starts_with("throttling."), "{}", field);
            }
        }
    }
}
