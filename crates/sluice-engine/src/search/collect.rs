//! Collection: each index prepared (searcher snapshot, query, sort columns, aggregations), then
//! one loop over every segment of every index that keeps the top hits, counts the total, feeds
//! the aggregation collectors and checks the [`SearchContext`] as it goes; finally the
//! aggregation results merged across indices.
//!
//! The loop drives each segment's scorer itself (instead of a tantivy `Collector`) so that it
//! can check the context every [`CHECK_EVERY_DOCS`] documents and between segments.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tantivy::collector::Collector;
use tantivy::query::{EnableScoring, Query};
use tantivy::{DocSet, Score, Searcher, TERMINATED};

use super::context::{SearchContext, cancelled};
use super::profile::{AggTimes, ShardProfile, nanos_since};
use super::request::{SearchRequest, TrackTotalHits};
use super::sort::{
    self, Candidate, FieldReader, HeapEntry, SortField, SortSpec, SortValue, cmp_candidates,
};
use crate::error::{EngineError, ErrorCode, Result};
use crate::index::IndexHandle;
use crate::lookup::TermsLookups;
use crate::mapping::FieldType;
use crate::query::{QueryContext, build_query};
use crate::resolve::Target;

/// How many documents the collection loop handles between two checks of the cancellation flag
/// and the deadline: a few thousand documents take well under a millisecond, so a cancelled
/// search stops within milliseconds while the check stays off the profile.
pub const CHECK_EVERY_DOCS: u32 = 4096;

/// What the collection of one search produced.
pub(super) struct Collected {
    pub(super) hits: Vec<Candidate>,
    pub(super) total: u64,
    pub(super) max_score: Option<Score>,
    pub(super) timed_out: bool,
    /// With `terminate_after`: whether an index stopped at the limit with matches left
    /// (`terminated_early`); `None` without it.
    pub(super) terminated_early: Option<bool>,
    /// Each index's timings, when the request asked for a profile.
    pub(super) profiles: Vec<ShardProfile>,
}

/// Per-index state prepared before collection; a scroll keeps it (searcher snapshot included)
/// for its later pages.
pub(crate) struct Prepared {
    pub(super) handle: Arc<IndexHandle>,
    pub(super) searcher: Searcher,
    query: Box<dyn Query>,
    /// The request's `post_filter`, which only hits must match (aggregations see every match
    /// of `query`).
    post_filter: Option<Box<dyn Query>>,
    /// Column name and field type for each sort field (`None` for unmapped).
    pub(super) sort_columns: Vec<Option<(String, FieldType)>>,
    /// The aggregations to compute; a scroll clears them after its first page.
    pub(crate) aggs: Option<crate::aggs::PreparedAggs>,
    /// How long building the query from the DSL took (a profile's `rewrite_time`).
    rewrite_nanos: u64,
}

impl Prepared {
    /// The index this state searches.
    pub(crate) fn handle(&self) -> &Arc<IndexHandle> {
        &self.handle
    }

    /// The index's query.
    pub(super) fn query(&self) -> &dyn Query {
        self.query.as_ref()
    }
}

