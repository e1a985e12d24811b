//! Autoscaling a data-parallel fleet over the trace's own time line (`--autoscale hpa`): the
//! Kubernetes HorizontalPodAutoscaler's rule on a per-instance serving metric (the shape HPA
//! with a Prometheus adapter and KEDA give vLLM and SGLang deployments), as its controller
//! computes it (`pkg/controller/podautoscaler/replica_calculator.go`, `horizontal.go`,
//! Kubernetes 1.31):
//!
//! - every sync period (`--horizontal-pod-autoscaler-sync-period`, 15 s) the controller reads the
//!   metric of every instance that serves (a starting instance exposes no metric yet; a
//!   draining one is terminating and ignored), in milli-units as `resource.Quantity` gives them,
//!   averages them with integer division (`GetMetricUsageRatio`) and proposes
//!   `ceil(ratio × ready)` instances, or none within the tolerance (0.1); starting instances
//!   count as using nothing on a scale-up and exactly the target on a scale-down, and a
//!   proposal that then reverses or stays within the tolerance keeps the current count
//!   (`calcPlainMetricReplicas`);
//! - the proposal is stabilised (`stabilizeRecommendationWithBehaviors`): a scale-down goes no
//!   lower than the highest proposal of the last 300 s (the window starts with the count at
//!   the first sync, `maybeInitScaleDownStabilizationWindow`), a scale-up no higher than the
//!   lowest of the scale-up window (0 s by default);
//! - and rate-limited by the default policies (`GenerateHPAScaleUpRules`,
//!   `GenerateHPAScaleDownRules` in `pkg/apis/autoscaling/v2/defaults.go`): up by at most the
//!   larger of 4 instances and 100 % per 15 s, down by at most 100 % per 15 s, counted from the
//!   scale events of the period (`calculateScaleUpLimitWithScalingRules`,
//!   `calculateScaleDownLimitWithBehaviors`); then kept within `--min-instances` and
//!   `--max-instances`.
//!
//! A new instance serves after its cold start (`--cold-start-s`; by default the engine's
//! start-up plus its share of the weights read at `--weights-load-gbps`); an instance scaled
//! down leaves the router's list, finishes what it holds and stops, or loses what is left at
//! the drain timeout (Kubernetes' `terminationGracePeriodSeconds`). Which instances go follows
//! the ReplicaSet controller's ranking (`ActivePodsWithRanks`, `pkg/controller/controller_utils.go`):
//! instances not ready yet first (the newest first), then the one ready most recently. The plan
//! is data; the event loop ([`crate::sim`]) carries it out.

use super::planner::{SlaOptions, SlaPlan};
use super::seconds;
use crate::error::{Error, Result};
use serde::Serialize;

/// The autoscaling policies (`--autoscale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum AutoscalePolicy {
    /// Kubernetes' HorizontalPodAutoscaler on a per-instance metric (KEDA's Prometheus scaler
    /// feeds the same controller).
    Hpa,
    /// NVIDIA Dynamo's SLA planner in aggregated mode: predicted load over one engine's
    /// capacity within the TTFT and ITL targets.
    Sla,
}

impl AutoscalePolicy {
    /// The policy's name, as `--autoscale` takes it.
    pub fn name(self) -> &'static str {
        match self {
            AutoscalePolicy::Hpa => "hpa",
            AutoscalePolicy::Sla => "sla",
        }
    }
}

/// The per-instance metric the autoscaler averages (`--scale-metric`), each one of the engines'
/// Prometheus gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ScaleMetric {
    /// Requests waiting to be scheduled (`vllm:num_requests_waiting`, `sglang:num_queue_reqs`).
    Waiting,
    /// Requests running in the batch (`vllm:num_requests_running`, `sglang:num_running_reqs`).
    Running,
    /// Waiting and running requests together.
    InFlight,
    /// The share of the KV cache held by requests, 0 to 1 (`vllm:kv_cache_usage_perc`,
    /// `sglang:token_usage`).
    KvUsage,
}

