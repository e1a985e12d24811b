//! The `cachesim` binary: parses the command line, calls the library, prints reports.
//! Errors are reported with `anyhow` context, each message once and control characters escaped;
//! nothing here panics on user input. Output files are written all or nothing
//! (`cachesim::output`); progress bars show on a terminal only.

mod calib_cmd;
mod calib_report;
mod calib_shared;
mod sweep_cmd;

use cachesim::cli;

use anyhow::Context;
use cachesim::replay::{replay_all, ReplayOptions};
use cachesim::report::{analysis_text, cache_table, trace_summary, CacheReport};
use cachesim::text::thousands;
use cachesim::workload::gen::{self, GenRecord};
use cli::{AnalyzeArgs, CacheArgs, Cli, Command, GenCommand, GenCommon, RunArgs};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;

fn main() {
    let cmd = <Cli as clap::CommandFactory>::command();
    let run_flags = <cli::CaseRun as clap::CommandFactory>::command();
    // A --deployment file's flags go before the user's, which override them (docs/guide/cluster.md, Deployment files).
    let argv =
        cachesim::deployment::command_line(std::env::args_os().collect(), &cmd, &run_flags).unwrap_or_else(|e| {
            eprintln!("error: {}", escape_controls(&e.to_string()));
            std::process::exit(2)
        });
    let matches = cmd.get_matches_from(sweep_cmd::lists_as_axes(argv.args));
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let deployment = argv.echo.as_ref();
    let result = match cli.command {
        None => run(&cli.run, deployment),
        Some(Command::Run(args)) => run(&args, deployment),
        Some(Command::Cache(args)) => cache(&args),
        Some(Command::Analyze(args)) => analyze(&args),
        Some(Command::Gen(g)) => generate(&g),
        Some(Command::Sweep(args)) => {
            sweep_cmd::sweep(&args, matches.subcommand_matches("sweep").expect("sweep matches"))
        }
        Some(Command::Merge(args)) => sweep_cmd::merge(&args),
        Some(Command::Calibrate(args)) => calib_cmd::calibrate(&args),
        Some(Command::Validate(args)) => calib_cmd::validate(&args),
        Some(Command::Plan(args)) => sweep_cmd::plan(&args, matches.subcommand_matches("plan").expect("plan matches")),
    };
    if let Err(e) = result {
        eprintln!("error: {}", error_text(&e));
        std::process::exit(1);
    }
}

/// The error and its causes joined by `: `, skipping a cause whose text the previous one already
/// ends with (libraries often print their source inside their own message), with control
/// characters escaped so that bytes from a binary file never reach the terminal raw.
fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let t = cause.to_string();
        if parts.last().is_some_and(|p| p.ends_with(&t)) {
            continue;
        }
        parts.push(t);
    }
    escape_controls(&parts.join(": "))
}

