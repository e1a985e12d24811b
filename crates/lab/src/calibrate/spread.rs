//! How well a fit's cases determine each fitted factor: the standard error of ln(factor) from
//! the Gauss–Newton approximation at the optimum. Each residual is √weight × ln(predicted /
//! measured); its derivative in every factor's logarithm is taken by central differences
//! (two evaluations of every case per factor, ±5 % around the fitted value); the covariance is
//! s² (JᵀJ + P)⁻¹, with s² the rows' Σ r² over their degrees of freedom and P the prior's
//! curvature (1/σ² per factor it pulls, [`FitOptions::prior_sigma`]). Correlations count: two
//! factors the cases cannot tell apart (host time per step and per sequence over a narrow range
//! of batch sizes) both come out wide even when each alone would be pinned. A factor within a
//! step of its bound has none (the fit would have pushed it further:
//! [`cachesim_core::calibration::factors::at_bounds`]).

use super::fit::{log_error, residuals, start_inside, Fit, Target};
use cachesim_core::calibration::factors::{get, set, FitOptions};
use cachesim_core::error::Result;
use nalgebra::DMatrix;

/// The step in ln(factor) of the central differences: ±5 %.
const STEP: f64 = 0.05;

/// A fitted factor and the standard error of its logarithm: infinite where the cases do not
/// determine it at all (no row moves with it, or only with a combination of factors); `None`
/// within a step of a bound, or with no more rows than factors.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    pub name: &'static str,
    pub ln_se: Option<f64>,
}

impl Spread {
    /// The factor × or ÷ this at one standard error.
    pub fn times(&self) -> Option<f64> {
        self.ln_se.map(f64::exp)
    }
}

