//! `_delete_by_query` and `_update_by_query` (without scripts): the matching documents are
//! read in `_doc` order from one scroll snapshot, in batches, and each is deleted (or written
//! again as it is) with a compare-and-set on the `_seq_no` it was read at, so a document
//! changed meanwhile is a version conflict, as OpenSearch's by-query actions count them.
//!
//! [`Engine::by_query`] runs one action to its end under a [`SearchContext`]: it checks the
//! context's cancellation between batches (and the scroll checks it while it reads), and a
//! cancelled action stops there and answers what it did so far, marked cancelled, as
//! OpenSearch's `BulkByScrollResponse` does. Its counts are published as it goes in the
//! request's [`ByQueryProgress`], which the server shows as the task's `status`.
//!
//! # Invariants
//! - B1 — `changed + version_conflicts + failures.len()` never exceeds `total`, and a batch is
//!   counted in `batches` only once its writes were applied. Tested by
//!   `test_outcome_counts_stay_within_the_total` and the HTTP tests in `tests/http/by_query.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};

use crate::engine::Engine;
use crate::error::{ErrorCode, Result};
use crate::index::{DocOp, OpType};
use crate::resolve::IndicesOptions;
use crate::search::{PRIMARY_TERM, SearchContext, SearchRequest};
use crate::versioning::Versioning;

/// OpenSearch's default `scroll_size` of the by-query actions.
pub const DEFAULT_BATCH_SIZE: u64 = 1000;
/// How long the snapshot of a by-query action stays open between batches: OpenSearch's
/// default `scroll` for them.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(300);

/// What a by-query action does and how.
#[derive(Debug, Clone)]
pub struct ByQueryRequest {
    /// The query selecting the documents.
    pub query: Value,
    /// `max_docs`: at most this many documents.
    pub max_docs: Option<u64>,
    /// `conflicts=proceed`: count version conflicts and go on (else the first one stops it).
    pub proceed_on_conflict: bool,
    /// `scroll_size`: documents per batch.
    pub batch_size: u64,
    /// Update (write each document again) rather than delete.
    pub update: bool,
    /// How the index expression resolves.
    pub indices_options: IndicesOptions,
    /// Where the action publishes its counts while it runs.
    pub progress: Arc<ByQueryProgress>,
}

/// The counts of a running by-query action, published after every batch.
///
/// Each counter is read and written with `Relaxed` ordering: they carry no other data, and a
/// reader (a `_tasks` listing) only shows them; a reading a batch late is a correct snapshot
/// of an earlier moment.
#[derive(Debug, Default)]
pub struct ByQueryProgress {
    total: AtomicU64,
    changed: AtomicU64,
    batches: AtomicU64,
    version_conflicts: AtomicU64,
}

impl ByQueryProgress {
    fn publish(&self, out: &ByQueryOutcome) {
        self.total.store(out.total, Ordering::Relaxed);
        self.changed.store(out.changed, Ordering::Relaxed);
        self.batches.store(out.batches, Ordering::Relaxed);
        self.version_conflicts
            .store(out.version_conflicts, Ordering::Relaxed);
    }

    /// The counts as OpenSearch's `BulkByScrollTask.Status` shows them in `_tasks`.
    pub fn status(&self, update: bool) -> Value {
        let changed = self.changed.load(Ordering::Relaxed);
        let (updated, deleted) = if update { (changed, 0) } else { (0, changed) };
        json!({
            "total": self.total.load(Ordering::Relaxed),
            "updated": updated,
            "created": 0,
            "deleted": deleted,
            "batches": self.batches.load(Ordering::Relaxed),
            "version_conflicts": self.version_conflicts.load(Ordering::Relaxed),
            "noops": 0,
            "retries": {"bulk": 0, "search": 0},
            "throttled_millis": 0,
            "requests_per_second": -1.0,
            "throttled_until_millis": 0,
        })
    }
}

/// What a by-query action did, in OpenSearch's terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ByQueryOutcome {
    /// Documents the query matched (bounded by `max_docs`).
    pub total: u64,
    /// Documents deleted (or updated).
    pub changed: u64,
    /// Batches read and applied.
    pub batches: u64,
    /// Documents changed by someone else since they were read.
    pub version_conflicts: u64,
    /// Updates that changed nothing (always 0 without scripts).
    pub noops: u64,
    /// The failures that stopped the action (OpenSearch's bulk failure entries).
    pub failures: Vec<Value>,
    /// Milliseconds taken.
    pub took: u64,
    /// The action was cancelled and stopped before the end.
    pub cancelled: bool,
}

