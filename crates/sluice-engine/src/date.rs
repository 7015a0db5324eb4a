//! Dates as OpenSearch reads them: the formats `strict_date_optional_time`,
//! `date_optional_time`, `epoch_millis` and `epoch_second` alone or joined with `||`
//! ([`DateFormat`]), and date math (`now-1d/d`, `2024-01-01||+1M`). All values are UTC epoch
//! milliseconds.

use std::borrow::Cow;
use std::fmt;

/// The dates an index can hold, in epoch milliseconds: tantivy keeps a date as nanoseconds in
/// an `i64` (years 1677 to 2262). A document date outside is refused (OpenSearch's own
/// `date_nanos` range); a query bound outside is brought to the nearest end.
pub const STORABLE_MILLIS: std::ops::RangeInclusive<i64> =
    (i64::MIN / 1_000_000)..=(i64::MAX / 1_000_000);

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

/// One named format of a date field's `format` (the parts of `a||b`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateFormatPart {
    /// `strict_date_optional_time`: `yyyy[-MM[-dd]][THH[:mm[:ss[.S…]]]][offset]`.
    StrictDateOptionalTime,
    /// `date_optional_time`: read as the strict form (sluice does not accept the lenient
    /// one-digit months and days).
    DateOptionalTime,
    /// `epoch_millis`: milliseconds since the epoch, optionally negative, with an optional
    /// fraction (below the millisecond, dropped).
    EpochMillis,
    /// `epoch_second`: seconds since the epoch, optionally negative, with an optional fraction
    /// (kept to the millisecond).
    EpochSecond,
}

impl DateFormatPart {
    /// Parses one format name; `None` for a name sluice does not know.
    pub fn from_name(name: &str) -> Option<DateFormatPart> {
        Some(match name {
            "strict_date_optional_time" => DateFormatPart::StrictDateOptionalTime,
            "date_optional_time" => DateFormatPart::DateOptionalTime,
            "epoch_millis" => DateFormatPart::EpochMillis,
            "epoch_second" => DateFormatPart::EpochSecond,
            _ => return None,
        })
    }

    /// The format's OpenSearch name.
    pub fn name(self) -> &'static str {
        match self {
            DateFormatPart::StrictDateOptionalTime => "strict_date_optional_time",
            DateFormatPart::DateOptionalTime => "date_optional_time",
            DateFormatPart::EpochMillis => "epoch_millis",
            DateFormatPart::EpochSecond => "epoch_second",
        }
    }

    fn is_epoch(self) -> bool {
        matches!(
            self,
            DateFormatPart::EpochMillis | DateFormatPart::EpochSecond
        )
    }
}

/// A date field's `format`: the formats a value may be written in, in the order given.
///
/// A value that is a number (a JSON number, or a string like `1420070400` or `-5.25`) is read
/// by the first `epoch_*` format of the list wherever it stands; any other string by the
/// date-time formats. Without an `epoch_*` format a number is read as a date-time string.
/// (OpenSearch tries each format in turn, so there a number of at most four digits can be read
/// as a year when a date-time format comes first; sluice keeps reading it as an epoch value.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DateFormat {
    parts: Cow<'static, [DateFormatPart]>,
}

impl Default for DateFormat {
    fn default() -> Self {
        DateFormat::DEFAULT
    }
}

impl fmt::Display for DateFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str("||")?;
            }
            f.write_str(part.name())?;
        }
        Ok(())
    }
}

/// The error of a value that none of a format's parts reads, in OpenSearch's words.
pub fn bad_date(value: &str, format: &DateFormat) -> String {
    format!("failed to parse date field [{value}] with format [{format}]")
}

impl DateFormat {
    /// OpenSearch's default date format, `strict_date_optional_time||epoch_millis`.
    pub const DEFAULT: DateFormat = DateFormat {
        parts: Cow::Borrowed(&[
            DateFormatPart::StrictDateOptionalTime,
            DateFormatPart::EpochMillis,
        ]),
    };

