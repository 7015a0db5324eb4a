//! The admission decision: reject a request of a group whose last recorded usage is over its
//! limit × the node-level rejection threshold (facts §6.2, DESIGN §3).
//!
//! Rules, in order (facts §6.2 unless noted):
//! 1. `disabled`: admit, nothing evaluated (facts §6.6).
//! 2. DEFAULT_WORKLOAD_GROUP: admit (facts §6.1, DESIGN D5).
//! 3. A `soft` group while the node is not in duress: admit.
//! 4. For cpu then memory, each resource the group limits: breach when
//!    `limit × rejection threshold < last usage` (strict: usage exactly at the threshold is
//!    admitted). The first breaching resource is reported; the other is not checked.
//! 5. A breach rejects only when the mode is `enabled` and the group is not `monitor`;
//!    otherwise it is a [`Admission::WouldReject`] for the server to log and count.
//!
//! Rule 5 departs from OpenSearch for `monitor` groups: OpenSearch rejects them (facts §6.2
//! item 5) though its own docs say monitor only observes; sluice's model (DESIGN §3, the
//! `ResiliencyMode::Monitor` docs) never rejects a monitor group. OpenSearch returns early in
//! `monitor_only` without evaluating; sluice evaluates so that `monitor_only` can report what
//! it would have rejected (DESIGN D3).
//!
//! The decision allocates nothing; [`Rejection::message`] builds the text when needed.

use super::{
    GroupPolicy, NodeThresholds, ResourceUsage, WlmMode, java_double, mode_enum_name,
    resource_enum_name,
};
use crate::group::{ResiliencyMode, ResourceType};

/// The outcome of the admission check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission<'a> {
    /// Within its share (or not enforceable): run the request.
    Admit,
    /// Over its share, but the mode only observes (`monitor_only`, or a `monitor` group):
    /// run the request, log and count the breach.
    WouldReject(Rejection<'a>),
    /// Over its share: fail the request with HTTP 429 and [`Rejection::message`].
    Reject(Rejection<'a>),
}

impl<'a> Admission<'a> {
    /// Returns whether the request must be failed.
    pub fn is_rejected(&self) -> bool {
        matches!(self, Admission::Reject(_))
    }

    /// Returns the breach behind a rejection or would-be rejection.
    pub fn breach(&self) -> Option<&Rejection<'a>> {
        match self {
            Admission::Admit => None,
            Admission::WouldReject(r) | Admission::Reject(r) => Some(r),
        }
    }
}

/// Why a group is over its admission share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rejection<'a> {
    /// The group's `_id`.
    pub group_id: &'a str,
    /// The group's resiliency mode.
    pub resiliency_mode: ResiliencyMode,
    /// The first breaching resource (cpu before memory).
    pub resource: ResourceType,
    /// The usage compared: the group's last recorded usage of it, or that plus its unmeasured
    /// tasks' estimate ([`super::unmeasured`]) when the server projects it.
    pub usage: f64,
    /// The group's configured limit of it.
    pub limit: f64,
    /// `limit × node rejection threshold`, which `usage` exceeds.
    pub threshold: f64,
}

impl Rejection<'_> {
    /// Returns OpenSearch's rejection text (facts §6.2 item 7), including its trailing space:
    /// `WorkloadGroup <id> is already contended. CPU limit is breaching for workload group
    /// <id>, <threshold> < <usage>, wlm mode is ENFORCED. `
    pub fn message(&self) -> String {
        format!(
            "WorkloadGroup {id} is already contended. {res} limit is breaching for workload \
             group {id}, {threshold} < {usage}, wlm mode is {mode}. ",
            id = self.group_id,
            res = resource_enum_name(self.resource),
            threshold = java_double(self.threshold),
            usage = java_double(self.usage),
            mode = mode_enum_name(self.resiliency_mode),
        )
    }
}

/// Decides whether a request of `group` is admitted, given the group's last recorded usage
/// (from the enforcement loop, stale by up to one interval) and whether the node is in duress.
///
/// See the module docs for the rules. Never panics; NaN usage or thresholds never breach.
pub fn check_rejection<'a>(
    mode: WlmMode,
    group: &GroupPolicy<'a>,
    last_usage: ResourceUsage,
    thresholds: &NodeThresholds,
    node_in_duress: bool,
) -> Admission<'a> {
    if mode == WlmMode::Disabled || group.is_default() {
        return Admission::Admit;
    }
    if group.resiliency_mode == ResiliencyMode::Soft && !node_in_duress {
        return Admission::Admit;
    }
    let Some(breach) = first_breach(group, last_usage, thresholds) else {
        return Admission::Admit;
    };
    if mode.acts() && group.resiliency_mode != ResiliencyMode::Monitor {
        Admission::Reject(breach)
    } else {
        Admission::WouldReject(breach)
    }
}