impl ByQueryOutcome {
    /// Renders the outcome as OpenSearch's by-query response: `_update_by_query` shows
    /// `updated`, `_delete_by_query` does not; `canceled` carries the cancellation's reason
    /// when the action was cancelled.
    pub fn to_json(&self, update: bool, cancel_reason: Option<&str>) -> Value {
        let mut v = serde_json::Map::new();
        v.insert("took".into(), json!(self.took));
        v.insert("timed_out".into(), json!(false));
        v.insert("total".into(), json!(self.total));
        if update {
            v.insert("updated".into(), json!(self.changed));
            v.insert("deleted".into(), json!(0));
        } else {
            v.insert("deleted".into(), json!(self.changed));
        }
        v.insert("batches".into(), json!(self.batches));
        v.insert("version_conflicts".into(), json!(self.version_conflicts));
        v.insert("noops".into(), json!(self.noops));
        v.insert("retries".into(), json!({"bulk": 0, "search": 0}));
        v.insert("throttled_millis".into(), json!(0));
        v.insert("requests_per_second".into(), json!(-1.0));
        v.insert("throttled_until_millis".into(), json!(0));
        if self.cancelled {
            v.insert(
                "canceled".into(),
                json!(cancel_reason.unwrap_or("task cancelled")),
            );
        }
        v.insert("failures".into(), Value::Array(self.failures.clone()));
        Value::Object(v)
    }
}

/// Whether `e` is the error of a cancelled search (the scroll's own check).
fn is_cancellation(e: &crate::error::EngineError) -> bool {
    e.root_cause().code == ErrorCode::TaskCancelled
}

