//! `simple_query_string`: Lucene's `SimpleQueryParser` syntax, which never fails on its input.
//!
//! Operators (each may be turned off with `flags`): `+` and, `|` or, `-` not (before a token),
//! `"phrase"` with `~slop`, `term*` prefix, `term~n` fuzzy, `( )` precedence, `\` escapes;
//! whitespace joins tokens with `default_operator`. As in Lucene, operators have no precedence:
//! a run of tokens joined by one operator forms a group, and a change of operator wraps what
//! came before (`a | b + c` is `+(a b) +c`); a negated token is "everything but it" within its
//! group (`-c` alone matches every document without `c`). Malformed syntax (an unclosed quote or
//! parenthesis, a dangling operator) is read as text, never as an error. Parsed tokens become the
//! same tree as `query_string`'s and are built the same way (analysed per field, `fields` with
//! boosts and wildcards, `lenient`).

use serde_json::Value;
use tantivy::query::{EmptyQuery, Occur, Query};

use super::full_text::{self, Fuzziness, Operator};
use super::query_string::{self, Leaf, Node, Params};
use super::{
    MinimumShouldMatch, QueryContext, bool_param, boost_param, number_param, text_param, with_boost,
};
use crate::error::{EngineError, Result};

/// The keys `simple_query_string` accepts; those without an effect in sluice are read and
/// ignored.
const PARAMS: &[&str] = &[
    "query",
    "fields",
    "default_operator",
    "analyzer",
    "flags",
    "fuzzy_max_expansions",
    "fuzzy_prefix_length",
    "fuzzy_transpositions",
    "lenient",
    "minimum_should_match",
    "quote_field_suffix",
    "analyze_wildcard",
    "auto_generate_synonyms_phrase_query",
    "boost",
    "_name",
];

/// Which operators are on (`flags`), as Lucene's `SimpleQueryParser` flag bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flags(u32);

impl Flags {
    const AND: u32 = 1;
    const NOT: u32 = 1 << 1;
    const OR: u32 = 1 << 2;
    const PREFIX: u32 = 1 << 3;
    const PHRASE: u32 = 1 << 4;
    const PRECEDENCE: u32 = 1 << 5;
    const ESCAPE: u32 = 1 << 6;
    const WHITESPACE: u32 = 1 << 7;
    const FUZZY: u32 = 1 << 8;
    const NEAR: u32 = 1 << 9;
    const SLOP: u32 = Self::NEAR;
    const ALL: u32 = (1 << 10) - 1;

    fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }

    /// Reads OpenSearch's `flags`: names joined by `|` (case-insensitive), or a number.
    fn parse(v: &Value) -> Result<Flags> {
        if let Some(n) = v.as_u64() {
            return Ok(Flags(u32::try_from(n).unwrap_or(u32::MAX) & Self::ALL));
        }
        let text = text_param("simple_query_string", "flags", v)?;
        if let Ok(n) = text.trim().parse::<u32>() {
            return Ok(Flags(n & Self::ALL));
        }
        let mut bits = 0;
        for name in text.split('|').map(str::trim).filter(|s| !s.is_empty()) {
            bits |= match name.to_ascii_uppercase().as_str() {
                "ALL" => Self::ALL,
                "NONE" => 0,
                "AND" => Self::AND,
                "NOT" => Self::NOT,
                "OR" => Self::OR,
                "PREFIX" => Self::PREFIX,
                "PHRASE" => Self::PHRASE,
                "PRECEDENCE" => Self::PRECEDENCE,
                "ESCAPE" => Self::ESCAPE,
                "WHITESPACE" => Self::WHITESPACE,
                "FUZZY" => Self::FUZZY,
                "NEAR" | "SLOP" => Self::SLOP,
                other => {
                    return Err(EngineError::illegal_argument(format!(
                        "Unknown simple_query_string flag [{other}]"
                    )));
                }
            };
        }
        Ok(Flags(bits))
    }
}

