//! The autoscaler's part of a run report ([`cachesim_core::cluster::autoscale`]): the fleet
//! and the latencies over time in windows (instances serving and provisioned, the requests sent
//! in each window with their TTFT and TPOT percentiles and, under `--goodput`, the share that
//! met it), what the autoscaler did (instances started, cancelled, drained, stopped at the drain
//! timeout, requests lost), and what the fleet cost: instance-hours and GPU-hours provisioned
//! (from each scale-up, cold start included, to each stop) against a fixed fleet of the peak
//! size over the same time. As text, the JSON `autoscaling` entry, and one CSV row per sync.

use cachesim_core::cluster::autoscale::{AutoscalePlan, Rule};
use cachesim_core::cluster::planner::Outcome;
use cachesim_core::metrics::{percentile, Goodput, RequestRecord};
use cachesim_core::sim::{Change, ScaleLog, ScaleSync};
use cachesim_core::text::thousands;
use serde::Serialize;
use std::fmt::Write;

/// One window of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    pub from_s: f64,
    pub to_s: f64,
    /// Time-weighted mean instances serving, and provisioned (starting, serving or draining).
    pub serving: f64,
    pub provisioned: f64,
    /// Completed requests sent in the window, and their TTFT and TPOT percentiles (ms;
    /// `None` without any).
    pub completed: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    /// Under `--goodput`: the completed requests sent in the window that met it, in %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub good_pct: Option<f64>,
}

/// The JSON `autoscaling` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoscaleReport {
    /// Seconds from the start to the run's end (its last token or its last stop).
    pub end_s: f64,
    /// Instances started by a scale-up, those cancelled before they served, drained by a
    /// scale-down, and stopped at the drain timeout; the requests those lost.
    pub started: u64,
    pub cancelled: u64,
    pub drained: u64,
    pub stopped_at_timeout: u64,
    pub lost: u64,
    /// The most instances provisioned at once, and the time-weighted mean.
    pub peak_instances: u32,
    pub mean_instances: f64,
    /// Instance-hours and GPU-hours provisioned, and what a fixed fleet of the peak size would
    /// take over the same time.
    pub instance_hours: f64,
    pub gpu_hours: f64,
    pub fixed_peak_gpu_hours: f64,
    /// Under `--goodput`: the limits, and the completed requests that met them over all
    /// requests sent, in %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attainment_pct: Option<f64>,
    /// Under `--compare-fixed`: the search for the smallest fixed fleet that attains at least
    /// as much.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_fixed: Option<FixedSearch>,
    pub windows: Vec<Window>,
    pub syncs: Vec<ScaleSync>,
    pub changes: Vec<cachesim_core::sim::ScaleChange>,
}

/// A fixed fleet beside the autoscaled one: its size, the goodput attainment it reached (%)
/// and its GPU-hours over its own run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FixedFleet {
    pub instances: u32,
    pub attainment_pct: f64,
    pub gpu_hours: f64,
    /// Prefill/decode pools: how the instances split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode: Option<u32>,
}

/// The search for the smallest fixed fleet attaining `goal_pct`: what it found (`None`: not
/// even the largest), in how many simulations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FixedSearch {
    pub goal_pct: f64,
    pub found: Option<FixedFleet>,
    pub simulations: u32,
}

