//! A gateway's `_msearch` answer put together in request order: the upstream's items relayed
//! as their bytes arrive ([`BatchAnswer`], found by [`super::msearch_scan`]), the gateway's own
//! items (refusals, errors) spliced in at their places ([`Order`]).
//!
//! A batch's answer is first held, up to [`HOLD`] bytes: one that ends within it (most do) is
//! checked whole before any of it is used, so a count of items other than those sent, or an
//! answer that breaks off or is not JSON, makes every item of the batch its error item, as
//! when the answer was parsed whole. Past [`HOLD`] the batch streams: its items are written as
//! they arrive (held only while an earlier item of the request, from a later batch, is still
//! to come), and such a failure found later can no longer be answered in the items already
//! written: it is fatal ([`Fatal`]) and the client's connection is cut, so the client sees a
//! broken answer, never a complete-looking one.
//!
//! # Invariants
//! - O1 — the items go out in request order, each exactly once, with `,` between them, inside
//!   one `{"took":…,"responses":[` … `]}`; an item's bytes are written only once every earlier
//!   item is. Tested by `test_items_go_out_in_request_order_whatever_order_they_come_in`.
//! - O2 — every ticket of a batch is settled once: at its item's end (or, while held, when the
//!   batch commits), as a failure when the batch fails. Tested end to end by
//!   `test_msearch_answer_with_other_than_one_item_per_item_sent_fails_every_item` and
//!   `test_a_malformed_msearch_answer_is_an_error_never_a_truncated_answer` (nothing held).

use std::collections::VecDeque;

use bytes::Bytes;
use serde_json::Value;
use sluice_engine::{EngineError, ErrorCode};

use super::msearch_scan::{AnswerScan, Event, ItemFacts, ScanError};
use crate::admission::Admitted;
use crate::api::msearch::error_item;
use crate::error::ApiError;

/// How much of a batch's answer is held before its items stream: enough for the answers of
/// nearly every `_msearch` (a few items of ordinary searches, tens of kilobytes), which then
/// keep the checks of an answer read whole; small enough that many such requests at once
/// hold little (before, each held its whole answer, parsed: about three times its size).
pub const HOLD: usize = 256 * 1024;

/// A failure of a batch's answer after some of it went out: the connection must be cut.
#[derive(Debug)]
pub struct Fatal(pub EngineError);

/// The answer in request order: what is ready to go out, and what waits for its turn.
pub struct Order {
    slots: Vec<Slot>,
    /// The place being written (every earlier one is out).
    next: usize,
    /// Whether the item at `next` has begun going out (its separator is out).
    begun: bool,
    /// Whether the answer's opening is out: until then everything waits.
    open: bool,
    /// Whether the closing `]}` is out.
    closed: bool,
    out: VecDeque<Bytes>,
}

/// One place's bytes not yet out, and whether they are all there.
#[derive(Default)]
struct Slot {
    held: Vec<Bytes>,
    ended: bool,
}

impl Order {
    /// An answer of `count` items, nothing out yet.
    pub fn new(count: usize) -> Order {
        Order {
            slots: (0..count).map(|_| Slot::default()).collect(),
            next: 0,
            begun: false,
            open: false,
            closed: false,
            out: VecDeque::new(),
        }
    }

    /// Writes the answer's opening with `took`, then whatever is ready.
    pub fn open(&mut self, took: u64) {
        let mut head = Vec::with_capacity(32);
        head.extend_from_slice(b"{\"took\":");
        head.extend_from_slice(itoa::Buffer::new().format(took).as_bytes());
        head.extend_from_slice(b",\"responses\":[");
        self.out.push_back(Bytes::from(head));
        self.open = true;
        self.flush();
    }

    /// Bytes of the item at `place`, after those given before.
    pub fn piece(&mut self, place: usize, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        if self.open && place == self.next {
            self.begin();
            self.out.push_back(bytes);
        } else {
            self.slots[place].held.push(bytes);
        }
    }

    /// The item at `place` is whole.
    pub fn end(&mut self, place: usize) {
        self.slots[place].ended = true;
        if place == self.next {
            self.flush();
        }
    }

    /// The gateway's own item at `place` (a refusal, an error).
    pub fn own(&mut self, place: usize, item: &Value) {
        self.piece(place, Bytes::from(item.to_string()));
        self.end(place);
    }

