//! `cachesim [run]`: one simulation and its output report (the bench clients' layouts or
//! `--json`), with the optional per-request, per-step and per-token CSVs and the plot; with
//! `--seeds N`, N of them under consecutive seeds and the spread of their metrics ([`seeds`]).

mod seeds;

use super::{bar, load, write_csv, Answer, Document};
use crate::cli::{RunArgs, RunCommand};
use anyhow::Context;
use cachesim::text::thousands;
use std::fmt::Write;

/// The words of a `cachesim run` command line (without the program and subcommand names) with
/// its `--deployment` file expanded as the binary expands it, and what the run echoes about the
/// file: the Python binding's `run(deployment=…)` goes through here.
pub fn expand_run_words(
    words: Vec<String>,
) -> cachesim::Result<(Vec<String>, Option<cachesim::config::DeploymentEcho>)> {
    if !words.iter().any(|w| w == "--deployment" || w.starts_with("--deployment=")) {
        return Ok((words, None)); // no file: nothing to expand (and no command to build)
    }
    let top = <crate::cli::Cli as clap::CommandFactory>::command();
    let run = <crate::cli::CaseRun as clap::CommandFactory>::command();
    let mut argv: Vec<std::ffi::OsString> = vec!["cachesim".into(), "run".into()];
    argv.extend(words.into_iter().map(std::ffi::OsString::from));
    let e = crate::deployment::command_line(argv, &top, &run)?;
    let words = e.args[2..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
    Ok((words, e.echo))
}

/// A run resolved from its flags before any trace is read: its options, its configuration
/// (with the deployment file's echo) and the notes the configuration earns. Refuses what the
/// engine would refuse at start-up, a plot path of the wrong kind and an output that would
/// overwrite an input.
pub fn prepare(
    args: &RunArgs,
    deployment: Option<&cachesim::config::DeploymentEcho>,
) -> anyhow::Result<(cachesim::config::RunOptions, cachesim::config::RunConfig, Vec<String>)> {
    let opts = args.options();
    let mut cfg = cachesim::config::resolve(&opts)?;
    cfg.deployment_file = deployment.cloned();
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p)?;
    }
    if let Some(p) = &args.fleet_plot {
        cachesim::plot::check_plot_path(p)?;
    }
    if args.compare_fixed && (cfg.autoscale.is_none() || cfg.goodput.is_none()) {
        return Err(cachesim::Error::invalid(
            "--compare-fixed",
            "needs --autoscale and --goodput: the fixed fleet must attain the autoscaled fleet's goodput",
        )
        .into());
    }
    for (flag, given) in [
        ("--fleet-csv", args.fleet_csv.is_some()),
        ("--fleet-plot", args.fleet_plot.is_some()),
        ("--compare-fixed", args.compare_fixed),
    ] {
        if given && cfg.autoscale.is_none() {
            return Err(cachesim::Error::invalid(
                flag,
                "means nothing without --autoscale: a fixed fleet has no syncs",
            )
            .into());
        }
    }
    check_outputs(args)?;
    let notes = cachesim::config::notes(&opts, &cfg);
    Ok((opts, cfg, notes))
}

/// What a `--num-prompts` above the trace's requests sends, said as the clients would: a
/// ShareGPT sample under vLLM's filter is filled up with repeats, as `vllm bench serve` fills a
/// short data set (`BenchmarkDataset.maybe_oversample_requests`, which logs "Oversampled requests
/// to reach N total samples."); any other trace is sent as it is, every request once, as sglang
/// `bench_serving` sends the prompts it has.
fn num_prompts_note(w: &cachesim::workload::Workload, num_prompts: Option<usize>) -> Option<String> {
    let n = num_prompts?;
    let held = w.requests.len();
    if n <= held || held == 0 {
        return None;
    }
    Some(if w.sample.as_ref().is_some_and(|s| s.oversample) {
        format!(
            "--num-prompts {n} but the trace holds {held} requests: {} repeats drawn to reach {n}, as vllm bench serve \
             oversamples (\"Oversampled requests to reach {n} total samples.\"; --dataset-filter sglang sends the {held} \
             only, as sglang bench_serving does)",
            n - held
        )
    } else {
        format!(
            "--num-prompts {n} but the trace holds {held} requests: all {held} are sent, each once (as sglang \
             bench_serving sends the prompts it has; cachesim does not oversample a trace)"
        )
    })
}

/// Refuses an output file that is a folder or would overwrite an input or another output.
fn check_outputs(args: &RunArgs) -> anyhow::Result<()> {
    super::files::check(&super::files::run_inputs(args), &super::files::run_outputs(args))
}

/// What a run keeps beyond its requests: steps for the timeline and the plot (or when asked),
/// tokens for the token times.
pub fn keep(args: &RunArgs, steps: bool) -> cachesim::sim::Keep {
    cachesim::sim::Keep {
        steps: steps || args.timeline_csv.is_some() || args.plot.is_some(),
        tokens: args.token_times_csv.is_some(),
        schedule: false,
        every_step: false,
    }
}

