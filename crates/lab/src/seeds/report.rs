//! The report of a `--seeds` run. Each seed's run is reduced, as soon as it ends, to a
//! [`SeedRun`] — its summary, the numbers of its `run --json` document and its detail sections —
//! so that memory holds one whole simulation per thread, not one per seed. The text report is the
//! usual layout with each value the median over the seeds followed by its spread `[lo, hi]`;
//! `--json` gives, for every number of `run --json`, its [`Spread`] (median, min, max, interval,
//! per_seed).

use super::spread::{Interval, Spread};
use crate::report::{Cells, RunReport};
use cachesim_core::config::RunConfig;
use cachesim_core::metrics::Summary;
use cachesim_core::sim::Outcome;
use cachesim_core::workload::{TraceInfo, Workload};
use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt::Write;

/// The keys of `run --json` that are not metrics (the per-seed details and the inputs).
const NOT_METRICS: [&str; 6] = ["failed_reasons", "saturation", "instances", "router", "trace", "config"];

/// One seed's run, reduced to what the report of all seeds needs.
#[derive(Debug, Clone)]
pub struct SeedRun {
    pub seed: u64,
    pub summary: Summary,
    /// Requests sent.
    pub sent: usize,
    /// The numbers of the run's `--json` document (`cache` a nested object of them), `null`
    /// where the document has one (a NaN).
    pub metrics: Map<String, Value>,
    /// The run's `failed_reasons`, `saturation`, and, for more than one instance, `instances`
    /// and `router`, with `seed`.
    pub details: Map<String, Value>,
    /// The run's cache outcome line.
    pub cache_line: String,
    /// The text sections after the benchmark report (instance table, TTFT breakdown), as the
    /// single run prints them.
    pub sections: String,
    /// The overload diagnosis as text, when the run saturated.
    pub saturation: Option<String>,
}

impl SeedRun {
    /// Reduces `out`, the run of `w` under `cfg` at seed `seed`; `sections` and
    /// `saturation` are the text the single run would print after its report.
    pub fn new(
        seed: u64,
        out: &Outcome,
        w: &Workload,
        cfg: &RunConfig,
        sections: String,
        saturation: Option<String>,
    ) -> Self {
        let doc = serde_json::to_value(RunReport::new(out, w, cfg)).unwrap_or(Value::Null);
        let mut metrics = Map::new();
        let mut details = Map::new();
        details.insert("seed".into(), Value::from(seed));
        if let Value::Object(doc) = doc {
            for (k, v) in doc {
                if NOT_METRICS.contains(&k.as_str()) {
                    if !matches!(k.as_str(), "trace" | "config") {
                        details.insert(k, v);
                    }
                } else if let Value::Object(inner) = v {
                    let nums: Map<String, Value> = inner.into_iter().filter(|(_, v)| numeric(v)).collect();
                    metrics.insert(k, Value::Object(nums));
                } else if numeric(&v) {
                    metrics.insert(k, v);
                }
            }
        }
        SeedRun {
            seed,
            summary: out.summary.clone(),
            sent: out.sent,
            metrics,
            details,
            cache_line: crate::report::cache_outcome(out),
            sections,
            saturation,
        }
    }

    fn saturated(&self) -> bool {
        self.details.get("saturation").is_some_and(|s| !s.is_null())
    }
}

/// A number, or the `null` a NaN serialises to.
fn numeric(v: &Value) -> bool {
    v.is_number() || v.is_null()
}

fn number(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// A metric's spread, or a group of them (`cache`), in a map that keeps its keys' order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Metric {
    Spread(Spread),
    Group(Metrics),
}

/// Metrics by name, serialised as a JSON object in this order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metrics(pub Vec<(String, Metric)>);