/// `simple_query_string`.
pub(super) fn simple_query_string(body: &Value, ctx: &QueryContext) -> Result<Box<dyn Query>> {
    let name = "simple_query_string";
    let obj = super::object_body(name, body, PARAMS)?;
    let text = match obj.get("query") {
        Some(v) => text_param(name, "query", v)?,
        None => {
            return Err(EngineError::parsing(
                "[simple_query_string] query text missing",
            ));
        }
    };
    let default_fields = match obj.get("fields") {
        Some(fields) => full_text::field_patterns(name, Some(fields))?,
        None => vec![("*".to_string(), 1.0)],
    };
    let default_operator = match obj.get("default_operator") {
        Some(v) => Operator::parse(name, v)?,
        None => Operator::Or,
    };
    let flags = match obj.get("flags") {
        Some(v) => Flags::parse(v)?,
        None => Flags(Flags::ALL),
    };
    if let Some(v) = obj.get("fuzzy_prefix_length") {
        number_param(name, "fuzzy_prefix_length", v)?;
    }
    let params = Params {
        default_fields,
        default_operator,
        lenient: obj
            .get("lenient")
            .map(|v| bool_param(name, "lenient", v))
            .transpose()?
            .unwrap_or(false),
        phrase_slop: 0,
        tie_breaker: 0.0,
        fuzziness: Fuzziness::Fixed(2),
    };
    let msm = obj
        .get("minimum_should_match")
        .map(|v| MinimumShouldMatch::parse(name, v))
        .transpose()?;
    let default_occur = match default_operator {
        Operator::And => Occur::Must,
        Operator::Or => Occur::Should,
    };
    let chars: Vec<char> = text.chars().collect();
    let query = match parse(&chars, flags, default_occur) {
        None => Box::new(EmptyQuery) as Box<dyn Query>,
        Some(Node::Bool(clauses)) => query_string::build_bool(clauses, &params, ctx, msm)?,
        Some(other) => query_string::build(other, &params, ctx)?,
    };
    Ok(with_boost(query, boost_param(name, obj)?))
}

/// What Lucene's parser keeps while it reads one level (the whole text, or a parenthesis).
struct Level {
    /// The tree so far.
    top: Option<Node>,
    /// The operator the previous token was joined with.
    previous: Option<Occur>,
    /// The operator written before the next token, if any.
    current: Option<Occur>,
    /// How many `-` precede the next token.
    not: u32,
}

/// Parses `chars`; `None` when nothing in it makes a token.
fn parse(chars: &[char], flags: Flags, default: Occur) -> Option<Node> {
    let mut pos = 0;
    level(chars, &mut pos, flags, default, false)
}

/// Reads tokens up to the end (or to the `)` closing this level when `nested`).
fn level(
    chars: &[char],
    pos: &mut usize,
    flags: Flags,
    default: Occur,
    nested: bool,
) -> Option<Node> {
    let mut st = Level {
        top: None,
        previous: None,
        current: None,
        not: 0,
    };
    while *pos < chars.len() {
        let c = chars[*pos];
        if nested && c == ')' && flags.has(Flags::PRECEDENCE) {
            *pos += 1;
            return st.top;
        }
        if c == '(' && flags.has(Flags::PRECEDENCE) && has_closing(chars, *pos + 1) {
            *pos += 1;
            let branch = level(chars, pos, flags, default, true);
            add(&mut st, branch, default);
        } else if c == '"' && flags.has(Flags::PHRASE) {
            let branch = phrase(chars, pos, flags);
            add(&mut st, branch, default);
        } else if c == '+' && flags.has(Flags::AND) {
            *pos += 1;
            if st.top.is_some() {
                st.current = Some(Occur::Must);
            }
        } else if c == '|' && flags.has(Flags::OR) {
            *pos += 1;
            if st.top.is_some() {
                st.current = Some(Occur::Should);
            }
        } else if c == '-' && flags.has(Flags::NOT) {
            *pos += 1;
            st.not += 1;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') && flags.has(Flags::WHITESPACE)
        {
            *pos += 1;
        } else {
            let branch = term(chars, pos, flags);
            add(&mut st, branch, default);
        }
    }
    st.top
}

/// Whether an unescaped `)` follows `from` (else `(` is read as text, as Lucene does).
fn has_closing(chars: &[char], from: usize) -> bool {
    let mut depth = 0usize;
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '(' => depth += 1,
            ')' if depth == 0 => return true,
            ')' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    false
}

/// Lucene's `buildQueryTree`: joins `branch` to the level with the operator written before it
/// (else the default), wrapping what came before when the operator changes; `-` makes it
/// "everything but it".
fn add(st: &mut Level, branch: Option<Node>, default: Occur) {
    let Some(mut branch) = branch else {
        st.not = 0;
        return;
    };
    if st.not % 2 == 1 {
        branch = Node::Bool(vec![(Occur::MustNot, branch)]);
    }
    st.not = 0;
    let op = st.current.take().unwrap_or(default);
    st.top = Some(match st.top.take() {
        None => branch,
        Some(Node::Bool(mut clauses)) if st.previous == Some(op) => {
            clauses.push((op, branch));
            Node::Bool(clauses)
        }
        Some(top) => Node::Bool(vec![(op, top), (op, branch)]),
    });
    st.previous = Some(op);
}

/// Reads a `"phrase"` and its `~slop`; an unclosed quote is text.
fn phrase(chars: &[char], pos: &mut usize, flags: Flags) -> Option<Node> {
    let start = *pos + 1;
    let mut i = start;
    let mut text = String::new();
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' && flags.has(Flags::ESCAPE) && i + 1 < chars.len() {
            i += 1;
        }
        text.push(chars[i]);
        i += 1;
    }
    if i >= chars.len() {
        // No closing quote: the quote is part of a term.
        return term(chars, pos, Flags(flags.0 & !Flags::PHRASE));
    }
    *pos = i + 1;
    let slop = if flags.has(Flags::SLOP) {
        tilde_number(chars, pos)
    } else {
        None
    };
    if text.trim().is_empty() {
        return None;
    }
    Some(Node::Leaf(
        None,
        Leaf::Phrase {
            text,
            slop: slop.map(|s| s.unwrap_or(0)),
        },
    ))
}

