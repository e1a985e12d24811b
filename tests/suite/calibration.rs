//! Calibration: the report parsers over every real report (the shared originals and the
//! bundled copies in `calibration/reports/`), cachesim's own reports read back to the numbers of
//! its `--json`, and `cachesim validate` over the bundled cases.

use crate::common;

use cachesim::calibrate::report::{self, Layout};
use common::{cachesim, calibration_dir, fails, ok};
use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn report_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// Exact values of two reports, one per layout, as printed.
fn check_known(dir: &Path) {
    let r = report::read(&dir.join("vllm-ttft-64seq-6144btk.txt")).unwrap();
    assert_eq!(r.layout, Layout::Vllm);
    assert_eq!((r.backend.as_deref(), r.request_rate, r.max_concurrency), (None, Some(20.0), None));
    let want = [
        ("completed", 50.0),
        ("failed", 0.0),
        ("duration", 15.41),
        ("total_input_tokens", 10000.0),
        ("total_output_tokens", 5000.0),
        ("request_throughput", 3.24),
        ("output_throughput", 324.45),
        ("peak_output_throughput", 450.0),
        ("peak_concurrent_requests", 50.0),
        ("total_throughput", 973.34),
        ("mean_ttft_ms", 381.40),
        ("median_ttft_ms", 376.31),
        ("p99_ttft_ms", 581.25),
        ("mean_tpot_ms", 127.90),
        ("median_tpot_ms", 128.27),
        ("p99_tpot_ms", 134.23),
        ("mean_itl_ms", 127.90),
        ("median_itl_ms", 120.87),
        ("p99_itl_ms", 296.96),
    ];
    let got: Vec<(&str, f64)> = r.metrics.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let mut want_sorted = want.to_vec();
    want_sorted.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(got, want_sorted);
    assert!(r.unknown_lines.is_empty(), "{:?}", r.unknown_lines);

    // The old sglang layout; its P99 TTFT fills the value column with no space before the end.
    let r = report::read(&dir.join("v100-llama11b-2dp-router.txt")).unwrap();
    assert_eq!(r.layout, Layout::SglangOld);
    assert_eq!((r.backend.as_deref(), r.request_rate, r.max_concurrency), (Some("vllm"), None, None));
    assert_eq!(r.get("completed"), Some(1000.0));
    assert_eq!(r.get("duration"), Some(1247.16));
    assert_eq!(r.get("total_input_tokens"), Some(289255.0));
    assert_eq!(r.get("total_output_tokens"), Some(184429.0));
    assert_eq!(r.get("total_output_tokens_retokenized"), Some(184388.0));
    assert_eq!(r.get("concurrency"), Some(470.04));
    assert_eq!(r.get("median_e2e_latency_ms"), Some(596155.97));
    assert_eq!(r.get("p99_ttft_ms"), Some(1067230.41));
    assert_eq!(r.get("median_itl_ms"), Some(273.54));
    assert_eq!(r.metrics.len(), 21);
    assert!(r.unknown_lines.is_empty(), "{:?}", r.unknown_lines);
}

/// Every report parses, with the rows its layout prints and nothing left unread.
fn check_all(dir: &Path) {
    let files = report_files(dir);
    assert_eq!(files.len(), 5, "{files:?}");
    for f in files {
        let r = report::read(&f).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.unknown_lines.is_empty(), "{}: {:?}", f.display(), r.unknown_lines);
        let n = if r.layout == Layout::SglangOld { 21 } else { 19 };
        assert_eq!(r.metrics.len(), n, "{}", f.display());
    }
}

#[test]
fn bundled_reports_parse() {
    let dir = crate_dir().join("calibration/reports");
    check_all(&dir);
    check_known(&dir);
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn shared_reports_parse_and_equal_the_bundled_copies() {
    let Some(dir) = calibration_dir() else { return };
    let dir = dir.join("reports");
    check_all(&dir);
    check_known(&dir);
    for f in report_files(&dir) {
        let copy = crate_dir().join("calibration/reports").join(f.file_name().unwrap());
        assert_eq!(std::fs::read(&f).unwrap(), std::fs::read(&copy).unwrap(), "{} differs", copy.display());
    }
}

/// cachesim's own report, in both layouts, reads back to the numbers of its `--json`.
#[test]
fn own_reports_round_trip() {
    let args = ["run", "--request-rate", "4", "--max-num-seqs", "8"];
    for (style, layout, rows) in [("sglang", Layout::Sglang, 29), ("vllm", Layout::Vllm, 20)] {
        // The style also picks the client's arrival process: the same style for both runs.
        let text = ok(&[&args[..], &["--report-style", style]].concat());
        let json: serde_json::Value =
            serde_json::from_str(&ok(&[&args[..], &["--report-style", style, "--json"]].concat())).unwrap();
        let r = report::parse(Path::new("own.txt"), &text).unwrap();
        assert_eq!(r.layout, layout);
        assert_eq!(r.request_rate, Some(4.0));
        assert_eq!(r.metrics.len(), rows, "{style}: {:?}", r.metrics.keys());
        for (k, &v) in &r.metrics {
            let key = match k.as_str() {
                "total_input_text_tokens" => "total_input_tokens",
                "total_output_tokens_retokenized" => "total_output_tokens",
                "prefix_cache_hit_rate_pct" => "hit_ratio",
                k => k,
            };
            let mut want = json[key].as_f64().unwrap_or_else(|| panic!("{style}: no `{key}` in --json"));
            if key == "hit_ratio" {
                want *= 100.0;
            }
            // Printed with two decimals.
            assert!((v - want).abs() <= 0.005 + 1e-9 * want.abs(), "{style}: {k} printed {v}, --json {want}");
        }
    }
}

#[test]
fn malformed_report_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.txt");
    let text = std::fs::read_to_string(crate_dir().join("calibration/reports/vllm-ttft-64seq-6144btk.txt"))
        .unwrap()
        .replace("376.31", "37x.31");
    std::fs::write(&p, text).unwrap();
    let err = fails(&["calibrate", "--report", p.to_str().unwrap()]);
    assert!(err.contains("bad.txt: line 15: field `median_ttft_ms`: expected a number, found `37x.31`"), "{err}");
}

