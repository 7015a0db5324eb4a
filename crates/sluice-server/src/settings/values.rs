//! Setting values: what kind of value each setting takes ([`Kind`]), a definition
//! ([`SettingDef`]), the parsed value ([`SettingValue`]) and [`parse_value`], which validates a
//! raw text against a definition with OpenSearch's messages.

use std::time::Duration;

use sluice_wire::{format_time_value_exact, java_double, parse_java_long, parse_time_value};

/// What a setting's value is, with its bounds.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A time value: a whole number with a unit (`nanos`, `micros`, `ms`, `s`, `m`, `h`,
    /// `d`), `0`, or `-1`. With `min` (OpenSearch `positiveTimeSetting` is `min: 0`) smaller
    /// values, `-1` included, are rejected; without it `-1` means "disabled".
    Time {
        /// Smallest accepted value.
        min: Option<Duration>,
    },
    /// A whole number in `min..=max` (OpenSearch `intSetting` / `longSetting`).
    Integer {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A floating-point number in `min..=max` (OpenSearch `doubleSetting`).
    Double {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
    /// `true` or `false`, nothing else.
    Bool,
    /// One of a fixed list of words, matched exactly.
    Enum(&'static [&'static str]),
}

/// A parsed setting value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SettingValue {
    /// A time value; `None` for a negative one (`-1`: disabled).
    Time(Option<Duration>),
    /// A whole number.
    Integer(i64),
    /// A floating-point number.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// One of the setting's allowed words.
    Enum(&'static str),
}

/// A check of one setting's parsed value beyond its [`Kind`] bounds, returning
/// OpenSearch's message on failure.
pub type ValueCheck = fn(key: &str, value: &SettingValue) -> Result<(), String>;

/// One registered dynamic setting.
#[derive(Debug)]
pub struct SettingDef {
    /// The key users write.
    pub key: &'static str,
    /// Its value kind and bounds.
    pub kind: Kind,
    /// The default, in the text form the API echoes.
    pub default: &'static str,
    /// An extra check of the parsed value, for settings whose rule or message the bounds do
    /// not express. For numbers it runs before the [`Kind`] bounds, so it can word them.
    pub check: Option<ValueCheck>,
    /// What the setting does, for operators.
    pub doc: &'static str,
}

/// Parses `raw` as a value of `def`, with OpenSearch's messages (extended with what is
/// accepted where OpenSearch's own message does not say).
pub fn parse_value(def: &SettingDef, raw: &str) -> Result<SettingValue, String> {
    let key = def.key;
    let value = match def.kind {
        Kind::Time { min } => {
            let value = parse_time_value(raw, key)
                .map_err(|e| e.to_string())?
                .duration_opt();
            if let Some(min) = min {
                // OpenSearch compares in whole milliseconds, truncated toward zero; `-1` is
                // below every bound.
                if value.is_none_or(|d| d.as_millis() < min.as_millis()) {
                    return Err(format!(
                        "failed to parse value [{raw}] for setting [{key}], must be >= [{}]",
                        format_time_value_exact(min)
                    ));
                }
            }
            SettingValue::Time(value)
        }
        Kind::Integer { min, max } => {
            let n: i64 = parse_java_long(raw).ok_or_else(|| {
                format!(
                    "Failed to parse value [{raw}] for setting [{key}]: expected a whole number from {min} to {max}"
                )
            })?;
            run_check_first(def, SettingValue::Integer(n))?;
            if n < min {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be >= {min}"
                ));
            }
            if n > max {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be <= {max}"
                ));
            }
            SettingValue::Integer(n)
        }
        Kind::Double { min, max } => {
            let x: f64 = raw.trim().parse().map_err(|_| {
                format!(
                    "Failed to parse value [{raw}] for setting [{key}]: expected a number from {} to {}",
                    java_double(min),
                    java_double(max)
                )
            })?;
            run_check_first(def, SettingValue::Double(x))?;
            if x < min {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be >= {}",
                    java_double(min)
                ));
            }
            if x > max {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] must be <= {}",
                    java_double(max)
                ));
            }
            SettingValue::Double(x)
        }
        Kind::Bool => match raw {
            "true" => SettingValue::Bool(true),
            "false" => SettingValue::Bool(false),
            _ => {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}] as only [true] or [false] are allowed."
                ));
            }
        },
        Kind::Enum(allowed) => match allowed.iter().find(|a| **a == raw) {
            Some(a) => SettingValue::Enum(a),
            None => {
                return Err(format!(
                    "Failed to parse value [{raw}] for setting [{key}]: expected one of [{}]",
                    allowed.join(", ")
                ));
            }
        },
    };
    if let Some(check) = def.check {
        check(key, &value)?;
    }
    Ok(value)
}

/// Runs `def.check` on a number before its [`Kind`] bounds, so a setting whose OpenSearch
/// message for an out-of-bounds value differs from the generic one (the WLM thresholds,
/// `node.workload_group.max_count`) words it itself.
fn run_check_first(def: &SettingDef, value: SettingValue) -> Result<(), String> {
    match def.check {
        Some(check) => check(def.key, &value),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_other_kinds_parse_for_the_settings_to_come() {
        let double = SettingDef {
            key: "x.ratio",
            kind: Kind::Double { min: 0.0, max: 0.9 },
            default: "0.8",
            check: None,
            doc: "test",
        };
        assert_eq!(parse_value(&double, "0.5"), Ok(SettingValue::Double(0.5)));
        assert_eq!(
            parse_value(&double, "0.95").expect_err("max"),
            "Failed to parse value [0.95] for setting [x.ratio] must be <= 0.9"
        );
        assert_eq!(
            parse_value(&double, "-1").expect_err("min"),
            "Failed to parse value [-1] for setting [x.ratio] must be >= 0.0"
        );
        let boolean = SettingDef {
            key: "x.flag",
            kind: Kind::Bool,
            default: "true",
            check: None,
            doc: "test",
        };
        assert_eq!(
            parse_value(&boolean, "false"),
            Ok(SettingValue::Bool(false))
        );
        assert!(parse_value(&boolean, "yes").is_err());
        let mode = SettingDef {
            key: "x.mode",
            kind: Kind::Enum(&["enabled", "disabled"]),
            default: "enabled",
            check: Some(|_, v| match v {
                SettingValue::Enum("disabled") => Err("no".to_string()),
                _ => Ok(()),
            }),
            doc: "test",
        };
        assert_eq!(
            parse_value(&mode, "enabled"),
            Ok(SettingValue::Enum("enabled"))
        );
        assert_eq!(parse_value(&mode, "disabled"), Err("no".to_string()));
        assert!(
            parse_value(&mode, "Enabled")
                .expect_err("case")
                .contains("[enabled, disabled]")
        );
    }
}
