//! The consistent-hash ring that places each shared-tier bucket on one owner member (DESIGN
//! section 3, "Shared tier"; issue 14 point 2).
//!
//! Every member eligible to own buckets (protocol version at least the minimum the caller
//! asks for) is hashed onto a 64-bit circle at [`VNODES`] points; a bucket key is hashed onto
//! the same circle and belongs to the member of the first point at or after it, wrapping
//! past the top. The ring is a pure value built from a member list: no I/O, no clock, and the
//! same list gives the same placement on every node, in every process, on every build.
//!
//! ```
//! use sluice_cluster::ring::Ring;
//! # use sluice_cluster::Member;
//! # fn member(id: &str) -> Member {
//! #     Member { node_id: id.into(), generation: 1, name: id.into(),
//! #         http_addr: "127.0.0.1:9200".parse().unwrap(),
//! #         transport_addr: "127.0.0.1:9300".parse().unwrap(), protocol_version: 1,
//! #         backend: "embedded".into(), version: "0.1.0".into(), cluster_uuid: "u".into() }
//! # }
//! let ring = Ring::new(&[member("a"), member("b"), member("c")], 1);
//! let owner = ring.owner(b"group-1\x00alice").expect("three members");
//! assert!(["a", "b", "c"].contains(&owner.node_id.as_str()));
//! assert!(Ring::new(&[], 1).owner(b"group-1\x00alice").is_none());
//! ```
//!
//! # Hashing, specified
//!
//! The hash is XXH3-64 with its default (zero) seed, as specified by the xxHash project and
//! implemented by `xxhash-rust`: the same bytes hash to the same value on every platform,
//! build and Rust version (never std's `DefaultHasher`, whose algorithm may change between
//! Rust releases). The inputs are:
//!
//! - a vnode point: `xxh3_64(node_id as UTF-8 bytes ‖ vnode index as u32 little-endian)`, for
//!   vnode index `0..VNODES`. The index is always the last four bytes, so the encoding is
//!   injective: no two (node id, index) pairs give the same input;
//! - a bucket: `xxh3_64(bucket key bytes)`, the bytes the caller encodes its bucket key to.
//!
//! A bucket hashed to `h` is owned by the member of the smallest point `>= h`, or of the
//! smallest point overall when `h` is above every point. Two vnodes on the same point (a
//! 64-bit collision) are ordered by node id, so even that tie is decided the same way
//! everywhere.
//!
//! # Invariants
//!
//! - **R1 (stable placement)** — the owner of a bucket depends only on the bucket key and the
//!   set of eligible node ids: not on the order of the member slice, nor on addresses,
//!   generations, names or anything else in a [`Member`]. Tested by
//!   `test_golden_vectors_pin_the_placement` (hard-coded owners: a change of hash, encoding
//!   or lookup fails it), `test_placement_ignores_slice_order_and_non_id_fields`.
//! - **R2 (minimal movement)** — a member joining takes about 1/N of the buckets and every
//!   moved bucket moves *to* it; a member leaving gives up only its own buckets. Tested by
//!   `test_join_moves_about_one_nth_and_only_to_the_new_member` and
//!   `test_leave_moves_only_the_leaving_members_buckets`.
//! - **R3 (version filter)** — a member whose protocol version is below the minimum is never
//!   placed, so a bucket is never owned by a node too old to serve it. Tested by
//!   `test_members_below_the_minimum_protocol_are_never_owners`.
//! - **R4 (empty ring)** — with no eligible member, [`Ring::owner`] answers `None` (the caller
//!   fails open). Tested by `test_empty_ring_has_no_owner`.
//! - **R5 (balance)** — with 3 to 5 members each owns its fair share 1/N of the buckets within
//!   [`BALANCE_TOLERANCE`]. Tested by `test_each_member_owns_about_one_nth`.

use xxhash_rust::xxh3::xxh3_64;

use crate::Member;

/// Points per member on the ring: the seed's value. With V points per member, a member's
/// share of the circle deviates from 1/N by about 1/√V of it (≈ 9 % at 128), so three to five
/// nodes stay within [`BALANCE_TOLERANCE`] of their fair share; the ring costs
/// 16 bytes × 128 × N (6 KiB for three nodes) and a lookup is a binary search over 128 × N
/// points (about 9 to 11 steps for 3 to 16 nodes).
pub const VNODES: usize = 128;

/// How far a member's share of buckets may stray from 1/N (as a fraction of 1/N) in the
/// balance test: ±30 % is about three standard deviations of the share at [`VNODES`] points.
pub const BALANCE_TOLERANCE: f64 = 0.30;

/// The placement of buckets on owner members: sorted vnode points, each naming a member.
///
/// # Invariants
/// R1–R5 of the [module documentation](self).
#[derive(Debug, Clone)]
pub struct Ring {
    /// `(point, index into members)`, sorted by point then node id: what [`Ring::owner`]
    /// searches.
    points: Vec<(u64, u32)>,
    /// The placed members, sorted by node id, one per id.
    members: Vec<Member>,
}

