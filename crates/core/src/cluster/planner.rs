//! NVIDIA Dynamo's SLA planner (`--autoscale sla`): every throughput adjustment interval it
//! reads the frontend's traffic of the interval just ended, predicts the next interval's request
//! count and mean input and output lengths, asks a performance model how many requests per
//! second one engine sustains within the TTFT and ITL targets, and sets
//! `max(ceil(demand / engine rps), min_endpoint)` replicas within the GPU budget — one pool in
//! aggregated mode, the prefill pool (its TTFT target) and the decode pool (its ITL target) apart
//! in disaggregated mode.
//!
//! Upstream (`ai-dynamo/dynamo`, 1.5.0-dev of 2026-08-21, `components/src/dynamo/planner/`):
//! - the tick: `core/state_machine.py` `advance_throughput_from_prediction` (demand = predicted
//!   requests ÷ interval), `core/throughput_scaling.py` `_throughput_agg` and
//!   `_throughput_disagg`, `core/budget.py` `proportional_clamp_single` and
//!   `proportional_clamp_pair`;
//! - the observations: `monitoring/traffic_metrics.py` (requests started in the window; mean
//!   ISL, OSL, TTFT, ITL as `increase(_sum) / increase(_count)`), `Metrics.normalize_idle_nans`
//!   and `is_valid` (an idle window counts as zeros; one with arrivals but a NaN mean is
//!   skipped), `plugins/builtins/local_planner.py` `_observe_load` (an idle window after live
//!   traffic carries the last lengths forward);
//! - the predictors: `core/load/predictors.py` (`BasePredictor` skips zeros until the first
//!   non-zero value; `ConstantPredictor`; `KalmanPredictor`, filterpy's filter on a local
//!   linear trend);
//! - the capacity search: `core/perf_model/engine_query.py` `_find_aggregated_capacity`,
//!   `_find_prefill_capacity`, `_find_decode_capacity` with
//!   `_capacity_batch_sizes`, `_prefill_decode_balanced`, `_aggregate_prefill_per_iteration`,
//!   `_prefill_chunk_time`, `_select_capacity` (throughput target), and the request shape of
//!   `core/perf_model/aic_adapter.py` `find_engine_capacity_rps` (ISL rounded up, OSL at least 1).
//!
//! Where Dynamo asks AIConfigurator's forward-pass model (fitted on the workers' own forward
//! passes) for a step's time, cachesim asks the deployment's step-time model: the planner's
//! capacity is what the simulated engine does. ARIMA (upstream's default predictor) and Prophet
//! fit their models with `pmdarima` and Stan and are not reproduced; Kalman is the default here.
//! The KV hit rate the prefill and aggregated capacity searches discount prompts by
//! (`_effective_prefill_isl`: `ceil(ISL × (1 − min(rate, 0.95)))`) is the mean over the window of
//! Dynamo's KV router's per-request `dynamo_component_router_kv_hit_rate`, the overlap blocks it
//! found over the prompt's blocks (`lib/llm/src/kv_router/push_router.rs`); the planner keeps the
//! last observed value (`local_planner.py` `_observe_traffic`). Only Dynamo's router
//! (`--router kv-aware`) reports it; under the others the prompts are not discounted.

use crate::cost::{BatchShape, CostModel};
use crate::error::{Error, Result};
use serde::Serialize;

/// Upstream's predictors (`--load-predictor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum LoadPredictor {
    /// The last observed value.
    Constant,
    /// A Kalman filter on a local linear trend (level and trend).
    #[default]
    Kalman,
    /// Auto-ARIMA (`pmdarima`): upstream's default, not modelled.
    Arima,
    /// Meta's Prophet: not modelled.
    Prophet,
}

impl LoadPredictor {
    /// The name `--load-predictor` takes.
    pub fn name(self) -> &'static str {
        match self {
            LoadPredictor::Constant => "constant",
            LoadPredictor::Kalman => "kalman",
            LoadPredictor::Arima => "arima",
            LoadPredictor::Prophet => "prophet",
        }
    }
}

/// `throughput_adjustment_interval_seconds` (`config/defaults.py`).
pub const DEFAULT_INTERVAL_S: f64 = 180.0;
/// `ttft_ms`, `itl_ms`.
pub const DEFAULT_TTFT_MS: f64 = 500.0;
pub const DEFAULT_ITL_MS: f64 = 50.0;
/// `max_gpu_budget`, `min_endpoint`.
pub const DEFAULT_MAX_GPU_BUDGET: u32 = 8;
pub const DEFAULT_MIN_ENDPOINT: u32 = 1;
/// `kalman_q_level`, `kalman_q_trend`, `kalman_r`, `kalman_min_points`.
const KALMAN_Q_LEVEL: f64 = 1.0;
const KALMAN_Q_TREND: f64 = 0.1;
const KALMAN_R: f64 = 10.0;
const KALMAN_MIN_POINTS: usize = 5;
/// `MAX_CAPACITY_SEARCH_CANDIDATES` (`engine_query.py`).
const MAX_CANDIDATES: u32 = 128;

/// The planner's flags as given (Dynamo's names).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SlaOptions {
    /// `--throughput-adjustment-interval` (seconds).
    pub interval_s: Option<f64>,
    /// `--ttft`, `--itl` (ms).
    pub ttft_ms: Option<f64>,
    pub itl_ms: Option<f64>,
    /// `--load-predictor`.
    pub predictor: Option<LoadPredictor>,
    /// `--max-gpu-budget`, `--min-endpoint`.
    pub max_gpu_budget: Option<u32>,
    pub min_endpoint: Option<u32>,
}

