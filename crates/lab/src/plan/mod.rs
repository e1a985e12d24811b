//! SLO-driven capacity planning (`cachesim plan`): the highest request rate one configuration
//! sustains under a service-level objective, found by bracketing (doubling or halving from a
//! start rate) and bisection to a relative tolerance, counting simulations.
//!
//! An SLO is a list of limits in ms on client metrics, named as the sglang JSON keys
//! (`p99_ttft_ms`) or as `ttft_p99` (any percentile of TTFT, TPOT and E2E latency; ITL at the
//! percentiles the clients report). A rate meets it when every limit holds over the completed
//! requests and at least one request completed. A limit on one priority class (`ttft_p99@0`:
//! the requests of priority 0, from the trace or `--priority-mix`) holds over that class's
//! completed requests: a tenant's SLO.
//!
//! Goodput follows DistServe (Zhong et al., "DistServe: Disaggregating Prefill and Decoding for
//! Goodput-optimized Large Language Model Serving", OSDI 2024, arXiv:2401.09670): the highest
//! request rate served within the SLO — here [`PlanResult::max_rate`]. At that rate the report
//! also gives the per-request goodput as `vllm bench serve --goodput` computes it
//! (`vllm/benchmarks/serve.py::calculate_metrics`, vLLM 0.11–0.33: a request is good when its
//! TTFT, TPOT and E2E latency are each within their limits; `request_goodput` = good requests /
//! duration) and the SLO attainment (good requests / requests sent).

pub mod deploy;
pub mod plot;

use cachesim_core::config::RunConfig;
use cachesim_core::error::{Error, Result};
use cachesim_core::metrics::{percentile, RequestRecord, Summary};
use cachesim_core::workload::arrivals::Rate;
use cachesim_core::workload::Workload;
use serde::Serialize;

/// The per-request latency an SLO limits, or the share of requests that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    Ttft,
    Tpot,
    Itl,
    E2eLatency,
    /// Failed requests ÷ requests sent, in % (`failed_pct`): what instance failures, rejections
    /// and requests that never fit cost, which the latency limits (over completed requests)
    /// cannot see.
    Failed,
}

/// Which statistic of it: mean, or a percentile (median = 50, max = 100).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Stat {
    Mean,
    Percentile(f64),
}

/// One limit: `stat(quantity) <= limit_ms` (a percentage for [`Quantity::Failed`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    pub quantity: Quantity,
    pub stat: Stat,
    pub limit_ms: f64,
    /// Only the requests of this priority class (their report class,
    /// [`cachesim_core::workload::Request::class`]); `None`: every request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<i32>,
}

/// A service-level objective: every target must hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slo(pub Vec<Target>);

fn quantity(s: &str) -> Option<Quantity> {
    match s {
        "ttft" => Some(Quantity::Ttft),
        "tpot" => Some(Quantity::Tpot),
        "itl" => Some(Quantity::Itl),
        "e2e" | "e2el" | "e2e_latency" => Some(Quantity::E2eLatency),
        _ => None,
    }
}

fn stat(s: &str) -> Option<Stat> {
    match s {
        "mean" => Some(Stat::Mean),
        "median" => Some(Stat::Percentile(50.0)),
        "max" => Some(Stat::Percentile(100.0)),
        _ => s.strip_prefix('p')?.parse::<f64>().ok().filter(|p| *p > 0.0 && *p <= 100.0).map(Stat::Percentile),
    }
}

impl Target {
    /// The sglang-style key of this metric, e.g. `p99_ttft_ms`, with `@CLASS` for one class's
    /// (`p99_ttft_ms@0`); `failed_pct` for the failed share.
    pub fn key(&self) -> String {
        match self.class {
            Some(c) => format!("{}@{c}", self.metric_key()),
            None => self.metric_key(),
        }
    }

