//! Tagging rules (`_rules/workload_group`, facts §7): the rule model, its validation and
//! duplicate detection, and matching a request to a workload group.
//!
//! A rule ANDs its attributes (`index_pattern`, `principal`); values within an attribute, and
//! `username` vs `role` inside `principal`, are ORed. A value ending in `*` is a prefix match
//! on index expressions; principal values match exactly. Among matching rules the most specific
//! wins: a username match beats a role match beats an index match, and a longer index prefix
//! beats a shorter one (an exact index match beats a prefix of the same length). When the best
//! rules disagree on the group, no group is assigned.

use std::cmp::Ordering;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{CoreError, Result};
use crate::group::{WorkloadGroup, expect_object};

/// Longest rule description (facts §7.2).
pub const MAX_DESCRIPTION_LEN: usize = 256;
/// Most values per attribute (facts §7.2).
pub const MAX_VALUES_PER_ATTRIBUTE: usize = 10;
/// Longest attribute value (facts §7.2).
pub const MAX_VALUE_LEN: usize = 100;
/// Default of `wlm.autotagging.max_rules` (facts §7.2).
pub const DEFAULT_MAX_RULES: usize = 200;

/// The feature type name, also the JSON key holding the group id.
pub const FEATURE_TYPE: &str = "workload_group";

/// A tagging rule. An empty value list means the attribute is absent.
///
/// # Invariants
/// A rule returned by [`validate_rule_create`] or [`apply_rule_update`] has a description of
/// 1..=256 chars, an existing group id, at least one attribute, 1..=10 values per present
/// attribute, each 1..=100 chars with at most one `*`, at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Server-generated id.
    pub id: String,
    /// Free text.
    pub description: String,
    /// Index expressions, exact or `prefix*`.
    pub index_pattern: Vec<String>,
    /// Usernames, exact.
    pub username: Vec<String>,
    /// Roles, exact.
    pub role: Vec<String>,
    /// The id of the group the rule assigns.
    pub workload_group: String,
    /// Epoch millis of the last create or update.
    pub updated_at: i64,
}

impl Rule {
    /// Renders the rule as the rules API does: `id`, `description`, attributes, `workload_group`,
    /// `updated_at` (ISO-8601 UTC).
    pub fn to_json(&self) -> Value {
        let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
        let mut m = Map::new();
        m.insert("id".into(), Value::String(self.id.clone()));
        m.insert(
            "description".into(),
            Value::String(self.description.clone()),
        );
        if !self.index_pattern.is_empty() {
            m.insert("index_pattern".into(), strings(&self.index_pattern));
        }
        if !self.username.is_empty() || !self.role.is_empty() {
            let mut p = Map::new();
            if !self.username.is_empty() {
                p.insert("username".into(), strings(&self.username));
            }
            if !self.role.is_empty() {
                p.insert("role".into(), strings(&self.role));
            }
            m.insert("principal".into(), Value::Object(p));
        }
        m.insert(
            FEATURE_TYPE.into(),
            Value::String(self.workload_group.clone()),
        );
        m.insert(
            "updated_at".into(),
            Value::String(format_iso_millis(self.updated_at)),
        );
        Value::Object(m)
    }

    fn has_principal(&self) -> bool {
        !self.username.is_empty() || !self.role.is_empty()
    }
}

/// A parsed rule body: `None` means the field was absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulePatch {
    /// `description`.
    pub description: Option<String>,
    /// `workload_group`.
    pub workload_group: Option<String>,
    /// `index_pattern`.
    pub index_pattern: Option<Vec<String>>,
    /// `principal`; when present it replaces both username and role.
    pub principal: Option<PrincipalPatch>,
}

/// The `principal` attribute of a rule body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrincipalPatch {
    /// `principal.username`.
    pub username: Option<Vec<String>>,
    /// `principal.role`.
    pub role: Option<Vec<String>>,
}