impl Ring {
    /// Builds the ring of the members whose protocol version is at least `min_protocol`.
    ///
    /// Only members with `protocol_version >= min_protocol` are placed (never map a bucket to
    /// a node too old). Placement depends only on the node ids; should the slice name one id
    /// twice, the entry with the higher generation is kept (the later incarnation), the first
    /// of equal ones.
    pub fn new(members: &[Member], min_protocol: u32) -> Ring {
        let mut placed: Vec<Member> = Vec::with_capacity(members.len());
        for member in members
            .iter()
            .filter(|m| m.protocol_version >= min_protocol)
        {
            match placed.iter_mut().find(|p| p.node_id == member.node_id) {
                Some(existing) if member.generation > existing.generation => {
                    *existing = member.clone()
                }
                Some(_) => {}
                None => placed.push(member.clone()),
            }
        }
        placed.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        let mut points = Vec::with_capacity(placed.len() * VNODES);
        for (index, member) in placed.iter().enumerate() {
            let index = u32::try_from(index).expect("fewer than 2^32 members");
            for vnode in 0..VNODES {
                points.push((vnode_point(&member.node_id, vnode), index));
            }
        }
        // Members are sorted by id, so ordering equal points by index orders them by id.
        points.sort_unstable();
        Ring {
            points,
            members: placed,
        }
    }

    /// The member owning `bucket` (the caller's byte encoding of its bucket key); `None` when
    /// the ring is empty.
    pub fn owner(&self, bucket: &[u8]) -> Option<&Member> {
        if self.points.is_empty() {
            return None;
        }
        let hash = xxh3_64(bucket);
        let at = self.points.partition_point(|&(point, _)| point < hash);
        let (_, index) = self.points[if at == self.points.len() { 0 } else { at }];
        Some(&self.members[index as usize])
    }

    /// Whether no member is placed.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The number of members placed.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The placed members, sorted by node id.
    pub fn members(&self) -> &[Member] {
        &self.members
    }
}

