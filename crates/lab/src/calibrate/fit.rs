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

use super::kernels::{LoadedSteps, StepSet, Work};
use super::prediction::Prediction;
use argmin::core::{CostFunction, Executor, State};
use argmin::solver::neldermead::NelderMead;
use cachesim_core::calibration::factors::{
    get, set, to_coord, to_value, value_text, Factor, FitOptions, LAW_FACTORS, NO_LAW,
};
use cachesim_core::calibration::profile::Residual;
use cachesim_core::config::RunConfig;
use cachesim_core::cost::Efficiency;
use cachesim_core::engine::DecodeGraphs;
use cachesim_core::error::{Error, Result};
use cachesim_core::workload::Workload;
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
    /// The seeds a case whose sample cannot be rebuilt is simulated under (`workload.seeds`):
    /// it is predicted by each metric's median over them. Empty: one run, at `cfg`'s seed.
    pub seeds: Vec<u64>,
    /// A kernel step case ([`super::kernels`]): its rows are priced by the step-time model
    /// alone, no simulation (`workload` is then a stand-in, unused).
    pub steps: Option<Arc<StepSet>>,
}

impl Target {
    /// A fit target of a kernel step case's rows (`calibrate --fit`): its GPU, model and TP resolved as
    /// `cachesim run` would (raw roofline, no profile), a stand-in workload never simulated.
    pub fn from_steps(case: &LoadedSteps, data: Option<&std::path::Path>) -> Result<Target> {
        Target::of_steps(case.read(data)?)
    }

    /// A fit target of the rows of `set`, run on its GPU by its model at its TP.
    pub fn of_steps(set: StepSet) -> Result<Target> {
        let o = cachesim_core::config::RunOptions {
            gpu: set.gpu.name.clone(),
            model: set.model.name.clone(),
            tp: set.tp,
            calibration: cachesim_core::config::Calibration::None,
            ..Default::default()
        };
        let cfg = cachesim_core::config::resolve(&o)?;
        // A one-request stand-in: a step target is priced by the model alone, never simulated.
        let spec = cachesim_core::workload::gen::RandomSpec {
            num_prompts: 1,
            input_len: 1,
            output_len: 1,
            range_ratio: 1.0,
            vocab: cachesim_core::workload::gen::DEFAULT_VOCAB,
            seed: 0,
        };
        let records = cachesim_core::workload::gen::random(&spec)?;
        let workload = Arc::new(cachesim_core::workload::gen::workload(&set.case, &records)?);
        Ok(Target {
            case: set.case.clone(),
            cfg,
            workload,
            measured: BTreeMap::new(),
            seeds: Vec::new(),
            steps: Some(Arc::new(set)),
        })
    }
}

/// Simulates one target with the factors `eff`: its one run, or its runs under each of its
/// seeds (in parallel) and their medians.
pub fn simulate(t: &Target, eff: Efficiency) -> Result<Prediction> {
    let run = |cfg: &RunConfig| -> Result<Prediction> {
        let mut cfg = cfg.clone();
        cfg.efficiency = eff;
        let keep = cachesim_core::sim::Keep::default();
        Ok(Prediction::of(&cachesim_core::sim::simulate(&t.workload, &cfg, keep)?.summary))
    };
    if t.seeds.is_empty() {
        return run(&t.cfg);
    }
    let runs: Vec<Prediction> =
        t.seeds.par_iter().map(|&s| run(&crate::seeds::with_seed(&t.cfg, s))).collect::<Result<_>>()?;
    Ok(Prediction::median(&runs))
}

/// The rows (case, metric, measured, predicted, error %) of the weighted metrics.
pub fn residuals(targets: &[Target], eff: Efficiency, weights: &BTreeMap<String, f64>) -> Result<Vec<Residual>> {
    let sums: Vec<Option<Result<Prediction>>> =
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
            let predicted = s.get(m).unwrap_or(f64::NAN);
            let error_pct = (predicted - measured) / measured * 100.0;
            rows.push(Residual { case: t.case.clone(), metric: m.clone(), measured, predicted, error_pct });
        }
    }
    Ok(rows)
}