    /// Parses a `format` such as `strict_date_optional_time||epoch_second`; `None` if a part
    /// is not a format sluice knows (or is empty).
    pub fn parse(format: &str) -> Option<DateFormat> {
        let parts = format
            .split("||")
            .map(DateFormatPart::from_name)
            .collect::<Option<Vec<_>>>()?;
        Some(DateFormat {
            parts: Cow::Owned(parts),
        })
    }

    /// The format that reads numbers, if any.
    fn epoch(&self) -> Option<DateFormatPart> {
        self.parts.iter().copied().find(|p| p.is_epoch())
    }

    fn has_date_time(&self) -> bool {
        self.parts.iter().any(|p| !p.is_epoch())
    }

    /// Parses a date string to epoch milliseconds; `None` if no part of the format reads it.
    pub fn parse_str(&self, s: &str) -> Option<i64> {
        self.parse_str_rounding(s, false)
    }

    /// Parses a date string as [`parse_str`](Self::parse_str) does; with `round_up`, a whole
    /// number of `epoch_second` seconds stands for the last millisecond of that second, as
    /// OpenSearch's round-up parser fills the missing fraction for the `gt` and `lte` ends of a
    /// range. (Date-time strings are rounded by the range query itself.)
    pub fn parse_str_rounding(&self, s: &str, round_up: bool) -> Option<i64> {
        let s = s.trim();
        if let Some(number) = EpochNumber::parse(s)
            && let Some(epoch) = self.epoch()
        {
            return number.millis(epoch, round_up);
        }
        if self.has_date_time() {
            parse_iso(s)
        } else {
            None
        }
    }

    /// Parses a JSON date value (a number or a string) to epoch milliseconds.
    pub fn parse_value(&self, v: &serde_json::Value) -> Option<i64> {
        self.parse_value_rounding(v, false)
    }

    /// Parses a JSON date value, rounding as [`parse_str_rounding`](Self::parse_str_rounding).
    pub fn parse_value_rounding(&self, v: &serde_json::Value, round_up: bool) -> Option<i64> {
        match v {
            serde_json::Value::Number(n) => match self.epoch() {
                Some(DateFormatPart::EpochMillis) => n
                    .as_i64()
                    .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f as i64)),
                Some(epoch) => EpochNumber::parse(&n.to_string())?.millis(epoch, round_up),
                None => self.parse_str_rounding(&n.to_string(), round_up),
            },
            serde_json::Value::String(s) => self.parse_str_rounding(s, round_up),
            _ => None,
        }
    }

    /// Whether `s` would be read by an `epoch_*` part of this format (rather than as a
    /// date-time).
    pub fn reads_as_epoch(&self, s: &str) -> bool {
        self.epoch().is_some() && EpochNumber::parse(s.trim()).is_some()
    }
}

/// A number written as an epoch value: `-?digits(.digits)?`.
struct EpochNumber<'a> {
    negative: bool,
    whole: &'a str,
    fraction: Option<&'a str>,
}

impl<'a> EpochNumber<'a> {
    fn parse(s: &'a str) -> Option<EpochNumber<'a>> {
        let (negative, rest) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (whole, fraction) = match rest.split_once('.') {
            Some((w, f)) => (w, Some(f)),
            None => (rest, None),
        };
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        (digits(whole) && fraction.is_none_or(digits)).then_some(EpochNumber {
            negative,
            whole,
            fraction,
        })
    }

    fn millis(&self, unit: DateFormatPart, round_up: bool) -> Option<i64> {
        let whole: i64 = self.whole.parse().ok()?;
        let magnitude = match unit {
            DateFormatPart::EpochSecond => {
                let frac_ms = match self.fraction {
                    // The first three digits are milliseconds; finer ones are dropped.
                    Some(f) => {
                        let ms = &f[..f.len().min(3)];
                        ms.parse::<i64>().ok()? * 10i64.pow(3 - ms.len() as u32)
                    }
                    None if round_up => 999,
                    None => 0,
                };
                whole.checked_mul(1000)?.checked_add(frac_ms)?
            }
            _ => whole,
        };
        Some(if self.negative { -magnitude } else { magnitude })
    }
}

/// Parses a date string in OpenSearch's default format (`strict_date_optional_time`, with
/// `epoch_millis` for numbers) to epoch milliseconds.
pub fn parse_date_str(s: &str) -> Option<i64> {
    DateFormat::DEFAULT.parse_str(s)
}

/// Parses a JSON date value in OpenSearch's default format: a number is `epoch_millis`, a
/// string is read as [`parse_date_str`] reads it.
pub fn parse_date_value(v: &serde_json::Value) -> Option<i64> {
    DateFormat::DEFAULT.parse_value(v)
}

/// Renders epoch milliseconds as OpenSearch renders `key_as_string`: `2024-01-01T00:00:00.000Z`.
pub fn format_millis(ms: i64) -> String {
    let Ok(dt) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) else {
        return ms.to_string();
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.millisecond()
    )
}

