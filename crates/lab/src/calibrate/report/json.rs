//! Reading the clients' saved results: sglang `bench_serving`'s result JSONL (one object per
//! run, appended to `--output-file`; keys as in its `benchmark()` result dict) and vLLM `vllm bench
//! serve --save-result` JSON (one object, or one per line with `--append-result`; keys as in
//! `vllm/benchmarks/serve.py`: `total_token_throughput`, `*_e2el_ms`, `p99.9_itl_ms`,
//! `max_output_tokens_per_s`, …). Every figure is stored under sglang's key, as the text reports
//! are; run arguments and per-request arrays are recognised and skipped; any other key is kept as
//! an unknown line. A record without a single recognisable metric is an error naming the file.

use super::{BenchReport, Layout};
use cachesim_core::error::{Error, Location, RecordError, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Keys that are run arguments, descriptions or per-request arrays, not metrics.
const NOT_METRICS: &[&str] = &[
    "date",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "burstiness",
    "mode",
    "dataset_name",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "start_times",
    "generated_texts",
    "errors",
    "accept_length",
    "rps_change_events",
    "ttft_description",
    "tpot_description",
    "server_info",
    "tokenizer",
    "model",
    "served_model_name",
];

/// sglang's key of a result key of either client, `None` when it is not a metric.
fn metric_key(key: &str) -> Option<String> {
    let renamed = match key {
        // vLLM names.
        "total_token_throughput" => "total_throughput",
        "max_output_tokens_per_s" => "peak_output_throughput",
        "max_concurrent_requests" => "peak_concurrent_requests",
        k => k,
    };
    // vLLM's end-to-end latency is `e2el`; its percentiles keep the dot (`p99.9_itl_ms`).
    let renamed = renamed.replace("_e2el_ms", "_e2e_latency_ms");
    let renamed = match renamed.split_once('_') {
        Some((stat, rest)) if stat.starts_with('p') && stat.contains('.') => {
            format!("{}_{rest}", stat.replace('.', "_"))
        }
        _ => renamed,
    };
    let known_scalar = matches!(
        renamed.as_str(),
        "completed"
            | "failed"
            | "duration"
            | "total_input_tokens"
            | "total_input_text_tokens"
            | "total_input_vision_tokens"
            | "total_output_tokens"
            | "total_output_tokens_retokenized"
            | "request_throughput"
            | "request_goodput"
            | "input_throughput"
            | "output_throughput"
            | "total_throughput"
            | "peak_output_throughput"
            | "peak_concurrent_requests"
            | "concurrency"
    );
    let latency = renamed.strip_suffix("_ms").is_some_and(|s| {
        ["ttft", "tpot", "itl", "e2e_latency"].iter().any(|m| {
            s.strip_suffix(m).and_then(|s| s.strip_suffix('_')).is_some_and(|stat| {
                matches!(stat, "mean" | "median" | "std" | "max" | "min")
                    || (stat.len() > 1 && stat.starts_with('p') && stat[1..].replace('_', ".").parse::<f64>().is_ok())
            })
        })
    });
    (known_scalar || latency).then_some(renamed)
}

/// The records of a result file: one pretty-printed object, or one object per line.
fn records(path: &Path, text: &str) -> Result<Vec<(u64, serde_json::Map<String, serde_json::Value>)>> {
    let bad = |line: u64, message: String| Error::Record {
        path: path.to_path_buf(),
        error: RecordError { location: Location::Line(line), field: String::new(), message },
    };
    if let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(text) {
        return Ok(vec![(1, o)]);
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(serde_json::Value::Object(o)) => out.push((n, o)),
            Ok(_) => return Err(bad(n, "expected a JSON object (one benchmark result per line)".into())),
            Err(e) => return Err(bad(n, format!("not JSON: {e}"))),
        }
    }
    Ok(out)
}