fn first_breach<'a>(
    group: &GroupPolicy<'a>,
    last_usage: ResourceUsage,
    thresholds: &NodeThresholds,
) -> Option<Rejection<'a>> {
    ResourceType::ALL.into_iter().find_map(|resource| {
        let limit = group.resource_limits.get(resource)?;
        let threshold = limit * thresholds.rejection(resource);
        let usage = last_usage.get(resource);
        (threshold < usage).then_some(Rejection {
            group_id: group.id,
            resiliency_mode: group.resiliency_mode,
            resource,
            usage,
            limit,
            threshold,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::ResourceLimits;

    const TH: NodeThresholds = NodeThresholds {
        cpu_rejection: 0.5,
        cpu_cancellation: 0.9,
        memory_rejection: 0.5,
        memory_cancellation: 0.9,
    };

    fn group(mode: ResiliencyMode) -> GroupPolicy<'static> {
        // Thresholds 0.25 (cpu) and 0.125 (memory): exact in binary, so "at" is exact.
        GroupPolicy::new(
            "g1",
            mode,
            ResourceLimits {
                cpu: Some(0.5),
                memory: Some(0.25),
            },
        )
    }

    fn usage(cpu: f64, memory: f64) -> ResourceUsage {
        ResourceUsage { cpu, memory }
    }

    fn check(
        mode: WlmMode,
        g: ResiliencyMode,
        u: ResourceUsage,
        duress: bool,
    ) -> Admission<'static> {
        check_rejection(mode, &group(g), u, &TH, duress)
    }

    #[test]
    fn test_enforced_rejects_only_strictly_above_threshold() {
        let e = ResiliencyMode::Enforced;
        assert_eq!(
            check(WlmMode::Enabled, e, usage(0.2499, 0.0), false),
            Admission::Admit
        );
        assert_eq!(
            check(WlmMode::Enabled, e, usage(0.25, 0.0), false),
            Admission::Admit
        );
        let a = check(WlmMode::Enabled, e, usage(0.2501, 0.0), false);
        assert!(a.is_rejected());
        let r = a.breach().unwrap();
        assert_eq!(
            (r.resource, r.threshold, r.limit),
            (ResourceType::Cpu, 0.25, 0.5)
        );
        assert_eq!(
            check(WlmMode::Enabled, e, usage(0.0, 0.125), false),
            Admission::Admit
        );
        let m = check(WlmMode::Enabled, e, usage(0.0, 0.126), false);
        assert_eq!(m.breach().unwrap().resource, ResourceType::Memory);
    }

    #[test]
    fn test_cpu_reported_first_when_both_breach() {
        let a = check(
            WlmMode::Enabled,
            ResiliencyMode::Enforced,
            usage(0.9, 0.9),
            false,
        );
        assert_eq!(a.breach().unwrap().resource, ResourceType::Cpu);
    }

    #[test]
    fn test_unlimited_resource_never_breaches() {
        let g = GroupPolicy::new(
            "g1",
            ResiliencyMode::Enforced,
            ResourceLimits {
                cpu: None,
                memory: Some(0.25),
            },
        );
        let a = check_rejection(WlmMode::Enabled, &g, usage(1.0, 0.0), &TH, true);
        assert_eq!(a, Admission::Admit);
    }

    #[test]
    fn test_soft_rejected_only_while_node_in_duress() {
        let s = ResiliencyMode::Soft;
        assert_eq!(
            check(WlmMode::Enabled, s, usage(0.9, 0.9), false),
            Admission::Admit
        );
        assert!(check(WlmMode::Enabled, s, usage(0.9, 0.9), true).is_rejected());
        assert_eq!(
            check(WlmMode::Enabled, s, usage(0.1, 0.1), true),
            Admission::Admit
        );
    }

    #[test]
    fn test_monitor_group_never_rejected_but_reports_would_reject() {
        let m = ResiliencyMode::Monitor;
        let a = check(WlmMode::Enabled, m, usage(0.9, 0.0), true);
        assert!(matches!(a, Admission::WouldReject(_)), "{a:?}");
        assert!(!a.is_rejected());
        assert_eq!(
            check(WlmMode::Enabled, m, usage(0.1, 0.0), true),
            Admission::Admit
        );
    }

    #[test]
    fn test_default_group_always_admitted() {
        let mut d = GroupPolicy::default_group();
        // Even if someone gave DEFAULT limits and an enforced mode.
        d.resiliency_mode = ResiliencyMode::Enforced;
        d.resource_limits.cpu = Some(0.1);
        for mode in [WlmMode::Enabled, WlmMode::MonitorOnly, WlmMode::Disabled] {
            assert_eq!(
                check_rejection(mode, &d, usage(1.0, 1.0), &TH, true),
                Admission::Admit
            );
        }
    }

    #[test]
    fn test_cluster_modes_gate_rejection() {
        let e = ResiliencyMode::Enforced;
        let over = usage(0.9, 0.0);
        assert!(check(WlmMode::Enabled, e, over, false).is_rejected());
        assert!(matches!(
            check(WlmMode::MonitorOnly, e, over, false),
            Admission::WouldReject(_)
        ));
        assert_eq!(check(WlmMode::Disabled, e, over, true), Admission::Admit);
        // monitor_only keeps the soft/duress rule: no would-reject for a calm node.
        let s = ResiliencyMode::Soft;
        assert_eq!(
            check(WlmMode::MonitorOnly, s, over, false),
            Admission::Admit
        );
        assert!(matches!(
            check(WlmMode::MonitorOnly, s, over, true),
            Admission::WouldReject(_)
        ));
    }

    #[test]
    fn test_nan_usage_is_admitted() {
        let a = check(
            WlmMode::Enabled,
            ResiliencyMode::Enforced,
            usage(f64::NAN, f64::NAN),
            true,
        );
        assert_eq!(a, Admission::Admit);
    }

    #[test]
    fn test_rejection_message_matches_opensearch_text() {
        let g = GroupPolicy::new(
            "abc",
            ResiliencyMode::Enforced,
            ResourceLimits {
                cpu: Some(0.2),
                memory: None,
            },
        );
        let a = check_rejection(
            WlmMode::Enabled,
            &g,
            usage(0.5, 0.0),
            &NodeThresholds::default(),
            false,
        );
        assert_eq!(
            a.breach().unwrap().message(),
            "WorkloadGroup abc is already contended. CPU limit is breaching for workload group \
             abc, 0.16000000000000003 < 0.5, wlm mode is ENFORCED. "
        );
    }
}
