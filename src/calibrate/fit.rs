//! Fitting the step-time factors ([`Efficiency`]) to real runs: every evaluation simulates every
//! case in full (in parallel, results combined in case order, so a fit is deterministic), and
//! Nelder–Mead (`argmin`) minimises Σ weight × ln(predicted / measured)² over the chosen metrics.
//! Kernel step cases ([`super::kernels`]) are priced by the step-time model alone, row by row,
//! in the same objective. Each factor lives in its bounds through a log-logistic transform; a
//! factor no case constrains (communication without tensor parallelism, host overheads with
//! only step cases, the per-kernel floor without them) is held at its start value and said so.
//! For a setup whose GPU and model are unknown (`--unknown-hardware`) the factors are instead
//! the four coefficients of a measured step law ([`StepLaw`], [`LAW_FACTORS`]).
//! Leave-one-out refits without each case and predicts it: the honest error.

use super::profile::Residual;
use crate::config::RunConfig;
use crate::cost::{Efficiency, StepLaw};
use crate::error::{Error, Result};
use crate::metrics::Summary;
use crate::workload::Workload;
use argmin::core::{CostFunction, Executor, State};
use argmin::solver::neldermead::NelderMead;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One case ready to simulate: its resolved configuration and workload, and its measurements.
#[derive(Debug, Clone)]
pub struct Target {
    pub case: String,
    pub cfg: RunConfig,
    pub workload: Arc<Workload>,
    /// Measured metrics by sglang key (the skipped ones already removed).
    pub measured: BTreeMap<String, f64>,
    /// A kernel step case ([`super::kernels`]): its rows are priced by the step-time model
    /// alone, no simulation (`workload` is then a stand-in, unused).
    pub steps: Option<Arc<super::kernels::StepSet>>,
}

/// The default objective: output throughput, median TTFT, TPOT and E2E latency, weight 1 each.
pub fn default_weights() -> BTreeMap<String, f64> {
    ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"]
        .iter()
        .map(|m| (m.to_string(), 1.0))
        .collect()
}

/// A fitted factor: its name and bounds (all positive, searched in log space).
#[derive(Debug, Clone, Copy)]
pub struct Factor {
    pub name: &'static str,
    pub lo: f64,
    pub hi: f64,
}

/// Every factor with its bounds.
pub const FACTORS: &[Factor] = &[
    Factor { name: "gemm_flops", lo: 0.15, hi: 1.0 },
    Factor { name: "attn_flops", lo: 0.05, hi: 1.0 },
    Factor { name: "mem_bw", lo: 0.3, hi: 1.0 },
    Factor { name: "step_overhead_s", lo: 1e-4, hi: 0.03 },
    Factor { name: "per_seq_overhead_s", lo: 1e-7, hi: 3e-4 },
    Factor { name: "comm_bw", lo: 0.1, hi: 1.0 },
    Factor { name: "kernel_floor_s", lo: 1e-6, hi: 1e-4 },
    Factor { name: "eager_layer_launch_s", lo: 1e-5, hi: 5e-3 },
];

/// The bounds of `--wide-bounds`: for a run whose GPU and model are known but whose engine runs
/// far from their physics (the V100 seed run: an unstated worker engine, a vision model run
/// eagerly), the factors may leave the physical ranges.
pub const WIDE_FACTORS: &[Factor] = &[
    Factor { name: "gemm_flops", lo: 0.01, hi: 1.0 },
    Factor { name: "attn_flops", lo: 0.01, hi: 1.0 },
    Factor { name: "mem_bw", lo: 0.01, hi: 1.0 },
    Factor { name: "step_overhead_s", lo: 1e-4, hi: 1.0 },
    Factor { name: "per_seq_overhead_s", lo: 1e-7, hi: 0.01 },
    Factor { name: "comm_bw", lo: 0.01, hi: 1.0 },
    Factor { name: "kernel_floor_s", lo: 1e-7, hi: 1e-3 },
    Factor { name: "eager_layer_launch_s", lo: 1e-6, hi: 0.05 },
];

