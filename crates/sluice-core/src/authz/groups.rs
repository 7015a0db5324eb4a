//! Action groups, as the OpenSearch security plugin names them (its `static_action_groups.yml`),
//! and the expansion of one `allowed_actions` / `cluster_permissions` entry into an
//! [`ActionSet`].

use super::action::{ActionKind, ActionSet};

/// One action group: its name, the kind of permission it belongs in, and the action patterns
/// it stands for (OpenSearch's definitions, which sluice's action names follow).
struct ActionGroup {
    name: &'static str,
    /// `None`: both kinds (`unlimited`, the composite groups).
    kind: Option<ActionKind>,
    patterns: &'static [&'static str],
}

/// The action groups sluice knows. The composite groups (`cluster_composite_ops*`) name the
/// container actions (`_bulk`, `_msearch`, `_mget`, scroll) that OpenSearch checks as cluster
/// actions; sluice authorizes those requests per item instead, so these groups are accepted
/// (roles written for OpenSearch list them) and grant nothing more.
const GROUPS: &[ActionGroup] = &[
    ActionGroup {
        name: "unlimited",
        kind: None,
        patterns: &["*"],
    },
    ActionGroup {
        name: "indices_all",
        kind: Some(ActionKind::Index),
        patterns: &["indices:*"],
    },
    ActionGroup {
        name: "indices_monitor",
        kind: Some(ActionKind::Index),
        patterns: &["indices:monitor/*"],
    },
    ActionGroup {
        name: "manage",
        kind: Some(ActionKind::Index),
        patterns: &["indices:monitor/*", "indices:admin/*"],
    },
    ActionGroup {
        name: "create_index",
        kind: Some(ActionKind::Index),
        patterns: &["indices:admin/create", "indices:admin/mapping/put"],
    },
    ActionGroup {
        name: "manage_aliases",
        kind: Some(ActionKind::Index),
        patterns: &["indices:admin/aliases*"],
    },
    ActionGroup {
        name: "data_access",
        kind: Some(ActionKind::Index),
        patterns: &["indices:data/*", "indices:admin/mapping/put"],
    },
    ActionGroup {
        name: "crud",
        kind: Some(ActionKind::Index),
        patterns: &[
            "indices:data/read*",
            "indices:data/write*",
            "indices:admin/mapping/put",
        ],
    },
    ActionGroup {
        name: "read",
        kind: Some(ActionKind::Index),
        patterns: &["indices:data/read*"],
    },
    ActionGroup {
        name: "search",
        kind: Some(ActionKind::Index),
        patterns: &["indices:data/read/search*", "indices:data/read/msearch*"],
    },
    ActionGroup {
        name: "get",
        kind: Some(ActionKind::Index),
        patterns: &["indices:data/read/get*", "indices:data/read/mget*"],
    },
    ActionGroup {
        name: "write",
        kind: Some(ActionKind::Index),
        patterns: &["indices:data/write*", "indices:admin/mapping/put"],
    },
    ActionGroup {
        name: "index",
        kind: Some(ActionKind::Index),
        patterns: &[
            "indices:data/write/index*",
            "indices:data/write/update*",
            "indices:admin/mapping/put",
        ],
    },
    ActionGroup {
        name: "delete",
        kind: Some(ActionKind::Index),
        patterns: &["indices:data/write/delete*"],
    },
    ActionGroup {
        name: "cluster_all",
        kind: Some(ActionKind::Cluster),
        patterns: &["cluster:*"],
    },
    ActionGroup {
        name: "cluster_monitor",
        kind: Some(ActionKind::Cluster),
        patterns: &["cluster:monitor/*"],
    },
    ActionGroup {
        name: "cluster_composite_ops",
        kind: None,
        patterns: &[],
    },
    ActionGroup {
        name: "cluster_composite_ops_ro",
        kind: None,
        patterns: &[],
    },
];

/// The names of the known action groups, for messages.
pub fn group_names() -> impl Iterator<Item = &'static str> {
    GROUPS.iter().map(|g| g.name)
}

