//! Finds the items of an upstream's `_msearch` answer as its bytes arrive, so the gateway can
//! relay each item's bytes unparsed ([`super::msearch_merge`]): an incremental scan of the
//! answer's structure — the root object, its `responses` array, and within each item only
//! strings, escapes and bracket depth — with a state of constant size (the open brackets are
//! a bit each, at most [`MAX_DEPTH`]).
//!
//! Of each item it reads what settling its task needs ([`ItemFacts`]): its top-level `status`
//! and whether it has an `error`, as `Value::as_u64` and `Map::get` read them in the
//! answer parsed whole (a key written with escapes, which OpenSearch never writes, is not
//! recognised). Scalars inside items are not validated: the item is relayed as the upstream
//! wrote it, as a proxied search's answer is. What the relay depends on is checked: brackets
//! that do not match, a root that is not an object, a `responses` that is not an array or
//! comes twice, bytes where a `,`, `:` or the end belongs, and an answer that ends early.
//!
//! Hand-written: the crates that parse JSON incrementally either need the whole input or a
//! blocking `Read` (`serde_json`'s `StreamDeserializer`, `struson`), or copy every byte through
//! a small queue and decode every token (`actson`), which costs more than relaying it; this
//! scan skips string contents with `memchr` and allocates nothing.
//!
//! # Invariants
//! - M1 — an item's bytes are exactly the bytes from its [`Event::ItemStart`] to its
//!   [`Event::ItemEnd`] however the answer is split into chunks, and its facts are those of the
//!   item parsed whole. Tested by `test_items_and_facts_do_not_depend_on_the_split` (every
//!   split point) and `prop_items_are_found_in_any_answer_split_anywhere`.
//! - M2 — malformed or truncated input is an error ([`ScanError`]) or [`AnswerScan::finish`]'s
//!   error, never a panic and never a complete answer. Tested by
//!   `test_malformed_answers_are_errors` and `prop_truncated_or_altered_answers_never_panic`.

use std::fmt;

/// The deepest nesting an answer may have (root and `responses` included): far past the 128
/// levels `serde_json` parsed when the gateway read the answer whole, and small enough that the
/// open brackets fit in a fixed array of 16 words.
pub const MAX_DEPTH: usize = 1024;

/// Words of the bracket stack: one bit a level.
const STACK_WORDS: usize = MAX_DEPTH / 64;

/// Bytes of a key kept to compare: the longest key looked for is `responses` (9).
const KEY_BYTES: usize = 12;

/// What the scan found, with its offset in the chunk being scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// An item of `responses` begins at this offset (its first byte).
    ItemStart(usize),
    /// The item ends before this offset (exclusive), with what was read of it.
    ItemEnd(usize, ItemFacts),
    /// The root object closed: only whitespace may follow.
    Done,
}

/// What settling an item's task reads of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ItemFacts {
    /// Its top-level `status`, when that is an integer `u64` holds.
    pub status: Option<u64>,
    /// Whether it has a top-level `error` key (whatever its value).
    pub error: bool,
}

impl ItemFacts {
    /// Whether the item answered a success: no `error`, and a 2xx `status` or none.
    pub fn succeeded(&self) -> bool {
        !self.error && self.status.is_none_or(|s| (200..300).contains(&s))
    }
}

/// The answer is not an `_msearch` answer the gateway can relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    /// The byte offset in the answer where it went wrong.
    pub at: u64,
    /// What was wrong there.
    pub what: &'static str,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for ScanError {}

/// Where in the answer's root structure the scan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    /// Before the root object's `{`.
    Start,
    /// After `{` or `,` in the root: a key (or, after `{`, the end).
    Key,
    /// Inside a root key.
    InKey,
    /// After a root key: its `:`.
    Colon,
    /// After `:`: the value (`[` when the key is `responses`).
    Value,
    /// Skipping a root value other than `responses`.
    Skip,
    /// After a root value: `,` or `}`.
    Next,
    /// After `responses`' `[`: an item or `]`.
    FirstItem,
    /// After an item's `,`: an item.
    Item,
    /// Inside an item.
    InItem,
    /// After an item: `,` or `]`.
    NextItem,
    /// After the root's `}`.
    Done,
}

/// Where the scan is at an item object's own level (depth 1), for its facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// A key comes next (after `{` or `,`).
    KeyNext,
    /// Inside a key.
    InKey,
    /// After a key: its `:`.
    AfterKey,
    /// After `:`: the value.
    ValueNext,
    /// Inside the digits of a `status` value.
    InStatus,
    /// Inside (or after) another value.
    InValue,
}

