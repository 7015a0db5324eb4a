//! Authorization: every request is checked on its action before a handler (and so before
//! admission) runs, in one middleware ([`authorize`]); requests of items (`_bulk`, `_msearch`,
//! `_mget`) and owner-bound requests (scroll, `_tasks`) call one function per item
//! ([`authorize_item`], [`authorize_scroll`], [`may_touch_task`]).
//!
//! The permission model and its evaluation are pure, in `sluice_core::authz`; this module
//! loads the roles file, resolves index expressions with the engine's resolver (so aliases are
//! covered as the engine resolves them), answers 403 `security_exception` in OpenSearch's
//! words, counts refusals and writes the audit log ([`super::audit`]).
//!
//! Index expressions resolve within permissions as OpenSearch's security plugin does by
//! default (`do_not_fail_on_forbidden: false`): a concrete name is checked as named — so a
//! forbidden name is refused whether or not it exists, and a user learns nothing of indices
//! they may not touch — and an alias is allowed when every index it resolves to is; a wildcard
//! or `_all` is resolved to the existing indices and refused when it includes one the user may
//! not touch, or when the user holds the action on no index at all.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::http::Method;
use sluice_core::authz::{Action, Authorizer, RoleSet};
use sluice_engine::resolve::{ExpandWildcards, IndicesOptions};
use sluice_engine::{Engine, EngineError, ErrorCode};

use super::audit::{Audit, Outcome};
use super::route::{RouteAction, alias_names};
use super::{AuthConfig, AuthMode, Principal, roles_file};
use crate::http::RequestMeta;
use crate::state::AppState;

/// The audit log's action for loading the roles file (what changes roles).
const ROLES_LOAD_ACTION: &str = "cluster:admin/sluice/roles/load";

/// The node's authorization: the roles (from the roles file, or today's rule without one),
/// the audit log and the refusal count.
#[derive(Debug)]
pub struct Authz {
    /// `None` when `auth.type` is `none`: nothing is authorized, every request may do anything.
    authorizer: Option<Authorizer>,
    /// Whether the permissions come from a roles file.
    from_roles_file: bool,
    /// The audit log.
    pub audit: Audit,
    refused: AtomicU64,
}

impl Authz {
    /// Loads the roles file as `auth.*` says: with `auth.roles_file` set, it must exist and be
    /// valid; at its default path it is used when it exists; without one, every authenticated
    /// user has full data access and `auth.admin_roles` guard the admin APIs.
    pub fn load(config: &AuthConfig) -> anyhow::Result<Authz> {
        let path = &config.roles_file;
        let audit = Audit::default();
        let mut from_roles_file = false;
        let authorizer = match config.mode {
            AuthMode::None if config.roles_file_required => {
                anyhow::bail!(
                    "auth.roles_file [{}] is set but auth.type is none: roles need authenticated users; set auth.type to basic or proxy",
                    path.display()
                );
            }
            AuthMode::None => None,
            _ if config.roles_file_required || path.exists() => {
                let roles = roles_file::load(path)?;
                for (role, action) in roles.unmatched_actions() {
                    tracing::warn!(
                        role = %role,
                        action = %action,
                        "the roles file grants an action sluice does not have; it grants nothing here"
                    );
                }
                tracing::info!(
                    path = %path.display(),
                    roles = roles.num_roles(),
                    "authorization from the roles file"
                );
                // Roles change only with the file, read at start: one audit line per load.
                audit.record(
                    Instant::now(),
                    None,
                    None,
                    ROLES_LOAD_ACTION,
                    &path.display().to_string(),
                    Outcome::Done(200),
                );
                from_roles_file = true;
                Some(Authorizer::new(roles, &config.admin_roles))
            }
            _ => {
                tracing::info!(
                    "no roles file: every authenticated user has full data access; auth.admin_roles guard the admin APIs"
                );
                Some(Authorizer::without_roles_file(&config.admin_roles))
            }
        };
        Ok(Authz {
            authorizer,
            from_roles_file,
            audit,
            refused: AtomicU64::new(0),
        })
    }

    /// No authorization: every request may do anything (`auth.type: none`), for tests.
    pub fn disabled() -> Authz {
        Authz {
            authorizer: None,
            from_roles_file: false,
            audit: Audit::default(),
            refused: AtomicU64::new(0),
        }
    }

    /// Whether the permissions come from a roles file.
    pub fn has_roles_file(&self) -> bool {
        self.from_roles_file
    }

