//! The files each command reads and writes, by flag, for the one check every command makes
//! before it starts ([`check`], which is [`cachesim::output::check_paths`]): no output is a
//! folder, replaces an input or names another output's file. The run flags' files
//! ([`run_inputs`], [`run_outputs`]) are listed once here for `run`, `sweep`, `plan` and
//! `calibrate --report`.

use crate::cli::{RunArgs, TraceArgs};
use cachesim::tokenize::TokenizerKind;
use std::path::Path;

/// Files by flag: (flag, path).
pub type Named<'a> = Vec<(&'static str, &'a Path)>;

/// The files reading a trace takes: the trace and a Hugging Face tokenizer file.
pub fn trace_inputs(t: &TraceArgs) -> Named<'_> {
    let mut v = Vec::new();
    v.extend(t.trace.as_deref().map(|p| ("--trace", p)));
    if let TokenizerKind::Hf(p) = &t.tokenizer {
        v.push(("--tokenizer", Path::new(p.as_str())));
    }
    v
}

/// The input files of a run's flags: the trace's, the catalog files, the deployment file and a
/// calibration profile file.
pub fn run_inputs(args: &RunArgs) -> Named<'_> {
    let mut v = trace_inputs(&args.trace);
    v.extend(args.model_file.as_deref().map(|p| ("--model-file", p)));
    v.extend(args.gpu_file.as_deref().map(|p| ("--gpu-file", p)));
    v.extend(args.layout.network_file.as_deref().map(|p| ("--network-file", p)));
    v.extend(args.deployment.as_deref().map(|p| ("--deployment", p)));
    let profile = args.calibration.as_deref().filter(|p| !["none", "kernels"].iter().any(|w| p.as_os_str() == *w));
    v.extend(profile.map(|p| ("--calibration", p)));
    v
}

/// The output files of a run's flags: the three CSVs and the plot.
pub fn run_outputs(args: &RunArgs) -> Named<'_> {
    given([
        ("--requests-csv", args.requests_csv.as_deref()),
        ("--timeline-csv", args.timeline_csv.as_deref()),
        ("--token-times-csv", args.token_times_csv.as_deref()),
        ("--plot", args.plot.as_deref()),
        ("--fleet-csv", args.fleet_csv.as_deref()),
        ("--fleet-plot", args.fleet_plot.as_deref()),
    ])
}

/// The flags given a file, of (flag, its file if given).
pub fn given<'a>(flags: impl IntoIterator<Item = (&'static str, Option<&'a Path>)>) -> Named<'a> {
    flags.into_iter().filter_map(|(f, p)| p.map(|p| (f, p))).collect()
}

/// Refuses, before the command runs, an output that is a folder, is one of `inputs` (a file, or
/// a file in an input folder) or names the same file as another output.
pub fn check(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> anyhow::Result<()> {
    cachesim::output::check_paths(inputs, outputs)?;
    Ok(())
}
