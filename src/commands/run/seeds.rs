//! `cachesim run --seeds N`: the run under --seed S, S+1, …, S+N−1, in parallel (rayon), each
//! reduced to its summary as it ends, gathered in seed order — so the output is the same bytes at
//! any thread count — and reported as the median and spread of every metric
//! (`cachesim::seeds`). A run the seed does not touch is refused; output files are written once
//! per seed (`requests.seed7.csv`), all or nothing.

use super::{
    check_outputs, failure_lines, keep, load_echo, prepare, sections, stage_files, unloaded_command, ALL_FAILED,
};
use crate::cli::{RunArgs, RunCommand};
use crate::commands::{bar, load, Answer, Document};
use anyhow::Context;
use cachesim::seeds::report::{SeedRun, Seeds};
use rayon::prelude::*;
use std::fmt::Write;

/// `args` with each output file renamed for `seed` ([`cachesim::seeds::seed_path`]).
fn for_seed(args: &RunArgs, seed: u64) -> RunArgs {
    let mut a = args.clone();
    for p in [
        &mut a.requests_csv,
        &mut a.timeline_csv,
        &mut a.token_times_csv,
        &mut a.plot,
        &mut a.fleet_csv,
        &mut a.fleet_plot,
    ]
    .into_iter()
    .flatten()
    {
        *p = cachesim::seeds::seed_path(p, seed);
    }
    a
}

/// Runs `cmd`'s run under its `--seeds` from `--seed` and answers their report.
pub fn run(cmd: &RunCommand, deployment: Option<&cachesim::config::DeploymentEcho>) -> anyhow::Result<Answer> {
    let (args, n) = (&cmd.run, cmd.seeds);
    let seeds = cachesim::seeds::list(args.seed, n)?;
    let (_, cfg, notes) = prepare(args, deployment)?;
    // Every seed's file names are checked against the inputs before anything runs.
    for &seed in &seeds {
        check_outputs(&for_seed(args, seed))?;
    }
    for note in notes {
        eprintln!("note: {note}");
    }
    let w = load(&args.trace, &args.build_options())?;
    let varied = cachesim::seeds::varied(&cfg, &w);
    if varied.is_empty() {
        return Err(cachesim::seeds::refuse_unseeded(n, &cfg, &w).into());
    }
    let keep = cachesim::sim::Keep { every_step: cmd.no_step_coalescing, ..keep(args, false) };
    let unloaded = unloaded_command(args, &w.info, &cfg);
    let pb = bar(seeds.len() as u64, "simulating seeds {bar:40} {pos}/{len} (eta {eta})");
    type SeedResult = anyhow::Result<(SeedRun, cachesim::output::Outputs, Vec<String>)>;
    let results: Vec<SeedResult> = seeds
        .par_iter()
        .map(|&seed| -> SeedResult {
            let c = cachesim::seeds::with_seed(&cfg, seed);
            let a = for_seed(args, seed);
            let out = cachesim::sim::simulate(&w, &c, keep).with_context(|| format!("seed {seed}"))?;
            let files = stage_files(&a, &c, &w, &out).with_context(|| format!("seed {seed}"))?;
            let saturation = cachesim::saturation::diagnose(&out.summary, &out.sim.records, &out.sim.load)
                .map(|s| cachesim::saturation::text(&s, &unloaded));
            let lines = failure_lines(&out).into_iter().map(|l| format!("seed {seed}: {l}")).collect();
            let run = SeedRun::new(seed, &out, &w, &c, sections(args, &c, &out, None), saturation);
            pb.inc(1);
            Ok((run, files, lines))
        })
        .collect();
    pb.finish_and_clear();
    let mut runs = Vec::with_capacity(results.len());
    let mut files = cachesim::output::Outputs::new();
    let mut stderr = Vec::new();
    for r in results {
        let (run, f, lines) = r?;
        runs.push(run);
        files.append(f);
        stderr.extend(lines);
    }
    let failed: Vec<String> =
        runs.iter().filter(|r| r.sent > 0 && r.summary.completed == 0).map(|r| r.seed.to_string()).collect();
    let sent = runs.first().map_or(0, |r| r.sent);
    let seeds = Seeds::new(runs, varied);
    let mut stdout = String::new();
    if args.json {
        stdout.push_str(&serde_json::to_string_pretty(&seeds.document(&w, &cfg))?);
        stdout.push('\n');
    } else {
        write!(stdout, "{}", cachesim::report::trace_summary_sent(&w.info, sent))?;
        write!(stdout, "{}", cachesim::report::config_lines(&cfg, &seeds.client_text()))?;
        write!(stdout, "{}", seeds.cache_line())?;
        if cfg.cluster.is_cluster() {
            write!(stdout, "{}", cachesim::report::cluster::echo(&cfg.cluster))?;
        }
        write!(stdout, "{}", seeds.header())?;
        write!(stdout, "{}", cachesim::report::bench_layout(args.report_style, &load_echo(&cfg, &w), &seeds.cells()))?;
        write!(stdout, "{}", seeds.trailer())?;
        write!(stdout, "{}", cachesim::trust::text(&seeds.error_bars(&cfg, &w)))?;
    }
    let failed = (!failed.is_empty()).then(|| anyhow::anyhow!("seed {}: {ALL_FAILED}", failed.join(", ")));
    if failed.is_none() {
        files.commit()?;
    }
    Ok(Answer { document: Document::Text(stdout), notes: stderr, failed })
}
