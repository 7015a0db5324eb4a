//! Measures how many documents per second [`LogGenerator`] produces, alone and as `_bulk` bodies.
//!
//! Run with `cargo run --release -p sluice-datagen --example datagen_rate [NUM_DOCS]`.

use std::time::Instant;

use sluice_datagen::{DEFAULT_START_EPOCH_MILLIS, LogGenerator, bulk_body};

/// Documents generated when no count is given: enough for a stable rate, about a second.
const DEFAULT_NUM_DOCS: usize = 500_000;

/// Documents per `_bulk` body, the batch size the benchmark driver uses.
const BATCH_SIZE: usize = 5_000;

fn main() {
    let num_docs = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .unwrap_or_else(|_| panic!("NUM_DOCS must be a positive integer, got {arg:?}")),
        None => DEFAULT_NUM_DOCS,
    };

    let mut generator = LogGenerator::new(42, DEFAULT_START_EPOCH_MILLIS);
    println!("first document: {}", generator.next_doc());

    let started = Instant::now();
    let mut num_fields = 0;
    for doc in generator.by_ref().take(num_docs) {
        num_fields += doc.as_object().map_or(0, |fields| fields.len());
    }
    let elapsed = started.elapsed();
    println!(
        "generate: {num_docs} docs ({num_fields} fields) in {elapsed:?}, {:.0} docs/s",
        num_docs as f64 / elapsed.as_secs_f64()
    );

    let started = Instant::now();
    let mut num_bytes = 0;
    let mut batch = Vec::with_capacity(BATCH_SIZE);
    for _ in 0..num_docs.div_ceil(BATCH_SIZE) {
        batch.clear();
        batch.extend(generator.by_ref().take(BATCH_SIZE));
        num_bytes += bulk_body("logs", &batch).len();
    }
    let elapsed = started.elapsed();
    println!(
        "generate + _bulk body: {num_docs} docs ({num_bytes} bytes) in {elapsed:?}, {:.0} docs/s",
        num_docs as f64 / elapsed.as_secs_f64()
    );
}
