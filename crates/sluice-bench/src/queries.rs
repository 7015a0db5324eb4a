//! The query shapes the benchmark runs, and the seeded pools of request bodies for each.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use sluice_datagen::{MAX_STEP_MILLIS, SERVICES, VOCABULARY, field, format_timestamp};

/// Distinct request bodies per shape. Workers walk the pool round-robin, so a run mixes common
/// and rare terms instead of hammering one cached answer; 64 is enough variety for that while
/// keeping the whole pool in a few kilobytes.
pub const POOL_SIZE: usize = 64;

/// How many of the most frequent vocabulary words count as "common" for the first word of a
/// match query: the top 120 ranks each occur in at least a few percent of messages.
const COMMON_WORD_RANKS: usize = 120;

/// Width of the date window of a bool+range query, as a fraction of the loaded time span: a
/// tenth keeps the filter selective without making the result empty.
const RANGE_WINDOW_FRACTION: f64 = 0.1;

/// Mixed into the run seed so query bodies do not reuse the document generator's random stream.
const QUERY_SEED_SALT: u64 = 0x51_7c_e0_9e_7a_11_0b_e5;

/// One kind of search request the benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum QueryShape {
    /// `term` on the keyword field `service`.
    Term,
    /// `match` of two words on the text field `message`.
    Match,
    /// `bool` with a `match` must clause and `range` filters on `@timestamp` and `status`.
    BoolRange,
    /// `size: 0` with a `terms` aggregation on `service`.
    TermsAgg,
}

impl QueryShape {
    /// Every shape, in the order the benchmark runs and reports them.
    pub const ALL: [QueryShape; 4] = [
        QueryShape::Term,
        QueryShape::Match,
        QueryShape::BoolRange,
        QueryShape::TermsAgg,
    ];

    /// Returns the shape's name as used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            QueryShape::Term => "term",
            QueryShape::Match => "match",
            QueryShape::BoolRange => "bool_range",
            QueryShape::TermsAgg => "terms_agg",
        }
    }
}

/// The loaded documents' time span, from which range filters pick their windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeSpan {
    /// Timestamp the generator started from; the first document is slightly later.
    pub start_epoch_millis: i64,
    /// Expected timestamp of the last document.
    pub end_epoch_millis: i64,
}

impl TimeSpan {
    /// Returns the expected span of `num_docs` documents generated from `start_epoch_millis`.
    ///
    /// Steps between documents are uniform in `1..=MAX_STEP_MILLIS`, so the expected span is
    /// `num_docs` mean steps. Expected rather than exact, so that it is known without
    /// generating (for `--skip-load`).
    pub fn of_generated(start_epoch_millis: i64, num_docs: u64) -> Self {
        let mean_step_millis = (1 + MAX_STEP_MILLIS) as f64 / 2.0;
        let span_millis = (num_docs as f64 * mean_step_millis) as i64;
        Self {
            start_epoch_millis,
            end_epoch_millis: start_epoch_millis + span_millis.max(1),
        }
    }
}

/// The request bodies of one shape, as JSON values for the engine and encoded for HTTP.
///
/// # Invariants
///
/// `values` and `encoded` are non-empty, of equal length, and `encoded[i]` is the JSON text of
/// `values[i]`. Checked by `debug_assert!` in [`QueryPool::new`].
#[derive(Debug, Clone)]
pub struct QueryPool {
    /// The shape every body in the pool has.
    pub shape: QueryShape,
    /// The bodies, for the in-process engine.
    pub values: Vec<Value>,
    /// The same bodies serialised, for HTTP; `Bytes` so that each request clones a pointer.
    pub encoded: Vec<Bytes>,
}

impl QueryPool {
    /// Builds the pool of `shape` for a run with `seed` over documents spanning `span`.
    ///
    /// The same arguments always yield the same bodies.
    pub fn new(shape: QueryShape, seed: u64, span: TimeSpan) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ QUERY_SEED_SALT ^ shape as u64);
        let values: Vec<Value> = match shape {
            // One body suffices: the aggregation has no parameter to vary.
            QueryShape::TermsAgg => vec![terms_agg_body()],
            _ => (0..POOL_SIZE)
                .map(|i| body(shape, i, &mut rng, span))
                .collect(),
        };
        let encoded: Vec<Bytes> = values.iter().map(|v| Bytes::from(v.to_string())).collect();
        debug_assert!(!values.is_empty() && values.len() == encoded.len());
        Self {
            shape,
            values,
            encoded,
        }
    }
}

