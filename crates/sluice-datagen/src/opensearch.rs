//! OpenSearch request bodies for the generated documents: the index mapping and `_bulk` bodies.

use std::io::Write as _;

use serde_json::{Value, json};

use crate::field;

/// Bytes reserved per document when sizing a `_bulk` body: a generated document serialises to
/// roughly 250–350 bytes plus its action line, so this avoids most regrowth without waste.
const BULK_BYTES_PER_DOC: usize = 400;

/// Returns the OpenSearch `mappings` object for the generated documents.
///
/// Pass it as the `mappings` of a create-index request: `{"mappings": index_mapping()}`.
/// `message` is analysed text; the other strings are keywords for term queries and
/// aggregations.
pub fn index_mapping() -> Value {
    let mut properties = serde_json::Map::new();
    for (name, kind) in [
        (field::TIMESTAMP, "date"),
        (field::LEVEL, "keyword"),
        (field::SERVICE, "keyword"),
        (field::HOST, "keyword"),
        (field::MESSAGE, "text"),
        (field::STATUS, "integer"),
        (field::LATENCY_MS, "double"),
        (field::USER, "keyword"),
        (field::BYTES, "long"),
    ] {
        properties.insert(name.to_owned(), json!({ "type": kind }));
    }
    json!({ "properties": properties })
}

/// Builds a `_bulk` NDJSON body that indexes `docs` into `index` with server-assigned ids.
///
/// Each document becomes an action line `{"index":{"_index":"<index>"}}` followed by the
/// document on one line; the body ends with the newline `_bulk` requires.
pub fn bulk_body(index: &str, docs: &[Value]) -> String {
    let mut action = Vec::with_capacity(index.len() + 24);
    write_json(&mut action, &json!({ "index": { "_index": index } }));
    action.push(b'\n');

    let mut body = Vec::with_capacity(docs.len() * BULK_BYTES_PER_DOC);
    for doc in docs {
        body.extend_from_slice(&action);
        write_json(&mut body, doc);
        body.push(b'\n');
    }
    into_string(body)
}

/// Builds a `_bulk` NDJSON body that indexes `docs` into `index` with ids `first_id`,
/// `first_id + 1`, and so on.
///
/// Each action line is `{"index":{"_index":"<index>","_id":"<n>"}}`. Explicit ids make a load
/// idempotent: running it twice overwrites instead of duplicating.
pub fn bulk_body_with_ids(index: &str, docs: &[Value], first_id: u64) -> String {
    // The action line is `{"index":{"_index":<index>,"_id":"<n>"}}`; only `<n>` varies.
    let mut prefix = b"{\"index\":{\"_index\":".to_vec();
    write_json(&mut prefix, &Value::from(index));
    prefix.extend_from_slice(b",\"_id\":\"");

    let mut body = Vec::with_capacity(docs.len() * BULK_BYTES_PER_DOC);
    for (id, doc) in (first_id..).zip(docs) {
        body.extend_from_slice(&prefix);
        // Writing to a Vec cannot fail.
        let _ = writeln!(body, "{id}\"}}}}");
        write_json(&mut body, doc);
        body.push(b'\n');
    }
    into_string(body)
}

/// Appends the compact JSON text of `value` to `out`.
fn write_json(out: &mut Vec<u8>, value: &Value) {
    serde_json::to_writer(out, value)
        .expect("serialising a serde_json::Value into a Vec cannot fail");
}

fn into_string(body: Vec<u8>) -> String {
    String::from_utf8(body).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_START_EPOCH_MILLIS, LogGenerator};

    fn docs(n: usize) -> Vec<Value> {
        LogGenerator::new(9, DEFAULT_START_EPOCH_MILLIS)
            .take(n)
            .collect()
    }

    #[test]
    fn test_index_mapping_types_every_generated_field() {
        let mapping = index_mapping();
        let properties = mapping["properties"].as_object().unwrap();
        let doc = &docs(1)[0];
        let doc_fields: Vec<&String> = doc.as_object().unwrap().keys().collect();
        let mapped_fields: Vec<&String> = properties.keys().collect();
        assert_eq!(doc_fields, mapped_fields);
        assert_eq!(properties["@timestamp"]["type"], "date");
        assert_eq!(properties["message"]["type"], "text");
        assert_eq!(properties["service"]["type"], "keyword");
        assert_eq!(properties["status"]["type"], "integer");
        assert_eq!(properties["latency_ms"]["type"], "double");
        assert_eq!(properties["bytes"]["type"], "long");
    }

    #[test]
    fn test_bulk_body_alternates_action_and_document_lines() {
        let docs = docs(3);
        let body = bulk_body("logs", &docs);
        assert!(body.ends_with('\n'));
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len(), 6);
        for (pair, doc) in lines.chunks(2).zip(&docs) {
            assert_eq!(pair[0], r#"{"index":{"_index":"logs"}}"#);
            assert_eq!(&serde_json::from_str::<Value>(pair[1]).unwrap(), doc);
        }
    }

    #[test]
    fn test_bulk_body_with_ids_numbers_documents_from_first_id() {
        let docs = docs(2);
        let body = bulk_body_with_ids("logs", &docs, 41);
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines[0], r#"{"index":{"_index":"logs","_id":"41"}}"#);
        assert_eq!(lines[2], r#"{"index":{"_index":"logs","_id":"42"}}"#);
        assert_eq!(&serde_json::from_str::<Value>(lines[3]).unwrap(), &docs[1]);
        assert!(body.ends_with('\n'));
    }

    #[test]
    fn test_bulk_body_escapes_the_index_name() {
        let body = bulk_body_with_ids("we\"ird", &docs(1), 0);
        let action: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
        assert_eq!(action["index"]["_index"], "we\"ird");
        assert_eq!(action["index"]["_id"], "0");
        let body = bulk_body("we\"ird", &docs(1));
        let action: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
        assert_eq!(action["index"]["_index"], "we\"ird");
    }

    #[test]
    fn test_bulk_body_of_no_documents_is_empty() {
        assert_eq!(bulk_body("logs", &[]), "");
        assert_eq!(bulk_body_with_ids("logs", &[], 0), "");
    }
}
