//! `profile: true`: the timings of a search, measured while it runs and rendered in
//! OpenSearch's `profile` section.
//!
//! Each index is one shard (`[node][index][0]`) with one search: its query (one entry for the
//! whole tantivy query), `rewrite_time`, its collectors and its top-level aggregations. What is
//! measured, in nanoseconds of wall time on the searching thread:
//!
//! - `rewrite_time`: building the tantivy query from the DSL (analysis, term and range
//!   resolution), the step that plays Lucene's rewrite;
//! - query `create_weight`, `build_scorer` (per segment), `next_doc`, `advance` and `score`, with
//!   their counts; `match`, `shallow_advance`, `compute_max_score` and
//!   `set_min_competitive_score` are steps tantivy's scorers do not expose, always 0;
//! - collectors: the top-hits collector (counting, sort values, the priority queue) and the
//!   aggregation collector (the sum of the aggregations' collection);
//! - each top-level aggregation, collected by its own tantivy collector: `initialize` (building
//!   its collector), `build_leaf_collector` (per segment), `collect` (per document),
//!   `post_collection` (harvesting each segment), `build_aggregation` (merging the segments);
//!   `reduce` is 0, as on an OpenSearch shard. Sub-aggregations are collected with their parent
//!   and not listed on their own.

use std::time::Instant;

use serde_json::{Map, Value, json};

/// Nanoseconds since `t`, saturating.
pub(super) fn nanos_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The query's timings on one index.
#[derive(Debug, Default, Clone)]
pub(super) struct QueryTimes {
    pub(super) create_weight: u64,
    pub(super) build_scorer: u64,
    pub(super) build_scorer_count: u64,
    pub(super) next_doc: u64,
    pub(super) next_doc_count: u64,
    pub(super) advance: u64,
    pub(super) advance_count: u64,
    pub(super) score: u64,
    pub(super) score_count: u64,
}

/// One top-level aggregation's timings on one index.
#[derive(Debug, Default, Clone)]
pub(super) struct AggTimes {
    pub(super) name: String,
    pub(super) class: &'static str,
    pub(super) initialize: u64,
    pub(super) build_leaf_collector: u64,
    pub(super) build_leaf_collector_count: u64,
    pub(super) collect: u64,
    pub(super) collect_count: u64,
    pub(super) post_collection: u64,
    pub(super) post_collection_count: u64,
    pub(super) build_aggregation: u64,
}

/// The profile of one index (one shard).
#[derive(Debug, Default, Clone)]
pub(super) struct ShardProfile {
    pub(super) index: String,
    /// The tantivy query, as its `Debug` prints it.
    pub(super) query_debug: String,
    pub(super) rewrite: u64,
    pub(super) query: QueryTimes,
    /// Time in the top-hits collector.
    pub(super) hits_collector: u64,
    pub(super) aggs: Vec<AggTimes>,
}

/// The collector OpenSearch would use for the hits of a search: by score, by sort fields, or
/// only counting.
#[derive(Debug, Clone, Copy)]
pub(super) enum HitsCollector {
    Score,
    Fields,
    Count,
}

impl HitsCollector {
    fn name_and_reason(self) -> (&'static str, &'static str) {
        match self {
            HitsCollector::Score => ("SimpleTopScoreDocCollector", "search_top_hits"),
            HitsCollector::Fields => ("SimpleFieldCollector", "search_top_hits"),
            HitsCollector::Count => ("TotalHitCountCollector", "search_count"),
        }
    }
}

/// The query's class name: the tantivy type its `Debug` output starts with (`TermQuery`,
/// `BooleanQuery`, `AllQuery` …), Lucene's names for the same queries where they exist.
fn query_type(debug: &str) -> &str {
    let end = debug
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(debug.len());
    match &debug[..end] {
        "" => "Query",
        name => name,
    }
}

