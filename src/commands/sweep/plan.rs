//! `cachesim plan`: per grid point, the highest request rate meeting the SLO (table, JSON and
//! the SLO-metric-against-rate figure of the best points); with `--target-rate`, the cheapest
//! deployment meeting it at that rate ([`super::deploy`]). Every answer names the calibration
//! its step times come from.

use super::{Progress, Setup};
use crate::cli;
use crate::commands::Answer;
use cachesim::plan::{PlanResult, SearchOptions, Shape, Slo};
use std::fmt::Write;

/// What `plan` and its deployment search share: the setup, SLO, search options and arrivals.
pub(super) struct Plan {
    pub setup: Setup,
    pub slo: Slo,
    pub opts: SearchOptions,
    pub shape: Shape,
    /// Run flags `plan` searches itself, refused in the grid.
    pub refused: &'static [&'static str],
}

impl Plan {
    pub fn new(args: &cli::PlanArgs, m: &clap::ArgMatches) -> anyhow::Result<Plan> {
        let setup = Setup::new(&args.grid, m)?;
        let slo =
            args.slo.clone().or_else(|| setup.file.as_ref().and_then(|f| f.slo.clone())).ok_or_else(|| {
                anyhow::anyhow!("plan needs an SLO: --slo ttft_p99=2000,… or slo = \"…\" in the --file")
            })?;
        if setup.run.request_rate.is_some() {
            anyhow::bail!("plan searches the request rate itself; drop --request-rate");
        }
        if !(args.tolerance > 0.0 && args.tolerance < 1.0) {
            anyhow::bail!("--tolerance must lie in (0, 1), e.g. 0.01 for 1 %");
        }
        if let Some(p) = &setup.run.plot {
            cachesim::plot::check_plot_path(p)?;
        }
        let outputs = crate::commands::files::given([("--plot", setup.run.plot.as_deref())]);
        crate::commands::files::check(&setup.inputs(&args.grid), &outputs)?;
        let opts = SearchOptions {
            start_rate: args.start_rate,
            tolerance: args.tolerance,
            max_rate: args.max_rate,
            min_rate: (args.start_rate / 1024.0).min(1e-3),
        };
        let shape = if args.trace_shape { Shape::Trace } else { Shape::Poisson };
        let refused: &[&str] = if args.trace_shape { &["request_rate", "time_scale"] } else { &["request_rate"] };
        Ok(Plan { setup, slo, opts, shape, refused })
    }

    /// Draws the SLO metrics of `curves` against the rate to `path` (`--plot`), all or nothing.
    pub fn plot(
        &self,
        path: &std::path::Path,
        curves: &[cachesim::plan::plot::Curve],
        target_rate: Option<f64>,
    ) -> anyhow::Result<()> {
        let mut files = cachesim::output::Outputs::new();
        let tmp = files.stage(path)?;
        cachesim::plan::plot::rate_plot(&tmp, &self.slo, curves, target_rate)?;
        files.commit()?;
        Ok(())
    }

    /// The trace, read once, with `--trace-shape` checked against it.
    pub fn load(&self) -> anyhow::Result<cachesim::workload::Workload> {
        let w = crate::commands::load(&self.setup.run.trace, &self.setup.run.build_options())?;
        if self.shape == Shape::Trace && !w.requests.iter().all(|r| r.arrival_ms.is_some()) {
            anyhow::bail!(
                "--trace-shape: {} has no time stamps; drop --trace-shape to search Poisson rates",
                w.info.path.display()
            );
        }
        self.slo.check_classes(&w)?;
        Ok(w)
    }

    /// The SLO as `key <= limit ms` (or `%`) items.
    pub fn slo_text(&self) -> Vec<String> {
        self.slo.0.iter().map(|t| format!("{} <= {} {}", t.key(), t.limit_ms, t.unit())).collect()
    }

    /// The lines every plan answer opens with: trace, SLO, arrivals, calibration ([`calibration`]).
    pub fn header(&self, w: &cachesim::workload::Workload, search: &str, calibration: &str) -> String {
        let mut s = cachesim::report::trace_summary(&w.info);
        s += &format!("SLO:            {}\n", self.slo_text().join(", "));
        let arrivals = match self.shape {
            Shape::Trace => "the trace's own arrival pattern, time stamps scaled to each rate".to_string(),
            Shape::Poisson => format!(
                "Poisson arrivals ({} process)",
                format!("{:?}", self.setup.run.options().arrivals.process).to_lowercase()
            ),
        };
        s += &format!("Arrivals:       {arrivals}\n");
        s += &format!("Search:         {search}\n");
        s += &format!("Calibration:    {calibration}\n\n");
        s
    }
}

