//! The auto-tagging rules API, `_rules/workload_group` (facts §7): create, read (one, or a
//! filtered page of all), update and delete tagging rules, kept in the metastore.
//!
//! Each handler parses the request, runs sluice-core's rule logic ([`validate_rule_create`],
//! [`apply_rule_update`]) against the rules stored *now* and the current workload groups
//! ([`crate::catalog::load_groups`]), and writes the result back with compare-and-set.
//! Responses are OpenSearch's: create and update answer the rule object, GET answers
//! `{"rules":[…]}` (plus `"search_after":["<last id>"]` when a full page was returned),
//! DELETE answers `{"acknowledged":true}`, and an unknown id is 404
//! `resource_not_found_exception` `"Rule with ID <id> not found."`.
//!
//! # Storage: one metastore document for all rules
//!
//! As for groups (see [`super::wlm`]), every rule lives in one document,
//! [`crate::catalog::RULES_DOC`] in [`sluice_meta::Collection::Rules`]: `{"rules":[rule, …]}`
//! in creation order, each rule in its API shape except `updated_at`, stored as epoch millis.
//! Duplicate detection and the rule-count limit read every rule, so one `Expect::Version`
//! guards the whole set; a conflict re-reads, re-validates and retries. That compare-and-set
//! is the only serialization, on this node and across nodes sharing the metastore.
//!
//! Known differences from OpenSearch: rule ids are random v4 UUIDs rather than name-based
//! v3 UUIDs, and the rule limit is `wlm.autotagging.max_rules` (default 200; the 429 names the
//! limit in force, where OpenSearch's message always says 200).

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};
use sluice_core::{CoreError, DEFAULT_MAX_RULES, Rule, apply_rule_update, validate_rule_create};

use crate::settings::keys;

use crate::catalog::{self, RULES, RULES_FIELD};
use crate::error::{ApiResult, core_error};
use crate::http::unrecognized::refuse_unrecognized;
use crate::http::{Body, Params, reply};
use crate::state::AppState;

/// Rules per GET page (OpenSearch's fixed page size).
pub const PAGE_SIZE: usize = 50;

/// Most comma-separated values of one GET filter parameter.
const MAX_FILTER_VALUES: usize = 10;

/// Longest value of a GET filter parameter.
const MAX_FILTER_VALUE_LEN: usize = 100;

/// The transport action names OpenSearch checks permissions for; `auth.admin_roles` grants them.
pub mod actions {
    /// Creating a rule.
    pub const CREATE: &str = "cluster:admin/opensearch/rule/workload_group/_create";
    /// Updating a rule.
    pub const UPDATE: &str = "cluster:admin/opensearch/rule/workload_group/_update";
    /// Deleting a rule.
    pub const DELETE: &str = "cluster:admin/opensearch/rule/workload_group/_delete";
}

/// The URL parameters a listing reads besides those of every route: the page's start and the
/// attribute filters.
const GET_PARAMS: [&str; 5] = [
    "index_pattern",
    "principal",
    "principal.role",
    "principal.username",
    "search_after",
];

/// The routes of this module.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/_rules/workload_group",
            get(get_all).put(create).post(create),
        )
        .route(
            "/_rules/workload_group/{id}",
            get(get_one).put(update).post(update).delete(delete),
        )
}

/// `PUT|POST /_rules/workload_group`: creates a rule from the body; answers it.
pub async fn create(
    State(st): State<Arc<AppState>>,
    uri: Uri,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    refuse_unrecognized(uri.path(), &params, &[])?;
    let id = uuid::Uuid::new_v4().to_string();
    let now = sluice_engine::now_millis();
    let max_rules = st
        .cluster_settings
        .snapshot()
        .integer(keys::WLM_AUTOTAGGING_MAX_RULES);
    let max_rules = usize::try_from(max_rules).unwrap_or(DEFAULT_MAX_RULES);
    let created = modify(&st, |rules, groups| {
        let rule = validate_rule_create(rules, groups, &body, &id, now, max_rules)?;
        let mut next = rules.to_vec();
        next.push(rule.clone());
        Ok((next, rule))
    })
    .await?;
    Ok(reply(StatusCode::OK, created.to_json(), &params))
}

/// `GET /_rules/workload_group`: a page of rules sorted by id, filtered by attribute
/// parameters (`index_pattern=a,b`, `principal.username=…`, `principal.role=…`), after the
/// `search_after` id.
pub async fn get_all(
    State(st): State<Arc<AppState>>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let filters = parse_filters(&params)?;
    refuse_unrecognized(uri.path(), &params, &GET_PARAMS)?;
    let mut rules = catalog::load_rules(st.metastore.as_ref()).await?.items;
    rules.sort_by(|a, b| a.id.cmp(&b.id));
    let after = params.get("search_after").filter(|s| !s.is_empty());
    let page: Vec<&Rule> = rules
        .iter()
        .filter(|r| after.is_none_or(|a| r.id.as_str() > a.as_str()))
        .filter(|r| filters.iter().all(|f| f.matches(r)))
        .take(PAGE_SIZE)
        .collect();
    let mut out = Map::new();
    out.insert(
        RULES_FIELD.into(),
        Value::Array(page.iter().map(|r| r.to_json()).collect()),
    );
    if page.len() == PAGE_SIZE
        && let Some(last) = page.last()
    {
        out.insert("search_after".into(), json!([last.id]));
    }
    Ok(reply(StatusCode::OK, Value::Object(out), &params))
}

