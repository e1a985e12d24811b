//! llm-d's latency predictor, the training and prediction servers behind the
//! `predicted-latency-producer` (llm-d/llm-d-latency-predictor, read at b5d19f1, the commit
//! before v0.9.0: v0.9.0's `train()` calls a helper that is not a method of its class and never
//! trains; `training/training_server.py` `LatencyPredictor`, `prediction/prediction_server.py`
//! `LightweightPredictor`), with `LATENCY_MODEL_TYPE=bayesian_ridge` ([`super::bayes_ridge`];
//! upstream's default model is XGBoost, which this does not reproduce).
//!
//! - **Features** (`_prepare_features_with_interaction`): TTFT reads `is_queued` (waiting > 0),
//!   `kv_cache_percentage`, `input_token_length`, `num_request_waiting`, `num_request_running`,
//!   `prefill_tokens_in_flight`, `prefix_cache_score` and `effective_input_tokens` = (1 −
//!   prefix) × input; TPOT the first six and `num_tokens_generated` (0 in training,
//!   `LATENCY_TPOT_ZERO_TOKEN_COUNT`; 1 when predicting). The columns upstream also has are 0
//!   or constant here (`decode_tokens_in_flight`, the encoder sizes, the pod-type dummies): they
//!   change nothing once standardised, and only count towards the design's width.
//! - **Training data** (`add_training_sample`): 5 queue × 20 KV × 4 prefix buckets, each a FIFO
//!   of `LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET` = 500 samples; a sample whose whole
//!   milliseconds are 0 is not kept; one in ten goes to the test set (`LATENCY_TEST_TRAIN_RATIO`
//!   0.1, a salted hash upstream, a seeded draw here) and is not trained on.
//! - **Schedule**: the EPP flushes samples every second (`LATENCY_FLUSH_INTERVAL_SEC`); the
//!   trainer starts 10 s in and retrains every `LATENCY_RETRAINING_INTERVAL_SEC` (the llm-d
//!   chart: 10) once it holds `LATENCY_MIN_SAMPLES_FOR_RETRAIN` samples (10 for a server
//!   started without a model, as a fresh deployment is); the prediction server loads the newest
//!   model every `MODEL_SYNC_INTERVAL_SEC` (chart: 30). Before the first model, every
//!   prediction is the default model's 10 ms.
//! - **Queue-gated ensemble** (`LATENCY_ENSEMBLE_MODE`, on): once each of the four splits
//!   (TTFT and TPOT, endpoints with and without a waiting queue) has 200 samples, an endpoint
//!   with no waiting request is predicted by the model trained on such samples alone.
//! - **Objective**: `mean` (the chart's `LATENCY_OBJECTIVE_TYPE`) or `quantile`, the predictive
//!   mean + z₀.₉ × its standard deviation (`LATENCY_QUANTILE_ALPHA` 0.9); never below 0.

use super::bayes_ridge::{fit, Fit, Sums};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::VecDeque;

/// `LATENCY_OBJECTIVE_TYPE` (`--latency-objective`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// The predictive mean (llm-d's chart).
    #[default]
    Mean,
    /// The 90th percentile: mean + 1.2816 standard deviations (the servers' code default).
    Quantile,
}

/// The predictor's schedule and objective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelOptions {
    pub objective: Objective,
    /// Seconds between two trainings.
    pub retrain_s: f64,
    /// Seconds between two model loads of the prediction server.
    pub sync_s: f64,
    /// Samples before a model is trained.
    pub min_samples: u64,
    pub seed: u64,
}

/// What a sample or a prediction reads of one endpoint and one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Features {
    /// `kv_cache_percentage`, 0..1.
    pub kv: f64,
    /// `input_token_length`.
    pub input: f64,
    pub waiting: u32,
    pub running: u32,
    /// `prefill_tokens_in_flight`.
    pub in_flight: f64,
    /// `prefix_cache_score`, 0..1.
    pub prefix: f64,
}

