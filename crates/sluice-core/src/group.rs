//! The workload group model, its OpenSearch JSON rendering, parsing of create and update
//! requests, the partial-update merge and the cross-group checks.
//!
//! The two entry points are pure: [`validate_create`] and [`apply_update`] take the stored
//! groups and a request body and return the group to store, or a [`CoreError`]. The server
//! generates ids and reads the clock; both come in as parameters.

use serde_json::{Map, Value};

use crate::bags::{
    self, BagPatch, QueueConfig, QueuePatch, SearchSettings, SettingsPatch, ThrottleConfig,
    ThrottlePatch,
};
use crate::error::{CoreError, Result};

/// Longest allowed group name: OpenSearch's limit, kept so names valid there are valid here;
/// counted in UTF-16 code units as Java's `String.length()` counts them.
pub const MAX_NAME_LEN: usize = 50;

/// Default maximum number of groups: OpenSearch's `node.workload_group.max_count` default.
pub const DEFAULT_MAX_WORKLOAD_GROUPS: usize = 100;

/// Slack allowed above 1.0 when summing limits across groups, so that decimal values whose binary
/// sum rounds just above 1.0 (0.1 + 0.2 + 0.7) are accepted; the same 1e-9 the enforcement
/// loop uses for excess usage (facts §6). No real allocation differs from 1.0 by this little.
pub const RESOURCE_SUM_TOLERANCE: f64 = 1e-9;

/// How a group reacts to overrunning its resource share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResiliencyMode {
    /// Rejected and cancelled only when the node is in duress; throttled always.
    Soft,
    /// Rejected and cancelled whenever over its limits; throttled always.
    Enforced,
    /// Observed only: never rejected, cancelled, throttled or parked.
    Monitor,
}

impl ResiliencyMode {
    /// Returns the lowercase wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ResiliencyMode::Soft => "soft",
            ResiliencyMode::Enforced => "enforced",
            ResiliencyMode::Monitor => "monitor",
        }
    }

    /// Parses a wire name, case-insensitively as OpenSearch does.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "soft" => Some(ResiliencyMode::Soft),
            "enforced" => Some(ResiliencyMode::Enforced),
            "monitor" => Some(ResiliencyMode::Monitor),
            _ => None,
        }
    }
}

/// A tracked resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceType {
    /// CPU time as a fraction of the node.
    Cpu,
    /// Memory as a fraction of the node budget.
    Memory,
}

impl ResourceType {
    /// All resource types, in output order.
    pub const ALL: [ResourceType; 2] = [ResourceType::Cpu, ResourceType::Memory];

    /// Returns the wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ResourceType::Cpu => "cpu",
            ResourceType::Memory => "memory",
        }
    }

    /// Parses a wire name, exactly and case-sensitively as OpenSearch does.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(ResourceType::Cpu),
            "memory" => Some(ResourceType::Memory),
            _ => None,
        }
    }
}

/// Resource limits of a group, each a fraction of the node in (0, 1].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResourceLimits {
    /// CPU share.
    pub cpu: Option<f64>,
    /// Memory share.
    pub memory: Option<f64>,
}

impl ResourceLimits {
    /// Returns the limit of one resource.
    pub fn get(&self, r: ResourceType) -> Option<f64> {
        match r {
            ResourceType::Cpu => self.cpu,
            ResourceType::Memory => self.memory,
        }
    }

    fn slot(&mut self, r: ResourceType) -> &mut Option<f64> {
        match r {
            ResourceType::Cpu => &mut self.cpu,
            ResourceType::Memory => &mut self.memory,
        }
    }

    /// Returns whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.memory.is_none()
    }

    /// Returns these limits with every limit set in `other` overwritten.
    pub fn merge(&self, other: &ResourceLimits) -> ResourceLimits {
        ResourceLimits {
            cpu: other.cpu.or(self.cpu),
            memory: other.memory.or(self.memory),
        }
    }

    /// Renders `{"cpu":..,"memory":..}`, cpu first, absent ones omitted.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for r in ResourceType::ALL {
            if let Some(v) = self.get(r) {
                m.insert(r.as_str().to_owned(), Value::from(v));
            }
        }
        Value::Object(m)
    }
}

/// A workload group as stored.
///
/// # Invariants
/// A group returned by [`validate_create`] or [`apply_update`] has a valid name, at least one
/// resource limit, each in (0, 1], a throttling config that passes [`ThrottleConfig::validate`]
/// and `updated_at > 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadGroup {
    /// Server-generated URL-safe id (`_id`).
    pub id: String,
    /// Unique, immutable name.
    pub name: String,
    /// Reaction to overrunning the resource share.
    pub resiliency_mode: ResiliencyMode,
    /// Resource shares.
    pub resource_limits: ResourceLimits,
    /// Per-request search settings.
    pub settings: SearchSettings,
    /// Per-node throttling.
    pub throttling: ThrottleConfig,
    /// Queueing of throttled requests.
    pub queue: QueueConfig,
    /// Epoch millis of the last create or update.
    pub updated_at: i64,
}

