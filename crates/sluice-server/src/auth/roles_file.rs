//! The roles file (`auth.roles_file`): roles shaped like the OpenSearch security plugin's
//! `roles.yml`, read and validated once at start-up; a bad entry stops the node naming it.
//!
//! ```yaml
//! _meta: {type: roles, config_version: 2}     # optional, as OpenSearch writes it
//! tenant_a:
//!   cluster_permissions: [cluster_monitor]
//!   index_permissions:
//!     - index_patterns: ["tenant-a-*"]
//!       allowed_actions: [crud, create_index]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use sluice_core::authz::{RoleDef, Roles};

/// The key OpenSearch's configuration files carry their type and version under.
const META_KEY: &str = "_meta";

/// Why the roles file cannot be used; the message names the file and the entry.
#[derive(Debug, thiserror::Error)]
pub enum RolesFileError {
    /// It cannot be read.
    #[error("cannot read roles file [{path}]: {reason}")]
    Io { path: String, reason: String },
    /// It does not parse, or an entry is invalid.
    #[error("invalid roles file [{path}]: {reason}")]
    Invalid { path: String, reason: String },
}

/// Parses and validates a roles file's text.
pub fn parse(text: &str, path: &Path) -> Result<Roles, RolesFileError> {
    let invalid = |reason: String| RolesFileError::Invalid {
        path: path.display().to_string(),
        reason,
    };
    let expected = "expected a map of role name to {cluster_permissions: [..], index_permissions: [{index_patterns: [..], allowed_actions: [..]}]}";
    let top: serde_yaml_ng::Value = if text.trim().is_empty() {
        serde_yaml_ng::Value::Mapping(Default::default())
    } else {
        serde_yaml_ng::from_str(text).map_err(|e| {
            let e = e.to_string();
            if e.contains("duplicate entry") {
                invalid(format!("{e}; a role is defined twice: keep one definition"))
            } else {
                invalid(format!("{e}; {expected}"))
            }
        })?
    };
    let serde_yaml_ng::Value::Mapping(map) = top else {
        return Err(invalid(expected.to_string()));
    };
    let mut defs = BTreeMap::new();
    for (key, value) in map {
        let Some(name) = key.as_str() else {
            return Err(invalid(format!(
                "role name [{key:?}] is not a string; {expected}"
            )));
        };
        if name == META_KEY {
            continue;
        }
        let def: RoleDef =
            serde_yaml_ng::from_value(value).map_err(|e| invalid(format!("role [{name}]: {e}")))?;
        if defs.insert(name.to_string(), def).is_some() {
            return Err(invalid(format!(
                "role [{name}] is defined twice; keep one definition"
            )));
        }
    }
    Roles::compile(&defs).map_err(|e| invalid(e.to_string()))
}

/// Reads and validates the roles file at `path`.
pub fn load(path: &Path) -> Result<Roles, RolesFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| RolesFileError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    parse(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, Path::new("roles.yml")).unwrap_err().to_string()
    }

    #[test]
    fn test_roles_file_parses_opensearch_shape() {
        let roles = parse(
            "_meta:\n  type: roles\n  config_version: 2\n\
             tenant_a:\n  description: tenant a\n  cluster_permissions: [cluster_monitor]\n  \
             index_permissions:\n    - index_patterns: [\"tenant-a-*\"]\n      allowed_actions: [crud, create_index]\n",
            Path::new("roles.yml"),
        )
        .unwrap();
        assert_eq!(roles.num_roles(), 1);
        assert!(roles.contains("tenant_a"));
    }

    #[test]
    fn test_bad_roles_files_name_the_entry() {
        let e = err(
            "a:\n  index_permissions:\n    - index_patterns: [x]\n      allowed_actions: [reed]\n",
        );
        assert!(
            e.contains("role [a]") && e.contains("unknown action group [reed]"),
            "{e}"
        );
        let e = err(
            "a:\n  index_permissions:\n    - index_patterns: [\"/x.*/\"]\n      allowed_actions: [read]\n",
        );
        assert!(e.contains("bad pattern [/x.*/]"), "{e}");
        let e = err("a:\n  cluster_permissions: [cluster_all]\na:\n  cluster_permissions: []\n");
        assert!(
            e.contains("defined twice") || e.contains("duplicate"),
            "{e}"
        );
        let e = err(
            "a:\n  index_permissions:\n    - index_patterns: [x]\n      allowed_actions: [read]\n      dls: '{}'\n",
        );
        assert!(e.contains("role [a]") && e.contains("dls"), "{e}");
        let e = err("- a\n");
        assert!(e.contains("expected a map"), "{e}");
    }
}