    /// [`Target::key`] without the class.
    fn metric_key(&self) -> String {
        let q = match self.quantity {
            Quantity::Ttft => "ttft",
            Quantity::Tpot => "tpot",
            Quantity::Itl => "itl",
            Quantity::E2eLatency => "e2e_latency",
            Quantity::Failed => return "failed_pct".to_string(),
        };
        match self.stat {
            Stat::Mean => format!("mean_{q}_ms"),
            Stat::Percentile(50.0) => format!("median_{q}_ms"),
            Stat::Percentile(100.0) => format!("max_{q}_ms"),
            Stat::Percentile(p) => format!("p{p}_{q}_ms"),
        }
    }

    /// The unit of the limit and the value: `ms`, or `%` for the failed share.
    pub fn unit(&self) -> &'static str {
        match self.quantity {
            Quantity::Failed => "%",
            _ => "ms",
        }
    }

    fn parse(name: &str, limit: &str) -> Result<Target> {
        let bad = |why: String| Error::invalid("--slo", why);
        let (n, class) = match name.trim().split_once('@') {
            Some((n, c)) => {
                let c: i32 = c.trim().parse().map_err(|_| {
                    bad(format!("`{name}`: the class after @ is a request priority, an integer (e.g. ttft_p99@0)"))
                })?;
                (n.trim(), Some(c))
            }
            None => (name.trim(), None),
        };
        let t = Self::parse_metric(n, limit)?;
        if class.is_some() && matches!(t.quantity, Quantity::Failed | Quantity::Itl) {
            return Err(bad(format!(
                "`{name}`: {} is counted over every request, not per class (limit TTFT, TPOT or E2E per class)",
                if t.quantity == Quantity::Failed { "the failed share" } else { "ITL" }
            )));
        }
        Ok(Target { class, ..t })
    }

    fn parse_metric(n: &str, limit: &str) -> Result<Target> {
        let bad = |why: String| Error::invalid("--slo", why);
        if n == "failed_pct" {
            let pct: f64 = limit.trim().parse().map_err(|_| bad(format!("`{limit}` is not a percentage")))?;
            if !(0.0..=100.0).contains(&pct) {
                return Err(bad(format!("`{limit}`: failed_pct is a percentage of the requests sent, 0 to 100")));
            }
            return Ok(Target { quantity: Quantity::Failed, stat: Stat::Mean, limit_ms: pct, class: None });
        }
        let (q, s) = match n.strip_suffix("_ms").and_then(|k| k.split_once('_')) {
            Some((s, q)) => (q, s),
            None => n.rsplit_once('_').ok_or_else(|| bad(format!("`{n}` is not METRIC_STAT (e.g. ttft_p99)")))?,
        };
        let (quantity, stat) = match (quantity(q), stat(s)) {
            (Some(q), Some(s)) => (q, s),
            _ => {
                return Err(bad(format!(
                    "`{n}`: expected ttft, tpot, itl or e2e with mean, median, max or pNN (or failed_pct)"
                )))
            }
        };
        let limit_ms: f64 = limit.trim().parse().map_err(|_| bad(format!("`{limit}` is not a number of ms")))?;
        if !(limit_ms.is_finite() && limit_ms > 0.0) {
            return Err(bad(format!("`{limit}` must be a positive number of ms")));
        }
        let t = Target { quantity, stat, limit_ms, class: None };
        if quantity == Quantity::Itl
            && !matches!(t.key().as_str(), "mean_itl_ms" | "median_itl_ms" | "p95_itl_ms" | "p99_itl_ms" | "max_itl_ms")
        {
            return Err(bad(format!("`{n}`: ITL is reported as mean, median, p95, p99 or max")));
        }
        Ok(t)
    }

    /// Whether the target counts `r` (its class, if it names one).
    pub fn counts(&self, r: &RequestRecord) -> bool {
        self.class.is_none_or(|c| r.priority == c)
    }

    /// This statistic over the completed requests (of its class), in ms (0 without any value);
    /// the failed share of the requests sent, in %.
    pub fn value_ms(&self, records: &[RequestRecord], summary: &Summary) -> f64 {
        let records = || records.iter().filter(|r| self.counts(r));
        let mut v: Vec<f64> = match self.quantity {
            Quantity::Failed => {
                let sent = summary.completed + summary.failed;
                return if sent == 0 { 0.0 } else { 100.0 * summary.failed as f64 / sent as f64 };
            }
            Quantity::Ttft => records().map(RequestRecord::ttft_s).collect(),
            Quantity::Tpot => records().filter_map(RequestRecord::tpot_s).collect(),
            Quantity::E2eLatency => records().map(RequestRecord::latency_s).collect(),
            Quantity::Itl => {
                return match self.key().as_str() {
                    "mean_itl_ms" => summary.mean_itl_ms,
                    "median_itl_ms" => summary.median_itl_ms,
                    "p95_itl_ms" => summary.p95_itl_ms,
                    "p99_itl_ms" => summary.p99_itl_ms,
                    _ => summary.max_itl_ms,
                }
            }
        };
        if v.is_empty() {
            return 0.0;
        }
        match self.stat {
            Stat::Mean => v.iter().sum::<f64>() / v.len() as f64 * 1e3,
            Stat::Percentile(p) => {
                v.sort_by(f64::total_cmp);
                percentile(&v, p) * 1e3
            }
        }
    }
}

