//! `cachesim sweep`, `merge` and `plan` on the binary side: grid points' command lines parsed by
//! clap exactly as `cachesim run` parses them (so any run flag is a knob and names cannot drift),
//! then the library's [`cachesim::sweep`] and [`cachesim::plan`] over one shared workload, and
//! the tables, CSV, JSON and heatmap they print or write.

mod deploy;
mod plan;
mod progress;

use super::{load, Answer, Document};
use crate::cli::{self, GridArgs, RunArgs, TraceArgs};
use cachesim::report::trace_summary;
use cachesim::sweep::file::SweepFile;
use clap::Parser;
use progress::Progress;
use std::fmt::Write;

/// `run`'s flags alone, to re-parse a grid point's command line with clap itself.
#[derive(Debug, Parser)]
#[command(name = "cachesim run", no_binary_name = true)]
struct PointCli {
    #[command(flatten)]
    run: RunArgs,
}

/// Run flags a grid may not name: they change the shared workload or name per-run outputs.
pub const NOT_IN_GRID: [&str; 5] = ["json", "requests_csv", "timeline_csv", "token_times_csv", "plot"];

/// The base command line of a sweep (the run flags given on it) and the grid points' own,
/// parsed by clap exactly as `cachesim run` parses them, so any run flag can be a knob.
pub struct RunFlags {
    cmd: clap::Command,
    /// The same command, built once and parsed with in turn (a clone per point cost a third
    /// of a sweep's set-up).
    parser: std::sync::Mutex<clap::Command>,
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
        let mut flags = Self::with(cmd, base);
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
            flags.parse(&words).map_err(|e| f.error(s.line, &field, &first_line(&e)))?;
            flags.base.push((id, words));
        }
        Ok(flags)
    }

    /// Run flags already in words — (clap id, `--long=value` words), as the Python binding
    /// has them — as a sweep's base.
    pub fn from_words(base: Vec<(String, Vec<String>)>) -> Self {
        use clap::CommandFactory;
        Self::with(PointCli::command(), base)
    }

    fn with(cmd: clap::Command, base: Vec<(String, Vec<String>)>) -> Self {
        Self { parser: std::sync::Mutex::new(cmd.clone()), cmd, base }
    }

    /// Parses run-flag words with the command built once.
    fn parse(&self, argv: &[String]) -> Result<clap::ArgMatches, clap::Error> {
        self.parser.lock().unwrap_or_else(|p| p.into_inner()).try_get_matches_from_mut(argv)
    }

    /// The run flag a knob names: its long name or an alias, `_` read as `-`.
    fn find(&self, knob: &str) -> Option<&clap::Arg> {
        let knob = knob.replace('_', "-");
        let knob = knob.as_str();
        self.cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(knob) || a.get_all_aliases().is_some_and(|al| al.contains(&knob)))
    }

    /// An axis checked as a grid's: a run flag (renamed to its long name), not one that changes
    /// how the trace is read (a sweep reads it once), not an output flag, nor one of
    /// `also_refused`.
    pub fn check_axis(
        &self,
        mut axis: cachesim::sweep::Axis,
        also_refused: &[&str],
    ) -> Result<cachesim::sweep::Axis, String> {
        use clap::Args as _;
        let trace_cmd = TraceArgs::augment_args(clap::Command::new("trace"));
        let arg = self
            .find(&axis.knob)
            .ok_or_else(|| format!("`{}` is not a flag of `cachesim run` (see cachesim run --help)", axis.knob))?;
        let id = arg.get_id().as_str();
        if trace_cmd.get_arguments().any(|t| t.get_id() == id) {
            return Err(format!(
                "`{}` changes how the trace is read, and a sweep reads it once; run one sweep per value",
                axis.knob
            ));
        }
        if id == "deployment" {
            return Err(format!(
                "`{}`: a deployment file expands into run flags before the command line is read, so a grid \
                 cannot vary it; run one sweep per file (`--deployment FILE` outside the grid)",
                axis.knob
            ));
        }
        if NOT_IN_GRID.contains(&id) || also_refused.contains(&id) {
            return Err(format!("`{}` cannot vary across the points of this command", axis.knob));
        }
        axis.knob = arg.get_long().unwrap_or(id).to_string();
        Ok(axis)
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
        let check = |axis: cachesim::sweep::Axis| self.check_axis(axis, also_refused);
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
        let m = self.parse(&argv).map_err(|e| {
            if point.is_empty() {
                first_line(&e)
            } else {
                format!("grid point {described}: {}", first_line(&e))
            }
        })?;
        let run = PointCli::from_arg_matches(&m).map(|p| p.run).map_err(|e| format!("grid point {described}: {e}"))?;
        crate::cli::refuse_foreign_flags(&m, &run).map_err(|e| {
            if point.is_empty() {
                e.to_string()
            } else {
                format!("grid point {described}: {e}")
            }
        })?;
        Ok(run)
    }
}

