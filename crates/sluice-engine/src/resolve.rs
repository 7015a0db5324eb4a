//! The one index-expression resolver: names, aliases, wildcards (over both), `_all`,
//! exclusions (`-x`), and OpenSearch's `IndicesOptions` (`ignore_unavailable`,
//! `allow_no_indices`, `expand_wildcards`). Every API that takes an index expression — search,
//! count, msearch, the index APIs, the document APIs through [`write_index`] — and the
//! authorization checks resolve through here, so an alias means the same thing everywhere.
//!
//! A search reaching an index only through filtered aliases is filtered by them (OR-ed when
//! several); reaching it by its name, a wildcard over its name or an unfiltered alias lifts the
//! filter, as OpenSearch's `filteringAliases` does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::aliases::AliasTable;
use crate::error::{EngineError, ErrorCode, Result};
use crate::index::IndexHandle;
use sluice_wire::simple_match;

/// Which indices a wildcard may expand to (`expand_wildcards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpandWildcards {
    /// Open indices.
    pub open: bool,
    /// Closed indices.
    pub closed: bool,
    /// Hidden indices (`index.hidden: true`).
    pub hidden: bool,
}

/// How an index expression resolves (OpenSearch's `IndicesOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndicesOptions {
    /// Skip concrete names that do not exist or are closed instead of failing.
    pub ignore_unavailable: bool,
    /// Whether an expression may resolve to no index at all.
    pub allow_no_indices: bool,
    /// What wildcards expand to.
    pub expand_wildcards: ExpandWildcards,
    /// Whether a closed index named outright is an error (searches) or resolves (index APIs).
    pub forbid_closed: bool,
}

impl Default for IndicesOptions {
    /// OpenSearch's `strictExpandOpen`, the default of search, count and the index APIs.
    fn default() -> Self {
        IndicesOptions {
            ignore_unavailable: false,
            allow_no_indices: true,
            expand_wildcards: ExpandWildcards {
                open: true,
                closed: false,
                hidden: false,
            },
            forbid_closed: true,
        }
    }
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v {
        "true" | "" => Ok(true),
        "false" => Ok(false),
        other => Err(EngineError::illegal_argument(format!(
            "Failed to parse value [{other}] as only [true] or [false] are allowed."
        ))
        .with_extra("param", Value::from(key))),
    }
}

impl IndicesOptions {
    /// The defaults of the index APIs (get, mappings, settings, blocks, `_cat/indices`): a
    /// closed index may be named; wildcards expand to open indices, plus closed ones when
    /// `closed` is set.
    pub fn for_index_apis(closed: bool) -> IndicesOptions {
        IndicesOptions {
            expand_wildcards: ExpandWildcards {
                open: true,
                closed,
                hidden: false,
            },
            forbid_closed: false,
            ..IndicesOptions::default()
        }
    }

    /// Reads `ignore_unavailable`, `allow_no_indices` and `expand_wildcards` from request
    /// parameters over `defaults`.
    pub fn from_params(
        params: &HashMap<String, String>,
        defaults: IndicesOptions,
    ) -> Result<IndicesOptions> {
        let mut out = defaults;
        if let Some(v) = params.get("ignore_unavailable") {
            out.ignore_unavailable = parse_bool("ignore_unavailable", v)?;
        }
        if let Some(v) = params.get("allow_no_indices") {
            out.allow_no_indices = parse_bool("allow_no_indices", v)?;
        }
        if let Some(v) = params.get("expand_wildcards") {
            out.expand_wildcards = parse_expand(v)?;
        }
        Ok(out)
    }

