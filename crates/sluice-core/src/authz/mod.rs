//! Authorization, pure: which principal may run which action on which index, shaped like the
//! OpenSearch security plugin's `roles.yml`.
//!
//! - [`action`]: the [`Action`]s sluice authorizes (OpenSearch's action names), each a cluster
//!   or an index action, and [`ActionSet`], a set of them in one word.
//! - [`groups`]: the action groups (`read`, `write`, `delete`, `crud`, `manage`,
//!   `create_index`, `indices_all`, `cluster_monitor`, `cluster_all`, …) and the expansion of
//!   a permission entry into an [`ActionSet`].
//! - [`pattern`]: index pattern validation, the wildcard matcher, and [`PatternSet`], a trie
//!   that matches a name against many patterns in one walk.
//! - [`roles`]: [`RoleDef`] (one role of the file), [`Roles`] (validated, compiled),
//!   [`RoleSet`] (one principal's roles merged; answers a check without allocating) and
//!   [`Authorizer`] (the roles, the all-access admin roles, and a cache of role sets).
//!
//! Reading the roles file, resolving index expressions and answering 403 are the server's.

pub mod action;
pub mod groups;
pub mod pattern;
pub mod roles;

pub use action::{Action, ActionKind, ActionSet};
pub use pattern::PatternSet;
pub use roles::{
    Authorizer, IndexPermissionDef, RoleDef, RoleError, RoleNamesHasher, RoleSet, Roles,
};
