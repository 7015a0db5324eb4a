//! The node's logs (issue #16): `logger.format` picks the line format ([`LogFormat`]), and
//! [`decisions`] writes one structured, rate-limited line per workload-management decision.
//!
//! [`init`] installs the process's subscriber once, at the binary's edge (`sluice serve`),
//! after the configuration is read: `RUST_LOG` filters as before (default `info`).

pub mod decisions;

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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        // Flattened: the event's fields sit beside `level` and `target`, one level deep, as
        // log shippers expect; no span list (admission logs outside spans).
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    // Only a second call fails; the first subscriber stays.
    drop(installed);
}

#[cfg(test)]
mod tests {
    use super::LogFormat;

    #[test]
    fn test_log_format_parses_text_and_json_only() {
        assert_eq!(LogFormat::parse("text"), Some(LogFormat::Text));
        assert_eq!(LogFormat::parse(" json "), Some(LogFormat::Json));
        assert_eq!(LogFormat::parse("JSON"), None);
        assert_eq!(LogFormat::parse("logfmt"), None);
        assert_eq!(LogFormat::default(), LogFormat::Text);
    }
}