impl SlaOptions {
    /// Whether any planner flag was given.
    pub fn any(&self) -> bool {
        *self != SlaOptions::default()
    }

    /// The first planner flag given, for a message.
    pub fn first_flag(&self) -> Option<&'static str> {
        [
            (self.interval_s.is_some(), "--throughput-adjustment-interval"),
            (self.ttft_ms.is_some(), "--ttft"),
            (self.itl_ms.is_some(), "--itl"),
            (self.predictor.is_some(), "--load-predictor"),
            (self.max_gpu_budget.is_some(), "--max-gpu-budget"),
            (self.min_endpoint.is_some(), "--min-endpoint"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }

    /// The plan of a fleet whose instances hold `gpus` GPUs each, checked; `pools`: the prefill
    /// and decode instances at the start of a disaggregated deployment.
    pub fn plan(&self, gpus: u32, pools: Option<(u32, u32)>) -> Result<SlaPlan> {
        let positive = |flag: &'static str, v: f64, max: f64| {
            if v.is_finite() && v > 0.0 && v <= max {
                Ok(v)
            } else {
                Err(Error::invalid(flag, format!("{v} must be above 0 and at most {max}")))
            }
        };
        let interval_s =
            positive("--throughput-adjustment-interval", self.interval_s.unwrap_or(DEFAULT_INTERVAL_S), 86_400.0)?;
        if interval_s < super::MIN_DECISION_PERIOD_S {
            return Err(Error::invalid(
                "--throughput-adjustment-interval",
                format!(
                    "{interval_s} is below {} s: the planner keeps one record per adjustment, and Prometheus scrapes \
                     the frontend every few seconds",
                    super::MIN_DECISION_PERIOD_S
                ),
            ));
        }
        let ttft_s = positive("--ttft", self.ttft_ms.unwrap_or(DEFAULT_TTFT_MS), 3.6e6)? / 1e3;
        let itl_s = positive("--itl", self.itl_ms.unwrap_or(DEFAULT_ITL_MS), 3.6e6)? / 1e3;
        let predictor = self.predictor.unwrap_or_default();
        if matches!(predictor, LoadPredictor::Arima | LoadPredictor::Prophet) {
            return Err(Error::invalid(
                "--load-predictor",
                format!(
                    "{} fits its model with {} at every interval, which cachesim does not reproduce: use kalman (the \
                     default here) or constant",
                    predictor.name(),
                    if predictor == LoadPredictor::Arima { "pmdarima's auto_arima" } else { "Prophet (Stan)" }
                ),
            ));
        }
        let min_endpoint = self.min_endpoint.unwrap_or(DEFAULT_MIN_ENDPOINT);
        if min_endpoint == 0 {
            return Err(Error::invalid(
                "--min-endpoint",
                "0 is scaling to zero, which cachesim does not model (a fleet keeps one instance serving); give at \
                 least 1",
            ));
        }
        let budget = self.max_gpu_budget.unwrap_or(DEFAULT_MAX_GPU_BUDGET);
        let gpus = gpus.max(1);
        let max_instances = budget / gpus;
        let need = if pools.is_some() { 2 * min_endpoint } else { min_endpoint };
        if max_instances < need {
            return Err(Error::invalid(
                "--max-gpu-budget",
                format!(
                    "{budget} GPUs hold {max_instances} instances of {gpus} GPUs, fewer than {need} (--min-endpoint \
                     {min_endpoint}{}): the planner would set 0 replicas",
                    if pools.is_some() { " in each pool" } else { "" }
                ),
            ));
        }
        // `proportional_clamp_pair` leaves each pool at least min_endpoint: the other pool may
        // take the rest of the budget.
        let pools = pools.map(|(prefill, decode)| PdPools {
            prefill,
            decode,
            max_prefill: max_instances - min_endpoint,
            max_decode: max_instances - min_endpoint,
        });
        Ok(SlaPlan {
            interval_s,
            ttft_s,
            itl_s,
            predictor,
            max_gpu_budget: budget,
            min_endpoint,
            max_instances,
            pools,
            router_kv_hit_rate: false,
        })
    }
}

/// The SLA planner of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SlaPlan {
    pub interval_s: f64,
    pub ttft_s: f64,
    pub itl_s: f64,
    pub predictor: LoadPredictor,
    pub max_gpu_budget: u32,
    pub min_endpoint: u32,
    /// The most instances the budget holds (both pools together when disaggregated).
    pub max_instances: u32,
    /// A disaggregated deployment's pools; `None`: aggregated.
    pub pools: Option<PdPools>,
    /// The router is Dynamo's KV router, which reports the KV hit rate the capacity search
    /// discounts prompts by (set by the configuration).
    pub router_kv_hit_rate: bool,
}

/// The prefill and decode pools the planner sizes apart: their instances at the start and the
/// most each may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PdPools {
    pub prefill: u32,
    pub decode: u32,
    pub max_prefill: u32,
    pub max_decode: u32,
}

/// One of upstream's predictors, with `BasePredictor`'s idle skip.
#[derive(Debug, Clone)]
pub struct Predictor {
    kind: LoadPredictor,
    /// Values kept (after the leading zeros).
    points: usize,
    last: f64,
    seen_nonzero: bool,
    kalman: Kalman,
}

impl Predictor {
    pub fn new(kind: LoadPredictor) -> Self {
        Predictor { kind, points: 0, last: 0.0, seen_nonzero: false, kalman: Kalman::new() }
    }

