//! The workload group API, `_wlm/workload_group`: create, read, update and delete groups,
//! kept in the metastore.
//!
//! Each handler parses the request, runs sluice-core's registry logic ([`validate_create`],
//! [`apply_update`]) against the groups stored *now*, and writes the result back with
//! compare-and-set. Responses are OpenSearch's: create and update answer the group object,
//! GET answers `{"workload_groups":[…]}`, DELETE answers `{"acknowledged":true}`, and an
//! unknown name is 404 `resource_not_found_exception`.
//!
//! Group CRUD works in every `wlm.workload_group.mode` (DESIGN D2), unlike OpenSearch 3.2+,
//! which refuses writes unless the mode is `enabled`.
//!
//! # Storage: one metastore document for all groups
//!
//! Every group lives in a single document, [`crate::catalog::GROUPS_DOC`] in
//! [`sluice_meta::Collection::WorkloadGroups`], shaped like the GET response:
//! `{"workload_groups":[group, …]}` in creation order.
//!
//! Why not one document per group: the cross-group rules (unique name, per-resource sum ≤ 1.0,
//! `node.workload_group.max_count`) read *every* group, so a write is safe only if the whole
//! set is unchanged since it was read. Per-key compare-and-set cannot say "no key was added":
//! two concurrent creates of different names with 0.6 cpu each would both pass their own
//! `Expect::Absent` and together exceed 1.0. With one document a single `Expect::Version`
//! (`Expect::Absent` before the first group) guards the whole set; on a conflict the write
//! re-reads, re-validates and retries. The document stays small (at most 100 groups of a few
//! hundred bytes), and a later change that must land with a group change (the rules naming it)
//! can join the same [`MetaStore::apply`](sluice_meta::MetaStore::apply) batch.
//!
//! The compare-and-set is the only serialization: writers on this node and on other nodes
//! sharing the metastore are treated alike, and two creates racing anywhere can never both
//! pass the name and per-resource sum checks.

use std::sync::Arc;

use crate::http::{Path, Query};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};
use sluice_core::{CoreError, GroupLimits, WorkloadGroup, apply_update, validate_create};

use crate::auth::AuthMode;
use crate::catalog::{self, GROUPS};
use crate::error::{ApiResult, core_error};
use crate::http::unrecognized::refuse_unrecognized;
use crate::http::{Body, Params, reply};
use crate::settings::keys;
use crate::state::AppState;

/// The transport action names OpenSearch's workload-management plugin checks permissions
/// for; `auth.admin_roles` grants them.
pub mod actions {
    /// Creating a group.
    pub const CREATE: &str = "cluster:admin/opensearch/wlm/workload_group/_create";
    /// Updating a group.
    pub const UPDATE: &str = "cluster:admin/opensearch/wlm/workload_group/_update";
    /// Deleting a group.
    pub const DELETE: &str = "cluster:admin/opensearch/wlm/workload_group/_delete";
}

/// The URL parameters a delete reads besides those of every route: OpenSearch's timeouts of
/// its cluster-state update (accepted; a metastore write has no such wait, but a value that is
/// not a time value is refused, as OpenSearch refuses it).
const DELETE_PARAMS: [&str; 3] = ["cluster_manager_timeout", "master_timeout", "timeout"];

/// The routes of this module.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/_wlm/workload_group",
            get(get_all).put(create).post(create),
        )
        .route(
            "/_wlm/workload_group/{name}",
            get(get_one).put(update).post(update).delete(delete),
        )
}

/// `PUT|POST /_wlm/workload_group`: creates a group from the body; answers it.
pub async fn create(
    State(st): State<Arc<AppState>>,
    meta: crate::http::RequestMeta,
    uri: Uri,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    refuse_unrecognized(uri.path(), &params, &[])?;
    let limits = group_limits(&st);
    let id = new_group_id();
    let now = sluice_engine::now_millis();
    let created = modify(&st, |groups| {
        let group = validate_create(groups, &body, &id, now, &limits)?;
        let mut next = groups.to_vec();
        next.push(group.clone());
        Ok((next, group))
    })
    .await?;
    warn_unapplied(&st, &meta, &created);
    Ok(reply(StatusCode::OK, created.to_json(), &params))
}

/// On a gateway, warns (a `Warning` header) of what of a group does not act:
///
/// - its `search.max_buckets`, stored but not applied: OpenSearch's search request has no
///   parameter for it, so the upstream's own cluster setting bounds the group's aggregations
///   (docs/compatibility.md). The group's other search settings are forwarded as request
///   parameters.
/// - its `resource_limits`, while the gateway has no measure of the upstream's searches
///   (`backend/upstream/limits.rs`, "Gaps"): accepted, since the cause is the upstream's or
///   the gateway's configuration and may be fixed without touching the group, but never
///   silently.
fn warn_unapplied(st: &AppState, meta: &crate::http::RequestMeta, group: &WorkloadGroup) {
    let Some(up) = &st.upstream else {
        return;
    };
    if group.settings.max_buckets().is_some() {
        meta.warnings.add(format!(
            "[search.max_buckets] of workload group [{}] has no effect on a gateway: the upstream cluster's own [search.max_buckets] bounds its aggregations",
            group.name
        ));
    }
    if !group.resource_limits.is_empty()
        && let Some(why) = up.unmeasured()
    {
        meta.warnings.add(format!(
            "[resource_limits] of workload group [{}] have no measure on this gateway yet, and neither reject nor cancel: {why}",
            group.name
        ));
    }
}