impl WorkloadGroup {
    /// Renders the group as GET/create/update responses do: `_id`, `name`, `resiliency_mode`,
    /// `resource_limits`, `settings`, `throttling`, `queue`, `updated_at`; bags always present,
    /// with string values.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("_id".into(), Value::String(self.id.clone()));
        m.insert("name".into(), Value::String(self.name.clone()));
        m.insert(
            "resiliency_mode".into(),
            Value::String(self.resiliency_mode.as_str().into()),
        );
        m.insert("resource_limits".into(), self.resource_limits.to_json());
        m.insert("settings".into(), self.settings.to_json());
        m.insert("throttling".into(), self.throttling.to_json());
        m.insert("queue".into(), self.queue.to_json());
        m.insert("updated_at".into(), Value::from(self.updated_at));
        Value::Object(m)
    }

    /// Reads a group back from its [`to_json`](Self::to_json) rendering (for a metastore).
    ///
    /// Checks each field alone, not the cross-group rules nor the authentication requirement.
    pub fn from_json(v: &Value) -> Result<WorkloadGroup> {
        let req = parse_create_request(v)?;
        let id = v.get("_id").and_then(Value::as_str).unwrap_or_default();
        let updated_at = v.get("updated_at").and_then(Value::as_i64).unwrap_or(0);
        let group = req.into_group(id, updated_at)?;
        check_group_alone(&group, None)?;
        Ok(group)
    }
}

/// A parsed create request.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateRequest {
    /// The group name.
    pub name: String,
    /// The resiliency mode.
    pub resiliency_mode: ResiliencyMode,
    /// At least one resource limit.
    pub resource_limits: ResourceLimits,
    /// The settings bag (applied to an empty bag).
    pub settings: BagPatch<SettingsPatch>,
    /// The throttling bag (applied to an empty bag).
    pub throttling: BagPatch<ThrottlePatch>,
    /// The queue bag (applied to an empty bag).
    pub queue: BagPatch<QueuePatch>,
}

impl CreateRequest {
    fn into_group(self, id: &str, now_millis: i64) -> Result<WorkloadGroup> {
        check_epoch(now_millis)?;
        Ok(WorkloadGroup {
            id: id.to_owned(),
            name: self.name,
            resiliency_mode: self.resiliency_mode,
            resource_limits: self.resource_limits,
            settings: SearchSettings::default().merge(&self.settings),
            throttling: ThrottleConfig::default().merge(&self.throttling),
            queue: QueueConfig::default().merge(&self.queue),
            updated_at: now_millis,
        })
    }
}

/// A parsed partial update.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateRequest {
    /// A name in the body, which must equal the path name (names are immutable).
    pub name: Option<String>,
    /// A new resiliency mode.
    pub resiliency_mode: Option<ResiliencyMode>,
    /// Limits to overwrite, key by key (a limit cannot be removed).
    pub resource_limits: ResourceLimits,
    /// What to do with the settings bag.
    pub settings: BagPatch<SettingsPatch>,
    /// What to do with the throttling bag.
    pub throttling: BagPatch<ThrottlePatch>,
    /// What to do with the queue bag.
    pub queue: BagPatch<QueuePatch>,
}

impl UpdateRequest {
    /// Returns `group` with this update merged in and `updated_at` set; not yet validated.
    pub fn apply_to(&self, group: &WorkloadGroup, now_millis: i64) -> WorkloadGroup {
        WorkloadGroup {
            id: group.id.clone(),
            name: group.name.clone(),
            resiliency_mode: self.resiliency_mode.unwrap_or(group.resiliency_mode),
            resource_limits: group.resource_limits.merge(&self.resource_limits),
            settings: group.settings.merge(&self.settings),
            throttling: group.throttling.merge(&self.throttling),
            queue: group.queue.merge(&self.queue),
            updated_at: now_millis,
        }
    }
}

/// Name of the setting holding the maximum number of groups.
pub use sluice_wire::keys::WLM_MAX_GROUP_COUNT as MAX_COUNT_SETTING;

/// Checks a value of `node.workload_group.max_count` (1..=100, as OpenSearch allows).
pub fn check_max_count_setting(value: i64) -> Result<usize> {
    if (1..=DEFAULT_MAX_WORKLOAD_GROUPS as i64).contains(&value) {
        Ok(value as usize)
    } else {
        Err(CoreError::validation(
            MAX_COUNT_SETTING,
            format!("{MAX_COUNT_SETTING} should be in range [1-100]."),
        ))
    }
}

/// Limits and environment the checks depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    /// Maximum number of groups (`node.workload_group.max_count`).
    pub max_count: usize,
    /// Whether sluice authentication is configured (D6): username/role throttles need it.
    pub auth_enabled: bool,
}

impl Default for GroupLimits {
    /// 100 groups, no authentication.
    fn default() -> Self {
        GroupLimits {
            max_count: DEFAULT_MAX_WORKLOAD_GROUPS,
            auth_enabled: false,
        }
    }
}

/// Fields of a create or update body, each checked alone.
#[derive(Default)]
struct Fragment {
    name: Option<String>,
    resiliency_mode: Option<ResiliencyMode>,
    resource_limits: Option<ResourceLimits>,
    settings: Option<BagPatch<SettingsPatch>>,
    throttling: Option<BagPatch<ThrottlePatch>>,
    queue: Option<BagPatch<QueuePatch>>,
}

