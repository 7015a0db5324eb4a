//! The pages of the `_list` APIs: the page parameters as OpenSearch's `AbstractListAction`
//! reads them (`size`, `sort`, `next_token`), the opaque page token (also `_list/wlm_stats`'),
//! and which indices (`_list/indices`, OpenSearch's `IndexPaginationStrategy`) or shards
//! (`_list/shards`, its `ShardPaginationStrategy`) a page holds. Everything here is a pure
//! function of the listed items, the request and its token, so a walk over the pages is tested
//! without a node.
//!
//! Items are ordered by their index's creation date, then name (`sort=asc`, the default), or
//! the reverse (`sort=desc`: the newest first). A token names the last item of its page — the
//! index's creation date and name, and for shards the last shard id listed — and the next page
//! is what follows that key in the order *now*: no position is kept, so indices created or
//! deleted between pages shift nothing.
//!
//! # Invariants
//! Over a walk (each page asked with the previous page's token and the same `sort`, indices
//! created or deleted between pages):
//! 1. No index (a name and creation date) is listed twice, and no shard copy twice
//!    (`test_a_walk_lists_each_lasting_index_once_in_order`,
//!    `test_a_shard_walk_lists_each_lasting_shard_once_in_order`); an index made anew under
//!    the name a token names is not listed on the next `_list/indices` page either, as in
//!    OpenSearch (`test_the_tokens_index_is_not_listed_again_even_made_anew`).
//! 2. Every index that exists for the whole walk is listed, with every shard of it
//!    (the same tests).
//! 3. Pages follow the order: (creation date, name) ascending or descending, and an index's
//!    shard ids ascending (the same tests).
//! 4. A shards page holds at most `size` rows and never splits the copies of one shard id
//!    (`test_a_shard_walk_lists_each_lasting_shard_once_in_order`,
//!    `test_a_shard_id_with_more_copies_than_size_is_refused`).
//! 5. A page has a `next_token` exactly when something followed it when it was cut
//!    (`test_the_last_page_has_no_token`).

use std::ops::Range;

use base64::Engine as _;
use sluice_engine::{EngineError, ErrorCode};

use crate::http::Params;

/// A `_list` API's page sizes: the default, the smallest and the largest it takes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The page size without `size`.
    pub default: usize,
    /// The smallest `size` taken.
    pub min: usize,
    /// The largest `size` taken.
    pub max: usize,
}

/// `_list/indices`' page sizes, OpenSearch's (`RestIndicesListAction`): 500 indices by
/// default, 5000 at most — each index costs a stats read, so a page stays cheap to build.
pub const INDEX_LIMITS: Limits = Limits {
    default: 500,
    min: 1,
    max: 5000,
};

/// `_list/shards`' page sizes, OpenSearch's (`RestShardsListAction`): 2000 rows by default and
/// at the least (a page must hold every copy of a shard id, and a cluster has many), 20000 at
/// most.
pub const SHARD_LIMITS: Limits = Limits {
    default: 2000,
    min: 2000,
    max: 20000,
};

/// The order of a `_list` API's pages (`sort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The oldest index first (`asc`, the default).
    Asc,
    /// The newest index first (`desc`).
    Desc,
}

/// The page parameters of a `_list` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageParams {
    /// The most items (indices, or shard rows) on the page.
    pub size: usize,
    /// The order of the pages.
    pub order: Order,
    /// The previous page's token, not yet read (`next_token`).
    pub token: Option<String>,
}

/// OpenSearch's reason for a `next_token` it cannot read (`PaginationStrategy`).
const TAINTED: &str = "Parameter [next_token] has been tainted and is incorrect. Please provide a valid [next_token].";

/// The 400 `parse_exception` for a token that is not one of ours.
fn tainted() -> EngineError {
    EngineError::new(ErrorCode::Parse, TAINTED)
}

