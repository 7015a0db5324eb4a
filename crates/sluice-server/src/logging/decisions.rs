//! One structured log line per workload-management decision (issue #16): a throttle 429, a
//! full queue, a resource-share rejection, a cancellation, a split side's refusal for want of
//! a share (503) — and, in the dry run, each of them
//! that mode `enabled` would have taken. Target [`TARGET`], level INFO, fields:
//!
//! | field | value |
//! |---|---|
//! | `decision` | `throttle`, `queue_full`, `reject`, `cancel`, `no_share` ([`DecisionKind`]) |
//! | `enforced` | `false` for the dry run (`monitor_only`, a `monitor` group) |
//! | `group`, `group_name` | the workload group |
//! | `bucket_kind` | `group`, `username`, `role` (the throttle's attribute), or `none` |
//! | `tier` | `node` (node-tier throttle), `shared` (cluster-wide shared tier), `share` (resource check at the door), `enforcement` (the pass) |
//! | `reason` | what was over what, without any principal's name |
//! | `suppressed` | lines of this kind and group left out just before this one (the rate limit) |
//!
//! Once a group's flood of a kind stops, the next [`DecisionLog::flush`] (a tick of
//! [`FLUSH_INTERVAL`]) writes what its last lines left out: a line with the message
//! [`LEFT_OUT`] and only `decision`, `enforced`, `group`, `group_name` and `suppressed`.
//!
//! # Decisions
//! - A [`Decision`] has no field for the bucket's value, so no username or role can reach an
//!   INFO line; the DEBUG lines of the deciding modules name the bucket in full.
//! - Rate-limited per kind and group ([`LineBudget`]): a flood of 429s writes a burst of lines,
//!   then one a second, each carrying how many it stands for; nothing is lost from the count,
//!   and the disk is not filled. One tenant's flood spends only its own group's budget, so
//!   every other group's decisions are still written (an outside trial's quiet group, throttled
//!   26 times beside a flooding one, got 2 lines when the budget was the node's). The figures
//!   themselves are in `_wlm/stats` and the metrics.
//! - String fields are recorded as strings, never through `Display` (`%`): the text format
//!   quotes them, so a logfmt parser reads `reason="1 requests in flight, …"` as one value, and
//!   the JSON format writes them as JSON strings.
//!
//! # Invariants
//! - L1: over any stretch of `t` seconds, at most `BURST + t / LINE_INTERVAL` lines of one kind
//!   and group are written, [`LEFT_OUT`] lines included
//!   (`test_budget_bounds_lines_by_burst_and_rate`, `test_left_out_lines_spend_the_budget`).
//! - L2: every decision is written or counted once in the `suppressed` of the next line of its
//!   kind and group: a decision's, or, once the group has had none of that kind for a
//!   [`LINE_INTERVAL`], the [`LEFT_OUT`] line of the next flush
//!   (`test_budget_counts_every_suppressed_decision_in_the_next_line`,
//!   `test_flush_reports_what_a_flood_left_out_once_it_stops`,
//!   `test_groups_have_their_own_budgets`).
//! - L3: a kind holds at most [`MAX_GROUP_BUDGETS`] budgets; a budget back to full with nothing
//!   left out is dropped at each flush (a fresh one is the same), and one pushed out to make
//!   room writes what it left out at once (`test_budgets_are_bounded_and_evictions_lose_nothing`).

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_core::ThrottleAttribute;

/// The log target of decision lines: filter them with `RUST_LOG=sluice::decision=info`.
pub const TARGET: &str = "sluice::decision";

/// Lines of one kind written at once before the rate applies: enough to see the start of a
/// flood and which groups are in it.
const BURST: u64 = 10;

/// One line of a kind per this interval once the burst is spent: five kinds of ~300-byte lines
/// are ~130 MB a day at most under a flood that never stops — a log rotation's worth, not a
/// full disk.
const LINE_INTERVAL: Duration = Duration::from_secs(1);

/// How often [`DecisionLog::flush`] runs: a flood's remainder is written within two of these
/// of its end (one quiet [`LINE_INTERVAL`], then the next tick), and a tick costs a look at the
/// budgets of the groups that decided something in the last [`BURST`] seconds.
pub const FLUSH_INTERVAL: Duration = LINE_INTERVAL;

/// The message of a line that writes what a group's last lines of a kind left out.
pub const LEFT_OUT: &str = "decision lines left out by the rate limit";

/// The most budgets one kind holds: a node has at most 100 groups and DEFAULT
/// (`node.workload_group.max_count` is at most 100), and a budget idle for [`BURST`] seconds is
/// dropped at the next flush, so only groups deleted in the last seconds come on top; 256
/// leaves room for the node's groups deleted and created again twice in that time.
const MAX_GROUP_BUDGETS: usize = 256;

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
    /// Refused (503) on the side of a split cluster whose share of a `shared_limit` rounds
    /// down to nothing: not a throttle of a limit in use, and told apart in the log so (an
    /// outside trial found the two under one kind, told apart only by their reasons).
    NoShare,
}