/// The before-training prediction (`_create_default_model`'s target), ms.
pub const DEFAULT_MS: f64 = 10.0;
/// The trainer's first training, seconds after the start.
const FIRST_TRAINING_S: f64 = 10.0;
/// `LATENCY_FLUSH_INTERVAL_SEC`.
const FLUSH_S: f64 = 1.0;
/// `LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET`.
const PER_BUCKET: usize = 500;
/// `LATENCY_MIN_SAMPLES_FOR_ENSEMBLE_SPLIT`.
const ENSEMBLE_SPLIT: u64 = 200;
/// `LATENCY_TEST_TRAIN_RATIO`.
const TEST_SHARE: f64 = 0.1;
/// `norm.ppf(0.9)`.
const Z90: f64 = 1.281_551_565_544_600_4;

/// TTFT or TPOT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Ttft,
    Tpot,
}

impl Target {
    /// Columns kept, and upstream's design width (with and without the queue columns the
    /// no-queue model drops).
    fn columns(self) -> (usize, usize, usize) {
        match self {
            Target::Ttft => (8, 14, 12),
            Target::Tpot => (7, 11, 9),
        }
    }

    fn row(self, f: &Features, predicting: bool) -> [f64; 8] {
        let queued = if f.waiting > 0 { 1.0 } else { 0.0 };
        let head = [queued, f.kv, f.input, f.waiting as f64, f.running as f64, f.in_flight];
        match self {
            Target::Ttft => {
                let [a, b, c, d, e, g] = head;
                [a, b, c, d, e, g, f.prefix, (1.0 - f.prefix) * f.input]
            }
            Target::Tpot => {
                let [a, b, c, d, e, g] = head;
                [a, b, c, d, e, g, if predicting { 1.0 } else { 0.0 }, 0.0]
            }
        }
    }
}

/// The bucket of a sample (`_get_bucket_key`).
fn bucket(f: &Features) -> usize {
    let q = match f.waiting {
        0 => 0,
        1..=2 => 1,
        3..=5 => 2,
        6..=10 => 3,
        _ => 4,
    };
    let kv = ((f.kv.clamp(0.0, 1.0) * 20.0) as usize).min(19);
    let prefix = ((f.prefix.clamp(0.0, 1.0) * 4.0) as usize).min(3);
    (q * 20 + kv) * 4 + prefix
}

/// One target's training set.
#[derive(Debug, Clone)]
struct Store {
    target: Target,
    buckets: Vec<VecDeque<([f64; 8], f64)>>,
    /// Sums of the samples without (`[0]`) and with (`[1]`) a waiting queue.
    sums: [Sums; 2],
}

/// One target's models.
#[derive(Debug, Clone)]
struct Trained {
    single: Fit,
    /// The no-queue and queued models, once every split is large enough.
    gated: Option<(Fit, Fit)>,
}

impl Store {
    fn new(target: Target) -> Self {
        let p = target.columns().0;
        Store { target, buckets: vec![VecDeque::new(); 400], sums: [Sums::new(p), Sums::new(p)] }
    }

    fn add(&mut self, f: &Features, value: f64) {
        let p = self.target.columns().0;
        let row = self.target.row(f, false);
        let b = bucket(f);
        let d = &mut self.buckets[b];
        let split = usize::from(b >= 80);
        if d.len() == PER_BUCKET {
            if let Some((old, y)) = d.pop_front() {
                self.sums[split].update(&old[..p], y, -1.0);
            }
        }
        d.push_back((row, value));
        self.sums[split].update(&row[..p], value, 1.0);
    }

    fn count(&self) -> u64 {
        self.sums[0].count() + self.sums[1].count()
    }

    /// The splits' sizes (no queue, queued).
    fn splits(&self) -> (u64, u64) {
        (self.sums[0].count(), self.sums[1].count())
    }

    fn train(&self, ensemble: bool) -> Option<Trained> {
        let (_, full, noqueue) = self.target.columns();
        let single = fit(&self.sums[0].merged(&self.sums[1]), full)?;
        let gated = if ensemble { fit(&self.sums[0], noqueue).zip(fit(&self.sums[1], full)) } else { None };
        Some(Trained { single, gated })
    }
}

/// A sample on its way to the trainer.
#[derive(Debug, Clone, Copy)]
struct Pending {
    flush_s: f64,
    target: Target,
    features: Features,
    value: f64,
}