impl std::str::FromStr for Slo {
    type Err = Error;
    /// `ttft_p99=2000,tpot_p99=50` or `p99_ttft_ms=2000,…` (limits in ms).
    fn from_str(s: &str) -> Result<Slo> {
        let mut out = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, limit) = part
                .split_once('=')
                .ok_or_else(|| Error::invalid("--slo", format!("`{part}` is not METRIC=MS (e.g. ttft_p99=2000)")))?;
            out.push(Target::parse(name, limit)?);
        }
        if out.is_empty() {
            return Err(Error::invalid("--slo", "no limit given (e.g. ttft_p99=2000,tpot_p99=50)"));
        }
        Ok(Slo(out))
    }
}

impl Slo {
    /// Refuses a limit on a class no request of `w` belongs to (it would hold for want of
    /// requests).
    pub fn check_classes(&self, w: &Workload) -> Result<()> {
        let classes: std::collections::BTreeSet<i32> = w.requests.iter().map(|r| r.class()).collect();
        for t in &self.0 {
            if let Some(c) = t.class.filter(|c| !classes.contains(c)) {
                let have: Vec<String> = classes.iter().map(i32::to_string).collect();
                return Err(Error::invalid(
                    "--slo",
                    format!(
                        "`{}`: no request of {} has priority {c} (its classes: {}; classes come from the trace's \
                         `priority` keys or --priority-mix)",
                        t.key(),
                        w.info.path.display(),
                        have.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether a run meets the SLO (every limit, at least one request completed), and each
    /// target's `(key, value in ms)`.
    pub fn check(&self, records: &[RequestRecord], summary: &Summary) -> (bool, Vec<(String, f64)>) {
        let values: Vec<(String, f64)> = self.0.iter().map(|t| (t.key(), t.value_ms(records, summary))).collect();
        let meets = summary.completed > 0 && self.0.iter().zip(&values).all(|(t, (_, v))| *v <= t.limit_ms);
        (meets, values)
    }

    /// Whether `r` meets every per-request limit that counts it (TTFT, TPOT, E2E, of every
    /// request or of its class; ITL is not per request).
    pub fn request_is_good(&self, r: &RequestRecord) -> bool {
        self.0.iter().filter(|t| t.counts(r)).all(|t| {
            let l = Some(t.limit_ms);
            match t.quantity {
                Quantity::Ttft => r.within_ms(l, None, None),
                Quantity::Tpot => r.within_ms(None, l, None),
                Quantity::E2eLatency => r.within_ms(None, None, l),
                Quantity::Itl | Quantity::Failed => true,
            }
        })
    }
}

/// The search's rates and tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SearchOptions {
    /// First rate tried, req/s.
    pub start_rate: f64,
    /// Relative width of the final bracket: the answer R satisfies R <= true max < R (1 + tol).
    pub tolerance: f64,
    /// Doubling stops here: a configuration meeting the SLO at this rate is reported unbounded.
    pub max_rate: f64,
    /// Halving stops here: a configuration failing the SLO at this rate meets it at no rate.
    pub min_rate: f64,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self { start_rate: 1.0, tolerance: 0.01, max_rate: 1e5, min_rate: 1e-3 }
    }
}

/// What a search found: `best` is the evaluation at `max_rate`.
#[derive(Debug, Clone)]
pub struct Search<T> {
    /// Highest rate found meeting the SLO; `None` when even `min_rate` misses it.
    pub max_rate: Option<f64>,
    /// The SLO still held at `SearchOptions::max_rate`.
    pub unbounded: bool,
    /// The lowest rate seen missing the SLO (the bracket's upper end).
    pub fails_at: Option<f64>,
    pub simulations: u32,
    pub best: Option<T>,
    /// Every evaluation in the order made: (rate, met the SLO, what `eval` returned).
    pub evaluated: Vec<(f64, bool, T)>,
}

/// Brackets the SLO boundary by doubling (or halving) from the start rate, then bisects until
/// the bracket is narrower than the tolerance. `eval(rate)` says whether the rate meets the SLO.
pub fn search<T: Clone>(o: &SearchOptions, mut eval: impl FnMut(f64) -> Result<(bool, T)>) -> Result<Search<T>> {
    if !(o.start_rate > 0.0
        && o.tolerance > 0.0
        && o.min_rate > 0.0
        && o.min_rate <= o.start_rate
        && o.start_rate <= o.max_rate)
    {
        return Err(Error::invalid("plan", "need 0 < min rate <= start rate <= max rate and a positive tolerance"));
    }
    let mut out =
        Search { max_rate: None, unbounded: false, fails_at: None, simulations: 0, best: None, evaluated: Vec::new() };
    let mut probe = |rate: f64, out: &mut Search<T>| -> Result<bool> {
        out.simulations += 1;
        let (ok, t) = eval(rate)?;
        out.evaluated.push((rate, ok, t.clone()));
        if ok {
            out.max_rate = Some(rate);
            out.best = Some(t);
        } else {
            out.fails_at = Some(rate);
        }
        Ok(ok)
    };
    let mut rate = o.start_rate;
    if probe(rate, &mut out)? {
        while out.fails_at.is_none() {
            if rate >= o.max_rate {
                out.unbounded = true;
                return Ok(out);
            }
            rate = (rate * 2.0).min(o.max_rate);
            probe(rate, &mut out)?;
        }
    } else {
        while out.max_rate.is_none() {
            if rate <= o.min_rate {
                return Ok(out);
            }
            rate = (rate / 2.0).max(o.min_rate);
            probe(rate, &mut out)?;
        }
    }
    while let (Some(lo), Some(hi)) = (out.max_rate, out.fails_at) {
        if hi - lo <= o.tolerance * lo {
            break;
        }
        probe(0.5 * (lo + hi), &mut out)?;
    }
    Ok(out)
}

/// How a searched rate becomes send times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// The configured arrival process at that rate (Poisson unless `--burstiness` says else).
    Poisson,
    /// The trace's own time stamps, compressed or stretched (`--time-scale`) so the mean send
    /// rate, (sends − 1) / (last send − first send), is that rate.
    Trace,
}

/// The trace's own mean send rate under `cfg`'s arrival options without a rate, req/s.
pub fn trace_rate(w: &Workload, cfg: &RunConfig) -> Result<f64> {
    if !w.requests.iter().all(|r| r.arrival_ms.is_some()) {
        return Err(Error::invalid("--trace-shape", "the trace has no time stamps; search Poisson rates instead"));
    }
    let mut a = cfg.arrivals;
    a.rate = None;
    let sends = cachesim_core::workload::arrivals::schedule(w, &a)?;
    let (lo, hi) = sends.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), s| (l.min(s.1), h.max(s.1)));
    if sends.len() < 2 || hi <= lo {
        return Err(Error::invalid("--trace-shape", "the requests sent span no time; there is no shape to scale"));
    }
    Ok((sends.len() - 1) as f64 / (hi - lo))
}

/// One simulated rate: the SLO metrics, goodput and throughput.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub rate: f64,
    /// Whether this run met the SLO.
    pub meets: bool,
    /// Every SLO target's value in ms, by its sglang-style key.
    pub slo_values: std::collections::BTreeMap<String, f64>,
    /// Requests meeting every per-request limit, per second of the run (vLLM's request_goodput).
    pub goodput: f64,
    /// Good requests / requests sent.
    pub slo_attainment: f64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub completed: u64,
    pub failed: u64,
}

