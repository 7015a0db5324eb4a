//! The error taxonomy: every failure a client sees is classified once into an [`ErrorCode`],
//! which fixes its HTTP status and its OpenSearch error `type`; [`render_error`] writes the
//! OpenSearch JSON (`root_cause`, `type`, `reason`, `caused_by` …).

use std::fmt;

use serde_json::{Map, Value};

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
    /// 400 `strict_dynamic_mapping_exception`: a document bringing a field that a `strict`
    /// (or `strict_allow_templates`) mapping does not allow (OpenSearch's subclass of the
    /// mapper parsing exception).
    StrictDynamicMapping,
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
    /// 500 `node_not_connected_exception`: a request routed to another node of the cluster
    /// (a task's node, say) could not reach it.
    NodeNotConnected,
    /// 503 `cluster_manager_not_discovered_exception`: the node cannot reach what holds the
    /// cluster's metadata (OpenSearch: the elected cluster manager; sluice: the metastore),
    /// so a metadata change cannot be made now; retry later.
    ClusterManagerNotDiscovered,
    /// 400 `invalid_alias_name_exception`.
    InvalidAliasName,
    /// 404 `aliases_not_found_exception`.
    AliasesNotFound,
    /// 400 `index_closed_exception`: an operation on a closed index.
    IndexClosed,
    /// 400 `unsupported_operation_exception` (OpenSearch answers 500 for a bad `_cat` sort
    /// key; sluice keeps the type but blames the request).
    UnsupportedOperation,
    /// 500 `illegal_state_exception`, as OpenSearch answers a change that would break an
    /// invariant of its metadata (two write indices for one alias).
    IllegalState,
    /// 500 `aggregation_execution_exception`: an aggregation OpenSearch refuses while building
    /// it on a shard (a regular expression `include` on a numeric field); OpenSearch's exception
    /// keeps the default status.
    AggregationExecution,
    /// 500 `timeout_exception`: a wait the request bounded (`GET _tasks/{id}` with
    /// `wait_for_completion`) ran out; OpenSearch's `OpenSearchTimeoutException` keeps the
    /// default status.
    Timeout,
    /// 502 `upstream_exception`: a gateway could not get an answer from its upstream cluster
    /// (refused, unreachable, reset, or not HTTP). sluice's own: OpenSearch has no gateway.
    UpstreamFailed,
    /// 502 `upstream_exception`, as [`ErrorCode::UpstreamFailed`]: no host of the upstream
    /// could be connected to (refused, not reached within `backend.upstream.connect_timeout`),
    /// so nothing of the request was sent. A code of its own, rendered the same, so that a
    /// gateway tells a request that never reached the upstream (nothing of it can run there)
    /// from one that failed on its way or after (which may).
    UpstreamUnreachable,
    /// 504 `upstream_timeout_exception`: the upstream cluster did not answer within
    /// `backend.upstream.request_timeout`. sluice's own, like [`ErrorCode::UpstreamFailed`].
    UpstreamTimeout,
    /// 400 `too_long_http_header_exception`: the request's headers are over OpenSearch's
    /// `http.max_header_size` (16 KB).
    TooLongHttpHeader,
    /// 503 `node_closed_exception`: the node began to stop while the request still waited for
    /// admission (in a throttle queue, for a shared-tier lease or for its group's share), so it
    /// never ran; retry it on another node. OpenSearch's `NodeClosedException` keeps the default
    /// status (500); sluice answers 503, the status clients retry on another node, since the
    /// request was never started (docs/compatibility.md).
    NodeClosed,
    /// 400 `too_long_http_line_exception`: the request line is longer than the node reads
    /// (Netty's `TooLongHttpLineException`, past `http.max_initial_line_length`).
    TooLongHttpLine,
    /// 400 `routing_missing_exception`: a document write or get without a routing value on an
    /// index whose mapping requires one (`"_routing": {"required": true}`).
    RoutingMissing,
}