fn string_array(field: &str, v: &Value) -> Result<Vec<String>> {
    let err = || CoreError::validation(field, format!("Expected array for field: {field}"));
    let arr = v.as_array().ok_or_else(err)?;
    arr.iter()
        .map(|x| x.as_str().map(str::to_owned).ok_or_else(err))
        .collect()
}

/// Parses a rule body (create or update); `id` and `updated_at` in the body are ignored.
pub fn parse_rule(v: &Value) -> Result<RulePatch> {
    let obj = expect_object(v)?;
    let mut p = RulePatch::default();
    for (key, val) in obj {
        match key.as_str() {
            "id" | "updated_at" => {}
            "description" => {
                p.description = match val {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    other => {
                        return Err(CoreError::validation(
                            "description",
                            format!("description must be a string, got {other}"),
                        ));
                    }
                }
            }
            FEATURE_TYPE => {
                p.workload_group = match val {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    other => {
                        return Err(CoreError::validation(
                            FEATURE_TYPE,
                            format!(
                                "{FEATURE_TYPE} must be a string (a workload group id), got {other}"
                            ),
                        ));
                    }
                }
            }
            "index_pattern" => p.index_pattern = Some(string_array("index_pattern", val)?),
            "principal" => {
                let obj = val.as_object().ok_or_else(|| {
                    CoreError::validation("principal", "Expected object for field: principal")
                })?;
                let (mut user, mut role) = (None, None);
                for (sub, sv) in obj {
                    match sub.as_str() {
                        "username" => user = Some(string_array("username", sv)?),
                        "role" => role = Some(string_array("role", sv)?),
                        other => {
                            return Err(CoreError::validation(
                                format!("principal.{other}"),
                                format!(
                                    "Invalid field: {other}. Allowed fields are: username, role"
                                ),
                            ));
                        }
                    }
                }
                p.principal = Some(PrincipalPatch {
                    username: user,
                    role,
                });
            }
            other => {
                return Err(CoreError::validation(
                    other,
                    format!("{other} is not a valid attribute within the {FEATURE_TYPE} feature."),
                ));
            }
        }
    }
    Ok(p)
}

/// Collects the validation errors of one rule, in OpenSearch's order.
fn rule_errors(rule: &Rule, groups: &[WorkloadGroup]) -> Vec<String> {
    let mut errors = Vec::new();
    let desc_len = rule.description.encode_utf16().count();
    if rule.description.trim().is_empty() {
        errors.push("Rule description can't be null or empty".to_owned());
    } else if desc_len > MAX_DESCRIPTION_LEN {
        errors.push(format!(
            "Rule description cannot exceed {MAX_DESCRIPTION_LEN} characters."
        ));
    }
    if rule.workload_group.is_empty() {
        errors.push("Rule feature value can't be null or empty".to_owned());
    } else if !groups.iter().any(|g| g.id == rule.workload_group) {
        errors.push(format!(
            "{} is not a valid workload group id.",
            rule.workload_group
        ));
    }
    let attributes = [
        ("index_pattern", &rule.index_pattern),
        ("principal.username", &rule.username),
        ("principal.role", &rule.role),
    ];
    if attributes.iter().all(|(_, v)| v.is_empty()) {
        errors.push("Rule should have at least 1 attribute requirement".to_owned());
    }
    for (name, values) in attributes {
        if values.len() > MAX_VALUES_PER_ATTRIBUTE {
            errors.push(format!(
                "Each attribute can only have a maximum of {MAX_VALUES_PER_ATTRIBUTE} values. The input \
                 attribute {name} has length {}, which exceeds this limit.",
                values.len()
            ));
        }
        for value in values {
            let len = value.encode_utf16().count();
            if len == 0 || len > MAX_VALUE_LEN {
                errors.push(format!(
                    "Attribute value [{value}] is invalid (it must be 1 to {MAX_VALUE_LEN} characters long)"
                ));
            } else if value.matches('*').count() > 1
                || (value.contains('*') && !value.ends_with('*'))
            {
                errors.push(format!(
                    "Attribute value [{value}] is invalid (only one '*' is allowed and it must appear at the end)"
                ));
            }
        }
    }
    errors
}