/// The ring point of vnode `vnode` of member `node_id` (see "Hashing, specified").
fn vnode_point(node_id: &str, vnode: usize) -> u64 {
    let vnode = u32::try_from(vnode).expect("VNODES fits in u32");
    let mut input = Vec::with_capacity(node_id.len() + 4);
    input.extend_from_slice(node_id.as_bytes());
    input.extend_from_slice(&vnode.to_le_bytes());
    xxh3_64(&input)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Buckets per rebalance and balance measurement: enough that sampling noise (±1 % of
    /// the share) is small next to the tolerances.
    const NUM_BUCKETS: usize = 10_000;

    fn member(id: &str, protocol_version: u32) -> Member {
        Member {
            node_id: id.to_string(),
            generation: 1,
            name: format!("name-{id}"),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version,
            backend: "embedded".into(),
            version: "0.1.0".into(),
            cluster_uuid: "uuid".into(),
        }
    }

    fn members(ids: &[&str]) -> Vec<Member> {
        ids.iter().map(|id| member(id, 1)).collect()
    }

    /// Username-style bucket keys, as the server encodes them (group id, NUL, user).
    fn bucket_keys() -> Vec<Vec<u8>> {
        (0..NUM_BUCKETS)
            .map(|i| format!("group-x\0user-{i}").into_bytes())
            .collect()
    }

    fn owners(ring: &Ring, keys: &[Vec<u8>]) -> Vec<String> {
        keys.iter()
            .map(|k| ring.owner(k).unwrap().node_id.clone())
            .collect()
    }

    #[test]
    fn test_golden_vectors_pin_the_placement() {
        // Computed once by this implementation and pinned: a change of hash, of the vnode
        // encoding or of the lookup moves some of these and fails here, before two builds
        // of sluice in one cluster could disagree on owners.
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(vnode_point("node-a", 0), GOLDEN_POINT_A0);
        let ring = Ring::new(&members(&["node-a", "node-b", "node-c"]), 1);
        for (key, expected) in GOLDEN_OWNERS {
            assert_eq!(
                ring.owner(key.as_bytes()).unwrap().node_id,
                *expected,
                "bucket {key:?}"
            );
        }
    }

    const GOLDEN_POINT_A0: u64 = 0x71a4_afb0_796e_0179;
    const GOLDEN_OWNERS: &[(&str, &str)] = &[
        ("group-1\0alice", "node-c"),
        ("group-1\0bob", "node-c"),
        ("group-1\0carol", "node-b"),
        ("group-2\0alice", "node-c"),
        ("group-2", "node-b"),
        ("role\0analyst", "node-b"),
        ("", "node-b"),
        ("x", "node-b"),
        ("group-3\0dave", "node-b"),
        ("group-3\0erin", "node-a"),
        ("group-4", "node-b"),
        ("group-5\0frank", "node-a"),
    ];

    #[test]
    fn test_placement_ignores_slice_order_and_non_id_fields() {
        let keys = bucket_keys();
        let ids = ["n1", "n2", "n3", "n4", "n5"];
        let forward = Ring::new(&members(&ids), 1);
        let mut reversed = members(&ids);
        reversed.reverse();
        let mut rotated = members(&ids);
        rotated.rotate_left(2);
        for (i, m) in rotated.iter_mut().enumerate() {
            m.generation = 100 + i as u64;
            m.name = format!("other-{i}");
            m.http_addr = format!("10.0.0.{i}:9200").parse().unwrap();
            m.transport_addr = format!("10.0.0.{i}:9300").parse().unwrap();
        }
        let expected = owners(&forward, &keys);
        assert_eq!(owners(&Ring::new(&reversed, 1), &keys), expected);
        assert_eq!(owners(&Ring::new(&rotated, 1), &keys), expected);
        // A duplicated id is placed once; the later generation is the member returned.
        let mut duplicated = members(&ids);
        let mut newer = member("n3", 1);
        newer.generation = 9;
        duplicated.push(newer);
        let ring = Ring::new(&duplicated, 1);
        assert_eq!(ring.len(), 5);
        assert_eq!(owners(&ring, &keys), expected);
        let n3 = ring.members().iter().find(|m| m.node_id == "n3").unwrap();
        assert_eq!(n3.generation, 9);
    }

    /// Checks that going from `before` to `after` (which differ by `changed`) moved between
    /// 0.5/N and 1.5/N of the buckets (N the larger member count), and only to or from
    /// `changed`.
    fn assert_minimal_movement(before: &Ring, after: &Ring, changed: &str) {
        let keys = bucket_keys();
        let (old, new) = (owners(before, &keys), owners(after, &keys));
        let mut moved = 0;
        for (o, n) in old.iter().zip(&new) {
            if o != n {
                moved += 1;
                assert!(
                    o == changed || n == changed,
                    "a bucket moved from {o} to {n}, neither of which is {changed}"
                );
            }
        }
        let n = before.len().max(after.len()) as f64;
        let fraction = moved as f64 / keys.len() as f64;
        assert!(
            (0.5 / n..=1.5 / n).contains(&fraction),
            "moved {fraction:.3} of the buckets, expected about 1/{n}"
        );
    }

    #[test]
    fn test_join_moves_about_one_nth_and_only_to_the_new_member() {
        let mut ids = vec!["alpha", "bravo"];
        for joining in ["charlie", "delta", "echo", "foxtrot"] {
            let before = Ring::new(&members(&ids), 1);
            ids.push(joining);
            let after = Ring::new(&members(&ids), 1);
            assert_minimal_movement(&before, &after, joining);
        }
    }

    #[test]
    fn test_leave_moves_only_the_leaving_members_buckets() {
        let ids = ["alpha", "bravo", "charlie", "delta", "echo"];
        let before = Ring::new(&members(&ids), 1);
        for leaving in ids {
            let rest: Vec<&str> = ids.iter().copied().filter(|id| *id != leaving).collect();
            let after = Ring::new(&members(&rest), 1);
            assert_minimal_movement(&before, &after, leaving);
        }
    }

    #[test]
    fn test_members_below_the_minimum_protocol_are_never_owners() {
        let mixed = vec![
            member("old-1", 1),
            member("new-1", 2),
            member("old-2", 1),
            member("new-2", 3),
        ];
        let ring = Ring::new(&mixed, 2);
        assert_eq!(ring.len(), 2);
        let keys = bucket_keys();
        let placed = owners(&ring, &keys);
        assert!(placed.iter().all(|id| id.starts_with("new-")));
        // Placement equals a ring of only the new members.
        assert_eq!(
            placed,
            owners(&Ring::new(&members(&["new-1", "new-2"]), 1), &keys)
        );
        // No member new enough: empty.
        assert!(Ring::new(&mixed, 4).is_empty());
    }

    #[test]
    fn test_empty_ring_has_no_owner() {
        let ring = Ring::new(&[], 1);
        assert!(ring.is_empty());
        assert_eq!(ring.len(), 0);
        assert!(ring.owner(b"anything").is_none());
        assert!(ring.owner(b"").is_none());
    }

    #[test]
    fn test_one_member_owns_everything() {
        let ring = Ring::new(&members(&["solo"]), 1);
        assert!(owners(&ring, &bucket_keys()).iter().all(|id| id == "solo"));
    }

    #[test]
    fn test_each_member_owns_about_one_nth() {
        let id_sets: [&[&str]; 3] = [
            &["node-1", "node-2", "node-3"],
            &["alpha", "bravo", "charlie", "delta"],
            &[
                "9f8c1d2e-0a",
                "3b7e4f10-1b",
                "c4d5e6f7-2c",
                "0a1b2c3d-3d",
                "77e8f9a0-4e",
            ],
        ];
        let keys = bucket_keys();
        for ids in id_sets {
            let ring = Ring::new(&members(ids), 1);
            let mut counts: HashMap<String, usize> = HashMap::new();
            for owner in owners(&ring, &keys) {
                *counts.entry(owner).or_default() += 1;
            }
            let fair = keys.len() as f64 / ids.len() as f64;
            for id in ids {
                let share = counts.get(*id).copied().unwrap_or(0) as f64 / fair;
                assert!(
                    (1.0 - BALANCE_TOLERANCE..=1.0 + BALANCE_TOLERANCE).contains(&share),
                    "{id} owns {share:.2} of its fair share among {ids:?}"
                );
            }
        }
    }
}