/// Whose names an answer of sluice's own uses where OpenSearch's and Elasticsearch's differ:
/// OpenSearch's, but on a gateway in front of Elasticsearch, whose clients read its names
/// (its error types, its `Warning` header's agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// OpenSearch's names: an embedded node, and a gateway in front of OpenSearch.
    #[default]
    OpenSearch,
    /// Elasticsearch's names, where they differ.
    Elasticsearch,
}

impl ErrorCode {
    /// The error `type` string for this code in `dialect`: [`Self::type_name`], but
    /// Elasticsearch's where it differs. Elasticsearch names an exception after its class
    /// (`EsRejectedExecutionException`, `es_rejected_execution_exception`); OpenSearch renamed
    /// that class (`OpenSearchRejectedExecutionException`) and dropped the prefix from its
    /// name. The other types sluice answers are the same in both.
    pub fn type_name_in(self, dialect: Dialect) -> &'static str {
        match (self, dialect) {
            (ErrorCode::RejectedExecution, Dialect::Elasticsearch) => {
                "es_rejected_execution_exception"
            }
            _ => self.type_name(),
        }
    }

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
            ErrorCode::StrictDynamicMapping => "strict_dynamic_mapping_exception",
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
            ErrorCode::NodeNotConnected => "node_not_connected_exception",
            ErrorCode::ClusterManagerNotDiscovered => "cluster_manager_not_discovered_exception",
            ErrorCode::InvalidAliasName => "invalid_alias_name_exception",
            ErrorCode::AliasesNotFound => "aliases_not_found_exception",
            ErrorCode::IndexClosed => "index_closed_exception",
            ErrorCode::UnsupportedOperation => "unsupported_operation_exception",
            ErrorCode::IllegalState => "illegal_state_exception",
            ErrorCode::AggregationExecution => "aggregation_execution_exception",
            ErrorCode::Timeout => "timeout_exception",
            ErrorCode::UpstreamFailed | ErrorCode::UpstreamUnreachable => "upstream_exception",
            ErrorCode::UpstreamTimeout => "upstream_timeout_exception",
            ErrorCode::TooLongHttpHeader => "too_long_http_header_exception",
            ErrorCode::NodeClosed => "node_closed_exception",
            ErrorCode::TooLongHttpLine => "too_long_http_line_exception",
            ErrorCode::RoutingMissing => "routing_missing_exception",
        }
    }

    /// The HTTP status OpenSearch answers with for this code.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::IndexNotFound
            | ErrorCode::DocumentMissing
            | ErrorCode::ResourceNotFound
            | ErrorCode::SearchContextMissing
            | ErrorCode::AliasesNotFound => 404,
            ErrorCode::VersionConflict => 409,
            ErrorCode::TooManyBuckets
            | ErrorCode::ClusterManagerNotDiscovered
            | ErrorCode::NodeClosed => 503,
            ErrorCode::RejectedExecution => 429,
            ErrorCode::Internal
            | ErrorCode::TaskCancelled
            | ErrorCode::NodeNotConnected
            | ErrorCode::IllegalState
            | ErrorCode::AggregationExecution
            | ErrorCode::Timeout => 500,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden | ErrorCode::ClusterBlock => 403,
            ErrorCode::UpstreamFailed | ErrorCode::UpstreamUnreachable => 502,
            ErrorCode::UpstreamTimeout => 504,
            _ => 400,
        }
    }
}

/// An error as OpenSearch reports it: a code, a reason, and where known the index and the
/// underlying cause. Every crate's failures that reach a client end up as one of these.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenSearchError {
    /// The classification of this error.
    pub code: ErrorCode,
    /// What went wrong, in OpenSearch's words where compatibility fixes them.
    pub reason: String,
    /// The index the error is about, rendered as `index` in the error JSON.
    pub index: Option<String>,
    /// The root cause, when this error wraps another (a search phase failure around a shard
    /// failure, say).
    pub cause: Option<Box<OpenSearchError>>,
    /// Extra fields rendered beside `type` and `reason` (line, col, resource.id …).
    pub extra: Vec<(&'static str, Value)>,
    /// Where the shard of a search phase failure failed (`failed_shards[]`); boxed, as
    /// few errors have one, to keep every `Result` small.
    pub shard: Option<Box<ShardTarget>>,
}