/// The predictor: its training data, the model the trainer last fitted and the one the
/// prediction server serves.
#[derive(Debug, Clone)]
pub struct Predictor {
    opts: ModelOptions,
    rng: rand::rngs::StdRng,
    pending: VecDeque<Pending>,
    ttft: Store,
    tpot: Store,
    /// The trainer's newest models (TTFT, TPOT) and the training time they come from.
    trained: (Option<Trained>, Option<Trained>),
    trained_at: f64,
    /// The prediction server's models and its last load.
    served: (Option<Trained>, Option<Trained>),
    synced_at: f64,
}

impl Predictor {
    pub fn new(opts: ModelOptions) -> Self {
        Predictor {
            opts,
            rng: rand::rngs::StdRng::seed_from_u64(opts.seed ^ 0x6c61_7465_6e63_7921),
            pending: VecDeque::new(),
            ttft: Store::new(Target::Ttft),
            tpot: Store::new(Target::Tpot),
            trained: (None, None),
            trained_at: f64::NEG_INFINITY,
            served: (None, None),
            synced_at: f64::NEG_INFINITY,
        }
    }

    /// A TTFT sample of `ms` (whole milliseconds upstream) observed at `now`.
    pub fn record_ttft(&mut self, now: f64, features: Features, ms: f64) {
        self.record(now, Target::Ttft, features, ms.floor());
    }

    /// A TPOT sample (the request's mean time per output token after the first), ms.
    pub fn record_tpot(&mut self, now: f64, features: Features, ms: f64) {
        self.record(now, Target::Tpot, features, ms);
    }

    fn record(&mut self, now: f64, target: Target, features: Features, value: f64) {
        if value > 0.0 {
            // In flush order (samples come in time order; kept so for any caller).
            let flush_s = (now / FLUSH_S).ceil() * FLUSH_S;
            let at = self.pending.partition_point(|p| p.flush_s <= flush_s);
            self.pending.insert(at, Pending { flush_s, target, features, value });
        }
    }

    /// Brings the served models up to `now`: the prediction server's last load before it serves
    /// what the trainer fitted at its last training before that load, from the samples flushed
    /// by then. Trainings between two loads leave no trace: samples only accumulate, so the
    /// last one is the one served.
    pub fn advance(&mut self, now: f64) {
        let sync = (now / self.opts.sync_s).floor() * self.opts.sync_s;
        if sync <= self.synced_at {
            return;
        }
        self.synced_at = sync;
        if sync < FIRST_TRAINING_S {
            return;
        }
        let train = FIRST_TRAINING_S + ((sync - FIRST_TRAINING_S) / self.opts.retrain_s).floor() * self.opts.retrain_s;
        if train > self.trained_at {
            self.trained_at = train;
            while self.pending.front().is_some_and(|p| p.flush_s <= train) {
                let Some(p) = self.pending.pop_front() else { break };
                if self.rng.random::<f64>() < TEST_SHARE {
                    continue; // the test set
                }
                match p.target {
                    Target::Ttft => self.ttft.add(&p.features, p.value),
                    Target::Tpot => self.tpot.add(&p.features, p.value),
                }
            }
            self.train();
        }
        self.served = self.trained.clone();
    }

    fn train(&mut self) {
        let min = self.opts.min_samples;
        if self.ttft.count() + self.tpot.count() < min {
            return;
        }
        let (a, b) = self.ttft.splits();
        let (c, d) = self.tpot.splits();
        let ensemble = [a, b, c, d].iter().all(|&k| k >= ENSEMBLE_SPLIT);
        if self.ttft.count() >= min {
            self.trained.0 = self.ttft.train(ensemble).or(self.trained.0.take());
        }
        if self.tpot.count() >= min {
            self.trained.1 = self.tpot.train(ensemble).or(self.trained.1.take());
        }
    }

    /// The served model's TTFT for `f`, ms.
    pub fn ttft(&self, f: &Features) -> f64 {
        self.predict(self.served.0.as_ref(), Target::Ttft, f)
    }

    /// The served model's TPOT for `f`, ms.
    pub fn tpot(&self, f: &Features) -> f64 {
        self.predict(self.served.1.as_ref(), Target::Tpot, f)
    }

