//! Compound queries: `bool`, `constant_score` and `dis_max`.

use serde_json::Value;
use tantivy::query::{
    AllQuery, BooleanQuery, ConstScoreQuery, DisjunctionMaxQuery, EmptyQuery, Occur, Query,
};

use super::{MinimumShouldMatch, QueryContext, boost_param, build_query, number_param, with_boost};
use crate::error::{EngineError, Result};

/// The keys `bool` accepts.
const BOOL_PARAMS: &[&str] = &[
    "must",
    "should",
    "filter",
    "must_not",
    "minimum_should_match",
    "boost",
    "adjust_pure_negative",
    "_name",
];

/// `bool`: `must` (scored), `filter` (not scored), `must_not` and `should` clauses.
pub(super) fn bool_query(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = super::object_body("bool", body, BOOL_PARAMS)?;
    let clauses = BoolClauses {
        must: sub_queries("bool", "must", obj.get("must"), ctx)?,
        should: sub_queries("bool", "should", obj.get("should"), ctx)?,
        filter: sub_queries("bool", "filter", obj.get("filter"), ctx)?,
        must_not: sub_queries("bool", "must_not", obj.get("must_not"), ctx)?,
    };
    let msm = obj
        .get("minimum_should_match")
        .map(|v| MinimumShouldMatch::parse("bool", v))
        .transpose()?;
    Ok(with_boost(clauses.build(msm), boost_param("bool", obj)?))
}

/// Reads one clause list of a compound query: a query object or an array of them.
fn sub_queries(
    query: &str,
    key: &str,
    v: Option<&Value>,
    ctx: &QueryContext,
) -> Result<Vec<Box<dyn Query>>> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(obj @ Value::Object(_)) => Ok(vec![build_query(obj, ctx)?]),
        Some(Value::Array(items)) => items.iter().map(|q| build_query(q, ctx)).collect(),
        Some(other) => Err(EngineError::parsing(format!(
            "[{query}] query does not support [{key}] of type [{}]",
            super::json_kind(other)
        ))),
    }
}

/// The clauses of a boolean query, by occurrence.
#[derive(Default)]
pub(super) struct BoolClauses {
    /// Required and scored.
    pub(super) must: Vec<Box<dyn Query>>,
    /// Optional, unless no `must`/`filter` clause exists or `minimum_should_match` says so.
    pub(super) should: Vec<Box<dyn Query>>,
    /// Required, not scored.
    pub(super) filter: Vec<Box<dyn Query>>,
    /// Excluded.
    pub(super) must_not: Vec<Box<dyn Query>>,
}

impl BoolClauses {
    /// Builds the tantivy query with OpenSearch's semantics: `should` clauses are optional next
    /// to `must`/`filter` clauses and one is required otherwise; `minimum_should_match` overrides
    /// that; a bool with only `must_not` clauses matches every other document (score 0); an
    /// empty bool matches everything.
    pub(super) fn build(self, msm: Option<MinimumShouldMatch>) -> Box<dyn Query> {
        let BoolClauses {
            must,
            mut should,
            filter,
            must_not,
        } = self;
        let has_required = !must.is_empty() || !filter.is_empty();
        let n_should = should.len();
        let required_should = match msm {
            Some(m) => m.required(n_should),
            None if has_required => 0,
            None => n_should.min(1),
        };
        if required_should > n_should {
            return Box::new(EmptyQuery);
        }
        if !has_required && should.is_empty() {
            if must_not.is_empty() {
                return Box::new(AllQuery);
            }
            let mut subs: Vec<(Occur, Box<dyn Query>)> = vec![(
                Occur::Must,
                Box::new(ConstScoreQuery::new(Box::new(AllQuery), 0.0)),
            )];
            subs.extend(must_not.into_iter().map(|q| (Occur::MustNot, q)));
            return Box::new(BooleanQuery::new(subs));
        }
        let mut subs: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        subs.extend(must.into_iter().map(|q| (Occur::Must, q)));
        subs.extend(filter.into_iter().map(|q| {
            (
                Occur::Must,
                Box::new(ConstScoreQuery::new(q, 0.0)) as Box<dyn Query>,
            )
        }));
        subs.extend(must_not.into_iter().map(|q| (Occur::MustNot, q)));
        match required_should {
            // Optional next to required clauses (only scored); a should-only bool with no
            // explicit minimum still needs one, which tantivy's union gives.
            0 | 1 if !has_required || required_should == 0 => {
                subs.extend(should.into_iter().map(|q| (Occur::Should, q)));
            }
            1 => {
                let any: Box<dyn Query> = if n_should == 1 {
                    should.pop().expect("one should clause")
                } else {
                    Box::new(BooleanQuery::union(should))
                };
                subs.push((Occur::Must, any));
            }
            n => subs.push((
                Occur::Must,
                Box::new(BooleanQuery::union_with_minimum_required_clauses(should, n)),
            )),
        }
        if subs.len() == 1 && subs[0].0 == Occur::Must {
            return subs.pop().expect("one clause").1;
        }
        Box::new(BooleanQuery::new(subs))
    }
}

/// `constant_score`: the filter's documents, all scored `boost`.
pub(super) fn constant_score(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = super::object_body("constant_score", body, &["filter", "boost", "_name"])?;
    let filter = obj
        .get("filter")
        .ok_or_else(|| EngineError::parsing("[constant_score] requires a 'filter' element"))?;
    let filter = build_query(filter, ctx)?;
    Ok(Box::new(ConstScoreQuery::new(
        filter,
        boost_param("constant_score", obj)?,
    )))
}

/// `dis_max`: the best clause's score plus `tie_breaker` times the others'.
pub(super) fn dis_max(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = super::object_body(
        "dis_max",
        body,
        &["queries", "tie_breaker", "boost", "_name"],
    )?;
    let queries = sub_queries("dis_max", "queries", obj.get("queries"), ctx)?;
    if queries.is_empty() {
        return Err(EngineError::parsing(
            "[dis_max] requires 'queries' field with at least one clause",
        ));
    }
    let tie_breaker = match obj.get("tie_breaker") {
        Some(v) => number_param("dis_max", "tie_breaker", v)? as f32,
        None => 0.0,
    };
    let query = DisjunctionMaxQuery::with_tie_breaker(queries, tie_breaker);
    Ok(with_boost(Box::new(query), boost_param("dis_max", obj)?))
}
