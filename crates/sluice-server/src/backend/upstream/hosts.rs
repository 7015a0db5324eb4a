//! The upstream's hosts: round-robin over the healthy ones, a host that refused a connection
//! (or did not answer in time, or not in HTTP) skipped with exponential back-off and tried
//! again when its back-off ends.
//!
//! Time is a parameter (`now`), so the rotation and the back-off are tested without a clock.
//!
//! # Invariants
//! - H1 — [`Hosts::order`] lists every host exactly once: a request may try each host once, and
//!   is never sent nowhere while a host is configured (all hosts down: the one whose back-off
//!   ends first leads). Tested by `test_order_lists_every_host_once`.
//! - H2 — a host in back-off is never listed before a healthy host. Tested by
//!   `test_failed_host_is_skipped_until_its_back_off_ends`.
//! - H3 — the healthy hosts lead in turn: over `k × m` orders with `k` hosts healthy, each
//!   leads `m` times, however many others rest (a resting host's turns are spread, not given
//!   to its neighbour). Tested by `test_healthy_hosts_share_the_turns_of_a_resting_one`.

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

    /// The order in which a request tries the hosts (see H1, H2, H3): the healthy hosts, from
    /// the round-robin cursor's place among them on, then those in back-off by the end of
    /// their back-off.
    pub fn order(&self, now: Instant) -> Vec<usize> {
        let n = self.hosts.len();
        // Relaxed: the cursor only spreads load; no other memory depends on it.
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut healthy = Vec::with_capacity(n);
        let mut resting = Vec::new();
        for (i, host) in self.hosts.iter().enumerate() {
            match host.health.lock().retry_at {
                Some(at) if at > now => resting.push((at, i)),
                _ => healthy.push(i),
            }
        }
        // The cursor turns over the healthy hosts alone (H3): turned over all of them and
        // skipping the resting ones, it gave a resting host's turns to the next healthy one.
        if !healthy.is_empty() {
            let k = start % healthy.len();
            healthy.rotate_left(k);
        }
        resting.sort();
        healthy.extend(resting.into_iter().map(|(_, i)| i));
        healthy
    }

    /// Records that host `i` refused, could not be reached, did not answer in time or did not
    /// answer HTTP: it rests for a back-off that doubles with each failure in a row, up to
    /// [`MAX_BACKOFF`]. Answers the back-off and the failures in a row.
    pub fn failed(&self, i: usize, now: Instant) -> (Duration, u32) {
        let mut h = self.hosts[i].health.lock();
        let backoff = BASE_BACKOFF
            .saturating_mul(1u32 << h.failures.min(16))
            .min(MAX_BACKOFF);
        h.failures = h.failures.saturating_add(1);
        h.retry_at = Some(now + backoff);
        (backoff, h.failures)
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
        assert_eq!(h.failed(0, now), (BASE_BACKOFF, 1));
        for _ in 0..4 {
            assert_eq!(h.order(now), vec![1, 0]);
        }
        // Back-off over: in the rotation again.
        let later = now + BASE_BACKOFF;
        let firsts: Vec<usize> = (0..2).map(|_| hosts_first(&h, later)).collect();
        assert!(firsts.contains(&0));
        // Doubling, capped.
        assert_eq!(h.failed(0, now), (BASE_BACKOFF * 2, 2));
        for _ in 0..20 {
            h.failed(0, now);
        }
        assert_eq!(h.failed(0, now), (MAX_BACKOFF, 23));
        h.succeeded(0);
        assert_eq!(h.failed(0, now), (BASE_BACKOFF, 1));
    }

    #[test]
    fn test_healthy_hosts_share_the_turns_of_a_resting_one() {
        // Three hosts, the middle one resting: the other two lead alternately, not the one
        // after it twice as often.
        let h = hosts(3);
        let now = Instant::now();
        h.failed(1, now);
        let mut led = [0usize; 3];
        for _ in 0..600 {
            let o = h.order(now);
            assert_eq!(*o.last().unwrap(), 1, "{o:?}");
            led[o[0]] += 1;
        }
        assert_eq!(led, [300, 0, 300]);
        // Any one host of five resting, and any two: the healthy ones lead equally.
        for resting in [vec![0], vec![4], vec![1, 3], vec![0, 4]] {
            let h = hosts(5);
            for &r in &resting {
                h.failed(r, now);
            }
            let healthy = 5 - resting.len();
            let mut led = [0usize; 5];
            for _ in 0..healthy * 100 {
                led[h.order(now)[0]] += 1;
            }
            for i in 0..5 {
                let want = if resting.contains(&i) { 0 } else { 100 };
                assert_eq!(led[i], want, "resting {resting:?}: {led:?}");
            }
        }
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
