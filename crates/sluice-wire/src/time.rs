//! Time values, OpenSearch's way: one parser ([`parse_time_value`]) for every place a duration
//! is read — URL parameters, request bodies, scroll keep-alives, workload group settings,
//! cluster settings, node configuration — and the two ways OpenSearch prints one.
//!
//! The rule is OpenSearch 3.x's `TimeValue.parseTimeValue` (`libs/common/.../unit/TimeValue.java`):
//! a whole number followed by a unit (`nanos`, `micros`, `ms`, `s`, `m`, `h`, `d`; case does
//! not matter except for `m`, since `M` means months elsewhere), or a bare `0` / `-1`. `-1`
//! with any unit means "no value" (disabled); any other negative is refused. Fractional values
//! (`1.5s`) are **refused**, not rounded: "failed to parse [1.5s], fractional time values are
//! not supported". Every failure is an `illegal_argument_exception` (400) in OpenSearch 3.x.

use std::fmt;
use std::time::Duration;

use crate::number::parse_java_long;

/// A parsed time value: a duration, or OpenSearch's `-1` ("disabled", "no limit").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeValue {
    /// The value `-1` (of any unit): explicitly no duration.
    Disabled,
    /// A duration (possibly zero).
    After(Duration),
}

impl TimeValue {
    /// The duration, `None` for `-1`.
    pub fn duration_opt(self) -> Option<Duration> {
        match self {
            TimeValue::Disabled => None,
            TimeValue::After(d) => Some(d),
        }
    }
}

/// Why a text is not a time value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeValueErrorKind {
    /// No known unit, and not `0` or `-1`.
    MissingUnit,
    /// A whole number below `-1`.
    Negative,
    /// A number with a fraction (or too large for a Java `long`).
    Fractional,
    /// Something before the unit that is not a number at all.
    NotANumber,
}

/// A text that is not a time value; its `Display` is OpenSearch's message, word for word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct TimeValueError {
    /// What is wrong.
    pub kind: TimeValueErrorKind,
    /// The text as given.
    pub raw: String,
    /// The setting or parameter it was given for.
    pub setting: String,
}

impl TimeValueError {
    fn new(kind: TimeValueErrorKind, raw: &str, setting: &str) -> Self {
        TimeValueError {
            kind,
            raw: raw.to_string(),
            setting: setting.to_string(),
        }
    }

    /// OpenSearch's message for this failure.
    pub fn message(&self) -> String {
        let (raw, setting) = (&self.raw, &self.setting);
        match self.kind {
            TimeValueErrorKind::MissingUnit => format!(
                "failed to parse setting [{setting}] with value [{raw}] as a time value: unit is missing or unrecognized"
            ),
            TimeValueErrorKind::Negative => format!(
                "failed to parse setting [{setting}] with value [{raw}] as a time value: negative durations are not supported"
            ),
            TimeValueErrorKind::Fractional => {
                format!("failed to parse [{raw}], fractional time values are not supported")
            }
            TimeValueErrorKind::NotANumber => format!("failed to parse [{raw}]"),
        }
    }
}

