//! The validation table: each expressible case's simulation compared with its measurements,
//! metric by metric (signed error per row), the summaries (MAPE and median |error| per metric:
//! over all cases, over the honest rows of the mode — held out, leave-one-out or
//! leave-group-out — over the published points alone, per rung, per GPU, per engine), the pooled
//! figure the gate reads, and the table as text and CSV rows.

use super::case::{LoadedCase, EXTRA, METRICS, STEP_METRICS, STEP_SOURCE};
use serde::Serialize;
use std::collections::BTreeMap;

/// The metrics of the per-GPU and per-engine text summaries (the fit's default metrics).
pub const HEADLINE: &[&str] = &["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"];

/// One row of the validation table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub case: String,
    /// The batch shape of a kernel step row (`B=8 L=512`, `T=2048`); `None` for a serving case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    pub metric: String,
    pub measured: f64,
    pub predicted: f64,
    /// (predicted − measured) / measured × 100.
    pub error_pct: f64,
}

impl Row {
    /// The case column: the case, and a kernel step row's shape after it.
    pub fn label(&self) -> String {
        match &self.shape {
            Some(s) => format!("{} {s}", self.case),
            None => self.case.clone(),
        }
    }
}

/// Error statistics of one metric over the cases.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MetricSummary {
    /// Mean of |error %| (MAPE).
    pub mape_pct: f64,
    pub median_abs_error_pct: f64,
    pub cases: usize,
}

/// The pooled honest figure ([`Validation::pooled`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Pooled {
    /// The metrics pooled: the keys of the fits' default weights.
    pub metrics: Vec<String>,
    pub median_abs_error_pct: f64,
    /// The rows pooled (one per case and metric).
    pub rows: usize,
}

/// A case that cannot be simulated yet.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Skipped {
    pub case: String,
    pub missing: String,
}

/// How a case was simulated.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CaseInfo {
    pub case: String,
    /// The profile that priced its steps, in words (the run's config echo).
    pub calibration: String,
    /// Whether that profile was fitted on this case (else the case is held out).
    pub fitted: bool,
    /// No fitted profile matches the case (its GPU, engine family and model, or its own
    /// `deployment.profile`): the raw roofline prices it, with or without `--uncalibrated`.
    /// Such a case is neither fitted nor held out: it stays out of the held-out summary and
    /// the `--max-held-out-error` gate, and its rows show how far the raw roofline is off.
    pub no_profile: bool,
    /// The GPU profile it ran on.
    pub gpu: String,
    /// Its engine family (`vllm`, `sglang`, `lightllm`).
    pub engine: String,
    /// Where the real run comes from: a published point's source (its URL's host, and on
    /// GitHub the owner), else `seed runs`.
    pub source: String,
    /// Under `--leave-one-out` / `--leave-group-out`: how its rows were predicted instead of by
    /// its profile — `loo` or `group-out` (a refit without the case or its group; its profile
    /// in `refit_on`), `group-out (kernel device)` (a kernel-step profile's device factors, the
    /// priors' host factors), `group-out (prior)` (the step-time priors, no fitted factor), or
    /// why no refit was possible ([`super::holdout::NO_TRAINING_LEFT`]: the profile's
    /// prediction stands, ungated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refit: Option<String>,
    /// The refit in words: which factors, fitted on which cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refit_on: Option<String>,
    /// The rung of `--leave-group-out` that predicted it ([`super::holdout::Rung::name`]:
    /// `profile`, `family`, `kernels`, `prior`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rung: Option<String>,
}

impl CaseInfo {
    /// Held out: a fitted profile matches the case but was not fitted on it.
    pub fn held_out(&self) -> bool {
        !self.fitted && !self.no_profile
    }

    /// An honest prediction, in the summary and gate of the mode run: held out and kept,
    /// refitted without the case (`loo`) or its group (`group-out`), or priced by the priors
    /// alone (`group-out (prior)`) or with kernel-measured device factors (`group-out (kernel
    /// device)`).
    pub fn honest(&self) -> bool {
        use super::holdout::{GROUP_OUT, GROUP_OUT_KERNELS, GROUP_OUT_PRIOR, LOO};
        match self.refit.as_deref() {
            Some(r) => r == LOO || r == GROUP_OUT || r == GROUP_OUT_PRIOR || r == GROUP_OUT_KERNELS,
            None => self.held_out(),
        }
    }

