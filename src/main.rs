//! The `cachesim` binary: parses the command line, calls the library, prints reports.
//! Errors are reported with `anyhow` context; nothing here panics on user input.

mod cli;

use anyhow::Context;
use cachesim::replay::{replay_all, ReplayOptions};
use cachesim::report::{analysis_text, cache_table, thousands, trace_summary, CacheReport};
use cachesim::workload::gen::{self, GenRecord};
use cli::{AnalyzeArgs, CacheArgs, Cli, Command, GenCommand, GenCommon, RunArgs};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;

fn main() {
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        None => run(&cli.run),
        Some(Command::Run(args)) => run(&args),
        Some(Command::Cache(args)) => cache(&args),
        Some(Command::Analyze(args)) => analyze(&args),
        Some(Command::Gen(g)) => generate(&g),
        Some(Command::Sweep(args)) => sweep(&args, matches.subcommand_matches("sweep").expect("sweep matches")),
        Some(Command::Merge(args)) => merge(&args),
        Some(Command::Plan(args)) => plan(&args, matches.subcommand_matches("plan").expect("plan matches")),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

fn run(args: &RunArgs) -> anyhow::Result<()> {
    let cfg = cachesim::config::resolve(&args.options())?;
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p)?;
    }
    let sp = spinner("reading and tokenizing the trace");
    let w = cachesim::load_workload(args.trace.trace.as_deref(), &args.trace.read_options(), &args.build_options())
        .context("cannot load the trace")?;
    sp.set_message("simulating");
    let keep = cachesim::sim::Keep {
        steps: args.timeline_csv.is_some() || args.plot.is_some(),
        tokens: args.token_times_csv.is_some(),
        schedule: false,
    };
    let out = cachesim::sim::simulate(&w, &cfg, keep)?;
    sp.finish_and_clear();
    if let Some(p) = &args.requests_csv {
        write_csv(p, &out.sim.records)?;
    }
    if let Some(p) = &args.timeline_csv {
        write_csv(p, &out.sim.timeline)?;
    }
    if let Some(p) = &args.token_times_csv {
        write_csv(p, &out.sim.tokens)?;
    }
    if let Some(p) = &args.plot {
        let title = format!("{} · {} on {}", w.info.path.display(), cfg.model.name, cfg.gpu.name);
        cachesim::plot::run_plot(p, &title, &out.sim.records, &out.sim.timeline, cfg.kv_capacity_tokens)?;
    }
    let load = cachesim::report::LoadEcho {
        backend: match cfg.engine.engine {
            cachesim::engine::EngineKind::Vllm | cachesim::engine::EngineKind::VllmV0 => "vllm".to_string(),
            cachesim::engine::EngineKind::Sglang => "sglang".to_string(),
            cachesim::engine::EngineKind::Lightllm => "lightllm".to_string(),
        },
        request_rate: match cfg.arrivals.rate {
            Some(cachesim::workload::arrivals::Rate::PerSecond(r)) => Some(r),
            _ => None,
        },
        trace_times: cfg.arrivals.rate.is_none() && w.requests.iter().all(|r| r.arrival_ms.is_some()),
        max_concurrency: cfg.max_concurrency,
    };
    let saturation = cachesim::saturation::diagnose(&out.summary, &out.sim.records, &out.sim.load);
    let failed_reasons = out.sim.failures.iter().map(|(&r, &(n, _))| (r, n)).collect();
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let doc = cachesim::report::RunReport {
            summary: &out.summary,
            requests_sent: out.sent,
            failed_reasons,
            outputs_cut: out.sim.outputs_cut.0,
            hit_ratio: cachesim::report::hit_ratio(&out.summary),
            saturation: saturation.clone(),
            cache: &out.sim.cache,
            steps: out.sim.steps,
            trace: &w.info,
            config: &cfg,
        };
        serde_json::to_writer_pretty(&mut stdout, &doc)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", cachesim::report::trace_summary_sent(&w.info, out.sent))?;
        write!(stdout, "{}", cachesim::report::config_echo(&cfg, &out))?;
        write!(stdout, "{}", cachesim::report::bench_report(args.report_style, &load, &out.summary))?;
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

fn write_csv<T: serde::Serialize>(path: &std::path::Path, rows: &[T]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("cannot create {}", path.display()))?;
    for r in rows {
        w.serialize(r).with_context(|| format!("cannot write {}", path.display()))?;
    }
    w.flush()?;
    Ok(())
}

