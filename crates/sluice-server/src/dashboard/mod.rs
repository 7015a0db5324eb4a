//! The live dashboard (issue #16): `GET /_sluice/dashboard`, a page embedded in the binary (no
//! build step) that polls `GET /_sluice/dashboard/data` once a second and shows, per group,
//! in-flight tasks against the limit, queue depth, throttled / rejected / cancelled rates,
//! cpu and memory share against the limits and the dry-run figures beside the actual ones; the
//! node's duress and search pool (on a gateway, its searches in flight upstream); and the tasks
//! running longest.
//!
//! # Decisions
//! - Polling a JSON endpoint, not server-sent events: one request a second per open page, no
//!   long-lived connection holding a task, and the same JSON is usable by scripts.
//! - The page shows the node it is served by (like `/_prometheus/metrics`); `_wlm/stats` is the
//!   cluster-wide view.
//! - The data names users' tasks and every group, so it needs an admin role when
//!   authentication is on; so do the page, its script and style sheet, though they hold no
//!   data: a user refused the data is refused the page in the same words (a role of
//!   `auth.admin_roles` is needed), where a page that loads and then fails reads as a broken
//!   dashboard (an outside trial's `cluster_all` user got the page, then a 403 on its data).
//!   The page still shows a refusal's reason should the data be refused later.
//! - Rates are computed in the page from the counters of its polls of the last 10 s (a heavy
//!   search takes seconds: a one-second rate would flicker), so the node keeps no per-viewer
//!   state.
//! - Its files go out with [`CONTENT_SECURITY_POLICY`], `X-Frame-Options: DENY` and
//!   `X-Content-Type-Options: nosniff`: group names and task descriptions are tenants' text,
//!   escaped by the page, and a second guard stops a markup that slipped through from running
//!   script or loading anything, and another site from framing an admin's page (an outside
//!   trial found none of these headers).

pub mod data;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiResult;
use crate::http::RequestMeta;
use crate::state::AppState;

/// The page.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script.
const APP_JS: &str = include_str!("assets/app.js");
/// Its style sheet.
const STYLE_CSS: &str = include_str!("assets/style.css");

/// What the page may load and run: its own script, style sheet and data, nothing inline but
/// the `style` attributes its bars are drawn with, and no framing by another page.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The routes of the dashboard.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_sluice/dashboard", get(index))
        .route("/_sluice/dashboard/app.js", get(app_js))
        .route("/_sluice/dashboard/style.css", get(style_css))
        .route("/_sluice/dashboard/data", get(data::data))
}

async fn index(State(st): State<Arc<AppState>>, meta: RequestMeta) -> ApiResult<Response> {
    asset(&st, &meta, "text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js(State(st): State<Arc<AppState>>, meta: RequestMeta) -> ApiResult<Response> {
    asset(&st, &meta, "text/javascript; charset=utf-8", APP_JS)
}

async fn style_css(State(st): State<Arc<AppState>>, meta: RequestMeta) -> ApiResult<Response> {
    asset(&st, &meta, "text/css; charset=utf-8", STYLE_CSS)
}

/// One of the page's files, to a user the data would be shown to.
fn asset(
    st: &AppState,
    meta: &RequestMeta,
    content_type: &'static str,
    body: &'static str,
) -> ApiResult<Response> {
    st.auth
        .authorize_admin(meta.principal.as_deref(), data::DASHBOARD_ACTION)?;
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ];
    Ok((headers, body).into_response())
}
