//! The clients' printed reports: sglang `bench_serving` text (both layouts) and `vllm bench
//! serve` / `benchmark_serving.py` text, each row keyed by sglang's result-JSON key.

use super::{BenchReport, Layout};
use cachesim_core::error::{Error, Location, RecordError, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The sglang key of a latency row label such as `Median TTFT (ms)` or `P99 E2E Latency (ms)`.
fn latency_key(label: &str) -> Option<String> {
    let rest = label.strip_suffix(" (ms)")?;
    let (stat, metric) = rest.split_once(' ')?;
    let stat = match stat {
        "Mean" | "Median" | "Std" | "Max" | "Min" => stat.to_ascii_lowercase(),
        p if p.len() > 1 && p.starts_with('P') && p[1..].parse::<f64>().is_ok() => {
            format!("p{}", p[1..].replace('.', "_"))
        }
        _ => return None,
    };
    let metric = match metric {
        "TTFT" => "ttft",
        "TPOT" => "tpot",
        "ITL" => "itl",
        "E2E Latency" | "E2EL" => "e2e_latency",
        _ => return None,
    };
    Some(format!("{stat}_{metric}_ms"))
}

/// The sglang key of a scalar row label.
fn scalar_key(label: &str) -> Option<&'static str> {
    Some(match label {
        "Successful requests" => "completed",
        "Failed requests" => "failed",
        "Benchmark duration (s)" => "duration",
        "Total input tokens" => "total_input_tokens",
        "Total input text tokens" => "total_input_text_tokens",
        "Total generated tokens" => "total_output_tokens",
        "Total generated tokens (retokenized)" => "total_output_tokens_retokenized",
        "Request throughput (req/s)" => "request_throughput",
        "Input token throughput (tok/s)" => "input_throughput",
        "Output token throughput (tok/s)" => "output_throughput",
        "Peak output token throughput (tok/s)" => "peak_output_throughput",
        "Peak concurrent requests" => "peak_concurrent_requests",
        // vLLM's benchmark_serving.py printed "Token" capitalised before `vllm bench serve`.
        "Total token throughput (tok/s)" | "Total Token throughput (tok/s)" => "total_throughput",
        "Request goodput (req/s)" => "request_goodput",
        "Concurrency" => "concurrency",
        "Prefix cache hit rate (%)" => "prefix_cache_hit_rate_pct",
        _ => return None,
    })
}