fn cache(args: &CacheArgs) -> anyhow::Result<()> {
    let sp = spinner("reading and tokenizing the trace");
    let w =
        cachesim::load_workload(args.trace.trace.as_deref(), &args.trace.read_options(), &args.trace.build_options())
            .context("cannot load the trace")?;
    sp.finish_and_clear();
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
        writeln!(out, "Replay:         arrival order, {} request(s) holding KV at once\n", args.inflight)?;
        write!(out, "{}", cache_table(&results))?;
    }
    Ok(())
}

fn analyze(args: &AnalyzeArgs) -> anyhow::Result<()> {
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p)?;
    }
    let opts = args.options();
    let sp = spinner("reading the trace");
    let file = cachesim::read_trace(args.trace.trace.as_deref(), &args.trace.read_options())
        .context("cannot read the trace")?;
    let title = file.path.display().to_string();
    let records = file.records_len();
    sp.set_message("analysing shared prefixes and replaying the bounds");
    let a = cachesim::analyze::run(file, &args.trace.build_options(), &opts, &|| ()).context("analysis failed")?;
    sp.finish_and_clear();
    if let Some(p) = &args.plot {
        cachesim::plot::analysis_plot(p, &title, &a.repetition, a.bounds.as_ref())?;
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
    match &common.output {
        Some(path) => {
            let f = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            gen::write_jsonl(&records, std::io::BufWriter::new(f))
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => gen::write_jsonl(&records, std::io::stdout().lock())?,
    }
    let dest = common.output.as_ref().map_or("stdout".to_string(), |p| p.display().to_string());
    let summary = if common.json {
        serde_json::json!({
            "kind": kind, "requests": records.len(), "prompt_ids_written": prompt_ids,
            "output_tokens": output, "seed": common.seed, "output": dest,
        })
        .to_string()
    } else {
        format!(
            "gen {kind}: {} requests, {} prompt ids written, {} output tokens → {dest}",
            thousands(records.len() as u64),
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

/// A bar with ETA on stderr when it is a terminal, hidden otherwise.
fn points_bar(n: usize, what: &str) -> ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template(&format!("{what} {{bar:40}} {{pos}}/{{len}} points ({{per_sec}}, eta {{eta}})"))
            .expect("static template"),
    );
    pb
}

/// Grid points: (index in the grid, knobs, the point's run arguments).
type GridJobs = Vec<(usize, cachesim::sweep::Point, RunArgs)>;

/// Grid points of this command (this shard's only), each with its run arguments parsed.
fn grid_points(
    base: &RunArgs,
    grid: &cli::GridArgs,
    m: &clap::ArgMatches,
    shard: Option<cachesim::sweep::Shard>,
    also_refused: &[&str],
) -> anyhow::Result<(Vec<String>, GridJobs)> {
    for (set, flag) in [
        (base.requests_csv.is_some(), "--requests-csv"),
        (base.timeline_csv.is_some(), "--timeline-csv"),
        (base.token_times_csv.is_some(), "--token-times-csv"),
        (base.plot.is_some(), "--plot"),
    ] {
        if set {
            anyhow::bail!("{flag} writes one run's details; run the chosen point with `cachesim run` for it");
        }
    }
    let flags = cli::RunFlags::new(m);
    let grid = flags.grid(grid, also_refused).map_err(anyhow::Error::msg)?;
    let knobs = grid.knobs()?;
    let base_build = format!("{:?}", base.build_options());
    let mut out = Vec::new();
    for (k, p) in grid.points()?.into_iter().enumerate() {
        if shard.is_some_and(|s| !s.contains(k)) {
            continue;
        }
        let args = flags.parse_point(&p).map_err(anyhow::Error::msg)?;
        if format!("{:?}", args.build_options()) != base_build {
            anyhow::bail!(
                "--grid: {} changes how the trace becomes requests (the sweep tokenises it once); set it outside the grid",
                p.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        out.push((k, p, args));
    }
    Ok((knobs, out))
}

fn sweep(args: &cli::SweepArgs, m: &clap::ArgMatches) -> anyhow::Result<()> {
    use cachesim::sweep::output;
    output::check_metric(&args.rank_by)?;
    let ascending = if args.ascending {
        true
    } else if args.descending {
        false
    } else {
        output::smaller_is_better(&args.rank_by)
    };
    if let Some(p) = &args.heatmap {
        cachesim::plot::check_plot_path(p)?;
    }
    let (knobs, points) = grid_points(&args.run, &args.grid, m, args.shard, &[])?;
    let jobs: Vec<_> = points.into_iter().map(|(k, p, a)| (k, p, cachesim::config::resolve(&a.options()))).collect();
    let sp = spinner("reading and tokenizing the trace");
    let w = cachesim::load_workload(
        args.run.trace.trace.as_deref(),
        &args.run.trace.read_options(),
        &args.run.build_options(),
    )
    .context("cannot load the trace")?;
    sp.finish_and_clear();
    let pb = points_bar(jobs.len(), "simulating");
    let rows = cachesim::sweep::run_all(&w, jobs, &|| pb.inc(1));
    pb.finish_and_clear();
    if let Some(p) = &args.csv {
        let (header, records) = output::csv_records(&knobs, &rows);
        output::write_csv(p, &header, &records)?;
    }
    if let Some(p) = &args.heatmap {
        cachesim::sweep::heatmap::heatmap(p, &rows, &args.rank_by, ascending)?;
    }
    let order = output::rank(&rows, &args.rank_by, ascending);
    let mut stdout = std::io::stdout().lock();
    if args.run.json {
        let results: Vec<serde_json::Value> = order
            .iter()
            .enumerate()
            .map(|(rank, &i)| {
                let r = &rows[i];
                let mut o = serde_json::Map::new();
                o.insert("rank".into(), (rank + 1).into());
                o.insert("point".into(), r.point.into());
                let knobs: serde_json::Map<String, serde_json::Value> =
                    r.knobs.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
                o.insert("knobs".into(), knobs.into());
                match &r.outcome {
                    Ok(s) => o.extend(output::metrics(s)),
                    Err(e) => {
                        o.insert("error".into(), e.clone().into());
                    }
                }
                o.into()
            })
            .collect();
        let doc = serde_json::json!({
            "rank_by": args.rank_by,
            "ascending": ascending,
            "shard": args.shard.map(|s| format!("{}/{}", s.index, s.count)),
            "trace": &w.info,
            "results": results,
        });
        serde_json::to_writer_pretty(&mut stdout, &doc)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", trace_summary(&w.info))?;
        let dir = if ascending { "smallest first" } else { "largest first" };
        writeln!(stdout, "Ranked by:      {} ({dir}), {} point(s)\n", args.rank_by, rows.len())?;
        write!(stdout, "{}", output::table(&rows, &order))?;
        if let Some(p) = &args.csv {
            writeln!(stdout, "\nCSV:            {}", p.display())?;
        }
    }
    Ok(())
}

fn merge(args: &cli::MergeArgs) -> anyhow::Result<()> {
    let (header, records) = cachesim::sweep::output::merge(&args.inputs)?;
    cachesim::sweep::output::write_csv(&args.csv, &header, &records)?;
    eprintln!("merged {} point(s) from {} file(s) into {}", records.len(), args.inputs.len(), args.csv.display());
    Ok(())
}

fn plan(args: &cli::PlanArgs, m: &clap::ArgMatches) -> anyhow::Result<()> {
    use rayon::prelude::*;
    if args.run.request_rate.is_some() {
        anyhow::bail!("plan searches the request rate itself; drop --request-rate");
    }
    if !(args.tolerance > 0.0 && args.tolerance < 1.0) {
        anyhow::bail!("--tolerance must lie in (0, 1), e.g. 0.01 for 1 %");
    }
    let opts = cachesim::plan::SearchOptions {
        start_rate: args.start_rate,
        tolerance: args.tolerance,
        max_rate: args.max_rate,
        min_rate: (args.start_rate / 1024.0).min(1e-3),
    };
    let (knobs, points) = grid_points(&args.run, &args.grid, m, None, &["request_rate"])?;
    let jobs: Vec<_> = points.into_iter().map(|(k, p, a)| (k, p, cachesim::config::resolve(&a.options()))).collect();
    let sp = spinner("reading and tokenizing the trace");
    let w = cachesim::load_workload(
        args.run.trace.trace.as_deref(),
        &args.run.trace.read_options(),
        &args.run.build_options(),
    )
    .context("cannot load the trace")?;
    sp.finish_and_clear();
    let pb = points_bar(jobs.len(), "searching");
    let results: Vec<(usize, cachesim::sweep::Point, Result<cachesim::plan::PlanResult, String>)> = jobs
        .into_par_iter()
        .map(|(k, p, cfg)| {
            let r = cfg.and_then(|cfg| cachesim::plan::max_rate(&w, &cfg, &args.slo, &opts)).map_err(|e| e.to_string());
            pb.inc(1);
            (k, p, r)
        })
        .collect();
    pb.finish_and_clear();
    let slo_text: Vec<String> = args.slo.0.iter().map(|t| format!("{} <= {} ms", t.key(), t.limit_ms)).collect();
    let mut stdout = std::io::stdout().lock();
    if args.run.json {
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|(k, p, r)| {
                let mut o = serde_json::Map::new();
                o.insert("point".into(), (*k).into());
                for (knob, v) in p {
                    o.insert(knob.clone(), v.clone().into());
                }
                match r {
                    Ok(res) => {
                        if let serde_json::Value::Object(fields) = serde_json::to_value(res).expect("serialisable") {
                            o.extend(fields);
                        }
                    }
                    Err(e) => {
                        o.insert("error".into(), e.clone().into());
                    }
                }
                o.into()
            })
            .collect();
        let doc = serde_json::json!({
            "slo": slo_text,
            "tolerance": args.tolerance,
            "goodput_definition": "max_rate: the highest request rate served within the SLO (DistServe, Zhong et al., OSDI 2024); goodput at it: requests meeting every per-request limit per second (vllm bench serve --goodput)",
            "trace": &w.info,
            "results": rows,
        });
        serde_json::to_writer_pretty(&mut stdout, &doc)?;
        writeln!(stdout)?;
        return Ok(());
    }
    write!(stdout, "{}", trace_summary(&w.info))?;
    writeln!(stdout, "SLO:            {}", slo_text.join(", "))?;
    writeln!(
        stdout,
        "Search:         Poisson arrivals ({} process), rate bracketed from {} req/s then bisected to {} %\n",
        format!("{:?}", args.run.options().arrivals.process).to_lowercase(),
        args.start_rate,
        args.tolerance * 100.0
    )?;
    let mut head: Vec<String> = knobs.clone();
    head.extend(["max req/s", "goodput req/s", "attainment", "output tok/s", "sims"].map(String::from));
    head.extend(args.slo.0.iter().map(|t| t.key()));
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut best: Option<(f64, bool, String)> = None;
    for (_, p, r) in &results {
        let mut cells: Vec<String> = p.iter().map(|(_, v)| v.clone()).collect();
        match r {
            Ok(res) => {
                let rate = match (res.max_rate, res.unbounded) {
                    (Some(r), true) => format!(">= {r:.2}"),
                    (Some(r), false) => format!("{r:.2}"),
                    (None, _) => "none".into(),
                };
                cells.push(rate);
                match &res.at_max_rate {
                    Some(t) => {
                        cells.extend([
                            format!("{:.2}", t.goodput),
                            format!("{:.1} %", t.slo_attainment * 100.0),
                            format!("{:.1}", t.output_throughput),
                        ]);
                        cells.push(res.simulations.to_string());
                        cells.extend(args.slo.0.iter().map(|s| format!("{:.1}", t.slo_values[&s.key()])));
                    }
                    None => {
                        cells.extend(["-", "-", "-"].map(String::from));
                        cells.push(res.simulations.to_string());
                        cells.extend(args.slo.0.iter().map(|_| "-".to_string()));
                    }
                }
                if let Some(r) = res.max_rate {
                    let what = if p.is_empty() {
                        "this configuration".to_string()
                    } else {
                        p.iter().map(|(k, v)| format!("--{k} {v}")).collect::<Vec<_>>().join(" ")
                    };
                    // An unbounded configuration beats every bounded one; the first of equals wins.
                    if best.as_ref().is_none_or(|(b, u, _)| (res.unbounded, r) > (*u, *b)) {
                        best = Some((r, res.unbounded, what));
                    }
                }
            }
            Err(e) => {
                cells.push(format!("failed: {e}"));
            }
        }
        lines.push(cells);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| lines.iter().filter_map(|l| l.get(c)).map(String::len).chain([head[c].len()]).max().unwrap_or(0))
        .collect();
    let fmt =
        |cells: &[String]| cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join("  ");
    writeln!(stdout, "{}", fmt(&head))?;
    for l in &lines {
        writeln!(stdout, "{}", fmt(l))?;
    }
    match best {
        Some((r, false, what)) => {
            writeln!(stdout, "\nBest: {what} sustains {r:.2} req/s within the SLO (one instance).")?
        }
        Some((r, true, what)) => writeln!(
            stdout,
            "\nBest: {what} meets the SLO even at {r} req/s (--max-rate): these requests are too few to load it; send more (--num-prompts)."
        )?,
        None => writeln!(stdout, "\nNo configuration meets the SLO at any rate tried.")?,
    }
    Ok(())
}