impl PageParams {
    /// Reads `size`, `sort` and `next_token` as OpenSearch checks them, in its order: `size`
    /// an integer above zero, `sort` `asc` or `desc`, `size` within `limits`. The token is
    /// read by [`IndexToken::parse`] or [`ShardToken::parse`].
    pub fn parse(params: &Params, limits: Limits) -> Result<PageParams, EngineError> {
        let size = match params.get("size") {
            None => limits.default as i64,
            Some(v) => v.parse::<i64>().map_err(|_| {
                EngineError::illegal_argument(format!(
                    "Failed to parse int parameter [size] with value [{v}]"
                ))
            })?,
        };
        if size <= 0 {
            return Err(EngineError::illegal_argument(
                "size must be greater than zero",
            ));
        }
        let order = match params.get("sort").map(String::as_str) {
            None | Some("asc") => Order::Asc,
            Some("desc") => Order::Desc,
            Some(_) => {
                return Err(EngineError::illegal_argument(
                    "value of sort can either be asc or desc",
                ));
            }
        };
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if size < limits.min {
            return Err(EngineError::illegal_argument(format!(
                "size should at least be [{}]",
                limits.min
            )));
        }
        if size > limits.max {
            return Err(EngineError::illegal_argument(format!(
                "size should be less than [{}]",
                limits.max
            )));
        }
        Ok(PageParams {
            size,
            order,
            token: params.get("next_token").cloned(),
        })
    }
}

/// Encodes a page token: `fields` joined by `|`, in URL-safe base64 without padding, so it
/// goes into a URL as it is. Not encrypted: a token carries nothing secret.
pub fn encode_token(fields: &[&str]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(fields.join("|"))
}

/// Decodes a token of exactly `n` fields; `None` when it is not [`encode_token`]'s.
pub fn decode_token(token: &str, n: usize) -> Option<Vec<String>> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let fields: Vec<String> = raw.split('|').map(str::to_string).collect();
    (fields.len() == n).then_some(fields)
}

/// A creation date as a token holds it: a number above zero, as OpenSearch checks it.
fn parse_created(field: &str) -> Result<i64, EngineError> {
    match field.parse::<i64>() {
        Ok(c) if c > 0 => Ok(c),
        _ => Err(tainted()),
    }
}

/// `_list/indices`' token: the last index of the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexToken {
    /// Its creation date, epoch milliseconds.
    pub created: i64,
    /// Its name.
    pub name: String,
}

impl IndexToken {
    /// Reads a token; OpenSearch's 400 `parse_exception` for one it did not make.
    pub fn parse(token: &str) -> Result<IndexToken, EngineError> {
        let [created, name]: [String; 2] = decode_token(token, 2)
            .and_then(|f| f.try_into().ok())
            .ok_or_else(tainted)?;
        Ok(IndexToken {
            created: parse_created(&created)?,
            name,
        })
    }

    /// The token's text.
    pub fn encode(&self) -> String {
        encode_token(&[&self.created.to_string(), &self.name])
    }
}

/// `_list/shards`' token: the last shard id of the page and its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardToken {
    /// The last shard id listed.
    pub shard: u64,
    /// Its index's creation date, epoch milliseconds.
    pub created: i64,
    /// Its index's name.
    pub name: String,
}

impl ShardToken {
    /// Reads a token; OpenSearch's 400 `parse_exception` for one it did not make.
    pub fn parse(token: &str) -> Result<ShardToken, EngineError> {
        let [shard, created, name]: [String; 3] = decode_token(token, 3)
            .and_then(|f| f.try_into().ok())
            .ok_or_else(tainted)?;
        Ok(ShardToken {
            shard: shard.parse().map_err(|_| tainted())?,
            created: parse_created(&created)?,
            name,
        })
    }

    /// The token's text.
    pub fn encode(&self) -> String {
        encode_token(&[
            &self.shard.to_string(),
            &self.created.to_string(),
            &self.name,
        ])
    }
}

/// How two index keys compare in `order`.
fn sort_key_cmp(a: (i64, &str), b: (i64, &str), order: Order) -> std::cmp::Ordering {
    match order {
        Order::Asc => a.cmp(&b),
        Order::Desc => b.cmp(&a),
    }
}