/// Parses report text; `path` names the file in errors.
pub fn parse(path: &Path, text: &str) -> Result<BenchReport> {
    let mut r = BenchReport {
        path: path.to_path_buf(),
        layout: Layout::Vllm,
        backend: None,
        request_rate: None,
        max_concurrency: None,
        metrics: BTreeMap::new(),
        unknown_lines: Vec::new(),
    };
    let mut in_block = false;
    let mut seen_header = false;
    let mut seen_rows: BTreeMap<String, u64> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i as u64 + 1;
        let line = raw.trim();
        let bad = |field: &str, message: String| Error::Record {
            path: path.to_path_buf(),
            error: RecordError { location: Location::Line(line_no), field: field.to_string(), message },
        };
        if line.is_empty() {
            continue;
        }
        if line.starts_with('=') {
            if line.contains("Serving Benchmark Result") {
                if seen_header {
                    return Err(bad("", "a second \"Serving Benchmark Result\" block".into()));
                }
                seen_header = true;
                in_block = true;
            } else if line.chars().all(|c| c == '=') {
                in_block = false;
            } else {
                r.unknown_lines.push((line_no, raw.to_string()));
            }
            continue;
        }
        if line.starts_with('-') && line.ends_with('-') {
            continue; // a section title such as ---Time to First Token---
        }
        let Some((label, value)) = line.split_once(':') else {
            r.unknown_lines.push((line_no, raw.to_string()));
            continue;
        };
        if !in_block {
            r.unknown_lines.push((line_no, raw.to_string()));
            continue;
        }
        let (label, value) = (label.trim(), value.trim());
        let number = |field: &str| -> Result<f64> {
            value
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(field, format!("expected a number, found `{value}`")))
        };
        let key: String = match label {
            "Backend" => {
                r.backend = Some(value.to_string());
                r.layout = Layout::Sglang;
                "backend".into()
            }
            "Traffic request rate" | "Request rate configured (RPS)" => {
                r.request_rate = match value {
                    "inf" | "trace" => None,
                    _ => Some(number("request_rate")?),
                };
                "request_rate".into()
            }
            "Max reqeuest concurrency" | "Max request concurrency" | "Maximum request concurrency" => {
                if label == "Max reqeuest concurrency" {
                    r.layout = Layout::SglangOld;
                }
                r.max_concurrency = match value {
                    "not set" | "None" => None,
                    _ => Some(value.parse::<u64>().map_err(|_| {
                        bad("max_concurrency", format!("expected a count or `not set`, found `{value}`"))
                    })?),
                };
                "max_concurrency".into()
            }
            _ => {
                let Some(key) = scalar_key(label).map(String::from).or_else(|| latency_key(label)) else {
                    r.unknown_lines.push((line_no, raw.to_string()));
                    continue;
                };
                let x = number(&key)?;
                r.metrics.insert(key.clone(), x);
                key
            }
        };
        if let Some(first) = seen_rows.insert(key.clone(), line_no) {
            return Err(bad(&key, format!("printed twice (first on line {first})")));
        }
    }
    if !seen_header {
        return Err(Error::Report {
            path: path.to_path_buf(),
            message: "no \"Serving Benchmark Result\" block: not a bench_serving / vllm bench serve report".into(),
        });
    }
    if r.metrics.is_empty() {
        return Err(Error::Report {
            path: path.to_path_buf(),
            message: "the report holds no recognisable metric".into(),
        });
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<BenchReport> {
        parse(Path::new("r.txt"), text)
    }

    #[test]
    fn latency_labels_map_to_sglang_keys() {
        assert_eq!(latency_key("Median TTFT (ms)").as_deref(), Some("median_ttft_ms"));
        assert_eq!(latency_key("P99 E2E Latency (ms)").as_deref(), Some("p99_e2e_latency_ms"));
        assert_eq!(latency_key("P99.9 ITL (ms)").as_deref(), Some("p99_9_itl_ms"));
        assert_eq!(latency_key("Mean E2EL (ms)").as_deref(), Some("mean_e2e_latency_ms"));
        assert_eq!(latency_key("Mean FOO (ms)"), None);
    }

    #[test]
    fn old_sglang_layout_with_typo() {
        let r = p("== Serving Benchmark Result ==\nBackend:   vllm\nTraffic request rate:  inf\n\
                   Max reqeuest concurrency:  not set\nMean TTFT (ms):   12.5\n=====\n")
        .unwrap();
        assert_eq!(r.layout, Layout::SglangOld);
        assert_eq!(r.backend.as_deref(), Some("vllm"));
        assert_eq!(r.request_rate, None);
        assert_eq!(r.get("mean_ttft_ms"), Some(12.5));
    }

    #[test]
    fn older_vllm_labels() {
        let r = p("== Serving Benchmark Result ==\nSuccessful requests: 3\nMaximum request concurrency: 100\n\
                   Total Token throughput (tok/s): 6644.86\nP50 E2EL (ms): 7.5\n=====\n")
        .unwrap();
        assert_eq!(r.layout, Layout::Vllm);
        assert_eq!(r.max_concurrency, Some(100));
        assert_eq!(r.get("total_throughput"), Some(6644.86));
        assert_eq!(r.get("p50_e2e_latency_ms"), Some(7.5));
    }

    #[test]
    fn malformed_value_names_line_and_field() {
        let e = p("== Serving Benchmark Result ==\nSuccessful requests: 5\nMedian TPOT (ms):  abc\n").unwrap_err();
        assert_eq!(e.to_string(), "r.txt: line 3: field `median_tpot_ms`: expected a number, found `abc`");
        let e = p("== Serving Benchmark Result ==\nMax request concurrency: lots\n").unwrap_err();
        assert!(e.to_string().contains("line 2: field `max_concurrency`"), "{e}");
    }

    #[test]
    fn not_a_report_and_duplicates_are_errors() {
        let e = p("hello\nworld: 3\n").unwrap_err();
        assert!(e.to_string().starts_with("r.txt: no \"Serving Benchmark Result\""), "{e}");
        let e = p("== Serving Benchmark Result ==\nBackend: x\n").unwrap_err();
        assert!(e.to_string().contains("no recognisable metric"), "{e}");
        let e = p("== Serving Benchmark Result ==\nMean TTFT (ms): 1\nMean TTFT (ms): 2\n").unwrap_err();
        assert!(e.to_string().contains("line 3: field `mean_ttft_ms`: printed twice (first on line 2)"), "{e}");
    }

    #[test]
    fn unknown_lines_are_kept_not_fatal() {
        let r = p("log line before\n== Serving Benchmark Result ==\nSomething new (x): 4\nMean ITL (ms): 3\n=====\n")
            .unwrap();
        assert_eq!(r.unknown_lines, vec![(1, "log line before".into()), (3, "Something new (x): 4".into())]);
        assert_eq!(r.get("mean_itl_ms"), Some(3.0));
    }
}