impl ScaleMetric {
    /// The metric's name, as `--scale-metric` takes it.
    pub fn name(self) -> &'static str {
        match self {
            ScaleMetric::Waiting => "waiting",
            ScaleMetric::Running => "running",
            ScaleMetric::InFlight => "in-flight",
            ScaleMetric::KvUsage => "kv-usage",
        }
    }
}

/// HPA's sync period (`--horizontal-pod-autoscaler-sync-period`), seconds.
pub const DEFAULT_SYNC_PERIOD_S: f64 = 15.0;
/// HPA's tolerance (`--horizontal-pod-autoscaler-tolerance`).
pub const DEFAULT_TOLERANCE: f64 = 0.1;
/// HPA's scale-down stabilisation window (`behavior.scaleDown.stabilizationWindowSeconds`,
/// `--horizontal-pod-autoscaler-downscale-stabilization`), seconds.
pub const DEFAULT_DOWN_WINDOW_S: f64 = 300.0;
/// The default scale-up policies: 4 instances, or 100 %, per 15 s, whichever adds more.
const UP_PODS: u32 = 4;
const UP_PERCENT: f64 = 100.0;
/// The default scale-down policy: 100 % per 15 s.
const DOWN_PERCENT: f64 = 100.0;
/// The policies' period, seconds.
const POLICY_PERIOD_S: f64 = 15.0;
/// Seconds an engine takes to start beside reading its weights (process start, CUDA context,
/// memory profiling, CUDA-graph capture, warm-up), when `--cold-start-s` is not given: an
/// assumed round figure (vLLM logs `init engine (profile, create kv cache, warmup model) took`
/// tens of seconds); set `--cold-start-s` from your own start-up logs.
pub const DEFAULT_ENGINE_START_S: f64 = 60.0;
/// GB/s at which one GPU's share of the weights is read at start-up when
/// `--weights-load-gbps` is not given: one local NVMe drive's sequential read, an assumed
/// figure (a network volume is often slower).
pub const DEFAULT_WEIGHTS_LOAD_GBPS: f64 = 2.0;

/// The autoscaling flags as given (`RunOptions::autoscale`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AutoscaleOptions {
    /// `--autoscale`.
    pub policy: Option<AutoscalePolicy>,
    /// `--min-instances` (default 1) and `--max-instances` (required).
    pub min_instances: Option<u32>,
    pub max_instances: Option<u32>,
    /// `--scale-metric` and `--scale-target` (both required).
    pub metric: Option<ScaleMetric>,
    pub target: Option<f64>,
    /// `--hpa-sync-period-s` (default [`DEFAULT_SYNC_PERIOD_S`]).
    pub sync_period_s: Option<f64>,
    /// `--hpa-tolerance` (default [`DEFAULT_TOLERANCE`]).
    pub tolerance: Option<f64>,
    /// `--scale-down-window-s` (default [`DEFAULT_DOWN_WINDOW_S`]).
    pub down_window_s: Option<f64>,
    /// `--cold-start-s` (default: [`DEFAULT_ENGINE_START_S`] plus the weights' read).
    pub cold_start_s: Option<f64>,
    /// `--weights-load-gbps` (default [`DEFAULT_WEIGHTS_LOAD_GBPS`]).
    pub weights_load_gbps: Option<f64>,
    /// The SLA planner's flags (`--autoscale sla`).
    pub sla: SlaOptions,
}

/// The HorizontalPodAutoscaler's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HpaRule {
    pub metric: ScaleMetric,
    /// The per-instance average the autoscaler aims at, in the metric's units.
    pub target: f64,
    pub sync_period_s: f64,
    pub tolerance: f64,
    pub down_window_s: f64,
}

/// What decides the fleet's size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Rule {
    Hpa(HpaRule),
    Sla(SlaPlan),
}

/// How long a new instance takes to serve, and why.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ColdStart {
    /// Seconds from the scale-up to serving.
    pub seconds: f64,
    /// Given whole by `--cold-start-s` (else computed from the two terms below).
    pub given: bool,
    /// The engine's start-up beside the weights, and the weights' read (seconds).
    pub engine_start_s: f64,
    pub weights_s: f64,
}

