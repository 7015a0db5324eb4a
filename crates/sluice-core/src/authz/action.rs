//! The actions sluice authorizes: every request maps to one [`Action`], named as OpenSearch
//! names its transport actions, and an [`ActionSet`] is a set of them as one machine word.

/// What an action applies to, which decides the permissions that grant it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// Granted by `cluster_permissions`.
    Cluster,
    /// Granted by `index_permissions` for the indices the request names.
    Index,
}

macro_rules! actions {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $kind:ident;)*) => {
        /// An action sluice authorizes, named as OpenSearch names it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Action {
            $($(#[$doc])* $variant,)*
        }

        impl Action {
            /// Every action, in declaration order (an action's position is its bit).
            pub const ALL: &'static [Action] = &[$(Action::$variant,)*];

            /// The action's name (`indices:data/read/search`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Action::$variant => $name,)*
                }
            }

            /// Whether a cluster or an index permission grants the action.
            pub const fn kind(self) -> ActionKind {
                match self {
                    $(Action::$variant => ActionKind::$kind,)*
                }
            }
        }
    };
}

actions! {
    /// `GET /`.
    ClusterMain = "cluster:monitor/main", Cluster;
    /// `_cluster/health`.
    ClusterHealth = "cluster:monitor/health", Cluster;
    /// `_nodes/stats`.
    NodesStats = "cluster:monitor/nodes/stats", Cluster;
    /// `GET _nodes`, `_nodes/{nodes}`, `_cat/nodes`.
    NodesInfo = "cluster:monitor/nodes/info", Cluster;
    /// `GET _cluster/settings`.
    ClusterSettingsGet = "cluster:monitor/settings", Cluster;
    /// `PUT _cluster/settings`.
    ClusterSettingsUpdate = "cluster:admin/settings/update", Cluster;
    /// `GET _tasks`: granted, every task is listed; without it, a user's own tasks only.
    TasksList = "cluster:monitor/tasks/lists", Cluster;
    /// `GET _tasks/{id}`: granted, any task; without it, a user's own tasks only.
    TaskGet = "cluster:monitor/task/get", Cluster;
    /// `_tasks/_cancel`: granted, any task; without it, a user's own tasks only.
    TasksCancel = "cluster:admin/tasks/cancel", Cluster;
    /// `GET _wlm/workload_group`.
    WlmGroupGet = "cluster:admin/opensearch/wlm/workload_group/_get", Cluster;
    /// Creating a workload group.
    WlmGroupCreate = "cluster:admin/opensearch/wlm/workload_group/_create", Cluster;
    /// Updating a workload group.
    WlmGroupUpdate = "cluster:admin/opensearch/wlm/workload_group/_update", Cluster;
    /// Deleting a workload group.
    WlmGroupDelete = "cluster:admin/opensearch/wlm/workload_group/_delete", Cluster;
    /// `_wlm/stats` and `_list/wlm_stats`: per-group figures.
    WlmStats = "cluster:monitor/wlm/stats", Cluster;
    /// `_wlm/stats?include=buckets`: bucket detail, which names users (admin only).
    WlmStatsBuckets = "cluster:admin/opensearch/wlm/stats/buckets", Cluster;
    /// `GET _rules/workload_group`.
    RuleGet = "cluster:admin/opensearch/rule/workload_group/_get", Cluster;
    /// Creating a tagging rule.
    RuleCreate = "cluster:admin/opensearch/rule/workload_group/_create", Cluster;
    /// Updating a tagging rule.
    RuleUpdate = "cluster:admin/opensearch/rule/workload_group/_update", Cluster;
    /// Deleting a tagging rule.
    RuleDelete = "cluster:admin/opensearch/rule/workload_group/_delete", Cluster;
    /// Continuing or clearing scrolls another user opened, and clearing `_all` scrolls;
    /// without it, a user's own scrolls only.
    ScrollsOfOthers = "cluster:admin/sluice/scroll/others", Cluster;
    /// Choosing a request's workload group with the `workloadGroupId` header; without it,
    /// the header is ignored (with a warning) and the rules tag the request.
    WlmGroupChoose = "cluster:admin/sluice/workload_group/choose", Cluster;
    /// `_prometheus/metrics`.
    Metrics = "cluster:monitor/prometheus/metrics", Cluster;
    /// The dashboard: its page, script, style sheet and data (`/_sluice/dashboard...`).
    Dashboard = "cluster:monitor/sluice/dashboard", Cluster;
    /// A request sluice does not classify: only a grant of every cluster action allows it.
    Unclassified = "cluster:admin/sluice/unclassified", Cluster;
    /// `_search`, `_count`, `_cat/count`, each `_msearch` item.
    Search = "indices:data/read/search", Index;
    /// `GET _doc`, `_source`.
    Get = "indices:data/read/get", Index;
    /// Each `_mget` item.
    Mget = "indices:data/read/mget", Index;
    /// Indexing a document (`PUT _doc`, `_create`, a bulk `index`/`create` item).
    WriteIndex = "indices:data/write/index", Index;
    /// Deleting a document (also a bulk `delete` item).
    WriteDelete = "indices:data/write/delete", Index;
    /// `_update` (also a bulk `update` item).
    WriteUpdate = "indices:data/write/update", Index;
    /// `_delete_by_query`.
    DeleteByQuery = "indices:data/write/delete/byquery", Index;
    /// `_update_by_query`.
    UpdateByQuery = "indices:data/write/update/byquery", Index;
    /// `PUT /{index}`.
    IndexCreate = "indices:admin/create", Index;
    /// `DELETE /{index}`.
    IndexDelete = "indices:admin/delete", Index;
    /// `GET /{index}`, `HEAD /{index}`.
    IndexGet = "indices:admin/get", Index;
    /// `GET _mapping`.
    MappingGet = "indices:admin/mappings/get", Index;
    /// `PUT _mapping`.
    MappingPut = "indices:admin/mapping/put", Index;
    /// `GET _settings`.
    SettingsGet = "indices:monitor/settings/get", Index;
    /// `PUT _settings`.
    SettingsUpdate = "indices:admin/settings/update", Index;
    /// `_refresh`.
    Refresh = "indices:admin/refresh", Index;
    /// `_flush`.
    Flush = "indices:admin/flush", Index;
    /// `PUT _block`.
    BlockAdd = "indices:admin/block/add", Index;
    /// `POST _close`.
    IndexClose = "indices:admin/close", Index;
    /// `POST _open`.
    IndexOpen = "indices:admin/open", Index;
    /// `POST _forcemerge`.
    ForceMerge = "indices:admin/forcemerge", Index;
    /// `_stats`, `_cat/indices`.
    IndicesStats = "indices:monitor/stats", Index;
    /// Reading aliases.
    AliasesGet = "indices:admin/aliases/get", Index;
    /// Changing aliases.
    Aliases = "indices:admin/aliases", Index;
    /// `_search/template`, each `_msearch/template` item (a gateway forwards them; the
    /// embedded engine has no templates).
    SearchTemplate = "indices:data/read/search/template", Index;
}

