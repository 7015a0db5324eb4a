//! A node cut off from its cluster: live nodes that share its metastore but not its gossip.
//!
//! Every node of a cluster shares one metastore and records itself there every second or so
//! (the server's `cluster/presence.rs`); gossip is joined through `discovery.seed_hosts`. A
//! node whose seeds name none of the others (a typo) gossips alone and forms a one-node
//! cluster on the same metastore: same groups and rules, but a shared-tier ring of its own,
//! so every `shared_limit` is allowed once more. [`SplitDetector`] compares the two views.
//!
//! Invariants (unit tests below):
//! - S1 A node recorded live in the metastore but not in this node's gossip membership is
//!   *unjoined* only once it has been so at every observation for [`GRACE`]: a node joining,
//!   a node that stopped (its row outlives its gossip for at most the row's liveness
//!   window), gossip converging, are never reported
//!   (`test_a_node_missing_from_gossip_is_reported_only_after_the_grace`).
//! - S2 A node that is in the gossip membership again, or no longer recorded live, is
//!   forgotten at once, and its grace starts over if it goes missing again
//!   (`test_a_node_that_joins_or_stops_is_forgotten_at_once`).
//! - S3 This node is *cut off* (on the smaller side) when its live members are fewer than
//!   half of all the nodes it knows live (members and unjoined nodes), or exactly half and
//!   the lowest node id of them all is not a member: of two groups of nodes that cannot see
//!   each other, exactly one is the larger (both sides compute the same answer from the same
//!   rows), and a lone node with a typo is the smaller
//!   (`test_the_smaller_side_is_cut_off_and_a_tie_goes_to_the_lowest_id`).
//! - S5 While split, each side enforces only its share of a cluster-wide limit on its own
//!   ring ([`SplitView::share_of`]): a side that is not cut off gets `limit` less the other
//!   sides' rounded-down shares, a cut-off side `⌊limit × side / all⌋`. The shares of the
//!   sides add up to at most `limit` (exactly `limit` for two sides), so a split never allows
//!   a limit more than once, and no side gets less than its rounded-down proportion: the
//!   anchors' answer (Doorman's safe capacity, `pool / live nodes`), taken per side
//!   (`test_the_shares_of_a_split_add_up_to_at_most_the_limit`, a property test).
//! - S4 Every node missing from gossip, reported yet or not, is one to reach
//!   ([`SplitDetector::to_reach`]): gossiping with it once is enough for chitchat to join it,
//!   so a typo heals itself rather than being only reported.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::member::Member;

/// How long a node may be recorded live in the metastore yet missing from the gossip
/// membership before it is reported (S1). It covers the two ordinary ways of being so: a
/// node joining (its row is written as it starts gossip, and gossip spreads it within a few
/// rounds of [`crate::membership::GOSSIP_INTERVAL`], about 1–2 s, longer on a loaded
/// machine), and a node that stopped (gossip drops it at once or within seconds, but its row
/// stays live for the server's liveness window, 5 s). 10 s is twice the longer of the two.
pub const GRACE: Duration = Duration::from_secs(10);

/// A node as the metastore records it (the rows seen live).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PresentNode {
    /// Its node id.
    pub node_id: String,
    /// `node.name`.
    pub name: String,
    /// Its transport address, `host:port`.
    pub transport: String,
}

/// What this node knows of a split: the live nodes it could not join, and whether it stands
/// aside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SplitView {
    /// Nodes live in the metastore, missing from the gossip membership past [`GRACE`] (S1).
    pub unjoined: Vec<PresentNode>,
    /// This node is on the smaller side (S3).
    pub cut_off: bool,
    /// The live nodes on this node's side (its gossip members, itself included), as S3
    /// counts them: with [`Self::unjoined`], every node known live.
    pub side: usize,
}

impl SplitView {
    /// S5: this side's share of a cluster-wide limit of `limit` (all of it when nothing is
    /// unjoined).
    pub fn share_of(&self, limit: u64) -> u64 {
        let others = self.unjoined.len() as u64;
        if others == 0 {
            return limit;
        }
        let all = self.side as u64 + others;
        // u128: `limit` is a `u32` setting widened, but the product is kept exact whatever
        // the caller passes.
        let part = |n: u64| (u128::from(limit) * u128::from(n) / u128::from(all)) as u64;
        if self.cut_off {
            part(self.side as u64)
        } else {
            limit - part(others)
        }
    }

    /// The split in words, for a refusal: `this node's side has 1 of 3 live nodes`.
    pub fn describe_side(&self) -> String {
        format!(
            "this node's side has {} of the {} nodes live on its metastore (unjoined: {})",
            self.side,
            self.side + self.unjoined.len(),
            self.describe_unjoined()
        )
    }

