//! The live dashboard (issue #16): `GET /_sluice/dashboard`, a page embedded in the binary (no
//! build step) that polls `GET /_sluice/dashboard/data` once a second and shows, per group,
//! in-flight tasks against the limit, queue depth, throttled / rejected / cancelled rates,
//! cpu and memory share against the limits and the dry-run figures beside the actual ones; the
//! node's duress and search pool; and the tasks running longest.
//!
//! # Decisions
//! - Polling a JSON endpoint, not server-sent events: one request a second per open page, no
//!   long-lived connection holding a task, and the same JSON is usable by scripts.
//! - The page shows the node it is served by (like `/_prometheus/metrics`); `_wlm/stats` is the
//!   cluster-wide view.
//! - The data names users' tasks and every group, so it needs an admin role when
//!   authentication is on; the page itself holds no data and needs only authentication.
//! - Rates are computed in the page from the counters of its polls of the last 10 s (a heavy
//!   search takes seconds: a one-second rate would flicker), so the node keeps no per-viewer
//!   state.

pub mod data;

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::state::AppState;

/// The page.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script.
const APP_JS: &str = include_str!("assets/app.js");
/// Its style sheet.
const STYLE_CSS: &str = include_str!("assets/style.css");

/// The routes of the dashboard.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_sluice/dashboard", get(index))
        .route("/_sluice/dashboard/app.js", get(app_js))
        .route("/_sluice/dashboard/style.css", get(style_css))
        .route("/_sluice/dashboard/data", get(data::data))
}

async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        INDEX_HTML,
    )
}

async fn app_js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
}

async fn style_css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLE_CSS,
    )
}