/// The smallest fixed fleet between the autoscaler's bounds whose goodput attainment is at
/// least `goal_pct`, for the trace `w` under `cfg` without its autoscaler: found by bisection
/// (attainment taken to grow with the fleet), from the autoscaled fleet's `peak` (tried first:
/// the search stays below it when it attains the goal, above it when not); with prefill/decode
/// pools, by bisection over the instances of both pools, each count tried at every split the
/// pools' bounds allow (the best split standing for the count). `None` without an autoscaler
/// and `--goodput`.
pub fn best_fixed(
    w: &cachesim_core::workload::Workload,
    cfg: &cachesim_core::config::RunConfig,
    goal_pct: f64,
    peak: u32,
) -> cachesim_core::error::Result<Option<FixedSearch>> {
    let (Some(plan), Some(g)) = (&cfg.autoscale, cfg.goodput) else {
        return Ok(None);
    };
    let simulations = std::cell::Cell::new(0);
    let fleet = |n: u32, pools: Option<(u32, u32)>| -> cachesim_core::error::Result<FixedFleet> {
        simulations.set(simulations.get() + 1);
        let mut c = cfg.clone();
        c.autoscale = None;
        c.cluster.instances = n;
        if let (Some(pd), Some((p, d))) = (c.cluster.pd.as_mut(), pools) {
            (pd.prefill, pd.decode) = (p, d);
        }
        let out = cachesim_core::sim::simulate(w, &c, cachesim_core::sim::Keep::default())?;
        let good = out.sim.records.iter().filter(|r| g.is_good(r)).count() as f64;
        let end = out.sim.records.iter().map(|r| r.last_token_s).fold(0.0, f64::max);
        Ok(FixedFleet {
            instances: n,
            attainment_pct: 100.0 * good / out.sent.max(1) as f64,
            gpu_hours: n as f64 * end / 3600.0 * c.deployment.parallel.world() as f64,
            prefill: pools.map(|x| x.0),
            decode: pools.map(|x| x.1),
        })
    };
    let run = |n: u32| -> cachesim_core::error::Result<FixedFleet> {
        let Some(x) = plan.pools() else { return fleet(n, None) };
        // Every split of n the pools allow; the best attainment (the fewer prefill on a tie).
        let min = plan.min_instances / 2;
        let mut best: Option<FixedFleet> = None;
        for p in min.max(n.saturating_sub(x.max_decode))..=x.max_prefill.min(n.saturating_sub(min)) {
            let f = fleet(n, Some((p, n - p)))?;
            if best.is_none_or(|b| f.attainment_pct > b.attainment_pct) {
                best = Some(f);
            }
        }
        best.map_or_else(|| fleet(n, Some((min, n - min))), Ok)
    };
    let peak = peak.clamp(plan.min_instances, plan.max_instances);
    let at_peak = run(peak)?;
    let (mut lo, mut hi, mut best) = if at_peak.attainment_pct >= goal_pct {
        (plan.min_instances, peak, at_peak)
    } else {
        let top = if peak < plan.max_instances { run(plan.max_instances)? } else { at_peak };
        if top.attainment_pct < goal_pct {
            return Ok(Some(FixedSearch { goal_pct, found: None, simulations: simulations.get() }));
        }
        (peak + 1, plan.max_instances, top)
    };
    // Invariant: `hi` attains the goal (`best` is its run); below `lo` none does.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let f = run(mid)?;
        if f.attainment_pct >= goal_pct {
            (hi, best) = (mid, f);
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(FixedSearch { goal_pct, found: Some(best), simulations: simulations.get() }))
}

/// Windows of a run `end_s` long: the sync period, or the first round length that gives at
/// most 24.
fn window_s(end_s: f64, sync_s: f64) -> f64 {
    const ROUND: [f64; 12] = [15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0];
    let want = end_s / 24.0;
    if want <= sync_s {
        return sync_s;
    }
    ROUND.into_iter().find(|&w| w >= want && w >= sync_s).unwrap_or(want.ceil())
}

/// Time spans, (from, to) in seconds.
type Spans = Vec<(f64, f64)>;

/// Each instance's provisioned and serving spans over `[0, end_s]` from the log.
fn intervals(plan: &AutoscalePlan, log: &ScaleLog, instances: usize, end_s: f64) -> (Spans, Spans) {
    let (mut prov, mut serve) = (Vec::new(), Vec::new());
    let mut prov_from: Vec<Option<f64>> = (0..instances).map(|i| (i < plan.initial as usize).then_some(0.0)).collect();
    let mut serve_from = prov_from.clone();
    for c in &log.changes {
        let i = c.instance as usize;
        match c.change {
            Change::Start => prov_from[i] = Some(c.time_s),
            Change::Ready => serve_from[i] = Some(c.time_s),
            Change::Drain => serve.extend(serve_from[i].take().map(|f| (f, c.time_s))),
            Change::Cancel | Change::Stop => prov.extend(prov_from[i].take().map(|f| (f, c.time_s))),
        }
    }
    prov.extend(prov_from.into_iter().flatten().map(|f| (f, end_s)));
    serve.extend(serve_from.into_iter().flatten().map(|f| (f, end_s)));
    (prov, serve)
}

