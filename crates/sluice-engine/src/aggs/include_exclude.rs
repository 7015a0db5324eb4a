//! `include` and `exclude` of a `terms` aggregation, read and applied as OpenSearch does.
//!
//! OpenSearch accepts a regular expression (a string), a list of exact values (an array) or, for
//! `include` only, a partition (`{"partition": p, "num_partitions": n}`), and applies them by
//! field type (`Builder::terms_filter` in `aggs/request.rs`):
//!
//! - `keyword`: expressions and lists go to tantivy, which matches them against the term
//!   dictionary; a partition is a [`TermsValuesProvider`] over the term ordinals.
//! - `ip`: lists are read as addresses and sent to tantivy in the indexed (hex) form; a regular
//!   expression is OpenSearch's 500 `aggregation_execution_exception`.
//! - numbers, dates and booleans: a regular expression is refused the same way; lists are read in
//!   the field's terms (a date by its format or date math, a long exactly) and applied, like
//!   partitions, by a [`TermsValuesProvider`] computed column that drops the values the clause
//!   rejects as blocks are loaded. Such a column also applies `missing` itself, before the
//!   filter, so that a document whose values are all rejected does not count as missing (OpenSearch
//!   filters the missing value like any other) and a long `missing` stays exact (tantivy reads
//!   it through an `f64`).
//!
//! Partitions hash as OpenSearch's do, so a term falls in the same partition on both: a string
//! (for `ip`, its 16-byte form) by `murmurhash3_x86_32` with seed 31, a number by HPPC's
//! `BitMixer.mix64` of its long (a double by its sortable long bits), then `floorMod` by
//! `num_partitions`.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tantivy::SegmentReader;
use tantivy::aggregation::{ValueSource, ValueSourceDictionary, ValueSourceProvider};
use tantivy::columnar::{
    Cardinality, Column, ColumnType, MonotonicallyMappableToU64, RowId, StrColumn,
};

use super::sources::{Derivation, DerivedProvider, decode_ordered_float};
use crate::error::{EngineError, ErrorCode, Result};

/// OpenSearch's seed for hashing strings into partitions (`IncludeExclude`).
const HASH_PARTITIONING_SEED: u32 = 31;

/// One `include` or `exclude` clause as the request gives it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Clause {
    /// A regular expression over the whole term.
    Regex(String),
    /// Exact values, as the request's text.
    Values(Vec<String>),
    /// `{"partition": p, "num_partitions": n}` (include only), with `0 <= p < n`.
    Partition { partition: u32, num: u32 },
}

impl Clause {
    fn method(&self) -> &'static str {
        match self {
            Clause::Regex(_) => "regex",
            _ => "set",
        }
    }
}

/// Reads an `include` value as OpenSearch's `IncludeExclude.parseInclude` does.
pub(super) fn parse_include(v: &Value) -> Result<Clause> {
    match v {
        Value::Object(obj) => {
            let mut partition = None;
            let mut num = None;
            for (key, value) in obj {
                let slot = match key.as_str() {
                    "partition" => &mut partition,
                    "num_partitions" => &mut num,
                    other => {
                        return Err(EngineError::new(
                            ErrorCode::Parse,
                            format!("Unknown parameter in Include/Exclude clause: {other}"),
                        ));
                    }
                };
                *slot = Some(int_value(key, value)?);
            }
            let partition = partition.ok_or_else(|| {
                EngineError::illegal_argument(
                    "Missing [partition] parameter for partition-based include",
                )
            })?;
            let num = num.ok_or_else(|| {
                EngineError::illegal_argument(
                    "Missing [num_partitions] parameter for partition-based include",
                )
            })?;
            if partition < 0 || partition >= num {
                return Err(EngineError::illegal_argument(format!(
                    "Partition must be >=0 and < numPartition which is {num}"
                )));
            }
            // Both fit: 0 <= partition < num <= i32::MAX.
            Ok(Clause::Partition {
                partition: partition as u32,
                num: num as u32,
            })
        }
        _ => parse_common(v, "include"),
    }
}

