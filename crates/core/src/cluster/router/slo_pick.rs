//! The scheduling profile llm-d's chart runs when its latency predictor is on
//! (`config/charts/epplib/templates/_config.yaml`, llm-d/llm-d-inference-scheduler 520af478;
//! paths under `pkg/epp/framework/plugins/`): a strict prefix-affinity filter, the SLO-headroom
//! tier filter, a loose prefix-affinity filter, the latency scorer and the weighted-random
//! picker, over candidates that carry their predicted TTFT and TPOT headroom.
//!
//! - **prefix-cache affinity** (`scheduling/filter/prefixcacheaffinity` `Filter`; thresholds
//!   0.99 then 0.80): with two or more candidates, one time in 100 (`explorationProbability`)
//!   all pass; otherwise those whose prefix score reaches the threshold ("sticky") pass alone,
//!   unless none is sticky or the best sticky predicted TTFT is more than 5,000 ms
//!   (`maxTTFTPenaltyMs`) above the best other one.
//! - **SLO-headroom tier** (`scheduling/filter/sloheadroomtier`): candidates with both
//!   headrooms ≥ 0 are the positive tier; when both tiers have members the negative one passes
//!   one time in 100 (`epsilonExploreNeg`), the positive one otherwise.
//! - **latency scorer** (`scheduling/scorer/latency` `Score`, `scoreBucket`): when some
//!   candidate is positive, the positive ones are scored by the strategy (`least` by default:
//!   the least headroom wins, packing work where it still fits; `most`: the most); when all are
//!   negative, the idle ones (no request the EPP dispatched in flight) if any, else the first
//!   non-empty group of TPOT-only, TTFT-only, both negative, by `least`. Within the scored set
//!   |headroom| is min-max normalised per metric (a flat range: 0.5), blended 0.8 TTFT + 0.2
//!   TPOT (all weight on the other metric when one range is flat), and the score is
//!   (⌊(1 − blend) × 100⌋ + 1) / 100 for `least`, (⌊blend × 100⌋ + 1) / 100 for `most`.
//!   Without predictions (the predictor client takes at most 100 endpoints a call,
//!   `LATENCY_MAX_BULK_SIZE`): a composite of equal thirds of free KV, relative queue and
//!   prefix score, rounded to hundredths.
//! - **weighted-random picker** (`scheduling/picker/weightedrandom`): the A-Res draw, key
//!   U^(1/score), the largest key wins; a score ≤ 0 never wins unless all are, then uniformly.

use rand::Rng;
use serde::Serialize;

/// `headroomSelectionStrategy` (`--headroom-selection-strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// The least headroom wins (bin packing; the default).
    #[default]
    Least,
    /// The most headroom wins (spreading).
    Most,
}

/// One endpoint as the filters and the scorer see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub instance: usize,
    /// The approximate prefix score, 0..1.
    pub prefix: f64,
    /// KV-cache usage, 0..1.
    pub kv: f64,
    pub waiting: u32,
    /// Requests the EPP dispatched there and has not seen end.
    pub dispatched: u32,
    /// Predicted TTFT, ms (`None`: no prediction).
    pub ttft_ms: Option<f64>,
    /// SLO − prediction, ms.
    pub ttft_headroom: f64,
    pub tpot_headroom: f64,
}

impl Candidate {
    fn positive(&self) -> bool {
        self.ttft_headroom >= 0.0 && self.tpot_headroom >= 0.0
    }
}

/// `explorationProbability` and `epsilonExploreNeg`.
const EXPLORE: f64 = 0.01;
/// `maxTTFTPenaltyMs`.
const MAX_TTFT_PENALTY_MS: f64 = 5000.0;
/// The chart's strict and loose affinity thresholds.
pub const STRICT_AFFINITY: f64 = 0.99;
pub const LOOSE_AFFINITY: f64 = 0.80;
/// `ttftWeight`, `tpotWeight`.
const TTFT_WEIGHT: f64 = 0.8;
const TPOT_WEIGHT: f64 = 0.2;

/// The prefix-affinity filter at `threshold`: keeps the sticky candidates in `c` (in order);
/// whether it narrowed them.
pub fn affinity(c: &mut Vec<Candidate>, threshold: f64, rng: &mut impl Rng) -> bool {
    if c.len() <= 1 || threshold <= 0.0 || rng.random::<f64>() < EXPLORE {
        return false;
    }
    let sticky = |x: &Candidate| x.prefix >= threshold;
    let n_sticky = c.iter().filter(|x| sticky(x)).count();
    if n_sticky == 0 {
        return false;
    }
    if n_sticky < c.len() {
        let best = |want: bool| {
            c.iter().filter(|x| sticky(x) == want).map(|x| x.ttft_ms.unwrap_or(f64::MAX)).fold(f64::MAX, f64::min)
        };
        if best(true) - best(false) > MAX_TTFT_PENALTY_MS {
            return false;
        }
    }
    let before = c.len();
    c.retain(sticky);
    c.len() < before
}

