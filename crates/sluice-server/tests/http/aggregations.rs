//! Aggregations over HTTP against the hand-made `books` data set: bucket aggregations (terms,
//! histogram, date_histogram, range), metrics (avg, min, max, sum, value_count, stats,
//! cardinality), a sub-aggregation, and the errors for unusable fields and unknown types.
//! Expected buckets and values come from the reference model in `fixtures`; `percentiles` runs
//! on its own `latency` index.

use std::collections::BTreeMap;

use crate::common::{TestNode, assert_error};
use crate::fixtures::{
    BOOKS, Book, DAY_MS, iso_millis, load_books, month_start, next_month, now_ms,
};
use serde_json::{Value, json};

async fn books_node() -> (TestNode, Vec<Book>) {
    let node = TestNode::start().await;
    let books = load_books(&node, now_ms()).await;
    (node, books)
}

/// Runs `aggs` (with an optional query) with `size: 0` and returns the `aggregations` object.
async fn aggs(node: &TestNode, query: Option<Value>, aggs: Value) -> Value {
    let mut body = json!({"size": 0, "aggs": aggs});
    if let Some(q) = query {
        body["query"] = q;
    }
    let resp = node.search(BOOKS, body).await;
    assert_eq!(
        resp["hits"]["hits"],
        json!([]),
        "size 0 returns no hits: {resp}"
    );
    resp.get("aggregations")
        .cloned()
        .unwrap_or_else(|| panic!("no aggregations in {resp}"))
}

/// A terms result as OpenSearch renders it for a single index.
fn terms_result(buckets: Vec<Value>, other: u64) -> Value {
    json!({"doc_count_error_upper_bound": 0, "sum_other_doc_count": other, "buckets": buckets})
}

