//! Engine errors, each classified once into an [`ErrorCode`] that the server maps to an HTTP
//! status and an OpenSearch error `type`.

use std::fmt;

/// The class of an engine error; one code per OpenSearch error `type` the engine can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// 404 `index_not_found_exception`.
    IndexNotFound,
    /// 400 `resource_already_exists_exception`.
    ResourceAlreadyExists,
    /// 400 `invalid_index_name_exception`.
    InvalidIndexName,
    /// 400 `parsing_exception`: a request body that is valid JSON but not a valid request.
    Parsing,
    /// 400 `parse_exception`: a request that lacks what it needs to be parsed at all (no body).
    Parse,
    /// 400 `x_content_parse_exception`: a value of the wrong shape inside a request.
    XContentParse,
    /// 400 `illegal_argument_exception`.
    IllegalArgument,
    /// 400 `mapper_parsing_exception`: a document or mapping that does not fit the mapping.
    MapperParsing,
    /// 400 `query_shard_exception`: a query that cannot be built against the index's fields.
    QueryShard,
    /// 400 `search_phase_execution_exception`: the wrapper OpenSearch puts around shard failures.
    SearchPhaseExecution,
    /// 409 `version_conflict_engine_exception`.
    VersionConflict,
    /// 404 `document_missing_exception`.
    DocumentMissing,
    /// 400 `action_request_validation_exception`.
    ActionRequestValidation,
    /// 400 `too_many_buckets_exception` (OpenSearch answers 503 for the search; see server).
    TooManyBuckets,
    /// 500 `task_cancelled_exception`, as OpenSearch (whose exception keeps the default
    /// status) answers a cancelled search.
    TaskCancelled,
    /// 429 `rejected_execution_exception`: the node refused the work for lack of capacity.
    RejectedExecution,
    /// 404 `resource_not_found_exception`.
    ResourceNotFound,
    /// 404 `search_context_missing_exception`: a scroll id whose context expired, was cleared or
    /// never existed.
    SearchContextMissing,
    /// 500 `exception`: a bug or an I/O failure of the node.
    Internal,
    /// 401 `security_exception`: a request without valid credentials.
    Unauthenticated,
    /// 403 `security_exception`: an authenticated user without the role an action needs.
    Forbidden,
    /// 403 `cluster_block_exception`: an index block (`index.blocks.*`) refuses the operation.
    ClusterBlock,
}

impl ErrorCode {
    /// The OpenSearch error `type` string for this code.
    pub fn type_name(self) -> &'static str {
        match self {
            ErrorCode::IndexNotFound => "index_not_found_exception",
            ErrorCode::ResourceAlreadyExists => "resource_already_exists_exception",
            ErrorCode::InvalidIndexName => "invalid_index_name_exception",
            ErrorCode::Parsing => "parsing_exception",
            ErrorCode::Parse => "parse_exception",
            ErrorCode::XContentParse => "x_content_parse_exception",
            ErrorCode::IllegalArgument => "illegal_argument_exception",
            ErrorCode::MapperParsing => "mapper_parsing_exception",
            ErrorCode::QueryShard => "query_shard_exception",
            ErrorCode::SearchPhaseExecution => "search_phase_execution_exception",
            ErrorCode::VersionConflict => "version_conflict_engine_exception",
            ErrorCode::DocumentMissing => "document_missing_exception",
            ErrorCode::ActionRequestValidation => "action_request_validation_exception",
            ErrorCode::TooManyBuckets => "too_many_buckets_exception",
            ErrorCode::TaskCancelled => "task_cancelled_exception",
            ErrorCode::RejectedExecution => "rejected_execution_exception",
            ErrorCode::ResourceNotFound => "resource_not_found_exception",
            ErrorCode::SearchContextMissing => "search_context_missing_exception",
            ErrorCode::Internal => "exception",
            ErrorCode::Unauthenticated | ErrorCode::Forbidden => "security_exception",
            ErrorCode::ClusterBlock => "cluster_block_exception",
        }
    }

    /// The HTTP status OpenSearch answers with for this code.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::IndexNotFound
            | ErrorCode::DocumentMissing
            | ErrorCode::ResourceNotFound
            | ErrorCode::SearchContextMissing => 404,
            ErrorCode::VersionConflict => 409,
            ErrorCode::TooManyBuckets => 503,
            ErrorCode::RejectedExecution => 429,
            ErrorCode::Internal | ErrorCode::TaskCancelled => 500,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden | ErrorCode::ClusterBlock => 403,
            _ => 400,
        }
    }
}

