//! The `calibrate` and `validate` commands: print what a real benchmark report says, fit a
//! step-time profile to chosen cases (one's own report: [`super::calibrate_report`]), and run every
//! expressible case of `calibration/cases/` (or those `--cases` names) against its
//! measurements with the profile `cachesim run` would use — or, with `--leave-one-out` and
//! `--leave-group-out`, with that profile refitted without the case or its group.

use super::calibrate_shared::{kept_notes, parse_weights, spread_record, write_factors};
use super::Answer;
use crate::cli::{CalibrateArgs, CaseRun, GroupBy, ValidateArgs};
use anyhow::Context;
use cachesim::calibrate::{case, fit, holdout, kernels, prediction, silicon, validation};
use cachesim::calibration::profile;
use cachesim::config::Calibration;
use clap::Parser;
use rayon::prelude::*;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `cachesim calibrate --report FILE [--json]`, `cachesim calibrate --report FILE -o P.toml
/// RUN FLAGS…` or `cachesim calibrate --fit …`.
pub fn calibrate(args: &CalibrateArgs) -> anyhow::Result<Answer> {
    if args.accept_totals_mismatch && (args.fit || args.out.is_none()) {
        anyhow::bail!("--accept-totals-mismatch goes with --report FILE -o PROFILE (a fit to one report)");
    }
    // What the fit is given is checked before any case or report is read.
    if let Some(w) = &args.weights {
        parse_weights(w)?;
    }
    check_calibrate_files(args)?;
    if let Some(p) = &args.start {
        start_profile(p)?;
    }
    check_data_dir(&args.data)?;
    if args.fit {
        return fit_profile(args);
    }
    let Some(path) = &args.report else { anyhow::bail!("give --report FILE or --fit") };
    let r = cachesim::calibrate::report::read_record(path, args.record)?;
    if let Some(out) = &args.out {
        return super::calibrate_report::fit_report(args, &r, out);
    }
    let text = if args.run.json {
        format!("{}\n", serde_json::to_string_pretty(&r)?)
    } else {
        cachesim::calibrate::report::text(&r, args.verbose)
    };
    Ok(Answer::text(text))
}

/// Refuses a profile `--out` that is a folder or would replace what the fit reads: the cases'
/// folder, the data folder, the `--start` profile, the `--report` and its run's files.
fn check_calibrate_files(args: &CalibrateArgs) -> anyhow::Result<()> {
    let Some(out) = &args.out else { return Ok(()) };
    let data = data_dir(&args.data);
    let mut inputs =
        if args.fit { vec![("--cases-dir", args.cases_dir.as_path())] } else { super::files::run_inputs(&args.run) };
    inputs.extend(super::files::given([
        ("--data", data.as_deref().filter(|_| args.fit)),
        ("--start", args.start.as_deref()),
        ("--report", args.report.as_deref()),
    ]));
    super::files::check(&inputs, &[("--out", out)])
}

/// The `--start` profile's factors; a file that is not a calibration profile is refused by name.
fn start_profile(p: &Path) -> anyhow::Result<cachesim::cost::Efficiency> {
    if p.is_file() && !profile::is_profile_file(p) {
        anyhow::bail!(
            "--start {}: not a calibration profile (no [efficiency] table; `cachesim calibrate --fit --out` writes one)",
            p.display()
        );
    }
    Ok(profile::read(p).with_context(|| format!("--start {}", p.display()))?.efficiency)
}

/// A `--data` folder given on the command line must be a folder: a missing one would leave every
/// case "not run" and the table empty.
fn check_data_dir(flag: &Option<PathBuf>) -> anyhow::Result<()> {
    match flag {
        Some(d) if !d.is_dir() => {
            let why = if d.exists() { "not a folder" } else { "no such folder" };
            anyhow::bail!("--data {}: {why}", d.display())
        }
        _ => Ok(()),
    }
}

/// The data folder: the flag, else `$CACHESIM_DATA`.
fn data_dir(flag: &Option<PathBuf>) -> Option<PathBuf> {
    flag.clone().or_else(|| std::env::var_os("CACHESIM_DATA").map(PathBuf::from))
}

/// Workloads already built, by trace flags, and trace files already read (with their tokenised
/// messages), by path and read flags: cases sharing a data set read and tokenise it once, even
/// when they build it under different options (the two clients' ShareGPT filters).
#[derive(Default)]
struct Workloads {
    built: HashMap<String, Arc<cachesim::workload::Workload>>,
    read: HashMap<String, (cachesim::trace::TraceFile, cachesim::workload::TokenMemo)>,
}

