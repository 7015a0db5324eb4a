//! The error type of the core and its classification into a small set of codes.

/// Result alias used throughout the core.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// The class of a [`CoreError`]; [`ErrorCode::wire_code`] maps each once to the wire crate's
/// code, which fixes the HTTP status and the OpenSearch error `type`.
///
/// | code | status | OpenSearch `type` |
/// |---|---|---|
/// | `Validation` | 400 | `illegal_argument_exception` |
/// | `NotFound` | 404 | `resource_not_found_exception` |
/// | `AlreadyExists` | 400 | `illegal_argument_exception` (OpenSearch reports duplicates as 400, not 409) |
/// | `Conflict` | 400 | `illegal_argument_exception` (a cross-group constraint such as the resource sum) |
/// | `TooMany` | 429 | `rejected_execution_exception` (OpenSearch uses 429 for the rule cardinality limit; for the group count it throws an `IllegalStateException`, a 500, which sluice does not copy) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request itself is malformed or violates a rule of a single object.
    Validation,
    /// The named object does not exist.
    NotFound,
    /// An object with the same identity (name, or rule attributes) already exists.
    AlreadyExists,
    /// The request is valid alone but conflicts with the state of other objects.
    Conflict,
    /// A cardinality limit (number of groups or rules) would be exceeded.
    TooMany,
}

/// An error of the domain core; its `Display` is the reason text sent to the client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    /// A field of the request is invalid; `field` is its dotted path (e.g. `throttling.node_limit`).
    #[error("{message}")]
    Validation {
        /// Dotted path of the offending field; empty when the body as a whole is malformed.
        field: String,
        /// Full reason text.
        message: String,
    },
    /// The named object does not exist.
    #[error("{message}")]
    NotFound {
        /// Full reason text.
        message: String,
    },
    /// An object with the same identity already exists.
    #[error("{message}")]
    AlreadyExists {
        /// Full reason text.
        message: String,
    },
    /// The request conflicts with the state of other objects.
    #[error("{message}")]
    Conflict {
        /// Full reason text.
        message: String,
    },
    /// A cardinality limit would be exceeded.
    #[error("{message}")]
    TooMany {
        /// Full reason text.
        message: String,
    },
}

impl CoreError {
    /// Builds a [`CoreError::Validation`] for `field`.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        CoreError::Validation {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Returns the class of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            CoreError::Validation { .. } => ErrorCode::Validation,
            CoreError::NotFound { .. } => ErrorCode::NotFound,
            CoreError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            CoreError::Conflict { .. } => ErrorCode::Conflict,
            CoreError::TooMany { .. } => ErrorCode::TooMany,
        }
    }

    /// Returns the dotted path of the offending field, for validation errors.
    pub fn field(&self) -> Option<&str> {
        match self {
            CoreError::Validation { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Returns the reason text.
    pub fn message(&self) -> &str {
        match self {
            CoreError::Validation { message, .. }
            | CoreError::NotFound { message }
            | CoreError::AlreadyExists { message }
            | CoreError::Conflict { message }
            | CoreError::TooMany { message } => message,
        }
    }
}

impl ErrorCode {
    /// The OpenSearch error class of this code (the table above).
    pub fn wire_code(self) -> sluice_wire::ErrorCode {
        match self {
            ErrorCode::Validation | ErrorCode::AlreadyExists | ErrorCode::Conflict => {
                sluice_wire::ErrorCode::IllegalArgument
            }
            ErrorCode::NotFound => sluice_wire::ErrorCode::ResourceNotFound,
            ErrorCode::TooMany => sluice_wire::ErrorCode::RejectedExecution,
        }
    }
}

impl From<CoreError> for sluice_wire::OpenSearchError {
    fn from(e: CoreError) -> Self {
        sluice_wire::OpenSearchError::new(e.code().wire_code(), e.to_string())
    }
}
