//! Java `DecimalFormat` patterns, as OpenSearch renders numeric `key_as_string` with `format`.
//!
//! The common subset: a literal prefix and suffix (quotes `'…'` allowed), `#` and `0` integer
//! digits with `,` grouping, `.` and `0`/`#` fraction digits, `%` and `‰` multipliers, a `;`
//! negative subpattern (its prefix and suffix; without one, negatives take a `-` before the
//! positive prefix). Values round half-up on their exact binary value, as
//! OpenSearch's `DocValueFormat.Decimal` sets `RoundingMode.HALF_UP`. Scientific notation (`E`)
//! and currency signs are refused.

use crate::error::{EngineError, Result};

/// Digits of the exact decimal expansion read before rounding: a double's expansion can be
/// longer, but no pattern asks for more than a handful of fraction digits and the digits past
/// 60 cannot change a half-up decision at that scale except for values below 1e-40.
const EXACT_DIGITS: usize = 60;

/// A parsed `DecimalFormat` pattern.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DecimalPattern {
    prefix: String,
    suffix: String,
    /// The prefix and suffix of negative values, from a `;` subpattern.
    negative: Option<(String, String)>,
    min_int: usize,
    min_frac: usize,
    max_frac: usize,
    /// Digits per group, 0 for no grouping.
    grouping: usize,
    /// Whether the decimal point shows even without fraction digits (`#.`).
    always_point: bool,
    /// 1, 100 (`%`) or 1000 (`‰`).
    multiplier: f64,
}

fn bad_pattern(pattern: &str, why: &str) -> EngineError {
    EngineError::illegal_argument(format!(
        "unsupported decimal format pattern [{pattern}]: {why}; use digits (#, 0), grouping (,), a \
         decimal point (.) and literal prefix or suffix"
    ))
}

/// Reads literal text up to the first unquoted character in `stop` and returns it with the rest.
fn literal<'p>(pattern: &str, text: &'p str, stop: &str) -> Result<(String, f64, &'p str)> {
    let mut out = String::new();
    let mut multiplier = 1.0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => {
                if chars.peek().map(|(_, c)| *c) == Some('\'') {
                    chars.next();
                    out.push('\'');
                    continue;
                }
                loop {
                    match chars.next() {
                        None => return Err(bad_pattern(pattern, "unterminated quote")),
                        Some((_, '\'')) => {
                            if chars.peek().map(|(_, c)| *c) == Some('\'') {
                                chars.next();
                                out.push('\'');
                            } else {
                                break;
                            }
                        }
                        Some((_, c)) => out.push(c),
                    }
                }
            }
            c if stop.contains(c) => return Ok((out, multiplier, &text[i..])),
            '%' => {
                multiplier = 100.0;
                out.push('%');
            }
            '\u{2030}' => {
                multiplier = 1000.0;
                out.push('\u{2030}');
            }
            '\u{a4}' => return Err(bad_pattern(pattern, "currency signs are not supported")),
            c => out.push(c),
        }
    }
    Ok((out, multiplier, ""))
}

