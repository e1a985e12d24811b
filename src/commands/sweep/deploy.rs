//! `cachesim plan --target-rate R`: the cheapest deployment meeting the SLO at R. The grid's
//! points are the configurations (`--gpus a,b --tp 1,2,4` and any other run flag); for each,
//! the fewest instances among `--instances` meeting the SLO, found by bisection
//! ([`cachesim::plan::deploy::smallest`]), each probe one simulation at R through the run flag
//! `--instances N`. Each deployment is priced with the user's `--gpu-price` (instances × GPUs
//! per instance × USD per GPU-hour, and per million output tokens at the throughput served;
//! without prices the fewest GPUs win); the answer is the table, cheapest (or smallest) first,
//! one sentence, and on `--plot` the SLO metrics
//! against rate for the cheapest deployments, from a full rate search of each.

use super::plan::{at_values, calibration, describe, table, Plan};
use super::{plural, Progress};
use crate::cli;
use crate::commands::Answer;
use cachesim::plan::deploy::{cost, smallest, Cost, Prices, TierMemory, Tiers};
use cachesim::plan::Trial;
use serde::Serialize;
use std::fmt::Write;

/// One configuration's answer.
#[derive(Debug, Clone, Serialize)]
struct Deployment {
    point: usize,
    #[serde(serialize_with = "as_map")]
    knobs: cachesim::sweep::Point,
    gpu: String,
    tp: u64,
    /// The router in front of the instances (`--router`).
    router: String,
    /// The fewest instances meeting the SLO at the target rate; `None`: not even the most.
    instances: Option<u64>,
    cost: Option<Cost>,
    /// Instance counts simulated, in order, and whether each met the SLO.
    tried: Vec<(u64, bool)>,
    /// The run at the target rate with `instances` (or with the most tried, when none meets).
    at_target: Option<Trial>,
    /// The fewest instances if cachesim errs as at either end of its errors on the measured
    /// runs nearest to the configuration; `None` without spreads for its SLO metrics.
    instances_if_off: Option<InstancesIfOff>,
    error: Option<String>,
}

/// The error bar of a deployment's instance count: the fewest instances meeting the SLO scaled
/// by the nearest runs' errors ([`cachesim::plan::SloIfOff`]); `None`: not even the most.
#[derive(Debug, Clone, Serialize)]
struct InstancesIfOff {
    /// If cachesim predicts every SLO metric too slow by its 90th-percentile error.
    hopeful: Option<u64>,
    /// If it predicts them too fast by its 10th-percentile error.
    cautious: Option<u64>,
    simulations: usize,
    spreads: std::collections::BTreeMap<String, cachesim::trust::Spread>,
}

