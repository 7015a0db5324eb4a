//! Computed columns that aggregations read instead of a raw fast field.
//!
//! tantivy keeps JSON dates in nanoseconds and may store a `float` field whose values are all
//! whole as an i64 column. Aggregations want dates in milliseconds (OpenSearch's unit for keys,
//! bounds and metrics), calendar buckets (months, quarters, years) that no fixed interval can
//! express, and floats as floats. Each [`Derivation`] is registered under its own name in the
//! request's `ValueSourceRegistry`, and the tantivy request names that instead of the field.

use std::fmt;

use tantivy::SegmentReader;
use tantivy::aggregation::{ValueSource, ValueSourceProvider};
use tantivy::columnar::{Cardinality, Column, ColumnType, MonotonicallyMappableToU64, RowId};
use time::{Date, Month, OffsetDateTime};

/// Nanoseconds per millisecond: tantivy date columns hold nanoseconds.
const NANOS_PER_MILLI: i64 = 1_000_000;

/// A calendar unit of variable length, bucketed by its index since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CalendarUnit {
    /// Calendar months.
    Month,
    /// Calendar quarters (January, April, July, October).
    Quarter,
    /// Calendar years.
    Year,
}

impl CalendarUnit {
    fn name(self) -> &'static str {
        match self {
            CalendarUnit::Month => "month",
            CalendarUnit::Quarter => "quarter",
            CalendarUnit::Year => "year",
        }
    }

    fn months(self) -> i64 {
        match self {
            CalendarUnit::Month => 1,
            CalendarUnit::Quarter => 3,
            CalendarUnit::Year => 12,
        }
    }

    /// The index (units since 1970-01) of the unit holding `millis`, in UTC.
    pub(super) fn index_of(self, millis: i64) -> i64 {
        let secs = millis.div_euclid(1000);
        let Ok(dt) = OffsetDateTime::from_unix_timestamp(secs) else {
            return if millis < 0 {
                i64::MIN / 24
            } else {
                i64::MAX / 24
            };
        };
        let months = (i64::from(dt.year()) - 1970) * 12 + i64::from(u8::from(dt.month())) - 1;
        months.div_euclid(self.months())
    }

    /// The first millisecond of the unit with `index`, in UTC.
    pub(super) fn start_of(self, index: i64) -> i64 {
        let months = index.saturating_mul(self.months());
        let year = 1970 + months.div_euclid(12);
        let month = months.rem_euclid(12) as u8 + 1;
        let date = i32::try_from(year)
            .ok()
            .and_then(|y| Date::from_calendar_date(y, Month::try_from(month).ok()?, 1).ok());
        match date {
            Some(date) => (date.midnight().assume_utc().unix_timestamp_nanos() / 1_000_000) as i64,
            None => 0,
        }
    }
}

/// How a computed column derives its values from a fast field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Derivation {
    /// A date column as i64 epoch milliseconds.
    Millis,
    /// A date column as the i64 index of its calendar unit, after subtracting an offset.
    Calendar {
        unit: CalendarUnit,
        offset_millis: i64,
    },
    /// A numeric or boolean column as f64.
    Float,
    /// A numeric column as f64 encoded in an order-preserving i64, for `terms` keys: tantivy
    /// turns whole f64 keys into i64 keys and then orders keys of different types by type, so
    /// `20.0` would sort after `10.5`'s type; one key type keeps `_key` order and tie-breaks
    /// numeric. Decode with [`decode_ordered_float`].
    OrderedFloat,
}

/// Encodes an f64 as the i64 an [`Derivation::OrderedFloat`] column holds.
pub(super) fn encode_ordered_float(f: f64) -> i64 {
    // -0.0 and 0.0 are one key.
    let f = if f == 0.0 { 0.0 } else { f };
    i64::from_u64(f.to_u64())
}

/// Decodes a key of an [`Derivation::OrderedFloat`] column.
pub(super) fn decode_ordered_float(key: i64) -> f64 {
    f64::from_u64(key.to_u64())
}

/// The registry name of a computed column: the column name and a suffix no JSON path of the
/// mapping produces (`#`), so that it never shadows a real field.
pub(super) fn source_name(column: &str, derivation: Derivation) -> String {
    match derivation {
        Derivation::Millis => format!("{column}#millis"),
        Derivation::Calendar {
            unit,
            offset_millis,
        } => format!("{column}#{}@{offset_millis}", unit.name()),
        Derivation::Float => format!("{column}#f64"),
        Derivation::OrderedFloat => format!("{column}#ordered_f64"),
    }
}

/// Opens a [`DerivedSource`] per segment.
pub(super) struct DerivedProvider {
    column: String,
    derivation: Derivation,
}

impl DerivedProvider {
    pub(super) fn new(column: &str, derivation: Derivation) -> Self {
        DerivedProvider {
            column: column.to_string(),
            derivation,
        }
    }
}

impl ValueSourceProvider for DerivedProvider {
    fn for_segment(
        &self,
        reader: &SegmentReader,
        _allowed_column_types: Option<&[ColumnType]>,
    ) -> tantivy::Result<Option<Box<dyn ValueSource>>> {
        let wanted: &[ColumnType] = match self.derivation {
            Derivation::Millis | Derivation::Calendar { .. } => &[ColumnType::DateTime],
            Derivation::Float | Derivation::OrderedFloat => &[
                ColumnType::I64,
                ColumnType::U64,
                ColumnType::F64,
                ColumnType::Bool,
            ],
        };
        let Some((column, column_type)) = reader
            .fast_fields()
            .u64_lenient_for_type(Some(wanted), &self.column)?
        else {
            return Ok(None);
        };
        Ok(Some(Box::new(DerivedSource {
            column,
            column_type,
            derivation: self.derivation,
            as_f64: false,
        })))
    }
}

