//! The [`Engine`]: the set of indices under a data directory, index expressions, and the
//! document and index APIs over them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

use crate::error::{EngineError, ErrorCode, Result};
use crate::index::{self, DocOp, DocWriteResult, IndexHandle, StoredDoc};
use crate::lookup::TermsLookups;
use crate::mapping::Mapping;
use crate::scroll::ScrollStore;
use crate::search::{SearchContext, SearchRequest};
use sluice_wire::simple_match as wildcard_match;

/// Characters OpenSearch forbids in index names.
const FORBIDDEN_INDEX_CHARS: &[char] =
    &['\\', '/', '*', '?', '"', '<', '>', '|', ' ', ',', '#', ':'];
/// Longest index name OpenSearch accepts, in bytes.
const MAX_INDEX_NAME_BYTES: usize = 255;

/// The embedded search engine: every index of the node.
pub struct Engine {
    dir: PathBuf,
    indices: RwLock<BTreeMap<String, Arc<IndexHandle>>>,
    /// Serializes index creation and deletion (directory changes).
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
            let handle = IndexHandle::open(&entry.path())?;
            indices.insert(handle.name().to_string(), Arc::new(handle));
        }
        tracing::info!(indices = indices.len(), dir = %dir.display(), "engine opened");
        Ok(Engine {
            dir,
            indices: RwLock::new(indices),
            admin: Mutex::new(()),
            last_refresh: Mutex::new(BTreeMap::new()),
            scrolls: ScrollStore::default(),
        })
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

    /// Resolves an index expression (`a,b`, `logs-*`, `_all`, `*`, `-excluded`) to indices.
    ///
    /// A concrete name that does not exist is a 404; a wildcard matching nothing matches
    /// nothing, as OpenSearch's default `allow_no_indices` and `ignore_unavailable=false` do.
    pub fn resolve(&self, expr: &str) -> Result<Vec<Arc<IndexHandle>>> {
        let indices = self.indices.read();
        let mut out: Vec<Arc<IndexHandle>> = Vec::new();
        let parts: Vec<&str> = expr
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if parts.is_empty() || parts == ["_all"] {
            return Ok(indices.values().cloned().collect());
        }
        for (i, part) in parts.iter().enumerate() {
            if let Some(excl) = part.strip_prefix('-').filter(|_| i > 0) {
                out.retain(|h| !wildcard_match(excl, h.name()));
            } else if part.contains('*') || *part == "_all" {
                let pat = if *part == "_all" { "*" } else { part };
                for h in indices.values() {
                    if wildcard_match(pat, h.name()) && !out.iter().any(|o| o.name() == h.name()) {
                        out.push(h.clone());
                    }
                }
            } else {
                match indices.get(*part) {
                    Some(h) => {
                        if !out.iter().any(|o| o.name() == h.name()) {
                            out.push(h.clone());
                        }
                    }
                    None => return Err(EngineError::index_not_found(part)),
                }
            }
        }
        Ok(out)
    }

    /// Creates an index from a create-index body (`settings`, `mappings`, `aliases`).
    pub fn create_index(&self, name: &str, body: &Value) -> Result<Arc<IndexHandle>> {
        validate_index_name(name)?;
        let obj = match body {
            Value::Null => serde_json::Map::new(),
            Value::Object(m) => m.clone(),
            _ => return Err(EngineError::parsing("request body must be a JSON object")),
        };
        let mut mapping = Mapping::default();
        let mut settings = BTreeMap::new();
        for (key, value) in &obj {
            match key.as_str() {
                "mappings" => mapping = Mapping::parse(value)?,
                "settings" => settings = index::normalize_settings(value)?,
                "aliases" => {
                    if value.as_object().is_some_and(|m| !m.is_empty()) {
                        return Err(EngineError::illegal_argument(
                            "aliases are not supported by sluice; create the index without [aliases]",
                        ));
                    }
                }
                _ => {
                    return Err(EngineError::parsing(format!(
                        "unknown key [{key}] for create index"
                    )));
                }
            }
        }
        if settings.is_empty() {
            settings = index::normalize_settings(&json!({}))?;
        }
        let _guard = self.admin.lock();
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
            now_millis(),
        )?);
        self.indices
            .write()
            .insert(name.to_string(), handle.clone());
        tracing::info!(index = name, "created index");
        Ok(handle)
    }

    /// Deletes the indices an expression names; a concrete missing name is a 404.
    pub fn delete_indices(&self, expr: &str) -> Result<()> {
        if expr
            .split(',')
            .any(|p| p.trim() == "_all" || p.trim() == "*")
        {
            return Err(EngineError::illegal_argument(
                "Wildcard expressions or all indices are not allowed",
            ));
        }
        let _guard = self.admin.lock();
        let targets = self.resolve(expr)?;
        for h in targets {
            self.indices.write().remove(h.name());
            let dir = h.dir().to_path_buf();
            drop(h);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove index directory");
            }
        }
        Ok(())
    }

    /// Applies document operations grouped by index, creating missing indices as OpenSearch's
    /// `action.auto_create_index` does. Results come back in input order.
    pub fn bulk(&self, ops: Vec<(String, DocOp)>) -> Vec<Result<DocWriteResult>> {
        let mut results: Vec<Option<Result<DocWriteResult>>> =
            (0..ops.len()).map(|_| None).collect();
        let mut groups: BTreeMap<String, Vec<(usize, DocOp)>> = BTreeMap::new();
        for (i, (index, op)) in ops.into_iter().enumerate() {
            groups.entry(index).or_default().push((i, op));
        }
        for (name, items) in groups {
            let handle = match self.index(&name) {
                Some(h) => Ok(h),
                None => {
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

    /// Real-time get of one document.
    pub fn get_doc(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.index_or_404(index)?.get(id)
    }

    /// Refreshes the indices an expression names.
    pub fn refresh(&self, expr: &str) -> Result<usize> {
        let targets = self.resolve(expr)?;
        for h in &targets {
            h.refresh()?;
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
        let indices = self.resolve(index_expr)?;
        let now = now_millis();
        let lookups = TermsLookups::new(self, ctx, now);
        crate::search::execute(&indices, req, ctx, now, started, None, Some(&lookups))
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
        let indices = self.resolve(index_expr)?;
        let now = now_millis();
        let lookups = TermsLookups::new(self, ctx, now);
        self.scrolls
            .open(&indices, req, keep_alive, ctx, now, Some(&lookups))
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

    /// Counts the documents matching `query` over an index expression.
    pub fn count(&self, index_expr: &str, query: &Value, ctx: &SearchContext) -> Result<u64> {
        let indices = self.resolve(index_expr)?;
        let now = now_millis();
        let lookups = TermsLookups::new(self, ctx, now);
        crate::search::count(&indices, query, ctx, now, Some(&lookups))
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
/// callers that wrap the failure in their own "failed to parse setting [x] with value [v] as a
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