/// Returns the Jackson token name OpenSearch reports for a JSON value (the wire crate's).
pub(crate) use sluice_wire::json::token_name;

pub(crate) fn expect_object(v: &Value) -> Result<&Map<String, Value>> {
    v.as_object().ok_or_else(|| {
        CoreError::validation(
            "",
            format!("Expected START_OBJECT token but found [{}]", token_name(v)),
        )
    })
}

const OBJECT_FIELDS: [&str; 4] = ["resource_limits", "settings", "throttling", "queue"];
const SCALAR_FIELDS: [&str; 4] = ["_id", "name", "resiliency_mode", "updated_at"];

fn parse_fragment(v: &Value) -> Result<Fragment> {
    let obj = expect_object(v)?;
    let mut f = Fragment::default();
    for (key, val) in obj {
        let k = key.as_str();
        if !OBJECT_FIELDS.contains(&k) && !SCALAR_FIELDS.contains(&k) {
            let message = if val.is_object() {
                format!("{k} is not a valid object in WorkloadGroup")
            } else {
                format!("{k} is not a valid field in WorkloadGroup")
            };
            return Err(CoreError::validation(k, message));
        }
        if OBJECT_FIELDS.contains(&k) && !val.is_object() && !val.is_null() {
            return Err(CoreError::validation(
                k,
                format!("{k} must be an object, got {}", bags::show(val)),
            ));
        }
        match k {
            "_id" | "updated_at" => {} // accepted and ignored: the server sets both
            "name" => {
                f.name = match val {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    other => {
                        return Err(CoreError::validation(
                            "name",
                            format!("name must be a string, got {}", bags::show(other)),
                        ));
                    }
                }
            }
            "resiliency_mode" => {
                f.resiliency_mode = match val {
                    Value::Null => None,
                    other => {
                        let text = other
                            .as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| bags::show(other));
                        Some(ResiliencyMode::parse(&text).ok_or_else(|| {
                            CoreError::validation(
                                "resiliency_mode",
                                format!("Invalid value for WorkloadGroupMode: {text}"),
                            )
                        })?)
                    }
                }
            }
            "resource_limits" => {
                if val.is_null() {
                    return Err(CoreError::validation(
                        "resource_limits",
                        "WorkloadGroup.resourceLimits can't be null",
                    ));
                }
                f.resource_limits = Some(parse_resource_limits(val)?);
            }
            "settings" => f.settings = Some(bags::parse_settings_patch(val)?),
            "throttling" => f.throttling = Some(bags::parse_throttle_patch(val)?),
            "queue" => f.queue = Some(bags::parse_queue_patch(val)?),
            _ => unreachable!(),
        }
    }
    Ok(f)
}