/// Joins errors the way OpenSearch's `ValidationException` does.
fn validation_failed(errors: &[String]) -> CoreError {
    let mut message = String::from("Validation Failed: ");
    for (i, e) in errors.iter().enumerate() {
        message.push_str(&format!("{}: {};", i + 1, e));
    }
    CoreError::validation("rule", message)
}

/// Returns an `Attribute values for <a> cannot be empty.` error for an explicit empty list.
fn check_not_empty(patch: &RulePatch) -> Vec<String> {
    let mut errors = Vec::new();
    let mut check = |name: &str, v: &Option<Vec<String>>| {
        if v.as_ref().is_some_and(Vec::is_empty) {
            errors.push(format!("Attribute values for {name} cannot be empty."));
        }
    };
    check("index_pattern", &patch.index_pattern);
    if let Some(p) = &patch.principal {
        check("principal.username", &p.username);
        check("principal.role", &p.role);
    }
    errors
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.iter().any(|x| b.contains(x))
}

/// Returns the id of a stored rule (other than `rule` itself) that duplicates `rule`: same set
/// of attributes, and every attribute's values intersect (principal values as `(kind, value)`).
pub fn find_duplicate<'a>(existing: &'a [Rule], rule: &Rule) -> Option<&'a str> {
    existing
        .iter()
        .filter(|r| r.id != rule.id)
        .find(|r| {
            let same_set = r.index_pattern.is_empty() == rule.index_pattern.is_empty()
                && r.has_principal() == rule.has_principal();
            same_set
                && (rule.index_pattern.is_empty()
                    || overlaps(&r.index_pattern, &rule.index_pattern))
                && (!rule.has_principal()
                    || overlaps(&r.username, &rule.username)
                    || overlaps(&r.role, &rule.role))
        })
        .map(|r| r.id.as_str())
}

fn finish(
    existing: &[Rule],
    groups: &[WorkloadGroup],
    rule: Rule,
    mut errors: Vec<String>,
) -> Result<Rule> {
    errors.extend(rule_errors(&rule, groups));
    if !errors.is_empty() {
        return Err(validation_failed(&errors));
    }
    if let Some(dup) = find_duplicate(existing, &rule) {
        return Err(CoreError::AlreadyExists {
            message: format!("Duplicate rule exists under id {dup}"),
        });
    }
    Ok(rule)
}

/// Validates a rule create body against the stored rules and groups; `id` is server-generated.
pub fn validate_rule_create(
    existing: &[Rule],
    groups: &[WorkloadGroup],
    body: &Value,
    id: &str,
    now_millis: i64,
    max_rules: usize,
) -> Result<Rule> {
    let patch = parse_rule(body)?;
    let errors = check_not_empty(&patch);
    if existing.len() >= max_rules {
        return Err(CoreError::TooMany {
            message: format!(
                "This create operation will violate the cardinality limit of {max_rules}. Please delete \
                 some stale or redundant rules first"
            ),
        });
    }
    let PrincipalPatch { username, role } = patch.principal.unwrap_or_default();
    let rule = Rule {
        id: id.to_owned(),
        description: patch.description.unwrap_or_default(),
        index_pattern: patch.index_pattern.unwrap_or_default(),
        username: username.unwrap_or_default(),
        role: role.unwrap_or_default(),
        workload_group: patch.workload_group.unwrap_or_default(),
        updated_at: now_millis,
    };
    finish(existing, groups, rule, errors)
}