/// Time covered by `spans` within `[a, b)`.
fn overlap(spans: &[(f64, f64)], a: f64, b: f64) -> f64 {
    spans.iter().map(|&(f, t)| (t.min(b) - f.max(a)).max(0.0)).sum()
}

/// The report of `log` under `plan`: a run of `records` (completed requests) out of `sent`,
/// ending at `end_s`, on instances of `gpus_per_instance` GPUs, with `goodput` limits if given.
pub fn report(
    plan: &AutoscalePlan,
    log: &ScaleLog,
    records: &[RequestRecord],
    sent: u64,
    end_s: f64,
    gpus_per_instance: u64,
    goodput: Option<Goodput>,
) -> AutoscaleReport {
    let (prov, serve) = intervals(plan, log, plan.max_instances as usize, end_s);
    let count = |c: Change| log.changes.iter().filter(|x| x.change == c).count() as u64;
    let stopped_at_timeout = log.changes.iter().filter(|x| x.change == Change::Stop && x.lost > 0).count() as u64;
    // The peak: the provisioned count after each change, in the log's order (at one instant a
    // drained instance's stop comes before the sync's starts, so none is counted twice).
    let mut now = plan.initial as i64;
    let mut peak = now;
    for c in &log.changes {
        match c.change {
            Change::Start => now += 1,
            Change::Cancel | Change::Stop => now -= 1,
            _ => {}
        }
        peak = peak.max(now);
    }
    let instance_s: f64 = prov.iter().map(|&(f, t)| t - f).sum();
    let w = window_s(end_s, plan.period_s());
    let mut by_window: Vec<Vec<&RequestRecord>> = vec![Vec::new(); (end_s / w).ceil().max(1.0) as usize];
    for r in records {
        let k = ((r.send_s / w) as usize).min(by_window.len() - 1);
        by_window[k].push(r);
    }
    let windows = by_window
        .iter()
        .enumerate()
        .map(|(k, rs)| {
            let (a, b) = (k as f64 * w, ((k + 1) as f64 * w).min(end_s));
            let span = (b - a).max(f64::MIN_POSITIVE);
            let sorted = |f: &dyn Fn(&RequestRecord) -> Option<f64>| {
                let mut v: Vec<f64> = rs.iter().filter_map(|r| f(r)).map(|s| s * 1e3).collect();
                v.sort_unstable_by(f64::total_cmp);
                v
            };
            let ttft = sorted(&|r| Some(r.ttft_s()));
            let tpot = sorted(&|r| r.tpot_s());
            let pct = |v: &[f64], p| (!v.is_empty()).then(|| percentile(v, p));
            Window {
                from_s: a,
                to_s: b,
                serving: overlap(&serve, a, b) / span,
                provisioned: overlap(&prov, a, b) / span,
                completed: rs.len() as u64,
                ttft_p50_ms: pct(&ttft, 50.0),
                ttft_p99_ms: pct(&ttft, 99.0),
                tpot_p99_ms: pct(&tpot, 99.0),
                good_pct: goodput
                    .filter(|_| !rs.is_empty())
                    .map(|g| 100.0 * rs.iter().filter(|r| g.is_good(r)).count() as f64 / rs.len() as f64),
            }
        })
        .collect();
    let hours = instance_s / 3600.0;
    AutoscaleReport {
        end_s,
        started: count(Change::Start),
        cancelled: count(Change::Cancel),
        drained: count(Change::Drain),
        stopped_at_timeout,
        lost: log.changes.iter().map(|c| c.lost as u64).sum(),
        peak_instances: peak as u32,
        mean_instances: if end_s > 0.0 { instance_s / end_s } else { plan.initial as f64 },
        instance_hours: hours,
        gpu_hours: hours * gpus_per_instance as f64,
        fixed_peak_gpu_hours: peak as f64 * end_s / 3600.0 * gpus_per_instance as f64,
        goodput,
        attainment_pct: goodput
            .map(|g| 100.0 * records.iter().filter(|r| g.is_good(r)).count() as f64 / sent.max(1) as f64),
        best_fixed: None,
        windows,
        syncs: log.syncs.clone(),
        changes: log.changes.clone(),
    }
}

