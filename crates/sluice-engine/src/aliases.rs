//! Index aliases: their metadata (kept in each index's `index.json`, so an alias lives and dies
//! with its indices), the node-wide [`AliasTable`] the resolver reads, and the `_aliases`
//! actions with OpenSearch's validation.
//!
//! # Invariants
//! - An alias name is never also an index name (checked when either is created).
//! - At most one index of an alias has `is_write_index: true` (checked on every change).
//! - The table is rebuilt from the indices' metadata and swapped whole after every change, so a
//!   reader sees all of an `_aliases` request's actions or none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::{EngineError, ErrorCode, Result};

/// One alias on one index, as `index.json` and the alias APIs carry it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AliasMeta {
    /// A query every search through the alias is filtered by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    /// Whether this index takes the writes sent to the alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_write_index: Option<bool>,
    /// Routing for writes (accepted and echoed: an index is one shard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_routing: Option<String>,
    /// Routing for searches (accepted and echoed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_routing: Option<String>,
    /// Whether the alias is hidden (accepted and echoed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_hidden: Option<bool>,
}

impl AliasMeta {
    /// Reads an alias body (`filter`, `routing`, `index_routing`, `search_routing`,
    /// `is_write_index`, `is_hidden`) as create-index `aliases` and `PUT _alias` take it.
    pub fn parse(alias: &str, body: &Value) -> Result<AliasMeta> {
        let obj = match body {
            Value::Null => return Ok(AliasMeta::default()),
            Value::Object(o) => o,
            other => {
                return Err(EngineError::parsing(format!(
                    "[alias] failed to parse alias [{alias}]: expected an object, got [{other}]"
                )));
            }
        };
        let mut meta = AliasMeta::default();
        for (k, v) in obj {
            match k.as_str() {
                "filter" => meta.filter = (!v.is_null()).then(|| v.clone()),
                "routing" => {
                    let r = routing(alias, k, v)?;
                    meta.index_routing = Some(r.clone());
                    meta.search_routing = Some(r);
                }
                "index_routing" => meta.index_routing = Some(routing(alias, k, v)?),
                "search_routing" => meta.search_routing = Some(routing(alias, k, v)?),
                "is_write_index" => meta.is_write_index = Some(boolean(alias, k, v)?),
                "is_hidden" => meta.is_hidden = Some(boolean(alias, k, v)?),
                other => {
                    return Err(EngineError::illegal_argument(format!(
                        "Unknown field [{other}] in alias [{alias}]"
                    )));
                }
            }
        }
        if meta.filter.as_ref().is_some_and(|f| !f.is_object()) {
            return Err(EngineError::illegal_argument(format!(
                "failed to parse filter for alias [{alias}]"
            )));
        }
        Ok(meta)
    }

    /// Renders the alias as `GET _alias` shows it (`{}` for a plain alias).
    pub fn render(&self) -> Value {
        let mut m = Map::new();
        if let Some(f) = &self.filter {
            m.insert("filter".into(), f.clone());
        }
        if let Some(r) = &self.index_routing {
            m.insert("index_routing".into(), json!(r));
        }
        if let Some(r) = &self.search_routing {
            m.insert("search_routing".into(), json!(r));
        }
        if let Some(w) = self.is_write_index {
            m.insert("is_write_index".into(), json!(w));
        }
        if let Some(h) = self.is_hidden {
            m.insert("is_hidden".into(), json!(h));
        }
        Value::Object(m)
    }
}

fn routing(alias: &str, key: &str, v: &Value) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(EngineError::illegal_argument(format!(
            "[{key}] of alias [{alias}] must be a string"
        ))),
    }
}

fn boolean(alias: &str, key: &str, v: &Value) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
        _ => Err(EngineError::illegal_argument(format!(
            "Failed to parse value [{v}] as only [true] or [false] are allowed for [{key}] of alias [{alias}]"
        ))),
    }
}

/// Validates an alias name as OpenSearch's `validateIndexOrAliasName` does (aliases, unlike
/// indices, may hold upper-case letters).
pub fn validate_alias_name(alias: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(EngineError::new(
            ErrorCode::InvalidAliasName,
            format!("Invalid alias name [{alias}]: {why}"),
        )
        .with_index(alias))
    };
    if alias.trim().is_empty() {
        return Err(EngineError::illegal_argument("alias name is required"));
    }
    if alias.contains(['\\', '/', '*', '?', '"', '<', '>', '|', ' ', ',']) {
        return bad(r#"must not contain the following characters [ , ", *, \, <, |, ,, >, /, ?]"#);
    }
    if alias.contains('#') {
        return bad("must not contain '#'");
    }
    if alias.contains(':') {
        return bad("must not contain ':'");
    }
    if alias.starts_with(['_', '-', '+']) {
        return bad("must not start with '_', '-', or '+'");
    }
    if alias == "." || alias == ".." {
        return bad("must not be '.' or '..'");
    }
    if alias.len() > 255 {
        return bad("alias name is too long, (must be <= 255 bytes)");
    }
    Ok(())
}

