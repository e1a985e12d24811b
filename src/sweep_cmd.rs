//! `cachesim sweep`, `merge` and `plan` on the binary side: grid points' command lines parsed by
//! clap exactly as `cachesim run` parses them (so any run flag is a knob and names cannot drift),
//! then the library's [`cachesim::sweep`] and [`cachesim::plan`] over one shared workload, and
//! the tables, CSV, JSON and heatmap they print or write.

use super::{load, trace_summary};
use crate::cli::{self, GridArgs, RunArgs, TraceArgs};
use cachesim::sweep::file::SweepFile;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;

/// `run`'s flags alone, to re-parse a grid point's command line with clap itself.
#[derive(Debug, Parser)]
#[command(name = "cachesim run", no_binary_name = true)]
struct PointCli {
    #[command(flatten)]
    run: RunArgs,
}

/// Run flags a grid may not name: they change the shared workload or name per-run outputs.
const NOT_IN_GRID: [&str; 5] = ["json", "requests_csv", "timeline_csv", "token_times_csv", "plot"];

/// The base command line of a sweep (the run flags given on it) and the grid points' own,
/// parsed by clap exactly as `cachesim run` parses them, so any run flag can be a knob.
pub struct RunFlags {
    cmd: clap::Command,
    /// (argument id, its `--long=value` words on the base command line).
    base: Vec<(String, Vec<String>)>,
}

impl RunFlags {
    /// Reads the run flags set on the command line from the command's matches, then the sweep
    /// file's `[run]` settings for flags the command line leaves unset; a file setting that is
    /// not a run flag, or whose value `cachesim run` would refuse, is an error at its line.
    pub fn new(m: &clap::ArgMatches, file: Option<&SweepFile>) -> anyhow::Result<Self> {
        use clap::CommandFactory;
        let cmd = PointCli::command();
        let mut base = Vec::new();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            let Some(long) = arg.get_long() else { continue };
            if m.value_source(id) != Some(clap::parser::ValueSource::CommandLine) {
                continue;
            }
            let words = if arg.get_action().takes_values() {
                m.get_raw(id).into_iter().flatten().map(|v| format!("--{long}={}", v.to_string_lossy())).collect()
            } else {
                vec![format!("--{long}")]
            };
            base.push((id.to_string(), words));
        }
        let mut flags = Self { cmd, base };
        for s in file.map(|f| f.run.as_slice()).unwrap_or_default() {
            let f = file.expect("settings come from a file");
            let field = format!("run.{}", s.knob);
            let arg = flags
                .find(&s.knob)
                .ok_or_else(|| f.error(s.line, &field, "not a flag of `cachesim run` (see cachesim run --help)"))?;
            let id = arg.get_id().to_string();
            if flags.base.iter().any(|(b, _)| *b == id) {
                continue;
            }
            let words = words(arg, &s.knob, &s.value).map_err(|e| f.error(s.line, &field, &e))?;
            flags.cmd.clone().try_get_matches_from(&words).map_err(|e| f.error(s.line, &field, &first_line(&e)))?;
            flags.base.push((id, words));
        }
        Ok(flags)
    }

    fn find(&self, knob: &str) -> Option<&clap::Arg> {
        self.cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(knob) || a.get_all_aliases().is_some_and(|al| al.contains(&knob)))
    }

    /// The grid, the file's axes first, with every knob renamed to its flag's long name; refuses
    /// unknown flags, flags of the trace (the workload is loaded once per sweep), output flags
    /// and `also_refused`. Errors about a file axis name its line.
    pub fn grid(
        &self,
        g: &GridArgs,
        file: Option<&SweepFile>,
        also_refused: &[&str],
    ) -> anyhow::Result<cachesim::sweep::Grid> {
        use clap::Args as _;
        let trace_cmd = TraceArgs::augment_args(clap::Command::new("trace"));
        let trace_ids: Vec<&str> = trace_cmd.get_arguments().map(|a| a.get_id().as_str()).collect();
        let check = |mut axis: cachesim::sweep::Axis| -> Result<cachesim::sweep::Axis, String> {
            let arg = self.find(&axis.knob).ok_or_else(|| {
                if axis.knob == "instances" {
                    "`instances` needs --instances in `cachesim run` (multi-instance runs), which this build lacks"
                        .to_string()
                } else {
                    format!("`{}` is not a flag of `cachesim run` (see cachesim run --help)", axis.knob)
                }
            })?;
            let id = arg.get_id().as_str();
            if trace_ids.contains(&id) {
                return Err(format!(
                    "`{}` changes how the trace is read, and a sweep reads it once; run one sweep per value",
                    axis.knob
                ));
            }
            if NOT_IN_GRID.contains(&id) || also_refused.contains(&id) {
                return Err(format!("`{}` cannot vary across the points of this command", axis.knob));
            }
            axis.knob = arg.get_long().unwrap_or(id).to_string();
            Ok(axis)
        };
        let mut axes = Vec::new();
        let mut zip = Vec::new();
        for (section, from_file, from_cli, out) in
            [("grid", file.map(|f| &f.grid), &g.grid, &mut axes), ("zip", file.map(|f| &f.zip), &g.zip, &mut zip)]
        {
            for (axis, line) in from_file.into_iter().flatten() {
                let f = file.expect("axes come from a file");
                let field = format!("{section}.{}", axis.knob);
                out.push(check(axis.clone()).map_err(|e| f.error(*line, &field, &e))?);
            }
            for s in from_cli {
                let axis = cachesim::sweep::parse_axis(s)?;
                out.push(check(axis).map_err(|e| anyhow::anyhow!("--{section}: {e}"))?);
            }
        }
        Ok(cachesim::sweep::Grid { axes, zip })
    }

    /// The base run arguments: the command line and the file's `[run]`, no grid point.
    pub fn base_args(&self) -> anyhow::Result<RunArgs> {
        self.parse_point(&Vec::new()).map_err(anyhow::Error::msg)
    }

    /// The run arguments of one point: the base command line, the point's flags replacing the
    /// base's, parsed by clap (so values are checked as `cachesim run` checks them).
    pub fn parse_point(&self, point: &cachesim::sweep::Point) -> Result<RunArgs, String> {
        use clap::FromArgMatches;
        let mut set: Vec<&str> = Vec::new();
        let mut extra: Vec<String> = Vec::new();
        for (knob, value) in point {
            let arg = self.find(knob).ok_or_else(|| format!("`{knob}` is not a flag of `cachesim run`"))?;
            set.push(arg.get_id().as_str());
            extra.extend(words(arg, knob, value).map_err(|e| format!("--grid {knob}: {e}"))?);
        }
        let mut argv: Vec<String> =
            self.base.iter().filter(|(id, _)| !set.contains(&id.as_str())).flat_map(|(_, w)| w.clone()).collect();
        argv.extend(extra);
        let described = point.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        let m = self.cmd.clone().try_get_matches_from(&argv).map_err(|e| {
            if point.is_empty() {
                first_line(&e)
            } else {
                format!("grid point {described}: {}", first_line(&e))
            }
        })?;
        PointCli::from_arg_matches(&m).map(|p| p.run).map_err(|e| format!("grid point {described}: {e}"))
    }
}