    /// The permissions of `principal`; `None` when nothing is authorized.
    pub fn permissions(&self, principal: &Principal) -> Option<Arc<RoleSet>> {
        Some(self.authorizer.as_ref()?.role_set(&principal.roles))
    }

    /// Requests (and items) refused since the node started.
    pub fn num_refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts, logs and audits a refusal of a request from `remote`; answers the 403 to send.
    fn refuse(
        &self,
        who: &Principal,
        remote: Option<IpAddr>,
        action: &str,
        target: &str,
    ) -> EngineError {
        self.refused.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(user = %who.username, action, target, "request refused by authorization");
        self.audit.record(
            Instant::now(),
            Some(who),
            remote,
            action,
            target,
            Outcome::Refused,
        );
        forbidden(action, who)
    }
}

/// sluice's operator endpoints, the metrics and the dashboard: only a role of
/// `auth.admin_roles` may use them (they name every group and users' tasks), whatever a
/// roles file grants; a permission for their action only lets the request reach the check.
pub const ADMIN_ROLE_ONLY: [Action; 2] = [Action::Metrics, Action::Dashboard];

/// OpenSearch's refusal: 403 `security_exception`, `no permissions for [action] and User
/// [name=…, backend_roles=[…], requestedTenant=null]` (the roles sluice's authentication gives
/// a user are what OpenSearch calls backend roles). For an action of [`ADMIN_ROLE_ONLY`] it
/// adds what is needed: an outside trial's operators granted the action named, as OpenSearch's
/// prometheus-exporter would have them do, and were refused again.
pub fn forbidden(action: &str, who: &Principal) -> EngineError {
    let needs = if ADMIN_ROLE_ONLY.iter().any(|a| a.name() == action) {
        "; this needs a role listed in auth.admin_roles, which no permission replaces"
    } else {
        ""
    };
    EngineError::new(
        ErrorCode::Forbidden,
        format!(
            "no permissions for [{action}] and User [name={}, backend_roles=[{}], requestedTenant=null]{needs}",
            who.username,
            who.roles.join(", ")
        ),
    )
}

/// Where index expressions are resolved: this node's own indices, or none (a gateway, whose
/// indices live upstream).
#[derive(Debug, Clone, Copy)]
pub enum Catalog<'a> {
    /// The embedded engine holds the indices: wildcards and aliases resolve against it.
    Local(&'a Engine),
    /// A gateway: nothing resolves here, so a wildcard is allowed only when one role's
    /// pattern covers it as a pattern (`logs-2024-*` under `logs-*`) and a name only as named
    /// (an upstream alias is allowed when its own name is granted).
    Remote,
}

impl<'a> Catalog<'a> {
    /// The catalog of this node's backend.
    pub fn of(st: &'a AppState) -> Catalog<'a> {
        match st.upstream {
            None => Catalog::Local(&st.engine),
            Some(_) => Catalog::Remote,
        }
    }
}

/// How the authorizer resolves an expression: to every index it could reach under any
/// request's options, closed and hidden ones included (a request's `expand_wildcards=all`
/// reaches them, and the handler, not the authorizer, reads the request's options), and
/// skipping names that do not exist (the handler answers their 404). A wildcard is allowed
/// only when every index it could expand to is: never more permissive than OpenSearch, and
/// stricter only for a wildcard that reaches a forbidden index that the request's own
/// options would have left out.
const EVERY_INDEX: IndicesOptions = IndicesOptions {
    ignore_unavailable: true,
    allow_no_indices: true,
    expand_wildcards: ExpandWildcards {
        open: true,
        closed: true,
        hidden: true,
    },
    forbid_closed: false,
};

/// Whether `perms` allow index `action` on every index `expr` names (see the module docs).
pub fn allows_expression(
    perms: &RoleSet,
    action: Action,
    expr: &str,
    catalog: Catalog<'_>,
) -> bool {
    let engine = match catalog {
        Catalog::Local(engine) => engine,
        Catalog::Remote => return allows_unresolved(perms, action, expr),
    };
    let resolve = |expr: &str| {
        engine
            .resolve_targets(expr, &EVERY_INDEX)
            .map(|ts| ts.into_iter().map(|t| t.handle).collect::<Vec<_>>())
    };
    let is_wildcard = |p: &str| p == "_all" || p.contains('*');
    let mut wildcard = false;
    let mut named_any = false;
    for (i, part) in expr
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        named_any = true;
        if i > 0 && part.starts_with('-') {
            continue;
        }
        // Another cluster's indices (`cluster:index`) resolve nowhere here: as on a gateway,
        // only a remote pattern of the role covers them (`pattern.rs`).
        if sluice_core::authz::pattern::is_remote(part) {
            if allows_unresolved(perms, action, part) {
                continue;
            }
            return false;
        }
        if is_wildcard(part) {
            wildcard = true;
            continue;
        }
        if perms.allows_index(action, part) {
            continue;
        }
        // An alias is allowed when every index it stands for is.
        let alias_ok = resolve(part).is_ok_and(|hs| {
            !hs.is_empty()
                && hs.iter().all(|h| h.name() != part)
                && hs.iter().all(|h| perms.allows_index(action, h.name()))
        });
        if !alias_ok {
            return false;
        }
    }
    if !named_any || wildcard {
        if !perms.allows_index_somewhere(action) {
            return false;
        }
        // A named index that is missing is skipped (`EVERY_INDEX`; the handler answers
        // its 404): what the wildcards include is checked.
        let resolved = if named_any {
            resolve(expr)
        } else {
            resolve("_all")
        };
        let Ok(resolved) = resolved else {
            return false;
        };
        return resolved
            .iter()
            .all(|h| perms.allows_index(action, h.name()));
    }
    true
}