/// `s` with control characters other than line breaks and tabs written as escapes.
fn escape_controls(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// "1 request", "2 requests".
fn plural(n: u64, what: &str) -> String {
    format!("{} {what}{}", thousands(n), if n == 1 { "" } else { "s" })
}

/// A progress bar of `len` steps with `template`, drawn only when stderr is a terminal.
fn bar(len: u64, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(ProgressStyle::with_template(template).expect("static template"));
    pb
}

/// Reads and tokenises the trace `t` names (the bundled sample without one), with a spinner.
fn load(t: &cli::TraceArgs, build: &cachesim::workload::BuildOptions) -> anyhow::Result<cachesim::workload::Workload> {
    let sp = spinner("reading and tokenizing the trace");
    let w = cachesim::load_workload(t.trace.as_deref(), &t.read_options(), build).context("cannot load the trace")?;
    sp.finish_and_clear();
    Ok(w)
}

fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// The input files of a run (flag, path).
fn run_inputs(args: &RunArgs) -> Vec<(&'static str, &std::path::Path)> {
    let mut v = Vec::new();
    v.extend(args.trace.trace.as_deref().map(|p| ("--trace", p)));
    v.extend(args.model_file.as_deref().map(|p| ("--model-file", p)));
    v.extend(args.gpu_file.as_deref().map(|p| ("--gpu-file", p)));
    v.extend(args.deployment.as_deref().map(|p| ("--deployment", p)));
    v
}

fn run(args: &RunArgs, deployment: Option<&cachesim::config::DeploymentEcho>) -> anyhow::Result<()> {
    let opts = args.options();
    let mut cfg = cachesim::config::resolve(&opts)?;
    cfg.deployment_file = deployment.cloned();
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p)?;
    }
    let outputs: Vec<(&str, &std::path::Path)> = [
        ("--requests-csv", args.requests_csv.as_deref()),
        ("--timeline-csv", args.timeline_csv.as_deref()),
        ("--token-times-csv", args.token_times_csv.as_deref()),
        ("--plot", args.plot.as_deref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.map(|p| (f, p)))
    .collect();
    cachesim::output::check_paths(&run_inputs(args), &outputs)?;
    for note in cachesim::config::notes(&opts, &cfg) {
        eprintln!("note: {note}");
    }
    let w = load(&args.trace, &args.build_options())?;
    let keep = cachesim::sim::Keep {
        steps: args.timeline_csv.is_some() || args.plot.is_some(),
        tokens: args.token_times_csv.is_some(),
        schedule: false,
    };
    let pb = bar(0, "simulating {bar:40} {pos}/{len} requests · {msg} simulated (eta {eta})");
    let progress = |done: u64, total: u64, now: f64| {
        pb.set_length(total);
        pb.set_position(done);
        pb.set_message(format!("{now:.1} s"));
    };
    let out = cachesim::sim::simulate_with_progress(&w, &cfg, keep, &progress)?;
    pb.finish_and_clear();
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
    if let Some(p) = &args.plot {
        let title = format!("{} · {} on {}", w.info.path.display(), cfg.model.name, cfg.gpu.name);
        let tmp = files.stage(p)?;
        cachesim::plot::run_plot(&tmp, &title, &out.sim.records, &out.sim.timeline, cfg.kv_capacity_tokens)
            .with_context(|| format!("cannot draw {}", p.display()))?;
    }
    let load = cachesim::report::LoadEcho {
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
    };
    let saturation = cachesim::saturation::diagnose(&out.summary, &out.sim.records, &out.sim.load);
    let cluster = cachesim::report::cluster_report(&out, &cfg);
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let doc = cachesim::report::RunReport::new(&out, &w.info, &cfg);
        serde_json::to_writer_pretty(&mut stdout, &doc)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", cachesim::report::trace_summary_sent(&w.info, out.sent))?;
        write!(stdout, "{}", cachesim::report::config_echo(&cfg, &out))?;
        if cfg.cluster.is_cluster() {
            write!(stdout, "{}", cachesim::report::cluster::echo(&cfg.cluster))?;
        }
        write!(stdout, "{}", cachesim::report::bench_report(args.report_style, &load, &out.summary))?;
        if let Some((rows, router)) = &cluster {
            write!(stdout, "{}", cachesim::report::cluster::text(rows, router))?;
        }
        if args.ttft_breakdown && !out.sim.pd.is_empty() {
            write!(stdout, "{}", cachesim::report::cluster::ttft_breakdown(&out.sim.records, &out.sim.pd))?;
        }
        if let Some(s) = &saturation {
            write!(stdout, "{}", cachesim::saturation::text(s, &unloaded_command(args, &w.info, &cfg)))?;
        }
    }
    stdout.flush()?;
    report_failures(&out);
    if out.sent > 0 && out.summary.completed == 0 {
        // The clients' warning when nothing succeeded (vLLM bench serve, sglang bench_serving).
        anyhow::bail!("All requests failed. This is likely due to a misconfiguration on the benchmark arguments.");
    }
    files.commit()?;
    Ok(())
}

/// Failed requests and cut outputs, on stderr: counts by reason and one engine message each.
fn report_failures(out: &cachesim::sim::Outcome) {
    let f = &out.sim.failures;
    if !f.is_empty() {
        let counts: Vec<String> = f.iter().map(|(r, (n, _))| format!("{} {}", thousands(*n), r.label())).collect();
        eprintln!(
            "{} of {} requests failed: {}",
            thousands(out.sim.failed),
            thousands(out.sent as u64),
            counts.join(", ")
        );
        for (r, (_, message)) in f {
            eprintln!("  {}: {message}", r.label());
        }
    }
    let (cut, tokens) = out.sim.outputs_cut;
    if cut > 0 {
        eprintln!(
            "{} of {} requests had their output cut to fit ({} tokens fewer): the engine shortens max_new_tokens",
            thousands(cut),
            thousands(out.sent as u64),
            thousands(tokens)
        );
    }
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

/// Writes `rows` as CSV to a temporary file that becomes `path` when `files` is committed.
fn write_csv<T: serde::Serialize>(
    files: &mut cachesim::output::Outputs,
    path: &std::path::Path,
    rows: &[T],
) -> anyhow::Result<()> {
    let tmp = files.stage(path)?;
    let mut w = csv::Writer::from_path(&tmp).with_context(|| format!("cannot create {}", path.display()))?;
    for r in rows {
        w.serialize(r).with_context(|| format!("cannot write {}", path.display()))?;
    }
    w.flush().with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn cache(args: &CacheArgs) -> anyhow::Result<()> {
    let w = load(&args.trace, &args.trace.build_options())?;
    let specs = args.specs();
    let pb = ProgressBar::new((w.requests.len() * specs.len()) as u64);
    pb.set_style(
        ProgressStyle::with_template("replaying {bar:40} {pos}/{len} requests ({per_sec}, eta {eta})")
            .expect("static template"),
    );
    let tick = || pb.inc(1);
    let results = replay_all(&w, &specs, ReplayOptions { inflight: args.inflight as usize }, &tick);
    pb.finish_and_clear();
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &CacheReport { trace: &w.info, results: &results })?;
        writeln!(out)?;
    } else {
        write!(out, "{}", trace_summary(&w.info))?;
        writeln!(
            out,
            "Replay:         arrival order, {} holding KV at once\n",
            plural(args.inflight as u64, "request")
        )?;
        write!(out, "{}", cache_table(&results))?;
    }
    Ok(())
}