/// Simulates `w` under `cfg` at a Poisson-like `rate` (the configured arrival process) and
/// checks the SLO.
pub fn trial(w: &Workload, cfg: &RunConfig, slo: &Slo, rate: f64) -> Result<(bool, Trial)> {
    let mut cfg = cfg.clone();
    cfg.arrivals.rate = Some(Rate::PerSecond(rate));
    shaped_trial(w, &cfg, slo, rate)
}

/// Simulates `w` under `cfg` as it is (its arrivals already set for `rate`) and checks the SLO.
fn shaped_trial(w: &Workload, cfg: &RunConfig, slo: &Slo, rate: f64) -> Result<(bool, Trial)> {
    let out = cachesim_core::sim::simulate(w, cfg, cachesim_core::sim::Keep::default())?;
    let (records, s) = (&out.sim.records, &out.summary);
    let (meets, values) = slo.check(records, s);
    let slo_values = values.into_iter().collect();
    let good = records.iter().filter(|r| slo.request_is_good(r)).count() as f64;
    let trial = Trial {
        rate,
        meets,
        slo_values,
        goodput: if s.duration > 0.0 { good / s.duration } else { 0.0 },
        slo_attainment: if out.sent > 0 { good / out.sent as f64 } else { 0.0 },
        request_throughput: s.request_throughput,
        output_throughput: s.output_throughput,
        completed: s.completed,
        failed: s.failed,
    };
    Ok((meets, trial))
}

