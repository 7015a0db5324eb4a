//! The `fuzzy` query: terms within an edit distance of the value, unanalysed.
//!
//! `{"fuzzy": {"title": "bake"}}` and the long form with `value`, `fuzziness` (`AUTO`,
//! `AUTO:low,high`, 0, 1, 2), `prefix_length`, `max_expansions`, `transpositions`, `rewrite`,
//! `boost` and `_name`. tantivy's [`FuzzyTermQuery`] supplies the Levenshtein automaton; a
//! `prefix_length` intersects it with an automaton that requires the term's first characters
//! exactly, as Lucene's `FuzzyQuery` does. Every expansion scores the same (the query's boost), as
//! OpenSearch's `constant_score` rewrite does; `max_expansions` is validated but not applied:
//! tantivy streams every matching term.

use serde_json::{Map, Value};
use tantivy::query::{
    AutomatonWeight, DfaWrapper, EmptyQuery, EnableScoring, FuzzyTermQuery, Query, TermQuery,
    Weight,
};
use tantivy::schema::IndexRecordOption;
use tantivy::{Term, schema::Field};
use tantivy_fst::Automaton;

use super::full_text::Fuzziness;
use super::{
    QueryContext, bool_param, boost_param, check_params, number_param, single_field, text_param,
    with_boost,
};
use crate::error::{EngineError, Result};
use crate::mapping::FieldType;

/// The parameters of the long form.
const FUZZY_PARAMS: &[&str] = &[
    "value",
    "fuzziness",
    "prefix_length",
    "max_expansions",
    "transpositions",
    "rewrite",
    "boost",
    "_name",
];

/// OpenSearch's default `max_expansions` of a fuzzy query.
const DEFAULT_MAX_EXPANSIONS: i64 = 50;

/// The parsed options of a `fuzzy` clause.
#[derive(Debug, Clone, Copy)]
struct FuzzyOptions {
    fuzziness: Fuzziness,
    prefix_length: i64,
    max_expansions: i64,
    transpositions: bool,
    boost: f32,
}

impl Default for FuzzyOptions {
    fn default() -> Self {
        FuzzyOptions {
            fuzziness: Fuzziness::AUTO,
            prefix_length: 0,
            max_expansions: DEFAULT_MAX_EXPANSIONS,
            transpositions: true,
            boost: 1.0,
        }
    }
}

/// Reads an integer parameter of `fuzzy` (numbers or numeric strings, no fraction).
fn int_param(key: &str, v: &Value) -> Result<i64> {
    let n = number_param("fuzzy", key, v)?;
    if n.fract() != 0.0 {
        return Err(EngineError::new(
            crate::error::ErrorCode::XContentParse,
            format!("[fuzzy] failed to parse field [{key}]: expected an integer, got [{v}]"),
        ));
    }
    Ok(n as i64)
}

fn parse_options(name: &str, obj: &Map<String, Value>) -> Result<(String, FuzzyOptions)> {
    check_params("fuzzy", obj, FUZZY_PARAMS)?;
    let value = match obj.get("value") {
        Some(Value::Null) | None => {
            return Err(EngineError::parsing(format!(
                "[fuzzy] query malformed, no value specified for field [{name}]"
            )));
        }
        Some(v) => text_param("fuzzy", "value", v)?,
    };
    let mut opts = FuzzyOptions {
        boost: boost_param("fuzzy", obj)?,
        ..FuzzyOptions::default()
    };
    for (key, v) in obj {
        match key.as_str() {
            "fuzziness" => opts.fuzziness = Fuzziness::parse("fuzzy", v)?,
            "prefix_length" => opts.prefix_length = int_param(key, v)?,
            "max_expansions" => opts.max_expansions = int_param(key, v)?,
            "transpositions" => opts.transpositions = bool_param("fuzzy", key, v)?,
            "rewrite" => {
                // Every rewrite gives the same matches; sluice scores expansions constantly.
                text_param("fuzzy", key, v)?;
            }
            _ => {}
        }
    }
    Ok((value, opts))
}