/// Where a search phase failure's shard failed, rendered as `failed_shards[]`'s `index` and
/// `node` (`null` where not known).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardTarget {
    /// The shard's index, when the cause does not name it (a cancelled search's
    /// `task_cancelled_exception` names none, yet its shard had one).
    pub index: Option<String>,
    /// The id of the node the shard failed on. Set by the node that answers
    /// ([`OpenSearchError::on_node`]), which alone knows its id.
    pub node: Option<String>,
}

impl OpenSearchError {
    /// Makes an error of `code` with `reason`.
    pub fn new(code: ErrorCode, reason: impl Into<String>) -> Self {
        OpenSearchError {
            code,
            reason: reason.into(),
            index: None,
            cause: None,
            extra: Vec::new(),
            shard: None,
        }
    }

    /// Names the node a search phase failure's shard failed on (`failed_shards[].node`),
    /// unless one is named already; other errors are unchanged.
    pub fn on_node(mut self, node_id: &str) -> Self {
        if self.code == ErrorCode::SearchPhaseExecution {
            let shard = self.shard.get_or_insert_with(Box::default);
            shard.node.get_or_insert_with(|| node_id.to_string());
        }
        self
    }

    /// Names the index of a search phase failure's shard (`failed_shards[].index`) when its
    /// cause does not; other errors are unchanged.
    pub fn on_index(mut self, index: &str) -> Self {
        if self.code == ErrorCode::SearchPhaseExecution {
            self.shard.get_or_insert_with(Box::default).index = Some(index.to_string());
        }
        self
    }

    /// Sets the index this error is about.
    pub fn with_index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// Adds an extra field to the rendered error.
    pub fn with_extra(mut self, key: &'static str, value: Value) -> Self {
        self.extra.push((key, value));
        self
    }

    /// Adds OpenSearch's `line` and `col` to a `parsing_exception` about a request body: the
    /// place in `body` where the value of the member the reason names (`unknown query [foo]`)
    /// starts. Other errors, and reasons naming nothing found in the body, are unchanged.
    pub fn with_location_in(mut self, body: &[u8]) -> Self {
        if self.code != ErrorCode::Parsing || self.extra.iter().any(|(k, _)| *k == "line") {
            return self;
        }
        let Ok(text) = std::str::from_utf8(body) else {
            return self;
        };
        let named = self
            .reason
            .split('[')
            .skip(1)
            .filter_map(|s| s.split(']').next())
            .find_map(|name| crate::json::locate_member_value(text, name));
        if let Some((line, col)) = named {
            self.extra.push(("line", Value::from(line)));
            self.extra.push(("col", Value::from(col)));
        }
        self
    }

    /// Shorthand for a 404 `index_not_found_exception` naming `index`.
    pub fn index_not_found(index: &str) -> Self {
        OpenSearchError::new(ErrorCode::IndexNotFound, format!("no such index [{index}]"))
            .with_index(index)
            .with_extra("resource.type", Value::from("index_or_alias"))
            .with_extra("resource.id", Value::from(index))
            .with_extra("index_uuid", Value::from("_na_"))
    }

    /// Shorthand for a 400 `illegal_argument_exception`.
    pub fn illegal_argument(reason: impl Into<String>) -> Self {
        OpenSearchError::new(ErrorCode::IllegalArgument, reason)
    }

    /// Shorthand for a 400 `parsing_exception`.
    pub fn parsing(reason: impl Into<String>) -> Self {
        OpenSearchError::new(ErrorCode::Parsing, reason)
    }

    /// Shorthand for a 400 `query_shard_exception`.
    pub fn query_shard(reason: impl Into<String>) -> Self {
        OpenSearchError::new(ErrorCode::QueryShard, reason)
    }

    /// Shorthand for a 400 `mapper_parsing_exception`.
    pub fn mapper_parsing(reason: impl Into<String>) -> Self {
        OpenSearchError::new(ErrorCode::MapperParsing, reason)
    }

    /// Shorthand for a 500 internal error, for I/O and engine failures.
    pub fn internal(reason: impl Into<String>) -> Self {
        OpenSearchError::new(ErrorCode::Internal, reason)
    }