/// An autoscaled fleet, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoscalePlan {
    pub policy: AutoscalePolicy,
    /// Instances at the start (`--instances`), and the bounds (the SLA planner's: its
    /// `--min-endpoint` and the instances `--max-gpu-budget` holds).
    pub initial: u32,
    pub min_instances: u32,
    pub max_instances: u32,
    /// The policy's own settings.
    #[serde(flatten)]
    pub rule: Rule,
    pub cold_start: ColdStart,
    /// Seconds a scaled-down instance may take to finish what it holds.
    pub drain_timeout_s: f64,
}

impl AutoscaleOptions {
    /// Whether any autoscaling flag was given.
    fn any(&self) -> bool {
        *self != AutoscaleOptions::default()
    }

    /// The plan these flags give over a deployment of `initial` instances of `gpus` GPUs, each
    /// GPU holding `weight_bytes_per_gpu` bytes of weights, with `drain_timeout_s` for a
    /// scale-down; `pools`: a disaggregated deployment's prefill and decode instances (then
    /// `initial` is their sum). `None` without `--autoscale`, when no other autoscaling flag may
    /// be set.
    pub fn plan(
        &self,
        initial: u32,
        gpus: u32,
        weight_bytes_per_gpu: f64,
        drain_timeout_s: f64,
        pools: Option<(u32, u32)>,
    ) -> Result<Option<AutoscalePlan>> {
        let Some(policy) = self.policy else {
            if let (None, Some(flag)) = (self.first_hpa_flag(), self.sla.first_flag()) {
                return Err(Error::invalid(flag, "is the SLA planner's and means nothing without --autoscale sla"));
            }
            if self.any() {
                return Err(Error::invalid(
                    self.first_flag(),
                    "means nothing without autoscaling: add --autoscale hpa (with --max-instances, --scale-metric and \
                     --scale-target) or --autoscale sla",
                ));
            }
            return Ok(None);
        };
        let (min_instances, max_instances, rule) = match policy {
            AutoscalePolicy::Hpa => {
                if let Some(flag) = self.sla.first_flag() {
                    return Err(Error::invalid(
                        flag,
                        "is the SLA planner's and means nothing with --autoscale hpa (use --autoscale sla)",
                    ));
                }
                self.hpa()?
            }
            AutoscalePolicy::Sla => {
                if let Some(flag) = self.first_hpa_flag() {
                    return Err(Error::invalid(
                        flag,
                        "is the HorizontalPodAutoscaler's and means nothing with --autoscale sla (the planner's bounds \
                         are --min-endpoint and --max-gpu-budget, its period --throughput-adjustment-interval)",
                    ));
                }
                let p = self.sla.plan(gpus, pools)?;
                if let Some(x) = p.pools {
                    for (flag, n, max) in [
                        ("--prefill-instances", x.prefill, x.max_prefill),
                        ("--decode-instances", x.decode, x.max_decode),
                    ] {
                        if !(p.min_endpoint..=max).contains(&n) || x.prefill + x.decode > p.max_instances {
                            return Err(Error::invalid(
                                flag,
                                format!(
                                    "{n} (the pool's instances at the start) must be between --min-endpoint {} and \
                                     {max}, and both pools within the {} instances --max-gpu-budget holds",
                                    p.min_endpoint, p.max_instances
                                ),
                            ));
                        }
                    }
                }
                let min = if p.pools.is_some() { 2 * p.min_endpoint } else { p.min_endpoint };
                (min, p.max_instances.min(super::MAX_INSTANCES), Rule::Sla(p))
            }
        };
        if !(min_instances..=max_instances).contains(&initial) {
            let (lo, hi) = match policy {
                AutoscalePolicy::Hpa => ("--min-instances", "--max-instances"),
                AutoscalePolicy::Sla => ("--min-endpoint", "the instances --max-gpu-budget holds,"),
            };
            return Err(Error::invalid(
                "--instances",
                format!(
                    "{initial} (the instances serving at the start) must be between {lo} {min_instances} and {hi} \
                     {max_instances}"
                ),
            ));
        }
        let drain_timeout_s = seconds("--drain-timeout-s", drain_timeout_s, false)?;
        let cold_start = match self.cold_start_s {
            Some(c) => {
                if self.weights_load_gbps.is_some() {
                    return Err(Error::invalid(
                        "--weights-load-gbps",
                        "means nothing with --cold-start-s, which gives the whole start-up",
                    ));
                }
                ColdStart {
                    seconds: seconds("--cold-start-s", c, false)?,
                    given: true,
                    engine_start_s: 0.0,
                    weights_s: 0.0,
                }
            }
            None => {
                let gbps = self.weights_load_gbps.unwrap_or(DEFAULT_WEIGHTS_LOAD_GBPS);
                if !(gbps.is_finite() && gbps > 0.0 && gbps <= 1e4) {
                    return Err(Error::invalid(
                        "--weights-load-gbps",
                        format!("{gbps} must be a read bandwidth in GB/s above 0, at most 10000"),
                    ));
                }
                let weights_s = weight_bytes_per_gpu / (gbps * 1e9);
                ColdStart {
                    seconds: DEFAULT_ENGINE_START_S + weights_s,
                    given: false,
                    engine_start_s: DEFAULT_ENGINE_START_S,
                    weights_s,
                }
            }
        };
        Ok(Some(AutoscalePlan { policy, initial, min_instances, max_instances, rule, cold_start, drain_timeout_s }))
    }