/// A fast-field column whose values are mapped by a [`Derivation`] as blocks are loaded.
///
/// Every derivation is monotonic (non-decreasing) in the column's value order, so the mapped
/// column bounds are the bounds of the mapped values (checked in [`ValueSource::bounds`]).
struct DerivedSource {
    column: Column<u64>,
    column_type: ColumnType,
    derivation: Derivation,
    /// Whether integer outputs are converted to f64 (`ValueSource::to_f64`).
    as_f64: bool,
}

impl fmt::Debug for DerivedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DerivedSource")
            .field("column_type", &self.column_type)
            .field("derivation", &self.derivation)
            .field("as_f64", &self.as_f64)
            .finish()
    }
}

impl DerivedSource {
    fn encode_i64(&self, value: i64) -> u64 {
        if self.as_f64 {
            (value as f64).to_u64()
        } else {
            value.to_u64()
        }
    }

    fn float(&self, raw: u64) -> f64 {
        match self.column_type {
            ColumnType::I64 => i64::from_u64(raw) as f64,
            ColumnType::F64 => f64::from_u64(raw),
            // u64 and bool (0/1) columns hold their value as is.
            _ => raw as f64,
        }
    }

    fn map(&self, raw: u64) -> u64 {
        match self.derivation {
            Derivation::Millis => self.encode_i64(i64::from_u64(raw).div_euclid(NANOS_PER_MILLI)),
            Derivation::Calendar {
                unit,
                offset_millis,
            } => {
                let millis = i64::from_u64(raw).div_euclid(NANOS_PER_MILLI);
                self.encode_i64(unit.index_of(millis.saturating_sub(offset_millis)))
            }
            Derivation::Float => self.float(raw).to_u64(),
            Derivation::OrderedFloat => encode_ordered_float(self.float(raw)).to_u64(),
        }
    }
}

impl ValueSource for DerivedSource {
    fn column_type(&self) -> ColumnType {
        if self.as_f64 || self.derivation == Derivation::Float {
            ColumnType::F64
        } else {
            ColumnType::I64
        }
    }

    fn load_block(
        &mut self,
        docs: &[tantivy::DocId],
        values: &mut Vec<u64>,
        docids: &mut Vec<tantivy::DocId>,
        row_ids: &mut Vec<RowId>,
    ) -> Cardinality {
        let mut physical = (&self.column, self.column_type);
        let cardinality = physical.load_block(docs, values, docids, row_ids);
        for value in values.iter_mut() {
            *value = self.map(*value);
        }
        cardinality
    }

    fn to_f64(self: Box<Self>) -> Box<dyn ValueSource> {
        match self.derivation {
            Derivation::OrderedFloat => Box::new(DerivedSource {
                derivation: Derivation::Float,
                ..*self
            }),
            _ => Box::new(DerivedSource {
                as_f64: true,
                ..*self
            }),
        }
    }

    fn bounds(&self) -> Option<(u64, u64)> {
        let (lo, hi) = (
            self.map(self.column.min_value()),
            self.map(self.column.max_value()),
        );
        // Monotonic derivations keep the order; an empty column may report bounds that are not.
        (lo <= hi).then_some((lo, hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::date::parse_date_str;

    #[test]
    fn test_calendar_index_round_trips_to_unit_start() {
        let ms = parse_date_str("2024-02-15T10:30:00Z").unwrap();
        let month = CalendarUnit::Month.index_of(ms);
        assert_eq!(
            CalendarUnit::Month.start_of(month),
            parse_date_str("2024-02-01").unwrap()
        );
        let quarter = CalendarUnit::Quarter.index_of(ms);
        assert_eq!(
            CalendarUnit::Quarter.start_of(quarter),
            parse_date_str("2024-01-01").unwrap()
        );
        let year = CalendarUnit::Year.index_of(ms);
        assert_eq!(
            CalendarUnit::Year.start_of(year),
            parse_date_str("2024-01-01").unwrap()
        );
        let before_epoch = parse_date_str("1969-12-31T23:00:00Z").unwrap();
        assert_eq!(CalendarUnit::Month.index_of(before_epoch), -1);
        assert_eq!(
            CalendarUnit::Month.start_of(-1),
            parse_date_str("1969-12-01").unwrap()
        );
    }

    #[test]
    fn test_ordered_float_encoding_keeps_order() {
        let values = [-1.5e300, -2.0, -0.5, 0.0, 0.5, 10.5, 20.0, 1e300];
        let encoded: Vec<i64> = values.iter().map(|f| encode_ordered_float(*f)).collect();
        assert!(encoded.windows(2).all(|w| w[0] < w[1]));
        for (f, e) in values.iter().zip(&encoded) {
            assert_eq!(decode_ordered_float(*e), *f);
        }
        assert_eq!(encode_ordered_float(-0.0), encode_ordered_float(0.0));
    }

    #[test]
    fn test_source_names_do_not_collide() {
        let a = source_name("_kw.ts", Derivation::Millis);
        let b = source_name(
            "_kw.ts",
            Derivation::Calendar {
                unit: CalendarUnit::Month,
                offset_millis: 0,
            },
        );
        let c = source_name(
            "_kw.ts",
            Derivation::Calendar {
                unit: CalendarUnit::Month,
                offset_millis: 5,
            },
        );
        assert!(a != b && b != c);
    }
}
