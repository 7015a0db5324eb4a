//! A coordinator's circuit breakers, one per owner: which owners its requests stop asking, for
//! now. Decisions only, no I/O and no clock: the coordinator reports every call's outcome and
//! every membership change, and asks before it calls an owner (`coordinator.rs`, K16).
//!
//! Why: an owner that failed a call (refused, reset, or no answer within the call's deadline)
//! will most likely fail the next one too. Without a breaker every request of its buckets
//! asked it again — each acquire to a paused owner waited its whole deadline — and the
//! coordinator could not tell its buckets' parked requests apart from any others': the
//! server's backstop admitted one of them a bucket a second (an ask might wait out the
//! deadline), and the fail-open room their neighbours' requests freed went to newcomers. An
//! outside trial saw a dead owner's buckets stall 1 to 2.5 s (once 4 s) after its kill -9 or
//! SIGTERM, until the membership dropped it (BENCHMARKS.md, "Shared tier: an owner dies").
//! While a breaker is open the coordinator admits its owner's buckets at once, failing open
//! within K1 as before, until the owner answers a probe or the ring moves the buckets.
//!
//! # Invariants
//! - **B1 (opened by a fresh failure only)** — an owner's breaker opens only when a call to that
//!   incarnation of it failed for want of it (unreachable, or no answer within the call's
//!   deadline) and nothing that incarnation answered arrived since the call was sent
//!   ([`Ticket`]) and since it last became a member: a call that failed while later ones were
//!   answered (a slow call among quick ones) says nothing of now. An answer never opens a
//!   breaker, nor does a failure of another incarnation. A ticket is the breakers' own clock,
//!   whatever the owner, so a call sent just as its owner joins counts the same whether the
//!   membership change reached the breakers before it or after (the simulation replays a seed
//!   only if such orders do not matter: tokio wakes a watch's receivers in a random order).
//!   Tested by
//!   `test_a_failure_opens_only_when_nothing_was_answered_since_its_call_was_sent` and the
//!   model test.
//! - **B2 (closed by any answer)** — any answer of the incarnation closes its breaker at once:
//!   a probe's, a release's, a grant that came late. Tested by
//!   `test_any_answer_closes_and_a_stale_failure_does_not_reopen` and the model test.
//! - **B3 (live incarnations only)** — there is a breaker for each member of the last
//!   membership given and for nothing else: an owner that left is forgotten, one restarted (a
//!   new generation) starts closed, and the outcome of a call to an incarnation not in the
//!   membership changes nothing. Tested by `test_only_live_incarnations_have_breakers` and the
//!   model test.
//! - **B4 (probed while open or awaited)** — the owners to probe are those whose breakers are
//!   open (to close them, B2) and, among the owners the caller says its parked requests wait on,
//!   the live incarnations whose breakers are closed (to open them should they be gone, B1),
//!   each once, in node id order. A parked request waits for its owner's push, which no call of
//!   its own makes, so without a probe a dead owner's death shows in no failure while every
//!   request of its buckets on a node is parked (`coordinator.rs`, K18). Tested by
//!   `test_open_and_awaited_owners_are_probed_once_each`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::Member;

/// What a call knew of its owner when it was sent ([`Breakers::ticket`]): its failure opens
/// the breaker only if nothing was answered since (B1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// The breakers' clock when the call was sent.
    at: u64,
}

/// What an outcome did to a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    None,
    /// It opened: calls to the owner stop.
    Opened,
    /// It closed: calls to the owner go out again.
    Closed,
}

/// One owner's breaker.
#[derive(Debug)]
struct Breaker {
    /// The incarnation it is for (B3).
    member: Member,
    /// The breakers' clock at the incarnation's latest answer since it became a member (0:
    /// none), B1.
    answered_at: u64,
    /// Why it is open (the failure that opened it), if it is.
    open: Option<String>,
}

/// Every owner's breaker (see the module docs). Owners in node id order, so the probes go out
/// in the same order in every run (`tests/sim.rs` replays a seed).
#[derive(Debug, Default)]
pub struct Breakers {
    owners: BTreeMap<Arc<str>, Breaker>,
    /// Counts the answers of every owner: orders answers against the calls' tickets (B1).
    clock: u64,
}

impl Breakers {
    /// Breakers for the members `live`, all closed.
    pub fn new(live: &[Member]) -> Breakers {
        let mut b = Breakers::default();
        b.retain(live);
        b
    }