/// A key read to compare: its first bytes, and whether it is plain (no escapes, not longer
/// than kept).
#[derive(Debug, Clone, Copy)]
struct Key {
    bytes: [u8; KEY_BYTES],
    len: u8,
    plain: bool,
}

impl Key {
    const EMPTY: Key = Key {
        bytes: [0; KEY_BYTES],
        len: 0,
        plain: true,
    };

    fn push(&mut self, part: &[u8]) {
        let len = self.len as usize;
        if !self.plain || len + part.len() > KEY_BYTES {
            self.plain = false;
            return;
        }
        self.bytes[len..len + part.len()].copy_from_slice(part);
        self.len = (len + part.len()) as u8;
    }

    fn is(&self, name: &[u8]) -> bool {
        self.plain && &self.bytes[..self.len as usize] == name
    }
}

/// The incremental scan of one `_msearch` answer: feed it the answer's chunks in order with
/// [`AnswerScan::next`], then call [`AnswerScan::finish`] at the answer's end.
#[derive(Debug, Clone)]
pub struct AnswerScan {
    root: Root,
    /// Open brackets inside the current value (a root value or an item).
    depth: usize,
    /// One bit a bracket of the current value: set for an object, clear for an array.
    stack: [u64; STACK_WORDS],
    /// Inside a string; `escaped` after its backslash.
    in_string: bool,
    escaped: bool,
    /// Inside a bare value (number, `true`…) that is the whole current value.
    bare: bool,
    /// The key being read (a root key, or an item's own key).
    key: Key,
    /// Whether `key` is being read (inside such a string).
    reading_key: bool,
    /// The item's own level, when the item is an object.
    level: Level,
    /// The last root key was `responses`.
    at_responses: bool,
    /// `responses` was seen.
    seen_responses: bool,
    /// The current item's facts so far, and the digits of its `status` being read.
    facts: ItemFacts,
    digits: Option<u64>,
    /// Items ended so far.
    items: usize,
    /// Bytes of the chunks scanned before the current one.
    offset: u64,
}

