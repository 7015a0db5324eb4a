//! OpenSearch mappings: parsing, rendering, dynamic growth, and turning a document's values into
//! the typed values the [`schema`](crate::schema) indexes.
//!
//! A [`Mapping`] is a tree of objects and leaf fields, as OpenSearch keeps it. Lookups go by the
//! dotted path a query names (`user.name`, `message.keyword`) through [`Mapping::resolve`].

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::date::{self, DateFormat};
use crate::error::{EngineError, Result};

/// Dynamic keyword sub-fields ignore values longer than this, as OpenSearch's dynamic template
/// for strings does (`ignore_above: 256`).
pub const DYNAMIC_KEYWORD_IGNORE_ABOVE: u32 = 256;

/// The leaf field types sluice supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Analysed full text.
    Text,
    /// An exact string.
    Keyword,
    /// Signed 64-bit integer.
    Long,
    /// Signed 32-bit integer.
    Integer,
    /// Signed 16-bit integer.
    Short,
    /// Signed 8-bit integer.
    Byte,
    /// 64-bit float.
    Double,
    /// 32-bit float.
    Float,
    /// A date, kept as epoch milliseconds.
    Date,
    /// `true` or `false`.
    Boolean,
    /// An IPv4 or IPv6 address, kept in the encoding of [`crate::ip`].
    Ip,
}

impl FieldType {
    /// Parses an OpenSearch type name.
    pub fn from_name(name: &str) -> Option<FieldType> {
        Some(match name {
            "text" => FieldType::Text,
            "keyword" => FieldType::Keyword,
            "long" => FieldType::Long,
            "integer" => FieldType::Integer,
            "short" => FieldType::Short,
            "byte" => FieldType::Byte,
            "double" => FieldType::Double,
            "float" => FieldType::Float,
            "date" => FieldType::Date,
            "boolean" => FieldType::Boolean,
            "ip" => FieldType::Ip,
            _ => return None,
        })
    }

    /// The OpenSearch type name.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Text => "text",
            FieldType::Keyword => "keyword",
            FieldType::Long => "long",
            FieldType::Integer => "integer",
            FieldType::Short => "short",
            FieldType::Byte => "byte",
            FieldType::Double => "double",
            FieldType::Float => "float",
            FieldType::Date => "date",
            FieldType::Boolean => "boolean",
            FieldType::Ip => "ip",
        }
    }

    /// Whether values are integers (indexed as i64).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            FieldType::Long | FieldType::Integer | FieldType::Short | FieldType::Byte
        )
    }

    /// Whether values are floating point (indexed as f64).
    pub fn is_float(self) -> bool {
        matches!(self, FieldType::Double | FieldType::Float)
    }

    /// Whether values are numbers of any kind.
    pub fn is_numeric(self) -> bool {
        self.is_integer() || self.is_float()
    }

    fn integer_bounds(self) -> (i64, i64) {
        match self {
            FieldType::Integer => (i32::MIN.into(), i32::MAX.into()),
            FieldType::Short => (i16::MIN.into(), i16::MAX.into()),
            FieldType::Byte => (i8::MIN.into(), i8::MAX.into()),
            _ => (i64::MIN, i64::MAX),
        }
    }
}

/// Where a resolved field's values live in the tantivy schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// In the `_txt` JSON field (tokenized, positions, not fast).
    Text,
    /// In the `_kw` JSON field (raw, fast).
    Kw,
}

/// A field found by [`Mapping::resolve`].
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedField {
    /// The full dotted path, also the JSON path inside the storage field.
    pub path: String,
    /// The field's type.
    pub ty: FieldType,
    /// Which JSON field holds the values.
    pub storage: Storage,
    /// How a date field's values are written (its mapping's `format`); the default format for
    /// other types.
    pub date_format: DateFormat,
}

impl ResolvedField {
    /// The column name of this field for tantivy's fast-field APIs (aggregations, sorting):
    /// `_kw.<path>`; `None` for text fields, which have no doc values.
    pub fn fast_field_name(&self) -> Option<String> {
        match self.storage {
            Storage::Kw => Some(format!("{}.{}", crate::schema::KW_FIELD, self.path)),
            Storage::Text => None,
        }
    }
}

/// One leaf field's mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldMapping {
    /// The field's type.
    pub ty: FieldType,
    /// Keyword values longer than this are not indexed (kept in `_source`).
    pub ignore_above: Option<u32>,
    /// Multi-fields (`fields`), e.g. a `keyword` sub-field of a text field.
    pub fields: BTreeMap<String, FieldMapping>,
    /// Whether the field is indexed (`index: false` keeps it only in `_source`).
    pub index: bool,
    /// Whether a value that does not fit the type is skipped (kept in `_source` only) instead
    /// of failing the document.
    pub ignore_malformed: bool,
    /// How a date field's values are written (`format`).
    pub date_format: DateFormat,
    /// The mapping parameters as given, echoed by `GET _mapping`.
    params: Map<String, Value>,
}

/// A node of the mapping tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Property {
    /// A leaf field.
    Field(FieldMapping),
    /// An object with its own properties.
    Object(BTreeMap<String, Property>),
}

/// What happens to a field the mapping does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dynamic {
    /// Add it to the mapping with an inferred type.
    True,
    /// Keep it in `_source` only.
    False,
    /// Reject the document.
    Strict,
    /// Reject the document unless a dynamic template maps the field; sluice has no dynamic
    /// templates, so this rejects as [`Dynamic::Strict`] does, under its own name.
    StrictAllowTemplates,
}