/// The coefficients of the measured step law ([`StepLaw`]) an unknown-hardware fit
/// (`--unknown-hardware`) searches instead of [`FACTORS`]: the GPU and model are stand-ins (for
/// the KV pool and the weights' share of memory), so no efficiency of theirs means anything.
pub const LAW_FACTORS: &[Factor] = &[
    Factor { name: "step_s", lo: 1e-4, hi: 2.0 },
    Factor { name: "per_prefill_token_s", lo: 1e-8, hi: 1e-2 },
    Factor { name: "per_decode_seq_s", lo: 1e-7, hi: 0.1 },
    Factor { name: "per_ctx_token_s", lo: 1e-11, hi: 1e-4 },
];

/// The default objective of an unknown-hardware fit: the default metrics, the report's tails and
/// means of TTFT and ITL and its peak output throughput. Four coefficients need more than the
/// medians (the seed sweep's report has no E2E, so three): the ITL tail is the steps that carry
/// prefills, the TTFT mean and tail the queue behind them, and the busiest second's tokens the
/// full decode batch alone — with the median ITL (steps at that batch with and without a
/// prefill) it separates the per-step from the per-sequence term, which the medians of a run
/// held at one batch size cannot.
pub fn unknown_hardware_weights() -> BTreeMap<String, f64> {
    let extra = ["mean_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "peak_output_throughput"];
    default_weights().into_iter().chain(extra.iter().map(|m| (m.to_string(), 1.0))).collect()
}

/// A law with every coefficient 0: outside [`LAW_FACTORS`]' bounds, so a fit starts from the
/// middle of them.
const NO_LAW: StepLaw = StepLaw { step_s: 0.0, per_prefill_token_s: 0.0, per_decode_seq_s: 0.0, per_ctx_token_s: 0.0 };

fn get(e: &Efficiency, name: &str) -> f64 {
    match name {
        "gemm_flops" => e.gemm_flops,
        "attn_flops" => e.attn_flops,
        "mem_bw" => e.mem_bw,
        "step_overhead_s" => e.step_overhead_s,
        "per_seq_overhead_s" => e.per_seq_overhead_s,
        "comm_bw" => e.comm_bw,
        "kernel_floor_s" => e.kernel_floor_s,
        "eager_layer_launch_s" => e.eager_layer_launch_s,
        law => {
            let l = e.law.unwrap_or(NO_LAW);
            match law {
                "step_s" => l.step_s,
                "per_prefill_token_s" => l.per_prefill_token_s,
                "per_decode_seq_s" => l.per_decode_seq_s,
                "per_ctx_token_s" => l.per_ctx_token_s,
                _ => unreachable!("factor names are the constants above"),
            }
        }
    }
}

fn set(e: &mut Efficiency, name: &str, v: f64) {
    match name {
        "gemm_flops" => e.gemm_flops = v,
        "attn_flops" => e.attn_flops = v,
        "mem_bw" => e.mem_bw = v,
        "step_overhead_s" => e.step_overhead_s = v,
        "per_seq_overhead_s" => e.per_seq_overhead_s = v,
        "comm_bw" => e.comm_bw = v,
        "kernel_floor_s" => e.kernel_floor_s = v,
        "eager_layer_launch_s" => e.eager_layer_launch_s = v,
        law => {
            let l = e.law.get_or_insert(NO_LAW);
            match law {
                "step_s" => l.step_s = v,
                "per_prefill_token_s" => l.per_prefill_token_s = v,
                "per_decode_seq_s" => l.per_decode_seq_s = v,
                "per_ctx_token_s" => l.per_ctx_token_s = v,
                _ => unreachable!("factor names are the constants above"),
            }
        }
    }
}

/// A factor's value in words, with its unit (as held factors are recorded in a profile).
fn value_text(e: &Efficiency, name: &str) -> String {
    let v = get(e, name);
    match name {
        "step_overhead_s" | "step_s" => format!("{:.3} ms per step", v * 1e3),
        "per_seq_overhead_s" | "kernel_floor_s" | "eager_layer_launch_s" => format!("{:.2} µs", v * 1e6),
        "per_prefill_token_s" | "per_decode_seq_s" | "per_ctx_token_s" => format!("{:.4} µs", v * 1e6),
        _ => format!("{v:.3}"),
    }
}

/// A factor's value and what it is a share or a time of, for the console: `0.722 of peak
/// FLOPS`, `22.73 µs per kernel`.
pub fn factor_text(e: &Efficiency, name: &str) -> String {
    let what = match name {
        "gemm_flops" | "attn_flops" => "of peak FLOPS",
        "mem_bw" => "of HBM bandwidth",
        "comm_bw" => "of link bandwidth",
        "step_s" => "(device)",
        "per_seq_overhead_s" => "per sequence",
        "kernel_floor_s" => "per kernel",
        "eager_layer_launch_s" => "per layer launched eagerly",
        "per_prefill_token_s" => "per prefill token",
        "per_decode_seq_s" => "per decoding sequence",
        "per_ctx_token_s" => "per context token",
        _ => return value_text(e, name),
    };
    format!("{} {what}", value_text(e, name))
}

/// Unbounded coordinate → factor value in (lo, hi), log-logistic.
fn to_value(f: &Factor, x: f64) -> f64 {
    let s = 1.0 / (1.0 + (-x).exp());
    (f.lo.ln() + (f.hi.ln() - f.lo.ln()) * s).exp()
}

/// Factor value → unbounded coordinate (clamped just inside the bounds).
fn to_coord(f: &Factor, v: f64) -> f64 {
    let s = ((v.ln() - f.lo.ln()) / (f.hi.ln() - f.lo.ln())).clamp(1e-6, 1.0 - 1e-6);
    (s / (1.0 - s)).ln()
}

/// Simulates one target with the factors `eff`.
pub fn simulate(t: &Target, eff: Efficiency) -> Result<Summary> {
    let mut cfg = t.cfg.clone();
    cfg.efficiency = eff;
    let keep = crate::sim::Keep { steps: false, tokens: false, schedule: false };
    Ok(crate::sim::simulate(&t.workload, &cfg, keep)?.summary)
}

/// The value of a metric in a summary, by sglang key.
pub fn metric(s: &Summary, key: &str) -> Option<f64> {
    serde_json::to_value(s).ok()?.get(key)?.as_f64()
}

/// The rows (case, metric, measured, predicted, error %) of the weighted metrics.
pub fn residuals(targets: &[Target], eff: Efficiency, weights: &BTreeMap<String, f64>) -> Result<Vec<Residual>> {
    let sums: Vec<Option<Result<Summary>>> =
        targets.par_iter().map(|t| t.steps.is_none().then(|| simulate(t, eff))).collect();
    let mut rows = Vec::new();
    for (t, s) in targets.iter().zip(sums) {
        let Some(s) = s else {
            rows.extend(t.steps.as_ref().map(|k| k.residuals(eff, weights)).unwrap_or_default());
            continue;
        };
        let s = s?;
        for (m, &measured) in &t.measured {
            if !weights.contains_key(m) {
                continue;
            }
            let predicted = metric(&s, m).unwrap_or(f64::NAN);
            let error_pct = (predicted - measured) / measured * 100.0;
            rows.push(Residual { case: t.case.clone(), metric: m.clone(), measured, predicted, error_pct });
        }
    }
    Ok(rows)
}

/// Σ weight × ln(predicted / measured)²; a prediction of zero or NaN counts as a log error of 10.
fn loss(rows: &[Residual], weights: &BTreeMap<String, f64>) -> f64 {
    rows.iter()
        .map(|r| {
            let e = if r.predicted > 0.0 && r.measured > 0.0 { (r.predicted / r.measured).ln() } else { 10.0 };
            weights[&r.metric] * e * e
        })
        .sum()
}

struct Problem<'a> {
    targets: &'a [Target],
    weights: &'a BTreeMap<String, f64>,
    factors: Vec<Factor>,
    base: Efficiency,
    evaluations: AtomicU64,
}