/// Why an entry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryError {
    /// Neither an action group sluice knows nor an action name (which contains `:`).
    UnknownGroup,
    /// An action group of the other kind (`read` under `cluster_permissions`).
    WrongKind(ActionKind),
    /// Empty or blank.
    Empty,
}

/// Expands an `allowed_actions` (kind `Index`) or `cluster_permissions` (kind `Cluster`)
/// entry: an action group name, or an action name pattern (`indices:data/read/*`, `*`).
pub fn expand(entry: &str, kind: ActionKind) -> Result<ActionSet, EntryError> {
    let entry = entry.trim();
    if entry.is_empty() {
        return Err(EntryError::Empty);
    }
    if entry == "*" || entry.contains(':') {
        return Ok(ActionSet::matching(entry, kind));
    }
    let group = GROUPS
        .iter()
        .find(|g| g.name == entry)
        .ok_or(EntryError::UnknownGroup)?;
    if let Some(k) = group.kind
        && k != kind
    {
        return Err(EntryError::WrongKind(k));
    }
    Ok(group.patterns.iter().fold(ActionSet::EMPTY, |s, p| {
        s.union(ActionSet::matching(p, kind))
    }))
}

#[cfg(test)]
mod tests {
    use super::super::action::Action;
    use super::*;

    #[test]
    fn test_groups_expand_as_opensearch_defines_them() {
        let read = expand("read", ActionKind::Index).unwrap();
        assert!(read.contains(Action::Search) && read.contains(Action::Mget));
        assert!(!read.contains(Action::WriteIndex));
        // Templates are searches: `read` and `search` grant them, as in OpenSearch, but the
        // bare `indices:data/read/search` does not (`…/search/template` is another action).
        assert!(read.contains(Action::SearchTemplate));
        let search = expand("search", ActionKind::Index).unwrap();
        assert!(search.contains(Action::SearchTemplate) && !search.contains(Action::Get));
        let bare = expand("indices:data/read/search", ActionKind::Index).unwrap();
        assert!(!bare.contains(Action::SearchTemplate));
        let crud = expand("crud", ActionKind::Index).unwrap();
        assert!(crud.contains(Action::WriteDelete) && crud.contains(Action::Get));
        assert!(!crud.contains(Action::IndexCreate) && !crud.contains(Action::IndexDelete));
        let delete = expand("delete", ActionKind::Index).unwrap();
        // OpenSearch's `delete` is `indices:data/write/delete*`: a delete by query too.
        assert_eq!(
            delete,
            ActionSet::of(Action::WriteDelete).union(ActionSet::of(Action::DeleteByQuery))
        );
        let create = expand("create_index", ActionKind::Index).unwrap();
        assert!(create.contains(Action::IndexCreate) && !create.contains(Action::IndexDelete));
        let manage = expand("manage", ActionKind::Index).unwrap();
        assert!(manage.contains(Action::IndexDelete) && !manage.contains(Action::Search));
        let monitor = expand("cluster_monitor", ActionKind::Cluster).unwrap();
        assert!(monitor.contains(Action::WlmStats) && monitor.contains(Action::TasksList));
        assert!(!monitor.contains(Action::TasksCancel));
        assert!(!monitor.contains(Action::WlmStatsBuckets));
        let all = expand("cluster_all", ActionKind::Cluster).unwrap();
        assert!(all.contains(Action::Unclassified));
    }

    #[test]
    fn test_bad_entries_are_refused() {
        assert_eq!(
            expand("reed", ActionKind::Index),
            Err(EntryError::UnknownGroup)
        );
        assert_eq!(
            expand("read", ActionKind::Cluster),
            Err(EntryError::WrongKind(ActionKind::Index))
        );
        assert_eq!(
            expand("cluster_monitor", ActionKind::Index),
            Err(EntryError::WrongKind(ActionKind::Cluster))
        );
        assert_eq!(expand(" ", ActionKind::Index), Err(EntryError::Empty));
        assert_eq!(
            expand("indices:data/read/search", ActionKind::Index),
            Ok(ActionSet::of(Action::Search))
        );
    }
}