/// An index's mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// The top-level properties.
    pub properties: BTreeMap<String, Property>,
    /// The top-level dynamic setting.
    pub dynamic: Dynamic,
    /// `_routing.required` as the mapping states it (`None` when it does not mention it, so a
    /// mapping update that leaves it out does not change it).
    pub routing_required: Option<bool>,
}

/// How far a mapping may grow: OpenSearch's `index.mapping.total_fields.limit` and
/// `index.mapping.depth.limit` (dynamic index settings). A tenant's documents could otherwise
/// add fields without end — each one a tantivy field and a mapping entry every search of the
/// index pays for — or nest objects until walking a document is the cost. Checked on what a
/// write adds (a document's new fields, a mapping update, a create with mappings), never on
/// what is already stored: a lowered limit refuses new fields, and the fields kept load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingLimits {
    /// Most fields: objects, fields and multi-fields, as OpenSearch counts its mappers.
    pub total_fields: u64,
    /// Most depth of an object: the root counts 1, a top-level object 2.
    pub depth: u64,
}

impl Default for MappingLimits {
    /// OpenSearch's defaults.
    fn default() -> Self {
        MappingLimits {
            total_fields: 1000,
            depth: 20,
        }
    }
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            properties: BTreeMap::new(),
            dynamic: Dynamic::True,
            routing_required: None,
        }
    }
}

/// A typed value ready for indexing.
#[derive(Debug, Clone, PartialEq)]
pub enum TypedValue {
    /// Text to analyse (into `_txt`).
    Text(String),
    /// An exact string (into `_kw`).
    Keyword(String),
    /// An integer.
    I64(i64),
    /// A float.
    F64(f64),
    /// Epoch milliseconds.
    Date(i64),
    /// A boolean.
    Bool(bool),
}

/// The values one document brings, per storage path, plus the fields it added to the mapping.
#[derive(Debug, Default)]
pub struct ParsedDocument {
    /// `(path, value)` for the `_txt` field.
    pub text: Vec<(String, TypedValue)>,
    /// `(path, value)` for the `_kw` field.
    pub kw: Vec<(String, TypedValue)>,
    /// Whether this document added fields to the mapping (the caller persists it).
    pub mapping_changed: bool,
}

fn mapper_err(msg: String) -> EngineError {
    EngineError::mapper_parsing(msg)
}

/// Most entries of a field's `meta`: OpenSearch's limit (`TypeParsers.parseMeta`).
const MAX_META_ENTRIES: usize = 5;
/// Longest `meta` key, in characters: OpenSearch's limit.
const MAX_META_KEY_CHARS: usize = 20;
/// Longest `meta` value, in characters: OpenSearch's limit.
const MAX_META_VALUE_CHARS: usize = 50;

/// The Java class OpenSearch's parser would hold `v` as, for its messages.
fn java_class(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "Boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "Integer",
        Value::Number(_) => "Double",
        Value::String(_) => "String",
        Value::Array(_) => "ArrayList",
        Value::Object(_) => "LinkedHashMap",
    }
}

/// Checks a field's `meta` (metadata kept with the mapping and echoed, never used) as
/// OpenSearch checks it: an object of at most 5 string values, short keys and values.
fn check_meta(name: &str, value: &Value) -> Result<()> {
    let Value::Object(meta) = value else {
        return Err(mapper_err(format!(
            "[meta] must be an object, got {} [{value}] for field [{name}]",
            java_class(value)
        )));
    };
    if meta.len() > MAX_META_ENTRIES {
        return Err(mapper_err(format!(
            "[meta] can't have more than {MAX_META_ENTRIES} entries, but got {} on field [{name}]",
            meta.len()
        )));
    }
    for (k, v) in meta {
        if k.chars().count() > MAX_META_KEY_CHARS {
            return Err(mapper_err(format!(
                "[meta] keys can't be longer than {MAX_META_KEY_CHARS} chars, but got [{k}] for field [{name}]"
            )));
        }
        let Value::String(text) = v else {
            return Err(mapper_err(format!(
                "[meta] values can only be strings, but got {}[{v}] for field [{name}]",
                java_class(v)
            )));
        };
        if text.chars().count() > MAX_META_VALUE_CHARS {
            return Err(mapper_err(format!(
                "[meta] values can't be longer than {MAX_META_VALUE_CHARS} chars, but got [{text}] for field [{name}]"
            )));
        }
    }
    Ok(())
}

impl FieldMapping {
    fn new(ty: FieldType) -> Self {
        let mut params = Map::new();
        params.insert("type".into(), Value::from(ty.name()));
        FieldMapping {
            ty,
            ignore_above: None,
            fields: BTreeMap::new(),
            index: true,
            ignore_malformed: false,
            date_format: DateFormat::DEFAULT,
            params,
        }
    }

    /// The mapping OpenSearch's dynamic mapping gives a new string field: `text` with a
    /// `keyword` sub-field ignoring values above 256 characters.
    fn dynamic_string() -> Self {
        let mut f = FieldMapping::new(FieldType::Text);
        let mut kw = FieldMapping::new(FieldType::Keyword);
        kw.ignore_above = Some(DYNAMIC_KEYWORD_IGNORE_ABOVE);
        kw.params.insert(
            "ignore_above".into(),
            Value::from(DYNAMIC_KEYWORD_IGNORE_ABOVE),
        );
        f.fields.insert("keyword".into(), kw);
        f
    }