/// Every alias of the node: alias name → index name → its metadata on that index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AliasTable {
    aliases: BTreeMap<String, BTreeMap<String, AliasMeta>>,
}

impl AliasTable {
    /// Builds the table from each index's aliases.
    pub fn build<'a>(
        per_index: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, AliasMeta>)>,
    ) -> AliasTable {
        let mut aliases: BTreeMap<String, BTreeMap<String, AliasMeta>> = BTreeMap::new();
        for (index, list) in per_index {
            for (alias, meta) in list {
                aliases
                    .entry(alias.clone())
                    .or_default()
                    .insert(index.to_string(), meta.clone());
            }
        }
        AliasTable { aliases }
    }

    /// The indices of `alias` with their metadata, if the alias exists.
    pub fn get(&self, alias: &str) -> Option<&BTreeMap<String, AliasMeta>> {
        self.aliases.get(alias)
    }

    /// Whether `name` is an alias.
    pub fn contains(&self, name: &str) -> bool {
        self.aliases.contains_key(name)
    }

    /// Every alias name with its indices.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &BTreeMap<String, AliasMeta>)> {
        self.aliases.iter()
    }

    /// The index writes through `alias` go to: its one write index, or its only index unless
    /// that one says `is_write_index: false`; else OpenSearch's error.
    pub fn write_index(&self, alias: &str) -> Result<Option<&str>> {
        let Some(indices) = self.aliases.get(alias) else {
            return Ok(None);
        };
        let explicit: Vec<&str> = indices
            .iter()
            .filter(|(_, m)| m.is_write_index == Some(true))
            .map(|(i, _)| i.as_str())
            .collect();
        match (explicit.as_slice(), indices.len()) {
            ([one], _) => Ok(Some(one)),
            ([], 1) if indices.values().all(|m| m.is_write_index != Some(false)) => {
                Ok(indices.keys().next().map(String::as_str))
            }
            _ => Err(EngineError::illegal_argument(format!(
                "no write index is defined for alias [{alias}]. The write index may be explicitly disabled using is_write_index=false or the alias points to multiple indices without one being designated as a write index"
            ))),
        }
    }

    /// Checks the invariant that an alias has at most one write index.
    pub fn check_write_indices(&self) -> Result<()> {
        for (alias, indices) in &self.aliases {
            let writers: Vec<&str> = indices
                .iter()
                .filter(|(_, m)| m.is_write_index == Some(true))
                .map(|(i, _)| i.as_str())
                .collect();
            if writers.len() > 1 {
                return Err(EngineError::new(
                    ErrorCode::IllegalState,
                    format!(
                        "alias [{alias}] has more than one write index [{}]",
                        writers.join(",")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// One action of `POST _aliases`, its index and alias expressions not yet resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum AliasAction {
    /// Add (or replace) `aliases` on the indices `indices` names.
    Add {
        /// Index expressions (names, wildcards).
        indices: Vec<String>,
        /// Alias names.
        aliases: Vec<String>,
        /// The alias's metadata.
        meta: AliasMeta,
    },
    /// Remove the aliases matching `aliases` from the indices `indices` names.
    Remove {
        /// Index expressions.
        indices: Vec<String>,
        /// Alias names or wildcards.
        aliases: Vec<String>,
        /// `must_exist`: a missing alias is an error (the default) or skipped (`false`).
        must_exist: Option<bool>,
    },
    /// Delete the indices `indices` names, in the same atomic step.
    RemoveIndex {
        /// Index expressions.
        indices: Vec<String>,
    },
}

fn validation(why: &str) -> EngineError {
    EngineError::new(
        ErrorCode::ActionRequestValidation,
        format!("Validation Failed: 1: {why};"),
    )
}

fn strings(v: &Value, key: &str) -> Result<Vec<String>> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str().map(str::to_string).ok_or_else(|| {
                    EngineError::parsing(format!("[{key}] must hold strings, got [{x}]"))
                })
            })
            .collect(),
        other => Err(EngineError::parsing(format!(
            "[{key}] must be a string or an array of strings, got [{other}]"
        ))),
    }
}

/// Parses a `POST _aliases` body into its actions, with OpenSearch's validation texts.
pub fn parse_actions(body: &Value) -> Result<Vec<AliasAction>> {
    let Some(obj) = body.as_object() else {
        return Err(EngineError::parsing(
            "request body must be an object with [actions]",
        ));
    };
    if let Some(k) = obj.keys().find(|k| *k != "actions") {
        return Err(EngineError::parsing(format!(
            "[aliases] unknown field [{k}]"
        )));
    }
    let list = match obj.get("actions") {
        None => return Err(validation("No action specified")),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(EngineError::parsing("[actions] must be an array")),
    };
    if list.is_empty() {
        return Err(validation("No action specified"));
    }
    let mut out = Vec::with_capacity(list.len());
    for item in list {
        let Some((kind, spec)) = item
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
        else {
            return Err(EngineError::parsing(
                "each alias action must be an object with one of [add, remove, remove_index]",
            ));
        };
        let Some(spec) = spec.as_object() else {
            return Err(EngineError::parsing(format!("[{kind}] must be an object")));
        };
        let mut indices = Vec::new();
        let mut aliases = Vec::new();
        let mut body = Map::new();
        let mut must_exist = None;
        for (k, v) in spec {
            match k.as_str() {
                "index" | "indices" => indices.extend(strings(v, k)?),
                "alias" | "aliases" => aliases.extend(strings(v, k)?),
                "must_exist" => must_exist = Some(boolean("", k, v)?),
                "filter" | "routing" | "index_routing" | "search_routing" | "is_write_index"
                | "is_hidden"
                    if kind == "add" =>
                {
                    body.insert(k.clone(), v.clone());
                }
                other => {
                    return Err(EngineError::parsing(format!(
                        "[{kind}] unknown field [{other}]"
                    )));
                }
            }
        }
        if indices.is_empty() {
            return Err(validation("One of [index] or [indices] is required"));
        }
        match kind.as_str() {
            "add" | "remove" if aliases.is_empty() => {
                return Err(validation("One of [alias] or [aliases] is required"));
            }
            "add" => {
                let mut meta = None;
                for a in &aliases {
                    validate_alias_name(a)?;
                    meta = Some(AliasMeta::parse(a, &Value::Object(body.clone()))?);
                }
                out.push(AliasAction::Add {
                    indices,
                    aliases,
                    meta: meta.unwrap_or_default(),
                });
            }
            "remove" => out.push(AliasAction::Remove {
                indices,
                aliases,
                must_exist,
            }),
            "remove_index" => {
                if !aliases.is_empty() {
                    return Err(validation(
                        "aliases/alias is not allowed on remove_index actions",
                    ));
                }
                out.push(AliasAction::RemoveIndex { indices })
            }
            other => {
                return Err(EngineError::parsing(format!(
                    "Unknown alias action [{other}]: expected one of [add, remove, remove_index]"
                )));
            }
        }
    }
    Ok(out)
}

/// The 404 OpenSearch answers for aliases that do not exist.
pub fn aliases_not_found(names: &[String]) -> EngineError {
    let list = names.join(",");
    EngineError::new(
        ErrorCode::AliasesNotFound,
        format!("aliases [{list}] missing"),
    )
    .with_extra("resource.type", Value::from("aliases"))
    .with_extra("resource.id", Value::from(list))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, &str, Option<bool>)]) -> AliasTable {
        let mut per: BTreeMap<String, BTreeMap<String, AliasMeta>> = BTreeMap::new();
        for (index, alias, w) in entries {
            per.entry(index.to_string()).or_default().insert(
                alias.to_string(),
                AliasMeta {
                    is_write_index: *w,
                    ..AliasMeta::default()
                },
            );
        }
        AliasTable::build(per.iter().map(|(k, v)| (k.as_str(), v)))
    }

    #[test]
    fn test_write_index_is_the_flagged_or_the_only_index() {
        let t = table(&[
            ("a", "one", None),
            ("b", "two", None),
            ("c", "two", Some(true)),
        ]);
        assert_eq!(t.write_index("one").unwrap(), Some("a"));
        assert_eq!(t.write_index("two").unwrap(), Some("c"));
        assert_eq!(t.write_index("none").unwrap(), None);
        let t = table(&[("a", "x", None), ("b", "x", None)]);
        assert!(t.write_index("x").is_err());
        let t = table(&[("a", "x", Some(false))]);
        assert!(t.write_index("x").is_err());
    }

    #[test]
    fn test_two_write_indices_break_the_invariant() {
        let t = table(&[("a", "x", Some(true)), ("b", "x", Some(true))]);
        let e = t.check_write_indices().unwrap_err();
        assert_eq!(e.reason, "alias [x] has more than one write index [a,b]");
    }

    #[test]
    fn test_actions_are_validated() {
        assert!(parse_actions(&json!({"actions": []})).is_err());
        assert!(parse_actions(&json!({"actions": [{"add": {"alias": "x"}}]})).is_err());
        assert!(parse_actions(&json!({"actions": [{"add": {"index": "x"}}]})).is_err());
        let a = parse_actions(&json!({"actions": [
            {"add": {"index": "i", "alias": "a", "is_write_index": true}},
            {"remove": {"indices": ["i"], "aliases": ["b", "c"]}},
            {"remove_index": {"index": "old"}}
        ]}))
        .unwrap();
        assert_eq!(a.len(), 3);
        assert!(validate_alias_name("_x").is_err());
        assert!(validate_alias_name("Mixed").is_ok());
    }
}
