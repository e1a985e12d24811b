//! The `calibrate` and `validate` commands: print what a real benchmark report says, and run
//! every expressible case of `calibration/cases/` against its report.

use crate::cli::{CalibrateArgs, CaseRun, ValidateArgs};
use anyhow::Context;
use cachesim::calibrate::{case, report};
use clap::Parser;
use std::io::Write;

/// `cachesim calibrate --report FILE [--json]`.
pub fn calibrate(args: &CalibrateArgs) -> anyhow::Result<()> {
    let r = report::read_record(&args.report, args.record)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report::text(&r, args.verbose))?;
    }
    Ok(())
}

/// Simulates one case: its run arguments parsed as `cachesim run` would, over its workload.
fn simulate(c: &case::LoadedCase) -> anyhow::Result<cachesim::metrics::Summary> {
    let argv = std::iter::once("case".to_string()).chain(c.run_args());
    let run = CaseRun::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?.run;
    let cfg = cachesim::config::resolve(&run.options())?;
    let w = c.workload()?;
    let keep = cachesim::sim::Keep { steps: false, tokens: false, schedule: false };
    Ok(cachesim::sim::simulate(&w, &cfg, keep)?.summary)
}

/// `cachesim validate [--cases DIR] [--json]`.
pub fn validate(args: &ValidateArgs) -> anyhow::Result<()> {
    let cases = case::load_dir(&args.cases)?;
    let mut v = case::Validation::default();
    for c in &cases {
        if !c.case.expressible {
            let missing = c.case.missing.clone().unwrap_or_default();
            v.not_expressible.push(case::Skipped { case: c.case.case.clone(), missing });
            continue;
        }
        let summary = simulate(c).with_context(|| format!("case {} ({})", c.case.case, c.file.display()))?;
        v.rows.extend(case::compare(c, &summary));
    }
    case::summarise(&mut v);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", case::text(&v))?;
    }
    Ok(())
}