/// The calibration the step times of `run` come from, and its validated error: with
/// `--calibration none` the raw roofline, with a file that profile for every configuration, by
/// default the built-in fitted profile matching each configuration's GPU, engine family and
/// model (else the composed prior) — only the profiles that match one of `cfgs` (the grid's
/// configurations), with the leave-one-out error each records.
pub(super) fn calibration<'a>(
    run: &cli::RunArgs,
    cfgs: impl IntoIterator<Item = &'a cachesim::config::RunConfig>,
) -> anyhow::Result<String> {
    use cachesim::calibration::{prior, profile};
    // The composed prior in words, with the device and engine pieces it takes for `cfgs`.
    let composed = |cfgs: &[&cachesim::config::RunConfig]| {
        let mut device: Vec<String> = Vec::new();
        let mut host: Vec<String> = Vec::new();
        for c in cfgs {
            let e = c.engine.engine;
            let class = c.model_class();
            let d = match prior::composed(&c.gpu, e, &class).device {
                Some(d) => format!("{}'s device factors from {}", c.gpu.name, d.profile.name),
                None => "the H200 kernel steps' device factors".to_string(),
            };
            let h = match prior::engine_piece(e, |_| true) {
                Some((_, p)) => format!("{}'s host time from {}", profile::family(e), p.name),
                None => format!("{}'s host time at the priors", profile::family(e)),
            };
            for (list, x) in [(&mut device, d), (&mut host, h)] {
                if !list.contains(&x) {
                    list.push(x);
                }
            }
        }
        format!("the composed prior ({}; {})", device.join(", "), host.join(", "))
    };
    let cfgs: Vec<_> = cfgs.into_iter().collect();
    Ok(match run.options().calibration {
        cachesim::config::Calibration::None => "none (raw roofline, --calibration none)".to_string(),
        cachesim::config::Calibration::Kernels => {
            format!("kernels ({}) for every configuration", composed(&cfgs))
        }
        cachesim::config::Calibration::File(f) => {
            let p = profile::read(&f)?;
            format!("{} ({}) for every configuration; {}", p.name, f.display(), p.quality())
        }
        cachesim::config::Calibration::Auto => {
            let mut names: Vec<String> = Vec::new();
            let mut unmatched = Vec::new();
            for c in &cfgs {
                match profile::builtin_for(&c.gpu.name, c.engine.engine, &c.model.name) {
                    Some((_, p)) => {
                        let name = format!("{} ({})", p.name, p.quality());
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                    None => unmatched.push(*c),
                }
            }
            if names.is_empty() {
                format!(
                    "{} for every configuration: no fitted profile matches their GPU, engine family and model",
                    composed(&unmatched)
                )
            } else if unmatched.is_empty() {
                format!("fitted profile per configuration: {}", names.join(", "))
            } else {
                format!(
                    "fitted profile per configuration where one matches its GPU, engine family and model, else {}; \
                     profiles that apply: {}",
                    composed(&unmatched),
                    names.join(", ")
                )
            }
        }
    })
}

/// `cachesim plan` without `--target-rate`: the highest rate each configuration sustains.
pub fn rates(args: &cli::PlanArgs, plan: &Plan) -> anyhow::Result<Answer> {
    use rayon::prelude::*;
    let prices = [
        ("--gpu-price", !args.gpu_price.is_empty()),
        ("--dram-price", args.dram_price.is_some()),
        ("--ssd-price", args.ssd_price.is_some()),
    ];
    for (flag, given) in prices {
        if given {
            anyhow::bail!("{flag} prices deployments at a --target-rate; give one");
        }
    }
    let (slo, opts, shape) = (&plan.slo, plan.opts, plan.shape);
    let (knobs, points) = plan.setup.points(&args.grid, None, plan.refused)?;
    let jobs: Vec<_> = points.into_iter().map(|(k, p, a)| (k, p, cachesim::config::resolve(&a.options()))).collect();
    let calibration_text = calibration(&plan.setup.run, jobs.iter().filter_map(|(_, _, c)| c.as_ref().ok()))?;
    let w = plan.load()?;
    let requests = super::progress::requests_per_point(&w, jobs.iter().filter_map(|(_, _, c)| c.as_ref().ok()));
    let pb = Progress::start(jobs.len(), "searching", requests);
    let searched: Vec<_> = jobs
        .into_par_iter()
        .map(|(k, p, cfg)| {
            let r = cfg.and_then(|cfg| {
                let r = cachesim::plan::max_rate(&w, &cfg, slo, &opts, shape)?;
                let bar = cachesim::plan::rate_bar(&w, &cfg, slo, &opts, shape, r.max_rate)?;
                Ok((r, bar))
            });
            pb.inc();
            (k, p, r.map_err(|e| e.to_string()))
        })
        .collect();
    pb.finish();
    let mut bars: Vec<Option<cachesim::plan::RateBar>> = Vec::new();
    let results: Vec<(usize, cachesim::sweep::Point, Result<PlanResult, String>)> = searched
        .into_iter()
        .map(|(k, p, r)| {
            let (r, bar) = match r {
                Ok((r, bar)) => (Ok(r), bar),
                Err(e) => (Err(e), None),
            };
            bars.push(bar);
            (k, p, r)
        })
        .collect();
    // Best first: unbounded, then the highest rate; ties in grid order.
    let mut order: Vec<usize> =
        (0..results.len()).filter(|&i| matches!(&results[i].2, Ok(r) if r.max_rate.is_some())).collect();
    order.sort_by(|&a, &b| {
        let key =
            |i: usize| results[i].2.as_ref().map(|r| (r.unbounded, r.max_rate.unwrap_or(0.0))).unwrap_or_default();
        let (ka, kb) = (key(a), key(b));
        kb.0.cmp(&ka.0).then(kb.1.total_cmp(&ka.1)).then(a.cmp(&b))
    });
    // Whether each point's rate bar overlaps the best point's.
    let best_bar = order.first().and_then(|&i| bars[i].as_ref());
    let near_best: Vec<Option<bool>> = bars.iter().map(|b| Some(b.as_ref()?.overlaps(best_bar?))).collect();
    if let Some(path) = &plan.setup.run.plot {
        let curves: Vec<cachesim::plan::plot::Curve> = order
            .iter()
            .take(args.top.max(1))
            .map(|&i| cachesim::plan::plot::Curve {
                label: describe(&results[i].1),
                trials: results[i].2.as_ref().map(|r| r.trials.clone()).unwrap_or_default(),
            })
            .collect();
        plan.plot(path, &curves, None)?;
    }
    let mut stdout = String::new();
    if plan.setup.run.json {
        let rows: Vec<serde_json::Value> = results
            .iter()
            .zip(bars.iter().zip(&near_best))
            .map(|((k, p, r), (bar, near))| {
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
                if let Some(b) = bar {
                    o.insert("rate_bar".into(), serde_json::to_value(b).expect("serialisable"));
                }
                if let Some(n) = near {
                    o.insert("within_error_of_best".into(), (*n).into());
                }
                o.into()
            })
            .collect();
        let doc = serde_json::json!({
            "slo": plan.slo_text(),
            "tolerance": args.tolerance,
            "arrivals": shape,
            "calibration": serde_json::Value::Null,
            "calibration_text": calibration_text,
            "goodput_definition": "max_rate: the highest request rate served within the SLO (DistServe, Zhong et al., OSDI 2024); goodput at it: requests meeting every per-request limit per second (vllm bench serve --goodput)",
            "trace": &w.info,
            "results": rows,
        });
        stdout.push_str(&serde_json::to_string_pretty(&doc)?);
        stdout.push('\n');
        return Ok(Answer::text(stdout));
    }
    let search = format!("rate bracketed from {} req/s then bisected to {} %", args.start_rate, args.tolerance * 100.0);
    write!(stdout, "{}", plan.header(&w, &search, &calibration_text))?;
    let mut head: Vec<String> = knobs.clone();
    head.extend(
        ["max req/s", "if off", "near best", "goodput req/s", "attainment", "output tok/s", "sims"].map(String::from),
    );
    head.extend(slo.0.iter().map(|t| t.key()));
    let mut lines: Vec<Vec<String>> = Vec::new();
    for ((_, p, r), (bar, near)) in results.iter().zip(bars.iter().zip(&near_best)) {
        let mut cells: Vec<String> = p.iter().map(|(_, v)| v.clone()).collect();
        match r {
            Ok(res) => {
                let rate = match (res.max_rate, res.unbounded) {
                    (Some(r), true) => format!(">= {r:.2}"),
                    (Some(r), false) => format!("{r:.2}"),
                    (None, _) => "none".into(),
                };
                cells.push(rate);
                cells.push(bar.as_ref().map_or_else(|| "-".to_string(), rate_range));
                cells.push(match near {
                    Some(true) => "yes".to_string(),
                    Some(false) => "no".to_string(),
                    None => "-".to_string(),
                });
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
            }
            Err(e) => cells.push(format!("failed: {e}")),
        }
        lines.push(cells);
    }
    write!(stdout, "{}", table(&head, &lines))?;
    if bars.iter().any(Option::is_some) {
        writeln!(
            stdout,
            "\nif off: the highest rate if cachesim errs on every SLO metric as at the cautious and the hopeful end of the \
             middle 80 % of its errors on the measured runs nearest to the configuration (each limit × (1 + error); the \
             median's errors stand for its tails; calibration/residuals.csv). near best: that range overlaps the best \
             configuration's, so the two cannot be told apart at that accuracy."
        )?;
    }
    let best = order.first().and_then(|&i| results[i].2.as_ref().ok().map(|r| (r, describe(&results[i].1), i)));
    match best {
        Some((r, what, i)) if !r.unbounded => {
            let at = r.at_max_rate.as_ref().map(|t| at_values(slo, t)).unwrap_or_default();
            let off = bars[i]
                .as_ref()
                .map(|b| format!("; {} req/s if cachesim is off as on its nearest measured runs", rate_range(b)));
            let close = near_best.iter().filter(|n| **n == Some(true)).count().saturating_sub(1);
            let close = if close > 0 {
                format!(" {} cannot be told apart from it.", super::plural(close, "other configuration"))
            } else {
                String::new()
            };
            writeln!(
                stdout,
                "\nBest: {what} sustains {:.2} req/s within the SLO ({at}), on one instance{}.{close}",
                r.max_rate.unwrap_or(0.0),
                off.unwrap_or_default()
            )?
        }
        Some((r, what, i)) => writeln!(
            stdout,
            "\nBest: {what} meets the SLO even at {} req/s (--max-rate): {}.",
            r.max_rate.unwrap_or(0.0),
            unbounded_why(&plan.setup.run, &results[i].1, &w)
        )?,
        None => {
            let lowest =
                results.iter().filter_map(|(_, _, r)| r.as_ref().ok()).flat_map(|r| &r.trials).min_by(|a, b| {
                    let over = |t: &cachesim::plan::Trial| {
                        slo.0.iter().filter(|s| t.slo_values[&s.key()] > s.limit_ms).count()
                    };
                    a.rate.total_cmp(&b.rate).then(over(a).cmp(&over(b)))
                });
            writeln!(
                stdout,
                "\nNo configuration meets the SLO at any rate tried{}.",
                lowest.map(|t| missed(slo, t)).unwrap_or_default()
            )?
        }
    }
    if let Some(p) = &plan.setup.run.plot {
        writeln!(stdout, "Plot:           {}", p.display())?;
    }
    Ok(Answer::text(stdout))
}

/// Why a configuration meets the SLO at every rate up to `--max-rate`: the client's concurrency
/// cap (the point's or the base's `--max-concurrency`: requests beyond it wait at the client,
/// and the benchmark clients time a request from its send — vLLM 0.10 `vllm/benchmarks/serve.py`
/// and SGLang 0.4 `python/sglang/bench_serving.py`, `benchmark`'s `limited_request_func` takes
/// the semaphore before `request_func` starts its clock — so no rate overloads the engine), or
/// too few requests to load it.
fn unbounded_why(run: &cli::RunArgs, point: &cachesim::sweep::Point, w: &cachesim::workload::Workload) -> String {
    let knob = |k: &str| point.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone());
    let cap = knob("max-concurrency").or_else(|| run.max_concurrency.map(|c| c.to_string()));
    if let Some(c) = cap {
        return format!(
            "--max-concurrency {c} keeps at most {c} requests in flight whatever the rate, and the clients time each \
             request from its send, so no rate overloads it; drop --max-concurrency to find the highest rate"
        );
    }
    let held = w.requests.len();
    match knob("num-prompts").and_then(|n| n.parse::<usize>().ok()).or(run.num_prompts) {
        Some(n) if n < held => {
            format!("--num-prompts {n} sends too few requests to load it; send more (the trace holds {held})")
        }
        _ => format!(
            "the trace's {} are too few to load it; a longer trace would (cachesim gen writes one of any length)",
            super::plural(held, "request")
        ),
    }
}

