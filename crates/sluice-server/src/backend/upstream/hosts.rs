//! The upstream's hosts: round-robin over the healthy ones, a host that refused a connection
//! skipped with exponential back-off and tried again when its back-off ends.
//!
//! Time is a parameter (`now`), so the rotation and the back-off are tested without a clock.
//!
//! # Invariants
//! - H1 — [`Hosts::order`] lists every host exactly once: a request may try each host once, and
//!   is never sent nowhere while a host is configured (all hosts down: the one whose back-off
//!   ends first leads). Tested by `test_order_lists_every_host_once`.
//! - H2 — a host in back-off is never listed before a healthy host. Tested by
//!   `test_failed_host_is_skipped_until_its_back_off_ends`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderValue, Uri};
use parking_lot::Mutex;

/// The back-off after a host's first failure: short, because a refused connection is often a
/// node restarting and a second attempt within a blink is cheap.
const BASE_BACKOFF: Duration = Duration::from_millis(250);

/// The longest back-off: a host dead for long is still tried twice a minute, so it rejoins the
/// rotation within 30 s of coming back.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One upstream host.
#[derive(Debug)]
pub struct Host {
    /// Scheme and authority (`https://es1:9200/`).
    pub base: Uri,
    /// `scheme://authority`, as errors and logs name it.
    pub name: String,
    /// The `Host` header of a request to this host over HTTP/1.1: host, and port unless the
    /// scheme's default, as hyper-util writes it (made once, not formatted per request).
    pub host_header: Option<HeaderValue>,
    health: Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    /// Failures in a row.
    failures: u32,
    /// Not to be tried before this (while failing).
    retry_at: Option<Instant>,
}

/// The upstream's hosts and the round-robin cursor.
#[derive(Debug)]
pub struct Hosts {
    hosts: Vec<Host>,
    next: AtomicUsize,
}

impl Hosts {
    /// The hosts of `bases`, all healthy.
    pub fn new(bases: &[Uri]) -> Hosts {
        Hosts {
            hosts: bases
                .iter()
                .map(|b| Host {
                    base: b.clone(),
                    name: b.to_string().trim_end_matches('/').to_string(),
                    host_header: host_header(b),
                    health: Mutex::new(Health::default()),
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// The host `i`.
    pub fn get(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// The order in which a request tries the hosts (see H1, H2): healthy hosts from the
    /// round-robin cursor on, then those in back-off by the end of their back-off.
    pub fn order(&self, now: Instant) -> Vec<usize> {
        let n = self.hosts.len();
        // Relaxed: the cursor only spreads load; no other memory depends on it.
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut healthy = Vec::with_capacity(n);
        let mut resting = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            match self.hosts[i].health.lock().retry_at {
                Some(at) if at > now => resting.push((at, i)),
                _ => healthy.push(i),
            }
        }
        resting.sort();
        healthy.extend(resting.into_iter().map(|(_, i)| i));
        healthy
    }

    /// Records that host `i` refused or could not be reached: it rests for a back-off that
    /// doubles with each failure in a row, up to [`MAX_BACKOFF`].
    pub fn failed(&self, i: usize, now: Instant) -> Duration {
        let mut h = self.hosts[i].health.lock();
        let backoff = BASE_BACKOFF
            .saturating_mul(1u32 << h.failures.min(16))
            .min(MAX_BACKOFF);
        h.failures = h.failures.saturating_add(1);
        h.retry_at = Some(now + backoff);
        backoff
    }

    /// Records that host `i` answered: it is healthy again.
    pub fn succeeded(&self, i: usize) {
        let mut h = self.hosts[i].health.lock();
        if h.failures > 0 {
            *h = Health::default();
        }
    }
}

/// The `Host` header hyper-util's client writes for `base` on an HTTP/1.1 connection: the
/// host, with the port unless it is the scheme's default (80, or 443 for `https`).
fn host_header(base: &Uri) -> Option<HeaderValue> {
    let host = base.host()?;
    let default_port = if base.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let value = match base.port() {
        Some(p) if p.as_u16() != default_port => format!("{host}:{}", p.as_str()),
        _ => host.to_string(),
    };
    HeaderValue::from_str(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Hosts {
        let bases: Vec<Uri> = (0..n)
            .map(|i| format!("http://h{i}:9200/").parse().unwrap())
            .collect();
        Hosts::new(&bases)
    }

    #[test]
    fn test_order_lists_every_host_once() {
        let h = hosts(3);
        let now = Instant::now();
        h.failed(1, now);
        for _ in 0..5 {
            let mut o = h.order(now);
            o.sort();
            assert_eq!(o, vec![0, 1, 2]);
        }
        let firsts: Vec<usize> = (0..4).map(|_| hosts_first(&h, now)).collect();
        assert!(!firsts.contains(&1), "{firsts:?}");
    }

    fn hosts_first(h: &Hosts, now: Instant) -> usize {
        h.order(now)[0]
    }

    #[test]
    fn test_round_robin_spreads_over_healthy_hosts() {
        let h = hosts(3);
        let now = Instant::now();
        let firsts: Vec<usize> = (0..6).map(|_| hosts_first(&h, now)).collect();
        assert_eq!(firsts, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn test_failed_host_is_skipped_until_its_back_off_ends() {
        let h = hosts(2);
        let now = Instant::now();
        assert_eq!(h.failed(0, now), BASE_BACKOFF);
        for _ in 0..4 {
            assert_eq!(h.order(now), vec![1, 0]);
        }
        // Back-off over: in the rotation again.
        let later = now + BASE_BACKOFF;
        let firsts: Vec<usize> = (0..2).map(|_| hosts_first(&h, later)).collect();
        assert!(firsts.contains(&0));
        // Doubling, capped.
        assert_eq!(h.failed(0, now), BASE_BACKOFF * 2);
        for _ in 0..20 {
            h.failed(0, now);
        }
        assert_eq!(h.failed(0, now), MAX_BACKOFF);
        h.succeeded(0);
        assert_eq!(h.failed(0, now), BASE_BACKOFF);
    }

    #[test]
    fn test_host_header_is_what_hyper_util_writes() {
        let h = |u: &str| host_header(&u.parse().unwrap()).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(h("http://es1:9200/").as_deref(), Some("es1:9200"));
        assert_eq!(h("http://es1:80/").as_deref(), Some("es1"));
        assert_eq!(h("http://es1/").as_deref(), Some("es1"));
        assert_eq!(h("http://[::1]:9200/").as_deref(), Some("[::1]:9200"));
        assert_eq!(h("https://es1:9200/").as_deref(), Some("es1:9200"));
        assert_eq!(h("https://es1:443/").as_deref(), Some("es1"));
    }

    #[test]
    fn test_all_hosts_down_leads_with_the_earliest_retry() {
        let h = hosts(2);
        let now = Instant::now();
        h.failed(0, now);
        h.failed(0, now);
        h.failed(1, now);
        assert_eq!(h.order(now), vec![1, 0]);
    }
}