/// Checks the result window, takes a searcher snapshot of each index and builds its query,
/// sort columns and aggregations. `terms` lookups resolve through `lookups`, once per request;
/// a failed lookup fails the request with its own error rather than as a shard failure.
pub(crate) fn prepare(
    targets: &[Target],
    req: &SearchRequest,
    now_millis: i64,
    max_buckets: Option<u32>,
    lookups: Option<&TermsLookups<'_>>,
) -> Result<Vec<Prepared>> {
    // The request's own limit (the cluster's `search.max_buckets`, set by the server) wins.
    let max_buckets = req.max_buckets.or(max_buckets);
    let indices: Vec<&Arc<IndexHandle>> = targets.iter().map(|t| &t.handle).collect();
    let window = indices
        .iter()
        .map(|h| h.max_result_window())
        .min()
        .unwrap_or(crate::index::DEFAULT_MAX_RESULT_WINDOW);
    if req.from.saturating_add(req.size) > window {
        return Err(EngineError::illegal_argument(format!(
            "Result window is too large, from + size must be less than or equal to: [{window}] but was [{}]. See the scroll api for a more efficient way to request large data sets. This limit can be set by changing the [index.max_result_window] index level setting.",
            req.from.saturating_add(req.size)
        ))
        .with_index(indices.first().map(|h| h.name().to_string()).unwrap_or_default())
        .into_search_phase_failure());
    }
    let mut prepared = Vec::with_capacity(indices.len());
    for target in targets {
        let h = &target.handle;
        let mapping = h.mapping();
        let qctx = QueryContext {
            mapping: &mapping,
            fields: h.fields(),
            index: h.tantivy(),
            now_millis,
            index_name: h.name(),
            max_terms_count: h.max_terms_count(),
            lookups,
        };
        let failed = |e: EngineError| {
            lookups
                .and_then(TermsLookups::take_failure)
                .unwrap_or_else(|| shard_failure(e, h))
        };
        // An alias filter narrows the query without scoring, as OpenSearch's alias filter.
        let filtered;
        let query_json = match &target.filter {
            Some(filter) => {
                filtered = serde_json::json!({"bool": {"must": [req.query], "filter": [filter]}});
                &filtered
            }
            None => &req.query,
        };
        let built = Instant::now();
        let query = build_query(query_json, &qctx).map_err(failed)?;
        let post_filter = match &req.post_filter {
            Some(pf) => Some(build_query(pf, &qctx).map_err(failed)?),
            None => None,
        };
        let rewrite_nanos = nanos_since(built);
        let mut sort_columns = Vec::new();
        for spec in &req.sort {
            if let SortField::Field(name) = &spec.field {
                let col = match mapping.resolve(name) {
                    Some(f) => match f.fast_field_name() {
                        Some(c) => Some((c, f.ty)),
                        None => {
                            return Err(shard_failure(
                                EngineError::illegal_argument(format!(
                                    "Text fields are not optimised for operations that require per-document field data like aggregations and sorting, so these operations are disabled by default. Please use a keyword field instead. Alternatively, set fielddata=true on [{name}] in order to load field data by uninverting the inverted index. Note that this can use significant memory."
                                )),
                                h,
                            ));
                        }
                    },
                    None => {
                        if spec.unmapped_ok {
                            None
                        } else {
                            return Err(shard_failure(
                                EngineError::new(
                                    ErrorCode::QueryShard,
                                    format!("No mapping found for [{name}] in order to sort on"),
                                ),
                                h,
                            ));
                        }
                    }
                };
                sort_columns.push(col);
            } else {
                sort_columns.push(None);
            }
        }
        let aggs = match &req.aggs {
            Some(a) => Some(crate::aggs::prepare(a, &qctx, max_buckets).map_err(failed)?),
            None => None,
        };
        prepared.push(Prepared {
            handle: h.clone(),
            searcher: h.searcher(),
            query,
            post_filter,
            sort_columns,
            aggs,
            rewrite_nanos,
        });
    }
    Ok(prepared)
}

/// The `search_after` cursor of `req` over prepared indices ([`sort::search_after_cursor`]):
/// a sort field's type is the first type an index maps it to, and a refusal fails the search
/// as a failure of the first index's shard.
pub(super) fn search_after_cursor(
    prepared: &[Prepared],
    req: &SearchRequest,
) -> Result<Option<Candidate>> {
    let fail = |reason: String| {
        let e = EngineError::illegal_argument(reason);
        match prepared.first() {
            Some(p) => shard_failure(e, &p.handle),
            None => e.into_search_phase_failure(),
        }
    };
    let column_type = |i: usize| {
        prepared.iter().find_map(|p| {
            p.sort_columns
                .get(i)
                .and_then(|c| c.as_ref().map(|(_, t)| *t))
        })
    };
    sort::search_after_cursor(
        req.search_after.as_deref(),
        req.from,
        &req.sort,
        column_type,
        fail,
    )
}