fn take_digits(s: &mut &str, n: usize) -> Option<u32> {
    if s.len() < n || !s.as_bytes()[..n].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let (d, rest) = s.split_at(n);
    *s = rest;
    d.parse().ok()
}

fn take_char(s: &mut &str, c: u8) -> bool {
    if s.as_bytes().first() == Some(&c) {
        *s = &s[1..];
        true
    } else {
        false
    }
}

/// `yyyy[-MM[-dd]][T HH[:mm[:ss[.SSS…]]]][Z|±HH:mm|±HHmm]`.
fn parse_iso(input: &str) -> Option<i64> {
    let mut s = input;
    let year = take_digits(&mut s, 4)? as i32;
    let mut month = 1;
    let mut day = 1;
    if take_char(&mut s, b'-') {
        month = take_digits(&mut s, 2)?;
        if take_char(&mut s, b'-') {
            day = take_digits(&mut s, 2)?;
        }
    }
    let (mut hour, mut minute, mut second, mut nanos) = (0, 0, 0, 0u32);
    if take_char(&mut s, b'T') || take_char(&mut s, b't') {
        hour = take_digits(&mut s, 2)?;
        if take_char(&mut s, b':') {
            minute = take_digits(&mut s, 2)?;
            if take_char(&mut s, b':') {
                second = take_digits(&mut s, 2)?;
                if take_char(&mut s, b'.') || take_char(&mut s, b',') {
                    let frac_len = s.bytes().take_while(u8::is_ascii_digit).count();
                    if frac_len == 0 || frac_len > 9 {
                        return None;
                    }
                    let frac: u32 = s[..frac_len].parse().ok()?;
                    nanos = frac * 10u32.pow(9 - frac_len as u32);
                    s = &s[frac_len..];
                }
            }
        }
    }
    let mut offset_secs = 0i32;
    if take_char(&mut s, b'Z') || take_char(&mut s, b'z') {
    } else if let Some(&sign) = s.as_bytes().first().filter(|c| **c == b'+' || **c == b'-') {
        s = &s[1..];
        let oh = take_digits(&mut s, 2)? as i32;
        take_char(&mut s, b':');
        let om = if s.is_empty() {
            0
        } else {
            take_digits(&mut s, 2)? as i32
        };
        offset_secs = (oh * 3600 + om * 60) * if sign == b'-' { -1 } else { 1 };
    }
    if !s.is_empty() {
        return None;
    }
    let date =
        Date::from_calendar_date(year, Month::try_from(month as u8).ok()?, day as u8).ok()?;
    let time = Time::from_hms_nano(hour as u8, minute as u8, second as u8, nanos).ok()?;
    let offset = UtcOffset::from_whole_seconds(offset_secs).ok()?;
    let dt = PrimitiveDateTime::new(date, time).assume_offset(offset);
    Some((dt.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// Evaluates OpenSearch date math: an anchor (`now` or a date followed by `||`), then any number
/// of `+N<unit>`, `-N<unit>` and `/<unit>` operations; units y M w d h H m s.
///
/// `round_up` selects how `/unit` rounds: down to the start of the unit (for `gte`, `lt`), or up
/// to its last millisecond (for `gt`, `lte`), as OpenSearch's range query does.
pub fn parse_date_math(expr: &str, now_millis: i64, round_up: bool) -> Result<i64, String> {
    parse_date_math_in(expr, now_millis, round_up, &DateFormat::DEFAULT)
}

/// Evaluates date math as [`parse_date_math`] does, reading the anchor date in `format` (a
/// date field's format, or a range query's `format`).
pub fn parse_date_math_in(
    expr: &str,
    now_millis: i64,
    round_up: bool,
    format: &DateFormat,
) -> Result<i64, String> {
    let expr = expr.trim();
    let bad_date = |expr: &str| bad_date(expr, format);
    let (mut ms, mut ops) = if let Some(rest) = expr.strip_prefix("now") {
        (now_millis, rest)
    } else if let Some(pos) = expr.find("||") {
        let anchor = &expr[..pos];
        (
            format.parse_str(anchor).ok_or_else(|| bad_date(expr))?,
            &expr[pos + 2..],
        )
    } else {
        return format
            .parse_str_rounding(expr, round_up)
            .ok_or_else(|| bad_date(expr));
    };
    while !ops.is_empty() {
        let op = ops.as_bytes()[0];
        ops = &ops[1..];
        match op {
            b'+' | b'-' => {
                let n_len = ops.bytes().take_while(u8::is_ascii_digit).count();
                let n: i64 = if n_len == 0 {
                    1
                } else {
                    ops[..n_len].parse().map_err(|_| bad_date(expr))?
                };
                ops = &ops[n_len..];
                let unit = ops.chars().next().ok_or_else(|| bad_date(expr))?;
                ops = &ops[unit.len_utf8()..];
                let n = if op == b'-' { -n } else { n };
                ms = add_units(ms, n, unit).ok_or_else(|| bad_date(expr))?;
            }
            b'/' => {
                let unit = ops.chars().next().ok_or_else(|| bad_date(expr))?;
                ops = &ops[unit.len_utf8()..];
                ms = round_to(ms, unit, round_up).ok_or_else(|| bad_date(expr))?;
            }
            _ => return Err(bad_date(expr)),
        }
    }
    Ok(ms)
}

fn to_dt(ms: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
}

fn from_dt(dt: OffsetDateTime) -> i64 {
    (dt.unix_timestamp_nanos() / 1_000_000) as i64
}

fn add_months(dt: OffsetDateTime, months: i64) -> Option<OffsetDateTime> {
    let total = i64::from(dt.year()) * 12 + i64::from(u8::from(dt.month())) - 1 + months;
    let year = i32::try_from(total.div_euclid(12)).ok()?;
    let month = Month::try_from((total.rem_euclid(12) + 1) as u8).ok()?;
    let last = time::util::days_in_month(month, year);
    let day = dt.day().min(last);
    let date = Date::from_calendar_date(year, month, day).ok()?;
    Some(dt.replace_date(date))
}

fn add_units(ms: i64, n: i64, unit: char) -> Option<i64> {
    let fixed = |unit_ms: i64| ms.checked_add(n.checked_mul(unit_ms)?);
    match unit {
        'y' => Some(from_dt(add_months(to_dt(ms)?, n.checked_mul(12)?)?)),
        'M' => Some(from_dt(add_months(to_dt(ms)?, n)?)),
        'w' => fixed(7 * 86_400_000),
        'd' => fixed(86_400_000),
        'h' | 'H' => fixed(3_600_000),
        'm' => fixed(60_000),
        's' => fixed(1_000),
        _ => None,
    }
}

fn round_to(ms: i64, unit: char, round_up: bool) -> Option<i64> {
    let dt = to_dt(ms)?;
    let start = match unit {
        'y' => dt
            .replace_date(Date::from_calendar_date(dt.year(), Month::January, 1).ok()?)
            .replace_time(Time::MIDNIGHT),
        'M' => dt.replace_day(1).ok()?.replace_time(Time::MIDNIGHT),
        'w' => {
            let back = i64::from(dt.weekday().number_days_from_monday());
            to_dt(from_dt(dt.replace_time(Time::MIDNIGHT)) - back * 86_400_000)?
        }
        'd' => dt.replace_time(Time::MIDNIGHT),
        'h' | 'H' => dt.replace_time(Time::from_hms(dt.hour(), 0, 0).ok()?),
        'm' => dt.replace_time(Time::from_hms(dt.hour(), dt.minute(), 0).ok()?),
        's' => dt.replace_time(Time::from_hms(dt.hour(), dt.minute(), dt.second()).ok()?),
        _ => return None,
    };
    let start_ms = from_dt(start);
    if !round_up {
        return Some(start_ms);
    }
    let next = match unit {
        'y' => from_dt(add_months(start, 12)?),
        'M' => from_dt(add_months(start, 1)?),
        'w' => start_ms + 7 * 86_400_000,
        'd' => start_ms + 86_400_000,
        'h' | 'H' => start_ms + 3_600_000,
        'm' => start_ms + 60_000,
        _ => start_ms + 1_000,
    };
    Some(next - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parses_strict_date_optional_time_forms() {
        assert_eq!(parse_date_str("1970-01-01"), Some(0));
        assert_eq!(parse_date_str("1970-01-02T00:00:00Z"), Some(86_400_000));
        assert_eq!(parse_date_str("1970-01-01T00:00:01.5Z"), Some(1_500));
        assert_eq!(parse_date_str("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_date_str("2024-02-30"), None);
        assert_eq!(parse_date_str("12345"), Some(12_345));
        assert_eq!(parse_date_str("not a date"), None);
    }

    #[test]
    fn test_date_math_adds_and_rounds() {
        let now = parse_date_str("2024-03-15T10:30:00Z").unwrap();
        assert_eq!(
            parse_date_math("now-1d", now, false).unwrap(),
            now - 86_400_000
        );
        assert_eq!(
            parse_date_math("now/d", now, false).unwrap(),
            parse_date_str("2024-03-15").unwrap()
        );
        assert_eq!(
            parse_date_math("now/d", now, true).unwrap(),
            parse_date_str("2024-03-16").unwrap() - 1
        );
        assert_eq!(
            parse_date_math("2024-01-31||+1M", now, false).unwrap(),
            parse_date_str("2024-02-29").unwrap()
        );
        assert!(parse_date_math("now-1x", now, false).is_err());
    }

    #[test]
    fn test_date_format_reads_numbers_with_its_first_epoch_part() {
        let f = DateFormat::parse("strict_date_optional_time||epoch_second").unwrap();
        assert_eq!(f.to_string(), "strict_date_optional_time||epoch_second");
        assert_eq!(f.parse_str("1420070400"), Some(1_420_070_400_000));
        assert_eq!(f.parse_str("-1.5"), Some(-1_500));
        assert_eq!(
            f.parse_str_rounding("1420070400", true),
            Some(1_420_070_400_999)
        );
        assert_eq!(f.parse_value(&serde_json::json!(2)), Some(2_000));
        assert_eq!(f.parse_str("1970-01-02"), Some(86_400_000));
        let seconds_only = DateFormat::parse("epoch_second").unwrap();
        assert_eq!(seconds_only.parse_str("1970-01-02"), None);
        let iso_only = DateFormat::parse("strict_date_optional_time").unwrap();
        assert_eq!(
            iso_only.parse_value(&serde_json::json!(1_420_070_400)),
            None
        );
        assert_eq!(DateFormat::DEFAULT.parse_str("12345"), Some(12_345));
        assert_eq!(
            DateFormat::DEFAULT.parse_str_rounding("12345", true),
            Some(12_345)
        );
        assert!(DateFormat::parse("epoch_second||").is_none());
        assert!(DateFormat::parse("yyyy-MM-dd").is_none());
    }

    #[test]
    fn test_format_millis_renders_utc_with_millis() {
        assert_eq!(format_millis(1_500), "1970-01-01T00:00:01.500Z");
    }
}