/// The run's output files, staged (written all or nothing at [`cachesim::output::Outputs::commit`]):
/// `--requests-csv` (one row per request; under prefill/decode disaggregation the prefill and
/// decode sides of each), `--timeline-csv`, `--token-times-csv` and `--plot`.
pub fn stage_files(
    args: &RunArgs,
    cfg: &cachesim::config::RunConfig,
    w: &cachesim::workload::Workload,
    out: &cachesim::sim::Outcome,
) -> anyhow::Result<cachesim::output::Outputs> {
    let mut files = cachesim::output::Outputs::new();
    if let Some(p) = &args.requests_csv {
        match cfg.cluster.pd {
            Some(pd) if !out.sim.pd.is_empty() => {
                let rows = cachesim::report::cluster::pd_rows(&out.sim.records, &out.sim.pd, pd.prefill);
                write_csv(&mut files, p, &rows)?;
            }
            _ => write_csv(&mut files, p, &out.sim.records)?,
        }
    }
    if let Some(p) = &args.timeline_csv {
        write_csv(&mut files, p, &out.sim.timeline)?;
    }
    if let Some(p) = &args.token_times_csv {
        write_csv(&mut files, p, &out.sim.tokens)?;
    }
    if let Some(p) = &args.fleet_csv {
        write_csv(&mut files, p, &out.sim.scaling.syncs)?;
    }
    if let (Some(p), Some(plan)) = (&args.fleet_plot, &cfg.autoscale) {
        if let Some(a) = cachesim::report::autoscale_report(out, cfg) {
            let title = format!("{} · autoscaled {} on {}", w.info.path.display(), cfg.model.name, cfg.gpu.name);
            let tmp = files.stage(p)?;
            cachesim::plot::fleet_plot(&tmp, &title, plan, &a)
                .with_context(|| format!("cannot draw {}", p.display()))?;
        }
    }
    if let Some(p) = &args.plot {
        let title = format!("{} · {} on {}", w.info.path.display(), cfg.model.name, cfg.gpu.name);
        let tmp = files.stage(p)?;
        cachesim::plot::run_plot(&tmp, &title, &out.sim.records, &out.sim.timeline, cfg.kv_capacity_tokens)
            .with_context(|| format!("cannot draw {}", p.display()))?;
    }
    Ok(files)
}

/// `cachesim run`: resolves, reads the trace, simulates, writes the output files and answers
/// the output report, with failures and cut outputs as notes for stderr; when every request
/// failed, the files are not written and the answer carries the clients' error. `--seeds N`
/// above 1 runs [`seeds::run`].
pub fn run(cmd: &RunCommand, deployment: Option<&cachesim::config::DeploymentEcho>) -> anyhow::Result<Answer> {
    if cmd.seeds > 1 {
        if cmd.run.compare_fixed {
            return Err(cachesim::Error::invalid(
                "--compare-fixed",
                "compares one autoscaled run with fixed fleets; with --seeds, compare each seed's run on its own",
            )
            .into());
        }
        return seeds::run(cmd, deployment);
    }
    let args = &cmd.run;
    let (_, cfg, notes) = prepare(args, deployment)?;
    for note in notes {
        eprintln!("note: {note}");
    }
    let w = load(&args.trace, &args.build_options())?;
    if let Some(note) = num_prompts_note(&w, cfg.arrivals.num_prompts) {
        eprintln!("note: {note}");
    }
    if let Some(note) = cachesim::config::priorities_note(&cfg, &w) {
        eprintln!("note: {note}");
    }
    let keep = cachesim::sim::Keep { every_step: cmd.no_step_coalescing, ..keep(args, false) };
    let pb = bar(0, "simulating {bar:40} {pos}/{len} requests · {msg} simulated (eta {eta})");
    let progress = |done: u64, total: u64, now: f64| {
        pb.set_length(total);
        pb.set_position(done);
        pb.set_message(format!("{now:.1} s"));
    };
    let out = cachesim::sim::simulate_with_progress(&w, &cfg, keep, &progress)?;
    pb.finish_and_clear();
    let fixed = match args.compare_fixed.then(|| cachesim::report::autoscale_report(&out, &cfg)).flatten() {
        Some(a) => {
            cachesim::report::autoscale::best_fixed(&w, &cfg, a.attainment_pct.unwrap_or(0.0), a.peak_instances)?
        }
        None => None,
    };
    let files = stage_files(args, &cfg, &w, &out)?;
    let saturation = cachesim::saturation::diagnose(&out.summary, &out.sim.records, &out.sim.load);
    let mut stdout = String::new();
    if args.json {
        let mut doc = cachesim::report::RunReport::new(&out, &w, &cfg);
        if let Some(a) = doc.autoscaling.as_mut() {
            a.best_fixed = fixed;
        }
        stdout.push_str(&serde_json::to_string_pretty(&doc)?);
        stdout.push('\n');
    } else {
        write!(stdout, "{}", cachesim::report::trace_summary_sent(&w.info, out.sent))?;
        write!(stdout, "{}", cachesim::report::config_echo(&cfg, &out))?;
        if cfg.cluster.is_cluster() {
            write!(stdout, "{}", cachesim::report::cluster::echo(&cfg.cluster))?;
        }
        write!(stdout, "{}", cachesim::report::bench_report(args.report_style, &load_echo(&cfg, &w), &out.summary))?;
        write!(stdout, "{}", sections(args, &cfg, &out, fixed))?;
        if let Some(rows) = cachesim::report::classes::rows(&out.sim.records) {
            write!(stdout, "{}", cachesim::report::classes::text(&rows, &cfg.engine))?;
        }
        write!(stdout, "{}", cachesim::trust::text(&cachesim::trust::bars(&cfg, &w, &out.summary)))?;
        if let Some(s) = &saturation {
            write!(stdout, "{}", cachesim::saturation::text(s, &unloaded_command(args, &w.info, &cfg)))?;
        }
    }
    // The clients' warning when nothing succeeded (vLLM bench serve, sglang bench_serving).
    let failed = (out.sent > 0 && out.summary.completed == 0).then(|| anyhow::anyhow!("{ALL_FAILED}"));
    if failed.is_none() {
        files.commit()?;
    }
    Ok(Answer { document: Document::Text(stdout), notes: failure_lines(&out), failed })
}

