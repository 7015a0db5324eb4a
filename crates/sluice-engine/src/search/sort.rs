//! Sorting: the sort specs of a request, the values hits sort by and the field readers that
//! produce them, the order of candidates with its final tie-break, and the `search_after`
//! cursor (scroll continuations reuse it).

use std::cmp::Ordering;

use serde_json::Value;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocId, DocSet, Score, SegmentReader, TERMINATED};

use crate::error::{EngineError, Result};
use crate::mapping::FieldType;

/// The order of one sort key.
#[derive(Debug, Clone, PartialEq)]
pub enum SortField {
    /// By relevance score.
    Score,
    /// By index order.
    Doc,
    /// By document id, as a string: OpenSearch 2.x sorts on `_id` by default
    /// (`indices.id_field_data.enabled` is true), and `_id` is the usual `search_after`
    /// tie-breaker.
    Id,
    /// By a field's value.
    Field(String),
}

/// One sort key.
#[derive(Debug, Clone, PartialEq)]
pub struct SortSpec {
    /// What to sort on.
    pub field: SortField,
    /// Descending?
    pub desc: bool,
    /// Missing values first instead of last?
    pub missing_first: bool,
    /// Whether `unmapped_type` was given: an index without the field then sorts all its hits
    /// as missing instead of failing.
    pub unmapped_ok: bool,
}

/// A value a hit is sorted by.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum SortValue {
    Missing,
    Num(f64),
    /// A long or a date (epoch millis), kept exact: an `f64` rounds above 2^53.
    Int(i64),
    Str(String),
}

/// Compares a long with a double exactly: by value, and where the double rounds to the same
/// value, by the long against the double's integer.
fn cmp_int_num(a: i64, b: f64) -> Ordering {
    match (a as f64).total_cmp(&b) {
        Ordering::Equal if b.fract() == 0.0 && b.abs() < 9.3e18 => a.cmp(&(b as i64)),
        o => o,
    }
}

impl SortValue {
    pub(super) fn cmp_present(&self, other: &SortValue) -> Ordering {
        match (self, other) {
            (SortValue::Num(a), SortValue::Num(b)) => a.total_cmp(b),
            (SortValue::Int(a), SortValue::Int(b)) => a.cmp(b),
            (SortValue::Int(a), SortValue::Num(b)) => cmp_int_num(*a, *b),
            (SortValue::Num(a), SortValue::Int(b)) => cmp_int_num(*b, *a).reverse(),
            (SortValue::Str(a), SortValue::Str(b)) => a.cmp(b),
            (SortValue::Num(_) | SortValue::Int(_), SortValue::Str(_)) => Ordering::Less,
            (SortValue::Str(_), SortValue::Num(_) | SortValue::Int(_)) => Ordering::Greater,
            _ => Ordering::Equal,
        }
    }
}

/// One candidate hit: its sort key and where it lives. The last hit of a scroll page is kept as
/// the cursor the next page starts after.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(super) keys: Vec<SortValue>,
    pub(super) score: Score,
    /// (index position, sequence number, segment, doc): the final tie-break, ascending.
    ///
    /// Lucene breaks ties by doc id, which is indexing order; tantivy's segments come in no
    /// particular order (and several indexing threads share one refresh's documents between
    /// segments), so the document's sequence number stands for indexing order. It is
    /// `u64::MAX` in indices whose `_seq_no` is not a fast field (created before it was), which
    /// then fall back to segment and doc order.
    pub(super) at: (usize, u64, u32, DocId),
}