#[test]
fn calibrate_prints_what_was_read() {
    let f = crate_dir().join("calibration/reports/h20-dsr1-vllm-tp8pp2.txt");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["calibrate", "--report", f.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(v["layout"], "sglang-old");
    assert_eq!(v["metrics"]["median_tpot_ms"], 341.77);
    let text = ok(&["calibrate", "--report", f.to_str().unwrap()]);
    assert!(text.contains("(sglang bench_serving (older layout))"), "{text}");
    assert!(text.contains("  median_tpot_ms                     341.77\n"), "{text}");
}

/// `validate` over the bundled cases without the data folder: the seed case (generated workload)
/// runs, one row per metric its report prints, measured values exactly the parsed report's,
/// signed errors consistent; the published ShareGPT cases are listed as not run, every other
/// case with what it needs. The prediction error itself is not asserted here.
#[test]
fn validate_bundled_cases() {
    let cases = crate_dir().join("calibration/cases");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["validate", "--cases-dir", cases.to_str().unwrap(), "--json"])
        .env_remove("CACHESIM_DATA")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let measured = report::read(&crate_dir().join("calibration/reports/vllm-ttft-64seq-6144btk.txt")).unwrap();
    // The 60 TensorRT-LLM points rebuild their workloads (fixed lengths) and run without the data
    // folder: one output_throughput row each, priced by the h100-sxm-trtllm and h200-trtllm profiles.
    let trt: Vec<&serde_json::Value> = v["rows"].as_array().unwrap().iter().filter(|r| trt_case(&r["case"])).collect();
    assert_eq!(trt.len(), 60);
    assert!(trt.iter().all(|r| r["metric"] == "output_throughput"));
    for c in v["cases"].as_array().unwrap().iter().filter(|c| trt_case(&c["case"])) {
        let role = trt_role(c["case"].as_str().unwrap());
        assert_eq!((c["fitted"].as_bool(), c["no_profile"].as_bool()), (Some(role == "fitted"), Some(false)), "{c}");
    }
    // The LMSYS large-scale EP phase points (P039–P044): one row each, one step priced by the
    // raw roofline, no data folder needed.
    let ep: Vec<&serde_json::Value> = v["rows"].as_array().unwrap().iter().filter(|r| ep_case(&r["case"])).collect();
    let ep_metrics: Vec<&str> = ep.iter().map(|r| r["metric"].as_str().unwrap()).collect();
    let (i, o) = ("input_throughput", "output_throughput");
    assert_eq!(ep_metrics, [i, i, i, o, o, i]);
    for c in v["cases"].as_array().unwrap().iter().filter(|c| ep_case(&c["case"])) {
        assert_eq!((c["fitted"].as_bool(), c["no_profile"].as_bool()), (Some(false), Some(true)), "{c}");
    }
    let all: Vec<serde_json::Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !trt_case(&r["case"]) && !ep_case(&r["case"]))
        .cloned()
        .collect();
    // The seed sweep's two held-out rows (three figures each), then the fitted row's report (its
    // 17 compared figures, the peak output throughput among them).
    assert_eq!(all.len(), 6 + 17);
    assert!(all[..6].iter().all(|r| r["case"].as_str().unwrap().starts_with("seed-sweep-plan")));
    let rows = &all[6..];
    let metrics: Vec<&str> = rows.iter().map(|r| r["metric"].as_str().unwrap()).collect();
    let want: Vec<&str> =
        cachesim::calibrate::case::METRICS.iter().copied().filter(|m| measured.get(m).is_some()).collect();
    assert_eq!(metrics, want);
    for r in rows {
        assert_eq!(r["case"], "vllm-ttft-64seq-6144btk");
        let m = r["metric"].as_str().unwrap();
        let (meas, pred) = (r["measured"].as_f64().unwrap(), r["predicted"].as_f64().unwrap());
        assert_eq!(Some(meas), measured.get(m), "{m}");
        let e = (pred - meas) / meas * 100.0;
        assert!((r["error_pct"].as_f64().unwrap() - e).abs() < 1e-9, "{m}");
    }
    // The rebuilt workload matches the report's token totals exactly.
    for m in ["completed", "total_input_tokens", "total_output_tokens"] {
        let r = rows.iter().find(|r| r["metric"] == m).unwrap();
        assert_eq!(r["error_pct"], 0.0, "{m}");
    }
    let summary = v["summary"].as_object().unwrap();
    assert_eq!(summary.len(), 18);
    assert_eq!(summary["median_ttft_ms"]["cases"], 3);
    let names = |key: &str| -> Vec<String> {
        v[key].as_array().unwrap().iter().map(|s| s["case"].as_str().unwrap().to_string()).collect()
    };
    // The published ShareGPT points and the four seed deployments need the data folder.
    let not_run = names("not_run");
    let mut want: Vec<String> = (1..=12).map(|i| format!("P{i:03}")).collect();
    want.extend(SEED_DEPLOYMENTS.iter().map(|s| s.to_string()));
    // The kernel step cases read their rows from the data folder too.
    want.extend(KERNEL_CASES.iter().map(|s| s.to_string()));
    assert_eq!(not_run, want);
    assert!(v["not_run"][0]["missing"].as_str().unwrap().contains("needs the data folder"), "{}", v["not_run"][0]);
    // Published points (DeepSeek production, LLaMA-7B v1) and the 1P1D seed run remain not
    // expressible.
    let skipped = names("not_expressible");
    assert_eq!(skipped.len(), 5);
    assert!(skipped.iter().all(|s| s.starts_with('P') || s == "v100-llama11b-1p1d"), "{skipped:?}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["validate", "--cases-dir", cases.to_str().unwrap()])
        .env_remove("CACHESIM_DATA")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("case ") && lines[0].ends_with("error %  profile"), "{text}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("vllm-ttft-64seq-6144btk ")).count(), 17);
    assert!(text.contains("\nNot expressible yet:\n  P045: "), "{text}");
    assert!(text.contains("\nNot run here (data absent):\n  P001: "), "{text}");
}

/// An LMSYS large-scale EP phase point (P039–P044).
fn ep_case(case: &serde_json::Value) -> bool {
    let c = case.as_str().unwrap_or_default();
    c.strip_prefix('P').and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| (39..=44).contains(&n))
}

/// A TensorRT-LLM perf-overview point (P049–P108).
fn trt_case(case: &serde_json::Value) -> bool {
    let c = case.as_str().unwrap_or_default();
    c.strip_prefix('P').and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| (49..=108).contains(&n))
}

/// A TensorRT-LLM point's role: each table's odd rows (P049, P051, … ) are fitted, the even ones
/// held out.
fn trt_role(case: &str) -> &'static str {
    let n: u32 = case[1..].parse().unwrap();
    if (n - 49).is_multiple_of(2) {
        "fitted"
    } else {
        "held-out"
    }
}