impl DecisionKind {
    const ALL: [DecisionKind; 5] = [
        DecisionKind::Throttle,
        DecisionKind::QueueFull,
        DecisionKind::Reject,
        DecisionKind::Cancel,
        DecisionKind::NoShare,
    ];

    /// The `decision` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Throttle => "throttle",
            DecisionKind::QueueFull => "queue_full",
            DecisionKind::Reject => "reject",
            DecisionKind::Cancel => "cancel",
            DecisionKind::NoShare => "no_share",
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

/// The node's decision lines: a [`LineBudget`] per kind and group, read against the node's
/// monotonic clock.
#[derive(Debug)]
pub struct DecisionLog {
    epoch: Instant,
    budgets: [Mutex<GroupBudgets>; DecisionKind::ALL.len()],
    /// The WARN lines of requests tagged with a group id that does not exist: any client can
    /// send one per request, so they are rate-limited as decisions are (one budget: the ids
    /// are the client's to choose, a budget each would be a map without bound).
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
            budgets: std::array::from_fn(|_| Mutex::new(GroupBudgets::default())),
            unknown_group: Mutex::new(LineBudget::new()),
        }
    }

    /// Writes the WARN line of a request tagged with the group id `id`, which does not exist
    /// (it runs in DEFAULT_WORKLOAD_GROUP), within the same budget as a kind of decision: a
    /// burst, then one a second carrying how many it stands for ([`LineBudget`]).
    pub fn unknown_group(&self, id: &str) {
        let Some(suppressed) = self.unknown_group.lock().take(self.now()) else {
            return;
        };
        tracing::warn!(
            workload_group_id = &*shown_id(id),
            suppressed,
            "request tagged with an unknown workload group id; running it in DEFAULT_WORKLOAD_GROUP"
        );
    }

    /// Writes `d`'s line, unless its kind's budget for its group is spent (then it is counted
    /// in the next line of that kind and group).
    pub fn log(&self, d: Decision<'_>) {
        let now = self.now();
        let (suppressed, evicted) =
            self.budgets[d.kind.index()]
                .lock()
                .take(d.group_id, d.group_name, d.enforced, now);
        if let Some(left) = evicted {
            left.write(d.kind);
        }
        let Some(suppressed) = suppressed else {
            return;
        };
        let bucket_kind = d.bucket_kind.map_or("none", |a| a.as_str());
        let verb = match (d.enforced, d.kind) {
            (true, DecisionKind::Throttle) => "throttled",
            (true, DecisionKind::QueueFull) => "queue full",
            (true, DecisionKind::Reject) => "rejected",
            (true, DecisionKind::Cancel) => "cancelled",
            (true, DecisionKind::NoShare) => "refused, no share of a split cluster's limit",
            (false, DecisionKind::Throttle) => "would throttle",
            (false, DecisionKind::QueueFull) => "would refuse, queue full",
            (false, DecisionKind::Reject) => "would reject",
            (false, DecisionKind::Cancel) => "would cancel",
            (false, DecisionKind::NoShare) => "would refuse, no share of a split cluster's limit",
        };
        // A string, not `%`: the text format quotes it (the allocation is a written line's,
        // at most a burst and one a second per kind and group).
        let reason = d.reason.to_string();
        tracing::info!(
            target: TARGET,
            decision = d.kind.as_str(),
            enforced = d.enforced,
            group = d.group_id,
            group_name = d.group_name,
            bucket_kind,
            tier = d.tier.as_str(),
            reason = reason.as_str(),
            suppressed,
            "{verb}"
        );
    }

    /// Writes a [`LEFT_OUT`] line for each kind and group whose decisions stopped at least a
    /// [`LINE_INTERVAL`] ago with some left out, and drops the budgets back to full (L2, L3).
    /// Called every [`FLUSH_INTERVAL`].
    pub fn flush(&self) {
        let now = self.now();
        for kind in DecisionKind::ALL {
            let left = self.budgets[kind.index()].lock().flush(now);
            for l in left {
                l.write(kind);
            }
        }
    }

    /// Nanoseconds since the log was made: the budgets' clock.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The line budgets of one decision kind, one per group (at most [`MAX_GROUP_BUDGETS`]).
#[derive(Debug, Default)]
struct GroupBudgets {
    /// By group id. Looked up on every decision of a flood: foldhash, not std's SipHash.
    by_group: HashMap<Box<str>, GroupBudget, foldhash::fast::RandomState>,
}