/// ln(predicted / measured); a prediction of zero or NaN counts as a log error of 10.
pub fn log_error(r: &Residual) -> f64 {
    if r.predicted > 0.0 && r.measured > 0.0 {
        (r.predicted / r.measured).ln()
    } else {
        10.0
    }
}

/// Σ weight × [`log_error`]².
fn loss(rows: &[Residual], weights: &BTreeMap<String, f64>) -> f64 {
    rows.iter().map(|r| weights[&r.metric] * log_error(r).powi(2)).sum()
}

struct Problem<'a> {
    targets: &'a [Target],
    weights: &'a BTreeMap<String, f64>,
    factors: Vec<Factor>,
    base: Efficiency,
    /// Per fitted factor, ln of its prior value (`None`: no prior), and the prior's σ.
    prior: Vec<Option<f64>>,
    sigma: f64,
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

    /// Σ (ln(value / prior) / σ)² over the fitted factors with a prior.
    fn prior_penalty(&self, x: &[f64]) -> f64 {
        let pull = |(f, (&xi, p)): (&Factor, (&f64, &Option<f64>))| {
            p.map(|p| ((to_value(f, xi).ln() - p) / self.sigma).powi(2))
        };
        self.factors.iter().zip(x.iter().zip(&self.prior)).filter_map(pull).sum()
    }
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, x: &Self::Param) -> std::result::Result<f64, argmin::core::Error> {
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        let rows = residuals(self.targets, self.efficiency(x), self.weights)
            .map_err(|e| argmin::core::Error::msg(e.to_string()))?;
        Ok(loss(&rows, self.weights) + self.prior_penalty(x))
    }
}

/// A fit's result.
#[derive(Debug, Clone)]
pub struct Fit {
    pub efficiency: Efficiency,
    pub fitted: Vec<&'static str>,
    pub held: Vec<String>,
    /// What the prior ([`FitOptions::prior_sigma`]) pulled, in words; empty without one.
    pub priors: Vec<String>,
    /// Σ weight × ln(predicted / measured)² of the rows, without the prior's pull.
    pub objective: f64,
    pub evaluations: u64,
    pub residuals: Vec<Residual>,
}