/// Applies a partial rule update: supplied fields replace, others are kept; re-validated and
/// duplicate-checked against the other rules.
pub fn apply_rule_update(
    existing: &[Rule],
    groups: &[WorkloadGroup],
    id: &str,
    body: &Value,
    now_millis: i64,
) -> Result<Rule> {
    let stored = existing
        .iter()
        .find(|r| r.id == id)
        .ok_or_else(|| CoreError::NotFound {
            message: format!("Rule with ID {id} not found."),
        })?;
    let patch = parse_rule(body)?;
    let errors = check_not_empty(&patch);
    let mut rule = stored.clone();
    if let Some(d) = patch.description {
        rule.description = d;
    }
    if let Some(g) = patch.workload_group {
        rule.workload_group = g;
    }
    if let Some(ip) = patch.index_pattern {
        rule.index_pattern = ip;
    }
    if let Some(p) = patch.principal {
        rule.username = p.username.unwrap_or_default();
        rule.role = p.role.unwrap_or_default();
    }
    rule.updated_at = now_millis;
    finish(existing, groups, rule, errors)
}

/// The attributes of a request that rules match on.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestAttributes<'a> {
    /// The request's index expressions.
    pub indices: &'a [String],
    /// The authenticated username, if any.
    pub username: Option<&'a str>,
    /// The authenticated roles (shared with the principal, so tagging copies no string).
    pub roles: &'a [Arc<str>],
}

/// How specifically a rule matched a request; compares by attribute priority, then by index
/// specificity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MatchScore {
    /// Matched through `principal.username`.
    pub username: bool,
    /// Matched through `principal.role`.
    pub role: bool,
    /// Best index match: (matched length, exact), or `None` when the rule has no index attribute.
    pub index: Option<(usize, bool)>,
}

/// Returns the best (length, exact) match of any pattern against any index, or `None`.
fn index_match(patterns: &[String], indices: &[String]) -> Option<(usize, bool)> {
    let mut best = None;
    for p in patterns {
        for idx in indices {
            let m = match p.strip_suffix('*') {
                Some(prefix) if idx.starts_with(prefix) => Some((prefix.len(), false)),
                None if p == idx => Some((p.len(), true)),
                _ => None,
            };
            best = best.max(m);
        }
    }
    best
}

/// Returns how `rule` matches `req`, or `None` when some attribute of the rule does not match.
pub fn score_rule(rule: &Rule, req: &RequestAttributes<'_>) -> Option<MatchScore> {
    let index = if rule.index_pattern.is_empty() {
        None
    } else {
        Some(index_match(&rule.index_pattern, req.indices)?)
    };
    let (mut username, mut role) = (false, false);
    if rule.has_principal() {
        username = req
            .username
            .is_some_and(|u| rule.username.iter().any(|x| x == u));
        role = req
            .roles
            .iter()
            .any(|r| rule.role.iter().any(|x| x.as_str() == &**r));
        if !username && !role {
            return None;
        }
    }
    Some(MatchScore {
        username,
        role,
        index,
    })
}