    /// The HorizontalPodAutoscaler's bounds and settings, checked.
    fn hpa(&self) -> Result<(u32, u32, Rule)> {
        let max_instances = self.max_instances.ok_or_else(|| {
            Error::invalid("--max-instances", "is required with --autoscale: the most instances the fleet may grow to")
        })?;
        let min_instances = self.min_instances.unwrap_or(1);
        if min_instances == 0 {
            return Err(Error::invalid(
                "--min-instances",
                "0 is scaling to zero, which the HorizontalPodAutoscaler does not do (minReplicas is at least 1 \
                 without the HPAScaleToZero feature gate); give at least 1",
            ));
        }
        if max_instances < min_instances || max_instances > super::MAX_INSTANCES {
            return Err(Error::invalid(
                "--max-instances",
                format!(
                    "{max_instances} must be at least --min-instances ({min_instances}) and at most {}",
                    super::MAX_INSTANCES
                ),
            ));
        }
        let metric = self.metric.ok_or_else(|| {
            Error::invalid("--scale-metric", "is required with --autoscale: waiting, running, in-flight or kv-usage")
        })?;
        let target = self.target.ok_or_else(|| {
            Error::invalid("--scale-target", "is required with --autoscale: the per-instance average to aim at")
        })?;
        // resource.Quantity's milli-units: the target must be at least one of them.
        let unit_max = if metric == ScaleMetric::KvUsage { 1.0 } else { 1e6 };
        if !(target.is_finite() && target >= 1e-3 && target <= unit_max) {
            let what = if metric == ScaleMetric::KvUsage {
                "a share of the KV cache between 0.001 and 1 (vLLM's gauge is a fraction, not a percentage)"
            } else {
                "a number of requests per instance between 0.001 and 1000000"
            };
            return Err(Error::invalid("--scale-target", format!("{target} must be {what}")));
        }
        let tolerance = self.tolerance.unwrap_or(DEFAULT_TOLERANCE);
        if !(tolerance.is_finite() && (0.0..1.0).contains(&tolerance)) {
            return Err(Error::invalid("--hpa-tolerance", format!("{tolerance} must be between 0 and 1 (below 1)")));
        }
        let sync_period_s = seconds("--hpa-sync-period-s", self.sync_period_s.unwrap_or(DEFAULT_SYNC_PERIOD_S), true)?;
        if sync_period_s < super::MIN_DECISION_PERIOD_S {
            return Err(Error::invalid(
                "--hpa-sync-period-s",
                format!(
                    "{sync_period_s} is below {} s: the controller keeps one record per sync, and the engines' gauges \
                     are scraped every few seconds",
                    super::MIN_DECISION_PERIOD_S
                ),
            ));
        }
        let down_window_s =
            seconds("--scale-down-window-s", self.down_window_s.unwrap_or(DEFAULT_DOWN_WINDOW_S), false)?;
        Ok((
            min_instances,
            max_instances,
            Rule::Hpa(HpaRule { metric, target, sync_period_s, tolerance, down_window_s }),
        ))
    }