impl Fit {
    /// The profile's `[fit]` record of this fit under `o`, made by `command` on `cases`, its
    /// prior among the assumptions; what only some fits have (the start factors, other
    /// assumptions, leave-one-out rows) is left empty.
    pub fn record(
        &self,
        command: String,
        cases: Vec<String>,
        o: &FitOptions,
    ) -> cachesim_core::calibration::profile::FitInfo {
        cachesim_core::calibration::profile::FitInfo {
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
            only: o.only.iter().map(|s| s.to_string()).collect(),
            prior_sigma: o.prior_sigma,
            assumptions: self.priors.clone(),
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
    if o.prior_sigma.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
        return Err(Error::invalid("--prior-sigma", "the prior's width must be positive and finite"));
    }
    if let Some(n) = o.hold.iter().find(|n| !o.bounds().iter().any(|f| f.name == **n)) {
        return Err(Error::invalid("fit", format!("cannot hold `{n}`: not a factor")));
    }
    let rows = residuals(targets, o.start, &o.weights)?;
    if rows.is_empty() {
        return Err(Error::invalid("--weights", "the cases measure none of the weighted metrics"));
    }
    let serving = targets.iter().any(|t| t.steps.is_none());
    let steps: Vec<&StepSet> = targets.iter().filter_map(|t| t.steps.as_deref()).collect();
    let tp = targets.iter().any(|t| t.cfg.tp > 1 && t.steps.as_ref().is_none_or(|s| !s.rank));
    // Whether a weighted kernel row's work is of a kind.
    let weighted = |run: fn(&Work) -> bool| {
        steps.iter().any(|s| s.rows.iter().any(|r| run(&r.work) && o.weights.contains_key(r.metric)))
    };
    // Eager launches are timed by the kernel steps' eager rows, and by a serving run whose engine
    // runs some decode batches without a CUDA graph (`DecodeGraphs`).
    let eager = weighted(|w| matches!(w, Work::Step { eager: true, .. }))
        || targets.iter().any(|t| t.steps.is_none() && t.cfg.engine.decode_graphs != DecodeGraphs::Padded);
    // Attention runs in every serving step and kernel step, never in a GEMM row.
    let attention = serving || weighted(Work::runs_attention);
    // Single attention-kernel rows, weighted: what times SDPA's host dispatch.
    let sdpa = weighted(|w| matches!(w, Work::Attention(_)));
    // GEMMs run in every serving step, kernel step and GEMM row, never in an attention row.
    let gemms = serving || weighted(Work::runs_gemms);
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
                    n if !o.only.is_empty() => match o.only.contains(&n) {
                        true => return true,
                        false => format!("held at the start's {} (--factors)", value_text(&o.start, n)),
                    },
                    "comm_bw" | "comm_latency_s" if !tp => "no case runs tensor parallel".to_string(),
                    "step_overhead_s" | "per_seq_overhead_s" if !serving => {
                        "only kernel step cases, which time the device alone".to_string()
                    }
                    "kernel_floor_s" if steps.is_empty() => {
                        format!("no kernel step case: kept at the start's {:.2} µs", o.start.kernel_floor_s * 1e6)
                    }
                    "attn_flops" if !attention => "only GEMM rows, which run no attention".to_string(),
                    "gemm_flops" if !gemms => "only attention-kernel rows, which run no GEMM".to_string(),
                    // Only kernel rows read it: a serving fit holds it at 0 without a word.
                    "sdpa_dispatch_s" if steps.is_empty() => return false,
                    "sdpa_dispatch_s" if !sdpa => "no single attention-kernel row (no step runs it)".to_string(),
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
    if !sdpa {
        base.sdpa_dispatch_s = 0.0;
    }
    let inside = |f: &Factor| start_inside(&base, f);
    let (prior, priors) = match o.prior_sigma {
        Some(sigma) => {
            let (with, without): (Vec<&Factor>, Vec<&Factor>) = factors.iter().partition(|f| inside(f).is_some());
            let names = |fs: &[&Factor]| fs.iter().map(|f| f.name).collect::<Vec<_>>().join(", ");
            let mut words = vec![format!(
                "prior (--prior-sigma {sigma}): {} pulled toward the start's values, each within a factor of e^σ = {:.2}",
                names(&with),
                sigma.exp()
            )];
            if !without.is_empty() {
                words.push(format!("no prior on {}: the start's value is outside its bounds", names(&without)));
            }
            (factors.iter().map(|f| inside(f).map(f64::ln)).collect(), words)
        }
        None => (vec![None; factors.len()], Vec::new()),
    };
    let problem = Problem {
        targets,
        weights: &o.weights,
        factors: factors.clone(),
        base,
        prior,
        sigma: o.prior_sigma.unwrap_or(1.0),
        evaluations: 0.into(),
    };
    // A start outside a factor's bounds (a floor of 0 = off) starts from the middle of them.
    let x0: Vec<f64> = factors.iter().map(|f| inside(f).map_or(0.0, |v| to_coord(f, v))).collect();
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
        priors,
        objective: loss(&residuals, &o.weights),
        evaluations,
        residuals,
    })
}