/// Reads an `exclude` value as OpenSearch's `IncludeExclude.parseExclude` does.
pub(super) fn parse_exclude(v: &Value) -> Result<Clause> {
    parse_common(v, "exclude")
}

fn parse_common(v: &Value, what: &str) -> Result<Clause> {
    match v {
        Value::String(s) => Ok(Clause::Regex(s.clone())),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                _ => Err(EngineError::new(
                    ErrorCode::Parse,
                    "Array elements in include/exclude clauses should be string values",
                )),
            })
            .collect::<Result<Vec<_>>>()
            .map(Clause::Values),
        other => Err(EngineError::illegal_argument(format!(
            "Unrecognized token for an {what} [{}]",
            sluice_wire::json::token_name(other)
        ))),
    }
}

/// An int parameter of a partition, as Jackson's `intValue` reads it (numbers and numeric text).
fn int_value(key: &str, v: &Value) -> Result<i64> {
    let n = match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    n.filter(|n| i32::try_from(*n).is_ok()).ok_or_else(|| {
        EngineError::illegal_argument(format!(
            "[{key}] of a partition-based include must be an integer, got [{v}]"
        ))
    })
}

/// Combines the two clauses as OpenSearch's `IncludeExclude.merge` does.
///
/// # Errors
///
/// `illegal_argument_exception` for an `exclude` beside a partition, or a regular expression
/// beside a list.
pub(super) fn merge(include: Option<Clause>, exclude: Option<Clause>) -> Result<IncludeExclude> {
    if let (Some(inc), Some(exc)) = (&include, &exclude) {
        if matches!(inc, Clause::Partition { .. }) {
            return Err(EngineError::illegal_argument(
                "Cannot specify any excludes when using a partition-based include",
            ));
        }
        if inc.method() != exc.method() {
            return Err(EngineError::illegal_argument(format!(
                "Cannot mix a {}-based include with a {}-based method",
                inc.method(),
                exc.method()
            )));
        }
    }
    Ok(IncludeExclude { include, exclude })
}

/// The merged `include` and `exclude` of one `terms` aggregation.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct IncludeExclude {
    pub(super) include: Option<Clause>,
    pub(super) exclude: Option<Clause>,
}

impl IncludeExclude {
    /// Whether either clause is a regular expression.
    pub(super) fn is_regex(&self) -> bool {
        matches!(self.include, Some(Clause::Regex(_)))
            || matches!(self.exclude, Some(Clause::Regex(_)))
    }

    /// The partition of the include, if it is one.
    pub(super) fn partition(&self) -> Option<(u32, u32)> {
        match self.include {
            Some(Clause::Partition { partition, num }) => Some((partition, num)),
            _ => None,
        }
    }

    /// Whether there is anything to apply.
    pub(super) fn is_empty(&self) -> bool {
        self.include.is_none() && self.exclude.is_none()
    }
}

/// OpenSearch's refusal of a regular expression on a field whose terms are not plain strings:
/// `numeric` for numbers, dates and booleans, otherwise (ip) the general form.
pub(super) fn regex_refused(agg: &str, numeric: bool) -> EngineError {
    let tail = if numeric {
        "Use an array of numeric values for include/exclude clauses used to filter numeric fields"
    } else {
        "Use an array of values for include/exclude clauses"
    };
    EngineError::new(
        ErrorCode::AggregationExecution,
        format!(
            "Aggregation [{agg}] cannot support regular expression style include/exclude settings as they can only be applied to string fields. {tail}"
        ),
    )
}