/// The published-point cases agree with `serving_benchmarks.csv`: one case per `point_id`, its
/// source row verbatim, every figure the row gives (and no other) under its sglang key, and the
/// load of the expressible ones (prompts, rate) as the row states it.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn published_cases_agree_with_the_csv() {
    let Some(data) = common::data_dir() else { return };
    let csv_path = data.join("published/serving_benchmarks.csv");
    let mut rd = csv::Reader::from_path(&csv_path).unwrap();
    let headers = rd.headers().unwrap().clone();
    let columns = [
        ("req_throughput", "request_throughput"),
        ("input_tok_throughput", "input_throughput"),
        ("output_tok_throughput", "output_throughput"),
        ("total_tok_throughput", "total_throughput"),
        ("ttft_mean_ms", "mean_ttft_ms"),
        ("ttft_median_ms", "median_ttft_ms"),
        ("ttft_p99_ms", "p99_ttft_ms"),
        ("tpot_mean_ms", "mean_tpot_ms"),
        ("tpot_median_ms", "median_tpot_ms"),
        ("tpot_p99_ms", "p99_tpot_ms"),
        ("itl_mean_ms", "mean_itl_ms"),
        ("itl_median_ms", "median_itl_ms"),
        ("itl_p99_ms", "p99_itl_ms"),
        ("e2e_mean_ms", "mean_e2e_latency_ms"),
        ("e2e_median_ms", "median_e2e_latency_ms"),
        ("e2e_p99_ms", "p99_e2e_latency_ms"),
    ];
    let (mut ids, mut pre_overlap) = (Vec::new(), 0);
    for rec in rd.records() {
        let rec = rec.unwrap();
        let col = |name: &str| rec.get(headers.iter().position(|h| h == name).unwrap()).unwrap().to_string();
        let id = col("point_id");
        let file = crate_dir().join(format!("calibration/cases/{id}.toml"));
        let c = cachesim::calibrate::case::load(&file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.case.case, id);
        let p = c.case.published.as_ref().unwrap_or_else(|| panic!("{id}: no [published]"));
        let want = cachesim::calibrate::case::Published {
            point_id: id.clone(),
            engine: col("engine"),
            engine_version: col("engine_version"),
            gpu: col("gpu"),
            num_gpus: col("num_gpus"),
            model: col("model"),
            weight_dtype: col("weight_dtype"),
            measurement_kind: col("measurement_kind"),
            throughput_scope: col("throughput_scope"),
            source_url: col("source_url"),
            source_locator: col("source_locator"),
            notes: col("notes"),
        };
        assert_eq!(p, &want, "{id}");
        let mut figures = std::collections::BTreeMap::new();
        for (column, key) in columns {
            let v = col(column);
            if !v.is_empty() {
                figures.insert(key.to_string(), v.parse::<f64>().unwrap_or_else(|_| panic!("{id} {column}: {v}")));
            }
        }
        assert!(!figures.is_empty(), "{id}: the row gives no figure");
        assert_eq!(c.case.measured, figures, "{id}");
        // SGLang before 0.4 had no overlap scheduler (opt-in from 0.3.5, default from PR #2067):
        // its runs are simulated with the overlap off, whatever the stand-in bundle's default.
        let version: Vec<u32> = p.engine_version.split('.').map_while(|v| v.parse().ok()).collect();
        if p.engine == "sglang" && version.len() >= 2 && (version[0], version[1]) < (0, 4) {
            let flags = &c.case.deployment.flags;
            assert!(flags.iter().any(|f| f == "--disable-overlap-schedule"), "{id}: {flags:?}");
            pre_overlap += 1;
        }
        if c.case.expressible && c.case.phase.is_none() {
            let w = &c.case.workload;
            assert_eq!(w.num_prompts.map(|n| n.to_string()), Some(col("num_prompts")), "{id}");
            assert_eq!(w.request_rate.as_deref(), Some(col("request_rate").as_str()), "{id}");
        }
        ids.push(id);
    }
    assert_eq!((ids.len(), pre_overlap), (82, 6));
    let mut files: Vec<String> = std::fs::read_dir(crate_dir().join("calibration/cases"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with('P') && f.ends_with(".toml"))
        .map(|f| f.trim_end_matches(".toml").to_string())
        .collect();
    files.sort();
    ids.sort();
    assert_eq!(files, ids, "one case file per point, no other");
}

#[test]
fn validate_refuses_an_empty_folder() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(&["validate", "--cases-dir", dir.path().to_str().unwrap()]);
    assert!(err.contains("no case files (*.toml)"), "{err}");
}

/// The clients' saved results: a vLLM `--save-result` JSON and an sglang result JSONL read to the
/// same keys as the printed reports; `-v` lists what was not recognised; no metric is an error
/// naming the file.
#[test]
fn saved_results_read_through_calibrate() {
    let dir = tempfile::tempdir().unwrap();
    let vllm = dir.path().join("vllm.json");
    std::fs::write(
        &vllm,
        r#"{"date": "20251130-120000", "backend": "vllm", "model_id": "m", "tokenizer_id": "m", "num_prompts": 50,
  "request_rate": 20.0, "burstiness": 1.0, "max_concurrency": null, "duration": 15.41, "completed": 50,
  "failed": 0, "total_input_tokens": 10000, "total_output_tokens": 5000, "request_throughput": 3.24,
  "request_goodput": null, "output_throughput": 324.45, "total_token_throughput": 973.34,
  "max_output_tokens_per_s": 450.0, "max_concurrent_requests": 50, "mean_ttft_ms": 381.4,
  "median_ttft_ms": 376.31, "std_ttft_ms": 50.0, "p99_ttft_ms": 581.25, "mean_e2el_ms": 13000.0,
  "median_e2el_ms": 12900.0, "p99_e2el_ms": 13500.0, "kv_hits": 1}"#,
    )
    .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["calibrate", "--report", vllm.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(v["layout"], "vllm-json");
    assert_eq!(v["request_rate"], 20.0);
    assert_eq!(v["metrics"]["total_throughput"], 973.34);
    assert_eq!(v["metrics"]["median_e2e_latency_ms"], 12900.0);
    assert_eq!(v["metrics"]["peak_concurrent_requests"], 50.0);
    assert_eq!(v["metrics"].as_object().unwrap().len(), 17);
    let text = ok(&["calibrate", "--report", vllm.to_str().unwrap()]);
    assert!(text.contains("1 line(s) not recognised and ignored (-v lists them)"), "{text}");
    let text = ok(&["calibrate", "--report", vllm.to_str().unwrap(), "-v"]);
    assert!(text.contains("ignored line 1: kv_hits: 1\n"), "{text}");

    let sgl = dir.path().join("sglang.jsonl");
    let rec = |ttft: f64| {
        format!(
            "{{\"backend\": \"sglang\", \"dataset_name\": \"sharegpt\", \"request_rate\": 4.0, \"max_concurrency\": null, \
             \"sharegpt_output_len\": null, \"random_input_len\": 1024, \"random_output_len\": 1024, \
             \"random_range_ratio\": 0.0, \"duration\": 300.1, \"completed\": 1200, \"total_input_tokens\": 280000, \
             \"total_output_tokens\": 230000, \"total_output_tokens_retokenized\": 229000, \"request_throughput\": 4.0, \
             \"input_throughput\": 933.0, \"output_throughput\": 766.4, \"mean_e2e_latency_ms\": 2000.0, \
             \"median_e2e_latency_ms\": 1564.17, \"std_e2e_latency_ms\": 10.0, \"p99_e2e_latency_ms\": 9000.0, \
             \"mean_ttft_ms\": 40.0, \"median_ttft_ms\": {ttft}, \"std_ttft_ms\": 1.0, \"p99_ttft_ms\": 90.0, \
             \"mean_tpot_ms\": 13.0, \"median_tpot_ms\": 13.17, \"std_tpot_ms\": 1.0, \"p99_tpot_ms\": 20.0, \
             \"mean_itl_ms\": 12.0, \"median_itl_ms\": 11.93, \"std_itl_ms\": 1.0, \"p95_itl_ms\": 15.0, \
             \"p99_itl_ms\": 30.0, \"concurrency\": 8.0, \"accept_length\": null}}"
        )
    };
    std::fs::write(&sgl, format!("{}\n{}\n", rec(31.98), rec(35.68))).unwrap();
    let err = fails(&["calibrate", "--report", sgl.to_str().unwrap()]);
    assert!(err.contains("sglang.jsonl: 2 benchmark results in the file: pick one (record 1..=2)"), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["calibrate", "--report", sgl.to_str().unwrap(), "--record", "2", "--json"]))
            .unwrap();
    assert_eq!(v["layout"], "sglang-jsonl");
    assert_eq!(v["metrics"]["median_ttft_ms"], 35.68);
    assert_eq!(v["metrics"].as_object().unwrap().len(), 26);
    assert!(v["unknown_lines"].as_array().unwrap().is_empty());

    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, r#"{"backend": "vllm", "date": "x"}"#).unwrap();
    let err = fails(&["calibrate", "--report", empty.to_str().unwrap()]);
    assert!(err.contains("empty.json: the result holds no recognisable metric"), "{err}");
}

/// The seed runs that run a deployment file (routed DP, DeepSeek-R1 PP and MTP), in file order;
/// the 1P1D run (47 of 1,000 requests succeeded) is not expressible.
const SEED_DEPLOYMENTS: [&str; 3] = ["h20-dsr1-sglang-tp16-mtp", "h20-dsr1-vllm-tp8pp2", "v100-llama11b-2dp-router"];
/// Each seed deployment's built-in profile, fitted on that case alone.
const SEED_PROFILES: [&str; 3] = ["h20-sglang", "h20-vllm", "v100-vllm"];

