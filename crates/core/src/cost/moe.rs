//! Mixture-of-experts routing in expectation: how many distinct experts a step's tokens touch
//! (their weights are what a step reads from memory), with a skew knob for routers that do not
//! spread tokens evenly.
//!
//! Under uniform top-k routing each token picks k of E experts, so one expert stays untouched
//! by a token with probability 1 − k/E and by T independent tokens with (1 − k/E)^T: the
//! expected number of distinct experts is E·(1 − (1 − k/E)^T). One token reads k experts' weights,
//! a few hundred read nearly all of them — small-batch MoE decode is memory-bound on the experts
//! a batch touches, large batches are compute-bound on tokens × k.

/// Expected distinct experts of `experts` touched by `tokens` tokens routed top-`k`, uniform.
pub fn distinct_experts(experts: f64, k: f64, tokens: f64) -> f64 {
    if experts <= 0.0 || tokens <= 0.0 {
        return 0.0;
    }
    let k = k.min(experts);
    experts * (1.0 - (1.0 - k / experts).powf(tokens))
}

/// [`distinct_experts`] under a skewed router: `skew` in [0, 1) routes tokens as though only
/// the hottest `(1 − skew)·E` experts (never fewer than k) were in use, so fewer distinct
/// experts are read (`--moe-skew`; 0 = uniform). A one-number stand-in for a measured
/// activation histogram.
pub fn distinct_experts_skewed(experts: f64, k: f64, tokens: f64, skew: f64) -> f64 {
    let effective = (experts * (1.0 - skew.clamp(0.0, 1.0))).max(k.min(experts));
    distinct_experts(effective, k, tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::index::sample;
    use rand::SeedableRng;

    /// Counts distinct experts over `trials` batches of `tokens` tokens, each picking k of E
    /// without replacement, as a top-k router does.
    fn counted(experts: usize, k: usize, tokens: usize, trials: usize) -> f64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut total = 0usize;
        for _ in 0..trials {
            let mut hit = vec![false; experts];
            for _ in 0..tokens {
                for e in sample(&mut rng, experts, k) {
                    hit[e] = true;
                }
            }
            total += hit.iter().filter(|&&h| h).count();
        }
        total as f64 / trials as f64
    }

    #[test]
    fn formula_matches_a_counting_simulation() {
        // DeepSeek-V3: 256 experts, top-8. One token: exactly 8.
        assert!((distinct_experts(256.0, 8.0, 1.0) - 8.0).abs() < 1e-12);
        // 2 tokens: 256 × (1 − (31/32)²) = 256 × 63/1024 = 15.75.
        assert!((distinct_experts(256.0, 8.0, 2.0) - 15.75).abs() < 1e-12);
        for (e, k, t) in [(256, 8, 1), (256, 8, 4), (256, 8, 32), (256, 8, 256), (8, 2, 3), (128, 8, 16)] {
            let f = distinct_experts(e as f64, k as f64, t as f64);
            let c = counted(e, k, t, 4000);
            assert!((f - c).abs() / f < 0.01, "E {e} k {k} T {t}: formula {f}, counted {c}");
        }
        // Many tokens touch every expert; none touch none.
        assert!((distinct_experts(256.0, 8.0, 4096.0) - 256.0).abs() < 1e-6);
        assert_eq!(distinct_experts(256.0, 8.0, 0.0), 0.0);
    }

    #[test]
    fn skew_reads_fewer_experts() {
        let uniform = distinct_experts(256.0, 8.0, 32.0);
        assert_eq!(distinct_experts_skewed(256.0, 8.0, 32.0, 0.0), uniform);
        // Half the experts hot: 128 × (1 − (15/16)^32).
        let half = distinct_experts_skewed(256.0, 8.0, 32.0, 0.5);
        assert!((half - 128.0 * (1.0 - (15.0f64 / 16.0).powi(32))).abs() < 1e-9);
        assert!(half < uniform);
        // Never below k experts in use.
        assert!((distinct_experts_skewed(256.0, 8.0, 1.0, 0.999) - 8.0).abs() < 1e-12);
    }
}