/// `GET /_wlm/workload_group`: every group, `{"workload_groups":[…]}`.
pub async fn get_all(
    State(st): State<Arc<AppState>>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    refuse_unrecognized(uri.path(), &params, &[])?;
    let stored = catalog::load_groups(st.metastore.as_ref()).await?;
    Ok(reply(StatusCode::OK, GROUPS.render(&stored.items), &params))
}

/// `GET /_wlm/workload_group/{name}`: `{"workload_groups":[group]}`, or 404.
pub async fn get_one(
    State(st): State<Arc<AppState>>,
    Path(name): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    refuse_unrecognized(uri.path(), &params, &[])?;
    let stored = catalog::load_groups(st.metastore.as_ref()).await?;
    let group = stored
        .items
        .into_iter()
        .find(|g| g.name == name)
        .ok_or_else(|| core_error(not_found(&name)))?;
    Ok(reply(StatusCode::OK, GROUPS.render(&[group]), &params))
}

/// `PUT|POST /_wlm/workload_group/{name}`: merges the body onto the group; answers the
/// updated group.
pub async fn update(
    State(st): State<Arc<AppState>>,
    meta: crate::http::RequestMeta,
    Path(name): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let body = body.json()?.unwrap_or(Value::Null);
    refuse_unrecognized(uri.path(), &params, &[])?;
    let limits = group_limits(&st);
    let now = sluice_engine::now_millis();
    let updated = modify(&st, |groups| {
        let merged = apply_update(groups, &name, &body, now, &limits)?;
        let next = groups
            .iter()
            .map(|g| {
                if g.id == merged.id {
                    merged.clone()
                } else {
                    g.clone()
                }
            })
            .collect();
        Ok((next, merged))
    })
    .await?;
    warn_unapplied(&st, &meta, &updated);
    Ok(reply(StatusCode::OK, updated.to_json(), &params))
}

/// `DELETE /_wlm/workload_group/{name}`: removes the group; `{"acknowledged":true}`, or 404.
pub async fn delete(
    State(st): State<Arc<AppState>>,
    meta: crate::http::RequestMeta,
    Path(name): Path<String>,
    uri: Uri,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    refuse_unrecognized(uri.path(), &params, &DELETE_PARAMS)?;
    crate::http::timeouts::refuse_unparsable(&params, true)?;
    let deleted = modify(&st, |groups| {
        let Some(group) = groups.iter().find(|g| g.name == name) else {
            return Err(not_found(&name));
        };
        let next = groups.iter().filter(|g| g.name != name).cloned().collect();
        Ok((next, group.id.clone()))
    })
    .await?;
    // OpenSearch deletes a group whatever rules name it; such rules tag nothing from now on.
    // Say so, so the operator can delete or repoint them.
    let orphaned: Vec<String> = catalog::load_rules(st.metastore.as_ref())
        .await
        .map(|r| r.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.workload_group == deleted)
        .map(|r| r.id)
        .collect();
    if !orphaned.is_empty() {
        meta.warnings.add(format!(
            "rules [{}] name the deleted workload group [{name}] and will tag no request until they are updated or deleted",
            orphaned.join(", ")
        ));
    }
    Ok(reply(
        StatusCode::OK,
        json!({"acknowledged": true}),
        &params,
    ))
}

/// Lets `change` compute the next groups from the stored ones (or refuse) and writes them
/// with compare-and-set, starting over with fresh groups on a concurrent change
/// ([`crate::catalog::list_doc::ListDoc::try_write`]).
///
/// # Cancel safety
///
/// Dropping the future before the metastore write changes nothing; after it, the write
/// either lands whole or not at all (re-read to find out).
async fn modify<T>(
    st: &AppState,
    mut change: impl FnMut(&[WorkloadGroup]) -> Result<(Vec<WorkloadGroup>, T), CoreError>,
) -> ApiResult<T> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let stored = catalog::load_groups(st.metastore.as_ref()).await?;
        let (next, out) = change(&stored.items).map_err(core_error)?;
        if GROUPS.try_write(st, &next, stored.version, attempt).await? {
            return Ok(out);
        }
    }
}

/// The limits group validation depends on: `node.workload_group.max_count` and whether
/// sluice authentication is on (D6: username/role throttles need it).
fn group_limits(st: &AppState) -> GroupLimits {
    let max_count = st
        .cluster_settings
        .snapshot()
        .integer(keys::WLM_MAX_GROUP_COUNT);
    GroupLimits {
        max_count: usize::try_from(max_count).unwrap_or(sluice_core::DEFAULT_MAX_WORKLOAD_GROUPS),
        auth_enabled: st.auth.config().mode != AuthMode::None,
    }
}

/// A new group id: a random v4 UUID as 22 characters of URL-safe base64, the form of
/// OpenSearch's `UUIDs.randomBase64UUID()`.
fn new_group_id() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes())
}

/// OpenSearch's 404 for a group name that does not exist.
fn not_found(name: &str) -> CoreError {
    CoreError::NotFound {
        message: format!("No WorkloadGroup exists with the provided name: {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;

    #[test]
    fn test_group_ids_are_url_safe_and_distinct() {
        let (a, b) = (new_group_id(), new_group_id());
        assert_eq!(a.len(), 22);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
            "{a}"
        );
        assert_ne!(a, b);
    }

    #[test]
    fn test_core_errors_map_to_opensearch_types() {
        let status = |e: CoreError| match core_error(e) {
            ApiError::Engine(e) => (e.code.status(), e.code.type_name()),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            status(CoreError::validation("name", "bad")),
            (400, "illegal_argument_exception")
        );
        assert_eq!(
            status(not_found("x")),
            (404, "resource_not_found_exception")
        );
        assert_eq!(
            status(CoreError::TooMany {
                message: "many".into()
            }),
            (429, "rejected_execution_exception")
        );
    }
}