/// The SLO-headroom tier filter.
pub fn tiers(c: &mut Vec<Candidate>, rng: &mut impl Rng) {
    if c.iter().all(|x| x.ttft_ms.is_none()) {
        return;
    }
    let positive = c.iter().filter(|x| x.ttft_ms.is_some() && x.positive()).count();
    if positive == 0 || positive == c.len() {
        return;
    }
    let keep_negative = rng.random::<f64>() < EXPLORE;
    c.retain(|x| (x.ttft_ms.is_some() && x.positive()) != keep_negative);
}

/// The latency scorer's scores for `c`, into `out` (same order).
pub fn score(c: &[Candidate], strategy: Strategy, out: &mut Vec<f64>) {
    out.clear();
    out.resize(c.len(), 0.0);
    if c.iter().all(|x| x.ttft_ms.is_none()) {
        composite(c, out);
        return;
    }
    let positive: Vec<usize> = (0..c.len()).filter(|&i| c[i].positive()).collect();
    if !positive.is_empty() {
        bucket(c, &positive, strategy, out);
        return;
    }
    let idle: Vec<usize> = (0..c.len()).filter(|&i| c[i].dispatched == 0).collect();
    if !idle.is_empty() {
        bucket(c, &idle, Strategy::Least, out);
        return;
    }
    let groups = [
        |x: &Candidate| x.ttft_headroom >= 0.0 && x.tpot_headroom < 0.0,
        |x: &Candidate| x.ttft_headroom < 0.0 && x.tpot_headroom >= 0.0,
        |x: &Candidate| x.ttft_headroom < 0.0 && x.tpot_headroom < 0.0,
    ];
    for g in groups {
        let members: Vec<usize> = (0..c.len()).filter(|&i| g(&c[i])).collect();
        if !members.is_empty() {
            bucket(c, &members, Strategy::Least, out);
            return;
        }
    }
}

/// `scoreBucket` over the candidates `members`.
fn bucket(c: &[Candidate], members: &[usize], strategy: Strategy, out: &mut [f64]) {
    let range = |f: &dyn Fn(&Candidate) -> f64| {
        members.iter().map(|&i| f(&c[i]).abs()).fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
    };
    let (t_lo, t_hi) = range(&|x| x.ttft_headroom);
    let (p_lo, p_hi) = range(&|x| x.tpot_headroom);
    const EPS: f64 = 1e-9;
    let norm = |v: f64, lo: f64, hi: f64| if hi - lo <= EPS { 0.5 } else { (v.abs() - lo) / (hi - lo) };
    let (mut a, mut b) = (TTFT_WEIGHT / (TTFT_WEIGHT + TPOT_WEIGHT), TPOT_WEIGHT / (TTFT_WEIGHT + TPOT_WEIGHT));
    let (t_flat, p_flat) = (t_hi - t_lo <= EPS, p_hi - p_lo <= EPS);
    if t_flat && !p_flat {
        (a, b) = (0.0, 1.0);
    } else if p_flat && !t_flat {
        (a, b) = (1.0, 0.0);
    }
    for &i in members {
        let blend = a * norm(c[i].ttft_headroom, t_lo, t_hi) + b * norm(c[i].tpot_headroom, p_lo, p_hi);
        let w = match strategy {
            Strategy::Least => ((1.0 - blend) * 100.0).floor() + 1.0,
            Strategy::Most => (blend * 100.0).floor() + 1.0,
        };
        out[i] = w / 100.0;
    }
}

/// `compositeScores`: equal thirds of free KV, relative queue and prefix.
fn composite(c: &[Candidate], out: &mut [f64]) {
    let max_q = c.iter().map(|x| x.waiting).max().unwrap_or(0);
    for (o, x) in out.iter_mut().zip(c) {
        let queue = if max_q == 0 { 1.0 } else { (max_q - x.waiting) as f64 / max_q as f64 };
        let v = ((1.0 - x.kv) + queue + x.prefix) / 3.0;
        *o = (100.0 * v).round() / 100.0;
    }
}