impl Default for AnswerScan {
    fn default() -> Self {
        AnswerScan::new()
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl AnswerScan {
    /// A scan at the answer's first byte.
    pub fn new() -> AnswerScan {
        AnswerScan {
            root: Root::Start,
            depth: 0,
            stack: [0; STACK_WORDS],
            in_string: false,
            escaped: false,
            bare: false,
            key: Key::EMPTY,
            reading_key: false,
            level: Level::InValue,
            at_responses: false,
            seen_responses: false,
            facts: ItemFacts::default(),
            digits: None,
            items: 0,
            offset: 0,
        }
    }

    /// The items that ended so far.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Whether the root object closed.
    pub fn is_done(&self) -> bool {
        self.root == Root::Done
    }

    /// At the answer's end: an error unless the root object closed (the answer broke off).
    pub fn finish(&self) -> Result<(), ScanError> {
        if self.root == Root::Done {
            Ok(())
        } else {
            Err(ScanError {
                at: self.offset,
                what: "the answer ends before its root object closes",
            })
        }
    }

    fn error(&self, pos: usize, what: &'static str) -> ScanError {
        ScanError {
            at: self.offset + pos as u64,
            what,
        }
    }

    /// Scans `buf` from `*pos` up to the next event, returned with `*pos` just past what was
    /// read; `None` once `buf` is read to its end (the next call takes the next chunk, from 0).
    pub fn next(&mut self, buf: &[u8], pos: &mut usize) -> Result<Option<Event>, ScanError> {
        while *pos < buf.len() {
            if self.root == Root::InItem || self.root == Root::Skip {
                if let Some(end) = self.value(buf, pos)? {
                    if self.root == Root::Skip {
                        self.root = Root::Next;
                        continue;
                    }
                    self.root = Root::NextItem;
                    self.items += 1;
                    let facts = self.facts;
                    return Ok(Some(Event::ItemEnd(end, facts)));
                }
                continue;
            }
            if self.root == Root::InKey {
                if self.string(buf, pos) {
                    self.reading_key = false;
                    self.root = Root::Colon;
                }
                continue;
            }
            let b = buf[*pos];
            if is_space(b) {
                *pos += 1;
                continue;
            }
            match (self.root, b) {
                (Root::Start, b'{') => self.root = Root::Key,
                (Root::Start, _) => return Err(self.error(*pos, "the answer is not a JSON object")),
                (Root::Key, b'"') => {
                    self.root = Root::InKey;
                    self.begin_string(true);
                }
                (Root::Key, b'}') | (Root::Next, b'}') => {
                    self.root = Root::Done;
                    *pos += 1;
                    return Ok(Some(Event::Done));
                }
                (Root::Key, _) => return Err(self.error(*pos, "expected a key in the answer")),
                (Root::Colon, b':') => {
                    self.at_responses = self.key.is(b"responses");
                    self.root = Root::Value;
                }
                (Root::Colon, _) => return Err(self.error(*pos, "expected ':' after a key")),
                (Root::Value, _) if self.at_responses => {
                    if self.seen_responses {
                        return Err(self.error(*pos, "the answer has two [responses]"));
                    }
                    if b != b'[' {
                        return Err(self.error(*pos, "[responses] is not an array"));
                    }
                    self.seen_responses = true;
                    self.root = Root::FirstItem;
                }
                (Root::Value, _) => {
                    self.root = Root::Skip;
                    self.begin_value();
                    continue;
                }
                (Root::Next, b',') => self.root = Root::Key,
                (Root::Next, _) => {
                    return Err(self.error(*pos, "expected ',' or '}' in the answer"));
                }
                (Root::FirstItem, b']') | (Root::NextItem, b']') => self.root = Root::Next,
                (Root::FirstItem, _) | (Root::Item, _) => {
                    self.root = Root::InItem;
                    self.begin_value();
                    self.facts = ItemFacts::default();
                    self.digits = None;
                    return Ok(Some(Event::ItemStart(*pos)));
                }
                (Root::NextItem, b',') => self.root = Root::Item,
                (Root::NextItem, _) => {
                    return Err(self.error(*pos, "expected ',' or ']' after an item"));
                }
                (Root::Done, _) => {
                    return Err(self.error(*pos, "bytes after the answer's end"));
                }
                (Root::InKey | Root::Skip | Root::InItem, _) => unreachable!("handled above"),
            }
            *pos += 1;
        }
        self.offset += buf.len() as u64;
        *pos = 0;
        Ok(None)
    }

    fn begin_value(&mut self) {
        self.depth = 0;
        self.bare = false;
        self.in_string = false;
        self.level = Level::InValue;
    }

    fn begin_string(&mut self, key: bool) {
        self.in_string = true;
        self.escaped = false;
        self.reading_key = key;
        if key {
            self.key = Key::EMPTY;
        }
    }

    /// Reads a string's bytes from `*pos` (after its opening quote) up to its closing quote:
    /// true when it closed, `*pos` past the quote.
    fn string(&mut self, buf: &[u8], pos: &mut usize) -> bool {
        loop {
            if self.escaped {
                if *pos >= buf.len() {
                    return false;
                }
                self.escaped = false;
                if self.reading_key {
                    self.key.plain = false;
                }
                *pos += 1;
            }
            let rest = &buf[*pos..];
            let Some(i) = memchr::memchr2(b'"', b'\\', rest) else {
                if self.reading_key {
                    self.key.push(rest);
                }
                *pos = buf.len();
                return false;
            };
            if self.reading_key {
                self.key.push(&rest[..i]);
            }
            *pos += i + 1;
            if rest[i] == b'"' {
                self.in_string = false;
                return true;
            }
            self.escaped = true;
        }
    }

    fn push(&mut self, pos: usize, object: bool) -> Result<(), ScanError> {
        if self.depth >= MAX_DEPTH - 2 {
            return Err(self.error(pos, "the answer is nested too deeply"));
        }
        let (word, bit) = (self.depth / 64, self.depth % 64);
        if object {
            self.stack[word] |= 1 << bit;
        } else {
            self.stack[word] &= !(1 << bit);
        }
        self.depth += 1;
        Ok(())
    }

    /// Closes a bracket: an error when it is not the one open.
    fn pop(&mut self, pos: usize, object: bool) -> Result<(), ScanError> {
        if self.depth == 0 {
            return Err(self.error(pos, "a bracket closes that was not opened"));
        }
        let top = self.depth - 1;
        let open_object = self.stack[top / 64] & (1 << (top % 64)) != 0;
        if open_object != object {
            return Err(self.error(pos, "a bracket closes that does not match the one open"));
        }
        self.depth = top;
        Ok(())
    }

    /// Whether the item being scanned is an object and the scan is at its own level.
    fn at_item_level(&self) -> bool {
        self.root == Root::InItem && self.depth == 1 && self.stack[0] & 1 != 0
    }

    /// A key of the item's own level ended: what it names.
    fn item_key_read(&mut self) {
        if self.key.is(b"error") {
            self.facts.error = true;
        }
        self.level = Level::AfterKey;
    }

    /// The `status` digits being read ended (a delimiter after them).
    fn status_read(&mut self) {
        self.facts.status = self.digits.take();
        self.level = Level::InValue;
    }

    /// Scans the current value (a root value or an item) from `*pos`: `Some(end)` when it
    /// ended, before offset `end` (`*pos` is then `end`).
    fn value(&mut self, buf: &[u8], pos: &mut usize) -> Result<Option<usize>, ScanError> {
        while *pos < buf.len() {
            if self.in_string {
                let key = self.reading_key;
                if self.string(buf, pos) {
                    if key {
                        self.reading_key = false;
                        self.item_key_read();
                    }
                    if self.depth == 0 {
                        return Ok(Some(*pos));
                    }
                }
                continue;
            }
            let b = buf[*pos];
            if self.bare {
                // A scalar that is the whole value ends at the first delimiter, not its own.
                if is_space(b) || matches!(b, b',' | b']' | b'}') {
                    self.bare = false;
                    return Ok(Some(*pos));
                }
                *pos += 1;
                continue;
            }
            let item_level = self.at_item_level();
            if item_level {
                match (self.level, b) {
                    (Level::InStatus, b'0'..=b'9') => {
                        self.digits = self
                            .digits
                            .and_then(|d| d.checked_mul(10))
                            .and_then(|d| d.checked_add(u64::from(b - b'0')));
                        *pos += 1;
                        continue;
                    }
                    (Level::InStatus, _) if is_space(b) || matches!(b, b',' | b'}') => {
                        self.status_read();
                    }
                    (Level::InStatus, _) => {
                        // `200.0`, `2e2`: not a `u64` as serde reads it.
                        self.digits = None;
                        self.level = Level::InValue;
                    }
                    (Level::ValueNext, _) if !is_space(b) => {
                        let status = self.key.is(b"status");
                        if status {
                            // The last `status` counts, as in the answer parsed whole.
                            self.facts.status = None;
                            if b.is_ascii_digit() {
                                self.digits = Some(u64::from(b - b'0'));
                                self.level = Level::InStatus;
                                *pos += 1;
                                continue;
                            }
                        }
                        self.level = Level::InValue;
                    }
                    _ => {}
                }
            }
            match b {
                b'"' => {
                    let key = item_level && self.level == Level::KeyNext;
                    if key {
                        self.level = Level::InKey;
                    }
                    self.begin_string(key);
                    *pos += 1;
                    continue;
                }
                b'{' | b'[' => self.push(*pos, b == b'{')?,
                b'}' | b']' => {
                    self.pop(*pos, b == b'}')?;
                    if self.depth == 0 {
                        *pos += 1;
                        return Ok(Some(*pos));
                    }
                }
                b':' if item_level && self.level == Level::AfterKey => {
                    self.level = Level::ValueNext;
                }
                b',' if item_level => self.level = Level::KeyNext,
                _ if self.depth == 0 && !is_space(b) => {
                    if matches!(b, b',' | b':') {
                        return Err(self.error(*pos, "expected a value"));
                    }
                    self.bare = true;
                }
                _ => {}
            }
            // An item object's own level begins: a key comes first.
            if self.root == Root::InItem && self.depth == 1 && b == b'{' {
                self.level = Level::KeyNext;
            }
            *pos += 1;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// What a scan of `answer` split at `cuts` finds: each item's bytes and facts, and the
    /// error or the finish.
    fn scan(answer: &[u8], cuts: &[usize]) -> Result<Vec<(Vec<u8>, ItemFacts)>, ScanError> {
        let mut s = AnswerScan::new();
        let mut items = Vec::new();
        let mut current: Option<Vec<u8>> = None;
        let mut bounds: Vec<usize> = cuts
            .iter()
            .copied()
            .filter(|&c| c > 0 && c < answer.len())
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        bounds.push(answer.len());
        let mut from = 0;
        for to in bounds {
            let chunk = &answer[from..to];
            let mut pos = 0;
            let mut seg = current.as_ref().map(|_| 0);
            loop {
                match s.next(chunk, &mut pos)? {
                    None => {
                        if let (Some(start), Some(cur)) = (seg, current.as_mut()) {
                            cur.extend_from_slice(&chunk[start..]);
                        }
                        break;
                    }
                    Some(Event::ItemStart(at)) => {
                        assert!(current.is_none(), "an item began inside another");
                        current = Some(Vec::new());
                        seg = Some(at);
                    }
                    Some(Event::ItemEnd(at, facts)) => {
                        let mut cur = current.take().expect("an item ended unbegun");
                        cur.extend_from_slice(&chunk[seg.take().unwrap()..at]);
                        items.push((cur, facts));
                    }
                    Some(Event::Done) => {}
                }
            }
            from = to;
        }
        s.finish()?;
        assert_eq!(s.items(), items.len());
        Ok(items)
    }

    /// An item's facts as the gateway read them from the answer parsed whole.
    fn facts_of(item: &Value) -> ItemFacts {
        ItemFacts {
            status: item["status"].as_u64(),
            error: item.get("error").is_some(),
        }
    }

    fn answer_of(items: &[&str], sep: &str) -> String {
        format!(
            "{{\"took\" :{sep}5,{sep}\"responses\"{sep}:{sep}[{sep}{}{sep}]{sep},\"x\":[{{}}]}}{sep}",
            items.join(&format!("{sep},{sep}"))
        )
    }

    #[test]
    fn test_items_and_facts_do_not_depend_on_the_split() {
        let items = [
            r#"{"took":3,"hits":{"hits":[{"_source":{"q":"a \"quoted\" ]} [{ brace","n":[1,[2,{"k":"\\"}]]}}]},"status":200}"#,
            r#"{"error":{"type":"x","reason":"]\\\"}"},"status":404}"#,
            r#"{ "status" : 503 , "s":"status"}"#,
            r#"{"status":"200","error":null}"#,
            r#"{"status":200.0}"#,
            r#"{"st\"atus":500,"nested":{"status":404,"error":1}}"#,
            r#"[1,{"status":500}]"#,
            r#""a string item""#,
            "12345",
            "null",
            r#"{}"#,
            r#"{"status":18446744073709551616}"#,
            r#"{"status":1,"status":204}"#,
        ];
        for sep in ["", " \n\t "] {
            let answer = answer_of(&items, sep);
            let whole: Value = serde_json::from_str(&answer).unwrap();
            let expected: Vec<(Vec<u8>, ItemFacts)> = items
                .iter()
                .map(|i| {
                    let v: Value = serde_json::from_str(i).unwrap();
                    (i.as_bytes().to_vec(), facts_of(&v))
                })
                .collect();
            assert_eq!(whole["responses"].as_array().unwrap().len(), items.len());
            assert_eq!(scan(answer.as_bytes(), &[]).unwrap(), expected);
            // Split once at every byte, and into single bytes.
            for cut in 0..answer.len() {
                assert_eq!(
                    scan(answer.as_bytes(), &[cut]).unwrap(),
                    expected,
                    "split at {cut}"
                );
            }
            let every: Vec<usize> = (0..answer.len()).collect();
            assert_eq!(scan(answer.as_bytes(), &every).unwrap(), expected);
        }
        // The facts as the gateway read them parsed whole, spelled out for a few.
        let facts = |i: usize| facts_of(&serde_json::from_str(items[i]).unwrap());
        assert_eq!(
            facts(0),
            ItemFacts {
                status: Some(200),
                error: false
            }
        );
        assert_eq!(
            facts(2),
            ItemFacts {
                status: Some(503),
                error: false
            }
        );
        assert_eq!(
            facts(3),
            ItemFacts {
                status: None,
                error: true
            }
        );
        assert_eq!(facts(5), ItemFacts::default());
        assert_eq!(
            facts(12),
            ItemFacts {
                status: Some(204),
                error: false
            }
        );
        assert!(!facts(1).succeeded() && !facts(2).succeeded() && facts(4).succeeded());
    }

    #[test]
    fn test_a_key_written_with_escapes_is_not_recognised() {
        // Parsed whole it is `status`; OpenSearch never writes it so, and the scan keeps no
        // more of a key than it compares.
        let found = scan(br#"{"responses":[{"stat\u0075s":500}]}"#, &[]).unwrap();
        assert_eq!(found[0].1, ItemFacts::default());
    }

    #[test]
    fn test_an_answer_without_responses_or_with_none_has_no_items() {
        assert_eq!(scan(br#"{"took":1}"#, &[]).unwrap(), vec![]);
        assert_eq!(scan(br#"{}"#, &[]).unwrap(), vec![]);
        assert_eq!(scan(br#"{"responses":[]}"#, &[5]).unwrap(), vec![]);
    }

    #[test]
    fn test_malformed_answers_are_errors() {
        for (bad, what) in [
            ("", "ends before"),
            ("[]", "not a JSON object"),
            ("<html>", "not a JSON object"),
            (r#"{"responses":[{"a":1}"#, "ends before"),
            (r#"{"responses":[{"a":"1}]}"#, "ends before"),
            (r#"{"responses":[{"a":[1}]}"#, "does not match"),
            (r#"{"responses":[{"a":1}}]}"#, "expected ',' or ']'"),
            (r#"{"responses":[{"a":1} {"b":2}]}"#, "expected ',' or ']'"),
            (r#"{"responses":[,]}"#, "expected a value"),
            (r#"{"responses":[{}],"responses":[]}"#, "two [responses]"),
            (r#"{"responses":{}}"#, "not an array"),
            (r#"{"took" 1}"#, "expected ':'"),
            (r#"{"took":1 "x":2}"#, "expected ',' or '}'"),
            (r#"{1:2}"#, "expected a key"),
            (r#"{"responses":[]} x"#, "after the answer's end"),
            (r#"{"responses":[{"a":"\"}]}"#, "ends before"),
        ] {
            let e = scan(bad.as_bytes(), &[]).expect_err(bad);
            assert!(e.to_string().contains(what), "{bad}: {e}");
        }
        let deep = format!(
            "{{\"responses\":[{}{}]}}",
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        let e = scan(deep.as_bytes(), &[]).unwrap_err();
        assert!(e.to_string().contains("nested too deeply"), "{e}");
        // The offset is the answer's, across chunks.
        let e = scan(br#"{"responses":[{"a":1}}]}"#, &[3, 10]).unwrap_err();
        assert_eq!(e.at, 21);
    }

    /// Any JSON value, a few levels deep.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            (0u64..1000).prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[\"\\\\{}\\[\\]a-z:, \\n\u{e9}\u{1F600}]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop_oneof![
                            Just("status".to_string()),
                            Just("error".to_string()),
                            "[a-z\"\\\\]{0,8}",
                        ],
                        inner
                    ),
                    0..5
                )
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// An answer of `items`, compact or pretty.
    fn answer(items: &[Value], pretty: bool) -> Vec<u8> {
        let v = json!({"took": 1, "responses": items, "after": {"k": [1, "]"]}});
        if pretty {
            serde_json::to_vec_pretty(&v).unwrap()
        } else {
            serde_json::to_vec(&v).unwrap()
        }
    }

    proptest! {
        #[test]
        fn prop_items_are_found_in_any_answer_split_anywhere(
            items in prop::collection::vec(value(), 0..6),
            pretty in any::<bool>(),
            cuts in prop::collection::vec(0usize..4096, 0..12),
        ) {
            let bytes = answer(&items, pretty);
            let found = scan(&bytes, &cuts).unwrap();
            prop_assert_eq!(found.len(), items.len());
            for ((raw, facts), item) in found.iter().zip(&items) {
                // Each side read back by the same parser (which reads some floats a bit off).
                let back: Value = serde_json::from_slice(raw).unwrap();
                let item: Value = serde_json::from_slice(&serde_json::to_vec(item).unwrap()).unwrap();
                prop_assert_eq!(&back, &item);
                prop_assert_eq!(*facts, facts_of(&item));
            }
        }

        #[test]
        fn prop_truncated_or_altered_answers_never_panic(
            items in prop::collection::vec(value(), 1..4),
            cut in 0usize..4096,
            at in 0usize..4096,
            byte in any::<u8>(),
            cuts in prop::collection::vec(0usize..4096, 0..6),
        ) {
            let whole = answer(&items, false);
            let cut = cut % whole.len();
            // Truncated anywhere: an error, never a complete answer.
            prop_assert!(scan(&whole[..cut], &cuts).is_err());
            // A byte changed anywhere: an answer or an error, never a panic; when it still
            // scans, its items are still delimited as a parser delimits them.
            let mut altered = whole.clone();
            let at = at % altered.len();
            altered[at] = byte;
            if let (Ok(found), Ok(v)) =
                (scan(&altered, &cuts), serde_json::from_slice::<Value>(&altered))
            {
                let parsed = v["responses"].as_array().cloned().unwrap_or_default();
                prop_assert_eq!(found.len(), parsed.len());
            }
        }
    }
}