/// Whether `action` on `expr` would create an index `perms` may not create: a document
/// written (`WriteIndex`, `WriteUpdate`: an upsert) to one name that is no index or alias
/// creates the index, and OpenSearch authorizes that as `indices:admin/create` on the name,
/// as an explicit create. Only where names resolve (an embedded node); a gateway cannot know
/// whether the upstream has the index, and the upstream's own authorization decides.
pub fn lacks_create_for(perms: &RoleSet, action: Action, expr: &str, catalog: Catalog<'_>) -> bool {
    let Catalog::Local(engine) = catalog else {
        return false;
    };
    matches!(action, Action::WriteIndex | Action::WriteUpdate)
        && !expr.contains(',')
        && !expr.contains('*')
        && !perms.allows_index(Action::IndexCreate, expr)
        && engine
            .resolve_targets(expr, &EVERY_INDEX)
            .is_ok_and(|ts| ts.is_empty())
}

/// The action `perms` are refused for index `action` on `expr`: `action` itself
/// ([`allows_expression`]), or the create a write to a missing index needs
/// ([`lacks_create_for`]); `None` when the request may go on. One rule for a request's path
/// and for each item of a request of items.
fn refused_action(
    perms: &RoleSet,
    action: Action,
    expr: &str,
    catalog: Catalog<'_>,
) -> Option<Action> {
    if !allows_expression(perms, action, expr, catalog) {
        Some(action)
    } else if lacks_create_for(perms, action, expr, catalog) {
        Some(Action::IndexCreate)
    } else {
        None
    }
}

/// [`allows_expression`] where nothing resolves (a gateway): every name must be granted as
/// named and every wildcard covered by a granted pattern (`_all` and an empty expression are
/// `*`); exclusions only narrow what the rest names, so they are not checked.
fn allows_unresolved(perms: &RoleSet, action: Action, expr: &str) -> bool {
    let mut named_any = false;
    for (i, part) in expr
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        named_any = true;
        if i > 0 && part.starts_with('-') {
            continue;
        }
        let allowed = if part == "_all" {
            perms.allows_index_pattern(action, "*")
        } else if part.contains('*') || part.contains('?') {
            perms.allows_index_pattern(action, part)
        } else {
            perms.allows_index(action, part)
        };
        if !allowed {
            return false;
        }
    }
    named_any || perms.allows_index_pattern(action, "*")
}

/// Whether a successful request of `action` is one the audit log records.
fn is_audited(action: Action) -> bool {
    matches!(
        action,
        Action::ClusterSettingsUpdate
            | Action::WlmGroupCreate
            | Action::WlmGroupUpdate
            | Action::WlmGroupDelete
            | Action::RuleCreate
            | Action::RuleUpdate
            | Action::RuleDelete
            | Action::IndexCreate
            | Action::IndexDelete
            | Action::SettingsUpdate
            | Action::MappingPut
            | Action::BlockAdd
            | Action::Aliases
    )
}

