//! Dynamic cluster settings, OpenSearch style: a registry of known settings ([`SETTINGS`]),
//! each with a key, a value [`Kind`] with its bounds, a default and documentation, and
//! [`ClusterSettings`], the node's current persistent and transient values.
//!
//! Values are kept and echoed as the strings the user sent (numbers become their decimal
//! text), as OpenSearch does; each is parsed and validated on the way in, and the effective
//! value of every setting — transient over persistent over default — is kept parsed in an
//! immutable [`SettingsSnapshot`], so a handler reads a typed value without parsing or
//! locking for more than an `Arc` clone:
//!
//! ```text
//! let max = st.cluster_settings.max_open_scroll_context();   // one value
//! let s = st.cluster_settings.snapshot();                    // several, consistent
//! let (d, m) = (s.default_keep_alive(), s.max_keep_alive());
//! ```
//!
//! An update ([`ClusterSettings::apply`]) validates every key and value, then the merged
//! result as a whole ([`CROSS_CHECKS`]), and only then saves the persistent values to the
//! metastore (one document, compare-and-set on its version) and publishes the new snapshot.
//! Transient values live in memory only and are gone after a restart, as in OpenSearch.
//!
//! Adding a setting is one entry in [`SETTINGS`] (plus a key constant in [`keys`]); a typed
//! accessor on [`SettingsSnapshot`] is optional sugar.
//!
//! The module is split by role, each depending only on the ones before it:
//! [`keys`] (the key constants) → [`values`] (kinds, definitions, parsing) → [`registry`] (the
//! table of settings and its single-value checks) → [`snapshot`] (the live parsed values and
//! the rules across settings) → [`store`] (updates, metastore persistence, publication).

pub mod keys;
pub mod registry;
pub mod snapshot;
pub mod store;
pub mod values;

pub use registry::{SETTINGS, definition};
pub use sluice_engine::settings::flatten_settings;
pub use snapshot::{CROSS_CHECKS, CrossCheck, SettingsSnapshot};
pub use store::{
    AppliedUpdate, ClusterSettings, PERSISTENT_DOC, Scope, SettingsError, SettingsUpdate,
};
pub use values::{Kind, SettingDef, SettingValue, ValueCheck, parse_value};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_flatten_accepts_nested_and_dotted_keys() {
        let body = serde_json::json!({
            "search": {"max_buckets": 10, "default_keep_alive": "1m"},
            "search.max_keep_alive": "2h",
            "a": {"b": {"c": null, "d": true}}
        });
        let flat = flatten_settings(body.as_object().expect("object")).expect("flat");
        assert_eq!(
            flat,
            vec![
                ("search.max_buckets".to_string(), Some("10".to_string())),
                (
                    "search.default_keep_alive".to_string(),
                    Some("1m".to_string())
                ),
                ("search.max_keep_alive".to_string(), Some("2h".to_string())),
                ("a.b.c".to_string(), None),
                ("a.b.d".to_string(), Some("true".to_string())),
            ]
        );
        let dup = serde_json::json!({"search.max_buckets": 1, "search": {"max_buckets": 2}});
        assert_eq!(
            flatten_settings(dup.as_object().expect("object")).expect_err("duplicate"),
            "duplicate settings key [search.max_buckets] found, previous value [1], current value [2]"
        );
        let arr = serde_json::json!({"search.max_buckets": [1]});
        assert!(flatten_settings(arr.as_object().expect("object")).is_err());
    }
}
