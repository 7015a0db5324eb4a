//! The per-index write-ahead log that makes a write durable before it is acknowledged.
//!
//! tantivy makes documents durable only at commit, which is too costly per request. So every
//! write is appended here and fsynced before the request is answered; a commit records the
//! highest sequence number it covers in its payload, after which the log is emptied. On open,
//! records above the committed sequence number are replayed.
//!
//! # Format
//! One record per line: the CRC32 of the JSON as 8 hex digits, a space, the JSON of a
//! [`Record`], a newline. A line that is short or fails its checksum is a torn write from a
//! crash (never acknowledged, since acknowledgement follows the fsync): it and everything after
//! it are dropped.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// One logged write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Record {
    /// A document put (index, create or the result of an update).
    Index {
        /// Sequence number of the write.
        seq: u64,
        /// Document id.
        id: String,
        /// Version after the write.
        version: u64,
        /// The full document.
        source: serde_json::Value,
        /// The routing value it was written with (absent when none, and in logs written
        /// before routing was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        routing: Option<String>,
    },
    /// A document deletion.
    Delete {
        /// Sequence number of the write.
        seq: u64,
        /// Document id.
        id: String,
        /// Version of the deletion (0 in logs written before versions were kept).
        #[serde(default)]
        version: u64,
    },
}

impl Record {
    /// The sequence number of this record.
    pub fn seq(&self) -> u64 {
        match self {
            Record::Index { seq, .. } | Record::Delete { seq, .. } => *seq,
        }
    }
}

/// An open translog file.
#[derive(Debug)]
pub struct Translog {
    path: PathBuf,
    file: File,
    unsynced: bool,
}

impl Translog {
    /// Opens (creating if needed) the translog at `path` and returns it with the valid records
    /// it holds; a torn tail is cut off.
    pub fn open(path: &Path) -> Result<(Translog, Vec<Record>)> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let mut records = Vec::new();
        let mut valid_len = 0u64;
        {
            let mut reader = BufReader::new(&file);
            let mut line = String::new();
            loop {
                line.clear();
                let n = reader.read_line(&mut line)?;
                if n == 0 || !line.ends_with('\n') {
                    break;
                }
                let Some(rec) = parse_line(line.trim_end_matches('\n')) else {
                    break;
                };
                records.push(rec);
                valid_len += n as u64;
            }
        }
        if file.metadata()?.len() != valid_len {
            tracing::warn!(path = %path.display(), valid_len, "translog has a torn tail; dropping it");
            file.set_len(valid_len)?;
            file.sync_all()?;
        }
        file.seek(SeekFrom::End(0))?;
        Ok((
            Translog {
                path: path.to_path_buf(),
                file,
                unsynced: false,
            },
            records,
        ))
    }

    /// Appends a record (not yet durable: call [`Translog::sync`] before acknowledging).
    pub fn append(&mut self, rec: &Record) -> Result<()> {
        self.append_serialized(rec)
    }

    /// Appends a [`Record::Index`] without copying the document.
    pub fn append_index(
        &mut self,
        stored: &crate::index::StoredFields<'_>,
        source: &serde_json::Value,
    ) -> Result<()> {
        #[derive(Serialize)]
        struct IndexRef<'a> {
            op: &'static str,
            seq: u64,
            id: &'a str,
            version: u64,
            source: &'a serde_json::Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            routing: Option<&'a str>,
        }
        self.append_serialized(&IndexRef {
            op: "index",
            seq: stored.seq_no,
            id: stored.id,
            version: stored.version,
            source,
            routing: stored.routing,
        })
    }

    fn append_serialized<T: Serialize>(&mut self, rec: &T) -> Result<()> {
        let json = serde_json::to_string(rec).map_err(|e| {
            crate::EngineError::internal(format!("cannot serialize translog record: {e}"))
        })?;
        let line = format!("{:08x} {json}\n", crc32fast::hash(json.as_bytes()));
        self.file.write_all(line.as_bytes())?;
        self.unsynced = true;
        Ok(())
    }

    /// Makes every appended record durable.
    pub fn sync(&mut self) -> Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Empties the log, after a commit made its records durable in the index.
    pub fn truncate(&mut self) -> Result<()> {
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.sync_all()?;
        self.unsynced = false;
        Ok(())
    }

    /// The path of the log file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn parse_line(line: &str) -> Option<Record> {
    let (crc, json) = line.split_once(' ')?;
    let crc = u32::from_str_radix(crc, 16).ok()?;
    if crc32fast::hash(json.as_bytes()) != crc {
        return None;
    }
    serde_json::from_str(json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_records_survive_reopen_and_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("translog.log");
        let (mut log, recs) = Translog::open(&path).unwrap();
        assert!(recs.is_empty());
        let a = Record::Index {
            seq: 1,
            id: "a".into(),
            version: 1,
            source: serde_json::json!({"x": 1}),
            routing: None,
        };
        let b = Record::Delete {
            seq: 2,
            id: "a".into(),
            version: 2,
        };
        log.append(&a).unwrap();
        log.append(&b).unwrap();
        log.sync().unwrap();
        drop(log);
        // A torn write: half a line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"deadbeef {\"op\":\"del").unwrap();
        drop(f);
        let (mut log, recs) = Translog::open(&path).unwrap();
        assert_eq!(recs, vec![a.clone(), b]);
        log.append(&a).unwrap();
        log.sync().unwrap();
        drop(log);
        let (_, recs) = Translog::open(&path).unwrap();
        assert_eq!(recs.len(), 3);
    }

    #[test]
    fn test_corrupted_record_stops_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("translog.log");
        std::fs::write(
            &path,
            "00000000 {\"op\":\"delete\",\"seq\":1,\"id\":\"a\"}\n",
        )
        .unwrap();
        let (_, recs) = Translog::open(&path).unwrap();
        assert!(recs.is_empty());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}

#[cfg(test)]
mod ref_tests {
    use super::*;

    #[test]
    fn test_append_index_reads_back_as_index_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let (mut log, _) = Translog::open(&path).unwrap();
        let stored = |id, seq_no, routing| crate::index::StoredFields {
            id,
            version: 2,
            seq_no,
            routing,
        };
        log.append_index(&stored("x", 4, None), &serde_json::json!({"a": [1, 2]}))
            .unwrap();
        log.append_index(&stored("y", 5, Some("u1")), &serde_json::json!({}))
            .unwrap();
        log.sync().unwrap();
        drop(log);
        let (_, recs) = Translog::open(&path).unwrap();
        assert_eq!(
            recs,
            vec![
                Record::Index {
                    seq: 4,
                    id: "x".into(),
                    version: 2,
                    source: serde_json::json!({"a": [1, 2]}),
                    routing: None,
                },
                Record::Index {
                    seq: 5,
                    id: "y".into(),
                    version: 2,
                    source: serde_json::json!({}),
                    routing: Some("u1".into()),
                }
            ]
        );
    }
}
