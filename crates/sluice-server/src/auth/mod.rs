//! Who sends a request and what it may do.
//!
//! - [`authn`]: authentication (DESIGN.md D6): `auth.type` `none`, `basic` (users file) or
//!   `proxy` (trusted headers) → the request's [`Principal`].
//! - [`roles_file`]: the roles file (`auth.roles_file`), read and validated at start-up.
//! - [`route`]: the action of a request from its method and path — the one table
//!   authorization reads.
//! - [`authz`]: authorization — the middleware that checks every request before its handler
//!   (and admission), and the per-item checks of `_bulk`, `_msearch`, `_mget`, scroll and
//!   `_tasks`. The permission model itself is pure, in `sluice_core::authz`.
//! - [`audit`]: the rate-limited audit log of admin actions and refusals.

pub mod audit;
pub mod authn;
pub mod authz;
pub mod roles_file;
pub mod route;

pub use authn::*;
pub use authz::{
    Audited, Authz, authorize, authorize_item, authorize_names, authorize_scroll, may_touch_task,
};
