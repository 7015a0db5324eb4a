//! Generated-input robustness runs (proptest): the query DSL, aggregations, `_bulk` and
//! `_msearch` NDJSON, workload group and rule JSON, settings bodies and URL parameters, each
//! sent through the node's whole HTTP service in-process (`server::app`). Every input must get
//! a 2xx or a 4xx with OpenSearch's error JSON — never a panic (the catch-panic layer would
//! turn one into a 500), a 5xx or a hang. The only 5xx allowed are OpenSearch's own for the
//! input (503 `too_many_buckets_exception`, 500 `illegal_state_exception`, the 500 of a search
//! cancelled by its own `cancel_after_time_interval`, the 500 `aggregation_execution_exception`
//! of a regular expression `include` on a field that is not a string).
//!
//! CI runs a few dozen cases per target; `PROPTEST_CASES=1000000 cargo test --release -p
//! sluice-server --test http -- robustness --test-threads 1` runs a million (docs/robustness.md
//! records the runs and what they found).

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{Map, Value, json};
use sluice_server::server::{HttpService, app};
use tower::ServiceExt;

use crate::common::{TestNode, enc};

/// The most one request may take before the run calls it a hang: generous, since a debug
/// build on a loaded machine is slow, and far below anything a hang would reach.
const HANG_AFTER: Duration = Duration::from_secs(30);
/// Cases per target when `PROPTEST_CASES` is not set: enough to exercise every generator
/// branch in CI without slowing the suite.
const CI_CASES: u32 = 48;

