//! Response filtering by the `filter_path` parameter, as OpenSearch's REST layer does it
//! (`FilterPath` and `FilterPathBasedFilter`, run through Jackson's filtering generator with
//! paths included and several matches allowed).
//!
//! The parameter is a comma-separated list of expressions. An expression is a dotted path of
//! property names (`hits.hits._id`); a `\.` is a dot inside a name. A name may hold `*`
//! wildcards ([`simple_match`]: `nodes.*.host*`), and a `**` segment stands for one or more
//! levels of any names (`indices.**.version`). Arrays are transparent: a path goes on through
//! each element of an array it meets. An expression starting with `-` excludes what it names;
//! the others include.
//!
//! What the answer keeps, in OpenSearch's terms:
//! - with includes, a property whose whole path matches is kept with everything under it; one
//!   on the way to a match is kept only if something under it is (an object or array left
//!   empty is dropped, and so is a scalar where a longer path was expected); anything else is
//!   dropped;
//! - with excludes, a property whose whole path matches is dropped; one on the way to a match
//!   is kept with what is left under it (dropped if that is an empty object or array, as
//!   OpenSearch drops it); anything else is kept whole;
//! - with both, the includes are applied first, then the excludes;
//! - the answer's outermost object (or array) is always there: a filter that matches nothing
//!   gives `{}`.
//!
//! ```
//! use serde_json::json;
//! use sluice_wire::filter_path::FilterPath;
//!
//! let answer = json!({"took": 3, "hits": {"total": {"value": 2}, "hits": [
//!     {"_id": "1", "_score": 1.0}, {"_id": "2", "_score": 0.5}]}});
//! let filter = FilterPath::parse("took,hits.hits._id").unwrap();
//! assert_eq!(
//!     filter.apply(answer),
//!     json!({"took": 3, "hits": {"hits": [{"_id": "1"}, {"_id": "2"}]}})
//! );
//! ```

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::pattern::simple_match;

/// One segment of an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: one or more levels of any names.
    Deep,
    /// A name, possibly with `*` wildcards (a lone `*` matches any one name).
    Name(String),
}

impl Segment {
    fn matches(&self, name: &str) -> bool {
        match self {
            Segment::Deep => true,
            Segment::Name(pattern) => simple_match(pattern, name),
        }
    }
}

/// Where a filter stands while it walks the answer: expression `path`, at segment `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Position {
    path: usize,
    at: usize,
}

/// What one property's name gives, against the positions of the filters in force.
enum Evaluated {
    /// An expression ends at this property: it is named whole.
    Named,
    /// No expression goes through this property.
    Unnamed,
    /// Expressions go on under this property, at these positions.
    Under(Vec<Position>),
}

/// A set of expressions of one kind (all includes or all excludes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Expressions {
    paths: Vec<Vec<Segment>>,
}

impl Expressions {
    fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    fn start(&self) -> Vec<Position> {
        (0..self.paths.len())
            .map(|path| Position { path, at: 0 })
            .collect()
    }

    /// OpenSearch's `FilterPathBasedFilter.evaluate`: the first expression that ends at `name`
    /// names it whole; otherwise every expression whose segment matches goes on to its next
    /// segment, and a `**` that matched also stays where it is (it may stand for more levels).
    fn evaluate(&self, name: &str, positions: &[Position]) -> Evaluated {
        let mut under = Vec::new();
        // What `under` holds, so a long list of `**` expressions stays linear (a scan of
        // `under` for each made thousands of them quadratic per property).
        let mut seen = HashSet::new();
        for &pos in positions {
            let segments = &self.paths[pos.path];
            let segment = &segments[pos.at];
            if !segment.matches(name) {
                continue;
            }
            if pos.at + 1 == segments.len() {
                return Evaluated::Named;
            }
            let next = Position {
                path: pos.path,
                at: pos.at + 1,
            };
            if *segment == Segment::Deep && seen.insert(pos) {
                under.push(pos);
            }
            if seen.insert(next) {
                under.push(next);
            }
        }
        if under.is_empty() {
            Evaluated::Unnamed
        } else {
            Evaluated::Under(under)
        }
    }
}

