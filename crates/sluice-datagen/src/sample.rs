//! Small, allocation-free samplers built on any [`Rng`].
//!
//! They are written out here instead of taken from `rand_distr` so that the generator's output
//! depends only on `rand_chacha`'s stream and on this file, never on a distribution crate's
//! algorithm choice.

use rand::Rng;

/// Draws ranks `0..n` with probability proportional to `1 / (rank + 1)^exponent`.
///
/// # Invariants
///
/// `cumulative` is non-empty and strictly increasing; its last entry is the total weight.
/// Checked by `debug_assert!` in [`ZipfTable::new`].
#[derive(Debug, Clone)]
pub(crate) struct ZipfTable {
    cumulative: Box<[f64]>,
}

impl ZipfTable {
    /// Builds the cumulative weight table for `n` ranks with the given exponent.
    ///
    /// # Panics
    ///
    /// If `n` is zero or `exponent` is not finite and non-negative.
    pub(crate) fn new(n: usize, exponent: f64) -> Self {
        assert!(n > 0, "a zipf table needs at least one rank");
        assert!(
            exponent.is_finite() && exponent >= 0.0,
            "zipf exponent must be finite and >= 0, got {exponent}"
        );
        let mut total = 0.0;
        let cumulative: Box<[f64]> = (0..n)
            .map(|rank| {
                total += 1.0 / ((rank + 1) as f64).powf(exponent);
                total
            })
            .collect();
        debug_assert!(cumulative.windows(2).all(|pair| pair[0] < pair[1]));
        Self { cumulative }
    }

    /// Returns how many ranks the table draws from.
    pub(crate) fn num_ranks(&self) -> usize {
        self.cumulative.len()
    }

    /// Draws one rank in `0..self.num_ranks()`.
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let total = self.cumulative[self.cumulative.len() - 1];
        let point = rng.random::<f64>() * total;
        let rank = self.cumulative.partition_point(|&bound| bound <= point);
        // `point < total` always holds, but floating-point rounding of the product could in
        // principle land on `total`; the clamp keeps the rank in range without a branch on it.
        rank.min(self.cumulative.len() - 1)
    }
}

/// Sum of the weights of a `(value, weight)` table, for use in `const` items.
pub(crate) const fn total_weight<T>(table: &[(T, u32)]) -> u32 {
    let mut total = 0;
    let mut i = 0;
    while i < table.len() {
        total += table[i].1;
        i += 1;
    }
    total
}

/// Draws a value from a `(value, weight)` table whose weights sum to `total`.
///
/// `total` must equal [`total_weight`] of `table` and be positive.
pub(crate) fn pick_weighted<T: Copy, R: Rng + ?Sized>(
    rng: &mut R,
    table: &[(T, u32)],
    total: u32,
) -> T {
    debug_assert_eq!(total, total_weight(table));
    let mut point = rng.random_range(0..total);
    for &(value, weight) in table {
        if point < weight {
            return value;
        }
        point -= weight;
    }
    unreachable!("point {point} is below the total weight {total} of the table")
}

/// Draws two independent standard normal values with the Box–Muller transform.
pub(crate) fn standard_normal_pair<R: Rng + ?Sized>(rng: &mut R) -> (f64, f64) {
    // `1 - u` maps [0, 1) to (0, 1], so the logarithm is always finite.
    let radius = (-2.0 * (1.0 - rng.random::<f64>()).ln()).sqrt();
    let angle = std::f64::consts::TAU * rng.random::<f64>();
    (radius * angle.cos(), radius * angle.sin())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn test_zipf_draws_low_ranks_more_often_than_high_ranks() {
        let table = ZipfTable::new(100, 1.0);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut counts = [0u32; 100];
        for _ in 0..100_000 {
            counts[table.sample(&mut rng)] += 1;
        }
        // Expected share of rank 0 is 1 / H(100) ~ 19.3 %, of rank 9 about 1.9 %.
        assert!(
            (18_000..=20_600).contains(&counts[0]),
            "rank 0 drawn {} times",
            counts[0]
        );
        assert!(
            counts[0] > 5 * counts[9],
            "rank 0 {} vs rank 9 {}",
            counts[0],
            counts[9]
        );
        assert!(
            counts[9] > counts[99],
            "rank 9 {} vs rank 99 {}",
            counts[9],
            counts[99]
        );
        assert!(counts[99] > 0, "the last rank must be reachable");
    }

    #[test]
    fn test_zipf_with_one_rank_always_draws_it() {
        let table = ZipfTable::new(1, 1.2);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!((0..1000).all(|_| table.sample(&mut rng) == 0));
    }

    #[test]
    fn test_pick_weighted_follows_the_weights() {
        const TABLE: &[(char, u32)] = &[('a', 1), ('b', 0), ('c', 3)];
        const TOTAL: u32 = total_weight(TABLE);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut counts = [0u32; 3];
        for _ in 0..40_000 {
            counts[match pick_weighted(&mut rng, TABLE, TOTAL) {
                'a' => 0,
                'b' => 1,
                _ => 2,
            }] += 1;
        }
        assert_eq!(TOTAL, 4);
        assert_eq!(counts[1], 0, "a zero weight must never be drawn");
        assert!(
            (9_400..=10_600).contains(&counts[0]),
            "'a' drawn {} times",
            counts[0]
        );
    }

    #[test]
    fn test_standard_normal_pair_has_zero_mean_and_unit_variance() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (mut sum, mut sum_sq, n) = (0.0, 0.0, 50_000);
        for _ in 0..n {
            let (a, b) = standard_normal_pair(&mut rng);
            sum += a + b;
            sum_sq += a * a + b * b;
        }
        let mean = sum / f64::from(2 * n);
        let variance = sum_sq / f64::from(2 * n) - mean * mean;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((variance - 1.0).abs() < 0.03, "variance {variance}");
    }
}