/// A group's budget of lines of one kind, and what a [`LEFT_OUT`] line of it names.
#[derive(Debug)]
struct GroupBudget {
    budget: LineBudget,
    /// The group's name (immutable: a group is never renamed).
    name: Box<str>,
    /// Whether the last decision was carried out: the left-out ones are the last ones.
    enforced: bool,
}

/// What a group's lines of a kind left out, to be written as a [`LEFT_OUT`] line.
#[derive(Debug, PartialEq, Eq)]
struct LeftOut {
    group: Box<str>,
    name: Box<str>,
    enforced: bool,
    suppressed: u64,
}

impl LeftOut {
    /// Writes the [`LEFT_OUT`] line of `kind`.
    fn write(&self, kind: DecisionKind) {
        tracing::info!(
            target: TARGET,
            decision = kind.as_str(),
            enforced = self.enforced,
            group = &*self.group,
            group_name = &*self.name,
            suppressed = self.suppressed,
            "{LEFT_OUT}"
        );
    }
}

impl GroupBudgets {
    /// Takes one line of `group` at `now_nanos` ([`LineBudget::take`]), making its budget if it
    /// has none; with what a budget pushed out to make room left out (L3).
    fn take(
        &mut self,
        group: &str,
        name: &str,
        enforced: bool,
        now_nanos: u64,
    ) -> (Option<u64>, Option<LeftOut>) {
        if let Some(b) = self.by_group.get_mut(group) {
            b.enforced = enforced;
            return (b.budget.take(now_nanos), None);
        }
        let evicted = self.make_room(now_nanos);
        let mut budget = LineBudget::new();
        let taken = budget.take(now_nanos);
        self.by_group.insert(
            group.into(),
            GroupBudget {
                budget,
                name: name.into(),
                enforced,
            },
        );
        debug_assert!(self.by_group.len() <= MAX_GROUP_BUDGETS, "L3");
        (taken, evicted)
    }

    /// Makes room for one more budget when the kind holds [`MAX_GROUP_BUDGETS`]: drops the
    /// idle ones, else pushes out the one that decided least recently, returning what it left
    /// out.
    fn make_room(&mut self, now_nanos: u64) -> Option<LeftOut> {
        if self.by_group.len() < MAX_GROUP_BUDGETS {
            return None;
        }
        self.by_group.retain(|_, b| !b.budget.is_idle(now_nanos));
        if self.by_group.len() < MAX_GROUP_BUDGETS {
            return None;
        }
        let oldest = self
            .by_group
            .iter()
            .min_by_key(|(_, b)| b.budget.last_nanos)
            .map(|(id, _)| id.clone())?;
        let b = self.by_group.remove(&oldest)?;
        (b.budget.suppressed > 0).then_some(LeftOut {
            group: oldest,
            name: b.name,
            enforced: b.enforced,
            suppressed: b.budget.suppressed,
        })
    }

