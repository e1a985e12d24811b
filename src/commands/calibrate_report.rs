//! `cachesim calibrate --report my_run.txt -o my_profile.toml` with the `cachesim run` flags
//! describing what was run (a `--deployment` file merges with them as for `run`): rebuilds the
//! run, checks that the report's totals match the rebuilt run's, fits the step-time factors to
//! the report's metrics, writes the profile with its fit record and prints the residuals.

use super::calibrate_shared::{kept_notes, parse_weights, spread_record, write_factors};
use super::Answer;
use crate::cli::CalibrateArgs;
use anyhow::Context;
use cachesim::calibrate::fit;
use cachesim::calibrate::report::{BenchReport, Layout};
use cachesim::calibration::profile;
use cachesim::config::Calibration;
use cachesim::report::ReportStyle;
use cachesim::workload::arrivals::Rate;
use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;

/// The totals a report and the rebuilt run must agree on (within [`TOTALS_TOLERANCE`]).
const TOTALS: &[&str] = &["completed", "total_input_tokens", "total_output_tokens"];

/// Largest relative difference of a total accepted without `--accept-totals-mismatch`.
const TOTALS_TOLERANCE: f64 = 0.01;

/// A word of a command line, quoted for a POSIX shell when it needs it.
fn shell_word(w: &str) -> String {
    if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c)) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// Fits a profile to the report `r` (read from `args.report`) and writes it to `out`.
pub fn fit_report(args: &CalibrateArgs, r: &BenchReport, out: &Path) -> anyhow::Result<Answer> {
    let path = &r.path;
    let mut run = args.run.clone();
    // The report's layout names the client that measured it; its header the load, unless given.
    run.report_style = match r.layout {
        Layout::Vllm | Layout::VllmJson => ReportStyle::Vllm,
        _ => ReportStyle::Sglang,
    };
    if run.request_rate.is_none() {
        run.request_rate = r.request_rate.map(Rate::PerSecond);
    }
    if run.max_concurrency.is_none() {
        run.max_concurrency = r.max_concurrency.and_then(|c| u32::try_from(c).ok());
    }
    let mut opts = run.options();
    opts.calibration = Calibration::None;
    let cfg = cachesim::config::resolve(&opts)?;
    let workload = Arc::new(
        cachesim::load_workload(run.trace.trace.as_deref(), &run.trace.read_options(), &run.build_options())
            .context("cannot load the trace")?,
    );
    let weights = match &args.weights {
        Some(w) => parse_weights(w)?,
        None if args.unknown_hardware => cachesim::calibration::factors::unknown_hardware_weights(),
        None => cachesim::calibration::factors::default_weights(),
    };
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let measured = r.metrics.iter().filter(|(k, _)| weights.contains_key(*k)).map(|(k, v)| (k.clone(), *v)).collect();
    let target = fit::Target { case: name.clone(), cfg, workload, measured, seeds: Vec::new(), steps: None };
    let start = cachesim::calibration::factors::FitOptions::default().start;
    let rebuilt = fit::simulate(&target, start)?;
    let mut assumptions = Vec::new();
    let mut differ = Vec::new();
    for k in TOTALS {
        let (Some(m), Some(p)) = (r.get(k), rebuilt.get(k)) else { continue };
        if m > 0.0 && ((p - m) / m).abs() > TOTALS_TOLERANCE {
            differ.push(format!("{k} {m} in the report, {p} in the rebuilt run"));
        }
    }
    if !differ.is_empty() {
        let what = differ.join("; ");
        if !args.accept_totals_mismatch {
            anyhow::bail!(
                "{}: the report's totals differ from the rebuilt run's by more than 1 %: {what} \
                 (check --trace, --num-prompts and the dataset flags, or pass --accept-totals-mismatch)",
                path.display()
            );
        }
        assumptions.push(format!(
            "--accept-totals-mismatch: the rebuilt run's totals differ from {}'s by more than 1 %: {what}",
            path.display()
        ));
    }
    let o = cachesim::calibration::factors::FitOptions {
        weights: weights.clone(),
        max_iters: args.max_iters,
        unknown_hardware: args.unknown_hardware,
        wide_bounds: args.wide_bounds,
        prior_sigma: args.prior_sigma,
        ..Default::default()
    };
    let targets = [target];
    let before = fit::residuals(&targets, start, &weights)?;
    // Read before the fit, so that a file at `out` that is not a profile stops it early.
    let notes = kept_notes(out, &args.note)?;
    let f = fit::fit(&targets, &o)?;
    let spread = cachesim::calibrate::spread::spread(&targets, &o, &f)?;
    let words: Vec<String> = std::env::args().map(|a| shell_word(&a)).collect();
    let command = match words.split_first() {
        Some((_, rest)) => format!("cachesim {}", rest.join(" ")),
        None => String::new(),
    };
    let cfg = &targets[0].cfg;
    let p = profile::Profile {
        name: out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        gpu: cfg.gpu.name.clone(),
        engine: profile::family(cfg.engine.engine).to_string(),
        models: vec![cfg.model.name.clone()],
        efficiency: f.efficiency,
        fit: {
            let record = f.record(command, vec![name], &o);
            let assumptions = record.assumptions.iter().cloned().chain(assumptions).collect();
            profile::FitInfo { assumptions, notes, spread: spread_record(&spread), ..record }
        },
    };
    let text = format!(
        "# Step-time profile fitted to one report (cachesim calibrate --report … -o); regenerate with the command in [fit].\n{}",
        profile::to_toml(&p)
    );
    let mut files = cachesim::output::Outputs::new();
    let tmp = files.stage(out)?;
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", out.display()))?;
    files.commit()?;
    let mut o = String::new();
    writeln!(
        o,
        "Profile {} ({} / {} / {}) fitted to {}, written to {}",
        p.name,
        p.gpu,
        p.engine,
        p.models[0],
        path.display(),
        out.display()
    )?;
    write_factors(&mut o, &p)?;
    writeln!(
        o,
        "{} simulations: objective {:.4}, rms log error {:.3}, median |error| {:.1} %",
        p.fit.evaluations, p.fit.objective, p.fit.rms_log_error, p.fit.median_abs_error_pct
    )?;
    writeln!(
        o,
        "{:<22} {:>12} {:>12} {:>9} {:>12} {:>9}",
        "metric", "measured", "before", "error %", "after", "error %"
    )?;
    for (b, a) in before.iter().zip(&p.fit.residuals) {
        debug_assert_eq!(b.metric, a.metric);
        writeln!(
            o,
            "{:<22} {:>12.2} {:>12.2} {:>+9.1} {:>12.2} {:>+9.1}",
            a.metric, a.measured, b.predicted, b.error_pct, a.predicted, a.error_pct
        )?;
    }
    Ok(Answer::text(o))
}
