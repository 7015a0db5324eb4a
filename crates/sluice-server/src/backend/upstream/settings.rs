//! `_cluster/settings` on a gateway: the workload-management keys (`wlm.*`,
//! `node.workload_group.*`) are sluice's, every other key is the upstream cluster's (DESIGN
//! D15). An update goes to whichever owns its keys (one that mixes both is refused, so that
//! neither half can be applied without the other); a read answers the upstream's settings with
//! sluice's merged in, except a read whose `filter_path` can only select sluice's keys
//! ([`selects_only_sluice_keys`]): that one is answered here, without the upstream, so the
//! gateway's own settings can be read while the upstream is down, and the answer is whole.

use std::sync::Arc;

use crate::http::Query;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use sluice_engine::EngineError;

use super::routes::{Read, call_as, read};
use super::stream_back;
use crate::api::cluster_settings::{bool_param, get_settings, put_settings};
use crate::error::{ApiError, ApiResult};
use crate::http::{Body, Params, RequestMeta, reply};
use crate::state::AppState;

/// Whether a cluster setting is sluice's on a gateway.
fn is_sluice_key(key: &str) -> bool {
    key.starts_with("wlm.") || key.starts_with("node.workload_group.")
}

/// `GET|PUT /_cluster/settings` on a gateway.
pub async fn cluster_settings(
    State(st): State<Arc<AppState>>,
    meta: RequestMeta,
    req: Request,
) -> Response {
    let result = match *req.method() {
        Method::GET => read_settings(st, meta, req).await,
        Method::PUT => update_settings(st, meta, req).await,
        _ => return crate::http::fallback::forward(State(st), meta, req).await,
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn update_settings(
    st: Arc<AppState>,
    meta: RequestMeta,
    req: Request,
) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    // Refused before either owner sees it: sluice applies its keys itself, past the upstream.
    crate::http::timeouts::refuse_unparsable(&params, true)?;
    let mut ours = 0usize;
    let mut theirs = Vec::new();
    if let Ok(Some(Value::Object(top))) = crate::http::parse_json(&body) {
        for section in ["persistent", "transient"] {
            if let Some(Value::Object(settings)) = top.get(section) {
                let flat = crate::settings::flatten_settings(settings)
                    .map_err(EngineError::illegal_argument)?;
                for (key, _) in flat {
                    if is_sluice_key(&key) {
                        ours += 1;
                    } else {
                        theirs.push(key);
                    }
                }
            }
        }
    }
    if ours > 0 && !theirs.is_empty() {
        return Err(EngineError::illegal_argument(format!(
            "this node is a gateway: the wlm.* and node.workload_group.* settings are its own and [{}] are the upstream cluster's; send them in two requests",
            theirs.join(", ")
        ))
        .into());
    }
    if ours > 0 || theirs.is_empty() && !body.is_empty() && !has_sections(&body) {
        // sluice's own (or a body sluice refuses with its own error).
        // Authorized as a settings change by the authorization layer, before this handler.
        return put_settings(State(st), Query(params), Body(body)).await;
    }
    let resp = up.send_call(call_as(&up, &meta, &parts, &[], body)).await?;
    Ok(stream_back(resp))
}

/// Whether a body is an object of `persistent`/`transient` sections only (an update the
/// upstream may take).
fn has_sections(body: &[u8]) -> bool {
    matches!(
        crate::http::parse_json(body),
        Ok(Some(Value::Object(top))) if top.keys().all(|k| k == "persistent" || k == "transient")
    )
}

async fn read_settings(st: Arc<AppState>, meta: RequestMeta, req: Request) -> ApiResult<Response> {
    let up = super::routes_upstream(&st)?;
    let Read {
        parts,
        params,
        body,
    } = read(req).await?;
    crate::http::timeouts::refuse_unparsable(&params, true)?;
    let flat = bool_param(&params, "flat_settings")?;
    if selects_only_sluice_keys(&params) {
        // Whatever the upstream holds, the filter would drop it: the answer is sluice's alone.
        return get_settings(State(st), Query(params)).await;
    }
    let call = call_as(&up, &meta, &parts, &[], body).answer_uncompressed();
    let resp = up.send_call(call).await?;
    if !resp.status().is_success() {
        return Ok(stream_back(resp));
    }
    let mut theirs = super::json_answer(resp, "_cluster/settings").await?;
    // sluice's own settings, flat, filtered to its keys.
    let mut own_params: Params = params.clone();
    own_params.insert("flat_settings".into(), "true".into());
    own_params.remove("pretty");
    let own = get_settings(State(st), Query(own_params)).await?;
    let own_bytes = axum::body::to_bytes(own.into_body(), usize::MAX)
        .await
        .map_err(|e| ApiError::Engine(EngineError::internal(e.to_string())))?;
    let own: Value = serde_json::from_slice(&own_bytes)
        .map_err(|e| ApiError::Engine(EngineError::internal(e.to_string())))?;
    for section in ["persistent", "transient", "defaults"] {
        // The upstream's own values of sluice's keys (an OpenSearch 3 cluster has
        // `wlm.workload_group.mode` too) are not what this gateway does: never shown.
        if let Some(Value::Object(settings)) = theirs.get_mut(section) {
            drop_sluice_keys(settings);
        }
        let Some(Value::Object(settings)) = own.get(section) else {
            continue;
        };
        let Some(target) = theirs.as_object_mut() else {
            break;
        };
        let into = target
            .entry(section)
            .or_insert_with(|| Value::Object(Map::new()));
        for (key, value) in settings.iter().filter(|(k, _)| is_sluice_key(k)) {
            if flat {
                if let Value::Object(m) = into {
                    m.insert(key.clone(), value.clone());
                }
            } else {
                insert_nested(into, key, value.clone());
            }
        }
    }
    Ok(reply(StatusCode::OK, theirs, &params))
}

/// Whether the request's `filter_path` provably selects nothing but sluice's keys, so that the
/// upstream's settings, whatever they are, would be filtered out of the merged answer.
///
/// Every including expression must name a section (any one-level name: the answer's top
/// level holds only `persistent`, `transient` and `defaults`) and then, inside it, only names
/// of sluice's keys: `wlm` (the nested object, all of it sluice's), `node` followed by
/// `workload_group`, or a flat key's name whose literal start (before any `*`) is `wlm.` or
/// `node.workload_group.`. A `**`, a wildcard where a literal is needed, or an expression
/// stopping at a section could select the upstream's keys: those reads are merged as before.
/// Excludes only remove, so they never widen what the includes select.
fn selects_only_sluice_keys(params: &Params) -> bool {
    let Some(filter) = params
        .get("filter_path")
        .and_then(|f| sluice_wire::filter_path::FilterPath::parse(f))
    else {
        return false;
    };
    let includes = filter.includes();
    !includes.is_empty()
        && includes.iter().all(|path| match path.as_slice() {
            [section, rest @ ..] if *section != "**" => match rest {
                ["wlm", ..] | ["node", "workload_group", ..] => true,
                // A flat key's name: what any `*` stands for comes after `wlm.` or
                // `node.workload_group.`.
                [name, ..] => is_sluice_key(name.split('*').next().unwrap_or_default()),
                [] => false,
            },
            _ => false,
        })
}

/// Removes sluice's keys from a settings section, flat (`wlm.workload_group.mode`) or nested
/// (`{"wlm": {…}}`, `{"node": {"workload_group": {…}}}`), and what is left empty of them.
fn drop_sluice_keys(section: &mut Map<String, Value>) {
    section.retain(|key, _| !is_sluice_key(key) && key != "wlm");
    let node_is_empty = match section.get_mut("node") {
        Some(Value::Object(node)) => {
            node.remove("workload_group");
            node.retain(|key, _| !is_sluice_key(&format!("node.{key}")));
            node.is_empty()
        }
        _ => false,
    };
    if node_is_empty {
        section.remove("node");
    }
}

/// Inserts `value` at the dotted `key` of a nested settings object.
fn insert_nested(into: &mut Value, key: &str, value: Value) {
    let mut at = into;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let Value::Object(m) = at else {
            return;
        };
        if i + 1 == parts.len() {
            m.insert((*part).to_string(), value);
            return;
        }
        at = m
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn test_only_filters_that_cannot_select_upstream_keys_are_answered_locally() {
        let local = |f: &str| {
            let params: Params = [("filter_path".to_string(), f.to_string())].into();
            selects_only_sluice_keys(&params)
        };
        for f in [
            "persistent.wlm",
            "*.wlm.workload_group.*",
            "transient.node.workload_group",
            "persistent.wlm\\.workload_group\\.mode",
            "*.wlm.*,defaults.node.workload_group.max_count",
            "persistent.wlm.*,-persistent.wlm.workload_group.mode",
        ] {
            assert!(local(f), "{f}");
        }
        for f in [
            "persistent",
            "**.wlm",
            "persistent.*",
            "persistent.wlm*",
            "persistent.node",
            "persistent.node.*",
            "persistent.wlm,persistent.search",
            "-persistent.search",
            "",
        ] {
            assert!(!local(f), "{f}");
        }
        assert!(!selects_only_sluice_keys(&Params::default()));
    }

    #[test]
    fn test_sluice_keys_are_the_wlm_family() {
        assert!(is_sluice_key("wlm.workload_group.mode"));
        assert!(is_sluice_key("node.workload_group.max_count"));
        assert!(!is_sluice_key("search.max_buckets"));
        assert!(!is_sluice_key("cluster.routing.allocation.enable"));
        let mut v = json!({"wlm": {"x": 1}});
        insert_nested(&mut v, "wlm.workload_group.mode", json!("enabled"));
        assert_eq!(
            v,
            json!({"wlm": {"x": 1, "workload_group": {"mode": "enabled"}}})
        );
    }

    #[test]
    fn test_the_upstreams_values_of_sluice_keys_are_dropped_flat_or_nested() {
        let mut flat = json!({"wlm.workload_group.mode": "enabled",
            "node.workload_group.max_count": "5", "search.max_buckets": "10",
            "node.attr.zone": "a"});
        drop_sluice_keys(flat.as_object_mut().unwrap());
        assert_eq!(
            flat,
            json!({"search.max_buckets": "10", "node.attr.zone": "a"})
        );
        let mut nested = json!({"wlm": {"workload_group": {"mode": "enabled"}},
            "node": {"workload_group": {"max_count": "5"}}, "search": {"max_buckets": "10"}});
        drop_sluice_keys(nested.as_object_mut().unwrap());
        assert_eq!(nested, json!({"search": {"max_buckets": "10"}}));
        let mut kept =
            json!({"node": {"workload_group": {"max_count": "5"}, "attr": {"zone": "a"}}});
        drop_sluice_keys(kept.as_object_mut().unwrap());
        assert_eq!(kept, json!({"node": {"attr": {"zone": "a"}}}));
    }
}