    fn parse(name: &str, body: &Map<String, Value>, multi_field: bool) -> Result<FieldMapping> {
        let ty_name = body.get("type").and_then(Value::as_str).unwrap_or("object");
        let ty = FieldType::from_name(ty_name).ok_or_else(|| {
            mapper_err(format!(
                "No handler for type [{ty_name}] declared on field [{name}]"
            ))
        })?;
        let mut f = FieldMapping::new(ty);
        f.params = body.clone();
        for (key, value) in body {
            match key.as_str() {
                "type" => {}
                "meta" => check_meta(name, value)?,
                "ignore_above" => {
                    let n = value.as_u64().filter(|n| *n <= u64::from(u32::MAX)).ok_or_else(|| {
                        mapper_err(format!(
                            "Failed to parse mapping: [ignore_above] on field [{name}] must be a \
                             non-negative integer, got [{value}]"
                        ))
                    })?;
                    if ty != FieldType::Keyword {
                        return Err(unknown_param(key, name, ty));
                    }
                    f.ignore_above = Some(n as u32);
                }
                "index" => {
                    f.index = value.as_bool().ok_or_else(|| {
                        mapper_err(format!(
                            "Failed to parse value [{value}] as only [true] or [false] are allowed."
                        ))
                    })?;
                }
                "format" => {
                    if ty != FieldType::Date {
                        return Err(unknown_param(key, name, ty));
                    }
                    let fmt = value.as_str().unwrap_or_default();
                    f.date_format = DateFormat::parse(fmt).ok_or_else(|| {
                        mapper_err(format!(
                            "Failed to parse mapping: Invalid format: [{fmt}] on field \
                             [{name}]; supported formats are strict_date_optional_time, \
                             date_optional_time, epoch_millis and epoch_second, joined with ||"
                        ))
                    })?;
                }
                "fields" => {
                    if multi_field {
                        return Err(unknown_param(key, name, ty));
                    }
                    let obj = value.as_object().ok_or_else(|| {
                        mapper_err(format!(
                            "Expected map for property [fields] on field [{name}]"
                        ))
                    })?;
                    for (sub, sub_body) in obj {
                        let sub_body = sub_body.as_object().ok_or_else(|| {
                            mapper_err(format!(
                                "Expected map for property [fields] on field [{sub}]"
                            ))
                        })?;
                        let sub_mapping =
                            FieldMapping::parse(&format!("{name}.{sub}"), sub_body, true)?;
                        f.fields.insert(sub.clone(), sub_mapping);
                    }
                }
                "ignore_malformed" => {
                    if !(ty.is_numeric() || matches!(ty, FieldType::Date | FieldType::Ip)) {
                        return Err(unknown_param(key, name, ty));
                    }
                    f.ignore_malformed = match value {
                        Value::Bool(b) => *b,
                        Value::String(s) if s == "true" => true,
                        Value::String(s) if s == "false" => false,
                        _ => {
                            return Err(mapper_err(format!(
                                "Failed to parse value [{value}] as only [true] or [false] are \
                                 allowed."
                            )));
                        }
                    };
                }
                "doc_values"
                | "store"
                | "norms"
                | "coerce"
                | "null_value"
                | "boost"
                | "index_options"
                | "similarity"
                | "eager_global_ordinals" => {}
                "analyzer" | "search_analyzer" => {
                    if ty != FieldType::Text {
                        return Err(unknown_param(key, name, ty));
                    }
                    if value.as_str() != Some("standard") && value.as_str() != Some("default") {
                        return Err(mapper_err(format!(
                            "analyzer [{}] has not been configured in mappings; sluice supports \
                             the [standard] analyzer",
                            value.as_str().unwrap_or_default()
                        )));
                    }
                }
                _ => return Err(unknown_param(key, name, ty)),
            }
        }
        Ok(f)
    }

    fn render(&self) -> Value {
        let mut out = self.params.clone();
        if !self.fields.is_empty() {
            let fields: Map<String, Value> = self
                .fields
                .iter()
                .map(|(k, v)| (k.clone(), v.render()))
                .collect();
            out.insert("fields".into(), Value::Object(fields));
        }
        Value::Object(out)
    }
}

fn unknown_param(param: &str, field: &str, ty: FieldType) -> EngineError {
    mapper_err(format!(
        "unknown parameter [{param}] on mapper [{field}] of type [{}]",
        ty.name()
    ))
}

fn parse_properties(prefix: &str, body: &Value) -> Result<BTreeMap<String, Property>> {
    let obj = body.as_object().ok_or_else(|| {
        mapper_err(format!(
            "Expected map for property [properties] on field [{prefix}]"
        ))
    })?;
    let mut out = BTreeMap::new();
    for (name, field_body) in obj {
        if name.is_empty() || name.starts_with('.') || name.ends_with('.') {
            return Err(mapper_err(format!(
                "field name cannot be empty or start/end with a dot: [{name}]"
            )));
        }
        let full = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let fb = field_body.as_object().ok_or_else(|| {
            mapper_err(format!(
                "Expected map for property [{full}] but got [{field_body}]"
            ))
        })?;
        let is_object =
            fb.get("type").is_none_or(|t| t == "object") || fb.contains_key("properties");
        let prop = if is_object && !fb.contains_key("type")
            || fb.get("type").is_some_and(|t| t == "object")
        {
            for key in fb.keys() {
                if !matches!(key.as_str(), "type" | "properties" | "dynamic" | "enabled") {
                    return Err(mapper_err(format!(
                        "unknown parameter [{key}] on mapper [{full}] of type [object]"
                    )));
                }
            }
            let props = match fb.get("properties") {
                Some(p) => parse_properties(&full, p)?,
                None => BTreeMap::new(),
            };
            Property::Object(props)
        } else {
            Property::Field(FieldMapping::parse(&full, fb, false)?)
        };
        insert_dotted(&mut out, name, prop);
    }
    Ok(out)
}