fn shard_failure(e: EngineError, h: &IndexHandle) -> EngineError {
    let e = if e.index.is_none()
        && matches!(
            e.code,
            ErrorCode::QueryShard | ErrorCode::IllegalArgument | ErrorCode::AggregationExecution
        ) {
        e.with_index(h.name())
    } else {
        e
    };
    e.into_search_phase_failure()
}

pub(super) type AggFruits = Vec<Option<crate::aggs::AggFruit>>;

/// Collects the top hits (after `after`, when given), the total and the aggregations.
///
/// In `_doc` order with nothing else to compute (no total, no aggregations, no scores to
/// report) an index's documents arrive in sort order, so collection skips the documents before
/// `after` and stops an index at its first document that does not make the page: a scroll
/// page sorted on `_doc` costs its page, not a pass over every match.
pub(super) fn collect(
    prepared: &[Prepared],
    req: &SearchRequest,
    ctx: &SearchContext,
    after: Option<&Candidate>,
) -> Result<(AggFruits, Collected)> {
    let k = req.from.saturating_add(req.size) as usize;
    let by_score_only = req.sort.is_empty();
    let specs: Vec<SortSpec> = if by_score_only {
        vec![SortSpec {
            field: SortField::Score,
            desc: true,
            missing_first: false,
            unmapped_ok: false,
        }]
    } else {
        req.sort.clone()
    };
    let needs_scores = specs.iter().any(|s| s.field == SortField::Score)
        || req.track_scores
        || req.min_score.is_some();
    let mut heap: BinaryHeap<HeapEntry<'_>> = BinaryHeap::with_capacity(k.min(100_000) + 1);
    let mut total = 0u64;
    let mut max_score: Option<Score> = None;
    let mut timed_out = false;
    let mut terminated_early = req.terminate_after.map(|_| false);
    let mut fruits = Vec::with_capacity(prepared.len());
    let mut since_check = 0u32;
    let mut buf = String::new();
    let profiling = req.profile;
    // A clock read only when profiling.
    let now = || profiling.then(Instant::now);
    let mut profiles = Vec::new();
    // `terminate_after` counts every match from an index's first document, so none is skipped.
    let doc_order = specs[0].field == SortField::Doc
        && req.terminate_after.is_none()
        && !specs[0].desc
        && req.track_total_hits == TrackTotalHits::Off
        && !req.track_scores;
    'indices: for (ipos, p) in prepared.iter().enumerate() {
        // Matches of this index so far, for `terminate_after` (OpenSearch's
        // `EarlyTerminatingCollector` counts before the post filter and `min_score`).
        let mut num_collected = 0u64;
        let may_stop = doc_order && p.aggs.is_none();
        // The first index-wide doc id that can sort after `after`.
        let first_doc = match after.map(|a| &a.keys[0]) {
            Some(SortValue::Num(n)) if may_stop => *n as u32,
            _ => 0,
        };
        let mut index_done = false;
        let mut prof = profiling.then(|| ShardProfile {
            index: p.handle.name().to_string(),
            query_debug: format!("{:?}", p.query),
            rewrite: p.rewrite_nanos,
            ..ShardProfile::default()
        });
        let enable = if needs_scores {
            EnableScoring::enabled_from_searcher(&p.searcher)
        } else {
            EnableScoring::disabled_from_searcher(&p.searcher)
        };
        let t = now();
        let weight = p.query.weight(enable).map_err(|e| {
            shard_failure(
                EngineError::query_shard(format!("failed to create query: {e}")),
                &p.handle,
            )
        })?;
        if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
            pr.query.create_weight = nanos_since(t);
        }
        // The post filter only decides which matches are hits: it never scores.
        let post_filter_weight = match &p.post_filter {
            Some(q) => Some(
                q.weight(EnableScoring::disabled_from_searcher(&p.searcher))
                    .map_err(|e| {
                        shard_failure(
                            EngineError::query_shard(format!("failed to create query: {e}")),
                            &p.handle,
                        )
                    })?,
            ),
            None => None,
        };
        // One collector for all aggregations, or one per top-level aggregation when profiling
        // (so each can be timed); their fruits merge into one.
        let agg_collectors: Vec<crate::aggs::AggCollector> = match (&p.aggs, prof.as_mut()) {
            (None, _) => Vec::new(),
            (Some(a), None) => vec![a.collector()],
            (Some(a), Some(pr)) => a
                .profiled_parts()
                .into_iter()
                .map(|part| {
                    let t = Instant::now();
                    let collector = a.collector_of(&part);
                    pr.aggs.push(AggTimes {
                        name: part.name,
                        class: part.class,
                        initialize: nanos_since(t),
                        ..AggTimes::default()
                    });
                    collector
                })
                .collect(),
        };
        let mut seg_fruits: Vec<Vec<_>> = agg_collectors.iter().map(|_| Vec::new()).collect();
        // The index-wide doc id of a segment's first document, as OpenSearch's `_doc` sort
        // values are index-wide.
        let mut seg_base = 0u32;
        for (seg_ord, seg) in p.searcher.segment_readers().iter().enumerate() {
            let base = seg_base;
            seg_base += seg.max_doc();
            if seg_base <= first_doc {
                continue;
            }
            if ctx.is_cancelled() {
                return Err(cancelled());
            }
            if ctx.is_past_deadline() {
                timed_out = true;
                break 'indices;
            }
            let readers = specs
                .iter()
                .zip(p.sort_columns.iter().chain(std::iter::repeat(&None)))
                .map(|(s, col)| match s.field {
                    SortField::Field(_) => {
                        FieldReader::open(seg, col.as_ref().map(|(c, _)| c.as_str()))
                    }
                    SortField::Id => FieldReader::open_id(seg, p.handle.fields().id),
                    _ => Ok(FieldReader::Missing),
                })
                .collect::<Result<Vec<_>>>()?;
            let mut seg_aggs = Vec::with_capacity(agg_collectors.len());
            for (i, c) in agg_collectors.iter().enumerate() {
                let t = now();
                seg_aggs.push(
                    c.for_segment(seg_ord as u32, seg)
                        .map_err(crate::aggs::classify_error)?,
                );
                if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                    pr.aggs[i].build_leaf_collector += nanos_since(t);
                    pr.aggs[i].build_leaf_collector_count += 1;
                }
            }
            let seq_nos = seg.fast_fields().u64(crate::schema::SEQ_NO_FIELD).ok();
            let t = now();
            let mut scorer = weight
                .scorer(seg, 1.0)
                .map_err(crate::error::tantivy_error)?;
            if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                pr.query.build_scorer += nanos_since(t);
                pr.query.build_scorer_count += 1;
            }
            let mut post_filter = match &post_filter_weight {
                Some(w) => Some(w.scorer(seg, 1.0).map_err(crate::error::tantivy_error)?),
                None => None,
            };
            let alive = seg.alive_bitset();
            let mut doc = scorer.doc();
            let target = first_doc.saturating_sub(base);
            if doc != TERMINATED && target > doc {
                let t = now();
                doc = scorer.seek(target);
                if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                    pr.query.advance += nanos_since(t);
                    pr.query.advance_count += 1;
                }
            }
            while doc != TERMINATED {
                since_check += 1;
                if since_check >= CHECK_EVERY_DOCS {
                    since_check = 0;
                    if ctx.is_cancelled() {
                        return Err(cancelled());
                    }
                    if ctx.is_past_deadline() {
                        timed_out = true;
                        break;
                    }
                }
                if alive.is_none_or(|b| b.is_alive(doc)) {
                    if let Some(limit) = req.terminate_after {
                        if num_collected == limit {
                            terminated_early = Some(true);
                            index_done = true;
                            break;
                        }
                        num_collected += 1;
                    }
                    let score = if needs_scores {
                        let t = now();
                        let score = scorer.score();
                        if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                            pr.query.score += nanos_since(t);
                            pr.query.score_count += 1;
                        }
                        score
                    } else {
                        0.0
                    };
                    if req.min_score.is_none_or(|m| score >= m) {
                        for (i, a) in seg_aggs.iter_mut().enumerate() {
                            let t = now();
                            tantivy::collector::SegmentCollector::collect(a, doc, score);
                            if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                                pr.aggs[i].collect += nanos_since(t);
                                pr.aggs[i].collect_count += 1;
                            }
                        }
                    }
                    // Both scorers go forward only, in doc order: the post filter catches up
                    // with the query's document.
                    let is_hit = req.min_score.is_none_or(|m| score >= m)
                        && post_filter.as_mut().is_none_or(|pf| {
                            let at = if pf.doc() < doc {
                                pf.seek(doc)
                            } else {
                                pf.doc()
                            };
                            at == doc
                        });
                    if is_hit {
                        total += 1;
                        if needs_scores {
                            max_score = Some(max_score.map_or(score, |m: Score| m.max(score)));
                        }
                        let hits_started = now();
                        if k > 0 || may_stop {
                            let keys = specs
                                .iter()
                                .zip(&readers)
                                .map(|(s, r)| match s.field {
                                    SortField::Score => SortValue::Num(f64::from(score)),
                                    SortField::Doc => SortValue::Num(f64::from(base + doc)),
                                    SortField::Field(_) | SortField::Id => {
                                        r.value(doc, s.desc, &mut buf)
                                    }
                                })
                                .collect();
                            let c = Candidate {
                                keys,
                                score,
                                at: (
                                    ipos,
                                    seq_nos
                                        .as_ref()
                                        .and_then(|c| c.first(doc))
                                        .unwrap_or(u64::MAX),
                                    seg_ord as u32,
                                    doc,
                                ),
                            };
                            if after
                                .is_some_and(|a| cmp_candidates(&specs, &c, a) != Ordering::Greater)
                            {
                                // At or before the cursor: an earlier page returned it.
                            } else if heap.len() < k {
                                heap.push(HeapEntry { c, specs: &specs });
                            } else if heap
                                .peek()
                                .is_some_and(|w| cmp_candidates(&specs, &c, &w.c) == Ordering::Less)
                            {
                                heap.pop();
                                heap.push(HeapEntry { c, specs: &specs });
                            } else if may_stop {
                                // Every later document of this index sorts after this one
                                // (the loop stops below, once the collector time is counted).
                                index_done = true;
                            }
                        }
                        if let (Some(pr), Some(t)) = (prof.as_mut(), hits_started) {
                            pr.hits_collector += nanos_since(t);
                        }
                        if index_done {
                            break;
                        }
                    }
                }
                let t = now();
                doc = scorer.advance();
                if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                    pr.query.next_doc += nanos_since(t);
                    pr.query.next_doc_count += 1;
                }
            }
            for (i, a) in seg_aggs.into_iter().enumerate() {
                let t = now();
                seg_fruits[i].push(tantivy::collector::SegmentCollector::harvest(a));
                if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                    pr.aggs[i].post_collection += nanos_since(t);
                    pr.aggs[i].post_collection_count += 1;
                }
            }
            if timed_out || index_done {
                break;
            }
        }
        // Harvesting and merging a heavy aggregation's segments can take as long as collecting
        // them; a task cancelled meanwhile stops here instead of merging.
        if ctx.is_cancelled() {
            return Err(cancelled());
        }
        let mut fruit: Option<crate::aggs::AggFruit> = None;
        for (i, (c, segs)) in agg_collectors.iter().zip(seg_fruits).enumerate() {
            let t = now();
            let merged = c.merge_fruits(segs).map_err(crate::aggs::classify_error)?;
            if let (Some(pr), Some(t)) = (prof.as_mut(), t) {
                pr.aggs[i].build_aggregation += nanos_since(t);
            }
            fruit = Some(match fruit {
                None => merged,
                Some(f) => crate::aggs::merge(f, merged)?,
            });
        }
        fruits.push(fruit);
        profiles.extend(prof);
        if timed_out {
            break;
        }
    }
    let mut hits: Vec<Candidate> = heap.into_iter().map(|e| e.c).collect();
    hits.sort_by(|a, b| cmp_candidates(&specs, a, b));
    Ok((
        fruits,
        Collected {
            hits,
            total,
            max_score,
            timed_out,
            terminated_early,
            profiles,
        },
    ))
}

