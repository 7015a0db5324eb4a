//! Histograms the node keeps itself, as fixed buckets of relaxed atomic tallies, and their
//! Prometheus text.
//!
//! The exporter's own histogram handle keeps every observation, with a clock reading of its
//! own, in a growing list of blocks that only a scrape (or an upkeep task) empties: a node
//! nobody scrapes grew by about 25 bytes a request for as long as it ran (450 MB an hour at
//! 5,000 searches a second), and each request paid a clock read, an epoch pin and a write to
//! fresh memory. Here a bucket is two counters:
//!
//! - **H1** Recording is two relaxed atomic adds into memory allocated when the series was
//!   made: it never allocates, locks or reads the clock, and a series' memory is fixed however
//!   many observations it counts. Test: `test_recording_a_known_series_allocates_nothing` (in
//!   [`super`], through [`super::NodeMetrics::record_http`], counted by jemalloc).
//! - **H2** An observation equal to a bound is counted in that bound's bucket (Prometheus's
//!   `le`, less than or equal); one above the last bound only in `+Inf`. Test:
//!   `test_an_observation_on_a_bound_is_counted_in_that_bucket`, and the property test
//!   `prop_buckets_count_what_an_oracle_counts`.
//! - **H3** A written series is consistent in itself: its buckets are cumulative and its
//!   `+Inf` bucket equals its `_count`, both summed from one read of each bucket, even while
//!   observations are recorded (the sum may then lag its counts by the observations in
//!   flight, as in Prometheus's own client libraries). Test:
//!   `test_a_series_written_while_recording_is_cumulative_and_whole`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use metrics_exporter_prometheus::formatting::{
    sanitize_label_value, write_help_line, write_type_line,
};

use super::names::Described;

/// Observations counted by bucket, each bucket with the sum of its observations, all in one
/// integer unit (the caller's: microseconds, milliseconds).
#[derive(Debug)]
pub struct Buckets {
    /// The buckets' upper bounds, ascending.
    bounds: &'static [u64],
    /// Per bound, then one for observations above the last: how many, and their sum.
    slots: Box<[Slot]>,
}

#[derive(Debug, Default)]
struct Slot {
    count: AtomicU64,
    sum: AtomicU64,
}

impl Buckets {
    /// Empty buckets with the upper bounds `bounds` (ascending).
    pub fn new(bounds: &'static [u64]) -> Buckets {
        debug_assert!(bounds.is_sorted(), "bucket bounds ascend: {bounds:?}");
        Buckets {
            bounds,
            slots: (0..=bounds.len()).map(|_| Slot::default()).collect(),
        }
    }

    /// Counts one observation of `value` (H1, H2).
    pub fn record(&self, value: u64) {
        let slot = &self.slots[self.bounds.partition_point(|b| *b < value)];
        slot.count.fetch_add(1, Relaxed);
        slot.sum.fetch_add(value, Relaxed);
    }

    /// Per bucket (the bounds, then the overflow): how many observations and their sum.
    pub fn read(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots
            .iter()
            .map(|s| (s.count.load(Relaxed), s.sum.load(Relaxed)))
    }
}

/// The `# HELP` and `# TYPE` lines of the histogram family `name`.
pub fn write_header(out: &mut String, (name, help): Described) {
    write_help_line(out, name, None, None, help);
    write_type_line(out, name, None, None, "histogram");
}