const KERNEL_CASES: [&str; 5] = [
    "h200-attention",
    "h200-gemms",
    "h200-llama70b-tp4-rank-steps",
    "h200-llama70b-tp8-rank-steps",
    "h200-llama8b-steps",
];
const PUBLISHED_HELD_OUT: [&str; 4] = ["P003", "P004", "P007", "P008"];
const SEED_HELD_OUT: [&str; 2] = ["seed-sweep-plan4", "seed-sweep-plan1"];

/// `validate --json` over the bundled cases with the data folder.
fn validate_json(extra: &[&str]) -> serde_json::Value {
    let data = common::data_dir().expect("checked by the caller");
    let cases = crate_dir().join("calibration/cases");
    let args =
        [&["validate", "--cases-dir", cases.to_str().unwrap(), "--data", data.to_str().unwrap(), "--json"], extra]
            .concat();
    serde_json::from_str(&ok(&args)).unwrap()
}

/// Where the shared validate runs write their CSV and plot.
fn shared_output(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("calibration-{name}"))
}

/// `validate --json --csv` over every case with the data, through the command line's held-out
/// gate at the measured bound (`--max-held-out-error 6.5`, which it must pass): run once per test
/// binary, the tests that read the default validation share it (each full run costs seconds);
/// its CSV is at [`shared_output`]`("gated.csv")`.
fn validate_gated() -> &'static serde_json::Value {
    static V: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let csv = shared_output("gated.csv");
        validate_json(&["--max-held-out-error", "6.5", "--csv", csv.to_str().unwrap()])
    })
}

/// The text `validate` over every case with the data, gated at 5 % (which it must fail, after
/// printing its table) and drawing its plot at [`shared_output`]`("validate.svg")`: stdout and
/// stderr, run once per test binary.
fn validate_text_failing() -> &'static (String, String) {
    static T: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let data = common::data_dir().expect("checked by the caller");
        let cases = crate_dir().join("calibration/cases");
        let svg = shared_output("validate.svg");
        let out = cachesim(&[
            "validate",
            "--cases-dir",
            cases.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--max-held-out-error",
            "5",
            "--plot",
            svg.to_str().unwrap(),
        ]);
        assert!(!out.status.success(), "the 5 % gate must fail");
        (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    })
}

/// The median |error| over the fitted metrics (output throughput, median TTFT, TPOT, E2E) of
/// the rows of `held` cases, and the row count; every one of them must be run and held out.
fn held_out_median(v: &serde_json::Value, held: &[&str]) -> (f64, usize) {
    let cases = v["cases"].as_array().unwrap();
    for h in held {
        let c = cases.iter().find(|c| c["case"] == *h).unwrap_or_else(|| panic!("{h} not run"));
        assert_eq!(c["fitted"], false, "{h} must be held out");
    }
    let metrics = ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"];
    let mut e: Vec<f64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| held.contains(&r["case"].as_str().unwrap()) && metrics.contains(&r["metric"].as_str().unwrap()))
        .map(|r| r["error_pct"].as_f64().unwrap().abs())
        .collect();
    e.sort_by(f64::total_cmp);
    let n = e.len();
    let m = if n % 2 == 1 { e[n / 2] } else { (e[n / 2 - 1] + e[n / 2]) / 2.0 };
    (m, n)
}

/// CI's fidelity gate, measured with the committed profiles: the published held-out cases (the
/// 8 req/s points of profiles fitted at 4 req/s and offline) 7.17 % over 12 rows, bound 7.5 %;
/// with the seed sweep's two held-out rows 5.21 % over 16 rows, bound 5.5 %. (Before the
/// published points' unrebuildable ShareGPT samples were predicted by their median over nine
/// seeds, and their profiles fitted so: 9.29 % and 6.34 %; before the seed
/// sweep's profile became a step law (`--unknown-hardware`): 8.17 %; before vLLM
/// 0.6.0's async output processing: 9.9 % and 8.1 %; before SGLang 0.3.0 ran without the
/// overlap scheduler and vLLM 0.6.0 with multi-step scheduling, which added the vLLM points'
/// TTFT rows: 7.4 % over 10 and 4.5 % over 14; before the H100 SGLang profile held the H200
/// per-kernel floor: 11.1 % and 7.2 %.) `validate --max-held-out-error` gates every held-out
/// row, the 30 TensorRT-LLM points of rows 2, 4, 6, 8 and 10 of each perf-overview table
/// included (their profiles fitted on the other rows): 6.10 % over 46 rows, bound 6.5 % (8.20 %
/// before their profiles were refitted with the collective latency free, 9.51 % before the seeds,
/// 9.79 % before the step law).
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn held_out_error_stays_under_the_measured_bound() {
    if common::data_dir().is_none() {
        return;
    }
    let (v, raw) = (validate_gated().clone(), validate_json(&["--uncalibrated"]));
    let all: Vec<&str> = PUBLISHED_HELD_OUT.iter().chain(&SEED_HELD_OUT).copied().collect();
    let (published, n) = held_out_median(&v, &PUBLISHED_HELD_OUT);
    assert_eq!(n, 12);
    assert!(published < 7.5, "published held-out median |error| {published:.2} % (bound 7.5 %)");
    let (every, n) = held_out_median(&v, &all);
    assert_eq!(n, 16);
    assert!(every < 5.5, "held-out median |error| {every:.2} % (bound 5.5 %)");
    let fitted: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["fitted"] == true)
        .map(|c| c["case"].as_str().unwrap())
        .collect();
    // The a100/h100 profiles' cases, the seed sweep's row, the three seed deployments, the
    // H200 kernel steps and the fitted half of the TensorRT-LLM points.
    assert_eq!(fitted.len(), 13 + 30, "{fitted:?}");
    for (held, calibrated) in [(&PUBLISHED_HELD_OUT[..], published), (&all[..], every)] {
        let (r, _) = held_out_median(&raw, held);
        assert!(calibrated < r, "calibrated {calibrated:.2} % is no better than the raw roofline {r:.2} %");
    }
    // The command line's own gate says the same.
    let held: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["fitted"] == false && c["no_profile"] == false && c["engine"] != "kernels")
        .map(|c| c["case"].as_str().unwrap())
        .collect();
    let (gated, n) = held_out_median(&v, &held);
    assert_eq!(n, 16 + 30);
    // `v` came through the gate at 6.5 % (validate_gated), so it passed; its JSON carries the
    // gated figure, and the text run says it after its table.
    assert!(gated < 6.5, "held-out median |error| {gated:.2} % (bound 6.5 %)");
    let pooled = &v["pooled"];
    assert_eq!((pooled["median_abs_error_pct"].as_f64(), pooled["rows"].as_u64()), (Some(gated), Some(n as u64)));
    let over = "median_e2e_latency_ms, median_tpot_ms, median_ttft_ms, output_throughput";
    assert_eq!(
        pooled["metrics"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect::<Vec<_>>().join(", "),
        over
    );
    let (text, err) = validate_text_failing();
    assert!(
        text.ends_with(&format!(
            "\nheld-out median |error| over {over}, pooled: {gated:.2} % (the figure --max-held-out-error gates)\n"
        )),
        "{text}"
    );
    assert!(
        err.contains(&format!(
            "held-out median |error| {gated:.2} % (over median_e2e_latency_ms, median_tpot_ms, median_ttft_ms, \
             output_throughput, pooled) exceeds --max-held-out-error 5 %"
        )),
        "{err}"
    );
}