/// The command-line words setting `arg` (named `knob`) to `value`; a flag without a value takes
/// true or false.
fn words(arg: &clap::Arg, knob: &str, value: &str) -> Result<Vec<String>, String> {
    if arg.get_action().takes_values() {
        return Ok(vec![format!("--{knob}={value}")]);
    }
    match value {
        "true" | "on" | "1" | "yes" => Ok(vec![format!("--{knob}")]),
        "false" | "off" | "0" | "no" => Ok(Vec::new()),
        _ => Err(format!("`{value}` is not true or false (the flag takes no value)")),
    }
}

/// The first line of a clap error, without its `error: ` prefix.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string()
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

/// What `sweep` and `plan` share: the sweep file, the run flags (command line over `[run]`)
/// and the base run arguments they make.
struct Setup {
    file: Option<SweepFile>,
    flags: RunFlags,
    run: RunArgs,
}

impl Setup {
    fn new(grid: &GridArgs, m: &clap::ArgMatches) -> anyhow::Result<Setup> {
        let file = grid.file.as_deref().map(SweepFile::read).transpose()?;
        let flags = RunFlags::new(m, file.as_ref())?;
        let run = flags.base_args()?;
        Ok(Setup { file, flags, run })
    }

    /// Grid points of this command (this shard's only), each with its run arguments parsed.
    fn points(
        &self,
        grid: &GridArgs,
        shard: Option<cachesim::sweep::Shard>,
        also_refused: &[&str],
    ) -> anyhow::Result<(Vec<String>, GridJobs)> {
        let base = &self.run;
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
        let grid = self.flags.grid(grid, self.file.as_ref(), also_refused)?;
        let knobs = grid.knobs()?;
        let base_build = format!("{:?}", base.build_options());
        let mut out = Vec::new();
        for (k, p) in grid.points()?.into_iter().enumerate() {
            if shard.is_some_and(|s| !s.contains(k)) {
                continue;
            }
            let args = self.flags.parse_point(&p).map_err(anyhow::Error::msg)?;
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
}

pub fn sweep(args: &cli::SweepArgs, m: &clap::ArgMatches) -> anyhow::Result<()> {
    use cachesim::sweep::output;
    let setup = Setup::new(&args.grid, m)?;
    let from_cli = |id: &str| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    let file_rank = setup.file.as_ref().and_then(|f| f.rank_by.clone()).filter(|_| !from_cli("rank_by"));
    let rank_by = file_rank.unwrap_or_else(|| args.rank_by.clone());
    output::check_metric(&rank_by)?;
    let ascending = if args.ascending {
        true
    } else if args.descending {
        false
    } else {
        setup.file.as_ref().and_then(|f| f.ascending).unwrap_or_else(|| output::smaller_is_better(&rank_by))
    };
    if let Some(p) = &args.heatmap {
        cachesim::plot::check_plot_path(p)?;
    }
    let (knobs, points) = setup.points(&args.grid, args.shard, &[])?;
    let jobs: Vec<_> = points.into_iter().map(|(k, p, a)| (k, p, cachesim::config::resolve(&a.options()))).collect();
    let w = load(&setup.run.trace, &setup.run.build_options())?;
    let pb = points_bar(jobs.len(), "simulating");
    let rows = cachesim::sweep::run_all(&w, jobs, &|| pb.inc(1));
    pb.finish_and_clear();
    if let Some(p) = &args.csv {
        let (header, records) = output::csv_records(&knobs, &rows);
        output::write_csv(p, &header, &records)?;
    }
    if let Some(p) = &args.heatmap {
        cachesim::sweep::heatmap::heatmap(p, &rows, &rank_by, ascending)?;
    }
    let order = output::rank(&rows, &rank_by, ascending);
    let mut stdout = std::io::stdout().lock();
    if setup.run.json {
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
            "rank_by": rank_by,
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
        writeln!(stdout, "Ranked by:      {} ({dir}), {}\n", rank_by, plural(rows.len(), "point"))?;
        write!(stdout, "{}", output::table(&rows, &order))?;
        if let Some(p) = &args.csv {
            writeln!(stdout, "\nCSV:            {}", p.display())?;
        }
    }
    Ok(())
}

pub fn merge(args: &cli::MergeArgs) -> anyhow::Result<()> {
    let (header, records) = cachesim::sweep::output::merge(&args.inputs)?;
    cachesim::sweep::output::write_csv(&args.csv, &header, &records)?;
    eprintln!(
        "merged {} from {} into {}",
        plural(records.len(), "point"),
        plural(args.inputs.len(), "file"),
        args.csv.display()
    );
    Ok(())
}

pub fn plan(args: &cli::PlanArgs, m: &clap::ArgMatches) -> anyhow::Result<()> {
    use rayon::prelude::*;
    let setup = Setup::new(&args.grid, m)?;
    let slo = args
        .slo
        .clone()
        .or_else(|| setup.file.as_ref().and_then(|f| f.slo.clone()))
        .ok_or_else(|| anyhow::anyhow!("plan needs an SLO: --slo ttft_p99=2000,… or slo = \"…\" in the --file"))?;
    let slo = &slo;
    if setup.run.request_rate.is_some() {
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
    let shape = if args.trace_shape { cachesim::plan::Shape::Trace } else { cachesim::plan::Shape::Poisson };
    let refused: &[&str] = if args.trace_shape { &["request_rate", "time_scale"] } else { &["request_rate"] };
    let (knobs, points) = setup.points(&args.grid, None, refused)?;
    let jobs: Vec<_> = points.into_iter().map(|(k, p, a)| (k, p, cachesim::config::resolve(&a.options()))).collect();
    let w = load(&setup.run.trace, &setup.run.build_options())?;
    if args.trace_shape && !w.requests.iter().all(|r| r.arrival_ms.is_some()) {
        anyhow::bail!(
            "--trace-shape: {} has no time stamps; drop --trace-shape to search Poisson rates",
            w.info.path.display()
        );
    }
    let pb = points_bar(jobs.len(), "searching");
    let results: Vec<(usize, cachesim::sweep::Point, Result<cachesim::plan::PlanResult, String>)> = jobs
        .into_par_iter()
        .map(|(k, p, cfg)| {
            let r =
                cfg.and_then(|cfg| cachesim::plan::max_rate(&w, &cfg, slo, &opts, shape)).map_err(|e| e.to_string());
            pb.inc(1);
            (k, p, r)
        })
        .collect();
    pb.finish_and_clear();
    let slo_text: Vec<String> = slo.0.iter().map(|t| format!("{} <= {} ms", t.key(), t.limit_ms)).collect();
    let mut stdout = std::io::stdout().lock();
    if setup.run.json {
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
            "arrivals": shape,
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
    let arrivals = if args.trace_shape {
        "the trace's own arrival pattern, time stamps scaled to each rate".to_string()
    } else {
        format!("Poisson arrivals ({} process)", format!("{:?}", setup.run.options().arrivals.process).to_lowercase())
    };
    writeln!(
        stdout,
        "Search:         {arrivals}, rate bracketed from {} req/s then bisected to {} %\n",
        args.start_rate,
        args.tolerance * 100.0
    )?;
    let mut head: Vec<String> = knobs.clone();
    head.extend(["max req/s", "goodput req/s", "attainment", "output tok/s", "sims"].map(String::from));
    head.extend(slo.0.iter().map(|t| t.key()));
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
                        cells.extend(slo.0.iter().map(|s| format!("{:.1}", t.slo_values[&s.key()])));
                    }
                    None => {
                        cells.extend(["-", "-", "-"].map(String::from));
                        cells.push(res.simulations.to_string());
                        cells.extend(slo.0.iter().map(|_| "-".to_string()));
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

/// "1 point", "2 points".
fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}