/// How the values of a [`TermsValuesProvider`] column are keyed, for partition hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    /// Integers as i64 (also dates, as epoch milliseconds).
    Long,
    /// Floats, as the order-preserving i64 of [`Derivation::OrderedFloat`].
    OrderedFloat,
    /// Booleans as 0 and 1.
    Boolean,
    /// Keyword terms (term ordinals of the dictionary).
    Keyword,
    /// IP terms: the dictionary holds the 16-byte form in hex.
    Ip,
}

/// The values a [`TermsValuesProvider`] column keeps, in the column's value encoding.
#[derive(Debug, Clone)]
pub(super) enum ValueFilter {
    /// Values in `include` (when given) and not in `exclude`.
    Set {
        include: Option<HashSet<u64>>,
        exclude: HashSet<u64>,
    },
    /// Values whose OpenSearch partition is `partition` of `num`.
    Partition { partition: u32, num: u32 },
}

/// OpenSearch's (HPPC's) `BitMixer.mix64`.
pub(super) fn mix64(z: i64) -> i64 {
    let mut z = z as u64;
    z = (z ^ (z >> 32)).wrapping_mul(0x4cd6_944c_5cc2_0b6d);
    z = (z ^ (z >> 29)).wrapping_mul(0xfc12_c5b1_9d32_59e9);
    (z ^ (z >> 32)) as i64
}

/// Lucene's `NumericUtils.doubleToSortableLong`.
pub(super) fn double_to_sortable_long(f: f64) -> i64 {
    // Java's doubleToLongBits folds every NaN into one.
    let bits = if f.is_nan() {
        0x7ff8_0000_0000_0000i64
    } else {
        f.to_bits() as i64
    };
    bits ^ ((bits >> 63) & 0x7fff_ffff_ffff_ffff)
}

/// Lucene's `StringHelper.murmurhash3_x86_32`.
pub(super) fn murmurhash3_x86_32(data: &[u8], seed: u32) -> i32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h1 = seed;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k1 = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k1 = k1.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    let mut k1 = 0u32;
    if tail.len() >= 3 {
        k1 ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        k1 ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        k1 ^= u32::from(tail[0]);
        k1 = k1.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h1 ^= k1;
    }
    h1 ^= data.len() as u32;
    h1 ^= h1 >> 16;
    h1 = h1.wrapping_mul(0x85eb_ca6b);
    h1 ^= h1 >> 13;
    h1 = h1.wrapping_mul(0xc2b2_ae35);
    h1 ^= h1 >> 16;
    h1 as i32
}

/// Whether a string term falls in `partition` of `num`, as OpenSearch's
/// `PartitionedOrdinalsFilter` decides.
fn string_in_partition(term: &[u8], partition: u32, num: u32) -> bool {
    let hash = murmurhash3_x86_32(term, HASH_PARTITIONING_SEED);
    hash.rem_euclid(num as i32) == partition as i32
}

/// Whether a long falls in `partition` of `num`, as OpenSearch's `PartitionedLongFilter`
/// decides.
fn long_in_partition(value: i64, partition: u32, num: u32) -> bool {
    mix64(value).rem_euclid(i64::from(num)) == i64::from(partition)
}

impl ValueFilter {
    fn accepts(&self, value: u64, keys: KeyKind) -> bool {
        match self {
            ValueFilter::Set { include, exclude } => {
                include.as_ref().is_none_or(|i| i.contains(&value)) && !exclude.contains(&value)
            }
            ValueFilter::Partition { partition, num } => {
                let long = match keys {
                    KeyKind::Long => i64::from_u64(value),
                    KeyKind::OrderedFloat => {
                        double_to_sortable_long(decode_ordered_float(i64::from_u64(value)))
                    }
                    // Booleans and (never used here) ordinals: the raw value.
                    _ => value as i64,
                };
                long_in_partition(long, *partition, *num)
            }
        }
    }
}

