//! Error bars: `run` prints and `--json` carries the spread of cachesim's errors on the measured
//! runs nearest to the deployment (the built-in residual table), and the bars follow the
//! deployment: another GPU or engine draws on other rows.

use crate::common::{fails, ok};

fn bars(args: &[&str]) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&ok(&[args, &["--json"]].concat())).unwrap();
    v["error_bars"].as_array().unwrap().clone()
}

/// The sample on an H100 under vLLM: TTFT and TPOT bars from the H100 vLLM rows of the silicon
/// sample; no throughput bar, as no open-loop run's throughput was measured often enough; each
/// bar brackets the measured value as predicted / (1 + error).
#[test]
fn a_run_prints_and_returns_its_error_bars() {
    let b = bars(&["run"]);
    let metrics: Vec<&str> = b.iter().map(|b| b["metric"].as_str().unwrap()).collect();
    assert_eq!(metrics, ["median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"]);
    for bar in &b {
        let f = |k: &str| bar[k].as_f64().unwrap();
        let p = f("predicted");
        assert!((f("measured_low") - p / (1.0 + f("error_high_pct") / 100.0)).abs() < 1e-9 * p, "{bar}");
        assert!((f("measured_high") - p / (1.0 + f("error_low_pct") / 100.0)).abs() < 1e-9 * p, "{bar}");
        assert!(f("error_low_pct") <= f("error_median_pct") && f("error_median_pct") <= f("error_high_pct"), "{bar}");
        assert!(bar["rows"].as_u64().unwrap() >= 8, "{bar}");
    }
    assert_eq!(b[1]["nearest"], "same GPU, engine family and model class");
    let text = ok(&["run"]);
    let tail = text.split("==================================================\n").last().unwrap();
    assert!(tail.starts_with("Error bars: "), "{tail}");
    assert!(tail.contains("Output throughput (tok/s):   none: fewer than 8 measured runs"), "{tail}");
    let tpot = tail.lines().find(|l| l.trim_start().starts_with("Median TPOT")).unwrap();
    let (lo, hi) = (b[1]["measured_low"].as_f64().unwrap(), b[1]["measured_high"].as_f64().unwrap());
    assert!(tpot.contains(&format!("{lo:.2} … {hi:.2}")), "{tpot}");
}

/// A burst of requests is a closed kind of load: its throughput gets a bar. Another engine on
/// another GPU draws on other rows.
#[test]
fn the_bars_follow_the_deployment() {
    let burst = bars(&["run", "--request-rate", "inf", "--num-prompts", "50"]);
    assert_eq!(burst[0]["metric"], "output_throughput", "{burst:?}");
    let h100 = bars(&["run", "--engine", "sglang"]);
    let a100 = bars(&["run", "--engine", "sglang", "--gpu", "a100-80gb"]);
    let tpot = |b: &[serde_json::Value]| b.iter().find(|b| b["metric"] == "median_tpot_ms").unwrap().clone();
    assert_eq!(tpot(&h100)["nearest"], "same GPU, engine family and model class");
    assert_ne!(tpot(&a100)["nearest"], tpot(&h100)["nearest"], "{:?}", tpot(&a100));
    assert_ne!(tpot(&a100)["error_low_pct"], tpot(&h100)["error_low_pct"]);
}

#[test]
fn residuals_need_leave_one_source_out() {
    let err = fails(&["validate", "--residuals", "r.csv"]);
    assert!(err.contains("--residuals needs --leave-group-out source"), "{err}");
    let err = fails(&["validate", "--leave-group-out", "gpu", "--residuals", "r.csv"]);
    assert!(err.contains("--residuals needs --leave-group-out source"), "{err}");
}

/// Under `--seeds N` the bars are drawn around the medians over the seeds.
#[test]
fn seeds_bar_their_medians() {
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["run", "--num-prompts", "40", "--request-rate", "8", "--seeds", "3", "--json"]))
            .unwrap();
    let bars = v["error_bars"].as_array().unwrap();
    assert_eq!(bars.len(), 3, "{bars:?}");
    for b in bars {
        let metric = b["metric"].as_str().unwrap();
        assert_eq!(b["predicted"], v["metrics"][metric]["median"], "{metric}");
    }
    let text = ok(&["run", "--num-prompts", "40", "--request-rate", "8", "--seeds", "3"]);
    assert!(text.contains("\nError bars: "), "{text}");
}

/// A trace without times and no request rate is sent all at once, as `--request-rate inf`:
/// a burst, whose throughput gets a bar from the closed kinds of load.
#[test]
fn an_untimed_trace_is_a_burst() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("r.jsonl");
    let t = t.to_str().unwrap();
    ok(&["gen", "random", "--num-prompts", "20", "--input-len", "200", "--output-len", "50", "-o", t]);
    let plain = bars(&["run", "--trace", t]);
    assert_eq!(plain[0]["metric"], "output_throughput", "{plain:?}");
    assert_eq!(plain, bars(&["run", "--trace", t, "--request-rate", "inf"]));
}