/// Leave-one-source-out over the published points (issue 15 §5: median |error| at most 15 % on
/// throughput and TPOT): each case a profile was fitted on is predicted without any case of its
/// source page. The SGLang Llama points of the 2024 sglang/vLLM page take the family rung: the
/// SGLang profile fitted on the silicon sample's Qwen3-32B H100 rows (another source; its host
/// overheads and per-kernel floor fitted, the device factors the H200 kernel steps') predicts
/// them as fitted; the TensorRT-LLM points of NVIDIA's perf overview likewise take the
/// TensorRT-LLM profile fitted on the sample's Qwen3-32B FP8 H100 TPOTs. Every other case falls
/// to the kernels rung: the device factors fitted on the H200 kernel steps (another source), host
/// and communication factors at the priors — the page's vLLM points (no other page holds a vLLM
/// V0 run) and the seed runs. Measured over the published points: output throughput 5.20 % over
/// 64 rows (bound 5.5 %), median TPOT 3.28 % over 8 (bound 3.5 %), median TTFT 11.75 % over 8
/// (bound 12 %), median E2E 14.99 % over 8 (bound 15 %). Before the family rung lent as fitted
/// (every one on the kernels rung): throughput 6.13 %, TPOT 11.35 %, TTFT 10.12 %, E2E 22.02 % —
/// the four SGLang points +13 … +40 % too slow in TPOT at the priors' 3 ms host time per step.
/// Each ShareGPT point is predicted by its median over the samples of nine seeds (`workload.seeds`): the sample cannot
/// be rebuilt, and the source's seed alone gave TPOT 11.16 %, TTFT 11.96 %, E2E 37.85 % (kernels
/// rung; its sample's median output 149 tokens, where seeds 2 and 3 give 130 and 117). Before the
/// kernels rung, with the priors' device factors (no kernel floor; and before vLLM V0's async
/// output processing): throughput 12.0 %, TPOT 21.8 %, TTFT 19.0 %, E2E 12.4 % — their too-fast
/// decode had hidden that the rebuilt ShareGPT sample's outputs are longer than the real one's.
/// Before the model class and the prior rung the family rung trained the Llama points on the
/// DeepSeek runs: TPOT 1222 %.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn leave_source_out_published_stays_under_the_measured_bound() {
    if common::data_dir().is_none() {
        return;
    }
    let residuals = shared_output("residuals.csv");
    let v = validate_json(&["--leave-group-out", "source", "--residuals", residuals.to_str().unwrap()]);
    assert_eq!(v["mode"], "leave-group-out source");
    // The built-in residual table (the error bars' data) is current for these cases: its rows
    // other than the silicon sample's (`--cases '*'` adds them) are the ones written here.
    let written = std::fs::read_to_string(&residuals).unwrap();
    let built_in = std::fs::read_to_string(crate_dir().join("calibration/residuals.csv")).unwrap();
    let silicon = ",https://github.com/ai-dynamo/aiconfigurator,";
    let kept: Vec<&str> = built_in.lines().filter(|l| !l.contains(silicon)).collect();
    assert_eq!(
        written.lines().collect::<Vec<_>>(),
        kept,
        "calibration/residuals.csv is stale: write it again with `cachesim validate --data D --leave-group-out source \
         --cases '*' --residuals calibration/residuals.csv`"
    );
    assert!(kept.len() > 100 && built_in.lines().count() > kept.len() + 1000, "{} rows", kept.len());
    for (metric, rows, bound) in [
        ("output_throughput", 64, 5.5),
        ("median_tpot_ms", 8, 3.5),
        ("median_ttft_ms", 8, 12.0),
        ("median_e2e_latency_ms", 8, 15.0),
    ] {
        let s = &v["held_out_published"][metric];
        let m = s["median_abs_error_pct"].as_f64().unwrap();
        assert_eq!(s["cases"], rows, "{metric}");
        assert!(m < bound, "published leave-one-source-out {metric}: median |error| {m:.2} % (bound {bound} %)");
    }
    let case = |name: &str| v["cases"].as_array().unwrap().iter().find(|c| c["case"] == name).unwrap().clone();
    for name in ["P002", "vllm-ttft-64seq-6144btk"] {
        let c = case(name);
        assert_eq!((&c["refit"], &c["rung"]), (&"group-out (kernel device)".into(), &"kernels".into()), "{c}");
    }
    // An MoE case borrows the kernel steps' device factors too, as `run` does with no fitted
    // profile (the composed prior): they are the device's, whatever the model.
    for name in ["h20-dsr1-sglang-tp16-mtp", "h20-dsr1-vllm-tp8pp2"] {
        let c = case(name);
        assert_eq!((&c["refit"], &c["rung"]), (&"group-out (kernel device)".into(), &"kernels".into()), "{c}");
    }
    let on = case("P002")["refit_on"].as_str().unwrap().to_string();
    assert!(
        on.starts_with("the device factors of h200-kernels (fitted on h200-llama8b-steps, kernel steps outside")
            && on.ends_with(
                "no transferable vllm-v0 profile was fitted on a case of its model class (dense) outside its group"
            ),
        "{on}"
    );
    // The SGLang points: the silicon sample's SGLang profile as fitted (no refit), though
    // `--cases` does not select its rows.
    for name in ["P001", "P003", "P005", "P007"] {
        let c = case(name);
        assert_eq!((&c["refit"], &c["rung"]), (&"group-out".into(), &"family".into()), "{c}");
        let on = c["refit_on"].as_str().unwrap();
        assert!(
            on.starts_with("the sglang family's factors as fitted in h100-sxm-sglang-qwen3 (on 26 cases: aic-h100/")
                && on.ends_with("; outside its group, model class dense)"),
            "{on}"
        );
    }
    // The TensorRT-LLM points, on the H100 and on the H200 (no TensorRT-LLM profile of the H200
    // is fitted outside their page: the one fitted on the most cases lends).
    for name in ["P049", "P059"] {
        let c = case(name);
        assert_eq!((&c["refit"], &c["rung"]), (&"group-out".into(), &"family".into()), "{c}");
        let on = c["refit_on"].as_str().unwrap();
        assert!(
            on.starts_with("the trtllm family's factors as fitted in h100-sxm-trtllm-qwen3 (on 35 cases: aic-h100/"),
            "{on}"
        );
    }
}

/// A published ShareGPT point whose sample cannot be rebuilt (`workload.seeds = 9`) is predicted
/// by each figure's median over its seeds' runs: exactly what `cachesim run --seeds 9` reports
/// for the same deployment and workload (P001's flags, priced by the profile fitted on it).
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn a_seeded_case_is_predicted_as_run_seeds_reports() {
    let Some(data) = common::data_dir() else { return };
    let trace = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
    let case = std::fs::read_to_string(crate_dir().join("calibration/cases/P001.toml")).unwrap();
    assert!(case.contains("\nseed = 1\nseeds = 9\n"), "P001's workload changed: update this test");
    let run: serde_json::Value = serde_json::from_str(&ok(&[
        "--gpu",
        "a100-80gb",
        "--model",
        "llama-3.1-8b",
        "--engine-version",
        "sglang@0.5",
        "--disable-overlap-schedule",
        "--policy",
        "none",
        "--mem-fraction-static",
        "0.88",
        "--trace",
        trace.to_str().unwrap(),
        "--turns",
        "first",
        "--dataset-filter",
        "vllm",
        "--num-prompts",
        "1200",
        "--request-rate",
        "4",
        "--report-style",
        "sglang",
        "--seed",
        "1",
        "--seeds",
        "9",
        "--json",
    ]))
    .unwrap();
    let rows: Vec<_> =
        validate_gated()["rows"].as_array().unwrap().iter().filter(|r| r["case"] == "P001").cloned().collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in rows {
        let m = r["metric"].as_str().unwrap();
        let spread = &run["metrics"][m];
        assert_eq!(spread["per_seed"].as_array().map(Vec::len), Some(9), "{m}: {spread}");
        assert_eq!(r["predicted"].as_f64(), spread["median"].as_f64(), "{m}");
    }
}

