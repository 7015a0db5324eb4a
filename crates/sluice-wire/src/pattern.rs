//! Wildcard matching, OpenSearch's `Regex.simpleMatch`: `*` stands for any run of characters
//! (none included), everything else matches itself. Index expressions, field patterns, setting
//! resets (`"search.*": null`) and task action filters all use this one matcher.

/// Whether `text` matches `pattern`, where `*` matches any run of characters.
///
/// Greedy with backtracking to the last `*`, so it runs in `O(pattern × text)` at worst and
/// allocates nothing.
pub fn simple_match(pattern: &str, text: &str) -> bool {
    let p = pattern.as_bytes();
    let t = text.as_bytes();
    let (mut pi, mut ti) = (0, 0);
    // The position after the last `*` seen, and the text position it was tried from.
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_simple_match_patterns() {
        assert!(simple_match("*", "search.max_buckets"));
        assert!(simple_match("*", ""));
        assert!(simple_match("", ""));
        assert!(!simple_match("", "a"));
        assert!(simple_match("search.*", "search.max_buckets"));
        assert!(simple_match("*.max_*", "search.max_buckets"));
        assert!(simple_match("search.max_buckets", "search.max_buckets"));
        assert!(!simple_match("search.max", "search.max_buckets"));
        assert!(!simple_match("wlm.*", "search.max_buckets"));
        assert!(simple_match("*buckets", "search.max_buckets"));
        assert!(!simple_match("*bucket", "search.max_buckets"));
        assert!(simple_match("mess*", "message"));
        assert!(simple_match("*.keyword", "message.keyword"));
        assert!(!simple_match("a*c", "abd"));
        assert!(simple_match("a**c", "abbc"));
        assert!(simple_match("lo*-*", "logs-2024"));
        assert!(simple_match("é*", "été"));
    }
}