/// An engine failure: a code, a reason, and where known the index and the underlying cause.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineError {
    /// The classification of this error.
    pub code: ErrorCode,
    /// What went wrong, in OpenSearch's words where compatibility fixes them.
    pub reason: String,
    /// The index the error is about, rendered as `index` in the error JSON.
    pub index: Option<String>,
    /// The root cause, when this error wraps another (a search phase failure around a shard
    /// failure, say).
    pub cause: Option<Box<EngineError>>,
    /// Extra fields rendered beside `type` and `reason` (line, col, resource.id …).
    pub extra: Vec<(&'static str, serde_json::Value)>,
}

impl EngineError {
    /// Makes an error of `code` with `reason`.
    pub fn new(code: ErrorCode, reason: impl Into<String>) -> Self {
        EngineError {
            code,
            reason: reason.into(),
            index: None,
            cause: None,
            extra: Vec::new(),
        }
    }

    /// Sets the index this error is about.
    pub fn with_index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// Adds an extra field to the rendered error.
    pub fn with_extra(mut self, key: &'static str, value: serde_json::Value) -> Self {
        self.extra.push((key, value));
        self
    }

    /// Shorthand for a 404 `index_not_found_exception` naming `index`.
    pub fn index_not_found(index: &str) -> Self {
        EngineError::new(ErrorCode::IndexNotFound, format!("no such index [{index}]"))
            .with_index(index)
            .with_extra("resource.type", serde_json::Value::from("index_or_alias"))
            .with_extra("resource.id", serde_json::Value::from(index))
            .with_extra("index_uuid", serde_json::Value::from("_na_"))
    }

    /// Shorthand for a 400 `illegal_argument_exception`.
    pub fn illegal_argument(reason: impl Into<String>) -> Self {
        EngineError::new(ErrorCode::IllegalArgument, reason)
    }

    /// Shorthand for a 400 `parsing_exception`.
    pub fn parsing(reason: impl Into<String>) -> Self {
        EngineError::new(ErrorCode::Parsing, reason)
    }

    /// Shorthand for a 400 `query_shard_exception`.
    pub fn query_shard(reason: impl Into<String>) -> Self {
        EngineError::new(ErrorCode::QueryShard, reason)
    }

    /// Shorthand for a 400 `mapper_parsing_exception`.
    pub fn mapper_parsing(reason: impl Into<String>) -> Self {
        EngineError::new(ErrorCode::MapperParsing, reason)
    }

    /// Shorthand for a 500 internal error, for I/O and engine failures.
    pub fn internal(reason: impl Into<String>) -> Self {
        EngineError::new(ErrorCode::Internal, reason)
    }

    /// Wraps a per-index query failure the way OpenSearch reports it: a
    /// `search_phase_execution_exception` ("all shards failed") around the shard's error.
    pub fn into_search_phase_failure(self) -> Self {
        match self.code {
            ErrorCode::QueryShard | ErrorCode::IllegalArgument => {
                let status_code = self.code;
                let mut outer =
                    EngineError::new(ErrorCode::SearchPhaseExecution, "all shards failed")
                        .with_extra("phase", serde_json::Value::from("query"))
                        .with_extra("grouped", serde_json::Value::from(true));
                let _ = status_code;
                outer.cause = Some(Box::new(self));
                outer
            }
            _ => self,
        }
    }

    /// The innermost cause, reported as OpenSearch's `root_cause`.
    pub fn root_cause(&self) -> &EngineError {
        let mut e = self;
        while let Some(c) = &e.cause {
            e = c;
        }
        e
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.type_name(), self.reason)
    }
}

impl std::error::Error for EngineError {}

impl From<tantivy::TantivyError> for EngineError {
    fn from(e: tantivy::TantivyError) -> Self {
        EngineError::internal(format!("search engine failure: {e}"))
    }
}

impl From<std::io::Error> for EngineError {
    fn from(e: std::io::Error) -> Self {
        EngineError::internal(format!("i/o failure: {e}"))
    }
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
