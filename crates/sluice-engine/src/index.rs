//! One index: its tantivy index, mapping, settings, translog and the writes not yet refreshed.
//!
//! # Invariants
//! - Every acknowledged write is in the translog (fsynced) or in a tantivy commit whose payload
//!   sequence number covers it.
//! - `live` holds exactly the documents written since the last refresh, so a real-time get sees
//!   them before the searcher does; a refresh commits, reloads the reader and empties `live`
//!   under the same lock.
//! - The mapping snapshot readers see (`mapping`) is replaced, never mutated, and is persisted
//!   to `index.json` before a write that grew it is acknowledged.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use tantivy::schema::{OwnedValue, TantivyDocument, Value as _};
use tantivy::{DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, Term};

use crate::aliases::AliasMeta;
use crate::error::{EngineError, ErrorCode, Result, tantivy_error};
use crate::mapping::{Mapping, MappingLimits, ParsedDocument, TypedValue};
use crate::schema::{self, Fields};
use crate::translog::{Record, Translog};
use crate::versioning::{Current, Versioning};

/// Heap the index writer may use before it flushes a segment, in bytes; 64 MB is tantivy's
/// usual recommendation for bulk loading and fits many indices in the node's memory.
const WRITER_HEAP_BYTES: usize = 64 * 1024 * 1024;
/// OpenSearch's default `index.max_result_window`.
pub const DEFAULT_MAX_RESULT_WINDOW: u64 = 10_000;
/// OpenSearch's default `index.max_terms_count`: the most terms a `terms` query may hold.
pub const DEFAULT_MAX_TERMS_COUNT: u64 = 65_536;
/// OpenSearch's default `index.refresh_interval`.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// OpenSearch's default `index.gc_deletes`: how long a delete's version is remembered, so a
/// late write with an older external version, or a compare-and-set against the delete, is
/// still judged against it.
pub const DEFAULT_GC_DELETES: Duration = Duration::from_secs(60);

const META_FILE: &str = "index.json";
const TANTIVY_DIR: &str = "tantivy";
const TRANSLOG_FILE: &str = "translog.log";

/// A document changed since the last refresh.
#[derive(Debug, Clone)]
struct LiveDoc {
    /// The new source, or `None` for a deletion.
    source: Option<Arc<Value>>,
    version: u64,
    seq_no: u64,
    /// The routing value it was written with.
    routing: Option<Arc<str>>,
}

/// A delete remembered after the refresh that made it searchable (OpenSearch's delete
/// tombstone in the live version map), until `index.gc_deletes` has passed.
#[derive(Debug, Clone, Copy)]
struct Tombstone {
    version: u64,
    seq_no: u64,
    at: Instant,
}

/// The state only writers touch, behind one lock.
struct WriteState {
    writer: IndexWriter,
    translog: Translog,
    live: HashMap<String, LiveDoc>,
    /// Deletes already refreshed but younger than `index.gc_deletes`.
    tombstones: HashMap<String, Tombstone>,
    next_seq_no: u64,
    /// Whether there are writes not yet committed.
    dirty: bool,
    mapping: Mapping,
}

/// How a document write wants its id handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpType {
    /// Create or replace.
    Index,
    /// Create only; an existing id is a version conflict.
    Create,
}

/// One document operation of a bulk request or a document API call.
#[derive(Debug, Clone)]
pub enum DocOp {
    /// Index (or create) a document; `id: None` makes one up.
    Index {
        /// The document id, if given.
        id: Option<String>,
        /// The document.
        source: Value,
        /// Whether an existing document may be replaced.
        op_type: OpType,
        /// Compare-and-set and version conditions (validated by the caller).
        versioning: Versioning,
        /// The routing value (`routing`), stored with the document and echoed as `_routing`.
        routing: Option<String>,
    },
    /// Delete a document.
    Delete {
        /// The document id.
        id: String,
        /// Compare-and-set and version conditions (validated by the caller).
        versioning: Versioning,
        /// The routing value (`routing`); an index whose mapping requires one refuses a delete
        /// without it.
        routing: Option<String>,
    },
    /// Merge a partial document into an existing one.
    Update {
        /// The document id.
        id: String,
        /// The partial document.
        doc: Value,
        /// Index `doc` itself when the document does not exist.
        doc_as_upsert: bool,
        /// The document to index when the document does not exist.
        upsert: Option<Value>,
        /// `if_seq_no`/`if_primary_term` the existing document must carry.
        versioning: Versioning,
        /// `detect_noop`: an update that changes nothing is a `noop` (true, the default) or
        /// still writes a new version (false).
        detect_noop: bool,
        /// Whether the result carries the document as written (`_source` on an update).
        return_source: bool,
        /// The routing value (`routing`) the written document is stored with, as OpenSearch's
        /// update writes it.
        routing: Option<String>,
    },
}

impl DocOp {
    /// An unconditional index or create of `source`.
    pub fn index(id: Option<String>, source: Value, op_type: OpType) -> DocOp {
        DocOp::Index {
            id,
            source,
            op_type,
            versioning: Versioning::default(),
            routing: None,
        }
    }

    /// The routing value the operation names.
    pub fn routing(&self) -> Option<&str> {
        match self {
            DocOp::Index { routing, .. }
            | DocOp::Delete { routing, .. }
            | DocOp::Update { routing, .. } => routing.as_deref(),
        }
    }

    /// The document id the operation names (`None` for an index with a generated id).
    pub fn id(&self) -> Option<&str> {
        match self {
            DocOp::Index { id, .. } => id.as_deref(),
            DocOp::Delete { id, .. } | DocOp::Update { id, .. } => Some(id),
        }
    }
}

/// The outcome of one successful document operation.
#[derive(Debug, Clone, PartialEq)]
pub struct DocWriteResult {
    /// The index written.
    pub index: String,
    /// The document id.
    pub id: String,
    /// The document's version after the write.
    pub version: u64,
    /// The write's sequence number.
    pub seq_no: u64,
    /// `created`, `updated`, `deleted`, `not_found` or `noop`.
    pub result: &'static str,
    /// The HTTP status of this item: 201 created, 200 otherwise, 404 not found.
    pub status: u16,
    /// Shard copies the write was meant for (1 + replicas); only the primary exists here.
    pub shards_total: u64,
    /// The document after the write, when an update asked for it (`_source`).
    pub source: Option<Arc<Value>>,
}

impl DocWriteResult {
    /// Renders the result as OpenSearch's document API and bulk items do.
    pub fn to_json(&self) -> Value {
        json!({
            "_index": self.index,
            "_id": self.id,
            "_version": self.version,
            "result": self.result,
            "_shards": {"total": self.shards_total, "successful": 1, "failed": 0},
            "_seq_no": self.seq_no,
            "_primary_term": crate::search::PRIMARY_TERM,
        })
    }
}

/// A document as a get returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDoc {
    /// The document id.
    pub id: String,
    /// Its version.
    pub version: u64,
    /// Its sequence number.
    pub seq_no: u64,
    /// The routing value it was written with, rendered as `_routing`.
    pub routing: Option<Arc<str>>,
    /// The document.
    pub source: Arc<Value>,
}

/// Persistent description of an index, kept in `index.json`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct IndexMeta {
    name: String,
    uuid: String,
    creation_date: i64,
    settings: BTreeMap<String, String>,
    mappings: Value,
    /// The index's aliases (absent in files written before aliases existed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    aliases: BTreeMap<String, AliasMeta>,
    /// Whether the index is closed (`_close`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    closed: bool,
}