/// A `terms` aggregation's column with its `include`/`exclude` (and `missing`) applied as the
/// values are loaded; registered under its own name in the request's value sources.
pub(super) struct TermsValuesProvider {
    /// The fast-field column.
    pub(super) column: String,
    /// The derivation the terms aggregation reads the column through, if any.
    pub(super) derivation: Option<Derivation>,
    /// How values are keyed.
    pub(super) keys: KeyKind,
    /// The values kept; `None` keeps all.
    pub(super) filter: Option<ValueFilter>,
    /// The value of a document without one, in the column's encoding (numeric kinds only).
    pub(super) missing: Option<u64>,
}

impl ValueSourceProvider for TermsValuesProvider {
    fn for_segment(
        &self,
        reader: &SegmentReader,
        allowed_column_types: Option<&[ColumnType]>,
    ) -> tantivy::Result<Option<Box<dyn ValueSource>>> {
        if let KeyKind::Keyword | KeyKind::Ip = self.keys {
            let Some(column) = reader.fast_fields().str(&self.column)? else {
                return Ok(None);
            };
            let (partition, num) = match self.filter {
                Some(ValueFilter::Partition { partition, num }) => (partition, num),
                // String lists and expressions go to tantivy; nothing to do here.
                _ => return Ok(Some(Box::new(column))),
            };
            let mut accepted = vec![false; column.num_terms()];
            let mut stream = column.dictionary().stream()?;
            let mut raw = Vec::with_capacity(16);
            while stream.advance() {
                let term = stream.key();
                let bytes = match self.keys {
                    KeyKind::Ip => {
                        raw.clear();
                        raw.extend(decode_hex(term));
                        &raw[..]
                    }
                    _ => term,
                };
                if let Some(slot) = accepted.get_mut(stream.term_ord() as usize) {
                    *slot = string_in_partition(bytes, partition, num);
                }
            }
            return Ok(Some(Box::new(PartitionedStrSource { column, accepted })));
        }
        let inner: Box<dyn ValueSource> = match self.derivation {
            Some(d) => match DerivedProvider::new(&self.column, d)
                .for_segment(reader, allowed_column_types)?
            {
                Some(s) => s,
                None => return self.no_column(),
            },
            None => {
                let wanted: &[ColumnType] = match self.keys {
                    KeyKind::Boolean => &[ColumnType::Bool],
                    _ => &[ColumnType::I64, ColumnType::U64],
                };
                match reader
                    .fast_fields()
                    .u64_lenient_for_type(Some(wanted), &self.column)?
                {
                    Some((column, ty)) => Box::new(NormalizedColumn { column, ty }),
                    None => return self.no_column(),
                }
            }
        };
        Ok(Some(Box::new(FilteredSource {
            inner,
            keys: self.keys,
            filter: self.filter.clone(),
            missing: self.missing,
            scratch_values: Vec::new(),
            scratch_docs: Vec::new(),
        })))
    }
}

impl TermsValuesProvider {
    /// A segment without the column: every document is missing, so with a `missing` value the
    /// segment still has one value per document.
    fn no_column(&self) -> tantivy::Result<Option<Box<dyn ValueSource>>> {
        Ok(self.missing.map(|missing| {
            Box::new(FilteredSource {
                inner: Box::new(NoValues(self.column_type())),
                keys: self.keys,
                filter: self.filter.clone(),
                missing: Some(missing),
                scratch_values: Vec::new(),
                scratch_docs: Vec::new(),
            }) as Box<dyn ValueSource>
        }))
    }

    fn column_type(&self) -> ColumnType {
        match self.keys {
            KeyKind::Boolean => ColumnType::Bool,
            _ => ColumnType::I64,
        }
    }
}

/// Decodes the hex form of an indexed address into its 16 bytes (nothing for anything else).
fn decode_hex(term: &[u8]) -> Vec<u8> {
    std::str::from_utf8(term)
        .ok()
        .and_then(|s| u128::from_str_radix(s, 16).ok())
        .map(|bits| bits.to_be_bytes().to_vec())
        .unwrap_or_default()
}