/// Inserts `prop` at a possibly dotted `name` (`a.b` becomes object `a` with property `b`).
fn insert_dotted(map: &mut BTreeMap<String, Property>, name: &str, prop: Property) {
    match name.split_once('.') {
        None => {
            map.insert(name.to_string(), prop);
        }
        Some((head, rest)) => {
            let entry = map
                .entry(head.to_string())
                .or_insert_with(|| Property::Object(BTreeMap::new()));
            if let Property::Object(inner) = entry {
                insert_dotted(inner, rest, prop);
            }
        }
    }
}

/// Reads the `_routing` metadata field of a mapping: `{"required": true|false}`.
fn parse_routing(value: &Value) -> Result<bool> {
    let obj = value.as_object().ok_or_else(|| {
        mapper_err(format!(
            "Failed to parse mapping: [_routing] must be an object, got [{value}]"
        ))
    })?;
    let mut required = false;
    for (k, v) in obj {
        match (k.as_str(), v) {
            ("required", Value::Bool(b)) => required = *b,
            ("required", Value::String(s)) if s == "true" || s == "false" => required = s == "true",
            ("required", _) => {
                return Err(mapper_err(format!(
                    "Failed to parse mapping: Failed to parse value [{v}] as only [true] or \
                     [false] are allowed."
                )));
            }
            _ => {
                return Err(mapper_err(format!(
                    "Failed to parse mapping: unknown parameter [{k}] on mapper [_routing] of \
                     type [_routing]"
                )));
            }
        }
    }
    Ok(required)
}

fn render_properties(props: &BTreeMap<String, Property>) -> Value {
    let mut out = Map::new();
    for (name, prop) in props {
        let v = match prop {
            Property::Field(f) => f.render(),
            Property::Object(inner) => json!({ "properties": render_properties(inner) }),
        };
        out.insert(name.clone(), v);
    }
    Value::Object(out)
}

impl Mapping {
    /// Parses the `mappings` object of a create-index request.
    pub fn parse(body: &Value) -> Result<Mapping> {
        let obj = body.as_object().ok_or_else(|| {
            mapper_err(format!(
                "Failed to parse mapping: expected an object, got [{body}]"
            ))
        })?;
        let mut mapping = Mapping::default();
        for (key, value) in obj {
            match key.as_str() {
                "properties" => mapping.properties = parse_properties("", value)?,
                "dynamic" => {
                    mapping.dynamic = match value {
                        Value::Bool(true) => Dynamic::True,
                        Value::Bool(false) => Dynamic::False,
                        Value::String(s) if s == "true" => Dynamic::True,
                        Value::String(s) if s == "false" => Dynamic::False,
                        Value::String(s) if s == "strict" => Dynamic::Strict,
                        Value::String(s) if s == "strict_allow_templates" => {
                            Dynamic::StrictAllowTemplates
                        }
                        _ => {
                            return Err(mapper_err(format!(
                                "Failed to parse mapping: Could not convert [dynamic] to one of \
                                 [true, false, strict, strict_allow_templates], got [{value}]"
                            )));
                        }
                    }
                }
                "_routing" => mapping.routing_required = Some(parse_routing(value)?),
                "_source" | "_meta" | "date_detection" | "numeric_detection" => {}
                _ => {
                    return Err(mapper_err(format!(
                        "Failed to parse mapping: Root mapping definition has unsupported \
                         parameters:  [{key} : {value}]"
                    )));
                }
            }
        }
        Ok(mapping)
    }

    /// Renders the mapping as `GET /{index}/_mapping` shows it.
    pub fn render(&self) -> Value {
        let mut out = Map::new();
        match self.dynamic {
            Dynamic::True => {}
            Dynamic::False => {
                out.insert("dynamic".into(), Value::from("false"));
            }
            Dynamic::Strict => {
                out.insert("dynamic".into(), Value::from("strict"));
            }
            Dynamic::StrictAllowTemplates => {
                out.insert("dynamic".into(), Value::from("strict_allow_templates"));
            }
        }
        // OpenSearch shows a metadata field only where it differs from its default.
        if self.routing_required() {
            out.insert("_routing".into(), json!({"required": true}));
        }
        if !self.properties.is_empty() {
            out.insert("properties".into(), render_properties(&self.properties));
        }
        Value::Object(out)
    }

    /// Whether documents need a routing value (`"_routing": {"required": true}`): writes and
    /// gets without one are refused with `routing_missing_exception`.
    pub fn routing_required(&self) -> bool {
        self.routing_required == Some(true)
    }

    /// Merges the properties of `other` (a `PUT _mapping` body) into this mapping; changing the
    /// type of an existing field is an error.
    pub fn merge(&mut self, other: &Mapping) -> Result<()> {
        // OpenSearch's `_routing.required` cannot be updated: only restating it is allowed.
        if let Some(required) = other.routing_required
            && required != self.routing_required()
        {
            return Err(EngineError::illegal_argument(format!(
                "Mapper for [_routing] conflicts with existing mapper:\n\tCannot update parameter [required] from [{}] to [{required}]",
                self.routing_required()
            )));
        }
        let mut merged = self.properties.clone();
        merge_props(&mut merged, &other.properties, "")?;
        self.properties = merged;
        if other.dynamic != Dynamic::True {
            self.dynamic = other.dynamic;
        }
        Ok(())
    }