/// An open index.
pub struct IndexHandle {
    name: String,
    uuid: String,
    creation_date: i64,
    dir: PathBuf,
    index: Index,
    fields: Fields,
    reader: IndexReader,
    /// Flat `index.*` settings; replaced whole by a settings update (under the write lock, so
    /// a meta file written for a mapping change carries the current settings).
    settings: RwLock<Arc<BTreeMap<String, String>>>,
    mapping: RwLock<Arc<Mapping>>,
    /// The index's aliases; replaced whole (under the write lock) by alias changes.
    aliases: RwLock<Arc<BTreeMap<String, AliasMeta>>>,
    /// Whether the index is closed: no reads or writes until `_open`.
    closed: std::sync::atomic::AtomicBool,
    /// The counters `_stats` reports.
    stats: crate::index_stats::IndexStats,
    state: Mutex<WriteState>,
}

impl std::fmt::Debug for IndexHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexHandle")
            .field("name", &self.name)
            .finish()
    }
}

pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Syncs directory `dir`, so the renames and removals in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Whether `dir` holds a whole index: its description ([`META_FILE`]) is written last when an
/// index is created, so a directory without it is a creation a crash cut short.
pub(crate) fn is_complete(dir: &Path) -> bool {
    dir.join(META_FILE).is_file()
}

impl IndexHandle {
    /// Creates a new index in `dir` (which must not exist).
    pub fn create(
        dir: &Path,
        name: &str,
        mapping: Mapping,
        settings: BTreeMap<String, String>,
        aliases: BTreeMap<String, AliasMeta>,
        now_millis: i64,
    ) -> Result<IndexHandle> {
        std::fs::create_dir_all(dir.join(TANTIVY_DIR))?;
        let meta = IndexMeta {
            name: name.to_string(),
            uuid: uuid::Uuid::new_v4().simple().to_string()[..22].to_string(),
            creation_date: now_millis,
            settings,
            mappings: mapping.render(),
            aliases,
            closed: false,
        };
        let (schema, _) = schema::build_schema();
        Index::create_in_dir(dir.join(TANTIVY_DIR), schema).map_err(tantivy_error)?;
        write_atomically(
            &dir.join(META_FILE),
            &serde_json::to_vec_pretty(&meta).unwrap_or_default(),
        )?;
        IndexHandle::open(dir)
    }

    /// Opens an existing index from `dir`, replaying its translog.
    pub fn open(dir: &Path) -> Result<IndexHandle> {
        let meta_bytes = std::fs::read(dir.join(META_FILE))?;
        let meta: IndexMeta = serde_json::from_slice(&meta_bytes).map_err(|e| {
            EngineError::internal(format!("corrupt {} in {}: {e}", META_FILE, dir.display()))
        })?;
        let mut mapping = Mapping::parse(&meta.mappings)?;
        add_missing_schema_fields(&dir.join(TANTIVY_DIR))?;
        let index = Index::open_in_dir(dir.join(TANTIVY_DIR)).map_err(tantivy_error)?;
        let fields = schema::fields_of(&index.schema()).ok_or_else(|| {
            EngineError::internal(format!("index in {} has a foreign schema", dir.display()))
        })?;
        let committed_seq: Option<u64> = index
            .load_metas()
            .map_err(tantivy_error)?
            .payload
            .as_deref()
            .and_then(|p| p.parse().ok());
        let mut writer: IndexWriter = index.writer(WRITER_HEAP_BYTES).map_err(tantivy_error)?;
        let (mut translog, records) = Translog::open(&dir.join(TRANSLOG_FILE))?;
        let mut next_seq_no = committed_seq.map_or(0, |s| s + 1);
        let mut replayed = 0usize;
        let mut tombstones = HashMap::new();
        for rec in records {
            if committed_seq.is_some_and(|c| rec.seq() <= c) {
                continue;
            }
            match &rec {
                Record::Index {
                    seq,
                    id,
                    version,
                    source,
                    routing,
                } => {
                    let parsed = mapping.parse_document(source, id)?;
                    writer.delete_term(Term::from_field_text(fields.id, id));
                    let stored = StoredFields {
                        id,
                        version: *version,
                        seq_no: *seq,
                        routing: routing.as_deref(),
                    };
                    writer
                        .add_document(to_tantivy(&fields, &stored, source, &parsed))
                        .map_err(tantivy_error)?;
                    // A document indexed again after its delete is live: the delete's
                    // tombstone would otherwise answer its version checks, as `put` ensures
                    // it does not while the node runs.
                    tombstones.remove(id);
                }
                Record::Delete { id, seq, version } => {
                    writer.delete_term(Term::from_field_text(fields.id, id));
                    if *version > 0 {
                        tombstones.insert(
                            id.clone(),
                            Tombstone {
                                version: *version,
                                seq_no: *seq,
                                at: Instant::now(),
                            },
                        );
                    }
                }
            }
            next_seq_no = next_seq_no.max(rec.seq() + 1);
            replayed += 1;
        }
        if replayed > 0 {
            tracing::info!(index = %meta.name, replayed, "replayed translog");
            let mut prepared = writer.prepare_commit().map_err(tantivy_error)?;
            prepared.set_payload(&(next_seq_no - 1).to_string());
            prepared.commit().map_err(tantivy_error)?;
            write_atomically(
                &dir.join(META_FILE),
                &serde_json::to_vec_pretty(&IndexMeta {
                    mappings: mapping.render(),
                    ..meta.clone()
                })
                .unwrap_or_default(),
            )?;
        }
        translog.truncate()?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(tantivy_error)?;
        Ok(IndexHandle {
            name: meta.name,
            uuid: meta.uuid,
            creation_date: meta.creation_date,
            dir: dir.to_path_buf(),
            index,
            fields,
            reader,
            settings: RwLock::new(Arc::new(meta.settings)),
            mapping: RwLock::new(Arc::new(mapping.clone())),
            aliases: RwLock::new(Arc::new(meta.aliases)),
            closed: std::sync::atomic::AtomicBool::new(meta.closed),
            stats: crate::index_stats::IndexStats::default(),
            state: Mutex::new(WriteState {
                writer,
                translog,
                live: HashMap::new(),
                tombstones,
                next_seq_no,
                dirty: false,
                mapping,
            }),
        })
    }

    /// The index name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The index uuid.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// Creation time, epoch millis.
    pub fn creation_date(&self) -> i64 {
        self.creation_date
    }

    /// The directory holding the index.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes in the translog now: the writes since the last commit (the log is emptied at
    /// each commit), 0 if the file cannot be read.
    pub fn translog_size_in_bytes(&self) -> u64 {
        std::fs::metadata(self.dir.join(TRANSLOG_FILE)).map_or(0, |m| m.len())
    }

    /// The tantivy index.
    pub fn tantivy(&self) -> &Index {
        &self.index
    }

    /// The schema field handles.
    pub fn fields(&self) -> Fields {
        self.fields
    }

    /// A snapshot of the current mapping.
    pub fn mapping(&self) -> Arc<Mapping> {
        self.mapping.read().clone()
    }

    /// A searcher over the last refresh.
    pub fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// The index settings, flat (`index.number_of_shards` → `"1"`).
    pub fn settings(&self) -> Arc<BTreeMap<String, String>> {
        self.settings.read().clone()
    }