impl Problem<'_> {
    fn efficiency(&self, x: &[f64]) -> Efficiency {
        let mut e = self.base;
        for (f, &xi) in self.factors.iter().zip(x) {
            set(&mut e, f.name, to_value(f, xi));
        }
        e
    }
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, x: &Self::Param) -> std::result::Result<f64, argmin::core::Error> {
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        let rows = residuals(self.targets, self.efficiency(x), self.weights)
            .map_err(|e| argmin::core::Error::msg(e.to_string()))?;
        Ok(loss(&rows, self.weights))
    }
}

/// Options of a fit.
#[derive(Debug, Clone)]
pub struct FitOptions {
    pub weights: BTreeMap<String, f64>,
    /// Nelder–Mead iterations at most.
    pub max_iters: u64,
    /// Where the search starts and what held factors keep.
    pub start: Efficiency,
    /// Fit the step law's [`LAW_FACTORS`] instead of the roofline's factors (the GPU and model
    /// are stand-ins).
    pub unknown_hardware: bool,
    /// Search the roofline's factors within [`WIDE_FACTORS`] instead of [`FACTORS`].
    pub wide_bounds: bool,
    /// Factors (names of [`FACTORS`], or of [`LAW_FACTORS`] with `unknown_hardware`) held at
    /// their `start` values, not fitted (e.g. a fit of the device factors alone that keeps a
    /// profile's host overheads).
    pub hold: Vec<&'static str>,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            weights: default_weights(),
            max_iters: 150,
            start: Efficiency::default(),
            unknown_hardware: false,
            wide_bounds: false,
            hold: Vec::new(),
        }
    }
}