/// The spread of each of `f`'s fitted factors over `targets` under `o` (the options it was
/// fitted with).
pub fn spread(targets: &[Target], o: &FitOptions, f: &Fit) -> Result<Vec<Spread>> {
    let weights = &o.weights;
    let rows = |e| -> Result<Vec<f64>> {
        Ok(residuals(targets, e, weights)?.iter().map(|r| weights[&r.metric].sqrt() * log_error(r)).collect())
    };
    let at = rows(f.efficiency)?;
    let bounds = o.bounds();
    // The factors with room for a step either way, and each one's column of J.
    let mut free = Vec::new();
    let mut columns = Vec::new();
    for &name in &f.fitted {
        let Some(b) = bounds.iter().find(|b| b.name == name) else { continue };
        let v = get(&f.efficiency, name);
        let (up, down) = (v * STEP.exp(), v * (-STEP).exp());
        if !(up <= b.hi && down >= b.lo && v > 0.0) {
            continue;
        }
        let moved = |x: f64| {
            let mut e = f.efficiency;
            set(&mut e, name, x);
            rows(e)
        };
        let (hi, lo) = (moved(up)?, moved(down)?);
        columns.push(hi.iter().zip(&lo).map(|(h, l)| (h - l) / (2.0 * STEP)).collect::<Vec<f64>>());
        free.push(name);
    }
    // The prior pulls a factor whose start lies inside its bounds, as the fit does.
    let prior = |name: &str| {
        o.prior_sigma.filter(|_| bounds.iter().any(|b| b.name == name && start_inside(&o.start, b).is_some()))
    };
    let mut out: Vec<Spread> = f.fitted.iter().map(|&name| Spread { name, ln_se: None }).collect();
    // A factor no row moves with, and no prior holds, is not determined at all.
    let (mut kept, mut cols) = (Vec::new(), Vec::new());
    for (name, c) in free.into_iter().zip(columns) {
        if c.iter().all(|x| *x == 0.0) && prior(name).is_none() {
            if let Some(s) = out.iter_mut().find(|s| s.name == name) {
                s.ln_se = Some(f64::INFINITY);
            }
        } else {
            kept.push(name);
            cols.push(c);
        }
    }
    let (n, p) = (at.len(), kept.len());
    if p == 0 || n <= p {
        return Ok(out);
    }
    let s2 = at.iter().map(|r| r * r).sum::<f64>() / (n - p) as f64;
    let j = DMatrix::from_fn(n, p, |i, k| cols[k][i]);
    let mut info = j.transpose() * &j;
    for (k, name) in kept.iter().enumerate() {
        if let Some(sigma) = prior(name) {
            info[(k, k)] += 1.0 / (sigma * sigma);
        }
    }
    let cov = info.try_inverse();
    for (k, name) in kept.iter().enumerate() {
        // Singular: the rows move only with a combination of these factors.
        let var = cov.as_ref().map_or(f64::INFINITY, |c| s2 * c[(k, k)]);
        if let Some(s) = out.iter_mut().find(|s| s.name == *name) {
            s.ln_se = Some(if var.is_finite() && var >= 0.0 { var.sqrt() } else { f64::INFINITY });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::fit::{fit, tests::gemm_target};
    use super::*;
    use cachesim_core::catalog::{gpu, Dtype};
    use cachesim_core::cost::{gemm_s, Efficiency};

    /// Four compute-bound GEMMs measured e^±0.1 off a GEMM efficiency of 0.8, alternately, floor
    /// 0: a GEMM's time is FLOPs / (peak × g), so every row's ln(predicted) moves by −1 per unit
    /// of ln g (J is a column of −1), the optimum is the geometric mean 0.8 with residuals ±0.1,
    /// s² = 4 × 0.01 / 3 and the standard error of ln g is √(s² / 4) = 0.1 / √3. The HBM
    /// efficiency fitted beside it moves no row (the rows are compute-bound): not determined,
    /// unless a prior of width σ holds it, which gives it √(s² σ²).
    #[test]
    fn spreads_by_hand() {
        let h200 = gpu("h200", None).unwrap();
        let g = Efficiency { gemm_flops: 0.8, kernel_floor_s: 0.0, ..Efficiency::default() };
        let rows: Vec<([u64; 3], f64)> = [2048u64, 4096, 8192, 16384]
            .iter()
            .enumerate()
            .map(|(i, &m)| {
                let mkn = [m, 4096, 4096];
                let off = if i % 2 == 0 { 0.1f64 } else { -0.1 };
                (mkn, gemm_s(&h200, &g, mkn, Dtype::Bf16) * 1e6 * off.exp())
            })
            .collect();
        let targets = [gemm_target(&rows)];
        let o = FitOptions {
            weights: [("gemm_bf16_us".to_string(), 1.0)].into_iter().collect(),
            max_iters: 400,
            start: Efficiency { gemm_flops: 0.5, mem_bw: 0.8, kernel_floor_s: 0.0, ..Efficiency::default() },
            only: vec!["gemm_flops", "mem_bw"],
            ..FitOptions::default()
        };
        let f = fit(&targets, &o).unwrap();
        assert!((f.efficiency.gemm_flops / 0.8 - 1.0).abs() < 2e-3, "{}", f.efficiency.gemm_flops);
        let s = spread(&targets, &o, &f).unwrap();
        let (gemm, hbm) = (&s[0], &s[1]);
        assert_eq!((gemm.name, hbm.name), ("gemm_flops", "mem_bw"));
        let want = 0.1 / 3f64.sqrt();
        assert!((gemm.ln_se.unwrap() / want - 1.0).abs() < 1e-2, "{:?} want {want}", gemm.ln_se);
        assert_eq!(hbm.ln_se, Some(f64::INFINITY));
        assert_eq!(hbm.times(), Some(f64::INFINITY));
        // With a prior the HBM share is held by it alone.
        let held = FitOptions { prior_sigma: Some(0.5), ..o.clone() };
        let f = fit(&targets, &held).unwrap();
        let s = spread(&targets, &held, &f).unwrap();
        let r = super::super::fit::residuals(&targets, f.efficiency, &held.weights).unwrap();
        let s2 = r.iter().map(|r| (r.predicted / r.measured).ln().powi(2)).sum::<f64>() / 2.0;
        assert!((s[1].ln_se.unwrap() / (s2 * 0.25).sqrt() - 1.0).abs() < 1e-9, "{:?}", s[1]);
        // A factor within a step of its bound has no spread.
        let top = Fit { efficiency: Efficiency { gemm_flops: 0.99, ..f.efficiency }, ..f };
        assert_eq!(spread(&targets, &o, &top).unwrap()[0].ln_se, None);
    }
}