/// Builds body number `i` of a parameterised shape.
fn body(shape: QueryShape, i: usize, rng: &mut ChaCha8Rng, span: TimeSpan) -> Value {
    match shape {
        QueryShape::Term => {
            json!({ "query": { "term": { field::SERVICE: SERVICES[rng.random_range(0..SERVICES.len())] } } })
        }
        QueryShape::Match => json!({ "query": { "match": { field::MESSAGE: two_words(rng) } } }),
        QueryShape::BoolRange => {
            let span_millis = span.end_epoch_millis - span.start_epoch_millis;
            let window_millis = ((span_millis as f64 * RANGE_WINDOW_FRACTION) as i64).max(1);
            let from = span.start_epoch_millis
                + rng.random_range(0..=span_millis - window_millis.min(span_millis));
            // Alternate between the large success class and the small error class.
            let status = if i.is_multiple_of(2) {
                json!({ "gte": 200, "lt": 300 })
            } else {
                json!({ "gte": 400 })
            };
            json!({
                "query": {
                    "bool": {
                        "must": [{ "match": { field::MESSAGE: VOCABULARY[rng.random_range(0..COMMON_WORD_RANKS)] } }],
                        "filter": [
                            { "range": { field::TIMESTAMP: {
                                "gte": format_timestamp(from),
                                "lt": format_timestamp(from + window_millis),
                            } } },
                            { "range": { field::STATUS: status } },
                        ],
                    }
                }
            })
        }
        QueryShape::TermsAgg => terms_agg_body(),
    }
}

/// Returns one common word and one word from the whole vocabulary, often a rare one.
fn two_words(rng: &mut ChaCha8Rng) -> String {
    let common = VOCABULARY[rng.random_range(0..COMMON_WORD_RANKS)];
    let any = VOCABULARY[rng.random_range(0..VOCABULARY.len())];
    format!("{common} {any}")
}

fn terms_agg_body() -> Value {
    json!({ "size": 0, "aggs": { "by_service": { "terms": { "field": field::SERVICE, "size": 10 } } } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_datagen::DEFAULT_START_EPOCH_MILLIS;

    fn span() -> TimeSpan {
        TimeSpan::of_generated(DEFAULT_START_EPOCH_MILLIS, 1_000_000)
    }

    #[test]
    fn test_pools_are_deterministic_per_seed() {
        for shape in QueryShape::ALL {
            let a = QueryPool::new(shape, 42, span());
            let b = QueryPool::new(shape, 42, span());
            assert_eq!(a.encoded, b.encoded, "{shape:?}");
            assert_eq!(a.values.len(), a.encoded.len());
        }
        let a = QueryPool::new(QueryShape::Match, 1, span());
        let b = QueryPool::new(QueryShape::Match, 2, span());
        assert_ne!(a.encoded, b.encoded);
    }

    #[test]
    fn test_encoded_bodies_are_the_json_of_the_values() {
        for shape in QueryShape::ALL {
            let pool = QueryPool::new(shape, 7, span());
            for (value, encoded) in pool.values.iter().zip(&pool.encoded) {
                assert_eq!(&serde_json::from_slice::<Value>(encoded).unwrap(), value);
            }
        }
    }

    #[test]
    fn test_bodies_have_the_documented_shapes() {
        let term = QueryPool::new(QueryShape::Term, 3, span());
        assert_eq!(term.values.len(), POOL_SIZE);
        assert!(SERVICES.contains(&term.values[0]["query"]["term"]["service"].as_str().unwrap()));

        let matches = QueryPool::new(QueryShape::Match, 3, span());
        let words = matches.values[0]["query"]["match"]["message"]
            .as_str()
            .unwrap();
        assert_eq!(words.split(' ').count(), 2, "{words}");

        let agg = QueryPool::new(QueryShape::TermsAgg, 3, span());
        assert_eq!(
            agg.values,
            [json!({"size":0,"aggs":{"by_service":{"terms":{"field":"service","size":10}}}})]
        );
    }

    #[test]
    fn test_range_windows_lie_inside_the_loaded_span() {
        let span = span();
        let pool = QueryPool::new(QueryShape::BoolRange, 5, span);
        let first = format_timestamp(span.start_epoch_millis);
        let last = format_timestamp(span.end_epoch_millis);
        for value in &pool.values {
            let filter = &value["query"]["bool"]["filter"];
            let gte = filter[0]["range"]["@timestamp"]["gte"].as_str().unwrap();
            let lt = filter[0]["range"]["@timestamp"]["lt"].as_str().unwrap();
            assert!(
                first.as_str() <= gte && gte < lt && lt <= last.as_str(),
                "{gte}..{lt} outside {first}..{last}"
            );
            assert!(filter[1]["range"]["status"]["gte"].is_u64());
        }
    }

    #[test]
    fn test_range_window_is_valid_for_a_tiny_span() {
        let span = TimeSpan::of_generated(DEFAULT_START_EPOCH_MILLIS, 0);
        let pool = QueryPool::new(QueryShape::BoolRange, 5, span);
        let range = &pool.values[0]["query"]["bool"]["filter"][0]["range"]["@timestamp"];
        assert!(range["gte"].as_str().unwrap() < range["lt"].as_str().unwrap());
    }
}