/// Knob pairs as a JSON object.
fn as_map<S: serde::Serializer>(p: &cachesim::sweep::Point, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(p.len()))?;
    for (k, v) in p {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

pub(super) fn target(args: &cli::PlanArgs, plan: &Plan, rate: f64) -> anyhow::Result<Answer> {
    use rayon::prelude::*;
    if !(rate.is_finite() && rate > 0.0) {
        anyhow::bail!("--target-rate must be a positive number of requests per second");
    }
    let mut prices = Prices::default();
    for p in &args.gpu_price {
        prices.extend(p.clone())?;
    }
    // Without prices, the deployment with the fewest GPUs is the answer (every cost 0).
    let priced = !prices.0.is_empty();
    let mut grid = plan.setup.grid(&args.grid, plan.refused)?;
    if grid.zip.iter().any(|a| a.knob == "instances") {
        anyhow::bail!("--zip: instances are searched per configuration at --target-rate; give them with --instances");
    }
    let counts: Option<Vec<u64>> = match grid.axes.iter().position(|a| a.knob == "instances") {
        Some(i) => {
            let axis = grid.axes.remove(i);
            let mut v = axis
                .values
                .iter()
                .map(|s| s.parse::<u64>().ok().filter(|n| *n >= 1))
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| anyhow::anyhow!("--instances: counts are whole numbers >= 1 (e.g. 1..16)"))?;
            v.sort_unstable();
            v.dedup();
            Some(v)
        }
        None => None,
    };
    let (knobs, jobs) = plan.setup.jobs(&grid, None, args.grid.max_points)?;
    // Every configuration's GPU and TP, and its price, before any simulation.
    let mut configs = Vec::new();
    for (k, p, a) in jobs {
        let cfg = cachesim::config::resolve(&a.options());
        if let (Ok(c), true) = (&cfg, priced) {
            prices.of(&c.gpu.name)?;
            let tiers = Tiers::of(c).map_err(anyhow::Error::msg)?;
            if let (Some(flag), None) = (tiers.host_flag, args.dram_price) {
                anyhow::bail!(
                    "{flag} in a priced plan needs --dram-price USD_PER_GIB_HOUR: host memory is not free \
                     (--dram-price 0 prices memory you already have)"
                );
            }
            if let (Some(flag), None) = (tiers.disk_flag, args.ssd_price) {
                anyhow::bail!(
                    "{flag} in a priced plan needs --ssd-price USD_PER_GIB_HOUR: disk is not free \
                     (--ssd-price 0 prices disk you already have)"
                );
            }
        }
        configs.push((k, p, cfg));
    }
    let calibration_text = calibration(&plan.setup.run, configs.iter().filter_map(|(_, _, c)| c.as_ref().ok()))?;
    let w = plan.load()?;
    let (slo, shape) = (&plan.slo, plan.shape);
    let flags = &plan.setup.flags;
    let requests = super::progress::requests_per_point(&w, configs.iter().filter_map(|(_, _, c)| c.as_ref().ok()));
    let pb = Progress::start(configs.len(), "sizing", requests);
    let mut found: Vec<Deployment> = configs
        .into_par_iter()
        .map(|(point, knobs, cfg)| {
            pb.inc();
            let mut d = Deployment {
                point,
                knobs: knobs.clone(),
                gpu: String::new(),
                tp: 0,
                router: String::new(),
                instances: None,
                cost: None,
                tried: Vec::new(),
                at_target: None,
                instances_if_off: None,
                error: None,
            };
            let cfg = match cfg {
                Ok(c) => c,
                Err(e) => {
                    d.error = Some(e.to_string());
                    return d;
                }
            };
            (d.gpu, d.tp) = (cfg.gpu.name.clone(), cfg.tp);
            d.router = serde_json::to_value(cfg.cluster.router)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            // Without an --instances list, the deployment's own count (--instances N, the
            // prefill and decode pools together, or 1).
            let own = [cfg.cluster.total_instances() as u64];
            let gpus_per_instance = cfg.deployment.parallel.world();
            // (an unpriced plan sizes an unbounded store too: it reports no GiB for it)
            let tiers = Tiers::of(&cfg).unwrap_or_default();
            let eval_at = |slo: &cachesim::plan::Slo, n: u64| -> cachesim::Result<(bool, Trial)> {
                let cfg = match &counts {
                    Some(_) => {
                        let mut p = knobs.clone();
                        p.push(("instances".into(), n.to_string()));
                        let args = flags.parse_point(&p).map_err(|e| cachesim::Error::invalid("--instances", e))?;
                        cachesim::config::resolve(&args.options())?
                    }
                    None => cfg.clone(),
                };
                cachesim::plan::trial_shaped(&w, &cfg, slo, rate, shape)
            };
            let list = counts.as_deref().unwrap_or(&own);
            match smallest(list, |n| eval_at(slo, n)) {
                Ok(s) => {
                    d.tried = s.tried;
                    if let Some((n, t)) = s.found {
                        let price = prices.of(&d.gpu).unwrap_or(0.0);
                        let host = TierMemory {
                            gib: n as f64 * tiers.host_gib,
                            usd_per_gib_hour: args.dram_price.unwrap_or(0.0),
                        };
                        let disk = TierMemory {
                            gib: n as f64 * tiers.disk_gib,
                            usd_per_gib_hour: args.ssd_price.unwrap_or(0.0),
                        };
                        d.cost = Some(cost(n * gpus_per_instance, price, host, disk, t.output_throughput));
                        d.instances = Some(n);
                        d.at_target = Some(t);
                    }
                }
                Err(e) => d.error = Some(e.to_string()),
            }
            if let (None, Some(off)) = (&d.error, cachesim::plan::SloIfOff::of(&cfg, &w, slo)) {
                let ends = smallest(list, |n| eval_at(&off.hopeful, n))
                    .and_then(|h| Ok((h, smallest(list, |n| eval_at(&off.cautious, n))?)));
                match ends {
                    Ok((h, c)) => {
                        d.instances_if_off = Some(InstancesIfOff {
                            hopeful: h.found.map(|(n, _)| n),
                            cautious: c.found.map(|(n, _)| n),
                            simulations: h.tried.len() + c.tried.len(),
                            spreads: off.spreads,
                        })
                    }
                    Err(e) => d.error = Some(e.to_string()),
                }
            }
            d
        })
        .collect();
    pb.finish();
    // Cheapest per hour first, then fewer GPUs, then cheaper per token, then grid order; those
    // that miss the SLO last.
    found.sort_by(|a, b| match (&a.cost, &b.cost) {
        (Some(x), Some(y)) => {
            let per_m = |c: &Cost| c.usd_per_million_output_tokens.unwrap_or(f64::INFINITY);
            (x.usd_per_hour.total_cmp(&y.usd_per_hour))
                .then(x.gpus.cmp(&y.gpus))
                .then(per_m(x).total_cmp(&per_m(y)))
                .then(a.point.cmp(&b.point))
        }
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.point.cmp(&b.point),
    });
    let sims: usize = found.iter().map(|d| d.tried.len()).sum();
    let all = counts.as_ref().map_or(1, Vec::len) * found.len();
    let label = |d: &Deployment| {
        let rest: Vec<&(String, String)> = d.knobs.iter().filter(|(k, _)| k != "gpu" && k != "tp").collect();
        let rest = if rest.is_empty() {
            String::new()
        } else {
            format!(" ({})", describe(&rest.into_iter().cloned().collect()))
        };
        let n = d.instances.unwrap_or(0);
        let behind = if n > 1 { format!(" behind {} routing", d.router) } else { String::new() };
        format!("{n} × {} TP{}{behind}{rest}", d.gpu, d.tp)
    };
    if let Some(path) = &plan.setup.run.plot {
        let top: Vec<&Deployment> = found.iter().filter(|d| d.cost.is_some()).take(args.top.max(1)).collect();
        let curves: Vec<cachesim::plan::plot::Curve> = top
            .par_iter()
            .map(|d| -> anyhow::Result<cachesim::plan::plot::Curve> {
                let mut p = d.knobs.clone();
                if counts.is_some() {
                    p.push(("instances".into(), d.instances.unwrap_or(1).to_string()));
                }
                let a = flags.parse_point(&p).map_err(anyhow::Error::msg)?;
                let cfg = cachesim::config::resolve(&a.options())?;
                let r = cachesim::plan::max_rate(&w, &cfg, slo, &plan.opts, shape)?;
                Ok(cachesim::plan::plot::Curve { label: label(d), trials: r.trials })
            })
            .collect::<anyhow::Result<_>>()?;
        plan.plot(path, &curves, Some(rate))?;
    }
    let range = counts.as_ref().map(|c| {
        let (lo, hi) = (c[0], c[c.len() - 1]);
        if c.len() as u64 == hi - lo + 1 {
            format!("{lo}..{hi}")
        } else {
            c.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        }
    });
    let search = match &range {
        Some(r) => format!(
            "fewest instances among {r} meeting the SLO at {rate} req/s, bisected per configuration (more instances \
             are assumed never to serve a rate worse): {} instead of {all}",
            plural(sims, "simulation")
        ),
        None => format!("each configuration as given at {rate} req/s: {}", plural(sims, "simulation")),
    };
    let mut stdout = String::new();
    if plan.setup.run.json {
        let mut doc = serde_json::json!({
            "target_rate": rate,
            "slo": plan.slo_text(),
            "arrivals": shape,
            "instances_searched": counts,
            "gpu_prices_usd_per_hour": prices.0.iter().map(|(g, p)| (g.clone(), (*p).into())).collect::<serde_json::Map<String, serde_json::Value>>(),
            "calibration": serde_json::Value::Null,
            "calibration_text": calibration_text,
            "simulations": sims,
            "trace": &w.info,
            "results": found,
        });
        if let Some(p) = args.dram_price {
            doc["dram_price_usd_per_gib_hour"] = p.into();
        }
        if let Some(p) = args.ssd_price {
            doc["ssd_price_usd_per_gib_hour"] = p.into();
        }
        stdout.push_str(&serde_json::to_string_pretty(&doc)?);
        stdout.push('\n');
        return Ok(Answer::text(stdout));
    }
    write!(stdout, "{}", plan.header(&w, &search, &calibration_text))?;
    let mut head: Vec<String> = knobs.clone();
    let money: &[&str] = if priced { &["$/hour", "$/M out tok"] } else { &[] };
    // The host tiers' memory and the disk tiers', where a deployment has one.
    let tiered = found.iter().any(|d| d.cost.is_some_and(|c| c.host_gib > 0.0));
    let disked = found.iter().any(|d| d.cost.is_some_and(|c| c.disk_gib > 0.0));
    let host: &[&str] = if tiered { &["host GiB"] } else { &[] };
    let disk: &[&str] = if disked { &["disk GiB"] } else { &[] };
    head.extend(
        ["instances", "if off", "GPUs"]
            .iter()
            .chain(host)
            .chain(disk)
            .chain(money)
            .chain(&["output tok/s", "sims"])
            .map(|s| s.to_string()),
    );
    head.extend(slo.0.iter().map(|t| t.key()));
    let lines: Vec<Vec<String>> = found
        .iter()
        .map(|d| {
            let mut cells: Vec<String> = d.knobs.iter().map(|(_, v)| v.clone()).collect();
            match (&d.error, &d.cost, &d.at_target) {
                (Some(e), _, _) => cells.push(format!("failed: {e}")),
                (None, Some(c), Some(t)) => {
                    let most = d.tried.first().map_or(1, |t| t.0);
                    let end = |n: Option<u64>| n.map_or_else(|| format!("> {most}"), |n| n.to_string());
                    let off = d
                        .instances_if_off
                        .as_ref()
                        .map_or_else(|| "-".to_string(), |b| format!("{} – {}", end(b.hopeful), end(b.cautious)));
                    cells.extend([d.instances.unwrap_or(0).to_string(), off, c.gpus.to_string()]);
                    if tiered {
                        cells.push(format!("{}", (c.host_gib * 100.0).round() / 100.0));
                    }
                    if disked {
                        cells.push(format!("{}", (c.disk_gib * 100.0).round() / 100.0));
                    }
                    if priced {
                        cells.extend([
                            format!("{:.2}", c.usd_per_hour),
                            c.usd_per_million_output_tokens.map_or("-".into(), |v| format!("{v:.3}")),
                        ]);
                    }
                    cells.extend([format!("{:.1}", t.output_throughput), d.tried.len().to_string()]);
                    cells.extend(slo.0.iter().map(|s| format!("{:.1}", t.slo_values[&s.key()])));
                }
                _ => {
                    let most = d.tried.first().map_or(1, |t| t.0);
                    cells.push(format!("misses the SLO even with {most} instance{}", if most == 1 { "" } else { "s" }));
                }
            }
            cells
        })
        .collect();
    write!(stdout, "{}", table(&head, &lines))?;
    if found.iter().any(|d| d.instances_if_off.is_some()) {
        writeln!(
            stdout,
            "\nif off: the fewest instances if cachesim errs on every SLO metric as at the hopeful and the cautious end \
             of the middle 80 % of its errors on the measured runs nearest to the configuration (each limit × (1 + \
             error); the median's errors stand for its tails; calibration/residuals.csv)."
        )?;
    }
    match found.first().filter(|d| d.cost.is_some()) {
        Some(d) if !priced => {
            let (c, t) = (d.cost.expect("sized"), d.at_target.as_ref().expect("simulated"));
            writeln!(
                stdout,
                "\nFewest GPUs: {} ({}) serves {rate} req/s within the SLO ({}); --gpu-price GPU=USD_PER_HOUR,… ranks \
                 by cost instead.",
                label(d),
                plural(c.gpus as usize, "GPU"),
                at_values(slo, t)
            )?;
        }
        Some(d) => {
            let (c, t) = (d.cost.expect("priced"), d.at_target.as_ref().expect("simulated"));
            let per_m = c
                .usd_per_million_output_tokens
                .map_or(String::new(), |v| format!(", ${v:.3} per million output tokens"));
            writeln!(
                stdout,
                "\nCheapest: {} ({}) serves {rate} req/s within the SLO ({}), for ${:.2} per hour{per_m}.",
                label(d),
                plural(c.gpus as usize, "GPU"),
                at_values(slo, t),
                c.usd_per_hour
            )?;
        }
        None => writeln!(stdout, "\nNo deployment tried meets the SLO at {rate} req/s.")?,
    }
    if let Some(p) = &plan.setup.run.plot {
        writeln!(stdout, "Plot:           {}", p.display())?;
    }
    Ok(Answer::text(stdout))
}