    /// Reads the same three keys from an `_msearch` header line (booleans, strings or lists)
    /// over `defaults`.
    pub fn from_json(
        obj: &serde_json::Map<String, Value>,
        defaults: IndicesOptions,
    ) -> Result<IndicesOptions> {
        let mut params = HashMap::new();
        for key in ["ignore_unavailable", "allow_no_indices", "expand_wildcards"] {
            match obj.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Bool(b)) => {
                    params.insert(key.to_string(), b.to_string());
                }
                Some(Value::String(s)) => {
                    params.insert(key.to_string(), s.clone());
                }
                Some(Value::Array(a)) => {
                    let parts: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
                    params.insert(key.to_string(), parts.join(","));
                }
                Some(other) => {
                    return Err(EngineError::illegal_argument(format!(
                        "[{key}] must be a boolean or a string, got [{other}]"
                    )));
                }
            }
        }
        IndicesOptions::from_params(&params, defaults)
    }
}

/// Parses `expand_wildcards` (`open`, `closed`, `hidden`, `none`, `all`, comma-separated).
fn parse_expand(v: &str) -> Result<ExpandWildcards> {
    let mut out = ExpandWildcards {
        open: false,
        closed: false,
        hidden: false,
    };
    for part in v.split(',').map(str::trim) {
        match part {
            "open" => out.open = true,
            "closed" => out.closed = true,
            "hidden" => out.hidden = true,
            "none" => {}
            "all" => {
                out = ExpandWildcards {
                    open: true,
                    closed: true,
                    hidden: true,
                }
            }
            other => {
                return Err(EngineError::illegal_argument(format!(
                    "No valid expand wildcard value [{other}]"
                )));
            }
        }
    }
    Ok(out)
}

/// One index an expression resolved to, with the alias filter searches on it carry.
#[derive(Debug, Clone)]
pub struct Target {
    /// The index.
    pub handle: Arc<IndexHandle>,
    /// The filter of the aliases it was reached through, if only filtered aliases reached it.
    pub filter: Option<Value>,
}

/// How one index was reached while resolving.
struct Reach {
    handle: Arc<IndexHandle>,
    unfiltered: bool,
    filters: Vec<Value>,
}

/// Whether a wildcard may expand to `h` under `expand` (hidden indices only when asked, or
/// when both the pattern and the name start with a dot).
fn expandable(h: &IndexHandle, pattern: &str, expand: ExpandWildcards) -> bool {
    let state_ok = if h.is_closed() {
        expand.closed
    } else {
        expand.open
    };
    let hidden_ok =
        !h.is_hidden() || expand.hidden || (pattern.starts_with('.') && h.name().starts_with('.'));
    state_ok && hidden_ok
}