    /// A published point: its source is a page, not `seed runs` nor kernel profiling.
    pub fn published(&self) -> bool {
        self.source != "seed runs" && self.source != STEP_SOURCE
    }
}

/// One row of `validate --csv`: a [`Row`] and the case's role.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CsvRow {
    pub case: String,
    pub metric: String,
    pub measured: f64,
    pub predicted: f64,
    pub error_pct: f64,
    /// `fitted`, `held-out`, `raw`, `loo`, `group-out` or why no refit was possible ([`role`]).
    pub profile: String,
}

cachesim_core::table_rows!(CsvRow);

/// A case's role in `v`: `fitted` (its profile was fitted on it), `held-out` (a fitted profile
/// matches it but was not fitted on it), `raw` (no fitted profile matches: the raw roofline),
/// or its [`CaseInfo::refit`] mark; empty for a case `v` does not list.
pub fn role<'a>(v: &'a Validation, case: &str) -> &'a str {
    match v.cases.iter().find(|c| c.case == case) {
        Some(CaseInfo { refit: Some(r), .. }) => r,
        Some(c) if c.fitted => "fitted",
        Some(c) if c.no_profile => "raw",
        Some(_) => "held-out",
        None => "",
    }
}

/// The rows of `validate --csv`, in table order.
pub fn csv_rows(v: &Validation) -> Vec<CsvRow> {
    v.rows
        .iter()
        .map(|r| CsvRow {
            case: r.label(),
            metric: r.metric.clone(),
            measured: r.measured,
            predicted: r.predicted,
            error_pct: r.error_pct,
            profile: role(v, &r.case).to_string(),
        })
        .collect()
}

/// The residual table of `v` ([`crate::trust`]): the rows of the headline metrics
/// ([`crate::trust::METRICS`]) of every serving case predicted by nothing fitted on it — honestly
/// ([`CaseInfo::honest`]) or by the priors, no profile matching it — with its source group and
/// deployment from `near` (case → (source, deployment)); in table order.
pub fn residuals(
    v: &Validation,
    near: &std::collections::HashMap<&str, (String, crate::trust::Near)>,
) -> Vec<crate::trust::Residual> {
    let info: std::collections::HashMap<&str, &CaseInfo> = v.cases.iter().map(|c| (c.case.as_str(), c)).collect();
    v.rows
        .iter()
        .filter(|r| r.shape.is_none() && r.measured > 0.0 && crate::trust::METRICS.contains(&r.metric.as_str()))
        .filter_map(|r| {
            let c = info.get(r.case.as_str())?;
            let (source, deployment) = near.get(r.case.as_str())?;
            let priced_by = match (&c.rung, c.no_profile) {
                (Some(rung), _) => rung.as_str(),
                (None, true) => "no profile",
                (None, false) => return None,
            };
            (c.honest() || c.no_profile).then(|| {
                crate::trust::Residual::new(&r.case, source, deployment, &r.metric, r.measured, r.predicted, priced_by)
            })
        })
        .collect()
}

/// The names of the honestly predicted cases of `v` ([`CaseInfo::honest`]).
fn held_out_cases(v: &Validation) -> Vec<&str> {
    v.cases.iter().filter(|c| c.honest()).map(|c| c.case.as_str()).collect()
}