/// A segment's column of a kind with no values.
#[derive(Debug)]
struct NoValues(ColumnType);

impl ValueSource for NoValues {
    fn column_type(&self) -> ColumnType {
        self.0
    }

    fn load_block(
        &mut self,
        _docs: &[tantivy::DocId],
        values: &mut Vec<u64>,
        docids: &mut Vec<tantivy::DocId>,
        _row_ids: &mut Vec<RowId>,
    ) -> Cardinality {
        values.clear();
        docids.clear();
        Cardinality::Optional
    }

    fn to_f64(self: Box<Self>) -> Box<dyn ValueSource> {
        self
    }
}

/// A physical integer or boolean column whose values come out in the `i64` encoding (a `u64`
/// column, which tantivy may build for a JSON path, is converted).
struct NormalizedColumn {
    column: Column<u64>,
    ty: ColumnType,
}

impl fmt::Debug for NormalizedColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NormalizedColumn")
            .field("ty", &self.ty)
            .finish()
    }
}

impl ValueSource for NormalizedColumn {
    fn column_type(&self) -> ColumnType {
        match self.ty {
            ColumnType::Bool => ColumnType::Bool,
            _ => ColumnType::I64,
        }
    }

    fn load_block(
        &mut self,
        docs: &[tantivy::DocId],
        values: &mut Vec<u64>,
        docids: &mut Vec<tantivy::DocId>,
        row_ids: &mut Vec<RowId>,
    ) -> Cardinality {
        let cardinality = (&self.column, self.ty).load_block(docs, values, docids, row_ids);
        if self.ty == ColumnType::U64 {
            for v in values.iter_mut() {
                *v = i64::try_from(*v).unwrap_or(i64::MAX).to_u64();
            }
        }
        cardinality
    }

    fn to_f64(self: Box<Self>) -> Box<dyn ValueSource> {
        self
    }
}

/// An inner source with `missing` then the filter applied to each loaded block.
///
/// # Invariants
///
/// After `load_block`, `values` and `docids` have the same length and `docids` is sorted (the
/// inner source's order, with missing documents merged in place); checked by `debug_assert!`
/// and by `test_filtered_source_merges_missing_and_filters`.
struct FilteredSource {
    inner: Box<dyn ValueSource>,
    keys: KeyKind,
    filter: Option<ValueFilter>,
    missing: Option<u64>,
    scratch_values: Vec<u64>,
    scratch_docs: Vec<tantivy::DocId>,
}

impl fmt::Debug for FilteredSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilteredSource")
            .field("inner", &self.inner)
            .field("keys", &self.keys)
            .field("missing", &self.missing)
            .finish()
    }
}

impl ValueSource for FilteredSource {
    fn column_type(&self) -> ColumnType {
        self.inner.column_type()
    }

    fn load_block(
        &mut self,
        docs: &[tantivy::DocId],
        values: &mut Vec<u64>,
        docids: &mut Vec<tantivy::DocId>,
        row_ids: &mut Vec<RowId>,
    ) -> Cardinality {
        let cardinality = self.inner.load_block(docs, values, docids, row_ids);
        if cardinality.is_full() {
            docids.clear();
            docids.extend_from_slice(docs);
        }
        if let Some(missing) = self.missing
            && !cardinality.is_full()
        {
            self.scratch_values.clear();
            self.scratch_docs.clear();
            let mut at = 0;
            for &doc in docs {
                let start = at;
                while at < docids.len() && docids[at] == doc {
                    self.scratch_docs.push(doc);
                    self.scratch_values.push(values[at]);
                    at += 1;
                }
                if at == start {
                    self.scratch_docs.push(doc);
                    self.scratch_values.push(missing);
                }
            }
            std::mem::swap(values, &mut self.scratch_values);
            std::mem::swap(docids, &mut self.scratch_docs);
        }
        if let Some(filter) = &self.filter {
            let mut kept = 0;
            for i in 0..values.len() {
                if filter.accepts(values[i], self.keys) {
                    values[kept] = values[i];
                    docids[kept] = docids[i];
                    kept += 1;
                }
            }
            values.truncate(kept);
            docids.truncate(kept);
        }
        debug_assert_eq!(values.len(), docids.len());
        debug_assert!(docids.windows(2).all(|w| w[0] <= w[1]));
        Cardinality::Multivalued
    }

