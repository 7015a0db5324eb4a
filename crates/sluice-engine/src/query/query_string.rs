//! `query_string`: a small parser for the Lucene query syntax OpenSearch accepts.
//!
//! Supported: terms (analysed per field), `"quoted phrases"~slop`, `field:value` (the field may
//! be a pattern such as `user.*`), `field:(a b)`, `AND`/`OR`/`NOT`/`&&`/`||`/`!`, `+`/`-`,
//! parentheses, `^boost`, `term~` fuzziness, wildcards `*`/`?`, `/regex/`, ranges
//! `field:[a TO b]` / `{a TO b}` (with `*` for an open end), comparisons `field:>=n`,
//! `field:*` and `_exists_:field`. Clauses combine as Lucene's classic query parser combines
//! them (`a AND b OR c` is `+a +b c`), and a group of only negative clauses matches everything
//! else, as OpenSearch makes it.

use serde_json::Value;
use tantivy::query::{AllQuery, DisjunctionMaxQuery, EmptyQuery, Occur, Query};

use super::compound::BoolClauses;
use super::full_text::{self, Fuzziness, MatchOptions, Operator};
use super::term_level::{self, PatternKind};
use super::{
    MinimumShouldMatch, QueryContext, bool_param, boost_param, number_param, text_param, with_boost,
};
use crate::error::{EngineError, ErrorCode, Result};
use crate::mapping::{FieldType, ResolvedField};
use crate::schema::ID_FIELD;

/// The keys `query_string` accepts; those without an effect in sluice are read and ignored.
const PARAMS: &[&str] = &[
    "query",
    "default_field",
    "fields",
    "default_operator",
    "analyzer",
    "quote_analyzer",
    "allow_leading_wildcard",
    "enable_position_increments",
    "fuzzy_max_expansions",
    "fuzziness",
    "fuzzy_prefix_length",
    "fuzzy_transpositions",
    "fuzzy_rewrite",
    "phrase_slop",
    "boost",
    "analyze_wildcard",
    "auto_generate_synonyms_phrase_query",
    "lenient",
    "max_determinized_states",
    "minimum_should_match",
    "quote_field_suffix",
    "rewrite",
    "time_zone",
    "type",
    "tie_breaker",
    "escape",
    "_name",
];

/// The options that shape how parsed clauses become queries (shared with
/// `simple_query_string`, which builds the same tree).
pub(super) struct Params {
    /// Fields searched by clauses without a field, with their boosts.
    pub(super) default_fields: Vec<(String, f32)>,
    /// How analysed terms combine, and clauses without an operator.
    pub(super) default_operator: Operator,
    /// Whether values that do not fit a field match nothing instead of failing.
    pub(super) lenient: bool,
    /// The slop of phrases without `~n`.
    pub(super) phrase_slop: u32,
    /// Score share of the non-best fields when a clause searches several.
    pub(super) tie_breaker: f32,
    /// The fuzziness of `term~` without a number.
    pub(super) fuzziness: Fuzziness,
}

/// `query_string`.
pub(super) fn query_string(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let obj = super::object_body("query_string", body, PARAMS)?;
    let text = match obj.get("query") {
        Some(v) => text_param("query_string", "query", v)?,
        None => {
            return Err(EngineError::parsing(
                "[query_string] must be provided with a [query]",
            ));
        }
    };
    let default_fields = match (obj.get("fields"), obj.get("default_field")) {
        (Some(fields), _) => full_text::field_patterns("query_string", Some(fields))?,
        (None, Some(field)) => vec![(text_param("query_string", "default_field", field)?, 1.0)],
        (None, None) => vec![("*".to_string(), 1.0)],
    };
    let default_operator = match obj.get("default_operator") {
        Some(v) => Operator::parse("query_string", v)?,
        None => Operator::Or,
    };
    let params = Params {
        default_fields,
        default_operator,
        lenient: obj
            .get("lenient")
            .map(|v| bool_param("query_string", "lenient", v))
            .transpose()?
            .unwrap_or(false),
        phrase_slop: match obj.get("phrase_slop") {
            Some(v) => number_param("query_string", "phrase_slop", v)? as u32,
            None => 0,
        },
        tie_breaker: match obj.get("tie_breaker") {
            Some(v) => number_param("query_string", "tie_breaker", v)? as f32,
            None => 0.0,
        },
        fuzziness: match obj.get("fuzziness") {
            Some(v) => Fuzziness::parse("query_string", v)?,
            None => Fuzziness::AUTO,
        },
    };
    if let Some(tz) = obj.get("time_zone") {
        term_level::check_utc(
            "query_string",
            &text_param("query_string", "time_zone", tz)?,
        )?;
    }
    let msm = obj
        .get("minimum_should_match")
        .map(|v| MinimumShouldMatch::parse("query_string", v))
        .transpose()?;
    let node = parse(&text, params.default_operator == Operator::And)
        .map_err(|_| ctx.shard_error(format!("Failed to parse query [{text}]")))?;
    let query = match node {
        Node::Bool(clauses) => build_bool(clauses, &params, ctx, msm)?,
        other => build(other, &params, ctx)?,
    };
    Ok(with_boost(query, boost_param("query_string", obj)?))
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    /// Clauses with their occurrence.
    Bool(Vec<(Occur, Node)>),
    /// A boosted node.
    Boost(Box<Node>, f32),
    /// A leaf on a field (`None`: the default fields).
    Leaf(Option<String>, Leaf),
}

