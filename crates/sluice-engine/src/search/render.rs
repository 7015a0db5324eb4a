//! Rendering: the fetch phase (stored documents, `_source` filtering, sort values) and the
//! OpenSearch-shaped response with its totals, including `rest_total_hits_as_int`.

use std::time::Instant;

use serde_json::{Map, Value, json};
use tantivy::{DocAddress, Score};

use super::collect::{Collected, Prepared};
use super::context::{SearchContext, cancelled};
use super::profile::HitsCollector;
use super::request::{SearchRequest, SourceFilter, TrackTotalHits};
use super::sort::{SortField, SortSpec, SortValue};
use crate::error::Result;
use crate::mapping::{FieldType, wildcard_match};

/// How many hits the fetch phase loads between two checks of the cancellation flag: loading a
/// stored document costs microseconds, so a few hundred keep the check cheap and prompt.
const FETCH_CHECK_EVERY_HITS: usize = 256;

/// The primary term of every document: a single node never changes primaries, so the term
/// stays OpenSearch's first one.
pub const PRIMARY_TERM: u64 = 1;

/// Renders a score the way OpenSearch does: a 32-bit float in its shortest decimal form
/// (`1.6`, not the `1.600000023841858` its widening to f64 prints); a non-finite score is
/// `null`.
pub fn score_json(score: Score) -> Value {
    if !score.is_finite() {
        return Value::Null;
    }
    // The f32's Display is its shortest round-tripping decimal, which parses to the f64 that
    // serde_json prints the same way.
    score
        .to_string()
        .parse::<f64>()
        .map_or(Value::Null, Value::from)
}

/// Renders a search response's `hits.total` as OpenSearch does under
/// `rest_total_hits_as_int=true`: the count alone, `-1` when totals were not tracked.
pub fn render_total_hits_as_int(resp: &mut Value) {
    let Some(Value::Object(hits)) = resp.get_mut("hits") else {
        return;
    };
    let total = match hits.get("total") {
        Some(Value::Object(t)) => t.get("value").cloned().unwrap_or(json!(-1)),
        Some(other) => other.clone(),
        None => json!(-1),
    };
    // Keep `total` first, where OpenSearch renders it.
    let mut out = Map::new();
    out.insert("total".into(), total);
    for (k, v) in std::mem::take(hits) {
        if k != "total" {
            out.insert(k, v);
        }
    }
    *hits = out;
}

/// Applies `_source` include/exclude patterns.
pub fn filter_source(source: &Value, filter: &SourceFilter) -> Value {
    if filter.includes.is_empty() && filter.excludes.is_empty() {
        return source.clone();
    }
    fn walk(v: &Value, prefix: &str, f: &SourceFilter) -> Option<Value> {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, child) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if f.excludes.iter().any(|p| wildcard_match(p, &path)) {
                        continue;
                    }
                    let included = f.includes.is_empty()
                        || f.includes.iter().any(|p| {
                            wildcard_match(p, &path)
                                || wildcard_match(&format!("{p}.*"), &path)
                                || p == &path
                        });
                    if included && !child.is_object() {
                        out.insert(k.clone(), child.clone());
                        continue;
                    }
                    let is_prefix = f
                        .includes
                        .iter()
                        .any(|p| p.starts_with(&format!("{path}.")) || p.starts_with('*'));
                    if child.is_object() && (included || is_prefix) {
                        let sub = if included && f.excludes.is_empty() {
                            Some(child.clone())
                        } else {
                            walk(child, &path, f)
                        };
                        if let Some(sub) = sub
                            && (included || sub.as_object().is_some_and(|o| !o.is_empty()))
                        {
                            out.insert(k.clone(), sub);
                        }
                    }
                }
                Some(Value::Object(out))
            }
            other => Some(other.clone()),
        }
    }
    walk(source, "", filter).unwrap_or(Value::Null)
}

fn render_sort_value(v: &SortValue, spec: &SortSpec, ty: Option<FieldType>) -> Value {
    match v {
        SortValue::Missing => {
            // OpenSearch renders the missing sentinel of the sort direction.
            if spec.desc {
                json!(i64::MIN)
            } else {
                json!(i64::MAX)
            }
        }
        // An address sorts by its encoded form and is shown as an address.
        SortValue::Str(s) if ty == Some(FieldType::Ip) => {
            json!(crate::ip::decode(s).unwrap_or_else(|| s.clone()))
        }
        SortValue::Str(s) => json!(s),
        SortValue::Int(n) => json!(n),
        SortValue::Num(n) => match (ty, &spec.field) {
            (_, SortField::Doc) => json!(*n as i64),
            // The key holds the f32 score widened: render the float OpenSearch would.
            (_, SortField::Score) => score_json(*n as f32),
            (Some(t), _) if t.is_integer() || t == FieldType::Date => json!(*n as i64),
            (Some(FieldType::Boolean), _) => json!(*n != 0.0),
            _ => json!(n),
        },
    }
}