/// Words the generators draw keys and values from: query, aggregation and parameter names and
/// the test index's fields, so generated inputs reach deep into the parsers.
const VOCAB: &[&str] = &[
    "query",
    "match",
    "match_all",
    "match_none",
    "term",
    "terms",
    "range",
    "bool",
    "must",
    "should",
    "filter",
    "must_not",
    "query_string",
    "simple_query_string",
    "multi_match",
    "wildcard",
    "prefix",
    "regexp",
    "fuzzy",
    "exists",
    "ids",
    "match_phrase",
    "match_phrase_prefix",
    "constant_score",
    "boosting",
    "dis_max",
    "nested",
    "script",
    "field",
    "fields",
    "value",
    "values",
    "gte",
    "lte",
    "gt",
    "lt",
    "format",
    "boost",
    "minimum_should_match",
    "operator",
    "analyzer",
    "fuzziness",
    "size",
    "from",
    "sort",
    "order",
    "aggs",
    "aggregations",
    "interval",
    "calendar_interval",
    "fixed_interval",
    "ranges",
    "key",
    "keyed",
    "percents",
    "missing",
    "min_doc_count",
    "include",
    "exclude",
    "_source",
    "track_total_hits",
    "profile",
    "timeout",
    "search_after",
    "time_zone",
    "offset",
    "extended_bounds",
    "shard_size",
    "path",
    "index",
    "id",
    "histogram",
    "date_histogram",
    "avg",
    "min",
    "max",
    "sum",
    "value_count",
    "stats",
    "cardinality",
    "percentiles",
    "top_hits",
    "composite",
    "msg",
    "msg.keyword",
    "n",
    "f",
    "ts",
    "ip",
    "flag",
    "nope",
    "_id",
    "_index",
    "_doc",
    "_score",
    "asc",
    "desc",
    "now-1d/d",
    "2026-01-01",
    "1.2.3.4",
    "*",
    "a*",
    "-1",
    "0",
    "1",
    "9223372036854775807",
    "1e400",
    "NaN",
    "true",
    "",
    "\u{0}",
    "\u{1F600}",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(VOCAB).prop_map(str::to_string),
        1 => "[a-z_.*]{0,8}",
        1 => ".{0,6}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            any::<i64>(),
            Just(i64::MAX),
            Just(i64::MIN),
            Just(0i64),
            Just(-1i64)
        ]
        .prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()),
            Just(1e308),
            Just(-0.0),
            Just(0.5)
        ]
        .prop_map(|f| json!(f)),
        word().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((word(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// An object whose keys come from `keys` (or anything) with generated values.
fn object_of(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let key = prop_oneof![4 => select(keys).prop_map(str::to_string), 1 => word()];
    prop::collection::vec((key, json_value()), 0..5)
        .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()))
}

const QUERY_TYPES: &[&str] = &[
    "match",
    "match_all",
    "term",
    "terms",
    "range",
    "bool",
    "query_string",
    "simple_query_string",
    "multi_match",
    "wildcard",
    "prefix",
    "regexp",
    "fuzzy",
    "exists",
    "ids",
    "match_phrase",
    "match_phrase_prefix",
    "constant_score",
    "dis_max",
    "nested",
    "bogus",
];
const FIELDS: &[&str] = &["msg", "msg.keyword", "n", "f", "ts", "ip", "flag", "nope"];
const AGG_TYPES: &[&str] = &[
    "terms",
    "histogram",
    "date_histogram",
    "range",
    "filter",
    "avg",
    "min",
    "max",
    "sum",
    "value_count",
    "stats",
    "cardinality",
    "percentiles",
    "top_hits",
    "composite",
    "bogus",
];
const AGG_KEYS: &[&str] = &[
    "field",
    "size",
    "interval",
    "calendar_interval",
    "fixed_interval",
    "ranges",
    "keyed",
    "percents",
    "missing",
    "min_doc_count",
    "order",
    "include",
    "exclude",
    "format",
    "extended_bounds",
    "offset",
    "time_zone",
    "shard_size",
    "show_term_doc_count_error",
];

/// A query clause: a known (or unknown) type over a field, with generated parameters.
fn query() -> impl Strategy<Value = Value> {
    (
        select(QUERY_TYPES),
        select(FIELDS),
        prop_oneof![json_value(), object_of(VOCAB)],
    )
        .prop_map(|(ty, field, body)| json!({ ty: { field: body } }))
}

fn search_body() -> impl Strategy<Value = Value> {
    prop_oneof![
        query().prop_map(|q| json!({ "query": q })),
        (query(), object_of(VOCAB)).prop_map(|(q, mut extra)| {
            extra["query"] = q;
            extra
        }),
        object_of(VOCAB),
        json_value(),
    ]
}

fn aggs_body() -> impl Strategy<Value = Value> {
    (
        select(AGG_TYPES),
        select(FIELDS),
        object_of(AGG_KEYS),
        prop::option::of((select(AGG_TYPES), object_of(AGG_KEYS))),
        // A partition-based include, whose object a generated value rarely spells.
        prop::option::of((json_value(), json_value())),
    )
        .prop_map(|(ty, field, mut body, sub, partition)| {
            if body.is_object() && !body.as_object().is_some_and(|o| o.contains_key("field")) {
                body["field"] = json!(field);
            }
            if let (Some((p, n)), true) = (partition, body.is_object()) {
                body["include"] = json!({"partition": p, "num_partitions": n});
            }
            let mut agg = json!({ ty: body });
            if let Some((sub_ty, sub_body)) = sub {
                agg["aggs"] = json!({"inner": { sub_ty: sub_body }});
            }
            json!({"size": 0, "aggs": {"a": agg}})
        })
}

/// NDJSON lines: JSON values, action-shaped objects, and raw text.
fn ndjson(action_names: &'static [&'static str]) -> impl Strategy<Value = String> {
    let line = prop_oneof![
        3 => (select(action_names), object_of(&[
            "_index", "_id", "if_seq_no", "if_primary_term", "version", "version_type",
            "op_type", "require_alias", "_source", "routing", "index", "search_type",
            "ignore_unavailable", "expand_wildcards", "allow_no_indices",
        ]))
        .prop_map(|(a, meta)| json!({ a: meta }).to_string()),
        3 => json_value().prop_map(|v| v.to_string()),
        1 => ".{0,12}",
    ];
    (prop::collection::vec(line, 0..7), any::<bool>()).prop_map(|(lines, trailing)| {
        let mut s = lines.join("\n");
        if trailing {
            s.push('\n');
        }
        s
    })
}

const GROUP_KEYS: &[&str] = &[
    "name",
    "resiliency_mode",
    "resource_limits",
    "settings",
    "throttling",
    "queue",
    "cpu",
    "memory",
    "node_limit",
    "by",
    "size_per_bucket",
    "search.default_search_timeout",
];
const RULE_KEYS: &[&str] = &[
    "description",
    "index_pattern",
    "workload_group",
    "principal",
    "username",
    "role",
];
const SETTING_KEYS: &[&str] = &[
    "persistent",
    "transient",
    "search.max_buckets",
    "search.cancel_after_time_interval",
    "search.max_open_scroll_context",
    "search.default_keep_alive",
    "search.max_keep_alive",
    "wlm.workload_group.mode",
    "node.workload_group.max_count",
    "index.number_of_replicas",
    "index.refresh_interval",
    "index.max_result_window",
    "index.blocks.write",
    "number_of_shards",
    "index.sort.field",
    "index.translog.durability",
    "index.gc_deletes",
];
const PARAM_KEYS: &[&str] = &[
    "from",
    "size",
    "sort",
    "q",
    "df",
    "_source",
    "_source_includes",
    "track_total_hits",
    "timeout",
    "scroll",
    "ignore_unavailable",
    "expand_wildcards",
    "allow_no_indices",
    "rest_total_hits_as_int",
    "seq_no_primary_term",
    "version",
    "default_operator",
    "cancel_after_time_interval",
    "if_seq_no",
    "if_primary_term",
    "version_type",
    "op_type",
    "refresh",
    "require_alias",
    "h",
    "s",
    "bytes",
    "help",
    "format",
    "v",
    "health",
    "level",
    "max_num_segments",
    "only_expunge_deletes",
    "flat_settings",
    "include_defaults",
];
const PARAM_PATHS: &[(&str, &str)] = &[
    ("GET", "/docs/_search"),
    ("GET", "/docs/_count"),
    ("GET", "/docs,nope/_search"),
    ("PUT", "/docs/_doc/1"),
    ("GET", "/docs/_doc/1"),
    ("DELETE", "/docs/_doc/2"),
    ("GET", "/_cat/indices"),
    ("GET", "/_cat/health"),
    ("GET", "/docs/_stats"),
    ("GET", "/_cluster/health"),
    ("GET", "/_nodes/stats"),
    ("POST", "/docs/_forcemerge"),
    ("GET", "/_alias"),
    ("GET", "/_cluster/settings"),
];