    /// Finds the field at a dotted path, including multi-fields (`message.keyword`).
    pub fn resolve(&self, path: &str) -> Option<ResolvedField> {
        let mut props = &self.properties;
        let mut parts = path.split('.').peekable();
        while let Some(part) = parts.next() {
            match props.get(part)? {
                Property::Object(inner) => props = inner,
                Property::Field(f) => {
                    let rest: Vec<&str> = parts.collect();
                    return match rest.as_slice() {
                        [] => Some(ResolvedField {
                            path: path.to_string(),
                            ty: f.ty,
                            storage: storage_of(f.ty),
                            date_format: f.date_format.clone(),
                        }),
                        [sub] => f.fields.get(*sub).map(|sf| ResolvedField {
                            path: path.to_string(),
                            ty: sf.ty,
                            storage: storage_of(sf.ty),
                            date_format: sf.date_format.clone(),
                        }),
                        _ => None,
                    };
                }
            }
        }
        None
    }

    /// All leaf fields (and multi-fields) with their paths, in path order.
    pub fn leaf_fields(&self) -> Vec<ResolvedField> {
        let mut out = Vec::new();
        collect_leaves(&self.properties, "", &mut out);
        out
    }

    /// Expands a field name that may hold `*` wildcards (`multi_match`, `query_string`) to the
    /// mapped fields it matches.
    pub fn expand_field_pattern(&self, pattern: &str) -> Vec<ResolvedField> {
        if !pattern.contains('*') {
            return self.resolve(pattern).into_iter().collect();
        }
        self.leaf_fields()
            .into_iter()
            .filter(|f| wildcard_match(pattern, &f.path))
            .collect()
    }

    /// How many fields the mapping counts against `index.mapping.total_fields.limit`: every
    /// object, field and multi-field ([`MappingLimits`]).
    pub fn total_fields(&self) -> u64 {
        fn count(props: &BTreeMap<String, Property>) -> u64 {
            props
                .values()
                .map(|p| match p {
                    Property::Object(inner) => 1 + count(inner),
                    Property::Field(f) => 1 + f.fields.len() as u64,
                })
                .sum()
        }
        count(&self.properties)
    }

    /// Refuses a mapping beyond `limits`, in OpenSearch's words (400
    /// `illegal_argument_exception`).
    pub fn check_limits(&self, limits: &MappingLimits) -> Result<()> {
        if self.total_fields() > limits.total_fields {
            return Err(EngineError::illegal_argument(format!(
                "Limit of total fields [{}] has been exceeded",
                limits.total_fields
            )));
        }
        fn deepest(props: &BTreeMap<String, Property>, prefix: &str, limit: u64) -> Option<String> {
            props.iter().find_map(|(name, p)| {
                let Property::Object(inner) = p else {
                    return None;
                };
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                // OpenSearch's depth of an object: its path's dots plus two (the root is 1).
                let depth = path.matches('.').count() as u64 + 2;
                if depth > limit {
                    return Some(path);
                }
                deepest(inner, &path, limit)
            })
        }
        if let Some(path) = deepest(&self.properties, "", limits.depth) {
            return Err(EngineError::illegal_argument(format!(
                "Limit of mapping depth [{}] has been exceeded due to object field [{path}]",
                limits.depth
            )));
        }
        Ok(())
    }

    /// Walks a document, maps each value to its typed form and grows the mapping with new
    /// fields when dynamic mapping allows. `doc_id` is only used in error messages. Nothing
    /// bounds the growth: for replaying what was written; a write goes through
    /// [`Mapping::parse_document_within`].
    ///
    /// On error the mapping is left unchanged.
    pub fn parse_document(&mut self, source: &Value, doc_id: &str) -> Result<ParsedDocument> {
        self.parse_with(source, doc_id, None)
    }

    /// [`Mapping::parse_document`] for a write: a document whose new fields would take the
    /// mapping beyond `limits` (read only when it adds fields) is refused, and the mapping
    /// left unchanged.
    pub fn parse_document_within(
        &mut self,
        source: &Value,
        doc_id: &str,
        limits: &dyn Fn() -> MappingLimits,
    ) -> Result<ParsedDocument> {
        self.parse_with(source, doc_id, Some(limits))
    }

    fn parse_with(
        &mut self,
        source: &Value,
        doc_id: &str,
        limits: Option<&dyn Fn() -> MappingLimits>,
    ) -> Result<ParsedDocument> {
        let obj = source.as_object().ok_or_else(|| {
            mapper_err("failed to parse, document is empty or not an object".to_string())
        })?;
        let mut parsed = ParsedDocument::default();
        let dynamic = self.dynamic;
        if !has_unknown_fields(&self.properties, obj) {
            // Only unknown fields change the mapping, so the walk cannot touch it: no copy.
            walk_object(&mut self.properties, dynamic, "", obj, doc_id, &mut parsed)?;
            debug_assert!(!parsed.mapping_changed);
            return Ok(parsed);
        }
        let mut working = self.clone();
        walk_object(
            &mut working.properties,
            dynamic,
            "",
            obj,
            doc_id,
            &mut parsed,
        )?;
        if parsed.mapping_changed {
            if let Some(limits) = limits {
                working.check_limits(&limits())?;
            }
            *self = working;
        }
        Ok(parsed)
    }
}

/// Whether a document names a field the mapping does not have (so parsing it may grow the
/// mapping).
fn has_unknown_fields(props: &BTreeMap<String, Property>, obj: &Map<String, Value>) -> bool {
    fn value_unknown(props: &BTreeMap<String, Property>, key: &str, value: &Value) -> bool {
        let (head, rest) = match key.split_once('.') {
            Some((h, r)) if !h.is_empty() && !r.is_empty() => (h, Some(r)),
            _ => (key, None),
        };
        match (props.get(head), rest) {
            (None, _) => !value.is_null() && !matches!(value, Value::Array(a) if a.is_empty()),
            (Some(Property::Object(inner)), Some(rest)) => value_unknown(inner, rest, value),
            (Some(Property::Object(inner)), None) => match value {
                Value::Object(m) => m.iter().any(|(k, v)| value_unknown(inner, k, v)),
                Value::Array(items) => items.iter().any(|v| match v {
                    Value::Object(m) => m.iter().any(|(k, v)| value_unknown(inner, k, v)),
                    _ => false,
                }),
                _ => false,
            },
            (Some(Property::Field(_)), _) => false,
        }
    }
    obj.iter().any(|(k, v)| value_unknown(props, k, v))
}