/// Date histogram buckets from the model: every interval from the first to the last non-empty
/// one, empty ones included (`min_doc_count` 0), keyed by `key_of`, stepped by `next`.
fn date_buckets(
    times: &[i64],
    key_of: impl Fn(i64) -> i64,
    next: impl Fn(i64) -> i64,
) -> Vec<Value> {
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    for t in times {
        *counts.entry(key_of(*t)).or_default() += 1;
    }
    let (first, last) = (
        *counts.keys().next().unwrap(),
        *counts.keys().last().unwrap(),
    );
    let mut out = Vec::new();
    let mut k = first;
    while k <= last {
        out.push(json!({"key_as_string": iso_millis(k), "key": k, "doc_count": counts.get(&k).copied().unwrap_or(0)}));
        k = next(k);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_agg_counts_orders_and_truncates() {
    let (node, books) = books_node().await;
    let count = |cat: &str| books.iter().filter(|b| b.category == cat).count() as u64;
    assert_eq!(
        (count("fiction"), count("science"), count("history")),
        (12, 10, 8)
    );

    let a = aggs(
        &node,
        None,
        json!({"cats": {"terms": {"field": "category"}}}),
    )
    .await;
    assert_eq!(
        a["cats"],
        terms_result(
            vec![
                json!({"key": "fiction", "doc_count": 12}),
                json!({"key": "science", "doc_count": 10}),
                json!({"key": "history", "doc_count": 8}),
            ],
            0
        )
    );

    let a = aggs(
        &node,
        None,
        json!({"cats": {"terms": {"field": "category", "size": 2}}}),
    )
    .await;
    assert_eq!(
        a["cats"],
        terms_result(
            vec![
                json!({"key": "fiction", "doc_count": 12}),
                json!({"key": "science", "doc_count": 10})
            ],
            8
        )
    );

    let a = aggs(
        &node,
        None,
        json!({"cats": {"terms": {"field": "category", "order": {"_key": "asc"}}}}),
    )
    .await;
    let keys: Vec<&Value> = a["cats"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["key"])
        .collect();
    assert_eq!(
        keys,
        [&json!("fiction"), &json!("history"), &json!("science")],
        "{a}"
    );

    let a = aggs(
        &node,
        None,
        json!({"cats": {"terms": {"field": "category", "order": {"_count": "asc"}}}}),
    )
    .await;
    let keys: Vec<&Value> = a["cats"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["key"])
        .collect();
    assert_eq!(
        keys,
        [&json!("history"), &json!("science"), &json!("fiction")],
        "{a}"
    );

    // A multi-valued keyword: each value counts; equal counts order by key.
    let a = aggs(&node, None, json!({"tags": {"terms": {"field": "tags"}}})).await;
    assert_eq!(
        a["tags"]["buckets"],
        json!([{"key": "even", "doc_count": 15}, {"key": "odd", "doc_count": 15}, {"key": "five", "doc_count": 6}])
    );

    // Numeric keys are numbers.
    let a = aggs(
        &node,
        None,
        json!({"ratings": {"terms": {"field": "rating"}}}),
    )
    .await;
    assert_eq!(
        a["ratings"]["buckets"],
        json!([{"key": 2, "doc_count": 12}, {"key": 5, "doc_count": 12}, {"key": 1, "doc_count": 6}])
    );

    // Booleans render 1/0 with key_as_string.
    let a = aggs(
        &node,
        None,
        json!({"stock": {"terms": {"field": "in_stock"}}}),
    )
    .await;
    assert_eq!(
        a["stock"]["buckets"],
        json!([{"key": 1, "key_as_string": "true", "doc_count": 23}, {"key": 0, "key_as_string": "false", "doc_count": 7}])
    );

    // The query narrows what is aggregated.
    let a = aggs(
        &node,
        Some(json!({"range": {"price": {"gte": 50}}})),
        json!({"cats": {"terms": {"field": "category"}}}),
    )
    .await;
    assert_eq!(
        a["cats"]["buckets"],
        json!([{"key": "science", "doc_count": 10}, {"key": "history", "doc_count": 1}])
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_histogram_buckets_numbers_by_interval() {
    let (node, books) = books_node().await;
    let a = aggs(
        &node,
        None,
        json!({"prices": {"histogram": {"field": "price", "interval": 25}}}),
    )
    .await;
    assert_eq!(
        a["prices"],
        json!({"buckets": [
            {"key": 0.0, "doc_count": 9},
            {"key": 25.0, "doc_count": 10},
            {"key": 50.0, "doc_count": 10},
            {"key": 75.0, "doc_count": 1}
        ]})
    );
    // On an integer field the keys are still doubles; the model counts per decade.
    let a = aggs(
        &node,
        None,
        json!({"years": {"histogram": {"field": "year", "interval": 10}}}),
    )
    .await;
    let mut expected = Vec::new();
    for start in [1990, 2000, 2010, 2020] {
        let n = books
            .iter()
            .filter(|b| b.year >= start && b.year < start + 10)
            .count();
        expected.push(json!({"key": start as f64, "doc_count": n}));
    }
    assert_eq!(a["years"], json!({"buckets": expected}));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_date_histogram_fixed_and_calendar_intervals() {
    let (node, books) = books_node().await;
    let times: Vec<i64> = books.iter().map(|b| b.published_ms).collect();

    let a = aggs(
        &node,
        None,
        json!({"m": {"date_histogram": {"field": "published", "calendar_interval": "month"}}}),
    )
    .await;
    let expected = date_buckets(&times, month_start, next_month);
    assert_eq!(expected.len(), 6, "January to June 2024");
    assert_eq!(a["m"], json!({"buckets": expected}));

    // Fixed intervals are aligned on the epoch.
    const THIRTY_DAYS: i64 = 30 * DAY_MS;
    let a = aggs(
        &node,
        None,
        json!({"f": {"date_histogram": {"field": "published", "fixed_interval": "30d"}}}),
    )
    .await;
    let expected = date_buckets(
        &times,
        |t| t.div_euclid(THIRTY_DAYS) * THIRTY_DAYS,
        |k| k + THIRTY_DAYS,
    );
    assert_eq!(a["f"], json!({"buckets": expected}));

    // Days in January, empty days included between the first and the last.
    let january = Some(json!({"range": {"published": {"lt": "2024-02-01"}}}));
    let a = aggs(
        &node,
        january,
        json!({"d": {"date_histogram": {"field": "published", "calendar_interval": "day"}}}),
    )
    .await;
    let jan: Vec<i64> = times
        .iter()
        .copied()
        .filter(|t| *t < crate::fixtures::JAN_1_2024_MS + 31 * DAY_MS)
        .collect();
    assert_eq!(jan.len(), 6);
    let expected = date_buckets(&jan, |t| t.div_euclid(DAY_MS) * DAY_MS, |k| k + DAY_MS);
    assert_eq!(expected.len(), 26, "Jan 6 to Jan 31");
    assert_eq!(a["d"], json!({"buckets": expected}));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_range_agg_buckets_with_open_ends() {
    let (node, books) = books_node().await;
    let a = aggs(
        &node,
        None,
        json!({"p": {"range": {"field": "price", "ranges": [{"to": 20}, {"from": 20, "to": 50}, {"from": 50}]}}}),
    )
    .await;
    let n = |lo: f64, hi: f64| {
        books
            .iter()
            .filter(|b| b.price >= lo && b.price < hi)
            .count()
    };
    assert_eq!(
        (n(0.0, 20.0), n(20.0, 50.0), n(50.0, f64::MAX)),
        (7, 12, 11)
    );
    assert_eq!(
        a["p"],
        json!({"buckets": [
            {"key": "*-20.0", "to": 20.0, "doc_count": 7},
            {"key": "20.0-50.0", "from": 20.0, "to": 50.0, "doc_count": 12},
            {"key": "50.0-*", "from": 50.0, "doc_count": 11}
        ]})
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_metric_aggs_compute_exact_values() {
    let (node, books) = books_node().await;
    let sum: f64 = books.iter().map(|b| b.price).sum();
    assert_eq!(sum, 1162.5);
    let a = aggs(
        &node,
        None,
        json!({
            "avg_price": {"avg": {"field": "price"}},
            "min_price": {"min": {"field": "price"}},
            "max_price": {"max": {"field": "price"}},
            "sum_price": {"sum": {"field": "price"}},
            "n_price": {"value_count": {"field": "price"}},
            "n_isbn": {"value_count": {"field": "isbn"}},
            "price_stats": {"stats": {"field": "price"}},
            "authors": {"cardinality": {"field": "author"}},
            "categories": {"cardinality": {"field": "category"}},
            "max_year": {"max": {"field": "year"}},
            "min_rating": {"min": {"field": "rating"}}
        }),
    )
    .await;
    assert_eq!(a["avg_price"], json!({"value": 38.75}));
    assert_eq!(a["min_price"], json!({"value": 2.5}));
    assert_eq!(a["max_price"], json!({"value": 75.0}));
    assert_eq!(a["sum_price"], json!({"value": 1162.5}));
    assert_eq!(a["n_price"], json!({"value": 30}));
    assert_eq!(
        a["n_isbn"],
        json!({"value": 10}),
        "only documents with the field count"
    );
    assert_eq!(
        a["price_stats"],
        json!({"count": 30, "min": 2.5, "max": 75.0, "avg": 38.75, "sum": 1162.5})
    );
    assert_eq!(a["authors"], json!({"value": 5}));
    assert_eq!(a["categories"], json!({"value": 3}));
    assert_eq!(
        a["max_year"],
        json!({"value": 2020.0}),
        "numeric metrics are doubles"
    );
    assert_eq!(a["min_rating"], json!({"value": 1.0}));
    assert_eq!(a.as_object().unwrap().len(), 11, "{a}");

    // Over a query.
    let a = aggs(
        &node,
        Some(json!({"term": {"category": "history"}})),
        json!({"avg_price": {"avg": {"field": "price"}}, "s": {"stats": {"field": "year"}}}),
    )
    .await;
    assert_eq!(a["avg_price"], json!({"value": 41.25}));
    let years: Vec<i64> = books
        .iter()
        .filter(|b| b.category == "history")
        .map(|b| b.year)
        .collect();
    let (ymin, ymax, ysum) = (
        *years.iter().min().unwrap(),
        *years.iter().max().unwrap(),
        years.iter().sum::<i64>(),
    );
    assert_eq!(
        a["s"],
        json!({"count": 8, "min": ymin as f64, "max": ymax as f64, "avg": ysum as f64 / 8.0, "sum": ysum as f64})
    );

    // Nothing matched: empty metrics are null, counts zero.
    let a = aggs(
        &node,
        Some(json!({"term": {"category": "poetry"}})),
        json!({"a": {"avg": {"field": "price"}}, "m": {"min": {"field": "price"}}, "c": {"value_count": {"field": "price"}}, "s": {"sum": {"field": "price"}}}),
    )
    .await;
    assert_eq!(a["a"], json!({"value": null}));
    assert_eq!(a["m"], json!({"value": null}));
    assert_eq!(a["c"], json!({"value": 0}));
    assert_eq!(a["s"], json!({"value": 0.0}));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_agg_with_avg_sub_aggregation() {
    let (node, _) = books_node().await;
    let a = aggs(
        &node,
        None,
        json!({"cats": {"terms": {"field": "category"}, "aggs": {"avg_price": {"avg": {"field": "price"}}}}}),
    )
    .await;
    assert_eq!(
        a["cats"],
        terms_result(
            vec![
                json!({"key": "fiction", "doc_count": 12, "avg_price": {"value": 16.25}}),
                json!({"key": "science", "doc_count": 10, "avg_price": {"value": 63.75}}),
                json!({"key": "history", "doc_count": 8, "avg_price": {"value": 41.25}}),
            ],
            0
        )
    );
    // Ordered by the sub-aggregation.
    let a = aggs(
        &node,
        None,
        json!({"cats": {"terms": {"field": "category", "order": {"avg_price": "desc"}},
                        "aggs": {"avg_price": {"avg": {"field": "price"}}}}}),
    )
    .await;
    let keys: Vec<&Value> = a["cats"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["key"])
        .collect();
    assert_eq!(
        keys,
        [&json!("science"), &json!("history"), &json!("fiction")],
        "{a}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_agg_on_text_field_is_rejected() {
    let (node, _) = books_node().await;
    let resp = node
        .req(
            "POST",
            "/books/_search",
            Some(json!({"size": 0, "aggs": {"t": {"terms": {"field": "title"}}}})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    let root = &resp.1["error"]["root_cause"][0];
    assert_eq!(root["type"], "illegal_argument_exception", "{}", resp.1);
    assert!(
        root["reason"]
            .as_str()
            .unwrap()
            .contains("Text fields are not optimised"),
        "{}",
        resp.1
    );
    assert!(
        root["reason"]
            .as_str()
            .unwrap()
            .contains("fielddata=true on [title]"),
        "{}",
        resp.1
    );
    // The keyword sub-field works.
    let a = aggs(
        &node,
        None,
        json!({"t": {"terms": {"field": "title.keyword", "size": 1, "order": {"_key": "asc"}}}}),
    )
    .await;
    assert_eq!(
        a["t"]["buckets"],
        json!([{"key": "a brief history of time", "doc_count": 1}])
    );
    assert_eq!(a["t"]["sum_other_doc_count"], 29);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unknown_aggregation_type_is_rejected_by_name() {
    let (node, _) = books_node().await;
    let resp = node
        .req(
            "POST",
            "/books/_search",
            Some(json!({"size": 0, "aggs": {"x": {"no_such_agg": {"field": "price"}}}})),
        )
        .await;
    assert_error(&resp, 400, "parsing_exception");
    let reason = resp.1["error"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("Unknown aggregation type [no_such_agg]"),
        "{reason}"
    );
    node.assert_alive().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_term_doc_count_error_and_histogram_format_render_like_opensearch() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/products",
            Some(json!({"mappings": {"properties": {
                "category": {"type": "keyword"}, "year": {"type": "integer"}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    node.bulk(
        "/products/_bulk?refresh=true",
        &[
            json!({"index": {}}),
            json!({"category": "electronics", "year": 2011}),
            json!({"index": {}}),
            json!({"category": "electronics", "year": 1998}),
            json!({"index": {}}),
            json!({"category": "books", "year": 1960}),
        ],
    )
    .await;
    let resp = node
        .search(
            "products",
            json!({"size": 0, "aggs": {
                "c": {"terms": {"field": "category", "show_term_doc_count_error": true}},
                "y": {"histogram": {"field": "year", "interval": 100, "format": "##0.0"}}}}),
        )
        .await;
    assert_eq!(
        resp["aggregations"]["c"]["buckets"],
        json!([
            {"key": "electronics", "doc_count": 2, "doc_count_error_upper_bound": 0},
            {"key": "books", "doc_count": 1, "doc_count_error_upper_bound": 0}
        ]),
        "{resp}"
    );
    assert_eq!(
        resp["aggregations"]["y"]["buckets"],
        json!([
            {"key_as_string": "1900.0", "key": 1900.0, "doc_count": 2},
            {"key_as_string": "2000.0", "key": 2000.0, "doc_count": 1}
        ]),
        "{resp}"
    );
    let resp = node
        .req(
            "POST",
            "/products/_search",
            Some(json!({"size": 0, "aggs": {"y": {"histogram": {
                "field": "year", "interval": 100, "format": "0.0E0"}}}})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_percentiles_render_keyed_and_listed_like_opensearch() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/latency",
            Some(json!({"mappings": {"properties": {"latency_ms": {"type": "long"}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let mut lines = Vec::new();
    for ms in 1..=100 {
        lines.push(json!({"index": {}}));
        lines.push(json!({"latency_ms": ms}));
    }
    node.bulk("/latency/_bulk?refresh=true", &lines).await;
    let resp = node
        .search(
            "latency",
            json!({"size": 0, "aggs": {
                "keyed": {"percentiles": {"field": "latency_ms", "percents": [99, 50, 95]}},
                "list": {"percentiles": {"field": "latency_ms", "percents": [50], "keyed": false}},
                "none": {"percentiles": {"field": "missing_field"}}}}),
        )
        .await;
    let aggs = &resp["aggregations"];
    let keyed = aggs["keyed"]["values"].as_object().expect("keyed values");
    let keys: Vec<&str> = keyed.keys().map(String::as_str).collect();
    assert_eq!(keys, ["50.0", "95.0", "99.0"], "{resp}");
    // tantivy's sketch estimates within about 1% of the true rank's value.
    for (key, expected) in [("50.0", 50.0), ("95.0", 95.0), ("99.0", 99.0)] {
        let v = keyed[key].as_f64().expect("a value");
        assert!((v - expected).abs() <= 2.0, "{key}: {v} in {resp}");
    }
    let list = aggs["list"]["values"].as_array().expect("list values");
    assert_eq!(list.len(), 1, "{resp}");
    assert_eq!(list[0]["key"], json!(50.0), "{resp}");
    assert!(list[0]["value"].is_f64(), "{resp}");
    let none = aggs["none"]["values"].as_object().expect("keyed values");
    assert_eq!(none.len(), 7, "{resp}");
    assert!(none.values().all(Value::is_null), "{resp}");

    let resp = node
        .req(
            "POST",
            "/latency/_search",
            Some(json!({"size": 0, "aggs": {"p": {"percentiles": {
                "field": "latency_ms", "percents": [101]}}}})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert!(
        resp.1["error"]["root_cause"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("percent must be in [0,100], got [101.0]")),
        "{}",
        resp.1
    );
    let resp = node
        .req(
            "POST",
            "/latency/_search",
            Some(json!({"size": 0, "aggs": {"p": {"percentiles": {
                "field": "latency_ms", "compression": 100}}}})),
        )
        .await;
    // OpenSearch's object parser refuses unknown keys with this type, as for other metrics.
    assert_error(&resp, 400, "x_content_parse_exception");
    node.stop().await;
}

/// An index `v` with a keyword, an ip, a date, a long (values around 2^53), a double and a
/// boolean field, and a fifth document with none of them.
async fn typed_node() -> TestNode {
    let node = TestNode::start().await;
    let (status, body) = node
        .req(
            "PUT",
            "/v",
            Some(json!({"mappings": {"properties": {
                "k": {"type": "keyword"}, "ip": {"type": "ip"}, "d": {"type": "date"},
                "l": {"type": "long"}, "f": {"type": "double"}, "b": {"type": "boolean"}
            }}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "v", "_id": "1"}}),
            json!({"k": "a", "ip": "10.0.0.1", "d": "2020-01-01", "l": 9_007_199_254_740_993i64, "f": 1.5, "b": true}),
            json!({"index": {"_index": "v", "_id": "2"}}),
            json!({"k": "b", "ip": "10.0.0.2", "d": "2020-01-02", "l": 9_007_199_254_740_995i64, "f": 2.5, "b": false}),
            json!({"index": {"_index": "v", "_id": "3"}}),
            json!({"k": "c", "ip": "10.0.0.2", "d": "2020-01-02", "l": 3, "f": 2.5, "b": false}),
            json!({"index": {"_index": "v", "_id": "4"}}),
            json!({"k": "d", "ip": "::1", "d": "2020-01-03", "l": 9_007_199_254_740_992i64, "f": 4.0, "b": true}),
            json!({"index": {"_index": "v", "_id": "5"}}),
            json!({"other": 1}),
        ],
    )
    .await;
    node
}

/// The `(key, doc_count)` pairs of a terms result, in bucket order.
fn keys_and_counts(agg: &Value) -> Vec<(Value, u64)> {
    agg["buckets"]
        .as_array()
        .unwrap_or_else(|| panic!("no buckets in {agg}"))
        .iter()
        .map(|b| (b["key"].clone(), b["doc_count"].as_u64().unwrap_or(0)))
        .collect()
}

/// Runs `aggs` with `size: 0` on `v`, returning the status and body.
async fn try_aggs(node: &TestNode, aggs: Value) -> (u16, Value) {
    node.req("POST", "/v/_search", Some(json!({"size": 0, "aggs": aggs})))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_agg_keeps_long_keys_above_2_pow_53_exact() {
    let node = typed_node().await;
    let resp = node
        .search(
            "v",
            json!({"size": 0, "aggs": {
                "by_key": {"terms": {"field": "l", "order": {"_key": "asc"}}},
                "missing_big": {"terms": {"field": "l", "missing": 9_007_199_254_740_997i64, "order": {"_key": "desc"}, "size": 1}},
                "nested": {"terms": {"field": "k", "include": ["a"]}, "aggs": {"inner": {"terms": {"field": "l"}}}}
            }}),
        )
        .await;
    let a = &resp["aggregations"];
    // Neighbours above 2^53 stay apart and ordered, each its own exact key.
    assert_eq!(
        keys_and_counts(&a["by_key"]),
        vec![
            (json!(3), 1),
            (json!(9_007_199_254_740_992i64), 1),
            (json!(9_007_199_254_740_993i64), 1),
            (json!(9_007_199_254_740_995i64), 1),
        ]
    );
    // A `missing` above 2^53 is not rounded (to ...996) on its way through an f64.
    assert_eq!(
        keys_and_counts(&a["missing_big"]),
        vec![(json!(9_007_199_254_740_997i64), 1)]
    );
    assert_eq!(
        keys_and_counts(&a["nested"]["buckets"][0]["inner"]),
        vec![(json!(9_007_199_254_740_993i64), 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_include_exclude_lists_on_ip_date_and_numeric_fields() {
    let node = typed_node().await;
    let resp = node
        .search(
            "v",
            json!({"size": 0, "aggs": {
                "ip": {"terms": {"field": "ip", "include": ["10.0.0.2", "0:0::1"]}},
                "ip_ex": {"terms": {"field": "ip", "exclude": ["10.0.0.2"]}},
                "date": {"terms": {"field": "d", "exclude": ["2020-01-01", 1_577_923_200_000i64]}},
                "long": {"terms": {"field": "l", "include": ["9007199254740993", 3, "9007199254740992.7"]}},
                "double": {"terms": {"field": "f", "include": [2.5, "4"]}},
                "bool": {"terms": {"field": "b", "include": ["true"]}},
                "kw": {"terms": {"field": "k", "include": "[a-c]", "exclude": "b"}},
                "kw_list": {"terms": {"field": "k", "exclude": ["a", "d"]}}
            }}),
        )
        .await;
    let a = &resp["aggregations"];
    // Addresses are read as addresses: `0:0::1` is `::1`.
    assert_eq!(
        keys_and_counts(&a["ip"]),
        vec![(json!("10.0.0.2"), 2), (json!("::1"), 1)]
    );
    assert_eq!(
        keys_and_counts(&a["ip_ex"]),
        // Ties in address order: `::1` before `::ffff:10.0.0.1`.
        vec![(json!("::1"), 1), (json!("10.0.0.1"), 1)]
    );
    // Dates by the field's format or as epoch milliseconds.
    assert_eq!(
        keys_and_counts(&a["date"]),
        vec![(json!(1_578_009_600_000i64), 1)]
    );
    assert_eq!(
        a["date"]["buckets"][0]["key_as_string"],
        "2020-01-03T00:00:00.000Z"
    );
    // Longs exactly; a decimal is rounded down, as OpenSearch reads it.
    assert_eq!(
        keys_and_counts(&a["long"]),
        vec![
            (json!(3), 1),
            (json!(9_007_199_254_740_992i64), 1),
            (json!(9_007_199_254_740_993i64), 1)
        ]
    );
    assert_eq!(
        keys_and_counts(&a["double"]),
        vec![(json!(2.5), 2), (json!(4.0), 1)]
    );
    assert_eq!(keys_and_counts(&a["bool"]), vec![(json!(1), 2)]);
    assert_eq!(a["bool"]["buckets"][0]["key_as_string"], "true");
    assert_eq!(
        keys_and_counts(&a["kw"]),
        vec![(json!("a"), 1), (json!("c"), 1)]
    );
    assert_eq!(
        keys_and_counts(&a["kw_list"]),
        vec![(json!("b"), 1), (json!("c"), 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_exclude_counts_missing_only_for_documents_without_values() {
    let node = typed_node().await;
    let resp = node
        .search(
            "v",
            json!({"size": 0, "aggs": {
                "long": {"terms": {"field": "l", "exclude": [9_007_199_254_740_993i64], "missing": 7}},
                "date": {"terms": {"field": "d", "include": ["2020-01-01", "1999-01-01"], "missing": "1999-01-01"}}
            }}),
        )
        .await;
    let a = &resp["aggregations"];
    // Document 1's only value is excluded: it is not counted under `missing` (only document 5).
    assert_eq!(
        keys_and_counts(&a["long"]),
        vec![
            (json!(3), 1),
            (json!(7), 1),
            (json!(9_007_199_254_740_992i64), 1),
            (json!(9_007_199_254_740_995i64), 1)
        ]
    );
    // The missing value is filtered like any other: included here.
    assert_eq!(
        keys_and_counts(&a["date"]),
        vec![
            (json!(915_148_800_000i64), 1),
            (json!(1_577_836_800_000i64), 1)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_regex_include_on_non_string_fields_is_refused_like_opensearch() {
    let node = typed_node().await;
    for field in ["l", "d", "f", "b"] {
        let resp = try_aggs(
            &node,
            json!({"x": {"terms": {"field": field, "include": "9.*"}}}),
        )
        .await;
        assert_error(&resp, 500, "aggregation_execution_exception");
        assert_eq!(resp.1["error"]["type"], "search_phase_execution_exception");
        assert_eq!(
            resp.1["error"]["root_cause"][0]["reason"],
            "Aggregation [x] cannot support regular expression style include/exclude settings as they can only be applied to string fields. Use an array of numeric values for include/exclude clauses used to filter numeric fields",
            "{field}"
        );
    }
    let resp = try_aggs(
        &node,
        json!({"x": {"terms": {"field": "ip", "exclude": "10.*"}}}),
    )
    .await;
    assert_error(&resp, 500, "aggregation_execution_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "Aggregation [x] cannot support regular expression style include/exclude settings as they can only be applied to string fields. Use an array of values for include/exclude clauses"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_include_exclude_bad_clauses_answer_opensearch_errors() {
    let node = typed_node().await;
    let cases = [
        (
            json!({"include": {"partition": 0, "num_partitions": 2}, "exclude": ["a"]}),
            "Cannot specify any excludes when using a partition-based include",
        ),
        (
            json!({"include": "a.*", "exclude": ["b"]}),
            "Cannot mix a regex-based include with a set-based method",
        ),
        (
            json!({"include": {"partition": 2, "num_partitions": 2}}),
            "Partition must be >=0 and < numPartition which is 2",
        ),
        (
            json!({"include": {"num_partitions": 2}}),
            "Missing [partition] parameter for partition-based include",
        ),
        (
            json!({"exclude": {"partition": 0, "num_partitions": 2}}),
            "Unrecognized token for an exclude [START_OBJECT]",
        ),
    ];
    for (clause, reason) in cases {
        let mut terms = json!({"field": "k"});
        for (k, v) in clause.as_object().unwrap() {
            terms[k] = v.clone();
        }
        let resp = try_aggs(&node, json!({"x": {"terms": terms}})).await;
        assert_error(&resp, 400, "illegal_argument_exception");
        assert_eq!(
            resp.1["error"]["root_cause"][0]["reason"], reason,
            "{clause}"
        );
    }
    let resp = try_aggs(
        &node,
        json!({"x": {"terms": {"field": "ip", "include": ["nope"]}}}),
    )
    .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "'nope' is not an IP string literal."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_partitions_split_terms_as_opensearch_hashes_them() {
    let node = typed_node().await;
    let mut seen: BTreeMap<&str, Vec<Vec<Value>>> = BTreeMap::new();
    for partition in 0..2 {
        let resp = node
            .search(
                "v",
                json!({"size": 0, "aggs": {
                    "k": {"terms": {"field": "k", "include": {"partition": partition, "num_partitions": 2}, "order": {"_key": "asc"}}},
                    "l": {"terms": {"field": "l", "include": {"partition": partition, "num_partitions": 2}, "order": {"_key": "asc"}}},
                    "ip": {"terms": {"field": "ip", "include": {"partition": partition, "num_partitions": 2}, "order": {"_key": "asc"}}}
                }}),
            )
            .await;
        for field in ["k", "l", "ip"] {
            let keys = keys_and_counts(&resp["aggregations"][field])
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            seen.entry(field).or_default().push(keys);
        }
    }
    // OpenSearch's hashes: murmur3 (seed 31) of the term or of the address's 16 bytes,
    // BitMixer.mix64 of the long; floorMod 2.
    assert_eq!(
        seen["k"],
        vec![vec![], vec![json!("a"), json!("b"), json!("c"), json!("d")]]
    );
    assert_eq!(
        seen["l"],
        vec![
            vec![json!(3), json!(9_007_199_254_740_992i64)],
            vec![
                json!(9_007_199_254_740_993i64),
                json!(9_007_199_254_740_995i64)
            ]
        ]
    );
    assert_eq!(
        seen["ip"],
        vec![
            vec![json!("10.0.0.2")],
            vec![json!("::1"), json!("10.0.0.1")]
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_filters_sluice_cannot_apply_are_refused_naming_them() {
    let node = typed_node().await;
    let resp = try_aggs(
        &node,
        json!({"x": {"terms": {"field": "l", "include": [3], "min_doc_count": 0}}}),
    )
    .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    let reason = resp.1["error"]["root_cause"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("[min_doc_count] 0") && reason.contains("[long]"),
        "{reason}"
    );
    let resp = try_aggs(
        &node,
        json!({"x": {"terms": {"field": "k", "include": {"partition": 0, "num_partitions": 2}, "missing": "z"}}}),
    )
    .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    let reason = resp.1["error"]["root_cause"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("[missing]") && reason.contains("partition"),
        "{reason}"
    );
    // An unmapped field has no values to filter: no error, no buckets.
    let resp = try_aggs(
        &node,
        json!({"x": {"terms": {"field": "none", "include": "a.*"}}}),
    )
    .await;
    assert_eq!(resp.0, 200, "{}", resp.1);
    assert_eq!(resp.1["aggregations"]["x"]["buckets"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_terms_include_reads_dates_in_the_fields_format() {
    let node = TestNode::start().await;
    let (status, body) = node
        .req(
            "PUT",
            "/secs",
            Some(json!({"mappings": {"properties": {"t": {"type": "date", "format": "epoch_second"}}}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "secs"}}),
            json!({"t": 1_577_836_800}),
            json!({"index": {"_index": "secs"}}),
            json!({"t": 1_577_923_200}),
        ],
    )
    .await;
    let resp = node
        .search(
            "secs",
            json!({"size": 0, "aggs": {"x": {"terms": {"field": "t", "include": ["1577923200"]}}}}),
        )
        .await;
    // Seconds, as the field's format reads them; keys are epoch milliseconds.
    assert_eq!(
        keys_and_counts(&resp["aggregations"]["x"]),
        vec![(json!(1_577_923_200_000i64), 1)]
    );
}

/// The name of every key of `obj`, sorted.
fn key_names(obj: &Value) -> Vec<String> {
    let mut names: Vec<String> = obj
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {obj}"))
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn test_typed_keys_names_each_aggregation_by_the_type_of_its_result() {
    let (node, books) = books_node().await;
    let body = json!({"size": 0, "aggs": {
        "cats": {"terms": {"field": "category"},
                 "aggs": {"cheapest": {"min": {"field": "price"}}}},
        "years": {"terms": {"field": "year"}},
        "prices": {"terms": {"field": "price"}},
        "nowhere": {"terms": {"field": "no_such_field"}},
        "stock": {"terms": {"field": "in_stock"}},
        "fiction": {"filter": {"term": {"category": "fiction"}},
                    "aggs": {"mean": {"avg": {"field": "price"}}}},
        "by_year": {"date_histogram": {"field": "published", "calendar_interval": "year"}},
        "spans": {"date_range": {"field": "published", "ranges": [{"to": "2030-01-01"}]}},
        "cheap": {"range": {"field": "price", "ranges": [{"to": 10.0}]}},
        "ratings": {"histogram": {"field": "rating", "interval": 1}},
        "n": {"value_count": {"field": "price"}},
        "p": {"percentiles": {"field": "price", "percents": [50]}},
        "s": {"stats": {"field": "price"}},
        "authors": {"cardinality": {"field": "author"}},
        "top": {"max": {"field": "price"}},
        "total": {"sum": {"field": "price"}}
    }});
    let plain = node.search(BOOKS, body.clone()).await;
    let (s, typed) = node
        .req(
            "POST",
            &format!("/{BOOKS}/_search?typed_keys=true"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(s, 200, "{typed}");
    let aggs = &typed["aggregations"];
    assert_eq!(
        key_names(aggs),
        [
            "cardinality#authors",
            "date_histogram#by_year",
            "date_range#spans",
            "dterms#prices",
            "filter#fiction",
            "histogram#ratings",
            "lterms#stock",
            "lterms#years",
            "max#top",
            "range#cheap",
            "stats#s",
            "sterms#cats",
            "sum#total",
            "tdigest_percentiles#p",
            "umterms#nowhere",
            "value_count#n",
        ],
        "{aggs}"
    );
    // Sub-aggregations are typed too, inside buckets and inside a single-bucket aggregation.
    let cats = &aggs["sterms#cats"]["buckets"];
    assert!(cats.as_array().is_some_and(|b| !b.is_empty()), "{aggs}");
    for bucket in cats.as_array().unwrap() {
        assert!(bucket["min#cheapest"]["value"].is_number(), "{bucket}");
        assert!(bucket.get("cheapest").is_none(), "{bucket}");
    }
    let fiction_mean = books
        .iter()
        .filter(|b| b.category == "fiction")
        .map(|b| b.price)
        .sum::<f64>()
        / books.iter().filter(|b| b.category == "fiction").count() as f64;
    assert_eq!(
        aggs["filter#fiction"]["avg#mean"]["value"],
        json!(fiction_mean)
    );
    // Only the names change: each result is the untyped one.
    let untyped = &plain["aggregations"];
    assert_eq!(aggs["sterms#cats"]["buckets"].as_array().unwrap().len(), 3);
    for (name, value) in aggs.as_object().unwrap() {
        let bare = name.split_once('#').map(|(_, n)| n).unwrap();
        let mut value = value.clone();
        let mut expected = untyped[bare].clone();
        // The sub-aggregations' names differ; compare the rest.
        for v in [&mut value, &mut expected] {
            strip_subs(v);
        }
        assert_eq!(value, expected, "{name}");
    }
    // `typed_keys=false` and no parameter are the same; a value that is not a boolean is an
    // error naming it.
    let (s, off) = node
        .req(
            "POST",
            &format!("/{BOOKS}/_search?typed_keys=false"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(s, 200, "{off}");
    assert_eq!(key_names(&off["aggregations"]), key_names(untyped));
    let bad = node
        .req(
            "POST",
            &format!("/{BOOKS}/_search?typed_keys=yes"),
            Some(body.clone()),
        )
        .await;
    assert_error(&bad, 400, "illegal_argument_exception");
    assert!(
        bad.1["error"]["reason"].as_str().unwrap().contains("[yes]"),
        "{}",
        bad.1
    );

    // `_msearch?typed_keys` types every item's aggregations.
    let lines = format!(
        "{{\"index\":\"{BOOKS}\"}}\n{}\n{{\"index\":\"{BOOKS}\"}}\n{}\n",
        json!({"size": 0, "aggs": {"cats": {"terms": {"field": "category"}}}}),
        json!({"size": 0, "aggs": {"top": {"max": {"field": "price"}}}})
    );
    let resp = node
        .client
        .post(node.url("/_msearch?typed_keys=true"))
        .header("content-type", "application/x-ndjson")
        .body(lines.clone())
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    let m: Value = resp.json().await.expect("json");
    assert_eq!(
        key_names(&m["responses"][0]["aggregations"]),
        ["sterms#cats"],
        "{m}"
    );
    assert_eq!(
        key_names(&m["responses"][1]["aggregations"]),
        ["max#top"],
        "{m}"
    );
    let resp = node
        .client
        .post(node.url("/_msearch?typed_keys=maybe"))
        .header("content-type", "application/x-ndjson")
        .body(lines)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 400);
}

/// Removes the sub-aggregations (every key but the result's own fields) from a rendered
/// aggregation and its buckets, so typed and untyped results compare.
fn strip_subs(v: &mut Value) {
    const OWN: &[&str] = &[
        "value",
        "values",
        "doc_count",
        "buckets",
        "key",
        "key_as_string",
        "from",
        "to",
        "from_as_string",
        "to_as_string",
        "count",
        "min",
        "max",
        "avg",
        "sum",
        "doc_count_error_upper_bound",
        "sum_other_doc_count",
        "value_as_string",
        "meta",
    ];
    if let Some(obj) = v.as_object_mut() {
        obj.retain(|k, _| OWN.contains(&k.as_str()));
        if let Some(buckets) = obj.get_mut("buckets") {
            match buckets {
                Value::Array(list) => list.iter_mut().for_each(strip_subs),
                Value::Object(map) => map.values_mut().for_each(strip_subs),
                _ => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_post_filter_narrows_hits_while_aggregations_see_every_match() {
    let node = TestNode::start().await;
    let mut lines = Vec::new();
    for (n, category) in ["books", "books", "music", "books", "games", "music"]
        .iter()
        .enumerate()
    {
        lines.push(json!({"index": {"_index": "shop", "_id": format!("p{n}")}}));
        lines.push(json!({"category": category, "title": format!("fox {n}")}));
    }
    let resp = node.bulk("/_bulk?refresh=true", &lines).await;
    assert_eq!(resp["errors"], false, "{resp}");
    // The body opensearch-py's FacetedSearch sends once the `music` facet is selected.
    let body = json!({
        "query": {"multi_match": {"query": "fox", "fields": ["title"]}},
        "aggs": {"_filter_category": {
            "filter": {"match_all": {}},
            "aggs": {"category": {"terms": {"field": "category.keyword"}}}
        }},
        "post_filter": {"terms": {"category.keyword": ["music"]}},
        "sort": ["_id"],
    });
    let resp = node.search("shop", body).await;
    let ids: Vec<&str> = resp["hits"]["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["p2", "p5"], "{resp}");
    assert_eq!(resp["hits"]["total"]["value"], 2, "{resp}");
    assert_eq!(
        resp["aggregations"]["_filter_category"]["category"]["buckets"],
        json!([
            {"key": "books", "doc_count": 3},
            {"key": "music", "doc_count": 2},
            {"key": "games", "doc_count": 1}
        ]),
        "{resp}"
    );
    // Anything but an object is refused in OpenSearch's words.
    let resp = node
        .req(
            "POST",
            "/shop/_search",
            Some(json!({"post_filter": ["music"]})),
        )
        .await;
    assert_error(&resp, 400, "parsing_exception");
    assert_eq!(
        resp.1["error"]["reason"], "Unknown key for a START_ARRAY in [post_filter].",
        "{}",
        resp.1
    );
    node.stop().await;
}
