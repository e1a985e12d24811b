//! Error bars: how far to trust a prediction. A run's headline metrics get the spread of
//! cachesim's own errors on the measured runs nearest to its deployment, taken from the
//! residual table `calibration/residuals.csv` that `cachesim validate --leave-group-out source
//! --cases '*' --residuals calibration/residuals.csv` writes. Every row there predicts a source
//! (a published page, the seed runs, a measured-points file) from fits that never saw that
//! source, or from the priors no serving run was fitted on; a user's deployment is such a new
//! source, so those errors are what it can expect. "Nearest" is the first of [`TIERS`] that holds
//! [`MIN_ROWS`] rows of the metric: the same GPU, engine release, model class and load regime,
//! then ever wider.
//!
//! A row's error is e = (predicted − measured) / measured, so the measured value behind a
//! prediction p is p / (1 + e); the bar is p / (1 + e₉₀) … p / (1 + e₁₀), with e₁₀ and e₉₀ the
//! 10th and 90th percentiles (numpy linear) of the nearest rows' errors: the range that held
//! 80 % of those runs' measurements.

use cachesim_core::config::RunConfig;
use cachesim_core::metrics::{percentile, Summary};
use cachesim_core::workload::Workload;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// The residual table, built in.
const RESIDUALS: &str = include_str!("../../../calibration/residuals.csv");

/// The metrics that get a bar: the fits' headline metrics.
pub const METRICS: &[&str] = &["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"];

/// Fewer rows than this in a tier: the next, wider tier is asked.
pub const MIN_ROWS: usize = 8;

/// The lower and upper percentile of the errors a bar spans.
pub const SPAN: (f64, f64) = (10.0, 90.0);

/// One row of the residual table: a measured metric of one case, cachesim's honest prediction
/// of it, and what the deployment was (the fields of [`Near`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Residual {
    pub case: String,
    /// The group leave-one-source-out held out with it (a published page, `seed runs`, …).
    pub source: String,
    pub gpu: String,
    pub arch: String,
    pub engine: String,
    pub version: String,
    pub class: String,
    pub regime: Regime,
    pub metric: String,
    pub measured: f64,
    pub predicted: f64,
    /// (predicted − measured) / measured × 100.
    pub error_pct: f64,
    /// What priced it: the leave-group-out rung (`profile`, `family`, `kernels`, `prior`), or
    /// `no profile` (the composed prior, fitted on no serving run).
    pub priced_by: String,
}

cachesim_core::table_rows!(Residual);

/// What makes two deployments near for their errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Near {
    pub gpu: String,
    /// The GPU's architecture family (`hopper`, …), empty when the catalog does not state it.
    pub arch: String,
    /// The engine family (`vllm`, `vllm-v0`, `sglang`, `lightllm`, `trtllm`).
    pub engine: String,
    /// The engine release bundle (`vllm@0.33`, …).
    pub version: String,
    /// `dense` or `MoE`, with `, speculative` ([`cachesim_core::calibration::prior::model_class`]).
    pub class: String,
    /// How the client loads the server.
    pub regime: Regime,
}

impl Residual {
    /// The row of `metric` of a case run on `near`.
    pub fn new(
        case: &str,
        source: &str,
        near: &Near,
        metric: &str,
        measured: f64,
        predicted: f64,
        priced_by: &str,
    ) -> Self {
        let Near { gpu, arch, engine, version, class, regime } = near.clone();
        Residual {
            case: case.to_string(),
            source: source.to_string(),
            gpu,
            arch,
            engine,
            version,
            class,
            regime,
            metric: metric.to_string(),
            measured,
            predicted,
            error_pct: (predicted - measured) / measured * 100.0,
            priced_by: priced_by.to_string(),
        }
    }
}

impl Near {
    /// The deployment of `cfg` serving `w`.
    pub fn of(cfg: &RunConfig, w: &Workload) -> Near {
        Near {
            gpu: cfg.gpu.name.clone(),
            arch: cfg.gpu.arch.map(|a| format!("{a:?}").to_lowercase()).unwrap_or_default(),
            engine: cachesim_core::calibration::profile::family(cfg.engine.engine).to_string(),
            version: cfg.engine.version.name().to_string(),
            class: cfg.model_class(),
            regime: Regime::of(cfg, w.timed()),
        }
    }
}

/// How the client loads the server (its name in the residual table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Regime {
    /// At most one request in flight.
    #[serde(rename = "one at a time")]
    OneAtATime,
    /// A concurrency cap.
    #[serde(rename = "closed loop")]
    ClosedLoop,
    /// Everything at once: `--request-rate inf`, or no rate and a trace without times.
    #[serde(rename = "burst")]
    Burst,
    /// An open-loop request rate.
    #[serde(rename = "rate")]
    Rate,
    /// The trace's own send times.
    #[serde(rename = "trace times")]
    TraceTimes,
}

