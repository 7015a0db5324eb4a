//! Which workload group a request runs in (DESIGN D5, facts §6.1 and §7.3), as one function of
//! the `workloadGroupId` header, the groups that exist, the tagging rules and the mode.
//!
//! 1. A header naming an existing group id (or `DEFAULT_WORKLOAD_GROUP`) selects it.
//! 2. A header naming no group fails open: the request runs in DEFAULT and the server warns
//!    ([`Tag::UnknownHeader`]).
//! 3. Without a header, the rules pick a group ([`match_rules`]: username beats role beats
//!    index pattern, longest prefix wins, a tie assigns nothing) unless the mode is `disabled`
//!    (OpenSearch skips its auto-tagging filter then); a rule naming a group that no longer
//!    exists tags nothing.
//! 4. Otherwise DEFAULT.

use crate::mode::WlmMode;
use crate::resources::DEFAULT_WORKLOAD_GROUP_ID;
use crate::rules::{RequestAttributes, Rule, match_rules};

/// Where a request landed, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag<'a> {
    /// The header named this existing group (possibly `DEFAULT_WORKLOAD_GROUP`).
    Header(&'a str),
    /// The header named no existing group: the request runs in DEFAULT.
    UnknownHeader(&'a str),
    /// A tagging rule picked this existing group.
    Rule(&'a str),
    /// Nothing selected a group: DEFAULT.
    Default,
}

impl<'a> Tag<'a> {
    /// The id of the group the request runs in.
    pub fn group_id(&self) -> &'a str {
        match self {
            Tag::Header(id) | Tag::Rule(id) => id,
            Tag::UnknownHeader(_) | Tag::Default => DEFAULT_WORKLOAD_GROUP_ID,
        }
    }
}

/// Tags a request (see the module docs): `header` is its `workloadGroupId` header, `exists`
/// says whether a group id (DEFAULT excluded) exists, `attrs` are what the rules match.
pub fn tag<'a>(
    header: Option<&'a str>,
    exists: impl Fn(&str) -> bool,
    rules: &'a [Rule],
    attrs: &RequestAttributes<'_>,
    mode: WlmMode,
) -> Tag<'a> {
    if let Some(id) = header {
        return if id == DEFAULT_WORKLOAD_GROUP_ID || exists(id) {
            Tag::Header(id)
        } else {
            Tag::UnknownHeader(id)
        };
    }
    if mode != WlmMode::Disabled
        && let Some(id) = match_rules(rules, attrs)
        && exists(id)
    {
        return Tag::Rule(id);
    }
    Tag::Default
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, group: &str, pattern: &str) -> Rule {
        Rule {
            id: id.into(),
            description: String::new(),
            index_pattern: vec![pattern.into()],
            username: Vec::new(),
            role: Vec::new(),
            workload_group: group.into(),
            updated_at: 1,
        }
    }

    fn attrs(indices: &[String]) -> RequestAttributes<'_> {
        RequestAttributes {
            indices,
            username: None,
            roles: &[],
        }
    }

    #[test]
    fn test_header_beats_rules_and_an_unknown_header_fails_open_to_default() {
        let rules = [rule("r", "g2", "logs*")];
        let idx = ["logs-1".to_string()];
        let exists = |id: &str| id == "g1" || id == "g2";
        let t = tag(Some("g1"), exists, &rules, &attrs(&idx), WlmMode::Enabled);
        assert_eq!(t, Tag::Header("g1"));
        let t = tag(Some("nope"), exists, &rules, &attrs(&idx), WlmMode::Enabled);
        assert_eq!(t, Tag::UnknownHeader("nope"));
        assert_eq!(t.group_id(), DEFAULT_WORKLOAD_GROUP_ID);
        let t = tag(
            Some(DEFAULT_WORKLOAD_GROUP_ID),
            exists,
            &rules,
            &attrs(&idx),
            WlmMode::Enabled,
        );
        assert_eq!(t, Tag::Header(DEFAULT_WORKLOAD_GROUP_ID));
    }

    #[test]
    fn test_rules_tag_unless_disabled_or_their_group_is_gone() {
        let rules = [rule("r", "g2", "logs*")];
        let idx = ["logs-1".to_string()];
        let exists = |id: &str| id == "g2";
        assert_eq!(
            tag(None, exists, &rules, &attrs(&idx), WlmMode::MonitorOnly),
            Tag::Rule("g2")
        );
        assert_eq!(
            tag(None, exists, &rules, &attrs(&idx), WlmMode::Disabled),
            Tag::Default
        );
        assert_eq!(
            tag(None, |_| false, &rules, &attrs(&idx), WlmMode::Enabled),
            Tag::Default
        );
        let other = ["metrics".to_string()];
        assert_eq!(
            tag(None, exists, &rules, &attrs(&other), WlmMode::Enabled),
            Tag::Default
        );
    }
}