/// `fuzzy`.
pub(super) fn fuzzy(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let (name, spec) = single_field("fuzzy", body)?;
    let (value, opts) = match spec {
        Value::Object(obj) => parse_options(name, obj)?,
        Value::Null => {
            return Err(EngineError::parsing(format!(
                "[fuzzy] query malformed, no value specified for field [{name}]"
            )));
        }
        other => (text_param("fuzzy", name, other)?, FuzzyOptions::default()),
    };
    // Lucene's FuzzyQuery checks, reported as OpenSearch wraps them.
    if opts.max_expansions <= 0 {
        return Err(ctx.value_error("maxExpansions must be positive."));
    }
    if opts.prefix_length < 0 {
        return Err(ctx.value_error("prefixLength cannot be negative."));
    }
    let Some(field) = ctx.mapping.resolve(name) else {
        return Ok(Box::new(EmptyQuery));
    };
    if !matches!(field.ty, FieldType::Text | FieldType::Keyword) {
        return Err(ctx.shard_error(format!(
            "Can only use fuzzy queries on keyword and text fields - not on [{name}] which is of \
             type [{}]",
            field.ty.name()
        )));
    }
    let distance = opts.fuzziness.distance(value.chars().count());
    let term = ctx.str_term(&field, &value);
    let query: Box<dyn Query> = if distance == 0 {
        Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs))
    } else if opts.prefix_length == 0 {
        Box::new(FuzzyTermQuery::new(term, distance, opts.transpositions))
    } else {
        let prefix: String = value.chars().take(opts.prefix_length as usize).collect();
        let prefix_term = ctx.str_term(&field, &prefix);
        Box::new(PrefixedFuzzyQuery {
            term,
            distance,
            transpositions: opts.transpositions,
            prefix: prefix_term.serialized_value_bytes().to_vec(),
        })
    };
    Ok(with_boost(query, opts.boost))
}

/// A fuzzy term query whose terms must start with an exact prefix (`prefix_length`).
#[derive(Debug, Clone)]
struct PrefixedFuzzyQuery {
    /// The fuzzy term, on a JSON path.
    term: Term,
    /// The edit distance, 1 or 2.
    distance: u8,
    /// Whether a transposition costs one edit.
    transpositions: bool,
    /// The serialized bytes every matching term key starts with: the JSON path, its type byte
    /// and the value's first `prefix_length` characters.
    prefix: Vec<u8>,
}

impl Query for PrefixedFuzzyQuery {
    fn weight(&self, _scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        let dfa = FuzzyTermQuery::new(self.term.clone(), self.distance, self.transpositions)
            .automaton()?;
        let automaton = PrefixedDfa {
            dfa,
            prefix: self.prefix.clone(),
        };
        let field: Field = self.term.field();
        let bytes = self.term.serialized_value_bytes();
        let weight = match bytes.iter().position(|b| *b == 0) {
            Some(end) => AutomatonWeight::new_for_json_path(field, automaton, &bytes[..=end]),
            None => AutomatonWeight::new(field, automaton),
        };
        Ok(Box::new(weight))
    }
}

/// The Levenshtein automaton restricted to keys starting with `prefix`.
struct PrefixedDfa {
    dfa: DfaWrapper,
    prefix: Vec<u8>,
}

impl Automaton for PrefixedDfa {
    /// The DFA's state and how many prefix bytes matched so far (`None` once one did not).
    type State = (u32, Option<usize>);

    fn start(&self) -> Self::State {
        (self.dfa.start(), Some(0))
    }

    fn is_match(&self, state: &Self::State) -> bool {
        state.1 == Some(self.prefix.len()) && self.dfa.is_match(&state.0)
    }

    fn can_match(&self, state: &Self::State) -> bool {
        state.1.is_some() && self.dfa.can_match(&state.0)
    }

    fn accept(&self, state: &Self::State, byte: u8) -> Self::State {
        let matched = match state.1 {
            Some(n) if n == self.prefix.len() => Some(n),
            Some(n) if self.prefix[n] == byte => Some(n + 1),
            _ => None,
        };
        (self.dfa.accept(&state.0, byte), matched)
    }
}