/// Writes one series of the family `name` with `labels`: the cumulative buckets of `buckets`
/// (`le` in seconds), `+Inf`, sum (seconds) and count (H3); `units_per_second` of the buckets'
/// unit make a second.
pub fn write_series(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    buckets: &Buckets,
    units_per_second: f64,
) {
    let mut labels_text = String::new();
    for (k, v) in labels {
        let _ = write!(labels_text, "{k}=\"{}\",", sanitize_label_value(v));
    }
    let (mut count, mut sum) = (0u64, 0u64);
    let bounds = buckets.bounds.iter().map(Some).chain([None]);
    for (bound, (n, s)) in bounds.zip(buckets.read()) {
        count += n;
        sum += s;
        match bound {
            Some(b) => {
                let le = *b as f64 / units_per_second;
                let _ = writeln!(out, "{name}_bucket{{{labels_text}le=\"{le}\"}} {count}");
            }
            None => {
                let _ = writeln!(out, "{name}_bucket{{{labels_text}le=\"+Inf\"}} {count}");
            }
        }
    }
    let labels_text = labels_text.trim_end_matches(',');
    let labels_text = if labels_text.is_empty() {
        String::new()
    } else {
        format!("{{{labels_text}}}")
    };
    let sum = sum as f64 / units_per_second;
    let _ = writeln!(out, "{name}_sum{labels_text} {sum}");
    let _ = writeln!(out, "{name}_count{labels_text} {count}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BOUNDS: [u64; 3] = [10, 20, 40];

    fn samples(text: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').expect("a sample");
                (k.to_string(), v.parse().expect("a number"))
            })
            .collect()
    }

    fn written(b: &Buckets) -> String {
        let mut out = String::new();
        write_series(&mut out, "t", &[("g", "a\"b")], b, 1000.0);
        out
    }

    #[test]
    fn test_an_observation_on_a_bound_is_counted_in_that_bucket() {
        let b = Buckets::new(&BOUNDS);
        for v in [0, 10, 11, 20, 40, 41, u64::MAX / 4] {
            b.record(v);
        }
        let got: Vec<u64> = b.read().map(|(n, _)| n).collect();
        assert_eq!(got, vec![2, 2, 1, 2]);
        let text = written(&b);
        let s = samples(&text);
        assert_eq!(
            s[..4],
            [
                (r#"t_bucket{g="a\"b",le="0.01"}"#.to_string(), 2.0),
                (r#"t_bucket{g="a\"b",le="0.02"}"#.to_string(), 4.0),
                (r#"t_bucket{g="a\"b",le="0.04"}"#.to_string(), 5.0),
                (r#"t_bucket{g="a\"b",le="+Inf"}"#.to_string(), 7.0),
            ],
            "{text}"
        );
        assert_eq!(s[5], (r#"t_count{g="a\"b"}"#.to_string(), 7.0), "{text}");
    }

    #[test]
    fn test_a_series_without_labels_is_written_without_braces() {
        let b = Buckets::new(&BOUNDS);
        b.record(15);
        let mut out = String::new();
        write_series(&mut out, "t", &[], &b, 1000.0);
        assert!(out.contains("\nt_sum 0.015\nt_count 1\n"), "{out}");
        assert!(out.starts_with("t_bucket{le=\"0.01\"} 0\n"), "{out}");
    }

    #[test]
    fn test_a_series_written_while_recording_is_cumulative_and_whole() {
        let b = std::sync::Arc::new(Buckets::new(&BOUNDS));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|t| {
                let (b, stop) = (b.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut v = t;
                    while !stop.load(Relaxed) {
                        b.record(v % 50);
                        v += 7;
                    }
                })
            })
            .collect();
        for _ in 0..2_000 {
            let s = samples(&written(&b));
            let buckets: Vec<f64> = s[..4].iter().map(|(_, v)| *v).collect();
            assert!(buckets.is_sorted(), "cumulative: {buckets:?}");
            assert_eq!(buckets[3], s[5].1, "+Inf equals the count: {s:?}");
        }
        stop.store(true, Relaxed);
        for w in writers {
            w.join().expect("joined");
        }
        let s = samples(&written(&b));
        let total: u64 = b.read().map(|(_, sum)| sum).sum();
        assert_eq!(s[4].1, total as f64 / 1000.0, "at rest the sum is exact");
    }

    proptest! {
        #[test]
        fn prop_buckets_count_what_an_oracle_counts(values in proptest::collection::vec(0u64..100, 0..200)) {
            let b = Buckets::new(&BOUNDS);
            for v in &values {
                b.record(*v);
            }
            let got: Vec<(u64, u64)> = b.read().collect();
            for (i, (n, sum)) in got.iter().enumerate() {
                let lower = if i == 0 { None } else { Some(BOUNDS[i - 1]) };
                let upper = BOUNDS.get(i).copied();
                let inside: Vec<u64> = values
                    .iter()
                    .copied()
                    .filter(|v| lower.is_none_or(|l| *v > l) && upper.is_none_or(|u| *v <= u))
                    .collect();
                prop_assert_eq!(*n, inside.len() as u64);
                prop_assert_eq!(*sum, inside.iter().sum::<u64>());
            }
        }
    }
}