impl ShardProfile {
    /// Renders the shard's entry of `profile.shards`.
    pub(super) fn render(&self, node: &str, hits: HitsCollector) -> Value {
        let q = &self.query;
        let breakdown = json!({
            "set_min_competitive_score_count": 0,
            "match_count": 0,
            "shallow_advance_count": 0,
            "set_min_competitive_score": 0,
            "next_doc": q.next_doc,
            "match": 0,
            "next_doc_count": q.next_doc_count,
            "score_count": q.score_count,
            "compute_max_score_count": 0,
            "compute_max_score": 0,
            "advance": q.advance,
            "advance_count": q.advance_count,
            "score": q.score,
            "build_scorer_count": q.build_scorer_count,
            "create_weight": q.create_weight,
            "shallow_advance": 0,
            "create_weight_count": 1,
            "build_scorer": q.build_scorer,
        });
        let query_time = q.create_weight + q.build_scorer + q.next_doc + q.advance + q.score;
        let (name, reason) = hits.name_and_reason();
        let hits_json = json!({
            "name": name,
            "reason": reason,
            "time_in_nanos": self.hits_collector,
        });
        let collector = if self.aggs.is_empty() {
            hits_json
        } else {
            let agg_time: u64 = self
                .aggs
                .iter()
                .map(|a| a.build_leaf_collector + a.collect + a.post_collection)
                .sum();
            let names: Vec<&str> = self.aggs.iter().map(|a| a.name.as_str()).collect();
            json!({
                "name": "MultiCollector",
                "reason": "search_multi",
                "time_in_nanos": self.hits_collector + agg_time,
                "children": [
                    hits_json,
                    {
                        "name": format!("MultiBucketCollector: [[{}]]", names.join(", ")),
                        "reason": "aggregation",
                        "time_in_nanos": agg_time,
                    }
                ]
            })
        };
        let aggs: Vec<Value> = self.aggs.iter().map(AggTimes::render).collect();
        let mut shard = Map::new();
        shard.insert(
            "id".into(),
            Value::from(format!("[{node}][{}][0]", self.index)),
        );
        shard.insert("inbound_network_time_in_millis".into(), json!(0));
        shard.insert("outbound_network_time_in_millis".into(), json!(0));
        shard.insert(
            "searches".into(),
            json!([{
                "query": [{
                    "type": query_type(&self.query_debug),
                    "description": self.query_debug,
                    "time_in_nanos": query_time,
                    "breakdown": breakdown,
                }],
                "rewrite_time": self.rewrite,
                "collector": [collector],
            }]),
        );
        shard.insert("aggregations".into(), Value::Array(aggs));
        Value::Object(shard)
    }
}

impl AggTimes {
    fn render(&self) -> Value {
        let time = self.initialize
            + self.build_leaf_collector
            + self.collect
            + self.post_collection
            + self.build_aggregation;
        json!({
            "type": self.class,
            "description": self.name,
            "time_in_nanos": time,
            "breakdown": {
                "reduce": 0,
                "post_collection_count": self.post_collection_count,
                "build_leaf_collector": self.build_leaf_collector,
                "build_aggregation": self.build_aggregation,
                "build_aggregation_count": 1,
                "build_leaf_collector_count": self.build_leaf_collector_count,
                "post_collection": self.post_collection,
                "initialize": self.initialize,
                "initialize_count": 1,
                "reduce_count": 0,
                "collect": self.collect,
                "collect_count": self.collect_count,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_query_type_is_the_debug_type_name() {
        assert_eq!(query_type("TermQuery(Term(field=0))"), "TermQuery");
        assert_eq!(
            query_type("BooleanQuery { subqueries: [] }"),
            "BooleanQuery"
        );
        assert_eq!(query_type("AllQuery"), "AllQuery");
        assert_eq!(query_type(""), "Query");
    }

    #[test]
    fn test_render_sums_the_measured_parts() {
        let p = ShardProfile {
            index: "i".into(),
            query_debug: "AllQuery".into(),
            rewrite: 7,
            query: QueryTimes {
                create_weight: 1,
                build_scorer: 2,
                build_scorer_count: 1,
                next_doc: 3,
                next_doc_count: 4,
                advance: 0,
                advance_count: 0,
                score: 5,
                score_count: 4,
            },
            hits_collector: 11,
            aggs: vec![AggTimes {
                name: "a".into(),
                class: "AvgAggregator",
                initialize: 1,
                build_leaf_collector: 2,
                build_leaf_collector_count: 1,
                collect: 3,
                collect_count: 4,
                post_collection: 4,
                post_collection_count: 1,
                build_aggregation: 5,
            }],
        };
        let v = p.render("n", HitsCollector::Score);
        assert_eq!(v["id"], "[n][i][0]");
        let search = &v["searches"][0];
        assert_eq!(search["query"][0]["time_in_nanos"], 11);
        assert_eq!(search["rewrite_time"], 7);
        assert_eq!(search["collector"][0]["time_in_nanos"], 11 + 9);
        assert_eq!(search["collector"][0]["children"][1]["time_in_nanos"], 9);
        assert_eq!(v["aggregations"][0]["time_in_nanos"], 15);
        assert_eq!(v["aggregations"][0]["description"], "a");
    }
}
