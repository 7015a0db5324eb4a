//! Index patterns of `index_permissions` and the [`PatternSet`] that matches an index name
//! against many of them at once.
//!
//! A pattern is an index name with OpenSearch's wildcards: `*` (any run of characters) and `?`
//! (one character). Every pattern goes into a byte trie by its literal part — a name
//! (`orders`), a prefix (`tenant-a-*`), or the part before the first wildcard
//! (`tenant-a-*-archive`) — so matching a name against many patterns is one walk of the name,
//! trying only the patterns whose literal part the name starts with.
//!
//! A name with a `:` is another cluster's index (`cluster:index`, cross-cluster search): only a
//! pattern with a `:` matches it (`eu-*:logs-*`), so a local pattern never reaches into a remote
//! cluster because its wildcard happens to cover the text (`a-*` matches neither `a-x:b-1` nor
//! `a-*:*`). A role grants remote indices only by naming them so.

/// Characters OpenSearch forbids in index names (besides `*` and `?`, wildcards here).
const FORBIDDEN: &[char] = &['\\', '/', '"', '<', '>', '|', ' ', ',', '#', ':'];

/// Why an index pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// Empty or blank.
    Empty,
    /// A `/regex/` pattern (sluice matches wildcards only).
    Regex,
    /// A `${…}` attribute substitution (not supported).
    Variable,
    /// Upper-case letters: index names are lower case, so it could never match.
    UpperCase,
    /// A character no index name holds.
    Forbidden(char),
}

impl PatternError {
    /// What is wrong and how to fix it, for messages naming the pattern.
    pub fn reason(&self) -> String {
        match self {
            PatternError::Empty => "an index pattern must not be empty".to_string(),
            PatternError::Regex => {
                "regular expressions are not supported; use * and ? wildcards".to_string()
            }
            PatternError::Variable => {
                "${...} substitutions are not supported; list the indices or use wildcards"
                    .to_string()
            }
            PatternError::UpperCase => {
                "index names are lower case, so a pattern with upper-case letters never matches; write it in lower case"
                    .to_string()
            }
            PatternError::Forbidden(c) => {
                format!("[{c}] cannot appear in an index name; use * and ? wildcards only")
            }
        }
    }
}

/// Checks an index pattern of a role: a local one, or `cluster:index` for another cluster's
/// indices, each side checked as a local pattern.
pub fn validate(pattern: &str) -> Result<(), PatternError> {
    match pattern.split_once(':') {
        Some((cluster, index)) => validate_local(cluster).and_then(|()| validate_local(index)),
        None => validate_local(pattern),
    }
}

/// Whether `text` names another cluster's index (`cluster:index`).
pub fn is_remote(text: &str) -> bool {
    text.contains(':')
}

/// Checks a pattern of one cluster's indices.
fn validate_local(pattern: &str) -> Result<(), PatternError> {
    if pattern.trim().is_empty() {
        return Err(PatternError::Empty);
    }
    if pattern.len() > 1 && pattern.starts_with('/') && pattern.ends_with('/') {
        return Err(PatternError::Regex);
    }
    if pattern.contains("${") {
        return Err(PatternError::Variable);
    }
    if pattern.chars().any(char::is_uppercase) {
        return Err(PatternError::UpperCase);
    }
    if let Some(c) = pattern.chars().find(|c| FORBIDDEN.contains(c)) {
        return Err(PatternError::Forbidden(c));
    }
    Ok(())
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters and `?` one byte
/// (one character in the ASCII names indices have).
///
/// Greedy with backtracking to the last `*`: `O(pattern × text)` at worst, no allocation.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    match_bytes(pattern.as_bytes(), text.as_bytes())
}

/// Whether the index name `name` matches the role pattern `pattern`: [`wildcard_match`], but a
/// remote name (with a `:`) only a remote pattern (see the module docs).
pub fn index_match(pattern: &str, name: &str) -> bool {
    (!is_remote(name) || is_remote(pattern)) && wildcard_match(pattern, name)
}