/// Authorizes every request, after authentication in the request steps
/// ([`crate::server::check_lines`]), outside the router's handlers, so a request no route
/// serves — and, in gateway mode, one forwarded upstream — is authorized too: `route` is what
/// [`super::route::classify`] makes of the request's `method` and `path`, and `remote` the
/// peer address of its connection, for the audit log. `Err` is the 403
/// `security_exception` to answer when the principal's roles do not grant the request's
/// action on what it names; otherwise the principal's permissions, which ride in the request's
/// metadata for per-item checks. Refusals are written to the audit log here; an admin action is
/// written once answered, by the returned [`Audited`].
pub fn authorize(
    st: &AppState,
    principal: Option<&Arc<Principal>>,
    remote: Option<IpAddr>,
    method: &Method,
    path: &str,
    route: RouteAction<'_>,
) -> Result<(Option<Arc<RoleSet>>, Option<Audited>), EngineError> {
    let audited = match &route {
        RouteAction::Cluster(a) | RouteAction::Index(a, _) if is_audited(*a) => {
            let target = match &route {
                RouteAction::Index(_, expr) => expr.to_string(),
                _ => path.to_string(),
            };
            Some((*a, target))
        }
        _ => None,
    };
    let mut permissions = None;
    if let Some(principal) = principal
        && let Some(perms) = st.authz.permissions(principal)
    {
        let denied = match &route {
            RouteAction::Cluster(a) => {
                (!perms.allows_cluster(*a)).then(|| (a.name(), String::new()))
            }
            RouteAction::Index(a, expr) => refused_action(&perms, *a, expr, Catalog::of(st))
                .map(|refused| (refused.name(), expr.to_string())),
            RouteAction::PerItem(_) => None,
        };
        // An alias added or removed through the path: its names too (as `POST _aliases`'s
        // actions are, `api/aliases.rs`).
        let denied = denied.or_else(|| {
            let names = alias_names(method, path)?;
            (!allows_names(&perms, Action::Aliases, &names))
                .then(|| (Action::Aliases.name(), names.to_string()))
        });
        if let Some((action, target)) = denied {
            return Err(st.authz.refuse(principal, remote, action, &target));
        }
        permissions = Some(perms);
    }
    let audited = audited.map(|(action, target)| Audited {
        principal: principal.cloned(),
        remote,
        action,
        target,
    });
    Ok((permissions, audited))
}

/// An admin action authorized by [`authorize`], written to the audit log with its outcome
/// once the request is answered.
pub struct Audited {
    principal: Option<Arc<Principal>>,
    remote: Option<IpAddr>,
    action: Action,
    target: String,
}

impl Audited {
    /// Writes the action with the status it was answered.
    pub fn record(self, st: &AppState, status: axum::http::StatusCode) {
        st.authz.audit.record(
            Instant::now(),
            self.principal.as_deref(),
            self.remote,
            self.action.name(),
            &self.target,
            Outcome::Done(status.as_u16()),
        );
    }
}

/// Authorizes index `action` on `expr` for work the node does on behalf of `who` outside a
/// request's own path (the documents and searches a `terms` lookup reads) for a request from
/// `remote`: `Err` is the 403, counted and audited.
pub fn authorize_principal(
    st: &AppState,
    who: Option<&Principal>,
    remote: Option<IpAddr>,
    action: Action,
    expr: &str,
) -> Result<(), EngineError> {
    let Some(who) = who else {
        return Ok(());
    };
    let Some(perms) = st.authz.permissions(who) else {
        return Ok(());
    };
    if allows_expression(&perms, action, expr, Catalog::of(st)) {
        return Ok(());
    }
    Err(st.authz.refuse(who, remote, action.name(), expr))
}

/// The action a `terms` lookup needs on its index: a lookup by id reads one document
/// (`Action::Get`), a lookup by query searches (`Action::Search`).
pub fn lookup_action(by_query: bool) -> Action {
    if by_query {
        Action::Search
    } else {
        Action::Get
    }
}

/// Refuses, for `meta`'s user, a request of `action` on `target` whose reads the node cannot
/// authorize (a gateway forwarding as one account what the upstream alone could resolve):
/// OpenSearch's 403 followed by `why`, counted and audited as any refusal.
pub fn refuse_unchecked(
    st: &AppState,
    meta: &RequestMeta,
    action: Action,
    target: &str,
    why: &str,
) -> EngineError {
    let mut e = match &meta.principal {
        Some(who) => st
            .authz
            .refuse(who, meta.remote_addr, action.name(), target),
        None => EngineError::new(
            ErrorCode::Forbidden,
            format!("no permissions for [{}]", action.name()),
        ),
    };
    e.reason = format!("{}: {why}", e.reason);
    e
}