    /// `add_data_point`: NaN counts as 0; zeros before the first non-zero value are dropped.
    pub fn add(&mut self, value: f64) {
        let value = if value.is_nan() { 0.0 } else { value };
        if value == 0.0 && !self.seen_nonzero {
            return;
        }
        if value != 0.0 {
            self.seen_nonzero = true;
        }
        self.points += 1;
        self.last = value;
        if self.kind == LoadPredictor::Kalman {
            self.kalman.observe(value);
        }
    }

    /// `predict_next`.
    pub fn predict(&mut self) -> f64 {
        match self.kind {
            LoadPredictor::Kalman if self.points >= KALMAN_MIN_POINTS => self.kalman.forecast(),
            _ => self.last,
        }
    }
}

/// filterpy's `KalmanFilter(dim_x=2, dim_z=1)` as `KalmanPredictor` sets it up: F = [[1, 1],
/// [0, 1]], H = [1, 0], P = 1000 I, R = 10, Q = diag(1, 0.1); the first value sets the level;
/// later ones predict (unless a forecast already did) and update (Joseph form, as filterpy).
#[derive(Debug, Clone)]
struct Kalman {
    x: [f64; 2],
    p: [[f64; 2]; 2],
    initialized: bool,
    /// A forecast made since the last value: the filter has already predicted.
    cached: Option<f64>,
}

impl Kalman {
    fn new() -> Self {
        Kalman { x: [0.0; 2], p: [[1000.0, 0.0], [0.0, 1000.0]], initialized: false, cached: None }
    }

    fn step(&mut self) {
        let [l, t] = self.x;
        self.x = [l + t, t];
        let p = self.p;
        // F P Fᵀ + Q with F = [[1, 1], [0, 1]].
        let a = p[0][0] + p[0][1] + p[1][0] + p[1][1];
        let b = p[0][1] + p[1][1];
        let c = p[1][0] + p[1][1];
        let d = p[1][1];
        self.p = [[a + KALMAN_Q_LEVEL, b], [c, d + KALMAN_Q_TREND]];
    }

    fn observe(&mut self, z: f64) {
        if !self.initialized {
            self.x = [z, 0.0];
            self.initialized = true;
        } else {
            if self.cached.is_none() {
                self.step();
            }
            let p = self.p;
            let s = p[0][0] + KALMAN_R;
            let k = [p[0][0] / s, p[1][0] / s];
            let y = z - self.x[0];
            self.x = [self.x[0] + k[0] * y, self.x[1] + k[1] * y];
            // Joseph form: (I − K H) P (I − K H)ᵀ + K R Kᵀ, with I − K H = [[1 − k0, 0], [−k1, 1]].
            let m = [[1.0 - k[0], 0.0], [-k[1], 1.0]];
            let mp = mul(m, p);
            let mt = [[m[0][0], m[1][0]], [m[0][1], m[1][1]]];
            let mpm = mul(mp, mt);
            self.p = [
                [mpm[0][0] + k[0] * KALMAN_R * k[0], mpm[0][1] + k[0] * KALMAN_R * k[1]],
                [mpm[1][0] + k[1] * KALMAN_R * k[0], mpm[1][1] + k[1] * KALMAN_R * k[1]],
            ];
        }
        self.cached = None;
    }

    fn forecast(&mut self) -> f64 {
        if let Some(v) = self.cached {
            return v;
        }
        self.step();
        let v = self.x[0];
        self.cached = Some(v);
        v
    }
}

fn mul(a: [[f64; 2]; 2], b: [[f64; 2]; 2]) -> [[f64; 2]; 2] {
    let e = |i: usize, j: usize| a[i][0] * b[0][j] + a[i][1] * b[1][j];
    [[e(0, 0), e(0, 1)], [e(1, 0), e(1, 1)]]
}

/// The engine limits the capacity search works within.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub max_kv_tokens: u64,
}

/// What the planner prices an engine with: the deployment's step-time model, whether the
/// engine overlaps host work, and its limits.
#[derive(Clone, Copy)]
pub struct EngineModel<'a> {
    pub cost: &'a dyn CostModel,
    pub overlap: bool,
    pub limits: Limits,
}

impl EngineModel<'_> {
    /// One step's seconds: `prefill` new tokens (one request, no context) beside `decodes`
    /// sequences of `ctx` tokens each.
    fn step(&self, prefill: u64, decodes: u32, ctx: u64) -> f64 {
        let mut s = BatchShape::within(self.cost.local_window());
        if prefill > 0 {
            s.add(0, prefill);
        }
        for _ in 0..decodes {
            s.add(ctx, 1);
        }
        self.cost.step_time(&s, self.overlap)
    }

    /// `_prefill_chunk_time`: `tokens` in chunks of max-num-batched-tokens (full ones, then the
    /// tail), each beside `decodes` sequences of `ctx` tokens.
    fn chunked(&self, tokens: u64, decodes: u32, ctx: u64) -> f64 {
        let chunk = self.limits.max_num_batched_tokens as u64;
        let (full, tail) = (tokens / chunk, tokens % chunk);
        let mut t = 0.0;
        if full > 0 {
            t += self.step(chunk, decodes, ctx) * full as f64;
        }
        if tail > 0 {
            t += self.step(tail, decodes, ctx);
        }
        t
    }
}

/// The engines a deployment's planner prices.
#[derive(Clone, Copy)]
pub enum Engines<'a> {
    Agg(EngineModel<'a>),
    /// The prefill and the decode instances'.
    Disagg(EngineModel<'a>, EngineModel<'a>),
}