fn analyze(args: &AnalyzeArgs) -> anyhow::Result<()> {
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p)?;
        let inputs: Vec<(&str, &std::path::Path)> =
            args.trace.trace.as_deref().map(|t| ("--trace", t)).into_iter().collect();
        cachesim::output::check_paths(&inputs, &[("--plot", p)])?;
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
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &a)?;
        writeln!(out)?;
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
    out.flush()?;
    files.commit()?;
    Ok(())
}

fn generate(g: &GenCommand) -> anyhow::Result<()> {
    let (kind, common, records): (&str, &GenCommon, Vec<GenRecord>) = match g {
        GenCommand::Random(a) => (
            "random",
            &a.common,
            gen::random(&gen::RandomSpec {
                num_prompts: a.num_prompts,
                input_len: a.input_len,
                output_len: a.output_len,
                range_ratio: a.common.range_ratio.unwrap_or(0.0),
                vocab: a.common.vocab,
                seed: a.common.seed,
            })?,
        ),
        GenCommand::Gsp(a) => (
            "gsp",
            &a.common,
            gen::gsp(&gen::GspSpec {
                num_groups: a.num_groups,
                prompts_per_group: a.prompts_per_group,
                system_prompt_len: a.system_prompt_len,
                question_len: a.question_len,
                output_len: a.output_len,
                range_ratio: a.common.range_ratio.unwrap_or(1.0),
                ordered: a.ordered,
                vocab: a.common.vocab,
                seed: a.common.seed,
            })?,
        ),
        GenCommand::Sessions(a) => (
            "sessions",
            &a.common,
            gen::sessions(&gen::SessionsSpec {
                num_sessions: a.num_sessions,
                turns: a.turns,
                system_prompt_len: a.system_prompt_len,
                user_len: a.user_len,
                output_len: a.output_len,
                range_ratio: a.common.range_ratio.unwrap_or(1.0),
                session_rate: a.session_rate,
                think_time_s: a.think_time_s,
                vocab: a.common.vocab,
                seed: a.common.seed,
            })?,
        ),
    };
    let prompt_ids: u64 = records.iter().map(|r| r.prompt_ids.len() as u64).sum();
    let output: u64 = records.iter().map(|r| r.output_len as u64).sum();
    let mut files = cachesim::output::Outputs::new();
    match &common.output {
        Some(path) => {
            cachesim::output::check_paths(&[], &[("--output", path)])?;
            let tmp = files.stage(path)?;
            let f = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", path.display()))?;
            let mut w = std::io::BufWriter::new(f);
            gen::write_jsonl(&records, &mut w).with_context(|| format!("cannot write {}", path.display()))?;
            w.flush().with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => gen::write_jsonl(&records, std::io::stdout().lock())?,
    }
    files.commit()?;
    let dest = common.output.as_ref().map_or("stdout".to_string(), |p| p.display().to_string());
    let summary = if common.json {
        serde_json::json!({
            "kind": kind, "requests": records.len(), "prompt_ids_written": prompt_ids,
            "output_tokens": output, "seed": common.seed, "output": dest,
        })
        .to_string()
    } else {
        format!(
            "gen {kind}: {}, {} prompt ids written, {} output tokens → {dest}",
            plural(records.len() as u64, "request"),
            thousands(prompt_ids),
            thousands(output)
        )
    };
    // The summary goes to stdout unless the records themselves do.
    if common.output.is_some() {
        println!("{summary}");
    } else {
        eprintln!("{summary}");
    }
    Ok(())
}
