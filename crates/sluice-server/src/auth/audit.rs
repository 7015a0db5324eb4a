//! The audit log: one structured line per admin action (workload group, rule and setting
//! changes, index creation, deletion and settings) and per refused request, with time, user,
//! roles, the client's address, action, target and outcome — never a password or a token.
//!
//! The address (`remote_address`, OpenSearch's `audit_request_remote_address`) is the peer of
//! the request's connection, as the caller passes it. Behind a proxy that is the proxy: an
//! `X-Forwarded-For` a client sends is not read here, as sluice resolves no client address
//! from it (a gateway only forwards a trusted proxy's chain to its upstream,
//! `backend/upstream/forwarded.rs`), and a line naming an address a client chose would be
//! worse than one naming the proxy.
//!
//! Lines go to the `sluice::audit` tracing target at INFO (the only place a user name is
//! logged at INFO). A token bucket bounds them, so a flood of refused requests cannot fill
//! the disk: beyond the burst, lines are dropped and counted, and the next line written says
//! how many were dropped.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Principal;

/// The tracing target of audit lines.
pub const TARGET: &str = "sluice::audit";

/// Audit lines per second in steady state: far above what admin work produces (a few per
/// minute), and at ~300 bytes a line at most ~30 KB/s, ~2.5 GB a day, under a sustained flood.
const LINES_PER_SECOND: f64 = 100.0;
/// Lines written at once before the rate applies: a burst of refusals (a misconfigured client
/// retrying) is recorded whole up to here.
const BURST: f64 = 1000.0;

/// A token bucket with time passed in.
///
/// # Invariants
/// - `tokens` stays within `0..=BURST` (`test_rate_limit_bounds_lines_and_counts_the_rest`).
#[derive(Debug)]
struct RateLimit {
    tokens: f64,
    last: Option<Instant>,
    dropped: u64,
}

impl RateLimit {
    /// Takes a token at `now`: `Some(dropped since the last line)` when a line may be written.
    fn try_take(&mut self, now: Instant) -> Option<u64> {
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |l| now.saturating_duration_since(l));
        self.last = Some(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * LINES_PER_SECOND).min(BURST);
        debug_assert!((0.0..=BURST).contains(&self.tokens));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Some(std::mem::take(&mut self.dropped))
        } else {
            self.dropped += 1;
            None
        }
    }
}

/// What an audited request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Refused by authorization (403).
    Refused,
    /// Allowed; the response's HTTP status.
    Done(u16),
}

/// The node's audit log.
#[derive(Debug)]
pub struct Audit {
    limit: Mutex<RateLimit>,
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            limit: Mutex::new(RateLimit {
                tokens: BURST,
                last: None,
                dropped: 0,
            }),
        }
    }
}

impl Audit {
    /// Writes one line, unless the rate limit drops it; answers whether it was written.
    /// `remote` is the peer address of the request's connection (`None`: work the node does
    /// itself, such as loading the roles file, written `-`).
    pub fn record(
        &self,
        now: Instant,
        who: Option<&Principal>,
        remote: Option<IpAddr>,
        action: &str,
        target: &str,
        outcome: Outcome,
    ) -> bool {
        let Some(dropped) = self.limit.lock().try_take(now) else {
            return false;
        };
        let time = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let user = who.map_or("-", |p| &*p.username);
        let roles = who.map(|p| p.roles.join(",")).unwrap_or_default();
        let remote_address = Remote(remote);
        let (outcome, status) = match outcome {
            Outcome::Refused => ("refused", 403),
            Outcome::Done(s) if s < 400 => ("done", s),
            Outcome::Done(s) => ("failed", s),
        };
        tracing::info!(
            target: TARGET,
            time = %time,
            user,
            // A string, quoted and escaped in the text format as `user` is: a role name comes
            // from a trusted proxy's header and may hold spaces and `=`.
            roles = roles.as_str(),
            remote_address = %remote_address,
            action,
            target_indices = target,
            outcome,
            status,
            dropped_before = dropped,
            "audit"
        );
        true
    }
}

/// An audit line's `remote_address`: the address, or `-` without one (as `user` is).
struct Remote(Option<IpAddr>);

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            // An IPv4 client of a dual-stack listener shows as itself, not `::ffff:a.b.c.d`.
            Some(ip) => write!(f, "{}", ip.to_canonical()),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text line of one audit record of `who`, as `sluice serve` writes it (no colours).
    fn text_line(who: &Principal) -> String {
        let buf = std::sync::Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            Audit::default().record(
                Instant::now(),
                Some(who),
                None,
                "cluster:admin/settings/update",
                "-",
                Outcome::Refused,
            );
        });
        String::from_utf8(buf.lock().clone()).unwrap()
    }

    struct Sink(std::sync::Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn test_roles_a_proxy_sends_cannot_write_fields_of_their_own() {
        let who = Principal {
            username: "mallory".into(),
            roles: vec![
                "tenant_a".into(),
                "x status=200 outcome=done user=\"root\"".into(),
            ],
        };
        let line = text_line(&who);
        let quoted = r#" roles="tenant_a,x status=200 outcome=done user=\"root\"""#;
        assert!(line.contains(quoted), "one quoted value: {line}");
        // Outside the roles' quoted value, each field once.
        let rest = line.replace(quoted, "");
        assert_eq!(rest.matches(" outcome=").count(), 1, "{line}");
        assert_eq!(rest.matches(" user=").count(), 1, "{line}");
    }

    #[test]
    fn test_the_remote_address_is_the_ip_or_a_dash() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(Remote(Some(v4)).to_string(), "192.0.2.7");
        assert_eq!(Remote(Some(mapped)).to_string(), "192.0.2.7");
        assert_eq!(Remote(Some(v6)).to_string(), "2001:db8::1");
        assert_eq!(Remote(None).to_string(), "-");
    }

    #[test]
    fn test_rate_limit_bounds_lines_and_counts_the_rest() {
        let mut r = RateLimit {
            tokens: BURST,
            last: None,
            dropped: 0,
        };
        let t0 = Instant::now();
        let written = (0..5000).filter(|_| r.try_take(t0).is_some()).count();
        assert_eq!(written, BURST as usize);
        assert_eq!(r.dropped, 5000 - BURST as u64);
        // One second later: LINES_PER_SECOND more, the first reporting the drops.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(r.try_take(t1), Some(5000 - BURST as u64));
        let more = (0..1000).filter(|_| r.try_take(t1).is_some()).count();
        assert_eq!(more + 1, LINES_PER_SECOND as usize);
        // A long quiet spell refills to the burst, never beyond.
        let t2 = t1 + Duration::from_secs(3600);
        let burst = (0..5000).filter(|_| r.try_take(t2).is_some()).count();
        assert_eq!(burst, BURST as usize);
    }
}