/// The seed sweep: fitted on the 64-sequence row alone (unknown hardware: a step law), the
/// 16-sequence row's queueing cliff appears (real median TTFT 10.5 s against 376 ms) and is
/// predicted within 5 %; every held-out figure of both other rows (throughput, median TTFT)
/// within 6 % (measured: 5.1 % at most, the 48-sequence TTFT).
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn seed_sweep_cliff_is_predicted() {
    if common::data_dir().is_none() {
        return;
    }
    let v = validate_gated();
    let get = |case: &str, metric: &str| -> (f64, f64) {
        let r = v["rows"].as_array().unwrap().iter().find(|r| r["case"] == case && r["metric"] == metric).unwrap();
        (r["measured"].as_f64().unwrap(), r["predicted"].as_f64().unwrap())
    };
    let (m64, p64) = get("vllm-ttft-64seq-6144btk", "median_ttft_ms");
    let (m16, p16) = get("seed-sweep-plan1", "median_ttft_ms");
    assert!(m16 / m64 > 20.0 && p16 / p64 > 20.0, "cliff: real {m16}/{m64}, predicted {p16}/{p64}");
    assert!((p16 / m16 - 1.0).abs() < 0.05, "16 seqs: predicted {p16}, real {m16}");
    for case in SEED_HELD_OUT {
        for metric in ["output_throughput", "median_ttft_ms", "request_throughput"] {
            let (m, p) = get(case, metric);
            assert!((p / m - 1.0).abs() < 0.06, "{case} {metric}: predicted {p}, real {m}");
        }
    }
}

/// The seed sweep's cases carry the figures of `ttft_sweep.csv`, row by row.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn seed_sweep_cases_agree_with_the_table() {
    let Some(dir) = calibration_dir() else { return };
    let mut rd = csv::Reader::from_path(dir.join("ttft_sweep.csv")).unwrap();
    let mut seen = 0;
    for rec in rd.deserialize::<std::collections::BTreeMap<String, String>>() {
        let row = rec.unwrap();
        let file = match row["plan"].as_str() {
            "plan7" => continue, // the fitted row, read from its report
            plan => crate_dir().join(format!("calibration/cases/seed-sweep-{plan}.toml")),
        };
        let c = cachesim::calibrate::case::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let num = |k: &str| row[k].parse::<f64>().unwrap();
        assert_eq!(c.case.measured["output_throughput"], num("output_tok_s"));
        assert_eq!(c.case.measured["median_ttft_ms"], num("median_ttft_ms"));
        assert_eq!(c.case.measured["request_throughput"], num("request_throughput"));
        assert_eq!(c.case.workload.request_rate.as_deref(), Some(row["request_rate"].as_str()));
        let flags = &c.case.deployment.flags;
        assert_eq!(
            flags[..4],
            ["--max-num-seqs", &row["max_num_seqs"], "--max-num-batched-tokens", &row["max_num_batched_tokens"]]
        );
        seen += 1;
    }
    assert_eq!(seen, 2);
}

/// A fit is deterministic (same inputs, same profile bytes) and its profile drives `run`.
#[test]
fn fit_is_deterministic_and_run_uses_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let cases = crate_dir().join("calibration/cases");
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // `calibrate --fit` on the seed sweep's 64-sequence row, 8 iterations, to `out`.
    let fit_args = |out: &Path| -> Vec<String> {
        let (cases, out) = (cases.to_str().unwrap(), out.to_str().unwrap());
        ["calibrate", "--fit", "--cases", "vllm-ttft-*", "--cases-dir", cases, "--out", out, "--max-iters", "8"]
            .map(String::from)
            .to_vec()
    };
    let fit = |d: &Path| {
        let out = d.join("p.toml");
        let args = fit_args(&out);
        let text = ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(text.contains("Leave-one-out: not run (one case, or --no-loo)"), "{text}");
        let body = std::fs::read_to_string(&out).unwrap();
        body.replace(out.to_str().unwrap(), "OUT")
    };
    let (a, b) = (fit(d1.path()), fit(d2.path()));
    assert_eq!(a, b);
    let p = cachesim::calibration::profile::parse(Path::new("p.toml"), &a).unwrap();
    assert_eq!(p.name, "p");
    assert_eq!((p.gpu.as_str(), p.engine.as_str()), ("v100", "vllm"));
    assert_eq!(p.fit.cases, ["vllm-ttft-64seq-6144btk"]);
    assert_eq!(
        p.fit.held,
        [
            "comm_bw: no case runs tensor parallel",
            "comm_latency_s: no case runs tensor parallel",
            "kernel_floor_s: no kernel step case: kept at the start's 0.00 µs",
            "eager_layer_launch_s: no eager kernel step row (serving runs never use it)"
        ]
    );
    assert_eq!(p.fit.residuals.len(), 3);

    // `--factors`: only the named factors move, every other one stays at the start's (the
    // priors here), the kernel floor included though a serving case constrains it; the record
    // keeps the list, so a refit with the profile's own options fits the same ones.
    let only = d1.path().join("only.toml");
    let base = fit_args(&only);
    let base: Vec<&str> = base.iter().map(String::as_str).collect();
    let args = [&base[..], &["--factors", "kernel_floor_s,step_overhead_s"]].concat();
    ok(&args);
    let q = cachesim::calibration::profile::read(&only).unwrap();
    assert_eq!(q.fit.fitted, ["step_overhead_s", "kernel_floor_s"]);
    assert_eq!(q.fit.only, ["kernel_floor_s", "step_overhead_s"]);
    assert!(q.fit.command.ends_with("--factors kernel_floor_s,step_overhead_s"), "{}", q.fit.command);
    let prior = cachesim::cost::Efficiency::default();
    assert_eq!(
        (q.efficiency.gemm_flops, q.efficiency.mem_bw, q.efficiency.per_seq_overhead_s),
        (prior.gemm_flops, prior.mem_bw, prior.per_seq_overhead_s)
    );
    assert!(q.fit.held.contains(&"mem_bw: held at the start's 0.800 (--factors)".to_string()), "{:?}", q.fit.held);
    assert_eq!(q.fit.options().only, ["kernel_floor_s", "step_overhead_s"]);
    let err = fails(&[&base[..], &["--factors", "gemm,mem_bw"]].concat());
    assert!(err.contains("--factors gemm,mem_bw: `gemm` is not a factor (factors: gemm_flops,"), "{err}");

    // run: the built-in profile by default where one matches, the raw roofline with `none`,
    // a file when given; the echo says which.
    let base = ["run", "--gpu", "a100-80gb", "--engine", "sglang", "--request-rate", "4", "--json"];
    let json =
        |extra: &[&str]| -> serde_json::Value { serde_json::from_str(&ok(&[&base[..], extra].concat())).unwrap() };
    let auto = json(&[]);
    assert!(auto["config"]["calibration"]
        .as_str()
        .unwrap()
        .starts_with("a100-80gb-sglang (calibration/profiles/a100-80gb-sglang.toml, fitted on P001, P009; leave-one-out median |error| "));
    let none = json(&["--calibration", "none"]);
    assert_eq!(none["config"]["calibration"], "none (raw roofline, --calibration none)");
    assert_eq!(none["config"]["efficiency"]["step_overhead_s"], 0.003);
    assert_ne!(auto["median_tpot_ms"], none["median_tpot_ms"]);
    let file = d1.path().join("p.toml");
    let own = json(&["--calibration", file.to_str().unwrap()]);
    // (serde_json's default float parsing may differ from the exact value by an ulp)
    assert!((own["config"]["efficiency"]["mem_bw"].as_f64().unwrap() - p.efficiency.mem_bw).abs() < 1e-12);
    let text = ok(&["run", "--gpu", "h100-sxm"]);
    assert!(text.contains("\nStep time:      roofline · calibration prior (no fitted profile for h100-sxm / vllm / llama-3.1-8b): device: the Hopper family's prior, measured on an h200: h200-kernels"), "{text}");
    let err = fails(&["run", "--calibration", dir.path().join("missing.toml").to_str().unwrap()]);
    assert!(err.contains("missing.toml"), "{err}");
    // `kernels`: the composed prior — the kernel steps' device factors, and SGLang's engine
    // piece (its host time, per-kernel floor and collective latency as fitted on the H100
    // Qwen3-32B silicon rows with those device factors held) — even where a fitted profile
    // matches; for an MoE model the echo says its own kernels are not measured.
    let kernels = json(&["--calibration", "kernels"]);
    let echo = kernels["config"]["calibration"].as_str().unwrap();
    assert!(
        echo.starts_with(
            "kernels (the composed prior, --calibration kernels): device: borrowed, no Ampere GPU is measured"
        ),
        "{echo}"
    );
    assert!(echo.contains("; engine: sglang's own factors, fitted on 26 cases: aic-h100/"), "{echo}");
    let (_, piece) =
        cachesim::calibration::prior::engine_piece(cachesim::engine::EngineKind::Sglang, |_| true).unwrap();
    assert_eq!(piece.name, "h100-sxm-sglang-qwen3");
    let e = &kernels["config"]["efficiency"];
    // (serde_json's default float parsing may differ from the exact value by an ulp)
    let near = |k: &str, v: f64| assert!((e[k].as_f64().unwrap() / v - 1.0).abs() < 1e-12, "{k}: {e}");
    near("step_overhead_s", piece.efficiency.step_overhead_s);
    near("kernel_floor_s", piece.efficiency.kernel_floor_s);
    near("gemm_flops", cachesim::calibration::profile::builtin_kernels().1.efficiency.gemm_flops);
    let moe = ok(&[
        "run",
        "--model",
        "deepseek-r1",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--calibration",
        "kernels",
        "--num-prompts",
        "4",
    ]);
    assert!(moe.contains("deepseek-r1 is MoE, whose own kernels are not measured)"), "{moe}");
}