/// Picks the workload group id for a request: the group of the most specific matching rule;
/// `None` when no rule matches or the most specific rules name different groups.
pub fn match_rules<'a>(rules: &'a [Rule], req: &RequestAttributes<'_>) -> Option<&'a str> {
    let mut best: Option<(MatchScore, &'a str, bool)> = None; // (score, group, tied with another group)
    for rule in rules {
        let Some(score) = score_rule(rule, req) else {
            continue;
        };
        let group = rule.workload_group.as_str();
        best = match best {
            None => Some((score, group, false)),
            Some((b, g, tied)) => match score.cmp(&b) {
                Ordering::Greater => Some((score, group, false)),
                Ordering::Less => Some((b, g, tied)),
                Ordering::Equal => Some((b, g, tied || g != group)),
            },
        };
    }
    match best {
        Some((_, g, false)) => Some(g),
        _ => None,
    }
}

/// Formats epoch millis as an ISO-8601 UTC instant the way Java's `Instant.toString` does
/// (`2025-08-06T15:12:44.791Z`, no fraction when the millis are zero).
pub fn format_iso_millis(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let ms = millis.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, mi, s) = (sod / 3600, sod % 3600 / 60, sod % 60);
    if ms == 0 {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{mi:02}:{s:02}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::group::{GroupLimits, validate_create};

    fn groups() -> Vec<WorkloadGroup> {
        ["g1", "g2", "g3"]
            .iter()
            .map(|id| {
                let body =
                    json!({"name": id, "resiliency_mode": "soft", "resource_limits": {"cpu": 0.1}});
                let limits = GroupLimits {
                    max_count: 100,
                    auth_enabled: true,
                };
                validate_create(&[], &body, id, 1, &limits).unwrap()
            })
            .collect()
    }

    fn create_in(existing: &[Rule], body: Value) -> Result<Rule> {
        validate_rule_create(
            existing,
            &groups(),
            &body,
            &format!("r{}", existing.len()),
            1_754_493_164_791,
            DEFAULT_MAX_RULES,
        )
    }

    fn create(body: Value) -> Result<Rule> {
        create_in(&[], body)
    }

    fn message(r: Result<Rule>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn test_rule_renders_like_the_rules_api() {
        let r = create(json!({"description": "for logs", "index_pattern": ["logs*"],
            "principal": {"username": ["alice"], "role": ["analyst"]}, "workload_group": "g1", "id": "x"}))
        .unwrap();
        assert_eq!(
            r.to_json().to_string(),
            r#"{"id":"r0","description":"for logs","index_pattern":["logs*"],"principal":{"username":["alice"],"role":["analyst"]},"workload_group":"g1","updated_at":"2025-08-06T15:12:44.791Z"}"#
        );
    }

    #[test]
    fn test_iso_format_omits_zero_millis_and_handles_epoch_edges() {
        assert_eq!(format_iso_millis(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_iso_millis(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(format_iso_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn test_rule_validation_collects_all_errors_in_one_message() {
        let m = message(create(json!({"description": "", "workload_group": "nope"})));
        assert_eq!(
            m,
            "Validation Failed: 1: Rule description can't be null or empty;2: nope is not a valid workload group \
             id.;3: Rule should have at least 1 attribute requirement;"
        );
    }

    #[test]
    fn test_rule_rejects_long_description_and_missing_group() {
        let m = message(create(
            json!({"description": "d".repeat(257), "index_pattern": ["a"]}),
        ));
        assert_eq!(
            m,
            "Validation Failed: 1: Rule description cannot exceed 256 characters.;2: Rule feature value can't be \
             null or empty;"
        );
        assert!(create(json!({"description": "d".repeat(256), "index_pattern": ["a"], "workload_group": "g1"})).is_ok());
    }

    #[test]
    fn test_rule_rejects_too_many_and_empty_values() {
        let eleven: Vec<String> = (0..11).map(|i| format!("i{i}")).collect();
        let m = message(create(
            json!({"description": "d", "index_pattern": eleven, "workload_group": "g1"}),
        ));
        assert_eq!(
            m,
            "Validation Failed: 1: Each attribute can only have a maximum of 10 values. The input attribute \
             index_pattern has length 11, which exceeds this limit.;"
        );
        let m = message(create(
            json!({"description": "d", "index_pattern": [], "principal": {"role": ["r"]},
            "workload_group": "g1"}),
        ));
        assert_eq!(
            m,
            "Validation Failed: 1: Attribute values for index_pattern cannot be empty.;"
        );
    }

    #[test]
    fn test_rule_rejects_bad_value_forms() {
        for bad in ["lo*gs", "logs**", "**"] {
            let m = message(create(
                json!({"description": "d", "index_pattern": [bad], "workload_group": "g1"}),
            ));
            assert_eq!(
                m,
                format!(
                    "Validation Failed: 1: Attribute value [{bad}] is invalid (only one '*' is allowed and it must \
                     appear at the end);"
                )
            );
        }
        let long = "x".repeat(101);
        let m = message(create(
            json!({"description": "d", "index_pattern": [long], "workload_group": "g1"}),
        ));
        assert_eq!(
            m,
            format!(
                "Validation Failed: 1: Attribute value [{long}] is invalid (it must be 1 to 100 characters long);"
            )
        );
        assert!(create(json!({"description": "d", "index_pattern": ["x".repeat(100)], "workload_group": "g1"})).is_ok());
        // A lone '*' is one '*' at the end: allowed.
        assert!(
            create(json!({"description": "d", "index_pattern": ["*"], "workload_group": "g1"}))
                .is_ok()
        );
    }

    #[test]
    fn test_rule_parse_errors_name_the_field() {
        assert_eq!(
            message(create(json!({"description": "d", "tenant": ["a"]}))),
            "tenant is not a valid attribute within the workload_group feature."
        );
        assert_eq!(
            message(create(
                json!({"description": "d", "index_pattern": "logs*"})
            )),
            "Expected array for field: index_pattern"
        );
        assert_eq!(
            message(create(
                json!({"description": "d", "principal": {"group": ["a"]}})
            )),
            "Invalid field: group. Allowed fields are: username, role"
        );
        assert_eq!(
            message(create(
                json!({"description": "d", "principal": {"role": "a"}})
            )),
            "Expected array for field: role"
        );
    }

    #[test]
    fn test_rule_duplicate_names_the_existing_rule() {
        let a = create(
            json!({"description": "a", "index_pattern": ["logs*", "x"], "workload_group": "g1"}),
        )
        .unwrap();
        let err = create_in(
            std::slice::from_ref(&a),
            json!({"description": "b", "index_pattern": ["x", "y"], "workload_group": "g2"}),
        )
        .unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::AlreadyExists);
        assert_eq!(err.to_string(), "Duplicate rule exists under id r0");
        // Different attribute set, or disjoint values: not a duplicate.
        let other_set = json!({"description": "b", "index_pattern": ["x"], "principal": {"role": ["r"]}, "workload_group": "g2"});
        assert!(create_in(std::slice::from_ref(&a), other_set).is_ok());
        let disjoint = json!({"description": "b", "index_pattern": ["z"], "workload_group": "g2"});
        assert!(create_in(std::slice::from_ref(&a), disjoint).is_ok());
    }

    #[test]
    fn test_rule_create_beyond_max_rules_is_too_many() {
        let a = create(json!({"description": "a", "index_pattern": ["a"], "workload_group": "g1"}))
            .unwrap();
        let err = validate_rule_create(&[a], &groups(), &json!({}), "r1", 1, 1).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::TooMany);
        assert_eq!(
            err.to_string(),
            "This create operation will violate the cardinality limit of 1. Please delete some stale or redundant \
             rules first"
        );
    }

    #[test]
    fn test_rule_update_keeps_unsupplied_fields_and_excludes_itself_from_duplicates() {
        let a =
            create(json!({"description": "a", "index_pattern": ["logs*"], "workload_group": "g1"}))
                .unwrap();
        let u = apply_rule_update(
            std::slice::from_ref(&a),
            &groups(),
            "r0",
            &json!({"workload_group": "g2"}),
            9,
        )
        .unwrap();
        assert_eq!(
            (
                u.description.as_str(),
                u.workload_group.as_str(),
                u.updated_at
            ),
            ("a", "g2", 9)
        );
        assert_eq!(u.index_pattern, a.index_pattern);
        let err = apply_rule_update(&[a], &groups(), "nope", &json!({}), 9).unwrap_err();
        assert_eq!(err.to_string(), "Rule with ID nope not found.");
    }

    fn rule(id: &str, idx: &[&str], users: &[&str], roles: &[&str], group: &str) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            id: id.into(),
            description: "d".into(),
            index_pattern: v(idx),
            username: v(users),
            role: v(roles),
            workload_group: group.into(),
            updated_at: 1,
        }
    }

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    fn arcs(s: &[String]) -> Vec<Arc<str>> {
        s.iter().map(|x| Arc::from(x.as_str())).collect()
    }

    #[test]
    fn test_match_prefers_username_over_role_over_index() {
        let rules = [
            rule("1", &["logs*"], &[], &[], "g-index"),
            rule("2", &[], &[], &["analyst"], "g-role"),
            rule("3", &[], &["alice"], &[], "g-user"),
        ];
        let (idx, roles) = (strings(&["logs-1"]), arcs(&strings(&["analyst"])));
        let req = |u| RequestAttributes {
            indices: &idx,
            username: u,
            roles: &roles,
        };
        assert_eq!(match_rules(&rules, &req(Some("alice"))), Some("g-user"));
        assert_eq!(match_rules(&rules, &req(Some("bob"))), Some("g-role"));
        let no_roles: [Arc<str>; 0] = [];
        let r = RequestAttributes {
            indices: &idx,
            username: None,
            roles: &no_roles,
        };
        assert_eq!(match_rules(&rules, &r), Some("g-index"));
    }

    #[test]
    fn test_match_prefers_longest_index_prefix_and_exact_over_equal_prefix() {
        let rules = [
            rule("1", &["logs*"], &[], &[], "short"),
            rule("2", &["logs-a*"], &[], &[], "long"),
        ];
        let idx = strings(&["logs-ab"]);
        assert_eq!(
            match_rules(
                &rules,
                &RequestAttributes {
                    indices: &idx,
                    ..Default::default()
                }
            ),
            Some("long")
        );
        let rules = [
            rule("1", &["logs*"], &[], &[], "prefix"),
            rule("2", &["logs"], &[], &[], "exact"),
        ];
        let idx = strings(&["logs"]);
        assert_eq!(
            match_rules(
                &rules,
                &RequestAttributes {
                    indices: &idx,
                    ..Default::default()
                }
            ),
            Some("exact")
        );
    }

    #[test]
    fn test_match_tie_between_groups_assigns_no_group_but_same_group_tie_does() {
        let idx = strings(&["logs-1"]);
        let req = RequestAttributes {
            indices: &idx,
            ..Default::default()
        };
        let tie = [
            rule("1", &["logs*"], &[], &[], "a"),
            rule("2", &["logs*", "x"], &[], &[], "b"),
        ];
        assert_eq!(match_rules(&tie, &req), None);
        let same = [
            rule("1", &["logs*"], &[], &[], "a"),
            rule("2", &["logs*", "x"], &[], &[], "a"),
        ];
        assert_eq!(match_rules(&same, &req), Some("a"));
    }

    #[test]
    fn test_match_requires_every_attribute_of_a_rule() {
        let rules = [rule("1", &["logs*"], &["alice"], &[], "g")];
        let (logs, metrics) = (strings(&["logs-1"]), strings(&["metrics"]));
        let ok = RequestAttributes {
            indices: &logs,
            username: Some("alice"),
            roles: &[],
        };
        assert_eq!(match_rules(&rules, &ok), Some("g"));
        let wrong_index = RequestAttributes {
            indices: &metrics,
            username: Some("alice"),
            roles: &[],
        };
        assert_eq!(match_rules(&rules, &wrong_index), None);
        let no_user = RequestAttributes {
            indices: &logs,
            username: None,
            roles: &[],
        };
        assert_eq!(match_rules(&rules, &no_user), None);
    }

    // ---- matching against a brute-force reference ---------------------------------------------

    const PATTERNS: [&str; 7] = [
        "logs*", "logs-a*", "logs-a", "logs-ab", "metrics*", "m*", "*",
    ];
    const INDICES: [&str; 5] = ["logs-a", "logs-ab", "metrics-1", "m", "other"];
    const USERS: [&str; 2] = ["alice", "bob"];
    const ROLES: [&str; 3] = ["r1", "r2", "r3"];
    const GROUPS: [&str; 3] = ["g1", "g2", "g3"];

    fn subset(all: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<String>> {
        proptest::sample::subsequence(all.to_vec(), 0..=max)
            .prop_map(|v| v.into_iter().map(String::from).collect())
    }

    fn arb_rule() -> impl Strategy<Value = Rule> {
        (
            subset(&PATTERNS, 3),
            subset(&USERS, 2),
            subset(&ROLES, 2),
            proptest::sample::select(GROUPS.to_vec()),
        )
            .prop_filter("a rule has an attribute", |(i, u, r, _)| {
                !(i.is_empty() && u.is_empty() && r.is_empty())
            })
            .prop_map(|(i, u, r, g)| Rule {
                id: String::new(),
                description: "d".into(),
                index_pattern: i,
                username: u,
                role: r,
                workload_group: g.into(),
                updated_at: 1,
            })
    }

    /// Reference: rank each rule on its own with a plain integer, keep the top rank, and assign
    /// only when exactly one distinct group holds it.
    fn reference(
        rules: &[Rule],
        indices: &[String],
        user: Option<&str>,
        roles: &[String],
    ) -> Option<String> {
        let mut ranked: Vec<(u64, &str)> = Vec::new();
        for r in rules {
            let mut index_rank = 0u64; // 0 = no index attribute
            if !r.index_pattern.is_empty() {
                let mut best = None;
                for p in &r.index_pattern {
                    for i in indices {
                        let rank = if let Some(prefix) = p.strip_suffix('*') {
                            i.starts_with(prefix).then(|| 1 + 2 * prefix.len() as u64)
                        } else {
                            (p == i).then(|| 2 + 2 * p.len() as u64)
                        };
                        best = best.max(rank);
                    }
                }
                match best {
                    Some(b) => index_rank = b,
                    None => continue,
                }
            }
            let by_user = user.is_some_and(|u| r.username.iter().any(|x| x == u));
            let by_role = r.role.iter().any(|x| roles.contains(x));
            if (!r.username.is_empty() || !r.role.is_empty()) && !by_user && !by_role {
                continue;
            }
            let rank = (u64::from(by_user) << 40) | (u64::from(by_role) << 39) | index_rank;
            ranked.push((rank, r.workload_group.as_str()));
        }
        let top = ranked.iter().map(|(r, _)| *r).max()?;
        let mut winners: Vec<&str> = ranked
            .iter()
            .filter(|(r, _)| *r == top)
            .map(|(_, g)| *g)
            .collect();
        winners.sort();
        winners.dedup();
        (winners.len() == 1).then(|| winners[0].to_owned())
    }

    proptest! {
        #[test]
        fn test_match_rules_agrees_with_brute_force_reference(
            rules in proptest::collection::vec(arb_rule(), 0..6),
            indices in subset(&INDICES, 3),
            user in proptest::option::of(proptest::sample::select(USERS.to_vec())),
            roles in subset(&ROLES, 3),
        ) {
            let shared = arcs(&roles);
            let req = RequestAttributes { indices: &indices, username: user, roles: &shared };
            let got = match_rules(&rules, &req).map(str::to_owned);
            prop_assert_eq!(got, reference(&rules, &indices, user, &roles));
        }

        #[test]
        fn test_match_rules_does_not_depend_on_rule_order(
            rules in proptest::collection::vec(arb_rule(), 0..6).prop_shuffle().prop_flat_map(|r| {
                let shuffled = Just(r.clone()).prop_shuffle();
                (Just(r), shuffled)
            }),
            indices in subset(&INDICES, 3),
            roles in subset(&ROLES, 3),
        ) {
            let (a, b) = rules;
            let shared = arcs(&roles);
            let req = RequestAttributes { indices: &indices, username: Some("alice"), roles: &shared };
            prop_assert_eq!(match_rules(&a, &req), match_rules(&b, &req));
        }
    }
}