    /// A setting parsed as a number, or `default`.
    pub fn setting_u64(&self, key: &str, default: u64) -> u64 {
        self.settings()
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// `index.max_result_window`.
    pub fn max_result_window(&self) -> u64 {
        self.setting_u64("index.max_result_window", DEFAULT_MAX_RESULT_WINDOW)
    }

    /// `index.mapping.total_fields.limit` and `index.mapping.depth.limit`: how far writes may
    /// grow the mapping.
    pub fn mapping_limits(&self) -> MappingLimits {
        mapping_limits_of(&self.settings())
    }

    /// `index.max_terms_count`: the most terms a `terms` query on this index may hold.
    pub fn max_terms_count(&self) -> u64 {
        self.setting_u64("index.max_terms_count", DEFAULT_MAX_TERMS_COUNT)
    }

    /// Copies a write is meant for: the primary plus `index.number_of_replicas`.
    pub fn shards_total(&self) -> u64 {
        1 + self.setting_u64("index.number_of_replicas", 1)
    }

    /// `index.number_of_shards` (accepted and echoed; an index is one tantivy index).
    pub fn number_of_shards(&self) -> u64 {
        self.setting_u64("index.number_of_shards", 1)
    }

    /// `index.refresh_interval`; `None` when periodic refresh is disabled (`-1`).
    pub fn refresh_interval(&self) -> Option<Duration> {
        match self
            .settings()
            .get("index.refresh_interval")
            .map(String::as_str)
        {
            None => Some(DEFAULT_REFRESH_INTERVAL),
            // Validated when set; `-1` (of any unit) disables periodic refresh.
            Some(v) => match sluice_wire::parse_time_value(v, "index.refresh_interval") {
                Ok(t) => t.duration_opt(),
                Err(_) => Some(DEFAULT_REFRESH_INTERVAL),
            },
        }
    }

    /// `index.gc_deletes`: how long a delete's version is remembered after its refresh.
    pub fn gc_deletes(&self) -> Duration {
        self.settings()
            .get(GC_DELETES)
            .and_then(|v| sluice_wire::parse_time_value(v, GC_DELETES).ok())
            .map_or(DEFAULT_GC_DELETES, |t| t.duration_opt().unwrap_or_default())
    }

    /// The index's aliases.
    pub fn aliases(&self) -> Arc<BTreeMap<String, AliasMeta>> {
        self.aliases.read().clone()
    }

    /// Replaces the index's aliases, persisted before they take effect.
    pub fn set_aliases(&self, aliases: BTreeMap<String, AliasMeta>) -> Result<()> {
        let st = self.state.lock();
        self.persist_all(&st.mapping, &self.settings(), &aliases, self.is_closed())?;
        *self.aliases.write() = Arc::new(aliases);
        Ok(())
    }

    /// Whether the index is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the index is hidden (`index.hidden: true`): wildcards skip it unless asked.
    pub fn is_hidden(&self) -> bool {
        self.settings()
            .get("index.hidden")
            .is_some_and(|v| v == "true")
    }

    /// Number of live documents visible to search.
    pub fn num_docs(&self) -> u64 {
        self.searcher().num_docs()
    }

    /// Bytes the index occupies on disk.
    pub fn size_in_bytes(&self) -> u64 {
        fn walk(p: &Path) -> u64 {
            let Ok(rd) = std::fs::read_dir(p) else {
                return 0;
            };
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        walk(&self.dir)
    }

    fn persist_meta(&self, mapping: &Mapping) -> Result<()> {
        self.persist_meta_with(mapping, &self.settings())
    }

    fn persist_meta_with(
        &self,
        mapping: &Mapping,
        settings: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.persist_all(mapping, settings, &self.aliases(), self.is_closed())
    }

    /// Writes `index.json` with every part given (the others as they are).
    fn persist_all(
        &self,
        mapping: &Mapping,
        settings: &BTreeMap<String, String>,
        aliases: &BTreeMap<String, AliasMeta>,
        closed: bool,
    ) -> Result<()> {
        let meta = IndexMeta {
            name: self.name.clone(),
            uuid: self.uuid.clone(),
            creation_date: self.creation_date,
            settings: settings.clone(),
            mappings: mapping.render(),
            aliases: aliases.clone(),
            closed,
        };
        write_atomically(
            &self.dir.join(META_FILE),
            &serde_json::to_vec_pretty(&meta).unwrap_or_default(),
        )
    }

    /// The block that refuses writes to this index, if one is set: OpenSearch's
    /// `cluster_block_exception` (403).
    fn write_block(&self, metadata: bool) -> Option<EngineError> {
        let settings = self.settings();
        let on = |key: &str| settings.get(key).is_some_and(|v| v == "true");
        let block = if on(BLOCKS_READ_ONLY) {
            "FORBIDDEN/5/index read-only (api)"
        } else if on(BLOCKS_WRITE) && !metadata {
            "FORBIDDEN/8/index write (api)"
        } else {
            return None;
        };
        Some(EngineError::new(
            ErrorCode::ClusterBlock,
            format!("index [{}] blocked by: [{block}];", self.name),
        ))
    }

    /// Applies a settings update (`PUT /{index}/_settings`): only dynamic settings, a `null`
    /// value resets a setting to its default; persisted before it takes effect.
    pub fn update_settings(&self, update: &Value) -> Result<()> {
        let flat = flatten_settings(update)?;
        let not_dynamic: Vec<&str> = flat
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !is_dynamic(k))
            .collect();
        // Unknown and private keys, and bad values, are named as such before "not dynamic".
        for (key, value) in &flat {
            match value {
                Some(v) => check_setting(key, v)?,
                None => check_key(key)?,
            }
        }
        if !not_dynamic.is_empty() {
            return Err(EngineError::illegal_argument(format!(
                "Can't update non dynamic settings [[{}]] for open indices [[{}/{}]]",
                not_dynamic.join(", "),
                self.name,
                self.uuid
            )));
        }
        let st = self.state.lock();
        let mut next = (*self.settings()).clone();
        for (key, value) in flat {
            match value {
                Some(v) => {
                    next.insert(key, v);
                }
                None if key == "index.number_of_replicas" => {
                    next.insert(key, "1".into());
                }
                None => {
                    next.remove(&key);
                }
            }
        }
        self.persist_meta_with(&st.mapping, &next)?;
        *self.settings.write() = Arc::new(next);
        Ok(())
    }

    /// Merges `update` into the mapping and persists it.
    pub fn put_mapping(&self, update: &Mapping) -> Result<()> {
        if let Some(block) = self.write_block(true) {
            return Err(block);
        }
        let mut st = self.state.lock();
        let mut next = st.mapping.clone();
        next.merge(update)?;
        if next != st.mapping {
            next.check_limits(&self.mapping_limits())?;
        }
        // The writes so far are committed first, under the same lock: the translog never holds
        // a document written under the old mapping once the new one is stored, so a replay
        // after a crash never parses one with a mapping it may not fit (a field that was
        // unmapped, or a multi-field added to it, whose type its value does not have).
        self.refresh_locked(&mut st)?;
        self.persist_meta(&next)?;
        st.mapping = next.clone();
        *self.mapping.write() = Arc::new(next);
        Ok(())
    }

    /// Applies document operations in order; each gets its own result, and a failed one leaves
    /// the others untouched. All successful writes are durable when this returns.
    pub fn apply(&self, ops: Vec<DocOp>) -> Vec<Result<DocWriteResult>> {
        let mut st = self.state.lock();
        let mapping_before = st.mapping.clone();
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            let started = Instant::now();
            let is_delete = matches!(op, DocOp::Delete { .. });
            let result = self.apply_one(&mut st, op);
            match &result {
                Ok(r) if r.result == "noop" => self.stats.record_noop(),
                Ok(_) if is_delete => self.stats.record_delete(started.elapsed()),
                Ok(_) => self.stats.record_index(started.elapsed(), true),
                Err(_) => self.stats.record_index(started.elapsed(), false),
            }
            results.push(result);
        }
        let mapping_changed = st.mapping != mapping_before;
        let durable = (|| -> Result<()> {
            if mapping_changed {
                self.persist_meta(&st.mapping)?;
                *self.mapping.write() = Arc::new(st.mapping.clone());
            }
            st.translog.sync()
        })();
        if let Err(e) = durable {
            // Nothing is acknowledged unless it is durable.
            tracing::error!(index = %self.name, error = %e, "failed to make writes durable");
            return results
                .into_iter()
                .map(|r| r.and_then(|_| Err(e.clone())))
                .collect();
        }
        results
    }