/// A parsed leaf value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Leaf {
    /// A term: `text` unescaped; `pattern` (escapes kept) when it holds wildcards;
    /// `fuzzy` when followed by `~` (with its distance if given).
    Term {
        text: String,
        pattern: Option<String>,
        fuzzy: Option<Option<u8>>,
    },
    /// A quoted phrase and its `~slop`.
    Phrase { text: String, slop: Option<u32> },
    /// A range; `None` is an open end.
    Range {
        lower: Option<String>,
        upper: Option<String>,
        include_lower: bool,
        include_upper: bool,
    },
    /// A `/regular expression/`.
    Regex(String),
}

/// A syntax error, with what was expected; the caller reports OpenSearch's generic message.
#[derive(Debug, PartialEq)]
struct SyntaxError(String);

/// Whether a clause was prefixed with `+` (required) or `-`/`NOT`/`!` (prohibited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Modifier {
    None,
    Required,
    Prohibited,
}

/// The operator between a clause and the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conjunction {
    None,
    And,
    Or,
}

fn parse(text: &str, default_and: bool) -> std::result::Result<Node, SyntaxError> {
    let mut parser = Parser {
        chars: text.chars().collect(),
        pos: 0,
        default_and,
    };
    let node = parser.query(None)?;
    parser.skip_ws();
    if parser.pos < parser.chars.len() {
        return Err(SyntaxError(format!(
            "unexpected [{}] at {}",
            parser.chars[parser.pos], parser.pos
        )));
    }
    Ok(node)
}

/// A recursive-descent parser over the query's characters.
struct Parser {
    chars: Vec<char>,
    pos: usize,
    default_and: bool,
}