impl FitOptions {
    /// The flag that ties a fit's factors to its own setup, so that they never transfer to another
    /// case: `--unknown-hardware` (a step law) or `--wide-bounds`; `None` for a physical fit.
    pub fn setup_bound_flag(&self) -> Option<&'static str> {
        if self.unknown_hardware {
            Some("--unknown-hardware")
        } else if self.wide_bounds {
            Some("--wide-bounds")
        } else {
            None
        }
    }

    /// The factors and bounds the fit searches: the step law's, the widened ones
    /// (`--wide-bounds`) or the physical ones.
    pub fn bounds(&self) -> &'static [Factor] {
        match (self.unknown_hardware, self.wide_bounds) {
            (true, _) => LAW_FACTORS,
            (false, true) => WIDE_FACTORS,
            (false, false) => FACTORS,
        }
    }
}

/// The options a profile was fitted with, from its `fit` record: its weights, `max_iters` and
/// `unknown_hardware` and `wide_bounds` (for a record written before those were kept, the flags
/// of its `command`: `--max-iters N`, `--unknown-hardware`, `--wide-bounds`; absent, the
/// defaults), searching from the default factors as `calibrate --fit` does. A refit with these
/// options on the same cases reproduces the profile.
pub fn options_of(info: &super::profile::FitInfo) -> FitOptions {
    let words: Vec<&str> = info.command.split_whitespace().collect();
    let flag_value = |flag: &str| words.windows(2).find(|w| w[0] == flag).map(|w| w[1]);
    let max_iters = info
        .max_iters
        .or_else(|| flag_value("--max-iters").and_then(|v| v.parse().ok()))
        .unwrap_or(FitOptions::default().max_iters);
    let unknown_hardware = info.unknown_hardware.unwrap_or_else(|| words.contains(&"--unknown-hardware"));
    let wide_bounds = info.wide_bounds.unwrap_or_else(|| words.contains(&"--wide-bounds"));
    let weights = match info.weights.is_empty() {
        false => info.weights.clone(),
        true if unknown_hardware => unknown_hardware_weights(),
        true => default_weights(),
    };
    FitOptions {
        weights,
        max_iters,
        start: info.start.unwrap_or_default(),
        unknown_hardware,
        wide_bounds,
        hold: Vec::new(),
    }
}