fn storage_of(ty: FieldType) -> Storage {
    if ty == FieldType::Text {
        Storage::Text
    } else {
        Storage::Kw
    }
}

fn collect_leaves(props: &BTreeMap<String, Property>, prefix: &str, out: &mut Vec<ResolvedField>) {
    for (name, prop) in props {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match prop {
            Property::Object(inner) => collect_leaves(inner, &path, out),
            Property::Field(f) => {
                out.push(ResolvedField {
                    path: path.clone(),
                    ty: f.ty,
                    storage: storage_of(f.ty),
                    date_format: f.date_format.clone(),
                });
                for (sub, sf) in &f.fields {
                    out.push(ResolvedField {
                        path: format!("{path}.{sub}"),
                        ty: sf.ty,
                        storage: storage_of(sf.ty),
                        date_format: sf.date_format.clone(),
                    });
                }
            }
        }
    }
}

/// Matches `text` against a pattern where `*` stands for any run of characters; the wire
/// crate's one matcher, re-exported here for existing callers.
pub use sluice_wire::simple_match as wildcard_match;

fn merge_props(
    into: &mut BTreeMap<String, Property>,
    from: &BTreeMap<String, Property>,
    prefix: &str,
) -> Result<()> {
    for (name, prop) in from {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match (into.get_mut(name), prop) {
            (None, _) => {
                into.insert(name.clone(), prop.clone());
            }
            (Some(Property::Object(a)), Property::Object(b)) => merge_props(a, b, &path)?,
            (Some(Property::Field(a)), Property::Field(b)) => {
                if a.ty != b.ty {
                    return Err(EngineError::illegal_argument(format!(
                        "mapper [{path}] cannot be changed from type [{}] to [{}]",
                        a.ty.name(),
                        b.ty.name()
                    )));
                }
                for (sub, sf) in &b.fields {
                    a.fields.entry(sub.clone()).or_insert_with(|| sf.clone());
                }
            }
            (Some(existing), _) => {
                let from_ty = match existing {
                    Property::Object(_) => "object",
                    Property::Field(f) => f.ty.name(),
                };
                let to_ty = match prop {
                    Property::Object(_) => "object",
                    Property::Field(f) => f.ty.name(),
                };
                return Err(EngineError::illegal_argument(format!(
                    "mapper [{path}] cannot be changed from type [{from_ty}] to [{to_ty}]"
                )));
            }
        }
    }
    Ok(())
}

fn walk_object(
    props: &mut BTreeMap<String, Property>,
    dynamic: Dynamic,
    prefix: &str,
    obj: &Map<String, Value>,
    doc_id: &str,
    out: &mut ParsedDocument,
) -> Result<()> {
    for (key, value) in obj {
        if key.is_empty() {
            return Err(mapper_err(
                "field name cannot be an empty string".to_string(),
            ));
        }
        // A dotted key is the same as nested objects.
        let (head, rest) = match key.split_once('.') {
            Some((h, r)) if !h.is_empty() && !r.is_empty() => (h, Some(r)),
            _ => (key.as_str(), None),
        };
        let path = if prefix.is_empty() {
            head.to_string()
        } else {
            format!("{prefix}.{head}")
        };
        if let Some(rest) = rest {
            let mut nested = Map::new();
            nested.insert(rest.to_string(), value.clone());
            walk_value(
                props,
                dynamic,
                &path,
                head,
                &Value::Object(nested),
                doc_id,
                out,
            )?;
        } else {
            walk_value(props, dynamic, &path, head, value, doc_id, out)?;
        }
    }
    Ok(())
}

fn walk_value(
    props: &mut BTreeMap<String, Property>,
    dynamic: Dynamic,
    path: &str,
    name: &str,
    value: &Value,
    doc_id: &str,
    out: &mut ParsedDocument,
) -> Result<()> {
    match value {
        Value::Null => Ok(()),
        Value::Array(items) => {
            for item in items {
                walk_value(props, dynamic, path, name, item, doc_id, out)?;
            }
            Ok(())
        }
        Value::Object(inner) => {
            if !props.contains_key(name) {
                match dynamic {
                    Dynamic::Strict => return Err(strict_err("strict", path)),
                    Dynamic::StrictAllowTemplates => {
                        return Err(strict_err("strict_allow_templates", path));
                    }
                    Dynamic::False => return Ok(()),
                    Dynamic::True => {
                        props.insert(name.to_string(), Property::Object(BTreeMap::new()));
                        out.mapping_changed = true;
                    }
                }
            }
            match props.get_mut(name) {
                Some(Property::Object(inner_props)) => {
                    walk_object(inner_props, dynamic, path, inner, doc_id, out)
                }
                Some(Property::Field(f)) => Err(mapper_err(format!(
                    "failed to parse field [{path}] of type [{}] in document with id '{doc_id}'. \
                     Preview of field's value: '{value}'",
                    f.ty.name()
                ))),
                None => Ok(()),
            }
        }
        leaf => {
            if !props.contains_key(name) {
                match dynamic {
                    Dynamic::Strict => return Err(strict_err("strict", path)),
                    Dynamic::StrictAllowTemplates => {
                        return Err(strict_err("strict_allow_templates", path));
                    }
                    Dynamic::False => return Ok(()),
                    Dynamic::True => {
                        let f = match leaf {
                            Value::Bool(_) => FieldMapping::new(FieldType::Boolean),
                            Value::Number(n) if n.is_i64() || n.is_u64() => {
                                FieldMapping::new(FieldType::Long)
                            }
                            Value::Number(_) => FieldMapping::new(FieldType::Float),
                            Value::String(s) if looks_like_date(s) => {
                                let mut f = FieldMapping::new(FieldType::Date);
                                f.params.insert(
                                    "format".into(),
                                    Value::from("strict_date_optional_time||epoch_millis"),
                                );
                                f
                            }
                            _ => FieldMapping::dynamic_string(),
                        };
                        props.insert(name.to_string(), Property::Field(f));
                        out.mapping_changed = true;
                    }
                }
            }
            match props.get(name) {
                Some(Property::Field(f)) => {
                    if f.index {
                        emit_leaf(f, path, leaf, doc_id, out)?;
                    }
                    for (sub, sf) in &f.fields {
                        if sf.index {
                            emit_leaf(sf, &format!("{path}.{sub}"), leaf, doc_id, out)?;
                        }
                    }
                    Ok(())
                }
                Some(Property::Object(_)) => Err(mapper_err(format!(
                    "object mapping for [{path}] tried to parse field [{path}] as object, but \
                     found a concrete value"
                ))),
                None => Ok(()),
            }
        }
    }
}