/// The weighted-random picker: the index in `scores` that wins the A-Res draw.
pub fn pick(scores: &[f64], rng: &mut impl Rng) -> usize {
    if scores.iter().all(|&s| s <= 0.0) {
        return rng.random_range(0..scores.len().max(1));
    }
    let mut best = (0, -1.0f64);
    for (i, &s) in scores.iter().enumerate() {
        let u: f64 = rng.random();
        let key = if s > 0.0 { u.powf(1.0 / s) } else { 0.0 };
        if key > best.1 {
            best = (i, key);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn cand(instance: usize, prefix: f64, ttft_ms: f64, slo: f64) -> Candidate {
        Candidate {
            instance,
            prefix,
            kv: 0.0,
            waiting: 0,
            dispatched: 1,
            ttft_ms: Some(ttft_ms),
            ttft_headroom: slo - ttft_ms,
            tpot_headroom: 0.0,
        }
    }

    /// Headrooms 100, 300, 500 ms under `least`: normalised 0, 0.5, 1 → scores 1.01, 0.51,
    /// 0.01; under `most` 0.01, 0.51, 1.01. A negative candidate scores 0 while one is positive.
    #[test]
    fn least_headroom_scores_highest() {
        let c = [
            cand(0, 0.0, 400.0, 500.0),
            cand(1, 0.0, 200.0, 500.0),
            cand(2, 0.0, 0.0, 500.0),
            cand(3, 0.0, 900.0, 500.0),
        ];
        let mut s = Vec::new();
        score(&c, Strategy::Least, &mut s);
        assert_eq!(s, [1.01, 0.51, 0.01, 0.0]);
        score(&c, Strategy::Most, &mut s);
        assert_eq!(s, [0.01, 0.51, 1.01, 0.0]);
    }

    /// All negative: the idle candidate alone is scored; with none idle, the smallest deficit
    /// wins.
    #[test]
    fn all_negative_prefers_idle_then_the_smallest_deficit() {
        let mut c = [cand(0, 0.0, 600.0, 500.0), cand(1, 0.0, 900.0, 500.0)];
        c[1].dispatched = 0;
        let mut s = Vec::new();
        score(&c, Strategy::Least, &mut s);
        assert_eq!(s, [0.0, 0.51], "only the idle one, alone in its bucket");
        c[1].dispatched = 3;
        score(&c, Strategy::Least, &mut s);
        assert_eq!(s, [1.01, 0.01], "deficit 100 against 400");
    }

    /// The tier filter keeps the positive tier but one time in a hundred; the affinity filter
    /// keeps the sticky ones unless their TTFT is 5 s worse.
    #[test]
    fn filters_narrow_as_upstream() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut negative_kept = 0;
        for _ in 0..10_000 {
            let mut c = vec![cand(0, 0.0, 100.0, 500.0), cand(1, 0.0, 900.0, 500.0)];
            tiers(&mut c, &mut rng);
            assert_eq!(c.len(), 1);
            negative_kept += usize::from(c[0].instance == 1);
        }
        assert!((50..=150).contains(&negative_kept), "about 1 %: {negative_kept}");
        let mut c = vec![cand(0, 1.0, 100.0, 500.0), cand(1, 0.0, 50.0, 500.0)];
        let mut narrowed = 0;
        for _ in 0..1000 {
            let mut d = c.clone();
            narrowed += usize::from(affinity(&mut d, STRICT_AFFINITY, &mut rng));
        }
        assert!((970..=1000).contains(&narrowed), "{narrowed}");
        c[0].ttft_ms = Some(6000.0);
        assert!(!affinity(&mut c, STRICT_AFFINITY, &mut rng) && c.len() == 2, "the sticky one is 5.95 s slower");
    }

    /// The picker follows the scores' weights: 0.75 against 0.25 wins three times in four.
    #[test]
    fn the_picker_is_weighted() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let wins = (0..20_000).filter(|_| pick(&[0.75, 0.25], &mut rng) == 0).count();
        assert!((14_600..=15_400).contains(&wins), "{wins}");
        assert_eq!(pick(&[0.0, 0.5], &mut rng), 1);
    }
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever the candidates: the filters never empty the set and keep its order, every
        /// score lies in [0, 1.01] with at least one above 0 (a scored set is never empty), and
        /// the pick is a candidate.
        #[test]
        fn filters_scores_and_pick_stay_in_bounds(
            rows in proptest::collection::vec(
                (0.0f64..=1.0, 0.0f64..=1.0, 0u32..20, 0u32..4, proptest::option::of(0.0f64..5000.0), -1000.0f64..1000.0),
                1..12,
            ),
            slo in 0.0f64..3000.0,
            strategy in proptest::prop_oneof![proptest::strategy::Just(Strategy::Least), proptest::strategy::Just(Strategy::Most)],
            seed in 0u64..1000,
        ) {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let all_predicted = rows.iter().all(|r| r.4.is_some());
            let mut c: Vec<Candidate> = rows
                .iter()
                .enumerate()
                .map(|(i, &(prefix, kv, waiting, dispatched, ttft, tpot_h))| Candidate {
                    instance: i,
                    prefix,
                    kv,
                    waiting,
                    dispatched,
                    // Predictions come for every candidate or for none.
                    ttft_ms: if all_predicted { ttft } else { None },
                    ttft_headroom: if all_predicted { slo - ttft.unwrap_or(0.0) } else { 0.0 },
                    tpot_headroom: if all_predicted { tpot_h } else { 0.0 },
                })
                .collect();
            let n = c.len();
            affinity(&mut c, STRICT_AFFINITY, &mut rng);
            tiers(&mut c, &mut rng);
            affinity(&mut c, LOOSE_AFFINITY, &mut rng);
            proptest::prop_assert!(!c.is_empty() && c.len() <= n);
            proptest::prop_assert!(c.windows(2).all(|w| w[0].instance < w[1].instance));
            let mut s = Vec::new();
            score(&c, strategy, &mut s);
            proptest::prop_assert_eq!(s.len(), c.len());
            proptest::prop_assert!(s.iter().all(|&x| (0.0..=1.01 + 1e-12).contains(&x)), "{:?}", s);
            proptest::prop_assert!(s.iter().any(|&x| x > 0.0) || !all_predicted, "{:?}", s);
            proptest::prop_assert!(pick(&s, &mut rng) < c.len());
        }
    }
}