/// Sorts `items` in the pages' order by their index's (creation date, name).
pub fn sort_items<T>(items: &mut [T], key: &impl Fn(&T) -> (i64, &str), order: Order) {
    items.sort_by(|a, b| sort_key_cmp(key(a), key(b), order));
}

/// Whether an index keyed `(created, name)` comes after the token's in `order`. The token's
/// own name never does, whatever its creation date (OpenSearch's rule).
fn follows((created, name): (i64, &str), created_t: i64, name_t: &str, order: Order) -> bool {
    name != name_t && sort_key_cmp((created, name), (created_t, name_t), order).is_gt()
}

/// The indices of a `_list/indices` page among `items` (each keyed by its index's creation
/// date and name), in order, and the next page's token (`None` on the last page).
pub fn index_page<T>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> (i64, &str),
    page: &PageParams,
    token: Option<&IndexToken>,
) -> (Vec<T>, Option<String>) {
    sort_items(&mut items, &key, page.order);
    if let Some(t) = token {
        items.retain(|it| follows(key(it), t.created, &t.name, page.order));
    }
    let more = items.len() > page.size;
    items.truncate(page.size);
    // Invariant 3: the page is in order (1 follows: no index twice on it).
    debug_assert!(
        items
            .windows(2)
            .all(|w| sort_key_cmp(key(&w[0]), key(&w[1]), page.order).is_lt()),
        "a page is in the pages' order"
    );
    let next = more.then(|| items.last()).flatten().map(|last| {
        let (created, name) = key(last);
        IndexToken {
            created,
            name: name.to_string(),
        }
        .encode()
    });
    (items, next)
}

/// An index's share of a `_list/shards` page: the shard ids listed, each with every copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSpan<T> {
    /// The index.
    pub item: T,
    /// Its shard ids on the page.
    pub shards: Range<u64>,
}