fn parse_resource_limits(v: &Value) -> Result<ResourceLimits> {
    let mut limits = ResourceLimits::default();
    for (key, val) in v.as_object().into_iter().flatten() {
        let field = format!("resource_limits.{key}");
        let r = ResourceType::parse(key).ok_or_else(|| {
            CoreError::validation(&field, format!("Unknown resource type: [{key}]"))
        })?;
        let x = match val {
            Value::Null => {
                return Err(CoreError::validation(
                    field,
                    format!("resource limit threshold for{key} : can't be null"),
                ));
            }
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        let Some(x) = x else {
            return Err(CoreError::validation(
                &field,
                format!("{field} must be a number, got {}", bags::show(val)),
            ));
        };
        if !(x > 0.0 && x <= 1.0) {
            return Err(CoreError::validation(
                field,
                "resource value should be greater than 0 and less or equal to 1.0",
            ));
        }
        *limits.slot(r) = Some(x);
    }
    Ok(limits)
}

/// Checks a group name: 1 to 50 characters (no character set restriction, as in OpenSearch).
pub fn check_name(name: &str) -> Result<()> {
    let len = name.encode_utf16().count();
    if len == 0 || len > MAX_NAME_LEN {
        return Err(CoreError::validation(
            "name",
            "WorkloadGroup.name shouldn't be null, empty or more than 50 chars long",
        ));
    }
    Ok(())
}

fn check_epoch(now_millis: i64) -> Result<()> {
    if now_millis <= 0 {
        return Err(CoreError::validation(
            "updated_at",
            "WorkloadGroup.updatedAtInMillis is not a valid epoch",
        ));
    }
    Ok(())
}

/// Parses a create body; every field is checked alone, required fields must be present.
pub fn parse_create_request(v: &Value) -> Result<CreateRequest> {
    let f = parse_fragment(v)?;
    let name = f
        .name
        .ok_or_else(|| CoreError::validation("name", "WorkloadGroup.name can't be null"))?;
    check_name(&name)?;
    let resource_limits = f.resource_limits.ok_or_else(|| {
        CoreError::validation(
            "resource_limits",
            "WorkloadGroup.resourceLimits can't be null",
        )
    })?;
    let resiliency_mode = f.resiliency_mode.ok_or_else(|| {
        CoreError::validation(
            "resiliency_mode",
            "WorkloadGroup.resiliencyMode can't be null",
        )
    })?;
    if resource_limits.is_empty() {
        return Err(CoreError::validation(
            "resource_limits",
            "WorkloadGroup.resourceLimits should at least have 1 resource limit",
        ));
    }
    Ok(CreateRequest {
        name,
        resiliency_mode,
        resource_limits,
        settings: f.settings.unwrap_or(BagPatch::Keep),
        throttling: f.throttling.unwrap_or(BagPatch::Keep),
        queue: f.queue.unwrap_or(BagPatch::Keep),
    })
}

/// Parses an update body; every field is optional and checked alone.
pub fn parse_update_request(v: &Value) -> Result<UpdateRequest> {
    let f = parse_fragment(v)?;
    Ok(UpdateRequest {
        name: f.name,
        resiliency_mode: f.resiliency_mode,
        resource_limits: f.resource_limits.unwrap_or_default(),
        settings: f.settings.unwrap_or(BagPatch::Keep),
        throttling: f.throttling.unwrap_or(BagPatch::Keep),
        queue: f.queue.unwrap_or(BagPatch::Keep),
    })
}

/// Checks the rules of one merged group: throttling as a whole, and (when `auth_enabled` is
/// given) that a username/role throttle has authentication to identify callers.
fn check_group_alone(g: &WorkloadGroup, auth_enabled: Option<bool>) -> Result<()> {
    check_name(&g.name)?;
    check_epoch(g.updated_at)?;
    if g.resource_limits.is_empty() {
        return Err(CoreError::validation(
            "resource_limits",
            "WorkloadGroup.resourceLimits should at least have 1 resource limit",
        ));
    }
    g.throttling.validate()?;
    if g.queue.num_size_per_bucket() > 0 && !g.throttling.is_enabled() {
        return Err(CoreError::validation(
            "queue.size_per_bucket",
            format!(
                "queue.size_per_bucket [{}] needs a throttle limit to queue behind: set throttling.attribute and throttling.node_limit or throttling.shared_limit, or set queue to null",
                g.queue.num_size_per_bucket()
            ),
        ));
    }
    if let (Some(false), Some(a)) = (auth_enabled, g.throttling.attribute)
        && a.needs_principal()
    {
        return Err(CoreError::validation(
            "throttling.attribute",
            format!(
                "throttling.attribute [{}] needs an authenticated caller, but no authentication is \
                 configured: set auth.type in config/sluice.yml, or use attribute [group]",
                a.as_str()
            ),
        ));
    }
    Ok(())
}

/// Checks that the sum of each resource over all groups, with `candidate` replacing any stored
/// group of the same id, stays within 1.0.
fn check_resource_sums(existing: &[WorkloadGroup], candidate: &WorkloadGroup) -> Result<()> {
    for r in ResourceType::ALL {
        let Some(own) = candidate.resource_limits.get(r) else {
            continue;
        };
        let others: f64 = existing
            .iter()
            .filter(|g| g.id != candidate.id)
            .filter_map(|g| g.resource_limits.get(r))
            .sum();
        if others + own > 1.0 + RESOURCE_SUM_TOLERANCE {
            return Err(CoreError::Conflict {
                message: format!(
                    "Total resource allocation for {} will go above the max limit of 1.0.",
                    r.as_str()
                ),
            });
        }
    }
    Ok(())
}

/// Validates a create body against the stored groups and returns the group to store.
///
/// `id` is the server-generated id, `now_millis` the current epoch millis.
pub fn validate_create(
    existing: &[WorkloadGroup],
    body: &Value,
    id: &str,
    now_millis: i64,
    limits: &GroupLimits,
) -> Result<WorkloadGroup> {
    let group = parse_create_request(body)?.into_group(id, now_millis)?;
    check_group_alone(&group, Some(limits.auth_enabled))?;
    group.throttling.check_writable()?;
    if existing.len() >= limits.max_count {
        return Err(CoreError::TooMany {
            message: format!(
                "Can't create more than {} WorkloadGroups in the system.",
                limits.max_count
            ),
        });
    }
    if existing.iter().any(|g| g.name == group.name) {
        return Err(CoreError::AlreadyExists {
            message: format!(
                "WorkloadGroup with name {} already exists. Not creating a new one.",
                group.name
            ),
        });
    }
    if existing.iter().any(|g| g.id == group.id) {
        return Err(CoreError::AlreadyExists {
            message: format!(
                "workload group id [{}] is already taken; retry to get a new id",
                group.id
            ),
        });
    }
    check_resource_sums(existing, &group)?;
    Ok(group)
}

/// Applies an update body to the stored group named `name` and returns the merged group to
/// store, validated as a whole and against the other groups.
pub fn apply_update(
    existing: &[WorkloadGroup],
    name: &str,
    body: &Value,
    now_millis: i64,
    limits: &GroupLimits,
) -> Result<WorkloadGroup> {
    check_name(name)?;
    let req = parse_update_request(body)?;
    let stored = existing
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| CoreError::NotFound {
            message: format!("No WorkloadGroup exists with the provided name: {name}"),
        })?;
    if let Some(body_name) = &req.name
        && body_name != name
    {
        return Err(CoreError::validation(
            "name",
            format!(
                "name is immutable: the body names [{body_name}] but the group is [{name}]; \
                 remove name from the body, or create a new group"
            ),
        ));
    }
    check_epoch(now_millis)?;
    let merged = req.apply_to(stored, now_millis);
    check_group_alone(&merged, Some(limits.auth_enabled))?;
    merged.throttling.check_writable()?;
    check_resource_sums(existing, &merged)?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::bags::ThrottleAttribute;
    use crate::error::ErrorCode;

    const NOW: i64 = 1_726_270_184_642;

    fn auth() -> GroupLimits {
        GroupLimits {
            max_count: DEFAULT_MAX_WORKLOAD_GROUPS,
            auth_enabled: true,
        }
    }

    #[test]
    fn test_limits_beyond_a_java_int_are_refused_when_written_and_read_when_stored() {
        for (key, field) in [
            ("node_limit", "throttling.node_limit"),
            ("shared_limit", "throttling.shared_limit"),
        ] {
            let body = |v: u64| {
                json!({"name": "g", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1},
                       "throttling": {"attribute": "group", key: v}})
            };
            assert!(create_in(&[], body(2_147_483_647)).is_ok());
            match create_in(&[], body(2_147_483_648)) {
                Err(CoreError::Validation { field: f, message }) => {
                    assert_eq!(f, field);
                    assert_eq!(
                        message,
                        format!("{field} must be at most 2147483647, got 2147483648")
                    );
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
            // A group stored with a larger value before the bound still loads; an update must
            // bring it down.
            let mut stored = create_in(&[], body(5)).unwrap();
            let mut doc = stored.to_json();
            doc["throttling"][key] = json!("4294967295");
            stored = WorkloadGroup::from_json(&doc).expect("a stored group loads");
            let name = stored.name.clone();
            let err = apply_update(
                std::slice::from_ref(&stored),
                &name,
                &json!({"resiliency_mode": "enforced"}),
                NOW,
                &auth(),
            )
            .unwrap_err();
            assert!(err.to_string().contains("at most 2147483647"), "{err}");
            let fixed = apply_update(
                &[stored],
                &name,
                &json!({"throttling": {key: 10}}),
                NOW,
                &auth(),
            )
            .unwrap();
            assert_eq!(fixed.throttling.check_writable().ok(), Some(()));
        }
    }

    fn create_in(existing: &[WorkloadGroup], body: Value) -> Result<WorkloadGroup> {
        validate_create(
            existing,
            &body,
            &format!("id{}", existing.len()),
            NOW,
            &auth(),
        )
    }

    fn create(body: Value) -> Result<WorkloadGroup> {
        create_in(&[], body)
    }

    fn body(extra: Value) -> Value {
        let mut b = json!({"name": "analytics", "resiliency_mode": "enforced", "resource_limits": {"cpu": 0.4}});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    /// Asserts a validation error on `field` with exactly `message`.
    fn assert_invalid(r: Result<WorkloadGroup>, field: &str, message: &str) {
        match r {
            Err(CoreError::Validation {
                field: f,
                message: m,
            }) => {
                assert_eq!((f.as_str(), m.as_str()), (field, message));
            }
            other => panic!("expected validation error on {field}, got {other:?}"),
        }
    }

    fn stored(name: &str, cpu: f64) -> WorkloadGroup {
        create(json!({"name": name, "resiliency_mode": "soft", "resource_limits": {"cpu": cpu}}))
            .unwrap()
    }

    fn update(existing: &[WorkloadGroup], name: &str, b: Value) -> Result<WorkloadGroup> {
        apply_update(existing, name, &b, NOW + 1, &auth())
    }

    #[test]
    fn test_group_renders_fields_in_opensearch_order_with_string_bags() {
        let g = create(body(json!({
            "resource_limits": {"memory": 0.2, "cpu": 0.4},
            "settings": {"search": {"max_buckets": 100}, "override_request_values": true},
            "throttling": {"node_limit": 10, "attribute": "group"},
            "queue": {"size_per_bucket": "5"},
        })))
        .unwrap();
        assert_eq!(
            g.to_json().to_string(),
            r#"{"_id":"id0","name":"analytics","resiliency_mode":"enforced","resource_limits":{"cpu":0.4,"memory":0.2},"settings":{"override_request_values":"true","search.max_buckets":"100"},"throttling":{"attribute":"group","node_limit":"10"},"queue":{"size_per_bucket":"5"},"updated_at":1726270184642}"#
        );
    }

    #[test]
    fn test_group_renders_empty_bags_as_empty_objects() {
        let g = create(body(json!({}))).unwrap();
        assert_eq!(g.to_json()["settings"], json!({}));
        assert_eq!(g.to_json()["throttling"], json!({}));
        assert_eq!(g.to_json()["queue"], json!({}));
    }

    #[test]
    fn test_group_round_trips_through_from_json() {
        let g = create(body(
            json!({"throttling": {"attribute": "role", "node_limit": 3}}),
        ))
        .unwrap();
        assert_eq!(WorkloadGroup::from_json(&g.to_json()).unwrap(), g);
    }

    #[test]
    fn test_create_ignores_id_and_updated_at_in_body() {
        let g = create(body(json!({"_id": "mine", "updated_at": 5}))).unwrap();
        assert_eq!((g.id.as_str(), g.updated_at), ("id0", NOW));
    }

    #[test]
    fn test_create_rejects_non_object_body() {
        assert_invalid(
            create(json!([1])),
            "",
            "Expected START_OBJECT token but found [START_ARRAY]",
        );
        assert_invalid(
            create(json!("x")),
            "",
            "Expected START_OBJECT token but found [VALUE_STRING]",
        );
    }

    #[test]
    fn test_create_requires_name_mode_and_limits() {
        let no_name = json!({"resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}});
        assert_invalid(create(no_name), "name", "WorkloadGroup.name can't be null");
        let no_limits = json!({"name": "a", "resiliency_mode": "soft"});
        assert_invalid(
            create(no_limits),
            "resource_limits",
            "WorkloadGroup.resourceLimits can't be null",
        );
        let no_mode = json!({"name": "a", "resource_limits": {"cpu": 0.1}});
        assert_invalid(
            create(no_mode),
            "resiliency_mode",
            "WorkloadGroup.resiliencyMode can't be null",
        );
        assert_invalid(
            create(body(json!({"resource_limits": null}))),
            "resource_limits",
            "WorkloadGroup.resourceLimits can't be null",
        );
    }

    #[test]
    fn test_create_rejects_empty_or_long_name_and_counts_utf16_units() {
        let msg = "WorkloadGroup.name shouldn't be null, empty or more than 50 chars long";
        assert_invalid(create(body(json!({"name": ""}))), "name", msg);
        assert_invalid(create(body(json!({"name": "x".repeat(51)}))), "name", msg);
        assert!(create(body(json!({"name": "x".repeat(50)}))).is_ok());
        // 25 emoji are 50 UTF-16 units (ok); 26 are 52 (too long), as Java counts them.
        assert!(create(body(json!({"name": "😀".repeat(25)}))).is_ok());
        assert_invalid(create(body(json!({"name": "😀".repeat(26)}))), "name", msg);
        assert!(create(body(json!({"name": "any chars: /?#&é"}))).is_ok());
        assert_invalid(
            create(body(json!({"name": 5}))),
            "name",
            "name must be a string, got 5",
        );
    }

    #[test]
    fn test_create_parses_mode_case_insensitively_and_rejects_unknown_mode() {
        let g = create(body(json!({"resiliency_mode": "MONITOR"}))).unwrap();
        assert_eq!(g.to_json()["resiliency_mode"], "monitor");
        assert_invalid(
            create(body(json!({"resiliency_mode": "hard"}))),
            "resiliency_mode",
            "Invalid value for WorkloadGroupMode: hard",
        );
    }

    #[test]
    fn test_create_rejects_empty_limits_and_out_of_range_values() {
        assert_invalid(
            create(body(json!({"resource_limits": {}}))),
            "resource_limits",
            "WorkloadGroup.resourceLimits should at least have 1 resource limit",
        );
        let msg = "resource value should be greater than 0 and less or equal to 1.0";
        for bad in [json!(0), json!(-0.1), json!(1.01)] {
            assert_invalid(
                create(body(json!({"resource_limits": {"cpu": bad}}))),
                "resource_limits.cpu",
                msg,
            );
        }
        assert_eq!(
            create(body(json!({"resource_limits": {"memory": 1.0}})))
                .unwrap()
                .resource_limits
                .memory,
            Some(1.0)
        );
    }

    #[test]
    fn test_create_rejects_null_unknown_and_non_numeric_limits() {
        assert_invalid(
            create(body(json!({"resource_limits": {"cpu": null}}))),
            "resource_limits.cpu",
            "resource limit threshold forcpu : can't be null",
        );
        assert_invalid(
            create(body(json!({"resource_limits": {"CPU": 0.1}}))),
            "resource_limits.CPU",
            "Unknown resource type: [CPU]",
        );
        assert_invalid(
            create(body(json!({"resource_limits": {"cpu": "lots"}}))),
            "resource_limits.cpu",
            "resource_limits.cpu must be a number, got \"lots\"",
        );
    }

    #[test]
    fn test_create_rejects_unknown_fields_naming_them() {
        assert_invalid(
            create(body(json!({"colour": "red"}))),
            "colour",
            "colour is not a valid field in WorkloadGroup",
        );
        assert_invalid(
            create(body(json!({"extra": {"a": 1}}))),
            "extra",
            "extra is not a valid object in WorkloadGroup",
        );
        assert_invalid(
            create(body(json!({"settings": 3}))),
            "settings",
            "settings must be an object, got 3",
        );
    }

    #[test]
    fn test_create_rejects_non_positive_epoch() {
        let r = validate_create(&[], &body(json!({})), "id", 0, &auth());
        assert_invalid(
            r,
            "updated_at",
            "WorkloadGroup.updatedAtInMillis is not a valid epoch",
        );
    }

    #[test]
    fn test_create_rejects_duplicate_name() {
        let a = stored("analytics", 0.1);
        let err = create_in(&[a], body(json!({}))).unwrap_err();
        assert_eq!(err.code(), ErrorCode::AlreadyExists);
        assert_eq!(
            err.to_string(),
            "WorkloadGroup with name analytics already exists. Not creating a new one."
        );
    }

    #[test]
    fn test_create_rejects_cpu_sum_above_one() {
        let a = stored("a", 0.7);
        let err = create_in(
            &[a],
            body(json!({"resource_limits": {"cpu": 0.31, "memory": 0.5}})),
        )
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Conflict);
        assert_eq!(
            err.to_string(),
            "Total resource allocation for cpu will go above the max limit of 1.0."
        );
    }

    #[test]
    fn test_create_accepts_decimal_limits_summing_to_one_despite_float_rounding() {
        let a = stored("a", 0.33);
        let b = create_in(
            std::slice::from_ref(&a),
            json!({"name": "b", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.56}}),
        )
        .unwrap();
        let parts: [f64; 3] = std::hint::black_box([0.33, 0.56, 0.11]);
        assert!(
            parts[0] + parts[1] + parts[2] > 1.0,
            "the case this test guards"
        );
        assert!(create_in(&[a, b], body(json!({"resource_limits": {"cpu": 0.11}}))).is_ok());
    }

    #[test]
    fn test_create_rejects_more_than_max_count_groups() {
        let existing = vec![stored("a", 0.1), stored("b", 0.1)];
        let limits = GroupLimits {
            max_count: 2,
            auth_enabled: true,
        };
        let err = validate_create(&existing, &body(json!({})), "id", NOW, &limits).unwrap_err();
        assert_eq!(err.code(), ErrorCode::TooMany);
        assert_eq!(
            err.to_string(),
            "Can't create more than 2 WorkloadGroups in the system."
        );
    }

    #[test]
    fn test_max_count_setting_accepts_only_one_to_hundred() {
        assert_eq!(check_max_count_setting(1), Ok(1));
        assert_eq!(check_max_count_setting(100), Ok(100));
        for bad in [0, 101, -1] {
            let err = check_max_count_setting(bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                "node.workload_group.max_count should be in range [1-100]."
            );
        }
    }

    #[test]
    fn test_create_rejects_principal_throttle_without_authentication() {
        let no_auth = GroupLimits::default();
        for attr in ["username", "role"] {
            let b = body(json!({"throttling": {"attribute": attr, "node_limit": 5}}));
            assert_invalid(
                validate_create(&[], &b, "id", NOW, &no_auth),
                "throttling.attribute",
                &format!(
                    "throttling.attribute [{attr}] needs an authenticated caller, but no authentication is \
                     configured: set auth.type in config/sluice.yml, or use attribute [group]"
                ),
            );
        }
        let b = body(json!({"throttling": {"attribute": "group", "node_limit": 5}}));
        assert!(validate_create(&[], &b, "id", NOW, &no_auth).is_ok());
    }

    #[test]
    fn test_create_rejects_limit_without_attribute_and_attribute_without_limit() {
        assert_invalid(
            create(body(json!({"throttling": {"node_limit": 5}}))),
            "throttling.attribute",
            "throttling.attribute is required when throttling.node_limit is set; set it to group, username or \
             role, or set throttling to null to disable throttling",
        );
        assert_invalid(
            create(body(json!({"throttling": {"attribute": "group"}}))),
            "throttling.node_limit",
            "throttling.node_limit is required when throttling.attribute is set (attribute is [group]); set a \
             limit >= 1 (or a cluster-wide throttling.shared_limit), or set throttling to null to disable \
             throttling",
        );
    }

    #[test]
    fn test_create_rejects_zero_effective_ceiling() {
        assert_invalid(
            create(body(
                json!({"throttling": {"attribute": "group", "node_limit": 0}}),
            )),
            "throttling.node_limit",
            "effective throttle ceiling is 0 (node_limit=0 and shared_limit=unset); this would reject every \
             request: set throttling.node_limit >= 1 or throttling.shared_limit >= 1, or set throttling to null \
             to disable throttling",
        );
    }

    #[test]
    fn test_update_of_unknown_group_is_not_found() {
        let err = update(&[stored("a", 0.1)], "b", json!({})).unwrap_err();
        assert_eq!(err.code(), ErrorCode::NotFound);
        assert_eq!(
            err.to_string(),
            "No WorkloadGroup exists with the provided name: b"
        );
    }

    #[test]
    fn test_update_rejects_path_name_too_long() {
        assert_invalid(
            update(&[], &"x".repeat(51), json!({})),
            "name",
            "WorkloadGroup.name shouldn't be null, empty or more than 50 chars long",
        );
    }

    #[test]
    fn test_update_rejects_renaming_and_accepts_same_name() {
        let a = stored("a", 0.1);
        assert_invalid(
            update(std::slice::from_ref(&a), "a", json!({"name": "b"})),
            "name",
            "name is immutable: the body names [b] but the group is [a]; remove name from the body, or create a \
             new group",
        );
        assert_eq!(update(&[a], "a", json!({"name": "a"})).unwrap().name, "a");
    }

    #[test]
    fn test_update_merges_limits_key_by_key_and_keeps_identity() {
        let a = stored("a", 0.1);
        let u = update(
            std::slice::from_ref(&a),
            "a",
            json!({"resource_limits": {"memory": 0.3}, "resiliency_mode": "monitor"}),
        )
        .unwrap();
        assert_eq!(
            u.resource_limits,
            ResourceLimits {
                cpu: Some(0.1),
                memory: Some(0.3)
            }
        );
        assert_eq!(
            (u.id.as_str(), u.resiliency_mode, u.updated_at),
            (a.id.as_str(), ResiliencyMode::Monitor, NOW + 1)
        );
        let same = update(
            std::slice::from_ref(&a),
            "a",
            json!({"resource_limits": {}}),
        )
        .unwrap();
        assert_eq!(same.resource_limits, a.resource_limits);
    }

    #[test]
    fn test_update_rejects_null_resource_limits() {
        assert_invalid(
            update(&[stored("a", 0.1)], "a", json!({"resource_limits": null})),
            "resource_limits",
            "WorkloadGroup.resourceLimits can't be null",
        );
    }

    #[test]
    fn test_update_sum_excludes_the_group_itself_but_counts_others() {
        let a = stored("a", 0.5);
        let b = create_in(
            std::slice::from_ref(&a),
            json!({"name": "b", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.4}}),
        )
        .unwrap();
        let groups = [a, b];
        assert!(update(&groups, "a", json!({"resource_limits": {"cpu": 0.6}})).is_ok());
        let err = update(&groups, "a", json!({"resource_limits": {"cpu": 0.61}})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Total resource allocation for cpu will go above the max limit of 1.0."
        );
    }

    #[test]
    fn test_update_of_node_limit_alone_is_checked_against_stored_attribute() {
        let g = create(body(
            json!({"throttling": {"attribute": "username", "node_limit": 5}}),
        ))
        .unwrap();
        let groups = [g];
        let u = update(
            &groups,
            "analytics",
            json!({"throttling": {"node_limit": "7"}}),
        )
        .unwrap();
        assert_eq!(
            u.throttling,
            ThrottleConfig {
                attribute: Some(ThrottleAttribute::Username),
                node_limit: Some(7),
                shared_limit: None,
            }
        );
        let r = update(
            &groups,
            "analytics",
            json!({"throttling": {"node_limit": 0}}),
        );
        assert_eq!(r.unwrap_err().field(), Some("throttling.node_limit"));
        let r = update(
            &groups,
            "analytics",
            json!({"throttling": {"attribute": null}}),
        );
        assert_eq!(r.unwrap_err().field(), Some("throttling.attribute"));
        let r = update(
            &groups,
            "analytics",
            json!({"throttling": {"node_limit": null}}),
        );
        assert_eq!(r.unwrap_err().field(), Some("throttling.node_limit"));
    }

    #[test]
    fn test_update_checks_authentication_on_merged_attribute() {
        let g = create(body(
            json!({"throttling": {"attribute": "group", "node_limit": 5}}),
        ))
        .unwrap();
        let r = apply_update(
            &[g],
            "analytics",
            &json!({"throttling": {"attribute": "role"}}),
            NOW,
            &GroupLimits::default(),
        );
        assert_eq!(r.unwrap_err().field(), Some("throttling.attribute"));
    }

    #[test]
    fn test_queue_needs_a_throttle_limit_on_create_and_on_the_merged_update() {
        let body = json!({"name": "q", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1},
                          "queue": {"size_per_bucket": 5}});
        let e = validate_create(&[], &body, "id", 1, &GroupLimits::default()).unwrap_err();
        assert!(e.to_string().contains("needs a throttle limit"), "{e}");
        let ok = json!({"name": "q", "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1},
                        "throttling": {"attribute": "group", "node_limit": 2},
                        "queue": {"size_per_bucket": 5}});
        let g = validate_create(&[], &ok, "id", 1, &GroupLimits::default()).unwrap();
        // Clearing the throttle while the queue stays is refused on the merged group.
        let e = apply_update(
            std::slice::from_ref(&g),
            "q",
            &json!({"throttling": null}),
            2,
            &GroupLimits::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("queue.size_per_bucket"), "{e}");
        let cleared = apply_update(
            &[g],
            "q",
            &json!({"throttling": null, "queue": null}),
            2,
            &GroupLimits::default(),
        );
        assert!(cleared.is_ok(), "{cleared:?}");
    }

    #[test]
    fn test_update_with_null_or_empty_bag_disables_throttling() {
        let g = create(body(
            json!({"throttling": {"attribute": "group", "node_limit": 5}}),
        ))
        .unwrap();
        let groups = [g];
        for clear in [json!(null), json!({})] {
            let u = update(&groups, "analytics", json!({"throttling": clear})).unwrap();
            assert!(!u.throttling.is_enabled());
            assert_eq!(u.to_json()["throttling"], json!({}));
        }
    }
}