/// Why no rate met the SLO, from the lowest rate tried: the SLO targets its run missed, with
/// their values (at a rate that low the requests barely overlap, so the SLO asks for less
/// than one request alone takes).
fn missed(slo: &Slo, t: &cachesim::plan::Trial) -> String {
    let missed: Vec<&cachesim::plan::Target> = slo.0.iter().filter(|s| t.slo_values[&s.key()] > s.limit_ms).collect();
    let over: Vec<String> = missed
        .iter()
        .map(|s| format!("{} {:.1} {u} > {} {u}", s.key(), t.slo_values[&s.key()], s.limit_ms, u = s.unit()))
        .collect();
    let failed =
        if t.failed > 0 { format!(", {} failed", super::plural(t.failed as usize, "request")) } else { String::new() };
    if over.is_empty() {
        return format!(": even at {:.3} req/s, the lowest rate tried{failed}", t.rate);
    }
    if missed.iter().all(|s| s.quantity == cachesim::plan::Quantity::Failed) {
        return format!(
            ": even at {:.3} req/s, the lowest rate tried, {}{failed}: a slower rate does not fail fewer requests \
             (instance failures come with time, and a slower run lasts longer); allow a larger failed_pct, fail less \
             often, or give lost requests another instance to migrate to (--instances, --migration-limit)",
            t.rate,
            over.join(", ")
        );
    }
    format!(
        ": even at {:.3} req/s, the lowest rate tried, where requests barely overlap, {}{failed}: requests take longer \
         alone than the SLO allows on these configurations; loosen the SLO or try faster ones (more GPUs, --tp)",
        t.rate,
        over.join(", ")
    )
}

