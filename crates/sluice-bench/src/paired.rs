//! Paired comparison of two targets measured in the same rounds: is one's latency higher than
//! the other's by more than the machine's drift between rounds?
//!
//! A benchmark that interleaves its targets round by round (as `gateway-overhead` does) measures
//! each pair of targets a few seconds apart in every round, so the machine's slow drift (other
//! tenants, frequency, the page cache) falls on both alike within a round but differs between
//! rounds. Merging all rounds and subtracting two percentiles mixes that drift into the
//! difference. Comparing round by round does not: each round gives one difference, and the
//! differences are summarised by their median and an exact two-sided **sign test** (the
//! chance, were the two targets alike, of a split at least as lopsided as the one seen between
//! rounds where the first was higher and rounds where it was lower). The sign test assumes
//! nothing of the differences' distribution, which on a shared machine has heavy tails.

/// Rounds whose two values differ by less than this (ms) count as ties, out of the sign test:
/// the histograms record microseconds at 0.1 % precision, so closer values are not told apart.
const TIE_MS: f64 = 0.001;

/// Round-by-round differences `a − b` of one figure (a p50 or a p99, ms), summarised.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Paired {
    /// Rounds compared.
    pub rounds: usize,
    /// The median difference, ms (the mean of the two middle ones for an even count).
    pub median_ms: f64,
    /// Rounds where `a` was higher.
    pub higher: usize,
    /// Rounds where `a` was lower.
    pub lower: usize,
    /// The exact two-sided sign test's p-value over the rounds that were not ties (1 when all
    /// were): below 0.05, the split is unlikely to be chance.
    pub sign_test_p: f64,
}

impl Paired {
    /// Compares `a` and `b` round by round (`a[i]` and `b[i]` measured in round `i`); `None`
    /// when there are no rounds or the two have different counts.
    pub fn of(a: &[f64], b: &[f64]) -> Option<Paired> {
        if a.is_empty() || a.len() != b.len() {
            return None;
        }
        let mut diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
        diffs.sort_by(f64::total_cmp);
        let n = diffs.len();
        let median_ms = if n % 2 == 1 {
            diffs[n / 2]
        } else {
            (diffs[n / 2 - 1] + diffs[n / 2]) / 2.0
        };
        let higher = diffs.iter().filter(|d| **d >= TIE_MS).count();
        let lower = diffs.iter().filter(|d| **d <= -TIE_MS).count();
        Some(Paired {
            rounds: n,
            median_ms,
            higher,
            lower,
            sign_test_p: sign_test(higher, lower),
        })
    }
}

/// The exact two-sided sign test's p-value for `higher` rounds against `lower` ones: twice the
/// chance of a split at least as uneven under a fair coin, at most 1.
fn sign_test(higher: usize, lower: usize) -> f64 {
    let n = higher + lower;
    if n == 0 {
        return 1.0;
    }
    let k = higher.min(lower);
    // P(X <= k) for X ~ Binomial(n, 1/2), the binomial coefficients built up in f64: exact
    // enough for the benchmark's at most 100 rounds (C(100, 50) ≈ 1e29, well inside f64).
    let mut coefficient = 1.0_f64;
    let mut tail = 0.0_f64;
    for i in 0..=k {
        if i > 0 {
            coefficient = coefficient * (n - i + 1) as f64 / i as f64;
        }
        tail += coefficient;
    }
    let p = 2.0 * tail / 2f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
    p.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_sign_test_matches_the_binomial_tables() {
        // 10 rounds, all one way: 2 × (1/2)^10.
        assert!((sign_test(10, 0) - 2.0 / 1024.0).abs() < 1e-12);
        assert!((sign_test(0, 10) - 2.0 / 1024.0).abs() < 1e-12);
        // 8 against 2 of 10: 2 × (1 + 10 + 45) / 1024 = 0.109375.
        assert!((sign_test(8, 2) - 0.109_375).abs() < 1e-12);
        // An even split is as likely as can be.
        assert_eq!(sign_test(5, 5), 1.0);
        assert_eq!(sign_test(0, 0), 1.0);
        // 100 rounds do not overflow: 2 × (1/2)^100.
        let p = sign_test(100, 0);
        assert!(p > 0.0 && (p - 2f64.powi(-99)).abs() < 1e-40, "{p}");
    }

    #[test]
    fn test_paired_differences_are_taken_round_by_round() {
        // Merged, `a` looks higher (its largest round is); round by round it is lower in 3 of 4.
        let a = [1.0, 2.0, 3.0, 9.0];
        let b = [1.5, 2.5, 3.5, 1.0];
        let p = Paired::of(&a, &b).unwrap();
        assert_eq!((p.rounds, p.higher, p.lower), (4, 1, 3));
        assert!((p.median_ms - -0.5).abs() < 1e-12, "{p:?}");
        assert!((p.sign_test_p - 0.625).abs() < 1e-12, "{p:?}");
    }

    #[test]
    fn test_near_equal_rounds_are_ties() {
        let p = Paired::of(&[1.0, 2.0, 3.0], &[1.0004, 2.0, 2.0]).unwrap();
        assert_eq!((p.higher, p.lower), (1, 0));
        assert_eq!(p.median_ms, 0.0);
        assert_eq!(p.sign_test_p, 1.0);
    }

    #[test]
    fn test_mismatched_or_empty_rounds_compare_nothing() {
        assert_eq!(Paired::of(&[], &[]), None);
        assert_eq!(Paired::of(&[1.0], &[1.0, 2.0]), None);
    }
}