/// Compares candidates in output order (best first) under a sort spec.
pub(super) fn cmp_candidates(specs: &[SortSpec], a: &Candidate, b: &Candidate) -> Ordering {
    for (i, spec) in specs.iter().enumerate() {
        let (x, y) = (&a.keys[i], &b.keys[i]);
        let ord = match (x, y) {
            (SortValue::Missing, SortValue::Missing) => Ordering::Equal,
            (SortValue::Missing, _) => {
                if spec.missing_first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (_, SortValue::Missing) => {
                if spec.missing_first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            _ => {
                let o = x.cmp_present(y);
                if spec.desc { o.reverse() } else { o }
            }
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.at.cmp(&b.at)
}

/// A heap entry ordered so that the heap's top is the worst kept candidate.
pub(super) struct HeapEntry<'s> {
    pub(super) c: Candidate,
    pub(super) specs: &'s [SortSpec],
}

impl PartialEq for HeapEntry<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for HeapEntry<'_> {}
impl PartialOrd for HeapEntry<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapEntry<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_candidates(self.specs, &self.c, &other.c)
    }
}

/// Turns a request's `search_after` values into a cursor that every hit with the same sort
/// values sorts before (OpenSearch's `FieldDoc` with doc `Integer.MAX_VALUE`), checked as
/// OpenSearch checks it on a shard; `None` without `search_after`.
///
/// `column_type` gives the mapped type of the `i`-th sort field (`None` where no index maps
/// it); `fail` turns the reason of a refusal into the error returned.
pub(super) fn search_after_cursor(
    values: Option<&[Value]>,
    from: u64,
    sort: &[SortSpec],
    column_type: impl Fn(usize) -> Option<FieldType>,
    fail: impl Fn(String) -> EngineError,
) -> Result<Option<Candidate>> {
    let Some(values) = values else {
        return Ok(None);
    };
    if from > 0 {
        return Err(fail(
            "`from` parameter must be set to 0 when `search_after` is used.".into(),
        ));
    }
    // OpenSearch has no sort to page on when the sort is the default, by score descending.
    let by_score_only = match sort {
        [] => true,
        [only] => only.field == SortField::Score && only.desc,
        _ => false,
    };
    if by_score_only {
        return Err(fail("Sort must contain at least one field.".into()));
    }
    if values.len() != sort.len() {
        return Err(fail(format!(
            "search_after has {} value(s) but sort has {}.",
            values.len(),
            sort.len()
        )));
    }
    let mut keys = Vec::with_capacity(values.len());
    for (i, (spec, v)) in sort.iter().zip(values).enumerate() {
        let ty = column_type(i);
        let key = after_value(spec, ty, v).ok_or_else(|| {
            let name = match &spec.field {
                SortField::Score => "_score",
                SortField::Doc => "_doc",
                SortField::Id => "_id",
                SortField::Field(f) => f.as_str(),
            };
            fail(format!(
                "Failed to parse search_after value for field [{name}]."
            ))
        })?;
        keys.push(key);
    }
    Ok(Some(Candidate {
        keys,
        score: 0.0,
        at: (usize::MAX, u64::MAX, u32::MAX, DocId::MAX),
    }))
}

/// One `search_after` value as the sort key it stands for; `None` when it cannot be one.
fn after_value(spec: &SortSpec, ty: Option<FieldType>, v: &Value) -> Option<SortValue> {
    let number = |v: &Value| crate::mapping::coerce_float(v).map(SortValue::Num);
    if v.is_null() {
        return Some(SortValue::Missing);
    }
    match (&spec.field, ty) {
        (SortField::Score | SortField::Doc, _) => number(v),
        (SortField::Id, _) => match v {
            Value::String(s) => Some(SortValue::Str(s.clone())),
            Value::Number(n) => Some(SortValue::Str(n.to_string())),
            _ => None,
        },
        (SortField::Field(_), Some(FieldType::Date)) => {
            crate::date::parse_date_value(v).map(SortValue::Int)
        }
        (SortField::Field(_), Some(FieldType::Boolean)) => match v {
            Value::Bool(b) => Some(SortValue::Num(f64::from(u8::from(*b)))),
            Value::String(s) if s == "true" || s == "false" => {
                Some(SortValue::Num(f64::from(u8::from(s == "true"))))
            }
            _ => number(v),
        },
        (SortField::Field(_), Some(t)) if t.is_integer() => match v {
            Value::Number(n) if n.is_i64() => n.as_i64().map(SortValue::Int),
            Value::String(s) if s.parse::<i64>().is_ok() => s.parse().ok().map(SortValue::Int),
            _ => number(v),
        },
        (SortField::Field(_), Some(t)) if t.is_numeric() => number(v),
        // Addresses sort by their encoded form; the cursor holds an address as rendered.
        (SortField::Field(_), Some(FieldType::Ip)) => match v {
            Value::String(s) => crate::ip::encode_text(s).ok().map(SortValue::Str),
            _ => None,
        },
        (SortField::Field(_), Some(_)) => match v {
            Value::String(s) => Some(SortValue::Str(s.clone())),
            Value::Number(n) => Some(SortValue::Str(n.to_string())),
            Value::Bool(b) => Some(SortValue::Str(b.to_string())),
            _ => None,
        },
        // Unmapped in every index: every hit sorts as missing whatever the value.
        (SortField::Field(_), None) => match v {
            Value::String(s) => Some(SortValue::Str(s.clone())),
            other => number(other).or(Some(SortValue::Missing)),
        },
    }
}

/// Reads one sort field's value for documents of one segment.
pub(super) enum FieldReader {
    Missing,
    Num(Vec<tantivy::columnar::Column<f64>>),
    I64(tantivy::columnar::Column<i64>),
    Date(tantivy::columnar::Column<tantivy::DateTime>),
    Bool(tantivy::columnar::Column<bool>),
    Str(tantivy::columnar::StrColumn),
    /// `_id`, uninverted from its terms (it has no fast column), as OpenSearch's id field data
    /// is: the term ordinal of each document (`u64::MAX` for none) and the terms to read it.
    Id {
        ords: Vec<u64>,
        terms: tantivy::termdict::TermDictionary,
    },
}

impl FieldReader {
    pub(super) fn open(reader: &SegmentReader, column: Option<&str>) -> Result<FieldReader> {
        let Some(column) = column else {
            return Ok(FieldReader::Missing);
        };
        let handles = reader
            .fast_fields()
            .dynamic_column_handles(column)
            .map_err(crate::error::tantivy_error)?;
        let mut nums = Vec::new();
        for h in handles {
            match h.open()? {
                tantivy::columnar::DynamicColumn::I64(c) if nums.is_empty() => {
                    return Ok(FieldReader::I64(c));
                }
                tantivy::columnar::DynamicColumn::F64(c) => nums.push(c),
                tantivy::columnar::DynamicColumn::U64(c) => {
                    let _ = c;
                }
                tantivy::columnar::DynamicColumn::DateTime(c) => return Ok(FieldReader::Date(c)),
                tantivy::columnar::DynamicColumn::Bool(c) => return Ok(FieldReader::Bool(c)),
                tantivy::columnar::DynamicColumn::Str(c) => return Ok(FieldReader::Str(c)),
                _ => {}
            }
        }
        Ok(if nums.is_empty() {
            FieldReader::Missing
        } else {
            FieldReader::Num(nums)
        })
    }

    /// Opens the `_id` of one segment's documents: one pass over the id terms and their
    /// postings, so sorting on `_id` costs a walk of every id of each segment searched.
    pub(super) fn open_id(reader: &SegmentReader, id_field: Field) -> Result<FieldReader> {
        let inv = reader
            .inverted_index(id_field)
            .map_err(crate::error::tantivy_error)?;
        let terms = inv.terms().clone();
        let mut ords = vec![u64::MAX; reader.max_doc() as usize];
        let mut stream = terms.stream()?;
        while stream.advance() {
            let ord = stream.term_ord();
            let mut postings =
                inv.read_postings_from_terminfo(stream.value(), IndexRecordOption::Basic)?;
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if let Some(slot) = ords.get_mut(doc as usize) {
                    *slot = ord;
                }
                doc = postings.advance();
            }
        }
        Ok(FieldReader::Id { ords, terms })
    }

    /// The value to sort `doc` by: the smallest for ascending, the largest for descending.
    pub(super) fn value(&self, doc: DocId, desc: bool, buf: &mut String) -> SortValue {
        fn pick<T: PartialOrd + Copy>(mut it: impl Iterator<Item = T>, desc: bool) -> Option<T> {
            let first = it.next()?;
            Some(it.fold(first, |acc, v| if (v > acc) == desc { v } else { acc }))
        }
        match self {
            FieldReader::Missing => SortValue::Missing,
            FieldReader::I64(c) => {
                pick(c.values_for_doc(doc), desc).map_or(SortValue::Missing, SortValue::Int)
            }
            FieldReader::Num(cols) => cols
                .iter()
                .find_map(|c| pick(c.values_for_doc(doc), desc))
                .map_or(SortValue::Missing, SortValue::Num),
            FieldReader::Date(c) => pick(
                c.values_for_doc(doc).map(|d| d.into_timestamp_millis()),
                desc,
            )
            .map_or(SortValue::Missing, SortValue::Int),
            FieldReader::Bool(c) => pick(c.values_for_doc(doc).map(u8::from), desc)
                .map_or(SortValue::Missing, |v| SortValue::Num(f64::from(v))),
            FieldReader::Id { ords, terms } => {
                let mut bytes = Vec::new();
                match ords.get(doc as usize) {
                    Some(&ord)
                        if ord != u64::MAX
                            && terms.ord_to_term(ord, &mut bytes).unwrap_or(false) =>
                    {
                        SortValue::Str(String::from_utf8_lossy(&bytes).into_owned())
                    }
                    _ => SortValue::Missing,
                }
            }
            FieldReader::Str(c) => match pick(c.term_ords(doc), desc) {
                Some(ord) => {
                    buf.clear();
                    match c.ord_to_str(ord, buf) {
                        Ok(true) => SortValue::Str(buf.clone()),
                        _ => SortValue::Missing,
                    }
                }
                None => SortValue::Missing,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::Engine;
    use crate::index::{DocOp, OpType};
    use crate::search::SearchContext;
    use serde_json::{Value, json};

    /// Indexes `docs` into `index` as one refresh, so each call makes its own segment.
    fn index_segment(engine: &Engine, index: &str, docs: &[(&str, i64)]) {
        let ops = docs
            .iter()
            .map(|(id, ts)| {
                (
                    index.to_string(),
                    DocOp::index(Some((*id).to_string()), json!({"ts": ts}), OpType::Index),
                )
            })
            .collect();
        for r in engine.bulk(ops) {
            r.expect("indexed");
        }
        engine.refresh(index).expect("refreshed");
    }

    fn hits(resp: &Value) -> Vec<Value> {
        resp["hits"]["hits"]
            .as_array()
            .unwrap_or_else(|| panic!("no hits in {resp}"))
            .clone()
    }

    #[test]
    fn test_search_after_over_a_field_and_id_returns_each_doc_once_in_id_order() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let engine = Engine::open(tmp.path()).expect("engine");
        engine
            .create_index(
                "logs",
                &json!({"mappings": {"properties": {"ts": {"type": "long"}}}}),
            )
            .expect("created");
        // Ties on `ts` across segments, ids whose string order differs from indexing order,
        // and an update that leaves a deleted copy of `b` behind in the first segment.
        index_segment(&engine, "logs", &[("b", 2), ("10", 1), ("a", 2), ("2", 1)]);
        index_segment(&engine, "logs", &[("c", 2), ("1", 1), ("b", 2), ("z", 3)]);
        index_segment(&engine, "logs", &[("aa", 2), ("0", 1)]);
        let expected = ["z", "a", "aa", "b", "c", "0", "1", "10", "2"];
        let sort = json!([{"ts": "desc"}, {"_id": "asc"}]);
        let ctx = SearchContext::default();

        let one = engine
            .search("logs", &json!({"size": 20, "sort": sort}), &ctx)
            .expect("search");
        let ids: Vec<String> = hits(&one)
            .iter()
            .map(|h| h["_id"].as_str().expect("id").to_string())
            .collect();
        assert_eq!(ids, expected, "{one}");
        assert_eq!(hits(&one)[0]["sort"], json!([3, "z"]), "{one}");

        let mut paged = Vec::new();
        let mut after: Option<Value> = None;
        loop {
            let mut body = json!({"size": 2, "sort": sort});
            if let Some(a) = &after {
                body["search_after"] = a.clone();
            }
            let page = engine.search("logs", &body, &ctx).expect("page");
            let page_hits = hits(&page);
            let Some(last) = page_hits.last() else {
                break;
            };
            after = Some(last["sort"].clone());
            paged.extend(
                page_hits
                    .iter()
                    .map(|h| h["_id"].as_str().expect("id").to_string()),
            );
            assert!(
                paged.len() <= expected.len(),
                "paging never ends: {paged:?}"
            );
        }
        assert_eq!(paged, expected, "every document once, in sort order");

        // Descending on `_id` alone, and a cursor given as a number reads as the id string.
        let desc = engine
            .search(
                "logs",
                &json!({"size": 3, "sort": [{"_id": "desc"}], "search_after": [10]}),
                &ctx,
            )
            .expect("search");
        let ids: Vec<String> = hits(&desc)
            .iter()
            .map(|h| h["_id"].as_str().expect("id").to_string())
            .collect();
        assert_eq!(ids, ["1", "0"], "{desc}");
    }
}