/// One engine's sustainable rate for a request shape (`EngineCapacity`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    pub rps: f64,
    pub ttft_s: f64,
    pub itl_s: f64,
    /// Within both targets.
    pub eligible: bool,
}

/// `_capacity_batch_sizes`: every size up to 128, else 128 spread evenly from 1 to `max`.
fn batch_sizes(max: u32) -> impl Iterator<Item = u32> {
    let n = max.min(MAX_CANDIDATES);
    (0..n).map(move |k| if max <= MAX_CANDIDATES { k + 1 } else { 1 + (k as u64 * (max as u64 - 1) / 127) as u32 })
}

/// `_select_capacity` with the throughput target: within the targets beats outside them, then
/// the higher rate.
fn better(best: Option<Capacity>, c: Capacity) -> Capacity {
    match best {
        None => c,
        Some(cur) if cur.eligible != c.eligible => {
            if c.eligible {
                c
            } else {
                cur
            }
        }
        Some(cur) => {
            if c.rps > cur.rps {
                c
            } else {
                cur
            }
        }
    }
}

/// `_effective_prefill_isl`: the prompt less the share a KV hit rate (at most 0.95) spares.
fn effective_isl(isl: u32, kv_hit_rate: Option<f64>) -> u32 {
    let h = kv_hit_rate.filter(|h| h.is_finite()).map_or(0.0, |h| h.clamp(0.0, 0.95));
    ((isl as f64 * (1.0 - h)).ceil() as u32).max(1)
}

/// `_find_aggregated_capacity` for a request of `isl` input and `osl` output tokens (already
/// rounded as upstream rounds them) on engine `e`: for each batch size b, a mixed step of b
/// decodes (context `isl + osl / 2` each) beside the prefill tokens that keep b requests flowing
/// (`ceil(b × isl / osl)`, within `max_num_batched_tokens − b`) gives the ITL; the TTFT is that
/// prefill plus one prompt in chunks of `max_num_batched_tokens` beside the same decodes; the
/// rate is b / (osl × ITL). The highest rate within both targets wins, else the highest rate.
pub fn agg_capacity(
    e: &EngineModel,
    isl: u32,
    osl: u32,
    kv_hit_rate: Option<f64>,
    ttft_s: f64,
    itl_s: f64,
) -> Option<Capacity> {
    let mnbt = e.limits.max_num_batched_tokens;
    if osl == 0 || mnbt <= 1 || isl == 0 {
        return None;
    }
    let ctx = (isl as u64 + (osl / 2) as u64).max(1);
    let isl = effective_isl(isl, kv_hit_rate);
    let hard_cap =
        (e.limits.max_num_seqs as u64).min(e.limits.max_kv_tokens / ctx).min((mnbt - 1).max(1) as u64) as u32;
    let mut best: Option<Capacity> = None;
    for b in batch_sizes(hard_cap) {
        let per_iteration = (b as u64 * isl as u64).div_ceil(osl as u64);
        if mnbt <= b || per_iteration > (mnbt - b) as u64 {
            continue;
        }
        let prefill = per_iteration.min(mnbt as u64);
        let itl = e.step(prefill, b, ctx);
        if itl <= 0.0 {
            continue;
        }
        let ttft = e.chunked(prefill + isl as u64, b, ctx);
        let eligible = ttft <= ttft_s && itl <= itl_s;
        best = Some(better(best, Capacity { rps: b as f64 / (osl as f64 * itl), ttft_s: ttft, itl_s: itl, eligible }));
    }
    best
}

/// `_find_prefill_capacity` on a prefill engine: b prompts of `isl` tokens together (b up to
/// what one batch of max-num-batched-tokens holds, 1 for a longer prompt) take their chunked
/// prefill's time, the TTFT; the rate is b / TTFT.
pub fn prefill_capacity(e: &EngineModel, isl: u32, kv_hit_rate: Option<f64>, ttft_s: f64) -> Option<Capacity> {
    let mnbt = e.limits.max_num_batched_tokens;
    if isl == 0 || mnbt == 0 {
        return None;
    }
    let isl = effective_isl(isl, kv_hit_rate);
    let max_batch = if isl > mnbt { 1 } else { e.limits.max_num_seqs.min(mnbt / isl) };
    let mut best: Option<Capacity> = None;
    for b in batch_sizes(max_batch) {
        let ttft = e.chunked(b as u64 * isl as u64, 0, 0);
        if ttft <= 0.0 {
            continue;
        }
        best =
            Some(better(best, Capacity { rps: b as f64 / ttft, ttft_s: ttft, itl_s: 0.0, eligible: ttft <= ttft_s }));
    }
    best
}

/// `_find_decode_capacity` on a decode engine: b sequences of `isl + osl / 2` tokens (b up to
/// the slots and what the KV cache holds) take one step, the ITL; the rate is b / (osl × ITL).
pub fn decode_capacity(e: &EngineModel, isl: u32, osl: u32, itl_s: f64) -> Option<Capacity> {
    if osl == 0 {
        return None;
    }
    let ctx = (isl as u64 + (osl / 2) as u64).max(1);
    let max_batch = (e.limits.max_num_seqs as u64).min(e.limits.max_kv_tokens / ctx) as u32;
    let mut best: Option<Capacity> = None;
    for b in batch_sizes(max_batch) {
        let itl = e.step(0, b, ctx);
        if itl <= 0.0 {
            continue;
        }
        let c = Capacity { rps: b as f64 / (osl as f64 * itl), ttft_s: 0.0, itl_s: itl, eligible: itl <= itl_s };
        best = Some(better(best, c));
    }
    best
}