    /// Follows a membership change (B3): a breaker for each member of `live`, kept when its
    /// incarnation is the same, closed when new.
    pub fn retain(&mut self, live: &[Member]) {
        let mut owners = BTreeMap::new();
        for m in live {
            let id: Arc<str> = Arc::from(m.node_id.as_str());
            let breaker = match self.owners.remove(&id) {
                Some(b) if b.member.generation == m.generation => b,
                _ => Breaker {
                    member: m.clone(),
                    answered_at: 0,
                    open: None,
                },
            };
            owners.insert(id, breaker);
        }
        self.owners = owners;
    }

    /// The breaker of `owner`'s incarnation, if it is a member (B3).
    fn of(&mut self, owner: &Member) -> Option<&mut Breaker> {
        self.owners
            .get_mut(owner.node_id.as_str())
            .filter(|b| b.member.generation == owner.generation)
    }

    /// What a call sent now must carry to report its failure.
    pub fn ticket(&self) -> Ticket {
        Ticket { at: self.clock }
    }

    /// `owner` answered a call (B2).
    pub fn answered(&mut self, owner: &Member) -> Change {
        self.clock += 1;
        let now = self.clock;
        let Some(b) = self.of(owner) else {
            return Change::None;
        };
        b.answered_at = now;
        match b.open.take() {
            Some(_) => Change::Closed,
            None => Change::None,
        }
    }

    /// A call to `owner` sent with `ticket` failed for want of the owner, for `reason` (B1).
    pub fn failed(&mut self, owner: &Member, ticket: Ticket, reason: &str) -> Change {
        let Some(b) = self.of(owner) else {
            return Change::None;
        };
        if b.answered_at > ticket.at {
            return Change::None;
        }
        let opened = b.open.is_none();
        b.open = Some(reason.to_string());
        if opened { Change::Opened } else { Change::None }
    }

    /// Why calls to `owner` stop, if its breaker is open.
    pub fn open_reason(&self, owner: &Member) -> Option<&str> {
        self.owners
            .get(owner.node_id.as_str())
            .filter(|b| b.member.generation == owner.generation)
            .and_then(|b| b.open.as_deref())
    }

    /// How many breakers are open.
    /// The owners whose breakers are open, in node id order, each with the failure that
    /// opened it: what this node's requests fail open toward, for `_cluster/health`.
    pub fn open_owners(&self) -> Vec<(Member, String)> {
        self.owners
            .values()
            .filter_map(|b| b.open.as_ref().map(|r| (b.member.clone(), r.clone())))
            .collect()
    }

    pub fn num_open(&self) -> usize {
        self.owners.values().filter(|b| b.open.is_some()).count()
    }

    /// The owners to probe (B4): those whose breakers are open, and the live incarnations
    /// among `awaited` (owners parked requests wait on) whose breakers are closed; each once,
    /// in node id order.
    pub fn to_probe(&self, awaited: &[Member]) -> Vec<Member> {
        self.owners
            .values()
            .filter(|b| {
                b.open.is_some()
                    || awaited.iter().any(|m| {
                        m.node_id == b.member.node_id && m.generation == b.member.generation
                    })
            })
            .map(|b| b.member.clone())
            .collect()
    }

    /// How many breakers there are (B3).
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(id: &str, generation: u64) -> Member {
        Member {
            node_id: id.to_string(),
            generation,
            name: id.to_string(),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version: crate::PROTOCOL_VERSION,
            backend: "embedded".to_string(),
            version: "0".to_string(),
            cluster_uuid: "u".to_string(),
        }
    }

    #[test]
    fn test_a_failure_opens_only_when_nothing_was_answered_since_its_call_was_sent() {
        let b1 = node("b", 1);
        let mut br = Breakers::new(std::slice::from_ref(&b1));
        // A slow call is sent, then a quick one that is answered; the slow one's failure says
        // nothing of now.
        let slow = br.ticket();
        let quick = br.ticket();
        assert_eq!(br.answered(&b1), Change::None);
        assert_eq!(br.failed(&b1, slow, "no answer"), Change::None);
        assert_eq!(br.open_reason(&b1), None);
        let _ = quick;
        // A call sent after the last answer fails: open, with its reason; a second failure
        // changes nothing.
        let t = br.ticket();
        assert_eq!(br.failed(&b1, t, "refused"), Change::Opened);
        assert_eq!(br.open_reason(&b1), Some("refused"));
        assert_eq!(br.num_open(), 1);
        assert_eq!(br.failed(&b1, t, "refused again"), Change::None);
        assert_eq!(br.to_probe(&[]), vec![b1], "the open breakers are probed");
    }

