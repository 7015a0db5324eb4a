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
//! - H4 — a host's back-off grows once per attempt window, not once per failed request: a
//!   failure counts (doubles the back-off) only when the host was not resting and the attempt
//!   started after the last failure that counted — the first failure after the host was last
//!   up, or of a request given it after its back-off ended. Requests already in flight when
//!   it failed, and those that tried it while it rested (every host resting, H1), leave the
//!   back-off as it is. (An outside trial's 1 s outage under 12 clients counted 8 failures in
//!   0.7 ms and rested the host 30 s.) Tested by
//!   `test_concurrent_failures_grow_the_back_off_once`.
//! - H5 — a host whose back-off ended leads one request, its probe, before it has its share
//!   again: until the probe's host answers (or fails, or [`Hosts::new`]'s `probe_wait`
//!   passes without a word of it), other orders list it with the resting hosts. A host that
//!   hangs thus costs one request per back-off, not one per concurrent client (an outside
//!   trial's six clients each lost `request_timeout` at each re-admission), as nginx tries a
//!   failed server once per `fail_timeout`. Tested by
//!   `test_a_host_out_of_back_off_gets_one_probe_before_its_share`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderValue, Uri};
use parking_lot::Mutex;
use smallvec::SmallVec;

/// The hosts a request tries, in order ([`Hosts::order`]): held inline up to
/// [`INLINE_HOSTS`], so that a search's order allocates nothing (it was two allocations a
/// forwarded search).
pub type Order = SmallVec<[usize; INLINE_HOSTS]>;

/// How many hosts an [`Order`] holds without allocating: room for the handful of nodes a
/// gateway is usually pointed at; a longer list works the same, and allocates.
const INLINE_HOSTS: usize = 8;

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
    /// Whether `health` has a back-off (`retry_at` set), written with it under its lock: a
    /// host without one is ordered and its answer recorded without taking its lock, so while
    /// every host is up the lane threads write nothing here they share (BENCHMARKS.md "Lines
    /// the lane threads shared").
    resting: AtomicBool,
}

#[derive(Debug, Default)]
struct Health {
    /// Failures that counted (H4) since the host was last up.
    failures: u32,
    /// Not to be tried before this (while failing).
    retry_at: Option<Instant>,
    /// When the last failure that counted was recorded (H4).
    failed_at: Option<Instant>,
    /// Until when the probe given the host after its back-off is awaited (H5).
    probe_until: Option<Instant>,
}

/// What recording a failure did (H4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rest {
    /// How long the host rests from its last failure that counted.
    pub backoff: Duration,
    /// Failures that counted since the host was last up.
    pub failures: u32,
    /// Whether this failure counted (the back-off grew).
    pub counted: bool,
}

