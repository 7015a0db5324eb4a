//! One structured log line per workload-management decision (issue #16): a throttle 429, a
//! full queue, a resource-share rejection, a cancellation — and, in the dry run, each of them
//! that mode `enabled` would have taken. Target [`TARGET`], level INFO, fields:
//!
//! | field | value |
//! |---|---|
//! | `decision` | `throttle`, `queue_full`, `reject`, `cancel` ([`DecisionKind`]) |
//! | `enforced` | `false` for the dry run (`monitor_only`, a `monitor` group) |
//! | `group`, `group_name` | the workload group |
//! | `bucket_kind` | `group`, `username`, `role` (the throttle's attribute), or `none` |
//! | `tier` | `node` (node-tier throttle), `shared` (cluster-wide shared tier), `share` (resource check at the door), `enforcement` (the pass) |
//! | `reason` | what was over what, without any principal's name |
//! | `suppressed` | lines of this kind left out just before this one (the rate limit) |
//!
//! # Decisions
//! - A [`Decision`] has no field for the bucket's value, so no username or role can reach an
//!   INFO line; the DEBUG lines of the deciding modules name the bucket in full.
//! - Rate-limited per kind ([`LineBudget`]): a flood of 429s writes a burst of lines, then one
//!   a second, each carrying how many it stands for; nothing is lost from the count, and the
//!   disk is not filled. The figures themselves are in `_wlm/stats` and the metrics.
//!
//! # Invariants
//! - L1: over any stretch of `t` seconds, at most `BURST + t / LINE_INTERVAL` lines of one kind
//!   are written (`test_budget_bounds_lines_by_burst_and_rate`).
//! - L2: every decision is written or counted once in the `suppressed` of the next written line
//!   of its kind (`test_budget_counts_every_suppressed_decision_in_the_next_line`).

use std::fmt;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_core::ThrottleAttribute;

/// The log target of decision lines: filter them with `RUST_LOG=sluice::decision=info`.
pub const TARGET: &str = "sluice::decision";

/// Lines of one kind written at once before the rate applies: enough to see the start of a
/// flood and which groups are in it.
const BURST: u64 = 10;

/// One line of a kind per this interval once the burst is spent: four kinds of ~300-byte lines
/// are ~100 MB a day at most under a flood that never stops — a log rotation's worth, not a
/// full disk.
const LINE_INTERVAL: Duration = Duration::from_secs(1);

/// What was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionKind {
    /// Refused by the throttle (429), no queue involved.
    Throttle,
    /// Refused by the throttle because the queue it would have waited in was full.
    QueueFull,
    /// Refused at the door because the group was over its resource share.
    Reject,
    /// A running task cancelled by the enforcement pass.
    Cancel,
}

impl DecisionKind {
    const ALL: [DecisionKind; 4] = [
        DecisionKind::Throttle,
        DecisionKind::QueueFull,
        DecisionKind::Reject,
        DecisionKind::Cancel,
    ];

    /// The `decision` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Throttle => "throttle",
            DecisionKind::QueueFull => "queue_full",
            DecisionKind::Reject => "reject",
            DecisionKind::Cancel => "cancel",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Which stage of admission or enforcement decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// The node-tier throttle (`throttling.node_limit`).
    Node,
    /// The cluster-wide shared tier (`throttling.shared_limit`).
    Shared,
    /// The resource-share check at the door.
    Share,
    /// The enforcement pass.
    Enforcement,
}

impl Tier {
    /// The `tier` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Node => "node",
            Tier::Shared => "shared",
            Tier::Share => "share",
            Tier::Enforcement => "enforcement",
        }
    }
}

/// One decision, as logged: nothing in it names a principal.
#[derive(Clone, Copy)]
pub struct Decision<'a> {
    /// What was decided.
    pub kind: DecisionKind,
    /// Whether it was carried out (false: the dry run).
    pub enforced: bool,
    /// The group's id.
    pub group_id: &'a str,
    /// The group's name.
    pub group_name: &'a str,
    /// The throttle attribute of the request's bucket, when it had one.
    pub bucket_kind: Option<ThrottleAttribute>,
    /// Which stage decided.
    pub tier: Tier,
    /// What was over what.
    pub reason: &'a dyn fmt::Display,
}

/// The node's decision lines: one [`LineBudget`] per kind, read against the node's monotonic
/// clock.
#[derive(Debug)]
pub struct DecisionLog {
    epoch: Instant,
    budgets: [Mutex<LineBudget>; DecisionKind::ALL.len()],
    /// The WARN lines of requests tagged with a group id that does not exist: any client can
    /// send one per request, so they are rate-limited as decisions are.
    unknown_group: Mutex<LineBudget>,
}

/// How much of a client's group id a log line or a warning shows: ids are 22 characters; the
/// rest of a longer one is only its length.
pub const SHOWN_ID_CHARS: usize = 64;

/// `id` as a log line or a warning shows it: whole when short, else its first
/// [`SHOWN_ID_CHARS`] characters and its length.
pub fn shown_id(id: &str) -> std::borrow::Cow<'_, str> {
    match id.char_indices().nth(SHOWN_ID_CHARS) {
        None => std::borrow::Cow::Borrowed(id),
        Some((cut, _)) => {
            std::borrow::Cow::Owned(format!("{}... ({} bytes)", &id[..cut], id.len()))
        }
    }
}

impl Default for DecisionLog {
    fn default() -> Self {
        DecisionLog::new()
    }
}

impl DecisionLog {
    /// A log whose budgets are all full.
    pub fn new() -> DecisionLog {
        DecisionLog {
            epoch: Instant::now(),
            budgets: std::array::from_fn(|_| Mutex::new(LineBudget::new())),
            unknown_group: Mutex::new(LineBudget::new()),
        }
    }

