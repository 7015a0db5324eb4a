//! The [`Engine`]: the set of indices under a data directory, index expressions, and the
//! document and index APIs over them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

use crate::aliases::{AliasAction, AliasMeta, AliasTable};
use crate::error::{EngineError, ErrorCode, Result};
use crate::index::{self, DocOp, DocWriteResult, IndexHandle, StoredDoc};
use crate::lookup::TermsLookups;
use crate::mapping::Mapping;
use crate::resolve::{IndicesOptions, Target};
use crate::scroll::ScrollStore;
use crate::search::{SearchContext, SearchRequest};
use sluice_wire::simple_match as wildcard_match;

/// Characters OpenSearch forbids in index names.
const FORBIDDEN_INDEX_CHARS: &[char] =
    &['\\', '/', '*', '?', '"', '<', '>', '|', ' ', ',', '#', ':'];
/// Longest index name OpenSearch accepts, in bytes.
const MAX_INDEX_NAME_BYTES: usize = 255;

/// The top-level keys of a create-index body: OpenSearch's `CreateIndexRequest.source` knows
/// these three and refuses any other.
const CREATE_INDEX_KEYS: &[&str] = &["settings", "mappings", "aliases"];

/// What a deleted index's directory is renamed with before its files are removed (an index's
/// own directory is `{name}-{uuid}`, ending in hex digits, so never in this).
const DELETED_SUFFIX: &str = ".deleted";

/// How many times, and how far apart, removing a deleted index's directory is tried again in
/// the background when it fails: tantivy's background merges, not waited for by a delete, may
/// go on writing into it for a while; a few seconds covers a merge of a test-sized or
/// moderately large index, and a directory still there is removed at the next start.
const REMOVE_RETRIES: u32 = 30;
const REMOVE_RETRY: Duration = Duration::from_secs(1);

/// The record of an alias change being written ([`Engine::update_aliases`]), in the indices
/// directory.
const PENDING_ALIASES: &str = "aliases.pending.json";

/// An alias change as recorded before any index is written: the aliases each changed index is
/// to have, and the indices it removes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct PendingAliases {
    aliases: BTreeMap<String, IndexAliases>,
    remove: Vec<String>,
}

/// Removes a file and syncs its directory, so the removal survives a crash.
fn remove_durably(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    match path.parent() {
        Some(dir) => index::sync_dir(dir),
        None => Ok(()),
    }
}

/// `dir` renamed as deleted.
fn deleted_name(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(DELETED_SUFFIX);
    dir.with_file_name(name)
}

/// Removes a deleted (or never finished) index's directory, retrying in the background while
/// something still writes into it.
fn remove_deleted_dir(dir: PathBuf) {
    let removed = |dir: &Path| match std::fs::remove_dir_all(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    if removed(&dir) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("sluice-rm-index".into())
        .spawn(move || {
            for _ in 0..REMOVE_RETRIES {
                std::thread::sleep(REMOVE_RETRY);
                if removed(&dir) {
                    return;
                }
            }
            tracing::warn!(dir = %dir.display(), "could not remove a deleted index's directory; it is removed at the next start");
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start removing a deleted index's directory; it is removed at the next start");
    }
}

/// The embedded search engine: every index of the node.
pub struct Engine {
    dir: PathBuf,
    indices: RwLock<BTreeMap<String, Arc<IndexHandle>>>,
    /// Every alias, rebuilt from the indices' aliases and swapped whole after each change.
    aliases: RwLock<Arc<AliasTable>>,
    /// Serializes index creation and deletion (directory changes) and alias changes.
    admin: Mutex<()>,
    /// When each index was last refreshed by the periodic refresher.
    last_refresh: Mutex<BTreeMap<String, Instant>>,
    /// The open scroll contexts.
    scrolls: ScrollStore,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("dir", &self.dir).finish()
    }
}

/// Validates an index name as OpenSearch does, with its messages.
pub fn validate_index_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(EngineError::new(
            ErrorCode::InvalidIndexName,
            format!("Invalid index name [{name}], {why}"),
        )
        .with_index(name))
    };
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name != name.to_lowercase() {
        return bad("must be lowercase");
    }
    if name.starts_with(['_', '-', '+']) {
        return bad("must not start with '_', '-', or '+'");
    }
    if name.contains(FORBIDDEN_INDEX_CHARS) {
        return bad(
            r#"must not contain the following characters [ , ", *, \, <, |, ,, >, /, ?, #, :]"#,
        );
    }
    if name == "." || name == ".." {
        return bad("must not be '.' or '..'");
    }
    if name.len() > MAX_INDEX_NAME_BYTES {
        return bad("index name is too long, (must be <= 255 bytes)");
    }
    Ok(())
}