impl DecimalPattern {
    /// Parses a pattern such as `##0.0`, `#,##0.00`, `0.#%` or `'$'#,##0`.
    ///
    /// # Errors
    ///
    /// `illegal_argument_exception` naming the pattern when it has no digits, uses scientific
    /// notation or currency, or is malformed.
    pub(super) fn parse(pattern: &str) -> Result<DecimalPattern> {
        let (positive, negative) = match pattern.split_once(';') {
            Some((p, n)) => (p, Some(n)),
            None => (pattern, None),
        };
        let negative = match negative {
            Some(n) => {
                let (neg_prefix, _, rest) = literal(pattern, n, "#0,.")?;
                let end = rest.find(|c| !"#0,.".contains(c)).unwrap_or(rest.len());
                let (neg_suffix, _, _) = literal(pattern, &rest[end..], "")?;
                Some((neg_prefix, neg_suffix))
            }
            None => None,
        };
        let (prefix, m1, rest) = literal(pattern, positive, "#0,.")?;
        let end = rest.find(|c| !"#0,.".contains(c)).unwrap_or(rest.len());
        let (number, rest) = rest.split_at(end);
        if rest.starts_with('E') {
            return Err(bad_pattern(pattern, "scientific notation is not supported"));
        }
        let (suffix, m2, _) = literal(pattern, rest, "")?;
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (number, None),
        };
        if frac_part.is_some_and(|f| f.contains(['.', ','])) {
            return Err(bad_pattern(pattern, "malformed fraction"));
        }
        let int_digits: String = int_part.chars().filter(|c| *c != ',').collect();
        if int_digits.trim_start_matches('#').contains('#') {
            return Err(bad_pattern(pattern, "'#' after '0' in the integer part"));
        }
        let frac = frac_part.unwrap_or_default();
        if frac.trim_start_matches('0').contains('0') {
            return Err(bad_pattern(pattern, "'0' after '#' in the fraction"));
        }
        if int_digits.is_empty() && frac.is_empty() {
            return Err(bad_pattern(pattern, "no digits"));
        }
        let grouping = match int_part.rfind(',') {
            Some(pos) => int_part.len() - pos - 1,
            None => 0,
        };
        Ok(DecimalPattern {
            prefix,
            suffix,
            negative,
            min_int: int_digits.chars().filter(|c| *c == '0').count(),
            min_frac: frac.chars().filter(|c| *c == '0').count(),
            max_frac: frac.len(),
            grouping,
            always_point: frac_part.is_some() && frac.is_empty(),
            multiplier: if m1 != 1.0 { m1 } else { m2 },
        })
    }

    /// Formats `value` with the pattern.
    pub(super) fn format(&self, value: f64) -> String {
        if value.is_nan() {
            return "NaN".into();
        }
        let value = value * self.multiplier;
        let negative = value.is_sign_negative();
        let (prefix, suffix) = match (&self.negative, negative) {
            (Some((p, s)), true) => (p.clone(), s.as_str()),
            (None, true) => (format!("-{}", self.prefix), self.suffix.as_str()),
            (_, false) => (self.prefix.clone(), self.suffix.as_str()),
        };
        let mut out = prefix;
        if value.is_infinite() {
            out.push('\u{221e}');
            out.push_str(suffix);
            return out;
        }
        let exact = format!("{:.*}", EXACT_DIGITS, value.abs());
        let (int_text, frac_text) = exact.split_once('.').unwrap_or((&exact, ""));
        let mut digits: Vec<u8> = int_text
            .bytes()
            .chain(frac_text.bytes().take(self.max_frac))
            .map(|b| b - b'0')
            .collect();
        let int_len = int_text.len();
        // Half-up: the first dropped digit decides.
        if frac_text
            .as_bytes()
            .get(self.max_frac)
            .is_some_and(|d| *d >= b'5')
        {
            let mut i = digits.len();
            loop {
                if i == 0 {
                    digits.insert(0, 1);
                    break;
                }
                i -= 1;
                if digits[i] == 9 {
                    digits[i] = 0;
                } else {
                    digits[i] += 1;
                    break;
                }
            }
        }
        let int_len = int_len + (digits.len() - int_len - self.max_frac.min(frac_text.len()));
        let (int_digits, frac_digits) = digits.split_at(int_len);
        let mut frac: Vec<u8> = frac_digits.to_vec();
        while frac.len() > self.min_frac && frac.last() == Some(&0) {
            frac.pop();
        }
        let significant: Vec<u8> = int_digits.iter().copied().skip_while(|d| *d == 0).collect();
        let mut int: Vec<u8> = vec![0; self.min_int.saturating_sub(significant.len())];
        int.extend(significant);
        if int.is_empty() && frac.is_empty() {
            int.push(0);
        }
        for (i, d) in int.iter().enumerate() {
            if self.grouping > 0 && i > 0 && (int.len() - i).is_multiple_of(self.grouping) {
                out.push(',');
            }
            out.push(char::from(b'0' + d));
        }
        if !frac.is_empty() || self.always_point {
            out.push('.');
        }
        out.extend(frac.iter().map(|d| char::from(b'0' + d)));
        out.push_str(suffix);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(pattern: &str, value: f64) -> String {
        DecimalPattern::parse(pattern).unwrap().format(value)
    }

    #[test]
    fn test_decimal_patterns_render_as_java_does() {
        assert_eq!(fmt("##0.0", 1900.0), "1900.0");
        assert_eq!(fmt("##0.0", 0.0), "0.0");
        assert_eq!(fmt("#,##0.00", 1234567.891), "1,234,567.89");
        assert_eq!(fmt("#.##", 0.5), ".5");
        assert_eq!(fmt("#.##", 0.0), "0");
        assert_eq!(fmt("0.00", 0.125), "0.13");
        assert_eq!(fmt("0.00", 1.005), "1.00");
        assert_eq!(fmt("0", 2.5), "3");
        assert_eq!(fmt("0", 9.5), "10");
        assert_eq!(fmt("000", 7.0), "007");
        assert_eq!(fmt("0.#", -1.25), "-1.3");
        assert_eq!(fmt("0.#%", 0.256), "25.6%");
        assert_eq!(fmt("'$'#,##0", 1000.0), "$1,000");
        assert_eq!(fmt("#.", 3.0), "3.");
        assert_eq!(fmt("0.0;(0.0)", -2.0), "(2.0)");
        assert_eq!(fmt("0.0;(0.0)", 2.0), "2.0");
    }

    #[test]
    fn test_unsupported_patterns_are_refused() {
        assert!(DecimalPattern::parse("0.###E0").is_err());
        assert!(DecimalPattern::parse("abc").is_err());
        assert!(DecimalPattern::parse("0#").is_err());
        assert!(DecimalPattern::parse("'x").is_err());
    }
}