/// The frontend's traffic over one interval, as the planner's Prometheus queries read it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    /// Requests that reached the frontend (`requests_started_total`), and their prompt tokens.
    pub started: u64,
    pub input_tokens: u64,
    /// First tokens sent (the TTFT histogram's count).
    pub first_tokens: u64,
    /// Requests completed, their output tokens, and those with a second token (the ITL and
    /// OSL histograms' counts).
    pub completed: u64,
    pub output_tokens: u64,
    pub itl_observed: u64,
    /// Dynamo's KV router's per-request hit rates observed at routing: their sum and count.
    pub kv_hit_sum: f64,
    pub kv_hits: u64,
}

/// What one adjustment did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// A replica count was set (perhaps the current one).
    Scale,
    /// Arrivals but no mean TTFT, ITL or OSL in the window: the metrics are NaN, skipped.
    NoTrafficData,
    /// No capacity for the predicted shape (a prediction of no input, or no batch fits).
    ModelNotReady,
    /// A new count while instances were still starting: Kubernetes' connector ignores it.
    NotReady,
}

/// One adjustment's record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// Requests per second that reached the frontend in the window.
    pub observed_rps: f64,
    /// The predicted next window's requests per second, mean ISL and OSL (NaN when skipped).
    pub predicted_rps: f64,
    pub predicted_isl: f64,
    pub predicted_osl: f64,
    /// One engine's capacity for that shape (NaN without one): the aggregated or the prefill
    /// engine's, and the decode engine's (NaN when aggregated).
    pub engine_rps: f64,
    pub decode_engine_rps: f64,
    /// The count set: the aggregated or the prefill pool's, and the decode pool's.
    pub desired: Option<u32>,
    pub desired_decode: Option<u32>,
    /// The KV hit rate the capacity search used (NaN: none).
    pub kv_hit_rate: f64,
    pub outcome: Outcome,
}

/// The planner's state between adjustments.
#[derive(Debug, Clone)]
pub struct Planner {
    pub plan: SlaPlan,
    num_req: Predictor,
    isl: Predictor,
    osl: Predictor,
    seen_live: bool,
    last_isl: Option<f64>,
    last_osl: Option<f64>,
    last_kv_hit_rate: Option<f64>,
}

impl Planner {
    pub fn new(plan: &SlaPlan) -> Self {
        Planner {
            plan: *plan,
            num_req: Predictor::new(plan.predictor),
            isl: Predictor::new(plan.predictor),
            osl: Predictor::new(plan.predictor),
            seen_live: false,
            last_isl: None,
            last_osl: None,
            last_kv_hit_rate: None,
        }
    }

    /// One adjustment over the window `w` just ended: observes, predicts and sizes the pools
    /// by what `engines` sustain for the predicted shape.
    pub fn tick(&mut self, w: &Window, engines: &Engines) -> Tick {
        let interval = self.plan.interval_s;
        let mean = |sum: u64, n: u64| if n == 0 { f64::NAN } else { sum as f64 / n as f64 };
        let (isl, osl) = (mean(w.input_tokens, w.started), mean(w.output_tokens, w.completed));
        let mut tick = Tick {
            observed_rps: w.started as f64 / interval,
            predicted_rps: f64::NAN,
            predicted_isl: f64::NAN,
            predicted_osl: f64::NAN,
            engine_rps: f64::NAN,
            decode_engine_rps: f64::NAN,
            desired: None,
            desired_decode: None,
            kv_hit_rate: f64::NAN,
            outcome: Outcome::NoTrafficData,
        };
        // normalize_idle_nans, then is_valid: an idle window is zeros; a busy one needs every mean.
        let (isl, osl) = if w.started == 0 {
            (0.0, 0.0)
        } else if w.first_tokens == 0 || w.completed == 0 || w.itl_observed == 0 {
            return tick;
        } else {
            (isl, osl)
        };
        // _observe_load.
        self.num_req.add(w.started as f64);
        if w.started > 0 {
            self.seen_live = true;
            self.last_isl = Some(isl);
            self.last_osl = Some(osl);
        }
        let (isl, osl) = if w.started == 0 && self.seen_live {
            (self.last_isl.unwrap_or(0.0), self.last_osl.unwrap_or(0.0))
        } else {
            (isl, osl)
        };
        self.isl.add(isl);
        self.osl.add(osl);
        if self.plan.router_kv_hit_rate && w.kv_hits > 0 {
            self.last_kv_hit_rate = Some(w.kv_hit_sum / w.kv_hits as f64);
        }
        let hit = self.last_kv_hit_rate;
        tick.kv_hit_rate = hit.unwrap_or(f64::NAN);
        let (n, isl, osl) = (self.num_req.predict(), self.isl.predict(), self.osl.predict());
        tick.predicted_rps = n / interval;
        tick.predicted_isl = isl;
        tick.predicted_osl = osl;
        // find_engine_capacity_rps: no input → none; ISL rounded up, OSL at least 1.
        let shape = (isl > 0.0 && osl > 0.0)
            .then(|| (isl.ceil().min(u32::MAX as f64) as u32, osl.ceil().clamp(1.0, u32::MAX as f64) as u32));
        let (ttft, itl) = (self.plan.ttft_s, self.plan.itl_s);
        let rate = |c: Option<Capacity>| c.map(|c| c.rps).filter(|&r| r > 0.0);
        let (first, decode) = match (shape, engines) {
            (None, _) => (None, None),
            (Some((i, o)), Engines::Agg(e)) => (rate(agg_capacity(e, i, o, hit, ttft, itl)), None),
            (Some((i, o)), Engines::Disagg(p, d)) => {
                (rate(prefill_capacity(p, i, hit, ttft)), rate(decode_capacity(d, i, o, itl)))
            }
        };
        let disagg = matches!(engines, Engines::Disagg(..));
        let (Some(first), true) = (first, !disagg || decode.is_some()) else {
            tick.outcome = Outcome::ModelNotReady;
            return tick;
        };
        tick.engine_rps = first;
        let min = self.plan.min_endpoint;
        let replicas = |rps: f64| {
            let wanted = (tick.predicted_rps / rps).ceil();
            let wanted = if wanted.is_finite() && wanted > 0.0 { wanted.min(u32::MAX as f64) as u32 } else { 0 };
            wanted.max(min)
        };
        let max = self.plan.max_instances;
        match decode {
            None => {
                // proportional_clamp_single: over the budget, as many as it holds.
                let desired = replicas(first);
                tick.desired = Some(if desired > max { min.max(max) } else { desired });
            }
            Some(d) => {
                tick.decode_engine_rps = d;
                let (p, d) = clamp_pair(replicas(first), replicas(d), min, max);
                tick.desired = Some(p);
                tick.desired_decode = Some(d);
            }
        }
        tick.outcome = Outcome::Scale;
        tick
    }
}

