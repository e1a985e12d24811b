//! `cachesim analyze`: a data set's prefix repetition, sharing structure and hit-ratio bounds,
//! with an optional plot.

use super::Answer;
use super::{bar, spinner};
use crate::cli::AnalyzeArgs;
use anyhow::Context;
use cachesim::report::{analysis_text, trace_summary};
use std::fmt::Write;

pub fn analyze(args: &AnalyzeArgs) -> anyhow::Result<Answer> {
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p)?;
        super::files::check(&super::files::trace_inputs(&args.trace), &[("--plot", p)])?;
    }
    let opts = args.options();
    let sp = spinner("reading the trace");
    let file = cachesim::read_trace(args.trace.trace.as_deref(), &args.trace.read_options())
        .context("cannot read the trace")?;
    let title = file.path.display().to_string();
    let records = file.records_len();
    sp.finish_and_clear();
    // One tick per request per bound replayed; the estimate counts one request per record.
    let estimate = if opts.bounds { records as u64 * cachesim::analyze::BOUND_REPLAYS } else { 0 };
    let pb = bar(estimate, "analysing {bar:40} {pos}/{len} request replays ({per_sec}, eta {eta})");
    let tick = || {
        pb.inc(1);
        if pb.position() > pb.length().unwrap_or(0) {
            pb.set_length(pb.position());
        }
    };
    let a = cachesim::analyze::run(file, &args.trace.build_options(), &opts, &tick).context("analysis failed")?;
    pb.finish_and_clear();
    let mut files = cachesim::output::Outputs::new();
    if let Some(p) = &args.plot {
        let tmp = files.stage(p)?;
        cachesim::plot::analysis_plot(&tmp, &title, &a.repetition, a.bounds.as_ref())
            .with_context(|| format!("cannot draw {}", p.display()))?;
    }
    files.commit()?;
    let mut out = String::new();
    if args.json {
        out.push_str(&serde_json::to_string_pretty(&a)?);
        out.push('\n');
    } else {
        match &a.trace {
            Some(t) => write!(out, "{}", trace_summary(t))?,
            None => writeln!(out, "Trace:          {title} ({records} records)")?,
        }
        writeln!(out)?;
        write!(out, "{}", analysis_text(&a))?;
        if let Some(p) = &args.plot {
            writeln!(out, "\nPlot:           {}", p.display())?;
        }
    }
    Ok(Answer::text(out))
}