impl Serialize for Metrics {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The spread of every metric the first run has, nested as `run --json` nests them.
fn spreads(runs: &[SeedRun], iv: &Interval) -> Metrics {
    let mut out = Metrics::default();
    let Some(first) = runs.first() else { return out };
    for (k, v) in &first.metrics {
        let metric = match v {
            Value::Object(inner) => Metric::Group(Metrics(
                inner
                    .keys()
                    .map(|ik| {
                        let values = runs.iter().map(|r| number(r.metrics.get(k).and_then(|o| o.get(ik)))).collect();
                        (ik.clone(), Metric::Spread(Spread::of(values, iv)))
                    })
                    .collect(),
            )),
            _ => Metric::Spread(Spread::of(runs.iter().map(|r| number(r.metrics.get(k))).collect(), iv)),
        };
        out.0.push((k.clone(), metric));
    }
    out
}

/// The seeds of a run and what they varied (the `seeds` object of `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct SeedsEcho {
    /// The seeds, in order (`--seed` S to S + N − 1).
    pub seeds: Vec<u64>,
    /// What the seed draws in this run.
    pub varied: Vec<String>,
    /// The interval of the median every metric's `interval` gives.
    pub interval: Interval,
    /// The seed whose output throughput is nearest the median (the lowest such seed): the text
    /// report's cache outcome line and tables (instances, TTFT breakdown) are its, and so is the
    /// overload diagnosis when it saturated.
    pub representative: u64,
}

/// The `cachesim run --seeds N --json` document.
#[derive(Debug, Serialize)]
pub struct SeedsReport<'a> {
    pub seeds: &'a SeedsEcho,
    /// Each number of `run --json` as its spread over the seeds (keys in alphabetical order).
    pub metrics: Metrics,
    /// Each seed's failures, overload diagnosis and per-instance figures, in seed order.
    pub per_seed: Vec<&'a Map<String, Value>>,
    pub trace: &'a TraceInfo,
    /// The configuration, at the first seed (the others differ in their seed alone).
    pub config: &'a RunConfig,
    /// The error bars of the headline metrics' medians over the seeds ([`crate::trust`]).
    pub error_bars: Vec<crate::trust::Bar>,
}

/// The runs of every seed, in seed order, and what the report says of them.
#[derive(Debug)]
pub struct Seeds {
    pub runs: Vec<SeedRun>,
    pub echo: SeedsEcho,
}

impl Seeds {
    /// The report of `runs` (at least one, in seed order) whose seeds varied `varied`.
    pub fn new(runs: Vec<SeedRun>, varied: Vec<String>) -> Self {
        let iv = Interval::for_seeds(runs.len());
        let tput: Vec<f64> = runs.iter().map(|r| r.summary.output_throughput).collect();
        let median = Spread::of(tput.clone(), &iv).median;
        let mut rep = 0;
        for (i, t) in tput.iter().enumerate() {
            if (t - median).abs() < (tput[rep] - median).abs() {
                rep = i;
            }
        }
        let echo = SeedsEcho {
            seeds: runs.iter().map(|r| r.seed).collect(),
            varied,
            interval: iv,
            representative: runs.get(rep).map_or(0, |r| r.seed),
        };
        Seeds { runs, echo }
    }

    fn representative(&self) -> Option<&SeedRun> {
        self.runs.iter().find(|r| r.seed == self.echo.representative)
    }