    /// Writes the WARN line of a request tagged with the group id `id`, which does not exist
    /// (it runs in DEFAULT_WORKLOAD_GROUP), within the same budget as a kind of decision: a
    /// burst, then one a second carrying how many it stands for ([`LineBudget`]).
    pub fn unknown_group(&self, id: &str) {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let Some(suppressed) = self.unknown_group.lock().take(now) else {
            return;
        };
        tracing::warn!(
            workload_group_id = %shown_id(id),
            suppressed,
            "request tagged with an unknown workload group id; running it in DEFAULT_WORKLOAD_GROUP"
        );
    }

    /// Writes `d`'s line, unless its kind's budget is spent (then it is counted in the next).
    pub fn log(&self, d: Decision<'_>) {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let Some(suppressed) = self.budgets[d.kind.index()].lock().take(now) else {
            return;
        };
        let bucket_kind = d.bucket_kind.map_or("none", |a| a.as_str());
        let verb = match (d.enforced, d.kind) {
            (true, DecisionKind::Throttle) => "throttled",
            (true, DecisionKind::QueueFull) => "queue full",
            (true, DecisionKind::Reject) => "rejected",
            (true, DecisionKind::Cancel) => "cancelled",
            (false, DecisionKind::Throttle) => "would throttle",
            (false, DecisionKind::QueueFull) => "would refuse, queue full",
            (false, DecisionKind::Reject) => "would reject",
            (false, DecisionKind::Cancel) => "would cancel",
        };
        tracing::info!(
            target: TARGET,
            decision = d.kind.as_str(),
            enforced = d.enforced,
            group = d.group_id,
            group_name = d.group_name,
            bucket_kind,
            tier = d.tier.as_str(),
            reason = %d.reason,
            suppressed,
            "{verb}"
        );
    }
}

/// A token bucket of log lines, on a clock passed in (nanoseconds, never going back).
///
/// Credit is kept in nanoseconds: a line costs [`LINE_INTERVAL`], credit grows with time up to
/// [`BURST`] lines.
#[derive(Debug, Clone)]
pub struct LineBudget {
    credit_nanos: u64,
    last_nanos: u64,
    suppressed: u64,
}

impl Default for LineBudget {
    fn default() -> Self {
        LineBudget::new()
    }
}

impl LineBudget {
    const COST: u64 = LINE_INTERVAL.as_nanos() as u64;
    const CAP: u64 = BURST * LineBudget::COST;

    /// A full budget, at time 0.
    pub fn new() -> LineBudget {
        LineBudget {
            credit_nanos: Self::CAP,
            last_nanos: 0,
            suppressed: 0,
        }
    }

    /// Takes one line at `now_nanos`: `Some(n)` when it may be written, `n` being the lines
    /// left out since the last written one; `None` when it is left out (and counted).
    pub fn take(&mut self, now_nanos: u64) -> Option<u64> {
        let elapsed = now_nanos.saturating_sub(self.last_nanos);
        self.last_nanos = self.last_nanos.max(now_nanos);
        self.credit_nanos = self.credit_nanos.saturating_add(elapsed).min(Self::CAP);
        if self.credit_nanos >= Self::COST {
            self.credit_nanos -= Self::COST;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn test_budget_bounds_lines_by_burst_and_rate() {
        let mut b = LineBudget::new();
        // A flood of a thousand decisions a second for ten seconds.
        let mut written = 0;
        for i in 0..10_000u64 {
            if b.take(i * SEC / 1000).is_some() {
                written += 1;
            }
        }
        // The burst, then one a second (the first ms of each new second earns one).
        assert!(written <= BURST + 10, "{written}");
        assert!(written >= BURST + 9, "{written}");
    }

    #[test]
    fn test_budget_counts_every_suppressed_decision_in_the_next_line() {
        let mut b = LineBudget::new();
        let mut written = 0;
        let mut counted = 0;
        let decisions = 500u64;
        for i in 0..decisions {
            if let Some(n) = b.take(i * SEC / 100) {
                written += 1;
                counted += n;
            }
        }
        // Long after: one more decision carries what was left out at the end.
        let last = b.take(100 * SEC).expect("the budget refills");
        assert_eq!(written + 1 + counted + last, decisions + 1);
    }

    #[test]
    fn test_budget_refills_to_a_whole_burst_and_no_more() {
        let mut b = LineBudget::new();
        for _ in 0..BURST {
            assert_eq!(b.take(0), Some(0));
        }
        assert_eq!(b.take(0), None);
        assert_eq!(b.take(SEC / 2), None);
        assert_eq!(b.take(SEC), Some(2));
        // An hour idle refills the burst, not an hour's worth.
        let later = 3600 * SEC;
        for _ in 0..BURST {
            assert_eq!(b.take(later), Some(0));
        }
        assert_eq!(b.take(later), None);
    }

    #[test]
    fn test_kinds_have_their_own_budgets() {
        let log = DecisionLog::new();
        for k in DecisionKind::ALL {
            assert_eq!(DecisionKind::ALL[k.index()], k);
        }
        for _ in 0..BURST {
            assert!(
                log.budgets[DecisionKind::Throttle.index()]
                    .lock()
                    .take(0)
                    .is_some()
            );
        }
        assert!(
            log.budgets[DecisionKind::Throttle.index()]
                .lock()
                .take(0)
                .is_none()
        );
        assert!(
            log.budgets[DecisionKind::Cancel.index()]
                .lock()
                .take(0)
                .is_some()
        );
    }
}