/// The clients' words when no request succeeded.
const ALL_FAILED: &str = "All requests failed. This is likely due to a misconfiguration on the benchmark arguments.";

/// What the report's header says about the load.
fn load_echo(cfg: &cachesim::config::RunConfig, w: &cachesim::workload::Workload) -> cachesim::report::LoadEcho {
    cachesim::report::LoadEcho {
        backend: match cfg.engine.engine {
            cachesim::engine::EngineKind::Vllm | cachesim::engine::EngineKind::VllmV0 => "vllm".to_string(),
            cachesim::engine::EngineKind::Sglang => "sglang".to_string(),
            cachesim::engine::EngineKind::Lightllm => "lightllm".to_string(),
            cachesim::engine::EngineKind::Trtllm => "trtllm".to_string(),
        },
        request_rate: match cfg.arrivals.rate {
            Some(cachesim::workload::arrivals::Rate::PerSecond(r)) => Some(r),
            _ => None,
        },
        trace_times: cfg.arrivals.rate.is_none() && w.requests.iter().all(|r| r.arrival_ms.is_some()),
        max_concurrency: cfg.max_concurrency,
        goodput: cfg.goodput.is_some(),
    }
}

/// The sections after the benchmark report: the instance and router table (more than one
/// instance), the TTFT breakdown (`--ttft-breakdown` of a disaggregated run) and the instance
/// failures (a run with a failure plan).
fn sections(
    args: &RunArgs,
    cfg: &cachesim::config::RunConfig,
    out: &cachesim::sim::Outcome,
    fixed: Option<cachesim::report::autoscale::FixedSearch>,
) -> String {
    let mut s = String::new();
    if let Some((rows, router)) = &cachesim::report::cluster_report(out, cfg) {
        s.push_str(&cachesim::report::cluster::text(rows, router));
    }
    if args.ttft_breakdown && !out.sim.pd.is_empty() {
        s.push_str(&cachesim::report::cluster::ttft_breakdown(&out.sim.records, &out.sim.pd));
    }
    if let Some(f) = cachesim::report::faults_report(out, cfg) {
        s.push_str(&cachesim::report::faults::text(&f));
    }
    if let (Some(plan), Some(mut a)) = (&cfg.autoscale, cachesim::report::autoscale_report(out, cfg)) {
        a.best_fixed = fixed;
        s.push_str(&cachesim::report::autoscale::text(plan, &a));
    }
    s
}

/// Failed requests and cut outputs, for stderr: counts by reason and one engine message each.
fn failure_lines(out: &cachesim::sim::Outcome) -> Vec<String> {
    let mut lines = Vec::new();
    let f = &out.sim.failures;
    if !f.is_empty() {
        let counts: Vec<String> = f.iter().map(|(r, (n, _))| format!("{} {}", thousands(*n), r.label())).collect();
        lines.push(format!(
            "{} of {} requests failed: {}",
            thousands(out.sim.failed),
            thousands(out.sent as u64),
            counts.join(", ")
        ));
        for (r, (_, message)) in f {
            lines.push(format!("  {}: {message}", r.label()));
        }
    }
    let (cut, tokens) = out.sim.outputs_cut;
    if cut > 0 {
        lines.push(format!(
            "{} of {} requests had their output cut to fit ({} tokens fewer): the engine shortens max_new_tokens",
            thousands(cut),
            thousands(out.sent as u64),
            thousands(tokens)
        ));
    }
    lines
}

/// The `cachesim cache` command answering the hit-ratio question of this run without timing.
fn unloaded_command(args: &RunArgs, info: &cachesim::workload::TraceInfo, cfg: &cachesim::config::RunConfig) -> String {
    let trace = args.trace.trace.as_ref().map(|_| format!(" --trace {}", info.path.display())).unwrap_or_default();
    let block = cfg.cache.block_size.map(|b| format!(" --block {b}")).unwrap_or_default();
    format!(
        "cachesim cache{trace} --policy {}{block} --capacity-tokens {}",
        cfg.cache.policy.name(),
        cfg.kv_capacity_tokens
    )
}