    /// The places with no whole item (none once every batch is settled).
    pub fn missing(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&p| !self.slots[p].ended)
            .collect()
    }

    /// The next bytes to send.
    pub fn pop(&mut self) -> Option<Bytes> {
        self.out.pop_front()
    }

    /// Whether the answer is out to its last byte (bar what [`Self::pop`] still gives).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Everything ready, as one buffer (an answer sent whole).
    pub fn take_all(&mut self) -> Bytes {
        let len = self.out.iter().map(Bytes::len).sum();
        let mut all = Vec::with_capacity(len);
        for b in self.out.drain(..) {
            all.extend_from_slice(&b);
        }
        Bytes::from(all)
    }

    fn begin(&mut self) {
        if !self.begun {
            if self.next > 0 {
                self.out.push_back(Bytes::from_static(b","));
            }
            self.begun = true;
        }
    }

    /// Writes the places whose turn came, in order.
    fn flush(&mut self) {
        if !self.open {
            return;
        }
        while self.next < self.slots.len() {
            let held = std::mem::take(&mut self.slots[self.next].held);
            if !held.is_empty() {
                self.begin();
                self.out.extend(held);
            }
            if !self.slots[self.next].ended {
                return;
            }
            self.next += 1;
            self.begun = false;
        }
        if !self.closed {
            self.closed = true;
            self.out.push_back(Bytes::from_static(b"]}"));
        }
    }
}

/// Settles one item's ticket once its answer is known (`ok`: a success).
pub fn settle(up: &super::Upstream, admitted: &mut Admitted, ok: bool) {
    up.finished(admitted.task(), admitted.execution().hooks.as_ref());
    let _ = if ok {
        admitted.finish(Ok(()))
    } else {
        admitted.finish::<()>(Err(ApiError::Engine(EngineError::internal(
            "msearch item failed upstream",
        ))))
    };
}

/// What is held of a batch's answer before it streams.
#[derive(Default)]
struct Held {
    /// Each item's bytes so far, by its index in the batch.
    pieces: Vec<(usize, Bytes)>,
    /// The facts of the items ended, in order.
    ended: Vec<ItemFacts>,
    bytes: usize,
}

/// One batch's answer being read: its items' places in the request and their tickets.
pub struct BatchAnswer {
    places: Vec<usize>,
    /// Each item's ticket until it is settled.
    tickets: Vec<Option<Box<Admitted>>>,
    scan: AnswerScan,
    /// `Some` until the batch streams.
    held: Option<Held>,
    /// How much is held before it streams ([`HOLD`]; no limit for an answer sent whole).
    hold: usize,
    /// Inside an item (its bytes continue in the next chunk).
    in_item: bool,
}

impl BatchAnswer {
    /// The answer to `items` (each one's place and ticket), held up to `hold` bytes.
    pub fn new(items: Vec<(usize, Box<Admitted>)>, hold: usize) -> BatchAnswer {
        let (places, tickets) = items.into_iter().map(|(p, t)| (p, Some(t))).unzip();
        BatchAnswer {
            places,
            tickets,
            scan: AnswerScan::new(),
            held: Some(Held::default()),
            hold,
            in_item: false,
        }
    }

    /// Whether the batch streams (it passed [`HOLD`]).
    pub fn is_streaming(&self) -> bool {
        self.held.is_none()
    }

    /// Reads the next chunk of the answer: `Ok(false)` once the batch failed and each of its
    /// items became its error item (nothing more to read).
    pub fn feed(
        &mut self,
        up: &super::Upstream,
        chunk: &Bytes,
        order: &mut Order,
    ) -> Result<bool, Fatal> {
        let mut pos = 0;
        let mut seg = self.in_item.then_some(0);
        loop {
            let event = match self.scan.next(chunk, &mut pos) {
                Ok(e) => e,
                Err(e) => return self.fail(up, order, not_json(&e)),
            };
            match event {
                None => {
                    if let Some(start) = seg {
                        self.piece(order, self.scan.items(), chunk.slice(start..));
                    }
                    break;
                }
                Some(Event::ItemStart(at)) => {
                    if self.scan.items() >= self.places.len() && self.held.is_none() {
                        let sent = self.places.len();
                        return self.fail(
                            up,
                            order,
                            miscounted(&format!("more than {sent}"), sent),
                        );
                    }
                    seg = Some(at);
                    self.in_item = true;
                }
                Some(Event::ItemEnd(at, facts)) => {
                    let item = self.scan.items() - 1;
                    if let Some(start) = seg.take() {
                        self.piece(order, item, chunk.slice(start..at));
                    }
                    self.in_item = false;
                    if item < self.places.len() {
                        self.ended(up, order, item, facts);
                    }
                }
                Some(Event::Done) => {}
            }
        }
        if self.held.as_ref().is_some_and(|h| h.bytes > self.hold) {
            self.commit(up, order);
        }
        Ok(true)
    }

    /// The answer ended: checked, and whatever is held goes to `order`.
    pub fn end(mut self, up: &super::Upstream, order: &mut Order) -> Result<(), Fatal> {
        if let Err(e) = self.scan.finish() {
            return self.fail(up, order, not_json(&e)).map(drop);
        }
        let (found, sent) = (self.scan.items(), self.places.len());
        if found != sent {
            return self
                .fail(up, order, miscounted(&found.to_string(), sent))
                .map(drop);
        }
        if self.held.is_some() {
            self.commit(up, order);
        }
        Ok(())
    }