/// A parsed `filter_path`: what it includes and what it excludes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterPath {
    includes: Expressions,
    excludes: Expressions,
}

impl FilterPath {
    /// Parses the parameter's value. `None` when it holds no expression (empty, or only
    /// commas and spaces): the answer is not filtered, as in OpenSearch.
    pub fn parse(value: &str) -> Option<FilterPath> {
        let mut filter = FilterPath::default();
        for expression in value.split(',') {
            let expression = expression.trim();
            if expression.is_empty() {
                continue;
            }
            match expression.strip_prefix('-') {
                Some(excluded) => filter.excludes.paths.push(segments(excluded)),
                None => filter.includes.paths.push(segments(expression)),
            }
        }
        (!filter.includes.is_empty() || !filter.excludes.is_empty()).then_some(filter)
    }

    /// The including expressions, each as its segments: a name pattern (`*` wildcards, an
    /// escaped dot already a dot), or `**` for one or more levels of any names. Lets a caller
    /// tell what a filter can select before it builds the answer.
    pub fn includes(&self) -> Vec<Vec<&str>> {
        self.includes
            .paths
            .iter()
            .map(|path| {
                path.iter()
                    .map(|s| match s {
                        Segment::Deep => "**",
                        Segment::Name(name) => name.as_str(),
                    })
                    .collect()
            })
            .collect()
    }

    /// The answer filtered: the includes first, then the excludes (see the module
    /// documentation).
    pub fn apply(&self, answer: Value) -> Value {
        let mut answer = answer;
        if !self.includes.is_empty() {
            answer = root(answer, &self.includes, true);
        }
        if !self.excludes.is_empty() {
            answer = root(answer, &self.excludes, false);
        }
        answer
    }
}

/// An expression's segments: split at each `.` not escaped by a `\`; `\.` becomes a dot.
fn segments(expression: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = expression.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                current.push('.');
                chars.next();
            }
            '.' => out.push(segment(std::mem::take(&mut current))),
            c => current.push(c),
        }
    }
    out.push(segment(current));
    out
}

fn segment(name: String) -> Segment {
    if name == "**" {
        Segment::Deep
    } else {
        Segment::Name(name)
    }
}

/// The answer's outermost value: kept even when nothing in it is.
fn root(answer: Value, expressions: &Expressions, include: bool) -> Value {
    let start = expressions.start();
    match answer {
        Value::Object(map) => Value::Object(object(map, expressions, &start, include)),
        Value::Array(items) => Value::Array(array(items, expressions, &start, include)),
        scalar => scalar,
    }
}

/// An object's properties kept, with the filters at `positions`.
fn object(
    map: Map<String, Value>,
    expressions: &Expressions,
    positions: &[Position],
    include: bool,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in map {
        let kept = match expressions.evaluate(&name, positions) {
            Evaluated::Named => include.then_some(value),
            Evaluated::Unnamed => (!include).then_some(value),
            Evaluated::Under(next) => under(value, expressions, &next, include),
        };
        if let Some(value) = kept {
            out.insert(name, value);
        }
    }
    out
}

/// An array's elements kept, each with the filters at `positions` (arrays are transparent).
fn array(
    items: Vec<Value>,
    expressions: &Expressions,
    positions: &[Position],
    include: bool,
) -> Vec<Value> {
    items
        .into_iter()
        .filter_map(|item| under(item, expressions, positions, include))
        .collect()
}