/// The text block.
pub fn text(plan: &AutoscalePlan, r: &AutoscaleReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:=^50}", " Autoscaling ");
    let good = r.goodput.is_some();
    let _ = write!(
        s,
        "{:>9} {:>9} {:>8} {:>8} {:>10} {:>9} {:>9} {:>9}",
        "from s", "to s", "serving", "provis.", "completed", "TTFT p50", "TTFT p99", "TPOT p99"
    );
    let _ = writeln!(s, "{}", if good { format!(" {:>7}", "good %") } else { String::new() });
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for w in &r.windows {
        let _ = write!(
            s,
            "{:>9.0} {:>9.0} {:>8.2} {:>8.2} {:>10} {:>9} {:>9} {:>9}",
            w.from_s,
            w.to_s,
            w.serving,
            w.provisioned,
            thousands(w.completed),
            ms(w.ttft_p50_ms),
            ms(w.ttft_p99_ms),
            ms(w.tpot_p99_ms)
        );
        let _ = writeln!(
            s,
            "{}",
            if good { format!(" {:>7}", w.good_pct.map_or("-".into(), |g| format!("{g:.1}"))) } else { String::new() }
        );
    }
    let c = &plan.cold_start;
    let cold = if c.given {
        format!("cold start {} s", c.seconds)
    } else {
        format!("cold start {:.1} s ({} s start-up + {:.1} s weights)", c.seconds, c.engine_start_s, c.weights_s)
    };
    let timeout = if plan.drain_timeout_s.is_finite() {
        format!("{} stopped at the {} s drain timeout", thousands(r.stopped_at_timeout), plan.drain_timeout_s)
    } else {
        "no drain timeout in prefill/decode pools".to_string()
    };
    let _ = writeln!(
        s,
        "{} instances started ({} cancelled before serving), {} drained ({timeout}, {} requests lost); {cold}",
        thousands(r.started),
        thousands(r.cancelled),
        thousands(r.drained),
        thousands(r.lost)
    );
    if let Rule::Sla(p) = &plan.rule {
        let count = |o: Outcome| r.syncs.iter().filter(|x| x.outcome == Some(o)).count();
        let _ = writeln!(
            s,
            "SLA planner: {} adjustments every {} s ({} predictor; TTFT {} ms, ITL {} ms; {} GPUs hold {} instances): {} \
             set a count, {} skipped without traffic data, {} without a capacity, {} ignored while instances started",
            r.syncs.len(),
            p.interval_s,
            p.predictor.name(),
            p.ttft_s * 1e3,
            p.itl_s * 1e3,
            p.max_gpu_budget,
            p.max_instances,
            count(Outcome::Scale),
            count(Outcome::NoTrafficData),
            count(Outcome::ModelNotReady),
            count(Outcome::NotReady)
        );
    }
    let _ = writeln!(
        s,
        "Fleet: peak {} instances, mean {:.2}; {:.2} instance-hours, {:.2} GPU-hours ({:.2} for {} instances all along)",
        r.peak_instances, r.mean_instances, r.instance_hours, r.gpu_hours, r.fixed_peak_gpu_hours, r.peak_instances
    );
    if let (Some(g), Some(a)) = (&r.goodput, r.attainment_pct) {
        let _ = writeln!(s, "Goodput {}: {a:.2} % of the requests sent met it", g.describe());
    }
    if let Some(f) = &r.best_fixed {
        let how = format!(
            "{} simulations, bisection over {} to {} instances from the peak{}",
            f.simulations,
            plan.min_instances,
            plan.max_instances,
            if plan.pools().is_some() { ", each count at every split of the pools" } else { "" }
        );
        let _ = match f.found {
            Some(x) => writeln!(
                s,
                "Best fixed fleet attaining {:.2} % or more: {} instances{} ({:.2} %), {:.2} GPU-hours against {:.2} \
                 autoscaled ({how})",
                f.goal_pct,
                x.instances,
                match (x.prefill, x.decode) {
                    (Some(p), Some(d)) => format!(" ({p} prefill + {d} decode)"),
                    _ => String::new(),
                },
                x.attainment_pct,
                x.gpu_hours,
                r.gpu_hours
            ),
            None => writeln!(
                s,
                "No fixed fleet of up to {} instances attains {:.2} % ({how})",
                plan.max_instances, f.goal_pct
            ),
        };
    }
    let _ = writeln!(s, "{:=^50}", "");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachesim_core::cluster::autoscale::{AutoscaleOptions, AutoscalePolicy, ScaleMetric};
    use cachesim_core::sim::ScaleChange;

    fn plan() -> AutoscalePlan {
        AutoscaleOptions {
            policy: Some(AutoscalePolicy::Hpa),
            max_instances: Some(4),
            metric: Some(ScaleMetric::Waiting),
            target: Some(2.0),
            cold_start_s: Some(50.0),
            ..AutoscaleOptions::default()
        }
        .plan(1, 1, 0.0, 30.0, None)
        .unwrap()
        .unwrap()
    }

    fn change(time_s: f64, instance: u32, change: Change, lost: u32) -> ScaleChange {
        ScaleChange { time_s, instance, change, lost }
    }

    fn record(id: u32, send_s: f64, ttft_s: f64) -> RequestRecord {
        RequestRecord {
            id,
            send_s,
            first_token_s: send_s + ttft_s,
            last_token_s: send_s + ttft_s + 1.0,
            prompt_tokens: 10,
            output_tokens: 11,
            cached_prompt_tokens: 0,
            preemptions: 0,
            first_scheduled_s: send_s,
            priority: 0,
        }
    }

    #[test]
    fn hours_peak_and_windows_are_counted_by_hand() {
        // Instance 1 starts at 100 s, serves at 150 s, drains at 400 s and stops at 430 s losing
        // 2 requests; instance 2 starts at 100 s and is cancelled at 115 s. The run ends at 600 s.
        let log = ScaleLog {
            syncs: Vec::new(),
            changes: vec![
                change(100.0, 1, Change::Start, 0),
                change(100.0, 2, Change::Start, 0),
                change(115.0, 2, Change::Cancel, 0),
                change(150.0, 1, Change::Ready, 0),
                change(400.0, 1, Change::Drain, 0),
                change(430.0, 1, Change::Stop, 2),
            ],
        };
        let records = [record(0, 10.0, 0.1), record(1, 20.0, 0.3), record(2, 500.0, 2.0)];
        let g = Goodput::parse(&["ttft:200".to_string()]).unwrap();
        let r = report(&plan(), &log, &records, 5, 600.0, 2, Some(g));
        // Provisioned: 600 (instance 0) + 330 (instance 1) + 15 (instance 2) = 945 instance-s.
        assert!((r.instance_hours - 945.0 / 3600.0).abs() < 1e-12);
        assert!((r.gpu_hours - 2.0 * 945.0 / 3600.0).abs() < 1e-12);
        assert_eq!(
            (r.peak_instances, r.started, r.cancelled, r.drained, r.stopped_at_timeout, r.lost),
            (3, 2, 1, 1, 1, 2)
        );
        assert!((r.fixed_peak_gpu_hours - 3.0 * 600.0 / 3600.0 * 2.0).abs() < 1e-12);
        // 600 s / 24 = 25 s → windows of 30 s; the first holds requests 0 and 1.
        assert_eq!(r.windows.len(), 20);
        let w0 = r.windows[0];
        assert_eq!((w0.completed, w0.serving, w0.provisioned), (2, 1.0, 1.0));
        assert_eq!(w0.good_pct, Some(50.0));
        // 90–120 s: instance 0 serves all along, 1 is provisioned from 100, 2 from 100 to 115.
        let w3 = r.windows[3];
        assert!((w3.provisioned - (30.0 + 20.0 + 15.0) / 30.0).abs() < 1e-12, "{w3:?}");
        // 1 good request of 5 sent.
        assert_eq!(r.attainment_pct, Some(20.0));
        let t = text(&plan(), &r);
        assert!(t.contains("2 instances started (1 cancelled before serving), 1 drained (1 stopped at the 30 s drain timeout, 2 requests lost)"), "{t}");
        assert!(t.contains("Goodput ttft:200: 20.00 % of the requests sent met it"), "{t}");
    }
}