fn params() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        3 => select(VOCAB).prop_map(str::to_string),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => ".{0,8}",
    ];
    prop::collection::vec((select(PARAM_KEYS), value), 0..4).prop_map(|kv| {
        kv.iter()
            .map(|(k, v)| format!("{k}={}", enc(v)))
            .collect::<Vec<_>>()
            .join("&")
    })
}

/// The node under test, its in-process service, and a runtime to drive it.
struct Harness {
    rt: tokio::runtime::Runtime,
    service: HttpService,
    _node: TestNode,
}

impl Harness {
    fn new() -> Harness {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let node = rt.block_on(async {
            let node = TestNode::start().await;
            let (s, b) = node
                .req(
                    "PUT",
                    "/docs",
                    Some(json!({"mappings": {"properties": {
                        "msg": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
                        "n": {"type": "long"}, "f": {"type": "double"}, "ts": {"type": "date"},
                        "ip": {"type": "ip"}, "flag": {"type": "boolean"}
                    }}})),
                )
                .await;
            assert_eq!(s, 200, "{b}");
            let mut lines = Vec::new();
            for i in 0..20i64 {
                lines.push(json!({"index": {"_index": "docs", "_id": i.to_string()}}));
                lines.push(json!({
                    "msg": format!("hello world {i}"), "n": i * 7 - 50, "f": i as f64 / 3.0,
                    "ts": 1_700_000_000_000i64 + i * 3_600_000, "ip": format!("10.0.0.{i}"),
                    "flag": i % 2 == 0
                }));
            }
            node.bulk("/_bulk?refresh=true", &lines).await;
            node
        });
        let service = app(node.state.clone());
        Harness {
            rt,
            service,
            _node: node,
        }
    }

    /// Sends one request and checks the answer is a 2xx, or a 4xx (or one of OpenSearch's own
    /// 5xx for the input) with OpenSearch's error JSON.
    fn check(&self, method: &str, uri: &str, ctype: &str, body: String) -> Result<(), String> {
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?)
            .uri(uri)
            .header("content-type", ctype)
            .body(Body::from(body.clone()))
            .map_err(|e| format!("cannot build request {uri}: {e}"))?;
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
        let service = self.service.clone();
        let answer = self.rt.block_on(async move {
            let resp = tokio::time::timeout(HANG_AFTER, service.oneshot(req))
                .await
                .map_err(|_| "no answer: the request hung".to_string())?
                .map_err(|e| format!("service error: {e:?}"))?;
            let status = resp.status().as_u16();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .map_err(|e| format!("body: {e}"))?;
            Ok::<_, String>((status, bytes))
        })?;
        let (status, bytes) = answer;
        let what = || {
            format!(
                "{method} {uri} with {body:?} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )
        };
        if status < 400 {
            return Ok(());
        }
        let parsed: Value = serde_json::from_slice(&bytes)
            .map_err(|_| format!("error without JSON: {}", what()))?;
        // A document that is not there is a 404 that is an answer, not an error.
        let not_found_answer =
            status == 404 && (parsed["found"] == false || parsed["result"] == "not_found");
        if not_found_answer {
            return Ok(());
        }
        let ty = parsed["error"]["type"].as_str().unwrap_or_default();
        let root = parsed["error"]["root_cause"][0]["type"]
            .as_str()
            .unwrap_or_default();
        let allowed_5xx = matches!(
            (status, ty, root),
            (503, "too_many_buckets_exception", _)
                | (500, "illegal_state_exception", _)
                // A search cancelled by its own `cancel_after_time_interval` (`0` cancels at
                // once): OpenSearch's 500 too.
                | (500, "search_phase_execution_exception", "task_cancelled_exception")
                // A regular expression `include`/`exclude` on a numeric, date, boolean or ip
                // field: OpenSearch's 500 `aggregation_execution_exception` too.
                | (500, "search_phase_execution_exception", "aggregation_execution_exception")
        );
        if status >= 500 && !allowed_5xx {
            return Err(format!("server error: {}", what()));
        }
        let shaped = parsed["status"] == status
            && (parsed["error"]["type"].is_string() || parsed["error"].is_string());
        if !shaped {
            return Err(format!("not OpenSearch's error JSON: {}", what()));
        }
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES)
}