/// The fitted factors of `e` that ended within 1 % of a bound of `o`'s search, each with the
/// side and the bound: the figures would have pushed them further, so something the model
/// leaves out is priced into them.
fn bound_hits<'a>(
    e: &'a Efficiency,
    fitted: &'a [impl AsRef<str>],
    o: &FitOptions,
) -> impl Iterator<Item = (&'static Factor, &'static str, f64)> + 'a {
    o.bounds().iter().filter(|f| fitted.iter().any(|n| n.as_ref() == f.name)).filter_map(|f| {
        let v = get(e, f.name);
        [("lower", f.lo), ("upper", f.hi)]
            .into_iter()
            .find(|(_, b)| (v.ln() - b.ln()).abs() < 0.01)
            .map(|(side, bound)| (f, side, bound))
    })
}

/// [`bound_hits`] in words: `"mem_bw 1.000 at its upper bound 1"`.
pub fn at_bounds(e: &Efficiency, fitted: &[impl AsRef<str>], o: &FitOptions) -> Vec<String> {
    bound_hits(e, fitted, o)
        .map(|(f, side, bound)| format!("{} {} at its {side} bound {bound}", f.name, value_text(e, f.name)))
        .collect()
}

/// The names of [`bound_hits`].
pub fn names_at_bounds(e: &Efficiency, fitted: &[impl AsRef<str>], o: &FitOptions) -> Vec<&'static str> {
    bound_hits(e, fitted, o).map(|(f, ..)| f.name).collect()
}

/// A fit's result.
#[derive(Debug, Clone)]
pub struct Fit {
    pub efficiency: Efficiency,
    pub fitted: Vec<&'static str>,
    pub held: Vec<String>,
    pub objective: f64,
    pub evaluations: u64,
    pub residuals: Vec<Residual>,
}

impl Fit {
    /// The profile's `[fit]` record of this fit under `o`, made by `command` on `cases`; what
    /// only some fits have (the start factors, assumptions, leave-one-out rows) is left empty.
    pub fn record(&self, command: String, cases: Vec<String>, o: &FitOptions) -> super::profile::FitInfo {
        super::profile::FitInfo {
            command,
            cases,
            weights: o.weights.clone(),
            fitted: self.fitted.iter().map(|s| s.to_string()).collect(),
            held: self.held.clone(),
            objective: self.objective,
            rms_log_error: rms_log_error(&self.residuals),
            median_abs_error_pct: median_abs_error(&self.residuals).unwrap_or(0.0),
            evaluations: self.evaluations,
            max_iters: Some(o.max_iters),
            unknown_hardware: Some(o.unknown_hardware),
            wide_bounds: o.wide_bounds.then_some(true),
            residuals: self.residuals.clone(),
            ..Default::default()
        }
    }
}

