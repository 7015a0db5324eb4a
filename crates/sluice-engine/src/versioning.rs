//! Optimistic concurrency for document writes: OpenSearch's compare-and-set on sequence
//! numbers (`if_seq_no` + `if_primary_term`) and its version types (`version` +
//! `version_type=external|external_gte`), decided against what the index knows of a document.
//!
//! The decision is pure ([`Versioning::check_write`], [`Versioning::check_read`]); the index
//! calls it under its write lock, so a check and the write it allows are one atomic step and two
//! writers comparing against the same sequence number cannot both win.

use crate::error::{EngineError, ErrorCode, Result};
use crate::search::PRIMARY_TERM;

/// How a write's `version` is compared with the document's (OpenSearch's `VersionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VersionType {
    /// The index assigns versions; an explicit version is refused for writes.
    #[default]
    Internal,
    /// The client's version must be above the document's (`external`, `external_gt`).
    External,
    /// The client's version must be at least the document's.
    ExternalGte,
}

impl VersionType {
    /// Reads a `version_type` value as OpenSearch's `VersionType.fromString`.
    pub fn parse(s: &str) -> Result<VersionType> {
        match s {
            "internal" => Ok(VersionType::Internal),
            "external" | "external_gt" => Ok(VersionType::External),
            "external_gte" => Ok(VersionType::ExternalGte),
            other => Err(EngineError::illegal_argument(format!(
                "No version type match [{other}]"
            ))),
        }
    }

    /// The upper-case name OpenSearch prints in validation messages.
    fn name(self) -> &'static str {
        match self {
            VersionType::Internal => "INTERNAL",
            VersionType::External => "EXTERNAL",
            VersionType::ExternalGte => "EXTERNAL_GTE",
        }
    }
}

/// The concurrency conditions of one write or get, as the client gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Versioning {
    /// `if_seq_no`: the sequence number the document must carry.
    pub if_seq_no: Option<u64>,
    /// `if_primary_term`: the primary term the document must carry.
    pub if_primary_term: Option<u64>,
    /// `version`: the client's version (external) or the expected one (get).
    pub version: Option<i64>,
    /// `version_type`.
    pub version_type: VersionType,
}

/// What the index knows of a document when a write is planned: OpenSearch's version map entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Current {
    /// Never written, or its delete was forgotten (`index.gc_deletes` passed).
    Unknown,
    /// Present with this version and sequence number.
    Live {
        /// The document's version.
        version: u64,
        /// The sequence number of its last write.
        seq_no: u64,
    },
    /// Deleted recently: the tombstone keeps the delete's version and sequence number.
    Deleted {
        /// The version of the deletion.
        version: u64,
        /// The sequence number of the deletion.
        seq_no: u64,
    },
}

impl Current {
    fn version_opt(self) -> Option<u64> {
        match self {
            Current::Unknown => None,
            Current::Live { version, .. } | Current::Deleted { version, .. } => Some(version),
        }
    }

    /// Whether the document exists now.
    pub fn is_live(self) -> bool {
        matches!(self, Current::Live { .. })
    }
}

/// Shorthand for the `version_conflict_engine_exception` OpenSearch raises on `index`.
pub fn conflict(index: &str, id: &str, why: &str) -> EngineError {
    EngineError::new(
        ErrorCode::VersionConflict,
        format!("[{id}]: version conflict, {why}"),
    )
    .with_index(index)
    .with_extra("shard", serde_json::Value::from("0"))
}

fn validation(why: &str) -> EngineError {
    EngineError::new(
        ErrorCode::ActionRequestValidation,
        format!("Validation Failed: 1: {why};"),
    )
}

impl Versioning {
    /// Whether the write carries no condition at all.
    pub fn is_unconditional(&self) -> bool {
        self.if_seq_no.is_none()
            && self.if_primary_term.is_none()
            && self.version.is_none()
            && self.version_type == VersionType::Internal
    }