/// Runs `strategy` through `send` for [`cases`] cases; a failing case is shrunk and reported.
fn run<S: Strategy>(strategy: S, send: impl Fn(&Harness, S::Value) -> Result<(), String>)
where
    S::Value: std::fmt::Debug,
{
    let harness = Harness::new();
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |input| {
        send(&harness, input).map_err(proptest::test_runner::TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn test_generated_query_dsl_never_crashes() {
    run(search_body(), |h, body| {
        h.check(
            "POST",
            "/docs/_search",
            "application/json",
            body.to_string(),
        )
    });
}

#[test]
fn test_generated_aggregations_never_crash() {
    run(aggs_body(), |h, body| {
        h.check(
            "POST",
            "/docs/_search",
            "application/json",
            body.to_string(),
        )
    });
}

#[test]
fn test_generated_bulk_bodies_never_crash() {
    run(
        ndjson(&["index", "create", "update", "delete", "bogus"]),
        |h, body| h.check("POST", "/_bulk", "application/x-ndjson", body),
    );
}

#[test]
fn test_generated_msearch_bodies_never_crash() {
    run(ndjson(&["index", "bogus"]), |h, body| {
        h.check("POST", "/docs/_msearch", "application/x-ndjson", body)
    });
}

#[test]
fn test_generated_workload_groups_and_rules_never_crash() {
    run(
        (any::<bool>(), object_of(GROUP_KEYS), object_of(RULE_KEYS)),
        |h, (group, g, r)| {
            if group {
                h.check(
                    "PUT",
                    "/_wlm/workload_group",
                    "application/json",
                    g.to_string(),
                )
            } else {
                h.check(
                    "PUT",
                    "/_rules/workload_group",
                    "application/json",
                    r.to_string(),
                )
            }
        },
    );
}

#[test]
fn test_generated_settings_bodies_never_crash() {
    run(
        (any::<bool>(), object_of(SETTING_KEYS)),
        |h, (cluster, body)| {
            let path = if cluster {
                "/_cluster/settings"
            } else {
                "/docs/_settings"
            };
            h.check("PUT", path, "application/json", body.to_string())
        },
    );
}

#[test]
fn test_generated_url_parameters_never_crash() {
    run(
        (select(PARAM_PATHS), params()),
        |h, ((method, path), query)| {
            let body = if method == "PUT" {
                json!({"msg": "x"}).to_string()
            } else {
                String::new()
            };
            h.check(method, &format!("{path}?{query}"), "application/json", body)
        },
    );
}

/// Found by the query DSL run: a date bound beyond tantivy's nanosecond range overflowed
/// (a panic in debug builds, a wrapped date in release). Bounds are now brought to the
/// storable range, and documents with such dates are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_regression_dates_beyond_the_storable_range() {
    let node = TestNode::start().await;
    node.req(
        "PUT",
        "/d",
        Some(json!({"mappings": {"properties": {"ts": {"type": "date"}}}})),
    )
    .await;
    let (s, _) = node
        .req(
            "PUT",
            "/d/_doc/1?refresh=true",
            Some(json!({"ts": 1_700_000_000_000i64})),
        )
        .await;
    assert_eq!(s, 201);
    for bound in [
        json!(i64::MAX),
        json!(i64::MIN),
        json!(-9_300_000_000_000i64),
    ] {
        let (s, b) = node
            .req(
                "POST",
                "/d/_search",
                Some(json!({"query": {"range": {"ts": {"lte": bound}}}})),
            )
            .await;
        assert_eq!(s, 200, "{bound}: {b}");
    }
    let (_, b) = node
        .req(
            "POST",
            "/d/_search",
            Some(json!({"query": {"range": {"ts": {"lte": i64::MAX}}}})),
        )
        .await;
    assert_eq!(b["hits"]["total"]["value"], 1);
    let far = node
        .req(
            "PUT",
            "/d/_doc/2",
            Some(json!({"ts": 9_300_000_000_000i64})),
        )
        .await;
    crate::common::assert_error(&far, 400, "mapper_parsing_exception");
}