/// Fits the factors to `targets`.
pub fn fit(targets: &[Target], o: &FitOptions) -> Result<Fit> {
    if targets.is_empty() {
        return Err(Error::invalid("--cases", "no expressible case to fit on"));
    }
    if o.weights.values().any(|w| !(w.is_finite() && *w >= 0.0)) {
        return Err(Error::invalid("--weights", "weights must be finite and not negative"));
    }
    if let Some(n) = o.hold.iter().find(|n| !o.bounds().iter().any(|f| f.name == **n)) {
        return Err(Error::invalid("fit", format!("cannot hold `{n}`: not a factor")));
    }
    let rows = residuals(targets, o.start, &o.weights)?;
    if rows.is_empty() {
        return Err(Error::invalid("--weights", "the cases measure none of the weighted metrics"));
    }
    let serving = targets.iter().any(|t| t.steps.is_none());
    let steps: Vec<&super::kernels::StepSet> = targets.iter().filter_map(|t| t.steps.as_deref()).collect();
    let tp = targets.iter().any(|t| t.cfg.tp > 1 && t.steps.as_ref().is_none_or(|s| !s.rank));
    let eager = steps.iter().any(|s| s.rows.iter().any(|r| r.eager && o.weights.contains_key(r.metric)));
    // Attention runs in every serving step and kernel step, never in a GEMM row.
    let attention =
        serving || steps.iter().any(|s| s.rows.iter().any(|r| r.gemm.is_none() && o.weights.contains_key(r.metric)));
    let mut held = Vec::new();
    let hold = |f: &Factor, held: &mut Vec<String>| {
        let keep = o.hold.contains(&f.name);
        if keep {
            held.push(format!("{}: held at the start's {}", f.name, value_text(&o.start, f.name)));
        }
        !keep
    };
    let mut base = o.start;
    let factors: Vec<Factor> = if o.unknown_hardware {
        // The law times the whole step: no roofline factor and no host overhead is fitted.
        held.push(
            "roofline factors: the step law prices the whole step (--unknown-hardware); host overheads 0".to_string(),
        );
        base.step_overhead_s = 0.0;
        base.per_seq_overhead_s = 0.0;
        base.eager_layer_launch_s = 0.0;
        base.law = Some(base.law.unwrap_or(NO_LAW));
        LAW_FACTORS.iter().copied().filter(|f| hold(f, &mut held)).collect()
    } else {
        base.law = None;
        o.bounds()
            .iter()
            .copied()
            .filter(|f| {
                let why = match f.name {
                    n if o.hold.contains(&n) => return hold(f, &mut held),
                    "comm_bw" if !tp => "no case runs tensor parallel".to_string(),
                    "step_overhead_s" | "per_seq_overhead_s" if !serving => {
                        "only kernel step cases, which time the device alone".to_string()
                    }
                    "kernel_floor_s" if steps.is_empty() => {
                        format!("no kernel step case: kept at the start's {:.2} µs", o.start.kernel_floor_s * 1e6)
                    }
                    "attn_flops" if !attention => "only GEMM rows, which run no attention".to_string(),
                    "eager_layer_launch_s" if !eager => {
                        "no eager kernel step row (serving runs never use it)".to_string()
                    }
                    _ => return true,
                };
                held.push(format!("{}: {why}", f.name));
                false
            })
            .collect()
    };
    // Without eager rows the eager launch time means nothing: not carried into the profile.
    if !eager {
        base.eager_layer_launch_s = 0.0;
    }
    let problem = Problem { targets, weights: &o.weights, factors: factors.clone(), base, evaluations: 0.into() };
    // A start outside a factor's bounds (a floor of 0 = off) starts from the middle of them.
    let x0: Vec<f64> = factors
        .iter()
        .map(|f| {
            let v = get(&base, f.name);
            if (f.lo..=f.hi).contains(&v) {
                to_coord(f, v)
            } else {
                0.0
            }
        })
        .collect();
    let mut simplex = vec![x0.clone()];
    for i in 0..x0.len() {
        let mut x = x0.clone();
        x[i] += if x[i] > 0.0 { -1.0 } else { 1.0 };
        simplex.push(x);
    }
    let solver = NelderMead::new(simplex).with_sd_tolerance(1e-5).map_err(|e| Error::invalid("fit", e.to_string()))?;
    let res = Executor::new(problem, solver)
        .configure(|s| s.max_iters(o.max_iters))
        .run()
        .map_err(|e| Error::invalid("fit", e.to_string()))?;
    let best = res.state().get_best_param().cloned().unwrap_or(x0);
    let problem = &res.problem.problem.as_ref().expect("the executor keeps the problem");
    let efficiency = problem.efficiency(&best);
    let evaluations = problem.evaluations.load(Ordering::Relaxed);
    let residuals = residuals(targets, efficiency, &o.weights)?;
    Ok(Fit {
        efficiency,
        fitted: factors.iter().map(|f| f.name).collect(),
        held,
        objective: loss(&residuals, &o.weights),
        evaluations,
        residuals,
    })
}

