//! Numbers as Java reads and prints them, for messages and values OpenSearch compatibility
//! fixes: [`java_double`] (`Double.toString`) and [`parse_java_long`] (`Long.parseLong`).

/// Formats a double as Java's `Double.toString` does (JDK 19+, shortest round-trip digits), so
/// messages and keys that embed numbers read as OpenSearch's: `0.16000000000000003`, `1.0`,
/// `1.0E-4`, `1.5E7`.
///
/// Java prints plain decimals for magnitudes in `[1e-3, 1e7)` and zero, and computerized
/// scientific notation (`d.dddE±n`, at least one fractional digit) otherwise.
pub fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let abs = v.abs();
    if abs == 0.0 || (1e-3..1e7).contains(&abs) {
        // Rust's Debug form is shortest round-trip and keeps ".0" on integral values; in this
        // range it never switches to exponent notation.
        return format!("{v:?}");
    }
    let sci = format!("{v:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    if mantissa.contains('.') {
        format!("{mantissa}E{exponent}")
    } else {
        format!("{mantissa}.0E{exponent}")
    }
}

/// Java's `Long.parseLong`: an optional sign and ASCII digits, nothing else (no spaces).
pub fn parse_java_long(raw: &str) -> Option<i64> {
    let digits = raw.strip_prefix(['+', '-']).unwrap_or(raw);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_java_double_matches_java_rendering() {
        assert_eq!(java_double(0.2 * 0.8), "0.16000000000000003");
        assert_eq!(java_double(1.0), "1.0");
        assert_eq!(java_double(10.0), "10.0");
        assert_eq!(java_double(-3.25), "-3.25");
        assert_eq!(java_double(0.0), "0.0");
        assert_eq!(java_double(0.9), "0.9");
        assert_eq!(java_double(0.001), "0.001");
        assert_eq!(java_double(0.0001), "1.0E-4");
        assert_eq!(java_double(0.00015), "1.5E-4");
        assert_eq!(java_double(1.0e7), "1.0E7");
        assert_eq!(java_double(1.5e10), "1.5E10");
        assert_eq!(java_double(1234567.0), "1234567.0");
        assert_eq!(java_double(-2.5e-5), "-2.5E-5");
        assert_eq!(java_double(f64::NAN), "NaN");
        assert_eq!(java_double(f64::NEG_INFINITY), "-Infinity");
    }

    #[test]
    fn test_parse_java_long_accepts_sign_and_digits_only() {
        assert_eq!(parse_java_long("42"), Some(42));
        assert_eq!(parse_java_long("+7"), Some(7));
        assert_eq!(parse_java_long("-1"), Some(-1));
        for bad in ["", "+", " 5", "5 ", "1.5", "1e3", "9223372036854775808"] {
            assert_eq!(parse_java_long(bad), None, "{bad:?}");
        }
    }
}
