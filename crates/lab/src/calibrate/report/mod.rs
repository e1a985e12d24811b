//! Reading benchmark reports exactly as the clients printed them: sglang `bench_serving` text
//! (the older layout with its own typo "Max reqeuest concurrency" and no P90/P95 rows, and the
//! current layout that `cachesim run --report-style sglang` prints) and `vllm bench serve` /
//! `benchmark_serving.py` text; the clients' saved results (sglang's JSONL, vLLM's
//! `--save-result` JSON) are read by [`json`] and the printed text by [`text`]. Every metric is keyed by sglang's result-JSON key
//! (`output_throughput`, `median_ttft_ms`, …), the keys `cachesim run --json` uses, so a report
//! and a simulation compare key by key. Unknown lines are kept (line number and text), not
//! fatal; a malformed value is an error naming file, line and field; a file with no
//! "Serving Benchmark Result" block or no metric is an error naming the file.

mod json;
mod text;

pub use text::parse;

use cachesim_core::error::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which client printed the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// sglang `bench_serving` before the typo fix: "Max reqeuest concurrency", no P90/P95 rows.
    SglangOld,
    /// sglang `bench_serving` as printed today ("Max request concurrency", P90 E2E, P95 ITL …).
    Sglang,
    /// vLLM `benchmark_serving.py` / `vllm bench serve` (no Backend row).
    Vllm,
    /// sglang `bench_serving --output-file` result JSONL (one object per run).
    SglangJsonl,
    /// vLLM `vllm bench serve --save-result` JSON.
    VllmJson,
}

/// One report as read: the load it states and every metric it prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    pub path: PathBuf,
    pub layout: Layout,
    /// sglang's "Backend:" row.
    pub backend: Option<String>,
    /// The request rate, `None` when the report says `inf` or does not say.
    pub request_rate: Option<f64>,
    /// "Max request concurrency", `None` when "not set" or absent.
    pub max_concurrency: Option<u64>,
    /// Every numeric metric, keyed by sglang's result-JSON key.
    pub metrics: BTreeMap<String, f64>,
    /// Lines not recognised (1-based line number, text), ignored.
    pub unknown_lines: Vec<(u64, String)>,
}

impl BenchReport {
    /// A metric by its sglang key.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.get(key).copied()
    }
}

/// Reads and parses a report file: printed text, or a saved result (JSON / JSONL, which must
/// then hold one result).
pub fn read(path: &Path) -> Result<BenchReport> {
    read_record(path, None)
}

/// Reads a report file; `record` (1-based) picks one result of a JSONL file holding several.
pub fn read_record(path: &Path, record: Option<usize>) -> Result<BenchReport> {
    let text = std::fs::read_to_string(path).map_err(|error| Error::Io { path: path.to_path_buf(), error })?;
    // A UTF-8 byte-order mark (an editor's on Windows) is not part of the report.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let r = parse_any(path, text, record)?;
    check_values(&r)?;
    Ok(r)
}

fn parse_any(path: &Path, text: &str, record: Option<usize>) -> Result<BenchReport> {
    if text.trim_start().starts_with('{') {
        return json::parse(path, text, record);
    }
    if text.trim_start().starts_with('[') {
        return Err(Error::Report {
            path: path.to_path_buf(),
            message: "a JSON array: a saved result is one JSON object (sglang bench_serving --output-file, vllm bench \
                      serve --save-result), or one object per line (JSONL; --record N picks one); write the array's \
                      elements one per line (e.g. `jq -c '.[]'`)"
                .into(),
        });
    }
    if let Some(k) = record {
        return Err(Error::Report {
            path: path.to_path_buf(),
            message: format!("record {k} asked for, but a printed report holds one result"),
        });
    }
    parse(path, text)
}

/// A report's figures as a benchmark can measure them: at least one successful request, no
/// negative rate, throughput, count or latency.
fn check_values(r: &BenchReport) -> Result<()> {
    let bad = |message: String| Err(Error::Report { path: r.path.clone(), message });
    if let Some(rate) = r.request_rate.filter(|x| !(x.is_finite() && *x > 0.0)) {
        return bad(format!("field `request_rate`: {rate} is not a request rate (a positive number, or inf)"));
    }
    if r.get("completed") == Some(0.0) {
        return bad("field `completed`: 0 successful requests: the run measured nothing to compare with".into());
    }
    if let Some((k, v)) = r.metrics.iter().find(|(_, v)| **v < 0.0 || v.is_infinite()) {
        return bad(format!("field `{k}`: {v} cannot be measured (a count, rate, throughput or latency is 0 or more)"));
    }
    Ok(())
}

/// The report as read, for `cachesim calibrate --report`; `verbose` lists the lines (or JSON
/// keys) not recognised, else only their count.
pub fn text(r: &BenchReport, verbose: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let layout = match r.layout {
        Layout::SglangOld => "sglang bench_serving (older layout)",
        Layout::Sglang => "sglang bench_serving",
        Layout::Vllm => "vllm bench serve",
        Layout::SglangJsonl => "sglang bench_serving result JSONL",
        Layout::VllmJson => "vllm bench serve --save-result JSON",
    };
    let _ = writeln!(s, "Report:         {} ({layout})", r.path.display());
    if let Some(b) = &r.backend {
        let _ = writeln!(s, "Backend:        {b}");
    }
    let rate = r.request_rate.map_or_else(|| "inf (or not stated)".to_string(), |x| format!("{x} req/s"));
    let _ = writeln!(s, "Request rate:   {rate}");
    let conc = r.max_concurrency.map_or_else(|| "not set".to_string(), |c| c.to_string());
    let _ = writeln!(s, "Concurrency:    {conc} (client limit)");
    for (k, v) in &r.metrics {
        let _ = writeln!(s, "  {k:<34} {v}");
    }
    if verbose {
        for (n, l) in &r.unknown_lines {
            let _ = writeln!(s, "ignored line {n}: {l}");
        }
    } else if !r.unknown_lines.is_empty() {
        let _ = writeln!(s, "{} line(s) not recognised and ignored (-v lists them)", r.unknown_lines.len());
    }
    s
}