    /// Validates the conditions of an index or delete request (OpenSearch's request validation
    /// and `validateSeqNoBasedCASParams`); `create` for `op_type=create`, `has_id` whether the
    /// client named the document.
    pub fn validate_write(&self, create: bool, has_id: bool) -> Result<()> {
        if create {
            if self.version_type != VersionType::Internal {
                return Err(validation(
                    "create operations only support internal versioning. use index instead",
                ));
            }
            if self.version.is_some() {
                return Err(validation(
                    "create operations do not support explicit versions. use index instead",
                ));
            }
            if self.if_seq_no.is_some() || self.if_primary_term.is_some() {
                return Err(validation(
                    "create operations do not support compare and set. use index instead",
                ));
            }
        }
        if !has_id && (self.version_type != VersionType::Internal || self.version.is_some()) {
            return Err(validation(
                "an id must be provided if version type or value are set",
            ));
        }
        // OpenSearch's unset version is MATCH_ANY (-3), which external types refuse.
        if self.version_type != VersionType::Internal
            && let v @ ..0 = self.version.unwrap_or(-3)
        {
            return Err(validation(&format!(
                "illegal version value [{v}] for version type [{}]",
                self.version_type.name()
            )));
        }
        self.validate_cas()
    }

    /// Validates the conditions of an update request: no version types, and compare-and-set
    /// as for writes.
    pub fn validate_update(&self) -> Result<()> {
        if self.version_type != VersionType::Internal {
            return Err(validation(&format!(
                "version type [{}] is not supported by the update API",
                self.version_type.name().to_lowercase()
            )));
        }
        self.validate_cas()
    }

    fn validate_cas(&self) -> Result<()> {
        if self.version_type == VersionType::Internal && self.version.is_some() {
            return Err(validation(
                "internal versioning can not be used for optimistic concurrency control. Please use `if_seq_no` and `if_primary_term` instead",
            ));
        }
        match (self.if_seq_no, self.if_primary_term) {
            (Some(_), _) if self.version.is_some() => Err(validation(
                "compare and write operations can not use versioning",
            )),
            (Some(_), None | Some(0)) => Err(validation("ifSeqNo is set, but primary term is [0]")),
            (None, Some(term)) if term != 0 => Err(validation(&format!(
                "ifSeqNo is unassigned, but primary term is [{term}]"
            ))),
            _ => Ok(()),
        }
    }