/// `f`'s value in `start` when it lies within `f`'s bounds: where the search starts, and what
/// the prior pulls toward (a start outside, such as a floor of 0 = off, gives neither).
pub fn start_inside(start: &Efficiency, f: &Factor) -> Option<f64> {
    let v = get(start, f.name);
    (f.lo..=f.hi).contains(&v).then_some(v)
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

/// Root mean square of [`log_error`].
pub fn rms_log_error(rows: &[Residual]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    let s: f64 = rows.iter().map(|r| log_error(r).powi(2)).sum();
    (s / rows.len() as f64).sqrt()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cachesim_core::catalog::Dtype;

    /// A target of BF16 GEMMs on one H200 ([M, K, N], measured µs): priced by the model alone.
    pub(crate) fn gemm_target(rows: &[([u64; 3], f64)]) -> Target {
        use super::super::kernels::{tests::h200_8b, StepRow};
        let rows = rows
            .iter()
            .map(|&(mkn, measured)| StepRow {
                metric: "gemm_bf16_us",
                shape: format!("M={}", mkn[0]),
                work: Work::Gemm { mkn, dtype: Dtype::Bf16 },
                measured,
            })
            .collect();
        Target::of_steps(h200_8b(rows)).unwrap()
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

    /// One compute-bound BF16 GEMM (8,192 × 4,096 × 4,096 on an H200, floor 0), fitted on
    /// `gemm_flops` alone: its time is FLOPs / (peak × g), so the row alone wants the g that
    /// prices it exactly, g_d; with a prior g₀ of width σ the optimum of
    /// (ln g − ln g_d)² + ((ln g − ln g₀) / σ)² is ln g = (ln g_d + ln g₀ / σ²) / (1 + 1 / σ²).
    /// Measured at g_d = 0.8 with the prior at 0.4: σ = 1 gives the geometric mean √0.32, a
    /// wide σ the row's 0.8, a narrow one the prior's 0.4.
    #[test]
    fn a_prior_pulls_a_factor_by_its_width() {
        let mkn = [8192, 4096, 4096];
        let want = Efficiency { gemm_flops: 0.8, kernel_floor_s: 0.0, ..Efficiency::default() };
        let h200 = cachesim_core::catalog::gpu("h200", None).unwrap();
        let targets = [gemm_target(&[(mkn, cachesim_core::cost::gemm_s(&h200, &want, mkn, Dtype::Bf16) * 1e6)])];
        let o = FitOptions {
            weights: [("gemm_bf16_us".to_string(), 1.0)].into_iter().collect(),
            max_iters: 400,
            start: Efficiency { gemm_flops: 0.4, kernel_floor_s: 0.0, ..Efficiency::default() },
            only: vec!["gemm_flops"],
            ..FitOptions::default()
        };
        let fitted = |prior_sigma: Option<f64>| fit(&targets, &FitOptions { prior_sigma, ..o.clone() }).unwrap();
        let free = fitted(None);
        assert!((free.efficiency.gemm_flops - 0.8).abs() < 1e-3, "{}", free.efficiency.gemm_flops);
        assert!(free.priors.is_empty());
        for (sigma, g) in [
            (1.0, 0.32f64.sqrt()),
            (10.0, (0.8f64.ln() * 100.0 + 0.4f64.ln()).exp().powf(1.0 / 101.0)),
            (0.1, 0.4f64 * 2f64.powf(1.0 / 101.0)),
        ] {
            let f = fitted(Some(sigma));
            assert!(
                (f.efficiency.gemm_flops / g - 1.0).abs() < 2e-3,
                "σ {sigma}: {} want {g}",
                f.efficiency.gemm_flops
            );
            assert!(f.priors[0].contains("gemm_flops pulled toward"), "{:?}", f.priors);
            // The objective is the rows' alone: ln(g / g_d)².
            assert!((f.objective - (f.efficiency.gemm_flops / 0.8).ln().powi(2)).abs() < 1e-9);
        }
        // A start outside the bounds has no prior: the row alone decides.
        let outside =
            FitOptions { start: Efficiency { gemm_flops: 0.0, ..o.start }, prior_sigma: Some(0.1), ..o.clone() };
        let f = fit(&targets, &outside).unwrap();
        assert!((f.efficiency.gemm_flops - 0.8).abs() < 1e-2, "{}", f.efficiency.gemm_flops);
        assert!(f.priors[1].contains("no prior on gemm_flops"), "{:?}", f.priors);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = fit(&targets, &FitOptions { prior_sigma: Some(bad), ..o.clone() }).unwrap_err().to_string();
            assert!(e.contains("--prior-sigma"), "{e}");
        }
    }
}
