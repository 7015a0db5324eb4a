//! `GET /_cluster/settings` and `PUT /_cluster/settings`: the dynamic cluster settings, in
//! OpenSearch's shape.
//!
//! Parse (body → [`SettingsUpdate`], query flags) → logic
//! ([`ClusterSettings::apply`](crate::settings::ClusterSettings::apply),
//! which validates and persists) → response (settings maps rendered nested, or flat with
//! `?flat_settings=true`).
//!
//! One deliberate difference from OpenSearch: a body key other than `persistent` and
//! `transient` is a 400 `parsing_exception` instead of being ignored, so a typo such as
//! `persistant` cannot silently change nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::http::Query;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};
use sluice_engine::{EngineError, ErrorCode};

use crate::error::ApiResult;
use crate::http::{Body, Params, reply};
use crate::settings::{Scope, SettingsUpdate, flatten_settings};
use crate::state::AppState;
pub(crate) use sluice_engine::settings::bool_param;

/// The routes of this module, merged into the API router.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/_cluster/settings", get(get_settings).put(put_settings))
}

/// `GET /_cluster/settings[?flat_settings][&include_defaults]`:
/// `{"persistent":{…},"transient":{…}[,"defaults":{…}]}`.
pub async fn get_settings(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let flat = bool_param(&params, "flat_settings")?;
    let include_defaults = bool_param(&params, "include_defaults")?;
    let snapshot = st.cluster_settings.snapshot();
    let mut body = Map::new();
    body.insert("persistent".into(), render(snapshot.persistent(), flat));
    body.insert("transient".into(), render(snapshot.transient(), flat));
    if include_defaults {
        body.insert("defaults".into(), render(&snapshot.unset_defaults(), flat));
    }
    Ok(reply(StatusCode::OK, Value::Object(body), &params))
}

/// `PUT /_cluster/settings` with `{"persistent":{…},"transient":{…}}`: validates, saves the
/// persistent values, and answers `{"acknowledged":true,"persistent":{set},"transient":{set}}`.
pub async fn put_settings(
    State(st): State<Arc<AppState>>,
    Query(params): Query<Params>,
    body: Body,
) -> ApiResult<Response> {
    let flat = bool_param(&params, "flat_settings")?;
    let update = parse_update(&body)?;
    let applied = st
        .cluster_settings
        .apply(update)
        .await
        .map_err(EngineError::from)?;
    if st.cluster_settings.wlm_mode() != sluice_core::WlmMode::Enabled {
        // Only `enabled` parks: leaving it releases every group's backlog (issue #11 B.5).
        st.workload.release_all_queues().await;
    }
    let body = json!({
        "acknowledged": true,
        "persistent": render(&applied.persistent, flat),
        "transient": render(&applied.transient, flat),
    });
    Ok(reply(StatusCode::OK, body, &params))
}

/// Parses the update body: an object with optional `persistent` and `transient` objects,
/// whose keys may be nested or dotted.
fn parse_update(body: &Body) -> ApiResult<SettingsUpdate> {
    let Some(value) = body.json()? else {
        return Err(EngineError::new(ErrorCode::Parse, "request body is required").into());
    };
    let Value::Object(top) = value else {
        return Err(EngineError::parsing(format!(
            "Failed to parse object: expecting token of type [START_OBJECT] but found [{}]",
            sluice_wire::json::token_name(&value)
        ))
        .into());
    };
    let mut update = SettingsUpdate::default();
    for (key, value) in &top {
        let scope = match key.as_str() {
            "persistent" => Scope::Persistent,
            "transient" => Scope::Transient,
            _ => {
                return Err(EngineError::parsing(format!(
                    "request body has unknown key [{key}]; a cluster settings update takes [persistent] and/or [transient]"
                ))
                .into());
            }
        };
        let changes = match value {
            Value::Null => continue,
            Value::Object(settings) => {
                flatten_settings(settings).map_err(EngineError::illegal_argument)?
            }
            other => {
                return Err(EngineError::parsing(format!(
                    "[{scope}] must be an object of settings, found [{}]",
                    sluice_wire::json::token_name(other)
                ))
                .into());
            }
        };
        match scope {
            Scope::Persistent => update.persistent = changes,
            Scope::Transient => update.transient = changes,
        }
    }
    if update.is_empty() {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: no settings to update;",
        )
        .into());
    }
    Ok(update)
}

/// Renders settings as OpenSearch does: flat `{"a.b": "v"}`, or nested `{"a": {"b": "v"}}`,
/// keys in order either way.
pub(crate) fn render(settings: &BTreeMap<String, String>, flat: bool) -> Value {
    let mut out = Map::new();
    for (key, value) in settings {
        if flat {
            out.insert(key.clone(), Value::String(value.clone()));
        } else {
            insert_nested(&mut out, key, value);
        }
    }
    Value::Object(out)
}

/// Inserts `key` (dotted) into a nested object; where a path is taken by a value already,
/// the rest of the key stays dotted at that level, so nothing is ever lost.
fn insert_nested(out: &mut Map<String, Value>, key: &str, value: &str) {
    let (head, rest) = match key.split_once('.') {
        Some((h, r)) if !h.is_empty() && !r.is_empty() => (h, r),
        _ => {
            out.insert(key.to_string(), Value::String(value.to_string()));
            return;
        }
    };
    match out
        .entry(head.to_string())
        .or_insert_with(|| Value::Object(Map::new()))
    {
        Value::Object(inner) => insert_nested(inner, rest, value),
        _ => {
            out.insert(key.to_string(), Value::String(value.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_render_nests_by_dots_in_key_order() {
        let mut m = BTreeMap::new();
        m.insert("search.max_buckets".to_string(), "10".to_string());
        m.insert("search.default_keep_alive".to_string(), "1m".to_string());
        m.insert("wlm.workload_group.mode".to_string(), "enabled".to_string());
        assert_eq!(
            serde_json::to_string(&render(&m, false)).expect("json"),
            r#"{"search":{"default_keep_alive":"1m","max_buckets":"10"},"wlm":{"workload_group":{"mode":"enabled"}}}"#
        );
        assert_eq!(
            render(&m, true),
            json!({"search.default_keep_alive": "1m", "search.max_buckets": "10", "wlm.workload_group.mode": "enabled"})
        );
    }

    #[test]
    fn test_render_keeps_a_key_that_collides_with_a_prefix() {
        let mut m = BTreeMap::new();
        m.insert("a.b".to_string(), "1".to_string());
        m.insert("a.b.c".to_string(), "2".to_string());
        assert_eq!(render(&m, false), json!({"a": {"b": "1", "b.c": "2"}}));
    }

    #[test]
    fn test_no_registered_key_is_a_prefix_of_another() {
        // Keeps the nested rendering lossless (and parseable back by clients).
        for a in crate::settings::SETTINGS {
            for b in crate::settings::SETTINGS {
                assert!(
                    !b.key.starts_with(&format!("{}.", a.key)),
                    "[{}] is a prefix of [{}]",
                    a.key,
                    b.key
                );
            }
        }
    }
}