thread_local! {
    /// The round-robin cursor, one a thread, as each nginx worker keeps its own: a cursor all
    /// threads shared was a cache line every lane thread wrote every search. Each thread's
    /// requests still take the healthy hosts in turn (H3), and so do all of them together.
    static CURSOR: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The upstream's hosts.
#[derive(Debug)]
pub struct Hosts {
    hosts: Vec<Host>,
    /// How long a probe (H5) is awaited before another request may probe the host: the
    /// longest an attempt takes (`connect_timeout` + `request_timeout`), so a probe whose
    /// outcome is never told (its client left; a reset, not held against the host) does not
    /// keep the host out for good.
    probe_wait: Duration,
    /// The file `backend.upstream.ca_file` names, if set: the hint of a refused certificate
    /// says what fixes it (`client.rs` `tls_hint`), which depends on it.
    ca_file: Option<String>,
}

impl Hosts {
    /// The hosts of `bases`, all healthy; a probe (H5) awaited `probe_wait` at most;
    /// `ca_file`: the file `backend.upstream.ca_file` names, when their TLS is verified
    /// against it.
    pub fn new(bases: &[Uri], probe_wait: Duration, ca_file: Option<String>) -> Hosts {
        Hosts {
            hosts: bases
                .iter()
                .map(|b| Host {
                    base: b.clone(),
                    name: b.to_string().trim_end_matches('/').to_string(),
                    host_header: host_header(b),
                    health: Mutex::new(Health::default()),
                    resting: AtomicBool::new(false),
                })
                .collect(),
            probe_wait,
            ca_file,
        }
    }

    /// The file `backend.upstream.ca_file` names, if set.
    pub fn ca_file(&self) -> Option<&str> {
        self.ca_file.as_deref()
    }

    /// The host `i`.
    pub fn get(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// The order in which a request tries the hosts (see H1, H2, H3, H5): a host whose
    /// back-off ended and that no request probes yet (this request probes it), the healthy
    /// hosts from the round-robin cursor's place among them on, then those in back-off or
    /// being probed by the end of their back-off.
    pub fn order(&self, now: Instant) -> Order {
        let start = CURSOR.with(|c| {
            let start = c.get();
            c.set(start.wrapping_add(1));
            start
        });
        let mut healthy = Order::new();
        let mut resting = SmallVec::<[(Instant, usize); INLINE_HOSTS]>::new();
        let mut probe = None;
        for (i, host) in self.hosts.iter().enumerate() {
            // A host with no back-off is healthy, its lock not taken (the usual case). One
            // that fails while this reads is ordered as if this request had come just before.
            if !host.resting.load(Ordering::Acquire) {
                healthy.push(i);
                continue;
            }
            let mut h = host.health.lock();
            match h.retry_at {
                None => healthy.push(i),
                Some(at) if at > now => resting.push((at, i)),
                // Back-off over: one request probes it (H5).
                Some(at) => {
                    let probed = h.probe_until.is_some_and(|until| until > now);
                    if probe.is_none() && !probed {
                        h.probe_until = Some(now + self.probe_wait);
                        probe = Some(i);
                    } else {
                        resting.push((at, i));
                    }
                }
            }
        }
        let mut order = Order::new();
        order.extend(probe);
        // The cursor turns over the healthy hosts alone (H3): turned over all of them and
        // skipping the resting ones, it gave a resting host's turns to the next healthy one.
        if !healthy.is_empty() {
            let k = start % healthy.len();
            order.extend_from_slice(&healthy[k..]);
            order.extend_from_slice(&healthy[..k]);
        }
        // The probe may be the only host out of turn: nothing to sort then.
        if !resting.is_empty() {
            resting.sort_unstable();
            order.extend(resting.iter().map(|&(_, i)| i));
        }
        order
    }

    /// Records that an attempt on host `i` begun at `started` failed at `now`: it refused,
    /// could not be reached, did not answer in time or did not answer HTTP. The first such
    /// failure of an attempt window (H4) rests the host for a back-off that doubles with each
    /// window that failed in a row, up to [`MAX_BACKOFF`]; a later one of the same window
    /// changes nothing.
    pub fn failed(&self, i: usize, started: Instant, now: Instant) -> Rest {
        let mut h = self.hosts[i].health.lock();
        let resting = h.retry_at.is_some_and(|at| at > now);
        let in_window = h.failed_at.is_some_and(|at| started <= at);
        if resting || in_window {
            let backoff = match (h.retry_at, h.failed_at) {
                (Some(retry), Some(failed)) => retry.saturating_duration_since(failed),
                _ => Duration::ZERO,
            };
            return Rest {
                backoff,
                failures: h.failures,
                counted: false,
            };
        }
        let backoff = BASE_BACKOFF
            .saturating_mul(1u32 << h.failures.min(16))
            .min(MAX_BACKOFF);
        h.failures = h.failures.saturating_add(1);
        h.retry_at = Some(now + backoff);
        self.hosts[i].resting.store(true, Ordering::Release);
        h.failed_at = Some(now);
        h.probe_until = None;
        Rest {
            backoff,
            failures: h.failures,
            counted: true,
        }
    }

    /// Records that host `i` answered: it is healthy again (its probe, if it had one, passed).
    pub fn succeeded(&self, i: usize) {
        let host = &self.hosts[i];
        if !host.resting.load(Ordering::Acquire) {
            return;
        }
        let mut h = host.health.lock();
        if h.retry_at.is_some() {
            *h = Health::default();
            host.resting.store(false, Ordering::Release);
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
        Hosts::new(&bases, PROBE_WAIT, None)
    }

    /// The tests' probe wait (H5).
    const PROBE_WAIT: Duration = Duration::from_secs(5);

    /// A failure of an attempt on `i` started and ended at `now`.
    fn fail(h: &Hosts, i: usize, now: Instant) -> Rest {
        h.failed(i, now, now)
    }

    #[test]
    fn test_order_lists_every_host_once() {
        let h = hosts(3);
        let now = Instant::now();
        fail(&h, 1, now);
        for _ in 0..5 {
            let mut o = h.order(now);
            o.sort();
            assert_eq!(o.as_slice(), [0, 1, 2]);
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
        assert_eq!(
            fail(&h, 0, now),
            Rest {
                backoff: BASE_BACKOFF,
                failures: 1,
                counted: true
            }
        );
        for _ in 0..4 {
            assert_eq!(h.order(now).as_slice(), [1, 0]);
        }
        // Back-off over: probed, then in the rotation again once it answered.
        let later = now + BASE_BACKOFF;
        assert_eq!(h.order(later)[0], 0);
        h.succeeded(0);
        let firsts: Vec<usize> = (0..2).map(|_| hosts_first(&h, later)).collect();
        assert!(firsts.contains(&0));
        // Each window that fails in a row doubles it, capped.
        let mut t = later;
        let mut backoffs = Vec::new();
        for _ in 0..10 {
            let rest = fail(&h, 0, t);
            assert!(rest.counted);
            backoffs.push(rest.backoff);
            t += rest.backoff;
        }
        assert_eq!(
            backoffs[..3],
            [BASE_BACKOFF, BASE_BACKOFF * 2, BASE_BACKOFF * 4]
        );
        assert_eq!(*backoffs.last().unwrap(), MAX_BACKOFF);
        h.succeeded(0);
        assert_eq!(fail(&h, 0, t).backoff, BASE_BACKOFF);
    }

    #[test]
    fn test_concurrent_failures_grow_the_back_off_once() {
        let h = hosts(2);
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // Twelve requests in flight when the host fails: the first failure rests it, the
        // other eleven (started before it, and told while it rests) change nothing.
        let first = h.failed(0, at(0), at(10));
        assert_eq!(
            first,
            Rest {
                backoff: BASE_BACKOFF,
                failures: 1,
                counted: true
            }
        );
        for k in 0..11 {
            let rest = h.failed(0, at(k), at(10 + k));
            assert_eq!(
                rest,
                Rest {
                    backoff: BASE_BACKOFF,
                    failures: 1,
                    counted: false
                },
                "{k}"
            );
        }
        // One of them told only after the back-off ended: it started before the failure
        // that counted, so it is of the same window.
        let late = at(10) + BASE_BACKOFF + Duration::from_millis(5);
        assert!(!h.failed(0, at(3), late).counted);
        // Every host resting: a request tries it anyway (H1); failing, it changes nothing.
        fail(&h, 1, at(20));
        assert_eq!(h.order(at(30)).as_slice(), [0, 1]);
        assert!(!fail(&h, 0, at(30)).counted);
        // The probe after the back-off failing: the next window, twice as long.
        let probe_at = at(10) + BASE_BACKOFF;
        assert_eq!(h.order(probe_at)[0], 0);
        let rest = fail(&h, 0, probe_at);
        assert_eq!(
            rest,
            Rest {
                backoff: BASE_BACKOFF * 2,
                failures: 2,
                counted: true
            }
        );
    }

    #[test]
    fn test_a_host_out_of_back_off_gets_one_probe_before_its_share() {
        let h = hosts(3);
        let now = Instant::now();
        fail(&h, 1, now);
        let over = now + BASE_BACKOFF;
        // The first order after the back-off probes it; the others, while the probe is out,
        // list it after the healthy hosts, as a resting one.
        assert_eq!(h.order(over)[0], 1);
        for _ in 0..6 {
            let o = h.order(over);
            assert_eq!(*o.last().unwrap(), 1, "{o:?}");
        }
        // A probe never told of: another after the probe wait.
        let expired = over + PROBE_WAIT;
        assert_eq!(h.order(expired)[0], 1);
        assert_eq!(*h.order(expired).last().unwrap(), 1);
        // It answered: its share again.
        h.succeeded(1);
        let mut led = [0usize; 3];
        for _ in 0..30 {
            led[h.order(expired)[0]] += 1;
        }
        assert_eq!(led, [10, 10, 10]);
        // Two hosts out of back-off at once: one probe per order.
        let h = hosts(3);
        fail(&h, 0, now);
        fail(&h, 2, now);
        let o = h.order(over);
        assert_eq!((o[0], o[1]), (0, 1), "{o:?}");
        let o = h.order(over);
        assert_eq!((o[0], o[1]), (2, 1), "{o:?}");
        assert_eq!(h.order(over)[0], 1);
    }

    #[test]
    fn test_healthy_hosts_share_the_turns_of_a_resting_one() {
        // Three hosts, the middle one resting: the other two lead alternately, not the one
        // after it twice as often.
        let h = hosts(3);
        let now = Instant::now();
        fail(&h, 1, now);
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
                fail(&h, r, now);
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
        fail(&h, 0, now);
        fail(&h, 0, now + BASE_BACKOFF);
        fail(&h, 1, now);
        assert_eq!(h.order(now).as_slice(), [1, 0]);
    }
}