    /// The first autoscaling flag given, for a message.
    fn first_flag(&self) -> &'static str {
        self.first_hpa_flag()
            .or_else(|| {
                [
                    (self.cold_start_s.is_some(), "--cold-start-s"),
                    (self.weights_load_gbps.is_some(), "--weights-load-gbps"),
                ]
                .into_iter()
                .find_map(|(set, flag)| set.then_some(flag))
            })
            .or_else(|| self.sla.first_flag())
            .unwrap_or("--autoscale")
    }

    /// The first of the HorizontalPodAutoscaler's own flags given.
    fn first_hpa_flag(&self) -> Option<&'static str> {
        [
            (self.min_instances.is_some(), "--min-instances"),
            (self.max_instances.is_some(), "--max-instances"),
            (self.metric.is_some(), "--scale-metric"),
            (self.target.is_some(), "--scale-target"),
            (self.sync_period_s.is_some(), "--hpa-sync-period-s"),
            (self.tolerance.is_some(), "--hpa-tolerance"),
            (self.down_window_s.is_some(), "--scale-down-window-s"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

impl AutoscalePlan {
    /// Checks the plan against the deployment: a data-parallel fleet of an engine whose
    /// requests a scale-down can stop.
    pub fn validate(&self, pd: bool, engine: crate::engine::EngineKind) -> Result<()> {
        if pd && matches!(self.rule, Rule::Hpa(_)) {
            return Err(Error::invalid(
                "--autoscale",
                "hpa autoscales data-parallel instances (--instances); prefill/decode pools are autoscaled by the SLA \
                 planner (--autoscale sla)",
            ));
        }
        if engine == crate::engine::EngineKind::VllmV0 {
            return Err(Error::invalid(
                "--autoscale",
                "is not modelled for vLLM V0: its multi-step batches and asynchronous output processing hold tokens \
                 the client has not seen when a drain stops the instance",
            ));
        }
        Ok(())
    }

    /// A disaggregated deployment's pools, as the SLA planner sizes them.
    pub fn pools(&self) -> Option<super::planner::PdPools> {
        match &self.rule {
            Rule::Sla(p) => p.pools,
            Rule::Hpa(_) => None,
        }
    }

    /// Seconds between the autoscaler's decisions: the HPA's sync period, the planner's
    /// adjustment interval.
    pub fn period_s(&self) -> f64 {
        match &self.rule {
            Rule::Hpa(h) => h.sync_period_s,
            Rule::Sla(p) => p.interval_s,
        }
    }
}

/// A value in milli-units, rounded up as `resource.Quantity::MilliValue` rounds.
pub fn milli(v: f64) -> i64 {
    (v * 1000.0 - 1e-9).ceil().max(0.0) as i64
}

/// One sync's reading and what the controller made of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Decision {
    /// The average metric over the serving instances (milli-units, integer division as
    /// upstream), `None` when none serves (no metric: the controller changes nothing).
    pub average_milli: Option<i64>,
    /// The replica calculator's proposal, the stabilised one, and the count set.
    pub proposed: u32,
    pub stabilized: u32,
    pub desired: u32,
}

/// The HorizontalPodAutoscaler's state between syncs: the proposals of the stabilisation
/// window and the scale events of the policies' period.
#[derive(Debug, Clone, PartialEq)]
pub struct Hpa {
    pub min: u32,
    pub max: u32,
    pub target_milli: i64,
    pub tolerance: f64,
    pub up_window_s: f64,
    pub down_window_s: f64,
    /// (time, proposal), as `a.recommendations[key]` keeps them.
    recommendations: Vec<(f64, u32)>,
    /// (time, instances added or removed), as `scaleUpEvents` / `scaleDownEvents`.
    up_events: Vec<(f64, u32)>,
    down_events: Vec<(f64, u32)>,
}

impl Hpa {
    /// The controller of `plan` and `rule`, before its first sync.
    pub fn new(plan: &AutoscalePlan, rule: &HpaRule) -> Self {
        Hpa {
            min: plan.min_instances,
            max: plan.max_instances,
            target_milli: milli(rule.target),
            tolerance: rule.tolerance,
            up_window_s: 0.0,
            down_window_s: rule.down_window_s,
            recommendations: Vec::new(),
            up_events: Vec::new(),
            down_events: Vec::new(),
        }
    }

    /// One sync at `now`: `current` instances wanted so far (serving and starting), the serving
    /// ones' metric values `ready` (milli-units) and `missing` instances without a metric
    /// (starting). Returns the decision; the count to set is `desired`.
    pub fn sync(&mut self, now: f64, current: u32, ready: &[i64], missing: u32) -> Decision {
        // maybeInitScaleDownStabilizationWindow: the window starts with the current count.
        if self.recommendations.is_empty() {
            self.recommendations.push((now, current));
        }
        let Some((proposed, average_milli)) = replicas(current, self.target_milli, self.tolerance, ready, missing)
        else {
            // No metric at all: the controller reports an error and leaves the count alone.
            return Decision { average_milli: None, proposed: current, stabilized: current, desired: current };
        };
        let proposed = if current > self.max {
            self.max
        } else if current < self.min {
            self.min
        } else {
            proposed
        };
        let stabilized = self.stabilize(now, current, proposed);
        let desired = self.rate_limit(now, current, stabilized);
        if desired > current {
            self.up_events.push((now, desired - current));
        } else if desired < current {
            self.down_events.push((now, current - desired));
        }
        let keep = now - POLICY_PERIOD_S.max(self.down_window_s);
        self.up_events.retain(|e| e.0 > keep);
        self.down_events.retain(|e| e.0 > keep);
        Decision { average_milli: Some(average_milli), proposed, stabilized, desired }
    }

    /// `stabilizeRecommendationWithBehaviors`: the proposal held between the lowest proposal
    /// of the scale-up window and the highest of the scale-down window; the proposal is
    /// recorded in the slot of one older than both windows, else appended.
    fn stabilize(&mut self, now: f64, current: u32, proposed: u32) -> u32 {
        let (up_cutoff, down_cutoff) = (now - self.up_window_s, now - self.down_window_s);
        let (mut up, mut down) = (proposed, proposed);
        let mut old = None;
        for (k, &(t, r)) in self.recommendations.iter().enumerate() {
            if t > up_cutoff {
                up = up.min(r);
            }
            if t > down_cutoff {
                down = down.max(r);
            }
            if t < up_cutoff && t < down_cutoff {
                old = Some(k);
            }
        }
        let rec = current.max(up).min(down);
        match old {
            Some(k) => self.recommendations[k] = (now, proposed),
            None => self.recommendations.push((now, proposed)),
        }
        rec
    }

    /// `convertDesiredReplicasWithBehaviorRate`: a scale-up within the scale-up policies and
    /// `max`, a scale-down within the scale-down policy and `min`.
    fn rate_limit(&self, now: f64, current: u32, desired: u32) -> u32 {
        let cutoff = now - POLICY_PERIOD_S;
        let in_period = |events: &[(f64, u32)]| events.iter().filter(|e| e.0 > cutoff).map(|e| e.1 as i64).sum::<i64>();
        let start = current as i64 - in_period(&self.up_events) + in_period(&self.down_events);
        if desired > current {
            // selectPolicy Max: the larger of the two proposals.
            let by_pods = start + UP_PODS as i64;
            let by_percent = (start as f64 * (1.0 + UP_PERCENT / 100.0)).ceil() as i64;
            let limit = by_pods.max(by_percent).max(current as i64);
            desired.min(limit.min(self.max as i64) as u32)
        } else if desired < current {
            let limit = ((start as f64 * (1.0 - DOWN_PERCENT / 100.0)) as i64).min(current as i64);
            desired.max(limit.max(self.min as i64) as u32)
        } else {
            desired
        }
    }
}

/// `calcPlainMetricReplicas` for a per-pod average metric: the proposed count and the average
/// (milli-units), or `None` without any metric.
fn replicas(current: u32, target: i64, tolerance: f64, ready: &[i64], missing: u32) -> Option<(u32, i64)> {
    if ready.is_empty() {
        return None;
    }
    let ratio_of = |total: i64, n: i64| {
        let usage = total / n;
        (usage as f64 / target as f64, usage)
    };
    let total: i64 = ready.iter().sum();
    let (ratio, usage) = ratio_of(total, ready.len() as i64);
    if missing == 0 {
        if (1.0 - ratio).abs() <= tolerance {
            return Some((current, usage));
        }
        return Some(((ratio * ready.len() as f64).ceil() as u32, usage));
    }
    // Missing instances count as the target on a scale-down, as nothing on a scale-up.
    let filled = if ratio < 1.0 { total + target * missing as i64 } else { total };
    let n = ready.len() as i64 + missing as i64;
    let (new_ratio, _) = ratio_of(filled, n);
    if (1.0 - new_ratio).abs() <= tolerance || (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0) {
        return Some((current, usage));
    }
    let proposed = (new_ratio * n as f64).ceil() as u32;
    if (new_ratio < 1.0 && proposed > current) || (new_ratio > 1.0 && proposed < current) {
        return Some((current, usage));
    }
    Some((proposed, usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> AutoscaleOptions {
        AutoscaleOptions {
            policy: Some(AutoscalePolicy::Hpa),
            max_instances: Some(8),
            metric: Some(ScaleMetric::Waiting),
            target: Some(4.0),
            ..AutoscaleOptions::default()
        }
    }

    fn hpa(min: u32, max: u32, target: f64) -> Hpa {
        let plan =
            AutoscaleOptions { min_instances: Some(min), max_instances: Some(max), target: Some(target), ..opts() }
                .plan(min, 1, 16e9, 30.0, None)
                .unwrap()
                .unwrap();
        let Rule::Hpa(rule) = plan.rule else { unreachable!("an HPA plan") };
        Hpa::new(&plan, &rule)
    }

    #[test]
    fn the_replica_calculator_follows_upstream_by_hand() {
        // 2 ready instances at 10 and 6 waiting, target 4: ratio 2, ceil(2 × 2) = 4.
        assert_eq!(replicas(2, 4000, 0.1, &[10_000, 6_000], 0), Some((4, 8000)));
        // Within the tolerance: 4.3 / 4 = 1.075.
        assert_eq!(replicas(2, 4000, 0.1, &[4300, 4300], 0), Some((2, 4300)));
        // Integer division of the milli-units: (1 + 0 + 0) / 3 = 333 milli.
        assert_eq!(replicas(3, 1000, 0.1, &[1000, 0, 0], 0), Some((1, 333)));
        // A scale-up with one instance starting: it counts as 0, (12 + 12 + 0) / 3 = 8 → 6.
        assert_eq!(replicas(3, 4000, 0.1, &[12_000, 12_000], 1), Some((6, 12_000)));
        // A scale-down with one starting: it counts as the target, (1 + 1 + 4) / 3 = 2 → 2 of 3.
        assert_eq!(replicas(3, 4000, 0.1, &[1000, 1000], 1), Some((2, 1000)));
        // Filling the missing one reverses the direction: keep the count.
        assert_eq!(replicas(3, 4000, 0.1, &[4500, 4500], 1), Some((3, 4500)));
        // No metric: nothing to decide.
        assert_eq!(replicas(2, 4000, 0.1, &[], 2), None);
    }

    #[test]
    fn a_scale_down_waits_for_the_window_and_a_scale_up_is_limited_per_period() {
        let mut h = hpa(1, 20, 4.0);
        // First sync at 15 s with 2 instances idle: the window starts at 2, so no scale-down.
        let d = h.sync(15.0, 2, &[0, 0], 0);
        assert_eq!((d.proposed, d.stabilized, d.desired), (0, 2, 2));
        // Load: 2 instances at 40 waiting → 20 proposed; the limit is max(2 + 4, 2 × 2) = 6.
        let d = h.sync(30.0, 2, &[40_000, 40_000], 0);
        assert_eq!((d.proposed, d.desired), (20, 6));
        // 15 s later the period holds no event any more (strictly after the cutoff): the 4
        // starting instances count as 0, ceil(80 / 6 / 4 × 6) = 20, limited to 6 × 2 = 12.
        let d = h.sync(45.0, 6, &[40_000, 40_000], 4);
        assert_eq!((d.proposed, d.desired), (20, 12));
        // Idle again: the window's highest proposal (12) holds the count until it ages out.
        let d = h.sync(60.0, 12, &[0; 12], 0);
        assert_eq!((d.proposed, d.desired), (0, 12));
        let d = h.sync(344.0, 12, &[0; 12], 0);
        assert_eq!(d.desired, 12, "the proposal of 45 s is still in the window at 344 s");
        let d = h.sync(345.0, 12, &[0; 12], 0);
        assert_eq!(d.desired, 1, "down to the minimum once every higher proposal left the window");
    }

    #[test]
    fn flags_are_checked_and_companions_need_autoscaling() {
        let e =
            AutoscaleOptions { max_instances: Some(4), ..Default::default() }.plan(1, 1, 0.0, 30.0, None).unwrap_err();
        assert!(e.to_string().contains("--max-instances") && e.to_string().contains("--autoscale"), "{e}");
        assert_eq!(AutoscaleOptions::default().plan(1, 1, 0.0, 30.0, None).unwrap(), None);
        let p = opts().plan(2, 1, 16e9, 30.0, None).unwrap().unwrap();
        assert_eq!((p.min_instances, p.max_instances, p.initial), (1, 8, 2));
        assert_eq!(p.cold_start.seconds, DEFAULT_ENGINE_START_S + 8.0);
        for (o, says) in [
            (AutoscaleOptions { max_instances: None, ..opts() }, "--max-instances"),
            (AutoscaleOptions { metric: None, ..opts() }, "--scale-metric"),
            (AutoscaleOptions { target: None, ..opts() }, "--scale-target"),
            (AutoscaleOptions { target: Some(0.0), ..opts() }, "--scale-target"),
            (AutoscaleOptions { metric: Some(ScaleMetric::KvUsage), target: Some(80.0), ..opts() }, "fraction"),
            (AutoscaleOptions { min_instances: Some(0), ..opts() }, "scaling to zero"),
            (AutoscaleOptions { min_instances: Some(9), ..opts() }, "--max-instances"),
            (AutoscaleOptions { tolerance: Some(1.0), ..opts() }, "--hpa-tolerance"),
            (AutoscaleOptions { sync_period_s: Some(0.0), ..opts() }, "--hpa-sync-period-s"),
            (AutoscaleOptions { sync_period_s: Some(0.05), ..opts() }, "below 0.1 s"),
            (AutoscaleOptions { cold_start_s: Some(-1.0), ..opts() }, "--cold-start-s"),
            (AutoscaleOptions { cold_start_s: Some(5.0), weights_load_gbps: Some(1.0), ..opts() }, "means nothing"),
            (AutoscaleOptions { weights_load_gbps: Some(0.0), ..opts() }, "--weights-load-gbps"),
        ] {
            let e = o.plan(2, 1, 16e9, 30.0, None).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        for bad in [-1.0, f64::NAN, 1e10] {
            let e = opts().plan(2, 1, 16e9, bad, None).unwrap_err().to_string();
            assert!(e.contains("--drain-timeout-s"), "{e}");
        }
        let e = opts().plan(9, 1, 16e9, 30.0, None).unwrap_err().to_string();
        assert!(e.contains("--instances") && e.contains("between"), "{e}");
        assert_eq!(milli(0.8), 800);
        assert_eq!(milli(0.0001), 1);
        assert_eq!(milli(3.0), 3000);
    }
}
