//! The one fixed tantivy schema every sluice index uses, and how OpenSearch fields map onto it.
//!
//! tantivy schemas cannot change after an index is created, while OpenSearch mappings grow as
//! documents bring new fields. So user fields do not become tantivy fields: they become paths
//! inside two JSON fields whose indexing we control, typed by the sluice [`Mapping`]:
//!
//! - `_txt` (tokenized with the default analyzer, with positions, not fast) holds `text` fields;
//! - `_kw` (raw tokenizer, fast) holds `keyword` values — including `.keyword` multi-fields —
//!   and numbers (as i64 for integer types, f64 for floating types), dates and booleans.
//!   Being fast, `_kw` paths serve sorting, aggregations and range queries.
//!
//! A user field `status` is `_kw.status`; `message` (text) is `_txt.message` and its keyword
//! sub-field `message.keyword` is `_kw.message.keyword`. Dots in paths are expanded, so a
//! document's `{"user": {"name": …}}` and `{"user.name": …}` land on the same path.
//!
//! [`Mapping`]: crate::mapping::Mapping

use tantivy::schema::{
    Field, JsonObjectOptions, NumericOptions, STORED, STRING, Schema, TextFieldIndexing,
};

/// Name of the JSON field holding text values.
pub const TXT_FIELD: &str = "_txt";
/// Name of the JSON field holding keyword, numeric, date and boolean values.
pub const KW_FIELD: &str = "_kw";
/// Name of the document id field.
pub const ID_FIELD: &str = "_id";
/// Name of the stored original document.
pub const SOURCE_FIELD: &str = "_source";
/// Name of the document version field.
pub const VERSION_FIELD: &str = "_version";
/// Name of the sequence number field.
pub const SEQ_NO_FIELD: &str = "_seq_no";
/// Name of the custom routing value a document was written with (`?routing=`).
pub const ROUTING_FIELD: &str = "_routing";

/// Handles to the fields of the sluice schema.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// `_id`: raw-indexed and stored.
    pub id: Field,
    /// `_source`: the original JSON document, stored as bytes.
    pub source: Field,
    /// `_txt`: the JSON field of text values.
    pub txt: Field,
    /// `_kw`: the JSON field of keyword, numeric, date and boolean values.
    pub kw: Field,
    /// `_version`: stored.
    pub version: Field,
    /// `_seq_no`: stored and fast (indices created before it was fast have it stored only).
    /// Search breaks ties by it, so that equal hits come in indexing order as in OpenSearch.
    pub seq_no: Field,
    /// `_routing`: stored only, and only for documents written with a routing value. The last
    /// field, so that indices created before it existed gain it by [`add_missing_fields`].
    pub routing: Field,
}

/// Builds the schema every sluice index uses.
pub fn build_schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let id = b.add_text_field(ID_FIELD, STRING | STORED);
    let source = b.add_bytes_field(SOURCE_FIELD, STORED);
    let txt_indexing = TextFieldIndexing::default()
        .set_tokenizer("default")
        .set_index_option(tantivy::schema::IndexRecordOption::WithFreqsAndPositions);
    let txt = b.add_json_field(
        TXT_FIELD,
        JsonObjectOptions::default()
            .set_indexing_options(txt_indexing)
            .set_expand_dots_enabled(),
    );
    let kw_indexing = TextFieldIndexing::default()
        .set_tokenizer("raw")
        .set_index_option(tantivy::schema::IndexRecordOption::Basic);
    let kw = b.add_json_field(
        KW_FIELD,
        JsonObjectOptions::default()
            .set_indexing_options(kw_indexing)
            .set_fast("raw")
            .set_expand_dots_enabled(),
    );
    let version = b.add_u64_field(VERSION_FIELD, NumericOptions::default().set_stored());
    let seq_no = b.add_u64_field(
        SEQ_NO_FIELD,
        NumericOptions::default().set_stored().set_fast(),
    );
    // Stored only: it is echoed with the document, never searched, so it needs no postings or
    // norms, and segments written before the field existed read back as documents without it.
    let routing = b.add_text_field(ROUTING_FIELD, STORED);
    (
        b.build(),
        Fields {
            id,
            source,
            txt,
            kw,
            version,
            seq_no,
            routing,
        },
    )
}

/// Resolves the field handles of an existing sluice schema.
pub fn fields_of(schema: &Schema) -> Option<Fields> {
    Some(Fields {
        id: schema.get_field(ID_FIELD).ok()?,
        source: schema.get_field(SOURCE_FIELD).ok()?,
        txt: schema.get_field(TXT_FIELD).ok()?,
        kw: schema.get_field(KW_FIELD).ok()?,
        version: schema.get_field(VERSION_FIELD).ok()?,
        seq_no: schema.get_field(SEQ_NO_FIELD).ok()?,
        routing: schema.get_field(ROUTING_FIELD).ok()?,
    })
}

/// The schema of tantivy's `meta.json` (`meta`) with the fields of [`build_schema`] it lacks
/// appended, or `None` when it lacks none.
///
/// tantivy keeps an index's schema in `meta.json` and never changes it, so an index created
/// before a field was added to [`build_schema`] would not have it. Appending is safe: fields
/// are numbered by position, so the existing ones keep their numbers, and a stored-only field
/// that no segment holds reads back as absent. Only fields at the end of the current schema
/// that the stored one lacks, after a stored one whose names match the current ones, are
/// added; anything else is not a sluice schema and is left for [`fields_of`] to refuse.
pub fn add_missing_fields(meta: &serde_json::Value) -> Option<serde_json::Value> {
    let stored = meta.get("schema")?.as_array()?;
    let (schema, _) = build_schema();
    let current: Vec<_> = schema.fields().map(|(_, entry)| entry).collect();
    if stored.len() >= current.len() {
        return None;
    }
    let prefix_matches = stored
        .iter()
        .zip(&current)
        .all(|(s, c)| s.get("name").and_then(|n| n.as_str()) == Some(c.name()));
    if !prefix_matches {
        return None;
    }
    let mut upgraded = meta.clone();
    let fields = upgraded.get_mut("schema")?.as_array_mut()?;
    for entry in &current[stored.len()..] {
        fields.push(serde_json::to_value(entry).ok()?);
    }
    Some(upgraded)
}