/// Authorizes one item of a request of items (an `_msearch` search, a `_bulk` operation, an
/// `_mget` document): `Err` is the item's 403, counted and audited; the other items run.
pub fn authorize_item(
    st: &AppState,
    meta: &RequestMeta,
    action: Action,
    expr: &str,
) -> Result<(), EngineError> {
    let (Some(perms), Some(who)) = (&meta.permissions, &meta.principal) else {
        return Ok(());
    };
    match refused_action(perms, action, expr, Catalog::of(st)) {
        Some(refused) => Err(st.authz.refuse(who, meta.remote_addr, refused.name(), expr)),
        None => Ok(()),
    }
}

/// Whether `perms` allow `action` on the names `names` lists as names, whatever they stand
/// for now: every name granted as named, every wildcard covered by a granted pattern. An
/// alias's own name is checked so (an alias added to a tenant's index under another tenant's
/// name would capture that tenant's reads and writes), as Elasticsearch's security checks the
/// alias privilege on the alias name.
pub fn allows_names(perms: &RoleSet, action: Action, names: &str) -> bool {
    allows_unresolved(perms, action, names)
}

/// Authorizes the alias names of one action of a request of items (`POST _aliases`):
/// [`allows_names`]; `Err` is its 403, counted and audited.
pub fn authorize_names(
    st: &AppState,
    meta: &RequestMeta,
    action: Action,
    names: &str,
) -> Result<(), EngineError> {
    let (Some(perms), Some(who)) = (&meta.permissions, &meta.principal) else {
        return Ok(());
    };
    if allows_names(perms, action, names) {
        return Ok(());
    }
    Err(st.authz.refuse(who, meta.remote_addr, action.name(), names))
}

/// Authorizes a scroll continuation or clear: only the user who opened the scroll may use it
/// (`opened_by`; `None` when it was opened without authentication; [`ALL_SCROLLS`] for
/// clearing every scroll), unless a cluster permission allows others' scrolls
/// (`Action::ScrollsOfOthers`). A stranger's scroll id is refused as OpenSearch's security
/// plugin refuses it (403, "Wrong user in reader context").
pub fn authorize_scroll(
    st: &AppState,
    meta: &RequestMeta,
    action: &str,
    opened_by: Option<&str>,
) -> Result<(), EngineError> {
    check_scroll(
        st,
        meta,
        action,
        |who| opened_by.is_some_and(|owner| owner != &*who.username),
        "Wrong user in reader context",
    )
}

/// A gateway's check of a scroll no gateway of its cluster knows
/// ([`crate::backend::upstream::scroll_peers`]): opened directly on the upstream, before its
/// gateway last started, through a gateway that did not answer in time, or an id of a known
/// one spelled otherwise (an upstream may read `<id>=` as `<id>`). Whose it is cannot be
/// known, so with authorization on only a user allowed others' scrolls may continue or clear
/// it: fails closed, where a guessed or respelled id would otherwise reach another user's
/// scroll.
pub fn authorize_unknown_scroll(
    st: &AppState,
    meta: &RequestMeta,
    action: &str,
) -> Result<(), EngineError> {
    check_scroll(
        st,
        meta,
        action,
        |_| true,
        "no gateway of this cluster knows the scroll (it was opened directly on the upstream, \
         before its gateway last started, or through a gateway that did not answer in time), \
         so whose it is cannot be checked: continue or clear a scroll with its id as the \
         gateway that opened it returned it",
    )
}

/// Refuses (`reason`, audited) a scroll `not_theirs` says is not the user's, unless nothing is
/// authorized or the user may use others' scrolls.
fn check_scroll(
    st: &AppState,
    meta: &RequestMeta,
    action: &str,
    not_theirs: impl FnOnce(&Principal) -> bool,
    reason: &str,
) -> Result<(), EngineError> {
    let (Some(perms), Some(who)) = (&meta.permissions, &meta.principal) else {
        return Ok(());
    };
    if perms.allows_cluster(Action::ScrollsOfOthers) || !not_theirs(who) {
        return Ok(());
    }
    st.authz.refuse(who, meta.remote_addr, action, "scroll");
    Err(EngineError::new(ErrorCode::Forbidden, reason))
}

/// The `opened_by` of a request clearing every scroll: no user's name (names hold no `:`).
pub const ALL_SCROLLS: &str = ":all";

/// Whether the request may see (`Action::TasksList`, `Action::TaskGet`) or cancel
/// (`Action::TasksCancel`) a task run by `owner`: its own tasks always, anyone's with the
/// cluster permission for the action.
pub fn may_touch_task(meta: &RequestMeta, action: Action, owner: Option<&Principal>) -> bool {
    let (Some(perms), Some(who)) = (&meta.permissions, &meta.principal) else {
        return true;
    };
    perms.allows_cluster(action) || owner.is_some_and(|o| o.username == who.username)
}