impl Regime {
    /// The regime of `cfg`'s client over a workload whose requests all have send times
    /// (`timed`) or not.
    pub fn of(cfg: &RunConfig, timed: bool) -> Regime {
        use cachesim_core::workload::arrivals::Rate;
        match (cfg.max_concurrency, cfg.arrivals.rate) {
            (Some(1), _) => Regime::OneAtATime,
            (Some(_), _) => Regime::ClosedLoop,
            (None, Some(Rate::Inf)) => Regime::Burst,
            (None, Some(Rate::PerSecond(_))) => Regime::Rate,
            (None, None) if timed => Regime::TraceTimes,
            (None, None) => Regime::Burst,
        }
    }

    /// Whether it sends at times of its own (a rate, the trace's times) rather than as the
    /// server completes requests.
    pub fn open_loop(self) -> bool {
        matches!(self, Regime::Rate | Regime::TraceTimes)
    }
}

/// A tier of nearness: its words and which rows it keeps.
pub struct Tier {
    pub name: &'static str,
    pub keep: fn(&Residual, &Near) -> bool,
}

/// The tiers, nearest first; the last keeps every row.
pub const TIERS: &[Tier] = &[
    Tier {
        name: "same GPU, engine release, model class and load regime",
        keep: |r, n| r.gpu == n.gpu && r.version == n.version && r.class == n.class && r.regime == n.regime,
    },
    Tier {
        name: "same GPU, engine family and model class",
        keep: |r, n| r.gpu == n.gpu && r.engine == n.engine && r.class == n.class,
    },
    Tier {
        name: "same GPU architecture, engine family and model class",
        keep: |r, n| !n.arch.is_empty() && r.arch == n.arch && r.engine == n.engine && r.class == n.class,
    },
    Tier { name: "same engine family and model class", keep: |r, n| r.engine == n.engine && r.class == n.class },
    Tier { name: "same model class", keep: |r, n| r.class == n.class },
    Tier { name: "every case", keep: |_, _| true },
];

/// The built-in residual table, read once.
pub fn table() -> &'static [Residual] {
    static TABLE: OnceLock<Vec<Residual>> = OnceLock::new();
    TABLE.get_or_init(|| parse(RESIDUALS).unwrap_or_default())
}

/// Reads a residual table (the CSV [`write`] writes).
pub fn parse(text: &str) -> Result<Vec<Residual>, csv::Error> {
    csv::Reader::from_reader(text.as_bytes()).deserialize().collect()
}