    /// What every group whose decisions stopped at least a [`LINE_INTERVAL`] before
    /// `now_nanos` left out ([`LineBudget::take_left_out`]); drops the idle budgets.
    fn flush(&mut self, now_nanos: u64) -> Vec<LeftOut> {
        let mut left = Vec::new();
        for (id, b) in &mut self.by_group {
            if let Some(suppressed) = b.budget.take_left_out(now_nanos) {
                left.push(LeftOut {
                    group: id.clone(),
                    name: b.name.clone(),
                    enforced: b.enforced,
                    suppressed,
                });
            }
        }
        self.by_group.retain(|_, b| !b.budget.is_idle(now_nanos));
        left
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

    /// Takes one line for what was left out, at `now_nanos`: `Some(n)`, the lines left out
    /// since the last written one, when there are any and none was taken for a whole
    /// [`LINE_INTERVAL`] (a flood that goes on reports them in its own next line); `None`
    /// otherwise. The line costs what any line costs (L1); a quiet interval has earned it.
    pub fn take_left_out(&mut self, now_nanos: u64) -> Option<u64> {
        if self.suppressed == 0 || now_nanos.saturating_sub(self.last_nanos) < Self::COST {
            return None;
        }
        let elapsed = now_nanos - self.last_nanos;
        self.last_nanos = now_nanos;
        self.credit_nanos = self.credit_nanos.saturating_add(elapsed).min(Self::CAP);
        debug_assert!(self.credit_nanos >= Self::COST, "L1");
        self.credit_nanos = self.credit_nanos.saturating_sub(Self::COST);
        Some(std::mem::take(&mut self.suppressed))
    }

    /// Whether the budget is, at `now_nanos`, what a new one is: full, nothing left out.
    pub fn is_idle(&self, now_nanos: u64) -> bool {
        let elapsed = now_nanos.saturating_sub(self.last_nanos);
        self.suppressed == 0 && self.credit_nanos.saturating_add(elapsed) >= Self::CAP
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
        let take = |kind: DecisionKind| log.budgets[kind.index()].lock().take("g", "g", true, 0).0;
        for _ in 0..BURST {
            assert!(take(DecisionKind::Throttle).is_some());
        }
        assert!(take(DecisionKind::Throttle).is_none());
        assert!(take(DecisionKind::Cancel).is_some());
    }

    #[test]
    fn test_groups_have_their_own_budgets() {
        // An outside trial: one group floods 429s, another is throttled now and then. The quiet
        // group's every decision is written, and the flooding group's `suppressed` counts its
        // own decisions only.
        let mut b = GroupBudgets::default();
        let mut flood = (0u64, 0u64);
        let mut quiet = (0u64, 0u64);
        for i in 0..10_000u64 {
            let now = i * SEC / 1000;
            if let (Some(n), _) = b.take("flood", "flood", true, now) {
                flood.0 += 1;
                flood.1 += n;
            }
            if i % 1000 == 0 {
                let (n, _) = b.take("quiet", "quiet", true, now);
                assert_eq!(n, Some(0), "the quiet group's decision {i} was left out");
                quiet.0 += 1;
            }
        }
        assert_eq!(quiet.0, 10);
        assert!(flood.0 <= BURST + 10, "{flood:?}");
        // Long after, the flood's last left-out decisions are its own, and no more.
        let left = b.flush(100 * SEC);
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(&*left[0].group, "flood");
        assert_eq!(flood.0 + flood.1 + left[0].suppressed, 10_000);
    }

    #[test]
    fn test_flush_reports_what_a_flood_left_out_once_it_stops() {
        let mut b = GroupBudgets::default();
        let mut written = 0;
        let mut counted = 0;
        let decisions = 500u64;
        // Five seconds of a hundred decisions a second, carried out.
        for i in 0..decisions {
            if let (Some(n), _) = b.take("g", "name", true, i * SEC / 100) {
                written += 1;
                counted += n;
            }
        }
        let end = (decisions - 1) * SEC / 100;
        // While the flood may go on, the flush leaves its count to the flood's next line.
        assert!(b.flush(end + SEC / 2).is_empty());
        // A quiet interval later, one line says what the flood's last lines left out.
        let left = b.flush(end + SEC);
        assert_eq!(
            left,
            vec![LeftOut {
                group: "g".into(),
                name: "name".into(),
                enforced: true,
                suppressed: decisions - written - counted,
            }]
        );
        assert!(left[0].suppressed > 0);
        // Once: nothing more to say, and the budget, full again later, is dropped.
        assert!(b.flush(end + 2 * SEC).is_empty());
        assert!(b.flush(end + 20 * SEC).is_empty());
        assert!(b.by_group.is_empty());
    }

    #[test]
    fn test_left_out_lines_spend_the_budget() {
        let mut b = LineBudget::new();
        for _ in 0..BURST {
            assert_eq!(b.take(0), Some(0));
        }
        assert_eq!(b.take(0), None);
        // Nothing left out since the last line: nothing to report.
        let mut fresh = LineBudget::new();
        assert_eq!(fresh.take(0), Some(0));
        assert_eq!(fresh.take_left_out(5 * SEC), None);
        // A quiet second earns one line, which the report spends: the next decision at once
        // finds no credit.
        assert_eq!(b.take_left_out(SEC), Some(1));
        assert_eq!(b.take_left_out(2 * SEC), None);
        assert_eq!(b.take(SEC), None);
    }

    #[test]
    fn test_budgets_are_bounded_and_evictions_lose_nothing() {
        let mut b = GroupBudgets::default();
        // Every group spends its burst and leaves one out, at once: none is idle.
        let groups = MAX_GROUP_BUDGETS + 1;
        let mut evicted = Vec::new();
        for g in 0..groups {
            let id = format!("g{g}");
            for _ in 0..=BURST {
                let (_, e) = b.take(&id, &id, false, (g as u64) * 1000);
                evicted.extend(e);
            }
            assert!(b.by_group.len() <= MAX_GROUP_BUDGETS);
        }
        // The one that decided least recently made room, and what it left out is told.
        assert_eq!(
            evicted,
            vec![LeftOut {
                group: "g0".into(),
                name: "g0".into(),
                enforced: false,
                suppressed: 1,
            }]
        );
        // Long after, each report still owed is written once, and every budget is dropped
        // once the line it spent is earned back.
        let later = 3600 * SEC;
        let left = b.flush(later);
        assert_eq!(left.len(), MAX_GROUP_BUDGETS);
        assert!(b.flush(later + SEC).is_empty());
        assert!(b.by_group.is_empty());
    }
}