/// The answer for one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct PlanResult {
    /// Highest request rate meeting the SLO (DistServe's goodput), req/s; `None`: none does.
    pub max_rate: Option<f64>,
    /// The SLO held up to the search's ceiling, so the true maximum may be higher.
    pub unbounded: bool,
    /// Lowest rate seen missing the SLO.
    pub fails_at: Option<f64>,
    pub simulations: u32,
    /// The run at `max_rate`.
    pub at_max_rate: Option<Trial>,
    /// Every rate simulated, in the order tried (for the plot of the SLO metrics against rate).
    pub trials: Vec<Trial>,
}

/// Simulates `w` under `cfg` at `rate` with arrivals of the given shape and checks the SLO.
pub fn trial_shaped(w: &Workload, cfg: &RunConfig, slo: &Slo, rate: f64, shape: Shape) -> Result<(bool, Trial)> {
    match shape {
        Shape::Poisson => trial(w, cfg, slo, rate),
        Shape::Trace => scaled_trial(w, cfg, slo, rate, trace_rate(w, cfg)?),
    }
}

/// The trace's own arrivals (mean send rate `base` under `cfg`) scaled to `rate`.
fn scaled_trial(w: &Workload, cfg: &RunConfig, slo: &Slo, rate: f64, base: f64) -> Result<(bool, Trial)> {
    let mut c = cfg.clone();
    c.arrivals.rate = None;
    c.arrivals.time_scale = cfg.arrivals.time_scale * base / rate;
    shaped_trial(w, &c, slo, rate)
}

/// Searches the highest rate `cfg` sustains under `slo`, with arrivals of the given shape.
pub fn max_rate(w: &Workload, cfg: &RunConfig, slo: &Slo, o: &SearchOptions, shape: Shape) -> Result<PlanResult> {
    let s = match shape {
        Shape::Poisson => search(o, |rate| trial(w, cfg, slo, rate))?,
        Shape::Trace => {
            let base = trace_rate(w, cfg)?;
            search(o, |rate| scaled_trial(w, cfg, slo, rate, base))?
        }
    };
    Ok(PlanResult {
        max_rate: s.max_rate,
        unbounded: s.unbounded,
        fails_at: s.fails_at,
        simulations: s.simulations,
        at_max_rate: s.best,
        trials: s.evaluated.into_iter().map(|(_, _, t)| t).collect(),
    })
}