/// The `cachesim validate` result.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Validation {
    /// How the honest predictions were made: `held-out` (the profiles as fitted; empty means
    /// the same), `leave-one-out`, `leave-group-out gpu`, `leave-group-out source`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
    pub rows: Vec<Row>,
    /// Per metric over every row.
    pub summary: BTreeMap<String, MetricSummary>,
    /// Per metric over the rows of the honestly predicted cases of the mode run
    /// ([`CaseInfo::honest`]): held out (a fitted profile matches them but was not fitted on
    /// them), or refitted without them or their group.
    pub held_out: BTreeMap<String, MetricSummary>,
    /// Per metric over the rows of `held_out` that are published points
    /// ([`CaseInfo::published`]), not seed runs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub held_out_published: BTreeMap<String, MetricSummary>,
    /// The figure `--max-held-out-error` gates: the median |error %| of the honest rows over
    /// the metrics the fits weigh, pooled (absent without such rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pooled: Option<Pooled>,
    /// Under `--leave-group-out`: per rung ([`CaseInfo::rung`]), per metric over the rows of
    /// `held_out` it predicted.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_rung: BTreeMap<String, BTreeMap<String, MetricSummary>>,
    /// Per GPU, per metric over every row of the cases on that GPU.
    pub by_gpu: BTreeMap<String, BTreeMap<String, MetricSummary>>,
    /// Per engine family, per metric over every row of its cases.
    pub by_engine: BTreeMap<String, BTreeMap<String, MetricSummary>>,
    pub cases: Vec<CaseInfo>,
    pub not_expressible: Vec<Skipped>,
    /// Expressible cases not run here (their data set is absent).
    pub not_run: Vec<Skipped>,
}

/// The rows of one case: every metric of [`METRICS`] the report has, against the simulation's
/// prediction under the same keys.
pub fn compare(case: &LoadedCase, predicted: &super::prediction::Prediction) -> Vec<Row> {
    METRICS
        .iter()
        .filter(|&&m| !case.case.skip_metrics.iter().any(|s| s == m))
        .filter_map(|&m| {
            let measured = case.measured.get(m)?;
            let predicted = predicted.get(m)?;
            let error_pct = if measured == 0.0 { 0.0 } else { (predicted - measured) / measured * 100.0 };
            Some(Row {
                case: case.case.case.clone(),
                shape: None,
                metric: m.to_string(),
                measured,
                predicted,
                error_pct,
            })
        })
        .collect()
}

fn summary_of<'a>(rows: impl Iterator<Item = &'a Row>) -> BTreeMap<String, MetricSummary> {
    let mut by: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in rows {
        by.entry(&r.metric).or_default().push(r.error_pct.abs());
    }
    by.into_iter()
        .map(|(m, mut e)| {
            e.sort_by(f64::total_cmp);
            let n = e.len();
            let median = if n % 2 == 1 { e[n / 2] } else { (e[n / 2 - 1] + e[n / 2]) / 2.0 };
            (
                m.to_string(),
                MetricSummary { mape_pct: e.iter().sum::<f64>() / n as f64, median_abs_error_pct: median, cases: n },
            )
        })
        .collect()
}

/// Fills `summary`, `held_out`, `held_out_published`, `by_rung` and the per-GPU and
/// per-engine summaries from `rows` and `cases`.
pub fn summarise(v: &mut Validation) {
    v.summary = summary_of(v.rows.iter());
    let of = |keep: &dyn Fn(&CaseInfo) -> bool| -> BTreeMap<String, MetricSummary> {
        let cases: Vec<&str> = v.cases.iter().filter(|c| c.honest() && keep(c)).map(|c| c.case.as_str()).collect();
        summary_of(v.rows.iter().filter(|r| cases.contains(&r.case.as_str())))
    };
    let (held_out, published) = (of(&|_| true), of(&CaseInfo::published));
    let mut rungs: Vec<&str> = v.cases.iter().filter_map(|c| c.rung.as_deref()).collect();
    rungs.sort();
    rungs.dedup();
    let by_rung = rungs.into_iter().map(|g| (g.to_string(), of(&|c| c.rung.as_deref() == Some(g))));
    let by_rung = by_rung.filter(|(_, s)| !s.is_empty()).collect();
    (v.held_out, v.held_out_published, v.by_rung) = (held_out, published, by_rung);
    let group = |key: fn(&CaseInfo) -> &str| {
        let mut keys: Vec<&str> = v.cases.iter().map(key).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let of: Vec<&str> = v.cases.iter().filter(|c| key(c) == k).map(|c| c.case.as_str()).collect();
                (k.to_string(), summary_of(v.rows.iter().filter(|r| of.contains(&r.case.as_str()))))
            })
            .filter(|(_, s)| !s.is_empty())
            .collect::<BTreeMap<_, _>>()
    };
    v.by_gpu = group(|c| c.gpu.as_str());
    v.by_engine = group(|c| c.engine.as_str());
    let metrics: Vec<String> = cachesim_core::calibration::factors::default_weights().into_keys().collect();
    let names: Vec<&str> = metrics.iter().map(String::as_str).collect();
    v.pooled = pooled(v, &names).map(|(median_abs_error_pct, rows)| Pooled { metrics, median_abs_error_pct, rows });
}