    /// Wraps a per-index query failure the way OpenSearch reports it: a
    /// `search_phase_execution_exception` ("all shards failed") around the shard's error.
    pub fn into_search_phase_failure(self) -> Self {
        match self.code {
            ErrorCode::QueryShard
            | ErrorCode::IllegalArgument
            | ErrorCode::AggregationExecution => {
                let mut outer =
                    OpenSearchError::new(ErrorCode::SearchPhaseExecution, "all shards failed")
                        .with_extra("phase", Value::from("query"))
                        .with_extra("grouped", Value::from(true));
                outer.cause = Some(Box::new(self));
                outer
            }
            _ => self,
        }
    }

    /// The innermost cause, reported as OpenSearch's `root_cause`.
    pub fn root_cause(&self) -> &OpenSearchError {
        let mut e = self;
        while let Some(c) = &e.cause {
            e = c;
        }
        e
    }
}

impl fmt::Display for OpenSearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.type_name(), self.reason)
    }
}

impl std::error::Error for OpenSearchError {}

impl From<std::io::Error> for OpenSearchError {
    fn from(e: std::io::Error) -> Self {
        OpenSearchError::internal(format!("i/o failure: {e}"))
    }
}

impl OpenSearchError {
    /// The HTTP status of this error. A search phase failure takes its root cause's status, as
    /// OpenSearch's does.
    pub fn status(&self) -> u16 {
        if self.code == ErrorCode::SearchPhaseExecution {
            self.root_cause().code.status()
        } else {
            self.code.status()
        }
    }

    /// The whole OpenSearch error body: `{"error": {…}, "status": N}`.
    pub fn to_body(&self) -> Value {
        let mut body = Map::new();
        body.insert("error".into(), render_error(self));
        body.insert("status".into(), Value::from(self.status()));
        Value::Object(body)
    }
}

/// The fields of one level of an error: `type` (in `dialect`), `reason`, `index` and the
/// extras.
fn error_object(e: &OpenSearchError, dialect: Dialect) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), Value::from(e.code.type_name_in(dialect)));
    m.insert("reason".into(), Value::from(e.reason.as_str()));
    if let Some(index) = &e.index {
        m.insert("index".into(), Value::from(index.as_str()));
    }
    for (k, v) in &e.extra {
        m.insert((*k).to_string(), v.clone());
    }
    m
}

/// Renders an error as OpenSearch's `error` object (without `status`): `root_cause` first,
/// then the error's own fields, then `failed_shards` (search phase failures) and `caused_by`.
pub fn render_error(e: &OpenSearchError) -> Value {
    render_error_in(e, Dialect::OpenSearch)
}

/// [`render_error`] with the types named in `dialect` ([`ErrorCode::type_name_in`]).
pub fn render_error_in(e: &OpenSearchError, dialect: Dialect) -> Value {
    let error_object = |e: &OpenSearchError| error_object(e, dialect);
    let mut out = Map::new();
    out.insert(
        "root_cause".into(),
        Value::Array(vec![Value::Object(error_object(e.root_cause()))]),
    );
    out.extend(error_object(e));
    if let Some(cause) = &e.cause {
        if e.code == ErrorCode::SearchPhaseExecution {
            let mut shard = Map::new();
            shard.insert("shard".into(), Value::from(0));
            let target = e.shard.as_deref();
            let index = target
                .and_then(|t| t.index.as_deref())
                .or(cause.index.as_deref());
            shard.insert("index".into(), index.map_or(Value::Null, Value::from));
            let node = target.and_then(|t| t.node.as_deref());
            shard.insert("node".into(), node.map_or(Value::Null, Value::from));
            shard.insert("reason".into(), Value::Object(error_object(cause)));
            out.insert(
                "failed_shards".into(),
                Value::Array(vec![Value::Object(shard)]),
            );
        }
        out.insert("caused_by".into(), Value::Object(error_object(cause)));
    }
    Value::Object(out)
}