/// Reads `~` and the digits after it at `pos`: `None` without `~`, `Some(None)` for a bare
/// `~`.
fn tilde_number(chars: &[char], pos: &mut usize) -> Option<Option<u32>> {
    if chars.get(*pos) != Some(&'~') {
        return None;
    }
    *pos += 1;
    let start = *pos;
    while chars.get(*pos).is_some_and(char::is_ascii_digit) {
        *pos += 1;
    }
    let digits: String = chars[start..*pos].iter().collect();
    Some(digits.parse().ok())
}

/// Whether `c` ends a term (Lucene's `tokenFinished`), given the operators that are on.
fn ends_term(c: char, flags: Flags) -> bool {
    (c == '"' && flags.has(Flags::PHRASE))
        || (c == '|' && flags.has(Flags::OR))
        || (c == '+' && flags.has(Flags::AND))
        || ((c == '(' || c == ')') && flags.has(Flags::PRECEDENCE))
        || ((c == ' ' || c == '\t' || c == '\n' || c == '\r') && flags.has(Flags::WHITESPACE))
}

/// Reads a term, its `*` (prefix) or its `~n` (fuzzy).
fn term(chars: &[char], pos: &mut usize, flags: Flags) -> Option<Node> {
    let mut text = String::new();
    let mut pattern = String::new();
    let mut fuzzy = None;
    // Whether the last character read is an unescaped `*` (a prefix operator if it ends the
    // term).
    let mut trailing_star = false;
    while *pos < chars.len() {
        let c = chars[*pos];
        if c == '\\' && flags.has(Flags::ESCAPE) {
            if let Some(&next) = chars.get(*pos + 1) {
                text.push(next);
                pattern.push('\\');
                pattern.push(next);
            }
            trailing_star = false;
            *pos += 2;
            continue;
        }
        if c == '~' && flags.has(Flags::FUZZY) && !text.is_empty() {
            fuzzy = tilde_number(chars, pos);
            // What follows a fuzziness up to the token's end is dropped, as Lucene does.
            while *pos < chars.len() && !ends_term(chars[*pos], flags) {
                *pos += 1;
            }
            break;
        }
        if ends_term(c, flags) {
            break;
        }
        text.push(c);
        trailing_star = c == '*';
        if c == '*' || c == '?' {
            // Only a trailing `*` is an operator; other wildcard characters are text.
            pattern.push('\\');
        }
        pattern.push(c);
        *pos += 1;
    }
    if text.is_empty() {
        // A character that made no token (a lone operator turned off): skip it.
        if *pos < chars.len() && ends_term(chars[*pos], flags) {
            *pos += 1;
        }
        return None;
    }
    let prefix = flags.has(Flags::PREFIX) && fuzzy.is_none() && trailing_star;
    let leaf = if prefix {
        // `abc*`: the pattern keeps the escapes of the other wildcard characters.
        let mut p = pattern;
        p.truncate(p.len() - 2);
        p.push('*');
        text.pop();
        Leaf::Term {
            text: format!("{text}*"),
            pattern: Some(p),
            fuzzy: None,
        }
    } else {
        Leaf::Term {
            text,
            pattern: None,
            fuzzy: fuzzy.map(|d| d.map(|d| u8::try_from(d.min(2)).unwrap_or(2))),
        }
    };
    Some(Node::Leaf(None, leaf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> Node {
        Node::Leaf(
            None,
            Leaf::Term {
                text: text.to_string(),
                pattern: None,
                fuzzy: None,
            },
        )
    }

    fn p(text: &str) -> Option<Node> {
        let chars: Vec<char> = text.chars().collect();
        parse(&chars, Flags(Flags::ALL), Occur::Should)
    }

    #[test]
    fn test_whitespace_joins_with_the_default_operator() {
        assert_eq!(
            p("a b"),
            Some(Node::Bool(vec![
                (Occur::Should, t("a")),
                (Occur::Should, t("b"))
            ]))
        );
        assert_eq!(p("one"), Some(t("one")));
        assert_eq!(p("   "), None);
    }

    #[test]
    fn test_a_change_of_operator_wraps_what_came_before() {
        let ab = Node::Bool(vec![(Occur::Should, t("a")), (Occur::Should, t("b"))]);
        assert_eq!(
            p("a | b + c"),
            Some(Node::Bool(vec![(Occur::Must, ab), (Occur::Must, t("c"))]))
        );
    }

    #[test]
    fn test_not_negates_the_next_token_only() {
        assert_eq!(
            p("a -b"),
            Some(Node::Bool(vec![
                (Occur::Should, t("a")),
                (Occur::Should, Node::Bool(vec![(Occur::MustNot, t("b"))])),
            ]))
        );
        // Inside a word, `-` is text.
        assert_eq!(p("wi-fi"), Some(t("wi-fi")));
    }

    #[test]
    fn test_phrases_prefixes_fuzzy_and_groups() {
        assert_eq!(
            p("\"quick fox\"~2"),
            Some(Node::Leaf(
                None,
                Leaf::Phrase {
                    text: "quick fox".into(),
                    slop: Some(2)
                }
            ))
        );
        assert_eq!(
            p("qui*"),
            Some(Node::Leaf(
                None,
                Leaf::Term {
                    text: "qui*".into(),
                    pattern: Some("qui*".into()),
                    fuzzy: None
                }
            ))
        );
        assert_eq!(
            p("quikc~1"),
            Some(Node::Leaf(
                None,
                Leaf::Term {
                    text: "quikc".into(),
                    pattern: None,
                    fuzzy: Some(Some(1))
                }
            ))
        );
        assert_eq!(
            p("(a | b) + c"),
            Some(Node::Bool(vec![
                (
                    Occur::Must,
                    Node::Bool(vec![(Occur::Should, t("a")), (Occur::Should, t("b"))])
                ),
                (Occur::Must, t("c")),
            ]))
        );
    }

    #[test]
    fn test_malformed_syntax_is_text_never_an_error() {
        for text in [
            "\"unclosed",
            "(a b",
            "a +",
            "| a",
            "--",
            "\\",
            "a~x",
            "((",
            "\"\"",
            "*",
        ] {
            let _ = p(text);
        }
        // An unclosed parenthesis is skipped.
        assert_eq!(
            p("(a b"),
            Some(Node::Bool(vec![
                (Occur::Should, t("a")),
                (Occur::Should, t("b"))
            ]))
        );
    }

    #[test]
    fn test_flags_turn_operators_off() {
        let chars: Vec<char> = "a+b".chars().collect();
        assert_eq!(
            parse(&chars, Flags(Flags::ALL & !Flags::AND), Occur::Should),
            Some(t("a+b"))
        );
        assert_eq!(
            Flags::parse(&Value::from("OR|and")).unwrap(),
            Flags(Flags::OR | Flags::AND)
        );
        assert!(Flags::parse(&Value::from("BOGUS")).is_err());
    }
}