/// A case resolved as `cachesim run` would resolve its arguments, with its workload; `raw`
/// prices steps with the raw roofline instead of the matching profile.
fn prepare(c: &case::LoadedCase, data: Option<&Path>, raw: bool, cache: &mut Workloads) -> anyhow::Result<fit::Target> {
    let (run, cfg) = case_config(c, data, raw)?;
    let w = &c.case.workload;
    // Generated workloads are shared too: many silicon rows have the same lengths and count.
    let random = (w.dataset == "random").then(|| {
        format!("random {:?} {:?} {:?} {} {}", w.num_prompts, w.input_len, w.output_len, w.range_ratio, w.seed)
    });
    let workload = match random {
        Some(key) => match cache.built.get(&key) {
            Some(w) => w.clone(),
            None => {
                let w = c.workload()?.ok_or_else(|| anyhow::anyhow!("case {}: no generated workload", c.case.case))?;
                let w = Arc::new(w);
                cache.built.insert(key, w.clone());
                w
            }
        },
        None => {
            let build = run.build_options();
            let read = run.trace.read_options();
            let key = format!("{:?} {:?}", run.trace.trace, build);
            match cache.built.get(&key) {
                Some(w) => w.clone(),
                None => {
                    let (trace, memo) = match cache.read.entry(format!("{:?} {:?}", run.trace.trace, read)) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(e) => {
                            e.insert((cachesim::read_trace(run.trace.trace.as_deref(), &read)?, Default::default()))
                        }
                    };
                    let w = Arc::new(cachesim::workload::build_from(trace, &build, memo)?);
                    cache.built.insert(key, w.clone());
                    w
                }
            }
        }
    };
    // The rebuilt workload must match the report's token totals (within 1 %): else an error.
    cachesim::calibrate::totals::check(c, &workload, &cfg.arrivals)?;
    let measured = c
        .measured
        .metrics
        .iter()
        .filter(|(k, _)| !c.case.skip_metrics.contains(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    Ok(fit::Target { case: c.case.case.clone(), cfg, workload, measured, seeds: c.seeds()?, steps: None })
}

/// A case's run flags parsed and resolved as `cachesim run` would; `raw` prices steps with the
/// raw roofline instead of the matching profile.
fn case_config(
    c: &case::LoadedCase,
    data: Option<&Path>,
    raw: bool,
) -> anyhow::Result<(crate::cli::RunArgs, cachesim::config::RunConfig)> {
    let argv: Vec<std::ffi::OsString> =
        std::iter::once("case".to_string()).chain(c.run_args(data)?).map(Into::into).collect();
    // A deployment file's flags go before the case's own, as on the command line.
    let cmd = <CaseRun as clap::CommandFactory>::command();
    let argv = cachesim::deployment::command_line(argv, &cmd, &cmd)?.args;
    let run = CaseRun::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?.run;
    let mut opts = run.options();
    if raw {
        opts.calibration = Calibration::None;
    }
    let cfg = cachesim::config::resolve(&opts)?;
    Ok((run, cfg))
}

/// A phase point's row ([`cachesim::calibrate::phase`]): priced by the case's own profile, else
/// (and with `--uncalibrated`) by the raw roofline — no built-in profile was fitted on such a
/// deployment.
fn validate_phase(
    c: &case::LoadedCase,
    data: Option<&Path>,
    uncalibrated: bool,
) -> anyhow::Result<(validation::CaseInfo, Vec<validation::Row>)> {
    let raw = uncalibrated || c.profile_path().is_none();
    let (_, cfg) = case_config(c, data, raw)?;
    let (mut info, rows) = cachesim::calibrate::phase::validate(c, &cfg)?;
    if uncalibrated {
        info.calibration = "none (raw roofline, --uncalibrated)".into();
        info.no_profile = true;
    }
    Ok((info, rows))
}

/// `cachesim calibrate --fit --cases PATTERN --out FILE`.
fn fit_profile(args: &CalibrateArgs) -> anyhow::Result<Answer> {
    let (Some(pattern), Some(out)) = (&args.cases, &args.out) else { anyhow::bail!("--fit needs --cases and --out") };
    let globs = case_globs(Some(pattern))?.unwrap_or_default();
    let cases: Vec<_> = case::load_dir(&args.cases_dir)?
        .into_iter()
        .filter(|c| globs.iter().any(|g| g.matches(&c.case.case)))
        .collect();
    let step_cases: Vec<_> = kernels::load_dir(&args.cases_dir)?
        .into_iter()
        .filter(|c| globs.iter().any(|g| g.matches(&c.case.case)))
        .collect();
    let data = data_dir(&args.data);
    let mut rows = silicon_rows(&args.cases_dir, Some(&globs), data.as_deref())?;
    if let Some(x) = rows.not_run.first() {
        anyhow::bail!("--cases {pattern}: {} cannot be read: {}", x.case, x.missing);
    }
    if cases.is_empty() && step_cases.is_empty() && rows.cases.is_empty() {
        anyhow::bail!("--cases {pattern}: no case in {} matches", args.cases_dir.display());
    }
    let not: Vec<String> = cases
        .iter()
        .filter(|c| !c.case.expressible)
        .map(|c| format!("{} ({})", c.case.case, c.case.missing.clone().unwrap_or_default()))
        .collect();
    if !not.is_empty() {
        anyhow::bail!("--cases {pattern}: not expressible, cannot be fitted: {}", not.join("; "));
    }
    let phase: Vec<&str> = cases.iter().filter(|c| c.case.phase.is_some()).map(|c| c.case.case.as_str()).collect();
    if !phase.is_empty() {
        anyhow::bail!("--cases {pattern}: phase points (one step, no workload) are not fitted: {}", phase.join(", "));
    }
    let mut cache = Workloads::default();
    let mut targets = cases
        .iter()
        .map(|c| prepare(c, data.as_deref(), true, &mut cache).with_context(|| format!("case {}", c.case.case)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Silicon rows that cannot be run are left out of the fit, each reason said.
    let silicon_cases = std::mem::take(&mut rows.cases);
    for c in &silicon_cases {
        match prepare(c, data.as_deref(), true, &mut cache) {
            Ok(t) => targets.push(t),
            Err(e) => rows.refused(c, &e),
        }
    }
    drop(cache);
    let mut doc = String::new();
    for x in rows.skipped() {
        writeln!(doc, "Left out (not expressible): {}: {}", x.case, x.missing)?;
    }
    if targets.is_empty() && step_cases.is_empty() {
        anyhow::bail!("--cases {pattern}: no expressible case to fit");
    }
    for c in &step_cases {
        targets.push(fit::Target::from_steps(c, data.as_deref()).with_context(|| format!("case {}", c.case.case))?);
    }
    // Kernel step cases alone make a profile of engine `kernels`, which no serving run picks
    // on its own (`--calibration FILE` and `--calibration kernels` use it).
    let fam = |t: &fit::Target| if t.steps.is_some() { holdout::KERNELS } else { profile::family(t.cfg.engine.engine) };
    let gpu = &targets[0].cfg.gpu.name;
    // `--any-engine`: one GPU's device factors over engine families; engine `any` matches no
    // run's family, so the profile is never picked on its own.
    let family = match targets.iter().find(|t| t.steps.is_none()) {
        Some(_) if args.any_engine => profile::ANY_ENGINE,
        Some(t) => fam(t),
        None => holdout::KERNELS,
    };
    let mixed = |t: &fit::Target| !args.any_engine && t.steps.is_none() && fam(t) != family;
    if let Some(t) = targets.iter().find(|t| &t.cfg.gpu.name != gpu || mixed(t)) {
        anyhow::bail!(
            "a profile is for one GPU and engine family: {} runs {} / {}, {} runs {gpu} / {family}",
            t.case,
            t.cfg.gpu.name,
            fam(t),
            targets[0].case
        );
    }
    let mut models: Vec<String> = targets.iter().map(|t| t.cfg.model.name.clone()).collect();
    models.sort();
    models.dedup();
    let weights = match &args.weights {
        Some(w) => parse_weights(w)?,
        None if targets.iter().all(|t| t.steps.is_some()) => kernels::default_weights(),
        None if args.unknown_hardware => cachesim::calibration::factors::unknown_hardware_weights(),
        None if targets.iter().any(|t| t.steps.is_some()) => {
            cachesim::calibration::factors::default_weights().into_iter().chain(kernels::default_weights()).collect()
        }
        None => cachesim::calibration::factors::default_weights(),
    };
    let start = match &args.start {
        Some(p) => start_profile(p)?,
        None => cachesim::cost::Efficiency::default(),
    };
    let o = cachesim::calibration::factors::FitOptions {
        weights: weights.clone(),
        max_iters: args.max_iters,
        unknown_hardware: args.unknown_hardware,
        wide_bounds: args.wide_bounds,
        start,
        hold: Vec::new(),
        only: Vec::new(),
        prior_sigma: args.prior_sigma,
    };
    let o = match &args.factors {
        Some(list) => {
            let only = cachesim::calibration::factors::parse_factor_list(list, o.bounds())
                .map_err(|e| anyhow::anyhow!("--factors {list}: {e}"))?;
            cachesim::calibration::factors::FitOptions { only, ..o }
        }
        None => o,
    };
    // Read before the fit, so that a file at `out` that is not a profile stops it early.
    let notes = kept_notes(out, &args.note)?;
    let f = fit::fit(&targets, &o)?;
    let spread = cachesim::calibrate::spread::spread(&targets, &o, &f)?;
    let loo = if args.no_loo { Vec::new() } else { fit::leave_one_out(&targets, &o)? };
    let mut command = format!("cachesim calibrate --fit --cases '{pattern}' --out {}", out.display());
    if let Some(w) = &args.weights {
        command += &format!(" --weights {w}");
    }
    if args.max_iters != 150 {
        command += &format!(" --max-iters {}", args.max_iters);
    }
    if args.unknown_hardware {
        command += " --unknown-hardware";
    }
    if args.wide_bounds {
        command += " --wide-bounds";
    }
    if let Some(p) = &args.start {
        command += &format!(" --start {}", p.display());
    }
    if let Some(f) = &args.factors {
        command += &format!(" --factors {f}");
    }
    if let Some(s) = args.prior_sigma {
        command += &format!(" --prior-sigma {s}");
    }
    if args.no_loo {
        command += " --no-loo";
    }
    if args.any_engine {
        command += " --any-engine";
    }
    let name = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let p = profile::Profile {
        name,
        gpu: gpu.clone(),
        engine: family.to_string(),
        models,
        efficiency: f.efficiency,
        fit: profile::FitInfo {
            start: args.start.is_some().then_some(start),
            notes,
            spread: spread_record(&spread),
            loo_median_abs_error_pct: fit::median_abs_error(&loo),
            leave_one_out: loo,
            ..f.record(command, targets.iter().map(|t| t.case.clone()).collect(), &o)
        },
    };
    let text = format!(
        "# Fitted step-time profile (cachesim calibrate --fit); regenerate with the command in [fit].\n{}",
        profile::to_toml(&p)
    );
    let mut files = cachesim::output::Outputs::new();
    let tmp = files.stage(out)?;
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", out.display()))?;
    files.commit()?;
    writeln!(
        doc,
        "Profile {} ({} / {} / {}) written to {}",
        p.name,
        p.gpu,
        p.engine,
        p.models.join(", "),
        out.display()
    )?;
    write_factors(&mut doc, &p)?;
    // Kernel rows are priced by the model alone; serving cases are simulated at each evaluation.
    let each =
        if p.engine == holdout::KERNELS { "evaluations (kernel rows, no simulation)" } else { "simulations each" };
    writeln!(
        doc,
        "Fit over {} case(s), {} {each}: objective {:.4}, rms log error {:.3}, median |error| {:.1} %",
        p.fit.cases.len(),
        p.fit.evaluations,
        p.fit.objective,
        p.fit.rms_log_error,
        p.fit.median_abs_error_pct
    )?;
    for r in &p.fit.residuals {
        writeln!(
            doc,
            "  fit  {:<10} {:<22} {:>12.2} {:>12.2} {:>+8.1} %",
            r.case, r.metric, r.measured, r.predicted, r.error_pct
        )?;
    }
    match p.fit.loo_median_abs_error_pct {
        Some(m) => {
            writeln!(doc, "Leave-one-out median |error| {m:.1} %")?;
            for r in &p.fit.leave_one_out {
                writeln!(
                    doc,
                    "  loo  {:<10} {:<22} {:>12.2} {:>12.2} {:>+8.1} %",
                    r.case, r.metric, r.measured, r.predicted, r.error_pct
                )?;
            }
        }
        None => writeln!(doc, "Leave-one-out: not run (one case, or --no-loo)")?,
    }
    Ok(Answer::text(doc))
}

/// The rows of the silicon-sample cases ([`silicon`]) that `--cases` selects — every row of a
/// case file whose name a glob matches, or the rows (`<case>/<row id>`) one matches; none
/// without `--cases`, so that a plain `validate` does not run thousands of rows — expanded
/// from the data folder. Returns the rows as cases, the rows left out by case file and reason
/// (not expressible), and the selected case files whose CSV is absent (not run).
fn silicon_rows(dir: &Path, globs: Option<&[glob::Pattern]>, data: Option<&Path>) -> anyhow::Result<SiliconRows> {
    let mut out = SiliconRows::default();
    let Some(globs) = globs else { return Ok(out) };
    for s in silicon::load_dir(dir)? {
        let name = &s.case.case;
        let whole = globs.iter().any(|g| g.matches(name));
        let keep = |row: &str| whole || globs.iter().any(|g| g.matches(row));
        if !whole && !globs.iter().any(|g| g.as_str().starts_with(&format!("{name}/"))) {
            continue;
        }
        let e = match s.expand(data, &keep) {
            Ok(e) => e,
            Err(e) if s.csv_path(data).is_err() => {
                out.not_run.push(validation::Skipped { case: name.clone(), missing: e.to_string() });
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("case {name} ({})", s.file.display())),
        };
        for (why, ids) in e.not_expressible {
            out.left_out.entry((name.clone(), why)).or_default().extend(ids);
        }
        out.cases.extend(e.cases);
    }
    Ok(out)
}

/// The silicon rows the built-in profiles were fitted on, less those `selected` holds already
/// (none when the data folder lacks them).
fn silicon_training_rows(
    dir: &Path,
    data: Option<&Path>,
    selected: &[case::LoadedCase],
) -> anyhow::Result<Vec<case::LoadedCase>> {
    let names: BTreeSet<String> = profile::builtin()
        .into_iter()
        .flat_map(|(_, p)| p.fit.cases)
        .filter(|c| c.contains('/') && !selected.iter().any(|s| s.case.case == *c))
        .collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let globs: Vec<glob::Pattern> =
        names.iter().map(|n| glob::Pattern::new(&glob::Pattern::escape(n))).collect::<Result<_, _>>()?;
    Ok(silicon_rows(dir, Some(&globs), data)?.cases)
}

/// What [`silicon_rows`] found.
#[derive(Default)]
struct SiliconRows {
    cases: Vec<case::LoadedCase>,
    /// (case file, reason) → row ids.
    left_out: BTreeMap<(String, String), Vec<String>>,
    not_run: Vec<validation::Skipped>,
}

impl SiliconRows {
    /// A row that failed to start (an engine's refusal, a layout the model cannot take): left
    /// out with the reason.
    fn refused(&mut self, c: &case::LoadedCase, e: &anyhow::Error) {
        let (file, id) = c.case.case.split_once('/').unwrap_or((&c.case.case, ""));
        self.left_out.entry((file.to_string(), format!("{e:#}"))).or_default().push(id.to_string());
    }

    /// The rows left out, one entry per case file and reason, counted, with the row ids.
    fn skipped(&self) -> Vec<validation::Skipped> {
        self.left_out
            .iter()
            .map(|((file, why), ids)| validation::Skipped {
                case: format!("{file} ({} rows)", ids.len()),
                missing: format!("{why}: {}", ids.join(", ")),
            })
            .collect()
    }
}

/// The globs of a `--cases` list (`None`: every case); a folder given there is an error that
/// points to `--cases-dir`.
fn case_globs(pattern: Option<&str>) -> anyhow::Result<Option<Vec<glob::Pattern>>> {
    let Some(pattern) = pattern else { return Ok(None) };
    if Path::new(pattern).is_dir() {
        anyhow::bail!(
            "--cases takes case names (globs, e.g. 'P001,P00*'), not a folder: give the folder {pattern} to --cases-dir"
        );
    }
    pattern
        .split(',')
        .map(|p| glob::Pattern::new(p.trim()).with_context(|| format!("--cases: bad pattern `{p}`")))
        .collect::<anyhow::Result<Vec<_>>>()
        .map(Some)
}

/// The profile that prices a case in `validate`: its own file, else the built-in one matching
/// its GPU, engine family and model; with a key naming it.
fn case_profile(c: &case::LoadedCase, t: &fit::Target) -> anyhow::Result<Option<(String, profile::Profile)>> {
    Ok(match c.profile_path() {
        Some(p) => Some((p.display().to_string(), profile::read(&p)?)),
        None => profile::builtin_for(&t.cfg.gpu.name, t.cfg.engine.engine, &t.cfg.model.name)
            .map(|(f, p)| (f.to_string(), p)),
    })
}

/// `cachesim validate [--cases GLOB,…] [--cases-dir DIR] [--data DIR] [--leave-one-out |
/// --leave-group-out gpu|source] [--json] [--csv FILE] [--plot F.svg] [--max-held-out-error PCT]`.
pub fn validate(args: &ValidateArgs) -> anyhow::Result<Answer> {
    if let Some(g) = args.max_held_out_error.filter(|g| !(g.is_finite() && *g >= 0.0)) {
        anyhow::bail!(
            "--max-held-out-error: {g} must be a finite percentage, 0 or more (a gate of {g} can never fail)"
        );
    }
    check_data_dir(&args.data)?;
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p)?;
    }
    let data = data_dir(&args.data);
    let mut inputs = vec![("--cases-dir", args.cases_dir.as_path())];
    inputs.extend(data.as_deref().map(|p| ("--data", p)));
    if args.residuals.is_some() && args.leave_group_out != Some(GroupBy::Source) {
        anyhow::bail!("--residuals needs --leave-group-out source: the table holds predictions of sources no fit saw");
    }
    let outputs = super::files::given([
        ("--csv", args.csv.as_deref()),
        ("--plot", args.plot.as_deref()),
        ("--residuals", args.residuals.as_deref()),
    ]);
    super::files::check(&inputs, &outputs)?;
    let globs = case_globs(args.cases.as_deref())?;
    let selected = |c: &case::LoadedCase| globs.as_ref().is_none_or(|g| g.iter().any(|g| g.matches(&c.case.case)));
    let cases = case::load_dir(&args.cases_dir)?;
    let step_cases: Vec<_> = kernels::load_dir(&args.cases_dir)?
        .into_iter()
        .filter(|c| globs.as_ref().is_none_or(|g| g.iter().any(|g| g.matches(&c.case.case))))
        .collect();
    let mut rows = silicon_rows(&args.cases_dir, globs.as_deref(), data.as_deref())?;
    let any_rows = !rows.cases.is_empty() || !rows.left_out.is_empty() || !rows.not_run.is_empty();
    if !cases.iter().any(selected) && step_cases.is_empty() && !any_rows {
        let p = args.cases.as_deref().unwrap_or_default();
        anyhow::bail!("--cases {p}: no case in {} matches", args.cases_dir.display());
    }
    // Refits train on cases --cases does not select: those are prepared too, and so are the
    // silicon rows a built-in profile was fitted on (a profile lends to other groups as fitted
    // only where its cases' groups are known).
    let holdout = args.leave_one_out || args.leave_group_out.is_some();
    let training_rows =
        if holdout { silicon_training_rows(&args.cases_dir, data.as_deref(), &rows.cases)? } else { Vec::new() };
    let mut v = validation::Validation::default();
    v.not_run.append(&mut rows.not_run);
    let silicon_cases = std::mem::take(&mut rows.cases);
    let mut cache = Workloads::default();
    let mut targets = Vec::new();
    let mut not_run = BTreeMap::new();
    let mut phases = Vec::new();
    let silicon = silicon_cases.iter().map(|c| (c, Some(true))).chain(training_rows.iter().map(|c| (c, Some(false))));
    for (c, row) in cases.iter().map(|c| (c, None)).chain(silicon) {
        let chosen = row.unwrap_or_else(|| selected(c));
        if !chosen && !holdout {
            continue;
        }
        if row.is_some() {
            match prepare(c, data.as_deref(), args.uncalibrated, &mut cache) {
                Ok(t) => targets.push((c, t, chosen)),
                Err(e) if chosen => rows.refused(c, &e),
                Err(_) => {}
            }
            continue;
        }
        if !c.case.expressible {
            let missing = c.case.missing.clone().unwrap_or_default();
            if chosen {
                v.not_expressible.push(validation::Skipped { case: c.case.case.clone(), missing });
            }
            continue;
        }
        if c.case.phase.is_some() {
            // A phase point is one step, not a workload: no target to fit or refit.
            if chosen {
                let (info, rows) = validate_phase(c, data.as_deref(), args.uncalibrated)
                    .with_context(|| format!("case {} ({})", c.case.case, c.file.display()))?;
                phases.push((info, rows));
            }
            continue;
        }
        if let Err(e) = c.trace_path(data.as_deref()) {
            not_run.insert(c.case.case.clone(), e.to_string());
            if chosen {
                v.not_run.push(validation::Skipped { case: c.case.case.clone(), missing: e.to_string() });
            }
            continue;
        }
        let t = prepare(c, data.as_deref(), args.uncalibrated, &mut cache)
            .with_context(|| format!("case {} ({})", c.case.case, c.file.display()))?;
        targets.push((c, t, chosen));
    }
    // The trace files read, held for the cases that shared them: not needed to simulate.
    drop(cache);
    v.not_expressible.extend(rows.skipped());
    let chosen: Vec<_> = targets.iter().filter(|(_, _, s)| *s).collect();
    let mut steps = Vec::new();
    for c in step_cases {
        match c.csv_paths(data.as_deref()) {
            Ok(_) => steps.push(c.validate(data.as_deref(), args.uncalibrated)?),
            Err(e) => v.not_run.push(validation::Skipped { case: c.case.case.clone(), missing: e.to_string() }),
        }
    }
    let sums: Vec<_> = chosen.par_iter().map(|(_, t, _)| fit::simulate(t, t.cfg.efficiency)).collect();
    let mut predicted = Vec::new();
    for ((c, t, _), s) in chosen.iter().zip(sums) {
        let s = s.with_context(|| format!("case {}", c.case.case))?;
        let used = case_profile(c, t)?;
        let no_profile = used.is_none();
        let fitted = !args.uncalibrated && used.as_ref().is_some_and(|(_, p)| p.fit.cases.contains(&c.case.case));
        v.cases.push(validation::CaseInfo {
            case: c.case.case.clone(),
            calibration: t.cfg.calibration.clone(),
            fitted,
            no_profile,
            gpu: t.cfg.gpu.name.clone(),
            engine: profile::family(t.cfg.engine.engine).to_string(),
            source: c.source(),
            refit: None,
            refit_on: None,
            rung: None,
        });
        predicted.push(s);
    }
    if holdout {
        v.mode = honest_refits(args, &targets, &not_run, &mut v.cases, &mut predicted)?;
    }
    for ((c, _, _), s) in chosen.iter().zip(&predicted) {
        v.rows.extend(validation::compare(c, s));
    }
    for (info, rows) in phases {
        v.cases.push(info);
        v.rows.extend(rows);
    }
    for (mut info, rows) in steps {
        // The honest modes refit serving profiles only: a step case's own fit is marked so.
        if holdout && info.fitted {
            info.refit = Some("not refitted (kernel step case)".to_string());
        }
        v.cases.push(info);
        v.rows.extend(rows);
    }
    validation::summarise(&mut v);
    let mut files = cachesim::output::Outputs::new();
    if let Some(p) = &args.plot {
        let tmp = files.stage(p)?;
        let mode = if v.mode.is_empty() { String::new() } else { format!(" --{}", v.mode) };
        let title = format!("cachesim validate{mode}: predicted vs measured, {} cases", v.cases.len());
        cachesim::calibrate::plot::validation_plot(&tmp, &title, &v)
            .with_context(|| format!("cannot draw {}", p.display()))?;
    }
    if let Some(p) = &args.csv {
        super::write_csv(&mut files, p, &validation::csv_rows(&v))?;
    }
    if let Some(p) = &args.residuals {
        let near: HashMap<&str, (String, cachesim::trust::Near)> = chosen
            .iter()
            .map(|(c, t, _)| {
                let page = holdout::source_page(c.case.published.as_ref().map(|p| p.source_url.as_str()));
                (c.case.case.as_str(), (page, cachesim::trust::Near::of(&t.cfg, &t.workload)))
            })
            .collect();
        super::write_csv(&mut files, p, &validation::residuals(&v, &near))?;
    }
    files.commit()?;
    let mode = validation::mode_name(&v);
    let pooled = v.pooled.as_ref().map(|p| (p.median_abs_error_pct, p.metrics.join(", ")));
    let mut out = String::new();
    if args.json {
        out.push_str(&serde_json::to_string_pretty(&v)?);
        out.push('\n');
    } else {
        write!(out, "{}", validation::text(&v))?;
        if let Some((m, metrics)) = &pooled {
            writeln!(
                out,
                "\n{mode} median |error| over {metrics}, pooled: {m:.2} % (the figure --max-held-out-error gates)"
            )?;
        }
    }
    // The gate's verdict comes after the table it judges.
    let failed = args.max_held_out_error.and_then(|bound| match pooled {
        Some((m, metrics)) if m > bound => Some(anyhow::anyhow!(
            "{mode} median |error| {m:.2} % (over {metrics}, pooled) exceeds --max-held-out-error {bound} %"
        )),
        Some(_) => None,
        None => Some(anyhow::anyhow!("--max-held-out-error: no {mode} prediction was made")),
    });
    Ok(Answer { failed, ..Answer::text(out) })
}

/// `--leave-one-out` / `--leave-group-out`: plans each chosen case's refit, runs each distinct
/// refit once (in parallel; each fit is deterministic, so the output does not depend on the
/// thread count), replaces the chosen cases' predictions and marks their [`validation::CaseInfo`];
/// returns the mode's name.
fn honest_refits(
    args: &ValidateArgs,
    targets: &[(&case::LoadedCase, fit::Target, bool)],
    not_run: &BTreeMap<String, String>,
    infos: &mut [validation::CaseInfo],
    predicted: &mut [prediction::Prediction],
) -> anyhow::Result<String> {
    use cachesim::calibrate::holdout::{Member, Plan, ProfileRef, Rung};
    let mut profiles: Vec<(String, profile::Profile)> = Vec::new();
    let mut members = Vec::new();
    for (c, t, chosen) in targets {
        let profile = case_profile(c, t)?.map(|(key, p)| intern(&mut profiles, key, || Ok(p))).transpose()?;
        let group = match args.leave_group_out {
            Some(GroupBy::Gpu) => t.cfg.gpu.name.clone(),
            _ => holdout::source_page(c.case.published.as_ref().map(|p| p.source_url.as_str())),
        };
        let family = profile::family(t.cfg.engine.engine).to_string();
        let class = t.cfg.model_class();
        let (case, gpu) = (c.case.case.clone(), t.cfg.gpu.name.clone());
        members.push(Member { case, group, family, gpu, class, profile, selected: *chosen });
    }
    // Kernel-step cases train nothing here, but a kernel profile fitted outside a group lends
    // its device factors to that group's cases (the kernels rung): their groups must be known.
    for k in kernels::load_dir(&args.cases_dir)? {
        let Some(path) = k.profile_path() else { continue };
        let pi = intern(&mut profiles, path.display().to_string(), || profile::read(&path))?;
        let group = match args.leave_group_out {
            Some(GroupBy::Gpu) => cachesim::catalog::gpu(&k.case.gpu, None)?.name,
            _ => case::STEP_SOURCE.to_string(),
        };
        let model = cachesim::catalog::model(&k.case.model, None)?;
        let class = cachesim::calibration::prior::model_class(&model, false);
        let (family, gpu) = (holdout::KERNELS.to_string(), k.case.gpu.clone());
        members.push(Member { case: k.case.case, group, family, gpu, class, profile: Some(pi), selected: false });
    }
    let refs: Vec<ProfileRef> = profiles
        .iter()
        .map(|(_, p)| {
            let o = p.fit.options();
            ProfileRef {
                cases: p.fit.cases.clone(),
                family: p.engine.clone(),
                transferable: o.setup_bound_flag().is_none(),
                gpu: p.gpu.clone(),
                at_bound: !cachesim::calibration::factors::names_at_bounds(&p.efficiency, &p.fit.fitted, &o).is_empty(),
                measured: p
                    .fit
                    .residuals
                    .iter()
                    .map(|r| r.metric.clone())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
                weighted: o.weights.into_iter().filter(|(_, w)| *w > 0.0).map(|(m, _)| m).collect(),
            }
        })
        .collect();
    let (mode, plans) = match args.leave_group_out {
        Some(g) => {
            let by = if g == GroupBy::Gpu { "gpu" } else { "source" };
            (format!("leave-group-out {by}"), holdout::leave_group_out(&members, &refs)?)
        }
        None => ("leave-one-out".to_string(), holdout::leave_one_out(&members, &refs)),
    };
    // Each distinct refit once: (training cases, profile whose options it reuses, rung).
    let mut jobs: Vec<(Vec<String>, usize, Rung)> = Vec::new();
    for p in &plans {
        if let Plan::Refit { training, options_of, rung, .. } = p {
            let key = (training.clone(), *options_of, *rung);
            if !jobs.contains(&key) {
                jobs.push(key);
            }
        }
    }
    let by_name: HashMap<&str, &fit::Target> = targets.iter().map(|(c, t, _)| (c.case.case.as_str(), t)).collect();
    let mut job_targets = Vec::new();
    for (training, pi, _) in &jobs {
        let mut ts = Vec::new();
        for name in training {
            let Some(t) = by_name.get(name.as_str()) else {
                let why = not_run.get(name).map(String::as_str).unwrap_or("not an expressible case of --cases-dir");
                anyhow::bail!(
                    "{mode}: profile {} was fitted on case {name}, which is not run here: {why}",
                    profiles[*pi].0
                );
            };
            ts.push((*t).clone());
        }
        job_targets.push(ts);
    }
    let options = |pi: usize| profiles[pi].1.fit.options();
    let fits: Vec<_> = jobs.par_iter().zip(&job_targets).map(|((_, pi, _), ts)| fit::fit(ts, &options(*pi))).collect();
    let fits =
        fits.into_iter().collect::<cachesim::Result<Vec<_>>>().with_context(|| format!("{mode}: a refit failed"))?;
    let chosen: Vec<&fit::Target> = targets.iter().filter(|(_, _, s)| *s).map(|(_, t, _)| t).collect();
    let chosen_members: Vec<&Member> = members.iter().filter(|m| m.selected).collect();
    // A case no profile matches is priced by the composed prior: its device and engine pieces
    // must not have been fitted on the case's group (else the pieces' factors saw it), nor on
    // cases whose group is not known here.
    let group_of: HashMap<&str, &str> = members.iter().map(|m| (m.case.as_str(), m.group.as_str())).collect();
    let outside = |m: &Member, p: &profile::Profile| {
        p.fit.cases.iter().all(|c| group_of.get(c.as_str()).is_some_and(|g| *g != m.group))
    };
    // (only where the run took the composed prior: not under `--calibration none`)
    let composed_case =
        |p: &Plan, t: &fit::Target, m: &Member| matches!(p, Plan::Keep) && m.profile.is_none() && t.cfg.composed_prior;
    // The composed prior of each GPU, engine and model class such cases take, worked out once.
    let mut whole: HashMap<(String, &'static str, String), cachesim::cost::Efficiency> = HashMap::new();
    for ((p, t), m) in plans.iter().zip(&chosen).zip(&chosen_members) {
        if composed_case(p, t, m) {
            let (gpu, e, class) = (&t.cfg.gpu, t.cfg.engine.engine, t.cfg.model_class());
            whole
                .entry((gpu.name.clone(), e.name(), class.clone()))
                .or_insert_with(|| cachesim::calibration::prior::composed(gpu, e, &class).efficiency);
        }
    }
    let sims: Vec<_> = plans
        .par_iter()
        .zip(&chosen)
        .zip(&chosen_members)
        .map(|((p, t), m)| match p {
            Plan::Keep if composed_case(p, t, m) => {
                use cachesim::calibration::prior;
                let (gpu, e) = (&t.cfg.gpu, t.cfg.engine.engine);
                let class = t.cfg.model_class();
                let held = prior::composed_from(gpu, e, &class, |p| outside(m, p)).efficiency;
                if held == whole[&(gpu.name.clone(), e.name(), class)] {
                    Ok(None)
                } else {
                    fit::simulate(t, held).map(Some)
                }
            }
            Plan::Refit { training, options_of, rung, .. } => {
                let j = jobs.iter().position(|k| (&k.0, k.1, k.2) == (training, *options_of, *rung)).expect("planned");
                fit::simulate(t, fits[j].efficiency).map(Some)
            }
            // The priors, fitted on nothing: what `--uncalibrated` prices the case with; or their
            // device factors replaced by a kernel profile's (fitted outside the group).
            Plan::Transfer { from, .. } => fit::simulate(t, profiles[*from].1.efficiency).map(Some),
            Plan::Prior { device_of: None, .. } => fit::simulate(t, cachesim::cost::Efficiency::default()).map(Some),
            Plan::Prior { device_of: Some(k), .. } => {
                fit::simulate(t, cachesim::calibration::prior::kernel_device_prior(&profiles[*k].1.efficiency))
                    .map(Some)
            }
            _ => Ok(None),
        })
        .collect();
    for (((p, info), s), pred) in plans.iter().zip(infos.iter_mut()).zip(sims).zip(predicted.iter_mut()) {
        // NoTraining simulates nothing and Keep only a case with no profile whose device or
        // engine piece saw its group: the others keep their own profile's (or the composed prior's) prediction.
        let s = s.with_context(|| format!("case {}", info.case))?;
        let repriced = s.is_some();
        if let Some(s) = s {
            *pred = s;
        }
        match p {
            Plan::Keep if repriced => {
                info.refit_on = Some(format!(
                    "the composed prior without the device pieces and {} engine pieces fitted on its group (or on \
                     cases not run here)",
                    info.engine
                ))
            }
            Plan::Keep => {}
            Plan::NoTraining(why) => info.refit = Some(why.to_string()),
            Plan::Prior { options_of, device_of } => {
                let name = &profiles[*options_of].1.name;
                let why = if refs[*options_of].transferable {
                    let class = members_class(&members, &info.case);
                    format!(
                        "no transferable {} profile was fitted on a case of its model class ({class}) outside its group",
                        info.engine
                    )
                } else {
                    let flag = profiles[*options_of].1.fit.options().setup_bound_flag();
                    format!("its factors (fitted with {}) do not transfer", flag.unwrap_or_default())
                };
                info.refit_on = Some(match device_of {
                    None => {
                        info.refit = Some(holdout::GROUP_OUT_PRIOR.to_string());
                        info.rung = Some(Rung::Prior.name().to_string());
                        format!(
                            "no fitted factor, the step-time priors (as --uncalibrated): {name} was fitted on its group and {why}"
                        )
                    }
                    Some(k) => {
                        let (kname, kfit) = (&profiles[*k].1.name, &profiles[*k].1.fit);
                        info.refit = Some(holdout::GROUP_OUT_KERNELS.to_string());
                        info.rung = Some(Rung::Kernels.name().to_string());
                        format!(
                            "the device factors of {kname} (fitted on {}, kernel steps outside its group), host and \
                             communication factors at the priors: {name} was fitted on its group and {why}",
                            kfit.cases_named()
                        )
                    }
                });
            }
            Plan::Transfer { from, .. } => {
                let (lender, on) = (&profiles[*from].1.name, profiles[*from].1.fit.cases_named());
                info.refit = Some(holdout::GROUP_OUT.to_string());
                info.rung = Some(Rung::Family.name().to_string());
                info.refit_on = Some(format!(
                    "the {} family's factors as fitted in {lender} (on {on}; outside its group, model class {})",
                    info.engine,
                    members_class(&members, &info.case)
                ));
            }
            Plan::Refit { training, options_of, rung, mark } => {
                let name = &profiles[*options_of].1.name;
                let on = training.join(", ");
                info.refit = Some(mark.to_string());
                if args.leave_group_out.is_some() {
                    info.rung = Some(rung.name().to_string());
                }
                info.refit_on = Some(match rung {
                    Rung::Family => format!(
                        "the {} family's factors (options of {name}) fitted on {on} (outside its group, model class {})",
                        info.engine,
                        members_class(&members, &info.case)
                    ),
                    _ => format!("{name} refitted on {on}"),
                });
            }
        }
    }
    Ok(mode)
}

/// The index of the profile keyed `key` in `profiles`, read (`read`) and appended the first time.
fn intern(
    profiles: &mut Vec<(String, profile::Profile)>,
    key: String,
    read: impl FnOnce() -> cachesim::Result<profile::Profile>,
) -> cachesim::Result<usize> {
    if let Some(i) = profiles.iter().position(|(k, _)| *k == key) {
        return Ok(i);
    }
    profiles.push((key, read()?));
    Ok(profiles.len() - 1)
}

/// The model class ([`cachesim::calibration::prior::model_class`]) of `case` among `members`.
fn members_class<'a>(members: &'a [cachesim::calibrate::holdout::Member], case: &str) -> &'a str {
    members.iter().find(|m| m.case == case).map(|m| m.class.as_str()).unwrap_or_default()
}