/// The result type of code that fails with an [`OpenSearchError`].
pub type Result<T, E = OpenSearchError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_a_rejection_in_elasticsearchs_names() {
        let e = OpenSearchError::new(ErrorCode::RejectedExecution, "full");
        let es = render_error_in(&e, Dialect::Elasticsearch);
        assert_eq!(es["type"], "es_rejected_execution_exception");
        assert_eq!(
            es["root_cause"][0]["type"],
            "es_rejected_execution_exception"
        );
        assert_eq!(render_error(&e)["type"], "rejected_execution_exception");
        // The names the two share are unchanged.
        let other = OpenSearchError::index_not_found("logs");
        assert_eq!(
            render_error_in(&other, Dialect::Elasticsearch),
            render_error(&other)
        );
    }

    #[test]
    fn test_index_not_found_renders_as_opensearch_does() {
        let e = OpenSearchError::index_not_found("logs");
        assert_eq!(e.status(), 404);
        assert_eq!(
            e.to_body(),
            json!({
                "error": {
                    "root_cause": [{
                        "type": "index_not_found_exception",
                        "reason": "no such index [logs]",
                        "index": "logs",
                        "resource.type": "index_or_alias",
                        "resource.id": "logs",
                        "index_uuid": "_na_"
                    }],
                    "type": "index_not_found_exception",
                    "reason": "no such index [logs]",
                    "index": "logs",
                    "resource.type": "index_or_alias",
                    "resource.id": "logs",
                    "index_uuid": "_na_"
                },
                "status": 404
            })
        );
        let body = e.to_body();
        let first = body["error"].as_object().and_then(|o| o.keys().next());
        assert_eq!(
            first.map(String::as_str),
            Some("root_cause"),
            "OpenSearch puts root_cause first"
        );
    }

    #[test]
    fn test_search_phase_failure_takes_its_cause_status_and_shows_the_shard() {
        let e = OpenSearchError::query_shard("failed to create query: bad")
            .with_index("logs")
            .into_search_phase_failure();
        assert_eq!(e.code, ErrorCode::SearchPhaseExecution);
        assert_eq!(e.status(), 400);
        let body = render_error(&e);
        assert_eq!(body["type"], "search_phase_execution_exception");
        assert_eq!(body["reason"], "all shards failed");
        assert_eq!(body["phase"], "query");
        assert_eq!(body["root_cause"][0]["type"], "query_shard_exception");
        assert_eq!(body["caused_by"]["reason"], "failed to create query: bad");
        assert_eq!(body["failed_shards"][0]["index"], "logs");
        assert_eq!(body["failed_shards"][0]["node"], Value::Null);
        let body = render_error(&e.clone().on_node("n1").on_node("n2"));
        assert_eq!(body["failed_shards"][0]["node"], "n1");
        let other = OpenSearchError::query_shard("bad").on_node("n1");
        assert_eq!(
            other.shard, None,
            "only a search phase failure has failed shards"
        );
        assert_eq!(
            body["failed_shards"][0]["reason"]["type"],
            "query_shard_exception"
        );
    }

    #[test]
    fn test_every_code_has_a_status_and_a_type() {
        for (code, status, ty) in [
            (ErrorCode::TaskCancelled, 500, "task_cancelled_exception"),
            (
                ErrorCode::RejectedExecution,
                429,
                "rejected_execution_exception",
            ),
            (ErrorCode::TooManyBuckets, 503, "too_many_buckets_exception"),
            (ErrorCode::Unauthenticated, 401, "security_exception"),
            (ErrorCode::Forbidden, 403, "security_exception"),
            (
                ErrorCode::VersionConflict,
                409,
                "version_conflict_engine_exception",
            ),
            (ErrorCode::Parse, 400, "parse_exception"),
            (
                ErrorCode::ClusterManagerNotDiscovered,
                503,
                "cluster_manager_not_discovered_exception",
            ),
            (ErrorCode::NodeClosed, 503, "node_closed_exception"),
            (ErrorCode::UpstreamFailed, 502, "upstream_exception"),
            (ErrorCode::UpstreamUnreachable, 502, "upstream_exception"),
        ] {
            assert_eq!((code.status(), code.type_name()), (status, ty), "{code:?}");
        }
    }
}