    /// The unjoined nodes in words: `name (id) at transport, …`.
    pub fn describe_unjoined(&self) -> String {
        self.unjoined
            .iter()
            .map(|n| format!("{} ({}) at {}", n.name, n.node_id, n.transport))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Compares the metastore's live nodes with the gossip membership, over time (S1–S4).
#[derive(Debug, Default)]
pub struct SplitDetector {
    /// Nodes missing from gossip, and since when (every observation since).
    missing: BTreeMap<String, (Instant, PresentNode)>,
}

impl SplitDetector {
    /// Takes one observation: `present`, the nodes the metastore records live now; `live`,
    /// the gossip membership now (this node included); `me`, this node's id.
    pub fn observe(
        &mut self,
        me: &str,
        live: &[Member],
        present: &[PresentNode],
        now: Instant,
    ) -> SplitView {
        let member = |id: &str| live.iter().any(|m| m.node_id == id);
        // S2: forget who joined or is no longer recorded live.
        self.missing
            .retain(|id, _| !member(id) && present.iter().any(|p| &p.node_id == id));
        for p in present {
            if p.node_id != me && !member(&p.node_id) {
                self.missing
                    .entry(p.node_id.clone())
                    .and_modify(|(_, seen)| *seen = p.clone())
                    .or_insert((now, p.clone()));
            }
        }
        self.view(me, live, now)
    }

    /// An observation without the metastore (it could not be read): only gossip's news is
    /// taken (S2 for nodes that joined); the rest stands as last seen.
    pub fn observe_gossip(&mut self, me: &str, live: &[Member], now: Instant) -> SplitView {
        self.missing
            .retain(|id, _| !live.iter().any(|m| &m.node_id == id));
        self.view(me, live, now)
    }

    /// The transport addresses of every node missing from gossip now (S4).
    pub fn to_reach(&self) -> Vec<String> {
        self.missing
            .values()
            .map(|(_, p)| p.transport.clone())
            .collect()
    }

    fn view(&self, me: &str, live: &[Member], now: Instant) -> SplitView {
        let unjoined: Vec<PresentNode> = self
            .missing
            .values()
            .filter(|(since, _)| now.saturating_duration_since(*since) >= GRACE)
            .map(|(_, p)| p.clone())
            .collect();
        // A membership that does not list this node yet (the first view) counts it.
        let mut ids: Vec<&str> = live.iter().map(|m| m.node_id.as_str()).collect();
        if !ids.contains(&me) {
            ids.push(me);
        }
        let cut_off = is_cut_off(me, &ids, &unjoined);
        SplitView {
            unjoined,
            cut_off,
            side: ids.len(),
        }
    }
}

/// S3: whether the side of `ids` (this node's members, itself included) is the smaller one
/// against `unjoined`.
fn is_cut_off(me: &str, ids: &[&str], unjoined: &[PresentNode]) -> bool {
    if unjoined.is_empty() {
        return false;
    }
    let ours = ids.len();
    let theirs = unjoined.len();
    if ours != theirs {
        return ours < theirs;
    }
    let lowest_ours = ids.iter().min().copied().unwrap_or(me);
    let lowest_theirs = unjoined
        .iter()
        .map(|n| n.node_id.as_str())
        .min()
        .unwrap_or(me);
    lowest_theirs < lowest_ours
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str) -> Member {
        Member {
            node_id: id.into(),
            generation: 1,
            name: format!("n-{id}"),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version: 1,
            backend: "embedded".into(),
            version: "0".into(),
            cluster_uuid: "u".into(),
        }
    }

    fn present(id: &str) -> PresentNode {
        PresentNode {
            node_id: id.into(),
            name: format!("n-{id}"),
            transport: format!("127.0.0.1:93{id}"),
        }
    }

    #[test]
    fn test_a_node_missing_from_gossip_is_reported_only_after_the_grace() {
        let t0 = Instant::now();
        let mut d = SplitDetector::default();
        let live = [member("1"), member("2")];
        let rows = [present("1"), present("2"), present("3")];
        let v = d.observe("1", &live, &rows, t0);
        assert!(v.unjoined.is_empty() && !v.cut_off);
        assert_eq!(d.to_reach(), ["127.0.0.1:933"]);
        let v = d.observe("1", &live, &rows, t0 + GRACE - Duration::from_millis(1));
        assert!(v.unjoined.is_empty());
        let v = d.observe("1", &live, &rows, t0 + GRACE);
        assert_eq!(v.unjoined, [present("3")]);
        assert!(!v.cut_off, "two members against one unjoined node go on");
    }

    #[test]
    fn test_a_node_that_joins_or_stops_is_forgotten_at_once() {
        let t0 = Instant::now();
        let mut d = SplitDetector::default();
        let rows = [present("1"), present("3")];
        d.observe("1", &[member("1")], &rows, t0);
        assert_eq!(
            d.observe("1", &[member("1")], &rows, t0 + GRACE)
                .unjoined
                .len(),
            1
        );
        // It joined: forgotten; missing again, its grace starts over.
        let both = [member("1"), member("3")];
        assert!(d.observe("1", &both, &rows, t0 + GRACE).unjoined.is_empty());
        let later = t0 + GRACE * 2;
        assert!(
            d.observe("1", &[member("1")], &rows, later)
                .unjoined
                .is_empty()
        );
        assert!(
            d.observe("1", &[member("1")], &rows, later + GRACE / 2)
                .unjoined
                .is_empty()
        );
        // Its row is no longer live (it stopped): forgotten.
        assert!(
            d.observe("1", &[member("1")], &[present("1")], later + GRACE)
                .unjoined
                .is_empty()
        );
        assert!(d.to_reach().is_empty());
        // Gossip alone can clear a node, never add one.
        d.observe("1", &[member("1")], &rows, later + GRACE);
        let v = d.observe_gossip("1", &[member("1")], later + GRACE * 3);
        assert_eq!(v.unjoined, [present("3")]);
        assert!(
            d.observe_gossip("1", &both, later + GRACE * 3)
                .unjoined
                .is_empty()
        );
    }

    #[test]
    fn test_the_smaller_side_is_cut_off_and_a_tie_goes_to_the_lowest_id() {
        let t0 = Instant::now();
        let after = t0 + GRACE;
        let rows = [present("1"), present("2"), present("3"), present("4")];
        // A lone node against three: cut off; each of the three: not.
        let mut lone = SplitDetector::default();
        lone.observe("4", &[member("4")], &rows, t0);
        assert!(lone.observe("4", &[member("4")], &rows, after).cut_off);
        let three = [member("1"), member("2"), member("3")];
        let mut big = SplitDetector::default();
        big.observe("1", &three, &rows, t0);
        let v = big.observe("1", &three, &rows, after);
        assert!(!v.cut_off && v.unjoined == [present("4")]);
        // Two against two, or one against one: the side with the lowest id goes on.
        let pairs = [(["1", "3"], ["2", "4"]), (["2", "4"], ["1", "3"])];
        for (ours, theirs) in pairs {
            let live: Vec<Member> = ours.iter().map(|id| member(id)).collect();
            let mut d = SplitDetector::default();
            d.observe(ours[0], &live, &rows, t0);
            let v = d.observe(ours[0], &live, &rows, after);
            assert_eq!(v.cut_off, ours[0] != "1", "{ours:?} against {theirs:?}");
        }
        let pair = [present("1"), present("2")];
        let mut one = SplitDetector::default();
        one.observe("1", &[member("1")], &pair, t0);
        assert!(!one.observe("1", &[member("1")], &pair, after).cut_off);
        let mut two = SplitDetector::default();
        two.observe("2", &[member("2")], &pair, t0);
        assert!(two.observe("2", &[member("2")], &pair, after).cut_off);
        // Nothing unjoined yet (within the grace): never cut off.
        let mut fresh = SplitDetector::default();
        assert!(!fresh.observe("2", &[member("2")], &pair, t0).cut_off);
    }

    /// Each side's view after the grace, `sides[i]` the side of node `i`.
    fn views_of(sides: &[usize]) -> Vec<SplitView> {
        let t0 = Instant::now();
        let ids: Vec<String> = (0..sides.len()).map(|i| i.to_string()).collect();
        let rows: Vec<PresentNode> = ids.iter().map(|id| present(id)).collect();
        let mut seen: Vec<usize> = sides.to_vec();
        seen.sort_unstable();
        seen.dedup();
        seen.iter()
            .map(|side| {
                let live: Vec<Member> = ids
                    .iter()
                    .zip(sides)
                    .filter(|(_, s)| *s == side)
                    .map(|(id, _)| member(id))
                    .collect();
                let me = live[0].node_id.clone();
                let mut d = SplitDetector::default();
                d.observe(&me, &live, &rows, t0);
                d.observe(&me, &live, &rows, t0 + GRACE)
            })
            .collect()
    }

    #[test]
    fn test_a_side_shares_a_limit_in_proportion_and_a_whole_cluster_keeps_it() {
        // One node of three: the smaller side gets a third, rounded down; the larger the rest.
        let v = views_of(&[0, 1, 1]);
        assert!(v[0].cut_off && !v[1].cut_off);
        assert_eq!((v[0].side, v[1].side), (1, 2));
        assert_eq!((v[0].share_of(3), v[1].share_of(3)), (1, 2));
        assert_eq!((v[0].share_of(2), v[1].share_of(2)), (0, 2));
        assert_eq!((v[0].share_of(10), v[1].share_of(10)), (3, 7));
        // Nothing unjoined: the whole limit.
        let whole = views_of(&[0, 0, 0]);
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].share_of(3), 3);
        assert_eq!(SplitView::default().share_of(7), 7);
        assert_eq!(u64::MAX, v[1].share_of(u64::MAX) + v[0].share_of(u64::MAX));
    }

    proptest::proptest! {
        /// S5 over any split of up to nine nodes into sides.
        #[test]
        fn test_the_shares_of_a_split_add_up_to_at_most_the_limit(
            sides in proptest::collection::vec(0usize..4, 1..10),
            limit in 0u64..100,
        ) {
            let views = views_of(&sides);
            let all = sides.len() as u64;
            let total: u64 = views.iter().map(|v| v.share_of(limit)).sum();
            proptest::prop_assert!(total <= limit, "{total} > {limit}");
            if views.len() == 2 {
                proptest::prop_assert_eq!(total, limit);
            }
            for v in &views {
                proptest::prop_assert!(v.share_of(limit) >= limit * v.side as u64 / all);
            }
        }
    }
}