    fn predict(&self, model: Option<&Trained>, target: Target, f: &Features) -> f64 {
        let Some(m) = model else { return DEFAULT_MS };
        let fit = match &m.gated {
            Some((noqueue, queued)) => {
                if f.waiting == 0 {
                    noqueue
                } else {
                    queued
                }
            }
            None => &m.single,
        };
        let (mean, sd) = fit.predict(&target.row(f, true)[..target.columns().0]);
        let v = match self.opts.objective {
            Objective::Mean => mean,
            Objective::Quantile => mean + Z90 * sd,
        };
        v.max(0.0)
    }

    /// Samples held for training (TTFT, TPOT).
    pub fn samples(&self) -> (u64, u64) {
        (self.ttft.count(), self.tpot.count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ModelOptions {
        ModelOptions { objective: Objective::Mean, retrain_s: 10.0, sync_s: 30.0, min_samples: 10, seed: 1 }
    }

    fn features(input: f64, waiting: u32) -> Features {
        Features { kv: 0.1, input, waiting, running: 2, in_flight: input, prefix: 0.0 }
    }

    /// Samples of TTFT = 5 ms per 100 input tokens: nothing is learnt before the first load
    /// after a training (10 ms until then); the load at 30 s serves the training at 30 s.
    #[test]
    fn the_model_arrives_at_the_first_load_after_a_training() {
        let mut p = Predictor::new(opts());
        for k in 0..200 {
            let input = 100.0 + (k % 20) as f64 * 100.0;
            p.record_ttft(0.1 * k as f64, features(input, 0), input / 20.0);
        }
        p.advance(29.9);
        assert_eq!(p.ttft(&features(1000.0, 0)), DEFAULT_MS, "no load since the start");
        p.advance(30.0);
        let m = p.ttft(&features(1000.0, 0));
        assert!((m - 50.0).abs() < 0.5, "{m}");
        assert_eq!(p.tpot(&features(1000.0, 0)), DEFAULT_MS, "no TPOT sample yet");
        let (ttft, tpot) = p.samples();
        assert!(ttft > 150 && ttft < 200 && tpot == 0, "one in ten is held out: {ttft}");
    }

    /// Fewer samples than the minimum: no model; and one bucket keeps its newest 500.
    #[test]
    fn minimum_and_bucket_bounds() {
        let mut p = Predictor::new(ModelOptions { min_samples: 1000, ..opts() });
        for k in 0..800 {
            p.record_ttft(0.0, features(100.0, 0), 7.0 + k as f64);
        }
        p.advance(30.0);
        assert_eq!(p.ttft(&features(100.0, 0)), DEFAULT_MS);
        assert_eq!(p.samples().0, 500, "one bucket holds 500");
        // The newest 500 of the values kept: their mean.
        let mut q = Predictor::new(opts());
        for k in 0..800 {
            q.record_ttft(0.0, features(100.0, 0), 7.0 + k as f64);
        }
        q.advance(30.0);
        let m = q.ttft(&features(100.0, 0));
        assert!(m > 400.0 && m < 660.0, "the oldest samples were dropped: {m}");
    }

    /// Sub-millisecond TTFTs are whole 0 ms and kept by nobody; the quantile objective is above
    /// the mean on noisy data.
    #[test]
    fn zero_millisecond_samples_are_dropped_and_the_quantile_is_higher() {
        let mut p = Predictor::new(opts());
        p.record_ttft(0.0, features(1.0, 0), 0.7);
        assert!(p.pending.is_empty());
        let mut q = Predictor::new(ModelOptions { objective: Objective::Quantile, ..opts() });
        for k in 0..300 {
            let v = 50.0 + if k % 2 == 0 { 10.0 } else { -10.0 };
            p.record_ttft(0.0, features(100.0 + (k % 3) as f64, 0), v);
            q.record_ttft(0.0, features(100.0 + (k % 3) as f64, 0), v);
        }
        p.advance(30.0);
        q.advance(30.0);
        let (m, h) = (p.ttft(&features(101.0, 0)), q.ttft(&features(101.0, 0)));
        assert!((m - 50.0).abs() < 2.0 && h > m + 5.0, "{m} {h}");
    }
}