/// Parses a result file; `record` picks one of several (1-based), else the file must hold one.
pub fn parse(path: &Path, text: &str, record: Option<usize>) -> Result<BenchReport> {
    let recs = records(path, text)?;
    let whole = |message: String| Error::Report { path: path.to_path_buf(), message };
    let (line, obj) = match (record, recs.len()) {
        (_, 0) => return Err(whole("no benchmark result in the file".into())),
        (None, 1) => recs.into_iter().next().expect("one record"),
        (None, n) => return Err(whole(format!("{n} benchmark results in the file: pick one (record 1..={n})"))),
        (Some(k), n) if k == 0 || k > n => return Err(whole(format!("record {k} asked for, the file holds {n}"))),
        (Some(k), _) => recs.into_iter().nth(k - 1).expect("checked"),
    };
    let bad = |field: &str, message: String| Error::Record {
        path: path.to_path_buf(),
        error: RecordError { location: Location::Line(line), field: field.to_string(), message },
    };
    let vllm = obj.contains_key("total_token_throughput")
        || obj.contains_key("date")
        || obj.keys().any(|k| k.ends_with("_e2el_ms"));
    let mut r = BenchReport {
        path: path.to_path_buf(),
        layout: if vllm { Layout::VllmJson } else { Layout::SglangJsonl },
        backend: obj.get("backend").and_then(|b| b.as_str()).map(String::from),
        request_rate: None,
        max_concurrency: None,
        metrics: BTreeMap::new(),
        unknown_lines: Vec::new(),
    };
    for (k, v) in &obj {
        match k.as_str() {
            "backend" => continue,
            "request_rate" => {
                r.request_rate = match v {
                    serde_json::Value::Number(x) => x.as_f64().filter(|x| x.is_finite()),
                    serde_json::Value::String(s) if s == "inf" || s == "trace" => None,
                    serde_json::Value::Null => None,
                    _ => return Err(bad(k, format!("expected a rate, `inf` or `trace`, found {v}"))),
                };
                continue;
            }
            "max_concurrency" => {
                r.max_concurrency = match v {
                    serde_json::Value::Null => None,
                    _ => Some(v.as_u64().ok_or_else(|| bad(k, format!("expected a count or null, found {v}")))?),
                };
                continue;
            }
            _ => {}
        }
        if NOT_METRICS.contains(&k.as_str()) {
            continue;
        }
        let Some(key) = metric_key(k) else {
            r.unknown_lines.push((line, format!("{k}: {v}")));
            continue;
        };
        match v {
            // vLLM writes `request_goodput: null` without --goodput; sglang `accept_length: null`.
            serde_json::Value::Null => {}
            _ => {
                let x = v
                    .as_f64()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| bad(k, format!("expected a number, found {v}")))?;
                if r.metrics.insert(key.clone(), x).is_some() {
                    return Err(bad(k, format!("`{key}` given twice under different names")));
                }
            }
        }
    }
    if r.metrics.is_empty() {
        return Err(whole("the result holds no recognisable metric".into()));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<BenchReport> {
        parse(Path::new("r.json"), text, None)
    }

    #[test]
    fn vllm_keys_map_to_sglang_keys() {
        assert_eq!(metric_key("total_token_throughput").as_deref(), Some("total_throughput"));
        assert_eq!(metric_key("median_e2el_ms").as_deref(), Some("median_e2e_latency_ms"));
        assert_eq!(metric_key("p99.9_itl_ms").as_deref(), Some("p99_9_itl_ms"));
        assert_eq!(metric_key("p99_e2e_latency_ms").as_deref(), Some("p99_e2e_latency_ms"));
        assert_eq!(metric_key("max_output_tokens_per_s").as_deref(), Some("peak_output_throughput"));
        assert_eq!(metric_key("mean_foo_ms"), None);
        assert_eq!(metric_key("gpu_utilization"), None);
    }

    #[test]
    fn vllm_save_result() {
        let r = p(r#"{"date": "20250101-000000", "backend": "vllm", "num_prompts": 10, "request_rate": "inf",
            "burstiness": 1.0, "max_concurrency": 8, "duration": 2.5, "completed": 10, "failed": 0,
            "request_goodput": null, "total_token_throughput": 900.5, "median_e2el_ms": 120.0,
            "p99.9_itl_ms": 7.0, "input_lens": [1, 2], "gpu_kv_hits": 3}"#)
        .unwrap();
        assert_eq!(r.layout, Layout::VllmJson);
        assert_eq!((r.backend.as_deref(), r.request_rate, r.max_concurrency), (Some("vllm"), None, Some(8)));
        assert_eq!(r.get("total_throughput"), Some(900.5));
        assert_eq!(r.get("median_e2e_latency_ms"), Some(120.0));
        assert_eq!(r.get("p99_9_itl_ms"), Some(7.0));
        assert_eq!(r.metrics.len(), 6);
        assert_eq!(r.unknown_lines, vec![(1, "gpu_kv_hits: 3".into())]);
    }

    #[test]
    fn sglang_jsonl_records() {
        let a = r#"{"backend": "sglang", "request_rate": 4.0, "max_concurrency": null, "completed": 5, "median_ttft_ms": 30.5, "accept_length": null}"#;
        let b = a.replace("30.5", "31.5");
        let two = format!("{a}\n{b}\n");
        let e = p(&two).unwrap_err().to_string();
        assert_eq!(e, "r.json: 2 benchmark results in the file: pick one (record 1..=2)");
        let r = parse(Path::new("r.json"), &two, Some(2)).unwrap();
        assert_eq!(r.layout, Layout::SglangJsonl);
        assert_eq!((r.request_rate, r.max_concurrency), (Some(4.0), None));
        assert_eq!(r.get("median_ttft_ms"), Some(31.5));
        let e = parse(Path::new("r.json"), &two, Some(3)).unwrap_err().to_string();
        assert!(e.ends_with("record 3 asked for, the file holds 2"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = p("{\"completed\": 1}\n{\"completed\": \"x\"}").unwrap_err().to_string();
        assert_eq!(e, "r.json: 2 benchmark results in the file: pick one (record 1..=2)");
        let e = parse(Path::new("r.json"), "{\"completed\": 1}\n{\"completed\": \"x\"}", Some(2)).unwrap_err();
        assert_eq!(e.to_string(), "r.json: line 2: field `completed`: expected a number, found \"x\"");
        let e = p("{\"completed\": 1}\nnot json").unwrap_err().to_string();
        assert!(e.starts_with("r.json: line 2: not JSON"), "{e}");
        let e = p("{\"backend\": \"x\", \"date\": \"d\"}").unwrap_err().to_string();
        assert_eq!(e, "r.json: the result holds no recognisable metric");
    }
}