/// Merges the indices' aggregation results and renders them; checks for cancellation before
/// each merge and before the final stage (bucket finishing), the parts of a heavy aggregation
/// that run after the last document. `typed_keys` names them `type#name`.
pub(super) fn finish_aggs(
    prepared: &[Prepared],
    collected: &(AggFruits, Collected),
    ctx: &SearchContext,
    typed_keys: bool,
) -> Result<Value> {
    let mut merged: Option<crate::aggs::AggFruit> = None;
    for f in collected.0.iter().flatten() {
        if ctx.is_cancelled() {
            return Err(cancelled());
        }
        merged = Some(match merged {
            None => f.clone(),
            Some(m) => crate::aggs::merge(m, f.clone())?,
        });
    }
    let all: Vec<&crate::aggs::PreparedAggs> =
        prepared.iter().filter_map(|p| p.aggs.as_ref()).collect();
    let first = all
        .first()
        .ok_or_else(|| EngineError::internal("aggregations not prepared"))?;
    if ctx.is_cancelled() {
        return Err(cancelled());
    }
    match merged {
        Some(m) => crate::aggs::finish_all(m, &all, typed_keys),
        None => crate::aggs::finish_empty(first, typed_keys),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::engine::Engine;
    use crate::index::{DocOp, OpType};
    use crate::search::{SearchContext, SearchRequest};
    use serde_json::{Value, json};

    /// An engine with index `shop`: ten products over two segments, six of them `books`.
    fn shop() -> (tempfile::TempDir, Engine) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let engine = Engine::open(tmp.path()).expect("engine");
        engine
            .create_index(
                "shop",
                &json!({"mappings": {"properties": {
                    "category": {"type": "keyword"}, "title": {"type": "text"}}}}),
            )
            .expect("created");
        for half in 0..2 {
            let ops = (0..5)
                .map(|i| {
                    let n = half * 5 + i;
                    let category = if n % 5 < 3 { "books" } else { "music" };
                    (
                        "shop".to_string(),
                        DocOp::index(
                            Some(format!("p{n}")),
                            json!({"category": category, "title": format!("fox {n}")}),
                            OpType::Index,
                        ),
                    )
                })
                .collect();
            for r in engine.bulk(ops) {
                r.expect("indexed");
            }
            engine.refresh("shop").expect("refreshed");
        }
        (tmp, engine)
    }

    fn ids(resp: &Value) -> Vec<String> {
        resp["hits"]["hits"]
            .as_array()
            .unwrap_or_else(|| panic!("no hits in {resp}"))
            .iter()
            .map(|h| h["_id"].as_str().expect("id").to_string())
            .collect()
    }

    #[test]
    fn test_post_filter_narrows_hits_and_total_but_not_aggregations() {
        let (_tmp, engine) = shop();
        let ctx = SearchContext::default();
        let body = json!({
            "query": {"match": {"title": "fox"}},
            "aggs": {"category": {"terms": {"field": "category"}}},
            "post_filter": {"term": {"category": "music"}},
            "sort": ["_id"],
        });
        let resp = engine.search("shop", &body, &ctx).expect("search");
        assert_eq!(ids(&resp), ["p3", "p4", "p8", "p9"], "{resp}");
        assert_eq!(resp["hits"]["total"]["value"], 4, "{resp}");
        assert_eq!(
            resp["aggregations"]["category"]["buckets"],
            json!([{"key": "books", "doc_count": 6}, {"key": "music", "doc_count": 4}]),
            "{resp}"
        );
        // Scored hits: the post filter keeps the query's scores and max_score is of its hits.
        let resp = engine
            .search(
                "shop",
                &json!({"query": {"match": {"title": "fox"}},
                        "post_filter": {"bool": {"must_not": {"term": {"category": "music"}}}}}),
                &ctx,
            )
            .expect("search");
        assert_eq!(resp["hits"]["total"]["value"], 6, "{resp}");
        assert!(resp["hits"]["max_score"].as_f64().is_some(), "{resp}");
        // A scroll's pages keep the post filter.
        let req = SearchRequest::parse(
            Some(&json!({"size": 2, "post_filter": {"term": {"category": "books"}}})),
            &Default::default(),
        )
        .expect("request");
        let first = engine
            .open_scroll("shop", &req, Duration::from_secs(60), &ctx)
            .expect("scroll");
        assert_eq!(first["hits"]["total"]["value"], 6, "{first}");
        let id = first["_scroll_id"].as_str().expect("scroll id").to_string();
        let mut all = ids(&first);
        loop {
            let page = engine.continue_scroll(&id, None, &ctx).expect("page");
            let got = ids(&page);
            if got.is_empty() {
                break;
            }
            all.extend(got);
            assert!(all.len() <= 10, "scroll never ends: {all:?}");
        }
        all.sort();
        assert_eq!(all, ["p0", "p1", "p2", "p5", "p6", "p7"]);
    }

    #[test]
    fn test_terminate_after_stops_each_index_at_the_limit_and_says_so() {
        let (_tmp, engine) = shop();
        let ctx = SearchContext::default();
        let body = json!({
            "terminate_after": 3,
            "aggs": {"category": {"terms": {"field": "category"}}},
        });
        let resp = engine.search("shop", &body, &ctx).expect("search");
        assert_eq!(resp["terminated_early"], true, "{resp}");
        assert_eq!(resp["hits"]["total"]["value"], 3, "{resp}");
        assert_eq!(ids(&resp).len(), 3, "{resp}");
        let counted: u64 = resp["aggregations"]["category"]["buckets"]
            .as_array()
            .expect("buckets")
            .iter()
            .map(|b| b["doc_count"].as_u64().expect("count"))
            .sum();
        assert_eq!(
            counted, 3,
            "aggregations see the collected matches only: {resp}"
        );
        // The limit counts matches before the post filter, as OpenSearch's does.
        let resp = engine
            .search(
                "shop",
                &json!({"terminate_after": 5, "post_filter": {"term": {"category": "books"}}}),
                &ctx,
            )
            .expect("search");
        assert_eq!(resp["terminated_early"], true, "{resp}");
        assert!(
            resp["hits"]["total"]["value"].as_u64().expect("total") <= 5,
            "{resp}"
        );
        // Reaching the limit with nothing left is no early termination; 0 is no limit.
        for (limit, early) in [(10, Some(false)), (50, Some(false)), (0, None)] {
            let resp = engine
                .search("shop", &json!({"terminate_after": limit}), &ctx)
                .expect("search");
            assert_eq!(resp["hits"]["total"]["value"], 10, "{resp}");
            assert_eq!(
                resp.get("terminated_early").cloned(),
                early.map(Value::from),
                "{resp}"
            );
        }
        let resp = engine.search("shop", &json!({}), &ctx).expect("search");
        assert!(resp.get("terminated_early").is_none(), "{resp}");
    }
}
