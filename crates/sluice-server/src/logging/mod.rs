//! The node's logs (issue #16): `logger.format` picks the line format ([`LogFormat`]), and
//! [`decisions`] writes one structured, rate-limited line per workload-management decision;
//! [`failures`] the rate-limited ERROR line of a request that failed on the node's side;
//! [`chatty`] limits the warnings of the libraries underneath (gossip's, at every round).
//!
//! [`init`] installs the process's subscriber once, at the binary's edge (`sluice serve`),
//! after the configuration is read: `RUST_LOG` filters as before (default `info`).

pub mod chatty;
pub mod decisions;
pub mod failures;

pub use decisions::{Decision, DecisionKind, DecisionLog, Tier, shown_id};

/// How log lines are written to stderr: `logger.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event (tracing's default format), the default.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, and the event's `fields`
    /// (its `message` among them), for log shippers.
    Json,
}

impl LogFormat {
    /// What `logger.format` accepts, for error messages.
    pub const EXPECTED: &'static str = "expected text or json";

    /// Parses a `logger.format` value (exact, lowercase).
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s.trim() {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// Installs the process's log subscriber: `format` lines on stderr, filtered by `RUST_LOG`
/// (default `info`). Does nothing when a subscriber is already installed.
pub fn init(format: LogFormat) {
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Only a second call fails; the first subscriber stays.
    drop(subscriber(format, filter, std::io::stderr, ansi).try_init());
}

/// The subscriber [`init`] installs, writing `format` lines to `writer` (colours when `ansi`,
/// text format only), `filter` and [`chatty::Chatty`] deciding which: apart so a test reads
/// the lines the node writes.
fn subscriber<W>(
    format: LogFormat,
    filter: tracing_subscriber::EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let layer = tracing_subscriber::fmt::layer().with_writer(writer);
    let layer = match format {
        LogFormat::Text => layer.with_ansi(ansi).boxed(),
        // Flattened: the event's fields sit beside `level` and `target`, one level deep, as
        // log shippers expect; no span list (admission logs outside spans).
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .boxed(),
    };
    Box::new(
        tracing_subscriber::registry().with(
            layer
                .with_filter(filter)
                .with_filter(chatty::Chatty::default()),
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::{Decision, DecisionKind, DecisionLog, LogFormat, Tier, subscriber};

    /// The lines a subscriber of `format` writes while `f` runs.
    fn lines_of(format: LogFormat, f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("buf").extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let filter = tracing_subscriber::EnvFilter::new("info");
        let sub = subscriber(format, filter, move || writer.clone(), false);
        tracing::subscriber::with_default(sub, f);
        let bytes = buf.0.lock().expect("buf").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    fn a_decision(log: &DecisionLog) {
        log.log(Decision {
            kind: DecisionKind::Throttle,
            enforced: true,
            group_id: "gid",
            group_name: "two words",
            bucket_kind: None,
            tier: Tier::Node,
            reason: &"1 requests in flight, node_limit is 1",
        });
    }

    #[test]
    fn test_text_lines_quote_string_fields_for_logfmt() {
        // An outside trial's logfmt parser split `reason=1 requests in flight, …` into stray
        // keys: every string field is quoted.
        let text = lines_of(LogFormat::Text, || a_decision(&DecisionLog::new()));
        assert!(
            text.contains(r#"reason="1 requests in flight, node_limit is 1""#),
            "{text}"
        );
        assert!(text.contains(r#"group_name="two words""#), "{text}");
        assert!(text.contains(r#"decision="throttle""#), "{text}");
        assert!(text.contains("suppressed=0"), "{text}");
        let warned = lines_of(LogFormat::Text, || {
            DecisionLog::new().unknown_group("an id with spaces")
        });
        assert!(
            warned.contains(r#"workload_group_id="an id with spaces""#),
            "{warned}"
        );
    }

    /// `chatty.rs`: gossip's warning at every failed round is written once per `EVERY` from
    /// each place; sluice's own warnings, and the library's other levels, are not limited.
    #[test]
    fn test_a_library_warning_repeated_is_written_once() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let text = lines_of(format, || {
                for _ in 0..5 {
                    tracing::warn!(target: "chitchat::server", "Failed to gossip with live node.");
                    tracing::warn!(target: "sluice_server::cluster", "our own warning");
                    tracing::info!(target: "chitchat", "gossip info");
                }
                tracing::error!(target: "chitchat::state", "another place");
                tracing::warn!(target: "chitchatter", "not the library");
            });
            let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
            assert_eq!(count("Failed to gossip with live node."), 1, "{text}");
            assert_eq!(count("our own warning"), 5, "{text}");
            assert_eq!(count("gossip info"), 5, "{text}");
            assert_eq!(count("another place"), 1, "{text}");
            assert_eq!(count("not the library"), 1, "{text}");
        }
    }

    #[test]
    fn test_json_lines_keep_string_fields_as_json_strings() {
        let text = lines_of(LogFormat::Json, || a_decision(&DecisionLog::new()));
        let v: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
        assert_eq!(v["reason"], "1 requests in flight, node_limit is 1", "{v}");
        assert_eq!(v["group_name"], "two words", "{v}");
        assert_eq!(v["suppressed"], 0, "{v}");
        assert_eq!(v["target"], "sluice::decision", "{v}");
    }

    #[test]
    fn test_log_format_parses_text_and_json_only() {
        assert_eq!(LogFormat::parse("text"), Some(LogFormat::Text));
        assert_eq!(LogFormat::parse(" json "), Some(LogFormat::Json));
        assert_eq!(LogFormat::parse("JSON"), None);
        assert_eq!(LogFormat::parse("logfmt"), None);
        assert_eq!(LogFormat::default(), LogFormat::Text);
    }
}
