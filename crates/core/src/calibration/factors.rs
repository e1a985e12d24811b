//! The step-time factors a calibration profile records and a fit searches: their names and
//! bounds ([`FACTORS`], [`WIDE_FACTORS`], the step law's [`LAW_FACTORS`]), the default
//! objectives, the options of a fit ([`FitOptions`]), the
//! factors that ended at a bound of their search ([`at_bounds`]) and each factor's value in
//! words. Data and rules only: the search itself is the lab's.

use crate::cost::{Efficiency, StepLaw};
use std::collections::BTreeMap;

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
    Factor { name: "comm_latency_s", lo: 1e-6, hi: 1e-4 },
    Factor { name: "kernel_floor_s", lo: 1e-6, hi: 1e-4 },
    Factor { name: "eager_layer_launch_s", lo: 1e-5, hi: 5e-3 },
    Factor { name: "sdpa_dispatch_s", lo: 1e-7, hi: 1e-4 },
];

/// The factors that belong to the serving engine rather than to the device, so that a fit of
/// them alone on one GPU's serving runs — the device factors held at a kernel-step profile's —
/// transfers to any GPU ([`crate::calibration::prior::engine_piece`]): host time per step and
/// per scheduled sequence (the engine's scheduler, input preparation and sampler), the
/// per-kernel floor (how many kernels a layer launches: an engine's fused kernels against
/// plain PyTorch's) and the latency of one collective (the engine's all-reduce: a custom
/// one-shot kernel or NCCL's).
pub const ENGINE_FACTORS: &[&str] = &["step_overhead_s", "per_seq_overhead_s", "kernel_floor_s", "comm_latency_s"];

/// The factors that are shares of the device's peaks: GEMM and attention FLOPS, HBM and link
/// bandwidth. An engine piece ([`ENGINE_FACTORS`]) is fitted with these held at a kernel-step
/// profile's.
pub const DEVICE_FACTORS: &[&str] = &["gemm_flops", "attn_flops", "mem_bw", "comm_bw"];

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
    Factor { name: "comm_latency_s", lo: 1e-7, hi: 1e-3 },
    Factor { name: "kernel_floor_s", lo: 1e-7, hi: 1e-3 },
    Factor { name: "eager_layer_launch_s", lo: 1e-6, hi: 0.05 },
    Factor { name: "sdpa_dispatch_s", lo: 1e-7, hi: 1e-3 },
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
pub const NO_LAW: StepLaw =
    StepLaw { step_s: 0.0, per_prefill_token_s: 0.0, per_decode_seq_s: 0.0, per_ctx_token_s: 0.0 };

pub fn get(e: &Efficiency, name: &str) -> f64 {
    match name {
        "gemm_flops" => e.gemm_flops,
        "attn_flops" => e.attn_flops,
        "mem_bw" => e.mem_bw,
        "step_overhead_s" => e.step_overhead_s,
        "per_seq_overhead_s" => e.per_seq_overhead_s,
        "comm_bw" => e.comm_bw,
        "comm_latency_s" => e.comm_latency_s,
        "kernel_floor_s" => e.kernel_floor_s,
        "eager_layer_launch_s" => e.eager_layer_launch_s,
        "sdpa_dispatch_s" => e.sdpa_dispatch_s,
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

pub fn set(e: &mut Efficiency, name: &str, v: f64) {
    match name {
        "gemm_flops" => e.gemm_flops = v,
        "attn_flops" => e.attn_flops = v,
        "mem_bw" => e.mem_bw = v,
        "step_overhead_s" => e.step_overhead_s = v,
        "per_seq_overhead_s" => e.per_seq_overhead_s = v,
        "comm_bw" => e.comm_bw = v,
        "comm_latency_s" => e.comm_latency_s = v,
        "kernel_floor_s" => e.kernel_floor_s = v,
        "eager_layer_launch_s" => e.eager_layer_launch_s = v,
        "sdpa_dispatch_s" => e.sdpa_dispatch_s = v,
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
pub fn value_text(e: &Efficiency, name: &str) -> String {
    let v = get(e, name);
    match name {
        "step_overhead_s" | "step_s" => format!("{:.3} ms per step", v * 1e3),
        "per_seq_overhead_s" | "kernel_floor_s" | "eager_layer_launch_s" | "comm_latency_s" | "sdpa_dispatch_s" => {
            format!("{:.2} µs", v * 1e6)
        }
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
        "comm_latency_s" => "per collective",
        "step_s" => "(device)",
        "per_seq_overhead_s" => "per sequence",
        "kernel_floor_s" => "per kernel",
        "eager_layer_launch_s" => "per layer launched eagerly",
        "sdpa_dispatch_s" => "per attention call dispatched from idle",
        "per_prefill_token_s" => "per prefill token",
        "per_decode_seq_s" => "per decoding sequence",
        "per_ctx_token_s" => "per context token",
        _ => return value_text(e, name),
    };
    format!("{} {what}", value_text(e, name))
}

/// Unbounded coordinate → factor value in (lo, hi), log-logistic.
pub fn to_value(f: &Factor, x: f64) -> f64 {
    let s = 1.0 / (1.0 + (-x).exp());
    (f.lo.ln() + (f.hi.ln() - f.lo.ln()) * s).exp()
}

/// Factor value → unbounded coordinate (clamped just inside the bounds).
pub fn to_coord(f: &Factor, v: f64) -> f64 {
    let s = ((v.ln() - f.lo.ln()) / (f.hi.ln() - f.lo.ln())).clamp(1e-6, 1.0 - 1e-6);
    (s / (1.0 - s)).ln()
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
    /// The factors to fit (`calibrate --fit --factors`), every other one held at its `start`
    /// value whatever the cases constrain; empty: the factors the cases constrain.
    pub only: Vec<&'static str>,
    /// A prior on every fitted factor (`calibrate --fit --prior-sigma`): the objective adds
    /// (ln(value / start) / σ)² for each, one pseudo-measurement of weight 1 saying the factor
    /// is its `start` value (the composed prior) within a factor of e^σ. It keeps a factor near
    /// physics where few cases constrain it and lets many cases move it. A factor whose start
    /// is not inside its bounds (a floor of 0, off) has no prior. `None`: no prior.
    pub prior_sigma: Option<f64>,
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
            only: Vec::new(),
            prior_sigma: None,
        }
    }
}

/// The factor names of `list` (comma-separated) among `bounds`, for `--factors`; an error names
/// one that is not a factor, with the names that are.
pub fn parse_factor_list(list: &str, bounds: &[Factor]) -> std::result::Result<Vec<&'static str>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match bounds.iter().find(|f| f.name == name) {
            Some(f) if !out.contains(&f.name) => out.push(f.name),
            Some(_) => {}
            None => {
                let names: Vec<&str> = bounds.iter().map(|f| f.name).collect();
                return Err(format!("`{name}` is not a factor (factors: {})", names.join(", ")));
            }
        }
    }
    if out.is_empty() {
        return Err("names no factor".to_string());
    }
    Ok(out)
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
}