    /// `--seeds N --json`.
    pub fn document<'a>(&'a self, w: &'a Workload, config: &'a RunConfig) -> SeedsReport<'a> {
        SeedsReport {
            seeds: &self.echo,
            metrics: spreads(&self.runs, &self.echo.interval),
            per_seed: self.runs.iter().map(|r| &r.details).collect(),
            trace: &w.info,
            config,
            error_bars: self.error_bars(config, w),
        }
    }

    /// The error bars ([`crate::trust`]) of the headline metrics' medians over the seeds.
    pub fn error_bars(&self, config: &RunConfig, w: &Workload) -> Vec<crate::trust::Bar> {
        let iv = &self.echo.interval;
        crate::trust::bars_of(config, w, |m| {
            let values: Option<Vec<f64>> = self.runs.iter().map(|r| r.metrics.get(m)?.as_f64()).collect();
            Some(Spread::of(values.filter(|v| !v.is_empty())?, iv).median)
        })
    }

    /// "seeds 0–4 (5 runs)", for the client's line of the configuration echo.
    pub fn client_text(&self) -> String {
        let s = &self.echo.seeds;
        match (s.first(), s.last()) {
            (Some(a), Some(b)) if a != b => format!("seeds {a}–{b} ({} runs)", s.len()),
            (Some(a), _) => format!("seed {a}"),
            _ => String::new(),
        }
    }

    /// The representative seed's cache outcome line, marked as its.
    pub fn cache_line(&self) -> String {
        self.representative().map(|r| format!("{} (seed {})\n", r.cache_line.trim_end(), r.seed)).unwrap_or_default()
    }

    /// The lines that say how many seeds ran, what they varied and how to read the values.
    pub fn header(&self) -> String {
        let e = &self.echo;
        let iv = &e.interval;
        let runs = match (e.seeds.first(), e.seeds.last()) {
            (Some(a), Some(b)) => format!("{} runs, --seed {a} to {b}", e.seeds.len()),
            _ => String::new(),
        };
        let short = if iv.coverage < iv.level { " (under 95 % below 6 seeds)" } else { "" };
        let mut s = String::new();
        let _ = writeln!(s, "Seeds:          {runs}; the seed drew {}", e.varied.join("; "));
        let _ = writeln!(s, "Spread:         value = the median over the seeds; [lo, hi] = {},", iv.describe());
        let _ = writeln!(
            s,
            "                a {:.1} % interval of the median{short}; a value alone was the same at every seed",
            iv.coverage * 100.0
        );
        let tables = self.representative().is_some_and(|r| !r.sections.is_empty());
        let _ = writeln!(
            s,
            "Details:        the cache outcome line{} seed {}'s (median output throughput)",
            if tables { " and the tables below are" } else { " is" },
            e.representative
        );
        s
    }

    /// The text after the benchmark report: the representative seed's sections, then which
    /// seeds saturated with one diagnosis.
    pub fn trailer(&self) -> String {
        let mut s = self.representative().map(|r| r.sections.clone()).unwrap_or_default();
        let saturated: Vec<&SeedRun> = self.runs.iter().filter(|r| r.saturated()).collect();
        if let Some(first) = saturated.first() {
            let shown = self.representative().filter(|r| r.saturated()).unwrap_or(first);
            let which: Vec<String> = saturated.iter().map(|r| r.seed.to_string()).collect();
            let _ = writeln!(
                s,
                "\nOverloaded at {} of {} seeds ({}); seed {}'s diagnosis:",
                saturated.len(),
                self.runs.len(),
                which.join(", "),
                shown.seed
            );
            s.push_str(shown.saturation.as_deref().unwrap_or_default());
        }
        s
    }

    /// The benchmark report's cells: the median and spread of the seeds' summaries.
    pub fn cells(&self) -> SpreadCells<'_> {
        SpreadCells { runs: &self.runs, iv: self.echo.interval }
    }
}

/// [`Cells`] over the seeds: the median, then `[lo, hi]` unless every seed gave the same value.
pub struct SpreadCells<'a> {
    runs: &'a [SeedRun],
    iv: Interval,
}

impl SpreadCells<'_> {
    fn cell(&self, values: Vec<f64>, fmt: fn(f64) -> String) -> String {
        let s = Spread::of(values, &self.iv);
        if s.constant() {
            fmt(s.median)
        } else {
            format!("{:<10} [{}, {}]", fmt(s.median), fmt(s.interval[0]), fmt(s.interval[1]))
        }
    }
}

impl Cells for SpreadCells<'_> {
    fn count(&self, metric: fn(&Summary) -> u64) -> String {
        // The median of an even count of seeds may fall halfway between two counts.
        let fmt = |x: f64| if x.fract() == 0.0 { format!("{x:.0}") } else { format!("{x:.1}") };
        self.cell(self.runs.iter().map(|r| metric(&r.summary) as f64).collect(), fmt)
    }
    fn float(&self, metric: fn(&Summary) -> f64) -> String {
        self.cell(self.runs.iter().map(|r| metric(&r.summary)).collect(), |x| format!("{x:.2}"))
    }
}