/// The units OpenSearch tries, in its order (`nanos` and `micros` before `s`, `ms` before
/// `m`), with their length in nanoseconds.
const UNITS: [(&str, u128); 7] = [
    ("nanos", 1),
    ("micros", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// Parses `raw`, given for `setting` (the key or parameter name the messages show), as
/// OpenSearch's `TimeValue.parseTimeValue` does.
pub fn parse_time_value(raw: &str, setting: &str) -> Result<TimeValue, TimeValueError> {
    let normalized = raw.trim().to_lowercase();
    for (suffix, unit_nanos) in UNITS {
        // Minutes are matched on the text as given: a trailing `M` is not minutes.
        let matches = if suffix == "m" {
            raw.ends_with('m')
        } else {
            normalized.ends_with(suffix)
        };
        if !matches {
            continue;
        }
        let number = normalized[..normalized.len() - suffix.len()].trim();
        let n = parse_java_long(number).ok_or_else(|| {
            let kind = if is_java_double(number) {
                TimeValueErrorKind::Fractional
            } else {
                TimeValueErrorKind::NotANumber
            };
            TimeValueError::new(kind, raw, setting)
        })?;
        return match n {
            -1 => Ok(TimeValue::Disabled),
            n if n < -1 => Err(TimeValueError::new(
                TimeValueErrorKind::Negative,
                raw,
                setting,
            )),
            n => Ok(TimeValue::After(nanos_to_duration(n as u128 * unit_nanos))),
        };
    }
    // `-1`, `-01` …: OpenSearch's `TimeValue.MINUS_ONE`; `0`, `00` …: zero.
    if let Some(rest) = normalized.strip_prefix('-')
        && rest.trim_start_matches('0') == "1"
    {
        return Ok(TimeValue::Disabled);
    }
    if !normalized.is_empty() && normalized.bytes().all(|b| b == b'0') {
        return Ok(TimeValue::After(Duration::ZERO));
    }
    Err(TimeValueError::new(
        TimeValueErrorKind::MissingUnit,
        raw,
        setting,
    ))
}

/// Whether Java's `Double.parseDouble` accepts `s` (decimal forms: sign, digits with an
/// optional point, an optional exponent, an optional `d`/`f` type suffix).
fn is_java_double(s: &str) -> bool {
    let s = s.strip_suffix(['d', 'f']).unwrap_or(s);
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match s.split_once('e') {
        Some((m, e)) => (m, Some(e)),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = (!int.is_empty() || !frac.is_empty()) && all_digits(int) && all_digits(frac);
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && all_digits(e)
    });
    mantissa_ok && exponent_ok
}

/// A duration of `nanos`, saturating at [`Duration::MAX`].
fn nanos_to_duration(nanos: u128) -> Duration {
    match u64::try_from(nanos / 1_000_000_000) {
        Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
        Err(_) => Duration::MAX,
    }
}

/// Renders a duration as OpenSearch's `TimeValue.toString` does: the largest unit it reaches,
/// at most one decimal, truncated, a zero decimal dropped (`1d`, `1.5h`, `90ms`, `0s`). This is
/// the form of durations inside messages ("Cancellation timeout of 1.5m is expired").
pub fn format_time_value(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    let (suffix, unit) = UNITS
        .iter()
        .rev()
        .copied()
        .find(|(_, unit)| nanos >= *unit)
        .unwrap_or(("nanos", 1));
    let whole = nanos / unit;
    let tenth = nanos % unit * 10 / unit;
    if tenth == 0 {
        format!("{whole}{suffix}")
    } else {
        format!("{whole}.{tenth}{suffix}")
    }
}

/// Renders a duration exactly, in the largest unit that divides it (`0ms`, `500ms`, `5m`,
/// `24h`), as OpenSearch prints a setting's bound (`TimeValue.getStringRep`).
pub fn format_time_value_exact(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0ms".to_string();
    }
    let (suffix, unit) = UNITS
        .iter()
        .rev()
        .copied()
        .find(|(_, unit)| nanos.is_multiple_of(*unit))
        .unwrap_or(("nanos", 1));
    format!("{}{suffix}", nanos / unit)
}

impl From<TimeValueError> for crate::OpenSearchError {
    /// OpenSearch 3.x throws `IllegalArgumentException` for every time-value failure: a 400
    /// `illegal_argument_exception`.
    fn from(e: TimeValueError) -> Self {
        crate::OpenSearchError::illegal_argument(e.to_string())
    }
}