pub(super) fn render_response(
    prepared: &[Prepared],
    req: &SearchRequest,
    collected: Collected,
    aggregations: Option<Value>,
    started: Instant,
    ctx: &SearchContext,
) -> Result<Value> {
    let scores_shown = req.sort.is_empty()
        || req.track_scores
        || req.sort.iter().any(|s| s.field == SortField::Score);
    let mut hits_json = Vec::new();
    // One highlighter per index, made at its first hit (the query's terms read once).
    let mappings: Vec<_> = match req.highlight {
        Some(_) => prepared.iter().map(|p| p.handle.mapping()).collect(),
        None => Vec::new(),
    };
    let mut highlighters: Vec<Option<super::highlight::Highlighter<'_>>> =
        prepared.iter().map(|_| None).collect();
    for (i, c) in collected.hits.iter().skip(req.from as usize).enumerate() {
        // Loading documents is work too: stop it as promptly as collection.
        if i % FETCH_CHECK_EVERY_HITS == FETCH_CHECK_EVERY_HITS - 1 && ctx.is_cancelled() {
            return Err(cancelled());
        }
        let p = &prepared[c.at.0];
        let stored = p
            .handle
            .load_doc(&p.searcher, DocAddress::new(c.at.2, c.at.3))?;
        let mut hit = Map::new();
        let stored_none = req
            .stored_fields
            .as_ref()
            .is_some_and(|l| l.iter().any(|f| f == "_none_"));
        hit.insert("_index".into(), json!(p.handle.name()));
        if !stored_none {
            hit.insert("_id".into(), json!(stored.id));
        }
        if req.version {
            hit.insert("_version".into(), json!(stored.version));
        }
        if req.seq_no_primary_term {
            hit.insert("_seq_no".into(), json!(stored.seq_no));
            hit.insert("_primary_term".into(), json!(PRIMARY_TERM));
        }
        hit.insert(
            "_score".into(),
            if scores_shown {
                score_json(c.score)
            } else {
                Value::Null
            },
        );
        // OpenSearch shows the routing a document was written with after the score.
        if let Some(routing) = stored.routing.as_deref().filter(|_| !stored_none) {
            hit.insert("_routing".into(), json!(routing));
        }
        // `stored_fields` leaves `_source` out unless the request asks for it.
        let source_wanted = req.stored_fields.is_none() || req.source_set;
        if !req.source.disabled && source_wanted && !stored_none {
            hit.insert("_source".into(), filter_source(&stored.source, &req.source));
        }
        if !req.fields.is_empty() || !req.docvalue_fields.is_empty() {
            let mapping = p.handle.mapping();
            let mut fields =
                super::fields::hit_fields(&mapping, &stored.source, &req.fields, false)?;
            let doc_values =
                super::fields::hit_fields(&mapping, &stored.source, &req.docvalue_fields, true)
                    .map_err(|e| e.with_index(p.handle.name()).into_search_phase_failure())?;
            fields.extend(doc_values);
            if !fields.is_empty() {
                hit.insert("fields".into(), Value::Object(fields));
            }
        }
        if let Some(spec) = &req.highlight {
            let h = highlighters[c.at.0].get_or_insert_with(|| {
                super::highlight::Highlighter::new(
                    spec,
                    &mappings[c.at.0],
                    p.handle.fields(),
                    p.searcher.index(),
                    p.query(),
                )
            });
            if let Some(marked) = h.hit(&stored.source) {
                hit.insert("highlight".into(), marked);
            }
        }
        if !req.sort.is_empty() {
            let sort_vals: Vec<Value> = req
                .sort
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    render_sort_value(
                        &c.keys[i],
                        spec,
                        p.sort_columns
                            .get(i)
                            .and_then(|c| c.as_ref().map(|(_, t)| *t)),
                    )
                })
                .collect();
            hit.insert("sort".into(), Value::Array(sort_vals));
        }
        hits_json.push(Value::Object(hit));
    }
    let mut hits = Map::new();
    match req.track_total_hits {
        TrackTotalHits::Off => {}
        TrackTotalHits::Exact => {
            hits.insert(
                "total".into(),
                json!({"value": collected.total, "relation": "eq"}),
            );
        }
        TrackTotalHits::UpTo(n) => {
            if collected.total > n {
                hits.insert("total".into(), json!({"value": n, "relation": "gte"}));
            } else {
                hits.insert(
                    "total".into(),
                    json!({"value": collected.total, "relation": "eq"}),
                );
            }
        }
    }
    // With `size: 0` OpenSearch collects no top documents and so has no maximum score.
    hits.insert(
        "max_score".into(),
        if scores_shown && req.size > 0 {
            collected.max_score.map_or(Value::Null, score_json)
        } else {
            Value::Null
        },
    );
    hits.insert("hits".into(), Value::Array(hits_json));
    let shards: u64 = prepared.iter().map(|p| p.handle.number_of_shards()).sum();
    let mut out = Map::new();
    out.insert("took".into(), json!(started.elapsed().as_millis() as u64));
    out.insert("timed_out".into(), json!(collected.timed_out));
    if let Some(early) = collected.terminated_early {
        out.insert("terminated_early".into(), json!(early));
    }
    out.insert(
        "_shards".into(),
        json!({"total": shards, "successful": shards, "skipped": 0, "failed": 0}),
    );
    out.insert("hits".into(), Value::Object(hits));
    if let Some(a) = aggregations {
        out.insert("aggregations".into(), a);
    }
    if req.profile {
        let node = req.node_id.as_deref().unwrap_or("local");
        let hits_collector = if req.size == 0 {
            HitsCollector::Count
        } else if req.sort.is_empty() {
            HitsCollector::Score
        } else {
            HitsCollector::Fields
        };
        let shards: Vec<Value> = collected
            .profiles
            .iter()
            .map(|p| p.render(node, hits_collector))
            .collect();
        out.insert("profile".into(), json!({ "shards": shards }));
    }
    Ok(Value::Object(out))
}