    fn to_f64(self: Box<Self>) -> Box<dyn ValueSource> {
        self
    }
}

/// A keyword or ip column keeping only the term ordinals of one partition.
///
/// It shows tantivy its dictionary and physical column (term ordinals stay sorted with the
/// terms, so `_key` order works); the request also carries an empty `exclude`, which makes
/// tantivy build its allowed-ordinals set and so keeps it off the fast path that would read the
/// physical column directly.
struct PartitionedStrSource {
    column: StrColumn,
    /// Whether each term ordinal is in the partition.
    accepted: Vec<bool>,
}

impl fmt::Debug for PartitionedStrSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionedStrSource")
            .field("num_terms", &self.accepted.len())
            .finish()
    }
}

impl ValueSource for PartitionedStrSource {
    fn column_type(&self) -> ColumnType {
        ColumnType::Str
    }

    fn load_block(
        &mut self,
        docs: &[tantivy::DocId],
        values: &mut Vec<u64>,
        docids: &mut Vec<tantivy::DocId>,
        row_ids: &mut Vec<RowId>,
    ) -> Cardinality {
        let cardinality =
            (self.column.ords(), ColumnType::Str).load_block(docs, values, docids, row_ids);
        if cardinality.is_full() {
            docids.clear();
            docids.extend_from_slice(docs);
        }
        let mut kept = 0;
        for i in 0..values.len() {
            if self
                .accepted
                .get(values[i] as usize)
                .copied()
                .unwrap_or(false)
            {
                values[kept] = values[i];
                docids[kept] = docids[i];
                kept += 1;
            }
        }
        values.truncate(kept);
        docids.truncate(kept);
        Cardinality::Multivalued
    }

    fn to_f64(self: Box<Self>) -> Box<dyn ValueSource> {
        self
    }

    fn as_physical_column(&self) -> Option<&Column<u64>> {
        Some(self.column.ords())
    }

    fn as_physical_str_column(&self) -> Option<&StrColumn> {
        Some(&self.column)
    }

    fn term_dictionary(&self) -> Option<&dyn ValueSourceDictionary> {
        Some(self.column.dictionary())
    }
}