/// Characters that end a bare term unless escaped.
fn is_term_end(c: char, in_value: bool) -> bool {
    c.is_whitespace()
        || matches!(c, '(' | ')' | '"' | '^' | '~' | '[' | ']' | '{' | '}')
        || (!in_value && c == ':')
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// Whether the input at the cursor is the keyword `word` standing alone.
    fn at_keyword(&self, word: &str) -> bool {
        let n = word.chars().count();
        let matches = self.chars[self.pos..]
            .iter()
            .take(n)
            .copied()
            .eq(word.chars());
        let after = self.chars.get(self.pos + n).copied();
        matches && after.is_none_or(|c| c.is_whitespace() || c == '(' || c == '"')
    }

    fn conjunction(&mut self) -> Conjunction {
        let rest = &self.chars[self.pos..];
        let conj = if self.at_keyword("AND") {
            Some((3, Conjunction::And))
        } else if self.at_keyword("OR") {
            Some((2, Conjunction::Or))
        } else if rest.starts_with(&['&', '&']) {
            Some((2, Conjunction::And))
        } else if rest.starts_with(&['|', '|']) {
            Some((2, Conjunction::Or))
        } else {
            None
        };
        match conj {
            Some((len, conj)) => {
                self.pos += len;
                self.skip_ws();
                conj
            }
            None => Conjunction::None,
        }
    }

    fn modifier(&mut self) -> Modifier {
        match self.peek() {
            Some('+') => {
                self.pos += 1;
                Modifier::Required
            }
            Some('-') | Some('!') => {
                self.pos += 1;
                Modifier::Prohibited
            }
            _ if self.at_keyword("NOT") => {
                self.pos += 3;
                self.skip_ws();
                Modifier::Prohibited
            }
            _ => Modifier::None,
        }
    }

    /// `Query := Modifier Clause (Conjunction Modifier Clause)*`, up to `)` or the end.
    fn query(&mut self, field: Option<&str>) -> std::result::Result<Node, SyntaxError> {
        let mut clauses: Vec<(Occur, Node)> = Vec::new();
        let mut first_plain: Option<Node> = None;
        loop {
            self.skip_ws();
            if self.peek().is_none_or(|c| c == ')') {
                break;
            }
            let conj = if clauses.is_empty() {
                Conjunction::None
            } else {
                self.conjunction()
            };
            self.skip_ws();
            let modifier = self.modifier();
            self.skip_ws();
            let clause = self.clause(field)?;
            if clauses.is_empty() && modifier == Modifier::None {
                first_plain = Some(clause.clone());
            } else {
                first_plain = None;
            }
            self.add_clause(&mut clauses, conj, modifier, clause);
        }
        match (clauses.len(), first_plain) {
            (0, _) => Err(SyntaxError("empty query".to_string())),
            (1, Some(node)) => Ok(node),
            _ => Ok(Node::Bool(clauses)),
        }
    }

    /// Lucene's `QueryParserBase.addClause`: an `AND` makes the previous clause required, an `OR`
    /// (with default operator AND) makes it optional, and the clause's own occurrence follows
    /// from its modifier, its conjunction and the default operator.
    fn add_clause(
        &self,
        clauses: &mut Vec<(Occur, Node)>,
        conj: Conjunction,
        modifier: Modifier,
        node: Node,
    ) {
        if let Some(last) = clauses.last_mut() {
            if conj == Conjunction::And && last.0 != Occur::MustNot {
                last.0 = Occur::Must;
            }
            if self.default_and && conj == Conjunction::Or && last.0 != Occur::MustNot {
                last.0 = Occur::Should;
            }
        }
        let prohibited = modifier == Modifier::Prohibited;
        let required = if self.default_and {
            !prohibited && conj != Conjunction::Or
        } else {
            modifier == Modifier::Required || (conj == Conjunction::And && !prohibited)
        };
        let occur = match (required, prohibited) {
            (_, true) => Occur::MustNot,
            (true, false) => Occur::Must,
            (false, false) => Occur::Should,
        };
        clauses.push((occur, node));
    }

    /// `Clause := '(' Query ')' ['^' boost] | [field ':'] Value`.
    fn clause(&mut self, field: Option<&str>) -> std::result::Result<Node, SyntaxError> {
        if self.peek() == Some('(') {
            return self.group(field);
        }
        // A bare word followed by ':' names a field.
        let start = self.pos;
        if !matches!(self.peek(), Some('"' | '[' | '{' | '/')) {
            let (name, _) = self.bare(false)?;
            if self.peek() == Some(':') && !name.is_empty() {
                self.pos += 1;
                self.skip_ws();
                if self.peek() == Some('(') {
                    return self.group(Some(&name));
                }
                let leaf = self.value(true)?;
                return self.boosted(Node::Leaf(Some(name), leaf));
            }
            self.pos = start;
        }
        let leaf = self.value(false)?;
        self.boosted(Node::Leaf(field.map(str::to_string), leaf))
    }

    fn group(&mut self, field: Option<&str>) -> std::result::Result<Node, SyntaxError> {
        self.pos += 1;
        let node = self.query(field)?;
        if self.peek() != Some(')') {
            return Err(SyntaxError("missing ')'".to_string()));
        }
        self.pos += 1;
        self.boosted(node)
    }

    /// Reads an optional `^boost` after a clause.
    fn boosted(&mut self, node: Node) -> std::result::Result<Node, SyntaxError> {
        if self.peek() != Some('^') {
            return Ok(node);
        }
        self.pos += 1;
        let number = self.number();
        let boost: f32 = number
            .parse()
            .map_err(|_| SyntaxError(format!("bad boost [{number}]")))?;
        Ok(Node::Boost(Box::new(node), boost))
    }

    fn number(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// Reads a bare term: `(unescaped, raw)`, where raw keeps the escapes.
    fn bare(&mut self, in_value: bool) -> std::result::Result<(String, String), SyntaxError> {
        let mut text = String::new();
        let mut raw = String::new();
        while let Some(c) = self.peek() {
            if c == '\\' {
                let next = self
                    .chars
                    .get(self.pos + 1)
                    .copied()
                    .ok_or_else(|| SyntaxError("dangling escape".to_string()))?;
                text.push(next);
                raw.push(c);
                raw.push(next);
                self.pos += 2;
                continue;
            }
            if is_term_end(c, in_value) {
                break;
            }
            text.push(c);
            raw.push(c);
            self.pos += 1;
        }
        Ok((text, raw))
    }

    /// `Value := phrase | range | comparison | regex | term`, with their suffixes.
    fn value(&mut self, in_value: bool) -> std::result::Result<Leaf, SyntaxError> {
        match self.peek() {
            Some('"') => {
                let text = self.quoted()?;
                let slop = if self.peek() == Some('~') {
                    self.pos += 1;
                    Some(self.number().parse().unwrap_or(0))
                } else {
                    None
                };
                Ok(Leaf::Phrase { text, slop })
            }
            Some(open @ ('[' | '{')) => {
                self.pos += 1;
                self.skip_ws();
                let lower = self.range_end()?;
                self.skip_ws();
                if !self.at_keyword("TO") {
                    return Err(SyntaxError("expected TO in range".to_string()));
                }
                self.pos += 2;
                self.skip_ws();
                let upper = self.range_end()?;
                self.skip_ws();
                let include_upper = match self.peek() {
                    Some(']') => true,
                    Some('}') => false,
                    _ => return Err(SyntaxError("unclosed range".to_string())),
                };
                self.pos += 1;
                Ok(Leaf::Range {
                    lower,
                    upper,
                    include_lower: open == '[',
                    include_upper,
                })
            }
            Some('/') => {
                self.pos += 1;
                let mut re = String::new();
                loop {
                    match self.peek() {
                        None => return Err(SyntaxError("unclosed regex".to_string())),
                        Some('/') => break,
                        Some('\\') if self.chars.get(self.pos + 1) == Some(&'/') => {
                            re.push('/');
                            self.pos += 2;
                        }
                        Some(c) => {
                            re.push(c);
                            self.pos += 1;
                        }
                    }
                }
                self.pos += 1;
                Ok(Leaf::Regex(re))
            }
            Some(c @ ('>' | '<')) if in_value => {
                self.pos += 1;
                let inclusive = self.peek() == Some('=');
                if inclusive {
                    self.pos += 1;
                }
                let (value, _) = self.bare(true)?;
                if value.is_empty() {
                    return Err(SyntaxError("missing value after comparison".to_string()));
                }
                Ok(if c == '>' {
                    Leaf::Range {
                        lower: Some(value),
                        upper: None,
                        include_lower: inclusive,
                        include_upper: true,
                    }
                } else {
                    Leaf::Range {
                        lower: None,
                        upper: Some(value),
                        include_lower: true,
                        include_upper: inclusive,
                    }
                })
            }
            _ => {
                let (text, raw) = self.bare(in_value)?;
                if text.is_empty() {
                    return Err(SyntaxError(format!("expected a term at {}", self.pos)));
                }
                let has_wildcard = {
                    let mut escaped = false;
                    raw.chars().any(|c| {
                        let wild = !escaped && (c == '*' || c == '?');
                        escaped = !escaped && c == '\\';
                        wild
                    })
                };
                let fuzzy = if self.peek() == Some('~') {
                    self.pos += 1;
                    let n = self.number();
                    Some(n.parse::<f32>().ok().map(|d| d.clamp(0.0, 2.0) as u8))
                } else {
                    None
                };
                Ok(Leaf::Term {
                    text,
                    pattern: has_wildcard.then_some(raw),
                    fuzzy,
                })
            }
        }
    }

    fn quoted(&mut self) -> std::result::Result<String, SyntaxError> {
        self.pos += 1;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(SyntaxError("unclosed quote".to_string())),
                Some('"') => break,
                Some('\\') => {
                    if let Some(next) = self.chars.get(self.pos + 1) {
                        text.push(*next);
                    }
                    self.pos += 2;
                }
                Some(c) => {
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
        self.pos += 1;
        Ok(text)
    }

    /// One end of a `[a TO b]` range: a quoted or bare value, `*` for open.
    fn range_end(&mut self) -> std::result::Result<Option<String>, SyntaxError> {
        let value = if self.peek() == Some('"') {
            self.quoted()?
        } else {
            let start = self.pos;
            while self
                .peek()
                .is_some_and(|c| !c.is_whitespace() && c != ']' && c != '}')
            {
                self.pos += 1;
            }
            self.chars[start..self.pos].iter().collect()
        };
        if value.is_empty() {
            return Err(SyntaxError("empty range end".to_string()));
        }
        Ok((value != "*").then_some(value))
    }
}

/// The query of a parsed tree.
pub(super) fn build(node: Node, params: &Params, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    match node {
        Node::Bool(clauses) => build_bool(clauses, params, ctx, None),
        Node::Boost(inner, boost) => Ok(with_boost(build(*inner, params, ctx)?, boost)),
        Node::Leaf(field, leaf) => leaf_query(field.as_deref(), &leaf, params, ctx),
    }
}

/// The query of a parsed list of clauses, with a `minimum_should_match`.
pub(super) fn build_bool(
    clauses: Vec<(Occur, Node)>,
    params: &Params,
    ctx: &QueryContext,
    msm: Option<MinimumShouldMatch>,
) -> Result<Box<dyn Query>> {
    let mut bool_clauses = BoolClauses::default();
    for (occur, node) in clauses {
        let query = build(node, params, ctx)?;
        match occur {
            Occur::Must => bool_clauses.must.push(query),
            Occur::Should => bool_clauses.should.push(query),
            Occur::MustNot => bool_clauses.must_not.push(query),
        }
    }
    Ok(bool_clauses.build(msm))
}

/// The query of one leaf: on its field, or on each default field combined by `dis_max`.
fn leaf_query(
    field: Option<&str>,
    leaf: &Leaf,
    params: &Params,
    ctx: &QueryContext,
) -> Result<Box<dyn Query>> {
    let is_star = matches!(leaf, Leaf::Term { text, pattern: Some(_), .. } if text == "*");
    match field {
        Some("_exists_") => {
            let name = match leaf {
                Leaf::Term { text, .. } | Leaf::Phrase { text, .. } => text.as_str(),
                _ => return Ok(Box::new(EmptyQuery)),
            };
            return Ok(term_level::exists_query(ctx, name));
        }
        Some(name) if is_star => return Ok(term_level::exists_query(ctx, name)),
        None if is_star => return Ok(Box::new(AllQuery)),
        Some(ID_FIELD) => {
            if let Leaf::Term {
                text,
                pattern: None,
                ..
            }
            | Leaf::Phrase { text, .. } = leaf
            {
                return term_level::term_query(
                    ctx,
                    ID_FIELD,
                    &Value::String(text.clone()),
                    false,
                    false,
                );
            }
        }
        _ => {}
    }
    let targets = match field {
        Some(name) => full_text::resolve_patterns(ctx, &[(name.to_string(), 1.0)]),
        None => full_text::resolve_patterns(ctx, &params.default_fields),
    };
    let mut per_field = Vec::with_capacity(targets.len());
    for (resolved, boost, lenient) in &targets {
        let lenient = params.lenient || *lenient;
        let query = match field_leaf_query(resolved, leaf, params, lenient, ctx) {
            Ok(query) => query,
            Err(e) if lenient && e.code == ErrorCode::QueryShard => Box::new(EmptyQuery),
            Err(e) => return Err(e),
        };
        per_field.push(with_boost(query, *boost));
    }
    Ok(match per_field.len() {
        0 => Box::new(EmptyQuery),
        1 => per_field.pop().expect("one field"),
        _ => Box::new(DisjunctionMaxQuery::with_tie_breaker(
            per_field,
            params.tie_breaker,
        )),
    })
}

/// The query of one leaf on one resolved field.
fn field_leaf_query(
    field: &ResolvedField,
    leaf: &Leaf,
    params: &Params,
    lenient: bool,
    ctx: &QueryContext,
) -> Result<Box<dyn Query>> {
    let opts = MatchOptions {
        operator: params.default_operator,
        lenient,
        ..MatchOptions::default()
    };
    match leaf {
        Leaf::Term {
            pattern: Some(pattern),
            ..
        } => {
            if lenient && !matches!(field.ty, FieldType::Text | FieldType::Keyword) {
                return Ok(Box::new(EmptyQuery));
            }
            term_level::pattern_query(ctx, PatternKind::Wildcard, &field.path, pattern, false)
        }
        Leaf::Term {
            text,
            fuzzy: Some(distance),
            ..
        } => {
            let fuzziness = distance.map_or(params.fuzziness, Fuzziness::Fixed);
            let opts = MatchOptions {
                fuzziness: Some(fuzziness),
                ..opts
            };
            full_text::match_resolved(ctx, field, &Value::String(text.clone()), &opts)
        }
        Leaf::Term { text, .. } => {
            full_text::match_resolved(ctx, field, &Value::String(text.clone()), &opts)
        }
        Leaf::Phrase { text, slop } => full_text::phrase_resolved(
            ctx,
            field,
            &Value::String(text.clone()),
            slop.unwrap_or(params.phrase_slop),
            &opts,
        ),
        Leaf::Range {
            lower,
            upper,
            include_lower,
            include_upper,
        } => {
            let lower = lower.as_ref().map(|v| Value::String(v.clone()));
            let upper = upper.as_ref().map(|v| Value::String(v.clone()));
            match (&lower, &upper) {
                (None, None) => Ok(term_level::exists_query(ctx, &field.path)),
                _ => term_level::field_range(
                    ctx,
                    field,
                    lower.as_ref().map(|v| (v, *include_lower)),
                    upper.as_ref().map(|v| (v, *include_upper)),
                ),
            }
        }
        Leaf::Regex(re) => {
            if lenient && !matches!(field.ty, FieldType::Text | FieldType::Keyword) {
                return Ok(Box::new(EmptyQuery));
            }
            term_level::pattern_query(ctx, PatternKind::Regexp, &field.path, re, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(text: &str) -> Leaf {
        Leaf::Term {
            text: text.to_string(),
            pattern: None,
            fuzzy: None,
        }
    }

    fn leaf(field: Option<&str>, text: &str) -> Node {
        Node::Leaf(field.map(str::to_string), term(text))
    }

    #[test]
    fn test_single_term_is_a_leaf() {
        assert_eq!(parse("foo", false).unwrap(), leaf(None, "foo"));
        assert_eq!(
            parse("title:foo", false).unwrap(),
            leaf(Some("title"), "foo")
        );
    }

    #[test]
    fn test_and_or_follow_lucene_precedence() {
        // a AND b OR c  ==  +a +b c
        let Node::Bool(clauses) = parse("a AND b OR c", false).unwrap() else {
            panic!("bool")
        };
        let occurs: Vec<Occur> = clauses.iter().map(|(o, _)| *o).collect();
        assert_eq!(occurs, vec![Occur::Must, Occur::Must, Occur::Should]);
        // with default AND: a b OR c == +a b c
        let Node::Bool(clauses) = parse("a b OR c", true).unwrap() else {
            panic!("bool")
        };
        let occurs: Vec<Occur> = clauses.iter().map(|(o, _)| *o).collect();
        assert_eq!(occurs, vec![Occur::Must, Occur::Should, Occur::Should]);
    }

    #[test]
    fn test_modifiers_and_groups() {
        let Node::Bool(clauses) = parse("+a -b NOT c (d OR e)^2", false).unwrap() else {
            panic!("bool")
        };
        assert_eq!(clauses[0].0, Occur::Must);
        assert_eq!(clauses[1].0, Occur::MustNot);
        assert_eq!(clauses[2].0, Occur::MustNot);
        assert!(matches!(clauses[3].1, Node::Boost(_, b) if b == 2.0));
    }

    #[test]
    fn test_ranges_comparisons_phrases_and_wildcards() {
        assert_eq!(
            parse("n:[1 TO *}", false).unwrap(),
            Node::Leaf(
                Some("n".into()),
                Leaf::Range {
                    lower: Some("1".into()),
                    upper: None,
                    include_lower: true,
                    include_upper: false
                }
            )
        );
        assert_eq!(
            parse("n:>=5", false).unwrap(),
            Node::Leaf(
                Some("n".into()),
                Leaf::Range {
                    lower: Some("5".into()),
                    upper: None,
                    include_lower: true,
                    include_upper: true
                }
            )
        );
        assert_eq!(
            parse("msg:\"quick fox\"~2", false).unwrap(),
            Node::Leaf(
                Some("msg".into()),
                Leaf::Phrase {
                    text: "quick fox".into(),
                    slop: Some(2)
                }
            )
        );
        assert_eq!(
            parse("qu?ck*", false).unwrap(),
            Node::Leaf(
                None,
                Leaf::Term {
                    text: "qu?ck*".into(),
                    pattern: Some("qu?ck*".into()),
                    fuzzy: None
                }
            )
        );
        assert_eq!(
            parse(r"a\*b", false).unwrap(),
            Node::Leaf(
                None,
                Leaf::Term {
                    text: "a*b".into(),
                    pattern: None,
                    fuzzy: None
                }
            )
        );
    }

    #[test]
    fn test_syntax_errors_are_reported() {
        assert!(parse("(a OR b", false).is_err());
        assert!(parse("n:[1 TO", false).is_err());
        assert!(parse("\"open", false).is_err());
        assert!(parse("a )", false).is_err());
    }
}