/// The command-line words setting `arg` (named `knob`) to `value`; a flag without a value takes
/// true or false.
fn words(arg: &clap::Arg, knob: &str, value: &str) -> Result<Vec<String>, String> {
    let knob = arg.get_long().unwrap_or(knob);
    if arg.get_action().takes_values() {
        // `unset`: the point runs without the flag (e.g. kv-offloading-size=unset,16,64: no host
        // tier, then two sizes), where the flag has no default to name.
        if value == UNSET {
            if arg.get_default_values().is_empty() {
                return Ok(Vec::new());
            }
            return Err(format!("`{UNSET}`: --{knob} has a default; name it instead"));
        }
        return Ok(vec![format!("--{knob}={value}")]);
    }
    match value {
        "true" | "True" | "on" | "1" | "yes" => Ok(vec![format!("--{knob}")]),
        "false" | "False" | "off" | "0" | "no" => Ok(Vec::new()),
        _ => Err(format!("`{value}` is not true or false (the flag takes no value)")),
    }
}

/// A grid value that leaves its flag out of the point.
const UNSET: &str = "unset";

/// The first line of a clap error, without its `error: ` prefix.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string()
}

/// Grid points: (index in the grid, knobs, the point's run arguments).
pub(crate) type GridJobs = Vec<(usize, cachesim::sweep::Point, RunArgs)>;

/// What `sweep` and `plan` share: the sweep file, the run flags (command line over `[run]`)
/// and the base run arguments they make.
pub(crate) struct Setup {
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

    /// The input files of the base run flags and the `--file`.
    fn inputs<'a>(&'a self, grid: &'a GridArgs) -> super::files::Named<'a> {
        let mut v = super::files::run_inputs(&self.run);
        v.extend(grid.file.as_deref().map(|p| ("--file", p)));
        v
    }

    /// What identifies this sweep over `grid`, for a shard's sidecar: the base run flags (but
    /// those naming per-run outputs), the axes and the number of points.
    fn identity(&self, grid: &cachesim::sweep::Grid) -> anyhow::Result<cachesim::sweep::identity::Identity> {
        let mut base: Vec<&(String, Vec<String>)> =
            self.flags.base.iter().filter(|(id, _)| !NOT_IN_GRID.contains(&id.as_str())).collect();
        base.sort_by(|a, b| a.0.cmp(&b.0));
        let words = base.into_iter().flat_map(|(_, w)| w.clone()).collect();
        let points = grid.points()?.len();
        Ok(cachesim::sweep::identity::Identity::new(env!("CARGO_PKG_VERSION"), words, grid, points))
    }

    /// Grid points of this command (this shard's only), each with its run arguments parsed.
    fn points(
        &self,
        grid: &GridArgs,
        shard: Option<cachesim::sweep::Shard>,
        also_refused: &[&str],
    ) -> anyhow::Result<(Vec<String>, GridJobs)> {
        let max = grid.max_points;
        self.jobs(&self.grid(grid, also_refused)?, shard, max)
    }

    /// The grid of the file and the command line; refuses per-run output files.
    fn grid(&self, grid: &GridArgs, also_refused: &[&str]) -> anyhow::Result<cachesim::sweep::Grid> {
        let base = &self.run;
        for (set, flag) in [
            (base.requests_csv.is_some(), "--requests-csv"),
            (base.timeline_csv.is_some(), "--timeline-csv"),
            (base.token_times_csv.is_some(), "--token-times-csv"),
        ] {
            if set {
                anyhow::bail!("{flag} writes one run's details; run the chosen point with `cachesim run` for it");
            }
        }
        self.flags.grid(grid, self.file.as_ref(), also_refused)
    }