/// The metric of the residual table whose errors stand for a target's quantity: its median
/// (tails were measured too rarely to have their own); ITL's are TPOT's. The failed share has
/// none: it follows the plan's failures and limits, not the step time.
pub fn residual_metric(q: Quantity) -> Option<&'static str> {
    match q {
        Quantity::Ttft => Some("median_ttft_ms"),
        Quantity::Tpot | Quantity::Itl => Some("median_tpot_ms"),
        Quantity::E2eLatency => Some("median_e2e_latency_ms"),
        Quantity::Failed => None,
    }
}

/// The SLO a prediction must meet for the measured run to meet `slo` if cachesim errs by the
/// given error per target (% , + = predicted too slow): each limit × (1 + error / 100), since the
/// measurement behind a prediction p is p / (1 + error).
pub fn slo_if_off(slo: &Slo, errors_pct: &[f64]) -> Slo {
    Slo(slo
        .0
        .iter()
        .zip(errors_pct)
        .map(|(t, e)| Target { limit_ms: t.limit_ms * (1.0 + e / 100.0), ..t.clone() })
        .collect())
}

/// The SLO a prediction must meet at either end of cachesim's errors on the runs nearest to a
/// deployment ([`crate::trust::spread`] of each target's [`residual_metric`]).
#[derive(Debug, Clone)]
pub struct SloIfOff {
    /// Each limit × (1 + the 10th-percentile error): if cachesim predicts too fast by that much.
    pub cautious: Slo,
    /// Each limit × (1 + the 90th-percentile error).
    pub hopeful: Slo,
    /// The spread used per target, by its key.
    pub spreads: std::collections::BTreeMap<String, crate::trust::Spread>,
}

impl SloIfOff {
    /// The SLOs of `slo` for the deployment of `cfg` serving `w`; `None` when a target's metric has no
    /// spread for it in the built-in residual table.
    pub fn of(cfg: &RunConfig, w: &Workload, slo: &Slo) -> Option<SloIfOff> {
        let near = crate::trust::Near::of(cfg, w);
        let mut spreads = std::collections::BTreeMap::new();
        for t in &slo.0 {
            let Some(metric) = residual_metric(t.quantity) else { continue }; // its limit stays
            let s = crate::trust::spread(crate::trust::table(), &near, metric)?;
            spreads.insert(t.key(), s);
        }
        let errors = |f: fn(&crate::trust::Spread) -> f64| -> Vec<f64> {
            slo.0.iter().map(|t| spreads.get(&t.key()).map_or(0.0, f)).collect()
        };
        Some(SloIfOff {
            cautious: slo_if_off(slo, &errors(|s| s.error_low_pct)),
            hopeful: slo_if_off(slo, &errors(|s| s.error_high_pct)),
            spreads,
        })
    }
}

/// The error bar of a highest rate: the highest rates the SLO allows if cachesim errs as at the
/// low and the high end of its errors on the measured runs nearest to the deployment
/// ([`crate::trust::spread`] of each target's [`residual_metric`]).
#[derive(Debug, Clone, Serialize)]
pub struct RateBar {
    /// If cachesim predicts every SLO metric too fast by its nearest runs' 10th-percentile
    /// error (the cautious end); `None`: no rate would then meet the SLO.
    pub low: Option<f64>,
    /// The SLO still held at `--max-rate` at the cautious end.
    pub low_unbounded: bool,
    /// If it predicts them too slow by their 90th-percentile error.
    pub high: Option<f64>,
    /// The SLO still held at `--max-rate` at the high end.
    pub high_unbounded: bool,
    /// The spread used per target, by its key.
    pub spreads: std::collections::BTreeMap<String, crate::trust::Spread>,
    pub simulations: u32,
}

impl RateBar {
    /// Whether two bars overlap: the configurations cannot be told apart at the accuracy
    /// cachesim had on the runs nearest to them. A bar with no low end reaches down to 0.
    pub fn overlaps(&self, other: &RateBar) -> bool {
        let reach =
            |b: &RateBar| (b.low.unwrap_or(0.0), if b.high_unbounded { f64::INFINITY } else { b.high.unwrap_or(0.0) });
        let ((a0, a1), (b0, b1)) = (reach(self), reach(other));
        a0 <= b1 && b0 <= a1
    }
}