/// Milliseconds since the epoch, now.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Engine {
    /// Opens every index under `data_dir/indices`, replaying translogs.
    pub fn open(data_dir: &Path) -> Result<Engine> {
        let dir = data_dir.join("indices");
        std::fs::create_dir_all(&dir)?;
        let mut indices = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let path = entry.path();
            // An index deleted before a crash, or whose removal a merge held up.
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(DELETED_SUFFIX))
            {
                tracing::info!(dir = %path.display(), "removing the directory of a deleted index");
                remove_deleted_dir(path);
                continue;
            }
            // Its description is written last when an index is created: without it, the
            // creation did not finish (a crash) and was never acknowledged.
            if !index::is_complete(&path) {
                tracing::warn!(dir = %path.display(), "removing the directory of an index whose creation did not finish");
                remove_deleted_dir(path);
                continue;
            }
            let handle = IndexHandle::open(&path).map_err(|e| {
                let mut e = e;
                e.reason = format!("cannot open the index in {}: {}", path.display(), e.reason);
                e
            })?;
            indices.insert(handle.name().to_string(), Arc::new(handle));
        }
        tracing::info!(indices = indices.len(), dir = %dir.display(), "engine opened");
        let aliases = alias_table(&indices);
        let engine = Engine {
            dir,
            indices: RwLock::new(indices),
            aliases: RwLock::new(Arc::new(aliases)),
            admin: Mutex::new(()),
            last_refresh: Mutex::new(BTreeMap::new()),
            scrolls: ScrollStore::default(),
        };
        engine.finish_pending_aliases()?;
        Ok(engine)
    }

    /// The index named `name`, if it exists.
    pub fn index(&self, name: &str) -> Option<Arc<IndexHandle>> {
        self.indices.read().get(name).cloned()
    }

    /// The index named `name`, or 404 `index_not_found_exception`.
    pub fn index_or_404(&self, name: &str) -> Result<Arc<IndexHandle>> {
        self.index(name)
            .ok_or_else(|| EngineError::index_not_found(name))
    }

    /// All indices, by name.
    pub fn all_indices(&self) -> Vec<Arc<IndexHandle>> {
        self.indices.read().values().cloned().collect()
    }

    /// Resolves an index expression (`a,b`, `logs-*`, `_all`, `*`, `-excluded`, aliases) to
    /// indices with OpenSearch's default options: a concrete name or alias that does not exist
    /// is a 404, a wildcard matching nothing matches nothing.
    pub fn resolve(&self, expr: &str) -> Result<Vec<Arc<IndexHandle>>> {
        Ok(self
            .resolve_targets(expr, &IndicesOptions::default())?
            .into_iter()
            .map(|t| t.handle)
            .collect())
    }

    /// Resolves an index expression with `opts` ([`crate::resolve::resolve`]); each index
    /// comes with the filter of the aliases that reached it.
    pub fn resolve_targets(&self, expr: &str, opts: &IndicesOptions) -> Result<Vec<Target>> {
        let indices = self.indices.read();
        let aliases = self.aliases.read().clone();
        crate::resolve::resolve(&indices, &aliases, expr, opts)
    }

    /// The alias table as it is now.
    pub fn alias_table(&self) -> Arc<AliasTable> {
        self.aliases.read().clone()
    }

    /// The one index a single-document read of `name` (an index or a one-index alias) goes to.
    pub fn single_index(&self, name: &str) -> Result<Arc<IndexHandle>> {
        let indices = self.indices.read();
        let aliases = self.aliases.read().clone();
        let h = crate::resolve::single_index(&indices, &aliases, name)?;
        if h.is_closed() {
            return Err(crate::resolve::index_closed(h.name()));
        }
        Ok(h)
    }

    /// The index writes to `name` go to ([`crate::resolve::write_index`]); `None` when
    /// neither an index nor an alias of that name exists.
    pub fn write_index(&self, name: &str, require_alias: bool) -> Result<Option<Arc<IndexHandle>>> {
        let indices = self.indices.read();
        let aliases = self.aliases.read().clone();
        crate::resolve::write_index(&indices, &aliases, name, require_alias)
    }

    /// Rebuilds the alias table from the indices (after any change of indices or aliases).
    fn rebuild_aliases(&self) {
        let table = alias_table(&self.indices.read());
        *self.aliases.write() = Arc::new(table);
    }

    /// Applies `_aliases` actions as one step: every action is resolved and checked first
    /// (missing indices and aliases, name clashes, two write indices), then each changed
    /// index's aliases are persisted, then the new table is published. If persisting fails
    /// half-way, the indices already written are put back.
    pub fn update_aliases(&self, actions: &[AliasAction]) -> Result<()> {
        let _guard = self.admin.lock();
        let indices = self.indices.read().clone();
        let mut next: BTreeMap<String, BTreeMap<String, AliasMeta>> = indices
            .iter()
            .map(|(n, h)| (n.clone(), (*h.aliases()).clone()))
            .collect();
        let mut remove_indices: Vec<String> = Vec::new();
        let concrete = |exprs: &[String]| -> Result<Vec<String>> {
            let mut out = Vec::new();
            for e in exprs {
                let opts = IndicesOptions::for_index_apis(true);
                for t in self.resolve_targets(e, &opts)? {
                    if !out.contains(&t.handle.name().to_string()) {
                        out.push(t.handle.name().to_string());
                    }
                }
            }
            Ok(out)
        };
        for action in actions {
            match action {
                AliasAction::Add {
                    indices: exprs,
                    aliases,
                    meta,
                } => {
                    let targets = concrete(exprs)?;
                    for alias in aliases {
                        if indices.contains_key(alias) {
                            return Err(EngineError::new(
                                ErrorCode::InvalidAliasName,
                                format!(
                                    "Invalid alias name [{alias}]: an index or data stream exists with the same name as the alias"
                                ),
                            )
                            .with_index(alias));
                        }
                        if let Some(filter) = &meta.filter {
                            for t in &targets {
                                self.check_alias_filter(&indices[t], alias, filter)?;
                            }
                        }
                        for t in &targets {
                            next.entry(t.clone())
                                .or_default()
                                .insert(alias.clone(), meta.clone());
                        }
                    }
                }
                AliasAction::Remove {
                    indices: exprs,
                    aliases,
                    must_exist,
                } => {
                    let targets = concrete(exprs)?;
                    let mut missing = Vec::new();
                    for pattern in aliases {
                        let mut found = false;
                        for t in &targets {
                            if let Some(list) = next.get_mut(t) {
                                let before = list.len();
                                list.retain(|a, _| !wildcard_match(pattern, a));
                                found |= list.len() != before;
                            }
                        }
                        if !found {
                            missing.push(pattern.clone());
                        }
                    }
                    if !missing.is_empty() && *must_exist != Some(false) {
                        return Err(crate::aliases::aliases_not_found(&missing));
                    }
                }
                AliasAction::RemoveIndex { indices: exprs } => {
                    for e in exprs {
                        if self.aliases.read().contains(e) {
                            return Err(EngineError::illegal_argument(format!(
                                "The provided expression [{e}] matches an alias, specify the corresponding concrete indices instead."
                            )));
                        }
                    }
                    for t in concrete(exprs)? {
                        next.remove(&t);
                        remove_indices.push(t);
                    }
                }
            }
        }
        let table = AliasTable::build(next.iter().map(|(k, v)| (k.as_str(), v)));
        table.check_write_indices()?;
        // The whole change is recorded first, so a crash part-way through the per-index writes
        // is finished at the next start ([`Engine::finish_pending_aliases`]): an alias moved
        // from one index to another is never on both, or on neither.
        let pending = PendingAliases {
            aliases: indices
                .iter()
                .filter_map(|(name, h)| {
                    let wanted = next.get(name)?;
                    (*h.aliases() != *wanted).then(|| (name.clone(), wanted.clone()))
                })
                .collect(),
            remove: remove_indices.clone(),
        };
        let recorded = !pending.aliases.is_empty() || !pending.remove.is_empty();
        if recorded {
            let bytes = serde_json::to_vec(&pending).unwrap_or_default();
            index::write_atomically(&self.dir.join(PENDING_ALIASES), &bytes)?;
        }
        let done = |result: Result<()>| -> Result<()> {
            if recorded && let Err(e) = remove_durably(&self.dir.join(PENDING_ALIASES)) {
                tracing::warn!(error = %e, "could not remove the record of an alias change");
            }
            result
        };
        // The indices already written, with their aliases before, to put back on failure.
        let mut written: Vec<(&Arc<IndexHandle>, Arc<IndexAliases>)> = Vec::new();
        for (name, h) in &indices {
            let Some(wanted) = next.get(name) else {
                continue;
            };
            let before = h.aliases();
            if *before == *wanted {
                continue;
            }
            if let Err(e) = h.set_aliases(wanted.clone()) {
                for (h, old) in written {
                    let _ = h.set_aliases((*old).clone());
                }
                return done(Err(e));
            }
            written.push((h, before));
        }
        for name in &remove_indices {
            if let Err(e) = self.remove_index_dir(name) {
                self.rebuild_aliases();
                return done(Err(e));
            }
        }
        self.rebuild_aliases();
        done(Ok(()))
    }

    /// Finishes an alias change a crash cut short (its record is still there): every index it
    /// names gets the aliases it was to have, the indices it removes are deleted, then the
    /// record goes. Idempotent, so a crash during it is finished at the next start too.
    fn finish_pending_aliases(&self) -> Result<()> {
        let path = self.dir.join(PENDING_ALIASES);
        // A record a crash cut short while it was written, before its rename: never acted on.
        remove_durably(&path.with_extension("tmp"))?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        // A record cut short was never acted on (it is written whole before any index).
        if let Ok(pending) = serde_json::from_slice::<PendingAliases>(&bytes) {
            tracing::info!(
                indices = pending.aliases.len(),
                removed = pending.remove.len(),
                "finishing an alias change a restart interrupted"
            );
            for (name, aliases) in pending.aliases {
                if let Some(h) = self.index(&name) {
                    h.set_aliases(aliases)?;
                }
            }
            for name in &pending.remove {
                self.remove_index_dir(name)?;
            }
            self.rebuild_aliases();
        }
        remove_durably(&path)?;
        Ok(())
    }

    /// Checks that an alias filter is a query the index can run.
    fn check_alias_filter(&self, h: &Arc<IndexHandle>, alias: &str, filter: &Value) -> Result<()> {
        let req = SearchRequest::parse(
            Some(&json!({"query": filter, "size": 0})),
            &Default::default(),
        );
        let prepared = req.and_then(|req| {
            let target = Target {
                handle: h.clone(),
                filter: None,
            };
            crate::search::prepare(&[target], &req, now_millis(), None, None).map(|_| ())
        });
        prepared.map_err(|e| {
            let mut err = EngineError::illegal_argument(format!(
                "failed to parse filter for alias [{alias}]"
            ));
            err.cause = Some(Box::new(e.root_cause().clone()));
            err
        })
    }

    /// Removes an index from the node and deletes its directory: first renamed (atomic) to a
    /// name [`Engine::open`] recognizes as deleted, so a crash while its files are removed (or
    /// tantivy's background merges still writing into it, which makes the removal fail) can
    /// never bring the index back half there; then removed, retried in the background while
    /// merges finish, and at the next start if it still is there.
    fn remove_index_dir(&self, name: &str) -> Result<()> {
        let Some(h) = self.index(name) else {
            return Ok(());
        };
        let dir = h.dir().to_path_buf();
        let doomed = deleted_name(&dir);
        std::fs::rename(&dir, &doomed).map_err(|e| {
            EngineError::internal(format!(
                "cannot delete index [{name}]: renaming {} failed: {e}",
                dir.display()
            ))
        })?;
        if let Err(e) = index::sync_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not sync the indices directory after a delete");
        }
        self.indices.write().remove(name);
        drop(h);
        remove_deleted_dir(doomed);
        tracing::info!(index = name, "deleted index");
        Ok(())
    }

    /// Creates an index from a create-index body (`settings`, `mappings`, `aliases`).
    ///
    /// As OpenSearch's `CreateIndexRequest.source`, every top-level key is read before the
    /// index name or any value is validated: an unknown key is the error (`parse_exception`)
    /// wherever it stands in the body.
    pub fn create_index(&self, name: &str, body: &Value) -> Result<Arc<IndexHandle>> {
        let obj = match body {
            Value::Null => serde_json::Map::new(),
            Value::Object(m) => m.clone(),
            _ => return Err(EngineError::parsing("request body must be a JSON object")),
        };
        if let Some(key) = obj
            .keys()
            .find(|k| !CREATE_INDEX_KEYS.contains(&k.as_str()))
        {
            return Err(EngineError::new(
                ErrorCode::Parse,
                format!("unknown key [{key}] for create index"),
            ));
        }
        validate_index_name(name)?;
        let mut mapping = Mapping::default();
        let mut settings = BTreeMap::new();
        let mut aliases = BTreeMap::new();
        for (key, value) in &obj {
            match key.as_str() {
                "mappings" => mapping = Mapping::parse(value)?,
                "settings" => settings = index::normalize_settings(value)?,
                "aliases" => match value {
                    Value::Object(m) => {
                        for (alias, body) in m {
                            crate::aliases::validate_alias_name(alias)?;
                            aliases.insert(alias.clone(), AliasMeta::parse(alias, body)?);
                        }
                    }
                    Value::Null => {}
                    other => {
                        return Err(EngineError::parsing(format!(
                            "[aliases] must be an object, got [{other}]"
                        )));
                    }
                },
                // Refused before the loop.
                _ => {}
            }
        }
        if settings.is_empty() {
            settings = index::normalize_settings(&json!({}))?;
        }
        index::check_index_sort(&settings, &mapping)?;
        mapping.check_limits(&index::mapping_limits_of(&settings))?;
        let _guard = self.admin.lock();
        if self.aliases.read().contains(name) {
            return Err(EngineError::new(
                ErrorCode::InvalidIndexName,
                format!("Invalid index name [{name}], already exists as alias"),
            )
            .with_index(name));
        }
        if let Some(alias) = aliases
            .keys()
            .find(|a| self.indices.read().contains_key(*a))
        {
            return Err(EngineError::new(
                ErrorCode::InvalidAliasName,
                format!(
                    "Invalid alias name [{alias}]: an index or data stream exists with the same name as the alias"
                ),
            )
            .with_index(alias.as_str()));
        }
        if self.indices.read().contains_key(name) {
            return Err(EngineError::new(
                ErrorCode::ResourceAlreadyExists,
                format!(
                    "index [{name}/{}] already exists",
                    self.index(name)
                        .map(|h| h.uuid().to_string())
                        .unwrap_or_default()
                ),
            )
            .with_index(name));
        }
        let dir = self
            .dir
            .join(format!("{name}-{}", uuid::Uuid::new_v4().simple()));
        let handle = Arc::new(IndexHandle::create(
            &dir,
            name,
            mapping,
            settings,
            aliases.clone(),
            now_millis(),
        )?);
        self.indices
            .write()
            .insert(name.to_string(), handle.clone());
        if !aliases.is_empty() {
            self.rebuild_aliases();
            if let Err(e) = self.aliases.read().check_write_indices() {
                drop(_guard);
                let _ = self.delete_indices(name, &IndicesOptions::for_index_apis(true));
                return Err(e);
            }
            for (alias, meta) in &aliases {
                if let Some(filter) = &meta.filter
                    && let Err(e) = self.check_alias_filter(&handle, alias, filter)
                {
                    drop(_guard);
                    let _ = self.delete_indices(name, &IndicesOptions::for_index_apis(true));
                    return Err(e);
                }
            }
        }
        tracing::info!(index = name, "created index");
        Ok(handle)
    }

    /// Deletes the indices an expression names, resolved with `opts` (OpenSearch's delete-index
    /// resolves with the request's `IndicesOptions` over [`IndicesOptions::for_index_apis`]`(true)`):
    /// a concrete missing name is a 404 unless `opts.ignore_unavailable`, which skips it and
    /// deletes the rest.
    pub fn delete_indices(&self, expr: &str, opts: &IndicesOptions) -> Result<()> {
        if expr
            .split(',')
            .any(|p| p.trim() == "_all" || p.trim() == "*")
        {
            return Err(EngineError::illegal_argument(
                "Wildcard expressions or all indices are not allowed",
            ));
        }
        let _guard = self.admin.lock();
        let table = self.alias_table();
        if let Some(alias) = expr.split(',').map(str::trim).find(|p| table.contains(p)) {
            return Err(EngineError::illegal_argument(format!(
                "The provided expression [{alias}] matches an alias, specify the corresponding concrete indices instead."
            )));
        }
        let targets = self.resolve_targets(expr, opts)?;
        for t in targets {
            let name = t.handle.name().to_string();
            drop(t);
            self.remove_index_dir(&name)?;
        }
        self.rebuild_aliases();
        Ok(())
    }

    /// Applies document operations grouped by index, creating missing indices as OpenSearch's
    /// `action.auto_create_index` does. Results come back in input order.
    pub fn bulk(&self, ops: Vec<(String, DocOp)>) -> Vec<Result<DocWriteResult>> {
        self.bulk_to(
            ops.into_iter()
                .map(|(index, op)| (index, false, op))
                .collect(),
        )
    }

    /// [`Engine::bulk`] where each operation names an index or alias (writes through an alias
    /// go to its write index) and says whether it requires an alias (`require_alias`).
    pub fn bulk_to(&self, ops: Vec<(String, bool, DocOp)>) -> Vec<Result<DocWriteResult>> {
        let mut results: Vec<Option<Result<DocWriteResult>>> =
            (0..ops.len()).map(|_| None).collect();
        let mut groups: BTreeMap<(String, bool), Vec<(usize, DocOp)>> = BTreeMap::new();
        for (i, (index, require_alias, op)) in ops.into_iter().enumerate() {
            groups
                .entry((index, require_alias))
                .or_default()
                .push((i, op));
        }
        for ((name, require_alias), items) in groups {
            let handle = match self.write_index(&name, require_alias) {
                Err(e) => Err(e),
                Ok(Some(h)) if h.is_closed() => Err(crate::resolve::index_closed(h.name())),
                Ok(Some(h)) => Ok(h),
                Ok(None) => {
                    let needs_index = items
                        .iter()
                        .any(|(_, op)| !matches!(op, DocOp::Delete { .. }));
                    if needs_index {
                        match self.create_index(&name, &Value::Null) {
                            Ok(h) => Ok(h),
                            Err(e) if e.code == ErrorCode::ResourceAlreadyExists => {
                                self.index_or_404(&name)
                            }
                            Err(e) => Err(e),
                        }
                    } else {
                        Err(EngineError::index_not_found(&name))
                    }
                }
            };
            match handle {
                Ok(h) => {
                    let (positions, ops): (Vec<usize>, Vec<DocOp>) = items.into_iter().unzip();
                    for (pos, r) in positions.into_iter().zip(h.apply(ops)) {
                        results[pos] = Some(r);
                    }
                }
                Err(e) => {
                    for (pos, _) in items {
                        results[pos] = Some(Err(e.clone()));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(EngineError::internal("lost bulk item"))))
            .collect()
    }

    /// Real-time get of one document, with the request's `routing` value.
    ///
    /// `index` may be an alias of one index; the answer names the concrete index. An index
    /// whose mapping requires routing refuses a get without it, as OpenSearch does; the value
    /// itself picks nothing here, since an index is one shard.
    pub fn get_doc(
        &self,
        index: &str,
        id: &str,
        routing: Option<&str>,
    ) -> Result<(String, Option<StoredDoc>)> {
        let h = self.single_index(index)?;
        if routing.is_none() && h.mapping().routing_required() {
            return Err(index::routing_missing(h.name(), Some(id)));
        }
        Ok((h.name().to_string(), h.get(id)?))
    }

    /// Refreshes the indices an expression names.
    pub fn refresh(&self, expr: &str) -> Result<usize> {
        self.refresh_with(expr, &IndicesOptions::default())
    }

    /// [`Engine::refresh`] of the indices `expr` resolves to under `opts`: what a request that
    /// resolved its indices with those options wrote to (a by-query's `expand_wildcards`).
    pub fn refresh_with(&self, expr: &str, opts: &IndicesOptions) -> Result<usize> {
        let targets = self.resolve_targets(expr, opts)?;
        for t in &targets {
            t.handle.refresh()?;
        }
        Ok(targets.len())
    }

    /// Refreshes every index whose refresh interval has passed and has unrefreshed writes; the
    /// server calls this on a timer.
    pub fn refresh_due(&self) {
        let now = Instant::now();
        for h in self.all_indices() {
            let Some(interval) = h.refresh_interval() else {
                continue;
            };
            let due = {
                let mut last = self.last_refresh.lock();
                let entry = last.entry(h.name().to_string()).or_insert(now);
                if now.duration_since(*entry) >= interval {
                    *entry = now;
                    true
                } else {
                    false
                }
            };
            if due
                && h.is_dirty()
                && let Err(e) = h.refresh()
            {
                tracing::error!(index = h.name(), error = %e, "periodic refresh failed");
            }
        }
        self.reap_expired_scrolls(now);
    }

    /// Runs a search body over an index expression (a convenience over [`Engine::search_request`]).
    pub fn search(&self, index_expr: &str, body: &Value, ctx: &SearchContext) -> Result<Value> {
        let req = SearchRequest::parse(Some(body), &Default::default())?;
        self.search_request(index_expr, &req, ctx)
    }

    /// Runs a parsed search over an index expression.
    pub fn search_request(
        &self,
        index_expr: &str,
        req: &SearchRequest,
        ctx: &SearchContext,
    ) -> Result<Value> {
        let started = Instant::now();
        let indices = self.resolve_targets(index_expr, &req.indices_options)?;
        let now = now_millis();
        let lookups = TermsLookups::new(self, ctx, now);
        counted(&indices, || {
            crate::search::execute(&indices, req, ctx, now, started, None, Some(&lookups))
        })
    }

    /// The open scroll contexts, for their limits and counts.
    pub fn scrolls(&self) -> &ScrollStore {
        &self.scrolls
    }

    /// Runs the first page of a scroll search over an index expression and keeps its context
    /// for `keep_alive`; the response carries `_scroll_id`.
    pub fn open_scroll(
        &self,
        index_expr: &str,
        req: &SearchRequest,
        keep_alive: Duration,
        ctx: &SearchContext,
    ) -> Result<Value> {
        let indices = self.resolve_targets(index_expr, &req.indices_options)?;
        let now = now_millis();
        let lookups = TermsLookups::new(self, ctx, now);
        counted(&indices, || {
            self.scrolls
                .open(&indices, req, keep_alive, ctx, now, Some(&lookups))
        })
    }

    /// The user label the scroll `scroll_id` was opened with.
    pub fn scroll_opened_by(&self, scroll_id: &str) -> Result<Option<Arc<str>>> {
        self.scrolls.opened_by(scroll_id)
    }

    /// The owner label the scroll `scroll_id` was opened with.
    pub fn scroll_owner(&self, scroll_id: &str) -> Result<Option<Arc<str>>> {
        self.scrolls.owner(scroll_id)
    }

    /// Returns the next page of a scroll, renewing its keep-alive (to `keep_alive` if given).
    pub fn continue_scroll(
        &self,
        scroll_id: &str,
        keep_alive: Option<Duration>,
        ctx: &SearchContext,
    ) -> Result<Value> {
        self.scrolls.next_page(scroll_id, keep_alive, ctx, |h| {
            self.index(h.name()).is_some_and(|cur| Arc::ptr_eq(&cur, h))
        })
    }

    /// Frees the scroll contexts of `scroll_ids`; returns how many were open.
    pub fn clear_scrolls(&self, scroll_ids: &[String]) -> Result<usize> {
        self.scrolls.clear(scroll_ids)
    }

    /// Frees every scroll context; returns how many were open.
    pub fn clear_all_scrolls(&self) -> usize {
        self.scrolls.clear_all()
    }

    /// Frees the scroll contexts whose keep-alive has passed at `now`; returns how many.
    pub fn reap_expired_scrolls(&self, now: Instant) -> usize {
        self.scrolls.reap_expired(now)
    }

    /// Counts the documents matching `query` over an index expression resolved with `opts`.
    pub fn count(
        &self,
        index_expr: &str,
        opts: &IndicesOptions,
        query: &Value,
        ctx: &SearchContext,
    ) -> Result<u64> {
        let indices = self.resolve_targets(index_expr, opts)?;
        let now = now_millis();
        let lookups = TermsLookups::new(self, ctx, now);
        counted(&indices, || {
            crate::search::count(&indices, query, ctx, now, Some(&lookups))
        })
    }

    /// Refreshes (commits) every index: called at shutdown so the next start needs no replay.
    pub fn flush_all(&self) -> Result<()> {
        for h in self.all_indices() {
            h.refresh()?;
        }
        Ok(())
    }
}

/// Parses a positive time value with the one parser, [`sluice_wire::parse_time_value`], for
/// callers that wrap the failure in their own "failed to parse setting \[x\] with value \[v\] as a
/// time value: …" message: the error is that message's last clause. `-1` (of any unit) is
/// refused here, as callers that accept it test for it first.
///
/// Transitional: new code calls [`sluice_wire::parse_time_value`], whose error is OpenSearch's
/// whole message.
pub fn parse_time_value(s: &str) -> std::result::Result<Duration, String> {
    use sluice_wire::{TimeValue, TimeValueErrorKind};
    match sluice_wire::parse_time_value(s, "") {
        Ok(TimeValue::After(d)) => Ok(d),
        Ok(TimeValue::Disabled) => Err("negative durations are not supported".to_string()),
        Err(e) => Err(match e.kind {
            TimeValueErrorKind::MissingUnit => "unit is missing or unrecognized",
            TimeValueErrorKind::Negative => "negative durations are not supported",
            TimeValueErrorKind::Fractional => "fractional time values are not supported",
            TimeValueErrorKind::NotANumber => "the value before the unit is not a whole number",
        }
        .to_string()),
    }
}

/// Runs a query phase over `targets`, counted in each index's search stats (`query_current`
/// while it runs, `query_total` and its time after).
///
/// A phase over one index that is cancelled names that index in its error, as OpenSearch's
/// cancelled shard names its index in `failed_shards`; over several, which index's shard was
/// stopped is not one answer, and none is named.
fn counted<T>(targets: &[Target], run: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let running: Vec<_> = targets
        .iter()
        .map(|t| t.handle.stats().query_started())
        .collect();
    let out = run();
    drop(running);
    for t in targets {
        t.handle.stats().record_query(started.elapsed());
    }
    out.map_err(|e| match targets {
        [only] if e.code == ErrorCode::TaskCancelled && e.index.is_none() => {
            e.with_index(only.handle.name())
        }
        _ => e,
    })
}

/// One index's aliases: name → metadata.
type IndexAliases = BTreeMap<String, AliasMeta>;

/// The alias table of a set of indices.
fn alias_table(indices: &BTreeMap<String, Arc<IndexHandle>>) -> AliasTable {
    let per: Vec<(String, Arc<BTreeMap<String, AliasMeta>>)> = indices
        .iter()
        .map(|(n, h)| (n.clone(), h.aliases()))
        .collect();
    AliasTable::build(per.iter().map(|(n, a)| (n.as_str(), a.as_ref())))
}
