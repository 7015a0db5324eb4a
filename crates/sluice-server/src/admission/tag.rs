//! Tagging as admission runs it: the decision is [`sluice_core::tagging::tag`]'s over the
//! node's current view; this module carries out a header naming no group (DESIGN D5): a
//! `Warning` on the response, a WARN log and DEFAULT's `total_unknown_group_tags`.

use std::sync::Arc;

use sluice_core::RequestAttributes;
use sluice_core::authz::Action;
use sluice_core::tagging::{self, Tag};
use sluice_wire::WORKLOAD_GROUP_ID_HEADER as GROUP_HEADER;

use crate::error::ApiResult;
use crate::http::RequestMeta;
use crate::state::AppState;
use crate::workload::{DEFAULT_GROUP_ID, GroupEntry};

/// The group a request over `indices` runs in: its `workloadGroupId` header, else the tagging
/// rules over its indices and principal, else DEFAULT. An empty header, or one not visible
/// ASCII, is a 400 (one repeated with different values never comes here: the request was
/// refused whole, `crate::http::meta::read_single_valued`).
///
/// With authorization on, the header is the user's to send only with the permission to choose
/// a group ([`Action::WlmGroupChoose`]; admin roles and `cluster_all` have it): without it the
/// header is ignored, with a `Warning`, and the rules decide. Otherwise a tenant could run
/// outside the group its rules give it (escaping a per-user limit) or fill another tenant's
/// group, whose id every 429 names.
pub fn tag(st: &AppState, meta: &RequestMeta, indices: &[String]) -> ApiResult<Arc<GroupEntry>> {
    let mut header = meta.group_header()?;
    if let (Some(_), Some(perms), Some(who)) = (header, &meta.permissions, &meta.principal)
        && !perms.allows_cluster(Action::WlmGroupChoose)
    {
        header = None;
        meta.warnings.add(format!(
            "the [{GROUP_HEADER}] header was ignored: user [{}] may not choose a workload group \
             ([{}]); the request was tagged by the rules",
            who.username,
            Action::WlmGroupChoose.name()
        ));
    }
    let principal = meta.principal.as_deref();
    let attrs = RequestAttributes {
        indices,
        username: principal.map(|p| &*p.username),
        roles: principal.map_or(&[], |p| p.roles.as_slice()),
    };
    let entry = st.workload.with_view(|view| {
        // The entry of the group `tag` found, kept from its one lookup (it asks at most once:
        // the header's group or the rules' first match), so the decided group is not looked
        // up again.
        let found = std::cell::Cell::new(None);
        let decided = tagging::tag(
            header,
            |id| {
                found.set(view.groups.get(id));
                found.get().is_some()
            },
            &view.rules,
            &attrs,
            st.cluster_settings.wlm_mode(),
        );
        if let Tag::UnknownHeader(id) = decided {
            st.workload
                .default_entry()
                .stats
                .total_unknown_group_tags
                .inc();
            st.decisions.unknown_group(id);
            meta.warnings.add(format!(
                "workload group [{}] does not exist; the request ran in [{DEFAULT_GROUP_ID}]",
                crate::logging::shown_id(id)
            ));
        }
        match decided {
            Tag::Header(_) | Tag::Rule(_) => found.get().cloned(),
            Tag::UnknownHeader(_) | Tag::Default => None,
        }
    });
    Ok(entry.unwrap_or_else(|| st.workload.default_entry().clone()))
}