fn strict_err(setting: &str, path: &str) -> EngineError {
    EngineError::new(
        crate::error::ErrorCode::StrictDynamicMapping,
        format!(
            "mapping set to {setting}, dynamic introduction of [{path}] within [_doc] is not \
             allowed"
        ),
    )
}

/// Whether a string looks like a date to dynamic mapping: a full `yyyy-MM-dd…` date.
fn looks_like_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b[..4].iter().all(u8::is_ascii_digit)
        && date::parse_date_str(s).is_some()
}

fn field_parse_err(path: &str, ty: FieldType, doc_id: &str, value: &Value) -> EngineError {
    let preview = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    mapper_err(format!(
        "failed to parse field [{path}] of type [{}] in document with id '{doc_id}'. Preview of \
         field's value: '{preview}'",
        ty.name()
    ))
}

/// Converts one JSON leaf to its typed value for a field of type `f.ty` and records it.
fn emit_leaf(
    f: &FieldMapping,
    path: &str,
    value: &Value,
    doc_id: &str,
    out: &mut ParsedDocument,
) -> Result<()> {
    let err = || field_parse_err(path, f.ty, doc_id, value);
    match typed_value(f, value) {
        Some(Some(typed)) => {
            match storage_of(f.ty) {
                Storage::Text => out.text.push((path.to_string(), typed)),
                Storage::Kw => out.kw.push((path.to_string(), typed)),
            }
            Ok(())
        }
        Some(None) => Ok(()),
        // OpenSearch's `ignore_malformed`: the value stays in `_source` and is not indexed.
        None if f.ignore_malformed => Ok(()),
        None => Err(err()),
    }
}

/// The typed value of one JSON leaf for a field of type `f.ty`: `None` if it does not fit the
/// type, `Some(None)` if it fits but is not indexed (a keyword above `ignore_above`).
fn typed_value(f: &FieldMapping, value: &Value) -> Option<Option<TypedValue>> {
    let typed = match f.ty {
        FieldType::Text => TypedValue::Text(scalar_to_string(value)?),
        FieldType::Keyword => {
            let s = scalar_to_string(value)?;
            if f.ignore_above
                .is_some_and(|max| s.chars().count() > max as usize)
            {
                return Some(None);
            }
            TypedValue::Keyword(s)
        }
        ty if ty.is_integer() => {
            let n = coerce_integer(value)?;
            let (lo, hi) = ty.integer_bounds();
            if n < lo || n > hi {
                return None;
            }
            TypedValue::I64(n)
        }
        FieldType::Float => {
            let n = coerce_float(value)?;
            // Stored as the f32 it is, widened back, as OpenSearch's float does.
            TypedValue::F64(f64::from(n as f32))
        }
        FieldType::Double => TypedValue::F64(coerce_float(value)?),
        FieldType::Date => TypedValue::Date(
            f.date_format
                .parse_value(value)
                .filter(|ms| crate::date::STORABLE_MILLIS.contains(ms))?,
        ),
        FieldType::Boolean => TypedValue::Bool(match value {
            Value::Bool(b) => *b,
            Value::String(s) if s == "true" => true,
            Value::String(s) if s == "false" || s.is_empty() => false,
            _ => return None,
        }),
        FieldType::Ip => match value {
            Value::String(s) => TypedValue::Keyword(crate::ip::encode(crate::ip::parse(s)?)),
            _ => return None,
        },
        _ => return None,
    };
    Some(Some(typed))
}

fn scalar_to_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Coerces a JSON value to an integer as OpenSearch's `coerce: true` does: numbers (fractions
/// truncated) and numeric strings.
pub fn coerce_integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= i64::MIN as f64 && *f <= i64::MAX as f64)
                .map(|f| f.trunc() as i64)
        }),
        Value::String(s) => s.trim().parse::<i64>().ok().or_else(|| {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && *f >= i64::MIN as f64 && *f <= i64::MAX as f64)
                .map(|f| f.trunc() as i64)
        }),
        _ => None,
    }
}