    #[test]
    fn test_any_answer_closes_and_a_stale_failure_does_not_reopen() {
        let b1 = node("b", 1);
        let mut br = Breakers::new(std::slice::from_ref(&b1));
        let before = br.ticket();
        let t = br.ticket();
        assert_eq!(br.failed(&b1, t, "refused"), Change::Opened);
        // A probe is answered: closed.
        assert_eq!(br.answered(&b1), Change::Closed);
        assert_eq!(br.open_reason(&b1), None);
        assert_eq!(br.num_open(), 0);
        // A call sent before that answer fails late: it stays closed.
        assert_eq!(br.failed(&b1, before, "no answer"), Change::None);
        assert_eq!(br.num_open(), 0);
        assert!(br.to_probe(&[]).is_empty());
    }

    #[test]
    fn test_open_owners_are_listed_with_their_reasons() {
        let (b1, c1) = (node("b", 1), node("c", 1));
        let mut br = Breakers::new(&[b1.clone(), c1.clone()]);
        assert!(br.open_owners().is_empty());
        let t = br.ticket();
        assert_eq!(br.failed(&b1, t, "refused"), Change::Opened);
        assert_eq!(br.open_owners(), vec![(b1.clone(), "refused".to_string())]);
        assert_eq!(br.answered(&b1), Change::Closed);
        assert!(br.open_owners().is_empty());
    }

    #[test]
    fn test_only_live_incarnations_have_breakers() {
        let (b1, c1) = (node("b", 1), node("c", 1));
        let mut br = Breakers::new(&[b1.clone(), c1.clone()]);
        let t = br.ticket();
        assert_eq!(br.failed(&b1, t, "refused"), Change::Opened);
        // b restarts (generation 2): its breaker starts closed, and the old incarnation's
        // outcomes change nothing.
        let b2 = node("b", 2);
        br.retain(&[b2.clone(), c1.clone()]);
        assert_eq!(br.open_reason(&b2), None);
        assert_eq!(br.open_reason(&b1), None);
        assert_eq!(br.failed(&b1, t, "refused"), Change::None);
        assert_eq!(br.answered(&b1), Change::None);
        assert_eq!(br.num_open(), 0);
        // c's open breaker survives a change that keeps c; c leaving forgets it, and a call
        // to it then changes nothing.
        let t = br.ticket();
        assert_eq!(br.failed(&c1, t, "no answer"), Change::Opened);
        br.retain(&[b2.clone(), c1.clone()]);
        assert_eq!(br.open_reason(&c1), Some("no answer"));
        br.retain(std::slice::from_ref(&b2));
        assert_eq!(br.len(), 1);
        assert_eq!(br.open_reason(&c1), None);
        let t = br.ticket();
        assert_eq!(br.failed(&c1, t, "refused"), Change::None);
        assert_eq!(br.num_open(), 0);
    }

    #[test]
    fn test_open_and_awaited_owners_are_probed_once_each() {
        let (a1, b1, c1, d1) = (node("a", 1), node("b", 1), node("c", 1), node("d", 1));
        let mut br = Breakers::new(&[a1.clone(), b1.clone(), c1.clone(), d1.clone()]);
        // Nothing open, nothing awaited: nobody.
        assert!(br.to_probe(&[]).is_empty());
        // c is open; d and c are awaited (c twice): c and d, once each, in node id order.
        let t = br.ticket();
        assert_eq!(br.failed(&c1, t, "refused"), Change::Opened);
        assert_eq!(
            br.to_probe(&[d1.clone(), c1.clone(), c1.clone()]),
            vec![c1.clone(), d1.clone()]
        );
        // Awaited owners that are no live incarnation (b's earlier generation, a stranger) are
        // not probed (B3).
        assert_eq!(br.to_probe(&[node("b", 0), node("e", 1)]), vec![c1.clone()]);
        // c answers: closed, and probed only while awaited.
        assert_eq!(br.answered(&c1), Change::Closed);
        assert!(br.to_probe(&[]).is_empty());
        assert_eq!(br.to_probe(&[a1.clone(), b1.clone()]), vec![a1, b1]);
    }