/// The shards of a `_list/shards` page among `items` (each keyed by its index's creation date
/// and name, and laid out as `(number of shards, copies of each)`), in order, and the next
/// page's token (`None` on the last page). A page holds at most `size` rows (one per copy) and
/// all copies of a shard id; an index whose shard id has more copies than `size` is
/// OpenSearch's 400.
pub fn shard_page<T>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> (i64, &str),
    layout: impl Fn(&T) -> (u64, u64),
    page: &PageParams,
    token: Option<&ShardToken>,
) -> Result<(Vec<ShardSpan<T>>, Option<String>), EngineError> {
    sort_items(&mut items, &key, page.order);
    if let Some(t) = token {
        // The token's index stays (by name): the page may resume inside it.
        items.retain(|it| {
            let k = key(it);
            k.1 == t.name || follows(k, t.created, &t.name, page.order)
        });
    }
    let size = page.size as u64;
    let mut rows = 0u64;
    let mut spans = Vec::new();
    let mut last: Option<ShardToken> = None;
    for item in items {
        let (created, name) = key(&item);
        let (shards, copies) = layout(&item);
        // Only the page's first index may be the one the token stopped inside (the same
        // name and creation date: a new index of that name starts at 0).
        let resume = token.filter(|t| rows == 0 && t.name == name && t.created == created);
        let start = resume.map_or(0, |t| t.shard.saturating_add(1));
        let mut end = start;
        let mut full = false;
        while end < shards {
            if copies > size {
                return Err(EngineError::illegal_argument(
                    "size value should be greater than the replica count of all indices",
                ));
            }
            if rows + copies > size {
                full = true;
                break;
            }
            rows += copies;
            end += 1;
        }
        if end > start {
            last = Some(ShardToken {
                shard: end - 1,
                created,
                name: name.to_string(),
            });
            spans.push(ShardSpan {
                item,
                shards: start..end,
            });
        }
        // Invariant 4: whole copy groups, at most `size` rows.
        debug_assert!(rows <= size, "a page holds at most `size` rows");
        if full {
            // A copy group fits an empty page, so the page holds a row when it is full.
            debug_assert!(last.is_some(), "a full page lists a shard");
            return Ok((spans, last.map(|t| t.encode())));
        }
    }
    Ok((spans, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn reason(pairs: &[(&str, &str)], limits: Limits) -> String {
        PageParams::parse(&params(pairs), limits)
            .map(|_| String::new())
            .unwrap_or_else(|e| e.reason)
    }

    #[test]
    fn test_page_params_are_checked_with_opensearch_messages() {
        let ok = PageParams::parse(&params(&[]), INDEX_LIMITS).unwrap();
        assert_eq!((ok.size, ok.order, ok.token), (500, Order::Asc, None));
        let ok = PageParams::parse(&params(&[]), SHARD_LIMITS).unwrap();
        assert_eq!(ok.size, 2000);
        assert_eq!(
            reason(&[("size", "x")], INDEX_LIMITS),
            "Failed to parse int parameter [size] with value [x]"
        );
        assert_eq!(
            reason(&[("size", "0")], INDEX_LIMITS),
            "size must be greater than zero"
        );
        assert_eq!(
            reason(&[("size", "-3")], SHARD_LIMITS),
            "size must be greater than zero"
        );
        assert_eq!(
            reason(&[("sort", "up")], INDEX_LIMITS),
            "value of sort can either be asc or desc"
        );
        assert_eq!(
            reason(&[("size", "5001")], INDEX_LIMITS),
            "size should be less than [5000]"
        );
        assert_eq!(reason(&[("size", "5000")], INDEX_LIMITS), "");
        assert_eq!(
            reason(&[("size", "1999")], SHARD_LIMITS),
            "size should at least be [2000]"
        );
        assert_eq!(
            reason(&[("size", "20001")], SHARD_LIMITS),
            "size should be less than [20000]"
        );
        // `size` is checked before `sort`, as OpenSearch does.
        assert_eq!(
            reason(&[("size", "0"), ("sort", "x")], INDEX_LIMITS),
            "size must be greater than zero"
        );
    }

    #[test]
    fn test_tokens_round_trip_and_refuse_what_they_did_not_make() {
        let t = IndexToken {
            created: 7,
            name: "logs-1".into(),
        };
        assert_eq!(IndexToken::parse(&t.encode()).unwrap(), t);
        let s = ShardToken {
            shard: 3,
            created: 9,
            name: "a".into(),
        };
        assert_eq!(ShardToken::parse(&s.encode()).unwrap(), s);
        let bad = [
            String::new(),
            "!!".into(),
            encode_token(&["7"]),
            encode_token(&["0", "a"]),
            encode_token(&["x", "a"]),
            encode_token(&["-5", "a"]),
            s.encode(),
        ];
        for b in &bad {
            let e = IndexToken::parse(b).unwrap_err();
            assert_eq!(
                (e.code, e.reason.as_str()),
                (ErrorCode::Parse, TAINTED),
                "{b}"
            );
        }
        for b in [encode_token(&["-1", "9", "a"]), t.encode()] {
            assert_eq!(ShardToken::parse(&b).unwrap_err().code, ErrorCode::Parse);
        }
    }

    /// An index of the model: name, creation date, shard count, copies per shard.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Ix {
        name: String,
        created: i64,
        shards: u64,
        copies: u64,
    }

    fn key(i: &Ix) -> (i64, &str) {
        (i.created, i.name.as_str())
    }

    fn page_of(size: usize, order: Order) -> PageParams {
        PageParams {
            size,
            order,
            token: None,
        }
    }

    fn ix(name: &str, created: i64, shards: u64, copies: u64) -> Ix {
        Ix {
            name: name.into(),
            created,
            shards,
            copies,
        }
    }

    #[test]
    fn test_the_last_page_has_no_token() {
        let items = vec![ix("a", 1, 1, 1), ix("b", 2, 1, 1)];
        let (page, next) = index_page(items.clone(), key, &page_of(2, Order::Asc), None);
        assert_eq!(page.len(), 2);
        assert_eq!(next, None, "nothing follows an exactly full last page");
        let (page, next) = index_page(items.clone(), key, &page_of(1, Order::Desc), None);
        assert_eq!(page[0].name, "b");
        let t = IndexToken::parse(&next.unwrap()).unwrap();
        let (page, next) = index_page(items.clone(), key, &page_of(1, Order::Desc), Some(&t));
        assert_eq!((page[0].name.as_str(), next), ("a", None));
        let (spans, next) = shard_page(
            items,
            key,
            |i| (i.shards, i.copies),
            &page_of(2, Order::Asc),
            None,
        )
        .unwrap();
        assert_eq!((spans.len(), next), (2, None));
    }

    #[test]
    fn test_the_tokens_index_is_not_listed_again_even_made_anew() {
        // `b` ended the last page, then was deleted and made again (a later date).
        let token = IndexToken {
            created: 5,
            name: "b".into(),
        };
        let items = vec![ix("a", 1, 1, 1), ix("c", 7, 1, 1), ix("b", 9, 1, 1)];
        let (page, next) = index_page(items, key, &page_of(10, Order::Asc), Some(&token));
        let names: Vec<&str> = page.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            (names, next),
            (vec!["c"], None),
            "OpenSearch's rule: by name"
        );
    }

    #[test]
    fn test_a_shard_id_with_more_copies_than_size_is_refused() {
        let items = vec![ix("a", 1, 2, 3)];
        let e = shard_page(
            items,
            key,
            |i| (i.shards, i.copies),
            &page_of(2, Order::Asc),
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::IllegalArgument);
        assert!(e.reason.contains("replica count"), "{}", e.reason);
    }

    #[test]
    fn test_a_shard_page_resumes_inside_the_index_it_stopped_in() {
        let items = vec![ix("a", 1, 3, 2), ix("b", 2, 2, 2)];
        let layout = |i: &Ix| (i.shards, i.copies);
        let (spans, next) =
            shard_page(items.clone(), key, layout, &page_of(5, Order::Asc), None).unwrap();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].shards, 0..2, "two copy pairs fit five rows");
        let t = ShardToken::parse(&next.unwrap()).unwrap();
        let (spans, next) =
            shard_page(items, key, layout, &page_of(5, Order::Asc), Some(&t)).unwrap();
        let got: Vec<(&str, Range<u64>)> = spans
            .iter()
            .map(|s| (s.item.name.as_str(), s.shards.clone()))
            .collect();
        assert_eq!(got, [("a", 2..3), ("b", 0..1)]);
        assert!(next.is_some());
    }

    /// A change between two pages of the model walk.
    #[derive(Debug, Clone)]
    enum Change {
        Create(u8),
        Delete(usize),
    }

    fn changes() -> impl Strategy<Value = Vec<Vec<Change>>> {
        let change = prop_oneof![
            (0u8..40).prop_map(Change::Create),
            (0usize..64).prop_map(Change::Delete),
        ];
        prop::collection::vec(prop::collection::vec(change, 0..3), 0..40)
    }

    /// The model's indices: a few present at the start, more made (with later creation dates,
    /// some sharing a millisecond) and some deleted between pages.
    struct World {
        live: Vec<Ix>,
        clock: i64,
        made: u64,
    }

    impl World {
        fn new(start: &[(u8, u64, u64)]) -> World {
            let mut w = World {
                live: Vec::new(),
                clock: 1,
                made: 0,
            };
            for &(tick, shards, copies) in start {
                w.create(tick % 3, shards, copies);
            }
            w
        }

        fn create(&mut self, tick: u8, shards: u64, copies: u64) {
            self.clock += i64::from(tick % 2);
            self.made += 1;
            // Names in another order than creation (37 is prime to 1000: none repeats).
            let name = format!("i{:03}", (self.made * 37) % 1000);
            self.live.push(ix(&name, self.clock, shards, copies));
        }

        fn apply(&mut self, changes: &[Change]) {
            for c in changes {
                match c {
                    Change::Create(t) => {
                        self.create(*t, 1 + u64::from(*t % 4), 1 + u64::from(*t % 3))
                    }
                    Change::Delete(n) if !self.live.is_empty() => {
                        let n = n % self.live.len();
                        self.live.remove(n);
                    }
                    Change::Delete(_) => {}
                }
            }
        }
    }

    fn in_order(a: &Ix, b: &Ix, order: Order) -> bool {
        match order {
            Order::Asc => key(a) < key(b),
            Order::Desc => key(a) > key(b),
        }
    }

    proptest! {
        #[test]
        fn test_a_walk_lists_each_lasting_index_once_in_order(
            start in prop::collection::vec((0u8..3, 1u64..4, 1u64..3), 0..25),
            size in 1usize..6,
            desc in any::<bool>(),
            between in changes(),
        ) {
            let order = if desc { Order::Desc } else { Order::Asc };
            let mut world = World::new(&start);
            let initial = world.live.clone();
            let mut seen: Vec<Ix> = Vec::new();
            let mut token: Option<IndexToken> = None;
            let mut step = 0;
            loop {
                let (page, next) =
                    index_page(world.live.clone(), key, &page_of(size, order), token.as_ref());
                prop_assert!(page.len() <= size);
                seen.extend(page);
                let Some(next) = next else { break };
                token = Some(IndexToken::parse(&next).unwrap());
                world.apply(between.get(step).map_or(&[][..], Vec::as_slice));
                step += 1;
                prop_assert!(step < 500, "the walk ends");
            }
            // 1 and 3: each index once, in order.
            for w in seen.windows(2) {
                prop_assert!(in_order(&w[0], &w[1], order), "{:?} then {:?}", w[0], w[1]);
            }
            // 2: every index present from the first page to the last is listed.
            for i in initial.iter().filter(|i| world.live.contains(i)) {
                prop_assert!(seen.contains(i), "{i:?} missed");
            }
        }

        #[test]
        fn test_a_shard_walk_lists_each_lasting_shard_once_in_order(
            start in prop::collection::vec((0u8..3, 1u64..6, 1u64..4), 0..20),
            size in 3usize..9,
            desc in any::<bool>(),
            between in changes(),
        ) {
            let order = if desc { Order::Desc } else { Order::Asc };
            let mut world = World::new(&start);
            let initial = world.live.clone();
            let mut rows_of: BTreeMap<(i64, String), BTreeSet<u64>> = BTreeMap::new();
            let mut seen: Vec<(Ix, u64)> = Vec::new();
            let mut token: Option<ShardToken> = None;
            let mut step = 0;
            loop {
                let (spans, next) = shard_page(
                    world.live.clone(),
                    key,
                    |i| (i.shards, i.copies),
                    &page_of(size, order),
                    token.as_ref(),
                )
                .unwrap();
                // 4: at most `size` rows, whole copy groups.
                let rows: u64 = spans
                    .iter()
                    .map(|s| (s.shards.end - s.shards.start) * s.item.copies)
                    .sum();
                prop_assert!(rows <= size as u64);
                for s in spans {
                    for shard in s.shards.clone() {
                        let fresh = rows_of
                            .entry((s.item.created, s.item.name.clone()))
                            .or_default()
                            .insert(shard);
                        prop_assert!(fresh, "{:?} shard {shard} twice", s.item);
                        seen.push((s.item.clone(), shard));
                    }
                }
                let Some(next) = next else { break };
                token = Some(ShardToken::parse(&next).unwrap());
                world.apply(between.get(step).map_or(&[][..], Vec::as_slice));
                step += 1;
                prop_assert!(step < 2000, "the walk ends");
            }
            // 3: indices in order, an index's shard ids ascending.
            for w in seen.windows(2) {
                let ((a, sa), (b, sb)) = (&w[0], &w[1]);
                if a == b {
                    prop_assert!(sa < sb, "{a:?}: {sa} then {sb}");
                } else {
                    prop_assert!(in_order(a, b, order), "{a:?} then {b:?}");
                }
            }
            // 2: every shard of every lasting index.
            for i in initial.iter().filter(|i| world.live.contains(i)) {
                let got = rows_of.get(&(i.created, i.name.clone())).cloned().unwrap_or_default();
                prop_assert_eq!(got, (0..i.shards).collect::<BTreeSet<u64>>(), "{:?}", i);
            }
        }
    }
}