impl Engine {
    /// Reads `query` against every index `index_expr` names without running it, for a
    /// by-query action answered with its task id before it runs: a query whose own words are
    /// wrong (an unknown query type, a malformed clause: a `parsing_exception`) is refused
    /// now, as OpenSearch refuses it when the request arrives. Anything else (no such index,
    /// a field the mapping refuses, a terms lookup) is the running action's to find and
    /// report, as it would be without this check.
    pub fn check_by_query(&self, index_expr: &str, req: &ByQueryRequest) -> Result<()> {
        let Ok(targets) = self.resolve_targets(index_expr, &req.indices_options) else {
            return Ok(());
        };
        let now = crate::now_millis();
        for target in &targets {
            let h = &target.handle;
            let mapping = h.mapping();
            let qctx = crate::query::QueryContext {
                mapping: &mapping,
                fields: h.fields(),
                index: h.tantivy(),
                now_millis: now,
                index_name: h.name(),
                max_terms_count: h.max_terms_count(),
                lookups: None,
            };
            if let Err(e) = crate::query::build_query(&req.query, &qctx)
                && e.root_cause().code == ErrorCode::Parsing
            {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Runs a by-query action over `index_expr`, checking `ctx` for cancellation between
    /// batches; a cancelled action answers what it did, marked cancelled.
    pub fn by_query(
        &self,
        index_expr: &str,
        req: &ByQueryRequest,
        ctx: &SearchContext,
    ) -> Result<ByQueryOutcome> {
        let started = Instant::now();
        let mut search = SearchRequest::parse(
            Some(&json!({
                "query": req.query,
                "size": req.batch_size.max(1),
                "sort": ["_doc"],
                "seq_no_primary_term": true,
                "_source": req.update,
            })),
            &Default::default(),
        )?;
        search.indices_options = req.indices_options;
        let mut outcome = match self.open_scroll(index_expr, &search, KEEP_ALIVE, ctx) {
            Ok(first) => {
                let scroll_id = first["_scroll_id"].as_str().unwrap_or_default().to_string();
                let outcome = self.by_query_pages(&scroll_id, first, req, ctx);
                let _ = self.clear_scrolls(std::slice::from_ref(&scroll_id));
                outcome?
            }
            Err(e) if is_cancellation(&e) => ByQueryOutcome {
                cancelled: true,
                ..ByQueryOutcome::default()
            },
            Err(e) => return Err(e),
        };
        outcome.took = started.elapsed().as_millis() as u64;
        req.progress.publish(&outcome);
        Ok(outcome)
    }

    fn by_query_pages(
        &self,
        scroll_id: &str,
        first: Value,
        req: &ByQueryRequest,
        ctx: &SearchContext,
    ) -> Result<ByQueryOutcome> {
        let matched = first["hits"]["total"]["value"].as_u64().unwrap_or(0);
        let limit = req.max_docs.unwrap_or(u64::MAX);
        let mut out = ByQueryOutcome {
            total: matched.min(limit),
            ..ByQueryOutcome::default()
        };
        req.progress.publish(&out);
        let mut page = first;
        let mut seen = 0u64;
        loop {
            let hits = page["hits"]["hits"].as_array().cloned().unwrap_or_default();
            if hits.is_empty() || seen >= limit {
                return Ok(out);
            }
            if ctx.is_cancelled() {
                out.cancelled = true;
                return Ok(out);
            }
            let take = usize::try_from(limit - seen)
                .unwrap_or(usize::MAX)
                .min(hits.len());
            let ops: Vec<(String, DocOp)> = hits[..take]
                .iter()
                .map(|h| {
                    let index = h["_index"].as_str().unwrap_or_default().to_string();
                    let id = h["_id"].as_str().unwrap_or_default().to_string();
                    // The document keeps (or is deleted with) the routing it was written with.
                    let routing = h["_routing"].as_str().map(str::to_string);
                    let versioning = Versioning {
                        if_seq_no: h["_seq_no"].as_u64(),
                        if_primary_term: Some(PRIMARY_TERM),
                        ..Versioning::default()
                    };
                    let op = if req.update {
                        DocOp::Index {
                            id: Some(id),
                            source: h["_source"].clone(),
                            op_type: OpType::Index,
                            versioning,
                            routing,
                        }
                    } else {
                        DocOp::Delete {
                            id,
                            versioning,
                            routing,
                        }
                    };
                    (index, op)
                })
                .collect();
            seen += take as u64;
            let results = self.bulk(ops.clone());
            out.batches += 1;
            for ((index, op), result) in ops.iter().zip(results) {
                match result {
                    Ok(_) => out.changed += 1,
                    Err(e) => {
                        if e.code == ErrorCode::VersionConflict {
                            out.version_conflicts += 1;
                            if req.proceed_on_conflict {
                                continue;
                            }
                        }
                        let id = match op {
                            DocOp::Delete { id, .. } => id.clone(),
                            DocOp::Index { id, .. } => id.clone().unwrap_or_default(),
                            DocOp::Update { id, .. } => id.clone(),
                        };
                        let mut cause = sluice_wire::render_error(&e);
                        if let Some(o) = cause.as_object_mut() {
                            o.remove("root_cause");
                        }
                        out.failures.push(json!({
                            "index": index,
                            "id": id,
                            "cause": cause,
                            "status": e.code.status(),
                        }));
                        // OpenSearch stops at the first failing batch, having applied the
                        // rest of it.
                    }
                }
            }
            req.progress.publish(&out);
            if !out.failures.is_empty() || seen >= limit {
                return Ok(out);
            }
            page = match self.continue_scroll(scroll_id, None, ctx) {
                Ok(page) => page,
                Err(e) if is_cancellation(&e) => {
                    out.cancelled = true;
                    return Ok(out);
                }
                Err(e) => return Err(e),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_with(n: u64) -> (tempfile::TempDir, Engine) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path()).unwrap();
        let ops = (0..n)
            .map(|i| {
                (
                    "q".to_string(),
                    DocOp::Index {
                        id: Some(i.to_string()),
                        source: json!({"n": i}),
                        op_type: OpType::Index,
                        versioning: Versioning::default(),
                        routing: None,
                    },
                )
            })
            .collect();
        for r in engine.bulk(ops) {
            r.unwrap();
        }
        engine.refresh("q").unwrap();
        (dir, engine)
    }

    fn request(update: bool, batch_size: u64, max_docs: Option<u64>) -> ByQueryRequest {
        ByQueryRequest {
            query: json!({"match_all": {}}),
            max_docs,
            proceed_on_conflict: false,
            batch_size,
            update,
            indices_options: IndicesOptions::default(),
            progress: Arc::default(),
        }
    }

    #[test]
    fn test_outcome_counts_stay_within_the_total() {
        let (_dir, engine) = engine_with(7);
        let req = request(false, 3, Some(5));
        let out = engine
            .by_query("q", &req, &SearchContext::default())
            .unwrap();
        assert_eq!((out.total, out.changed, out.batches), (5, 5, 2));
        assert!(out.changed + out.version_conflicts + out.failures.len() as u64 <= out.total);
        // The progress holds the final counts.
        let status = req.progress.status(false);
        assert_eq!(
            (status["total"].as_u64(), status["deleted"].as_u64()),
            (Some(5), Some(5))
        );
        assert_eq!(status["batches"], 2);
    }

    #[test]
    fn test_a_cancelled_action_stops_and_says_so() {
        let (_dir, engine) = engine_with(4);
        let ctx = SearchContext {
            cancelled: Some(Arc::new(std::sync::atomic::AtomicBool::new(true))),
            ..SearchContext::default()
        };
        let out = engine.by_query("q", &request(true, 1, None), &ctx).unwrap();
        assert!(out.cancelled);
        assert_eq!(out.changed, 0);
        let json = out.to_json(true, Some("by user request"));
        assert_eq!(json["canceled"], "by user request");
        assert_eq!(json["updated"], 0);
    }
}