/// The name of `v`'s honest summary: `held-out`, `leave-one-out`, `leave-group-out gpu`, ….
pub fn mode_name(v: &Validation) -> &str {
    if v.mode.is_empty() {
        "held-out"
    } else {
        &v.mode
    }
}

/// Median |error %| over the honest rows (held out, or refitted without their case or group)
/// of the given metrics, pooled (`None` without such rows).
pub fn held_out_median(v: &Validation, metrics: &[&str]) -> Option<f64> {
    pooled(v, metrics).map(|(m, _)| m)
}

/// [`held_out_median`] and the number of rows it pools.
fn pooled(v: &Validation, metrics: &[&str]) -> Option<(f64, usize)> {
    let held = held_out_cases(v);
    let mut e: Vec<f64> = v
        .rows
        .iter()
        .filter(|r| held.contains(&r.case.as_str()) && metrics.contains(&r.metric.as_str()))
        .map(|r| r.error_pct.abs())
        .collect();
    if e.is_empty() {
        return None;
    }
    e.sort_by(f64::total_cmp);
    let n = e.len();
    Some((if n % 2 == 1 { e[n / 2] } else { (e[n / 2 - 1] + e[n / 2]) / 2.0 }, n))
}

/// The validation table as text.
pub fn text(v: &Validation) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    // Serving rows first; kernel step rows (with a shape) in a table of their own after the
    // summaries.
    let (steps, serving): (Vec<&Row>, Vec<&Row>) = v.rows.iter().partition(|r| r.shape.is_some());
    let table = |s: &mut String, rows: &[&Row]| {
        let w = rows.iter().map(|r| r.label().len()).max().unwrap_or(4).max(4);
        let _ = writeln!(
            s,
            "{:<w$}  {:<22} {:>12} {:>12} {:>9}  profile",
            "case", "metric", "measured", "predicted", "error %"
        );
        let _ = writeln!(s, "{}", "-".repeat(w + 68));
        for r in rows {
            let _ = writeln!(
                s,
                "{:<w$}  {:<22} {:>12.2} {:>12.2} {:>+9.1}  {}",
                r.label(),
                r.metric,
                r.measured,
                r.predicted,
                r.error_pct,
                role(v, &r.case)
            );
        }
    };
    table(&mut s, &serving);
    let honest = if v.mode.is_empty() { "held-out cases".to_string() } else { v.mode.clone() };
    let published = format!("{honest}, published points only");
    for (title, summary) in
        [("all cases", &v.summary), (honest.as_str(), &v.held_out), (published.as_str(), &v.held_out_published)]
    {
        if summary.is_empty() {
            continue;
        }
        let _ = writeln!(s, "\n{:<22} {:>9} {:>14} {:>6}  ({title})", "metric", "MAPE %", "median |err| %", "cases");
        for m in METRICS.iter().chain(EXTRA).chain(STEP_METRICS).filter_map(|m| summary.get_key_value(*m)) {
            let _ =
                writeln!(s, "{:<22} {:>9.1} {:>14.1} {:>6}", m.0, m.1.mape_pct, m.1.median_abs_error_pct, m.1.cases);
        }
    }
    if !v.mode.is_empty() && v.held_out.is_empty() {
        let _ = writeln!(
            s,
            "\n({}: no case could be predicted with every factor held out; see the profiles below)",
            v.mode
        );
    }
    if !steps.is_empty() {
        let _ = writeln!(s, "\nKernel rows (device time of one step or GEMM, no host overhead):");
        table(&mut s, &steps);
    }
    let rungs = format!("{}, gated rows", v.mode);
    for (title, groups, of) in
        [("rung", &v.by_rung, rungs.as_str()), ("GPU", &v.by_gpu, "all cases"), ("engine", &v.by_engine, "all cases")]
    {
        if groups.is_empty() {
            continue;
        }
        let _ = writeln!(
            s,
            "\n{:<12} {:<22} {:>9} {:>14} {:>6}  (per {title}, {of})",
            title, "metric", "MAPE %", "median |err| %", "cases"
        );
        for (g, summary) in groups {
            for m in HEADLINE.iter().filter_map(|m| summary.get_key_value(*m)) {
                let _ = writeln!(
                    s,
                    "{:<12} {:<22} {:>9.1} {:>14.1} {:>6}",
                    g, m.0, m.1.mape_pct, m.1.median_abs_error_pct, m.1.cases
                );
            }
        }
    }
    if !v.cases.is_empty() {
        let _ = writeln!(s, "\nStep-time profiles:");
        for c in &v.cases {
            let role = match (c.fitted, c.no_profile) {
                (true, _) => "fitted on",
                (false, false) => "held out",
                (false, true) => "raw roofline, no fitted profile: not held out, not gated",
            };
            let _ = writeln!(s, "  {} ({role}): {}", c.case, c.calibration);
            match (&c.refit, &c.refit_on) {
                (Some(r), Some(on)) => {
                    let _ = writeln!(s, "    {r}: {on}");
                }
                (Some(r), None) => {
                    let _ = writeln!(s, "    {r}: its profile's prediction stands, not gated");
                }
                _ => {}
            }
        }
    }
    if !v.not_expressible.is_empty() {
        let _ = writeln!(s, "\nNot expressible yet:");
        for x in &v.not_expressible {
            let _ = writeln!(s, "  {}: {}", x.case, x.missing);
        }
    }
    if !v.not_run.is_empty() {
        let _ = writeln!(s, "\nNot run here (data absent):");
        for x in &v.not_run {
            let _ = writeln!(s, "  {}: {}", x.case, x.missing);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(metric: &str, measured: f64, predicted: f64) -> Row {
        let error_pct = (predicted - measured) / measured * 100.0;
        Row { case: "c".into(), shape: None, metric: metric.into(), measured, predicted, error_pct }
    }

    /// MAPE and median |error| by hand: errors +10 %, −30 %, +20 % → MAPE 20, median 20;
    /// −50 %, +25 % → MAPE 37.5, median 37.5.
    #[test]
    fn summary_by_hand() {
        let mut v = Validation {
            rows: vec![
                row("median_ttft_ms", 100.0, 110.0),
                row("median_ttft_ms", 100.0, 70.0),
                row("median_ttft_ms", 50.0, 60.0),
                row("output_throughput", 200.0, 100.0),
                row("output_throughput", 40.0, 50.0),
            ],
            ..Validation::default()
        };
        summarise(&mut v);
        let s = &v.summary["median_ttft_ms"];
        assert!((s.mape_pct - 20.0).abs() < 1e-9 && (s.median_abs_error_pct - 20.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.cases, 3);
        let s = &v.summary["output_throughput"];
        assert!((s.mape_pct - 37.5).abs() < 1e-9 && (s.median_abs_error_pct - 37.5).abs() < 1e-9, "{s:?}");
        let t = text(&v);
        assert!(t.contains("\nmedian_ttft_ms              20.0           20.0      3\n"), "{t}");
        assert!(t.contains("c     median_ttft_ms               100.00       110.00     +10.0  \n"), "{t}");
        // The role column and the CSV rows: fitted, held out, or the raw roofline.
        for (no_profile, fitted, want) in [(false, true, "fitted"), (false, false, "held-out"), (true, false, "raw")] {
            let (gpu, engine) = ("h20".to_string(), "vllm".to_string());
            let source = "seed runs".to_string();
            v.cases = vec![CaseInfo {
                case: "c".into(),
                calibration: String::new(),
                fitted,
                no_profile,
                gpu,
                engine,
                source,
                refit: None,
                refit_on: None,
                rung: None,
            }];
            summarise(&mut v);
            let t = text(&v);
            assert!(
                t.contains(&format!("c     median_ttft_ms               100.00       110.00     +10.0  {want}\n")),
                "{t}"
            );
            let rows = csv_rows(&v);
            assert_eq!(rows.len(), 5);
            assert!(rows.iter().all(|r| r.profile == want));
            assert_eq!((rows[1].measured, rows[1].predicted, rows[1].error_pct), (100.0, 70.0, -30.0));
            // Only held-out cases enter the held-out summary and gate.
            assert_eq!(v.held_out.is_empty(), want != "held-out", "{want}");
            assert_eq!(held_out_median(&v, &["median_ttft_ms"]).is_some(), want == "held-out", "{want}");
            // One GPU and one engine: their summaries are the whole one.
            assert_eq!(v.by_gpu["h20"], v.summary);
            assert_eq!(v.by_engine["vllm"], v.summary);
            assert!(t.contains("\nh20          median_ttft_ms              20.0           20.0      3\n"), "{t}");
        }
        // A refit's mark replaces the role; `loo`, `group-out` and `group-out (prior)` are
        // gated, the reason why no refit was possible is not; the honest summary is titled by
        // the mode, and its published points (a source other than seed runs) are summarised
        // again; under leave-group-out, per rung.
        use super::super::holdout::{GROUP_OUT_KERNELS, GROUP_OUT_PRIOR, NO_TRAINING_LEFT};
        for (mark, gated, rung) in [
            ("loo", true, None),
            ("group-out", true, Some("family")),
            (GROUP_OUT_PRIOR, true, Some("prior")),
            (GROUP_OUT_KERNELS, true, Some("kernels")),
            (NO_TRAINING_LEFT, false, None),
        ] {
            for source in ["seed runs", "lmsys.org"] {
                v.cases[0].refit = Some(mark.to_string());
                v.cases[0].rung = rung.map(String::from);
                v.cases[0].source = source.into();
                v.mode = "leave-group-out source".into();
                summarise(&mut v);
                assert!(csv_rows(&v).iter().all(|r| r.profile == mark));
                assert_eq!(held_out_median(&v, &["median_ttft_ms"]), gated.then_some(20.0), "{mark}");
                let published = gated && source != "seed runs";
                assert_eq!(v.held_out_published.get("median_ttft_ms"), published.then(|| &v.summary["median_ttft_ms"]));
                assert_eq!(v.by_rung.keys().collect::<Vec<_>>(), rung.iter().collect::<Vec<_>>(), "{mark}");
                let t = text(&v);
                assert_eq!(t.contains("  (leave-group-out source)\n"), gated, "{t}");
                assert_eq!(t.contains("(leave-group-out source: no case could be predicted"), !gated, "{t}");
                assert_eq!(t.contains("  (leave-group-out source, published points only)\n"), published, "{t}");
                if let Some(g) = rung {
                    let line = format!("\n{g:<12} median_ttft_ms              20.0           20.0      3\n");
                    assert!(t.contains("(per rung, leave-group-out source, gated rows)\n") && t.contains(&line), "{t}");
                }
            }
        }
    }

    /// Kernel step rows print in their own table after the summaries, the shape after the case,
    /// and their CSV case column carries the shape too.
    #[test]
    fn step_rows_have_their_own_table() {
        let mut step = row("decode_step_ms", 10.0, 9.0);
        step.case = "k".into();
        step.shape = Some("B=8 L=512".into());
        let mut v = Validation { rows: vec![row("median_ttft_ms", 100.0, 110.0), step], ..Validation::default() };
        summarise(&mut v);
        let t = text(&v);
        let (serving, steps) =
            t.split_once("\nKernel rows (device time of one step or GEMM, no host overhead):\n").unwrap();
        assert!(
            serving.starts_with("case  metric")
                && serving.contains("\ndecode_step_ms              10.0           10.0      1\n"),
            "{t}"
        );
        assert!(steps.contains("\nk B=8 L=512  decode_step_ms                10.00         9.00     -10.0  \n"), "{t}");
        assert_eq!(csv_rows(&v)[1].case, "k B=8 L=512");
    }
}
