//! Engine errors: the OpenSearch error taxonomy of `sluice-wire`, under the engine's name.
//! Every failure is an [`EngineError`] classified once by its [`ErrorCode`], which fixes the
//! HTTP status and OpenSearch error `type` the server answers with.

pub use sluice_wire::error::{ErrorCode, OpenSearchError};

/// The engine's name for [`OpenSearchError`] (one type: the wire crate defines it).
pub type EngineError = OpenSearchError;

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Classifies a tantivy failure the engine cannot attribute to the request: a 500.
///
/// A function, not a `From` impl: neither the error type nor tantivy's belongs to this crate.
pub fn tantivy_error(e: tantivy::TantivyError) -> EngineError {
    EngineError::internal(format!("search engine failure: {e}"))
}