/// Resolves `expr` over the node's indices and aliases.
pub fn resolve(
    indices: &BTreeMap<String, Arc<IndexHandle>>,
    aliases: &AliasTable,
    expr: &str,
    opts: &IndicesOptions,
) -> Result<Vec<Target>> {
    let mut reached: Vec<Reach> = Vec::new();
    let mut reach = |h: &Arc<IndexHandle>, filter: Option<&Value>| {
        let pos = match reached.iter().position(|r| r.handle.name() == h.name()) {
            Some(p) => p,
            None => {
                reached.push(Reach {
                    handle: h.clone(),
                    unfiltered: false,
                    filters: Vec::new(),
                });
                reached.len() - 1
            }
        };
        match filter {
            None => reached[pos].unfiltered = true,
            Some(f) => reached[pos].filters.push(f.clone()),
        }
    };
    let parts: Vec<&str> = expr
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let everything = parts.is_empty() || parts == ["_all"];
    let parts = if everything { vec!["*"] } else { parts };
    let mut excluded: Vec<&str> = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if let Some(excl) = part.strip_prefix('-').filter(|_| i > 0) {
            excluded.push(excl);
            continue;
        }
        if part.contains('*') || *part == "_all" {
            let pat = if *part == "_all" { "*" } else { part };
            let mut matched = false;
            for h in indices.values() {
                if simple_match(pat, h.name()) && expandable(h, pat, opts.expand_wildcards) {
                    reach(h, None);
                    matched = true;
                }
            }
            for (alias, members) in aliases.iter() {
                if !simple_match(pat, alias) {
                    continue;
                }
                for (index, meta) in members {
                    if let Some(h) = indices.get(index)
                        && expandable(h, pat, opts.expand_wildcards)
                    {
                        reach(h, meta.filter.as_ref());
                        matched = true;
                    }
                }
            }
            if !matched && !opts.allow_no_indices && !everything {
                return Err(EngineError::index_not_found(part));
            }
            continue;
        }
        if let Some(h) = indices.get(*part) {
            if h.is_closed() && opts.forbid_closed {
                if opts.ignore_unavailable {
                    continue;
                }
                return Err(index_closed(h.name()));
            }
            reach(h, None);
        } else if let Some(members) = aliases.get(part) {
            for (index, meta) in members {
                if let Some(h) = indices.get(index) {
                    if h.is_closed() && opts.forbid_closed {
                        continue;
                    }
                    reach(h, meta.filter.as_ref());
                }
            }
        } else if !opts.ignore_unavailable {
            return Err(EngineError::index_not_found(part));
        }
    }
    let mut out: Vec<Target> = reached
        .into_iter()
        .filter(|r| {
            !excluded.iter().any(|x| {
                simple_match(x, r.handle.name())
                    || aliases.iter().any(|(alias, members)| {
                        simple_match(x, alias) && members.contains_key(r.handle.name())
                    })
            })
        })
        .map(|r| {
            let filter = if r.unfiltered {
                None
            } else {
                match r.filters.len() {
                    0 => None,
                    1 => r.filters.into_iter().next(),
                    _ => Some(json!({"bool": {"should": r.filters, "minimum_should_match": 1}})),
                }
            };
            Target {
                handle: r.handle,
                filter,
            }
        })
        .collect();
    if out.is_empty() && !opts.allow_no_indices {
        let name = if everything { "_all" } else { expr };
        return Err(EngineError::index_not_found(name));
    }
    out.shrink_to_fit();
    Ok(out)
}

/// The index that writes to `name` go to: the index itself, or the alias's write index;
/// `None` when neither exists (the caller may create the index). With `require_alias`, `name`
/// must be an alias.
pub fn write_index(
    indices: &BTreeMap<String, Arc<IndexHandle>>,
    aliases: &AliasTable,
    name: &str,
    require_alias: bool,
) -> Result<Option<Arc<IndexHandle>>> {
    if let Some(target) = aliases.write_index(name)? {
        return Ok(indices.get(target).cloned());
    }
    if require_alias {
        return Err(EngineError::new(
            ErrorCode::IndexNotFound,
            format!(
                "no such index [{name}] and [require_alias] request flag is [true] and [{name}] is not an alias"
            ),
        )
        .with_index(name)
        .with_extra("resource.type", Value::from("index_or_alias"))
        .with_extra("resource.id", Value::from(name))
        .with_extra("index_uuid", Value::from("_na_")));
    }
    Ok(indices.get(name).cloned())
}

/// The one index a single-document read of `name` goes to: the index, or an alias with exactly
/// one index (OpenSearch refuses a single-index operation on an alias of several).
pub fn single_index(
    indices: &BTreeMap<String, Arc<IndexHandle>>,
    aliases: &AliasTable,
    name: &str,
) -> Result<Arc<IndexHandle>> {
    if let Some(h) = indices.get(name) {
        return Ok(h.clone());
    }
    if let Some(members) = aliases.get(name) {
        if members.len() > 1 {
            let list: Vec<&str> = members.keys().map(String::as_str).collect();
            return Err(EngineError::illegal_argument(format!(
                "alias [{name}] has more than one index associated with it [[{}]], can't execute a single index op",
                list.join(", ")
            )));
        }
        if let Some(h) = members.keys().next().and_then(|i| indices.get(i)) {
            return Ok(h.clone());
        }
    }
    Err(EngineError::index_not_found(name))
}

/// OpenSearch's `index_closed_exception` for `index`.
pub fn index_closed(index: &str) -> EngineError {
    EngineError::new(ErrorCode::IndexClosed, "closed")
        .with_index(index)
        .with_extra("index_uuid", Value::from("_na_"))
}
