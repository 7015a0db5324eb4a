//! Deterministic generator of realistic log documents for sluice tests, demos and benchmarks.
//!
//! [`LogGenerator`] is a seeded, infinite [`Iterator`] of `serde_json::Value` documents that look
//! like web-service access logs:
//!
//! ```json
//! {"@timestamp":"2026-11-01T10:00:00.013Z","level":"INFO","service":"gateway","host":"web-017",
//!  "message":"Request completed for the user session after retry.","status":200,
//!  "latency_ms":18.734,"user":"user_0042","bytes":2210}
//! ```
//!
//! The values are skewed the way real logs are: most requests succeed with status 200 and level
//! INFO, a few services and users carry most of the traffic, latency is log-normal, and message
//! words follow a Zipf law over a fixed [`VOCABULARY`], so term and match queries find both
//! common and rare terms. Timestamps strictly increase by small random steps.
//!
//! The same seed and start instant always produce the same documents, byte for byte, so a
//! benchmark run or a failing test can be replayed exactly.
//!
//! [`index_mapping`] returns the OpenSearch mapping for these fields, and [`bulk_body`] /
//! [`bulk_body_with_ids`] turn a batch of documents into a `_bulk` request body. The field names
//! are constants in [`field`].
//!
//! ```
//! use sluice_datagen::{DEFAULT_START_EPOCH_MILLIS, LogGenerator, bulk_body};
//!
//! let docs: Vec<_> = LogGenerator::new(42, DEFAULT_START_EPOCH_MILLIS).take(100).collect();
//! let body = bulk_body("logs", &docs);
//! assert_eq!(body.lines().count(), 200);
//! ```

mod generator;
mod opensearch;
mod sample;
mod vocabulary;

pub use generator::{
    DEFAULT_START_EPOCH_MILLIS, LogGenerator, MAX_MESSAGE_WORDS, MAX_START_EPOCH_MILLIS,
    MAX_STEP_MILLIS, MIN_MESSAGE_WORDS, format_timestamp,
};
pub use opensearch::{bulk_body, bulk_body_with_ids, index_mapping};
pub use vocabulary::{HOST_PREFIXES, HOSTS_PER_PREFIX, NUM_USERS, SERVICES, VOCABULARY};

/// Names of the fields of a generated document, in the order they appear in it.
pub mod field {
    /// When the request was logged: ISO-8601 UTC with millis, mapped as `date`.
    pub const TIMESTAMP: &str = "@timestamp";
    /// Log level, one of `INFO`, `WARN`, `ERROR`, `DEBUG`; a `keyword`.
    pub const LEVEL: &str = "level";
    /// Name of the service that logged the request, from [`crate::SERVICES`]; a `keyword`.
    pub const SERVICE: &str = "service";
    /// Host that served the request, such as `web-017`; a `keyword`.
    pub const HOST: &str = "host";
    /// A sentence of 8–20 words from [`crate::VOCABULARY`]; analysed `text`.
    pub const MESSAGE: &str = "message";
    /// HTTP status code of the response; an `integer`.
    pub const STATUS: &str = "status";
    /// Time taken to serve the request in milliseconds; a `double`.
    pub const LATENCY_MS: &str = "latency_ms";
    /// Who made the request, such as `user_0042`; a `keyword`.
    pub const USER: &str = "user";
    /// Size of the response body; a `long`.
    pub const BYTES: &str = "bytes";
}