    /// The answer's body failed (`e` says how): every item is its error item while nothing
    /// of the batch went out, else [`Fatal`].
    pub fn broke(
        mut self,
        up: &super::Upstream,
        order: &mut Order,
        e: EngineError,
    ) -> Result<(), Fatal> {
        self.fail(up, order, e).map(drop)
    }

    /// Settles every item not settled yet as a failure (the answer is being cut).
    pub fn settle_rest(&mut self, up: &super::Upstream) {
        for ticket in self.tickets.iter_mut() {
            if let Some(mut t) = ticket.take() {
                settle(up, &mut t, false);
            }
        }
    }

    /// Bytes of the batch's item `item`.
    fn piece(&mut self, order: &mut Order, item: usize, bytes: Bytes) {
        if item >= self.places.len() || bytes.is_empty() {
            // An item past those sent, read while held only to count it.
            return;
        }
        match &mut self.held {
            Some(held) => {
                held.bytes += bytes.len();
                held.pieces.push((item, bytes));
            }
            None => order.piece(self.places[item], bytes),
        }
    }

    fn ended(&mut self, up: &super::Upstream, order: &mut Order, item: usize, facts: ItemFacts) {
        match &mut self.held {
            Some(held) => held.ended.push(facts),
            None => {
                if let Some(mut t) = self.tickets[item].take() {
                    settle(up, &mut t, facts.succeeded());
                }
                order.end(self.places[item]);
            }
        }
    }

    /// Gives what is held to `order`: the batch streams from now on.
    fn commit(&mut self, up: &super::Upstream, order: &mut Order) {
        let Some(held) = self.held.take() else {
            return;
        };
        for (item, bytes) in held.pieces {
            order.piece(self.places[item], bytes);
        }
        for (item, facts) in held.ended.into_iter().enumerate() {
            if let Some(mut t) = self.tickets[item].take() {
                settle(up, &mut t, facts.succeeded());
            }
            order.end(self.places[item]);
        }
    }

    /// The batch failed with `e`: each item its error item when nothing went out, else fatal.
    fn fail(
        &mut self,
        up: &super::Upstream,
        order: &mut Order,
        e: EngineError,
    ) -> Result<bool, Fatal> {
        if self.held.is_none() {
            return Err(Fatal(e));
        }
        self.held = None;
        let item = error_item(&ApiError::Engine(e), up.product.dialect());
        for (i, &place) in self.places.iter().enumerate() {
            if let Some(mut t) = self.tickets[i].take() {
                settle(up, &mut t, false);
            }
            order.own(place, &item);
        }
        Ok(false)
    }
}

/// The batch's answer is not the JSON the scan reads.
fn not_json(e: &ScanError) -> EngineError {
    EngineError::new(
        ErrorCode::UpstreamFailed,
        format!("the upstream's _msearch answer is not JSON: {e}"),
    )
}

/// The batch's answer has `found` items for the `sent` sent: which answer is whose is unknown,
/// so none is passed on as another's.
fn miscounted(found: &str, sent: usize) -> EngineError {
    EngineError::new(
        ErrorCode::UpstreamFailed,
        format!("the upstream's _msearch answer has {found} items for the {sent} sent"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(order: &mut Order) -> String {
        String::from_utf8(order.take_all().to_vec()).unwrap()
    }

    #[test]
    fn test_items_go_out_in_request_order_whatever_order_they_come_in() {
        let mut order = Order::new(4);
        // Before the opening nothing goes out.
        order.own(1, &serde_json::json!({"status": 429}));
        order.piece(2, Bytes::from_static(b"{\"c\""));
        assert!(order.pop().is_none());
        order.open(7);
        assert_eq!(text(&mut order), "{\"took\":7,\"responses\":[");
        // Place 0 streams as it comes; what follows it waits until it ends.
        order.piece(0, Bytes::from_static(b"{\"a\":"));
        assert_eq!(text(&mut order), "{\"a\":");
        order.piece(3, Bytes::from_static(b"{\"d\":4}"));
        order.end(3);
        order.piece(0, Bytes::from_static(b"1}"));
        assert_eq!(text(&mut order), "1}");
        order.end(0);
        // Place 1 (whole) and place 2's held start go out; place 3 waits for 2's end.
        assert_eq!(text(&mut order), ",{\"status\":429},{\"c\"");
        assert_eq!(order.missing(), vec![2]);
        order.piece(2, Bytes::from_static(b":3}"));
        assert!(!order.is_closed());
        order.end(2);
        assert_eq!(text(&mut order), ":3},{\"d\":4}]}");
        assert!(order.is_closed());
        assert!(order.missing().is_empty());
        // Opened after everything came: all of it at once.
        let mut order = Order::new(2);
        order.own(1, &serde_json::json!(2));
        order.own(0, &serde_json::json!(1));
        order.open(0);
        assert_eq!(text(&mut order), "{\"took\":0,\"responses\":[1,2]}");
        let mut order = Order::new(0);
        order.open(1);
        assert_eq!(text(&mut order), "{\"took\":1,\"responses\":[]}");
    }
}