    /// One step of the model test.
    #[derive(Debug, Clone)]
    enum Step {
        /// The membership becomes these nodes (of "a".."c") at these generations (1..=2).
        Members(Vec<(usize, u64)>),
        /// A call to node `.0` at generation `.1` is sent.
        Send(usize, u64),
        /// The `.0`-th call sent (modulo their number) fails.
        Fail(usize),
        /// Node `.0` at generation `.1` answers a call.
        Answer(usize, u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            1 => proptest::collection::vec((0usize..3, 1u64..=2), 0..3).prop_map(Step::Members),
            4 => (0usize..3, 1u64..=2).prop_map(|(n, g)| Step::Send(n, g)),
            4 => (0usize..64).prop_map(Step::Fail),
            3 => (0usize..3, 1u64..=2).prop_map(|(n, g)| Step::Answer(n, g)),
        ]
    }

    /// What happened to one incarnation since it became a member, in order.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Event {
        Sent(usize),
        Failed(usize),
        Answered,
    }

    proptest! {
        /// The breakers against their invariants stated as a history: an incarnation's breaker
        /// is open exactly when, since it became a member, one of its calls failed and nothing
        /// it answered came after that call was sent, or after it became a member for a call
        /// sent before (B1, B2); only members have breakers, and an incarnation that became a
        /// member again starts with no history (B3).
        #[test]
        fn test_breakers_follow_their_history(steps in proptest::collection::vec(step(), 1..80)) {
            let ids = ["a", "b", "c"];
            let mut br = Breakers::new(&[]);
            // The membership, and each member incarnation's history.
            let mut live: BTreeMap<usize, u64> = BTreeMap::new();
            let mut history: BTreeMap<(usize, u64), Vec<Event>> = BTreeMap::new();
            let mut calls: Vec<(usize, u64, Ticket)> = Vec::new();
            for s in steps {
                match s {
                    Step::Members(ms) => {
                        let mut next: BTreeMap<usize, u64> = BTreeMap::new();
                        for (n, g) in ms {
                            next.insert(n, g);
                        }
                        let members: Vec<Member> =
                            next.iter().map(|(&n, &g)| node(ids[n], g)).collect();
                        br.retain(&members);
                        history.retain(|(n, g), _| live.get(n) == Some(g) && next.get(n) == Some(g));
                        live = next;
                    }
                    Step::Send(n, g) => {
                        let t = br.ticket();
                        calls.push((n, g, t));
                        if live.get(&n) == Some(&g) {
                            let k = calls.len() - 1;
                            history.entry((n, g)).or_default().push(Event::Sent(k));
                        }
                    }
                    Step::Fail(i) => {
                        if calls.is_empty() {
                            continue;
                        }
                        let k = i % calls.len();
                        let (n, g, t) = calls[k];
                        let _ = br.failed(&node(ids[n], g), t, "failed");
                        // Only a member's calls count; one sent before the incarnation (last)
                        // became a member counts from then.
                        if live.get(&n) == Some(&g) {
                            history.entry((n, g)).or_default().push(Event::Failed(k));
                        }
                    }
                    Step::Answer(n, g) => {
                        let _ = br.answered(&node(ids[n], g));
                        if live.get(&n) == Some(&g) {
                            history.entry((n, g)).or_default().push(Event::Answered);
                        }
                    }
                }
                prop_assert_eq!(br.len(), live.len());
                let mut open = 0;
                for (&n, &g) in &live {
                    let h = history.get(&(n, g)).cloned().unwrap_or_default();
                    let expect = h.iter().any(|e| {
                        let Event::Failed(k) = *e else { return false };
                        // Sent before the incarnation (last) became a member: its whole history.
                        let sent = h.iter().position(|x| *x == Event::Sent(k)).unwrap_or(0);
                        !h[sent..].contains(&Event::Answered)
                    });
                    open += usize::from(expect);
                    prop_assert_eq!(
                        br.open_reason(&node(ids[n], g)).is_some(),
                        expect,
                        "node {} generation {} after {:?}", ids[n], g, h
                    );
                }
                prop_assert_eq!(br.num_open(), open);
            }
        }
    }
}