    /// The grid's points (this shard's only), each with its run arguments parsed; a grid of
    /// more than `max_points` (`--max-points`) is refused before any is parsed.
    fn jobs(
        &self,
        grid: &cachesim::sweep::Grid,
        shard: Option<cachesim::sweep::Shard>,
        max_points: u64,
    ) -> anyhow::Result<(Vec<String>, GridJobs)> {
        let knobs = grid.knobs()?;
        let points = grid.points()?;
        if points.len() as u64 > max_points {
            anyhow::bail!(
                "the grid has {} points, more than --max-points ({}), and each is a whole simulation; \
                 raise --max-points (at most 1,000,000) if that is meant",
                cachesim::text::thousands(points.len() as u64),
                cachesim::text::thousands(max_points)
            );
        }
        let base_build = format!("{:?}", self.run.build_options());
        let mut out = Vec::new();
        for (k, p) in points.into_iter().enumerate() {
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

pub fn sweep(args: &cli::SweepArgs, m: &clap::ArgMatches) -> anyhow::Result<Answer> {
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
    if setup.run.plot.is_some() {
        anyhow::bail!(
            "--plot draws one run; a sweep draws its --heatmap (run the chosen point with `cachesim run --plot`)"
        );
    }
    let sidecar = args.csv.as_deref().filter(|_| args.shard.is_some()).map(cachesim::sweep::identity::sidecar_path);
    check_sweep_files(args, &setup, sidecar.as_deref())?;
    let grid = setup.grid(&args.grid, &[])?;
    let (knobs, points) = setup.jobs(&grid, args.shard, args.grid.max_points)?;
    // A shard's sidecar names its sweep; an unsharded sweep has none to write.
    let identity = args.shard.map(|shard| setup.identity(&grid).map(|id| (shard, id))).transpose()?;
    let jobs: Vec<_> = points.into_iter().map(|(k, p, a)| (k, p, cachesim::config::resolve(&a.options()))).collect();
    let w = load(&setup.run.trace, &setup.run.build_options())?;
    let requests = progress::requests_per_point(&w, jobs.iter().filter_map(|(_, _, c)| c.as_ref().ok()));
    let pb = Progress::start(jobs.len(), "simulating", requests);
    let rows = cachesim::sweep::run_all(&w, jobs, &|| pb.inc());
    pb.finish();
    let mut files = cachesim::output::Outputs::new();
    if let Some(p) = &args.csv {
        let (header, records) = output::csv_records(&knobs, &rows);
        output::stage_csv(&mut files, p, &header, &records)?;
        if let Some((shard, id)) = &identity {
            cachesim::sweep::identity::stage(&mut files, p, *shard, id)?;
        }
    }
    if let Some(p) = &args.heatmap {
        let tmp = files.stage(p)?;
        cachesim::sweep::heatmap::heatmap(&tmp, &rows, &rank_by, ascending)?;
    }
    let order = output::rank(&rows, &rank_by, ascending);
    let compared = args.compare.as_deref().map(|p| cachesim::sweep::compare::compare(p, &rows)).transpose()?;
    files.commit()?;
    let mut stdout = String::new();
    if setup.run.json {
        let near_best = output::within_error_of_best(&rows, &order, &rank_by);
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
                if let Some(b) = near_best[i] {
                    o.insert("within_error_of_best".into(), b.into());
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
            "compare": compared.as_ref().map(|c| serde_json::json!({
                "metrics": c.metrics,
                "rows": c.pairs.iter().map(|p| serde_json::json!({"label": p.label, "point": p.point, "real_predicted": p.values})).collect::<Vec<_>>(),
                "spearman_rho": c.rho,
            })),
        });
        stdout.push_str(&serde_json::to_string_pretty(&doc)?);
        stdout.push('\n');
    } else {
        write!(stdout, "{}", trace_summary(&w.info))?;
        let dir = if ascending { "smallest first" } else { "largest first" };
        writeln!(stdout, "Ranked by:      {} ({dir}), {}\n", rank_by, plural(rows.len(), "point"))?;
        write!(stdout, "{}", output::table(&rows, &order, &rank_by))?;
        if let Some(c) = &compared {
            writeln!(stdout)?;
            write!(stdout, "{}", cachesim::sweep::compare::table(c))?;
        }
        if let Some(p) = &args.csv {
            writeln!(stdout, "\nCSV:            {}", p.display())?;
        }
    }
    Ok(Answer::text(stdout))
}

/// Refuses, before a sweep runs, an output (`--csv`, its shard sidecar, `--heatmap`) that is a
/// folder, an input (the run flags' files, `--file`, `--compare`) or another output, and a
/// shard's `--csv` that is not a file (its sidecar goes beside it, for `merge`).
fn check_sweep_files(args: &cli::SweepArgs, setup: &Setup, sidecar: Option<&std::path::Path>) -> anyhow::Result<()> {
    let mut inputs = setup.inputs(&args.grid);
    inputs.extend(args.compare.as_deref().map(|p| ("--compare", p)));
    let outputs = super::files::given([
        ("--csv", args.csv.as_deref()),
        ("--csv (its shard sidecar)", sidecar),
        ("--heatmap", args.heatmap.as_deref()),
    ]);
    super::files::check(&inputs, &outputs)?;
    if let (Some(p), Some(_)) = (&args.csv, sidecar) {
        if !cachesim::output::target::Target::of("--csv", p)?.replaces() {
            anyhow::bail!(
                "--csv {}: a shard's CSV must be a file, with its sidecar (.sweep.json) beside it for `cachesim merge`",
                p.display()
            );
        }
    }
    Ok(())
}

pub fn merge(args: &cli::MergeArgs) -> anyhow::Result<Answer> {
    let sidecars: Vec<std::path::PathBuf> =
        args.inputs.iter().map(|p| cachesim::sweep::identity::sidecar_path(p)).collect();
    let inputs: super::files::Named = args.inputs.iter().chain(&sidecars).map(|p| ("merge", p.as_path())).collect();
    super::files::check(&inputs, &[("--csv", &args.csv)])?;
    let (header, records) = cachesim::sweep::output::merge(&args.inputs)?;
    cachesim::sweep::output::write_csv(&args.csv, &header, &records)?;
    let note = format!(
        "merged {} from {} into {}",
        plural(records.len(), "point"),
        plural(args.inputs.len(), "file"),
        args.csv.display()
    );
    Ok(Answer { document: Document::Empty, notes: vec![note], failed: None })
}

/// "1 point", "2 points".
pub(crate) fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// In `sweep` and `plan`, a run flag given a list or an integer range on the command line is a
/// grid axis: `--tp 1,2,4` is `--grid tp=1,2,4`, `--max-num-seqs 16..64:16` is
/// `--grid max-num-seqs=16..64:16`, `--instances 1..16` is `--grid instances=1..16`;
/// `--gpus a,b` is `--grid gpu=a,b`. Trace flags, flags whose value is a list (`--lora-modules
/// a,b`) and values that look like paths are left alone. Other commands' words pass
/// through unchanged.
pub fn lists_as_axes(argv: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::{Args as _, CommandFactory};
    if !matches!(argv.get(1).and_then(|a| a.to_str()), Some("sweep" | "plan")) {
        return argv;
    }
    let cmd = PointCli::command();
    let trace_cmd = TraceArgs::augment_args(clap::Command::new("trace"));
    let is_list = |v: &str| {
        let item = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || "_.@-".contains(c));
        let range = |t: &str| {
            let (a, rest) = t.split_once("..").unwrap_or(("x", ""));
            let (b, step) = rest.split_once(':').unwrap_or((rest, "1"));
            [a, b, step].iter().all(|n| n.parse::<i64>().is_ok())
        };
        (v.contains(',') && v.split(',').all(item)) || range(v)
    };
    // The knob a flag's list becomes an axis of, if it does.
    let axis_of = |name: &str, value: &str| -> Option<String> {
        if name == "gpus" {
            return Some("gpu".into());
        }
        let arg = cmd.get_arguments().find(|a| a.get_long() == Some(name))?;
        let is_trace = trace_cmd.get_arguments().any(|t| t.get_id() == arg.get_id());
        // A flag whose value is itself a list (--lora-modules a,b) is one value.
        let one_list = arg.get_value_delimiter().is_some();
        (!is_trace && !one_list && arg.get_action().takes_values() && is_list(value)).then(|| name.to_string())
    };
    let mut out: Vec<std::ffi::OsString> = argv[..2].to_vec();
    let mut i = 2;
    while i < argv.len() {
        let word = argv[i].to_str().unwrap_or("");
        let Some(flag) = word.strip_prefix("--").filter(|f| !f.is_empty()) else {
            out.push(argv[i].clone());
            i += 1;
            continue;
        };
        let (name, value, used) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v), 1),
            None => (flag, argv.get(i + 1).and_then(|v| v.to_str()), 2),
        };
        match value.and_then(|v| axis_of(name, v).map(|k| format!("--grid={k}={v}"))) {
            Some(grid) => {
                out.push(grid.into());
                i += used;
            }
            None => {
                out.push(argv[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// `cachesim plan`: the cheapest deployment at a `--target-rate` ([`deploy::target`]), else the
/// highest rate each configuration sustains under the SLO ([`plan::rates`]).
pub fn plan(args: &cli::PlanArgs, m: &clap::ArgMatches) -> anyhow::Result<Answer> {
    let plan = plan::Plan::new(args, m)?;
    match args.target_rate {
        Some(rate) => deploy::target(args, &plan, rate),
        None => plan::rates(args, &plan),
    }
}