    /// What the writer knows of `id`: live writes first, then recent deletes, then the index.
    fn current(&self, st: &WriteState, id: &str) -> Result<(Current, Option<StoredDoc>)> {
        if let Some(live) = st.live.get(id) {
            return Ok(match &live.source {
                Some(s) => (
                    Current::Live {
                        version: live.version,
                        seq_no: live.seq_no,
                    },
                    Some(StoredDoc {
                        id: id.to_string(),
                        version: live.version,
                        seq_no: live.seq_no,
                        routing: live.routing.clone(),
                        source: s.clone(),
                    }),
                ),
                None => (
                    Current::Deleted {
                        version: live.version,
                        seq_no: live.seq_no,
                    },
                    None,
                ),
            });
        }
        if let Some(t) = st.tombstones.get(id)
            && t.at.elapsed() < self.gc_deletes()
        {
            return Ok((
                Current::Deleted {
                    version: t.version,
                    seq_no: t.seq_no,
                },
                None,
            ));
        }
        Ok(match self.get_committed(id)? {
            Some(doc) => (
                Current::Live {
                    version: doc.version,
                    seq_no: doc.seq_no,
                },
                Some(doc),
            ),
            None => (Current::Unknown, None),
        })
    }

    fn apply_one(&self, st: &mut WriteState, op: DocOp) -> Result<DocWriteResult> {
        if let Some(block) = self.write_block(false) {
            return Err(block);
        }
        if st.mapping.routing_required() && op.routing().is_none() {
            return Err(routing_missing(&self.name, op.id()));
        }
        match op {
            DocOp::Index {
                id,
                source,
                op_type,
                versioning,
                routing,
            } => {
                let Some(id) = id else {
                    // A generated id cannot collide, so no condition can apply.
                    let id = new_doc_id();
                    return self.put(st, id, routing, source, 1, true, true, false);
                };
                validate_id(&id)?;
                let (current, _) = self.current(st, &id)?;
                if op_type == OpType::Create
                    && let Current::Live { version, .. } = current
                {
                    return Err(crate::versioning::conflict(
                        &self.name,
                        &id,
                        &format!("document already exists (current version [{version}])"),
                    ));
                }
                let version = versioning.check_write(&self.name, &id, current)?;
                self.put(
                    st,
                    id,
                    routing,
                    source,
                    version,
                    !current.is_live(),
                    false,
                    false,
                )
            }
            DocOp::Update {
                id,
                doc,
                doc_as_upsert,
                upsert,
                versioning,
                detect_noop,
                return_source,
                routing,
            } => {
                validate_id(&id)?;
                if !doc.is_object() {
                    return Err(EngineError::new(
                        ErrorCode::ActionRequestValidation,
                        "Validation Failed: 1: script or doc is missing;",
                    ));
                }
                let (current, existing) = self.current(st, &id)?;
                match existing {
                    Some(existing) => {
                        // The update reads the document, then writes it only if it is still
                        // the one read (here both happen under the write lock).
                        let version = versioning.check_write(&self.name, &id, current)?;
                        let mut merged = (*existing.source).clone();
                        let changed = merge_json(&mut merged, &doc);
                        if !changed && detect_noop {
                            return Ok(DocWriteResult {
                                index: self.name.clone(),
                                id,
                                version: existing.version,
                                seq_no: existing.seq_no,
                                result: "noop",
                                status: 200,
                                shards_total: self.shards_total(),
                                source: return_source.then(|| existing.source.clone()),
                            });
                        }
                        self.put(
                            st,
                            id,
                            routing,
                            merged,
                            version,
                            false,
                            false,
                            return_source,
                        )
                    }
                    None => {
                        let source = if doc_as_upsert { Some(doc) } else { upsert };
                        match source {
                            Some(source) => {
                                let version =
                                    Versioning::default().check_write(&self.name, &id, current)?;
                                self.put(
                                    st,
                                    id,
                                    routing,
                                    source,
                                    version,
                                    true,
                                    false,
                                    return_source,
                                )
                            }
                            None => Err(EngineError::new(
                                ErrorCode::DocumentMissing,
                                format!("[{id}]: document missing"),
                            )
                            .with_index(&self.name)
                            .with_extra("shard", Value::from("0"))),
                        }
                    }
                }
            }
            DocOp::Delete { id, versioning, .. } => {
                validate_id(&id)?;
                let (current, _) = self.current(st, &id)?;
                let version = versioning.check_write(&self.name, &id, current)?;
                let seq_no = st.next_seq_no;
                st.translog.append(&Record::Delete {
                    seq: seq_no,
                    id: id.clone(),
                    version,
                })?;
                st.next_seq_no += 1;
                st.writer
                    .delete_term(Term::from_field_text(self.fields.id, &id));
                st.tombstones.remove(&id);
                st.live.insert(
                    id.clone(),
                    LiveDoc {
                        source: None,
                        version,
                        seq_no,
                        routing: None,
                    },
                );
                st.dirty = true;
                let found = current.is_live();
                Ok(DocWriteResult {
                    index: self.name.clone(),
                    id,
                    version,
                    seq_no,
                    result: if found { "deleted" } else { "not_found" },
                    status: if found { 200 } else { 404 },
                    shards_total: self.shards_total(),
                    source: None,
                })
            }
        }
    }