/// A rate bar as `low – high` req/s (`0` when no rate would meet the SLO at that end, `>= r`
/// when it held up to `--max-rate`).
fn rate_range(b: &cachesim::plan::RateBar) -> String {
    let end = |rate: Option<f64>, unbounded: bool| match (rate, unbounded) {
        (Some(r), true) => format!(">= {r:.2}"),
        (Some(r), false) => format!("{r:.2}"),
        (None, _) => "0".to_string(),
    };
    format!("{} – {}", end(b.low, b.low_unbounded), end(b.high, b.high_unbounded))
}

/// A point as flags (`--max-num-seqs 64 --tp 2`), or "this configuration" for the base.
pub(super) fn describe(p: &cachesim::sweep::Point) -> String {
    if p.is_empty() {
        "this configuration".to_string()
    } else {
        p.iter().map(|(k, v)| format!("--{k} {v}")).collect::<Vec<_>>().join(" ")
    }
}

/// The SLO metrics of a trial in words: "p99_ttft_ms 1812.3 ms, p99_tpot_ms 41.0 ms".
pub(super) fn at_values(slo: &Slo, t: &cachesim::plan::Trial) -> String {
    slo.0
        .iter()
        .map(|s| format!("{} {:.1} {}", s.key(), t.slo_values[&s.key()], s.unit()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Right-aligned columns; a row shorter than the header ends in a reason, written after its
/// other cells without widening the columns.
pub(super) fn table(head: &[String], lines: &[Vec<String>]) -> String {
    let width = |c: usize| {
        let cells = lines.iter().filter_map(|l| if l.len() < head.len() && c + 1 >= l.len() { None } else { l.get(c) });
        cells.map(|s| s.chars().count()).chain([head[c].chars().count()]).max().unwrap_or(0)
    };
    let widths: Vec<usize> = (0..head.len()).map(width).collect();
    let fmt = |cells: &[String]| {
        let parts: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        parts.join("  ")
    };
    let mut out = fmt(head) + "\n";
    for l in lines {
        match l.split_last() {
            Some((why, cells)) if l.len() < head.len() => {
                out += &fmt(cells);
                out += if cells.is_empty() { "" } else { "  " };
                out += why;
            }
            _ => out += &fmt(l),
        }
        out += "\n";
    }
    out
}
