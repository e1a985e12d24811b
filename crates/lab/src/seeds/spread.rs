//! The spread of one metric over the seeds of a `--seeds` run: the median, the lowest and the
//! highest seed's value, and a distribution-free interval of the median — the order statistics
//! of ranks k and n + 1 − k, the sign-test interval, whose coverage 1 − 2·P(B < k) for
//! B ~ Binomial(n, ½) holds whatever the metric's distribution (statrs computes both). With fewer
//! than 6 seeds no pair of ranks reaches 95 %: the interval is then the lowest and highest value,
//! and its coverage (75 % at 3 seeds) is said rather than claimed.

use serde::Serialize;
use statrs::distribution::{Binomial, DiscreteCDF};
use statrs::statistics::{Data, OrderStatistics};

/// The coverage the interval of the median aims for.
pub const LEVEL: f64 = 0.95;

/// Which order statistics bound the interval of the median of `seeds` values, and how often such
/// an interval holds the true median.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The coverage aimed for ([`LEVEL`]).
    pub level: f64,
    /// The 1-based ranks of the lower and upper bound among the sorted values.
    pub ranks: [usize; 2],
    /// The interval's exact coverage at this many seeds (below `level` under 6 seeds).
    pub coverage: f64,
}

impl Interval {
    /// The interval for `seeds` values: ranks (k, n + 1 − k) with k the largest rank whose
    /// coverage 1 − 2·P(B ≤ k − 1) still reaches [`LEVEL`]; k = 1 (the extremes) when none does.
    pub fn for_seeds(seeds: usize) -> Self {
        let n = seeds.max(1);
        let coverage = |k: usize| match Binomial::new(0.5, n as u64) {
            Ok(b) => 1.0 - 2.0 * b.cdf(k as u64 - 1),
            Err(_) => f64::NAN,
        };
        let mut k = 1;
        while k < n.div_ceil(2) && coverage(k + 1) >= LEVEL {
            k += 1;
        }
        // Rounded to 12 decimals: the binomial CDF's last bits are noise (0.7500000000000012).
        let full = if n == 1 { 0.0 } else { (coverage(k) * 1e12).round() / 1e12 };
        Interval { level: LEVEL, ranks: [k, n + 1 - k], coverage: full }
    }

    /// "the lowest and highest seed" or "the 2nd lowest and 2nd highest seed".
    pub fn describe(&self) -> String {
        let k = self.ranks[0];
        if k == 1 {
            "the lowest and highest seed".to_string()
        } else {
            let th = match k % 10 {
                2 if k % 100 != 12 => "nd",
                3 if k % 100 != 13 => "rd",
                _ => "th",
            };
            format!("the {k}{th} lowest and {k}{th} highest seed")
        }
    }
}

/// One metric over the seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    /// The median over the seeds (the mean of the two middle values for an even count).
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The values of the interval's ranks ([`Interval::ranks`]).
    pub interval: [f64; 2],
    /// Each seed's value, in seed order.
    pub per_seed: Vec<f64>,
}

impl Spread {
    /// The spread of `per_seed` (in seed order; at least one value) with the interval `iv`.
    pub fn of(per_seed: Vec<f64>, iv: &Interval) -> Self {
        let mut data = Data::new(per_seed.clone());
        let n = per_seed.len();
        let rank = |data: &mut Data<Vec<f64>>, r: usize| data.order_statistic(r.clamp(1, n.max(1)));
        let median = data.median();
        let (min, max) = (rank(&mut data, 1), rank(&mut data, n));
        let interval = [rank(&mut data, iv.ranks[0]), rank(&mut data, iv.ranks[1])];
        Spread { median, min, max, interval, per_seed }
    }

    /// Every seed gave the same value (compared bit for bit, so NaNs of one kind are the same).
    pub fn constant(&self) -> bool {
        self.per_seed.windows(2).all(|w| w[0].to_bits() == w[1].to_bits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sign-test ranks and coverages, checked by hand: 1 − 2·Σ_{i<k} C(n, i) / 2^n.
    #[test]
    fn interval_ranks_and_coverage() {
        let iv = Interval::for_seeds(3);
        assert_eq!(iv.ranks, [1, 3]);
        assert_eq!(iv.coverage, 0.75);
        // 6 seeds: the extremes cover 1 − 2/64 = 96.9 %.
        let iv = Interval::for_seeds(6);
        assert_eq!(iv.ranks, [1, 6]);
        assert!((iv.coverage - 62.0 / 64.0).abs() < 1e-12);
        // 8 seeds: ranks 2 and 7 would cover 1 − 2·9/256 = 93 %: still the extremes.
        assert_eq!(Interval::for_seeds(8).ranks, [1, 8]);
        // 9 seeds: ranks 2 and 8 cover 1 − 2·10/512 = 96.1 %.
        let iv = Interval::for_seeds(9);
        assert_eq!(iv.ranks, [2, 8]);
        assert!((iv.coverage - (1.0 - 20.0 / 512.0)).abs() < 1e-12);
        assert_eq!(iv.describe(), "the 2nd lowest and 2nd highest seed");
        // 20 seeds: ranks 6 and 15 (1 − 2·0.0207 = 95.9 %; rank 7 would cover 88.5 %).
        assert_eq!(Interval::for_seeds(20).ranks, [6, 15]);
        assert_eq!(Interval::for_seeds(1).ranks, [1, 1]);
    }

    #[test]
    fn spread_of_values() {
        let s = Spread::of(vec![3.0, 1.0, 2.0], &Interval::for_seeds(3));
        assert_eq!((s.median, s.min, s.max, s.interval), (2.0, 1.0, 3.0, [1.0, 3.0]));
        assert_eq!(s.per_seed, [3.0, 1.0, 2.0], "kept in seed order");
        assert!(!s.constant());
        let s = Spread::of(vec![4.0, 1.0, 2.0, 3.0], &Interval::for_seeds(4));
        assert_eq!(s.median, 2.5);
        assert!(Spread::of(vec![5.0, 5.0], &Interval::for_seeds(2)).constant());
    }
}