/// A set of [`Action`]s, one bit each.
///
/// # Invariants
/// - Only the low `Action::ALL.len()` bits are ever set (checked at compile time: the set is
///   a `u64` and there are fewer than 64 actions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ActionSet(u64);

const _: () = assert!(Action::ALL.len() <= 64, "ActionSet is one u64");

impl ActionSet {
    /// No action.
    pub const EMPTY: ActionSet = ActionSet(0);

    /// The set of one action.
    pub const fn of(action: Action) -> ActionSet {
        ActionSet(1 << action as u8)
    }

    /// Whether `action` is in the set.
    pub const fn contains(self, action: Action) -> bool {
        self.0 & (1 << action as u8) != 0
    }

    /// The union of two sets.
    pub const fn union(self, other: ActionSet) -> ActionSet {
        ActionSet(self.0 | other.0)
    }

    /// Whether no action is in the set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The actions whose names match an OpenSearch action pattern (`*` any run, `?` one
    /// character), restricted to `kind`.
    pub fn matching(pattern: &str, kind: ActionKind) -> ActionSet {
        Action::ALL
            .iter()
            .filter(|a| a.kind() == kind && super::pattern::wildcard_match(pattern, a.name()))
            .fold(ActionSet::EMPTY, |s, a| s.union(ActionSet::of(*a)))
    }

    /// The actions in the set.
    pub fn iter(self) -> impl Iterator<Item = Action> {
        Action::ALL
            .iter()
            .copied()
            .filter(move |a| self.contains(*a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_action_names_are_unique_and_kinds_follow_the_prefix() {
        let mut names: Vec<&str> = Action::ALL.iter().map(|a| a.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Action::ALL.len());
        for a in Action::ALL {
            let cluster = a.name().starts_with("cluster:");
            assert_eq!(cluster, a.kind() == ActionKind::Cluster, "{}", a.name());
        }
    }

    #[test]
    fn test_matching_expands_wildcards_within_a_kind() {
        let read = ActionSet::matching("indices:data/read*", ActionKind::Index);
        assert!(read.contains(Action::Search) && read.contains(Action::Get));
        assert!(!read.contains(Action::WriteIndex));
        let all = ActionSet::matching("*", ActionKind::Cluster);
        assert!(all.contains(Action::Unclassified) && !all.contains(Action::Search));
        assert!(ActionSet::matching("indices:nope", ActionKind::Index).is_empty());
    }
}
