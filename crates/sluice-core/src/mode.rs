//! The node's workload-management mode, `wlm.workload_group.mode` (DESIGN D3).

/// What workload management does on this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WlmMode {
    /// Throttles, queues, rejects and cancels.
    Enabled,
    /// Evaluates every limit but only logs and counts what it would have done (the default).
    #[default]
    MonitorOnly,
    /// Evaluates nothing; requests are still tagged and counted in stats.
    Disabled,
}

impl WlmMode {
    /// The setting value: `enabled`, `monitor_only` or `disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            WlmMode::Enabled => "enabled",
            WlmMode::MonitorOnly => "monitor_only",
            WlmMode::Disabled => "disabled",
        }
    }

    /// Parses a setting value; `None` for anything else.
    pub fn parse(s: &str) -> Option<WlmMode> {
        match s {
            "enabled" => Some(WlmMode::Enabled),
            "monitor_only" => Some(WlmMode::MonitorOnly),
            "disabled" => Some(WlmMode::Disabled),
            _ => None,
        }
    }

    /// Whether the enforcement loop runs at all (builds usage views, tracks duress, selects
    /// tasks); false only for `disabled` (facts §6.3).
    pub fn runs_enforcement_loop(self) -> bool {
        !matches!(self, WlmMode::Disabled)
    }

    /// Whether limits really act — tasks cancelled, requests rejected or throttled; in
    /// `monitor_only` they are only logged and counted (facts §6.6).
    pub fn acts(self) -> bool {
        matches!(self, WlmMode::Enabled)
    }

    /// The name OpenSearch prints in messages (`ENABLED`, `MONITOR_ONLY`, `DISABLED`).
    pub fn enum_name(self) -> &'static str {
        match self {
            WlmMode::Enabled => "ENABLED",
            WlmMode::MonitorOnly => "MONITOR_ONLY",
            WlmMode::Disabled => "DISABLED",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_mode() {
        for m in [WlmMode::Enabled, WlmMode::MonitorOnly, WlmMode::Disabled] {
            assert_eq!(WlmMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(WlmMode::parse("Enabled"), None);
    }
}
