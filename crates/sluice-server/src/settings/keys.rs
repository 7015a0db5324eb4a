//! The keys of the dynamic cluster settings, as users write them (defined in
//! [`sluice_wire::keys`], shared with the group settings bags), and the key conventions of
//! updates.

pub use sluice_wire::keys::{
    SEARCH_CANCEL_AFTER_TIME_INTERVAL, SEARCH_DEFAULT_KEEP_ALIVE, SEARCH_MAX_BUCKETS,
    SEARCH_MAX_KEEP_ALIVE, SEARCH_MAX_OPEN_SCROLL_CONTEXT, WLM_AUTOTAGGING_MAX_RULES,
    WLM_CPU_CANCELLATION_THRESHOLD, WLM_CPU_REJECTION_THRESHOLD, WLM_DURESS_STREAK,
    WLM_ENFORCEMENT_INTERVAL, WLM_ESTIMATE_UNMEASURED_TASKS, WLM_MAX_GROUP_COUNT,
    WLM_MEMORY_CANCELLATION_THRESHOLD, WLM_MEMORY_REJECTION_THRESHOLD, WLM_MODE,
    WLM_SHARED_ACQUIRE_TIMEOUT, WLM_USAGE_REFRESH_INTERVAL,
};

/// OpenSearch's prefix for settings it no longer recognises after an upgrade; a reset of
/// such a key (`"archived.x": null`) is accepted so that old clean-up scripts keep working.
pub const ARCHIVED_PREFIX: &str = "archived.";
