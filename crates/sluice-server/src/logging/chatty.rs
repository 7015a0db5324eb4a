//! A rate limit for the warnings of the libraries sluice is built on: chitchat (gossip) writes
//! a WARN at every round that fails — four a second for each peer it cannot reach, or whose
//! datagrams the node cannot send — and prints the error with `{:?}`, which carries a
//! backtrace of about 145 lines when `RUST_BACKTRACE` is set. An outside trial's node, its
//! packets to its peers dropped, wrote 100,000 lines in 10 minutes: over a day's partition,
//! the disk. sluice's own lines say what such a fault means (the split's ERROR every 30 s,
//! the node joined or left, the owners it cannot reach), so each such line of a library is
//! written at most once per [`EVERY`] per place in the library's code; the rest are left out.
//!
//! Only WARN and ERROR events of the [`LIBRARIES`] are limited: everything else, and every
//! line of sluice's own, passes untouched (sluice's own floods have limits of their own, as
//! `decisions.rs` and `failures.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::callsite::Identifier;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::layer::{Context, Filter};

/// How often one place in a library's code may write a line: a fault that lasts shows at
/// least twice a minute, and a flood of four a second is cut to one in 120.
pub const EVERY: Duration = Duration::from_secs(30);

/// The targets (module paths) whose warnings are limited.
pub const LIBRARIES: &[&str] = &["chitchat"];

/// The filter: when each limited place last wrote a line.
#[derive(Debug, Default)]
pub struct Chatty {
    last: Mutex<HashMap<Identifier, Instant>>,
}

impl Chatty {
    /// Whether an event of `meta` is limited at all.
    fn limits(meta: &Metadata<'_>) -> bool {
        meta.is_event()
            && *meta.level() <= Level::WARN
            && LIBRARIES.iter().any(|lib| {
                meta.target()
                    .strip_prefix(lib)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
            })
    }

    /// Whether the event at `callsite` is written at `now` (and, if so, `now` is its last).
    fn admit(&self, callsite: Identifier, now: Instant) -> bool {
        let mut last = self.last.lock();
        match last.get(&callsite) {
            Some(at) if now.saturating_duration_since(*at) < EVERY => false,
            _ => {
                last.insert(callsite, now);
                true
            }
        }
    }
}

impl<S> Filter<S> for Chatty {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        !Chatty::limits(meta) || self.admit(meta.callsite(), Instant::now())
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // A limited place is asked at every event; the rest never again.
        match Chatty::limits(meta) {
            true => Interest::sometimes(),
            false => Interest::always(),
        }
    }
}