/// `proportional_clamp_pair` with one GPU count for both pools (in instances, the budget
/// `max`): over it, the prefill pool shrinks in proportion (at least `min`, leaving `min` to
/// decode) and the decode pool takes the rest.
fn clamp_pair(p: u32, d: u32, min: u32, max: u32) -> (u32, u32) {
    let total = p as u64 + d as u64;
    if total <= max as u64 {
        return (p, d);
    }
    let scale = max as f64 / total as f64;
    let max_p = max - min;
    let new_p = min.max(max_p.min((p as f64 * scale).floor() as u32));
    (new_p, min.max(max - new_p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Affine;

    #[test]
    fn the_kalman_filter_follows_filterpy_by_hand() {
        let mut k = Predictor::new(LoadPredictor::Kalman);
        // Leading zeros are dropped; fewer than 5 points forecast the last value.
        k.add(0.0);
        k.add(f64::NAN);
        for v in [10.0, 12.0, 14.0, 16.0] {
            k.add(v);
            assert_eq!(k.predict(), v);
        }
        // Point 2 by hand: predict x = [10, 0], P = [[2001, 1000], [1000, 1000.1]]; S = 2011,
        // K = [2001/2011, 1000/2011]; y = 2.
        let mut f = Kalman::new();
        f.observe(10.0);
        f.observe(12.0);
        let (k0, k1) = (2001.0 / 2011.0, 1000.0 / 2011.0);
        assert!((f.x[0] - (10.0 + 2.0 * k0)).abs() < 1e-12 && (f.x[1] - 2.0 * k1).abs() < 1e-12, "{:?}", f.x);
        // Forecasts after each value, as filterpy 1.4.5 computes them with the same set-up
        // (the fifth value onwards; before it, the last value).
        for (values, want) in [
            (
                &[10.0, 12.0, 14.0, 16.0, 18.0, 20.0][..],
                &[10.0, 12.0, 14.0, 16.0, 19.9895645109005, 21.99369387270251][..],
            ),
            (
                &[5.0, 9.0, 3.0, 12.0, 7.0, 15.0, 2.0, 30.0, 8.0, 11.0],
                &[
                    5.0,
                    9.0,
                    3.0,
                    12.0,
                    8.457524362060648,
                    14.163593110548867,
                    7.0950357821930705,
                    21.49524877259427,
                    16.117042548827015,
                    14.44080217064154,
                ],
            ),
        ] {
            let mut k = Predictor::new(LoadPredictor::Kalman);
            for (v, w) in values.iter().zip(want) {
                k.add(*v);
                let p = k.predict();
                assert!((p - w).abs() < 1e-9, "after {v}: {p} against filterpy's {w}");
                // A second forecast before a new value returns the cached one (no second predict).
                assert_eq!(k.predict(), p);
            }
        }
        let mut c = Predictor::new(LoadPredictor::Constant);
        c.add(3.0);
        c.add(0.0);
        assert_eq!(c.predict(), 0.0, "after the first non-zero value, zeros count");
    }

    fn limits() -> Limits {
        Limits { max_num_seqs: 256, max_num_batched_tokens: 2048, max_kv_tokens: 100_000 }
    }

    // Step = 10 ms + 0.01 ms per prefill token + 0.1 ms per decode sequence.
    static COST: Affine =
        Affine { base_s: 0.01, per_prefill_token_s: 1e-5, per_decode_seq_s: 1e-4, per_ctx_token_s: 0.0 };

    fn engine(limits: Limits) -> EngineModel<'static> {
        EngineModel { cost: &COST, overlap: false, limits }
    }

    #[test]
    fn the_capacity_search_balances_prefill_and_decode_by_hand() {
        let e = engine(limits());
        // ISL 100, OSL 10: b decodes need 10 b prefill tokens a step; b + 10 b ≤ 2048 → b ≤ 186.
        let c = agg_capacity(&e, 100, 10, None, 10.0, 1.0).unwrap();
        // The rate b / (10 × (0.01 + 1e-5 × 10 b + 1e-4 b)) rises with b, so the largest
        // balanced size wins; the slots (256), KV (100,000 / 105) and tokens (2,047) allow 256,
        // so the search takes 128 sizes 1 + ⌊k × 255 / 127⌋: 185 (k = 92), then 187.
        let b: f64 = 185.0;
        let itl = 0.01 + 1e-5 * (10.0 * b).ceil() + 1e-4 * b;
        assert!((c.itl_s - itl).abs() < 1e-12, "{c:?}");
        assert!((c.rps - b / (10.0 * itl)).abs() < 1e-9, "{c:?}");
        // TTFT: 1,850 + 100 = 1,950 tokens: no full chunk, one tail.
        let ttft = 0.01 + 1e-5 * 1950.0 + 1e-4 * b;
        assert!((c.ttft_s - ttft).abs() < 1e-12 && c.eligible, "{c:?}");
        // A tight ITL target: the highest eligible rate, at a smaller batch.
        let tight = agg_capacity(&e, 100, 10, None, 10.0, 0.02).unwrap();
        assert!(tight.eligible && tight.itl_s <= 0.02 && tight.rps < c.rps, "{tight:?}");
        // Nothing eligible: the highest rate anyway, marked so.
        let none = agg_capacity(&e, 100, 10, None, 1e-6, 1e-6).unwrap();
        assert!(!none.eligible && (none.rps - c.rps).abs() < 1e-9);
        assert_eq!(agg_capacity(&e, 0, 10, None, 1.0, 1.0), None);
        assert_eq!(
            agg_capacity(&engine(Limits { max_kv_tokens: 50, ..limits() }), 100, 10, None, 1.0, 1.0),
            None,
            "no request fits the KV cache"
        );
    }

    #[test]
    fn a_tick_sizes_the_fleet_and_skips_what_upstream_skips() {
        let plan = SlaOptions { predictor: Some(LoadPredictor::Constant), ..Default::default() }.plan(1, None).unwrap();
        assert_eq!((plan.max_instances, plan.min_endpoint, plan.interval_s), (8, 1, 180.0));
        let mut p = Planner::new(&plan);
        // One sequence, ISL 300, OSL 20: a step of 15 prefill tokens beside one decode,
        // 0.01 + 0.00015 + 0.0001 = 0.01025 s; 1 / (20 × 0.01025) = 4.878 req/s an engine.
        let cap = &Engines::Agg(engine(Limits { max_num_seqs: 1, ..limits() }));
        let rate = 1.0 / (20.0 * 0.01025);
        // Idle at first: zeros are dropped, the constant predictor has nothing: no capacity.
        let t = p.tick(&Window::default(), cap);
        assert_eq!(t.outcome, Outcome::ModelNotReady);
        // 900 requests in 180 s = 5 req/s, 4.878 req/s an engine: 2 replicas.
        let w = Window {
            started: 900,
            input_tokens: 900 * 300,
            first_tokens: 900,
            completed: 880,
            output_tokens: 880 * 20,
            itl_observed: 880,
            ..Window::default()
        };
        let t = p.tick(&w, cap);
        assert_eq!((t.outcome, t.desired), (Outcome::Scale, Some(2)));
        assert!((t.engine_rps - rate).abs() < 1e-9, "{t:?}");
        assert_eq!((t.predicted_isl, t.predicted_osl), (300.0, 20.0));
        // Arrivals but no completion: the mean OSL is NaN, the window is skipped.
        let t = p.tick(&Window { completed: 0, output_tokens: 0, ..w }, cap);
        assert_eq!((t.outcome, t.desired), (Outcome::NoTrafficData, None));
        // Over the budget: 8 GPUs of 1.
        let t = p.tick(&Window { started: 90_000, input_tokens: 90_000 * 300, ..w }, cap);
        assert_eq!(t.desired, Some(8));
        // The KV hit rate counts only from Dynamo's router: not here.
        assert!(t.kv_hit_rate.is_nan());
        // Idle after traffic: the constant predictor forecasts 0 requests, the lengths carry
        // forward, and the floor is min_endpoint.
        let t = p.tick(&Window::default(), cap);
        assert_eq!((t.desired, t.predicted_isl), (Some(1), 300.0));
    }

    /// 900 requests in the window, every one of ISL 100 and OSL 10, all answered.
    fn busy() -> Window {
        Window {
            started: 900,
            input_tokens: 90_000,
            first_tokens: 900,
            completed: 900,
            output_tokens: 9000,
            itl_observed: 900,
            ..Window::default()
        }
    }

    #[test]
    fn the_pools_capacities_and_the_budget_split_by_hand() {
        let e = engine(limits());
        // Prefill of ISL 100: up to 2048 / 100 = 20 prompts a batch; b prompts in one chunk
        // take 0.01 + 1e-3 b s, so the rate b / (0.01 + 0.001 b) rises with b: 20 → 666.7/s,
        // TTFT 30 ms.
        let p = prefill_capacity(&e, 100, None, 0.5).unwrap();
        assert!((p.rps - 20.0 / 0.03).abs() < 1e-9 && (p.ttft_s - 0.03).abs() < 1e-12 && p.eligible, "{p:?}");
        // A TTFT target of 20 ms: b ≤ 10 → 10 / 0.02 = 500/s.
        let p = prefill_capacity(&e, 100, None, 0.02).unwrap();
        assert!((p.rps - 500.0).abs() < 1e-9 && p.eligible, "{p:?}");
        // A prompt longer than a chunk: one at a time, 3000 = 2048 + 952 tokens in two steps.
        let p = prefill_capacity(&e, 3000, None, 1.0).unwrap();
        assert!((p.ttft_s - (0.01 + 0.02048 + 0.01 + 0.00952)).abs() < 1e-12, "{p:?}");
        // Decode of ISL 100, OSL 10 (context 105): b sequences take 0.01 + 1e-4 b; within an
        // ITL of 20 ms, b ≤ 100, and the sizes searched (1 + ⌊k × 255 / 127⌋) reach 99:
        // 99 / (10 × 0.0199).
        let d = decode_capacity(&e, 100, 10, 0.02).unwrap();
        assert!((d.itl_s - 0.0199).abs() < 1e-12 && (d.rps - 99.0 / 0.199).abs() < 1e-9 && d.eligible, "{d:?}");
        assert_eq!(decode_capacity(&e, 100, 0, 0.02), None);
        // A KV hit rate of 0.5 halves the prompts the prefill engine computes: 20 of 50 tokens
        // fit 40 a batch; 40 / (0.01 + 0.02) s. A rate above 0.95 counts as 0.95.
        let p = prefill_capacity(&e, 100, Some(0.5), 0.5).unwrap();
        assert!((p.rps - 40.0 / 0.03).abs() < 1e-9, "{p:?}");
        // (1 − 0.95 is 0.050000000000000044 in binary, as in Python: 100 × it rounds up to 6.)
        assert_eq!(effective_isl(100, Some(0.99)), 6);
        assert_eq!(effective_isl(100, Some(f64::NAN)), 100);
        // The budget split: 6 + 6 over 8 → prefill ⌊6 × 8/12⌋ = 4, decode the other 4; a pool
        // never below min_endpoint, and the prefill pool leaves min_endpoint to decode.
        assert_eq!(clamp_pair(6, 6, 1, 8), (4, 4));
        assert_eq!(clamp_pair(3, 2, 1, 8), (3, 2));
        assert_eq!(clamp_pair(20, 1, 1, 8), (7, 1));
        assert_eq!(clamp_pair(1, 20, 1, 8), (1, 7));
        // Both pools from one tick: 900 requests in 180 s of ISL 100, OSL 10.
        let plan = SlaOptions { predictor: Some(LoadPredictor::Constant), ..Default::default() }
            .plan(1, Some((1, 1)))
            .unwrap();
        assert_eq!(plan.pools.map(|x| (x.max_prefill, x.max_decode)), Some((7, 7)));
        let mut planner = Planner::new(&plan);
        let one = engine(Limits { max_num_seqs: 1, ..limits() });
        let t = planner.tick(&busy(), &Engines::Disagg(one, one));
        // Prefill: one prompt at a time, 1 / 0.011 = 90.9/s → 1; decode: 1 / (10 × 0.0101) =
        // 9.9/s → 1.
        assert_eq!((t.desired, t.desired_decode), (Some(1), Some(1)));
        assert!((t.engine_rps - 1.0 / 0.011).abs() < 1e-9 && (t.decode_engine_rps - 1.0 / 0.101).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn dynamo_routers_kv_hit_rate_discounts_the_prompts_and_is_kept() {
        let mut plan = SlaOptions { predictor: Some(LoadPredictor::Constant), ..Default::default() }
            .plan(1, Some((1, 1)))
            .unwrap();
        plan.router_kv_hit_rate = true;
        let mut p = Planner::new(&plan);
        let e = engine(limits());
        let engines = Engines::Disagg(e, e);
        let w = Window { kv_hit_sum: 450.0, kv_hits: 900, ..busy() };
        // A mean hit rate of 0.5: the prefill engine's rate is that of 50-token prompts.
        let t = p.tick(&w, &engines);
        assert_eq!(t.kv_hit_rate, 0.5);
        assert!((t.engine_rps - prefill_capacity(&e, 50, None, 0.5).unwrap().rps).abs() < 1e-9, "{t:?}");
        // A window without routing observations keeps the last rate.
        let t = p.tick(&Window { kv_hit_sum: 0.0, kv_hits: 0, ..w }, &engines);
        assert_eq!(t.kv_hit_rate, 0.5);
    }

    #[test]
    fn flags_are_checked() {
        for (o, says) in [
            (SlaOptions { predictor: Some(LoadPredictor::Arima), ..Default::default() }, "auto_arima"),
            (SlaOptions { predictor: Some(LoadPredictor::Prophet), ..Default::default() }, "Prophet"),
            (SlaOptions { min_endpoint: Some(0), ..Default::default() }, "scaling to zero"),
            (SlaOptions { max_gpu_budget: Some(3), ..Default::default() }, "would set 0 replicas"),
            (SlaOptions { ttft_ms: Some(0.0), ..Default::default() }, "--ttft"),
            (SlaOptions { itl_ms: Some(f64::NAN), ..Default::default() }, "--itl"),
            (SlaOptions { interval_s: Some(-1.0), ..Default::default() }, "--throughput-adjustment-interval"),
            (SlaOptions { interval_s: Some(1e-300), ..Default::default() }, "below 0.1 s"),
        ] {
            let e = o.plan(4, None).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        // Two pools need two instances: 8 GPUs of 4 hold 2, 4 of 4 one.
        assert!(SlaOptions::default().plan(4, Some((1, 1))).is_ok());
        let e = SlaOptions { max_gpu_budget: Some(4), ..Default::default() }.plan(4, Some((1, 1))).unwrap_err();
        assert!(e.to_string().contains("in each pool"), "{e}");
        assert_eq!(SlaOptions::default().plan(4, None).unwrap().max_instances, 2);
    }
}
