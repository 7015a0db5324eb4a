//! The permit table against a reference model: a plain map of bucket → count.
//!
//! A random sequence of admissions (a few keys, varying limits, including 0 and a limit below
//! the current count) and releases (of any held permit, in any order) runs against both; after
//! every step the outcome, every key's in-flight count and the number of live buckets must agree.
#![cfg(not(feature = "loom"))]

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::bags::ThrottleAttribute;
use sluice_core::bucket::BucketKey;
use sluice_core::permits::{Permit, PermitTable, Throttled};

/// The keys the operations pick from; names with separators so a joined key would collide.
fn keys() -> Vec<BucketKey> {
    let k = |attribute, value: Option<&str>| BucketKey {
        group_id: Arc::from("g"),
        attribute,
        value: value.map(Arc::from),
    };
    vec![
        k(ThrottleAttribute::Group, None),
        k(ThrottleAttribute::Username, Some("a,b")),
        k(ThrottleAttribute::Username, Some("a")),
        k(ThrottleAttribute::Role, Some("a")),
        BucketKey {
            group_id: Arc::from("g:username:a"),
            attribute: ThrottleAttribute::Group,
            value: None,
        },
    ]
}

#[derive(Debug, Clone)]
enum Op {
    /// Admit to key `key % keys` with this limit.
    Acquire { key: usize, limit: u64 },
    /// Drop held permit `index % held` (nothing when none is held).
    Release { index: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..5usize, 0..4u64).prop_map(|(key, limit)| Op::Acquire { key, limit }),
        2 => any::<usize>().prop_map(|index| Op::Release { index }),
    ]
}

/// The reference: per key index, the number of held permits.
#[derive(Default)]
struct Model {
    in_flight: HashMap<usize, u64>,
}

impl Model {
    fn acquire(&mut self, key: usize, limit: u64) -> Result<(), Throttled> {
        let n = self.in_flight.get(&key).copied().unwrap_or(0);
        if n >= limit {
            return Err(Throttled {
                in_flight: n,
                limit,
            });
        }
        self.in_flight.insert(key, n + 1);
        Ok(())
    }

    fn release(&mut self, key: usize) {
        let n = self.in_flight.get(&key).copied().unwrap_or(0);
        if n <= 1 {
            self.in_flight.remove(&key);
        } else {
            self.in_flight.insert(key, n - 1);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn test_permit_table_matches_counter_model(ops in proptest::collection::vec(op(), 1..80), shards in 1usize..4) {
        let keys = keys();
        let table = PermitTable::with_shards(shards);
        let mut model = Model::default();
        let mut held: Vec<(usize, Permit)> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire { key, limit } => {
                    let got = table.try_acquire(&keys[key], limit);
                    let want = model.acquire(key, limit);
                    match (got, want) {
                        (Ok(p), Ok(())) => {
                            prop_assert_eq!(p.key(), &keys[key]);
                            held.push((key, p));
                        }
                        (Err(got), Err(want)) => prop_assert_eq!(got, want),
                        (got, want) => prop_assert!(false, "table {:?}, model {:?}", got.map(|_| ()), want),
                    }
                }
                Op::Release { index } => {
                    if !held.is_empty() {
                        let (key, permit) = held.swap_remove(index % held.len());
                        drop(permit);
                        model.release(key);
                    }
                }
            }
            for (i, k) in keys.iter().enumerate() {
                prop_assert_eq!(table.in_flight(k), model.in_flight.get(&i).copied().unwrap_or(0));
            }
            prop_assert_eq!(table.num_buckets(), model.in_flight.len());
            let mut live = table.buckets();
            live.sort();
            let mut want: Vec<(BucketKey, u64)> =
                model.in_flight.iter().map(|(&i, &n)| (keys[i].clone(), n)).collect();
            want.sort();
            prop_assert_eq!(live, want);
        }
        drop(held);
        prop_assert_eq!(table.num_buckets(), 0);
        prop_assert_eq!(table.num_invariant_violations(), 0);
    }
}