    /// Writes `source` as `id` (with `routing`) at `version`; `created` says whether no live
    /// copy existed.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        st: &mut WriteState,
        id: String,
        routing: Option<String>,
        source: Value,
        version: u64,
        created: bool,
        generated_id: bool,
        return_source: bool,
    ) -> Result<DocWriteResult> {
        // parse_document_within leaves the mapping as it was when it fails.
        let parsed = st
            .mapping
            .parse_document_within(&source, &id, &|| self.mapping_limits())?;
        let seq_no = st.next_seq_no;
        let stored = StoredFields {
            id: &id,
            version,
            seq_no,
            routing: routing.as_deref(),
        };
        let doc = to_tantivy(&self.fields, &stored, &source, &parsed);
        st.translog.append_index(&stored, &source)?;
        st.next_seq_no += 1;
        if !generated_id {
            // Replaces any earlier copy, committed or not; generated ids cannot collide.
            st.writer
                .delete_term(Term::from_field_text(self.fields.id, &id));
            st.tombstones.remove(&id);
        }
        st.writer.add_document(doc).map_err(tantivy_error)?;
        let source = Arc::new(source);
        st.live.insert(
            id.clone(),
            LiveDoc {
                source: Some(source.clone()),
                version,
                seq_no,
                routing: routing.map(Arc::from),
            },
        );
        st.dirty = true;
        Ok(DocWriteResult {
            index: self.name.clone(),
            id,
            version,
            seq_no,
            result: if created { "created" } else { "updated" },
            status: if created { 201 } else { 200 },
            shards_total: self.shards_total(),
            source: return_source.then_some(source),
        })
    }

    /// Real-time get: the latest write of `id`, refreshed or not.
    pub fn get(&self, id: &str) -> Result<Option<StoredDoc>> {
        let started = Instant::now();
        let doc = self.get_uncounted(id);
        if let Ok(found) = &doc {
            self.stats.record_get(started.elapsed(), found.is_some());
        }
        doc
    }

    fn get_uncounted(&self, id: &str) -> Result<Option<StoredDoc>> {
        {
            let st = self.state.lock();
            if let Some(live) = st.live.get(id) {
                return Ok(live.source.as_ref().map(|s| StoredDoc {
                    id: id.to_string(),
                    version: live.version,
                    seq_no: live.seq_no,
                    routing: live.routing.clone(),
                    source: s.clone(),
                }));
            }
        }
        self.get_committed(id)
    }

    /// Looks `id` up in the last refreshed searcher.
    fn get_committed(&self, id: &str) -> Result<Option<StoredDoc>> {
        let searcher = self.searcher();
        let term = Term::from_field_text(self.fields.id, id);
        for (ord, seg) in searcher.segment_readers().iter().enumerate() {
            let inv = seg.inverted_index(self.fields.id).map_err(tantivy_error)?;
            let Some(mut postings) =
                inv.read_postings(&term, tantivy::schema::IndexRecordOption::Basic)?
            else {
                continue;
            };
            use tantivy::DocSet;
            let mut doc = postings.doc();
            while doc != tantivy::TERMINATED {
                if seg.alive_bitset().is_none_or(|b| b.is_alive(doc)) {
                    let addr = DocAddress::new(ord as u32, doc);
                    return Ok(Some(self.load_doc(&searcher, addr)?));
                }
                doc = postings.advance();
            }
        }
        Ok(None)
    }

    /// Loads a stored document by address.
    pub fn load_doc(&self, searcher: &Searcher, addr: DocAddress) -> Result<StoredDoc> {
        let doc: TantivyDocument = searcher.doc(addr).map_err(tantivy_error)?;
        let id = doc
            .get_first(self.fields.id)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        let version = doc
            .get_first(self.fields.version)
            .and_then(|v| v.as_u64())
            .unwrap_or(1);
        let seq_no = doc
            .get_first(self.fields.seq_no)
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        let routing = doc
            .get_first(self.fields.routing)
            .and_then(|v| v.as_str())
            .map(Arc::from);
        let source = doc
            .get_first(self.fields.source)
            .and_then(|v| v.as_bytes())
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        Ok(StoredDoc {
            id,
            version,
            seq_no,
            routing,
            source: Arc::new(source),
        })
    }

    /// Makes all writes so far searchable: commit, reload the reader, empty the live map.
    pub fn refresh(&self) -> Result<()> {
        let mut st = self.state.lock();
        self.refresh_locked(&mut st)
    }

    /// [`IndexHandle::refresh`] with the write state already locked.
    fn refresh_locked(&self, st: &mut WriteState) -> Result<()> {
        let started = Instant::now();
        if !st.dirty {
            return Ok(());
        }
        let stats = &self.stats;
        let _counted = scopeguard(move || stats.record_refresh(started.elapsed()));
        let last_seq = st.next_seq_no.saturating_sub(1);
        let mut prepared = st.writer.prepare_commit().map_err(tantivy_error)?;
        prepared.set_payload(&last_seq.to_string());
        prepared.commit().map_err(tantivy_error)?;
        self.reader.reload().map_err(tantivy_error)?;
        // Deletes leave the live map as tombstones, remembered for `index.gc_deletes`.
        let now = Instant::now();
        let keep = self.gc_deletes();
        st.tombstones
            .retain(|_, t| now.saturating_duration_since(t.at) < keep);
        let deletes: Vec<(String, Tombstone)> = st
            .live
            .drain()
            .filter(|(_, d)| d.source.is_none())
            .map(|(id, d)| {
                let t = Tombstone {
                    version: d.version,
                    seq_no: d.seq_no,
                    at: now,
                };
                (id, t)
            })
            .collect();
        if !keep.is_zero() {
            st.tombstones.extend(deletes);
        }
        st.dirty = false;
        st.translog.truncate()?;
        Ok(())
    }

    /// Whether there are writes not yet refreshed.
    pub fn is_dirty(&self) -> bool {
        self.state.lock().dirty
    }

    /// The counters `_stats` reports.
    pub fn stats(&self) -> &crate::index_stats::IndexStats {
        &self.stats
    }

    /// Closes the index (`_close`): commits its writes, then refuses reads and writes until
    /// [`IndexHandle::open_again`]; the state is persisted, so it survives a restart.
    pub fn close(&self) -> Result<()> {
        self.refresh()?;
        let st = self.state.lock();
        self.persist_all(&st.mapping, &self.settings(), &self.aliases(), true)?;
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Opens a closed index (`_open`).
    pub fn open_again(&self) -> Result<()> {
        let st = self.state.lock();
        self.persist_all(&st.mapping, &self.settings(), &self.aliases(), false)?;
        self.closed
            .store(false, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Merges the index's segments down to at most `max_num_segments` (tantivy's merge), or,
    /// with `only_expunge_deletes`, rewrites each segment that holds deleted documents.
    /// Commits pending writes first; returns when the merge is committed and searchable.
    ///
    /// tantivy's own background merges run meanwhile and may replace the segments a round chose
    /// before (or while) the round merges them; tantivy then refuses the round
    /// ([`MergeRound::SegmentsChanged`]), and the next round plans again from the segments
    /// committed now. Rounds go on until the plan is empty, at most [`FORCE_MERGE_ROUNDS`].
    pub fn force_merge(&self, max_num_segments: usize, only_expunge_deletes: bool) -> Result<()> {
        self.refresh()?;
        let _running = self.stats.merge_started();
        let started = Instant::now();
        let mut merged_docs = None;
        let mut refused = false;
        for _ in 0..FORCE_MERGE_ROUNDS {
            refused = false;
            let segments: Vec<(tantivy::index::SegmentId, u32, u32)> = self
                .index
                .searchable_segment_metas()
                .map_err(tantivy_error)?
                .iter()
                .map(|m| (m.id(), m.num_docs(), m.num_deleted_docs()))
                .collect();
            let docs: u64 = segments.iter().map(|(_, d, _)| u64::from(*d)).sum();
            let groups = plan_force_merge(segments, max_num_segments, only_expunge_deletes);
            if groups.is_empty() {
                break;
            }
            for group in groups {
                if self.merge_segments(&group)? == MergeRound::SegmentsChanged {
                    refused = true;
                    break;
                }
            }
            if !refused {
                merged_docs = Some(docs);
            }
        }
        // Only a refusal in the last round is a failure: rounds that merged did the work asked
        // for, even if concurrent writes committed new segments since.
        if refused {
            return Err(EngineError::internal(format!(
                "force merge of [{}] gave up after {FORCE_MERGE_ROUNDS} rounds: background merges kept replacing its segments",
                self.name
            )));
        }
        self.reader.reload().map_err(tantivy_error)?;
        if let Some(docs) = merged_docs {
            self.stats.record_merge(started.elapsed(), docs);
        }
        Ok(())
    }

    /// Merges one group of segments into one and waits for it: `SegmentsChanged` when tantivy
    /// refuses because a segment of the group is no longer committed (a background merge took
    /// it first) — nothing was lost, the caller plans again.
    fn merge_segments(&self, group: &[tantivy::index::SegmentId]) -> Result<MergeRound> {
        // Started under the write lock, awaited outside it: writes go on meanwhile.
        let merge = self.state.lock().writer.merge(group);
        match merge.wait() {
            Ok(_) => Ok(MergeRound::Merged),
            Err(tantivy::TantivyError::InvalidArgument(_)) => Ok(MergeRound::SegmentsChanged),
            Err(e) => Err(tantivy_error(e)),
        }
    }

    /// The number of segments searches see.
    pub fn num_segments(&self) -> usize {
        self.searcher().segment_readers().len()
    }
}

/// How many plan-and-merge rounds a force merge runs at most. A round is only refused when a
/// background merge replaced one of its segments, and background merges stop once few
/// segments are left, so two or three rounds suffice in practice; eight leaves room for a
/// burst of commits from concurrent writes without looping for ever.
const FORCE_MERGE_ROUNDS: usize = 8;

/// What one merge of a group of segments came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MergeRound {
    /// The group is one segment now.
    Merged,
    /// A segment of the group was no longer committed when the merge started or ended.
    SegmentsChanged,
}