    /// Decides a write (index or delete) against the document's current state; returns the
    /// version the write gives the document, or the conflict.
    pub fn check_write(&self, index: &str, id: &str, current: Current) -> Result<u64> {
        if let Some(if_seq_no) = self.if_seq_no {
            let term = self.if_primary_term.unwrap_or(0);
            let found = match current {
                Current::Unknown => None,
                Current::Live { seq_no, .. } | Current::Deleted { seq_no, .. } => Some(seq_no),
            };
            match found {
                None => {
                    return Err(conflict(
                        index,
                        id,
                        &format!(
                            "required seqNo [{if_seq_no}], primary term [{term}]. but no document was found"
                        ),
                    ));
                }
                Some(seq_no) if seq_no != if_seq_no || term != PRIMARY_TERM => {
                    return Err(conflict(
                        index,
                        id,
                        &format!(
                            "required seqNo [{if_seq_no}], primary term [{term}]. current document has seqNo [{seq_no}] and primary term [{PRIMARY_TERM}]"
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        let current_version = current.version_opt();
        match (self.version_type, self.version) {
            (VersionType::Internal, _) => Ok(current_version.map_or(1, |v| v + 1)),
            (external, Some(wanted)) => {
                let wanted = wanted.max(0) as u64;
                match current_version {
                    Some(cur) if external == VersionType::External && cur >= wanted => {
                        Err(conflict(
                            index,
                            id,
                            &format!(
                                "current version [{cur}] is higher or equal to the one provided [{wanted}]"
                            ),
                        ))
                    }
                    Some(cur) if external == VersionType::ExternalGte && cur > wanted => {
                        Err(conflict(
                            index,
                            id,
                            &format!(
                                "current version [{cur}] is higher than the one provided [{wanted}]"
                            ),
                        ))
                    }
                    _ => Ok(wanted),
                }
            }
            // An external type without a version: OpenSearch's MATCH_ANY conflicts with any
            // existing document.
            (_, None) => match current_version {
                Some(cur) => Err(conflict(
                    index,
                    id,
                    &format!("current version [{cur}] is higher or equal to the one provided [-3]"),
                )),
                None => Ok(1),
            },
        }
    }

    /// Checks a get's `version` against the document found (OpenSearch's
    /// `isVersionConflictForReads`: every type compares for equality).
    pub fn check_read(&self, index: &str, id: &str, version: u64) -> Result<()> {
        match self.version {
            Some(wanted) if wanted != version as i64 => Err(conflict(
                index,
                id,
                &format!(
                    "current version [{version}] is different than the one provided [{wanted}]"
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cas(seq: u64) -> Versioning {
        Versioning {
            if_seq_no: Some(seq),
            if_primary_term: Some(1),
            ..Versioning::default()
        }
    }

    fn external(t: VersionType, v: i64) -> Versioning {
        Versioning {
            version: Some(v),
            version_type: t,
            ..Versioning::default()
        }
    }

    const LIVE: Current = Current::Live {
        version: 3,
        seq_no: 7,
    };

    #[test]
    fn test_compare_and_set_passes_only_on_the_current_seq_no() {
        assert_eq!(cas(7).check_write("i", "1", LIVE).unwrap(), 4);
        let e = cas(6).check_write("i", "1", LIVE).unwrap_err();
        assert_eq!(e.code, ErrorCode::VersionConflict);
        assert_eq!(
            e.reason,
            "[1]: version conflict, required seqNo [6], primary term [1]. current document has seqNo [7] and primary term [1]"
        );
        let e = cas(0).check_write("i", "1", Current::Unknown).unwrap_err();
        assert!(
            e.reason.ends_with("but no document was found"),
            "{}",
            e.reason
        );
        let wrong_term = Versioning {
            if_primary_term: Some(2),
            ..cas(7)
        };
        assert!(wrong_term.check_write("i", "1", LIVE).is_err());
    }

    #[test]
    fn test_internal_versions_count_up_from_a_tombstone() {
        let v = Versioning::default();
        assert_eq!(v.check_write("i", "1", Current::Unknown).unwrap(), 1);
        let tomb = Current::Deleted {
            version: 5,
            seq_no: 9,
        };
        assert_eq!(v.check_write("i", "1", tomb).unwrap(), 6);
    }

    #[test]
    fn test_external_versions_must_grow() {
        let ext = |v| external(VersionType::External, v);
        let gte = |v| external(VersionType::ExternalGte, v);
        assert_eq!(ext(10).check_write("i", "1", LIVE).unwrap(), 10);
        assert!(ext(3).check_write("i", "1", LIVE).is_err());
        assert_eq!(gte(3).check_write("i", "1", LIVE).unwrap(), 3);
        assert!(gte(2).check_write("i", "1", LIVE).is_err());
        assert_eq!(ext(1).check_write("i", "1", Current::Unknown).unwrap(), 1);
        let tomb = Current::Deleted {
            version: 5,
            seq_no: 9,
        };
        assert!(ext(5).check_write("i", "1", tomb).is_err());
    }

    #[test]
    fn test_validation_refuses_what_opensearch_refuses() {
        let internal = Versioning {
            version: Some(2),
            ..Versioning::default()
        };
        assert!(
            internal
                .validate_write(false, true)
                .unwrap_err()
                .reason
                .contains("internal versioning can not be used")
        );
        assert!(
            cas(1)
                .validate_write(true, true)
                .unwrap_err()
                .reason
                .contains("create operations do not support compare and set")
        );
        let no_term = Versioning {
            if_seq_no: Some(1),
            ..Versioning::default()
        };
        assert!(no_term.validate_write(false, true).is_err());
        assert!(
            external(VersionType::External, 1)
                .validate_write(false, false)
                .is_err()
        );
        assert!(cas(1).validate_write(false, true).is_ok());
    }
}