/// Coerces a JSON value to a float: numbers and numeric strings; not NaN or infinity.
pub fn coerce_float(v: &Value) -> Option<f64> {
    let f = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    f.is_finite().then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_and_render_round_trip() {
        let body = json!({"properties": {
            "title": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
            "count": {"type": "integer"},
            "user": {"properties": {"name": {"type": "keyword"}}}
        }});
        let m = Mapping::parse(&body).unwrap();
        assert_eq!(m.render(), body);
        assert_eq!(m.resolve("title.raw").unwrap().ty, FieldType::Keyword);
        assert_eq!(m.resolve("user.name").unwrap().storage, Storage::Kw);
        assert!(m.resolve("user").is_none());
    }

    #[test]
    fn test_fields_are_counted_as_opensearch_counts_its_mappers() {
        let m = Mapping::parse(&json!({"properties": {
            "title": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
            "user": {"properties": {"name": {"type": "keyword"}, "age": {"type": "integer"}}}
        }}))
        .unwrap();
        // title, title.raw, user, user.name, user.age
        assert_eq!(m.total_fields(), 5);
        let at = |total_fields, depth| {
            m.check_limits(&MappingLimits {
                total_fields,
                depth,
            })
        };
        assert!(at(5, 20).is_ok());
        let e = at(4, 20).unwrap_err();
        assert_eq!(e.reason, "Limit of total fields [4] has been exceeded");
        // `user` is at depth 2 (the root is 1).
        assert!(at(5, 2).is_ok());
        let e = at(5, 1).unwrap_err();
        assert_eq!(
            e.reason,
            "Limit of mapping depth [1] has been exceeded due to object field [user]"
        );
    }

    #[test]
    fn test_a_write_beyond_the_limits_is_refused_and_changes_nothing() {
        let limits = || MappingLimits {
            total_fields: 3,
            depth: 3,
        };
        let mut m = Mapping::default();
        m.parse_document_within(&json!({"a": 1, "b": {"c": 1}}), "1", &limits)
            .unwrap();
        let before = m.clone();
        let e = m
            .parse_document_within(&json!({"d": 1}), "2", &limits)
            .unwrap_err();
        assert_eq!(e.reason, "Limit of total fields [3] has been exceeded");
        assert_eq!(m, before);
        let deep = json!({"b": {"x": {"y": 1}}});
        let e = m.parse_document_within(&deep, "3", &limits).unwrap_err();
        assert!(e.reason.starts_with("Limit of"), "{}", e.reason);
        assert_eq!(m, before);
        // Known fields only: no check, nothing read.
        m.parse_document_within(&json!({"a": 2, "b": {"c": 3}}), "4", &|| unreachable!())
            .unwrap();
        // A replay is not bounded: what was written loads whatever the limits are now.
        let mut replayed = Mapping::default();
        replayed
            .parse_document(&json!({"a": 1, "d": 1, "e": {"f": {"g": 1}}}), "5")
            .unwrap();
        assert_eq!(replayed.total_fields(), 5);
    }

    #[test]
    fn test_unknown_type_is_rejected_naming_field() {
        let e = Mapping::parse(&json!({"properties": {"f": {"type": "geo"}}})).unwrap_err();
        assert_eq!(e.reason, "No handler for type [geo] declared on field [f]");
    }

    #[test]
    fn test_dynamic_mapping_infers_opensearch_types() {
        let mut m = Mapping::default();
        let doc = json!({"s": "hello", "n": 3, "f": 1.5, "b": true, "d": "2024-01-01T00:00:00Z",
                          "o": {"x": "y"}});
        let parsed = m.parse_document(&doc, "1").unwrap();
        assert!(parsed.mapping_changed);
        assert_eq!(m.resolve("s").unwrap().ty, FieldType::Text);
        assert_eq!(m.resolve("s.keyword").unwrap().ty, FieldType::Keyword);
        assert_eq!(m.resolve("n").unwrap().ty, FieldType::Long);
        assert_eq!(m.resolve("f").unwrap().ty, FieldType::Float);
        assert_eq!(m.resolve("b").unwrap().ty, FieldType::Boolean);
        assert_eq!(m.resolve("d").unwrap().ty, FieldType::Date);
        assert_eq!(m.resolve("o.x.keyword").unwrap().ty, FieldType::Keyword);
    }

    #[test]
    fn test_bad_value_is_rejected_and_mapping_untouched() {
        let mut m = Mapping::parse(&json!({"properties": {"n": {"type": "integer"}}})).unwrap();
        let before = m.clone();
        let e = m
            .parse_document(&json!({"n": "abc", "new": 1}), "7")
            .unwrap_err();
        assert!(
            e.reason
                .contains("failed to parse field [n] of type [integer]"),
            "{}",
            e.reason
        );
        assert_eq!(m, before);
        let e = m
            .parse_document(&json!({"n": 3_000_000_000u64}), "7")
            .unwrap_err();
        assert!(e.reason.contains("[n]"));
    }

    #[test]
    fn test_dotted_keys_equal_nested_objects() {
        let mut m = Mapping::default();
        let a = m.parse_document(&json!({"user.name": "x"}), "1").unwrap();
        let b = m
            .parse_document(&json!({"user": {"name": "x"}}), "2")
            .unwrap();
        assert_eq!(a.kw, b.kw);
        assert_eq!(a.kw[0].0, "user.name.keyword");
    }

    #[test]
    fn test_strict_rejects_new_fields() {
        let mut m = Mapping::parse(&json!({"dynamic": "strict", "properties": {}})).unwrap();
        let e = m.parse_document(&json!({"x": 1}), "1").unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::StrictDynamicMapping);
        assert_eq!(
            e.reason,
            "mapping set to strict, dynamic introduction of [x] within [_doc] is not allowed"
        );
    }
}