/// The groups of segments a force merge merges, each into one, from the committed segments
/// `(id, live docs, deleted docs)`: with `only_expunge_deletes` each segment holding deletions
/// alone; otherwise, when there are more than `max_num_segments` (at least 1), the smallest
/// segments together so that `max_num_segments` are left; nothing when there is nothing to do.
fn plan_force_merge(
    mut segments: Vec<(tantivy::index::SegmentId, u32, u32)>,
    max_num_segments: usize,
    only_expunge_deletes: bool,
) -> Vec<Vec<tantivy::index::SegmentId>> {
    let max = max_num_segments.max(1);
    if only_expunge_deletes {
        segments
            .iter()
            .filter(|(_, _, deleted)| *deleted > 0)
            .map(|(id, _, _)| vec![*id])
            .collect()
    } else if segments.len() > max {
        segments.sort_by_key(|(_, docs, deleted)| docs + deleted);
        let take = segments.len() - max + 1;
        vec![segments.iter().take(take).map(|(id, _, _)| *id).collect()]
    } else {
        Vec::new()
    }
}

/// Runs `f` when dropped: counts a refresh on every path out of it.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

/// Validates a client-given document id as OpenSearch does.
fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            "Validation Failed: 1: id is missing;",
        ));
    }
    if id.len() > 512 {
        return Err(EngineError::new(
            ErrorCode::ActionRequestValidation,
            format!(
                "Validation Failed: 1: id [{id}] is too long, must be no longer than 512 bytes but was: {};",
                id.len()
            ),
        ));
    }
    Ok(())
}

/// A new random, URL-safe document id of 20 characters, like OpenSearch's.
/// OpenSearch's `routing_missing_exception` (400): a write or get without a routing value on an
/// index whose mapping requires one (`"_routing": {"required": true}`). A generated id is named
/// `null`, as OpenSearch's message concatenates the id it does not have yet.
pub fn routing_missing(index: &str, id: Option<&str>) -> EngineError {
    EngineError::new(
        ErrorCode::RoutingMissing,
        format!(
            "routing is required for [{index}]/[{}]",
            id.unwrap_or("null")
        ),
    )
    .with_index(index)
    .with_extra("index_uuid", Value::from("_na_"))
}

/// Gives tantivy's `meta.json` in `tantivy_dir` the schema fields it lacks (see
/// [`schema::add_missing_fields`]), so an index created before a field was added opens with
/// it; written atomically before tantivy opens the index.
fn add_missing_schema_fields(tantivy_dir: &Path) -> Result<()> {
    let path = tantivy_dir.join("meta.json");
    let bytes = std::fs::read(&path)?;
    let meta: Value = serde_json::from_slice(&bytes)
        .map_err(|e| EngineError::internal(format!("corrupt {}: {e}", path.display())))?;
    if let Some(upgraded) = schema::add_missing_fields(&meta) {
        tracing::info!(path = %path.display(), "adding new schema fields to an older index");
        // Never an empty file in place of the index's metadata.
        let bytes = serde_json::to_vec_pretty(&upgraded)
            .map_err(|e| EngineError::internal(format!("cannot write {}: {e}", path.display())))?;
        write_atomically(&path, &bytes)?;
    }
    Ok(())
}

fn new_doc_id() -> String {
    use base64::Engine as _;
    let bytes = uuid::Uuid::new_v4().into_bytes();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes[..15])
}

/// Merges `patch` into `target` recursively (objects merge, everything else replaces); returns
/// whether anything changed.
fn merge_json(target: &mut Value, patch: &Value) -> bool {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            let mut changed = false;
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        changed |= merge_json(existing, v);
                    }
                    Some(existing) if existing == v => {}
                    _ => {
                        t.insert(k.clone(), v.clone());
                        changed = true;
                    }
                }
            }
            changed
        }
        (t, p) => {
            if t == p {
                false
            } else {
                *t = p.clone();
                true
            }
        }
    }
}

fn typed_to_owned(v: &TypedValue) -> OwnedValue {
    match v {
        TypedValue::Text(s) | TypedValue::Keyword(s) => OwnedValue::Str(s.clone()),
        TypedValue::I64(n) => OwnedValue::I64(*n),
        TypedValue::F64(f) => OwnedValue::F64(*f),
        TypedValue::Date(ms) => OwnedValue::Date(tantivy::DateTime::from_timestamp_millis(*ms)),
        TypedValue::Bool(b) => OwnedValue::Bool(*b),
    }
}

fn json_object(values: &[(String, TypedValue)]) -> OwnedValue {
    let mut grouped: Vec<(String, Vec<OwnedValue>)> = Vec::new();
    let mut pos: HashMap<&str, usize> = HashMap::new();
    for (path, v) in values {
        match pos.get(path.as_str()) {
            Some(&i) => grouped[i].1.push(typed_to_owned(v)),
            None => {
                pos.insert(path, grouped.len());
                grouped.push((path.clone(), vec![typed_to_owned(v)]));
            }
        }
    }
    OwnedValue::Object(
        grouped
            .into_iter()
            .map(|(k, mut vs)| {
                let v = if vs.len() == 1 {
                    vs.pop().unwrap_or(OwnedValue::Null)
                } else {
                    OwnedValue::Array(vs)
                };
                (k, v)
            })
            .collect(),
    )
}

/// The metadata a document is stored with beside its source.
#[derive(Debug, Clone, Copy)]
pub struct StoredFields<'a> {
    /// The document id.
    pub id: &'a str,
    /// Its version.
    pub version: u64,
    /// Its sequence number.
    pub seq_no: u64,
    /// The routing value it was written with, if any.
    pub routing: Option<&'a str>,
}

/// Builds the tantivy document for a parsed source.
pub fn to_tantivy(
    fields: &Fields,
    stored: &StoredFields<'_>,
    source: &Value,
    parsed: &ParsedDocument,
) -> TantivyDocument {
    let mut doc = TantivyDocument::new();
    doc.add_text(fields.id, stored.id);
    doc.add_bytes(
        fields.source,
        &serde_json::to_vec(source).unwrap_or_default(),
    );
    doc.add_u64(fields.version, stored.version);
    doc.add_u64(fields.seq_no, stored.seq_no);
    if let Some(routing) = stored.routing {
        doc.add_text(fields.routing, routing);
    }
    if !parsed.text.is_empty() {
        doc.add_field_value(fields.txt, &json_object(&parsed.text));
    }
    if !parsed.kw.is_empty() {
        doc.add_field_value(fields.kw, &json_object(&parsed.kw));
    }
    doc
}

/// Flattens index settings (nested or dotted, with or without the `index.` prefix) to
/// `index.*` keys with string values (`None` for JSON `null`); a key given twice is refused.
fn flatten_settings(settings: &Value) -> Result<Vec<(String, Option<String>)>> {
    let Value::Object(object) = settings else {
        return Err(EngineError::illegal_argument(format!(
            "index settings must be an object, got [{settings}]"
        )));
    };
    let object = lists_joined(object, "");
    crate::settings::flatten_settings_as(&object, |key| {
        if key.starts_with("index.") {
            key
        } else {
            format!("index.{key}")
        }
    })
    .map_err(EngineError::illegal_argument)
}

