//! This gateway's part of the cluster's knowledge of scrolls: what it knows of scroll ids
//! another gateway asks about (the group each runs in, who opened it, how long it lives), and
//! forgetting ids cleared through another gateway. The asking side is
//! [`crate::backend::upstream::scroll_peers`]. An embedded node keeps its scrolls in its engine
//! and gateways never share them: it knows none and forgets nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::upstream::scrolls::ScrollEntry;
use crate::state::AppState;

/// The scroll ids a gateway asks about, or tells to forget (`_all`: every scroll).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScrollIds {
    /// The ids as the client sent them.
    pub ids: Vec<String>,
}

/// What a gateway knows of one scroll id it was asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownScroll {
    /// The id asked about.
    pub id: String,
    /// The workload group the scroll runs in (its id).
    pub group: String,
    /// Who opened it; `None` when it was opened without authentication.
    pub opened_by: Option<String>,
    /// How long it still lives, as this gateway counts its keep-alive, in milliseconds: a
    /// duration, since the two gateways' clocks do not compare.
    pub expires_in_ms: u64,
}

/// The answer to a [`ScrollIds`] question: the ids this gateway knows (the others it does
/// not).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KnownScrolls {
    /// One per id known.
    pub known: Vec<KnownScroll>,
}

impl KnownScroll {
    /// The entry and remaining life a gateway learns from this answer.
    pub fn entry(&self) -> (ScrollEntry, Duration) {
        (
            ScrollEntry {
                group: Arc::from(self.group.as_str()),
                opened_by: self.opened_by.as_deref().map(Arc::from),
            },
            Duration::from_millis(self.expires_in_ms),
        )
    }
}

/// What this node knows of the scroll ids `q` asks about.
pub(super) fn scrolls_of(st: &AppState, q: &ScrollIds) -> Value {
    let now = Instant::now();
    let known = st.upstream.as_ref().map_or_else(Vec::new, |up| {
        q.ids
            .iter()
            .filter_map(|id| {
                let (entry, remaining) = up.scrolls.tell(id, now)?;
                Some(KnownScroll {
                    id: id.clone(),
                    group: entry.group.to_string(),
                    opened_by: entry.opened_by.map(|o| o.to_string()),
                    expires_in_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
                })
            })
            .collect()
    });
    serde_json::to_value(KnownScrolls { known }).unwrap_or_default()
}

/// Forgets the scroll ids `q` names, cleared through another gateway.
pub(super) fn forget(st: &AppState, q: &ScrollIds) -> Value {
    if let Some(up) = &st.upstream {
        up.scrolls.forget(&q.ids);
    }
    serde_json::json!({"acknowledged": true})
}
