//! The workload-management catalog as stored: the workload groups and the tagging rules, each a
//! list kept as one metastore document ([`list_doc`]), and the reload that turns them into the
//! node's in-memory view ([`crate::workload::View`]). The REST handlers (`api/wlm.rs`,
//! `api/rules.rs`) validate changes and write through here; [`sync`] keeps the view in step
//! with changes other nodes make to a shared metastore, and tracks whether it is reachable.

pub mod list_doc;
pub mod sync;

use serde_json::{Value, json};
use sluice_core::rules::parse_rule;
use sluice_core::{Rule, WorkloadGroup};
use sluice_engine::{EngineError, ErrorCode};
use sluice_meta::{Collection, MetaError, MetaStore};

use crate::error::ApiResult;
use crate::workload::Workload;
pub use list_doc::{ListDoc, Stored};

/// The key of the one document holding every group (see the module docs).
pub const GROUPS_DOC: &str = "groups";

/// The field of [`GROUPS_DOC`] (and of the GET response) listing the groups.
pub const GROUPS_FIELD: &str = "workload_groups";

/// Where the groups are stored: [`GROUPS_DOC`] in [`Collection::WorkloadGroups`].
pub const GROUPS: ListDoc<WorkloadGroup> = ListDoc {
    collection: Collection::WorkloadGroups,
    key: GROUPS_DOC,
    field: GROUPS_FIELD,
    what: "workload groups",
    decode: decode_group,
    encode: WorkloadGroup::to_json,
};

fn decode_group(v: &Value) -> Result<WorkloadGroup, String> {
    WorkloadGroup::from_json(v).map_err(|e| e.to_string())
}

/// Reads every stored group from `store`, in creation order; a document that does not decode
/// is a 500 naming it.
///
/// # Cancel safety
///
/// Only reads; safe to drop.
pub async fn load_groups(store: &dyn MetaStore) -> ApiResult<Stored<WorkloadGroup>> {
    GROUPS.load(store).await
}

/// The key of the one document holding every rule.
pub const RULES_DOC: &str = "rules";

/// The field of [`RULES_DOC`] (and of the GET response) listing the rules.
pub const RULES_FIELD: &str = "rules";

/// Where the rules are stored: [`RULES_DOC`] in [`Collection::Rules`].
pub const RULES: ListDoc<Rule> = ListDoc {
    collection: Collection::Rules,
    key: RULES_DOC,
    field: RULES_FIELD,
    what: "rules",
    decode: decode_rule,
    encode: encode_rule,
};

/// Reads every stored rule from `store`; a document that does not decode is a 500 naming it.
///
/// # Cancel safety
///
/// Only reads; safe to drop.
pub async fn load_rules(store: &dyn MetaStore) -> ApiResult<Stored<Rule>> {
    RULES.load(store).await
}

/// The stored form of a rule: its API shape with `updated_at` as epoch millis.
fn encode_rule(rule: &Rule) -> Value {
    let mut v = rule.to_json();
    v["updated_at"] = json!(rule.updated_at);
    v
}

/// Decodes a rule written by [`encode_rule`].
fn decode_rule(v: &Value) -> Result<Rule, String> {
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .ok_or("rule without [id]")?;
    let updated_at = v
        .get("updated_at")
        .and_then(Value::as_i64)
        .ok_or_else(|| format!("rule [{id}] without numeric [updated_at]"))?;
    let patch = parse_rule(v).map_err(|e| format!("rule [{id}]: {e}"))?;
    let principal = patch.principal.unwrap_or_default();
    Ok(Rule {
        id: id.to_owned(),
        description: patch.description.unwrap_or_default(),
        index_pattern: patch.index_pattern.unwrap_or_default(),
        username: principal.username.unwrap_or_default(),
        role: principal.role.unwrap_or_default(),
        workload_group: patch.workload_group.unwrap_or_default(),
        updated_at,
    })
}

/// The API error for a metastore failure while `doing` something ("change the workload
/// groups"): an unreachable metastore is 503 `cluster_manager_not_discovered_exception` (what
/// OpenSearch answers when no elected cluster manager can take a metadata change: in sluice
/// the metastore holds that metadata), anything else a 500.
pub fn meta_error(doing: &str, e: MetaError) -> EngineError {
    let code = match e {
        MetaError::Unavailable(_) => ErrorCode::ClusterManagerNotDiscovered,
        _ => ErrorCode::Internal,
    };
    let advice = match e {
        MetaError::Unavailable(_) => {
            "; this node keeps serving with its last view, and the change can be made once the metastore is back"
        }
        _ => "",
    };
    EngineError::new(code, format!("cannot {doing}: {e}{advice}"))
}

/// Re-reads the groups and rules from `store` and installs them as `workload`'s view.
///
/// # Cancel safety
/// Dropping the future before it installs leaves the old view in place.
pub async fn reload(workload: &Workload, store: &dyn MetaStore) -> ApiResult<()> {
    workload
        .reload_with(async {
            let groups = load_groups(store).await?.items;
            let rules = load_rules(store).await?.items;
            Ok((groups, rules))
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_stored_rules_round_trip() {
        let rule = Rule {
            id: "r".into(),
            description: "d".into(),
            index_pattern: vec!["logs*".into()],
            username: vec!["alice".into()],
            role: vec![],
            workload_group: "g".into(),
            updated_at: 1_754_493_164_791,
        };
        assert_eq!(decode_rule(&encode_rule(&rule)), Ok(rule));
    }
}