fn match_bytes(p: &[u8], t: &[u8]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if pi < p.len() && (p[pi] == b'?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Whether every name `requested` can match is matched by `granted` (both patterns of `*` and
/// `?`): the check a gateway makes of a wildcard it cannot resolve against its own indices.
///
/// Sound, not complete: a `*` of `requested` is covered only by a `*` of `granted`, a `?` by a
/// `?` or `*`, a letter by the same letter, `?` or `*`; so `true` means the names of
/// `requested` are a subset of those of `granted` (`logs-2024-*` ⊆ `logs-*`), and a subset
/// it cannot show (`a?` ⊆ `[ab]?` style reasoning) is refused, never allowed. `O(|granted| ×
/// |requested|)`, allocates two rows. A remote `requested` (with a `:`) is covered only by a
/// remote `granted` (see the module docs).
pub fn pattern_covers(granted: &str, requested: &str) -> bool {
    if is_remote(requested) && !is_remote(granted) {
        return false;
    }
    let (g, r) = (granted.as_bytes(), requested.as_bytes());
    // next[j]: g[i+1..] covers r[j..]; row[j]: g[i..] covers r[j..].
    let mut next = vec![false; r.len() + 1];
    next[r.len()] = true;
    let mut row = vec![false; r.len() + 1];
    for i in (0..g.len()).rev() {
        for j in (0..=r.len()).rev() {
            row[j] = match g[i] {
                b'*' => next[j] || (j < r.len() && row[j + 1]),
                b'?' => j < r.len() && r[j] != b'*' && next[j + 1],
                c => j < r.len() && r[j] == c && next[j + 1],
            };
        }
        std::mem::swap(&mut row, &mut next);
    }
    next[0]
}

/// One trie node: its children by byte (sorted), whether a pattern ends here exactly
/// (`orders`) or as a prefix (`tenant-a-*`), and the patterns whose literal part ends here,
/// by what follows it (`tenant-a-*-archive` → `*-archive` under `tenant-a-`).
#[derive(Debug, Clone, Default)]
struct Node {
    children: Vec<(u8, u32)>,
    exact: bool,
    prefix: bool,
    rest: Vec<Box<[u8]>>,
}

/// Many index patterns, matched together in one walk of the name: a pattern costs a check
/// only when the name starts with its literal part.
///
/// # Invariants
/// - Every pattern added is matched by [`PatternSet::matches`] exactly as
///   [`index_match`] would match it alone (`test_pattern_set_agrees_with_wildcard_match`,
///   and `prop_pattern_set_matches_as_its_patterns_do` in `tests/authz_props.rs`).
/// - A remote name is matched only by a remote pattern, whatever local ones the set holds
///   (`test_a_local_pattern_never_matches_or_covers_a_remote_name`).
#[derive(Debug, Clone)]
pub struct PatternSet {
    /// `nodes[0]` is the root; local patterns only.
    nodes: Vec<Node>,
    /// Whether `*` is in the set (every local name).
    all: bool,
    /// The remote patterns (`cluster:index`), matched one by one: a role names few.
    remote: Vec<Box<str>>,
    /// The patterns as added, for [`PatternSet::covers`].
    patterns: Vec<Box<str>>,
}

impl Default for PatternSet {
    fn default() -> Self {
        PatternSet {
            nodes: vec![Node::default()],
            all: false,
            remote: Vec::new(),
            patterns: Vec::new(),
        }
    }
}

impl PatternSet {
    /// Adds a (validated) pattern.
    pub fn insert(&mut self, pattern: &str) {
        if is_remote(pattern) {
            if !self.remote.iter().any(|p| **p == *pattern) {
                self.remote.push(pattern.into());
                self.patterns.push(pattern.into());
            }
            return;
        }
        if self.all {
            return;
        }
        if !self.patterns.iter().any(|p| **p == *pattern) {
            self.patterns.push(pattern.into());
        }
        if pattern == "*" {
            self.all = true;
            self.nodes.truncate(1);
            self.nodes[0] = Node::default();
            return;
        }
        let bytes = pattern.as_bytes();
        let literal = bytes
            .iter()
            .position(|b| *b == b'*' || *b == b'?')
            .unwrap_or(bytes.len());
        let mut at = 0usize;
        for &b in &bytes[..literal] {
            at = match self.nodes[at].children.binary_search_by_key(&b, |c| c.0) {
                Ok(i) => self.nodes[at].children[i].1 as usize,
                Err(i) => {
                    let next = self.nodes.len();
                    self.nodes.push(Node::default());
                    self.nodes[at].children.insert(i, (b, next as u32));
                    next
                }
            };
        }
        let rest = &bytes[literal..];
        let node = &mut self.nodes[at];
        match rest {
            [] => node.exact = true,
            [b'*'] => node.prefix = true,
            _ => {
                if !node.rest.iter().any(|r| **r == *rest) {
                    node.rest.push(rest.into());
                }
            }
        }
    }

    /// Whether no pattern was added.
    pub fn is_empty(&self) -> bool {
        let root = &self.nodes[0];
        !self.all
            && self.remote.is_empty()
            && self.nodes.len() == 1
            && !root.exact
            && !root.prefix
            && root.rest.is_empty()
    }

    /// Whether every name the pattern `requested` can match is matched by one pattern of the
    /// set ([`pattern_covers`]; a union of patterns covering it together is not seen).
    pub fn covers(&self, requested: &str) -> bool {
        (self.all && !is_remote(requested))
            || self.patterns.iter().any(|g| pattern_covers(g, requested))
    }

    /// Whether `index` matches a pattern of the set. Allocates nothing.
    pub fn matches(&self, index: &str) -> bool {
        if is_remote(index) {
            return self.remote.iter().any(|p| index_match(p, index));
        }
        if self.all {
            return true;
        }
        let bytes = index.as_bytes();
        let mut at = 0usize;
        let mut i = 0usize;
        loop {
            let node = &self.nodes[at];
            if node.prefix || node.rest.iter().any(|r| match_bytes(r, &bytes[i..])) {
                return true;
            }
            let Some(&b) = bytes.get(i) else {
                return node.exact;
            };
            match node.children.binary_search_by_key(&b, |c| c.0) {
                Ok(k) => {
                    at = node.children[k].1 as usize;
                    i += 1;
                }
                Err(_) => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_validate_names_what_is_wrong() {
        assert_eq!(validate(""), Err(PatternError::Empty));
        assert_eq!(validate("/logs-.*/"), Err(PatternError::Regex));
        assert_eq!(validate("${user.name}-*"), Err(PatternError::Variable));
        assert_eq!(validate("Logs"), Err(PatternError::UpperCase));
        assert_eq!(validate("a,b"), Err(PatternError::Forbidden(',')));
        assert_eq!(validate("a b"), Err(PatternError::Forbidden(' ')));
        assert!(validate("tenant-a-*").is_ok() && validate("*").is_ok());
        assert!(validate("log?-*-x").is_ok());
        assert!(validate("eu-*:logs-*").is_ok() && validate("*:*").is_ok());
        assert_eq!(validate(":logs"), Err(PatternError::Empty));
        assert_eq!(validate("eu:"), Err(PatternError::Empty));
        assert_eq!(validate("a:b:c"), Err(PatternError::Forbidden(':')));
    }

    #[test]
    fn test_a_local_pattern_never_matches_or_covers_a_remote_name() {
        let mut set = PatternSet::default();
        for p in ["a-*", "*", "a-x"] {
            set.insert(p);
        }
        for name in ["a-x:b-1", "a-*:*", "x:a-1", ":a-1", "a-x:"] {
            assert!(!set.matches(name), "{name}");
            assert!(!set.covers(name), "{name}");
            assert!(!index_match("a-*", name) && !pattern_covers("a-*", name));
            assert!(
                wildcard_match("*", name),
                "the plain matcher knows no clusters"
            );
        }
        assert!(set.matches("a-1") && set.covers("a-*"));
        // A remote pattern grants what it names, and only remote names.
        set.insert("eu-*:logs-*");
        assert!(set.matches("eu-1:logs-1") && set.covers("eu-1:logs-*"));
        assert!(!set.matches("us:logs-1") && !set.covers("eu-*:*") && !set.covers("*:*"));
        assert!(!index_match("eu-*:logs-*", "logs-1"));
        let mut all = PatternSet::default();
        all.insert("*:*");
        assert!(all.matches("any:thing") && all.covers("a-*:*") && !all.matches("local"));
        assert!(!all.is_empty());
    }

    #[test]
    fn test_pattern_set_agrees_with_wildcard_match() {
        let patterns = [
            "orders",
            "tenant-a-*",
            "t*",
            "x?z",
            "*-logs",
            "a*b*c",
            "ord",
        ];
        let names = [
            "orders",
            "order",
            "ord",
            "ordersx",
            "tenant-a-1",
            "tenant-a-",
            "tenant-b",
            "t",
            "xyz",
            "xz",
            "app-logs",
            "abc",
            "aXbYc",
            "ab",
            "",
            "zzz",
        ];
        for n in 0..patterns.len() {
            let mut set = PatternSet::default();
            for p in &patterns[..=n] {
                set.insert(p);
            }
            for name in names {
                let expected = patterns[..=n].iter().any(|p| wildcard_match(p, name));
                assert_eq!(
                    set.matches(name),
                    expected,
                    "{name} against {:?}",
                    &patterns[..=n]
                );
            }
        }
    }

    #[test]
    fn test_star_matches_everything_and_empty_set_nothing() {
        let mut set = PatternSet::default();
        assert!(set.is_empty() && !set.matches("a"));
        set.insert("a");
        set.insert("*");
        assert!(set.matches("zzz") && set.matches(""));
        set.insert("b*");
        assert!(set.matches("q"));
    }
}

#[cfg(test)]
mod cover_tests {
    use super::*;

    #[test]
    fn test_pattern_covers_only_subsets() {
        for (g, r) in [
            ("*", "*"),
            ("*", "anything-*"),
            ("logs-*", "logs-*"),
            ("logs-*", "logs-2024-*"),
            ("logs-*", "logs-2024"),
            ("logs-*-archive", "logs-eu-*-archive"),
            ("a?", "ab"),
            ("a?", "a?"),
            ("a*", "a?"),
        ] {
            assert!(pattern_covers(g, r), "{g} covers {r}");
        }
        for (g, r) in [
            ("logs-*", "*"),
            ("logs-*", "log*"),
            ("logs-*", "_all"),
            ("a?", "a*"),
            ("a?", "a??"),
            ("*a", "*a*"),
            ("logs-*-archive", "logs-*"),
            ("orders", "orders*"),
        ] {
            assert!(!pattern_covers(g, r), "{g} does not cover {r}");
        }
    }

    /// Soundness against the matcher: whenever `g` covers `r`, every name built from `r` (its
    /// wildcards filled in several ways) matches `g`.
    #[test]
    fn test_a_covered_pattern_matches_only_names_the_grant_matches() {
        let alphabet = ["a", "b", "-", "*", "?"];
        let mut patterns = vec![String::new()];
        for _ in 0..4 {
            let mut longer = Vec::new();
            for p in &patterns {
                for c in alphabet {
                    longer.push(format!("{p}{c}"));
                }
            }
            patterns.extend(longer);
        }
        patterns.sort();
        patterns.dedup();
        let fills = ["", "a", "b-", "ab-ba"];
        for g in patterns.iter().filter(|p| p.len() <= 3) {
            for r in &patterns {
                if !pattern_covers(g, r) {
                    continue;
                }
                for fill in fills {
                    let name: String = r
                        .chars()
                        .map(|c| match c {
                            '*' => fill.to_string(),
                            '?' => "b".to_string(),
                            c => c.to_string(),
                        })
                        .collect();
                    assert!(wildcard_match(g, &name), "{g} covers {r} but not {name}");
                }
            }
        }
    }
}