/// `GET /_rules/workload_group/{id}`: `{"rules":[rule]}`, or 404.
pub async fn get_one(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    refuse_unrecognized(uri.path(), &params, &[])?;
    let rule = catalog::load_rules(st.metastore.as_ref())
        .await?
        .items
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| core_error(not_found(&id)))?;
    Ok(reply(
        StatusCode::OK,
        json!({ RULES_FIELD: [rule.to_json()] }),
        &params,
    ))
}

/// `PUT|POST /_rules/workload_group/{id}`: merges the body onto the rule; answers it.
pub async fn update(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    refuse_unrecognized(uri.path(), &params, &[])?;
    let now = sluice_engine::now_millis();
    let updated = modify(&st, |rules, groups| {
        let merged = apply_rule_update(rules, groups, &id, &body, now)?;
        let next = rules
            .iter()
            .map(|r| {
                if r.id == merged.id {
                    merged.clone()
                } else {
                    r.clone()
                }
            })
            .collect();
        Ok((next, merged))
    })
    .await?;
    Ok(reply(StatusCode::OK, updated.to_json(), &params))
}

/// `DELETE /_rules/workload_group/{id}`: removes the rule; `{"acknowledged":true}`, or 404.
pub async fn delete(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    refuse_unrecognized(uri.path(), &params, &[])?;
    modify(&st, |rules, _| {
        if !rules.iter().any(|r| r.id == id) {
            return Err(not_found(&id));
        }
        let next = rules.iter().filter(|r| r.id != id).cloned().collect();
        Ok((next, ()))
    })
    .await?;
    Ok(reply(
        StatusCode::OK,
        json!({"acknowledged": true}),
        &params,
    ))
}

/// Lets `change` compute the next rules from the stored ones and the current groups (or
/// refuse) and writes them with compare-and-set, retrying on a concurrent change with fresh
/// rules and groups ([`crate::catalog::list_doc::ListDoc::try_write`]).
///
/// # Cancel safety
///
/// Dropping the future before the metastore write changes nothing; after it, the write
/// either lands whole or not at all.
async fn modify<T>(
    st: &AppState,
    mut change: impl FnMut(&[Rule], &[sluice_core::WorkloadGroup]) -> Result<(Vec<Rule>, T), CoreError>,
) -> ApiResult<T> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let groups = catalog::load_groups(st.metastore.as_ref()).await?;
        let stored = catalog::load_rules(st.metastore.as_ref()).await?;
        let (next, out) = change(&stored.items, &groups.items).map_err(core_error)?;
        if RULES.try_write(st, &next, stored.version, attempt).await? {
            return Ok(out);
        }
    }
}

/// One GET filter: the rule's values of `attribute` must include one of `values`.
#[derive(Debug)]
struct Filter {
    attribute: Attribute,
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
enum Attribute {
    IndexPattern,
    Username,
    Role,
    /// `principal` without a subfield: username or role.
    Principal,
}

impl Filter {
    fn matches(&self, rule: &Rule) -> bool {
        let any = |vals: &[String]| vals.iter().any(|v| self.values.contains(v));
        match self.attribute {
            Attribute::IndexPattern => any(&rule.index_pattern),
            Attribute::Username => any(&rule.username),
            Attribute::Role => any(&rule.role),
            Attribute::Principal => any(&rule.username) || any(&rule.role),
        }
    }
}

/// The attribute filters of a GET: parameters whose name before the first `.` is an
/// attribute (`index_pattern`, `principal`); other parameters are not filters.
fn parse_filters(params: &Params) -> ApiResult<Vec<Filter>> {
    let mut filters = Vec::new();
    for (name, raw) in params {
        let attribute = match name.as_str() {
            "index_pattern" => Attribute::IndexPattern,
            "principal.username" => Attribute::Username,
            "principal.role" => Attribute::Role,
            "principal" => Attribute::Principal,
            other if other.split('.').next() == Some("principal") => {
                let sub = &other["principal.".len()..];
                return Err(core_error(CoreError::validation(
                    other,
                    format!("Invalid field: {sub}. Allowed fields are: username, role"),
                )));
            }
            _ => continue,
        };
        let values: Vec<String> = raw.split(',').map(str::to_owned).collect();
        if values.len() > MAX_FILTER_VALUES {
            return Err(core_error(CoreError::validation(
                name.as_str(),
                format!("The attribute value length for {name} cannot exceed {MAX_FILTER_VALUES}."),
            )));
        }
        if let Some(bad) = values
            .iter()
            .find(|v| v.is_empty() || v.encode_utf16().count() > MAX_FILTER_VALUE_LEN)
        {
            return Err(core_error(CoreError::validation(
                name.as_str(),
                format!(
                    "Attribute value [{bad}] is invalid (it must be 1 to {MAX_FILTER_VALUE_LEN} characters long)"
                ),
            )));
        }
        filters.push(Filter { attribute, values });
    }
    Ok(filters)
}

/// OpenSearch's 404 for a rule id that does not exist.
fn not_found(id: &str) -> CoreError {
    CoreError::NotFound {
        message: format!("Rule with ID {id} not found."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_filters_parse_attributes_and_ignore_other_params() {
        let params: Params = [
            ("index_pattern".to_string(), "a,b".to_string()),
            ("pretty".to_string(), String::new()),
        ]
        .into_iter()
        .collect();
        let f = parse_filters(&params).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].values, ["a", "b"]);
        let many: Params = [("principal.role".to_string(), ["x"; 11].join(","))]
            .into_iter()
            .collect();
        assert!(parse_filters(&many).is_err());
    }
}
