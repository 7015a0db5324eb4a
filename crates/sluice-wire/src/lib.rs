//! What every sluice crate shares about speaking OpenSearch, in one small crate that needs
//! neither the search engine nor an async runtime (so a build without tantivy can still
//! answer a client in OpenSearch's words).
//!
//! - [`error`]: the taxonomy — [`OpenSearchError`], classified once by [`ErrorCode`] into an
//!   HTTP status and an OpenSearch error `type` — and [`render_error`], the OpenSearch JSON
//!   (`root_cause`, `type`, `reason`, `caused_by`). The engine calls it `EngineError`; the
//!   core maps its `CoreError` into it; the server adds only the axum response glue.
//! - [`time`]: the one time-value parser, [`parse_time_value`] (OpenSearch's
//!   `TimeValue.parseTimeValue`: fractional values refused), and the two printed forms
//!   ([`format_time_value`], [`format_time_value_exact`]).
//! - [`bytes`]: byte-size values (`100mb`, [`parse_byte_size`]).
//! - [`number`]: Java's `Double.toString` ([`java_double`]) and `Long.parseLong`.
//! - [`pattern`]: wildcard matching, OpenSearch's `Regex.simpleMatch` ([`simple_match`]).
//! - [`filter_path`]: response filtering by the `filter_path` parameter ([`filter_path::FilterPath`]).
//! - [`json`]: Jackson's token names for "found `[X]`" messages.
//! - [`keys`]: the `workloadGroupId` header, the DEFAULT group id, the OpenSearch version
//!   sluice reports and the setting keys.
//!
//! ```
//! use sluice_wire::{OpenSearchError, parse_time_value};
//!
//! let e = parse_time_value("1.5s", "cancel_after_time_interval").unwrap_err();
//! let body = OpenSearchError::illegal_argument(e.to_string()).to_body();
//! assert_eq!(body["status"], 400);
//! assert_eq!(body["error"]["type"], "illegal_argument_exception");
//! assert_eq!(
//!     body["error"]["reason"],
//!     "failed to parse [1.5s], fractional time values are not supported"
//! );
//! ```

pub mod bytes;
pub mod error;
pub mod filter_path;
pub mod json;
pub mod keys;
pub mod number;
pub mod pattern;
pub mod time;

pub use bytes::parse_byte_size;
pub use error::{
    Dialect, ErrorCode, OpenSearchError, Result, ShardTarget, render_error, render_error_in,
};
pub use keys::{
    DEFAULT_GROUP_ID, OPAQUE_ID_HEADER, OPENSEARCH_COMPAT_VERSION, WORKLOAD_GROUP_ID_HEADER,
};
pub use number::{java_double, parse_java_long};
pub use pattern::simple_match;
pub use time::{
    TimeValue, TimeValueError, TimeValueErrorKind, format_time_value, format_time_value_exact,
    parse_time_value,
};