/// The [`RateBar`] of `cfg`'s highest rate under `slo` (the searches start from `found`, the
/// rate the plain search found); `None` when a target's metric has no spread for this
/// deployment in the built-in residual table.
pub fn rate_bar(
    w: &Workload,
    cfg: &RunConfig,
    slo: &Slo,
    o: &SearchOptions,
    shape: Shape,
    found: Option<f64>,
) -> Result<Option<RateBar>> {
    let Some(off) = SloIfOff::of(cfg, w, slo) else { return Ok(None) };
    let from = SearchOptions { start_rate: found.unwrap_or(o.start_rate), ..*o };
    let low = max_rate(w, cfg, &off.cautious, &from, shape)?;
    let high = max_rate(w, cfg, &off.hopeful, &from, shape)?;
    let spreads = off.spreads;
    Ok(Some(RateBar {
        low: low.max_rate,
        low_unbounded: low.unbounded,
        high: high.max_rate,
        high_unbounded: high.unbounded,
        spreads,
        simulations: low.simulations + high.simulations,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prediction that runs 20 % fast must meet a limit 20 % tighter; one 50 % slow may reach
    /// 1.5 × the limit.
    #[test]
    fn limits_scale_with_the_error() {
        let s: Slo = "ttft_p99=2000,tpot_median=50".parse().unwrap();
        let off = slo_if_off(&s, &[-20.0, 50.0]);
        assert_eq!(off.0.iter().map(|t| t.limit_ms).collect::<Vec<_>>(), [1600.0, 75.0]);
        assert_eq!(off.0[0].key(), "p99_ttft_ms");
        assert_eq!(residual_metric(Quantity::Itl), Some("median_tpot_ms"));
    }

    /// A class's limit counts only that class's requests, in the check and in the per-request
    /// goodput; the failed share and ITL have no class; a class nobody has is refused.
    #[test]
    fn a_class_limit_counts_its_class_alone() {
        let s: Slo = "ttft_p99@0=100,ttft_max@1=1000,tpot_max=50".parse().unwrap();
        assert_eq!(s.0.iter().map(Target::key).collect::<Vec<_>>(), ["p99_ttft_ms@0", "max_ttft_ms@1", "max_tpot_ms"]);
        let rec = |id: u32, ttft_s: f64, priority: i32| RequestRecord {
            id,
            send_s: 0.0,
            first_token_s: ttft_s,
            last_token_s: ttft_s + 0.01,
            prompt_tokens: 10,
            output_tokens: 2,
            cached_prompt_tokens: 0,
            preemptions: 0,
            first_scheduled_s: 0.0,
            priority,
        };
        // Class 0 answers in 50 ms, class 1 in 500: each within its own limit, though class
        // 1's TTFT is 5 × class 0's limit.
        let records = [rec(0, 0.05, 0), rec(1, 0.5, 1), rec(2, 0.05, 0)];
        let summary = Summary { completed: 3, ..Summary::new(&[], 0, &mut Default::default()) };
        let (meets, values) = s.check(&records, &summary);
        assert!(meets, "{values:?}");
        assert!((values[0].1 - 50.0).abs() < 1e-9 && (values[1].1 - 500.0).abs() < 1e-9, "{values:?}");
        assert!(records.iter().all(|r| s.request_is_good(r)));
        let tight: Slo = "ttft_p99@1=400".parse().unwrap();
        assert!(!tight.check(&records, &summary).0);
        assert_eq!(records.iter().map(|r| tight.request_is_good(r)).collect::<Vec<_>>(), [true, false, true]);
        for bad in ["failed_pct@0=1", "itl_p99@0=10"] {
            assert!(bad.parse::<Slo>().unwrap_err().to_string().contains("not per class"), "{bad}");
        }
        assert!("ttft_p99@x=1".parse::<Slo>().unwrap_err().to_string().contains("a request priority"));
        assert_eq!(slo_if_off(&s, &[10.0, 0.0, 0.0]).0[0].class, Some(0));
    }

    #[test]
    fn the_failed_share_is_a_percentage_of_the_requests_sent_and_no_error_bar_moves_it() {
        let s: Slo = "ttft_p99=2000,failed_pct=0.5".parse().unwrap();
        let f = &s.0[1];
        assert_eq!((f.quantity, f.key(), f.unit(), f.limit_ms), (Quantity::Failed, "failed_pct".to_string(), "%", 0.5));
        let none = Summary::new(&[], 0, &mut Default::default());
        let summary = Summary { completed: 196, failed: 4, ..none.clone() };
        assert_eq!(f.value_ms(&[], &summary), 2.0);
        assert_eq!(f.value_ms(&[], &none), 0.0);
        let (meets, values) = s.check(&[], &summary);
        assert!(!meets && values[1] == ("failed_pct".to_string(), 2.0));
        assert_eq!(residual_metric(Quantity::Failed), None);
        assert_eq!(slo_if_off(&s, &[-20.0, 0.0]).0[1].limit_ms, 0.5);
        assert!("failed_pct=0".parse::<Slo>().is_ok());
        for bad in ["failed_pct=101", "failed_pct=-1", "failed_pct=x"] {
            assert!(bad.parse::<Slo>().unwrap_err().to_string().contains("failed_pct") || bad.ends_with('x'), "{bad}");
        }
        assert!("failed_p99=1".parse::<Slo>().unwrap_err().to_string().contains("(or failed_pct)"));
    }

    #[test]
    fn rate_bars_overlap_when_their_ranges_meet() {
        let b = |low: Option<f64>, high: Option<f64>, unbounded: bool| RateBar {
            low,
            low_unbounded: false,
            high,
            high_unbounded: unbounded,
            spreads: Default::default(),
            simulations: 0,
        };
        assert!(b(Some(4.0), Some(8.0), false).overlaps(&b(Some(7.0), Some(9.0), false)));
        assert!(!b(Some(4.0), Some(6.0), false).overlaps(&b(Some(7.0), Some(9.0), false)));
        assert!(b(None, Some(6.0), false).overlaps(&b(None, Some(1.0), false)));
        assert!(b(Some(50.0), Some(60.0), true).overlaps(&b(Some(100.0), Some(200.0), false)));
    }

    #[test]
    fn slo_names() {
        let s: Slo = "ttft_p99=2000, tpot_p99=50,p99_e2e_latency_ms=9000,itl_p95=30,ttft_median=100".parse().unwrap();
        let keys: Vec<String> = s.0.iter().map(Target::key).collect();
        assert_eq!(keys, ["p99_ttft_ms", "p99_tpot_ms", "p99_e2e_latency_ms", "p95_itl_ms", "median_ttft_ms"]);
        assert_eq!(s.0[1].limit_ms, 50.0);
        for bad in ["", "ttft=3", "ttft_p0=1", "ttft_p101=1", "speed_p99=1", "ttft_p99=-1", "ttft_p99=x", "itl_p90=5"] {
            assert!(bad.parse::<Slo>().is_err(), "{bad}");
        }
    }

    #[test]
    fn search_brackets_then_bisects() {
        let o = SearchOptions { start_rate: 1.0, tolerance: 0.01, ..Default::default() };
        let s = search(&o, |r| Ok((r <= 13.7, r))).unwrap();
        let m = s.max_rate.unwrap();
        assert!(m <= 13.7 && 13.7 < m * 1.01, "{m}");
        assert_eq!(s.best, Some(m));
        // 1, 2, 4, 8, 16 bracket; bisection of [8, 16] to 1 %: 6 halvings (8 / 2^6 = 0.125 is
        // under 1 % of the 13.6 found).
        assert_eq!(s.simulations, 5 + 6);
        let down = search(&o, |r| Ok((r <= 0.3, ()))).unwrap();
        assert!(down.max_rate.unwrap() <= 0.3 && 0.3 < down.max_rate.unwrap() * 1.01);
        assert_eq!(search(&o, |_| Ok((false, ()))).unwrap().max_rate, None);
        assert!(search(&o, |_| Ok((true, ()))).unwrap().unbounded);
    }
}