/// A value that expressions go on under: what is left of it, if anything.
fn under(
    value: Value,
    expressions: &Expressions,
    positions: &[Position],
    include: bool,
) -> Option<Value> {
    match value {
        Value::Object(map) => {
            let map = object(map, expressions, positions, include);
            (!map.is_empty()).then_some(Value::Object(map))
        }
        Value::Array(items) => {
            let items = array(items, expressions, positions, include);
            (!items.is_empty()).then_some(Value::Array(items))
        }
        // A scalar where a longer path was expected: no include reaches it; no exclude does
        // either.
        scalar => (!include).then_some(scalar),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn filtered(filter: &str, answer: Value) -> Value {
        FilterPath::parse(filter).expect("a filter").apply(answer)
    }

    fn search() -> Value {
        json!({
            "took": 3,
            "timed_out": false,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {
                "total": {"value": 2, "relation": "eq"},
                "max_score": 1.0,
                "hits": [
                    {"_index": "logs", "_id": "1", "_score": 1.0, "_source": {"title": "a", "n": 1}},
                    {"_index": "logs", "_id": "2", "_score": 0.5, "_source": {"n": 2}}
                ]
            }
        })
    }

    #[test]
    fn test_empty_parameter_filters_nothing() {
        assert_eq!(FilterPath::parse(""), None);
        assert_eq!(FilterPath::parse(" , ,"), None);
    }

    #[test]
    fn test_include_keeps_named_paths_and_drops_the_rest() {
        assert_eq!(
            filtered("took,hits.hits._id", search()),
            json!({"took": 3, "hits": {"hits": [{"_id": "1"}, {"_id": "2"}]}})
        );
        assert_eq!(
            filtered("hits.total", search()),
            json!({"hits": {"total": {"value": 2, "relation": "eq"}}})
        );
        // An element with nothing named under it is dropped from the array.
        assert_eq!(
            filtered("hits.hits._source.title", search()),
            json!({"hits": {"hits": [{"_source": {"title": "a"}}]}})
        );
    }

    #[test]
    fn test_include_that_matches_nothing_gives_an_empty_object() {
        assert_eq!(filtered("nothing", search()), json!({}));
        // A path that needs more levels than a scalar has.
        assert_eq!(filtered("took.value", search()), json!({}));
        // An empty array on the way is dropped, as OpenSearch drops it.
        assert_eq!(
            filtered("hits.hits._id", json!({"hits": {"hits": []}})),
            json!({})
        );
    }

    #[test]
    fn test_wildcards_match_within_a_name_and_across_levels() {
        let nodes = json!({"nodes": {
            "a1": {"host": "h1", "hostname": "n1", "ip": "1.1.1.1"},
            "b2": {"host": "h2", "ip": "2.2.2.2"}
        }});
        assert_eq!(
            filtered("nodes.*.host*", nodes.clone()),
            json!({"nodes": {"a1": {"host": "h1", "hostname": "n1"}, "b2": {"host": "h2"}}})
        );
        assert_eq!(
            filtered("**.ip", nodes),
            json!({"nodes": {"a1": {"ip": "1.1.1.1"}, "b2": {"ip": "2.2.2.2"}}})
        );
        let segments = json!({"indices": {"logs": {"shards": {"0": [
            {"segments": {"_0": {"version": "9.1", "docs": 3}, "_1": {"version": "9.1"}}}
        ]}}}});
        assert_eq!(
            filtered("indices.**.version", segments),
            json!({"indices": {"logs": {"shards": {"0": [
                {"segments": {"_0": {"version": "9.1"}, "_1": {"version": "9.1"}}}
            ]}}}})
        );
        // `**` stands for at least one level: a top-level `version` is not under it.
        assert_eq!(filtered("**.version", json!({"version": 1})), json!({}));
    }

    #[test]
    fn test_escaped_dot_is_part_of_a_name() {
        let settings = json!({"persistent": {"wlm.workload_group.mode": "enabled", "x": 1}});
        assert_eq!(
            filtered(r"persistent.wlm\.workload_group\.mode", settings),
            json!({"persistent": {"wlm.workload_group.mode": "enabled"}})
        );
    }

    #[test]
    fn test_exclude_drops_named_paths_and_keeps_the_rest() {
        assert_eq!(
            filtered("-hits.hits._source,-_shards", search()),
            json!({
                "took": 3,
                "timed_out": false,
                "hits": {
                    "total": {"value": 2, "relation": "eq"},
                    "max_score": 1.0,
                    "hits": [
                        {"_index": "logs", "_id": "1", "_score": 1.0},
                        {"_index": "logs", "_id": "2", "_score": 0.5}
                    ]
                }
            })
        );
        // A scalar where a longer path was expected stays.
        assert_eq!(
            filtered("-took.value", json!({"took": 3})),
            json!({"took": 3})
        );
        // What an exclude walks through and empties is dropped, as OpenSearch drops it.
        assert_eq!(
            filtered("-a.b", json!({"a": {"b": 1}, "c": []})),
            json!({"c": []})
        );
    }

    #[test]
    fn test_includes_then_excludes() {
        assert_eq!(
            filtered("hits.hits,-hits.hits._source", search()),
            json!({"hits": {"hits": [
                {"_index": "logs", "_id": "1", "_score": 1.0},
                {"_index": "logs", "_id": "2", "_score": 0.5}
            ]}})
        );
    }

    #[test]
    fn test_root_array_and_root_scalar() {
        let rows = json!([{"index": "a", "health": "green"}, {"index": "b", "health": "yellow"}]);
        assert_eq!(
            filtered("index", rows.clone()),
            json!([{"index": "a"}, {"index": "b"}])
        );
        assert_eq!(filtered("nothing", rows), json!([]));
        assert_eq!(filtered("a", json!(true)), json!(true));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_filter() -> impl Strategy<Value = String> {
        let segment = prop_oneof!["[a-d]", Just("*".to_string()), Just("**".to_string())];
        let expression = (
            any::<bool>(),
            prop::collection::vec(segment, 1..4).prop_map(|s| s.join(".")),
        )
            .prop_map(|(minus, e)| if minus { format!("-{e}") } else { e });
        prop::collection::vec(expression, 1..3).prop_map(|e| e.join(","))
    }

    /// Whether every leaf of `part` is at the same place in `whole` (arrays compared as
    /// subsequences, in order).
    fn is_part_of(part: &Value, whole: &Value) -> bool {
        match (part, whole) {
            (Value::Object(p), Value::Object(w)) => p
                .iter()
                .all(|(k, v)| w.get(k).is_some_and(|wv| is_part_of(v, wv))),
            (Value::Array(p), Value::Array(w)) => {
                let mut rest = w.iter();
                p.iter().all(|pv| rest.any(|wv| is_part_of(pv, wv)))
            }
            (p, w) => p == w,
        }
    }

    proptest! {
        /// A filtered answer holds nothing the answer did not, each where it was.
        #[test]
        fn test_filtered_answer_is_part_of_the_answer(answer in arb_json(), filter in arb_filter()) {
            let out = FilterPath::parse(&filter).unwrap().apply(answer.clone());
            prop_assert!(is_part_of(&out, &answer), "{filter}: {out} from {answer}");
        }

        /// Filtering again with the same filter changes nothing.
        #[test]
        fn test_filtering_is_idempotent(answer in arb_json(), filter in arb_filter()) {
            let f = FilterPath::parse(&filter).unwrap();
            let once = f.apply(answer);
            prop_assert_eq!(f.apply(once.clone()), once);
        }

        /// Including every top-level name of an object keeps it whole.
        #[test]
        fn test_including_every_name_keeps_the_object(answer in arb_json()) {
            if let Value::Object(map) = &answer
                && !map.is_empty()
            {
                let names: Vec<&str> = map.keys().map(String::as_str).collect();
                let f = FilterPath::parse(&names.join(",")).unwrap();
                prop_assert_eq!(f.apply(answer.clone()), answer);
            }
        }
    }
}