/// The table as CSV.
pub fn write(rows: &[Residual]) -> Result<String, csv::Error> {
    let mut bytes = Vec::new();
    cachesim_core::table::TableRow::write_csv(rows, &mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The error bar of one metric of one prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bar {
    pub metric: String,
    pub predicted: f64,
    /// Where the measured value lies if this prediction errs as the nearest rows did:
    /// `predicted / (1 + error_high)` … `predicted / (1 + error_low)`.
    pub measured_low: f64,
    pub measured_high: f64,
    /// The nearest rows' errors (+ = cachesim predicted above the measurement).
    #[serde(flatten)]
    pub spread: Spread,
}

impl Bar {
    /// Whether the two bars' ranges of the measured value overlap: the predictions cannot be
    /// told apart at the accuracy their nearest runs had.
    pub fn overlaps(&self, other: &Bar) -> bool {
        self.measured_low <= other.measured_high && other.measured_low <= self.measured_high
    }
}

/// The spread of cachesim's errors on `metric` over the rows nearest to `near`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    /// The [`SPAN`] percentiles and the median of the errors, %.
    pub error_low_pct: f64,
    pub error_median_pct: f64,
    pub error_high_pct: f64,
    pub rows: usize,
    pub sources: usize,
    /// Which tier the rows come from ([`TIERS`]).
    pub nearest: &'static str,
}

/// The bar of `metric` predicted at `predicted` for the deployment `near`, from `rows`; `None`
/// for a prediction that is not a positive number, or no [`spread`].
pub fn bar(rows: &[Residual], near: &Near, metric: &str, predicted: f64) -> Option<Bar> {
    if !(predicted.is_finite() && predicted > 0.0) {
        return None;
    }
    let spread = spread(rows, near, metric)?;
    Some(Bar {
        metric: metric.to_string(),
        predicted,
        measured_low: predicted / (1.0 + spread.error_high_pct / 100.0),
        measured_high: predicted / (1.0 + spread.error_low_pct / 100.0),
        spread,
    })
}

/// The spread of the errors on `metric` of the rows of `rows` nearest to `near` (the first of
/// [`TIERS`] that keeps [`MIN_ROWS`]); `None` when even the whole table has fewer (of the same
/// kind of load, for throughput).
pub fn spread(rows: &[Residual], near: &Near, metric: &str) -> Option<Spread> {
    // An open loop's throughput follows its arrivals until the server saturates, a closed
    // loop's (or a burst's) follows the engine: their throughput errors do not mix.
    let open = near.regime.open_loop();
    let of_metric: Vec<&Residual> = rows
        .iter()
        .filter(|r| r.metric == metric && r.error_pct > -100.0)
        .filter(|r| metric != "output_throughput" || r.regime.open_loop() == open)
        .collect();
    let (tier, nearest) = TIERS.iter().find_map(|t| {
        let kept: Vec<&Residual> = of_metric.iter().copied().filter(|r| (t.keep)(r, near)).collect();
        (kept.len() >= MIN_ROWS).then_some((t, kept))
    })?;
    let mut e: Vec<f64> = nearest.iter().map(|r| r.error_pct).collect();
    e.sort_by(f64::total_cmp);
    let (lo, mid, hi) = (percentile(&e, SPAN.0), percentile(&e, 50.0), percentile(&e, SPAN.1));
    let sources: BTreeSet<&str> = nearest.iter().map(|r| r.source.as_str()).collect();
    Some(Spread {
        error_low_pct: lo,
        error_median_pct: mid,
        error_high_pct: hi,
        rows: nearest.len(),
        sources: sources.len(),
        nearest: tier.name,
    })
}

/// The bars of a run's headline metrics ([`METRICS`]) under `cfg` serving `w`, from the
/// built-in table.
pub fn bars(cfg: &RunConfig, w: &Workload, summary: &Summary) -> Vec<Bar> {
    let values = serde_json::to_value(summary).unwrap_or_default();
    bars_of(cfg, w, |m| values.get(m)?.as_f64())
}

/// The bars of the headline metrics under `cfg` with the values `value` gives (e.g. the
/// medians over seeds).
pub fn bars_of(cfg: &RunConfig, w: &Workload, value: impl Fn(&str) -> Option<f64>) -> Vec<Bar> {
    let near = Near::of(cfg, w);
    METRICS.iter().filter_map(|&m| bar(table(), &near, m, value(m)?)).collect()
}

/// A metric's words and unit in the bars' text.
fn label(metric: &str) -> &str {
    match metric {
        "output_throughput" => "Output throughput (tok/s)",
        "median_ttft_ms" => "Median TTFT (ms)",
        "median_tpot_ms" => "Median TPOT (ms)",
        "median_e2e_latency_ms" => "Median E2E latency (ms)",
        m => m,
    }
}

/// The bars as the lines after a run's report, and a line for each headline metric without
/// one.
pub fn text(bars: &[Bar]) -> String {
    let mut s = format!(
        "Error bars: the measurement, if cachesim errs as on the middle {:.0} % of the measured runs nearest to this \
         deployment (each predicted by fits that never saw its source; calibration/residuals.csv)\n",
        SPAN.1 - SPAN.0
    );
    for m in METRICS {
        let name = format!("{}:", label(m));
        let Some(b) = bars.iter().find(|b| b.metric == *m) else {
            let load = if *m == "output_throughput" { " under this kind of load (open or closed loop)" } else { "" };
            s.push_str(&format!(
                "  {name:<28} none: fewer than {MIN_ROWS} measured runs of it{load}, or nothing predicted\n"
            ));
            continue;
        };
        s.push_str(&format!(
            "  {name:<28} {} … {}  (errors {:+.1} … {:+.1} %, median {:+.1} %; {} rows from {} source{}: {})\n",
            number(b.measured_low),
            number(b.measured_high),
            b.spread.error_low_pct,
            b.spread.error_high_pct,
            b.spread.error_median_pct,
            b.spread.rows,
            b.spread.sources,
            if b.spread.sources == 1 { "" } else { "s" },
            b.spread.nearest
        ));
    }
    s
}

/// A measured value: whole above 100, else two decimals.
fn number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(gpu: &str, engine: &str) -> Near {
        Near {
            gpu: gpu.to_string(),
            arch: "hopper".to_string(),
            engine: engine.to_string(),
            version: format!("{engine}@1"),
            class: "dense".to_string(),
            regime: Regime::Burst,
        }
    }

    fn row(n: Near, metric: &str, error_pct: f64, source: &str) -> Residual {
        let r = Residual::new(&format!("c{error_pct}"), source, &n, metric, 100.0, 100.0 + error_pct, "prior");
        Residual { error_pct, ..r }
    }

    /// Hand-computed: ten errors 0, 10, …, 90 % on the same deployment; numpy's 10th
    /// percentile is 9, its 90th 81, its median 45.
    #[test]
    fn a_bar_is_the_percentiles_of_the_nearest_errors() {
        let n = near("h100-sxm", "vllm");
        let rows: Vec<Residual> =
            (0..10).map(|i| row(n.clone(), "median_tpot_ms", i as f64 * 10.0, if i < 5 { "a" } else { "b" })).collect();
        let b = bar(&rows, &n, "median_tpot_ms", 20.0).unwrap();
        assert_eq!((b.spread.error_low_pct, b.spread.error_median_pct, b.spread.error_high_pct), (9.0, 45.0, 81.0));
        assert_eq!((b.spread.rows, b.spread.sources, b.spread.nearest), (10, 2, TIERS[0].name));
        assert!((b.measured_low - 20.0 / 1.81).abs() < 1e-12 && (b.measured_high - 20.0 / 1.09).abs() < 1e-12);
        assert!(bar(&rows, &n, "median_ttft_ms", 20.0).is_none(), "no row measures TTFT");
        assert!(bar(&rows, &n, "median_tpot_ms", 0.0).is_none(), "nothing to bound");
    }

    /// Too few rows on the same GPU: the bar comes from the engine family's rows elsewhere.
    #[test]
    fn too_few_near_rows_widen_the_tier() {
        let here = near("h100-sxm", "sglang");
        let mut rows: Vec<Residual> = (0..3).map(|i| row(here.clone(), "median_ttft_ms", i as f64, "a")).collect();
        rows.extend((0..8).map(|i| row(near("a100-80gb", "sglang"), "median_ttft_ms", -50.0 + i as f64, "b")));
        rows.extend((0..20).map(|i| row(near("a100-80gb", "vllm"), "median_ttft_ms", 500.0 + i as f64, "c")));
        for r in &mut rows[3..11] {
            r.arch = "ampere".to_string();
        }
        let b = bar(&rows, &here, "median_ttft_ms", 10.0).unwrap();
        assert_eq!((b.spread.rows, b.spread.nearest), (11, "same engine family and model class"));
        assert!(b.spread.error_high_pct < 3.0, "the other engine's rows stay out: {b:?}");
        let far = near("l4", "lightllm");
        let b = bar(&rows, &far, "median_ttft_ms", 10.0).unwrap();
        assert_eq!((b.spread.rows, b.spread.nearest), (31, "same model class"));
    }

    /// A closed loop's throughput errors say nothing of an open loop's, and the reverse.
    #[test]
    fn throughput_errors_stay_within_their_kind_of_load() {
        let closed = near("h100-sxm", "vllm");
        let mut open = closed.clone();
        open.regime = Regime::Rate;
        let mut rows: Vec<Residual> =
            (0..8).map(|i| row(closed.clone(), "output_throughput", 50.0 + i as f64, "a")).collect();
        rows.extend((0..8).map(|i| row(open.clone(), "output_throughput", i as f64 - 4.0, "b")));
        rows.extend((0..8).map(|i| row(closed.clone(), "median_tpot_ms", 20.0 + i as f64, "a")));
        let mut trace = open.clone();
        trace.regime = Regime::TraceTimes;
        let b = bar(&rows, &trace, "output_throughput", 100.0).unwrap();
        assert!(b.spread.error_low_pct >= -4.0 && b.spread.error_high_pct <= 4.0 && b.spread.sources == 1, "{b:?}");
        let b = bar(&rows, &closed, "output_throughput", 100.0).unwrap();
        assert!(b.spread.error_low_pct >= 50.0, "{b:?}");
        // Latency errors are shared across the kinds of load.
        assert_eq!(bar(&rows, &trace, "median_tpot_ms", 10.0).unwrap().spread.rows, 8);
    }

    #[test]
    fn overlapping_bars_cannot_be_told_apart() {
        let n = near("h100-sxm", "vllm");
        let rows: Vec<Residual> =
            (0..10).map(|i| row(n.clone(), "output_throughput", i as f64 * 2.0 - 9.0, "a")).collect();
        let a = bar(&rows, &n, "output_throughput", 1000.0).unwrap();
        let close = bar(&rows, &n, "output_throughput", 1100.0).unwrap();
        let far = bar(&rows, &n, "output_throughput", 1300.0).unwrap();
        assert!(a.overlaps(&close) && close.overlaps(&a));
        assert!(!a.overlaps(&far) && !far.overlaps(&a));
    }

    #[test]
    fn the_built_in_table_reads_and_round_trips() {
        let rows = parse(RESIDUALS).expect("calibration/residuals.csv reads");
        assert!(rows.len() > 100, "{} rows", rows.len());
        assert_eq!(write(&rows).unwrap(), RESIDUALS, "the table is what `write` writes");
        assert!(rows.iter().all(|r| METRICS.contains(&r.metric.as_str()) && r.error_pct.is_finite()));
    }
}