/// The three expressible seed deployments run their deployment files on the seed workload
/// (1,000 ShareGPT first turns at rate inf, each case's seed) and are compared metric by metric
/// with their reports, measured values exactly the parsed report's, token totals within 1 %;
/// each is priced by its built-in profile, fitted on it, so it is fitted rather than held out
/// (outside the held-out summary and gate). The 1P1D run is listed as not expressible.
/// `--csv` writes the same rows with each case's role. (Validation at one and two threads gives
/// the same output: `calibration_fit`.)
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn seed_deployments_are_compared_with_their_reports() {
    if common::data_dir().is_none() {
        return;
    }
    let v = validate_gated();
    let rows = v["rows"].as_array().unwrap();
    let cases = v["cases"].as_array().unwrap();
    for (seed, profile) in SEED_DEPLOYMENTS.iter().zip(SEED_PROFILES) {
        let c = cases.iter().find(|c| c["case"] == *seed).unwrap_or_else(|| panic!("{seed} not run"));
        assert_eq!((c["fitted"].as_bool(), c["no_profile"].as_bool()), (Some(true), Some(false)), "{seed}");
        let echo = format!("{profile} (calibration/profiles/{profile}.toml, fitted on {seed}; fit median |error| ");
        assert!(c["calibration"].as_str().unwrap().starts_with(&echo), "{c}");
        let measured = report::read(&crate_dir().join(format!("calibration/reports/{seed}.txt"))).unwrap();
        let mine: Vec<&serde_json::Value> = rows.iter().filter(|r| r["case"] == *seed).collect();
        let metrics: Vec<&str> = mine.iter().map(|r| r["metric"].as_str().unwrap()).collect();
        let want: Vec<&str> =
            cachesim::calibrate::case::METRICS.iter().copied().filter(|m| measured.get(m).is_some()).collect();
        assert_eq!(want.len(), 18, "{seed}");
        assert_eq!(metrics, want, "{seed}");
        for r in &mine {
            let m = r["metric"].as_str().unwrap();
            assert_eq!(r["measured"].as_f64(), measured.get(m), "{seed} {m}");
            assert!(r["predicted"].as_f64().unwrap() > 0.0, "{seed} {m}");
        }
        // Every request served, the token totals within 1 % of the report's.
        let done = mine.iter().find(|r| r["metric"] == "completed").unwrap();
        assert_eq!((done["measured"].as_f64(), done["predicted"].as_f64()), (Some(1000.0), Some(1000.0)));
        for m in ["total_input_tokens", "total_output_tokens"] {
            let r = mine.iter().find(|r| r["metric"] == m).unwrap();
            assert!(r["error_pct"].as_f64().unwrap().abs() <= 1.0, "{seed} {r}");
        }
    }
    let not = v["not_expressible"].as_array().unwrap();
    assert!(not.iter().any(|x| x["case"] == "v100-llama11b-1p1d"), "{not:?}");
    // The held-out summary is over the held-out cases alone: the seeds' raw rows stay out.
    let held: usize = PUBLISHED_HELD_OUT
        .iter()
        .chain(&SEED_HELD_OUT)
        .map(|h| rows.iter().filter(|r| r["case"] == *h && r["metric"] == "median_ttft_ms").count())
        .sum();
    assert_eq!(v["held_out"]["median_ttft_ms"]["cases"].as_u64(), Some(held as u64));
    // Per GPU and per engine: the H20 summary is over the two DeepSeek-R1 seeds alone.
    assert_eq!(
        v["by_gpu"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["a100-80gb", "h100-sxm", "h20", "h200", "v100"]
    );
    assert_eq!(
        v["by_engine"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["kernels", "sglang", "trtllm", "vllm", "vllm-v0"]
    );
    let h20_tpot: Vec<f64> = rows
        .iter()
        .filter(|r| r["case"].as_str().unwrap().starts_with("h20-") && r["metric"] == "median_tpot_ms")
        .map(|r| r["error_pct"].as_f64().unwrap().abs())
        .collect();
    let s = &v["by_gpu"]["h20"]["median_tpot_ms"];
    assert_eq!(s["cases"], 2);
    assert!((s["mape_pct"].as_f64().unwrap() - (h20_tpot[0] + h20_tpot[1]) / 2.0).abs() < 1e-9, "{s}");
    // The CSV: one row per JSON row, same figures, each case's role.
    let mut rd = csv::Reader::from_path(shared_output("gated.csv")).unwrap();
    assert_eq!(rd.headers().unwrap(), vec!["case", "metric", "measured", "predicted", "error_pct", "profile"]);
    let recs: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    assert_eq!(recs.len(), rows.len());
    for (rec, row) in recs.iter().zip(rows) {
        // A kernel step row's shape follows its case.
        let case = row["case"].as_str().unwrap().to_string();
        assert_eq!(rec[0], row["shape"].as_str().map_or(case.clone(), |s| format!("{case} {s}")));
        assert_eq!(rec[1], *row["metric"].as_str().unwrap());
        // (the CSV's and the JSON's float text may parse an ulp apart)
        let close = |text: &str, json: &serde_json::Value| {
            let (a, b) = (text.parse::<f64>().unwrap(), json.as_f64().unwrap());
            (a - b).abs() <= 1e-12 * b.abs().max(1.0)
        };
        assert!(close(&rec[2], &row["measured"]) && close(&rec[3], &row["predicted"]), "{rec:?}");
        assert!(close(&rec[4], &row["error_pct"]), "{rec:?}");
        let case = row["case"].as_str().unwrap();
        let want = if trt_case(&serde_json::json!(case)) {
            trt_role(case)
        } else if PUBLISHED_HELD_OUT.contains(&case)
            || SEED_HELD_OUT.contains(&case)
            || case.contains("rank-steps")
            || case == "h200-gemms"
            || case == "h200-attention"
        {
            "held-out"
        } else if ep_case(&serde_json::json!(case)) {
            "raw"
        } else {
            "fitted"
        };
        assert_eq!(&rec[5], want, "{case}");
    }
    // The text table says so too.
    let (text, _) = validate_text_failing();
    // The scatter: one legend entry per source (the published points' and the seed runs).
    let body = std::fs::read_to_string(shared_output("validate.svg")).unwrap();
    assert!(body.contains("\nseed runs\n") && body.contains("\ngithub.com/sgl-project\n"), "{body}");
    assert!(
        text.contains("\n  v100-llama11b-2dp-router (fitted on): v100-vllm (calibration/profiles/v100-vllm.toml"),
        "{text}"
    );
    assert!(text.contains("\n  v100-llama11b-1p1d: 953 of the presumed 1,000 requests failed"), "{text}");
    let line = text.lines().find(|l| l.starts_with("h20-dsr1-vllm-tp8pp2 ") && l.contains(" median_tpot_ms ")).unwrap();
    assert!(line.ends_with("  fitted") && line.contains("      341.77 "), "{line}");
}

/// Physics over the fitted profiles: under each built-in profile, on a deployment it prices
/// (its GPU, engine family and first model, at the smallest TP that starts), one sequence alone
/// never decodes slower than 32 at once — a fitted host or per-step factor must not make the
/// batch-1 TPOT exceed the loaded one.
#[test]
fn no_profile_makes_batch_one_tpot_exceed_the_loaded_one() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("r.jsonl");
    let t = trace.to_str().unwrap();
    let g = ["gen", "random", "--num-prompts", "64", "--input-len", "512", "--output-len", "64"];
    ok(&[&g[..], &["--range-ratio", "1.0", "-o", t]].concat());
    for (file, p) in cachesim::calibration::profile::builtin() {
        let model = &p.models[0];
        let base = ["--trace", t, "--engine", p.engine.as_str(), "--gpu", p.gpu.as_str(), "--model", model.as_str()];
        let layouts: [&[&str]; 5] =
            [&["--tp", "1"], &["--tp", "2"], &["--tp", "4"], &["--tp", "8"], &["--tp", "16", "--nnodes", "2"]];
        let tpot = |layout: &[&str], concurrency: &str| -> Option<f64> {
            let args =
                [&base[..], layout, &["--request-rate", "inf", "--max-concurrency", concurrency, "--json"]].concat();
            let out = cachesim(&args);
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            assert!(doc["config"]["calibration"].as_str().unwrap().starts_with(&p.name), "{file}: {}", doc["config"]);
            doc["median_tpot_ms"].as_f64()
        };
        let layout =
            layouts.iter().find(|l| tpot(l, "1").is_some()).unwrap_or_else(|| panic!("{file}: no layout starts"));
        let (one, loaded) = (tpot(layout, "1").unwrap(), tpot(layout, "32").unwrap());
        assert!(one <= loaded, "{file} ({layout:?}): batch-1 TPOT {one:.2} ms above the loaded {loaded:.2} ms");
    }
}

/// A silicon row no profile matches takes the composed prior with the B200's device piece (fitted
/// on B200 rows of the same sample) and its engine's piece (fitted on H100 rows of it): predicting
/// a B200 row, leave-one-GPU-out prices it without the device piece (it saw the GPU) but with the
/// engine piece (fitted on another group), leave-one-source-out without either (both saw its
/// source), and the row says so.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn the_engine_piece_is_held_out_with_its_group() {
    let Some(data) = common::data_dir() else { return };
    let row = "aic-b200/2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep1_637";
    let tpot = |mode: &[&str]| -> (f64, serde_json::Value) {
        let args: Vec<&str> = ["validate", "--data", data.to_str().unwrap(), "--cases", row, "--json"]
            .iter()
            .chain(mode)
            .copied()
            .collect();
        let d: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
        let r = d["rows"].as_array().unwrap().iter().find(|r| r["metric"] == "median_tpot_ms").unwrap();
        (r["predicted"].as_f64().unwrap(), d["cases"][0].clone())
    };
    let (default, case) = tpot(&[]);
    let words = case["calibration"].as_str().unwrap();
    assert!(
        words.contains("device: measured on this GPU through trtllm's serving runs of dense models")
            && words.contains("; engine: vllm's own factors, fitted on 18 cases"),
        "{case}"
    );
    let held_out = "the composed prior without the device pieces and vllm engine pieces fitted on its group";
    let (by_gpu, case) = tpot(&["--leave-group-out", "gpu"]);
    assert!(by_gpu > default * 1.2, "the Hopper device's price is slower: {by_gpu} against {default}");
    assert!(case["refit_on"].as_str().unwrap_or_default().starts_with(held_out), "{case}");
    let (by_source, case) = tpot(&["--leave-group-out", "source"]);
    assert!(by_source > by_gpu * 1.05, "the priors' host time is slower: {by_source} against {by_gpu}");
    assert!(case["refit_on"].as_str().unwrap_or_default().starts_with(held_out), "{case}");
}

/// The H20 SGLang seed report comes from sglang bench_serving before 0.4.3.post3 (no "P95 ITL"
/// row): its case runs with `--client-itl chunk`, the count that client made; a report of the
/// current layout would not.
#[test]
fn an_older_sglang_report_counts_chunks() {
    let cases = cachesim::calibrate::case::load_dir(std::path::Path::new("calibration/cases")).unwrap();
    let h20 = cases.iter().find(|c| c.case.case == "h20-dsr1-sglang-tp16-mtp").unwrap();
    assert!(h20.chunk_itl() && h20.measured.get("p95_itl_ms").is_none());
    let mut newer = h20.clone();
    newer.measured.metrics.insert("p95_itl_ms".into(), 1.0);
    assert!(!newer.chunk_itl());
    // The run's arguments name the data set, so they need the data folder.
    let Some(data) = common::data_dir() else { return };
    let args = h20.run_args(Some(&data)).unwrap();
    assert!(args.windows(2).any(|w| w == ["--client-itl", "chunk"]), "{args:?}");
    assert!(!newer.run_args(Some(&data)).unwrap().iter().any(|a| a == "--client-itl"));
}