impl fmt::Display for TimeValue {
    /// `-1`, or the duration as [`format_time_value`] prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeValue::Disabled => f.write_str("-1"),
            TimeValue::After(d) => f.write_str(&format_time_value(*d)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> TimeValue {
        parse_time_value(raw, "k").unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    fn err(raw: &str) -> String {
        parse_time_value(raw, "k").expect_err(raw).to_string()
    }

    fn after(d: Duration) -> TimeValue {
        TimeValue::After(d)
    }

    #[test]
    fn test_every_unit_parses() {
        assert_eq!(ok("9nanos"), after(Duration::from_nanos(9)));
        assert_eq!(ok("7micros"), after(Duration::from_micros(7)));
        assert_eq!(ok("500ms"), after(Duration::from_millis(500)));
        assert_eq!(ok("30s"), after(Duration::from_secs(30)));
        assert_eq!(ok("5m"), after(Duration::from_secs(300)));
        assert_eq!(ok("2h"), after(Duration::from_secs(7200)));
        assert_eq!(ok("1d"), after(Duration::from_secs(86400)));
        assert_eq!(ok(" 10S "), after(Duration::from_secs(10)));
        assert_eq!(ok("1MS"), after(Duration::from_millis(1)));
        assert_eq!(ok("1H"), after(Duration::from_secs(3600)));
        assert_eq!(ok("+3s"), after(Duration::from_secs(3)));
        assert_eq!(ok("0"), after(Duration::ZERO));
        assert_eq!(ok("000"), after(Duration::ZERO));
        assert_eq!(ok("0s"), after(Duration::ZERO));
    }

    #[test]
    fn test_minus_one_of_any_unit_is_disabled_and_other_negatives_are_refused() {
        for raw in ["-1", "-001", "-1s", "-1ms", "-1d"] {
            assert_eq!(ok(raw), TimeValue::Disabled, "{raw}");
        }
        assert_eq!(
            err("-5s"),
            "failed to parse setting [k] with value [-5s] as a time value: negative durations are not supported"
        );
        assert_eq!(
            err("-2"),
            "failed to parse setting [k] with value [-2] as a time value: unit is missing or unrecognized"
        );
    }

    #[test]
    fn test_fractional_values_are_refused_with_opensearch_message() {
        for raw in ["1.5s", "0.5m", ".5h", "1e3ms", "99999999999999999999s"] {
            assert_eq!(
                err(raw),
                format!("failed to parse [{raw}], fractional time values are not supported"),
                "{raw}"
            );
        }
        let e = parse_time_value("1.5s", "k").expect_err("fractional");
        assert_eq!(e.kind, TimeValueErrorKind::Fractional);
    }

    #[test]
    fn test_missing_or_unknown_units_and_non_numbers() {
        for raw in ["30", "", "1w", "5M", " 5m ", "soon"] {
            assert_eq!(
                err(raw),
                format!(
                    "failed to parse setting [k] with value [{raw}] as a time value: unit is missing or unrecognized"
                ),
                "{raw:?}"
            );
        }
        assert_eq!(err("abcs"), "failed to parse [abcs]");
        assert_eq!(err("1 0s"), "failed to parse [1 0s]");
    }

    #[test]
    fn test_huge_values_saturate() {
        assert_eq!(ok("9223372036854775807d"), after(Duration::MAX));
    }

    #[test]
    fn test_format_time_value_matches_opensearch_to_string() {
        assert_eq!(format_time_value(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_time_value(Duration::from_secs(2 * 86_400)), "2d");
        assert_eq!(format_time_value(Duration::from_secs(90 * 60)), "1.5h");
        assert_eq!(format_time_value(Duration::from_secs(90)), "1.5m");
        assert_eq!(format_time_value(Duration::from_secs(600)), "10m");
        assert_eq!(format_time_value(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_time_value(Duration::from_millis(1999)), "1.9s");
        assert_eq!(format_time_value(Duration::from_millis(1050)), "1s");
        assert_eq!(format_time_value(Duration::from_millis(90)), "90ms");
        assert_eq!(format_time_value(Duration::from_millis(50)), "50ms");
        assert_eq!(format_time_value(Duration::ZERO), "0s");
        assert_eq!(TimeValue::Disabled.to_string(), "-1");
    }

    #[test]
    fn test_format_time_value_exact_uses_the_largest_dividing_unit() {
        assert_eq!(format_time_value_exact(Duration::ZERO), "0ms");
        assert_eq!(format_time_value_exact(Duration::from_secs(1)), "1s");
        assert_eq!(format_time_value_exact(Duration::from_secs(90)), "90s");
        assert_eq!(format_time_value_exact(Duration::from_secs(86_400)), "1d");
        assert_eq!(
            format_time_value_exact(Duration::from_nanos(1_500)),
            "1500nanos"
        );
    }
}