/// Turns the list values of the list settings (`index.sort.*`) into comma-separated text, the
/// other form OpenSearch reads a list setting in, so they are stored and echoed as one value.
fn lists_joined(
    object: &serde_json::Map<String, Value>,
    prefix: &str,
) -> serde_json::Map<String, Value> {
    object
        .iter()
        .map(|(k, v)| {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            let is_list_setting = ["sort.field", "sort.order", "sort.mode", "sort.missing"]
                .iter()
                .any(|s| path == *s || path == format!("index.{s}"));
            let v = match v {
                Value::Object(inner) => Value::Object(lists_joined(inner, &path)),
                Value::Array(items) if is_list_setting && items.iter().all(|x| x.is_string()) => {
                    let parts: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                    Value::String(parts.join(","))
                }
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// `index.mapping.total_fields.limit`: most fields of the mapping ([`MappingLimits`]).
pub const TOTAL_FIELDS_LIMIT: &str = "index.mapping.total_fields.limit";
/// `index.mapping.depth.limit`: most depth of an object of the mapping ([`MappingLimits`]).
pub const DEPTH_LIMIT: &str = "index.mapping.depth.limit";

/// The mapping limits `settings` set, OpenSearch's defaults for the others.
pub fn mapping_limits_of(settings: &BTreeMap<String, String>) -> MappingLimits {
    let defaults = MappingLimits::default();
    let read = |key: &str, default: u64| {
        settings
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    MappingLimits {
        total_fields: read(TOTAL_FIELDS_LIMIT, defaults.total_fields),
        depth: read(DEPTH_LIMIT, defaults.depth),
    }
}

/// Whether an index setting may be changed on an open index (OpenSearch's dynamic settings).
/// `index.routing.*` (shard allocation filters) are kept and echoed; on one node they change
/// nothing.
fn is_dynamic(key: &str) -> bool {
    matches!(
        key,
        "index.number_of_replicas"
            | "index.max_result_window"
            | "index.max_terms_count"
            | "index.refresh_interval"
            | "index.auto_expand_replicas"
            | "index.hidden"
            | TOTAL_FIELDS_LIMIT
            | DEPTH_LIMIT
            | GC_DELETES
            | BLOCKS_WRITE
            | BLOCKS_READ_ONLY
    ) || key.starts_with("index.routing.")
        || ECHOED_DYNAMIC.contains(&key)
        || ECHOED_DYNAMIC_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Index settings OpenSearch clients send that tune machinery sluice does not have (routing
/// shards, soft deletes, the query and request caches, translog tuning, merge policy, slow
/// logs, index sorting): accepted, validated where the value has a shape, stored and echoed,
/// changing nothing. Set at creation only (OpenSearch's static settings).
const ECHOED_STATIC: &[&str] = &[
    "index.number_of_routing_shards",
    "index.soft_deletes.enabled",
    "index.queries.cache.enabled",
    "index.store.type",
    "index.shard.check_on_startup",
    "index.replication.type",
    "index.load_fixed_bitset_filters_eagerly",
    INDEX_SORT_FIELD,
    INDEX_SORT_ORDER,
    INDEX_SORT_MODE,
    INDEX_SORT_MISSING,
];

/// The dynamic ones of those settings (changeable by `PUT /{index}/_settings`).
const ECHOED_DYNAMIC: &[&str] = &[
    "index.soft_deletes.retention_lease.period",
    "index.soft_deletes.retention.operations",
    "index.requests.cache.enable",
    "index.translog.durability",
    "index.translog.sync_interval",
    "index.translog.flush_threshold_size",
    "index.translog.generation_threshold_size",
    "index.search.idle.after",
    "index.max_inner_result_window",
    "index.max_rescore_window",
    "index.max_docvalue_fields_search",
    "index.max_script_fields",
    "index.max_ngram_diff",
    "index.max_shingle_diff",
    "index.max_refresh_listeners",
    "index.max_regex_length",
    "index.max_slices_per_scroll",
    "index.highlight.max_analyzed_offset",
    "index.write.wait_for_active_shards",
    "index.priority",
    "index.unassigned.node_left.delayed_timeout",
    "index.default_pipeline",
    "index.final_pipeline",
];

/// Prefixes of dynamic settings accepted and echoed (merge tuning, slow logs).
const ECHOED_DYNAMIC_PREFIXES: &[&str] = &[
    "index.merge.policy.",
    "index.merge.scheduler.",
    "index.search.slowlog.",
    "index.indexing.slowlog.",
];

/// `index.sort.*`: accepted (the fields must be mapped and sortable) and echoed; sluice does
/// not sort segments (docs/compatibility.md says why).
pub const INDEX_SORT_FIELD: &str = "index.sort.field";
const INDEX_SORT_ORDER: &str = "index.sort.order";
const INDEX_SORT_MODE: &str = "index.sort.mode";
const INDEX_SORT_MISSING: &str = "index.sort.missing";

/// Checks the value of an accepted-and-echoed setting where it has a shape OpenSearch checks.
fn check_echoed(key: &str, v: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(EngineError::illegal_argument(format!(
            "Failed to parse value [{v}] for setting [{key}]{why}"
        )))
    };
    let list = || v.trim_matches(['[', ']']).split(',').map(str::trim);
    match key {
        "index.soft_deletes.enabled"
        | "index.queries.cache.enabled"
        | "index.requests.cache.enable"
        | "index.load_fixed_bitset_filters_eagerly"
            if v != "true" && v != "false" =>
        {
            Err(EngineError::illegal_argument(format!(
                "Failed to parse value [{v}] as only [true] or [false] are allowed."
            )))
        }
        "index.number_of_routing_shards" if v.parse::<u32>().map_or(true, |n| n < 1) => {
            bad(" must be >= 1")
        }
        "index.priority" if v.parse::<u32>().is_err() => bad(" must be >= 0"),
        "index.translog.durability"
            if !matches!(v.to_ascii_lowercase().as_str(), "request" | "async") =>
        {
            Err(EngineError::illegal_argument(format!(
                "No enum constant org.opensearch.index.translog.Translog.Durability.{}",
                v.to_ascii_uppercase()
            )))
        }
        "index.translog.sync_interval"
        | "index.soft_deletes.retention_lease.period"
        | "index.search.idle.after"
        | "index.unassigned.node_left.delayed_timeout" => {
            sluice_wire::parse_time_value(v, key)?;
            Ok(())
        }
        INDEX_SORT_ORDER if list().any(|o| o != "asc" && o != "desc") => Err(
            EngineError::illegal_argument(format!("Illegal sort order:{v}")),
        ),
        INDEX_SORT_MODE if list().any(|o| o != "min" && o != "max") => Err(
            EngineError::illegal_argument(format!("Illegal sort mode: {v}")),
        ),
        INDEX_SORT_MISSING if list().any(|o| o != "_last" && o != "_first") => {
            Err(EngineError::illegal_argument(format!(
                "Illegal missing value:[{v}], must be one of [_last, _first]"
            )))
        }
        _ => Ok(()),
    }
}

/// Checks `index.sort.field` against the mapping: every field mapped, and sortable.
pub fn check_index_sort(settings: &BTreeMap<String, String>, mapping: &Mapping) -> Result<()> {
    let Some(fields) = settings.get(INDEX_SORT_FIELD) else {
        return Ok(());
    };
    for name in fields.trim_matches(['[', ']']).split(',').map(str::trim) {
        match mapping.resolve(name) {
            None => {
                return Err(EngineError::illegal_argument(format!(
                    "unknown index sort field:[{name}]"
                )));
            }
            Some(f) if f.fast_field_name().is_none() => {
                return Err(EngineError::illegal_argument(format!(
                    "docvalues not found for index sort field:[{name}]"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// `index.gc_deletes`: how long deletes are remembered for versioning.
const GC_DELETES: &str = "index.gc_deletes";
/// `index.blocks.write`: refuses document writes (OpenSearch's `FORBIDDEN/8/index write`).
const BLOCKS_WRITE: &str = "index.blocks.write";
/// `index.blocks.read_only`: refuses document writes and mapping changes
/// (`FORBIDDEN/5/index read-only`).
const BLOCKS_READ_ONLY: &str = "index.blocks.read_only";

/// Checks that `key` is an index setting sluice knows and that may be set at all.
fn check_key(key: &str) -> Result<()> {
    match key {
        "index.uuid" | "index.creation_date" | "index.provided_name" | "index.version.created" => {
            Err(EngineError::illegal_argument(format!(
                "private index setting [{key}] can not be set explicitly"
            )))
        }
        "index.number_of_shards" | "index.codec" => Ok(()),
        _ if ECHOED_STATIC.contains(&key) => Ok(()),
        _ if is_dynamic(key)
            || key.starts_with("index.analysis.")
            || key.starts_with("index.knn")
            || key.starts_with("index.routing.") =>
        {
            Ok(())
        }
        _ => Err(EngineError::illegal_argument(format!(
            "unknown setting [{key}] please check that any required plugins are installed, or check the breaking changes documentation for removed settings"
        ))),
    }
}

/// Checks one setting: a key sluice knows ([`check_key`]) with a valid value.
fn check_setting(key: &str, v: &str) -> Result<()> {
    check_key(key)?;
    check_echoed(key, v)?;
    let check_int = |min: u64, max: u64| -> Result<()> {
        match v.parse::<u64>() {
            Ok(n) if n >= min && n <= max => Ok(()),
            _ => Err(EngineError::illegal_argument(format!(
                "Failed to parse value [{v}] for setting [{key}] must be >= {min} and <= {max}"
            ))),
        }
    };
    match key {
        "index.number_of_shards" => check_int(1, 1024),
        "index.number_of_replicas" => check_int(0, 1024),
        "index.max_result_window" | "index.max_terms_count" => check_int(1, i32::MAX as u64),
        TOTAL_FIELDS_LIMIT => check_int(0, i64::MAX as u64),
        DEPTH_LIMIT => check_int(1, i64::MAX as u64),
        "index.refresh_interval" | GC_DELETES => {
            sluice_wire::parse_time_value(v, key)?;
            Ok(())
        }
        BLOCKS_WRITE | BLOCKS_READ_ONLY | "index.hidden" if v != "true" && v != "false" => {
            Err(EngineError::illegal_argument(format!(
                "Failed to parse value [{v}] as only [true] or [false] are allowed."
            )))
        }
        _ => Ok(()),
    }
}

/// Normalizes create-index `settings` to flat `index.*` keys with string values, validating
/// the ones sluice knows.
pub fn normalize_settings(settings: &Value) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (key, value) in flatten_settings(settings)? {
        let Some(v) = value else { continue };
        check_setting(&key, &v)?;
        out.insert(key, v);
    }
    out.entry("index.number_of_shards".into())
        .or_insert_with(|| "1".into());
    out.entry("index.number_of_replicas".into())
        .or_insert_with(|| "1".into());
    Ok(out)
}

/// Every setting of an index, flat (`index.*` keys), as `GET /{index}/_settings` lists them:
/// the stored ones plus the index's identity (`uuid`, `creation_date`, `provided_name`,
/// `version.created`).
pub fn flat_settings(handle: &IndexHandle) -> BTreeMap<String, String> {
    let mut out = (*handle.settings()).clone();
    out.insert("index.uuid".into(), handle.uuid().to_string());
    out.insert(
        "index.creation_date".into(),
        handle.creation_date().to_string(),
    );
    out.insert("index.provided_name".into(), handle.name().to_string());
    out.insert("index.version.created".into(), "137217827".into());
    out
}

/// The defaults of the index settings sluice knows that `settings` does not set, as
/// `GET /{index}/_settings?include_defaults` lists them.
pub fn unset_defaults(settings: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let defaults = [
        ("index.auto_expand_replicas", "false".to_string()),
        (BLOCKS_READ_ONLY, "false".to_string()),
        (BLOCKS_WRITE, "false".to_string()),
        ("index.codec", "default".to_string()),
        ("index.hidden", "false".to_string()),
        (
            "index.max_result_window",
            DEFAULT_MAX_RESULT_WINDOW.to_string(),
        ),
        ("index.max_terms_count", DEFAULT_MAX_TERMS_COUNT.to_string()),
        (
            TOTAL_FIELDS_LIMIT,
            MappingLimits::default().total_fields.to_string(),
        ),
        (DEPTH_LIMIT, MappingLimits::default().depth.to_string()),
        ("index.refresh_interval", "1s".to_string()),
        ("index.store.type", String::new()),
    ];
    defaults
        .into_iter()
        .filter(|(k, _)| !settings.contains_key(*k))
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

#[cfg(test)]
mod force_merge_tests {
    use super::*;
    use crate::Engine;
    use crate::index::{DocOp, OpType};

    /// An engine with index `logs` holding `n` one-document segments (a refresh after each).
    fn segmented(n: usize) -> (tempfile::TempDir, Engine, Arc<IndexHandle>) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path()).unwrap();
        for i in 0..n {
            let op = DocOp::index(Some(i.to_string()), json!({"n": i}), OpType::Index);
            let results = engine.bulk(vec![("logs".into(), op)]);
            assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
            engine.index("logs").unwrap().refresh().unwrap();
        }
        let h = engine.index("logs").unwrap();
        (dir, engine, h)
    }

    fn committed_ids(h: &IndexHandle) -> Vec<tantivy::index::SegmentId> {
        let metas = h.tantivy().searchable_segment_metas().unwrap();
        metas.iter().map(|m| m.id()).collect()
    }

    #[test]
    fn test_merge_of_segments_merged_meanwhile_is_a_changed_round_not_an_error() {
        let (_dir, _engine, h) = segmented(3);
        let stale = committed_ids(&h);
        assert_eq!(stale.len(), 3);
        // What a background merge does between a round's plan and its merge.
        assert_eq!(h.merge_segments(&stale[..2]).unwrap(), MergeRound::Merged);
        assert_eq!(
            h.merge_segments(&stale).unwrap(),
            MergeRound::SegmentsChanged
        );
        // The next force merge plans from what is committed now and finishes.
        h.force_merge(1, false).unwrap();
        assert_eq!(h.num_segments(), 1);
        assert_eq!(h.num_docs(), 3);
    }

    #[test]
    fn test_plan_merges_the_smallest_segments_down_to_the_maximum() {
        let (_dir, _engine, h) = segmented(4);
        let ids = committed_ids(&h);
        let segs = vec![
            (ids[0], 50, 0),
            (ids[1], 5, 0),
            (ids[2], 7, 3),
            (ids[3], 1, 0),
        ];
        assert_eq!(
            plan_force_merge(segs.clone(), 2, false),
            vec![vec![ids[3], ids[1], ids[2]]]
        );
        assert_eq!(plan_force_merge(segs.clone(), 0, false).len(), 1);
        assert!(plan_force_merge(segs.clone(), 4, false).is_empty());
        assert_eq!(plan_force_merge(segs, 1, true), vec![vec![ids[2]]]);
    }
}