/// Wraps a provider for registration.
pub(super) fn provider(p: TermsValuesProvider) -> Arc<dyn ValueSourceProvider> {
    Arc::new(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_murmurhash3_matches_lucene() {
        // Reference values of the standard MurmurHash3_x86_32 (Lucene's StringHelper).
        assert_eq!(murmurhash3_x86_32(b"", 0), 0);
        assert_eq!(murmurhash3_x86_32(b"", 1) as u32, 0x514e_28b7);
        assert_eq!(murmurhash3_x86_32(b"hello", 0) as u32, 0x248b_fa47);
        assert_eq!(
            murmurhash3_x86_32(b"Hello, world!", 1234) as u32,
            0xfaf6_cdb3
        );
    }

    #[test]
    fn test_mix64_and_sortable_long_match_hppc_and_lucene() {
        assert_eq!(mix64(0), 0);
        // Sortable longs keep the order of doubles.
        let values = [-1e300, -2.5, -0.0, 0.0, 1.5, 1e300];
        let sortable: Vec<i64> = values.iter().map(|f| double_to_sortable_long(*f)).collect();
        assert!(sortable.windows(2).all(|w| w[0] <= w[1]), "{sortable:?}");
        assert_eq!(double_to_sortable_long(1.5), 1.5f64.to_bits() as i64);
    }

    #[test]
    fn test_partitions_split_values_disjointly_and_completely() {
        for v in -50i64..50 {
            let hits = (0..4).filter(|p| long_in_partition(v, *p, 4)).count();
            assert_eq!(hits, 1, "{v}");
        }
        for t in ["a", "b", "hello", "10.0.0.1"] {
            let hits = (0..3)
                .filter(|p| string_in_partition(t.as_bytes(), *p, 3))
                .count();
            assert_eq!(hits, 1, "{t}");
        }
    }

    #[test]
    fn test_parse_and_merge_follow_opensearch() {
        assert_eq!(
            parse_include(&json!({"partition": 1, "num_partitions": 3})).unwrap(),
            Clause::Partition {
                partition: 1,
                num: 3
            }
        );
        let e = parse_include(&json!({"partition": 3, "num_partitions": 3})).unwrap_err();
        assert_eq!(
            e.reason,
            "Partition must be >=0 and < numPartition which is 3"
        );
        let e = parse_include(&json!({"num_partitions": 3})).unwrap_err();
        assert_eq!(
            e.reason,
            "Missing [partition] parameter for partition-based include"
        );
        let e = parse_include(&json!({"p": 3})).unwrap_err();
        assert_eq!(e.code, ErrorCode::Parse);
        assert_eq!(
            parse_include(&json!(["a", 1, true])).unwrap(),
            Clause::Values(vec!["a".into(), "1".into(), "true".into()])
        );
        let e = parse_exclude(&json!({"partition": 0})).unwrap_err();
        assert_eq!(e.reason, "Unrecognized token for an exclude [START_OBJECT]");
        let e = merge(
            Some(Clause::Regex("a.*".into())),
            Some(Clause::Values(vec!["b".into()])),
        )
        .unwrap_err();
        assert_eq!(
            e.reason,
            "Cannot mix a regex-based include with a set-based method"
        );
        let e = merge(
            Some(Clause::Partition {
                partition: 0,
                num: 2,
            }),
            Some(Clause::Values(vec![])),
        )
        .unwrap_err();
        assert_eq!(
            e.reason,
            "Cannot specify any excludes when using a partition-based include"
        );
    }

    #[derive(Debug)]
    struct Fixed(Vec<(u32, u64)>);

    impl ValueSource for Fixed {
        fn column_type(&self) -> ColumnType {
            ColumnType::I64
        }
        fn load_block(
            &mut self,
            docs: &[tantivy::DocId],
            values: &mut Vec<u64>,
            docids: &mut Vec<tantivy::DocId>,
            _row_ids: &mut Vec<RowId>,
        ) -> Cardinality {
            values.clear();
            docids.clear();
            for (d, v) in &self.0 {
                if docs.contains(d) {
                    docids.push(*d);
                    values.push(*v);
                }
            }
            Cardinality::Multivalued
        }
        fn to_f64(self: Box<Self>) -> Box<dyn ValueSource> {
            self
        }
    }

    #[test]
    fn test_filtered_source_merges_missing_and_filters() {
        let enc = |v: i64| v.to_u64();
        let mut source = FilteredSource {
            inner: Box::new(Fixed(vec![(1, enc(5)), (1, enc(6)), (3, enc(6))])),
            keys: KeyKind::Long,
            filter: Some(ValueFilter::Set {
                include: None,
                exclude: [enc(6)].into_iter().collect(),
            }),
            missing: Some(enc(7)),
            scratch_values: Vec::new(),
            scratch_docs: Vec::new(),
        };
        let (mut values, mut docids, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        source.load_block(&[0, 1, 2, 3], &mut values, &mut docids, &mut rows);
        // Doc 0 and 2 are missing (7); doc 1 keeps 5; doc 3's only value is excluded and it is
        // not counted as missing.
        assert_eq!(docids, vec![0, 1, 2]);
        assert_eq!(values, vec![enc(7), enc(5), enc(7)]);
    }
}