/// Leave-one-out: for each target, fit on the others and predict it (empty with one target).
pub fn leave_one_out(targets: &[Target], o: &FitOptions) -> Result<Vec<Residual>> {
    if targets.len() < 2 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for i in 0..targets.len() {
        let rest: Vec<Target> = targets.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, t)| t.clone()).collect();
        let f = fit(&rest, o)?;
        out.extend(residuals(std::slice::from_ref(&targets[i]), f.efficiency, &o.weights)?);
    }
    Ok(out)
}

/// Median of |error %| of rows (`None` when empty).
pub fn median_abs_error(rows: &[Residual]) -> Option<f64> {
    let mut e: Vec<f64> = rows.iter().map(|r| r.error_pct.abs()).collect();
    if e.is_empty() {
        return None;
    }
    e.sort_by(f64::total_cmp);
    let n = e.len();
    Some(if n % 2 == 1 { e[n / 2] } else { (e[n / 2 - 1] + e[n / 2]) / 2.0 })
}

/// Root mean square of ln(predicted / measured).
pub fn rms_log_error(rows: &[Residual]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    let s: f64 =
        rows.iter().map(|r| if r.predicted > 0.0 { (r.predicted / r.measured).ln().powi(2) } else { 100.0 }).sum();
    (s / rows.len() as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transform_round_trips_inside_the_bounds() {
        for f in FACTORS.iter().chain(WIDE_FACTORS) {
            for v in [f.lo * 1.05, (f.lo * f.hi).sqrt(), f.hi * 0.95] {
                let back = to_value(f, to_coord(f, v));
                assert!((back / v - 1.0).abs() < 1e-9, "{} {v} {back}", f.name);
            }
            assert!(to_value(f, -50.0) >= f.lo * (1.0 - 1e-12) && to_value(f, 50.0) <= f.hi * (1.0 + 1e-12));
        }
    }

    #[test]
    fn options_come_from_the_record_else_the_command() {
        let mut info = super::super::profile::FitInfo {
            command: "cachesim calibrate --fit --cases 'x' --out p.toml --max-iters 300 --unknown-hardware".into(),
            ..Default::default()
        };
        let o = options_of(&info);
        assert_eq!((o.max_iters, o.unknown_hardware, o.wide_bounds), (300, true, false));
        assert_eq!(o.weights, unknown_hardware_weights());
        let wide = super::super::profile::FitInfo {
            command: "cachesim calibrate --fit --wide-bounds".into(),
            ..Default::default()
        };
        let o = options_of(&wide);
        assert_eq!((o.unknown_hardware, o.wide_bounds), (false, true));
        assert_eq!(o.weights, default_weights());
        info.max_iters = Some(20);
        info.unknown_hardware = Some(false);
        info.weights = [("median_ttft_ms".to_string(), 2.0)].into_iter().collect();
        let o = options_of(&info);
        assert_eq!((o.max_iters, o.unknown_hardware, o.weights.len()), (20, false, 1));
        let o = options_of(&Default::default());
        assert_eq!((o.max_iters, o.unknown_hardware), (150, false));
    }

    #[test]
    fn median_and_rms_by_hand() {
        let r = |p: f64, m: f64| Residual {
            case: "c".into(),
            metric: "m".into(),
            measured: m,
            predicted: p,
            error_pct: (p - m) / m * 100.0,
        };
        let rows = [r(110.0, 100.0), r(50.0, 100.0), r(100.0, 100.0)];
        assert!((median_abs_error(&rows).unwrap() - 10.0).abs() < 1e-9);
        let want = ((1.1f64.ln().powi(2) + 0.5f64.ln().powi(2)) / 3.0).sqrt();
        assert!((rms_log_error(&rows) - want).abs() < 1e-12);
        assert_eq!(median_abs_error(&[]), None);
    }
}
